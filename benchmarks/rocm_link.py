"""Linking AMDGPU code objects: the linkers ember finds (a system ``ld.lld``, LLD from the
``ziglang`` wheel of ``ember[rocm]``) and a Python prototype (``amdgpu_pylink.py``, not used by
ember) compared on the objects of two small models for three GPU generations.

Records each linker's seconds per link (best of interleaved rounds, so machine noise hits them
alike), the whole compile time of the model for scale, whether the LLDs give the same code
object (every section at the same address with the same bytes, apart from ``.comment``, which
names the linker), whether the prototype agrees with LLD where a loader looks (its
``compare_with``), and the installed size of the ziglang wheel. Writes
``benchmarks/results/rocm_link.json`` and prints a table.

    python benchmarks/rocm_link.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import amdgpu_pylink  # noqa: E402
from common import interleaved, table, write_result  # noqa: E402

import ember  # noqa: E402
import ember.backends.rocm.codegen as amdgpu  # noqa: E402
from ember.backends.rocm import lld  # noqa: E402

ARCHES = ("gfx90a", "gfx942", "gfx1100")


def _models() -> dict[str, bytes]:
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)

    def model(nodes, x_shape, y_shape, inits):
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                         [h.make_tensor_value_info("y", T.FLOAT, y_shape)], inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        m.ir_version = 8
        return m.SerializeToString()

    def w(name, *shape):
        return nh.from_array(rng.standard_normal(shape).astype(np.float32), name)

    mlp = model([h.make_node("MatMul", ["x", "w1"], ["a"]), h.make_node("Add", ["a", "b1"], ["b"]),
                 h.make_node("Relu", ["b"], ["c"]), h.make_node("MatMul", ["c", "w2"], ["d"]),
                 h.make_node("Softmax", ["d"], ["y"], axis=-1)],
                [8, 256], [8, 100], [w("w1", 256, 512), w("b1", 512), w("w2", 512, 100)])
    cnn = model([h.make_node("Conv", ["x", "k1"], ["a"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["a"], ["b"]),
                 h.make_node("MaxPool", ["b"], ["c"], kernel_shape=[2, 2], strides=[2, 2]),
                 h.make_node("Conv", ["c", "k2"], ["d"], pads=[1, 1, 1, 1]), h.make_node("Sigmoid", ["d"], ["e"]),
                 h.make_node("GlobalAveragePool", ["e"], ["f"]), h.make_node("Flatten", ["f"], ["g"]),
                 h.make_node("Gemm", ["g", "w3"], ["y"])],
                [1, 3, 32, 32], [1, 10], [w("k1", 16, 3, 3, 3), w("k2", 32, 16, 3, 3), w("w3", 32, 10)])
    return {"mlp": mlp, "cnn": cnn}


def _objects(onnx_bytes: bytes, arch: str) -> tuple[list[bytes], float]:
    """The relocatable objects ember links while compiling the model for ``arch`` (recorded by
    wrapping the codegen module's link function for this script), and the compile seconds."""
    seen: list[bytes] = []
    real = amdgpu.link_code_object

    def recording(obj: bytes, linker: str | None = None) -> bytes:
        seen.append(obj)
        return real(obj, linker)

    amdgpu.link_code_object = recording
    try:
        t0 = time.perf_counter()
        ember.compile(onnx_bytes, target=f"rocm -mcpu={arch}", use_cache=False)
        return seen, time.perf_counter() - t0
    finally:
        amdgpu.link_code_object = real


def _linkers() -> dict[str, tuple[str, ...]]:
    found: dict[str, tuple[str, ...]] = {}
    for v in range(lld.NEWEST_LLD, lld.MIN_LLD - 1, -1):
        path = shutil.which(f"ld.lld-{v}") or (shutil.which("ld.lld") if v == lld.MIN_LLD else None)
        if path and (lld.lld_version((path,)) or 0) >= lld.MIN_LLD:
            found[f"system ({os.path.basename(path)})"] = (path,)
            break
    wheel = lld.wheel_lld()
    if wheel is not None:
        found["ziglang wheel"] = wheel
    return found


def _folder_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            fp = os.path.join(root, f)
            if not os.path.islink(fp):
                total += os.path.getsize(fp)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    linkers = _linkers()
    if not linkers:
        sys.exit("no ld.lld found: pip install 'ember[rocm]' or apt-get install lld-22")
    rows, records = [], []
    for name, onnx_bytes in _models().items():
        for arch in ARCHES:
            objs, compile_s = _objects(onnx_bytes, arch)
            outputs = {}
            fns = {}
            for lname, cmd in linkers.items():
                linker = " ".join(cmd)
                os.environ["EMBER_LLD"] = linker
                lld.find_lld.cache_clear()
                outputs[lname] = [lld.code_object_sections(lld.link_code_object(o)) for o in objs]
                fns[lname] = (lambda c=linker, objs=objs: [lld.link_code_object(o, c) for o in objs])
            fns["python prototype"] = (lambda objs=objs: [amdgpu_pylink.link(o) for o in objs])
            times = interleaved(fns, rounds=args.rounds, min_time=0.05, settle=0.05)
            same = all(v == next(iter(outputs.values())) for v in outputs.values())
            reference = [lld.link_code_object(o, " ".join(next(iter(linkers.values())))) for o in objs]
            py_problems = [p for o, r in zip(objs, reference)
                           for p in amdgpu_pylink.compare_with(amdgpu_pylink.link(o), r)]
            rec = {"model": name, "arch": arch, "objects": len(objs), "object_bytes": sum(map(len, objs)),
                   "compile_s": round(compile_s, 3), "identical_code_objects": same,
                   "python_prototype_agrees_with_lld": not py_problems, "python_prototype_problems": py_problems[:5],
                   "link_ms": {k: round(v * 1e3, 2) for k, v in times.items()}}
            records.append(rec)
            rows.append({"model": name, "arch": arch, "compile s": f"{compile_s:.2f}",
                         **{f"{k} ms": f"{v * 1e3:.1f}" for k, v in times.items()}, "same bytes": same,
                         "prototype agrees": not py_problems})
    os.environ.pop("EMBER_LLD", None)
    wheel = lld.wheel_lld()
    sizes = {}
    if wheel is not None:
        sizes["ziglang_installed_bytes"] = _folder_bytes(os.path.dirname(wheel[0]))
    import importlib.metadata as md

    try:
        sizes["ziglang_version"] = md.version("ziglang")
    except md.PackageNotFoundError:
        pass
    versions = {k: lld.lld_version(v) for k, v in linkers.items()}
    print(table(rows, list(rows[0])))
    print("sizes:", sizes, "LLD versions:", versions)
    path = write_result("rocm_link", {"linkers": {k: " ".join(v) for k, v in linkers.items()},
                                      "lld_versions": versions, "sizes": sizes, "results": records,
                                      "note": "machine shared with other sessions: link times are noisy"})
    print("wrote", path)


if __name__ == "__main__":
    main()
