"""``teccl`` — TE-CCL's time-expanded multi-commodity-flow formulation, solved with HiGHS.

Implements TE-CCL (Liu et al., "Rethinking Machine Learning Collective Communication as a
Multi-Commodity Flow Problem", ACM SIGCOMM 2024) §3 (the epoch model: flows, buffers, capacity
per epoch, copy at GPUs, demand-met variables, alpha as epoch delays, slow links over several
epochs), §4 (the AllGather MILP with its objectives, the AllToAll LP, choosing the number of
epochs K, early stop by MIP gap) and what TE-CCL's public implementation does beyond the paper
(epoch duration ``fast``/``slow``/user times a multiplier, the alpha check and alpha threshold,
the sliding-window capacity, the input/output files). Modules:

* :mod:`.epochs` — epoch grid, per-link alpha/beta epochs and delays, seeded alpha sampler
  (the heterogeneous-alpha setting of Srinivasan, "A Performance Evaluation of Collective
  Communication Libraries", MSc project, University of Victoria, 2026);
* :mod:`.milp` — the multicast MILP (AllGather, Broadcast, Gather, Scatter, custom chunks);
* :mod:`.lp` — the source-aggregated LP (AllToAll, demand matrices) and its path
  decomposition into chunk byte ranges;
* :mod:`.lower` — the epoch-model heuristics (greedy placement of a schedule, rarest-first
  flooding: warm start and horizon), compaction, and the timed IR (list scheduling in epoch
  order, per-link orders);
* TE-CCL input files and TE-CCL-style output files are read and written by
  :mod:`collsynth.export.teccl`.

Where it departs from TE-CCL (details in ``docs/teccl.md``):

* **Solver**: HiGHS (one thread, fixed seed: deterministic) instead of Gurobi; Gurobi's
  ``max_``/``min_`` general constraints are written as plain linear rows (a copy at a GPU is
  ``f <= buffer`` per out-link).
* **Switches**: cut-through with no buffer, TE-CCL's default traversal model (a switch forwards
  in the epoch a chunk reaches it; the switch-to-GPU hop adds only its alpha epochs).
  Switch copying is an option (``switch_copy``), **off** by default. With it on, the copies a
  switch with the ``multicast`` capability makes become one multicast group in the IR (one
  stream up to where they part: the plan keeps the MILP's estimate); through a switch without
  it each copy is its own transfer over the shared uplink, slower than the estimate.
* **Objective**: ``makespan`` (default) minimises the completion epoch first (TE-CCL's
  ``BINARY_USED_EPOCHS``) and then rewards early deliveries (TE-CCL's ``PAPER`` term);
  ``paper`` is TE-CCL's default objective alone. TE-CCL's ``TOTAL_DEMAND`` and ``ASTAR`` are
  not implemented (an input file asking for them gets ``makespan``, with a note).
* **K**: TE-CCL probes feasibility with a binary search over the epoch length; here the
  horizon is the completion of the best epoch-model heuristic — the ``spt`` schedule placed
  greedily into epochs, and for AllGather/Broadcast rarest-first flooding and the ``mteg``
  schedule placed into epochs — a feasible MILP solution passed to HiGHS as the warm
  start; or the user's ``epochs``, grown by 1.5x while infeasible. The MILP then minimises
  the completion epoch within that horizon. The AllToAll LP bisects K between a lower bound
  and that heuristic.
* **Uplinks into switches** carry integer flows (one copy per destination behind the switch,
  as switches do not copy by default); TE-CCL's flows are binary everywhere.
* **Output**: the solution is pruned (transfers feeding no destination are dropped, as
  TE-CCL's DFS does), compacted (each transfer moved to its earliest feasible epoch, which
  removes idle epochs a time-limited solution leaves) and lowered to a timed IR (list
  scheduling epoch by epoch; per-link orders). The simulator's time never exceeds the plan
  and, empirically (every test instance and benchmark row; not a theorem — contention at
  shared switches is only approximated by the epoch model), satisfies
  ``estimate - tau - rounding_up <= sim <= estimate + rounding_down`` where
  ``estimate = K* x tau`` and the rounding terms (``meta['teccl']``) sum, along dependency
  chains, what the grid adds (alpha rounded up to whole epochs, transfers padded to whole
  epochs) or misses (alphas under the threshold counted as 0, transmission on cut-through
  switch hops beyond the epochs counted): one epoch — a transfer the
  model starts at an epoch boundary may run anywhere within it — plus alpha rounding.
* **Large models**: a model with more than ``max_nonzeros`` nonzeros per second of time
  limit is not solved (HiGHS' presolve alone would not finish); the heuristic is returned.
  A solve that passes this test but overruns its limit anyway is killed shortly after it
  (:func:`.common.hard_limit`), and the best schedule found before it is returned.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ..options import Option, plan_size
from . import lp as _lp
from . import milp as _milp
from . import symmetry as _symmetry
from .common import (
    INF,
    Commodities,
    check_supported,
    epoch_cut_bound,
    epoch_distances,
    solve,
    to_gpu_distance,
    unicast_demand,
)
from .epochs import EpochGrid, make_grid, parse_epoch, sample_alphas  # noqa: F401
from .lower import compact_epochs, flood_epochs, greedy_epochs, to_schedule

OBJECTIVES = ("makespan", "paper")
MODES = ("auto", "milp", "lp")

OPTIONS = (
    Option(
        "epoch",
        "time",
        "fast",
        words=("fast", "slow"),
        minimum=0.0,
        exclusive_minimum=True,
        help="epoch duration: fast (one chunk on the fastest link), slow (on the slowest "
        "link) or a duration such as 2us",
    ),
    Option(
        "epoch_multiplier",
        "float",
        1.0,
        minimum=0.0,
        exclusive_minimum=True,
        help="multiplies the fast/slow epoch duration",
    ),
    Option(
        "gap",
        "float",
        1e-4,
        minimum=0.0,
        help="relative MIP gap at which HiGHS stops, on the early-delivery reward (with the "
        "makespan objective: gap / K on the whole objective); TE-CCL's early stop is 0.3",
    ),
    Option(
        "time_limit",
        "time",
        5.0,
        minimum=0.0,
        exclusive_minimum=True,
        help="solver time limit, all solves together (short so that compare and the demo "
        "finish; raise it for real runs)",
    ),
    Option(
        "epochs",
        "int",
        "auto",
        minimum=1,
        maximum=100_000,
        words=("auto",),
        help="horizon K to start from (auto: the epoch-placed spt schedule); grown while "
        "infeasible",
    ),
    Option(
        "objective",
        "choice",
        "makespan",
        choices=OBJECTIVES,
        help="makespan (completion epoch, then early deliveries) or paper (TE-CCL's reward "
        "for early deliveries)",
    ),
    Option(
        "mode",
        "choice",
        "auto",
        choices=MODES,
        help="auto (LP for alltoall, MILP otherwise), milp or lp",
    ),
    Option(
        "switch_copy",
        "bool",
        False,
        help="allow switches to replicate chunks (a multicast group where the switch has the "
        "multicast capability, separate transfers elsewhere)",
    ),
    Option(
        "alpha_threshold",
        "float",
        0.1,
        minimum=0.0,
        help="alpha/tau at or below which a link's alpha counts as 0 epochs",
    ),
    Option(
        "alpha_ratio_max",
        "float",
        200.0,
        minimum=0.0,
        help="raise tau to min alpha / this when alpha/tau exceeds it (0 = never)",
    ),
    Option(
        "parts",
        "int",
        8,
        minimum=1,
        help="LP: byte-range denominator for rounding fractional flows",
    ),
    Option("warm_start", "bool", True, help="pass the heuristic solution to HiGHS"),
    Option(
        "symmetry",
        "bool",
        True,
        help="MILP: when the fabric has automorphisms that permute the chunks, solve for one "
        "chunk per orbit and map the rest (symmetric schedules only; far smaller models)",
    ),
    Option("seed", "int", 0, minimum=0, help="HiGHS random seed"),
    Option(
        "highs",
        "text",
        "",
        help="extra HiGHS options, name:value,name:value (e.g. mip_heuristic_effort:0.3)",
    ),
    Option(
        "max_nonzeros",
        "float",
        1e5,
        minimum=0.0,
        help="skip a solve whose model has more than this many nonzeros per second of time "
        "limit left (HiGHS' presolve alone would not finish; 0 = never skip): the "
        "heuristic is returned",
    ),
)


#: The HiGHS options ``highs=`` may set: numbers and switches that steer the search, each
#: checked here against the range HiGHS accepts. Nothing that names a file or writes one
#: (``log_file``, ``solution_file``, ``write_solution_to_file``, ...) is passed on;
#: ``output_flag:true`` sends HiGHS' log to stderr.
HIGHS_OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        Option("time_limit", "time", minimum=0.0, help="HiGHS' own limit (the smaller wins)"),
        Option("mip_rel_gap", "float", minimum=0.0),
        Option("mip_abs_gap", "float", minimum=0.0),
        Option("threads", "int", minimum=0, maximum=256),
        Option("random_seed", "int", minimum=0, maximum=2**31 - 1),
        Option("presolve", "choice", choices=("off", "choose", "on")),
        Option("parallel", "choice", choices=("off", "choose", "on")),
        Option("solver", "choice", choices=("choose", "simplex", "ipm")),
        Option("simplex_strategy", "int", minimum=0, maximum=4),
        Option("mip_heuristic_effort", "float", minimum=0.0, maximum=1.0),
        Option("mip_detect_symmetry", "bool"),
        Option("mip_max_nodes", "int", minimum=0, maximum=2**31 - 1),
        Option("mip_max_stall_nodes", "int", minimum=0, maximum=2**31 - 1),
        Option("mip_max_leaves", "int", minimum=0, maximum=2**31 - 1),
        Option("mip_max_improving_sols", "int", minimum=1, maximum=2**31 - 1),
        Option("simplex_iteration_limit", "int", minimum=0, maximum=2**31 - 1),
        Option("ipm_iteration_limit", "int", minimum=0, maximum=2**31 - 1),
        Option("primal_feasibility_tolerance", "float", minimum=1e-10),
        Option("dual_feasibility_tolerance", "float", minimum=1e-10),
        Option("mip_feasibility_tolerance", "float", minimum=1e-10),
        Option("output_flag", "bool"),
    )
}


def _highs_options(value: Any) -> dict:
    """``name:value,name:value`` (or a dict) as HiGHS options with typed values; only the
    options of :data:`HIGHS_OPTIONS`, each once, within the range HiGHS accepts."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    else:
        items = []
        for item in str(value).split(","):
            name, sep, raw = item.partition(":")
            if not sep or not name.strip():
                raise CollsynthError(f"teccl option highs={value!r}: {item!r} is not name:value")
            items.append((name.strip(), raw.strip()))
    out: dict[str, Any] = {}
    for name, raw in items:
        opt = HIGHS_OPTIONS.get(name)
        if opt is None:
            raise CollsynthError(
                f"teccl option highs: HiGHS option {name!r} cannot be set here (allowed: "
                f"{', '.join(sorted(HIGHS_OPTIONS))})"
            )
        if name in out:
            raise CollsynthError(f"teccl option highs: HiGHS option {name!r} is given twice")
        out[name] = opt.parse(raw, "teccl highs")
    return out


@register(
    "teccl",
    collectives={
        CollKind.ALLGATHER,
        CollKind.BROADCAST,
        CollKind.ALLTOALL,
        CollKind.GATHER,
        CollKind.SCATTER,
        CollKind.CUSTOM,
    },
    summary="TE-CCL: epoch multi-commodity-flow MILP (AllToAll: LP) on HiGHS; "
    "optimal for small instances, best-found within time_limit otherwise",
    options=OPTIONS,
    size_aware=True,
    reference="Liu et al., 'Rethinking Machine Learning Collective Communication as a "
    "Multi-Commodity Flow Problem' (TE-CCL), ACM SIGCOMM 2024",
)
def teccl(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    epoch: str | float = "fast",
    epoch_multiplier: float = 1.0,
    gap: float = 1e-4,
    time_limit: float = 5.0,
    epochs: int | str = "auto",
    objective: str = "makespan",
    mode: str = "auto",
    switch_copy: bool = False,
    alpha_threshold: float = 0.1,
    alpha_ratio_max: float = 200.0,
    parts: int = 8,
    warm_start: bool = True,
    symmetry: bool = True,
    seed: int = 0,
    highs: Any = "",
    max_nonzeros: float = 1e5,
) -> Schedule:
    """TE-CCL epoch formulation on HiGHS; returns the best timed schedule found.

    Options arrive typed and validated by their declarations (:data:`OPTIONS`).
    """
    check_supported(collective)
    if collective.num_ranks != topology.num_ranks:
        raise CollsynthError(
            f"collective has {collective.num_ranks} ranks but topology "
            f"{topology.name!r} has {topology.num_ranks} compute nodes"
        )
    size = plan_size(size, "teccl")
    epoch_v = parse_epoch(epoch)
    mult, gap_v, tl = float(epoch_multiplier), float(gap), float(time_limit)
    k_user = None if epochs == "auto" else int(epochs)
    obj, mode_v, sc = objective, mode, bool(switch_copy)
    at, arm, den = float(alpha_threshold), float(alpha_ratio_max), int(parts)
    ws, sd = bool(warm_start), int(seed)
    highs_options = _highs_options(highs)
    mnz = float(max_nonzeros)
    if mode_v == "auto":
        mode_v = "lp" if collective.kind is CollKind.ALLTOALL else "milp"
    t_start = time.perf_counter()
    grid = make_grid(topology, collective.chunk_bytes(size), epoch_v, mult, at, arm)
    params = {
        "epoch": epoch if isinstance(epoch_v, str) else epoch_v,
        "epoch_multiplier": mult,
        "gap_limit": gap_v,
        "time_limit_s": tl,
        "objective": obj,
        "mode": mode_v,
        "switch_copy": sc,
        "alpha_threshold": at,
        "alpha_ratio_max": arm,
        "seed": sd,
        "symmetry": bool(symmetry),
    }
    if mode_v == "milp":
        solver = _Solver(tl, gap_v, sd, highs_options, mnz, ws, bool(symmetry))
        ops, info = _run_milp(topology, collective, grid, size, k_user, obj, sc, solver)
    else:
        ops, info = _run_lp(
            topology, collective, grid, size, k_user, den, tl, sd, highs_options, mnz
        )
    info["solver_wall_s"] = time.perf_counter() - t_start
    meta_t = {**params, **grid.to_dict(), **info, "estimate_s": info["epochs_required"] * grid.tau}
    sched, facts = to_schedule(topology, collective, ops, grid.tau, size, {}, grid.alpha_ep)
    meta_t.update(facts)
    return sched.with_meta(teccl=meta_t, status=overall_status(info["status"]), gap=info["gap"])


def overall_status(detail: str) -> str:
    """The schedule's ``meta.status`` for a detailed TE-CCL status (kept in ``meta.teccl``):
    ``optimal``, ``time_limit`` (the limit stopped the solver, or made it skip a model too large
    to solve in time; the best schedule found so far, possibly the warm start, is returned),
    ``heuristic`` (no MILP solution was usable) or the solver's own word."""
    if detail == "optimal":
        return "optimal"
    if detail.startswith(("time_limit", "skipped")):
        return "time_limit"
    if detail.endswith("heuristic"):
        return "heuristic"
    return detail


# ---------------------------------------------------------------------------------- MILP
@dataclass
class _Solver:
    """How every solve of one run is made: shared time limit and HiGHS settings."""

    time_limit: float
    gap: float
    seed: int
    highs_options: dict
    max_nnz: float
    warm_start: bool = False
    symmetry: bool = False


def _run_milp(
    topology, collective, grid: EpochGrid, size, k_user, obj, switch_copy, solver: _Solver
):
    """The multicast MILP from the heuristic's horizon (see the module doc): the best epoch
    ops found and the run's facts."""
    t = topology
    com = Commodities.of(collective)
    if not len(com):
        raise CollsynthError(f"{collective.describe()} moves no data")
    dist = epoch_distances(t, grid.delay)
    to_gpu = to_gpu_distance(t, grid.delay)
    k_path = _fewest_epochs(t, com, dist)
    h_ops, k_h, heuristic, tried = _milp_heuristic(t, grid, collective, size)
    k_lb = epoch_cut_bound(t, grid, com, dist, to_gpu, k_path, k_h)
    info: dict[str, Any] = {
        "heuristic": heuristic,
        "lower_bound_epochs": k_lb,
        "fewest_epochs": k_path,
        "horizons": [],
    }
    K = k_user if k_user is not None else k_h
    t_run = time.perf_counter()
    if k_h <= k_lb and k_user is None:
        # the heuristic meets the lower bound: its completion is optimal; a short solve only
        # moves deliveries earlier (the reward), where the model is small enough for it
        info["heuristic_meets_bound"] = True
        # (admitted only with FULL_MARGIN headroom: a polish killed at its limit is wasted)
        solver = replace(
            solver,
            time_limit=min(solver.time_limit, POLISH_S),
            max_nnz=solver.max_nnz / FULL_MARGIN,
        )
    sym = _symmetry.find(t, com, grid) if solver.symmetry else None
    warm = (h_ops, k_h)
    if sym is not None:
        info["symmetric_model"] = sym.to_dict(com)
        # a symmetric warm start (the heuristic's own is not symmetric, so infeasible there)
        got = None
        for sched in tried:
            one = _symmetry.greedy_epochs(t, grid, sched, sym, com)
            if one is not None and (got is None or one[1] < got[1]):
                got = one
        if got is not None:
            info["symmetric_model"]["warm_start_epochs"] = got[1]
            if got[1] <= k_h:  # (a longer one would only make the model larger)
                warm = (_symmetry.expand(sym, com, got[0]), k_h)
    sym_solver = solver
    if sym is not None:
        # keep time for the full model after the symmetric one where it would be admitted
        full_nnz = NNZ_PER_COLUMN * _milp.column_count(t, grid, com, K, dist, to_gpu, obj)
        rest = (1 - SYM_SHARE) * solver.time_limit
        if solver.max_nnz and full_nnz * FULL_MARGIN <= solver.max_nnz * rest:
            sym_solver = replace(solver, time_limit=SYM_SHARE * solver.time_limit)
    best_ops, best_done, status, gap_out, K, kept = _milp_horizons(
        t, grid, com, dist, to_gpu, K, warm, switch_copy, obj, sym_solver, info, sym
    )
    left = solver.time_limit - (time.perf_counter() - t_run)
    if sym is not None and best_done > info["lower_bound_epochs"] and left > 1.0:
        # the full model from the symmetric solution, in the time left: its dual bound holds
        # for every schedule (and it may find a non-symmetric improvement)
        best_ops, best_done, status, gap_out, kept = _full_polish(
            t, grid, com, dist, to_gpu, (best_ops, best_done, status, gap_out, kept),
            switch_copy, obj, replace(solver, time_limit=left), info,
        )  # fmt: skip
    # where the schedule came from: the solver's own, or the heuristics' (HiGHS returning its
    # warm start unimproved counts as the heuristics')
    info["schedule_from"] = "heuristic" if kept else "solver"
    if best_done > k_h:  # the heuristic beats what the solver found in time
        best_ops, best_done = h_ops, k_h
        status = f"{status}_heuristic" if not status.endswith("heuristic") else status
        info["schedule_from"] = "heuristic"
    lb = info["lower_bound_epochs"]
    mk_gap = max(0.0, (best_done - lb) / best_done) if best_done else 0.0
    info["mip_gap"] = float(gap_out)
    if sym is not None and status == "optimal" and best_done > lb:
        status = "optimal_symmetric"  # HiGHS's bound holds among symmetric schedules only
    if obj == "makespan":
        # the completion epoch's gap to the best bound that holds for every schedule (epoch
        # cut bound, fewest epochs, HiGHS's dual bound of a full model): what the user waits
        # for; the MIP gap also counts the early-delivery reward
        gap_out = mk_gap
        if best_done <= lb:
            status = "optimal"  # the completion is proven optimal (the reward may not be)
    elif sym is not None:
        gap_out = mk_gap
    info.update(
        status=status,
        gap=float(gap_out) if np.isfinite(gap_out) else mk_gap,
        epochs_required=best_done,
        horizon=K,
        makespan_gap=mk_gap,
        proven_optimal=bool(best_done <= lb),
    )
    return best_ops, info


#: Seconds a solve may take when the warm start already meets the lower bound (it can only
#: move deliveries earlier).
POLISH_S = 10.0
#: The symmetric model's share of the time limit when the full model (about NNZ_PER_COLUMN
#: nonzeros per column) would be admitted in the rest FULL_MARGIN times over (so that it
#: likely solves there); otherwise the symmetric model gets all of it.
SYM_SHARE = 0.5
NNZ_PER_COLUMN = 4
FULL_MARGIN = 4


def _full_polish(t, grid, com, dist, to_gpu, found, switch_copy, obj, solver, info):
    """The full MILP at the symmetric solution's completion epoch, warm-started from it:
    ``found`` (ops, completion, status, gap, whether it is the heuristics' warm start) or what
    the full model improves to. Its horizon is recorded with ``model: full``."""
    ops, done, status, gap, kept = found
    n = len(info["horizons"])
    f_ops, f_done, f_status, f_gap, _, f_kept = _milp_horizons(
        t, grid, com, dist, to_gpu, done, (ops, done), switch_copy, obj, solver, info, None
    )
    for h in info["horizons"][n:]:
        h["model"] = "full"
    if f_done <= done and not f_status.endswith("heuristic"):
        # (the full model keeping the symmetric solution keeps its origin)
        return f_ops, f_done, f_status, f_gap, kept and f_kept
    return ops, done, status, gap, kept


def _fewest_epochs(t: Topology, com: Commodities, dist: np.ndarray) -> int:
    """The fewest epochs in which every chunk can reach all its destinations."""
    src_nodes = t.compute_nodes[com.src]
    k_lb = 0
    for q, ds in enumerate(com.dests):
        e = dist[src_nodes[q], t.compute_nodes[ds]]
        if np.any(e >= INF):
            raise CollsynthError(f"chunk {int(com.chunk[q])} cannot reach all its destinations")
        k_lb = max(k_lb, int(e.max()))
    return k_lb


def _spt(t: Topology, collective: Collective) -> Schedule:
    """The ``spt`` schedule (fewest-transfer trees): the heuristics' starting point."""
    from .. import synthesize

    return synthesize("spt", t, collective, link_order=False)


#: Largest AllGather/Broadcast for which the MTEG schedule is also tried as the warm start.
MTEG_MAX_RANKS = 128


def _milp_heuristic(t: Topology, grid: EpochGrid, collective: Collective, size: float):
    """The warm start and horizon: the spt schedule placed into epochs, or for AllGather and
    Broadcast rarest-first flooding or the MTEG schedule placed into epochs (up to
    ``MTEG_MAX_RANKS`` ranks) when they finish earlier: ``(ops, epochs, facts, the IR
    schedules tried)``."""
    from ...sim import simulate
    from .. import synthesize

    heur = _spt(t, collective)
    tried = [heur]
    heur_sim = simulate(heur, size, order="plan").time_s
    h_ops, k_h = greedy_epochs(t, grid, heur)
    heuristic = {"algorithm": "spt", "sim_time_s": heur_sim, "epochs": k_h, "spt_epochs": k_h}
    if collective.kind in (CollKind.ALLGATHER, CollKind.BROADCAST):
        flood = flood_epochs(t, grid, collective, k_h)
        if flood is not None:
            heuristic["flood_epochs"] = flood[1]
            if flood[1] < k_h:
                h_ops, k_h = flood
                heuristic.update(algorithm="flood", epochs=k_h)
        if collective.num_ranks <= MTEG_MAX_RANKS:
            try:
                m = synthesize("mteg", t, collective, size=size, link_order=False)
            except CollsynthError:
                m = None  # (a fabric MTEG cannot route: the others stand)
            if m is not None:
                tried.append(m)
                m_ops, k_m = greedy_epochs(t, grid, m)
                heuristic["mteg_epochs"] = k_m
                if k_m < k_h:
                    h_ops, k_h = m_ops, k_m
                    heuristic.update(algorithm="mteg", epochs=k_h)
    return h_ops, k_h, heuristic, tried


def _milp_horizons(
    t: Topology,
    grid: EpochGrid,
    com: Commodities,
    dist: np.ndarray,
    to_gpu: np.ndarray,
    K: int,
    heur: tuple[list, int],
    switch_copy: bool,
    obj: str,
    solver: _Solver,
    info: dict,
    sym: _symmetry.Symmetry | None = None,
):
    """Solve at horizon ``K``, grown while below the epoch lower bound or infeasible, until a
    solution, the time limit or a model too large: ``(ops, completion epoch, status, MIP gap,
    last K, whether the result is the warm start itself)`` (the heuristic ``heur`` while
    nothing better is found). With ``sym`` the model has one commodity per orbit
    (:mod:`.symmetry`)."""
    h_ops, k_h = heur
    k_lb = info["lower_bound_epochs"]
    mcom = com if sym is None else sym.representatives(com)
    q_of = {int(c): q for q, c in enumerate(mcom.chunk.tolist())}
    classes = (None, None) if sym is None else (sym.link_class, sym.weight)
    t0 = time.perf_counter()
    best_ops, best_done, status, gap_out = h_ops, k_h, "heuristic", float("nan")
    kept = True  # the result is the warm start (or the heuristic) itself
    while True:
        remaining = solver.time_limit - (time.perf_counter() - t0)
        if K < k_lb:
            info["horizons"].append({"K": K, "status": "infeasible (below the lower bound)"})
            K = min(max(K + 1, math.ceil(1.5 * K)), max(k_h, k_lb))
            continue
        if remaining <= 0.01:
            info["horizons"].append({"K": K, "status": "not solved (time limit)"})
            status = "time_limit_heuristic"
            break
        layout = _milp.build(t, grid, mcom, K, dist, to_gpu, switch_copy, obj, *classes)
        if _too_large(layout, K, remaining, solver.max_nnz, info):
            status = "skipped_heuristic"
            break
        start = None
        if solver.warm_start and K >= k_h:
            mine = [o for o in h_ops if o.chunk in q_of]  # (the representatives')
            start = _milp.warm_vector(layout, t, mcom, grid, mine, q_of)
        res = solve(
            layout.model,
            time_limit=remaining,
            # (the makespan objective, W x epochs - reward, is about K times the reward:
            # the gap is the reward's, as in TE-CCL's objective)
            gap=solver.gap / max(1, K) if obj == "makespan" else solver.gap,
            seed=solver.seed,
            start=start,
            highs_options=_presolve_by_size(layout.model, solver.highs_options),
        )
        entry = {
            "K": K,
            "status": res.status,
            "columns": layout.model.num_cols,
            "rows": layout.model.num_rows,
            "nonzeros": int(len(layout.model.vals)),
            "warm_start": res.warm_start,
            "wall_s": res.wall_s,
        }
        if res.extra.get("killed"):
            entry["killed"] = True  # HiGHS overran its limit (see common.hard_limit)
        info["horizons"].append(entry)
        if res.has_solution:
            assert res.x is not None  # a solution comes with its column values
            ops, done = _milp_ops(layout, t, mcom, grid, res.x, switch_copy, entry, sym, com)
            if start is not None:  # did HiGHS find better than what it was given?
                w_obj = float(layout.model.cost @ start)
                entry["improved_warm_start"] = bool(
                    res.objective < w_obj - 1e-9 * max(1.0, abs(w_obj))
                )
            if done <= best_done or status == "heuristic":
                best_ops, best_done = ops, done
                status = res.status
                gap_out = res.gap
                kept = not entry.get("improved_warm_start", True)
            if obj == "makespan" and np.isfinite(res.dual_bound) and sym is None:
                # (a symmetric model's bound holds only for symmetric schedules)
                # objective = W * epochs - (early-delivery reward in [0, W)): epochs >= dual / W
                lb = math.ceil(res.dual_bound / layout.W - 1e-9)
                info["lower_bound_epochs"] = max(info["lower_bound_epochs"], lb)
            break
        if res.status == "infeasible":
            if K >= k_h:  # cannot happen: the heuristic fits; keep it
                status = "heuristic"
                break
            K = min(max(K + 1, math.ceil(1.5 * K)), k_h)
            continue
        status = f"{res.status}_heuristic"
        break
    return best_ops, best_done, status, gap_out, K, kept


#: Models with more nonzeros than this are solved without HiGHS's presolve (unless the
#: ``highs`` option says otherwise): on them it costs more than it saves within the time
#: limits used here. 8x5 mesh at 1 MB (765 k nonzeros, warm start 46 epochs): presolve 20 s,
#: then the 45-epoch optimum at 38 s; without it the optimum at 3.6 s. Smaller models keep it:
#: the 36 k nonzero symmetric model of DGX-2 x2 at 1 MB reaches 45 epochs only with it.
PRESOLVE_MAX_NNZ = 250_000


def _presolve_by_size(model, highs_options: dict) -> dict:
    """The HiGHS options for ``model``: presolve off above :data:`PRESOLVE_MAX_NNZ`."""
    if len(model.vals) > PRESOLVE_MAX_NNZ and "presolve" not in highs_options:
        return {**highs_options, "presolve": "off"}
    return highs_options


def _too_large(layout, K: int, remaining: float, max_nnz: float, info: dict) -> bool:
    """Whether the model has more nonzeros than the time left allows (then recorded as a
    skipped horizon)."""
    nnz = int(len(layout.model.vals))
    if max_nnz and nnz > max_nnz * remaining:
        info["horizons"].append(
            {
                "K": K,
                "status": "skipped (model too large for the time limit)",
                "columns": layout.model.num_cols,
                "rows": layout.model.num_rows,
                "nonzeros": nnz,
            }
        )
        return True
    return False


def _milp_ops(
    layout,
    t: Topology,
    com: Commodities,
    grid: EpochGrid,
    x: np.ndarray,
    switch_copy: bool,
    entry: dict,
    sym: _symmetry.Symmetry | None = None,
    full: Commodities | None = None,
):
    """Epoch ops of a MILP solution (mapped to every commodity of ``full`` by ``sym`` for a
    symmetric model), compacted when that finishes no later: ``(ops, completion epoch)``."""
    ops, done = _milp.decode(layout, t, com, grid, x, switch_copy)
    if sym is not None and full is not None:
        ops = _symmetry.expand(sym, full, ops)
    entry["epochs_required"] = done
    c_ops, c_done = compact_epochs(t, grid, ops)
    if c_done <= done:
        ops, done = c_ops, c_done
        entry["epochs_after_compaction"] = done
    return ops, done


# ---------------------------------------------------------------------------------- LP
def _run_lp(
    topology, collective, grid: EpochGrid, size, k_user, den, tl, seed, highs_options, max_nnz
):
    """The AllToAll LP: the fewest feasible epochs bisected between a lower bound and the
    heuristic, then solved with the objective and decomposed into paths."""
    t = topology
    dem, ids = unicast_demand(collective)
    if dem.sum() <= 0:
        raise CollsynthError(f"{collective.describe()} moves no data")
    dist = epoch_distances(t, grid.lp_delay)
    to_gpu = to_gpu_distance(t, grid.lp_delay)
    pairs = np.argwhere(dem > 0)
    e = dist[t.compute_nodes[pairs[:, 0]], t.compute_nodes[pairs[:, 1]]]
    if np.any(e >= INF):
        raise CollsynthError("some demand cannot reach its destination")
    t0 = time.perf_counter()
    k_lb, b_time = _lp_lower_bound(t, collective, size, grid, int(e.max()))
    from ...sim import simulate

    heur = _spt(t, collective)
    h_ops, k_h = greedy_epochs(t, grid, heur)
    info: dict[str, Any] = {
        "lower_bound_epochs": k_lb,
        "horizons": [],
        "heuristic": {
            "algorithm": "spt",
            "epochs": k_h,
            "sim_time_s": simulate(heur, size, order="plan").time_s,
        },
        "bound_s": b_time,
    }
    probe = _LpProbe(
        t, grid, dem, dist, to_gpu, t0, _Solver(tl, 0.0, seed, highs_options, max_nnz), info
    )
    lo, hi, final = _lp_search(probe, k_lb, k_h, k_user)
    if final is None:
        # no LP solution in time: the epoch-placed heuristic (whole chunks)
        ops, done = h_ops, k_h
        stats = {"paths": len(h_ops), "dropped_volume": 0.0, "rounding_max": 0.0}
        skipped = any(str(h["status"]).startswith("skipped") for h in info["horizons"])
        status = (
            "optimal_heuristic"
            if lo >= k_h
            else "skipped_heuristic"
            if skipped
            else "time_limit_heuristic"
        )
    else:
        layout, res = final
        ops, done, stats = _lp.decompose(layout, t, grid, res.x, ids, den)
        status = "optimal" if lo == hi else "time_limit"
    gap = 0.0 if lo >= hi else (hi - lo) / hi
    info.update(
        status=status,
        gap=gap,
        epochs_required=max(done, 1),
        horizon=hi,
        lp_completion_epochs=hi,
        decomposition=stats,
        proven_optimal=lo >= hi,
        makespan_gap=gap,
        lower_bound_epochs=lo,
    )
    return ops, info


def _lp_lower_bound(
    t: Topology, collective: Collective, size: float, grid: EpochGrid, fewest: int
) -> tuple[int, float]:
    """The horizon's lower end: the fewest epochs of any path (``fewest``), and the
    bandwidth/latency lower bound (the LP moves at most bw * tau per link and epoch); above,
    the epoch-placed spt schedule is a feasible solution (a whole chunk over a slow link
    spreads over its window). Returns ``(epochs, bound in seconds or nan)``."""
    from ...bound import bound as lower_bound

    k_lb = max(1, fewest)
    try:
        b_time = lower_bound(t, collective, size).time_s
        k_lb = max(k_lb, int(math.floor(b_time / grid.tau * (1 - 1e-9))))
    except CollsynthError:
        b_time = float("nan")
    return k_lb, b_time


class _LpProbe:
    """Solves the LP at a horizon within what is left of the time limit (from ``t0``)."""

    def __init__(
        self,
        t: Topology,
        grid: EpochGrid,
        dem: np.ndarray,
        dist: np.ndarray,
        to_gpu: np.ndarray,
        t0: float,
        solver: _Solver,
        info: dict,
    ):
        self.t, self.grid, self.dem, self.dist, self.to_gpu = t, grid, dem, dist, to_gpu
        self.t0, self.solver, self.info = t0, solver, info

    def __call__(self, K: int, objective: bool = False):
        """``(True, (layout, result))`` when optimal, ``(False, None)`` when infeasible,
        ``(None, None)`` when out of time, skipped or failed."""
        s = self.solver
        remaining = s.time_limit - (time.perf_counter() - self.t0)
        if remaining <= 0.01:
            return None, None
        layout = _lp.build(
            self.t, self.grid, self.dem, K, self.dist, self.to_gpu, objective=objective
        )
        if _too_large(layout, K, remaining, s.max_nnz, self.info):
            return None, None
        res = solve(
            layout.model, time_limit=remaining, gap=0.0, seed=s.seed, highs_options=s.highs_options
        )
        self.info["horizons"].append(
            {
                "K": K,
                "status": res.status,
                "objective": objective,
                "columns": layout.model.num_cols,
                "rows": layout.model.num_rows,
                "wall_s": res.wall_s,
                **({"killed": True} if res.extra.get("killed") else {}),
            }
        )
        if res.status == "optimal":
            return True, (layout, res)
        if res.status == "infeasible":
            return False, None
        return None, None


def _lp_search(probe: _LpProbe, k_lb: int, k_h: int, k_user: int | None):
    """The fewest feasible epochs: the user's horizon grown while infeasible, then bisection
    between ``k_lb`` and the heuristic's ``k_h``, then the solve with the objective there:
    ``(lo, hi, (layout, result) or None)``."""
    lo = k_lb
    hi = k_h
    found = None
    if k_user is not None and k_user < hi:
        K = max(k_user, lo)
        while K < hi:  # grow the user's horizon while infeasible
            r, sol = probe(K)
            if r is None:
                break
            if r:
                hi, found = K, sol
                break
            lo = K + 1
            K = max(K + 1, math.ceil(1.5 * K))
    while lo < hi:
        mid = (lo + hi) // 2
        r, sol = probe(mid)
        if r is None:
            break
        if r:
            hi, found = mid, sol
        else:
            lo = mid + 1
    final = None
    r, sol = (
        probe(hi, objective=True) if (found is not None or hi < k_h or lo == hi) else (None, None)
    )
    if r:
        final = sol
    elif found is not None:
        final = found
    return lo, hi, final
