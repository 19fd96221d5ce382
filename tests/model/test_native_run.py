"""The CPU executor's native walk (``ember_run_plan``) against its Python loop and NumPy.

A CPU model runs its kernels by one native call (:mod:`ember.model.native_run`,
:mod:`ember.backends.cpu.plan`); the Python loop (``ExecutionContext.native = False``, and every
profiled call) must give the same outputs, including outputs the kernels do not write (inputs,
constants, views, planned values, an output listed twice) and outputs bound to the caller's
arrays (poisoned first). A kernel that fails stops the walk with the kernel's name. (Calls
from many threads at once: ``tests/model/test_model_api.py``.)
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import EmberError

onnx = pytest.importorskip("onnx", reason="the models are built with onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

SHAPE = (3, 7, 5, 11)  # no tile divides it


def _model(fuse: bool = False) -> tuple[ember.Model, np.ndarray]:
    """x -> Add(w) -> Relu -> Reshape -> Sigmoid -> Mul(x'), with outputs: the last value, the
    input itself, the constant, a view (of an output), an intermediate that a later kernel
    reads, the last value again, and the output the view is of."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal(SHAPE).astype(np.float32)
    flat = (SHAPE[0], int(np.prod(SHAPE[1:])))
    nodes = [
        h.make_node("Add", ["x", "w"], ["a"]),
        h.make_node("Relu", ["a"], ["r"]),
        h.make_node("Reshape", ["r", "shape"], ["v"]),
        h.make_node("Sigmoid", ["v"], ["s"]),
        h.make_node("Reshape", ["x", "shape"], ["xf"]),
        h.make_node("Mul", ["s", "xf"], ["y"]),
        h.make_node("Identity", ["w"], ["wc"]),
        h.make_node("Identity", ["y"], ["y2"]),
    ]
    outs = [("y", flat), ("x_out", SHAPE), ("wc", SHAPE), ("v", flat), ("a", SHAPE), ("y2", flat), ("r", SHAPE)]
    nodes.append(h.make_node("Identity", ["x"], ["x_out"]))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, SHAPE)],
                     [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in outs],
                     [nh.from_array(w, "w"), nh.from_array(np.array(flat, np.int64), "shape")])
    proto = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    proto.ir_version = 8
    return ember.compile(proto.SerializeToString(), fuse=fuse), w


def _reference(x: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
    flat = (SHAPE[0], -1)
    a = x + w
    v = np.maximum(a, 0).reshape(flat)
    y = (1 / (1 + np.exp(-v))) * x.reshape(flat)
    return [y, x, w, v, a, y, v.reshape(SHAPE)]


@pytest.mark.parametrize("fuse", [False, True])
def test_native_walk_matches_python_loop_and_numpy(fuse: bool) -> None:
    model, w = _model(fuse)
    ctx = model.context()
    assert ctx._host(), "a CPU model of plain kernels is walked natively"
    for _ in range(2):  # the second call reuses the context's table and buffers
        x = np.random.default_rng().standard_normal(SHAPE).astype(np.float32)
        ctx.native = True
        native = model(x)
        ctx.native = False
        loop = model(x)
        ctx.native = True
        for got, py, ref in zip(native, loop, _reference(x, w)):
            np.testing.assert_array_equal(got, py)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # the outputs are the caller's: not the input, the constant or the context's storages
    x = np.random.default_rng().standard_normal(SHAPE).astype(np.float32)
    outs = model(x)
    assert not np.shares_memory(outs[1], x)
    outs[2][...] = np.nan
    outs[3][...] = np.nan
    again = model(x)
    np.testing.assert_allclose(again[2], w)
    assert np.isfinite(again[3]).all()


def test_native_walk_writes_bound_outputs() -> None:
    model, w = _model()
    x = np.random.default_rng().standard_normal(SHAPE).astype(np.float32)
    bound = [np.full(s.shape, np.nan, np.float32) for s in model.outputs]
    got = model.run(x, outputs=bound)
    assert all(g is b for g, b in zip(got, bound))
    for g, ref in zip(got, _reference(x, w)):
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6)


def test_run_addresses_on_the_host_walks_natively() -> None:
    model, w = _model()
    x = np.random.default_rng().standard_normal(SHAPE).astype(np.float32)
    outs = [np.full(s.shape, np.nan, np.float32) for s in model.outputs]
    ctx = model.context()
    ctx.run_addresses([x.ctypes.data], [o.ctypes.data for o in outs])
    assert ctx._io_steps is not None
    for g, ref in zip(outs, _reference(x, w)):
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6)


def _kernel(fail: bool) -> ember.runtime.Module:
    """``B = 2 A`` on 37 floats; with ``fail`` its body is guarded by an assertion that never
    holds (the kernel returns -1)."""
    from ember.ir import expr as E
    from ember.ir import stmt as S
    from ember.ir.dtypes import dtype

    a = te.placeholder((37,), "float32", "A")
    b = te.compute((37,), lambda i: a[i] * 2.0, "B")
    f = ember.lower(te.create_schedule(b.op), [a, b], "bad" if fail else "double")
    if fail:
        f = f.with_body(S.Assert(E.IntImm(dtype("bool"), 0), "never", f.body))
    return ember.build(f, target="llvm")


def test_a_failing_kernel_stops_the_walk_with_its_name() -> None:
    from ember.backends.cpu.plan import Steps

    good, bad = _kernel(False), _kernel(True)
    x = np.random.default_rng().standard_normal(37).astype(np.float32)
    y, z = np.full(37, np.nan, np.float32), np.full(37, np.nan, np.float32)
    table = (ctypes.c_uint64 * 3)(x.ctypes.data, y.ctypes.data, z.ctypes.data)
    steps = Steps([("double", good.addresses["double"], [0, 1]), ("bad", bad.addresses["bad"], [1, 2]),
                   ("double#2", good.addresses["double"], [1, 2])])
    with pytest.raises(EmberError, match=r"kernel bad failed at run time \(code -1\)"):
        steps.run(table)
    np.testing.assert_allclose(y, 2 * x)  # the first kernel ran
    assert np.isnan(z).all()  # the one after the failure did not
    Steps([("double", good.addresses["double"], [0, 1])]).run(table)
    with pytest.raises(EmberError, match="address table has 2 entries"):
        steps.run((ctypes.c_uint64 * 2)(x.ctypes.data, y.ctypes.data))


def test_too_many_arguments_are_refused() -> None:
    from ember.backends.cpu.plan import MAX_ARGS, Steps

    with pytest.raises(EmberError, match="at most"):
        Steps([("k", 0, list(range(MAX_ARGS + 1)))])
