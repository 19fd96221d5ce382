"""An FX graph from TorchDynamo to ONNX bytes, in memory, with its weights frozen.

TorchDynamo hands a backend a ``GraphModule`` whose placeholders are, in order, the call's
tensors, the symbolic sizes of a dynamic-shape graph (``SymInt``, plain ints at call time) and,
since torch 2.5 inlines ``nn.Module`` s, the module's parameters and buffers (marked with
``_dynamo_static_input_type``). :class:`GraphInputs` sorts them. :func:`export_onnx` wraps the
graph in a module that takes only the call's tensors, holds the weights as buffers (they become
ONNX initializers: constants ember folds and packs at compile time) and fixes the sizes to the
values of this call, then runs PyTorch's ONNX exporter into a ``BytesIO``.

The exporter is TorchScript's (``dynamo=False``): it exports a ResNet-18 graph in about 0.1 s and
needs no package besides torch. Where that exporter is gone (a torch without it), the
``torch.export`` based one (``dynamo=True``, which needs ``onnxscript``) is used instead.
``docs/torch.md`` has the measurements behind the choice.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import FrontendError

OPSET = 17

#: Exceptions PyTorch's ONNX exporters raise for a graph they cannot export (an operator
#: without an ONNX translation, an unsupported argument); the backend then partitions the
#: graph and runs those operators eagerly.
EXPORT_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, TypeError, ValueError, NotImplementedError,
                                                  AttributeError, IndexError, KeyError)


@dataclass
class GraphInputs:
    """The placeholders of a Dynamo graph, sorted: ``kinds[i]`` is ``"tensor"`` (an input of
    the call), ``"weight"`` (a parameter or buffer, frozen at compile time), ``"int"`` (a
    symbolic size or other scalar, fixed per compiled variant) or ``"other"``."""

    kinds: list[str]
    names: list[str]

    @staticmethod
    def of(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> GraphInputs:
        """Sort ``gm``'s placeholders using their metadata and the example values."""
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        kinds = []
        for node, ex in zip(phs, example_inputs):
            if isinstance(ex, torch.Tensor):
                static = node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")
                kinds.append("weight" if static is not None or isinstance(ex, torch.nn.Parameter) else "tensor")
            elif isinstance(ex, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
                kinds.append("int")
            else:
                kinds.append("other")
        return GraphInputs(kinds, [n.name for n in phs])

    @property
    def tensor_positions(self) -> list[int]:
        """Positions of the call's tensors among the graph's arguments."""
        return [i for i, k in enumerate(self.kinds) if k == "tensor"]


def concrete(a: Any) -> Any:
    """The value of a call argument for one compiled variant: a ``SymInt`` becomes the int it
    stands for in this trace, read from its hint so that Dynamo adds no guard (``int(s)`` would
    specialise the dynamic graph to this value); everything else is returned as is."""
    if isinstance(a, torch.SymInt):
        for attr in ("_hint", "hint"):
            v = getattr(a.node, attr, None)
            if isinstance(v, int):
                return v
        return int(a)
    return a


class _Frozen(torch.nn.Module):
    """``gm`` called with the tensors of one call; weights as buffers, scalars fixed."""

    def __init__(self, gm: torch.nn.Module, kinds: list[str], args: list[Any]):
        super().__init__()
        self.gm = gm
        self._plan: list[tuple[str, Any]] = []
        for k, (kind, a) in enumerate(zip(kinds, args)):
            if kind == "weight":
                self.register_buffer(f"w{k}", a.detach(), persistent=False)
                self._plan.append(("weight", f"w{k}"))
            elif kind == "tensor":
                self._plan.append(("tensor", None))
            else:
                self._plan.append(("value", a))

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        args = []
        for kind, v in self._plan:
            if kind == "tensor":
                args.append(next(it))
            elif kind == "weight":
                args.append(getattr(self, v))
            else:
                args.append(v)
        return self.gm(*args)


def training_ops(gm: torch.fx.GraphModule) -> list[str]:
    """Nodes of ``gm`` that compute differently in training mode (dropout, batch norm on batch
    statistics): an inference compiler would change their results."""
    found = []
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        name = getattr(n.target, "__name__", str(n.target))
        training = n.kwargs.get("training")
        if name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
            training = n.kwargs.get("training", n.args[2] if len(n.args) > 2 else True)
            p = n.kwargs.get("p", n.args[1] if len(n.args) > 1 else 0.5)
            if training and p:
                found.append(f"{name} ({n.name})")
        elif name == "batch_norm":
            training = n.kwargs.get("training", n.args[5] if len(n.args) > 5 else False)
            if training:
                found.append(f"{name} ({n.name})")
    return found


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """File descriptors 1 and 2 sent to /dev/null for the duration. The TorchScript exporter
    turns its C++ log on for every export and never off again (``setup_onnx_logging`` tests a
    function object for truth), so each export that fails prints the whole TorchScript graph to
    stdout; the exception raised says what failed."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no descriptors to silence
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
        yield
    finally:
        libc.fflush(None)  # what C++ wrote into stdio's buffers goes to /dev/null too
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def export_onnx(gm: torch.nn.Module, kinds: list[str], args: list[Any]) -> tuple[bytes, int]:
    """ONNX bytes of ``gm`` called with ``args`` (real tensors and values, one per placeholder,
    sorted by ``kinds`` as in :class:`GraphInputs`): inputs ``input_<k>`` for the k-th tensor of
    the call, outputs ``output_<j>``; and the number of outputs. Raises one of
    :data:`EXPORT_ERRORS` when PyTorch cannot export the graph, :class:`FrontendError` when an
    output is not a tensor."""
    tensors = tuple(a for kind, a in zip(kinds, args) if kind == "tensor")
    wrapper = _Frozen(gm, kinds, args).eval()
    with torch.no_grad():
        result = wrapper(*tensors)
    outs = result if isinstance(result, (tuple, list)) else (result,)
    bad = [type(o).__name__ for o in outs if not isinstance(o, torch.Tensor)]
    if bad:
        raise FrontendError(f"the graph returns values that are not tensors ({', '.join(bad)})")
    names_in = [f"input_{k}" for k in range(len(tensors))]
    names_out = [f"output_{j}" for j in range(len(outs))]
    buf = io.BytesIO()
    # No constant folding in the exporter: ember folds constants itself, and the exporter's folding
    # fails on CUDA graphs that mix device tensors with CPU scalar constants.
    with warnings.catch_warnings(), torch.no_grad(), _quiet_exporter():
        warnings.simplefilter("ignore")  # the exporters' deprecation and tracer notes
        try:
            torch.onnx.export(wrapper, tensors, buf, input_names=names_in, output_names=names_out,
                              opset_version=OPSET, dynamo=False, do_constant_folding=False)
        except TypeError as exc:  # a torch without the TorchScript exporter
            if "dynamo" not in str(exc):
                raise
            prog = torch.onnx.export(wrapper, tensors, input_names=names_in, output_names=names_out,
                                     opset_version=OPSET, dynamo=True, external_data=False)
            return prog.model_proto.SerializeToString(), len(outs)
    return buf.getvalue(), len(outs)
