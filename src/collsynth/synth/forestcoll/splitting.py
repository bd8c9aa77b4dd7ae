"""ForestColl switch removal by edge splitting: Zhao et al., "ForestColl: Throughput-Optimal
Collective Communications on Heterogeneous Network Fabrics" (arXiv 2402.06787), §4.3 and
Appendix C.2 (Algorithms 2/4, Theorems 6-8).

Input: the integer tree capacities of an :class:`~.optimality.Optimum` (``caps[e]`` trees per
link, ``k`` trees per root). Every switch and router ``w`` (routers are treated exactly like
switches: no compute, no multicast) is removed by repeatedly *splitting off* a pair of arcs
``(u, w), (w, t)`` into a direct arc ``(u, t)``. For each pair the amount split is the maximum
safe capacity ``gamma`` of Theorem 8, all at once:

    gamma = min{ c(u,w), c(w,t), min_v F(u, w; D^(u,w),v) - N k, min_v F(w, t; D^(w,t),v) - N k }

where ``D^(u,w),v`` is the Theorem-5 auxiliary network (source ``s`` with an arc of capacity ``k``
to every compute node) plus infinite arcs ``u->s``, ``u->t``, ``v->w``, and ``D^(w,t),v`` the
same plus ``w->s``, ``u->t``, ``v->t``. So ``min_v F(s, v) >= N k`` (k spanning out-trees per root
exist, Theorem 5) holds after every split, and the AllGather optimum of the switch-free logical
topology equals the original one.

Implementation choices (not in the paper):

* Fast path: first try splitting ``min(c(u,w), c(w,t))`` and test Theorem 5's condition directly
  (one max-flow per compute node); only if that fails compute ``gamma`` exactly by Theorem 8
  (two max-flows per compute node). Both give the same split amount.
* Order. Switches are removed in increasing order of their total capacity (NICs before IB
  switches before NVSwitches), then node index. For an egress arc ``(w, t)``, ingress arcs
  ``(u, w)`` are tried: ``u != t`` first (``u == t`` makes a loop, which is discarded: it carries
  nothing), then ``u`` farthest from ``t`` in hops without ``w`` (so an IB switch first pairs
  GPUs of different chassis, as the paper's adjusted order does, §C.2), then ring order among the
  switch's neighbours (``u`` just before ``t``), then node index. The order affects routes and
  tree shapes, never optimality.
* ``spread=True`` (option, default off): before the maximum-gamma pass, each egress arc is
  first shared evenly (amounts ``<= gamma``, so still safe) among the ingress arcs of the best
  tier, giving denser logical topologies and shorter trees. Measured in our simulator this helps
  some fabrics (a800_clos: 1.17x -> 1.02x of the bound at 1 GB) and hurts others (dgx_a100:
  1.00x -> 1.54x), so the paper's maximum split is the default.
* Routing: every arc carries a list of ``(link-id path, capacity)`` pieces summing to its
  capacity; a split concatenates ``gamma`` units of pieces of ``(u, w)`` with ``gamma`` units of
  pieces of ``(w, t)``. So every unit of a logical arc is one concrete path through switches and
  routers of the original topology (its inner nodes are never compute nodes, by construction), and
  the pieces through any original link sum to at most that link's tree capacity. The paper's
  recursive ``routing[(u,t)][w]`` table holds the same information.
* Capacity that cannot reach a compute node is dropped: ingress capacity of a switch whose egress
  is used up, and loops ``(u, u)``. For Eulerian topologies (every node's ingress equals its
  egress bandwidth) Theorem 7 guarantees that every egress arc is split completely. For other
  topologies a switch may get stuck (no pair can be split safely); its remaining capacity is then
  dropped and :attr:`LogicalTopology.preserved` reports whether ``k`` trees per root survive.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction

from ...errors import CollsynthError
from ...flow import maxflow as _flow
from ...flow.maxflow import FlowNet, rooted_check
from ...flow.optimality import IntGraph, Optimum
from ...topology.model import Topology, TopologyBuilder


@dataclass
class LogicalTopology:
    """A switch-free logical topology on the ranks of ``topology``.

    ``caps[(u, v)]``: number of trees the logical arc ``u -> v`` (ranks) may carry.
    ``routing[(u, v)]``: ``[(link ids, capacity), ...]`` paths in the original topology whose
    capacities sum to ``caps[(u, v)]``; inner nodes of every path are switches or routers.
    ``k``: trees per root to pack. ``tree_bw``: bytes/s of one unit of capacity (one tree).
    ``preserved``: Theorem 5's condition (``k`` spanning out-trees per root) holds.
    """

    topology: Topology
    num_ranks: int
    k: int
    caps: dict[tuple[int, int], int]
    routing: dict[tuple[int, int], list[tuple[tuple[int, ...], int]]]
    tree_bw: Fraction
    preserved: bool
    dropped: dict[str, int] = field(default_factory=dict)
    stats: dict = field(default_factory=dict)

    def int_graph(self) -> IntGraph:
        """The logical topology as an integer graph (capacity unit = one tree = ``tree_bw``)."""
        keys = sorted(self.caps)
        names = [self.topology.rank_name(r) for r in range(self.num_ranks)]
        return IntGraph.from_links(
            self.topology.name + "/logical",
            self.num_ranks,
            range(self.num_ranks),
            [a for a, _ in keys],
            [b for _, b in keys],
            [self.caps[x] for x in keys],
            self.tree_bw,
            names,
        )

    def as_topology(self) -> Topology:
        """A collsynth Topology of the ranks, one link per logical arc (bw = caps * tree_bw)."""
        b = TopologyBuilder(
            self.topology.name + "-logical", meta={"logical_of": self.topology.name}
        )
        for r in range(self.num_ranks):
            b.compute(self.topology.rank_name(r))
        for u, v in sorted(self.caps):
            b.link(u, v, float(self.caps[(u, v)] * self.tree_bw), 0.0, "logical")
        return b.build()

    def link_usage(self) -> dict[int, int]:
        """Tree capacity of each original link used by the routing table."""
        use: dict[int, int] = {}
        for pieces in self.routing.values():
            for path, c in pieces:
                for l in path:
                    use[l] = use.get(l, 0) + c
        return use


def _take(pieces: dict[tuple[int, ...], int], amount: int) -> list[tuple[tuple[int, ...], int]]:
    """Remove ``amount`` units from the front of an ordered path->capacity dict."""
    out = []
    while amount > 0:
        path = next(iter(pieces))
        c = pieces[path]
        d = min(c, amount)
        out.append((path, d))
        if d == c:
            del pieces[path]
        else:
            pieces[path] = c - d
        amount -= d
    return out


class _Splitter:
    def __init__(self, topo: Topology, caps: tuple[int, ...], k: int):
        self.topo = topo
        self.n = topo.num_nodes
        self.compute = [int(v) for v in topo.compute_nodes]
        self.is_compute = [bool(topo.kind_codes[v] == 0) for v in range(self.n)]
        self.k = k
        self.K = len(self.compute) * k
        self.cap: dict[tuple[int, int], int] = {}
        self.paths: dict[tuple[int, int], dict[tuple[int, ...], int]] = {}
        self.outn: list[dict[int, None]] = [dict() for _ in range(self.n)]
        self.inn: list[dict[int, None]] = [dict() for _ in range(self.n)]
        for l in topo.links:
            c = int(caps[l.id])
            if c > 0:
                self._add(l.src, l.dst, [((l.id,), c)])
        self.order = list(self.compute)
        self.stats = {"splits": 0, "fast_checks": 0, "exact_gammas": 0, "stuck": 0, "shortcuts": 0}
        self.dropped = {"loops": 0, "dead_end": 0, "stuck": 0}

    # ------------------------------------------------------------------ graph edits
    def _add(self, a: int, b: int, pieces) -> None:
        key = (a, b)
        if key not in self.cap:
            self.cap[key] = 0
            self.paths[key] = {}
            self.outn[a][b] = None
            self.inn[b][a] = None
        pd = self.paths[key]
        for path, c in pieces:
            pd[path] = pd.get(path, 0) + c
            self.cap[key] += c

    def _remove(self, a: int, b: int, amount: int):
        key = (a, b)
        pieces = _take(self.paths[key], amount)
        self.cap[key] -= amount
        if self.cap[key] == 0:
            del self.cap[key]
            del self.paths[key]
            del self.outn[a][b]
            del self.inn[b][a]
        return pieces

    def _split(self, u: int, w: int, t: int, g: int) -> None:
        pa = self._remove(u, w, g)
        pb = self._remove(w, t, g)
        self.stats["splits"] += 1
        if u == t:
            self.dropped["loops"] += g
            return
        out = []
        i = j = 0
        ra, rb = pa[0][1], pb[0][1]
        while i < len(pa) and j < len(pb):
            d = min(ra, rb)
            out.append((self._shortcut(pa[i][0] + pb[j][0]), d))
            ra -= d
            rb -= d
            if ra == 0:
                i += 1
                ra = pa[i][1] if i < len(pa) else 0
            if rb == 0:
                j += 1
                rb = pb[j][1] if j < len(pb) else 0
        self._add(u, t, out)

    def _shortcut(self, path: tuple[int, ...]) -> tuple[int, ...]:
        """Remove cycles from a link path (a switch visited twice): uses a subset of the links."""
        links = self.topo.links
        seen: dict[int, int] = {}
        out: list[int] = []
        for l in path:
            a = links[l].src
            if a in seen:  # back at a node already left: drop the cycle
                del out[seen[a] :]
                for x in [x for x, i in seen.items() if i >= seen[a]]:
                    del seen[x]
            seen[a] = len(out)
            out.append(l)
        if len(out) != len(path):
            self.stats["shortcuts"] += 1
        return tuple(out)

    # ------------------------------------------------------------------ oracles
    def _arrays(self):
        keys = list(self.cap)
        return [a for a, _ in keys], [b for _, b in keys], [self.cap[x] for x in keys]

    def feasible(self) -> bool:
        tails, heads, caps = self._arrays()
        ok, bad, _ = rooted_check(
            self.n,
            tails,
            heads,
            caps,
            self.compute,
            [self.k] * len(self.compute),
            self.K,
            self.order,
        )
        if not ok:
            assert bad is not None  # rooted_check names the violating node when it fails
            self.order.remove(bad)
            self.order.insert(0, bad)
        return ok

    def exact_gamma(self, u: int, w: int, t: int, g0: int) -> int:
        """Theorem 8, on the current (unsplit) graph."""
        self.stats["exact_gammas"] += 1
        tails, heads, caps = self._arrays()
        s = self.n
        for v in self.compute:
            tails.append(s)
            heads.append(v)
            caps.append(self.k)
        inf = sum(caps) + self.K + 1
        best = g0
        for part in (1, 2):
            t2, h2, c2 = list(tails), list(heads), list(caps)
            if part == 1:
                src, snk = u, w
                t2 += [u]
                h2 += [s]
                c2 += [inf]
            else:
                src, snk = w, t
                t2 += [w]
                h2 += [s]
                c2 += [inf]
            if u != t:
                t2 += [u]
                h2 += [t]
                c2 += [inf]
            # arc v -> sink per compute node v (infinite while v is the probed sink). Part 1:
            # v == u or v == t give an infinite u -> w path (no constraint). Part 2: v == t
            # needs no arc (a loop) but is a real constraint.
            arc_of: dict[int, int | None] = {}
            for v in self.compute:
                if part == 1 and (v == u or v == t):
                    continue
                if part == 2 and v == t:
                    arc_of[v] = None
                    continue
                arc_of[v] = len(t2)
                t2.append(v)
                h2.append(snk)
                c2.append(0)
            net = FlowNet(self.n + 1, t2, h2, c2)
            for v in self.order:
                if v not in arc_of:
                    continue
                a = arc_of[v]
                if a is not None:
                    net.set_capacity(a, inf)
                f = net.solve(src, snk)
                if a is not None:
                    net.set_capacity(a, 0)
                best = min(best, f - self.K)
                if best <= 0:
                    return 0
        return best

    def gamma(self, u: int, w: int, t: int, limit: int | None = None) -> int:
        """Theorem 8's maximum safe split of (u, w), (w, t), capped at ``limit``."""
        g0 = min(self.cap[(u, w)], self.cap[(w, t)])
        if limit is not None:
            g0 = min(g0, limit)
        # fast path: is the full split safe?
        self.stats["fast_checks"] += 1
        saved = self._snapshot(u, w, t)
        self._split(u, w, t, g0)
        self.stats["splits"] -= 1
        ok = self.feasible()
        self._restore(saved)
        if ok:
            return g0
        return self.exact_gamma(u, w, t, g0)

    def _snapshot(self, u, w, t):
        keys = [(u, w), (w, t), (u, t)]
        return (
            [(x, self.cap.get(x), dict(self.paths[x]) if x in self.paths else None) for x in keys],
            dict(self.dropped),
        )

    def _restore(self, saved) -> None:
        entries, dropped = saved
        self.dropped = dropped
        for (a, b), c, pd in entries:
            if (a, b) in self.cap:
                del self.cap[(a, b)]
                del self.paths[(a, b)]
                del self.outn[a][b]
                del self.inn[b][a]
            if c is not None and a != b:
                self.cap[(a, b)] = c
                self.paths[(a, b)] = pd
                self.outn[a][b] = None
                self.inn[b][a] = None

    # ------------------------------------------------------------------ main loop
    def _dist_to(self, t: int, w: int) -> dict[int, int]:
        """Hops from every node to ``t`` avoiding ``w``."""
        dist = {t: 0}
        q = deque([t])
        while q:
            x = q.popleft()
            for a in self.inn[x]:
                if a != w and a not in dist:
                    dist[a] = dist[x] + 1
                    q.append(a)
        return dist

    def remove(self, w: int, spread: bool) -> None:
        nbrs = sorted(set(self.outn[w]) | set(self.inn[w]))
        pos = {x: i for i, x in enumerate(nbrs)}
        deg = len(nbrs)
        for t in sorted(self.outn[w]):
            if (w, t) not in self.cap:
                continue
            dist = self._dist_to(t, w)
            big = self.n + 1
            keyf = {u: (u == t, -dist.get(u, big)) for u in self.inn[w]}
            cands = sorted(self.inn[w], key=lambda u: (keyf[u], (pos[t] - pos[u]) % deg, u))
            if spread:
                # share (w, t) evenly among the ingress arcs of the best tier (same key)
                tiers: list[list[int]] = []
                for u in cands:
                    if u == t:
                        continue
                    if tiers and keyf[tiers[-1][0]] == keyf[u]:
                        tiers[-1].append(u)
                    else:
                        tiers.append([u])
                for tier in tiers:
                    for idx, u in enumerate(tier):
                        if (w, t) not in self.cap:
                            break
                        if (u, w) not in self.cap:
                            continue
                        quota = -(-self.cap[(w, t)] // (len(tier) - idx))
                        g = self.gamma(u, w, t, quota)
                        if g > 0:
                            self._split(u, w, t, g)
            for u in cands:
                if (w, t) not in self.cap:
                    break
                if (u, w) not in self.cap:
                    continue
                g = self.gamma(u, w, t)
                if g > 0:
                    self._split(u, w, t, g)
            if (w, t) in self.cap:
                # nothing left to pair with (dead capacity) or no safe pair (non-Eulerian)
                kind = "stuck" if self.inn[w] else "dead_end"
                if kind == "stuck":
                    self.stats["stuck"] += 1
                self.dropped[kind] += self._remove_all(w, t)
        for u in list(self.inn[w]):
            self.dropped["dead_end"] += self._remove_all(u, w)

    def _remove_all(self, a: int, b: int) -> int:
        c = self.cap[(a, b)]
        self._remove(a, b, c)
        return c


def remove_switches(topo: Topology, opt: Optimum, *, spread: bool = False):
    """Algorithm 4 on the integer tree capacities ``opt.caps``: returns ``(logical, routing)``.

    Works for an exact optimum and for a :func:`~.optimality.fixed_k` result alike (both carry
    ``caps`` and ``k``). ``spread``: see the module docstring.

    ``logical`` is a :class:`LogicalTopology` on the ranks (``logical.k == opt.k``) and
    ``routing`` (also ``logical.routing``) maps every logical arc ``(u, v)`` of ranks to
    ``[(link-id path, capacity), ...]`` in ``topo``.
    """
    if len(opt.caps) != len(topo.links):
        raise CollsynthError("the optimum does not belong to this topology (link count differs)")
    t0 = time.perf_counter()
    mf0 = _flow.COUNTERS["maxflows"]
    sp = _Splitter(topo, opt.caps, opt.k)
    switches = [v for v in range(sp.n) if not sp.is_compute[v]]
    total_in = {w: sum(sp.cap[(a, w)] for a in sp.inn[w]) for w in switches}
    for w in sorted(switches, key=lambda w: (total_in[w], w)):
        sp.remove(w, spread)
    preserved = sp.feasible()
    rank = topo.rank_of_node
    caps: dict[tuple[int, int], int] = {}
    routing: dict[tuple[int, int], list[tuple[tuple[int, ...], int]]] = {}
    for a, b in sorted(sp.cap, key=lambda x: (rank[x[0]], rank[x[1]])):
        assert sp.is_compute[a] and sp.is_compute[b]
        key = (int(rank[a]), int(rank[b]))
        caps[key] = sp.cap[(a, b)]
        routing[key] = sorted(sp.paths[(a, b)].items(), key=lambda pc: (len(pc[0]), pc[0]))
    stats: dict[str, float] = dict(sp.stats)
    stats["maxflows"] = _flow.COUNTERS["maxflows"] - mf0
    stats["seconds"] = time.perf_counter() - t0
    logical = LogicalTopology(
        topology=topo,
        num_ranks=topo.num_ranks,
        k=opt.k,
        caps=caps,
        routing=routing,
        tree_bw=opt.y,
        preserved=preserved,
        dropped=dict(sp.dropped),
        stats=stats,
    )
    return logical, routing
