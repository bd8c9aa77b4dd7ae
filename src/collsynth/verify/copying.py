"""The execution of a non-reducing collective: data is immutable, so only ``data-not-held``
(every operation sends data its sender holds: initially, or delivered by an operation it
transitively depends on) and the postcondition ``missing-delivery`` (every rank ends with what
the collective requires) matter; deliveries of data a rank already holds are counted."""

from __future__ import annotations

import numpy as np

from ..arrays import unique
from ..schedule.dag import owners, ragged_arange
from ..schedule.ir import OpKind
from .ancestry import Ancestry
from .context import Context, fail
from .segments import Segments


def execute_copying(ctx: Context, order: np.ndarray, pos: np.ndarray, seg: Segments) -> int:
    """Non-reducing collectives: data is immutable, so only 'held before sent' matters.
    ``order``/``pos``: the dependency order and each operation's place in it. The number of
    deliveries to a rank that already had the data."""
    s, c, n = ctx.schedule, ctx.collective, ctx.num_ops
    nseg = seg.total
    src_of_chunk = c.chunk_source
    seg_chunk = np.repeat(np.arange(c.num_chunks), seg.count)
    initial_holder = src_of_chunk[seg_chunk]  # per segment
    # fast path: ops whose sender holds the data initially, or that directly depend on an
    # op delivering exactly the segments they send to their sender
    join = s.kind == OpKind.JOIN
    ok = (src_of_chunk[s.chunk] == s.src) | join  # (a join sends nothing)
    if len(s.dep_ids):
        owner = owners(s.dep_ptr)
        d = s.dep_ids
        match = (
            (s.dst[d] == s.src[owner])
            & ~join[d]
            & (seg.op_lo[d] <= seg.op_lo[owner])
            & (seg.op_hi[d] >= seg.op_hi[owner])
        )
        if match.any():
            ok[owner[match]] = True
    # who writes each (rank, segment): sorted keys for the slow path and the postcondition
    seg_len = np.where(join, 0, seg.op_hi - seg.op_lo)
    w_op = np.repeat(np.arange(n), seg_len)
    w_seg = ragged_arange(seg_len, seg.op_lo)
    w_key = s.dst[w_op] * nseg + w_seg
    by_key = np.argsort(w_key, kind="stable")
    w_key_sorted = w_key[by_key]
    w_op_sorted = w_op[by_key]
    ancestry: Ancestry | None = None  # made on first need
    for op in np.flatnonzero(~ok).tolist():
        sender = int(s.src[op])
        for sg in range(int(seg.op_lo[op]), int(seg.op_hi[op])):
            if initial_holder[sg] == sender:
                continue
            key = sender * nseg + sg
            lo = np.searchsorted(w_key_sorted, key, side="left")
            hi = np.searchsorted(w_key_sorted, key, side="right")
            writers = w_op_sorted[lo:hi].tolist()
            if not writers:
                fail(
                    "data-not-held",
                    f"{s.describe_op(op)}: rank "
                    f"{ctx.topology.rank_name(sender)} never receives the data "
                    f"it sends",
                    op,
                )
            if ancestry is None:
                ancestry = Ancestry(s, order, pos)
            if not any(ancestry.query(w, op) for w in writers):
                w = writers[0]
                fail(
                    "data-not-held",
                    f"{s.describe_op(op)}: the data reaches "
                    f"{ctx.topology.rank_name(sender)} only through op {w}, "
                    f"which this operation does not depend on",
                    op,
                )
    ctx.checks.append("data-not-held")
    _check_delivered(ctx, seg, initial_holder, w_key_sorted)
    ctx.checks.append("postcondition")
    # deliveries to a rank that already had the data (initially or earlier): wasteful only
    uniq = len(unique(w_key)) if len(w_key) else 0
    redundant = int(len(w_key) - uniq)
    redundant += int(np.count_nonzero(initial_holder[w_seg] == s.dst[w_op]))
    return redundant


def _check_delivered(
    ctx: Context, seg: Segments, initial_holder: np.ndarray, w_key_sorted: np.ndarray
) -> None:
    """The postcondition: every rank holds every segment it must, initially or delivered
    (``w_key_sorted``: the (rank, segment) keys written, sorted)."""
    c, nseg = ctx.collective, seg.total
    post_r, post_c = c.postcondition()
    counts = seg.count[post_c]
    pr = np.repeat(post_r, counts)
    pc = np.repeat(post_c, counts)
    ps = ragged_arange(counts, seg.base[post_c])
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
        fail(
            "missing-delivery",
            f"rank {ctx.topology.rank_name(int(pr[i]))} never receives "
            f"chunk {int(pc[i])}{seg.note(int(ps[i]))} "
            f"({c.describe()})",
        )
