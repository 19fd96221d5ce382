"""Host kernel for ``ImageDecoder`` (opset 20): an encoded image (JPEG, PNG, BMP, TIFF, WebP,
PNM, JPEG 2000 — whatever the installed Pillow reads) decoded into ``[height, width, channels]``
uint8 pixels. Its output shape is the image's, known only once it is decoded, so it runs on the
host before the compiled part of a model (:mod:`ember.host_stages`). Pillow is an optional
dependency (``pip install 'ember[image]'``); without it the operator says so when it runs."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import OpError

FORMATS = ("RGB", "BGR", "Grayscale")


def image_decoder(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX ImageDecoder: the 1-D uint8 ``encoded_stream`` decoded with Pillow into
    ``[H, W, 3]`` (``pixel_format`` ``RGB``, the default, or ``BGR``) or ``[H, W, 1]``
    (``Grayscale``: Pillow's ITU-R 601-2 luma). Raises OpError for bytes that are not an image,
    an image over Pillow's decompression-bomb limit, or a missing Pillow."""
    fmt = str(attrs.get("pixel_format", "RGB"))
    if fmt not in FORMATS:
        raise OpError(f"ImageDecoder: pixel_format={fmt!r} is not one of {', '.join(FORMATS)}")
    data = inputs[0]
    assert data is not None
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise OpError(f"ImageDecoder: the input must be a 1-D uint8 tensor of encoded bytes, got {data.dtype} "
                      f"of shape {list(data.shape)}")
    try:
        from PIL import Image
    except ImportError as exc:
        raise OpError("ImageDecoder decodes images with Pillow, which is not installed: pip install 'ember[image]' "
                      "(or pip install pillow)") from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data.tobytes())) as img:
                img.load()
                pixels = np.asarray(img.convert("L" if fmt == "Grayscale" else "RGB"))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise OpError(f"ImageDecoder: the image is too large to decode safely ({exc})") from exc
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow's errors for unreadable or truncated data
        raise OpError(f"ImageDecoder: the {data.size} input bytes are not an image Pillow can decode ({exc})") from exc
    if fmt == "Grayscale":
        pixels = pixels[..., None]
    elif fmt == "BGR":
        pixels = pixels[..., ::-1]
    return [np.ascontiguousarray(pixels, dtype=np.uint8)]
