"""Which ONNX models need host stages (:mod:`ember.host_stages`): a quick look at the operators and
declared types, made once a model is loaded and validated, before it is imported.

A model needs them when it has a string tensor among its declared inputs, outputs, initializers
or value infos, an operator that always runs on the host (text, ``TfIdfVectorizer``,
``NonMaxSuppression``, random draws, ``ImageDecoder``), a ``LabelEncoder`` with string keys or values, a ``Cast``
to or from text, or a ``Dropout`` whose ``training_mode`` input is not a constant false.
:func:`check_host_stages` then raises :class:`NeedsHostStages` carrying the loaded model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FrontendError

#: Operators that always run on the host (ember.host_stages holds their kernels).
ALWAYS_HOST = frozenset({
    "StringNormalizer", "StringSplit", "StringConcat", "RegexFullMatch", "TfIdfVectorizer", "NonMaxSuppression",
    "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli", "Multinomial",
    "ImageDecoder",
})
STRING = 8  # onnx.TensorProto.STRING


class NeedsHostStages(FrontendError):
    """The model has operators that run on the host around its compiled part; ``model`` is the
    loaded, validated ModelProto."""

    def __init__(self, model: Any):
        super().__init__("the model has operators that run on the host (strings, random draws, "
                         "NonMaxSuppression, TfIdfVectorizer)")
        self.model = model


def training_dropout(node: Any, inits: dict[str, Any]) -> bool:
    """True for a Dropout whose training_mode input is given and not a constant false."""
    if node.op_type != "Dropout" or len(node.input) < 3 or not node.input[2]:
        return False
    t = inits.get(node.input[2])
    if t is None:
        return True
    from onnx import numpy_helper

    return bool(np.asarray(numpy_helper.to_array(t)).reshape(-1)[:1].any())


def _string_attr(node: Any) -> bool:
    for a in node.attribute:
        if a.name.endswith("_strings") or a.name == "default_string":
            return True
        if a.name.endswith("_tensor") and a.t.data_type == STRING:
            return True
        if node.op_type == "Cast" and a.name == "to" and a.i == STRING:
            return True
    return False


def needs_host_stages(model: Any) -> bool:
    """True when ``model`` (a ModelProto) has an operator or a tensor that runs on the host."""
    g = model.graph
    if any(t.data_type == STRING for t in g.initializer):
        return True
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == STRING:
            return True
    inits = {t.name: t for t in g.initializer}
    for n in g.node:
        if n.domain not in ("", "ai.onnx", "ai.onnx.ml"):
            continue
        if n.op_type in ALWAYS_HOST or training_dropout(n, inits) or _string_attr(n):
            return True
    return False


def check_host_stages(model: Any) -> None:
    """Raise :class:`NeedsHostStages` when the model needs host stages."""
    if needs_host_stages(model):
        raise NeedsHostStages(model)
