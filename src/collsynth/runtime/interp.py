"""The interpreter: one rank's event loop over its :class:`~.plan.RankPlan`.

The loop never blocks. Each :meth:`RankExecutor.poll` posts every send whose local conditions
hold, posts receives (at once when the receive could be applied on arrival, earlier within a
window of ``window`` receives in execution order), tests the active requests, and applies
every arrived receive whose local frontier has completed (a copy overwrites the byte range, a
reduce adds to it with numpy). :meth:`RankExecutor.run` repeats ``poll`` until
the rank's part is complete or a deadline passes; on the deadline it raises
:class:`RunTimeout` naming the first unfinished operation and what it waits for.

Received bytes land in a private staging buffer per operation and are applied only when the
operation's local frontier has completed, and never into a byte range that a pending send of
this rank is still reading. Sends read straight from the working buffer.
"""

from __future__ import annotations

import heapq
import math
import os
import time
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from ..errors import CollsynthError
from ..schedule.ir import Schedule
from .plan import RankPlan

IDLE, POSTED, ARRIVED, DONE = 0, 1, 2, 3


class RunTimeout(CollsynthError):
    """A rank's part of the run did not finish before its deadline (a fault, never a hang)."""


class Backend(Protocol):
    """What the interpreter needs from a message-passing engine (MPI, torch.distributed, ...).

    ``isend``/``irecv`` start a non-blocking transfer of a contiguous uint8 numpy array and
    return a request; ``test`` returns the indices of the given requests that have completed
    (completed requests are replaced by ``null_request`` and never tested again). Messages
    between one pair of ranks with the same tag must match in posting order (MPI's
    non-overtaking rule). ``tag_limit`` is the number of distinct tags (1 for engines that
    match by order only, like NCCL). The MPI and torch backends also have ``barrier``,
    ``allgather_obj``, ``reference`` (the engine's own collective), ``abort`` and ``close``; and
    optionally ``gather_obj`` (to rank 0 only: the run's traces).
    """

    name: str
    rank: int
    size: int
    tag_limit: int

    def isend(self, buf: np.ndarray, dst: int, tag: int) -> Any: ...

    def irecv(self, buf: np.ndarray, src: int, tag: int) -> Any: ...

    def test(self, requests: list) -> list[int]: ...

    null_request: Any  # what completed requests are replaced with; ``test`` skips it

    def now(self) -> float: ...


#: idle polls that only yield the CPU before the loop starts sleeping, and the longest sleep
#: (environment overrides: COLLSYNTH_RUN_SPIN, COLLSYNTH_RUN_MAX_SLEEP)
SPIN_POLLS = 256
MAX_SLEEP_S = 1e-4


def configure_idle(oversubscribed: bool) -> None:
    """Spin briefly when ranks share cores (spinning steals the CPU the others need)."""
    global SPIN_POLLS, MAX_SLEEP_S
    SPIN_POLLS = int(os.environ.get("COLLSYNTH_RUN_SPIN", 4 if oversubscribed else 256))
    MAX_SLEEP_S = float(os.environ.get("COLLSYNTH_RUN_MAX_SLEEP", 1e-4))


def idle_wait(idle: int) -> None:
    """Back off politely after ``idle`` polls without progress (ranks may share cores)."""
    if idle < SPIN_POLLS:
        time.sleep(0)
    else:
        time.sleep(min(MAX_SLEEP_S, 1e-5 * (1 << min(idle - SPIN_POLLS, 10))))


def describe(sched: Schedule, op: int) -> str:
    """``op 17 (copy chunk 2 gpu1->gpu3, rank 1->rank 3)``."""
    s, d = int(sched.src[op]), int(sched.dst[op])
    return f"{sched.describe_op(op)[:-1]}, rank {s}->rank {d})"


class RankExecutor:
    """Executes one rank's part of a schedule, step by step, on a backend."""

    def __init__(
        self,
        sched: Schedule,
        plan: RankPlan,
        backend: Backend,
        dtype: Any,
        drop: Iterable[int] = (),
        window: int = 64,
        send_delay: Any = None,
        trace: bool = False,
    ):
        self.window = int(window)
        #: record when each local operation was posted and when it completed (its send handed
        #: over, its receive arrived), in ``time.monotonic()`` seconds: :meth:`trace_record`
        self.trace = bool(trace)
        #: per local op, seconds a send waits once ready before it is posted (emulated latency)
        self.send_delay = (
            None
            if send_delay is None or not np.any(send_delay)
            else np.asarray(send_delay).tolist()
        )
        self.sched = sched
        self.plan = plan
        self.backend = backend
        self.dtype = np.dtype(dtype)
        self.drop = {int(x) for x in drop}
        L = plan.num_local
        self.work = np.zeros(plan.buffer_bytes, dtype=np.uint8)
        self.stage = [
            np.empty(int(plan.nbytes[j]), dtype=np.uint8) if not plan.is_send[j] else None
            for j in range(L)
        ]
        self.on_done: list[list[int]] = [[] for _ in range(L)]
        self.on_posted: list[list[int]] = [[] for _ in range(L)]
        self.on_arrived: list[list[int]] = [[] for _ in range(L)]
        for j in range(L):
            for k in plan.done_pre[j]:
                self.on_done[k].append(j)
            for k in plan.post_pre[j]:
                self.on_posted[k].append(j)
            if plan.recv_pre[j] >= 0:
                self.on_arrived[int(plan.recv_pre[j])].append(j)
        # plain lists: the event loop indexes them once per event
        self.is_send = plan.is_send.tolist()
        self.offset = plan.offset.tolist()
        self.nbytes = plan.nbytes.tolist()
        self.peer = plan.peer.tolist()
        self.tag = plan.tag.tolist()
        self.reduce = plan.reduce.tolist()
        self.op_ids = plan.ops.tolist()
        self.cb = plan.chunk_bytes
        self._begun = False
        self.remaining = 0

    # ------------------------------------------------------------------ buffers
    def load(self, inp: np.ndarray) -> None:
        """Reset the working buffer and load the rank's input (uint8, input-buffer order)."""
        p = self.plan
        cb = p.chunk_bytes
        self.work.fill(0)
        for i, ch in enumerate(p.input_chunks):
            s = p.slots[ch] * cb
            self.work[s : s + cb] = inp[i * cb : (i + 1) * cb]

    def output(self) -> np.ndarray:
        """The rank's output buffer (uint8, output-buffer order)."""
        p = self.plan
        cb = p.chunk_bytes
        out = np.empty(len(p.output_chunks) * cb, dtype=np.uint8)
        for i, ch in enumerate(p.output_chunks):
            s = p.slots[ch] * cb
            out[i * cb : (i + 1) * cb] = self.work[s : s + cb]
        return out

    # ------------------------------------------------------------------ execution
    def begin(self) -> None:
        p = self.plan
        L = p.num_local
        self.state = [IDLE] * L
        self.done_wait = [len(x) for x in p.done_pre]
        self.post_wait = [len(x) for x in p.post_pre]
        self.recv_wait = (p.recv_pre >= 0).astype(np.int64).tolist()
        self.ready_send: list[int] = []
        self.delayed: list[tuple[float, int]] = []  # (when, op): sends waiting out their delay
        self.ready_recv: list[int] = []  # postable receives not yet needed (by order)
        self.posted_early = [False] * L
        self.early = 0  # receives posted before they were needed
        self.applicable: list[int] = []
        self.blocked: list[int] = []  # arrived, frontier done, range under a pending send
        self.active_j: list[int] = []  # -1 where the request completed (compacted lazily)
        self.active_req: list[Any] = []
        self.n_active = 0
        self.sending: dict[int, dict[int, tuple[int, int]]] = {}  # slot -> {j: byte range}
        self.remaining = L
        #: when each send's data dependencies were met (its emulated latency counts from then)
        self.data_ready = [time.monotonic()] * L
        if self.trace:
            self.t_post = [math.nan] * L
            self.t_end = [math.nan] * L
            #: when each send was due: postable, and its emulated latency waited out
            self.t_due = [math.nan] * L
        for j in range(L):
            if self.is_send[j]:
                if self.done_wait[j] == 0 and self.post_wait[j] == 0:
                    self._queue_send(j)
            elif self.recv_wait[j] == 0:
                self._recv_ready(j)
        self._begun = True

    @property
    def finished(self) -> bool:
        return self._begun and self.remaining == 0

    def _mark_done(self, j: int) -> None:
        self.state[j] = DONE
        self.remaining -= 1
        for k in self.on_done[j]:
            self.done_wait[k] -= 1
            if self.done_wait[k] == 0:
                if self.is_send[k]:
                    if self.send_delay is not None:
                        self.data_ready[k] = time.monotonic()
                    if self.post_wait[k] == 0 and self.state[k] == IDLE:
                        self._queue_send(k)
                elif self.state[k] == ARRIVED:
                    heapq.heappush(self.applicable, k)
                elif self.state[k] == IDLE and self.recv_wait[k] == 0:
                    self._recv_ready(k)

    def _queue_send(self, j: int) -> None:
        """Send ``j`` may be posted (after its emulated latency, if any)."""
        if self.trace:
            self.t_due[j] = time.monotonic()
        heapq.heappush(self.ready_send, j)

    def _post_send(self, j: int) -> None:
        a = self.offset[j]
        b = a + self.nbytes[j]
        self.state[j] = POSTED
        if self.trace:
            self.t_post[j] = time.monotonic()
        for k in self.on_posted[j]:
            self.post_wait[k] -= 1
            if self.post_wait[k] == 0 and self.done_wait[k] == 0 and self.state[k] == IDLE:
                self._queue_send(k)
        if self.drop and self.op_ids[j] in self.drop:  # fault injection: never sent
            self._mark_done(j)
            return
        req = self.backend.isend(self.work[a:b], self.peer[j], self.tag[j])
        self.sending.setdefault(a // self.cb, {})[j] = (a, b)
        self._activate(j, req)

    def _post_recv(self, j: int) -> None:
        self.state[j] = POSTED
        if self.trace:
            self.t_post[j] = time.monotonic()
        self.posted_early[j] = self.done_wait[j] > 0
        stage = self.stage[j]
        assert stage is not None  # only sends have no staging buffer
        req = self.backend.irecv(stage, self.peer[j], self.tag[j])
        self._activate(j, req)

    def _activate(self, j: int, req: Any) -> None:
        if len(self.active_j) > 64 and 2 * self.n_active < len(self.active_j):
            keep = [i for i, x in enumerate(self.active_j) if x >= 0]
            self.active_j = [self.active_j[i] for i in keep]
            self.active_req = [self.active_req[i] for i in keep]
        self.active_j.append(j)
        self.active_req.append(req)
        self.n_active += 1

    def _recv_ready(self, j: int) -> None:
        """Receive ``j`` may be posted: now if it could be applied on arrival, else early
        (within the window of early receives, in execution order)."""
        if self.done_wait[j] == 0:
            self._post_recv(j)
        else:
            heapq.heappush(self.ready_recv, j)

    def _arrived(self, j: int) -> None:
        self.state[j] = ARRIVED
        if self.posted_early[j]:
            self.early -= 1
        for k in self.on_arrived[j]:
            self.recv_wait[k] -= 1
            if self.recv_wait[k] == 0 and self.state[k] == IDLE:
                self._recv_ready(k)
        if self.done_wait[j] == 0:
            heapq.heappush(self.applicable, j)

    def _try_apply(self, j: int) -> bool:
        if self.state[j] != ARRIVED:  # defensive: apply each receive exactly once
            return False
        a = self.offset[j]
        b = a + self.nbytes[j]
        pending = self.sending.get(a // self.cb)
        if pending:
            for x, y in pending.values():
                if x < b and a < y:
                    self.blocked.append(j)
                    return False
        stage = self.stage[j]
        assert stage is not None  # only receives arrive
        if self.reduce[j]:
            dst = self.work[a:b].view(self.dtype)
            dst += stage.view(self.dtype)
        else:
            self.work[a:b] = stage
        self._mark_done(j)
        return True

    def poll(self) -> bool:
        """One non-blocking step; returns whether anything happened."""
        if not self._begun:
            self.begin()
        progressed = False
        while True:
            moved = False
            if self.send_delay is not None:
                moved = self._post_delayed()
            while self.ready_send:
                self._post_send(heapq.heappop(self.ready_send))
                moved = True
            while self.ready_recv and self.early < self.window:
                j = heapq.heappop(self.ready_recv)
                if self.state[j] == IDLE:
                    self._post_recv(j)
                    self.early += 1
                    moved = True
            if self.n_active:
                hits = self.backend.test(self.active_req)
                if hits:
                    moved = True
                    done = []
                    null = self.backend.null_request
                    for i in sorted(hits):
                        done.append(self.active_j[i])
                        self.active_j[i] = -1
                        self.active_req[i] = null
                    self.n_active -= len(done)
                    if self.trace:
                        now = time.monotonic()
                        for j in done:
                            self.t_end[j] = now
                    for j in done:
                        if self.is_send[j]:
                            del self.sending[self.offset[j] // self.cb][j]
                            self._mark_done(j)
                            if self.blocked:
                                for k in self.blocked:
                                    heapq.heappush(self.applicable, k)
                                self.blocked = []
                        else:
                            self._arrived(j)
            while self.applicable:
                if self._try_apply(heapq.heappop(self.applicable)):
                    moved = True
            if not moved:
                return progressed
            progressed = True

    def _post_delayed(self) -> bool:
        """With emulated latency: ready sends wait out their delay in a queue first; post the
        ones that are due (posting can make more sends ready: they queue too). Whether any
        send was posted.

        The delay counts from when the send's *data* dependencies were met, not from when it
        became postable: a send held back only by the planned order of its link (it may not
        be posted before the link's previous send) has been waiting out its latency meanwhile,
        as in the simulator, where latency follows each transmission and a link's planned order
        serializes transmissions only. Counting from postability chained the delays of a
        link's sends one after another (a TE-CCL AllToAll at 64 KB ran 3.3x its simulated time).
        """
        delay, delayed = self.send_delay, self.delayed
        assert delay is not None
        posted = False
        while True:
            now = time.monotonic()
            while self.ready_send:
                j = heapq.heappop(self.ready_send)
                due = self.data_ready[j] + delay[j]
                if self.trace:
                    self.t_due[j] = max(self.t_due[j], due)
                heapq.heappush(delayed, (due, j))
            if not delayed or delayed[0][0] > now:
                return posted
            while delayed and delayed[0][0] <= now:
                self._post_send(heapq.heappop(delayed)[1])
                posted = True

    def run(self, deadline: float, clock=time.monotonic) -> None:
        """Poll until finished; raise :class:`RunTimeout` once ``clock() > deadline``."""
        self.begin()
        idle = 0
        while self.remaining:
            if self.poll():
                idle = 0
                continue
            idle += 1
            if clock() > deadline:
                raise RunTimeout(self.stuck_report())
            idle_wait(idle)

    def trace_record(self) -> dict:
        """The last run's per-operation times (``trace=True``): this rank's global op ids,
        whether each is a send, and ``time.monotonic()`` seconds when it was posted and when
        it completed (a send handed to the engine, a receive arrived; NaN: not reached), and
        when each send was due (``due``: postable, its emulated latency over; NaN for
        receives): a send posted well after it was due waited for this rank's CPU."""
        if not self.trace or not self._begun:
            raise CollsynthError("the executor recorded no trace (trace=False or never run)")
        return {"ops": list(self.op_ids), "is_send": list(self.is_send),
                "post": list(self.t_post), "end": list(self.t_end),
                "due": list(self.t_due)}  # fmt: skip

    # ------------------------------------------------------------------ diagnosis
    def stuck_report(self) -> str:
        """One line: the first unfinished local operation and what it waits for."""
        p = self.plan
        r = p.rank
        for j in range(p.num_local):
            st = int(self.state[j])
            if st == DONE:
                continue
            op = int(p.ops[j])
            what = describe(self.sched, op)
            peer = int(p.peer[j])
            if p.is_send[j]:
                if st == IDLE:
                    waits = [int(p.ops[k]) for k in p.done_pre[j] if self.state[k] != DONE]
                    waits += [int(p.ops[k]) for k in p.post_pre[j] if self.state[k] == IDLE]
                    why = (
                        f"its send waits for op {waits[0]}"
                        if waits
                        else "its send was never posted"
                    )
                else:
                    why = f"rank {peer} never received it"
            else:
                if st in (IDLE, POSTED):
                    why = f"the message from rank {peer} never arrived"
                else:
                    waits = [int(p.ops[k]) for k in p.done_pre[j] if self.state[k] != DONE]
                    why = (
                        f"its data arrived but waits for op {waits[0]}"
                        if waits
                        else "its data arrived but its byte range is still being sent"
                    )
            return f"rank {r}: stuck at {what}: {why}"
        return f"rank {r}: stuck with no unfinished operation"
