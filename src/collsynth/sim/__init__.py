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

from ..deadline import TimeLimitError
from ..errors import CollsynthError
from ..schedule.ir import OpKind, Schedule
from ..units import fmt_time
from .engine import (
    compiled_loaded,
    compiled_rank_times,
    compiled_run_events,
    compiled_run_events_fair,
    rank_times,
    run_events,
    run_events_fair,
)

ORDER_POLICIES = ("auto", "plan", "fcfs", "fair")
# The link model the executors realize and the emulated testbed validated (docs/testbed.md):
# links shared fairly by the connections (rank pairs) that use them, each connection carrying
# its messages in the order its sender posts them (the schedule's link orders where it has them,
# else first ready, first served). Every reported time defaults to it.
REALIZED = "fair"
# Below this many link hops ``simulate`` runs the plain Python loop unless the compiled one is
# already loaded in this process: loading it (numba and its cache, about 0.7 s) takes longer
# than the plain loop (about 10 k hops/s) on a small schedule.
COMPILE_FROM_HOPS = 1_000
# What each model is called in outputs (``model`` fields and table headers).
MODEL_NAMES = {
    "fair": "realized (links shared by connections, each in its posting order)",
    "auto": "planned (the plan's priorities and link orders)",
    "plan": "planned (the plan's priorities and link orders)",
    "fcfs": "first served (one transfer at a time per link, first ready first served)",
}


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
        ptr, hops, pos = _link_order_hops(s, hop_link, hop_op, n_links)
        used += " + planned link orders"
    return pos, ptr, hops, prio, used


def _link_order_hops(
    s: Schedule, hop_link: np.ndarray, hop_op: np.ndarray, n_links: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The schedule's link orders as hops: (per link, the start of its ordered hops; the hops,
    link by link in each link's order; each hop's position in its link's order, -1 where it
    has none). One sorted lookup of (link, op) for every listed operation."""
    assert s.link_order is not None
    n_ops = np.int64(max(s.num_ops, 1))
    links = sorted(s.link_order, key=int)
    seqs = [np.asarray(s.link_order[l], dtype=np.int64).ravel() for l in links]
    lengths = np.array([len(q) for q in seqs], dtype=np.int64)
    want_link = np.repeat(np.array([int(l) for l in links], dtype=np.int64), lengths)
    want_op = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    hop_key = hop_link.astype(np.int64) * n_ops + hop_op.astype(np.int64)
    by_key = np.argsort(hop_key, kind="stable")
    sorted_keys = hop_key[by_key]
    want = want_link * n_ops + want_op
    at = np.minimum(np.searchsorted(sorted_keys, want), max(len(sorted_keys) - 1, 0))
    found = (want_op >= 0) & (want_op < s.num_ops) & (want_link >= 0) & (want_link < n_links)
    if len(sorted_keys):
        found &= sorted_keys[at] == want
    else:
        found[:] = False
    if not found.all():
        bad = int(np.flatnonzero(~found)[0])
        raise CollsynthError(
            f"planned order of link {int(want_link[bad])} lists op {int(want_op[bad])}, which "
            f"does not use it (verify the schedule first)"
        )
    hops = by_key[at].astype(np.int64) if len(want) else np.zeros(0, dtype=np.int64)
    ptr = np.zeros(n_links + 1, dtype=np.int64)
    np.cumsum(np.bincount(want_link, minlength=n_links), out=ptr[1:])
    pos = np.full(len(hop_link), -1, dtype=np.int64)
    pos[hops] = np.arange(len(hops), dtype=np.int64) - ptr[want_link]
    return ptr, hops, pos


@dataclass
class _GroupPlan:
    """Multicasts and in-switch reductions in the simulator: each link of a group's tree is one
    hop, owned by the first member whose route uses it. Per operation, the links of its route
    it owns (a multicast branch owns the links after the point where it parts from earlier
    members; a reduction member those before it meets one); hops named ``(op, i)``: the
    ``i``-th link the operation owns."""

    own_ptr: np.ndarray  # per op: its owned links, CSR over route_links' kind of ids
    own_links: np.ndarray
    forked: np.ndarray  # per op: its first hop is requested where it parts (multicast)
    fork_from: list[tuple[int, int]]  # hop -> ...
    fork_to: list[tuple[int, int]]  # ... a hop requested alpha after it starts
    user_hop: list[tuple[int, int]]  # hop -> ...
    user_op: list[int]  # ... an operation whose arrival waits for it ...
    user_tail: list[float]  # ... with these alphas still ahead on that operation's path


def _group_plan(s: Schedule) -> _GroupPlan:
    """The owned links, branches, merges and arrivals of every in-network group (the other
    operations own their whole routes and wait for their own hops)."""
    t = s.topology
    g = s.group
    assert g is not None
    n = s.num_ops
    own: list[list[int]] = [s.route(o).tolist() for o in range(n)]
    forked = np.zeros(n, dtype=bool)
    fork_from: list[tuple[int, int]] = []
    fork_to: list[tuple[int, int]] = []
    user_hop: list[tuple[int, int]] = []
    user_op: list[int] = []
    user_tail: list[float] = []
    members = np.flatnonzero(g >= 0)
    order = members[np.argsort(g[members], kind="stable")]
    in_group = np.zeros(n, dtype=bool)
    in_group[members] = True
    for block in np.split(order, np.flatnonzero(np.diff(g[order])) + 1):
        ops = sorted(int(o) for o in block)
        multicast = s.kind[ops[0]] == OpKind.COPY
        owner: dict[tuple, tuple[int, int]] = {}  # path from the shared end -> hop
        hops_of_group: dict[tuple[int, int], float] = {}
        for o in ops:
            route = own[o] if multicast else own[o][::-1]
            alphas = t.link_alpha[own[o]]
            path: tuple = ()
            shared = 0
            for link in route:
                path = path + (link,)
                if path in owner:
                    shared += 1
                else:
                    break
            if multicast:
                own[o] = route[shared:]
                if shared:
                    forked[o] = True
                    fork_from.append(owner[tuple(route[:shared])])
                    fork_to.append((o, 0))
                for i in range(len(route)):  # every hop of its path, each to be waited for
                    hop = owner.get(tuple(route[: i + 1]), (o, i - shared))
                    user_hop.append(hop)
                    user_op.append(o)
                    user_tail.append(float(alphas[i:].sum()))
                for i in range(shared, len(route)):
                    owner[tuple(route[: i + 1])] = (o, i - shared)
            else:
                mine = len(route) - shared  # the links before it meets an earlier member
                own[o] = own[o][:mine]
                if shared:
                    fork_from.append((o, mine - 1))
                    fork_to.append(owner[tuple(route[:shared])])
                for i in range(len(route)):  # (reversed: position i from the receiver)
                    hop = owner.get(tuple(route[: i + 1]), (o, len(route) - 1 - i))
                    hops_of_group[hop] = float(alphas[len(route) - 1 - i :].sum())
                for i in range(shared, len(route)):
                    owner[tuple(route[: i + 1])] = (o, len(route) - 1 - i)
        if not multicast:  # every member's result arrives with the combined stream
            for hop, tail in hops_of_group.items():
                for o in ops:
                    user_hop.append(hop)
                    user_op.append(o)
                    user_tail.append(tail)
    for o in np.flatnonzero(~in_group).tolist():
        alphas = t.link_alpha[own[o]]
        for i in range(len(own[o])):
            user_hop.append((o, i))
            user_op.append(o)
            user_tail.append(float(alphas[i:].sum()))
    lens = np.array([len(x) for x in own], dtype=np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    links = np.array([lk for x in own for lk in x], dtype=np.int64)
    return _GroupPlan(ptr, links, forked, fork_from, fork_to, user_hop, user_op, user_tail)


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
    s: Schedule, size: float, route_ptr: np.ndarray, route_links: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One entry per hop (an operation's use of one link), in route order: (link, operation,
    transmission time, alpha, alpha from the hop to the end of its route inclusive), and the
    bytes of each operation. ``route_ptr``/``route_links``: the schedule's routes, or the
    links each operation owns in its in-network group."""
    t = s.topology
    lengths = np.diff(route_ptr)
    hop_link = route_links.astype(np.int64)
    hop_op = np.repeat(np.arange(s.num_ops, dtype=np.int64), lengths)
    nbytes = s.op_bytes(size)
    hop_tx = nbytes[hop_op] / t.link_bw[hop_link]
    hop_alpha = t.link_alpha[hop_link]
    # alpha from this hop to the end of its route (inclusive)
    csum = np.cumsum(hop_alpha[::-1])[::-1] if len(hop_alpha) else hop_alpha
    route_end = route_ptr[1:]
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
    s: Schedule,
    op_cost: float,
    hops: tuple,
    route_ptr: np.ndarray,
    n_all: int,
    forked: np.ndarray | None = None,
) -> tuple[tuple, np.ndarray, int]:
    """Virtual hops, on links after the topology's: with ``op_cost``, one in front of every
    transfer on the link ``n_links + sender``, held for ``op_cost`` seconds, whose head reaches
    the first real link ``op_cost`` after it starts (its latency; it adds nothing to the
    arrival itself, the real hops after it do); and for every join, one hop of no time on a
    link of its own kind (a join finishes as soon as it is ready). A multicast's branches
    (``forked``) pay no issue cost: one stream leaves the sender. The hop arrays (link, op,
    transmission, alpha, alpha to the route's end), route pointers and number of links."""
    n_ops = s.num_ops
    ops = np.arange(n_ops, dtype=np.int64)
    join = s.kind == OpKind.JOIN
    if op_cost > 0:
        cost = np.full(n_ops, float(op_cost))
        virtual = (n_all + s.src.astype(np.int64), ops, cost, cost, np.zeros(n_ops))
        issued = ~join if forked is None else ~join & ~forked
        hops, route_ptr = _prepend_hops(route_ptr, issued, hops, virtual)
        n_all += s.topology.num_ranks
    if join.any():
        zero = np.zeros(n_ops)
        virtual = (np.full(n_ops, n_all, dtype=np.int64), ops, zero, zero, zero)
        hops, route_ptr = _prepend_hops(route_ptr, join, hops, virtual)
        n_all += 1
    return hops, route_ptr, n_all


def _group_arrays(
    plan: _GroupPlan | None, own_ptr: np.ndarray, route_ptr: np.ndarray
) -> tuple[tuple, np.ndarray, np.ndarray]:
    """The engine's view of in-network groups over the final hops (``route_ptr``: each
    operation's hops, virtual ones first, over ``own_ptr``'s owned links): ``(flags, hops into
    each hop, branch pointers, branch hops, user pointers, user operations, user tails)``,
    the hops each operation's arrival waits for, and each operation's first hop (-1 for a
    branch, requested where it parts). Without groups: empty arrays the engine ignores."""
    n_ops = len(route_ptr) - 1
    first = route_ptr[:-1].copy()
    if plan is None:
        i1, f1 = np.zeros(1, dtype=np.int64), np.zeros(1)
        empty = (np.zeros(1, dtype=np.bool_), i1, i1, i1, i1, i1, f1)
        return empty, np.diff(route_ptr).astype(np.int64), first
    n_hops = int(route_ptr[-1])
    virtual = np.diff(route_ptr) - np.diff(own_ptr)  # 0 or 1 per operation, in front

    def hop_ids(pairs: list[tuple[int, int]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.int64)
        arr = np.array(pairs, dtype=np.int64)
        return route_ptr[arr[:, 0]] + virtual[arr[:, 0]] + arr[:, 1]

    ops = np.arange(n_ops, dtype=np.int64)
    v_ops = ops[virtual > 0]  # each virtual hop: waited for by its own operation, no alpha
    u_hop = np.concatenate((hop_ids(plan.user_hop), route_ptr[v_ops]))
    u_op = np.concatenate((np.array(plan.user_op, dtype=np.int64), v_ops))
    u_tail = np.concatenate((np.array(plan.user_tail, dtype=np.float64), np.zeros(len(v_ops))))
    by = np.argsort(u_hop, kind="stable")
    user_ptr = np.zeros(n_hops + 1, dtype=np.int64)
    np.cumsum(np.bincount(u_hop, minlength=n_hops), out=user_ptr[1:])
    f_from, f_to = hop_ids(plan.fork_from), hop_ids(plan.fork_to)
    by_f = np.argsort(f_from, kind="stable")
    fork_ptr = np.zeros(n_hops + 1, dtype=np.int64)
    np.cumsum(np.bincount(f_from, minlength=n_hops), out=fork_ptr[1:])
    need = np.ones(n_hops, dtype=np.int64)  # the hop before it on its operation's route ...
    need[route_ptr[:-1]] = 0  # ... none for a first hop, requested when the operation is ready
    np.add.at(need, f_to, 1)  # ... and every hop that branches or merges into it
    first[plan.forked] = -1
    groups = (np.ones(1, dtype=np.bool_), need, fork_ptr, f_to[by_f], user_ptr, u_op[by],
              u_tail[by])  # fmt: skip
    return groups, np.bincount(u_op, minlength=n_ops).astype(np.int64), first


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


def _connection_positions(
    s: Schedule, hop_class: np.ndarray, link_order_ptr: np.ndarray, link_order_hops: np.ndarray
) -> np.ndarray:
    """Each hop's position in its connection's planned order, -1 where its link has none. A
    connection's order is its link's planned order restricted to the connection's sender and
    receiver: what an executor realizes by posting each pair's messages in that order (one
    connection carries them one after another; different pairs share the link)."""
    pos = np.full(len(hop_class), -1, dtype=np.int64)
    if not len(link_order_hops):
        return pos
    cls = hop_class[link_order_hops]
    by = np.argsort(cls, kind="stable")  # per connection, in the link's planned order
    sorted_cls = cls[by]
    starts = np.flatnonzero(np.r_[True, sorted_cls[1:] != sorted_cls[:-1]])
    rank = np.arange(len(by)) - np.repeat(starts, np.diff(np.r_[starts, len(by)]))
    pos[link_order_hops[by]] = rank
    return pos


def _call(kernel, *args):
    """``kernel(*args)`` with a time limit's alarm held until it returns: a Python signal
    handler that raises while a compiled call is returning leaves the interpreter with an
    exception set inside the call (a ``SystemError``, and now and then a crash), so during the
    call the alarm only records that it rang; the limit's own handler then runs at once."""
    import signal
    import threading

    if (
        not hasattr(kernel, "py_func")  # the plain Python loop: the alarm may interrupt it
        or threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "SIGALRM")
    ):
        return kernel(*args)
    from ..interrupt import deferred  # SIGINT, SIGTERM, SIGHUP: held the same way

    limit_handler = signal.getsignal(signal.SIGALRM)
    if not callable(limit_handler):
        with deferred():
            return kernel(*args)
    rang: list = []
    signal.signal(signal.SIGALRM, lambda signum, frame: rang.append((signum, frame)))
    try:
        with deferred():
            out = kernel(*args)
    except SystemError as e:  # an older handler installed inside the call raised anyway
        if isinstance(e.__cause__, TimeLimitError):
            raise e.__cause__ from None
        raise
    finally:
        signal.signal(signal.SIGALRM, limit_handler)
    if rang:
        limit_handler(*rang[0])
    return out


def simulate(
    schedule: Schedule,
    size: float,
    *,
    reduce_bw: float | None = None,
    order: str = REALIZED,
    release: bool = False,
    op_cost_s: float = 0.0,
    compiled: bool | None = None,
    _force_queues: bool = False,
) -> SimResult:
    """Simulate ``schedule`` moving ``size`` bytes (nccl-tests convention).

    ``order``: ``fair`` (the default, :data:`REALIZED`: what the executors and exporters
    realize and the testbed measured) shares each link equally among the rank pairs with data
    on it, each pair's transfers going one at a time in the schedule's link order restricted to
    that pair (the order its sender posts them), or first ready first served where the link has
    no order (TCP connections or RDMA queue pairs; processor sharing, see
    ``docs/simulator.md``); planned priorities are ignored. ``auto`` (= ``plan``) follows the
    schedule's plan: explicit per-link orders are obeyed exactly across all pairs; otherwise a
    free link starts the waiting transfer with the earliest planned start time (or step), then
    the first ready. ``fcfs`` ignores every plan: first ready, first served.
    ``release`` holds each operation until its planned start.
    ``reduce_bw`` (bytes/s) adds ``bytes / reduce_bw`` to every reduce operation.
    ``op_cost_s`` (seconds) is what issuing one operation costs its sender: a rank issues its
    operations one at a time, each taking ``op_cost_s`` before its bytes start, while issued
    operations travel in parallel (an executor's or a NIC's per-message work; 0, the default, is
    the pure alpha-beta model). Modelled as one virtual link per rank in front of every route.
    ``compiled``: run the numba-compiled loop (True), the plain Python one (False), or
    (None, the default) the compiled one when it is already loaded or the schedule has
    :data:`COMPILE_FROM_HOPS` link hops or more: below that, loading the compiled code costs
    more than it saves. Both give the same results.
    """
    _check_args(size, order, reduce_bw, op_cost_s)
    wall0 = _time.perf_counter()
    s = schedule
    t = s.topology
    n_ops = s.num_ops
    n_links = len(t.links)
    plan = _group_plan(s) if s.has_groups else None
    own_ptr, own_links = (plan.own_ptr, plan.own_links) if plan else (s.route_ptr, s.route_links)
    hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, nbytes = _hop_arrays(
        s, size, own_ptr, own_links
    )
    (hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail), route_ptr, n_all = _virtual_hops(
        s, op_cost_s, (hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail),
        own_ptr.astype(np.int64), n_links, plan.forked if plan else None,
    )  # fmt: skip
    groups, op_hops, op_first = _group_arrays(plan, own_ptr, route_ptr)
    if compiled is None:
        compiled = len(hop_link) >= COMPILE_FROM_HOPS or compiled_loaded(order == "fair")
    op_last = route_ptr[1:] - 1
    extra, release_t = _op_delays(s, nbytes, reduce_bw, release)
    succ_ptr, succ_ids, indeg = _successors(s)
    pos, optr, ohops, prio, used = _order_arrays(
        s, "fcfs" if order == "fcfs" else "plan", hop_link, hop_op, n_all
    )
    if order == "fair":
        hop_class, class_ptr, shared = _connections(s, hop_link, hop_op, n_links, n_all)
        conn_pos = _connection_positions(s, hop_class, optr, ohops)
        used = "links shared fairly by rank pairs, each pair first ready, first served"
        if len(ohops):
            used = "links shared fairly by rank pairs, each pair in its planned link order"
        kernel = compiled_run_events_fair() if compiled else run_events_fair
        hop_start, hop_end, op_ready, op_finish, busy, done = _call(
            kernel, hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, op_first, op_last,
            release_t, extra, succ_ptr, succ_ids, indeg, n_all, hop_class, class_ptr, shared,
            conn_pos, op_hops, groups,
        )  # fmt: skip
    else:
        kernel = compiled_run_events() if compiled else run_events
        reserve = bool(np.all(prio == prio[0])) if n_ops else True
        if _force_queues:
            reserve = False
        hop_start, hop_end, op_ready, op_finish, busy, done = _call(
            kernel, hop_link, hop_op, hop_tx, hop_alpha, hop_alpha_tail, op_first, op_last, prio,
            release_t, extra, succ_ptr, succ_ids, indeg, pos, optr, ohops, n_all, reserve,
            op_hops, groups,
        )  # fmt: skip
    if done != n_ops:
        raise CollsynthError(
            f"simulation stalled with {n_ops - done} of {n_ops} operations "
            f"never started (dependency cycle or planned link order that "
            f"deadlocks; verify the schedule)"
        )
    op_start = hop_start[route_ptr[:-1]] if n_ops else np.zeros(0)
    if n_all > n_links:  # drop the virtual hops: the outputs speak of real links only
        keep = hop_link < n_links
        hop_link, hop_op = hop_link[keep], hop_op[keep]
        hop_start, hop_end, busy = hop_start[keep], hop_end[keep], busy[:n_links]
        if op_cost_s > 0:
            used += f", {fmt_time(op_cost_s)} per operation at its sender"
            real_first = own_ptr[:-1][s.kind != OpKind.JOIN]
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
