"""Preprocessor branches that a HIP compile never sees.

A CUDA source keeps code for other compilers and toolkits behind ``#if`` tests: ``#if CUDART_VERSION >=
12080`` (CUDA's version macros are undefined under HIP), ``#ifdef __CUDA_ARCH_LIST__``, ``#if __CUDA_ARCH__ >=
GGML_CUDA_CC_HOPPER`` (the translator turns ``__CUDA_ARCH__`` into ``(__HIP_DEVICE_COMPILE__ * 600)``). CUDA
references in such branches cannot matter to HIP. :func:`inactive_regions` finds the line ranges that no compile
environment (say HIP's device pass and its host pass) takes; :func:`integer_defines` collects the project's own
integer constants that those conditions compare against.

Conditions are evaluated with the C preprocessor's rules in three-valued logic: a value is an integer or unknown.
A name is known only when an environment or the project says so (or the file itself ``#define``s it on a path
that is surely taken); any other name might come from the command line and is unknown, so a branch is reported
only when it is certainly skipped. Malformed or unbalanced input never raises: what cannot be decided counts as
possibly compiled.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product

from .errors import HipifyError
from .tokenizer import CHAR, IDENT, NL, NUMBER, PUNCT, TRIVIA, Token, tokenize

__all__ = ["Region", "inactive_regions", "integer_defines"]


@dataclass(frozen=True)
class Region:
    """Lines ``first``..``last`` (1-based, inclusive) that no environment compiles.

    ``directive_line`` is the line of the ``#`` of the outermost skipped branch's directive and ``condition`` that
    directive as written (comments dropped, whitespace collapsed), e.g. ``"#if CUDART_VERSION >= 12080"``; an
    ``#else`` names its chain's opener: ``"#else (of #ifdef __CUDA_ARCH_LIST__)"``.
    """

    first: int
    last: int
    directive_line: int
    condition: str


# ---------------------------------------------------------------------------------------------------------------
# Directives


@dataclass(frozen=True)
class _Directive:
    name: str  # "if", "define", ...; "" for a null directive or a line marker
    line: int  # line of the '#'
    end_line: int  # last line of the directive (continuations and multi-line comments included)
    args: tuple[Token, ...]  # significant tokens after the name
    text: str  # "#if X >= 1", comments dropped and whitespace collapsed


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_IF = frozenset({"if", "ifdef", "ifndef"})
_ELSE = frozenset({"elif", "elifdef", "elifndef", "else"})


def _tokens(source: str) -> list[Token] | None:
    """The tokens of ``source``; an unterminated comment runs to the end; None when it cannot be tokenized."""
    for text in (source, source + "*/"):
        try:
            tokens = tokenize(text)
        except HipifyError:
            continue
        if text is not source and tokens:  # drop the "*/" that closed the comment (line numbers are unchanged)
            last = tokens[-1]
            last.text = last.text[:-2]
        return tokens
    return None


def _directives(tokens: list[Token]) -> list[_Directive]:
    """Every preprocessor directive line in ``tokens``, in order."""
    found: list[_Directive] = []
    i, n = 0, len(tokens)
    while i < n:
        tok = tokens[i]
        if not (tok.kind == PUNCT and tok.text == "#" and tok.directive == "#"):
            i += 1
            continue
        j = i + 1
        while j < n and tokens[j].kind != NL:
            j += 1
        body = tokens[i + 1 : j]
        sig = [t for t in body if t.kind not in TRIVIA]
        name = sig[0].text if sig and sig[0].kind == IDENT else ""
        if j < n:
            end_line = tokens[j].line
        else:
            last = tokens[j - 1]
            end_line = last.line + len(_LINE_BREAK.findall(last.text))
        rest = body[body.index(sig[0]) + 1 :] if name else body
        tail = re.sub(r"\s+", " ", "".join(" " if t.kind in TRIVIA else t.text for t in rest)).strip()
        text = "#" + name + (" " + tail if tail else "")
        found.append(_Directive(name, tok.line, end_line, tuple(sig[1:] if name else sig), text))
        i = j
    return found


def _closed_openers(directives: list[_Directive]) -> set[int]:
    """Indices of the ``#if``-type directives whose chain reaches its ``#endif``."""
    stack: list[int] = []
    closed: set[int] = set()
    for k, d in enumerate(directives):
        if d.name in _IF:
            stack.append(k)
        elif d.name == "endif" and stack:
            closed.add(stack.pop())
    return closed


# ---------------------------------------------------------------------------------------------------------------
# Values: an integer with C's signedness (None: could be either), or unknown


_MASK = (1 << 64) - 1
_SMAX = (1 << 63) - 1


@dataclass(frozen=True)
class _V:
    v: int | None  # None: unknown value
    u: bool | None  # unsigned (intmax_t vs uintmax_t); None: not known


_UNK = _V(None, None)
_TRUE = _V(1, False)
_FALSE = _V(0, False)


class _Malformed(Exception):
    """The condition is not a valid preprocessor expression."""


def _wrap(v: int, u: bool) -> int:
    v &= _MASK
    return v if u or v <= _SMAX else v - (1 << 64)


def _known(v: int, u: bool | None) -> _V:
    """A known value; with ``u`` None its type is whatever the value allows (negative: signed, past intmax_t:
    unsigned, else either)."""
    if u is None and not 0 <= v <= _SMAX:
        u = v > _SMAX
    return _V(v, u)


def _binary_exact(op: str, a: int, au: bool, b: int, bu: bool) -> tuple[int, bool] | None:
    """``a op b`` for operands of known type; None where the result is undefined (division by zero, bad shift)."""
    if op in ("<<", ">>"):
        if b < 0 or b >= 64:
            return None
        return _wrap(a << b if op == "<<" else (a & _MASK if au else a) >> b, au), au
    u = au or bu
    if u:
        a, b = a & _MASK, b & _MASK
    if op in ("==", "!=", "<", ">", "<=", ">="):
        result = {"==": a == b, "!=": a != b, "<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
        return int(result), False
    if op in ("/", "%"):
        if b == 0 or (not u and a == -(1 << 63) and b == -1):
            return None
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C truncates toward zero
        return _wrap(q if op == "/" else a - q * b, u), u
    ops: dict[str, Callable[[int, int], int]] = {
        "*": lambda x, y: x * y,
        "+": lambda x, y: x + y,
        "-": lambda x, y: x - y,
        "&": lambda x, y: x & y,
        "|": lambda x, y: x | y,
        "^": lambda x, y: x ^ y,
    }
    return _wrap(ops[op](a, b), u), u


def _signs(x: _V) -> list[bool]:
    return [x.u] if x.u is not None else [False, True]


def _binary(op: str, a: _V, b: _V) -> _V:
    """``a op b`` where each operand may be unknown or of unknown signedness."""
    if op == "&&":
        if a.v == 0 or b.v == 0:
            return _FALSE
        return _TRUE if a.v is not None and b.v is not None else _V(None, False)
    if op == "||":
        if (a.v is not None and a.v != 0) or (b.v is not None and b.v != 0):
            return _TRUE
        return _FALSE if a.v is not None and b.v is not None else _V(None, False)
    if a.v is None or b.v is None:
        return _UNK
    results = {_binary_exact(op, a.v, au, b.v, bu) for au, bu in product(_signs(a), _signs(b))}
    if None in results:
        return _UNK
    values = {r[0] for r in results if r is not None}
    signs = {r[1] for r in results if r is not None}
    if len(values) != 1:
        return _UNK
    return _known(values.pop(), signs.pop() if len(signs) == 1 else None)


def _unary(op: str, x: _V) -> _V:
    if x.v is None:
        return _V(None, False) if op == "!" else _UNK
    if op == "!":
        return _V(int(x.v == 0), False)
    if op == "+":
        return x
    results = {(_wrap(-x.v if op == "-" else ~x.v, u), u) for u in _signs(x)}
    values = {r[0] for r in results}
    if len(values) != 1:
        return _UNK
    return _known(values.pop(), x.u)


# ---------------------------------------------------------------------------------------------------------------
# Expressions

_BINARY_LEVELS: tuple[frozenset[str], ...] = (
    frozenset({"||"}),
    frozenset({"&&"}),
    frozenset({"|"}),
    frozenset({"^"}),
    frozenset({"&"}),
    frozenset({"==", "!="}),
    frozenset({"<", ">", "<=", ">="}),
    frozenset({"<<", ">>"}),
    frozenset({"+", "-"}),
    frozenset({"*", "/", "%"}),
)
_OPERATORS = frozenset().union(*_BINARY_LEVELS) | {"!", "~", "?", ":", "(", ")"}
_ALTERNATIVE = {
    "and": "&&",
    "or": "||",
    "not": "!",
    "bitand": "&",
    "bitor": "|",
    "xor": "^",
    "compl": "~",
    "not_eq": "!=",
}
_INT_RE = re.compile(
    r"(0[xX](?P<hex>[0-9a-fA-F]+)|0[bB](?P<bin>[01]+)|(?P<oct>0[0-7]*)|(?P<dec>[1-9][0-9]*))"
    r"(?P<suffix>(?:[uU](?:ll|LL|l|L|z|Z)?|(?:ll|LL|l|L|z|Z)[uU]?)?)"
)


def _integer_literal(text: str) -> _V:
    """The value and type of a preprocessor integer literal; raises _Malformed for anything else."""
    m = _INT_RE.fullmatch(text.replace("'", ""))
    if not m:
        raise _Malformed(text)
    if m["hex"]:
        value = int(m["hex"], 16)
    elif m["bin"]:
        value = int(m["bin"], 2)
    elif m["oct"]:
        value = int(m["oct"], 8)
    else:
        value = int(m["dec"])
    if value > _MASK:
        raise _Malformed(text)
    return _V(value, "u" in m["suffix"].lower() or value > _SMAX)


# A name's state for one environment at one point of the file.
_UNDEFINED = "undefined"  # known not to be defined: 0 in an expression
_DEFINED = "defined"  # defined, value unknown (function-like, or a body that is not an integer)
_UNKNOWN = "unknown"  # perhaps defined
_State = _V | tuple[Token, ...] | str  # _V: defined with that value; tuple: the file's own object-like body


_Item = _V | str  # an operand or an operator


class _Expander:
    """Turns a condition's tokens into operands and operators, expanding what ``lookup`` knows."""

    def __init__(self, lookup: Callable[[str], _State]) -> None:
        self.lookup = lookup
        self.budget = 10_000  # tokens produced, a guard against runaway expansion

    def run(self, tokens: Sequence[Token], hidden: frozenset[str] = frozenset()) -> list[_Item]:
        items: list[_Item] = []
        i, n = 0, len(tokens)
        while i < n:
            self.budget -= 1
            if self.budget < 0:
                raise _Malformed("expansion too long")
            tok = tokens[i]
            nxt = tokens[i + 1] if i + 1 < n else None
            if tok.kind == NUMBER:
                items.append(_integer_literal(tok.text))
            elif tok.kind == CHAR:
                items.append(_V(None, False))  # a character literal's value depends on the execution charset
            elif tok.kind == PUNCT:
                op = tok.text
                if op in "<>" and nxt is not None and nxt.text == op and nxt.start == tok.start + 1:
                    op, i = op + op, i + 1
                if op not in _OPERATORS:
                    raise _Malformed(op)
                items.append(op)
            elif tok.kind != IDENT:
                raise _Malformed(tok.text)
            elif tok.text == "defined":
                i = self._defined(tokens, i, items)
            elif tok.text in _ALTERNATIVE:
                items.append(_ALTERNATIVE[tok.text])
            elif nxt is not None and nxt.kind == PUNCT and nxt.text == "(":
                i = _matching_paren(tokens, i + 1)  # __has_include(...), __has_builtin(...), a macro call
                items.append(_UNK)
            elif tok.text in ("true", "false"):
                items.append(_TRUE if tok.text == "true" else _FALSE)
            elif tok.text in hidden:
                items.append(_UNK)  # a macro named in its own expansion
            else:
                state = self.lookup(tok.text)
                if isinstance(state, _V):
                    items.append(state)
                elif isinstance(state, tuple):
                    items.extend(self.run(state, hidden | {tok.text}))
                else:
                    items.append(_FALSE if state == _UNDEFINED else _UNK)
            i += 1
        return items

    def _defined(self, tokens: Sequence[Token], i: int, items: list[_Item]) -> int:
        """Appends the value of ``defined X`` / ``defined(X)`` starting at ``i``; returns its last index."""
        j = i + 1
        paren = j < len(tokens) and tokens[j].text == "("
        if paren:
            j += 1
        if j >= len(tokens) or tokens[j].kind != IDENT:
            raise _Malformed("defined without a name")
        if paren:
            if j + 1 >= len(tokens) or tokens[j + 1].text != ")":
                raise _Malformed("defined( without )")
        state = self.lookup(tokens[j].text)
        if state == _UNKNOWN:
            items.append(_V(None, False))
        else:
            items.append(_FALSE if state == _UNDEFINED else _TRUE)
        return j + 1 if paren else j


def _matching_paren(tokens: Sequence[Token], i: int) -> int:
    """Index of the ')' that closes the '(' at ``i``; raises _Malformed when there is none."""
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].text == "(":
            depth += 1
        elif tokens[j].text == ")":
            depth -= 1
            if depth == 0:
                return j
    raise _Malformed("unbalanced parentheses")


class _Parser:
    """Precedence climbing over expanded items; every operand is evaluated (values have no side effects)."""

    def __init__(self, items: list[_Item]) -> None:
        self.items = items
        self.pos = 0

    def parse(self) -> _V:
        value = self.conditional()
        if self.pos != len(self.items):
            raise _Malformed("trailing tokens")
        return value

    def peek(self) -> _Item | None:
        return self.items[self.pos] if self.pos < len(self.items) else None

    def expect(self, op: str) -> None:
        if self.peek() != op:
            raise _Malformed(f"expected {op}")
        self.pos += 1

    def conditional(self) -> _V:
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.pos += 1
        yes = self.conditional()
        self.expect(":")
        no = self.conditional()
        u: bool | None = True if yes.u or no.u else (False if yes.u is False and no.u is False else None)
        candidates = [yes, no] if cond.v is None else [yes if cond.v else no]
        if any(c.v is None for c in candidates):
            return _UNK
        signs = [u] if u is not None else [False, True]  # an unknown other branch may make the result unsigned
        values = {_wrap(c.v, s) for c in candidates if c.v is not None for s in signs}
        return _known(values.pop(), u) if len(values) == 1 else _UNK

    def binary(self, level: int) -> _V:
        if level == len(_BINARY_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while isinstance(op := self.peek(), str) and op in _BINARY_LEVELS[level]:
            self.pos += 1
            left = _binary(op, left, self.binary(level + 1))
        return left

    def unary(self) -> _V:
        item = self.peek()
        if item is None:
            raise _Malformed("missing operand")
        self.pos += 1
        if isinstance(item, _V):
            return item
        if item in ("!", "~", "-", "+"):
            return _unary(item, self.unary())
        if item == "(":
            value = self.conditional()
            self.expect(")")
            return value
        raise _Malformed(f"unexpected {item}")


def _evaluate(tokens: Sequence[Token], lookup: Callable[[str], _State]) -> int | None:
    """The value of a condition (0 or not) or None when it is unknown or malformed."""
    if not tokens:
        return None
    try:
        return _Parser(_Expander(lookup).run(tokens)).parse().v
    except (_Malformed, RecursionError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# The project's integer constants


def _guard_span(directives: list[_Directive], tokens: list[Token]) -> tuple[int, int] | None:
    """(opener, endif) indices of an include guard wrapping the whole file, or None."""
    if len(directives) < 3:
        return None
    first, second = directives[0], directives[1]
    args = [t.text for t in first.args]
    if first.name == "ifndef" and len(args) == 1:
        guard = args[0]
    elif first.name == "if" and len(args) in (3, 5) and args[:2] == ["!", "defined"]:
        guard = args[-1] if len(args) == 3 else args[3]
        if len(args) == 5 and (args[2], args[4]) != ("(", ")"):
            return None
    else:
        return None
    if second.name != "define" or not second.args or second.args[0].text != guard:
        return None
    first_sig = next(t for t in tokens if t.kind not in TRIVIA)
    if first_sig.line != first.line:
        return None  # code before the guard
    depth = 0
    for k, d in enumerate(directives):
        if d.name in _IF:
            depth += 1
        elif d.name == "endif":
            depth -= 1
            if depth == 0:
                later = [t for t in tokens if t.kind not in TRIVIA and t.line > d.end_line]
                return (0, k) if not later else None
    return None


def _is_atomic(body: Sequence[Token]) -> bool:
    """True for a body whose value does not depend on the operators around its use: unary operators on one
    literal or name, or one parenthesised expression."""
    texts = [t.text for t in body]
    while texts and texts[0] in ("-", "+", "~", "!"):
        texts = texts[1:]
    if len(texts) == 1:
        return body[-1].kind in (NUMBER, IDENT)
    if len(texts) < 3 or texts[0] != "(":
        return False
    try:
        return _matching_paren(body, len(body) - len(texts)) == len(body) - 1
    except _Malformed:
        return False


def integer_defines(sources: Iterable[str]) -> dict[str, int | None]:
    """The object-like macros that ``sources`` (a project's files) ``#define``, by name.

    A name maps to its integer value when every definition of it sits outside any ``#if`` block (an include guard
    wrapping a whole file does not count) and has the same value: one integer literal (hex, octal, binary, with
    ``u``/``l`` suffixes and digit separators), optionally behind unary operators, or a parenthesised expression
    of such literals and of other names with values, e.g. ``(GGML_CUDA_CC_OFFSET_AMD + 0x900)``. It maps to None
    (value and defined-ness unknown) when a definition is conditional, function-like or of any other body,
    definitions disagree, or the name is ``#undef``'d anywhere. An unparenthesised expression such as ``A + 1``
    gives None too: its value depends on the operators around each use. Names no file defines are absent.
    """
    bodies: dict[str, list[tuple[Token, ...] | None]] = {}
    for source in sources:
        tokens = _tokens(source)
        if tokens is None:  # untokenizable: every name it defines or undefines is unknown
            for m in re.finditer(r"^[ \t]*#[ \t]*(?:define|undef)[ \t]+([A-Za-z_]\w*)", source, re.MULTILINE):
                bodies.setdefault(m.group(1), []).append(None)
            continue
        directives = _directives(tokens)
        guard = _guard_span(directives, tokens)
        depth = 0
        for k, d in enumerate(directives):
            if d.name in _IF:
                depth += 1
            elif d.name == "endif":
                depth = max(depth - 1, 0)
            elif d.name in ("define", "undef") and d.args and d.args[0].kind == IDENT:
                name = d.args[0].text
                top = depth == 0 or (guard is not None and depth == 1 and guard[0] < k < guard[1])
                body = d.args[1:]
                function_like = bool(body) and body[0].text == "(" and body[0].start == d.args[0].start + len(name)
                keep = d.name == "define" and top and not function_like and _is_atomic(body)
                bodies.setdefault(name, []).append(tuple(body) if keep else None)
    values: dict[str, int | None] = {}
    busy: set[str] = set()

    def value(name: str) -> int | None:
        if name in values:
            return values[name]
        if name in busy or name not in bodies:
            return None
        busy.add(name)
        results = set()
        for body in bodies[name]:
            result = None if body is None else _evaluate(body, lookup)
            results.add(result)
        busy.discard(name)
        values[name] = results.pop() if len(results) == 1 else None
        return values[name]

    def lookup(name: str) -> _State:
        v = value(name)
        return _UNKNOWN if v is None else _known(v, None)

    for name in bodies:
        value(name)
    return values


# ---------------------------------------------------------------------------------------------------------------
# Inactive branches

_NOT, _MAYBE, _TAKEN = 0, 1, 2  # a branch (or the path to it) in one environment
_NONE = 0  # chain states: no branch taken yet, maybe one, surely one (_MAYBE, _TAKEN)


@dataclass
class _Frame:
    opener: str
    closed: bool  # the chain reaches its #endif (else every branch counts as maybe taken)
    parent: tuple[int, ...]  # path status of the enclosing branch, per environment
    chain: list[int]  # per environment
    seen_else: bool = False
    path: tuple[int, ...] = ()  # this branch's path status, per environment
    body_first: int = 0
    directive_line: int = 0
    text: str = ""


def inactive_regions(
    source: str, environments: Sequence[Mapping[str, int | None]], project: Mapping[str, int | None]
) -> list[Region]:
    """The line ranges of ``source`` inside conditional branches that no environment compiles.

    Each environment maps a macro name to its value (int) or None (known undefined), e.g. HIP's device pass
    ``{"__CUDA_ARCH__": 600, "CUDART_VERSION": None}`` and its host pass ``{"__CUDA_ARCH__": None, ...}``.
    ``project`` is :func:`integer_defines` of the project's files: an int is a constant the project defines, None
    a name it defines in some other way. A name the project defines is trusted from an environment only where
    both agree (a project header may define ``CUDART_VERSION`` itself); a name in neither is unknown. The file's
    own ``#define`` and ``#undef`` lines apply from where they stand on the paths surely taken.

    A branch is inactive when in every environment it or an enclosing branch is surely not taken (its condition is
    surely false, or an earlier branch of its chain is surely taken). Regions are the bodies of the outermost
    inactive branches (directive lines excluded), in order, adjacent ones merged. Unbalanced or malformed
    directives never raise: a stray ``#else``/``#elif``/``#endif`` is ignored, a chain without its ``#endif`` and
    a branch after an ``#else`` count as maybe compiled, so does a malformed condition, and so does the whole file
    when it cannot be tokenized. Raises ValueError when ``environments`` is empty.
    """
    if not environments:
        raise ValueError("inactive_regions needs at least one environment")
    tokens = _tokens(source)
    if tokens is None:
        return []
    directives = _directives(tokens)
    closed = _closed_openers(directives)
    count = len(environments)
    overlays: list[dict[str, _State]] = [{} for _ in environments]

    def lookup_in(e: int) -> Callable[[str], _State]:
        env = environments[e]

        def lookup(name: str) -> _State:
            if name in overlays[e]:
                return overlays[e][name]
            if name in project:
                known = project[name]
                if known is None or (name in env and env[name] != known):
                    return _UNKNOWN
                return _known(known, None)
            if name in env:
                v = env[name]
                return _UNDEFINED if v is None else _V(v, v > _SMAX)
            return _UNKNOWN

        return lookup

    lookups = [lookup_in(e) for e in range(count)]
    frames: list[_Frame] = []
    regions: list[Region] = []

    def current() -> tuple[int, ...]:
        return frames[-1].path if frames else (_TAKEN,) * count

    def condition(d: _Directive, e: int) -> int | None:
        if d.name == "else":
            return 1
        if d.name in ("if", "elif"):
            return _evaluate(d.args, lookups[e])
        if len(d.args) != 1 or d.args[0].kind != IDENT:
            return None
        state = lookups[e](d.args[0].text)
        if state == _UNKNOWN:
            return None
        defined = state != _UNDEFINED
        return int(defined if d.name in ("ifdef", "elifdef") else not defined)

    def open_branch(frame: _Frame, d: _Directive, malformed: bool) -> None:
        path = []
        for e in range(count):
            if frame.parent[e] == _NOT:
                path.append(_NOT)
                continue
            if malformed or not frame.closed:
                local = _MAYBE
            elif frame.chain[e] == _TAKEN:
                local = _NOT
            else:
                c = condition(d, e)
                if c is None:
                    local, frame.chain[e] = _MAYBE, max(frame.chain[e], _MAYBE)
                elif c == 0:
                    local = _NOT
                else:
                    local = _TAKEN if frame.chain[e] == _NONE else _MAYBE
                    frame.chain[e] = _TAKEN
            path.append(min(local, frame.parent[e]))
        frame.path = tuple(path)
        frame.body_first = d.end_line + 1
        frame.directive_line = d.line
        frame.text = d.text if d.name in _IF else f"{d.text} (of {frame.opener})" if d.name == "else" else d.text

    def close_branch(frame: _Frame, next_line: int) -> None:
        if all(p == _NOT for p in frame.path) and not all(p == _NOT for p in frame.parent):
            if frame.body_first <= next_line - 1:
                regions.append(Region(frame.body_first, next_line - 1, frame.directive_line, frame.text))

    for k, d in enumerate(directives):
        if d.name in _IF:
            frame = _Frame(d.text, k in closed, current(), [_NONE] * count)
            frames.append(frame)
            open_branch(frame, d, malformed=False)
        elif d.name in _ELSE and frames:
            frame = frames[-1]
            close_branch(frame, d.line)
            open_branch(frame, d, malformed=frame.seen_else)
            frame.seen_else = frame.seen_else or d.name == "else"
        elif d.name == "endif" and frames:
            close_branch(frames.pop(), d.line)
        elif d.name in ("define", "undef") and d.args and d.args[0].kind == IDENT:
            _apply_define(d, current(), overlays)
    return _merge(regions)


def _apply_define(d: _Directive, path: tuple[int, ...], overlays: list[dict[str, _State]]) -> None:
    """Records a ``#define``/``#undef`` in each environment whose path to it is surely (or maybe) taken."""
    name = d.args[0].text
    body = d.args[1:]
    function_like = bool(body) and body[0].text == "(" and body[0].start == d.args[0].start + len(name)
    state: _State
    if d.name == "undef":
        state = _UNDEFINED
    elif function_like:
        state = _DEFINED
    else:
        state = tuple(body)
    for e, status in enumerate(path):
        if status == _TAKEN:
            overlays[e][name] = state
        elif status == _MAYBE:
            overlays[e][name] = _UNKNOWN


def _merge(regions: list[Region]) -> list[Region]:
    """Regions sorted, with touching or overlapping ones joined (the first keeps its directive)."""
    merged: list[Region] = []
    for r in sorted(regions, key=lambda r: (r.first, r.last)):
        if merged and r.first <= merged[-1].last + 1:
            prev = merged[-1]
            merged[-1] = Region(prev.first, max(prev.last, r.last), prev.directive_line, prev.condition)
        else:
            merged.append(r)
    return merged
