"""``ember.nd``: arrays on devices (``ember.nd.array(x, dev)``, ``ember.nd.empty``...)."""

from .runtime.ndarray import NDArray, array, empty, from_dlpack

__all__ = ["NDArray", "array", "empty", "from_dlpack"]
