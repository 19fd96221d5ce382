"""Knob spaces: the choices a schedule template leaves open, and one chosen point.

A schedule *template* declares its knobs in a :class:`ConfigSpace` and takes a
:class:`ConfigEntity` (one value per knob) when it builds a schedule. The space is a product of
its knobs; every point has an index in ``range(len(space))``. A template gives each knob its
*default* (the heuristic choice), so ``space.default`` reproduces the untuned schedule, and
registers checks (``space.add_check``) that reject illegal points (too much shared memory, too
many registers, a split that must divide) before anything is built: ``space.validate(cfg)``
raises :class:`InvalidConfig` naming every violated check.

Knobs:

* ``define_split(name, axis_or_extent, num_outputs=2, policy=...)``: how to split one axis into
  ``num_outputs`` nested loops. A point is a :class:`SplitEntity` whose ``size`` lists the
  loop extents, outermost first; ``size[0]`` is ``ceil(extent / prod(size[1:]))``, so the
  inner factors need not divide (the lowering guards the last partial iteration). Policies:
  ``"factors"`` (inner factors whose product divides the extent exactly), ``"power2"`` (inner
  factors powers of two), ``"candidate"`` (the given size tuples; a leading ``-1`` is derived).
* ``define_knob(name, values)``: one of ``values`` (a :class:`KnobEntity`, ``.val``).
* ``define_reorder(name, n_or_axes, policy="all" | "candidate")``: a permutation of ``n`` axes
  (a :class:`ReorderEntity`, ``.perm``).
* ``define_annotate(name, n_or_axes, policy="try_unroll" | "try_unroll_vec" | "candidate")``: an
  annotation per axis (``"none"``, ``"unroll"``, ``"vec"``, ``"parallel"``; an
  :class:`AnnotateEntity`, ``.anns``).

A point serialises to JSON (:meth:`ConfigEntity.to_json`, :meth:`ConfigEntity.from_json`,
:meth:`ConfigSpace.from_json` to check it against a space), so a tuner's records can store it.

Example, a user's GEMM schedule with two split knobs and an unroll knob::

    from ember import te
    from ember.strategy import ConfigSpace

    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    x, y = C.op.axis

    space = ConfigSpace()
    space.define_split("tile_x", x, num_outputs=2, policy="power2", default=(-1, 8))
    space.define_split("tile_y", y, num_outputs=2, policy="power2", default=(-1, 16))
    space.define_knob("unroll", [False, True])
    space.add_check(lambda c: None if c["tile_x"].size[1] * c["tile_y"].size[1] <= 256
                    else "the register tile is larger than 256 values")

    def schedule(cfg):
        s = te.create_schedule(C.op)
        xo, xi = cfg["tile_x"].apply(s, C, x)
        yo, yi = cfg["tile_y"].apply(s, C, y)
        s[C].reorder(xo, yo, xi, yi)
        s[C].vectorize(yi)
        if cfg["unroll"].val:
            s[C].unroll(xi)
        return s

    for cfg in space.sample(8, seed=0, valid_only=True):
        f = ember.build(schedule(cfg), [A, B, C])
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidConfig
from ..te import IterVar, Stage, Tensor
from ..te.schedule import Schedule
from .base import extent

StageLike = Stage | Tensor
ANNOTATIONS = ("none", "unroll", "vec", "parallel")


def _stage(s: Schedule, stage: StageLike) -> Stage:
    return stage if isinstance(stage, Stage) else s[stage]


def _plain(v: Any) -> Any:
    """A JSON-decoded value in the form the space stores it (lists become tuples)."""
    if isinstance(v, list):
        return tuple(_plain(x) for x in v)
    return v


# -- chosen values ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SplitEntity:
    """A chosen split: ``size`` lists the loop extents, outermost first."""

    size: tuple[int, ...]

    def apply(self, s: Schedule, stage: StageLike, axis: IterVar) -> list[IterVar]:
        """Split ``axis`` of ``stage`` (a stage or a tensor of ``s``) into ``len(size)`` loops,
        outermost first; returns them. The inner loops have extents ``size[1:]``; the outermost
        covers the rest (guarded by the lowering where the factors do not divide)."""
        st = _stage(s, stage)
        out: list[IterVar] = []
        cur = axis
        for k in range(len(self.size) - 1):
            outer, cur = st.split(cur, factor=math.prod(self.size[k + 1 :]))
            out.append(outer)
        out.append(cur)
        return out

    def to_json(self) -> dict[str, Any]:
        """``{"size": [...]}``."""
        return {"size": list(self.size)}


@dataclass(frozen=True)
class KnobEntity:
    """A chosen value of a :meth:`ConfigSpace.define_knob` knob."""

    val: Any

    def to_json(self) -> dict[str, Any]:
        """``{"val": value}`` (tuples become lists)."""
        return {"val": list(self.val) if isinstance(self.val, tuple) else self.val}


@dataclass(frozen=True)
class ReorderEntity:
    """A chosen loop order: ``perm[k]`` is the index (in the given axes) of the k-th loop."""

    perm: tuple[int, ...]

    def apply(self, s: Schedule, stage: StageLike, axes: Sequence[IterVar]) -> list[IterVar]:
        """Reorder ``axes`` of ``stage`` by ``perm``; returns them in their new order."""
        ordered = [axes[p] for p in self.perm]
        _stage(s, stage).reorder(*ordered)
        return ordered

    def to_json(self) -> dict[str, Any]:
        """``{"perm": [...]}``."""
        return {"perm": list(self.perm)}


@dataclass(frozen=True)
class AnnotateEntity:
    """A chosen annotation per axis (one of ``"none"``, ``"unroll"``, ``"vec"``, ``"parallel"``)."""

    anns: tuple[str, ...]

    def apply(self, s: Schedule, stage: StageLike, axes: Sequence[IterVar]) -> None:
        """Annotate each of ``axes`` of ``stage`` as chosen."""
        st = _stage(s, stage)
        for ax, a in zip(axes, self.anns):
            if a == "unroll":
                st.unroll(ax)
            elif a == "vec":
                st.vectorize(ax)
            elif a == "parallel":
                st.parallel(ax)

    def to_json(self) -> dict[str, Any]:
        """``{"anns": [...]}``."""
        return {"anns": list(self.anns)}


Entity = SplitEntity | KnobEntity | ReorderEntity | AnnotateEntity


def _entity_from_json(d: dict[str, Any]) -> Entity:
    if "size" in d:
        return SplitEntity(tuple(int(x) for x in d["size"]))
    if "perm" in d:
        return ReorderEntity(tuple(int(x) for x in d["perm"]))
    if "anns" in d:
        return AnnotateEntity(tuple(str(x) for x in d["anns"]))
    if "val" in d:
        return KnobEntity(_plain(d["val"]))
    raise InvalidConfig(f"a knob value must have one of the keys size, perm, anns, val; got {sorted(d)}")


class ConfigEntity:
    """One point of a :class:`ConfigSpace`: a value per knob, looked up by name
    (``cfg["tile_m"].size``, ``cfg["unroll"].val``). ``index`` is the point's index in its space
    (-1 when it was read from JSON without a space)."""

    def __init__(self, values: dict[str, Entity], index: int = -1):
        self._values = dict(values)
        self.index = index

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            raise InvalidConfig(f"configuration has no knob {name!r} (knobs: {', '.join(self._values) or 'none'})")
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def keys(self) -> list[str]:
        """The knob names, in definition order."""
        return list(self._values)

    def items(self) -> list[tuple[str, Entity]]:
        """``(name, chosen value)`` pairs, in definition order."""
        return list(self._values.items())

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict: ``{"index": i, "knobs": {name: {...}}}``; round-trips through
        :meth:`from_json` (and ``json.dumps``)."""
        return {"index": self.index, "knobs": {k: v.to_json() for k, v in self._values.items()}}

    @staticmethod
    def from_json(d: dict[str, Any] | str) -> ConfigEntity:
        """The point :meth:`to_json` wrote (a dict or its JSON text)."""
        if isinstance(d, str):
            d = json.loads(d)
        if not isinstance(d, dict) or not isinstance(d.get("knobs"), dict):
            raise InvalidConfig("a configuration's JSON must be an object with a 'knobs' object")
        return ConfigEntity({k: _entity_from_json(v) for k, v in d["knobs"].items()}, int(d.get("index", -1)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigEntity) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={_short(v)}" for k, v in self._values.items())
        return f"ConfigEntity(#{self.index}: {parts})"


def _short(v: Entity) -> str:
    if isinstance(v, SplitEntity):
        return str(list(v.size))
    if isinstance(v, ReorderEntity):
        return str(list(v.perm))
    if isinstance(v, AnnotateEntity):
        return str(list(v.anns))
    return repr(v.val)


# -- knob definitions --------------------------------------------------------------------------------
@dataclass
class Knob:
    """A knob of a space: its ``kind`` (``"split"``, ``"knob"``, ``"reorder"``, ``"annotate"``),
    its candidate values and the index of its default among them."""

    name: str
    kind: str
    candidates: list[Entity]
    default_index: int = 0

    def __len__(self) -> int:
        return len(self.candidates)


def _ordered_factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    """Every tuple of ``parts`` positive ints whose product is ``n``."""
    if parts == 1:
        return [(n,)]
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out.extend((d,) + rest for rest in _ordered_factorizations(n // d, parts - 1))
    return out


def _split_sizes(ext: int, inner: tuple[int, ...]) -> tuple[int, ...]:
    return (-(-ext // max(1, math.prod(inner))),) + inner


class ConfigSpace:
    """The knobs of a schedule template (see the module docstring). Knobs are looked up by name
    (``space["tile_m"]`` is the :class:`Knob`); points by index (:meth:`get`)."""

    def __init__(self) -> None:
        self._knobs: dict[str, Knob] = {}
        self._checks: list[Callable[[ConfigEntity], str | None]] = []

    # -- declaring knobs ------------------------------------------------------------------------
    def _add(self, knob: Knob, default: Entity | None) -> None:
        if knob.name in self._knobs:
            raise InvalidConfig(f"knob {knob.name!r} is defined twice")
        if not knob.candidates:
            raise InvalidConfig(f"knob {knob.name!r} has no candidate values")
        if default is not None:
            if default not in knob.candidates:
                raise InvalidConfig(f"the default {_short(default)} of knob {knob.name!r} is not one of its values")
            knob.default_index = knob.candidates.index(default)
        self._knobs[knob.name] = knob

    def define_split(
        self,
        name: str,
        axis_or_extent: IterVar | int,
        num_outputs: int = 2,
        policy: str = "factors",
        candidate: Sequence[Sequence[int]] | None = None,
        max_factor: int | None = None,
        default: Sequence[int] | None = None,
    ) -> Knob:
        """Declare how axis ``axis_or_extent`` (an IterVar of constant extent, or the extent)
        splits into ``num_outputs`` loops; see the module docstring for the policies. Inner
        factors above ``max_factor`` are left out. ``default`` is a size tuple (a leading -1 is
        derived), else the first candidate. Returns the knob."""
        ext = extent(axis_or_extent) if isinstance(axis_or_extent, IterVar) else int(axis_or_extent)
        if ext < 1:
            raise InvalidConfig(f"split {name!r}: the axis extent must be a positive constant, not {ext}")
        if num_outputs < 1:
            raise InvalidConfig(f"split {name!r}: num_outputs must be at least 1")
        inners: list[tuple[int, ...]]
        if policy == "factors":
            inners = [f[1:] for f in _ordered_factorizations(ext, num_outputs)]
        elif policy == "power2":
            pows = [1 << p for p in range(ext.bit_length()) if 1 << p <= ext]
            inners = [t for t in itertools.product(pows, repeat=num_outputs - 1) if math.prod(t) <= ext]
        elif policy == "candidate":
            if not candidate:
                raise InvalidConfig(f"split {name!r}: policy 'candidate' needs candidate=[...]")
            inners = []
            for c in candidate:
                c = tuple(int(x) for x in c)
                if len(c) != num_outputs:
                    raise InvalidConfig(f"split {name!r}: candidate {list(c)} does not have {num_outputs} sizes")
                if c[0] != -1 and c[0] * math.prod(c[1:]) < ext:
                    raise InvalidConfig(f"split {name!r}: candidate {list(c)} covers less than the extent {ext}")
                inners.append(c[1:])
        else:
            raise InvalidConfig(f"split {name!r}: unknown policy {policy!r} (use 'factors', 'power2' or 'candidate')")
        if max_factor is not None:
            inners = [t for t in inners if all(f <= max_factor for f in t)]
        if any(f < 1 for t in inners for f in t):
            raise InvalidConfig(f"split {name!r}: split factors must be positive")
        cands: list[Entity] = list(dict.fromkeys(SplitEntity(_split_sizes(ext, t)) for t in inners))
        dflt = None
        if default is not None:
            d = tuple(int(x) for x in default)
            dflt = SplitEntity(_split_sizes(ext, d[1:]))
        knob = Knob(name, "split", cands)
        self._add(knob, dflt)
        return knob

    def define_knob(self, name: str, values: Sequence[Any], default: Any = None) -> Knob:
        """Declare a knob taking one of ``values`` (JSON-representable: numbers, strings, bools,
        tuples of them); ``default`` is one of them (else the first). Returns the knob."""
        vals = [_plain(v) for v in values]
        knob = Knob(name, "knob", [KnobEntity(v) for v in dict.fromkeys(vals)])
        self._add(knob, KnobEntity(_plain(default)) if default is not None else None)
        return knob

    def define_reorder(
        self,
        name: str,
        n_or_axes: int | Sequence[IterVar],
        policy: str = "all",
        candidate: Sequence[Sequence[int]] | None = None,
        default: Sequence[int] | None = None,
    ) -> Knob:
        """Declare a loop order of ``n`` axes: every permutation (``policy="all"``, at most 7
        axes) or the given ones (``"candidate"``). ``default`` is a permutation (else the
        identity, or the first candidate). Returns the knob."""
        n = n_or_axes if isinstance(n_or_axes, int) else len(n_or_axes)
        if policy == "all":
            if n > 7:
                raise InvalidConfig(f"reorder {name!r}: {n} axes have too many orders; give candidates")
            perms = list(itertools.permutations(range(n)))
        elif policy == "candidate" and candidate:
            perms = [tuple(int(x) for x in c) for c in candidate]
            for p in perms:
                if sorted(p) != list(range(n)):
                    raise InvalidConfig(f"reorder {name!r}: {list(p)} is not a permutation of {n} axes")
        else:
            raise InvalidConfig(f"reorder {name!r}: use policy 'all', or 'candidate' with candidate=[...]")
        knob = Knob(name, "reorder", [ReorderEntity(p) for p in perms])
        self._add(knob, ReorderEntity(tuple(default)) if default is not None else None)
        return knob

    def define_annotate(
        self,
        name: str,
        n_or_axes: int | Sequence[IterVar],
        policy: str = "try_unroll",
        candidate: Sequence[Sequence[str]] | None = None,
        default: Sequence[str] | None = None,
    ) -> Knob:
        """Declare an annotation per axis of ``n`` axes: ``"try_unroll"`` (each axis unrolled or
        not), ``"try_unroll_vec"`` (the same, and the last axis also vectorized or not) or
        ``"candidate"`` (the given tuples). Returns the knob."""
        n = n_or_axes if isinstance(n_or_axes, int) else len(n_or_axes)
        if policy == "try_unroll":
            anns = list(itertools.product(("none", "unroll"), repeat=n))
        elif policy == "try_unroll_vec":
            heads = list(itertools.product(("none", "unroll"), repeat=max(0, n - 1)))
            anns = [h + (last,) for h in heads for last in ("none", "unroll", "vec")] if n else [()]
        elif policy == "candidate" and candidate:
            anns = [tuple(c) for c in candidate]
            for a in anns:
                if len(a) != n or any(x not in ANNOTATIONS for x in a):
                    raise InvalidConfig(f"annotate {name!r}: {list(a)} is not {n} of {ANNOTATIONS}")
        else:
            raise InvalidConfig(f"annotate {name!r}: unknown policy {policy!r}")
        knob = Knob(name, "annotate", [AnnotateEntity(tuple(a)) for a in anns])
        self._add(knob, AnnotateEntity(tuple(default)) if default is not None else None)
        return knob

    def add_check(self, check: Callable[[ConfigEntity], str | None]) -> None:
        """Register a legality check: ``check(cfg)`` returns None for a legal point, else the
        reason it is illegal. :meth:`validate` runs every check."""
        self._checks.append(check)

    # -- points ---------------------------------------------------------------------------------
    @property
    def knobs(self) -> dict[str, Knob]:
        """The knobs by name, in definition order."""
        return dict(self._knobs)

    def __getitem__(self, name: str) -> Knob:
        if name not in self._knobs:
            raise InvalidConfig(f"space has no knob {name!r} (knobs: {', '.join(self._knobs) or 'none'})")
        return self._knobs[name]

    def __len__(self) -> int:
        return math.prod(len(k) for k in self._knobs.values())

    def get(self, index: int) -> ConfigEntity:
        """The point with ``index`` (``0 <= index < len(self)``; the first knob varies fastest)."""
        if not 0 <= index < len(self):
            raise InvalidConfig(f"point {index} is outside the space of {len(self)} points")
        values: dict[str, Entity] = {}
        rest = index
        for name, knob in self._knobs.items():
            rest, k = divmod(rest, len(knob))
            values[name] = knob.candidates[k]
        return ConfigEntity(values, index)

    def index_of(self, values: dict[str, Entity]) -> int:
        """The index of the point holding ``values`` (one per knob); raises :class:`InvalidConfig`
        when a knob is missing, unknown or holds a value the space does not have."""
        extra = set(values) - set(self._knobs)
        if extra:
            raise InvalidConfig(f"unknown knob(s) {sorted(extra)} (knobs: {', '.join(self._knobs) or 'none'})")
        index, stride = 0, 1
        for name, knob in self._knobs.items():
            if name not in values:
                raise InvalidConfig(f"the configuration has no value for knob {name!r}")
            v = values[name]
            if v not in knob.candidates:
                raise InvalidConfig(f"{_short(v)} is not a value of knob {name!r}")
            index += knob.candidates.index(v) * stride
            stride *= len(knob)
        return index

    @property
    def default(self) -> ConfigEntity:
        """The point of every knob's default: the template's heuristic choice."""
        values = {n: k.candidates[k.default_index] for n, k in self._knobs.items()}
        return ConfigEntity(values, self.index_of(values))

    def __iter__(self) -> Iterator[ConfigEntity]:
        return (self.get(i) for i in range(len(self)))

    def sample(self, n: int, seed: int = 0, valid_only: bool = False) -> list[ConfigEntity]:
        """Up to ``n`` distinct points drawn at random (reproducibly for a ``seed``); with
        ``valid_only``, only points every check accepts."""
        rng = random.Random(seed)
        total = len(self)
        if total <= 4096:
            picks = list(range(total))
            rng.shuffle(picks)
        else:  # a large space: enough random indices to find n legal points in most spaces
            picks = rng.sample(range(total), min(total, 64 * n))
        out: list[ConfigEntity] = []
        for i in picks:
            cfg = self.get(i)
            if valid_only and not self.is_valid(cfg):
                continue
            out.append(cfg)
            if len(out) == n:
                break
        return out

    def errors(self, cfg: ConfigEntity) -> list[str]:
        """Why ``cfg`` is illegal: a missing or unknown knob or value, or the reason of every
        failing check; empty for a legal point."""
        try:
            self.index_of(dict(cfg.items()))
        except InvalidConfig as e:
            return [str(e)]
        return [r for r in (check(cfg) for check in self._checks) if r]

    def is_valid(self, cfg: ConfigEntity) -> bool:
        """True when ``cfg`` is a point of this space that every check accepts."""
        return not self.errors(cfg)

    def validate(self, cfg: ConfigEntity) -> ConfigEntity:
        """``cfg`` when it is legal (with its index in this space); raises :class:`InvalidConfig`
        listing every reason it is not."""
        errs = self.errors(cfg)
        if errs:
            raise InvalidConfig(f"illegal configuration {cfg!r}: " + "; ".join(errs))
        return ConfigEntity(dict(cfg.items()), self.index_of(dict(cfg.items())))

    def from_json(self, d: dict[str, Any] | str) -> ConfigEntity:
        """A point read from :meth:`ConfigEntity.to_json` output and checked against this space
        (values and checks); raises :class:`InvalidConfig` when it is not legal here."""
        return self.validate(ConfigEntity.from_json(d))

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {k.kind} x{len(k)}" for n, k in self._knobs.items())
        return f"ConfigSpace({len(self)} points; {parts})"
