"""The ``structure`` rule: every field of the schedule in range (ranks, chunks, kinds, byte
ranges, dependency ids), and reduce operations only in reducing collectives."""

from __future__ import annotations

from ..schedule.dag import owners
from ..schedule.ir import OpKind
from .context import Context, fail, first_true


def check_structure(ctx: Context) -> None:
    s, t, c, n = ctx.schedule, ctx.topology, ctx.collective, ctx.num_ops
    if c.num_ranks != t.num_ranks:
        fail(
            "structure",
            f"collective has {c.num_ranks} ranks but topology "
            f"{t.name!r} has {t.num_ranks} compute nodes",
        )
    for name in ("dst", "chunk", "kind"):
        if len(getattr(s, name)) != n:
            fail(
                "structure",
                f"operation column {name!r} has {len(getattr(s, name))} entries for {n} operations",
            )
    if len(s.route_ptr) != n + 1 or len(s.dep_ptr) != n + 1:
        fail("structure", "route/dependency index arrays do not match the operation count")
    for name in ("start", "duration", "step", "part_lo", "part_hi", "part_den"):
        col = getattr(s, name)
        if col is not None and len(col) != n:
            fail(
                "structure",
                f"operation column {name!r} has {len(col)} entries for {n} operations",
            )
    nr = t.num_ranks
    bad = first_true((s.src < 0) | (s.src >= nr))
    if bad is not None:
        fail("structure", f"op {bad}: source rank {int(s.src[bad])} does not exist", bad)
    bad = first_true((s.dst < 0) | (s.dst >= nr))
    if bad is not None:
        fail("structure", f"op {bad}: destination rank {int(s.dst[bad])} does not exist", bad)
    join = s.kind == OpKind.JOIN
    bad = first_true((s.src == s.dst) & ~join)
    if bad is not None:
        fail("structure", f"op {bad}: sends from rank {int(s.src[bad])} to itself", bad)
    bad = first_true((s.src != s.dst) & join)
    if bad is not None:
        fail(
            "structure",
            f"op {bad}: a join names two ranks ({int(s.src[bad])} and {int(s.dst[bad])}); "
            f"it waits at one rank",
            bad,
        )
    bad = first_true((s.chunk < 0) | (s.chunk >= c.num_chunks))
    if bad is not None:
        fail(
            "structure",
            f"op {bad}: chunk {int(s.chunk[bad])} does not exist "
            f"({c.describe()} has {c.num_chunks})",
            bad,
        )
    bad = first_true((s.kind < OpKind.COPY) | (s.kind > OpKind.JOIN))
    if bad is not None:
        fail("structure", f"op {bad}: unknown kind {int(s.kind[bad])}", bad)
    if not c.reduces:
        bad = first_true(s.kind == OpKind.REDUCE)
        if bad is not None:
            fail(
                "structure",
                f"{s.describe_op(bad)}: reduce operation in a non-reducing collective ({c.name})",
                bad,
            )
    if s.part_den is not None:
        den, lo, hi = s.part_den, s.part_lo, s.part_hi
        if lo is None or hi is None:
            fail(
                "structure",
                "operation column 'part_den' is given without 'part_lo' and 'part_hi'",
            )
        bad = first_true((den < 1) | (lo < 0) | (hi <= lo) | (hi > den))
        if bad is not None:
            fail(
                "structure",
                f"op {bad}: byte range {int(lo[bad])}/"
                f"{int(den[bad])}..{int(hi[bad])}/"
                f"{int(den[bad])} is not inside the chunk",
                bad,
            )
    if len(s.dep_ids):
        owner = owners(s.dep_ptr)
        bad_edge = first_true((s.dep_ids < 0) | (s.dep_ids >= n))
        if bad_edge is not None:
            op = int(owner[bad_edge])
            fail(
                "structure",
                f"op {op}: depends on op {int(s.dep_ids[bad_edge])}, which does not exist",
                op,
            )
        bad_edge = first_true(s.dep_ids == owner)
        if bad_edge is not None:
            op = int(owner[bad_edge])
            fail("dependency-cycle", f"op {op} depends on itself", op)
    ctx.checks.append("structure")
