"""TE-CCL's options, its registration as ``teccl`` and the run: check the problem, lay the
epoch grid, then the multicast MILP (:mod:`.milp_search`) or the AllToAll LP
(:mod:`.lp_search`), and lower the epoch ops to a timed schedule (:mod:`.lower`). The
package docstring describes the method and where it departs from TE-CCL."""

from __future__ import annotations

import time
from typing import Any

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ..options import Option, plan_size
from .common import SUPPORTED, check_supported
from .epochs import make_grid, parse_epoch
from .highs import SolveSettings, parse_highs_options
from .lower import to_schedule
from .lp_search import run_lp
from .milp_search import run_milp

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


@register(
    "teccl",
    collectives=set(SUPPORTED),
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
    epoch_spec = parse_epoch(epoch)
    epoch_multiplier, gap_limit, time_limit = float(epoch_multiplier), float(gap), float(time_limit)
    user_epochs = None if epochs == "auto" else int(epochs)
    switch_copy = bool(switch_copy)
    alpha_threshold, alpha_ratio_max = float(alpha_threshold), float(alpha_ratio_max)
    parts = int(parts)
    warm_start, seed = bool(warm_start), int(seed)
    highs_options = parse_highs_options(highs)
    max_nonzeros = float(max_nonzeros)
    if mode == "auto":
        mode = "lp" if collective.kind is CollKind.ALLTOALL else "milp"
    t_start = time.perf_counter()
    grid = make_grid(
        topology,
        collective.chunk_bytes(size),
        epoch_spec,
        epoch_multiplier,
        alpha_threshold,
        alpha_ratio_max,
    )
    params = {
        "epoch": epoch if isinstance(epoch_spec, str) else epoch_spec,
        "epoch_multiplier": epoch_multiplier,
        "gap_limit": gap_limit,
        "time_limit_s": time_limit,
        "objective": objective,
        "mode": mode,
        "switch_copy": switch_copy,
        "alpha_threshold": alpha_threshold,
        "alpha_ratio_max": alpha_ratio_max,
        "seed": seed,
        "symmetry": bool(symmetry),
    }
    if mode == "milp":
        settings = SolveSettings(
            time_limit, gap_limit, seed, highs_options, max_nonzeros, warm_start, bool(symmetry)
        )
        ops, info = run_milp(
            topology, collective, grid, size, user_epochs, objective, switch_copy, settings
        )
    else:
        settings = SolveSettings(time_limit, 0.0, seed, highs_options, max_nonzeros)
        ops, info = run_lp(topology, collective, grid, size, user_epochs, parts, settings)
    info["solver_wall_s"] = time.perf_counter() - t_start
    facts = {**params, **grid.to_dict(), **info, "estimate_s": info["epochs_required"] * grid.tau}
    schedule, plan_facts = to_schedule(topology, collective, ops, grid.tau, size, {}, grid.alpha_ep)
    facts.update(plan_facts)
    return schedule.with_meta(teccl=facts, status=overall_status(info["status"]), gap=info["gap"])


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
