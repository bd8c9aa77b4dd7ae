"""Lower a schedule IR to MSCCL XML, the algorithm format of the MSCCL runtimes.

Layout decisions
----------------

**Order.** Operations are put in one linear extension ``L`` of the dependency DAG and of each
sender-receiver pair's link order (:meth:`Schedule.pair_order_edges`; ties by planned start
time, then step, then op id). Every thread block lists its steps in ``L`` order and every
(sender, receiver, channel) FIFO carries its transfers in ``L`` order, and every local
dependency points to a step earlier in ``L``; running the operations one after the other in
``L`` order is therefore a valid execution with one-slot FIFOs, so the program cannot deadlock.
With one channel (``K = 1``, the default whenever the steps fit) and one instance, each pair's
transfers go through one thread block and one FIFO in ``L`` order, which is the pair's link
order: the runtime realizes the order the simulator's realized model (``order="fair"``) assumes.
With more channels or instances a pair's transfers are spread over several FIFOs that share the
link, and only each FIFO's own order holds.

**Steps.** Operation ``X`` (``a -> g``) becomes a send half at ``a`` and a receive half at ``g``:
``s`` and ``r`` (copy) or ``rrc`` (reduce: receive, combine with the local value, store).
A receive of ``X`` at ``g`` is fused with a send ``Y`` from ``g`` of the same chunk when ``Y``
depends on ``X`` and all of ``Y``'s dependencies come no later than ``X`` (``Y`` is then moved
right after ``X`` in ``L``): ``rcs`` for a copy, ``rrcs`` for a reduce, ``rrs`` for a reduce
whose partial result is not needed at ``g`` afterwards (``g`` is not a destination of the chunk
and no later operation touches it there).

**Buffers** (one MSCCL chunk per collective chunk; ``nchunksperloop`` is the number of chunks
of the larger buffer):

============== ============== ===================== =================================
collective     nchunksperloop input of chunk c       output of chunk c
============== ============== ===================== =================================
allgather      n*C            i[c mod C] (in-place:  o[c]
                              o[c])
reducescatter  n*C            i[c] (contribution)    o[c mod C] at rank c//C (in-place: i[c])
allreduce      n*C            i[c]                   o[c] (in-place: i[c])
alltoall       n*C            i[d*C+j] at s          o[s*C+j] at d  (out-of-place only)
broadcast      C              i[c] at root (ip: o)   o[c]
reduce         C              i[c]                   o[c] at root (in-place: i[c])
============== ============== ===================== =================================

A rank that receives a chunk it is not a destination of (a relay; for reductions, a partial
sum) keeps it in a scratch slot (``s``), one per (rank, chunk), numbered in order of first use.
A destination that ends with its data still in the input buffer gets a final ``cpy``
(out-of-place allgather/broadcast/alltoall's own chunk), appended to the GPU's shortest thread
block (a local thread block ``send=-1 recv=-1`` only if the GPU has no other).

**Channels and thread blocks.** Fused chains keep the channel of their first operation; an
operation that starts a chain gets channel ``k mod K``, ``k`` being its position among the
chain starts on its (sender, receiver) pair in ``L`` order. On each GPU and channel, each send
peer and each receive peer gets exactly one thread block (so there is at most one thread block
per (channel, peer, direction)); a fused step pins its receive peer and send peer to one thread
block, other receive and send roles are paired in peer order. ``K`` is automatic (smallest
power of two from 1 that keeps every thread block within the runtime's step limit) unless
given. ``instances`` replicates the program: chunk ``x`` of instance ``t`` becomes ``x*N+t``,
channel ``ch`` becomes ``ch + t*K``.

**Dependencies.** For every (GPU, chunk), a read (send) waits for the latest earlier write; for
reductions a write waits for the reads since the latest earlier write (or that write). Waits
already implied by thread-block order, send -> receive matching (also across GPUs) and the
waits kept so far are dropped (vector clocks along the global order); of several waits on one
thread block the latest is kept; the first wait goes on the step, the others on ``nop`` steps
just before it; waited-on steps get ``hasdep="1"``.

Modules
-------

This module holds the entry point (:func:`to_msccl_xml`: options, refusals, the channel counts
to try); :mod:`.lowering` what the MSCCL++ exporter shares (buffer layout, order, whole
chunks); :mod:`.msccl_options` the options and the runtimes' limits; :mod:`.msccl_order` the
order and fusion; :mod:`.msccl_passes` the passes for one channel count (each a function of
what it reads, returning what it makes); :mod:`.msccl_write` the XML text.
"""

from __future__ import annotations

import numpy as np

from ..errors import CollsynthError
from ..schedule.ir import Schedule
from .lowering import (
    MAX_REFINE,
    buffer_layout,
    refine_parts,
    refuse_groups,
    whole_chunks,
)
from .msccl_options import (
    DIALECTS,
    MAX_CHANNELS,
    MAX_CHILDREN,
    MAX_NODES,
    MAX_STEPS,
    MAX_TBS_PER_CHANNEL,
    PROTOS,
    MscclOptions,
    msccl_options,
)
from .msccl_order import fuse_order, operation_tables
from .msccl_passes import TooManySteps, lower
from .msccl_write import write_xml


def to_msccl_xml(
    schedule: Schedule,
    dialect: str = "msccl",
    proto: str = "Simple",
    instances: int = 1,
    min_bytes: int | None = None,
    max_bytes: int | None = None,
    inplace: bool = False,
    channels: int | None = None,
    max_tbs: int = 108,
    name: str | None = None,
    verify: bool = True,
) -> str:
    """Lower ``schedule`` to MSCCL XML text (deterministic).

    ``dialect``: ``msccl`` (old fork: ``reduce_scatter``, no ``outofplace``, 256 steps per
    thread block) or ``executor`` (``reducescatter``, ``outofplace``/``minBytes``/``maxBytes``
    required, 64 steps per thread block). ``channels``: channels per instance (``K`` above;
    default automatic). ``max_tbs``: most thread blocks per GPU (co-residency; 108 = A100 SMs).
    Raises :class:`CollsynthError` with a one-line message for what cannot be exported.
    """
    options = msccl_options(
        dialect, proto, instances, min_bytes, max_bytes, inplace, channels, max_tbs, name, verify
    )
    schedule = _prepare(schedule, options)
    candidates = _channel_candidates(schedule, options)
    layout = buffer_layout(schedule.collective, options.inplace)
    ops = operation_tables(schedule)
    fused = fuse_order(schedule, ops)
    last_err = None
    for k in candidates:
        try:
            program = lower(
                ops,
                fused,
                layout,
                k,
                dialect=options.dialect,
                instances=options.instances,
                max_tbs=options.max_tbs,
            )
            return write_xml(schedule, layout, program, options)
        except TooManySteps as e:
            last_err = e
    assert last_err is not None
    if options.channels is not None:
        raise CollsynthError(
            f"cannot export: {last_err} with {candidates[-1]} channel(s) per "
            f"instance (try more channels, or fewer chunks)"
        )
    raise CollsynthError(
        f"cannot export: {last_err} even with {candidates[-1]} channel(s) "
        f"per instance (try fewer chunks)"
    )


def _prepare(schedule: Schedule, options: MscclOptions) -> Schedule:
    """Reject what cannot be exported, refine byte ranges into chunks and verify the result."""
    buffer_layout(schedule.collective, options.inplace)  # early "unsupported" errors
    refuse_groups(schedule, "MSCCL XML")
    schedule = whole_chunks(schedule)
    if schedule.num_ops == 0:
        raise CollsynthError("cannot export an empty schedule to MSCCL XML")
    channels = options.channels
    _check_channels(options)  # before the step floor divides by it
    _check_step_floor(
        schedule, options.dialect, options.instances if channels is None else None, channels
    )
    if options.verify:
        from ..verify import ensure_verified

        ensure_verified(schedule)
    return schedule


def _check_channels(options: MscclOptions) -> None:
    """A given channel count is a positive integer within MSCCL's channel limit."""
    channels, instances = options.channels, options.instances
    if channels is None:
        return
    if isinstance(channels, bool) or not isinstance(channels, (int, np.integer)) or channels < 1:
        raise CollsynthError(f"channels must be a positive integer, got {channels!r}")
    if channels * instances > MAX_CHANNELS:
        raise CollsynthError(
            f"{channels} channels x {instances} instances exceed the "
            f"{MAX_CHANNELS}-channel limit of MSCCL"
        )


def _channel_candidates(schedule: Schedule, options: MscclOptions) -> list[int]:
    """The channel counts per instance to try, fewest first (just ``channels`` if given)."""
    channels, instances = options.channels, options.instances
    max_ch = MAX_CHANNELS // instances
    if channels is not None:
        _check_channels(options)
        return [int(channels)]
    # fewer channels than the busiest (GPU, peer) pair's transfers / step limit cannot fit
    floor1, limit, _, _ = step_floor(schedule, options.dialect, channels=1)
    candidates = []
    k = 1
    while k <= max_ch:
        if k * limit >= floor1 or k * 2 > max_ch:
            candidates.append(k)
        k *= 2
    return candidates


def step_floor(
    s: Schedule, dialect: str = "msccl", instances: int = 1, channels: int | None = None
) -> tuple[int, int, int, int]:
    """``(floor, limit, g, p)``: the fewest steps some thread block must hold (transfers from
    GPU ``g`` to ``p`` spread over every channel) and the dialect's step limit."""
    net = s.src != s.dst
    limit = MAX_STEPS[dialect]
    if not bool(np.any(net)):
        return 0, limit, 0, 0
    n = s.topology.num_ranks
    pairs = s.src[net].astype(np.int64) * n + s.dst[net]
    counts = np.bincount(pairs, minlength=n * n)
    worst = int(np.argmax(counts))
    nch = channels if channels is not None else MAX_CHANNELS // max(1, instances)
    g, p = divmod(worst, n)
    return -(-int(counts[worst]) // nch), limit, g, p


def _check_step_floor(
    s: Schedule, dialect: str, instances: int | None, channels: int | None
) -> None:
    """Fail fast when no channel count can fit the step limit.

    A thread block has one send peer and one receive peer, and a GPU has at most one thread
    block per (channel, peer, direction); one step sends or receives at most once. So the
    transfers from GPU ``g`` to peer ``p`` need at least ``ceil(count / channels)`` steps in
    some thread block -- checked before the (much slower) full lowering.
    """
    nch = channels if channels is not None else MAX_CHANNELS // max(1, instances or 1)
    floor, limit, g, p = step_floor(s, dialect, instances or 1, channels)
    if floor > limit:
        raise CollsynthError(
            f"cannot export: GPU {g} sends to GPU {p} so often that a thread "
            f"block needs at least {floor} steps with {nch} channel(s), more "
            f"than the {dialect} limit of {limit} (try fewer chunks or a "
            f"smaller pipeline)"
        )


__all__ = [
    "DIALECTS",
    "MAX_CHANNELS",
    "MAX_CHILDREN",
    "MAX_NODES",
    "MAX_REFINE",
    "MAX_STEPS",
    "MAX_TBS_PER_CHANNEL",
    "PROTOS",
    "MscclOptions",
    "refine_parts",
    "refuse_groups",
    "step_floor",
    "to_msccl_xml",
    "whole_chunks",
]
