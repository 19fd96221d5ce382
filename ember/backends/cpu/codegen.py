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


def compile_cpu(funcs: list[S.PrimFunc], target: Target, module_name: str = "ember") -> CompiledCPU:
    """Generate, verify, optimise and assemble ``funcs`` for the host CPU."""
    cg = CodeGenCPU(target, module_name)
    sigs = []
    for f in funcs:
        verify(f)  # ill-typed loop IR raises CodegenError here, before LLVM sees it
        try:
            cg.add_function(f)
        except EmberError:
            raise
        except (ValueError, TypeError, AttributeError, KeyError, AssertionError) as exc:
            raise CodegenError(f"code generation of {f.name} failed: {type(exc).__name__}: {exc}") from exc
        sigs.append(function_signature(f))
    meta = json.dumps(sigs).encode()
    data = ir.GlobalVariable(cg.module, ir.ArrayType(ir.IntType(8), len(meta)), "__ember_metadata")
    data.initializer = ir.Constant(ir.ArrayType(ir.IntType(8), len(meta)), bytearray(meta))
    data.global_constant = True
    size = ir.GlobalVariable(cg.module, I64, "__ember_metadata_size")
    size.initializer = ir.Constant(I64, len(meta))
    size.global_constant = True
    tm = target_machine(target)
    # The target's data layout is part of the text LLVM parses, so every pass sees it.
    cg.module.data_layout = str(tm.target_data)
    mod = parse_and_verify(str(cg.module), module_name)
    mod.triple = target.triple
    optimize(mod, tm)
    text = str(mod)
    obj = tm.emit_object(mod)
    return CompiledCPU(text, obj, sigs, str(target))


def assembly(llvm_ir: str, target: Target) -> str:
    """Assembly text for LLVM IR (parsed afresh so the cached module is never mutated)."""
    tm = target_machine(target)
    mod = parse_and_verify(llvm_ir, "assembly")
    return tm.emit_assembly(mod)


def digest(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
