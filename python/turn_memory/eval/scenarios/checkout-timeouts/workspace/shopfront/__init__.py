"""shopfront: the storefront API."""

__version__ = "2.14.3"
