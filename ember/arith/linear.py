"""Linear forms of integer expressions: ``sum(coef * atom) + constant``.

An atom is any integer expression that is not a sum or a product by a constant (a variable, a
floordiv, a load, a product of two variables...). Atoms are compared structurally through
:func:`structural_key`, so ``i*4 + j - i*4`` collapses to ``j``.
"""

from __future__ import annotations

from typing import Any

from ..ir import expr as E
from ..ir.dtypes import DataType

#: keys of composite expressions already computed: ``id(node) -> (node, key)``. The node is
#: held so its id is not reused while the entry lives; nodes are immutable, so a key never goes
#: stale. Cleared when it grows past ``_KEY_CACHE_LIMIT`` entries.
_KEY_CACHE: dict[int, tuple[Any, Any]] = {}
_KEY_CACHE_LIMIT = 200_000
_KEY_FIELDS: dict[type, tuple[str, ...]] = {}


def structural_key(e: Any) -> Any:
    """A hashable key equal for structurally equal expressions (variables by identity)."""
    if isinstance(e, E.Var):
        return ("v", e.uid)
    if isinstance(e, E.IntImm):
        return ("i", str(e.dtype), e.value)
    if isinstance(e, E.FloatImm):
        return ("f", str(e.dtype), e.value)
    if isinstance(e, E.PrimExpr):
        hit = _KEY_CACHE.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        cls = type(e)
        names = _KEY_FIELDS.get(cls)
        if names is None:
            names = _KEY_FIELDS[cls] = tuple(n for n in getattr(cls, "__dataclass_fields__", {}) if n != "dtype")
        parts: list[Any] = [cls.__name__, str(e.dtype)]
        for name in names:
            v = getattr(e, name)
            if name == "buffer":
                parts.append(("buf", id(v)))
            elif name == "producer":
                parts.append(("prod", id(v)))
            elif isinstance(v, tuple):
                parts.append(tuple(structural_key(x) for x in v))
            else:
                parts.append(structural_key(v))
        key = tuple(parts)
        if len(_KEY_CACHE) >= _KEY_CACHE_LIMIT:
            _KEY_CACHE.clear()
        _KEY_CACHE[id(e)] = (e, key)
        return key
    if isinstance(e, (int, float, str)) or e is None:
        return e
    return ("obj", id(e))


def structural_equal(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same expression tree."""
    return a is b or structural_key(a) == structural_key(b)


class Linear:
    """``sum(coef * atom) + const`` over integer atoms of one dtype."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, dtype: DataType, terms: dict[Any, tuple[E.PrimExpr, int]] | None = None, const: int = 0):
        self.dtype = dtype
        self.terms: dict[Any, tuple[E.PrimExpr, int]] = terms if terms is not None else {}
        self.const = const

    @staticmethod
    def atom(e: E.PrimExpr) -> Linear:
        """The form ``1 * e``."""
        return Linear(e.dtype, {structural_key(e): (e, 1)}, 0)

    def copy(self) -> Linear:
        """An independent copy."""
        return Linear(self.dtype, dict(self.terms), self.const)

    def add(self, other: Linear, sign: int = 1) -> Linear:
        """self + sign * other."""
        out = self.copy()
        for k, (atom, c) in other.terms.items():
            prev = out.terms.get(k)
            nc = (prev[1] if prev else 0) + sign * c
            if nc == 0:
                out.terms.pop(k, None)
            else:
                out.terms[k] = (atom, nc)
        out.const += sign * other.const
        return out

    def scale(self, factor: int) -> Linear:
        """self * factor."""
        if factor == 0:
            return Linear(self.dtype)
        return Linear(self.dtype, {k: (a, c * factor) for k, (a, c) in self.terms.items()}, self.const * factor)

    @property
    def is_const(self) -> bool:
        """True when there are no atoms."""
        return not self.terms

    def reparsed(self) -> Linear | None:
        """The form that decomposing :meth:`to_expr`'s expression again gives: the same terms,
        positive coefficients first, then negative ones (each group in order), and the type of
        the expression's first leaf; None when a coefficient is zero (no such form is kept)."""
        if any(c == 0 for _, c in self.terms.values()):
            return None
        pos = {k: t for k, t in self.terms.items() if t[1] > 0}
        neg = {k: t for k, t in self.terms.items() if t[1] < 0}
        dtype = next(iter(pos.values()))[0].dtype if pos else self.dtype
        pos.update(neg)
        return Linear(dtype, pos, self.const)

    def to_expr(self) -> E.PrimExpr:
        """Rebuild an expression: positive terms first, constants last."""
        pos: list[E.PrimExpr] = []
        neg: list[E.PrimExpr] = []
        for atom, c in self.terms.values():
            if c == 1:
                pos.append(atom)
            elif c == -1:
                neg.append(atom)
            elif c > 0:
                pos.append(E.Mul(atom, E.IntImm(self.dtype, c), self.dtype))
            else:
                neg.append(E.Mul(atom, E.IntImm(self.dtype, -c), self.dtype))
        result: E.PrimExpr | None = None
        for p in pos:
            result = p if result is None else E.Add(result, p, self.dtype)
        for n in neg:
            result = E.Sub(result if result is not None else E.IntImm(self.dtype, 0), n, self.dtype)
        if result is None:
            return E.IntImm(self.dtype, self.const)
        if self.const > 0:
            result = E.Add(result, E.IntImm(self.dtype, self.const), self.dtype)
        elif self.const < 0:
            result = E.Sub(result, E.IntImm(self.dtype, -self.const), self.dtype)
        return result
