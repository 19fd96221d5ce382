"""The CUDA backend: LLVM NVPTX → PTX → cubin (with ``ptxas``), run through the CUDA driver.

Code generation is :mod:`.codegen`; the host/device split, launch plans and host modules are
shared with ROCm (:mod:`ember.backends.gpu`).
"""

from __future__ import annotations

from ...ir.stmt import PrimFunc
from ...runtime.module import Module
from ...target import Target
from ..base import Backend, Parts


class CUDABackend(Backend):
    """Builds and loads modules for NVIDIA GPUs."""

    kind = "cuda"

    def resolve(self, target: Target) -> Target:
        """Fill in ``-arch`` from the GPU of this machine (sm_80 without one)."""
        if target.opt("arch"):
            return target
        from ...runtime.cuda_driver import detected_arch

        return Target(f"{target} -arch={detected_arch() or 'sm_80'}")

    def fingerprint(self, target: Target) -> str:
        """libdevice and ptxas paths (they change the code or the binary's format)."""
        from .codegen import NVPTXCompiler

        return NVPTXCompiler().fingerprint()

    def compile(self, funcs: list[PrimFunc], target: Target, jobs: int | None = None) -> Parts:
        """Split, generate, link libdevice, optimise, emit PTX and assemble a cubin (in this
        process: ``jobs`` is ignored)."""
        from ..gpu.build import compile_parts
        from .codegen import NVPTXCompiler

        return compile_parts(funcs, target, NVPTXCompiler())

    def load(self, parts: Parts, target: Target | None = None) -> Module:
        """A host module from checked parts; the binary is loaded by the driver on first use."""
        from ..gpu.build import load_parts
        from .codegen import NVPTXCompiler

        return load_parts(parts, "cuda", NVPTXCompiler.sources)

    def serialize(self, module: Module) -> Parts:
        """The parts the module was loaded from."""
        return dict(module.parts)  # type: ignore[attr-defined]
