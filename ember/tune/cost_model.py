"""Cost models that rank unmeasured configurations, trained online on the measurements.

Features (:func:`features`) come from the configuration alone (cheap: no build): per knob, a
split's factors as ``log2``, a number as itself (and its ``log2``), a boolean as 0/1, any other
value one-hot over the knob's candidates, a loop order's positions, an annotation's codes; plus
the product of the innermost split factors (the register tile's size).

The target of training is the *normalized throughput* of each measured point: the best time of
its task divided by its time (1 for the best, near 0 for slow points; 0 for invalid ones), so
one model can rank points of a task whatever its absolute speed.

* :class:`XGBModel` — gradient-boosted trees (``xgboost``, the ``xgboost-cpu`` wheel of the
  ``ember[tune]`` extra), as TVM's AutoTVM/Ansor cost models.
* :class:`NumpyModel` — kernel ridge regression with an RBF kernel on standardized features:
  no dependency, exact for the few hundred points one task gets.

:func:`make_model` picks XGBoost when it is installed, else NumPy (``docs/tuning.md`` gives the
comparison that measured them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..strategy import ConfigEntity, ConfigSpace
from ..strategy.space import AnnotateEntity, KnobEntity, ReorderEntity, SplitEntity

_ANN = {"none": 0.0, "unroll": 1.0, "vec": 2.0, "parallel": 3.0}


def features(space: ConfigSpace, cfg: ConfigEntity) -> np.ndarray:
    """The feature vector of ``cfg`` (a point of ``space``); every point of one space has the
    same length."""
    out: list[float] = []
    inner = 1.0
    for name, knob in space.knobs.items():
        v = cfg[name]
        if isinstance(v, SplitEntity):
            out.extend(math.log2(max(1, s)) for s in v.size)
            inner *= float(v.size[-1])
        elif isinstance(v, KnobEntity):
            if isinstance(v.val, bool):
                out.append(float(v.val))
            elif isinstance(v.val, (int, float)):
                out.extend((float(v.val), math.log2(max(1e-9, abs(float(v.val))) + 1.0)))
            else:
                out.extend(1.0 if c == v else 0.0 for c in knob.candidates)
        elif isinstance(v, ReorderEntity):
            out.extend(float(p) for p in v.perm)
        elif isinstance(v, AnnotateEntity):
            out.extend(_ANN.get(a, 0.0) for a in v.anns)
    out.append(math.log2(max(1.0, inner)))
    return np.asarray(out, dtype=np.float64)


class CostModel(Protocol):
    """Fit on (features, normalized throughput); predict a score, higher is faster."""

    name: str

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        """Train on rows ``x`` with targets ``y``."""

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Scores of rows ``x``."""


class NumpyModel:
    """Kernel ridge regression, RBF kernel of bandwidth ``gamma`` (on standardized features)."""

    name = "numpy-krr"

    def __init__(self, gamma: float = 0.5, ridge: float = 1e-2):
        self.gamma, self.ridge = gamma, ridge
        self._x: np.ndarray | None = None
        self._alpha: np.ndarray | None = None
        self._mean = 0.0

    def _k(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
        return np.exp(-self.gamma * np.maximum(d, 0.0) / max(1, a.shape[1]))

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        """Solve ``(K + ridge I) alpha = y - mean``."""
        self._mu, self._sd = x.mean(0), x.std(0) + 1e-9
        xs = (x - self._mu) / self._sd
        self._mean = float(y.mean())
        k = self._k(xs, xs) + self.ridge * np.eye(len(xs))
        self._alpha = np.linalg.solve(k, y - self._mean)
        self._x = xs

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The regression's value at each row (the mean before any fit)."""
        if self._x is None or self._alpha is None:
            return np.zeros(len(x))
        return self._mean + self._k((x - self._mu) / self._sd, self._x) @ self._alpha


class XGBModel:
    """Gradient-boosted regression trees (``xgboost``)."""

    name = "xgboost"

    def __init__(self, rounds: int = 60, seed: int = 0):
        import xgboost

        self.xgb = xgboost
        self.rounds, self.seed = rounds, seed
        self._booster = None

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        """Train ``rounds`` boosting rounds from scratch on the data so far."""
        params = {"max_depth": 6, "eta": 0.2, "subsample": 1.0, "min_child_weight": 1, "objective": "reg:squarederror",
                  "nthread": 1, "seed": self.seed, "verbosity": 0}
        self._booster = self.xgb.train(params, self.xgb.DMatrix(x, label=y), num_boost_round=self.rounds)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The trees' prediction for each row (zeros before any fit)."""
        if self._booster is None:
            return np.zeros(len(x))
        return np.asarray(self._booster.predict(self.xgb.DMatrix(x)))


def xgboost_available() -> bool:
    """True when ``xgboost`` can be imported."""
    import importlib.util

    return importlib.util.find_spec("xgboost") is not None


def make_model(kind: str = "auto", seed: int = 0) -> CostModel:
    """``"xgboost"``, ``"numpy"`` or ``"auto"`` (XGBoost when installed, else NumPy)."""
    if kind == "xgboost" or (kind == "auto" and xgboost_available()):
        return XGBModel(seed=seed)
    return NumpyModel()


def rank_quality(model: CostModel, x: np.ndarray, y: np.ndarray, seed: int = 0, folds: int = 4) -> float:
    """Mean Spearman rank correlation between predictions and targets over ``folds``-fold cross
    validation (how well ``model`` orders points it has not seen)."""
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(x))
    scores = []
    for f in range(folds):
        test = idx[f::folds]
        train = np.setdiff1d(idx, test)
        if len(test) < 3 or len(train) < 3:
            continue
        model.fit(x[train], y[train])
        p = model.predict(x[test])
        rp, ry = np.argsort(np.argsort(p)), np.argsort(np.argsort(y[test]))
        if rp.std() > 0 and ry.std() > 0:
            scores.append(float(np.corrcoef(rp, ry)[0, 1]))
    return float(np.mean(scores)) if scores else 0.0


def normalized_throughput(seconds: Sequence[float | None]) -> np.ndarray:
    """``best / t`` per entry (0 for an invalid one)."""
    valid = [s for s in seconds if s]
    best = min(valid) if valid else 1.0
    return np.asarray([best / s if s else 0.0 for s in seconds], dtype=np.float64)
