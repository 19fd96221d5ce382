"""Mutations of valid models for the fuzzer: bytes flipped, inserted, deleted or cut off, and
edits of the parsed model's fields (attributes, initializer dimensions and data, input shapes,
names, node order, operator types, opsets, IR version).

:func:`mutated_model` takes a :class:`~tests.fuzz.models.Chooser` like the structured
generator, so Hypothesis and the long run share it. The inputs of a mutated model are made
from its (possibly edited) declared inputs by :func:`feeds_for`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from .models import Case, Chooser, seed_model

#: Values that break attribute and dimension arithmetic.
INTERESTING = [-(2**63), -(2**31), -(2**31) + 1, -100, -3, -2, -1, 0, 1, 2, 3, 7, 64, 2**16, 2**31 - 1, 2**31, 2**40,
               2**62]

#: Operators a node's type may be changed to.
OP_TYPES = ["Relu", "Add", "Transpose", "Concat", "Gemm", "MatMul", "Flatten", "Conv", "MaxPool", "Reshape",
            "Gather", "Slice", "Softmax", "Squeeze", "Unsqueeze", "Expand", "Tile", "Pad", "Split", "ReduceSum",
            "TopK", "CumSum", "Where", "Identity", "Shape", "ConstantOfShape", "Range", "OneHot", "NoSuchOp",
            "QLinearAdd", "ScatterND", "GatherND", "DepthToSpace", "ConvTranspose", "BatchNormalization", "Resize"]

MAX_FEED_ELEMENTS = 1 << 18


def mutated_model(ch: Chooser) -> Case:
    """A valid seed model with one to three mutations applied."""
    seed = seed_model(ch)
    data = seed.model
    notes = []
    for _ in range(ch.int(1, 3)):
        if ch.bool(0.3):
            data, what = _mutate_bytes(ch, data)
        else:
            try:
                m = onnx.load_from_string(data)
            except Exception:  # an earlier byte mutation made it unreadable: mutate bytes again
                data, what = _mutate_bytes(ch, data)
            else:
                try:
                    what = _mutate_fields(ch, m)
                    data = m.SerializeToString()
                except (UnicodeError, ValueError, TypeError):  # names an earlier byte flip broke
                    data, what = _mutate_bytes(ch, data)
        notes.append(what)
    feeds, shapes = feeds_for(data, np.random.default_rng(ch.int(0, 2**31)))
    return Case(data, feeds, input_shapes=shapes, note=f"{seed.note} | {'; '.join(notes)}")


def _mutate_bytes(ch: Chooser, data: bytes) -> tuple[bytes, str]:
    buf = bytearray(data)
    if not buf:
        return bytes([ch.int(0, 255)]), "empty -> one byte"
    kind = ch.int(0, 4)
    pos = ch.int(0, len(buf) - 1)
    if kind == 0:
        for _ in range(ch.int(1, 8)):
            p = ch.int(0, len(buf) - 1)
            buf[p] ^= 1 << ch.int(0, 7)
        return bytes(buf), "bit flips"
    if kind == 1:
        buf[pos] = ch.choice([0, 1, 0x7F, 0x80, 0xFF, ch.int(0, 255)])
        return bytes(buf), f"byte {pos} overwritten"
    if kind == 2:
        return bytes(buf[:pos]), f"truncated at {pos}"
    if kind == 3:
        n = ch.int(1, 16)
        return bytes(buf[:pos] + bytes(ch.int(0, 255) for _ in range(n)) + buf[pos:]), f"{n} bytes inserted"
    n = ch.int(1, 16)
    return bytes(buf[:pos] + buf[pos + n :]), f"{n} bytes deleted"


def _mutate_fields(ch: Chooser, m: Any) -> str:
    g = m.graph
    kinds = ["attr_int", "attr_ints", "init_dims", "init_dtype", "init_data", "input_dims", "rename_input",
             "swap_nodes", "dup_node", "drop_node", "op_type", "drop_attr", "attr_type", "opset", "domain",
             "ir_version", "output_name", "input_elem", "empty_input", "add_attr"]
    kind = ch.choice(kinds)
    nodes = list(g.node)
    if kind == "attr_int" or kind == "attr_ints" or kind == "drop_attr" or kind == "attr_type":
        attrs = [(n, a) for n in nodes for a in n.attribute]
        if not attrs:
            kind = "op_type"
        else:
            n, a = ch.choice(attrs)
            if kind == "drop_attr":
                n.attribute.remove(a)
                return f"{n.op_type}.{a.name} removed"
            if kind == "attr_type":
                new = helper.make_attribute(a.name, ch.choice([1.5, [1, 2], "x", 3, [0.5]]))
                n.attribute.remove(a)
                n.attribute.append(new)
                return f"{n.op_type}.{a.name} retyped"
            if a.type == onnx.AttributeProto.INT:
                a.i = ch.choice(INTERESTING)
                return f"{n.op_type}.{a.name} = {a.i}"
            if a.type == onnx.AttributeProto.INTS:
                vals = list(a.ints)
                if vals and ch.bool(0.7):
                    vals[ch.int(0, len(vals) - 1)] = ch.choice(INTERESTING)
                elif vals and ch.bool():
                    vals.pop()
                else:
                    vals.append(ch.choice(INTERESTING))
                del a.ints[:]
                a.ints.extend(vals)
                return f"{n.op_type}.{a.name} = {vals}"
            if a.type == onnx.AttributeProto.FLOAT:
                a.f = ch.choice([float("nan"), float("inf"), -1.0, 0.0, 1e30])
                return f"{n.op_type}.{a.name} = {a.f}"
            return f"{n.op_type}.{a.name} untouched"
    if kind in ("init_dims", "init_dtype", "init_data"):
        if not g.initializer:
            kind = "input_dims"
        else:
            t = ch.choice(list(g.initializer))
            if kind == "init_dims":
                dims = list(t.dims)
                if dims and ch.bool(0.7):
                    dims[ch.int(0, len(dims) - 1)] = ch.choice([0, 1, -1, 2, 3, 2**31, 2**40, dims[0] + 1])
                elif dims and ch.bool():
                    dims.pop()
                else:
                    dims.append(ch.choice([1, 2]))
                del t.dims[:]
                t.dims.extend(dims)
                return f"initializer {t.name} dims {dims}"
            if kind == "init_dtype":
                t.data_type = ch.choice([0, 2, 3, 6, 7, 9, 10, 11, 16, 17, 21, 30, 99])
                return f"initializer {t.name} type {t.data_type}"
            raw = t.raw_data
            if raw and ch.bool(0.6):
                t.raw_data = raw[: ch.int(0, len(raw) - 1)]
            else:
                t.raw_data = raw + bytes(ch.int(1, 8))
            return f"initializer {t.name} data {len(raw)} -> {len(t.raw_data)} bytes"
    if kind in ("input_dims", "input_elem", "output_name") and not (g.input and g.output):
        kind = "ir_version"
    if kind == "opset" and not m.opset_import:
        kind = "ir_version"
    if kind == "input_dims":
        vi = ch.choice(list(g.input))
        dims = vi.type.tensor_type.shape.dim
        if dims:
            d = dims[ch.int(0, len(dims) - 1)]
            d.dim_value = ch.choice([0, 1, -1, -5, 2, 7, 10**6, 2**33])
        return f"input {vi.name} dims {[x.dim_value for x in dims]}"
    if kind == "input_elem":
        vi = ch.choice(list(g.input))
        vi.type.tensor_type.elem_type = ch.choice([0, 6, 7, 9, 10, 11, 8, 99])
        return f"input {vi.name} elem type {vi.type.tensor_type.elem_type}"
    if not nodes and kind != "ir_version":
        return "no node"
    if kind == "ir_version":
        m.ir_version = ch.choice([0, 1, 2, 3, 4, 7, 11, 13, 14, 99])
        return f"ir_version {m.ir_version}"
    n = ch.choice(nodes)
    if kind == "rename_input" and n.input:
        k = ch.int(0, len(n.input) - 1)
        names = [o for x in nodes for o in x.output] + ["missing_name"]
        n.input[k] = ch.choice(names)
        return f"{n.op_type} input {k} -> {n.input[k]}"
    if kind == "empty_input" and n.input:
        k = ch.int(0, len(n.input) - 1)
        n.input[k] = ""
        return f"{n.op_type} input {k} left out"
    if kind == "swap_nodes" and len(nodes) > 1:
        i, j = ch.int(0, len(nodes) - 1), ch.int(0, len(nodes) - 1)
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(g.node[i])
        b.CopyFrom(g.node[j])
        g.node[i].CopyFrom(b)
        g.node[j].CopyFrom(a)
        return f"nodes {i} and {j} swapped"
    if kind == "dup_node":
        c = onnx.NodeProto()
        c.CopyFrom(n)
        g.node.append(c)
        return f"{n.op_type} duplicated"
    if kind == "drop_node":
        g.node.remove(n)
        return f"{n.op_type} removed"
    if kind == "opset":
        m.opset_import[0].version = ch.choice([0, 1, 6, 7, 9, 11, 12, 27, 28, 29, 99])
        return f"opset {m.opset_import[0].version}"
    if kind == "domain":
        n.domain = ch.choice(["com.microsoft", "ai.onnx.ml", "foo.bar", "ai.onnx"])
        if n.domain == "com.microsoft" and ch.bool():
            m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        return f"{n.op_type} domain {n.domain}"
    if kind == "output_name":
        o = ch.choice(list(g.output))
        o.name = ch.choice(["missing_out", g.input[0].name, (list(n.input) or ["x"])[0]])
        return f"output renamed {o.name}"
    if kind == "add_attr":
        n.attribute.append(helper.make_attribute(ch.choice(["axis", "perm", "bogus", "group", "kernel_shape"]),
                                                 ch.choice([1, -1, [2, 1], 99])))
        return f"{n.op_type} attribute added"
    old = n.op_type
    n.op_type = ch.choice(OP_TYPES)
    return f"{old} -> {n.op_type}"


def feeds_for(data: bytes, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, tuple[int, ...]]]:
    """Inputs for a model as its graph declares them (unknown or negative sizes become 2); no
    inputs when the model cannot be parsed or they would be large. Also the shapes to pass as
    ``input_shapes`` for inputs that declare a dimension that is not a plain size."""
    try:
        m = onnx.load_from_string(data)
    except Exception:
        return {}, {}
    inits = {t.name for t in m.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in m.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        try:
            dt = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except Exception:
            return {}, {}
        dims, exotic = [], False
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value >= 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(2)
                exotic = True
        if int(np.prod(dims, dtype=np.float64)) > MAX_FEED_ELEMENTS:
            return {}, {}
        if exotic:
            shapes[vi.name] = tuple(dims)
        if dt.kind == "f":
            feeds[vi.name] = rng.uniform(-2, 2, dims).astype(dt)
        elif dt.kind == "b":
            feeds[vi.name] = rng.integers(0, 2, dims).astype(bool)
        elif dt.kind in "iu":
            feeds[vi.name] = rng.integers(0, 3, dims).astype(dt)
        else:
            return {}, {}
    return feeds, shapes
