"""Building GPU modules: lowering split, code generation, caching and the runtime objects.

:func:`build_gpu` is shared by ``nvptx.build_cuda`` and ``amdgpu.build_rocm``; a *backend* object
supplies the code generator and turns its LLVM module into the loaded binary (PTX or a cubin,
an HSA code object).
"""

from __future__ import annotations

import json
import os
from typing import Any

from .. import cache
from ..errors import CodegenError
from ..ir import expr as E
from ..ir.buffer import Buffer
from ..ir.stmt import PrimFunc
from ..ir.verify import verify
from ..lower.gpu import HostPlan, split_host_device
from ..target import Target
from .llvm import signature_vars

_PARAM_TYPE = {("int", 32): "i32", ("int", 64): "i64", ("uint", 32): "u32", ("uint", 64): "u64",
               ("float", 32): "f32", ("float", 64): "f64", ("int", 16): "i16", ("uint", 16): "u16",
               ("int", 8): "i8", ("uint", 8): "u8"}


def plan_json(plan: HostPlan, vector_params: dict[str, list[int]], dynamic: dict[str, int]) -> dict[str, Any]:
    """The host plan in the JSON form the runtime reads (launch sizes as Python source)."""
    from ..runtime.gpu import expr_to_python

    func = plan.func
    bufs = [p for p in func.params if isinstance(p, Buffer)]
    buf_index = {b.data: i for i, b in enumerate(bufs)}
    scal = signature_vars(func)
    names = {v: f"s[{i}]" for i, v in enumerate(scal)}
    scal_index = {v: i for i, v in enumerate(scal)}
    workspaces: list[Buffer] = [b for op, b in plan.steps if op == "alloc"]
    ws_index = {b.data: i for i, b in enumerate(workspaces)}
    steps: list[list[Any]] = []
    for op, x in plan.steps:
        if op == "launch":
            steps.append(["launch", x])
        else:
            steps.append([op, ws_index[x.data]])
    kernels = []
    for k in plan.kernels:
        args: list[list[Any]] = []
        ptypes: list[str] = []
        for b in k.buffer_params:
            if b.data in buf_index:
                args.append(["arg", buf_index[b.data]])
            else:
                args.append(["ws", ws_index[b.data]])
            ptypes.append("ptr")
        for v in k.scalar_params:
            if v not in scal_index:
                raise CodegenError(f"kernel {k.name} uses {v.name}, which is neither a size of an argument nor a "
                                   "scalar argument; pass it in the argument list")
            args.append(["scalar", scal_index[v]])
            t = _PARAM_TYPE.get((v.dtype.kind, v.dtype.bits))
            if t is None:
                raise CodegenError(f"kernel parameter {v.name} of type {v.dtype} is not supported")
            ptypes.append(t)
        aligned = [args[i][1] for i in vector_params.get(k.name, []) if args[i][0] == "arg"]
        kernels.append({
            "name": k.name, "grid": [expr_to_python(g, names) for g in k.grid], "block": list(k.block),
            "shared_bytes": k.shared_bytes, "dynamic_shared": dynamic.get(k.name, 0), "param_types": ptypes,
            "args": args, "aligned_args": aligned,
        })
    ws = []
    for b in workspaces:
        total: E.PrimExpr = E.const(max(1, b.dtype.bits // 8), "int64")
        for d in b.shape:
            total = total * E.cast("int64", d)
        ws.append({"name": b.name, "nbytes": expr_to_python(total, names)})
    return {"kernels": kernels, "steps": steps, "workspaces": ws}


def build_gpu(funcs: list[PrimFunc], tgt: Target, host: Target, use_cache: bool, cache_dir: Any,
              backend: Any) -> Any:
    """Compile ``funcs`` for GPU target ``tgt`` with ``backend``; returns the host module."""
    from ..runtime.gpu import DeviceModule, GPUHostModule
    from .cpu import function_signature

    loop_ir = "\n\n".join(str(f) for f in funcs)
    root = cache.cache_dir(cache_dir) if use_cache else None
    key = cache.cache_key("gpu", tgt.kind, loop_ir, str(tgt), backend.fingerprint())
    sigs = [function_signature(f) for f in funcs]
    hit = cache.load(root, key) if root is not None else None
    compiled: dict[str, Any] | None = None
    plans_js: list[dict[str, Any]] | None = None
    host_ir = ""
    if hit is not None:
        try:
            meta = json.loads(hit["meta.json"])
            compiled = {"binary": hit["device.bin"], "llvm": hit["module.ll"].decode(), "format": meta["format"],
                        "extra": meta.get("extra", {})}
            plans_js = meta["plans"]
            host_ir = meta["host_ir"]
            kernel_ir = meta["kernel_ir"]
        except (KeyError, ValueError):
            compiled = None
    if compiled is None or plans_js is None:
        plans = [split_host_device(f, tgt) for f in funcs]
        cg = backend.codegen(tgt)
        for p in plans:
            for k in p.kernels:
                verify(k.func)  # ill-typed loop IR raises CodegenError before LLVM sees it
                cg.add_kernel(k)
        compiled = backend.compile(cg)
        plans_js = [plan_json(p, cg.vector_params, cg.dynamic_shared) for p in plans]
        host_ir = "\n\n".join(p.host_ir for p in plans)
        kernel_ir = "\n\n".join(str(k.func) for p in plans for k in p.kernels)
        if root is not None:
            meta = {"format": compiled["format"], "plans": plans_js, "host_ir": host_ir, "kernel_ir": kernel_ir,
                    "extra": compiled.get("extra", {})}
            cache.store(root, key, {"device.bin": compiled["binary"], "module.ll": compiled["llvm"].encode(),
                                    "meta.json": json.dumps(meta).encode()}, {"target": str(tgt)})
    names = [k["name"] for p in plans_js for k in p["kernels"]]
    sources = backend.sources(compiled, tgt)
    sources["ir"] = lambda: kernel_ir
    dm = DeviceModule(tgt.kind, compiled["binary"], compiled["format"], sources, names)
    return GPUHostModule(tgt.kind, sigs, plans_js, dm, host_ir, loop_ir)


def env_path(var: str) -> str | None:
    """The value of environment variable ``var`` unless it is unset or empty."""
    v = os.environ.get(var)
    return v if v else None


def disabled(value: str | None) -> bool:
    """True for ``off``/``0``/``none``/``no``."""
    return value is not None and value.strip().lower() in ("off", "0", "none", "no", "false")
