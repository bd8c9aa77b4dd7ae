"""An in-process backend: every rank in one process, messages delivered by a seeded scheduler.

Used by the tests to exercise the interpreter's dependency, ordering and tag logic fast and
deterministically, without MPI. Matching follows MPI's rules: per (source, destination, tag)
sends and receives match in posting order. Delivery is adversarial: each network step advances a
random subset of the matchable channels, and a send's bytes are read at *delivery* time (so a
rank that wrote into a byte range it was still sending would be caught).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from ..errors import CollsynthError
from ..schedule.ir import Schedule
from .check import computed_reference, element_dtype, make_input
from .interp import RankExecutor
from .plan import build_rank_plan, chunk_bytes_for, execution_order


class _Req:
    __slots__ = ("done", "buf")

    def __init__(self, buf: np.ndarray):
        self.done = False
        self.buf = buf


class FakeNetwork:
    def __init__(self, num_ranks: int, seed: int = 0, tag_limit: int = 1 << 30):
        self.num_ranks = num_ranks
        self.rng = np.random.default_rng(seed)
        self.tag_limit = tag_limit
        self.sends: dict[tuple[int, int, int], deque] = {}
        self.recvs: dict[tuple[int, int, int], deque] = {}
        self.delivered = 0

    def backend(self, rank: int) -> FakeBackend:
        return FakeBackend(self, rank)

    def step(self) -> bool:
        """Deliver some matched messages; returns whether any was delivered."""
        keys = sorted(k for k in self.sends if self.sends[k] and self.recvs.get(k))
        if not keys:
            return False
        pick = [k for k in keys if self.rng.random() < 0.5] or [
            keys[int(self.rng.integers(len(keys)))]
        ]
        for k in pick:
            s = self.sends[k].popleft()
            r = self.recvs[k].popleft()
            if s.buf.size != r.buf.size:
                raise CollsynthError(
                    f"fake network: message {k} of {s.buf.size} bytes matched "
                    f"a receive of {r.buf.size} bytes"
                )
            r.buf[...] = s.buf
            s.done = r.done = True
            self.delivered += 1
        return True


class FakeBackend:
    name = "fake"

    def __init__(self, net: FakeNetwork, rank: int):
        self.net = net
        self.rank = rank
        self.size = net.num_ranks
        self.tag_limit = net.tag_limit

    def _check_tag(self, tag: int) -> None:
        if not 0 <= tag < self.tag_limit:
            raise CollsynthError(f"fake network: tag {tag} outside 0..{self.tag_limit - 1}")

    def isend(self, buf: np.ndarray, dst: int, tag: int) -> Any:
        self._check_tag(tag)
        req = _Req(buf)
        self.net.sends.setdefault((self.rank, dst, tag), deque()).append(req)
        return req

    def irecv(self, buf: np.ndarray, src: int, tag: int) -> Any:
        self._check_tag(tag)
        req = _Req(buf)
        self.net.recvs.setdefault((src, self.rank, tag), deque()).append(req)
        return req

    null_request = None

    def test(self, requests: list) -> list[int]:
        return [i for i, r in enumerate(requests) if r is not None and r.done]

    def now(self) -> float:
        return 0.0


def run_in_process(
    sched: Schedule,
    size: float,
    *,
    dtype: Any = np.float32,
    seed: int = 0,
    net_seed: int = 0,
    tag_limit: int = 1 << 30,
    drop: tuple[int, ...] = (),
    window: int = 64,
    max_rounds: int = 1_000_000,
    trace: bool = False,
) -> dict:
    """Execute every rank of ``sched`` in this process; returns outputs and expected outputs
    (and with ``trace`` every operation's times, :func:`~.driver.op_times`, under ``trace``).

    Raises :class:`CollsynthError` naming the stuck operations when the run cannot finish.
    """
    sched = sched.expand_joins().expand_groups()  # point-to-point transfers only
    coll = sched.collective
    n = coll.num_ranks
    et = element_dtype(coll, np.dtype(dtype))
    cb = chunk_bytes_for(sched, size, et.itemsize)
    net = FakeNetwork(n, seed=net_seed, tag_limit=tag_limit)
    order = execution_order(sched)
    exes = []
    zero = time.monotonic()  # the executors post their first operations as they begin
    for r in range(n):
        plan = build_rank_plan(sched, r, cb, et.itemsize, tag_limit, order)
        exe = RankExecutor(sched, plan, net.backend(r), et, drop=drop, window=window, trace=trace)
        exe.load(make_input(coll, r, cb, dtype, seed))
        exe.begin()
        exes.append(exe)
    rng = np.random.default_rng(net_seed + 1)
    for _ in range(max_rounds):
        if all(e.finished for e in exes):
            break
        moved = False
        for r in rng.permutation(n).tolist():
            moved |= exes[r].poll()
        moved |= net.step()
        if not moved:
            stuck = "; ".join(e.stuck_report() for e in exes if not e.finished)
            raise CollsynthError(f"in-process run cannot finish: {stuck}")
    else:
        raise CollsynthError("in-process run did not finish within the round limit")
    out = {}
    if trace:
        from .driver import op_times

        recs = [dict(e.trace_record(), zero=zero, nbytes=e.plan.nbytes.tolist()) for e in exes]
        out["trace"] = op_times(sched, recs)
    return {
        **out,
        "outputs": [e.output() for e in exes],
        "expected": [computed_reference(coll, r, cb, dtype, seed) for r in range(n)],
        "chunk_bytes": cb,
        "messages": net.delivered,
    }
