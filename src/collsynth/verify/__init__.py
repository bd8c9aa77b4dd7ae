"""The independent schedule verifier: symbolic execution of a schedule on its topology.

It knows nothing of how a schedule was made. It checks, in this order, and reports the first
violation in one line naming the operation (``VerificationError.check`` names the rule):

``structure``      fields in range: ranks, chunks, kinds, byte ranges, dependency ids;
                   reduce operations only in reducing collectives.
``route``          every route is a real path of links from the sender's node to the receiver's
                   node whose intermediate nodes are switches/routers, visiting no node twice.
``group``          (in-network groups) a multicast's or in-switch reduction's members agree,
                   and their routes form a tree that parts or meets only at capable switches.
``dependency-cycle`` the dependencies form no cycle.
``link-order``     a planned per-link order lists exactly the operations that use the link and,
                   together with the dependencies, cannot deadlock.
``step-order``     an operation's step is later than the steps of the operations it depends on
                   (a paced schedule's pacing dependencies apart: two transfers of one sender
                   in the order of a link they share, ``meta["link_order"]["pacing"]``).
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

One module per part (each check a function over a :class:`~.context.Context`):
:mod:`.structure`, :mod:`.routes`, :mod:`.groups`, :mod:`.order` (dependency cycles, link
orders, steps), :mod:`.timing` (causality, capacity), :mod:`.segments` (unmoved chunks, byte
segments), :mod:`.copying` and :mod:`.reducing` (the executions, with :mod:`.ancestry` and the
compiled window :mod:`.kernel`), and :mod:`.driver`, which runs them in this order.
"""

from ..errors import VerificationError
from .context import VerifyReport
from .driver import check_schedule, ensure_verified, verify
from .reducing import REDUCE_ENGINES

__all__ = [
    "REDUCE_ENGINES",
    "VerificationError",
    "VerifyReport",
    "check_schedule",
    "ensure_verified",
    "verify",
]
