"""The version of ember (a leaf module, so every layer can read it)."""

__version__ = "0.1.0"
