"""Classical machine-learning operators of the ``ai.onnx.ml`` domain whose output shapes are
static: ``Binarizer``, ``ArrayFeatureExtractor``, ``Normalizer``, ``Scaler``,
``OneHotEncoder`` and ``LabelEncoder`` (numeric keys and values), ``Imputer``, ``TreeEnsemble``
(opset 5 of the domain) and the deprecated ``TreeEnsembleRegressor`` (both lowered through one
normal form of the trees).

Lookup tables (label maps, categories, trees) are attributes, so they become chains of selects
in the kernel; a tree is one nested select per sample (every branch is evaluated, which is
cheap for the small trees these models hold). String tensors are not supported by ember.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import te
from ..ir import expr as E
from ..te import Tensor
from .registry import OpContext, register
from .util import cast, compute, const_like, dtype_of, shape, uname

_ML = "ai.onnx.ml"
_NUMERIC = ("float32", "float64", "int64", "int32")


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _f64(v: float) -> E.PrimExpr:
    return E.const(float(v), "float64")


def _check_numeric(ctx: OpContext, x: Tensor, allowed: tuple[str, ...] = _NUMERIC) -> str:
    dt = dtype_of(x)
    if dt not in allowed:
        raise ctx.fail(f"input has element type {dt}; this operator takes {', '.join(allowed)}")
    return dt


def _per_feature(values: list[float], j: Any, dt: str) -> E.PrimExpr:
    """``values[j]`` (or ``values[0]`` when there is one value) as a select chain."""
    out = const_like(values[-1], dt)
    for k in range(len(values) - 2, -1, -1):
        out = te.if_then_else(j == k, const_like(values[k], dt), out)
    return out


@register(f"{_ML}.Binarizer")
def binarizer(ctx: OpContext, x: Tensor) -> Tensor:
    """ai.onnx.ml Binarizer: 1 where ``x > threshold``, else 0, in x's type."""
    dt = _check_numeric(ctx, x)
    thr = float(ctx.attr("threshold", 0.0))
    return compute(
        shape(x),
        lambda *i: te.if_then_else(cast(x[i], "float64") > _f64(thr), const_like(1, dt), const_like(0, dt)),
        name=uname("binarizer"),
    )


@register(f"{_ML}.ArrayFeatureExtractor")
def array_feature_extractor(ctx: OpContext, x: Tensor, idx: Tensor) -> Tensor:
    """ai.onnx.ml ArrayFeatureExtractor: ``x[..., indices]`` along the last axis, the indices
    flattened (a 1-D ``x`` gives one row, as ONNX Runtime does). Negative indices count from the
    end; indices out of range are clamped."""
    xs = shape(x)
    if dtype_of(idx) not in ("int64", "int32"):
        raise ctx.fail(f"indices have element type {dtype_of(idx)}; they must be int64")
    if not xs:
        raise ctx.fail("X must have at least one dimension")
    ish = shape(idx)
    k = int(np.prod(ish)) if ish else 1
    F = xs[-1]
    out = (1, k) if len(xs) == 1 else xs[:-1] + (k,)

    def body(*i: Any) -> Any:
        rest, j = i[:-1], i[-1]
        mi = []
        lin = j
        for d in reversed(ish):
            mi.append(E.floormod(lin, d) if d != 1 else E.const(0, "int32"))
            lin = E.floordiv(lin, d) if d != 1 else lin
        v = cast(idx[tuple(reversed(mi))], "int64")
        v = te.if_then_else(v < E.const(0, "int64"), v + E.const(F, "int64"), v)
        v = E.max_expr(E.min_expr(v, E.const(F - 1, "int64")), E.const(0, "int64"))
        lead = () if len(xs) == 1 else tuple(rest)
        return x[lead + (v,)]

    return compute(out, body, name=uname("array_feature_extractor"))


@register(f"{_ML}.Normalizer", pattern="reduce")
def normalizer(ctx: OpContext, x: Tensor) -> Tensor:
    """ai.onnx.ml Normalizer over the last axis: ``x / max|x|`` (MAX), ``x / sum|x|`` (L1) or
    ``x / sqrt(sum x^2)`` (L2), each divisor at least 1e-30, as ONNX's reference and ONNX Runtime
    compute it; float32 result."""
    _check_numeric(ctx, x)
    norm = _s(ctx.attr("norm", "MAX")).upper()
    if norm not in ("MAX", "L1", "L2"):
        raise ctx.fail(f"norm={norm!r} is not one of MAX, L1, L2")
    xs = shape(x)
    if len(xs) not in (1, 2):
        raise ctx.fail(f"X must be [C] or [N, C], got shape {xs}")
    C = xs[-1]
    r = te.reduce_axis((0, C), name="c")

    def row(*i: Any) -> Any:
        v = cast(x[tuple(i) + (r.var,)], "float64")
        if norm == "MAX":
            return te.max(te.abs(v), axis=r)
        if norm == "L1":
            return te.sum(te.abs(v), axis=r)
        return te.sum(v * v, axis=r)

    red = compute(xs[:-1], row, name=uname("normalizer_div"))

    def body(*i: Any) -> Any:
        d = red[tuple(i[:-1])]
        if norm == "L2":
            d = te.sqrt(d)
        return cast(cast(x[i], "float64") / E.max_expr(d, _f64(1e-30)), "float32")

    return compute(xs, body, name=uname("normalizer"))


@register(f"{_ML}.Scaler")
def scaler(ctx: OpContext, x: Tensor) -> Tensor:
    """ai.onnx.ml Scaler: ``(x - offset) * scale`` with one value or one per feature (last axis);
    float32 result."""
    _check_numeric(ctx, x)
    xs = shape(x)
    F = xs[-1] if xs else 1
    offset = [float(v) for v in (ctx.attr("offset") or [0.0])]
    scale = [float(v) for v in (ctx.attr("scale") or [1.0])]
    for nm, vals in (("offset", offset), ("scale", scale)):
        if len(vals) not in (1, F):
            raise ctx.fail(f"{nm} has {len(vals)} values; give 1 or one per feature ({F})")

    def body(*i: Any) -> Any:
        j = i[-1] if i else 0
        v = (cast(x[i], "float64") - _per_feature(offset, j, "float64")) * _per_feature(scale, j, "float64")
        return cast(v, "float32")

    return compute(xs, body, name=uname("scaler"))


@register(f"{_ML}.OneHotEncoder")
def one_hot_encoder(ctx: OpContext, x: Tensor) -> Tensor:
    """ai.onnx.ml OneHotEncoder on numbers (``cats_int64s``): a float32 one-hot vector per
    element, appended as a last axis. An element in no category gives all zeros (ember cannot
    raise at run time, so ``zeros=0`` is not enforced)."""
    dt = _check_numeric(ctx, x)
    if ctx.attr("cats_strings"):
        raise ctx.fail("string categories are not supported (ember has no string tensors); use cats_int64s")
    cats = [int(c) for c in (ctx.attr("cats_int64s") or [])]
    if not cats:
        raise ctx.fail("cats_int64s is empty; give the categories")
    xs = shape(x)

    def body(*i: Any) -> Any:
        j = i[-1]
        v = x[tuple(i[:-1])]
        cat = _per_feature([float(c) for c in cats], j, "float64") if dt.startswith("float") else None
        hit = cast(v, "float64") == cat if cat is not None else cast(v, "int64") == _per_feature(cats, j, "int64")
        return te.if_then_else(hit, E.const(1.0, "float32"), E.const(0.0, "float32"))

    return compute(xs + (len(cats),), body, name=uname("one_hot_encoder"))


@register(f"{_ML}.Imputer")
def imputer(ctx: OpContext, x: Tensor) -> Tensor:
    """ai.onnx.ml Imputer: elements equal to the replaced value (NaN matches NaN) become the
    imputed value of their feature (last axis), or the single imputed value."""
    dt = _check_numeric(ctx, x)
    xs = shape(x)
    F = xs[-1] if xs else 1
    floats, ints_ = ctx.attr("imputed_value_floats"), ctx.attr("imputed_value_int64s")
    if bool(floats) == bool(ints_):
        raise ctx.fail("give exactly one of imputed_value_floats and imputed_value_int64s")
    is_float = dt.startswith("float")
    if bool(floats) != is_float:
        raise ctx.fail(f"input of type {dt} needs imputed_value_{'floats' if is_float else 'int64s'}")
    values = [float(v) for v in floats] if floats else [int(v) for v in ints_]
    if len(values) not in (1, F):
        raise ctx.fail(f"{len(values)} imputed values; give 1 or one per feature ({F})")
    rep = float(ctx.attr("replaced_value_float", 0.0)) if is_float else int(ctx.attr("replaced_value_int64", 0))

    def body(*i: Any) -> Any:
        v = x[i]
        if is_float and math.isnan(rep):
            hit = te.isnan(v)
        else:
            hit = v == const_like(rep, dt)
        return te.if_then_else(hit, _per_feature(values, i[-1] if i else 0, dt), v)

    return compute(xs, body, name=uname("imputer"))


def _attr_values(ctx: OpContext, kind: str) -> tuple[list[Any], str] | None:
    """The ``keys_*`` or ``values_*`` of a LabelEncoder and their dtype (None when absent)."""
    if ctx.attr(f"{kind}_strings"):
        raise ctx.fail(f"{kind}_strings: string maps are not supported (ember has no string tensors)")
    if ctx.attr(f"{kind}_int64s"):
        return [int(v) for v in ctx.attr(f"{kind}_int64s")], "int64"
    if ctx.attr(f"{kind}_floats"):
        return [float(v) for v in ctx.attr(f"{kind}_floats")], "float32"
    t = ctx.attr(f"{kind}_tensor")
    if t is not None:
        arr = np.asarray(t)
        if arr.dtype.kind not in "iuf":
            raise ctx.fail(f"{kind}_tensor of type {arr.dtype} is not supported (numeric tensors only)")
        return arr.reshape(-1).tolist(), str(arr.dtype)
    return None


@register(f"{_ML}.LabelEncoder")
def label_encoder(ctx: OpContext, x: Tensor) -> Tensor:
    """ai.onnx.ml LabelEncoder with numeric keys and values: each element mapped through the
    ``keys -> values`` table (a repeated key: the last wins; a NaN key matches NaN), elements not
    in the table to the default."""
    keys = _attr_values(ctx, "keys")
    vals = _attr_values(ctx, "values")
    if keys is None or vals is None:
        raise ctx.fail("give one keys_* and one values_* attribute")
    (kl, kdt), (vl, vdt) = keys, vals
    if len(kl) != len(vl):
        raise ctx.fail(f"{len(kl)} keys and {len(vl)} values; they must pair up")
    dt = dtype_of(x)
    if dt.startswith("float") != kdt.startswith("float"):
        raise ctx.fail(f"input of type {dt} cannot be looked up with keys of type {kdt}")
    dflt_t = ctx.attr("default_tensor")
    if dflt_t is not None:
        default = np.asarray(dflt_t).reshape(-1)[0].item()
    elif vdt.startswith("float"):
        default = float(ctx.attr("default_float", -0.0))
    else:
        default = int(ctx.attr("default_int64", -1))

    def body(*i: Any) -> Any:
        v = x[i]
        out = const_like(default, vdt)
        for key, val in zip(kl, vl):
            if isinstance(key, float) and math.isnan(key):
                hit = te.isnan(v)
            else:
                hit = v == const_like(key, dt)
            out = te.if_then_else(hit, const_like(val, vdt), out)
        return out

    return compute(shape(x), body, name=uname("label_encoder"))


# -- tree ensembles ------------------------------------------------------------------------------
_AGG = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
_POST = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}
_LEGACY_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5}


@dataclass
class _Forest:
    """Trees in one normal form: interior nodes by index (feature, mode 0..6, split, children as
    ``(index, is_leaf)``, missing values to the true branch, set members), leaves by index as
    lists of ``(target, weight)``, and the roots as ``(index, is_leaf)``. ``legacy_nan``: a NaN
    feature takes the missing-value branch without comparing (TreeEnsembleRegressor), instead of
    ``compare or (tracks_true and NaN)`` (TreeEnsemble)."""

    feat: list[int]
    modes: list[int]
    splits: list[float]
    true_child: list[tuple[int, bool]]
    false_child: list[tuple[int, bool]]
    mvt: list[int]
    members: dict[int, list[float]]
    leaves: list[list[tuple[int, float]]]
    roots: list[tuple[int, bool]]
    legacy_nan: bool = False


def _tensor_attr(ctx: OpContext, name: str, required: bool = True) -> np.ndarray | None:
    v = ctx.attr(name)
    if v is None:
        if required:
            raise ctx.fail(f"attribute {name!r} is required")
        return None
    return np.asarray(v).reshape(-1)


def _forest_scores(ctx: OpContext, x: Tensor, fr: _Forest, T: int, agg: str, base: list[float], dt: str) -> Tensor:
    """``[N, T]`` float64 scores: every tree walked per sample as nested selects, the leaves'
    weights aggregated per target, then ``base`` added."""
    N, F = shape(x)
    n_nodes = len(fr.modes)
    if any(not 0 <= f < F for f in fr.feat):
        raise ctx.fail(f"a nodes_featureids entry is outside [0, {F})")
    if any(not 0 <= t < T for lf in fr.leaves for t, _ in lf):
        raise ctx.fail(f"a leaf's target id is outside [0, n_targets={T})")
    if base and len(base) != T:
        raise ctx.fail(f"{len(base)} base values for {T} targets")
    none = _f64({"MIN": math.inf, "MAX": -math.inf}.get(agg, 0.0))

    def cond(k: int, v: E.PrimExpr) -> E.PrimExpr:
        m, sv = fr.modes[k], _f64(fr.splits[k])
        if m == 6:
            hit: E.PrimExpr = E.const(False, "bool")
            for mem in fr.members[k]:
                hit = hit | (v == _f64(mem))
        else:
            hit = [v <= sv, v < sv, v >= sv, v > sv, v == sv, v != sv][m]
        if fr.legacy_nan:
            return te.if_then_else(te.isnan(v), E.const(bool(fr.mvt[k]), "bool"), hit)
        return hit | te.isnan(v) if fr.mvt[k] else hit

    def leaf_value(t: Any, k: int) -> E.PrimExpr:
        if not 0 <= k < len(fr.leaves):
            raise ctx.fail(f"leaf index {k} is out of range")
        out = none
        for target, w in fr.leaves[k]:
            hit = t == target
            if agg in ("SUM", "AVERAGE"):
                out = out + te.if_then_else(hit, _f64(w), _f64(0.0))
            elif agg == "MIN":
                out = te.if_then_else(hit, E.min_expr(out, _f64(w)), out)
            else:
                out = te.if_then_else(hit, E.max_expr(out, _f64(w)), out)
        return out

    def walk(n: Any, t: Any, k: int, is_leaf: bool, depth: int) -> E.PrimExpr:
        if is_leaf:
            return leaf_value(t, k)
        if not 0 <= k < n_nodes or depth > n_nodes:
            raise ctx.fail(f"node index {k} is out of range, or the trees have a cycle")
        v = cast(x[n, fr.feat[k]], "float64")
        (tk, tl), (fk, fl) = fr.true_child[k], fr.false_child[k]
        return te.if_then_else(cond(k, v), walk(n, t, tk, tl, depth + 1), walk(n, t, fk, fl, depth + 1))

    def score(n: Any, t: Any) -> E.PrimExpr:
        acc: E.PrimExpr | None = None
        for r, is_leaf in fr.roots:
            v = walk(n, t, r, is_leaf, 0)
            if acc is None:
                acc = v
            elif agg in ("SUM", "AVERAGE"):
                acc = acc + v
            elif agg == "MIN":
                acc = E.min_expr(acc, v)
            else:
                acc = E.max_expr(acc, v)
        assert acc is not None
        if agg == "AVERAGE":
            acc = acc / _f64(len(fr.roots))
        if agg in ("MIN", "MAX"):  # no leaf of this target: the type's extreme value, as ONNX's reference
            big = float(np.finfo(np.dtype(dt)).max)
            acc = te.if_then_else(te.isinf(acc), _f64(big if agg == "MIN" else -big), acc)
        if base:
            acc = acc + _per_feature(base, t, "float64")
        return acc

    return compute((N, T), score, name=uname("tree_ensemble_raw"))


def _post_transform(ctx: OpContext, raw: Tensor, post: str, dt: str) -> Tensor:
    """The post transform of ``[N, T]`` scores, cast to ``dt``."""
    N, T = shape(raw)
    if post == "PROBIT":
        raise ctx.fail("post_transform PROBIT is not supported (ember has no inverse error function)")
    if post == "NONE":
        return compute((N, T), lambda n, t: cast(raw[n, t], dt), name=uname("tree_ensemble"))
    if post == "LOGISTIC":
        return compute((N, T), lambda n, t: cast(te.sigmoid(raw[n, t]), dt), name=uname("tree_ensemble"))
    zero_keeps = post == "SOFTMAX_ZERO"

    def softmax(n: Any, t: Any) -> E.PrimExpr:
        mx = raw[n, 0]
        for j in range(1, T):
            mx = E.max_expr(mx, raw[n, j])

        def ex(j: Any) -> E.PrimExpr:
            e = te.exp(raw[n, j] - mx)
            return te.if_then_else(raw[n, j] == _f64(0.0), _f64(0.0), e) if zero_keeps else e

        tot = ex(0)
        for j in range(1, T):
            tot = tot + ex(j)
        return cast(ex(t) / te.if_then_else(tot == _f64(0.0), _f64(1.0), tot), dt)

    return compute((N, T), softmax, name=uname("tree_ensemble"))


@register(f"{_ML}.TreeEnsemble")
def tree_ensemble(ctx: OpContext, x: Tensor) -> Tensor:
    """ai.onnx.ml TreeEnsemble (domain opset 5): ``[N, F] -> [N, n_targets]``, every tree walked
    per sample (all comparison modes, set membership, missing values following either branch),
    leaf weights aggregated per target by SUM, AVERAGE, MIN or MAX, then the post transform
    (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO)."""
    dt = _check_numeric(ctx, x, ("float16", "float32", "float64"))
    if len(shape(x)) != 2:
        raise ctx.fail(f"X must be [N, F], got shape {shape(x)}")
    feat = [int(v) for v in ctx.attr("nodes_featureids") or []]
    modes = [int(v) for v in _tensor_attr(ctx, "nodes_modes")]  # type: ignore[union-attr]
    splits = [float(v) for v in _tensor_attr(ctx, "nodes_splits")]  # type: ignore[union-attr]
    tids, fids = ctx.attr("nodes_truenodeids") or [], ctx.attr("nodes_falsenodeids") or []
    tleaf, fleaf = ctx.attr("nodes_trueleafs") or [], ctx.attr("nodes_falseleafs") or []
    n_nodes = len(modes)
    if not all(len(a) == n_nodes for a in (feat, splits, tids, fids, tleaf, fleaf)):
        raise ctx.fail("the nodes_* attributes must all have one entry per node")
    mvt = [int(v) for v in (ctx.attr("nodes_missing_value_tracks_true") or [0] * n_nodes)]
    lw = [float(v) for v in _tensor_attr(ctx, "leaf_weights")]  # type: ignore[union-attr]
    lt = [int(v) for v in ctx.attr("leaf_targetids") or []]
    if len(lw) != len(lt):
        raise ctx.fail("leaf_weights and leaf_targetids must have one entry per leaf")
    roots = [int(v) for v in ctx.attr("tree_roots") or []]
    if not roots or any(not 0 <= r < n_nodes for r in roots):
        raise ctx.fail("tree_roots is empty or names a node that does not exist")
    if any(m not in range(7) for m in modes):
        raise ctx.fail("nodes_modes entries must be 0..6 (LEQ, LT, GTE, GT, EQ, NEQ, MEMBER)")
    agg = _AGG.get(int(ctx.attr("aggregate_function", 1)))
    post = _POST.get(int(ctx.attr("post_transform", 0)))
    if agg is None or post is None:
        raise ctx.fail("aggregate_function must be 0..3 and post_transform 0..4")
    # set members, in the order the MEMBER nodes appear in nodes_modes, NaN-delimited
    members: dict[int, list[float]] = {}
    if any(m == 6 for m in modes):
        mv = _tensor_attr(ctx, "membership_values", required=False)
        if mv is None:
            raise ctx.fail("MEMBER nodes need the membership_values attribute")
        groups: list[list[float]] = [[]]
        for v in mv.tolist():
            if math.isnan(v):
                groups.append([])
            else:
                groups[-1].append(float(v))
        member_nodes = [k for k, m in enumerate(modes) if m == 6]
        if len(groups) < len(member_nodes):
            raise ctx.fail("membership_values has fewer NaN-delimited sets than there are MEMBER nodes")
        members = dict(zip(member_nodes, groups))
    forest = _Forest(
        feat,
        modes,
        splits,
        [(int(a), bool(b)) for a, b in zip(tids, tleaf)],
        [(int(a), bool(b)) for a, b in zip(fids, fleaf)],
        mvt,
        members,
        [[(t, w)] for t, w in zip(lt, lw)],
        [(int(tids[r]), True) if tleaf[r] and fleaf[r] and tids[r] == fids[r] else (r, False) for r in roots],
    )
    T = int(ctx.attr("n_targets", 1) or 1)
    return _post_transform(ctx, _forest_scores(ctx, x, forest, T, agg, [], dt), post, dt)


@register(f"{_ML}.TreeEnsembleRegressor")
def tree_ensemble_regressor(ctx: OpContext, x: Tensor) -> Tensor:
    """ai.onnx.ml TreeEnsembleRegressor (deprecated form of TreeEnsemble): nodes named by
    ``(tree id, node id)`` with ``LEAF`` nodes, several weighted targets per leaf, ``base_values``
    added after the aggregation; a NaN feature takes the missing-value branch. float32 result."""
    _check_numeric(ctx, x)
    xs = shape(x)
    if len(xs) != 2:
        raise ctx.fail(f"X must be [N, F], got shape {xs}")
    treeids = [int(v) for v in ctx.attr("nodes_treeids") or []]
    nodeids = [int(v) for v in ctx.attr("nodes_nodeids") or []]
    feat = [int(v) for v in ctx.attr("nodes_featureids") or []]
    modes_s = [_s(m) for m in ctx.attr("nodes_modes") or []]
    vals = ctx.attr("nodes_values_as_tensor")
    splits = [float(v) for v in (np.asarray(vals).reshape(-1) if vals is not None else ctx.attr("nodes_values") or [])]
    tids, fids = ctx.attr("nodes_truenodeids") or [], ctx.attr("nodes_falsenodeids") or []
    n = len(treeids)
    mvt = [int(v) for v in (ctx.attr("nodes_missing_value_tracks_true") or [0] * n)]
    if not n or not all(len(a) == n for a in (nodeids, feat, modes_s, splits, tids, fids, mvt)):
        raise ctx.fail("the nodes_* attributes must all have one entry per node (and at least one node)")
    bad = [m for m in modes_s if m != "LEAF" and m not in _LEGACY_MODES]
    if bad:
        raise ctx.fail(f"node mode {bad[0]!r} is not one of {', '.join(_LEGACY_MODES)}, LEAF")
    index = {(t, i): k for k, (t, i) in enumerate(zip(treeids, nodeids))}
    if len(index) != n:
        raise ctx.fail("a (tree id, node id) pair appears twice")
    leaves: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    tw = ctx.attr("target_weights_as_tensor")
    weights = [float(v) for v in (np.asarray(tw).reshape(-1) if tw is not None else ctx.attr("target_weights") or [])]
    t_tree = [int(v) for v in ctx.attr("target_treeids") or []]
    t_node = [int(v) for v in ctx.attr("target_nodeids") or []]
    t_id = [int(v) for v in ctx.attr("target_ids") or []]
    if not len(weights) == len(t_tree) == len(t_node) == len(t_id):
        raise ctx.fail("the target_* attributes must all have one entry per weight")
    for t, nd, target, w in zip(t_tree, t_node, t_id, weights):
        k = index.get((t, nd))
        if k is None:
            raise ctx.fail(f"a target names node ({t}, {nd}), which does not exist")
        leaves[k].append((target, w))

    def child(k: int, nid: int) -> tuple[int, bool]:
        c = index.get((treeids[k], int(nid)))
        if c is None:
            raise ctx.fail(f"node ({treeids[k]}, {nodeids[k]}) branches to node {nid}, which does not exist")
        return c, modes_s[c] == "LEAF"

    interior = [k for k in range(n) if modes_s[k] != "LEAF"]
    forest = _Forest(
        feat,
        [_LEGACY_MODES.get(m, 0) for m in modes_s],
        splits,
        [child(k, tids[k]) if k in interior else (k, True) for k in range(n)],
        [child(k, fids[k]) if k in interior else (k, True) for k in range(n)],
        mvt,
        {},
        leaves,
        [],
        legacy_nan=True,
    )
    first: dict[int, int] = {}
    for k, t in enumerate(treeids):
        first.setdefault(t, k)
    forest.roots = [(k, modes_s[k] == "LEAF") for _, k in sorted(first.items())]
    agg = _s(ctx.attr("aggregate_function", "SUM")).upper()
    post = _s(ctx.attr("post_transform", "NONE")).upper()
    if agg not in _AGG.values() or post not in _POST.values():
        raise ctx.fail(f"aggregate_function={agg!r} or post_transform={post!r} is not a known value")
    bt = ctx.attr("base_values_as_tensor")
    base = [float(v) for v in (np.asarray(bt).reshape(-1) if bt is not None else ctx.attr("base_values") or [])]
    T = int(ctx.attr("n_targets", 1) or 1)
    return _post_transform(ctx, _forest_scores(ctx, x, forest, T, agg, base, "float32"), post, "float32")
