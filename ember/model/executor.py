"""The executor: runs a :class:`~ember.model.program.Program`'s steps with one thread's state.

An :class:`ExecutionContext` owns everything a call mutates: the planned intermediate storages
and their typed views, GPU staging buffers for host inputs, and the buffer addresses that stay
the same between calls. A :class:`~ember.model.model.Model` keeps one context per calling
thread and device, so concurrent calls never share a buffer. Constants are shared (kernels only
read them).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..errors import ArgumentError, EmberError
from ..runtime.ndarray import Device
from .memory import HostMemory
from .program import Program


class ExecutionContext:
    """The run state of one program on one device for one thread."""

    def __init__(self, program: Program, device: Device):
        self.program = program
        self.device = device
        self.mem = program.memory(device)
        plan = program.plan
        self._storages = [self.mem.storage(n) for n in plan["storages"]]
        self._views: dict[str, Any] = {}
        for name, sid in plan["assign"].items():
            info = plan["values"][name]
            self._views[name] = self.mem.view(self._storages[sid], tuple(info["shape"]), info["dtype"])
        self._consts = program.constants_on(device, self.mem)
        # Addresses of the buffers that are the same on every call (planned storages, constants).
        self._ptrs = {n: self.mem.ptr(a) for n, a in self._views.items()}
        self._ptrs.update({n: self.mem.ptr(a) for n, a in self._consts.items()})

    def bind(self, given: dict[str, Any]) -> dict[str, Any]:
        """The environment of one call: constants plus the inputs in ``given`` (name -> value),
        each checked against the plan and placed where the kernels read it."""
        env: dict[str, Any] = dict(self._consts)
        for spec in self.program.plan["inputs"]:
            env[spec["name"]] = self._prepare(spec["name"], given[spec["name"]], spec)
        return env

    def _prepare(self, name: str, value: Any, spec: dict[str, Any]) -> Any:
        from ..ops.lowp import host_input

        value = self.mem.accept(name, host_input(value, spec["dtype"]))
        want_dt, want_shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
        if np.dtype(value.dtype) != want_dt:
            raise ArgumentError(
                f"input {name!r} has dtype {value.dtype}, but the model was compiled for {want_dt}: "
                f"convert it with x.astype({str(want_dt)!r})"
            )
        if tuple(value.shape) != want_shape:
            raise ArgumentError(
                f"input {name!r} has shape {tuple(value.shape)}, but the model was compiled for "
                f"{want_shape}: pass an array of that shape, or compile again with "
                f"input_shapes={{{name!r}: {tuple(value.shape)}}}"
            )
        return self.mem.place(name, value)

    def run(self, env: dict[str, Any], times: dict[str, float] | None = None) -> list[Any]:
        """Run every step on ``env`` (from :meth:`bind`); returns the outputs as arrays of this
        device that the caller owns. With ``times``, records the best time of each kernel
        (synchronising after each)."""
        mem = self.mem
        program = self.program
        env.update(self._views)
        values = program.plan["values"]
        fixed = self._ptrs
        for st in program.plan["steps"]:
            if st["kind"] == "view":
                env[st["dst"]] = mem.reshape(env[st["src"]], tuple(values[st["dst"]]["shape"]))
                continue
            ptrs = []
            for a in st["args"]:
                p = fixed.get(a)
                if p is None:
                    arr = env.get(a)
                    if arr is None:
                        info = values[a]
                        arr = mem.empty(tuple(info["shape"]), info["dtype"])
                        env[a] = arr
                    p = mem.ptr(arr)
                ptrs.append(p)
            fn = program.functions[st["func"]]
            t0 = time.perf_counter() if times is not None else 0.0
            rc = fn._invoke(ptrs, [])
            if times is not None:
                mem.sync()
                dt = time.perf_counter() - t0
                times[st["func"]] = min(times.get(st["func"], dt), dt)
            if rc != 0:
                raise EmberError(f"kernel {st['func']} failed at run time (code {rc})")
        outs = []
        for name in program.output_names:
            arr = env[name]
            shared = name in self._views or name in self._consts or name in program.input_names
            outs.append(mem.copy(arr) if shared else arr)
        return outs

    def to_host(self, arr: Any) -> np.ndarray:
        """An output as a NumPy array."""
        return self.mem.to_host(arr)

    @property
    def on_host(self) -> bool:
        """True when the kernels run on the CPU."""
        return isinstance(self.mem, HostMemory)
