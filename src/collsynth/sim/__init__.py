"""The collsynth simulator: alpha-beta, store-and-forward at GPUs, cut-through at switches and
routers, link contention. The model and its equations are in ``docs/simulator.md``.

``simulate(schedule, size)`` returns a :class:`SimResult`: completion time overall and per rank,
algbw and busbw (nccl-tests factors), per-link busy time and utilisation, and the timeline of
every hop.

Modules: :mod:`~collsynth.sim.simulator` (the entry point and the link models' names),
:mod:`~collsynth.sim.result`, :mod:`~collsynth.sim.hops` (hops and virtual hops),
:mod:`~collsynth.sim.groups` (multicasts and in-switch reductions), :mod:`~collsynth.sim.orders`
(planned orders and connections), :mod:`~collsynth.sim.quotient` (simulation on the quotient
by a schedule's symmetry), and the event loop: :mod:`~collsynth.sim.engine` with its
:mod:`~collsynth.sim.heap` and :mod:`~collsynth.sim.steps`.
"""

from .result import SimResult
from .simulator import (
    COMPILE_FROM_HOPS,
    MODEL_NAMES,
    ORBIT_TIES,
    ORDER_POLICIES,
    REALIZED,
    simulate,
)

__all__ = [
    "COMPILE_FROM_HOPS",
    "MODEL_NAMES",
    "ORBIT_TIES",
    "ORDER_POLICIES",
    "REALIZED",
    "SimResult",
    "simulate",
]
