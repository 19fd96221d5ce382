"""The CPU backend: LLVM for the host (x86-64, AArch64), objects run in process.

``compile`` emits a relocatable object plus ``module.json`` (format, function signatures) and
the LLVM IR text; ``load`` checks the object (:mod:`.elf`) and maps it with LLVM's in-process
linker (MCJIT) — no ``dlopen``, so nothing in the object runs at load.
"""

from __future__ import annotations

import json

from ...errors import ModelFormatError
from ...ir.stmt import PrimFunc
from ...runtime.module import Module
from ...target import Target
from ..base import Backend, Parts

#: Version of the CPU parts' ``module.json``.
CPU_FORMAT = "ember-cpu-module/1"
#: Bumped whenever the code generator emits different code for the same loop IR (it is part of
#: the cache key, so cached objects of an older code generator are not reused).
#: 2: parallel loop bodies take their buffers as ``noalias`` parameters.
#: 3: float32 erf and tanh inline (withdrawn: up to 7 ulp, above the project's 1-2 ulp bounds).
#: 4: parallel loops on ember's pool (:mod:`.pool`) instead of libgomp's parallel regions.
#: 5: float32 exp inline (:mod:`.vexp`).
#: 6: ``ember_parallel_for`` takes a fifth argument, the pool mode (dynamic or static).
#: 7: float32 tanh inline (:mod:`.vtanh`, <= 1 ulp).
#: 8: float32 erf inline in double (:mod:`.verf`, <= 1 ulp).
#: 9: float32 erf inline in float32 (:mod:`.verf`, <= 1.5 ulp, four times faster than 8).
CODEGEN_REVISION = 9


class CPUBackend(Backend):
    """Builds and loads CPU modules."""

    kind = "llvm"

    def fingerprint(self, target: Target) -> str:
        """The CPU model and features (in the target string) and the code generator's revision."""
        return f"cpu {target.triple} {target.mcpu} {target.mattr} codegen {CODEGEN_REVISION}"

    def compile(self, funcs: list[PrimFunc], target: Target, jobs: int | None = None) -> Parts:
        """Code generation, LLVM O3 and object emission (see :mod:`.codegen`), in up to ``jobs``
        processes (None: :func:`.codegen.default_jobs`); the parts are the same for any ``jobs``."""
        from .codegen import compile_cpu, default_jobs

        texts = [str(f) for f in funcs]
        weights = [len(t) for t in texts]
        compiled = compile_cpu(funcs, target, funcs[0].name, default_jobs(weights) if jobs is None else jobs, weights)
        meta = {"format": CPU_FORMAT, "target": str(target), "functions": compiled.functions,
                "loop_ir": "\n\n".join(texts)}
        return {"module.json": json.dumps(meta).encode(), "module.o": compiled.obj,
                "module.ll": compiled.llvm_ir.encode()}

    def load(self, parts: Parts, target: Target | None = None) -> Module:
        """Check the parts and map the object in process (see :func:`.module.load_parts`)."""
        from .module import load_parts

        return load_parts(parts, target)

    def serialize(self, module: Module) -> Parts:
        """The parts of a CPU module (it keeps them)."""
        parts = getattr(module, "parts", None)
        if parts is None:
            raise ModelFormatError("this CPU module keeps no object code to save")
        return dict(parts)
