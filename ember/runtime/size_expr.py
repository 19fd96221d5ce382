"""Size expressions as JSON trees: GPU launch grids, workspace sizes, derived dimensions.

A compiled module describes the sizes it computes at call time (a GPU kernel's grid, a
workspace's byte count, a CPU argument dimension such as ``n + 4``) as data, never as source
code::

    ["const", 7]            an integer constant (|value| < 2**63)
    ["var", i]              the i-th size of the function's signature (its ``scalars`` list)
    [op, a, b]              op in add sub mul floordiv floormod truncdiv truncmod min max
                            lt le eq ne (comparisons give 1 or 0)
    ["select", c, t, f]     t when c is non-zero, else f

:func:`to_tree` builds a tree from loop IR at compile time (casts are dropped: sizes are exact
integers on the host). :func:`check_tree` validates a tree read from a file completely — known
operators, arity, variable indices in range, constants bounded, depth and node-count limits,
no division by a constant zero — and raises :class:`~ember.errors.ModelFormatError` otherwise.
:func:`compile_tree` and :func:`compile_grid` turn a *checked* tree into nested Python closures
once (no ``eval``), with the common shapes (a constant, a size, ``(n + 63) // 64``) as single
closures so that evaluating a launch grid costs what the generated source used to cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from ..errors import ArgumentError, EmberError, ModelFormatError

#: A tree: nested JSON lists (see the module docstring).
Tree = list[Any]
#: A compiled tree: sizes (the signature's ``scalars`` values, in order) -> integer.
IntFn = Callable[[Sequence[int]], int]

BINARY_OPS = ("add", "sub", "mul", "floordiv", "floormod", "truncdiv", "truncmod", "min", "max",
              "lt", "le", "eq", "ne")
_DIVISIONS = ("floordiv", "floormod", "truncdiv", "truncmod")
#: Deepest tree accepted (nesting of operators).
MAX_DEPTH = 64
#: Most nodes accepted in one tree.
MAX_NODES = 4096
#: Constants must lie in (-LIMIT, LIMIT).
CONST_LIMIT = 1 << 63


# -- compile time --------------------------------------------------------------------------------
def to_tree(e: Any, index: dict[Any, int]) -> Tree:
    """The tree of integer loop-IR expression ``e``; ``index`` maps each variable it may use to
    its position in the signature's ``scalars``. Raises EmberError for a variable not in
    ``index`` or an operation the host cannot evaluate (loads, floats, ...)."""
    from ..ir import expr as E

    binary = {E.Add: "add", E.Sub: "sub", E.Mul: "mul", E.FloorDiv: "floordiv", E.FloorMod: "floormod",
              E.Div: "truncdiv", E.Mod: "truncmod", E.Min: "min", E.Max: "max", E.LT: "lt", E.LE: "le",
              E.EQ: "eq", E.NE: "ne"}

    def go(x: Any) -> Tree:
        if isinstance(x, E.IntImm):
            return ["const", int(x.value)]
        if isinstance(x, E.Var):
            if x not in index:
                raise EmberError(f"the size expression {e} uses {x.name}, which is not a size of any argument")
            return ["var", index[x]]
        if isinstance(x, E.Cast) and (x.dtype.is_int or x.dtype.is_bool):
            return go(x.value)
        op = binary.get(type(x))
        if op is not None:
            return [op, go(x.a), go(x.b)]
        if isinstance(x, E.Select):
            return ["select", go(x.condition), go(x.true_value), go(x.false_value)]
        raise EmberError(f"the size expression {e} cannot be evaluated on the host ({type(x).__name__})")

    return go(e)


# -- load time -----------------------------------------------------------------------------------
def check_tree(tree: Any, nvars: int, what: str) -> None:
    """Raise ModelFormatError (naming ``what``) unless ``tree`` is a well-formed expression tree
    whose variables index a list of ``nvars`` sizes; afterwards :func:`compile_tree` accepts it
    and its evaluation can only fail on a zero divisor coming from the sizes themselves."""
    count = 0

    def bad(msg: str) -> ModelFormatError:
        return ModelFormatError(f"{what}: {msg}")

    def go(x: Any, depth: int) -> None:
        nonlocal count
        count += 1
        if count > MAX_NODES:
            raise bad(f"the expression has more than {MAX_NODES} nodes")
        if depth > MAX_DEPTH:
            raise bad(f"the expression is nested deeper than {MAX_DEPTH}")
        if not isinstance(x, list) or not x or not isinstance(x[0], str):
            raise bad(f"{_short(x)} is not an expression node ([op, operands...])")
        op = x[0]
        if op in ("const", "var"):
            if len(x) != 2 or type(x[1]) is not int:
                raise bad(f"{_short(x)}: {op} takes one integer")
            if op == "const" and not -CONST_LIMIT < x[1] < CONST_LIMIT:
                raise bad(f"the constant {_short(x[1])} is out of range")
            if op == "var" and not 0 <= x[1] < nvars:
                raise bad(f"size {x[1]} does not exist (the function has {nvars})")
            return
        if op in BINARY_OPS:
            if len(x) != 3:
                raise bad(f"{op} takes two operands, got {len(x) - 1}")
            if op in _DIVISIONS and _const(x[2]) == 0:
                raise bad(f"{op} by the constant 0")
        elif op == "select":
            if len(x) != 4:
                raise bad(f"select takes three operands, got {len(x) - 1}")
        else:
            raise bad(f"unknown operation {_short(op)}")
        for a in x[1:]:
            go(a, depth + 1)

    go(tree, 0)


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _const(t: Any) -> int | None:
    """The value of a constant node, else None."""
    if isinstance(t, list) and len(t) == 2 and t[0] == "const" and type(t[1]) is int:
        return int(t[1])
    return None


def _var(t: Any) -> int | None:
    if isinstance(t, list) and len(t) == 2 and t[0] == "var" and type(t[1]) is int:
        return int(t[1])
    return None


# -- call time -----------------------------------------------------------------------------------
def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _zero(op: str) -> ArgumentError:
    return ArgumentError(f"a launch or shape size divides by zero ({op}): an argument has a zero size "
                         "that the compiled code divides by")


def _binary(op: str, fa: IntFn, fb: IntFn) -> IntFn:  # noqa: C901 - one closure per operator
    if op == "add":
        return lambda s: fa(s) + fb(s)
    if op == "sub":
        return lambda s: fa(s) - fb(s)
    if op == "mul":
        return lambda s: fa(s) * fb(s)
    if op == "min":
        return lambda s: min(fa(s), fb(s))
    if op == "max":
        return lambda s: max(fa(s), fb(s))
    if op == "lt":
        return lambda s: int(fa(s) < fb(s))
    if op == "le":
        return lambda s: int(fa(s) <= fb(s))
    if op == "eq":
        return lambda s: int(fa(s) == fb(s))
    if op == "ne":
        return lambda s: int(fa(s) != fb(s))

    def divide(s: Sequence[int]) -> int:
        a, b = fa(s), fb(s)
        if b == 0:
            raise _zero(op)
        if op == "floordiv":
            return a // b
        if op == "floormod":
            return a % b
        q = _tdiv(a, b)
        return q if op == "truncdiv" else a - b * q

    return divide


def _with_const(op: str, fa: IntFn, c: int) -> IntFn | None:
    """``op(a, c)`` for a constant right operand, as one closure (the frequent forms)."""
    if op == "add":
        return lambda s: fa(s) + c
    if op == "sub":
        return lambda s: fa(s) - c
    if op == "mul":
        return lambda s: fa(s) * c
    if op == "floordiv":
        return lambda s: fa(s) // c
    if op == "floormod":
        return lambda s: fa(s) % c
    if op == "min":
        return lambda s: min(fa(s), c)
    if op == "max":
        return lambda s: max(fa(s), c)
    return None


def compile_tree(tree: Tree) -> IntFn:
    """A function of the sizes computing a tree already checked by :func:`check_tree`."""
    c = _const(tree)
    if c is not None:
        return lambda s: c
    v = _var(tree)
    if v is not None:
        return itemgetter(v)
    op = tree[0]
    if op == "select":
        fc, ft, ff = (compile_tree(t) for t in tree[1:])
        return lambda s: ft(s) if fc(s) else ff(s)
    a, b = tree[1], tree[2]
    cb = _const(b)
    if cb is not None:
        va = _var(a)
        # (n + k) // c: the ceiling division of every split loop, as one closure
        if op == "floordiv" and isinstance(a, list) and a[0] == "add" and _var(a[1]) is not None \
                and _const(a[2]) is not None:
            i, k = int(_var(a[1])), int(_const(a[2]))  # type: ignore[arg-type]
            return lambda s: (s[i] + k) // cb
        if va is not None and op in ("add", "mul", "floordiv"):
            if op == "add":
                return lambda s: s[va] + cb
            if op == "mul":
                return lambda s: s[va] * cb
            return lambda s: s[va] // cb
        fast = _with_const(op, compile_tree(a), cb)
        if fast is not None:
            return fast
    return _binary(op, compile_tree(a), compile_tree(b))


def compile_grid(trees: Sequence[Tree]) -> Callable[[Sequence[int]], tuple[int, ...]]:
    """A function of the sizes returning the tuple of the (checked) trees' values — a launch
    grid; constant components are folded into one prepared tuple where possible."""
    consts = [_const(t) for t in trees]
    if all(c is not None for c in consts):
        fixed = tuple(int(c) for c in consts)  # type: ignore[arg-type]
        return lambda s: fixed
    fns = [compile_tree(t) for t in trees]
    if len(trees) == 3 and consts[1] is not None and consts[2] is not None:
        g1, g2 = consts[1], consts[2]
        t0 = trees[0]
        if t0[0] == "floordiv" and isinstance(t0[1], list) and t0[1][0] == "add" and _var(t0[1][1]) is not None \
                and _const(t0[1][2]) is not None and _const(t0[2]) is not None:
            i, k, d = _var(t0[1][1]), _const(t0[1][2]), _const(t0[2])
            return lambda s: ((s[i] + k) // d, g1, g2)  # type: ignore[index, operator]
        f0 = fns[0]
        return lambda s: (f0(s), g1, g2)  # type: ignore[return-value]
    if len(fns) == 3:
        f0, f1, f2 = fns
        return lambda s: (f0(s), f1(s), f2(s))
    return lambda s: tuple(f(s) for f in fns)


def evaluate(tree: Tree, sizes: Sequence[int]) -> int:
    """The value of a checked tree for ``sizes`` (compiles it each time: for tests and
    one-off evaluations; hot paths keep the result of :func:`compile_tree`)."""
    return int(compile_tree(tree)(sizes))
