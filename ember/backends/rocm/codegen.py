"""AMD code generation: loop IR → LLVM AMDGPU → object → ``ld.lld -shared`` → HSA code object.

Kernels use the ``amdgpu_kernel`` calling convention and carry
``amdgpu-flat-work-group-size="1,<block size>"``; global pointers are in address space 1, shared
buffers (LDS) in 3, the stack (``"local"`` buffers) in 5, and the explicit arguments are laid out
in the kernarg segment at their natural alignment (``runtime/rocm.py`` packs them the same way;
the metadata LLVM writes into the code object lists the same offsets). The code object is ABI
version 5. Wave64 on gfx9 parts, wave32 on gfx10 and newer unless ``-mattr=+wavefrontsize64``.

Math comes from the ROCm device libraries (``ocml.bc``) when found — ``EMBER_ROCM_DEVICE_LIBS``
(a folder, or ``off``), ``$ROCM_PATH``/``/opt/rocm`` ``/amdgcn/bitcode``, Debian's
``rocm-device-libs`` (``/usr/lib/x86_64-linux-gnu/amdgcn/bitcode``) — with ember defining the
``__oclc_*`` control constants for the chosen gfx target; otherwise from
:class:`~.gpu.FallbackMath` on ``llvm.exp2``/``llvm.log2``/``llvm.sin``/``llvm.cos``, which the
AMDGPU backend implements natively.

The code object is linked by ``ld.lld`` (:mod:`.lld` says where it is looked for: ``EMBER_LLD``,
ROCm, ``ld.lld-NN`` on ``PATH``, the ``ziglang`` wheel of ``ember[rocm]``).
Every AMDGPU emission parses a fresh module (emitting twice from one module aborts LLVM).

Warp-level matrix multiplies (``tc.mma:<name>`` calls from tensorize) become MFMA
(``llvm.amdgcn.mfma.*``, gfx90a/gfx942, wave64) or WMMA (``llvm.amdgcn.wmma.*``, RDNA3, wave32) calls
on the lane's registers; a target without the instruction is a :class:`CodegenError` (LLVM would abort).
"""

from __future__ import annotations

import functools
import glob
import os
from typing import Any

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ...codegen.llvm import F32, I32, _suffix
from ...errors import CodegenError, ToolchainError
from ...ir import expr as E
from ...target import Target
from ...te.tensor_intrin import MatrixIntrinsic, lookup
from ..cpu.codegen import init_llvm, optimize, parse_and_verify
from ..gpu.build import disabled, env_path
from ..gpu.codegen import CodeGenGPU, FallbackMath, finalize_kernels
from .lld import find_lld, link_code_object  # noqa: F401 - find_lld is re-exported (tests, tools)

#: prefix of the loop-IR call of a warp-level matrix multiply (``tc.mma:<intrinsic name>``)
MATRIX_CALL = "tc.mma:"
CODE_OBJECT_VERSION = 500


@functools.cache
def find_device_libs() -> str | None:
    """The folder holding ``ocml.bc``, or None (see the module doc)."""
    env = env_path("EMBER_ROCM_DEVICE_LIBS")
    if disabled(env):
        return None
    cands = [env] if env else []
    for root in (os.environ.get("ROCM_PATH", ""), "/opt/rocm"):
        if root:
            cands += [os.path.join(root, "amdgcn", "bitcode"), os.path.join(root, "lib", "llvm", "lib", "clang")]
    cands += sorted(glob.glob("/opt/rocm-*/amdgcn/bitcode"), reverse=True)
    cands += ["/usr/lib/x86_64-linux-gnu/amdgcn/bitcode", "/usr/lib/aarch64-linux-gnu/amdgcn/bitcode",
              "/usr/share/amdgcn/bitcode"]
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "ocml.bc")):
            return c
    return None


def isa_version(mcpu: str) -> int:
    """``__oclc_ISA_version`` of a gfx target: gfx942 → 9402, gfx90a → 9010, gfx1100 → 11000."""
    digits = mcpu[3:]
    major = digits[:-2]
    return int(major) * 1000 + int(digits[-2], 16) * 100 + int(digits[-1], 16)


class CodeGenAMDGPU(CodeGenGPU, FallbackMath):
    """AMDGPU kernels (see module doc)."""

    kernel_cc = "amdgpu_kernel"
    global_addrspace = 1
    shared_addrspace = 3
    static_shared_limit = 64 * 1024

    def __init__(self, target: Target, module_name: str = "ember", device_libs: str | None = None):
        super().__init__(target, module_name)
        self.device_libs = device_libs
        self.uses_ocml = False
        self.module.data_layout = str(_target_machine(target).target_data)

    def alloca_pointer_type(self, buf: Any) -> ir.Type:
        return ir.PointerType(addrspace=5)

    def alloca(self, elem: ir.Type, count: int, name: str, ptr_type: ir.Type = None) -> ir.Value:  # type: ignore[assignment]
        """An ``alloca`` in the private address space 5 (what the AMDGPU data layout requires)."""
        inst = _PrivateAlloca(self.builder.block, elem, ir.Constant(ir.IntType(64), count) if count != 1 else None,
                              self.module.get_unique_name(name))
        inst.align = 64
        inst.type = ir.PointerType(addrspace=5)
        self.builder._insert(inst)
        return inst

    def kernel_attributes(self, k: Any) -> dict[str, str]:
        n = k.block[0] * k.block[1] * k.block[2]
        return {"amdgpu-flat-work-group-size": f"1,{n}", "uniform-work-group-size": "true"}

    def read_index(self, tag: str) -> ir.Value:
        kind, axis = tag.split(".")
        name = {"threadIdx": "workitem", "blockIdx": "workgroup"}[kind]
        return self.builder.call(self.intrinsic(f"llvm.amdgcn.{name}.id.{axis}", I32, []), [])

    def barrier(self) -> None:
        b = self.builder
        b.fence("release", "workgroup")
        b.call(self.intrinsic("llvm.amdgcn.s.barrier", ir.VoidType(), []), [])
        b.fence("acquire", "workgroup")

    def lane_id(self) -> ir.Value:
        b = self.builder
        mbcnt_lo = self.intrinsic("llvm.amdgcn.mbcnt.lo", I32, [I32, I32])
        lo = b.call(mbcnt_lo, [ir.Constant(I32, -1), ir.Constant(I32, 0)])
        if self.target.warp_size == 32:
            return lo
        return b.call(self.intrinsic("llvm.amdgcn.mbcnt.hi", I32, [I32, I32]), [ir.Constant(I32, -1), lo])

    def shfl_xor_i32(self, value: ir.Value, offset: int) -> ir.Value:
        b = self.builder
        src = b.xor(self.lane_id(), ir.Constant(I32, offset))
        addr = b.shl(src, ir.Constant(I32, 2))
        return b.call(self.intrinsic("llvm.amdgcn.ds.bpermute", I32, [I32, I32]), [addr, value])

    def hw_exp2(self, x: ir.Value) -> ir.Value:
        return self.llvm_intrinsic("exp2", [x])

    def hw_log2(self, x: ir.Value) -> ir.Value:
        return self.llvm_intrinsic("log2", [x])

    def hw_sin(self, x: ir.Value) -> ir.Value:
        return self.llvm_intrinsic("sin", [x])

    def hw_cos(self, x: ir.Value) -> ir.Value:
        return self.llvm_intrinsic("cos", [x])

    def library_function(self, op: str, scalar: ir.Type) -> str | None:
        if not self.device_libs:
            return None
        self.uses_ocml = True
        return f"__ocml_{op}_{'f32' if scalar == F32 else 'f64'}"

    # -- matrix cores ----------------------------------------------------------------------------------
    def matrix_call(self, e: E.Call) -> ir.Value:
        if not e.op.startswith(MATRIX_CALL):
            return super().matrix_call(e)
        self.matrix_multiply(e)
        return ir.Constant(I32, 0)

    def matrix_intrinsic(self, name: str) -> MatrixIntrinsic:
        """The AMD matrix instruction ``name`` if this target has it, else :class:`CodegenError`."""
        try:
            intrin = lookup(name)
        except KeyError as exc:
            raise CodegenError(f"{MATRIX_CALL}{name}: {exc.args[0]}") from None
        why = intrin.unavailable(self.target)
        if why is None and intrin.warp != self.target.warp_size:
            why = (f"{intrin.name} is written for wave{intrin.warp} and the target runs wave{self.target.warp_size} "
                   f"(-mattr={self.target.mattr})")
        if why is not None:
            raise CodegenError(f"{intrin.instruction} ({intrin.name}) cannot be emitted for {self.target}: {why}")
        return intrin

    def matrix_multiply(self, e: E.Call) -> None:
        """``tc.mma:<name>(acc, a, b)``: every lane loads its registers from the addresses of the
        three element loads (``acc``: ``c.per_lane`` accumulator elements, ``a``/``b``: ``per_lane``
        input elements, contiguous), calls the MFMA or WMMA intrinsic, and stores the result over
        ``acc`` (see :mod:`ember.te.tensor_intrin` for the layouts)."""
        intrin = self.matrix_intrinsic(e.op[len(MATRIX_CALL):])
        if len(e.args) != 3:
            raise CodegenError(f"{e.op} takes three operands (acc, a, b), got {len(e.args)}")
        want = (intrin.accumulator_type, intrin.input_type, intrin.input_type)
        regs = []
        for role, arg, t, lay in zip("cab", e.args, want, (intrin.c, intrin.a, intrin.b)):
            ptr = self.operand_ptr(arg)
            assert isinstance(arg, E.BufferLoad)  # operand_ptr raised otherwise
            if arg.buffer.dtype != t:
                raise CodegenError(f"{e.op}: operand {role} is buffer {arg.buffer.name} of {arg.buffer.dtype}, "
                                   f"the instruction takes {t}")
            # bfloat16 stays in its i16 memory form: the bf16 intrinsics take <N x i16>
            v = self.builder.load(ptr, typ=ir.VectorType(self.memory_type(t), lay.per_lane))
            v.align = max(1, t.bits // 8)
            regs.append((ptr, v))
        (acc_ptr, c), (_, av), (_, bv) = regs
        name = intrin.instruction
        args: list[ir.Value] = [av, bv, c]
        if name.startswith("llvm.amdgcn.mfma."):
            args += [ir.Constant(I32, 0)] * 3  # cbsz, abid, blgp: no broadcast, no lane-group pattern
        elif name.startswith("llvm.amdgcn.wmma."):
            name += f".{_suffix(c.type)}.{_suffix(av.type)}"  # overloaded on the C/D and A/B types
        else:
            raise CodegenError(f"{intrin.name}: the ROCm backend does not know the LLVM intrinsic {name}")
        d = self.builder.call(self.intrinsic(name, c.type, [x.type for x in args]), args)
        st = self.builder.store(d, acc_ptr)
        st.align = max(1, intrin.accumulator_type.bits // 8)


class _PrivateAlloca(ir.instructions.AllocaInstr):
    def descr(self, buf: list[str]) -> None:
        super().descr(buf)
        buf.append(", addrspace(5)")


def _target_machine(tgt: Target) -> Any:
    init_llvm()
    t = llvm.Target.from_triple(tgt.triple)
    return t.create_target_machine(cpu=tgt.mcpu, features=tgt.opt("mattr"), opt=3, reloc="pic")


def _control_constants(tgt: Target) -> str:
    """The ``__oclc_*`` constants ocml reads, for ``tgt`` (IEEE behaviour, no fast-math)."""
    w64 = 1 if tgt.warp_size == 64 else 0
    consts = [("__oclc_finite_only_opt", "i8", 0), ("__oclc_unsafe_math_opt", "i8", 0), ("__oclc_daz_opt", "i8", 0),
              ("__oclc_correctly_rounded_sqrt32", "i8", 1), ("__oclc_wavefrontsize64", "i8", w64),
              ("__oclc_ISA_version", "i32", isa_version(tgt.mcpu)), ("__oclc_ABI_version", "i32", CODE_OBJECT_VERSION)]
    return "\n".join(f"@{n} = linkonce_odr hidden local_unnamed_addr addrspace(4) constant {t} {v}, "
                     f"align {4 if t == 'i32' else 1}"
                     for n, t, v in consts)


@functools.lru_cache(maxsize=8)
def _bitcode(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class AMDGPUCompiler:
    """Turns an AMDGPU code generator's module into an HSA code object."""

    def __init__(self) -> None:
        self.device_libs = find_device_libs()

    def fingerprint(self) -> str:
        return f"device_libs={self.device_libs} cov={CODE_OBJECT_VERSION}"

    def codegen(self, tgt: Target) -> CodeGenAMDGPU:
        return CodeGenAMDGPU(tgt, "ember_rocm", self.device_libs)

    def compile(self, cg: CodeGenAMDGPU) -> dict[str, Any]:
        """The kernels of ``cg`` as a linked HSA code object, with the optimized LLVM IR."""
        obj, llvm_text = self.relocatable(cg)
        return {"binary": link_code_object(obj), "llvm": llvm_text, "format": "hsaco", "extra": {}}

    def relocatable(self, cg: CodeGenAMDGPU) -> tuple[bytes, str]:
        """The kernels of ``cg`` as an AMDGPU relocatable object (before linking), and the
        optimized LLVM IR it was emitted from (device libraries linked in)."""
        tgt = cg.target
        tm = _target_machine(tgt)
        text = finalize_kernels(str(cg.module), cg.kernel_attrs)
        text += ('!llvm.module.flags = !{!9900}\n'
                 f'!9900 = !{{i32 1, !"amdhsa_code_object_version", i32 {CODE_OBJECT_VERSION}}}\n')
        if cg.uses_ocml:
            text += _control_constants(tgt) + "\n"
        mod = parse_and_verify(text, "the ROCm kernels")
        kernels = {k.name for k in cg.kernels}
        if cg.uses_ocml and self.device_libs:
            for name in ("ocml.bc", "ockl.bc"):
                path = os.path.join(self.device_libs, name)
                if not os.path.isfile(path):
                    continue
                try:
                    lib = llvm.parse_bitcode(_bitcode(path))
                except RuntimeError as exc:
                    raise ToolchainError(f"{path} could not be read by LLVM: {exc}; set EMBER_ROCM_DEVICE_LIBS=off "
                                         "to use ember's own math") from exc
                lib.triple = tgt.triple
                lib.data_layout = str(tm.target_data)
                mod.link_in(lib)
        for f in mod.functions:
            if not f.is_declaration and f.name not in kernels:
                f.linkage = "internal"
        try:
            mod.verify()
        except RuntimeError as exc:
            raise CodegenError(f"the linked ROCm module does not verify: {exc}") from exc
        optimize(mod, tm, 3)
        llvm_text = str(mod)
        undefined = [f.name for f in mod.functions if f.is_declaration and not f.name.startswith("llvm.")]
        if undefined:
            raise CodegenError(f"the ROCm kernels call functions that nothing defines: {', '.join(undefined)}")
        obj = _target_machine(tgt).emit_object(parse_and_verify(llvm_text, "the optimized ROCm kernels"))
        return obj, llvm_text

    @staticmethod
    def sources(meta: dict[str, Any], parts: dict[str, bytes]) -> dict[str, Any]:
        """The device module's text formats from its parts: LLVM IR and AMDGPU assembly
        (generated from the IR on first request)."""
        llvm_text = parts.get("module.ll", b"").decode("utf-8", "replace")
        target = str(meta.get("target", "rocm"))

        @functools.lru_cache(maxsize=1)
        def asm() -> str:
            return _target_machine(Target(target)).emit_assembly(parse_and_verify(llvm_text, "the ROCm kernels"))

        return {"llvm": lambda: llvm_text, "asm": asm}
