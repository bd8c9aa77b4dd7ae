"""Takahashi–Matsuyama Steiner trees on the implicit time-expanded graph of MTEGCCA (Liu Fei,
Wang Peng, Ma Han, Li Ye and Li Hongyan, "Collective communication scheduling algorithm based on
multicast time-expanded graph", Journal on Communications 2026,
doi:10.11959/j.issn.1000-436x.2026062), §2.2 step 3.

TM grows a tree from the root ``s_0`` by repeatedly attaching the unreached terminal nearest to
the tree along a shortest path. In a time-expanded graph "nearest" is *earliest arrival*: every
rank already in the tree holds the chunk from some slot ``h`` and may send it at any slot
``t >= h`` (storage edges), so the distance from the tree is a multi-source earliest-arrival
search over ``(rank, slot)`` states. Arrival is FIFO (leaving later never arrives earlier), so
Dijkstra on ranks with labels "earliest slot holding the chunk" is exact.

Two equivalent implementations (the tests check that they agree):

* :meth:`Planner._multicast` — the general case (a subset of destinations: other ranks may relay
  on the way): one search per attached terminal, stopping at the first unreached terminal.
* :meth:`Planner._broadcast` — every other rank is a terminal, so the nearest terminal is always
  one transmission edge away from the tree and TM becomes a Prim-like growth: one heap of
  candidate edges leaving the tree, each re-validated lazily when popped (its departure can only
  move later as slots are taken), ``O(E log E)`` per broadcast instead of one search per terminal.

Ties are broken by (arrival slot, receiving rank, sending rank, edge id): deterministic.
With ``nearest=cost`` the distance is the paper's edge cost of what a path adds to the tree
(transmission ``L`` plus storage slots not yet in it), ties by arrival and then as above.
Negotiated re-planning (``negotiation.negotiate_plan``, not in the paper) adds a per-(chunk,
edge) penalty to the key of the full-broadcast paths (Prim-like and concurrent), and the
link-time price
(``algo`` option ``price``, not in the paper) ``price x`` the link time (slots) the edge's
transfer holds; bookings are unaffected.

Departure from the paper: the paper removes a finished tree's edges from ``G_M`` only after the
whole tree is built (step 4). Here the (link, slot) resources of each path are taken as soon as
the path joins the tree: two paths of the same tree may otherwise share a link at the same slot
(routes through a switch share its links), which the paper's per-edge removal would not notice.
"""

from __future__ import annotations

import heapq

import numpy as np

from ...errors import CollsynthError
from .model import MAX_SLOTS, Occupancy, SlotGraph


class Planner:
    """Routes multicast tasks one after another on a shared residual MTEG."""

    def __init__(
        self,
        graph: SlotGraph,
        horizon: int | None = None,
        nearest: str = "arrival",
        penalty: dict[int, dict[int, float]] | None = None,
        price: float = 0.0,
    ):
        if nearest not in ("arrival", "cost"):
            raise CollsynthError(f"mteg: nearest={nearest!r} is not arrival or cost")
        self.graph = graph
        self.cost = nearest == "cost"
        # negotiation (negotiation.negotiate_plan): extra key, in slots, of edge e in chunk c's
        # broadcast tree, ``penalty[c][e]``; it changes which candidate edge a tree takes, never the
        # slots a transfer books
        self.penalty = penalty or {}
        # link-time price (algo ``price``, not in the paper): extra key, in slots, of every edge
        # of a full broadcast: ``price`` x the link time (slots) a transfer over it holds
        self.price = float(price)
        self.e_price = [self.price * b for b in graph.e_busy] if self.price > 0 else None
        self.occupancy = Occupancy(len(graph.topology.links), graph.min_width)
        longest = max(graph.e_len) if graph.e_len else 1
        self.horizon = int(horizon) if horizon is not None else 4 * longest
        self.initial_horizon = self.horizon
        self.growths = 0
        # the plan: one entry per transmission (an IR operation)
        self.op_chunk: list[int] = []
        self.op_edge: list[int] = []
        self.op_slot: list[int] = []
        self.op_parent: list[int] = []
        # switch multicast (``graph.multicast``): the transfer whose stream an op continues
        # at a switch (-1: none), the route hops it shares with it (booked by that one), the
        # windows the op itself booked, and its multicast group (-1: none)
        self.op_lead: list[int] = []
        self.op_shared: list[int] = []
        self.op_occ: list[tuple] = []
        self.op_group: list[int] = []
        self.groups = 0
        self.finish = 0  # latest arrival slot

    # ------------------------------------------------------------------ helpers
    def _grow(self, needed: int) -> None:
        """The current task cannot finish inside the horizon: double it until it fits."""
        while self.horizon < needed:
            if self.horizon >= MAX_SLOTS:
                raise CollsynthError(f"mteg: horizon exceeds {MAX_SLOTS} slots (slot too short?)")
            self.horizon *= 2
            self.growths += 1

    def _record(
        self,
        chunk: int,
        edge: int,
        slot: int,
        parent: int,
        arrival: int,
        lead: int = -1,
        shared: int = 0,
    ) -> int:
        """Book and record a transfer; with ``lead``, a branch of transfer ``lead``'s stream at
        a switch that multicasts, sharing (and not booking) its first ``shared`` hops, in its
        multicast group."""
        occ = self.graph.e_occ[edge][shared:]
        self.occupancy.book(occ, slot)
        group = -1
        if lead >= 0:
            if self.op_group[lead] < 0:
                self.op_group[lead] = self.groups
                self.groups += 1
            group = self.op_group[lead]
        self.op_chunk.append(chunk)
        self.op_edge.append(edge)
        self.op_slot.append(slot)
        self.op_parent.append(parent)
        self.op_lead.append(lead)
        self.op_shared.append(shared)
        self.op_occ.append(occ)
        self.op_group.append(group)
        if arrival > self.finish:
            self.finish = arrival
        return len(self.op_chunk) - 1

    def _branches(self, op: int, unreached) -> list[tuple[int, int, int, int, int, int]]:
        """Where op's stream may continue from a switch that multicasts, to a rank
        ``unreached(v)``: ``(arrival, v, edge, departure, lead, shared)`` (same departure, the
        rest of the route must be free then; checked again when taken)."""
        g = self.graph
        e = self.op_edge[op]
        if not g.e_branch[e]:
            return []
        t = self.op_slot[op]
        out = []
        for shared, pid in g.e_branch[e]:
            if self.op_lead[op] >= 0 and shared <= self.op_shared[op]:
                continue  # (its lead offered these when it was booked)
            for e2 in g.prefix_edges[pid]:
                v = g.e_dst[e2]
                if e2 != e and unreached(v) and self.occupancy.free_at(g.e_occ[e2][shared:], t):
                    out.append((t + g.e_len[e2], v, e2, t, op, shared))
        return out

    def _extra(self, chunk: int):
        """The key added to edge ``e`` in chunk ``chunk``'s broadcast tree (link-time price
        plus negotiation penalty) as a function of ``e``, or None when there is none."""
        pen = self.penalty.get(chunk)
        ep = self.e_price
        if pen:
            pget = pen.get
            if ep is None:
                return lambda e: pget(e, 0.0)
            return lambda e: ep[e] + pget(e, 0.0)
        if ep is None:
            return None
        return ep.__getitem__

    def _unreachable(self, chunk: int, src: int, missing) -> CollsynthError:
        t = self.graph.topology
        r = min(missing)
        return CollsynthError(
            f"mteg: chunk {chunk} cannot reach {t.rank_name(r)} from "
            f"{t.rank_name(src)} (no path of GPU-to-GPU routes)"
        )

    # ------------------------------------------------------------------ tasks
    def route(self, chunk: int, src: int, dests, *, general: bool = False) -> None:
        """Attach every rank of ``dests`` to a tree rooted at ``src``'s slot-0 vertex."""
        dests = sorted(set(int(d) for d in dests) - {src})
        if not dests:
            return
        if not general and len(dests) == self.graph.n - 1:
            if self.cost:
                self._broadcast_cost(chunk, src)
            else:
                self._broadcast(chunk, src)
        else:
            self._multicast(chunk, src, dests)

    def _broadcast(self, chunk: int, src: int) -> None:
        g, occ = self.graph, self.occupancy
        e_dst, e_len, e_occ, out = g.e_dst, g.e_len, g.e_occ, g.out
        earliest = occ.earliest
        hold = [-1] * g.n
        via = [-1] * g.n
        hold[src] = 0
        heap: list[tuple[float, int, int, int, int, int, int]] = []
        push = heapq.heappush
        pop = heapq.heappop
        pget = self._extra(chunk)

        def expand(u: int) -> None:
            h = hold[u]
            for e in out[u]:
                v = e_dst[e]
                if hold[v] < 0:
                    t = earliest(e_occ[e], h)
                    k = t + e_len[e]
                    push(heap, (k if pget is None else k + pget(e), v, u, e, t, -1, 0))

        def unreached(v: int) -> bool:
            return hold[v] < 0

        expand(src)
        left = g.n - 1
        while left:
            if not heap:
                raise self._unreachable(chunk, src, [r for r in range(g.n) if hold[r] < 0])
            _k, v, u, e, t, lead, shared = pop(heap)
            if hold[v] >= 0:
                continue
            if lead >= 0:  # a branch of a stream: now or never
                if not occ.free_at(e_occ[e][shared:], t):
                    continue
            else:
                t2 = earliest(e_occ[e], hold[u])
                if t2 != t:  # its slots were taken meanwhile: re-queue
                    k = t2 + e_len[e]
                    push(heap, (k if pget is None else k + pget(e), v, u, e, t2, -1, 0))
                    continue
            arr = t + e_len[e]
            if arr > self.horizon:
                self._grow(arr)
            op = self._record(chunk, e, t, via[u], arr, lead, shared)
            via[v] = op
            hold[v] = arr
            left -= 1
            expand(v)
            for a, w, e2, t3, ld, sh in self._branches(op, unreached):
                push(heap, (a, w, u, e2, t3, ld, sh))

    def _broadcast_cost(self, chunk: int, src: int) -> None:
        """:meth:`_broadcast` with the paper's TEG edge cost as the distance (``nearest=cost``).

        The tree holds, at rank ``u``, the vertices ``u_h .. u_last`` (arrival, then the storage
        edges up to its latest departure so far), so leaving ``u`` at slot ``t`` costs
        ``L + max(0, t - last_u)``: transmission plus the storage edges not yet in the tree.
        Candidates are keyed (cost, arrival, receiver, sender, edge); a key can drop when
        ``last_u`` grows, so ``u``'s candidates are then queued again, and an entry is accepted
        only when its stored key is still exact.
        """
        g, occ = self.graph, self.occupancy
        e_dst, e_len, e_occ, out = g.e_dst, g.e_len, g.e_occ, g.out
        earliest = occ.earliest
        hold = [-1] * g.n
        last = [-1] * g.n
        via = [-1] * g.n
        hold[src] = last[src] = 0
        heap: list[tuple[float, int, int, int, int, int, int, int]] = []
        push = heapq.heappush
        pop = heapq.heappop
        extra = self._extra(chunk)
        pget = extra if extra is not None else (lambda _e: 0)

        def expand(u: int) -> None:
            h, lu = hold[u], last[u]
            for e in out[u]:
                v = e_dst[e]
                if hold[v] < 0:
                    t = earliest(e_occ[e], h)
                    ln = e_len[e]
                    c = ln + (t - lu if t > lu else 0) + pget(e)
                    push(heap, (c, t + ln, v, u, e, t, -1, 0))

        def unreached(v: int) -> bool:
            return hold[v] < 0

        expand(src)
        left = g.n - 1
        while left:
            if not heap:
                raise self._unreachable(chunk, src, [r for r in range(g.n) if hold[r] < 0])
            c, arr, v, u, e, t, lead, shared = pop(heap)
            if hold[v] >= 0:
                continue
            if lead >= 0:  # a branch of a stream: now or never (it adds only its own hops)
                if not occ.free_at(e_occ[e][shared:], t):
                    continue
            else:
                t2 = earliest(e_occ[e], hold[u])
                ln = e_len[e]
                c2 = ln + (t2 - last[u] if t2 > last[u] else 0) + pget(e)
                if (c2, t2) != (c, t):
                    push(heap, (c2, t2 + ln, v, u, e, t2, -1, 0))
                    continue
            if arr > self.horizon:
                self._grow(arr)
            op = self._record(chunk, e, t, via[u], arr, lead, shared)
            via[v] = op
            hold[v] = last[v] = arr
            left -= 1
            if t > last[u]:
                last[u] = t
                expand(u)
            expand(v)
            for a, w, e2, t3, ld, sh in self._branches(op, unreached):
                push(heap, (e_len[e2], a, w, u, e2, t3, ld, sh))

    def route_concurrent(self, tasks) -> None:
        """Grow the trees of several full broadcasts together (option ``trees=concurrent``).

        Instead of finishing one tree before starting the next (the paper's steps 3–5), one heap
        holds the candidate edges of every tree and the globally nearest one is attached first
        (ties: the task's planning order). Each tree is still TM's (a broadcast reaches its
        nearest terminal first); only the interleaving of the trees differs. ``tasks`` are
        ``(chunk, source)`` pairs in planning order.
        """
        g, occ = self.graph, self.occupancy
        e_dst, e_len, e_occ, out = g.e_dst, g.e_len, g.e_occ, g.out
        earliest = occ.earliest
        cost = self.cost
        n = g.n
        hold = [[-1] * n for _ in tasks]
        last = [[-1] * n for _ in tasks]
        via = [[-1] * n for _ in tasks]
        heap: list[tuple[float, int, int, int, int, int, int, int, int]] = []
        push = heapq.heappush
        pop = heapq.heappop

        pens = [self._extra(chunk) for chunk, _src in tasks]

        def key(k: int, u: int, e: int, t: int) -> float:
            """Primary key: arrival, or with ``nearest=cost`` the paper's edge cost (plus the
            link-time price and the negotiation penalty of the edge in tree ``k``, if any)."""
            p = pens[k](e) if pens[k] is not None else 0
            if cost:
                lu = last[k][u]
                return e_len[e] + (t - lu if t > lu else 0) + p
            return t + e_len[e] + p

        def expand(k: int, u: int) -> None:
            hk = hold[k]
            h = hk[u]
            for e in out[u]:
                v = e_dst[e]
                if hk[v] < 0:
                    t = earliest(e_occ[e], h)
                    push(heap, (key(k, u, e, t), t + e_len[e], k, v, u, e, t, -1, 0))

        for k, (_chunk, src) in enumerate(tasks):
            hold[k][src] = last[k][src] = 0
            expand(k, src)
        left = len(tasks) * (n - 1)
        while left:
            if not heap:
                k = next(i for i in range(len(tasks)) if min(hold[i]) < 0)
                raise self._unreachable(
                    tasks[k][0], tasks[k][1], [r for r in range(n) if hold[k][r] < 0]
                )
            c, arr, k, v, u, e, t, lead, shared = pop(heap)
            hk = hold[k]
            if hk[v] >= 0:
                continue
            if lead >= 0:  # a branch of a stream: now or never
                if not occ.free_at(e_occ[e][shared:], t):
                    continue
            else:
                t2 = earliest(e_occ[e], hk[u])
                c2 = key(k, u, e, t2)
                if (c2, t2) != (c, t):
                    push(heap, (c2, t2 + e_len[e], k, v, u, e, t2, -1, 0))
                    continue
            if arr > self.horizon:
                self._grow(arr)
            op = self._record(tasks[k][0], e, t, via[k][u], arr, lead, shared)
            via[k][v] = op
            hk[v] = last[k][v] = arr
            left -= 1
            if cost and t > last[k][u]:
                last[k][u] = t
                expand(k, u)
            expand(k, v)
            for a, w, e2, t3, ld, sh in self._branches(op, lambda x: hk[x] < 0):
                push(heap, (e_len[e2] if cost else a, a, k, w, u, e2, t3, ld, sh))

    def _multicast(self, chunk: int, src: int, dests: list[int]) -> None:
        hold = {src: 0}
        last = {src: 0}
        via = {src: -1}
        remaining = set(dests)
        while remaining:
            target, best = self._nearest(chunk, src, hold, last, remaining)
            path = []
            v = target
            while v not in hold:
                _c, arr, u, e, t = best[v]
                path.append((u, v, e, t, arr))
                v = u
            for u, v, e, t, arr in reversed(path):
                via[v] = self._record(chunk, e, t, via[u], arr)
                hold[v] = last[v] = arr
                if t > last[u]:
                    last[u] = t  # the storage edges up to t join the tree
                remaining.discard(v)

    def _nearest(self, chunk: int, src: int, hold: dict, last: dict, remaining: set):
        """Multi-source search from the tree to the nearest unreached terminal.

        Returns ``(terminal, best)`` with ``best[v] = (cost, arrival, parent, edge, departure)``.
        The distance is the arrival slot, or with ``nearest=cost`` the paper's TEG edge cost:
        transmission lengths plus the storage edges not yet in the tree (leaving tree rank ``u``
        at ``t`` costs ``max(0, t - last_u)``, waiting at a relay costs every slot waited).
        A* on that distance: the heuristic is the fewest slots to any unreached terminal on the
        empty network (consistent, zero at terminals), so the first terminal popped is nearest;
        at equal keys non-terminals are expanded first, so every parent that reaches it as near
        is considered (ties as in Dijkstra: distance, arrival, node, parent, edge).
        By arrival, arrivals beyond the horizon are pruned, and if that leaves no terminal the
        horizon grows (exact: a pruned path is never the earliest). By cost, a later arrival
        may be nearer, so nothing is pruned; the horizon grows when the chosen path ends past it.
        """
        g, occ = self.graph, self.occupancy
        e_dst, e_len, e_occ, out = g.e_dst, g.e_len, g.e_occ, g.out
        cost = self.cost
        rem = sorted(remaining)
        hrow = g.static_slots[:, rem].min(axis=1)
        if not np.isfinite(hrow[[v for v in hold]]).any():
            raise self._unreachable(chunk, src, remaining)
        heur = [int(x) if np.isfinite(x) else -1 for x in hrow.tolist()]  # -1: no path
        term = remaining
        while True:
            # heap entries: (distance + heuristic, terminal?, distance, arrival, node)
            heap = [
                (heur[v], 0, 0, h, v) if cost else (h + heur[v], 0, h, h, v)
                for v, h in hold.items()
                if heur[v] >= 0
            ]
            heapq.heapify(heap)
            best: dict[int, tuple[int, int, int, int, int]] = {}
            done: set[int] = set()
            pruned = None
            found = None  # distance of the nearest unreached terminal seen so far
            while heap:
                _f, _flag, dist, lab, v = heapq.heappop(heap)
                if v in done:
                    continue
                done.add(v)
                if v not in hold and v in term:
                    if cost and lab > self.horizon:
                        self._grow(lab)  # nearest by cost but beyond the horizon
                    return v, best
                intree = v in hold
                for e in out[v]:
                    w = e_dst[e]
                    hw = heur[w]
                    if hw < 0 or w in hold or w in done:
                        continue
                    ln = e_len[e]
                    if found is not None and (dist if cost else lab) + ln + hw > found:
                        continue  # cannot beat the terminal already seen
                    t = occ.earliest(e_occ[e], lab)
                    a = t + ln
                    if a > self.horizon and not cost:
                        pruned = a if pruned is None else min(pruned, a)
                        continue
                    if cost:
                        lv = last[v] if intree else lab
                        d = dist + ln + (t - lv if t > lv else 0)
                    else:
                        d = a
                    if found is not None and d + hw > found:
                        continue
                    cur = best.get(w)
                    if cur is None or (d, a, v, e) < cur[:4]:
                        best[w] = (d, a, v, e, t)
                        isterm = w in term
                        heapq.heappush(heap, (d + hw, 1 if isterm else 0, d, a, w))
                        if isterm and (found is None or d < found):
                            found = d
            if pruned is None:
                raise self._unreachable(chunk, src, remaining)
            self._grow(pruned)
