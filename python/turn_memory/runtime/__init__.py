"""Shared runtime state below the features: the session mirror, the worker registry and the
tool every worker scope shares, the bounded worker run both features use, the public-tool
registry, the interfaces features offer each other, and `land()`, the one executor that
applies a plan through the port."""
