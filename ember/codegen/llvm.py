"""Loop IR to LLVM IR, shared by every target.

:class:`CodeGenLLVM` turns :class:`~ember.ir.PrimFunc` bodies into an llvmlite module. Targets
subclass it to change three things only: how a function is declared (kernel conventions and
address spaces), how thread-bound loops and parallel loops are emitted, and how math functions
are lowered (:meth:`CodeGenLLVM.math_call`). Values of type ``bfloat16`` are computed as float
and stored as 16-bit integers (rounded to nearest even); ``bool`` is ``i1`` in registers and
``i8`` in memory, as are ``int4``/``uint4``/``int2``/``uint2`` (``iN`` in registers, one byte in
memory holding the low bits). The 8- and 4-bit float formats are ``i8`` bit patterns that only
``reinterpret`` (``E.Call(t, "reinterpret", (x,))``, an LLVM bitcast) converts.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from ..arith import Analyzer
from ..errors import CodegenError
from ..ir import expr as E
from ..ir import stmt as S
from ..ir.buffer import Buffer
from ..ir.dtypes import DataType
from ..ir.visitor import free_vars, post_order_visit
from ..target import Target

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()


def signature_vars(func: S.PrimFunc) -> list[E.Var]:
    """Scalar parameters of a compiled function, in order: every variable in the argument
    buffers' shapes (first appearance), then explicit scalar arguments."""
    out: dict[E.Var, None] = {}
    for p in func.params:
        if isinstance(p, Buffer):
            for s in p.shape:
                for v in free_vars(s):
                    out.setdefault(v, None)
    for p in func.params:
        if isinstance(p, E.Var):
            out.setdefault(p, None)
    return list(out)


class CodeGenLLVM:
    """Loop IR → LLVM IR for one module (several functions)."""

    #: address space of global memory pointers
    global_addrspace = 0

    def __init__(self, target: Target, module_name: str = "ember"):
        self.target = target
        self.module = ir.Module(name=module_name)
        self.module.triple = target.triple
        self.builder: ir.IRBuilder = None  # type: ignore[assignment]
        self.function: ir.Function = None  # type: ignore[assignment]
        self.vars: dict[E.Var, ir.Value] = {}
        self.buffers: dict[E.Var, ir.Value] = {}
        self.analyzer = Analyzer()
        self._entry_block: ir.Block = None  # type: ignore[assignment]
        self._intrinsics: dict[tuple[str, str], ir.Function] = {}
        self._counter = 0

    # -- types ------------------------------------------------------------------------------------
    def scalar_type(self, t: DataType) -> ir.Type:
        """LLVM register type of one element of ``t``."""
        if t.is_bool:
            return I1
        if t.kind == "bfloat":
            return F32
        if t.kind == "float":
            return {16: F16, 32: F32, 64: F64}[t.bits]
        return ir.IntType(t.bits)

    def value_type(self, t: DataType) -> ir.Type:
        """LLVM register type of a value of ``t`` (vectors for several lanes)."""
        st = self.scalar_type(t)
        return st if t.lanes == 1 else ir.VectorType(st, t.lanes)

    def memory_type(self, t: DataType) -> ir.Type:
        """LLVM type of one element of ``t`` as stored in memory."""
        if t.is_bool:
            return I8
        if t.kind == "bfloat":
            return I16
        if t.is_subbyte_int:
            return I8
        return self.scalar_type(t)

    # -- functions --------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        """A unique name."""
        self._counter += 1
        return f"{prefix}.{self._counter}"

    def add_function(self, func: S.PrimFunc) -> ir.Function:
        """Emit ``func`` as ``i32 name(ptr buffers..., scalars...)`` returning 0."""
        buffers = [p for p in func.params if isinstance(p, Buffer)]
        scalars = signature_vars(func)
        arg_types = [PTR for _ in buffers] + [self.value_type(v.dtype) for v in scalars]
        fnty = ir.FunctionType(I32, arg_types)
        fn = ir.Function(self.module, fnty, name=func.name)
        for k, b in enumerate(buffers):
            fn.args[k].name = b.name
            fn.args[k].add_attribute("noalias")
        for k, v in enumerate(scalars):
            fn.args[len(buffers) + k].name = v.name
        self.function = fn
        entry = fn.append_basic_block("entry")
        self._entry_block = entry
        self.builder = ir.IRBuilder(entry)
        self.vars = {}
        self.buffers = {}
        self.analyzer = Analyzer()
        for k, b in enumerate(buffers):
            self.buffers[b.data] = fn.args[k]
        for k, v in enumerate(scalars):
            self.vars[v] = fn.args[len(buffers) + k]
            self.analyzer.bind_bound(v, 0, None)
        self.emit(func.body)
        if not self.builder.block.is_terminated:
            self.builder.ret(ir.Constant(I32, 0))
        return fn

    # -- statements -------------------------------------------------------------------------------
    def emit(self, s: S.Stmt) -> None:
        """Emit statement ``s`` at the builder's position."""
        method = getattr(self, "emit_" + type(s).__name__, None)
        if method is None:
            raise CodegenError(f"code generation for {type(s).__name__} is not supported on {self.target.kind}")
        method(s)

    def emit_SeqStmt(self, s: S.SeqStmt) -> None:
        for x in s.seq:
            self.emit(x)

    def emit_Evaluate(self, s: S.Evaluate) -> None:
        self.expr(s.value)

    def emit_AttrStmt(self, s: S.AttrStmt) -> None:
        self.emit(s.body)

    def emit_LetStmt(self, s: S.LetStmt) -> None:
        self.vars[s.var] = self.expr(s.value)
        if s.var.dtype.is_int and s.var.dtype.lanes == 1:
            lo, hi = self.analyzer.const_bound(s.value)
            self.analyzer.bind_bound(s.var, lo, hi)
        self.emit(s.body)

    def emit_Assert(self, s: S.Assert) -> None:
        cond = self.expr(s.condition)
        fail = self.function.append_basic_block(self.fresh("assert_fail"))
        ok = self.function.append_basic_block(self.fresh("assert_ok"))
        self.builder.cbranch(cond, ok, fail)
        self.builder.position_at_end(fail)
        self.builder.ret(ir.Constant(I32, -1))
        self.builder.position_at_end(ok)
        self.emit(s.body)

    def emit_IfThenElse(self, s: S.IfThenElse) -> None:
        cond = self.expr(s.condition)
        then_bb = self.function.append_basic_block(self.fresh("then"))
        end_bb = self.function.append_basic_block(self.fresh("endif"))
        else_bb = self.function.append_basic_block(self.fresh("else")) if s.else_case is not None else end_bb
        self.builder.cbranch(cond, then_bb, else_bb)
        self.builder.position_at_end(then_bb)
        self.emit(s.then_case)
        if not self.builder.block.is_terminated:
            self.builder.branch(end_bb)
        if s.else_case is not None:
            self.builder.position_at_end(else_bb)
            self.emit(s.else_case)
            if not self.builder.block.is_terminated:
                self.builder.branch(end_bb)
        self.builder.position_at_end(end_bb)

    def emit_For(self, s: S.For) -> None:
        if s.kind is S.ForKind.THREAD_BINDING:
            self.emit_thread_loop(s)
        elif s.kind is S.ForKind.PARALLEL:
            self.emit_parallel_loop(s)
        else:
            self.emit_serial_loop(s.loop_var, self.expr(s.min), self.expr(s.extent), s.body, s.min, s.extent)

    def emit_thread_loop(self, s: S.For) -> None:
        """A loop bound to a GPU thread index: only GPU code generators support it."""
        raise CodegenError(
            f"loop {s.loop_var.name} is bound to {s.thread_tag}, which only GPU targets have; "
            f"build with target='cuda' or 'rocm', or remove the bind for target={self.target.kind!r}"
        )

    def emit_parallel_loop(self, s: S.For) -> None:
        """A parallel loop; the base class runs it serially (CPU code generators override)."""
        self.emit_serial_loop(s.loop_var, self.expr(s.min), self.expr(s.extent), s.body, s.min, s.extent)

    def emit_serial_loop(
        self,
        var: E.Var,
        lo: ir.Value,
        extent: ir.Value,
        body: S.Stmt,
        lo_expr: E.PrimExpr | None = None,
        ext_expr: E.PrimExpr | None = None,
    ) -> None:
        """``for var in [lo, lo + extent): body`` as a counted loop with a phi."""
        ty = self.value_type(var.dtype)
        lo = self._int_cast(lo, ty)
        end = self.builder.add(lo, self._int_cast(extent, ty))
        pre = self.builder.block
        head = self.function.append_basic_block(self.fresh(f"for.{var.name}"))
        body_bb = self.function.append_basic_block(self.fresh(f"body.{var.name}"))
        exit_bb = self.function.append_basic_block(self.fresh(f"end.{var.name}"))
        self.builder.branch(head)
        self.builder.position_at_end(head)
        phi = self.builder.phi(ty, name=var.name)
        phi.add_incoming(lo, pre)
        self.builder.cbranch(self.builder.icmp_signed("<", phi, end), body_bb, exit_bb)
        self.builder.position_at_end(body_bb)
        self.vars[var] = phi
        if lo_expr is not None and ext_expr is not None:
            self.analyzer.bind(var, lo_expr, ext_expr)
        self.emit(body)
        nxt = self.builder.add(phi, ir.Constant(ty, 1), flags=["nsw"])
        phi.add_incoming(nxt, self.builder.block)
        latch = self.builder.branch(head)
        if _divides_loop_var(var, body):
            latch.set_metadata("llvm.loop", self._no_vectorize_loop_id())
        self.builder.position_at_end(exit_bb)

    def _no_vectorize_loop_id(self) -> ir.MDValue:
        """A fresh loop ID (``!{self, name, vectorize.enable=false}``) that keeps LLVM's loop
        vectorizer off one loop.

        LLVM 22.1's loop vectorizer miscompiles loops whose body indexes memory through a masked
        induction variable (``floormod(i, 4)`` becomes ``and i, 3``, then an ``or disjoint``
        with an outer index): it takes the address as uniform and loads lane 0's element for
        every lane (found by the fuzzer as Softmax -> Tile; see tests/test_llvm_workarounds.py).
        ember's own VectorizeLoops pass still vectorizes such loops where it can."""
        module = self.module
        enable = ir.MetaDataString(module, "llvm.loop.vectorize.enable")
        off = module.add_metadata([enable, ir.Constant(ir.IntType(1), 0)])
        # Every operand after the self-reference must be a node (LLVM's loop passes cast them to
        # MDNode; a bare string trips an assertion): the unique name goes in a node of its own.
        name = module.add_metadata([ir.MetaDataString(module, self.fresh("ember.loop"))])
        loop_id = module.add_metadata([name, off])
        loop_id.operands = (loop_id, *loop_id.operands)  # a loop ID refers to itself
        return loop_id

    def _int_cast(self, v: ir.Value, ty: ir.Type) -> ir.Value:
        if v.type == ty:
            return v
        if v.type.width > ty.width:
            return self.builder.trunc(v, ty)
        return self.builder.sext(v, ty)

    def emit_BufferStore(self, s: S.BufferStore) -> None:
        buf = s.buffer
        value = self.expr(s.value)
        lanes = s.value.dtype.lanes
        index = s.indices[0]
        if lanes == 1:
            ptr = self.element_ptr(buf, self.expr(index))
            self.store_scalar(buf.dtype, value, ptr)
            return
        if isinstance(index, E.Ramp) and _is_one(index.stride):
            ptr = self.element_ptr(buf, self.expr(index.base))
            self.store_vector(buf.dtype, value, ptr, lanes)
            return
        idx = self.expr(index)
        for k in range(lanes):
            lane = self.builder.extract_element(idx, ir.Constant(I32, k))
            ptr = self.element_ptr(buf, lane)
            self.store_scalar(buf.dtype, self.builder.extract_element(value, ir.Constant(I32, k)), ptr)

    def emit_Allocate(self, s: S.Allocate) -> None:
        buf = s.buffer
        size = 1
        const_size = True
        for d in buf.shape:
            if isinstance(d, E.IntImm):
                size *= d.value
            else:
                const_size = False
        if buf.strides:
            # Padded strides: size is stride[0] * shape[0].
            st0 = buf.strides[0]
            if isinstance(st0, E.IntImm) and isinstance(buf.shape[0], E.IntImm):
                size = st0.value * buf.shape[0].value
            else:
                const_size = False
        self.buffers[buf.data] = self.allocate(buf, size if const_size else None)
        self.emit(s.body)
        self.release(buf)

    def allocate(self, buf: Buffer, size: int | None) -> ir.Value:
        """Storage for ``buf`` (``size`` elements, None when symbolic); stack for small constant
        sizes (allocas in the entry block), the heap otherwise."""
        elem = self.memory_type(buf.dtype)
        nbytes = None if size is None else size * max(1, buf.dtype.bits // 8)
        if nbytes is not None and nbytes <= 64 * 1024:
            with self.builder.goto_block(self._entry_block):
                if self._entry_block.instructions:
                    self.builder.position_before(self._entry_block.instructions[0])
                ptr = self.alloca(elem, max(size or 1, 1), buf.name, self.alloca_pointer_type(buf))
            return ptr
        total: ir.Value
        if size is not None:
            total = ir.Constant(I64, max(nbytes or 1, 1))
        else:
            total = ir.Constant(I64, max(1, buf.dtype.bits // 8))
            for d in buf.shape if not buf.strides else (buf.strides[0] * buf.shape[0],):
                total = self.builder.mul(total, self._int_cast(self.expr(E.cast("int64", d)), I64))
        malloc = self._libc("malloc", ir.FunctionType(PTR, [I64]))
        ptr = self.builder.call(malloc, [total], name=buf.name)
        self._heap = getattr(self, "_heap", {})
        self._heap[buf.data] = ptr
        return ptr

    def alloca(self, elem: ir.Type, count: int, name: str, ptr_type: ir.Type = PTR) -> ir.Value:
        """An ``alloca`` of ``count`` elements (at the builder's position) typed as an opaque
        pointer, so llvmlite's typed-pointer checks do not get in the way."""
        inst = self.builder.alloca(elem, size=ir.Constant(I64, count) if count != 1 else None, name=name)
        inst.align = 64
        inst.type = ptr_type
        return inst

    def alloca_pointer_type(self, buf: Buffer) -> ir.Type:
        """The (opaque) pointer type storage of ``buf`` is addressed through."""
        return PTR

    def release(self, buf: Buffer) -> None:
        """Free heap storage of ``buf`` (nothing for stack storage)."""
        heap = getattr(self, "_heap", {})
        if buf.data in heap and not self.builder.block.is_terminated:
            free = self._libc("free", ir.FunctionType(ir.VoidType(), [PTR]))
            self.builder.call(free, [heap.pop(buf.data)])

    def _libc(self, name: str, fnty: ir.FunctionType) -> ir.Function:
        try:
            return self.module.get_global(name)
        except KeyError:
            return ir.Function(self.module, fnty, name=name)

    # -- memory -------------------------------------------------------------------------------------
    def element_ptr(self, buf: Buffer, index: ir.Value) -> ir.Value:
        """Pointer to element ``index`` of ``buf``."""
        base = self.buffers.get(buf.data)
        if base is None:
            raise CodegenError(f"buffer {buf.name} is used outside the region where it is allocated")
        return self.builder.gep(base, [index], inbounds=True, source_etype=self.memory_type(buf.dtype))

    def load_scalar(self, t: DataType, ptr: ir.Value) -> ir.Value:
        """Load one element of type ``t``."""
        v = self.builder.load(ptr, typ=self.memory_type(t))
        v.align = max(1, t.bits // 8)
        return self._from_memory(t, v)

    def store_scalar(self, t: DataType, value: ir.Value, ptr: ir.Value) -> None:
        """Store one element of type ``t``."""
        st = self.builder.store(self._to_memory(t, value), ptr)
        st.align = max(1, t.bits // 8)

    def load_vector(self, t: DataType, ptr: ir.Value, lanes: int) -> ir.Value:
        """Load ``lanes`` consecutive elements."""
        vt = ir.VectorType(self.memory_type(t), lanes)
        v = self.builder.load(ptr, typ=vt)
        v.align = max(1, t.bits // 8)
        return self._from_memory(t.with_lanes(lanes), v)

    def store_vector(self, t: DataType, value: ir.Value, ptr: ir.Value, lanes: int) -> None:
        """Store ``lanes`` consecutive elements."""
        st = self.builder.store(self._to_memory(t.with_lanes(lanes), value), ptr)
        st.align = max(1, t.bits // 8)

    def _from_memory(self, t: DataType, v: ir.Value) -> ir.Value:
        if t.is_bool:
            return self.builder.icmp_unsigned("!=", v, ir.Constant(v.type, None))
        if t.kind == "bfloat":
            i32t = I32 if t.lanes == 1 else ir.VectorType(I32, t.lanes)
            wide = self.builder.zext(v, i32t)
            shifted = self.builder.shl(wide, self._splat(ir.Constant(I32, 16), t.lanes))
            return self.builder.bitcast(shifted, self.value_type(t))
        if t.is_subbyte_int:
            return self.builder.trunc(v, self.value_type(t))
        return v

    def _to_memory(self, t: DataType, v: ir.Value) -> ir.Value:
        if t.is_bool:
            return self.builder.zext(v, I8 if t.lanes == 1 else ir.VectorType(I8, t.lanes))
        if t.kind == "bfloat":
            return self._f32_to_bf16_bits(v, t.lanes)
        if t.is_subbyte_int:
            return self.builder.zext(v, I8 if t.lanes == 1 else ir.VectorType(I8, t.lanes))
        return v

    def _f32_to_bf16_bits(self, v: ir.Value, lanes: int) -> ir.Value:
        """Round-to-nearest-even float32 → bfloat16 bits (NaN stays NaN)."""
        b = self.builder
        i32t = I32 if lanes == 1 else ir.VectorType(I32, lanes)
        bits = b.bitcast(v, i32t)
        lsb = b.and_(b.lshr(bits, self._splat(ir.Constant(I32, 16), lanes)), self._splat(ir.Constant(I32, 1), lanes))
        rounded = b.add(b.add(bits, self._splat(ir.Constant(I32, 0x7FFF), lanes)), lsb)
        is_nan = b.fcmp_unordered("uno", v, v)
        nan_bits = b.or_(bits, self._splat(ir.Constant(I32, 0x400000), lanes))
        chosen = b.select(is_nan, nan_bits, rounded)
        i16t = I16 if lanes == 1 else ir.VectorType(I16, lanes)
        return b.trunc(b.lshr(chosen, self._splat(ir.Constant(I32, 16), lanes)), i16t)

    def _splat(self, c: ir.Constant, lanes: int) -> ir.Value:
        if lanes == 1:
            return c
        return ir.Constant(ir.VectorType(c.type, lanes), [c.constant] * lanes)

    # -- expressions ------------------------------------------------------------------------------
    def expr(self, e: E.PrimExpr) -> ir.Value:
        """The LLVM value of expression ``e``."""
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise CodegenError(f"code generation for expression {type(e).__name__} ({e}) is not supported")
        return method(e)

    def expr_IntImm(self, e: E.IntImm) -> ir.Value:
        return ir.Constant(self.scalar_type(e.dtype), e.value)

    def expr_FloatImm(self, e: E.FloatImm) -> ir.Value:
        if e.dtype.kind == "bfloat":
            return ir.Constant(F32, _round_bf16(e.value))
        return ir.Constant(self.scalar_type(e.dtype), e.value)

    def expr_Var(self, e: E.Var) -> ir.Value:
        v = self.vars.get(e)
        if v is None:
            raise CodegenError(f"variable {e.name} is used where it has no value (not a loop, argument or let)")
        return v

    def expr_Let(self, e: E.Let) -> ir.Value:
        self.vars[e.var] = self.expr(e.value)
        return self.expr(e.body)

    def _nonneg(self, e: E.PrimExpr) -> bool:
        lo, _ = self.analyzer.const_bound(e)
        return lo is not None and lo >= 0

    def _fp(self, inst: ir.Instruction) -> ir.Value:
        inst.flags.append("contract")
        return inst

    def expr_Add(self, e: E.Add) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype.is_float:
            return self._round(e.dtype, self._fp(self.builder.fadd(a, b)))
        return self.builder.add(a, b)

    def expr_Sub(self, e: E.Sub) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype.is_float:
            return self._round(e.dtype, self._fp(self.builder.fsub(a, b)))
        return self.builder.sub(a, b)

    def expr_Mul(self, e: E.Mul) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype.is_float:
            return self._round(e.dtype, self._fp(self.builder.fmul(a, b)))
        return self.builder.mul(a, b)

    def expr_Div(self, e: E.Div) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype.is_float:
            return self._round(e.dtype, self.builder.fdiv(a, b))
        if e.dtype.kind == "uint":
            return self.builder.udiv(a, b)
        return self.builder.sdiv(a, b)

    def expr_Mod(self, e: E.Mod) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype.is_float:
            return self.builder.frem(a, b)
        if e.dtype.kind == "uint":
            return self.builder.urem(a, b)
        return self.builder.srem(a, b)

    def expr_FloorDiv(self, e: E.FloorDiv) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype.kind == "uint" or (self._nonneg(e.a) and self._nonneg(e.b)):
            return self.builder.udiv(a, b) if e.dtype.kind == "uint" else self.builder.sdiv(a, b)
        q = self.builder.sdiv(a, b)
        r = self.builder.srem(a, b)
        zero = ir.Constant(a.type, None)
        # q - 1 when the remainder is non-zero and its sign differs from the divisor's.
        adjust = self.builder.and_(
            self.builder.icmp_signed("!=", r, zero),
            self.builder.icmp_signed(
                "!=", self.builder.icmp_signed("<", r, zero), self.builder.icmp_signed("<", b, zero)
            ),
        )
        return self.builder.sub(q, self.builder.zext(adjust, a.type))

    def expr_FloorMod(self, e: E.FloorMod) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype.kind == "uint" or (self._nonneg(e.a) and self._nonneg(e.b)):
            return self.builder.urem(a, b) if e.dtype.kind == "uint" else self.builder.srem(a, b)
        r = self.builder.srem(a, b)
        zero = ir.Constant(a.type, None)
        adjust = self.builder.and_(
            self.builder.icmp_signed("!=", r, zero),
            self.builder.icmp_signed(
                "!=", self.builder.icmp_signed("<", r, zero), self.builder.icmp_signed("<", b, zero)
            ),
        )
        return self.builder.add(r, self.builder.select(adjust, b, zero))

    def _cmp(self, op: str, a: ir.Value, b: ir.Value, t: DataType) -> ir.Value:
        if t.is_float:
            return self.builder.fcmp_unordered(op, a, b) if op == "!=" else self.builder.fcmp_ordered(op, a, b)
        if t.kind in ("uint", "bool"):
            return self.builder.icmp_unsigned(op, a, b)
        return self.builder.icmp_signed(op, a, b)

    def expr_Min(self, e: E.Min) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        return (
            self.builder.select(self._cmp("<", a, b, e.dtype), a, b)
            if not e.dtype.is_float
            else self._fminmax("minimum", a, b, e.dtype)
        )

    def expr_Max(self, e: E.Max) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        return (
            self.builder.select(self._cmp(">", a, b, e.dtype), a, b)
            if not e.dtype.is_float
            else self._fminmax("maximum", a, b, e.dtype)
        )

    def _fminmax(self, which: str, a: ir.Value, b: ir.Value, t: DataType) -> ir.Value:
        """NaN-propagating float min/max (NumPy semantics)."""
        op = "<" if which == "minimum" else ">"
        pick = self.builder.select(self.builder.fcmp_ordered(op, a, b), a, b)
        a_nan = self.builder.fcmp_unordered("uno", a, a)
        return self.builder.select(a_nan, a, pick)

    def expr_EQ(self, e: E.EQ) -> ir.Value:
        return self._cmp("==", self.expr(e.a), self.expr(e.b), e.a.dtype)

    def expr_NE(self, e: E.NE) -> ir.Value:
        return self._cmp("!=", self.expr(e.a), self.expr(e.b), e.a.dtype)

    def expr_LT(self, e: E.LT) -> ir.Value:
        return self._cmp("<", self.expr(e.a), self.expr(e.b), e.a.dtype)

    def expr_LE(self, e: E.LE) -> ir.Value:
        return self._cmp("<=", self.expr(e.a), self.expr(e.b), e.a.dtype)

    def expr_And(self, e: E.And) -> ir.Value:
        return self.builder.and_(self.expr(e.a), self.expr(e.b))

    def expr_Or(self, e: E.Or) -> ir.Value:
        return self.builder.or_(self.expr(e.a), self.expr(e.b))

    def expr_Not(self, e: E.Not) -> ir.Value:
        return self.builder.not_(self.expr(e.a))

    def expr_Select(self, e: E.Select) -> ir.Value:
        if e.dtype.lanes == 1 and (_has_load(e.true_value) or _has_load(e.false_value)):
            # Evaluate only the chosen branch: its loads may be out of bounds otherwise.
            cond = self.expr(e.condition)
            t_bb = self.function.append_basic_block(self.fresh("sel_t"))
            f_bb = self.function.append_basic_block(self.fresh("sel_f"))
            end = self.function.append_basic_block(self.fresh("sel_end"))
            self.builder.cbranch(cond, t_bb, f_bb)
            self.builder.position_at_end(t_bb)
            tv = self.expr(e.true_value)
            t_end = self.builder.block
            self.builder.branch(end)
            self.builder.position_at_end(f_bb)
            fv = self.expr(e.false_value)
            f_end = self.builder.block
            self.builder.branch(end)
            self.builder.position_at_end(end)
            phi = self.builder.phi(tv.type)
            phi.add_incoming(tv, t_end)
            phi.add_incoming(fv, f_end)
            return phi
        return self.builder.select(self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value))

    def expr_Cast(self, e: E.Cast) -> ir.Value:
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def convert(self, v: ir.Value, src: DataType, dst: DataType) -> ir.Value:
        """Convert value ``v`` from ``src`` to ``dst`` (C rules; bool is 0/1)."""
        b = self.builder
        lanes = dst.lanes
        dty = self.value_type(dst.with_lanes(lanes))
        if src.element_of() == dst.element_of():
            return v
        if src.is_lowp_float or dst.is_lowp_float:
            raise CodegenError(
                f"no conversion from {src} to {dst}: 8- and 4-bit float formats are converted by "
                "ember.ops.lowp (reinterpret the bits), not by a cast"
            )
        if dst.is_bool:
            zero = ir.Constant(v.type, None)
            return b.fcmp_unordered("!=", v, zero) if src.is_float else b.icmp_unsigned("!=", v, zero)
        if src.is_bool:
            return b.uitofp(v, dty) if dst.is_float else b.zext(v, dty)
        if src.is_float and dst.is_float:
            sty, tty = self.scalar_type(src), self.scalar_type(dst)
            if sty == tty:
                out = v
            elif _fbits(sty) < _fbits(tty):
                out = b.fpext(v, dty)
            else:
                out = b.fptrunc(v, dty)
            return self._round(dst, out) if dst.kind == "bfloat" else out
        if src.is_float:
            return b.fptoui(v, dty) if dst.kind == "uint" else b.fptosi(v, dty)
        if dst.is_float:
            out = b.uitofp(v, dty) if src.kind == "uint" else b.sitofp(v, dty)
            return self._round(dst, out) if dst.kind == "bfloat" else out
        if src.bits == dst.bits:
            return v
        if src.bits > dst.bits:
            return b.trunc(v, dty)
        return b.zext(v, dty) if src.kind == "uint" else b.sext(v, dty)

    def _round(self, t: DataType, v: ir.Value) -> ir.Value:
        """For bfloat16 values (computed as float): round to bfloat16 precision."""
        if t.kind != "bfloat":
            return v
        bits16 = self._f32_to_bf16_bits(v, t.lanes)
        return self._from_memory(t, bits16)

    def expr_Ramp(self, e: E.Ramp) -> ir.Value:
        base = self.expr(e.base)
        stride = self.expr(e.stride)
        vt = ir.VectorType(base.type, e.lanes)
        vb = self._broadcast(base, e.lanes)
        vs = self._broadcast(stride, e.lanes)
        offsets = ir.Constant(vt, [ir.Constant(base.type, k) for k in range(e.lanes)])
        return self.builder.add(vb, self.builder.mul(vs, offsets))

    def _broadcast(self, v: ir.Value, lanes: int) -> ir.Value:
        vt = ir.VectorType(v.type, lanes)
        undef = ir.Constant(vt, ir.Undefined)
        one = self.builder.insert_element(undef, v, ir.Constant(I32, 0))
        mask = ir.Constant(ir.VectorType(I32, lanes), [ir.Constant(I32, 0)] * lanes)
        return self.builder.shuffle_vector(one, undef, mask)

    def expr_Broadcast(self, e: E.Broadcast) -> ir.Value:
        return self._broadcast(self.expr(e.value), e.lanes)

    def expr_BufferLoad(self, e: E.BufferLoad) -> ir.Value:
        buf = e.buffer
        index = e.indices[0]
        lanes = e.dtype.lanes
        if lanes == 1:
            return self.load_scalar(buf.dtype, self.element_ptr(buf, self.expr(index)))
        if isinstance(index, E.Ramp) and _is_one(index.stride):
            return self.load_vector(buf.dtype, self.element_ptr(buf, self.expr(index.base)), lanes)
        stride = index.stride.value if isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm) else 0
        if 2 <= stride <= MAX_SHUFFLED_STRIDE:
            # Every stride-th element: one load of exactly the span the lanes cover (nothing
            # outside it is read) and a shuffle that keeps the lanes, instead of one load per lane.
            span = (lanes - 1) * stride + 1
            wide = self.load_vector(buf.dtype, self.element_ptr(buf, self.expr(index.base)), span)
            mask = ir.Constant(ir.VectorType(I32, lanes), [ir.Constant(I32, k * stride) for k in range(lanes)])
            return self.builder.shuffle_vector(wide, ir.Constant(wide.type, ir.Undefined), mask)
        idx = self.expr(index)
        out = ir.Constant(self.value_type(e.dtype), ir.Undefined)
        for k in range(lanes):
            lane = self.builder.extract_element(idx, ir.Constant(I32, k))
            v = self.load_scalar(buf.dtype, self.element_ptr(buf, lane))
            out = self.builder.insert_element(out, v, ir.Constant(I32, k))
        return out

    def expr_Call(self, e: E.Call) -> ir.Value:
        if e.op == "reinterpret":
            return self.reinterpret(e)
        args = [self.expr(a) for a in e.args]
        return self.math_call(e.op, args, e.dtype, [a.dtype for a in e.args])

    def reinterpret(self, e: E.Call) -> ir.Value:
        """``reinterpret(x)``: the bits of ``x`` as type ``e.dtype`` of the same width (float32 and
        uint32, float64 and uint64, a float8/float4 format and uint8)."""
        (x,) = e.args
        src, dst = x.dtype, e.dtype
        width = {t: 8 if t.is_lowp_float else t.bits for t in (src, dst)}
        if width[src] != width[dst] or src.lanes != dst.lanes or src.kind == "bfloat" or dst.kind == "bfloat" \
                or src.is_bool or dst.is_bool or src.is_subbyte_int or dst.is_subbyte_int:
            raise CodegenError(f"reinterpret of {src} as {dst}: the types must have the same width in bits")
        v = self.expr(x)
        ty = self.value_type(dst)
        return v if v.type == ty else self.builder.bitcast(v, ty)

    # -- math ---------------------------------------------------------------------------------------
    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Declare (once) the function ``name`` with the given types."""
        key = (name, str(ir.FunctionType(ret, args)))
        fn = self._intrinsics.get(key)
        if fn is None:
            try:
                fn = self.module.get_global(name)
            except KeyError:
                fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
            self._intrinsics[key] = fn
        return fn

    def llvm_intrinsic(self, base: str, args: list[ir.Value]) -> ir.Value:
        """Call ``llvm.<base>.<type suffix>`` (``llvm.sqrt.f32``, ``llvm.exp.v8f32``)."""
        ty = args[0].type
        return self.builder.call(self.intrinsic(f"llvm.{base}.{_suffix(ty)}", ty, [a.type for a in args]), args)

    def math_call(self, op: str, args: list[ir.Value], t: DataType, arg_types: list[DataType]) -> ir.Value:
        """The value of math function ``op``. Computes half and bfloat16 in float32."""
        src = arg_types[0] if arg_types else t
        if src.is_float and src.bits == 16 and op not in ("abs",):
            wide = src.element_of().__class__("float", 32, src.lanes)
            args32 = [self.convert(a, at, wide) for a, at in zip(args, arg_types)]
            out = self.math_f32_or_f64(op, args32, t if t.is_bool else wide)
            return out if t.is_bool else self.convert(out, wide, t)
        return self.math_f32_or_f64(op, args, t)

    LLVM_UNARY = {
        "exp": "exp",
        "exp2": "exp2",
        "log": "log",
        "log2": "log2",
        "log10": "log10",
        "sqrt": "sqrt",
        "sin": "sin",
        "cos": "cos",
        "floor": "floor",
        "ceil": "ceil",
        "trunc": "trunc",
        "round": "roundeven",
        "abs": "fabs",
        "tan": "tan",
        "exp10": "exp10",
    }
    LIBM_UNARY = ("tanh", "erf", "expm1", "log1p", "atan", "asin", "acos", "sinh", "cosh")

    def math_f32_or_f64(self, op: str, args: list[ir.Value], t: DataType) -> ir.Value:
        """Math on float32/float64 (scalars or vectors). CPU: LLVM intrinsics and libm."""
        b = self.builder
        x = args[0]
        if op == "abs" and t.is_int:
            neg = b.sub(ir.Constant(x.type, None), x)
            return b.select(b.icmp_signed("<", x, ir.Constant(x.type, None)), neg, x)
        if op in self.LLVM_UNARY:
            return self.llvm_intrinsic(self.LLVM_UNARY[op], [x])
        if op == "pow":
            return self.llvm_intrinsic("pow", args)
        if op == "fmod":
            return b.frem(args[0], args[1])
        if op == "rsqrt":
            return b.fdiv(self._fconst(x.type, 1.0), self.llvm_intrinsic("sqrt", [x]))
        if op == "sigmoid":
            e = self.math_f32_or_f64("exp", [b.fneg(x)], t)
            return b.fdiv(self._fconst(x.type, 1.0), b.fadd(self._fconst(x.type, 1.0), e))
        if op == "isnan":
            return b.fcmp_unordered("uno", x, x)
        if op == "isinf":
            return b.fcmp_ordered("==", self.llvm_intrinsic("fabs", [x]), self._fconst(x.type, math.inf))
        if op == "isfinite":
            return b.fcmp_ordered("<", self.llvm_intrinsic("fabs", [x]), self._fconst(x.type, math.inf))
        if op in self.LIBM_UNARY:
            return self.libm_call(op, x)
        raise CodegenError(f"math function {op} is not supported on target {self.target.kind}")

    def libm_call(self, op: str, x: ir.Value) -> ir.Value:
        """Call libm's ``op`` (``tanhf``/``tanh``), lane by lane for vectors."""
        scalar = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        name = op + ("f" if scalar == F32 else "")
        fn = self.intrinsic(name, scalar, [scalar])
        if not isinstance(x.type, ir.VectorType):
            return self.builder.call(fn, [x])
        out = ir.Constant(x.type, ir.Undefined)
        for k in range(x.type.count):
            lane = self.builder.extract_element(x, ir.Constant(I32, k))
            out = self.builder.insert_element(out, self.builder.call(fn, [lane]), ir.Constant(I32, k))
        return out

    def _fconst(self, ty: ir.Type, value: float) -> ir.Value:
        if isinstance(ty, ir.VectorType):
            return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
        return ir.Constant(ty, value)


def _fbits(t: ir.Type) -> int:
    return {F16: 16, F32: 32, F64: 64}.get(t, 32)


def _suffix(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_suffix(t.element)}"
    if t == F32:
        return "f32"
    if t == F64:
        return "f64"
    if t == F16:
        return "f16"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    raise CodegenError(f"no intrinsic suffix for LLVM type {t}")


# Strided vector loads up to this stride are one contiguous load and a shuffle (a stride-2
# convolution reads every other input element); wider strides load lane by lane.
MAX_SHUFFLED_STRIDE = 4


def _is_one(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 1


def _has_load(e: E.PrimExpr) -> bool:
    found: list[int] = []
    post_order_visit(e, lambda n: found.append(1) if isinstance(n, E.BufferLoad) else None)
    return bool(found)


def _round_bf16(value: float) -> float:
    import numpy as np

    bits = np.array([value], dtype=np.float32).view(np.uint32)[0]
    if np.isnan(value):
        return value
    rounded = (int(bits) + 0x7FFF + ((int(bits) >> 16) & 1)) & 0xFFFF0000
    return float(np.array([rounded], dtype=np.uint32).view(np.float32)[0])


def _divides_loop_var(var: E.Var, body: S.Stmt) -> bool:
    """True when ``body`` divides (or takes the remainder of) an integer expression of loop
    variable ``var`` by a constant power of two (``floordiv``, ``floormod``, ``truncdiv``,
    ``truncmod``; LLVM turns them into masks and shifts of the induction variable): the loops
    LLVM's loop vectorizer must not touch (see :meth:`CodeGenLLVM._no_vectorize_loop_id`).
    Other divisors become multiply-high sequences, which it vectorizes correctly."""
    found = False

    def visit(node: object) -> None:
        nonlocal found
        if found or not isinstance(node, (E.FloorMod, E.FloorDiv, E.Mod, E.Div)) or node.dtype.is_float:
            return
        d = E.const_int_value(node.b)
        if d is None or d <= 1 or d & (d - 1):
            return
        if any(v is var for v in free_vars(node.a)):
            found = True

    post_order_visit(body, visit)
    return found
