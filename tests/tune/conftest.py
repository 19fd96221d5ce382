"""Fixtures of the tuner's tests: a records database per test (never ``~/.cache/ember``), small
ONNX models built in memory, and a te GEMM template with knobs."""

from __future__ import annotations

import numpy as np
import pytest

from ember import te
from ember.strategy import ConfigSpace


@pytest.fixture(autouse=True)
def _private_tuning_db(tmp_path, monkeypatch):
    """``EMBER_TUNING_DB`` points into the test's temporary directory."""
    monkeypatch.setenv("EMBER_TUNING_DB", str(tmp_path / "default-tuning.db"))


def matmul_model(m: int, k: int, n: int, layers: int = 1, relu: bool = True, seed: int = 0) -> bytes:
    """An ONNX model of ``layers`` chained MatMul (+ Relu) nodes, ``[m, k] @ [k, n]`` each
    (``k == n`` when ``layers > 1``), weights random."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for layer in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((k, n)).astype("float32"), f"w{layer}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{layer}"], [f"m{layer}"]))
        x = f"m{layer}"
        if relu:
            nodes.append(helper.make_node("Relu", [x], [f"r{layer}"]))
            x = f"r{layer}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def reference(model: bytes, x: np.ndarray) -> np.ndarray:
    """``model``'s output computed in float64 with NumPy (MatMul and Relu chains)."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load_from_string(model)
    w = {i.name: numpy_helper.to_array(i).astype("float64") for i in proto.graph.initializer}
    y = x.astype("float64")
    for node in proto.graph.node:
        if node.op_type == "MatMul":
            y = y @ w[node.input[1]]
        elif node.op_type == "Relu":
            y = np.maximum(y, 0.0)
    return y


def gemm_template(m: int, n: int, k: int):
    """A te GEMM ``C = A @ B`` whose schedule takes a configuration: (schedule_fn, args, space).
    Knobs: the row and column tiles, the reduction's blocking, unrolling the tile rows."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    rows, cols = C.op.axis
    space = ConfigSpace()
    space.define_split("rows", rows, num_outputs=2, policy="power2", default=(-1, 4))
    space.define_split("cols", cols, num_outputs=2, policy="power2", default=(-1, 8))
    space.define_split("red", r, num_outputs=2, policy="power2", default=(-1, 1))
    space.define_knob("unroll_rows", [False, True])
    space.add_check(lambda c: None if c["rows"].size[1] * c["cols"].size[1] <= 64
                    else "the register tile is larger than 64 values")

    def schedule(cfg):
        s = te.create_schedule(C.op)
        ro, ri = cfg["rows"].apply(s, C, rows)
        co, ci = cfg["cols"].apply(s, C, cols)
        ko, ki = cfg["red"].apply(s, C, r)
        s[C].reorder(ro, co, ko, ki, ri, ci)
        s[C].vectorize(ci)
        if cfg["unroll_rows"].val:
            s[C].unroll(ri)
        return s

    return schedule, [A, B, C], space
