"""ForestColl (Zhao et al., 'ForestColl: Throughput-Optimal Collective Communications on
Heterogeneous Network Fabrics', arXiv 2402.06787): optimal spanning-tree AllGather /
ReduceScatter schedules for any topology, switches included.

Implements §3 (optimality (1)), §4.2-4.6 and Appendix C (Algorithms 1, 3, 4, 5; Theorems 1, 5,
8, 12, 13, 14; Propositions 2, 3):

* :func:`optimal_allgather` — exact rational optimum and bottleneck cut, ``k`` and ``y``
  (Algorithm 1 + Proposition 2/3), and :func:`fixed_k` — best time with exactly ``k`` trees
  per root (Algorithm 3, Theorem 14): the optimality search lives in
  :mod:`collsynth.flow.optimality` (the exact cut bounds of :mod:`collsynth.bound` use it too)
  and is re-exported here;
* :func:`remove_switches` — switch/router removal by edge splitting with Theorem 8's maximum safe
  ``gamma`` at once (Algorithm 4), with a routing table back to link paths, in :mod:`.splitting`;
* :func:`pack_trees` — batched spanning out-tree packing with multiplicities ``mu`` from one
  max-flow each (Algorithm 5, Theorem 12), in :mod:`.packing`;
* :func:`forestcoll_trees` — the whole pipeline, mapped back to routes through the original
  switches, as a :class:`~collsynth.schedule.trees.TreeForm`; ``direction="in"`` builds
  ReduceScatter in-trees by running on the transposed topology (§4.6).

Departures from the paper (details in each module's docstring): the binary searches also use
the min cut of failed probes as a certified lower bound (a Newton step; ``accelerate=False``
gives Algorithm 1/3 literally, same exact result); probe points are the simplest fractions in
the middle half of the bracket; the split order and the tree-growth order are our own
deterministic heuristics (farthest pairs first, breadth-first trees); when a logical arc's
capacity is carried by several switch paths and a tree batch needs more than one of them, the
batch is split into trees of smaller multiplicity with one route per edge; a composed switch
path that revisits a switch is shortcut (it then uses fewer links). Allreduce's LP
(Appendix E) is solved only as a check (:func:`allreduce_lp`). Symmetry (:mod:`.symmetry`, on
by default from :data:`SYMMETRY_MIN_RANKS` ranks): trees for one root per orbit of a verified
automorphism group, mapped to the others, same optimum, congestion re-checked, exact pipeline as
fallback. Edge splitting is guaranteed only for Eulerian topologies (the paper's assumption);
otherwise :attr:`LogicalTopology.preserved` says whether it worked; if it did not,
:func:`forestcoll_trees` raises the per-tree capacity scale ``U`` in small steps until splitting
works and reports the slowdown (``info["fallback"]``).

Max-flows are OR-Tools ``SimpleMaxFlow`` on exact integers (:mod:`collsynth.flow.maxflow`).
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

import numpy as np

from ...errors import CollsynthError
from ...flow.maxflow import COUNTERS as _MAXFLOWS
from ...flow.optimality import (
    Optimum,
    at_scale,
    fixed_k,
    integer_bandwidths,
    optimal_allgather,
    simplest_between,
    transpose,
)
from ...schedule.trees import Tree, TreeForm
from ...topology.model import Topology
from .allreduce_lp import allreduce_lp
from .packing import pack_trees
from .splitting import LogicalTopology, remove_switches
from .symmetry import automorphisms, symmetric_trees

#: Ranks from which :func:`forestcoll_trees` tries the symmetric fast path by default.
SYMMETRY_MIN_RANKS = 32

__all__ = [
    "Optimum",
    "LogicalTopology",
    "optimal_allgather",
    "fixed_k",
    "remove_switches",
    "pack_trees",
    "forestcoll_trees",
    "transpose",
    "simplest_between",
    "integer_bandwidths",
    "route_trees",
    "tree_congestion",
    "automorphisms",
    "symmetric_trees",
    "SYMMETRY_MIN_RANKS",
    "allreduce_lp",
]


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


def tree_congestion(topo: Topology, opt: Optimum, routed: Any) -> dict[str, Any]:
    """Check routed out-trees against ``opt``: tree count per link <= ``opt.caps``; routes
    valid (non-empty link paths from the parent's node to the child's, through switches and
    routers only). ``routed``: a :class:`TreeForm` or ``[(root, mult, [(parent, child, route),
    ...]), ...]``.

    ``inv_x`` is the exact time per shard byte the trees achieve in the flow model:
    ``max_e load_e / (k * b_e)`` (load in trees counting multiplicity).
    """
    c = _routed_form(routed).columns
    ptr, links = c["edge_route_ptr"], c["edge_route_links"]
    rlen = np.diff(ptr)
    edge_mult = np.repeat(c["tree_mult"], np.diff(c["tree_ptr"]))
    nl = len(topo.links)
    load_arr = np.bincount(links, weights=np.repeat(edge_mult, rlen), minlength=nl)
    load = [int(x) for x in np.rint(load_arr[:nl]).tolist()]
    valid = bool(links.size == 0 or (links.min() >= 0 and links.max() < nl))
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


def _routed_form(routed: Any) -> TreeForm:
    """Routed trees ``[(root, mult, edges), ...]`` as a :class:`TreeForm` of out-trees."""
    if isinstance(routed, TreeForm):
        return routed
    return TreeForm(
        [Tree(r, tuple((a, b, tuple(rt)) for a, b, rt in es), m) for r, m, es in routed]
    )


def forestcoll_trees(
    topo: Topology,
    k: int | None = None,
    direction: str = "out",
    *,
    accelerate: bool = True,
    spread: bool = False,
    symmetry: bool | None = None,
) -> tuple[TreeForm, Optimum, dict[str, Any]]:
    """The ForestColl pipeline: optimum (or fixed ``k``), switch removal, packing, routing.

    ``direction="out"``: AllGather/Broadcast out-trees, edges ``(parent, child, route)``.
    ``direction="in"``: ReduceScatter/Reduce in-trees built as out-trees of the transposed
    topology; edges ``(child, parent, route)`` in data-flow direction, routes in ``topo``; the
    returned :class:`Optimum` is that of the transposed topology (its link ids are ``topo``'s).

    ``k``: trees per root (None: the optimum's ``k``, Algorithm 1; else Algorithm 3).
    ``accelerate``: Newton steps in the searches (same result). ``spread``: see
    :mod:`.splitting` (default off = the paper's maximum split).
    ``symmetry``: build trees for one root per orbit of a verified automorphism group and map
    them to the other roots (:mod:`.symmetry`; same optimum, congestion re-checked, falls back
    to splitting + packing when the greedy gets stuck or the check fails). None (default): only
    for topologies with at least :data:`SYMMETRY_MIN_RANKS` ranks.

    Returns ``(TreeForm, Optimum, info)``; ``info`` holds ``k``, the bottleneck cut, tree heights,
    the congestion check (``congestion.ok``: no link carries more trees than its capacity, every
    route is a path through switches/routers only), the achieved ``inv_x``, timings and
    max-flow counts.
    """
    if direction not in ("out", "in"):
        raise CollsynthError(f"direction must be 'out' or 'in', got {direction!r}")
    work = topo if direction == "out" else transpose(topo)
    mf0 = _MAXFLOWS["maxflows"]
    t0 = time.perf_counter()
    opt = (
        optimal_allgather(work, accelerate=accelerate)
        if k is None
        else fixed_k(work, int(k), accelerate=accelerate)
    )
    t1 = time.perf_counter()
    bound = opt
    use_sym = symmetry if symmetry is not None else topo.num_ranks >= SYMMETRY_MIN_RANKS
    routed, cong, sym_info = _symmetric(work, opt) if use_sym else (None, None, None)
    packed: Any = routed
    t_sym = time.perf_counter() - t1
    fallback_steps = 0
    logical = None
    pstats: dict = {}
    t2 = t3 = time.perf_counter()
    if routed is None:
        logical, opt, fallback_steps = _split(topo, work, opt, spread)
        t2 = time.perf_counter()
        packed = pack_trees(logical, opt.k, stats=pstats)
        t3 = time.perf_counter()
        routed = _routed_form(route_trees(work, logical, packed))
        cong = tree_congestion(work, opt, routed)
    t4 = time.perf_counter()
    timings = {
        "optimum": t1 - t0,
        "symmetry": t_sym,
        "split": t2 - t1 - t_sym,
        "pack": t3 - t2,
        "route": t4 - t3,
        "total": t4 - t0,
    }
    info = _info(
        topo.num_ranks,
        direction,
        opt,
        bound,
        routed,
        len(packed),
        cong,
        sym_info,
        logical,
        fallback_steps,
        timings,
        pstats,
        _MAXFLOWS["maxflows"] - mf0,
    )
    return _oriented(routed, direction), opt, info


def _symmetric(work: Topology, opt: Optimum) -> tuple[Any, Any, dict[str, Any]]:
    """The symmetric fast path: ``(routed trees or None, their congestion check, info)``."""
    got = symmetric_trees(work, opt)
    if got is None:
        return None, None, {"rejected": "no free automorphism group, or the greedy got stuck"}
    cand, sym_info = got
    cong = tree_congestion(work, opt, cand)
    if not cong["ok"]:  # pragma: no cover - the orbit accounting makes this impossible
        return None, cong, dict(sym_info, rejected="congestion check failed")
    return cand, cong, sym_info


def _split(
    topo: Topology, work: Topology, opt: Optimum, spread: bool
) -> tuple[LogicalTopology, Optimum, int]:
    """Switch removal by edge splitting: ``(logical topology, optimum, fallback steps)``."""
    bound = opt
    fallback_steps = 0
    logical, _ = remove_switches(work, opt, spread=spread)
    if not logical.preserved:
        # Not Eulerian (the paper's assumption fails): raise U (per-tree capacity scale) in
        # steps of 1/16 until edge splitting keeps k trees per root; the trees are then
        # slower than the bound by the factor reported in info["fallback"].
        U = opt.U
        while not logical.preserved:
            fallback_steps += 1
            if fallback_steps > 400:
                raise CollsynthError(
                    f"ForestColl edge splitting failed on {topo.name!r} (not Eulerian)"
                )
            U = simplest_between(U * Fraction(33, 32), U * Fraction(17, 16))
            opt = at_scale(work, bound.k, U, note="non-Eulerian fallback")
            logical, _ = remove_switches(work, opt, spread=spread)
    return logical, opt, fallback_steps


def _oriented(routed: TreeForm, direction: str) -> TreeForm:
    """Routed out-trees of the working topology as the result's :class:`TreeForm`; for
    ``direction="in"`` the in-trees, edges reversed to data flow (``(child, parent, route
    reversed)``)."""
    if direction == "out":
        return routed
    c = routed.columns
    ptr = c["edge_route_ptr"]
    rlen = np.diff(ptr)
    owner = np.repeat(np.arange(len(rlen)), rlen)
    pos = np.arange(len(c["edge_route_links"])) - ptr[owner]
    cols = dict(c)
    cols.update(
        tree_in=np.ones_like(c["tree_in"]),
        edge_from=c["edge_to"],
        edge_to=c["edge_from"],
        edge_route_links=c["edge_route_links"][ptr[owner + 1] - 1 - pos],
    )
    return TreeForm(columns=cols)


def _info(
    n: int,
    direction: str,
    opt: Optimum,
    bound: Optimum,
    routed,
    packed_batches: int,
    cong,
    sym_info,
    logical,
    fallback_steps: int,
    timings: dict,
    pstats: dict,
    maxflows: int,
) -> dict[str, Any]:
    """The ``info`` of :func:`forestcoll_trees` (see its docstring)."""
    heights = routed.heights(n).tolist()
    mults = routed.columns["tree_mult"].tolist()
    return {
        "direction": direction,
        "fallback": None
        if not fallback_steps
        else {
            "reason": "edge splitting lost trees (topology not Eulerian)",
            "steps": fallback_steps,
            "slowdown": float(opt.inv_x / bound.inv_x),
            "bound_inv_x": bound.inv_x,
        },
        "k": opt.k,
        "fixed_k": opt.fixed_k,
        "U": opt.U,
        "tree_bw_Bps": float(opt.y),
        "inv_x": opt.inv_x,
        "algbw_Bps": opt.algbw,
        "bottleneck_cut": list(opt.cut_names) if opt.cut_names is not None else None,
        "bottleneck_cut_compute": opt.cut_compute,
        "trees": len(routed),
        "packed_batches": packed_batches,
        "heights": {
            "max": max(heights),
            "mean": sum(h * m for h, m in zip(heights, mults)) / sum(mults),
            "per_tree": heights,
        },
        "congestion": {
            "ok": cong["ok"],
            "routes_valid": cong["routes_valid"],
            "overloaded_links": cong["overloaded_links"],
            "max_load_over_cap": cong["max_load_over_cap"],
            "inv_x": cong["inv_x"],
            "meets_bound": cong["inv_x"] <= opt.inv_x,
        },
        "symmetry": sym_info,
        "logical_arcs": len(logical.caps) if logical is not None else None,
        "dropped_capacity": dict(logical.dropped) if logical is not None else {},
        "timings_s": timings,
        "maxflows": {
            "optimum": opt.stats.get("maxflows"),
            "split": logical.stats.get("maxflows") if logical is not None else 0,
            "pack": pstats.get("maxflows"),
            "total": maxflows,
        },
    }
