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
from .reaper import SCRATCH_PREFIX

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
    """What :func:`measure` found: rows per (schedule, size), Open MPI's own per size, the
    sizes whose run failed, and the CPU ceiling (the row with the least headroom)."""

    topology: str
    collective: str
    scale: float
    latency: str
    rows: list[dict] = field(default_factory=list)
    mpi: list[dict] = field(default_factory=list)
    ceiling: dict | None = None
    skipped: list[dict] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    op_cost_raw_s: float = 0.0
    order: str = "fair"

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
            pure = {}
            if self.op_cost_raw_s > 0:  # the same without the cost per operation
                ab = [r.get("simulated_alpha_beta_s", r["simulated_time_s"]) for r in rows]
                pure = {"spearman_alpha_beta": spearman(ab, got),
                        "simulated_winner_alpha_beta": rows[ab.index(min(ab))]["algo"]}  # fmt: skip
            out.append(
                {
                    "size_bytes": size,
                    "schedules": len(rows),
                    "spearman": spearman(sim, got),
                    **pure,
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
            "op_cost_raw_s": self.op_cost_raw_s,
            "simulated_order": self.order,
            "rows": self.rows,
            "mpi": self.mpi,
            "summary": self.summary(),
            "ceiling": self.ceiling,
            "skipped": self.skipped,
            "failed": self.failed,
        }


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (None with fewer than 3 values or no spread)."""
    if len(a) < 3:
        return None
    from scipy.stats import spearmanr

    rho = spearmanr(a, b).statistic
    # rounded: a rank correlation is a ratio of small integers, and 1 - 12/60 must read 0.8
    return None if rho is None or not math.isfinite(rho) else round(float(rho), 12)


#: a row whose shaped run needs less than 1/MIN_HEADROOM of what the CPU moves unshaped is
#: measured again on a slower testbed (bandwidth lowered by a power of two, at most LOWEST)
MIN_HEADROOM = 3.0
LOWEST = 8
#: schedules whose ranks send more messages than this need proportionally more headroom: the
#: unshaped run measures the CPU's average rate, while thousands of forwarded messages per rank
#: come in bursts that delay the critical path well before that rate is reached (a ForestColl
#: AllReduce with 3,360 messages per rank measured 1.94x its simulated time at 1.7x headroom,
#: 1.17x at 6.6x, where ring, with 14 per rank, measured 1.33x and 1.05x)
MESSAGES_PER_RANK = 1000


#: a transfer that the fidelity check judges moves data for at least this long at its link's
#: rate (raw seconds), so that what a message costs besides its bytes does not count
FIDELITY_MIN_RAW_S = 0.05
#: a transfer alone on its links that got less than this share of their rate: the testbed did
#: not emulate the link (traces showed 1 MB transfers alone on DGX-1's links at 0.67-0.85 of the
#: rate in four of six runs at 4.2e-5 of the bandwidth, none in four at half that, where the
#: same schedules then measured 1.00-1.01x their simulated time), and the row runs again at a
#: lower scale
FIDELITY_MIN = 0.8
#: a send posted more than this share of the row's expected raw time after it was due (and
#: more than ``POST_LATE_MIN_S``) waited for its rank's CPU: eight ranks share two cores, and
#: traces of scale's DGX-1 AllGather at 1 MB showed critical sends posted up to 19 ms late in a
#: 128 ms iteration, which then measured 1.14-1.21x its simulated time
POST_LATE_SHARE = 0.05
#: ... and never less than this (raw seconds): a scheduler's time slice, which latency-bound
#: rows cannot be spared
POST_LATE_MIN_S = 0.002


def link_fidelity(schedule: Schedule, times: dict, scale: float) -> dict | None:
    """How well the testbed carried the transfers that were alone on their links, from one
    traced iteration (``times``: :func:`collsynth.runtime.driver.op_times` for ``schedule``
    expanded as the executor ran it, raw seconds): for every operation whose time in flight
    (its send's posting to its arrival; emulated latency is waited out before the posting)
    overlapped no other operation's on any link of its route and whose bytes take at least
    ``FIDELITY_MIN_RAW_S`` at the route's slowest rate, the share of that rate it got. The
    number of such transfers, the worst share (and its operation) and the median; None when
    there is none. Model-free: it uses only the links' rates and the measured times."""
    sched = schedule.expand_joins().expand_groups()
    ptr = np.asarray(sched.route_ptr, dtype=np.int64)
    links = np.asarray(sched.route_links, dtype=np.int64)
    bw = np.asarray(sched.topology.link_bw, dtype=np.float64) * scale
    spans: dict[int, list[tuple[float, float, int]]] = {}
    ok = []
    for op in range(sched.num_ops):
        a, z = times["send_post_s"][op], times["arrival_s"][op]
        if a is None or z is None or not (math.isfinite(a) and math.isfinite(z)):
            continue
        ok.append(op)
        for lk in links[ptr[op] : ptr[op + 1]].tolist():
            spans.setdefault(lk, []).append((a, z, op))
    shares: list[tuple[float, int]] = []
    for op in ok:
        route = links[ptr[op] : ptr[op + 1]]
        if not len(route):
            continue
        ideal = times["bytes"][op] / float(bw[route].min())
        if ideal < FIDELITY_MIN_RAW_S:
            continue
        a, z = times["send_post_s"][op], times["arrival_s"][op]
        if any(o != op and s < z and a < e for lk in route.tolist() for s, e, o in spans[lk]):
            continue  # shared a link: the model decides its share, not the link alone
        shares.append((ideal / (z - a) if z > a else math.inf, op))
    if not shares:
        return None
    worst = min(shares)
    return {"lone_transfers": len(shares), "worst_share": worst[0], "worst_op": worst[1],
            "median_share": statistics.median(x for x, _ in shares)}  # fmt: skip


def required_headroom(schedule: Schedule) -> float:
    """The CPU headroom a measurement of ``schedule`` needs: ``MIN_HEADROOM``, times the most
    messages a rank sends over ``MESSAGES_PER_RANK`` where that is more than one."""
    n = schedule.topology.num_ranks
    sends = np.bincount(schedule.src, minlength=n).max() if schedule.num_ops else 0
    return MIN_HEADROOM * max(1.0, float(sends) / MESSAGES_PER_RANK)


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
    op_cost_raw_s: float = 0.0,
    order: str = "fair",
    launches: int = 1,
    on_step: Callable[[str], None] | None = None,
    trace: bool = False,
) -> Measurement:
    """Run ``cases`` on a testbed of ``topology`` shaped at ``scale`` (see the module).

    Per size, ``launches`` launches run every schedule (``iters`` timed iterations each; a row's
    time is the median over all of them, so that one slow launch, as a shared machine has now
    and then, does not decide a row) and one more times Open MPI's own collective
    (its deadline allows 8 times the slowest schedule's expected time; where it still fails,
    the size keeps its schedule rows and the failure is recorded). With ``ceiling``, every
    schedule first runs on the same wiring without shaping or emulated latency: its *headroom*
    is the shaped run's expected raw time over that unshaped time, and a row with less than
    its :func:`required_headroom` is measured again at a lower scale (rows of one size may
    then carry different scales; their times are all in the topology's own units). Every
    timed iteration is traced: one in which a transfer alone on its links got less than
    ``FIDELITY_MIN`` of their rate (:func:`link_fidelity`), or in which a send was posted long
    after it was due because its rank's process was not running (:func:`post_delay`), measured
    the emulation, not the schedule, and leaves the row's median (``raw.times_all_s`` keeps
    every iteration, ``link_fidelity`` counts them); where that is more than half of them, the
    row is measured again at a lower scale as well (``remeasured_because`` says which rule). A
    size whose launch fails is recorded in ``failed`` and the others go on; only when every
    size fails is it an error.

    ``order``: the simulator's link model for the comparison. ``fair`` (default, the realized
    model) is what the testbed's links do: collsynth's executor posts each send as soon as its
    data is ready and, where the schedule has link orders (every schedule collsynth
    synthesizes), each pair's sends in the pair's link order, as the MSCCL exporters order a
    thread block's steps; MPI's one TCP connection to a peer carries messages in posting order,
    and the connections of different rank pairs that cross one link share it. ``fcfs`` serves
    one transfer at a time per link. Each row also carries the planned-order figure
    (``simulated_plan_s``: one transfer at a time per link, the plan's priorities first).

    ``op_cost_raw_s`` > 0: what issuing one operation costs a rank of the testbed (raw seconds:
    the executor's and the kernel's work per message, which no shaping scales). Each row is
    then also simulated with that cost (``simulate(op_cost_s=op_cost_raw_s * scale)``, the
    row's scale) and ``simulated_time_s`` and ``ratio`` use it; the pure alpha-beta figure
    stays in ``simulated_alpha_beta_s``.

    ``trace``: every row also carries ``trace``, the per-operation times of the last timed
    iteration of its last launch (:func:`collsynth.runtime.driver.op_times`, raw seconds)
    and its ``scale``, for pictures of the timeline.
    """
    from ..sim import simulate

    if not cases:
        raise CollsynthError("nothing to measure")
    coll = cases[0].schedule.collective
    result = Measurement(topology.name, coll.describe(), scale, "", op_cost_raw_s=op_cost_raw_s,
                         order=order)  # fmt: skip
    step = on_step or (lambda s: None)
    groups: dict[int, list[tuple[Case, float]]] = {}  # fitted size -> (case, simulated time)
    for want in sorted({c.size for c in cases}):
        mine = [c for c in cases if c.size == want]
        fitted = fit_size(want, [c.schedule for c in mine])
        groups[fitted] = [(c, simulate(c.schedule, fitted, order=order).time_s) for c in mine]
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as tmp:
        if launches < 1:
            raise CollsynthError(f"launches must be at least 1, got {launches}")
        run = _Runner(topology, tmp, iters, warmup, check, timeout, step, op_cost_raw_s, order,
                      launches, trace)  # fmt: skip
        unshaped = run.unshaped(groups) if ceiling else {}
        rows: dict[tuple[int, int], dict] = {}
        slower: dict[int, list[tuple[int, int]]] = {}  # scale divisor -> (size, index)
        with run.testbed(scale) as tb:
            result.latency = tb.latency_note
            for size, group in groups.items():
                got = run.shaped(tb, size, group, scale, result)
                for i, row in got.items():
                    rows[size, i] = row
                    _with_headroom(row, group[i], unshaped.get((size, i)), scale)
                    div = _lower_by(row, ceiling)
                    if div > 1:
                        slower.setdefault(div, []).append((size, i))
                if reference and got:
                    run.reference(tb, size, group, scale, coll, result)
        _remeasure(run, slower, groups, unshaped, rows, scale, result)
    for key in sorted(rows):
        row = rows[key]
        if "headroom" in row:
            row["cpu_bound"] = row["headroom"] < row["required_headroom"]
        if row.get("link_fidelity") is not None:
            row["link_faithful"] = _faithful(row)
        result.rows.append(row)
    if not result.rows:
        raise RunFailedError("; ".join(f["error"] for f in result.failed) or "nothing measured")
    with_room = [r for r in result.rows if "headroom" in r]
    if with_room:
        worst = min(with_room, key=lambda r: r["headroom"])
        result.ceiling = {
            "algo": worst["algo"],
            "size_bytes": worst["size_bytes"],
            "raw_time_s": worst["unshaped_raw_s"],
            "raw_algbw_Bps": worst["size_bytes"] / worst["unshaped_raw_s"],
            "headroom": worst["headroom"],
            "rows_remeasured": sum("remeasured_from_scale" in r for r in result.rows),
            "rows_cpu_bound": sum(r["cpu_bound"] for r in with_room),
            "rows_unfaithful": sum(not r.get("link_faithful", True) for r in result.rows),
        }
    return result


def _remeasure(run: _Runner, slower: dict, groups: dict, unshaped: dict, rows: dict,
               scale: float, result: Measurement) -> None:  # fmt: skip
    """Measure the rows in ``slower`` (scale divisor -> (size, index)) again on a testbed at
    ``scale`` lowered by their divisor, each replacing its row in ``rows``."""
    for div, keys in sorted(slower.items()):
        low = scale / div
        run.step(f"measuring {len(keys)} row(s) again at scale/{div} (CPU headroom or link "
                 "fidelity)")  # fmt: skip
        with run.testbed(low) as tb:
            for size in sorted({k[0] for k in keys}):
                sub = [i for (s2, i) in keys if s2 == size]
                got = run.shaped(tb, size, [groups[size][i] for i in sub], low, result)
                for j, row in got.items():
                    i = sub[j]
                    _with_headroom(row, groups[size][i], unshaped.get((size, i)), low)
                    why = rows[size, i]["remeasured_because"]
                    row.update(remeasured_from_scale=scale, remeasured_because=why)
                    rows[size, i] = row


def _with_headroom(row: dict, case: tuple[Case, float], raw: float | None, scale: float) -> None:
    """Add the row's CPU headroom at ``scale``: its case's expected raw time over ``raw``, its
    unshaped time (nothing where there is none)."""
    if raw is not None:
        need = required_headroom(case[0].schedule)
        row.update(unshaped_raw_s=raw, headroom=case[1] / scale / raw, required_headroom=need)


def _lower_by(row: dict, ceiling: bool) -> int:
    """The factor to lower the scale by for a row measured on the first testbed (1: none):
    for too little CPU headroom, or (with ``ceiling``) too few faithful iterations; the
    reason goes into ``remeasured_because``."""
    div = 1
    if "headroom" in row and row["headroom"] < row["required_headroom"]:
        div = _divisor(row["headroom"], row["required_headroom"])
        row["remeasured_because"] = "headroom"
    if ceiling and not _faithful(row):
        div = max(div, 2)
        got = row["link_fidelity"]
        why = [w for w, k in (("link fidelity", "slow_link_iterations"),
                              ("posting fidelity", "late_iterations")) if got.get(k)]  # fmt: skip
        row.setdefault("remeasured_because", " and ".join(why) or "link fidelity")
    return div


def _faithful(row: dict) -> bool:
    """Whether at least half of the row's timed iterations showed the links carrying their
    rate and the ranks posting their sends when due (or it had nothing to judge): see
    :func:`_judged`."""
    got = row.get("link_fidelity")
    return got is None or 2 * got["faithful_iterations"] >= got["iterations"]


def post_delay(times: dict) -> tuple[float, int] | None:
    """The longest a send of one traced iteration (``times``, as for :func:`link_fidelity`)
    waited between being due (its dependencies met, its emulated latency over) and being
    posted, in raw seconds, and its operation; None without the executor's due times. The
    executor posts a due send at its next poll, so a long wait is time its rank's process was
    not running (ranks share the machine's cores): an iteration with one measured the CPU
    scheduler, not the schedule. Model-free, like :func:`link_fidelity`."""
    due, post = times.get("send_due_s"), times["send_post_s"]
    if due is None:
        return None
    waits = [(p - d, op) for op, (d, p) in enumerate(zip(due, post))
             if math.isfinite(d) and math.isfinite(p)]  # fmt: skip
    return max(waits) if waits else None


def _iteration_ok(schedule: Schedule, times: dict, scale: float, late_s: float,
                  tally: dict) -> bool:  # fmt: skip
    """Whether one traced iteration measured the schedule: every transfer alone on its links
    got at least ``FIDELITY_MIN`` of their rate, and no send was posted more than ``late_s``
    raw seconds after it was due; ``tally`` gathers the figures for the row's summary."""
    ok = True
    f = link_fidelity(schedule, times, scale)
    if f is not None:
        tally["judged"] += 1
        tally["worst"] = min(tally["worst"], f["worst_share"])
        tally["medians"].append(f["median_share"])
        ok = f["worst_share"] >= FIDELITY_MIN
        tally["slow"] += not ok
    wait = post_delay(times)
    if wait is not None:
        tally["waits"].append(wait[0])
        if wait[0] > late_s:
            tally["late"] += 1
            ok = False
    return ok


def _judged(schedule: Schedule, runs: list[dict], scale: float,
            expected_raw_s: float) -> tuple[list[dict], dict | None]:  # fmt: skip
    """The launches' runs of one schedule with only their *faithful* iterations, where every
    transfer alone on its links got at least ``FIDELITY_MIN`` of their rate
    (:func:`link_fidelity` of each iteration's trace) and no send waited for its rank's CPU
    more than ``POST_LATE_SHARE`` of the row's expected raw time (``expected_raw_s``; at
    least ``POST_LATE_MIN_S``: :func:`post_delay`), provided that at least half of all the
    iterations are (else every iteration, and the row is not faithful); and a summary (None
    without traces). An iteration in which the testbed did not carry a link's rate, or a
    rank's process did not run when its send was due, measured the emulation, not the
    schedule."""
    late_s = max(POST_LATE_MIN_S, POST_LATE_SHARE * expected_raw_s)
    tally: dict[str, Any] = {"judged": 0, "worst": math.inf, "medians": [], "waits": [],
                             "late": 0, "slow": 0}  # fmt: skip
    ok: list[list[bool]] = []
    for r in runs:
        traces = r.get("traces") or []
        if len(traces) != len(r["times_s"]):
            return runs, None
        ok.append([_iteration_ok(schedule, t, scale, late_s, tally) for t in traces])
    if not tally["judged"] and not tally["waits"]:
        return runs, None
    total = sum(len(f) for f in ok)
    good = sum(sum(f) for f in ok)
    summary: dict[str, Any] = {"iterations": total, "judged_iterations": tally["judged"],
                               "faithful_iterations": good}  # fmt: skip
    if tally["judged"]:
        summary.update(slow_link_iterations=tally["slow"], worst_share=tally["worst"],
                       median_share=statistics.median(tally["medians"]))  # fmt: skip
    if tally["waits"]:
        summary.update(late_iterations=tally["late"], late_after_raw_s=late_s,
                       worst_post_delay_raw_s=max(tally["waits"]),
                       median_post_delay_raw_s=statistics.median(tally["waits"]))  # fmt: skip
    if 2 * good < total:
        return runs, summary
    kept = []
    for r, flags in zip(runs, ok):
        times = [t for t, keep in zip(r["times_s"], flags) if keep]
        if times:
            kept.append(dict(r, times_s=times))
    return kept, summary


def _divisor(headroom: float, need: float = MIN_HEADROOM) -> int:
    """The power of two (at most ``LOWEST``) that lifts ``headroom`` to ``need``."""
    div = 2
    while div < LOWEST and headroom * div < need:
        div *= 2
    return div


@dataclass
class _Runner:
    """The launches of one :func:`measure` call."""

    topology: Topology
    tmp: str
    iters: int
    warmup: int
    check: bool
    timeout: float
    step: Callable[[str], None]
    op_cost_raw: float = 0.0
    order: str = "fair"
    launches: int = 1
    trace: bool = False

    def testbed(self, scale: float, shaped: bool = True) -> Any:
        from .session import Testbed

        return Testbed(self.topology, scale, shaped=shaped, scratch=self.tmp)

    def unshaped(self, groups: dict[int, list[tuple[Case, float]]]) -> dict[tuple[int, int], float]:
        """Every schedule's median raw time without shaping or delays (CPU-bound)."""
        out: dict[tuple[int, int], float] = {}
        with self.testbed(1.0, shaped=False) as tb:
            for size, group in groups.items():
                self.step(f"measuring {len(group)} schedule(s) at {size} B unshaped (CPU ceiling)")
                try:
                    rep = _launch(tb, [c for c, _ in group], size, self.tmp, 3, 1, False,
                                  self.timeout, False, delay=False)  # fmt: skip
                except RunFailedError:
                    continue  # the shaped run will say what is wrong
                for i, r in enumerate(rep.runs):
                    out[size, i] = statistics.median(r["times_s"])
        return out

    def shaped(self, tb: Any, size: int, group: list[tuple[Case, float]], scale: float,
               result: Measurement) -> dict[int, dict]:  # fmt: skip
        """Rows of ``group`` at ``size`` on ``tb`` (empty, and a ``failed`` entry, on failure)."""

        sims = [sim for _, sim in group]
        # a step's deadline covers the slowest schedule's expected raw time, 4 times over
        limit = max(self.timeout, 4 * max(sims) / scale + 30)
        before = netns_retransmits(tb)
        runs: list[list[dict]] = []  # per launch, per schedule
        for k in range(self.launches):
            more = f" (launch {k + 1} of {self.launches})" if self.launches > 1 else ""
            self.step(f"measuring {len(group)} schedule(s) at {size} B{more}")
            try:  # traced: the link fidelity check, and --trace's files
                rep = _launch(tb, [c for c, _ in group], size, self.tmp, self.iters,
                              self.warmup, self.check, limit, False,
                              trace=os.path.join(self.tmp, "trace.json"))  # fmt: skip
            except RunFailedError as e:
                result.failed.append({"size_bytes": size, "what": "schedules", "scale": scale,
                                      "error": str(e)})  # fmt: skip
                return {}
            runs.append(rep.runs)
        resent = netns_retransmits(tb) - before
        out = {}
        for i, (c, sim_s) in enumerate(group):
            per = [launch[i] for launch in runs]
            kept, fidelity = _judged(c.schedule, per, scale, sim_s / scale)
            run = _pooled(kept)
            row = _row(c, run, size, self._with_cost(c, size, scale, sim_s), scale)
            if fidelity is not None:
                row["link_fidelity"] = fidelity
                row["raw"]["times_all_s"] = [t for r in per for t in r["times_s"]]
            row.update(simulated_order=self.order,
                       simulated_plan_s=planned_time(c.schedule, size))  # fmt: skip
            if self.op_cost_raw > 0:
                row.update(simulated_alpha_beta_s=sim_s, op_cost_s=self.op_cost_raw * scale)
            row["route_mismatch_ops"] = route_mismatches(c.schedule, tb.wiring)
            row["tcp_retransmits"] = resent  # over the launches, every schedule in them
            row["launches"] = self.launches
            if self.launches > 1:
                row["raw"]["launch_medians_s"] = run["launch_medians_s"]
            if self.trace and per[-1].get("traces"):
                row["trace"] = {"times": per[-1]["traces"][-1], "scale": scale}
            out[i] = row
        return out

    def _with_cost(self, c: Case, size: int, scale: float, sim_s: float) -> float:
        """The simulated time with the testbed's per-operation cost at ``scale`` (``sim_s``,
        the pure alpha-beta time, without one)."""
        if self.op_cost_raw <= 0:
            return sim_s
        from ..sim import simulate

        return simulate(c.schedule, size, op_cost_s=self.op_cost_raw * scale,
                        order=self.order).time_s  # fmt: skip

    def reference(self, tb: Any, size: int, group: list[tuple[Case, float]], scale: float,
                  coll: Any, result: Measurement) -> None:  # fmt: skip
        """Open MPI's own collective at ``size`` (a launch of its own, after the fastest
        schedule's timed iterations; a failure is recorded, not raised)."""
        self.step(f"timing Open MPI's own {coll.kind.value} at {size} B")
        fastest = min(group, key=lambda cs: cs[1])
        sims = [sim for _, sim in group]
        limit = max(self.timeout, 8 * max(sims) / scale + 60)
        before = netns_retransmits(tb)
        try:
            rep = _launch(tb, [fastest[0]], size, self.tmp, self.iters, 0, False, limit, True)
        except RunFailedError as e:
            result.failed.append({"size_bytes": size, "what": "Open MPI's own", "scale": scale,
                                  "error": str(e)})  # fmt: skip
            return
        ref = rep.runs[0].get("reference_time_s")
        if ref:
            times = rep.runs[0].get("reference_times_s") or [ref]
            row = _timed("mpi", size, times, scale, coll.busbw_factor)
            row["tcp_retransmits"] = netns_retransmits(tb) - before
            result.mpi.append(row)


def netns_retransmits(tb: Any) -> int:
    from . import netns

    return netns.tcp_retransmits(list(tb.wiring.namespaces))


def _launch(tb, group, size, tmp, iters, warmup, check, timeout, reference, delay=True,
            trace=None):  # fmt: skip
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
        trace=trace,
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


def _pooled(runs: list[dict]) -> dict:
    """One schedule's runs over several launches as one run: every launch's timed iterations
    (``times_s``), each launch's median (``launch_medians_s``), the first failed check if
    any."""
    out = dict(runs[0])
    out["times_s"] = [t for r in runs for t in r["times_s"]]
    out["launch_medians_s"] = [statistics.median(r["times_s"]) for r in runs]
    if any(r.get("check") == "failed" for r in runs):
        out["check"] = "failed"
    return out


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
        scale=scale,
        link_ordered=bool(c.schedule.link_order),  # the executor posted each pair in order
    )
    return row


def planned_time(schedule: Any, size: float) -> float:
    """The schedule's time in its plan (the planned order, without the link orders that
    synthesis chose for execution)."""
    from ..sim import simulate
    from ..synth.order import without_chosen_order

    return simulate(without_chosen_order(schedule), size, order="plan").time_s
