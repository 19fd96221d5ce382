"""A lossless C/C++ tokenizer for source-to-source translation.

Every character of the input belongs to exactly one token, so ``"".join(t.text for t in tokens)``
gives the input back byte for byte (line endings and spacing included). Comments, string and
character literals (with encoding prefixes and raw strings) and ``#include`` header names are
single tokens, so a translator that rewrites only ``ident`` tokens never touches them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import HipifyError

# Token kinds.
WS = "ws"  # spaces, tabs, form feeds, backslash-newline splices
NL = "nl"  # one line ending: \n, \r\n or \r
COMMENT = "comment"
STRING = "string"  # "..." with optional prefix, raw strings included
CHAR = "char"  # '...' with optional prefix
HEADER = "header"  # <...> after #include / __has_include(
IDENT = "ident"
NUMBER = "number"
PUNCT = "punct"
OTHER = "other"  # anything else (stray @, $, a byte-order mark, ...)

TRIVIA = frozenset({WS, NL, COMMENT})


@dataclass(slots=True)
class Token:
    """One token: its kind, exact text, offset in the source, 1-based line, and directive name."""

    kind: str
    text: str
    start: int
    line: int
    directive: str = ""  # "include", "define", "if", ... when inside a preprocessor line


_PUNCTS = sorted(
    [
        "...",
        "<<=",
        ">>=",
        "->*",
        "<=>",
        "::",
        "->",
        "++",
        "--",
        "<<",
        ">>",
        "<=",
        ">=",
        "==",
        "!=",
        "&&",
        "||",
        "+=",
        "-=",
        "*=",
        "/=",
        "%=",
        "&=",
        "|=",
        "^=",
        ".*",
        "##",
    ],
    key=len,
    reverse=True,
)
# '<' and '>' are kept single so that '<<<' / '>>>' and template brackets are easy to match.
_MULTI = [p for p in _PUNCTS if "<" not in p and ">" not in p or p in ("->", "->*", "<=", ">=", "<=>")]

_WS_RE = re.compile(r"(?:[ \t\f\v\ufeff]|\\\r?\n|\\\r)+")
_IDENT_RE = re.compile(r"[A-Za-z_$\u0080-\U0010ffff][A-Za-z0-9_$\u0080-\U0010ffff]*")
_NUMBER_RE = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[A-Za-z0-9_]|[A-Za-z0-9_.])*")
_STRING_PREFIXES = frozenset({"L", "u", "U", "u8"})
_RAW_PREFIXES = frozenset({"R", "LR", "uR", "UR", "u8R"})
_RAW_DELIM_RE = re.compile(r'"([^()\\\s]{0,16})\(')
_HEADER_RE = re.compile(r"<[^>\n\r]*>")


def _line_at(lines: list[int], offset: int) -> int:
    """1-based line number of ``offset`` given the sorted offsets of every line start."""
    lo, hi = 0, len(lines)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if lines[mid] <= offset:
            lo = mid
        else:
            hi = mid
    return lo + 1


def _quoted_end(src: str, pos: int, quote: str) -> int:
    """End offset of a quoted literal whose opening quote is at ``pos`` (lenient at line end)."""
    i = pos + 1
    n = len(src)
    while i < n:
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if c == quote:
            return i + 1
        if c in "\r\n":
            return i  # unterminated: stop at the line end (happens in #error text and #if 0 blocks)
        i += 1
    return n


def tokenize(src: str, path: str = "<string>") -> list[Token]:
    """Split ``src`` into tokens that concatenate back to ``src`` exactly.

    Raises HipifyError for an unterminated block comment or raw string literal, naming the line.
    """
    tokens: list[Token] = []
    line_starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r(?!\n)|\n", src)]
    pos = 0
    n = len(src)
    at_line_start = True  # only whitespace seen since the last line ending
    directive = ""  # name of the preprocessor directive the current line belongs to
    expect_directive_name = False
    expect_header = False  # after #include / #import / __has_include(

    def add(kind: str, end: int) -> None:
        nonlocal pos
        tokens.append(Token(kind, src[pos:end], pos, _line_at(line_starts, pos), directive))
        pos = end

    while pos < n:
        c = src[pos]
        if c == "\n" or c == "\r":
            end = pos + 2 if src.startswith("\r\n", pos) else pos + 1
            add(NL, end)
            at_line_start, directive, expect_directive_name, expect_header = True, "", False, False
            continue
        m = _WS_RE.match(src, pos)
        if m:
            add(WS, m.end())
            continue
        if src.startswith("//", pos):
            end = pos + 2
            while end < n:
                nl = src.find("\n", end)
                cr = src.find("\r", end)
                stops = [x for x in (nl, cr) if x >= 0]
                if not stops:
                    end = n
                    break
                end = min(stops)
                if src[end - 1] == "\\":  # a spliced line comment continues on the next line
                    end += 2 if src.startswith("\r\n", end) else 1
                    continue
                break
            add(COMMENT, end)
            continue
        if src.startswith("/*", pos):
            end = src.find("*/", pos + 2)
            if end < 0:
                line = _line_at(line_starts, pos)
                raise HipifyError(
                    f"{path}:{line}: unterminated /* comment (no closing */ before the end of the file); "
                    "close the comment and run hipify again"
                )
            add(COMMENT, end + 2)
            continue
        if c == "#" and at_line_start and not directive:
            directive = "#"
            expect_directive_name = True
            at_line_start = False
            add(PUNCT, pos + 1)
            continue
        at_line_start = False
        if c == "<" and expect_header:
            m = _HEADER_RE.match(src, pos)
            expect_header = False
            if m:
                add(HEADER, m.end())
                continue
        if c == '"':
            expect_header = False
            add(STRING, _quoted_end(src, pos, '"'))
            continue
        if c == "'":
            add(CHAR, _quoted_end(src, pos, "'"))
            continue
        m = _IDENT_RE.match(src, pos)
        if m:
            word = m.group()
            end = m.end()
            nxt = src[end] if end < n else ""
            if word in _RAW_PREFIXES and nxt == '"':
                dm = _RAW_DELIM_RE.match(src, end)
                if dm:
                    close = ")" + dm.group(1) + '"'
                    stop = src.find(close, dm.end())
                    if stop < 0:
                        line = _line_at(line_starts, pos)
                        raise HipifyError(
                            f"{path}:{line}: unterminated raw string literal (no closing {close!r}); "
                            "close the literal and run hipify again"
                        )
                    add(STRING, stop + len(close))
                    continue
            if word in _STRING_PREFIXES and nxt in "\"'":
                add(STRING if nxt == '"' else CHAR, _quoted_end(src, end, nxt))
                continue
            if expect_directive_name:
                directive = word
                expect_directive_name = False
                expect_header = word in ("include", "include_next", "import")
            elif word in ("__has_include", "__has_include_next"):
                expect_header = True  # the '(' comes next; the header follows it
            add(IDENT, end)
            continue
        expect_directive_name = False
        m = _NUMBER_RE.match(src, pos)
        if m:
            add(NUMBER, m.end())
            continue
        if c == "(" and expect_header:
            add(PUNCT, pos + 1)  # keep expecting the header name after '__has_include('
            continue
        expect_header = False
        for p in _MULTI:
            if src.startswith(p, pos):
                add(PUNCT, pos + len(p))
                break
        else:
            if c in "{}[]()<>;:,.?~!+-*/%^&|=":
                add(PUNCT, pos + 1)
            else:
                add(OTHER, pos + 1)
    return tokens


def significant(tokens: list[Token]) -> list[int]:
    """Indices of the tokens that are not whitespace, line endings or comments."""
    return [i for i, t in enumerate(tokens) if t.kind not in TRIVIA]
