"""The walkthrough of DESIGN.md, run on the CPU.

DESIGN.md's walkthrough binds the split loops to GPU thread indices and builds for ROCm. On the
CPU the same program uses the CPU's counterparts of those two binds (``parallel`` for the blocks,
``vectorize`` for the threads); the rest reads unchanged. The README's walkthrough (the CPU
program) is executed verbatim from README.md."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import te

ROOT = Path(__file__).resolve().parents[1]


def _walkthrough_schedule(gpu_binds: bool):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    if gpu_binds:
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
    else:
        s[C].parallel(bx)
        s[C].vectorize(tx)
    return s, A, B, C


def test_design_walkthrough_on_cpu(rng):
    s, A, B, C = _walkthrough_schedule(gpu_binds=False)
    fadd = ember.build(s, [A, B, C], target="llvm", name="myadd")
    dev = ember.cpu(0)
    for size in (1024, 1027, 1, 0):
        a = ember.nd.array(rng.uniform(size=size).astype(A.dtype), dev)
        b = ember.nd.array(rng.uniform(size=size).astype(B.dtype), dev)
        c = ember.nd.array(np.full(size, np.nan, dtype=C.dtype), dev)
        fadd(a, b, c)
        np.testing.assert_array_equal(c.numpy(), a.numpy() + b.numpy())
    ir = fadd.get_source("ir")
    assert "def myadd(A: float32[n], B: float32[n], C: float32[n])" in ir
    assert "parallel" in ir and "ramp" in ir
    assert "define" in fadd.get_source("llvm")
    assert "myadd" in fadd.get_source("asm")


def test_design_walkthrough_with_gpu_binds_lowers_and_cpu_says_why_it_cannot_run():
    s, A, B, C = _walkthrough_schedule(gpu_binds=True)
    text = str(ember.lower(s, [A, B, C], name="myadd"))
    assert "bound to blockIdx.x" in text and "bound to threadIdx.x" in text
    with pytest.raises(ember.CodegenError, match="only GPU targets have.*target='cuda' or 'rocm'"):
        ember.build(s, [A, B, C], target="llvm", name="myadd")


def _readme_walkthrough() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"## Walkthrough[^\n]*\n+```python\n(.*?)```", text, re.S)
    assert m, "README.md has no walkthrough code block"
    return m.group(1)


def test_readme_walkthrough_runs_verbatim(capsys):
    code = _readme_walkthrough()
    namespace: dict = {}
    exec(compile(code, "README.md walkthrough", "exec"), namespace)  # noqa: S102 - our own README
    printed = capsys.readouterr().out
    assert "def myadd(" in printed  # the loop IR was printed
    c, a, b = namespace["c"], namespace["a"], namespace["b"]
    np.testing.assert_array_equal(c.numpy(), a.numpy() + b.numpy())
