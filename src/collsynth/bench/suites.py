"""The benchmark suites by name: :data:`SUITES` and :func:`run_suite`, which dispatches to the
harness or to a suite's own module (imported when run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CollsynthError
from ..parallel import Pool
from . import harness

Progress = Callable[[str], None] | None


def _run_teccl(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import teccl

    return teccl.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


def _run_mteg(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import mteg

    return mteg.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


def _run_syccl(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import syccl

    return syccl.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


def _run_scale_ccl(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import scale_ccl

    return scale_ccl.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


def _run_testbed(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import testbed

    return testbed.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


def _run_testbed_sim(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import testbed

    return testbed.resimulate(out_dir, progress=progress, only=only)


def _run_scalability(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import scalability

    return scalability.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


def _run_sim(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import sim

    return sim.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


def _run_sweep(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import sweep

    return sweep.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


def _run_compact(out_dir: str, repeat: int, progress: Progress, only: str | None) -> dict:
    from . import compact

    return compact.run_suite(out_dir, repeat=repeat, progress=progress, only=only)


#: The suites with their own modules (imported when run): name -> runner.
MODULE_SUITES: dict[str, Callable[..., dict]] = {
    "teccl": _run_teccl,
    "mteg": _run_mteg,
    "syccl": _run_syccl,
    "scale_ccl": _run_scale_ccl,
    "testbed": _run_testbed,
    "testbed_sim": _run_testbed_sim,
    "sim": _run_sim,
    "sweep": _run_sweep,
    "scalability": _run_scalability,
    "compact": _run_compact,
}

#: Every suite name: the harness's, then the modules'.
SUITES: tuple[str, ...] = (*harness.SUITES, *MODULE_SUITES)


def run_suite(
    suite: str,
    out_dir: str,
    repeat: int = 3,
    progress: Callable[[str], None] | None = None,
    only: str | None = None,
    pool: Pool | None = None,
) -> dict:
    """Run ``suite`` and write ``OUT/SUITE.json`` and ``OUT/SUITE.md``. ``only``: run just the
    cases whose label contains this text and merge their rows into the existing results.
    ``pool``: where the harness suites' cases run (:mod:`collsynth.parallel`); the other
    suites run in this process (their timings, solvers and testbed need the machine)."""
    if suite in harness.SUITES:  # looked up at call time: suites can be added there
        return harness.run_suite(
            suite, out_dir, repeat=repeat, progress=progress, only=only, pool=pool
        )
    runner: Any = MODULE_SUITES.get(suite)
    if runner is None:
        known = ", ".join([*harness.SUITES, *MODULE_SUITES])
        raise CollsynthError(f"unknown bench suite {suite!r} (known: {known})")
    if pool is not None and pool.distributed:
        raise CollsynthError(
            f"bench {suite} runs in this process only (--jobs and --scheduler are for the "
            f"suites {', '.join(harness.SUITES)})"
        )
    return runner(out_dir, repeat, progress, only)


__all__ = ["MODULE_SUITES", "SUITES", "run_suite"]
