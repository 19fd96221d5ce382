"""Host-side cost of one kernel launch from Python, split into ember's part and the driver's.

* ``python_us``: ember's work per call (argument checks, symbolic sizes, grid computation,
  kernel-parameter packing) with the driver call replaced by a C function of the same arity that
  does nothing. Needs no GPU: it runs anywhere the CUDA module compiles.
* With an NVIDIA GPU present, also ``total_us`` (ember NDArrays, real ``cuLaunchKernel``),
  ``driver_only_us`` (``cuLaunchKernel`` from ctypes with prepared arguments) and ``torch_us``
  (``torch.add(out=)`` on tiny tensors), each as time per call over back-to-back calls.

Run: ``.venv/bin/python benchmarks/launch_overhead.py [--out DIR]``; writes
``launch_overhead.json`` to DIR (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import time

import ember
from ember import te
from ember.runtime.gpu_array import GPUArray


def _vector_add() -> ember.Module:
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return ember.build(s, [A, B, C], target="cuda -arch=sm_90", name="tiny")


def _per_call(fn, calls: int = 50000, sync=None) -> float:
    for _ in range(500):
        fn()
    if sync:
        sync()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        if sync:
            sync()
        best = min(best, (t1 - t0) / calls)
    return best * 1e6


class _NoDriver:
    """Stands in for the driver launcher: same argument packing, a no-op C call."""

    def __init__(self, real_like: int):
        self.slots = [ctypes.c_uint64() for _ in range(real_like)]
        self.params = (ctypes.c_void_p * real_like)(*[ctypes.addressof(x) for x in self.slots])
        self.block, self.shared, self.func = (64, 1, 1), 0, ctypes.c_void_p(0)
        self._noop = ctypes.CDLL(None).labs  # ignores extra arguments under the C calling convention

    def __call__(self, grid, values) -> None:
        for slot, v in zip(self.slots, values):
            slot.value = v
        b = self.block
        self._noop(self.func, grid[0], grid[1], grid[2], b[0], b[1], b[2], self.shared, None, self.params, None)


def main() -> None:
    """Measure and write the JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    opts = ap.parse_args()
    f = _vector_add()
    fn = f.get_function("tiny")
    result: dict[str, float | str] = {}
    gpu = ember.cuda(0).exist
    if gpu:
        import torch

        ta, tb, tc = (torch.randn(256, device="cuda") for _ in range(3))
        arrs = [ember.nd.from_dlpack(t) for t in (ta, tb, tc)]
        result["total_us"] = _per_call(lambda: fn(*arrs), sync=torch.cuda.synchronize)
        launcher = fn._launchers_on(0)[0]
        grid = fn._grid_fns[0]([256])
        values = [a.data_ptr for a in arrs] + [256]
        result["driver_only_us"] = _per_call(lambda: launcher(grid, values), sync=torch.cuda.synchronize)
        result["torch_us"] = _per_call(lambda: torch.add(ta, tb, out=tc), sync=torch.cuda.synchronize)
        result["device"] = torch.cuda.get_device_name(0)
    else:
        dt = ember.ir.dtype("float32")
        arrs = [GPUArray(4096 * (k + 1), (256,), dt, ember.cuda(0)) for k in range(3)]
    fn._launchers[0] = [_NoDriver(4)]
    result["python_us"] = _per_call(lambda: fn(*arrs))
    for k, v in result.items():
        print(f"{k:>16}: {v:.2f}" if isinstance(v, float) else f"{k:>16}: {v}")
    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "launch_overhead.json"), "w") as fh:
        json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
