"""Applying tuning records when a model is compiled (``ember.compile(..., tuning_db=...)``).

:func:`records_chooser` opens the records database and returns a
:data:`~ember.model.group_lowering.ConfigChooser`: for each kernel it computes the workload key
(:func:`~ember.tune.keys.kernel_workload`) and returns the fastest valid record's configuration
for this target, checked against the kernel's knob space as it is now. A record whose
configuration the space no longer accepts (a database from another ember version whose template
changed) is skipped with one ``RuntimeWarning`` per workload, and the next best is tried; a kernel
without a usable record keeps the default schedule.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..backends import backend_for
from ..errors import InvalidConfig, TuningError
from ..strategy import ConfigEntity, Strategy
from ..target import Target
from ..te import Tensor
from .keys import TargetKey, kernel_workload, target_key
from .records import Record, TuningDB, default_db_path

#: Values of ``EMBER_TUNING_DB`` that turn records off.
OFF = ("off", "none", "0")


class RecordsChooser:
    """Chooses each kernel's configuration from ``best`` (valid records by workload, fastest
    first) of one target. ``applied`` counts the kernels it configured, ``skipped`` lists the
    workloads whose records no longer fit their space."""

    def __init__(self, best: dict[str, list[Record]], target: TargetKey):
        self.best = best
        self.target = target
        self.applied = 0
        self.skipped: list[str] = []

    def __call__(self, outs: Sequence[Tensor], workspaces: Sequence[Tensor], strategy: Strategy) -> ConfigEntity | None:
        """The best valid record's configuration for the kernel computing ``outs`` (with
        ``workspaces``), or None (default schedule)."""
        allouts = list(outs) + list(workspaces)
        key = kernel_workload(allouts, strategy)
        recs = self.best.get(key) if key is not None else None
        if not recs:
            return None
        space = strategy.space(allouts)
        if space is None:
            return None
        for rec in recs:
            try:
                cfg = space.from_json(rec.config)
            except InvalidConfig as exc:
                if key not in self.skipped:
                    self.skipped.append(str(key))
                    warnings.warn(f"ember: a tuning record of {rec.task or 'a kernel'} (ember {rec.ember_version}) "
                                  f"does not fit the kernel's knob space any more ({exc}); it is ignored",
                                  RuntimeWarning, stacklevel=2)
                continue
            self.applied += 1
            return cfg
        return None


def db_path(tuning_db: str | os.PathLike[str] | bool | None) -> Path | None:
    """The records file ``ember.compile(tuning_db=...)`` reads: the path given, else
    ``$EMBER_TUNING_DB`` (``off`` turns it off), else ``~/.cache/ember/tuning.db``; None when
    records are off (``tuning_db=False``) or the default file does not exist. A path given
    explicitly that does not exist is a :class:`TuningError`."""
    if tuning_db is False:
        return None
    if tuning_db is True or tuning_db is None:
        env = os.environ.get("EMBER_TUNING_DB", "")
        if env.strip().lower() in OFF:
            return None
        path = default_db_path()
        return path if path.is_file() else None
    path = Path(tuning_db).expanduser()
    if not path.is_file():
        raise TuningError(f"tuning_db={str(tuning_db)!r}: no such file (run `ember tune` to create one, or leave "
                          "tuning_db out to use the default database)")
    return path


def records_chooser(tuning_db: str | os.PathLike[str] | bool | None, target: str | Target) -> RecordsChooser | None:
    """A chooser applying the records of ``tuning_db`` (see :func:`db_path`) for ``target``, or
    None when there are no records for it (every kernel then keeps its default schedule)."""
    path = db_path(tuning_db)
    if path is None:
        return None
    tgt = backend_for(target).resolve(Target(target))
    key = target_key(tgt)
    try:
        with TuningDB(path, check=False) as db:
            best = db.best_by_workload(key)
    except TuningError as exc:  # damaged after opening: compile without records rather than fail
        warnings.warn(f"ember: tuning records not applied: {exc}", RuntimeWarning, stacklevel=3)
        return None
    return RecordsChooser(best, key) if best else None
