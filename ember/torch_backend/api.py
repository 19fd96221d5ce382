"""``ember.from_torch(module, example_inputs)``: a torch module compiled by ember, ahead of the
first real call.

It is ``torch.compile(module, backend=...)`` with ember's backend, called once on the example
inputs (so everything is compiled when it returns), plus access to what was compiled: the ember
models (:attr:`TorchModule.model`, :attr:`TorchModule.graphs`). Calls go through TorchDynamo's
guards, so a call with another shape compiles that shape, and Python code around graph breaks runs
as in eager mode.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import EmberError
from .backend import CompiledGraph, Options, compile_graph


class _RecordingBackend:
    """The ember backend with its options, keeping what it compiled."""

    def __init__(self, options: Options):
        self.options = options
        self.graphs: list[Any] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        fn = compile_graph(gm, example_inputs, self.options)
        self.graphs.append(fn)
        return fn


class TorchModule:
    """A torch module run by ember (see :func:`from_torch`). Call it as the module."""

    def __init__(self, module: torch.nn.Module, options: Options):
        self.module = module
        self._backend = _RecordingBackend(options)
        self._compiled = torch.compile(module, backend=self._backend)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)

    forward = __call__

    @property
    def graphs(self) -> list[Any]:
        """What each graph TorchDynamo captured became: a :class:`CompiledGraph` (run whole by
        ember) or the forward of a graph split between ember and eager PyTorch."""
        return list(self._backend.graphs)

    @property
    def model(self) -> Any:
        """The :class:`ember.Model` when the module compiled into one graph run whole by ember
        (for the most recent input shape); EmberError otherwise."""
        whole = [g for g in self._backend.graphs if isinstance(g, CompiledGraph)]
        if len(whole) != 1 or len(self._backend.graphs) != 1:
            raise EmberError(f"the module became {len(self._backend.graphs)} graph(s), {len(whole)} run whole by "
                             "ember; see .graphs")
        return whole[0].model


def from_torch(module: torch.nn.Module, example_inputs: Sequence[Any] | Any, target: str | None = None,
               precision: str = "float32", cuda_graphs: bool = True, fallback: bool = True,
               max_variants: int = 8) -> TorchModule:
    """Compile ``module`` with ember for ``example_inputs`` (a tensor, a sequence of positional
    arguments, or a dict of keyword arguments) and return a callable :class:`TorchModule` taking
    and returning torch tensors.

    ``target``: None picks ``"llvm"`` for CPU tensors and ``"cuda"`` for CUDA ones;
    ``precision``, ``cuda_graphs`` as for :func:`ember.compile`; ``fallback``: run operators
    ember cannot compile eagerly (one warning), or raise. Weights are frozen at compile time; the
    module must be in eval mode (inference only). Needs torch."""
    if not isinstance(module, torch.nn.Module):
        raise EmberError(f"from_torch takes a torch.nn.Module, got {type(module).__name__}")
    kwargs: dict[str, Any] = {}
    if isinstance(example_inputs, dict):  # keyword arguments (attention_mask=..., as transformers takes)
        args, kwargs = (), dict(example_inputs)
    else:
        args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    opts = Options(target=target, precision=precision, cuda_graphs=cuda_graphs, fallback=fallback,
                   max_variants=max_variants)
    compiled = TorchModule(module, opts)
    try:
        with torch.no_grad():
            compiled(*args, **kwargs)
    except torch._dynamo.exc.BackendCompilerFailed as exc:  # ember's own error, not Dynamo's wrapper
        inner = getattr(exc, "inner_exception", None)
        if isinstance(inner, EmberError):
            raise inner from None
        raise
    if not compiled.graphs:
        warnings.warn("ember.from_torch: TorchDynamo captured no graph of this module, so it runs eagerly in "
                      "PyTorch (Dynamo skips nn.LSTM/GRU/RNN unless torch._dynamo.config.allow_rnn = True)",
                      RuntimeWarning, stacklevel=2)
    return compiled
