"""What a tuning record is keyed by: the *workload* (which kernel) and the *target* (which machine).

* A **workload key** is canonical JSON text: the schedule template (``"llvm.conv_packed"``,
  ``"cuda.conv_packed"``, or a te kernel's template name) and the tunable stage's shapes, data
  types and layout attributes (the packed GEMM's panel width ``nr``, its reduction extents) plus a
  digest of its body with names made canonical. Two kernels of a network with the same key (the
  repeated layers) share their records; the fused epilogue (bias, activation) is not part of it.
* A **target key** (:class:`TargetKey`) names the machine a time was measured on: the target
  kind, the CPU model LLVM tunes for (``znver3``) with its vector features and thread count, or
  the GPU architecture (``sm_90``) with the GPU's name. Records are applied only where the keys
  :meth:`TargetKey.matches` (a name that one side does not know is not compared).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..strategy.base import Strategy, extent
from ..strategy.cpu_conv import NCHWC_TAGS
from ..target import Target
from ..te import ComputeOp, PlaceholderOp, Tensor
from ..te.rewrite import post_order

#: CPU features that change which schedule is fastest (vector ISA and matrix extensions).
VECTOR_FEATURES = frozenset({
    "sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vnni", "avx512bf16",
    "avx512fp16", "amx-tile", "amx-bf16", "amx-int8", "neon", "sve", "sve2", "dotprod", "fullfp16", "bf16", "i8mm",
})
#: The tags of the stages the strategies' knob spaces describe (``Strategy.space``): the packed GEMM
#: (CPU and GPU), the GPU's tensor-core accumulators and the CPU's blocked NCHW[x]c convolutions.
TUNABLE_TAGS = ("conv_packed", "tc_gemm", *NCHWC_TAGS)


@dataclass(frozen=True)
class TargetKey:
    """The machine a measurement belongs to (see the module docstring)."""

    kind: str
    arch: str
    features: tuple[str, ...] = ()
    threads: int = 0
    device: str = ""

    def matches(self, other: TargetKey) -> bool:
        """True when a time measured on ``other`` holds here: same kind, architecture, vector
        features and threads; device names compared only when both are known."""
        same = (self.kind, self.arch, self.features, self.threads) == (
            other.kind, other.arch, other.features, other.threads)
        return same and (not self.device or not other.device or self.device == other.device)

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys)."""
        return json.dumps({"kind": self.kind, "arch": self.arch, "features": list(self.features),
                           "threads": self.threads, "device": self.device}, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> TargetKey:
        """The key :meth:`to_json` wrote; raises ``ValueError``/``KeyError``/``TypeError`` on
        malformed text."""
        d = json.loads(text)
        return TargetKey(str(d["kind"]), str(d["arch"]), tuple(str(f) for f in d["features"]), int(d["threads"]),
                         str(d.get("device", "")))

    def describe(self) -> str:
        """A short human-readable form: ``llvm znver3 (avx2,fma) x2 threads`` or
        ``cuda sm_90 (NVIDIA H100 80GB HBM3)``."""
        if self.kind == "llvm":
            return f"llvm {self.arch} ({','.join(self.features) or 'scalar'}) x{self.threads} threads"
        return f"{self.kind} {self.arch}" + (f" ({self.device})" if self.device else "")


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor()


def gpu_present(kind: str) -> bool:
    """True when a GPU of target kind ``kind`` (``cuda``, ``rocm``) and its driver are here."""
    from ..errors import DeviceError

    try:
        if kind == "cuda":
            from ..runtime import cuda_driver

            return cuda_driver.device_count() > 0
        if kind == "rocm":
            from ..runtime import hip_driver

            return hip_driver.device_count() > 0
    except (DeviceError, OSError):
        return False
    return False


def _gpu_name(kind: str) -> str:
    from ..errors import DeviceError

    if not gpu_present(kind):
        return ""
    try:
        if kind == "cuda":
            from ..runtime import cuda_driver

            return str(cuda_driver.device_attributes(0)["device_name"])
        from ..runtime import hip_driver

        return str(hip_driver.device_attributes(0).get("device_name", ""))
    except (DeviceError, OSError, KeyError):
        return ""


def target_key(target: Target | str) -> TargetKey:
    """The key of resolved ``target`` (a CUDA target's ``-arch`` filled in by its backend).
    The device name is the host CPU's model (when the target is the host CPU) or GPU 0's name
    (when one of the target's kind is present and of the target's architecture)."""
    tgt = Target(target)
    if tgt.kind == "llvm":
        feats = tuple(sorted(f for f in tgt.features if f in VECTOR_FEATURES))
        host = not tgt.opt("mcpu") and not tgt.opt("mtriple")
        return TargetKey("llvm", tgt.mcpu, feats, tgt.num_threads, _cpu_model_name() if host else "")
    name = _gpu_name(tgt.kind)
    if name and tgt.kind == "cuda":
        from ..runtime import cuda_driver

        if cuda_driver.detected_arch() != tgt.mcpu:
            name = ""
    return TargetKey(tgt.kind, tgt.mcpu, (), 0, name)


# -- workloads ---------------------------------------------------------------------------------------
def anchor_op(outs: Sequence[Tensor]) -> ComputeOp | None:
    """The tunable stage of the kernel computing ``outs`` (the one its strategy's space
    describes: the first, producers first, with a tag of :data:`TUNABLE_TAGS`), or None."""
    for op in post_order([o.op for o in outs]):
        if isinstance(op, ComputeOp) and op.tag in TUNABLE_TAGS:
            return op
    return None


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in sorted(v.items())}
    return str(v)


def _shape(t: Tensor) -> list[Any]:
    from ..arith import simplify
    from ..ir import expr as E

    out: list[Any] = []
    for d in t.shape:
        v = E.const_int_value(simplify(d))
        out.append(int(v) if v is not None else str(d))
    return out


def _body_digest(op: ComputeOp) -> str:
    """A digest of ``op``'s body with tensor and axis names replaced by their positions, so the
    same computation built in two kernels (named ``p0`` in one, ``p3`` in the other) agrees."""
    text = " ".join(str(b) for b in op.body)
    names = [t.op.name for t in op.input_tensors] + [iv.var.name for iv in list(op.axis) + list(op.reduce_axis)]
    mapping = {n: f"@{k}" for k, n in enumerate(dict.fromkeys(names))}
    if mapping:
        pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in sorted(mapping, key=len, reverse=True))
                             + r")(?![\w])")
        text = pattern.sub(lambda m: mapping[m.group(1)], text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def kernel_workload(outs: Sequence[Tensor], strategy: Strategy) -> str | None:
    """The workload key of a model kernel computing ``outs`` (outputs and workspaces) for
    ``strategy``'s target, or None when it has no tunable stage."""
    op = anchor_op(outs)
    if op is None:
        return None
    d = {
        "template": f"{strategy.target.kind}.{op.tag}",
        "out": [_shape(op.output(0)), str(op.output(0).dtype)],
        "inputs": [[_shape(t), str(t.dtype)] for t in op.input_tensors],
        "reduce": [extent(r) for r in op.reduce_axis],
        "attrs": _jsonable(dict(op.attrs or {})),
        "body": _body_digest(op),
    }
    return json.dumps(d, sort_keys=True)


def te_workload(template: str, args: Sequence[Tensor]) -> str:
    """The workload key of a te kernel: its template name and its arguments' shapes and types."""
    return json.dumps({"template": template, "args": [[_shape(t), str(t.dtype)] for t in args]}, sort_keys=True)


def workload_name(key: str) -> str:
    """A short readable name of workload ``key``: ``conv_packed 1x64x3136 k576`` and the like."""
    d = json.loads(key)
    template = str(d.get("template", "?")).split(".")[-1]
    if "out" in d:
        dims = "x".join(str(x) for x in d["out"][0])
        red = "x".join(str(x) for x in d.get("reduce", []))
        return f"{template} {dims} k{red} {d['out'][1]}"
    shapes = " ".join("x".join(str(x) for x in a[0]) for a in d.get("args", []))
    return f"{template} {shapes}"


def op_flops(op: ComputeOp) -> float:
    """Two operations per multiply-add of reduction ``op`` (one per output element otherwise)."""
    elems = float(np.prod([extent(a) for a in op.axis])) if op.axis else 1.0
    return 2.0 * elems * float(np.prod([extent(r) for r in op.reduce_axis])) if op.reduce_axis else elems


def flop_count(outs: Sequence[Tensor]) -> float:
    """Floating-point operations of the kernel computing ``outs``: two per multiply-add of every
    reduction stage (one per reduced element), one per element of every other stage (an
    estimate: a GEMM or convolution is exact, epilogues are counted once per element)."""
    total = 0.0
    for op in post_order([o.op for o in outs]):
        if isinstance(op, ComputeOp) and not isinstance(op, PlaceholderOp):
            total += op_flops(op)
    return total
