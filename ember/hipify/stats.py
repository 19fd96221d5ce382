"""Statistics over translated files, as a dict (for ``--stats-json``) and as text (``--print-stats``)."""

from __future__ import annotations

from collections import Counter

from .result import Result


def _kinds(results: list[Result], attr: str) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for r in results:
        counts.update(ref.kind for ref in getattr(r, attr))
    return dict(sorted(counts.items()))


def summarize(results: list[Result], errors: list[str] | None = None) -> dict:
    """Per-file statistics and their total, JSON-ready."""
    converted = sum(len(r.converted) for r in results)
    unconverted = sum(len(r.unconverted) for r in results)
    refs = converted + unconverted
    total = {
        "files": len(results),
        "files_changed": sum(1 for r in results if r.changed),
        "converted": converted,
        "unconverted": unconverted,
        "percent": round(100.0 * converted / refs, 2) if refs else 100.0,
        "lines_changed": sum(r.lines_changed for r in results),
        "lines_total": sum(r.lines_total for r in results),
        "warnings": sum(len(r.warnings) for r in results),
        "converted_by_kind": _kinds(results, "converted"),
        "unconverted_by_kind": _kinds(results, "unconverted"),
        "unconverted_names": dict(Counter(ref.name for r in results for ref in r.unconverted).most_common()),
        "warnings_by_rule": dict(sorted(Counter(w.rule for r in results for w in r.warnings).items())),
        "errors": len(errors or []),
    }
    return {"files": [r.stats() for r in results], "total": total, "errors": list(errors or [])}


def _block(title: str, s: dict) -> list[str]:
    pct = 100.0 * s["lines_changed"] / s["lines_total"] if s["lines_total"] else 0.0
    lines = [
        f"[ember hipify] {title}:",
        f"  CONVERTED refs count: {s['converted']}",
        f"  UNCONVERTED refs count: {s['unconverted']}",
        f"  CONVERSION %: {s['percent']:.1f}",
        f"  CHANGED lines of code: {s['lines_changed']}",
        f"  TOTAL lines of code: {s['lines_total']}",
        f"  CODE CHANGED (in lines) %: {pct:.1f}",
        f"  PORTABILITY warnings: {s['warnings']}",
    ]
    if s["converted_by_kind"]:
        lines.append("  CONVERTED refs by kind: " + ", ".join(f"{k}: {v}" for k, v in s["converted_by_kind"].items()))
    if s["unconverted_by_kind"]:
        lines.append(
            "  UNCONVERTED refs by kind: " + ", ".join(f"{k}: {v}" for k, v in s["unconverted_by_kind"].items())
        )
    return lines


def format_text(summary: dict) -> str:
    """The statistics as text, one block per file and one for the total."""
    lines: list[str] = []
    for f in summary["files"]:
        lines += _block(f"file '{f['file']}' statistics", f)
    total = summary["total"]
    if len(summary["files"]) != 1:
        lines += _block(f"TOTAL statistics ({total['files']} files, {total['files_changed']} changed)", total)
    if total.get("unconverted_names"):
        top = list(total["unconverted_names"].items())[:20]
        lines.append("  UNCONVERTED names: " + ", ".join(f"{k} ({v})" for k, v in top))
    if total["errors"]:
        lines.append(f"  FILES with errors: {total['errors']}")
    return "\n".join(lines) + "\n"
