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

from ..version import __version__
from ..errors import EmberError, ModelFormatError
from .model import Model
from .program import Program

FORMAT = "ember-model/2"
#: Largest member accepted (bytes): a guard against archives that claim absurd sizes.
MAX_MEMBER_BYTES = 1 << 36


def save_model(model: Model, path: str | os.PathLike[str]) -> None:
    """Write ``model`` (static) to ``path`` atomically (a temporary file renamed into place)."""
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
    source = model.source or {}
    if isinstance(source.get("onnx"), bytes):
        members["source/model.onnx"] = source["onnx"]
        members["source/options.json"] = json.dumps(source.get("options", {})).encode()
    manifest = {"format": FORMAT, "ember": __version__,
                "members": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in members.items()}}
    tmp_zip = path + ".tmp"
    with zipfile.ZipFile(tmp_zip, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in members.items():
            # floats and object code barely compress
            z.writestr(n, d, compress_type=zipfile.ZIP_STORED if n.endswith((".npz", ".bin", ".o")) else None)
    os.replace(tmp_zip, path)


def read_members(path: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and every member of a saved model, each checked against the manifest's size
    and digest. Raises ModelFormatError naming the file and the problem."""
    try:
        z = zipfile.ZipFile(path)
    except FileNotFoundError as exc:
        raise ModelFormatError(f"{path} does not exist") from exc
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise ModelFormatError(f"{path} is not a model saved by ember (Model.save): {exc}") from exc
    with z:
        try:
            manifest = json.loads(z.read("manifest.json"))
        except KeyError as exc:
            if "plan.json" in z.namelist():
                raise ModelFormatError(
                    f"{path} was saved by an older ember (format ember-model/1, which loaded a shared library); "
                    f"this ember reads {FORMAT}: compile the model again and save it") from exc
            raise ModelFormatError(f"{path} is not a model saved by ember: it has no manifest.json") from exc
        except (ValueError, zipfile.BadZipFile, OSError) as exc:
            raise ModelFormatError(f"{path}: manifest.json is unreadable ({exc})") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            got = manifest.get("format") if isinstance(manifest, dict) else None
            raise ModelFormatError(f"{path} has format {got!r}; this ember reads {FORMAT}")
        listed = manifest.get("members")
        if not isinstance(listed, dict):
            raise ModelFormatError(f"{path}: the manifest lists no members")
        members: dict[str, bytes] = {}
        for name, info in listed.items():
            try:
                size, digest = int(info["size"]), str(info["sha256"])
                stored = z.getinfo(name).file_size
            except (KeyError, TypeError, ValueError) as exc:
                raise ModelFormatError(f"{path}: member {name!r} is missing or its manifest entry is bad") from exc
            if size < 0 or size > MAX_MEMBER_BYTES or stored != size:
                raise ModelFormatError(f"{path}: member {name!r} has {stored} bytes, the manifest says {size}")
            try:
                data = z.read(name)
            except (OSError, zipfile.BadZipFile, ValueError) as exc:
                raise ModelFormatError(f"{path}: member {name!r} cannot be read ({exc})") from exc
            if hashlib.sha256(data).hexdigest() != digest:
                raise ModelFormatError(f"{path}: member {name!r} does not match its digest (edited or corrupted)")
            members[name] = data
    return manifest, members


def load_model(path: str | os.PathLike[str]) -> Model:
    """Load a model written by :func:`save_model`; no compiler runs and nothing in the file
    executes (``ember.load(path, rebuild=True)`` compiles the embedded source instead)."""
    from ..backends import backend_for

    path = os.fspath(path)
    _, members = read_members(path)
    try:
        plan = json.loads(members["plan.json"])
        weights = np.load(io.BytesIO(members["weights.npz"]), allow_pickle=False)
        names = plan["const_names"]
        consts = {names[k]: np.array(weights[k]) for k in weights.files}
        target = str(plan["target"])
    except (KeyError, ValueError, TypeError, OSError, zipfile.BadZipFile) as exc:
        raise ModelFormatError(f"{path}: the plan or the weights are unreadable ({exc})") from exc
    from .plan_check import check_plan

    check_plan(plan, consts, path)
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
    source = None
    if "source/model.onnx" in members:
        source = {"onnx": members["source/model.onnx"], "options": _options(members, path)}
    return Model(Program(plan, module, consts), source=source)


def _options(members: dict[str, bytes], path: str) -> dict[str, Any]:
    try:
        opts = json.loads(members.get("source/options.json", b"{}"))
    except ValueError as exc:
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
