"""Routing packed trees back onto the original topology, and checking their congestion.

:func:`route_trees` gives every edge of the trees packed on the switch-free logical topology
(:mod:`.packing`) a link path through the original switches (the routing table of
:mod:`.splitting`); :func:`tree_congestion` checks routed trees against the optimum (no link
carries more trees than its capacity, every route a valid path) and measures the time per
shard byte they achieve; :func:`routed_form` turns routed trees into a
:class:`~collsynth.schedule.trees.TreeForm`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from ...errors import CollsynthError
from ...flow.optimality import Optimum
from ...schedule.dag import owners
from ...schedule.trees import Tree, TreeForm
from ...topology.model import Topology
from ...topology.symmetry import orbit_ids
from .splitting import LogicalTopology


def route_trees(
    topo: Topology, logical: LogicalTopology, packed: list[tuple[int, int, list[tuple[int, int]]]]
) -> list[tuple[int, int, list[tuple[int, int, tuple[int, ...]]]]]:
    """Give every tree edge a link path from ``logical.routing`` (ranks -> routes in ``topo``).

    Each logical arc's routing pieces are consumed by the tree edges that use the arc (counting
    multiplicity), largest multiplicity first, shortest path first, so the trees use every path
    at most its capacity. A tree batch whose edge needs two paths is split into trees of smaller
    multiplicity. Returns ``[(root, mult, [(parent, child, route), ...]), ...]``.
    """
    users: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for ti, (_, mult, edges) in enumerate(packed):
        for e in edges:
            users.setdefault(e, []).append((ti, mult))
    assign: list[dict[tuple[int, int], list[tuple[tuple[int, ...], int]]]] = [{} for _ in packed]
    for e, occ in sorted(users.items()):
        # [path, remaining capacity] pairs, mutated as tree edges take capacity
        pieces: list[list[Any]] = [[path, c] for path, c in logical.routing.get(e, [])]
        if sum(m for _, m in occ) > sum(c for _, c in pieces):
            raise CollsynthError(f"logical arc {e} is used beyond its capacity")
        for ti, mult in sorted(occ, key=lambda o: (-o[1], o[0])):
            fit = next((p for p in pieces if p[1] >= mult), None)
            if fit is not None:
                fit[1] -= mult
                assign[ti][e] = [(fit[0], mult)]
                continue
            parts = []
            need = mult
            for p in pieces:
                if need == 0:
                    break
                d = min(p[1], need)
                if d > 0:
                    parts.append((p[0], d))
                    p[1] -= d
                    need -= d
            assign[ti][e] = parts
    out = []
    for ti, (root, mult, edges) in enumerate(packed):
        cuts = {0, mult}
        for e in edges:
            acc = 0
            for _, d in assign[ti][e]:
                acc += d
                cuts.add(acc)
        cuts_sorted = sorted(cuts)
        for lo, hi in zip(cuts_sorted, cuts_sorted[1:]):
            redges = []
            for e in edges:
                acc = 0
                for path, d in assign[ti][e]:
                    if acc <= lo < acc + d:
                        redges.append((e[0], e[1], tuple(path)))
                        break
                    acc += d
            out.append((root, hi - lo, redges))
    return out


def tree_congestion(
    topo: Topology, opt: Optimum, routed: Any, link_perms: np.ndarray | None = None
) -> dict[str, Any]:
    """Check routed out-trees against ``opt``: tree count per link <= ``opt.caps``; routes
    valid (non-empty link paths from the parent's node to the child's, through switches and
    routers only). ``routed``: a :class:`TreeForm` or ``[(root, mult, [(parent, child, route),
    ...]), ...]``. ``link_perms`` (a group's link permutations, one row per element): the
    trees stand for themselves and all their images under the group, so every link of an
    orbit ``O`` carries ``|G| / |O|`` times the trees its orbit's links carry together (each
    image of a route is a valid route: the group consists of automorphisms).

    ``inv_x`` is the exact time per shard byte the trees achieve in the flow model:
    ``max_e load_e / (k * b_e)`` (load in trees counting multiplicity).
    """
    c = routed_form(routed).columns
    ptr, links = c["edge_route_ptr"], c["edge_route_links"]
    rlen = np.diff(ptr)
    edge_mult = c["tree_mult"][owners(c["tree_ptr"])]
    nl = len(topo.links)
    valid = bool(links.size == 0 or (links.min() >= 0 and links.max() < nl))
    load_arr = np.bincount(links, weights=edge_mult[owners(ptr)], minlength=nl)[:nl]
    if link_perms is not None:
        orbit, size = orbit_ids(link_perms)
        per_orbit = np.bincount(orbit, weights=load_arr, minlength=len(size))
        load_arr = per_orbit[orbit] * (len(link_perms) // size[orbit])
    load = [int(x) for x in np.rint(load_arr).tolist()]
    if valid and len(rlen):
        comp = np.asarray(topo.compute_nodes, dtype=np.int64)
        lsrc, ldst = topo.link_src.astype(np.int64), topo.link_dst.astype(np.int64)
        first = np.flatnonzero(rlen > 0)
        valid = bool(
            np.all(rlen > 0)
            and np.array_equal(lsrc[links[ptr[:-1][first]]], comp[c["edge_from"][first]])
            and np.array_equal(ldst[links[ptr[1:][first] - 1]], comp[c["edge_to"][first]])
        )
        inner = np.ones(len(links), dtype=bool)  # a link that follows another of its route
        inner[ptr[:-1][first]] = False
        later = np.flatnonzero(inner)
        valid = valid and bool(
            np.array_equal(ldst[links[later - 1]], lsrc[links[later]])
            and np.all(topo.kind_codes[lsrc[links[later]]] != 0)
        )
    over = [l for l, x in enumerate(load) if x > opt.caps[l]]
    inv_x = max(
        (Fraction(x, opt.k) / (opt.int_bw[l] * opt.unit) for l, x in enumerate(load) if x),
        default=Fraction(0),
    )
    return {
        "ok": not over and valid,
        "routes_valid": valid,
        "overloaded_links": over,
        "max_load_over_cap": max(
            (Fraction(x, c) for x, c in zip(load, opt.caps) if c), default=Fraction(0)
        ),
        "inv_x": inv_x,
        "load": load,
    }


def routed_form(routed: Any) -> TreeForm:
    """Routed trees ``[(root, mult, edges), ...]`` as a :class:`TreeForm` of out-trees."""
    if isinstance(routed, TreeForm):
        return routed
    return TreeForm(
        [Tree(r, tuple((a, b, tuple(rt)) for a, b, rt in es), m) for r, m, es in routed]
    )
