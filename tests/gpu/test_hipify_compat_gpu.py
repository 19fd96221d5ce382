"""``ember_hip_compat.h`` against the real CUDA intrinsics: one nvcc-built program whose kernel evaluates every
CUDA intrinsic the header replaces (``__vsub4``, ``__vcmpne4``, ``__dp4a``, ... each overload) and its
``ember_*`` counterpart on the same edge and random inputs, on the GPU; every pair of results must be identical.

The program is compiled for sm_90 without a GPU too (``test_compat_program_compiles``), so a compile error
shows up on a machine with nvcc only; the comparison itself needs an NVIDIA GPU and skips without one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ember.hipify

COMPAT_DIR = Path(ember.hipify.__file__).parent / "compat"
HEADER = COMPAT_DIR / "ember_hip_compat.h"
DEFINITION = re.compile(r"^EMBER_COMPAT_FN (unsigned int|int) (ember_\w+)\(([^)]*)\)", re.M)

# the same edge inputs as the host test (tests/hipify/test_hipify_compat.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hipify"))
from test_hipify_compat import call_expression as _call  # noqa: E402
from test_hipify_compat import inputs as host_inputs  # noqa: E402


def header_functions() -> list[tuple[str, str, int]]:
    """(ember name, argument type, number of arguments) of every function (overload) the header defines."""
    out = []
    for _ret, name, params in DEFINITION.findall(HEADER.read_text(encoding="utf-8")):
        kind = params.split(",")[0].rsplit(" ", 1)[0].strip()
        out.append((name, kind, params.count(",") + 1))
    return out


def inputs() -> list[tuple[int, int, int]]:
    """The host test's edge and random triples, with more random ones."""
    return host_inputs(n_random=20000, seed=7)


def program_source() -> str:
    """The CUDA program: reads "a b c" lines, evaluates both sides on the GPU, prints mismatches and a summary."""
    funcs = header_functions()
    stores = []
    for i, (name, kind, arity) in enumerate(funcs):
        cuda = "__" + name.removeprefix("ember_")
        stores.append(f"  cuda_out[{i} * n + t] = {_call(cuda, kind, arity)};")
        stores.append(f"  ember_out[{i} * n + t] = {_call(name, kind, arity)};")
    labels = ", ".join(f'"{name} [{kind}]"' for name, kind, _ in funcs)
    arities = ", ".join(str(arity) for _, _, arity in funcs)
    nl = "\n"
    return f"""#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include "ember_hip_compat.h"

#define NF {len(funcs)}
static const char* NAMES[NF] = {{{labels}}};
static const int ARITY[NF] = {{{arities}}};

__global__ void evaluate(const unsigned int* in, unsigned int* cuda_out, unsigned int* ember_out, int n) {{
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const unsigned int a = in[3 * t], b = in[3 * t + 1], c = in[3 * t + 2];
{nl.join(stores)}
}}

#define CHECK(call) do {{ cudaError_t e = (call); if (e != cudaSuccess) {{ \\
  std::fprintf(stderr, "%s: %s\\n", #call, cudaGetErrorString(e)); return 2; }} }} while (0)

int main() {{
  std::vector<unsigned int> in;
  unsigned int a, b, c;
  while (std::scanf("%u %u %u", &a, &b, &c) == 3) {{ in.push_back(a); in.push_back(b); in.push_back(c); }}
  const int n = static_cast<int>(in.size() / 3);
  const size_t out_bytes = sizeof(unsigned int) * NF * static_cast<size_t>(n);
  unsigned int *d_in, *d_cuda, *d_ember;
  CHECK(cudaMalloc(&d_in, in.size() * sizeof(unsigned int)));
  CHECK(cudaMalloc(&d_cuda, out_bytes));
  CHECK(cudaMalloc(&d_ember, out_bytes));
  CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(unsigned int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_cuda, 0xA5, out_bytes));
  CHECK(cudaMemset(d_ember, 0x5A, out_bytes));
  evaluate<<<(n + 127) / 128, 128>>>(d_in, d_cuda, d_ember, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned int> cuda_out(NF * static_cast<size_t>(n)), ember_out(NF * static_cast<size_t>(n));
  CHECK(cudaMemcpy(cuda_out.data(), d_cuda, out_bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(ember_out.data(), d_ember, out_bytes, cudaMemcpyDeviceToHost));
  long mismatches = 0;
  for (int f = 0; f < NF; ++f) {{
    long bad = 0;
    for (int t = 0; t < n; ++t) {{
      const size_t k = static_cast<size_t>(f) * n + t;
      if (cuda_out[k] == ember_out[k]) continue;
      if (bad++ == 0) {{
        std::printf("MISMATCH %s args", NAMES[f]);
        for (int j = 0; j < ARITY[f]; ++j) std::printf(" 0x%08x", in[3 * t + j]);
        std::printf(" cuda 0x%08x ember 0x%08x\\n", cuda_out[k], ember_out[k]);
      }}
    }}
    mismatches += bad;
  }}
  std::printf("CHECKED %d functions x %d inputs, %ld mismatches\\n", NF, n, mismatches);
  return mismatches == 0 ? 0 : 1;
}}
"""


def _nvcc() -> str:
    """The nvcc executable, or a skip saying it is missing."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found: the CUDA comparison program is built with nvcc")
    return nvcc


def _build(tmp_path: Path, arch: str) -> Path:
    """Build the comparison program for ``arch`` (warnings are errors); its path."""
    src = tmp_path / "compat_vs_cuda.cu"
    src.write_text(program_source(), encoding="utf-8")
    exe = tmp_path / "compat_vs_cuda"
    cmd = [_nvcc(), "-std=c++17", "-O2", f"-arch={arch}", "-Werror", "all-warnings", f"-I{COMPAT_DIR}"]
    built = subprocess.run([*cmd, str(src), "-o", str(exe)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, f"{' '.join(cmd)}\n{built.stdout}{built.stderr}"
    return exe


@pytest.mark.slow
def test_compat_program_compiles(tmp_path):
    """nvcc builds the comparison program for sm_90 (no GPU needed)."""
    assert _build(tmp_path, "sm_90").stat().st_size > 0


@pytest.mark.gpu
@pytest.mark.slow
def test_ember_compat_equals_cuda_intrinsics_on_gpu(cuda_dev, tmp_path):
    """Every ember_* function returns what the CUDA intrinsic returns, on every input, on the GPU."""
    exe = _build(tmp_path, "native")
    cases = inputs()
    feed = "".join(f"{a} {b} {c}\n" for a, b, c in cases)
    ran = subprocess.run([str(exe)], input=feed, capture_output=True, text=True, timeout=300)
    report = ran.stdout + ran.stderr
    mismatches = [line for line in ran.stdout.splitlines() if line.startswith("MISMATCH")]
    assert not mismatches, f"{len(mismatches)} functions differ from CUDA; first: {mismatches[0]}\n{report}"
    assert ran.returncode == 0, report
    n_funcs = len(header_functions())
    assert f"CHECKED {n_funcs} functions x {len(cases)} inputs, 0 mismatches" in ran.stdout, report
