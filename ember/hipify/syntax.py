"""Navigation helpers over a token list: neighbours, bracket matching and argument splitting."""

from __future__ import annotations

from .tokenizer import PUNCT, STRING, TRIVIA, Token

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def next_sig(tokens: list[Token], i: int) -> int:
    """Index of the first significant token after ``i`` (len(tokens) when none)."""
    j = i + 1
    while j < len(tokens) and tokens[j].kind in TRIVIA:
        j += 1
    return j


def prev_sig(tokens: list[Token], i: int) -> int:
    """Index of the last significant token before ``i`` (-1 when none)."""
    j = i - 1
    while j >= 0 and tokens[j].kind in TRIVIA:
        j -= 1
    return j


def text_at(tokens: list[Token], i: int) -> str:
    """Text of token ``i``, or "" when out of range."""
    return tokens[i].text if 0 <= i < len(tokens) else ""


def is_punct(tokens: list[Token], i: int, text: str) -> bool:
    """Whether token ``i`` is the punctuator ``text``."""
    return 0 <= i < len(tokens) and tokens[i].kind == PUNCT and tokens[i].text == text


def match_forward(tokens: list[Token], i: int) -> int:
    """Index of the bracket closing the one at ``i`` ('(', '[' or '{'); -1 when unbalanced."""
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j]
        if t.kind != PUNCT:
            continue
        if t.text in _OPEN:
            depth += 1
        elif t.text in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
            if depth < 0:
                return -1
    return -1


def match_backward(tokens: list[Token], i: int) -> int:
    """Index of the bracket opening the one at ``i`` (')', ']' or '}'); -1 when unbalanced."""
    depth = 0
    for j in range(i, -1, -1):
        t = tokens[j]
        if t.kind != PUNCT:
            continue
        if t.text in _CLOSE:
            depth += 1
        elif t.text in _OPEN:
            depth -= 1
            if depth == 0:
                return j
            if depth < 0:
                return -1
    return -1


def split_args(tokens: list[Token], open_idx: int) -> tuple[list[tuple[int, int]], int]:
    """Split the bracketed list opening at ``open_idx`` on top-level commas.

    Returns ([(start, end) token ranges, end exclusive], index of the closing bracket), or ([], -1)
    when the list is not closed. An empty list gives no ranges. Commas inside (), [], {} and template
    argument lists of the form ``name<...>`` are not split on.
    """
    close = match_forward(tokens, open_idx)
    if close < 0:
        return [], -1
    ranges: list[tuple[int, int]] = []
    depth = 0
    angle = 0
    start = open_idx + 1
    for j in range(open_idx + 1, close):
        t = tokens[j]
        if t.kind != PUNCT:
            continue
        if t.text in _OPEN:
            depth += 1
        elif t.text in _CLOSE:
            depth -= 1
        elif t.text == "<" and depth == 0 and _looks_like_template(tokens, j):
            angle += 1
        elif t.text == ">" and depth == 0 and angle > 0:
            angle -= 1
        elif t.text == "," and depth == 0 and angle == 0:
            ranges.append((start, j))
            start = j + 1
    if any(tokens[k].kind not in TRIVIA for k in range(start, close)) or ranges:
        ranges.append((start, close))
    return ranges, close


def _looks_like_template(tokens: list[Token], j: int) -> bool:
    """Heuristic: '<' right after an identifier with no space (``foo<int>``) opens template arguments."""
    return j > 0 and tokens[j - 1].kind == "ident" and tokens[j - 1].text not in ("return",)


def strip_range(tokens: list[Token], start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) so it begins and ends on significant tokens."""
    while start < end and tokens[start].kind in TRIVIA:
        start += 1
    while end > start and tokens[end - 1].kind in TRIVIA:
        end -= 1
    return start, end


_ASM = ("asm", "__asm__", "__asm")
_ASM_QUALIFIERS = ("volatile", "__volatile__")
_PTX_TRAP = ("trap;", "trap ;")


def ptx_trap_end(tokens: list[Token], i: int) -> int:
    """Index of the ``)`` closing ``asm("trap;")`` (``volatile`` allowed) starting at token ``i``, else -1.

    That inline PTX is CUDA's kernel abort, the same operation as ``__builtin_trap()``.
    """
    if tokens[i].text not in _ASM:
        return -1
    j = next_sig(tokens, i)
    while text_at(tokens, j) in _ASM_QUALIFIERS:
        j = next_sig(tokens, j)
    if not is_punct(tokens, j, "("):
        return -1
    s = next_sig(tokens, j)
    if s >= len(tokens) or tokens[s].kind != STRING or tokens[s].text[1:-1].strip() not in _PTX_TRAP:
        return -1
    close = next_sig(tokens, s)
    return close if is_punct(tokens, close, ")") else -1
