"""Auto-tuning: search each kernel's knob space, measured on the device, records that compile reuses.

* ``ember.tune(model, target, trials=..., db=..., time_budget=..., workers=..., dask=...)``
  (:func:`~ember.tune.tuner.tune`) tunes a model's distinct tunable kernels;
  ``ember.tune_kernel(schedule_fn, args, target, space=...)`` one te kernel whose schedule takes a
  configuration of a :class:`~ember.strategy.ConfigSpace`.
* Records go to one SQLite file (:class:`~ember.tune.records.TuningDB`; default
  ``~/.cache/ember/tuning.db``, ``EMBER_TUNING_DB`` overrides) keyed by workload and target
  (:mod:`ember.tune.keys`); ``ember.compile(..., tuning_db=...)`` applies the best valid record of
  each kernel (:mod:`ember.tune.apply`).
* ``ember tune MODEL.onnx --target ... --trials N`` is the command line (:mod:`ember.tune.cli`).

``ember.tune`` is this package and, called, the function :func:`tune`. ``docs/tuning.md`` explains
the whole.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from .keys import TargetKey, target_key
from .records import Record, TuningDB, default_db_path

__all__ = ["Record", "TargetKey", "Task", "TaskResult", "TuneResult", "TuningDB", "best_config", "default_db_path",
           "extract_tasks", "kernel_task", "parse_time_budget", "target_key", "tune", "tune_kernel"]

#: Names served from submodules on first use, so that ``import ember`` does not load the tuner
#: (search, measurement, multiprocessing) until something tunes.
_LAZY = {"Task": "task", "extract_tasks": "task", "kernel_task": "task", "TaskResult": "tuner", "TuneResult": "tuner",
         "best_config": "tuner", "parse_time_budget": "tuner"}


def tune(*args: Any, **kwargs: Any) -> Any:
    """Tune a model's kernels: :func:`ember.tune.tuner.tune` (same arguments, a ``TuneResult``)."""
    from .tuner import tune as run

    return run(*args, **kwargs)


def tune_kernel(*args: Any, **kwargs: Any) -> Any:
    """Tune one te kernel: :func:`ember.tune.tuner.tune_kernel` (same arguments, a ``TuneResult``)."""
    from .tuner import tune_kernel as run

    return run(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """The type of the ``ember.tune`` package: a module that can be called as :func:`tune`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
