"""Host kernel for ``NonMaxSuppression`` in NumPy: its output length is the number of boxes kept,
which only the scores decide, so it runs on the host after the compiled part of a model
(:mod:`ember.host_stages`), like a detection model's post-processing in ONNX Runtime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import OpError


def _scalar(x: np.ndarray | None, what: str, default: Any, kind: type) -> Any:
    if x is None:
        return default
    arr = np.asarray(x).reshape(-1)
    if arr.size != 1:
        raise OpError(f"NonMaxSuppression: {what} must hold one value, got shape {list(np.shape(x))}")
    return kind(arr[0])


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """``[..., 4]`` boxes as ``(y_min, x_min, y_max, x_max)`` in float64."""
    b = boxes.astype(np.float64)
    if center_point_box:
        xc, yc, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _iou(a: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Intersection over union of box ``a`` with each of ``others`` (0 where a union is empty)."""
    h = np.clip(np.minimum(a[2], others[:, 2]) - np.maximum(a[0], others[:, 0]), 0, None)
    w = np.clip(np.minimum(a[3], others[:, 3]) - np.maximum(a[1], others[:, 1]), 0, None)
    inter = h * w
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area_a + areas - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((union > 0) & (area_a > 0) & (areas > 0), inter / np.where(union > 0, union, 1), 0.0)


def non_max_suppression(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX NonMaxSuppression: for each batch and class, boxes in order of decreasing score
    (ties: the lower box index first), those not above ``score_threshold`` (when given) left
    out, each kept unless its IoU with a box already kept is above ``iou_threshold``, at most
    ``max_output_boxes_per_class`` of them (0 or absent: none). Returns ``[kept, 3]`` int64
    rows ``(batch, class, box)``, batches then classes in order, each class's boxes by score."""
    boxes, scores = inputs[0], inputs[1]
    assert boxes is not None and scores is not None
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise OpError(f"NonMaxSuppression: boxes must be [batch, boxes, 4], got shape {list(boxes.shape)}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise OpError(f"NonMaxSuppression: scores must be [batch, classes, boxes] = [{boxes.shape[0]}, C, "
                      f"{boxes.shape[1]}], got shape {list(scores.shape)}")
    limit = _scalar(inputs[2] if len(inputs) > 2 else None, "max_output_boxes_per_class", 0, int)
    iou_threshold = _scalar(inputs[3] if len(inputs) > 3 else None, "iou_threshold", 0.0, float)
    score_threshold = _scalar(inputs[4] if len(inputs) > 4 else None, "score_threshold", None, float)
    cpb = int(attrs.get("center_point_box", 0))
    if cpb not in (0, 1):
        raise OpError(f"NonMaxSuppression: center_point_box={cpb} is not 0 or 1")
    corners = _corners(boxes, cpb)
    rows: list[tuple[int, int, int]] = []
    if limit > 0:
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                s = scores[b, c].astype(np.float64)
                order = np.argsort(-s, kind="stable")
                if score_threshold is not None:
                    order = order[s[order] > score_threshold]
                kept: list[int] = []
                for i in order.tolist():
                    if len(kept) == limit:
                        break
                    if kept and np.any(_iou(corners[b, i], corners[b, kept]) > iou_threshold):
                        continue
                    kept.append(i)
                rows += [(b, c, i) for i in kept]
    return [np.array(rows, dtype=np.int64).reshape(-1, 3)]
