"""The verifier's entry points: the checks in their documented order (the rule table in
:mod:`collsynth.verify`), one function each over a :class:`~.context.Context`."""

from __future__ import annotations

from ..errors import CollsynthError, VerificationError
from ..schedule.compact import CompactSchedule
from ..schedule.ir import Schedule
from .context import Context, VerifyReport
from .copying import execute_copying
from .groups import check_groups
from .order import check_link_order, check_steps, dependency_order
from .reducing import REDUCE_ENGINES, execute_reducing
from .routes import check_routes
from .segments import build_segments, check_chunks_moved
from .structure import check_structure
from .timing import check_timing


def verify(schedule: Schedule, *, reduce_engine: str = "auto") -> VerifyReport:
    """Verify ``schedule``; raise :class:`VerificationError` at the first violation.

    ``reduce_engine``: how a reducing collective is executed, ``"python"``, ``"compiled"``
    (the compiled executor first, the Python one naming a violation it finds) or ``"auto"``
    (the compiled one for large schedules); every engine gives the same verdict."""
    if reduce_engine not in REDUCE_ENGINES:
        raise CollsynthError(
            f"reduce engine {reduce_engine!r} is not one of {', '.join(REDUCE_ENGINES)}"
        )
    ctx = Context.of(schedule)
    check_structure(ctx)
    check_routes(ctx)
    if schedule.group is not None:
        check_groups(ctx)
    order, pos = dependency_order(ctx)
    if schedule.link_order:
        check_link_order(ctx)
    if schedule.step is not None:
        check_steps(ctx)
    finish = None
    if schedule.start is not None:
        finish = check_timing(ctx)
    check_chunks_moved(ctx)
    seg = build_segments(ctx)
    if ctx.collective.reduces:
        redundant = execute_reducing(ctx, order, pos, seg, reduce_engine)
    else:
        redundant = execute_copying(ctx, order, pos, seg)
    return VerifyReport(
        True, ctx.num_ops, int(len(schedule.route_links)), ctx.checks, redundant, finish
    )


def check_schedule(
    schedule: Schedule | CompactSchedule, *, reduce_engine: str = "auto"
) -> VerifyReport:
    """Like :func:`verify` but returns a failed report instead of raising (a compact
    schedule: :func:`collsynth.verify.compact.check_compact`)."""
    if isinstance(schedule, CompactSchedule):
        from .compact import check_compact

        return check_compact(schedule)
    try:
        return verify(schedule, reduce_engine=reduce_engine)
    except VerificationError as e:
        return VerifyReport(
            False,
            schedule.num_ops,
            int(len(schedule.route_links)),
            error=str(e),
            error_check=e.check,
            error_op=e.op,
        )


def ensure_verified(schedule: Schedule | CompactSchedule) -> VerifyReport:
    """Verify before a schedule leaves collsynth (a compact one in its compact form);
    re-raise as a one-line CollsynthError."""
    try:
        if isinstance(schedule, CompactSchedule):
            from .compact import verify_compact

            return verify_compact(schedule)
        return verify(schedule)
    except VerificationError as e:
        algo = schedule.meta.get("algorithm", "?")
        raise CollsynthError(
            f"internal check failed: the {algo} schedule does not verify ({e})"
        ) from None
