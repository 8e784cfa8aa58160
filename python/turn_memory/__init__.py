"""turn-memory: continuous, losslessly recoverable context memory for DSH."""

__version__ = "0.1.0"
