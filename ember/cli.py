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
    sub.add_parser("demo", help="run the demo: kernels compiled and checked against NumPy")
    sub.add_parser("hipify", help="translate CUDA sources to HIP (ember hipify --help)")
    sub.add_parser("version", help="print ember's version")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main

        return demo_main()
    if args.command == "version":
        from . import __version__

        print(__version__)
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
