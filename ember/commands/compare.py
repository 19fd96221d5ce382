"""``ember compare MODEL --against onnxruntime [--precision float16]``: every intermediate tensor
of ember next to ONNX Runtime's, and the first node whose result drifts past the tolerance.

Both sides run the same ONNX model with every node output of the main graph added as a graph
output (so ember materialises them: it fuses less than in a normal compile), on the same inputs.
ONNX Runtime computes in the model's own types (the reference); ember in ``--precision``. A
float tensor's error is ``max|ember - ort| / max|ort|`` (normalised by the tensor's largest
value); integer and boolean tensors must match exactly. Exit status: 0 when every tensor is
within the tolerance, 1 when one is not (or on an error).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError
from .anchor import normalised_error, ort_run, ort_session
from .common import add_input_options, add_model_options, model_inputs, open_model, reported

#: Default tolerance of the normalised error per precision: float32 kernels reassociate sums
#: (a few ulps times the reduction length); TF32 keeps 10 mantissa bits in products; float16 11
#: bits with float32 statistics; bfloat16 8 bits.
TOLERANCE = {"float32": 1e-4, "tf32": 5e-3, "float16": 1e-2, "bfloat16": 5e-2}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``compare``."""
    p = sub.add_parser("compare", help="compare every intermediate tensor with ONNX Runtime's; name the first "
                       "node that drifts", description=__doc__.split("\n\n")[1] if __doc__ else None)
    add_model_options(p)
    add_input_options(p)
    p.add_argument("--against", choices=("onnxruntime",), default="onnxruntime", help="the reference")
    p.add_argument("--tol", type=float, default=None,
                   help="tolerance of the normalised error (default by precision: " +
                   ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items()) + ")")
    p.add_argument("--all", action="store_true", help="print every tensor, not only the worst and the first drift")
    p.set_defaults(func=run)


@dataclass
class TensorDiff:
    """One compared tensor: its producing ``node`` (name, op type, index in the graph), the
    ``value`` name, ``shape``, the normalised ``error`` (mismatches / size for integers) and
    the largest absolute difference."""

    index: int
    node: str
    op: str
    value: str
    shape: tuple[int, ...]
    error: float
    max_abs: float


def expose_intermediates(model: object) -> tuple[object, list[tuple[int, str, str, str]]]:
    """A copy of ``model`` (an onnx ModelProto) with every node output of the main graph whose
    type shape inference knows added as a graph output; and (node index, node name, op type,
    value) for each, in graph order."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    known = {vi.name: vi for vi in list(g.value_info) + list(g.output) if vi.type.HasField("tensor_type")}
    outputs = {o.name for o in g.output}
    out = onnx.ModelProto()
    out.CopyFrom(inferred)
    exposed = []
    for k, node in enumerate(g.node):
        for v in node.output:
            if not v:
                continue
            exposed.append((k, node.name or f"#{k}", node.op_type, v))
            if v not in outputs and v in known and known[v].type.tensor_type.elem_type:
                vi = onnx.ValueInfoProto()
                vi.CopyFrom(known[v])
                out.graph.output.append(vi)
                outputs.add(v)
    names = {o.name for o in out.graph.output}
    return out, [e for e in exposed if e[3] in names]


def run(args: argparse.Namespace) -> int:
    """Compare ``args.model`` with ONNX Runtime tensor by tensor."""
    import onnx

    with reported("compare") as status:
        if args.model.endswith(".ember"):
            raise ArgumentError("compare compiles the ONNX model with its intermediates exposed: give the ONNX file")
        if not os.path.isfile(args.model):
            raise ArgumentError(f"model file {args.model!r} does not exist")
        tol = args.tol if args.tol is not None else TOLERANCE[args.precision]
        exposed_model, exposed = expose_intermediates(onnx.load(args.model))
        with tempfile.TemporaryDirectory(prefix="ember-compare-") as tmp:
            path = os.path.join(tmp, "exposed.onnx")
            onnx.save(exposed_model, path)
            ns = argparse.Namespace(**{**vars(args), "model": path})
            model, _ = open_model(ns)
        feeds = model_inputs(args, model)
        ours = dict(zip(model.output_names, model.run(feeds)))
        sess, provider = ort_session(exposed_model.SerializeToString(), "llvm")
        names = [o.name for o in sess.get_outputs()]
        ref = dict(zip(names, ort_run(sess, feeds)))
        diffs = []
        for k, node, op, value in exposed:
            if value in ours and value in ref:
                err, mx = normalised_error(ours[value], ref[value])
                diffs.append(TensorDiff(k, node, op, value, tuple(np.shape(ref[value])), err, mx))
        first = next((d for d in diffs if not d.error <= tol), None)
        print(f"ember compare: {args.model}, ember {model.target} precision {args.precision} against onnxruntime "
              f"({provider}, the model's own types); {len(diffs)} tensors of {len(exposed)} node outputs; "
              f"tolerance {tol:g} of each tensor's largest value")
        shown = diffs if args.all else sorted(diffs, key=lambda d: -d.error)[:10]
        if not args.all:
            shown = sorted(shown, key=lambda d: d.index)
            print("the 10 largest errors, in graph order:")
        print(f"{'#':>5} {'node':<28} {'op':<18} {'output':<28} {'error':>10} {'max |diff|':>11}")
        for d in shown:
            mark = "  <- first past tolerance" if d is first else ("  (past tolerance)" if not d.error <= tol else "")
            print(f"{d.index:>5} {d.node[:28]:<28} {d.op[:18]:<18} {d.value[:28]:<28} {d.error:>10.2e} "
                  f"{d.max_abs:>11.3e}{mark}")
        if first is None:
            print(f"every tensor is within {tol:g}")
            return 0
        print(f"first node past the tolerance: #{first.index} {first.node!r} ({first.op}), output {first.value!r} "
              f"{list(first.shape)}: error {first.error:.3e} > {tol:g} (every earlier tensor is within it)")
        return 1
    return status[0]
