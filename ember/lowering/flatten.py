"""Storage flattening: tensors become buffers, multi-dimensional accesses become one index.

:func:`flatten_storage` takes the statement from schedule lowering and the argument list. It
guarantees: every tensor read or written is either an argument buffer or allocated by an
``Allocate`` around its realize region; every ``ProducerLoad``/``ProducerStore`` is replaced by a
``BufferLoad``/``BufferStore`` with one index, offset by the region's start and scaled by the
buffer's strides (padded where ``storage_align`` asks).
"""

from __future__ import annotations

from typing import Any

from ..arith import simplify
from ..errors import LoweringError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.dtypes import INT32, INT64
from ..ir.visitor import Mutator
from ..te.tensor import Tensor
from .schedule_ops import StageKey, _Lowering


def _index_dtype(shape: tuple[E.PrimExpr, ...]) -> Any:
    total = 1
    for s in shape:
        s = simplify(s)
        if not isinstance(s, E.IntImm):
            return INT64
        total *= s.value
    return INT32 if total < 2**31 else INT64


class _Flatten(Mutator):
    def __init__(self, low: _Lowering, arg_buffers: dict[StageKey, Buffer]):
        self.low = low
        self.buffers: dict[StageKey, tuple[Buffer, tuple[E.PrimExpr, ...]]] = {
            k: (b, tuple(E.const(0) for _ in b.shape)) for k, b in arg_buffers.items()
        }

    def flat_index(self, key: StageKey, indices: tuple[E.PrimExpr, ...], what: Tensor) -> E.PrimExpr:
        entry = self.buffers.get(key)
        if entry is None:
            raise LoweringError(
                f"tensor {what.name} is used but has no storage: pass it in the argument list of build/lower"
            )
        buf, mins = entry
        if len(indices) != len(buf.shape):
            raise LoweringError(
                f"tensor {what.name} accessed with {len(indices)} indices, has {len(buf.shape)} dimensions"
            )
        idx_t = _index_dtype(buf.shape)
        strides = _strides(buf, idx_t)
        flat: E.PrimExpr = E.const(0, idx_t)
        for i, m, st in zip(indices, mins, strides):
            flat = flat + E.cast(idx_t, self.visit(i) - m) * st
        return simplify(flat)

    def visit_ProducerLoad(self, e: E.ProducerLoad) -> E.PrimExpr:
        key = self.low.key(e.producer)
        idx = self.flat_index(key, e.indices, e.producer)
        return E.BufferLoad(self.buffers[key][0], (idx,), e.dtype)

    def visit_ProducerStore(self, s: S.ProducerStore) -> S.Stmt:
        key = self.low.key(s.producer)
        idx = self.flat_index(key, s.indices, s.producer)
        return S.BufferStore(self.buffers[key][0], self.visit(s.value), (idx,))

    def visit_ProducerRealize(self, s: S.ProducerRealize) -> S.Stmt:
        key = self.low.key(s.producer)
        if key in self.buffers:  # an argument: its storage is the caller's
            return self.visit(s.body)
        stage = key[0]
        shape = tuple(simplify(ext) for _, ext in s.bounds)
        if s.scope != "global":
            # A region whose extent varies with the loops (a split of a fused axis that wraps a row
            # differently per iteration) lies inside the tensor: its whole constant dimension holds it.
            shape = tuple(ext if isinstance(ext, E.IntImm) else _whole(s.producer, d, ext)
                          for d, ext in enumerate(shape))
        for d, ext in enumerate(shape):
            if not isinstance(ext, E.IntImm) and s.scope != "global":
                raise LoweringError(
                    f"stage {stage.name}: dimension {d} of its {s.scope} buffer has extent {ext}, which is not "
                    "constant; split the consumer's loops with constant factors or compute it at the root"
                )
        strides: tuple[E.PrimExpr, ...] = ()
        if stage.aligns:
            strides = _aligned_strides(shape, stage.aligns)
        buf = Buffer(s.producer.name, s.producer.dtype, shape, strides, s.scope)
        self.buffers[key] = (buf, tuple(m for m, _ in s.bounds))
        body = self.visit(s.body)
        return S.Allocate(buf, body)


def _whole(producer: Any, d: int, ext: E.PrimExpr) -> E.PrimExpr:
    """Dimension ``d`` of ``producer``'s tensor when it is constant (an upper bound of any region of
    it), else the region's extent ``ext``."""
    full = simplify(E.convert(producer.shape[d])) if d < len(getattr(producer, "shape", ())) else ext
    return full if isinstance(full, E.IntImm) else ext


def _strides(buf: Buffer, idx_t: Any) -> tuple[E.PrimExpr, ...]:
    return tuple(simplify(E.cast(idx_t, st)) for st in buf.compact_strides())


def _aligned_strides(shape: tuple[E.PrimExpr, ...], aligns: dict[int, tuple[int, int]]) -> tuple[E.PrimExpr, ...]:
    strides: list[E.PrimExpr] = []
    acc: E.PrimExpr = E.const(1, "int64")
    for d in reversed(range(len(shape))):
        # storage_align(axis d) pads the stride of dimension d (the distance between rows of d).
        if d in aligns:
            factor, offset = aligns[d]
            acc = simplify(E.floordiv(acc + factor - offset - 1, factor) * factor + offset)
        strides.append(acc)
        acc = simplify(acc * E.cast("int64", shape[d]))
    return tuple(reversed(strides))


def flatten_storage(stmt: S.Stmt, low: _Lowering, arg_buffers: dict[StageKey, Buffer]) -> S.Stmt:
    """``stmt`` with tensors replaced by buffers and one-dimensional indices (see module doc)."""
    return _Flatten(low, arg_buffers).visit(stmt)
