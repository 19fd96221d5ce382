"""The protocol every target's backend implements.

A backend turns lowered loop-IR functions into **parts** — a few named byte strings: object
code or a device binary plus one JSON description (``module.json``) — and turns parts back
into a runnable :class:`~ember.runtime.module.Module`. The same parts are what the compile
cache stores and what a saved model holds, so a fresh build, a cache hit and a loaded model all
go through one ``load``, which checks the parts as untrusted data and runs none of them.

The build driver (:func:`ember.backends.build_functions`) owns the cache; a backend never sees
it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from ..ir.stmt import PrimFunc
from ..runtime.module import Module
from ..target import Target

#: A compiled module as named files: ``module.json`` plus the backend's binaries.
Parts = dict[str, bytes]


class Backend(ABC):
    """One target kind's code generation, linking, serialising and loading."""

    #: The target kind this backend builds for (``Target.kind``).
    kind: ClassVar[str]

    def resolve(self, target: Target) -> Target:
        """``target`` with every default filled in that needs the machine (a GPU's architecture
        detected from the driver); called once per build, never while parsing a target."""
        return target

    @abstractmethod
    def fingerprint(self, target: Target) -> str:
        """What besides the loop IR decides the generated code (toolchain paths and versions);
        part of the cache key."""

    @abstractmethod
    def compile(self, funcs: list[PrimFunc], target: Target, jobs: int | None = None) -> Parts:
        """Generate, optimise, assemble and link ``funcs`` for ``target``; returns the parts.
        ``jobs``: processes the backend may use for it (None: its own choice; a backend that
        builds in one process ignores it)."""

    @abstractmethod
    def load(self, parts: Parts, target: Target | None = None) -> Module:
        """A runnable module from ``parts`` (as returned by :meth:`compile`, read from the cache
        or from a saved model). Checks sizes, formats and every field before use and raises
        :class:`~ember.errors.ModelFormatError` naming what is wrong; never runs code from the
        parts while loading."""

    @abstractmethod
    def serialize(self, module: Module) -> Parts:
        """The parts :meth:`load` reads back into an equivalent module."""
