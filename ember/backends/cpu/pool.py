"""ember's own thread pool for parallel CPU loops: ``ember_parallel_for``.

libgomp's parallel regions end in a barrier that waits for every thread of the team, so on a
machine where other processes hold the cores a region costs a scheduler time slice whenever one
of its threads is not running (measured: a 6-layer MLP took 57 ms instead of 1.5 ms with ONNX
Runtime under the same load). This pool follows what ONNX Runtime's does instead:

* the calling thread takes part; the iterations are split into chunks (a few per thread) that
  threads claim one at a time with a compare-and-swap, so a thread that is not running holds no
  work back — the others take its chunks;
* the caller waits only for chunks that were claimed and are running, never for a thread
  that has not woken up yet;
* idle workers spin for a short while (``SPIN_PAUSES`` pause instructions, ~0.1 ms) to catch the
  next loop of the same model, then sleep on a futex;
* a thread never spins on the core of the thread it waits for: on a busy machine the scheduler
  may put a worker on the caller's core (the other core held by another process), where a
  spinning worker takes half the core from the caller (a 2-thread loop then ran 1.2x slower
  than one thread) and a caller spinning for a chunk that the descheduled worker holds waits
  for a time slice. An idle worker that finds itself on the core of the last caller
  (``sched_getcpu``, every ``YIELD_EVERY`` pauses) goes to sleep at once (its wake-up lets the
  scheduler place it on a free core), and a caller waiting for chunks on the core of the
  worker that took the job yields (``sched_yield``) to it. Threads on cores of their own never
  make either call.

Two modes, chosen per loop by its schedule (``mode``, :data:`DYNAMIC` or :data:`STATIC`):

* **dynamic**: chunks are claimed in order by whichever thread asks first (a counter);
* **static**: the chunks are split into one contiguous block per thread taking part, and thread
  ``t`` (the caller is 0, worker ``w`` is ``w + 1``) runs its own block first, so a loop called
  again with the same extent gives every thread the same iterations — a matrix-vector product's
  slice of a large constant operand stays in that core's caches from call to call. A thread that
  has finished its block takes (from the far end) the chunks of a block whose owner has not
  claimed them yet, so a worker that is not running holds no work back here either. Claims are
  bits of one word (``gen << 32 | claimed``; at most :data:`MAX_STATIC_CHUNKS` chunks).

Which thread runs a chunk never changes what the chunk computes, so both modes give the same
results bit for bit.

The pool is code generated once per process into an LLVM module that is never freed (loaded
modules come and go; the workers must not run freed code) and is made visible to compiled
kernels as the symbol ``ember_parallel_for(fn, arg, extent, threads, mode)``: it calls
``fn(arg, chunk, nchunks)`` for every chunk of ``[0, extent)``; ``threads`` 0 means all
workers (``omp_get_max_threads()``: ``OMP_NUM_THREADS`` or the cores of this process) plus
the caller. A second thread calling while the pool is busy (two models run from two Python
threads), or a process forked from one that started the pool (its workers are not copied),
runs its chunks itself: never a deadlock.
"""

from __future__ import annotations

import functools
import platform

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ...codegen.llvm import I32, I64, PTR

SYMBOL = "ember_parallel_for"
#: Chunks per thread: enough for threads that finish early (or start late) to share the rest.
CHUNKS_PER_THREAD = 4
#: Spins of an idle worker before it sleeps (each a ``pause`` on x86: ~40-140 cycles).
SPIN_PAUSES = 2000
#: Pauses between two checks of whether a spinning thread shares its core with the thread it
#: waits for (``sched_getcpu``: tens of nanoseconds).
YIELD_EVERY = 64
MAX_CHUNKS = 0xFFFF
#: ``mode`` of ``ember_parallel_for``: chunks claimed in order by any thread.
DYNAMIC = 0
#: ``mode`` of ``ember_parallel_for``: each thread's own contiguous block of chunks first.
STATIC = 1
#: The most chunks of a static loop (one claim bit each in the low half of a 64-bit word).
MAX_STATIC_CHUNKS = 32

VOID = ir.VoidType()
_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129


def _c(v: int, t: ir.IntType = I64) -> ir.Constant:
    return ir.Constant(t, v)


class _Pool:
    """Builds the pool's LLVM module (see the module docstring)."""

    def __init__(self) -> None:
        self.m = ir.Module(name="ember_pool")
        self.m.triple = llvm.get_process_triple()
        g = {}
        for name, ty in (("gen", I32), ("sleepers", I32), ("pending", I32), ("busy", I32), ("started", I32),
                         ("workers", I32), ("mode", I32), ("threads", I32), ("claim", I64), ("done", I64),
                         ("smask", I64), ("schunks", I64)):
            var = ir.GlobalVariable(self.m, ty, f"ember_pool_{name}")
            var.initializer = ir.Constant(ty, 0)
            var.linkage = "internal"
            g[name] = var
        for name in ("ccpu", "wcpu"):  # the core of the last caller, of the last worker to take a job
            var = ir.GlobalVariable(self.m, I32, f"ember_pool_{name}")
            var.initializer = ir.Constant(I32, -1)
            var.linkage = "internal"
            g[name] = var
        for name in ("fn", "arg"):
            var = ir.GlobalVariable(self.m, PTR, f"ember_pool_{name}")
            var.initializer = ir.Constant(PTR, None)
            var.linkage = "internal"
            g[name] = var
        self.g = g
        self.chunk_ty = ir.FunctionType(VOID, [PTR, I64, I64])
        self.syscall = ir.Function(self.m, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
        self.pthread_create = ir.Function(self.m, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]), "pthread_create")
        self.max_threads = ir.Function(self.m, ir.FunctionType(I32, []), "omp_get_max_threads")
        self.getcpu = ir.Function(self.m, ir.FunctionType(I32, []), "sched_getcpu")
        self.sched_yield = ir.Function(self.m, ir.FunctionType(I32, []), "sched_yield")
        self.x86 = platform.machine() in ("x86_64", "AMD64")
        self.futex_nr = _FUTEX.get(platform.machine(), 202)
        self.claim_loop = self._claim_loop()
        self.static_loop = self._static_loop()
        self.worker = self._worker()
        self.entry = self._entry()

    # -- pieces ---------------------------------------------------------------------------------
    def _pause(self, b: ir.IRBuilder) -> None:
        if self.x86:
            fn = self.m.globals.get("llvm.x86.sse2.pause") or ir.Function(
                self.m, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")
            b.call(fn, [])

    def _claim_loop(self) -> ir.Function:
        """``claim_loop(g)``: run chunks of job ``g`` until none is left (or a newer job began)."""
        f = ir.Function(self.m, ir.FunctionType(VOID, [I32]), "ember_pool_claim_loop")
        f.linkage = "internal"
        gen = f.args[0]
        entry, top, check, run, out = (f.append_basic_block(n) for n in ("entry", "top", "check", "run", "out"))
        b = ir.IRBuilder(entry)
        b.branch(top)
        b.position_at_end(top)
        w = b.load_atomic(self.g["claim"], "acquire", 8)
        same = b.icmp_unsigned("==", b.trunc(b.lshr(w, _c(32)), I32), gen)
        b.cbranch(same, check, out)
        b.position_at_end(check)
        n = b.and_(b.lshr(w, _c(16)), _c(MAX_CHUNKS))
        nxt = b.and_(w, _c(MAX_CHUNKS))
        left = b.icmp_unsigned("<", nxt, n)
        cas_bb = f.append_basic_block("cas")
        b.cbranch(left, cas_bb, out)
        b.position_at_end(cas_bb)
        res = b.cmpxchg(self.g["claim"], w, b.add(w, _c(1)), "acq_rel", "acquire")
        b.cbranch(b.extract_value(res, 1), run, top)
        b.position_at_end(run)
        fn = b.load(self.g["fn"], typ=self.chunk_ty.as_pointer())
        arg = b.load(self.g["arg"], typ=PTR)
        b.call(fn, [arg, nxt, n])
        b.atomic_rmw("add", self.g["done"], _c(1), "release")
        b.branch(top)
        b.position_at_end(out)
        b.ret_void()
        return f

    def _run_chunk(self) -> ir.Function:
        """``run_chunk(c)``: chunk ``c`` of the published static job, then count it done (called
        only after ``c``'s claim succeeded, so the job's globals are its own)."""
        f = ir.Function(self.m, ir.FunctionType(VOID, [I64]), "ember_pool_run_chunk")
        f.linkage = "internal"
        b = ir.IRBuilder(f.append_basic_block("entry"))
        n = b.load_atomic(self.g["schunks"], "monotonic", 8)
        fn = b.load(self.g["fn"], typ=self.chunk_ty.as_pointer())
        arg = b.load(self.g["arg"], typ=PTR)
        b.call(fn, [arg, f.args[0], n])
        b.atomic_rmw("add", self.g["done"], _c(1), "release")
        b.ret_void()
        return f

    def _static_loop(self) -> ir.Function:
        """``static_loop(g, tid)``: run the unclaimed chunks of thread ``tid``'s own block of
        static job ``g`` in order, then any other unclaimed chunk (highest first), until none is
        left or a newer job began. A chunk is claimed by setting its bit with a compare-and-swap
        of the whole word, whose high half is the job's generation."""
        run = self._run_chunk()
        f = ir.Function(self.m, ir.FunctionType(VOID, [I32, I64]), "ember_pool_static_loop")
        f.linkage = "internal"
        gen, tid = f.args
        names = ("entry", "own", "own_word", "own_test", "own_cas", "own_run", "own_next", "steal", "steal_word",
                 "steal_cas", "steal_run", "out")
        bb = {n: f.append_basic_block(n) for n in names}
        b = ir.IRBuilder(bb["entry"])
        g64 = b.zext(gen, I64)
        # this thread's block [lo, hi) of n chunks over T threads (n and T only steer the order:
        # a stale value costs locality, never correctness)
        n = b.load_atomic(self.g["schunks"], "monotonic", 8)
        n = b.select(b.icmp_unsigned("<", n, _c(MAX_STATIC_CHUNKS)), n, _c(MAX_STATIC_CHUNKS))
        t = b.zext(b.load_atomic(self.g["threads"], "monotonic", 4), I64)
        t = b.select(b.icmp_unsigned(">", t, _c(0)), t, _c(1))
        tm1 = b.sub(t, _c(1))
        lo = b.udiv(b.add(b.mul(tid, n), tm1), t)
        hi = b.udiv(b.add(b.mul(b.add(tid, _c(1)), n), tm1), t)
        lo = b.select(b.icmp_unsigned("<", lo, n), lo, n)
        hi = b.select(b.icmp_unsigned("<", hi, n), hi, n)
        b.branch(bb["own"])
        # own block, in order
        b.position_at_end(bb["own"])
        c = b.phi(I64)
        c.add_incoming(lo, bb["entry"])
        b.cbranch(b.icmp_unsigned("<", c, hi), bb["own_word"], bb["steal"])
        b.position_at_end(bb["own_word"])
        w = b.load_atomic(self.g["smask"], "acquire", 8)
        b.cbranch(b.icmp_unsigned("==", b.lshr(w, _c(32)), g64), bb["own_test"], bb["out"])
        b.position_at_end(bb["own_test"])
        bit = b.shl(_c(1), c)
        b.cbranch(b.icmp_unsigned("!=", b.and_(w, bit), _c(0)), bb["own_next"], bb["own_cas"])
        b.position_at_end(bb["own_cas"])
        res = b.cmpxchg(self.g["smask"], w, b.or_(w, bit), "acq_rel", "acquire")
        b.cbranch(b.extract_value(res, 1), bb["own_run"], bb["own_word"])
        b.position_at_end(bb["own_run"])
        b.call(run, [c])
        b.branch(bb["own_next"])
        b.position_at_end(bb["own_next"])
        c.add_incoming(b.add(c, _c(1)), bb["own_next"])
        b.branch(bb["own"])
        # the others' unclaimed chunks, highest first (their owners work upwards)
        b.position_at_end(bb["steal"])
        b.branch(bb["steal_word"])
        b.position_at_end(bb["steal_word"])
        w = b.load_atomic(self.g["smask"], "acquire", 8)
        free = b.and_(b.xor(w, _c(-1)), _c(0xFFFFFFFF))
        ok = b.and_(b.icmp_unsigned("==", b.lshr(w, _c(32)), g64), b.icmp_unsigned("!=", free, _c(0)))
        b.cbranch(ok, bb["steal_cas"], bb["out"])
        b.position_at_end(bb["steal_cas"])
        ctlz = self.m.globals.get("llvm.ctlz.i64") or ir.Function(
            self.m, ir.FunctionType(I64, [I64, ir.IntType(1)]), "llvm.ctlz.i64")
        top = b.sub(_c(63), b.call(ctlz, [free, ir.Constant(ir.IntType(1), 1)]))
        res = b.cmpxchg(self.g["smask"], w, b.or_(w, b.shl(_c(1), top)), "acq_rel", "acquire")
        b.cbranch(b.extract_value(res, 1), bb["steal_run"], bb["steal_word"])
        b.position_at_end(bb["steal_run"])
        b.call(run, [top])
        b.branch(bb["steal_word"])
        b.position_at_end(bb["out"])
        b.ret_void()
        return f

    def _futex(self, b: ir.IRBuilder, op: int, val: ir.Value) -> None:
        b.call(self.syscall, [_c(self.futex_nr), self.g["gen"], _c(op, I32), val, ir.Constant(PTR, None)])

    def _worker(self) -> ir.Function:
        """A worker thread: wait for a new job (spin, then sleep), run its chunks, repeat."""
        f = ir.Function(self.m, ir.FunctionType(PTR, [PTR]), "ember_pool_worker")
        f.linkage = "internal"
        entry, loop, spin, spun, sleep, got = (f.append_basic_block(n)
                                              for n in ("entry", "loop", "spin", "spun", "sleep", "got"))
        b = ir.IRBuilder(entry)
        tid = b.ptrtoint(f.args[0], I64)  # this worker's thread index (the caller is 0)
        seen = b.alloca(I32)
        b.store(b.load_atomic(self.g["gen"], "acquire", 4), seen)
        b.branch(loop)
        b.position_at_end(loop)
        b.branch(spin)
        b.position_at_end(spin)
        k = b.phi(I64)
        k.add_incoming(_c(0), loop)
        g = b.load_atomic(self.g["gen"], "acquire", 4)
        b.cbranch(b.icmp_unsigned("!=", g, b.load(seen)), got, spun)
        b.position_at_end(spun)
        self._pause(b)
        k1 = b.add(k, _c(1))
        where, more = f.append_basic_block("where"), f.append_basic_block("more")
        b.cbranch(b.icmp_unsigned("==", b.and_(k1, _c(YIELD_EVERY - 1)), _c(0)), where, more)
        # on the last caller's core: sleep now rather than take the core from it
        b.position_at_end(where)
        shared = b.icmp_signed("==", b.call(self.getcpu, []), b.load_atomic(self.g["ccpu"], "monotonic", 4))
        b.cbranch(shared, sleep, more)
        b.position_at_end(more)
        k.add_incoming(k1, more)
        b.cbranch(b.icmp_unsigned("<", k1, _c(SPIN_PAUSES)), spin, sleep)
        b.position_at_end(sleep)
        b.atomic_rmw("add", self.g["sleepers"], _c(1, I32), "seq_cst")
        # a wake issued from now on is for this sleep: callers wake again (see _entry)
        b.store_atomic(_c(0, I32), self.g["pending"], "seq_cst", 4)
        cur = b.load_atomic(self.g["gen"], "seq_cst", 4)
        wait_bb, woke = f.append_basic_block("wait"), f.append_basic_block("woke")
        b.cbranch(b.icmp_unsigned("==", cur, b.load(seen)), wait_bb, woke)
        b.position_at_end(wait_bb)
        self._futex(b, _FUTEX_WAIT_PRIVATE, b.load(seen))
        b.branch(woke)
        b.position_at_end(woke)
        b.atomic_rmw("sub", self.g["sleepers"], _c(1, I32), "seq_cst")
        b.branch(loop)
        b.position_at_end(got)
        b.store(g, seen)
        b.store_atomic(b.call(self.getcpu, []), self.g["wcpu"], "monotonic", 4)
        static_bb, dynamic_bb = f.append_basic_block("static"), f.append_basic_block("dynamic")
        mode = b.load_atomic(self.g["mode"], "acquire", 4)
        b.cbranch(b.icmp_unsigned("==", mode, _c(STATIC, I32)), static_bb, dynamic_bb)
        b.position_at_end(static_bb)
        b.call(self.static_loop, [g, tid])
        b.branch(loop)
        b.position_at_end(dynamic_bb)
        b.call(self.claim_loop, [g])
        b.branch(loop)
        return f

    def _entry(self) -> ir.Function:
        """``ember_parallel_for(fn, arg, extent, threads, mode)`` (see the module docstring)."""
        f = ir.Function(self.m, ir.FunctionType(VOID, [self.chunk_ty.as_pointer(), PTR, I64, I32, I32]), SYMBOL)
        fn, arg, extent, want, mode = f.args
        bb = {n: f.append_basic_block(n) for n in ("entry", "start", "create", "created", "ready", "serial",
                                                    "serial_out", "publish", "wake", "run", "wait",
                                                    "waited")}
        b = ir.IRBuilder(bb["entry"])
        # the workers, once per process (a CAS on `started`)
        res = b.cmpxchg(self.g["started"], _c(0, I32), _c(1, I32), "acq_rel", "acquire")
        b.cbranch(b.extract_value(res, 1), bb["start"], bb["ready"])
        b.position_at_end(bb["start"])
        total = b.call(self.max_threads, [])
        nworkers = b.sub(total, _c(1, I32))
        tid = b.alloca(I64)
        b.branch(bb["create"])
        b.position_at_end(bb["create"])
        i = b.phi(I32)
        i.add_incoming(_c(0, I32), bb["start"])
        more = b.icmp_signed("<", i, nworkers)
        body = f.append_basic_block("create_one")
        b.cbranch(more, body, bb["created"])
        b.position_at_end(body)
        b.call(self.pthread_create, [b.bitcast(tid, PTR), ir.Constant(PTR, None),
                                     b.bitcast(self.worker, PTR), b.inttoptr(b.zext(b.add(i, _c(1, I32)), I64), PTR)])
        i.add_incoming(b.add(i, _c(1, I32)), body)
        b.branch(bb["create"])
        b.position_at_end(bb["created"])
        b.store_atomic(b.select(b.icmp_signed(">", nworkers, _c(0, I32)), nworkers, _c(0, I32)),
                       self.g["workers"], "release", 4)
        b.branch(bb["ready"])
        # how many chunks: a few per thread taking part, at most the extent
        b.position_at_end(bb["ready"])
        workers = b.load_atomic(self.g["workers"], "acquire", 4)
        threads = b.add(workers, _c(1, I32))
        want_ok = b.and_(b.icmp_signed(">", want, _c(0, I32)), b.icmp_signed("<", want, threads))
        threads = b.select(want_ok, want, threads)
        static = b.icmp_unsigned("==", mode, _c(STATIC, I32))
        chunks = b.mul(b.zext(threads, I64), _c(CHUNKS_PER_THREAD))
        cap = b.select(static, _c(MAX_STATIC_CHUNKS), _c(MAX_CHUNKS))
        chunks = b.select(b.icmp_signed("<", cap, chunks), cap, chunks)
        chunks = b.select(b.icmp_signed("<", extent, chunks), extent, chunks)
        parallel = b.and_(b.icmp_signed(">", threads, _c(1, I32)), b.icmp_signed(">", chunks, _c(1)))
        got_pool = f.append_basic_block("take_pool")
        b.cbranch(parallel, got_pool, bb["serial"])
        b.position_at_end(got_pool)
        res = b.cmpxchg(self.g["busy"], _c(0, I32), _c(1, I32), "acq_rel", "acquire")
        b.cbranch(b.extract_value(res, 1), bb["publish"], bb["serial"])
        # serial: the whole range as one chunk, on this thread
        b.position_at_end(bb["serial"])
        b.call(fn, [arg, _c(0), _c(1)])
        b.ret_void()
        # publish the job: fn/arg, mode, threads, done = 0, the claim words, then gen. The claim
        # word of the other mode is published empty (dynamic: no chunk left; static: every bit
        # set), so a worker that reads a newer job's mode finds nothing to run under this gen.
        b.position_at_end(bb["publish"])
        b.store_atomic(b.call(self.getcpu, []), self.g["ccpu"], "monotonic", 4)
        b.store(fn, self.g["fn"])
        b.store(arg, self.g["arg"])
        b.store_atomic(_c(0), self.g["done"], "release", 8)
        b.store_atomic(b.select(static, _c(STATIC, I32), _c(DYNAMIC, I32)), self.g["mode"], "release", 4)
        b.store_atomic(threads, self.g["threads"], "release", 4)
        b.store_atomic(chunks, self.g["schunks"], "release", 8)
        gen = b.add(b.load_atomic(self.g["gen"], "acquire", 4), _c(1, I32))
        high = b.shl(b.zext(gen, I64), _c(32))
        word = b.or_(high, b.select(static, _c(0), b.shl(chunks, _c(16))))
        b.store_atomic(word, self.g["claim"], "release", 8)
        taken = b.and_(b.shl(_c(0xFFFFFFFF), chunks), _c(0xFFFFFFFF))  # bits of chunks that do not exist
        smask = b.or_(high, b.select(static, taken, _c(0xFFFFFFFF)))
        b.store_atomic(smask, self.g["smask"], "release", 8)
        b.store_atomic(gen, self.g["gen"], "seq_cst", 4)
        # Wake the sleeping workers, unless a wake is already pending: one issued since the last
        # worker went to sleep, whose sleepers have not run yet (each would be a system call
        # that wakes no one; a worker clears ``pending`` before it sleeps, so none is missed).
        sleepers = b.load_atomic(self.g["sleepers"], "seq_cst", 4)
        check = f.append_basic_block("wake_check")
        b.cbranch(b.icmp_signed(">", sleepers, _c(0, I32)), check, bb["run"])
        b.position_at_end(check)
        was = b.atomic_rmw("xchg", self.g["pending"], _c(1, I32), "seq_cst")
        b.cbranch(b.icmp_unsigned("==", was, _c(0, I32)), bb["wake"], bb["run"])
        b.position_at_end(bb["wake"])
        self._futex(b, _FUTEX_WAKE_PRIVATE, _c(0x7FFFFFFF, I32))
        b.branch(bb["run"])
        # take part, then wait for the chunks other threads claimed
        b.position_at_end(bb["run"])
        run_static, run_dynamic = f.append_basic_block("run_static"), f.append_basic_block("run_dynamic")
        b.cbranch(static, run_static, run_dynamic)
        b.position_at_end(run_static)
        b.call(self.static_loop, [gen, _c(0)])
        b.branch(bb["wait"])
        b.position_at_end(run_dynamic)
        b.call(self.claim_loop, [gen])
        b.branch(bb["wait"])
        b.position_at_end(bb["wait"])
        j = b.phi(I64)
        j.add_incoming(_c(0), run_static)
        j.add_incoming(_c(0), run_dynamic)
        done = b.load_atomic(self.g["done"], "acquire", 8)
        b.cbranch(b.icmp_signed("<", done, chunks), bb["waited"], bb["serial_out"])
        b.position_at_end(bb["waited"])
        self._pause(b)
        j1 = b.add(j, _c(1))
        where, yield_bb, again = (f.append_basic_block(n) for n in ("wait_where", "wait_yield", "wait_again"))
        b.cbranch(b.icmp_unsigned("==", b.and_(j1, _c(YIELD_EVERY - 1)), _c(0)), where, again)
        # on the core of the worker that took the job (it may hold a chunk): let it run
        b.position_at_end(where)
        shared = b.icmp_signed("==", b.call(self.getcpu, []), b.load_atomic(self.g["wcpu"], "monotonic", 4))
        b.cbranch(shared, yield_bb, again)
        b.position_at_end(yield_bb)
        b.call(self.sched_yield, [])
        b.branch(again)
        b.position_at_end(again)
        j.add_incoming(j1, again)
        b.branch(bb["wait"])
        b.position_at_end(bb["serial_out"])
        b.store_atomic(_c(0, I32), self.g["busy"], "release", 4)
        b.ret_void()
        return f


_ENGINES: list[llvm.ExecutionEngine] = []  # never freed: the workers run this code


@functools.cache
def install() -> int:
    """Compile the pool into this process once and make ``ember_parallel_for`` resolvable by
    the kernels loaded afterwards; returns its address. Needs libgomp loaded (for
    ``omp_get_max_threads``)."""
    from ...target import Target
    from .codegen import target_machine

    pool = _Pool()
    mod = llvm.parse_assembly(str(pool.m))
    mod.verify()
    tm = target_machine(Target("llvm"), opt=2)  # position-independent, large code model (as kernels)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    _ENGINES.append(engine)
    addr = engine.get_function_address(SYMBOL)
    llvm.add_symbol(SYMBOL, addr)
    return addr
