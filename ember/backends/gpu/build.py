"""Building GPU modules, shared by the CUDA and ROCm backends: the host/device split, code
generation through a target's *compiler* object (which supplies the code generator and turns its
LLVM module into a device binary: PTX or a cubin, an HSA code object), and the parts that
:func:`load_parts` turns back into a host module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from ...codegen.llvm import signature_vars
from ...errors import CodegenError, EmberError, ModelFormatError
from ...ir import expr as E
from ...ir.buffer import Buffer
from ...ir.stmt import PrimFunc
from ...ir.verify import verify
from ...lowering.gpu import HostPlan, split_host_device
from ...runtime.size_expr import to_tree
from ...target import Target

_PARAM_TYPE = {("int", 32): "i32", ("int", 64): "i64", ("uint", 32): "u32", ("uint", 64): "u64",
               ("float", 32): "f32", ("float", 64): "f64", ("int", 16): "i16", ("uint", 16): "u16",
               ("int", 8): "i8", ("uint", 8): "u8"}


def plan_json(plan: HostPlan, vector_params: dict[str, list[int]], dynamic: dict[str, int]) -> dict[str, Any]:
    """The host plan in the JSON form the runtime reads: kernels (name, grid as expression
    trees over the signature's sizes, block, shared memory, parameter types, arguments), steps
    and workspaces (byte counts as expression trees; see :mod:`ember.runtime.size_expr`; a
    workspace that is a TMA tensor map also has ``tensor_map``: the argument index, dtype, rows,
    columns and row pitch as trees, the box; one the host fills with zeros when it allocates it
    has ``zeroed``).
    Raises CodegenError when a launch size is not an integer expression of the sizes."""
    func = plan.func
    bufs = [p for p in func.params if isinstance(p, Buffer)]
    buf_index = {b.data: i for i, b in enumerate(bufs)}
    scal = signature_vars(func)
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
            "name": k.name, "grid": [_tree(g, scal_index, k.name) for g in k.grid], "block": list(k.block),
            "shared_bytes": k.shared_bytes, "dynamic_shared": dynamic.get(k.name, 0), "param_types": ptypes,
            "args": args, "aligned_args": aligned, **({"cluster": list(k.cluster)} if k.cluster != (1, 1, 1) else {}),
        })
    ws = []
    for b in workspaces:
        total: E.PrimExpr = E.const(max(1, b.dtype.bits // 8), "int64")
        for d in b.shape:
            total = total * E.cast("int64", d)
        entry: dict[str, Any] = {"name": b.name, "nbytes": _tree(total, scal_index, b.name)}
        spec = plan.tensor_maps.get(b)
        if spec is not None:
            entry["tensor_map"] = {
                "arg": buf_index[spec.source.data], "dtype": spec.dtype,
                "rows": _tree(E.cast("int64", spec.rows), scal_index, b.name),
                "cols": _tree(E.cast("int64", spec.cols), scal_index, b.name),
                "row_bytes": _tree(E.cast("int64", spec.row_bytes), scal_index, b.name),
                "box": [spec.box_cols, spec.box_rows], **({"swizzle": spec.swizzle} if spec.swizzle != 128 else {}),
            }
        if b in plan.zeroed:
            entry["zeroed"] = True
        ws.append(entry)
    return {"kernels": kernels, "steps": steps, "workspaces": ws}


def _tree(e: E.PrimExpr, index: dict[E.Var, int], what: str) -> list[Any]:
    try:
        return to_tree(e, index)
    except EmberError as exc:
        raise CodegenError(f"{what}: {exc}") from exc


#: Version of the GPU parts' ``module.json``.
GPU_FORMAT = "ember-gpu-module/2"


def compile_parts(funcs: list[PrimFunc], tgt: Target, compiler: Any) -> dict[str, bytes]:
    """Compile ``funcs`` for GPU target ``tgt``: split each into kernels and a host launch plan,
    generate the kernels with ``compiler.codegen`` and turn them into a device binary with
    ``compiler.compile``. Returns the parts: ``module.json`` (signatures, launch plans, kernel
    names, binary format, host plan text, kernel loop IR), ``device.bin``, ``module.ll`` and,
    for CUDA, ``module.ptx``."""
    from ..cpu.codegen import function_signature

    sigs = [function_signature(f) for f in funcs]
    plans = [split_host_device(f, tgt) for f in funcs]
    cg = compiler.codegen(tgt)
    for p in plans:
        for k in p.kernels:
            verify(k.func)  # ill-typed loop IR raises CodegenError before LLVM sees it
            cg.add_kernel(k)
    compiled = compiler.compile(cg)
    plans_js = [plan_json(p, cg.vector_params, cg.dynamic_shared) for p in plans]
    extra = dict(compiled.get("extra", {}))
    ptx = extra.pop("ptx", None)
    meta = {
        "format": GPU_FORMAT, "kind": tgt.kind, "target": str(tgt), "binary_format": compiled["format"],
        "sigs": sigs, "plans": plans_js, "kernels": [k["name"] for p in plans_js for k in p["kernels"]],
        "host_ir": "\n\n".join(p.host_ir for p in plans),
        "kernel_ir": "\n\n".join(str(k.func) for p in plans for k in p.kernels),
        "loop_ir": "\n\n".join(str(f) for f in funcs), "extra": extra,
    }
    parts = {"module.json": json.dumps(meta).encode(), "device.bin": compiled["binary"],
             "module.ll": compiled["llvm"].encode()}
    if ptx is not None:
        parts["module.ptx"] = ptx.encode()
    return parts


def load_parts(parts: dict[str, bytes], kind: str,
               sources: Callable[[dict[str, Any], dict[str, bytes]], dict[str, Any]]) -> Any:
    """A GPU host module (with its device module) from parts written by :func:`compile_parts`;
    ``sources`` makes the device module's text formats from the description and the parts.
    The parts are untrusted (a fresh build, a cache entry or a file): every field of the
    description is checked first (:func:`~.plan_check.check_gpu_meta`; launch sizes are
    expression trees, compiled into closures, never evaluated as source) and the binary's
    framing (:func:`check_binary`); anything else raises ModelFormatError. The device binary is
    loaded by the driver on first use, not here."""
    from .module import DeviceModule, GPUHostModule
    from .plan_check import check_gpu_meta

    try:
        meta = json.loads(parts["module.json"])
        binary = parts["device.bin"]
    except (KeyError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ModelFormatError(f"the GPU module's parts are incomplete or unreadable ({exc})") from exc
    check_gpu_meta(meta, kind, GPU_FORMAT)
    check_binary(binary, meta["binary_format"])
    src = sources(meta, parts)
    kernel_ir = meta.get("kernel_ir", "")
    src["ir"] = lambda: kernel_ir
    dm = DeviceModule(kind, binary, meta["binary_format"], src, meta["kernels"])
    host = GPUHostModule(kind, meta["sigs"], meta["plans"], dm, meta.get("host_ir", ""), meta.get("loop_ir", ""))
    host.parts = dict(parts)
    return host


#: The device binary formats, and how each starts.
BINARY_FORMATS = {"cubin": b"\x7fELF", "hsaco": b"\x7fELF", "ptx": b""}


def check_binary(binary: Any, fmt: str) -> None:
    """Raise ModelFormatError unless ``binary`` (bytes) looks like a device binary of format
    ``fmt``: an ELF64 little-endian file for ``cubin``/``hsaco``, ASCII PTX text with a
    ``.version`` and a ``.target`` directive for ``ptx``. (The driver validates the rest when
    it loads the binary on first use.)"""
    if fmt not in BINARY_FORMATS:
        raise ModelFormatError(f"the GPU module's binary has the unknown format {fmt[:40]!r}")
    if not isinstance(binary, bytes) or not binary:
        raise ModelFormatError("the GPU module has no device binary")
    if fmt == "ptx":
        if not binary.isascii() or b".version" not in binary or b".target" not in binary or b"\0" in binary:
            raise ModelFormatError("the GPU module's PTX is not PTX text")
    elif binary[:4] != BINARY_FORMATS[fmt] or len(binary) < 64 or binary[4] != 2 or binary[5] != 1:
        raise ModelFormatError(f"the GPU module's {fmt} is not an ELF64 little-endian file")


def env_path(var: str) -> str | None:
    """The value of environment variable ``var`` unless it is unset or empty."""
    v = os.environ.get(var)
    return v if v else None


def disabled(value: str | None) -> bool:
    """True for ``off``/``0``/``none``/``no``."""
    return value is not None and value.strip().lower() in ("off", "0", "none", "no", "false")
