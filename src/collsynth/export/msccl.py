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
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from ..arrays import unique
from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..schedule.ir import OpKind, Schedule, ScheduleBuilder

DIALECTS = ("msccl", "executor")
PROTOS = ("Simple", "LL", "LL128")
MAX_CHANNELS = 32
MAX_TBS_PER_CHANNEL = 32
MAX_STEPS = {"msccl": 256, "executor": 64}
MAX_NODES = 4096
MAX_CHILDREN = 1024

_COLL_NAMES = {
    CollKind.ALLGATHER: ("allgather", "allgather"),
    CollKind.REDUCESCATTER: ("reduce_scatter", "reducescatter"),
    CollKind.ALLREDUCE: ("allreduce", "allreduce"),
    CollKind.ALLTOALL: ("alltoall", "alltoall"),
    CollKind.BROADCAST: ("broadcast", "broadcast"),
    CollKind.REDUCE: ("reduce", "reduce"),
}


@dataclass
class _Step:
    gpu: int
    type: str
    src: tuple[str, int]
    dst: tuple[str, int]
    recv_op: int = -1  # IR op received by this step (-1: none)
    send_op: int = -1  # IR op sent by this step (-1: none)
    chan: int = 0
    waits: list = field(default_factory=list)  # earlier _Step objects
    tb: _TB | None = None  # set by _append
    index: int = -1  # index among the real steps of its TB
    pos: int = -1  # "s" attribute (nops counted)
    hasdep: bool = False


@dataclass
class _TB:
    gpu: int
    chan: int
    send: int
    recv: int
    steps: list = field(default_factory=list)
    id: int = -1


def _layout(coll: Collective, inplace: bool):
    """Per collective: nchunksperloop, buffer sizes and chunk locations."""
    n, C, k = coll.num_ranks, coll.chunks_per_rank, coll.kind
    if k not in _COLL_NAMES:
        raise CollsynthError(
            f"MSCCL export does not support {k.value} collectives "
            f"(supported: {', '.join(x.value for x in _COLL_NAMES)})"
        )
    if k is CollKind.ALLTOALL and inplace:
        raise CollsynthError("MSCCL export of an in-place alltoall is not supported")
    if k is CollKind.ALLGATHER:
        ncpl, ic, oc = n * C, (0 if inplace else C), n * C

        def inloc(r, c):
            return ("o", c) if inplace else ("i", c % C)

        def outloc(r, c):
            return ("o", c)
    elif k is CollKind.REDUCESCATTER:
        ncpl, ic, oc = n * C, n * C, (0 if inplace else C)

        def inloc(r, c):
            return ("i", c)

        def outloc(r, c):
            return ("i", c) if inplace else ("o", c % C)
    elif k is CollKind.ALLREDUCE:
        ncpl, ic, oc = n * C, n * C, (0 if inplace else n * C)

        def inloc(r, c):
            return ("i", c)

        def outloc(r, c):
            return ("i", c) if inplace else ("o", c)
    elif k is CollKind.ALLTOALL:
        ncpl, ic, oc = n * C, n * C, n * C

        def inloc(r, c):
            return ("i", ((c // C) % n) * C + c % C)

        def outloc(r, c):
            return ("o", ((c // C) // n) * C + c % C)
    elif k is CollKind.BROADCAST:
        ncpl, ic, oc = C, (0 if inplace else C), C

        def inloc(r, c):
            return ("o", c) if inplace else ("i", c)

        def outloc(r, c):
            return ("o", c)
    else:  # reduce
        ncpl, ic, oc = C, C, (0 if inplace else C)

        def inloc(r, c):
            return ("i", c)

        def outloc(r, c):
            return ("i", c) if inplace else ("o", c)

    return ncpl, ic, oc, inloc, outloc


def _order_preds(s: Schedule) -> list[list[int]]:
    """Per operation, the operations of the same sender-receiver pair that precede it directly
    in a link's planned order (:meth:`Schedule.pair_order_edges`)."""
    preds: list[list[int]] = [[] for _ in range(s.num_ops)]
    a, b = s.pair_order_edges()
    for x, y in zip(a.tolist(), b.tolist()):
        preds[y].append(x)
    return preds


def _linear_order(s: Schedule) -> np.ndarray:
    """The operations in one linear extension of the dependencies and of each pair's link
    order (ties: start, step, id)."""
    n = s.num_ops
    if s.start is not None:
        t = np.where(np.isnan(s.start), np.inf, s.start)
    else:
        t = np.zeros(n)
    st = s.step if s.step is not None else np.zeros(n, dtype=np.int64)
    key = [(float(t[i]), int(st[i]), i) for i in range(n)]
    indeg = np.diff(s.dep_ptr).astype(np.int64).tolist()
    succ: list[list[int]] = [[] for _ in range(n)]
    for v in range(n):
        for d in s.deps(v).tolist():
            succ[d].append(v)
    for v, before in enumerate(_order_preds(s)):
        for d in before:
            succ[d].append(v)
            indeg[v] += 1
    heap = [key[i] for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        u = heapq.heappop(heap)[2]
        out.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, key[v])
    if len(out) != n:
        raise CollsynthError("cannot export: the schedule's dependencies form a cycle")
    return np.array(out, dtype=np.int64)


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
    instances = _check_options(dialect, proto, instances, min_bytes, max_bytes)
    schedule = _prepare(schedule, dialect, instances, inplace, channels, verify)
    candidates = _channel_candidates(schedule, dialect, instances, channels)
    plan = _Plan(schedule, inplace)
    last_err = None
    for k in candidates:
        try:
            return plan.emit(k, dialect, proto, instances, min_bytes, max_bytes, max_tbs, name)
        except _TooManySteps as e:
            last_err = e
    assert last_err is not None
    if channels is not None:
        raise CollsynthError(
            f"cannot export: {last_err} with {candidates[-1]} channel(s) per "
            f"instance (try more channels, or fewer chunks)"
        )
    raise CollsynthError(
        f"cannot export: {last_err} even with {candidates[-1]} channel(s) "
        f"per instance (try fewer chunks)"
    )


def _check_options(dialect: str, proto: str, instances, min_bytes, max_bytes) -> int:
    """Validate the dialect, protocol, instance count and byte range; the instance count."""
    if dialect not in DIALECTS:
        raise CollsynthError(f"unknown MSCCL dialect {dialect!r} (known: msccl, executor)")
    if proto not in PROTOS:
        raise CollsynthError(f"unknown MSCCL protocol {proto!r} (known: Simple, LL, LL128)")
    if (
        isinstance(instances, bool)
        or not isinstance(instances, (int, np.integer))
        or not 1 <= instances <= MAX_CHANNELS
    ):
        raise CollsynthError(
            f"instances must be an integer in 1..{MAX_CHANNELS}, got {instances!r}"
        )
    for label, v in (("min_bytes", min_bytes), ("max_bytes", max_bytes)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0):
            raise CollsynthError(f"{label} must be a non-negative integer, got {v!r}")
    return int(instances)


def _prepare(
    schedule: Schedule,
    dialect: str,
    instances: int,
    inplace: bool,
    channels: int | None,
    verify: bool,
) -> Schedule:
    """Reject what cannot be exported, refine byte ranges into chunks and verify the result."""
    _layout(schedule.collective, inplace)  # early "unsupported" errors
    refuse_groups(schedule, "MSCCL XML")
    schedule = whole_chunks(schedule)
    if schedule.num_ops == 0:
        raise CollsynthError("cannot export an empty schedule to MSCCL XML")
    _check_step_floor(schedule, dialect, instances if channels is None else None, channels)
    if verify:
        from ..verify import ensure_verified

        ensure_verified(schedule)
    return schedule


def _channel_candidates(
    schedule: Schedule, dialect: str, instances: int, channels: int | None
) -> list[int]:
    """The channel counts per instance to try, fewest first (just ``channels`` if given)."""
    max_ch = MAX_CHANNELS // instances
    if channels is not None:
        if (
            isinstance(channels, bool)
            or not isinstance(channels, (int, np.integer))
            or channels < 1
        ):
            raise CollsynthError(f"channels must be a positive integer, got {channels!r}")
        if channels * instances > MAX_CHANNELS:
            raise CollsynthError(
                f"{channels} channels x {instances} instances exceed the "
                f"{MAX_CHANNELS}-channel limit of MSCCL"
            )
        return [int(channels)]
    # fewer channels than the busiest (GPU, peer) pair's transfers / step limit cannot fit
    floor1, limit, _, _ = step_floor(schedule, dialect, channels=1)
    candidates = []
    k = 1
    while k <= max_ch:
        if k * limit >= floor1 or k * 2 > max_ch:
            candidates.append(k)
        k *= 2
    return candidates


#: Most sub-chunks one chunk may be cut into when byte ranges are refined for export.
MAX_REFINE = 64


def refuse_groups(s: Schedule, fmt: str) -> None:
    """A format whose steps are point-to-point sends cannot say that a switch copies or
    reduces: refuse a schedule with in-network groups in one line."""
    if s.has_groups:
        assert s.group is not None
        op = int(np.flatnonzero(s.group >= 0)[0])
        what = "multicast" if s.kind[op] == 0 else "in-switch reduction"
        raise CollsynthError(
            f"{fmt} cannot express a switch that copies or reduces ({s.describe_op(op)} is in "
            f"{what} group {int(s.group[op])}): its steps are point-to-point sends (the same "
            f"operations one by one, Schedule.expand_groups(), can be exported)"
        )


def whole_chunks(s: Schedule) -> Schedule:
    """``s`` itself where every operation carries whole chunks, else :func:`refine_parts`; joins
    expanded first (:meth:`~collsynth.schedule.ir.Schedule.expand_joins`: the formats name
    each dependency of a step themselves)."""
    s = s.expand_joins()
    if s.part_den is not None:
        whole = (s.part_lo == 0) & (s.part_hi == s.part_den)
        if not bool(np.all(whole)):
            return refine_parts(s)
    return s


def refine_parts(s: Schedule) -> Schedule:
    """The same schedule with byte ranges turned into whole chunks, for formats without them.

    With ``D`` the least common multiple of the byte-range denominators, every chunk becomes
    ``D`` consecutive chunks (chunk ``c`` -> ``c*D .. c*D + D - 1``: every built-in collective
    numbers its chunks with the per-rank index innermost, so this is ``with_chunks(C*D)``), and
    an operation on ``[lo/den, hi/den)`` of chunk ``c`` becomes one operation per sub-chunk it
    covers, with its route and kind. Each depends on every piece of every operation the
    original depended on, so no ordering is lost. The result is verified by the caller.
    """
    coll = s.collective
    if coll.kind is CollKind.CUSTOM:
        raise CollsynthError(
            "MSCCL export does not support byte-range operations on a custom collective"
        )
    assert s.part_den is not None and s.part_lo is not None and s.part_hi is not None
    den = s.part_den.astype(np.int64)
    D = int(np.lcm.reduce(unique(den)))
    if D > MAX_REFINE:
        op = int(np.argmax(den))
        raise CollsynthError(
            f"cannot export: byte ranges of 1/{D} of a chunk (e.g. "
            f"{s.describe_op(op)}) would need {D} sub-chunks per chunk, more "
            f"than {MAX_REFINE}"
        )
    scale = D // den
    a = s.part_lo.astype(np.int64) * scale
    cnt = s.part_hi.astype(np.int64) * scale - a
    n = s.num_ops
    first = np.zeros(n + 1, dtype=np.int64)
    first[1:] = np.cumsum(cnt)
    orig = np.repeat(np.arange(n), cnt)
    j = np.arange(int(first[-1])) - first[orig]
    new_chunk = s.chunk[orig] * D + a[orig] + j
    rlen = np.diff(s.route_ptr)[orig]
    route_ptr = np.zeros(len(orig) + 1, dtype=np.int64)
    route_ptr[1:] = np.cumsum(rlen)
    route_links = (
        np.concatenate([s.route(int(o)) for o in orig])
        if len(orig)
        else np.zeros(0, dtype=np.int64)
    )
    deps: list[list[int]] = []
    for o in orig.tolist():
        deps.append([x for d in s.deps(o).tolist() for x in range(first[d], first[d + 1])])
    dep_ptr = np.zeros(len(orig) + 1, dtype=np.int64)
    dep_ptr[1:] = np.cumsum([len(x) for x in deps])
    dep_ids = np.array([x for xs in deps for x in xs], dtype=np.int64)
    b = ScheduleBuilder(s.topology, coll.with_chunks(coll.chunks_per_rank * D), meta=s.meta)
    b.add_many(
        s.src[orig],
        s.dst[orig],
        new_chunk,
        route_ptr=route_ptr,
        route_links=route_links,
        dep_ptr=dep_ptr,
        dep_ids=dep_ids,
        kind=s.kind[orig],
        step=None if s.step is None else s.step[orig],
    )
    for link, seq in (s.link_order or {}).items():  # each piece where its operation was
        b.set_link_order(
            link, [x for o in np.asarray(seq).tolist() for x in range(first[o], first[o + 1])]
        )
    return b.build()


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


class _TooManySteps(Exception):
    """A thread block exceeds the step limit (more channels may fix it)."""


class _Plan:
    """Order, fusion and buffer locations (independent of the channel count)."""

    def __init__(self, s: Schedule, inplace: bool):
        self.s = s
        self.coll = s.collective
        self.inplace = inplace
        self.reduces = self.coll.reduces
        (self.ncpl, self.ic, self.oc, self.inloc, self.outloc) = _layout(self.coll, inplace)
        self.src = s.src.tolist()
        self.dst = s.dst.tolist()
        self.chunk = s.chunk.tolist()
        self.kind = s.kind.tolist()
        self.deps = [s.deps(i).tolist() for i in range(s.num_ops)]
        self.dests: dict[int, frozenset[int]] = {}
        self._order_and_fuse()

    def is_dest(self, r: int, c: int) -> bool:
        """Whether rank ``r`` is a destination of chunk ``c``."""
        d = self.dests.get(c)
        if d is None:
            d = self.dests[c] = frozenset(self.coll.destinations(c))
        return r in d

    def _order_and_fuse(self) -> None:
        """The order ``L``, each receive fused with a send of the same chunk moved after it."""
        s = self.s
        n = s.num_ops
        L = _linear_order(s).tolist()
        lpos = [0] * n
        for p, op in enumerate(L):
            lpos[op] = p
        touching: dict[tuple[int, int], list[int]] = {}
        senders: dict[tuple[int, int], list[int]] = {}
        for op in L:
            c = self.chunk[op]
            touching.setdefault((self.src[op], c), []).append(op)
            touching.setdefault((self.dst[op], c), []).append(op)
            senders.setdefault((self.src[op], c), []).append(op)
        dependents: dict[int, set[int]] = {}
        for v in range(n):
            for d in self.deps[v]:
                dependents.setdefault(d, set()).add(v)
        order_preds = _order_preds(s)
        placed = [False] * n
        active = [False] * n
        order: list[int] = []
        fused_next = [-1] * n  # X -> Y: X's receive is fused with Y's send
        fused_type = [""] * n

        def ready(y: int, but: int = -1) -> bool:
            """Whether ``y`` may be placed now (``but``: a dependency about to be placed)."""
            return all(placed[d] or d == but for d in self.deps[y]) and all(
                placed[d] for d in order_preds[y]
            )

        def pull(x: int) -> None:
            """Before ``x``: the sends that must precede the send ``x``'s receive could be fused
            with (earlier in their pair's link order), where they can be placed now, so that
            the receive and the send still fuse (a ring: a GPU sends its own chunk, then
            receives and forwards)."""
            g, c = self.dst[x], self.chunk[x]
            for y in senders.get((g, c), ()):
                if placed[y] or y not in dependents.get(x, ()):
                    continue
                if not all(placed[d] or d == x for d in self.deps[y]):
                    continue
                missing = [p for p in order_preds[y] if not placed[p]]
                if missing and all(not active[p] and ready(p) for p in missing):
                    for p in missing:
                        if not placed[p]:
                            place(p)
                return

        def place(op: int) -> None:
            """``op`` and the chain of sends fused after it."""
            active[op] = True
            pull(op)
            placed[op] = True
            order.append(op)
            x = op
            while True:
                g, c = self.dst[x], self.chunk[x]
                y_pick = -1
                for y in senders.get((g, c), ()):
                    if placed[y] or y not in dependents.get(x, ()):
                        continue
                    if ready(y):
                        y_pick = y
                        break
                if y_pick < 0:
                    break
                y = y_pick
                if self.kind[x] == OpKind.REDUCE:
                    rest = [o for o in touching[(g, c)] if o != x and o != y]
                    if not self.is_dest(g, c) and all(placed[o] for o in rest):
                        t = "rrs"
                    else:
                        t = "rrcs"
                else:
                    t = "rcs"
                fused_next[x] = y
                fused_type[x] = t
                placed[y] = True
                order.append(y)
                x = y
            active[op] = False

        for op in L:
            if not placed[op]:
                place(op)
        self.order = order
        self.fused_next = fused_next
        self.fused_type = fused_type
        self.fused_prev = [-1] * n
        for x, y in enumerate(fused_next):
            if y >= 0:
                self.fused_prev[y] = x

    # ------------------------------------------------------------------ emit
    def emit(
        self,
        K: int,
        dialect: str,
        proto: str,
        instances: int,
        min_bytes,
        max_bytes,
        max_tbs: int,
        name: str | None,
    ) -> str:
        """The XML text with ``K`` channels per instance: the lowering passes in order."""
        low = _Lowering(self, K)
        low.assign_channels()
        low.make_steps()
        low.add_final_copies()
        low.build_thread_blocks()
        low.place_steps()
        low.check_coresidency(instances, max_tbs)
        low.drop_implied_waits()
        low.number_thread_blocks(instances, max_tbs)
        low.position_steps(dialect, instances)
        low.mark_waited_on()
        return self._write(
            low.gpu_tbs,
            low.num_channels(),
            dialect,
            proto,
            instances,
            min_bytes,
            max_bytes,
            name,
            low.scratch,
        )

    # ------------------------------------------------------------------ XML text
    def _write(self, gpu_tbs, nch, dialect, proto, N, min_bytes, max_bytes, name, scratch) -> str:
        """The XML document: the ``<algo>`` line, then every GPU's thread blocks and steps."""
        coll = self.coll
        if nch * N > MAX_CHANNELS:
            raise CollsynthError(
                f"cannot export: {nch} channel(s) x {N} instance(s) exceed "
                f"the {MAX_CHANNELS}-channel limit of MSCCL"
            )
        attrs = self._algo_attrs(nch, dialect, proto, N, min_bytes, max_bytes, name)
        lines = ["<algo " + _attrs(attrs) + ">"]
        for g in range(coll.num_ranks):
            lines.append(
                "  <gpu "
                + _attrs(
                    [
                        ("id", g),
                        ("i_chunks", self.ic * N),
                        ("o_chunks", self.oc * N),
                        ("s_chunks", scratch[g] * N),
                    ]
                )
                + ">"
            )
            ntb = len(gpu_tbs[g])
            for t in range(N):
                for tb in gpu_tbs[g]:
                    lines.extend(_tb_lines(tb, t, ntb, nch, N))
            lines.append("  </gpu>")
        lines.append("</algo>")
        return "\n".join(lines) + "\n"

    def _algo_attrs(self, nch, dialect, proto, N, min_bytes, max_bytes, name) -> list:
        """The ``<algo>`` attributes: name, protocol, sizes, collective and dialect extras."""
        coll = self.coll
        cname = _COLL_NAMES[coll.kind][0 if dialect == "msccl" else 1]
        if name is None:
            algo = self.s.meta.get("algorithm")
            name = "-".join(
                ["collsynth"]
                + ([str(algo)] if algo else [])
                + [coll.kind.value, f"n{coll.num_ranks}"]
            )
        name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name))[:63]
        attrs = [
            ("name", name),
            ("proto", proto),
            ("nchannels", nch * N),
            ("nchunksperloop", self.ncpl * N),
            ("ngpus", coll.num_ranks),
            ("coll", cname),
            ("inplace", int(self.inplace)),
        ]
        if dialect == "executor":
            attrs += [
                ("outofplace", int(not self.inplace)),
                ("minBytes", 0 if min_bytes is None else int(min_bytes)),
                ("maxBytes", 0 if max_bytes is None else int(max_bytes)),
            ]
        else:
            if min_bytes is not None:
                attrs.append(("minBytes", int(min_bytes)))
            if max_bytes is not None:
                attrs.append(("maxBytes", int(max_bytes)))
        return attrs


def _tb_lines(tb: _TB, t: int, ntb: int, nch: int, N: int) -> list[str]:
    """The lines of thread block ``tb`` in instance ``t``: its steps, each after its nops."""

    def off(loc):
        return loc[1] * N + t

    lines = [
        "    <tb "
        + _attrs(
            [
                ("id", tb.id + t * ntb),
                ("send", tb.send),
                ("recv", tb.recv),
                ("chan", tb.chan + t * nch),
            ]
        )
        + ">"
    ]
    for st in tb.steps:
        deps = [(w.tb.id + t * ntb, w.pos) for w in st.waits]
        p0 = st.pos - max(0, len(deps) - 1)
        for i, (d_tb, d_s) in enumerate(deps[1:]):
            lines.append(
                "      <step "
                + _attrs(
                    [
                        ("s", p0 + i),
                        ("type", "nop"),
                        ("srcbuf", "i"),
                        ("srcoff", -1),
                        ("dstbuf", "o"),
                        ("dstoff", -1),
                        ("cnt", 0),
                        ("depid", d_tb),
                        ("deps", d_s),
                        ("hasdep", 0),
                    ]
                )
                + "/>"
            )
        d_tb, d_s = deps[0] if deps else (-1, -1)
        lines.append(
            "      <step "
            + _attrs(
                [
                    ("s", st.pos),
                    ("type", st.type),
                    ("srcbuf", st.src[0]),
                    ("srcoff", off(st.src)),
                    ("dstbuf", st.dst[0]),
                    ("dstoff", off(st.dst)),
                    ("cnt", 1),
                    ("depid", d_tb),
                    ("deps", d_s),
                    ("hasdep", int(st.hasdep)),
                ]
            )
            + "/>"
        )
    lines.append("    </tb>")
    return lines


class _Lowering:
    """One lowering of a :class:`_Plan` with ``K`` channels per instance: its passes' state."""

    def __init__(self, plan: _Plan, K: int):
        self.plan = plan
        self.K = K
        self.src, self.dst, self.chunk = plan.src, plan.dst, plan.chunk
        self.src_of = plan.coll.chunk_source
        n, nr = plan.s.num_ops, plan.coll.num_ranks
        self.nr = nr
        self.chan = [0] * n
        self.fused_ok = [False] * n  # fused_ok[x]: x's receive really fused with its successor
        self.pair_r: dict[tuple[int, int, int], int] = {}  # (gpu, ch, recv peer) -> send peer
        self.pair_s: dict[tuple[int, int, int], int] = {}  # (gpu, ch, send peer) -> recv peer
        self.cur: dict[tuple[int, int], tuple[str, int]] = {}  # (gpu, chunk) -> held at
        self.work: dict[tuple[int, int], tuple[str, int]] = {}  # (gpu, chunk) -> received at
        self.scratch = [0] * nr
        self.last_write: dict[tuple[int, int], _Step] = {}
        self.reads_since: dict[tuple[int, int], list[_Step]] = {}
        self.steps: list[_Step] = []
        self.cpys: list[_Step] = []
        self.tbs_of: list[dict] = [{} for _ in range(nr)]  # key -> _TB
        self.role_tb: dict[tuple, _TB] = {}
        self.gpu_tbs: list[list[_TB]] = []

    # ------------------------------------------------------------------ channels
    def assign_channels(self) -> None:
        """Give every chain start the next channel of its pair; fused successors inherit."""
        plan, src, dst, chan = self.plan, self.src, self.dst, self.chan
        pair_r, pair_s = self.pair_r, self.pair_s
        heads: dict[tuple[int, int], int] = {}
        for op in plan.order:
            p = plan.fused_prev[op]
            if p >= 0:  # inherit unless the thread-block pairing conflicts
                g, ch = src[op], chan[p]
                a, b = src[p], dst[op]
                if pair_r.get((g, ch, a), b) == b and pair_s.get((g, ch, b), a) == a:
                    pair_r[(g, ch, a)] = b
                    pair_s[(g, ch, b)] = a
                    chan[op] = ch
                    self.fused_ok[p] = True
                    continue
            key = (src[op], dst[op])
            k = heads.get(key, 0)
            heads[key] = k + 1
            chan[op] = k % self.K

    # ------------------------------------------------------------------ steps
    def make_steps(self) -> None:
        """Turn the operations, in plan order, into send and receive steps."""
        plan = self.plan
        for op in plan.order:
            p = plan.fused_prev[op]
            if not (p >= 0 and self.fused_ok[p]):
                self._add_send(op)
            self._add_receive(op)

    def _add_send(self, op: int) -> None:
        """The send half ``s`` of an operation whose send is not fused with a receive."""
        a, c = self.src[op], self.chunk[op]
        loc = self._cur_loc(a, c)
        st = _Step(a, "s", loc, loc, send_op=op, chan=self.chan[op])
        self._read_event(st, a, c)
        self.steps.append(st)

    def _add_receive(self, op: int) -> None:
        """The receive half of an operation: ``r``/``rrc``, or fused ``rcs``/``rrcs``/``rrs``."""
        plan = self.plan
        g, c, ch = self.dst[op], self.chunk[op], self.chan[op]
        y = plan.fused_next[op] if self.fused_ok[op] else -1
        if y < 0:
            if plan.kind[op] == OpKind.REDUCE:
                sl = self._cur_loc(g, c)
                w = self._work_loc(g, c)
                st = _Step(g, "rrc", sl, w, recv_op=op, chan=ch)
            else:
                w = self._work_loc(g, c)
                st = _Step(g, "r", w, w, recv_op=op, chan=ch)
            self._write_event(st, g, c)
            self.cur[(g, c)] = w
        else:
            t = plan.fused_type[op]
            if t == "rcs":
                w = self._work_loc(g, c)
                st = _Step(g, "rcs", w, w, recv_op=op, send_op=y, chan=ch)
                self._write_event(st, g, c)
                self.cur[(g, c)] = w
            elif t == "rrcs":
                sl = self._cur_loc(g, c)
                w = self._work_loc(g, c)
                st = _Step(g, "rrcs", sl, w, recv_op=op, send_op=y, chan=ch)
                self._write_event(st, g, c)
                self.cur[(g, c)] = w
            else:  # rrs: nothing stored at g
                sl = self._cur_loc(g, c)
                st = _Step(g, "rrs", sl, sl, recv_op=op, send_op=y, chan=ch)
                self._read_event(st, g, c)
        self.steps.append(st)

    def _cur_loc(self, g: int, c: int) -> tuple[str, int]:
        """Where GPU ``g`` holds chunk ``c`` now (its input slot before any receive)."""
        key = (g, c)
        if key in self.cur:
            return self.cur[key]
        plan = self.plan
        if plan.reduces or int(self.src_of[c]) == g:
            return plan.inloc(g, c)
        raise CollsynthError(f"cannot export: rank {g} sends chunk {c} before holding it")

    def _work_loc(self, g: int, c: int) -> tuple[str, int]:
        """Where GPU ``g`` receives chunk ``c``: its output slot, or a new scratch slot."""
        key = (g, c)
        w = self.work.get(key)
        if w is None:
            if self.plan.is_dest(g, c):
                w = self.plan.outloc(g, c)
            else:
                w = ("s", self.scratch[g])
                self.scratch[g] += 1
            self.work[key] = w
        return w

    def _read_event(self, step: _Step, g: int, c: int) -> None:
        """A read of chunk ``c`` at ``g`` waits for the latest earlier write."""
        w = self.last_write.get((g, c))
        if w is not None:
            step.waits.append(w)
        self.reads_since.setdefault((g, c), []).append(step)

    def _write_event(self, step: _Step, g: int, c: int) -> None:
        """A reducing write waits for the reads since the latest write (or that write)."""
        key = (g, c)
        if self.plan.reduces:
            rs = self.reads_since.get(key)
            if rs:
                step.waits.extend(rs)
            elif key in self.last_write:
                step.waits.append(self.last_write[key])
        self.last_write[key] = step
        self.reads_since[key] = []

    def add_final_copies(self) -> None:
        """A ``cpy`` for every destination whose data is not yet in its output slot."""
        plan = self.plan
        post_r, post_c = plan.coll.postcondition()
        src_of = self.src_of
        for r, c in sorted(zip(post_r.tolist(), post_c.tolist())):
            loc = self.cur.get((r, c))
            if loc is None:
                if not plan.reduces and int(src_of[c]) != r:
                    raise CollsynthError(f"cannot export: rank {r} never receives chunk {c}")
                loc = plan.inloc(r, c)
            out = plan.outloc(r, c)
            if loc != out:
                st = _Step(r, "cpy", loc, out, chan=0)
                if (r, c) in self.last_write:
                    st.waits.append(self.last_write[(r, c)])
                self.cpys.append(st)

    # ------------------------------------------------------------------ thread blocks
    def build_thread_blocks(self) -> None:
        """One thread block per receive and send peer on each (GPU, channel), paired."""
        src, dst, pair_r, pair_s = self.src, self.dst, self.pair_r, self.pair_s
        roles_r: dict[tuple[int, int], set[int]] = {}
        roles_s: dict[tuple[int, int], set[int]] = {}
        for st in self.steps:
            if st.recv_op >= 0:
                roles_r.setdefault((st.gpu, st.chan), set()).add(src[st.recv_op])
            if st.send_op >= 0:
                roles_s.setdefault((st.gpu, st.chan), set()).add(dst[st.send_op])
        for g, ch in sorted(set(roles_r) | set(roles_s)):
            rset = sorted(roles_r.get((g, ch), ()))
            sset = sorted(roles_s.get((g, ch), ()))
            pairs = []  # fused pairs first, then the other roles in peer order
            free_r = [a for a in rset if (g, ch, a) not in pair_r]
            free_s = [b for b in sset if (g, ch, b) not in pair_s]
            for a in rset:
                if (g, ch, a) in pair_r:
                    pairs.append((a, pair_r[(g, ch, a)]))
            for i in range(max(len(free_r), len(free_s))):
                pairs.append(
                    (free_r[i] if i < len(free_r) else -1, free_s[i] if i < len(free_s) else -1)
                )
            for a, b in pairs:
                tb = _TB(g, ch, b, a)
                self.tbs_of[g][(ch, a, b)] = tb
                if a >= 0:
                    self.role_tb[(g, ch, "r", a)] = tb
                if b >= 0:
                    self.role_tb[(g, ch, "s", b)] = tb

    def place_steps(self) -> None:
        """Append every step to its role's thread block, each copy to a short one."""
        src, dst, tbs_of = self.src, self.dst, self.tbs_of
        for st in self.steps:
            if st.recv_op >= 0:
                tb = self.role_tb[(st.gpu, st.chan, "r", src[st.recv_op])]
            else:
                tb = self.role_tb[(st.gpu, st.chan, "s", dst[st.send_op])]
            _append(tb, st)
        for st in self.cpys:
            # a local copy needs no peer: append it to the GPU's shortest thread block (it
            # reads data that is in place from the start), or to a local one if there is none
            cands = sorted(tbs_of[st.gpu].items(), key=lambda kv: (len(kv[1].steps), str(kv[0])))
            if cands:
                tb = cands[0][1]
            else:
                tb = tbs_of[st.gpu]["local"] = _TB(st.gpu, 0, -1, -1)
            _append(tb, st)

    def check_coresidency(self, instances: int, max_tbs: int) -> None:
        """Every GPU's thread blocks (times the instances) fit ``max_tbs``."""
        for g in range(self.nr):  # before the (costly) clocks
            if len(self.tbs_of[g]) * instances > max_tbs:
                raise CollsynthError(
                    f"cannot export: GPU {g} needs "
                    f"{len(self.tbs_of[g]) * instances} thread blocks, more "
                    f"than the limit of {max_tbs}"
                )

    # ------------------------------------------------------------------ dependencies
    def drop_implied_waits(self) -> None:
        """Drop waits implied by thread-block order, send -> receive and kept waits."""
        # vector clocks over one valid execution: the global order
        steps, cpys = self.steps, self.cpys
        all_tbs = [tb for g in range(self.nr) for tb in self.tbs_of[g].values()]
        tix = {id(tb): k for k, tb in enumerate(all_tbs)}
        T = len(all_tbs)
        send_step = {st.send_op: st for st in steps if st.send_op >= 0}
        gidx = {id(st): k for k, st in enumerate(steps + cpys)}
        clock: dict[int, np.ndarray] = {}
        for st in steps + cpys:
            assert st.tb is not None  # every step was placed by _append
            k = tix[id(st.tb)]
            vc = (
                clock[id(st.tb.steps[st.index - 1])].copy()
                if st.index
                else np.zeros(T, dtype=np.int32)
            )
            if st.recv_op >= 0:
                np.maximum(vc, clock[id(send_step[st.recv_op])], out=vc)
            kept = []
            for w in sorted(st.waits, key=lambda x: -gidx[id(x)]):
                if vc[tix[id(w.tb)]] > w.index:
                    continue
                np.maximum(vc, clock[id(w)], out=vc)
                kept.append(w)
            st.waits = kept
            vc[k] = st.index + 1
            clock[id(st)] = vc

    def number_thread_blocks(self, instances: int, max_tbs: int) -> None:
        """Number each GPU's thread blocks (local last) and check the per-channel limits."""
        for g in range(self.nr):
            tbs = self.tbs_of[g]
            items = sorted(((k, tb) for k, tb in tbs.items() if k != "local"), key=lambda kv: kv[0])
            lst = [tb for _, tb in items]
            if "local" in tbs:
                lst.append(tbs["local"])
            for i, tb in enumerate(lst):
                tb.id = i
            self.gpu_tbs.append(lst)
            if len(lst) * instances > max_tbs:
                raise CollsynthError(
                    f"cannot export: GPU {g} needs {len(lst) * instances} "
                    f"thread blocks, more than the limit of {max_tbs}"
                )
            for ch in range(self.K):
                ns = sum(1 for tb in lst if tb.chan == ch and tb.send >= 0)
                nrv = sum(1 for tb in lst if tb.chan == ch and tb.recv >= 0)
                if max(ns, nrv) > MAX_TBS_PER_CHANNEL:
                    raise CollsynthError(
                        f"cannot export: GPU {g} needs {max(ns, nrv)} "
                        f"thread blocks on channel {ch}, more than "
                        f"{MAX_TBS_PER_CHANNEL}"
                    )

    def position_steps(self, dialect: str, instances: int) -> None:
        """Keep the latest wait per thread block, number the steps with their nops."""
        max_steps = MAX_STEPS[dialect]
        for g in range(self.nr):
            for tb in self.gpu_tbs[g]:
                p = _position_tb(tb)
                if p > max_steps:
                    raise _TooManySteps(
                        f"GPU {g} thread block {tb.id} needs {p} steps, more "
                        f"than the {dialect} limit of {max_steps}"
                    )
            tbs = self.gpu_tbs[g]
            nodes = (
                2
                + len(tbs) * instances
                + instances
                * sum(len(t.steps) + sum(max(0, len(x.waits) - 1) for x in t.steps) for t in tbs)
            )
            if nodes > MAX_NODES:
                raise CollsynthError(
                    f"cannot export: GPU {g} would have {nodes} XML nodes, "
                    f"more than the parser's limit of {MAX_NODES}"
                )

    def mark_waited_on(self) -> None:
        """Flag every waited-on step ``hasdep`` (it publishes its completion)."""
        for lst in self.gpu_tbs:
            for tb in lst:
                for st in tb.steps:
                    for w in st.waits:
                        w.hasdep = True

    def num_channels(self) -> int:
        """Channels per instance actually used."""
        return max((tb.chan for lst in self.gpu_tbs for tb in lst), default=0) + 1


def _append(tb: _TB, st: _Step) -> None:
    """Put step ``st`` at the end of thread block ``tb``."""
    st.tb = tb
    st.index = len(tb.steps)
    tb.steps.append(st)


def _position_tb(tb: _TB) -> int:
    """Keep each step's latest wait per other thread block; set ``pos``; the step count."""
    p = 0
    for st in tb.steps:
        best: dict[int, _Step] = {}
        for w in st.waits:
            if w.tb is tb:
                continue
            cur_w = best.get(w.tb.id)
            if cur_w is None or w.index > cur_w.index:
                best[w.tb.id] = w
        st.waits = [best[k] for k in sorted(best)]
        p += max(0, len(st.waits) - 1)
        st.pos = p
        p += 1
    return p


def _attrs(pairs) -> str:
    """``key="value"`` pairs, space-separated."""
    return " ".join(f'{k}="{v}"' for k, v in pairs)
