"""A bad kernel raises an ember error, never a Python error from llvmlite or an LLVM abort: the
loop IR is verified before LLVM sees it (ember.ir.verify)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember
from ember import te
from ember.ir import dtype
from ember.ir import expr as E
from ember.ir import stmt as S
from ember.ir.buffer import Buffer
from ember.ir.verify import verify

F32, F64, I32 = dtype("float32"), dtype("float64"), dtype("int32")


def _func(body_fn):
    A = Buffer("A", F32, (E.const(8),))
    B = Buffer("B", F32, (E.const(8),))
    i = E.Var("i")
    return S.PrimFunc("bad", [A, B], S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL, body_fn(A, B, i)), {})


def _load(buf, i):
    return E.BufferLoad(buf, (i,), buf.dtype)


BAD = {
    "mixed-type add": (lambda A, B, i: S.BufferStore(B, E.Add(_load(A, i), i, F32), (i,)),
                       "Add of float32 and int32"),
    "wider store": (lambda A, B, i: S.BufferStore(B, E.Cast(F64, _load(A, i)), (i,)),
                    "store of float64 into B, a float32 buffer"),
    "bool store": (lambda A, B, i: S.BufferStore(B, i < 3, (i,)), "store of bool into B"),
    "float index": (lambda A, B, i: S.BufferStore(B, E.BufferLoad(A, (E.const(1.0),), F32), (i,)),
                    "index of type float32"),
    "two indices": (lambda A, B, i: S.BufferStore(B, E.const(1.0), (i, i)), "2 indices"),
    "lanes": (lambda A, B, i: S.BufferStore(
        B, E.Add(E.Broadcast(E.const(1.0), 4, dtype("float32x4")), E.Broadcast(E.const(1.0), 8, dtype("float32x8")),
                 dtype("float32x8")), (E.Ramp(E.const(0), E.const(1), 8, dtype("int32x8")),)), "float32x4"),
    "float condition": (lambda A, B, i: S.IfThenElse(_load(A, i), S.BufferStore(B, E.const(1.0), (i,))),
                        "condition of type float32"),
    "select types": (lambda A, B, i: S.BufferStore(B, E.Select(i < 3, E.const(1.0), E.const(1.0, "float64"), F32),
                                                   (i,)), "select of float32 and float64"),
    "comparison types": (lambda A, B, i: S.IfThenElse(E.LT(i, E.const(1.0), dtype("bool")),
                                                      S.BufferStore(B, E.const(1.0), (i,))), "comparison of int32"),
    "float loop extent": (lambda A, B, i: S.For(E.Var("j"), E.const(0), E.const(2.5), S.ForKind.SERIAL,
                                                S.BufferStore(B, E.const(1.0), (i,))), "loop extent 2.5"),
    "let type": (lambda A, B, i: S.LetStmt(E.Var("t", I32), _load(A, i), S.BufferStore(B, E.const(1.0), (i,))),
                 "let of the int32 variable t"),
    "unbound variable": (lambda A, B, i: S.BufferStore(B, _load(A, E.Var("x")), (i,)), "variable x"),
    "unallocated buffer": (lambda A, B, i: S.BufferStore(Buffer("T", F32, (E.const(8),)), E.const(1.0), (i,)),
                           "buffer T is used outside"),
    "unknown intrinsic": (lambda A, B, i: S.BufferStore(B, E.Call(F32, "frobnicate", (_load(A, i),)), (i,)),
                          "math function frobnicate"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_kernels_raise_codegen_error(case):
    body_fn, fragment = BAD[case]
    with pytest.raises(ember.CodegenError) as info:
        ember.build(_func(body_fn), use_cache=False)
    assert fragment in str(info.value)
    if "variable x" not in fragment and "buffer T" not in fragment and "frobnicate" not in fragment:
        assert "invalid loop IR in bad" in str(info.value)  # caught by the verifier, before LLVM


def test_unlowered_nodes_are_rejected():
    A = te.placeholder((4,), name="A")
    i = E.Var("i")
    Bt = te.compute((4,), lambda j: A[j] * 2.0, name="Bt")
    body = S.For(i, E.const(0), E.const(4), S.ForKind.SERIAL, S.ProducerStore(Bt, A[i], (i,)))
    with pytest.raises(ember.CodegenError, match="ProducerStore left after lowering"):
        verify(S.PrimFunc("bad", [Buffer("A", F32, (E.const(4),))], body, {}))


def test_verifier_accepts_everything_lowering_produces():
    """Lowered kernels with vectors, selects, lets, casts and reductions pass the verifier."""
    n = te.var("n")
    A = te.placeholder((n, 16), dtype="float16", name="A")
    k = te.reduce_axis((0, 16), name="k")
    M = te.compute((n,), lambda i: te.max(A[i, k].astype("float32"), axis=k), name="M")
    B = te.compute((n, 16), lambda i, j: te.if_then_else(A[i, j] > 0, te.exp(A[i, j].astype("float32") - M[i]),
                                                         0.0).astype("bfloat16"), name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(s[B].split(B.op.axis[1], factor=8)[1])
    s[B].parallel(B.op.axis[0])
    verify(ember.lower(s, [A, B]))
    f = ember.build(s, [A, B], name="softmaxish")
    a = np.random.default_rng(0).standard_normal((3, 16)).astype("float16")
    out = ember.nd.array(np.full((3, 16), np.nan, dtype=np.float32), dtype="bfloat16")
    f(ember.nd.array(a), out)
    m = a.astype(np.float32).max(axis=1, keepdims=True)
    ref = np.where(a > 0, np.exp(a.astype(np.float64) - m), 0)
    np.testing.assert_allclose(out.numpy(), ref, rtol=2**-8, atol=0)


def test_bad_kernel_does_not_kill_the_process(tmp_path):
    """Run a malformed kernel build in a child process: it must exit normally with an ember
    error (an LLVM abort or a segfault would give a signal exit code)."""
    script = textwrap.dedent("""
        import ember
        from ember.ir import dtype, expr as E, stmt as S
        from ember.ir.buffer import Buffer
        F32 = dtype("float32")
        A, B = Buffer("A", F32, (E.const(8),)), Buffer("B", F32, (E.const(8),))
        i = E.Var("i")
        body = S.For(i, E.const(0), E.const(8), S.ForKind.SERIAL,
                     S.BufferStore(B, E.Cast(dtype("float64"), E.BufferLoad(A, (i,), F32)), (i,)))
        try:
            ember.build(S.PrimFunc("bad", [A, B], body, {}), use_cache=False)
        except ember.CodegenError as exc:
            print("ember error:", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={"EMBER_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "ember error: invalid loop IR in bad" in proc.stdout
