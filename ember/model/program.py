"""A compiled program: the immutable result of compiling one graph for one target.

A :class:`Program` is a *plan* (plain JSON data: inputs, outputs, values, steps, the memory
plan, the target), one compiled module holding every kernel, and the constants the kernels
read. It holds no run state: intermediate buffers, staged inputs and device streams live in an
:class:`~ember.model.executor.ExecutionContext` per calling thread, so one program serves any
number of threads. Constants are placed in a device's memory once and shared by every context
on that device.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime.ndarray import Device
from .memory import DeviceMemory, HostMemory


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: its name, shape (an int per dimension, or a name for a
    dimension given at call time) and dtype."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str


@functools.lru_cache(maxsize=64)
def device_of_target(target: str) -> Device:
    """The device a model compiled for ``target`` runs on by default: the CPU, or GPU 0."""
    from ..runtime.ndarray import device

    kind = target.split()[0] if target else "llvm"
    return device("cpu", 0) if kind in ("llvm", "cpu") else device(kind, 0)


class Program:
    """One compiled graph: ``plan`` (JSON data), ``module`` (the kernels, or None when the
    model computes nothing) and ``consts`` (name -> C-contiguous array)."""

    def __init__(self, plan: dict[str, Any], module: Any, consts: dict[str, np.ndarray]):
        self.plan = plan
        self.module = module
        self.target = str(plan.get("target", "llvm"))
        self.consts = {k: np.require(v, requirements="C") for k, v in consts.items()}
        self.input_names: list[str] = [i["name"] for i in plan["inputs"]]
        self.output_names: list[str] = [o["name"] for o in plan["outputs"]]
        self.functions: dict[str, Any] = {}
        if module is not None:
            for st in plan["steps"]:
                if st["kind"] == "kernel":
                    self.functions[st["func"]] = module.get_function(st["func"])
        self._placed: dict[Device, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @property
    def inputs(self) -> list[TensorSpec]:
        """The inputs in call order."""
        return [TensorSpec(i["name"], tuple(i["shape"]), i["dtype"]) for i in self.plan["inputs"]]

    @property
    def outputs(self) -> list[TensorSpec]:
        """The outputs in the order calls return them."""
        return [TensorSpec(o["name"], tuple(o["shape"]), o["dtype"]) for o in self.plan["outputs"]]

    @property
    def num_kernels(self) -> int:
        """Number of compiled kernels."""
        return sum(1 for s in self.plan["steps"] if s["kind"] == "kernel")

    @property
    def is_gpu(self) -> bool:
        """True when the kernels run on a GPU."""
        return self.target.split()[0] not in ("llvm", "cpu")

    def memory(self, dev: Device) -> HostMemory | DeviceMemory:
        """A fresh memory interface for ``dev`` (one per execution context: GPU staging buffers
        belong to the context that fills them)."""
        return DeviceMemory(dev) if self.is_gpu else HostMemory()

    def constants_on(self, dev: Device, mem: HostMemory | DeviceMemory) -> dict[str, Any]:
        """The constants where kernels on ``dev`` read them, placed there once (thread-safe)."""
        placed = self._placed.get(dev)
        if placed is None:
            with self._lock:
                placed = self._placed.get(dev)
                if placed is None:
                    placed = {n: mem.upload(v) for n, v in self.consts.items()}
                    self._placed[dev] = placed
        return placed
