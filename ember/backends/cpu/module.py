"""CPU modules at run time: compiled objects mapped in process by LLVM's MCJIT.

A module is loaded from its *parts* (``module.json``, ``module.o``, ``module.ll``; see
:class:`ember.backends.cpu.CPUBackend`): a fresh build, a cache hit, a saved model and a file
written by :meth:`CPUModule.export_library` all take the same path, :func:`load_parts`, which
checks the description and the object before LLVM sees it. No ``dlopen``: static constructors
and other load-time code in an object never run; saving needs no C compiler."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from typing import Any

from ...errors import EmberError, ModelFormatError, ToolchainError
from ...ir.dtypes import dtype
from ...runtime.module import Function, Module

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

    def __init__(self, parts: dict[str, bytes], functions_sig: list[dict[str, Any]], loop_ir: str, llvm_ir: str,
                 target: Any, owner: Any, addresses: dict[str, int]):
        self.parts = parts
        self._owner = owner  # keeps the JIT engine alive
        #: Each function's machine-code address (valid while the module lives): what
        #: :mod:`.plan` calls without going through ctypes per kernel.
        self.addresses: dict[str, int] = dict(addresses)
        functions = {}
        for sig in functions_sig:
            cfunc = _prototype(sig)(addresses[sig["name"]])
            functions[sig["name"]] = Function(sig, _invoker(cfunc), "cpu", self)
        from .codegen import assembly

        sources = {
            "ir": lambda: loop_ir,
            "llvm": lambda: llvm_ir,
            "asm": lambda: assembly(llvm_ir, target),
        }
        super().__init__(functions, sources)
        self.target = target

    def export_library(self, path: str) -> None:
        """Write the module to ``path`` (an ember module file: a zip of its parts) for
        :func:`load_module`; needs no compiler or linker."""
        from .file import write_parts

        write_parts(path, self.parts)


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


def _signatures(meta: Any) -> list[dict[str, Any]]:
    """The function signatures of ``module.json``, checked field by field."""
    from .signature import check_signatures

    return check_signatures(meta)


def load_parts(parts: dict[str, bytes], target: Any = None) -> CPUModule:
    """A runnable module from CPU parts (untrusted: a fresh build, a cache entry or a file).
    Checks the description (format, target, every signature field: :mod:`.signature`) and the
    object (:func:`.elf.check_object`: structure, no load-time code, only allowlisted imports)
    before LLVM sees them; raises ModelFormatError when either is not what ember writes, and
    ToolchainError when the object needs an allowlisted routine this process lacks. Nothing in
    the object runs before a function is called."""
    import llvmlite.binding as llvm

    from ...target import Target
    from . import CPU_FORMAT
    from .codegen import init_llvm, load_runtime_libraries, target_machine
    from .elf import check_object

    try:
        meta = json.loads(parts["module.json"])
        obj = parts["module.o"]
    except (KeyError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ModelFormatError(f"the CPU module's parts are incomplete or unreadable ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != CPU_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ModelFormatError(f"the CPU module has format {got!r}; this ember reads {CPU_FORMAT}")
    sigs = _signatures(meta)
    named = meta.get("target", "llvm")
    if not isinstance(named, str):
        raise ModelFormatError("the CPU module's target is not a target string")
    try:
        tgt = Target(target or named)
    except EmberError as exc:
        raise ModelFormatError(f"the CPU module names a bad target: {exc}") from exc
    if tgt.kind != "llvm":
        raise ModelFormatError(f"the CPU module names the target {named!r}, which is not a CPU target")
    if not isinstance(obj, bytes):
        raise ModelFormatError("the CPU module's object code is not bytes")
    loop_ir = meta.get("loop_ir") if isinstance(meta.get("loop_ir"), str) else "# loop IR not kept"
    llvm_ir = parts.get("module.ll", b"; LLVM IR not kept").decode("utf-8", "replace")
    undefined = check_object(obj, [s["name"] for s in sigs])
    init_llvm()
    load_runtime_libraries()
    missing = [n for n in undefined if not _resolvable(n)]
    if missing:
        # MCJIT would bind them to address 0 and the first call would crash the process.
        raise ToolchainError(
            f"the compiled code needs {', '.join(sorted(missing))}, which no library loaded in this process "
            "provides (compiler support routines come from libgcc_s.so.1 / compiler-rt, math from libm): "
            "install them, or avoid the operation that needs them"
        )
    tm = target_machine(tgt)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    try:
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
    except RuntimeError as exc:
        raise ModelFormatError(f"LLVM rejected the CPU module's object code: {exc}") from exc
    addresses = {}
    for sig in sigs:
        addr = engine.get_function_address(sig["name"])
        if not addr:
            raise ModelFormatError(f"function {sig['name']} was not found in the compiled object")
        addresses[sig["name"]] = addr
    return CPUModule(dict(parts), sigs, loop_ir, llvm_ir, tgt, engine, addresses)


def load_module(path: str) -> CPUModule:
    """Load a module file written by :meth:`CPUModule.export_library` (no compiler runs)."""
    from .file import read_parts

    return load_parts(read_parts(path))
