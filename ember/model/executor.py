"""The executor: runs a :class:`~ember.model.program.Program`'s steps with one thread's state.

An :class:`ExecutionContext` owns everything a call mutates: the planned intermediate storages
and their typed views, GPU staging buffers for host inputs, and the buffer addresses that stay
the same between calls. A :class:`~ember.model.model.Model` keeps one context per calling
thread and device, so concurrent calls never share a buffer. Constants are shared (kernels only
read them).

On the CPU a context runs the kernels by one native call per model call
(:class:`~ember.model.native_run.HostRun`: the steps over an address table, walked by
``ember_run_plan`` with the GIL released); a profiled call, and a program whose kernels it cannot
call, take the Python loop of :meth:`ExecutionContext._run_steps`, one ctypes call per kernel.

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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, EmberError
from ..profiler.recorder import StepRecorder
from ..runtime.ndarray import Device, NDArray
from .memory import HostMemory
from .program import Program


def _np_dtype(name: str) -> Any:
    """The NumPy dtype of an ember dtype name, or None when NumPy has none."""
    try:
        return np.dtype(name)
    except TypeError:
        return None


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
        # GPU functions launch on their thread's current device (one per device kind, shared by all
        # functions); a context launches with raw addresses, so it sets that device before each run.
        self._bind_device = next((f.bind_device for f in program.functions.values() if hasattr(f, "bind_device")),
                                 None)
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
        # I/O binding by address (run_addresses): its plan, buffers and graph, apart from the above.
        self._io: Any = None
        # On the CPU: the steps as one native walk (native_run.HostRun), built at the first call;
        # False when the program's kernels cannot be walked natively.
        self._host_run: Any = None
        self._io_steps: Any = None  # the same for run_addresses on the CPU (native_run.native_steps)
        # On the host: (name, NumPy dtype, shape, spec) per input, for bind's fast path (empty:
        # none, as on a device or when an input's dtype has no NumPy dtype).
        self._host_specs: list[tuple[str, Any, tuple[int, ...], dict[str, Any]]] | None = None
        #: CPU: run the kernels by one native walk when the program allows it (True, the
        #: default); False: call them one by one from Python, as a profiled call does (for
        #: measuring what the walk saves).
        self.native = True

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
        """The environment of one call: the inputs in ``given`` (name -> value), each checked
        against the plan and placed where the kernels read it (``fixed``: in the context's own
        input buffers, also when the caller passes device arrays); :meth:`run` adds the
        constants where it needs them."""
        if self._host_specs is None:
            specs = [(spec["name"], _np_dtype(spec["dtype"]), tuple(spec["shape"]), spec)
                     for spec in self.program.plan["inputs"]]
            self._host_specs = specs if self.on_host and all(dt is not None for _, dt, _, _ in specs) else []
        if self._host_specs:
            # On the host, an array of the planned dtype and shape in C order is taken as it is.
            env: dict[str, Any] = {}
            for name, dt, shape, spec in self._host_specs:
                v = given[name]
                if type(v) is np.ndarray and v.dtype == dt and v.shape == shape and v.flags.c_contiguous:
                    env[name] = v
                else:
                    env[name] = self.mem.place(name, self._accept(name, v, spec), fixed)
            return env
        env = {}
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

    def run(self, env: dict[str, Any], times: StepRecorder | None = None, graph: bool = False,
            out: dict[str, Any] | None = None) -> list[Any]:
        """Run every step on ``env`` (from :meth:`bind`); returns the outputs as arrays of this
        device that the caller owns (on a GPU, possibly still being computed on the context's
        stream: :meth:`finish` or :meth:`outputs_to_host` wait). With ``times``
        (:class:`~ember.profiler.recorder.StepRecorder`), each kernel step is timed (kernel by
        kernel, never from a graph). With ``graph`` (and ``env`` bound with ``fixed=True``),
        replays the context's CUDA graph (the first such call runs the steps and captures the
        graph). ``out`` (output name -> array the caller owns, checked by the caller: the
        output's shape and dtype, on this device or a NumPy array): those outputs are written
        there — by the kernels themselves where the array is on this device and the plan does
        not place the value, else copied — and the same arrays are returned.

        On the CPU (``native``, no ``times``) the kernels run by one native call that walks
        them all (:mod:`ember.model.native_run`); otherwise one call per kernel from Python."""
        if times is not None:
            times.begin_run(self)
        if self._stream is None and times is None and self.native and self.on_host:
            host = self._host()
            if host:
                return host.run(env, out)
        env = {**self._consts, **env}
        if self._stream is None:
            return self._run_steps(env, times, None, out)
        drv = self.device.driver()
        prev = drv.set_stream(self._stream)
        try:
            if graph and times is None and self.graphs_available():
                return self._run_graph(env, out)
            return self._run_steps(env, times, None, out)
        finally:
            drv.set_stream(prev)

    def _bind(self) -> None:
        """Make this thread's launches of the program's GPU functions go to this context's device."""
        if self._bind_device is not None:
            self._bind_device(self.device.index)

    def _host(self) -> Any:
        """The context's :class:`~ember.model.native_run.HostRun` (built once), or False when
        its program's kernels cannot be walked natively."""
        if self._host_run is None:
            from .native_run import HostRun

            run = HostRun(self.program, self._ptrs, self.mem)
            self._host_run = run if run.available else False
        return self._host_run

    def _run_steps(self, env: dict[str, Any], times: StepRecorder | None,
                   fixed: dict[str, Any] | None, out: dict[str, Any] | None = None) -> list[Any]:
        """Launch every step. ``fixed``: where values the plan does not place are kept between
        calls (graph capture); None: fresh arrays for this call. ``out``: as for :meth:`run`."""
        mem = self.mem
        program = self.program
        env.update(self._views)
        if out:
            for name, arr in out.items():
                if name not in env and isinstance(arr, np.ndarray) == self.on_host:
                    env[name] = arr  # the kernel computing it writes the caller's array
        values = program.plan["values"]
        ptrs_of = self._ptrs
        self._bind()
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
            dst = out.get(name) if out else None
            if dst is not None:
                outs.append(dst if arr is dst else self._copy_into(dst, arr))
                continue
            shared = name in self._views or name in self._consts or name in program.input_names
            outs.append(mem.copy(arr) if shared else arr)
        return outs

    def _copy_into(self, dst: Any, src: Any) -> Any:
        """Copy ``src`` (an array of this device) into ``dst`` (the caller's array of this
        device, or a NumPy array); returns ``dst``."""
        if isinstance(dst, np.ndarray):
            np.copyto(dst, src if self.on_host else self.mem.to_host(src))
        elif self._stream is None:  # a GPU driver without streams (ROCm)
            dst.copyfrom(src)
        elif dst.nbytes:
            self.device.driver().memcpy_dtod_async(dst.data_ptr, src.data_ptr, dst.nbytes, self._stream,
                                                   self.device.index)
        return dst

    def _run_graph(self, env: dict[str, Any], out: dict[str, Any] | None = None) -> list[Any]:
        """Replay the context's graph of every launch. Without one for these input addresses,
        run the steps plainly into the context's fixed buffers (this call's answer, and the
        warm-up: kernels loaded, workspaces allocated, nothing left to allocate) and capture
        them; a capture that fails turns graphs off for the model, with one warning."""
        key = tuple(self.mem.ptr(env[n]) for n in self.program.input_names)
        if self._graph is None or key != self._graph_key:
            self._graph = None
            self._allocate_fixed(env)
            self._run_steps(dict(env), None, self._fixed)
            if self._capture(lambda: self._run_steps(dict(env), None, self._fixed)):
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
        names = self.program.output_names
        return [self._copy_into(out[n], a) if out and n in out else copy(a) for n, a in zip(names, self._graph_outputs)]

    def _capture(self, launch: Callable[[], Any], into_io: bool = False) -> bool:
        """Capture the launches ``launch()`` queues on the context's stream into
        ``self._graph`` (``into_io``: the graph of :meth:`run_addresses`); nothing runs. False
        (and one warning for the model) when the driver refuses."""
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
                launch()
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
        if into_io:
            self._io.graph = graph
        else:
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

    # -- I/O binding by address (frameworks' tensors: ember.torch_backend) ---------------------
    def run_addresses(self, inputs: Sequence[int], outputs: Sequence[int], stream: int | None = None,
                      graph: bool = True) -> None:
        """Run the program on buffers the caller owns, given by address: ``inputs`` one per
        program input (compact row-major memory of its planned shape and dtype on this context's
        device), ``outputs`` one per output, where its value is written. The caller checks
        shapes, dtypes and devices; addresses carry no metadata (:mod:`ember.model.io_binding`).

        On the CPU the kernels run in the calling thread and read and write those buffers in
        place. On CUDA the work is queued on ``stream`` (a ``CUstream`` handle of the caller's,
        such as ``torch.cuda.current_stream().cuda_stream``; 0 or None: the legacy default
        stream) and nothing waits on the host. With ``graph`` (and CUDA graphs available), the
        first call runs the kernels and captures them into a graph over the context's fixed
        buffers; later calls copy the inputs in, replay the graph and copy the outputs out, all
        on ``stream``. Without, the kernels read and write the caller's buffers directly."""
        io = self._io_state()
        plan = io.plan
        if self._stream is None:  # the host, or a GPU driver without streams
            table = plan.table(inputs, outputs)
            if self._io_steps:
                from .native_run import table_of

                self._io_steps.run(table_of(table))
            else:
                self._bind()
                plan.launch(table)
            plan.copy_out(table, self._copier(None))
            return
        drv = self.device.driver()
        caller = drv.external_stream(int(stream or 0), self.device.index)
        if io.last_stream is not caller:
            # The first call: constants were uploaded on the legacy default stream; later, the
            # previous call's stream may still be using the context's buffers.
            io.event.record(io.last_stream)
            caller.wait(io.event)
        io.last_stream = caller
        if graph and self.graphs_available():
            if io.graph is None:
                self._capture_io(io, inputs, outputs, caller)
                return
            copy = self._copier(caller)
            for dst, src, nbytes in zip(io.inputs, inputs, io.in_bytes):
                copy(dst, src, nbytes)
            io.graph.launch(caller)
            for dst, src, nbytes in zip(outputs, io.outputs, io.out_bytes):
                copy(dst, src, nbytes)
            self.replays += 1
            return
        prev = drv.set_stream(caller)
        try:
            table = plan.table(inputs, outputs)
            self._bind()
            plan.launch(table)
            plan.copy_out(table, self._copier(caller))
        finally:
            drv.set_stream(prev)

    def _io_state(self) -> Any:
        if self._io is None:
            from .io_binding import AddressPlan, IOState

            keep: list[Any] = []
            values = self.program.plan["values"]

            def allocate(name: str) -> int:
                info = values[name]
                buf = self.mem.empty(tuple(info["shape"]), info["dtype"])
                keep.append(buf)
                return self.mem.ptr(buf)

            self._io = IOState(AddressPlan(self.program, self._ptrs, allocate), keep)
            if self.on_host and self.native:
                from .native_run import native_steps

                self._io_steps = native_steps(self.program.module, self._io.plan.calls)
            if self._stream is not None:
                self._io.event = self.device.driver().Event(self.device.index, timing=False)
        return self._io

    def _copier(self, stream: Any) -> Callable[[int, int, int], None]:
        """``copy(dst, src, nbytes)`` between buffers of this context's device (queued on
        ``stream`` on CUDA)."""
        if stream is None and self._stream is None and self.on_host:
            import ctypes

            return lambda dst, src, n: ctypes.memmove(dst, src, n)
        drv, index = self.device.driver(), self.device.index
        if stream is None:
            return lambda dst, src, n: drv.memcpy_dtod(dst, src, n, index)
        return lambda dst, src, n: drv.memcpy_dtod_async(dst, src, n, stream, index)

    def _capture_io(self, io: Any, inputs: Sequence[int], outputs: Sequence[int], caller: Any) -> None:
        """The first graph-mode call of :meth:`run_addresses`: on the context's own stream (after
        the caller's stream), copy the inputs into fixed buffers, run the kernels into fixed
        outputs (kernels loaded, workspaces allocated), capture the same launches, copy the
        outputs to the caller's buffers; the caller's stream then waits for all of it. A capture
        that fails leaves the model on plain launches (one warning); this call's answer stands."""
        from .io_binding import value_bytes

        plan, mem, own = io.plan, self.mem, self._stream
        values = self.program.plan["values"]
        if not io.inputs:
            for names, addrs, sizes in ((plan.input_names, io.inputs, io.in_bytes),
                                        (plan.output_names, io.outputs, io.out_bytes)):
                for name in names:
                    info = values[name]
                    buf = mem.empty(tuple(info["shape"]), info["dtype"])
                    io.keep.append(buf)
                    addrs.append(mem.ptr(buf))
                    sizes.append(value_bytes(info))
        drv = self.device.driver()
        io.event.record(caller)
        own.wait(io.event)
        copy = self._copier(own)
        for dst, src, nbytes in zip(io.inputs, inputs, io.in_bytes):
            copy(dst, src, nbytes)
        table = plan.table(io.inputs, io.outputs)

        def launch() -> None:
            self._bind()
            plan.launch(table)
            plan.copy_out(table, copy)

        prev = drv.set_stream(own)
        try:
            launch()  # this call's answer, and the warm-up
            self._capture(launch, into_io=True)
        finally:
            drv.set_stream(prev)
        for dst, src, nbytes in zip(outputs, io.outputs, io.out_bytes):
            copy(dst, src, nbytes)
        io.event.record(own)
        caller.wait(io.event)

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
