"""CPU code generation: LLVM for the host (x86-64, AArch64), parallel loops on ember's pool.

A ``PARALLEL`` loop is outlined into a function that receives its free variables in a struct
and runs one chunk of the iterations; ``ember_parallel_for`` (:mod:`.pool`: the calling thread
and the pool's workers claim chunks one at a time) runs them all, in the pool's static mode
(each thread its own block of chunks first) when the loop carries the annotation
``(STATIC_PARALLEL, True)`` (``Stage.parallel(axis, static=True)``), else in its dynamic mode.
Parallel loops nested inside another parallel loop run serially.
"""

from __future__ import annotations

import ctypes.util
import functools
import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ...codegen.llvm import I32, I64, PTR, CodeGenLLVM, signature_vars
from ...errors import CodegenError, EmberError, ToolchainError
from ...ir import expr as E
from ...ir import stmt as S
from ...ir.buffer import Buffer
from ...ir.verify import verify
from ...ir.visitor import free_vars
from ...target import Target
from . import dot4
from .pool import DYNAMIC, STATIC
from .pool import SYMBOL as POOL_SYMBOL
from .verf import erf_f32
from .vexp import exp_f32
from .vtanh import tanh_f32


class CodeGenCPU(CodeGenLLVM):
    """LLVM code generation for the host CPU."""

    def __init__(self, target: Target, module_name: str = "ember"):
        super().__init__(target, module_name)
        self._parallel_depth = 0

    def math_f32_or_f64(self, op: str, args: list[ir.Value], t: Any) -> ir.Value:
        """float32 ``exp``, ``tanh`` and ``erf`` inline (:mod:`.vexp`, :mod:`.vtanh`, :mod:`.verf`:
        they vectorize; LLVM would call ``expf``/``tanhf``/``erff`` per lane), the rest as the
        shared code generator emits it."""
        x = args[0]
        elem = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        if op == "exp" and isinstance(elem, ir.FloatType):
            return exp_f32(self.builder, x, lambda v: self.llvm_intrinsic("rint", [v]))
        if op == "tanh" and isinstance(elem, ir.FloatType):
            return tanh_f32(self.builder, x, lambda v: self.llvm_intrinsic("rint", [v]))
        if op == "erf" and isinstance(elem, ir.FloatType):
            return erf_f32(self.builder, x, lambda v: self.llvm_intrinsic("rint", [v]))
        return super().math_f32_or_f64(op, args, t)

    def expr_Call(self, e: E.Call) -> ir.Value:
        if e.op == dot4.OP:
            acc, a, b = (self.expr(x) for x in e.args)
            return dot4.emit(self.builder, self.intrinsic, self.target, acc, a, b)
        return super().expr_Call(e)

    def expr_Add(self, e: E.Add) -> ir.Value:
        """``x + vpdpbusd(0, a, b)`` as one ``vpdpbusd`` accumulating into ``x`` (:mod:`.dot4`)."""
        for acc, call in ((e.a, e.b), (e.b, e.a)):
            if isinstance(call, E.Call) and dot4.is_fusable(call):
                a, b = (self.expr(x) for x in call.args[1:])
                return dot4.emit(self.builder, self.intrinsic, self.target, self.expr(acc), a, b)
        return super().expr_Add(e)

    def emit_parallel_loop(self, s: S.For) -> None:
        if self._parallel_depth > 0:
            return super().emit_parallel_loop(s)
        b = self.builder
        lo = self._int_cast(self.expr(s.min), I64)
        extent = self._int_cast(self.expr(s.extent), I64)
        captured = [v for v in free_vars(s.body) if v is not s.loop_var]
        values: list[ir.Value] = []
        for v in captured:
            if v in self.vars:
                values.append(self.vars[v])
            elif v in self.buffers:
                values.append(self.buffers[v])
            else:
                raise CodegenError(f"parallel loop {s.loop_var.name} uses {v.name}, which has no value here")
        struct_ty = ir.LiteralStructType([I64, I64] + [x.type for x in values])
        with b.goto_block(self._entry_block):
            if self._entry_block.instructions:
                b.position_before(self._entry_block.instructions[0])
            closure = self.alloca(struct_ty, 1, "closure")
        for k, x in enumerate([lo, extent] + values):
            b.store(
                x, b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True, source_etype=struct_ty)
            )
        outlined = self._outline(s, captured, values, struct_ty)
        pool = self.intrinsic(POOL_SYMBOL, ir.VoidType(), [PTR, PTR, I64, I32, I32])
        nthreads = int(self.target.opt("num_threads") or 0)
        mode = STATIC if dict(s.annotations).get(S.STATIC_PARALLEL) else DYNAMIC
        b.call(pool, [outlined, closure, extent, ir.Constant(I32, nthreads), ir.Constant(I32, mode)])

    def _outline(self, s: S.For, captured: list[E.Var], values: list[ir.Value], struct_ty: ir.Type) -> ir.Function:
        """Two internal functions: ``<name>_par(closure, chunk, nchunks)``, what the pool
        (:mod:`.pool`) runs for each chunk (it unpacks the closure and computes the chunk's
        share of the iterations), and ``<name>_body(buffers..., values..., begin, count)``, the loop over that
        share. The body receives each buffer as a ``noalias`` parameter: the kernel's buffers are
        distinct (its own arguments are ``noalias`` too), and without this LLVM would assume that
        pointers read from the closure may alias, keeping every accumulator of a register tile
        in memory."""
        saved = (
            self.builder,
            self.function,
            dict(self.vars),
            dict(self.buffers),
            self._entry_block,
            dict(self.analyzer.ranges),
        )
        buffer_ids = {id(x) for x in saved[3].values()}
        is_buffer = [id(orig) in buffer_ids and orig is saved[3].get(v) for v, orig in zip(captured, values)]
        body_ty = ir.FunctionType(ir.VoidType(), [x.type for x in values] + [I64, I64])
        body_fn = ir.Function(self.module, body_ty, name=self.fresh(f"{saved[1].name}_body"))
        body_fn.linkage = "internal"
        for k, buf in enumerate(is_buffer):
            if buf:
                body_fn.args[k].add_attribute("noalias")
        # the per-thread wrapper: unpack, split the iterations, call the body
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]),
                         name=self.fresh(f"{saved[1].name}_par"))
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        fields = []
        for k in range(2 + len(values)):
            ty = struct_ty.elements[k]
            p = b.gep(fn.args[0], [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True, source_etype=struct_ty)
            fields.append(b.load(p, typ=ty))
        lo, extent = fields[0], fields[1]
        # chunk c of n: [extent * c / n, extent * (c + 1) / n) (balanced, never empty for n <= extent)
        chunk, nchunks = fn.args[1], fn.args[2]
        begin = b.sdiv(b.mul(extent, chunk), nchunks)
        end = b.sdiv(b.mul(extent, b.add(chunk, ir.Constant(I64, 1))), nchunks)
        b.call(body_fn, fields[2:] + [b.add(lo, begin), b.sub(end, begin)])
        b.ret_void()
        # the body: the serial loop over [begin, begin + count)
        entry = body_fn.append_basic_block("entry")
        self.function, self._entry_block, self.builder = body_fn, entry, ir.IRBuilder(entry)
        for v, x, buf in zip(captured, body_fn.args, is_buffer):
            if buf:
                self.buffers[v] = x
            else:
                self.vars[v] = x
        self._parallel_depth += 1
        self.analyzer.bind(s.loop_var, s.min, s.extent)
        self.emit_serial_loop(s.loop_var, body_fn.args[len(values)], body_fn.args[len(values) + 1], s.body)
        self._parallel_depth -= 1
        self.builder.ret_void()
        (self.builder, self.function, self.vars, self.buffers, self._entry_block, ranges) = saved
        self.analyzer.ranges = ranges
        return fn


# -- compilation ---------------------------------------------------------------------------------------
_initialized = False


def init_llvm() -> None:
    """Initialise LLVM's targets once (all of x86/AArch64, NVPTX and AMDGPU in llvmlite)."""
    global _initialized
    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        # LLVM 22's loop vectorizer groups interleaved accesses wrongly when an index wraps
        # through a remainder of the loop variable: `o[i, j, k] = x[i % 3, j % 4, k % 5]` loaded
        # 40 consecutive floats of a 60-float input from offset 40 (reading past its end). Plain
        # and explicit (ember's own) vectorization are unaffected; only interleave groups go.
        llvm.set_option("", "-enable-interleaved-mem-accesses=0")
        _initialized = True


@functools.cache
def load_runtime_libraries() -> None:
    """Make libgomp's symbols (and libgcc_s's support routines, when present) visible to code
    loaded in this process. Does the work once per process."""
    path = ctypes.util.find_library("gomp")
    if path is None:
        for cand in ("libgomp.so.1", "/usr/lib/x86_64-linux-gnu/libgomp.so.1"):
            try:
                ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
                path = cand
                break
            except OSError:
                continue
    if path is None:
        raise ToolchainError(
            "libgomp.so.1 (GCC's OpenMP runtime) was not found; parallel CPU loops need it: "
            "install it (Debian: apt-get install libgomp1)"
        )
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    llvm.load_library_permanently(path)
    from .pool import install

    install()  # ember_parallel_for, which parallel loops call
    # Compiler support routines LLVM calls for conversions the CPU has no instruction for
    # (float64 -> float16 is __truncdfhf2 on x86 without AVX512-FP16): GCC's libgcc_s provides them.
    gcc_s = ctypes.util.find_library("gcc_s")
    if gcc_s is not None:
        try:
            ctypes.CDLL(gcc_s, mode=ctypes.RTLD_GLOBAL)
            llvm.load_library_permanently(gcc_s)
        except (OSError, RuntimeError):
            pass  # a routine it would provide is reported by name when a module needs it


def target_machine(target: Target, opt: int = 3) -> llvm.TargetMachine:
    """An LLVM target machine for ``target`` (position-independent code)."""
    init_llvm()
    try:
        t = llvm.Target.from_triple(target.triple)
    except RuntimeError as exc:
        raise CodegenError(f"LLVM has no backend for {target.triple}: {exc}") from exc
    # x86-64: the large code model (every address 64-bit): MCJIT maps code and read-only data as
    # separate allocations, which can land more than 2 GiB apart in a process with many libraries
    # mapped; a 32-bit PC-relative reference between them then fails an assertion in RuntimeDyld,
    # which aborts the process (seen on a 16-core Xeon host with torch loaded).
    if target.triple.startswith("x86_64"):
        return t.create_target_machine(cpu=target.mcpu, features=target.mattr, opt=opt, reloc="static",
                                       codemodel="large")
    return t.create_target_machine(cpu=target.mcpu, features=target.mattr, opt=opt, reloc="pic", codemodel="default")


def parse_and_verify(text: str, what: str) -> llvm.ModuleRef:
    """Parse LLVM IR text and verify it; failures raise CodegenError (never an LLVM abort)."""
    init_llvm()
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as exc:
        raise CodegenError(f"ember produced invalid LLVM IR for {what}: {exc}") from exc
    return mod


def optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, level: int = 3) -> None:
    """Run LLVM's standard O``level`` pipeline on ``mod`` in place."""
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    mpm.run(mod, pb)


@dataclass
class CompiledCPU:
    """The result of compiling loop IR for the CPU: LLVM IR, the object file and signatures."""

    llvm_ir: str
    obj: bytes
    functions: list[dict[str, Any]]
    target: str


def function_signature(func: S.PrimFunc) -> dict[str, Any]:
    """A JSON-able description of a compiled function's parameters (for the runtime's argument
    checks): per buffer its name, dtype, shape (ints, size names, or the printed expression of a
    derived dimension), ``shape_is_var``, ``shape_vars`` and ``shape_exprs`` (per dimension an
    expression tree over ``scalars`` for a derived dimension such as ``n + 4``, else None; see
    :mod:`ember.runtime.size_expr`); per scalar parameter its name and dtype; and ``scalars``,
    the sizes passed after the buffers (:func:`~ember.codegen.llvm.signature_vars` order)."""
    from ...runtime.size_expr import to_tree

    sizes = signature_vars(func)
    index = {v: i for i, v in enumerate(sizes)}
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            shape = [s.value if isinstance(s, E.IntImm) else str(s) for s in p.shape]
            shape_vars = [[v.name for v in free_vars(s)] for s in p.shape]
            exprs: list[Any] = []
            for s in p.shape:
                tree = None
                if not isinstance(s, (E.IntImm, E.Var)):
                    try:
                        tree = to_tree(s, index)
                    except EmberError:
                        tree = None  # a dimension the host cannot evaluate stays unchecked
                exprs.append(tree)
            params.append(
                {
                    "kind": "buffer",
                    "name": p.name,
                    "dtype": str(p.dtype),
                    "shape": shape,
                    "shape_is_var": [isinstance(s, E.Var) for s in p.shape],
                    "shape_vars": shape_vars,
                    "shape_exprs": exprs,
                }
            )
        else:
            params.append({"kind": "scalar", "name": p.name, "dtype": str(p.dtype)})
    scalars = [{"name": v.name, "dtype": str(v.dtype)} for v in sizes]
    return {"name": func.name, "params": params, "scalars": scalars}


#: Loop IR (printed characters) below which :func:`default_jobs` builds in one process: a
#: forked part costs ~50 ms, and a module this size takes a second or less to build.
PARALLEL_MIN_CHARS = 100_000


def default_jobs(weights: list[int]) -> int:
    """Processes :func:`compile_cpu` uses when not told: 2 (where this process may run on two
    cores or more) for functions whose printed loop IR (``weights``: characters per function)
    reaches :data:`PARALLEL_MIN_CHARS` in all and that are at least two, else 1. (ResNet-50's
    28 kernels, 480,000 characters: code generation and LLVM's O3 in two processes at once.)"""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS
        cores = os.cpu_count() or 1
    return 2 if cores >= 2 and len(weights) >= 2 and sum(weights) >= PARALLEL_MIN_CHARS else 1


def compile_cpu(funcs: list[S.PrimFunc], target: Target, module_name: str = "ember", jobs: int = 1,
                weights: list[int] | None = None) -> CompiledCPU:
    """Generate, verify, optimise and assemble ``funcs`` for the host CPU.

    ``jobs`` > 1 generates and optimises the functions in up to that many parts at once: the
    first in this process, each other in a forked child process (:func:`_forked_bitcode`: it
    inherits the loop IR, so nothing is pickled, and sends back optimised bitcode); a build
    started ahead for the first functions (:func:`start_ahead`) is one more such part (counted
    in ``jobs`` while its child still runs). The parts
    are then linked in order, the signatures' module last, and assembled into one object here.
    The object is the serial build's byte for byte (each function is optimised with what it
    calls, no function calls another part's, the order of uses is kept through the bitcode and
    the outlined loop bodies get their serial names back); only the LLVM IR text differs (block
    labels, the order of declarations). ``weights`` (one per function, e.g. the length of its
    printed loop IR) balance the parts; without them each part gets as many functions. A part
    whose child fails (or where ``fork`` is unavailable) is built here, so errors are raised as
    in a serial build."""
    for f in funcs:
        verify(f)  # ill-typed loop IR raises CodegenError here, before LLVM sees it
    sigs = [function_signature(f) for f in funcs]
    tm = target_machine(target)
    n, ahead = _claim_ahead(funcs, target, module_name)
    rest = funcs[n:]
    rest_weights = weights[n:] if weights is not None and len(weights) == len(funcs) else None
    jobs -= 1 if ahead is not None and ahead.running() else 0  # (that child is one of the processes)
    groups = _partition(rest, jobs, rest_weights) if rest and jobs > 1 and _can_fork() else [rest] if rest else []
    first = 1 if ahead is not None else 0  # the part's index: where its unique names start

    def name(k: int) -> str:
        return module_name if k == 0 else f"{module_name}.{k}"

    plan: list[tuple[list[S.PrimFunc], int, _Child | None]] = [(funcs[:n], 0, ahead)] if ahead is not None else []
    plan += [(g, first + j, _forked_bitcode(g, target, name(first + j), first + j) if j else None)
             for j, g in enumerate(groups)]
    try:
        here = {k: _optimized_module(g, target, name(k), tm, k) for g, k, child in plan if child is None}
        built = []
        for g, k, child in plan:
            if child is None:
                built.append((k, *here[k]))
                continue
            got = child.result()
            try:
                part = llvm.parse_bitcode(got[0]) if got is not None else None
            except RuntimeError:
                part = None
            if part is None:  # the child failed: build the part here (raising what went wrong)
                built.append((k, *_optimized_module(g, target, name(k), tm, k)))
            else:
                built.append((k, part, got[1]))  # type: ignore[index]
    finally:
        for _, _, child in plan:
            if child is not None:
                child.stop()
    meta = _signatures_module(sigs, target, tm, name(len(plan)))
    mod, names = None, 0
    for k, part, used in built:
        if k:
            _rename_part(part, k, names)
        names += used
        if mod is None:
            mod = part
        else:
            mod.link_in(part)
    if mod is None:
        mod = meta
    else:
        mod.link_in(meta)
    text = str(mod)
    obj = tm.emit_object(mod)
    return CompiledCPU(text, obj, sigs, str(target))


def _signatures_module(sigs: list[dict[str, Any]], target: Target, tm: llvm.TargetMachine,
                       module_name: str) -> llvm.ModuleRef:
    """The module of the build's function signatures (``__ember_metadata``: JSON bytes, and
    ``__ember_metadata_size``), linked after the functions' modules."""
    module = ir.Module(name=module_name)
    module.triple = target.triple
    meta = json.dumps(sigs).encode()
    data = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), len(meta)), "__ember_metadata")
    data.initializer = ir.Constant(ir.ArrayType(ir.IntType(8), len(meta)), bytearray(meta))
    data.global_constant = True
    size = ir.GlobalVariable(module, I64, "__ember_metadata_size")
    size.initializer = ir.Constant(I64, len(meta))
    size.global_constant = True
    module.data_layout = str(tm.target_data)
    mod = parse_and_verify(str(module), module_name)
    mod.triple = target.triple
    return mod


def _optimized_module(funcs: list[S.PrimFunc], target: Target, module_name: str, tm: llvm.TargetMachine,
                      part: int) -> tuple[llvm.ModuleRef, int]:
    """``funcs`` generated, parsed, verified and optimised (O3) as one LLVM module, and how many
    unique names the code generator made. ``part`` > 0 starts the unique names at ``part *
    _NAMES_PER_PART`` (:func:`_rename_part` gives them their serial numbers)."""
    cg = CodeGenCPU(target, module_name)
    cg._counter = part * _NAMES_PER_PART
    for f in funcs:
        try:
            cg.add_function(f)
        except EmberError:
            raise
        except (ValueError, TypeError, AttributeError, KeyError, AssertionError) as exc:
            raise CodegenError(f"code generation of {f.name} failed: {type(exc).__name__}: {exc}") from exc
    # The target's data layout is part of the text LLVM parses, so every pass sees it.
    cg.module.data_layout = str(tm.target_data)
    mod = parse_and_verify(str(cg.module), module_name)
    mod.triple = target.triple
    optimize(mod, tm)
    return mod, cg._counter - part * _NAMES_PER_PART


#: Unique names of one part of a parallel build start at ``part * _NAMES_PER_PART``.
_NAMES_PER_PART = 1 << 40


def _rename_part(mod: llvm.ModuleRef, part: int, start: int) -> None:
    """Give the functions of part ``part`` of a parallel build the names a serial build gives
    them: the code generator's unique names (``<prefix>.<n>``, outlined loop bodies) numbered
    from ``start`` (the names the earlier parts made) instead of ``part * _NAMES_PER_PART``, so
    the object is the serial build's byte for byte."""
    first = part * _NAMES_PER_PART
    for fn in mod.functions:
        prefix, _, number = fn.name.rpartition(".")
        if prefix and number.isdigit() and int(number) > first:
            fn.name = f"{prefix}.{int(number) - first + start}"


def _can_fork() -> bool:
    """Whether child processes can be forked here (POSIX; the ``fork`` start method)."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def _partition(funcs: list[S.PrimFunc], jobs: int, weights: list[int] | None) -> list[list[S.PrimFunc]]:
    """``funcs`` cut into at most ``jobs`` consecutive, non-empty runs (consecutive: the linked
    module keeps the functions' order) by weight: the first run, built by this process, which
    also links and assembles the whole object afterwards, gets :data:`_FIRST_SHARE` of an equal
    share; the others split the rest equally."""
    w = [max(1, int(x)) for x in weights] if weights is not None and len(weights) == len(funcs) else [1] * len(funcs)
    parts = max(1, min(jobs, len(funcs)))
    if parts == 1:
        return [list(funcs)]
    first = _FIRST_SHARE / parts
    cuts = [first + (1 - first) * k / (parts - 1) for k in range(parts - 1)]  # cumulative shares
    total, out, cur, acc = sum(w), [], [], 0
    for k, (f, x) in enumerate(zip(funcs, w)):
        cur.append(f)
        acc += x
        left = len(funcs) - k - 1  # every later run needs a function
        if len(out) < parts - 1 and (acc >= total * cuts[len(out)] or left == parts - 1 - len(out)):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


#: The first part's weight in a parallel build, as a fraction of an equal share (linking and
#: assembling the object, ~1.5 s of ResNet-50's ~8 s, run after it in the same process).
_FIRST_SHARE = 0.7


class _Child:
    """A forked process building one part of a parallel build (:func:`_forked_bitcode`)."""

    def __init__(self, proc: Any, conn: Any) -> None:
        self.proc, self.conn, self.done = proc, conn, False

    def running(self) -> bool:
        """Whether the child is still building (has sent nothing yet)."""
        return not self.done and self.proc.is_alive() and not self.conn.poll()

    def result(self) -> tuple[bytes, int] | None:
        """Wait for the part: (bitcode, unique names made), or None when the child failed."""
        try:
            data = self.conn.recv()
        except (EOFError, OSError):
            data = None
        self.done = True
        self.stop()
        return data if isinstance(data, tuple) else None

    def stop(self) -> None:
        """Reap the child; one whose part is no longer wanted (the build failed) is killed first."""
        if not self.done and self.proc.is_alive():
            self.proc.kill()
        self.done = True
        self.conn.close()
        self.proc.join()


class AheadBuild:
    """Code generation of a module's first functions, started (in a forked child) before the
    build is asked for: the model compiler starts one halfway through lowering a large model
    (:func:`ember.driver.compile_graph`), so LLVM works on the first kernels while the rest are
    lowered. :func:`compile_cpu` takes it over when its functions begin with exactly these
    (the same objects, same target and module name); :meth:`cancel` ends one that no build took
    (a cache hit, a failure)."""

    def __init__(self, funcs: list[S.PrimFunc], target: Target, child: _Child) -> None:
        self.funcs, self.target, self.child = list(funcs), str(target), child

    def cancel(self) -> None:
        """Forget the build and end its child (nothing if a build took it over)."""
        with _ahead_lock:
            if self in _ahead:
                _ahead.remove(self)
                self.child.stop()


_ahead_lock = threading.Lock()
_ahead: list[AheadBuild] = []


def start_ahead(funcs: list[S.PrimFunc], target: Target) -> AheadBuild | None:
    """Start generating ``funcs`` (the first functions of a module to be built for ``target``,
    in order) in a forked child; None where nothing was started (no ``fork``, nothing to do)."""
    if not funcs or not _can_fork():
        return None
    funcs = list(funcs)  # (an ill-typed one fails the child; the build then raises the error itself)
    build = AheadBuild(funcs, target, _forked_bitcode(funcs, target, funcs[0].name, 0))
    with _ahead_lock:
        _ahead.append(build)
    return build


def _claim_ahead(funcs: list[S.PrimFunc], target: Target, module_name: str) -> tuple[int, _Child | None]:
    """The build started ahead (:func:`start_ahead`) for the first functions of ``funcs``: how
    many it covers and its child, taken out of the registry; ``(0, None)`` when there is none."""
    with _ahead_lock:
        for build in _ahead:
            n = len(build.funcs)
            if (n <= len(funcs) and build.target == str(target) and module_name == build.funcs[0].name
                    and all(a is b for a, b in zip(build.funcs, funcs))):
                _ahead.remove(build)
                return n, build.child
    return 0, None


def _forked_bitcode(funcs: list[S.PrimFunc], target: Target, module_name: str, part: int) -> _Child:
    """A forked child that builds ``funcs`` (:func:`_optimized_module`) and sends back the
    module's bitcode and how many unique names it made. The fork happens while this thread
    holds llvmlite's lock, so no other thread of this process is inside LLVM then (the child
    would inherit a held lock)."""
    import multiprocessing

    from llvmlite.binding import ffi

    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        recv.close()
        try:
            mod, used = _optimized_module(funcs, target, module_name, target_machine(target), part)
            # the order of each value's uses as built here (it decides, e.g., the order of a
            # block's predecessors, and so the machine code): as in a serial build
            llvm.set_option("", "-preserve-bc-uselistorder")
            send.send((mod.as_bitcode(), used))
        except BaseException:  # noqa: BLE001 - the parent rebuilds this part and reports the error
            send.send(None)
        finally:
            send.close()

    proc = ctx.Process(target=child, daemon=True)
    with ffi.lib._lock:
        proc.start()
    send.close()
    return _Child(proc, recv)


def assembly(llvm_ir: str, target: Target) -> str:
    """Assembly text for LLVM IR (parsed afresh so the cached module is never mutated)."""
    tm = target_machine(target)
    mod = parse_and_verify(llvm_ir, "assembly")
    return tm.emit_assembly(mod)


def digest(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
