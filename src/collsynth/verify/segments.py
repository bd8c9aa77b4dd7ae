"""Chunks as the verifier executes them: whether every chunk that must move is moved at all
(checked first in a collective with more than ``MANY_CHUNKS`` chunk-rank pairs, without
per-chunk state), and the atomic byte segments of each chunk (cut at every byte-range boundary
an operation uses) that the executions of :mod:`.copying` and :mod:`.reducing` track."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from ..arrays import unique
from ..collective import CollKind
from ..schedule.ir import OpKind
from .context import Context, fail

#: Above this many (chunk, rank) pairs, chunks that no operation moves are looked for first.
MANY_CHUNKS = 1 << 20


@dataclass
class Segments:
    """The chunks cut into segments, numbered chunk by chunk: chunk ``c`` is segments
    ``base[c] .. base[c] + count[c] - 1``; operation ``o`` moves segments ``op_lo[o] ..
    op_hi[o] - 1``."""

    total: int
    base: np.ndarray
    count: np.ndarray
    op_lo: np.ndarray
    op_hi: np.ndarray

    def chunk_of(self, seg: int) -> int:
        return int(np.searchsorted(self.base, seg, side="right") - 1)

    def note(self, seg: int) -> str:
        """`` (segment i of k)`` for a chunk cut in several, else nothing."""
        ch = self.chunk_of(seg)
        if self.count[ch] == 1:
            return ""
        return f" (segment {seg - int(self.base[ch])} of {int(self.count[ch])})"


def check_chunks_moved(ctx: Context) -> None:
    """In a big collective, every chunk some rank lacks is moved by at least one operation
    (checked without per-chunk arrays: the declared chunk count may be absurd)."""
    s, c = ctx.schedule, ctx.collective
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
    fail(
        check,
        f"no operation moves chunk {ch} ({c.describe()} has {c.num_chunks} "
        f"chunks; the schedule moves {len(moved)})",
    )


def build_segments(ctx: Context) -> Segments:
    """Split chunks into atomic segments at every byte-range boundary used by an op."""
    s, c = ctx.schedule, ctx.collective
    if s.part_den is None:
        return Segments(
            c.num_chunks,
            np.arange(c.num_chunks, dtype=np.int64),
            np.ones(c.num_chunks, dtype=np.int64),
            s.chunk.copy(),
            s.chunk + 1,
        )
    assert s.part_lo is not None and s.part_hi is not None  # structure: given together
    lcm = np.ones(c.num_chunks, dtype=np.int64)
    for op, (ch, den) in enumerate(zip(s.chunk.tolist(), s.part_den.tolist())):
        m = math.lcm(int(lcm[ch]), int(den))
        if m >= 2**62:
            fail(
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
    count = np.ones(c.num_chunks, dtype=np.int64)
    cuts: dict[int, list[int]] = {}
    for ch, p in points.items():
        p.add(0)
        p.add(int(lcm[ch]))
        cuts[ch] = sorted(p)
        count[ch] = len(cuts[ch]) - 1
    base = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    op_lo = np.empty(ctx.num_ops, dtype=np.int64)
    op_hi = np.empty(ctx.num_ops, dtype=np.int64)
    for op, (ch, a, b) in enumerate(zip(s.chunk.tolist(), lo.tolist(), hi.tolist())):
        cut = cuts[ch]
        first = int(base[ch])
        op_lo[op] = first + bisect.bisect_left(cut, a)
        op_hi[op] = first + bisect.bisect_left(cut, b)
    return Segments(int(count.sum()), base, count, op_lo, op_hi)
