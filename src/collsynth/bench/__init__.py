"""Benchmarks: the one home of collsynth's benchmark code.

``collsynth bench SUITE [-o DIR]`` runs a suite and writes ``DIR/SUITE.json`` (machine-readable,
for run-to-run comparison) and ``DIR/SUITE.md`` (a table); the repository keeps its own results
in ``bench/results``. :mod:`.harness` holds the topology x collective x size x algorithm suites
(quick, paper, fabrics, quality, sim); the suites with their own tables are modules of their own:
:mod:`.teccl` (the TE-CCL epoch MILP/LP), :mod:`.mteg` (MTEGCCA, and against TE-CCL) and
:mod:`.syccl` (SyCCL at 32 to 512 GPUs), :mod:`.scale_ccl` (SCALE-CCL on the WAN, and its
re-planning time) and :mod:`.testbed` (simulated against measured on the emulated testbed;
``testbed_sim`` simulates its committed measurements again and rewrites ``testbed.*``) and
:mod:`.sweep` (a 100-case sweep in this process and on a local Dask cluster) and
:mod:`.scalability` (the scalability targets: 4096 GPUs, the simulator's speed, first-run
compilation).

:mod:`.suites`: :data:`SUITES` lists every suite name; :func:`run_suite` dispatches. Every
suite takes ``(out_dir, repeat, progress, only)`` and returns a dict with a ``summary``
(``rows``: how many rows the results file holds).
"""

from __future__ import annotations

from .suites import MODULE_SUITES, SUITES, run_suite

__all__ = ["MODULE_SUITES", "SUITES", "run_suite"]
