"""Host kernels for string tensors and text features, in NumPy: ``StringNormalizer``,
``StringSplit``, ``StringConcat``, ``RegexFullMatch``, ``Equal`` on strings, ``LabelEncoder``
with string keys or values, and ``TfIdfVectorizer``.

A string tensor is a NumPy array of ``dtype=object`` holding Python ``str`` (UTF-8 ``bytes`` are
decoded on the way in), as ONNX's NumPy helpers and ONNX Runtime's Python API give them. These
operators run on the host, before or after the compiled part of a model
(:mod:`ember.host_stages`); each is a function ``(attrs, inputs) -> outputs`` of NumPy arrays
with the attributes already decoded (strings as ``str``, tensors as arrays). Bad attributes or
inputs raise :class:`~ember.errors.OpError` naming the operator.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import OpError

Attrs = dict[str, Any]
HostKernel = Callable[[Attrs, Sequence[np.ndarray | None]], list[np.ndarray]]


def as_strings(x: Any, what: str) -> np.ndarray:
    """``x`` as an object array of ``str`` (``bytes`` decoded as UTF-8). Raises OpError for
    anything that is not text."""
    arr = np.asarray(x, dtype=object)
    out = np.empty(arr.shape, dtype=object)
    flat_in, flat_out = arr.reshape(-1), out.reshape(-1)
    for i, v in enumerate(flat_in):
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise OpError(f"{what}: element {i} is not UTF-8 text ({exc})") from exc
        elif not isinstance(v, str):
            raise OpError(f"{what}: element {i} is a {type(v).__name__}, not a string")
        flat_out[i] = v if type(v) is str else str(v)  # (numpy.str_ and other str subclasses: plain str)
    return out


def _map_strings(x: np.ndarray, fn: Callable[[str], Any], dtype: Any = object) -> np.ndarray:
    out = np.empty(x.shape, dtype=dtype)
    flat_in, flat_out = x.reshape(-1), out.reshape(-1)
    for i, v in enumerate(flat_in):
        flat_out[i] = fn(v)
    return out


# -- StringNormalizer ---------------------------------------------------------------------------
def _one_to_one(s: str, change: Callable[[str], str]) -> str:
    """``s`` with each character mapped by ``change`` where that gives one character (simple case
    mapping, as C's ``towupper``/``towlower``: ``ß`` stays ``ß``)."""
    return "".join(m if len(m := change(c)) == 1 else c for c in s)


def string_normalizer(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX StringNormalizer on ``[C]`` or ``[1, C]``: strings equal to a stopword removed (compared
    in upper case unless ``is_case_sensitive``), then ``case_change_action`` (``NONE``, ``LOWER``,
    ``UPPER``) applied character by character with simple case mapping — ONNX Runtime's
    behaviour; ``locale`` is not consulted (Unicode's mapping serves every locale alike). When
    every string is removed the output holds one empty string (``[1]`` or ``[1, 1]``)."""
    x = as_strings(inputs[0], "StringNormalizer input")
    action = str(attrs.get("case_change_action", "NONE")).upper()
    if action not in ("NONE", "LOWER", "UPPER"):
        raise OpError(f"StringNormalizer: case_change_action={action!r} is not NONE, LOWER or UPPER")
    if x.ndim == 2 and x.shape[0] != 1 or x.ndim not in (1, 2):
        raise OpError(f"StringNormalizer: the input must be [C] or [1, C], got shape {list(x.shape)}")
    sensitive = bool(attrs.get("is_case_sensitive", 0))

    def key(w: str) -> str:
        return w if sensitive else _one_to_one(w, str.upper)

    stop = {key(str(w)) for w in attrs.get("stopwords", [])}
    kept = [w for w in x.reshape(-1) if key(w) not in stop]
    if action == "LOWER":
        kept = [_one_to_one(w, str.lower) for w in kept]
    elif action == "UPPER":
        kept = [_one_to_one(w, str.upper) for w in kept]
    if not kept:
        kept = [""]
    out = np.empty(len(kept), dtype=object)
    out[:] = kept
    return [out.reshape(1, -1) if x.ndim == 2 else out]


# -- StringSplit --------------------------------------------------------------------------------
def string_split(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX StringSplit: each string split at ``delimiter`` (absent or empty: at runs of
    whitespace, leading and trailing whitespace ignored), at most ``maxsplit`` times. Outputs the
    pieces, shape ``X.shape + [most pieces]`` padded with empty strings, and the number of pieces
    of each string (int64)."""
    x = as_strings(inputs[0], "StringSplit input")
    delim = attrs.get("delimiter")
    delim = str(delim) if delim else None
    maxsplit = attrs.get("maxsplit")
    limit = -1 if maxsplit is None else int(maxsplit)
    if maxsplit is not None and limit < 0:
        raise OpError(f"StringSplit: maxsplit={limit} must be non-negative")
    pieces = [_split(s, delim, limit) for s in x.reshape(-1)]  # (delim None: at whitespace runs)
    width = max((len(p) for p in pieces), default=0)
    y = np.empty((len(pieces), width), dtype=object)
    y[...] = ""
    for i, p in enumerate(pieces):
        y[i, :len(p)] = p
    counts = np.array([len(p) for p in pieces], dtype=np.int64).reshape(x.shape)
    return [y.reshape(x.shape + (width,)), counts]


def _split(s: str, delim: str | None, limit: int) -> list[str]:
    """The pieces of one string, as ONNX Runtime gives them: none for an empty string, and at
    whitespace runs (``delim`` None) the unsplit rest after ``maxsplit`` splits without its
    trailing whitespace. (The ONNX reference gives an empty string split at a delimiter one empty
    piece and keeps that whitespace; the specification says neither.)"""
    if not s:
        return []
    if delim is not None:
        return s.split(delim, limit)
    pieces = s.split(None, limit)
    if pieces:
        pieces[-1] = pieces[-1].rstrip()
    return pieces


# -- StringConcat, RegexFullMatch, Equal ---------------------------------------------------------
def _elementwise(inputs: Sequence[np.ndarray | None], op: str, fn: Callable[[str, str], Any],
                 dtype: Any) -> np.ndarray:
    """``fn`` on each pair of strings of the two inputs, broadcast as NumPy broadcasts."""
    x = as_strings(inputs[0], f"{op} input 0")
    y = as_strings(inputs[1], f"{op} input 1")
    try:
        xb, yb = np.broadcast_arrays(x, y)
    except ValueError as exc:
        raise OpError(f"{op}: shapes {list(x.shape)} and {list(y.shape)} do not broadcast") from exc
    out = np.empty(xb.shape, dtype=dtype)
    for idx in np.ndindex(xb.shape):
        out[idx] = fn(xb[idx], yb[idx])
    return out


def string_concat(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX StringConcat: elementwise ``x + y`` with NumPy broadcasting."""
    return [_elementwise(inputs, "StringConcat", lambda a, b: a + b, object)]


def regex_full_match(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX RegexFullMatch: True where the whole string matches ``pattern``. Python's ``re``
    stands in for RE2: the syntax they share (classes, repetition, groups, alternation,
    anchors) means the same; a pattern ``re`` cannot compile is an OpError."""
    x = as_strings(inputs[0], "RegexFullMatch input")
    pattern = attrs.get("pattern")
    if pattern is None:
        raise OpError("RegexFullMatch: the pattern attribute is required")
    try:
        rx = re.compile(str(pattern))
    except re.error as exc:
        raise OpError(f"RegexFullMatch: pattern {pattern!r} is not a valid regular expression ({exc})") from exc
    return [_map_strings(x, lambda s: rx.fullmatch(s) is not None, dtype=bool)]


def string_equal(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Equal on string tensors: elementwise, with NumPy broadcasting."""
    return [_elementwise(inputs, "Equal", lambda a, b: a == b, bool)]


# -- LabelEncoder -------------------------------------------------------------------------------
def _label_side(attrs: Attrs, side: str) -> np.ndarray | None:
    """The keys or values of a LabelEncoder (``side``: ``keys`` or ``values``), from whichever
    attribute the node sets."""
    for suffix, conv in (("strings", lambda v: as_strings(v, f"LabelEncoder {side}_strings")),
                         ("int64s", lambda v: np.asarray(v, dtype=np.int64)),
                         ("floats", lambda v: np.asarray(v, dtype=np.float32))):
        v = attrs.get(f"{side}_{suffix}")
        if v is not None:
            return conv(list(v))
    t = attrs.get(f"{side}_tensor")
    if t is not None:
        arr = np.asarray(t)
        return as_strings(arr, f"LabelEncoder {side}_tensor").reshape(-1) if arr.dtype == object else arr.reshape(-1)
    return None


def label_encoder(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX-ML LabelEncoder (opset 2 and 4): each input element looked up among ``keys_*`` and
    replaced by the value at the same position (``values_*``), or by the default of the values'
    type (``default_string`` "_Unused", ``default_int64`` -1, ``default_float`` -0.0, or
    ``default_tensor``). Float keys match NaN to NaN."""
    keys, values = _label_side(attrs, "keys"), _label_side(attrs, "values")
    if keys is None or values is None:
        raise OpError("LabelEncoder: the node sets no keys_* or no values_* attribute")
    if len(keys) != len(values):
        raise OpError(f"LabelEncoder: {len(keys)} keys but {len(values)} values")
    x = inputs[0]
    assert x is not None
    if keys.dtype == object:
        x = as_strings(x, "LabelEncoder input")
    else:
        x = np.asarray(x)
    default_t = attrs.get("default_tensor")
    if default_t is not None:
        default: Any = np.asarray(default_t).reshape(-1)[0]
    elif values.dtype == object:
        default = str(attrs.get("default_string", "_Unused"))
    elif values.dtype.kind == "i":
        default = int(attrs.get("default_int64", -1))
    else:
        default = float(attrs.get("default_float", -0.0))
    nan_value = None
    table: dict[Any, Any] = {}
    for k, v in zip(keys.tolist(), values.tolist()):
        if isinstance(k, float) and np.isnan(k):
            nan_value = v
        else:
            table.setdefault(k, v)

    def look(e: Any) -> Any:
        if nan_value is not None and isinstance(e, float) and np.isnan(e):
            return nan_value
        return table.get(e, default)

    flat = [look(e) for e in x.reshape(-1).tolist()]
    if values.dtype == object:
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
    else:
        out = np.array(flat, dtype=values.dtype)
    return [out.reshape(x.shape)]


# -- TfIdfVectorizer ----------------------------------------------------------------------------
def _pool(attrs: Attrs) -> tuple[list[Any], bool]:
    if attrs.get("pool_strings") is not None:
        return list(as_strings(list(attrs["pool_strings"]), "TfIdfVectorizer pool_strings")), True
    if attrs.get("pool_int64s") is not None:
        return [int(v) for v in attrs["pool_int64s"]], False
    raise OpError("TfIdfVectorizer: the node sets neither pool_strings nor pool_int64s")


def tfidf_vectorizer(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX TfIdfVectorizer on ``[C]`` or ``[N, C]`` (int32, int64 or strings): counts, per row,
    each n-gram of the pool (``min_gram_length`` ≤ n ≤ ``max_gram_length``; for n ≥ 2 with
    0 … ``max_skip_count`` items skipped between consecutive items), output at column
    ``ngram_indexes`` of the n-gram, weighted by ``mode``: ``TF`` the counts, ``IDF`` the n-gram's
    weight where it occurs, ``TFIDF`` its weight added per occurrence (``weights[j]`` is the pool's
    n-gram j's, as the specification and ONNX Runtime read it; default 1). Float32 output of width
    ``max(ngram_indexes) + 1``. (The ONNX reference takes ``weights[c]`` as output column c's:
    the same when ``ngram_indexes`` is 0, 1, 2, ….)"""
    pool, text = _pool(attrs)
    lo, hi = int(attrs.get("min_gram_length", 1)), int(attrs.get("max_gram_length", 1))
    skip = int(attrs.get("max_skip_count", 0))
    mode = str(attrs.get("mode", "TF")).upper()
    counts_at = [int(v) for v in attrs.get("ngram_counts", [])]
    indexes = [int(v) for v in attrs.get("ngram_indexes", [])]
    if mode not in ("TF", "IDF", "TFIDF"):
        raise OpError(f"TfIdfVectorizer: mode={mode!r} is not TF, IDF or TFIDF")
    if not 1 <= lo <= hi or skip < 0:
        raise OpError(f"TfIdfVectorizer: need 1 <= min_gram_length ({lo}) <= max_gram_length ({hi}) "
                      f"and max_skip_count ({skip}) >= 0")
    if len(counts_at) < hi:
        raise OpError(f"TfIdfVectorizer: ngram_counts has {len(counts_at)} entries, max_gram_length is {hi}")
    weights = attrs.get("weights")
    # the pool's n-grams: their items -> their number in the pool's order
    grams: dict[tuple[Any, ...], int] = {}
    number = 0
    for n in range(1, len(counts_at) + 1):
        start = counts_at[n - 1]
        end = counts_at[n] if n < len(counts_at) else len(pool)
        if start > end or end > len(pool) or (end - start) % n:
            raise OpError(f"TfIdfVectorizer: ngram_counts {counts_at} does not split a pool of {len(pool)} items "
                          f"into {n}-grams")
        for s in range(start, end, n):
            grams.setdefault(tuple(pool[s:s + n]), number)
            number += 1
    if len(indexes) != number:
        raise OpError(f"TfIdfVectorizer: {len(indexes)} ngram_indexes for {number} n-grams in the pool")
    if weights is not None and len(weights) != number:
        raise OpError(f"TfIdfVectorizer: {len(weights)} weights for {number} n-grams in the pool")
    width = max(indexes, default=-1) + 1
    w = np.ones(number, dtype=np.float32) if weights is None else np.asarray(weights, dtype=np.float32)
    x = inputs[0]
    assert x is not None
    x = as_strings(x, "TfIdfVectorizer input") if text else np.asarray(x)
    if not text and x.dtype.kind not in "iu":
        raise OpError(f"TfIdfVectorizer: an integer pool needs int32 or int64 input, got {x.dtype}")
    if x.ndim not in (1, 2):
        raise OpError(f"TfIdfVectorizer: the input must be [C] or [N, C], got shape {list(x.shape)}")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    out = np.zeros((rows.shape[0], width), dtype=np.float32)
    for r, row in enumerate(rows.tolist()):
        length = len(row)
        # ONNX Runtime's order (skips, then starts, then lengths): IDF keeps the weight of the
        # last n-gram found for a column that several n-grams share
        for k in range(skip + 1):
            step = k + 1
            for s in range(length):
                for n in range(max(lo, 1 if k == 0 else 2), hi + 1):
                    if s + (n - 1) * step >= length:
                        break
                    j = grams.get(tuple(row[s + p * step] for p in range(n)))  # a tuple's length is its n
                    if j is None:
                        continue
                    c = indexes[j]
                    if mode == "TF":
                        out[r, c] += np.float32(1)
                    elif mode == "IDF":
                        out[r, c] = w[j]
                    else:
                        out[r, c] += w[j]
    return [out.reshape(-1) if x.ndim == 1 else out]



# -- data movement on string tensors ----------------------------------------------------------------
# The operators a user expects on text that only move, pick or reshape elements. On numbers they are
# compiled; on a string tensor they run here, in NumPy (object arrays keep their ``str`` elements).
# Shapes, axes and indices come as inputs or, in the opsets before they became inputs, as attributes.
def _ints(x: Any, what: str) -> list[int]:
    try:
        return [int(v) for v in np.asarray(x).reshape(-1)]
    except (TypeError, ValueError) as exc:
        raise OpError(f"{what} must be integers") from exc


def _axis(a: int, rank: int, what: str) -> int:
    if not -rank <= a < max(rank, 1):
        raise OpError(f"{what}: axis {a} is out of range for rank {rank}")
    return a % max(rank, 1)


def _given(attrs: Attrs, inputs: Sequence[np.ndarray | None], attr: str, k: int) -> Any:
    """Attribute ``attr`` when present (older opsets), else input ``k`` (None when omitted)."""
    if attr in attrs:
        return attrs[attr]
    return inputs[k] if len(inputs) > k else None


def _array(x: np.ndarray | None, what: str) -> np.ndarray:
    if x is None:
        raise OpError(f"{what} is missing")
    return np.asarray(x)


def identity(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Identity: a copy of the input."""
    return [_array(inputs[0], "Identity input").copy()]


def reshape(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Reshape (``0`` copies the input's dimension unless ``allowzero``, one ``-1`` is
    inferred); the shape from the second input, or the ``shape`` attribute of opsets < 5."""
    x = _array(inputs[0], "Reshape input")
    shape = _ints(_array(_given(attrs, inputs, "shape", 1), "Reshape shape"), "Reshape shape")
    if not attrs.get("allowzero", 0):
        if any(d == 0 and i >= x.ndim for i, d in enumerate(shape)):
            raise OpError(f"Reshape: shape {shape} copies a dimension the input (rank {x.ndim}) lacks")
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise OpError(f"Reshape: shape {shape} has more than one -1 or a negative size")
    try:
        return [x.reshape(shape).copy()]
    except ValueError as exc:
        raise OpError(f"Reshape: cannot reshape {list(x.shape)} to {shape} ({exc})") from exc


def _indices(idx: np.ndarray, size: int, what: str) -> np.ndarray:
    i = np.asarray(idx)
    if i.dtype.kind not in "iu":
        raise OpError(f"{what}: indices must be integers, got {i.dtype}")
    i = i.astype(np.int64)
    if i.size and (i.min() < -size or i.max() >= size):
        raise OpError(f"{what}: an index is out of range [-{size}, {size - 1}]")
    return np.where(i < 0, i + size, i)


def gather(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Gather along ``axis`` (negative indices count from the end; one out of range is an
    OpError)."""
    x, idx = _array(inputs[0], "Gather data"), _array(inputs[1], "Gather indices")
    axis = _axis(int(attrs.get("axis", 0)), x.ndim, "Gather")
    if x.ndim == 0:
        raise OpError("Gather: the data must have rank >= 1")
    return [np.take(x, _indices(idx, x.shape[axis], "Gather"), axis=axis)]


def gather_elements(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX GatherElements along ``axis``."""
    x, idx = _array(inputs[0], "GatherElements data"), _array(inputs[1], "GatherElements indices")
    axis = _axis(int(attrs.get("axis", 0)), x.ndim, "GatherElements")
    if idx.ndim != x.ndim or x.ndim == 0:
        raise OpError(f"GatherElements: indices of rank {idx.ndim} for data of rank {x.ndim}")
    if any(i > d for k, (i, d) in enumerate(zip(idx.shape, x.shape)) if k != axis):
        raise OpError(f"GatherElements: indices {list(idx.shape)} exceed the data {list(x.shape)}")
    i = _indices(idx, x.shape[axis], "GatherElements")
    sub = x[tuple(slice(0, n) if k != axis else slice(None) for k, n in enumerate(idx.shape))]
    return [np.take_along_axis(sub, i, axis=axis)]


def squeeze(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Squeeze: the given axes (each of size 1), or every axis of size 1."""
    x = _array(inputs[0], "Squeeze input")
    given = _given(attrs, inputs, "axes", 1)
    if given is None:
        return [x.reshape([d for d in x.shape if d != 1])]
    axes = sorted({_axis(a, x.ndim, "Squeeze") for a in _ints(given, "Squeeze axes")})
    if any(x.shape[a] != 1 for a in axes):
        raise OpError(f"Squeeze: axes {axes} of shape {list(x.shape)} are not all of size 1")
    return [x.reshape([d for k, d in enumerate(x.shape) if k not in axes])]


def unsqueeze(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Unsqueeze: axes of size 1 inserted (axes counted in the output's rank)."""
    x = _array(inputs[0], "Unsqueeze input")
    raw = _ints(_array(_given(attrs, inputs, "axes", 1), "Unsqueeze axes"), "Unsqueeze axes")
    rank = x.ndim + len(raw)
    axes = {_axis(a, rank, "Unsqueeze") for a in raw}
    if len(axes) != len(raw):
        raise OpError(f"Unsqueeze: axes {raw} repeat an axis")
    dims = iter(x.shape)
    return [x.reshape([1 if k in axes else next(dims) for k in range(rank)])]


def flatten(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Flatten: ``[prod(dims[:axis]), prod(dims[axis:])]``."""
    x = _array(inputs[0], "Flatten input")
    axis = int(attrs.get("axis", 1))
    if not -x.ndim <= axis <= x.ndim:
        raise OpError(f"Flatten: axis {axis} is out of range for rank {x.ndim}")
    axis = axis + x.ndim if axis < 0 else axis
    return [x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64)))]


def transpose(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Transpose by ``perm`` (reversed axes by default)."""
    x = _array(inputs[0], "Transpose input")
    perm = [int(p) for p in attrs.get("perm", range(x.ndim - 1, -1, -1))]
    if sorted(perm) != list(range(x.ndim)):
        raise OpError(f"Transpose: perm {perm} is not a permutation of the {x.ndim} axes")
    return [np.ascontiguousarray(x.transpose(perm))]


def concat(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Concat along ``axis`` (every input of the same rank and other dimensions)."""
    xs = [_array(x, "Concat input") for x in inputs if x is not None]
    if not xs or "axis" not in attrs:
        raise OpError("Concat needs inputs and an axis")
    axis = _axis(int(attrs["axis"]), xs[0].ndim, "Concat")
    if any(x.ndim != xs[0].ndim or x.shape[:axis] + x.shape[axis + 1:] != xs[0].shape[:axis] + xs[0].shape[axis + 1:]
           for x in xs):
        raise OpError(f"Concat: shapes {[list(x.shape) for x in xs]} differ outside axis {axis}")
    return [np.concatenate(xs, axis=axis)]


def slice_(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Slice (starts, ends, axes, steps as inputs; as attributes before opset 10); bounds
    clamped as the spec says."""
    x = _array(inputs[0], "Slice input")
    starts = _ints(_array(_given(attrs, inputs, "starts", 1), "Slice starts"), "Slice starts")
    ends = _ints(_array(_given(attrs, inputs, "ends", 2), "Slice ends"), "Slice ends")
    ax = _given(attrs, inputs, "axes", 3)
    axes = _ints(ax, "Slice axes") if ax is not None else list(range(len(starts)))
    st = inputs[4] if len(inputs) > 4 else None
    steps = _ints(st, "Slice steps") if st is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OpError("Slice: starts, ends, axes and steps differ in length")
    index = [slice(None)] * x.ndim
    for s, e, a, step in zip(starts, ends, axes, steps):
        if step == 0:
            raise OpError("Slice: a step is 0")
        index[_axis(a, x.ndim, "Slice")] = slice(s, e, step)
    return [x[tuple(index)].copy()]


def expand(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Expand: the input broadcast with ``shape`` (bidirectionally)."""
    x = _array(inputs[0], "Expand input")
    shape = _ints(_array(inputs[1], "Expand shape"), "Expand shape")
    try:
        out = np.broadcast_shapes(x.shape, tuple(shape))
    except ValueError as exc:
        raise OpError(f"Expand: {list(x.shape)} does not broadcast with {shape}") from exc
    return [np.broadcast_to(x, out).copy()]


def tile(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Tile: the input repeated ``repeats[k]`` times along axis k."""
    x = _array(inputs[0], "Tile input")
    reps = _ints(_array(inputs[1], "Tile repeats"), "Tile repeats")
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise OpError(f"Tile: repeats {reps} for an input of rank {x.ndim}")
    return [np.tile(x, reps)]


def where(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Where: ``x`` where the condition holds, else ``y`` (broadcast)."""
    c, x, y = (_array(v, "Where input") for v in inputs[:3])
    try:
        return [np.where(c.astype(bool), x, y)]
    except ValueError as exc:
        raise OpError(f"Where: shapes {list(c.shape)}, {list(x.shape)}, {list(y.shape)} do not broadcast") from exc


def shape(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Shape (with ``start``/``end`` of opset 15), int64."""
    x = _array(inputs[0], "Shape input")
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return [np.array(x.shape[start:None if end is None else int(end)], dtype=np.int64)]


def size(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Size: the element count, an int64 scalar."""
    return [np.array(_array(inputs[0], "Size input").size, dtype=np.int64)]


#: ONNX element types (TensorProto codes) Cast converts text from and to: the numeric ones.
_CAST_NUMERIC = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
                 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


def _float_text(v: Any) -> str:
    """A float as ONNX Runtime writes it: 8 significant digits (``%.8g``), ``NaN``, ``INF``."""
    f = float(v)
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "INF" if f > 0 else "-INF"
    return f"{f:.8g}"


def _parse_float(s: str) -> float:
    """Text as a number, as C's ``strtod`` reads it (decimal, ``inf``, ``nan``, hexadecimal)."""
    try:
        return float(s)
    except ValueError:
        return float.fromhex(s.strip())


def cast(attrs: Attrs, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """ONNX Cast from or to text (``to`` = 8, STRING), as ONNX Runtime converts: floats become
    text with 8 significant digits (``%.8g``; ``NaN``, ``INF``, ``-INF``), integers their decimal
    text, booleans ``"1"``/``"0"``; text becomes floats as ``strtod`` reads it (``"inf"``,
    ``"NaN"``, ``"1e3"``, ``"0x10"``), integers from integer text only; text to text is a copy.
    Other element types, and text that is not a number, are an OpError."""
    x = _array(inputs[0], "Cast input")
    to = int(attrs.get("to", 0))
    if to == 8:
        if x.dtype == object:
            return [as_strings(x, "Cast input")]
        if x.dtype == np.bool_:
            return [_map_strings(x, lambda v: "1" if v else "0")]
        if x.dtype.kind in "iu":
            return [_map_strings(x, lambda v: str(int(v)))]
        if x.dtype.kind != "f":
            raise OpError(f"Cast: cannot write {x.dtype} as text")
        return [_map_strings(x, _float_text)]
    want = _CAST_NUMERIC.get(to)
    if want is None:
        raise OpError(f"Cast: text converts to numeric element types only, not type {to}")
    s = as_strings(x, "Cast input")
    try:
        if np.dtype(want).kind == "f":
            return [_map_strings(s, _parse_float, np.float64).astype(want)]
        if want is np.bool_:
            return [_map_strings(s, lambda v: _parse_float(v) != 0, np.bool_)]
        return [_map_strings(s, lambda v: int(v, 10), object).astype(want)]
    except (ValueError, OverflowError) as exc:
        raise OpError(f"Cast: text that is not a number ({exc})") from exc


#: Operators that run on the host when a string tensor flows through them (compiled otherwise).
STRING_MOVES: dict[str, HostKernel] = {
    "Identity": identity, "Reshape": reshape, "Gather": gather, "GatherElements": gather_elements,
    "Squeeze": squeeze, "Unsqueeze": unsqueeze, "Flatten": flatten, "Transpose": transpose, "Concat": concat,
    "Slice": slice_, "Expand": expand, "Tile": tile, "Where": where, "Shape": shape, "Size": size, "Cast": cast,
}
