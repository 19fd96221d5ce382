"""``ember.build``: from a schedule (or lowered functions) to a runnable :class:`Module`."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from . import cache
from .errors import EmberError
from .ir import expr as E
from .ir.stmt import PrimFunc
from .lower import lower
from .runtime.module import Module
from .target import Target
from .te.schedule import Schedule
from .te.tensor import Tensor


def build(
    inputs: Schedule | PrimFunc | Sequence[PrimFunc],
    args: Sequence[Tensor | E.Var] | None = None,
    target: str | Target = "llvm",
    target_host: str | Target | None = None,
    name: str = "main",
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Module:
    """Compile a schedule with its arguments (or already lowered functions) for ``target``.

    ``target`` is ``"llvm"`` (this CPU), ``"cuda"`` or ``"rocm"``; ``target_host`` the CPU target
    of the host side of a GPU build. Compiled code is cached on disk (see :mod:`ember.cache`)
    unless ``use_cache`` is False."""
    tgt = Target(target)
    if isinstance(inputs, Schedule):
        if args is None:
            raise EmberError("build: give the argument list (tensors in call order) with a schedule")
        funcs = [lower(inputs, args, name)]
    elif isinstance(inputs, PrimFunc):
        funcs = [inputs]
    elif isinstance(inputs, (list, tuple)) and all(isinstance(f, PrimFunc) for f in inputs):
        funcs = list(inputs)
    else:
        raise EmberError(f"build: expected a schedule or lowered functions, got {type(inputs).__name__}")
    if tgt.kind == "llvm":
        return _build_cpu(funcs, tgt, use_cache, cache_dir)
    if tgt.kind == "cuda":
        from .codegen.nvptx import build_cuda

        return build_cuda(funcs, tgt, Target(target_host or "llvm"), use_cache, cache_dir)
    from .codegen.amdgpu import build_rocm

    return build_rocm(funcs, tgt, Target(target_host or "llvm"), use_cache, cache_dir)


def _build_cpu(funcs: list[PrimFunc], tgt: Target, use_cache: bool, cache_dir: Any) -> Module:
    from .codegen.cpu import CompiledCPU, compile_cpu
    from .runtime.cpu import jit_module

    loop_ir = "\n\n".join(str(f) for f in funcs)
    root = cache.cache_dir(cache_dir) if use_cache else None
    key = cache.cache_key("cpu", loop_ir, _types_of(funcs), tgt.triple, tgt.mcpu, tgt.mattr, str(tgt))
    if root is not None:
        hit = cache.load(root, key)
        if hit is not None:
            try:
                compiled = CompiledCPU(
                    hit["module.ll"].decode(), hit["module.o"], json.loads(hit["sigs.json"]), str(tgt)
                )
                return jit_module(compiled, loop_ir, tgt)
            except (KeyError, ValueError, EmberError):
                pass  # a bad entry is rebuilt below
    compiled = compile_cpu(funcs, tgt, funcs[0].name)
    if root is not None:
        cache.store(
            root,
            key,
            {
                "module.ll": compiled.llvm_ir.encode(),
                "module.o": compiled.obj,
                "sigs.json": json.dumps(compiled.functions).encode(),
            },
            {"target": str(tgt)},
        )
    return jit_module(compiled, loop_ir, tgt)


def _types_of(funcs: list[PrimFunc]) -> str:
    """The data type of every parameter and expression node, in order: the printed loop IR leaves
    some out (integer constants, variables), and kernels that differ only there must not share a
    cache entry (``te.var("n", "int64")`` against ``"int32"``)."""
    from .ir.buffer import Buffer
    from .ir.visitor import free_vars, post_order_visit

    out: list[str] = []
    for f in funcs:
        out.extend(str(p.dtype) for p in f.params if isinstance(p, (Buffer, E.Var)))
        out.extend(str(v.dtype) for p in f.params if isinstance(p, Buffer) for x in p.shape for v in free_vars(x))
        post_order_visit(f.body, lambda n: out.append(str(n.dtype)) if isinstance(n, E.PrimExpr) else None)
    return ",".join(out)
