"""``spt`` — shortest-path trees: the universal, simple baseline for every collective.

Not from a paper: it is collsynth's always-applicable fallback and the demo's trivial schedule.
On the *compute graph* (rank u -> rank v when a route from u to v passes only switches and
routers; see :class:`~collsynth.topology.paths.RouteTable`):

* data leaving a rank (AllGather, Broadcast, Scatter, Gather, AllToAll, custom) travels down the
  fewest-transfer tree rooted at its source, pruned to the chunk's destinations; relays through
  GPUs are store-and-forward operations that depend on the delivery to the relay;
* a reduction toward a rank (ReduceScatter, Reduce) climbs the fewest-transfer in-tree of that
  rank, each rank adding its contribution after its children's partial sums have arrived;
* AllReduce is that ReduceScatter followed by the owner's broadcast down its out-tree.

Ties are broken by lower total alpha, then lower rank: the result is deterministic.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from ..collective import Collective, CollKind
from ..schedule.ir import OpKind, Schedule, ScheduleBuilder
from ..topology.model import Topology
from ..topology.paths import RouteTable
from . import register


class _ComputeGraph:
    def __init__(self, topology: Topology):
        self.topology = topology
        self.routes = RouteTable(topology)
        self.n = topology.num_ranks
        self._out: dict[int, tuple[int, dict[int, int]]] = {}
        self._in: dict[int, tuple[int, dict[int, int]]] = {}
        self._rev: dict[int, list[int]] | None = None

    def out_tree(self, root: int) -> dict[int, int]:
        """parent[v] for the fewest-transfer out-tree of ``root`` (root maps to -1)."""
        if root not in self._out:
            self._out[root] = (root, self._dijkstra(root, forward=True))
        return self._out[root][1]

    def in_tree(self, root: int) -> dict[int, int]:
        """next[v]: the rank v forwards to on its fewest-transfer path to ``root``."""
        if root not in self._in:
            self._in[root] = (root, self._dijkstra(root, forward=False))
        return self._in[root][1]

    def _reverse(self) -> dict[int, list[int]]:
        if self._rev is None:
            rev: dict[int, list[int]] = defaultdict(list)
            for u in range(self.n):
                for v in self.routes.direct(u):
                    rev[v].append(u)
            self._rev = dict(rev)
        return self._rev

    def _dijkstra(self, root: int, forward: bool) -> dict[int, int]:
        best = {root: (0, 0.0)}
        parent = {root: -1}
        heap = [(0, 0.0, root)]
        done = set()
        rev: dict[int, list[int]] = {} if forward else self._reverse()
        while heap:
            hops, alpha, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            nbrs = (
                self.routes.direct(u).items()
                if forward
                else ((w, self.routes.route(w, u)) for w in rev.get(u, ()))
            )
            for v, route in nbrs:
                key = (hops + 1, alpha + self.routes.route_alpha(route))
                if v not in best or key < best[v] or (key == best[v] and u < parent[v]):
                    best[v] = key
                    parent[v] = u
                    heapq.heappush(heap, (key[0], key[1], v))
        return parent


def _broadcast(
    b: ScheduleBuilder,
    g: _ComputeGraph,
    chunk: int,
    source: int,
    dests: tuple[int, ...],
    root_deps: list[int] | None = None,
) -> None:
    parent = g.out_tree(source)
    needed = set()
    for d in dests:
        v = d
        while v != source and v not in needed:
            needed.add(v)
            v = parent[v]
    children: dict[int, list[int]] = defaultdict(list)
    for v in sorted(needed):
        children[parent[v]].append(v)
    arrived = {source: list(root_deps or [])}
    frontier = [source]
    while frontier:
        nxt = []
        for u in frontier:
            for v in children.get(u, ()):
                op = b.add(u, v, chunk, route=g.routes.route(u, v), deps=arrived[u])
                arrived[v] = [op]
                nxt.append(v)
        frontier = nxt


def _reduce(b: ScheduleBuilder, g: _ComputeGraph, chunk: int, root: int) -> list[int]:
    nxt = g.in_tree(root)
    children: dict[int, list[int]] = defaultdict(list)
    for v, p in nxt.items():
        if p >= 0:
            children[p].append(v)
    # post-order from the root
    order: list[int] = []
    stack = [(root, False)]
    while stack:
        u, expanded = stack.pop()
        if expanded:
            order.append(u)
            continue
        stack.append((u, True))
        for v in sorted(children.get(u, ()), reverse=True):
            stack.append((v, False))
    into: dict[int, list[int]] = defaultdict(list)
    for u in order:
        if u == root:
            continue
        p = nxt[u]
        op = b.add(u, p, chunk, route=g.routes.route(u, p), kind=OpKind.REDUCE, deps=into[u])
        into[p].append(op)
    return into[root]


@register("spt", summary="shortest-path trees: fewest transfers per chunk; every collective")
def synthesize(topology: Topology, collective: Collective) -> Schedule:
    """Shortest-path trees for every chunk (collsynth's universal baseline)."""
    g = _ComputeGraph(topology)
    b = ScheduleBuilder(topology, collective)
    kind = collective.kind
    if kind in (CollKind.REDUCESCATTER, CollKind.REDUCE, CollKind.ALLREDUCE):
        n = collective.num_ranks
        for chunk in range(collective.num_chunks):
            if kind is CollKind.REDUCE:
                assert collective.root is not None  # rooted: Collective checks it is a rank
                owner = int(collective.root)
            else:
                owner = chunk // collective.chunks_per_rank
            into_root = _reduce(b, g, chunk, owner)
            if kind is CollKind.ALLREDUCE:
                _broadcast(b, g, chunk, owner, tuple(r for r in range(n) if r != owner), into_root)
    else:
        src = collective.chunk_source
        for chunk in range(collective.num_chunks):
            s = int(src[chunk])
            dests = tuple(d for d in collective.destinations(chunk) if d != s)
            if dests:
                _broadcast(b, g, chunk, s, dests)
    return b.build()
