"""Planning MTEGCCA: :func:`plan` (one variant: the tasks' trees, then negotiation),
:func:`best_plan` (every variant, price and slot length ``auto`` stands for; the earliest
plan) and :func:`mteg_horizon` (the paper's §3.2 epoch bound for TE-CCL)."""

from __future__ import annotations

import math
from typing import Any

from ...collective import Collective
from ...errors import CollsynthError
from ...topology.model import Topology
from ...units import parse_time
from ..options import int_option, size_option
from .model import SlotGraph
from .negotiation import negotiate_plan, negotiation_rounds
from .plans import Plan, route_all
from .tasks import decompose, spread_order

#: Data size planned for when none is given (the schedule's timing is for this size).
DEFAULT_SIZE = float(1 << 20)


def _parse_slot(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    tau = parse_time(value, "mteg option slot")
    if tau <= 0:
        raise CollsynthError(f"mteg option slot={value!r} must be a positive time")
    return tau


def plan(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    slot: Any = None,
    horizon: Any = None,
    occupancy: Any = None,
    trees: Any = None,
    nearest: Any = None,
    negotiate: Any = None,
    price: Any = None,
    switch_copy: bool = False,
) -> Plan:
    """Run MTEGCCA's planning (no IR): the slot plan for ``size`` bytes (``switch_copy``:
    switches with the ``multicast`` capability may copy a stream to several out-links)."""
    if collective.num_ranks != topology.num_ranks:
        raise CollsynthError(
            f"collective has {collective.num_ranks} ranks but topology "
            f"{topology.name!r} has {topology.num_ranks} compute nodes"
        )
    nbytes = size_option(size, "mteg", DEFAULT_SIZE)
    tau = _parse_slot(slot)
    h0 = int_option(horizon, "horizon", "mteg", minimum=1)
    mode = "exact" if occupancy is None else str(occupancy).strip().lower()
    if mode not in ("exact", "slot"):
        raise CollsynthError(f"mteg option occupancy={occupancy!r} is not exact or slot")
    grow = "sequential" if trees is None else str(trees).strip().lower()
    if grow not in ("sequential", "concurrent"):
        raise CollsynthError(f"mteg option trees={trees!r} is not sequential or concurrent")
    near = "arrival" if nearest is None else str(nearest).strip().lower()
    if near not in ("arrival", "cost"):
        raise CollsynthError(f"mteg option nearest={nearest!r} is not arrival or cost")
    rounds = _parse_negotiate(negotiate)
    lam = _parse_price(price)
    if lam is None:
        lam = 0.0
    cb = collective.chunk_bytes(nbytes)
    graph = SlotGraph(topology, cb, tau, exact=mode == "exact", multicast=bool(switch_copy))
    tasks = decompose(collective, cb, spread_order(topology))
    planner = route_all(graph, tasks, h0, near, grow, None, lam)
    p = Plan(graph, planner, tasks, nbytes, collective, grow, near, lam)
    if rounds is None:
        rounds = negotiation_rounds(graph, tasks)
    if rounds > 0:
        negotiate_plan(p, h0, rounds)
    return p


def _parse_negotiate(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    if isinstance(value, str) and value.strip().lower() in ("off", "no", "none"):
        return 0
    return int_option(value, "negotiate", "mteg", minimum=0)


def _parse_price(value: Any) -> float | None:
    """``price``: a non-negative number, or None for ``auto``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    if isinstance(value, str) and value.strip().lower() in ("off", "no", "none"):
        return 0.0
    try:
        lam = float(value)
    except (TypeError, ValueError):
        raise CollsynthError(f"mteg option price={value!r} is not a number, off or auto") from None
    if not (math.isfinite(lam) and lam >= 0):
        raise CollsynthError(f"mteg option price={value!r} must be a non-negative number")
    return lam


def best_plan(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    slot: Any = None,
    horizon: Any = None,
    occupancy: Any = None,
    trees: Any = None,
    nearest: Any = None,
    negotiate: Any = None,
    price: Any = None,
    switch_copy: bool = False,
) -> Plan:
    """:func:`plan` for every variant ``auto`` stands for; the earliest-finishing plan.

    With ``slot`` left to ``auto`` the variants are planned with the paper's slot (one chunk on
    the fastest link) and, when that slot rounds the transfers up a lot (:func:`slot_waste` above
    ``REFINE_WASTE``) and the problem is small (``REFINE_WORK``), again with slots
    ``REFINE`` times shorter. Plans are compared by their as-soon-as-possible completion
    (:func:`asap_seconds`; whole slots round every transfer up, so the slot plan is a poor
    judge between slot lengths), then by the slot plan's. Ties keep the earlier candidate:
    paper's slot, sequential, arrival. With ``price`` left to ``auto`` and a small problem
    (``PRICE_WORK``) the candidates per slot also include the arrival variants of
    ``PRICE_TREES`` at every link-time price of ``PRICES``. With ``negotiate`` left to
    ``auto`` every candidate gets the same number of rounds, :func:`negotiation_rounds` of
    the candidate count (one budget, ``SEARCH_WORK``, for the whole search).
    """
    lam = _parse_price(price)
    tau0 = _parse_slot(slot)
    nbytes = size_option(size, "mteg", DEFAULT_SIZE)
    # the paper's graph: problem size (work) and whether the slot wastes much (refinement)
    g0 = SlotGraph(
        topology,
        collective.chunk_bytes(nbytes),
        tau0,
        exact=occupancy is None or str(occupancy).strip().lower() != "slot",
    )
    n_tasks = len(decompose(collective, g0.chunk_bytes))
    work = max(1, n_tasks * len(g0.edges))
    taus: list[Any] = [slot]
    if tau0 is None and slot_waste(g0) > REFINE_WASTE and work <= REFINE_WORK:
        taus.append(g0.tau / REFINE)
    # candidates per slot: every (trees, nearest) variant at price ``lam`` (0 with auto), then
    # with price=auto on small problems the priced arrival variants
    cands = [
        (g, n, lam or 0.0)
        for g in _variants(trees, ("sequential", "concurrent"))
        for n in _variants(nearest, ("arrival", "cost"))
    ]
    if lam is None and work <= PRICE_WORK:
        cands += [
            (g, "arrival", x)
            for g in _variants(trees, PRICE_TREES)
            if g in PRICE_TREES
            for x in PRICES
            if "arrival" in _variants(nearest, ("arrival", "cost"))
        ]
    rounds = _parse_negotiate(negotiate)
    if rounds is None:  # auto: the search budget shared by every candidate
        rounds = negotiation_rounds(g0, n_tasks, len(cands) * len(taus))
    best: Plan | None = None
    for tau in taus:
        for g, n, x in cands:
            p = plan(
                topology, collective, size, tau, horizon, occupancy, g, n, rounds, x, switch_copy
            )
            if best is None or p.better_than(best):
                best = p
    assert best is not None  # at least one slot length and one candidate
    return best


#: ``price=auto``: the link-time prices tried besides 0 (slots of key per slot of link time),
#: with ``nearest=arrival`` and concurrent trees (where they helped: MI250, DGX-2, NDv2) ...
PRICES = (1.0, 2.0, 4.0)
PRICE_TREES = ("concurrent",)
#: ... on problems up to this size (tasks x transmission edges; 10-chassis NDv2 is beyond)
PRICE_WORK = 20_000


#: ``slot=auto`` also plans with slots this many times shorter than the paper's ...
REFINE = 4
#: ... when the paper's slot inflates the transfers by more than this fraction in all ...
REFINE_WASTE = 0.1
#: ... and the problem is small (tasks x transmission edges at most this).
REFINE_WORK = 20_000


def slot_waste(graph: SlotGraph) -> float:
    """How much whole slots inflate the transfers: ``sum(L tau - exact) / sum(exact)`` over
    the transmission edges (``exact`` = alpha + chunk / bottleneck bandwidth)."""
    exact = sum(e.exact_s for e in graph.edges)
    if exact <= 0:
        return 0.0
    return sum(e.length * graph.tau - e.exact_s for e in graph.edges) / exact


def _variants(value: Any, choices: tuple[str, ...]) -> tuple[str, ...]:
    if value is None or str(value).strip().lower() == "auto":
        return choices
    return (str(value),)


def mteg_horizon(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    tau: Any = None,
    occupancy: str = "slot",
) -> tuple[int, float]:
    """Completion of MTEGCCA's plan as ``(slots, seconds)`` with slots of length ``tau``.

    The paper's §3.2: a feasible MTEGCCA plan bounds the number of epochs an exact time-expanded
    solver (TE-CCL) needs from above: with epochs of length ``tau`` (default: one chunk on the
    fastest link), ``slots`` epochs suffice. ``tau`` is a time in seconds or a string
    (``"0.5us"``); ``size`` defaults to 1 MiB. The default ``occupancy="slot"`` plans with the
    paper's whole-slot resources (a link carries one transfer per slot, a transfer arrives
    ``ceil(alpha/tau) + ceil(chunk/(bw tau))`` slots after it leaves), which an epoch-based
    solver can reproduce epoch by epoch; ``"exact"`` gives the (tighter) plan ``synth`` uses.
    """
    p = best_plan(topology, collective, size, tau, occupancy=occupancy)
    return int(p.slots), float(p.seconds)
