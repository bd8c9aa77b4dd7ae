"""SCALE-CCL planner: event loop, Load-Aware Neighbor Forwarding, Subchunk Scheduling, IR."""

from __future__ import annotations

import heapq
import math
import time as _time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...collective import CollKind, Collective
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ..options import int_option, size_option
from .stats import LinkStats

#: Data size planned for when none is given.
DEFAULT_SIZE = float(1 << 20)
#: Default number of subchunks per chunk.
DEFAULT_SUBCHUNKS = 1
#: Collectives planned: every chunk travels from one source to its destinations.
SUPPORTED = {CollKind.ALLGATHER, CollKind.BROADCAST, CollKind.CUSTOM}

# event types (seed 000 §4.1), in processing order for co-timed events
TX_END, RX_END, TX_START, RX_START = 0, 1, 2, 3
EVENT_NAMES = {TX_START: "transmission start", TX_END: "transmission completion",
               RX_START: "reception start", RX_END: "reception completion"}

ANY = "any"   # a refusal that any router link freeing may lift

#: LWNF weights: f = link term + W_QUEUE * buffer term + W_PROGRESS * progress term (seconds).
W_QUEUE = 1.0
W_PROGRESS = 1.0


class _Net:
    """Static structure of a topology as SCALE-CCL sees it."""

    def __init__(self, t: Topology):
        self.t = t
        n = t.num_ranks
        self.n = n
        kinds = t.kind_codes
        self.is_gpu = kinds == 0
        rank_of = t.rank_of_node
        self.rank_of = rank_of
        links = t.links
        # domains: connected components of the GPU-only graph (a datacenter in ``wan``)
        parent = list(range(n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for l in links:
            if self.is_gpu[l.src] and self.is_gpu[l.dst]:
                a, b = find(int(rank_of[l.src])), find(int(rank_of[l.dst]))
                if a != b:
                    parent[max(a, b)] = min(a, b)
        roots = sorted({find(r) for r in range(n)})
        dom_id = {r: i for i, r in enumerate(roots)}
        self.dom = np.array([dom_id[find(r)] for r in range(n)], dtype=np.int64)
        self.ndom = len(roots)
        # GPU out-links per rank; GPU in-links (from GPUs) per node
        self.gpu_out = [list(t.out_links[int(node)]) for node in t.compute_nodes]
        # for every node: in-links whose source is a GPU (the predecessor set's queues)
        self.gpu_in = [[lid for lid in t.in_links[x] if self.is_gpu[links[lid].src]]
                       for x in range(t.num_nodes)]
        # non-GPU nodes: domains reachable through non-GPU nodes, and the least alpha to
        # enter each of them (Dijkstra over switch/router links, then one link into a GPU)
        big = math.inf
        self.enter = np.full((t.num_nodes, self.ndom), big)
        net_nodes = np.flatnonzero(~self.is_gpu)
        for x in net_nodes.tolist():
            dist = {x: 0.0}
            heap = [(0.0, x)]
            done = set()
            while heap:
                d, u = heapq.heappop(heap)
                if u in done:
                    continue
                done.add(u)
                for lid in t.out_links[u]:
                    l = links[lid]
                    v = l.dst
                    nd = d + l.alpha
                    if self.is_gpu[v]:
                        k = int(self.dom[rank_of[v]])
                        if nd < self.enter[x, k]:
                            self.enter[x, k] = nd
                    elif nd < dist.get(v, big):
                        dist[v] = nd
                        heapq.heappush(heap, (nd, v))
        self.reach = np.isfinite(self.enter)


@dataclass
class Plan:
    """The planner's output before lowering: one record per operation."""

    topology: Topology
    collective: Collective
    subchunks: int
    size: float
    op_src: list[int] = field(default_factory=list)
    op_dst: list[int] = field(default_factory=list)
    op_sub: list[int] = field(default_factory=list)
    op_route: list[tuple[int, ...]] = field(default_factory=list)
    op_start: list[float] = field(default_factory=list)
    op_finish: list[float] = field(default_factory=list)
    op_dep: list[int] = field(default_factory=list)
    events: dict = field(default_factory=dict)
    decisions: dict = field(default_factory=dict)
    plan_s: float = 0.0
    wall_s: float = 0.0


class Planner:
    """The time- and event-driven loop of seed 000 §4.1 on one topology.

    ``link_free0`` (seconds per link) is when each link has drained its queue (re-planning
    input); the topology's bandwidths and delays are the statistics planned with.

    Subchunk ``j`` of chunk ``ch`` has the internal id ``j * num_chunks + ch`` (pipeline order:
    all first subchunks, then all second ones, ...). Sets of subchunks (what a GPU holds, what
    it holds or is receiving, what a datacenter lacks) are Python integers used as bit sets, so
    Algorithm 1's set operations are a few machine-word operations each.
    """

    def __init__(self, topology: Topology, collective: Collective, subchunks: int,
                 size: float, link_free0: np.ndarray | None = None, net: _Net | None = None):
        if collective.num_ranks != topology.num_ranks:
            raise CollsynthError(f"collective has {collective.num_ranks} ranks but topology "
                                 f"{topology.name!r} has {topology.num_ranks} compute nodes")
        if collective.kind not in SUPPORTED:
            raise CollsynthError(f"scale does not support {collective.kind.value} (it plans "
                                 f"allgather, broadcast and multicast)")
        self.t = topology
        self.c = collective
        self.net = net or _Net(topology)
        self.k = k = int(subchunks)
        self.size = float(size)
        self.sub_bytes = collective.chunk_bytes(size) / k
        nch = collective.num_chunks
        self.nch = nch
        self.S = S = nch * k
        n = topology.num_ranks
        net = self.net
        has = [0] * n
        want = [0] * n
        src = collective.chunk_source
        for ch in range(nch):
            s = int(src[ch])
            bits = 0
            for j in range(k):
                bits |= 1 << (j * nch + ch)
            has[s] |= bits
            for d in collective.destinations(ch):
                want[int(d)] |= bits
        self.has = has
        self.cov = list(has)                 # holds or is receiving (neighbour memory table)
        self.want = [w & ~h for w, h in zip(want, has)]
        nd = net.ndom
        self.dcov = [0] * nd
        self.dwant = [0] * nd
        self.dneed = [0] * (nd * S)          # ranks per DC wanting b, not covered: [kd * S + b]
        for r in range(n):
            kd = int(net.dom[r])
            self.dcov[kd] |= self.cov[r]
            self.dwant[kd] |= self.want[r]
            w = self.want[r]
            while w:
                low = w & -w
                self.dneed[kd * S + low.bit_length() - 1] += 1
                w ^= low
        self.dneed_bits = list(self.dwant)
        self.via: dict[tuple[int, int], int] = {}   # (rank, sub) -> op that delivered it
        m = len(topology.links)
        self.free = [0.0] * m if link_free0 is None else [float(x) for x in link_free0]
        self.bw = topology.link_bw.tolist()
        self.alpha = topology.link_alpha.tolist()
        self.delta = (self.sub_bytes / topology.link_bw).tolist()
        self.inflight = [0] * n              # receptions in progress per rank (buffer term)
        self.heap: list[tuple] = []
        self.seq = 0
        self.plan = Plan(topology, collective, k, self.size)
        self.events = {name: 0 for name in EVENT_NAMES.values()}
        self.decisions = {"lwnf": 0, "lwnf_refused": 0, "ss_calls": 0, "ss_duplicates": 0,
                          "rounds": 0}
        self.link_src = topology.link_src.tolist()
        self.link_dst = topology.link_dst.tolist()
        self.is_gpu = net.is_gpu.tolist()
        self.rank_of = net.rank_of.tolist()
        self.dom = net.dom.tolist()
        self.reach_doms = [np.flatnonzero(net.reach[x]).tolist() for x in range(topology.num_nodes)]
        self.gpu_in = net.gpu_in
        # datacenters a link leads into directly or through switches/routers
        self.link_doms = [frozenset((self.dom[self.rank_of[v]],)) if self.is_gpu[v]
                          else frozenset(self.reach_doms[v]) for v in self.link_dst]
        self.out_links = topology.out_links
        self.eps = 1e-12
        self._reach_cache: dict = {}
        self._why: Any = ANY
        self.watch: dict[int, set[int]] = {}     # router link -> GPU links waiting for it
        self.blocked_any: set[int] = set()       # GPU links waiting for any router link

    def sub_of(self, internal: int) -> tuple[int, int]:
        """(chunk, subchunk index) of an internal subchunk id."""
        return internal % self.nch, internal // self.nch

    # ------------------------------------------------------------------ events
    def push(self, t: float, kind: int, a: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, a))

    def run(self) -> Plan:
        wall0 = _time.perf_counter()
        now = 0.0
        heap = self.heap
        # queued traffic (re-planning input) completes its transmission when the queue drains
        for lid, f in enumerate(self.free):
            if f > 0:
                self.push(f, TX_END, lid)
        self.schedule_all(now)
        kicks = 0
        while True:
            if not heap:
                if any(w & ~c for w, c in zip(self.want, self.cov)):
                    # nothing in flight yet something is missing: retry from the last time
                    kicks += 1
                    later = [f for f in self.free if f > now]
                    if kicks > 2 and not later:
                        raise CollsynthError("scale: some ranks cannot be reached (the plan "
                                             "stalled with data still missing)")
                    now = min(later) if later else now
                    self.schedule_all(now)
                    continue
                break
            now = heap[0][0]
            lim = now + self.eps * max(1.0, now)
            triggered: dict[int, int | None] = {}
            # all co-timed events are processed together, then the decisions are taken
            while heap and heap[0][0] <= lim:
                _t, kind, _s, a = heapq.heappop(heap)
                self.handle(kind, a, triggered)
            self.decisions["rounds"] += 1
            if triggered:
                self.schedule_links(triggered, now)
        p = self.plan
        p.events = dict(self.events)
        p.decisions = dict(self.decisions)
        p.plan_s = max(p.op_finish) if p.op_finish else 0.0
        p.wall_s = _time.perf_counter() - wall0
        return p

    def handle(self, kind: int, a: int, triggered: dict) -> None:
        # ``triggered``: link -> None (reconsider everything) or the bit set of subchunks that
        # became sendable on it (a link idle before a reception had nothing else worth sending)
        if kind == TX_END:
            self.events["transmission completion"] += 1
            s = self.link_src[a]
            if self.is_gpu[s]:
                triggered[a] = None
            else:
                for l in self.watch.pop(a, ()):
                    triggered[l] = None
                for l in self.blocked_any:
                    triggered[l] = None
                self.blocked_any.clear()
        elif kind == RX_END:
            self.events["reception completion"] += 1
            p = self.plan
            v, b = p.op_dst[a], p.op_sub[a]
            bit = 1 << b
            self.has[v] |= bit
            self.via[(v, b)] = a
            self.inflight[v] -= 1
            for l in self.net.gpu_out[v]:
                if l in triggered:
                    if triggered[l] is not None:
                        triggered[l] |= bit
                else:
                    triggered[l] = bit
        elif kind == TX_START:
            self.events["transmission start"] += 1
        else:
            self.events["reception start"] += 1

    # ------------------------------------------------------------------ decisions
    def schedule_all(self, t: float) -> None:
        self.schedule_links({l: None for u in range(self.net.n) for l in self.net.gpu_out[u]}, t)

    def schedule_links(self, triggered: dict, t: float) -> None:
        """Decisions after a round of events: every idle GPU out-link that was touched runs
        Subchunk Scheduling (links in id order)."""
        lim = t + self.eps * max(1.0, t)
        free = self.free
        for lid in sorted(triggered):
            if free[lid] > lim:
                continue
            hint = triggered[lid]
            u = self.rank_of[self.link_src[lid]]
            if not ((self.has[u] if hint is None else hint & self.has[u])
                    & self.useful_static(lid)):
                continue
            self.serve_link(u, lid, t)

    def useful_static(self, lid: int) -> int:
        """Subchunks worth sending over ``lid`` ignoring link availability beyond it."""
        d = self.link_dst[lid]
        if self.is_gpu[d]:
            return self.useful_gpu(self.rank_of[d])
        out = 0
        for kd in self.reach_doms[d]:
            out |= self.dwant[kd] & ~self.dcov[kd]
        return out

    def useful_gpu(self, v: int) -> int:
        """Neighbour memory table for GPU ``v``: subchunks worth sending to it now (it wants
        them, or — multicast relays — someone in its datacenter still does), minus what it
        holds or is already receiving."""
        return (self.want[v] | self.dneed_bits[self.dom[v]]) & ~self.cov[v]

    def useful_net(self, x: int, ta: float, held: int = -1) -> int:
        """Subchunks worth entering switch/router ``x`` (head arriving at ``ta``): some
        datacenter that lacks them can be entered now along its best path (LWNF). ``held``
        (what the sender holds) allows a quick refusal when no free first hop leads to a
        datacenter lacking any of it."""
        needy = [kd for kd in self.reach_doms[x] if self.dwant[kd] & ~self.dcov[kd] & held]
        if not needy:
            self._why = None            # nothing to send that way: only a reception helps
            return 0
        lim = ta + self.eps * max(1.0, ta)
        first = set()
        busy = []
        free, link_doms = self.free, self.link_doms
        for l2 in self.out_links[x]:
            if free[l2] <= lim:
                first |= link_doms[l2]
            elif not link_doms[l2].isdisjoint(needy):
                busy.append(l2)
        if first.isdisjoint(needy):
            self._why = busy            # wait for one of these first hops to free
            return 0
        self._why = ANY
        _labels, ok = self.reach_now(x, ta)
        out = 0
        for kd in ok:
            out |= self.dwant[kd] & ~self.dcov[kd]
        return out

    def reach_now(self, x: int, ta: float):
        """Cut-through reach of switch/router ``x`` for a head arriving at ``ta``: labels
        ``node -> (cost, arrival, chain, free)`` over switch/router nodes (cost = waits +
        transmission + propagation, Dijkstra), and the datacenters whose best entry needs no
        waiting (a bufferless router must forward at once)."""
        key = (x, ta)
        hit = self._reach_cache.get(key)
        if hit is not None:
            return hit
        is_gpu, dom, rank_of = self.is_gpu, self.dom, self.rank_of
        free_at, delta, alpha, dst = self.free, self.delta, self.alpha, self.link_dst
        labels: dict[int, tuple[float, float, tuple[int, ...], bool]] = {}
        heap = [(0.0, x, ta, (), True)]
        best: dict[int, tuple[float, bool]] = {}
        while heap:
            cost, y, ty, chain, free = heapq.heappop(heap)
            if y in labels:
                continue
            labels[y] = (cost, ty, chain, free)
            lim = ty + self.eps * max(1.0, ty)
            for l2 in self.out_links[y]:
                v = dst[l2]
                fa = free_at[l2]
                wait = fa - ty if fa > lim else 0.0
                c2 = cost + wait + delta[l2] + alpha[l2]
                f2 = free and wait == 0.0
                if is_gpu[v]:
                    kd = dom[rank_of[v]]
                    old = best.get(kd)
                    if old is None or c2 < old[0] or (c2 == old[0] and f2 and not old[1]):
                        best[kd] = (c2, f2)
                elif v not in labels:
                    heapq.heappush(heap, (c2, v, ty + alpha[l2], chain + (l2,), f2))
        ok = sorted(kd for kd, (_c, f) in best.items() if f)
        out = (labels, ok)
        self._reach_cache[key] = out
        return out

    def serve_link(self, u: int, lid: int, t: float) -> None:
        """Subchunk Scheduling (Algorithm 1) for the queue of link ``lid`` out of GPU ``u``;
        starts the chosen transmission (through routers: LWNF picks each next hop)."""
        d = self.link_dst[lid]
        gpu_dst = self.is_gpu[d]
        excluded = 0
        self._why = ANY
        for _attempt in range(4):
            b = self.select(u, lid, d, gpu_dst, t, excluded)
            if b < 0:
                break
            if gpu_dst:
                self.commit(u, (lid,), b, t)
                return
            chain = self.forward(lid, b, t)
            if chain is not None:
                self.commit(u, chain, b, t)
                return
            excluded |= 1 << b
            self._why = ANY
        if gpu_dst:
            return      # re-examined at its own transmission completion or a reception
        # a link into a router that sent nothing waits for router links to free: for the
        # busy first hops it needs when known, else for any router link
        why = self._why
        if why is ANY:
            self.blocked_any.add(lid)
        elif why is not None:
            for l2 in why:
                self.watch.setdefault(l2, set()).add(lid)

    def select(self, u: int, lid: int, d: int, gpu_dst: bool, t: float, excluded: int) -> int:
        """Algorithm 1: the subchunk the queue (u, d) sends now, or -1.

        P = the GPUs with a queue towards d (its GPU predecessors), D = {d} for a GPU d; for a
        router d the concurrent receivers are the datacenters it can enter now that still lack
        the subchunk (:meth:`useful_net`). J[(s, d)] = what s holds of that; subchunks in
        several queues go, one by one in queue order, to the queue with the lowest
        ``T + delta`` (T = the link's backlog plus the unique subchunks queued before)."""
        self.decisions["ss_calls"] += 1
        useful = self.useful_gpu(self.rank_of[d]) if gpu_dst else \
            self.useful_net(d, t + self.alpha[lid], self.has[u] & ~excluded)
        row = self.has[u] & useful & ~excluded
        if not row:
            return -1
        qlinks = self.gpu_in[d]
        rank_of, src, has = self.rank_of, self.link_src, self.has
        rows = [row if q == lid else has[rank_of[src[q]]] & useful for q in qlinks]
        once = twice = 0
        for r in rows:
            twice |= once & r
            once |= r
        uniq = row & ~twice
        if uniq:
            return (uniq & -uniq).bit_length() - 1     # first in queue order
        self.decisions["ss_duplicates"] += 1
        self._why = ANY
        uniq_all = once & ~twice
        mine = qlinks.index(lid)
        delta = [self.delta[q] for q in qlinks]
        T = [max(self.free[q] - t, 0.0) + delta[i] * (rows[i] & uniq_all).bit_count()
             for i, q in enumerate(qlinks)]
        dups = twice
        while dups:
            low = dups & -dups
            dups ^= low
            best_i, best_c = -1, math.inf
            for i, r in enumerate(rows):
                if r & low:
                    c = T[i] + delta[i]
                    if c < best_c:
                        best_i, best_c = i, c
            T[best_i] += delta[best_i]
            if best_i == mine:
                return low.bit_length() - 1
        return -1

    def forward(self, lid: int, b: int, t: float) -> tuple[int, ...] | None:
        """Load-Aware Neighbor Forwarding at the routers/switches a stream enters: the next
        hops minimise f = waiting + transmission + propagation (+ buffer occupancy and
        delivery progress of the receiving GPU); returns the links to a GPU, or None when the
        best way into every datacenter lacking ``b`` would have to wait."""
        x = self.link_dst[lid]
        ta = t + self.alpha[lid]
        labels, ok = self.reach_now(x, ta)
        self.decisions["lwnf"] += 1
        bit = 1 << b
        dmiss = {kd for kd in ok if self.dwant[kd] & ~self.dcov[kd] & bit}
        if not dmiss:
            self.decisions["lwnf_refused"] += 1
            return None
        ch, _j = self.sub_of(b)
        chunk_bits = sum(1 << (j * self.nch + ch) for j in range(self.k))
        best, best_f, best_chain = -1, math.inf, ()
        for y in sorted(labels):
            cost, ty, chain, free = labels[y]
            if not free:
                continue
            lim = ty + self.eps * max(1.0, ty)
            for l2 in self.out_links[y]:
                v = self.link_dst[l2]
                if not self.is_gpu[v] or self.free[l2] > lim:
                    continue
                r = self.rank_of[v]
                if self.dom[r] not in dmiss or self.cov[r] & bit:
                    continue
                q = self.inflight[r] * self.delta[l2]
                prog = (self.cov[r] & chunk_bits).bit_count() / self.k * self.delta[l2]
                f = cost + self.delta[l2] + self.alpha[l2] + W_QUEUE * q + W_PROGRESS * prog
                if f < best_f:
                    best, best_f, best_chain = l2, f, chain
        if best < 0:
            self.decisions["lwnf_refused"] += 1
            return None
        return (lid,) + best_chain + (best,)

    def commit(self, u: int, route: tuple[int, ...], b: int, t: float) -> None:
        if len(route) > 1:      # only links out of switches/routers change what they reach
            self._reach_cache.clear()
        p = self.plan
        op = len(p.op_src)
        v = self.rank_of[self.link_dst[route[-1]]]
        bw = self.bw
        dur = self.sub_bytes / min(bw[l] for l in route)
        s = t
        push = self.push
        for l in route:
            self.free[l] = s + dur
            if s == t:      # the first hop starts now, with this round's decisions
                self.events["transmission start"] += 1
            else:
                push(s, TX_START, l)
            push(s + dur, TX_END, l)
            s += self.alpha[l]
            push(s, RX_START, self.link_dst[l])
        fin = s + dur
        push(fin, RX_END, op)
        p.op_src.append(u)
        p.op_dst.append(v)
        p.op_sub.append(b)
        p.op_route.append(route)
        p.op_start.append(t)
        p.op_finish.append(fin)
        p.op_dep.append(self.via.get((u, b), -1))
        self.inflight[v] += 1
        bit = 1 << b
        if not self.cov[v] & bit:
            self.cov[v] |= bit
            kd = self.dom[v]
            self.dcov[kd] |= bit
            if self.want[v] & bit:
                i = kd * self.S + b
                self.dneed[i] -= 1
                if self.dneed[i] == 0:
                    self.dneed_bits[kd] &= ~bit


def lower(p: Plan) -> Schedule:
    """The timed IR: one operation per GPU-to-GPU stream, byte range = its subchunk.

    Built column-wise (numpy) rather than op by op: re-planning time counts."""
    if p.collective.num_ranks != p.topology.num_ranks:
        raise CollsynthError("plan collective and topology disagree on the number of ranks")
    n_ops = len(p.op_src)
    k = p.subchunks
    nch = p.collective.num_chunks
    sub = np.asarray(p.op_sub, dtype=np.int64)
    route_len = np.fromiter((len(r) for r in p.op_route), dtype=np.int64, count=n_ops)
    route_ptr = np.zeros(n_ops + 1, dtype=np.int64)
    np.cumsum(route_len, out=route_ptr[1:])
    route_links = np.fromiter((l for r in p.op_route for l in r), dtype=np.int64,
                              count=int(route_ptr[-1]))
    dep = np.asarray(p.op_dep, dtype=np.int64)
    has_dep = dep >= 0
    dep_ptr = np.zeros(n_ops + 1, dtype=np.int64)
    np.cumsum(has_dep, out=dep_ptr[1:])
    j = sub // nch
    meta = {"scale": {"subchunks": k, "sub_bytes": p.collective.chunk_bytes(p.size) / k,
                      "plan_time_s": p.plan_s, "plan_wall_s": p.wall_s,
                      "events": p.events, "decisions": p.decisions}}
    return Schedule(
        topology=p.topology, collective=p.collective,
        src=np.asarray(p.op_src, dtype=np.int64), dst=np.asarray(p.op_dst, dtype=np.int64),
        chunk=sub % nch, kind=np.zeros(n_ops, dtype=np.int8),
        route_ptr=route_ptr, route_links=route_links, dep_ptr=dep_ptr, dep_ids=dep[has_dep],
        start=np.asarray(p.op_start, dtype=np.float64),
        duration=None, step=None,
        part_lo=j if k > 1 else None, part_hi=j + 1 if k > 1 else None,
        part_den=np.full(n_ops, k, dtype=np.int64) if k > 1 else None,
        size=p.size, meta=meta)


def plan(topology: Topology, collective: Collective, subchunks: Any = None,
         size: Any = None, stats: LinkStats | None = None) -> Plan:
    """Run the SCALE-CCL loop (no IR). ``stats`` replaces the topology's bandwidths and delays
    and delays each link by its queue."""
    c = int_option(subchunks, "subchunks", "scale", minimum=1) or DEFAULT_SUBCHUNKS
    if c > 4096:
        raise CollsynthError(f"scale option subchunks={c} is above 4096")
    nbytes = size_option(size, "scale", DEFAULT_SIZE)
    free0 = None
    if stats is not None:
        topology = stats.apply(topology)
        free0 = stats.queue_delay()
    return Planner(topology, collective, c, nbytes, free0).run()


@register("scale", collectives=SUPPORTED,
          summary="SCALE-CCL (seed 000): event-driven WAN-aware heuristic, load-aware "
                  "neighbour forwarding and subchunk scheduling; timed",
          options={"subchunks": "subchunks per chunk c (default 1): each chunk moves as c "
                                "byte ranges, pipelined through GPUs"},
          size_aware=True)
def synthesize(topology: Topology, collective: Collective, *, size: float | None = None,
               subchunks: Any = None) -> Schedule:
    """SCALE-CCL: event-driven load-aware forwarding and subchunk scheduling (seed 000)."""
    return lower(plan(topology, collective, subchunks, size))


def replan(topology: Topology, stats: LinkStats | dict | str, collective: Collective | None = None,
           *, subchunks: Any = 8, size: Any = None, verify: bool = True) -> Schedule:
    """Re-plan under new link statistics (a :class:`LinkStats`, its JSON dict, or a file path).

    The schedule belongs to the topology with the statistics' bandwidths and delays applied;
    links start busy for ``queue / bandwidth``. AllGather by default.
    """
    if not isinstance(stats, LinkStats):
        if isinstance(stats, str):
            stats = LinkStats.load(stats, topology)
        else:
            stats = LinkStats.from_dict(stats, topology)
    if collective is None:
        collective = Collective.make("allgather", topology.num_ranks)
    sched = lower(plan(topology, collective, subchunks, size, stats))
    sched = sched.with_meta(algorithm="scale", replanned=True)
    if verify:
        from ...verify import ensure_verified

        ensure_verified(sched)
    return sched
