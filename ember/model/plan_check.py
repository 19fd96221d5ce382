"""Checks of a loaded model's plan against itself, its constants and its compiled module, before
anything runs or is allocated.

A saved model's plan (``plan.json``) drives the executor: it allocates the planned storages,
views them as values, and passes buffer addresses to kernels. A plan that is not consistent
(a step that reads a value nothing wrote, a value larger than its storage, a kernel given fewer
or smaller buffers than its signature says, a storage plan of tens of GiB) would make the
executor fail with a foreign exception or hand kernels memory they overrun. :func:`check_plan`
(plan and constants) and :func:`check_plan_module` (plan against the loaded module's function
signatures) raise :class:`~ember.errors.ModelFormatError` naming the inconsistency instead.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import EmberError, ModelFormatError

#: Most memory (bytes) a loaded plan may ask for per execution context (planned storages plus
#: the values allocated on each call); ``EMBER_MAX_PLANNED_BYTES`` overrides it.
MAX_PLANNED_BYTES = 16 << 30
#: Most values, steps or storages in one plan, and the most dimensions of one value.
MAX_ITEMS = 1 << 20
MAX_RANK = 64
_MAX_DIM = 1 << 48


def planned_bytes_limit() -> int:
    """The planned-memory limit in bytes: ``$EMBER_MAX_PLANNED_BYTES`` when it is a positive
    integer, else :data:`MAX_PLANNED_BYTES`."""
    env = os.environ.get("EMBER_MAX_PLANNED_BYTES", "")
    return int(env) if env.isdigit() and int(env) > 0 else MAX_PLANNED_BYTES


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _np_dtype(text: Any, what: str) -> np.dtype:
    """The NumPy dtype of a plan dtype name (a name ember knows, that NumPy can make)."""
    from ..ir.dtypes import dtype

    if not isinstance(text, str) or not text or len(text) > 32:
        raise ModelFormatError(f"{what}: the dtype {str(text)[:40]!r} is not a dtype name")
    try:
        if dtype(text).lanes != 1:
            raise ModelFormatError(f"{what}: the dtype {text!r} is a vector type")
        out = np.dtype(text)
    except EmberError as exc:
        raise ModelFormatError(f"{what}: {text!r} is not an ember dtype") from exc
    except TypeError as exc:
        raise ModelFormatError(f"{what}: NumPy has no dtype {text!r} (is ml_dtypes installed?)") from exc
    if out.kind not in "biufV" or out.itemsize == 0:
        raise ModelFormatError(f"{what}: {text!r} is not a numeric dtype")
    return out


def _shape(x: Any, what: str) -> list[int]:
    if not isinstance(x, list) or len(x) > MAX_RANK or not all(type(d) is int and 0 <= d < _MAX_DIM for d in x):
        raise ModelFormatError(f"{what}: the shape {str(x)[:60]} is not a list of at most {MAX_RANK} sizes >= 0")
    return x


def _name(x: Any, what: str) -> str:
    if not isinstance(x, str) or not x or len(x) > 4096:
        raise ModelFormatError(f"{what} is not a name")
    return x


def check_plan(plan: Any, consts: dict[str, np.ndarray], path: str) -> None:
    """Raise ModelFormatError (naming ``path`` and the problem) unless ``plan`` is a consistent
    program plan for the constants ``consts``:

    * ``values`` maps names to ``{shape: ints >= 0, dtype: a numeric ember dtype}``; the inputs,
      outputs and constants are values of exactly those shapes and dtypes;
    * ``steps`` are ``{"kind": "kernel", "func", "args", "nout"}`` or ``{"kind": "view", "src",
      "dst"}``; every name a step reads is an input, a constant or written by an earlier step,
      every name a step writes is a value that is neither an input nor a constant, a view keeps
      the dtype and the number of elements, and every output is available after the last step;
    * ``assign`` maps values to storage ids in range, each value no larger than its storage;
      ``storages`` are byte counts; the planned storages plus the values allocated on each call
      stay below :func:`planned_bytes_limit`;
    * ``target`` is a target string."""
    try:
        _check_plan(plan, consts)
    except ModelFormatError as exc:
        raise ModelFormatError(f"{path}: {exc}") from exc


def _check_plan(plan: Any, consts: dict[str, np.ndarray]) -> None:  # noqa: C901 - one pass over the plan
    from ..target import Target

    if not isinstance(plan, dict):
        raise ModelFormatError("the plan is not an object")
    for key, kind in (("inputs", list), ("outputs", list), ("values", dict), ("steps", list),
                      ("assign", dict), ("storages", list), ("target", str)):
        if not isinstance(plan.get(key), kind) or (kind is not str and len(plan[key]) > MAX_ITEMS):
            raise ModelFormatError(f"the plan's {key!r} is missing or not a {kind.__name__}")
    try:
        Target(plan["target"])
    except EmberError as exc:
        raise ModelFormatError(f"the plan names a bad target: {exc}") from exc
    values: dict[str, tuple[list[int], np.dtype, str]] = {}
    for name, info in plan["values"].items():
        what = f"value {name[:80]!r}"
        if not isinstance(info, dict):
            raise ModelFormatError(f"{what} is not {{shape, dtype}}")
        values[name] = (_shape(info.get("shape"), what), _np_dtype(info.get("dtype"), what), info["dtype"])
    for key in ("inputs", "outputs"):
        for j, spec in enumerate(plan[key]):
            what = f"{key[:-1]} {j}"
            if not isinstance(spec, dict):
                raise ModelFormatError(f"{what} is not {{name, shape, dtype}}")
            name = _name(spec.get("name"), what)
            if name not in values:
                raise ModelFormatError(f"{what} ({name!r}) is not a value of the plan")
            shape, _, dt = values[name]
            if _shape(spec.get("shape"), what) != shape or spec.get("dtype") != dt:
                raise ModelFormatError(f"{what} ({name!r}) is {spec.get('dtype')}{spec.get('shape')} but the plan's "
                                       f"value is {dt}{shape}")
    inputs = [s["name"] for s in plan["inputs"]]
    if len(set(inputs)) != len(inputs):
        raise ModelFormatError("the plan names an input twice")
    for name, arr in consts.items():
        if name not in values:
            raise ModelFormatError(f"constant {name[:80]!r} is not a value of the plan")
        shape, dt, text = values[name]
        if list(arr.shape) != shape or arr.dtype != dt:
            raise ModelFormatError(f"constant {name[:80]!r} in weights.npz is {arr.dtype}{list(arr.shape)} but the "
                                   f"plan says {text}{shape}")
        if name in inputs:
            raise ModelFormatError(f"{name[:80]!r} is both an input and a constant")
    available = set(inputs) | set(consts)
    fixed = set(available)
    written: set[str] = set()
    for j, st in enumerate(plan["steps"]):
        what = f"step {j}"
        if not isinstance(st, dict):
            raise ModelFormatError(f"{what} is not an object")
        if st.get("kind") == "view":
            src, dst = _name(st.get("src"), f"{what}'s source"), _name(st.get("dst"), f"{what}'s target")
            reads, writes = [src], [dst]
        elif st.get("kind") == "kernel":
            args, nout = st.get("args"), st.get("nout")
            if not isinstance(st.get("func"), str) or not st["func"].isidentifier():
                raise ModelFormatError(f"{what} names no kernel function")
            if not isinstance(args, list) or len(args) > 4096 or type(nout) is not int or not 0 <= nout <= len(args):
                raise ModelFormatError(f"{what} ({st['func']}) has no argument list or a bad output count")
            for a in args:
                _name(a, f"an argument of {what}")
            reads, writes = args[:len(args) - nout], args[len(args) - nout:]
        else:
            raise ModelFormatError(f"{what} has kind {st.get('kind')!r}, not 'kernel' or 'view'")
        for r in reads:
            if r not in values:
                raise ModelFormatError(f"{what} reads {r[:80]!r}, which is not a value of the plan")
            if r not in available:
                raise ModelFormatError(f"{what} reads {r[:80]!r} before any step writes it")
        for w in writes:
            if w not in values:
                raise ModelFormatError(f"{what} writes {w[:80]!r}, which is not a value of the plan")
            if w in fixed:
                raise ModelFormatError(f"{what} writes {w[:80]!r}, which is an input or a constant")
            available.add(w)
            written.add(w)
        if st["kind"] == "view":
            (s_shape, s_dt, _), (d_shape, d_dt, _) = values[reads[0]], values[writes[0]]
            if s_dt != d_dt or _numel(s_shape) != _numel(d_shape):
                raise ModelFormatError(f"{what} views {reads[0][:80]!r} ({s_dt}{s_shape}) as {writes[0][:80]!r} "
                                       f"({d_dt}{d_shape}): a view keeps the dtype and the number of elements")
    for spec in plan["outputs"]:
        if spec["name"] not in available:
            raise ModelFormatError(f"output {spec['name'][:80]!r} is computed by no step")
    storages = plan["storages"]
    if not all(type(n) is int and 0 <= n for n in storages):
        raise ModelFormatError("the plan's storages are not byte counts")
    total = sum(storages)
    for name, sid in plan["assign"].items():
        if name not in values:
            raise ModelFormatError(f"the memory plan assigns {name[:80]!r}, which is not a value of the plan")
        if type(sid) is not int or not 0 <= sid < len(storages):
            raise ModelFormatError(f"the memory plan puts {name[:80]!r} in storage {sid!r}, out of range "
                                   f"({len(storages)} storages)")
        shape, dt, text = values[name]
        need = _numel(shape) * dt.itemsize
        if need > storages[sid]:
            raise ModelFormatError(f"{name[:80]!r} ({text}{shape}, {need} bytes) does not fit its storage {sid} "
                                   f"({storages[sid]} bytes)")
    views = {st["dst"] for st in plan["steps"] if st["kind"] == "view"}
    for name in written - set(plan["assign"]) - views:
        shape, dt, _ = values[name]
        total += _numel(shape) * dt.itemsize
    limit = planned_bytes_limit()
    if total > limit:
        raise ModelFormatError(f"the plan asks for {total / 2**30:.1f} GiB of memory per execution context, over "
                               f"the limit of {limit / 2**30:.1f} GiB ember accepts from a file (set "
                               "EMBER_MAX_PLANNED_BYTES to allow more)")


def check_plan_module(plan: dict[str, Any], module: Any, path: str) -> None:
    """Raise ModelFormatError unless every kernel step of the (checked) ``plan`` names a
    function of ``module`` (the loaded module; None when the file has none) that takes exactly
    its arguments: one buffer per argument, no size parameters (a planned kernel has constant
    shapes), and per argument the plan value's dtype and number of elements (a plan whose
    shapes were shrunk against the compiled code is refused)."""
    values = plan["values"]
    for j, st in enumerate(plan["steps"]):
        if st["kind"] != "kernel":
            continue
        func = st["func"]
        if module is None:
            raise ModelFormatError(f"{path}: step {j} runs kernel {func}, but the file holds no compiled module")
        try:
            sig = module.get_function(func).sig
        except EmberError as exc:
            raise ModelFormatError(f"{path}: step {j} runs kernel {func}, which the compiled module lacks") from exc
        bufs = [p for p in sig["params"] if p["kind"] == "buffer"]
        if len(bufs) != len(sig["params"]) or sig["scalars"]:
            raise ModelFormatError(f"{path}: kernel {func} takes size or scalar parameters, which a planned step "
                                   "cannot pass")
        if len(bufs) != len(st["args"]):
            raise ModelFormatError(f"{path}: step {j} passes {len(st['args'])} buffers to kernel {func}, which takes "
                                   f"{len(bufs)}")
        for k, (name, p) in enumerate(zip(st["args"], bufs)):
            shape, dt = values[name]["shape"], values[name]["dtype"]
            want = p["shape"]
            if not all(type(d) is int for d in want):
                raise ModelFormatError(f"{path}: kernel {func} has symbolic shapes, which a planned step cannot pass")
            if dt != p["dtype"] or _numel(shape) != _numel(want):
                raise ModelFormatError(
                    f"{path}: step {j} passes {name[:80]!r} ({dt}{shape}) as argument {k} of kernel {func}, "
                    f"which was compiled for {p['dtype']}{want}")
