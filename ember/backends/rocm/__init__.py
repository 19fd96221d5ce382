"""The ROCm backend: LLVM AMDGPU → HSA code object (linked with ``ld.lld``), run through HIP.

Code generation is :mod:`.codegen`; the host/device split, launch plans and host modules are
shared with CUDA (:mod:`ember.backends.gpu`).
"""

from __future__ import annotations

from ...ir.stmt import PrimFunc
from ...runtime.module import Module
from ...target import Target
from ..base import Backend, Parts


class ROCmBackend(Backend):
    """Builds and loads modules for AMD GPUs."""

    kind = "rocm"

    def fingerprint(self, target: Target) -> str:
        """The ROCm device libraries and the code object version."""
        from .codegen import AMDGPUCompiler

        return AMDGPUCompiler().fingerprint()

    def compile(self, funcs: list[PrimFunc], target: Target, jobs: int | None = None) -> Parts:
        """Split, generate, link the ROCm device libraries, optimise, emit and link the code object
        (in this process: ``jobs`` is ignored)."""
        from ..gpu.build import compile_parts
        from .codegen import AMDGPUCompiler

        return compile_parts(funcs, target, AMDGPUCompiler())

    def load(self, parts: Parts, target: Target | None = None) -> Module:
        """A host module from checked parts; the binary is loaded by the driver on first use."""
        from ..gpu.build import load_parts
        from .codegen import AMDGPUCompiler

        return load_parts(parts, "rocm", AMDGPUCompiler.sources)

    def serialize(self, module: Module) -> Parts:
        """The parts the module was loaded from."""
        return dict(module.parts)  # type: ignore[attr-defined]
