"""QDQ fusion: the float operators of a QDQ-format model that sit between ``DequantizeLinear``
and ``QuantizeLinear`` nodes become the integer operators ONNX Runtime runs for them.

``onnxruntime.quantization.quantize_static(..., quant_format=QDQ)`` writes a float model with
every quantized tensor passed through ``QuantizeLinear -> DequantizeLinear`` (weights and
biases stored quantized, behind a ``DequantizeLinear``). ONNX Runtime does not run that as
written: its QDQ transformers rewrite each ``DequantizeLinear``s -> op -> ``QuantizeLinear``
group into the op's integer kernel. :class:`FuseQDQ` does the same, so that the result is
ONNX Runtime's:

* ``DQ(x), DQ(w) [, DQ(b)] -> Conv -> Q`` (2-D, group 1)  ->  ``QLinearConv`` (integer accumulation; the bias
  is the int32 of its ``DequantizeLinear``, which must have zero point 0 and scale
  ``x_scale * w_scale``; the sum requantized by ``x_scale * w_scale / y_scale`` in float32,
  rounded half to even, saturated);
* ``DQ(a), DQ(b) -> MatMul -> Q``  ->  ``QLinearMatMul``;
* ``DQ(a), DQ(b) [, DQ(c)] -> Gemm -> Q``  ->  ``com.microsoft.QGemm`` (``beta`` 1);
* ``DQ(a), DQ(b) -> Add -> Q``  ->  ``com.microsoft.QLinearAdd``;
* ``Relu -> Q`` with the zero point at the bottom of the quantized type: the ``Relu`` is dropped
  (the saturation of ``Q`` gives the same values, exactly), as ONNX Runtime's ``ReluQuantFusion``;
* ``DQ(x) -> MaxPool -> Q`` with the same scale and zero point  ->  the maximum of the integers
  (the quantization is monotonic, so the maximum commutes with it, exactly), as
  ``ember.IntMaxPool`` (:func:`ember.ops.quant.int_maxpool`, a vectorizable integer pool); a
  ``MaxPool`` that reads the output of an integer QLinear operator (QOperator format) becomes
  ``ember.IntMaxPool`` too. Both only for 2-D pools without ``ceil_mode`` or indices.

A group is fused only when it is well formed: the ``DequantizeLinear``s and the ``QuantizeLinear``
have constant scales (float32) and zero points (int8/uint8; int32 zero for a bias) of the lengths
the integer operator takes (per tensor; weights per output channel), no ``block_size``, and the
float result has no reader but the ``QuantizeLinear``. Anything else is left as written (and runs
in float, with the operators' own checks of its parameters naming the node).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ops.quant import INT_MAXPOOL
from ..transform import Pass, PassContext
from .ir import Graph, Node

_QTYPES = {"uint8": 0, "int8": -128}  # type -> the bottom of its range
#: Operators whose output is int8/uint8 (QuantizeLinear: when its zero point is).
_INT_OUTPUT = ("QLinearConv", "QLinearMatMul", "com.microsoft.QLinearAdd", "com.microsoft.QLinearGlobalAveragePool",
               INT_MAXPOOL)


class _Q:
    """A quantization's parameters: scale and zero point names, their constant values."""

    def __init__(self, scale: str, zp: str, s: np.ndarray, z: np.ndarray) -> None:
        self.scale, self.zp, self.s, self.z = scale, zp, s, z

    @property
    def per_tensor(self) -> bool:
        return self.s.size == 1 and self.z.size == 1


def _params(node: Node, g: Graph, int32: bool = False) -> _Q | None:
    """The constant scale and zero point of a QuantizeLinear/DequantizeLinear ``node``, or None
    when they are not constants of the types the integer operators take (float32 scale; int8 or
    uint8 zero point, or int32 when ``int32``), or the node is blocked."""
    if len(node.inputs) < 3 or not node.inputs[1] or not node.inputs[2] or node.attrs.get("block_size"):
        return None
    s, z = g.consts.get(node.inputs[1]), g.consts.get(node.inputs[2])
    if s is None or z is None or s.dtype != np.float32 or s.ndim > 1 or z.shape != s.shape:
        return None
    if str(z.dtype) not in (("int32",) if int32 else tuple(_QTYPES)):
        return None
    return _Q(node.inputs[1], node.inputs[2], s, z)


class _Rewriter:
    """One pass over a graph copy: finds the groups and rewrites them (module docstring)."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph.copy()
        self.prod = self.g.producers()
        self.cons = self.g.consumers()
        self.outputs = set(self.g.outputs)
        self.drop: set[int] = set()  # ids of nodes removed
        self.replace: dict[int, Node] = {}  # id of a node -> its replacement

    def only_reader(self, value: str, node: Node) -> bool:
        """Whether ``node`` is the only reader of ``value`` and it is no graph output."""
        readers = self.cons.get(value, [])
        return value not in self.outputs and len(readers) == 1 and readers[0] is node

    def dq(self, value: str, int32: bool = False) -> tuple[Node, _Q] | None:
        """The DequantizeLinear producing ``value`` with its parameters, or None."""
        p = self.prod.get(value)
        if p is None or p.op != "DequantizeLinear" or id(p) in self.drop:
            return None
        q = _params(p, self.g, int32)
        return (p, q) if q is not None else None

    def run(self) -> Graph:
        for node in list(self.g.nodes):
            if node.op == "QuantizeLinear":
                self.drop_relu(node)
        for node in list(self.g.nodes):
            if node.op == "QuantizeLinear" and id(node) not in self.drop:
                self.fuse(node)
        nodes = []
        for n in self.g.nodes:
            if id(n) in self.drop:
                continue
            nodes.append(self.replace.get(id(n), n))
        self.g.nodes = nodes
        self.integer_maxpools()
        return self.g

    def integer_maxpools(self) -> None:
        """MaxPool nodes reading an integer QLinear operator's output become ember.IntMaxPool."""
        prod = self.g.producers()
        for k, n in enumerate(self.g.nodes):
            p = prod.get(n.inputs[0]) if n.inputs else None
            if n.op != "MaxPool" or p is None or not _pool_ok(n):
                continue
            integer = p.op in _INT_OUTPUT or (p.op == "QuantizeLinear" and _params(p, self.g) is not None)
            if integer:
                self.g.nodes[k] = Node(INT_MAXPOOL, list(n.inputs), list(n.outputs), dict(n.attrs), n.name, n.opset)

    def drop_relu(self, q: Node) -> None:
        """``Relu -> Q`` with Q's zero point at the bottom of its type: Q reads the Relu's input."""
        r = self.prod.get(q.inputs[0])
        qp = _params(q, self.g)
        if r is None or r.op != "Relu" or qp is None or not qp.per_tensor or not self.only_reader(q.inputs[0], q):
            return
        if int(qp.z.reshape(-1)[0]) != _QTYPES[str(qp.z.dtype)]:
            return
        q.inputs[0] = r.inputs[0]
        self.drop.add(id(r))
        self.cons.setdefault(r.inputs[0], []).append(q)
        self.cons[r.inputs[0]] = [n for n in self.cons[r.inputs[0]] if n is not r]

    def fuse(self, q: Node) -> None:
        """Fuse the group that ends in QuantizeLinear ``q``, if there is a well-formed one."""
        y = _params(q, self.g)
        src = q.inputs[0]
        op = self.prod.get(src)
        if y is None or not y.per_tensor or op is None or id(op) in self.drop or not self.only_reader(src, q):
            return
        new: Node | None = None
        if op.op == "Conv":
            new = self.conv(op, y)
        elif op.op == "MatMul":
            new = self.matmul(op, y)
        elif op.op == "Gemm":
            new = self.gemm(op, y)
        elif op.op == "Add":
            new = self.add(op, y)
        elif op.op == "MaxPool":
            new = self.maxpool(op, y)
        if new is None:
            return
        new.outputs = [q.outputs[0]]
        self.replace[id(op)] = new
        self.drop.add(id(q))

    def _bias(self, value: str, a: _Q, b: _Q) -> str | None:
        """The int32 bias behind ``value`` (a DequantizeLinear of an int32 constant with zero
        point 0 and scale ``a.s * b.s``, per output channel or per tensor), or None."""
        found = self.dq(value, int32=True)
        if found is None:
            return None
        node, bq = found
        if bq.z.any() or node.inputs[0] not in self.g.consts:
            return None
        want = (a.s.astype(np.float32) * b.s.astype(np.float32)).reshape(-1)
        got = bq.s.reshape(-1)
        if got.size not in (1, want.size) and want.size != 1:
            return None
        if not np.allclose(got, want, rtol=1e-6, atol=0.0):
            return None
        return node.inputs[0]

    def _weights(self, value: str, axis: int, n_out: int) -> tuple[Node, _Q] | None:
        """A constant int8/uint8 operand's DequantizeLinear, per tensor or per ``axis`` (of
        ``n_out`` elements)."""
        found = self.dq(value)
        if found is None:
            return None
        node, wq = found
        w = self.g.consts.get(node.inputs[0])
        if w is None or str(w.dtype) != str(wq.z.dtype):
            return None
        if not wq.per_tensor:
            ax = int(node.attrs.get("axis", 1))
            ax = ax + w.ndim if ax < 0 else ax
            if ax != axis or wq.s.shape != (n_out,) or w.shape[axis] != n_out:
                return None
        return found

    def _activation(self, value: str) -> tuple[Node, _Q] | None:
        found = self.dq(value)
        return found if found is not None and found[1].per_tensor else None

    def conv(self, op: Node, y: _Q) -> Node | None:
        if len(op.inputs) < 2:
            return None
        xa = self._activation(op.inputs[0])
        wv = self.g.consts.get(self.prod[op.inputs[1]].inputs[0]) if op.inputs[1] in self.prod else None
        # 2-D, group 1: the convolutions ember's integer kernels are fast for (a grouped or 1-D/3-D
        # one stays on the float kernels, which the layout pass blocks)
        if xa is None or wv is None or wv.ndim != 4 or int(op.attrs.get("group", 1)) != 1:
            return None
        wa = self._weights(op.inputs[1], 0, int(wv.shape[0]))
        if wa is None:
            return None
        (xn, xq), (wn, wq) = xa, wa
        bias = ""
        if len(op.inputs) > 2 and op.inputs[2]:
            found = self._bias(op.inputs[2], xq, wq)
            if found is None:
                return None
            bias = found
        ins = [xn.inputs[0], xq.scale, xq.zp, wn.inputs[0], wq.scale, wq.zp, y.scale, y.zp]
        if bias:
            ins.append(bias)
        return Node("QLinearConv", ins, [], dict(op.attrs), op.name, op.opset)

    def matmul(self, op: Node, y: _Q) -> Node | None:
        aa = self._activation(op.inputs[0])
        bv = self.g.consts.get(self.prod[op.inputs[1]].inputs[0]) if op.inputs[1] in self.prod else None
        if aa is None or bv is None or bv.ndim != 2:
            return None
        ba = self._weights(op.inputs[1], 1, int(bv.shape[1]))
        if ba is None:
            return None
        (an, aq), (bn, bq) = aa, ba
        ins = [an.inputs[0], aq.scale, aq.zp, bn.inputs[0], bq.scale, bq.zp, y.scale, y.zp]
        return Node("QLinearMatMul", ins, [], {}, op.name, op.opset)

    def gemm(self, op: Node, y: _Q) -> Node | None:
        if float(op.attrs.get("beta", 1.0)) != 1.0:
            return None
        tb = int(op.attrs.get("transB", 0))
        aa = self._activation(op.inputs[0])
        bv = self.g.consts.get(self.prod[op.inputs[1]].inputs[0]) if op.inputs[1] in self.prod else None
        if aa is None or bv is None or bv.ndim != 2:
            return None
        ba = self._weights(op.inputs[1], 0 if tb else 1, int(bv.shape[0 if tb else 1]))
        if ba is None:
            return None
        (an, aq), (bn, bq) = aa, ba
        bias = ""
        if len(op.inputs) > 2 and op.inputs[2]:
            found = self._bias(op.inputs[2], aq, bq)
            if found is None:
                return None
            bias = found
        attrs: dict[str, Any] = {k: op.attrs[k] for k in ("alpha", "transA", "transB") if k in op.attrs}
        ins = [an.inputs[0], aq.scale, aq.zp, bn.inputs[0], bq.scale, bq.zp, bias, y.scale, y.zp]
        return Node("com.microsoft.QGemm", ins, [], attrs, op.name, op.opset)

    def add(self, op: Node, y: _Q) -> Node | None:
        aa, ba = self._activation(op.inputs[0]), self._activation(op.inputs[1])
        if aa is None or ba is None or str(aa[1].z.dtype) != str(y.z.dtype) or str(ba[1].z.dtype) != str(y.z.dtype):
            return None
        (an, aq), (bn, bq) = aa, ba
        ins = [an.inputs[0], aq.scale, aq.zp, bn.inputs[0], bq.scale, bq.zp, y.scale, y.zp]
        return Node("com.microsoft.QLinearAdd", ins, [], {}, op.name, op.opset)

    def maxpool(self, op: Node, y: _Q) -> Node | None:
        xa = self._activation(op.inputs[0])
        if xa is None or len(op.outputs) > 1 and op.outputs[1]:
            return None
        xn, xq = xa
        if xq.s.reshape(-1)[0] != y.s.reshape(-1)[0] or xq.z.reshape(-1)[0] != y.z.reshape(-1)[0] \
                or xq.z.dtype != y.z.dtype:
            return None
        return Node(INT_MAXPOOL if _pool_ok(op) else "MaxPool", [xn.inputs[0]], [], dict(op.attrs), op.name, op.opset)


def _pool_ok(node: Node) -> bool:
    """Whether MaxPool ``node`` is one ``ember.IntMaxPool`` computes: 2-D, no ceil_mode, no indices."""
    ks = node.attrs.get("kernel_shape")
    return (ks is not None and len(ks) == 2 and not int(node.attrs.get("ceil_mode", 0))
            and not (len(node.outputs) > 1 and node.outputs[1]))


def fuse_qdq(graph: Graph) -> Graph:
    """``graph`` with its QDQ groups as integer operators (module docstring); a new graph, the
    input unchanged. The ``DequantizeLinear`` nodes no one reads any more are left to dead-code
    elimination."""
    return _Rewriter(graph).run()


class FuseQDQ(Pass):
    """:func:`fuse_qdq` as a pass (opt level 1). It runs before constant folding, which would
    turn the ``DequantizeLinear`` of each constant weight into float32 weights."""

    name = "FuseQDQ"
    opt_level = 1
    contract = (
        "needs a Graph whose quantization parameters are constants; gives one computing what ONNX Runtime "
        "computes, with DequantizeLinear -> Conv/MatMul/Gemm/Add/MaxPool -> QuantizeLinear groups as "
        "QLinearConv/QLinearMatMul/QGemm/QLinearAdd/ember.IntMaxPool, MaxPools of integer QLinear outputs as "
        "ember.IntMaxPool, and Relu before a QuantizeLinear at the type's bottom dropped"
    )

    def transform(self, ir: Any, ctx: PassContext) -> Graph:
        """A new graph with the QDQ groups fused."""
        if not isinstance(ir, Graph):
            from ..errors import GraphError

            raise GraphError(f"graph pass {self.name} needs a Graph, got {type(ir).__name__}")
        return fuse_qdq(ir)
