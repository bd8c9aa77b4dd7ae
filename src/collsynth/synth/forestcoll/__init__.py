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
path that revisits a switch is shortcut (it then uses fewer links). AllReduce's LP
(Appendix E, :func:`allreduce_lp`) shapes AllReduce trees on switch-free topologies
(:func:`allreduce_lp_trees`, :mod:`.lp_trees`). Symmetry (:mod:`.symmetry`, on
by default from :data:`SYMMETRY_MIN_RANKS` ranks): trees for one root per orbit of a verified
automorphism group, mapped to the others, same optimum, congestion re-checked, exact pipeline as
fallback. Edge splitting is guaranteed only for Eulerian topologies (the paper's assumption);
otherwise :attr:`LogicalTopology.preserved` says whether it worked; if it did not,
:func:`forestcoll_trees` raises the per-tree capacity scale ``U`` in small steps until splitting
works and reports the slowdown (``info["fallback"]``).

Max-flows are OR-Tools ``SimpleMaxFlow`` on exact integers (:mod:`collsynth.flow.maxflow`).

Modules: :mod:`.trees` (the pipeline, :func:`forestcoll_trees`), :mod:`.splitting`,
:mod:`.packing`, :mod:`.routing` (tree edges to link paths, the congestion check),
:mod:`.symmetry`, :mod:`.allreduce_lp`, :mod:`.lp_trees`, and :mod:`.algo` (the registered
synthesizer: trees to IR per message size).
"""

from __future__ import annotations

from ...flow.optimality import (
    Optimum,
    fixed_k,
    integer_bandwidths,
    optimal_allgather,
    simplest_between,
    transpose,
)
from .allreduce_lp import allreduce_lp
from .lp_trees import allreduce_lp_trees
from .packing import pack_trees
from .routing import route_trees, tree_congestion
from .splitting import LogicalTopology, remove_switches
from .symmetry import automorphisms, symmetric_trees
from .trees import SYMMETRY_MIN_RANKS, forestcoll_trees

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
    "allreduce_lp_trees",
]
