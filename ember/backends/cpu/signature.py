"""The signatures of compiled functions in a module's ``module.json``, checked as data.

CPU and GPU modules describe their functions the same way
(:func:`ember.backends.cpu.codegen.function_signature`); the runtime's argument checks trust
these descriptions, so a loaded module's are checked field by field first.
"""

from __future__ import annotations

from typing import Any

from ...errors import EmberError, ModelFormatError
from ...runtime.size_expr import check_tree

#: Limits that no signature ember writes comes near (a guard against absurd descriptions).
MAX_FUNCTIONS = 1 << 16
MAX_PARAMS = 4096
MAX_RANK = 64
MAX_NAME = 1024


def check_signatures(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``functions`` list of a CPU module's ``meta``, checked with
    :func:`check_signature_list`. Raises ModelFormatError naming the bad entry."""
    return check_signature_list(meta.get("functions"), "the CPU module")


def check_signature_list(sigs: Any, where: str) -> list[dict[str, Any]]:
    """``sigs`` checked as a non-empty list of function signatures with distinct names (see
    :func:`check_signature`); returns it. Raises ModelFormatError naming ``where`` and the
    entry at fault."""
    if not isinstance(sigs, list) or not sigs:
        raise ModelFormatError(f"{where} lists no functions")
    if len(sigs) > MAX_FUNCTIONS:
        raise ModelFormatError(f"{where} lists {len(sigs)} functions (at most {MAX_FUNCTIONS})")
    seen: set[str] = set()
    for k, s in enumerate(sigs):
        check_signature(s, f"function {k} of {where}")
        if s["name"] in seen:
            raise ModelFormatError(f"{where} lists function {s['name']} twice")
        seen.add(s["name"])
    return sigs


def _identifier(x: Any) -> bool:
    return isinstance(x, str) and 0 < len(x) <= MAX_NAME and x.isidentifier() and x.isascii()


def _name(x: Any) -> bool:
    """A parameter or size name: printable text (users name placeholders and sizes freely)."""
    return isinstance(x, str) and 0 < len(x) <= MAX_NAME and x.isprintable()


def _dtype(x: Any, what: str, integer: bool = False) -> None:
    from ...ir.dtypes import dtype

    if not isinstance(x, str) or len(x) > 64:
        raise ModelFormatError(f"{what}: the dtype {x!r} is not a dtype name")
    try:
        t = dtype(x)
    except EmberError as exc:
        raise ModelFormatError(f"{what}: {x!r} is not an ember dtype") from exc
    if t.lanes != 1 or str(t) != x:
        raise ModelFormatError(f"{what}: {x!r} is not a scalar ember dtype")
    if integer and not t.is_int:
        raise ModelFormatError(f"{what}: a size must have an integer dtype, not {x}")


def check_signature(s: Any, what: str) -> None:
    """Raise ModelFormatError (naming ``what``) unless ``s`` is one function's signature:
    an identifier ``name``; ``scalars`` a list of {name (printable, distinct), dtype
    (an integer dtype)}; ``params`` a list of buffers {name, dtype (a scalar ember dtype),
    shape (ints >= 0, size names that are in ``scalars``, or printed expressions),
    ``shape_is_var`` (bools, true exactly where the dimension is a size name),
    ``shape_vars`` (lists of names), ``shape_exprs`` (None or a valid expression tree over
    ``scalars``)}, all lists of the shape's length, and scalars {name in ``scalars``, dtype an
    integer dtype}."""
    if not isinstance(s, dict) or not _identifier(s.get("name")):
        raise ModelFormatError(f"{what} has no valid name")
    name = s["name"]
    where = f"function {name}"
    params, scalars = s.get("params"), s.get("scalars")
    if not isinstance(params, list) or not isinstance(scalars, list):
        raise ModelFormatError(f"{where} has no parameter list")
    if len(params) > MAX_PARAMS or len(scalars) > MAX_PARAMS:
        raise ModelFormatError(f"{where} has more than {MAX_PARAMS} parameters")
    size_names: list[str] = []
    for j, sc in enumerate(scalars):
        if not isinstance(sc, dict) or not _name(sc.get("name")):
            raise ModelFormatError(f"{where}: size {j} has no valid name")
        _dtype(sc.get("dtype"), f"{where}: size {sc['name']}", integer=True)
        size_names.append(sc["name"])
    if len(set(size_names)) != len(size_names):
        raise ModelFormatError(f"{where} names a size twice")
    known = set(size_names)
    for j, p in enumerate(params):
        if not isinstance(p, dict) or not _name(p.get("name")):
            raise ModelFormatError(f"{where}: parameter {j} has no valid name")
        pw = f"{where}: parameter {j} ({p['name']})"
        kind = p.get("kind")
        if kind == "scalar":
            _dtype(p.get("dtype"), pw, integer=True)
            if p["name"] not in known:
                raise ModelFormatError(f"{pw} is a scalar that is not among the function's sizes")
            continue
        if kind != "buffer":
            raise ModelFormatError(f"{pw} has kind {kind!r}, not 'buffer' or 'scalar'")
        _dtype(p.get("dtype"), pw)
        _check_shape(p, pw, known, len(size_names))


def _check_shape(p: dict[str, Any], pw: str, known: set[str], nsizes: int) -> None:
    shape, is_var, svars, exprs = p.get("shape"), p.get("shape_is_var"), p.get("shape_vars"), p.get("shape_exprs")
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        raise ModelFormatError(f"{pw} has no shape (a list of at most {MAX_RANK} dimensions)")
    rank = len(shape)
    for field, value in (("shape_is_var", is_var), ("shape_vars", svars), ("shape_exprs", exprs)):
        if not isinstance(value, list) or len(value) != rank:
            raise ModelFormatError(f"{pw}: {field} is not a list of {rank} entries, one per dimension")
    assert isinstance(is_var, list) and isinstance(svars, list) and isinstance(exprs, list)
    for d, dim in enumerate(shape):
        dw = f"{pw}, dimension {d}"
        if type(is_var[d]) is not bool:
            raise ModelFormatError(f"{dw}: shape_is_var holds {is_var[d]!r}, not a bool")
        if not isinstance(svars[d], list) or not all(_name(v) for v in svars[d]) or len(svars[d]) > MAX_PARAMS:
            raise ModelFormatError(f"{dw}: shape_vars is not a list of names")
        if type(dim) is int:
            if dim < 0 or dim >= 1 << 62:
                raise ModelFormatError(f"{dw} is {dim}, not a size")
            if is_var[d] or exprs[d] is not None:
                raise ModelFormatError(f"{dw} is the constant {dim} but is described as a size or an expression")
            continue
        if not isinstance(dim, str) or not dim or len(dim) > 4 * MAX_NAME:
            raise ModelFormatError(f"{dw} is {dim!r}, neither an integer nor a size name")
        if is_var[d]:
            if dim not in known:
                raise ModelFormatError(f"{dw} is the size {dim!r}, which is not among the function's sizes")
            if exprs[d] is not None:
                raise ModelFormatError(f"{dw} is the size {dim!r} but also has an expression")
        elif exprs[d] is not None:
            check_tree(exprs[d], nsizes, f"{dw} ({dim})")
