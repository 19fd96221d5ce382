"""ImageDecoder on the host (ember/ops/image_decoder.py, Pillow): lossless formats give back the
exact pixels that were encoded, JPEG gives what the ONNX reference decodes, the pixel formats,
a compiled preprocessing after the decoder, and the errors (bytes that are no image, no Pillow)."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import ember

onnx = pytest.importorskip("onnx", reason="the ImageDecoder tests build models with onnx")
Image = pytest.importorskip("PIL.Image", reason="ImageDecoder decodes with Pillow (pip install 'ember[image]')")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _decoder(fmt: str = "RGB", after=(), outputs=None, inits=()) -> bytes:
    nodes = [h.make_node("ImageDecoder", ["data"], ["img"], pixel_format=fmt), *after]
    outs = outputs or [h.make_tensor_value_info("img", T.UINT8, None)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("data", T.UINT8, ["n"])], outs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    return m.SerializeToString()


def _encode(pixels: np.ndarray, fmt: str, **kw) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **kw)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


@pytest.mark.parametrize("fmt,kw", [("PNG", {}), ("BMP", {}), ("TIFF", {}), ("WEBP", {"lossless": True}),
                                    ("PPM", {})])
def test_lossless_formats_give_the_pixels_back(rng, fmt, kw):
    pixels = rng.integers(0, 256, size=(37, 53, 3), dtype=np.uint8)
    data = _encode(pixels, fmt, **kw)
    model = ember.compile(_decoder())
    (img,) = model(data)
    np.testing.assert_array_equal(img, pixels)
    (bgr,) = ember.compile(_decoder("BGR"))(data)
    np.testing.assert_array_equal(bgr, pixels[..., ::-1])
    (gray,) = ember.compile(_decoder("Grayscale"))(data)
    assert gray.shape == (37, 53, 1) and gray.dtype == np.uint8
    np.testing.assert_array_equal(gray[..., 0], np.asarray(Image.fromarray(pixels).convert("L")))


def test_jpeg_as_the_reference_decodes_it(rng):
    pixels = (rng.random((29, 31, 3)) * 255).astype(np.uint8)
    data = _encode(pixels, "JPEG", quality=85)
    for fmt in ("RGB", "BGR", "Grayscale"):
        m = _decoder(fmt)
        (got,) = ember.compile(m)(data)
        (want,) = ReferenceEvaluator(onnx.load_from_string(m)).run(None, {"data": data})
        np.testing.assert_array_equal(got, want)


def test_images_of_different_sizes_through_a_compiled_normalization(rng):
    mean = np.array([0.485, 0.456, 0.406], np.float32) * 255
    after = [h.make_node("Cast", ["img"], ["f"], to=T.FLOAT), h.make_node("Sub", ["f", "mean"], ["y"])]
    m = _decoder(after=after, outputs=[h.make_tensor_value_info("y", T.FLOAT, None)],
                 inits=[nh.from_array(mean, "mean")])
    model = ember.compile(m)
    for hw in ((16, 20), (33, 7), (16, 20)):
        pixels = rng.integers(0, 256, size=hw + (3,), dtype=np.uint8)
        (y,) = model(_encode(pixels, "PNG"))
        np.testing.assert_array_equal(y, pixels.astype(np.float32) - mean)  # one float32 subtraction
    assert len(model._specializer._cache) == 2  # the compiled part, once per image size


def test_bytes_that_are_not_an_image(rng):
    model = ember.compile(_decoder())
    with pytest.raises(ember.OpError, match="ImageDecoder: the 100 input bytes are not an image"):
        model(rng.integers(0, 256, size=100, dtype=np.uint8))
    data = _encode(rng.integers(0, 256, size=(20, 20, 3), dtype=np.uint8), "PNG")
    with pytest.raises(ember.OpError, match="ImageDecoder: .* not an image Pillow can decode"):
        model(data[: len(data) // 2])  # truncated


def test_without_pillow_the_operator_says_what_to_install(rng, monkeypatch):
    data = _encode(rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8), "PNG")
    model = ember.compile(_decoder())
    monkeypatch.setitem(sys.modules, "PIL", None)  # as on a machine without Pillow: importing it fails
    with pytest.raises(ember.OpError, match=r"Pillow, which is not installed: pip install 'ember\[image\]'"):
        model(data)
