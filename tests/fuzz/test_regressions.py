"""Regression tests: every failure of issue 16's table and every finding of the fuzzer, as a small
model with the answer ember must give (an ember error naming the node and the rule, or
ONNX Runtime's result).

The first part builds the ONNX models of the issue's table; the second the findings of
``make fuzz`` / the slice (each names the fuzz verdict it came from); the third checks the
operator rules directly on ember graphs, which bypass the ONNX checks, so that the operators
themselves refuse what would read or write out of bounds.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the regression models are ONNX models")
ort = pytest.importorskip("onnxruntime", reason="some regressions compare with ONNX Runtime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ember  # noqa: E402
from ember.errors import EmberError, GraphError, ModelFormatError, OpError, UnsupportedOpError  # noqa: E402
from ember.graph.ir import Graph, Node, TensorInfo  # noqa: E402
from ember.graph.validate import validate_graph  # noqa: E402

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits=(), opset=17, ir=8):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def _bytes(m) -> bytes:
    return m.SerializeToString()


def _compile(m, **kw):
    return ember.compile(_bytes(m) if not isinstance(m, bytes) else m, use_cache=False, **kw)


def _ort(m, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(_bytes(m), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _same_as_ort(m, feeds, **kw):
    got = _compile(m, **kw)(**feeds)
    want = _ort(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _one(op, x_shape, inits=(), opset=17, out_elem=F, ins=None, **attrs):
    node = helper.make_node(op, ins or ["x"] + [t.name for t in inits], ["y"], name="n", **attrs)
    return _model([node], [_vi("x", x_shape)], [_vi("y", None, out_elem)], inits, opset)


# ============================================================================ the table
def test_output_no_node_computes_is_a_graph_error_not_a_key_error():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("z", [2])])
    with pytest.raises(GraphError, match="graph output 'z' is not computed"):
        _compile(m)


def test_required_input_left_out_is_a_format_error_not_an_attribute_error():
    m = _model([helper.make_node("Gemm", ["x", ""], ["y"])], [_vi("x", [2, 2])], [_vi("y", None)])
    with pytest.raises(ModelFormatError, match="input 1 is marked single but has an empty string"):
        _compile(m)


def test_transpose_with_negative_perm_is_rejected():
    m = _one("Transpose", [2, 3, 4], perm=[-1, -2, -3])
    with pytest.raises(GraphError, match=r"Transpose.*Invalid attribute perm \{-1, -2, -3\}"):
        _compile(m)


def test_concat_of_mismatched_dimensions_is_rejected():
    m = _model([helper.make_node("Concat", ["x", "z"], ["y"], axis=0)], [_vi("x", [2, 3]), _vi("z", [2, 4])],
               [_vi("y", None)])
    with pytest.raises(GraphError, match="Concat"):
        _compile(m)


def test_gemm_with_mismatched_k_is_rejected():
    m = _one("Gemm", [2, 3], [_init("w", np.ones((5, 4), np.float32))])
    with pytest.raises(GraphError, match="Gemm.*Dimension mismatch"):
        _compile(m)


def test_gemm_with_a_large_weight_is_still_checked():
    """Initializers of more than 1,024 elements are graph inputs in the copy onnx checks: their
    shapes still take part."""
    m = _one("Gemm", [2, 3], [_init("w", np.ones((50, 40), np.float32))])
    with pytest.raises(GraphError, match="Gemm.*Dimension mismatch"):
        _compile(m)


def test_flatten_axis_9_is_rejected():
    with pytest.raises(GraphError, match=r"Flatten.*Invalid value\(9\) for attribute 'axis'"):
        _compile(_one("Flatten", [2, 3], axis=9))


def test_kernel_shape_contradicting_the_weights_is_rejected():
    m = _one("Conv", [1, 2, 8, 8], [_init("w", np.ones((3, 2, 3, 3), np.float32))], kernel_shape=[5, 5])
    with pytest.raises(OpError, match=r"Conv node 'n': kernel_shape \[5, 5\] contradicts the weights"):
        _compile(m)


def test_conv_bias_of_the_wrong_length_is_rejected():
    m = _one("Conv", [1, 2, 8, 8], [_init("w", np.ones((3, 2, 3, 3), np.float32)), _init("b", np.ones(4, np.float32))])
    with pytest.raises(OpError, match=r"B has shape \(4,\); it needs one value per output channel \(3,\)"):
        _compile(m)


def test_memory_plan_over_the_limit_is_an_ember_error(monkeypatch):
    from ember.model.memory_plan import check_plan_size
    from ember.ops.util import memory_limit

    monkeypatch.setenv("EMBER_MEMORY_LIMIT", "1M")
    try:
        with pytest.raises(EmberError, match="memory plan needs .* more than the 0.00 GiB limit"):
            check_plan_size([600_000, 600_000], "m")
        memory_limit(fresh=True)
        # a chain whose tensors are each within the limit but not all together
        nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
                 helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Mul", ["c", "a"], ["y"])]
        m = _model(nodes, [_vi("x", [300, 300])], [_vi("y", None)])
        with pytest.raises(EmberError, match="memory plan needs"):
            _compile(m, fuse=False)
        big = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])],
                     [_vi("x", [1000, 1000])], [_vi("y", None)])
        with pytest.raises(OpError, match="would take .* GiB, more than the"):
            _compile(big)
    finally:
        monkeypatch.delenv("EMBER_MEMORY_LIMIT")
        memory_limit(fresh=True)


def test_a_storage_the_machine_cannot_give_is_an_ember_error():
    from ember.model.memory import HostMemory

    with pytest.raises(EmberError, match="cannot allocate a storage"):
        HostMemory().storage(1 << 62)


# ============================================================================ spec rules
def test_gather_with_constant_indices_out_of_range_is_rejected():
    m = _one("Gather", [3, 4], [_init("i", np.array([0, 7], np.int64))], axis=0)
    with pytest.raises(OpError, match=r"index 7 is outside \[-3, 2\]"):
        _compile(m)


def test_gather_with_run_time_indices_out_of_range_clamps():
    """Run-time indices are clamped into the axis (ONNX Runtime fails the call instead): no read
    outside the data, whatever the values."""
    m = _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], [_vi("x", [3, 4]), _vi("i", [4], I64)],
               [_vi("y", None)])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = _compile(m)(x, np.array([0, -1, 7, -100], np.int64))
    np.testing.assert_array_equal(y, x[[0, 2, 2, 0]])


def test_initializer_data_shorter_than_its_dims_is_rejected():
    t = _init("w", np.ones((4, 4), np.float32))
    t.raw_data = t.raw_data[:20]
    m = _one("Add", [4, 4], [t])
    with pytest.raises(ModelFormatError, match="initializer 'w' holds 20 bytes of data, but dims"):
        _compile(m)


def test_initializer_with_a_negative_dimension_is_rejected():
    t = _init("w", np.ones(4, np.float32))
    del t.dims[:]
    t.dims.extend([-1])
    with pytest.raises(ModelFormatError, match="initializer 'w' has a negative dimension"):
        _compile(_one("Add", [4], [t]))


def test_duplicate_definitions_cycles_and_missing_inputs():
    dup = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])], [_vi("x", [2])],
                 [_vi("y", None)])
    with pytest.raises(GraphError, match="'y' is defined twice"):
        _compile(dup)
    cyc = _model([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Neg", ["a"], ["b"])], [_vi("x", [2])],
                 [_vi("a", None)])
    with pytest.raises(GraphError, match="cycle"):
        _compile(cyc)
    missing = _model([helper.make_node("Add", ["x", "nope"], ["y"])], [_vi("x", [2])], [_vi("y", None)])
    with pytest.raises(GraphError, match="reads 'nope'"):
        _compile(missing)


def test_nodes_out_of_order_are_sorted_as_onnx_runtime_does():
    m = _model([helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])], [_vi("x", [3])],
               [_vi("y", None)])
    _same_as_ort(m, {"x": np.array([-1, 2, -3], np.float32)})


@pytest.mark.parametrize("opset,match", [(0, "version 0"), (99, "opset 99; the newest opset is")])
def test_bad_opsets_are_rejected(opset, match):
    with pytest.raises(ModelFormatError, match=match):
        _compile(_one("Relu", [2], opset=opset))


def test_model_without_ir_version_or_graph_is_rejected():
    m = _one("Relu", [2])
    m.ir_version = 0
    with pytest.raises(ModelFormatError, match="no ir_version"):
        _compile(m)
    with pytest.raises(ModelFormatError, match="holds no graph"):
        _compile(onnx.ModelProto(ir_version=8).SerializeToString())


def test_contrib_domain_is_accepted_by_validation_and_reported_as_unsupported():
    """com.microsoft operators pass the checks (no ONNX schema to hold them to); ember has only a
    few of them (QLinearAdd, QLinearGlobalAveragePool, QGemm), so for the others the answer is the
    list of unsupported operators."""
    g = helper.make_graph(
        [helper.make_node("QLinearSigmoid", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft")],
        "g", [_vi("x", [2], TensorProto.UINT8)], [_vi("y", [2], TensorProto.UINT8)],
        [_init("s", np.float32(0.1)), _init("z", np.uint8(3))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    with pytest.raises(UnsupportedOpError, match="com.microsoft.QLinearSigmoid"):
        _compile(m)


def test_minus_one_input_dimension_is_unknown_as_for_onnx_runtime():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [-1, 2])], [_vi("y", None)])
    dynamic = _compile(m)  # compiled per input shape (ember.model.dynamic)
    assert dynamic.inputs[0].shape == ("x[0]", 2)
    for n in (3, 5):
        (y,) = dynamic(-np.ones((n, 2), np.float32))
        np.testing.assert_array_equal(y, np.zeros((n, 2), np.float32))
    (y,) = _compile(m, input_shapes={"x": (3, 2)})(np.ones((3, 2), np.float32))
    assert y.shape == (3, 2)


def test_strict_inference_uses_the_given_input_shapes():
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", ["n", "k"])], [_vi("y", None)],
               [_init("w", np.ones((3, 2), np.float32))])
    with pytest.raises(GraphError, match="MatMul"):
        _compile(m, input_shapes={"x": (2, 4)})
    (y,) = _compile(m, input_shapes={"x": (2, 3)})(np.ones((2, 3), np.float32))
    assert y.shape == (2, 2)


# ============================================================================ fuzz findings
def test_fuzz_invalid_utf8_name_is_a_format_error():
    """foreign (UnicodeDecodeError, later TypeError in the error message): a byte flip inside a
    node name or op type."""
    m = _one("Relu", [2])
    data = _bytes(m).replace(b"Relu", b"R\xffl\x80")
    with pytest.raises(ModelFormatError, match="not valid UTF-8"):
        _compile(data)


def test_fuzz_onnx_inference_abort_is_contained():
    """crash (SIGABRT): onnx's shape inference fails an ``std::clamp`` assertion on a Slice after
    a Conv whose dilated kernel is larger than its input; the checks run in a child process."""
    w = np.ones((2, 1, 3, 1), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], dilations=[7, 1], group=2, kernel_shape=[3, 1],
                              pads=[0, 0, 1, 1], strides=[2, 2]),
             helper.make_node("MaxPool", ["c"], ["p"], ceil_mode=1, kernel_shape=[1, 1], strides=[2, 2]),
             helper.make_node("Slice", ["p", "st", "en", "ax", "sp"], ["y"])]
    inits = [_init("w", w), _init("st", np.array([-2, 2, 0, -2], np.int64)),
             _init("en", np.array([-2, -(2**62), -(2**62), -(2**62)], np.int64)),
             _init("ax", np.array([-4, 2, 3, -3], np.int64)), _init("sp", np.array([-1, 1, 1, 1], np.int64))]
    m = _model(nodes, [_vi("x", [5, 2, 5, 1])], [_vi("y", None)], inits, opset=21)
    with pytest.raises((ModelFormatError, GraphError, OpError)):
        _compile(m)


def test_fuzz_huge_input_dimension_exhausting_onnx_inference():
    """foreign (MemoryError, std::bad_alloc in onnx's inference): an input of 2**33 elements."""
    m = _model([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Gather", ["a", "i"], ["y"], axis=-1)],
               [_vi("x", [2**33])], [_vi("y", None)], [_init("i", np.array([[0, 1]], np.int64))], opset=21)
    with pytest.raises(EmberError):
        _compile(m)


@pytest.mark.parametrize("starts,ends,axes,steps,shape", [
    ([-1, 4, 3, -2], [-(2**62), 2**62, 2**62, -(2**62)], [-2, 0, 3, 1], [1, 1, 1, -1], [4, 1, 1, 5]),
    ([-2], [-(2**62)], [0], [-1], [1, 3]),
    ([5], [-10], [0], [-2], [4, 2]),
])
def test_fuzz_slice_clamps_a_negative_step_start_as_onnx(starts, ends, axes, steps, shape):
    """mismatch: Slice with a negative step clamped its start as Python does (-1, nothing) where
    ONNX clamps to 0."""
    inits = [_init(n, np.array(v, np.int64)) for n, v in zip(("s", "e", "a", "p"), (starts, ends, axes, steps))]
    m = _one("Slice", shape, inits)
    _same_as_ort(m, {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)})


def test_fuzz_keepdims_other_than_one_means_false():
    """mismatch: ReduceMin with keepdims=-1 kept the dimensions; ONNX's inference and ONNX
    Runtime keep them only for keepdims=1."""
    m = _one("ReduceMin", [2, 3], keepdims=-1, axes=[1], opset=13)
    _same_as_ort(m, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    m = _one("ArgMax", [2, 3], out_elem=I64, keepdims=-1, axis=1)
    _same_as_ort(m, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_fuzz_arg_reduction_of_a_row_of_nans_gives_a_valid_index(op, last):
    """mismatch (seed 20289259: MatMul -> Transpose -> ArgMax with a NaN weight): a row of NaN
    kept the reduction's starting index, 2**31 - 1, past the axis; ONNX Runtime gives 0. NaN now
    counts as the extreme (NumPy's first NaN), so the index is always inside the axis."""
    x = np.array([[np.nan, np.nan, np.nan], [1.0, np.nan, 3.0], [2.0, 5.0, 1.0]], np.float32)
    m = _one(op, [3, 3], out_elem=I64, axis=1, keepdims=0, select_last_index=last)
    got = _compile(m)(x=x)[0]
    assert ((got >= 0) & (got < 3)).all()
    want = _ort(m, {"x": x})[0]
    np.testing.assert_array_equal(got[[0, 2]], want[[0, 2]])  # all-NaN and NaN-free rows as ONNX Runtime
    assert got[1] == 1  # a row with one NaN: its index, as NumPy (ONNX Runtime's pick is unspecified)


def test_fuzz_clip_bound_with_several_elements_is_rejected():
    """accepted_invalid (Flatten Gemm Erf Gather Clip, Clip's min a [1, 8] tensor): ember read its
    first element; ONNX Runtime refuses a bound that is not a scalar, and so does ember now."""
    m = _one("Clip", [3, 4], [_init("lo", np.zeros((1, 8), np.float32))], opset=13)
    with pytest.raises(OpError, match="must be scalars"):
        _compile(m)
    ok = _one("Clip", [3, 4], [_init("lo", np.zeros((1,), np.float32))], opset=13)  # one element: fine
    _same_as_ort(ok, {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)})


@pytest.mark.parametrize("mode,pads,shape,match", [
    ("wrap", [-6, 0, 0, 0, 2, 0, 0, 1], [4, 4, 3, 5], "nothing of the input is left"),
    ("reflect", [0, 0, 1, 0, 0, 1], [1, 1, 1], "needs at least 2"),
])
def test_fuzz_pad_modes_that_have_nothing_to_repeat(mode, pads, shape, match):
    """accepted_invalid: Pad wrap/edge/reflect of an axis with nothing (reflect: fewer than 2
    elements) left to repeat, which ONNX Runtime refuses."""
    m = _one("Pad", shape, [_init("p", np.array(pads, np.int64))], opset=18, mode=mode)
    with pytest.raises(OpError, match=match):
        _compile(m)


def test_fuzz_reshape_shape_must_be_a_vector():
    """accepted_invalid: a 2-D shape tensor (initializer dims edited to [4, 1])."""
    m = _one("Reshape", [2, 2], [_init("s", np.array([[4]], np.int64))])
    with pytest.raises(OpError, match=r"input 1 \(shape\) must be a 1-D tensor"):
        _compile(m)


def test_fuzz_cumsum_attributes_and_axis():
    """accepted_invalid: CumSum with reverse=-1, and with an axis tensor of 2 elements."""
    m = _one("CumSum", [2, 3], [_init("a", np.array(1, np.int64))], reverse=-1)
    with pytest.raises(OpError, match="must each be 0 or 1"):
        _compile(m)
    m = _one("CumSum", [2, 3], [_init("a", np.array([1, 0], np.int64))])
    with pytest.raises(OpError, match="axis must be one integer"):
        _compile(m)


def test_fuzz_instance_norm_needs_a_spatial_axis():
    """accepted_invalid: InstanceNormalization on a 2-D input (a Flatten's axis removed)."""
    m = _one("InstanceNormalization", [2, 3], [_init("s", np.ones(3, np.float32)), _init("b", np.zeros(3, np.float32))])
    with pytest.raises(OpError, match="at least one spatial axis"):
        _compile(m)


def test_fuzz_concat_input_left_out():
    """accepted_invalid: a Concat whose middle input is the empty name."""
    m = _model([helper.make_node("Concat", ["c", "", "x"], ["y"], axis=-1)], [_vi("x", [2])], [_vi("y", None)],
               [_init("c", np.ones(2, np.float32))])
    with pytest.raises((OpError, ModelFormatError), match="every input must be given|empty"):
        _compile(m)


def test_fuzz_pooling_an_empty_input():
    """accepted_invalid: MaxPool of an input with an empty spatial axis."""
    m = _one("MaxPool", [5, 1, 0], kernel_shape=[2], pads=[1, 1], strides=[2])
    with pytest.raises(OpError, match="is empty"):
        _compile(m)


def test_fuzz_argmax_of_an_empty_axis():
    """accepted_invalid: ArgMax over an axis of size 0."""
    with pytest.raises(OpError, match="axis 0 is empty"):
        _compile(_one("ArgMax", [0], out_elem=I64, axis=0))


def test_fuzz_dead_invalid_node_when_an_output_is_an_input():
    """accepted_invalid: onnx's inference skips every node of a graph one of whose outputs is a
    graph input; the invalid node is still found."""
    m = _model([helper.make_node("Flatten", ["x"], ["v"], axis=2)], [_vi("x", [4])], [_vi("x", None)])
    with pytest.raises((GraphError, OpError), match="Flatten"):
        _compile(m)
    conv = _model([helper.make_node("Conv", ["x", "w"], ["v"])], [_vi("x", [1, 2, 4, 4], TensorProto.FLOAT16)],
                  [_vi("x", None, TensorProto.FLOAT16)], [_init("w", np.ones((1, 2, 1, 1), np.float32))])
    with pytest.raises(GraphError, match="Conv"):
        _compile(conv)


def test_fuzz_default_domain_alias():
    """rejected_valid: a node of domain "ai.onnx" (the default domain's other name)."""
    m = _one("Relu", [3])
    m.graph.node[0].domain = "ai.onnx"
    _same_as_ort(m, {"x": np.array([-1, 0, 2], np.float32)})


@pytest.mark.parametrize("shape,reps,chain", [((3, 4, 5), (2, 2, 1), False), ((2, 3, 4, 5), (1, 1, 2, 1), False),
                                              ((4, 4, 4, 2), (1, 1, 2, 1), True)])
def test_fuzz_softmax_with_a_fused_tile(shape, reps, chain):
    """mismatch (fixed): Softmax -> Tile (-> Tile), found as Softmax Tile Tile and Concat
    LogSoftmax Tile TopK: LLVM's loop vectorizer miscompiled the tiled store loop (a masked
    induction variable taken as uniform); code generation keeps it off such loops."""
    nodes = [helper.make_node("Softmax", ["x"], ["a"], axis=-1),
             helper.make_node("Tile", ["a", "r1"], ["b" if chain else "y"])]
    inits = [_init("r1", np.array(reps, np.int64))]
    if chain:
        nodes.append(helper.make_node("Tile", ["b", "r2"], ["y"]))
        inits.append(_init("r2", np.array([1, 2, 2, 1], np.int64)))
    m = _model(nodes, [_vi("x", list(shape))], [_vi("y", None)], inits, opset=21)
    _same_as_ort(m, {"x": np.random.default_rng(0).uniform(-2, 2, shape).astype(np.float32)})


@pytest.mark.parametrize("axes", [np.array([[0]], np.int64), np.array(0, np.int64)])
def test_fuzz_squeeze_axes_must_be_a_vector(axes):
    """accepted_invalid: Squeeze whose axes initializer was given dims [1, 1], or [] (a scalar,
    which ONNX Runtime's Unsqueeze takes, and the node test loop13_seq uses, but not its Squeeze)."""
    m = _one("Squeeze", [1, 3], [_init("a", axes)])
    with pytest.raises(OpError, match=r"input 1 \(axes\) must be a 1-D tensor"):
        _compile(m)
    (y,) = _compile(_one("Unsqueeze", [3], [_init("a", np.array(0, np.int64))]))(np.ones(3, np.float32))
    assert y.shape == (1, 3)


def test_fuzz_opset_6_rules_for_broadcasting():
    """accepted_invalid: Max at opset 6 (after an opset edit) with inputs of different shapes;
    before opset 7/8 operands broadcast only as the old rules say."""
    m = _model([helper.make_node("Max", ["x", "c"], ["y"])], [_vi("x", [2, 3])], [_vi("y", None)],
               [_init("c", np.ones(3, np.float32))], opset=6, ir=3)
    m.graph.input.append(_vi("c", [3]))
    with pytest.raises(OpError, match="before opset 8 they must all be equal"):
        _compile(m)
    add = _model([helper.make_node("Add", ["x", "c"], ["y"])], [_vi("x", [2, 3]), _vi("c", [3])], [_vi("y", None)],
                 opset=6, ir=3)
    with pytest.raises(OpError, match="broadcast=0"):
        _compile(add)
    add.graph.node[0].attribute.append(helper.make_attribute("broadcast", 1))
    (y,) = _compile(add)(np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32))  # ONNX Runtime has no Add-6
    np.testing.assert_array_equal(y, np.ones((2, 3)) + np.arange(3))


def test_fuzz_graph_without_outputs():
    """accepted_invalid: a byte flip left the model an empty graph (ONNX Runtime fails to
    initialize it)."""
    data = _bytes(_one("Relu", [2]))
    m = onnx.ModelProto()
    m.ParseFromString(data)
    del m.graph.output[:]
    with pytest.raises(ModelFormatError, match="no outputs"):
        _compile(m)


def test_fuzz_resize_mode_and_scales():
    """accepted_invalid: Resize whose mode attribute was retyped to the string "x"."""
    m = _one("Resize", [1, 1, 2, 2], [], opset=21, ins=["x", "", "s"], mode="x")
    m.graph.initializer.append(_init("s", np.ones(4, np.float32)))
    with pytest.raises((OpError, ModelFormatError, GraphError), match="mode"):
        _compile(m)
    m = _one("Resize", [1, 1, 2, 2], [], opset=21, ins=["x", "", "s"])
    m.graph.initializer.append(_init("s", np.array([1, 1, -2, 2], np.float32)))
    with pytest.raises(OpError, match="positive"):
        _compile(m)


def test_fuzz_pad_constant_value_must_be_one_element():
    """accepted_invalid: Pad whose constant_value input was renamed to a tensor of many values."""
    m = _model([helper.make_node("Relu", ["x"], ["v"]), helper.make_node("Pad", ["x", "p", "v"], ["y"])],
               [_vi("x", [2, 3])], [_vi("y", None)], [_init("p", np.array([0, 1, 0, 1], np.int64))])
    with pytest.raises(OpError, match="constant_value has shape"):
        _compile(m)


def test_fuzz_mean_over_no_values_is_nan():
    """mismatch, kept as ember's answer: ReduceMean over an empty input is undefined in the spec;
    ember gives 0/0 = NaN, ONNX Runtime 0 (the fuzzer accepts a NaN when an input is empty)."""
    (y,) = _compile(_one("ReduceMean", [0], keepdims=0, opset=15))(np.zeros(0, np.float32))
    assert np.isnan(y)


def test_fuzz_concat_transpose_pad_tile_fused():
    """mismatch (fixed), found by ``make fuzz`` (seed 1795601233): the same LLVM loop-vectorizer
    miscompilation as Softmax -> Tile (a masked induction variable in the tiled loop)."""
    rng = np.random.default_rng(0)
    c = rng.uniform(-2, 2, (2, 4, 4, 1)).astype(np.float32)
    nodes = [helper.make_node("Concat", ["x", "c"], ["a"], axis=0),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Pad", ["t", "p"], ["q"], mode="edge"), helper.make_node("Tile", ["q", "r"], ["y"])]
    inits = [_init("c", c), _init("p", np.array([1, 0, 0, 1, 0, 0, 0, 2], np.int64)),
             _init("r", np.array([2, 2, 2, 1], np.int64))]
    m = _model(nodes, [_vi("x", [2, 4, 4, 1])], [_vi("y", None)], inits, opset=15)
    _same_as_ort(m, {"x": rng.uniform(-2, 2, (2, 4, 4, 1)).astype(np.float32)})


# ============================================================================ operators on ember graphs
def _graph(op, shapes, consts=None, **attrs):
    consts = dict(consts or {})
    names = [f"i{k}" for k in range(max([len(shapes)] + [int(c[1:]) + 1 for c in consts]))]
    shapes = [shapes[k] if k < len(shapes) else np.shape(consts[n]) for k, n in enumerate(names)]
    inputs = [n for n, s in zip(names, shapes) if n not in consts]
    values = {n: TensorInfo(tuple(s), "float32") for n, s in zip(names, shapes) if n not in consts}
    g = Graph(inputs, ["y"], [Node(op, names, ["y"], attrs, "n")], values, consts)
    validate_graph(g)
    return g


@pytest.mark.parametrize("op,shapes,consts,attrs,match", [
    ("Transpose", [(2, 3, 4)], {}, {"perm": [-1, -2, -3]}, "is not a permutation"),
    ("Transpose", [(2, 3)], {}, {"perm": [0, 0]}, "is not a permutation"),
    ("Concat", [(2, 3), (2, 4)], {}, {"axis": 0}, "all dimensions but axis 0 must be equal"),
    ("Gemm", [(2, 3), (5, 4)], {}, {}, "inner dimensions"),
    ("Gemm", [(2, 3), (3, 4), (5,)], {}, {}, "does not broadcast"),
    ("Flatten", [(2, 3)], {}, {"axis": 9}, r"outside \[-r, r\]"),
    ("Conv", [(1, 2, 8, 8), (3, 2, 3, 3)], {}, {"kernel_shape": [5, 5]}, "contradicts the weights"),
    ("Conv", [(1, 2, 8, 8), (3, 2, 3, 3)], {}, {"strides": [0, 1]}, "strides"),
    ("Conv", [(1, 4, 8, 8), (3, 2, 3, 3)], {}, {"group": 2}, "group=2"),
    ("MaxPool", [(1, 1, 4, 4)], {}, {"kernel_shape": [2, 2], "pads": [2, 2, 2, 2]}, "smaller than the kernel"),
    ("Gather", [(3, 4), (2,)], {"i1": np.array([0, 3])}, {}, "outside"),
    ("GatherElements", [(3, 4), (3, 5)], {}, {"axis": 0}, "do not fit"),
    ("ScatterElements", [(3, 4), (2, 2), (2, 3)], {}, {}, "one shape"),
    ("Slice", [(3, 4)], {"i1": np.array([0]), "i2": np.array([1]), "i3": np.array([0, 0]), "i4": np.array([1, 1])},
     {}, "differ in length"),
    ("Reshape", [(2, 3)], {"i1": np.array([-2, -3])}, {}, "below -1"),
    ("Tile", [(2, 3)], {"i1": np.array([2])}, {}, "repeats"),
    ("Split", [(4,)], {"i1": np.array([-1, 5])}, {}, "non-negative"),
    ("BatchNormalization", [(1, 3, 2), (4,), (3,), (3,), (3,)], {}, {}, "one value per channel"),
    ("DepthToSpace", [(1, 3, 2, 2)], {}, {"blocksize": 2}, "blocksize 2"),
    ("TopK", [(2, 3)], {"i1": np.array([4])}, {}, r"outside \[0, 3\]"),
    ("Softmax", [(2, 3)], {}, {"axis": 5}, "out of range"),
    ("Expand", [(2, 3)], {"i1": np.array([4, 4])}, {}, "do not broadcast"),
    ("ConstantOfShape", [(2,)], {"i0": np.array([2, -3])}, {}, "negative"),
])
def test_operator_rules_on_ember_graphs(op, shapes, consts, attrs, match):
    g = _graph(op, shapes, {k: np.asarray(v, np.int64 if np.asarray(v).dtype.kind == "i" else None)
                            for k, v in consts.items()}, **attrs)
    with pytest.raises(OpError, match=match):
        ember.compile(g)


def test_required_input_missing_on_an_ember_graph():
    g = Graph(["x"], ["y"], [Node("Gemm", ["x", ""], ["y"], {}, "n")], {"x": TensorInfo((2, 2), "float32")}, {})
    with pytest.raises(OpError, match=r"input 1 \(b\) is required"):
        ember.compile(g)


def test_graph_structure_rules():
    info = {"x": TensorInfo((2,), "float32")}
    with pytest.raises(GraphError, match="defined twice"):
        validate_graph(Graph(["x"], ["y"], [Node("Relu", ["x"], ["y"]), Node("Neg", ["x"], ["y"])], dict(info), {}))
    with pytest.raises(GraphError, match="earlier node"):
        validate_graph(Graph(["x"], ["y"], [Node("Neg", ["a"], ["y"]), Node("Relu", ["x"], ["a"])], dict(info), {}))
    with pytest.raises(GraphError, match="not computed"):
        validate_graph(Graph(["x"], ["z"], [Node("Relu", ["x"], ["y"])], dict(info), {}))
    with pytest.raises(GraphError, match="dimensions must be integers >= 0"):
        validate_graph(Graph(["x"], ["y"], [Node("Relu", ["x"], ["y"])], {"x": TensorInfo((-1,), "float32")}, {}))
    with pytest.raises(GraphError, match="no operator 'Nope'"):
        validate_graph(Graph(["x"], ["y"], [Node("Nope", ["x"], ["y"])], dict(info), {}))


def test_fuzz_batchnorm_fold_overflow():
    """mismatch (fixed): a byte flip made a convolution weight 3.3e38; folding BatchNormalization into the
    convolution would overflow the weights to inf, so the fold keeps the two nodes apart."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
    inits = [_init("w", np.full((1, 1, 1, 1), 3e38, np.float32)), _init("s", np.float32([1.5])),
             _init("b", np.float32([0])), _init("m", np.float32([0])), _init("v", np.float32([1]))]
    m = _model(nodes, [_vi("x", [1, 1, 2, 2])], [_vi("y", None)], inits)
    _same_as_ort(m, {"x": np.full((1, 1, 2, 2), 0.01, np.float32)})
