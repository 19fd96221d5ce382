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

import sys
import types
from typing import Any

from .keys import TargetKey, target_key
from .records import Record, TuningDB, default_db_path
from .task import Task, extract_tasks, kernel_task
from .tuner import TaskResult, TuneResult, best_config, parse_time_budget, tune, tune_kernel

__all__ = ["Record", "TargetKey", "Task", "TaskResult", "TuneResult", "TuningDB", "best_config", "default_db_path",
           "extract_tasks", "kernel_task", "parse_time_budget", "target_key", "tune", "tune_kernel"]


class _CallableModule(types.ModuleType):
    """The type of the ``ember.tune`` package: a module that can be called as :func:`tune`."""

    def __call__(self, *args: Any, **kwargs: Any) -> TuneResult:
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
