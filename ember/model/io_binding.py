"""Running a program on buffers given by address: I/O binding for frameworks.

PyTorch (``ember.torch_backend``) and other callers that own their tensors hand ember raw
addresses: one per model input (compact row-major memory of the planned shape and dtype on the
model's device) and one per output (where the output is written). :class:`AddressPlan` turns the
program's steps into kernel calls over an address table, once per execution context:

* table slots ``0 .. n_in-1`` are the inputs, ``n_in .. n_in+n_out-1`` the outputs, the rest the
  addresses that stay fixed (constants, planned storages, buffers of the values the plan does not
  place, which the context keeps);
* a view step costs nothing: its value reads the slot of its source;
* an output a kernel writes is written straight into the caller's buffer; an output that is a
  constant, an input, a planned value or a view of one is copied there after the kernels
  (:attr:`AddressPlan.copies`).

Nothing here checks shapes or dtypes: the caller does (the addresses carry no metadata).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, EmberError


class AddressPlan:
    """The steps of one program as kernel calls over an address table (see the module doc).

    ``fixed``: name -> address of every value whose buffer the context owns (constants,
    planned values); ``allocate(name)`` gives the address of a buffer for a value the plan does
    not place (called once per such value; the buffer must live as long as the plan)."""

    def __init__(self, program: Any, fixed: dict[str, int], allocate: Callable[[str], int]):
        plan = program.plan
        self.input_names: list[str] = list(program.input_names)
        self.output_names: list[str] = list(program.output_names)
        values = plan["values"]
        n_in, n_out = len(self.input_names), len(self.output_names)
        slot: dict[str, int] = {n: k for k, n in enumerate(self.input_names)}
        view_dsts = {st["dst"] for st in plan["steps"] if st["kind"] == "view"}
        #: (output index, slot it is copied from, bytes) for outputs no kernel writes in place.
        self.copies: list[tuple[int, int, int]] = []
        direct: dict[str, int] = {}
        for j, name in enumerate(self.output_names):
            if name in slot or name in fixed or name in view_dsts or name in direct:
                continue
            direct[name] = n_in + j
        slot.update(direct)
        base: list[int] = [0] * (n_in + n_out)

        def slot_of(name: str) -> int:
            k = slot.get(name)
            if k is None:
                addr = fixed.get(name)
                if addr is None:
                    addr = allocate(name)
                k = len(base)
                base.append(addr)
                slot[name] = k
            return k

        #: (function, argument slots, name) per kernel step.
        self.calls: list[tuple[Any, list[int], str]] = []
        for st in plan["steps"]:
            if st["kind"] == "view":
                slot[st["dst"]] = slot_of(st["src"])
                continue
            self.calls.append((program.functions[st["func"]], [slot_of(a) for a in st["args"]], st["func"]))
        for j, name in enumerate(self.output_names):
            if slot.get(name) != n_in + j:
                self.copies.append((j, slot_of(name), value_bytes(values[name])))
        self._base = base
        self._n_in, self._n_out = n_in, n_out

    def table(self, inputs: Sequence[int], outputs: Sequence[int]) -> list[int]:
        """The address table of one call."""
        if len(inputs) != self._n_in or len(outputs) != self._n_out:
            raise ArgumentError(f"the model takes {self._n_in} input and {self._n_out} output addresses, "
                                f"got {len(inputs)} and {len(outputs)}")
        t = list(self._base)
        t[: self._n_in] = inputs
        t[self._n_in: self._n_in + self._n_out] = outputs
        return t

    def launch(self, table: list[int]) -> None:
        """Call every kernel on the addresses of ``table`` (on the calling thread's stream)."""
        for fn, slots, name in self.calls:
            rc = fn._invoke([table[k] for k in slots], [])
            if rc != 0:
                raise EmberError(f"kernel {name} failed at run time (code {rc})")

    def copy_out(self, table: list[int], copy: Callable[[int, int, int], None]) -> None:
        """Copy the outputs no kernel wrote in place: ``copy(dst, src, nbytes)``."""
        n_in = self._n_in
        for j, src, nbytes in self.copies:
            if nbytes:
                copy(table[n_in + j], table[src], nbytes)


class IOState:
    """What an execution context keeps for :meth:`~ember.model.executor.ExecutionContext.run_addresses`:
    the address plan, the buffers it owns, and on CUDA the graph of its launches with the fixed
    input and output buffers the graph reads and writes, and the stream the last call used."""

    def __init__(self, plan: AddressPlan, keep: list[Any]):
        self.plan = plan
        #: Buffers the plan's addresses point into (kept alive with it).
        self.keep = keep
        self.graph: Any = None
        #: Graph mode: addresses of the fixed input and output buffers, and their sizes in bytes.
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.in_bytes: list[int] = []
        self.out_bytes: list[int] = []
        self.last_stream: Any = None
        self.event: Any = None


def value_bytes(info: dict[str, Any]) -> int:
    """Bytes of a planned value (``{"shape": [...], "dtype": ...}``)."""
    return int(np.prod(info["shape"], dtype=np.int64)) * np.dtype(info["dtype"]).itemsize
