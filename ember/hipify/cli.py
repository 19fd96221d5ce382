"""``ember hipify``: translate CUDA files or directories to HIP.

Exit status: 0 on success, 1 when an input could not be translated (the other files still are),
2 for a usage error, 3 with ``--strict`` when a CUDA reference was left unconverted.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from .conditions import integer_defines
from .errors import HipifyError
from .files import Source, backup, collect, read_source, write_text
from .maps import compat_header_text, load_maps, table_sizes
from .result import Result
from .stats import format_text, summarize
from .tokenizer import tokenize
from .toolchain import DEFAULT_HIP_VERSION, HIP_VERSIONS
from .translator import LAUNCH_SYNTAXES, local_declarations, translate

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_STRICT = 0, 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ember hipify``."""
    p = argparse.ArgumentParser(
        prog="ember hipify",
        description="Translate CUDA source to HIP (token-aware: comments and strings are left alone) "
        "and warn about code that will not port to AMD GPUs.",
    )
    p.add_argument("inputs", nargs="*", help="source files or directories (.cu .cuh .h .hpp .cpp .cc .c)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", help="output file (one input file) or directory (mirrors the input tree)")
    out.add_argument("--suffix", help="write each result beside its input, named input + SUFFIX (e.g. .hip)")
    out.add_argument("--inplace", action="store_true", help="rewrite the inputs, keeping a backup of each")
    out.add_argument("--dry-run", action="store_true", help="print a unified diff and write nothing")
    p.add_argument("--backup-suffix", default=".orig", help="backup name suffix for --inplace (default .orig)")
    p.add_argument(
        "--launch-syntax",
        choices=LAUNCH_SYNTAXES,
        default="keep",
        help="keep <<<...>>> launches (default) or rewrite them to hipLaunchKernelGGL",
    )
    p.add_argument(
        "--hip-version",
        choices=HIP_VERSIONS,
        default=DEFAULT_HIP_VERSION,
        help=f"HIP release the output targets (default {DEFAULT_HIP_VERSION}); names only a newer HIP has are "
        "reported, not converted",
    )
    p.add_argument(
        "--write-compat-header",
        metavar="DIR",
        help="write ember_hip_compat.h (ember_* versions of CUDA intrinsics and APIs HIP lacks, e.g. __vsub4, "
        "cudaLaunchKernelEx) "
        "into DIR; with -o/--suffix/--inplace it is written next to the outputs automatically when needed",
    )
    p.add_argument("--print-stats", action="store_true", help="print conversion statistics per file and in total")
    p.add_argument("--stats-json", metavar="FILE", help="write the statistics as JSON to FILE ('-' for stdout)")
    p.add_argument("--strict", action="store_true", help="exit with status 3 when anything was left unconverted")
    p.add_argument("--no-lint", action="store_true", help="do not print portability warnings")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    p.add_argument("--list-maps", action="store_true", help="print the mapping tables and their sizes, then exit")
    return p


def list_maps(stream: TextIO, hip_version: str = DEFAULT_HIP_VERSION) -> None:
    """Print every mapping table (for one HIP target) with its number of mapped and unsupported entries."""
    stream.write(f"HIP target version: {hip_version}\n")
    infos = table_sizes(hip_version)
    stream.write(f"{'table':10} {'mapped':>7} {'unsupported':>12}  title\n")
    for info in infos:
        checked = f" (checked against installed {info.verified_against} headers)" if info.verified_against else ""
        stream.write(f"{info.name:10} {info.mapped:7d} {info.unsupported:12d}  {info.title}{checked}\n")
    stream.write(f"{'total':10} {sum(i.mapped for i in infos):7d} {sum(i.unsupported for i in infos):12d}\n")


def _report(result: Result, stream: TextIO, lint: bool) -> None:
    """Unconverted references and lint warnings of one file, compiler-style."""
    for ref in result.unconverted:
        alt = f"; nearest HIP alternative: {ref.alternative}" if ref.alternative else ""
        stream.write(f"{result.path}:{ref.line}: unconverted: {ref.name} ({ref.kind}) is not supported by HIP{alt}\n")
    if lint:
        for w in result.warnings:
            stream.write(f"{result.path}:{w.line}: warning: [{w.rule}] {w.message}; fix: {w.fix}\n")


def _destination(src: Source, args: argparse.Namespace, single: bool) -> Path | None:
    """Where the translation of ``src`` goes (None: standard output or nowhere)."""
    if args.inplace:
        return src.path
    if args.suffix:
        return src.path.with_name(src.path.name + args.suffix)
    if args.output:
        out = Path(args.output)
        if single and not out.is_dir() and not args.output.endswith(("/", "\\")):
            return out
        return out / src.relative
    return None


def main(argv: list[str] | None = None) -> int:
    """Run ``ember hipify`` with the given arguments; returns the exit status."""
    args = build_parser().parse_args(argv)
    stdout, stderr = sys.stdout, sys.stderr
    if args.list_maps:
        list_maps(stdout, args.hip_version)
        return EXIT_OK
    if args.write_compat_header and not args.inputs:
        try:
            write_text(Path(args.write_compat_header) / load_maps().compat_header, compat_header_text())
        except HipifyError as exc:
            stderr.write(f"ember hipify: error: {exc}\n")
            return EXIT_INPUT
        return EXIT_OK
    if not args.inputs:
        stderr.write("ember hipify: no input given; pass CUDA files or directories (or --list-maps)\n")
        return EXIT_USAGE
    if args.suffix is not None and not args.suffix.strip():
        stderr.write("ember hipify: --suffix must not be empty (it would overwrite the input); use --inplace\n")
        return EXIT_USAGE
    sources, errors = collect(args.inputs)
    single = len(sources) == 1 and len(args.inputs) == 1 and Path(args.inputs[0]).is_file()
    to_stdout = not (args.inplace or args.suffix or args.output or args.dry_run)
    if to_stdout and not single and sources:
        stderr.write(
            "ember hipify: several files to translate; choose -o DIR, --suffix SUFFIX, --inplace or --dry-run\n"
        )
        return EXIT_USAGE
    inputs = {s.path.resolve() for s in sources}
    texts: dict[Path, str] = {}
    for src in sources:
        try:
            texts[src.path] = read_source(src.path)
        except HipifyError as exc:
            errors.append(str(exc))
    local_names: set[str] = set()
    project_defines = integer_defines(texts.values())
    for path, text in texts.items():
        try:
            local_names |= local_declarations(tokenize(text, str(path)))
        except HipifyError:
            pass  # reported when the file itself is translated
    local_headers = {
        "/".join(src.relative.parts[-k:]) for src in sources for k in range(1, len(src.relative.parts) + 1)
    }
    info = stderr if (to_stdout or args.dry_run or args.stats_json == "-") else stdout
    header_dest = _compat_header_dest(args, sources, single)
    results: list[Result] = []
    for src in sources:
        if src.path not in texts:
            continue
        text = texts[src.path]
        try:
            result = translate(
                text,
                str(src.path),
                launch_syntax=args.launch_syntax,
                local_names=local_names,
                local_headers=local_headers,
                hip_version=args.hip_version,
                compat_include=_compat_include(src, args, single, header_dest),
                project_defines=project_defines,
            )
        except HipifyError as exc:
            errors.append(str(exc))
            continue
        results.append(result)
        if not text:
            stderr.write(f"{src.path}: empty file, nothing to translate\n")
        if not args.quiet:
            _report(result, stderr, not args.no_lint)
        try:
            _emit(src, result, args, single, inputs, stdout)
        except HipifyError as exc:
            errors.append(str(exc))
    if any(r.compat for r in results):
        _emit_compat_header(header_dest, inputs, errors, stderr)
    for msg in errors:
        stderr.write(f"ember hipify: error: {msg}\n")
    summary = summarize(results, errors)
    if args.print_stats:
        info.write(format_text(summary))
    if args.stats_json:
        payload = json.dumps(summary, indent=1) + "\n"
        if args.stats_json == "-":
            stdout.write(payload)
        else:
            try:
                write_text(Path(args.stats_json), payload)
            except HipifyError as exc:
                stderr.write(f"ember hipify: error: {exc}\n")
                return EXIT_INPUT
    if errors:
        return EXIT_INPUT
    if args.strict and summary["total"]["unconverted"]:
        stderr.write(f"ember hipify: --strict: {summary['total']['unconverted']} CUDA reference(s) left unconverted\n")
        return EXIT_STRICT
    return EXIT_OK


def _compat_header_dest(args: argparse.Namespace, sources: list[Source], single: bool) -> Path | None:
    """Where ember_hip_compat.h goes when a translation needs it (None: standard output or dry run)."""
    name = load_maps(args.hip_version).compat_header
    if args.write_compat_header:
        return Path(args.write_compat_header) / name
    if args.dry_run or not sources:
        return None
    if args.output:
        out = Path(args.output)
        if single and not out.is_dir() and not args.output.endswith(("/", "\\")):
            return out.parent / name
        return out / name
    if args.inplace or args.suffix:
        root = sources[0].root
        return (root if root.is_dir() else root.parent) / name
    return None


def _compat_include(src: Source, args: argparse.Namespace, single: bool, header: Path | None) -> str | None:
    """The include path of ember_hip_compat.h as seen from the output of ``src``."""
    dest = _destination(src, args, single)
    if header is None or dest is None:
        return None
    return Path(os.path.relpath(header.resolve(), dest.resolve().parent)).as_posix()


def _emit_compat_header(dest: Path | None, inputs: set[Path], errors: list[str], stderr: TextIO) -> None:
    """Write ember_hip_compat.h where the translated files include it from (or say how to get it)."""
    if dest is None:
        stderr.write(
            "ember hipify: note: the output includes ember_hip_compat.h (ember_* versions of CUDA intrinsics and APIs "
            "HIP lacks); write it with: ember hipify --write-compat-header DIR\n"
        )
        return
    if dest.resolve() in inputs:
        errors.append(f"{dest}: ember_hip_compat.h would overwrite an input file; choose another output path")
        return
    try:
        write_text(dest, compat_header_text())
    except HipifyError as exc:
        errors.append(str(exc))


def _emit(
    src: Source, result: Result, args: argparse.Namespace, single: bool, inputs: set[Path], stdout: TextIO
) -> None:
    """Write, print or diff one translated file."""
    if args.dry_run:
        if result.changed:
            diff = difflib.unified_diff(
                result.source.splitlines(keepends=True),
                result.output.splitlines(keepends=True),
                fromfile=f"a/{src.path}",
                tofile=f"b/{src.path}",
            )
            for line in diff:
                stdout.write(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
        return
    dest = _destination(src, args, single)
    if dest is None:
        stdout.write(result.output)
        return
    if args.inplace:
        if result.changed:
            backup(src.path, args.backup_suffix)
            write_text(src.path, result.output)
        return
    if dest.resolve() in inputs:
        raise HipifyError(
            f"{dest}: the output would overwrite an input file; use --inplace to rewrite inputs "
            "(a backup is kept) or choose another output path"
        )
    write_text(dest, result.output)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
