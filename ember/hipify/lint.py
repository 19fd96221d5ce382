"""Portability lint: CUDA code that translates to HIP but may misbehave or fail on AMD GPUs.

Rules (each warning has a line, the rule id, a message and a suggested fix):

* ``warp-size``: a hard-coded warp size of 32 in lane/warp arithmetic (``threadIdx.x % 32``,
  ``tid & 31``, ``lane >> 5``, ``#define WARP_SIZE 32``, shuffle reductions starting at offset 16).
  AMD's CDNA GPUs (gfx9, e.g. gfx90a) run 64-wide wavefronts.
* ``full-mask``: a 32-bit full mask (``0xffffffff``) passed to ``__shfl_*_sync`` and friends.
* ``ballot-64``: ``__ballot_sync`` / ``__activemask`` return a 64-bit mask on AMD.
* ``inline-asm``: inline PTX (``asm(...)``) does not assemble for AMD GPUs.
* ``texture-reference``: texture/surface references (``texture<...>``, ``cudaBindTexture``).
* ``launch-bounds``: ``__launch_bounds__`` above AMD's 1024 threads per block, or with a second argument
  (HIP reads it as minimum waves per execution unit, not blocks per multiprocessor).
* ``cuda-only-library``: a CUDA library with no HIP counterpart (NVML, CUPTI, NVTX, nvJPEG, cuFile, ...).
* ``programmatic-launch``: programmatic dependent launch (``cudaLaunchAttributeProgrammaticStreamSerialization``,
  ``cudaGridDependencySynchronize``, ...): HIP has none; the translation (ember_hip_compat.h) runs the kernel
  serialized, which keeps the results and loses the overlap. The translated file says so at the use site too.
* ``cluster-launch``: a thread-block cluster launch attribute: AMD GPUs have no clusters.
"""

from __future__ import annotations

import ast
import re

from .maps import CUDA_ONLY_PREFIXES, Maps
from .result import LintWarning
from .syntax import is_punct, match_forward, next_sig, prev_sig, ptx_trap_end, split_args, strip_range, text_at
from .tokenizer import HEADER, IDENT, NUMBER, PUNCT, STRING, TRIVIA, Token

MAX_THREADS_PER_BLOCK = 1024
_LANE_WORDS = re.compile(r"lane|warp|tid|thread|blockDim", re.IGNORECASE)
_WARP_CONST = re.compile(r"warp_?size|warpsz|warp_sz|threads_?per_?warp|warp_threads|kwarp", re.IGNORECASE)
_FULL_MASK = re.compile(r"^(?:0x[fF]{8}[uUlL]*|~0[uU]?|\(\s*unsigned(?:\s+int)?\s*\)\s*-1|0xFFFFFFFF[uU]?)$")
_MASK_NAME = re.compile(r"full_?mask|final_?mask|all_?mask|warp_?mask", re.IGNORECASE)
_MASKED = frozenset(
    {
        "__shfl_sync",
        "__shfl_up_sync",
        "__shfl_down_sync",
        "__shfl_xor_sync",
        "__ballot_sync",
        "__any_sync",
        "__all_sync",
        "__syncwarp",
        "__match_any_sync",
        "__match_all_sync",
        "__reduce_add_sync",
        "__reduce_min_sync",
        "__reduce_max_sync",
        "__reduce_and_sync",
        "__reduce_or_sync",
        "__reduce_xor_sync",
        "__uni_sync",
    }
)
_TEX_APIS = frozenset(
    {
        "cudaBindTexture",
        "cudaBindTexture2D",
        "cudaBindTextureToArray",
        "cudaBindTextureToMipmappedArray",
        "cudaUnbindTexture",
        "cudaGetTextureReference",
        "cudaBindSurfaceToArray",
        "cudaGetSurfaceReference",
        "cuTexRefCreate",
        "cuTexRefSetAddress",
        "cuTexRefSetArray",
        "cuModuleGetTexRef",
        "cuModuleGetSurfRef",
    }
)
# rules of names that translate (to ember_hip_compat.h) but behave differently: (message, fix, comment); the
# translator writes the comment into the output, before the first such name of a line
CONVERTED_WITH_WARNING = {
    "programmatic-launch": (
        "programmatic dependent launch has no HIP equivalent: the kernel starts after the previous work of its "
        "stream has completed (same results, no overlap); cudaGridDependencySynchronize and "
        "cudaTriggerProgrammaticLaunchCompletion become no-ops",
        "nothing to do for correctness; to regain the overlap, fuse the dependent kernels or use more streams",
        "HIP has no programmatic dependent launch: runs serialized (same results, no overlap)",
    ),
    "cluster-launch": (
        "AMD GPUs have no thread-block clusters: a cluster dimension above 1x1x1 makes the launch return "
        "hipErrorNotSupported",
        "launch without clusters (and without cluster-scope shared memory or barriers)",
        "no thread-block clusters on AMD GPUs: a cluster above 1x1x1 fails with hipErrorNotSupported",
    ),
}
_WARP_FIX = "use warpSize (device code) or query hipDeviceAttributeWarpSize on the host; gfx9/CDNA wavefronts are 64"


def lint(tokens: list[Token], maps: Maps) -> list[LintWarning]:
    """All portability warnings for a token list (of the original CUDA source), sorted by line."""
    found: list[LintWarning] = []
    seen_libs: set[str] = set()
    for i, t in enumerate(tokens):
        if t.kind == NUMBER:
            _warp_number(tokens, i, found)
        elif t.kind == IDENT:
            _ident_rules(tokens, i, maps, found, seen_libs)
        elif t.kind in (HEADER, STRING) and t.directive in ("include", "include_next", "import"):
            header = t.text[1:-1].strip()
            alt = maps.include_alternative(header)
            if alt is not None:
                found.append(
                    LintWarning(
                        t.line,
                        "cuda-only-library",
                        f"#include <{header}>: a CUDA library with no HIP counterpart",
                        f"port to {alt}" if alt and alt != "none" else "remove or guard the code",
                    )
                )
    uniq = {(w.line, w.rule, w.message): w for w in found}
    return sorted(uniq.values(), key=lambda w: (w.line, w.rule))


def _number_value(text: str) -> int | None:
    """Integer value of a literal such as ``32``, ``0x1f`` or ``32u`` (None for other literals)."""
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*", text)
    if not m:
        return None
    return int(m.group(1), 16) if m.group(1)[:2].lower() == "0x" else int(m.group(1))


def _statement_words(tokens: list[Token], i: int, reach: int = 10) -> list[str]:
    """Identifiers within ``reach`` significant tokens either side of ``i`` in the same statement."""
    words: list[str] = []
    for step in (-1, 1):
        j = i
        for _ in range(reach):
            j = prev_sig(tokens, j) if step < 0 else next_sig(tokens, j)
            if j < 0 or j >= len(tokens):
                break
            t = tokens[j]
            if t.kind == PUNCT and t.text in (";", "{", "}"):
                break
            if t.line != tokens[i].line and t.directive:
                break
            if t.kind == IDENT:
                words.append(t.text)
    return words


def _warp_number(tokens: list[Token], i: int, found: list[LintWarning]) -> None:
    """warp-size: 32 / 31 / 5 used with lane or warp arithmetic, or a warp-size constant of 32."""
    value = _number_value(tokens[i].text)
    if value not in (16, 31, 32, 5):
        return
    line = tokens[i].line
    p = prev_sig(tokens, i)
    ptxt = text_at(tokens, p)
    shift = ptxt in (">", "<") and is_punct(tokens, p - 1, ptxt)  # '>>' and '<<' are two tokens
    if value == 16:
        _shfl_loop(tokens, i, found)
        return
    if value == 5 and not shift:
        return
    if value == 32 and ptxt == "=" or (value == 32 and tokens[i].directive == "define"):
        name = text_at(tokens, prev_sig(tokens, p)) if ptxt == "=" else text_at(tokens, p)
        if _WARP_CONST.search(name):
            found.append(LintWarning(line, "warp-size", f"warp size hard-coded as 32 ({name})", _WARP_FIX))
            return
    n = next_sig(tokens, i)
    ntxt = text_at(tokens, n)
    ops = {"%", "/", "&", "*", "%=", "/=", "&=", "*="}
    near_op = ptxt in ops or ntxt in ("*", "/") or shift
    if value == 31 and ptxt not in ("&", "&=", "%"):
        return
    if not near_op:
        return
    words = _statement_words(tokens, i)
    if any(_LANE_WORDS.search(w) for w in words):
        expr = f"{ptxt if not shift else ptxt * 2} {tokens[i].text}" if p >= 0 else tokens[i].text
        found.append(LintWarning(line, "warp-size", f"'{expr.strip()}' assumes 32 threads per warp", _WARP_FIX))


def _shfl_loop(tokens: list[Token], i: int, found: list[LintWarning]) -> None:
    """warp-size: ``for (int off = 16; ...) v += __shfl_down_sync(...)`` reduces only 32 lanes."""
    if text_at(tokens, prev_sig(tokens, i)) != "=":
        return
    j = i
    for _ in range(6):
        j = prev_sig(tokens, j)
        if j < 0:
            return
        if is_punct(tokens, j, "("):
            break
    else:
        return
    if text_at(tokens, prev_sig(tokens, j)) != "for":
        return
    close = match_forward(tokens, j)
    if close < 0:
        return
    body = next_sig(tokens, close)
    end = match_forward(tokens, body) if is_punct(tokens, body, "{") else body
    while end < len(tokens) and not is_punct(tokens, end, ";") and not is_punct(tokens, body, "{"):
        end += 1
    if any(t.kind == IDENT and t.text.startswith("__shfl") for t in tokens[body : end + 1]):
        found.append(
            LintWarning(
                tokens[i].line,
                "warp-size",
                "shuffle reduction starts at offset 16: it reduces 32 lanes, not a 64-wide wavefront",
                "start at warpSize / 2 (for (int off = warpSize / 2; off > 0; off /= 2))",
            )
        )


def _ident_rules(tokens: list[Token], i: int, maps: Maps, found: list[LintWarning], seen_libs: set[str]) -> None:
    """Rules triggered by an identifier."""
    t = tokens[i]
    name = t.text
    line = t.line
    if name in maps.warn and not _member_or_qualified(tokens, i):
        message, fix, _ = CONVERTED_WITH_WARNING[maps.warn[name]]
        found.append(LintWarning(line, maps.warn[name], f"{name}: {message}", fix))
    if name in _MASKED and name not in maps.compat:  # ember_reduce_*_sync keep the mask (a 32-lane group)
        paren = next_sig(tokens, i)
        if is_punct(tokens, paren, "("):
            args, _ = split_args(tokens, paren)
            if args:
                a, b = strip_range(tokens, *args[0])
                mask = "".join(x.text for x in tokens[a:b] if x.kind not in TRIVIA or x.kind == "ws")
                if _FULL_MASK.match(mask) or _MASK_NAME.search(mask):
                    found.append(
                        LintWarning(
                            line,
                            "full-mask",
                            f"32-bit full mask '{mask}' passed to {name}: a wavefront has 64 lanes",
                            "hipify drops the mask (HIP's __shfl/__ballot act on the whole wavefront); "
                            "with HIP >= 6.2 "
                            "*_sync intrinsics pass a 64-bit mask such as __activemask()",
                        )
                    )
    if name in ("__ballot_sync", "__activemask", "__ballot"):
        found.append(
            LintWarning(
                line,
                "ballot-64",
                f"{name} returns a 64-bit mask on AMD GPUs",
                "keep the result in unsigned long long / uint64_t and count bits with __popcll",
            )
        )
    elif name in ("asm", "__asm__", "__asm") and ptx_trap_end(tokens, i) < 0:  # asm("trap;") is translated
        nxt = next_sig(tokens, i)
        if text_at(tokens, nxt) in ("(", "volatile", "__volatile__", "goto"):
            j = nxt
            snippet = ""
            for _ in range(6):
                if j < len(tokens) and tokens[j].kind == STRING:
                    snippet = tokens[j].text[:40]
                    break
                j = next_sig(tokens, j)
            found.append(
                LintWarning(
                    line,
                    "inline-asm",
                    f"inline PTX {snippet} will not assemble for AMD GPUs",
                    "replace with a HIP intrinsic or an __builtin_amdgcn_* builtin",
                )
            )
    elif name in ("texture", "surface") and is_punct(tokens, next_sig(tokens, i), "<"):
        found.append(
            LintWarning(
                line,
                "texture-reference",
                f"{name} reference: deprecated in HIP, removed in HIP 6",
                "use texture objects (hipTextureObject_t with hipCreateTextureObject)",
            )
        )
    elif name in _TEX_APIS:
        found.append(
            LintWarning(
                line,
                "texture-reference",
                f"{name} binds a texture/surface reference",
                "use texture objects (hipCreateTextureObject / hipCreateSurfaceObject)",
            )
        )
    elif name == "__launch_bounds__":
        _launch_bounds(tokens, i, found)
    elif name not in seen_libs:
        for prefix, alt in CUDA_ONLY_PREFIXES.items():
            if (
                name.startswith(prefix)
                and len(name) > len(prefix)
                and (name[len(prefix)].isupper() or name[len(prefix)] == "_")
            ):
                seen_libs.add(name)
                found.append(
                    LintWarning(
                        line,
                        "cuda-only-library",
                        f"{name} belongs to a CUDA-only library ({prefix})",
                        f"port to {alt}",
                    )
                )
                break


def _member_or_qualified(tokens: list[Token], i: int) -> bool:
    """Whether identifier ``i`` follows ``.``, ``->`` or ``::`` (a member or a qualified name, not the CUDA API)."""
    prev = prev_sig(tokens, i)
    return is_punct(tokens, prev, ".") or is_punct(tokens, prev, "->") or is_punct(tokens, prev, "::")


def _const_int(text: str) -> int | None:
    """Value of a constant integer expression made only of literals and + - * ( )."""
    text = re.sub(r"(?<=\d)[uUlL]+\b", "", text.strip())
    if not text or not re.fullmatch(r"[0-9\s+\-*()]+", text):
        return None
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        # + - * on integer literals only (no **: a source file must not make us compute 9**9**9)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = ev(node.left), ev(node.right)
            v = a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
            if abs(v) > 1 << 64:
                raise ValueError("out of range")
            return v
        raise ValueError("not a constant integer expression")

    try:
        return ev(tree)
    except ValueError:
        return None


def _launch_bounds(tokens: list[Token], i: int, found: list[LintWarning]) -> None:
    """launch-bounds: more than 1024 threads, or a minimum-blocks argument."""
    paren = next_sig(tokens, i)
    if not is_punct(tokens, paren, "("):
        return
    args, _ = split_args(tokens, paren)
    if not args:
        return
    line = tokens[i].line
    first = "".join(t.text for t in tokens[args[0][0] : args[0][1]])
    value = _const_int(first)
    if value is not None and value > MAX_THREADS_PER_BLOCK:
        found.append(
            LintWarning(
                line,
                "launch-bounds",
                f"__launch_bounds__({value}) exceeds AMD's {MAX_THREADS_PER_BLOCK} threads per block",
                f"use at most {MAX_THREADS_PER_BLOCK} threads per block",
            )
        )
    if len(args) >= 2:
        found.append(
            LintWarning(
                line,
                "launch-bounds",
                "__launch_bounds__ second argument: HIP reads it as minimum waves per execution unit, "
                "not minimum blocks per multiprocessor",
                "check the value for AMD or drop the second argument",
            )
        )
