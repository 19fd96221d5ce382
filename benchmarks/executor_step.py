"""What the CPU executor costs per kernel step, and whole small-layer models, against ONNX Runtime.

* ``chain``: a model of N unfused steps (``Add`` of a constant and ``Relu`` alternating, compiled
  with ``fuse=False``) on a small tensor: 1x16x8x8 (serial kernels) and 1x16x32x32 (each kernel
  a parallel loop on the pool at 2 threads). Per step: (time of N = 101 steps - time of N = 1)
  / 100, for ember's two ways of running the steps, ``python`` (one ctypes call per kernel from
  the executor's loop, as before and as a profiled call still does) and ``native`` (one
  ``ember_run_plan`` walk per call: ``ember/backends/cpu/plan.py``), and for ONNX Runtime
  running the same graph with its optimizations off (one kernel per node).
* ``pool``: what ``ember_parallel_for`` costs around its work, called back to back from machine
  code (:func:`pool_handoff`).
* ``models``: MobileNetV2 and EfficientNet-Lite0 (``benchmarks/models_cpu.py`` builds them),
  ember ``python`` and ``native`` and ONNX Runtime, milliseconds per call.

Each thread count runs in a process of its own (``OMP_NUM_THREADS``: ember's pool size; ONNX
Runtime gets ``intra_op_num_threads``); within it the three are timed in interleaved rounds
(the best of ``--rounds`` short blocks, each after a short pause), so a busy machine affects
them alike and the best block is one that no other process interrupted.

Run: ``.venv/bin/python benchmarks/executor_step.py [--threads 1 2] [--no-models]``; writes
``benchmarks/results/executor_step.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = {"serial": (1, 16, 8, 8), "parallel": (1, 16, 32, 32)}
STEPS = 101


def chain_onnx(n: int, shape: tuple[int, ...]) -> bytes:
    """An ONNX model of ``n`` nodes, ``Add`` (a constant) and ``Relu`` alternating, on ``shape``."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    nodes, prev = [], "x"
    for i in range(n):
        ins = [prev, "b"] if i % 2 == 0 else [prev]
        nodes.append(h.make_node("Add" if i % 2 == 0 else "Relu", ins, [f"v{i}"]))
        prev = f"v{i}"
    nodes.append(h.make_node("Identity", [prev], ["y"]))
    b = np.full(shape, 0.01, np.float32)
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, shape)], [nh.from_array(b, "b")])
    proto = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto.SerializeToString()


def _ember(model: Any, native: bool) -> Any:
    ctx = model.context()
    ctx.native = native
    return model


def _ort(onnx: bytes | str, threads: int, optimize: bool) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(onnx, so, providers=["CPUExecutionProvider"])


def _timed(fns: dict[str, Any], rounds: int) -> dict[str, float]:
    """Best seconds per call of each function over ``rounds`` interleaved rounds of short
    blocks (~5 ms: on a shared machine the best short block is one that no other process
    interrupted), each after 20 ms of idleness (ONNX Runtime's pool threads spin for a while
    after a run). ember's two modes run on one model: each function sets the context's mode."""
    from common import interleaved

    return interleaved(fns, rounds=rounds, min_time=0.005, settle=0.02)


def pool_handoff(rounds: int) -> dict[str, float]:
    """Nanoseconds per ``ember_parallel_for`` of ALU work (a dependent multiply-add chain of
    ``W`` iterations split over the chunks; no memory traffic), on the calling thread alone
    (``threads`` = 1) and on the whole pool, called back to back from machine code: the pool's
    hand-off and join cost is (all threads) - (one thread) / threads."""
    import ctypes
    import time

    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    from ember.backends.cpu import pool
    from ember.backends.cpu.codegen import load_runtime_libraries, target_machine
    from ember.target import Target

    load_runtime_libraries()
    pool.install()
    i64, i32, ptr = ir.IntType(64), ir.IntType(32), ir.PointerType()
    m = ir.Module()
    m.triple = llvm.get_process_triple()
    chunk_ty = ir.FunctionType(ir.VoidType(), [ptr, i64, i64])
    sink = ir.GlobalVariable(m, i64, "sink")
    sink.initializer = ir.Constant(i64, 0)
    work = ir.Function(m, chunk_ty, "work")  # ptrtoint(arg) iterations over nchunks chunks
    entry, loop, done = work.append_basic_block(), work.append_basic_block(), work.append_basic_block()
    b = ir.IRBuilder(entry)
    n = b.sdiv(b.ptrtoint(work.args[0], i64), work.args[2])
    b.branch(loop)
    b.position_at_end(loop)
    k, acc = b.phi(i64), b.phi(i64)
    k.add_incoming(ir.Constant(i64, 0), entry)
    acc.add_incoming(ir.Constant(i64, 1), entry)
    acc.add_incoming(b.add(b.mul(acc, ir.Constant(i64, 3)), k), loop)
    k1 = b.add(k, ir.Constant(i64, 1))
    k.add_incoming(k1, loop)
    b.cbranch(b.icmp_signed("<", k1, n), loop, done)
    b.position_at_end(done)
    b.store_atomic(acc, sink, "monotonic", 8)
    b.ret_void()
    pfor = ir.Function(m, ir.FunctionType(ir.VoidType(), [chunk_ty.as_pointer(), ptr, i64, i32, i32]), pool.SYMBOL)
    bench = ir.Function(m, ir.FunctionType(ir.VoidType(), [i64, i64, i32]), "bench")  # (loops, work, threads)
    entry, loop, done = bench.append_basic_block(), bench.append_basic_block(), bench.append_basic_block()
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    k = b.phi(i64)
    k.add_incoming(ir.Constant(i64, 0), entry)
    b.call(pfor, [work, b.inttoptr(bench.args[1], ptr), ir.Constant(i64, 1 << 20), bench.args[2],
                  ir.Constant(i32, pool.DYNAMIC)])
    k1 = b.add(k, ir.Constant(i64, 1))
    k.add_incoming(k1, loop)
    b.cbranch(b.icmp_unsigned("<", k1, bench.args[0]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(m)), target_machine(Target("llvm"), opt=2))
    engine.finalize_object()
    run = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32)(engine.get_function_address("bench"))
    out = {}
    for work_iters in (0, 4000, 16000):
        for threads, label in ((1, "one"), (0, "all")):
            best = float("inf")
            for _ in range(rounds * 5):
                t0 = time.perf_counter()
                run(100, work_iters, threads)
                best = min(best, (time.perf_counter() - t0) / 100)
            out[f"work{work_iters}_{label}_ns"] = round(best * 1e9)
    return out


def measure(threads: int, rounds: int, models: bool) -> dict[str, Any]:
    """The figures of one thread count (this process's ``OMP_NUM_THREADS``)."""
    import numpy as np

    import ember

    out: dict[str, Any] = {"threads": threads, "chain": {}, "models": {}, "pool": pool_handoff(rounds)}
    for kind, shape in SHAPES.items():
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        fns = {}
        for n in (1, STEPS):
            onnx = chain_onnx(n, shape)
            m = ember.compile(onnx, fuse=False)
            sess = _ort(onnx, threads, optimize=False)
            assert np.allclose(m(x)[0], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
            for mode in ("python", "native"):
                fns[f"{mode}{n}"] = (lambda m=m, mode=mode, x=x: _ember(m, mode == "native")(x))
            fns[f"ort{n}"] = (lambda s=sess, x=x: s.run(None, {"x": x}))
        best = _timed(fns, rounds)
        row = {}
        for who in ("python", "native", "ort"):
            row[f"{who}_step_us"] = round((best[f"{who}{STEPS}"] - best[f"{who}1"]) / (STEPS - 1) * 1e6, 3)
            row[f"{who}_call1_us"] = round(best[f"{who}1"] * 1e6, 1)
        out["chain"][kind] = row
    if models:
        import tempfile

        from models_cpu import _model

        with tempfile.TemporaryDirectory() as tmp:
            for name in ("mobilenet_v2", "efficientnet_lite0"):
                try:
                    path, feeds = _model(name, Path(tmp))
                except ImportError as exc:
                    out["models"][name] = f"skipped ({exc})"
                    continue
                m = ember.compile(path)
                sess = _ort(str(path), threads, optimize=True)
                fns = {"python": (lambda m=m, f=feeds: _ember(m, False)(**f)),
                       "native": (lambda m=m, f=feeds: _ember(m, True)(**f)),
                       "ort": (lambda s=sess, f=feeds: s.run(None, f))}
                best = _timed(fns, rounds)
                out["models"][name] = {
                    "kernels": m.num_kernels,
                    **{f"{k}_ms": round(v * 1e3, 3) for k, v in best.items()},
                    "native_vs_ort": round(best["native"] / best["ort"], 3),
                    "python_vs_ort": round(best["python"] / best["ort"], 3),
                }
    return out


def main() -> int:
    """Run the benchmark (one child process per thread count); returns an exit code."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--no-models", action="store_true", help="only the step chains")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.rounds, not args.no_models)))
        return 0
    from common import write_result

    results = []
    for t in args.threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(t), OPENBLAS_NUM_THREADS=str(t), MKL_NUM_THREADS=str(t))
        cmd = [sys.executable, __file__, "--child", str(t), "--rounds", str(args.rounds)]
        cmd += ["--no-models"] if args.no_models else []
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        r = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(r)
        for kind, row in r["chain"].items():
            print(f"{t} thread(s), chain {kind} {SHAPES[kind]}: us per step " + ", ".join(
                f"{who} {row[f'{who}_step_us']:.2f}" for who in ("python", "native", "ort"))
                + " | one-step call us " + ", ".join(f"{who} {row[f'{who}_call1_us']}"
                                                    for who in ("python", "native", "ort")))
        print(f"{t} thread(s), pool (ns per parallel loop of W multiply-adds, one thread / all): " + ", ".join(
            f"W={w} {r['pool'][f'work{w}_one_ns']} / {r['pool'][f'work{w}_all_ns']}" for w in (0, 4000, 16000)))
        for name, row in r["models"].items():
            print(f"{t} thread(s), {name}: {row}")
    out = write_result("executor_step", {"steps": STEPS, "shapes": {k: list(v) for k, v in SHAPES.items()},
                                          "clock": "wall, best of interleaved rounds", "runs": results})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
