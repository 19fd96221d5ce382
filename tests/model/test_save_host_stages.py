"""Saving and loading models with host stages (ember/model/format.py, ``ember-model/3``): the
validated ONNX model, the stage split as data and the compiled variants round-trip; a loaded
model gives the same outputs as the one saved (exactly: same kernels, same host code), uses the
saved variants and compiles new ones on demand; ``rebuild=True`` compiles from the source; every
tampered file is a ModelFormatError naming the problem."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the host-stage saving tests build ONNX models")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

VOCAB = ["monday", "tuesday", "straße", "école", "a"]


def _text_model(rng) -> bytes:
    """words -> lower case -> ids (host) -> bag of words @ w -> relu -> argmax (compiled) ->
    label, joined to a string initializer and reshaped (host)."""
    nodes = [
        h.make_node("StringNormalizer", ["words"], ["norm"], case_change_action="LOWER"),
        h.make_node("LabelEncoder", ["norm"], ["ids"], domain="ai.onnx.ml", keys_strings=VOCAB,
                    values_int64s=[0, 1, 2, 3, 4], default_int64=5),
        h.make_node("OneHot", ["ids", "depth", "onoff"], ["hot"]),
        h.make_node("ReduceSum", ["hot", "axes"], ["bag"], keepdims=0),
        h.make_node("MatMul", ["bag", "w"], ["logits"]),
        h.make_node("Relu", ["logits"], ["r"]),
        h.make_node("ArgMax", ["r"], ["cls"], axis=0, keepdims=1),
        h.make_node("LabelEncoder", ["cls"], ["label"], domain="ai.onnx.ml", keys_int64s=[0, 1, 2],
                    values_strings=["news", "sport", "weather"]),
        h.make_node("Concat", ["label", "prefix"], ["both"], axis=0),
        h.make_node("Reshape", ["both", "shape"], ["out"]),
    ]
    inits = [nh.from_array(np.array(7, np.int64), "depth"), nh.from_array(np.array([0, 1], np.float32), "onoff"),
             nh.from_array(np.array([0], np.int64), "axes"),
             nh.from_array(rng.standard_normal((7, 3)).astype(np.float32), "w"),
             nh.from_array(np.array(["topic:"], dtype=object), "prefix"),
             nh.from_array(np.array([2, 1], np.int64), "shape")]
    g = h.make_graph(nodes, "text", [h.make_tensor_value_info("words", T.STRING, ["n"])],
                     [h.make_tensor_value_info("out", T.STRING, None), h.make_tensor_value_info("r", T.FLOAT, None)],
                     inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20), h.make_opsetid("ai.onnx.ml", 4)])
    m.ir_version = 9
    return m.SerializeToString()


def _words(rng, n: int) -> np.ndarray:
    pool = VOCAB + ["Monday", "TUESDAY", "ÉCOLE", "other", ""]
    return np.array([str(rng.choice(pool)) for _ in range(n)], dtype=object)


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.ravel().tolist() == y.ravel().tolist()  # exact: the same kernels and host code


@pytest.fixture
def saved(rng, tmp_path):
    """A text model called at two lengths (two compiled variants of its middle), saved."""
    model = ember.compile(_text_model(rng))
    calls = [_words(rng, 6), _words(rng, 13)]
    outs = [model(words=x) for x in calls]
    path = tmp_path / "text.ember"
    model.save(path)
    return model, path, calls, outs


def test_round_trip_uses_the_saved_variants_and_compiles_new_ones(rng, saved):
    model, path, calls, outs = saved
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        desc = json.loads(z.read("host.json"))
    assert manifest["format"] == "ember-model/3"
    assert [st["compiled"] for st in desc["stages"]] == [False, True, False]
    assert len(desc["variants"]) == 2
    assert all(v["shared"].get("w") for v in desc["variants"])  # the weight stored once, in shared.npz
    loaded = ember.load(path)
    assert [s.dtype for s in loaded.inputs] == ["string"]
    cache = loaded._specializer._cache
    before = dict(cache)
    assert len(before) == 2
    for x, want in zip(calls, outs):
        _same(loaded(words=x), want)
    assert cache == before  # answered by the variants from the file: nothing compiled
    x = _words(rng, 4)
    _same(loaded(words=x), model(words=x))  # a new length compiles a new variant after loading
    assert len(cache) == 3
    loaded.save(path)  # a loaded model saves again, with the variant it compiled since
    assert len(ember.load(path)._specializer._cache) == 3
    rebuilt = ember.load(path, rebuild=True)  # compiles the embedded source, none of the file's code
    assert len(rebuilt._specializer._cache) == 0
    _same(rebuilt(words=calls[0]), outs[0])


def test_host_only_and_detector_models_round_trip(rng, tmp_path):
    """No compiled stage at all (text in, text out); and compiled -> host -> compiled."""
    g = h.make_graph([h.make_node("StringNormalizer", ["x"], ["u"], case_change_action="UPPER"),
                      h.make_node("Gather", ["u", "i"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.STRING, [5])], [h.make_tensor_value_info("y", T.STRING, None)],
                     [nh.from_array(np.array([4, 0, -2], np.int64), "i")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    model = ember.compile(m.SerializeToString())
    model.save(tmp_path / "host.ember")
    x = _words(rng, 5)
    _same(ember.load(tmp_path / "host.ember")(x=x), model(x=x))

    nodes = [h.make_node("Sigmoid", ["logits"], ["s"]),
             h.make_node("NonMaxSuppression", ["boxes", "s", "limit", "iou", "thr"], ["sel"]),
             h.make_node("Gather", ["sel", "col"], ["idx2"], axis=1), h.make_node("Squeeze", ["idx2", "one"], ["idx"]),
             h.make_node("Squeeze", ["boxes", "zero"], ["b2"]), h.make_node("Gather", ["b2", "idx"], ["kept"], axis=0),
             h.make_node("Mul", ["kept", "scale"], ["y"])]
    inits = [nh.from_array(np.array([6], np.int64), "limit"), nh.from_array(np.array([0.4], np.float32), "iou"),
             nh.from_array(np.array([0.3], np.float32), "thr"), nh.from_array(np.array([2], np.int64), "col"),
             nh.from_array(np.array([0], np.int64), "zero"), nh.from_array(np.array([1], np.int64), "one"),
             nh.from_array(np.array(4.0, np.float32), "scale")]
    g = h.make_graph(nodes, "det", [h.make_tensor_value_info("boxes", T.FLOAT, [1, 29, 4]),
                                    h.make_tensor_value_info("logits", T.FLOAT, [1, 1, 29])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    model = ember.compile(m.SerializeToString())
    corners = rng.random((1, 29, 2)).astype(np.float32)
    feeds = {"boxes": np.concatenate([corners, corners + rng.random((1, 29, 2)).astype(np.float32)], axis=2),
             "logits": rng.standard_normal((1, 1, 29)).astype(np.float32)}
    want = model(**feeds)
    model.save(tmp_path / "det.ember")
    loaded = ember.load(tmp_path / "det.ember")
    assert {k[0] for k in loaded._specializer._cache} == {0, 2}  # both compiled stages' variants came back
    _same(loaded(**feeds), want)


def test_static_models_are_still_written_as_format_2(rng, tmp_path):
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    ember.compile(m.SerializeToString()).save(tmp_path / "relu.ember")
    with zipfile.ZipFile(tmp_path / "relu.ember") as z:
        assert json.loads(z.read("manifest.json"))["format"] == "ember-model/2"


def _rewrite(path, change) -> None:
    """Apply ``change`` (members dict -> None, in place) to a saved file, with the manifest's
    sizes and digests recomputed (so only ember's own checks can catch the edit)."""
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        members = {n: z.read(n) for n in z.namelist() if n != "manifest.json"}
    change(members, manifest)
    manifest["members"] = {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in members.items()}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in members.items():
            z.writestr(n, d)
    path.write_bytes(buf.getvalue())


def _edit_host(fn):
    def change(members, manifest):
        desc = json.loads(members["host.json"])
        fn(desc)
        members["host.json"] = json.dumps(desc).encode()
    return change


def _swap_nodes(d):
    d["stages"][0]["nodes"], d["stages"][2]["nodes"] = d["stages"][2]["nodes"], d["stages"][0]["nodes"]


@pytest.mark.parametrize("change, message", [
    (_edit_host(_swap_nodes), "differ from those of its ONNX source"),
    (_edit_host(lambda d: d["stages"][1].update(nodes=["2"])), "host.json is not what ember writes"),
    (_edit_host(lambda d: d["variants"][0].update(stage=0)), "host.json is not what ember writes"),
    (_edit_host(lambda d: d["variants"][0].update(member="../x")), "host.json is not what ember writes"),
    (_edit_host(lambda d: d.update(output_names=["out"])), "differ from those of its ONNX source"),
    (_edit_host(lambda d: d.update(target="cuda")), "compiled for 'llvm'"),
    (lambda m, _: m.update({"host.json": b"{not json"}), "host.json is unreadable"),
    (lambda m, _: m.pop("source/model.onnx"), "needs its source"),
    (lambda m, _: m.update({"source/model.onnx": b"\x08\x07garbage"}), "ONNX source"),
    (lambda m, _: m.pop("host.json"), "needs host.json"),
    (lambda m, man: man.update(format="ember-model/2"), "has no host.json"),
    (lambda m, man: man.update(format="ember-model/9"), "this ember reads"),
    (lambda m, _: m.update({"variants/0.ember": m["variants/0.ember"][:-40]}), "variant 0"),
    (_edit_host(lambda d: d["variants"][0]["shared"].update(w="s99")), "host.json is not what ember writes"),
    (lambda m, _: m.pop("shared.npz"), "host.json is not what ember writes"),
    (lambda m, _: m.update({"source/options.json": b'{"target": "cuda"}'}), "names target 'cuda'"),
    (lambda m, _: m.update({"source/options.json": b'{"input_shapes": {"words": "x"}}'}), "not a valid model"),
    (lambda m, _: m.update({"source/options.json": b'{"input_shapes": [1]}'}), "not a valid model"),
])
def test_tampered_files_are_model_format_errors(saved, change, message):
    _, path, _, _ = saved
    _rewrite(path, change)
    with pytest.raises(ember.ModelFormatError, match=message):
        ember.load(path)


def test_a_variant_of_another_stage_is_refused(rng, saved, tmp_path):
    """A variant moved to a stage whose inputs it does not take (here: a stage of a model the
    variant does not belong to) is refused before any call."""
    _, path, _, _ = saved

    def change(members, manifest):
        desc = json.loads(members["host.json"])
        desc["stages"].append({"compiled": True, "nodes": []})
        desc["variants"][0]["stage"] = 3
        members["host.json"] = json.dumps(desc).encode()

    _rewrite(path, change)
    with pytest.raises(ember.ModelFormatError, match="differ|stage 3"):
        ember.load(path)


def test_a_flipped_byte_fails_the_digest(saved):
    _, path, _, _ = saved
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("host.json")
    data[info.header_offset + 30 + len(info.filename) + 5] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(ember.ModelFormatError):
        ember.load(path)
