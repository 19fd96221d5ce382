"""Models with symbolic input dimensions compiled once for every size (ember.model.symbolic):
outputs against ONNX Runtime at many sizes (no tile divides most of them) with the planned buffers
and the bound outputs poisoned, one compile for all of them, the fallback to one variant per shape
(with its reason), the range of sizes a build covers, and bad input."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError
from ember.model.symbolic import bucket_of

onnx = pytest.importorskip("onnx", reason="the dynamic-shape tests build ONNX graphs (pip install onnx)")
ort = pytest.importorskip("onnxruntime", reason="the dynamic-shape tests compare with ONNX Runtime")

from . import graphs  # noqa: E402


def _ort(m):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def _check(model: ember.Model, sess, given: dict[str, np.ndarray], rtol: float = 1e-5) -> None:
    """``model`` against ONNX Runtime on ``given``: the planned buffers of the program for these
    shapes (this thread's context) filled with NaN and the outputs written into NaN-filled arrays,
    so an element no kernel writes shows."""
    want = sess.run(None, given)
    for view in model._specializer.variant_for(given).context()._views.values():
        view.fill(np.nan)
    bound = [np.full(w.shape, np.nan, w.dtype) for w in want]
    got = model.run(**given, outputs=bound)
    for g, w, b in zip(got, want, bound):
        assert g is b and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max())))


def test_attention_block_compiles_once_for_every_sequence_length(rng) -> None:
    m = graphs.attention_block(rng)
    model, sess = ember.compile(m), _ort(m)
    spec = model._specializer
    sizes = [(1, 1), (1, 2), (2, 3), (1, 7), (3, 13), (1, 17), (2, 31), (1, 33), (1, 50), (2, 67), (1, 100),
             (1, 129), (1, 7)]
    for b, s in sizes:
        _check(model, sess, {"x": rng.standard_normal((b, s, 20)).astype(np.float32)})
    assert spec.symbolic_status == "built"
    build = spec.symbolic
    assert build.symbols == ["batch", "seq"] and build.lo == (1, 1) and build.hi == (4096, 4096)
    # one compile per size bucket (powers of 4), and per size of the kernels whose schedule needs
    # constant extents (attention's Q Kᵀ for longer sequences); no whole model per shape
    buckets = {(bucket_of(b, 1, 4096), bucket_of(s, 1, 4096)) for b, s in sizes}
    assert len(build.bucket_seconds) == len(buckets) == 9 and model.variants == []
    assert spec.compiles == build.compiles == 9 + build.exact_compiles and build.exact_compiles < len(set(sizes))
    assert len(build.buckets) == 8  # max_buckets: the least recently used bucket's kernels dropped
    assert spec.instances == len(set(sizes)) and spec.hits >= 1


def test_a_model_the_symbolic_build_refuses_compiles_per_shape_and_says_why(rng, caplog) -> None:
    m = graphs.mean_over_seq(rng)  # the mean's 1 / seq: a floating-point constant of every size
    model, sess = ember.compile(m), _ort(m)
    with caplog.at_level(logging.INFO, logger="ember.dynamic"):
        for s in (3, 9, 3, 14):
            _check(model, sess, {"x": rng.standard_normal((1, s, 6)).astype(np.float32)})
    spec = model._specializer
    assert spec.symbolic is None and "floating-point constant" in spec.symbolic_status
    assert spec.compiles == 3 and len(model.variants) == 3
    reasons = [r for r in caplog.records if "not once for every size" in r.getMessage()]
    assert len(reasons) == 1 and "depends on the sizes" in reasons[0].getMessage()  # logged once


def test_positions_folded_from_the_shape_are_cut_from_one_table(rng) -> None:
    m = graphs.positions_from_range(rng)  # Range(0, seq) folds into a constant of every size
    model, sess = ember.compile(m), _ort(m)
    for s in (1, 3, 9, 40, 100):
        _check(model, sess, {"x": rng.standard_normal((1, s, 6)).astype(np.float32)})
    build = model._specializer.symbolic
    assert build is not None and model.variants == []
    (pos,) = build.sized.values()
    assert pos.kind == "prefix" and pos.value.shape[0] == build.hi[0] == 4096


def test_sizes_outside_the_builds_range_compile_per_shape(rng) -> None:
    m = graphs.capped_slice(rng, cap=50)  # rows min(seq, 50): linear in seq below 50 only
    model, sess = ember.compile(m), _ort(m)
    for s in (1, 9, 23, 41, 45, 50, 77, 23):
        _check(model, sess, {"x": rng.standard_normal((s, 5)).astype(np.float32)})
    spec = model._specializer
    build = spec.symbolic
    assert build is not None and build.lo == (1,) and 41 <= build.hi[0] <= 50
    assert sorted(v["x"][0] for v in model.variants) == [45, 50, 77]  # past the range: one variant each
    assert spec.compiles == len(build.buckets) + 3


def test_a_size_the_graph_refuses_names_the_input(rng) -> None:
    m = graphs.valid_conv(rng, k=5)  # width - 4 output columns
    model, sess = ember.compile(m), _ort(m)
    for w in (5, 6, 11, 64, 250):
        _check(model, sess, {"x": rng.standard_normal((1, 2, w)).astype(np.float32)})
    assert model._specializer.symbolic is not None
    with pytest.raises(ArgumentError, match=r"does not accept the input shapes \{'x': \(1, 2, 3\)\}"):
        model(np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ArgumentError, match=r"input 'x' has shape \(1, 3, 9\).*dimension 1 must be 2"):
        model(np.zeros((1, 3, 9), np.float32))
    with pytest.raises(ArgumentError, match=r"input 'x' has shape \(2, 9\) \(2 dimensions\)"):
        model(np.zeros((2, 9), np.float32))


def test_two_inputs_sharing_a_symbol_are_checked_before_the_build_runs(rng) -> None:
    m = graphs.two_inputs_shared_symbol(rng)
    model, sess = ember.compile(m), _ort(m)
    with pytest.raises(ArgumentError, match=r"every dimension named 'seq' must have the same size"):
        model(np.zeros((2, 5, 8), np.float32), np.zeros((2, 4), np.float32))
    for b, s in [(1, 1), (2, 5), (3, 19), (1, 70)]:
        _check(model, sess, {"a": rng.standard_normal((b, s, 8)).astype(np.float32),
                             "mask": rng.uniform(0, 1, (b, s)).astype(np.float32)})
    assert model._specializer.compiles == len(model._specializer.symbolic.buckets) and model.variants == []


def test_programs_made_from_the_build_are_dropped_quietly_past_max_instances(rng) -> None:
    import warnings

    m = graphs.two_inputs_shared_symbol(rng)
    model = ember.compile(m)
    spec = model._specializer
    spec.max_instances = 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no EvictionWarning: making a program again costs no compile
        for s in range(1, 8):
            model(np.ones((1, s, 8), np.float32), np.ones((1, s), np.float32))
    assert spec.compiles == 3 and spec.instances == 7 and len(spec._instances) == 3  # buckets 1, 4 and 16


def test_per_shape_only_turns_the_build_off(rng) -> None:
    m = graphs.two_inputs_shared_symbol(rng)
    model, sess = ember.compile(m), _ort(m)
    model._specializer.per_shape_only()
    _check(model, sess, {"a": rng.standard_normal((2, 5, 8)).astype(np.float32),
                         "mask": rng.uniform(0, 1, (2, 5)).astype(np.float32)})
    assert model._specializer.symbolic is None and model.variants == [{"a": (2, 5, 8), "mask": (2, 5)}]


def test_a_size_called_often_gets_its_slow_kernels_compiled_for_it(rng) -> None:
    m = graphs.attention_block(rng)
    model, sess = ember.compile(m), _ort(m)
    spec = model._specializer
    x = rng.standard_normal((1, 50, 20)).astype(np.float32)
    _check(model, sess, {"x": x})
    build = spec.symbolic
    slow = build.promotable((1, 50))  # attention's Q Kᵀ: its hinted schedule needs constant extents
    before = spec.compiles
    for _ in range(spec.promote_after):  # the third call compiles them for (1, 50); then it is kept
        _check(model, sess, {"x": rng.standard_normal((1, 50, 20)).astype(np.float32)})
    assert spec.compiles == before + (1 if slow else 0)
    assert model.variants == []


def test_flat_indices_folded_from_the_shape_are_made_per_size(rng) -> None:
    m = graphs.gather_by_flat_index(rng)  # b * seq + s, folded at compile time
    model, sess = ember.compile(m), _ort(m)
    for b, s in [(1, 1), (2, 3), (3, 17), (1, 70), (2, 5)]:
        _check(model, sess, {"x": rng.standard_normal((b, s)).astype(np.float32)})
    build = model._specializer.symbolic
    assert build is not None and model.variants == []
    assert [c.kind for c in build.sized.values()] == ["index"]
