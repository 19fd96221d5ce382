"""NVIDIA code generation: loop IR → LLVM NVPTX → PTX (and a cubin when ``ptxas`` is present).

Kernels use the ``ptx_kernel`` calling convention, carry ``nvvm.maxntid`` (the block size they
are compiled for), take global pointers in address space 1 and put shared buffers in address
space 3. Math functions come from libdevice (the CUDA toolkit's ``libdevice.10.bc``, linked
with llvmlite and internalized) when it is found, else from :class:`~.gpu.FallbackMath` on
the hardware's ``ex2.approx``/``lg2.approx``/``sin.approx``/``cos.approx``; LLVM's libm
intrinsics (``llvm.exp.f32``...), which abort on NVPTX, are never emitted.

Where libdevice is looked for, first hit wins: ``EMBER_LIBDEVICE`` (a file, or ``off``);
``$CUDA_HOME``/``$CUDA_PATH``/``/usr/local/cuda``/``/usr/local/cuda-*`` ``/nvvm/libdevice``; the
``nvidia-cuda-nvcc`` wheel (``site-packages/nvidia/cuda_nvcc/nvvm/libdevice``, also ``nvidia/cu13``).
``ptxas`` is looked for in ``EMBER_PTXAS`` (a file, or ``off``), ``PATH``, then the same CUDA
directories; with it the module loads a cubin, without it PTX that the driver compiles.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import tempfile
from typing import Any

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ...codegen.llvm import F32, I32
from ...errors import CodegenError, ToolchainError
from ...ir import expr as E
from ...target import Target
from ..cpu.codegen import init_llvm, optimize, parse_and_verify
from ..gpu.build import disabled, env_path
from ..gpu.codegen import CodeGenGPU, FallbackMath, finalize_kernels


def _cuda_roots() -> list[str]:
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    roots += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    roots += ["/usr/lib/nvidia-cuda-toolkit", "/opt/cuda"]
    return [r for r in roots if r]


def _wheel_dirs() -> list[str]:
    out = []
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
        for base in list(spec.submodule_search_locations or []) if spec else []:
            out += [os.path.join(base, "cuda_nvcc"), os.path.join(base, "cu13"), os.path.join(base, "cu12")]
    except (ImportError, ValueError):
        pass
    return out


@functools.cache
def find_libdevice(explicit: str | None = None) -> str | None:
    """The path of ``libdevice.10.bc``, or None (see the module doc for the search order)."""
    env = explicit or env_path("EMBER_LIBDEVICE")
    if disabled(env):
        return None
    if env:
        if not os.path.isfile(env):
            raise ToolchainError(f"EMBER_LIBDEVICE={env} is not a file: point it at libdevice.10.bc or set it to off")
        return env
    for root in _cuda_roots() + _wheel_dirs():
        for cand in glob.glob(os.path.join(root, "nvvm", "libdevice", "libdevice*.bc")):
            return cand
    return None


@functools.cache
def find_ptxas() -> str | None:
    """The ``ptxas`` to make cubins with, or None (``EMBER_PTXAS=off`` disables it)."""
    env = env_path("EMBER_PTXAS")
    if disabled(env):
        return None
    if env:
        return env if os.path.isfile(env) else None
    found = shutil.which("ptxas")
    if found:
        return found
    for root in _cuda_roots() + _wheel_dirs():
        cand = os.path.join(root, "bin", "ptxas")
        if os.path.isfile(cand):
            return cand
    return None


@functools.lru_cache(maxsize=4)
def _libdevice_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class CodeGenNVPTX(CodeGenGPU, FallbackMath):
    """NVPTX kernels (see module doc)."""

    kernel_cc = "ptx_kernel"
    global_addrspace = 1
    shared_addrspace = 3
    static_shared_limit = 48 * 1024

    def __init__(self, target: Target, module_name: str = "ember", libdevice: str | None = None):
        super().__init__(target, module_name)
        self.libdevice = libdevice
        self.uses_libdevice = False
        #: set when a kernel uses an sm_90a-only instruction (wgmma): the module is assembled for sm_90a
        self.needs_sm90a = False

    def kernel_attributes(self, k: Any) -> dict[str, str]:
        attrs = {"nvvm.maxntid": ",".join(str(d) for d in k.block)}
        if tuple(k.cluster) != (1, 1, 1):  # PTX .reqnctapercluster: a plain launch then forms the clusters
            attrs["nvvm.cluster_dim"] = ",".join(str(d) for d in k.cluster)
        return attrs

    def read_index(self, tag: str) -> ir.Value:
        kind, axis = tag.split(".")
        reg = {"threadIdx": "tid", "blockIdx": "ctaid"}[kind]
        fn = self.intrinsic(f"llvm.nvvm.read.ptx.sreg.{reg}.{axis}", I32, [])
        return self.builder.call(fn, [])

    def barrier(self) -> None:
        self.builder.call(self.intrinsic("llvm.nvvm.barrier0", ir.VoidType(), []), [])

    def shfl_xor_i32(self, value: ir.Value, offset: int) -> ir.Value:
        mask = self.builder.call(self.intrinsic("llvm.nvvm.activemask", I32, []), [])
        fn = self.intrinsic("llvm.nvvm.shfl.sync.bfly.i32", I32, [I32, I32, I32, I32])
        return self.builder.call(fn, [mask, value, ir.Constant(I32, offset), ir.Constant(I32, 0x1F)])

    # -- tensor cores -------------------------------------------------------------------------------------
    def matrix_call(self, e: Any) -> ir.Value:
        """``tc.mma:<name>`` as the ``mma.sync`` instruction (inline PTX; LLVM's NVVM mma
        intrinsics take the same registers but are spelled per shape and type), and
        ``tc.ldmatrix:x<N>[.trans]`` as ``ldmatrix.sync.aligned.m8n8``."""
        from ...te.tensor_intrin import lookup

        b = self.builder
        if e.op.startswith("tc.mma:"):
            try:
                intrin = lookup(e.op[len("tc.mma:"):])
            except KeyError as err:
                raise CodegenError(str(err.args[0])) from None
            why = intrin.unavailable(self.target)
            if why:
                raise CodegenError(why)
            acc, pa, pb = (self.operand_ptr(x) for x in e.args)
            acc_ty = F32 if intrin.accumulator_type.is_float else I32
            in_bits = intrin.input_type.bits
            na = intrin.a.per_lane * in_bits // 32
            nb = intrin.b.per_lane * in_bits // 32
            nc = intrin.c.per_lane
            a = self.load_words(pa, na)
            bw = self.load_words(pb, nb)
            c = self.load_words(acc, nc, acc_ty)
            cons = "f" if acc_ty == F32 else "r"

            def regs(first: int, n: int) -> str:
                return "{" + ",".join(f"${first + i}" for i in range(n)) + "}"

            text = (f"{intrin.instruction} {regs(0, nc)}, {regs(nc, na)}, {regs(nc + na, nb)}, "
                    f"{regs(nc + na + nb, nc)};")
            constraint = ",".join([f"={cons}"] * nc + ["r"] * (na + nb) + [cons] * nc)
            fty = ir.FunctionType(ir.LiteralStructType([acc_ty] * nc), [I32] * (na + nb) + [acc_ty] * nc)
            res = b.call(ir.InlineAsm(fty, text, constraint, side_effect=False), [*a, *bw, *c])
            self.store_words(acc, [b.extract_value(res, i) for i in range(nc)])
            return ir.Constant(I32, 0)
        if e.op.startswith("tc.ldmatrix:"):
            mode = e.op[len("tc.ldmatrix:"):]
            count = int(mode[1])
            trans = ".trans" if mode.endswith(".trans") else ""
            dst = self.operand_ptr(e.args[0])
            src = self.operand_ptr(e.args[1])
            addr = b.ptrtoint(src, ir.IntType(64))
            text = (f"ldmatrix.sync.aligned.m8n8.x{count}{trans}.shared.b16 "
                    "{" + ",".join(f"${i}" for i in range(count)) + "}, [$" + str(count) + "];")
            fty = ir.FunctionType(ir.LiteralStructType([I32] * count), [ir.IntType(64)])
            res = b.call(ir.InlineAsm(fty, text, ",".join(["=r"] * count + ["l"]), side_effect=True), [addr])
            self.store_words(dst, [b.extract_value(res, i) for i in range(count)])
            return ir.Constant(I32, 0)
        if e.op.startswith("tc.cp_async:"):
            nbytes = int(e.op[len("tc.cp_async:"):])
            dst_ref, src_ref, size = e.args
            assert isinstance(src_ref, E.BufferLoad)
            dst = b.ptrtoint(self.operand_ptr(dst_ref), ir.IntType(64))
            src = b.ptrtoint(self.operand_ptr(src_ref), ir.IntType(64))
            self._note_vector(src_ref.buffer)
            cache = "cg" if nbytes == 16 else "ca"
            fty = ir.FunctionType(ir.VoidType(), [ir.IntType(64), ir.IntType(64), I32])
            asm = ir.InlineAsm(fty, f"cp.async.{cache}.shared.global [$0], [$1], {nbytes}, $2;", "l,l,r,~{memory}",
                               side_effect=True)
            b.call(asm, [dst, src, self._int_cast(self.expr(size), I32)])
            return ir.Constant(I32, 0)
        if e.op.startswith(("tc.wgmma", "tc.fence_proxy_async", "tc.shared_addr", "tc.mbar", "tc.cp_async_mbar",
                            "tc.tma", "tc.cluster", "tc.bulk_", "tc.named_barrier", "tc.setmaxnreg",
                            "tc.splitk_ticket", "tc.bar_or", "tc.fence_gpu")):
            return self._hopper_call(e)
        if e.op == "tc.cp_async_commit":
            b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "cp.async.commit_group;", "~{memory}",
                                side_effect=True), [])
            return ir.Constant(I32, 0)
        if e.op.startswith("tc.cp_async_wait:"):
            n = int(e.op[len("tc.cp_async_wait:"):])
            b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), f"cp.async.wait_group {n};", "~{memory}",
                                side_effect=True), [])
            return ir.Constant(I32, 0)
        return super().matrix_call(e)

    def _void_asm(self, text: str) -> ir.Value:
        self.builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True), [])
        return ir.Constant(I32, 0)

    def _hopper_call(self, e: Any) -> ir.Value:
        """The sm_90 calls of :mod:`ember.lowering.wgmma`: ``tc.wgmma:m64n<N>k16.<f16|bf16>.t<0|1>``
        (accumulator, A descriptor, B descriptor; ``t1``: B is N-major), ``tc.wgmma_desc:<lbo>:<sbo>``
        (a 128-byte-swizzled shared-memory matrix descriptor of an element's address),
        ``tc.shared_addr`` (an element's shared-memory address), ``tc.wgmma_fence``,
        ``tc.wgmma_commit``, ``tc.wgmma_wait:<n>`` and ``tc.fence_proxy_async``; and the mbarrier
        calls of :mod:`ember.lowering.wgmma_ws` (each names the barrier as a shared ``uint64``
        element): ``tc.mbar_init:<count>``, ``tc.mbar_init_fence``, ``tc.mbar_arrive``,
        ``tc.mbar_wait`` (barrier, parity: spins until the phase of that parity completed) and
        ``tc.cp_async_mbar_arrive`` (arrive once this thread's earlier ``cp.async`` copies landed);
        the cluster calls: ``tc.cluster_sync`` (every thread of the cluster's blocks arrives and
        waits, release/acquire), ``tc.mbar_arrive_cluster`` (barrier, block rank: arrive on the
        barrier at the same offset in that block of the cluster; the default release at CTA scope, as
        the data it guards was read by this block's tensor cores, not written) and
        ``tc.tma_prefetch`` (a tensor map: its descriptor is fetched ahead of the first copy),
        ``tc.tma_load_2d_mc:<mask>`` (a TMA load multicast to the cluster's blocks in ``mask``:
        the data and the barrier's completed bytes land at the same offsets in each); the epilogue's
        ``tc.tma_store_2d`` (shared source, tensor map, column, row: a TMA store of one box, in the
        thread's current bulk group), ``tc.bulk_commit``, ``tc.bulk_wait_read:<n>`` (until at most
        ``n`` of the thread's bulk groups have not yet read their shared source), ``tc.bulk_wait:<n>``
        (... not yet completed) and ``tc.named_barrier:<threads>`` (barrier id: ``bar.sync`` of that
        many threads); the serial split-K reduction's ``tc.fence_gpu`` (``fence.acq_rel.gpu``),
        ``tc.splitk_ticket:<parts>`` (a global ``int32`` counter: after a GPU-scope fence, adds one
        and returns 1 when this was the ``parts``-th arrival, which also resets the counter to 0; else
        0) and ``tc.bar_or:<threads>`` (barrier id, value: ``bar.red.or`` of that many threads,
        returns 1 when any thread's value was non-zero)."""
        from ...lowering.wgmma import SWIZZLE_128B

        b = self.builder
        i64 = ir.IntType(64)
        if self.target.mcpu not in ("sm_90", "sm_90a"):
            raise CodegenError(f"{e.op[3:]} needs an sm_90 target (assembled as sm_90a), the target is "
                               f"{self.target.mcpu}; use the mma.sync path")
        self.needs_sm90a = True
        if e.op == "tc.shared_addr":
            return b.trunc(b.ptrtoint(self.operand_ptr(e.args[0]), i64), I32)
        if e.op.startswith("tc.wgmma_desc:"):  # lbo:sbo[:swizzle mode code, 128-byte swizzle when absent]
            lbo, sbo, *sw = (int(x) for x in e.op[len("tc.wgmma_desc:"):].split(":"))
            addr = b.ptrtoint(self.operand_ptr(e.args[0]), i64)
            start = b.lshr(b.and_(addr, ir.Constant(i64, 0x3FFFF)), ir.Constant(i64, 4))
            mode = sw[0] if sw else SWIZZLE_128B
            fixed = ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | (mode & 3) << 62
            return b.or_(start, ir.Constant(i64, fixed))
        if e.op == "tc.wgmma_fence":
            return self._void_asm("wgmma.fence.sync.aligned;")
        if e.op == "tc.wgmma_commit":
            return self._void_asm("wgmma.commit_group.sync.aligned;")
        if e.op.startswith("tc.wgmma_wait:"):
            return self._void_asm(f"wgmma.wait_group.sync.aligned {int(e.op[len('tc.wgmma_wait:'):])};")
        if e.op == "tc.fence_proxy_async":
            return self._void_asm("fence.proxy.async.shared::cta;")
        if e.op == "tc.mbar_init_fence":
            return self._void_asm("fence.mbarrier_init.release.cluster;")
        if e.op == "tc.cluster_sync":
            return self._void_asm("barrier.cluster.arrive.release; barrier.cluster.wait.acquire;")
        if e.op.startswith(("tc.mbar", "tc.cp_async_mbar", "tc.tma")):
            return self._mbarrier_call(e)
        if e.op.startswith(("tc.setmaxnreg_inc:", "tc.setmaxnreg_dec:")):
            head, n = e.op.split(":")
            return self._void_asm(f"setmaxnreg.{head[-3:]}.sync.aligned.u32 {int(n)};")
        if e.op == "tc.bulk_commit":
            return self._void_asm("cp.async.bulk.commit_group;")
        if e.op.startswith(("tc.bulk_wait_read:", "tc.bulk_wait:")):
            head, n = e.op.split(":")
            return self._void_asm(f"cp.async.bulk.wait_group{'.read' if head.endswith('read') else ''} {int(n)};")
        if e.op == "tc.fence_gpu":
            return self._void_asm("fence.acq_rel.gpu;")
        if e.op.startswith("tc.splitk_ticket:"):
            last = int(e.op[len("tc.splitk_ticket:"):]) - 1
            counter = b.ptrtoint(self.operand_ptr(e.args[0]), i64)
            text = ("{ .reg .u32 old; .reg .pred last; fence.acq_rel.gpu; atom.global.add.u32 old, [$1], 1; "
                    f"setp.eq.u32 last, old, {last}; @last st.global.u32 [$1], 0; selp.u32 $0, 1, 0, last; }}")
            return b.call(ir.InlineAsm(ir.FunctionType(I32, [i64]), text, "=r,l,~{memory}", side_effect=True),
                          [counter])
        if e.op.startswith("tc.bar_or:"):
            count = int(e.op[len("tc.bar_or:"):])
            text = ("{ .reg .pred pin, pout; setp.ne.u32 pin, $2, 0; "
                    f"bar.red.or.pred pout, $1, {count}, pin; selp.u32 $0, 1, 0, pout; }}")
            return b.call(ir.InlineAsm(ir.FunctionType(I32, [I32, I32]), text, "=r,r,r,~{memory}", side_effect=True),
                          [self._int_cast(self.expr(e.args[0]), I32), self._int_cast(self.expr(e.args[1]), I32)])
        if e.op.startswith("tc.named_barrier:"):
            count = int(e.op[len("tc.named_barrier:"):])
            fty = ir.FunctionType(ir.VoidType(), [I32])
            b.call(ir.InlineAsm(fty, f"bar.sync $0, {count};", "r,~{memory}", side_effect=True),
                   [self._int_cast(self.expr(e.args[0]), I32)])
            return ir.Constant(I32, 0)
        if e.op.startswith("tc.wgmma:"):
            shape, ty, tb = e.op[len("tc.wgmma:"):].split(".")
            n = int(shape[shape.index("n") + 1:shape.index("k")])
            nc = n // 2
            acc = self.operand_ptr(e.args[0])
            da, db = (self._int_cast(self.expr(x), i64) for x in e.args[1:])
            c = self.load_words(acc, nc, F32)
            regs = "{" + ",".join(f"${i}" for i in range(nc)) + "}"
            trans = "" if ty == "tf32" else f", 0, {tb[1:]}"  # TF32 operands are K-major, no transpose bits
            text = (f"{{ .reg .pred p; setp.ne.b32 p, ${nc + 2}, 0; wgmma.mma_async.sync.aligned.{shape}.f32.{ty}.{ty} "
                    f"{regs}, ${nc}, ${nc + 1}, p, 1, 1{trans}; }}")
            constraint = ",".join(["=f"] * nc + ["l", "l", "r"] + [str(i) for i in range(nc)])
            fty = ir.FunctionType(ir.LiteralStructType([F32] * nc), [i64, i64, I32] + [F32] * nc)
            res = b.call(ir.InlineAsm(fty, text, constraint, side_effect=True), [da, db, ir.Constant(I32, 1), *c])
            self.store_words(acc, [b.extract_value(res, i) for i in range(nc)])
            return ir.Constant(I32, 0)
        raise CodegenError(f"unknown Hopper intrinsic {e.op}")

    def _mbarrier_call(self, e: Any) -> ir.Value:
        b = self.builder
        addr = b.trunc(b.ptrtoint(self.operand_ptr(e.args[0]), ir.IntType(64)), I32)
        if e.op.startswith("tc.mbar_init:"):
            text, args = f"mbarrier.init.shared::cta.b64 [$0], {int(e.op[len('tc.mbar_init:'):])};", [addr]
        elif e.op.startswith("tc.mbar_expect_tx:"):
            nbytes = int(e.op[len("tc.mbar_expect_tx:"):])
            text, args = f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], {nbytes};", [addr]
        elif e.op == "tc.tma_load_2d" or e.op.startswith("tc.tma_load_2d_mc:"):
            # (shared destination, tensor map, column, row, mbarrier)
            tmap = b.ptrtoint(self.operand_ptr(e.args[1]), ir.IntType(64))
            c0, c1 = (self._int_cast(self.expr(x), I32) for x in e.args[2:4])
            mbar = b.trunc(b.ptrtoint(self.operand_ptr(e.args[4]), ir.IntType(64)), I32)
            head = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            if e.op == "tc.tma_load_2d":
                text, ops, cons = f"{head} [$0], [$1, {{$2, $3}}], [$4];", [addr, tmap, c0, c1, mbar], "r,l,r,r,r"
            else:
                mask = ir.Constant(ir.IntType(16), int(e.op[len("tc.tma_load_2d_mc:"):]))
                text = f"{head}.multicast::cluster [$0], [$1, {{$2, $3}}], [$4], $5;"
                ops, cons = [addr, tmap, c0, c1, mbar, mask], "r,l,r,r,r,h"
            fty = ir.FunctionType(ir.VoidType(), [x.type for x in ops])
            b.call(ir.InlineAsm(fty, text, cons + ",~{memory}", side_effect=True), ops)
            return ir.Constant(I32, 0)
        elif e.op == "tc.tma_store_2d":  # (shared source, tensor map, column, row)
            tmap = b.ptrtoint(self.operand_ptr(e.args[1]), ir.IntType(64))
            c0, c1 = (self._int_cast(self.expr(x), I32) for x in e.args[2:4])
            text = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [$1, {$2, $3}], [$0];"
            ops = [addr, tmap, c0, c1]
            fty = ir.FunctionType(ir.VoidType(), [x.type for x in ops])
            b.call(ir.InlineAsm(fty, text, "r,l,r,r,~{memory}", side_effect=True), ops)
            return ir.Constant(I32, 0)
        elif e.op == "tc.tma_prefetch":  # (tensor map): fetch its descriptor into the TMA unit's cache
            tmap = b.ptrtoint(self.operand_ptr(e.args[0]), ir.IntType(64))
            fty = ir.FunctionType(ir.VoidType(), [ir.IntType(64)])
            b.call(ir.InlineAsm(fty, "prefetch.tensormap [$0];", "l,~{memory}", side_effect=True), [tmap])
            return ir.Constant(I32, 0)
        elif e.op == "tc.mbar_arrive_cluster":  # (barrier, rank of the block whose barrier to arrive on)
            text = ("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, $0, $1; "
                    "mbarrier.arrive.shared::cluster.b64 _, [ra]; }")
            args = [addr, self._int_cast(self.expr(e.args[1]), I32)]
        elif e.op == "tc.mbar_arrive":
            text, args = "mbarrier.arrive.shared::cta.b64 _, [$0];", [addr]
        elif e.op == "tc.cp_async_mbar_arrive":
            text, args = "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];", [addr]
        elif e.op == "tc.mbar_wait":
            text = ("{ .reg .pred done; WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1; "
                    "@!done bra WAIT; }")
            args = [addr, self._int_cast(self.expr(e.args[1]), I32)]
        else:
            raise CodegenError(f"unknown mbarrier intrinsic {e.op}")
        fty = ir.FunctionType(ir.VoidType(), [I32] * len(args))
        b.call(ir.InlineAsm(fty, text, ",".join(["r"] * len(args)) + ",~{memory}", side_effect=True), args)
        return ir.Constant(I32, 0)

    # hardware approximations used by the fallback math (scalar float32)
    def hw_exp2(self, x: ir.Value) -> ir.Value:
        return self.builder.call(self.intrinsic("llvm.nvvm.ex2.approx.f", F32, [F32]), [x])

    def hw_log2(self, x: ir.Value) -> ir.Value:
        return self.builder.call(self.intrinsic("llvm.nvvm.lg2.approx.f", F32, [F32]), [x])

    def hw_sin(self, x: ir.Value) -> ir.Value:
        return self.builder.call(self.intrinsic("llvm.nvvm.sin.approx.f", F32, [F32]), [x])

    def hw_cos(self, x: ir.Value) -> ir.Value:
        return self.builder.call(self.intrinsic("llvm.nvvm.cos.approx.f", F32, [F32]), [x])

    def library_function(self, op: str, scalar: ir.Type) -> str | None:
        if not self.libdevice:
            return None
        self.uses_libdevice = True
        return f"__nv_{op}{'f' if scalar == F32 else ''}"


def _target_machine(tgt: Target) -> Any:
    init_llvm()
    t = llvm.Target.from_triple(tgt.triple)
    arch = tgt.mcpu
    return t.create_target_machine(cpu=arch, features=tgt.opt("mattr"), opt=3)


class NVPTXCompiler:
    """Turns an NVPTX code generator's module into PTX and, with ptxas, a cubin."""

    def __init__(self, libdevice: str | None = None):
        self.libdevice = find_libdevice(libdevice)
        self.ptxas = find_ptxas()

    def fingerprint(self) -> str:
        return f"libdevice={self.libdevice} ptxas={self.ptxas}"

    def codegen(self, tgt: Target) -> CodeGenNVPTX:
        return CodeGenNVPTX(tgt, "ember_cuda", self.libdevice)

    def compile(self, cg: CodeGenNVPTX) -> dict[str, Any]:
        tgt = cg.target
        if cg.needs_sm90a and tgt.mcpu == "sm_90":  # wgmma exists only in the sm_90a variant of Hopper's ISA
            tgt = Target(str(tgt).replace("-arch=sm_90", "-arch=sm_90a"))
        tm = _target_machine(tgt)
        text = finalize_kernels(str(cg.module), cg.kernel_attrs)
        mod = parse_and_verify(text, "the CUDA kernels")
        mod.triple = tgt.triple
        mod.data_layout = str(tm.target_data)
        kernels = {k.name for k in cg.kernels}
        if cg.uses_libdevice and self.libdevice:
            try:
                lib = llvm.parse_bitcode(_libdevice_bytes(self.libdevice))
            except RuntimeError as exc:
                raise ToolchainError(f"libdevice at {self.libdevice} could not be read by LLVM: {exc}; "
                                     "set EMBER_LIBDEVICE=off to use ember's own math") from exc
            lib.triple = tgt.triple
            lib.data_layout = str(tm.target_data)
            mod.link_in(lib)
        _internalize(mod, kernels)
        try:
            mod.verify()
        except RuntimeError as exc:
            raise CodegenError(f"the linked CUDA module does not verify: {exc}") from exc
        optimize(mod, tm, 3)
        llvm_text = str(mod)
        ptx = tm.emit_assembly(parse_and_verify(llvm_text, "the optimized CUDA kernels"))
        extra: dict[str, Any] = {"ptx": ptx}
        if self.ptxas:
            cubin, log = ptxas_compile(ptx, tgt.mcpu, self.ptxas)
            extra["ptxas_log"] = log
            return {"binary": cubin, "llvm": llvm_text, "format": "cubin", "extra": extra}
        return {"binary": ptx.encode(), "llvm": llvm_text, "format": "ptx", "extra": extra}

    @staticmethod
    def sources(meta: dict[str, Any], parts: dict[str, bytes]) -> dict[str, Any]:
        """The device module's text formats from its parts: LLVM IR, PTX (``asm`` too) and
        ptxas's report when there was one."""
        llvm_text = parts.get("module.ll", b"").decode("utf-8", "replace")
        raw = parts.get("module.ptx") or (parts.get("device.bin", b"") if meta.get("binary_format") == "ptx" else b"")
        ptx = raw.decode("utf-8", "replace")
        out = {"llvm": lambda: llvm_text, "ptx": lambda: ptx, "asm": lambda: ptx}
        log = meta.get("extra", {}).get("ptxas_log") if isinstance(meta.get("extra"), dict) else None
        if isinstance(log, str):
            out["ptxas"] = lambda: log
        return out


def _internalize(mod: Any, keep: set[str]) -> None:
    for f in mod.functions:
        if not f.is_declaration and f.name not in keep:
            f.linkage = "internal"
    for g in mod.global_variables:
        if not g.is_declaration:
            g.linkage = "internal"


def ptxas_compile(ptx: str, arch: str, ptxas: str | None = None) -> tuple[bytes, str]:
    """Assemble PTX into a cubin for ``arch`` with ptxas; returns (cubin, ptxas's -v report)."""
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise ToolchainError("ptxas was not found: install the CUDA toolkit (or the nvidia-cuda-nvcc wheel)")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        out = os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([ptxas, f"-arch={arch}", "-O3", "-v", src, "-o", out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise CodegenError(f"ptxas rejected the PTX ember generated for {arch}:\n{proc.stderr.strip()}")
        with open(out, "rb") as f:
            return f.read(), proc.stderr


def math_library() -> str:
    """Which math library CUDA kernels use now: libdevice's path, or ``"ember fallback"``."""
    return find_libdevice() or "ember fallback"
