"""The ForestColl pipeline, :func:`forestcoll_trees`: the optimum (or a fixed ``k``), the
symmetric fast path or switch removal and packing, routing, the congestion check and the
``info`` report; ``direction="in"`` builds ReduceScatter in-trees on the transposed topology.
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
    optimal_allgather,
    simplest_between,
    transpose,
)
from ...schedule.dag import owners, ragged_arange
from ...schedule.trees import TreeForm
from ...topology.model import Topology
from .packing import pack_trees
from .routing import route_trees, routed_form, tree_congestion
from .splitting import LogicalTopology, remove_switches
from .symmetry import automorphisms, symmetric_trees

#: Ranks from which :func:`forestcoll_trees` tries the symmetric fast path by default.
SYMMETRY_MIN_RANKS = 32


def forestcoll_trees(
    topo: Topology,
    k: int | None = None,
    direction: str = "out",
    *,
    accelerate: bool = True,
    spread: bool = False,
    symmetry: bool | None = None,
    representatives: bool = False,
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
    for topologies with at least :data:`SYMMETRY_MIN_RANKS` ranks. ``representatives``: where
    the symmetric construction succeeds, return the trees of one root per rank orbit only (for
    the compact form; ``info["symmetry"]["images"]`` is False, congestion is checked with
    every image counted, and ``info["trees"]`` counts every root's trees).

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
    routed, cong, sym_info = (_symmetric(work, opt, representatives) if use_sym
                              else (None, None, None))  # fmt: skip
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
        routed = routed_form(route_trees(work, logical, packed))
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


def _symmetric(
    work: Topology, opt: Optimum, representatives: bool = False
) -> tuple[Any, Any, dict[str, Any]]:
    """The symmetric fast path: ``(routed trees or None, their congestion check, info)``;
    ``representatives``: the representative roots' trees only (see :func:`forestcoll_trees`)."""
    group = automorphisms(work)
    got = symmetric_trees(work, opt, group, images=not representatives) if group else None
    if got is None:
        return None, None, {"rejected": "no free automorphism group, or the greedy got stuck"}
    cand, sym_info = got
    assert group is not None
    cong = tree_congestion(work, opt, cand, group[1] if representatives else None)
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
    owner = owners(ptr)
    pos = ragged_arange(np.diff(ptr))
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
    # representatives only: each stands for its images under the group (the same heights)
    images = 1 if (sym_info or {}).get("images", True) else int(sym_info["group_order"])
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
        "trees": len(routed) * images,
        "packed_batches": packed_batches * images,
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
