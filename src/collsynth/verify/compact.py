"""Verification of a compact schedule (:mod:`collsynth.schedule.compact`) without expanding it.

**Why representatives and the group suffice.** Let ``G`` act on the topology (every element an
automorphism: it maps links onto links of the same bandwidth, latency and class), on the
collective (chunk ``c``'s image has the image of ``c``'s source and destinations) and freely on
the ranks. The explicit schedule is the set of images ``g(A)`` of the representatives, with
dependencies and link orders mapped alike, so it is *invariant* under ``G``: ``g`` maps
operations onto operations, dependency edges onto dependency edges and each link's order onto
its image's. Every rule of the verifier is invariant too: an automorphism maps a route that is a
path from ``src`` to ``dst`` onto a path from ``g(src)`` to ``g(dst)``, a held chunk onto a held
chunk, a race onto a race. So:

* the *per-operation* rules (structure, routes) hold for every operation iff they hold for the
  representatives: they are checked on them;
* a cycle of dependencies (or of dependencies and link orders) in the explicit schedule maps to
  a cycle of orbits, and conversely a cycle of orbits ``A1 -> ... -> Ak -> A1`` lifts: every
  member of ``A1`` has a predecessor in ``Ak`` (apply ``G`` to one edge), so a walk backwards
  never ends, and the schedule is finite. Hence the explicit graph is acyclic iff the *quotient
  graph* (one node per orbit) is, and a topological order of orbits, each orbit's members
  together, is a topological order of the explicit schedule; members of one orbit never depend
  on each other;
* steps, planned start times and durations are the same on every member of an orbit, and on a
  link whose orbit is free the operations are the images of the representatives' hops on that
  orbit, one each: the step, causality and capacity rules are checked on the quotient, each
  route's links replaced by their orbits' representatives;
* the execution of the data (held before sent, races, duplicate contributions, the
  postcondition) is *equivariant*: the content of buffer ``(g(r), g(c))`` is ``g`` of the
  content of ``(r, c)``. The executor keeps one buffer per orbit of (rank, chunk, segment) —
  the one at its rank's orbit representative — and runs the representatives orbit by orbit in
  the quotient order: representative ``A`` stands for its member that reads (or writes) the
  canonical buffer, contributions are carried between frames by the group, and whether an
  access follows another is asked of the explicit dependency graph, walked in compact
  coordinates (the dependency ``(B, h)`` of ``(C, k)`` is ``(B, k * h)``).

What the compact verifier cannot see, it refuses: a link that carries hops and is fixed by an
element of the group (its orbit is not free: the compact link order would be ambiguous). The
group itself is recomputed from the generators
(:func:`~collsynth.schedule.compact.group_action`) rather than trusted. Messages name
representatives by their index; in the expansion, representative ``A`` is operation
``A * |G|``.
"""

from __future__ import annotations

import math
from typing import NoReturn

import numpy as np

from ..collective import CollKind
from ..errors import CollsynthError, VerificationError
from ..schedule.compact import BadGroup, CompactSchedule, GroupAction, group_action
from ..schedule.dag import is_acyclic, levels, owners, ragged_arange
from ..schedule.ir import OpKind, Schedule
from .compact_kernel import FAIL, PASS, compiled_compact_window, walk_arrays
from .context import Context, VerifyReport, fail
from .order import cycle_member, dependency_order
from .routes import check_routes
from .structure import check_structure
from .timing import check_timing


def verify_compact(cs: CompactSchedule) -> VerifyReport:
    """Verify the explicit schedule that ``cs`` stands for, from its representatives and
    group (see the module doc); raise :class:`VerificationError` at the first violation."""
    checks: list[str] = []
    try:
        action = _group(cs, checks)
        rctx = Context.of(cs.reps)
        check_structure(rctx)
        check_routes(rctx)
        _check_pairs(cs, action)
        checks += rctx.checks
        q = _quotient(cs, action)
        qctx = Context.of(q)
        order, pos = dependency_order(qctx)
        if cs.order_links is not None:
            _check_link_orders(cs, action, q)
            qctx.checks.append("link-order")
        if q.step is not None:
            _check_steps(cs, action, q)
            qctx.checks.append("step-order")
        finish = check_timing(qctx) if q.start is not None else None
        checks += qctx.checks
        redundant = _Execution(cs, action, order, pos).run(checks)
    except VerificationError as e:
        op = None if e.op is None else int(e.op) * cs.action.order
        raise VerificationError(f"{e} (representative numbering)", check=e.check,
                                op=op) from None  # fmt: skip
    return VerifyReport(True, cs.num_ops, cs.num_hops, checks, redundant, finish)


def check_compact(cs: CompactSchedule) -> VerifyReport:
    """Like :func:`verify_compact` but returns a failed report instead of raising."""
    try:
        return verify_compact(cs)
    except VerificationError as e:
        return VerifyReport(False, cs.num_ops, cs.num_hops, error=str(e), error_check=e.check,
                            error_op=e.op)  # fmt: skip


def _group(cs: CompactSchedule, checks: list[str]) -> GroupAction:
    """The group recomputed from the generators; its tables must be the ones given."""
    a = cs.action
    try:
        fresh = group_action(cs.topology, cs.collective, a.generators, a.chunk_generators)
    except BadGroup as e:
        fail("group", str(e))
    for name in ("node_perms", "link_perms", "rank_perms", "chunk_rep", "chunk_elem", "chunk_at",
                 "mul"):  # fmt: skip
        if not np.array_equal(getattr(fresh, name), getattr(a, name)):
            fail("group", f"the group's {name.replace('_', ' ')} are not those its "
                          "generators make")  # fmt: skip
    if cs.topology is not a.topology or cs.collective != a.collective:
        fail("group", "the group belongs to another topology or collective")
    used = np.unique(cs.reps.route_links.astype(np.int64))
    fixed = used[fresh.link_orbit_sizes[used] != fresh.order]
    if len(fixed):
        label = cs.topology.link_label(int(fixed[0]))
        fail("group", f"{label} carries data and is fixed by an element of the group "
                      "(the compact form needs free link orbits)")  # fmt: skip
    checks.append("group")
    return fresh


def _check_pairs(cs: CompactSchedule, a: GroupAction) -> None:
    """Dependencies and link-order entries name representatives and elements that exist."""
    n, order = cs.num_reps, a.order
    if (
        len(cs.dep_ptr) != n + 1
        or cs.dep_ptr[0] != 0
        or (np.diff(cs.dep_ptr) < 0).any()
        or (cs.dep_ptr[-1] != len(cs.dep_orbit) or len(cs.dep_elem) != len(cs.dep_orbit))
    ):
        fail("structure", "the dependency pointers do not match the representatives")
    owner = owners(cs.dep_ptr)
    pairs = (("dependency", cs.dep_orbit, cs.dep_elem, owner),
             ("link order entry", cs.order_orbit, cs.order_elem, None))  # fmt: skip
    for what, orb, el, who in pairs:
        if orb is None or el is None:
            continue
        bad = np.flatnonzero((orb < 0) | (orb >= n) | (el < 0) | (el >= order))
        if len(bad):
            i = int(bad[0])
            fail("structure", f"{what} ({int(orb[i])}, {int(el[i])}) names no representative "
                              f"and element ({n} representatives, {order} elements)",
                 None if who is None else int(who[i]))  # fmt: skip


def _quotient(cs: CompactSchedule, a: GroupAction) -> Schedule:
    """The representatives with their dependencies as orbits and their routes on the link
    orbits' representatives: what the order, step and timing rules see."""
    r = cs.reps
    link_rep = a.link_frames[0]
    return Schedule(
        r.topology, r.collective, r.src, r.dst, r.chunk, r.kind, r.route_ptr,
        link_rep[r.route_links.astype(np.int64)], cs.dep_ptr, cs.dep_orbit, r.start,
        r.duration, r.step, r.part_lo, r.part_hi, r.part_den, None, r.size, r.meta,
    )  # fmt: skip


def _check_link_orders(cs: CompactSchedule, a: GroupAction, q: Schedule) -> None:
    """Every listed link order is a link orbit's representative and lists exactly the
    operations that cross that link, each once; with the dependencies the orders make no
    cycle (deadlock), decided on the quotient."""
    assert cs.order_links is not None and cs.order_ptr is not None
    assert cs.order_orbit is not None and cs.order_elem is not None
    t = cs.topology
    n_links = len(t.links)
    lids = cs.order_links.astype(np.int64)
    ptr = cs.order_ptr.astype(np.int64)
    if len(ptr) != len(lids) + 1 or ptr[0] != 0 or ptr[-1] != len(cs.order_orbit) or (
        np.diff(ptr) < 0).any():  # fmt: skip
        fail("link-order", "the link-order pointers do not match its links")
    if len(lids) and ((lids < 0) | (lids >= n_links)).any():
        fail("link-order", "a planned order names a link that does not exist")
    link_rep, link_elem = a.link_frames
    if (link_rep[lids] != lids).any() or (np.diff(lids) <= 0).any():
        fail("link-order", "planned orders are given for links that are not their orbits' "
                           "representatives, in increasing order")  # fmt: skip
    listed = np.zeros(n_links, dtype=bool)
    listed[lids] = True
    r = cs.reps
    hop_op = owners(r.route_ptr)
    hl = r.route_links.astype(np.int64)
    sel = listed[link_rep[hl]]
    order = a.order
    n = cs.num_reps
    # the member of hop (A, l) that crosses l's representative: (A, inv(frame(l)))
    used = np.sort((link_rep[hl[sel]] * n + hop_op[sel]) * order + a.inv[link_elem[hl[sel]]])
    e_link = np.repeat(lids, np.diff(ptr))
    keys = (e_link * n + cs.order_orbit) * order + cs.order_elem
    sk = np.sort(keys)
    if len(sk) > 1 and (sk[1:] == sk[:-1]).any():
        fail("link-order", "a planned order lists an operation twice")
    if not np.array_equal(sk, used):
        missing = np.setdiff1d(used, sk)
        if len(missing):
            k = int(missing[0])
            fail("link-order", f"planned order of {t.link_label(k // order // n)} omits the "
                               f"operation ({k // order % n}, {k % order}), which uses that "
                               "link", k // order % n)  # fmt: skip
        k = int(np.setdiff1d(sk, used)[0])
        fail("link-order", f"planned order of {t.link_label(k // order // n)} lists the "
                           f"operation ({k // order % n}, {k % order}), which does not use "
                           "that link", k // order % n)  # fmt: skip
    lengths = np.diff(ptr)
    nxt = np.ones(len(cs.order_orbit), dtype=bool)
    ends = np.cumsum(lengths)
    nxt[ends[lengths > 0] - 1] = False
    o = cs.order_orbit.astype(np.int64)
    src = np.concatenate([q.dep_ids.astype(np.int64), o[:-1][nxt[:-1]]])
    dst = np.concatenate([owners(q.dep_ptr), o[1:][nxt[:-1]]])
    if not is_acyclic(n, src, dst):
        op = cycle_member(n, src, dst)
        fail("link-order", "planned link order conflicts with the dependencies (deadlock) "
                           f"at {q.describe_op(op)}", op)  # fmt: skip


def _check_steps(cs: CompactSchedule, a: GroupAction, q: Schedule) -> None:
    """``step-order`` on the quotient (steps are the same on every member of an orbit): an
    operation's step exceeds its dependencies' steps, except, in a schedule whose senders are
    paced (``meta["link_order"]["pacing"]``, as :func:`.order.check_steps` allows it), a
    dependency between two transfers of one sender where the earlier one comes first in the
    order of a link both use."""
    step = q.step
    assert step is not None
    owner = owners(q.dep_ptr)
    dep = q.dep_ids.astype(np.int64)
    bad = np.flatnonzero((step[dep] >= 0) & (step[owner] >= 0) & (step[dep] >= step[owner]))
    info = cs.meta.get("link_order")
    if len(bad) and isinstance(info, dict) and info.get("pacing") and cs.order_links is not None:
        bad = bad[~_pacing_shaped(cs, a, owner[bad], dep[bad], cs.dep_elem[bad])]
    if len(bad):
        op, d = int(owner[bad[0]]), int(dep[bad[0]])
        fail("step-order", f"{q.describe_op(op)} at step {int(step[op])} depends on op {d} at "
                           f"step {int(step[d])}", op)  # fmt: skip


def _pacing_shaped(cs, a, after, before, elem) -> np.ndarray:
    """Per dependency of representative ``after`` on member ``(before, elem)``: whether both
    are sent by one rank and ``(before, elem)`` comes first in the order of a link both
    cross (each link's order read off its orbit's: link ``f(L)`` lists ``(B, f h)`` where
    ``L``'s lists ``(B, h)``)."""
    assert cs.order_links is not None and cs.order_ptr is not None
    assert cs.order_orbit is not None and cs.order_elem is not None
    r = cs.reps
    link_rep, link_elem = a.link_frames
    place: dict[tuple[int, int, int], int] = {}
    wanted = set(after.tolist()) | set(before.tolist())
    ptr = cs.order_ptr.tolist()
    for i, lid in enumerate(cs.order_links.tolist()):
        for k in range(ptr[i], ptr[i + 1]):
            orb = int(cs.order_orbit[k])
            if orb in wanted:
                place[(lid, orb, int(cs.order_elem[k]))] = k - ptr[i]
    out = np.zeros(len(after), dtype=bool)
    for j, (x, b, h) in enumerate(zip(after.tolist(), before.tolist(), elem.tolist())):
        if a.rank_perms[h, r.src[b]] != r.src[x]:
            continue
        theirs = set(a.link_perms[h, r.route(b)].tolist())
        for lnk in r.route(x).tolist():
            if lnk not in theirs:
                continue
            rep, f_inv = int(link_rep[lnk]), int(a.inv[link_elem[lnk]])
            mine = place.get((rep, x, f_inv))
            first = place.get((rep, b, int(a.mul[f_inv, h])))
            if mine is not None and first is not None and first < mine:
                out[j] = True
                break
    return out


class _Execution:
    """The data executed orbit by orbit on canonical buffers (see the module doc)."""

    def __init__(self, cs: CompactSchedule, a: GroupAction, order: np.ndarray, pos: np.ndarray):
        self.cs, self.a = cs, a
        self.order = order
        self.pos = pos.tolist()
        r = cs.reps
        self.n_ranks = cs.topology.num_ranks
        self.G = a.order
        self.rank_rep, self.rank_elem = (x.tolist() for x in a.rank_frames)
        self.mul = a.mul
        self.inv = a.inv.tolist()
        self.dep_ptr = cs.dep_ptr.tolist()
        self.dep_orbit = cs.dep_orbit.tolist()
        self.dep_elem = cs.dep_elem.tolist()
        self.mul_list = a.mul.tolist()
        depth = levels(cs.num_reps, cs.dep_ptr, cs.dep_orbit)  # (acyclic: checked before)
        assert depth is not None
        self.depth = depth.tolist()
        self.seg_lo, self.seg_hi, self.n_seg = _segments(r)

    # ---------------------------------------------------------------- ancestry
    def precedes(self, u: tuple[int, int], v: tuple[int, int]) -> bool:
        """Is operation ``u = (B, h)`` a transitive dependency of ``v = (A, e)``? A walk
        back from ``(A, 1)`` (``u`` moved by ``e``'s inverse) in compact coordinates,
        entering no orbit placed before ``B`` or no deeper than it."""
        b, h = u
        a, e = v
        h = self.mul_list[self.inv[e]][h]
        pos, depth = self.pos, self.depth
        if pos[b] >= pos[a] or depth[b] >= depth[a]:
            return False
        pb, db = pos[b], depth[b]
        target = b * self.G + h
        dp, do, de, mul = self.dep_ptr, self.dep_orbit, self.dep_elem, self.mul_list
        stack = [(a, 0)]
        seen = {a * self.G}
        while stack:
            c, k = stack.pop()
            row = mul[k]
            for j in range(dp[c], dp[c + 1]):
                d = do[j]
                key = d * self.G + row[de[j]]
                if key == target:
                    return True
                if key in seen or pos[d] <= pb or depth[d] <= db:
                    continue
                seen.add(key)
                stack.append((d, row[de[j]]))
        return False

    # ---------------------------------------------------------------- frames
    def frame(self, rank: int, chunk: int) -> tuple[int, int, int]:
        """``(rank, chunk)``'s canonical buffer (its rank's orbit representative, the chunk
        seen from there) and the element ``f`` with ``rank = f(rep)``."""
        f = self.rank_elem[rank]
        return self.rank_rep[rank], int(self.a.chunk_image(self.inv[f], chunk)), f

    def run(self, checks: list[str]) -> int:
        if self.cs.collective.reduces:
            out = self._reducing()
            checks += ["data-not-held", "race", "duplicate-contribution", "postcondition"]
        else:
            out = self._copying()
            checks += ["data-not-held", "postcondition"]
        return out

    def _ops(self, window: int | None = None):
        """The moving representatives in dependency order (those of one orbit of chunks)."""
        r = self.cs.reps
        src, dst, chunk, kind = (x.tolist() for x in (r.src, r.dst, r.chunk, r.kind))
        lo, hi = self.seg_lo.tolist(), self.seg_hi.tolist()
        orbit = self.a.chunk_orbit.tolist()
        for op in self.order.tolist():
            if kind[op] == OpKind.JOIN or (window is not None and orbit[chunk[op]] != window):
                continue
            yield op, src[op], dst[op], chunk[op], kind[op], lo[op], hi[op]

    # ---------------------------------------------------------------- copying
    def _copying(self) -> int:
        """Copying collectives, vectorized: every transfer's sender holds its data
        initially, or a direct dependency delivered it, or (looked up one by one) some
        ancestor did; the postcondition from the canonical writes."""
        c, a, r = self.cs.collective, self.a, self.cs.reps
        ops = np.flatnonzero(r.kind != OpKind.JOIN)
        src, dst, chunk = (r.src[ops].astype(np.int64), r.dst[ops].astype(np.int64),
                           r.chunk[ops].astype(np.int64))  # fmt: skip
        rep, elem = (x.astype(np.int64) for x in a.rank_frames)
        bx, fx, by, fy = rep[src], elem[src], rep[dst], elem[dst]
        dx = a.chunk_image(a.inv[fx], chunk)
        dy = a.chunk_image(a.inv[fy], chunk)
        lo, hi = self.seg_lo[ops], self.seg_hi[ops]
        n_seg, n_chunks = np.int64(self.n_seg), np.int64(c.num_chunks)
        width = hi - lo
        at = np.repeat(np.arange(len(ops)), width)
        seg = ragged_arange(width, lo)
        source = c.chunk_source
        w_key = (by[at] * n_chunks + dy[at]) * n_seg + seg
        order = np.argsort(w_key, kind="stable")
        w_sorted = w_key[order]
        # reads: held initially, or delivered by a direct dependency (the same member)
        held = source[dx] == bx
        ok = held.copy()
        d_ptr = self.cs.dep_ptr.astype(np.int64)
        lengths = d_ptr[ops + 1] - d_ptr[ops]
        if lengths.sum():
            owner = np.repeat(np.arange(len(ops)), lengths)
            j = ragged_arange(lengths, d_ptr[ops])
            b_op, h = self.cs.dep_orbit[j].astype(np.int64), self.cs.dep_elem[j].astype(np.int64)
            delivers = (
                (r.kind[b_op] != OpKind.JOIN)
                & (a.rank_perms[h, r.dst[b_op]] == src[owner])
                & (a.chunk_image(h, r.chunk[b_op]) == chunk[owner])
                & (self.seg_lo[b_op] <= lo[owner])
                & (self.seg_hi[b_op] >= hi[owner])
            )
            ok[owner[delivers]] = True
        w_list = (ops[at][order], a.inv[fy[at]][order])
        for i in np.flatnonzero(~ok).tolist():
            self._held_through_ancestor(int(ops[i]), i, bx, dx, fx, lo, hi, w_sorted, w_list)
        # the postcondition: every (rank, chunk, segment) asked for is written somewhere
        needed = self._needed_keys(n_chunks, n_seg)
        got = np.searchsorted(w_sorted, needed)
        found = (got < len(w_sorted)) & (w_sorted[np.minimum(got, len(w_sorted) - 1)] == needed)
        if len(w_sorted) == 0:
            found = np.zeros(len(needed), dtype=bool)
        missing = np.flatnonzero(~found)
        if len(missing):
            k = int(needed[missing[0]])
            b, d = k // n_seg // n_chunks, k // n_seg % n_chunks
            fail("missing-delivery", f"rank {self._rank(int(b))} never receives chunk {int(d)} "
                                     f"({c.describe()})")  # fmt: skip
        dup = int(len(w_key) - len(np.unique(w_key)))
        dup += int(np.count_nonzero(source[dy[at]] == by[at]))
        return dup * self.G

    def _held_through_ancestor(self, op, i, bx, dx, fx, lo, hi, w_sorted, w_list) -> None:
        """Refuse ``op`` (``i``: its row) unless some writer of each canonical buffer it
        reads precedes the member that reads it."""
        c = self.cs.collective
        if c.chunk_source[dx[i]] == bx[i]:
            return
        reader = (op, self.inv[int(fx[i])])
        n_seg, n_chunks = self.n_seg, c.num_chunks
        x = int(self.cs.reps.src[op])
        for sg in range(int(lo[i]), int(hi[i])):
            key = (int(bx[i]) * n_chunks + int(dx[i])) * n_seg + sg
            a = int(np.searchsorted(w_sorted, key, side="left"))
            b = int(np.searchsorted(w_sorted, key, side="right"))
            if a == b:
                self._fail_op("data-not-held", op, f"rank {self._rank(x)} never receives the "
                              "data it sends")  # fmt: skip
            writers = list(zip(w_list[0][a:b].tolist(), w_list[1][a:b].tolist()))
            if not any(self.precedes(w, reader) for w in writers):
                self._fail_op("data-not-held", op, f"the data reaches {self._rank(x)} only "
                              f"through the operation {writers[0]}, which this operation does "
                              "not depend on")  # fmt: skip

    def _needed_keys(self, n_chunks: np.int64, n_seg: np.int64) -> np.ndarray:
        """The canonical (rank, chunk, segment) keys the postcondition asks for, less those
        held initially."""
        c = self.cs.collective
        reps = np.unique(np.asarray(self.rank_rep, dtype=np.int64))
        if c.kind in (CollKind.ALLGATHER, CollKind.ALLREDUCE):
            b = np.repeat(reps, int(n_chunks))
            d = np.tile(np.arange(int(n_chunks), dtype=np.int64), len(reps))
        else:
            post_r, post_c = c.postcondition()
            is_rep = np.zeros(c.num_ranks, dtype=bool)
            is_rep[reps] = True
            keep = is_rep[post_r]
            b, d = post_r[keep].astype(np.int64), post_c[keep].astype(np.int64)
        keep = c.chunk_source[d] != b
        b, d = b[keep], d[keep]
        segs = np.arange(int(n_seg), dtype=np.int64)
        return ((b * n_chunks + d)[:, None] * n_seg + segs[None, :]).ravel()

    def _needed_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The (rank orbit representative, chunk) pairs the postcondition asks for."""
        c = self.cs.collective
        reps = np.unique(np.asarray(self.rank_rep, dtype=np.int64))
        if c.kind in (CollKind.ALLGATHER, CollKind.ALLREDUCE):
            return (np.repeat(reps, c.num_chunks),
                    np.tile(np.arange(c.num_chunks, dtype=np.int64), len(reps)))  # fmt: skip
        post_r, post_c = c.postcondition()
        is_rep = np.zeros(c.num_ranks, dtype=bool)
        is_rep[reps] = True
        keep = is_rep[post_r]
        return post_r[keep].astype(np.int64), post_c[keep].astype(np.int64)

    # ---------------------------------------------------------------- reducing
    def _reducing(self) -> int:
        """Reducing collectives, one orbit of chunks at a time through the compiled executor
        (:mod:`.compact_kernel`); a window it refuses or cannot decide goes through the
        Python executor (:meth:`_reducing_window`), which names the violation."""
        a, r = self.a, self.cs.reps
        G, S = self.G, self.n_seg
        ops = self.order.astype(np.int64)  # (joins too: they cover buffers, see the kernel)
        src, dst, chunk = (r.src[ops].astype(np.int64), r.dst[ops].astype(np.int64),
                           r.chunk[ops].astype(np.int64))  # fmt: skip
        rep, elem = (x.astype(np.int64) for x in a.rank_frames)
        reps = np.unique(rep)
        fx, fy = elem[src], elem[dst]
        window = a.chunk_orbit[chunk]
        ce = a.chunk_elem[chunk]
        lo, hi = self.seg_lo[ops], self.seg_hi[ops]
        width = hi - lo
        at = np.repeat(np.arange(len(ops)), width)
        seg = ragged_arange(width, lo)
        by_window = np.argsort(window[at], kind="stable")  # (rows are in dependency order)
        at, seg = at[by_window], seg[by_window]
        w_row = window[at]
        rb = (np.searchsorted(reps, rep[src])[at] * G + a.mul[a.inv[fx], ce][at]) * S + seg
        wb = (np.searchsorted(reps, rep[dst])[at] * G + a.mul[a.inv[fy], ce][at]) * S + seg
        carry = a.mul[a.inv[fy], fx][at]
        kind = r.kind[ops][at].astype(np.int64)
        own = np.repeat(reps, G * S)
        need_b, need_d = self._needed_pairs()
        post_w = a.chunk_orbit[need_d]
        post = ((np.searchsorted(reps, need_b) * G + a.chunk_elem[need_d])[:, None] * S
                + np.arange(S)[None, :]).reshape(len(need_b), S)  # fmt: skip
        by_post = np.argsort(post_w, kind="stable")
        post, post_w = post[by_post], post_w[by_post]
        n_windows = len(a.chunk_at)
        row_cut = np.searchsorted(w_row, np.arange(n_windows + 1))
        post_cut = np.searchsorted(post_w, np.arange(n_windows + 1))
        kernel = compiled_compact_window()
        walk = walk_arrays()
        dep = (np.asarray(self.pos, dtype=np.int64), np.asarray(self.depth, dtype=np.int64),
               self.cs.dep_ptr.astype(np.int64), self.cs.dep_orbit.astype(np.int64),
               self.cs.dep_elem.astype(np.int64), a.mul.astype(np.int64),
               a.inv.astype(np.int64), np.int64(G))  # fmt: skip
        rank_perms = a.rank_perms.astype(np.int64)
        redundant = 0
        incomplete = None  # the first window that only misses its postcondition
        for w in range(n_windows):
            i0, i1 = int(row_cut[w]), int(row_cut[w + 1])
            p0, p1 = int(post_cut[w]), int(post_cut[w + 1])
            if i0 == i1 and p0 == p1:
                continue
            status, row, extra = kernel(
                ops[at[i0:i1]], kind[i0:i1], rb[i0:i1], wb[i0:i1],
                a.inv[fx][at[i0:i1]], a.inv[fy][at[i0:i1]], carry[i0:i1], own,
                np.int64(self.n_ranks), rank_perms, post[p0:p1].ravel(), *dep, *walk,
            )  # fmt: skip
            if status == PASS:
                redundant += int(extra)
                continue
            if status == FAIL and row < 0:  # (as the explicit verifier: every execution
                incomplete = w if incomplete is None else incomplete  # rule, then the
                continue  # postcondition)
            extra = self._reducing_window(w)  # names the violation
            if status == FAIL:
                raise CollsynthError(
                    "internal error: the compiled compact reduction executor refused an orbit "
                    "of chunks that the Python executor accepts"
                )
            redundant += extra
        if incomplete is not None:
            self._reducing_window(incomplete)
            raise CollsynthError(
                "internal error: the compiled compact reduction executor found an incomplete "
                "reduction that the Python executor does not"
            )
        return redundant * self.G

    def _reducing_window(self, window: int) -> int:
        """The Python executor on the representatives of one orbit of chunks (see
        :meth:`_reducing`): the number of redundant copies, or the violation in words."""
        c = self.cs.collective
        n = self.n_ranks
        rank_perms = self.a.rank_perms
        mul = self.mul_list
        value: dict[tuple[int, int, int], np.ndarray] = {}
        writes: dict[tuple[int, int, int], list[tuple[tuple[int, int], bool]]] = {}
        reads: dict[tuple[int, int, int], list[tuple[int, int]]] = {}

        def content(key):
            got = value.get(key)
            if got is None:
                got = np.zeros(n, dtype=bool)
                got[key[0]] = True
            return got

        redundant = 0
        for op, x, y, ch, kind, lo, hi in self._ops(window):
            bx, dx, fx = self.frame(x, ch)
            by, dy, fy = self.frame(y, ch)
            reader, writer = (op, self.inv[fx]), (op, self.inv[fy])
            is_copy = kind == OpKind.COPY
            # contributions seen from x's frame into y's: rank i of x's frame is fx(i),
            # which is inv(fy)(fx(i)) in y's
            carry = rank_perms[mul[self.inv[fy]][fx]]
            for sg in range(lo, hi):
                rk, wk = (bx, dx, sg), (by, dy, sg)
                if rk == wk:
                    self._fail_op("race", op, "reads the data that another operation of its "
                                  "orbit writes (no dependency orders them)")  # fmt: skip
                for w, _ in writes.get(rk, ()):
                    if not self.precedes(w, reader):
                        self._race(op, w, x, "reads")
                v = np.zeros(n, dtype=bool)
                v[carry[content(rk)]] = True
                reads.setdefault(rk, []).append(reader)
                for rd in reads.get(wk, ()):
                    if not self.precedes(rd, writer):
                        self._race(op, rd, y, "writes")
                keep: list[tuple[tuple[int, int], bool]] = []
                for w, w_copy in writes.get(wk, ()):
                    if self.precedes(w, writer):
                        if not is_copy and w_copy:
                            keep.append((w, w_copy))
                        continue
                    if is_copy or w_copy:
                        self._race(op, w, y, "overwrites")
                    keep.append((w, w_copy))
                cur = content(wk)
                if is_copy:
                    if np.array_equal(v, cur):
                        redundant += 1
                    value[wk] = v
                else:
                    dup = v & cur
                    if dup.any():
                        ranks = np.flatnonzero(dup)
                        self._fail_op("duplicate-contribution", op, "combines the "
                                      f"contribution of rank(s) {_ranks(ranks)} (seen from "
                                      "its receiver's orbit representative) into data that "
                                      "already has it")  # fmt: skip
                    value[wk] = v | cur
                keep.append((writer, is_copy))
                writes[wk] = keep
                if is_copy:
                    reads[wk] = []
        need_b, need_d = self._needed_pairs()
        mine = self.a.chunk_orbit[need_d] == window
        for b, d in zip(need_b[mine].tolist(), need_d[mine].tolist()):
            for sg in range(self.n_seg):
                got = content((b, d, sg))
                if not got.all():
                    missing = np.flatnonzero(~got)
                    fail("incomplete-reduction", f"rank {self._rank(b)} ends with chunk {d} "
                                                 "missing the contribution of rank(s) "
                                                 f"{_ranks(missing)} ({c.describe()})")  # fmt: skip
        return redundant

    # ---------------------------------------------------------------- failing
    def _rank(self, r: int) -> str:
        return self.cs.topology.rank_name(r)

    def _fail_op(self, check: str, op: int, what: str) -> NoReturn:
        fail(check, f"{self.cs.reps.describe_op(op)}: {what}", op)

    def _race(self, op: int, other: tuple[int, int], rank: int, access: str) -> NoReturn:
        doing = {"reads": "writing", "writes": "reading", "overwrites": "writing"}[access]
        self._fail_op("race", op, f"{access} the data at {self._rank(rank)} while the "
                      f"operation {other} may still be {doing} it (no dependency orders "
                      "them)")  # fmt: skip


def _ranks(ranks: np.ndarray) -> str:
    shown = ", ".join(str(int(r)) for r in ranks[:8])
    return shown + (f", ... ({len(ranks)} in all)" if len(ranks) > 8 else "")


def _segments(r: Schedule) -> tuple[np.ndarray, np.ndarray, int]:
    """Each representative's segments ``[lo, hi)`` of a partition of ``[0, 1)`` shared by
    every chunk (cut at every byte-range boundary any operation uses: finer than the explicit
    verifier's per-chunk cuts, which changes no verdict), and the number of segments."""
    n = r.num_ops
    if r.part_den is None or r.part_lo is None or r.part_hi is None:
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64), 1
    den = r.part_den.astype(np.int64)
    common = 1
    for d in np.unique(den).tolist():
        common = common * d // math.gcd(common, d)
        if common > 1 << 40:
            fail("structure", "byte ranges too fine for the compact verifier (their common "
                              "denominator exceeds 2^40)")  # fmt: skip
    lo = r.part_lo.astype(np.int64) * (common // den)
    hi = r.part_hi.astype(np.int64) * (common // den)
    cuts = np.unique(np.concatenate([[0, common], lo, hi]))
    return np.searchsorted(cuts, lo), np.searchsorted(cuts, hi), len(cuts) - 1


__all__ = ["check_compact", "verify_compact"]
