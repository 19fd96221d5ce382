"""The compile-time shortcuts of the loop IR give what the slow paths give.

* The simplifier remembers linear forms (``_Simplifier._lin``): each sum is decomposed once, and
  a sum it rebuilt from a form gets that form back without a walk (``Linear.reparsed``). The
  result of simplification must be the very same tree (same printed text, same structure, same
  variables) as with no remembered forms, on random expressions with and without ranges.
* ``Linear.reparsed`` equals decomposing ``to_expr()`` again: terms in the same order, the same
  atoms, coefficients, constant and type.
* Visitors dispatch through a per-class table: a subclass's handler wins over its base's, and
  walks visit the same nodes in the same order as before.
* ``DataType`` remembers its text and its limits: equal to computing them.
* ``share_identical_kernels`` computes one key for functions that share body and parameters:
  it keeps and aliases exactly what comparing every function's printed text keeps and aliases.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember import te
from ember.arith.linear import Linear, structural_key
from ember.arith.simplifier import _Simplifier
from ember.ir import expr as E
from ember.ir import stmt as S
from ember.ir.dtypes import DataType, dtype
from ember.ir.printer import expr_str
from ember.ir.visitor import Mutator, Visitor, free_vars, post_order_visit, substitute

VARS = [E.Var(n, E.INT32) for n in "xyz"]


class _Uncached(_Simplifier):
    """The simplifier with no remembered linear forms (the reference)."""

    def linear(self, e: E.PrimExpr) -> Linear:
        return self._linear(e)

    def rebuild(self, lin: Linear) -> E.PrimExpr:
        return lin.to_expr()


def int_exprs() -> st.SearchStrategy[E.PrimExpr]:
    leaves = st.one_of(st.sampled_from(VARS), st.integers(-20, 20).map(lambda v: E.IntImm(E.INT32, v)))

    def extend(children: st.SearchStrategy[E.PrimExpr]) -> st.SearchStrategy[E.PrimExpr]:
        ops = st.sampled_from([E.Add, E.Sub, E.Mul, E.Add, E.Sub])
        arith = st.tuples(ops, children, children).map(lambda t: t[0](t[1], t[2], E.INT32))
        by_const = st.tuples(st.sampled_from([E.FloorDiv, E.FloorMod, E.Mul]), children, st.integers(1, 9)).map(
            lambda t: t[0](t[1], E.IntImm(E.INT32, t[2]), E.INT32))
        minmax = st.tuples(st.sampled_from([E.Min, E.Max]), children, children).map(
            lambda t: t[0](t[1], t[2], E.INT32))
        cmp = st.tuples(st.sampled_from([E.LT, E.LE, E.EQ]), children, children).map(
            lambda t: E.Select(t[0](t[1], t[2], E.BOOL), t[1], t[2], E.INT32))
        return st.one_of(arith, arith, by_const, minmax, cmp)

    return st.recursive(leaves, extend, max_leaves=24)


def _ranges() -> st.SearchStrategy[dict[E.Var, tuple[int, int]]]:
    pair = st.tuples(st.integers(-8, 8), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1]))
    return st.one_of(st.just({}), st.fixed_dictionaries({v: pair for v in VARS}))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int_exprs(), _ranges())
def test_remembered_linear_forms_give_the_same_tree(e, ranges):
    fast = _Simplifier(dict(ranges)).visit(e)
    slow = _Uncached(dict(ranges)).visit(e)
    assert expr_str(fast) == expr_str(slow)
    assert structural_key(fast) == structural_key(slow)
    assert fast.dtype == slow.dtype


def test_a_long_sum_is_simplified_the_same():
    x, y = VARS[0], VARS[1]
    e: E.PrimExpr = E.IntImm(E.INT32, 0)
    for k in range(60):  # a long chain of additions
        e = E.Add(e, E.Mul(x if k % 2 else y, E.IntImm(E.INT32, k % 7 - 3), E.INT32), E.INT32)
        e = E.Sub(e, E.FloorDiv(x, E.IntImm(E.INT32, 4), E.INT32), E.INT32)
    fast = _Simplifier({}).visit(e)
    assert expr_str(fast) == expr_str(_Uncached({}).visit(e))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(5)), st.integers(-6, 6).filter(bool)), max_size=6),
       st.integers(-50, 50), st.sampled_from(["int32", "int64"]))
def test_reparsed_equals_decomposing_the_rebuilt_expression(terms, const, dt):
    t = dtype(dt)
    atoms = [E.Var(n, t) for n in "abcde"]
    lin = Linear(t, {}, const)
    for k, c in terms:
        lin = lin.add(Linear(t, {structural_key(atoms[k]): (atoms[k], c)}, 0))
    want = _Uncached({}).linear(lin.to_expr())
    got = lin.reparsed()
    assert got is not None
    assert list(got.terms) == list(want.terms)
    assert all(got.terms[k][0] is want.terms[k][0] and got.terms[k][1] == want.terms[k][1] for k in want.terms)
    assert (got.const, got.dtype) == (want.const, want.dtype)


def test_reparsed_refuses_a_zero_coefficient():
    a = E.Var("a")
    assert Linear(E.INT32, {structural_key(a): (a, 0)}, 1).reparsed() is None


def test_linear_hands_out_copies():
    x = VARS[0]
    s = _Simplifier({})
    e = E.Add(x, E.IntImm(E.INT32, 3), E.INT32)
    first = s.linear(e)
    first.const = 99
    first.terms.clear()
    again = s.linear(e)
    assert again.const == 3 and len(again.terms) == 1


def test_handlers_dispatch_per_class():
    seen: list[str] = []

    class Base(Visitor):
        def visit_Var(self, v: E.Var) -> None:
            seen.append("base:" + v.name)

    class Child(Base):
        def visit_Var(self, v: E.Var) -> None:
            seen.append("child:" + v.name)

    class Plain(Base):
        pass

    x, y = VARS[0], VARS[1]
    e = E.Add(x, y, E.INT32)
    Base().visit(e)
    Child().visit(e)
    Plain().visit(e)
    assert seen == ["base:x", "base:y", "child:x", "child:y", "base:x", "base:y"]


def test_walks_visit_in_the_same_order():
    n = te.var("n")
    A = te.placeholder((n, 16), name="A")
    B = te.compute((n, 16), lambda i, j: A[i, j] * 2 + A[i, (j + 1) % 16], name="B")
    s = te.create_schedule(B.op)
    from ember.lowering import lower

    f = lower(s, [A, B, n])
    order: list[str] = []
    post_order_visit(f.body, lambda node: order.append(type(node).__name__))
    assert order[-1] == type(f.body).__name__ and "BufferStore" in order and "BufferLoad" in order
    # the same nodes in the same order as a plain walk over the dataclass fields
    nodes: list[object] = []
    post_order_visit(f.body, nodes.append)
    ref: list[object] = []
    _reference_post_order(f.body, ref)
    assert len(nodes) == len(ref) and all(x is y for x, y in zip(nodes, ref))
    assert {v.name for v in free_vars(f.body)} >= {"n"}
    i = next(x for x in nodes if isinstance(x, S.For)).loop_var
    swapped = substitute(f.body, {i: E.IntImm(i.dtype, 0)})
    assert i not in free_vars(swapped)


def _reference_post_order(node: object, out: list[object]) -> None:
    skip = ("dtype", "buffer", "producer", "combiner", "axis", "uid", "name")
    for fld in dataclasses.fields(node):  # type: ignore[arg-type]
        if fld.name in skip:
            continue
        value = getattr(node, fld.name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            for sub in (item if isinstance(item, tuple) else (item,)):
                if isinstance(sub, (E.PrimExpr, S.Stmt)):
                    _reference_post_order(sub, out)
    out.append(node)


def test_mutator_shares_unchanged_nodes():
    x, y = VARS[0], VARS[1]
    e = E.Add(E.Mul(x, y, E.INT32), y, E.INT32)

    class Rename(Mutator):
        def visit_Var(self, v: E.Var) -> E.PrimExpr:
            return VARS[2] if v is x else v

    out = Rename().visit(e)
    assert out.b is e.b and out.a is not e.a and out.a.a is VARS[2]
    assert Mutator().visit(e) is e


def test_datatype_text_and_limits_match_computing_them():
    for name in ["bool", "int8", "uint8", "int32", "int64", "uint64", "float16", "bfloat16", "float32x4",
                 "float64", "float8_e4m3fn", "int4", "float32"]:
        t = dtype(name)
        fresh = DataType(t.kind, t.bits, t.lanes)
        assert str(t) == str(fresh) == t._text()
        assert t.max_value() == fresh._max_value() and t.min_value() == fresh._min_value()
        assert str(t) == str(t)  # a remembered text


def test_shared_kernels_match_comparing_every_text():
    from ember.backends import loop_ir_types
    from ember.ir.buffer import Buffer
    from ember.model.group_lowering import share_identical_kernels

    a = Buffer("a", E.FLOAT32, (E.IntImm(E.INT32, 4),), (), "global")
    i = E.Var("i")
    body = S.For(i, E.IntImm(E.INT32, 0), E.IntImm(E.INT32, 4), S.ForKind.SERIAL,
                 S.BufferStore(a, E.FloatImm(E.FLOAT32, 1.0), (i,)))
    other = S.For(i, E.IntImm(E.INT32, 0), E.IntImm(E.INT32, 4), S.ForKind.SERIAL,
                  S.BufferStore(a, E.FloatImm(E.FLOAT32, 2.0), (i,)))
    twin = S.For(i, E.IntImm(E.INT32, 0), E.IntImm(E.INT32, 4), S.ForKind.SERIAL,
                 S.BufferStore(a, E.FloatImm(E.FLOAT32, 1.0), (i,)))  # equal text, other objects
    attrs = {"target": "cuda"}
    funcs = [S.PrimFunc("k0", [a], body, dict(attrs)), S.PrimFunc("k1", [a], body, dict(attrs)),
             S.PrimFunc("k2", [a], other, dict(attrs)), S.PrimFunc("k3", [a], twin, dict(attrs)),
             S.PrimFunc("k4", [a], body, {"target": "rocm"})]
    steps = [{"kind": "kernel", "func": f.name} for f in funcs]
    kept, new_steps = share_identical_kernels(funcs, steps)
    # the reference: every function's printed text and types
    ref: dict[tuple[str, str], str] = {}
    alias = {}
    for f in funcs:
        key = (str(f).replace(f.name, "\x00", 1), loop_ir_types([f]))
        alias[f.name] = ref.setdefault(key, f.name)
    assert [f.name for f in kept] == sorted(set(alias.values()), key=lambda n: int(n[1:]))
    assert [st_["func"] for st_ in new_steps] == [alias[f.name] for f in funcs]


def test_statement_walk_matches_the_full_walk():
    from ember.ir.visitor import post_order_stmts

    n = te.var("n")
    A = te.placeholder((n, 64), name="A")
    B = te.compute((n, 64), lambda i, j: A[i, j] + 1, name="B")
    C = te.compute((n, 64), lambda i, j: B[i, j] * 2, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[1], factor=16)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], bx)
    s[B].set_scope("shared")
    from ember.lowering import lower

    f = lower(s, [A, C, n], target="cuda")
    full: list[object] = []
    post_order_visit(f.body, lambda x: full.append(x) if isinstance(x, S.Stmt) else None)
    stmts: list[object] = []
    post_order_stmts(f.body, stmts.append)
    assert len(stmts) == len(full) > 3 and all(a is b for a, b in zip(stmts, full))
    assert any(isinstance(x, S.Allocate) for x in stmts)
