"""``ember run MODEL|OUT.ember --input NAME=FILE.npy ... [-o out.npz]``: run a model once."""

from __future__ import annotations

import argparse

import numpy as np

from ..errors import ArgumentError
from .common import (
    add_input_options,
    add_model_options,
    check_output_paths,
    describe,
    model_inputs,
    open_model,
    reported,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``run``."""
    p = sub.add_parser("run", help="run a model on inputs from .npy files",
                       description="Run a compiled .ember model (or compile an ONNX model first) on inputs read "
                                   "from .npy files; print the outputs or write them to an .npz file.")
    add_model_options(p)
    add_input_options(p, required=True)
    p.add_argument("-o", "--output", default=None, metavar="OUT.npz",
                   help="write the outputs (by output name) to this .npz file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``args.model`` on the ``--input`` files."""
    with reported("run") as status:
        if args.output is not None and not args.output.endswith(".npz"):
            raise ArgumentError(f"-o {args.output!r}: the outputs are written as an .npz file; name it OUT.npz")
        check_output_paths(args.output)
        model, _ = open_model(args)
        feeds = model_inputs(args, model)
        outs = model.run(**feeds)
        names = model.output_names
        if args.output is not None:
            np.savez(args.output, **{n: np.asarray(o) for n, o in zip(names, outs)})
            print(f"ember run: {len(outs)} output(s) written to {args.output}")
        for n, o in zip(names, outs):
            print(f"{n}: {describe(o)}")
            if args.output is None:
                with np.printoptions(threshold=20, edgeitems=3, precision=5):
                    print(np.asarray(o))
        return 0
    return status[0]
