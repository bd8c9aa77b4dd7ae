"""The execution of a reducing collective: the operations run in dependency order on
per-(rank, segment) buffers, checking ``race`` (reads and writes of one buffer are ordered by
dependencies; overwriting copies are ordered with every other write, while concurrent reduces
into one buffer are allowed: the combine is associative and commutative),
``duplicate-contribution`` (a reduction never combines the same rank's contribution twice),
``data-not-held`` and the postcondition ``incomplete-reduction`` (every rank ends with every
contribution, once).

Two engines run a window of segments: the Python executor here, which names a violation in
words, and the compiled one (:mod:`.kernel`), which only decides and hands a failing window to
the Python one. ``engine``: ``"python"``, ``"compiled"`` (the compiled one first, for every
schedule) or ``"auto"`` (the compiled one from ``COMPILED_REDUCE_MIN_OPS`` operations on).
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from ..errors import CollsynthError
from ..schedule.dag import ragged_arange
from ..schedule.ir import OpKind
from .ancestry import Ancestry
from .context import Context, fail
from .kernel import PASS, compiled_run_window
from .segments import Segments

#: the reduction engines (``verify(..., reduce_engine=...)``)
REDUCE_ENGINES = ("auto", "compiled", "python")

#: with ``"auto"``, reducing schedules with at least this many operations run each window
#: through the compiled executor first, and the Python one only on a failure
COMPILED_REDUCE_MIN_OPS = 20_000

#: the most (rank, segment) buffers a reducing schedule's execution holds at once (a window of
#: segments at a time beyond it; a buffer holds a bit mask of up to one bit per rank)
REDUCE_WINDOW_BUFFERS = 1 << 18


def execute_reducing(
    ctx: Context, order: np.ndarray, pos: np.ndarray, seg: Segments, engine: str = "auto"
) -> int:
    """Reducing collectives: execute the operations in dependency order, checking races and
    duplicate contributions; then every rank must end with the full reduction. The number
    of copies that deliver a value the receiver already holds. ``engine``: one of
    ``REDUCE_ENGINES`` (see the module's docstring)."""
    anc = Ancestry(ctx.schedule, order, pos)
    # Buffers of different segments never interact, so large schedules run a window of
    # segments at a time (each window's operations in dependency order), which bounds
    # the buffers held at once; a schedule that fits one window runs as one.
    per = max(1, REDUCE_WINDOW_BUFFERS // max(1, ctx.collective.num_ranks))
    redundant = 0
    first_w = seg.op_lo[order] // per
    if ctx.schedule.part_den is None:  # one segment per operation (memory at scale)
        last_w = first_w
    else:
        last_w = (np.maximum(seg.op_hi, seg.op_lo + 1)[order] - 1) // per
    grouped = None
    if per < seg.total and np.array_equal(first_w, last_w):
        # every operation within one window: each window's operations by one stable sort
        by_w = np.argsort(first_w, kind="stable")
        bounds = np.searchsorted(first_w[by_w], np.arange(-(-seg.total // per) + 1))
        grouped = (order[by_w], bounds)
    use_kernel = engine == "compiled" or (
        engine == "auto" and ctx.num_ops >= COMPILED_REDUCE_MIN_OPS
    )
    kernel = _WindowKernel(ctx, seg, anc) if use_kernel else None
    for s0 in range(0, max(1, seg.total), per):
        s1 = min(s0 + per, seg.total)
        window = order
        if grouped is not None:
            w = s0 // per
            window = grouped[0][grouped[1][w] : grouped[1][w + 1]]
        elif per < seg.total:
            window = order[(first_w <= (s1 - 1) // per) & (last_w >= s0 // per)]
        if kernel is not None:
            status, extra = kernel.run(window, s0, s1)
            if status == PASS:
                redundant += extra
                continue
        value: dict[int, int] = {}  # the Python executor: names the violation
        redundant += execute_window(ctx, seg, anc, value, window, s0, s1)
        check_reduced(ctx, seg, value, s0, s1)
        if kernel is not None:
            raise CollsynthError(
                f"internal error: the compiled reduction executor refused segments "
                f"{s0}..{s1 - 1} of {ctx.collective.describe()}, which the Python executor "
                f"accepts"
            )
    ctx.checks.extend(["data-not-held", "race", "duplicate-contribution", "postcondition"])
    return redundant


def execute_window(
    ctx: Context,
    seg: Segments,
    anc: Ancestry,
    value: dict[int, int],
    order: np.ndarray,
    s0: int,
    s1: int,
) -> int:
    """Execute the operations in dependency order on the per-(rank, segment) buffers, keyed
    ``rank * segments + segment``; ``value`` gets the bit mask of the ranks whose
    contributions each buffer holds (absent: the rank's own). An operation reads the
    sender's buffer after every write to it, and writes the receiver's after every read of
    it and, when either overwrites, after every other write; a copy overwrites, a reduce
    combines (refusing a contribution already there). The number of redundant copies.
    Only the operations ``order`` and the segments ``s0 <= seg < s1`` are executed."""
    s, nseg = ctx.schedule, seg.total
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
    idsl = anc.ids[ragged_arange(dep_hi - dep_lo, dep_lo)].tolist()
    dep_at = np.concatenate(([0], np.cumsum(dep_hi - dep_lo))).tolist()
    walk = anc.query
    redundant = 0
    for i, (op, src, dst, is_copy, lo_op, hi_op) in enumerate(
        zip(
            ops,
            s.src[order].tolist(),
            s.dst[order].tolist(),
            is_copy_op.tolist(),
            seg.op_lo[order].tolist(),
            seg.op_hi[order].tolist(),
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

        for sg in range(max(lo_op, s0), min(hi_op, s1)):
            rk = src * nseg + sg
            for w in writes.get(rk, ()):
                if not is_ancestor(w, op):
                    _race(ctx, op, w, src, "reads")
            v = value.get(rk, 1 << src)
            reads.setdefault(rk, []).append(op)
            wk = dst * nseg + sg
            for r in reads.get(wk, ()):
                if not is_ancestor(r, op):
                    _race(ctx, op, r, dst, "writes")
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
                    _race(ctx, op, w, dst, "overwrites")
                keep.append(w)
            cur = value.get(wk, 1 << dst)
            if is_copy:
                if v == cur:
                    redundant += 1
                value[wk] = v
            else:
                dup = v & cur
                if dup:
                    _duplicate(ctx, op, dup, dst)
                value[wk] = v | cur
            keep.append(op)
            writes[wk] = keep
            if is_copy:  # later writes must follow this copy, hence these reads
                reads[wk] = []
    return redundant


def _race(ctx: Context, op: int, other: int, rank: int, access: str) -> NoReturn:
    """Fail: ``op`` and ``other`` use the data at ``rank`` with no dependency between them.
    ``access``: ``reads`` (``other`` may still be writing it), ``writes`` (``other`` may
    still be reading it) or ``overwrites`` (both write it and one of them overwrites)."""
    s, t = ctx.schedule, ctx.topology
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
    fail("race", message, op)


def _duplicate(ctx: Context, op: int, dup: int, rank: int) -> NoReturn:
    """Fail: ``op`` combines into the data at ``rank`` the contributions ``dup`` (a bit mask
    of ranks) it already has."""
    fail(
        "duplicate-contribution",
        f"{ctx.schedule.describe_op(op)} combines the contribution of rank(s) "
        f"{_format_ranks(_bits(dup))} into {ctx.topology.rank_name(rank)}, which already "
        f"has it",
        op,
    )


def check_reduced(ctx: Context, seg: Segments, value: dict[int, int], s0: int, s1: int) -> None:
    """Postcondition of a reduction: every rank ends with every contribution in each
    segment ``s0 <= seg < s1`` of the chunks it must hold (``value``: the contributions per
    buffer)."""
    c, t, nseg = ctx.collective, ctx.topology, seg.total
    full = c.full_mask
    post_r, post_c = c.postcondition()
    lo = seg.base[post_c]
    hit = (lo < s1) & (lo + seg.count[post_c] > s0)
    for r, ch in zip(post_r[hit].tolist(), post_c[hit].tolist()):
        base = int(seg.base[ch])
        for sg in range(max(base, s0), min(base + int(seg.count[ch]), s1)):
            v = value.get(r * nseg + sg, 1 << r)
            if v != full:
                missing = _bits(full & ~v)
                fail(
                    "incomplete-reduction",
                    f"rank {t.rank_name(r)} ends with chunk {ch}{seg.note(sg)} "
                    f"missing the contribution of rank(s) {_format_ranks(missing)} "
                    f"({c.describe()})",
                )


class _WindowKernel:
    """The compiled reduction executor (:mod:`collsynth.verify.kernel`) bound to one
    verification: the operation columns, the ancestry arrays and the postcondition sorted by
    chunk, so each window finds its part by bisection."""

    def __init__(self, ctx: Context, seg: Segments, anc: Ancestry):
        s, c = ctx.schedule, ctx.collective
        self.num_ranks = c.num_ranks
        self.seg = seg
        self.anc = anc
        self.src = np.ascontiguousarray(s.src, dtype=np.int64)
        self.dst = np.ascontiguousarray(s.dst, dtype=np.int64)
        self.kind = np.ascontiguousarray(s.kind, dtype=np.int8)
        self.dmark = np.zeros(s.num_ops, dtype=np.int32)  # (stamps wrap before 2**31)
        self.seg_lo = np.ascontiguousarray(seg.op_lo, dtype=np.int64)
        self.seg_hi = np.ascontiguousarray(seg.op_hi, dtype=np.int64)
        post_r, post_c = c.postcondition()
        by_chunk = np.argsort(post_c, kind="stable")
        self.post_r = np.ascontiguousarray(post_r[by_chunk], dtype=np.int64)
        self.post_c = np.ascontiguousarray(post_c[by_chunk], dtype=np.int64)
        self.chunk_end = seg.base + seg.count  # each chunk's segments end here
        self.fn = compiled_run_window()

    def run(self, order: np.ndarray, s0: int, s1: int) -> tuple[int, int]:
        seg, a = self.seg, self.anc
        c_lo = int(np.searchsorted(self.chunk_end, s0, side="right"))
        c_hi = int(np.searchsorted(seg.base, s1, side="left"))
        i0 = int(np.searchsorted(self.post_c, c_lo, side="left"))
        i1 = int(np.searchsorted(self.post_c, c_hi, side="left"))
        chunks = self.post_c[i0:i1]
        base = seg.base[chunks]
        a.rearm()
        status, redundant = self.fn(
            np.ascontiguousarray(order, dtype=np.int64), self.src, self.dst, self.kind,
            self.seg_lo, self.seg_hi, s0, s1, self.num_ranks, self.post_r[i0:i1], base,
            base + seg.count[chunks], a.pos, a.depth, a.ptr, a.ids, a.mark, a.stack, a.stamps,
            self.dmark,
        )  # fmt: skip
        return int(status), int(redundant)


def _bits(mask: int) -> list[int]:
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def _format_ranks(ranks: list[int]) -> str:
    if len(ranks) > 8:
        return ", ".join(map(str, ranks[:8])) + f", ... ({len(ranks)} in all)"
    return ", ".join(map(str, ranks))
