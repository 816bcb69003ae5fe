"""The package version, in one place (``speedtronic.__version__``)."""

__version__ = "0.3.0"
