"""A model with symbolic dimensions compiles each input shape's variant with the tuning records
it was compiled with (``ember.compile(..., tuning_db=PATH)``), not the default records file."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import TuningError
from ember.tune import TuningDB

onnx = pytest.importorskip("onnx", reason="the test builds a model with onnx")
from onnx import TensorProto, helper  # noqa: E402


def _relu_with_symbolic_batch() -> bytes:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_variants_compile_with_the_models_tuning_db(tmp_path) -> None:
    path = tmp_path / "records.db"
    with TuningDB(path):  # an empty, valid records file
        pass
    model = ember.compile(_relu_with_symbolic_batch(), tuning_db=path)
    model._specializer.per_shape_only()  # (no records: the model would otherwise compile once for every size)
    (y,) = model(np.array([[-1.0, 0.0, 2.0]], np.float32))
    np.testing.assert_array_equal(y, [[0.0, 0.0, 2.0]])
    path.unlink()  # the next shape's variant reads the same file, which is gone now
    with pytest.raises(TuningError, match="records.db"):
        model(np.zeros((2, 3), np.float32))
