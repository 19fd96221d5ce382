"""Memory planning: every intermediate value of a compiled model gets a storage, and storages
are reused once the values they hold are dead.

The plan is computed once at compile time from the step list (see :mod:`ember.model.group_lowering`)
and stored in the model's plan as plain data (value -> storage id, storage sizes in bytes).
"""

from __future__ import annotations

from typing import Any

from ..errors import EmberError
from ..graph.ir import Graph


def plan_memory(graph: Graph, steps: list[dict[str, Any]]) -> tuple[dict[str, int], list[int]]:
    """Assign every intermediate value a storage, reusing storages whose values are dead.
    Returns (value -> storage id, storage sizes in bytes). Graph inputs, outputs and constants
    get none; a view shares its source's storage."""
    root: dict[str, str] = {}
    for st in steps:
        if st["kind"] == "view":
            root[st["dst"]] = root.get(st["src"], st["src"])
    last_use: dict[str, int] = {}
    for k, st in enumerate(steps):
        reads = st["args"] if st["kind"] == "kernel" else [st["src"]]
        for v in reads:
            r = root.get(v, v)
            last_use[r] = k
    for o in graph.outputs:
        last_use[root.get(o, o)] = len(steps)
    special = set(graph.inputs) | set(graph.consts) | {root.get(o, o) for o in graph.outputs}
    assign: dict[str, int] = {}
    sizes: list[int] = []
    free: list[int] = []
    release: dict[int, list[int]] = {}
    for k, st in enumerate(steps):
        if st["kind"] == "kernel":
            for v in st["args"][len(st["args"]) - st["nout"] :]:
                if v in assign or v in special or root.get(v, v) != v:
                    continue
                need = graph.values[v].nbytes
                best = None
                for sid in free:
                    if sizes[sid] >= need and (best is None or sizes[sid] < sizes[best]):
                        best = sid
                if best is None:
                    sizes.append(need)
                    best = len(sizes) - 1
                else:
                    free.remove(best)
                assign[v] = best
                release.setdefault(last_use.get(v, k), []).append(best)
        for sid in release.pop(k, []):
            free.append(sid)
    for v, r in root.items():
        if r in assign:
            assign[v] = assign[r]
    check_plan_size(sizes, graph.name)
    return assign, sizes


def check_plan_size(sizes: list[int], what: str = "model") -> None:
    """EmberError when the storages of a plan add up to more than
    :func:`~ember.ops.util.memory_limit` (``$EMBER_MEMORY_LIMIT``, else the memory available
    now): a clear error at compile time instead of a failed allocation at the first call."""
    from ..ops.util import memory_limit

    total = sum(int(n) for n in sizes)
    limit = memory_limit(fresh=True)
    if total > limit:
        raise EmberError(
            f"{what}: the memory plan needs {total / 2**30:.2f} GiB for intermediate values "
            f"({len(sizes)} storages, the largest {max(sizes) / 2**30:.2f} GiB), more than the "
            f"{limit / 2**30:.2f} GiB limit (the memory available now; set EMBER_MEMORY_LIMIT to change it)"
        )


