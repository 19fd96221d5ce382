"""``ember_hip_compat.h``: the ``ember_*`` versions of CUDA intrinsics HIP lacks (SIMD-in-a-word, dp4a/dp2a).

* The table ``maps/compat.json`` names exactly the functions the header defines, each after its CUDA name.
* Host semantics: one g++ program (UBSan on, warnings as errors) evaluates every function, every overload, on
  edge and random inputs; each result must equal a Python reference written from the CUDA Math API's
  definition of the intrinsic (lanes as Python ints).
* Every function compiles in a HIP kernel for gfx90a with the HIP 6.4 toolchain and with Debian's hipcc 5.2.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import ember.hipify
from ember.hipify import HipifyError
from ember.hipify.toolchain import find_hip_toolchain

COMPAT_DIR = Path(ember.hipify.__file__).parent / "compat"
HEADER = COMPAT_DIR / "ember_hip_compat.h"
TABLE = Path(ember.hipify.__file__).parent / "maps" / "compat.json"

MASK32 = 0xFFFFFFFF
# A definition in the header: "EMBER_COMPAT_FN <return type> ember_name(<parameters>) {".
DEFINITION = re.compile(r"^EMBER_COMPAT_FN (unsigned int|int) (ember_\w+)\(([^)]*)\)", re.M)


# ---- the Python reference, from the CUDA Math API's descriptions ----------------------------------------------


def lanes(x: int, bits: int, signed: bool) -> list[int]:
    """The 32 // bits lanes of the 32-bit word ``x``, least significant first, as signed or unsigned ints."""
    out = []
    for i in range(32 // bits):
        v = (x >> (i * bits)) & ((1 << bits) - 1)
        if signed and v >> (bits - 1):
            v -= 1 << bits
        out.append(v)
    return out


def pack(values: list[int], bits: int) -> int:
    """The word whose lanes (least significant first) are ``values``, each wrapped to ``bits`` bits."""
    return sum((v & ((1 << bits) - 1)) << (i * bits) for i, v in enumerate(values))


def clamp(v: int, bits: int, signed: bool) -> int:
    """``v`` saturated to the range of a signed or unsigned ``bits``-bit integer."""
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return max(lo, min(hi, v))


def rounded_half_away(s: int) -> int:
    """s / 2 with a .5 rounded away from zero (PTX vavrg: (s + 1) >> 1 for s >= 0, s >> 1 for s < 0)."""
    return (s + 1) >> 1 if s >= 0 else s >> 1


Lane2 = Callable[[int, int, int], int]  # (x, y, bits) -> result lane

# CUDA's SIMD intrinsics minus "__v" and the lane count: (signed lanes, per-lane result, unary).
# "unary" functions take only a; their lane function sees y = 0.
SIMD: dict[str, tuple[bool, Lane2, bool]] = {
    "abs": (True, lambda x, y, n: abs(x), True),
    "absss": (True, lambda x, y, n: clamp(abs(x), n, True), True),
    "absdiffs": (True, lambda x, y, n: abs(x - y), False),
    "absdiffu": (False, lambda x, y, n: abs(x - y), False),
    "add": (False, lambda x, y, n: x + y, False),
    "addss": (True, lambda x, y, n: clamp(x + y, n, True), False),
    "addus": (False, lambda x, y, n: clamp(x + y, n, False), False),
    "avgs": (True, lambda x, y, n: rounded_half_away(x + y), False),
    "avgu": (False, lambda x, y, n: (x + y + 1) // 2, False),
    "haddu": (False, lambda x, y, n: (x + y) // 2, False),
    "maxs": (True, lambda x, y, n: max(x, y), False),
    "maxu": (False, lambda x, y, n: max(x, y), False),
    "mins": (True, lambda x, y, n: min(x, y), False),
    "minu": (False, lambda x, y, n: min(x, y), False),
    "neg": (True, lambda x, y, n: -x, True),
    "negss": (True, lambda x, y, n: clamp(-x, n, True), True),
    "sub": (False, lambda x, y, n: x - y, False),
    "subss": (True, lambda x, y, n: clamp(x - y, n, True), False),
    "subus": (False, lambda x, y, n: clamp(x - y, n, False), False),
}
COMPARISONS: dict[str, tuple[bool, Callable[[int, int], bool]]] = {
    "eq": (False, lambda x, y: x == y),
    "ne": (False, lambda x, y: x != y),
    "ges": (True, lambda x, y: x >= y),
    "geu": (False, lambda x, y: x >= y),
    "gts": (True, lambda x, y: x > y),
    "gtu": (False, lambda x, y: x > y),
    "les": (True, lambda x, y: x <= y),
    "leu": (False, lambda x, y: x <= y),
    "lts": (True, lambda x, y: x < y),
    "ltu": (False, lambda x, y: x < y),
}

Reference = Callable[[int, int, int], int]  # (a, b, c) as 32-bit words -> result as a 32-bit word


def _lanewise(signed: bool, fn: Lane2, bits: int, unary: bool) -> Reference:
    def ref(a: int, b: int, c: int) -> int:
        ys = [0] * (32 // bits) if unary else lanes(b, bits, signed)
        return pack([fn(x, y, bits) for x, y in zip(lanes(a, bits, signed), ys)], bits)

    return ref


def _compare(signed: bool, test: Callable[[int, int], bool], bits: int, on: int) -> Reference:
    def ref(a: int, b: int, c: int) -> int:
        return pack([on if test(x, y) else 0 for x, y in zip(lanes(a, bits, signed), lanes(b, bits, signed))], bits)

    return ref


def _sad(signed: bool, bits: int) -> Reference:
    def ref(a: int, b: int, c: int) -> int:
        return sum(abs(x - y) for x, y in zip(lanes(a, bits, signed), lanes(b, bits, signed)))

    return ref


def _dot(signed: bool, a_bits: int, b_first: int) -> Reference:
    """c + sum of a's lanes times b's bytes from ``b_first`` on (dp4a: 8-bit a lanes; dp2a: 16-bit), mod 2^32."""

    def ref(a: int, b: int, c: int) -> int:
        xs = lanes(a, a_bits, signed)
        ys = lanes(b, 8, signed)[b_first : b_first + len(xs)]
        acc = (c - (1 << 32) if signed and c >> 31 else c) + sum(x * y for x, y in zip(xs, ys))
        return acc & MASK32

    return ref


def reference_functions() -> dict[tuple[str, str], Reference]:
    """(CUDA name, argument type "unsigned int" or "int") -> reference, for every function the docs list."""
    refs: dict[tuple[str, str], Reference] = {}
    for n, bits in ((2, 16), (4, 8)):
        for base, (signed, fn, unary) in SIMD.items():
            refs[(f"__v{base}{n}", "unsigned int")] = _lanewise(signed, fn, bits, unary)
        for cmp, (signed, test) in COMPARISONS.items():
            refs[(f"__vcmp{cmp}{n}", "unsigned int")] = _compare(signed, test, bits, (1 << bits) - 1)
            refs[(f"__vset{cmp}{n}", "unsigned int")] = _compare(signed, test, bits, 1)
        refs[(f"__vsads{n}", "unsigned int")] = _sad(True, bits)
        refs[(f"__vsadu{n}", "unsigned int")] = _sad(False, bits)
    for kind, signed in (("int", True), ("unsigned int", False)):
        refs[("__dp4a", kind)] = _dot(signed, 8, 0)
        refs[("__dp2a_lo", kind)] = _dot(signed, 16, 0)
        refs[("__dp2a_hi", kind)] = _dot(signed, 16, 2)
    return refs


# ---- the header's functions and the inputs ---------------------------------------------------------------------


def header_functions() -> list[tuple[str, str, int]]:
    """(ember name, argument type, number of arguments) of every function (overload) the header defines."""
    out = []
    for _ret, name, params in DEFINITION.findall(HEADER.read_text(encoding="utf-8")):
        types = {p.rsplit(" ", 1)[0].strip() for p in params.split(",")}
        assert len(types) == 1, f"{name}: mixed argument types {types}"
        out.append((name, types.pop(), params.count(",") + 1))
    return out


def cuda_name(ember_name: str) -> str:
    """``ember_vsub4`` -> ``__vsub4``."""
    return "__" + ember_name.removeprefix("ember_")


EDGES = [
    0x00000000,
    0x00000001,
    0x0000007F,
    0x00000080,
    0x000000FF,
    0x00007FFF,
    0x00008000,
    0x0000FFFF,
    0x80808080,
    0x7F7F7F7F,
    0xFFFFFFFF,
    0x80000000,
    0x7FFFFFFF,
    0x7F80FF01,
    0x017F80FE,
    0x80007FFF,
    0x7FFF8000,
    0xFFFF0001,
    0x00FF00FF,
    0xFF00FF00,
    0x8001FF7F,
    0x12345678,
]
ACCUMULATORS = [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFF00, 1000]
EDGE_BYTES = [0x00, 0x01, 0x7E, 0x7F, 0x80, 0x81, 0xFE, 0xFF]


def inputs(n_random: int = 3000, seed: int = 20240611) -> list[tuple[int, int, int]]:
    """Every pair of edge words (with an edge accumulator c), then random triples: half uniform words, half
    words of edge bytes (so that lanes meet at the ends of their ranges)."""
    out = [(a, b, ACCUMULATORS[k % len(ACCUMULATORS)]) for k, (a, b) in enumerate((a, b) for a in EDGES for b in EDGES)]
    rng = random.Random(seed)

    def word() -> int:
        if rng.random() < 0.5:
            return rng.getrandbits(32)
        return sum(rng.choice(EDGE_BYTES) << (8 * i) for i in range(4))

    out += [(word(), word(), rng.choice([rng.getrandbits(32), *ACCUMULATORS])) for _ in range(n_random)]
    return out


def call_expression(name: str, kind: str, arity: int) -> str:
    """The C++ expression calling one overload on the words a, b, c, its result as an unsigned int."""
    args = ["a", "b", "c"][:arity]
    if kind == "int":
        return f"static_cast<unsigned int>({name}({', '.join(f'static_cast<int>({x})' for x in args)}))"
    return f"{name}({', '.join(args)})"


# ---- tests ---------------------------------------------------------------------------------------------------


def test_table_names_every_header_function_and_reference():
    """compat.json maps each CUDA name to the header's ember_ function; every overload has a reference."""
    table = json.loads(TABLE.read_text(encoding="utf-8"))
    assert table["name"] == "compat" and table["header"] == HEADER.name and table["title"]
    defined = header_functions()
    defined_names = {name for name, _, _ in defined}
    assert set(table["map"].values()) == defined_names
    for cuda, ember_name in table["map"].items():
        assert ember_name == "ember_" + cuda.removeprefix("__"), (cuda, ember_name)
    refs = reference_functions()
    tested = {(cuda_name(name), kind) for name, kind, _ in defined}
    assert tested == set(refs), f"header only: {tested - set(refs)}; docs only: {set(refs) - tested}"
    # 41 SIMD operations in 2 lane widths, and both overloads of dp4a, dp2a_lo, dp2a_hi
    assert len(table["map"]) == 85 and len(defined) == 88


def test_host_semantics_match_cuda_definitions(tmp_path):
    """Every function, every overload, on every input equals the Python reference (g++, UBSan, -Werror)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found: the host semantics test compiles the header with g++")
    funcs = header_functions()
    calls = "\n".join(f'    std::printf(" %u", {call_expression(*f)});' for f in funcs)
    src = tmp_path / "driver.cpp"
    src.write_text(
        f"""#include <cstdio>
#include "ember_hip_compat.h"
int main() {{
  unsigned int a, b, c;
  while (std::scanf("%u %u %u", &a, &b, &c) == 3) {{
{calls}
    std::printf("\\n");
  }}
  return 0;
}}
""",
        encoding="utf-8",
    )
    exe = tmp_path / "driver"
    flags = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-Wconversion", "-Wsign-conversion", "-pedantic", "-Werror"]
    ubsan = ["-fsanitize=undefined", "-fno-sanitize-recover=all"]
    cmd = [gxx, *flags, *ubsan, "-DEMBER_COMPAT_HD=", f"-I{COMPAT_DIR}", str(src), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    cases = inputs()
    feed = "".join(f"{a} {b} {c}\n" for a, b, c in cases)
    ran = subprocess.run([str(exe)], input=feed, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and not ran.stderr, ran.stderr
    rows = ran.stdout.splitlines()
    assert len(rows) == len(cases)
    refs = reference_functions()
    checked = 0
    for (a, b, c), row in zip(cases, rows):
        got = [int(v) for v in row.split()]
        assert len(got) == len(funcs)
        for (name, kind, arity), value in zip(funcs, got):
            want = refs[(cuda_name(name), kind)](a, b, c)
            if value != want:
                args = ", ".join(f"0x{x:08x}" for x in (a, b, c)[:arity])
                pytest.fail(f"{name}({args}) [{kind}] = 0x{value:08x}, CUDA's definition gives 0x{want:08x}")
            checked += 1
    assert checked == len(cases) * 88


def _hip_kernel_source() -> str:
    """A HIP kernel that stores the result of every function (each overload) on words read from memory."""
    lines = [f"  o[{i}] = {call_expression(*f)};" for i, f in enumerate(header_functions())]
    body = "\n".join(lines)
    return f"""#include "ember_hip_compat.h"

__global__ void ember_compat_all(const unsigned int* in, unsigned int* out) {{
  const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned int a = in[3 * t], b = in[3 * t + 1], c = in[3 * t + 2];
  unsigned int* o = out + {len(lines)} * t;
{body}
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("hip_version", ["6.4", "5.2"])
def test_every_function_compiles_as_hip_for_gfx90a(tmp_path, hip_version):
    """A gfx90a kernel calling every function compiles (-c, -Werror) with the HIP 6.4 and 5.2 toolchains."""
    try:
        tc = find_hip_toolchain(hip_version)
    except HipifyError as exc:
        pytest.skip(str(exc))
    src = tmp_path / "compat_kernel.hip"
    src.write_text(_hip_kernel_source(), encoding="utf-8")
    obj = tmp_path / "compat_kernel.o"
    cmd = tc.command(str(src), str(obj), includes=[str(COMPAT_DIR)], offload_arch="gfx90a")
    done = subprocess.run([*cmd, "-Werror"], capture_output=True, text=True, env=tc.environment())
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr}"
    assert obj.stat().st_size > 0
