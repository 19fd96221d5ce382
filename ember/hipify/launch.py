"""Kernel launches: find ``kernel<<<grid, block[, shmem[, stream]]>>>(args)`` and rewrite them.

hipcc accepts the triple-chevron syntax, so by default launches are kept; ``launch_syntax="ggl"``
rewrites them to ``hipLaunchKernelGGL(kernel, dim3(grid), dim3(block), shmem, stream, args...)``.
Templated kernels (``k<T, 4><<<...>>>``), launches spread over several lines and the spaced
``<< <g, b >> >`` form are recognised.
"""

from __future__ import annotations

from dataclasses import dataclass

from .syntax import is_punct, match_backward, next_sig, prev_sig, split_args, strip_range
from .tokenizer import IDENT, PUNCT, WS, Token


@dataclass(frozen=True, slots=True)
class Launch:
    """Token positions of one kernel launch."""

    line: int
    name: tuple[int, int]  # kernel expression [start, end)
    chevron_open: int  # first '<' of '<<<'
    chevron_close: int  # last '>' of '>>>'
    config: tuple[tuple[int, int], ...]  # grid, block, shmem, stream ranges
    paren_open: int
    paren_close: int


def _triple(tokens: list[Token], i: int, char: str) -> int:
    """If tokens[i] starts three ``char`` punctuators separated only by spaces, the index of the third."""
    found = 0
    j = i
    last = -1
    while j < len(tokens) and found < 3:
        t = tokens[j]
        if t.kind == PUNCT and t.text == char:
            found += 1
            last = j
        elif t.kind != WS or found == 0:
            return -1
        j += 1
    return last if found == 3 else -1


def _kernel_start(tokens: list[Token], end: int) -> int:
    """Start index of the kernel expression that ends at token ``end`` (inclusive); -1 if none."""
    j = end
    if is_punct(tokens, j, ">"):  # template arguments: walk back to the matching '<'
        depth = 0
        while j >= 0:
            t = tokens[j]
            if t.kind == PUNCT and t.text in (")", "]"):
                j = match_backward(tokens, j)
                if j < 0:
                    return -1
            elif t.kind == PUNCT and t.text == ">":
                depth += 1
            elif t.kind == PUNCT and t.text == "<":
                depth -= 1
                if depth == 0:
                    break
            elif t.kind == PUNCT and t.text in (";", "{", "}"):
                return -1
            j -= 1
        j = prev_sig(tokens, j)
    if is_punct(tokens, j, ")") or is_punct(tokens, j, "]"):
        j = match_backward(tokens, j)
        if j < 0:
            return -1
        if is_punct(tokens, j, "["):
            j = prev_sig(tokens, j)
            if j < 0 or tokens[j].kind != IDENT:
                return -1
        return j
    if j < 0 or tokens[j].kind != IDENT:
        return -1
    while True:  # qualified names: ns::sub::kernel, ::kernel
        k = prev_sig(tokens, j)
        if not is_punct(tokens, k, "::"):
            return j
        q = prev_sig(tokens, k)
        if q >= 0 and tokens[q].kind == IDENT:
            j = q
        else:
            return k


def find_launches(tokens: list[Token]) -> list[Launch]:
    """Every kernel launch in the token list, in source order."""
    launches: list[Launch] = []
    i = 0
    n = len(tokens)
    while i < n:
        t = tokens[i]
        if not (t.kind == PUNCT and t.text == "<") or is_punct(tokens, i - 1, "<"):
            i += 1
            continue
        third = _triple(tokens, i, "<")
        if third < 0:
            i += 1
            continue
        launch = _parse_launch(tokens, i, third)
        if launch is None:
            i = third + 1
            continue
        launches.append(launch)
        i = launch.paren_close + 1
    return launches


def _parse_launch(tokens: list[Token], first: int, third: int) -> Launch | None:
    """Parse the launch whose '<<<' spans tokens[first..third]."""
    depth = 0
    j = third + 1
    close_start = close_end = -1
    sep = [third]
    while j < len(tokens):
        t = tokens[j]
        if t.kind == PUNCT:
            if t.text in "([{":
                depth += 1
            elif t.text in ")]}":
                depth -= 1
                if depth < 0:
                    return None
            elif t.text == ";" and depth == 0:
                return None
            elif t.text == "," and depth == 0:
                sep.append(j)
            elif t.text == ">" and depth == 0:
                end = _triple(tokens, j, ">")
                if end >= 0:
                    close_start, close_end = j, end
                    break
        j += 1
    if close_start < 0:
        return None
    sep.append(close_start)
    config = tuple(strip_range(tokens, sep[k] + 1, sep[k + 1]) for k in range(len(sep) - 1))
    if not 2 <= len(config) <= 4:
        return None
    paren = next_sig(tokens, close_end)
    if not is_punct(tokens, paren, "("):
        return None
    _, paren_close = split_args(tokens, paren)
    if paren_close < 0:
        return None
    name_end = prev_sig(tokens, first)
    name_start = _kernel_start(tokens, name_end)
    if name_start < 0:
        return None
    return Launch(tokens[first].line, (name_start, name_end + 1), first, close_end, config, paren, paren_close)


def ggl_text(launch: Launch, out: list[str]) -> str:
    """``hipLaunchKernelGGL(...)`` text for a launch, built from the already translated token texts."""

    def span(a: int, b: int) -> str:
        return "".join(out[a:b])

    name = span(*launch.name).strip()
    if "<" in name:
        name = f"HIP_KERNEL_NAME({name})"
    parts = [span(a, b).strip() for a, b in launch.config]
    grid, block = parts[0], parts[1]
    shmem = parts[2] if len(parts) > 2 and parts[2] else "0"
    stream = parts[3] if len(parts) > 3 and parts[3] else "0"
    args = span(launch.paren_open + 1, launch.paren_close)
    text = f"hipLaunchKernelGGL({name}, dim3({grid}), dim3({block}), {shmem}, {stream}"
    if args.strip():
        text += ("," if args[:1].isspace() else ", ") + args
    return text + ")"
