"""The packed GEMM's default register tile per CPU (:func:`ember.strategy.cpu_gemm.default_tile_candidates`,
:mod:`ember.strategy.cpu_arch`), and the tiles it picks checked against float64 NumPy.

* Per-CPU defaults, compiled for explicit ``-mcpu`` targets whatever the host: Zen 4 (512-bit
  operations double-pumped) takes at most ``MR_MAX_DOUBLE_PUMPED`` = 8 rows; Zen 5, Skylake-X,
  Ice Lake and Sapphire Rapids keep the 14 x 32 tile they were tuned with; Haswell-class CPUs
  (AVX2) 6 x 16. The kernel's assembly holds the tile's FMAs on the right registers.
* Correctness of those tiles at sizes no tile, panel or reduction block divides (outputs
  poisoned with NaN), run where this CPU has the features.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.ops.nn import matmul_tensor
from ember.strategy.cpu import CPUStrategy
from ember.strategy.cpu_arch import GENERIC, cpu_arch
from ember.strategy.cpu_gemm import MR_MAX_DOUBLE_PUMPED, default_tile_candidates
from ember.target import Target

TOL = {"rtol": 1e-4, "atol": 1e-4}

# (mcpu, register tile rows of a 1024^3 product, of the K-blocked 128 x 4096 x 4096, panel width)
DEFAULTS = [
    ("znver4", 8, 8, 32),
    ("znver5", 14, 12, 32),
    ("skylake-avx512", 14, 12, 32),
    ("icelake-server", 14, 12, 32),
    ("sapphirerapids", 14, 12, 32),
    ("haswell", 6, 6, 16),
    ("znver3", 6, 6, 16),
]


def _space(M, N, K, target):
    st = CPUStrategy(target)
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    C = matmul_tensor(A, B, strategy=st)
    space = st.space([C])
    assert space is not None
    return st, [A, B, C], space


@pytest.mark.parametrize("mcpu, mr_square, mr_skinny, nr", DEFAULTS, ids=[d[0] for d in DEFAULTS])
def test_default_tile_per_cpu(mcpu, mr_square, mr_skinny, nr) -> None:
    target = f"llvm -mcpu={mcpu}"
    st, _, space = _space(1024, 1024, 1024, target)
    assert st.gemm_panel_width() == nr
    d = space.default
    assert (d["mr"].val, d["k_outer"].val, d["tile_k"].size) == (mr_square, False, (1, 1024))
    _, _, skinny = _space(128, 4096, 4096, target)
    assert (skinny.default["mr"].val, skinny.default["k_outer"].val) == (mr_skinny, True)
    # the knob still offers every height that fits the registers (the tuner's space is the same)
    assert 14 in [c.val for c in space["mr"].candidates]


def test_cpu_arch_table() -> None:
    assert cpu_arch("llvm -mcpu=znver4").avx512_double_pumped
    assert cpu_arch("llvm -mcpu=znver4").l1d_set_period == 4096
    for mcpu in ("znver5", "skylake-avx512", "sapphirerapids", "icelake-server", "haswell"):
        assert not cpu_arch(f"llvm -mcpu={mcpu}").avx512_double_pumped
    assert cpu_arch("llvm -mcpu=some-future-cpu") == GENERIC
    assert cpu_arch("cuda -arch=sm_90") == GENERIC
    assert max(default_tile_candidates(CPUStrategy("llvm -mcpu=znver4"))) == MR_MAX_DOUBLE_PUMPED


def _host_runs(mcpu: str) -> bool:
    """True when code for ``mcpu`` runs here: the host is that CPU, or the target's vector
    features are the host's (Skylake-X and Haswell code on an AVX-512 host)."""
    host = Target("llvm")
    if host.mcpu == mcpu:
        return True
    return mcpu in ("skylake-avx512", "haswell") and Target(f"llvm -mcpu={mcpu}").features <= host.features


@pytest.mark.parametrize("mcpu", ["znver4", "znver5", "skylake-avx512", "haswell"])
@pytest.mark.parametrize("M, N, K", [(61, 101, 1031), (17, 70, 515), (9, 33, 20)], ids=["M61", "M17", "small"])
def test_default_tiles_match_float64(rng, mcpu, M, N, K) -> None:
    target = f"llvm -mcpu={mcpu}"
    st, args, space = _space(M, N, K, target)
    mr = space.default["mr"].val
    assert M % mr != 0 or M < mr  # a partial last row tile
    f = ember.build(st.schedule_group([args[2]]), args, target=target, name="mm")
    asm = f.get_source("asm")
    assert "vfmadd" in asm and ("%ymm" if mcpu == "haswell" else "%zmm") in asm
    if not _host_runs(mcpu):
        return  # compile-checked only
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), **TOL)


def test_skinny_k_blocked_zen4_tile_matches_float64(rng) -> None:
    """The K-blocked structure with Zen 4's 8-row tile at a size no block divides."""
    M, N, K = 37, 130, 1030  # forced through the knobs (the default takes it from 1 MiB of M x K on)
    target = "llvm -mcpu=znver4"
    st, args, space = _space(M, N, K, target)
    point = space.default.to_json()
    point["knobs"].update({"k_outer": {"val": True}, "tile_k": {"size": [10, 103]}, "parallel_axis": {"val": "panels"}})
    cfg = space.from_json(point)
    assert cfg["mr"].val == 8
    f = ember.build(st.schedule_group([args[2]], config=cfg), args, target=target, name="mm")
    if not _host_runs("znver4"):
        return
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), **TOL)
