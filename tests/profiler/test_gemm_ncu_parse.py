"""The parser of ``benchmarks/gemm_ncu.py`` (Nsight Compute's ``--csv --page raw`` table: a header
of metric names, a row of units, one row per kernel launch) on a table in that layout: the
kernels by name, numbers with thousands separators, the named metrics and stall reasons; and
nothing for output without a table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gemm_ncu.py"

_HEAD = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
         "Grid Size", "Device", "CC", "gpu__time_duration.sum",
         "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
         "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"]
_ROWS = [[""] * 11 + ["nsecond", "%", "inst"],
         ["0", "651", "python3.12", "127.0.0.1", "ember_gemm_kernel0", "1", "7", "(384, 1, 1)", "(132, 1, 1)", "0",
          "9.0", "205,180", "83.03", "3.75"],
         ["1", "651", "python3.12", "127.0.0.1", "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "1", "7",
          "(384, 1, 1)", "(2, 66, 1)", "0", "9.0", "181,730", "95.12", "6.04"]]
TABLE = "\n".join(["==PROF== Connected to process 651 (/usr/bin/python3.12)",
                   '==PROF== Profiling "ember_gemm_kernel0" - 0: 0%....50%....100% - 9 passes',
                   *(",".join(f'"{c}"' for c in row) for row in [_HEAD, *_ROWS]),
                   "==PROF== Disconnected from process 651"])


def _module():
    spec = importlib.util.spec_from_file_location("gemm_ncu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parse_and_summarise():
    mod = _module()
    kernels = mod.parse_ncu_csv(TABLE)
    assert list(kernels) == ["ember_gemm_kernel0", "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"]
    ours = mod.summarise(kernels["ember_gemm_kernel0"])
    assert ours["duration"] == 205180.0 and ours["tensor_pipe_active_pct"] == 83.03
    assert ours["stalls_per_issue"]["barrier"] == 3.75 and ours["stalls_per_issue"]["gmma"] is None
    assert ours["l2_hit_pct"] is None  # not in this table
    assert mod.summarise(kernels["nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"])["duration"] == 181730.0


def test_output_without_a_table():
    assert _module().parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM - no permission\n") == {}


_SRC_HEAD = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
             "smsp__pcsamp_warps_issue_stalled_barrier", "smsp__pcsamp_warps_issue_stalled_wait"]
_SRC_ROWS = [["0x10", "MOV R1, c[0x0][0x28]", "2", "1", "0", "1"],
             ["0x20", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3+URZ], R4", "1,000", "900", "850", "20"],
             ["0x30", "HGMMA.64x256x16.F32 R24, gdesc[UR4], R24", "300", "10", "0", "280"],
             ["0x40", "EXIT", "0", "0", "0", "0"]]


def test_top_instructions():
    """The SASS table: the instructions with the most samples, in program order, with their share
    of all samples and their top reasons (prefix stripped, zero reasons left out)."""
    text = "\n".join(['==PROF== Disconnected'] + [",".join(f'"{c}"' for c in r) for r in [_SRC_HEAD, *_SRC_ROWS]])
    rows = _module().top_instructions(text, count=2)
    assert rows[2].startswith("| 0x20 | `SYNCS.PHASECHK") and "| 76.80 |" in rows[2]
    assert "barrier 850, wait 20" in rows[2]
    assert rows[3].startswith("| 0x30 | `HGMMA") and "wait 280" in rows[3] and "barrier" not in rows[3]
    assert len(rows) == 4  # header, rule, the two with most samples
    assert _module().top_instructions('"Address","Source"\n"0x10","EXIT"')[0].startswith("(no stall column")
