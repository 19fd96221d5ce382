"""Objects whose symbols cannot be resolved are refused with an ember error before MCJIT binds
them to address 0 (which crashed the process at the first call); symbols that are not math or
runtime routines ember's code calls are refused as not ember's."""

from __future__ import annotations

import json

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

import ember
from ember import te
from ember.backends.cpu import CPU_FORMAT, elf
from ember.backends.cpu.codegen import init_llvm, optimize, target_machine
from ember.backends.cpu.elf import undefined_symbols
from ember.backends.cpu.module import load_parts
from ember.errors import ModelFormatError, ToolchainError
from ember.target import Target


def _object_calling(name: str) -> bytes:
    init_llvm()
    mod = ir.Module(name="m")
    mod.triple = Target("llvm").triple
    fnty = ir.FunctionType(ir.VoidType(), [])
    ext = ir.Function(mod, fnty, name)
    caller = ir.Function(mod, fnty, "caller")
    b = ir.IRBuilder(caller.append_basic_block())
    b.call(ext, [])
    b.ret_void()
    parsed = llvm.parse_assembly(str(mod))
    return target_machine(Target("llvm")).emit_object(parsed)


def test_undefined_symbols_lists_what_the_object_imports() -> None:
    obj = _object_calling("ember_test_missing_symbol")
    assert undefined_symbols(obj) == ["ember_test_missing_symbol"]
    assert undefined_symbols(b"not an object") == []


def _parts(obj: bytes) -> dict[str, bytes]:
    meta = {"format": CPU_FORMAT, "target": "llvm", "functions": [{"name": "caller", "params": [], "scalars": []}]}
    return {"module.json": json.dumps(meta).encode(), "module.o": obj}


def test_unresolvable_symbol_raises_instead_of_crashing(monkeypatch) -> None:
    # an allowed routine that no library in this process provides: a ToolchainError naming it
    monkeypatch.setattr(elf, "ALLOWED_IMPORTS", elf.ALLOWED_IMPORTS | {"ember_test_missing_symbol"})
    obj = _object_calling("ember_test_missing_symbol")
    with pytest.raises(ToolchainError, match="ember_test_missing_symbol"):
        load_parts(_parts(obj))


def test_symbol_not_on_the_allowlist_is_refused() -> None:
    for name in ("ember_test_missing_symbol", "system", "dlopen"):
        with pytest.raises(ModelFormatError, match=name):
            load_parts(_parts(_object_calling(name)))


def test_allowlisted_math_routine_loads() -> None:
    module = load_parts(_parts(_object_calling("tanhf")))
    assert module.function_names == ["caller"]


def test_float64_to_float16_runs(rng) -> None:
    # x86 without AVX512-FP16 converts through a support routine (__truncdfhf2) from libgcc_s
    A = te.placeholder((37,), "float64", name="A")
    B = te.compute((37,), lambda i: A[i].astype("float16"), name="B")
    f = ember.build(te.create_schedule(B.op), [A, B], use_cache=False)
    a = rng.standard_normal(37) * 100
    b = ember.nd.array(np.full(37, np.nan, np.float16))
    f(ember.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a.astype(np.float16))


def test_a_zero_filled_heap_buffer_becomes_calloc_and_loads() -> None:
    # malloc + memset(0) is turned into calloc by LLVM's optimizer (a tuned GEMM point with a
    # zero-initialised scratch buffer was refused for importing it)
    init_llvm()
    mod = ir.Module(name="m")
    mod.triple = Target("llvm").triple
    i64, ptr = ir.IntType(64), ir.PointerType(ir.IntType(8))
    malloc = ir.Function(mod, ir.FunctionType(ptr, [i64]), "malloc")
    free = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr]), "free")
    memset = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ir.IntType(8), i64, ir.IntType(1)]),
                         "llvm.memset.p0i8.i64")
    caller = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, i64, i64, ir.PointerType(ir.IntType(32))]),
                         "caller")
    b = ir.IRBuilder(caller.append_basic_block())
    n, j, k, out = caller.args
    buf = b.call(malloc, [n])
    b.call(memset, [buf, ir.Constant(ir.IntType(8), 0), n, ir.Constant(ir.IntType(1), 0)])
    b.store(ir.Constant(ir.IntType(8), 7), b.gep(buf, [k]))
    b.store(b.zext(b.load(b.gep(buf, [j])), ir.IntType(32)), out)  # 7 where j == k, else 0
    b.call(free, [buf])
    b.ret_void()
    parsed = llvm.parse_assembly(str(mod))
    tm = target_machine(Target("llvm"))
    optimize(parsed, tm)
    obj = tm.emit_object(parsed)
    if "calloc" not in undefined_symbols(obj):
        pytest.skip(f"this LLVM kept malloc + memset ({undefined_symbols(obj)}): nothing to check")
    load_parts(_parts(obj))  # accepted, its symbols resolved
