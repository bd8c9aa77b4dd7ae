"""The implicit multicast time-expanded graph of MTEGCCA (Liu Fei, Wang Peng, Ma Han, Li Ye and
Li Hongyan, "Collective communication scheduling algorithm based on multicast time-expanded
graph", Journal on Communications 2026, doi:10.11959/j.issn.1000-436x.2026062), §2.1,
Algorithm 1.

The paper builds ``G_M`` explicitly: a vertex ``u_t`` per node and slot, storage edges
``u_t -> u_{t+1}``, transmission edges ``u_t -> v_{t+L(u,v)}`` and virtual terminal vertices
``U_{s,c}`` joined to every ``u_t``. Here nothing of size ``O(|V| H)`` is ever built:

* **vertices** ``(rank, slot)`` exist only as search states. A GPU that holds a chunk from slot
  ``h`` may send it at any slot ``t >= h``: that is the chain of storage edges, collapsed;
* **transmission edges** are per *direct route* between two ranks (a physical GPU-GPU link, every
  parallel link separately, or the :class:`~collsynth.topology.paths.RouteTable` route through
  switches/routers). Their length is the paper's
  ``L = ceil(alpha / tau) + ceil(chunk / (bw * tau))`` with ``alpha`` the route's total latency
  and ``bw`` its bottleneck bandwidth (a single link: exactly the paper's formula);
* **virtual terminals** ``U_{s,c}`` become the test "rank ``v`` still needs chunk ``c``";
* the **residual graph** (edges already used are removed, the paper's step 4) is
  :class:`Occupancy`: per link a sorted list of busy slot intervals. A transmission edge leaving
  at slot ``t`` exists iff every link of its route is free over the slots it occupies.

Which slots a route occupies (cut-through at switches and routers, no storage there): hop ``i``
of a route transmits during ``[t tau + A_i, t tau + A_i + D)`` where ``A_i`` is the alpha of the
hops before it and ``D = chunk / bottleneck bandwidth`` — the verifier's fluid window — so it
occupies the slots ``[t + floor(A_i / tau), t + ceil((A_i + D) / tau))`` of that link.
Propagation does not occupy a link (as in the simulator), so a single link is busy for
``ceil(chunk / (bw tau))`` slots, not for all ``L``; the receiver holds the chunk from
``t + L`` on. Every occupied slot lies inside ``[t, t + L)``.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from ...errors import CollsynthError
from ...topology.model import Topology
from ...topology.paths import RouteTable

#: Values within this many slots of an integer count as that integer when rounding (float noise).
EPS = 1e-9
#: Largest slot number a plan may reach (beyond it the slot is absurdly short for the data).
MAX_SLOTS = 1 << 50


def ceil_slots(x: float) -> int:
    return int(math.ceil(x - EPS))


def floor_slots(x: float) -> int:
    return int(math.floor(x + EPS))


@dataclass(frozen=True)
class Edge:
    """A transmission edge family ``src_t -> dst_{t+length}`` (one per direct route)."""

    id: int
    src: int  # rank
    dst: int  # rank
    route: tuple[int, ...]  # link ids
    length: int  # L in slots
    occ: tuple[tuple[int, float, float], ...]  # (link, offset, width) per hop, slots
    exact_s: float  # alpha + chunk / bottleneck bw: the exact transfer time


class SlotGraph:
    """Slot length, chunk size and the transmission edges of the compute graph.

    ``exact`` (default) keeps each hop's busy window exact (in slot units, as floats): a hop
    with a fractional alpha offset does not waste the rest of a slot. ``exact=False`` rounds
    every window outward to whole slots: the paper's one-transfer-per-(link, slot) resource.
    """

    def __init__(
        self,
        topology: Topology,
        chunk_bytes: float,
        tau: float | None = None,
        exact: bool = True,
        multicast: bool = False,
    ):
        t = topology
        if not (math.isfinite(chunk_bytes) and chunk_bytes > 0):
            raise CollsynthError(f"mteg: chunk size {chunk_bytes!r} must be positive")
        fastest = float(t.link_bw.max())
        if tau is None:
            tau = chunk_bytes / fastest  # the paper's: one chunk on the fastest link
        if not (math.isfinite(tau) and tau > 0):
            raise CollsynthError(f"mteg: slot length {tau!r} must be a positive time")
        self.topology = t
        self.chunk_bytes = float(chunk_bytes)
        self.tau = float(tau)
        self.exact = bool(exact)
        self.n = t.num_ranks
        routes = RouteTable(t)
        edges: list[Edge] = []
        out: list[list[int]] = [[] for _ in range(self.n)]
        rank_of = t.rank_of_node
        for u in range(self.n):
            node = t.node_of_rank(u)
            cand: list[tuple[int, tuple[int, ...]]] = []
            # every physical link to a GPU (parallel links are separate edges)
            for lid in t.out_links[node]:
                v = int(rank_of[t.links[lid].dst])
                if v >= 0:
                    cand.append((v, (lid,)))
            # routes through switches/routers
            for v, route in routes.direct(u).items():
                if len(route) > 1:
                    cand.append((v, route))
            cand.sort()
            for v, route in cand:
                e = self._make_edge(len(edges), u, v, route)
                edges.append(e)
                out[u].append(e.id)
        self.edges = edges
        self.out = [tuple(x) for x in out]
        # hot-loop views
        self.e_dst = [e.dst for e in edges]
        self.e_len = [e.length for e in edges]
        self.e_occ = [e.occ for e in edges]
        # link time a transfer over the edge holds, in slots (sum of its hops' windows): what
        # ``price`` (option of :mod:`.algo`) charges per unit
        self.e_busy = [sum(w for _l, _a, w in e.occ) for e in edges]
        self._static: np.ndarray | None = None
        self._hops: list[tuple[tuple[int, float, float, float], ...]] | None = None
        widths = [math.inf] * len(t.links)
        for e in edges:
            for l, _a, w in e.occ:
                if w < widths[l]:
                    widths[l] = w
        self.min_width = [w if math.isfinite(w) else 0.0 for w in widths]
        self.multicast = bool(multicast) and bool(t.multicast_nodes.any())
        self._branch_tables()

    def _branch_tables(self) -> None:
        """Where a transfer may part at a switch that multicasts (``multicast`` graphs only):
        ``e_branch[e]`` lists ``(hops shared, prefix id)`` for every such switch edge ``e``'s
        route enters before its last link, and ``prefix_edges[id]`` the edges sharing that
        prefix (same sender, same links, same busy windows up to the switch): a stream over the
        prefix at slot ``t`` reaches each of their destinations by booking only the rest."""
        t = self.topology
        ids: dict[tuple, int] = {}
        members: list[list[int]] = []
        per_edge: list[tuple[tuple[int, int], ...]] = []
        mc = t.multicast_nodes
        for e in self.edges:
            pts = []
            if self.multicast:
                for k in range(len(e.route) - 1):
                    if mc[int(t.link_dst[e.route[k]])]:
                        key = (e.src, e.route[: k + 1], e.occ[: k + 1])
                        pid = ids.setdefault(key, len(ids))
                        if pid == len(members):
                            members.append([])
                        members[pid].append(e.id)
                        pts.append((k + 1, pid))
            per_edge.append(tuple(pts))
        self.e_branch = per_edge
        self.prefix_edges = [tuple(m) for m in members]

    @property
    def e_hops(self) -> list[tuple[tuple[int, float, float, float], ...]]:
        """Per edge, per hop ``(link, alpha, chunk / bw, alpha from this hop to the end)`` in
        seconds: the exact (unslotted) timing of a transfer, for :func:`.plans.asap_seconds`."""
        if self._hops is None:
            t = self.topology
            out = []
            for e in self.edges:
                alphas = [float(t.link_alpha[l]) for l in e.route]
                tails = [sum(alphas[i:]) for i in range(len(alphas))]
                out.append(
                    tuple(
                        (int(l), a, self.chunk_bytes / float(t.link_bw[l]), tl)
                        for l, a, tl in zip(e.route, alphas, tails)
                    )
                )
            self._hops = out
        return self._hops

    @property
    def static_slots(self) -> np.ndarray:
        """``[u, v]``: fewest slots from rank u to rank v on an empty network (inf: no path).

        A lower bound on any arrival through the residual graph (bookings only delay
        departures), used as the A* heuristic of the multicast search.
        """
        if self._static is None:
            from scipy.sparse import coo_matrix
            from scipy.sparse.csgraph import shortest_path

            n = self.n
            best: dict[tuple[int, int], int] = {}
            for e in self.edges:
                k = (e.src, e.dst)
                if k not in best or e.length < best[k]:
                    best[k] = e.length
            if best:
                rows, cols = zip(*best)
                w = coo_matrix(
                    (
                        np.array(list(best.values()), dtype=np.float64),
                        (np.array(rows), np.array(cols)),
                    ),
                    shape=(n, n),
                ).tocsr()
                self._static = shortest_path(w, method="D", directed=True)
            else:
                self._static = np.full((n, n), np.inf)
                np.fill_diagonal(self._static, 0.0)
        return self._static

    def _make_edge(self, eid: int, u: int, v: int, route: tuple[int, ...]) -> Edge:
        t, tau = self.topology, self.tau
        alphas = [float(t.link_alpha[l]) for l in route]
        dur = self.chunk_bytes / min(float(t.link_bw[l]) for l in route)
        total_alpha = sum(alphas)
        length = ceil_slots(total_alpha / tau) + ceil_slots(dur / tau)
        if length > MAX_SLOTS // 4:
            raise CollsynthError(
                f"mteg: slot length {tau:.3g}s is too short for this topology "
                f"and size (one transfer would take {length} slots)"
            )
        occ = []
        before = 0.0
        for l, a in zip(route, alphas):
            first, last = before / tau, (before + dur) / tau
            if not self.exact:
                first, last = (
                    float(floor_slots(first)),
                    float(max(ceil_slots(last), floor_slots(first) + 1)),
                )
            occ.append((int(l), first, last - first))
            length = max(length, ceil_slots(last))  # float noise only: inside [t, t + L)
            before += a
        return Edge(eid, u, v, tuple(route), length, tuple(occ), total_alpha + dur)


class Occupancy:
    """Residual link capacity: per link, sorted disjoint busy windows ``[s, e)`` in slot units.

    Windows closer than ``EPS`` slots count as touching (float noise), and touching windows are
    merged, as are windows separated by a gap too narrow for any transfer over the link.
    Departures are whole slots.
    """

    def __init__(self, num_links: int, min_width: list[float] | None = None):
        self.starts: list[list[float]] = [[] for _ in range(num_links)]
        self.ends: list[list[float]] = [[] for _ in range(num_links)]
        # a free gap narrower than every window that may use the link can never be used: it is
        # merged into its neighbours, which keeps the calendars short (``fit`` walks them)
        self.min_width = list(min_width) if min_width is not None else [0.0] * num_links

    def fit(self, link: int, x: float, width: float) -> float:
        """Earliest ``s >= x`` with ``[s, s + width)`` free on ``link``."""
        st, en = self.starts[link], self.ends[link]
        i = bisect_right(en, x + EPS)
        n = len(st)
        lim = width - EPS
        while i < n and st[i] < x + lim:
            x = en[i]
            i += 1
        return x

    def earliest(self, occ: tuple[tuple[int, float, float], ...], h: int) -> int:
        """Earliest departure slot ``t >= h`` at which every hop of ``occ`` is free."""
        t = h
        moved = True
        while moved:
            moved = False
            for l, a, w in occ:
                x = t + a
                s = self.fit(l, x, w)
                if s > x + EPS:
                    t = int(math.ceil(s - a - EPS))
                    moved = True
        return t

    def free_at(self, occ: tuple[tuple[int, float, float], ...], t: int) -> bool:
        """Whether every hop of ``occ`` is free when leaving at slot ``t`` exactly."""
        return all(self.fit(l, t + a, w) <= t + a + EPS for l, a, w in occ)

    def book(self, occ: tuple[tuple[int, float, float], ...], t: int) -> None:
        for l, a, w in occ:
            self._insert(l, t + a, t + a + w)

    def _insert(self, link: int, s: float, e: float) -> None:
        st, en = self.starts[link], self.ends[link]
        i = bisect_left(st, s)
        if (i > 0 and en[i - 1] > s + EPS) or (i < len(st) and st[i] < e - EPS):
            raise AssertionError(f"mteg: slot conflict on link {link} at [{s}, {e})")
        useless = max(self.min_width[link] - EPS, EPS)
        join_prev = i > 0 and s - en[i - 1] < useless
        join_next = i < len(st) and st[i] - e < useless
        if join_prev and join_next:
            en[i - 1] = en[i]
            del st[i], en[i]
        elif join_prev:
            en[i - 1] = e
        elif join_next:
            st[i] = s
        else:
            st.insert(i, s)
            en.insert(i, e)

    def busy(self, link: int) -> float:
        """Busy slots on ``link``."""
        return sum(e - s for s, e in zip(self.starts[link], self.ends[link]))
