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
        flat_out[i] = v
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

