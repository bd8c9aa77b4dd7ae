"""Exact max-flow and ForestColl's optimality search, shared by the bounds and the synthesizers.

Layer "flow": above ``units``/``errors``/``topology``/``collective``/``schedule`` and below
``verify``/``sim``/``bound``, ``synth`` and everything built on them (see docs/architecture.md),
so both :mod:`collsynth.bound` (exact cut lower bounds) and
:mod:`collsynth.synth.forestcoll` (spanning-tree schedules that reach them) import it.

* :mod:`.maxflow` — integer max-flow (:class:`FlowNet`: OR-Tools ``SimpleMaxFlow`` with an exact
  big-integer Dinic fallback) and :func:`rooted_check`, the max-flow test of Theorem 5 of
  ForestColl (Zhao et al., 'ForestColl: Throughput-Optimal Collective Communications on
  Heterogeneous Network Fabrics', arXiv 2402.06787);
* :mod:`.optimality` — ForestColl's optimality search: the exact rational AllGather optimum and a
  bottleneck cut (:func:`optimal_allgather`, §4.2, Algorithm 1, Theorem 1, Propositions 2-3),
  the best time with exactly ``k`` trees per root (:func:`fixed_k`, Appendix C.4, Algorithm 3,
  Theorem 14), exact integer bandwidths (:func:`integer_bandwidths`) and the transposed topology
  whose AllGather optimum is ReduceScatter's (:func:`transpose`, §4.6).
"""

from __future__ import annotations

from .maxflow import COUNTERS, FlowNet, rooted_check
from .optimality import (
    IntGraph,
    Optimum,
    at_scale,
    fixed_k,
    integer_bandwidths,
    optimal_allgather,
    simplest_between,
    topology_graph,
    transpose,
)

__all__ = [
    "COUNTERS",
    "FlowNet",
    "rooted_check",
    "IntGraph",
    "Optimum",
    "at_scale",
    "fixed_k",
    "integer_bandwidths",
    "optimal_allgather",
    "simplest_between",
    "topology_graph",
    "transpose",
]
