"""Routes between compute nodes through switches and routers.

A *route* is a list of link ids from one compute node to another whose intermediate nodes are
all switches or routers (compute nodes store and forward, so a path through a GPU is two
transfers). :class:`RouteTable` finds, per source rank, the best route to every rank it can reach
that way: fewest links first, then least total alpha, then lowest link ids (deterministic).
"""

from __future__ import annotations

import heapq

from ..errors import CollsynthError
from .model import Topology


class RouteTable:
    """Lazily computed best direct routes between ranks of one topology."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self._cache: dict[int, dict[int, tuple[int, ...]]] = {}

    def direct(self, src_rank: int) -> dict[int, tuple[int, ...]]:
        """Best route from ``src_rank`` to every rank reachable through non-compute nodes only."""
        cached = self._cache.get(src_rank)
        if cached is not None:
            return cached
        t = self.topology
        source = t.node_of_rank(src_rank)
        best: dict[int, tuple[int, float]] = {source: (0, 0.0)}
        via: dict[int, int] = {}
        heap: list[tuple[int, float, int, int]] = [(0, 0.0, -1, source)]
        done: set[int] = set()
        while heap:
            hops, alpha, _, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            if u != source and t.kind_codes[u] == 0:
                continue  # reached a compute node: do not route through it
            for lid in t.out_links[u]:
                link = t.links[lid]
                v = link.dst
                key = (hops + 1, alpha + link.alpha)
                old = best.get(v)
                if old is None or key < old or (key == old and lid < via[v]):
                    best[v] = key
                    via[v] = lid
                    heapq.heappush(heap, (key[0], key[1], lid, v))
        routes: dict[int, tuple[int, ...]] = {}
        for node in t.compute_nodes:
            node = int(node)
            if node == source or node not in via:
                continue
            path = []
            cur = node
            while cur != source:
                lid = via[cur]
                path.append(lid)
                cur = t.links[lid].src
            routes[int(t.rank_of_node[node])] = tuple(reversed(path))
        self._cache[src_rank] = routes
        return routes

    def route(self, src_rank: int, dst_rank: int) -> tuple[int, ...]:
        """Best direct route ``src_rank -> dst_rank`` (CollsynthError if there is none)."""
        r = self.direct(src_rank).get(dst_rank)
        if r is None:
            t = self.topology
            raise CollsynthError(
                f"no route from {t.rank_name(src_rank)} to {t.rank_name(dst_rank)} "
                f"through switches/routers only")
        return r

    def has_route(self, src_rank: int, dst_rank: int) -> bool:
        return dst_rank in self.direct(src_rank)

    def route_alpha(self, route: tuple[int, ...]) -> float:
        return float(sum(self.topology.links[l].alpha for l in route))

    def route_bw(self, route: tuple[int, ...]) -> float:
        return float(min(self.topology.links[l].bw for l in route))
