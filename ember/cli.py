"""The ``ember`` command: ``ember demo``, ``ember hipify ...``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ember`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "hipify":
        from .hipify.cli import main as hipify_main

        return hipify_main(argv[1:])
    parser = argparse.ArgumentParser(prog="ember", description="ember: an open deep-learning compiler")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="classify a cat photo with EfficientNet-Lite0 compiled by ember")
    demo.add_argument(
        "what", nargs="?", choices=("model", "kernels"), default="model",
        help="model (default): EfficientNet-Lite0 next to ONNX Runtime; kernels: vector add and GEMM vs NumPy",
    )
    sub.add_parser("hipify", help="translate CUDA sources to HIP (ember hipify --help)")
    sub.add_parser("version", help="print ember's version")
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
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
