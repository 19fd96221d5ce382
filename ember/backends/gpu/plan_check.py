"""Checks of a GPU module's description (``module.json``) before anything uses it.

The host side of a GPU module is data: function signatures, and per function a launch plan
(kernels with their grid expressions, block sizes, shared memory, parameter types and argument
sources; steps; workspaces). :func:`check_gpu_meta` checks every field, so that loading a
module from a file never evaluates, indexes or allocates anything the description made up:
a description that is not exactly what :func:`ember.backends.gpu.build.compile_parts` writes
raises :class:`~ember.errors.ModelFormatError` naming the field.
"""

from __future__ import annotations

from typing import Any

from ...errors import EmberError, ModelFormatError
from ...runtime.size_expr import check_tree
from ..cpu.signature import check_signature_list

#: Kernel parameter types the launchers know.
PARAM_TYPES = frozenset({"ptr", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64"})
#: Most threads in a block (every CUDA and ROCm device ember targets).
MAX_BLOCK_THREADS = 1024
#: Most shared memory a kernel may declare (bytes).
MAX_SHARED_BYTES = 256 * 1024
#: Most kernels, steps or workspaces in one plan.
MAX_PLAN_ITEMS = 1 << 16
_TEXT_FIELDS = ("host_ir", "kernel_ir", "loop_ir")


def check_gpu_meta(meta: Any, kind: str, fmt: str) -> None:
    """Raise ModelFormatError unless ``meta`` is a GPU module description of format ``fmt`` for
    ``kind``: a target of that kind, a binary format name, signatures (checked as the CPU's),
    one launch plan per signature (see :func:`check_plan`) and the list of kernel names, which
    must be exactly the plans' kernels in order."""
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ModelFormatError(f"the GPU module has format {got!r}; this ember reads {fmt}")
    if meta.get("kind") != kind:
        raise ModelFormatError(f"the GPU module was built for {meta.get('kind')!r}, not {kind!r}")
    target = meta.get("target")
    if not isinstance(target, str):
        raise ModelFormatError("the GPU module names no target")
    try:
        from ...target import Target

        if Target(target).kind != kind:
            raise ModelFormatError(f"the GPU module's target {target!r} is not a {kind} target")
    except EmberError as exc:
        if isinstance(exc, ModelFormatError):
            raise
        raise ModelFormatError(f"the GPU module names a bad target: {exc}") from exc
    for key in ("sigs", "plans", "kernels"):
        if not isinstance(meta.get(key), list):
            raise ModelFormatError(f"the GPU module's {key!r} is not a list")
    sigs = check_signature_list(meta["sigs"], "the GPU module")
    if len(sigs) != len(meta["plans"]):
        raise ModelFormatError("the GPU module's signatures and launch plans do not match")
    if not isinstance(meta.get("binary_format"), str) or not meta["binary_format"]:
        raise ModelFormatError("the GPU module does not say what its binary is")
    for key in _TEXT_FIELDS:
        if key in meta and not isinstance(meta[key], str):
            raise ModelFormatError(f"the GPU module's {key!r} is not text")
    if "extra" in meta and not isinstance(meta["extra"], dict):
        raise ModelFormatError("the GPU module's 'extra' is not an object")
    names: list[str] = []
    for sig, plan in zip(sigs, meta["plans"]):
        names.extend(check_plan(plan, sig))
    if meta["kernels"] != names:
        raise ModelFormatError("the GPU module's kernel list does not match its launch plans")
    if len(set(names)) != len(names):
        raise ModelFormatError("the GPU module names a kernel twice")


def _int_in(x: Any, lo: int, hi: int) -> bool:
    return type(x) is int and lo <= x <= hi


def check_plan(plan: Any, sig: dict[str, Any]) -> list[str]:
    """Raise ModelFormatError unless ``plan`` is the launch plan of the function ``sig``
    describes (already checked); returns its kernel names. Every kernel: an identifier
    ``name``; ``grid`` three expression trees over the signature's sizes; ``block`` three ints
    in 1..1024 with product <= 1024; an optional ``cluster`` of three ints with product <= 8
    (the cubin itself carries it); ``shared_bytes`` and ``dynamic_shared`` ints in 0..256 KiB;
    ``param_types`` from :data:`PARAM_TYPES`, one per argument, ``ptr`` exactly for buffers;
    ``args`` ``[src, index]`` with src ``arg`` (a buffer parameter), ``ws`` (a workspace) or
    ``scalar`` (a size), index in range; ``aligned_args`` buffer indices. Steps are
    ``["launch", kernel]``, ``["alloc", ws]``, ``["free", ws]`` in range; workspaces have a name
    and an ``nbytes`` tree (``zeroed``, when present, is true: filled with zeros when allocated),
    and a workspace that is a TMA tensor map a ``tensor_map`` with a
    buffer argument index, a TMA data type, rows/cols/row_bytes trees, a box of two ints in
    1..256 and optionally a swizzle of 64 or 128 bytes."""
    fname = sig["name"]
    where = f"the launch plan of {fname}"
    if not isinstance(plan, dict):
        raise ModelFormatError(f"{where} is not an object")
    kernels, steps, workspaces = plan.get("kernels"), plan.get("steps"), plan.get("workspaces")
    for key, value in (("kernels", kernels), ("steps", steps), ("workspaces", workspaces)):
        if not isinstance(value, list) or len(value) > MAX_PLAN_ITEMS:
            raise ModelFormatError(f"{where}: {key!r} is not a list")
    assert isinstance(kernels, list) and isinstance(steps, list) and isinstance(workspaces, list)
    nbuf = sum(1 for p in sig["params"] if p["kind"] == "buffer")
    nsizes = len(sig["scalars"])
    nws = len(workspaces)
    for w, ws in enumerate(workspaces):
        if not isinstance(ws, dict) or not isinstance(ws.get("name"), str):
            raise ModelFormatError(f"{where}: workspace {w} has no name")
        check_tree(ws.get("nbytes"), nsizes, f"{where}: the size of workspace {w}")
        if "tensor_map" in ws:
            _check_tensor_map(ws["tensor_map"], f"{where}: the tensor map of workspace {w}", nbuf, nsizes)
        if "zeroed" in ws and (ws["zeroed"] is not True or "tensor_map" in ws):
            raise ModelFormatError(f"{where}: workspace {w} has 'zeroed' {ws['zeroed']!r}: true (zero-filled when "
                                   "allocated) on a plain workspace, or absent")
    names = []
    for kid, k in enumerate(kernels):
        names.append(_check_kernel(k, f"{where}: kernel {kid}", nbuf, nws, nsizes))
    for j, st in enumerate(steps):
        if not isinstance(st, list) or len(st) != 2 or st[0] not in ("launch", "alloc", "free"):
            raise ModelFormatError(f"{where}: step {j} is not [launch|alloc|free, index]")
        limit = len(kernels) if st[0] == "launch" else nws
        if not _int_in(st[1], 0, limit - 1):
            raise ModelFormatError(f"{where}: step {j} ({st[0]}) refers to {st[1]!r}, not one of its {limit}")
    return names


def _check_kernel(k: Any, where: str, nbuf: int, nws: int, nsizes: int) -> str:
    if not isinstance(k, dict):
        raise ModelFormatError(f"{where} is not an object")
    name = k.get("name")
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii() or len(name) > 1024:
        raise ModelFormatError(f"{where} has no valid name")
    where = f"{where} ({name})"
    grid = k.get("grid")
    if not isinstance(grid, list) or len(grid) != 3:
        raise ModelFormatError(f"{where}: the grid is not three expressions")
    for d, g in enumerate(grid):
        check_tree(g, nsizes, f"{where}: grid dimension {d}")
    block = k.get("block")
    if not isinstance(block, list) or len(block) != 3 or not all(_int_in(b, 1, MAX_BLOCK_THREADS) for b in block):
        raise ModelFormatError(f"{where}: the block {block!r} is not three ints in 1..{MAX_BLOCK_THREADS}")
    if block[0] * block[1] * block[2] > MAX_BLOCK_THREADS:
        raise ModelFormatError(f"{where}: the block {block} has more than {MAX_BLOCK_THREADS} threads")
    cluster = k.get("cluster", [1, 1, 1])
    if (not isinstance(cluster, list) or len(cluster) != 3 or not all(_int_in(c, 1, 8) for c in cluster)
            or cluster[0] * cluster[1] * cluster[2] > 8):
        raise ModelFormatError(f"{where}: the cluster {cluster!r} is not three ints of at most 8 blocks in all")
    for key in ("shared_bytes", "dynamic_shared"):
        if not _int_in(k.get(key), 0, MAX_SHARED_BYTES):
            raise ModelFormatError(f"{where}: {key} is {k.get(key)!r}, not an int in 0..{MAX_SHARED_BYTES}")
    ptypes, args, aligned = k.get("param_types"), k.get("args"), k.get("aligned_args")
    if not isinstance(ptypes, list) or not isinstance(args, list) or len(ptypes) != len(args) or len(args) > 4096:
        raise ModelFormatError(f"{where}: param_types and args are not lists of the same length")
    for j, (t, a) in enumerate(zip(ptypes, args)):
        if t not in PARAM_TYPES:
            raise ModelFormatError(f"{where}: parameter {j} has the unknown type {t!r}")
        if not isinstance(a, list) or len(a) != 2 or a[0] not in ("arg", "ws", "scalar"):
            raise ModelFormatError(f"{where}: argument {j} is not [arg|ws|scalar, index]")
        limit = {"arg": nbuf, "ws": nws, "scalar": nsizes}[a[0]]
        if not _int_in(a[1], 0, limit - 1):
            raise ModelFormatError(f"{where}: argument {j} refers to {a[0]} {a[1]!r}, not one of its {limit}")
        if (t == "ptr") != (a[0] != "scalar"):
            raise ModelFormatError(f"{where}: argument {j} ({a[0]}) does not match its parameter type {t}")
    if not isinstance(aligned, list) or not all(_int_in(i, 0, nbuf - 1) for i in aligned):
        raise ModelFormatError(f"{where}: aligned_args are not buffer argument indices")
    return name


def _check_tensor_map(tm: Any, where: str, nbuf: int, nsizes: int) -> None:
    from ...runtime.tensor_map import DATA_TYPES

    if not isinstance(tm, dict):
        raise ModelFormatError(f"{where} is not an object")
    if not _int_in(tm.get("arg"), 0, nbuf - 1):
        raise ModelFormatError(f"{where}: its argument {tm.get('arg')!r} is not a buffer argument index")
    if tm.get("dtype") not in DATA_TYPES:
        raise ModelFormatError(f"{where}: {tm.get('dtype')!r} is not a TMA data type")
    for key in ("rows", "cols", "row_bytes"):
        check_tree(tm.get(key), nsizes, f"{where}: {key}")
    box = tm.get("box")
    if not isinstance(box, list) or len(box) != 2 or not all(_int_in(b, 1, 256) for b in box):
        raise ModelFormatError(f"{where}: the box {box!r} is not two ints in 1..256")
    if tm.get("swizzle", 128) not in (64, 128):
        raise ModelFormatError(f"{where}: the swizzle {tm.get('swizzle')!r} is not 64 or 128 (bytes)")
