"""Host-side cost of one kernel launch from Python, split into ember's part and the driver's.

* ``python_us``: ember's work per call (argument checks, symbolic sizes, grid computation,
  kernel-parameter packing) with the driver call replaced by a C function of the same arity that
  does nothing. Needs no GPU: it runs anywhere the CUDA module compiles.
* With an NVIDIA GPU present, also ``total_us`` (ember NDArrays, real ``cuLaunchKernel``),
  ``driver_only_us`` (``cuLaunchKernel`` from ctypes with prepared arguments) and ``torch_us``
  (``torch.add(out=)`` on tiny tensors), each as time per call over back-to-back calls.
* ``graph``: a model's launch cost, N tiny kernels (N = 1, 10, 50, 200) launched one by one
  through ember (``ember_us``: argument checks and all, as a model without graphs launches them;
  ``driver_us``: prepared ``cuLaunchKernel`` calls) vs the same N launches captured once into a
  CUDA graph and replayed (``graph_us``: one ``cuGraphLaunch``), each the wall time of the N
  launches plus one stream synchronisation, best of 5 rounds; ``*_per_kernel_us`` divides by N.
* ``model_call``: what a call of a one-kernel model (MatMul + Relu, 33x64 @ 64x48) costs around
  its kernel: ``run_on_device`` with a device input, graphs off and on; host arrays in and out
  with graphs on; and the parts of a graph call: the replay alone, binding the input (copy into
  the fixed buffer), one output copy into a fresh array (allocation and free included), and a
  synchronisation of the idle stream; each followed by a wait for the context's stream.

Run: ``.venv/bin/python benchmarks/launch_overhead.py [--out DIR]``; writes
``launch_overhead.json`` to DIR (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import per_call_us, tiny_model_onnx  # noqa: E402

import ember  # noqa: E402
from ember import te  # noqa: E402
from ember.runtime.gpu_array import GPUArray  # noqa: E402


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
    """µs per call over back-to-back calls (benchmarks/common.py's ``per_call_us``)."""
    return per_call_us(fn, calls, sync, warmup=500)


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


def _round_us(fn, sync, rounds: int = 5, iters: int = 200) -> float:
    """Best over ``rounds`` of the wall time of ``fn(); sync()``, in µs per iteration."""
    return per_call_us(lambda: (fn(), sync()), iters, rounds=rounds, warmup=20)


def _graph_vs_launches(fn, arrs) -> list[dict[str, float]]:
    """N tiny kernels on one stream: launched one by one vs replayed as a captured graph."""
    from ember.runtime import cuda_driver as drv

    stream = drv.Stream(0, non_blocking=True)
    launcher = fn._launchers_on(0)[0]
    grid = fn._grid_fns[0]([256])
    values = [a.data_ptr for a in arrs] + [256]
    rows = []
    prev = drv.set_stream(stream)
    try:
        for n in (1, 10, 50, 200):
            def ember_calls(n=n) -> None:
                for _ in range(n):
                    fn(*arrs)

            def driver_calls(n=n) -> None:
                for _ in range(n):
                    launcher(grid, values)

            drv.begin_capture(stream)
            try:
                ember_calls()
            finally:
                graph = drv.end_capture(stream)
            assert graph.nodes == n, (graph.nodes, n)
            row = {
                "kernels": n,
                "ember_us": _round_us(ember_calls, stream.synchronize),
                "driver_us": _round_us(driver_calls, stream.synchronize),
                "graph_us": _round_us(lambda g=graph: g.launch(stream), stream.synchronize),
            }
            for k in ("ember", "driver", "graph"):
                row[f"{k}_per_kernel_us"] = row[f"{k}_us"] / n
            rows.append({k: round(v, 2) for k, v in row.items()})
    finally:
        drv.set_stream(prev)
    return rows


def _model_call_costs() -> dict[str, float]:
    """Per-call costs of a one-kernel model (see the module docstring)."""
    import numpy as np

    m = ember.compile(tiny_model_onnx()[0], target="cuda")
    xh = np.ones((33, 64), np.float32)
    x = ember.nd.array(xh, ember.cuda(0))
    out: dict[str, float] = {}
    m.cuda_graphs = False
    out["call_plain_us"] = _per_call(lambda: m.run_on_device(x), calls=5000)
    m.cuda_graphs = True
    out["call_graph_us"] = _per_call(lambda: m.run_on_device(x), calls=5000)
    out["host_call_graph_us"] = _per_call(lambda: m(xh), calls=5000)
    ctx = m.context()
    y = m.run_on_device(x)[0]
    out["graph_nodes"] = ctx.graph_nodes
    out["replay_us"] = _per_call(lambda: (ctx.replay(), ctx.finish()), calls=5000)
    out["bind_us"] = _per_call(lambda: (ctx.bind({"x": x}, fixed=True), ctx.finish()), calls=5000)
    out["output_copy_us"] = _per_call(lambda: (ctx.mem.copy(y), ctx.finish()), calls=5000)
    out["stream_sync_us"] = _per_call(ctx.finish, calls=5000)
    return {k: round(v, 2) for k, v in out.items()}


def main() -> None:
    """Measure and write the JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    opts = ap.parse_args()
    f = _vector_add()
    fn = f.get_function("tiny")
    result: dict[str, Any] = {}
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
        torch.cuda.synchronize()
        result["graph"] = _graph_vs_launches(fn, arrs)
        result["model_call"] = _model_call_costs()
    else:
        dt = ember.ir.dtype("float32")
        arrs = [GPUArray(4096 * (k + 1), (256,), dt, ember.cuda(0)) for k in range(3)]
    fn._launchers[0] = [_NoDriver(4)]
    result["python_us"] = _per_call(lambda: fn(*arrs))
    for k, v in result.items():
        if k == "graph":
            for row in v:
                print(f"{'graph':>16}: " + ", ".join(f"{a} {b}" for a, b in row.items()))
        elif isinstance(v, dict):
            print(f"{k:>16}: " + ", ".join(f"{a} {b}" for a, b in v.items()))
        else:
            print(f"{k:>16}: {v:.2f}" if isinstance(v, float) else f"{k:>16}: {v}")
    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "launch_overhead.json"), "w") as fh:
        json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
