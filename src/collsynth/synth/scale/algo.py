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

#: A link busy for less than this fraction of the current time past a stream's start is
#: float rounding of equal times (a few hundred ulps at most), not a wait (:meth:`Planner.commit`).
NOISE = 1e-13

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
    # routes as CSR arrays (the compiled loop's output; ``op_route`` is then left empty and
    # :meth:`routes` builds the tuples on demand)
    route_ptr: np.ndarray | None = None
    route_links: np.ndarray | None = None
    events: dict = field(default_factory=dict)
    decisions: dict = field(default_factory=dict)
    plan_s: float = 0.0
    wall_s: float = 0.0
    engine: str = "python"

    def routes(self) -> list[tuple[int, ...]]:
        """The route (link ids) of every operation."""
        if self.route_ptr is None:
            return list(self.op_route)
        ptr, links = self.route_ptr.tolist(), self.route_links.tolist()
        return [tuple(links[ptr[i]:ptr[i + 1]]) for i in range(len(ptr) - 1)]


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
        self.via = [-1] * (n * S)            # [rank * S + sub] -> op that delivered it
        m = len(topology.links)
        self.free = [0.0] * m if link_free0 is None else [float(x) for x in link_free0]
        self.bw = topology.link_bw.tolist()
        self.alpha = topology.link_alpha.tolist()
        self.delta = (self.sub_bytes / topology.link_bw).tolist()
        self.inflight = [0] * n              # receptions in progress per rank (buffer term)
        self.heap: list[tuple] = []         # (time, type, seq, link or op) completion events
        # start events (transmission and reception start) change no state: they are counted
        # when scheduled and kept here only as times, because they still make rounds (a round
        # takes every event within ``eps`` of the earliest one)
        self.starts: list[float] = []
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
        self.ev = [0, 0, 0, 0]                   # events processed, by type
        self.ss_calls = 0
        self._tables()

    def sub_of(self, internal: int) -> tuple[int, int]:
        """(chunk, subchunk index) of an internal subchunk id."""
        return internal % self.nch, internal // self.nch

    def _tables(self) -> None:
        """Per-link and per-node lookup tables for the hot loop (plain lists and bit masks,
        built once per planner so decisions do not chase attributes or build sets)."""
        rank_of, is_gpu, dom = self.rank_of, self.is_gpu, self.dom
        self.lsrc_rank = [rank_of[s] for s in self.link_src]     # sender rank (GPU links)
        self.ldst_rank = [rank_of[d] for d in self.link_dst]
        self.ldst_gpu = [is_gpu[d] for d in self.link_dst]
        # Algorithm 1's queues towards every node: their sender ranks, and each GPU link's
        # position among the queues of its destination
        self.qranks = [[self.lsrc_rank[q] for q in qs] for qs in self.gpu_in]
        self.qpos = [-1] * len(self.link_src)
        for qs in self.gpu_in:
            for i, q in enumerate(qs):
                self.qpos[q] = i
        p = self.plan
        self._op_add = (p.op_src.append, p.op_dst.append, p.op_sub.append, p.op_route.append,
                        p.op_start.append, p.op_finish.append, p.op_dep.append)
        # what schedule_links reads, in one tuple (these lists are only ever updated in place)
        self._decide_tables = (self.free, self.has, self.cov, self.want, self.dneed_bits,
                               self.dom, self.lsrc_rank, self.ldst_rank, self.ldst_gpu,
                               self.qranks, self.qpos, self.link_dst)
        # datacenter sets as bit masks (bit kd)
        link_dmask = [sum(1 << kd for kd in ds) for ds in self.link_doms]
        self.out_dmask = [[(l2, link_dmask[l2]) for l2 in self.out_links[x]]
                          for x in range(len(self.reach_doms))]
        # out-links of every node as (link, head node, is GPU, its datacenter or -1), and
        # split into datacenter entries (link, datacenter) and hops on (link, head node)
        heads = [(l2, v, is_gpu[v], dom[rank_of[v]] if is_gpu[v] else -1)
                 for l2, v in enumerate(self.link_dst)]
        self.hops = [[heads[l2] for l2 in self.out_links[x]] for x in range(len(self.reach_doms))]
        self.gpu_hops = [[(l2, kd) for l2, _v, g, kd in hs if g] for hs in self.hops]
        self.net_hops = [[(l2, v) for l2, v, g, _kd in hs if not g] for hs in self.hops]

    # ------------------------------------------------------------------ events
    def push(self, t: float, kind: int, a: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, a))

    def run(self) -> Plan:
        wall0 = _time.perf_counter()
        now = 0.0
        heap = self.heap
        heappop = heapq.heappop
        # queued traffic (re-planning input) completes its transmission when the queue drains
        for lid, f in enumerate(self.free):
            if f > 0:
                self.push(f, TX_END, lid)
        self.schedule_all(now)
        kicks = 0
        rounds = 0
        eps = self.eps
        ev = self.ev
        p = self.plan
        op_dst, op_sub = p.op_dst, p.op_sub
        is_gpu, link_src, gpu_out = self.is_gpu, self.link_src, self.net.gpu_out
        has, via, inflight, S = self.has, self.via, self.inflight, self.S
        watch, blocked_any = self.watch, self.blocked_any
        starts = self.starts
        while True:
            if not heap:
                if starts:      # only start events left: rounds of nothing to decide
                    now = starts[0]
                    lim = now + (eps if now <= 1.0 else eps * now)
                    while starts and starts[0] <= lim:
                        heappop(starts)
                    rounds += 1
                    continue
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
            if starts and starts[0] < now:
                now = starts[0]
            lim = now + (eps if now <= 1.0 else eps * now)
            while starts and starts[0] <= lim:
                heappop(starts)
            # ``triggered``: link -> None (reconsider everything) or the bit set of subchunks
            # that became sendable on it (a link idle before a reception had nothing else
            # worth sending). All co-timed events are processed together, then the decisions
            # are taken.
            triggered: dict[int, int | None] = {}
            while heap and heap[0][0] <= lim:
                _t, kind, _s, a = heappop(heap)
                ev[kind] += 1       # a completion (starts are counted when scheduled)
                if kind == TX_END:
                    if is_gpu[link_src[a]]:
                        triggered[a] = None
                    else:
                        for l in watch.pop(a, ()):
                            triggered[l] = None
                        if blocked_any:
                            for l in blocked_any:
                                triggered[l] = None
                            blocked_any.clear()
                elif kind == RX_END:
                    v, b = op_dst[a], op_sub[a]
                    bit = 1 << b
                    has[v] |= bit
                    via[v * S + b] = a
                    inflight[v] -= 1
                    for l in gpu_out[v]:
                        h = triggered.get(l, 0)
                        if h is not None:
                            triggered[l] = h | bit
            rounds += 1
            if triggered:
                self.schedule_links(triggered, now)
        self.events = {EVENT_NAMES[k]: ev[k] for k in (TX_START, TX_END, RX_START, RX_END)}
        self.decisions["rounds"] += rounds
        self.decisions["ss_calls"] += self.ss_calls
        self.ss_calls = 0
        p.events = dict(self.events)
        p.decisions = dict(self.decisions)
        p.plan_s = max(p.op_finish) if p.op_finish else 0.0
        p.wall_s = _time.perf_counter() - wall0
        return p

    # ------------------------------------------------------------------ decisions
    def schedule_all(self, t: float) -> None:
        self.schedule_links({l: None for u in range(self.net.n) for l in self.net.gpu_out[u]}, t)

    def schedule_links(self, triggered: dict, t: float) -> None:
        """Decisions after a round of events: every idle GPU out-link that was touched runs
        Subchunk Scheduling (links in id order). Links into a GPU are served inline (the
        common case); links into a router go through :meth:`serve_link`."""
        lim = t + (self.eps if t <= 1.0 else self.eps * t)
        (free, has, cov, want, dneed_bits, dom, lsrc_rank, ldst_rank, ldst_gpu, qranks, qpos,
         link_dst) = self._decide_tables
        calls = 0
        for lid in sorted(triggered):
            if free[lid] > lim:
                continue
            hint = triggered[lid]
            u = lsrc_rank[lid]
            hu = has[u]
            if ldst_gpu[lid]:
                # neighbour memory table of GPU v: what it (or, for multicast relays,
                # someone in its datacenter) wants, minus what it holds or is receiving
                v = ldst_rank[lid]
                useful = (want[v] | dneed_bits[dom[v]]) & ~cov[v]
                row = hu & useful
                if not (row if hint is None else hint & row):
                    continue
                calls += 1
                # Algorithm 1 (see pick): a subchunk no other queue towards v holds goes first
                qr = qranks[link_dst[lid]]
                once = twice = 0
                for r in qr:
                    j = has[r] & useful
                    twice |= once & j
                    once |= j
                uniq = row & ~twice
                if uniq:
                    b = (uniq & -uniq).bit_length() - 1
                else:
                    b = self.pick(row, [has[r] & useful for r in qr], lid, qpos[lid], t)
                if b >= 0:
                    self.commit(u, (lid,), b, t)
            else:
                if not ((hu if hint is None else hint & hu) & self.useful_static(lid)):
                    continue
                self.serve_link(u, lid, t)
        self.ss_calls += calls

    def useful_static(self, lid: int) -> int:
        """Subchunks worth sending over ``lid`` ignoring link availability beyond it."""
        d = self.link_dst[lid]
        if self.is_gpu[d]:
            return self.useful_gpu(self.rank_of[d])
        out = 0
        dwant, dcov = self.dwant, self.dcov
        for kd in self.reach_doms[d]:
            out |= dwant[kd] & ~dcov[kd]
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
        dwant, dcov = self.dwant, self.dcov
        needy = 0
        for kd in self.reach_doms[x]:
            if dwant[kd] & ~dcov[kd] & held:
                needy |= 1 << kd
        if not needy:
            self._why = None            # nothing to send that way: only a reception helps
            return 0
        lim = ta + (self.eps if ta <= 1.0 else self.eps * ta)
        first = 0
        busy = []
        free = self.free
        for l2, dmask in self.out_dmask[x]:
            if free[l2] <= lim:
                first |= dmask
            elif dmask & needy:
                busy.append(l2)
        if not first & needy:
            self._why = busy            # wait for one of these first hops to free
            return 0
        self._why = ANY
        _labels, ok = self.reach_now(x, ta)
        out = 0
        for kd in ok:
            out |= dwant[kd] & ~dcov[kd]
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
        free_at, delta, alpha = self.free, self.delta, self.alpha
        gpu_hops, net_hops = self.gpu_hops, self.net_hops
        eps = self.eps
        labels: dict[int, tuple[float, float, tuple[int, ...], bool]] = {}
        heap = [(0.0, x, ta, (), True)]
        heappop, heappush = heapq.heappop, heapq.heappush
        # per datacenter: the least entry cost, and whether some entry at that cost needs no
        # waiting (order-independent: min cost, any free among the ties)
        nd = self.net.ndom
        best_c = [math.inf] * nd
        best_f = [False] * nd
        while heap:
            cost, y, ty, chain, free = heappop(heap)
            if y in labels:
                continue
            labels[y] = (cost, ty, chain, free)
            lim = ty + (eps if ty <= 1.0 else eps * ty)
            for l2, kd in gpu_hops[y]:         # entries into datacenters
                fa = free_at[l2]
                if fa > lim:                    # must wait: never a free entry
                    c2 = cost + (fa - ty) + delta[l2] + alpha[l2]
                    if c2 < best_c[kd]:
                        best_c[kd] = c2
                        best_f[kd] = False
                else:                           # (cost + 0.0 == cost: same sum as waiting 0)
                    c2 = cost + delta[l2] + alpha[l2]
                    old = best_c[kd]
                    if c2 < old:
                        best_c[kd] = c2
                        best_f[kd] = free
                    elif free and c2 == old:
                        best_f[kd] = True
            for l2, v in net_hops[y]:           # on to further switches/routers
                if v not in labels:
                    fa = free_at[l2]
                    wait = fa - ty if fa > lim else 0.0
                    heappush(heap, (cost + wait + delta[l2] + alpha[l2], v, ty + alpha[l2],
                                    chain + (l2,), free and wait == 0.0))
        ok = [kd for kd in range(nd) if best_f[kd]]
        out = (labels, ok)
        self._reach_cache[key] = out
        return out

    def serve_link(self, u: int, lid: int, t: float) -> None:
        """Subchunk Scheduling (Algorithm 1) for the queue of link ``lid`` out of GPU ``u``
        into a switch/router ``d``; starts the chosen transmission, LWNF picking each next hop
        (links into a GPU are served by :meth:`schedule_links` directly).

        P = the GPUs with a queue towards d (its GPU predecessors); the concurrent receivers D
        are the datacenters d can enter now that still lack the subchunk (:meth:`useful_net`);
        J[(s, d)] = what s holds of that (:meth:`pick`). A subchunk LWNF cannot place is
        excluded and the next one tried (at most 4 attempts)."""
        d = self.link_dst[lid]
        ta = t + self.alpha[lid]
        has = self.has
        qranks, mine = self.qranks[d], self.qpos[lid]
        excluded = 0
        self._why = ANY
        for _attempt in range(4):
            self.ss_calls += 1
            held = has[u] & ~excluded
            useful = self.useful_net(d, ta, held)
            row = held & useful
            if not row:
                break
            rows = [has[r] & useful for r in qranks]
            rows[mine] = row
            b = self.pick(row, rows, lid, mine, t)
            if b < 0:
                break
            chain = self.forward(lid, b, t)
            if chain is not None:
                self.commit(u, chain, b, t)
                return
            excluded |= 1 << b
            self._why = ANY
        # a link into a router that sent nothing waits for router links to free: for the
        # busy first hops it needs when known, else for any router link
        why = self._why
        if why is ANY:
            self.blocked_any.add(lid)
        elif why is not None:
            for l2 in why:
                self.watch.setdefault(l2, set()).add(lid)

    def pick(self, row: int, rows: list[int], lid: int, mine: int, t: float) -> int:
        """Algorithm 1 given the queues J towards one destination (``rows``, what each
        predecessor holds of what is useful; ``row`` = ``rows[mine]``, the queue of ``lid``):
        the first subchunk only this queue holds, else the first duplicate that goes to this
        queue. Duplicates go, one by one in queue order, to the queue with the lowest
        ``T + delta`` (T = the link's backlog plus the unique subchunks queued before)."""
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
        qlinks = self.gpu_in[self.link_dst[lid]]
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
        free_at, delta, alpha, cov, inflight = (self.free, self.delta, self.alpha, self.cov,
                                                self.inflight)
        best, best_f, best_chain = -1, math.inf, ()
        for y in sorted(labels):
            cost, ty, chain, free = labels[y]
            if not free:
                continue
            lim = ty + (self.eps if ty <= 1.0 else self.eps * ty)
            for l2, v, v_gpu, kd in self.hops[y]:
                if not v_gpu or free_at[l2] > lim:
                    continue
                r = self.rank_of[v]
                if kd not in dmiss or cov[r] & bit:
                    continue
                q = inflight[r] * delta[l2]
                prog = (cov[r] & chunk_bits).bit_count() / self.k * delta[l2]
                f = cost + delta[l2] + alpha[l2] + W_QUEUE * q + W_PROGRESS * prog
                if f < best_f:
                    best, best_f, best_chain = l2, f, chain
        if best < 0:
            self.decisions["lwnf_refused"] += 1
            return None
        return (lid,) + best_chain + (best,)

    def commit(self, u: int, route: tuple[int, ...], b: int, t: float) -> None:
        """Start operation ``route`` (GPU ``u`` sends subchunk ``b`` at ``t``): reserve its
        links, schedule its events, record it and update the neighbour memory table.

        A link counts as free within ``eps`` of the round's time (co-timed events), so a hop
        may find its link still busy for up to ``eps``; the operation then starts that much
        later (all its hops shifted alike), never overlapping the previous stream. Overlaps
        below ``NOISE`` (relative) are float rounding of equal times, not waits: left alone."""
        op = len(self.plan.op_src)
        last = route[-1]
        v = self.ldst_rank[last]
        heap, heappush, alpha, free = self.heap, heapq.heappush, self.alpha, self.free
        ev, starts = self.ev, self.starts
        seq = self.seq
        noise = NOISE
        if len(route) == 1:     # GPU -> GPU: one hop, starting now
            if free[last] - t > noise * t:
                t = free[last]
            dur = self.sub_bytes / self.bw[last]
            free[last] = t + dur
            seq += 1
            heappush(heap, (t + dur, TX_END, seq, last))
            s = t + alpha[last]
            heappush(starts, s)             # reception start
            ev[TX_START] += 1
            ev[RX_START] += 1
        else:
            self._reach_cache.clear()   # only links out of switches/routers change their reach
            bw = self.bw
            dur = self.sub_bytes / min(bw[l] for l in route)
            s = t
            shift = 0.0
            for l in route:
                late = free[l] - s
                if late > shift and late > noise * s:
                    shift = late
                s += alpha[l]
            if shift > 0.0:
                t = t + shift
            s = t
            for l in route:
                free[l] = s + dur
                ev[TX_START] += 1
                if s != t:      # the first hop starts now, with this round's decisions
                    heappush(starts, s)
                seq += 1
                heappush(heap, (s + dur, TX_END, seq, l))
                s += alpha[l]
                heappush(starts, s)         # reception start
                ev[RX_START] += 1
        fin = s + dur
        seq += 1
        heappush(heap, (fin, RX_END, seq, op))
        self.seq = seq
        S = self.S
        add_src, add_dst, add_sub, add_route, add_start, add_finish, add_dep = self._op_add
        add_src(u)
        add_dst(v)
        add_sub(b)
        add_route(route)
        add_start(t)
        add_finish(fin)
        add_dep(self.via[u * S + b])
        self.inflight[v] += 1
        bit = 1 << b
        cov = self.cov
        if not cov[v] & bit:
            cov[v] |= bit
            kd = self.dom[v]
            self.dcov[kd] |= bit
            if self.want[v] & bit:
                i = kd * S + b
                dneed = self.dneed
                dneed[i] -= 1
                if dneed[i] == 0:
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
    if p.route_ptr is not None:
        route_ptr = np.asarray(p.route_ptr, dtype=np.int64)
        route_links = np.asarray(p.route_links, dtype=np.int64)
    else:
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
                      "plan_time_s": p.plan_s, "plan_wall_s": p.wall_s, "engine": p.engine,
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


# ---------------------------------------------------------------------------- compiled loop
#: Limits of the compiled loop (beyond them the reference :class:`Planner` runs): datacenter
#: sets are one 63-bit word, ``watch`` is a links x links matrix, and per (rank, subchunk) it
#: keeps a few words.
KERNEL_MAX_DOMAINS = 63
KERNEL_MAX_LINKS = 4096
KERNEL_MAX_PAIRS = 1 << 22      # ranks x subchunks
#: Operations the compiled loop makes room for at first (it grows its arrays as needed).
KERNEL_INITIAL_OPS = 1 << 16

_STATIC_CACHE: dict = {}


class _Static:
    """Topology-derived tables of the compiled loop (what :class:`_Net` and
    :meth:`Planner._tables` derive, as flat arrays). They depend on the graph only — not on
    bandwidths, delays or queues — so re-plans of one topology share them
    (:func:`_static_tables`)."""

    def __init__(self, t: Topology):
        net = _Net(t)
        self.net = net
        n, m, N = t.num_ranks, len(t.links), t.num_nodes
        i64 = np.int64
        is_gpu = net.is_gpu
        rank_of = np.asarray(net.rank_of, dtype=i64)
        dom = net.dom.astype(i64)
        link_src = t.link_src.astype(i64)
        link_dst = t.link_dst.astype(i64)
        self.n, self.m, self.N, self.ndom = n, m, N, net.ndom
        self.link_dst = link_dst
        self.link_src_gpu = is_gpu[link_src].astype(np.uint8)
        self.lsrc_rank = rank_of[link_src]
        self.ldst_rank = rank_of[link_dst]
        self.ldst_gpu = is_gpu[link_dst].astype(np.uint8)
        self.hop_kd = np.where(is_gpu[link_dst], dom[np.maximum(self.ldst_rank, 0)], -1)
        self.dom = dom

        def csr(rows):
            ptr = np.zeros(len(rows) + 1, dtype=i64)
            ptr[1:] = np.cumsum([len(r) for r in rows])
            flat = np.fromiter((x for r in rows for x in r), dtype=i64, count=int(ptr[-1]))
            return ptr, flat

        out_links = [list(t.out_links[x]) for x in range(N)]
        self.gout_ptr, self.gout = csr(net.gpu_out)
        self.gin_ptr, self.gin = csr(net.gpu_in)
        self.qrank = self.lsrc_rank[self.gin]
        qpos = np.full(m, -1, dtype=i64)
        for qs in net.gpu_in:
            for i, q in enumerate(qs):
                qpos[q] = i
        self.qpos = qpos
        self.ok = net.ndom <= KERNEL_MAX_DOMAINS and m <= KERNEL_MAX_LINKS
        weights = (1 << np.arange(min(net.ndom, KERNEL_MAX_DOMAINS), dtype=i64))
        reach = net.reach[:, :len(weights)]
        self.rdmask = (reach.astype(i64) * weights).sum(axis=1).astype(i64)
        gpu_bit = np.where(self.hop_kd >= 0, np.left_shift(1, np.maximum(self.hop_kd, 0)), 0)
        self.ldmask = np.where(self.ldst_gpu == 1, gpu_bit, self.rdmask[link_dst]).astype(i64)
        self.out_ptr, self.out_l = csr(out_links)
        self.gh_ptr, self.gh_l = csr([[l for l in ls if is_gpu[link_dst[l]]] for ls in out_links])
        self.nh_ptr, self.nh_l = csr([[l for l in ls if not is_gpu[link_dst[l]]]
                                      for ls in out_links])
        self.net_nodes = np.flatnonzero(~is_gpu).astype(i64)
        nnet = len(self.net_nodes)
        self.max_route = nnet + 2
        self.max_ent = int(len(self.nh_l)) + 2


def _static_tables(t: Topology) -> _Static:
    """:class:`_Static` of ``t``, shared by topologies with the same graph (nodes kinds and
    link ends); a few graphs are kept."""
    key = (t.kind_codes.tobytes(), t.link_src.tobytes(), t.link_dst.tobytes())
    hit = _STATIC_CACHE.get(key)
    if hit is None:
        hit = _Static(t)
        if len(_STATIC_CACHE) >= 8:
            _STATIC_CACHE.pop(next(iter(_STATIC_CACHE)))
        _STATIC_CACHE[key] = hit
    return hit


def _bitsets(collective: Collective, n: int, k: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    """``has`` and ``want`` of every rank as W words of 63 bits (subchunk ``j * nch + ch``)."""
    nch = collective.num_chunks
    pre = np.zeros((n, nch), dtype=bool)
    pre[collective.chunk_source, np.arange(nch)] = True
    post = np.zeros((n, nch), dtype=bool)
    ranks, chunks = collective.postcondition()
    post[ranks, chunks] = True
    weights = np.left_shift(np.int64(1), np.arange(63, dtype=np.int64))
    out = []
    for a in (pre, post):
        full = np.zeros((n, W * 63), dtype=np.int64)
        full[:, :nch * k] = np.tile(a, (1, k))
        out.append((full.reshape(n, W, 63) * weights).sum(axis=2, dtype=np.int64))
    return out[0], out[1]


#: ``engine="auto"`` runs the compiled loop once it is loaded in this process, and loads it
#: itself for instances of at least this many (rank, subchunk) pairs; smaller one-off plans
#: run the reference (faster than loading numba; the plan is the same).
KERNEL_AUTO_PAIRS = 1 << 16

_KERNEL_LOAD: list = [None, {}]


def load_kernel() -> dict:
    """Make the compiled loop available in this process (numba: compile it, or load it from
    numba's on-disk cache, ``cache=True``) and warm it on a tiny instance. Idempotent; returns
    ``{"load_s", "load_cpu_s", "cache_hits", "cache_misses"}`` of the first call. A re-planning
    service calls this once at start-up; afterwards ``engine="auto"`` uses the compiled loop."""
    if _KERNEL_LOAD[0] is None:
        w0, c0 = _time.perf_counter(), _time.process_time()
        from . import kernel

        _warm(kernel)
        stats = kernel.run.stats
        _KERNEL_LOAD[1] = {"load_s": _time.perf_counter() - w0,
                           "load_cpu_s": _time.process_time() - c0,
                           "cache_hits": sum(stats.cache_hits.values()),
                           "cache_misses": sum(stats.cache_misses.values())}
        _KERNEL_LOAD[0] = kernel
    return dict(_KERNEL_LOAD[1])


def _kernel():
    if _KERNEL_LOAD[0] is None:
        load_kernel()
    return _KERNEL_LOAD[0]


def _warm(kernel) -> None:
    """Compile (or load from cache) the loop on a two-GPU instance so that the first real plan
    does not pay for it."""
    from ...topology.model import Link, Node, NodeKind

    t = Topology("scale_warm", [Node("g0", NodeKind.COMPUTE), Node("g1", NodeKind.COMPUTE),
                                Node("r", NodeKind.ROUTER)],
                 [Link(0, 0, 1, 1e9, 1e-6, "x", 1), Link(1, 1, 0, 1e9, 1e-6, "x", 1),
                  Link(2, 0, 2, 1e9, 1e-6, "x", 1), Link(3, 2, 1, 1e9, 1e-6, "x", 1)])
    p = _kernel_plan(kernel, t, Collective.make("allgather", 2), 2, 1e6, None)
    if p is None or len(p.op_src) != 4:     # pragma: no cover - a broken build
        raise CollsynthError("scale: the compiled planner failed its warm-up")


def _kernel_plan(kernel, topology: Topology, collective: Collective, k: int, size: float,
                 link_free0: np.ndarray | None) -> Plan | None:
    """The compiled loop (same plan as :class:`Planner`); None where it does not apply."""
    wall0 = _time.perf_counter()
    if collective.num_ranks != topology.num_ranks or collective.kind not in SUPPORTED:
        return None     # the reference raises the one-line error
    st = _static_tables(topology)
    n = st.n
    nch = collective.num_chunks
    S = nch * k
    if not st.ok or n * S > KERNEL_MAX_PAIRS:
        return None
    W = (S + 62) // 63
    sub_bytes = collective.chunk_bytes(size) / k
    has, want = _bitsets(collective, n, k, W)
    bw = topology.link_bw.astype(np.float64)
    alpha = topology.link_alpha.astype(np.float64)
    delta = sub_bytes / topology.link_bw
    free = (np.zeros(st.m) if link_free0 is None
            else np.array(link_free0, dtype=np.float64, copy=True))
    # initial capacities (the loop grows its arrays as needed)
    max_ops = max(1, min(n * S, KERNEL_INITIAL_OPS))
    max_route = st.max_route
    max_heap = st.m + 4 * max_ops + 1
    dims = np.array([n, st.m, W, S, nch, k, st.ndom, st.N, max_ops, max_route, max_heap,
                     st.max_ent], dtype=np.int64)
    fdims = np.array([sub_bytes, 1e-12, NOISE])
    (cnt, op_src, op_dst, op_sub, op_start, op_fin, op_dep, rptr, rlinks) = kernel.run(
        dims, fdims, st.link_dst, st.link_src_gpu, st.lsrc_rank, st.ldst_rank, st.ldst_gpu,
        st.hop_kd, st.ldmask, st.gout_ptr, st.gout, st.gin_ptr, st.gin, st.qrank, st.qpos,
        st.rdmask, st.out_ptr, st.out_l, st.gh_ptr, st.gh_l, st.nh_ptr, st.nh_l,
        st.net_nodes, st.dom, bw, alpha, delta, free, has, want)
    if cnt[kernel.ERR]:
        raise CollsynthError("scale: some ranks cannot be reached (the plan stalled with "
                             "data still missing)")
    p = Plan(topology, collective, k, float(size), op_src=op_src, op_dst=op_dst,
             op_sub=op_sub, op_start=op_start, op_finish=op_fin, op_dep=op_dep,
             route_ptr=rptr, route_links=rlinks, engine="numba")
    ev = [int(x) for x in cnt[kernel.EV0:kernel.EV0 + 4]]
    p.events = {EVENT_NAMES[e]: ev[e] for e in (TX_START, TX_END, RX_START, RX_END)}
    p.decisions = {"lwnf": int(cnt[kernel.LWNF]), "lwnf_refused": int(cnt[kernel.REFUSED]),
                   "ss_calls": int(cnt[kernel.SS]), "ss_duplicates": int(cnt[kernel.DUPS]),
                   "rounds": int(cnt[kernel.ROUNDS])}
    p.plan_s = float(op_fin.max()) if len(op_fin) else 0.0
    p.wall_s = _time.perf_counter() - wall0
    return p


def plan(topology: Topology, collective: Collective, subchunks: Any = None,
         size: Any = None, stats: LinkStats | None = None, engine: str = "auto") -> Plan:
    """Run the SCALE-CCL loop (no IR). ``stats`` replaces the topology's bandwidths and delays
    and delays each link by its queue. ``engine``: ``"auto"`` (the compiled loop where it
    applies, else the reference), ``"numba"`` or ``"python"`` (the reference
    :class:`Planner`); both give the same plan."""
    c = int_option(subchunks, "subchunks", "scale", minimum=1) or DEFAULT_SUBCHUNKS
    if c > 4096:
        raise CollsynthError(f"scale option subchunks={c} is above 4096")
    nbytes = size_option(size, "scale", DEFAULT_SIZE)
    if engine not in ("auto", "numba", "python"):
        raise CollsynthError(f"scale engine {engine!r} is not auto, numba or python")
    free0 = None
    if stats is not None:
        topology = stats.apply(topology)
        free0 = stats.queue_delay()
    if engine == "auto":
        pairs = topology.num_ranks * collective.num_chunks * c
        use = _KERNEL_LOAD[0] is not None or pairs >= KERNEL_AUTO_PAIRS
    else:
        use = engine == "numba"
    if use:
        p = _kernel_plan(_kernel(), topology, collective, c, nbytes, free0)
        if p is not None:
            return p
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
           *, subchunks: Any = 8, size: Any = None, verify: bool = True,
           engine: str = "auto") -> Schedule:
    """Re-plan under new link statistics (a :class:`LinkStats`, its JSON dict, or a file path).

    The schedule belongs to the topology with the statistics' bandwidths and delays applied;
    links start busy for ``queue / bandwidth``. AllGather by default. ``engine`` as in
    :func:`plan` (call :func:`load_kernel` once first for millisecond re-plans).
    """
    if not isinstance(stats, LinkStats):
        if isinstance(stats, str):
            stats = LinkStats.load(stats, topology)
        else:
            stats = LinkStats.from_dict(stats, topology)
    if collective is None:
        collective = Collective.make("allgather", topology.num_ranks)
    sched = lower(plan(topology, collective, subchunks, size, stats, engine))
    sched = sched.with_meta(algorithm="scale", replanned=True)
    if verify:
        from ...verify import ensure_verified

        ensure_verified(sched)
    return sched
