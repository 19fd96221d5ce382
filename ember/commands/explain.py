"""``ember explain MODEL [--kernel NAME] [--graphs]``: the passes, the graph after each graph
pass, the kernels, and one kernel at every level (te, loop IR, LLVM IR, PTX/assembly)."""

from __future__ import annotations

import argparse

from ..errors import ArgumentError
from ..model.progress import quiet as quiet_progress
from .common import add_model_options, parse_shapes, reported


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``explain``."""
    p = sub.add_parser("explain", help="compile with the IR dumped after every pass; show a kernel at every level",
                       description="Compile a model with the IR dumped after every pass and report the passes, "
                                   "kernels and memory plan; --graphs prints the graph after each graph pass, "
                                   "--kernel NAME one kernel's te, loop IR, LLVM IR and PTX/assembly.")
    add_model_options(p)
    p.add_argument("--dump-dir", default=None, help="where the IR dumps go (default: a new temporary directory)")
    p.add_argument("--opt-level", type=int, default=2, help="PassContext opt level (default 2)")
    p.add_argument("--disable", action="append", default=[], metavar="PASS", help="disable a pass (repeatable)")
    p.add_argument("--graphs", action="store_true", help="print the graph after each graph pass")
    p.add_argument("--kernel", default=None, metavar="NAME",
                   help="show this kernel (a name from the list, or its index) at every level")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Explain ``args.model``."""
    from ..explain import explain

    with reported("explain") as status:
        if args.model.endswith(".ember"):
            raise ArgumentError("explain compiles the model with every pass dumped: give the ONNX file")
        with quiet_progress(args.quiet):
            result = explain(args.model, target=args.target, input_shapes=parse_shapes(args.input_shape),
                             dump_dir=args.dump_dir, opt_level=args.opt_level, disabled_passes=args.disable,
                             precision=args.precision)
        print(result.report(graphs=args.graphs))
        if args.kernel is not None:
            print()
            print(result.kernel(args.kernel))
        return 0
    return status[0]
