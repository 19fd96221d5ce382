"""Host operators (ember/ops/strings.py, ember/ops/nms.py) and host stages (ember/host_stages.py):
each operator on fresh random inputs against ONNX Runtime and the ONNX reference implementation
(exact: text, counts, indices), then whole models whose text or detection ends run on the host
around a compiled middle, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the host operator tests build models with onnx")
ort = pytest.importorskip("onnxruntime", reason="the host operator tests compare with ONNX Runtime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

WORDS = ["Monday", "monday", "MONDAY", "tuesday", "Straße", "ÉCOLE", "école", "a", "", "b b", "x,y", "naïve", "ǅ"]


def _model(nodes, inputs, outputs, inits=(), opset=20, ml=False) -> bytes:
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    ops = [h.make_opsetid("", opset)] + ([h.make_opsetid("ai.onnx.ml", 4)] if ml else [])
    m = h.make_model(g, opset_imports=ops)
    m.ir_version = 9
    return m.SerializeToString()


def _words(rng, shape, extra=()) -> np.ndarray:
    pool = WORDS + list(extra)
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = str(rng.choice(pool)) if rng.random() < 0.8 else "".join(rng.choice(list("ab ,xyZ"), 5))
    return out


def _same(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype == object or got.dtype == object:
        assert got.dtype == object
        assert [str(v) for v in got.ravel()] == [v.decode() if isinstance(v, bytes) else str(v) for v in want.ravel()]
    else:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)


def _compare(onnx_bytes: bytes, feeds: dict, use_ort: bool = True, use_ref: bool = True,
             ref_rtol: float = 0.0) -> list:
    """ember's outputs, checked exactly against ONNX Runtime and the reference implementation
    (floats within ``ref_rtol`` of the reference, where it rounds differently)."""
    got = ember.compile(onnx_bytes)(**feeds)
    ref = ReferenceEvaluator(onnx.load_from_string(onnx_bytes)).run(None, feeds) if use_ref else []
    for g, w in zip(got, ref):
        if ref_rtol and np.asarray(w).dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=ref_rtol, atol=0)
        else:
            _same(g, w)
    if use_ort:
        sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
        for g, w in zip(got, sess.run(None, feeds)):
            _same(g, w)
    return got


def _normalizer(shape, **attrs) -> bytes:
    # locale C.UTF-8: ONNX Runtime's default, en_US.UTF-8, is not installed on every machine
    return _model([h.make_node("StringNormalizer", ["x"], ["y"], locale="C.UTF-8", **attrs)],
                  [h.make_tensor_value_info("x", T.STRING, list(shape))],
                  [h.make_tensor_value_info("y", T.STRING, None)])


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
def test_string_normalizer_against_onnx_runtime(rng, action, sensitive):
    """Non-ASCII text against ONNX Runtime, the runtime of record: the ONNX reference strips
    accents and splits at spaces, which the operator's specification does not say."""
    for shape in [(7,), (1, 9)]:
        x = _words(rng, shape)
        m = _normalizer(shape, case_change_action=action, is_case_sensitive=sensitive,
                        stopwords=["monday", "a", "", "straße"])
        got = ember.compile(m)(x=x)
        want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        _same(got[0], want[0])


@pytest.mark.parametrize("action", ["LOWER", "UPPER"])  # with NONE the reference matches stopwords case-sensitively
def test_string_normalizer_ascii_against_both(rng, action):
    x = np.array([str(rng.choice(["Monday", "monday", "tuesday", "A", "a", "b", "x y"])) for _ in range(9)],
                 dtype=object)
    _compare(_normalizer((9,), case_change_action=action, stopwords=["monday", "a"]), {"x": x})


def test_string_normalizer_everything_removed():
    (y,) = _compare(_normalizer((1, 3), stopwords=["a", "b"]), {"x": np.array([["a", "b", "a"]], dtype=object)})
    assert y.shape == (1, 1) and y[0, 0] == ""


@pytest.mark.parametrize("attrs", [{}, {"delimiter": ","}, {"delimiter": " ", "maxsplit": 1}, {"maxsplit": 0},
                                   {"delimiter": "b"}])
def test_string_split(rng, attrs):
    x = _words(rng, (3, 4), extra=["a,,b", "  lead trail  ", ",", "b b b b"])
    x[0, 0], x[2, 3] = "", "x y  z  "  # an empty string; a rest with trailing whitespace
    m = _model([h.make_node("StringSplit", ["x"], ["y", "n"], **attrs)],
               [h.make_tensor_value_info("x", T.STRING, [3, 4])],
               [h.make_tensor_value_info("y", T.STRING, None), h.make_tensor_value_info("n", T.INT64, None)])
    _compare(m, {"x": x}, use_ref=False)  # ONNX Runtime's answer; the reference differs on both cases above
    clean = np.vectorize(lambda w: w.rstrip() or "e", otypes=[object])(x)  # neither case: the reference agrees
    _compare(m, {"x": clean})


def test_string_concat_broadcast_and_equal(rng):
    x, w = _words(rng, (3, 1)), _words(rng, (4,))
    m = _model([h.make_node("StringConcat", ["x", "w"], ["y"]), h.make_node("Equal", ["y", "z"], ["e"])],
               [h.make_tensor_value_info("x", T.STRING, [3, 1]), h.make_tensor_value_info("w", T.STRING, [4]),
                h.make_tensor_value_info("z", T.STRING, [4])],
               [h.make_tensor_value_info("y", T.STRING, None), h.make_tensor_value_info("e", T.BOOL, None)])
    z = np.array([x[0, 0] + w[0], "no", x[0, 0] + w[2], ""], dtype=object)
    y, e = _compare(m, {"x": x, "w": w, "z": z})
    assert y.shape == (3, 4) and e[0, 0] and e[0, 2]


@pytest.mark.parametrize("pattern", [r"[a-z]+", r"(M|m)onday", r".*\s.*", r"[^,]*,[^,]*", r"", r"\w{2,4}"])
def test_regex_full_match(rng, pattern):
    x = _words(rng, (2, 6))
    m = _model([h.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)],
               [h.make_tensor_value_info("x", T.STRING, [2, 6])], [h.make_tensor_value_info("y", T.BOOL, None)])
    _compare(m, {"x": x})


def test_label_encoder_both_ways(rng):
    keys = ["Monday", "tuesday", "a", "Straße"]
    x = _words(rng, (2, 5))
    m = _model([h.make_node("LabelEncoder", ["x"], ["i"], domain="ai.onnx.ml", keys_strings=keys,
                            values_int64s=[3, 1, 4, 1], default_int64=-7),
                h.make_node("LabelEncoder", ["i"], ["s"], domain="ai.onnx.ml", keys_int64s=[1, 3, 4],
                            values_strings=["one", "three", "four"], default_string="?")],
               [h.make_tensor_value_info("x", T.STRING, [2, 5])],
               [h.make_tensor_value_info("i", T.INT64, None), h.make_tensor_value_info("s", T.STRING, None)], ml=True)
    _compare(m, {"x": x})


def _tfidf(pool, counts, indexes, mode, lo, hi, skip, weights=None, strings=False):
    attrs = dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip, ngram_counts=counts,
                 ngram_indexes=indexes)
    attrs["pool_strings" if strings else "pool_int64s"] = pool
    if weights is not None:
        attrs["weights"] = weights
    return h.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("lo,hi,skip", [(1, 1, 0), (1, 2, 0), (2, 2, 3), (1, 3, 2)])
def test_tfidf_vectorizer_ints(rng, mode, lo, hi, skip):
    # unigrams 2..6, bigrams (2,3) (3,4) (5,6) (2,2), trigrams (2,3,4) (4,5,6)
    pool = [2, 3, 4, 5, 6, 2, 3, 3, 4, 5, 6, 2, 2, 2, 3, 4, 4, 5, 6]
    counts = [0, 5, 13]
    indexes = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    weights = rng.uniform(0.5, 2.0, 11).round(3).tolist()
    node = _tfidf(pool, counts, indexes, mode, lo, hi, skip, weights if mode != "TF" else None)
    x = rng.integers(1, 8, size=(3, 17)).astype(np.int32)
    m = _model([node], [h.make_tensor_value_info("x", T.INT32, [3, 17])], [h.make_tensor_value_info("y", T.FLOAT,
                                                                                                      None)], opset=9)
    # exact to ONNX Runtime (float32 count x weight); the reference multiplies in float64: 1 ulp
    _compare(m, {"x": x}, ref_rtol=2**-23)


def test_tfidf_vectorizer_strings_and_shared_columns(rng):
    pool = ["monday", "a", "b b", "monday", "a", "a", "monday"]
    node = _tfidf(pool, [0, 3], [0, 1, 2, 2, 3], "TFIDF", 1, 2, 1, [1.0, 0.5, 2.0, 3.0, 1.5], strings=True)
    x = _words(rng, (13,), extra=["monday"] * 4)
    m = _model([node], [h.make_tensor_value_info("x", T.STRING, [13])], [h.make_tensor_value_info("y", T.FLOAT,
                                                                                                   None)], opset=9)
    # ONNX Runtime's answer: weights per pool n-gram, as specified (the reference reads them per column)
    _compare(m, {"x": x}, use_ref=False)
    node = _tfidf(pool, [0, 3], [0, 1, 2, 3, 4], "TFIDF", 1, 2, 1, [1.0, 0.5, 2.0, 3.0, 1.5], strings=True)
    m = _model([node], [h.make_tensor_value_info("x", T.STRING, [13])], [h.make_tensor_value_info("y", T.FLOAT,
                                                                                                   None)], opset=9)
    _compare(m, {"x": x}, ref_rtol=2**-23)  # one column per n-gram: the reference agrees


def _nms_inputs(rng, batches, classes, boxes):
    centers = rng.uniform(0, 10, size=(batches, boxes, 2))
    sizes = rng.uniform(0.5, 4, size=(batches, boxes, 2))
    corners = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=-1).astype(np.float32)
    flip = rng.random((batches, boxes)) < 0.3  # corners in either order
    corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    scores = rng.uniform(0, 1, size=(batches, classes, boxes)).astype(np.float32)
    scores[..., ::5] = 0.5  # ties
    return corners, scores


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("limit,iou,score", [(3, 0.5, None), (100, 0.3, 0.25), (0, 0.5, 0.0), (2, 0.0, 0.9)])
def test_non_max_suppression(rng, center, limit, iou, score):
    boxes, scores = _nms_inputs(rng, 2, 3, 23)
    if center:
        c = (boxes[..., :2] + boxes[..., 2:]) / 2
        boxes = np.concatenate([c[..., ::-1], np.abs(boxes[..., 2:] - boxes[..., :2])[..., ::-1]], axis=-1)
    names = ["boxes", "scores", "limit", "iou"] + (["score"] if score is not None else [])
    inits = [nh.from_array(np.array([limit], np.int64), "limit"), nh.from_array(np.array([iou], np.float32), "iou")]
    if score is not None:
        inits.append(nh.from_array(np.array([score], np.float32), "score"))
    m = _model([h.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)],
               [h.make_tensor_value_info("boxes", T.FLOAT, [2, 23, 4]),
                h.make_tensor_value_info("scores", T.FLOAT, [2, 3, 23])],
               [h.make_tensor_value_info("sel", T.INT64, None)], inits, opset=11)
    (sel,) = _compare(m, {"boxes": boxes.astype(np.float32), "scores": scores})
    assert sel.shape[1] == 3 and (limit or sel.shape[0] == 0)


# -- host stages around compiled code -----------------------------------------------------------
def _text_classifier(rng) -> tuple[bytes, np.ndarray]:
    """words -> normalise -> label-encode -> compiled MLP -> argmax -> label-decode."""
    vocab = ["monday", "tuesday", "straße", "école", "a"]
    w = rng.standard_normal((7, 3)).astype(np.float32)
    nodes = [
        h.make_node("StringNormalizer", ["words"], ["norm"], case_change_action="LOWER", stopwords=["b b"],
                    locale="C.UTF-8"),
        h.make_node("LabelEncoder", ["norm"], ["ids"], domain="ai.onnx.ml", keys_strings=vocab,
                    values_int64s=[0, 1, 2, 3, 4], default_int64=5),
        h.make_node("OneHot", ["ids", "depth", "onoff"], ["hot"]),
        h.make_node("ReduceSum", ["hot", "axes"], ["bag"], keepdims=0),
        h.make_node("MatMul", ["bag", "w"], ["logits"]),
        h.make_node("Relu", ["logits"], ["r"]),
        h.make_node("ArgMax", ["r"], ["cls"], axis=0, keepdims=1),
        h.make_node("LabelEncoder", ["cls"], ["label"], domain="ai.onnx.ml", keys_int64s=[0, 1, 2],
                    values_strings=["news", "sport", "weather"]),
    ]
    inits = [nh.from_array(np.array(7, np.int64), "depth"), nh.from_array(np.array([0, 1], np.float32), "onoff"),
             nh.from_array(np.array([0], np.int64), "axes"), nh.from_array(w, "w")]
    m = _model(nodes, [h.make_tensor_value_info("words", T.STRING, ["n"])],
               [h.make_tensor_value_info("label", T.STRING, None), h.make_tensor_value_info("r", T.FLOAT, None)],
               inits, ml=True)
    return m, w


def test_text_model_runs_host_compiled_host(rng):
    m, _ = _text_classifier(rng)
    model = ember.compile(m)
    assert not model.is_static
    stages = model._specializer
    kinds = [("compiled" if st.compiled else [h.op for h in st.host]) for st in stages.stages]
    assert kinds == [["StringNormalizer", "LabelEncoder"], "compiled", ["LabelEncoder"]]
    sess = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    for n in (6, 11, 6):
        x = _words(rng, (n,), extra=["Monday", "TUESDAY"])
        for _ in range(2):
            got = model(words=x)
            want = sess.run(None, {"words": x})
            _same(got[0], want[0])
            np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)  # float32 sums of 7 products
    # the middle is compiled once per length of its input (the word ids), reused on the second call
    assert 1 <= len(stages._cache) <= 3


def test_detection_post_processing_after_compiled_scores(rng):
    boxes, scores = _nms_inputs(rng, 1, 2, 37)
    logits = np.log(scores / (1 - scores)).astype(np.float32)
    nodes = [h.make_node("Sigmoid", ["logits"], ["s"]), h.make_node("Mul", ["boxes", "scale"], ["b"]),
             h.make_node("NonMaxSuppression", ["b", "s", "limit", "iou", "thr"], ["sel"])]
    inits = [nh.from_array(np.array([4], np.int64), "limit"), nh.from_array(np.array([0.4], np.float32), "iou"),
             nh.from_array(np.array([0.2], np.float32), "thr"), nh.from_array(np.array(2.0, np.float32), "scale")]
    m = _model(nodes, [h.make_tensor_value_info("boxes", T.FLOAT, [1, 37, 4]),
                       h.make_tensor_value_info("logits", T.FLOAT, [1, 2, 37])],
               [h.make_tensor_value_info("sel", T.INT64, None)], inits, opset=13)
    _compare(m, {"boxes": boxes, "logits": logits})


def test_detector_compiled_host_compiled(rng):
    """Scores from a compiled part, boxes kept on the host, then compiled again: the kept boxes
    gathered and scaled (the selection's length changes from call to call)."""
    nodes = [h.make_node("Sigmoid", ["logits"], ["s"]),
             h.make_node("NonMaxSuppression", ["boxes", "s", "limit", "iou", "thr"], ["sel"]),
             h.make_node("Gather", ["sel", "col"], ["idx2"], axis=1),
             h.make_node("Squeeze", ["idx2", "one"], ["idx"]),
             h.make_node("Squeeze", ["boxes", "zero"], ["b2"]),
             h.make_node("Gather", ["b2", "idx"], ["kept"], axis=0),
             h.make_node("Mul", ["kept", "scale"], ["y"])]
    inits = [nh.from_array(np.array([6], np.int64), "limit"), nh.from_array(np.array([0.4], np.float32), "iou"),
             nh.from_array(np.array([0.3], np.float32), "thr"), nh.from_array(np.array([2], np.int64), "col"),
             nh.from_array(np.array([0], np.int64), "zero"), nh.from_array(np.array([1], np.int64), "one"),
             nh.from_array(np.array(4.0, np.float32), "scale")]
    m = _model(nodes, [h.make_tensor_value_info("boxes", T.FLOAT, [1, 29, 4]),
                       h.make_tensor_value_info("logits", T.FLOAT, [1, 1, 29])],
               [h.make_tensor_value_info("y", T.FLOAT, None)], inits, opset=13)
    model = ember.compile(m)
    kinds = [("compiled" if st.compiled else [x.op for x in st.host]) for st in model._specializer.stages]
    assert kinds == ["compiled", ["NonMaxSuppression"], "compiled"]
    sess = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    for _ in range(3):
        boxes, scores = _nms_inputs(rng, 1, 1, 29)
        logits = rng.standard_normal((1, 1, 29)).astype(np.float32) * 2
        (y,) = model(boxes=boxes, logits=logits)
        (want,) = sess.run(None, {"boxes": boxes, "logits": logits})
        np.testing.assert_array_equal(y, want)  # a gather and one float32 product
    assert model.to("cpu") is model and all(m.device == ember.cpu(0) for m in model._specializer._cache.values())


def test_string_input_of_an_operator_without_a_host_kernel():
    m = _model([h.make_node("ReverseSequence", ["x", "n"], ["y"], name="rev")],
               [h.make_tensor_value_info("x", T.STRING, [2, 3]), h.make_tensor_value_info("n", T.INT64, [3])],
               [h.make_tensor_value_info("y", T.STRING, None)])
    with pytest.raises(ember.GraphError, match="ReverseSequence node 'rev' reads the string tensor 'x'"):
        ember.compile(m)


def test_bad_attributes_name_the_operator(rng):
    m = _model([h.make_node("StringNormalizer", ["x"], ["y"], case_change_action="TITLE")],
               [h.make_tensor_value_info("x", T.STRING, [2])], [h.make_tensor_value_info("y", T.STRING, None)])
    with pytest.raises(ember.OpError, match="StringNormalizer: case_change_action='TITLE'"):
        ember.compile(m)(x=np.array(["a", "b"], dtype=object))
    m = _model([h.make_node("RegexFullMatch", ["x"], ["y"], pattern="(unclosed")],
               [h.make_tensor_value_info("x", T.STRING, [2])], [h.make_tensor_value_info("y", T.BOOL, None)])
    with pytest.raises(ember.OpError, match="not a valid regular expression"):
        ember.compile(m)(x=np.array(["a", "b"], dtype=object))
    m = _model([h.make_node("StringConcat", ["x", "x"], ["y"])], [h.make_tensor_value_info("x", T.STRING, [2])],
               [h.make_tensor_value_info("y", T.STRING, None)])
    with pytest.raises(ember.ArgumentError, match="input 'x': element 1 is a int"):  # checked on the way in
        ember.compile(m)(x=np.array(["a", 3], dtype=object))


def test_host_operator_lists_agree():
    from ember import host_stages
    from ember.frontend import host_scan

    assert set(host_stages.ALWAYS_HOST) == host_scan.ALWAYS_HOST
