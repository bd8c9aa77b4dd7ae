"""Execution of schedules on real distributed engines (MPI, torch.distributed); see
docs/runtime.md.

* :func:`launch` — run schedule file(s) under ``mpiexec`` and get rank 0's parsed report;
* :func:`run_on_backend` — one rank's run (what ``collsynth run`` does on every rank);
* :func:`run_in_process` — every rank in one process on a simulated network (tests);
* :class:`RankExecutor`, :func:`build_rank_plan` — the interpreter and its per-rank program.

Layer: above schedule and verify, below cli. Backends import their engines lazily (mpi4py
initialises MPI on import; torch is an optional extra).
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "launch": "launcher",
    "RunReport": "launcher",
    "find_mpiexec": "launcher",
    "mpiexec_command": "launcher",
    "run_on_backend": "driver",
    "RunSummary": "driver",
    "Inject": "driver",
    "run_in_process": "fake",
    "FakeNetwork": "fake",
    "RankExecutor": "interp",
    "RunTimeout": "interp",
    "build_rank_plan": "plan",
    "RankPlan": "plan",
    "execution_order": "plan",
    "size_quantum": "plan",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'collsynth.runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{mod}", __name__), name)
