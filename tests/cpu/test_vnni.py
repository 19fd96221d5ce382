"""int8 products on x86 VNNI (ember.ops.vnni, ember.backends.cpu.dot4).

* MatMulInteger built for explicit targets against an exact int64 NumPy reference: every
  signedness of both operands, no / scalar / per-row / per-column zero points (extreme values
  included), sizes no tile divides (M, N, K odd; K not a multiple of 4), outputs poisoned first.
* Feature selection: ``-mcpu=haswell`` code holds no ``vpdpbusd`` and runs here (the int32 packed
  GEMM); ``icelake-server`` / ``sapphirerapids`` code holds ``vpdpbusd`` on zmm, ``alderlake``
  (AVX-VNNI) its VEX form; the host runs the VNNI code when its CPU has VNNI.
* The call itself: on a target without VNNI the code generator raises CodegenError.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import ember
from ember import te
from ember.backends.cpu.dot4 import OP, vnni_width
from ember.errors import CodegenError
from ember.ir import expr as E
from ember.ops.registry import OpContext, call
from ember.strategy.cpu import CPUStrategy
from ember.target import Target

HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().replace("+", "").split(","))
HOST_VNNI = vnni_width(Target("llvm")) > 0


def _can_run(target: str) -> bool:
    need = {"llvm": set(), "llvm -mcpu=haswell": {"avx2", "fma"},
            "llvm -mcpu=icelake-server": {"avx512f", "avx512bw", "avx512vl", "avx512vnni"}}[target]
    return need <= HOST_FEATURES


def _build_mmi(target: str, a_shape, b_shape, adt: str, bdt: str, azp_shape, bzp_shape):
    strategy = CPUStrategy(target)
    a = te.placeholder(a_shape, adt, name="a")
    b = te.placeholder(b_shape, bdt, name="b")
    phs = [a, b]
    names = ["a", "b"]
    if azp_shape is not None or bzp_shape is not None:
        phs.append(te.placeholder(azp_shape or (), adt, name="azp"))
        names.append("azp" if azp_shape is not None else "")
    if bzp_shape is not None:
        phs.append(te.placeholder(bzp_shape, bdt, name="bzp"))
        names.append("bzp")
    if names[-1] == "":
        phs, names = phs[:-1], names[:-1]
    (out,) = call(OpContext("MatMulInteger", {}, names, {}, 21, "n0", strategy=strategy), phs)
    s = strategy.schedule_group([out])
    used = {id(st.op) for st in s.stages}
    ins = [p for p in phs if id(p.op) in used]
    f = ember.build(s, ins + [out], target=target, name="mmi")
    return f, phs, ins, out


RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


def _rand(rng, shape, dt: str, extreme: bool = False) -> np.ndarray:
    lo, hi = RANGES[dt]
    if extreme:
        return rng.choice(np.array([lo, hi], np.int64), shape).astype(dt)
    return rng.integers(lo, hi + 1, shape).astype(dt)


CASES = [
    # a_shape, b_shape, azp shape (None: absent), bzp shape
    ((37, 29), (29, 53), None, None),
    ((37, 29), (29, 53), (), ()),
    ((2, 21, 71), (71, 35), (21,), (35,)),  # batch, per-row and per-column zero points
    ((17, 5), (5, 19), (), (19,)),
    ((9, 131), (131, 17), None, (17,)),
]


@pytest.mark.parametrize("adt,bdt", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8")])
@pytest.mark.parametrize("target,case", [("llvm", c) for c in range(len(CASES))]
                         + [(t, c) for t in ("llvm -mcpu=icelake-server", "llvm -mcpu=haswell") for c in (1, 2)])
def test_matmul_integer_exact(adt: str, bdt: str, case: int, target: str) -> None:
    """The host runs every case, the explicit targets two of them."""
    if not _can_run(target):
        pytest.skip(f"this CPU cannot run code for {target}")
    a_shape, b_shape, azp_shape, bzp_shape = CASES[case]
    rng = np.random.default_rng(case * 7 + len(adt + bdt))
    f, phs, ins, out = _build_mmi(target, a_shape, b_shape, adt, bdt, azp_shape, bzp_shape)
    extreme = case == 3  # all bytes at their type's limits: the largest partial sums
    arrays = {"a": _rand(rng, a_shape, adt, extreme), "b": _rand(rng, b_shape, bdt, extreme)}
    if azp_shape is not None or bzp_shape is not None:
        arrays["azp"] = _rand(rng, azp_shape or (), adt, extreme)
    if bzp_shape is not None:
        arrays["bzp"] = _rand(rng, bzp_shape, bdt, extreme)
    res = np.full([int(d.value) for d in out.shape], -12345, np.int32)
    f(*[arrays[p.op.name] for p in ins], res)
    az = arrays["azp"].astype(np.int64) if "azp" in arrays else np.int64(0)
    if az.ndim == 1:
        az = az[:, None]
    bz = arrays["bzp"].astype(np.int64) if "bzp" in arrays else np.int64(0)
    ref = (arrays["a"].astype(np.int64) - az) @ (arrays["b"].astype(np.int64) - bz)
    np.testing.assert_array_equal(res, ref)


def _asm(target: str) -> str:
    f, *_ = _build_mmi(target, (37, 29), (29, 53), "uint8", "int8", (), (53,))
    return f.get_source("asm")


def test_haswell_code_has_no_vnni() -> None:
    assert vnni_width(Target("llvm -mcpu=haswell")) == 0
    assert "vpdpbusd" not in _asm("llvm -mcpu=haswell")


@pytest.mark.parametrize("target", ["llvm -mcpu=icelake-server", "llvm -mcpu=sapphirerapids"])
def test_avx512_vnni_code_holds_vpdpbusd(target: str) -> None:
    asm = _asm(target)
    assert any("vpdpbusd" in line and "%zmm" in line for line in asm.splitlines())


def test_avx_vnni_code_holds_the_vex_form() -> None:
    assert vnni_width(Target("llvm -mcpu=alderlake")) == 8
    asm = _asm("llvm -mcpu=alderlake")
    assert any("vpdpbusd" in line and "{vex}" in line for line in asm.splitlines())


def test_mattr_turns_vnni_off() -> None:
    assert vnni_width(Target("llvm -mcpu=icelake-server -mattr=-avx512vnni")) == 0


@pytest.mark.skipif(not HOST_VNNI, reason="this CPU has no AVX512-VNNI / AVX-VNNI")
def test_host_code_uses_vpdpbusd() -> None:
    assert "vpdpbusd" in _asm("llvm")


def _dot4_kernel(target: str, n: int):
    a = te.placeholder((n,), "uint32", name="a")
    b = te.placeholder((n,), "uint32", name="b")
    c = te.compute((n,), lambda i: E.Call(E.const(0, "int32").dtype, OP, (E.const(5, "int32"), a[i], b[i])), name="c")
    s = te.create_schedule(c.op)
    return ember.build(s, [a, b, c], target=target, name="dot4")


def test_dot4_call_without_vnni_is_a_codegen_error() -> None:
    with pytest.raises(CodegenError, match="AVX512-VNNI or AVX-VNNI"):
        _dot4_kernel("llvm -mcpu=haswell", 7)


@pytest.mark.skipif(not HOST_VNNI, reason="this CPU has no AVX512-VNNI / AVX-VNNI")
def test_dot4_call_semantics_scalar() -> None:
    """The scalar (unvectorized) call against the byte arithmetic it stands for."""
    rng = np.random.default_rng(0)
    n = 257
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    out = np.full(n, -1, np.int32)
    _dot4_kernel("llvm", n)(a, b, out)
    au = a.view(np.uint8).reshape(n, 4).astype(np.int64)
    bs = b.view(np.int8).reshape(n, 4).astype(np.int64)
    np.testing.assert_array_equal(out, 5 + (au * bs).sum(axis=1))


# -- convolutions ---------------------------------------------------------------------------------
_ONNX = {"uint8": 2, "int8": 3}


def _conv_ref(x: np.ndarray, w: np.ndarray, stride, pads) -> np.ndarray:
    """int64 convolution of NCHW ``x`` (already shifted by its zero point) with MCKK ``w``,
    zero padding (t, l, b, r)."""
    N, C, H, W = x.shape
    M, _, KH, KW = w.shape
    xp = np.zeros((N, C, H + pads[0] + pads[2], W + pads[1] + pads[3]), np.int64)
    xp[:, :, pads[0]:pads[0] + H, pads[1]:pads[1] + W] = x
    OH = (xp.shape[2] - KH) // stride[0] + 1
    OW = (xp.shape[3] - KW) // stride[1] + 1
    out = np.zeros((N, M, OH, OW), np.int64)
    for r in range(KH):
        for q in range(KW):
            patch = xp[:, :, r: r + stride[0] * OH: stride[0], q: q + stride[1] * OW: stride[1]]
            out += np.einsum("nchw,mc->nmhw", patch, w[:, :, r, q])
    return out


@pytest.mark.parametrize("xdt,wdt", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8")])
@pytest.mark.parametrize("zps", [False, True])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_conv_integer_exact(xdt: str, wdt: str, zps: bool, target: str) -> None:
    """ConvInteger (pads reading the image's zero point, strides, K = 5*3*3 = 45 not a multiple
    of 4, 19 output channels) against the int64 reference, with and without zero points (per
    output channel for the weights)."""
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    if not _can_run(target):
        pytest.skip(f"this CPU cannot run code for {target}")
    rng = np.random.default_rng(len(xdt + wdt) + zps)
    x = _rand(rng, (2, 5, 11, 9), xdt)
    w = _rand(rng, (19, 5, 3, 3), wdt)
    consts = {"w": w}
    names = ["x", "w"]
    xz, wz = np.int64(0), np.zeros(19, np.int64)
    if zps:
        consts["xz"], consts["wz"] = _rand(rng, (), xdt), _rand(rng, (19,), wdt)
        names += ["xz", "wz"]
        xz, wz = consts["xz"].astype(np.int64), consts["wz"].astype(np.int64)
    node = oh.make_node("ConvInteger", names, ["y"], strides=[2, 1], pads=[1, 0, 1, 2])
    g = oh.make_graph([node], "c", [oh.make_tensor_value_info("x", _ONNX[xdt], list(x.shape))],
                      [oh.make_tensor_value_info("y", 6, None)], [nh.from_array(v, k) for k, v in consts.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    out = ember.compile(m, target=target, use_cache=False)(x=x)
    got = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
    ref = _conv_ref(x.astype(np.int64) - xz, w.astype(np.int64) - wz[:, None, None, None], (2, 1), (1, 0, 1, 2))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("target, vnni", [("llvm -mcpu=haswell", False), ("llvm -mcpu=icelake-server", True)])
def test_conv_integer_picks_vnni_by_target(target: str, vnni: bool) -> None:
    strategy = CPUStrategy(target)
    x = te.placeholder((1, 8, 9, 9), "uint8", name="x")
    w = te.placeholder((32, 8, 3, 3), "int8", name="w")
    (out,) = call(OpContext("ConvInteger", {"pads": [1, 1, 1, 1]}, ["x", "w"], {}, 21, "n0", strategy=strategy),
                  [x, w])
    asm = ember.build(strategy.schedule_group([out]), [x, w, out], target=target, name="convi").get_source("asm")
    assert ("vpdpbusd" in asm) == vnni


@pytest.mark.parametrize("adt,bdt", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1)])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_qgemm_float_output(adt: str, bdt: str, ta: int, tb: int, target: str) -> None:
    """com.microsoft QGemm with a float32 output (no y_scale): ``alpha * a_scale * b_scale[n] *
    ((A - a_zp) @ (B - b_zp[n]) + C)`` against float64 of the exact int64 sum. The only rounding
    is float32's (the int32 sum to float32, two products): relative 1e-6."""
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    if not _can_run(target):
        pytest.skip(f"this CPU cannot run code for {target}")
    rng = np.random.default_rng(ta + 2 * tb + len(adt + bdt))
    M, K, N = 19, 45, 37
    a = _rand(rng, (K, M) if ta else (M, K), adt)
    b = _rand(rng, (N, K) if tb else (K, N), bdt)
    c = rng.integers(-5000, 5000, (N,)).astype(np.int32)
    azp, bzp = _rand(rng, (), adt), _rand(rng, (N,), bdt)
    a_scale, b_scale = np.array(0.02, np.float32), (rng.random(N) * 0.01 + 0.001).astype(np.float32)
    consts = {"as": a_scale, "az": azp, "b": b, "bs": b_scale, "bz": bzp, "c": c}
    node = oh.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c"], ["y"], domain="com.microsoft",
                        transA=ta, transB=tb, alpha=0.5)
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("a", _ONNX[adt], list(a.shape))],
                      [oh.make_tensor_value_info("y", 1, None)], [nh.from_array(v, k) for k, v in consts.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    out = ember.compile(m, target=target, use_cache=False)(a=a)
    got = np.asarray(out[0] if isinstance(out, (list, tuple)) else out)
    a2 = (a.T if ta else a).astype(np.int64) - int(azp)
    b2 = (b.T if tb else b).astype(np.int64) - bzp.astype(np.int64)
    ref = 0.5 * float(a_scale) * b_scale.astype(np.float64) * (a2 @ b2 + c).astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
