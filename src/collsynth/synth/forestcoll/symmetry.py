"""Symmetric fast path for ForestColl tree construction (departure from the paper's pipeline).

Large zoo fabrics (``dgx_a100:nodes=128``: 1024 GPUs) are highly symmetric: permuting the
chassis, or shifting GPU/NIC indices inside every chassis, maps links to links of the same
bandwidth and alpha. ForestColl's public code exploits such automorphisms; here:

1. :func:`~collsynth.topology.symmetry.automorphisms` (re-exported here) derives a group ``G``
   of automorphisms from node attributes: for every non-negative integer attribute, the
   smallest cyclic shift ``a -> a + d`` that is an automorphism, each candidate *verified*
   against the links; generators are kept only while the group acts freely on the ranks
   (every rank orbit has ``|G|`` elements). See :mod:`collsynth.topology.symmetry`.
2. :func:`symmetric_trees` builds spanning out-trees only for one root per rank orbit, directly on
   the original topology (tree edges are rank-to-rank routes whose inner nodes are switches), and
   maps them to every other root by the group. Capacity is accounted per *link orbit*: a
   representative tree using link ``l`` puts ``|G| / |orbit(l)|`` trees on every link of the
   orbit once the images are added, so a representative may use ``l`` only while
   ``load(orbit) + |G| / |orbit| <= caps[l]`` (``caps`` of the :class:`~.optimality.Optimum`).
   Trees grow round-robin, one edge per turn, each time reaching the nearest non-member from
   the tree's members through switches on links with room left: first by fewest hops
   (breadth-first, short trees); if that gets stuck, by the cheapest path with link cost
   ``max cap / cap`` (scarce links such as a chassis' NIC uplinks cost more, so a tree spreads
   inside a chassis before it crosses the network again: this is what makes the 3-D torus
   and the TE-CCL MI250 model work).
3. *Enter-once sets.* A tree that has a member inside such a set may not take a link into it
   again. With ``tight=True`` they start as the *tight sets* of the packing condition
   (:func:`_tight_sets`: one max-flow per representative root gives the smallest set ``X``
   around it with ``rho(X) = k |Vc - X|``; every tree rooted outside must enter it exactly once
   and no tree twice, so the rule is necessary for any optimal packing). On
   ``mi250:chassis=2`` these are the GCD packages and the greedy then succeeds where it got
   stuck without; but with the optimum's ``k = 83`` the operation budget allows only an
   18-deep pipeline, and the per-size choice, whose fill model underestimates such shallow
   pipelines, then picked it over the exact pipeline's ``k = 16`` trees: 1.04x the bound at
   1 GB instead of 1.014x. So it is off by default. When a tree gets stuck, the part of the
   fabric it cannot reach (unreached GPUs and the switches that serve only them, split into
   connected pieces) was used up by trees that entered it more than once; it and its images
   are added (a heuristic, not a necessary condition) and the construction restarts
   (``max_restarts``, default 3).

The construction is a greedy heuristic: it may get stuck although a packing exists (the
default MI250 model from 4 chassis, and with ``k = 1``, still does); it then
returns None and :func:`~collsynth.synth.forestcoll.forestcoll_trees` runs the exact pipeline
(edge splitting + Algorithm 5). When it succeeds, the trees meet the optimum exactly: ``k``
trees per root, every link carries at most ``caps[e]`` trees (re-checked by
``tree_congestion``).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from ...jit import compiled as jit_compiled
from ...schedule.dag import ragged_arange
from ...schedule.trees import TreeForm
from ...topology.model import Topology
from ...topology.symmetry import automorphisms, components, orbit_ids, representatives


def _bfs(
    live: np.ndarray,
    n_live: int,
    member: np.ndarray,
    out_ptr: np.ndarray,
    out_lid: np.ndarray,
    orbit: np.ndarray,
    orbit_load: np.ndarray,
    inc: np.ndarray,
    caps: np.ndarray,
    dst: np.ndarray,
    is_comp: np.ndarray,
    enter_w: np.ndarray,
    entered: np.ndarray,
    seen: np.ndarray,
    stamp: int,
    prev: np.ndarray,
    queue: np.ndarray,
) -> tuple[int, int]:
    """Multi-source breadth-first search from a tree's members (``live[:n_live]``, in
    insertion order) through switches on links with room left: ``(the first compute
    non-member reached or -1, the new live count)``. Reached nodes get ``seen[v] = stamp`` and
    ``prev[v]`` (the link they were reached by).

    Links only fill up and trees only grow, so a member none of whose usable links leads out
    of the tree never will again: such members are dropped from ``live`` (compacted in place),
    which gives the same search at far less cost in large trees. ``enter_w``/``entered``: the
    "enter once" bit sets of the links and the tree, in 63-bit words. Plain Python on arrays,
    compiled with numba (:func:`collsynth.jit.compiled`) for large fabrics."""
    words = entered.shape[0]
    keep = 0
    tail = 0
    head = 0
    i = 0
    while i < n_live or head < tail:
        from_member = i < n_live  # the members first, then the nodes they reach
        if from_member:
            x = live[i]
        else:
            x = queue[head]
            head += 1
        alive = False
        for p in range(out_ptr[x], out_ptr[x + 1]):
            l = out_lid[p]
            if orbit_load[orbit[l]] + inc[l] > caps[l]:
                continue
            blocked = False
            for w in range(words):
                if enter_w[l, w] & entered[w]:
                    blocked = True
            if blocked:
                continue
            y = dst[l]
            if member[y]:
                continue
            alive = True
            if seen[y] == stamp:
                continue
            seen[y] = stamp
            prev[y] = l
            if is_comp[y]:
                if from_member:  # the members not yet looked at stay
                    for j in range(i, n_live):
                        live[keep] = live[j]
                        keep += 1
                return y, keep
            queue[tail] = y
            tail += 1
        if from_member:
            if alive:
                live[keep] = x
                keep += 1
            i += 1
    return -1, keep


#: fabrics with at least this many ranks (all that use symmetry by default) search with the
#: compiled :func:`_bfs` unless the caller says otherwise (compiling costs a few seconds once
#: per machine, then numba's on-disk cache loads it)
COMPILE_MIN_RANKS = 32


def _words(masks: list[int], words: int) -> np.ndarray:
    """Python-int bit sets as rows of 63-bit words."""
    out = np.zeros((len(masks), words), dtype=np.int64)
    full = (1 << 63) - 1
    for i, m in enumerate(masks):
        w = 0
        while m:
            out[i, w] = m & full
            m >>= 63
            w += 1
    return out


class _Search:
    """The arrays of one greedy construction's breadth-first searches (see :func:`_bfs`)."""

    def __init__(
        self,
        g: _Greedy,
        orbit_load: np.ndarray,
        node_mask: list[int],
        enter_mask: list[int],
        compiled: bool | None = None,
    ):
        nn = g.topo.num_nodes
        self.out_ptr = np.zeros(nn + 1, dtype=np.int64)
        np.cumsum([len(x) for x in g.out_links], out=self.out_ptr[1:])
        self.out_lid = np.array([l for x in g.out_links for l in x], dtype=np.int64)
        self.orbit = np.asarray(g.orbit, dtype=np.int64)
        self.inc = np.asarray(g.inc, dtype=np.int64)
        self.caps = np.asarray(g.caps, dtype=np.int64)
        self.dst = np.asarray(g.dst, dtype=np.int64)
        self.is_comp = np.asarray(g.is_comp, dtype=np.int8)
        bits = max([m.bit_length() for m in node_mask + enter_mask] + [1])
        words = -(-bits // 63)
        self.enter_w = _words(enter_mask, words)
        self.node_w = _words(node_mask, words)
        self.orbit_load = orbit_load
        self.seen = np.full(nn, -1, dtype=np.int64)
        self.prev = np.zeros(nn, dtype=np.int64)
        self.queue = np.zeros(nn, dtype=np.int64)
        self.stamp = 0
        self.src = g.src
        if compiled is None:
            compiled = g.n >= COMPILE_MIN_RANKS
        self.bfs = jit_compiled(_bfs) if compiled else _bfs

    def tree(self, root: int) -> dict[str, Any]:
        """A search state for a tree of one node, ``root``."""
        nn = len(self.seen)
        member = np.zeros(nn, dtype=np.int8)
        member[root] = 1
        live = np.zeros(nn, dtype=np.int64)
        live[0] = root
        return {"member": member, "live": live, "n_live": 1, "entered_w": self.node_w[root].copy()}

    def nearest(self, t: dict[str, Any]) -> tuple[int | None, dict[int, int]]:
        """The first compute non-member reached from tree ``t`` and, as ``prev``, the links of
        the path to it (when none is reached: every node reached, with dummy values)."""
        st = t["search"]
        self.stamp += 1
        found, st["n_live"] = self.bfs(
            st["live"], st["n_live"], st["member"], self.out_ptr, self.out_lid, self.orbit,
            self.orbit_load, self.inc, self.caps, self.dst, self.is_comp, self.enter_w,
            st["entered_w"], self.seen, self.stamp, self.prev, self.queue,
        )  # fmt: skip
        if found < 0:
            return None, {int(v): 0 for v in np.flatnonzero(self.seen == self.stamp)}
        prev: dict[int, int] = {}
        y = int(found)
        while not st["member"][y]:
            l = int(self.prev[y])
            prev[y] = l
            y = self.src[l]
        return int(found), prev

    def add(self, t: dict[str, Any], node: int) -> None:
        st = t["search"]
        st["member"][node] = 1
        st["live"][st["n_live"]] = node
        st["n_live"] += 1
        st["entered_w"] |= self.node_w[node]


def _cheapest(
    t: dict[str, Any],
    out_links: list[list[int]],
    orbit: list[int],
    orbit_load: list[int],
    inc: list[int],
    caps: list[int],
    dst: list[int],
    is_comp: list[bool],
    weight: list[float],
    enter_mask: list[int],
) -> tuple[int | None, dict[int, int]]:
    """Multi-source Dijkstra from the tree's members through switches on links with room left,
    link cost ``weight[l]`` (scarce, low-capacity links cost more), ties to shallow members."""
    members = t["members"]
    entered = t["entered"]
    prev: dict[int, int] = {}
    dist: dict[int, float] = {}
    heap = []
    for m in t["order"]:
        d0 = members[m] * 1e-3
        dist[m] = d0
        heap.append((d0, m))
    heapq.heapify(heap)
    done = set()
    while heap:
        d, x = heapq.heappop(heap)
        if x in done:
            continue
        done.add(x)
        if is_comp[x] and x not in members:
            return x, prev
        for l in out_links[x]:
            o = orbit[l]
            if orbit_load[o] + inc[l] > caps[l] or enter_mask[l] & entered:
                continue
            y = dst[l]
            if y in members:
                continue
            nd = d + weight[l]
            if nd < dist.get(y, 1e300):
                dist[y] = nd
                prev[y] = l
                heapq.heappush(heap, (nd, y))
    return None, prev


def _stuck_set(topo: Topology, reach: set[int], is_comp: list[bool]) -> list[frozenset[int]]:
    """The set a stuck tree cannot enter: the unreachable compute nodes plus every switch
    whose compute neighbours are all unreachable (a NIC of those GPUs; not a switch, like a
    spine, that touches no GPU)."""
    out = {v for v in range(topo.num_nodes) if is_comp[v] and v not in reach}
    nbrs: dict[int, set[int]] = {}
    for l in topo.links:
        if not is_comp[l.src] and is_comp[l.dst]:
            nbrs.setdefault(l.src, set()).add(l.dst)
        if is_comp[l.src] and not is_comp[l.dst]:
            nbrs.setdefault(l.dst, set()).add(l.src)
    for w, cs in nbrs.items():
        if cs <= out:
            out.add(w)
    # weakly connected components inside the set (a set in two chassis is two sets)
    inside = ((l.src, l.dst) for l in topo.links if l.src in out and l.dst in out)
    return [frozenset(c) for c in components(out, inside)]


def _tight_sets(topo: Topology, opt, reps: list[int]) -> list[frozenset[int]]:
    """Tight sets of the packing condition, one per representative root ``v`` where one
    exists: the smallest node set ``X`` containing ``v`` whose entering capacity equals what the
    trees rooted outside it need (``rho(X) = k |Vc - X|``, Theorem 1's condition with equality).
    Every tree rooted outside such a set must enter it exactly once and no other tree may enter
    it, so these are sound "enter once" sets. One max-flow per representative."""
    from ...flow.maxflow import FlowNet

    comp = np.asarray(topo.compute_nodes, dtype=np.int64)
    n, k, s = len(comp), int(opt.k), topo.num_nodes
    tails = np.concatenate([topo.link_src.astype(np.int64), np.full(n, s, dtype=np.int64)])
    heads = np.concatenate([topo.link_dst.astype(np.int64), comp])
    caps = np.concatenate([np.asarray(opt.caps, dtype=np.int64), np.full(n, k, dtype=np.int64)])
    net = FlowNet(s + 1, tails, heads, caps)
    out = []
    for v in reps:
        if net.solve(s, v) != k * n:
            continue
        side = net.sink_side()
        if side is None:
            return []
        x = frozenset(side) - {s}
        if sum(1 for u in x if topo.kind_codes[u] == 0) < n:
            out.append(x)
    return out


def _grow(
    g: _Greedy,
    weight: list[float] | None,
    round_robin: bool,
    node_mask: list[int],
    enter_mask: list[int],
) -> tuple[list[dict[str, Any]] | None, list[frozenset[int]] | None]:
    """One greedy construction of the representative trees; returns the trees, or the set of
    nodes a stuck tree cannot reach (all links into it full or forbidden), or None."""
    reps, k, n, topo = g.reps, g.k, g.n, g.topo
    out_links, orbit, inc, caps, orbit_capacity = (
        g.out_links,
        g.orbit,
        g.inc,
        g.caps,
        g.orbit_capacity,
    )
    dst, is_comp = g.dst, g.is_comp
    # the load per link orbit: an array the compiled search reads, or a list (faster from
    # Python) for the weighted search
    orbit_load: Any = (
        np.zeros(len(g.orbit_size), dtype=np.int64) if weight is None else [0] * len(g.orbit_size)
    )
    search = _Search(g, orbit_load, node_mask, enter_mask, g.compiled) if weight is None else None
    trees: list[dict[str, Any]] = [
        {
            "root": r,
            "members": {r: 0},
            "order": [r],
            "edges": [],
            "entered": node_mask[r],
            "search": search.tree(r) if search is not None else None,
        }
        for r in reps
        for _ in range(k)
    ]
    active = list(range(len(trees)))
    while active:
        nxt = []
        for ti in active:
            t = trees[ti]
            members = t["members"]
            if search is not None:
                found, prev = search.nearest(t)
            else:
                assert weight is not None
                found, prev = _cheapest(
                    t, out_links, orbit, orbit_load, inc, caps, dst, is_comp, weight, enter_mask
                )
            if found is None:
                return None, _stuck_set(topo, set(t["order"]) | set(prev), is_comp)
            route = []
            y = found
            while y not in members:
                l = prev[y]
                route.append(l)
                y = topo.links[l].src
            route.reverse()
            need: dict[int, int] = {}
            for l in route:
                need[orbit[l]] = need.get(orbit[l], 0) + inc[l]
            if any(orbit_load[o] + d > orbit_capacity[o] for o, d in need.items()):
                return None, None
            for o, d in need.items():
                orbit_load[o] += d
            members[found] = members[y] + 1
            t["order"].append(found)
            t["edges"].append((y, found, tuple(route)))
            t["entered"] |= node_mask[found]
            if search is not None:
                search.add(t, found)
            if len(members) < n:
                if round_robin:
                    nxt.append(ti)
                else:
                    nxt.insert(0, ti)
                    break
        if not round_robin:
            nxt += [x for x in active if x not in nxt and len(trees[x]["members"]) < n]
        active = nxt
    return trees, None


def symmetric_trees(
    topo: Topology,
    opt,
    group=None,
    round_robin: bool | None = True,
    weighted: bool | None = None,
    max_restarts: int = 3,
    seed_sets: list[frozenset[int]] | None = None,
    tight: bool = False,
    compiled: bool | None = None,
    images: bool = True,
) -> tuple[TreeForm, dict[str, Any]] | None:
    """Trees for every root from trees for one root per orbit (see the module doc), or None.

    ``round_robin``: grow the representative trees one edge per turn (True, default, shorter
    trees) or one tree after the other (False); None tries round-robin first, then one after
    the other. One after the other succeeds more often (h800_rails) but its trees simulated
    worse there (1.19x the bound against 1.03x for the exact pipeline), so it is not the
    default. ``weighted``: paths by fewest hops (False) or cheapest capacity-weighted cost
    (True); None (default) tries hops first, then weighted. ``max_restarts``: restarts per
    attempt after learning "enter once" sets; ``seed_sets``: "enter once" sets to start with;
    ``tight``: also start with the tight sets (off by default, see the module doc).
    ``compiled``: run the breadth-first search compiled with numba (True) or as plain Python
    (False); None (default) compiles it on fabrics of at least ``COMPILE_MIN_RANKS`` ranks.
    Either gives the same trees. ``images=False``: the representative roots' trees only (the
    group's identity, its first element, as the only image), for the compact form, which maps
    them to the other roots itself; ``info["images"]`` says which.
    """
    if group is None:
        group = automorphisms(topo)
    if group is None:
        return None
    P, L = group
    g = _Greedy(topo, opt, P, L, compiled)
    tight_sets = _tight_sets(topo, opt, g.reps) if tight else []
    got = None
    for rr in (True, False) if round_robin is None else (round_robin,):
        for w in (False, True) if weighted is None else (weighted,):
            got = g.attempt(rr, w, list(tight_sets) + list(seed_sets or []), max_restarts)
            if got is not None:
                break
        if got is not None:
            break
    if got is None:
        return None
    trees, n_learned, restarts = got
    steps = sum(len(t["edges"]) for t in trees)
    info = {
        "group_order": len(P),
        "representatives": len(g.reps),
        "link_orbits": len(g.orbit_size),
        "round_robin": rr,
        "weighted": w,
        "learned_sets": n_learned,
        "restarts": restarts,
        "steps": steps,
        "images": images,
    }
    if not images:  # (the identity is the group's first element)
        return _images(trees, P[:1], L[:1], topo.rank_of_node), info
    return _images(trees, P, L, topo.rank_of_node), info


class _Greedy:
    """The fixed data of the greedy construction: rank-orbit representatives, link orbits and
    the per-orbit capacity accounting (see the module doc)."""

    def __init__(
        self, topo: Topology, opt, P: np.ndarray, L: np.ndarray, compiled: bool | None = None
    ):
        self.topo, self.node_perms = topo, P
        self.order = G = len(P)
        self.k = int(opt.k)
        self.compiled = compiled
        comp = [int(v) for v in topo.compute_nodes]
        self.is_comp = [bool(c == 0) for c in topo.kind_codes.tolist()]
        self.reps: list[int] = representatives(P, comp)  # one root per rank orbit
        nl = len(topo.links)
        link_orbit, orbit_size = orbit_ids(L)
        self.orbit = orbit = link_orbit.tolist()
        self.orbit_size: list[int] = orbit_size.tolist()
        self.inc = [G // self.orbit_size[orbit[l]] for l in range(nl)]
        self.caps = caps = [int(c) for c in opt.caps]
        self.orbit_capacity = [0] * len(self.orbit_size)
        for l in range(nl):
            self.orbit_capacity[orbit[l]] = caps[l]  # an automorphism keeps bandwidth, hence caps
        cmax = max(caps) if caps else 1
        self.weight = [cmax / c if c > 0 else 0.0 for c in caps]
        self.out_links: list[list[int]] = [[] for _ in range(topo.num_nodes)]
        for lk in topo.links:
            if caps[lk.id] > 0:
                self.out_links[lk.src].append(lk.id)
        self.dst = topo.link_dst.tolist()
        self.src = topo.link_src.tolist()
        self.in_links: list[list[int]] = [[] for _ in range(topo.num_nodes)]
        for l in range(nl):
            self.in_links[self.dst[l]].append(l)
        self.n = len(comp)

    def attempt(self, rr: bool, w: bool, pending: list[frozenset[int]], max_restarts: int):
        """Grow the representative trees (round-robin ``rr``, weighted paths ``w``), learning
        "enter once" sets, closed under the group, after each stuck try: ``(trees, learned
        sets, restarts)``, or None."""
        learned: list[frozenset[int]] = []
        known: set[frozenset[int]] = set()
        node_mask = [0] * self.topo.num_nodes
        enter_mask = [0] * len(self.topo.links)
        restarts = 0
        while True:
            if pending:
                self.learn(pending, learned, known, node_mask, enter_mask)
                pending = []
            trees, stuck = _grow(self, self.weight if w else None, rr, node_mask, enter_mask)
            if trees is not None:
                return trees, len(learned), restarts
            if stuck is None or restarts >= max_restarts:
                return None
            restarts += 1
            if not self.learn(stuck, learned, known, node_mask, enter_mask):
                return None

    def learn(self, sets, learned, known, node_mask, enter_mask) -> bool:
        """Add the images of ``sets`` to the "enter once" sets; whether any was new."""
        progress = False
        for stuck_set in sets:
            if len(stuck_set) < 2:  # a tree enters a single node once anyway
                continue
            for g in range(self.order):
                img = frozenset(int(x) for x in self.node_perms[g][sorted(stuck_set)])
                if img in known:
                    continue
                progress = True
                known.add(img)
                bit = 1 << len(learned)
                learned.append(img)
                for v in img:
                    node_mask[v] |= bit
                    for l in self.in_links[v]:
                        if self.src[l] not in img:
                            enter_mask[l] |= bit
        return progress


def _images(trees: list[dict], P: np.ndarray, L: np.ndarray, rank) -> TreeForm:
    """The representative trees' images under the group, as routed out-trees by rank (tree
    columns, no Python object per edge); identical trees of a root merge into one batch.

    The group acts freely on the ranks, so images of different representative trees, or under
    different elements, never share a root unless the representative trees are the same tree
    of the same root: merging those first merges every identical image. Trees are ordered by
    root, larger batches first, then by representative tree and group element."""
    G = len(P)
    rank_arr = np.asarray(rank, dtype=np.int64)
    distinct: dict[tuple, int] = {}
    reps: list[dict] = []
    mults: list[int] = []
    for t in trees:
        key = (t["root"], tuple(t["edges"]))
        if key in distinct:
            mults[distinct[key]] += 1
        else:
            distinct[key] = len(reps)
            reps.append(t)
            mults.append(1)
    J = len(reps)
    roots = np.stack([rank_arr[P[:, t["root"]]] for t in reps])  # (J, G)
    mult = np.repeat(np.asarray(mults, dtype=np.int64), G)
    order = np.lexsort((np.arange(J * G), -mult, roots.ravel()))
    sel_j, sel_g = order // G, order % G
    n_edges = np.array([len(t["edges"]) for t in reps], dtype=np.int64)
    n_links = np.array([sum(len(r) for _, _, r in t["edges"]) for t in reps], dtype=np.int64)
    # every representative's images, flattened element-major: (G, E_j) and (G, R_j) blocks
    rank32 = rank_arr.astype(np.int32)
    frm = np.concatenate([rank32[P[:, [a for a, _, _ in t["edges"]]]].ravel() for t in reps])
    to = np.concatenate([rank32[P[:, [b for _, b, _ in t["edges"]]]].ravel() for t in reps])
    lnk = np.concatenate(
        [L[:, [l for _, _, r in t["edges"] for l in r]].astype(np.int32).ravel() for t in reps]
    )
    rlen = np.concatenate(
        [np.tile([len(r) for _, _, r in t["edges"]], G).astype(np.int64) for t in reps]
    )
    e_off = np.concatenate([[0], np.cumsum(n_edges * G)])[:-1]
    l_off = np.concatenate([[0], np.cumsum(n_links * G)])[:-1]
    e_sel = ragged_arange(n_edges[sel_j], e_off[sel_j] + sel_g * n_edges[sel_j])
    l_sel = ragged_arange(n_links[sel_j], l_off[sel_j] + sel_g * n_links[sel_j])
    edge_rlen = rlen[e_sel]
    cols = {
        "tree_root": roots.ravel()[order],
        "tree_mult": mult[order],
        "tree_in": np.zeros(J * G, dtype=np.int64),
        "tree_ptr": np.concatenate([[0], np.cumsum(n_edges[sel_j])]).astype(np.int64),
        "edge_from": frm[e_sel],
        "edge_to": to[e_sel],
        "edge_routed": np.ones(len(e_sel), dtype=np.int8),
        "edge_route_ptr": np.concatenate([[0], np.cumsum(edge_rlen)]).astype(np.int64),
        "edge_route_links": lnk[l_sel],
    }
    return TreeForm(columns=cols)
