"""Timelines in the Trace Event Format, the JSON that Perfetto (ui.perfetto.dev) and
chrome://tracing open, as PyTorch's profiler and ASTRA-sim write it.

:func:`simulated_trace` turns a simulation (:class:`~collsynth.sim.result.SimResult`) into
events, :func:`measured_trace` a run's per-operation times (``collsynth run --trace``, the
executor's record, :func:`collsynth.runtime.driver.op_times`); both lay out the same tracks,
so a simulated and a measured timeline of one schedule read side by side:

* one process per rank (``rank R``): a ``send`` slice per operation it sends and a ``recv``
  slice per operation it receives, with a flow arrow from each send to its receive;
* one process per busy link (``link A->B``): a slice per transfer on it (simulated: each hop's
  transmission; measured: the operation's time in flight, from the send's posting to the
  arrival, on every link of its route, since a run cannot see inside the network).

Slices that overlap in time go to separate threads (``lane 0``, ``lane 1``, ...) of their
process, so that every thread's slices nest as the format requires. Every slice's ``args``
names the operation, its chunk, its bytes and its endpoints. Timestamps are microseconds (the
format's unit) of the topology's time: a testbed run's raw times are multiplied by its scale
first. ``otherData`` says where the times come from (the link model of a simulation, or the
run that measured them).

Format: "Trace Event Format" (Google, the catapult project's specification document); the
events used are complete events (``ph: X``), flow events (``s``/``f``) and metadata (``M``).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from ..schedule.ir import OpKind, Schedule

#: pids of link processes start here (rank r is pid r)
LINK_PID = 1_000_000


def _lanes(intervals: list[tuple[float, float, int]]) -> list[int]:
    """A lane per interval (start, end, key) such that intervals of one lane do not overlap:
    greedy in start order, the lowest free lane first."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], intervals[i][2]))
    lane = [0] * len(intervals)
    free: list[int] = []  # lanes whose last interval has ended
    busy: list[tuple[float, int]] = []  # (end, lane)
    used = 0
    for i in order:
        s, e, _ = intervals[i]
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            k = heapq.heappop(free)
        else:
            k, used = used, used + 1
        lane[i] = k
        heapq.heappush(busy, (e, k))
    return lane


class _Builder:
    """Collects slices per process, lays them into lanes and writes the events."""

    def __init__(self) -> None:
        self.slices: dict[int, list[tuple[float, float, str, str, dict, int]]] = {}
        self.names: dict[int, str] = {}
        self.flows: list[tuple[int, int, int]] = []  # (send slice id, recv slice id, flow id)
        self.count = 0

    def slice(self, pid: int, name: str, cat: str, start: float, end: float, args: dict) -> int:
        sid = self.count
        self.count += 1
        self.slices.setdefault(pid, []).append((start, max(end, start), name, cat, args, sid))
        return sid

    def events(self, other: dict) -> dict:
        ev: list[dict] = []
        where: dict[int, tuple[int, int, float, float]] = {}  # slice id -> pid, tid, ts, end
        for pid in sorted(self.slices):
            items = self.slices[pid]
            lanes = _lanes([(s, e, sid) for s, e, _, _, _, sid in items])
            ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": self.names[pid]}})  # fmt: skip
            ev.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})  # fmt: skip
            for k in range(max(lanes) + 1 if lanes else 0):
                ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": k,
                           "args": {"name": f"lane {k}"}})  # fmt: skip
            for (s, e, name, cat, args, sid), k in zip(items, lanes):
                ts, dur = s * 1e6, (e - s) * 1e6
                ev.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": k,
                           "ts": ts, "dur": dur, "args": args})  # fmt: skip
                where[sid] = (pid, k, ts, ts + dur)
        for a, b, fid in self.flows:
            pa, ta, sa, _ = where[a]
            pb, tb, sb, eb = where[b]
            ev.append({"ph": "s", "name": "transfer", "cat": "flow", "id": fid, "pid": pa,
                       "tid": ta, "ts": sa})  # fmt: skip
            # bound to the receive slice that encloses it: its last instant
            ev.append({"ph": "f", "bp": "e", "name": "transfer", "cat": "flow", "id": fid,
                       "pid": pb, "tid": tb, "ts": max(sa, eb)})  # fmt: skip
        return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": other}


def _names(b: _Builder, sched: Schedule, links: set[int]) -> None:
    t = sched.topology
    for r in range(sched.collective.num_ranks):
        b.names[r] = f"rank {r} ({t.nodes[int(t.compute_nodes[r])].name})"
    for lk in links:
        a, z = t.nodes[int(t.link_src[lk])].name, t.nodes[int(t.link_dst[lk])].name
        b.names[LINK_PID + lk] = f"link {lk}: {a}->{z}"


def _op_args(sched: Schedule, op: int, nbytes: float) -> dict:
    return {"op": op, "chunk": int(sched.chunk[op]), "src": int(sched.src[op]),
            "dst": int(sched.dst[op]), "bytes": nbytes,
            "kind": OpKind(int(sched.kind[op])).name.lower()}  # fmt: skip


def simulated_trace(result: Any) -> dict:
    """The events of a simulation (a :class:`~collsynth.sim.result.SimResult`): each operation's
    send slice (its start to the end of its first hop), its receive slice (the start of its
    last hop to its arrival), and each hop's transmission on its link."""
    sched: Schedule = result.schedule
    b = _Builder()
    hop_op = np.asarray(result.hop_op, dtype=np.int64)
    hop_link = np.asarray(result.hop_link, dtype=np.int64)
    hs = np.asarray(result.hop_start_s, dtype=np.float64)
    he = np.asarray(result.hop_end_s, dtype=np.float64)
    real = hop_link >= 0
    if real.any():
        real &= hop_link < len(sched.topology.link_src)
    _names(b, sched, set(hop_link[real].tolist()))
    nbytes = sched.op_bytes(result.size)
    first_end: dict[int, float] = {}
    last_start: dict[int, float] = {}
    for h in np.flatnonzero(real).tolist():
        op = int(hop_op[h])
        first_end[op] = min(first_end.get(op, math.inf), float(he[h]))
        last_start[op] = max(last_start.get(op, -math.inf), float(hs[h]))
    for op in range(sched.num_ops):
        if op not in first_end:
            continue
        args = _op_args(sched, op, float(nbytes[op]))
        start, finish = float(result.op_start_s[op]), float(result.op_finish_s[op])
        a = b.slice(int(sched.src[op]), f"send c{args['chunk']} to r{args['dst']}", "send",
                    start, first_end[op], args)  # fmt: skip
        z = b.slice(int(sched.dst[op]), f"recv c{args['chunk']} from r{args['src']}", "recv",
                    min(last_start[op], finish), finish, args)  # fmt: skip
        b.flows.append((a, z, op))
    for h in np.flatnonzero(real).tolist():
        op = int(hop_op[h])
        b.slice(LINK_PID + int(hop_link[h]), f"c{int(sched.chunk[op])} r{int(sched.src[op])}"
                f"->r{int(sched.dst[op])}", "link", float(hs[h]), float(he[h]),
                _op_args(sched, op, float(nbytes[op])))  # fmt: skip
    other = {"source": "simulated", "model": result.order_policy, "size_bytes": result.size,
             "time_s": result.time_s, "schedule": sched.meta.get("algorithm"),
             "topology": sched.topology.name, "time_unit": "microseconds of the topology's "
             "time"}  # fmt: skip
    return b.events(other)


def measured_trace(
    sched: Schedule, times: dict, scale: float = 1.0, about: dict | None = None
) -> dict:
    """The events of one measured iteration: ``times`` as :func:`~collsynth.runtime.driver.
    op_times` gives them for ``sched`` (expanded as the executor ran it), raw seconds
    multiplied by ``scale`` (a testbed's: its links ran ``scale`` times the topology's
    bandwidth). A send slice lasts from its posting until the engine took it, a receive slice
    from when the transfer could have begun (the later of the send's and the receive's
    posting) until the data arrived; the route's links show the operation in flight over
    the same span."""
    routes = sched.route_links
    ptr = np.asarray(sched.route_ptr, dtype=np.int64)
    b = _Builder()
    busy: set[int] = set()
    ops = []
    for op in range(sched.num_ops):
        sp, se = times["send_post_s"][op], times["send_end_s"][op]
        rp, ar = times["recv_post_s"][op], times["arrival_s"][op]
        if any(x is None or math.isnan(x) for x in (sp, se, rp, ar)):
            continue
        ops.append((op, sp * scale, se * scale, max(sp, rp) * scale, ar * scale))
        busy.update(int(x) for x in routes[ptr[op] : ptr[op + 1]])
    _names(b, sched, busy)
    for op, sp, se, begin, ar in ops:
        args = _op_args(sched, op, float(times["bytes"][op]))
        a = b.slice(int(sched.src[op]), f"send c{args['chunk']} to r{args['dst']}", "send",
                    sp, se, args)  # fmt: skip
        z = b.slice(int(sched.dst[op]), f"recv c{args['chunk']} from r{args['src']}", "recv",
                    begin, ar, args)  # fmt: skip
        b.flows.append((a, z, op))
        for lk in routes[ptr[op] : ptr[op + 1]].tolist():
            flight = {**args, "measured": "in flight: posted to arrived"}
            b.slice(LINK_PID + int(lk), f"c{args['chunk']} r{args['src']}->r{args['dst']}",
                    "link", sp, ar, flight)  # fmt: skip
    other = {"source": "measured", "scale": scale, "time_s": times["time_s"] * scale,
             "schedule": sched.meta.get("algorithm"), "topology": sched.topology.name,
             "time_unit": "microseconds of the topology's time (raw times x scale)",
             **(about or {})}  # fmt: skip
    return b.events(other)


def merge_traces(parts: list[tuple[str, dict]]) -> dict:
    """One trace of several (a label and a trace each): the second's processes get pids
    ``2 * LINK_PID`` higher than the first's, and so on, and every process name starts with
    its trace's label. One trace alone is returned as it is."""
    if len(parts) == 1:
        return parts[0][1]
    ev: list[dict] = []
    for k, (label, tr) in enumerate(parts):
        for e in tr["traceEvents"]:
            e = dict(e, pid=e["pid"] + 2 * LINK_PID * k)
            if e["ph"] == "M" and e["name"] == "process_name":
                e["args"] = {"name": f"{label}: {e['args']['name']}"}
            elif e["ph"] == "M" and e["name"] == "process_sort_index":
                e["args"] = {"sort_index": e["pid"]}
            elif e["ph"] in ("s", "f"):
                e["id"] = e["id"] + k * (1 << 32)
            ev.append(e)
    return {
        "traceEvents": ev,
        "displayTimeUnit": "ns",
        "otherData": {"parts": [dict(tr["otherData"], label=label) for label, tr in parts]},
    }
