"""``teccl`` — TE-CCL's time-expanded multi-commodity-flow formulation, solved with HiGHS.

Implements TE-CCL (Liu et al., "Rethinking Machine Learning Collective Communication as a
Multi-Commodity Flow Problem", ACM SIGCOMM 2024) §3 (the epoch model: flows, buffers, capacity
per epoch, copy at GPUs, demand-met variables, alpha as epoch delays, slow links over several
epochs), §4 (the AllGather MILP with its objectives, the AllToAll LP, choosing the number of
epochs K, early stop by MIP gap) and what TE-CCL's public implementation does beyond the paper
(epoch duration ``fast``/``slow``/user times a multiplier, the alpha check and alpha threshold,
the sliding-window capacity, the input/output files). Modules:

* :mod:`.algo` — the options, the registration as ``teccl`` and the run;
* :mod:`.milp_search` / :mod:`.lp_search` — the search over the horizon ``K`` around the
  multicast MILP and the AllToAll LP; :mod:`.heuristic` — the heuristic schedules placed into
  epochs (warm start and horizon);
* :mod:`.epochs` — epoch grid, per-link alpha/beta epochs and delays, seeded alpha sampler
  (the heterogeneous-alpha setting of Srinivasan, "A Performance Evaluation of Collective
  Communication Libraries", MSc project, University of Victoria, 2026);
* :mod:`.milp` — the multicast MILP (AllGather, Broadcast, Gather, Scatter, custom chunks);
* :mod:`.lp` — the source-aggregated LP (AllToAll, demand matrices) and its path
  decomposition into chunk byte ranges;
* :mod:`.lower` — the epoch-model heuristics (greedy placement of a schedule, rarest-first
  flooding: warm start and horizon), compaction, and the timed IR (list scheduling in epoch
  order, per-link orders);
* :mod:`.cut_bound` — the epoch cut bound (the fewest epochs by cuts into regions);
* :mod:`.highs` — the HiGHS helper: the options ``highs=`` may set, the model-size rules and
  the solve in a helper process; :mod:`.common` — the shared model types (commodities, epoch
  ops, the linear model, epoch distances);
* :mod:`.symmetry` — one commodity per orbit where the fabric's automorphisms permute the
  chunks;
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
  (:func:`.highs.hard_limit`), and the best schedule found before it is returned.
"""

from __future__ import annotations

from .algo import MODES, OBJECTIVES, OPTIONS, overall_status, teccl
from .epochs import EpochGrid, make_grid, parse_epoch, sample_alphas
from .highs import HIGHS_OPTIONS

__all__ = [
    "HIGHS_OPTIONS",
    "MODES",
    "OBJECTIVES",
    "OPTIONS",
    "EpochGrid",
    "make_grid",
    "overall_status",
    "parse_epoch",
    "sample_alphas",
    "teccl",
]
