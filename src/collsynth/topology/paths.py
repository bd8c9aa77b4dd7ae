"""Routes between compute nodes through switches and routers.

A *route* is a list of link ids from one compute node to another whose intermediate nodes are
all switches or routers (compute nodes store and forward, so a path through a GPU is two
transfers). :class:`RouteTable` gives every ordered pair of ranks ``(s, d)`` that has such a
path one *best* route:

1. fewest links;
2. among those, least total alpha. Alphas are compared as whole picoseconds (integer sums, so
   paths whose latencies differ only by floating-point rounding are equal; the unit becomes
   coarser, in powers of ten, only if a sum could overflow 64 bits);
3. among the routes still equal, one spread ECMP-style (equal-cost multi-path): the search from
   ``s`` builds the shortest-path DAG, i.e. for every node ``x`` every in-link ``u -> x`` that
   lies on a best path (``u`` is ``s`` or a switch/router reached from ``s``, ``u`` is one link
   closer to ``s`` than ``x`` and its alpha plus the link's equals ``x``'s). The route is traced
   backwards from ``d``: at node ``x`` with candidate links ``l_0 < l_1 < ... < l_{k-1}`` (by
   link id) it takes ``l_i`` with ``i = ecmp_hash(s, d, x) mod k``, and continues from that
   link's source until it reaches ``s``.

:func:`ecmp_hash` is a fixed 64-bit integer mix (murmur3's finalizer over the three numbers
multiplied by odd constants), so the choice is deterministic across runs, processes and
machines, and different ``(s, d)`` pairs between the same two switches spread over the parallel
spines/cores. With one best path (most fabrics: NVSwitch, rings, tori) the rule changes nothing.

The search is a level-synchronous breadth-first search in numpy (levels are link counts, so the
least alpha of a node is the minimum over its predecessors one level up); it expands only the
source and switches/routers, never another compute node. :meth:`RouteTable.direct` materializes
(and caches) the routes from one source to every rank (1024 rows of a 1024-GPU leaf-spine fabric
take about a second). :meth:`RouteTable.route` and :meth:`RouteTable.find` serve the first few
look-ups from a source with a search toward the requested destination only (skipping other
compute nodes, stopping at its level; in plain Python while the neighbourhood is small, else in
numpy) and then build and cache that source's row. All paths give the same routes.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Literal

import numpy as np

from ..errors import CollsynthError
from .model import Topology

__all__ = ["RouteTable", "ecmp_hash"]

_M_SRC = np.uint64(0x9E3779B97F4A7C15)
_M_DST = np.uint64(0xC2B2AE3D27D4EB4F)
_M_NODE = np.uint64(0x165667B19E3779F9)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_I64_MAX = np.iinfo(np.int64).max

#: Single-pair look-ups per source answered by a targeted search; more build the source's row.
_TARGETED = 8
#: Link relaxations a pure-Python targeted search may make before handing over to numpy.
_SMALL_BUDGET = 512
_MASK64 = (1 << 64) - 1


def ecmp_hash(src_rank, dst_rank, node) -> np.ndarray:
    """The ECMP tie-break hash of ``(source rank, destination rank, node)`` (numpy uint64).

    ``h = (s * 0x9E3779B97F4A7C15) xor (d * 0xC2B2AE3D27D4EB4F) xor (x * 0x165667B19E3779F9)``
    modulo 2**64, then murmur3's ``fmix64``: ``h ^= h >> 33; h *= 0xFF51AFD7ED558CCD;
    h ^= h >> 33; h *= 0xC4CEB9FE1A85EC53; h ^= h >> 33``. Arguments broadcast (arrays or ints).
    """
    s = np.atleast_1d(np.asarray(src_rank, dtype=np.int64)).astype(np.uint64)
    d = np.atleast_1d(np.asarray(dst_rank, dtype=np.int64)).astype(np.uint64)
    x = np.atleast_1d(np.asarray(node, dtype=np.int64)).astype(np.uint64)
    h = (s * _M_SRC) ^ (d * _M_DST) ^ (x * _M_NODE)
    h ^= h >> _S33
    h *= _F1
    h ^= h >> _S33
    h *= _F2
    h ^= h >> _S33
    return h


def _ecmp_hash_int(s: int, d: int, x: int) -> int:
    """:func:`ecmp_hash` of one triple in Python integers (the same value)."""
    h = ((s * 0x9E3779B97F4A7C15) ^ (d * 0xC2B2AE3D27D4EB4F) ^ (x * 0x165667B19E3779F9)) & _MASK64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK64
    h ^= h >> 33
    return h


def _alpha_units(alpha: np.ndarray, num_nodes: int) -> np.ndarray:
    """Link alphas as integers: picoseconds, coarser (powers of ten) if sums could overflow."""
    if not alpha.size:
        return np.zeros(0, dtype=np.int64)
    scale = 1e12
    biggest = float(alpha.max()) * max(num_nodes, 1)
    while biggest * scale >= 2.0**62:
        scale /= 10.0
    return np.rint(alpha * scale).astype(np.int64)


class _Dag:
    """The shortest-path DAG of one source: levels and, per node, its best in-links by id."""

    __slots__ = ("src_rank", "source", "level", "pred_ptr", "pred_lid", "npred")

    def __init__(
        self,
        src_rank: int,
        source: int,
        level: np.ndarray,
        pred_ptr: np.ndarray,
        pred_lid: np.ndarray,
    ):
        self.src_rank = src_rank
        self.source = source
        self.level = level
        self.pred_ptr = pred_ptr
        self.pred_lid = pred_lid
        self.npred = np.diff(pred_ptr)


class RouteTable:
    """Best direct routes between ranks of one topology (fewest links, least alpha, ECMP)."""

    def __init__(self, topology: Topology):
        self.topology = topology
        t = topology
        n = t.num_nodes
        self._n = n
        self._cache: dict[int, dict[int, tuple[int, ...]]] = {}
        self._pair: dict[tuple[int, int], tuple[int, ...] | None] = {}
        self._lookups: dict[int, int] = {}
        self._link_src = t.link_src
        self._link_dst = t.link_dst
        self._aq = _alpha_units(t.link_alpha, n)
        order = np.lexsort((np.arange(len(t.links)), t.link_src))  # by source node, then id
        self._out_lid = order.astype(np.int64)
        self._out_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(t.link_src, minlength=n), out=self._out_ptr[1:])
        self._expand = t.kind_codes != 0  # switches and routers pass traffic through
        # one Python int object per link id, shared by every route tuple
        self._lid_obj = np.array([l.id for l in t.links], dtype=object)
        self._small: tuple | None = None  # adjacency for the pure-Python search (lazy)

    # ------------------------------------------------------------------ search
    def _search(self, src_rank: int, target: int | None = None) -> _Dag:
        """Level-synchronous BFS from ``src_rank`` (hops, then integer alpha) and its DAG.

        With a ``target`` node, other compute nodes are skipped and the search stops after the
        target's level: the DAG is then exact for the target (its predecessors all lie on lower,
        complete levels, and compute nodes are never expanded anyway), not for other nodes.
        """
        t = self.topology
        if not 0 <= src_rank < t.num_ranks:
            raise CollsynthError(
                f"rank {src_rank} out of range (topology {t.name!r} has {t.num_ranks} ranks)"
            )
        n = self._n
        source = t.node_of_rank(src_rank)
        out_ptr, out_lid = self._out_ptr, self._out_lid
        link_src, link_dst, aq = self._link_src, self._link_dst, self._aq
        level = np.full(n, -1, dtype=np.int64)
        dist = np.zeros(n, dtype=np.int64)
        owner = np.zeros(n, dtype=np.int64)
        level[source] = 0
        frontier = np.array([source], dtype=np.int64)
        tight: list[np.ndarray] = []
        lev = 0
        while frontier.size:
            lo = out_ptr[frontier]
            cnt = out_ptr[frontier + 1] - lo
            total = int(cnt.sum())
            if not total:
                break
            if frontier.size == 1:
                lids = out_lid[int(lo[0]) : int(lo[0]) + total]
            else:
                starts = np.cumsum(cnt) - cnt
                lids = out_lid[np.repeat(lo - starts, cnt) + np.arange(total)]
            v = link_dst[lids]
            fresh = level[v] < 0
            if target is not None:
                fresh &= self._expand[v] | (v == target)
            if not fresh.all():
                lids = lids[fresh]
                v = v[fresh]
            if not lids.size:
                break
            cand = dist[link_src[lids]] + aq[lids]
            lev += 1
            level[v] = lev
            dist[v] = _I64_MAX
            np.minimum.at(dist, v, cand)
            keep = cand == dist[v]
            tight.append(lids[keep] if not keep.all() else lids)
            if target is not None and level[target] >= 0:
                break
            # next frontier: the reached switches/routers, each once (order is irrelevant)
            fv = v[self._expand[v]]
            if fv.size > 1:
                idx = np.arange(fv.size)
                owner[fv] = idx  # one index per node wins
                fv = fv[owner[fv] == idx]
            frontier = fv
        if tight:
            pl = np.concatenate(tight)
            pd = link_dst[pl]
            order = np.lexsort((pl, pd))  # by node, then link id
            pl = pl[order]
            counts = np.bincount(pd, minlength=n)
        else:
            pl = np.zeros(0, dtype=np.int64)
            counts = np.zeros(n, dtype=np.int64)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        return _Dag(src_rank, source, level, ptr, pl)

    def _small_search(
        self, src_rank: int, dst_rank: int, source: int, target: int
    ) -> tuple[int, ...] | None | Literal[False]:
        """Pure-Python targeted search (same rule) for small neighbourhoods.

        Returns the route, None if there is none, or False when it would relax more than
        ``_SMALL_BUDGET`` links (the numpy search takes over).
        """
        if self._small is None:
            t = self.topology
            expand = self._expand.tolist()
            fabric: list[list[int]] = [[] for _ in range(self._n)]
            to_comp: list[dict[int, list[int]]] = [{} for _ in range(self._n)]
            for l in t.links:
                if expand[l.dst]:
                    fabric[l.src].append(l.id)
                else:
                    to_comp[l.src].setdefault(l.dst, []).append(l.id)
            self._small = (
                fabric,
                to_comp,
                self._aq.tolist(),
                t.link_src.tolist(),
                t.link_dst.tolist(),
            )
        fabric, to_comp, aq, lsrc, ldst = self._small
        dist = {source: 0}
        pred: dict[int, list[int]] = {}
        frontier = [source]
        work = 0
        while frontier:
            cand: dict[int, list] = {}
            for u in frontier:
                du = dist[u]
                out = fabric[u]
                hit = to_comp[u].get(target)
                work += len(out) + (len(hit) if hit else 0)
                if work > _SMALL_BUDGET:
                    return False
                for lids in (out, hit or ()):
                    for lid in lids:
                        v = ldst[lid]
                        if v in dist:
                            continue
                        c = du + aq[lid]
                        e = cand.get(v)
                        if e is None or c < e[0]:
                            cand[v] = [c, [lid]]
                        elif c == e[0]:
                            e[1].append(lid)
            if not cand:
                return None
            for v, (c, lids) in cand.items():
                dist[v] = c
                pred[v] = lids
            if target in cand:
                break
            frontier = list(cand)  # only switches/routers: the target ends the search
        path = []
        x = target
        while x != source:
            lids = pred[x]
            if len(lids) > 1:
                lids = sorted(lids)
                lid = lids[_ecmp_hash_int(src_rank, dst_rank, x) % len(lids)]
            else:
                lid = lids[0]
            path.append(lid)
            x = lsrc[lid]
        return tuple(reversed(path))

    def _trace(self, dag: _Dag, dnodes: np.ndarray) -> np.ndarray:
        """Routes to compute nodes ``dnodes`` (all reached) as rows of a (D, max level) array."""
        level = dag.level[dnodes]
        width = int(level.max()) if level.size else 0
        paths = np.full((len(dnodes), width), -1, dtype=np.int64)
        cur = dnodes.astype(np.int64, copy=True)
        dranks = self.topology.rank_of_node[dnodes]
        act = np.arange(len(dnodes))
        link_src = self._link_src
        for step in range(width):
            if step:
                act = act[level[act] > step]
            x = cur[act]
            k = dag.npred[x]
            pos = dag.pred_ptr[x]
            multi = k > 1
            if multi.any():
                h = ecmp_hash(dag.src_rank, dranks[act[multi]], x[multi])
                pos = pos.copy()
                pos[multi] += (h % k[multi].astype(np.uint64)).astype(np.int64)
            lid = dag.pred_lid[pos]
            paths[act, level[act] - 1 - step] = lid
            cur[act] = link_src[lid]
        return paths

    # ------------------------------------------------------------------ public API
    def direct(self, src_rank: int) -> dict[int, tuple[int, ...]]:
        """Best route from ``src_rank`` to every rank reachable through non-compute nodes only.

        Keys are destination ranks in increasing order; the dict is cached (do not modify it).
        """
        cached = self._cache.get(src_rank)
        if cached is not None:
            return cached
        t = self.topology
        dag = self._search(src_rank)
        comp = t.compute_nodes
        dnodes = comp[(dag.level[comp] > 0)]
        routes: dict[int, tuple[int, ...]] = {}
        if dnodes.size:
            paths = self._trace(dag, dnodes)
            lens = dag.level[dnodes]
            by_len = np.argsort(lens, kind="stable")
            tuples: list[tuple[int, ...]] = []
            sl = lens[by_len]
            bounds = np.flatnonzero(np.diff(sl)) + 1
            for rows in np.split(by_len, bounds):
                width = int(lens[rows[0]])
                block = self._lid_obj[paths[rows, :width]]
                tuples.extend(zip(*(block[:, j].tolist() for j in range(width))))
            # back to rank order
            inv = np.empty(len(by_len), dtype=np.int64)
            inv[by_len] = np.arange(len(by_len))
            ordered = itemgetter(*inv.tolist())(tuples) if len(tuples) > 1 else tuple(tuples)
            routes = dict(zip(t.rank_of_node[dnodes].tolist(), ordered))
        self._cache[src_rank] = routes
        return routes

    def find(self, src_rank: int, dst_rank: int) -> tuple[int, ...] | None:
        """The best route ``src_rank -> dst_rank``, or None if there is none (cached).

        The first few look-ups from a source run a search toward the destination only; later
        ones build the source's :meth:`direct` row. Either way the route is ``direct``'s.
        """
        t = self.topology
        for rank in (src_rank, dst_rank):
            if not 0 <= rank < t.num_ranks:
                raise CollsynthError(
                    f"rank {rank} out of range (topology {t.name!r} has {t.num_ranks} ranks)"
                )
        row = self._cache.get(src_rank)
        if row is not None:
            return row.get(dst_rank)
        key = (src_rank, dst_rank)
        if key in self._pair:
            return self._pair[key]
        count = self._lookups.get(src_rank, 0) + 1
        self._lookups[src_rank] = count
        if count > _TARGETED:  # many look-ups from this source: build its row once
            return self.direct(src_rank).get(dst_rank)
        target = t.node_of_rank(dst_rank)
        r: tuple[int, ...] | None = None
        if src_rank != dst_rank:
            found = self._small_search(src_rank, dst_rank, t.node_of_rank(src_rank), target)
            if found is not False:
                r = found
            else:
                dag = self._search(src_rank, target)
                if dag.level[target] > 0:
                    lids = self._trace(dag, np.array([target], dtype=np.int64))[0]
                    r = tuple(self._lid_obj[lids].tolist())
        self._pair[key] = r
        return r

    def route(self, src_rank: int, dst_rank: int) -> tuple[int, ...]:
        """Best direct route ``src_rank -> dst_rank`` (CollsynthError if there is none)."""
        r = self.find(src_rank, dst_rank)
        if r is None:
            t = self.topology
            raise CollsynthError(
                f"no route from {t.rank_name(src_rank)} to {t.rank_name(dst_rank)} "
                f"through switches/routers only"
            )
        return r

    def has_route(self, src_rank: int, dst_rank: int) -> bool:
        return self.find(src_rank, dst_rank) is not None

    def route_alpha(self, route: tuple[int, ...]) -> float:
        return float(sum(self.topology.links[l].alpha for l in route))

    def route_bw(self, route: tuple[int, ...]) -> float:
        return float(min(self.topology.links[l].bw for l in route))
