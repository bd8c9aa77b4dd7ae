"""The rules of timed schedules (those with start times): start times valid, durations no
shorter than the transfers, ``causality`` (an operation starts no earlier than its
dependencies finish) and ``capacity`` (at no instant do the operations planned on a link need
more than its bandwidth: fluid model, an operation moves its bytes at a constant rate over its
planned duration; with cut-through, hop ``i`` of a route starts after the alphas of hops
``0..i-1``)."""

from __future__ import annotations

import math

import numpy as np

from ..schedule.dag import owners
from ..schedule.ir import OpKind
from .context import Context, fail

#: Relative tolerance for time and capacity comparisons.
TIME_TOL = 1e-9
CAP_TOL = 1e-6


def check_timing(ctx: Context) -> float | None:
    """Timed schedules: start times valid, durations no shorter than the transfers, every
    operation starting after its dependencies finish, no link over capacity. The planned
    finish (None when no operation has a start time)."""
    s, t, n = ctx.schedule, ctx.topology, ctx.num_ops
    start = s.start
    assert start is not None  # verify() checks timing only for schedules with start times
    if not _check_start_times(ctx, start):
        return None
    assert s.size is not None  # _check_start_times refuses a timed schedule without one
    owner = owners(s.route_ptr)
    links = s.route_links
    bw = t.link_bw[links]
    if s.has_groups:
        _check_group_starts(ctx, start)
    alpha = t.link_alpha[links]
    nbytes = s.op_bytes(s.size)
    bottleneck = _per_route(np.minimum, bw, s.route_ptr, np.inf)
    dur = _planned_durations(ctx, nbytes / bottleneck)  # joins: 0
    # alpha before each hop (cut-through: hop i starts after the alphas of hops < i)
    cum_alpha = np.cumsum(alpha)
    route_start_cum = np.concatenate(([0.0], cum_alpha))[s.route_ptr[:-1]]
    before = cum_alpha - alpha - route_start_cum[owner]
    total_alpha = _per_route(np.add, alpha, s.route_ptr, 0.0)
    finish = start + total_alpha + dur
    scale = max(1e-12, float(finish.max()) if n else 0.0)
    _check_causality(ctx, start, finish, scale)
    c = s.carried_hops()  # a group's shared link carries its data once
    _check_capacity(
        ctx, (start[owner] + before)[c], dur[owner][c], nbytes[owner][c], owner[c], scale, c
    )
    ctx.checks.extend(["causality", "capacity"])
    return float(finish.max()) if n else 0.0


def _check_group_starts(ctx: Context, start: np.ndarray) -> None:
    """Timed multicasts: one stream leaves the sender, so every member starts together."""
    s = ctx.schedule
    g = s.group
    assert g is not None
    first: dict[int, int] = {}
    for o in np.flatnonzero((g >= 0) & (s.kind == OpKind.COPY)).tolist():
        f = first.setdefault(int(g[o]), o)
        if start[o] != start[f]:
            fail(
                "causality",
                f"{s.describe_op(o)} starts at {start[o]:.9g}s, op {f} of its multicast "
                f"group {int(g[o])} at {start[f]:.9g}s (one stream leaves the sender)",
                o,
            )


def _check_start_times(ctx: Context, start: np.ndarray) -> bool:
    """Every operation has a start time, or none has (then False: the schedule is not
    timed); a timed schedule has a positive data size and non-negative finite starts."""
    s, n = ctx.schedule, ctx.num_ops
    missing = np.flatnonzero(np.isnan(start))
    if len(missing) and len(missing) < n:
        op = int(missing[0])
        fail("structure", f"{s.describe_op(op)} has no start time while other operations do", op)
    if len(missing) == n:
        return False
    if s.size is None or not math.isfinite(s.size) or s.size <= 0:
        fail("structure", "timed schedule has no positive data size")
    if not np.all(np.isfinite(start)) or np.any(start < 0):
        op = int(np.flatnonzero(~np.isfinite(start) | (start < 0))[0])
        fail(
            "structure",
            f"{s.describe_op(op)}: start time {float(start[op])!r} is not a non-negative number",
            op,
        )
    return True


def _planned_durations(ctx: Context, natural: np.ndarray) -> np.ndarray:
    """Each operation's planned duration: the schedule's (where given), which must not be
    shorter than its transfer time ``natural`` at the route's bottleneck bandwidth."""
    s = ctx.schedule
    if s.duration is None:
        return natural
    dur = np.where(np.isnan(s.duration), natural, s.duration)
    bad = np.flatnonzero(~np.isfinite(dur) | (dur < natural * (1 - CAP_TOL)))
    if len(bad):
        op = int(bad[0])
        fail(
            "capacity",
            f"{s.describe_op(op)}: planned duration {dur[op]:.6g}s is "
            f"shorter than its transfer time {natural[op]:.6g}s",
            op,
        )
    return dur


def _check_causality(ctx: Context, start: np.ndarray, finish: np.ndarray, scale: float) -> None:
    """No operation starts before an operation it depends on finishes (within tolerance
    relative to ``scale``, the planned finish)."""
    s = ctx.schedule
    if not len(s.dep_ids):
        return
    dep_owner = owners(s.dep_ptr)
    late = finish[s.dep_ids] - start[dep_owner]
    bad = np.flatnonzero(late > TIME_TOL * scale + 1e-15)
    if len(bad):
        e = int(bad[0])
        op, dep = int(dep_owner[e]), int(s.dep_ids[e])
        fail(
            "causality",
            f"{s.describe_op(op)} starts at {start[op]:.9g}s before op "
            f"{dep} it depends on finishes at {finish[dep]:.9g}s",
            op,
        )


def _check_capacity(
    ctx: Context,
    t0: np.ndarray,
    dur: np.ndarray,
    nbytes: np.ndarray,
    owner: np.ndarray,
    scale: float,
    carried: np.ndarray,
) -> None:
    """Sweep the fluid rates on every link: per hop that carries its data (``carried``),
    its start ``t0``, its operation's duration and bytes, and the operation ``owner``; at
    no instant may the hops on a link need more than its bandwidth (time tolerance
    relative to ``scale``)."""
    s, t = ctx.schedule, ctx.topology
    links = s.route_links[carried]
    t1 = t0 + dur
    rate = np.where(dur > 0, nbytes / np.where(dur > 0, dur, 1), 0.0)
    m = len(links)
    ev_link = np.concatenate((links, links))
    ev_time = np.concatenate((t0, t1))
    ev_kind = np.concatenate((np.ones(m, dtype=np.int8), np.zeros(m, dtype=np.int8)))
    ev_rate = np.concatenate((rate, -rate))
    ev_hop = np.concatenate((np.arange(m), np.arange(m)))
    # ends (kind 0) before starts (kind 1) at equal times; tolerance by rounding time
    tq = np.round(ev_time / (TIME_TOL * scale + 1e-18))
    order = np.lexsort((ev_kind, tq, ev_link))
    r = ev_rate[order]
    lk = ev_link[order]
    csum = np.cumsum(r)
    # per-link running sum: subtract the cumulative sum at each link's first event
    first_of_link = np.ones(len(order), dtype=bool)
    first_of_link[1:] = lk[1:] != lk[:-1]
    base = np.maximum.accumulate(np.where(first_of_link, np.arange(len(order)), 0))
    offsets = (csum - r)[base]
    running = csum - offsets
    cap = t.link_bw[lk]
    over = np.flatnonzero(running > cap * (1 + CAP_TOL))
    if len(over):
        i = int(over[0])
        hop = int(ev_hop[order[i]])
        op = int(owner[hop])
        lid = int(lk[i])
        fail(
            "capacity",
            f"{s.describe_op(op)}: {t.link_label(lid)} would carry "
            f"{running[i]:.6g} B/s at t={ev_time[order[i]]:.9g}s, above its "
            f"{cap[i]:.6g} B/s",
            op,
        )


def _per_route(ufunc: np.ufunc, values: np.ndarray, ptr: np.ndarray, empty: float) -> np.ndarray:
    """``ufunc`` reduced over each route's entries of ``values`` (one per route link);
    ``empty`` for a route without links (a join)."""
    lengths = np.diff(ptr)
    out = np.full(len(lengths), empty, dtype=np.float64)
    has = lengths > 0
    if has.any():
        out[has] = ufunc.reduceat(values, ptr[:-1][has])
    return out
