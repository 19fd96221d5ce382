"""What the ``ember`` subcommands share: model options, reading inputs from ``.npy`` files,
random inputs, compiling or loading a model, reporting errors."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import ArgumentError, EmberError
from ..model.model import Model
from ..model.progress import quiet as quiet_progress

PRECISIONS = ("float32", "float16", "bfloat16", "tf32")


def add_model_options(p: argparse.ArgumentParser, target: bool = True, precision: bool = True) -> None:
    """MODEL plus ``--target``, ``--precision``, ``--input-shape`` and ``--quiet``."""
    p.add_argument("model", help="an ONNX file (or, where accepted, a compiled .ember file)")
    if target:
        p.add_argument("--target", default="llvm", help="llvm (default: this CPU), cuda, rocm, with options "
                       "(\"llvm -mcpu=skylake-avx512\", \"cuda -arch=sm_90\")")
    if precision:
        p.add_argument("--precision", default="float32", choices=PRECISIONS,
                       help="compute in this precision (inputs and outputs keep their types; default float32)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...", type=shape_spec,
                   help="fix the shape of an input (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar while compiling")


def add_input_options(p: argparse.ArgumentParser, required: bool = False) -> None:
    """``--input NAME=FILE.npy`` (repeatable) and ``--seed`` for the inputs not given."""
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input's value from a NumPy .npy file (repeatable)"
                   + ("" if required else "; inputs not given get random values"))
    if not required:
        p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")


def add_timing_options(p: argparse.ArgumentParser, warmup: int, repeat: int, what: str) -> None:
    """``--warmup`` (untimed ``what`` first) and ``--repeat`` (timed ``what``) with defaults."""
    p.add_argument("--warmup", type=int, default=warmup, help=f"untimed {what} first (default {warmup})")
    p.add_argument("--repeat", type=int, default=repeat, help=f"timed {what} (default {repeat})")


def add_measure_options(p: argparse.ArgumentParser, warmup: int, repeat: int, what: str, compare_help: str) -> None:
    """The options of the commands that run a model to measure it (``bench``, ``profile``): the
    model's (:func:`add_model_options`), its inputs' (:func:`add_input_options`), ``--warmup`` and
    ``--repeat`` of ``what`` (:func:`add_timing_options`) and ``--compare onnxruntime``
    (``compare_help`` says what it adds)."""
    add_model_options(p)
    add_input_options(p)
    add_timing_options(p, warmup=warmup, repeat=repeat, what=what)
    p.add_argument("--compare", choices=("onnxruntime",), default=None, help=compare_help)


def open_measured(args: argparse.Namespace, *outputs: str | None) -> tuple[Model, float, dict[str, np.ndarray]]:
    """What a measuring command starts with: its output paths checked (``outputs``, before any
    work), the model opened (:func:`open_model`: the model and the seconds it took) and the
    inputs of its runs (:func:`model_inputs`)."""
    check_output_paths(*outputs)
    model, secs = open_model(args)
    return model, secs, model_inputs(args, model)


def shape_spec(spec: str) -> tuple[str, list[int]]:
    """``"x=1,3,224,224"`` -> ``("x", [1, 3, 224, 224])`` (an argparse ``type``: a bad spec is a
    usage error)."""
    name, eq, dims = spec.partition("=")
    try:
        shape = [int(d) for d in dims.split(",") if d.strip()]
    except ValueError:
        shape = []
    if not name or not eq or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{spec!r}: give NAME=D0,D1,... with non-negative integer dimensions")
    return name, shape


def parse_shapes(specs: list[tuple[str, list[int]]]) -> dict[str, list[int]] | None:
    """The ``--input-shape`` options as name -> shape (None when there are none)."""
    return dict(specs) or None


def read_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    """The arrays of ``--input NAME=FILE.npy`` options. ArgumentError naming the input when the
    spec is malformed, the file is missing, not a ``.npy`` file or holds no plain array."""
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        if not name or not eq or not path:
            raise ArgumentError(f"--input {spec!r}: give NAME=FILE.npy")
        if name in out:
            raise ArgumentError(f"--input: input {name!r} is given twice")
        if not os.path.isfile(path):
            raise ArgumentError(f"input {name!r}: file {path!r} does not exist")
        if not path.endswith(".npy"):
            raise ArgumentError(f"input {name!r}: {path!r} is not a .npy file (save the array with numpy.save)")
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise ArgumentError(f"input {name!r}: {path!r} is not a readable .npy file ({exc})") from exc
        if not isinstance(arr, np.ndarray) or arr.dtype.hasobject or arr.dtype.fields is not None:
            raise ArgumentError(f"input {name!r}: {path!r} holds no plain numeric array")
        out[name] = arr
    return out


def check_inputs(model: Model, given: dict[str, np.ndarray]) -> None:
    """ArgumentError naming the input, what the model expects and what was given, for an
    unknown input name, a wrong dtype or a wrong size of a fixed dimension (symbolic
    dimensions, given by name, accept any size; the model checks their constraints)."""
    specs = {s.name: s for s in model.inputs}
    for name, arr in given.items():
        spec = specs.get(name)
        if spec is None:
            raise ArgumentError(f"the model has no input {name!r} (inputs: {', '.join(specs)})")
        if spec.dtype == "?":
            continue
        if spec.dtype == "string":  # text: a NumPy unicode or bytes array (np.save of np.array(["..."]))
            if arr.dtype.kind not in "US":
                raise ArgumentError(f"input {name!r}: expected text, the file holds {arr.dtype} (save the words "
                                    "with numpy.save(path, numpy.array([...])))")
        elif str(arr.dtype) != spec.dtype:
            raise ArgumentError(f"input {name!r}: expected dtype {spec.dtype}, the file holds {arr.dtype} "
                                f"(convert it with x.astype({spec.dtype!r}))")
        if len(arr.shape) != len(spec.shape) or any(
                isinstance(d, int) and d != g for d, g in zip(spec.shape, arr.shape)):
            want = "(" + ", ".join(str(d) for d in spec.shape) + ")"
            raise ArgumentError(f"input {name!r}: expected shape {want}, the file holds {tuple(arr.shape)}")


def random_inputs(model: Model, given: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """``given`` plus random values for every other input (floats in [-1, 1), integers in
    [0, 10), booleans); ArgumentError when an input has a symbolic dimension, is text or has an
    unknown dtype."""
    rng = np.random.default_rng(seed)
    out = dict(given)
    for spec in model.inputs:
        if spec.name in out:
            continue
        if spec.dtype in ("?", "string") or not all(isinstance(d, int) for d in spec.shape):
            raise ArgumentError(f"input {spec.name!r} has shape {spec.shape} and dtype {spec.dtype}: give its value "
                                f"with --input {spec.name}=FILE.npy (or fix its shape with --input-shape)")
        dt = np.dtype(spec.dtype)
        shape = tuple(int(d) for d in spec.shape)
        if dt.kind == "f":
            out[spec.name] = rng.uniform(-1, 1, shape).astype(dt)
        elif dt.kind in "iu":
            out[spec.name] = rng.integers(0, 10, shape).astype(dt)
        elif dt.kind == "b":
            out[spec.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise ArgumentError(f"input {spec.name!r} of dtype {dt}: give its value with --input {spec.name}=FILE.npy")
    return out


def open_model(args: argparse.Namespace, use_cache: bool = True) -> tuple[Model, float]:
    """The model of ``args.model``: a compiled ``.ember`` file loaded, else the ONNX file
    compiled for ``args.target`` with the precision and input shapes asked for; and the
    seconds it took."""
    from ..driver import compile as compile_model
    from ..driver import load

    path = args.model
    if not os.path.exists(path):
        raise ArgumentError(f"model file {path!r} does not exist")
    t0 = time.perf_counter()
    with quiet_progress(getattr(args, "quiet", False)):
        if path.endswith(".ember"):
            model = load(path)
        else:
            model = compile_model(path, target=getattr(args, "target", "llvm"),
                                  input_shapes=parse_shapes(getattr(args, "input_shape", [])),
                                  precision=getattr(args, "precision", "float32"), use_cache=use_cache)
    return model, time.perf_counter() - t0


def model_inputs(args: argparse.Namespace, model: Model) -> dict[str, np.ndarray]:
    """The inputs of one run: the ``--input`` files (checked against the model), random values
    for the others (when the command has ``--seed``)."""
    given = read_inputs(args.input)
    check_inputs(model, given)
    if hasattr(args, "seed"):
        return random_inputs(model, given, args.seed)
    missing = [n for n in model.input_names if n not in given]
    if missing:
        raise ArgumentError(f"missing input(s) {', '.join(missing)}: give each with --input NAME=FILE.npy")
    return given


@contextlib.contextmanager
def reported(command: str) -> Iterator[list[int]]:
    """Turns an EmberError into ``ember COMMAND: message`` on stderr and exit status 1 (the
    yielded list holds the status)."""
    status = [0]
    try:
        yield status
    except EmberError as exc:
        print(f"ember {command}: {exc}", file=sys.stderr)
        status[0] = 1


def check_output_paths(*paths: str | None) -> None:
    """ArgumentError for an output path whose folder does not exist (before any work is done)."""
    for path in paths:
        if path is not None:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise ArgumentError(f"cannot write {path!r}: the folder {folder!r} does not exist")


def describe(arr: Any) -> str:
    """``float32[1, 1000]`` for an array (``string[3]`` for text: an object array)."""
    a = np.asarray(arr)
    return f"{'string' if a.dtype == object else a.dtype}[{', '.join(str(d) for d in a.shape)}]"
