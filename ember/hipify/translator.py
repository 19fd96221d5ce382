"""CUDA -> HIP translation of one source text, token by token.

Only identifier tokens, ``#include`` header names and kernel launches are ever rewritten; comments,
string and character literals and every byte between tokens are copied unchanged.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from .conditions import Region, inactive_regions
from .launch import find_launches, ggl_text
from .lint import CONVERTED_WITH_WARNING, lint
from .maps import CUDA_LIKE, Maps, load_maps
from .result import Reference, Result
from .syntax import is_punct, next_sig, prev_sig, ptx_trap_end, split_args, strip_range, text_at
from .tokenizer import HEADER, IDENT, NL, PUNCT, STRING, TRIVIA, WS, Token, tokenize
from .toolchain import DEFAULT_HIP_VERSION

LAUNCH_SYNTAXES = ("keep", "ggl")
_NOT_A_TYPE = frozenset(
    {
        "return",
        "case",
        "else",
        "throw",
        "new",
        "delete",
        "sizeof",
        "goto",
        "co_return",
        "co_yield",
        "co_await",
        "do",
        "typename",
        "if",
        "while",
        "for",
        "switch",
        "defined",
        "and",
        "or",
        "not",
        "decltype",
        "alignof",
    }
)
_INCLUDE_DIRECTIVES = ("include", "include_next", "import")


def translate(
    source: str,
    path: str = "<string>",
    *,
    launch_syntax: str = "keep",
    local_names: frozenset[str] | set[str] | None = None,
    local_headers: frozenset[str] | set[str] | None = None,
    hip_version: str = DEFAULT_HIP_VERSION,
    compat_include: str | None = None,
    project_defines: dict[str, int | None] | None = None,
) -> Result:
    """Translate CUDA source text to HIP.

    ``path`` is used in messages only. ``launch_syntax`` is "keep" (``<<<...>>>`` stays, hipcc accepts
    it) or "ggl" (``hipLaunchKernelGGL``). ``local_names`` are names the project defines itself (macros,
    functions) that must not be reported as unknown CUDA APIs; names defined in ``source`` are found
    automatically. ``local_headers`` are the project's own header paths (and their trailing parts, e.g.
    ``cuda/tree.hpp`` for ``src/cuda/tree.hpp``): a quoted ``#include`` of one is never taken for a CUDA
    header; a quoted include that exists beside ``path`` is recognised too.
    ``hip_version`` is the HIP release the output targets ("6.4", the default, or "5.2"): names only a newer
    HIP has are reported, not converted. A CUDA intrinsic no HIP version has but ember's compat header provides
    (``__vsub4``, ``__dp4a``, ...) becomes its ``ember_*`` function, and the file gets
    ``#include "<compat_include>"`` (default: the header's bare name, ``ember_hip_compat.h``; the CLI passes
    the path relative to the output file) as its first directive; ``Result.compat`` says so.
    A CUDA name with no HIP counterpart inside a preprocessor branch that no HIP compile takes (found by
    ``conditions.inactive_regions`` for the device and the host pass: CUDA version macros undefined,
    ``__CUDA_ARCH__`` answered as in ``_cuda_arch``; ``project_defines`` are the project's integer macros, see
    ``conditions.integer_defines``) is kept and counted converted with kind ``inactive``, naming the branch:
    HIP never compiles it, as the clang-based HIPIFY, which sees only active branches, never reports it.
    Raises HipifyError when the text cannot be tokenized (an unterminated comment) or the version is unknown.
    """
    if launch_syntax not in LAUNCH_SYNTAXES:
        raise ValueError(f"launch_syntax must be one of {LAUNCH_SYNTAXES}, not {launch_syntax!r}")
    maps = load_maps(hip_version)
    tokens = tokenize(source, path)
    out = [t.text for t in tokens]
    result = Result(path=path, source=source, output=source)
    own = local_declarations(tokens)
    declared = own | set(local_names or ())
    uses_prop = any(t.kind == IDENT and t.text in maps.prop_structs for t in tokens)
    warned_lines: set[int] = set()
    for i, tok in enumerate(tokens):
        if tok.kind == HEADER or (tok.kind == STRING and _is_include_operand(tokens, i)):
            _include(tokens, i, out, maps, result, path, local_headers)
        elif tok.kind == IDENT:
            end = ptx_trap_end(tokens, i)
            if end >= 0:  # inline PTX "trap;" is CUDA's kernel abort: clang's __builtin_trap() on AMD
                out[i] = "__builtin_trap()"
                for k in range(i + 1, end + 1):
                    out[k] = ""
                continue
            if uses_prop and _device_prop_member(tokens, i, out, maps, result):
                continue
            _identifier(tokens, i, out, maps, declared, result, own)
            if tok.text in maps.warn and out[i] != tok.text and tok.line not in warned_lines:
                warned_lines.add(tok.line)
                out[i] = _warning_comment(maps.warn[tok.text]) + out[i]
    for launch in find_launches(tokens):
        name = "".join(t.text for t in tokens[launch.name[0] : launch.name[1]]).strip()
        if launch_syntax == "ggl":
            text = ggl_text(launch, out)
            out[launch.name[0]] = text
            for k in range(launch.name[0] + 1, launch.paren_close + 1):
                out[k] = ""
            result.converted.append(Reference(launch.line, name, "launch", "hipLaunchKernelGGL"))
        else:  # hipcc rejects the spaced '<< <' / '>> >' form that nvcc accepts: close it up
            for k in list(range(launch.chevron_open, launch.chevron_open + 5)) + list(
                range(launch.chevron_close - 4, launch.chevron_close)
            ):
                if tokens[k].kind == WS and launch.chevron_open <= k <= launch.chevron_close:
                    if _between_chevrons(tokens, k):
                        out[k] = ""
            result.converted.append(Reference(launch.line, name, "launch", "<<<...>>>"))
    _keep_inactive(source, result, project_defines or {})
    result.converted.sort(key=lambda r: r.line)
    result.unconverted.sort(key=lambda r: r.line)
    result.compat = any(r.kind == "compat" for r in result.converted)
    if result.compat:
        _include_compat_header(tokens, out, compat_include or maps.compat_header)
    result.output = "".join(out)
    result.warnings = lint(tokens, maps)
    result.lines_total, result.lines_changed = _line_counts(source, result.output)
    return result


def _keep_inactive(source: str, result: Result, project: dict[str, int | None]) -> None:
    """Move unconverted references in branches no HIP pass compiles to ``converted`` (kind ``inactive``)."""
    if not result.unconverted:
        return
    regions: list[Region] = inactive_regions(source, HIP_PASSES, project)
    if not regions:
        return
    kept = []
    for ref in result.unconverted:
        region = next((r for r in regions if r.first <= ref.line <= r.last), None)
        if region is None:
            kept.append(ref)
            continue
        note = f"{ref.name} kept: HIP never compiles this branch (line {region.directive_line}: {region.condition})"
        result.converted.append(Reference(ref.line, ref.name, "inactive", note))
    result.unconverted = kept


def _include_compat_header(tokens: list[Token], out: list[str], header: str) -> None:
    """Put ``#include "header"`` on a line of its own before the first line that is not blank, a comment or
    ``#pragma once`` (so it is outside any #if and any include guard; the header has its own guard)."""
    newline = next((t.text for t in tokens if t.kind == NL), "\n")
    line = f'#include "{header}"{newline}'
    k = 0
    while k < len(tokens):
        if tokens[k].kind in TRIVIA:
            k += 1
            continue
        directive = next_sig(tokens, k)
        if tokens[k].text == "#" and text_at(tokens, directive) == "pragma":
            if text_at(tokens, next_sig(tokens, directive)) == "once":
                while k < len(tokens) and tokens[k].kind != NL:
                    k += 1
                continue
        break
    if k >= len(tokens):  # nothing but comments: append after them
        ends_open = bool(tokens) and tokens[-1].kind != NL
        out.append((newline if ends_open else "") + line)
        return
    start = k
    while start > 0 and tokens[start - 1].kind != NL:
        start -= 1
    out[start] = line + out[start]


def _between_chevrons(tokens: list[Token], k: int) -> bool:
    """Whether the whitespace token ``k`` separates two '<' or two '>' of a launch's chevrons."""
    left, right = tokens[k - 1].text, tokens[k + 1].text if k + 1 < len(tokens) else ""
    return left == right and left in ("<", ">") and tokens[k - 1].kind == PUNCT and tokens[k + 1].kind == PUNCT


def _line_counts(source: str, output: str) -> tuple[int, int]:
    """(lines in source, source lines that the output changes or removes)."""
    a = source.splitlines()
    b = output.splitlines()
    changed = 0
    for op, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):
            changed += i2 - i1
    return len(a), changed


def _is_include_operand(tokens: list[Token], i: int) -> bool:
    """Whether the string token ``i`` is the operand of #include or __has_include."""
    if tokens[i].directive in _INCLUDE_DIRECTIVES:
        return text_at(tokens, prev_sig(tokens, i)) in _INCLUDE_DIRECTIVES
    p = prev_sig(tokens, i)
    return is_punct(tokens, p, "(") and text_at(tokens, prev_sig(tokens, p)) in (
        "__has_include",
        "__has_include_next",
    )


def _include(
    tokens: list[Token],
    i: int,
    out: list[str],
    maps: Maps,
    result: Result,
    path: str = "<string>",
    local_headers: frozenset[str] | set[str] | None = None,
) -> None:
    """Rewrite the header name of an #include line (or __has_include) when it is a CUDA header."""
    tok = tokens[i]
    inner = tok.text[1:-1].strip()
    if tok.text.startswith('"') and _project_header(inner, path, local_headers):
        return  # "cuda/tree.hpp" of the project itself, not libcu++'s <cuda/...>
    hip = maps.include(inner)
    if hip is not None:
        out[i] = tok.text[0] + hip + tok.text[-1]
        result.converted.append(Reference(tok.line, inner, "include", hip))
        return
    alt = maps.include_alternative(inner)
    if alt is not None:
        result.unconverted.append(Reference(tok.line, inner, "include", None, alt))


def _project_header(inner: str, path: str, local_headers: frozenset[str] | set[str] | None) -> bool:
    """Whether a quoted include names one of the project's own files."""
    if local_headers and inner in local_headers:
        return True
    if path.startswith("<"):
        return False
    try:
        return (Path(path).parent / inner).is_file()
    except OSError:
        return False


def _identifier(
    tokens: list[Token],
    i: int,
    out: list[str],
    maps: Maps,
    declared: set[str],
    result: Result,
    local_defs: set[str] | None = None,
) -> None:
    """Translate or report the identifier token ``i``."""
    tok = tokens[i]
    name = tok.text
    prev = prev_sig(tokens, i)
    if is_punct(tokens, prev, ".") or is_punct(tokens, prev, "->"):
        return  # a member: prop.major, obj->cudaStream
    if is_punct(tokens, prev, "::"):
        q = prev_sig(tokens, prev)
        if q >= 0 and tokens[q].kind == IDENT and tokens[q].text != "std":
            return  # qualified by a namespace or class of the project (cub:: members are handled below)
    if name in maps.cub_namespace:
        _cub(tokens, i, out, maps, result)
        return
    if name in maps.rewrite:
        _sync_intrinsic(tokens, i, out, maps, result)
        return
    if name == "__CUDA_ARCH__":
        _cuda_arch(tokens, i, out, result)
        return
    if name in VERSION_MACROS and _version_test(tokens, i, result):
        return
    if name in VERSION_MACROS and tok.directive and text_at(tokens, prev) != tok.directive:
        # a #define body may serve an #if, where the HIP library's own numbering would take CUDA-version branches
        hip = VERSION_EXPRESSIONS.get(name) or maps.names.get(name, ("", ""))[1]
        if hip:
            alternative = f"{hip} (in C++ code; kept in a #define body, which may serve an #if)"
            result.unconverted.append(Reference(tok.line, name, "cublas", None, alternative))
            return
    if name in VERSION_EXPRESSIONS and name not in (local_defs or ()):  # C++ code: the HIP library's own version
        out[i] = VERSION_EXPRESSIONS[name]
        result.converted.append(Reference(tok.line, name, "cublas", out[i]))
        return
    if name in _BY_ARITY and name not in (local_defs or ()):
        renamed = _BY_ARITY[name].get(_call_arity(tokens, i))
        if renamed is not None:  # a CUDA 12 signature HIP spells differently
            out[i], kind = renamed
            hip = f"{out[i]} ({maps.compat_header})" if kind == "compat" else out[i]
            result.converted.append(Reference(tok.line, name, kind, hip))
            return
    if tok.directive == "define" and text_at(tokens, prev) == "define":
        return  # the name a #define introduces
    hit = maps.names.get(name)
    if hit is not None:
        kind, hip = hit
        out[i] = hip
        result.converted.append(Reference(tok.line, name, kind, hip))
        if name in _KERNEL_POINTER_ARG:
            _cast_kernel_argument(tokens, i, out, _KERNEL_POINTER_ARG[name])
        return
    if name in maps.same:
        return
    if name in maps.compat and name not in (local_defs or ()):
        out[i] = maps.compat[name]
        result.converted.append(Reference(tok.line, name, "compat", f"{maps.compat[name]} ({maps.compat_header})"))
        return
    miss = maps.unsupported.get(name)
    if miss is not None and name not in (local_defs if local_defs is not None else ()):
        # a known CUDA API with no HIP equivalent stays reported even when another file of the project
        # defines it (a shim such as a vendor header for another platform); only a definition in this
        # file (a fallback the file provides itself) silences it
        result.unconverted.append(Reference(tok.line, name, miss[0], None, miss[1]))
    elif name in declared:
        return
    elif CUDA_LIKE.match(name):
        result.unconverted.append(Reference(tok.line, name, "unknown", None, ""))


# CUDA 12 changed two graph signatures; HIP kept CUDA 11's. By the number of arguments of the call: the graph update
# with a result-info struct (3; HIP has only the 4-argument form) comes from ember_hip_compat.h, and the instantiation
# with flags (3; HIP's hipGraphInstantiate takes CUDA 11's 5) is HIP's hipGraphInstantiateWithFlags
_GRAPH_UPDATE_3 = {3: ("ember_hipGraphExecUpdate", "compat")}
_INSTANTIATE_3 = {3: ("hipGraphInstantiateWithFlags", "runtime")}
_BY_ARITY = {
    "cudaGraphExecUpdate": _GRAPH_UPDATE_3,
    "cuGraphExecUpdate": _GRAPH_UPDATE_3,
    "cuGraphExecUpdate_v2": _GRAPH_UPDATE_3,
    "cudaGraphInstantiate": _INSTANTIATE_3,
    "cuGraphInstantiate": _INSTANTIATE_3,
    "cuGraphInstantiate_v2": _INSTANTIATE_3,
}


def _call_arity(tokens: list[Token], i: int) -> int:
    """Number of arguments of the call whose callee is token ``i`` (-1 when it is not a call)."""
    paren = next_sig(tokens, i)
    if not is_punct(tokens, paren, "("):
        return -1
    args, close = split_args(tokens, paren)
    return len(args) if close >= 0 else -1


def _warning_comment(rule: str) -> str:
    """The comment written before a name converted with a warning (once per line)."""
    return f"/* ember-hipify warning [{rule}]: {CONVERTED_WITH_WARNING[rule][2]} */ "


# CUDA runtime functions that cuda_runtime.h overloads with a template taking the kernel itself; HIP declares only
# the ``const void*`` form, so the kernel argument (index) gets a cast
_KERNEL_POINTER_ARG = {
    "cudaFuncSetAttribute": 0,
    "cudaFuncGetAttributes": 1,
    "cudaFuncSetCacheConfig": 0,
    "cudaFuncSetSharedMemConfig": 0,
}
_VOID_CAST = "reinterpret_cast<const void*>"


def _cast_kernel_argument(tokens: list[Token], i: int, out: list[str], index: int) -> None:
    """Wrap argument ``index`` of the call at token ``i`` in ``reinterpret_cast<const void*>(...)``."""
    paren = next_sig(tokens, i)
    if not is_punct(tokens, paren, "("):
        return  # the name taken as a value: nothing to cast
    args, close = split_args(tokens, paren)
    if close < 0 or len(args) <= index:
        return
    start, end = strip_range(tokens, *args[index])
    written = "".join(t.text for t in tokens[start:end])
    if start >= end or written.startswith(("(const void", "reinterpret_cast<const void", "static_cast<const void")):
        return
    out[start] = f"{_VOID_CAST}(" + out[start]
    out[end - 1] = out[end - 1] + ")"


def _device_prop_member(tokens: list[Token], i: int, out: list[str], maps: Maps, result: Result) -> bool:
    """``prop.field`` for a cudaDeviceProp field that hipDeviceProp_t names differently or lacks."""
    tok = tokens[i]
    prev = prev_sig(tokens, i)
    if not (is_punct(tokens, prev, ".") or is_punct(tokens, prev, "->")):
        return False
    if tok.text in maps.prop_members:
        out[i] = maps.prop_members[tok.text]
        result.converted.append(Reference(tok.line, f"cudaDeviceProp::{tok.text}", "types", out[i]))
        return True
    if tok.text in maps.prop_missing:
        result.unconverted.append(
            Reference(tok.line, f"cudaDeviceProp::{tok.text}", "types", None, maps.prop_missing[tok.text])
        )
        return True
    return False


def _cub(tokens: list[Token], i: int, out: list[str], maps: Maps, result: Result) -> None:
    """``cub::X`` -> ``hipcub::X``; ``namespace cub``/``using namespace cub`` too."""
    tok = tokens[i]
    hip = maps.cub_namespace[tok.text]
    nxt = next_sig(tokens, i)
    prev = prev_sig(tokens, i)
    if is_punct(tokens, nxt, "::"):
        member_idx = next_sig(tokens, nxt)
        member = text_at(tokens, member_idx)
        if member in maps.cub_unsupported:
            result.unconverted.append(Reference(tok.line, f"cub::{member}", "cub", None, maps.cub_unsupported[member]))
            return
        out[i] = hip
        result.converted.append(Reference(tok.line, f"cub::{member}", "cub", f"{hip}::{member}"))
    elif text_at(tokens, prev) == "namespace":
        out[i] = hip
        result.converted.append(Reference(tok.line, "cub", "cub", hip))


def _sync_intrinsic(tokens: list[Token], i: int, out: list[str], maps: Maps, result: Result) -> None:
    """``__shfl_down_sync(mask, v, d)`` -> ``__shfl_down(v, d)``; ``__activemask()`` -> ``__ballot(1)``."""
    tok = tokens[i]
    name = tok.text
    target = maps.rewrite[name]
    paren = next_sig(tokens, i)
    if not is_punct(tokens, paren, "("):
        result.unconverted.append(Reference(tok.line, name, "device", None, target))
        return
    args, close = split_args(tokens, paren)
    if close < 0:
        result.unconverted.append(Reference(tok.line, name, "device", None, target))
        return
    if target.endswith(")"):  # a whole expression replaces the call: __activemask(), __syncwarp(mask)
        out[i] = target[: target.index("(")]
        inner = target[target.index("(") + 1 : -1]
        for k in range(paren + 1, close):
            out[k] = ""
        out[paren] = "(" + inner
        result.converted.append(Reference(tok.line, name, "device", target))
        return
    if len(args) < 2:
        result.unconverted.append(Reference(tok.line, name, "device", None, target))
        return
    out[i] = target
    keep_from, _ = strip_range(tokens, args[1][0], args[1][1])
    for k in range(args[0][0], keep_from):
        out[k] = ""
    result.converted.append(Reference(tok.line, name, "device", target))


# Under hip-clang a CUDA compute-capability test is answered for the device pass as sm_60: gfx9/CDNA GPUs
# provide every feature such guards protect up to sm_60 (native fp16 arithmetic, atomicAdd on double,
# block/system-scope atomics, __ldg, warp shuffles) and none of the later ones in CUDA's form (__dp4a at 6.1,
# independent thread scheduling, wmma/mma tensor cores, __nanosleep at 7.0, cp.async and bf16 arithmetic at
# 8.0, ...). The host pass keeps CUDA's meaning: __HIP_DEVICE_COMPILE__ is undefined there, as __CUDA_ARCH__ is.
CUDA_ARCH_EQUIVALENT = 600
CUDA_ARCH_VALUE = f"(__HIP_DEVICE_COMPILE__ * {CUDA_ARCH_EQUIVALENT})"
# CUDA toolkit version macros: HIP defines none of them (HIP_VERSION is HIP's own numbering), so a
# preprocessor test of them is already correct under HIP as written: it takes the branch of a compiler that
# is not that CUDA toolkit. Kept (and counted converted) in #if/#elif/#ifdef/#ifndef only; anywhere else
# (a C++ expression, a #define body) they are reported.
VERSION_MACROS = frozenset(
    {
        "CUDART_VERSION",
        "CUDA_VERSION",
        "__CUDACC_VER_MAJOR__",
        "__CUDACC_VER_MINOR__",
        "__CUDACC_VER_BUILD__",
        "__CUDA_ARCH_LIST__",
        "__CUDA_API_VERSION",
        "CUBLAS_VER_MAJOR",
        "CUBLAS_VER_MINOR",
        "CUBLAS_VER_PATCH",
        "CUBLAS_VER_BUILD",
        "CUBLAS_VERSION",
        "CUDNN_VERSION",
        "CUSPARSE_VERSION",
        "CUFFT_VERSION",
        "CURAND_VERSION",
        "NCCL_VERSION_CODE",
    }
)
_CONDITIONALS = ("if", "elif", "ifdef", "ifndef")
# version macros used outside a preprocessor condition that the HIP library defines under its own numbering (the
# other cuBLAS ones are in cublas.json: CUBLAS_VER_MAJOR -> hipblasVersionMajor, ...)
VERSION_EXPRESSIONS = {
    "CUBLAS_VERSION": "(hipblasVersionMajor * 10000 + hipblasVersionMinor * 100 + hipblasVersionPatch)",
}


def _version_test(tokens: list[Token], i: int, result: Result) -> bool:
    """A CUDA version macro in a preprocessor condition: kept, since HIP leaves it undefined."""
    tok = tokens[i]
    if tok.directive not in _CONDITIONALS:
        return False
    result.converted.append(Reference(tok.line, tok.text, "version", f"{tok.text} (kept: undefined under HIP)"))
    return True


def _cuda_arch(tokens: list[Token], i: int, out: list[str], result: Result) -> None:
    """``__CUDA_ARCH__`` -> ``__HIP_DEVICE_COMPILE__`` where only its presence is tested; a value use
    (``#if __CUDA_ARCH__ >= 700``) -> ``(__HIP_DEVICE_COMPILE__ * 600)``, see CUDA_ARCH_EQUIVALENT."""
    tok = tokens[i]
    prev = prev_sig(tokens, i)
    nxt = next_sig(tokens, i)
    presence = (
        tok.directive in ("ifdef", "ifndef")
        or text_at(tokens, prev) == "defined"
        or (is_punct(tokens, prev, "(") and text_at(tokens, prev_sig(tokens, prev)) == "defined")
    )
    if not presence and tok.directive in ("if", "elif"):
        after = tokens[nxt] if nxt < len(tokens) else None
        ends = after is None or after.directive != tok.directive or after.line != tok.line
        presence = ends or (after.kind == PUNCT and after.text in ("&&", "||", ")"))
        presence = presence and not (
            prev >= 0 and tokens[prev].kind == PUNCT and tokens[prev].text in ("<", ">", "<=", ">=", "==", "!=")
        )
    if presence:
        out[i] = "__HIP_DEVICE_COMPILE__"
        result.converted.append(Reference(tok.line, "__CUDA_ARCH__", "types", "__HIP_DEVICE_COMPILE__"))
        return
    if tok.directive in ("define", "undef") and text_at(tokens, prev) == tok.directive:
        return  # the project defines __CUDA_ARCH__ itself (a shim for another platform)
    out[i] = CUDA_ARCH_VALUE
    result.converted.append(Reference(tok.line, "__CUDA_ARCH__", "types", CUDA_ARCH_VALUE))


def local_declarations(tokens: list[Token]) -> set[str]:
    """Names the source defines itself: macros, and functions, types and variables it declares."""
    names: set[str] = set()
    sig = [i for i, t in enumerate(tokens) if t.kind not in TRIVIA]
    for pos, i in enumerate(sig):
        t = tokens[i]
        if t.kind != IDENT or pos == 0:
            continue
        prev = tokens[sig[pos - 1]]
        if t.directive == "define" and prev.text == "define" and prev.kind == IDENT:
            names.add(t.text)
            continue
        if prev.kind == IDENT and prev.text in ("struct", "class", "enum", "union", "namespace", "using"):
            names.add(t.text)
            continue
        nxt = tokens[sig[pos + 1]] if pos + 1 < len(sig) else None
        if (  # a function pointer: void (*name)(int), typedef int (*name)(void*)
            prev.text == "*"
            and pos >= 2
            and tokens[sig[pos - 2]].text == "("
            and nxt is not None
            and nxt.text == ")"
            and pos + 2 < len(sig)
            and tokens[sig[pos + 2]].text in ("(", "[")
        ):
            names.add(t.text)
            continue
        if (
            prev.kind == IDENT
            and prev.text not in _NOT_A_TYPE
            and not prev.directive
            and nxt is not None
            and nxt.kind == PUNCT
            and nxt.text in ("(", "[", "=", ";", ",", "{", ")")
        ):
            names.add(t.text)
    return names


# what a HIP compile sees in each pass: no CUDA toolkit version macro; __CUDA_ARCH__ as _cuda_arch translates it
_NO_CUDA_VERSION: dict[str, int | None] = {
    name: None
    for name in (
        *sorted(VERSION_MACROS),
        "CCCL_MAJOR_VERSION",
        "CCCL_MINOR_VERSION",
        "CCCL_PATCH_VERSION",
        "CUB_VERSION",
        "THRUST_VERSION",
        "__CUDACC_RTC__",
    )
}
HIP_PASSES: tuple[dict[str, int | None], ...] = (
    {**_NO_CUDA_VERSION, "__CUDA_ARCH__": CUDA_ARCH_EQUIVALENT, "__CUDACC__": 1, "__NVCC__": 1},
    {**_NO_CUDA_VERSION, "__CUDA_ARCH__": None, "__CUDACC__": 1, "__NVCC__": 1},
)
