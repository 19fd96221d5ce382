"""The loop passes of ember.lower as Pass objects: one test per pass asserting its contract on
the IR that pass receives inside ember.lower, and whole kernels built with passes disabled."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import LoweringError, PassError, TargetError
from ember.ir import dtype
from ember.ir import expr as E
from ember.ir import stmt as S
from ember.ir.buffer import Buffer
from ember.ir.visitor import post_order_visit
from ember.lowering import (
    FlattenStorage,
    PartitionLoops,
    ScheduleToStmt,
    Simplify,
    UnrollLoops,
    VectorizeLoops,
)
from ember.target import Target
from ember.transform import Pass, PassContext, PassInstrument

M, N, K = 13, 37, 19  # no tile below divides these


def _nodes(ir: Any, kind: type) -> list[Any]:
    found: list[Any] = []
    post_order_visit(ir, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


def _loops(ir: Any, kind: S.ForKind) -> list[S.For]:
    return [f for f in _nodes(ir, S.For) if f.kind is kind]


class _Inputs(PassInstrument):
    """Records the input of every pass run, by pass name (first run of each name)."""

    def __init__(self) -> None:
        self.inputs: dict[str, Any] = {}

    def before_pass(self, p: Pass, ir: Any) -> None:
        self.inputs.setdefault(p.name, ir)


def _matmul_relu(unroll: bool = True, vectorize: bool = True):
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: te.max_value_expr(C[i, j], te.const(0.0, "float32")) + 1.0, name="D")
    s = te.create_schedule(D.op)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, 8)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], 4)
    s[C].reorder(i, jo, ko, ki, ji)
    if unroll:
        s[C].unroll(ki)
    if vectorize:
        s[C].vectorize(ji)
    di, dj = s[D].op.axis
    _, dji = s[D].split(dj, 8)
    if vectorize:
        s[D].vectorize(dji)
    return s, A, B, D


def _input_of(pass_name: str, s: te.Schedule, args: list[Any]) -> Any:
    rec = _Inputs()
    with PassContext(instruments=[rec]):
        ember.lower(s, args)
    return rec.inputs[pass_name]


def _ref(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.maximum(a64 @ b64, 0.0) + 1.0, np.abs(a64) @ np.abs(b64) + 1.0


# -- one test per pass --------------------------------------------------------------------------------
def test_schedule_to_stmt_gives_tensor_level_loop_nests() -> None:
    s, A, B, D = _matmul_relu()
    entry = ScheduleToStmt()
    stmt = entry(s)
    assert entry.lowering is not None
    stores = _nodes(stmt, S.ProducerStore)
    assert {st.producer.name for st in stores} == {"C", "D"}
    assert _nodes(stmt, E.BufferLoad) == [] and _nodes(stmt, S.BufferStore) == []
    assert _nodes(stmt, S.IfThenElse), "the non-dividing splits (37 by 8, 19 by 4) need guards"
    with pytest.raises(LoweringError, match="needs a schedule"):
        ScheduleToStmt()("not a schedule")


def test_flatten_storage_gives_flat_buffer_accesses() -> None:
    s, A, B, D = _matmul_relu()
    entry = ScheduleToStmt()
    stmt = entry(s)
    low = entry.lowering
    assert low is not None and _nodes(stmt, S.ProducerStore)
    bufs = {low.key(t): Buffer(t.name, t.dtype, tuple(t.shape), (), "global") for t in (A, B, D)}
    after = FlattenStorage(low, bufs)(stmt)
    assert _nodes(after, S.ProducerStore) == [] and _nodes(after, S.ProducerRealize) == []
    assert _nodes(after, E.ProducerLoad) == []
    loads, stores = _nodes(after, E.BufferLoad), _nodes(after, S.BufferStore)
    assert loads and stores
    assert all(len(x.indices) == 1 for x in loads + stores)
    assert {x.buffer.name for x in stores} >= {"D"}
    allocs = _nodes(after, S.Allocate)
    assert [a.buffer.name for a in allocs] == ["C"]  # the intermediate gets its own storage


def test_simplify_removes_a_provable_guard_and_keeps_the_others() -> None:
    f32 = dtype("float32")
    X = Buffer("X", f32, (E.const(8),))
    i = E.Var("i")
    store = S.BufferStore(X, E.const(1.0), (i,))

    def below(c: int) -> E.PrimExpr:
        return E.LT(i, E.const(c), dtype("bool"))

    provable = S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL, S.IfThenElse(below(8), store))
    out = Simplify()(provable)
    assert _nodes(out, S.IfThenElse) == []
    assert len(_nodes(out, S.BufferStore)) == 1 and len(_nodes(out, S.For)) == 1
    needed = S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL, S.IfThenElse(below(7), store))
    assert len(_nodes(Simplify()(needed), S.IfThenElse)) == 1
    single = S.For(i, E.const(0), E.const(1), S.ForKind.SERIAL, store)
    assert _nodes(Simplify()(single), S.For) == []  # extent-1 loops go


def test_partition_loops_gives_a_guard_free_main_loop() -> None:
    A = te.placeholder((N,), "float32", name="A")
    B = te.compute((N,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], 8)
    before = _input_of("PartitionLoops", s, [A, B])
    assert len(_nodes(before, S.IfThenElse)) == 1
    after = PartitionLoops()(before)
    top = after.seq if isinstance(after, S.SeqStmt) else (after,)
    mains = [f for f in top if isinstance(f, S.For) and not _nodes(f, S.IfThenElse)]
    tails = [f for f in top if _nodes(f, S.IfThenElse)]
    assert len(mains) == 1 and len(tails) == 1, str(after)
    assert len(_nodes(after, S.BufferStore)) == 2  # the body once in the main loop, once in the tail


def test_unroll_loops_expands_unrolled_loops() -> None:
    s, A, B, D = _matmul_relu(unroll=True, vectorize=False)
    before = _input_of("UnrollLoops", s, [A, B, D])
    unrolled = _loops(before, S.ForKind.UNROLLED)
    assert unrolled and all(int(f.extent.value) == 4 for f in unrolled)  # main part and tails
    n_before = len(_nodes(before, S.BufferStore))
    after = UnrollLoops()(before)
    assert _loops(after, S.ForKind.UNROLLED) == []
    assert len(_nodes(after, S.BufferStore)) > n_before  # body copies, one per iteration
    kept = UnrollLoops(max_unroll=2)(before)  # longer than the limit: a serial loop
    assert _loops(kept, S.ForKind.UNROLLED) == []
    assert len(_nodes(kept, S.BufferStore)) == n_before


def test_vectorize_loops_produces_ramp_and_broadcast() -> None:
    s, A, B, D = _matmul_relu(unroll=False, vectorize=True)
    before = _input_of("VectorizeLoops", s, [A, B, D])
    assert _loops(before, S.ForKind.VECTORIZED)
    assert _nodes(before, E.Ramp) == []
    after = VectorizeLoops()(before)
    assert _loops(after, S.ForKind.VECTORIZED) == []
    ramps = _nodes(after, E.Ramp)
    assert ramps and all(r.lanes == 8 for r in ramps)
    assert _nodes(after, E.Broadcast)


# -- whole kernels with passes disabled ----------------------------------------------------------------
@pytest.mark.parametrize(
    "ctx_args",
    [
        {},
        {"disabled_passes": ["PartitionLoops"]},
        {"disabled_passes": ["UnrollLoops"]},
        {"disabled_passes": ["VectorizeLoops"]},
        {"disabled_passes": ["Simplify"]},
        {"disabled_passes": ["PartitionLoops", "UnrollLoops", "VectorizeLoops", "Simplify"]},
        {"opt_level": 0},
        {"opt_level": 1},
    ],
    ids=["default", "no-partition", "no-unroll", "no-vectorize", "no-simplify", "none-optional", "O0", "O1"],
)
def test_kernels_stay_correct_with_passes_disabled(ctx_args: dict[str, Any], rng, kernel) -> None:
    s, A, B, D = _matmul_relu()
    with PassContext(**ctx_args) as ctx:
        f = ember.lower(s, [A, B, D], name="mm")
    skipped = set(ctx.skipped)
    for name in ctx_args.get("disabled_passes", []):
        assert name in skipped
    body = str(f.body)
    if "VectorizeLoops" in skipped:
        assert "ramp" not in body
    else:
        assert "ramp" in body
    if "UnrollLoops" in skipped:
        assert "# unrolled" in body  # left as a loop, compiled serially
    else:
        assert "unroll" not in body
    a = rng.uniform(-2, 2, (M, K)).astype(np.float32)
    b = rng.uniform(-2, 2, (K, N)).astype(np.float32)
    (d,) = kernel.run(ember.build(f, target="llvm"), [a, b], [((M, N), "float32")])
    ref, scale = _ref(a, b)
    kernel.assert_fp(d, ref, scale, ulps=K + 2)


def test_required_loop_pass_cannot_be_disabled() -> None:
    s, A, B, D = _matmul_relu()
    with PassContext(disabled_passes=["FlattenStorage"]), pytest.raises(PassError, match="FlattenStorage"):
        ember.lower(s, [A, B, D])


def test_lower_accepts_and_validates_a_target() -> None:
    s, A, B, D = _matmul_relu()
    plain = ember.lower(s, [A, B, D])
    assert "target" not in plain.attrs
    named = ember.lower(s, [A, B, D], target="llvm")
    assert named.attrs["target"] == "llvm"
    assert str(named.body) == str(plain.body)
    assert ember.lower(s, [A, B, D], target=Target("llvm -mcpu=skylake")).attrs["target"] == "llvm -mcpu=skylake"
    with pytest.raises(TargetError, match="unknown target"):
        ember.lower(s, [A, B, D], target="tpu")
    with pytest.raises(TargetError):
        ember.lower(s, [A, B, D], target=42)  # type: ignore[arg-type]
