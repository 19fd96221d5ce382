"""The saved-model file format.

A saved model is a zip archive with ``plan.json`` (format ``ember-model/1``: the program's plan
plus the constants' names), ``weights.npz`` (the constants, NumPy's format, read with
``allow_pickle=False``) and the kernels: ``kernels.so`` for the CPU, ``gpu_module.json`` and
``device.bin`` for a GPU. No pickle anywhere.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import shutil
import tempfile
import zipfile
from typing import Any

import numpy as np

from ..errors import EmberError
from .model import Model
from .program import Program

FORMAT = "ember-model/1"


def save_model(model: Model, path: str | os.PathLike[str]) -> None:
    """Write ``model`` (static) to ``path`` atomically (a temporary file renamed into place)."""
    program = model.program
    path = os.fspath(path)
    gpu_parts: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, "kernels.so")
        if program.module is not None and program.is_gpu:
            gpu_parts = program.module.export_parts()
        elif program.module is not None:
            program.module.export_library(so)
        buf = io.BytesIO()
        np.savez(buf, **{f"c{k}": v for k, v in enumerate(program.consts.values())})
        names = {f"c{k}": n for k, n in enumerate(program.consts)}
        plan = dict(program.plan, format=FORMAT, const_names=names)
        tmp_zip = path + ".tmp"
        with zipfile.ZipFile(tmp_zip, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("plan.json", json.dumps(plan))
            z.writestr("weights.npz", buf.getvalue(), compress_type=zipfile.ZIP_STORED)  # floats: incompressible
            for fname, data in gpu_parts.items():
                z.writestr(fname, data)
            if program.module is not None and not gpu_parts:
                z.write(so, "kernels.so")
        os.replace(tmp_zip, path)


def load_model(path: str | os.PathLike[str]) -> Model:
    """Load a model written by :func:`save_model`; no compiler runs."""
    from ..runtime import load_module

    path = os.fspath(path)
    try:
        z = zipfile.ZipFile(path)
        plan = json.loads(z.read("plan.json"))
        weights = np.load(io.BytesIO(z.read("weights.npz")), allow_pickle=False)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise EmberError(f"{path} is not a model saved by ember (Model.save): {exc}") from exc
    if plan.get("format") != FORMAT:
        raise EmberError(f"{path} has format {plan.get('format')!r}; this ember reads {FORMAT}")
    consts = {plan["const_names"][k]: weights[k] for k in weights.files}
    module: Any = None
    if "kernels.so" in z.namelist():
        # The library file must outlive the process's use of it: glibc's dlopen recognises a
        # library by its inode, and a deleted file's inode, reused by the next model's library,
        # would hand back the old one. The directory goes when the process exits.
        tmp = tempfile.mkdtemp(prefix="ember-model-")
        atexit.register(shutil.rmtree, tmp, True)
        so = os.path.join(tmp, "kernels.so")
        with open(so, "wb") as f:
            f.write(z.read("kernels.so"))
        module = load_module(so)
    elif "gpu_module.json" in z.namelist():
        from ..runtime.gpu import load_parts

        module = load_parts({n: z.read(n) for n in ("gpu_module.json", "device.bin")})
    return Model(Program(plan, module, consts))
