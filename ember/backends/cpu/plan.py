"""A model's kernel steps run by one native call: ``ember_run_plan``.

Calling each kernel of a model from Python costs a ctypes call per step (argument conversion,
the GIL released and taken again) plus the interpreter's work around it, 1-1.5 us per step on
a 2-core Zen 5 (``benchmarks/executor_step.py``); the walk costs ~0.1 us per step. ``ember_run_plan`` walks
the steps in machine code instead:

* the steps are one array of 64-bit words, per step ``call, function address, n, slot_1 ..
  slot_n`` (:class:`Steps`); the arguments are the addresses ``table[slot_k]`` of an address
  table the caller fills (inputs, outputs, planned storages, constants);
* ``call`` is ``ember_plan_call<n>(fn, slots, table)``, a small routine per argument count,
  generated at its first use in the process, that loads the ``n`` addresses and calls the
  kernel; a kernel that returns a non-zero code stops the walk, and ``ember_run_plan`` returns
  ``(step + 1) << 32 | code`` (0 when every step returned 0).

The routines are generated once per process, like the thread pool (:mod:`.pool`), into LLVM
modules that are never freed; ``ember_run_plan`` is called through ctypes, which releases the
GIL for the whole walk: other Python threads run (and call models) meanwhile. It keeps no state of its own, so
any number of threads may walk their own tables at once.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ...codegen.llvm import I32, I64, PTR
from ...errors import EmberError
from .signature import MAX_PARAMS

SYMBOL = "ember_run_plan"
#: The most buffer arguments of a kernel that :class:`Steps` accepts (as a module's signature).
MAX_ARGS = MAX_PARAMS

_RUNNER = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)


def _c(v: int, t: ir.IntType = I64) -> ir.Constant:
    return ir.Constant(t, v)


def _runner_module() -> ir.Module:
    """``ember_run_plan(steps, nsteps, table) -> i64``: per step, ``call(fn, &slots, table)``
    (see the module docstring)."""
    m = ir.Module(name="ember_plan")
    m.triple = llvm.get_process_triple()
    call_ty = ir.FunctionType(I32, [I64, PTR, PTR])
    f = ir.Function(m, ir.FunctionType(I64, [PTR, I64, PTR]), SYMBOL)
    steps, nsteps, table = f.args
    entry, loop, body, done, fail, nxt = (f.append_basic_block(n)
                                          for n in ("entry", "loop", "body", "done", "fail", "next"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i, pos = b.phi(I64, "i"), b.phi(I64, "pos")
    i.add_incoming(_c(0), entry)
    pos.add_incoming(_c(0), entry)
    b.cbranch(b.icmp_signed("<", i, nsteps), body, done)
    b.position_at_end(done)
    b.ret(_c(0))
    b.position_at_end(body)

    def word(k: int) -> ir.Value:
        return b.load(b.gep(steps, [b.add(pos, _c(k))], source_etype=I64), typ=I64)

    call = b.inttoptr(word(0), call_ty.as_pointer())
    fn, n = word(1), word(2)
    rc = b.call(call, [fn, b.gep(steps, [b.add(pos, _c(3))], source_etype=I64), table])
    b.cbranch(b.icmp_unsigned("!=", rc, _c(0, I32)), fail, nxt)
    b.position_at_end(fail)
    b.ret(b.or_(b.shl(b.add(i, _c(1)), _c(32)), b.zext(rc, I64)))
    b.position_at_end(nxt)
    i.add_incoming(b.add(i, _c(1)), nxt)
    pos.add_incoming(b.add(pos, b.add(n, _c(3))), nxt)
    b.branch(loop)
    return m


def _call_module(counts: Sequence[int]) -> ir.Module:
    """``ember_plan_call<n>(fn, slots, table) -> i32`` for each ``n`` of ``counts``:
    ``fn(table[slots[0]], ..., table[slots[n - 1]])``."""
    m = ir.Module(name="ember_plan_calls")
    m.triple = llvm.get_process_triple()
    for nargs in counts:
        f = ir.Function(m, ir.FunctionType(I32, [I64, PTR, PTR]), f"ember_plan_call{nargs}")
        fn, slots, table = f.args
        b = ir.IRBuilder(f.append_basic_block("entry"))
        args = []
        for j in range(nargs):
            slot = b.load(b.gep(slots, [_c(j)], source_etype=I64), typ=I64)
            args.append(b.load(b.gep(table, [slot], source_etype=PTR), typ=PTR))
        kernel = b.inttoptr(fn, ir.FunctionType(I32, [PTR] * nargs).as_pointer())
        b.ret(b.call(kernel, args))
    return m


_ENGINES: list[llvm.ExecutionEngine] = []  # never freed: callers hold their addresses
_LOCK = threading.Lock()


def _jit(m: ir.Module, names: Sequence[str]) -> list[int]:
    """Compile ``m`` into this process for good; the addresses of its functions ``names``."""
    from ...target import Target
    from .codegen import target_machine

    tm = target_machine(Target("llvm"), opt=2)  # initialises LLVM first
    mod = llvm.parse_assembly(str(m))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    _ENGINES.append(engine)
    return [int(engine.get_function_address(n)) for n in names]


@functools.cache
def runner() -> ctypes._CFuncPtr:
    """``ember_run_plan`` compiled into this process (once), as a ctypes function
    ``(steps, nsteps, table) -> int``: 0, or ``(step + 1) << 32 | code`` of the first kernel
    that returned a non-zero ``code`` (see the module docstring)."""
    with _LOCK:
        return _RUNNER(_jit(_runner_module(), [SYMBOL])[0])


_CALLS: dict[int, int] = {}


def calls_of(counts: Sequence[int]) -> dict[int, int]:
    """The addresses of ``ember_plan_call<n>`` for each ``n`` of ``counts``; those not yet in
    this process are compiled now, together (a few milliseconds)."""
    missing = sorted({n for n in counts if n not in _CALLS})
    if missing:
        with _LOCK:
            missing = [n for n in missing if n not in _CALLS]
            if missing:
                names = [f"ember_plan_call{n}" for n in missing]
                _CALLS.update(zip(missing, _jit(_call_module(missing), names)))
    return {n: _CALLS[n] for n in counts}


class Steps:
    """Kernel calls encoded for ``ember_run_plan``: ``calls`` holds per kernel its name (for
    errors), its address and its argument slots. :meth:`run` walks them over an address
    table. Immutable once built; one instance serves any number of threads."""

    def __init__(self, calls: Sequence[tuple[str, int, Sequence[int]]]):
        for name, _, slots in calls:
            if not encodable(len(slots)):
                raise EmberError(f"kernel {name} takes {len(slots)} arguments; ember_run_plan calls at most {MAX_ARGS}")
        call = calls_of([len(slots) for _, _, slots in calls])
        words: list[int] = []
        for _, addr, slots in calls:
            words += [call[len(slots)], addr, len(slots), *slots]
        self.names = [name for name, _, _ in calls]
        #: The table entries the steps read (one past the highest slot).
        self.slots = 1 + max((s for _, _, slots in calls for s in slots), default=-1)
        self._words = (ctypes.c_int64 * max(len(words), 1))(*words)
        self._run = runner()

    def run(self, table: ctypes.Array) -> None:
        """Call every kernel on the addresses of ``table`` (a ``c_uint64`` array of at least
        :attr:`slots` entries), in order. A kernel that returns a non-zero code stops the walk
        (the later ones do not run): EmberError naming the kernel and the code. A table shorter
        than :attr:`slots` is refused (EmberError) before anything runs."""
        if len(table) < self.slots:
            raise EmberError(f"the address table has {len(table)} entries; the steps read {self.slots}")
        r = self._run(self._words, len(self.names), table)
        if r:
            code = r & 0xFFFFFFFF
            code = code - (1 << 32) if code >= 1 << 31 else code
            raise EmberError(f"kernel {self.names[(r >> 32) - 1]} failed at run time (code {code})")


def encodable(nargs: int) -> bool:
    """True when ``ember_run_plan`` can call a kernel of ``nargs`` buffer arguments."""
    return 0 <= nargs <= MAX_ARGS
