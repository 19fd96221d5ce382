"""PyTorch integration: ``torch.compile(module, backend="ember")`` and :func:`from_torch`.

Importing this package imports torch; ``import ember`` does not (``ember.from_torch`` imports it
on first use). The backend is registered with TorchDynamo through the ``torch_dynamo_backends``
entry point of ember's package metadata, so ``backend="ember"`` works once ember is installed.
See ``docs/torch.md``.
"""

from __future__ import annotations

from .api import TorchModule, from_torch
from .backend import CompiledGraph, EagerFallbackWarning, Options, ember_backend

__all__ = ["CompiledGraph", "EagerFallbackWarning", "Options", "TorchModule", "ember_backend", "from_torch"]
