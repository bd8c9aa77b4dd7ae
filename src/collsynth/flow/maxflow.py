"""Integer max-flow: OR-Tools ``SimpleMaxFlow`` with an exact big-integer fallback.

Every oracle of ForestColl (Zhao et al., 'ForestColl: Throughput-Optimal Collective
Communications on Heterogeneous Network Fabrics', arXiv 2402.06787; Theorems 1, 5, 8, 12 and 14)
is a max-flow on a network with integer capacities, and so are the exact cut bounds of
:mod:`collsynth.bound.cut`. :class:`FlowNet` builds one network and answers several
``solve(source, sink)`` calls on it (OR-Tools keeps the arcs; only the terminals change), and can
change arc capacities in place (used for the per-compute-node infinite arcs of Theorem 8).
:func:`rooted_check` is the max-flow test of Theorem 5 (``k`` edge-disjoint spanning out-trees
per root exist iff every compute node receives ``N k`` from a super source).

OR-Tools works on int64. When the capacities could overflow it (total capacity at or above
2**62), or when OR-Tools is not installed, the network is solved by a small exact Dinic on Python
integers instead; the answers are the same, only slower.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ortools.graph.python.max_flow import SimpleMaxFlow

try:  # pragma: no cover - exercised whenever ortools is present
    from ortools.graph.python import max_flow as _ort
except ImportError:  # pragma: no cover
    _ort = None

INT_SAFE = 1 << 62

#: Counters for profiling (reset by callers that report them).
COUNTERS = {"maxflows": 0}


class FlowNet:
    """A directed network on nodes ``0..n-1`` with integer arc capacities."""

    def __init__(
        self,
        n: int,
        tails: Iterable[int],
        heads: Iterable[int],
        caps: Iterable[int] | npt.NDArray[np.int64],
    ) -> None:
        self.n = int(n)
        # numpy int64 arrays on the OR-Tools fast path, Python int lists otherwise (always
        # lists once ``_big`` is set)
        self.tails: npt.NDArray[np.int64] | list[int]
        self.heads: npt.NDArray[np.int64] | list[int]
        self.caps: npt.NDArray[np.int64] | list[int]
        if isinstance(caps, np.ndarray) and caps.dtype == np.int64:
            # fast path: numpy int64 arrays (callers guarantee non-negative capacities)
            self.tails = np.asarray(tails, dtype=np.int64)
            self.heads = np.asarray(heads, dtype=np.int64)
            self.caps = caps
            big = len(caps) > 0 and int(caps.max()) >= INT_SAFE // max(1, len(caps))
        else:
            self.tails = [int(x) for x in tails]
            self.heads = [int(x) for x in heads]
            self.caps = [int(c) for c in caps]
            if any(c < 0 for c in self.caps):
                raise ValueError("negative capacity")
            big = sum(self.caps) >= INT_SAFE
        self._big = _ort is None or big
        self._solver: SimpleMaxFlow | None = None
        self._flow = 0
        if not self._big:
            self._build_ortools()
        else:
            self.tails = [int(x) for x in self.tails]
            self.heads = [int(x) for x in self.heads]
            self.caps = [int(c) for c in self.caps]

    # ------------------------------------------------------------------ construction
    def _build_ortools(self) -> None:
        smf = _ort.SimpleMaxFlow()
        if len(self.tails):
            smf.add_arcs_with_capacity(
                np.asarray(self.tails, dtype=np.int64),
                np.asarray(self.heads, dtype=np.int64),
                np.asarray(self.caps, dtype=np.int64),
            )
        # make sure every node index exists (a zero arc from the last node)
        smf.add_arc_with_capacity(self.n - 1, 0, 0)
        self._solver = smf

    def set_capacity(self, arc: int, cap: int) -> None:
        """Change one arc's capacity (callers keep the total below ``INT_SAFE`` or use ints)."""
        if not self._big and int(cap) >= INT_SAFE // max(1, len(self.caps)):
            self.tails = [int(x) for x in self.tails]
            self.heads = [int(x) for x in self.heads]
            self.caps = [int(c) for c in self.caps]
            self._big = True
            self._solver = None
        self.caps[arc] = int(cap)
        if not self._big:
            assert self._solver is not None  # built whenever ``_big`` is unset
            self._solver.set_arc_capacity(arc, int(cap))

    # ------------------------------------------------------------------ solving
    def solve(self, source: int, sink: int) -> int:
        COUNTERS["maxflows"] += 1
        self._last = (source, sink)
        if source == sink:
            raise ValueError("source equals sink")
        if not self._big:
            solver = self._solver
            assert solver is not None  # built whenever ``_big`` is unset
            status = solver.solve(int(source), int(sink))
            if status == solver.OPTIMAL:
                self._flow = int(solver.optimal_flow())
                return self._flow
            # POSSIBLE_OVERFLOW or any surprise: fall back to exact integers
            self._big = True
            self._solver = None
            self.tails = [int(x) for x in self.tails]
            self.heads = [int(x) for x in self.heads]
            self.caps = [int(c) for c in self.caps]
        self._flow, self._cut = _dinic(self.n, self.tails, self.heads, self.caps, source, sink)
        return self._flow

    def sink_side(self) -> list[int] | None:
        """Nodes that reach the sink in the residual network of the last ``solve`` (the
        smallest sink side of a minimum cut), or None when the exact-integer fallback solved
        it (it records only the source side)."""
        if not self._big and self._solver is not None:
            return [int(v) for v in self._solver.get_sink_side_min_cut()]
        return None

    def source_side(self) -> list[int]:
        """Nodes on the source side of a minimum cut of the last ``solve``."""
        if not self._big and self._solver is not None:
            return [int(v) for v in self._solver.get_source_side_min_cut()]
        return sorted(self._cut)


def _dinic(
    n: int, tails: Iterable[int], heads: Iterable[int], caps: Iterable[int], s: int, t: int
) -> tuple[int, set[int]]:
    """Exact max-flow on Python integers; returns (value, source side of a minimum cut)."""
    head: list[int] = []
    cap: list[int] = []
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b, c in zip(tails, heads, caps):
        if a == b or c <= 0:
            continue
        adj[a].append(len(head))
        head.append(b)
        cap.append(c)
        adj[b].append(len(head))
        head.append(a)
        cap.append(0)
    flow = 0
    while True:
        level = [-1] * n
        level[s] = 0
        q = deque([s])
        while q:
            u = q.popleft()
            for e in adj[u]:
                if cap[e] > 0 and level[head[e]] < 0:
                    level[head[e]] = level[u] + 1
                    q.append(head[e])
        if level[t] < 0:
            break
        it = [0] * n

        def push(u: int, f: int) -> int:
            if u == t:
                return f
            while it[u] < len(adj[u]):
                e = adj[u][it[u]]
                v = head[e]
                if cap[e] > 0 and level[v] == level[u] + 1:
                    d = push(v, min(f, cap[e]))
                    if d:
                        cap[e] -= d
                        cap[e ^ 1] += d
                        return d
                it[u] += 1
            return 0

        while True:
            f = push(s, 1 << 200)
            if not f:
                break
            flow += f
    seen = {s}
    q = deque([s])
    while q:
        u = q.popleft()
        for e in adj[u]:
            if cap[e] > 0 and head[e] not in seen:
                seen.add(head[e])
                q.append(head[e])
    return flow, seen


def rooted_check(
    n: int,
    tails: Iterable[int],
    heads: Iterable[int],
    caps: Iterable[int],
    roots: Sequence[int],
    root_caps: Sequence[int],
    need: int,
    order: Sequence[int] | None = None,
) -> tuple[bool, int | None, set[int] | None]:
    """Is the max-flow from a new source ``s`` (arcs ``s -> roots[i]`` of ``root_caps[i]``) to
    every root at least ``need``? Returns ``(True, None, None)`` or ``(False, v, S)`` with the
    first failing sink ``v`` and ``S`` the source side of its minimum cut, without ``s``.
    """
    s = n
    t = list(tails) + [s] * len(roots)
    h = list(heads) + list(roots)
    c = list(caps) + list(root_caps)
    net = FlowNet(n + 1, t, h, c)
    for v in order if order is not None else roots:
        if net.solve(s, v) < need:
            side = set(net.source_side())
            side.discard(s)
            return False, int(v), side
    return True, None, None
