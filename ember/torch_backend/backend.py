"""The ``torch.compile`` backend: ``torch.compile(module, backend="ember")``.

TorchDynamo calls :func:`ember_backend` with each graph it captures. The graph is exported to
ONNX in memory (:mod:`ember.torch_backend.export`) and compiled by :func:`ember.compile`; the
returned callable runs it through :class:`~ember.torch_backend.runner.TorchRunner` (torch tensors
in and out, no copies, torch's current stream).

* **Shapes.** One compiled variant per concrete shape of the call's tensors (and value of its
  symbolic sizes): when Dynamo hands a dynamic-shape graph, each new shape is compiled on first
  use; the ``max_variants`` most recently used are kept (8 by default).
* **Fallback.** A graph that does not compile whole is split (:mod:`ember.torch_backend.partition`):
  the subgraphs ember compiles run in ember, the operators it cannot compile run eagerly in
  PyTorch, with one :class:`EagerFallbackWarning` per graph listing them.
* **Inference only.** Weights (parameters and buffers) are frozen into the compiled model at
  compile time, as ``torch_tensorrt`` and inductor's freezing do; a call whose weights are other
  tensors or were changed in place (their version counters moved) compiles the graph again.
  Graphs in training mode (dropout, batch norm on batch statistics) are refused with an
  :class:`~ember.errors.EmberError`; when autograd records (grad mode on and an input or weight
  requiring grad), the outputs carry a gradient function that raises a clear error if a backward
  pass reaches it.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import EmberError, FrontendError
from .export import EXPORT_ERRORS, GraphInputs, concrete, export_onnx, training_ops
from .partition import example_values, split
from .runner import TorchRunner, check_same_device


class EagerFallbackWarning(RuntimeWarning):
    """Part of a graph runs eagerly in PyTorch because ember cannot compile it."""


@dataclass(frozen=True)
class Options:
    """What ``torch.compile(..., backend="ember", options={...})`` and :func:`ember.from_torch`
    accept: ``target`` (None: ``"llvm"`` for CPU tensors, ``"cuda"`` for CUDA ones),
    ``precision`` and ``cuda_graphs`` as for :func:`ember.compile`, ``max_variants`` (compiled
    shapes kept per graph), ``fallback`` (False: raise instead of running unsupported operators
    eagerly)."""

    target: str | None = None
    precision: str = "float32"
    cuda_graphs: bool = True
    max_variants: int = 8
    fallback: bool = True

    @staticmethod
    def of(options: dict[str, Any] | None) -> Options:
        """Options from a dict; an unknown key is an EmberError naming the valid ones."""
        opts = dict(options or {})
        valid = set(Options.__dataclass_fields__)
        bad = sorted(set(opts) - valid)
        if bad:
            raise EmberError(f"unknown option(s) for the ember backend: {', '.join(bad)} "
                             f"(valid: {', '.join(sorted(valid))})")
        return Options(**opts)


def _version(t: torch.Tensor) -> int:
    """A tensor's version counter (-1 for inference tensors, which have none)."""
    try:
        return t._version
    except RuntimeError:  # "Inference tensors do not track version counter"
        return -1


class _InferenceOnly(torch.autograd.Function):
    """Gives ember's outputs a gradient function that refuses: ember computes no gradients."""

    @staticmethod
    def forward(ctx: Any, n_out: int, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        return tuple(t.detach() for t in tensors[:n_out])

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        raise EmberError(
            "ember's torch.compile backend is for inference: it computes no gradients. Run the compiled "
            "module under torch.no_grad() / torch.inference_mode(), or train with the default backend "
            "(torch.compile(module)) and compile for ember afterwards")


class CompiledGraph:
    """One Dynamo graph run by ember: compiled per concrete shape (see the module doc).

    ``kinds`` sorts the graph's placeholders (:class:`~ember.torch_backend.export.GraphInputs`).
    The first variant is compiled for ``example_inputs`` in the constructor, so compile errors
    surface inside ``torch.compile``'s first call."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list[Any], kinds: list[str], options: Options):
        self.gm = gm
        self.kinds = kinds
        self.options = options
        self._tensor_pos = [i for i, k in enumerate(kinds) if k == "tensor"]
        self._value_pos = [i for i, k in enumerate(kinds) if k in ("int", "other")]
        self._weights_need_grad = any(a.requires_grad for a, k in zip(example_inputs, kinds) if k == "weight")
        self._weight_pos = [i for i, k in enumerate(kinds) if k == "weight"]
        #: The weights the variants were compiled with, and their version counters (bumped by
        #: every in-place change, ``load_state_dict`` included).
        self._weights = [(example_inputs[i], _version(example_inputs[i])) for i in self._weight_pos]
        self.variants: OrderedDict[tuple[Any, ...], TorchRunner] = OrderedDict()
        self._last: TorchRunner | None = None
        self._lock = threading.RLock()
        #: Shapes compiled so far (evicted ones included).
        self.compiles = 0
        out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        self._tuple_out = isinstance(out_node.args[0], (tuple, list))
        self.add_variant(example_inputs)

    def _key(self, args: tuple[Any, ...] | list[Any]) -> tuple[Any, ...]:
        """The variant key of a call (what :meth:`__call__` computes inline)."""
        return tuple([args[i].shape for i in self._tensor_pos]) + tuple([args[i] for i in self._value_pos])

    def add_variant(self, args: tuple[Any, ...] | list[Any]) -> TorchRunner:
        """Compile the graph for the shapes of ``args`` (raises FrontendError / EmberError
        when ember cannot: the caller falls back)."""
        from ..driver import compile as ember_compile

        args = [concrete(a) for a in args]
        data, n_out = export_onnx(self.gm, self.kinds, args)
        device = check_same_device([a for a in args if isinstance(a, torch.Tensor)])
        target = self.options.target or ("cuda" if device.type == "cuda" else "llvm")
        model = ember_compile(data, target=target, precision=self.options.precision,
                              cuda_graphs=self.options.cuda_graphs)
        if len(model.output_names) != n_out:
            raise FrontendError(f"the exported graph has {len(model.output_names)} outputs, the FX graph {n_out}")
        runner = TorchRunner(model)
        with self._lock:
            self.variants[self._key(args)] = runner
            self.compiles += 1
            while len(self.variants) > self.options.max_variants:
                self.variants.popitem(last=False)  # the least recently used
        return runner

    def _refreeze(self, args: tuple[Any, ...]) -> None:
        """The weights changed since they were frozen (replaced, or modified in place): drop
        every variant, so the next ones are compiled with the new values, and say so once."""
        warnings.warn("ember: the module's weights changed since they were compiled in; compiling again with "
                      "the new values", RuntimeWarning, stacklevel=3)
        with self._lock:
            self.variants.clear()
            self._last = None
            self._weights = [(args[i], _version(args[i])) for i in self._weight_pos]

    @property
    def model(self) -> Any:
        """The ember model of the most recently used shape."""
        return next(reversed(self.variants.values())).model

    def __call__(self, *args: Any) -> Any:
        tensors = [args[i] for i in self._tensor_pos]
        key = tuple([t.shape for t in tensors])
        if self._value_pos:
            key += tuple([args[i] for i in self._value_pos])
        for i, (w, version) in zip(self._weight_pos, self._weights):
            a = args[i]
            if a is not w or _version(a) != version:
                self._refreeze(args)
                break
        runner = self.variants.get(key)
        if runner is None:
            with self._lock:  # one compile per new shape, also when threads call at once
                runner = self.variants.get(key) or self.add_variant(args)
        elif runner is not self._last:
            self.variants.move_to_end(key)  # least recently used goes first
        self._last = runner
        outs = runner(tensors)
        if torch.is_grad_enabled():
            grads = [t for t in tensors if t.requires_grad]
            if grads or self._weights_need_grad:
                weights = [a for a, k in zip(args, self.kinds) if k == "weight" and a.requires_grad]
                outs = list(_InferenceOnly.apply(len(outs), *outs, *grads, *weights))
        return tuple(outs) if self._tuple_out else outs[0]


class _EmberSubmodule(torch.nn.Module):
    """A compiled submodule of a split graph (called from the graph's eager code)."""

    def __init__(self, compiled: CompiledGraph):
        super().__init__()
        self.compiled = compiled

    def forward(self, *args: Any) -> Any:
        return self.compiled(*args)


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], options: Options) -> Callable[..., Any]:
    """The callable that runs ``gm``: one :class:`CompiledGraph`, or when that fails, ``gm``
    split into ember subgraphs and eager operators (one warning)."""
    inputs = GraphInputs.of(gm, example_inputs)
    bad = training_ops(gm)
    if bad:
        raise EmberError(
            f"the module is in training mode ({', '.join(bad)}): ember compiles inference graphs; "
            "call module.eval() before torch.compile(..., backend='ember')")
    if "other" in inputs.kinds:
        raise EmberError(f"the graph takes inputs ember cannot bind: "
                         f"{[n for n, k in zip(inputs.names, inputs.kinds) if k == 'other']}")
    try:
        return CompiledGraph(gm, example_inputs, inputs.kinds, options)
    except (EmberError, *EXPORT_ERRORS) as exc:
        if not options.fallback:
            if isinstance(exc, EmberError):
                raise
            raise FrontendError(f"ember cannot compile this graph: PyTorch's ONNX exporter says "
                                f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]} (fallback=True runs such "
                                "operators eagerly)") from exc
        first_error = exc
    return _split_graph(gm, example_inputs, inputs, options, first_error)


def _split_graph(gm: torch.fx.GraphModule, example_inputs: list[Any], inputs: GraphInputs, options: Options,
                 first_error: BaseException) -> Callable[..., Any]:
    args = [concrete(a) for a in example_inputs]
    values = example_values(gm, args)
    fused, unsupported = split(gm, values)
    placeholder_kind = dict(zip(inputs.names, inputs.kinds))
    fused_values = example_values(fused, args)
    failed: list[str] = []
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not str(node.target).startswith("fused_"):
            continue
        sub = fused.get_submodule(str(node.target))
        sub_args = [fused_values[a] if isinstance(a, torch.fx.Node) else a for a in node.args]
        kinds = []
        for a, v in zip(node.args, sub_args):
            if isinstance(a, torch.fx.Node) and a.op == "placeholder" and placeholder_kind.get(a.name) == "weight":
                kinds.append("weight")
            else:
                kinds.append("tensor" if isinstance(v, torch.Tensor) else "int")
        try:
            compiled = CompiledGraph(sub, sub_args, kinds, options)
        except (EmberError, *EXPORT_ERRORS) as exc:
            failed.append(f"{node.target} ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
            continue
        setattr(fused, str(node.target), _EmberSubmodule(compiled))
    fused.recompile()
    listed = ", ".join(f"{k} ({v})" for k, v in sorted(unsupported.items())) or "none"
    msg = (f"ember compiles this graph in parts and runs the rest eagerly in PyTorch. Operators ember cannot "
           f"compile: {listed}")
    if failed:
        msg += f"; subgraphs that failed to compile, run eagerly: {'; '.join(failed)}"
    if not unsupported:
        msg += f" (compiling the whole graph failed with {type(first_error).__name__}: " \
               f"{str(first_error).splitlines()[0][:300]})"
    warnings.warn(msg, EagerFallbackWarning, stacklevel=2)
    return fused.forward


def ember_backend(gm: torch.fx.GraphModule, example_inputs: list[Any],
                  options: dict[str, Any] | None = None, mode: str | None = None) -> Callable[..., Any]:
    """The TorchDynamo backend (registered as ``"ember"`` through the ``torch_dynamo_backends``
    entry point): compiles ``gm`` for the device of ``example_inputs`` (``options``: see
    :class:`Options`) and returns the callable Dynamo calls instead of ``gm``. ``mode`` (what
    ``torch.compile(mode=...)`` passes) is inductor's; ember has none besides the default."""
    if mode not in (None, "default"):
        raise EmberError(f"torch.compile(mode={mode!r}) is inductor's; the ember backend takes options instead "
                         f"(options={{'precision': 'float16', 'cuda_graphs': True, ...}})")
    return compile_graph(gm, example_inputs, Options.of(options))
