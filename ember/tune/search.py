"""Evolutionary search over one task's knob space, guided by a cost model trained online.

:class:`TaskSearch` proposes batches of configurations to measure:

1. the first batch is the default point (today's heuristic schedule, so every tuned kernel is
   at least as fast as the untuned one) and points sampled at random among the legal ones;
2. later batches: the cost model (:mod:`ember.tune.cost_model`) is trained on every
   measurement of the task; a population is bred from the fastest measured points by mutation
   (one knob changed) and crossover (each knob from one of two parents), topped up with random
   points, for ``generations`` rounds in which the model's best half survives; the batch is the
   model's top unmeasured points, with a fraction ``epsilon`` of random legal points kept for
   exploration.

Only legal points (``space.is_valid``: every check of the template passes) are ever proposed, so
illegal ones are rejected before any build. Points measured before (records of an earlier run)
are never proposed again: a run resumes where the last one stopped.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np

from ..strategy import ConfigEntity
from .cost_model import CostModel, features, make_model, normalized_throughput
from .task import Task

MIN_FOR_MODEL = 8


def config_key(cfg: ConfigEntity | dict[str, Any]) -> str:
    """The canonical text of a configuration's knob values (its identity)."""
    d = cfg.to_json() if isinstance(cfg, ConfigEntity) else cfg
    return json.dumps(d.get("knobs", d), sort_keys=True)


class TaskSearch:
    """The search state of one task (see the module docstring)."""

    def __init__(self, task: Task, model: str | CostModel = "auto", seed: int = 0, population: int = 128,
                 generations: int = 4, epsilon: float = 0.15):
        self.task = task
        self.space = task.space
        self.rng = random.Random(seed)
        self.model = make_model(model, seed) if isinstance(model, str) else model
        self.population, self.generations, self.epsilon = population, generations, epsilon
        #: measured points: config key -> (config, seconds or None when invalid)
        self.measured: dict[str, tuple[ConfigEntity, float | None]] = {}
        self._pending: set[str] = set()
        self._exhausted = False

    # -- bookkeeping ----------------------------------------------------------------------------
    def add(self, cfg: ConfigEntity, seconds: float | None) -> None:
        """Note a measurement (``seconds`` None: invalid)."""
        key = config_key(cfg)
        self._pending.discard(key)
        self.measured[key] = (cfg, seconds)

    def add_json(self, config: dict[str, Any], seconds: float | None) -> bool:
        """Note a stored measurement (a record's configuration); False when it is not a legal point
        of the space any more (then it is ignored)."""
        try:
            cfg = self.space.from_json(config)
        except ValueError:
            return False
        self.add(cfg, seconds)
        return True

    @property
    def best(self) -> tuple[ConfigEntity, float] | None:
        """The fastest valid measured point and its seconds."""
        valid = [(c, s) for c, s in self.measured.values() if s is not None]
        return min(valid, key=lambda cs: cs[1]) if valid else None

    @property
    def exhausted(self) -> bool:
        """True when no legal unmeasured point is left (as far as the search can find)."""
        return self._exhausted or len(self.measured) >= len(self.space)

    def _new(self, cfg: ConfigEntity) -> bool:
        key = config_key(cfg)
        return key not in self.measured and key not in self._pending and self.space.is_valid(cfg)

    def _random(self, n: int) -> list[ConfigEntity]:
        out, seen = [], set()
        for cfg in self.space.sample(4 * n + 16, seed=self.rng.randrange(1 << 30), valid_only=True):
            key = config_key(cfg)
            if key not in seen and self._new(cfg):
                seen.add(key)
                out.append(cfg)
            if len(out) == n:
                break
        return out

    # -- breeding -------------------------------------------------------------------------------
    def _mutate(self, cfg: ConfigEntity) -> ConfigEntity | None:
        knobs = self.space.knobs
        name = self.rng.choice(list(knobs))
        values = dict(cfg.items())
        values[name] = self.rng.choice(knobs[name].candidates)
        return self._point(values)

    def _crossover(self, a: ConfigEntity, b: ConfigEntity) -> ConfigEntity | None:
        values = {n: (a[n] if self.rng.random() < 0.5 else b[n]) for n in self.space.knobs}
        return self._point(values)

    def _point(self, values: dict[str, Any]) -> ConfigEntity | None:
        cfg = ConfigEntity(values, self.space.index_of(values))
        return cfg if self.space.is_valid(cfg) else None

    def _score(self, cfgs: list[ConfigEntity]) -> np.ndarray:
        return self.model.predict(np.stack([features(self.space, c) for c in cfgs]))

    def _train(self) -> None:
        pts = list(self.measured.values())
        x = np.stack([features(self.space, c) for c, _ in pts])
        y = normalized_throughput([s for _, s in pts])
        self.model.fit(x, y)

    def propose(self, n: int) -> list[ConfigEntity]:
        """Up to ``n`` legal points not measured yet (fewer when the space runs out)."""
        out: list[ConfigEntity] = []
        if not self.measured and not self._pending and self._new(self.space.default):
            out.append(self.space.default)
        valid = [c for c, s in self.measured.values() if s is not None]
        if len(self.measured) < MIN_FOR_MODEL or not valid:
            out += [c for c in self._random(n - len(out)) if config_key(c) not in {config_key(o) for o in out}]
        else:
            self._train()
            ranked = sorted(((c, s) for c, s in self.measured.values() if s is not None), key=lambda cs: cs[1])
            parents = [c for c, _ in ranked[: max(4, self.population // 8)]]
            pop: dict[str, ConfigEntity] = {}
            for c in self._random(self.population // 2):
                pop[config_key(c)] = c
            for _ in range(self.generations):
                children = []
                for _ in range(self.population):
                    if self.rng.random() < 0.5 or len(parents) < 2:
                        child = self._mutate(self.rng.choice(parents))
                    else:
                        a, b = self.rng.sample(parents, 2)
                        child = self._crossover(a, b)
                    if child is not None and self._new(child):
                        children.append(child)
                for c in children:
                    pop.setdefault(config_key(c), c)
                if not pop:
                    break
                cands = list(pop.values())
                scores = self._score(cands)
                order = np.argsort(-scores)
                keep = [cands[i] for i in order[: max(8, self.population // 2)]]
                parents = keep[: max(4, self.population // 8)] + parents[:2]
                pop = {config_key(c): c for c in keep}
            ranked_pop = list(pop.values())
            n_explore = max(1, int(round(self.epsilon * n))) if n > 1 else 0
            out += ranked_pop[: n - n_explore]
            have = {config_key(o) for o in out}
            out += [c for c in self._random(n - len(out) + 4) if config_key(c) not in have][: n - len(out)]
        if not out:
            self._exhausted = True
        for c in out:
            self._pending.add(config_key(c))
        return out[:n]
