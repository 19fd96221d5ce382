"""Low-precision types (ember.ops.lowp, Cast, QuantizeLinear/DequantizeLinear, data movement):
every conversion against ml_dtypes (exhaustively over all byte patterns when decoding; random
float32 values with NaN, infinities, overflow, subnormals and exact ties when encoding), the
float8_e8m0fnu rounding modes against ONNX's ``to_float8e8m0``, and whole ONNX models built with
``onnx.helper`` through ``ember.compile``."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import EmberError
from ember.ops import lowp
from ember.ops.registry import OpError

ml_dtypes = pytest.importorskip("ml_dtypes")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
FORMATS = FLOAT8 + ["float4_e2m1fn"]
SUBBYTE = ["int4", "uint4", "int2", "uint2"]


def _np(dt: str) -> np.dtype:
    return np.dtype(dt)  # ml_dtypes registers its names with NumPy (ember.ir.dtypes imports it)


def convert_kernel(src: str, dst: str, x: np.ndarray, vectorize: bool = False, **kw) -> np.ndarray:
    """Run ``lowp.convert`` (or a plain cast when neither side is low precision) on ``x``."""
    n = x.size
    A = te.placeholder((n,), dtype=src, name="A")
    B = te.compute((n,), lambda i: lowp.convert(A[i], dst, **kw), name="B")
    s = te.create_schedule([B.op])
    if vectorize:
        s[B].vectorize(s[B].split(B.op.axis[0], factor=8)[1])
    f = ember.build(s, [A, B], target="llvm")
    out = np.empty(n, _np(dst))
    out.view(np.uint8)[:] = 0xAB  # poison: a correct kernel overwrites every byte
    f(np.ascontiguousarray(x), out)
    return out


def _same_float(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, NaN where the reference has NaN, and the same sign of zero."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(g[ok], w[ok])
    np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(w[ok]))


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Identical elements: the same bit patterns for the float formats, the same values for the
    sub-byte integers (whose unused high bits ml_dtypes ignores)."""
    want = np.ascontiguousarray(want)
    if want.dtype.name in SUBBYTE:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def _hard_floats(rng: np.random.Generator, fmt: str) -> np.ndarray:
    """Random float32 values over the whole range of ``fmt`` and beyond, the specials, and the
    exact midpoints between neighbouring values of ``fmt`` (ties) with their neighbours."""
    n = 1 << (4 if fmt == "float4_e2m1fn" else 8)
    vals = np.arange(n, dtype=np.uint8).view(_np(fmt)).astype(np.float64)
    fin = np.unique(vals[np.isfinite(vals)])
    mids = (fin[:-1] + fin[1:]) / 2
    ties = mids.astype(np.float32)
    near = np.concatenate([np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
    big = float(fin.max())
    over = np.array([big, big * 1.03, big * 1.0625, big * 1.07, big * 1.2, big * 4, 3e38], np.float32)
    mags = (10.0 ** rng.uniform(-12, 6, 2000)).astype(np.float32)
    rand = mags * rng.choice([-1, 1], 2000).astype(np.float32)
    tiny = (fin[fin > 0].min() * rng.uniform(0, 3, 300)).astype(np.float32)
    specials = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1.17e-38], np.float32)
    out = np.concatenate([ties, -ties, near, -near, over, -over, rand, tiny, -tiny, specials])
    return out.astype(np.float32)


# -- decoding: all byte patterns ------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS + ["float8_e8m0fnu"])
@pytest.mark.parametrize("vectorize", [False, True], ids=["scalar", "vector"])
def test_decode_every_pattern(fmt, vectorize):
    n = 16 if fmt == "float4_e2m1fn" else 256
    x = np.arange(n, dtype=np.uint8).view(_np(fmt))
    got = convert_kernel(fmt, "float32", x, vectorize)
    _same_float(got, x.astype(np.float32))


@pytest.mark.parametrize("fmt", FORMATS + ["float8_e8m0fnu"])
@pytest.mark.parametrize("dst", ["float16", "float64", "bfloat16", "int32", "int4"])
def test_decode_to_other_types(fmt, dst):
    n = 16 if fmt == "float4_e2m1fn" else 256
    x = np.arange(n, dtype=np.uint8).view(_np(fmt))
    f32 = x.astype(np.float32)
    if dst in ("int32", "int4"):  # C leaves NaN/inf/overflow to integers undefined: finite, in range
        keep = np.isfinite(f32) & (np.abs(f32) < 2**30)
        x, f32 = x[keep], f32[keep]
    got = convert_kernel(fmt, dst, x)
    with np.errstate(over="ignore"):  # float8_e8m0fnu beyond float16's range: inf
        want = f32.astype(np.int64).astype(_np(dst)) if dst in ("int32", "int4") else f32.astype(_np(dst))
    if dst in ("int32", "int4"):
        np.testing.assert_array_equal(got, want)
    else:
        _same_float(got, want)


# -- encoding: random float32, ties, overflow, specials --------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("vectorize", [False, True], ids=["scalar", "vector"])
def test_encode_float32(rng, fmt, saturate, vectorize):
    x = _hard_floats(rng, fmt)
    got = convert_kernel("float32", fmt, x, vectorize, saturate=saturate)
    if saturate and fmt != "float4_e2m1fn":
        info = ml_dtypes.finfo(_np(fmt))
        want = np.clip(x, info.min, info.max).astype(_np(fmt))  # ONNX's saturate_cast
    else:
        want = x.astype(_np(fmt))
    bad = np.nonzero(got.view(np.uint8) != want.view(np.uint8))[0]
    assert bad.size == 0, [(float(x[i]), hex(got.view(np.uint8)[i]), hex(want.view(np.uint8)[i])) for i in bad[:8]]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("src", ["float16", "float64", "bfloat16", "int32", "int8", "uint8", "bool"])
def test_encode_other_sources(rng, fmt, src):
    x32 = _hard_floats(rng, fmt)
    if src in ("int32", "int8", "uint8"):
        info = np.iinfo(src)
        x = rng.integers(info.min, info.max, 500, endpoint=True).astype(src)
    elif src == "bool":
        x = rng.integers(0, 2, 50).astype(bool)
    else:
        with np.errstate(over="ignore"):
            x = x32.astype(_np(src))
    got = convert_kernel(src, fmt, x, saturate=False)
    with np.errstate(over="ignore"):
        want = x.astype(np.float32).astype(_np(fmt))  # ml_dtypes rounds wide inputs to float32 first
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("a", FORMATS)
@pytest.mark.parametrize("b", FORMATS)
def test_format_to_format(a, b):
    if a == b:
        return
    x = np.arange(16 if a == "float4_e2m1fn" else 256, dtype=np.uint8).view(_np(a))
    got = convert_kernel(a, b, x, saturate=False)
    want = x.astype(np.float32).astype(_np(b))
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_e8m0_against_onnx(rng, mode, saturate):
    bits = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0, 1, 0x00400000, 0x007FFFFF, 0x00800000, 0x3F800000, 0x3FC00000, 0x3FA00000,
                      0x3FE00000, 0x3FC00001, 0x7F000000, 0x7F000001, 0x7F400000, 0x7F7FFFFF, 0x7F800000,
                      0x7FC00000, 0xFF800000, 0xBFC00000, 0x80000000], np.uint32)
    x = np.concatenate([bits, edges]).view(np.float32)
    got = convert_kernel("float32", "float8_e8m0fnu", x, saturate=saturate, round_mode=mode)
    want = numpy_helper.to_float8e8m0(x, saturate, mode)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


# -- sub-byte integers ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dst", SUBBYTE)
@pytest.mark.parametrize("src", ["float32", "float64", "float16", "int32", "int8", "uint16", "bool"])
def test_to_subbyte_int(rng, src, dst):
    if src == "bool":
        x = rng.integers(0, 2, 40).astype(bool)
    elif "int" in src:
        info = np.iinfo(src)
        x = rng.integers(info.min, info.max, 300, endpoint=True).astype(src)
    else:
        vals = np.concatenate([rng.uniform(-40, 40, 300), np.arange(-20, 20) + 0.5, [np.nan, np.inf, -np.inf, 1e30]])
        with np.errstate(over="ignore"):
            x = vals.astype(src)
    got = convert_kernel(src, dst, x)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(_np(dst))
    np.testing.assert_array_equal(got.view(np.uint8) & ((1 << _np(dst).itemsize * 8) - 1), want.view(np.uint8))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("src", SUBBYTE)
@pytest.mark.parametrize("dst", ["float32", "int8", "uint8", "int64", "float16"])
def test_from_subbyte_int(src, dst):
    bits = int(src[-1])
    raw = np.arange(256, dtype=np.uint8)  # every byte: the high bits must be ignored, as ml_dtypes does
    x = raw.view(_np(src))
    n = x.size
    A = te.placeholder((n,), dtype=src, name="A")
    B = te.compute((n,), lambda i: te.cast(dst, A[i]), name="B")
    C = te.compute((n,), lambda i: A[i], name="C")  # a copy stores the canonical byte
    f = ember.build(te.create_schedule([B.op, C.op]), [A, B, C], target="llvm")
    out, copy = np.empty(n, dst), np.empty(n, _np(src))
    f(x, out, copy)
    np.testing.assert_array_equal(out, x.astype(np.int64).astype(dst))
    np.testing.assert_array_equal(copy, x)
    assert (copy.view(np.uint8) < (1 << bits)).all()


def test_subbyte_arithmetic_wraps():
    A = te.placeholder((16,), dtype="int4", name="A")
    B = te.compute((16,), lambda i: A[i] + A[i], name="B")
    f = ember.build(te.create_schedule([B.op]), [A, B], target="llvm")
    x = np.arange(-8, 8).astype(ml_dtypes.int4)
    out = np.empty(16, ml_dtypes.int4)
    f(x, out)
    np.testing.assert_array_equal(out.astype(np.int64), ((np.arange(-8, 8) * 2 + 8) % 16) - 8)


# -- errors -----------------------------------------------------------------------------------------------
def test_storage_types_take_no_arithmetic():
    A = te.placeholder((4,), dtype="float8_e4m3fn", name="A")
    with pytest.raises(EmberError):
        B = te.compute((4,), lambda i: A[i] + A[i], name="B")
        ember.build(te.create_schedule([B.op]), [A, B], target="llvm")
    with pytest.raises(EmberError, match="storage type"):
        te.compute((4,), lambda i: A[i] * te.const(2.0, "float32"), name="C")


def test_constants_are_encoded():
    from ember.ir import expr as E

    c = E.const(1.5, "float8_e4m3fn")
    assert c.value == int(np.array([1.5], np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)[0])


# -- whole models -------------------------------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits=(), opset=25):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_model_cast_round_trip(rng):
    x = _hard_floats(rng, "float8_e4m3fn")[:777].reshape(7, 111)
    nodes = [
        helper.make_node("Cast", ["x"], ["q"], to=TensorProto.FLOAT8E4M3FN, saturate=0),
        helper.make_node("Transpose", ["q"], ["qt"], perm=[1, 0]),
        helper.make_node("Cast", ["qt"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT4),
        helper.make_node("Cast", ["x"], ["e"], to=TensorProto.FLOAT8E8M0, round_mode="nearest"),
    ]
    m = _model(
        nodes,
        [_vi("x", TensorProto.FLOAT, [7, 111])],
        [_vi("qt", TensorProto.FLOAT8E4M3FN, [111, 7]), _vi("y", TensorProto.FLOAT, [111, 7]),
         _vi("b", TensorProto.BFLOAT16, [7, 111]), _vi("i", TensorProto.INT4, [7, 111]),
         _vi("e", TensorProto.FLOAT8E8M0, [7, 111])],
    )
    qt, y, b, i, e = ember.compile(m)(x)
    want_q = x.astype(ml_dtypes.float8_e4m3fn).T
    assert qt.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(qt.view(np.uint8), want_q.view(np.uint8))
    _same_float(y, want_q.astype(np.float32))
    assert b.dtype == np.dtype(ml_dtypes.bfloat16)
    _same_float(b, x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(i, np.nan_to_num(x, posinf=0, neginf=0).clip(-2e9, 2e9).astype(np.int64)
                                  .astype(ml_dtypes.int4))
    np.testing.assert_array_equal(e.view(np.uint8), numpy_helper.to_float8e8m0(x, True, "nearest").view(np.uint8))


@pytest.mark.parametrize("elem,dt", [(TensorProto.FLOAT8E5M2, "float8_e5m2"), (TensorProto.INT4, "int4"),
                                     (TensorProto.UINT2, "uint2"), (TensorProto.BFLOAT16, "bfloat16"),
                                     (TensorProto.FLOAT4E2M1, "float4_e2m1fn")])
def test_model_data_movement(rng, elem, dt):
    """Reshape, Transpose, Slice, Concat, Gather, Identity and an initializer of the type, as
    inputs and outputs (ml_dtypes arrays in and out)."""
    n = 1 << (4 if dt == "float4_e2m1fn" else 8)
    raw = rng.integers(0, n, (5, 6, 7)).astype(np.uint8)
    x = raw.view(_np(dt)) if _np(dt).itemsize == 1 else rng.standard_normal((5, 6, 7)).astype(_np(dt))
    w = x[:1, :, 2:7].copy()  # Concat needs the slice's (6, 5) on the other axes
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Reshape", ["t", "shp"], ["r"]),
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["s"]),
        helper.make_node("Concat", ["s", "w"], ["c"], axis=0),
        helper.make_node("Gather", ["c", "idx"], ["g"], axis=1),
        helper.make_node("Identity", ["g"], ["o"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([7, 30], np.int64), "shp"),
        numpy_helper.from_array(np.array([1, 2], np.int64), "st"),
        numpy_helper.from_array(np.array([4, 7], np.int64), "en"),
        numpy_helper.from_array(np.array([0, 2], np.int64), "ax"),
        numpy_helper.from_array(np.array([5, 0, 2], np.int64), "idx"),
        numpy_helper.from_array(w, "w"),
    ]
    c = np.concatenate([x[1:4, :, 2:7], w], axis=0)
    want_o = c[:, [5, 0, 2]]
    m = _model(nodes, [_vi("x", elem, [5, 6, 7])], [_vi("r", elem, [7, 30]), _vi("o", elem, list(want_o.shape))],
               inits)
    r, o = ember.compile(m)(x)
    assert r.dtype == _np(dt) and o.dtype == _np(dt)
    _same_bits(r, x.transpose(2, 0, 1).reshape(7, 30))
    _same_bits(o, want_o)


@pytest.mark.parametrize("qt,elem", [("int4", TensorProto.INT4), ("uint4", TensorProto.UINT4),
                                     ("int2", TensorProto.INT2), ("uint2", TensorProto.UINT2)])
def test_model_quantize_subbyte_per_axis(rng, qt, elem):
    from onnx.reference import ReferenceEvaluator

    x = rng.uniform(-6, 6, (3, 5, 11)).astype(np.float32)
    scale = rng.uniform(0.2, 1.5, 5).astype(np.float32)
    lo, hi = int(ml_dtypes.iinfo(_np(qt)).min), int(ml_dtypes.iinfo(_np(qt)).max)
    zp = rng.integers(lo, hi + 1, 5).astype(_np(qt))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1)]
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")]
    m = _model(nodes, [_vi("x", TensorProto.FLOAT, [3, 5, 11])],
               [_vi("q", elem, [3, 5, 11]), _vi("d", TensorProto.FLOAT, [3, 5, 11])], inits)
    q, d = ember.compile(m)(x)
    rq, rd = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_array_equal(q, rq)
    np.testing.assert_allclose(d, rd, rtol=1e-6)


@pytest.mark.parametrize("qt,elem", [("float8_e4m3fn", TensorProto.FLOAT8E4M3FN),
                                     ("float8_e5m2fnuz", TensorProto.FLOAT8E5M2FNUZ),
                                     ("float4_e2m1fn", TensorProto.FLOAT4E2M1)])
@pytest.mark.parametrize("saturate", [0, 1])
def test_model_quantize_float_blocked(rng, qt, elem, saturate):
    from onnx.reference import ReferenceEvaluator

    x = (rng.standard_normal((4, 9)) * 10.0 ** rng.uniform(-3, 6, (4, 9))).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, (4, 3)).astype(np.float32)
    zp = np.zeros((4, 3), np.float32).astype(_np(qt))
    attrs = {"axis": 1, "block_size": 3}
    if qt != "float4_e2m1fn":
        attrs["saturate"] = saturate
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "s"], ["d"], axis=1, block_size=3)]
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")]
    m = _model(nodes, [_vi("x", TensorProto.FLOAT, [4, 9])],
               [_vi("q", elem, [4, 9]), _vi("d", TensorProto.FLOAT, [4, 9])], inits)
    q, d = ember.compile(m)(x)
    rq, rd = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_array_equal(q.view(np.uint8), rq.view(np.uint8))
    _same_float(d, rd)


def test_model_bfloat16_math_and_ndarray_input(rng):
    x = rng.standard_normal((3, 37)).astype(ml_dtypes.bfloat16)
    y = rng.standard_normal((3, 37)).astype(ml_dtypes.bfloat16)
    m = _model([helper.make_node("Add", ["x", "y"], ["a"]), helper.make_node("Mul", ["a", "x"], ["o"])],
               [_vi("x", TensorProto.BFLOAT16, [3, 37]), _vi("y", TensorProto.BFLOAT16, [3, 37])],
               [_vi("o", TensorProto.BFLOAT16, [3, 37])])
    model = ember.compile(m)
    (o,) = model(x, y)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    # One bfloat16 rounding per operator at most (a fused kernel keeps float32 in between).
    np.testing.assert_allclose(o.astype(np.float32), (x32 + y32) * x32, rtol=2**-7, atol=1e-6)
    nd = ember.nd.array(x.astype(np.float32), dtype="bfloat16")
    (o2,) = model(nd, y)
    np.testing.assert_array_equal(o2.view(np.uint16), o.view(np.uint16))


def test_model_errors():
    m = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, round_mode="sideways")],
               [_vi("x", TensorProto.FLOAT, [4])], [_vi("y", TensorProto.FLOAT8E8M0, [4])])
    with pytest.raises(OpError, match="round_mode"):
        ember.compile(m)
    zp = numpy_helper.from_array(np.array([1.0], np.float32).astype(ml_dtypes.float8_e4m3fn), "z")
    m = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
               [_vi("x", TensorProto.FLOAT, [4])], [_vi("y", TensorProto.FLOAT8E4M3FN, [4])],
               [numpy_helper.from_array(np.array([1.0], np.float32), "s"), zp])
    with pytest.raises(OpError, match="zero point"):
        ember.compile(m)
    m = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
               [_vi("x", TensorProto.FLOAT8E4M3FN, [4])], [_vi("y", TensorProto.FLOAT, [4])])
    with pytest.raises(ember.ArgumentError, match="float8_e4m3fn"):
        ember.compile(m)(np.zeros(4, np.float32))
