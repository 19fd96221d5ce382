"""Models with symbolic input dimensions, compiled per input shape (ember.model.dynamic),
against ONNX Runtime at several sizes: constraint checks, the variant cache's LRU eviction,
saving and loading with the dynamic dimensions kept, value-dependent ``If``, the compile cache."""

from __future__ import annotations

import json
import os
import warnings
import zipfile

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError, EmberError, ModelFormatError

onnx = pytest.importorskip("onnx", reason="the dynamic-shape tests build ONNX graphs (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="the dynamic-shape tests compare with ONNX Runtime")

from ember.model.dynamic import EvictionWarning  # noqa: E402

from . import graphs  # noqa: E402


def _per_shape(model: ember.Model) -> ember.Model:
    """``model`` compiling one variant per input shape (no symbolic build: these tests are about
    the variant cache; tests/dynamic/test_symbolic.py tests the symbolic build)."""
    model._specializer.per_shape_only()
    return model


def _ort(m):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def _poison(model: ember.Model, given: dict[str, np.ndarray]) -> None:
    """Fill every planned buffer of the variant ``given`` selects (this thread's context) with NaN
    (float) or a sentinel (integers), so that a value a kernel fails to write shows."""
    variant = model if model.is_static else model._specializer.variant_for(given)
    if not variant.is_static:
        return
    for view in variant.context()._views.values():
        view.fill(np.nan if view.dtype.kind == "f" else 7)


def _check(model: ember.Model, sess, given: dict[str, np.ndarray], rtol: float = 1e-5) -> None:
    """``model`` against ONNX Runtime on ``given``: planned buffers poisoned, and the outputs written
    into NaN-filled arrays of the expected shapes (I/O binding), so an element no kernel writes shows."""
    want = sess.run(None, given)
    _poison(model, given)
    bound = [np.full(w.shape, np.nan, w.dtype) for w in want]
    got = model.run(**given, outputs=bound)
    assert len(got) == len(want)
    for g, w, b in zip(got, want, bound):
        assert g is b and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max())))


def test_symbolic_batch_and_width_match_onnxruntime(rng) -> None:
    m = graphs.conv_matmul_reshape(rng)
    model, sess = _per_shape(ember.compile(m)), _ort(m)
    assert not model.is_static
    assert model.inputs[0].shape == ("batch", 3, 4, "width")
    assert model.output_names == ["y"]
    shapes = [(1, 3, 4, 5), (3, 3, 4, 17), (2, 3, 4, 33), (1, 3, 4, 5)]
    for shp in shapes:  # sizes no tile divides; the last one again (a kept variant)
        _check(model, sess, {"x": rng.standard_normal(shp).astype(np.float32)})
    assert model.variants == [{"x": s} for s in [(3, 3, 4, 17), (2, 3, 4, 33), (1, 3, 4, 5)]]
    assert model._specializer.compiles == 3 and model._specializer.evictions == 0


def test_two_inputs_share_their_symbols(rng) -> None:
    m = graphs.two_inputs_shared_symbol(rng)
    model, sess = ember.compile(m), _ort(m)
    for b, s in [(1, 3), (4, 9), (2, 1)]:
        _check(model, sess, {"a": rng.standard_normal((b, s, 8)).astype(np.float32),
                             "mask": rng.uniform(0, 1, (b, s)).astype(np.float32)})


@pytest.mark.parametrize("a_shape,mask_shape,message", [
    ((2, 3, 8), (2, 4), "every dimension named 'seq' must have the same size"),
    ((2, 3, 8), (5, 3), "every dimension named 'batch' must have the same size"),
    ((2, 3, 7), (2, 3), "dimension 2 must be 8"),
    ((2, 3), (2, 3), "(2 dimensions); the model declares (batch, seq, 8) (3 dimensions)"),
])
def test_shapes_that_break_the_declared_dimensions_are_clear_errors(rng, a_shape, mask_shape, message) -> None:
    model = ember.compile(graphs.two_inputs_shared_symbol(rng))
    with pytest.raises(ArgumentError) as err:
        model(np.zeros(a_shape, np.float32), np.zeros(mask_shape, np.float32))
    assert message in str(err.value)
    assert "input 'a'" in str(err.value) or "input 'mask'" in str(err.value)
    assert model.variants == []  # nothing was compiled for them


def test_a_wrong_dtype_names_the_input(rng) -> None:
    model = ember.compile(graphs.conv_matmul_reshape(rng))
    with pytest.raises(ArgumentError, match="input 'x' has dtype float64"):
        model(np.zeros((1, 3, 4, 5)))


def test_input_shapes_still_fixes_the_shape(rng) -> None:
    m = graphs.conv_matmul_reshape(rng)
    model = ember.compile(m, input_shapes={"x": (2, 3, 4, 6)})
    assert model.is_static and model.variants == [{"x": (2, 3, 4, 6)}] and model.max_variants is None
    with pytest.raises(EmberError, match="symbolic input dimensions only"):
        model.max_variants = 4
    x = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    np.testing.assert_allclose(model(x)[0], _ort(m).run(None, {"x": x})[0], rtol=1e-5, atol=1e-4)
    with pytest.raises(ArgumentError, match="compiled for"):
        model(np.zeros((1, 3, 4, 6), np.float32))


def test_least_recently_used_variant_is_dropped_and_reported(rng) -> None:
    m = graphs.conv_matmul_reshape(rng)
    model, sess = _per_shape(ember.compile(m)), _ort(m)
    assert model.max_variants == 8
    model.max_variants = 2
    xs = {w: rng.standard_normal((1, 3, 4, w)).astype(np.float32) for w in (3, 5, 7)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no eviction yet
        _check(model, sess, {"x": xs[3]})
        _check(model, sess, {"x": xs[5]})
        _check(model, sess, {"x": xs[3]})  # 3 is now the most recently used
    dropped = r"dropped the least recently used one, for input shapes \{'x': \(1, 3, 4, 5\)\}"
    with pytest.warns(EvictionWarning, match=dropped):
        _check(model, sess, {"x": xs[7]})
    assert model.variants == [{"x": (1, 3, 4, 3)}, {"x": (1, 3, 4, 7)}]
    with pytest.warns(EvictionWarning):
        _check(model, sess, {"x": xs[5]})  # compiled again (from the cache), still correct
    assert model._specializer.evictions == 2
    with pytest.raises(ArgumentError, match="max_variants must be a positive integer"):
        model.max_variants = 0


def test_save_and_load_keep_the_dynamic_dimensions(rng, tmp_path) -> None:
    m = graphs.two_inputs_shared_symbol(rng)
    model, sess = _per_shape(ember.compile(m)), _ort(m)

    def given(b: int, s: int) -> dict[str, np.ndarray]:
        return {"a": rng.standard_normal((b, s, 8)).astype(np.float32),
                "mask": rng.uniform(0, 1, (b, s)).astype(np.float32)}

    model(**given(2, 5))
    model(**given(1, 7))
    model.max_variants = 5
    path = tmp_path / "dyn.ember"
    model.save(path)
    with zipfile.ZipFile(path) as z:  # the weights both variants hold are stored once
        assert "shared.npz" in z.namelist()
        desc = json.loads(z.read("dynamic.json"))
    assert all(v["shared"] for v in desc["variants"])
    loaded = ember.load(path)
    assert [s.shape for s in loaded.inputs] == [("batch", "seq", 8), ("batch", "seq")]
    assert loaded.variants == model.variants and loaded.max_variants == 5
    spec = loaded._specializer
    compiled_before = spec.compiles
    _check(loaded, sess, given(2, 5))  # a stored variant: no compile
    assert spec.compiles == compiled_before
    _check(loaded, sess, given(3, 4))  # a new shape: compiled from the embedded ONNX source
    assert spec.compiles == compiled_before + 1
    # rebuild=True uses none of the file's code: dynamic again, no variants yet
    rebuilt = ember.load(path, rebuild=True)
    assert rebuilt.variants == [] and rebuilt.inputs[0].shape == ("batch", "seq", 8)
    _check(rebuilt, sess, given(1, 7))


def _rewrite(path, out, edit) -> None:
    """Copy the saved model ``path`` to ``out`` with ``edit(members)`` applied and the manifest
    recomputed (a consistent but altered file)."""
    import hashlib

    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist() if n != "manifest.json"}
        manifest = json.loads(z.read("manifest.json"))
    edit(members)
    manifest["members"] = {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in members.items()}
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in members.items():
            z.writestr(n, d)


def test_saved_dynamic_models_are_checked_on_loading(rng, tmp_path) -> None:
    model = _per_shape(ember.compile(graphs.conv_matmul_reshape(rng)))
    model(rng.standard_normal((1, 3, 4, 5)).astype(np.float32))
    model(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    path = tmp_path / "dyn.ember"
    model.save(path)

    def lie_about_shapes(members):
        desc = json.loads(members["dynamic.json"])
        desc["variants"][0]["shapes"]["x"] = [2, 3, 4, 5]
        members["dynamic.json"] = json.dumps(desc).encode()

    def bad_fixed_dim(members):
        desc = json.loads(members["dynamic.json"])
        desc["variants"][0]["shapes"]["x"] = [1, 9, 4, 5]
        members["dynamic.json"] = json.dumps(desc).encode()

    def not_json(members):
        members["dynamic.json"] = b"{"

    def nested(members):  # a variant that is itself a dynamic model
        members["variants/0.ember"] = path.read_bytes()

    def unknown_shared_key(members):
        desc = json.loads(members["dynamic.json"])
        name = next(iter(desc["variants"][0]["shared"]))
        desc["variants"][0]["shared"][name] = "s999"
        members["dynamic.json"] = json.dumps(desc).encode()

    def shared_of_wrong_shape(members):
        import io

        with np.load(io.BytesIO(members["shared.npz"])) as w:
            arrays = {k: w[k] for k in w.files}
        arrays = {k: np.zeros(v.size + 1, v.dtype) for k, v in arrays.items()}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        members["shared.npz"] = buf.getvalue()

    for edit, message in [(lie_about_shapes, "dynamic.json says"), (bad_fixed_dim, "do not fit the declared"),
                          (not_json, "dynamic.json is unreadable"), (nested, "must be a fixed-shape model"),
                          (unknown_shared_key, "not what ember writes"), (shared_of_wrong_shape, "variant 0")]:
        out = tmp_path / f"{edit.__name__}.ember"
        _rewrite(path, out, edit)
        with pytest.raises(ModelFormatError, match=message):
            ember.load(out)

    def no_source(members):
        del members["source/model.onnx"], members["source/options.json"]

    out = tmp_path / "no_source.ember"
    _rewrite(path, out, no_source)
    loaded = ember.load(out)
    loaded(rng.standard_normal((1, 3, 4, 5)).astype(np.float32))  # the stored variant runs
    with pytest.raises(EmberError, match="saved without its ONNX source"):
        loaded(rng.standard_normal((1, 3, 4, 6)).astype(np.float32))


def test_if_on_an_input_value_selects_branches_of_different_shapes(rng) -> None:
    m = graphs.if_on_value(rng)
    model, sess = ember.compile(m), _ort(m)
    for b, rate in [(2, 16000), (5, 8000), (2, 8000), (3, 16000)]:
        x = rng.standard_normal((b, 16)).astype(np.float32)
        r = np.array(rate, np.int64)
        got = model(x, r)[0]
        want = sess.run(None, {"x": x, "rate": r})[0]
        assert got.shape == want.shape == (b, 32 if rate == 16000 else 8)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_new_bucket_hits_the_compile_cache_on_repeats(rng) -> None:
    m = graphs.conv_matmul_reshape(rng)
    x = rng.standard_normal((2, 3, 4, 11)).astype(np.float32)
    root = os.environ["EMBER_CACHE_DIR"]

    def entries() -> int:
        return sum(len(files) for _, _, files in os.walk(root))

    first = ember.compile(m)(x)[0]
    before = entries()
    again = ember.compile(m)(x)[0]  # a fresh model, the same bucket: every kernel from the cache
    assert entries() == before
    np.testing.assert_array_equal(first, again)


def test_threads_calling_with_different_shapes_share_the_variants(rng) -> None:
    from concurrent.futures import ThreadPoolExecutor

    m = graphs.conv_matmul_reshape(rng)
    model, sess = _per_shape(ember.compile(m)), _ort(m)
    xs = [rng.standard_normal((1 + k % 2, 3, 4, 5 + 4 * (k % 3))).astype(np.float32) for k in range(12)]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda x: model(x)[0], xs))
    for x, got in zip(xs, outs):
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-4)
    assert len(model.variants) == 6 and model._specializer.compiles == 6  # each shape compiled once


def test_profile_runs_the_variant_of_the_shapes_given(rng) -> None:
    model = _per_shape(ember.compile(graphs.conv_matmul_reshape(rng)))
    x = rng.standard_normal((2, 3, 4, 9)).astype(np.float32)
    prof = model.profile(x, repeat=2)
    assert len(list(prof)) >= 1 and all(t >= 0 for _, t in prof)
    assert model.variants == [{"x": (2, 3, 4, 9)}]


def test_a_wrong_dtype_is_refused_before_compiling(rng) -> None:
    model = ember.compile(graphs.two_inputs_shared_symbol(rng))
    with pytest.raises(ArgumentError, match="input 'mask' has dtype int64, but the model declares float32"):
        model(np.zeros((2, 3, 8), np.float32), np.zeros((2, 3), np.int64))
    assert model.variants == []


def test_variants_share_equal_constants(rng) -> None:
    m = graphs.conv_matmul_reshape(rng)
    model, sess = _per_shape(ember.compile(m)), _ort(m)
    for shp in [(1, 3, 4, 5), (2, 3, 4, 9)]:
        _check(model, sess, {"x": rng.standard_normal(shp).astype(np.float32)})
    (_, a), (_, b) = model._specializer.kept()
    common = set(a.consts) & set(b.consts)
    assert common  # the weights (packed at compile time) of both variants
    equal = [n for n in common if np.array_equal(a.consts[n], b.consts[n])]
    assert equal and all(a.consts[n] is b.consts[n] for n in equal)


def test_shapes_the_graph_cannot_take_are_argument_errors(rng) -> None:
    m = graphs.reshape_rows_of_four()
    model, sess = ember.compile(m), _ort(m)
    with pytest.raises(ArgumentError, match=r"does not accept the input shapes \{'x': \(2, 6\)\}.*Reshape"):
        model(np.ones((2, 6), np.float32))
    _check(model, sess, {"x": rng.standard_normal((3, 12)).astype(np.float32)})  # a width that fits
    assert model.variants == [{"x": (3, 12)}]


def test_if_on_a_rate_input_selects_lstms_of_different_sizes(rng) -> None:
    m = graphs.if_on_rate_lstm(rng)
    model, sess = ember.compile(m), _ort(m)
    for seq, b, rate in [(5, 2, 16000), (3, 1, 8000), (5, 2, 8000)]:
        x = rng.standard_normal((seq, b, 16)).astype(np.float32)
        r = np.array(rate, np.int64)
        got = model(x, r)[0]
        want = sess.run(None, {"x": x, "rate": r})[0]
        assert got.shape == want.shape == (1, b, 24 if rate == 16000 else 8)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_input_shapes_for_some_inputs_fix_their_symbols_everywhere(rng) -> None:
    m = graphs.two_inputs_shared_symbol(rng)
    model, sess = ember.compile(m, input_shapes={"a": (2, 5, 8)}), _ort(m)
    assert model.is_static and model.inputs[1].shape == (2, 5)  # mask's batch and seq are a's
    compiled_for = r"input 'mask' has shape \(2, 6\), but the model was compiled for \(2, 5\)"
    with pytest.raises(ArgumentError, match=compiled_for):
        model(np.zeros((2, 5, 8), np.float32), np.zeros((2, 6), np.float32))
    _check(model, sess, {"a": rng.standard_normal((2, 5, 8)).astype(np.float32),
                         "mask": rng.uniform(0, 1, (2, 5)).astype(np.float32)})
