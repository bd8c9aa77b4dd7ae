"""One rank's whole run of a schedule on a backend: setup, iterations, timing, check.

:func:`run_on_backend` is what ``collsynth run`` executes on every rank. It returns, on every
rank, the same summary (gathered from all ranks); rank 0 prints it.
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CollsynthError
from ..schedule.compact import CompactSchedule
from ..schedule.ir import OpKind, Schedule
from .check import compare, computed_reference, count_wrong, element_dtype, make_input
from .compact_plan import compact_rank_plan
from .interp import RankExecutor, configure_idle
from .plan import build_rank_plan, chunk_bytes_for
from .progress import Progress

#: what the launcher allows a step beyond the rank's own deadlines in it (they end it first)
STEP_SLACK_S = 2.0


#: ``--inject`` faults of whole ranks, and where they strike
PROCESS_FAULTS = ("exit", "kill", "stop")


@dataclass(frozen=True)
class Fault:
    """One rank fault: ``kind`` (exit, kill, stop) of ``rank`` at ``at`` ("startup", "run" or an
    iteration number)."""

    kind: str
    rank: int
    at: str | int = "run"

    def strike(self) -> None:
        if self.kind == "exit":
            os._exit(1)  # this rank disappears without a word
        sig = signal.SIGKILL if self.kind == "kill" else signal.SIGSTOP
        os.kill(os.getpid(), sig)  # a stopped rank goes on if it is ever continued


@dataclass
class Inject:
    """Test-only faults (``--inject``): drop ops' sends, corrupt a rank's output, and exit, kill
    or stop a rank at start-up, before the run or in an iteration (``collsynth run --help``)."""

    drop: tuple[int, ...] = ()
    corrupt: tuple[int, ...] = ()
    faults: tuple[Fault, ...] = ()

    @property
    def exit(self) -> tuple[int, ...]:
        """Ranks that exit after the barrier before the run (``exit:RANK``)."""
        return tuple(f.rank for f in self.faults if f.kind == "exit" and f.at == "run")

    @classmethod
    def parse(cls, items: list[str] | None) -> Inject:
        out: dict[str, list[int]] = {"drop": [], "corrupt": []}
        faults: list[Fault] = []
        for item in items or []:
            kind, _, value = str(item).partition(":")
            value, _, when = value.partition("@")
            ok = value.strip().lstrip("-").isdigit()
            at: str | int = "run"
            if kind in PROCESS_FAULTS and when:
                w, _, n = when.partition(":")
                if w == "startup" and not n:
                    at = "startup"
                elif w == "iter" and n.strip().isdigit():
                    at = int(n)
                else:
                    ok = False
            elif (kind not in out and kind not in PROCESS_FAULTS) or when:
                ok = False
            if not ok:
                raise CollsynthError(
                    f"--inject {item!r} is not drop:OP, corrupt:RANK or "
                    f"exit|kill|stop:RANK[@startup|@iter:N]"
                )
            if kind in PROCESS_FAULTS:
                faults.append(Fault(kind, int(value), at))
            else:
                out[kind].append(int(value))
        return cls(tuple(out["drop"]), tuple(out["corrupt"]), tuple(faults))

    def strike(self, rank: int, at: str | int) -> None:
        """Apply this rank's faults that strike at ``at``."""
        for f in self.faults:
            if f.rank == rank and f.at == at:
                f.strike()


@dataclass
class RunSummary:
    schedule: str
    algorithm: str | None
    topology: str
    collective: dict
    ops: int
    size: int
    times_s: list[float]
    time_s: float
    reference_time_s: float | None
    check: str | None  # "passed", "failed" or None (not asked)
    check_error: str | None = None
    #: elements of the run's dtype that differ from the reference, over every rank (nccl-tests'
    #: ``#wrong``); None without --check
    wrong: int | None = None
    reference: str | None = None  # what the check compared with
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d.update(self.extra)
        return d


def route_alpha(sched: Schedule) -> np.ndarray:
    """Per operation, the summed latency (``alpha``, seconds) of its route's links."""
    alphas = np.asarray(sched.topology.link_alpha, dtype=np.float64)[sched.route_links]
    acc = np.concatenate(([0.0], np.cumsum(alphas)))
    ptr = np.asarray(sched.route_ptr, dtype=np.int64)
    return acc[ptr[1:]] - acc[ptr[:-1]]


def _median_of_max(per_rank: list[list[float]]) -> tuple[list[float], float]:
    if not per_rank or not per_rank[0]:
        return [], float("nan")
    worst = [max(x) for x in zip(*per_rank)]
    return worst, statistics.median(worst)


def _as_run(sched: Schedule | CompactSchedule, every_op: bool) -> tuple[Any, int]:
    """The schedule as a rank runs it, and its operation count: point-to-point transfers only
    (joins and groups expanded), or a compact schedule as it is (planned rank by rank),
    expanded where the run reads every operation (``every_op``) or it has groups."""
    if isinstance(sched, CompactSchedule) and (every_op or sched.reps.has_groups):
        sched = sched.expand()
    if isinstance(sched, CompactSchedule):
        return sched, int(np.count_nonzero(sched.reps.kind != OpKind.JOIN)) * sched.action.order
    sched = sched.expand_joins().expand_groups()
    return sched, sched.num_ops


def _rank_plan(sched: Any, rank: int, cb: int, elem: int, tag_limit: int) -> tuple[Any, Any]:
    """This rank's plan, and what the executor names operations by (the schedule, or the
    rank's operations of a compact one)."""
    if isinstance(sched, CompactSchedule):
        return compact_rank_plan(sched, rank, cb, elem, tag_limit)
    return build_rank_plan(sched, rank, cb, elem, tag_limit), sched


def run_on_backend(
    sched: Schedule | CompactSchedule,
    backend: Any,
    size: float,
    *,
    name: str = "schedule",
    iters: int = 5,
    warmup: int = 1,
    check: bool = False,
    seed: int = 0,
    timeout: float = 30.0,
    dtype: Any = np.float32,
    reference: bool = True,
    inject: Inject | None = None,
    progress: Progress | None = None,
    alpha_delay: float = 0.0,
    trace: bool = False,
) -> RunSummary:
    """Run ``sched`` on this rank; every rank calls it with the same arguments.

    ``progress`` (when the rank was launched by :func:`~.launcher.launch` or ``--launch``)
    records each step and the time the launcher allows it: a step that waits on other ranks
    gets ``STEP_SLACK_S`` more than this rank's own deadlines, which end it first.
    ``alpha_delay`` > 0 emulates latency: each send waits ``alpha_delay`` times the summed
    ``alpha`` of its route before it is posted (the testbed passes 1/scale, so latency is
    dilated like bandwidth).
    ``trace``: the summary's ``extra["traces"]`` holds every operation's times in each timed
    iteration (:func:`op_times`, one per entry of ``times_s``).
    A compact schedule is planned for this rank alone (:mod:`.compact_plan`: nothing of the
    other ranks' part is expanded), except for ``trace`` and ``alpha_delay``, which read every
    operation (it is expanded for them).
    """
    sched, n_ops = _as_run(sched, trace or alpha_delay > 0)
    inject = inject or Inject()
    prog = progress or Progress(None, backend.rank)
    coll = sched.collective
    rank = backend.rank
    one = timeout + STEP_SLACK_S  # one deadline of this rank's own, plus slack
    two = 2 * timeout + STEP_SLACK_S  # a barrier and then an operation
    prog.step(f"setting up {name}", None)
    et = element_dtype(coll, np.dtype(dtype))
    cb = chunk_bytes_for(sched, size, et.itemsize)
    plan, view = _rank_plan(sched, rank, cb, et.itemsize, backend.tag_limit)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    configure_idle(backend.size > cores)
    delay = None
    if alpha_delay > 0:
        assert isinstance(sched, Schedule)
        delay = np.where(plan.is_send, route_alpha(sched)[plan.ops] * alpha_delay, 0.0)
    exe = RankExecutor(view, plan, backend, et, drop=inject.drop, send_delay=delay, trace=trace)
    inp = make_input(coll, rank, cb, dtype, seed)
    clock = time.monotonic
    prog.step(f"the barrier before the run of {name}", one)
    backend.barrier(clock() + timeout, "the barrier before the run")
    inject.strike(rank, "run")
    times: list[float] = []
    mine: list[dict] = []  # with trace: this rank's record of each timed iteration
    for it in range(warmup + iters):
        exe.load(inp)
        prog.step(f"iteration {it} of {name}", two)
        backend.barrier(clock() + timeout, f"the barrier before iteration {it}")
        inject.strike(rank, it)
        t0 = backend.now()
        zero = clock()
        exe.run(clock() + timeout)
        t = backend.now() - t0
        if it >= warmup:
            times.append(t)
            if trace:
                mine.append({"zero": zero, **exe.trace_record()})
    out = exe.output()
    if rank in inject.corrupt and out.size:  # fault injection: invert two whole elements
        w = et.itemsize
        for at in (0, (out.size // 2) // w * w):
            out[at : at + w] ^= 0xFF
    ref = _Reference(backend, prog, name, coll, et, timeout, iters)
    ref_times, ref_name, err, wrong = ref.run(out, inp, cb, dtype, seed, reference, check)
    prog.step(f"gathering the results of {name}", one)
    gathered = backend.allgather_obj(
        {"times": times, "ref": ref_times, "err": err, "wrong": wrong}, clock() + timeout
    )
    traces = None
    if trace:  # only rank 0 reports them: gathered there alone where the backend can
        gather = getattr(backend, "gather_obj", backend.allgather_obj)
        got = gather({"trace": mine, "nbytes": plan.nbytes.tolist()}, clock() + timeout)
        assert isinstance(sched, Schedule)
        traces = _iterations(sched, got) if got is not None and rank == 0 else None
    worst, med = _median_of_max([g["times"] for g in gathered])
    ref_worst, ref_med = _median_of_max([g["ref"] for g in gathered])
    errors = [g["err"] for g in gathered if g["err"]]
    return RunSummary(
        schedule=name,
        algorithm=sched.meta.get("algorithm"),
        topology=sched.topology.name,
        collective=coll.to_dict(),
        ops=n_ops,
        size=int(size),
        times_s=worst,
        time_s=med,
        reference_time_s=None if not ref_times else ref_med,
        check=None if not check else ("failed" if errors else "passed"),
        check_error=errors[0] if errors else None,
        wrong=sum(g["wrong"] or 0 for g in gathered) if check else None,
        reference=ref_name,
        extra={
            "algbw_Bps": size / med if med > 0 else None,
            "busbw_Bps": size / med * coll.busbw_factor if med > 0 else None,
            "dtype": str(et),
            "reference_times_s": ref_worst if ref_times else None,
            **({"traces": traces} if traces is not None else {}),
            # planned from the compact form: the order of its group
            **({"compact": sched.action.order} if isinstance(sched, CompactSchedule) else {}),
        },
    )


def _iterations(sched: Schedule, gathered: list[dict]) -> list[dict]:
    """Every timed iteration's :func:`op_times` from the ranks' gathered records."""
    return [
        op_times(sched, [dict(g["trace"][k], nbytes=g["nbytes"]) for g in gathered])
        for k in range(len(gathered[0]["trace"]))
    ]


def op_times(sched: Schedule, per_rank: list[dict]) -> dict:
    """Every operation's times in one traced iteration, from the ranks' records (the
    executor's :meth:`~.interp.RankExecutor.trace_record` plus the iteration's start
    ``zero`` and the local operations' bytes), in seconds from the earliest rank's start:
    ``send_due_s`` (it could be posted: its dependencies met and its emulated latency over),
    ``send_post_s`` (the sender posted it), ``send_end_s`` (the engine had taken the send),
    ``recv_post_s`` (the receiver posted the receive) and ``arrival_s`` (the data had arrived);
    NaN where an operation never got that far. With each operation's ``src``, ``dst``,
    ``chunk`` and ``bytes`` (after joins and groups are expanded, as the executor runs them),
    and ``time_s``, the iteration's time (the last arrival or send)."""
    zero = min(r["zero"] for r in per_rank)
    n = sched.num_ops
    keys = ("send_due_s", "send_post_s", "send_end_s", "recv_post_s", "arrival_s")
    out = {k: [math.nan] * n for k in keys}
    nbytes = [0] * n
    for r in per_rank:
        due = r.get("due") or [math.nan] * len(r["ops"])
        for op, is_send, post, end, b, d in zip(r["ops"], r["is_send"], r["post"], r["end"],
                                                r["nbytes"], due):  # fmt: skip
            a, e = ("send_post_s", "send_end_s") if is_send else ("recv_post_s", "arrival_s")
            out[a][op] = post - zero
            out[e][op] = end - zero
            if is_send:
                nbytes[op] = int(b)
                out["send_due_s"][op] = d - zero
    ends = [x for k in ("send_end_s", "arrival_s") for x in out[k] if not math.isnan(x)]
    return {
        "src": sched.src.tolist(),
        "dst": sched.dst.tolist(),
        "chunk": sched.chunk.tolist(),
        "bytes": nbytes,
        **out,
        "time_s": max(ends) if ends else 0.0,
    }


@dataclass
class _Reference:
    """The engine's own collective (timed, and what ``--check`` compares with) or, where the
    backend has none, a computed reference."""

    backend: Any
    prog: Progress
    name: str
    coll: Any
    et: np.dtype
    timeout: float
    iters: int

    def run(
        self, out: np.ndarray, inp: np.ndarray, cb: int, dtype: Any, seed: int, reference: bool,
        check: bool,
    ) -> tuple[list[float], str | None, str | None, int | None]:  # fmt: skip
        """(reference times, what was compared with, the check's error or None, the number
        of wrong elements or None)."""
        if not (reference or check):
            return [], None, None, None
        b, coll, name, clock = self.backend, self.coll, self.name, time.monotonic
        one = self.timeout + STEP_SLACK_S
        want: np.ndarray | None = np.zeros_like(out)
        send = inp.copy()
        times: list[float] = []
        self.prog.step(f"the engine's own {coll.kind.value} for {name}", one)
        if (
            reference
            and hasattr(b, "reference")
            and b.reference(coll, send, want, self.et, clock() + self.timeout)
        ):
            ref_name = f"{b.name}'s own {coll.kind.value}"
            for i in range(self.iters):
                self.prog.step(f"iteration {i} of {ref_name} for {name}", one + self.timeout)
                b.barrier(clock() + self.timeout, f"the barrier before {ref_name}")
                t0 = b.now()
                b.reference(coll, send, want, self.et, clock() + self.timeout)
                times.append(b.now() - t0)
        else:
            ref_name = "a computed reference"
            if check:
                self.prog.step(f"computing the reference for {name}", None)
            want = computed_reference(coll, b.rank, cb, dtype, seed) if check else None
        err, wrong = None, None
        if check and want is not None:
            self.prog.step(f"checking the output of {name}", None)
            err = compare(coll, b.rank, cb, self.et, out, want)
            wrong = 0 if err is None else count_wrong(coll, np.dtype(dtype), out, want)
        return times, ref_name, err, wrong
