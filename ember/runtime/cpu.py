"""CPU runtime: run compiled objects in process (LLVM's MCJIT), export and load shared libraries."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

from ..errors import EmberError, ToolchainError
from ..ir.dtype import dtype
from .elf import undefined_symbols
from .module import Function, Module

_CTYPE = {
    ("int", 8): ctypes.c_int8,
    ("int", 16): ctypes.c_int16,
    ("int", 32): ctypes.c_int32,
    ("int", 64): ctypes.c_int64,
    ("uint", 8): ctypes.c_uint8,
    ("uint", 16): ctypes.c_uint16,
    ("uint", 32): ctypes.c_uint32,
    ("uint", 64): ctypes.c_uint64,
}


def _prototype(sig: dict[str, Any]) -> Any:
    nbuf = sum(1 for p in sig["params"] if p["kind"] == "buffer")
    scal = []
    for s in sig["scalars"]:
        t = dtype(s["dtype"])
        scal.append(_CTYPE.get((t.kind, t.bits), ctypes.c_int64))
    return ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * nbuf + scal))


def _invoker(cfunc: Any) -> Callable[[list[int], list[Any]], int]:
    def invoke(pointers: list[int], scalars: list[Any]) -> int:
        return cfunc(*pointers, *scalars)

    return invoke


class CPUModule(Module):
    """Functions compiled for the host, running in this process."""

    type_key = "llvm"

    def __init__(self, compiled: Any, loop_ir: str, target: Any, owner: Any, addresses: dict[str, int]):
        self.compiled = compiled
        self._owner = owner  # keeps the JIT engine or the shared library alive
        functions = {}
        for sig in compiled.functions:
            cfunc = _prototype(sig)(addresses[sig["name"]])
            functions[sig["name"]] = Function(sig, _invoker(cfunc), "cpu", self)
        from ..codegen.cpu import assembly

        sources = {
            "ir": lambda: loop_ir,
            "llvm": lambda: compiled.llvm_ir,
            "asm": lambda: assembly(compiled.llvm_ir, target),
        }
        super().__init__(functions, sources)
        self.target = target

    #: The shared library this module was loaded from (``load_module``), else None.
    library_path: str | None = None

    def export_library(self, path: str) -> None:
        """Link the object into a shared library with the system's ``cc`` (and libgomp); a module
        loaded from a library (no object kept) writes a copy of that library."""
        if not self.compiled.obj:
            if self.library_path is None or not os.path.exists(self.library_path):
                raise EmberError("export_library: this module keeps neither its object code nor its library file")
            os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
            shutil.copyfile(self.library_path, path + ".tmp")
            os.replace(path + ".tmp", path)
            return
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            raise ToolchainError("export_library needs a C compiler driver (cc, gcc or clang) to link; install gcc")
        with tempfile.TemporaryDirectory() as tmp:
            obj = os.path.join(tmp, "module.o")
            with open(obj, "wb") as f:
                f.write(self.compiled.obj)
            out_tmp = os.path.join(tmp, "lib.so")
            proc = subprocess.run([cc, "-shared", "-o", out_tmp, obj, "-lgomp", "-lm"], capture_output=True, text=True)
            if proc.returncode != 0:
                raise ToolchainError(f"linking {path} with {cc} failed:\n{proc.stderr.strip()}")
            os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
            shutil.copyfile(out_tmp, path + ".tmp")
            os.replace(path + ".tmp", path)


def _resolvable(name: str) -> bool:
    """True when MCJIT can bind ``name``: a library loaded for LLVM, or the process's global
    symbols (libc, libm and the libraries loaded with RTLD_GLOBAL)."""
    import llvmlite.binding as llvm

    if llvm.address_of_symbol(name):
        return True
    try:
        getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return False
    return True


def jit_module(compiled: Any, loop_ir: str, target: Any) -> CPUModule:
    """Load a compiled object into this process with MCJIT."""
    import llvmlite.binding as llvm

    from ..codegen.cpu import init_llvm, load_runtime_libraries, target_machine

    init_llvm()
    load_runtime_libraries()
    missing = [n for n in undefined_symbols(compiled.obj) if not _resolvable(n)]
    if missing:
        # MCJIT would bind them to address 0 and the first call would crash the process.
        raise ToolchainError(
            f"the compiled code needs {', '.join(sorted(missing))}, which no library loaded in this process "
            "provides (compiler support routines come from libgcc_s.so.1 / compiler-rt, math from libm): "
            "install them, or avoid the operation that needs them"
        )
    tm = target_machine(target)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(compiled.obj))
    engine.finalize_object()
    addresses = {}
    for sig in compiled.functions:
        addr = engine.get_function_address(sig["name"])
        if not addr:
            raise EmberError(f"function {sig['name']} was not found in the compiled object")
        addresses[sig["name"]] = addr
    return CPUModule(compiled, loop_ir, target, engine, addresses)


def load_module(path: str) -> CPUModule:
    """Load a shared library written by ``export_library``."""
    from ..codegen.cpu import CompiledCPU, load_runtime_libraries
    from ..target import Target

    if not os.path.exists(path):
        raise EmberError(f"load_module: {path} does not exist")
    load_runtime_libraries()
    try:
        lib = ctypes.CDLL(os.path.abspath(path))
        size = ctypes.c_int64.in_dll(lib, "__ember_metadata_size").value
        raw = bytes((ctypes.c_char * size).in_dll(lib, "__ember_metadata"))
        sigs = json.loads(raw.decode())
    except (OSError, ValueError) as exc:
        raise EmberError(f"load_module: {path} is not a library written by ember's export_library ({exc})") from exc
    addresses = {s["name"]: ctypes.cast(getattr(lib, s["name"]), ctypes.c_void_p).value for s in sigs}
    compiled = CompiledCPU("; LLVM IR is not kept in exported libraries", b"", sigs, "llvm")
    mod = CPUModule(compiled, "# loop IR is not kept in exported libraries", Target("llvm"), lib, addresses)
    mod.library_path = os.path.abspath(path)
    return mod
