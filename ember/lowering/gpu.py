"""GPU lowering: split a lowered function into host code and device kernels.

:func:`split_host_device` takes a :class:`~ember.ir.PrimFunc` whose loops are bound to
``blockIdx``/``threadIdx`` (the result of :func:`ember.lower`) and a GPU target. It guarantees:

* every outermost thread-bound loop nest becomes one kernel (:class:`Kernel`); what is left on the
  host is a sequence of kernel launches and global workspace allocations, and anything else (a
  stage with no bound loop, a host loop around a kernel) raises a
  :class:`~ember.errors.CodegenError` that names the stage's loop and the fix;
* a kernel's parameters are exactly the buffers and scalar sizes its body uses; its launch
  dimensions come from the extents of its thread-bound loops: ``blockIdx`` extents may be
  symbolic (evaluated on the host from the argument shapes), ``threadIdx`` extents must be
  constants within the target's limits (:class:`~ember.errors.LoweringError` otherwise);
* statements that are outside every ``threadIdx`` loop run once per block, not once per thread:
  a cross-thread reduction (the pattern ``rfactor`` + a ``"shared"`` partial buffer written under
  ``threadIdx.x`` produces) becomes a warp-shuffle all-reduce (warp size from the target) with a
  shared-memory step across warps; other stores to global or shared memory there are made by
  thread 0 of the block only;
* a barrier separates every write of a shared buffer from a later read of it by another thread,
  and every read from a later write (also across iterations of a loop); barriers are only placed
  where every thread of the block reaches them;
* static shared memory fits the target (:class:`~ember.errors.LoweringError` names the buffers
  and the limit otherwise);
* a global buffer allocated under an ``AttrStmt`` with key ``"tensor_map"`` (value a
  :class:`TensorMapSpec`) is a TMA tensor map of an argument: the host encodes it from the
  argument's address at the call (:attr:`HostPlan.tensor_maps`) instead of leaving it
  uninitialised;
* a global buffer allocated under an ``AttrStmt`` with key ``"zero_init"`` is a workspace the
  host fills with zeros when it allocates it (once: workspaces are kept between calls), so the
  kernels that use it must leave it zero again (:attr:`HostPlan.zeroed`; the split-K tickets of
  :mod:`ember.lowering.wgmma_ws` count up and are reset by the block that takes the last one);
* an ``AttrStmt`` with key ``"cluster_dims"`` (value three positive ints) inside a kernel's
  ``blockIdx`` loop makes its blocks a Hopper thread-block cluster of that shape
  (:attr:`Kernel.cluster`, the kernel's ``.reqnctapercluster``); the grid must be a constant
  multiple of it (:class:`~ember.errors.LoweringError` otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..arith import simplify, structural_key
from ..errors import CodegenError, LoweringError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.dtypes import INT32
from ..ir.visitor import free_vars, post_order_stmts, post_order_visit, substitute
from ..target import Target

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
MAX_BLOCK_DIM = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}


def tid(tag: str) -> E.PrimExpr:
    """The hardware index ``tag`` (``"threadIdx.x"``...) as an expression of kernel code."""
    return E.Call(INT32, "gpu." + tag, ())


def barrier() -> S.Stmt:
    """A block-wide barrier (every thread of the block must reach it)."""
    return S.Evaluate(E.Call(INT32, "gpu.barrier", ()))


def shfl_xor(value: E.PrimExpr, offset: int) -> E.PrimExpr:
    """``value`` of the lane whose index is this lane's xor ``offset`` (within a warp)."""
    return E.Call(value.dtype, "gpu.shfl_xor", (value, E.const(offset)))


@dataclass
class Kernel:
    """One device kernel and how the host launches it."""

    func: S.PrimFunc
    #: grid extents (x, y, z) as expressions of the host's scalar sizes
    grid: tuple[E.PrimExpr, E.PrimExpr, E.PrimExpr]
    #: block extents (x, y, z), constants
    block: tuple[int, int, int]
    #: bytes of static shared memory
    shared_bytes: int
    #: for each kernel parameter: the host buffer (a Buffer) or host scalar (a Var) it is
    buffer_params: list[Buffer] = field(default_factory=list)
    scalar_params: list[E.Var] = field(default_factory=list)
    #: thread-block cluster shape (x, y, z); (1, 1, 1) launches plain blocks
    cluster: tuple[int, int, int] = (1, 1, 1)

    @property
    def name(self) -> str:
        """The kernel's symbol name."""
        return self.func.name

    @property
    def threads_per_block(self) -> int:
        """Threads in one block."""
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class TensorMapSpec:
    """A Hopper TMA tensor map (128 bytes, ``cuTensorMapEncodeTiled``) the host makes for a call:
    the row-major ``rows x cols`` matrix of ``dtype`` at the address of the argument ``source``
    (rows ``row_bytes`` apart), read in boxes of ``box_cols x box_rows`` elements into the
    ``swizzle``-byte-swizzled shared layout (128 or 64; a box row is at most that many bytes).
    Sizes are expressions of the function's sizes."""

    source: Buffer
    dtype: str
    rows: E.PrimExpr
    cols: E.PrimExpr
    row_bytes: E.PrimExpr
    box_cols: int
    box_rows: int
    swizzle: int = 128


def with_tensor_map(buf: Buffer, spec: TensorMapSpec, body: S.Stmt) -> S.Stmt:
    """``body`` with the global 128-byte buffer ``buf`` holding the tensor map ``spec`` (made by the
    host for each call, see the module doc)."""
    return S.AttrStmt(buf, "tensor_map", spec, S.Allocate(buf, body))


def with_zeroed(buf: Buffer, body: S.Stmt) -> S.Stmt:
    """``body`` with the global buffer ``buf`` allocated zero-filled once and kept between calls
    (see the module doc: the kernels must leave it zero)."""
    return S.AttrStmt(buf, "zero_init", True, S.Allocate(buf, body))


@dataclass
class HostPlan:
    """What the host does for one call: allocate workspaces, launch kernels, in order."""

    func: S.PrimFunc
    kernels: list[Kernel]
    #: ("alloc", Buffer) / ("launch", kernel index) / ("free", Buffer), in order
    steps: list[tuple[str, Any]]
    host_ir: str
    #: the workspaces that are tensor maps the host encodes, by buffer
    tensor_maps: dict[Buffer, TensorMapSpec] = field(default_factory=dict)
    #: the workspaces allocated zero-filled (their kernels leave them zero)
    zeroed: set[Buffer] = field(default_factory=set)


# -- host/device split -------------------------------------------------------------------------
def _is_kernel_root(s: S.Stmt) -> bool:
    return isinstance(s, S.For) and s.kind is S.ForKind.THREAD_BINDING


def _has_thread_loop(s: S.Stmt) -> bool:
    found: list[int] = []
    post_order_visit(s, lambda n: found.append(1) if _is_kernel_root(n) else None)
    return bool(found)


def _stage_name(s: S.Stmt) -> str:
    names: list[str] = []
    post_order_visit(s, lambda n: names.append(n.buffer.name) if isinstance(n, S.BufferStore) else None)
    return names[0] if names else "?"


def split_host_device(func: S.PrimFunc, target: Target) -> HostPlan:
    """The host plan and kernels of ``func`` for GPU ``target`` (see module doc)."""
    kernels: list[Kernel] = []
    steps: list[tuple[str, Any]] = []
    host_lines: list[str] = []
    maps: dict[Buffer, TensorMapSpec] = {}
    zeroed: set[Buffer] = set()

    def allocated(buf: Buffer, body: S.Stmt, depth: int, made_by: str) -> None:
        """The host allocates workspace ``buf`` (``made_by``, for the host IR) around ``body``'s steps."""
        host_lines.append(f"{'  ' * (depth + 1)}{buf.name} = {made_by}")
        steps.append(("alloc", buf))
        walk(body, depth)
        steps.append(("free", buf))

    def walk(s: S.Stmt, depth: int) -> None:
        pad = "  " * (depth + 1)
        if isinstance(s, S.SeqStmt):
            for x in s.seq:
                walk(x, depth)
            return
        if isinstance(s, S.AttrStmt):
            if s.key == "tensor_map":
                spec = s.value
                if not (isinstance(spec, TensorMapSpec) and isinstance(s.body, S.Allocate) and s.body.buffer is s.node
                        and spec.source in func.params):
                    raise CodegenError(f"tensor map {getattr(s.node, 'name', s.node)} must annotate its own global "
                                       "allocation and name an argument of the function as its source")
                maps[s.node] = spec
                allocated(s.node, s.body.body, depth, f"tensor_map({spec.source.name}, {spec.dtype}, "
                          f"{spec.rows} x {spec.cols}, pitch {spec.row_bytes} B, box {spec.box_cols} x {spec.box_rows}"
                          + (f", {spec.swizzle} B swizzle)" if spec.swizzle != 128 else ")"))
                return
            if s.key == "zero_init":
                if not (isinstance(s.body, S.Allocate) and s.body.buffer is s.node and s.node.scope == "global"):
                    raise CodegenError(f"zero_init on {getattr(s.node, 'name', s.node)} must annotate its own global "
                                       "allocation")
                zeroed.add(s.node)
                dims = ", ".join(map(str, s.node.shape))
                allocated(s.node, s.body.body, depth, f"device_alloc_zeroed({s.node.dtype}, {dims})  # kept zero")
                return
            walk(s.body, depth)
            return
        if isinstance(s, S.Allocate):
            if s.buffer.scope != "global":
                raise CodegenError(
                    f"buffer {s.buffer.name} ({s.buffer.scope}) is allocated outside every kernel; "
                    f"compute its stage at a thread-bound loop (compute_at) or give it scope 'global'"
                )
            dims = ", ".join(map(str, s.buffer.shape))
            allocated(s.buffer, s.body, depth, f"device_alloc({s.buffer.dtype}, {dims})")
            return
        if _is_kernel_root(s):
            k = make_kernel(s, f"{func.name}_kernel{len(kernels)}", func, target)
            kernels.append(k)
            steps.append(("launch", len(kernels) - 1))
            grid = ", ".join(str(g) for g in k.grid)
            args = ", ".join([b.name for b in k.buffer_params] + [v.name for v in k.scalar_params])
            cl = f", cluster={k.cluster}" if k.cluster != (1, 1, 1) else ""
            host_lines.append(f"{pad}launch {k.name}<<<({grid}), {k.block}, shared={k.shared_bytes}{cl}>>>({args})")
            return
        if isinstance(s, S.For):
            inner = "a kernel" if _has_thread_loop(s) else "no thread-bound loop"
            raise CodegenError(
                f"loop {s.loop_var.name} (stage {_stage_name(s)}) runs on the host and contains {inner}: on a GPU "
                f"target every stage's outer loops must be bound to blockIdx/threadIdx; bind it "
                f"(s[T].bind(axis, te.thread_axis('blockIdx.x'))) or fuse it into a bound loop"
            )
        raise CodegenError(
            f"statement {type(s).__name__} (stage {_stage_name(s)}) runs on the host of a GPU function: "
            "bind the stage's loops to blockIdx/threadIdx so it runs in a kernel"
        )

    walk(func.body, 0)
    if not kernels:
        raise CodegenError(f"{func.name} has no loop bound to a GPU thread axis: bind loops to blockIdx/threadIdx")
    params = ", ".join(p.name for p in func.params)
    host_ir = f"host {func.name}({params}):\n" + "\n".join(host_lines)
    return HostPlan(func, kernels, steps, host_ir, maps, zeroed)


# -- one kernel ------------------------------------------------------------------------------------
def _launch_extents(body: S.Stmt, target: Target) -> tuple[dict[str, E.PrimExpr], dict[str, int]]:
    block: dict[str, int] = {}

    def visit(n: Any) -> None:
        if isinstance(n, S.For) and n.kind is S.ForKind.THREAD_BINDING and n.thread_tag in THREAD_TAGS:
            ext = simplify(n.extent)
            if not isinstance(ext, E.IntImm):
                raise LoweringError(
                    f"loop {n.loop_var.name} is bound to {n.thread_tag} with extent {ext}, which is not a constant: "
                    f"split it with a constant factor and bind the inner loop to {n.thread_tag}"
                )
            block[n.thread_tag] = max(block.get(n.thread_tag, 1), ext.value)

    post_order_stmts(body, visit)
    # The outermost blockIdx loop of each tag gives the grid.
    grid: dict[str, E.PrimExpr] = {}

    def first(n: Any) -> None:
        if isinstance(n, S.For):
            if n.kind is S.ForKind.THREAD_BINDING and n.thread_tag in BLOCK_TAGS and n.thread_tag not in grid:
                grid[n.thread_tag] = simplify(n.extent)
            first(n.body)
        elif isinstance(n, S.SeqStmt):
            for x in n.seq:
                first(x)
        elif isinstance(n, (S.Allocate, S.LetStmt, S.AttrStmt, S.Assert)):
            first(n.body)
        elif isinstance(n, S.IfThenElse):
            first(n.then_case)
            if n.else_case is not None:
                first(n.else_case)

    first(body)
    total = 1
    for tag, ext in block.items():
        if ext > MAX_BLOCK_DIM[tag]:
            raise LoweringError(
                f"{tag} has extent {ext}, over the limit {MAX_BLOCK_DIM[tag]}; split the bound loop further")
        total *= ext
    if total > target.max_threads_per_block:
        dims = " x ".join(f"{t}={e}" for t, e in sorted(block.items()))
        raise LoweringError(
            f"a block of {total} threads ({dims}) is over {target} 's limit of {target.max_threads_per_block} "
            "threads per block: use smaller split factors for the threadIdx loops"
        )
    return grid, block


def make_kernel(root: S.For, name: str, host: S.PrimFunc, target: Target) -> Kernel:
    """The kernel whose body is the thread-bound loop nest ``root``."""
    grid, block = _launch_extents(root, target)
    bdim = (block.get("threadIdx.x", 1), block.get("threadIdx.y", 1), block.get("threadIdx.z", 1))
    body: S.Stmt = root
    body = _CrossThread(bdim, target.warp_size).run(body)
    body = insert_barriers(body, bdim)
    shared = shared_bytes(body)
    limit = max_shared_bytes(target)
    if shared > limit:
        bufs = ", ".join(f"{b.name} ({n} B)" for b, n in _shared_buffers(body))
        raise LoweringError(
            f"kernel {name} needs {shared} bytes of shared memory ({bufs}), over the {limit} bytes a block may "
            f"use on {target}: use smaller tiles for the shared caches"
        )
    # Parameters: the buffers and scalar sizes the body uses, in the host function's order.
    used = set(free_vars(body))
    host_buffers: list[Buffer] = [p for p in host.params if isinstance(p, Buffer)]
    workspaces = _host_workspaces(host.body)
    bparams = [b for b in host_buffers + workspaces if b.data in used]
    known_data = {b.data for b in bparams}
    scalars: list[E.Var] = []
    for v in free_vars(body):
        if v in known_data:
            continue
        scalars.append(v)
    func = S.PrimFunc(name, [*bparams, *scalars], body, {"target": str(target), "block": bdim})
    g = tuple(grid.get(t, E.const(1)) for t in BLOCK_TAGS)
    return Kernel(func, g, bdim, shared, bparams, scalars, _cluster_dims(root, g, name))  # type: ignore[arg-type]


def _cluster_dims(root: S.Stmt, grid: tuple[E.PrimExpr, ...], name: str) -> tuple[int, int, int]:
    """The ``cluster_dims`` attribute of a kernel body, checked against its grid."""
    found: list[Any] = []
    post_order_stmts(root, lambda n: found.append(n.value) if isinstance(n, S.AttrStmt) and n.key == "cluster_dims"
                     else None)
    if not found:
        return (1, 1, 1)
    dims = found[0]
    if (len(found) > 1 or not isinstance(dims, tuple) or len(dims) != 3
            or not all(isinstance(d, int) and d >= 1 for d in dims) or dims[0] * dims[1] * dims[2] > 8):
        raise LoweringError(f"kernel {name}: cluster_dims must be given once, as three positive ints of at most 8 "
                            f"blocks in all; got {found}")
    for d, g, tag in zip(dims, grid, BLOCK_TAGS, strict=True):
        if d > 1 and not (isinstance(g, E.IntImm) and g.value % d == 0):
            raise LoweringError(f"kernel {name}: its {tag} grid extent {g} is not a constant multiple of the "
                                f"cluster's {d}; launch whole clusters")
    return dims


def _host_workspaces(body: S.Stmt) -> list[Buffer]:
    out: list[Buffer] = []

    def visit(n: Any) -> None:
        if isinstance(n, S.Allocate) and n.buffer.scope == "global":
            out.append(n.buffer)

    post_order_stmts(body, visit)
    return out


def max_shared_bytes(target: Target) -> int:
    """Shared memory one block may use, in bytes (the opt-in maximum where there is one)."""
    opt = getattr(target, "max_shared_memory_per_block_optin", None)
    return int(opt) if opt else target.max_shared_memory_per_block


def _shared_buffers(body: S.Stmt) -> list[tuple[Buffer, int]]:
    out: list[tuple[Buffer, int]] = []

    def visit(n: Any) -> None:
        if isinstance(n, S.Allocate) and n.buffer.scope == "shared":
            out.append((n.buffer, buffer_elems(n.buffer) * max(1, n.buffer.dtype.bits // 8)))

    post_order_stmts(body, visit)
    return out


def buffer_elems(buf: Buffer) -> int:
    """Elements of a constant-size buffer (padded strides included)."""
    if buf.strides:
        st0, d0 = simplify(buf.strides[0]), simplify(buf.shape[0])
        if isinstance(st0, E.IntImm) and isinstance(d0, E.IntImm):
            return st0.value * d0.value
    n = 1
    for d in buf.shape:
        d = simplify(d)
        if not isinstance(d, E.IntImm):
            raise LoweringError(f"{buf.scope} buffer {buf.name} has a size that is not constant ({d})")
        n *= d.value
    return n


def shared_bytes(body: S.Stmt) -> int:
    """Bytes of shared memory the kernel allocates (every allocation counted once)."""
    return sum(((n + 15) // 16) * 16 for _, n in _shared_buffers(body))


# -- statements outside threadIdx loops: cross-thread reductions, single-thread stores -------------
class _CrossThread:
    """Rewrites statements that every thread of a block would execute redundantly."""

    def __init__(self, bdim: tuple[int, int, int], warp: int):
        self.bdim = bdim
        self.warp = warp
        self.nthreads = bdim[0] * bdim[1] * bdim[2]

    def run(self, s: S.Stmt) -> S.Stmt:
        return self.visit(s, frozenset())

    def visit(self, s: S.Stmt, tags: frozenset[str]) -> S.Stmt:
        if isinstance(s, S.For):
            bound = s.kind is S.ForKind.THREAD_BINDING and s.thread_tag in THREAD_TAGS
            body = self.visit(s.body, tags | {s.thread_tag} if bound else tags)
            if body is s.body:
                return s
            return S.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)
        if isinstance(s, S.SeqStmt):
            items = list(s.seq)
            out: list[S.Stmt] = []
            k = 0
            while k < len(items):
                if "threadIdx.x" not in tags and k + 1 < len(items):
                    red = self.allreduce(items[k], items[k + 1], tags)
                    if red is not None:
                        out.append(red)
                        k += 2
                        continue
                out.append(self.visit(items[k], tags))
                k += 1
            return S.seq(*out)
        if isinstance(s, (S.Allocate, S.LetStmt, S.AttrStmt, S.Assert)):
            body = self.visit(s.body, tags)
            if body is s.body:
                return s
            if isinstance(s, S.Allocate):
                return S.Allocate(s.buffer, body)
            if isinstance(s, S.LetStmt):
                return S.LetStmt(s.var, s.value, body)
            if isinstance(s, S.AttrStmt):
                return S.AttrStmt(s.node, s.key, s.value, body)
            return S.Assert(s.condition, s.message, body)
        if isinstance(s, S.IfThenElse):
            t = self.visit(s.then_case, tags)
            e = self.visit(s.else_case, tags) if s.else_case is not None else None
            if t is s.then_case and e is s.else_case:
                return s
            return S.IfThenElse(s.condition, t, e)
        if isinstance(s, S.BufferStore):
            if s.buffer.scope in ("global", "shared") and self.nthreads > 1:
                cond = self.first_thread(tags)
                if cond is not None:
                    return S.IfThenElse(cond, s)
            return s
        return s

    def first_thread(self, tags: frozenset[str]) -> E.PrimExpr | None:
        cond: E.PrimExpr | None = None
        for tag, ext in zip(THREAD_TAGS, self.bdim):
            if ext > 1 and tag not in tags:
                c = E.EQ(tid(tag), E.const(0), E.BOOL)
                cond = c if cond is None else E.logical_and(cond, c)
        return cond

    # The statements rfactor + a shared partial buffer give:
    #   [if g:] C[i] = identity
    #   for rk in range(T): [if g:] C[i] = combine(C[i], R[f(rk)])     (R shared, T = blockDim.x)
    def allreduce(self, init: S.Stmt, loop: S.Stmt, tags: frozenset[str]) -> S.Stmt | None:
        tx = self.bdim[0]
        if not isinstance(loop, S.For) or loop.kind is S.ForKind.THREAD_BINDING:
            return None
        ext = simplify(loop.extent)
        if not (isinstance(ext, E.IntImm) and ext.value == tx and tx > 1 and _is_zero(loop.min)):
            return None
        if tx & (tx - 1) or (tx > self.warp and tx % self.warp):
            return None
        guard_i, st_i = _unguard(init)
        guard_l, st_l = _unguard(loop.body)
        if not (isinstance(st_i, S.BufferStore) and isinstance(st_l, S.BufferStore)):
            return None
        if st_i.buffer is not st_l.buffer or st_i.value.dtype.lanes != 1:
            return None
        if [structural_key(i) for i in st_i.indices] != [structural_key(i) for i in st_l.indices]:
            return None
        rk = loop.loop_var
        if guard_l is not None and rk in free_vars(guard_l):
            return None
        if any(rk in free_vars(i) for i in st_i.indices):
            return None
        acc = E.BufferLoad(st_i.buffer, st_i.indices, st_i.value.dtype)
        parts = _combine_parts(st_l.value, acc)
        if parts is None:
            return None
        combine, term = parts
        loads: list[E.BufferLoad] = []
        post_order_visit(term, lambda n: loads.append(n) if isinstance(n, E.BufferLoad) else None)
        if not loads or any(ld.buffer.scope != "shared" for ld in loads if rk in free_vars(ld)):
            return None
        # Every thread loads the partial of its own threadIdx.x, then the warp combines by shuffles.
        dt = st_i.value.dtype
        x = tid("threadIdx.x")
        val = E.Var("red", dt)
        body_vars: list[tuple[E.Var, E.PrimExpr]] = [(val, substitute(term, {rk: x}))]
        cur = val
        off = min(tx, self.warp) // 2
        while off >= 1:
            nxt = E.Var("red", dt)
            body_vars.append((nxt, combine(cur, shfl_xor(cur, off))))
            cur = nxt
            off //= 2
        store_guard = guard_l if guard_l is not None else guard_i
        first = self.first_thread(tags)
        cond = first if store_guard is None else (store_guard if first is None else E.logical_and(store_guard, first))
        final_store: S.Stmt = S.BufferStore(st_i.buffer, cur, st_i.indices)
        if tx > self.warp:
            nw = tx // self.warp
            rows = self.bdim[1] * self.bdim[2]
            scratch = Buffer("red_buf", dt, (E.const(rows * nw),), (), "shared")
            row = E.const(0)
            if self.bdim[1] > 1:
                row = tid("threadIdx.y")
            if self.bdim[2] > 1:
                row = tid("threadIdx.z") * self.bdim[1] + row
            slot = row * nw + E.floordiv(x, self.warp)
            lane0 = E.EQ(E.floormod(x, self.warp), E.const(0), E.BOOL)
            total_vars: list[tuple[E.Var, E.PrimExpr]] = []
            acc2: E.PrimExpr = E.BufferLoad(scratch, (simplify(row * nw),), dt)
            for w in range(1, nw):
                acc2 = combine(acc2, E.BufferLoad(scratch, (simplify(row * nw + w),), dt))
            tot = E.Var("red", dt)
            total_vars.append((tot, acc2))
            tail: S.Stmt = S.IfThenElse(cond, S.BufferStore(st_i.buffer, tot, st_i.indices)) if cond is not None else \
                S.BufferStore(st_i.buffer, tot, st_i.indices)
            tail = S.LetStmt(tot, acc2, tail)
            # (the barrier pass orders the partial writes before the reads, and the reads before a
            # later iteration's writes)
            inner = S.seq(S.IfThenElse(lane0, S.BufferStore(scratch, cur, (simplify(slot),))), tail)
            out: S.Stmt = S.Allocate(scratch, inner)
        else:
            out = S.IfThenElse(cond, final_store) if cond is not None else final_store
        for v, e in reversed(body_vars):
            out = S.LetStmt(v, e, out)
        return out


def _is_zero(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def _unguard(s: S.Stmt) -> tuple[E.PrimExpr | None, S.Stmt]:
    if isinstance(s, S.IfThenElse) and s.else_case is None:
        return s.condition, s.then_case
    return None, s


def _combine_parts(value: E.PrimExpr, acc: E.BufferLoad) -> tuple[Any, E.PrimExpr] | None:
    """Split ``value`` = combine(acc, term) into (combine function, term) for +, *, min, max."""
    key = structural_key(acc)
    for cls in (E.Add, E.Mul, E.Min, E.Max):
        if isinstance(value, cls):
            if structural_key(value.a) == key and key not in _keys(value.b):
                term = value.b
            elif structural_key(value.b) == key and key not in _keys(value.a):
                term = value.a
            else:
                return None
            if cls is E.Add:
                return (lambda a, b: a + b), term
            if cls is E.Mul:
                return (lambda a, b: a * b), term
            if cls is E.Min:
                return (lambda a, b: E.min_expr(a, b)), term
            return (lambda a, b: E.max_expr(a, b)), term
    return None


def _keys(e: E.PrimExpr) -> set[Any]:
    out: set[Any] = set()
    post_order_visit(e, lambda n: out.add(structural_key(n)) if isinstance(n, E.BufferLoad) else None)
    return out


# -- barriers ----------------------------------------------------------------------------------------
@dataclass
class _Access:
    """Shared buffers read and written, each with the set of index expressions (structural keys)."""

    reads: dict[Any, frozenset[Any]]
    writes: dict[Any, frozenset[Any]]


_THREAD_KEY: dict[Any, bool] = {}


def _mentions_thread(key: Any) -> bool:
    hit = _THREAD_KEY.get(key)
    if hit is None:
        hit = "gpu.threadIdx" in repr(key)
        if len(_THREAD_KEY) < 100000:
            _THREAD_KEY[key] = hit
    return hit


def _conflict(pend: _Access, nxt: _Access) -> bool:
    """True when ``nxt`` may touch what another thread touched in ``pend`` (one of them writing).

    When both sides access a buffer at one and the same index expression that involves a thread
    index, each thread touches its own element and no barrier is needed."""

    def clash(a: dict[Any, frozenset[Any]], b: dict[Any, frozenset[Any]]) -> bool:
        for buf, ka in a.items():
            kb = b.get(buf)
            if not kb:
                continue
            if len(ka) == 1 and ka == kb and _mentions_thread(next(iter(ka))):
                continue
            return True
        return False

    # Write-after-write between threads is not ordered: stages write disjoint elements.
    return clash(pend.writes, nxt.reads) or clash(pend.reads, nxt.writes)


def _merge(a: _Access, b: _Access) -> _Access:
    if not a.reads and not a.writes:
        return b
    r = dict(a.reads)
    w = dict(a.writes)
    for k, v in b.reads.items():
        r[k] = r[k] | v if k in r else v
    for k, v in b.writes.items():
        w[k] = w[k] | v if k in w else v
    return _Access(r, w)


_EMPTY = _Access({}, {})


class _AccessMemo:
    """What the barrier analysis computes once per IR node: the shared-memory loads inside an
    expression, and the structural key of a load's or store's indices under a given renaming of
    thread-bound loop variables. Each entry keeps its node alive, so an ``id`` is never reused
    while the memo lives (one :func:`insert_barriers` call)."""

    def __init__(self) -> None:
        self.loads: dict[int, tuple[Any, tuple[E.BufferLoad, ...]]] = {}
        self.keys: dict[tuple[int, tuple[int, ...]], tuple[Any, tuple[Any, ...]]] = {}

    def shared_loads(self, e: Any) -> tuple[E.BufferLoad, ...]:
        """The loads of shared buffers inside expression ``e``, in visiting order."""
        hit = self.loads.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        found: list[E.BufferLoad] = []

        def f(n: Any) -> None:
            if isinstance(n, E.BufferLoad) and n.buffer.scope == "shared":
                found.append(n)

        post_order_visit(e, f)
        out = tuple(found)
        self.loads[id(e)] = (e, out)
        return out

    def key(self, owner: Any, indices: tuple[E.PrimExpr, ...], vmap: dict[E.Var, E.PrimExpr]) -> tuple[Any, ...]:
        """The structural key of ``indices`` (of ``owner``, a load or store) with ``vmap``'s
        thread-bound variables replaced by the hardware index."""
        mk = (id(owner), tuple(id(v) for v in vmap))
        hit = self.keys.get(mk)
        if hit is not None and hit[0] is owner:
            return hit[1]
        out = tuple(structural_key(substitute(i, vmap) if vmap else i) for i in indices)
        self.keys[mk] = (owner, out)
        return out


def _renamed_accesses(s: S.Stmt, memo: _AccessMemo | None = None) -> _Access:
    """The shared buffers ``s`` reads and writes, each with the set of its index expressions
    (structural keys) where loop variables bound to threadIdx are replaced by the hardware index,
    so that accesses by one thread to its own element compare equal wherever they are written.
    The statement is walked, not rebuilt: only the indices of shared accesses are renamed, which
    keeps the barrier pass fast on large unrolled kernels; ``memo`` (shared by the calls of one
    barrier pass) remembers each expression's shared loads and each renamed key, since the pass
    asks about nested statements again and again."""
    memo = memo if memo is not None else _AccessMemo()
    reads: dict[Any, set[Any]] = {}
    writes: dict[Any, set[Any]] = {}
    vmap: dict[E.Var, E.PrimExpr] = {}

    def expr(e: Any) -> None:
        for n in memo.shared_loads(e):
            reads.setdefault(n.buffer, set()).add(memo.key(n, n.indices, vmap))

    def stmt(x: Any) -> None:
        if isinstance(x, S.For):
            if x.kind is S.ForKind.THREAD_BINDING and x.thread_tag in THREAD_TAGS:
                vmap[x.loop_var] = tid(x.thread_tag)
            expr(x.min)
            expr(x.extent)
            stmt(x.body)
        elif isinstance(x, S.SeqStmt):
            for y in x.seq:
                stmt(y)
        elif isinstance(x, S.BufferStore):
            expr(x.value)
            for i in x.indices:
                expr(i)
            if x.buffer.scope == "shared":
                writes.setdefault(x.buffer, set()).add(memo.key(x, x.indices, vmap))
        elif isinstance(x, S.IfThenElse):
            expr(x.condition)
            stmt(x.then_case)
            if x.else_case is not None:
                stmt(x.else_case)
        elif isinstance(x, S.LetStmt):
            expr(x.value)
            stmt(x.body)
        elif isinstance(x, S.Assert):
            expr(x.condition)
            stmt(x.body)
        elif isinstance(x, (S.Allocate, S.AttrStmt)):
            stmt(x.body)
        elif isinstance(x, S.Evaluate):
            expr(x.value)
        else:
            raise LoweringError(f"barrier analysis: unexpected statement {type(x).__name__}")

    stmt(s)
    return _Access({k: frozenset(v) for k, v in reads.items()}, {k: frozenset(v) for k, v in writes.items()})


def insert_barriers(body: S.Stmt, bdim: tuple[int, int, int]) -> S.Stmt:
    """``body`` with block-wide barriers between conflicting shared-memory accesses (module doc)."""
    if not _shared_buffers(body):
        return body
    ins = _Barriers(bdim)
    out, _ = ins.seq([body], _EMPTY, True)
    return S.seq(*out)


class _Barriers:
    def __init__(self, bdim: tuple[int, int, int]):
        self.bdim = bdim
        self._memo: dict[int, tuple[S.Stmt, _Access]] = {}
        self._nodes = _AccessMemo()

    def access(self, s: S.Stmt) -> _Access:
        hit = self._memo.get(id(s))
        if hit is not None and hit[0] is s:
            return hit[1]
        acc = _renamed_accesses(s, self._nodes)
        self._memo[id(s)] = (s, acc)
        return acc

    def seq(self, items: list[S.Stmt], pend: _Access, uniform: bool) -> tuple[list[S.Stmt], _Access]:
        """Process statements in order; returns them with barriers and what is pending after."""
        out: list[S.Stmt] = []
        for s in items:
            if isinstance(s, S.Evaluate) and isinstance(s.value, E.Call) and s.value.op == "gpu.barrier":
                out.append(s)
                pend = _EMPTY
                continue
            acc = self.access(s)
            if not acc.reads and not acc.writes:
                out.append(s)
                continue
            if uniform and _conflict(pend, acc) and not isinstance(s, S.SeqStmt):
                # Order what came before against all of this statement once, here, rather than
                # inside its loops.
                out.append(barrier())
                pend = _EMPTY
            new_s, inner_pend, handled = self.stmt(s, pend, uniform)
            if handled:
                out.append(new_s)
                pend = inner_pend
                continue
            if _conflict(pend, acc):
                if not uniform:
                    raise LoweringError(
                        "shared memory is written and read by different threads inside code that not every "
                        "thread of the block runs (a guarded loop or condition), where no barrier can be placed: "
                        "make the threadIdx extents of the stages that share it equal"
                    )
                out.append(barrier())
                pend = _EMPTY
            out.append(new_s)
            pend = _merge(pend, acc)
        return out, pend

    def stmt(self, s: S.Stmt, pend: _Access, uniform: bool) -> tuple[S.Stmt, _Access, bool]:
        """Recurse into statements all threads run alike; returns (stmt, pending, handled)."""
        if isinstance(s, S.SeqStmt):
            items, p = self.seq(list(s.seq), pend, uniform)
            return S.seq(*items), p, True
        if isinstance(s, (S.Allocate, S.LetStmt, S.AttrStmt)):
            items, p = self.seq([s.body], pend, uniform)
            body = S.seq(*items)
            if isinstance(s, S.Allocate):
                return S.Allocate(s.buffer, body), p, True
            if isinstance(s, S.LetStmt):
                return S.LetStmt(s.var, s.value, body), p, True
            return S.AttrStmt(s.node, s.key, s.value, body), p, True
        if isinstance(s, S.For):
            if s.kind is S.ForKind.THREAD_BINDING:
                ext = simplify(s.extent)
                full = s.thread_tag not in THREAD_TAGS or (
                    isinstance(ext, E.IntImm) and ext.value == self.bdim[THREAD_TAGS.index(s.thread_tag)])
                items, p = self.seq([s.body], pend, uniform and full)
                return S.For(s.loop_var, s.min, s.extent, s.kind, S.seq(*items), s.thread_tag, s.annotations), p, True
            # A serial loop: barriers inside, and one at the top of the body when an iteration's
            # accesses conflict with those of the previous iteration.
            items, p_end = self.seq([s.body], pend, uniform)
            head = self.head_access(items)
            if _conflict(p_end, head) and uniform:
                items, p_end = self.seq([s.body], _EMPTY, uniform)
                items = [barrier(), *items]
                first = self.access(s.body)
                if _conflict(pend, first):
                    pass  # the barrier at the top of the body also orders what came before the loop
            elif _conflict(p_end, head):
                raise LoweringError(
                    f"loop {s.loop_var.name} reads and writes shared memory across iterations inside code that not "
                    "every thread runs; make the threadIdx extents of the stages that share it equal"
                )
            return S.For(s.loop_var, s.min, s.extent, s.kind, S.seq(*items), s.thread_tag, s.annotations), \
                _merge(pend, p_end), True
        return s, pend, False

    def head_access(self, items: list[S.Stmt]) -> _Access:
        """Accesses before the first barrier of a loop body (what a next iteration starts with)."""
        acc = _EMPTY
        for s in S.seq(*items).seq if isinstance(S.seq(*items), S.SeqStmt) else [S.seq(*items)]:
            if isinstance(s, S.Evaluate) and isinstance(s.value, E.Call) and s.value.op == "gpu.barrier":
                return acc
            acc = _merge(acc, self.access(s))
        return acc
