"""Readable text for the loop IR (Python-like, one statement per line)."""

from __future__ import annotations

from typing import Any

from . import expr as E
from . import stmt as S

_BIN = {
    E.Add: "+",
    E.Sub: "-",
    E.Mul: "*",
    E.Div: "/",
    E.Mod: "%",
    E.FloorDiv: "//",
    E.FloorMod: "%%",
    E.EQ: "==",
    E.NE: "!=",
    E.LT: "<",
    E.LE: "<=",
    E.And: "and",
    E.Or: "or",
}


def expr_str(e: Any) -> str:
    """One expression as text."""
    if isinstance(e, E.IntImm):
        if e.dtype.is_bool:
            return "True" if e.value else "False"
        return str(e.value) if e.dtype.bits in (32, 64) and e.dtype.kind == "int" else f"{e.dtype}({e.value})"
    if isinstance(e, E.FloatImm):
        return f"{e.value!r}" if e.dtype.bits == 32 else f"{e.dtype}({e.value!r})"
    if isinstance(e, E.StringImm):
        return repr(e.value)
    if isinstance(e, E.Var):
        return e.name
    if type(e) in _BIN:
        op = _BIN[type(e)]
        if op == "%%":
            return f"floormod({expr_str(e.a)}, {expr_str(e.b)})"
        if op == "%":
            return f"truncmod({expr_str(e.a)}, {expr_str(e.b)})"
        if op == "/" and not e.dtype.is_float:
            return f"truncdiv({expr_str(e.a)}, {expr_str(e.b)})"
        return f"({expr_str(e.a)} {op} {expr_str(e.b)})"
    if isinstance(e, E.Min):
        return f"min({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, E.Max):
        return f"max({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, E.Not):
        return f"not {expr_str(e.a)}"
    if isinstance(e, E.Select):
        return f"select({expr_str(e.condition)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, E.Call):
        return f"{e.op}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, E.Let):
        return f"(let {e.var.name} = {expr_str(e.value)} in {expr_str(e.body)})"
    if isinstance(e, E.Ramp):
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if isinstance(e, E.Broadcast):
        return f"x{e.lanes}({expr_str(e.value)})"
    if isinstance(e, E.BufferLoad):
        idx = ", ".join(expr_str(i) for i in e.indices)
        return f"{e.buffer.name}[{idx}]"
    if isinstance(e, E.ProducerLoad):
        idx = ", ".join(expr_str(i) for i in e.indices)
        return f"{e.producer.name}[{idx}]"
    if isinstance(e, E.Reduce):
        src = ", ".join(expr_str(s) for s in e.source)
        axes = ", ".join(iv.var.name for iv in e.axis)
        cond = f", where={expr_str(e.condition)}" if e.condition is not None else ""
        return f"reduce({e.combiner.name}, {src}, axis=[{axes}]{cond})"
    return f"<{type(e).__name__}>"


def _lines(s: Any, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(s, S.SeqStmt):
        for x in s.seq:
            _lines(x, indent, out)
    elif isinstance(s, S.For):
        kind = "" if s.kind is S.ForKind.SERIAL else f"  # {s.kind.value}"
        if dict(s.annotations).get(S.STATIC_PARALLEL):
            kind += " (static)"
        if s.thread_tag:
            kind = f"  # bound to {s.thread_tag}"
        lo = expr_str(s.min)
        rng = f"range({expr_str(s.extent)})" if lo == "0" else f"range({lo}, {lo} + {expr_str(s.extent)})"
        out.append(f"{pad}for {s.loop_var.name} in {rng}:{kind}")
        _lines(s.body, indent + 1, out)
    elif isinstance(s, S.BufferStore):
        idx = ", ".join(expr_str(i) for i in s.indices)
        out.append(f"{pad}{s.buffer.name}[{idx}] = {expr_str(s.value)}")
    elif isinstance(s, S.ProducerStore):
        idx = ", ".join(expr_str(i) for i in s.indices)
        out.append(f"{pad}{s.producer.name}[{idx}] = {expr_str(s.value)}")
    elif isinstance(s, S.IfThenElse):
        out.append(f"{pad}if {expr_str(s.condition)}:")
        _lines(s.then_case, indent + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _lines(s.else_case, indent + 1, out)
    elif isinstance(s, S.LetStmt):
        out.append(f"{pad}{s.var.name} = {expr_str(s.value)}")
        _lines(s.body, indent, out)
    elif isinstance(s, S.Allocate):
        b = s.buffer
        dims = ", ".join(expr_str(x) for x in b.shape)
        out.append(f"{pad}{b.name} = allocate({b.dtype}, [{dims}], scope={b.scope!r})")
        _lines(s.body, indent, out)
    elif isinstance(s, S.ProducerRealize):
        dims = ", ".join(f"{expr_str(m)}:{expr_str(m)}+{expr_str(x)}" for m, x in s.bounds)
        out.append(f"{pad}realize {s.producer.name}[{dims}] in {s.scope!r}:")
        _lines(s.body, indent + 1, out)
    elif isinstance(s, S.Evaluate):
        out.append(f"{pad}{expr_str(s.value)}")
    elif isinstance(s, S.AttrStmt):
        out.append(f"{pad}# attr {s.key} = {s.value}")
        _lines(s.body, indent, out)
    elif isinstance(s, S.Assert):
        out.append(f"{pad}assert {expr_str(s.condition)}, {s.message!r}")
        _lines(s.body, indent, out)
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def stmt_str(s: Any, indent: int = 0) -> str:
    """A statement as indented text."""
    out: list[str] = []
    _lines(s, indent, out)
    return "\n".join(out)


def func_str(f: Any) -> str:
    """A PrimFunc as text: signature, then the body."""
    params = []
    for p in f.params:
        if isinstance(p, E.Var):
            params.append(f"{p.name}: {p.dtype}")
        else:
            dims = ", ".join(expr_str(x) for x in p.shape)
            params.append(f"{p.name}: {p.dtype}[{dims}]")
    head = f"def {f.name}({', '.join(params)}):"
    attrs = [f"  # {k}: {v}" for k, v in f.attrs.items() if isinstance(v, (str, int, float))]
    return "\n".join([head, *attrs, stmt_str(f.body, 1) or "  pass"])
