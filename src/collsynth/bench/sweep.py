"""A 100-case sweep in this process and on a local Dask cluster: the speed-up, and the check
that both give the same results.

The cases are the ``quick`` suite's kind (synthesize, verify, simulate at three sizes, bound):
five small fabrics x four collectives x five algorithms. The sweep runs serially, on a local
cluster of one worker process, and on ``WORKERS`` (:mod:`collsynth.parallel`); the table gives
the wall times, the speed-ups, and whether every row matched apart from its timing figures
(the cluster's start-up is part of its wall time). ``collsynth bench sweep -o bench/results``
writes ``sweep.json`` and ``sweep.md``.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable

from ..parallel import Pool
from .common import write_files
from .harness import GB, KB, MB, Case, run_rows

TOPOLOGIES = ("ring:n=8", "dgx1", "star:n=8", "dgx_a100:nodes=2", "torus2d:w=4,h=4")
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
ALGOS = ("ring", "direct", "spt", "forestcoll", "mteg")
WORKERS = 2
#: per-row figures that are wall-clock times, not results
TIMING = ("synth_time_s", "verify_time_s", "sim_wall_s", "sim_hops_per_s")


def cases() -> list[Case]:
    """The sweep's 100 cases (a case an algorithm does not support gives no row)."""
    return [
        Case(t, c, a, (1 * KB, 1 * MB, 1 * GB))
        for t in TOPOLOGIES
        for c in COLLECTIVES
        for a in ALGOS
    ]


def results_only(rows: list[dict]) -> list[dict]:
    """Rows without their wall-clock figures."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def run_suite(out_dir: str, repeat: int = 1, progress: Callable[[str], None] | None = None,
              only: str | None = None) -> dict:  # fmt: skip
    """Run the sweep both ways and write ``sweep.json`` and ``sweep.md`` (``repeat`` and
    ``only`` do not apply: the sweep is the benchmark)."""
    todo = cases()
    runs = []
    for pool in (Pool(1), Pool(1, cluster=True), Pool(WORKERS)):
        if progress:
            progress(f"{len(todo)} cases in {pool.describe()}")
        t0 = time.perf_counter()
        rows = run_rows(todo, 1, None, pool)
        runs.append((pool, time.perf_counter() - t0, rows))
    (_, serial_s, serial), (_, one_s, on_one), (_, dask_s, on_dask) = runs
    same = results_only(serial) == results_only(on_dask) == results_only(on_one)
    summary = {
        "cases": len(todo),
        "rows": len(serial),
        "workers": WORKERS,
        "serial_wall_s": serial_s,
        "dask_1_wall_s": one_s,
        "dask_wall_s": dask_s,
        "speedup_1": serial_s / one_s,
        "speedup": serial_s / dask_s,
        "same_results": same,
    }
    data = {
        "suite": "sweep",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "summary": summary,
        "rows": results_only(serial),
    }
    md = "\n".join([
        "# bench suite `sweep`",
        "",
        f"{len(todo)} cases ({len(TOPOLOGIES)} fabrics x {len(COLLECTIVES)} collectives x "
        f"{len(ALGOS)} algorithms; synthesize, verify, simulate at 1 KB, 1 MB, 1 GB), "
        f"{len(serial)} rows, on {os.cpu_count()} cores.",
        "",
        "| run | wall s | speed-up |",
        "|---|---|---|",
        f"| this process | {serial_s:.1f} | 1.00 |",
        f"| local Dask cluster, 1 worker (start-up included) | {one_s:.1f} | "
        f"{serial_s / one_s:.2f} |",
        f"| local Dask cluster, {WORKERS} workers (start-up included) | {dask_s:.1f} | "
        f"{serial_s / dask_s:.2f} |",
        "",
        f"Same results all three ways (timing figures apart): {'yes' if same else 'NO'}.",
        "",
    ])  # fmt: skip
    write_files(out_dir, {"sweep.json": json.dumps(data, indent=1), "sweep.md": md})
    return {"summary": summary}
