"""The ``ember`` command (also ``python -m ember``): a dispatcher over the subcommands.

    ember compile MODEL -o OUT.ember --target ...     compile and save
    ember run OUT.ember|MODEL --input NAME=FILE.npy   run once, print or save the outputs
    ember bench MODEL [--compare onnxruntime]         latency table
    ember profile MODEL [--csv/--trace/--roofline]    per-kernel times, FLOPs, bytes, roofline
    ember explain MODEL [--kernel NAME]               passes, graphs, one kernel at every level
    ember compare MODEL --against onnxruntime         every intermediate tensor vs ONNX Runtime
    ember info                                        devices, toolchains, CPU features
    ember tune MODEL ...                              auto-tune kernels (ember.tune.cli)
    ember hipify ...                                  CUDA -> HIP (ember.hipify.cli)
    ember demo [model|kernels], ember version

Each model subcommand lives in :mod:`ember.commands` (``add_parser`` + ``run``); ``tune`` and
``hipify`` have their own argument parsers and get the rest of the command line. Exit status: 0
on success, 1 for an error (``ember COMMAND: message`` on stderr), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from .commands import bench, compare, explain, info, profile
from .commands import compile as compile_cmd
from .commands import run as run_cmd

#: The subcommands built from :mod:`ember.commands`, in the order ``ember --help`` lists them.
COMMANDS = (compile_cmd, run_cmd, bench, profile, explain, compare, info)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description="ember: an open deep-learning compiler",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="ember COMMAND --help describes each command.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        cmd.add_parser(sub)
    sub.add_parser("tune", help="auto-tune a model's kernels; ember.compile applies the records (ember tune --help)")
    sub.add_parser("hipify", help="translate CUDA sources to HIP (ember hipify --help)")
    demo = sub.add_parser("demo", help="classify a cat photo with EfficientNet-Lite0 compiled by ember")
    demo.add_argument(
        "what", nargs="?", choices=("model", "kernels"), default="model",
        help="model (default): EfficientNet-Lite0 next to ONNX Runtime; kernels: vector add and GEMM vs NumPy",
    )
    sub.add_parser("version", help="print ember's version")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ember`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "hipify":
        from .hipify.cli import main as hipify_main

        return hipify_main(argv[1:])
    if argv and argv[0] == "tune":
        from .tune.cli import main as tune_main

        return tune_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.what == "kernels":
            from .demo import main as kernels_demo

            return kernels_demo()
        from .model_demo import main as model_demo

        return model_demo()
    if args.command == "version":
        from . import __version__

        print(__version__)
        return 0
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    return int(func(args))


if __name__ == "__main__":
    sys.exit(main())
