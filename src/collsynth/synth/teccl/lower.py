"""From epoch ops to a timed schedule IR, and the greedy epoch placement used as warm start.

**Timing.** Each transfer keeps its epoch as ``step`` and gets a start time by list scheduling
in epoch order: it starts no earlier than the start of its epoch (``k0 * tau``), after the
delivery it forwards, and late enough that every link of its route is free when its data
reaches that link (cut-through: hop ``i`` starts ``sum of the alphas before it`` after the
start). Links therefore serve their transfers one at a time, in epoch order, at full
bandwidth — the plan satisfies the verifier's capacity rule by construction, and the per-link
order is recorded as ``link_order``. Within the MILP's accounting every transfer fits in its
epoch(s), so the plan never waits beyond them where the epoch model is exact (see
``docs/teccl.md`` for where it is not: alpha rounding and switch hops with different alphas).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...arrays import unique
from ...collective import Collective
from ...schedule.ir import Schedule, ScheduleBuilder
from ...topology.model import Topology
from .common import EpochOp
from .epochs import EpochGrid


def to_schedule(
    topology: Topology,
    collective: Collective,
    ops: list[EpochOp],
    tau: float,
    size: float,
    meta: dict,
    alpha_ep: np.ndarray | None = None,
) -> tuple[Schedule, dict]:
    """The timed IR of ``ops`` and its timing facts: ``plan_s`` (planned completion) and the
    epoch rounding along dependency chains — ``rounding_down_s``: the most time the epoch
    model misses on one chain (alphas at or below the threshold, counted as 0 epochs, and
    transmission beyond the epochs a hop was given); ``rounding_up_s``: the most it adds
    (alpha rounded up to whole epochs, transfers padded to whole epochs). Per transfer
    ``up - down`` is its epochs times ``tau`` minus its alphas and transmission time."""
    t = topology
    routes = _route_arrays(t, ops, collective.chunk_bytes(size))
    start, finish, order = _list_schedule(ops, routes, tau, len(t.links))
    return _timed_ir(t, collective, ops, routes, start, finish, order, tau, size, meta, alpha_ep)


def _route_arrays(t: Topology, ops: list[EpochOp], chunk_bytes: float) -> tuple[np.ndarray, ...]:
    """Per op: its links padded with a dummy link ``L``, the alphas before each hop, the
    transmission time, the total alpha and the first epoch."""
    m = len(ops)
    L = len(t.links)
    H = max((len(o.route) for o in ops), default=1)
    links = np.full((m, H), L, dtype=np.int64)  # padded with a dummy link L
    before = np.zeros((m, H))
    dur = np.zeros(m)
    tot_alpha = np.zeros(m)
    k0 = np.array([o.k0 for o in ops], dtype=np.int64)
    for i, o in enumerate(ops):
        r = list(o.route)
        al = t.link_alpha[r]
        links[i, : len(r)] = r
        before[i, : len(r)] = np.concatenate(([0.0], np.cumsum(al)[:-1]))
        tot_alpha[i] = float(al.sum())
        frac = 1.0 if o.part is None else (o.part[1] - o.part[0]) / o.part[2]
        dur[i] = frac * chunk_bytes / float(t.link_bw[r].min())
    return links, before, dur, tot_alpha, k0


def _list_schedule(
    ops: list[EpochOp], routes: tuple[np.ndarray, ...], tau: float, num_links: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Start and finish times by list scheduling epoch by epoch, and the order in which the
    ops were placed."""
    links, before, dur, tot_alpha, k0 = routes
    L = num_links
    m = len(ops)
    free = np.full(L + 1, -np.inf)
    finish = np.zeros(m)
    start = np.zeros(m)
    order: list[int] = []
    # epoch by epoch; within an epoch, always the transfer that can start first (so transfers
    # sharing a switch interleave instead of queueing in id order)
    for k in unique(k0).tolist():
        pend = np.flatnonzero(k0 == k)
        base = np.full(len(pend), k * tau)
        for j, i in enumerate(pend.tolist()):
            if ops[i].dep >= 0:
                base[j] = max(base[j], finish[ops[i].dep])
        alive = np.ones(len(pend), dtype=bool)
        # busy time still to come on each link in this epoch (dummy link L: none)
        load = np.zeros(L + 1)
        np.add.at(load, links[pend], np.where(links[pend] < L, dur[pend][:, None], 0.0))
        load[L] = 0.0
        for _ in range(len(pend)):
            if not alive.any():
                break  # (a multicast places all its members at once)
            idx = np.flatnonzero(alive)
            cand = pend[idx]
            est = np.maximum(base[idx], np.max(free[links[cand]] - before[cand], axis=1))
            # among those that can start first, the one on the most loaded links (a
            # largest-degree-first rule: transfers through a switch interleave like a
            # bipartite edge colouring instead of queueing behind each other)
            first = np.flatnonzero(est <= est.min() + 1e-12 * max(1.0, abs(est.min())))
            crit = np.max(load[links[cand[first]]], axis=1)
            j = int(idx[int(first[int(np.argmax(crit))])])
            g = ops[int(pend[j])].group
            # a multicast starts as one stream: its members together, when all can
            unit = [j] if g < 0 else [x for x in np.flatnonzero(alive) if ops[pend[x]].group == g]
            st = max(
                max(base[x], float(np.max(free[links[pend[x]]] - before[pend[x]]))) for x in unit
            )
            for x in unit:
                i = int(pend[x])
                alive[x] = False
                load[links[i]] -= np.where(links[i] < L, dur[i], 0.0)
                start[i] = st
                finish[i] = st + tot_alpha[i] + dur[i]
                r = links[i][links[i] < L]  # (a shared link is booked alike by every member)
                free[r] = st + before[i, : len(r)] + dur[i]
                order.append(i)
    return start, finish, order


def _timed_ir(
    t: Topology,
    collective: Collective,
    ops: list[EpochOp],
    routes: tuple[np.ndarray, ...],
    start: np.ndarray,
    finish: np.ndarray,
    order: list[int],
    tau: float,
    size: float,
    meta: dict,
    alpha_ep: np.ndarray | None,
) -> tuple[Schedule, dict]:
    """The IR in placement order with per-link orders, and the timing facts (plan and epoch
    rounding along dependency chains)."""
    _, _, dur, tot_alpha, _ = routes
    m = len(ops)
    new_id = np.full(m, -1, dtype=np.int64)
    new_id[order] = np.arange(len(order))
    b = ScheduleBuilder(t, collective, meta=meta)
    b.size = float(size)
    per_link: dict[int, list[int]] = {}
    carried: set[tuple] = set()
    up = np.zeros(m)
    down = np.zeros(m)
    for new, i in enumerate(order):
        o = ops[i]
        r = list(o.route)
        slack = (o.arrive - o.k0) * tau - (tot_alpha[i] + dur[i])
        if alpha_ep is not None:
            dropped = float(t.link_alpha[r][alpha_ep[r] == 0].sum())
            tx_epochs = o.arrive - o.k0 - int(alpha_ep[r].sum())
            miss = dropped + max(0.0, dur[i] - tx_epochs * tau)
        else:
            miss = max(0.0, -slack)
        up[i] = (up[o.dep] if o.dep >= 0 else 0.0) + max(0.0, slack + miss)
        down[i] = (down[o.dep] if o.dep >= 0 else 0.0) + miss
        b.add(
            o.src,
            o.dst,
            o.chunk,
            route=list(o.route),
            deps=[int(new_id[o.dep])] if o.dep >= 0 else [],
            start=float(start[i]),
            step=o.k0,
            part=o.part,
            group=o.group if o.group >= 0 else None,
        )
        for pos, l in enumerate(o.route):
            if o.group >= 0:  # a link a multicast's members share: its first member only
                key = (o.group, tuple(o.route[: pos + 1]))
                if key in carried:
                    continue
                carried.add(key)
            per_link.setdefault(l, []).append(new)
    for l in sorted(per_link):
        b.set_link_order(l, per_link[l])
    makespan = float(finish.max()) if m else 0.0
    facts = {
        "plan_s": float(makespan),
        "rounding_up_s": float(up.max()) if len(ops) else 0.0,
        "rounding_down_s": float(down.max()) if len(ops) else 0.0,
    }
    return b.build(), facts


def greedy_epochs(
    topology: Topology,
    grid: EpochGrid,
    schedule: Schedule,
    keep: list[int] | None = None,
    images: Callable[[list[int]], list[list[int]]] | None = None,
) -> tuple[list[EpochOp], int]:
    """Place a heuristic schedule's operations (whole chunks) into epochs: each as early as its
    input and the per-link window capacities allow. Two list orders are tried — the schedule's
    own and by tree depth (every chunk's first hop before any second hop) — and the one that
    finishes first is kept. The result is a feasible solution of the MILP (the warm start and
    the horizon K). ``keep``: only these operations (their dependencies among them);
    ``images``: each placed together with these routes (:func:`.symmetry.greedy_epochs`)."""
    n = schedule.num_ops
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        deps = schedule.deps(i)
        if len(deps):
            depth[i] = depth[deps].max() + 1
    mine = np.arange(n) if keep is None else np.asarray(keep, dtype=np.int64)
    best: tuple[list[EpochOp], int] | None = None
    for order in (mine, mine[np.lexsort((mine, depth[mine]))]):
        ops, k = _greedy(topology, grid, schedule, order, images)
        if best is None or k < best[1]:
            best = (ops, k)
    assert best is not None  # two orders were tried
    return best


class _LinkUsage:
    """Chunks started per link and epoch, with TE-CCL's sliding-window capacity check."""

    def __init__(self, grid: EpochGrid, num_links: int):
        self.window = grid.window
        self.per_window = grid.per_window
        self.epochs = 256
        self.usage = np.zeros((num_links, self.epochs), dtype=np.int64)

    def _grow_to(self, need: int) -> None:
        if need >= self.epochs:
            grow = max(self.epochs * 2, need + 1)
            self.usage = np.pad(self.usage, ((0, 0), (0, grow - self.epochs)))
            self.epochs = grow

    def _busiest_window(self, l: int, kk: int) -> int:
        """The most chunks started on ``l`` in one window of epochs containing ``kk``."""
        w = int(self.window[l])
        if w == 1:
            return int(self.usage[l, kk])
        lo0 = max(0, kk - w + 1)
        c = np.concatenate(([0], np.cumsum(self.usage[l, lo0 : kk + w])))
        return int(max(c[j - lo0 + 1] - c[max(lo0, j - w + 1) - lo0] for j in range(kk, kk + w)))

    def fits(self, route, k: int, offsets) -> bool:
        self._grow_to(k + max(offsets) + int(self.window[list(route)].max()) + 2)
        # every window containing each hop's epoch keeps room for one more chunk
        return all(
            self._busiest_window(l, k + off) + 1 <= self.per_window[l]
            for l, off in zip(route, offsets)
        )

    def add(self, route, k: int, offsets) -> None:
        for l, off in zip(route, offsets):
            self.usage[l, k + off] += 1

    def place_all(self, routes, k: int, offsets) -> bool:
        """Book every route at epoch ``k`` if they all fit together (routes may share a
        link), else book nothing."""
        self._grow_to(k + max(offsets) + int(self.window.max()) + 2)
        for route in routes:
            self.add(route, k, offsets)
        if all(
            self._busiest_window(l, k + off) <= self.per_window[l]
            for route in routes
            for l, off in zip(route, offsets)
        ):
            return True
        for route in routes:
            for l, off in zip(route, offsets):
                self.usage[l, k + off] -= 1
        return False


def _greedy(
    topology: Topology,
    grid: EpochGrid,
    schedule: Schedule,
    order: np.ndarray,
    images: Callable[[list[int]], list[list[int]]] | None = None,
) -> tuple[list[EpochOp], int]:
    """Place the operations of ``order`` (their dependencies among them) each at its earliest
    epoch; with ``images``, each together with the routes ``images(route)`` (symmetric
    placement: :func:`.symmetry.greedy_epochs`)."""
    t = topology
    d = grid.delay
    use = _LinkUsage(grid, len(t.links))
    arrive = np.zeros(schedule.num_ops, dtype=np.int64)
    ops: list[EpochOp] = []
    pos = np.zeros(schedule.num_ops, dtype=np.int64)
    for i in order.tolist():
        pos[i] = len(ops)
        route = [int(x) for x in schedule.route(i)]
        deps = schedule.deps(i)
        ready = int(arrive[deps].max()) if len(deps) else 0
        offs = np.concatenate(([0], np.cumsum(d[route])[:-1])).astype(np.int64).tolist()
        k = ready
        routes = [route] if images is None else images(route)
        while not use.place_all(routes, k, offs):
            k += 1
        arr = k + offs[-1] + int(d[route[-1]])
        arrive[i] = arr
        dep = int(pos[deps[0]]) if len(deps) else -1
        ops.append(
            EpochOp(
                int(schedule.chunk[i]),
                int(schedule.src[i]),
                int(schedule.dst[i]),
                tuple(route),
                k,
                arr,
                dep,
            )
        )
    return ops, int(arrive[order].max()) if len(order) else 0


def flood_epochs(
    topology: Topology, grid: EpochGrid, collective: Collective, max_epochs: int
) -> tuple[list[EpochOp], int] | None:
    """Rarest-first flooding in the epoch model, for collectives where every rank needs every
    chunk it does not hold (AllGather, Broadcast): epoch by epoch, every GPU-to-GPU direct
    route (through switches only) with room on all its links sends the chunk its sender holds
    that fewest ranks hold or expect, if the receiver neither holds nor expects it. Gives up
    (None) past ``max_epochs``."""
    from ...topology.paths import RouteTable

    t = topology
    n = t.num_ranks
    d = grid.delay
    srcs = collective.chunk_source
    Q = collective.num_chunks
    hops = []
    rt = RouteTable(t)
    for u in range(n):
        for v, direct in sorted(rt.direct(u).items()):
            route = [int(x) for x in direct]
            offs = np.concatenate(([0], np.cumsum(d[route])[:-1])).astype(np.int64).tolist()
            hops.append((u, int(v), route, offs, offs[-1] + int(d[route[-1]])))
    if not hops:
        return None
    inf = np.iinfo(np.int64).max
    held = np.full((Q, n), inf, dtype=np.int64)  # epoch from which rank holds chunk
    held[np.arange(Q), srcs] = 0
    held_op = np.full((Q, n), -1, dtype=np.int64)
    count = np.ones(Q, dtype=np.int64)  # ranks holding or expecting
    use = _LinkUsage(grid, len(t.links))
    ops: list[EpochOp] = []
    remaining = Q * n - Q
    k = 0
    while remaining > 0:
        if k > max_epochs:
            return None
        start = k % len(hops)
        for h in hops[start:] + hops[:start]:
            u, v, route, offs, delay = h
            while remaining > 0:
                cand = np.flatnonzero((held[:, u] <= k) & (held[:, v] == inf))
                if not len(cand) or not use.fits(route, k, offs):
                    break
                q = int(cand[np.argmin(count[cand])])
                use.add(route, k, offs)
                held[q, v] = k + delay
                held_op[q, v] = len(ops)
                count[q] += 1
                remaining -= 1
                ops.append(EpochOp(q, u, v, tuple(route), k, k + delay, int(held_op[q, u])))
        k += 1
    return ops, max(o.arrive for o in ops)


def compact_epochs(
    topology: Topology, grid: EpochGrid, ops: list[EpochOp]
) -> tuple[list[EpochOp], int]:
    """Move every transfer of a MILP solution to the earliest epoch its input and the window
    capacities allow, in the solution's epoch order (same routes, same dependencies). A
    time-limited solution can leave idle epochs that this removes; the caller keeps the
    result only if it does not finish later."""
    d = grid.delay
    use = _LinkUsage(grid, len(topology.links))
    order = sorted(range(len(ops)), key=lambda i: (ops[i].k0, i))
    arrive = np.zeros(len(ops), dtype=np.int64)
    out: list[EpochOp | None] = [None] * len(ops)
    members: dict[int, list[int]] = {}
    for i, o in enumerate(ops):
        if o.group >= 0:
            members.setdefault(o.group, []).append(i)
    for i in order:
        if out[i] is not None:
            continue  # moved with its multicast group
        o = ops[i]
        unit = members.get(o.group, [i]) if o.group >= 0 else [i]
        # a multicast moves as one: its links (a shared one once) in one window
        hops: dict[tuple[int, int], None] = {}
        for j in unit:
            route = list(ops[j].route)
            offs = np.concatenate(([0], np.cumsum(d[route])[:-1])).astype(np.int64).tolist()
            hops.update(dict.fromkeys(zip(route, offs)))
        links, offsets = [h[0] for h in hops], [h[1] for h in hops]
        k = int(arrive[o.dep]) if o.dep >= 0 else 0
        while not use.place_all([links], k, offsets):
            k += 1
        for j in unit:
            oj = ops[j]
            route = list(oj.route)
            arrive[j] = k + int(d[route].sum())
            out[j] = EpochOp(oj.chunk, oj.src, oj.dst, oj.route, k, int(arrive[j]), oj.dep,
                             oj.part, oj.group)  # fmt: skip
    placed = [o for o in out if o is not None]
    assert len(placed) == len(ops)  # ``order`` visits every op once
    return placed, int(arrive.max()) if len(ops) else 0
