"""The saved-model file format (``ember-model/2``, and ``ember-model/3`` for models with host
stages): data plus object code, nothing executable at load time.

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

A model with symbolic input dimensions (:mod:`ember.model.dynamic`) is saved instead as
``dynamic.json`` (the declared inputs — sizes and symbol names —, input and output names, the
target, ``max_variants`` and, per compiled variant, its input shapes, member name and which of
its constants are shared), its ``source/`` members (what compiles a variant for a new shape after
loading), ``shared.npz`` (constants two or more variants share, stored once) and
``variants/<k>.ember``: each variant a saved model of the format above without its shared
constants, loaded through the same checks with them given back (and checked against the
declared dimensions).

A model with host stages (:mod:`ember.host_stages`) is saved as ``ember-model/3`` (the only
difference from ``/2``: it has ``host.json``, so an older ember refuses it by name): ``host.json``
(input and output names, the target, the stage split as data — per stage, compiled or not, and
the positions of its nodes in the ONNX model —, and per compiled variant its stage and member),
the ``source/`` members (the validated ONNX model: loading rebuilds the stages from it and
refuses a split that differs from the one it computes) and ``variants/<k>.ember``, each compiled
variant of a compiled stage as a saved static model.

Loading runs no code from the file: no pickle, no ``eval``, no ``dlopen``; the module's parts go
through the backend's checking loader. A file that is not what ember writes raises
:class:`~ember.errors.ModelFormatError` naming what is wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import EmberError, ModelFormatError
from ..version import __version__
from .model import Model
from .program import Program

FORMAT = "ember-model/2"
#: Files of models with host stages (``host.json``); other models are still written as FORMAT,
#: so an older ember loads them, and refuses these by their format name.
HOST_FORMAT = "ember-model/3"
#: Largest member accepted (bytes): a guard against archives that claim absurd sizes.
MAX_MEMBER_BYTES = 1 << 36


def save_model(model: Model, path: str | os.PathLike[str], include_source: bool = True) -> None:
    """Write ``model`` (static, or with symbolic dimensions) to ``path`` atomically (a temporary
    file renamed into place).
    With ``include_source`` the ONNX model it was compiled from is embedded (when known), for
    ``ember.load(path, rebuild=True)``; the model cache leaves it out (the cache key already
    names the source, and hashing it twice more doubled the time of a cache hit)."""
    from .dynamic import ShapeSpecializer

    path = os.fspath(path)
    if isinstance(model._specializer, ShapeSpecializer):
        _write(path, _per_shape_members(model, model._specializer))
        return
    saved_members = getattr(model._specializer, "saved_members", None)  # host stages (ember.host_stages)
    if saved_members is not None:
        source = _source_members(model)
        if not source:
            raise EmberError(f"cannot save {path}: a model with host stages is saved with its ONNX source, which "
                             "is unknown here (weights in external data files): compile it from one file")
        _write(path, {**saved_members(), **source}, HOST_FORMAT)
        return
    members = _static_members(model.program)
    if include_source:
        members.update(_source_members(model))
    _write(path, members)


def _static_members(program: Program, leave_out: frozenset[str] = frozenset()) -> dict[str, bytes]:
    """The plan, weights and module members of a static program; the constants named in
    ``leave_out`` are not stored (a model with symbolic dimensions stores them once for all its
    variants, and gives them back when loading)."""
    from ..backends import backend_for

    kept = [(n, v) for n, v in program.consts.items() if n not in leave_out]
    buf = io.BytesIO()
    np.savez(buf, **{f"c{k}": v for k, (_, v) in enumerate(kept)})
    names = {f"c{k}": n for k, (n, _) in enumerate(kept)}
    members = {"plan.json": json.dumps(dict(program.plan, const_names=names)).encode(), "weights.npz": buf.getvalue()}
    if program.module is not None:
        for name, data in backend_for(program.target).serialize(program.module).items():
            members[f"module/{name}"] = data
    return members


def _source_members(model: Model) -> dict[str, bytes]:
    """The ``source/`` members of ``model`` (none when its source is unknown)."""
    source = model.source or {}
    if not isinstance(source.get("onnx"), bytes):
        return {}
    return {"source/model.onnx": source["onnx"], "source/options.json": json.dumps(source.get("options", {})).encode()}


def _per_shape_members(model: Model, spec: Any) -> dict[str, bytes]:
    """The members of a model with symbolic dimensions: ``dynamic.json``, its source, the
    constants two or more variants share (the weights, usually) once in ``shared.npz``, and each
    static variant as a saved model of its own holding the rest (variants specialised further,
    per input value or structure, are not stored: they compile again after loading)."""
    kept = [(shapes, v) for shapes, v in spec.kept() if v.is_static]
    files, members = variant_files([v.program for _, v in kept])
    variants = []
    for k, ((shapes, _), (data, from_shared)) in enumerate(zip(kept, files)):
        members[f"variants/{k}.ember"] = data
        variants.append({"shapes": {n: list(s) for n, s in shapes.items()}, "member": f"variants/{k}.ember",
                         "shared": from_shared})
    members["dynamic.json"] = json.dumps({
        "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in spec.declared],
        "input_names": spec.input_names, "output_names": spec.output_names, "target": spec.target,
        "max_variants": spec.max_variants, "variants": variants}).encode()
    members.update(_source_members(model))
    return members


def variant_files(programs: list[Program]) -> tuple[list[tuple[bytes, dict[str, str]]], dict[str, bytes]]:
    """Compiled variants of one model, each as the bytes of a saved static model without the
    constants two or more variants hold alike (the same array, or arrays of equal dtype, shape
    and bytes: the weights, compiled once per variant), with, per variant, its constant names ->
    keys of those shared constants; and the members holding them once (``shared.npz``, none when
    nothing is shared). :func:`load_model` gives them back through ``shared``."""
    digests: dict[int, tuple[str, tuple[int, ...], str]] = {}

    def key(arr: np.ndarray) -> tuple[str, tuple[int, ...], str]:
        if id(arr) not in digests:  # the same array (shared by variants) is hashed once
            raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            digests[id(arr)] = (arr.dtype.str, tuple(arr.shape), hashlib.sha256(raw).hexdigest())
        return digests[id(arr)]

    users: dict[Any, int] = {}
    for p in programs:
        for k in {key(a) for a in p.consts.values()}:
            users[k] = users.get(k, 0) + 1
    shared: dict[Any, tuple[str, np.ndarray]] = {}
    for p in programs:
        for arr in p.consts.values():
            if users[key(arr)] > 1 and key(arr) not in shared:
                shared[key(arr)] = (f"s{len(shared)}", arr)
    files = []
    for p in programs:
        from_shared = {n: shared[key(a)][0] for n, a in p.consts.items() if key(a) in shared}
        files.append((static_file_bytes(p, frozenset(from_shared)), from_shared))
    members: dict[str, bytes] = {}
    if shared:
        buf = io.BytesIO()
        np.savez(buf, **dict(shared.values()))
        members["shared.npz"] = buf.getvalue()
    return files, members


def static_file_bytes(program: Program, leave_out: frozenset[str] = frozenset()) -> bytes:
    """The bytes of a saved static model of ``program`` (without the constants in ``leave_out``):
    what a model holding compiled variants stores for each."""
    with tempfile.TemporaryDirectory() as tmp:
        vpath = os.path.join(tmp, "variant.ember")
        _write(vpath, _static_members(program, leave_out))
        with open(vpath, "rb") as f:
            return f.read()


def _write(path: str, members: dict[str, bytes], fmt: str = FORMAT) -> None:
    """Write ``members`` and their manifest (format ``fmt``) as a zip archive at ``path``, atomically."""
    manifest = {"format": fmt, "ember": __version__,
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
        except zlib.error as exc:  # a damaged, deflated manifest
            raise ModelFormatError(f"{path} is damaged: {exc}") from exc
        fmt = manifest.get("format") if isinstance(manifest, dict) else None
        if fmt not in (FORMAT, HOST_FORMAT):
            raise ModelFormatError(f"{path} has format {fmt!r}; this ember reads {FORMAT} and {HOST_FORMAT}")
        try:
            members = read_checked(z, manifest.get("members"), path, MAX_MEMBER_BYTES)
        except (OSError, zipfile.BadZipFile, ValueError, EOFError, zlib.error) as exc:  # zlib: a damaged member
            raise ModelFormatError(f"{path} is damaged: {exc}") from exc
    if (fmt == HOST_FORMAT) != ("host.json" in members):
        raise ModelFormatError(f"{path}: format {fmt} {'needs' if fmt == HOST_FORMAT else 'has no'} host.json")
    for name in ("plan.json", "weights.npz") if not {"dynamic.json", "host.json"} & set(members) else ():
        if name not in members:
            raise ModelFormatError(f"{path}: the model has no {name}")
    return manifest, members


def load_model(path: str | os.PathLike[str], data: bytes | None = None, static_only: bool = False,
               shared: dict[str, np.ndarray] | None = None) -> Model:
    """Load a model written by :func:`save_model` from the file ``path`` (or from ``data``, the
    file's bytes, ``path`` then only naming it in messages); no compiler runs and nothing in the
    file executes (``ember.load(path, rebuild=True)`` compiles the embedded source instead).
    ``static_only`` refuses a model with symbolic dimensions (a variant inside one); ``shared``
    gives constants stored outside the file (a variant's, kept once by the model holding it),
    checked against the plan with the rest."""
    from ..backends import backend_for

    path = os.fspath(path)
    _, members = read_members(path, data)
    if "dynamic.json" in members or "host.json" in members:
        if static_only:
            raise ModelFormatError(f"{path}: a variant must be a fixed-shape model")
        return _load_per_shape(members, path) if "dynamic.json" in members else _load_host(members, path)
    plan, consts = _plan_and_weights(members, path)
    if shared:
        if set(shared) & set(consts):
            raise ModelFormatError(f"{path}: constants {sorted(set(shared) & set(consts))[:5]} are stored twice")
        consts.update(shared)
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


def _load_per_shape(members: dict[str, bytes], path: str) -> Model:
    """A model with symbolic dimensions from its members: ``dynamic.json`` checked field by
    field, each variant loaded as a saved model and checked against the declared dimensions.
    The model cannot compile new variants until the driver gives it a compiler (from the
    embedded source)."""
    from ..errors import ArgumentError
    from .dynamic import ShapeSpecializer, check_shapes
    from .program import TensorSpec

    desc = _json_member(members, "dynamic.json", path)
    bad = ModelFormatError(f"{path}: dynamic.json is not what ember writes (inputs, input_names, output_names, "
                           "target, max_variants, variants)")
    if not isinstance(desc, dict) or not _names(desc.get("input_names")) or not _names(desc.get("output_names")) \
            or not isinstance(desc.get("target"), str) or not isinstance(desc.get("inputs"), list) \
            or type(desc.get("max_variants")) is not int or desc["max_variants"] < 1 \
            or not isinstance(desc.get("variants"), list):
        raise bad
    specs = []
    for i in desc["inputs"]:
        if not isinstance(i, dict) or not isinstance(i.get("name"), str) or not isinstance(i.get("dtype"), str) \
                or not isinstance(i.get("shape"), list) or i["name"] not in desc["input_names"] \
                or not all((type(d) is int and d >= 0) or isinstance(d, str) for d in i["shape"]):
            raise bad
        specs.append(TensorSpec(i["name"], tuple(i["shape"]), i["dtype"]))
    spec = ShapeSpecializer(specs, desc["input_names"], desc["output_names"], desc["target"], None,
                            max(desc["max_variants"], len(desc["variants"]), 1))
    pool = _shared_weights(members, path)
    for k, v in enumerate(desc["variants"]):
        if not isinstance(v, dict) or not isinstance(v.get("member"), str) or v["member"] not in members \
                or not v["member"].startswith("variants/") or not isinstance(v.get("shapes"), dict) \
                or not _shared_ok(v, pool):
            raise bad
        name = f"{path} (variant {k})"
        try:
            shapes = {s.name: tuple(int(d) for d in v["shapes"][s.name]) for s in specs}
            check_shapes(specs, shapes)
        except (KeyError, TypeError, ValueError, ArgumentError) as exc:
            raise ModelFormatError(f"{name}: its input shapes do not fit the declared dimensions ({exc})") from exc
        variant = load_model(name, data=members[v["member"]], static_only=True,
                             shared={n: pool[key] for n, key in v.get("shared", {}).items()})
        got = {s.name: tuple(int(d) for d in s.shape) for s in variant.inputs}
        if variant.target != spec.target or any(got.get(n) != shp for n, shp in shapes.items()):
            raise ModelFormatError(f"{name}: the compiled model takes {got} on {variant.target!r}, "
                                   f"dynamic.json says {shapes} on {spec.target!r}")
        spec.add(shapes, variant)
    spec.max_variants = desc["max_variants"]
    source = None
    if "source/model.onnx" in members:
        source = {"onnx": members["source/model.onnx"], "options": _options(members, path)}
    return Model(specializer=spec, source=source)


@dataclass
class SavedHostStages:
    """A model with host stages as :func:`load_model` reads it: the stage split (per stage:
    compiled or not, the positions of its nodes in the ONNX model) and the compiled variants of
    its compiled stages (stage index, static model), checked as data and as saved models; ``path``
    names the file in messages. It runs nothing: ``ember.load`` rebuilds the stages from the
    embedded ONNX source, checks the split against this one and hands the variants over
    (:func:`ember.host_stages.restore_host_model`)."""

    input_names: list[str]
    output_names: list[str]
    target: str
    stages: list[tuple[bool, list[int]]]
    variants: list[tuple[int, Model]]
    path: str = ""

    def program_for(self, given: dict[str, Any]) -> Any:
        """Refused: the stages are rebuilt by ``ember.load`` (which gives them a compiler)."""
        raise EmberError("this model has host stages and was read without a compiler: load it with ember.load")


#: Most stages and compiled variants a host-stage file may list (a guard against absurd files).
MAX_HOST_ENTRIES = 1 << 16


def _load_host(members: dict[str, bytes], path: str) -> Model:
    """A model with host stages from its members: ``host.json`` checked field by field, each
    compiled variant loaded as a saved model (through every check of one) for the file's target."""
    desc = _json_member(members, "host.json", path)
    bad = ModelFormatError(f"{path}: host.json is not what ember writes (input_names, output_names, target, "
                           "stages of node positions, variants of compiled stages)")
    if not isinstance(desc, dict) or not _names(desc.get("input_names")) or not _names(desc.get("output_names")) \
            or not isinstance(desc.get("target"), str) or not isinstance(desc.get("stages"), list) \
            or not isinstance(desc.get("variants"), list) \
            or len(desc["stages"]) > MAX_HOST_ENTRIES or len(desc["variants"]) > MAX_HOST_ENTRIES:
        raise bad
    stages: list[tuple[bool, list[int]]] = []
    for st in desc["stages"]:
        if not isinstance(st, dict) or type(st.get("compiled")) is not bool or not isinstance(st.get("nodes"), list) \
                or not all(type(n) is int and n >= 0 for n in st["nodes"]):
            raise bad
        stages.append((st["compiled"], list(st["nodes"])))
    if "source/model.onnx" not in members:
        raise ModelFormatError(f"{path}: a model with host stages needs its source (source/model.onnx)")
    variants: list[tuple[int, Model]] = []
    pool = _shared_weights(members, path)
    for k, v in enumerate(desc["variants"]):
        if not isinstance(v, dict) or type(v.get("stage")) is not int or not 0 <= v["stage"] < len(stages) \
                or not stages[v["stage"]][0] or not isinstance(v.get("member"), str) \
                or not v["member"].startswith("variants/") or v["member"] not in members or not _shared_ok(v, pool):
            raise bad
        variant = load_model(f"{path} (variant {k})", data=members[v["member"]], static_only=True,
                             shared={n: pool[key] for n, key in v.get("shared", {}).items()})
        if variant.target != desc["target"]:
            raise ModelFormatError(f"{path} (variant {k}): compiled for {variant.target!r}, the model for "
                                   f"{desc['target']!r}")
        variants.append((v["stage"], variant))
    spec = SavedHostStages(desc["input_names"], desc["output_names"], desc["target"], stages, variants, path)
    return Model(specializer=spec, source={"onnx": members["source/model.onnx"], "options": _options(members, path)})


def _shared_weights(members: dict[str, bytes], path: str) -> dict[str, np.ndarray]:
    """The constants the variants of a model with symbolic dimensions share (``shared.npz``,
    plain arrays only), by key."""
    if "shared.npz" not in members:
        return {}
    try:
        with np.load(io.BytesIO(members["shared.npz"]), allow_pickle=False) as weights:
            return {key: np.array(weights[key]) for key in weights.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, TypeError) as exc:
        raise ModelFormatError(f"{path}: shared.npz is unreadable ({exc})") from exc
    except MemoryError as exc:
        raise ModelFormatError(f"{path}: the shared weights do not fit in memory") from exc


def _json_member(members: dict[str, bytes], name: str, path: str) -> Any:
    """Member ``name`` parsed as JSON; ModelFormatError naming it when it is not JSON."""
    try:
        return json.loads(members[name])
    except (ValueError, RecursionError) as exc:
        raise ModelFormatError(f"{path}: {name} is unreadable ({exc})") from exc


def _shared_ok(variant: dict[str, Any], pool: dict[str, np.ndarray]) -> bool:
    """True when a variant entry's ``shared`` (optional) maps constant names to keys of ``pool``."""
    shared = variant.get("shared", {})
    return isinstance(shared, dict) and all(isinstance(n, str) and key in pool for n, key in shared.items())


def _names(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(n, str) for n in x)


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
