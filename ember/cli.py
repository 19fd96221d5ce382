"""The ``ember`` command: ``ember demo``, ``ember explain MODEL``, ``ember hipify ...``, ``ember version``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ember`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "hipify":
        from .hipify.cli import main as hipify_main

        return hipify_main(argv[1:])
    if argv and argv[0] == "tune":
        from .tune.cli import main as tune_main

        return tune_main(argv[1:])
    parser = argparse.ArgumentParser(prog="ember", description="ember: an open deep-learning compiler")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="classify a cat photo with EfficientNet-Lite0 compiled by ember")
    demo.add_argument(
        "what", nargs="?", choices=("model", "kernels"), default="model",
        help="model (default): EfficientNet-Lite0 next to ONNX Runtime; kernels: vector add and GEMM vs NumPy",
    )
    ex = sub.add_parser("explain", help="compile a model with the IR dumped after every pass, and report")
    ex.add_argument("model", help="an ONNX file")
    ex.add_argument("--target", default="llvm", help="llvm (default), cuda, rocm, with options")
    ex.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                    help="fix the shape of an input (repeatable)")
    ex.add_argument("--dump-dir", default=None, help="where the IR dumps go (default: a new temporary directory)")
    ex.add_argument("--opt-level", type=int, default=2, help="PassContext opt level (default 2)")
    ex.add_argument("--disable", action="append", default=[], metavar="PASS", help="disable a pass (repeatable)")
    sub.add_parser("hipify", help="translate CUDA sources to HIP (ember hipify --help)")
    sub.add_parser("tune", help="auto-tune a model's kernels; ember.compile applies the records (ember tune --help)")
    sub.add_parser("version", help="print ember's version")
    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.what == "kernels":
            from .demo import main as kernels_demo

            return kernels_demo()
        from .model_demo import main as model_demo

        return model_demo()
    if args.command == "explain":
        return _explain(args, parser)
    if args.command == "version":
        from . import __version__

        print(__version__)
        return 0
    parser.print_help()
    return 0


def _explain(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .errors import EmberError
    from .explain import explain

    shapes: dict[str, list[int]] = {}
    for spec in args.input_shape:
        name, _, dims = spec.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",") if d]
        except ValueError:
            parser.error(f"--input-shape {spec!r}: give NAME=D0,D1,... with integer dimensions")
        if not name or not shapes[name]:
            parser.error(f"--input-shape {spec!r}: give NAME=D0,D1,...")
    try:
        result = explain(args.model, target=args.target, input_shapes=shapes or None, dump_dir=args.dump_dir,
                         opt_level=args.opt_level, disabled_passes=args.disable)
    except EmberError as exc:
        print(f"ember explain: {exc}", file=sys.stderr)
        return 1
    print(result.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
