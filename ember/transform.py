"""Pass infrastructure: pass objects, pipelines of passes, and the context they run under.

A :class:`Pass` turns one IR into another (a loop-IR statement into a statement, a graph into a
graph). It has a ``name``, an ``opt_level`` (it runs when the active context's ``opt_level`` is at
least that) and a one-line ``contract`` saying what it requires of its input and guarantees of its
output. A *required* pass (``required = True``) is needed for correct code: it runs at every
``opt_level`` and naming it in ``disabled_passes`` is an error.

A :class:`Sequential` runs passes in order. A :class:`PassContext` configures every pass run
inside its ``with`` block::

    with PassContext(opt_level=2, disabled_passes=["PartitionLoops"], dump_dir="dumps", timing=True) as ctx:
        f = ember.lower(s, [A, B])
    print(ctx.summary())

Contexts nest (the innermost one applies, and it does not inherit anything from the outer ones);
the stack of active contexts is per thread, so a context entered in one thread does not affect
passes run by another. Outside any ``with`` block, :meth:`PassContext.current` is a default
context (``opt_level=2``, nothing disabled, no dumps, no timing), one per thread.

Names in ``disabled_passes`` are checked when a :class:`Sequential` runs (not when the context is
made, since a context may be created before the modules that define the passes are imported): a
name that no known pass has raises :class:`~ember.errors.PassError` listing the known names. The
known names are those of every pass class defined so far (ember's loop and graph passes are always
included) and of every :class:`Sequential` created.
"""

from __future__ import annotations

import abc
import os
import re
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .errors import PassError

__all__ = ["Pass", "PassContext", "PassInstrument", "Sequential", "known_pass_names"]

# name -> the pass class (or "Sequential") that introduced it
_KNOWN: dict[str, str] = {}
_KNOWN_LOCK = threading.Lock()
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def _register(name: str, owner: str) -> None:
    with _KNOWN_LOCK:
        _KNOWN.setdefault(name, owner)


def known_pass_names() -> list[str]:
    """The sorted names of every known pass: ember's loop and graph passes, every other
    :class:`Pass` subclass defined so far and every :class:`Sequential` created. (``import
    ember`` loads ``ember.lowering.passes`` and ``ember.graph.passes``, so their passes are always
    known; this module imports neither, being below both.)"""
    with _KNOWN_LOCK:
        return sorted(_KNOWN)


class Pass(abc.ABC):
    """One transformation of an IR, run under a :class:`PassContext`.

    Subclasses set the class attributes ``name`` (unique among pass classes, used by
    ``disabled_passes`` and in dump file names), ``opt_level``, ``contract`` and, for a pass
    without which the code would be wrong, ``required = True``; and implement :meth:`transform`.
    Calling the pass runs it under the given context (or the current one): it is skipped when the
    context disables it or its ``opt_level`` is above the context's, and otherwise it is timed,
    reported to the context's instruments and dumped as the context says."""

    name: str = ""
    opt_level: int = 0
    contract: str = ""
    required: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            if not _NAME_RE.match(cls.name):
                raise PassError(f"pass class {cls.__qualname__}: name {cls.name!r} is not an identifier-like word")
            if not cls.contract.strip():
                raise PassError(f"pass {cls.name} ({cls.__qualname__}) has no contract; state what it needs and gives")
            if not isinstance(cls.opt_level, int) or isinstance(cls.opt_level, bool) or cls.opt_level < 0:
                raise PassError(f"pass {cls.name}: opt_level must be a non-negative int, got {cls.opt_level!r}")
            _register(cls.name, f"{cls.__module__}.{cls.__qualname__}")

    @abc.abstractmethod
    def transform(self, ir: Any, ctx: PassContext) -> Any:
        """The transformation itself: ``ir`` in, the new IR out (never changing ``ir`` in place)."""

    def skip(self, ir: Any) -> Any:
        """What the pass yields when the context skips it: ``ir`` unchanged. A pass whose output
        is of another kind than its input overrides this with its trivial result."""
        return ir

    def __call__(self, ir: Any, ctx: PassContext | None = None) -> Any:
        """Run the pass on ``ir`` under ``ctx`` (default :meth:`PassContext.current`); returns the
        new IR, or :meth:`skip`'s result when the context skips the pass. Errors of the pass
        propagate unchanged."""
        return (ctx if ctx is not None else PassContext.current()).run(self, ir)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} opt_level={self.opt_level}>"


class Sequential(Pass):
    """Passes run in order, each on the result of the previous one.

    ``Sequential(passes, name="...", opt_level=0)``: the sequence is itself a pass, so it can be
    nested, disabled by its name, and gated by its ``opt_level``. It is not timed or dumped itself
    (its passes are). Running it checks the context's ``disabled_passes`` against
    :func:`known_pass_names` and the required passes it holds."""

    contract = "runs its passes in order; gives what the last of them gives"

    def __init__(self, passes: Sequence[Pass], name: str = "Sequential", opt_level: int = 0) -> None:
        if isinstance(passes, Pass) or not isinstance(passes, (list, tuple)):
            raise PassError(f"Sequential {name!r}: give a list of passes, got {type(passes).__name__}")
        for k, p in enumerate(passes):
            if not isinstance(p, Pass):
                raise PassError(f"Sequential {name!r}: item {k} is {p!r}, not a Pass")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise PassError(f"Sequential: name {name!r} is not an identifier-like word")
        if not isinstance(opt_level, int) or isinstance(opt_level, bool) or opt_level < 0:
            raise PassError(f"Sequential {name!r}: opt_level must be a non-negative int, got {opt_level!r}")
        self.passes: list[Pass] = list(passes)
        self.name = name
        self.opt_level = opt_level
        _register(name, "Sequential")

    def names(self) -> list[str]:
        """The names of this sequence and every pass in it, nested sequences included, in order."""
        out = [self.name]
        for p in self.passes:
            out.extend(p.names() if isinstance(p, Sequential) else [p.name])
        return out

    def transform(self, ir: Any, ctx: PassContext) -> Any:
        """Each pass in turn on the result of the previous one."""
        for p in self.passes:
            ir = p(ir, ctx)
        return ir

    def __call__(self, ir: Any, ctx: PassContext | None = None) -> Any:
        """Check the context's ``disabled_passes`` (unknown names, required passes), then run the
        passes in order unless the sequence itself is skipped."""
        ctx = ctx if ctx is not None else PassContext.current()
        ctx.check_disabled(self)
        if not ctx.should_run(self):
            ctx.note_skipped(self)
            return ir
        return self.transform(ir, ctx)

    def __repr__(self) -> str:
        return f"Sequential({self.name}: {', '.join(p.name for p in self.passes)})"


class PassInstrument:
    """Hooks called around every pass that runs (not around skipped ones, nor around a
    :class:`Sequential` itself). Subclass and override what you need; both do nothing here."""

    def before_pass(self, p: Pass, ir: Any) -> None:
        """Called with the pass and its input just before it runs."""

    def after_pass(self, p: Pass, ir: Any) -> None:
        """Called with the pass and its output just after it ran (not when it raised)."""


class _Stack(threading.local):
    def __init__(self) -> None:
        self.stack: list[PassContext] = []
        self.default: PassContext | None = None


_STACK = _Stack()


class PassContext:
    """The configuration every pass run inside a ``with PassContext(...):`` block follows.

    * ``opt_level`` (int 0–3, default 2): a pass runs when ``opt_level >= pass.opt_level`` (or
      when it is required).
    * ``disabled_passes``: names of passes (or sequences) to skip; see the module doc for how the
      names are checked.
    * ``dump_dir``: when set, the IR after every pass that runs is written (its ``str()``) to
      ``dump_dir/<NNN>_<pass name>.txt``, ``NNN`` counting from 001 over the life of this context,
      so the files sort in execution order. The directory is created at the first dump.
    * ``timing``: when true, ``timings`` gets ``(pass name, seconds)`` for every pass run, in
      order; :meth:`summary` adds them up.
    * ``instruments``: :class:`PassInstrument` objects told before and after every pass.

    Bad arguments raise :class:`~ember.errors.PassError`. ``skipped`` lists the names of the
    passes this context skipped and ``dumps`` the files it wrote, in order. A context may be
    entered again (and from several threads); its counter, timings and lists are shared."""

    def __init__(
        self,
        opt_level: int = 2,
        disabled_passes: Iterable[str] = (),
        dump_dir: str | os.PathLike[str] | None = None,
        timing: bool = False,
        instruments: Sequence[PassInstrument] = (),
    ) -> None:
        if not isinstance(opt_level, int) or isinstance(opt_level, bool) or not 0 <= opt_level <= 3:
            raise PassError(f"PassContext: opt_level must be an int from 0 to 3, got {opt_level!r}")
        if isinstance(disabled_passes, (str, bytes)):
            raise PassError(
                f"PassContext: disabled_passes must be a list of pass names such as [{disabled_passes!r}], "
                f"not a single string"
            )
        try:
            disabled = list(disabled_passes)
        except TypeError:
            raise PassError(
                f"PassContext: disabled_passes must be a list of pass names, got {type(disabled_passes).__name__}"
            ) from None
        for d in disabled:
            if not isinstance(d, str) or not d:
                raise PassError(f"PassContext: disabled_passes holds {d!r}; every item must be a pass name (a str)")
        if dump_dir is not None and not isinstance(dump_dir, (str, os.PathLike)):
            raise PassError(f"PassContext: dump_dir must be a path (str or os.PathLike), got {type(dump_dir).__name__}")
        if isinstance(dump_dir, str) and not dump_dir.strip():
            raise PassError("PassContext: dump_dir is empty; give a directory path or None")
        if not isinstance(timing, bool):
            raise PassError(f"PassContext: timing must be True or False, got {timing!r}")
        if isinstance(instruments, PassInstrument):
            instruments = [instruments]
        for k, ins in enumerate(instruments):
            if not isinstance(ins, PassInstrument):
                raise PassError(f"PassContext: instrument {k} is {ins!r}, not a PassInstrument")
        self.opt_level = opt_level
        self.disabled_passes: frozenset[str] = frozenset(disabled)
        self.dump_dir: Path | None = Path(dump_dir) if dump_dir is not None else None
        self.timing = timing
        self.instruments: list[PassInstrument] = list(instruments)
        self.timings: list[tuple[str, float]] = []
        self.skipped: list[str] = []
        self.dumps: list[Path] = []
        self._counter = 0
        self._lock = threading.Lock()

    # -- the active context ---------------------------------------------------------------------
    @staticmethod
    def current() -> PassContext:
        """The innermost context entered in this thread, or this thread's default context."""
        if _STACK.stack:
            return _STACK.stack[-1]
        if _STACK.default is None:
            _STACK.default = PassContext()
        return _STACK.default

    def __enter__(self) -> PassContext:
        _STACK.stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if not _STACK.stack or _STACK.stack[-1] is not self:
            raise PassError("PassContext: contexts must be exited in the reverse order they were entered")
        _STACK.stack.pop()

    # -- running passes -------------------------------------------------------------------------
    def should_run(self, p: Pass) -> bool:
        """Whether ``p`` runs here: required, or not disabled and ``opt_level >= p.opt_level``."""
        if p.required:
            return True
        return p.name not in self.disabled_passes and self.opt_level >= p.opt_level

    def note_skipped(self, p: Pass) -> None:
        """Record that ``p`` was skipped."""
        with self._lock:
            self.skipped.append(p.name)

    def check_disabled(self, seq: Sequential) -> None:
        """Raise :class:`PassError` when ``disabled_passes`` names a required pass of ``seq`` or a
        name no known pass has. Does nothing when nothing is disabled."""
        if not self.disabled_passes:
            return
        for p in _leaves(seq):
            if p.required and p.name in self.disabled_passes:
                raise PassError(f"pass {p.name} cannot be disabled: it is required for correct code ({p.contract})")
        known = set(known_pass_names()) | set(seq.names())
        unknown = sorted(self.disabled_passes - known)
        if unknown:
            raise PassError(
                f"disabled_passes names unknown pass(es) {', '.join(unknown)}; known passes: {', '.join(sorted(known))}"
            )

    def run(self, p: Pass, ir: Any) -> Any:
        """Run one pass on ``ir`` as this context says (skip, instruments, timing, dump)."""
        if p.required and p.name in self.disabled_passes:
            raise PassError(f"pass {p.name} cannot be disabled: it is required for correct code ({p.contract})")
        if not self.should_run(p):
            self.note_skipped(p)
            return p.skip(ir)
        for ins in self.instruments:
            ins.before_pass(p, ir)
        start = time.perf_counter()
        out = p.transform(ir, self)
        seconds = time.perf_counter() - start
        if self.timing:
            with self._lock:
                self.timings.append((p.name, seconds))
        for ins in self.instruments:
            ins.after_pass(p, out)
        if self.dump_dir is not None:
            self._dump(p, out)
        return out

    def _dump(self, p: Pass, ir: Any) -> None:
        assert self.dump_dir is not None
        with self._lock:
            self._counter += 1
            n = self._counter
        path = self.dump_dir / f"{n:03d}_{re.sub(r'[^A-Za-z0-9_.-]', '_', p.name)}.txt"
        try:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(str(ir) + "\n", encoding="utf-8")
        except OSError as exc:
            raise PassError(f"cannot write the IR dump of pass {p.name} to {path}: {exc}") from exc
        with self._lock:
            self.dumps.append(path)

    # -- reports --------------------------------------------------------------------------------
    def summary(self) -> str:
        """A table of the recorded timings: one row per pass name (in order of first run) with
        its number of runs, total seconds and share of the total, then the total. Says so when
        nothing was recorded (``timing`` off or no pass run)."""
        if not self.timings:
            return "no pass timings recorded (create the PassContext with timing=True)"
        totals: dict[str, list[float]] = {}
        for name, sec in self.timings:
            row = totals.setdefault(name, [0, 0.0])
            row[0] += 1
            row[1] += sec
        whole = sum(r[1] for r in totals.values())
        width = max(4, *(len(n) for n in totals))
        lines = [f"{'pass':<{width}}  {'runs':>5}  {'seconds':>10}  {'share':>6}"]
        for name, (runs, sec) in totals.items():
            share = 100.0 * sec / whole if whole > 0 else 0.0
            lines.append(f"{name:<{width}}  {int(runs):>5}  {sec:>10.6f}  {share:>5.1f}%")
        lines.append(f"{'total':<{width}}  {len(self.timings):>5}  {whole:>10.6f}  {100.0:>5.1f}%")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"PassContext(opt_level={self.opt_level}, disabled_passes={sorted(self.disabled_passes)}, "
            f"dump_dir={str(self.dump_dir) if self.dump_dir else None!r}, timing={self.timing})"
        )


def _leaves(seq: Sequential) -> list[Pass]:
    out: list[Pass] = []
    for p in seq.passes:
        out.extend(_leaves(p) if isinstance(p, Sequential) else [p])
    return out
