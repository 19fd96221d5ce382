"""GPU models built on a machine without a GPU (cross-compilation): ``ember.compile(...,
target="cuda" | "rocm")`` lowers every fused kernel with the GPU schedules, generates PTX (checked
and assembled by ``ptxas`` when the CUDA toolkit is present) or an AMDGPU code object (linked by
``ld.lld``), saves and loads without compiling; device memory is only taken on the first call.
Running them is tested on a GPU in tests/gpu/test_gpu_models.py."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import ember
from ember import te
from ember.ops.util import shape as te_shape
from ember.strategy.cpu import schedule_group
from ember.strategy.gpu import lift_scalar_reductions

onnx = pytest.importorskip("onnx", reason="the GPU model build tests build models with onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _small_model(rng: np.random.Generator) -> bytes:
    def init(name, a):
        return nh.from_array(np.asarray(a, dtype=np.float32), name)

    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("Conv", ["r1", "wd"], ["dw"], pads=[1, 1, 1, 1], group=12),
        h.make_node("GlobalAveragePool", ["dw"], ["gp"]),
        h.make_node("Flatten", ["gp"], ["f"]),
        h.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        h.make_node("Softmax", ["logits"], ["prob"]),
        h.make_node("ReduceMean", ["r1"], ["rm"], keepdims=0),
    ]
    inits = [init("w1", rng.standard_normal((12, 3, 3, 3))), init("b1", rng.standard_normal(12)),
             init("wd", rng.standard_normal((12, 1, 3, 3))), init("wf", rng.standard_normal((10, 12))),
             init("bf", rng.standard_normal(10))]
    g = h.make_graph(nodes, "small", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 17, 19])],
                     [h.make_tensor_value_info("prob", T.FLOAT, None), h.make_tensor_value_info("rm", T.FLOAT, None)],
                     inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _has_cuda() -> bool:
    return ember.cuda(0).exist


def test_cuda_model_compiles_saves_and_loads_without_a_gpu(rng, tmp_path) -> None:
    model = ember.compile(_small_model(rng), target="cuda -arch=sm_90")
    assert model.target.startswith("cuda")
    assert model.num_kernels >= 5
    ptx = model.module.imported_modules[0].get_source("ptx")
    assert ".entry" in ptx and ".target sm_90" in ptx
    host = model.module.get_source("host")
    assert "launch" in host
    path = tmp_path / "small.ember"
    model.save(path)
    names = zipfile.ZipFile(path).namelist()
    assert {"manifest.json", "plan.json", "weights.npz", "module/module.json", "module/device.bin"} <= set(names)
    again = ember.load(path)
    assert again.target == model.target and again.num_kernels == model.num_kernels
    assert again.module.imported_modules[0].get_binary() == model.module.imported_modules[0].get_binary()
    # launch sizes are saved as expression trees (data), never as source code
    meta = json.loads(zipfile.ZipFile(path).read("module/module.json"))
    grids = [g for p in meta["plans"] for k in p["kernels"] for g in k["grid"]]
    assert grids and all(isinstance(g, list) and g[0] in ("const", "var", "add", "floordiv", "mul") for g in grids)
    if not _has_cuda():
        with pytest.raises(ember.EmberError):
            again(rng.standard_normal((1, 3, 17, 19)).astype(np.float32))


def test_rocm_model_compiles_to_a_code_object(rng) -> None:
    from ember.backends.rocm.codegen import find_lld

    try:
        find_lld()
    except ember.EmberError as exc:
        pytest.skip(f"no usable ld.lld ({exc}); `make test` installs lld-22")
    model = ember.compile(_small_model(rng), target="rocm -mcpu=gfx90a")
    blob = model.module.imported_modules[0].get_binary()
    assert blob[:4] == b"\x7fELF"
    assert "amdgcn" in model.module.imported_modules[0].get_source("asm") or len(blob) > 1000


def test_lift_scalar_reductions_computes_the_same_values(rng) -> None:
    # mean over all elements (a 0-d reduction) subtracted from every element: the lifted program
    # reads the reduction as element 0 of a one-element vector.
    n, m = 13, 7
    A = te.placeholder((n, m), name="A")
    i = te.reduce_axis((0, n), name="i")
    j = te.reduce_axis((0, m), name="j")
    total = te.compute((), lambda: te.sum(A[i, j], axis=[i, j]), name="total")
    out = te.compute((n, m), lambda a, b: A[a, b] - total[()] / (n * m), name="centered")
    (lifted,) = lift_scalar_reductions([out])
    assert lifted is not out
    reds = [t for t in lifted.op.input_tensors if t.op.name == "total"]
    assert len(reds) == 1 and te_shape(reds[0]) == (1,)
    s = schedule_group([lifted], set(), parallel=False)
    f = ember.build(s, [A, lifted], target="llvm", use_cache=False)
    a = rng.standard_normal((n, m)).astype(np.float32)
    c = ember.nd.array(np.full((n, m), np.nan, np.float32))
    f(ember.nd.array(a), c)
    np.testing.assert_allclose(c.numpy(), a - a.astype(np.float64).mean(), rtol=1e-5, atol=1e-6)


def fused_qkv_model(elem: int, w: object, b: object, s: int, hid: int, heads: int) -> bytes:
    """A GPT-2-style fused Q/K/V projection of ``x`` ``[1, s, hid]`` (ONNX element type ``elem``):
    MatMul + Add with the ``[hid, 3 hid]`` weight ``w`` and bias ``b`` (TensorProtos named "w" and
    "b"), then Split into Q, K and V, each reshaped to ``heads`` heads and transposed."""
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Add", ["y", "b"], ["z"]),
             h.make_node("Split", ["z", "split"], ["q", "k", "v"], axis=-1)]
    outs = []
    for n in "qkv":
        nodes += [h.make_node("Reshape", [n, "shp"], [n + "r"]),
                  h.make_node("Transpose", [n + "r"], [n + "t"], perm=[0, 2, 1, 3])]
        outs.append(h.make_tensor_value_info(n + "t", elem, None))
    inits = [w, b, nh.from_array(np.array([1, s, heads, hid // heads], np.int64), "shp"),
             nh.from_array(np.array([hid] * 3, np.int64), "split")]
    g = h.make_graph(nodes, "qkv", [h.make_tensor_value_info("x", elem, [1, s, hid])], outs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("target", ["cuda -arch=sm_90", "cuda -arch=sm_80", "rocm -mcpu=gfx942"])
def test_fused_qkv_projection_on_tensor_cores_compiles(rng, target) -> None:
    """A float16 product whose epilogue splits into several outputs used to fail on every GPU
    target ("warp-scope tensor ... accessed outside a tensorized loop nest": the tensor-core
    accumulator lives in the registers of the one stage that stores it, and the Split gave it
    three). On GPU targets the Split now starts a kernel of its own (Fuse's
    single_output_epilogues); the product and its bias stay one tensor-core kernel."""
    from ember.frontend.onnx import import_onnx
    from ember.graph.passes import Fuse, default_graph_pipeline

    hid = 96
    w = nh.from_array((rng.standard_normal((hid, 3 * hid)) * 0.1).astype(np.float16), "w")
    model = fused_qkv_model(T.FLOAT16, w, nh.from_array(rng.standard_normal(3 * hid).astype(np.float16), "b"), 40,
                            hid, 3)
    asm = ember.compile(model, target=target).get_source("asm")
    assert ("mma.sync" in asm or "wgmma" in asm) if target.startswith("cuda") else "v_mfma" in asm
    g = default_graph_pipeline(target=target)(import_onnx(model))

    def split_with_product(groups) -> bool:
        return any(any(n.op == "Split" for n in gr.nodes) and any(n.op == "MatMul" for n in gr.nodes) for gr in groups)

    assert not split_with_product(Fuse(target=target)(g).groups)
    assert split_with_product(Fuse(target="llvm")(g).groups)  # the CPU keeps it as the product's epilogue
