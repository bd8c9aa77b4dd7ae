"""The verifier's dependency order and the operation it names on a cycle are those of the
walks it used to write by hand (kept here as the reference): the dependency order is
:func:`collsynth.schedule.dag.topological_order`, the cycle member comes from
:func:`collsynth.verify.order.cycle_member`; on random graphs, with and without cycles."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from collsynth.schedule.dag import is_acyclic, owners, topological_order
from collsynth.verify.order import cycle_member


def _in_degrees_and_successors(
    n: int, ptr: np.ndarray, ids: np.ndarray
) -> tuple[list[int], list[list[int]]]:
    indeg = np.diff(ptr).astype(np.int64).tolist()
    succ: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for d in ids[ptr[v] : ptr[v + 1]].tolist():
            succ[d].append(v)
    return indeg, succ


def reference_order(n: int, ptr: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Dependencies first, ties by node id; None on a cycle."""
    indeg, succ = _in_degrees_and_successors(n, ptr, ids)
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        u = heapq.heappop(heap)
        out.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, v)
    return np.array(out, dtype=np.int64) if len(out) == n else None


def reference_cycle_member(n: int, ptr: np.ndarray, ids: np.ndarray) -> int:
    """Strip the nodes with no remaining predecessor; from the smallest node left, follow the
    smallest predecessor left until a node comes again."""
    indeg, succ = _in_degrees_and_successors(n, ptr, ids)
    stack = [i for i in range(n) if indeg[i] == 0]
    done = []
    while stack:
        u = stack.pop()
        done.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    remaining = sorted(set(range(n)) - set(done))
    rem = set(remaining)
    u = remaining[0]
    seen: set[int] = set()
    while u not in seen:
        seen.add(u)
        u = min(int(d) for d in ids[ptr[u] : ptr[u + 1]] if int(d) in rem)
    return u


def random_graph(rng: np.random.Generator, cyclic: bool) -> tuple[int, np.ndarray, np.ndarray]:
    """A random dependency graph as CSR predecessors: edges from lower to higher ids under a
    random relabelling (acyclic), plus a few backward edges when ``cyclic``."""
    n = int(rng.integers(2, 40))
    m = int(rng.integers(0, 3 * n))
    a = rng.integers(0, n, m)
    b = rng.integers(0, n, m)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = lo != hi
    pred, node = lo[keep], hi[keep]
    if cyclic:
        k = int(rng.integers(1, 4))
        x = rng.integers(0, n - 1, k)
        y = x + rng.integers(1, n - x)
        pred, node = np.r_[pred, y], np.r_[node, x]  # later -> earlier
    perm = rng.permutation(n)
    pred, node = perm[pred], perm[node]
    by = np.argsort(node, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(node, minlength=n), out=ptr[1:])
    return n, ptr, pred[by].astype(np.int64)


@pytest.mark.parametrize("seed", range(8))
def test_dependency_order_and_cycle_member_agree_with_the_reference(seed):
    rng = np.random.default_rng(seed)
    cycles = 0
    for trial in range(60):
        n, ptr, ids = random_graph(rng, cyclic=trial % 2 == 1)
        want = reference_order(n, ptr, ids)
        got = topological_order(n, ptr, ids)
        if want is None:
            assert got is None
            assert not is_acyclic(n, ids, owners(ptr))
            assert cycle_member(n, ids, owners(ptr)) == reference_cycle_member(n, ptr, ids)
            cycles += 1
        else:
            assert got is not None and np.array_equal(got, want)
    assert cycles >= 10  # most backward edges close a cycle
