"""Graph helpers over a schedule's operations: the one home of every dependency-DAG walk.

Operations are nodes ``0..n-1``. A graph is given either as CSR predecessors (``ptr``, ``ids``:
the predecessors of ``v`` are ``ids[ptr[v]:ptr[v + 1]]``, as :class:`~collsynth.schedule.ir.
Schedule` stores its dependencies in ``dep_ptr``/``dep_ids``) or as two edge arrays ``a -> b``.

* :func:`ragged_arange`: ``arange(lo[i], lo[i] + counts[i])`` concatenated.
* :func:`owners`: the node each CSR entry belongs to (``v`` repeated ``ptr[v+1]-ptr[v]`` times).
* :func:`successors`: the graph reversed, as CSR.
* :func:`topological_order`: dependencies first, ties broken by a ``key`` (smallest first;
  node id last); ``None`` for a cycle. Extra edges (link orders) may be added.
* :func:`levels`: each node's depth (the longest chain of predecessors before it).
* :func:`is_acyclic`: a linear-time cycle check.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from ..arrays import unique


def ragged_arange(counts: np.ndarray, lo: np.ndarray | int = 0) -> np.ndarray:
    """Concatenation of ``arange(lo[i], lo[i] + counts[i])`` over ``i`` (``lo`` 0 by default:
    ``arange(counts[i])`` each), as int64."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    base = np.asarray(lo, dtype=np.int64) - starts
    return np.arange(total, dtype=np.int64) + np.repeat(base, counts)


def owners(ptr: np.ndarray) -> np.ndarray:
    """For CSR pointers ``ptr`` (``n + 1`` entries), the row of every entry: ``v`` repeated
    ``ptr[v + 1] - ptr[v]`` times (int64)."""
    ptr = np.asarray(ptr)
    return np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))


def successors(n: int, ptr: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The graph reversed: ``(succ_ptr, succ_ids)`` with the successors of ``v`` (the nodes
    that list ``v`` among their predecessors) in ``succ_ids[succ_ptr[v]:succ_ptr[v + 1]]``,
    in increasing order of the successor."""
    ids = np.asarray(ids, dtype=np.int64)
    by_pred = np.argsort(ids, kind="stable")
    succ_ids = owners(ptr)[by_pred]
    succ_ptr = np.zeros(n + 1, dtype=np.int64)
    if len(ids):
        np.cumsum(np.bincount(ids, minlength=n), out=succ_ptr[1:])
    return succ_ptr, succ_ids


def topological_order(
    n: int,
    ptr: np.ndarray,
    ids: np.ndarray,
    key: Sequence | np.ndarray | None = None,
    extra: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray | None:
    """The nodes, every one after its predecessors; among the nodes ready at once the one with
    the smallest ``key[v]`` (a number or tuple per node; ``None``: the node id) comes first,
    the node id breaking ties. ``extra``: more edges ``a -> b`` (``a`` before ``b``), such as
    link orders. ``None`` when the graph has a cycle."""
    succ_ptr, succ_ids = successors(n, ptr, ids)
    indeg = np.diff(np.asarray(ptr)).astype(np.int64)
    succ = [succ_ids[succ_ptr[v] : succ_ptr[v + 1]].tolist() for v in range(n)] if extra else None
    if extra is not None and len(extra[0]):
        a = np.asarray(extra[0], dtype=np.int64)
        b = np.asarray(extra[1], dtype=np.int64)
        assert succ is not None
        for u, v in zip(a.tolist(), b.tolist(), strict=True):
            succ[u].append(v)
        indeg = indeg + np.bincount(b, minlength=n)
    deg = indeg.tolist()
    if key is None:
        keys: list = list(range(n))
    else:
        listed = key.tolist() if isinstance(key, np.ndarray) else list(key)
        keys = [(k, v) for v, k in enumerate(listed)]
    heap = [keys[v] for v in range(n) if deg[v] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    sp = succ_ptr.tolist()
    sl = succ_ids.tolist()
    while heap:
        top = heapq.heappop(heap)
        u = top if key is None else top[1]
        out.append(u)
        for v in succ[u] if succ is not None else sl[sp[u] : sp[u + 1]]:
            deg[v] -= 1
            if deg[v] == 0:
                heapq.heappush(heap, keys[v])
    if len(out) != n:
        return None
    return np.array(out, dtype=np.int64)


def levels(n: int, ptr: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Each node's level: 0 without predecessors, else one more than its deepest predecessor
    (the longest chain before it). Computed wave by wave in numpy (one pass per level); ``None``
    for a cycle."""
    ptr = np.asarray(ptr, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    succ_ptr, succ_ids = successors(n, ptr, ids)
    deg = np.diff(ptr).astype(np.int64)
    level = np.zeros(n, dtype=np.int64)
    wave = np.flatnonzero(deg == 0)
    done = 0
    depth = 0
    while len(wave):
        level[wave] = depth
        done += len(wave)
        nxt = succ_ids[ragged_arange(succ_ptr[wave + 1] - succ_ptr[wave], succ_ptr[wave])]
        np.subtract.at(deg, nxt, 1)
        cand = unique(nxt)
        wave = cand[deg[cand] == 0]
        depth += 1
    return level if done == n else None


def is_acyclic(n: int, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the graph on ``n`` nodes with edges ``a[i] -> b[i]`` has no cycle: no self-loop
    and every strongly connected component a single node (scipy's linear-time components; a
    wave-by-wave Kahn in numpy pays per wave, and link orders make the waves as many as the
    longest chain)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    if n == 0 or not len(a):
        return True
    if bool(np.any(a == b)):
        return False
    graph = csr_matrix((np.ones(len(a), dtype=np.int32), (a, b)), shape=(n, n))
    components, _ = connected_components(graph, directed=True, connection="strong")
    return int(components) == n


__all__ = ["is_acyclic", "levels", "owners", "ragged_arange", "successors", "topological_order"]
