"""Preprocessor branches HIP never compiles (ember.hipify.conditions), on llama.cpp-style snippets and against
g++'s own preprocessor."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from ember.hipify.conditions import Region, inactive_regions, integer_defines

DEVICE = {"__CUDA_ARCH__": 600, "CUDART_VERSION": None, "__CUDA_ARCH_LIST__": None, "CCCL_MAJOR_VERSION": None}
HOST = {**DEVICE, "__CUDA_ARCH__": None}
HIP = [DEVICE, HOST]
GGML = {"GGML_CUDA_CC_HOPPER": 900, "GGML_CUDA_CC_AMPERE": 800, "GGML_CUDA_CC_VOLTA": 700}


def lines(src: str, project: dict[str, int | None] | None = None) -> list[tuple[int, int]]:
    """(first, last) of every inactive region of ``src`` under HIP's two passes."""
    return [(r.first, r.last) for r in inactive_regions(src, HIP, project or {})]


# --- llama.cpp's conditions ---------------------------------------------------------------------------------------


def test_cuda_version_branch_is_inactive_and_its_else_active() -> None:
    src = """#include "common.cuh"
#if CUDART_VERSION >= 12080
    cudaLaunchAttribute attrs[1];
    attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
#else
    launch_plain();
#endif
"""
    assert inactive_regions(src, HIP, {}) == [Region(3, 4, 2, "#if CUDART_VERSION >= 12080")]


def test_cuda_arch_list_ifdef() -> None:
    src = """#ifdef __CUDA_ARCH_LIST__
constexpr bool ggml_cuda_has_arch(const int arch) { return ggml_cuda_has_arch_impl(arch, __CUDA_ARCH_LIST__); }
#else
constexpr bool ggml_cuda_has_arch(const int) { return false; }
#endif
"""
    assert inactive_regions(src, HIP, {}) == [Region(2, 2, 1, "#ifdef __CUDA_ARCH_LIST__")]


def test_unknown_flag_and_false_arch_test_is_inactive() -> None:
    src = """static void launch() {
#if defined(GGML_CUDA_USE_PDL) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER
    cudaGridDependencySynchronize();
#endif
}
"""
    assert lines(src, GGML) == [(3, 3)]
    # Without the project's constant the comparison is unknown, so the branch may be compiled.
    assert lines(src) == []


def test_not_defined_hip_and_ampere_is_inactive() -> None:
    src = """#if !defined(GGML_USE_HIP) && !defined(GGML_USE_MUSA) && __CUDA_ARCH__ >= GGML_CUDA_CC_AMPERE
#define AMPERE_MMA_AVAILABLE
    asm("cp.async.cg.shared.global [%0], [%1], 16;" : : "r"(dst), "l"(src));
#endif
"""
    assert lines(src, GGML) == [(2, 3)]


def test_ifdef_unknown_is_active_and_false_elif_inactive() -> None:
    src = """#ifdef GGML_USE_HIP
    return __builtin_amdgcn_ds_swizzle(x, 0x1f);
#elif __CUDA_ARCH__ >= GGML_CUDA_CC_VOLTA
    return __shfl_xor_sync(0xffffffff, x, 1, 32);
#else
    NO_DEVICE_CODE;
#endif
"""
    assert inactive_regions(src, HIP, GGML) == [Region(4, 4, 3, "#elif __CUDA_ARCH__ >= GGML_CUDA_CC_VOLTA")]


def test_unknown_disjunct_keeps_branch_active() -> None:
    assert lines("#if __CUDA_ARCH__ >= 610 || defined(GGML_USE_MUSA)\n    dp4a();\n#endif\n") == []


def test_branch_active_in_device_pass_only_is_active() -> None:
    assert lines("#if __CUDA_ARCH__ >= 600\n    atomicAdd(p, 1);\n#else\n    host();\n#endif\n") == []


def test_nested_inactive_inside_active() -> None:
    src = """#ifdef __CUDA_ARCH__
    int a;
#if __CUDA_ARCH__ < 500
    legacy();
#if CUDART_VERSION >= 11000
    deeper();
#endif
#endif
    int b;
#endif
"""
    # The inner test is false in the device pass and its parent is not taken in the host pass; only the
    # outermost inactive branch is reported, covering its nested directives.
    assert inactive_regions(src, HIP, {}) == [Region(4, 7, 3, "#if __CUDA_ARCH__ < 500")]


def test_branches_after_a_taken_branch_are_inactive() -> None:
    src = "#if !defined(CUDART_VERSION)\nhip();\n#elif CUDART_VERSION >= 12000\ncuda12();\n#else\ncuda11();\n#endif\n"
    assert inactive_regions(src, HIP, {}) == [
        Region(4, 4, 3, "#elif CUDART_VERSION >= 12000"),
        Region(6, 6, 5, "#else (of #if !defined(CUDART_VERSION))"),
    ]


def test_elifdef_and_elifndef() -> None:
    src = "#ifdef CUDART_VERSION\na\n#elifndef __CUDA_ARCH_LIST__\nb\n#elifdef X\nc\n#endif\n"
    assert lines(src) == [(2, 2), (6, 6)]


# --- syntax ---------------------------------------------------------------------------------------------------------


def test_line_continuation_and_spaced_directives() -> None:
    src = "#  if CUDART_VERSION >= \\\n      12080 /* needs\n  12.8 */\ncuda();\n  # else\nhip();\n#endif\n"
    assert inactive_regions(src, HIP, {}) == [Region(4, 4, 1, "#if CUDART_VERSION >= 12080")]


def test_crlf_line_endings() -> None:
    assert lines("x\r\n#if CUDART_VERSION\r\ny\r\n#endif\r\nz\r\n") == [(3, 3)]


def test_comments_and_strings_holding_directives() -> None:
    src = """#if 0
/*
#endif
*/
// #endif
const char *s = R"(
#endif
)";
#endif
after();
"""
    assert lines(src) == [(2, 8)]


def test_if_zero_block_with_prose() -> None:
    src = "#if 0\nIt's an old path: don't \"quote me\n#else\nx();\n#endif\n"
    assert lines(src) == [(2, 2)]


def test_if_one_else_and_short_circuits() -> None:
    src = """#if 1
a
#else
b
#endif
#if 0 && __has_include(<cuda_fp8.h>)
c
#endif
#if 1 || UNKNOWN_FLAG
d
#else
e
#endif
#if UNKNOWN_FLAG && !true
f
#endif
"""
    assert lines(src) == [(4, 4), (7, 7), (12, 12), (15, 15)]


def test_unknowns_stay_active() -> None:
    src = """#if __has_builtin(__builtin_amdgcn_ds_swizzle)
a
#endif
#if CUDA_VERSION_MACRO(12, 0)
b
#endif
#if 'A' == 65
c
#endif
#if 1 / 0
d
#endif
#if CUDART_VERSION / 0 == 0
e
#endif
#if (1 << 64) == 0
f
#endif
"""
    assert lines(src) == []


@pytest.mark.parametrize("cond", ["(", "1 +", "1.5", '"x"', "", "defined", "defined(", "1 ? 2", "1 = 1", "0x", "1 2"])
def test_malformed_conditions_are_maybe_active(cond: str) -> None:
    assert lines(f"#if {cond}\nbody();\n#else\nother();\n#endif\n") == []


def test_unbalanced_directives() -> None:
    # A stray #endif / #else is ignored; the next chain still works.
    assert lines("#endif\n#else\nx\n#if 0\ny\n#endif\n") == [(5, 5)]
    # A chain without its #endif counts as maybe compiled, but chains closed before it are still decided.
    assert lines("#if 0\na\n#endif\n#if 0\nb\n") == [(2, 2)]
    assert lines("#if 0\na\n#if 0\nb\n#endif\n") == [(4, 4)]  # the #endif closes the inner chain
    # A second #else is malformed: maybe compiled.
    assert lines("#if 1\na\n#else\nb\n#else\nc\n#endif\n") == [(4, 4)]


def test_unterminated_comment_and_raw_string_never_raise() -> None:
    assert lines("#if 0\nx\n#endif\n/* never closed\n#if 0\ny\n#endif\n") == [(2, 2)]
    assert lines('#if 0\nx\n#endif\nauto s = R"(never closed\n') == []


def test_empty_environment_list_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one environment"):
        inactive_regions("#if 0\n#endif\n", [], {})


# --- names ----------------------------------------------------------------------------------------------------------


def test_files_own_defines_apply_from_where_they_stand() -> None:
    src = """#if CUDART_VERSION >= 11000
a
#endif
#define CUDART_VERSION 11080
#if CUDART_VERSION >= 11000
b
#endif
#if CUDART_VERSION >= 12000
c
#endif
#undef CUDART_VERSION
#ifdef CUDART_VERSION
d
#endif
"""
    assert lines(src) == [(2, 2), (9, 9), (13, 13)]


def test_define_on_a_maybe_path_makes_the_name_unknown() -> None:
    src = "#ifdef GGML_USE_MUSA\n#define CUDART_VERSION 12000\n#endif\n#if CUDART_VERSION >= 11000\nx\n#endif\n"
    assert lines(src) == []


def test_define_on_the_device_path_only() -> None:
    src = """#ifdef __CUDA_ARCH__
#define ARCH __CUDA_ARCH__
#else
#define ARCH 0
#endif
#if ARCH >= 700
volta();
#endif
#if ARCH == 600 || ARCH == 0
both();
#endif
"""
    assert lines(src) == [(7, 7)]


def test_object_like_bodies_expand_as_tokens() -> None:
    # 2 + 3 * 2 == 8: the body is substituted, not its value.
    assert lines("#define SUM 2 + 3\n#if SUM * 2 == 10\nx\n#endif\n") == [(3, 3)]


def test_project_name_that_disagrees_with_an_environment_is_unknown() -> None:
    src = "#if CUDART_VERSION >= 12000\nx\n#endif\n"
    assert lines(src) == [(2, 2)]
    assert lines(src, {"CUDART_VERSION": None}) == []  # a shim header defines it somewhere
    assert lines(src, {"CUDART_VERSION": 11000}) == []


def test_project_value_of_unknown_signedness() -> None:
    # integer_defines("#define V 5u") gives 5: -1 < 5 is true for a signed 5 and false for 5u.
    assert lines("#if -1 < V\nx\n#endif\n", {"V": 5}) == []
    assert lines("#if V > 4\nx\n#else\ny\n#endif\n", {"V": 5}) == [(4, 4)]


# --- integer_defines ----------------------------------------------------------------------------------------------


def test_integer_defines_literals_and_expressions() -> None:
    header = """#pragma once
#define GGML_CUDA_CC_PASCAL 600
#define GGML_CUDA_CC_VOLTA (700)
#define WARP_MASK 0xFFFFFFFFu
#define BIG 1'000'000ULL
#define OCT 010
#define BIN 0b101
#define NEG -1
#define GGML_CUDA_CC_OFFSET_AMD 0x1000000
#define GGML_CUDA_CC_VEGA (GGML_CUDA_CC_OFFSET_AMD + 0x900)
#define GGML_CUDA_CC_IS_AMD(cc) (cc >= GGML_CUDA_CC_OFFSET_AMD)
#define UNPARENTHESISED GGML_CUDA_CC_PASCAL + 1
#define NAME_ONLY GGML_CUDA_CC_PASCAL
#define WORD __device__
#define EMPTY
#define USES_UNKNOWN (SOMETHING_ELSE + 1)
"""
    assert integer_defines([header]) == {
        "GGML_CUDA_CC_PASCAL": 600,
        "GGML_CUDA_CC_VOLTA": 700,
        "WARP_MASK": 0xFFFFFFFF,
        "BIG": 1_000_000,
        "OCT": 8,
        "BIN": 5,
        "NEG": -1,
        "GGML_CUDA_CC_OFFSET_AMD": 0x1000000,
        "GGML_CUDA_CC_VEGA": 0x1000900,
        "GGML_CUDA_CC_IS_AMD": None,
        "UNPARENTHESISED": None,
        "NAME_ONLY": 600,
        "WORD": None,
        "EMPTY": None,
        "USES_UNKNOWN": None,
    }


def test_integer_defines_across_files_redefinition_conditional_undef() -> None:
    a = "#define SAME 4\n#define DIFFERENT 1\n#define GONE 3\n#ifdef GGML_USE_HIP\n#define COND 5\n#endif\n"
    b = "#define SAME (4)\n#define DIFFERENT 2\n#undef GONE\n#define USES (SAME * 2)\n#define CYCLE (CYCLE + 1)\n"
    assert integer_defines([a, b]) == {
        "SAME": 4,
        "DIFFERENT": None,
        "GONE": None,
        "COND": None,
        "USES": 8,
        "CYCLE": None,
    }


def test_integer_defines_include_guard_is_not_a_condition() -> None:
    guarded = "// header\n#ifndef COMMON_H\n#define COMMON_H\n#define WARP 32\n#if X\n#define Y 1\n#endif\n#endif\n"
    assert integer_defines([guarded]) == {"COMMON_H": None, "WARP": 32, "Y": None}
    not_a_guard = "#ifndef COMMON_H\n#define COMMON_H\n#define WARP 32\n#endif\nint after;\n"
    assert integer_defines([not_a_guard])["WARP"] is None


def test_integer_defines_feed_inactive_regions() -> None:
    common = "#pragma once\n#define GGML_CUDA_CC_TURING 750\n#define GGML_CUDA_CC_AMPERE (800)\n"
    kernel = "#if __CUDA_ARCH__ >= GGML_CUDA_CC_TURING\nmma();\n#endif\n"
    assert lines(kernel, integer_defines([common, kernel])) == [(2, 2)]


# --- evaluation against g++'s preprocessor -----------------------------------------------------------------------

_LEAVES = ["0", "1", "2", "7", "0x10", "010", "0b11", "5u", "3ull", "0xFFFFFFFFFFFFFFFF", "A", "N", "Z", "true"]
_LEAVES += ["defined(A)", "defined Z", "!defined(N)"]
_BINARY = ["*", "+", "-", "<", ">", "<=", ">=", "==", "!=", "&", "^", "|", "&&", "||", "and", "bitor", "not_eq"]


def _expression(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(_LEAVES)
    kind = rng.random()
    if kind < 0.15:
        return rng.choice(["!", "~", "-", "+", "not "]) + _expression(rng, depth - 1)
    if kind < 0.25:
        return f"({_expression(rng, depth - 1)} {rng.choice(['<<', '>>'])} {rng.randrange(0, 8)})"
    if kind < 0.32:
        return f"({_expression(rng, depth - 1)} {rng.choice(['/', '%'])} {rng.choice(['3', '5u', '(-2)'])})"
    if kind < 0.4:
        a, b, c = (_expression(rng, depth - 1) for _ in range(3))
        return f"({a} ? {b} : {c})"
    return f"({_expression(rng, depth - 1)} {rng.choice(_BINARY)} {_expression(rng, depth - 1)})"


def test_evaluation_matches_gxx(tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed: it is the reference preprocessor this test compares against")
    rng = random.Random(20240611)
    exprs = [_expression(rng, 4) for _ in range(600)]
    src = "".join(f"#if {e}\nY{i}\n#else\nN{i}\n#endif\n" for i, e in enumerate(exprs))
    path = tmp_path / "exprs.cpp"
    path.write_text("#define A 3\n#define N (-2)\n" + src)
    done = subprocess.run(
        [gxx, "-E", "-P", "-w", "-x", "c++", "-std=c++17", str(path)], capture_output=True, text=True, check=True
    )
    taken = {word for word in done.stdout.split() if word[0] in "YN"}
    env = {"A": 3, "N": -2, "Z": None}
    regions = {r.first for r in inactive_regions(src, [env], {})}
    for i, e in enumerate(exprs):
        yes_line = 5 * i + 2
        gcc_yes = f"Y{i}" in taken
        assert gcc_yes != (f"N{i}" in taken), e
        # Every name is known, and no operand is undefined (no shift past 63, no division by zero), so every
        # condition is decided: the branch g++ skips is exactly the one reported.
        assert (yes_line in regions) == (not gcc_yes), e
        assert (yes_line + 2 in regions) == gcc_yes, e
