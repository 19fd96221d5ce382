"""The NumPy reference evaluator (ember.te.reference) against the same te programs compiled natively.

Every case builds an ONNX-named operator (or a hand-written te program) on placeholders, computes
it once with :func:`ember.te.evaluate` and once with the kernel ``ember.build`` compiles
for ``llvm`` (scheduled as the graph compiler schedules it), on random inputs at sizes that no tile
or vector width divides, and compares:

* integer, boolean and bit-pattern results **exactly**;
* float results within a few units of rounding: the evaluator computes every node in the node's
  own type, so the only differences allowed are those of rounding order — a float sum is reduced
  pairwise by NumPy but sequentially (in tiles) by the kernel, LLVM contracts ``a*b + c`` into a
  fused multiply-add, and NumPy's and libm's math functions may differ by an ulp. The bound used
  is ``ulps * eps(dtype) * scale`` where ``scale`` is the magnitude of the terms that were rounded
  (the largest |value| of the result, times the reduction length for reductions); ``ulps`` is 4
  (elementwise) or 4 + log2 of the reduction length (reductions) — about ``1e-6`` relative for
  float32, far below any semantic difference (a wrong index, a missing term, a wrong rounding
  mode), which shows as an error of order 1.
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import EvaluationError
from ember.ir import expr as E
from ember.ops.registry import OpContext, call
from ember.strategy.cpu import schedule_group
from ember.te import evaluate

EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


# -- helpers ------------------------------------------------------------------------------------------
def native(outs: list[te.Tensor], phs: list[te.Tensor], arrays: list[np.ndarray]) -> list[np.ndarray]:
    """``outs`` computed by the natively compiled kernel (graph compiler's CPU schedule)."""
    s = schedule_group(outs, set())
    used = {id(st.op) for st in s.stages}
    ins = [(p, a) for p, a in zip(phs, arrays) if id(p.op) in used]
    f = ember.build(s, [p for p, _ in ins] + outs, target="llvm", name="ev")
    res = [np.empty(tuple(int(d.value) for d in o.shape), np.dtype(str(o.dtype))) for o in outs]
    for r in res:
        r.reshape(-1).view(np.uint8)[...] = 0xAB  # poison: a correct kernel overwrites every byte
    f(*[a for _, a in ins], *res)
    return res


def build_op(
    op: str, arrays: list[np.ndarray | None], attrs: dict[str, Any] | None = None, consts: tuple[int, ...] = ()
) -> tuple[list[te.Tensor], list[te.Tensor | None], list[np.ndarray | None]]:
    """ONNX operator ``op`` built on placeholders (inputs in ``consts`` also given as compile-time
    values, as the graph compiler does); returns (te outputs, placeholders, arrays)."""
    names = ["" if a is None else f"in{k}" for k, a in enumerate(arrays)]
    cvals = {names[k]: arrays[k] for k in consts}
    phs = [None if a is None else te.placeholder(a.shape, str(a.dtype), name=f"in{k}") for k, a in enumerate(arrays)]
    outs = call(OpContext(op, dict(attrs or {}), names, cvals, 23, "n0"), phs)  # type: ignore[arg-type]
    outs = outs if isinstance(outs, list) else [outs]
    assert all(isinstance(o, te.Tensor) for o in outs), f"{op} folded to NumPy at build time"
    return outs, phs, arrays


def assert_close(got: np.ndarray, want: np.ndarray, red_len: int = 1, ulps: float = 4.0) -> None:
    """Equal for integers, booleans and bit formats; for floats within the rounding-order bound of
    the module doc (``red_len``: the number of terms summed into each element)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    name = got.dtype.name
    if name.startswith(("float8", "float4")):  # storage formats: the same bit patterns
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        return
    if name not in EPS:
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = np.isfinite(w)
    np.testing.assert_array_equal(g[~ok & ~np.isnan(w)], w[~ok & ~np.isnan(w)])
    if not ok.any():
        return
    scale = np.max(np.abs(w[ok])) * max(1, red_len)
    bound = (ulps + math.log2(max(1, red_len))) * EPS[name] * scale
    err = np.max(np.abs(g[ok] - w[ok]))
    assert err <= bound, f"error {err:.3g} above the rounding-order bound {bound:.3g}"


def check_op(
    op: str,
    arrays: list[np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    consts: tuple[int, ...] = (),
    red_len: int = 1,
    max_elements: int | None = None,
) -> list[np.ndarray]:
    """Build ``op``, evaluate it and run it natively; the results must agree (``assert_close``)."""
    outs, phs, arrs = build_op(op, arrays, attrs, consts)
    ins = {p: a for p, a in zip(phs, arrs) if p is not None}
    kw = {} if max_elements is None else {"max_elements": max_elements}
    got = evaluate(outs, ins, **kw)
    want = native(outs, [p for p in phs if p is not None], [a for a in arrs if a is not None])
    for g, w in zip(got, want):
        assert_close(g, w, red_len)
    return got


def f32(rng: np.random.Generator, *shape: int, lo: float = -3, hi: float = 3) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float32)


def i32(rng: np.random.Generator, *shape: int, lo: int = -100, hi: int = 100, dt: str = "int32") -> np.ndarray:
    return rng.integers(lo, hi, shape, endpoint=True).astype(dt)


# -- elementwise --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "op,attrs",
    [
        ("Exp", {}),
        ("Tanh", {}),
        ("Sigmoid", {}),
        ("Erf", {}),
        ("Relu", {}),
        ("LeakyRelu", {"alpha": 0.1}),
        ("Gelu", {}),
        ("Gelu", {"approximate": "tanh"}),
        ("Round", {}),
        ("Floor", {}),
        ("Sin", {}),
        ("Softsign", {}),
        ("HardSwish", {}),
        ("Neg", {}),
        ("Sign", {}),
        ("Reciprocal", {}),
        ("IsNaN", {}),
    ],
)
def test_unary_float(rng, op, attrs) -> None:
    x = f32(rng, 3, 37)
    x[0, :4] = [0.5, -1.5, 2.5, 0.0]  # rounding ties
    check_op(op, [x], attrs)


def test_unary_float_nan_inf(rng) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e-30], np.float32)
    for op in ("Relu", "Abs", "Sqrt", "IsInf", "IsNaN", "Exp", "Floor", "Tanh"):
        check_op(op, [x])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"])
def test_binary_float_broadcast(rng, op) -> None:
    a = f32(rng, 3, 1, 13, lo=0.5, hi=2.0)
    b = f32(rng, 5, 1, lo=0.5, hi=2.0)
    check_op(op, [a, b])


def test_float16_and_float64(rng) -> None:
    for dt in ("float16", "float64"):
        a = rng.uniform(-4, 4, (4, 19)).astype(dt)
        b = rng.uniform(0.5, 4, (19,)).astype(dt)
        for op in ("Add", "Mul", "Div", "Sub"):
            check_op(op, [a, b])
        for op in ("Exp", "Tanh", "Sigmoid", "Sqrt"):
            check_op(op, [np.abs(a)])


@pytest.mark.parametrize("dt", ["int32", "int8", "uint8", "int64", "uint32"])
def test_integer_arithmetic_wraps(rng, dt) -> None:
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (5, 23), endpoint=True).astype(dt)
    b = rng.integers(info.min, info.max, (23,), endpoint=True).astype(dt)
    for op in ("Add", "Sub", "Mul"):
        got = check_op(op, [a, b])
        assert got[0].dtype == np.dtype(dt)
    if dt == "int32":  # overflow wraps as two's complement
        (s,) = check_op("Add", [np.array([2**31 - 1, -(2**31)], dt), np.array([1, -1], dt)])
        np.testing.assert_array_equal(s, np.array([-(2**31), 2**31 - 1], dt))


@pytest.mark.parametrize("dt", ["int32", "int8", "int64"])
def test_integer_division_of_negatives(rng, dt) -> None:
    a = i32(rng, 7, 29, lo=-120, hi=120, dt=dt)
    b = i32(rng, 29, lo=-9, hi=9, dt=dt)
    b[b == 0] = 3
    a[0, :4], b[:4] = [-7, 7, -7, 7], [2, -2, -2, 2]
    (q,) = check_op("Div", [a, b])
    want = np.trunc(a.astype(np.float64) / b).astype(dt)  # ONNX Div on integers: toward zero
    np.testing.assert_array_equal(q, want)
    check_op("Mod", [a, b])  # floor remainder: sign of the divisor
    check_op("Mod", [a, b], {"fmod": 1})  # C remainder: sign of the dividend


def test_bitwise_and_shifts(rng) -> None:
    for dt in ("uint8", "int32", "uint32"):
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, (3, 17), endpoint=True).astype(dt)
        b = rng.integers(info.min, info.max, (17,), endpoint=True).astype(dt)
        for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
            check_op(op, [a, b])
        check_op("BitwiseNot", [a])
    x = rng.integers(0, 2**32 - 1, (19,), endpoint=True).astype("uint32")
    n = rng.integers(0, 31, (19,), endpoint=True).astype("uint32")
    for direction in ("LEFT", "RIGHT"):
        check_op("BitShift", [x, n], {"direction": direction})


def test_comparisons_and_logic(rng) -> None:
    a, b = f32(rng, 4, 11), f32(rng, 11)
    a[0, :3] = b[:3]
    a[1, 0] = np.nan
    for op in ("Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual"):
        check_op(op, [a, b])
    p, q = rng.integers(0, 2, (4, 11)).astype(bool), rng.integers(0, 2, (11,)).astype(bool)
    for op in ("And", "Or", "Xor"):
        check_op(op, [p, q])
    check_op("Not", [p])
    check_op("Where", [p, a, np.broadcast_to(b, a.shape).copy()])


# -- casts ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "src,dst",
    [
        ("float32", "float16"),
        ("float16", "float32"),
        ("float32", "int32"),
        ("float32", "uint8"),
        ("int32", "float32"),
        ("int64", "int8"),
        ("int32", "uint16"),
        ("uint8", "int32"),
        ("float32", "bool"),
        ("bool", "float32"),
        ("float64", "float32"),
        ("int32", "float16"),
        ("float32", "int64"),
    ],
)
def test_cast(rng, src, dst) -> None:
    if src.startswith("float"):
        # in the destination's range (outside it the kernel's conversion is undefined)
        lo, hi = (0, 250) if dst == "uint8" else (-2000, 2000)
        x = rng.uniform(lo, hi, (3, 21)).astype(src)
        x[0, :5] = [0.5, -0.5, 1.5, -2.7, 0.0] if dst != "uint8" else [0.5, 1.5, 2.7, 0.0, 255.9]
    elif src == "bool":
        x = rng.integers(0, 2, (3, 21)).astype(bool)
    else:
        info = np.iinfo(src)
        x = rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), (3, 21), endpoint=True).astype(src)
    to = {"float16": 10, "float32": 1, "int32": 6, "uint8": 2, "int8": 3, "uint16": 4, "bool": 9, "int64": 7}[dst]
    check_op("Cast", [x], {"to": to})


def test_bfloat16_rounds_each_operation(rng) -> None:
    """bfloat16 is computed in float32 and rounded after every operation, as the kernel does."""
    import ml_dtypes

    a = rng.uniform(-4, 4, (3, 29)).astype(ml_dtypes.bfloat16)
    b = rng.uniform(-4, 4, (29,)).astype(np.float32)
    A = te.placeholder(a.shape, "bfloat16", name="A")
    B = te.placeholder(b.shape, "float32", name="B")
    C = te.compute(a.shape, lambda i, j: A[i, j] * A[i, j] + E.cast("bfloat16", B[j]) - A[i, j], name="C")
    D = te.compute(a.shape, lambda i, j: te.exp(C[i, j]) / E.cast("bfloat16", 3.0), name="D")
    F = te.compute(a.shape, lambda i, j: E.cast("float32", D[i, j]) + B[j], name="F")
    got = evaluate([C, D, F], {A: a, B: b})
    assert got[0].dtype == np.dtype(ml_dtypes.bfloat16)
    want = native([C, D, F], [A, B], [a, b])
    np.testing.assert_array_equal(got[0], want[0])  # +, *, - and casts rounded identically
    assert_close(got[1], want[1])  # exp: NumPy vs libm
    assert_close(got[2], want[2], ulps=2**16)  # inherits D's last-bit bfloat16 difference
    # the same input as uint16 bits
    (c_bits,) = evaluate([C], {A: a.view(np.uint16), B: b})
    np.testing.assert_array_equal(c_bits, got[0])


def test_lowp_and_subbyte_casts(rng) -> None:
    x = rng.uniform(-300, 300, (41,)).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-9]
    for to, name in ((17, "float8_e4m3fn"), (19, "float8_e5m2"), (22, "int4"), (21, "uint4"), (23, "float4_e2m1fn")):
        (y,) = check_op("Cast", [x], {"to": to})
        assert y.dtype.name == name
        (z,) = check_op("Cast", [y], {"to": 1})  # back to float32
        assert z.dtype == np.float32


# -- data movement ---------------------------------------------------------------------------------------
def test_transpose_gather_slice_pad_concat(rng) -> None:
    x = f32(rng, 3, 7, 5)
    check_op("Transpose", [x], {"perm": [2, 0, 1]})
    idx = np.array([[0, -1], [4, 2], [-5, 1]], np.int64)
    check_op("Gather", [x, idx], {"axis": 1}, consts=(1,))
    check_op("Gather", [x, np.array([2, -3, 0], np.int64)], {"axis": 0}, consts=(1,))
    starts, ends = np.array([1, -1], np.int64), np.array([7, -6], np.int64)
    axes, steps = np.array([1, 2], np.int64), np.array([2, -1], np.int64)
    check_op("Slice", [x, starts, ends, axes, steps], consts=(1, 2, 3, 4))
    pads = np.array([0, 2, 1, 1, 3, 0], np.int64)
    for mode in ("constant", "reflect", "edge"):
        check_op("Pad", [x, pads], {"mode": mode}, consts=(1,))
    check_op("Concat", [x, f32(rng, 3, 2, 5), f32(rng, 3, 11, 5)], {"axis": 1})
    check_op("Tile", [x, np.array([2, 1, 3], np.int64)], consts=(1,))
    check_op("Expand", [f32(rng, 3, 1), np.array([2, 3, 4], np.int64)], consts=(1,))
    check_op("DepthToSpace", [f32(rng, 1, 8, 3, 5)], {"blocksize": 2})
    check_op("Reshape", [x, np.array([5, -1], np.int64)], consts=(1,))
    check_op("Split", [x, np.array([2, 5], np.int64)], {"axis": 1}, consts=(1,))
    check_op("Trilu", [f32(rng, 2, 6, 9)], {"upper": 0})
    data = i32(rng, 4, 9)
    check_op("GatherElements", [data, rng.integers(-4, 3, (4, 9)).astype(np.int64)], {"axis": 0})


def test_select_with_out_of_range_reads_on_the_false_branch(rng) -> None:
    """Reads far out of range (negative, beyond the end, of an empty tensor) in the branch a
    select does not take are discarded; the taken branch reads the exact element."""
    a = f32(rng, 13)
    z = np.zeros((0, 4), np.float32)
    A = te.placeholder((13,), "float32", name="A")
    Z = te.placeholder((0, 4), "float32", name="Z")
    B = te.compute(
        (13,),
        lambda i: te.if_then_else(i >= 0, A[i], A[i * 1000 - 7] + A[E.const(-(2**30)) + i] + Z[i, i]),
        name="B",
    )
    # i < 13 reads A[25 - i] (out of range) on the untaken side, i >= 13 reads A[i] likewise
    C = te.compute((26,), lambda i: te.if_then_else(i < 13, B[i], B[25 - i]), name="C")
    got = evaluate([B, C], {A: a, Z: z})
    np.testing.assert_array_equal(got[0], a)
    np.testing.assert_array_equal(got[1], np.concatenate([a, a[::-1]]))
    want = native([B, C], [A, Z], [a, z])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# -- reductions ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL2",
                                "ReduceLogSumExp"])
def test_reductions(rng, op) -> None:
    x = f32(rng, 5, 13, 7, lo=0.5, hi=1.5)
    check_op(op, [x, np.array([1, 2], np.int64)], {"keepdims": 0}, consts=(1,), red_len=91)
    check_op(op, [x, np.array([0], np.int64)], consts=(1,), red_len=5)


def test_zero_dimensional_outputs(rng) -> None:
    x = f32(rng, 7, 13)
    (s,) = check_op("ReduceSum", [x, np.array([0, 1], np.int64)], {"keepdims": 0}, consts=(1,), red_len=91)
    assert s.shape == ()
    y, scale, zp = check_op("DynamicQuantizeLinear", [x], red_len=91)
    assert scale.shape == zp.shape == ()


def test_integer_reductions_are_exact(rng) -> None:
    x = i32(rng, 6, 200, lo=-(2**30), hi=2**30)  # the sums overflow and wrap
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"):
        check_op(op, [x, np.array([1], np.int64)], consts=(1,))
    check_op("ReduceSum", [i32(rng, 9, 31, dt="int8"), np.array([0], np.int64)], consts=(1,))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_ties(rng, op) -> None:
    x = rng.integers(-3, 3, (5, 17, 6)).astype(np.float32)  # many ties
    for last in (0, 1):
        for axis in (0, 1, 2):
            (r,) = check_op(op, [x], {"axis": axis, "select_last_index": last, "keepdims": 0})
            f = np.argmax if op == "ArgMax" else np.argmin
            want = f(np.flip(x, axis), axis=axis) if last else f(x, axis=axis)
            if last:
                want = x.shape[axis] - 1 - want
            np.testing.assert_array_equal(r, want)
        check_op(op, [x], {"axis": 1, "select_last_index": last}, max_elements=7)


def test_softmax_and_norms(rng) -> None:
    x = f32(rng, 3, 5, 37)
    check_op("Softmax", [x], {"axis": -1}, red_len=37)
    check_op("LogSoftmax", [x], {"axis": 1}, red_len=5)
    scale, bias = f32(rng, 37), f32(rng, 37)
    check_op("LayerNormalization", [x, scale, bias], {"axis": -1}, red_len=37)


def test_cumsum_and_topk(rng) -> None:
    x = i32(rng, 4, 23)
    check_op("CumSum", [x, np.array(1, np.int64)], consts=(1,))
    check_op("TopK", [f32(rng, 3, 29), np.array([5], np.int64)], consts=(1,))


# -- convolution and matrix products ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((1, 5, 13, 11), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),  # packed (im2col) path
        ((2, 3, 9, 10), (4, 3, 3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
        ((1, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise
        ((1, 4, 8, 7), (6, 2, 1, 1), {"group": 2}),  # grouped
        ((1, 3, 17), (5, 3, 4), {"pads": [2, 1]}),  # 1-D
    ],
)
def test_conv(rng, xs, ws, attrs) -> None:
    x, w, b = f32(rng, *xs), f32(rng, *ws), f32(rng, ws[0])
    check_op("Conv", [x, w, b], attrs, red_len=int(np.prod(ws[1:])))


@pytest.mark.parametrize("m,k,n", [(3, 5, 7), (19, 37, 45), (1, 40, 33)])
def test_matmul_and_gemm(rng, m, k, n) -> None:
    a, b = f32(rng, m, k), f32(rng, k, n)
    check_op("MatMul", [a, b], red_len=k)
    check_op("MatMul", [f32(rng, 2, m, k), b], red_len=k)
    c = f32(rng, n)
    check_op("Gemm", [a, np.ascontiguousarray(b.T), c], {"transB": 1, "alpha": 0.5, "beta": 2.0}, red_len=k)
    check_op("Gemm", [np.ascontiguousarray(a.T), b], {"transA": 1}, red_len=k, max_elements=50)


def test_pooling(rng) -> None:
    x = f32(rng, 1, 3, 11, 13)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    check_op("MaxPool", [x], attrs)
    check_op("AveragePool", [x], dict(attrs, count_include_pad=0), red_len=9)
    check_op("GlobalAveragePool", [x], red_len=143)


def _stage(out: te.Tensor, prefix: str) -> te.Tensor:
    """The stage of ``out``'s program whose operation name starts with ``prefix``."""
    stack, seen = [out.op], set()
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        if op.name.startswith(prefix):
            return op.output(0)
        stack.extend(t.op for t in op.input_tensors)
    raise AssertionError(f"no {prefix} stage")


@pytest.mark.parametrize("k,n", [(37, 45), (20, 16), (64, 100)])
def test_mm_pack_stage(rng, k, n) -> None:
    """The CPU GEMM's packing of a constant right operand (what the model compiler folds) is exact."""
    a = te.placeholder((17, k), "float32", name="a")  # M * N >= 256: the packed GEMM
    b = te.placeholder((k, n), "float32", name="b")
    from ember.ops.nn import matmul_tensor

    pk = _stage(matmul_tensor(a, b), "mm_pack")
    assert pk.op.constant_layout
    bv = f32(rng, k, n)
    (got,) = evaluate([pk], {b: bv})
    (want,) = native([pk], [b], [bv])
    np.testing.assert_array_equal(got, want)
    (small,) = evaluate([pk], {b: bv}, max_elements=13)
    np.testing.assert_array_equal(small, want)


def test_conv_pack_stage(rng) -> None:
    from ember.ops.nn import conv_tensor

    x = te.placeholder((2, 3, 11, 9), "float32", name="x")
    w = te.placeholder((4, 3, 3, 3), "float32", name="w")
    pk = _stage(conv_tensor(x, w, None, [2, 1], [1, 1], [1, 2], [1, 0], 1), "conv_pack")
    assert pk.op.constant_layout
    xv = f32(rng, 2, 3, 11, 9)
    (got,) = evaluate([pk], {x: xv})
    (want,) = native([pk], [x], [xv])
    np.testing.assert_array_equal(got, want)


# -- chunking and limits --------------------------------------------------------------------------------
@pytest.mark.parametrize("max_elements", [1, 5, 64, 1000])
def test_chunking_gives_the_same_values(rng, max_elements) -> None:
    x, w = f32(rng, 2, 3, 7, 6), f32(rng, 5, 3, 3, 3)
    check_op("Conv", [x, w], {"pads": [1, 1, 1, 1]}, red_len=27, max_elements=max_elements)
    check_op("ReduceSum", [i32(rng, 4, 9, 5), np.array([0, 2], np.int64)], consts=(1,), max_elements=max_elements)
    check_op("ArgMax", [f32(rng, 3, 11)], {"axis": 1}, max_elements=max_elements)
    check_op("Transpose", [x], {"perm": [3, 1, 0, 2]}, max_elements=max_elements)


def test_large_reduction_grid_is_chunked() -> None:
    """A 10^4 x 10^4 reduction grid (10^8 points, 400 MB as one float32 array) runs in chunks
    whose temporaries stay far below that."""
    n = 10_000
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n,), lambda i: te.sum(A[i] * B[k] + E.cast("float32", k % 3), axis=k), name="C")
    a = np.linspace(-1, 1, n, dtype=np.float32)
    b = np.ones(n, np.float32)
    tracemalloc.start()
    try:
        (c,) = evaluate([C], {A: a, B: b}, max_elements=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    want = a.astype(np.float64) * n + sum(q % 3 for q in range(n))
    # float32 accumulation: the partial sums reach 2e4, where one float32 ulp is 2**-9 ~ 2e-3, so
    # the result carries a few such roundings (5e-3 seen); 1e-2 is five ulps of the largest
    # partial sum, and rtol covers the large totals. (A wrong term would be off by >= 1.)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-2)


def test_one_output_point_larger_than_the_limit(rng) -> None:
    """The reduction axes are cut too when one output point's reduction exceeds ``max_elements``;
    partial results combine in order (ArgMax keeps the first maximum)."""
    x = rng.integers(0, 4, (2, 500)).astype(np.float32)
    for me in (1, 7, 100):
        check_op("ArgMax", [x], {"axis": 1}, max_elements=me)
        check_op("ReduceSum", [x, np.array([1], np.int64)], consts=(1,), max_elements=me, red_len=500)


# -- programs and errors -------------------------------------------------------------------------------------
def test_multi_output_let_and_user_reducer(rng) -> None:
    A = te.placeholder((6, 9), "int32", name="A")
    v = E.Var("v", A.dtype)
    k = te.reduce_axis((2, 9), name="k")
    # a two-value user reducer (wrapping sum, maximum) with a condition: the generic pairwise path
    red = te.comm_reducer(
        lambda x, y: (x[0] + y[0], E.max_expr(x[1], y[1])),
        lambda t0, t1: (E.const(0, t0), E.const(-(2**31), t1)),
        name="summax",
    )
    P, Q = te.compute((6, 9), lambda i, j: (A[i, j] + 1, E.Let(v, A[i, j] * 2, v * v - v, A.dtype)), name="PQ")
    S, M = te.compute((6,), lambda i: red((A[i, k] * 7, A[i, k]), axis=k, where=A[i, k] > -50), name="SM")
    a = i32(rng, 6, 9, lo=-(2**31), hi=2**31 - 1)
    a[0, 2:] = -60  # no element passes the condition: the identity
    got = evaluate([P, Q, S, M], {A: a})
    want = native([P, Q, S, M], [A], [a])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    ok = a[:, 2:] > -50
    np.testing.assert_array_equal(got[2], np.where(ok, a[:, 2:] * np.int32(7), 0).sum(1, dtype=np.int32))
    np.testing.assert_array_equal(got[3], np.where(ok, a[:, 2:], -(2**31)).max(1))
    (m,) = evaluate([M], {A: a}, max_elements=2)
    np.testing.assert_array_equal(m, got[3])


def test_symbolic_sizes_bound_from_inputs(rng) -> None:
    n = te.var("n")
    A = te.placeholder((n, 3), "float32", name="A")
    B = te.compute((n, 3), lambda i, j: A[n - 1 - i, j] * 2, name="B")
    a = f32(rng, 7, 3)
    (b,) = evaluate([B], {A: a})
    np.testing.assert_array_equal(b, a[::-1] * 2)


def test_errors_name_the_problem() -> None:
    A = te.placeholder((4,), "float32", name="A")
    B = te.compute((4,), lambda i: A[i] + 1, name="B")
    with pytest.raises(EvaluationError, match="placeholder A has no value"):
        evaluate([B], {})
    with pytest.raises(EvaluationError, match="shape"):
        evaluate([B], {A: np.zeros(5, np.float32)})
    with pytest.raises(EvaluationError, match="float64"):
        evaluate([B], {A: np.zeros(4, np.float64)})
    C = te.compute((4,), lambda i: E.Call(A.dtype, "no_such_fn", (A[i],)), name="C")
    with pytest.raises(EvaluationError, match="no_such_fn"):
        evaluate([C], {A: np.zeros(4, np.float32)})
    D = te.compute((4,), lambda i: A[i] + E.Ramp(E.const(0), E.const(1), 1, E.INT32).astype("float32"), name="D")
    with pytest.raises(EvaluationError, match="Ramp"):
        evaluate([D], {A: np.zeros(4, np.float32)})
    m = te.var("m")
    F = te.compute((m,), lambda i: A[0], name="F")
    with pytest.raises(EvaluationError, match="m"):
        evaluate([F], {A: np.zeros(4, np.float32)})
