"""One rank's whole run of a schedule on a backend: setup, iterations, timing, check.

:func:`run_on_backend` is what ``collsynth run`` executes on every rank. It returns, on every
rank, the same summary (gathered from all ranks); rank 0 prints it.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CollsynthError
from ..schedule.ir import Schedule
from .check import compare, computed_reference, element_dtype, make_input
from .interp import RankExecutor, configure_idle
from .plan import build_rank_plan, chunk_bytes_for


@dataclass
class Inject:
    """Test-only faults (``--inject``): drop ops' sends, corrupt a rank's output, exit a rank."""

    drop: tuple[int, ...] = ()
    corrupt: tuple[int, ...] = ()
    exit: tuple[int, ...] = ()

    @classmethod
    def parse(cls, items: list[str] | None) -> Inject:
        out: dict[str, list[int]] = {"drop": [], "corrupt": [], "exit": []}
        for item in items or []:
            kind, _, value = str(item).partition(":")
            if kind not in out or not value.strip().lstrip("-").isdigit():
                raise CollsynthError(f"--inject {item!r} is not drop:OP, corrupt:RANK or exit:RANK")
            out[kind].append(int(value))
        return cls(tuple(out["drop"]), tuple(out["corrupt"]), tuple(out["exit"]))


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
    reference: str | None = None  # what the check compared with
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d.update(self.extra)
        return d


def _median_of_max(per_rank: list[list[float]]) -> tuple[list[float], float]:
    if not per_rank or not per_rank[0]:
        return [], float("nan")
    worst = [max(x) for x in zip(*per_rank)]
    return worst, statistics.median(worst)


def run_on_backend(
    sched: Schedule,
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
) -> RunSummary:
    """Run ``sched`` on this rank; every rank calls it with the same arguments."""
    inject = inject or Inject()
    coll = sched.collective
    rank = backend.rank
    et = element_dtype(coll, np.dtype(dtype))
    cb = chunk_bytes_for(sched, size, et.itemsize)
    plan = build_rank_plan(sched, rank, cb, et.itemsize, backend.tag_limit)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    configure_idle(backend.size > cores)
    exe = RankExecutor(sched, plan, backend, et, drop=inject.drop)
    inp = make_input(coll, rank, cb, dtype, seed)
    clock = time.monotonic
    backend.barrier(clock() + timeout, "the barrier before the run")
    if rank in inject.exit:
        os._exit(1)  # fault injection: this rank disappears without a word
    times: list[float] = []
    for it in range(warmup + iters):
        exe.load(inp)
        backend.barrier(clock() + timeout, f"the barrier before iteration {it}")
        t0 = backend.now()
        exe.run(clock() + timeout)
        t = backend.now() - t0
        if it >= warmup:
            times.append(t)
    out = exe.output()
    if rank in inject.corrupt and out.size:  # fault injection: invert two whole elements
        w = et.itemsize
        for at in (0, (out.size // 2) // w * w):
            out[at : at + w] ^= 0xFF

    ref_times: list[float] = []
    err: str | None = None
    ref_name = None
    want = None
    if reference or check:
        want = np.zeros_like(out)
        send = inp.copy()
        ok = hasattr(backend, "reference") and backend.reference(
            coll, send, want, et, clock() + timeout
        )
        if ok:
            ref_name = f"{backend.name}'s own {coll.kind.value}"
            for _ in range(iters):
                backend.barrier(clock() + timeout, f"the barrier before {ref_name}")
                t0 = backend.now()
                backend.reference(coll, send, want, et, clock() + timeout)
                ref_times.append(backend.now() - t0)
        else:
            ref_name = "a computed reference"
            want = computed_reference(coll, rank, cb, dtype, seed) if check else None
    if check and want is not None:
        err = compare(coll, rank, cb, et, out, want)

    gathered = backend.allgather_obj(
        {"times": times, "ref": ref_times, "err": err}, clock() + timeout
    )
    worst, med = _median_of_max([g["times"] for g in gathered])
    _, ref_med = _median_of_max([g["ref"] for g in gathered])
    errors = [g["err"] for g in gathered if g["err"]]
    return RunSummary(
        schedule=name,
        algorithm=sched.meta.get("algorithm"),
        topology=sched.topology.name,
        collective=coll.to_dict(),
        ops=sched.num_ops,
        size=int(size),
        times_s=worst,
        time_s=med,
        reference_time_s=None if not ref_times else ref_med,
        check=None if not check else ("failed" if errors else "passed"),
        check_error=errors[0] if errors else None,
        reference=ref_name,
        extra={
            "algbw": size / med if med > 0 else None,
            "busbw": size / med * coll.busbw_factor if med > 0 else None,
            "dtype": str(et),
        },
    )
