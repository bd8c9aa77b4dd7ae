"""Measuring schedules on the testbed and setting the measurements beside the simulator's.

:func:`measure` makes one testbed for a topology, runs every schedule at every size over it
(one ``mpiexec`` launch per size, every rank in its own namespace), times Open MPI's own
collective on the same shaped network once per size, and simulates each schedule at the same
size. Every time is given twice: ``raw`` as measured on the scaled network, and in the
topology's own units (raw x scale: bandwidth was scaled by ``scale``, latency is dilated by
1/scale in the executor, so the whole run is 1/scale slower than on the real network).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CollsynthError, RunFailedError
from ..schedule.io import save_schedule
from ..schedule.ir import Schedule
from ..topology.model import Topology

#: default shaping: the sum of every link's scaled bandwidth (what the CPU must move when all
#: links are busy) is this many bytes/s, well under what two cores move over veth pairs
DEFAULT_AGGREGATE_BPS = 100e6


def default_scale(topology: Topology) -> float:
    """The scale at which all links together carry ``DEFAULT_AGGREGATE_BPS``."""
    total = sum(float(link.bw) for link in topology.links)
    return DEFAULT_AGGREGATE_BPS / total


def fit_size(size: float, scheds: Sequence[Schedule]) -> int:
    """The size nearest ``size`` (at least one quantum) that every schedule can run."""
    from ..runtime.check import element_dtype
    from ..runtime.plan import size_quantum

    q = 1
    for s in scheds:
        elem = element_dtype(s.collective, np.dtype(np.float32)).itemsize
        q = math.lcm(q, size_quantum(s, elem))
    return max(q, int(round(size / q)) * q)


@dataclass
class Case:
    """One schedule to run at one (requested) size."""

    label: str
    size: float
    schedule: Schedule


@dataclass
class Measurement:
    """What :func:`measure` found: rows per (schedule, size), Open MPI's own per size."""

    topology: str
    collective: str
    scale: float
    latency: str
    rows: list[dict] = field(default_factory=list)
    mpi: list[dict] = field(default_factory=list)
    ceiling: dict | None = None
    skipped: list[dict] = field(default_factory=list)

    def summary(self) -> list[dict]:
        """Per size: the rank correlation of simulated and measured times over the schedules,
        the simulator's winner, the measured winner, and what trusting the simulator lost."""
        out = []
        for size in sorted({r["size_bytes"] for r in self.rows}):
            rows = [r for r in self.rows if r["size_bytes"] == size]
            sim = [r["simulated_time_s"] for r in rows]
            got = [r["measured_time_s"] for r in rows]
            sim_best = min(rows, key=lambda r: r["simulated_time_s"])
            got_best = min(rows, key=lambda r: r["measured_time_s"])
            mpi = next((m for m in self.mpi if m["size_bytes"] == size), None)
            out.append(
                {
                    "size_bytes": size,
                    "schedules": len(rows),
                    "spearman": spearman(sim, got),
                    "simulated_winner": sim_best["algo"],
                    "measured_winner": got_best["algo"],
                    "loss": sim_best["measured_time_s"] / got_best["measured_time_s"] - 1.0,
                    "best_vs_mpi": None
                    if mpi is None
                    else mpi["measured_time_s"] / got_best["measured_time_s"],
                }
            )
        return out

    def to_dict(self) -> dict:
        return {
            "topology": self.topology,
            "collective": self.collective,
            "scale": self.scale,
            "latency": self.latency,
            "rows": self.rows,
            "mpi": self.mpi,
            "summary": self.summary(),
            "ceiling": self.ceiling,
            "skipped": self.skipped,
        }


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (None with fewer than 3 values or no spread)."""
    if len(a) < 3:
        return None
    from scipy.stats import spearmanr

    rho = spearmanr(a, b).statistic
    return None if rho is None or not math.isfinite(rho) else float(rho)


def measure(
    topology: Topology,
    cases: Sequence[Case],
    scale: float,
    *,
    iters: int = 3,
    warmup: int = 1,
    check: bool = False,
    timeout: float = 120.0,
    reference: bool = True,
    ceiling: bool = True,
    on_step: Callable[[str], None] | None = None,
) -> Measurement:
    """Run ``cases`` on a testbed of ``topology`` shaped at ``scale`` (see the module)."""
    from ..sim import simulate
    from .session import Testbed

    if not cases:
        raise CollsynthError("nothing to measure")
    coll = cases[0].schedule.collective
    result = Measurement(topology.name, coll.describe(), scale, "")
    by_size: dict[float, list[Case]] = {}
    for c in cases:
        by_size.setdefault(c.size, []).append(c)
    step = on_step or (lambda s: None)
    with tempfile.TemporaryDirectory(prefix="collsynth-testbed-") as tmp:
        with Testbed(topology, scale) as tb:
            result.latency = tb.latency_note
            for size, group in sorted(by_size.items()):
                fitted = fit_size(size, [c.schedule for c in group])
                step(f"measuring {len(group)} schedule(s) at {fitted} B")
                sims = [simulate(c.schedule, fitted).time_s for c in group]
                # a step's deadline covers the slowest schedule's expected raw time, 4 times over
                limit = max(timeout, 4 * max(sims) / scale + 30)
                report = _launch(tb, group, fitted, tmp, iters, warmup, check, limit, reference)
                for c, run, sim_s in zip(group, report.runs, sims):
                    row = _row(c, run, fitted, sim_s, scale)
                    row["route_mismatch_ops"] = route_mismatches(c.schedule, tb.wiring)
                    result.rows.append(row)
                ref = report.runs[0].get("reference_time_s") if report.runs else None
                if reference and ref:
                    times = report.runs[0].get("reference_times_s") or [ref]
                    result.mpi.append(_timed("mpi", fitted, times, scale, coll.busbw_factor))
        if ceiling:
            result.ceiling = _ceiling(topology, cases, scale, tmp, timeout, step)
    return result


def _launch(tb, group, size, tmp, iters, warmup, check, timeout, reference, delay=True):
    from ..runtime.launcher import launch

    paths = []
    for i, c in enumerate(group):
        path = os.path.join(tmp, f"{i}-{c.label}.json")
        save_schedule(c.schedule, path, timing=False)
        paths.append(path)
    rep = launch(
        paths,
        size,
        tb.topology.num_ranks,
        check=check,
        iters=iters,
        warmup=warmup,
        timeout=timeout,
        reference=reference,
        reference_once=True,
        alpha_delay=tb.alpha_delay if delay else 0.0,
        mca=tb.mpi_options(),
        wrapper=tb.wrapper(),
        raise_on_error=False,
    )
    if not rep.ok:
        if rep.returncode == 2:
            raise CollsynthError(f"testbed run at {size} B: {rep.error}")
        where = f" (mpiexec log: {rep.log})" if rep.log else ""
        raise RunFailedError(f"testbed run at {size} B failed: {rep.error}{where}")
    return rep


def route_mismatches(sched: Schedule, wiring: Any) -> int:
    """How many of the schedule's operations take a route other than the testbed's.

    The testbed routes by destination (one path per pair of ranks); a schedule may route two
    operations between the same pair differently (over two spines, say). Such operations run
    over the testbed's path instead, so their row is a less faithful test of the simulator.
    """
    topo = sched.topology
    src = [int(link.src) for link in topo.links]
    dst = [int(link.dst) for link in topo.links]
    rank = topo.rank_of_node
    bad = 0
    for op in range(sched.num_ops):
        route = sched.route(op)
        if len(route) == 0:
            continue
        nodes = (src[int(route[0])], *(dst[int(x)] for x in route))
        if nodes != wiring.paths[int(rank[nodes[0]])][int(rank[nodes[-1]])]:
            bad += 1
    return bad


def _timed(label: str, size: int, times: Sequence[float], scale: float, busbw: float) -> dict:
    """A measurement's figures: raw (as measured) and in the topology's own units."""
    med = statistics.median(times)
    t = med * scale
    return {
        "algo": label,
        "size_bytes": size,
        "measured_time_s": t,
        "measured_algbw_Bps": size / t,
        "measured_busbw_Bps": size / t * busbw,
        "raw": {
            "time_s": med,
            "min_s": min(times),
            "max_s": max(times),
            "times_s": list(times),
            "algbw_Bps": size / med,
        },
    }


def _row(c: Case, run: dict, size: int, sim_s: float, scale: float) -> dict:
    coll = c.schedule.collective
    row = _timed(c.label, size, run["times_s"], scale, coll.busbw_factor)
    row.update(
        requested_size_bytes=c.size,
        simulated_time_s=sim_s,
        simulated_algbw_Bps=size / sim_s,
        ratio=row["measured_time_s"] / sim_s,
        check=run.get("check"),
        ops=c.schedule.num_ops,
    )
    return row


def _ceiling(topology, cases, scale, tmp, timeout, step) -> dict:
    """The first schedule at the largest size on the same wiring without shaping or emulated
    latency: what the CPU moves; ``headroom`` is that raw bandwidth over what the shaped run
    should reach."""
    from ..sim import simulate
    from .session import Testbed

    big = max(cases, key=lambda c: (c.size, -cases.index(c)))
    size = fit_size(big.size, [big.schedule])
    step(f"measuring the CPU ceiling ({big.label} at {size} B, unshaped)")
    expect = simulate(big.schedule, size).time_s / scale  # raw time the shaped run should take
    with Testbed(topology, scale, shaped=False) as tb:
        limit = max(timeout, expect + 30)
        report = _launch(tb, [big], size, tmp, 3, 1, False, limit, False, delay=False)
    med = statistics.median(report.runs[0]["times_s"])
    return {
        "algo": big.label,
        "size_bytes": size,
        "raw_time_s": med,
        "raw_algbw_Bps": size / med,
        "headroom": expect / med,
    }
