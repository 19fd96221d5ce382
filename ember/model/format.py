"""The saved-model file format (``ember-model/2``): data plus object code, nothing executable
at load time.

A saved model is a zip archive holding:

* ``manifest.json`` — the format name, ember's version, and the size and SHA-256 digest of every
  other member; each member is checked against it before it is parsed;
* ``plan.json`` — the program's plan (inputs, outputs, values, steps, memory plan, target) and
  the constants' names;
* ``weights.npz`` — the constants (NumPy's format, read with ``allow_pickle=False``);
* ``module/<part>`` — the compiled module's parts as its backend serialises them (CPU: a
  relocatable object and its description; GPU: the device binary and its launch plans as data);
* optionally ``source/model.onnx`` and ``source/options.json`` — what the model was compiled
  from, for ``ember.load(path, rebuild=True)``.

Loading runs no code from the file: no pickle, no ``eval``, no ``dlopen``; the module's parts go
through the backend's checking loader. A file that is not what ember writes raises
:class:`~ember.errors.ModelFormatError` naming what is wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from typing import Any

import numpy as np

from ..errors import EmberError, ModelFormatError
from ..version import __version__
from .model import Model
from .program import Program

FORMAT = "ember-model/2"
#: Largest member accepted (bytes): a guard against archives that claim absurd sizes.
MAX_MEMBER_BYTES = 1 << 36


def save_model(model: Model, path: str | os.PathLike[str], include_source: bool = True) -> None:
    """Write ``model`` (static) to ``path`` atomically (a temporary file renamed into place).
    With ``include_source`` the ONNX model it was compiled from is embedded (when known), for
    ``ember.load(path, rebuild=True)``; the model cache leaves it out (the cache key already
    names the source, and hashing it twice more doubled the time of a cache hit)."""
    from ..backends import backend_for

    program = model.program
    path = os.fspath(path)
    members: dict[str, bytes] = {}
    buf = io.BytesIO()
    np.savez(buf, **{f"c{k}": v for k, v in enumerate(program.consts.values())})
    names = {f"c{k}": n for k, n in enumerate(program.consts)}
    members["plan.json"] = json.dumps(dict(program.plan, const_names=names)).encode()
    members["weights.npz"] = buf.getvalue()
    if program.module is not None:
        for name, data in backend_for(program.target).serialize(program.module).items():
            members[f"module/{name}"] = data
    source = (model.source or {}) if include_source else {}
    if isinstance(source.get("onnx"), bytes):
        members["source/model.onnx"] = source["onnx"]
        members["source/options.json"] = json.dumps(source.get("options", {})).encode()
    manifest = {"format": FORMAT, "ember": __version__,
                "members": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in members.items()}}
    tmp_zip = path + ".tmp"
    with zipfile.ZipFile(tmp_zip, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in members.items():
            # weights (in .npz and in the embedded .onnx) and object code barely compress, and
            # deflating 100 MB of them took 3 s of a ResNet-50 compile (the model cache saves)
            stored = n.endswith((".npz", ".bin", ".o", ".onnx"))
            z.writestr(n, d, compress_type=zipfile.ZIP_STORED if stored else None)
    os.replace(tmp_zip, path)


def read_members(path: str, data: bytes | None = None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and every member of a saved model (the file ``path``, or the bytes ``data``
    named ``path`` in messages), each checked against the manifest's size and digest
    (:func:`ember.backends.cpu.file.read_checked`: no duplicate, unlisted or unsafe names, sizes
    checked before anything is decompressed). Raises ModelFormatError naming the file and the
    problem."""
    from ..backends.cpu.file import read_checked, read_manifest

    try:
        z = zipfile.ZipFile(io.BytesIO(data) if data is not None else path)
    except FileNotFoundError as exc:
        raise ModelFormatError(f"{path} does not exist") from exc
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise ModelFormatError(f"{path} is not a model saved by ember (Model.save): {exc}") from exc
    with z:
        try:
            manifest = read_manifest(z, path)
        except KeyError as exc:
            if "plan.json" in z.namelist():
                raise ModelFormatError(
                    f"{path} was saved by an older ember (format ember-model/1, which loaded a shared library); "
                    f"this ember reads {FORMAT}: compile the model again and save it") from exc
            raise ModelFormatError(f"{path} is not a model saved by ember: it has no manifest.json") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            got = manifest.get("format") if isinstance(manifest, dict) else None
            raise ModelFormatError(f"{path} has format {got!r}; this ember reads {FORMAT}")
        try:
            members = read_checked(z, manifest.get("members"), path, MAX_MEMBER_BYTES)
        except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
            raise ModelFormatError(f"{path} is damaged: {exc}") from exc
    for name in ("plan.json", "weights.npz"):
        if name not in members:
            raise ModelFormatError(f"{path}: the model has no {name}")
    return manifest, members


def load_model(path: str | os.PathLike[str], data: bytes | None = None) -> Model:
    """Load a model written by :func:`save_model` from the file ``path`` (or from ``data``, the
    file's bytes, ``path`` then only naming it in messages); no compiler runs and nothing in the
    file executes (``ember.load(path, rebuild=True)`` compiles the embedded source instead)."""
    from ..backends import backend_for

    path = os.fspath(path)
    _, members = read_members(path, data)
    plan, consts = _plan_and_weights(members, path)
    from .plan_check import check_plan, check_plan_module

    check_plan(plan, consts, path)
    target = plan["target"]
    parts = {n[len("module/"):]: d for n, d in members.items() if n.startswith("module/")}
    module: Any = None
    if parts:
        try:
            backend = backend_for(target)
        except EmberError as exc:
            raise ModelFormatError(f"{path}: {exc}") from exc
        try:
            module = backend.load(parts)
        except ModelFormatError as exc:
            raise ModelFormatError(f"{path}: {exc}") from exc
    check_plan_module(plan, module, path)
    source = None
    if "source/model.onnx" in members:
        source = {"onnx": members["source/model.onnx"], "options": _options(members, path)}
    return Model(Program(plan, module, consts), source=source)


def _plan_and_weights(members: dict[str, bytes], path: str) -> tuple[Any, dict[str, np.ndarray]]:
    """The parsed plan and the constants (by name) of a saved model's members; only plain
    arrays are read (no pickles), and each array's shape and dtype come from the ``.npy``
    header, which NumPy validates."""
    try:
        plan = json.loads(members["plan.json"])
    except (ValueError, RecursionError) as exc:
        raise ModelFormatError(f"{path}: plan.json is unreadable ({exc})") from exc
    if not isinstance(plan, dict):
        raise ModelFormatError(f"{path}: the plan is not an object")
    names = plan.get("const_names")
    if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
        raise ModelFormatError(f"{path}: the plan's const_names is not a mapping of names")
    consts: dict[str, np.ndarray] = {}
    try:
        with np.load(io.BytesIO(members["weights.npz"]), allow_pickle=False) as weights:
            if set(weights.files) != set(names):
                raise ModelFormatError(f"{path}: weights.npz does not hold exactly the constants the plan names")
            for key in weights.files:
                consts[names[key]] = np.array(weights[key])
    except ModelFormatError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, TypeError) as exc:
        raise ModelFormatError(f"{path}: the weights are unreadable ({exc})") from exc
    except MemoryError as exc:
        raise ModelFormatError(f"{path}: the weights do not fit in memory") from exc
    if len(consts) != len(names):
        raise ModelFormatError(f"{path}: two constants of the plan have the same name")
    return plan, consts


def _options(members: dict[str, bytes], path: str) -> dict[str, Any]:
    try:
        opts = json.loads(members.get("source/options.json", b"{}"))
    except (ValueError, RecursionError) as exc:
        raise ModelFormatError(f"{path}: source/options.json is unreadable") from exc
    if not isinstance(opts, dict):
        raise ModelFormatError(f"{path}: source/options.json is not an object")
    return opts


def read_source(path: str | os.PathLike[str]) -> tuple[bytes, dict[str, Any]]:
    """The ONNX model a saved file embeds and the options it was compiled with (for
    ``ember.load(path, rebuild=True)``); ModelFormatError when it embeds none."""
    path = os.fspath(path)
    _, members = read_members(path)
    if "source/model.onnx" not in members:
        raise ModelFormatError(f"{path} embeds no source model, so it cannot be rebuilt; "
                               "save it from a model compiled from ONNX")
    return members["source/model.onnx"], _options(members, path)
