"""Backends: one folder per target kind, each implementing :class:`~ember.backends.base.Backend`.

* :mod:`ember.backends.cpu` — LLVM for the host CPU, objects run in process (MCJIT);
* :mod:`ember.backends.cuda` — LLVM NVPTX → PTX → cubin, the CUDA driver;
* :mod:`ember.backends.rocm` — LLVM AMDGPU → HSA code object, HIP;
* :mod:`ember.backends.gpu` — what the two GPU backends share (kernel code generation, the
  host/device split and launch plans, GPU host modules).

:func:`build_functions` is the one build driver: cache lookup, ``backend.compile``, cache store,
``backend.load``. Adding a target means one new folder with a ``Backend`` subclass and one
line in :data:`BACKENDS`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .. import cache
from ..errors import TargetError
from ..ir.stmt import PrimFunc
from ..runtime.module import Module
from ..target import Target
from .base import Backend, Parts
from .cpu import CPUBackend
from .cuda import CUDABackend
from .rocm import ROCmBackend

#: Every backend, by the target kind it builds for.
BACKENDS: dict[str, type[Backend]] = {b.kind: b for b in (CPUBackend, CUDABackend, ROCmBackend)}

__all__ = ["BACKENDS", "Backend", "Parts", "backend_for", "build_functions", "loop_ir_types"]


def backend_for(target: Target | str) -> Backend:
    """The backend that builds for ``target``."""
    kind = Target(target).kind
    cls = BACKENDS.get(kind)
    if cls is None:
        raise TargetError(f"no backend builds for target kind {kind!r} (backends: {', '.join(BACKENDS)})")
    return cls()


def build_functions(funcs: Sequence[PrimFunc], target: Target | str, use_cache: bool = True,
                    cache_dir: str | os.PathLike[str] | None = None, jobs: int | None = None) -> Module:
    """Compile lowered ``funcs`` for ``target`` into one module, through the compile cache
    (``jobs``: processes the backend may build with, :meth:`.base.Backend.compile`).

    The cache key covers the loop IR, every expression's type, the resolved target and the
    backend's toolchain fingerprint; an entry that is missing, corrupt or that the backend's
    ``load`` rejects is rebuilt (a silent miss)."""
    from ..errors import ModelFormatError

    backend = backend_for(target)
    tgt = backend.resolve(Target(target))
    funcs = list(funcs)
    loop_ir = "\n\n".join(str(f) for f in funcs)
    root = cache.cache_dir(cache_dir) if use_cache else None
    key = cache.cache_key(tgt.kind, loop_ir, loop_ir_types(funcs), str(tgt), tgt.triple, tgt.mcpu, tgt.mattr,
                          backend.fingerprint(tgt))
    if root is not None:
        hit = cache.load(root, key)
        if hit is not None:
            hit.pop("meta", None)
            try:
                return backend.load(hit, tgt)
            except ModelFormatError:
                pass  # a bad entry is rebuilt below
    parts = backend.compile(funcs, tgt, jobs)
    if root is not None:
        cache.store(root, key, parts, {"target": str(tgt)})
    return backend.load(parts, tgt)


def loop_ir_types(funcs: Sequence[PrimFunc]) -> str:
    """The data type of every parameter and expression node, in order: the printed loop IR leaves
    some out (integer constants, variables), and kernels that differ only there must not share a
    cache entry (``te.var("n", "int64")`` against ``"int32"``)."""
    from ..ir import expr as E
    from ..ir.buffer import Buffer
    from ..ir.visitor import free_vars, post_order_visit

    out: list[str] = []
    for f in funcs:
        out.extend(str(p.dtype) for p in f.params if isinstance(p, (Buffer, E.Var)))
        out.extend(str(v.dtype) for p in f.params if isinstance(p, Buffer) for x in p.shape for v in free_vars(x))
        post_order_visit(f.body, lambda n: out.append(str(n.dtype)) if isinstance(n, E.PrimExpr) else None)
    return ",".join(out)
