"""Miscellaneous operators."""
