"""``ember_hip_compat.h``: the ``ember_*`` versions of CUDA intrinsics HIP lacks (SIMD-in-a-word, dp4a/dp2a).

* The table ``maps/compat.json`` names exactly the functions the header defines, each after its CUDA name.
* Host semantics: one g++ program (UBSan on, warnings as errors) evaluates every function, every overload, on
  edge and random inputs; each result must equal a Python reference written from the CUDA Math API's
  definition of the intrinsic (lanes as Python ints).
* Every function compiles in a HIP kernel for gfx90a with the HIP 6.4 toolchain and with Debian's hipcc 5.2.
* The API section (extensible launches and their attributes, programmatic dependent launch, the CUDA 12 graph
  update, the cuBLAS workspace, __nanosleep, __reduce_*_sync): every name of compat.json's ``replace`` section is
  defined, the attribute ids have CUDA's values (read from CUDA's driver_types.h and cuda.h where installed), and
  a program using each of them compiles for gfx90a with both toolchains, and as host C++ against HIP 6.4. With no
  AMD GPU here, the host side runs against a mock HIP runtime that records what the shims call (arguments converted
  to the kernel's types, the cooperative path, events after the launch, cluster and unknown-id errors, the graph
  update's result info, the cuBLAS workspace through a mock rocBLAS).
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
    obj = compile_with_header(toolchain_or_skip(hip_version), _hip_kernel_source(), tmp_path / "compat_kernel.hip")
    assert obj.stat().st_size > 0


def toolchain_or_skip(hip_version: str):
    """The toolchain of a HIP target; the test is skipped, with the reason, when it is not installed."""
    try:
        return find_hip_toolchain(hip_version)
    except HipifyError as exc:
        pytest.skip(str(exc))


def compile_with_header(tc, text: str, src: Path, *, as_hip: bool = True, flags: tuple[str, ...] = ()) -> Path:
    """Compile ``text`` (written to ``src``) with the header's folder on the include path, -Werror; the object."""
    src.write_text(text, encoding="utf-8")
    obj = src.with_suffix(".o")
    defines = [] if as_hip else ["__HIP_PLATFORM_AMD__=1"]
    cmd = tc.command(str(src), str(obj), includes=[str(COMPAT_DIR)], defines=defines, as_hip=as_hip)
    done = subprocess.run([*cmd, "-Werror", *flags], capture_output=True, text=True, env=tc.environment())
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr}"
    return obj


# ---- the API section ------------------------------------------------------------------------------------------

CUDA_INCLUDE = Path("/usr/local/cuda/include")


def test_every_replacement_is_defined_by_the_header():
    table = json.loads(TABLE.read_text(encoding="utf-8"))
    text = HEADER.read_text(encoding="utf-8")
    defined = set(re.findall(r"\b(ember_\w+)\b", text))
    assert sorted(set(table["replace"].values()) - defined) == []
    assert all(name in table["replace"] for names in table["warn"].values() for name in names)


def _cuda_enum(path: Path, prefix: str) -> dict[str, int]:
    """``NAME = value`` enumerators starting with ``prefix`` in a CUDA header."""
    text = path.read_text(errors="replace")
    return {m.group(1): int(m.group(2)) for m in re.finditer(rf"\b({prefix}\w+)\s*=\s*(\d+)", text)}


def test_launch_attribute_ids_have_cudas_values():
    runtime, driver = CUDA_INCLUDE / "driver_types.h", CUDA_INCLUDE / "cuda.h"
    if not runtime.exists() or not driver.exists():
        pytest.skip(f"CUDA headers not in {CUDA_INCLUDE}: the ids are compared with CUDA's own values")
    ours = _cuda_enum(HEADER, "ember_hipLaunchAttribute")
    table = json.loads(TABLE.read_text(encoding="utf-8"))["replace"]
    for path, prefix in ((runtime, "cudaLaunchAttribute"), (driver, "CU_LAUNCH_ATTRIBUTE_")):
        cuda = _cuda_enum(path, prefix)
        assert len(cuda) >= 16, path
        for name, value in cuda.items():
            assert name in table, f"{name} ({path.name}) has no replacement"
            assert ours[table[name]] == value, f"{name} = {value} in CUDA, {ours[table[name]]} in the header"


API_PROGRAM = """#include "ember_hip_compat.h"
#include <hip/hip_runtime.h>
#include <hipblas/hipblas.h>

__global__ void k(int a, float* b, const float* c) {
  ember_hipGridDependencySynchronize();
  b[a] = c[a] + ember_reduce_add_sync(0xffffffffu, a) + ember_reduce_min_sync(3u, 2u) + ember_reduce_max_sync(1u, -a);
  b[a] += ember_reduce_and_sync(0xffu, 6u) + ember_reduce_or_sync(0xffu, 1u) + ember_reduce_xor_sync(0xffu, 1u);
  ember_nanosleep(100);
  ember_hipTriggerProgrammaticLaunchCompletion();
}
__global__ void k0() {}

int run(float* b, hipStream_t s, hipEvent_t done, hipFunction_t f, void** params, hipblasHandle_t h, void* ws) {
  ember_hipLaunchAttribute attr[4];
  attr[0].id = ember_hipLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = ember_hipLaunchAttributeCooperative;
  attr[1].value.cooperative = 0;
  attr[2].id = ember_hipLaunchAttributeClusterDimension;
  attr[2].val.clusterDim.x = attr[2].val.clusterDim.y = attr[2].val.clusterDim.z = 1;
  attr[3].id = ember_hipLaunchAttributeProgrammaticEvent;
  attr[3].val.programmaticEvent.event = done;
  ember_hipLaunchConfig_t cfg = {dim3(1), dim3(64), 0, s, attr, 4};
  hipError_t e = ember_hipLaunchKernelEx(&cfg, k, 1, b, b);
  e = ember_hipLaunchKernelEx(&cfg, k0);
  e = ember_hipLaunchKernelEx(&cfg, k, 1.5, b, nullptr);  // converted to the kernel's parameter types
  void* args[] = {nullptr};
  e = ember_hipLaunchKernelExC(&cfg, reinterpret_cast<const void*>(k0), args);
  ember_HIP_LAUNCH_CONFIG dc = {1, 1, 1, 64, 1, 1, 0, s, attr, 1};
  e = ember_hipDrvLaunchKernelEx(&dc, f, params, nullptr);
  ember_hipGraphExecUpdateResultInfo info;
  hipGraphExec_t exec = nullptr;
  hipGraph_t graph = nullptr;
  e = ember_hipGraphExecUpdate(exec, graph, &info);
  hipblasStatus_t st = ember_hipblasSetWorkspace(h, ws, 1 << 20);
  return (e == hipSuccess ? 0 : 1) + (st == HIPBLAS_STATUS_SUCCESS ? 0 : 2) +
         (static_cast<int>(info.result) == ember_hipGraphExecUpdateErrorAttributesChanged ? 4 : 0);
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("hip_version", ["6.4", "5.2"])
def test_api_section_compiles_for_gfx90a(tmp_path, hip_version):
    """A program calling every API of the section compiles (-c, -Werror) as HIP for gfx90a."""
    tc = toolchain_or_skip(hip_version)
    if not tc.has_header("hipblas/hipblas.h") and not Path("/opt/ember-hip-libs/usr/include/hipblas").is_dir():
        pytest.skip("hipBLAS headers not installed (scripts/install_system_deps.sh fetches them)")
    compile_with_header(tc, API_PROGRAM, tmp_path / "api.hip", flags=("-Wall",))


@pytest.mark.slow
def test_api_section_compiles_as_host_cxx_against_hip64(tmp_path):
    """A host-only C++ unit (as a CUDA build hands .cpp files to the host compiler) can use the launch APIs."""
    text = """#include "ember_hip_compat.h"
int launch(const void* kernel, void** args, hipStream_t s) {
  ember_hipLaunchAttribute a;
  a.id = ember_hipLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  ember_hipLaunchConfig_t cfg = {dim3(2), dim3(128), 0, s, &a, 1};
  return ember_hipLaunchKernelExC(&cfg, kernel, args) == hipSuccess ? 0 : 1;
}
"""
    # -Wno-unused-command-line-argument: the toolchain's HIP device flags, unused by a host-only unit
    flags = ("-Wall", "-Wno-unused-command-line-argument")
    compile_with_header(toolchain_or_skip("6.4"), text, tmp_path / "host.cpp", as_hip=False, flags=flags)


MOCK_PROGRAM = r"""#include "ember_hip_compat.h"
#include <cstdio>
#include <cstring>

static const char* last = "none";
static int calls = 0, got_a = 0;
static float got_b = 0;
static const float* got_c = nullptr;
static unsigned got_grid = 0, got_block = 0, got_module_grid = 0;
static size_t got_smem = 0;

extern "C" {  // the HIP runtime functions the shims call, recording instead of launching
hipError_t hipLaunchKernel(const void*, dim3 g, dim3 b, void** args, size_t smem, hipStream_t) {
  last = "launch", ++calls;
  got_a = *static_cast<int*>(args[0]), got_b = *static_cast<float*>(args[1]);
  got_c = *static_cast<const float**>(args[2]), got_grid = g.x, got_block = b.x, got_smem = smem;
  return hipSuccess;
}
hipError_t hipLaunchCooperativeKernel(const void*, dim3, dim3, void**, unsigned int, hipStream_t) {
  return last = "cooperative", ++calls, hipSuccess;
}
hipError_t hipEventRecord(hipEvent_t, hipStream_t) { return last = "record", ++calls, hipSuccess; }
hipError_t hipModuleLaunchKernel(hipFunction_t, unsigned gx, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, hipStream_t, void**, void**) {
  return got_module_grid = gx, last = "module", ++calls, hipSuccess;
}
hipError_t hipModuleLaunchCooperativeKernel(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned,
                                            unsigned, unsigned, hipStream_t, void**) {
  return last = "module-cooperative", ++calls, hipSuccess;
}
hipError_t hipGraphExecUpdate(hipGraphExec_t, hipGraph_t, hipGraphNode_t* node, hipGraphExecUpdateResult* result) {
  *node = reinterpret_cast<hipGraphNode_t>(0x1234);
  *result = hipGraphExecUpdateErrorTopologyChanged;
  return hipErrorGraphExecUpdateFailure;
}
}

void kernel(int, float, const float*) {}

int main() {
  ember_hipLaunchAttribute attr[3];
  std::memset(attr, 0, sizeof attr);
  attr[0].id = ember_hipLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = ember_hipLaunchAttributePriority;
  attr[2].id = ember_hipLaunchAttributeProgrammaticEvent;
  attr[2].val.programmaticEvent.event = reinterpret_cast<hipEvent_t>(0x1);
  ember_hipLaunchConfig_t cfg = {dim3(3), dim3(64), 128, nullptr, attr, 3};
  const float* p = reinterpret_cast<const float*>(0x40);
  int rc = ember_hipLaunchKernelEx(&cfg, kernel, 7, 2.5, p);  // 2.5 (double) becomes the kernel's float
  std::printf("pdl %d %d %s %d %g %d %u %u %zu\n", rc, calls, last, got_a, got_b, got_c == p, got_grid, got_block,
              got_smem);
  attr[1].id = ember_hipLaunchAttributeCooperative;
  attr[1].val.cooperative = 1;
  cfg.numAttrs = 2, calls = 0;
  rc = ember_hipLaunchKernelEx(&cfg, kernel, 1, 1.0f, p);
  std::printf("cooperative %d %d %s\n", rc, calls, last);
  attr[1].id = ember_hipLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = 2, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = 1, calls = 0;
  std::printf("cluster2 %d %d\n", ember_hipLaunchKernelEx(&cfg, kernel, 1, 1.0f, p) == hipErrorNotSupported, calls);
  attr[1].val.clusterDim.x = 1;
  std::printf("cluster1 %d %d\n", ember_hipLaunchKernelEx(&cfg, kernel, 1, 1.0f, p), calls);
  attr[1].id = static_cast<ember_hipLaunchAttributeID>(15), calls = 0;
  std::printf("unknown %d %d\n", ember_hipLaunchKernelEx(&cfg, kernel, 1, 1.0f, p) == hipErrorInvalidValue, calls);
  attr[1].id = ember_hipLaunchAttributeCooperative;
  ember_HIP_LAUNCH_CONFIG dc = {4, 1, 1, 128, 1, 1, 0, nullptr, attr, 1};
  rc = ember_hipDrvLaunchKernelEx(&dc, nullptr, nullptr, nullptr);
  std::printf("driver %d %s %u\n", rc, last, got_module_grid);
  dc.numAttrs = 2;
  std::printf("driver-cooperative %d %s\n", ember_hipDrvLaunchKernelEx(&dc, nullptr, nullptr, nullptr), last);
  ember_hipGraphExecUpdateResultInfo info;
  rc = ember_hipGraphExecUpdate(nullptr, nullptr, &info);
  std::printf("graph %d %d %d %d\n", rc == hipErrorGraphExecUpdateFailure,
              info.result == hipGraphExecUpdateErrorTopologyChanged,
              info.errorNode == reinterpret_cast<hipGraphNode_t>(0x1234), info.errorFromNode == nullptr);
  std::printf("workspace %d %d\n", ember_compat_detail::blas_set_workspace(nullptr, nullptr, 0),
              ember_compat_detail::blas_set_workspace(nullptr, nullptr, 1));
  return 0;
}
"""

MOCK_ROCBLAS = """#include <cstddef>
// rocblas_status: 0 success, 5 memory error
extern "C" int rocblas_set_workspace(void*, void*, size_t bytes) { return bytes == 0 ? 0 : 5; }
"""


@pytest.mark.slow
def test_api_section_host_behaviour_against_a_mock_hip_runtime(tmp_path):
    """The launch, graph-update and workspace shims call HIP as documented (a recording mock, no GPU)."""
    tc = toolchain_or_skip("6.4")
    flags = [*tc.flags, f"-I{COMPAT_DIR}", "-D__HIP_PLATFORM_AMD__=1", "-Wno-unused-command-line-argument"]
    (tmp_path / "mock.cpp").write_text(MOCK_PROGRAM, encoding="utf-8")
    (tmp_path / "rocblas.cpp").write_text(MOCK_ROCBLAS, encoding="utf-8")
    for cmd in (
        [tc.compiler, "-x", "c++", *flags, "-Wall", "-Werror", "mock.cpp", "-o", "mock", "-ldl"],
        [tc.compiler, "-shared", "-fPIC", "rocblas.cpp", "-o", "librocblas_mock.so"],
    ):
        built = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=tc.environment())
        assert built.returncode == 0, f"{' '.join(cmd)}\n{built.stderr}"
    ran = subprocess.run([str(tmp_path / "mock")], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "pdl 0 2 record 7 2.5 1 3 64 128",  # launched serialized, then the programmatic event recorded
        "cooperative 0 1 cooperative",
        "cluster2 1 0",  # a 2-block cluster: hipErrorNotSupported, nothing launched
        "cluster1 0 1",
        "unknown 1 0",  # an id CUDA does not have: hipErrorInvalidValue
        "driver 0 module 4",
        "driver-cooperative 0 module-cooperative",
        "graph 1 1 1 1",
        "workspace 0 0",  # no hipblasSetWorkspace, no rocBLAS: success, rocBLAS keeps its own workspace
    ]
    env = {"LD_PRELOAD": str(tmp_path / "librocblas_mock.so")}
    with_rocblas = subprocess.run([str(tmp_path / "mock")], capture_output=True, text=True, timeout=60, env=env)
    assert with_rocblas.stdout.splitlines()[-1] == "workspace 0 2"  # rocblas memory error -> ALLOC_FAILED
