"""The executor: runs a :class:`~ember.model.program.Program`'s steps with one thread's state.

An :class:`ExecutionContext` owns everything a call mutates: the planned intermediate storages
and their typed views, GPU staging buffers for host inputs, and the buffer addresses that stay
the same between calls. A :class:`~ember.model.model.Model` keeps one context per calling
thread and device, so concurrent calls never share a buffer. Constants are shared (kernels only
read them).

On CUDA a context owns one stream (:class:`~ember.model.memory.DeviceMemory`): its launches and
copies go there, so two threads' calls do not wait for each other. With graphs on, the first
call runs the steps with plain launches (its answer; kernels get loaded and workspaces
allocated) and then captures the same launches into one CUDA graph (thread-local capture mode:
a synchronising or allocating call in this thread invalidates the capture, other threads carry
on); later calls copy the inputs into the context's fixed input buffers, replay the graph with
one driver call and copy the outputs into fresh arrays. Every address
baked into the graph belongs to the context (planned storages, staging buffers, buffers of the
values the plan does not place) or to the program (constants), so it is the same on every
replay. A capture that fails (no graph support in the driver, an operation that synchronises)
leaves the model on plain launches, with one warning.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from typing import Any

import numpy as np

from ..errors import ArgumentError, EmberError
from ..profiler.recorder import StepRecorder
from ..runtime.ndarray import Device, NDArray
from .memory import HostMemory
from .program import Program


class GraphState:
    """What the contexts of one model share about graphs: whether capturing failed (and was
    reported) already, so that the model falls back once, with one warning."""

    def __init__(self) -> None:
        #: Why capturing failed (the driver's message), or None.
        self.failed: str | None = None
        self.warned = False


class ExecutionContext:
    """The run state of one program on one device for one thread."""

    def __init__(self, program: Program, device: Device, graph_state: GraphState | None = None):
        self.program = program
        # What profile times are recorded under, per step: the kernel's name, and "name#2",
        # "name#3"... for the later steps that call a kernel shared with an earlier one.
        seen: dict[str, int] = {}
        self._labels: list[str] = []
        for st in program.plan["steps"]:
            if st["kind"] == "kernel":
                seen[st["func"]] = seen.get(st["func"], 0) + 1
                n = seen[st["func"]]
                self._labels.append(st["func"] if n == 1 else f"{st['func']}#{n}")
            else:
                self._labels.append("")
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
        self._stream = getattr(self.mem, "stream", None)
        if self._stream is not None:
            self.mem.after_default_stream()  # constants uploaded on the default stream
        self._graph_state = graph_state or GraphState()
        self._graphs_possible = (self._stream is not None and getattr(self.mem, "graphs", False)
                                 and program.num_kernels > 0)
        self._graph: Any = None
        self._graph_key: tuple[int, ...] | None = None
        # Values the plan does not place (outputs, mostly) get buffers of their own in graph
        # mode, kept for the context's life: the graph writes to them on every replay.
        self._fixed: dict[str, Any] = {}
        self._graph_outputs: list[Any] = []
        #: Calls of this context answered by replaying its graph (graphs captured: ``captures``).
        self.replays = 0
        self.captures = 0

    @property
    def labels(self) -> list[str]:
        """Per step of the plan, what a profile calls it: the kernel's name, ``name#2``,
        ``name#3``... for later steps calling a kernel shared with an earlier one; "" for views."""
        return list(self._labels)

    def graphs_available(self) -> bool:
        """True when calls can be replayed as a CUDA graph (a CUDA stream, kernels to launch, and
        no earlier capture of this model failed)."""
        return self._graphs_possible and self._graph_state.failed is None

    def bind(self, given: dict[str, Any], fixed: bool = False) -> dict[str, Any]:
        """The environment of one call: constants plus the inputs in ``given`` (name -> value),
        each checked against the plan and placed where the kernels read it (``fixed``: in the
        context's own input buffers, also when the caller passes device arrays)."""
        env: dict[str, Any] = dict(self._consts)
        accepted = [(spec, self._accept(spec["name"], given[spec["name"]], spec))
                    for spec in self.program.plan["inputs"]]
        if self._stream is not None and any(isinstance(v, NDArray) for _, v in accepted):
            self.mem.after_default_stream()  # the caller's device data may still be computed there
        for spec, value in accepted:
            env[spec["name"]] = self.mem.place(spec["name"], value, fixed)
        return env

    def _accept(self, name: str, value: Any, spec: dict[str, Any]) -> Any:
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
        return value

    def run(self, env: dict[str, Any], times: StepRecorder | None = None, graph: bool = False) -> list[Any]:
        """Run every step on ``env`` (from :meth:`bind`); returns the outputs as arrays of this
        device that the caller owns (on a GPU, possibly still being computed on the context's
        stream: :meth:`finish` or :meth:`outputs_to_host` wait). With ``times``
        (:class:`~ember.profiler.recorder.StepRecorder`), each kernel step is timed (kernel by
        kernel, never from a graph). With ``graph`` (and ``env`` bound with ``fixed=True``),
        replays the context's CUDA graph (the first such call runs the steps and captures the
        graph)."""
        if times is not None:
            times.begin_run(self)
        if self._stream is None:
            return self._run_steps(env, times, None)
        drv = self.device.driver()
        prev = drv.set_stream(self._stream)
        try:
            if graph and times is None and self.graphs_available():
                return self._run_graph(env)
            return self._run_steps(env, times, None)
        finally:
            drv.set_stream(prev)

    def _run_steps(self, env: dict[str, Any], times: StepRecorder | None,
                   fixed: dict[str, Any] | None) -> list[Any]:
        """Launch every step. ``fixed``: where values the plan does not place are kept between
        calls (graph capture); None: fresh arrays for this call."""
        mem = self.mem
        program = self.program
        env.update(self._views)
        values = program.plan["values"]
        ptrs_of = self._ptrs
        for j, st in enumerate(program.plan["steps"]):
            if st["kind"] == "view":
                env[st["dst"]] = mem.reshape(env[st["src"]], tuple(values[st["dst"]]["shape"]))
                continue
            ptrs = []
            for a in st["args"]:
                p = ptrs_of.get(a)
                if p is None:
                    arr = env.get(a)
                    if arr is None:
                        arr = fixed.get(a) if fixed is not None else None
                        if arr is None:
                            info = values[a]
                            arr = mem.empty(tuple(info["shape"]), info["dtype"])
                            if fixed is not None:
                                fixed[a] = arr
                        env[a] = arr
                    p = mem.ptr(arr)
                ptrs.append(p)
            fn = program.functions[st["func"]]
            if times is not None:
                times.start(j)
            rc = fn._invoke(ptrs, [])
            if times is not None:
                times.stop(j)
            if rc != 0:
                raise EmberError(f"kernel {st['func']} failed at run time (code {rc})")
        if fixed is not None:
            return []  # a capture: the replay copies the outputs out (_run_graph)
        outs = []
        for name in program.output_names:
            arr = env[name]
            shared = name in self._views or name in self._consts or name in program.input_names
            outs.append(mem.copy(arr) if shared else arr)
        return outs

    def _run_graph(self, env: dict[str, Any]) -> list[Any]:
        """Replay the context's graph of every launch. Without one for these input addresses,
        run the steps plainly into the context's fixed buffers (this call's answer, and the
        warm-up: kernels loaded, workspaces allocated, nothing left to allocate) and capture
        them; a capture that fails turns graphs off for the model, with one warning."""
        key = tuple(self.mem.ptr(env[n]) for n in self.program.input_names)
        if self._graph is None or key != self._graph_key:
            self._graph = None
            self._allocate_fixed(env)
            self._run_steps(dict(env), None, self._fixed)
            if self._capture(env):
                self._graph_key = key
            # Where the steps leave the outputs (all buffers of the context or the program).
            env.update(self._views)
            env.update(self._fixed)
            values = self.program.plan["values"]
            for st in self.program.plan["steps"]:
                if st["kind"] == "view":
                    env[st["dst"]] = self.mem.reshape(env[st["src"]], tuple(values[st["dst"]]["shape"]))
            self._graph_outputs = [env[name] for name in self.program.output_names]
        else:
            self._graph.launch(self._stream)
            self.replays += 1
        copy = self.mem.copy
        return [copy(a) for a in self._graph_outputs]

    def _capture(self, env: dict[str, Any]) -> bool:
        """Capture the launches of one run into ``self._graph`` (nothing runs); False (and one
        warning for the model) when the driver refuses."""
        drv = self.device.driver()
        state = self._graph_state
        # No garbage is collected during the capture (a cuMemFree would invalidate it).
        gc_was_on = gc.isenabled()
        gc.disable()
        graph = None
        try:
            drv.begin_capture(self._stream, "thread_local")
            captured = False
            try:
                self._run_steps(dict(env), None, self._fixed)
                captured = True
            finally:
                if not captured:  # leave capture mode; the launch's own error is the one to report
                    with contextlib.suppress(EmberError):
                        drv.end_capture(self._stream)
            graph = drv.end_capture(self._stream)
        except EmberError as exc:
            state.failed = state.failed or str(exc)
            graph = None
            if not state.warned:
                state.warned = True
                warnings.warn(f"ember: capturing the model's kernel launches into a CUDA graph failed ({exc}); "
                              "it runs with one launch per kernel instead", RuntimeWarning, stacklevel=4)
        finally:
            if gc_was_on:
                gc.enable()
        self._graph = graph
        if graph is None:
            return False
        self.captures += 1
        return True

    def _allocate_fixed(self, env: dict[str, Any]) -> None:
        values = self.program.plan["values"]
        placed = set(env) | set(self._views) | set(self._consts)
        for st in self.program.plan["steps"]:
            if st["kind"] == "view":
                placed.add(st["dst"])
                continue
            for a in st["args"]:
                if a not in placed and a not in self._fixed:
                    info = values[a]
                    self._fixed[a] = self.mem.empty(tuple(info["shape"]), info["dtype"])

    def replay(self) -> None:
        """Launch the captured graph as it is (no input or output copies; nothing waits): what a
        replay costs on its own, for measurements. Raises EmberError without a graph."""
        if self._graph is None:
            raise EmberError("this execution context has no CUDA graph (call the model with cuda_graphs on first)")
        self._graph.launch(self._stream)

    @property
    def graph_nodes(self) -> int:
        """Nodes (kernel launches) of the graph this context replays; 0 without one."""
        return self._graph.nodes if self._graph is not None else 0

    def finish(self) -> None:
        """Wait until this context's queued work (kernels, copies) is done."""
        if self._stream is not None:
            self.mem.sync()

    def outputs_to_host(self, arrs: list[Any]) -> list[np.ndarray]:
        """The outputs as NumPy arrays (one wait for all the copies)."""
        return self.mem.all_to_host(arrs)

    def to_host(self, arr: Any) -> np.ndarray:
        """An output as a NumPy array."""
        return self.mem.to_host(arr)

    @property
    def on_host(self) -> bool:
        """True when the kernels run on the CPU."""
        return isinstance(self.mem, HostMemory)
