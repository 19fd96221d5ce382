"""The cold-compile shortcuts give what the slow paths give.

* The Winograd weight transform folded with NumPy (``weight_transform_value``) equals
  ``ember.te.evaluate`` of the operator's stages bit for bit (random weights with signed zeros,
  F(4,3) and F(2,3), output channels that the panel width does not divide, so the transform is
  zero-padded), and a model compiled with a Winograd convolution holds exactly that value.
* A CPU build in several processes (``compile_cpu(jobs=...)``: parts forked, linked back) gives
  the serial build's object byte for byte, and the functions run correctly (outputs poisoned,
  against NumPy); ``jobs`` larger than the function count and uneven weights still give one
  object; ``default_jobs`` builds small modules in one process. A build started ahead
  (``start_ahead``) for the first functions is taken over (the serial object again), one for
  other functions is not, and ``cancel`` ends its child.
* ``ember.compile`` pauses Python's cyclic garbage collector and restores its state afterwards,
  also when the compile fails and when it was off before.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import te
from ember.backends.cpu import codegen as cpu_codegen
from ember.ops.winograd_nchwc import weight_transform, weight_transform_source, weight_transform_value
from ember.target import Target
from ember.te.reference import evaluate


@pytest.mark.parametrize(("mb", "cb", "ib", "ob", "m", "nr"),
                         [(3, 2, 8, 8, 4, 16), (5, 3, 8, 8, 2, 16), (2, 3, 16, 16, 4, 48), (1, 1, 8, 8, 4, 24)])
def test_weight_transform_value_equals_evaluation(rng: np.random.Generator, mb: int, cb: int, ib: int, ob: int,
                                                  m: int, nr: int) -> None:
    w = te.placeholder((mb, cb, 3, 3, ib, ob), "float32", name="w")
    u = weight_transform(w, m, nr)
    assert weight_transform_source(u.op) is not None and weight_transform_source(u.op).op is w.op
    value = rng.standard_normal((mb, cb, 3, 3, ib, ob)).astype(np.float32)
    value[0, 0, 0] = -0.0  # signed zeros: the sums' identity makes zero sums +0.0 in both
    value[-1, -1, 2, 1] = 0.0
    (expected,) = evaluate([u], {w: value})
    got = weight_transform_value(value, m, nr)
    assert got.dtype == np.float32 and got.shape == expected.shape and got.flags.c_contiguous
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_weight_transform_source_rejects_other_stages() -> None:
    x = te.placeholder((4, 4), "float32", name="x")
    y = te.compute((4, 4), lambda i, j: x[i, j] * 2.0, name="y", tag="winograd_wt")  # no attrs, no chain
    assert weight_transform_source(y.op) is None
    assert weight_transform_source(x.op) is None


def _winograd_model(rng: np.random.Generator, c: int, k: int, hw: int) -> bytes:
    wt = rng.standard_normal((k, c, 3, 3)).astype(np.float32) * 0.2
    wt[0, 0, 0, 0] = -0.0
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, hw, hw])],
                              [numpy_helper.from_array(wt, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_compiled_model_folds_the_evaluated_transform(rng: np.random.Generator,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The transformed weights a compiled model holds are ``te.evaluate``'s, bit for bit (the
    real folding, observed: each value it returns is compared with the evaluation)."""
    from ember.model import group_lowering

    seen: list[tuple[np.ndarray, np.ndarray]] = []
    original = group_lowering._fold_directly

    def observed(op, srcs, consts, graph):  # type: ignore[no-untyped-def]
        value = original(op, srcs, consts, graph)
        if value is not None:
            (ref,) = evaluate([op.output(0)], {x: graph.consts[consts[id(x.op)]] for x in srcs})
            seen.append((value, ref))
        return value

    monkeypatch.setattr(group_lowering, "_fold_directly", observed)
    model = ember.compile(_winograd_model(rng, 19, 21, 13), use_cache=False)
    assert "winograd" in model.get_source("ir")
    assert seen, "no Winograd weight transform was folded"
    for value, ref in seen:
        assert np.array_equal(value.view(np.uint32), ref.view(np.uint32))


def _row_dot(a: te.Tensor, b: te.Tensor, r: te.IterVar):  # type: ignore[no-untyped-def]
    return lambda i: te.sum(a[i, r] * b[r], axis=r)


def _scaled_plus(a: te.Tensor, s_: te.Tensor):  # type: ignore[no-untyped-def]
    return lambda i, j: a[i, j] * 2.0 + s_[i]


def _kernels() -> list:
    """A few lowered functions: parallel outer loops (outlined bodies with unique names),
    a vectorized loop and a reduction, at sizes no vector divides."""
    funcs = []
    for k, (n, m) in enumerate([(37, 29), (61, 5), (8, 130), (23, 23), (3, 300)]):
        a = te.placeholder((n, m), "float32", name="a")
        b = te.placeholder((m,), "float32", name="b")
        r = te.reduce_axis((0, m), name="r")
        s_ = te.compute((n,), _row_dot(a, b, r), name="s")
        c = te.compute((n, m), _scaled_plus(a, s_), name="c")
        sch = te.create_schedule(c.op)
        i, j = sch[c].op.axis
        sch[c].parallel(i)
        jo, ji = sch[c].split(j, factor=8)
        sch[c].vectorize(ji)
        sch[s_].compute_root()
        sch[s_].parallel(sch[s_].op.axis[0])
        funcs.append((ember.lower(sch, [a, b, c], f"f{k}", target="llvm"), (n, m)))
    return funcs


@pytest.mark.parametrize(("jobs", "weights"), [(2, None), (3, [1, 50, 1, 1, 9]), (8, None)])
def test_parallel_build_is_the_serial_build(rng: np.random.Generator, jobs: int, weights: list[int] | None) -> None:
    pairs = _kernels()
    funcs = [f for f, _ in pairs]
    tgt = Target("llvm")
    serial = cpu_codegen.compile_cpu(funcs, tgt, "m", jobs=1)
    parallel = cpu_codegen.compile_cpu(funcs, tgt, "m", jobs=jobs, weights=weights)
    assert parallel.obj == serial.obj
    assert parallel.functions == serial.functions
    module = ember.build(funcs, target="llvm", use_cache=False, jobs=jobs)
    for f, (n, m) in pairs:
        a = rng.standard_normal((n, m)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        c = np.full((n, m), np.nan, np.float32)
        module[f.name](a, b, c)
        expected = a * 2.0 + (a.astype(np.float64) @ b.astype(np.float64))[:, None]
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-4)


def test_build_started_ahead_is_taken_over() -> None:
    """A build started ahead for the first functions (as the model compiler starts one halfway
    through lowering) becomes the first part of the build: the serial object again. One for
    other functions, or cancelled, is not used."""
    funcs = [f for f, _ in _kernels()]
    tgt = Target("llvm")
    name = funcs[0].name
    serial = cpu_codegen.compile_cpu(funcs, tgt, name, jobs=1)
    for jobs in (1, 2):
        ahead = cpu_codegen.start_ahead(funcs[:3], tgt)
        assert ahead is not None
        assert cpu_codegen.compile_cpu(funcs, tgt, name, jobs=jobs).obj == serial.obj
        assert ahead not in cpu_codegen._ahead  # taken over
        ahead.cancel()  # nothing left to end
    other = cpu_codegen.start_ahead(funcs[1:3], tgt)  # not the first functions: not used
    assert cpu_codegen.compile_cpu(funcs, tgt, name, jobs=2).obj == serial.obj
    assert other in cpu_codegen._ahead
    other.cancel()
    assert other not in cpu_codegen._ahead and not other.child.proc.is_alive()
    everything = cpu_codegen.start_ahead(funcs, tgt)  # the whole module ahead
    assert cpu_codegen.compile_cpu(funcs, tgt, name, jobs=2).obj == serial.obj
    assert everything not in cpu_codegen._ahead


def test_partition_is_consecutive_and_balanced() -> None:
    funcs = list(range(10))
    for jobs in (1, 2, 3, 10, 20):
        parts = cpu_codegen._partition(funcs, jobs, [1, 1, 1, 1, 1, 1, 1, 1, 1, 100])  # type: ignore[arg-type]
        assert [f for p in parts for f in p] == funcs
        assert all(parts) and len(parts) == min(jobs, len(funcs))
    # the first part (built here, then linked and assembled here) gets less than an equal share
    first, second = cpu_codegen._partition(funcs, 2, None)  # type: ignore[arg-type]
    assert len(first) < len(second)


def test_default_jobs() -> None:
    assert cpu_codegen.default_jobs([10, 20]) == 1  # small: one process
    assert cpu_codegen.default_jobs([cpu_codegen.PARALLEL_MIN_CHARS]) == 1  # one function
    assert cpu_codegen.default_jobs([cpu_codegen.PARALLEL_MIN_CHARS, 1]) in (1, 2)  # 2 with two cores


def test_compile_restores_the_collector(rng: np.random.Generator) -> None:
    onnx_bytes = _winograd_model(rng, 4, 4, 6)
    assert gc.isenabled()
    ember.compile(onnx_bytes, use_cache=False)
    assert gc.isenabled()
    gc.disable()
    try:
        ember.compile(onnx_bytes, use_cache=False)
        assert not gc.isenabled()
    finally:
        gc.enable()
    from ember.driver import compile_graph

    with pytest.raises(ember.EmberError):  # fails inside the paused region
        compile_graph("not a graph")  # type: ignore[arg-type]
    assert gc.isenabled()
