"""ONNX control flow, sequences and optionals (ember/frontend/control_flow.py), compared with
ONNX Runtime on random inputs, plus the ONNX node cases whose inputs or outputs are sequences
or optionals (compared element by element)."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import ember  # noqa: E402
from ember.frontend.control_flow import NeedsCallInputs, expand  # noqa: E402
from ember.frontend.onnx import FrontendError, UnsupportedOpError, import_onnx  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, opset=17, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _ort(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(m, feeds, rtol=1e-5, atol=1e-6):
    want = _ort(m, feeds)
    got = ember.compile(m)(**feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _same(g, w, rtol, atol)
    return got


def _same(got, want, rtol=1e-5, atol=1e-6):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w, rtol, atol)
        return
    if want is None:
        assert got is None
        return
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- Scan
def _scan_model(opset=17):
    # state s[3]; scan inputs a[5,3] (axis 0, forward) and b[3,5] (axis 1, reverse);
    # scan outputs: y1 = s*a stacked on axis 0 forward, y2 = s+b stacked on axis 1 reversed.
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["s_in", "a_t"], ["y1"]),
            helper.make_node("Add", ["s_in", "b_t"], ["y2"]),
            helper.make_node("Add", ["y1", "y2"], ["s_mid"]),
            helper.make_node("Tanh", ["s_mid"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "w"], ["y3"]),  # w: an outer-scope value
        ],
        "body",
        [_vi("s_in", F, [3]), _vi("a_t", F, [3]), _vi("b_t", F, [3])],
        [_vi("s_out", F, [3]), _vi("y1", F, [3]), _vi("y2", F, [3]), _vi("y3", F, [3])],
    )
    scan = helper.make_node(
        "Scan",
        ["s0", "a", "b"],
        ["s_final", "Y1", "Y2", "Y3"],
        body=body,
        num_scan_inputs=2,
        scan_input_axes=[0, 1],
        scan_input_directions=[0, 1],
        scan_output_axes=[0, -1, 1],
        scan_output_directions=[0, 1, 0],
    )
    w = helper.make_node("Neg", ["x"], ["w"])
    return _model(
        [w, scan],
        [_vi("x", F, [3]), _vi("s0", F, [3]), _vi("a", F, [5, 3]), _vi("b", F, [3, 5])],
        [_vi(n, F, None) for n in ("s_final", "Y1", "Y2", "Y3")],
        opset,
    )


def test_scan_axes_and_directions():
    m = _scan_model()
    feeds = {
        k: RNG.standard_normal(s).astype(np.float32) for k, s in (("x", 3), ("s0", 3), ("a", (5, 3)), ("b", (3, 5)))
    }
    got = _check(m, feeds)
    assert got[2].shape == (3, 5) and got[3].shape == (3, 5)


def test_scan_body_names_are_unique_and_outer_values_resolve():
    flat, structures, _ = expand(_scan_model(), None, None)
    names = [o for n in flat.graph.node for o in n.output]
    assert len(names) == len(set(names))
    assert len({n.name for n in flat.graph.node}) == len(flat.graph.node)
    assert structures == ["s_final", "Y1", "Y2", "Y3"]
    # every iteration's Mul by w reads the outer value itself
    assert sum(1 for n in flat.graph.node if n.op_type == "Mul" and "w" in n.input) == 5
    assert not any(n.op_type == "Scan" for n in flat.graph.node)


def test_scan_opset8_batch_form():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x_t"], ["s2"]), helper.make_node("Mul", ["s2", "x_t"], ["y"])],
        "body",
        [_vi("s", F, [2]), _vi("x_t", F, [2])],
        [_vi("s2", F, [2]), _vi("y", F, [2])],
    )
    scan = helper.make_node("Scan", ["", "s0", "x"], ["sf", "ys"], body=body, num_scan_inputs=1, directions=[1])
    m = _model([scan], [_vi("s0", F, [3, 2]), _vi("x", F, [3, 4, 2])], [_vi("sf", F, None), _vi("ys", F, None)], 8)
    feeds = {
        "s0": RNG.standard_normal((3, 2)).astype(np.float32),
        "x": RNG.standard_normal((3, 4, 2)).astype(np.float32),
    }
    _check(m, feeds)


# ----------------------------------------------------------------------------- If
def _branch(name, op, value_shape=(4,)):
    return helper.make_graph([helper.make_node(op, ["x"], [name])], name + "_g", [], [_vi(name, F, list(value_shape))])


def test_if_constant_condition_inlines_the_taken_branch():
    # cond = (Size(x) == 4): folds at import, only the taken branch is built
    nodes = [
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Constant", [], ["four"], value=helper.make_tensor("four", TensorProto.INT64, [], [4])),
        helper.make_node("Equal", ["n", "four"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", "Exp"), else_branch=_branch("e", "Neg")),
    ]
    m = _model(nodes, [_vi("x", F, [4])], [_vi("y", F, [4])])
    flat, _, _ = expand(m)
    ops = [n.op_type for n in flat.graph.node]
    assert "Exp" in ops and "Neg" not in ops and "If" not in ops
    _check(m, {"x": RNG.standard_normal(4).astype(np.float32)})


@pytest.mark.parametrize("cond", [True, False])
def test_if_runtime_condition_selects_with_where(cond):
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", "Exp"), else_branch=_branch("e", "Sin"))]
    m = _model(nodes, [_vi("c", TensorProto.BOOL, []), _vi("x", F, [4])], [_vi("y", F, [4])])
    flat, _, _ = expand(m)
    assert "Where" in [n.op_type for n in flat.graph.node]
    model = ember.compile(m)
    x = RNG.standard_normal(4).astype(np.float32)
    for c in (cond, not cond):
        (got,) = model(c=np.array(c), x=x)
        (want,) = _ort(m, {"c": np.array(c), "x": x})
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_if_runtime_condition_with_different_shapes_compiles_per_value():
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "tg", [], [_vi("t", F, [4])])
    other = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["e"], axis=0)], "eg", [], [_vi("e", F, [8])])
    m = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [_vi("c", TensorProto.BOOL, []), _vi("x", F, [4])],
        [_vi("y", F, None)],
    )
    with pytest.raises(NeedsCallInputs, match="'c'"):
        import_onnx(m)
    model = ember.compile(m)
    assert isinstance(model, ember.Model) and not model.is_static  # compiled per call structure
    x = RNG.standard_normal(4).astype(np.float32)
    assert model(c=np.array(True), x=x)[0].shape == (4,)
    np.testing.assert_array_equal(model(c=np.array(False), x=x)[0], np.concatenate([x, x]))


# ----------------------------------------------------------------------------- Loop
def _loop_body(cond_node):
    return helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["acc_in", "fi"], ["t"]),
            helper.make_node("Add", ["t", "step"], ["acc_out"]),  # step: outer value
            cond_node,
            helper.make_node("Sin", ["acc_out"], ["scan"]),
        ],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []), _vi("acc_in", F, [3])],
        [_vi("c_out", TensorProto.BOOL, []), _vi("acc_out", F, [3])]
        + ([_vi("scan", F, [3])] if cond_node.op_type == "Identity" else []),
    )


def test_loop_constant_trip_count():
    body = _loop_body(helper.make_node("Identity", ["c_in"], ["c_out"]))
    m_const = helper.make_tensor("M", TensorProto.INT64, [], [6])
    t = helper.make_tensor("T", TensorProto.BOOL, [], [True])
    m = _model(
        [helper.make_node("Loop", ["M", "T", "acc0"], ["acc", "scans"], body=body)],
        [_vi("acc0", F, [3]), _vi("step", F, [3])],
        [_vi("acc", F, None), _vi("scans", F, None)],
        inits=[m_const, t],
    )
    rng = np.random.default_rng(209)  # not the module's RNG: these inputs must not depend on test order
    model = ember.compile(m)
    for _ in range(5):
        feeds = {"acc0": rng.standard_normal(3).astype(np.float32), "step": rng.standard_normal(3).astype(np.float32)}
        acc, scans = model(**feeds)
        assert scans.shape == (6, 3)
        # float64 reference of the recurrence acc_i = acc_{i-1} * i + step, scan_i = sin(acc_i)
        a, rows = feeds["acc0"].astype(np.float64), []
        for i in range(6):
            a = a * i + feeds["step"]
            rows.append(a)
        rows = np.array(rows)
        np.testing.assert_allclose(acc, a, rtol=1e-5, atol=1e-6)
        # |acc| grows to ~5! |step|: float32 rounding of acc (a few ulps of |acc|, the multiply-add
        # fused or not) moves sin(acc) by as much, so each row's bound is 8 ulps of its |acc|
        tol = 8 * np.finfo(np.float32).eps * np.abs(rows) + 1e-6
        assert np.all(np.abs(scans - np.sin(rows)) <= tol), (scans, np.sin(rows), tol)


def test_loop_data_dependent_condition_keeps_the_last_value():
    # cond_out = ReduceSum(acc_out) < limit: decided at run time; the trip count (8) is constant
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "limit"], ["c_out"]),
        ],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []), _vi("acc_in", F, [3])],
        [_vi("c_out", TensorProto.BOOL, []), _vi("acc_out", F, [3])],
    )
    m = _model(
        [helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body)],
        [_vi("acc0", F, [3]), _vi("step", F, [3]), _vi("limit", F, [])],
        [_vi("acc", F, None)],
        inits=[helper.make_tensor("M", TensorProto.INT64, [], [8])],
    )
    model = ember.compile(m)
    for limit in (-5.0, 0.5, 2.0, 4.0, 100.0):
        feeds = {
            "acc0": np.zeros(3, np.float32),
            "step": np.full(3, 0.25, np.float32) + RNG.uniform(0, 0.01, 3).astype(np.float32),
            "limit": np.array(limit, np.float32),
        }
        (got,) = model(**feeds)
        (want,) = _ort(m, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_loop_trip_count_from_an_input_compiles_per_value():
    body = _loop_body(helper.make_node("Identity", ["c_in"], ["c_out"]))
    m = _model(
        [helper.make_node("Loop", ["M", "", "acc0"], ["acc", "scans"], body=body)],
        [_vi("M", TensorProto.INT64, []), _vi("acc0", F, [3]), _vi("step", F, [3])],
        [_vi("acc", F, None), _vi("scans", F, None)],
    )
    model = ember.compile(m)
    assert isinstance(model, ember.Model) and not model.is_static  # compiled per call structure
    for trips in (3, 5):
        feeds = {
            "M": np.array(trips, np.int64),
            "acc0": RNG.standard_normal(3).astype(np.float32),
            "step": RNG.standard_normal(3).astype(np.float32),
        }
        got = model(**feeds)
        want = _ort(m, feeds)
        assert got[1].shape == (trips, 3)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_loop_without_trip_count_and_runtime_condition_is_an_error():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["a"], ["b"])],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []), _vi("a", F, [2])],
        [_vi("c_out", TensorProto.BOOL, []), _vi("b", F, [2])],
    )
    # cond depends on a float input through a comparison: the value must be static
    m = _model(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "x0"], ["c"]),
            helper.make_node("Loop", ["", "c", "x"], ["y"], body=body),
        ],
        [_vi("x", F, [2]), _vi("x0", F, [])],
        [_vi("y", F, None)],
    )
    with pytest.raises(NeedsCallInputs, match="Loop"):
        import_onnx(m)


def test_unsupported_op_in_a_body_is_reported():
    body = helper.make_graph(
        [helper.make_node("NoSuchOp", ["s", "x_t"], ["s2"]), helper.make_node("Identity", ["s2"], ["y"])],
        "body",
        [_vi("s", F, [2]), _vi("x_t", F, [2])],
        [_vi("s2", F, [2]), _vi("y", F, [2])],
    )
    scan = helper.make_node("Scan", ["s0", "x"], ["sf", "ys"], body=body, num_scan_inputs=1)
    m = _model([scan], [_vi("s0", F, [2]), _vi("x", F, [4, 2])], [_vi("sf", F, None), _vi("ys", F, None)])
    with pytest.raises(UnsupportedOpError, match="NoSuchOp"):
        import_onnx(m)


# ----------------------------------------------------------------------------- sequences
def test_sequences_inside_a_graph():
    seq = onnx.TypeProto()
    nodes = [
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1),
        helper.make_node("SequenceErase", ["s", "one"], ["s2"]),  # drop piece 1
        helper.make_node("SequenceInsert", ["s2", "y", "zero"], ["s3"]),  # y in front
        helper.make_node("SequenceAt", ["s3", "minus_one"], ["last"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=1),
        helper.make_node("SequenceConstruct", ["last", "last"], ["pair"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["stacked"], axis=0, new_axis=1),
    ]
    del seq
    inits = [
        helper.make_tensor("split", TensorProto.INT64, [3], [2, 3, 2]),
        helper.make_tensor("one", TensorProto.INT64, [], [1]),
        helper.make_tensor("zero", TensorProto.INT64, [], [0]),
        helper.make_tensor("minus_one", TensorProto.INT64, [], [-1]),
    ]
    m = _model(
        nodes,
        [_vi("x", F, [3, 7]), _vi("y", F, [3, 1])],
        [_vi("last", F, None), _vi("n", TensorProto.INT64, None), _vi("cat", F, None), _vi("stacked", F, None)],
        inits=inits,
    )
    feeds = {"x": RNG.standard_normal((3, 7)).astype(np.float32), "y": RNG.standard_normal((3, 1)).astype(np.float32)}
    got = _check(m, feeds)
    assert got[2].shape == (3, 5) and got[3].shape == (2, 3, 2)


def test_sequence_map_and_optionals():
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "t"], ["o"])], "b", [_vi("e", F, [2]), _vi("t", F, [2])], [_vi("o", F, [2])]
    )
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
        helper.make_node("SequenceMap", ["s", "t"], ["mapped"], body=body),
        helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0),
        helper.make_node("Optional", ["t"], ["opt"]),
        helper.make_node("OptionalHasElement", ["opt"], ["has"]),
        helper.make_node("OptionalGetElement", ["opt"], ["got"]),
    ]
    m = _model(
        nodes,
        [_vi("x", F, [3, 2]), _vi("t", F, [2])],
        [_vi("y", F, None), _vi("has", TensorProto.BOOL, None), _vi("got", F, None)],
    )
    feeds = {"x": RNG.standard_normal((3, 2)).astype(np.float32), "t": RNG.standard_normal(2).astype(np.float32)}
    _check(m, feeds)


def test_sequence_input_and_output_are_lists():
    seq_t = helper.make_tensor_sequence_value_info("s", F, None)
    out_t = helper.make_tensor_sequence_value_info("o", F, None)
    m = _model([helper.make_node("SequenceInsert", ["s", "x"], ["o"])], [seq_t, _vi("x", F, [2])], [out_t])
    with pytest.raises(NeedsCallInputs, match="'s'"):
        import_onnx(m)
    model = ember.compile(m)
    a, b, x = (RNG.standard_normal(n).astype(np.float32) for n in (3, 1, 2))
    (out,) = model(s=[a, b], x=x)
    assert isinstance(out, list) and len(out) == 3
    for g, w in zip(out, [a, b, x]):
        np.testing.assert_array_equal(g, w)
    (out,) = model(s=[], x=x)
    assert len(out) == 1


# ----------------------------------------------------------------------------- node cases
SEQUENCE_CASES = [
    "test_identity_sequence",
    "test_identity_opt",
    "test_if_seq",
    "test_if_opt",
    "test_loop13_seq",
    "test_loop16_seq_none",
    "test_optional_get_element_optional_sequence",
    "test_optional_get_element_sequence",
    "test_optional_has_element_empty_optional_input",
    "test_sequence_insert_at_back",
    "test_sequence_insert_at_front",
    "test_sequence_map_add_1_sequence_1_tensor",
    "test_sequence_map_add_1_sequence_1_tensor_expanded",
    "test_sequence_map_add_2_sequences",
    "test_sequence_map_add_2_sequences_expanded",
    "test_sequence_map_extract_shapes",
    "test_sequence_map_extract_shapes_expanded",
    "test_sequence_map_identity_1_sequence",
    "test_sequence_map_identity_1_sequence_1_tensor",
    "test_sequence_map_identity_1_sequence_1_tensor_expanded",
    "test_sequence_map_identity_1_sequence_expanded",
    "test_sequence_map_identity_2_sequences",
    "test_sequence_map_identity_2_sequences_expanded",
    "test_split_to_sequence_1",
    "test_split_to_sequence_2",
    "test_split_to_sequence_nokeepdims",
]


def _cases():
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in load_model_tests(kind="node") if c.name in SEQUENCE_CASES}


@pytest.fixture(scope="module")
def node_cases():
    return _cases()


@pytest.mark.parametrize("name", SEQUENCE_CASES)
def test_node_case_with_sequences(node_cases, name):
    """The node cases with sequence/optional inputs or outputs, compared as lists (the generic
    runner in node_cases.py converts them with np.asarray, which cannot hold them)."""
    case = node_cases[name]
    inits = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in inits]
    for inputs, expected in case.data_sets:
        feeds = dict(zip(names, inputs))
        # inputs with symbolic dimensions: the shapes of this data set
        shapes = {
            vi.name: np.shape(feeds[vi.name])
            for vi in case.model.graph.input
            if vi.type.HasField("tensor_type")
            and vi.name in feeds
            and any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
        }
        model = ember.compile(case.model, input_shapes=shapes or None)
        got = model(**feeds)
        assert len(got) == len(expected)
        for g, w in zip(got, expected):
            _same(g, w, case.rtol, case.atol)


def test_missing_sequence_length_error_names_the_input():
    seq_t = helper.make_tensor_sequence_value_info("s", F, None)
    m = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [seq_t], [_vi("n", TensorProto.INT64, None)])
    with pytest.raises(FrontendError, match="input 's' is a sequence"):
        import_onnx(m)
