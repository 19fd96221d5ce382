"""What a translation returns: the output text, the references it met and the lint warnings."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Reference:
    """One CUDA reference: converted (``hip`` set) or left as it is (``alternative`` may say what to use)."""

    line: int
    name: str
    kind: str  # table name: runtime, driver, device, types, cublas, ..., include, launch, compat, unknown
    hip: str | None = None
    alternative: str = ""


@dataclass(frozen=True, slots=True)
class LintWarning:
    """A portability warning: something that translates but may not behave the same on AMD GPUs."""

    line: int
    rule: str
    message: str
    fix: str


@dataclass(slots=True)
class Result:
    """The outcome of translating one source text."""

    path: str
    source: str
    output: str
    converted: list[Reference] = field(default_factory=list)
    unconverted: list[Reference] = field(default_factory=list)
    warnings: list[LintWarning] = field(default_factory=list)
    lines_total: int = 0
    lines_changed: int = 0
    compat: bool = False  # the output includes ember_hip_compat.h (see translate)

    @property
    def changed(self) -> bool:
        """Whether the output differs from the input."""
        return self.output != self.source

    @property
    def percent(self) -> float:
        """Converted references as a percentage of all references (100 when there are none)."""
        total = len(self.converted) + len(self.unconverted)
        return 100.0 * len(self.converted) / total if total else 100.0

    def stats(self) -> dict:
        """The statistics of this file as a JSON-ready dict."""
        return {
            "file": self.path,
            "converted": len(self.converted),
            "unconverted": len(self.unconverted),
            "percent": round(self.percent, 2),
            "lines_changed": self.lines_changed,
            "lines_total": self.lines_total,
            "warnings": len(self.warnings),
            "converted_by_kind": dict(sorted(Counter(r.kind for r in self.converted).items())),
            "unconverted_by_kind": dict(sorted(Counter(r.kind for r in self.unconverted).items())),
            "unconverted_refs": [
                {"line": r.line, "name": r.name, "kind": r.kind, "alternative": r.alternative} for r in self.unconverted
            ],
            "lint": [{"line": w.line, "rule": w.rule, "message": w.message, "fix": w.fix} for w in self.warnings],
        }
