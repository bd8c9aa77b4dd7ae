"""Symmetric fast path for ForestColl tree construction (departure from the paper's pipeline).

Large zoo fabrics (``dgx_a100:nodes=128``: 1024 GPUs) are highly symmetric: permuting the
chassis, or shifting GPU/NIC indices inside every chassis, maps links to links of the same
bandwidth and alpha. ForestColl's public code exploits such automorphisms; here:

1. :func:`automorphisms` derives a group ``G`` of automorphisms from node attributes: the
   cyclic chassis shift ``chassis -> chassis + 1`` and the smallest within-chassis index shift
   ``local -> local + d`` that is an automorphism (every other attribute kept). Each candidate
   permutation is *verified*: it must map the multiset of links ``(src, dst, bw, alpha, cls,
   lanes)`` onto itself. ``G`` is used only if it acts freely on the ranks (every rank orbit has
   ``|G|`` elements).
2. :func:`symmetric_trees` builds spanning out-trees only for one root per rank orbit, directly on
   the original topology (tree edges are rank-to-rank routes whose inner nodes are switches), and
   maps them to every other root by the group. Capacity is accounted per *link orbit*: a
   representative tree using link ``l`` puts ``|G| / |orbit(l)|`` trees on every link of the
   orbit once the images are added, so a representative may use ``l`` only while
   ``load(orbit) + |G| / |orbit| <= caps[l]`` (``caps`` of the :class:`~.optimality.Optimum`).
   Trees grow round-robin, one edge per turn, by a multi-source breadth-first search from the
   tree's members (shallowest first) through switches on links with room left, so trees come
   out short (``round_robin=None`` retries a stuck construction growing one tree after the
   other).

The construction is a greedy heuristic: it may get stuck although a packing exists; it then
returns None and :func:`~collsynth.synth.forestcoll.forestcoll_trees` runs the exact pipeline
(edge splitting + Algorithm 5). When it succeeds, the trees meet the optimum exactly: ``k``
trees per root, every link carries at most ``caps[e]`` trees (re-checked by
``tree_congestion``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ...topology.model import Topology


def _link_key(l) -> tuple:
    return (l.src, l.dst, l.bw, l.alpha, l.cls, l.lanes)


def _link_perm(topo: Topology, p: list[int]) -> list[int] | None:
    """Link permutation induced by node permutation ``p``, or None if not an automorphism."""
    buckets: dict[tuple, list[int]] = {}
    for l in topo.links:
        buckets.setdefault(_link_key(l), []).append(l.id)
    pos = {key: 0 for key in buckets}
    out = [0] * len(topo.links)
    for l in topo.links:
        key = (p[l.src], p[l.dst], l.bw, l.alpha, l.cls, l.lanes)
        ids = buckets.get(key)
        if ids is None or pos[key] >= len(ids):
            return None
        out[l.id] = ids[pos[key]]
        pos[key] += 1
    return out


def _attr_perm(topo: Topology, attr: str, shift: int) -> list[int] | None:
    """Node permutation shifting integer attribute ``attr`` by ``shift`` (mod its range per
    node kind/role), all other attributes kept; None if some image does not exist."""
    nodes = topo.nodes
    key_of = {}
    ranges: dict[tuple, int] = {}
    for nd in nodes:
        a = nd.attrs
        grp = (nd.kind, a.get("role"))
        if attr in a:
            if not isinstance(a[attr], int) or a[attr] < 0:
                return None
            ranges[grp] = max(ranges.get(grp, 0), a[attr] + 1)
        key_of[(nd.kind, tuple(sorted((k, repr(v)) for k, v in a.items())))] = nd
    p = []
    for i, nd in enumerate(nodes):
        a = nd.attrs
        if attr not in a:
            p.append(i)
            continue
        b = dict(a)
        b[attr] = (a[attr] + shift) % ranges[(nd.kind, a.get("role"))]
        img = key_of.get((nd.kind, tuple(sorted((k, repr(v)) for k, v in b.items()))))
        if img is None:
            return None
        p.append(topo.index(img.name) if hasattr(topo, "index") else nodes.index(img))
    if sorted(p) != list(range(len(nodes))):
        return None
    return p


def automorphisms(topo: Topology, max_order: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """A verified automorphism group acting freely on the ranks (see the module doc).

    Returns ``(node_perms, link_perms)`` (one row per group element, the identity first) or
    None if no nontrivial such group is found (or it has more than ``max_order`` elements;
    default: as many as fit in about 400 MB of permutation tables).
    """
    if max_order is None:
        max_order = max(2, 50_000_000 // max(1, topo.num_nodes + len(topo.links)))
    gens = []
    p = _attr_perm(topo, "chassis", 1)
    if p is not None and p != list(range(len(p))) and _link_perm(topo, p) is not None:
        gens.append(p)
    ranges = [nd.attrs["local"] for nd in topo.nodes if isinstance(nd.attrs.get("local"), int)]
    if ranges:
        for d in range(1, max(ranges) + 1):
            p = _attr_perm(topo, "local", d)
            if p is not None and p != list(range(len(p))) and _link_perm(topo, p) is not None:
                gens.append(p)
                break
    if not gens:
        return None
    glinks = [np.array(_link_perm(topo, g), dtype=np.int64) for g in gens]
    garr = [np.array(g, dtype=np.int64) for g in gens]
    ident = np.arange(topo.num_nodes, dtype=np.int64)
    elems = {ident.tobytes(): None}
    nodes_l = [ident]
    links_l = [np.arange(len(topo.links), dtype=np.int64)]
    q = deque([0])
    while q:
        i = q.popleft()
        for g, gl in zip(garr, glinks):
            c = g[nodes_l[i]]                  # apply element i, then the generator
            key = c.tobytes()
            if key not in elems:
                elems[key] = None
                nodes_l.append(c)
                links_l.append(gl[links_l[i]])
                q.append(len(nodes_l) - 1)
                if len(nodes_l) > max_order:
                    return None
    comp = topo.compute_nodes.tolist()
    P = np.array(nodes_l, dtype=np.int64)
    # free on ranks: no non-identity element fixes a compute node
    if (P[1:][:, comp] == np.array(comp)[None, :]).any():
        return None
    L = np.array(links_l, dtype=np.int64)
    return P, L


def symmetric_trees(topo: Topology, opt, group=None, round_robin: bool | None = True
                    ) -> tuple[list[tuple[int, int, list[tuple[int, int, tuple[int, ...]]]]],
                               dict[str, Any]] | None:
    """Trees for every root from trees for one root per orbit (see the module doc), or None.

    ``round_robin``: grow the representative trees one edge per turn (True, default, shorter
    trees) or one tree after the other (False); None tries round-robin first, then one after
    the other. One after the other succeeds more often (h800_rails) but its trees simulated
    worse there (1.19x the bound against 1.03x for the exact pipeline), so it is not the
    default.
    """
    if group is None:
        group = automorphisms(topo)
    if group is None:
        return None
    if round_robin is None:
        got = symmetric_trees(topo, opt, group, True)
        if got is None:
            got = symmetric_trees(topo, opt, group, False)
        return got
    P, L = group
    G = len(P)
    k = int(opt.k)
    comp = [int(v) for v in topo.compute_nodes]
    is_comp = [bool(c == 0) for c in topo.kind_codes.tolist()]
    rank = topo.rank_of_node
    # rank orbits -> representatives
    seen: set[int] = set()
    reps = []
    for v in comp:
        if v not in seen:
            reps.append(v)
            seen.update(int(x) for x in P[:, v])
    # link orbits
    nl = len(topo.links)
    orbit = [-1] * nl
    osize: list[int] = []
    for l in range(nl):
        if orbit[l] < 0:
            imgs = set(int(x) for x in L[:, l])
            for x in imgs:
                orbit[x] = len(osize)
            osize.append(len(imgs))
    inc = [G // osize[orbit[l]] for l in range(nl)]
    caps = [int(c) for c in opt.caps]
    ocap = [0] * len(osize)
    for l in range(nl):
        ocap[orbit[l]] = caps[l]   # an automorphism keeps bandwidth, hence caps
    oload = [0] * len(osize)
    out_links: list[list[int]] = [[] for _ in range(topo.num_nodes)]
    for l in topo.links:
        if caps[l.id] > 0:
            out_links[l.src].append(l.id)
    dst = topo.link_dst.tolist()
    n = len(comp)
    # one tree of multiplicity 1 per (rep, j), j < k
    trees = [{"root": r, "members": {r: 0}, "order": [r], "edges": []}
             for r in reps for _ in range(k)]
    steps = 0
    active = list(range(len(trees)))
    while active:
        nxt = []
        for ti in active:
            t = trees[ti]
            members = t["members"]
            # multi-source BFS from members (shallowest first) through switches
            prev: dict[int, int] = {}
            q = deque(t["order"])
            visited = set(t["order"])
            found = None
            while q and found is None:
                x = q.popleft()
                for l in out_links[x]:
                    o = orbit[l]
                    if oload[o] + inc[l] > caps[l]:
                        continue
                    y = dst[l]
                    if y in visited:
                        continue
                    visited.add(y)
                    prev[y] = l
                    if is_comp[y]:
                        found = y
                        break
                    q.append(y)
            if found is None:
                return None
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
            if any(oload[o] + d > ocap[o] for o, d in need.items()):
                return None
            for o, d in need.items():
                oload[o] += d
            members[found] = members[y] + 1
            t["order"].append(found)
            t["edges"].append((y, found, tuple(route)))
            steps += 1
            if len(members) < n:
                if round_robin:
                    nxt.append(ti)
                else:
                    nxt.insert(0, ti)
                    break
        if not round_robin:
            nxt += [x for x in active if x not in nxt and len(trees[x]["members"]) < n]
        active = nxt
    # images under the group; identical trees of a root merge into one batch
    batches: dict[tuple[int, tuple], int] = {}
    rank_arr = np.asarray(rank, dtype=np.int64)
    for t in trees:
        es = t["edges"]
        par = rank_arr[P[:, [a for a, _, _ in es]]].tolist()
        chi = rank_arr[P[:, [b for _, b, _ in es]]].tolist()
        flat = [l for _, _, route in es for l in route]
        offs = np.cumsum([0] + [len(route) for _, _, route in es]).tolist()
        lnk = L[:, flat].tolist()
        roots = rank_arr[P[:, t["root"]]].tolist()
        for g in range(G):
            pg, cg, lg = par[g], chi[g], lnk[g]
            edges = tuple((pg[i], cg[i], tuple(lg[offs[i]:offs[i + 1]])) for i in range(len(es)))
            key = (roots[g], edges)
            batches[key] = batches.get(key, 0) + 1
    routed = [(root, m, list(edges)) for (root, edges), m in batches.items()]
    routed.sort(key=lambda x: (x[0], -x[1]))
    info = {"group_order": G, "representatives": len(reps), "link_orbits": len(osize),
            "round_robin": round_robin,
            "steps": steps}
    return routed, info
