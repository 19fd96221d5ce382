"""``ember.Model``: one type for every target and kind of model, with the same methods; one
compiled model serves many threads at once (run state is per thread)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the model API tests build ONNX models")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _mlp(rng: np.random.Generator, batch: int | str = 5) -> bytes:
    """x[batch, 37] @ w1[37, 29] + b1 -> relu -> @ w2[29, 11] -> softmax; sizes no tile divides."""
    w1 = nh.from_array(rng.standard_normal((37, 29)).astype(np.float32), "w1")
    b1 = nh.from_array(rng.standard_normal(29).astype(np.float32), "b1")
    w2 = nh.from_array(rng.standard_normal((29, 11)).astype(np.float32), "w2")
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m1"]), h.make_node("Add", ["m1", "b1"], ["a1"]),
             h.make_node("Relu", ["a1"], ["r1"]), h.make_node("MatMul", ["r1", "w2"], ["m2"]),
             h.make_node("Softmax", ["m2"], ["y"], axis=-1)]
    g = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", T.FLOAT, [batch, 37])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [w1, b1, w2])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _reference(model: bytes, x: np.ndarray) -> np.ndarray:
    m = onnx.load_from_string(model)
    w = {t.name: nh.to_array(t).astype(np.float64) for t in m.graph.initializer}
    z = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0) @ w["w2"]
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_compile_returns_one_type_for_every_target(rng) -> None:
    data = _mlp(rng)
    models = [ember.compile(data, target=t, use_cache=False) for t in ("llvm", "cuda -arch=sm_90", "rocm -mcpu=gfx90a")]
    assert all(type(m) is ember.Model for m in models)
    for m in models:
        assert [i.name for i in m.inputs] == ["x"] and m.inputs[0].shape == (5, 37) and m.inputs[0].dtype == "float32"
        assert [o.name for o in m.outputs] == ["y"] and m.outputs[0].shape == (5, 11)
        assert m.num_kernels >= 1 and m.is_static
        assert "for" in m.get_source("ir")
    assert models[0].device == ember.cpu(0)
    assert models[1].device.kind == "cuda" and models[2].device.kind == "rocm"
    assert models[1].target.startswith("cuda") and "-arch=sm_90" in models[1].target
    assert ".entry" in models[1].get_source("ptx")
    assert "amdhsa" in models[2].get_source("asm")


def test_run_call_profile_and_save_agree(rng, tmp_path) -> None:
    data = _mlp(rng)
    m = ember.compile(data, use_cache=False)
    x = rng.standard_normal((5, 37)).astype(np.float32)
    want = _reference(data, x)
    np.testing.assert_allclose(m(x)[0], want, rtol=1e-5, atol=1e-6)  # float32 math vs float64 reference
    np.testing.assert_array_equal(m.run(x=x)[0], m(x)[0])
    np.testing.assert_array_equal(m.run_on_device(x)[0].numpy(), m(x)[0])
    prof = m.profile(x, repeat=2)
    assert [name for name, _ in prof] and all(t >= 0 for _, t in prof)
    path = tmp_path / "mlp.ember"
    m.save(path)
    loaded = ember.load(path)
    assert type(loaded) is ember.Model and loaded.inputs == m.inputs and loaded.outputs == m.outputs
    np.testing.assert_array_equal(loaded(x)[0], m(x)[0])


def test_models_specialised_at_call_time_are_models_too(rng) -> None:
    # Reshape to a shape given as an input: compiled once per value of that input.
    g = h.make_graph([h.make_node("Reshape", ["x", "s"], ["r"]), h.make_node("Relu", ["r"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [6, 4]), h.make_tensor_value_info("s", T.INT64, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    mp = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    mp.ir_version = 8
    m = ember.compile(mp.SerializeToString(), use_cache=False)
    assert type(m) is ember.Model and not m.is_static and m.input_names == ["x", "s"]
    x = rng.standard_normal((6, 4)).astype(np.float32)
    for shape in ((3, 8), (12, 2), (3, 8)):
        out = m(x, np.array(shape, np.int64))[0]
        np.testing.assert_array_equal(out, np.maximum(x.reshape(shape), 0))
    with pytest.raises(ember.EmberError, match="compiled at call time"):
        m.save("never-written.ember")


def test_bad_calls_name_the_problem(rng) -> None:
    m = ember.compile(_mlp(rng), use_cache=False)
    x = rng.standard_normal((5, 37)).astype(np.float32)
    with pytest.raises(ember.ArgumentError, match="missing input"):
        m()
    with pytest.raises(ember.ArgumentError, match="no input 'z'"):
        m(z=x)
    with pytest.raises(ember.ArgumentError, match="given twice"):
        m(x, x=x)
    with pytest.raises(ember.ArgumentError, match="shape"):
        m(x[:4])


def test_one_model_serves_many_threads(rng) -> None:
    """8 threads x 500 calls on one compiled model, each with its own inputs: every answer right
    (the executor used to share its intermediate buffers between threads)."""
    data = _mlp(rng)
    m = ember.compile(data, use_cache=False)
    inputs = [rng.standard_normal((5, 37)).astype(np.float32) for _ in range(8)]
    wants = [_reference(data, x) for x in inputs]
    wrong: list[tuple[int, float]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(tid: int) -> None:
        try:
            start.wait()
            for k in range(500):
                j = (tid * 3 + k) % len(inputs)
                err = float(np.max(np.abs(m(inputs[j])[0] - wants[j])))
                if err > 1e-5:
                    wrong.append((tid, err))
        except BaseException as exc:  # noqa: BLE001 - reported below with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert not wrong, f"{len(wrong)} of 4000 answers wrong, worst {max(e for _, e in wrong)}"


def test_unknown_target_fails_before_any_work(rng) -> None:
    with pytest.raises(ember.TargetError, match="vulkan"):
        ember.compile(_mlp(rng), target="vulkan")
    with pytest.raises(ember.TargetError):
        ember.Target("nonsense")


def test_every_public_exception_is_importable_from_ember() -> None:
    import inspect

    from ember import errors

    public = {n for n, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)}
    assert public <= set(ember.__all__), public - set(ember.__all__)
    for name in ("GraphError", "UnsupportedOpError", "FrontendError", "ModelFormatError", "OpError",
                 "TypeMismatchError", "PassError"):
        assert issubclass(getattr(ember, name), ember.EmberError)


@pytest.mark.skipif(not ember.Target("llvm").triple.startswith("x86_64"), reason="x86-64 CPU models named")
def test_the_targets_vector_width_picks_the_packing_not_the_hosts(rng) -> None:
    """Weights are packed into panels two vector registers wide *of the target compiled for*."""
    data = _mlp(rng, batch=16)  # big enough for the packed GEMM (M * N >= 256)

    def panel_widths(model: ember.Model) -> set[int]:
        return {v.shape[-1] for k, v in model.consts.items() if "__const" in k}

    avx2 = ember.compile(data, target="llvm -mcpu=haswell", use_cache=False)
    assert panel_widths(avx2) == {16}
    if "avx2" in ember.Target("llvm").features:  # haswell code runs on any AVX2 machine
        x = rng.standard_normal((16, 37)).astype(np.float32)
        np.testing.assert_allclose(avx2(x)[0], _reference(data, x), rtol=1e-5, atol=1e-6)
    avx512 = ember.compile(data, target="llvm -mcpu=skylake-avx512", use_cache=False)  # compiled, not run
    assert panel_widths(avx512) == {32}
    gpu = ember.compile(data, target="cuda -arch=sm_80", use_cache=False)
    assert gpu.num_kernels >= 1  # GPU panels do not depend on this host either (tests/strategy)
