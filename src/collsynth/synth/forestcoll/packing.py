"""ForestColl spanning out-tree packing: Zhao et al., "ForestColl: Throughput-Optimal
Collective Communications on Heterogeneous Network Fabrics" (arXiv 2402.06787), §4.4 and
Appendix C.3 (Algorithm 5, Theorems 9-12, after Tarjan / Bérczi & Frank).

On a switch-free logical topology with integer arc capacities ``g`` and ``k`` trees per root,
every root ``u`` starts with one *root set* ``R = {u}`` of multiplicity ``m(R) = k`` (``m``
identical trees). A root set grows by one arc ``(x, y)`` (``x in R``, ``y not in R``) at a time;
the largest number of its ``m(R)`` trees that can take the arc while the remaining trees stay
packable (condition (3) of Theorem 9) is, by Theorem 12, one max-flow:

    mu = min{ g(x, y), m(R), F(x, y; D̄) - sum_{i != R} m(R_i) }

where ``D̄`` is the current graph plus, for every other root set ``R_i``, a node ``s_i`` with an
arc ``x -> s_i`` of capacity ``m(R_i)`` and infinite arcs ``s_i -> R_i``. If ``0 < mu < m(R)``
the root set is split in two: ``mu`` trees take the arc, ``m(R) - mu`` keep the old shape. The
result is, per root, a few distinct trees whose multiplicities sum to ``k``, edge-disjoint with
respect to ``g`` counting multiplicity.

Implementation choices (not in the paper; optimality is unaffected):

* Root sets grow round-robin, one arc per turn (the paper finishes one set before the next), and
  each set tries arcs from its shallowest members first (then the largest remaining capacity,
  then rank), so the trees come out breadth-first and short. Arcs that gave ``mu = 0`` to a root
  set are tried last by it afterwards (every arc is still tried before giving up).
* In ``D̄``, root sets that already contain ``y`` are left out together with their ``m`` (their
  arc ``x -> s_i -> y`` is always saturated and cancels in the formula); this leaves ``mu``
  unchanged. ``D̄`` is built vectorised from a root-set membership matrix, one node ``s_i`` per
  root set (the same max-flow as sharing one node between root sets with equal members).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...errors import CollsynthError
from ...flow import maxflow as _flow
from ...flow.maxflow import FlowNet


@dataclass
class _RootSet:
    root: int
    m: int
    members: set[int]
    depth: dict[int, int]
    order: list[int]  # members in insertion (BFS-like) order
    mask: int  # members as a bit mask
    edges: list[tuple[int, int]] = field(default_factory=list)
    failed: set[tuple[int, int]] = field(default_factory=set)  # arcs that gave mu = 0

    def copy(self, m: int) -> _RootSet:
        return _RootSet(
            self.root,
            m,
            set(self.members),
            dict(self.depth),
            list(self.order),
            self.mask,
            list(self.edges),
            set(self.failed),
        )


def pack_trees(
    logical, k: int | Sequence[int] | None = None, *, stats: dict | None = None
) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Algorithm 5 on ``logical`` (a :class:`~.splitting.LogicalTopology` or anything with
    ``num_ranks`` and ``caps[(u, v)]``): ``k`` (default ``logical.k``) spanning out-trees per root,
    or ``k[u]`` trees rooted at ``u`` when ``k`` is a sequence (Theorem 12 holds for any root
    multiplicities; a root with ``k[u] = 0`` gets no tree).

    Returns ``[(root_rank, multiplicity, [(parent_rank, child_rank), ...]), ...]`` sorted by root;
    per root the multiplicities sum to its ``k``; every arc ``(u, v)`` is used by at most
    ``logical.caps[(u, v)]`` trees counting multiplicity. Raises CollsynthError if the capacities
    cannot hold that many trees.
    """
    t0 = time.perf_counter()
    mf0 = _flow.COUNTERS["maxflows"]
    n = int(logical.num_ranks)
    if k is None or isinstance(k, int | np.integer):
        ks = [int(logical.k if k is None else k)] * n
        if ks[0] < 1:
            raise CollsynthError(f"k must be positive, got {ks[0]}")
    else:
        ks = [int(x) for x in k]
        if len(ks) != n or min(ks) < 0 or max(ks) < 1:
            raise CollsynthError(f"per-root k needs {n} counts >= 0, not all 0")
    pk = _Packing(logical, n, ks)
    queue = list(range(len(pk.sets)))
    qi = 0
    while qi < len(queue):
        i = queue[qi]
        qi += 1
        r = pk.sets[i]
        if len(r.members) == n:
            continue
        if not pk.grow(i, queue):
            raise CollsynthError(
                f"tree packing failed: root set of rank {r.root} cannot grow (the logical "
                f"topology cannot hold {ks[r.root]} spanning out-trees rooted there)"
            )
        if len(r.members) < n:
            queue.append(i)
    out = [(r.root, r.m, list(r.edges)) for r in pk.sets]
    out.sort(key=lambda t: (t[0], -t[1], t[2]))
    if stats is not None:
        stats.update(pk.st)
        stats["maxflows"] = _flow.COUNTERS["maxflows"] - mf0
        stats["seconds"] = time.perf_counter() - t0
    return out


class _Packing:
    """The state of Algorithm 5: remaining arc capacities, the root sets, and their membership
    matrix (row = root set) and multiplicities, grown as root sets split."""

    def __init__(self, logical, n: int, ks: list[int]):
        g: dict[tuple[int, int], int] = {
            e: int(c) for e, c in sorted(logical.caps.items()) if c > 0
        }
        arcs = list(g)
        self.n = n
        self.arc_id = {e: i for i, e in enumerate(arcs)}
        self.a_tail = np.array([a for a, _ in arcs], dtype=np.int64)
        self.a_head = np.array([b for _, b in arcs], dtype=np.int64)
        self.a_cap = np.array([g[e] for e in arcs], dtype=np.int64)
        self.outn: list[list[int]] = [[] for _ in range(n)]
        for a, b in arcs:
            self.outn[a].append(b)
        roots = [u for u in range(n) if ks[u] > 0]
        self.sets: list[_RootSet] = [_RootSet(u, ks[u], {u}, {u: 0}, [u], 1 << u) for u in roots]
        self.st = {"mu_flows": 0, "mu_zero": 0, "set_splits": 0}
        self.mem = np.zeros((max(2 * n, 8), n), dtype=bool)
        self.mem[np.arange(len(roots)), roots] = True
        self.mult = np.zeros(self.mem.shape[0], dtype=np.int64)
        self.mult[: len(roots)] = [ks[u] for u in roots]

    def mu(self, i: int, x: int, y: int) -> int:
        """Trees of root set ``i`` that can take arc ``(x, y)`` (Theorem 12, one max-flow)."""
        # D̄ of Theorem 12 with one node per other root set not containing y (root sets with
        # the same members could share a node; the max-flow value is the same)
        n, mem, a_cap = self.n, self.mem, self.a_cap
        me = self.sets[i]
        cap_xy = int(a_cap[self.arc_id[(x, y)]])
        S = len(self.sets)
        sel = ~mem[:S, y]
        sel[i] = False
        rows = np.flatnonzero(sel)
        ms = self.mult[rows]
        total_m = int(ms.sum())
        inf = int(a_cap.sum()) + total_m + 1
        r_loc, cols = np.nonzero(mem[rows])
        g = len(rows)
        tails = np.concatenate(
            [self.a_tail, np.full(g, x, dtype=np.int64), n + r_loc.astype(np.int64)]
        )
        heads = np.concatenate(
            [self.a_head, np.arange(n, n + g, dtype=np.int64), cols.astype(np.int64)]
        )
        caps = np.concatenate([a_cap, ms, np.full(len(cols), inf, dtype=np.int64)])
        self.st["mu_flows"] += 1
        net = FlowNet(n + g, tails, heads, caps)
        f = net.solve(x, y)
        return max(0, min(cap_xy, me.m, f - total_m))

    def candidates(self, r: _RootSet) -> list[tuple]:
        """Arcs out of root set ``r`` with capacity left, in trial order: arcs that gave
        ``mu = 0`` last, then shallowest member, largest capacity, rank."""
        cands = []
        for x in r.order:
            for y in self.outn[x]:
                if y not in r.members:
                    c = int(self.a_cap[self.arc_id[(x, y)]])
                    if c > 0:
                        cands.append(((x, y) in r.failed, r.depth[x], -c, x, y))
        cands.sort()
        return cands

    def grow(self, i: int, queue: list[int]) -> bool:
        """Grow root set ``i`` by its first arc with ``mu > 0`` (splitting it when
        ``mu < m``; the new set is queued); False when no arc can grow it."""
        r = self.sets[i]
        for _, _, _, x, y in self.candidates(r):
            mu = self.mu(i, x, y)
            if mu == 0:
                self.st["mu_zero"] += 1
                r.failed.add((x, y))
                continue
            if mu < r.m:
                queue.append(self.split(i, mu))
            r.edges.append((x, y))
            self.mem[i, y] = True
            r.members.add(y)
            r.mask |= 1 << y
            r.depth[y] = r.depth[x] + 1
            r.order.append(y)
            self.a_cap[self.arc_id[(x, y)]] -= mu
            return True
        return False

    def split(self, i: int, mu: int) -> int:
        """Split root set ``i``: ``mu`` trees stay in it, the others form a new set (its id)."""
        r = self.sets[i]
        j = len(self.sets)
        self.sets.append(r.copy(r.m - mu))
        if j >= self.mem.shape[0]:
            self.mem = np.concatenate([self.mem, np.zeros_like(self.mem)])
            self.mult = np.concatenate([self.mult, np.zeros_like(self.mult)])
        self.mem[j] = self.mem[i]
        self.mult[j] = r.m - mu
        r.m = mu
        self.mult[i] = mu
        self.st["set_splits"] += 1
        return j
