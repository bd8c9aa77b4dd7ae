"""``forestcoll`` — the ForestColl synthesizer (Zhao et al., "ForestColl: Throughput-Optimal
Collective Communications on Heterogeneous Network Fabrics", arXiv 2402.06787): trees to IR, per
message size.

AllGather uses the packed out-trees, ReduceScatter the in-trees built on the transposed topology
(§4.6), AllReduce both (reduce up the in-trees, then broadcast down the out-trees): either
ReduceScatter + AllGather trees that split each root's data alike (the in-trees use the
out-trees' ``k`` through Algorithm 3), or, on switch-free topologies where Appendix E's LP is
at least 1% faster (``LP_GAIN``), the LP's trees (:mod:`.lp_trees`: unequal shares per root,
reduce and broadcast sharing each link), kept where the estimate below says they are faster;
or, where ranks' egress and ingress differ (two DGX-2: the odd GPUs send over InfiniBand, the even
ones receive), ReduceScatter and AllGather trees packed on each phase's own share of every link
and run at once (:mod:`.shares`), where that is at least 1% faster too; synthesis pipelines
their phases (``meta["overlap_phases"]``) and also keeps the best other choice as an
alternative, so that the realized model decides.
Trees are lowered by :func:`collsynth.schedule.trees.lower`: every root's data is cut into
``k * pipeline`` chunks (the LP's trees: the buffer into ``K * pipeline``, ``k_v * pipeline``
per root); a tree batch of multiplicity ``m`` is lowered as ``m`` identical trees (see
:func:`_unit_trees`).

Every ``k`` is also packed with classes of links (one bandwidth each) scaled down to
``SLACK_SCALE`` (:func:`_slack_variant`); where that keeps the optimum and the tree height,
those trees replace the ``k``'s own (the estimate below, and so the choice of ``k`` and
pipeline depth, is unchanged): they leave slack on links the optimum does not need full,
which the realized (fairly shared) model rewards (docs/simulator.md).

Without a size the schedule is the paper's: the optimum's ``k`` and no pipelining (one chunk
per tree; pipelining is left to the runtime). Per size (departure from the paper): with ``k``
and ``pipeline`` left to ``auto`` the synthesizer scans small ``k`` (1, 2, 4 and the
optimum's) and pipeline depths and keeps the one with the smallest estimated time

    T(k, P) = T_bw(k) * (1 + (h_k - 1) / (FILL_SHARE * P)) + h_k * alpha_max

where ``T_bw(k)`` is the exact bandwidth time with ``k`` trees per root (Algorithm 1/3),
``h_k`` the tallest tree (in transfers) and ``alpha_max`` the largest route alpha: the pipeline
fill of the tallest tree plus its propagation delays. A lone tree would fill in
``(h - 1) / P`` of its time, but the trees of all roots share every link and the last pieces
drain at full link speed once the others are done, so the fill is far smaller: ``FILL_SHARE``
is calibrated on simulations (mi250:chassis=2, h = 13..15: the fill measured ``0.31/P`` to
``0.45/P``, i.e. ``(h - 1) / (31..45 P)``; flatter trees on NVSwitch fabrics fill even less).
Reductions up in-trees wait at every merge for the slowest child, and fill about three times as
long (ReduceScatter on mi250:chassis=2: ``1.3/P``), hence ``FILL_SHARE_IN`` when in-trees are
used. Besides the depths in ``PIPELINES`` the deepest pipeline the limits allow is tried. The
simulator charges nothing per message, so this estimate always favours deeper pipelines; two
limits keep them real: pieces are no smaller than ``MIN_PIECE`` bytes (a runtime pays a
per-message cost that the alpha-beta model omits; NCCL's own pipeline slices are far larger),
and the number of operations stays under ``OP_BUDGET`` so that 1000-GPU schedules remain
tractable to verify and simulate.

The estimate is good to a few tenths of a percent, not better: choices within ``TIE`` (0.2 %)
of the best (at most ``TIE_MAX``) are near ties it cannot order, and are all returned, the best
estimate first, as :class:`~collsynth.synth.registry.Alternatives`. This module never simulates
them; :func:`collsynth.synth.synthesize` orders each and keeps the one that realizes fastest
(AllReduce on mi250:chassis=2 at 1 GB: ``k = 8, P = 94`` is estimated 1.0457x the bound and
realizes 1.034x, ``k = 16, P = 47`` is estimated 1.0467x and realizes 1.028x, in the realized
model).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np

from ... import deadline
from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...flow.optimality import fixed_k, transpose
from ...schedule.compact import CompactSchedule, from_representatives, rank_chunk_generators
from ...schedule.ir import Schedule
from ...schedule.trees import TreeForm, lower
from ...topology.model import Topology
from ...topology.symmetry import AutomorphismGroup, topology_group
from .. import Alternatives, register
from ..options import Option, int_option
from ..order import OVERLAP_PHASES
from .allreduce_lp import allreduce_lp
from .lp_trees import allreduce_lp_trees
from .shares import phase_shares, share_trees
from .trees import forestcoll_trees

#: Largest number of operations the automatic pipeline depth aims for.
OP_BUDGET = 1_500_000
#: Smallest piece (bytes one operation carries) the automatic pipeline depth makes.
MIN_PIECE = 4096
#: Pipeline depths the size-aware choice considers.
PIPELINES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Trees per root the size-aware choice considers (besides the optimum's k).
K_SCAN = (1, 2, 4, 8, 16)
#: Calibrated share of the lone-tree pipeline fill that remains (see the module docstring).
FILL_SHARE = 32
FILL_SHARE_IN = 10
#: Choices whose estimates lie within this share of the best are near ties the estimate cannot
#: tell apart (its fill term is calibrated to a few tenths of a percent at best); up to
#: ``TIE_MAX`` of them are returned as :class:`~collsynth.synth.registry.Alternatives`, and the
#: synthesis keeps the one that realizes fastest (see the module docstring).
TIE = 0.002
TIE_MAX = 3


def _trees(
    topology: Topology,
    kind: CollKind,
    k: int | None,
    symmetry: bool | None = None,
    representatives: bool = False,
) -> tuple[TreeForm, dict]:
    """The trees of ``kind`` (``representatives``: of one root per rank orbit only, where the
    symmetric construction makes them; see :func:`forestcoll_trees`)."""

    def trees(kk: int | None, direction: str) -> tuple[TreeForm, Any, dict]:
        return forestcoll_trees(topology, kk, direction, symmetry=symmetry,
                                representatives=representatives)  # fmt: skip

    if kind is CollKind.ALLGATHER:
        form, opt, info = trees(k, "out")
        return form, {"out": info, "inv_x": opt.inv_x, "k": opt.k}
    if kind is CollKind.REDUCESCATTER:
        form, opt, info = trees(k, "in")
        return form, {"in": info, "inv_x": opt.inv_x, "k": opt.k}
    out_form, out_opt, out_info = trees(k, "out")
    in_form, in_opt, in_info = trees(out_opt.k, "in")
    form = TreeForm.concat([in_form, out_form])
    return form, {
        "out": out_info,
        "in": in_info,
        "inv_x": out_opt.inv_x + in_opt.inv_x,
        "k": out_opt.k,
    }


def _unit_trees(form: TreeForm) -> TreeForm:
    """Every tree of multiplicity ``m`` as ``m`` trees of multiplicity 1.

    :func:`~collsynth.schedule.trees.lower` gives a tree of multiplicity ``m`` ``m * pipeline``
    chunks and prioritises by chunk index, so such a tree advances no faster than a
    multiplicity-1 tree on shared links although it owns ``m`` times the bandwidth, and then
    finishes alone (links idle). As ``m`` copies every tree owns one share and all advance
    together: same operations and loads; on mi250:chassis=2 at 1 GB with k = 4, P = 64 the
    simulated AllGather goes from 1.10x to 1.05x the bound and ReduceScatter from 1.40x to 1.06x.
    """
    return form.unit()


def _height(info: dict) -> int:
    return max(info[d]["heights"]["max"] for d in ("in", "out") if d in info)


def _route_alpha_max(topology: Topology, form: TreeForm) -> float:
    sums = form.route_sums(topology.link_alpha)
    return float(sums.max()) if len(sums) else 0.0


def _estimate(
    topology: Topology, collective: Collective, cand: dict, size: float, pipeline: int
) -> float:
    n = collective.num_ranks
    t_bw = float(cand["inv_x"]) * size / n
    h = cand["height"]
    share = FILL_SHARE_IN if "in" in cand or "lp" in cand else FILL_SHARE
    return t_bw * (1 + (h - 1) / (share * pipeline)) + h * cand["alpha"]


def _max_pipeline(n: int, k: int, kind: CollKind, size: float | None, order: int = 1) -> int:
    """Deepest automatic pipeline: under the operation budget, pieces of >= ``MIN_PIECE``.
    ``order``: the compact form's group order (the budget counts representatives)."""
    per_chunk = _per_chunk(n, kind, order)
    cap = OP_BUDGET // max(1, per_chunk * k)
    if size is not None:
        cap = min(cap, int(size // (n * k * MIN_PIECE)))
    return max(1, cap)


def _per_chunk(n: int, kind: CollKind, order: int = 1) -> int:
    """Operations per chunk of every root (representatives in the compact form: ``order``
    times fewer)."""
    return max(1, n * (n - 1) * (2 if kind is CollKind.ALLREDUCE else 1) // order)


@register(
    "forestcoll",
    collectives={CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLREDUCE},
    summary="ForestColl: optimal spanning-tree packing (exact bound, edge splitting); "
    "AllGather, ReduceScatter, AllReduce; k and pipelining chosen per size",
    options=(
        Option(
            "k",
            "int",
            "auto",
            words=("auto", "opt"),
            minimum=1,
            maximum=1024,
            shorthand=True,
            unit="trees",
            help="trees per root: auto (scan small k per size), opt (the optimum's "
            "k) or an integer (Algorithm 3)",
        ),
        Option(
            "pipeline",
            "int",
            "auto",
            words=("auto",),
            minimum=1,
            maximum=4096,
            unit="chunks",
            help="chunks per tree: auto (chosen per size) or an integer",
        ),
    ),
    size_aware=True,
    reference="Zhao et al., 'ForestColl: Throughput-Optimal Collective Communications "
    "on Heterogeneous Network Fabrics', arXiv 2402.06787",
    compact_form=True,
)
def forestcoll(
    topology: Topology,
    collective: Collective,
    k: Any = None,
    pipeline: Any = None,
    size: float | None = None,
    compact: bool = False,
) -> Schedule | CompactSchedule | Alternatives:
    """ForestColl trees lowered to pipelined chunk transfers. ``compact``: where the trees
    are built for one root per orbit of the fabric's group and mapped to the others (the
    symmetric construction), lower the representatives' trees only and return the compact
    schedule; the operation budget then counts representatives, so deeper pipelines fit.
    Elsewhere the explicit schedule."""
    group = topology_group(topology) if compact else None
    if group is not None and group.order < 2:
        group = None
    order = group.order if group is not None else 1
    k_opt_only = isinstance(k, str) and k.strip().lower() == "opt"
    k_val = None if k_opt_only else int_option(k, "k", "forestcoll")
    p_val = int_option(pipeline, "pipeline", "forestcoll")
    if collective.chunks_per_rank != 1 and p_val is None:
        p_val = None  # the tree form decides the chunking; C is ignored (documented)
    ks = _k_scan(collective, k_val, k_opt_only, size, order)
    symmetry = True if group is not None else None
    cands = _candidates(topology, collective.kind, ks, symmetry, group is not None)
    if group is not None:
        # only trees that are images of one root's per orbit make a compact form (theirs hold
        # the representatives only); where none are, the schedule is explicit, made again
        # with every root's trees
        symmetric = [c for c in cands if _symmetric(c)]
        if not symmetric:
            group, order = None, 1
            ks = _k_scan(collective, k_val, k_opt_only, size, order)
            cands = _candidates(topology, collective.kind, ks, symmetry)
        cands = symmetric or cands
    if collective.kind is CollKind.ALLREDUCE and k_val is None and group is None:
        rs_ag = min(float(c["inv_x"]) for c in cands)
        cands += _lp_candidate(topology, rs_ag)
        cands += _shares_candidate(topology, rs_ag)
    chosen = _choose(topology, collective, cands, p_val, size, order)
    schedules = tuple(_lower(topology, collective, cands, c, size, group) for c in chosen)
    return schedules[0] if len(schedules) == 1 else Alternatives(schedules)


def _symmetric(cand: dict) -> bool:
    """Whether a candidate's trees came from the symmetric construction (one root per orbit,
    mapped to the others by the group), in every direction."""
    infos = [cand[d] for d in ("in", "out") if d in cand]
    return bool(infos) and all(i.get("symmetry") and not i["symmetry"].get("rejected")
                               for i in infos)  # fmt: skip


def _k_scan(
    collective: Collective, k_val: int | None, k_opt_only: bool, size: float | None,
    order: int = 1,
) -> list[int | None]:  # fmt: skip
    """The trees per root to try (None: the optimum's ``k``)."""
    if k_val is not None:
        return [k_val]
    if k_opt_only or size is None:
        return [None]
    # k beyond the optimum's gains nothing; a k whose single pipeline stage is already over
    # the operation budget is only tried as the optimum's own (or k = 1)
    per_chunk = _per_chunk(collective.num_ranks, collective.kind, order)
    return [None] + [kk for kk in K_SCAN if kk == 1 or kk * per_chunk <= OP_BUDGET]


def _candidates(
    topology: Topology,
    kind: CollKind,
    ks: list[int | None],
    symmetry: bool | None = None,
    representatives: bool = False,
) -> list[dict]:
    """The tree forms of every distinct ``k`` below the optimum's, with their tallest tree and
    largest route alpha (``representatives``: see :func:`_trees`)."""
    cands: list[dict] = []
    seen: set[int] = set()
    k_opt = None
    for kk in ks:
        if kk is not None and k_opt is not None and kk >= k_opt:
            continue
        if cands and deadline.nearly_out():  # the k scan is an extra: keep what was found
            break
        try:
            form, meta = _trees(topology, kind, kk, symmetry, representatives)
        except CollsynthError:
            if kk is None or len(ks) == 1:
                raise
            continue
        if kk is None:
            k_opt = meta["k"]
        if meta["k"] in seen:
            continue
        seen.add(meta["k"])
        meta.update(form=form, height=_height(meta), alpha=_route_alpha_max(topology, form))
        slack = (_slack_variant(topology, kind, meta, symmetry, representatives) if SLACK_SCALE
                 else None)  # fmt: skip
        cands.append(slack or meta)
    return cands


#: The share of a link class's bandwidth that :func:`_slack_variant` leaves the trees (0: no
#: slack variant).
SLACK_SCALE = 0.8
#: Topologies with more link classes (distinct bandwidths) than this get no slack variant.
SLACK_MAX_CLASSES = 4


def _slack_variant(
    topology: Topology,
    kind: CollKind,
    meta: dict,
    symmetry: bool | None = None,
    representatives: bool = False,
) -> dict | None:
    """The same ``k``'s trees packed with some links scaled down to :data:`SLACK_SCALE` of their
    bandwidth, where that leaves the optimum and the tree height as they are (else ``None``).

    An optimal packing fills many links at once, also links that the optimum does not need
    full: on ``a800_clos`` the GPUs that feed a NIC also take nearly all their chassis'
    reductions over NVLink, so the NVLink into them is as busy as the NIC (0.9 of the time);
    on two DGX-2 the 12.5 GB/s links between the chassis run 0.93 busy although the optimum
    needs a third of them. Two full links in series stall each other under fair sharing
    (ReduceScatter at 1 GB, realized model: 1.099x and 1.033x the bound). Each link class (one
    bandwidth) is tried scaled alone, by its exact optimum only; the classes that keep it are
    then scaled together if that keeps it too, else the first alone, and the trees are packed
    once. With the slack, the bottleneck is the only full link (1.003x on both, same model)."""
    classes = sorted({float(b) for b in topology.link_bw}, reverse=True)
    if not 2 <= len(classes) <= SLACK_MAX_CLASSES:
        return None
    kept: list[float] = []
    for bw in classes:
        if deadline.nearly_out():
            return None
        if _optimum_of(_scaled(topology, {bw}), kind, meta["k"]) == meta["inv_x"]:
            kept.append(bw)
    if not kept or deadline.nearly_out():
        return None
    if (
        len(kept) > 1
        and _optimum_of(_scaled(topology, set(kept)), kind, meta["k"]) != meta["inv_x"]
    ):
        kept = kept[:1]
    try:
        form, m2 = _trees(_scaled(topology, set(kept)), kind, meta["k"], symmetry,
                          representatives)  # fmt: skip
    except CollsynthError:
        return None
    if m2["inv_x"] != meta["inv_x"]:  # pragma: no cover - the same optimum as checked
        return None
    # the same height and (for the size estimate) the same alpha: the slack trees take their
    # parent's place and never change which k and pipeline depth the estimate picks
    m2.update(form=form, height=_height(m2), alpha=meta["alpha"])
    if m2["height"] != meta["height"]:
        return None
    m2["slack"] = {"scale": SLACK_SCALE, "links_Bps": kept}
    return m2


def _scaled(topology: Topology, classes: set[float]) -> Topology:
    """``topology`` with the links of bandwidth in ``classes`` at :data:`SLACK_SCALE`."""
    return Topology(
        topology.name,
        list(topology.nodes),
        [replace(l, bw=l.bw * SLACK_SCALE) if l.bw in classes else l for l in topology.links],
        topology.meta,
    )


def _optimum_of(topology: Topology, kind: CollKind, k: int) -> Fraction | None:
    """The exact time per byte of ``k`` trees per root (Algorithm 3), as :func:`_trees` reports
    it (``inv_x``), without packing the trees; ``None`` where there is none."""
    try:
        if kind is CollKind.ALLGATHER:
            return fixed_k(topology, k).inv_x
        if kind is CollKind.REDUCESCATTER:
            return fixed_k(transpose(topology), k).inv_x
        return fixed_k(topology, k).inv_x + fixed_k(transpose(topology), k).inv_x
    except CollsynthError:
        return None


#: The LP's trees must beat ReduceScatter + AllGather's bandwidth time by this factor to be
#: considered (where they tie, as on every fabric whose ranks are alike, the simpler trees stay).
LP_GAIN = 0.99


#: Trees per rank (``K / N``) of the LP's AllReduce trees tried: few trees leave room for a
#: deeper pipeline at mid sizes (mesh2d at 4 MB: 1.14x the bound with 2 per rank against 1.26x
#: for RS + AG), many round the LP's shares more finely.
LP_SCALES = (2, 4, 16)


def _lp_candidate(topology: Topology, rs_ag_inv_x: float) -> list[dict]:
    """AllReduce: the trees of Appendix E's LP (:mod:`.lp_trees`) as more candidates, one per
    :data:`LP_SCALES`, where the topology allows them (no switches, one link per rank pair, LP
    small enough), time is left and their bandwidth time is below ``LP_GAIN`` times
    ReduceScatter + AllGather's (``rs_ag_inv_x``, per shard byte); empty otherwise."""
    if deadline.nearly_out() or topology.num_nodes != topology.num_ranks:
        return []
    n = topology.num_ranks
    try:
        lp = allreduce_lp(topology)
    except CollsynthError:
        return []
    if lp["inv_X"] * n > LP_GAIN * rs_ag_inv_x:
        return []
    out: list[dict] = []
    for scale in LP_SCALES:
        if out and deadline.nearly_out():
            break
        try:
            form, info = allreduce_lp_trees(topology, scale=scale, lp=lp)
        except CollsynthError:
            continue
        if info["inv_time"] * n > LP_GAIN * rs_ag_inv_x:
            continue
        out.append(
            {
                "k": scale,
                "inv_x": info["inv_time"] * n,
                "lp": info,
                "form": form,
                # a piece goes up an in-tree and then down an out-tree before it is done, and
                # with unequal shares no two phases overlap the way RS + AG's do: the fill is
                # that of the whole path
                "height": info["heights"]["in"] + info["heights"]["out"],
                "alpha": _route_alpha_max(topology, form),
            }
        )
    return out


def _shares_candidate(topology: Topology, rs_ag_inv_x: float) -> list[dict]:
    """AllReduce: ReduceScatter and AllGather trees on each phase's share of the links
    (:mod:`.shares`) as one more candidate, where the ranks' egress and ingress differ, time
    is left and the slower phase's bandwidth time is below ``LP_GAIN`` times ReduceScatter +
    AllGather's (``rs_ag_inv_x``); empty otherwise."""
    if deadline.nearly_out():
        return []
    shares = phase_shares(topology)
    if shares is None:
        return []
    try:
        form, meta = share_trees(topology, shares)
    except CollsynthError:
        return []
    if float(meta["inv_x"]) > LP_GAIN * rs_ag_inv_x:
        return []
    # a piece goes up an in-tree and down an out-tree, the two phases overlapping piece by
    # piece as the LP's do: the fill is the whole path's
    meta.update(
        form=form,
        shares=shares,
        height=meta["in"]["heights"]["max"] + meta["out"]["heights"]["max"],
        alpha=_route_alpha_max(topology, form),
    )
    return [meta]


def _choose(
    topology: Topology,
    collective: Collective,
    cands: list[dict],
    p_val: int | None,
    size: float | None,
    order: int = 1,
) -> list[tuple[float, dict, int]]:
    """The (estimated time, candidate, pipeline depth) of least estimated time, then (with a
    size, at most ``TIE_MAX`` in all) those within ``TIE`` of it, by estimate (estimates equal
    to 1e-9: in the candidates' order, the optimum's ``k`` first)."""
    options_all: list[tuple[float, dict, int]] = []
    for cand in cands:
        p_cap = _max_pipeline(collective.num_ranks, cand["k"], collective.kind, size, order)
        if p_val is not None:
            options = [p_val]
        elif size is None:  # no size: the paper's schedule, pipelining left to the runtime
            options = [1]
        else:
            options = sorted({p for p in PIPELINES if p <= p_cap} | {min(p_cap, PIPELINES[-1])})
            if "shares" in cand:  # powers of two only: the phases are pipelined by groups
                options = [p for p in options if p & (p - 1) == 0]  # of whole rounds
        for p in options:
            options_all.append((_estimate(topology, collective, cand, size or 1e9, p), cand, p))
    if not options_all:  # pragma: no cover - _candidates raises before leaving none
        raise CollsynthError("forestcoll: no tree candidate")
    # estimates equal to 1e-9 (they differ in the last bits only) keep the candidates' order
    ref = min(o[0] for o in options_all)
    ranked = sorted(options_all, key=lambda o: round(o[0] / ref, 9) if ref > 0 else o[0])
    if size is None:
        return ranked[:1]
    chosen = [o for o in ranked if o[0] <= ranked[0][0] * (1 + TIE)][:TIE_MAX]
    if "shares" in chosen[0][1]:
        # the shared phases realize their estimate only once pipelined by groups, which the
        # estimate cannot see: the best other choice stays in, for the realized model to judge
        other = next((o for o in ranked if "shares" not in o[1]), None)
        if other is not None and not any(o is other for o in chosen):
            chosen.append(other)
    return chosen


def _lower(
    topology: Topology,
    collective: Collective,
    cands: list[dict],
    best: tuple[float, dict, int],
    size: float | None,
    group: AutomorphismGroup | None = None,
) -> Schedule | CompactSchedule:
    """The chosen trees lowered to IR, with the choice and the trees' facts in ``meta``;
    with ``group``, the trees of one root per rank orbit only, as a compact schedule."""
    est, cand, p = best
    info = {
        "k": cand["k"],
        "pipeline": p,
        "tree_height": cand["height"],
        "optimal_time_per_byte": str(cand["inv_x"] / collective.num_ranks),
        "estimated_time_s": est if size is not None else None,
        "candidates_k": [c["k"] for c in cands if "lp" not in c],
        "allreduce": "lp" if "lp" in cand else ("rs+ag" if "in" in cand and "out" in cand else ""),
    }
    if "shares" in cand:
        sh = cand["shares"]
        info["allreduce"] = "shared phases"
        info["phase_shares"] = {"min": float(sh.min()), "max": float(sh.max())}
    if "lp" in cand:
        lp = cand["lp"]
        info["lp_trees"] = {
            "K": lp["K"],
            "roots_k": lp["ks"],
            "lp_time_per_byte": lp["inv_X"],
            "rounding_loss": lp["rounding_loss"],
            "trees": lp["trees"],
            "synth_wall_s": sum(lp["timings_s"].values()),
        }
    if not info["allreduce"]:
        del info["allreduce"]
    if "slack" in cand:
        info["slack"] = cand["slack"]
    for d in ("out", "in"):
        if d in cand:
            inf = cand[d]
            info[f"{d}_trees"] = {
                "trees": inf["trees"],
                "bottleneck_cut": inf["bottleneck_cut"],
                "heights_max": inf["heights"]["max"],
                "heights_mean": inf["heights"]["mean"],
                "congestion_ok": inf["congestion"]["ok"],
                "fallback": inf["fallback"],
                "synth_wall_s": inf["timings_s"]["total"],
            }
    meta: dict[str, Any] = {"forestcoll": info}
    if "shares" in cand:
        # unit trees, k per root: chunk c is in pipeline round c mod p
        meta[OVERLAP_PHASES] = {"rounds": p}
    reps = None
    if group is not None:
        reps = {int(r) for r in np.unique(group.rank_perms(topology).min(axis=0))}
        info["compact"] = {"group_order": group.order, "roots_lowered": len(reps)}
    made = lower(
        topology,
        collective.with_chunks(1),
        _unit_trees(cand["form"]),
        pipeline=p,
        meta=meta,
        shares="mult" if "lp" in cand else "rank",
        only_roots=reps,
    )
    if group is None:
        return made
    gens = np.asarray(group.generators, dtype=np.int64)
    return from_representatives(made, gens,
                                rank_chunk_generators(topology, made.collective, gens))  # fmt: skip
