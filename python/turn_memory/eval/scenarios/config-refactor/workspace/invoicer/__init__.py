__version__ = "2.6.0"
