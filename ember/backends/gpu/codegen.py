"""GPU code generation shared by NVPTX and AMDGPU: kernels from :class:`~ember.lowering.gpu.Kernel`.

:class:`CodeGenGPU` emits each kernel as a ``void`` function whose buffer parameters point into
global memory (the target's address space), reads thread indices for thread-bound loops
(guarding loops shorter than the launch), puts ``"shared"`` buffers in module-level variables
of the shared address space, ``"local"`` buffers on the stack (registers after SROA), and emits
barriers, warp shuffles and aligned vector loads and stores (16 bytes where the index is provably
a multiple of the vector width). Subclasses supply the target's intrinsics and math functions.

After code generation :func:`finalize_kernels` adds the function attributes (launch bounds) to
the module text, since llvmlite's builder does not know them.
"""

from __future__ import annotations

import math
import re
from typing import Any

import llvmlite.ir as ir

from ...arith import simplify, structural_key
from ...codegen.llvm import F16, F32, F64, I16, I32, I64, CodeGenLLVM, _is_one
from ...errors import CodegenError
from ...ir import expr as E
from ...ir import stmt as S
from ...ir.buffer import Buffer
from ...ir.dtypes import DataType
from ...lowering.gpu import BLOCK_TAGS, THREAD_TAGS, Kernel, buffer_elems
from ...target import Target


class CodeGenGPU(CodeGenLLVM):
    """Kernels for a GPU target (subclassed per vendor)."""

    global_addrspace = 1
    shared_addrspace = 3
    #: calling convention of kernels
    kernel_cc = ""
    #: shared memory a kernel may declare statically; beyond it, all of its shared buffers are
    #: carved out of dynamic shared memory sized at launch
    static_shared_limit = 48 * 1024

    def __init__(self, target: Target, module_name: str = "ember"):
        super().__init__(target, module_name)
        self.kernels: list[Kernel] = []
        self.kernel_attrs: dict[str, dict[str, str]] = {}
        #: per kernel: indices of buffer parameters read or written with vector accesses
        self.vector_params: dict[str, list[int]] = {}
        self._vec_align = 0
        self._block = (1, 1, 1)
        self._grid: dict[str, Any] = {}
        self._hw_index: dict[str, ir.Value] = {}
        #: per kernel: bytes of dynamic shared memory (0 when its shared memory is static)
        self.dynamic_shared: dict[str, int] = {}
        self._dyn_base: ir.Value | None = None
        self._dyn_off = 0

    # -- kernels --------------------------------------------------------------------------------------
    def add_kernel(self, k: Kernel) -> ir.Function:
        """Emit kernel ``k``."""
        func = k.func
        buffers = k.buffer_params
        scalars = k.scalar_params
        gptr = ir.PointerType(addrspace=self.global_addrspace)
        arg_types = [gptr for _ in buffers] + [self.value_type(v.dtype) for v in scalars]
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), arg_types), name=func.name)
        if self.kernel_cc:
            fn.calling_convention = self.kernel_cc
        for i, b in enumerate(buffers):
            fn.args[i].name = b.name
            fn.args[i].add_attribute("noalias")
        for i, v in enumerate(scalars):
            fn.args[len(buffers) + i].name = v.name
        self.function = fn
        entry = fn.append_basic_block("entry")
        self._entry_block = entry
        self.builder = ir.IRBuilder(entry)
        self.vars, self.buffers = {}, {}
        from ...arith import Analyzer

        self.analyzer = Analyzer()
        self._block = k.block
        self._grid = {t: structural_key(g) for t, g in zip(BLOCK_TAGS, k.grid)}
        self._hw_index = {}
        self._param_index = {b.data: i for i, b in enumerate(buffers)}
        self._vector_params: set[int] = set()
        for i, b in enumerate(buffers):
            self.buffers[b.data] = fn.args[i]
        for i, v in enumerate(scalars):
            self.vars[v] = fn.args[len(buffers) + i]
            self.analyzer.bind_bound(v, 0, None)
        self._dyn_base, self._dyn_off = None, 0
        if k.shared_bytes > self.static_shared_limit:
            ty = ir.ArrayType(ir.IntType(8), 0)
            gv = ir.GlobalVariable(self.module, ty, f"{func.name}_dyn_smem", addrspace=self.shared_addrspace)
            gv.linkage = "external"
            gv.align = 16
            gv.type = ir.PointerType(addrspace=self.shared_addrspace)
            self._dyn_base = gv
        self.emit(func.body)
        if not self.builder.block.is_terminated:
            self.builder.ret_void()
        self.dynamic_shared[func.name] = self._dyn_off if self._dyn_base is not None else 0
        self.kernels.append(k)
        self.vector_params[func.name] = sorted(self._vector_params)
        self.kernel_attrs[func.name] = self.kernel_attributes(k)
        return fn

    def kernel_attributes(self, k: Kernel) -> dict[str, str]:
        """String function attributes of kernel ``k`` (launch bounds)."""
        return {}

    # -- thread indices -------------------------------------------------------------------------------
    def read_index(self, tag: str) -> ir.Value:
        """The hardware index ``tag`` as an i32 (target specific)."""
        raise NotImplementedError

    def hw_index(self, tag: str) -> ir.Value:
        """The hardware index, read once per kernel in the entry block."""
        v = self._hw_index.get(tag)
        if v is None:
            with self.builder.goto_block(self._entry_block):
                if self._entry_block.instructions:
                    self.builder.position_before(self._entry_block.instructions[0])
                v = self.read_index(tag)
            self._hw_index[tag] = v
        return v

    def emit_thread_loop(self, s: S.For) -> None:
        tag = s.thread_tag
        if tag == "vthread" or tag not in THREAD_TAGS + BLOCK_TAGS:
            self.emit_serial_loop(s.loop_var, self.expr(s.min), self.expr(s.extent), s.body, s.min, s.extent)
            return
        idx = self.hw_index(tag)
        ext = simplify(s.extent)
        ty = self.value_type(s.loop_var.dtype)
        value = self._int_cast(idx, ty)
        if not (isinstance(s.min, E.IntImm) and s.min.value == 0):
            value = self.builder.add(value, self._int_cast(self.expr(s.min), ty))
        self.vars[s.loop_var] = value
        self.analyzer.bind(s.loop_var, s.min, s.extent)
        guard = False
        if tag in THREAD_TAGS:
            launch = self._block[THREAD_TAGS.index(tag)]
            guard = not (isinstance(ext, E.IntImm) and ext.value >= launch)
        else:
            guard = structural_key(ext) != self._grid.get(tag)
        if not guard:
            self.emit(s.body)
            return
        cond = self.builder.icmp_signed("<", self._int_cast(idx, ty), self._int_cast(self.expr(ext), ty))
        body_bb = self.function.append_basic_block(self.fresh(f"{tag}.in"))
        end_bb = self.function.append_basic_block(self.fresh(f"{tag}.end"))
        self.builder.cbranch(cond, body_bb, end_bb)
        self.builder.position_at_end(body_bb)
        self.emit(s.body)
        if not self.builder.block.is_terminated:
            self.builder.branch(end_bb)
        self.builder.position_at_end(end_bb)

    # -- memory ---------------------------------------------------------------------------------------
    def allocate(self, buf: Buffer, size: int | None) -> ir.Value:
        if buf.scope == "shared" and self._dyn_base is not None:
            nbytes = buffer_elems(buf) * max(1, buf.dtype.bits // 8)
            off = self._dyn_off
            self._dyn_off += (nbytes + 15) // 16 * 16
            with self.builder.goto_block(self._entry_block):
                if self._entry_block.instructions:
                    self.builder.position_before(self._entry_block.instructions[0])
                ptr = self.builder.gep(self._dyn_base, [ir.Constant(I64, off)], inbounds=True,
                                       source_etype=ir.IntType(8))
            return ptr
        if buf.scope == "shared":
            n = buffer_elems(buf)
            ty = ir.ArrayType(self.memory_type(buf.dtype), max(1, n))
            gv = ir.GlobalVariable(self.module, ty, self.fresh(f"{self.function.name}.{buf.name}"),
                                   addrspace=self.shared_addrspace)
            gv.linkage = "internal"
            gv.initializer = ir.Constant(ty, ir.Undefined)
            gv.align = 16
            gv.type = ir.PointerType(addrspace=self.shared_addrspace)
            return gv
        if buf.scope == "global":
            raise CodegenError(
                f"buffer {buf.name} has scope 'global' but is allocated inside kernel {self.function.name}: "
                "give its stage scope 'local' (registers) or 'shared', or compute it at the root"
            )
        if size is None:
            raise CodegenError(f"local buffer {buf.name} has a size that is not constant; split with constant factors")
        nbytes = size * max(1, buf.dtype.bits // 8)
        if nbytes > 64 * 1024:
            raise CodegenError(f"local buffer {buf.name} takes {nbytes} bytes per thread; use smaller tiles")
        with self.builder.goto_block(self._entry_block):
            if self._entry_block.instructions:
                self.builder.position_before(self._entry_block.instructions[0])
            ptr = self.alloca(self.memory_type(buf.dtype), max(size, 1), buf.name, self.alloca_pointer_type(buf))
        return ptr

    def release(self, buf: Buffer) -> None:
        return None

    def _note_vector(self, buf: Buffer) -> None:
        k = self._param_index.get(buf.data)
        if k is not None:
            self._vector_params.add(k)

    def vector_align(self, buf: Buffer, base: E.PrimExpr, lanes: int) -> int:
        """Alignment in bytes of a vector access at element ``base`` of ``buf``."""
        elem = max(1, buf.dtype.bits // 8)
        width = min(16, elem * lanes)
        per = max(1, width // elem)
        if _divisible(base, per):
            return width
        return elem

    def expr_BufferLoad(self, e: E.BufferLoad) -> ir.Value:
        index = e.indices[0]
        if e.dtype.lanes > 1 and isinstance(index, E.Ramp) and _is_one(index.stride):
            self._vec_align = self.vector_align(e.buffer, index.base, e.dtype.lanes)
            self._note_vector(e.buffer)
        return super().expr_BufferLoad(e)

    def emit_BufferStore(self, s: S.BufferStore) -> None:
        index = s.indices[0]
        if s.value.dtype.lanes > 1 and isinstance(index, E.Ramp) and _is_one(index.stride):
            value = self.expr(s.value)
            self._vec_align = self.vector_align(s.buffer, index.base, s.value.dtype.lanes)
            self._note_vector(s.buffer)
            ptr = self.element_ptr(s.buffer, self.expr(index.base))
            self.store_vector(s.buffer.dtype, value, ptr, s.value.dtype.lanes)
            return
        super().emit_BufferStore(s)

    def load_vector(self, t: DataType, ptr: ir.Value, lanes: int) -> ir.Value:
        vt = ir.VectorType(self.memory_type(t), lanes)
        v = self.builder.load(ptr, typ=vt)
        v.align = self._vec_align or max(1, t.bits // 8)
        self._vec_align = 0
        return self._from_memory(t.with_lanes(lanes), v)

    def store_vector(self, t: DataType, value: ir.Value, ptr: ir.Value, lanes: int) -> None:
        st = self.builder.store(self._to_memory(t.with_lanes(lanes), value), ptr)
        st.align = self._vec_align or max(1, t.bits // 8)
        self._vec_align = 0

    def emit_Assert(self, s: S.Assert) -> None:
        raise CodegenError(f"run-time assertions ({s.message}) are not supported inside GPU kernels")

    # -- intrinsics -----------------------------------------------------------------------------------
    def expr_Call(self, e: E.Call) -> ir.Value:
        if e.op.startswith("gpu."):
            what = e.op[4:]
            if what in THREAD_TAGS or what in BLOCK_TAGS:
                return self._int_cast(self.hw_index(what), self.value_type(e.dtype))
            if what == "barrier":
                self.barrier()
                return ir.Constant(I32, 0)
            if what == "shfl_xor":
                value = self.expr(e.args[0])
                off = e.args[1]
                if not isinstance(off, E.IntImm):
                    raise CodegenError("shfl_xor needs a constant lane offset")
                return self._shuffle(value, off.value)
            raise CodegenError(f"unknown GPU intrinsic {e.op}")
        if e.op.startswith("tc."):
            return self.matrix_call(e)
        return super().expr_Call(e)

    def matrix_call(self, e: E.Call) -> ir.Value:
        """A tensorized matrix-unit call (``tc.mma:<intrinsic>``, ``tc.ldmatrix:...``; see
        :mod:`ember.lowering.tensorize`); the vendor's code generator implements them."""
        raise CodegenError(f"{e.op[3:]} is not available on {self.target}: schedule without tensorize")

    def operand_ptr(self, x: E.PrimExpr) -> ir.Value:
        """The address of the element a matrix call's operand names (a ``BufferLoad``)."""
        if not isinstance(x, E.BufferLoad) or len(x.indices) != 1:
            raise CodegenError(f"a matrix call's operand must name a buffer element, got {x!r}")
        return self.element_ptr(x.buffer, self.expr(x.indices[0]))

    def load_words(self, ptr: ir.Value, count: int, ty: ir.Type = I32) -> list[ir.Value]:
        """``count`` consecutive 32-bit values (``ty``: i32 or float) from ``ptr``."""
        out = []
        for w in range(count):
            p = self._word_ptr(ptr, w)
            v = self.builder.load(p, typ=ty)
            v.align = 4
            out.append(v)
        return out

    def store_words(self, ptr: ir.Value, values: list[ir.Value]) -> None:
        """Store 32-bit ``values`` consecutively from ``ptr``."""
        for w, v in enumerate(values):
            st = self.builder.store(v, self._word_ptr(ptr, w))
            st.align = 4

    def _word_ptr(self, ptr: ir.Value, w: int) -> ir.Value:
        if not w:
            return ptr
        return self.builder.gep(ptr, [ir.Constant(I64, 4 * w)], inbounds=True, source_etype=ir.IntType(8))

    def barrier(self) -> None:
        """A block-wide barrier with shared-memory ordering."""
        raise NotImplementedError

    def shfl_xor_i32(self, value: ir.Value, offset: int) -> ir.Value:
        """The i32 ``value`` of lane ``lane ^ offset`` (target specific)."""
        raise NotImplementedError

    def _shuffle(self, value: ir.Value, offset: int) -> ir.Value:
        b = self.builder
        ty = value.type
        if ty == I32:
            return self.shfl_xor_i32(value, offset)
        if ty == F32:
            return b.bitcast(self.shfl_xor_i32(b.bitcast(value, I32), offset), F32)
        if ty in (F16, I16) or (isinstance(ty, ir.IntType) and ty.width < 32):
            iv = b.bitcast(value, I16) if ty == F16 else value
            wide = b.zext(iv, I32)
            out = b.trunc(self.shfl_xor_i32(wide, offset), iv.type)
            return b.bitcast(out, F16) if ty == F16 else out
        if ty in (F64, I64):
            iv = b.bitcast(value, I64) if ty == F64 else value
            lo = b.trunc(iv, I32)
            hi = b.trunc(b.lshr(iv, ir.Constant(I64, 32)), I32)
            lo2 = self.shfl_xor_i32(lo, offset)
            hi2 = self.shfl_xor_i32(hi, offset)
            out = b.or_(b.zext(lo2, I64), b.shl(b.zext(hi2, I64), ir.Constant(I64, 32)))
            return b.bitcast(out, F64) if ty == F64 else out
        raise CodegenError(f"warp shuffle of a value of LLVM type {ty} is not supported")

    # -- math --------------------------------------------------------------------------------------------
    NATIVE_MATH = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "roundeven",
                   "abs": "fabs"}
    LIBRARY_MATH = ("exp", "exp2", "exp10", "log", "log2", "log10", "sin", "cos", "tan", "tanh", "erf", "expm1",
                    "log1p", "atan", "asin", "acos", "sinh", "cosh", "rsqrt", "pow")

    def library_function(self, op: str, scalar: ir.Type) -> str | None:
        """The vendor library's function for ``op`` on ``scalar`` values, or None to use the fallback."""
        return None

    def math_f32_or_f64(self, op: str, args: list[ir.Value], t: DataType) -> ir.Value:
        """Math on the GPU: LLVM intrinsics the backends implement, the vendor library, or
        :class:`FallbackMath`; never LLVM's libm intrinsics (they abort NVPTX)."""
        b = self.builder
        x = args[0]
        scalar = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        if t.is_int or op in ("isnan", "isinf", "isfinite", "fmod") or scalar not in (F32, F64):
            return super().math_f32_or_f64(op, args, t)
        if op in self.NATIVE_MATH:
            return self.llvm_intrinsic(self.NATIVE_MATH[op], [x])
        if op == "sigmoid":
            e = self.math_f32_or_f64("exp", [b.fneg(x)], t)
            one = self._fconst(x.type, 1.0)
            return b.fdiv(one, b.fadd(one, e))
        name = self.library_function(op, scalar) if op in self.LIBRARY_MATH else None
        if name is not None:
            return self.call_scalar(name, args)
        out = self.fallback_math(op, args)  # type: ignore[attr-defined]
        if out is None:
            raise CodegenError(f"math function {op} is not supported on {self.target} for {t}")
        return out

    # -- math helpers shared by the fallbacks -----------------------------------------------------------
    def per_lane(self, fn: Any, x: ir.Value, *rest: ir.Value) -> ir.Value:
        """Apply a scalar emitter lane by lane for vector values."""
        if not isinstance(x.type, ir.VectorType):
            return fn(x, *rest)
        out = ir.Constant(x.type, ir.Undefined)
        for k in range(x.type.count):
            idx = ir.Constant(I32, k)
            lanes = [self.builder.extract_element(v, idx) for v in (x, *rest)]
            out = self.builder.insert_element(out, fn(*lanes), idx)
        return out

    def call_scalar(self, name: str, args: list[ir.Value]) -> ir.Value:
        """Call the scalar device function ``name`` (lane by lane for vectors)."""
        scalar = args[0].type.element if isinstance(args[0].type, ir.VectorType) else args[0].type
        fn = self.intrinsic(name, scalar, [scalar] * len(args))
        return self.per_lane(lambda *xs: self.builder.call(fn, list(xs)), *args)


def _divisible(e: E.PrimExpr, n: int) -> bool:
    """True when integer expression ``e`` is a multiple of ``n`` for every value of its variables."""
    if n <= 1:
        return True
    return _gcd_of(e) % n == 0


def _gcd_of(e: E.PrimExpr) -> int:
    """A number that provably divides ``e`` (0 means ``e`` is 0)."""
    if isinstance(e, E.IntImm):
        return abs(e.value)
    if isinstance(e, (E.Add, E.Sub)):
        return math.gcd(_gcd_of(e.a), _gcd_of(e.b))
    if isinstance(e, E.Mul):
        return _gcd_of(e.a) * _gcd_of(e.b)
    if isinstance(e, E.Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return _gcd_of(e.value)
    if isinstance(e, E.FloorMod) and isinstance(e.b, E.IntImm):
        return math.gcd(_gcd_of(e.a), abs(e.b.value))
    return 1


_DEFINE = re.compile(r'^define (.*?)@"?([A-Za-z0-9_.$]+)"?\((.*)\)\s*$')


def finalize_kernels(text: str, attrs: dict[str, dict[str, str]]) -> str:
    """Add each kernel's string attributes to its definition in LLVM IR ``text``."""
    lines = text.split("\n")
    groups: list[str] = []
    for i, line in enumerate(lines):
        m = _DEFINE.match(line)
        if m is None or m.group(2) not in attrs or not attrs[m.group(2)]:
            continue
        gid = 9000 + len(groups)
        body = " ".join(f'"{k}"="{v}"' for k, v in attrs[m.group(2)].items())
        groups.append(f"attributes #{gid} = {{ {body} }}")
        lines[i] = line.rstrip() + f" #{gid}"
    return "\n".join(lines) + "\n" + "\n".join(groups) + "\n"


# -- math without a vendor library -------------------------------------------------------------------
#: What :class:`FallbackMath` guarantees for float32 (``x`` the argument, over the ranges that the GPU
#: tests draw from); float64 is computed in float32 and has the same error. Measured against NumPy
#: float64 by ``tests/gpu/test_gpu_run.py::test_math_fallback``.
FALLBACK_ACCURACY = {
    "exp": "relative 2e-6 for |x| <= 80 (hardware exp2 of x*log2(e))",
    "exp2": "relative 1e-6",
    "exp10": "relative 4e-6 for |x| <= 30",
    "log": "absolute 2e-6 for x in [0.5, 2], relative 2e-6 elsewhere",
    "log2": "absolute 2e-6 for x in [0.5, 2], relative 2e-6 elsewhere",
    "log10": "absolute 2e-6 for x in [0.5, 2], relative 2e-6 elsewhere",
    "sin": "absolute 2e-6 for |x| <= 100 (reduction by 2*pi in two steps, then hardware sin)",
    "cos": "absolute 2e-6 for |x| <= 100",
    "tan": "relative 1e-5 away from the poles",
    "tanh": "absolute 2e-6",
    "sigmoid": "absolute 1e-6",
    "erf": "absolute 5e-7 (Abramowitz-Stegun 7.1.26)",
    "expm1": "absolute 2e-6 for |x| <= 10, relative 1e-6 for |x| < 1e-3",
    "log1p": "absolute 2e-6",
    "sinh": "absolute 2e-6 for |x| <= 1, relative 2e-6 beyond",
    "cosh": "relative 2e-6",
    "atan": "absolute 1e-6",
    "asin": "absolute 2e-6",
    "acos": "absolute 2e-6",
    "pow": "relative 2e-6 * (1 + |y*log2(x)|) for x > 0; integer y for x < 0",
}


class FallbackMath:
    """Math functions from a target's fast ``exp2``, ``log2``, ``sin`` and ``cos`` (float32).

    Mixed into a GPU code generator that defines ``hw_exp2``, ``hw_log2``, ``hw_sin`` and
    ``hw_cos`` on scalar float32 values. Accuracy: :data:`FALLBACK_ACCURACY`."""

    builder: ir.IRBuilder

    def _c(self, v: float) -> ir.Constant:
        return ir.Constant(F32, v)

    def fallback_math(self, op: str, args: list[ir.Value]) -> ir.Value | None:
        """The value of ``op`` on float32/float64 scalars or vectors, or None if not covered."""
        scalar = args[0].type.element if isinstance(args[0].type, ir.VectorType) else args[0].type
        if scalar not in (F32, F64):
            return None
        fn = getattr(self, "_fb_" + op, None)
        if fn is None:
            return None

        def one(*xs: ir.Value) -> ir.Value:
            if scalar == F64:
                if op in ("sin", "cos", "tan"):
                    # reduce by 2*pi in double first, so that rounding x to float32 costs nothing
                    b = self.builder
                    x = xs[0]
                    k = self.call_scalar("llvm.rint.f64", [b.fmul(x, ir.Constant(F64, 1 / (2 * math.pi)))])  # type: ignore[attr-defined]
                    xs = (b.fsub(x, b.fmul(k, ir.Constant(F64, 2 * math.pi))),)
                narrow = [self.builder.fptrunc(x, F32) for x in xs]
                return self.builder.fpext(fn(*narrow), F64)
            return fn(*xs)

        return self.per_lane(one, *args)  # type: ignore[attr-defined]

    # primitives, all scalar float32
    def _fb_exp2(self, x: ir.Value) -> ir.Value:
        return self.hw_exp2(x)  # type: ignore[attr-defined]

    def _fb_exp(self, x: ir.Value) -> ir.Value:
        b = self.builder
        # Split x*log2(e) into hi + lo so the rounding of the product does not grow with |x|.
        hi = b.fmul(x, self._c(1.4426950216293335))
        lo = b.fmul(x, self._c(1.925963033500011e-08))
        return b.fmul(self.hw_exp2(hi), self.hw_exp2(lo))  # type: ignore[attr-defined]

    def _fb_exp10(self, x: ir.Value) -> ir.Value:
        b = self.builder
        hi = b.fmul(x, self._c(3.321928024291992))
        lo = b.fmul(x, self._c(7.05830456e-08))
        return b.fmul(self.hw_exp2(hi), self.hw_exp2(lo))  # type: ignore[attr-defined]

    def _fb_log2(self, x: ir.Value) -> ir.Value:
        return self.hw_log2(x)  # type: ignore[attr-defined]

    def _fb_log(self, x: ir.Value) -> ir.Value:
        return self.builder.fmul(self.hw_log2(x), self._c(math.log(2.0)))  # type: ignore[attr-defined]

    def _fb_log10(self, x: ir.Value) -> ir.Value:
        return self.builder.fmul(self.hw_log2(x), self._c(math.log10(2.0)))  # type: ignore[attr-defined]

    def _reduce_2pi(self, x: ir.Value) -> ir.Value:
        b = self.builder
        k = self.call_scalar("llvm.rint.f32", [b.fmul(x, self._c(1.0 / (2 * math.pi)))])  # type: ignore[attr-defined]
        c1, c2 = 6.28125, 2 * math.pi - 6.28125
        r = b.fsub(x, b.fmul(k, self._c(c1)))
        return b.fsub(r, b.fmul(k, self._c(c2)))

    def _fb_sin(self, x: ir.Value) -> ir.Value:
        return self.hw_sin(self._reduce_2pi(x))  # type: ignore[attr-defined]

    def _fb_cos(self, x: ir.Value) -> ir.Value:
        return self.hw_cos(self._reduce_2pi(x))  # type: ignore[attr-defined]

    def _fb_tan(self, x: ir.Value) -> ir.Value:
        r = self._reduce_2pi(x)
        return self.builder.fdiv(self.hw_sin(r), self.hw_cos(r))  # type: ignore[attr-defined]

    def _fabs(self, x: ir.Value) -> ir.Value:
        return self.call_scalar("llvm.fabs.f32", [x])  # type: ignore[attr-defined]

    def _copysign(self, mag: ir.Value, sign: ir.Value) -> ir.Value:
        return self.builder.call(self.intrinsic("llvm.copysign.f32", F32, [F32, F32]), [mag, sign])  # type: ignore[attr-defined]

    def _fb_expm1(self, x: ir.Value) -> ir.Value:
        b = self.builder
        big = b.fsub(self._fb_exp(x), self._c(1.0))
        # |x| < 1e-3: x + x^2/2 + x^3/6
        x2 = b.fmul(x, x)
        small = b.fadd(x, b.fmul(x2, b.fadd(self._c(0.5), b.fmul(x, self._c(1.0 / 6.0)))))
        return b.select(b.fcmp_ordered("<", self._fabs(x), self._c(1e-3)), small, big)

    def _fb_log1p(self, x: ir.Value) -> ir.Value:
        b = self.builder
        u = b.fadd(x, self._c(1.0))
        # log(u) * x / (u - 1) corrects the rounding of 1 + x (Goldberg's trick).
        d = b.fsub(u, self._c(1.0))
        corr = b.fmul(self._fb_log(u), b.fdiv(x, d))
        return b.select(b.fcmp_ordered("==", d, self._c(0.0)), x, corr)

    def _fb_tanh(self, x: ir.Value) -> ir.Value:
        b = self.builder
        a = self._fabs(x)
        e = self._fb_expm1(b.fmul(a, self._c(-2.0)))  # in (-1, 0]
        t = b.fdiv(b.fneg(e), b.fadd(e, self._c(2.0)))
        return self._copysign(t, x)

    def _fb_sigmoid(self, x: ir.Value) -> ir.Value:
        b = self.builder
        return b.fdiv(self._c(1.0), b.fadd(self._c(1.0), self._fb_exp(b.fneg(x))))

    def _fb_sinh(self, x: ir.Value) -> ir.Value:
        b = self.builder
        a = self._fabs(x)
        e = self._fb_expm1(a)
        # sinh(a) = (e + e/(e+1)) / 2 with e = expm1(a)
        s = b.fmul(self._c(0.5), b.fadd(e, b.fdiv(e, b.fadd(e, self._c(1.0)))))
        return self._copysign(s, x)

    def _fb_cosh(self, x: ir.Value) -> ir.Value:
        b = self.builder
        e = self._fb_exp(self._fabs(x))
        return b.fmul(self._c(0.5), b.fadd(e, b.fdiv(self._c(1.0), e)))

    def _fb_erf(self, x: ir.Value) -> ir.Value:
        b = self.builder
        a = self._fabs(x)
        t = b.fdiv(self._c(1.0), b.fadd(self._c(1.0), b.fmul(self._c(0.3275911), a)))
        coeffs = [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592]
        p = self._c(coeffs[0])
        for c in coeffs[1:]:
            p = b.fadd(b.fmul(p, t), self._c(c))
        p = b.fmul(p, t)
        y = b.fsub(self._c(1.0), b.fmul(p, self._fb_exp(b.fneg(b.fmul(a, a)))))
        # erf(x) ~ 2x/sqrt(pi) for tiny x, where the formula above loses relative accuracy
        tiny = b.fmul(x, self._c(2.0 / math.sqrt(math.pi)))
        return b.select(b.fcmp_ordered("<", a, self._c(1e-4)), tiny, self._copysign(y, x))

    def _atan01(self, t: ir.Value) -> ir.Value:
        """atan(t) for 0 <= t <= 1: halve the angle once, then a series to t^15."""
        b = self.builder
        sq = self.call_scalar("llvm.sqrt.f32", [b.fadd(self._c(1.0), b.fmul(t, t))])  # type: ignore[attr-defined]
        u = b.fdiv(t, b.fadd(self._c(1.0), sq))  # <= tan(pi/8)
        u2 = b.fmul(u, u)
        p = self._c(1.0 / 15.0)
        # sum_k (-u^2)^k / (2k + 1), by Horner in -u^2
        for k in (13, 11, 9, 7, 5, 3):
            p = b.fadd(b.fmul(p, b.fneg(u2)), self._c(1.0 / k))
        p = b.fadd(b.fmul(p, b.fneg(u2)), self._c(1.0))
        return b.fmul(self._c(2.0), b.fmul(u, p))

    def _fb_atan(self, x: ir.Value) -> ir.Value:
        b = self.builder
        a = self._fabs(x)
        inv = b.fcmp_ordered(">", a, self._c(1.0))
        t = b.select(inv, b.fdiv(self._c(1.0), a), a)
        r = self._atan01(t)
        r = b.select(inv, b.fsub(self._c(math.pi / 2), r), r)
        return self._copysign(r, x)

    def _fb_asin(self, x: ir.Value) -> ir.Value:
        b = self.builder
        c = self.call_scalar("llvm.sqrt.f32", [b.fmul(b.fsub(self._c(1.0), x), b.fadd(self._c(1.0), x))])  # type: ignore[attr-defined]
        return self._fb_atan(b.fdiv(x, c))

    def _fb_acos(self, x: ir.Value) -> ir.Value:
        return self.builder.fsub(self._c(math.pi / 2), self._fb_asin(x))

    def _fb_pow(self, x: ir.Value, y: ir.Value) -> ir.Value:
        b = self.builder
        r = self.hw_exp2(b.fmul(y, self.hw_log2(self._fabs(x))))  # type: ignore[attr-defined]
        yi = self.call_scalar("llvm.trunc.f32", [y])  # type: ignore[attr-defined]
        is_int = b.fcmp_ordered("==", yi, y)
        half = b.fmul(yi, self._c(0.5))
        odd = b.fcmp_ordered("!=", self.call_scalar("llvm.trunc.f32", [half]), half)  # type: ignore[attr-defined]
        neg = b.fcmp_ordered("<", x, self._c(0.0))
        signed = b.select(odd, b.fneg(r), r)
        nan = self._c(math.nan)
        out = b.select(neg, b.select(is_int, signed, nan), r)
        return b.select(b.fcmp_ordered("==", y, self._c(0.0)), self._c(1.0), out)
