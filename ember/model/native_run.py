"""A CPU program's kernel steps as one native call per model call.

The executor's plain loop calls each kernel from Python (:meth:`ExecutionContext._run_steps
<ember.model.executor.ExecutionContext._run_steps>`): a ctypes call and some interpreter work
per step. On the CPU, :class:`HostRun` instead turns the program's steps into kernel calls
over an address table once per execution context (:class:`~ember.model.io_binding.AddressPlan`:
views cost nothing, values the plan does not place get buffers of the context) and hands the
whole list to ``ember_run_plan`` (:mod:`ember.backends.cpu.plan`), which calls the kernels one
after the other in machine code, with the GIL released. Per model call, Python only writes the
input and output addresses into the context's table and allocates the outputs.

A program is run this way when every kernel is a CPU kernel of buffer arguments only, at
most :data:`~ember.backends.cpu.plan.MAX_ARGS` of them (:func:`native_steps`); otherwise the
executor keeps its plain loop, which is also what a profiled call uses (it times each step).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from .io_binding import AddressPlan


def native_steps(module: Any, calls: Sequence[tuple[Any, list[int], str]]) -> Any:
    """``calls`` (function, argument slots, name per kernel step, as
    :attr:`AddressPlan.calls`) of ``module`` (a program's compiled kernels) as
    :class:`ember.backends.cpu.plan.Steps`, or None when ``ember_run_plan`` cannot call them
    all: a module of another backend, a function with size arguments or too many arguments."""
    from ..backends.cpu.module import CPUModule
    from ..backends.cpu.plan import Steps, encodable

    if not isinstance(module, CPUModule):
        return None
    encoded = []
    for fn, slots, name in calls:
        params = fn.sig["params"]
        if fn.sig["scalars"] or any(p["kind"] != "buffer" for p in params) or len(params) != len(slots):
            return None
        if not encodable(len(slots)) or fn.name not in module.addresses:
            return None
        encoded.append((name, module.addresses[fn.name], slots))
    return Steps(encoded)


def table_of(words: Sequence[int]) -> ctypes.Array:
    """An address table for ``ember_run_plan`` holding ``words``."""
    return (ctypes.c_uint64 * max(len(words), 1))(*words)


class HostRun:
    """One execution context's program as one native walk (see the module docstring).

    ``fixed``: name -> address of every buffer the context owns (planned values, constants);
    ``mem``: the context's host memory. Not thread-safe: the table is the context's own, as
    are its buffers (a context serves one thread)."""

    def __init__(self, program: Any, fixed: dict[str, int], mem: Any):
        self._mem = mem
        self._kept: list[np.ndarray] = []
        values = program.plan["values"]

        def allocate(name: str) -> int:
            info = values[name]
            arr = mem.empty(tuple(info["shape"]), info["dtype"])
            self._kept.append(arr)
            return int(mem.ptr(arr))

        plan = AddressPlan(program, fixed, allocate)
        self.steps = native_steps(program.module, plan.calls)
        self._n_in = len(plan.input_names)
        self._inputs = list(plan.input_names)
        self._outputs = [(name, tuple(values[name]["shape"]), values[name]["dtype"]) for name in plan.output_names]
        copied = {j for j, _, _ in plan.copies}
        #: Outputs the kernels write in place: (output index, table slot).
        self._direct = [(j, self._n_in + j) for j in range(len(self._outputs)) if j not in copied]
        n_out = len(self._outputs)
        base = plan.table([0] * self._n_in, [0] * n_out)
        self._table = table_of(base)
        #: Outputs no kernel writes: (output index, where from: "input" or "output" and its index,
        #: or "fixed" and a NumPy view of the context's buffer holding it).
        self._copies: list[tuple[int, str, Any]] = []
        for j, src, nbytes in plan.copies:
            _, shape, dtype = self._outputs[j]
            if src < self._n_in:
                self._copies.append((j, "input", src))
            elif src < self._n_in + n_out:
                self._copies.append((j, "output", src - self._n_in))
            else:
                view = np.empty(shape, dtype) if not nbytes else np.frombuffer(
                    (ctypes.c_char * nbytes).from_address(base[src]), dtype).reshape(shape)
                self._copies.append((j, "fixed", view))

    @property
    def available(self) -> bool:
        """True when the program's kernels can be walked natively."""
        return self.steps is not None

    def run(self, env: dict[str, Any], out: dict[str, Any] | None) -> list[Any]:
        """Run the program on the inputs of ``env`` (name -> C-contiguous host array, as bound
        by the executor); returns the outputs, fresh arrays the caller owns, or the arrays of
        ``out`` (output name -> C-contiguous NumPy array of the output's shape and dtype,
        checked by the caller), written in place by the kernels where they compute the output
        and copied into otherwise."""
        mem, table = self._mem, self._table
        ptr = mem.ptr
        for k, name in enumerate(self._inputs):
            table[k] = ptr(env[name])
        outs: list[Any] = [None] * len(self._outputs)
        for j, slot in self._direct:
            name, shape, dtype = self._outputs[j]
            arr = out.get(name) if out else None
            if not isinstance(arr, np.ndarray):
                arr = mem.empty(shape, dtype)
            table[slot] = ptr(arr)
            outs[j] = arr
        self.steps.run(table)
        for j, kind, src in self._copies:
            name, shape, _ = self._outputs[j]
            if kind == "input":
                src = env[self._inputs[src]].reshape(shape)
            elif kind == "output":
                src = outs[src].reshape(shape)
            arr = out.get(name) if out else None
            if isinstance(arr, np.ndarray):
                np.copyto(arr, src)
            else:
                arr = src.copy()
            outs[j] = arr
        return outs
