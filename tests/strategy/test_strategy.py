"""Strategies (ember/strategy): dispatch on the target, layout parameters read from the target
and never from the host (a model compiled for cuda, llvm -mcpu=haswell or skylake-avx512 gets
its own GEMM panel width whatever this host is), the op flags that replaced tag "keep", and the
knob spaces of the CPU and GPU packed GEMM templates: the default point is the heuristic
schedule, other legal points compute the same results (NumPy, sizes no tile divides), illegal
points are refused before anything is built."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
import ember.target as target_mod
from ember import te
from ember.lowering import lower
from ember.ops import layout as ops_layout
from ember.ops.nn import conv_tensor, matmul_tensor
from ember.strategy import CPUStrategy, GPUStrategy, InvalidConfig, base, strategy_for
from ember.te import ComputeOp
from ember.te.rewrite import post_order

onnx = pytest.importorskip("onnx", reason="the model tests build ONNX models")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _conv_ref(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """Stride-1 NCHW convolution in float64."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("mc,nchw->nmhw", w[:, :, i, j], xp[:, :, i : i + oh, j : j + ow])
    return out


@pytest.fixture
def sse_host(monkeypatch):
    """Pretend the host is an SSE-only x86-64 (128-bit vectors), so a width read from the host
    would show."""
    monkeypatch.setattr(target_mod, "_llvm_host", lambda: ("x86_64-unknown-linux-gnu", "x86-64", "+sse,+sse2"))
    ops_layout.host_layout.cache_clear()
    base.host_strategy.cache_clear()
    yield
    ops_layout.host_layout.cache_clear()
    base.host_strategy.cache_clear()


def test_strategy_for_dispatches_on_the_target() -> None:
    assert isinstance(strategy_for("llvm"), CPUStrategy)
    assert isinstance(strategy_for("llvm -mcpu=haswell"), CPUStrategy)
    assert isinstance(strategy_for("cuda -arch=sm_80"), GPUStrategy)
    assert isinstance(strategy_for("rocm -mcpu=gfx942"), GPUStrategy)
    assert strategy_for("cuda -arch=sm_80").is_gpu and not strategy_for("llvm").is_gpu


def test_panel_width_is_the_targets_not_the_hosts(sse_host) -> None:
    assert ember.Target("llvm").vector_bits == 128  # the fake host
    assert strategy_for("llvm").gemm_panel_width() == 8
    assert ops_layout.host_layout().gemm_panel_width() == 8
    assert strategy_for("llvm -mcpu=haswell").gemm_panel_width() == 16
    assert strategy_for("llvm -mcpu=skylake-avx512").gemm_panel_width() == 32
    assert strategy_for("cuda -arch=sm_80").gemm_panel_width() == 32
    assert strategy_for("rocm -mcpu=gfx942").gemm_panel_width() == 32


def _conv_model(rng) -> bytes:
    w = nh.from_array(rng.standard_normal((7, 5, 3, 3)).astype(np.float32), "w")
    g = h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])],
                     "conv", [h.make_tensor_value_info("x", T.FLOAT, [1, 5, 13, 11])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _pack_widths(ir: str) -> set[int]:
    """The panel widths of the packed im2col workspaces in a model's loop IR."""
    return {int(m.group(1)) for m in re.finditer(r"conv_pack_\d+: float32\[[^\]]*, (\d+)\]", ir)}


def test_cuda_model_gets_the_gpu_panel_width_whatever_the_host(rng, sse_host, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    gpu = ember.compile(_conv_model(rng), target="cuda -arch=sm_80")
    assert _pack_widths(gpu.get_source("ir")) == {32}
    with ember.transform.PassContext(disabled_passes=["AlterLayout"]):  # the NCHW packed-GEMM convolution
        cpu = ember.compile(_conv_model(rng), target="llvm")  # the (fake) host: two SSE registers
    assert _pack_widths(cpu.get_source("ir")) == {8}
    blocked = ember.compile(_conv_model(rng), target="llvm")  # the layout pass blocks by the host's 4 lanes
    assert any(v.endswith("__NCHW4c") for v in blocked.plan["values"])


@pytest.mark.parametrize("spec,nr", [("llvm -mcpu=haswell", 16), ("llvm -mcpu=skylake-avx512", 32), ("cuda", 32)])
def test_model_lowering_uses_the_targets_panel_width(rng, sse_host, spec, nr) -> None:
    from ember.driver import optimize
    from ember.frontend.onnx import import_onnx
    from ember.graph.passes import fuse
    from ember.model.group_lowering import lower_groups

    g = optimize(import_onnx(_conv_model(rng)))
    lower_groups(g, fuse(g), target=spec)
    packed = [v.shape for k, v in g.values.items() if "__ws" in k and len(v.shape) == 6]
    assert packed and all(s[-1] == nr for s in packed), packed


def test_haswell_kernels_use_their_layout_and_compute_correctly(rng) -> None:
    st = strategy_for("llvm -mcpu=haswell")
    x = te.placeholder((1, 5, 13, 11), name="x")
    w = te.placeholder((7, 5, 3, 3), name="w")
    out = conv_tensor(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1, st)
    gemm = next(op for op in post_order([out.op]) if isinstance(op, ComputeOp) and op.tag == "conv_packed")
    assert gemm.attrs["nr"] == 16
    f = ember.build(st.schedule_group([out]), [x, w, out], target=str(st.target), name="conv_haswell")
    xa = rng.standard_normal((1, 5, 13, 11)).astype(np.float32)
    wa = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    got = np.full((1, 7, 13, 11), np.nan, dtype=np.float32)
    f(xa, wa, got)
    np.testing.assert_allclose(got, _conv_ref(xa, wa, 1), rtol=1e-4, atol=1e-4)


# -- op flags ----------------------------------------------------------------------------------------
def test_keep_split_into_flags() -> None:
    x = te.placeholder((1, 5, 13, 11), name="x")
    w = te.placeholder((7, 5, 3, 3), name="w")
    ops = {op.tag or op.name: op for op in post_order([conv_tensor(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1).op])
           if isinstance(op, ComputeOp)}
    pack, gemm = ops["gemm_pack"], ops["conv_packed"]
    assert pack.constant_layout and pack.workspace and pack.materialize
    assert gemm.workspace and not gemm.constant_layout
    a = te.placeholder((3, 4), name="a")
    plain = te.compute((3, 4), lambda i, j: a[i, j] * 2.0, name="plain")
    kept = te.compute((3, 4), lambda i, j: a[i, j] * 2.0, name="kept", materialize=True)
    assert not (plain.op.materialize or plain.op.constant_layout or plain.op.workspace)
    assert kept.op.materialize and not kept.op.workspace
    # the flags survive rebuilding the operation
    assert pack.with_body(pack.body).constant_layout


# -- the CPU packed GEMM template --------------------------------------------------------------------
def _cpu_cases():
    x = te.placeholder((1, 5, 13, 11), name="x")
    w = te.placeholder((7, 5, 3, 3), name="w")
    a = te.placeholder((37, 50), name="a")
    b = te.placeholder((50, 45), name="b")
    return [
        ("conv", [x, w], lambda st: conv_tensor(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1, st)),
        ("matmul", [a, b], lambda st: matmul_tensor(a, b, strategy=st)),
    ]


def _reference(name, arrays):
    if name == "conv":
        return _conv_ref(arrays[0], arrays[1], 1)
    return arrays[0].astype(np.float64) @ arrays[1].astype(np.float64)


@pytest.mark.parametrize("case", range(2))
def test_cpu_gemm_space_points_compute_correctly(rng, case) -> None:
    st = strategy_for("llvm")
    name, ins, make = _cpu_cases()[case]
    out = make(st)
    space = st.space([out])
    assert space is not None and {"mr", "order", "tile_k", "unroll_m", "parallel"} <= set(space.knobs)
    # the default point is the heuristic schedule
    plain = str(lower(st.schedule_group([out]), ins + [out], "k"))
    assert str(lower(st.schedule_group([out], config=space.default), ins + [out], "k")) == plain
    arrays = [rng.standard_normal([int(d.value) for d in t.shape]).astype(np.float32) for t in ins]
    ref = _reference(name, arrays)
    points = space.sample(6, seed=7, valid_only=True)
    assert len(points) == 6 and len({p["tile_k"] for p in points} | {p["mr"] for p in points}) > 2
    for cfg in points:
        f = ember.build(st.schedule_group([out], config=cfg), ins + [out], name=f"{name}_pt")
        got = np.full(ref.shape, np.nan, dtype=np.float32)
        f(*arrays, got)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=repr(cfg))


def test_cpu_gemm_illegal_points_are_refused_before_building(monkeypatch) -> None:
    st = strategy_for("llvm -mcpu=haswell")  # 16 vector registers
    name, ins, make = _cpu_cases()[1]
    out = make(st)
    space = st.space([out])
    bad = [c for c in space.sample(200, seed=0) if c["mr"].val >= 7]
    assert bad and not any(space.is_valid(c) for c in bad)

    def no_build(*args, **kwargs):
        raise AssertionError("an illegal point reached the build")

    monkeypatch.setattr(ember, "build", no_build)
    with pytest.raises(InvalidConfig, match="vector registers"):
        st.schedule_group([out], config=bad[0])
    with pytest.raises(InvalidConfig, match="no tunable stage"):
        st.schedule_group([ins[0]], config=space.default)


# -- the GPU packed GEMM template --------------------------------------------------------------------
def _gpu_kernel(st, name):
    """The kernel as the model compiler builds it: the outputs plus the workspaces."""
    _, ins, make = next(c for c in _cpu_cases() if c[0] == name)
    out = make(st)
    work = [op.output(0) for op in post_order([out.op]) if isinstance(op, ComputeOp) and st.keeps_in_memory(op)]
    return ins, out, work


def _has_cuda() -> bool:
    return ember.cuda(0).exist


@pytest.mark.parametrize("name", ["conv", "matmul"])
def test_gpu_gemm_space_points_build_and_compute_correctly(rng, tmp_path, name) -> None:
    st = strategy_for("cuda" if _has_cuda() else "cuda -arch=sm_80")  # the device's arch, when there is one
    ins, out, work = _gpu_kernel(st, name)
    space = st.space([out] + work)
    assert space is not None and {"tile_m", "tile_n", "bk", "unroll"} <= set(space.knobs)
    plain = str(lower(st.schedule_group([out] + work), ins + [out] + work, "k"))
    assert str(lower(st.schedule_group([out] + work, config=space.default), ins + [out] + work, "k")) == plain
    arrays = [rng.standard_normal([int(d.value) for d in t.shape]).astype(np.float32) for t in ins]
    ref = _reference(name, arrays)
    points = [space.default] + space.sample(4, seed=11, valid_only=True)
    for cfg in points:
        s = st.schedule_group([out] + work, config=cfg)
        f = ember.build(s, ins + [out] + work, target=str(st.target), name=f"{name}_gpu", cache_dir=tmp_path)
        assert ".entry" in f.imported_modules[0].get_source("ptx")
        if not _has_cuda():
            continue
        dev = ember.cuda(0)
        got = ember.nd.array(np.full(ref.shape, np.nan, dtype=np.float32), dev)
        ws = [ember.nd.array(np.zeros([int(d.value) for d in t.shape], dtype=str(t.dtype)), dev) for t in work]
        f(*[ember.nd.array(a, dev) for a in arrays], got, *ws)
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-4, err_msg=repr(cfg))


def test_gpu_gemm_illegal_points_are_refused_before_building(monkeypatch) -> None:
    st = strategy_for("cuda -arch=sm_80")
    x = te.placeholder((1, 16, 20, 20), name="x")
    w = te.placeholder((24, 16, 3, 3), name="w")
    out = conv_tensor(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1, st)
    work = [op.output(0) for op in post_order([out.op]) if isinstance(op, ComputeOp) and st.keeps_in_memory(op)]
    space = st.space([out] + work)
    errors = {e for c in space for e in space.errors(c)}
    assert any("threads per block exceed" in e for e in errors)
    assert any("shared memory" in e for e in errors)
    assert any("whole panels" in e for e in errors)
    bad = next(c for c in space if c["tile_m"].size[1] * c["tile_n"].size[1] > 256)

    def no_build(*args, **kwargs):
        raise AssertionError("an illegal point reached the build")

    monkeypatch.setattr(ember, "build", no_build)
    with pytest.raises(InvalidConfig, match="threads per block"):
        st.schedule_group([out] + work, config=bad)
