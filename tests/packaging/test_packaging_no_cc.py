"""Saving and loading a compiled CPU model on a machine without a C compiler or linker: the CPU
backend keeps LLVM's relocatable object and maps it in process (no ``cc -shared``, no ``dlopen``).
Run in a child process whose PATH holds no program at all, with the compile cache off."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CHILD = textwrap.dedent("""
    import shutil, sys
    import numpy as np
    sys.path.insert(0, {devices!r})
    for tool in ("cc", "gcc", "clang", "ld", "ld.lld", "as"):
        assert shutil.which(tool) is None, tool + " is on PATH"
    import ember
    from device_models import mlp, mlp_reference
    rng = np.random.default_rng(7)
    onnx_bytes, weights = mlp(rng)
    mode, path = sys.argv[1], sys.argv[2]
    x = rng.standard_normal((3, 37)).astype(np.float32)
    if mode == "save":
        model = ember.compile(onnx_bytes, use_cache=False)
        model.save(path)
    else:
        model = ember.load(path)
    (y,) = model(x)
    np.testing.assert_allclose(y, mlp_reference(x, weights), rtol=1e-5, atol=1e-5)
    print("ok", mode, model.num_kernels)
""")


def _run(mode: str, path: str, tmp_path) -> str:
    bare = tmp_path / "empty-bin"
    bare.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "LD", "EMBER_LLD")}
    env.update(PATH=str(bare), EMBER_CACHE_DIR="off", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    script = CHILD.format(devices=os.path.join(ROOT, "tests", "devices"))
    proc = subprocess.run([sys.executable, "-c", script, mode, path], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_save_and_load_without_a_c_compiler(tmp_path):
    pytest.importorskip("onnx", reason="the model is built with onnx")
    path = str(tmp_path / "mlp.ember")
    assert "ok save" in _run("save", path, tmp_path)
    assert os.path.getsize(path) > 0
    assert "ok load" in _run("load", path, tmp_path)
