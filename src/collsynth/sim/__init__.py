"""The collsynth simulator: alpha-beta, store-and-forward at GPUs, cut-through at switches and
routers, link contention. The model and its equations are in ``docs/simulator.md``.

``simulate(schedule, size)`` returns a :class:`SimResult`: completion time overall and per rank,
algbw and busbw (nccl-tests factors), per-link busy time and utilisation, and the timeline of
every hop.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass

import numpy as np

from ..errors import CollsynthError
from ..schedule.ir import OpKind, Schedule
from ..units import fmt_time
from .engine import (
    compiled_rank_times,
    compiled_run_events,
    compiled_run_events_fair,
    rank_times,
    run_events,
    run_events_fair,
)

ORDER_POLICIES = ("auto", "plan", "fcfs", "fair")


@dataclass
class SimResult:
    schedule: Schedule
    size: float
    time_s: float
    per_rank_time_s: np.ndarray
    op_start_s: np.ndarray  # start of each operation's first hop
    op_finish_s: np.ndarray  # arrival (plus reduction) of each operation
    hop_link: np.ndarray  # link of every hop (the timeline)
    hop_op: np.ndarray
    hop_start_s: np.ndarray
    hop_end_s: np.ndarray
    link_busy_s: np.ndarray  # per link id
    order_policy: str
    wall_s: float
    op_cost_s: float = 0.0  # what issuing one operation cost its sender

    @property
    def algbw(self) -> float:
        """Bytes per second: size / time."""
        return self.size / self.time_s if self.time_s > 0 else float("inf")

    @property
    def busbw(self) -> float:
        return self.algbw * self.schedule.collective.busbw_factor

    @property
    def link_utilisation(self) -> np.ndarray:
        if self.time_s <= 0:
            return np.zeros_like(self.link_busy_s)
        return self.link_busy_s / self.time_s

    @property
    def hops(self) -> int:
        return int(len(self.hop_link))

    def to_dict(self, links: int = 10) -> dict:
        t = self.schedule.topology
        util = self.link_utilisation
        top = np.argsort(-util, kind="stable")[:links]
        return {
            "size_bytes": self.size,
            "time_s": self.time_s,
            "algbw_Bps": self.algbw,
            "busbw_Bps": self.busbw,
            "per_rank_time_s": self.per_rank_time_s.tolist(),
            "ops": self.schedule.num_ops,
            "hops": self.hops,
            "order_policy": self.order_policy,
            "op_cost_s": self.op_cost_s,
            "busiest_links": [
                {
                    "link": int(l),
                    "src": t.nodes[t.links[l].src].name,
                    "dst": t.nodes[t.links[l].dst].name,
                    "busy_s": float(self.link_busy_s[l]),
                    "utilisation": float(util[l]),
                }
                for l in top
                if util[l] > 0
            ],
            "mean_utilisation_of_used_links": float(util[util > 0].mean())
            if np.any(util > 0)
            else 0.0,
            "sim_wall_s": self.wall_s,
        }


def _order_arrays(
    s: Schedule, policy: str, hop_link: np.ndarray, hop_op: np.ndarray, n_links: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Priorities and explicit per-link orders: (hop_order_pos, link_order_ptr,
    link_order_hops, op_prio, description)."""
    n_hops = len(hop_link)
    pos = np.full(n_hops, -1, dtype=np.int64)
    ptr = np.zeros(n_links + 1, dtype=np.int64)
    hops = np.zeros(0, dtype=np.int64)
    prio = np.zeros(s.num_ops, dtype=np.float64)
    if policy == "fcfs":
        return pos, ptr, hops, prio, "first ready, first served"
    used = "first ready, first served"
    if s.start is not None and not np.any(np.isnan(s.start)):
        prio = s.start.astype(np.float64)
        used = "planned start times first"
    elif s.step is not None and np.all(s.step >= 0):
        prio = s.step.astype(np.float64)
        used = "planned steps first"
    if s.link_order:
        lists: dict[int, np.ndarray] = {}
        op_hops: dict[tuple[int, int], int] = {}
        explicit = np.array(sorted(int(l) for l in s.link_order), dtype=np.int64)
        for h in np.flatnonzero(np.isin(hop_link, explicit)).tolist():
            op_hops[(int(hop_link[h]), int(hop_op[h]))] = h
        for l, ops in s.link_order.items():
            planned: list[int] = []
            for o in np.asarray(ops).tolist():
                hop = op_hops.get((int(l), int(o)))
                if hop is None:
                    raise CollsynthError(
                        f"planned order of link {l} lists op {o}, which does "
                        f"not use it (verify the schedule first)"
                    )
                planned.append(hop)
            lists[int(l)] = np.array(planned, dtype=np.int64)
        chunks = []
        for l in range(n_links):
            seq = lists.get(l, np.zeros(0, dtype=np.int64))
            ptr[l + 1] = ptr[l] + len(seq)
            pos[seq] = np.arange(len(seq))
            chunks.append(seq)
        hops = np.concatenate(chunks) if chunks else hops
        used += " + planned link orders"
    return pos, ptr, hops, prio, used


def _check_args(size: float, order: str, reduce_bw: float | None, op_cost: float = 0.0) -> None:
    """Refuse an unknown order policy, a size that is not a positive number of bytes, a
    reduction bandwidth that is not positive and a per-operation cost that is negative (in that
    order)."""
    if order not in ORDER_POLICIES:
        raise CollsynthError(f"order policy {order!r} is not one of {', '.join(ORDER_POLICIES)}")
    if not (isinstance(size, (int, float)) and np.isfinite(size) and size > 0):
        raise CollsynthError(f"size {size!r} must be a positive number of bytes")
    if reduce_bw is not None and not (np.isfinite(reduce_bw) and reduce_bw > 0):
        raise CollsynthError(f"reduction bandwidth {reduce_bw!r} must be positive")
    if not (isinstance(op_cost, (int, float)) and np.isfinite(op_cost) and op_cost >= 0):
        raise CollsynthError(f"per-operation cost {op_cost!r} must be zero or more seconds")


def _hop_arrays(
    s: Schedule, size: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One entry per hop (an operation's use of one link), in route order: (link, operation,
    transmission time, alpha, alpha from the hop to the end of its route inclusive), and the
    bytes of each operation."""
    t = s.topology
    lengths = np.diff(s.route_ptr)
    hop_link = s.route_links.astype(np.int64)
    hop_op = np.repeat(np.arange(s.num_ops, dtype=np.int64), lengths)
    nbytes = s.op_bytes(size)
    hop_tx = nbytes[hop_op] / t.link_bw[hop_link]
    hop_alpha = t.link_alpha[hop_link]
    # alpha from this hop to the end of its route (inclusive)
    csum = np.cumsum(hop_alpha[::-1])[::-1] if len(hop_alpha) else hop_alpha
    route_end = s.route_ptr[1:]
    after_route = np.concatenate((csum, [0.0]))[route_end]  # sum of alphas after the route
    hop_alpha_tail = csum - np.repeat(after_route, lengths)
    return hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, nbytes


def _prepend_hops(
    route_ptr: np.ndarray, which: np.ndarray, arrays: tuple, virtual: tuple
) -> tuple[tuple, np.ndarray]:
    """The per-hop ``arrays`` with one virtual hop in front of the route of each operation
    in the boolean mask ``which``, taking the per-operation values ``virtual`` (one array per
    hop array, indexed by operation); and the route pointers of the extended routes."""
    n_ops = len(route_ptr) - 1
    lengths = np.diff(route_ptr)
    add = which.astype(np.int64)
    ptr = np.zeros(n_ops + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(lengths + add)
    first = ptr[:-1][which]
    real = np.ones(int(ptr[-1]), dtype=bool)
    real[first] = False

    def spread(values: np.ndarray, v: np.ndarray) -> np.ndarray:
        out = np.empty(len(real), dtype=np.result_type(values, v))
        out[real] = values
        out[first] = v[which]
        return out

    return tuple(spread(a, v) for a, v in zip(arrays, virtual)), ptr


def _virtual_hops(
    s: Schedule, op_cost: float, hops: tuple, route_ptr: np.ndarray, n_all: int
) -> tuple[tuple, np.ndarray, int]:
    """Virtual hops, on links after the topology's: with ``op_cost``, one in front of every
    transfer on the link ``n_links + sender``, held for ``op_cost`` seconds, whose head reaches
    the first real link ``op_cost`` after it starts (its latency; it adds nothing to the
    arrival itself, the real hops after it do); and for every join, one hop of no time on a
    link of its own kind (a join finishes as soon as it is ready). The hop arrays (link, op,
    transmission, alpha, alpha to the route's end), route pointers and number of links."""
    n_ops = s.num_ops
    ops = np.arange(n_ops, dtype=np.int64)
    join = s.kind == OpKind.JOIN
    if op_cost > 0:
        cost = np.full(n_ops, float(op_cost))
        virtual = (n_all + s.src.astype(np.int64), ops, cost, cost, np.zeros(n_ops))
        hops, route_ptr = _prepend_hops(route_ptr, ~join, hops, virtual)
        n_all += s.topology.num_ranks
    if join.any():
        zero = np.zeros(n_ops)
        virtual = (np.full(n_ops, n_all, dtype=np.int64), ops, zero, zero, zero)
        hops, route_ptr = _prepend_hops(route_ptr, join, hops, virtual)
        n_all += 1
    return hops, route_ptr, n_all


def _op_delays(
    s: Schedule, nbytes: np.ndarray, reduce_bw: float | None, release: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Per operation: the reduction time added after arrival (``bytes / reduce_bw`` for reduce
    operations) and the earliest start (the planned start with ``release``, else 0)."""
    n_ops = s.num_ops
    extra = np.zeros(n_ops)
    if reduce_bw is not None:
        extra = np.where(s.kind == OpKind.REDUCE, nbytes / reduce_bw, 0.0)
    release_t = np.zeros(n_ops)
    if release and s.start is not None:
        release_t = np.where(np.isnan(s.start), 0.0, s.start)
    return extra, release_t


def _successors(s: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dependency graph reversed: (successor pointers, successor ids, in-degree) per op;
    the successors of ``op`` are ``succ_ids[succ_ptr[op]:succ_ptr[op + 1]]``."""
    n_ops = s.num_ops
    dep_owner = np.repeat(np.arange(n_ops, dtype=np.int64), np.diff(s.dep_ptr))
    by_dep = np.argsort(s.dep_ids, kind="stable")
    succ_ids = dep_owner[by_dep]
    succ_ptr = np.zeros(n_ops + 1, dtype=np.int64)
    if len(s.dep_ids):
        succ_ptr[1:] = np.cumsum(np.bincount(s.dep_ids, minlength=n_ops))
    indeg = np.diff(s.dep_ptr).astype(np.int64)
    return succ_ptr, succ_ids, indeg


def _connections(
    s: Schedule, hop_link: np.ndarray, hop_op: np.ndarray, n_links: int, n_all: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shared links for ``order="fair"``: (the connection of every hop on a real link, -1 on
    the virtual issue links; the start of each connection's queue segment; which links are
    shared). A connection is one (link, sender, receiver): transfers between the same two ranks
    over one link go one after another, different pairs share the link."""
    real = hop_link < n_links
    r = np.int64(s.topology.num_ranks)
    key = (hop_link * r + s.src.astype(np.int64)[hop_op]) * r + s.dst.astype(np.int64)[hop_op]
    hop_class = np.full(len(hop_link), -1, dtype=np.int64)
    uniq, inverse = np.unique(key[real], return_inverse=True)
    hop_class[real] = inverse
    class_ptr = np.zeros(len(uniq) + 1, dtype=np.int64)
    class_ptr[1:] = np.cumsum(np.bincount(inverse, minlength=len(uniq)))
    shared = np.zeros(n_all, dtype=np.bool_)
    shared[:n_links] = True
    return hop_class, class_ptr, shared


def simulate(
    schedule: Schedule,
    size: float,
    *,
    reduce_bw: float | None = None,
    order: str = "auto",
    release: bool = False,
    op_cost_s: float = 0.0,
    compiled: bool = True,
    _force_queues: bool = False,
) -> SimResult:
    """Simulate ``schedule`` moving ``size`` bytes (nccl-tests convention).

    ``order``: ``auto`` (= ``plan``) follows the schedule's plan: explicit per-link orders are
    obeyed exactly; otherwise a free link starts the waiting transfer with the earliest planned
    start time (or step), then the first ready. ``fcfs`` ignores every plan: first ready, first
    served. ``fair`` ignores every plan too, and shares each link equally among the rank pairs
    with data on it, each pair's transfers going one at a time, first ready first served (TCP
    connections or RDMA queue pairs; processor sharing, see ``docs/simulator.md``).
    ``release`` holds each operation until its planned start.
    ``reduce_bw`` (bytes/s) adds ``bytes / reduce_bw`` to every reduce operation.
    ``op_cost_s`` (seconds) is what issuing one operation costs its sender: a rank issues its
    operations one at a time, each taking ``op_cost_s`` before its bytes start, while issued
    operations travel in parallel (an executor's or a NIC's per-message work; 0, the default, is
    the pure alpha-beta model). Modelled as one virtual link per rank in front of every route.
    """
    _check_args(size, order, reduce_bw, op_cost_s)
    wall0 = _time.perf_counter()
    s = schedule
    t = s.topology
    n_ops = s.num_ops
    n_links = len(t.links)
    hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, nbytes = _hop_arrays(s, size)
    route_ptr = s.route_ptr.astype(np.int64)
    (hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail), route_ptr, n_all = _virtual_hops(
        s, op_cost_s, (hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail), route_ptr, n_links
    )
    op_first = route_ptr[:-1]
    op_last = route_ptr[1:] - 1
    extra, release_t = _op_delays(s, nbytes, reduce_bw, release)
    succ_ptr, succ_ids, indeg = _successors(s)
    pos, optr, ohops, prio, used = _order_arrays(
        s, "fcfs" if order in ("fcfs", "fair") else "plan", hop_link, hop_op, n_all
    )
    if order == "fair":
        hop_class, class_ptr, shared = _connections(s, hop_link, hop_op, n_links, n_all)
        used = "links shared fairly by rank pairs, each pair first ready, first served"
    if order == "fair":
        kernel = compiled_run_events_fair() if compiled else run_events_fair
        hop_start, hop_end, op_ready, op_finish, busy, done = kernel(
            hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, op_first, op_last, release_t,
            extra, succ_ptr, succ_ids, indeg, n_all, hop_class, class_ptr, shared,
        )  # fmt: skip
    else:
        kernel = compiled_run_events() if compiled else run_events
        reserve = bool(np.all(prio == prio[0])) if n_ops else True
        if _force_queues:
            reserve = False
        hop_start, hop_end, op_ready, op_finish, busy, done = kernel(
            hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, op_first, op_last, prio,
            release_t, extra, succ_ptr, succ_ids, indeg, pos, optr, ohops, n_all, reserve,
        )  # fmt: skip
    if done != n_ops:
        raise CollsynthError(
            f"simulation stalled with {n_ops - done} of {n_ops} operations "
            f"never started (dependency cycle or planned link order that "
            f"deadlocks; verify the schedule)"
        )
    op_start = hop_start[op_first] if n_ops else np.zeros(0)
    if n_all > n_links:  # drop the virtual hops: the outputs speak of real links only
        keep = hop_link < n_links
        hop_link, hop_op = hop_link[keep], hop_op[keep]
        hop_start, hop_end, busy = hop_start[keep], hop_end[keep], busy[:n_links]
        if op_cost_s > 0:
            used += f", {fmt_time(op_cost_s)} per operation at its sender"
            real_first = s.route_ptr[:-1][s.kind != OpKind.JOIN]
            op_start[s.kind != OpKind.JOIN] = hop_start[real_first]
    total = float(op_finish.max()) if n_ops else 0.0
    per_rank = (compiled_rank_times() if compiled else rank_times)(
        s.src, s.dst, op_finish, t.num_ranks
    )
    return SimResult(
        s,
        float(size),
        total,
        per_rank,
        op_start,
        op_finish,
        hop_link,
        hop_op,
        hop_start,
        hop_end,
        busy,
        used,
        _time.perf_counter() - wall0,
        float(op_cost_s),
    )
