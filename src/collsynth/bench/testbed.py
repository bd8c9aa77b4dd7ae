"""The testbed study: does the simulator rank schedules the way a real (emulated) network does?

For every case (topology x collective), every applicable algorithm is synthesized like
``collsynth compare`` and measured on a fresh testbed (:func:`collsynth.testbed.measure`) at 64
KB, 1 MB and 8 MB, next to Open MPI's own collective; every schedule also runs on the same
wiring without shaping (its CPU headroom), and rows with too little headroom (3x, more for
schedules with many messages per rank) run again at a lower scale. Every shaped measurement runs
in ``LAUNCHES`` launches and a row's time is the median over all their iterations. One
calibration runs first: two ranks on one link exchange 4 MB at the default shaping
(``LAUNCHES`` launches, the median one), and the ratio of the ideal time to the measured one is
the testbed's *efficiency* (TCP/IP headers, acknowledgements, the executor's own work); every
measured/simulated ratio is also given multiplied by it (``ratio_calibrated``). Each row keeps
the efficiency of the run that measured it (``efficiency``; a case merged by ``--only`` keeps
its own run's calibration).
A second calibration finds the testbed's cost per operation (:func:`calibrate_op_cost`). The
primary figures simulate with links shared by the rank pairs' connections (``order="fair"``, as
the testbed's TCP links behave); every row is also simulated with the cost per operation
(``simulated_op_cost_s``) and first-served (``simulated_fcfs_s``), and the study gives their
figures too (``ALTERNATIVES``).

A row is *bandwidth-bound* when its simulated time per byte is within 25% of the same
algorithm's at the largest size. The study's figures: Spearman's rank correlation between
simulated and measured times over the algorithms of each (case, size); the calibrated ratio's
distribution on bandwidth-bound rows; whether the simulator's winner is the measured winner and
what trusting it lost; and the best schedule against Open MPI's own collective.

``collsynth bench testbed -o bench/results`` (as root, with mpiexec) writes ``testbed.json``,
``testbed.md`` and one picture per case in ``testbed/``; ``--only dgx1`` re-runs the matching
cases and merges them into those files.

This module runs the study: it calibrates, measures, simulates the measured rows again and
writes the files; :mod:`.testbed_study` holds the study's simulator models, its statistics and
its markdown (its names are re-exported here).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from ..collective import Collective
from ..errors import CollsynthError
from ..units import fmt_size
from .common import merge_rows, read_json, select, summary, write_files
from .testbed_study import (
    ALTERNATIVE_TEXT,
    ALTERNATIVES,
    DOC_BEGIN,
    DOC_END,
    ORDER,
    doc_path,
    study,
    study_markdown,
    to_markdown,
    update_doc,
)

__all__ = [
    "ALTERNATIVES",
    "ALTERNATIVE_TEXT",
    "BW_BOUND",
    "CASES",
    "LAUNCHES",
    "CASE_SIZES",
    "DOC_BEGIN",
    "DOC_END",
    "OPTIONS",
    "OP_COST_CHUNKS",
    "OP_COST_SIZE",
    "OP_COST_TOPOLOGY",
    "ORDER",
    "SIZES",
    "Progress",
    "calibrate",
    "calibrate_op_cost",
    "doc_path",
    "op_cost_for",
    "resimulate",
    "run_case",
    "run_suite",
    "study",
    "study_markdown",
    "to_markdown",
    "update_doc",
    "with_model",
]

Progress = Callable[[str], None] | None

#: (topology, collective) cases of the study
CASES: list[tuple[str, str]] = [
    ("dgx1", "allgather"),
    ("dgx1", "reducescatter"),
    ("dgx1", "allreduce"),
    ("dgx1", "alltoall"),
    ("ring:n=8", "allgather"),
    ("ring:n=8", "allreduce"),
    ("mesh2d:w=3,h=3", "allgather"),
    ("mesh2d:w=3,h=3", "allreduce"),
    ("ndv2:chassis=2", "allgather"),
    # 10 km between datacenters: 50 us of WAN latency, dilated by 1/scale to 0.45 s a hop
    ("wan:dcs=3,gpus=3,km=10", "allgather"),
    ("wan:dcs=3,gpus=3,km=10", "allreduce"),
]
SIZES = [64e3, 1e6, 8e6]
#: cases with other sizes: two NDv2 chassis meet over one IB link per chassis, scaled to
#: 0.5 MB/s; at 16 MB its slowest schedules take minutes per iteration
CASE_SIZES = {"ndv2:chassis=2": [64e3, 1e6, 4e6]}
#: solver budgets, so that a case's synthesis stays short
OPTIONS = {"teccl": {"time_limit": "20"}}
#: a row is bandwidth-bound when its time per byte is within this factor of the largest size's
BW_BOUND = 1.25


def _label(case: tuple[str, str]) -> str:
    return f"{case[0]} {case[1]}"


def _file(case: tuple[str, str]) -> str:
    keep = "".join(ch if ch.isalnum() else "_" for ch in case[0])
    return f"{keep}_{case[1]}.png"


#: launches of the one-link calibration (its efficiency is the median launch's) and of every
#: schedule's shaped measurement (a row's time is the median over all their iterations): one
#: slow launch on a shared machine once read 0.755 for an efficiency that is 0.93-0.95, and
#: swapped two schedules of equal simulated time by 10-20% between launches
LAUNCHES = 3


def calibrate(progress: Progress = None, launches: int = LAUNCHES) -> dict:
    """Two ranks, one link, 4 MB: the ideal time over the measured one (the efficiency; the
    median of ``launches`` launches of 5 iterations each); and the testbed's cost per
    operation (:func:`calibrate_op_cost`)."""
    from ..synth import synthesize
    from ..testbed.measure import Case, default_scale, measure
    from ..topology import load_topology

    load = os.getloadavg()[0]  # other work on the machine spoils the calibration
    topo = load_topology("line:n=2")
    sched = synthesize("direct", topo, Collective.make("allgather", 2, 1))
    scale = default_scale(load_topology("dgx1")) * 2  # dgx1's fastest link, at its scale
    times, size = [], 0
    for k in range(launches):
        if progress:
            progress(f"calibrating: one link, 4 MB (launch {k + 1} of {launches})")
        m = measure(topo, [Case("direct", 4e6, sched)], scale, iters=5, ceiling=False,
                    reference=False)  # fmt: skip
        (row,) = m.rows
        times.append(row["raw"]["time_s"])
        size = row["size_bytes"]
    rate = topo.links[0].bw * scale
    ideal = size / 2 / rate + topo.links[0].alpha / scale
    measured = statistics.median(times)
    return {
        "link_rate_Bps": rate,
        "size_bytes": size,
        "ideal_raw_s": ideal,
        "measured_raw_s": measured,
        "launches_raw_s": times,
        "efficiency": ideal / measured,
        "load_1min_before": load,
        "op_cost": calibrate_op_cost(progress),
    }


#: the per-operation calibration: every rank sends OP_COST_CHUNKS small messages to each of
#: the 7 others at once, on a fully linked network without latency, so that issuing them is
#: most of the time
OP_COST_TOPOLOGY = "full:n=8,alpha=0"
OP_COST_CHUNKS = 16
OP_COST_SIZE = 512e3


def calibrate_op_cost(progress: Progress = None) -> dict:
    """The cost per operation at its sender (raw seconds) at which the simulator reproduces a
    measured burst of small messages: 8 ranks (as most cases have), every one sending
    ``OP_COST_CHUNKS`` chunks to every other at once (``direct`` AllGather), no latency.
    Found by bisection (the simulated time grows with the cost); 0 where the pure model is
    already as slow as the measurement."""
    from ..sim import simulate
    from ..synth import synthesize
    from ..testbed.measure import Case, default_scale, measure
    from ..topology import load_topology

    topo = load_topology(OP_COST_TOPOLOGY)
    n = topo.num_ranks
    sched = synthesize("direct", topo, Collective.make("allgather", n, OP_COST_CHUNKS))
    scale = default_scale(topo)
    if progress:
        progress(f"calibrating: {sched.num_ops} small messages at once on {topo.name}")
    m = measure(topo, [Case("direct", OP_COST_SIZE, sched)], scale, iters=5, ceiling=False,
                reference=False)  # fmt: skip
    (row,) = m.rows
    measured = row["raw"]["time_s"]

    def raw_sim(cost: float) -> float:
        t = simulate(sched, row["size_bytes"], op_cost_s=cost * scale, order=ORDER).time_s
        return t / scale

    lo, hi = 0.0, measured
    if raw_sim(0.0) < measured:
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if raw_sim(mid) < measured else (lo, mid)
    return {
        "topology": topo.name,
        "ranks": n,
        "ops": sched.num_ops,
        "size_bytes": row["size_bytes"],
        "measured_raw_s": measured,
        "simulated_alpha_beta_raw_s": raw_sim(0.0),
        "op_cost_raw_s": lo,
    }


def _finish(data: dict, case: tuple[str, str], scheds: dict, cal: dict, ranks: int) -> None:
    """The study's own fields on a measurement's rows: the figures of the secondary models
    (``ALTERNATIVES``), the calibrated ratios, whether a row is bandwidth-bound, the case
    label."""
    for name, (order, costly) in ALTERNATIVES.items():
        with_model(data, scheds, name, order, op_cost_for(cal, ranks) if costly else 0.0)
    largest: dict[str, float] = {}
    for r in data["rows"]:
        per_byte = r["simulated_time_s"] / r["size_bytes"]
        largest[r["algo"]] = min(largest.get(r["algo"], per_byte), per_byte)
    eff = cal["efficiency"]
    for r in data["rows"]:
        r["case"] = _label(case)
        r["efficiency"] = eff  # the calibration of the run that measured the row
        r["ratio_calibrated"] = r["ratio"] * eff
        if r.get("simulated_plan_s"):  # measured over the planned order's time
            r["ratio_calibrated_plan"] = r["measured_time_s"] / r["simulated_plan_s"] * eff
        for name in ALTERNATIVES:
            r[f"ratio_calibrated_{name}"] = r[f"ratio_{name}"] * eff
        r["bandwidth_bound"] = (
            r["simulated_time_s"] / r["size_bytes"] <= BW_BOUND * largest[r["algo"]]
        )
    for r in data["mpi"]:
        r["case"] = _label(case)


def resimulate(out_dir: str, progress: Progress = None, only: str | None = None) -> dict:
    """Simulate the measured rows of ``OUT/testbed.json`` again with the current simulator
    (schedules synthesized again, as deterministic as the algorithms are) and rewrite the
    study's files: what a simulator change does to the study, without root or a testbed.
    Rows whose schedule cannot be made again the same way (a time-limited solver that found
    a different schedule) are named in the summary and keep their recorded figures."""
    from ..report.compare import applicable, compare
    from ..report.plots import plot_testbed
    from ..synth.order import without_chosen_order
    from ..testbed.measure import Measurement
    from ..topology import load_topology

    t0 = time.perf_counter()
    old = read_json(os.path.join(out_dir, "testbed.json"))
    if not old.get("rows"):
        raise CollsynthError(f"{out_dir}/testbed.json holds no measured rows to simulate again")
    header, cal = old["header"], old["header"]["calibration"]
    chosen = select("testbed", CASES, _label, only)
    results: list[tuple[tuple[str, str], dict]] = []
    changed: list[str] = []
    os.makedirs(os.path.join(out_dir, "testbed"), exist_ok=True)
    for case in CASES:
        label = _label(case)
        rows = [r for r in old["rows"] if r["case"] == label]
        mpi = [m for m in old["mpi"] if m["case"] == label]
        meta = next((c for c in old["cases"] if c["case"] == label), None)
        if meta is None or not rows:
            continue
        data = {"rows": rows, "mpi": mpi, "summary": meta["per_size"],
                "ceiling": meta["ceiling"], "skipped": meta["skipped"], "scale": meta["scale"],
                "failed": meta["failed"] or meta["failed_steps"] or None,
                "calibration": meta.get("calibration")}  # fmt: skip
        if case in chosen:
            if progress:
                progress(f"{label}: simulating {len(rows)} measured rows again")
            topo = load_topology(case[0])
            coll = Collective.make(case[1], topo.num_ranks, 1)
            keep: dict = {}
            compare(topo, coll, sorted({r["requested_size_bytes"] for r in rows}),
                    applicable(coll), options=OPTIONS, keep=keep)  # fmt: skip
            for r in rows:
                sched = keep[r["algo"], r["requested_size_bytes"]]
                if not r.get("link_ordered"):  # measured before schedules carried link orders
                    sched = without_chosen_order(sched)
                    keep[r["algo"], r["requested_size_bytes"]] = sched
                if not _simulate_again(r, sched):
                    changed.append(f"{label} {r['algo']} {fmt_size(r['size_bytes'])}")
            m = Measurement(label, coll.describe(), meta["scale"], "", rows=rows, mpi=mpi)
            data.update(summary=m.summary(), topology=topo.name, collective=coll.describe())
            _finish(data, case, keep, meta.get("calibration") or cal, topo.num_ranks)
            data["calibration"] = meta.get("calibration")
            plot_testbed(data, os.path.join(out_dir, "testbed", _file(case)))
        results.append((case, data))
    rows = _write(out_dir, header, results, {}, None)
    out = summary(len(CASES), len(chosen), len(rows), time.perf_counter() - t0, only)
    out["rows_kept_as_recorded"] = changed
    return {"summary": out, "files": "testbed"}


def _simulate_again(r: dict, sched: Any) -> bool:
    """Simulate measured row ``r`` again on ``sched`` (its schedule made again); False, and
    ``r`` left as recorded, where ``sched`` is not the schedule that was measured (its
    plan-order time differs from the recorded one)."""
    from ..sim import simulate
    from ..testbed.measure import planned_time, required_headroom

    plan = planned_time(sched, r["size_bytes"])
    recorded = r.get("simulated_plan_s")
    if recorded is None and r.get("simulated_order", "auto").startswith("auto"):
        recorded = r["simulated_time_s"]  # rows of runs that simulated in plan order
    if recorded is not None and abs(plan - recorded) > 1e-9 * plan:
        r["simulated_order"] = "auto (as recorded: schedule not made again)"
        return False
    t = simulate(sched, r["size_bytes"], order=ORDER).time_s
    r.update(simulated_time_s=t, simulated_algbw_Bps=r["size_bytes"] / t,
             ratio=r["measured_time_s"] / t, simulated_order=ORDER,
             simulated_plan_s=plan)  # fmt: skip
    if r.get("unshaped_raw_s"):  # the headroom by the current model and rule
        need = required_headroom(sched)
        room = t / r["scale"] / r["unshaped_raw_s"]
        r.update(headroom=room, required_headroom=need, cpu_bound=room < need)
    return True


def with_model(data: dict, scheds: dict, name: str, order: str, cost: float) -> None:
    """Add the simulator's figures in a secondary model (link ``order``, and raw ``cost`` per
    operation at each row's scale) to a measurement's rows (``simulated_NAME_s``,
    ``ratio_NAME``) and sizes (``spearman_NAME``, ``simulated_winner_NAME``). The primary
    figures stay the study's model (``ORDER``, no cost per operation)."""
    from ..sim import simulate
    from ..testbed.measure import spearman

    for r in data["rows"]:
        sched = scheds[r["algo"], r["requested_size_bytes"]]
        t = simulate(sched, r["size_bytes"], op_cost_s=cost * r["scale"], order=order).time_s
        r[f"simulated_{name}_s"] = t
        r[f"ratio_{name}"] = r["measured_time_s"] / t
    for s in data["summary"]:
        rows = [r for r in data["rows"] if r["size_bytes"] == s["size_bytes"]]
        sim = [r[f"simulated_{name}_s"] for r in rows]
        s[f"spearman_{name}"] = spearman(sim, [r["measured_time_s"] for r in rows])
        s[f"simulated_winner_{name}"] = rows[sim.index(min(sim))]["algo"]


def op_cost_for(cal: dict, ranks: int) -> float:
    """The calibrated cost per operation for a case of ``ranks`` ranks: the ranks share the
    machine's cores, so a rank's wall time per operation grows with their number."""
    oc = cal.get("op_cost") or {}
    return float(oc.get("op_cost_raw_s", 0.0)) * ranks / max(1, int(oc.get("ranks", 1)))


def run_case(case: tuple[str, str], cal: dict, iters: int, plots: str,
             progress: Progress) -> dict:  # fmt: skip
    """Synthesize, measure and picture one case; its rows and per-size summary."""
    from ..report.compare import applicable, compare
    from ..report.plots import plot_testbed
    from ..testbed.measure import Case, default_scale, measure
    from ..topology import load_topology

    spec, kind = case
    topo = load_topology(spec)
    coll = Collective.make(kind, topo.num_ranks, 1)
    keep: dict = {}
    sizes = CASE_SIZES.get(spec, SIZES)
    comparison = compare(topo, coll, sizes, applicable(coll), options=OPTIONS, keep=keep)
    cases = [Case(algo, size, sched) for (algo, size), sched in keep.items()]
    if progress:
        progress(f"{_label(case)}: measuring {len(cases)} schedule-size pairs")
    m = measure(topo, cases, default_scale(topo), iters=iters, check=True, on_step=progress,
                order=ORDER, launches=LAUNCHES)  # fmt: skip
    m.skipped = comparison.skipped
    data = m.to_dict()
    data["calibration"] = cal
    scheds = {(c.label, c.size): c.schedule for c in cases}
    _finish(data, case, scheds, cal, topo.num_ranks)
    os.makedirs(plots, exist_ok=True)
    plot_testbed(data, os.path.join(plots, _file(case)))
    return data


def run_suite(out_dir: str, repeat: int = 3, progress: Progress = None,
              only: str | None = None) -> dict:  # fmt: skip
    """Run the study (see the module) and write ``OUT/testbed.json``, ``.md`` and pictures."""
    from ..testbed import netns

    netns.require_tools()
    t0 = time.perf_counter()
    chosen = select("testbed", CASES, _label, only)
    cal = calibrate(progress)
    old = read_json(os.path.join(out_dir, "testbed.json")) if only is not None else {}
    header = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "iters": max(3, repeat),
        "launches": LAUNCHES,
        "calibration": cal,
    }
    results: list[tuple[tuple[str, str], dict]] = []
    rows: list[dict] = []
    for case in chosen:
        try:
            data = run_case(case, cal, max(3, repeat),
                            os.path.join(out_dir, "testbed"), progress)  # fmt: skip
        except CollsynthError as e:  # keep the study going; the failure is part of it
            if progress:
                progress(f"{_label(case)}: failed: {e}")
            data = {"rows": [], "mpi": [], "summary": [], "ceiling": None, "skipped": [],
                    "scale": 0.0, "failed": str(e), "calibration": cal}  # fmt: skip
        results.append((case, data))
        rows = _write(out_dir, header, results, old, only)  # after every case: a long run
    return {"summary": summary(len(CASES), len(chosen), len(rows), time.perf_counter() - t0, only)}


def _write(out_dir: str, header: dict, results: list, old: dict, only: str | None) -> list[dict]:
    """Write the results so far (merged into ``old`` under ``only``); their rows."""
    rows = [r for _, d in results for r in d["rows"]]
    mpi = [r for _, d in results for r in d["mpi"]]
    per_case = [_case_summary(case, d) for case, d in results]
    if only is not None:
        ran: set[Any] = {_label(c) for c, _ in results}
        order = [_label(c) for c in CASES]
        rows = with_runs(old.get("rows", []), rows)
        rows = merge_rows(old.get("rows", []), rows, ran, lambda r: r["case"], order)
        mpi = merge_rows(old.get("mpi", []), mpi, ran, lambda r: r["case"], order)
        per_case = merge_rows(old.get("cases", []), per_case, ran, lambda r: r["case"], order)
    data = {"header": header, "study": study(rows, per_case), "cases": per_case, "rows": rows,
            "mpi": mpi}  # fmt: skip
    write_files(out_dir, {"testbed.json": json.dumps(data, indent=1),
                          "testbed.md": to_markdown(data)})  # fmt: skip
    update_doc(doc_path(out_dir), data)
    return rows


#: a row measured again (``--only``) keeps its last ``RUNS_KEPT`` runs of the same schedule
RUNS_KEPT = 3
#: what each run of a row keeps (besides every ``ratio*`` figure)
_RUN_FIELDS = ("measured_time_s", "efficiency", "scale", "link_faithful", "cpu_bound")


def _run_of(row: dict) -> dict:
    """One run's figures of a row."""
    keep = {k: row[k] for k in _RUN_FIELDS if k in row}
    keep.update({k: v for k, v in row.items() if k.startswith("ratio") and v is not None})
    return keep


def _counts(run: dict) -> bool:
    """Whether a run is evidence of its schedule's time: not CPU-bound, links faithful."""
    return not run.get("cpu_bound") and run.get("link_faithful", True) is not False


def with_runs(old_rows: list[dict], new_rows: list[dict]) -> list[dict]:
    """``new_rows`` (a case measured again), each with the earlier runs of the same schedule
    attached (``runs``: same case, algorithm and size, and the same simulated time, so the same
    schedule; at most ``RUNS_KEPT``, the newest last). A row with several runs reports the
    median of each figure (measured time, every ratio) over the runs that count (not
    CPU-bound, links faithful; all runs where none does), and counts as faithful and not
    CPU-bound when one of its runs does: the emulation's run-to-run spread is as wide as the
    study's band (one row moved 12 % between two runs 15 minutes apart)."""
    before = {(r.get("case"), r.get("algo"), r.get("size_bytes")): r for r in old_rows}
    out = []
    for row in new_rows:
        row = dict(row)
        old = before.get((row.get("case"), row.get("algo"), row.get("size_bytes")))
        runs: list[dict] = []
        if old is not None and abs(old["simulated_time_s"] - row["simulated_time_s"]) <= (
            1e-9 * row["simulated_time_s"]
        ):
            runs = list(old.get("runs") or [_run_of(old)])
        row["runs"] = (runs + [_run_of(row)])[-RUNS_KEPT:]
        if len(row["runs"]) > 1:
            _median_of_runs(row)
        out.append(row)
    return out


def _median_of_runs(row: dict) -> None:
    """``row``'s figures as the medians over its runs (:func:`with_runs`)."""
    counted = [r for r in row["runs"] if _counts(r)] or row["runs"]
    latest = row["measured_time_s"]
    for key in ("measured_time_s", *(k for k in row if k.startswith("ratio"))):
        values = [r[key] for r in counted if r.get(key) is not None]
        if values and row.get(key) is not None:
            row[key] = statistics.median(values)
    for key in ("measured_algbw_Bps", "measured_busbw_Bps"):
        if key in row:
            row[key] *= latest / row["measured_time_s"]
    if any(_counts(r) for r in row["runs"]):
        row["cpu_bound"] = False
        row["link_faithful"] = True


def _case_summary(case: tuple[str, str], data: dict) -> dict:
    failed = data.get("failed")
    return {
        "case": _label(case),
        "scale": data["scale"],
        "per_size": data["summary"],
        "ceiling": data["ceiling"],
        "skipped": data["skipped"],
        "failed": failed if isinstance(failed, str) else None,  # the whole case
        "failed_steps": failed if isinstance(failed, list) else [],  # one size, or MPI's own
        "picture": f"testbed/{_file(case)}",
        # the calibration of the run that measured the case (cases merged from other runs
        # keep theirs; the header has the latest run's)
        "calibration": data.get("calibration"),
    }
