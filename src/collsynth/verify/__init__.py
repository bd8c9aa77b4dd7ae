"""The independent schedule verifier: symbolic execution of a schedule on its topology.

It knows nothing of how a schedule was made. It checks, in this order, and reports the first
violation in one line naming the operation (``VerificationError.check`` names the rule):

``structure``      fields in range: ranks, chunks, kinds, byte ranges, dependency ids;
                   reduce operations only in reducing collectives.
``route``          every route is a real path of links from the sender's node to the receiver's
                   node whose intermediate nodes are switches/routers, visiting no node twice.
``dependency-cycle`` the dependencies form no cycle.
``link-order``     a planned per-link order lists exactly the operations that use the link and,
                   together with the dependencies, cannot deadlock.
``step-order``     an operation's step is later than the steps of the operations it depends on.
``causality``      (timed schedules) an operation starts no earlier than its dependencies finish.
``capacity``       (timed schedules) at no instant do the operations planned on a link need more
                   than its bandwidth (fluid model: an operation moves its bytes at a constant
                   rate over its planned duration; with cut-through, hop ``i`` of a route starts
                   after the alphas of hops ``0..i-1``).
``data-not-held``  every operation sends data its sender holds: initially, or delivered by an
                   operation it (transitively) depends on.
``race``           (reductions) reads and writes of one buffer are ordered by dependencies;
                   overwriting copies are ordered with every other write (concurrent reduces
                   into one buffer are allowed: the combine is associative and commutative).
``duplicate-contribution`` a reduction never combines the same rank's contribution twice.
``missing-delivery`` / ``incomplete-reduction`` at the end, every rank holds exactly what the
                   collective requires (for reductions: every contribution, once). When chunks
                   times ranks exceeds ``MANY_CHUNKS``, a chunk that no operation moves is
                   reported before ``data-not-held``, without building per-chunk state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from ..arrays import unique
from ..collective import Collective, CollKind
from ..errors import CollsynthError, VerificationError
from ..schedule.dag import is_acyclic
from ..schedule.ir import OpKind, Schedule, spread_ranges
from .kernel import PASS, ancestor, compiled_run_window

#: Relative tolerance for time and capacity comparisons.
TIME_TOL = 1e-9
CAP_TOL = 1e-6
#: Above this many (chunk, rank) pairs, chunks that no operation moves are looked for first.
MANY_CHUNKS = 1 << 20


@dataclass
class VerifyReport:
    ok: bool
    ops: int
    link_hops: int
    checks: list[str] = field(default_factory=list)
    redundant_deliveries: int = 0
    planned_finish_s: float | None = None
    error: str | None = None
    error_check: str | None = None
    error_op: int | None = None

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "ops": self.ops,
            "link_hops": self.link_hops,
            "checks": self.checks,
            "redundant_deliveries": self.redundant_deliveries,
            "planned_finish_s": self.planned_finish_s,
            "error": self.error,
            "error_check": self.error_check,
            "error_op": self.error_op,
        }


def _fail(check: str, message: str, op: int | None = None) -> NoReturn:
    raise VerificationError(f"{check}: {message}", check=check, op=op)


def check_schedule(schedule: Schedule) -> VerifyReport:
    """Like :func:`verify` but returns a failed report instead of raising."""
    try:
        return verify(schedule)
    except VerificationError as e:
        return VerifyReport(
            False,
            schedule.num_ops,
            int(len(schedule.route_links)),
            error=str(e),
            error_check=e.check,
            error_op=e.op,
        )


def verify(schedule: Schedule) -> VerifyReport:
    """Verify ``schedule``; raise :class:`VerificationError` at the first violation."""
    v = _Verifier(schedule)
    return v.run()


#: reducing schedules with at least this many operations run each window through the
#: compiled executor (``verify.kernel``) first, and the Python one only on a failure
COMPILED_REDUCE_MIN_OPS = 20_000

#: visit marks are 32-bit: they are cleared and numbered again from here
STAMP_WRAP = 2**31 - 2

#: routes are checked this many operations at a time (the per-hop arrays of one block)
ROUTE_BLOCK_OPS = 1 << 22

#: the most (rank, segment) buffers a reducing schedule's execution holds at once (a window of
#: segments at a time beyond it; a buffer holds a bit mask of up to one bit per rank)
REDUCE_WINDOW_BUFFERS = 1 << 18


class _Verifier:
    def __init__(self, s: Schedule):
        self.s = s
        self.t = s.topology
        self.c: Collective = s.collective
        self.n_ops = s.num_ops
        self.checks: list[str] = []
        self._anc: _Ancestry | None = None

    # ------------------------------------------------------------------ driver
    def run(self) -> VerifyReport:
        s = self.s
        self.check_structure()
        self.check_routes()
        if s.group is not None:
            check_groups(s)
            self.checks.append("group")
        self.order = self.topological_order()
        self.pos = np.empty(self.n_ops, dtype=np.int64)
        self.pos[self.order] = np.arange(self.n_ops)
        if s.link_order:
            self.check_link_order()
        if s.step is not None:
            self.check_steps()
        finish = None
        if s.start is not None:
            finish = self.check_timing()
        self.check_chunks_moved()
        self.build_segments()
        if self.c.reduces:
            redundant = self.execute_reducing()
        else:
            redundant = self.execute_copying()
        return VerifyReport(
            True, self.n_ops, int(len(s.route_links)), self.checks, redundant, finish
        )

    # ------------------------------------------------------------------ structure
    def check_structure(self) -> None:
        s, t, c, n = self.s, self.t, self.c, self.n_ops
        if c.num_ranks != t.num_ranks:
            _fail(
                "structure",
                f"collective has {c.num_ranks} ranks but topology "
                f"{t.name!r} has {t.num_ranks} compute nodes",
            )
        for name in ("dst", "chunk", "kind"):
            if len(getattr(s, name)) != n:
                _fail(
                    "structure",
                    f"operation column {name!r} has {len(getattr(s, name))} "
                    f"entries for {n} operations",
                )
        if len(s.route_ptr) != n + 1 or len(s.dep_ptr) != n + 1:
            _fail("structure", "route/dependency index arrays do not match the operation count")
        for name in ("start", "duration", "step", "part_lo", "part_hi", "part_den"):
            col = getattr(s, name)
            if col is not None and len(col) != n:
                _fail(
                    "structure",
                    f"operation column {name!r} has {len(col)} entries for {n} operations",
                )
        nr = t.num_ranks

        def first_bad(mask: np.ndarray) -> int | None:
            idx = np.flatnonzero(mask)
            return int(idx[0]) if len(idx) else None

        bad = first_bad((s.src < 0) | (s.src >= nr))
        if bad is not None:
            _fail("structure", f"op {bad}: source rank {int(s.src[bad])} does not exist", bad)
        bad = first_bad((s.dst < 0) | (s.dst >= nr))
        if bad is not None:
            _fail("structure", f"op {bad}: destination rank {int(s.dst[bad])} does not exist", bad)
        join = s.kind == OpKind.JOIN
        bad = first_bad((s.src == s.dst) & ~join)
        if bad is not None:
            _fail("structure", f"op {bad}: sends from rank {int(s.src[bad])} to itself", bad)
        bad = first_bad((s.src != s.dst) & join)
        if bad is not None:
            _fail(
                "structure",
                f"op {bad}: a join names two ranks ({int(s.src[bad])} and {int(s.dst[bad])}); "
                f"it waits at one rank",
                bad,
            )
        bad = first_bad((s.chunk < 0) | (s.chunk >= c.num_chunks))
        if bad is not None:
            _fail(
                "structure",
                f"op {bad}: chunk {int(s.chunk[bad])} does not exist "
                f"({c.describe()} has {c.num_chunks})",
                bad,
            )
        bad = first_bad((s.kind < OpKind.COPY) | (s.kind > OpKind.JOIN))
        if bad is not None:
            _fail("structure", f"op {bad}: unknown kind {int(s.kind[bad])}", bad)
        if not c.reduces:
            bad = first_bad(s.kind == OpKind.REDUCE)
            if bad is not None:
                _fail(
                    "structure",
                    f"{s.describe_op(bad)}: reduce operation in a "
                    f"non-reducing collective ({c.name})",
                    bad,
                )
        if s.part_den is not None:
            den, lo, hi = s.part_den, s.part_lo, s.part_hi
            if lo is None or hi is None:
                _fail(
                    "structure",
                    "operation column 'part_den' is given without 'part_lo' and 'part_hi'",
                )
            bad = first_bad((den < 1) | (lo < 0) | (hi <= lo) | (hi > den))
            if bad is not None:
                _fail(
                    "structure",
                    f"op {bad}: byte range {int(lo[bad])}/"
                    f"{int(den[bad])}..{int(hi[bad])}/"
                    f"{int(den[bad])} is not inside the chunk",
                    bad,
                )
        if len(s.dep_ids):
            owner = np.repeat(np.arange(n), np.diff(s.dep_ptr))
            bad_edge = first_bad((s.dep_ids < 0) | (s.dep_ids >= n))
            if bad_edge is not None:
                op = int(owner[bad_edge])
                _fail(
                    "structure",
                    f"op {op}: depends on op {int(s.dep_ids[bad_edge])}, which does not exist",
                    op,
                )
            bad_edge = first_bad(s.dep_ids == owner)
            if bad_edge is not None:
                op = int(owner[bad_edge])
                _fail("dependency-cycle", f"op {op} depends on itself", op)
        self.checks.append("structure")

    # ------------------------------------------------------------------ routes
    def check_routes(self) -> None:
        s, t, n = self.s, self.t, self.n_ops
        lengths = np.diff(s.route_ptr)
        join = s.kind == OpKind.JOIN
        empty = np.flatnonzero((lengths == 0) & ~join)
        if len(empty):
            op = int(empty[0])
            _fail("route", f"{s.describe_op(op)} has an empty route", op)
        routed = np.flatnonzero((lengths > 0) & join)
        if len(routed):
            op = int(routed[0])
            _fail("route", f"{s.describe_op(op)} has a route (a join moves no data)", op)
        links = s.route_links
        bad = np.flatnonzero((links < 0) | (links >= len(t.links)))
        if len(bad):
            op = self._hop_owner(int(bad[0]))
            _fail("route", f"{s.describe_op(op)}: link {int(links[bad[0]])} does not exist", op)
        # the per-hop arrays a block of operations at a time (bounded memory at scale)
        for a in range(0, n, ROUTE_BLOCK_OPS):
            self._check_route_block(a, min(n, a + ROUTE_BLOCK_OPS), lengths, join)
        self.checks.append("route")

    def _hop_owner(self, hop: int) -> int:
        """The operation whose route holds entry ``hop`` of ``route_links``."""
        return int(np.searchsorted(self.s.route_ptr, hop, side="right") - 1)

    def _check_route_block(self, a: int, b: int, lengths: np.ndarray, join: np.ndarray) -> None:
        """Operations ``a <= op < b``: routes leave the sender, reach the receiver, chain
        through switches and routers only, and visit no node twice."""
        s, t = self.s, self.t
        h0 = int(s.route_ptr[a])
        links = s.route_links[h0 : int(s.route_ptr[b])]
        lsrc = t.link_src[links]
        ldst = t.link_dst[links]
        moving = a + np.flatnonzero(~join[a:b])  # operations with a route
        first = s.route_ptr[moving] - h0
        last = s.route_ptr[moving + 1] - 1 - h0
        bad = np.flatnonzero(lsrc[first] != t.compute_nodes[s.src[moving]])
        if len(bad):
            op = int(moving[bad[0]])
            _fail(
                "route",
                f"{s.describe_op(op)}: route starts with "
                f"{t.link_label(int(links[first[bad[0]]]))}, not at the sender",
                op,
            )
        bad = np.flatnonzero(ldst[last] != t.compute_nodes[s.dst[moving]])
        if len(bad):
            op = int(moving[bad[0]])
            _fail(
                "route",
                f"{s.describe_op(op)}: route ends with "
                f"{t.link_label(int(links[last[bad[0]]]))}, not at the receiver",
                op,
            )
        if len(links) == len(moving):
            return  # every route one link long
        # consecutive links inside one route must chain, through non-compute nodes
        inner = np.ones(len(links), dtype=bool)
        inner[last] = False  # positions followed by another link of the same route
        pos = np.flatnonzero(inner)
        broken = pos[ldst[pos] != lsrc[pos + 1]]
        if len(broken):
            op = self._hop_owner(h0 + int(broken[0]))
            _fail(
                "route",
                f"{s.describe_op(op)}: {t.link_label(int(links[broken[0]]))} "
                f"is not followed by a link leaving its end node "
                f"({t.link_label(int(links[broken[0] + 1]))})",
                op,
            )
        through = pos[t.kind_codes[ldst[pos]] == 0]
        if len(through):
            op = self._hop_owner(h0 + int(through[0]))
            node = t.nodes[int(ldst[through[0]])].name
            _fail(
                "route",
                f"{s.describe_op(op)}: route passes through compute node "
                f"{node!r} (relays through a GPU must be separate operations)",
                op,
            )
        # no node twice: the intermediate nodes of each route, routes of one length together
        blk = lengths[a:b]
        twice: list[int] = []
        for length in unique(blk[blk >= 3]).tolist():
            ops = a + np.flatnonzero(blk == length)
            at = (s.route_ptr[ops] - h0)[:, None] + np.arange(length - 1)
            mids = np.sort(ldst[at], axis=1)
            again = np.flatnonzero((mids[:, 1:] == mids[:, :-1]).any(axis=1))
            if len(again):
                twice.append(int(ops[again[0]]))
        if twice:
            op = min(twice)
            _fail("route", f"{s.describe_op(op)}: route visits a node twice", op)

    # ------------------------------------------------------------------ dependencies
    def topological_order(self) -> np.ndarray:
        s, n = self.s, self.n_ops
        owner = np.repeat(np.arange(n), np.diff(s.dep_ptr))
        if np.all(s.dep_ids < owner):
            self.checks.append("dependency-cycle")
            return np.arange(n)
        order = _kahn(n, s.dep_ptr, s.dep_ids)
        if order is None:
            op = _find_cycle_member(n, s.dep_ptr, s.dep_ids)
            _fail("dependency-cycle", f"dependency cycle through {s.describe_op(op)}", op)
        self.checks.append("dependency-cycle")
        return order

    def is_ancestor(self, a: int, x: int) -> bool:
        """True if operation ``a`` must complete before ``x`` starts (transitively)."""
        if self._anc is None:
            self._anc = _Ancestry(self.s, self.order, self.pos)
        return self._anc.query(a, x)

    # ------------------------------------------------------------------ link order
    def check_link_order(self) -> None:
        """Every planned link order lists exactly the operations that carry data over its
        link, each once, and the orders with the dependencies stay acyclic (no deadlock).
        Vectorized over all links; the first faulty link is then named link by link."""
        s, n = self.s, self.n_ops
        link_order = s.link_order
        assert link_order is not None  # run() checks a link order only when there is one
        lids = np.array([int(k) for k in link_order], dtype=np.int64)
        seqs = [np.asarray(v, dtype=np.int64).ravel() for v in link_order.values()]
        lengths = np.array([len(q) for q in seqs], dtype=np.int64)
        o_link = np.repeat(lids, lengths)
        o_ops = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
        owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(s.route_ptr))
        carried = s.carried_hops()
        sel = np.isin(s.route_links, lids) & carried
        nl = np.int64(max(len(self.t.links), 1))
        used = unique(owner[sel] * nl + s.route_links[sel].astype(np.int64))
        ok = bool((lids >= 0).all() and (lids < len(self.t.links)).all())
        ok = ok and bool(((o_ops >= 0) & (o_ops < n)).all())
        if ok:
            keys = o_ops * nl + o_link
            uk = unique(keys)
            ok = len(uk) == len(keys) and len(uk) == len(used) and bool(np.array_equal(uk, used))
        if not ok:
            self._name_link_order_fault(owner, carried)
        # deadlock: dependencies plus "served after" edges must stay acyclic
        ends = np.cumsum(lengths)
        nxt = np.ones(len(o_ops), dtype=bool)
        nxt[ends[lengths > 0] - 1] = False  # the last of each link has no successor there
        a = np.concatenate([s.dep_ids.astype(np.int64), o_ops[:-1][nxt[:-1]]])
        b = np.concatenate(
            [np.repeat(np.arange(n, dtype=np.int64), np.diff(s.dep_ptr)), o_ops[1:][nxt[:-1]]]
        )
        if not is_acyclic(n, a, b):
            by = np.argsort(b, kind="stable")
            ptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(b, minlength=n), out=ptr[1:])
            op = _find_cycle_member(n, ptr, a[by])
            _fail(
                "link-order",
                f"planned link order conflicts with the dependencies "
                f"(deadlock) at {s.describe_op(op)}",
                op,
            )
        self.checks.append("link-order")

    def _name_link_order_fault(self, owner: np.ndarray, carried: np.ndarray) -> None:
        """The first link order (in the schedule's order) that is not exactly its link's
        users, named in words."""
        s, t, n = self.s, self.t, self.n_ops
        assert s.link_order is not None
        for lid, planned in s.link_order.items():
            lid = int(lid)
            if not 0 <= lid < len(t.links):
                _fail("link-order", f"planned order for link {lid}, which does not exist")
            users = set(owner[(s.route_links == lid) & carried].tolist())
            seq = [int(o) for o in planned]
            for o in seq:
                if not 0 <= o < n:
                    _fail(
                        "link-order",
                        f"planned order of {t.link_label(lid)} names op {o}, which does not exist",
                    )
                if o not in users:
                    _fail(
                        "link-order",
                        f"planned order of {t.link_label(lid)} lists "
                        f"{s.describe_op(o)}, which does not use that link",
                        o,
                    )
            if len(set(seq)) != len(seq):
                dup = next(o for k, o in enumerate(seq) if o in seq[:k])
                _fail(
                    "link-order",
                    f"planned order of {t.link_label(lid)} lists {s.describe_op(dup)} twice",
                    dup,
                )
            missing = users - set(seq)
            if missing:
                o = min(missing)
                _fail(
                    "link-order",
                    f"planned order of {t.link_label(lid)} omits "
                    f"{s.describe_op(o)}, which uses that link",
                    o,
                )

    # ------------------------------------------------------------------ steps
    def check_steps(self) -> None:
        s, n = self.s, self.n_ops
        step = s.step
        assert step is not None  # run() checks steps only when there are some
        owner = np.repeat(np.arange(n), np.diff(s.dep_ptr))
        if len(s.dep_ids):
            a = step[s.dep_ids]
            b = step[owner]
            bad = np.flatnonzero((a >= 0) & (b >= 0) & (a >= b))
            if len(bad):
                op = int(owner[bad[0]])
                dep = int(s.dep_ids[bad[0]])
                _fail(
                    "step-order",
                    f"{s.describe_op(op)} at step {int(step[op])} depends on "
                    f"op {dep} at step {int(step[dep])}",
                    op,
                )
        self.checks.append("step-order")

    # ------------------------------------------------------------------ timing
    def check_timing(self) -> float | None:
        """Timed schedules: start times valid, durations no shorter than the transfers, every
        operation starting after its dependencies finish, no link over capacity. The planned
        finish (None when no operation has a start time)."""
        s, t, n = self.s, self.t, self.n_ops
        start = s.start
        assert start is not None  # run() checks timing only for schedules with start times
        if not self._check_start_times(start):
            return None
        assert s.size is not None  # _check_start_times refuses a timed schedule without one
        lengths = np.diff(s.route_ptr)
        owner = np.repeat(np.arange(n), lengths)
        links = s.route_links
        bw = t.link_bw[links]
        if s.has_groups:
            self._check_group_starts(start)
        alpha = t.link_alpha[links]
        nbytes = s.op_bytes(s.size)
        bottleneck = _per_route(np.minimum, bw, s.route_ptr, np.inf)
        dur = self._planned_durations(nbytes / bottleneck)  # joins: 0
        # alpha before each hop (cut-through: hop i starts after the alphas of hops < i)
        cum_alpha = np.cumsum(alpha)
        route_start_cum = np.concatenate(([0.0], cum_alpha))[s.route_ptr[:-1]]
        before = cum_alpha - alpha - route_start_cum[owner]
        total_alpha = _per_route(np.add, alpha, s.route_ptr, 0.0)
        finish = start + total_alpha + dur
        scale = max(1e-12, float(finish.max()) if n else 0.0)
        self._check_causality(start, finish, scale)
        c = s.carried_hops()  # a group's shared link carries its data once
        self._check_capacity(
            (start[owner] + before)[c], dur[owner][c], nbytes[owner][c], owner[c], scale, c
        )
        self.checks.extend(["causality", "capacity"])
        return float(finish.max()) if n else 0.0

    def _check_group_starts(self, start: np.ndarray) -> None:
        """Timed multicasts: one stream leaves the sender, so every member starts together."""
        s = self.s
        g = s.group
        assert g is not None
        first: dict[int, int] = {}
        for o in np.flatnonzero((g >= 0) & (s.kind == OpKind.COPY)).tolist():
            f = first.setdefault(int(g[o]), o)
            if start[o] != start[f]:
                _fail(
                    "causality",
                    f"{s.describe_op(o)} starts at {start[o]:.9g}s, op {f} of its multicast "
                    f"group {int(g[o])} at {start[f]:.9g}s (one stream leaves the sender)",
                    o,
                )

    def _check_start_times(self, start: np.ndarray) -> bool:
        """Every operation has a start time, or none has (then False: the schedule is not
        timed); a timed schedule has a positive data size and non-negative finite starts."""
        s, n = self.s, self.n_ops
        missing = np.flatnonzero(np.isnan(start))
        if len(missing) and len(missing) < n:
            op = int(missing[0])
            _fail(
                "structure", f"{s.describe_op(op)} has no start time while other operations do", op
            )
        if len(missing) == n:
            return False
        if s.size is None or not math.isfinite(s.size) or s.size <= 0:
            _fail("structure", "timed schedule has no positive data size")
        if not np.all(np.isfinite(start)) or np.any(start < 0):
            op = int(np.flatnonzero(~np.isfinite(start) | (start < 0))[0])
            _fail(
                "structure",
                f"{s.describe_op(op)}: start time {float(start[op])!r} is not a "
                f"non-negative number",
                op,
            )
        return True

    def _planned_durations(self, natural: np.ndarray) -> np.ndarray:
        """Each operation's planned duration: the schedule's (where given), which must not be
        shorter than its transfer time ``natural`` at the route's bottleneck bandwidth."""
        s = self.s
        if s.duration is None:
            return natural
        dur = np.where(np.isnan(s.duration), natural, s.duration)
        bad = np.flatnonzero(~np.isfinite(dur) | (dur < natural * (1 - CAP_TOL)))
        if len(bad):
            op = int(bad[0])
            _fail(
                "capacity",
                f"{s.describe_op(op)}: planned duration {dur[op]:.6g}s is "
                f"shorter than its transfer time {natural[op]:.6g}s",
                op,
            )
        return dur

    def _check_causality(self, start: np.ndarray, finish: np.ndarray, scale: float) -> None:
        """No operation starts before an operation it depends on finishes (within tolerance
        relative to ``scale``, the planned finish)."""
        s, n = self.s, self.n_ops
        if not len(s.dep_ids):
            return
        dep_owner = np.repeat(np.arange(n), np.diff(s.dep_ptr))
        late = finish[s.dep_ids] - start[dep_owner]
        bad = np.flatnonzero(late > TIME_TOL * scale + 1e-15)
        if len(bad):
            e = int(bad[0])
            op, dep = int(dep_owner[e]), int(s.dep_ids[e])
            _fail(
                "causality",
                f"{s.describe_op(op)} starts at {start[op]:.9g}s before op "
                f"{dep} it depends on finishes at {finish[dep]:.9g}s",
                op,
            )

    def _check_capacity(
        self,
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
        s, t = self.s, self.t
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
            _fail(
                "capacity",
                f"{s.describe_op(op)}: {t.link_label(lid)} would carry "
                f"{running[i]:.6g} B/s at t={ev_time[order[i]]:.9g}s, above its "
                f"{cap[i]:.6g} B/s",
                op,
            )

    # ------------------------------------------------------------------ unmoved chunks
    def check_chunks_moved(self) -> None:
        """In a big collective, every chunk some rank lacks is moved by at least one operation
        (checked without per-chunk arrays: the declared chunk count may be absurd)."""
        s, c = self.s, self.c
        if c.kind is CollKind.CUSTOM or c.num_chunks * c.num_ranks <= MANY_CHUNKS:
            return  # small enough for the postcondition check (custom: as long as its input)
        n, cpr = c.num_ranks, c.chunks_per_rank
        # chunks already where they must be: a rank's chunks to itself
        if c.kind is CollKind.ALLTOALL:

            def idle(ch: int) -> bool:
                return (ch // cpr) // n == (ch // cpr) % n

            n_idle = n * cpr
        elif c.kind in (CollKind.GATHER, CollKind.SCATTER):

            def idle(ch: int) -> bool:
                return ch // cpr == c.root

            n_idle = cpr
        else:

            def idle(ch: int) -> bool:
                return False

            n_idle = 0
        moved = set(unique(s.chunk[s.kind != OpKind.JOIN]).tolist())
        if c.num_chunks - n_idle <= len(moved):
            return
        ch = 0
        while idle(ch) or ch in moved:  # ends: more chunks must move than are moved
            ch = (ch // cpr + 1) * cpr if idle(ch) else ch + 1
        check = "incomplete-reduction" if c.reduces else "missing-delivery"
        _fail(
            check,
            f"no operation moves chunk {ch} ({c.describe()} has {c.num_chunks} "
            f"chunks; the schedule moves {len(moved)})",
        )

    # ------------------------------------------------------------------ byte segments
    def build_segments(self) -> None:
        """Split chunks into atomic segments at every byte-range boundary used by an op."""
        s, c = self.s, self.c
        if s.part_den is None:
            self.nseg_total = c.num_chunks
            self.seg_base = np.arange(c.num_chunks, dtype=np.int64)
            self.seg_count = np.ones(c.num_chunks, dtype=np.int64)
            self.op_seg_lo = s.chunk.copy()
            self.op_seg_hi = s.chunk + 1
            return
        lcm = np.ones(c.num_chunks, dtype=np.int64)
        for op, (ch, den) in enumerate(zip(s.chunk.tolist(), s.part_den.tolist())):
            m = math.lcm(int(lcm[ch]), int(den))
            if m >= 2**62:
                _fail(
                    "structure",
                    f"{s.describe_op(op)}: the byte ranges of chunk {ch} have "
                    f"denominators without a common multiple below 2**62",
                    op,
                )
            lcm[ch] = m
        scale = lcm[s.chunk] // s.part_den
        lo = s.part_lo * scale
        hi = s.part_hi * scale
        points: dict[int, set[int]] = {}
        for ch, a, b in zip(s.chunk.tolist(), lo.tolist(), hi.tolist()):
            p = points.setdefault(ch, set())
            p.add(a)
            p.add(b)
        self.seg_count = np.ones(c.num_chunks, dtype=np.int64)
        cuts: dict[int, list[int]] = {}
        for ch, p in points.items():
            p.add(0)
            p.add(int(lcm[ch]))
            cuts[ch] = sorted(p)
            self.seg_count[ch] = len(cuts[ch]) - 1
        self.seg_base = np.concatenate(([0], np.cumsum(self.seg_count)[:-1])).astype(np.int64)
        self.nseg_total = int(self.seg_count.sum())
        self.op_seg_lo = np.empty(self.n_ops, dtype=np.int64)
        self.op_seg_hi = np.empty(self.n_ops, dtype=np.int64)
        for op, (ch, a, b) in enumerate(zip(s.chunk.tolist(), lo.tolist(), hi.tolist())):
            cut = cuts[ch]
            base = int(self.seg_base[ch])
            self.op_seg_lo[op] = base + _index(cut, a)
            self.op_seg_hi[op] = base + _index(cut, b)

    def seg_chunk(self, seg: int) -> int:
        return int(np.searchsorted(self.seg_base, seg, side="right") - 1)

    # ------------------------------------------------------------------ execution: copies
    def execute_copying(self) -> int:
        """Non-reducing collectives: data is immutable, so only 'held before sent' matters."""
        s, c, n = self.s, self.c, self.n_ops
        nseg = self.nseg_total
        src_of_chunk = c.chunk_source
        seg_chunk = np.repeat(np.arange(c.num_chunks), self.seg_count)
        initial_holder = src_of_chunk[seg_chunk]  # per segment
        # fast path: ops whose sender holds the data initially, or that directly depend on an
        # op delivering exactly the segments they send to their sender
        join = s.kind == OpKind.JOIN
        ok = (src_of_chunk[s.chunk] == s.src) | join  # (a join sends nothing)
        if len(s.dep_ids):
            owner = np.repeat(np.arange(n), np.diff(s.dep_ptr))
            d = s.dep_ids
            match = (
                (s.dst[d] == s.src[owner])
                & ~join[d]
                & (self.op_seg_lo[d] <= self.op_seg_lo[owner])
                & (self.op_seg_hi[d] >= self.op_seg_hi[owner])
            )
            if match.any():
                ok[owner[match]] = True
        # who writes each (rank, segment): sorted keys for the slow path and the postcondition
        seg_len = np.where(join, 0, self.op_seg_hi - self.op_seg_lo)
        w_op = np.repeat(np.arange(n), seg_len)
        w_seg = np.repeat(self.op_seg_lo, seg_len) + _ragged_arange(seg_len)
        w_key = s.dst[w_op] * nseg + w_seg
        order = np.argsort(w_key, kind="stable")
        w_key_sorted = w_key[order]
        w_op_sorted = w_op[order]
        for op in np.flatnonzero(~ok).tolist():
            sender = int(s.src[op])
            for seg in range(int(self.op_seg_lo[op]), int(self.op_seg_hi[op])):
                if initial_holder[seg] == sender:
                    continue
                key = sender * nseg + seg
                lo = np.searchsorted(w_key_sorted, key, side="left")
                hi = np.searchsorted(w_key_sorted, key, side="right")
                writers = w_op_sorted[lo:hi].tolist()
                if not writers:
                    _fail(
                        "data-not-held",
                        f"{s.describe_op(op)}: rank "
                        f"{self.t.rank_name(sender)} never receives the data "
                        f"it sends",
                        op,
                    )
                if not any(self.is_ancestor(w, op) for w in writers):
                    w = writers[0]
                    _fail(
                        "data-not-held",
                        f"{s.describe_op(op)}: the data reaches "
                        f"{self.t.rank_name(sender)} only through op {w}, "
                        f"which this operation does not depend on",
                        op,
                    )
        self.checks.append("data-not-held")
        # postcondition
        post_r, post_c = c.postcondition()
        counts = self.seg_count[post_c]
        pr = np.repeat(post_r, counts)
        pc = np.repeat(post_c, counts)
        ps = np.repeat(self.seg_base[post_c], counts) + _ragged_arange(counts)
        held_initially = initial_holder[ps] == pr
        key = pr * nseg + ps
        idx = np.searchsorted(w_key_sorted, key)
        idx_c = np.minimum(idx, max(len(w_key_sorted) - 1, 0))
        delivered = (
            (idx < len(w_key_sorted)) & (w_key_sorted[idx_c] == key)
            if len(w_key_sorted)
            else np.zeros(len(key), dtype=bool)
        )
        missing = np.flatnonzero(~(held_initially | delivered))
        if len(missing):
            i = int(missing[0])
            _fail(
                "missing-delivery",
                f"rank {self.t.rank_name(int(pr[i]))} never receives "
                f"chunk {int(pc[i])}{self._seg_note(int(ps[i]))} "
                f"({c.describe()})",
            )
        self.checks.append("postcondition")
        # deliveries to a rank that already had the data (initially or earlier): wasteful only
        uniq = len(unique(w_key)) if len(w_key) else 0
        redundant = int(len(w_key) - uniq)
        redundant += int(np.count_nonzero(initial_holder[w_seg] == s.dst[w_op]))
        return redundant

    def _seg_note(self, seg: int) -> str:
        ch = self.seg_chunk(seg)
        if self.seg_count[ch] == 1:
            return ""
        return f" (segment {seg - int(self.seg_base[ch])} of {int(self.seg_count[ch])})"

    # ------------------------------------------------------------------ execution: reductions
    def execute_reducing(self) -> int:
        """Reducing collectives: execute the operations in dependency order, checking races and
        duplicate contributions; then every rank must end with the full reduction. The number
        of copies that deliver a value the receiver already holds."""
        anc = _Ancestry(self.s, self.order, self.pos)
        self._anc = anc
        # Buffers of different segments never interact, so large schedules run a window of
        # segments at a time (each window's operations in dependency order), which bounds
        # the buffers held at once; a schedule that fits one window runs as one.
        per = max(1, REDUCE_WINDOW_BUFFERS // max(1, self.c.num_ranks))
        redundant = 0
        first_w = self.op_seg_lo[self.order] // per
        if self.s.part_den is None:  # one segment per operation (memory at scale)
            last_w = first_w
        else:
            last_w = (np.maximum(self.op_seg_hi, self.op_seg_lo + 1)[self.order] - 1) // per
        grouped = None
        if per < self.nseg_total and np.array_equal(first_w, last_w):
            # every operation within one window: each window's operations by one stable sort
            by_w = np.argsort(first_w, kind="stable")
            bounds = np.searchsorted(first_w[by_w], np.arange(-(-self.nseg_total // per) + 1))
            grouped = (self.order[by_w], bounds)
        kernel = _WindowKernel(self, anc) if self.n_ops >= COMPILED_REDUCE_MIN_OPS else None
        for s0 in range(0, max(1, self.nseg_total), per):
            s1 = min(s0 + per, self.nseg_total)
            order = self.order
            if grouped is not None:
                w = s0 // per
                order = grouped[0][grouped[1][w] : grouped[1][w + 1]]
            elif per < self.nseg_total:
                order = order[(first_w <= (s1 - 1) // per) & (last_w >= s0 // per)]
            if kernel is not None:
                status, extra = kernel.run(order, s0, s1)
                if status == PASS:
                    redundant += extra
                    continue
            value: dict[int, int] = {}  # the Python executor: names the violation
            redundant += self._execute_reductions(anc, value, order, s0, s1)
            self._check_reduced(value, s0, s1)
            if kernel is not None:
                raise CollsynthError(
                    f"internal error: the compiled reduction executor refused segments "
                    f"{s0}..{s1 - 1} of {self.c.describe()}, which the Python executor accepts"
                )
        self.checks.extend(["data-not-held", "race", "duplicate-contribution", "postcondition"])
        return redundant

    def _execute_reductions(
        self, anc: _Ancestry, value: dict[int, int], order: np.ndarray, s0: int, s1: int
    ) -> int:
        """Execute the operations in dependency order on the per-(rank, segment) buffers, keyed
        ``rank * segments + segment``; ``value`` gets the bit mask of the ranks whose
        contributions each buffer holds (absent: the rank's own). An operation reads the
        sender's buffer after every write to it, and writes the receiver's after every read of
        it and, when either overwrites, after every other write; a copy overwrites, a reduce
        combines (refusing a contribution already there). The number of redundant copies.
        Only the operations ``order`` and the segments ``s0 <= seg < s1`` are executed."""
        s, nseg = self.s, self.nseg_total
        writes: dict[int, list[int]] = {}
        reads: dict[int, list[int]] = {}
        # per-operation facts of these operations only, as Python values (memory bounded by the
        # window); the buffers only ever name operations of the window
        order = order[s.kind[order] != OpKind.JOIN]  # joins read and write nothing
        ops = order.tolist()
        is_copy_op = s.kind[order] == OpKind.COPY
        copy_op = dict(zip(ops, is_copy_op.tolist()))
        posl = dict(zip(ops, anc.pos[order].tolist()))
        depthl = dict(zip(ops, anc.depth[order].tolist()))
        dep_lo, dep_hi = anc.ptr[order], anc.ptr[order + 1]
        idsl = anc.ids[spread_ranges(dep_lo, dep_hi - dep_lo)].tolist()
        dep_at = np.concatenate(([0], np.cumsum(dep_hi - dep_lo))).tolist()
        walk = anc.query
        redundant = 0
        for i, (op, src, dst, is_copy, lo_op, hi_op) in enumerate(
            zip(
                ops,
                s.src[order].tolist(),
                s.dst[order].tolist(),
                is_copy_op.tolist(),
                self.op_seg_lo[order].tolist(),
                self.op_seg_hi[order].tolist(),
            )
        ):
            p_op, d_op = posl[op], depthl[op]
            direct: set[int] | None = None  # made on first need (an AllReduce root's
            # broadcasts each depend on every delivery into it: long lists)

            def is_ancestor(a: int, _x: int) -> bool:
                # cheap answers first: one that cannot reach ``op`` (a dependency comes
                # earlier in the order and is shallower), or a direct dependency
                nonlocal direct
                if posl[a] >= p_op or depthl[a] >= d_op:
                    return False
                if direct is None:
                    direct = set(idsl[dep_at[i] : dep_at[i + 1]])
                if a in direct:
                    return True
                return walk(a, op)

            for seg in range(max(lo_op, s0), min(hi_op, s1)):
                rk = src * nseg + seg
                for w in writes.get(rk, ()):
                    if not is_ancestor(w, op):
                        self._race(op, w, src, "reads")
                v = value.get(rk, 1 << src)
                reads.setdefault(rk, []).append(op)
                wk = dst * nseg + seg
                for r in reads.get(wk, ()):
                    if not is_ancestor(r, op):
                        self._race(op, r, dst, "writes")
                prev = writes.get(wk, [])
                keep = []
                for w in prev:
                    if is_ancestor(w, op):
                        # a later reduce unordered with this one must still be ordered with
                        # an overwriting copy before it: keep such copies
                        if not is_copy and copy_op[w]:
                            keep.append(w)
                        continue
                    if is_copy or copy_op[w]:
                        self._race(op, w, dst, "overwrites")
                    keep.append(w)
                cur = value.get(wk, 1 << dst)
                if is_copy:
                    if v == cur:
                        redundant += 1
                    value[wk] = v
                else:
                    dup = v & cur
                    if dup:
                        self._duplicate(op, dup, dst)
                    value[wk] = v | cur
                keep.append(op)
                writes[wk] = keep
                if is_copy:  # later writes must follow this copy, hence these reads
                    reads[wk] = []
        return redundant

    def _race(self, op: int, other: int, rank: int, access: str) -> NoReturn:
        """Fail: ``op`` and ``other`` use the data at ``rank`` with no dependency between them.
        ``access``: ``reads`` (``other`` may still be writing it), ``writes`` (``other`` may
        still be reading it) or ``overwrites`` (both write it and one of them overwrites)."""
        s, t = self.s, self.t
        if access == "overwrites":
            message = (
                f"{s.describe_op(op)} and op {other} both write the data at "
                f"{t.rank_name(rank)} with no dependency between them "
                f"and one of them overwrites it"
            )
        else:
            doing = "writing" if access == "reads" else "reading"
            message = (
                f"{s.describe_op(op)} {access} the data at "
                f"{t.rank_name(rank)} while op {other} may still be {doing} it "
                f"(no dependency orders them)"
            )
        _fail("race", message, op)

    def _duplicate(self, op: int, dup: int, rank: int) -> NoReturn:
        """Fail: ``op`` combines into the data at ``rank`` the contributions ``dup`` (a bit mask
        of ranks) it already has."""
        _fail(
            "duplicate-contribution",
            f"{self.s.describe_op(op)} combines the contribution of rank(s) "
            f"{_fmt_ranks(_bits(dup))} into {self.t.rank_name(rank)}, which already "
            f"has it",
            op,
        )

    def _check_reduced(self, value: dict[int, int], s0: int, s1: int) -> None:
        """Postcondition of a reduction: every rank ends with every contribution in each
        segment ``s0 <= seg < s1`` of the chunks it must hold (``value``: the contributions per
        buffer)."""
        c, t, nseg = self.c, self.t, self.nseg_total
        full = c.full_mask
        post_r, post_c = c.postcondition()
        lo = self.seg_base[post_c]
        hit = (lo < s1) & (lo + self.seg_count[post_c] > s0)
        for r, ch in zip(post_r[hit].tolist(), post_c[hit].tolist()):
            base = int(self.seg_base[ch])
            for seg in range(max(base, s0), min(base + int(self.seg_count[ch]), s1)):
                v = value.get(r * nseg + seg, 1 << r)
                if v != full:
                    missing = _bits(full & ~v)
                    _fail(
                        "incomplete-reduction",
                        f"rank {t.rank_name(r)} ends with chunk {ch}{self._seg_note(seg)} "
                        f"missing the contribution of rank(s) {_fmt_ranks(missing)} "
                        f"({c.describe()})",
                    )


# ---------------------------------------------------------------------- in-network groups
def check_groups(s: Schedule) -> None:
    """Multicasts and in-switch reductions (``Schedule.group``): a group's members are all
    copies from one sender, of one chunk and byte range, after the same dependencies, to
    distinct receivers, whose routes part only at switches that can multicast; or all reduces
    of one chunk and byte range from distinct senders to one receiver, whose routes meet only
    at switches that can reduce (a route that leaves another and comes back to it, a tree that
    is not one, is refused). Their meaning is that of the same operations one by one, which
    the rest of the verifier checks."""
    t = s.topology
    g = s.group
    assert g is not None
    if len(g) != s.num_ops:
        _fail("structure", f"operation column 'group' has {len(g)} entries for {s.num_ops}")
    bad = np.flatnonzero(g < -1)
    if len(bad):
        op = int(bad[0])
        _fail("group", f"{s.describe_op(op)}: group {int(g[op])} is not a group id or -1", op)
    members = np.flatnonzero(g >= 0)
    if not len(members):
        return
    order = members[np.argsort(g[members], kind="stable")]
    cuts = np.flatnonzero(np.diff(g[order])) + 1
    for ops in np.split(order, cuts):
        _check_group(s, t, [int(o) for o in ops])


def _check_group(s: Schedule, t: Any, ops: list[int]) -> None:
    first = ops[0]
    gid = int(s.group[first])  # type: ignore[index]
    kind = int(s.kind[first])
    what = "multicast" if kind == OpKind.COPY else "in-switch reduction"
    if kind == OpKind.JOIN:
        _fail("group", f"{s.describe_op(first)}: a join cannot be in group {gid}", first)

    def same(col: np.ndarray | None, label: str) -> None:
        if col is None:
            return
        for o in ops[1:]:
            if col[o] != col[first]:
                _fail(
                    "group",
                    f"{s.describe_op(o)} and op {first} of {what} group {gid} differ in {label}",
                    o,
                )

    same(s.kind, "kind")
    same(s.chunk, "chunk")
    for col in (s.part_lo, s.part_hi, s.part_den):
        same(col, "byte range")
    ends = s.src if kind == OpKind.COPY else s.dst
    same(ends, "sender" if kind == OpKind.COPY else "receiver")
    others = (s.dst if kind == OpKind.COPY else s.src)[ops].tolist()
    if len(set(others)) != len(others):
        dup = next(o for o, r in zip(ops, others) if others.count(r) > 1)
        side = "receiver" if kind == OpKind.COPY else "sender"
        _fail(
            "group", f"{s.describe_op(dup)}: two members of {what} group {gid} share a {side}", dup
        )
    if kind == OpKind.COPY:
        deps0 = sorted(set(s.deps(first).tolist()))
        for o in ops[1:]:
            if sorted(set(s.deps(o).tolist())) != deps0:
                _fail(
                    "group",
                    f"{s.describe_op(o)} and op {first} of multicast group {gid} wait for "
                    f"different operations (one stream leaves the sender)",
                    o,
                )
    # the routes as a tree: where two part (multicast) or meet (reduction), a capable switch
    routes = {o: s.route(o).tolist() for o in ops}
    if kind != OpKind.COPY:
        routes = {o: r[::-1] for o, r in routes.items()}
    able = t.multicast_nodes if kind == OpKind.COPY else t.reduce_nodes
    verb = "multicast" if kind == OpKind.COPY else "reduce"
    children: dict[tuple, set[int]] = {}
    owner: dict[tuple, int] = {}
    for o in ops:
        prefix: tuple = ()
        for link in routes[o]:
            children.setdefault(prefix, set()).add(link)
            prefix = prefix + (link,)
            owner.setdefault(prefix, o)
    used: dict[int, tuple] = {}
    for prefix, links in children.items():
        for link in links:
            path = prefix + (link,)
            if used.setdefault(link, path) != path:
                o = owner[path]
                _fail(
                    "group",
                    f"{s.describe_op(o)}: the routes of {what} group {gid} cross "
                    f"{t.link_label(link)} on two branches (not a tree)",
                    o,
                )
        if len(links) < 2 or not prefix:
            continue  # one branch, or the branches start at the rank itself
        node = int(t.link_dst[prefix[-1]] if kind == OpKind.COPY else t.link_src[prefix[-1]])
        if not able[node]:
            o = owner[prefix + (sorted(links)[1],)]
            _fail(
                "group",
                f"{s.describe_op(o)}: the routes of {what} group {gid} "
                f"{'part' if kind == OpKind.COPY else 'meet'} at {t.nodes[node].name}, "
                f"which cannot {verb}",
                o,
            )


# ---------------------------------------------------------------------- helpers
class _WindowKernel:
    """The compiled reduction executor (:mod:`collsynth.verify.kernel`) bound to one
    verification: the operation columns, the ancestry arrays and the postcondition sorted by
    chunk, so each window finds its part by bisection."""

    def __init__(self, v: _Verifier, anc: _Ancestry):
        s, c = v.s, v.c
        self.v = v
        self.anc = anc
        self.src = np.ascontiguousarray(s.src, dtype=np.int64)
        self.dst = np.ascontiguousarray(s.dst, dtype=np.int64)
        self.kind = np.ascontiguousarray(s.kind, dtype=np.int8)
        self.dmark = np.zeros(s.num_ops, dtype=np.int32)  # (stamps wrap before 2**31)
        self.seg_lo = np.ascontiguousarray(v.op_seg_lo, dtype=np.int64)
        self.seg_hi = np.ascontiguousarray(v.op_seg_hi, dtype=np.int64)
        post_r, post_c = c.postcondition()
        by_chunk = np.argsort(post_c, kind="stable")
        self.post_r = np.ascontiguousarray(post_r[by_chunk], dtype=np.int64)
        self.post_c = np.ascontiguousarray(post_c[by_chunk], dtype=np.int64)
        self.chunk_end = v.seg_base + v.seg_count  # each chunk's segments end here
        self.fn = compiled_run_window()

    def run(self, order: np.ndarray, s0: int, s1: int) -> tuple[int, int]:
        v, a = self.v, self.anc
        c_lo = int(np.searchsorted(self.chunk_end, s0, side="right"))
        c_hi = int(np.searchsorted(v.seg_base, s1, side="left"))
        i0 = int(np.searchsorted(self.post_c, c_lo, side="left"))
        i1 = int(np.searchsorted(self.post_c, c_hi, side="left"))
        chunks = self.post_c[i0:i1]
        base = v.seg_base[chunks]
        a.stamps[2] = STAMP_WRAP
        status, redundant = self.fn(
            np.ascontiguousarray(order, dtype=np.int64), self.src, self.dst, self.kind,
            self.seg_lo, self.seg_hi, s0, s1, v.c.num_ranks, self.post_r[i0:i1], base,
            base + v.seg_count[chunks], a.pos, a.depth, a.ptr, a.ids, a.mark, a.stack, a.stamps,
            self.dmark,
        )  # fmt: skip
        return int(status), int(redundant)


class _Ancestry:
    """Reachability queries on the dependency DAG: is ``a`` a (transitive) dependency of ``x``?

    A backwards walk from ``x`` that never enters an operation which cannot reach ``a``: one
    placed before ``a`` in the topological order, or whose depth (longest dependency chain
    above it) is not greater than ``a``'s. Depth pruning keeps the walk to a thin band of the
    DAG, so the many negative queries of tree reductions (siblings reducing into one buffer)
    end at once. The walk is compiled with numba; visited marks are stamped per query, so no
    per-query allocation.
    """

    def __init__(self, s: Schedule, order: np.ndarray, pos: np.ndarray):
        n = s.num_ops
        self.ptr = np.ascontiguousarray(s.dep_ptr, dtype=np.int64)
        self.ids = np.ascontiguousarray(s.dep_ids, dtype=np.int64)
        self.pos = np.ascontiguousarray(pos, dtype=np.int64)
        walk, depth_of = _ancestry_kernels()
        self.depth = depth_of(np.ascontiguousarray(order, dtype=np.int64), self.ptr, self.ids)
        # int32: memory at tens of millions of operations (stamps wrap before 2**31)
        self.mark = np.zeros(n, dtype=np.int32)
        self.stack = np.empty(max(n, 1), dtype=np.int32 if n < 2**31 else np.int64)
        # the walk's number, the compiled executor's operation number, where both wrap
        self.stamps = np.array([0, 0, STAMP_WRAP], dtype=np.int64)
        self._walk = walk

    def query(self, a: int, x: int) -> bool:
        self.stamps[2] = STAMP_WRAP
        return bool(
            self._walk(
                a, x, self.pos, self.depth, self.ptr, self.ids, self.mark, self.stack, self.stamps
            )
        )


def _dep_depth(order, ptr, ids):
    n = len(order)
    depth = np.zeros(n, dtype=np.int32)  # (a depth is below the number of operations)
    for i in range(n):
        x = order[i]
        best = 0
        for j in range(ptr[x], ptr[x + 1]):
            v = depth[ids[j]] + 1
            if v > best:
                best = v
        depth[x] = best
    return depth


_KERNELS: tuple | None = None


def _ancestry_kernels():
    """The walk and the depth pass, compiled with numba once per process (cached on disk)."""
    global _KERNELS
    if _KERNELS is None:
        try:
            from numba import njit
        except ImportError:  # pragma: no cover - numba is a dependency
            _KERNELS = (ancestor, _dep_depth)
        else:
            _KERNELS = (
                njit(cache=True, nogil=True)(ancestor),
                njit(cache=True, nogil=True)(_dep_depth),
            )
    return _KERNELS


def _per_route(ufunc: np.ufunc, values: np.ndarray, ptr: np.ndarray, empty: float) -> np.ndarray:
    """``ufunc`` reduced over each route's entries of ``values`` (one per route link);
    ``empty`` for a route without links (a join)."""
    lengths = np.diff(ptr)
    out = np.full(len(lengths), empty, dtype=np.float64)
    has = lengths > 0
    if has.any():
        out[has] = ufunc.reduceat(values, ptr[:-1][has])
    return out


def _index(sorted_list: list[int], value: int) -> int:
    import bisect

    return bisect.bisect_left(sorted_list, value)


def _ragged_arange(lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(k) for each k in ``lengths``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.arange(total, dtype=np.int64) - starts


def _bits(mask: int) -> list[int]:
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def _fmt_ranks(ranks: list[int]) -> str:
    if len(ranks) > 8:
        return ", ".join(map(str, ranks[:8])) + f", ... ({len(ranks)} in all)"
    return ", ".join(map(str, ranks))


def _kahn(n: int, ptr: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Topological order of ops (dependencies first, ties by op id); None if cyclic."""
    import heapq

    indeg = np.diff(ptr).astype(np.int64)
    owner = np.repeat(np.arange(n), indeg)
    # successors CSR
    order = np.argsort(ids, kind="stable")
    succ = owner[order]
    succ_ptr = np.zeros(n + 1, dtype=np.int64)
    if len(ids):
        np.add.at(succ_ptr, ids + 1, 1)
    succ_ptr = np.cumsum(succ_ptr)
    indeg = indeg.tolist()
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    succ_l = succ.tolist()
    sp = succ_ptr.tolist()
    while heap:
        u = heapq.heappop(heap)
        out.append(u)
        for v in succ_l[sp[u] : sp[u + 1]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, v)
    if len(out) != n:
        return None
    return np.array(out, dtype=np.int64)


def _find_cycle_member(n: int, ptr: np.ndarray, ids: np.ndarray) -> int:
    """An operation on a dependency cycle (assumes one exists)."""
    # repeatedly strip ops with no remaining dependency; what is left contains a cycle
    order = _kahn_partial(n, ptr, ids)
    remaining = sorted(set(range(n)) - set(order))
    rem = set(remaining)
    u = remaining[0]
    seen: dict[int, int] = {}
    step = 0
    while u not in seen:
        seen[u] = step
        step += 1
        nxt = [int(d) for d in ids[ptr[u] : ptr[u + 1]] if int(d) in rem]
        u = min(nxt)
    return u


def _kahn_partial(n: int, ptr: np.ndarray, ids: np.ndarray) -> list[int]:
    indeg = np.diff(ptr).astype(np.int64).tolist()
    succ: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for d in ids[ptr[v] : ptr[v + 1]].tolist():
            succ[d].append(v)
    stack = [i for i in range(n) if indeg[i] == 0]
    out = []
    while stack:
        u = stack.pop()
        out.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    return out


def ensure_verified(schedule: Schedule) -> VerifyReport:
    """Verify before a schedule leaves collsynth; re-raise as a one-line CollsynthError."""
    try:
        return verify(schedule)
    except VerificationError as e:
        algo = schedule.meta.get("algorithm", "?")
        raise CollsynthError(
            f"internal check failed: the {algo} schedule does not verify ({e})"
        ) from None
