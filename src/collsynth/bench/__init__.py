"""Benchmarks: the one home of collsynth's benchmark code.

``collsynth bench SUITE [-o DIR]`` runs a suite and writes ``DIR/SUITE.json`` (machine-readable,
for run-to-run comparison) and ``DIR/SUITE.md`` (a table); the repository keeps its own results
in ``bench/results``. :mod:`.harness` holds the topology x collective x size x algorithm suites
(quick, paper, scale, quality, sim).
"""

from .harness import SUITES, run_suite

__all__ = ["SUITES", "run_suite"]
