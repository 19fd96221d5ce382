"""``ember compile MODEL -o OUT.ember --target ...``: compile an ONNX model and save it."""

from __future__ import annotations

import argparse
import os

from ..errors import ArgumentError
from .common import add_model_options, check_output_paths, open_model, reported


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``compile``."""
    p = sub.add_parser("compile", help="compile an ONNX model and save it as a .ember file",
                       description="Compile an ONNX model for a target and save the compiled model "
                                   "(ember run OUT.ember, or ember.load in Python).")
    add_model_options(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.ember", help="where the compiled model goes")
    p.add_argument("--no-cache", action="store_true", help="compile again even when the compile cache has the model")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compile ``args.model`` and save it to ``args.output``."""
    with reported("compile") as status:
        if args.model.endswith(".ember"):
            raise ArgumentError(f"{args.model!r} is compiled already; give the ONNX model")
        check_output_paths(args.output)
        model, secs = open_model(args, use_cache=not args.no_cache)
        model.save(args.output)
        kernels = f"{model.num_kernels} kernel(s)" if model.is_static else "compiled per input shape"
        print(f"ember compile: {args.model} -> {args.output} ({os.path.getsize(args.output) / 2**20:.2f} MiB; "
              f"target {model.target}, {kernels}, {secs:.1f} s)")
        for s in model.inputs:
            print(f"  input  {s.name}: {s.dtype}{list(s.shape)}")
        for name in model.output_names:
            print(f"  output {name}")
        return 0
    return status[0]
