"""The one DAG helper (`collsynth.schedule.dag`) against brute force on random graphs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.schedule import dag


def _csr(n: int, preds: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(p) for p in preds])
    ids = np.array([d for p in preds for d in p], dtype=np.int64)
    return ptr, ids


@st.composite
def dags(draw, cyclic: bool = False):
    n = draw(st.integers(1, 12))
    preds = [
        sorted(draw(st.sets(st.integers(0, max(v - 1, 0)), max_size=v))) if v else []
        for v in range(n)
    ]
    perm = draw(st.permutations(range(n)))  # hide the order in the ids
    inv = {old: new for new, old in enumerate(perm)}
    out: list[list[int]] = [[] for _ in range(n)]
    for v, p in enumerate(preds):
        out[inv[v]] = [inv[d] for d in p]
    if cyclic and n > 1:
        # one back edge closes a cycle through a chain
        out[inv[0]].append(inv[n - 1])
        for v in range(1, n):
            if inv[v - 1] not in out[inv[v]]:
                out[inv[v]].append(inv[v - 1])
    return n, out


def test_ragged_arange():
    assert dag.ragged_arange(np.array([2, 0, 3])).tolist() == [0, 1, 0, 1, 2]
    assert dag.ragged_arange(np.array([2, 0, 3]), np.array([5, 9, 1])).tolist() == [5, 6, 1, 2, 3]
    assert dag.ragged_arange(np.array([], dtype=np.int64)).tolist() == []


def test_owners_and_successors():
    ptr, ids = _csr(4, [[], [0], [0, 1], [2]])
    assert dag.owners(ptr).tolist() == [1, 2, 2, 3]
    sp, si = dag.successors(4, ptr, ids)
    assert [si[sp[v] : sp[v + 1]].tolist() for v in range(4)] == [[1, 2], [2], [3], []]


@settings(max_examples=80, deadline=None)
@given(dags(), st.data())
def test_topological_order_respects_every_edge_and_the_key(g, data):
    n, preds = g
    ptr, ids = _csr(n, preds)
    key = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    order = dag.topological_order(n, ptr, ids, key=key)
    assert order is not None and sorted(order.tolist()) == list(range(n))
    place = {v: i for i, v in enumerate(order.tolist())}
    assert all(place[d] < place[v] for v in range(n) for d in preds[v])
    # greedy by key: replay the heap by hand
    done: set[int] = set()
    for v in order.tolist():
        ready = [u for u in range(n) if u not in done and all(d in done for d in preds[u])]
        assert (key[v], v) == min((key[u], u) for u in ready)
        done.add(v)
    plain = dag.topological_order(n, ptr, ids)
    assert plain is not None
    pos = {v: i for i, v in enumerate(plain.tolist())}
    assert all(pos[d] < pos[v] for v in range(n) for d in preds[v])


@settings(max_examples=60, deadline=None)
@given(dags())
def test_levels_are_longest_chains(g):
    n, preds = g
    ptr, ids = _csr(n, preds)
    level = dag.levels(n, ptr, ids)
    assert level is not None
    depth: dict[int, int] = {}

    def d(v: int) -> int:
        if v not in depth:
            depth[v] = 1 + max((d(u) for u in preds[v]), default=-1)
        return depth[v]

    assert level.tolist() == [d(v) for v in range(n)]


@settings(max_examples=60, deadline=None)
@given(dags(cyclic=True))
def test_cycles_are_found_by_every_walk(g):
    n, preds = g
    ptr, ids = _csr(n, preds)
    acyclic = dag.is_acyclic(n, ids, dag.owners(ptr))
    assert (dag.topological_order(n, ptr, ids) is not None) == acyclic
    assert (dag.levels(n, ptr, ids) is not None) == acyclic
    assert acyclic == (n == 1)


def test_extra_edges_order_and_close_cycles():
    ptr, ids = _csr(3, [[], [], []])
    order = dag.topological_order(3, ptr, ids, extra=(np.array([2, 1]), np.array([1, 0])))
    assert order is not None and order.tolist() == [2, 1, 0]
    assert dag.topological_order(3, ptr, ids, extra=(np.array([0, 1]), np.array([1, 0]))) is None
