"""``Stage.tensorize`` and ``Stage.pipeline`` without a GPU: what the lowering emits for the
tensor-core GEMM schedule (``mma.sync``, ``ldmatrix``, ``cp.async`` in the PTX; ptxas accepts it
when present) and the errors for schedules the instruction does not fit. The results are checked
on the H100 by ``tests/gpu/test_tensorcore.py``."""

from __future__ import annotations

import pytest

import ember
from ember import te
from ember.errors import ScheduleError
from ember.ir import expr as E
from ember.strategy.tensorcore import TCTile, tensorcore_matmul

SM90 = "cuda -arch=sm_90"


def _ptx(s, args, target=SM90):
    f = ember.build(s, args, target=target, name="tc")
    return f.imported_modules[0].get_source("ptx")


@pytest.mark.parametrize("intrin,mma", [("mma.m16n8k16.f16", "m16n8k16.row.col.f32.f16.f16.f32"),
                                         ("mma.m16n8k16.bf16", "m16n8k16.row.col.f32.bf16.bf16.f32"),
                                         ("mma.m16n8k8.tf32", "m16n8k8.row.col.f32.tf32.tf32.f32"),
                                         ("mma.m16n8k32.s8", "m16n8k32.row.col.s32.s8.s8.s32")])
def test_gemm_ptx_uses_tensor_cores(intrin, mma):
    s, args = tensorcore_matmul(256, 256, 256, intrin=intrin, tile=TCTile(64, 64, 32, 32, 32))
    ptx = _ptx(s, args)
    # 2 x 2 warps of 32 x 32: 2 x 4 instructions per k step, 32 / k steps per chunk, unrolled once
    # in the loop (the pipeline's prologue holds copies only).
    steps = 32 // int(intrin.split(".")[1].split("k")[1])
    assert ptx.count(f"mma.sync.aligned.{mma}") == 8 * steps
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group 1" in ptx
    if intrin.endswith(("f16", "bf16")):
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
        assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx


def test_gemm_transposed_b_uses_plain_ldmatrix():
    s, args = tensorcore_matmul(128, 128, 64, b_transposed=True, tile=TCTile(64, 64, 32, 32, 32))
    ptx = _ptx(s, args)
    assert "ldmatrix.sync.aligned.m8n8.x2.shared.b16" in ptx and ".trans" not in ptx


def test_ragged_sizes_stage_synchronously():
    # 1000 is no multiple of 8: the zero-padded copies stay ordinary (guarded) stores.
    s, args = tensorcore_matmul(1000, 1000, 1000, tile=TCTile(64, 64, 32, 32, 32))
    ptx = _ptx(s, args)
    assert "mma.sync" in ptx and "cp.async.cg" not in ptx


def test_sm70_has_no_mma():
    with pytest.raises(ScheduleError, match="sm_80"):
        tensorcore_matmul(64, 64, 64, target="cuda -arch=sm_70")


def test_unknown_intrinsic_lists_the_known_ones():
    A = te.placeholder((16, 16), "float16")
    B = te.compute((16, 16), lambda i, j: A[i, j])
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="mma.m16n8k16.f16"):
        s[B].tensorize(B.op.axis[0], "mma.m99")


def _plain_gemm(tile_m=16):
    A = te.placeholder((64, 64), "float16", name="A")
    B = te.placeholder((64, 64), "float16", name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(E.cast("float32", A[i, k]) * E.cast("float32", B[k, j]), axis=k),
                   name="C")
    D = te.compute((64, 64), lambda i, j: C[i, j], name="D")
    s = te.create_schedule(D.op)
    Af = s.cache_read(A, "warp", [C])
    Bf = s.cache_read(B, "warp", [C])
    s[C].set_scope("warp")
    i, j = s[D].op.axis
    io, ii = s[D].split(i, factor=16)
    jo, ji = s[D].split(j, factor=8)
    s[D].reorder(io, jo, ii, ji)
    s[D].bind(io, te.thread_axis("blockIdx.x"))
    s[D].tensorize(ii, "mma.m16n8k16.f16")
    s[C].compute_at(s[D], io)
    ci, cj = s[C].op.axis
    (ck,) = s[C].op.reduce_axis
    ko, kk = s[C].split(ck, factor=16)
    cio, cii = s[C].split(ci, factor=tile_m)
    cjo, cji = s[C].split(cj, factor=8)
    s[C].reorder(ko, cio, cjo, cii, cji, kk)
    s[C].tensorize(cii, "mma.m16n8k16.f16")
    for frag, rows in ((Af, 16), (Bf, None)):
        s[frag].compute_at(s[C], ko)
        x, y = s[frag].op.axis
        if rows:
            xo, xi = s[frag].split(x, factor=rows)
            s[frag].reorder(xo, xi, y)
            s[frag].tensorize(xi, "mma.m16n8k16.f16")
        else:
            yo, yi = s[frag].split(y, factor=8)
            s[frag].reorder(yo, x, yi)
            s[frag].tensorize(x, "mma.m16n8k16.f16")
    return s, [A, B, D]


def test_fragments_from_global_memory_load_per_element():
    s, args = _plain_gemm()
    ptx = _ptx(s, args)
    assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" not in ptx


def test_tile_loop_of_the_wrong_extent_is_rejected():
    s, args = _plain_gemm(tile_m=8)
    with pytest.raises(ScheduleError, match=r"mma.m16n8k16.f16: loop .* has extent 8, the instruction needs 16"):
        ember.lower(s, args, target=SM90)


def test_warp_tensor_read_without_tensorize_is_rejected():
    A = te.placeholder((16, 16), "float16", name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] + A[i, j], name="B")
    s = te.create_schedule(B.op)
    Af = s.cache_read(A, "warp", [B])
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[Af].compute_at(s[B], B.op.axis[0])
    with pytest.raises(ScheduleError, match="no tensorized warp reduction"):
        ember.lower(s, [A, B], target=SM90)


@pytest.mark.parametrize("stages", [1, 9, 2.5, True])
def test_pipeline_stage_count_is_checked(stages):
    A = te.placeholder((64,), "float32")
    k = te.reduce_axis((0, 64))
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k))
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="stages must be an integer from 2 to 8"):
        s[B].pipeline(k, stages)


def test_pipeline_needs_staged_shared_buffers():
    A = te.placeholder((64, 64), "float32", name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    s[B].pipeline(k, 2)
    with pytest.raises(ember.errors.LoweringError, match="no shared buffer is staged"):
        ember.lower(s, [A, B], target=SM90)


def test_model_without_tensor_cores_falls_back_and_says_so_once():
    import warnings

    from ember.strategy.gpu import GPUStrategy

    st = GPUStrategy("cuda -arch=sm_75")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert st.matrix_intrinsic("float16") is None
        assert st.matrix_intrinsic("float16") is None
        assert GPUStrategy("cuda -arch=sm_90").matrix_intrinsic("float16").name == "mma.m16n8k16.f16"
    said = [w for w in seen if "CUDA-core code" in str(w.message)]
    assert len(said) == 1 and "sm_80" in str(said[0].message)
