"""Lower a schedule IR to an MSCCL++ execution plan (the JSON its executor loads).

The plan format (microsoft/mscclpp, the snake_case layout of its executor since 2025) is
summarised in ``docs/notes/mscclpp-plan-format.md``; what matters here:

* every GPU runs thread blocks, each a list of at most 64 operations executed in order by all
  its threads; a ``nop`` (``__syncthreads``) separates operations that must not overlap;
* data moves one-sided: ``put`` copies local chunks into a peer's buffer over a *memory*
  channel (NVLink, PCIe peer access: the thread block's threads store into peer memory) or a
  *port* channel (a proxy drives RDMA; ``pwsf`` = put, signal, flush);
* ``signal`` on a channel increments the peer's semaphore of the paired channel, ``wait``
  consumes one such signal; the k-th channel from A to B pairs with the k-th from B to A;
* buffers are cut into chunks of one byte size: input ``i``, output ``o`` and scratch ``s``.

Layout decisions
----------------

**Buffers.** As in the MSCCL exporter (one plan chunk per collective chunk, byte ranges first
refined into whole chunks): allgather ``i[c mod C]`` -> ``o[c]``; reducescatter ``i[c]`` ->
``o[c mod C]`` at rank ``c // C``; allreduce ``i[c]`` -> ``o[c]``; alltoall ``i[d*C+j]`` at
``s`` -> ``o[s*C+j]`` at ``d``; broadcast ``i[c]`` at the root -> ``o[c]`` (in-place plans
use the aliased buffer instead). Each rank keeps each chunk it handles in one *working slot*:
its output slot where it is a destination, its input slot where it only forwards what it
started with, else a scratch slot of its own. A working slot that does not start with the
rank's data starts with a ``copy`` from the input.

**Transfers.** Operation ``X`` (``a -> g``, chunk ``c``) is ``put`` from ``a``'s working slot
into a slot at ``g`` at ``a``, signalled (``nop`` then ``signal``) together with the block's
next puts, before the block's next ``wait`` (port channels: ``nop``, ``pwsf``); and
``wait``, ``nop`` then, where ``X`` landed in a scratch slot, ``copy`` (copy) or ``re``
(reduce: working slot += scratch) at ``g``. A copy lands directly in ``g``'s working slot
where that slot is written by ``X`` alone and ``g`` did not start with the chunk; every other
transfer lands in a scratch slot of its own at ``g`` (never reused, so no transfer can
overwrite data still needed). A ``nop`` is put wherever an operation touches a slot that an
earlier operation of the same thread block wrote since the last ``nop``.

**Thread blocks.** All of a rank's operations on one chunk go to one thread block, so every
data dependency of the schedule (which is between operations on the same chunk at the same
rank) is thread-block order: no cross-block synchronisation is needed. Chunks are spread over
``K`` groups (the same grouping on every rank, balanced greedily), the smallest ``K`` whose
blocks all stay within 64 operations; group ``t``'s block on ``a`` talks to group ``t``'s
block on ``g`` over a channel of their own.

**Order, and why it cannot deadlock.** Every block lists its operations in one linear
extension ``L`` of the schedule's dependencies, and both halves of ``X`` sit at ``X``'s place
in ``L`` on their ranks. Signals never block; a ``wait`` for ``X`` only needs ``a``'s block to
reach ``X``, which it does once every earlier operation of ``L`` is done, so by induction over
``L`` every block finishes. Signals and waits pair in order, because on each channel both the
signals (at ``a``) and the waits (at ``g``) follow ``L``.

**Channels.** A transfer whose route crosses a network link (``ib``, ``eth``, ``wan``, ...)
uses a port channel, any other (NVLink, NVSwitch, xGMI, PCIe) a memory channel.

**In-network groups** (multicast, in-switch reduction) become a switch channel and ``glres``
where the pattern fits (an AllReduce reduced in and multicast from the switch chunk by chunk:
:mod:`.mscclpp_nvls`); any other use of groups is refused in one line.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..collective import CollKind
from ..errors import CollsynthError
from ..schedule.ir import OpKind, Schedule
from .lowering import BufferLayout, Slot, buffer_layout, linear_order, whole_chunks
from .mscclpp_blocks import BlockBuilder, ChannelTable, Event, slot_ref
from .mscclpp_nvls import nvls_gpus

#: what MSCCL++'s executor allows (execution_common.hpp)
MAX_OPS_PER_TB = 64
MAX_CHANNELS_PER_TB = 16
MAX_REMOTE_BUFFERS_PER_TB = 16
MAX_TBS_DEFAULT = 108
MAX_MESSAGE = 2**64 - 1
#: link classes that are a network, not a peer-memory path
NETWORK_CLASSES = frozenset({"ib", "eth", "wan", "roce", "net", "nic", "ethernet"})
CHANNEL_CHOICES = ("auto", "memory", "port")

_NAMES = {
    CollKind.ALLGATHER: "allgather",
    CollKind.REDUCESCATTER: "reducescatter",
    CollKind.ALLREDUCE: "allreduce",
    CollKind.ALLTOALL: "alltoall",
    CollKind.BROADCAST: "broadcast",
}


@dataclass(frozen=True)
class MscclppOptions:
    """What :func:`to_mscclpp_plan` was asked for, validated (``max_bytes``: the largest message
    size, :data:`MAX_MESSAGE` for no limit)."""

    name: str | None = None
    inplace: bool = False
    channel: str = "auto"
    max_tbs: int = MAX_TBS_DEFAULT
    min_bytes: int = 0
    max_bytes: int = MAX_MESSAGE
    verify: bool = True


def mscclpp_options(
    name: str | None,
    inplace: bool,
    channel: str,
    max_tbs: int,
    min_bytes: int,
    max_bytes: int | None,
    verify: bool,
) -> MscclppOptions:
    """The options, once the channel type, thread-block limit and size range are valid."""
    if channel not in CHANNEL_CHOICES:
        raise CollsynthError(f"channel type {channel!r} is not one of {', '.join(CHANNEL_CHOICES)}")
    if not isinstance(max_tbs, int) or isinstance(max_tbs, bool) or not 1 <= max_tbs <= 1024:
        raise CollsynthError(f"max_tbs must be an integer in 1..1024, got {max_tbs!r}")
    hi = MAX_MESSAGE if max_bytes is None else int(max_bytes)
    if not 0 <= int(min_bytes) <= hi <= MAX_MESSAGE:
        raise CollsynthError(f"message size range {min_bytes}..{hi} is not valid")
    return MscclppOptions(name, inplace, channel, max_tbs, int(min_bytes), hi, verify)


def to_mscclpp_plan(
    schedule: Schedule,
    *,
    name: str | None = None,
    inplace: bool = False,
    channel: str = "auto",
    max_tbs: int = MAX_TBS_DEFAULT,
    min_bytes: int = 0,
    max_bytes: int | None = None,
    verify: bool = True,
) -> str:
    """Lower ``schedule`` to MSCCL++ execution-plan JSON text (deterministic).

    ``channel``: ``auto`` (port channels where a route crosses a network link, memory
    channels elsewhere), or one type everywhere. ``max_tbs``: most thread blocks per GPU.
    ``min_bytes``/``max_bytes``: the message sizes the plan serves (MSCCL++ compares the output
    size for allgather, the input size otherwise). Raises :class:`CollsynthError` with one line
    naming what cannot be exported.
    """
    options = mscclpp_options(name, inplace, channel, max_tbs, min_bytes, max_bytes, verify)
    if schedule.has_groups:  # in-network: switch channels (glres) where the pattern fits
        s = _prepare_groups(schedule, options)
        plan = nvls_gpus(s, options.inplace)
    else:
        s = _prepare(schedule, options)
        plan = _Lowering(s, options.inplace, options.channel).emit(options.max_tbs)
    coll = s.collective
    doc = {
        "name": options.name or _default_name(s, options.inplace),
        "collective": _NAMES[coll.kind],
        "protocol": "Simple",
        "inplace": bool(options.inplace),
        "reuse_resources": False,
        "gpus": plan,
        "num_threads_per_block": 1024,
        "use_double_scratch_buffer": False,
        "buffer_alignment": 16,
        "min_message_size": options.min_bytes,
        "max_message_size": options.max_bytes,
    }
    return json.dumps(doc, indent=1) + "\n"


def _default_name(s: Schedule, inplace: bool) -> str:
    algo = s.meta.get("algorithm", "schedule")
    where = "inplace" if inplace else "outofplace"
    return f"collsynth-{algo}-{_NAMES[s.collective.kind]}-{s.topology.name}-{where}"


def _prepare(schedule: Schedule, options: MscclppOptions) -> Schedule:
    coll = schedule.collective
    if coll.kind not in _NAMES:
        raise CollsynthError(
            f"MSCCL++ export does not support {coll.kind.value} collectives "
            f"(supported: {', '.join(k.value for k in _NAMES)})"
        )
    buffer_layout(coll, options.inplace)  # the layout's own refusals (in-place alltoall)
    schedule = whole_chunks(schedule)
    if schedule.num_ops == 0:
        raise CollsynthError("cannot export an empty schedule to MSCCL++")
    if options.verify:
        from ..verify import ensure_verified

        ensure_verified(schedule)
    return schedule


def _prepare_groups(schedule: Schedule, options: MscclppOptions) -> Schedule:
    """A schedule with in-network groups, for :func:`.mscclpp_nvls.nvls_gpus`: joins expanded,
    whole chunks, verified."""
    s = schedule.expand_joins()
    if s.part_den is not None and not bool(np.all((s.part_lo == 0) & (s.part_hi == s.part_den))):
        raise CollsynthError(
            "the MSCCL++ export of in-network groups needs whole chunks (this schedule moves "
            "byte ranges)"
        )
    buffer_layout(s.collective, options.inplace)
    if options.verify:
        from ..verify import ensure_verified

        ensure_verified(s)
    return s


@dataclass(frozen=True)
class WorkingSlots:
    """Where each rank keeps each chunk it handles (``work``), the initial copies into a working
    slot (``init``: from this input slot), where each transfer lands (``land``), the copies that
    change nothing (``redundant``) and the scratch slots each rank needs."""

    work: dict[tuple[int, int], Slot]
    init: dict[tuple[int, int], Slot]
    land: list[Slot]
    redundant: frozenset[int]
    scratch: list[int]


def working_slots(s: Schedule, layout: BufferLayout, order: np.ndarray) -> WorkingSlots:
    """Working slot of every (rank, chunk) handled, the initial copies, and where each
    transfer lands (``order``: the operations in ``L`` order)."""
    coll = s.collective
    n = coll.num_ranks
    src, dst, chunk = s.src.tolist(), s.dst.tolist(), s.chunk.tolist()
    writes: dict[tuple[int, int], list[int]] = defaultdict(list)
    touched: set[tuple[int, int]] = set()
    for op in range(s.num_ops):
        writes[dst[op], chunk[op]].append(op)
        touched.add((src[op], chunk[op]))
        touched.add((dst[op], chunk[op]))
    if coll.reduces:
        every = set(range(n))
        holds = [every for _ in range(coll.num_chunks)]
    else:
        holds = [{int(r)} for r in coll.chunk_source.tolist()]
    scratch = [0] * n

    def new_scratch(r: int) -> Slot:
        scratch[r] += 1
        return ("s", scratch[r] - 1)

    work: dict[tuple[int, int], Slot] = {}
    init: dict[tuple[int, int], Slot] = {}
    for c in range(coll.num_chunks):
        dests = set(coll.destinations(c))
        for r in range(n):
            key = (r, c)
            start = r in holds[c]
            if not (key in touched or (r in dests and start)):
                continue
            if r in dests:
                slot = layout.output_slot(r, c)
            elif start and not writes.get(key):
                slot = layout.input_slot(r, c)
            else:
                slot = new_scratch(r)
            work[key] = slot
            if start and slot != layout.input_slot(r, c):
                init[key] = layout.input_slot(r, c)
    land: list[Slot] = []
    for op in range(s.num_ops):
        key = (dst[op], chunk[op])
        direct = s.kind[op] == OpKind.COPY and writes[key] == [op] and key not in init
        land.append(work[key] if direct else new_scratch(dst[op]))
    # a copy into a working slot that already holds the chunk (the rank started with it,
    # or an earlier copy in L order brought it) changes nothing: it is only waited for
    redundant: set[int] = set()
    held = {(r, c) for (r, c) in work if r in holds[c]}
    for op in order.tolist():
        key = (dst[op], chunk[op])
        if s.kind[op] == OpKind.COPY and not coll.reduces:
            if key in held:
                redundant.add(op)
            held.add(key)
    return WorkingSlots(work, init, land, frozenset(redundant), scratch)


class _Lowering:
    """Events per (rank, chunk), thread-block groups and emission, over the working slots."""

    def __init__(self, s: Schedule, inplace: bool, channel: str):
        self.s = s
        coll = s.collective
        self.n = coll.num_ranks
        self.coll = coll
        self.order = linear_order(s)
        self.ctype = [self._ctype(op, channel) for op in range(s.num_ops)]
        slots = working_slots(s, buffer_layout(coll, inplace), self.order)
        self.work, self.init, self.land = slots.work, slots.init, slots.land
        self.redundant, self.scratch = slots.redundant, slots.scratch

    def _ctype(self, op: int, channel: str) -> str:
        if channel != "auto":
            return channel
        t = self.s.topology
        net = any(t.links[int(l)].cls in NETWORK_CLASSES for l in self.s.route(op))
        return "port" if net else "memory"

    # ------------------------------------------------------------------ grouping
    def _events(self) -> dict[tuple[int, int], list[Event]]:
        """Per (rank, chunk): its initial copy and transfer halves, in L order."""
        s = self.s
        ev: dict[tuple[int, int], list[Event]] = defaultdict(list)
        for key in sorted(self.init):
            ev[key].append(Event(-1, "init", key[1]))
        for pos, op in enumerate(self.order.tolist()):
            a, g, c = int(s.src[op]), int(s.dst[op]), int(s.chunk[op])
            ev[a, c].append(Event(pos, "send", c, op, g, self.ctype[op]))
            ev[g, c].append(Event(pos, "recv", c, op, a, self.ctype[op]))
        return ev

    @staticmethod
    def _weight(events: list[Event]) -> int:
        """An upper bound on the plan operations of ``events`` (nops included)."""
        w = 0
        for e in events:
            w += {"init": 2, "send": 2, "recv": 3}[e.kind]
        return w

    def _groups(self, ev: dict, k: int) -> list[int]:
        """Chunk -> group, balancing every rank's load (greedy, heaviest chunk first)."""
        m = self.coll.num_chunks
        w = np.zeros((self.n, m), dtype=np.int64)
        for (r, c), events in ev.items():
            w[r, c] = self._weight(events)
        load = np.zeros((self.n, k), dtype=np.int64)
        group = [0] * m
        for c in sorted(range(m), key=lambda c: (-int(w[:, c].max()), c)):
            g = int(np.argmin((load + w[:, c : c + 1]).max(axis=0)))
            group[c] = g
            load[:, g] += w[:, c]
        return group

    # ------------------------------------------------------------------ emission
    def emit(self, max_tbs: int) -> list[dict]:
        ev = self._events()
        per_rank = [0] * self.n
        for (r, _), events in ev.items():
            per_rank[r] += self._weight(events)
        k = max(1, -(-max(per_rank) // MAX_OPS_PER_TB))
        last = min(max_tbs, self.coll.num_chunks)
        worst: tuple = ()
        while k <= last:
            gpus, worst = self._try(ev, k)
            if gpus is not None:
                return gpus
            k += 1
        if k > self.coll.num_chunks and worst:  # every chunk alone, and one still too long
            r, what = worst
            raise CollsynthError(
                f"cannot export to MSCCL++: rank {r}'s thread block for {what}; one chunk's "
                f"transfers at one rank must fit one block (use a schedule that sends each "
                f"chunk through each rank fewer times)"
            )
        raise CollsynthError(
            f"cannot export to MSCCL++: the schedule needs more than {max_tbs} thread blocks "
            f"per GPU of at most {MAX_OPS_PER_TB} operations (a rank has about "
            f"{max(per_rank)} operations; use fewer chunks, or raise max_tbs)"
        )

    def _try(self, ev: dict, k: int) -> tuple[list[dict] | None, tuple]:
        """The GPUs' plans with ``k`` chunk groups, or None and what overflowed."""
        group = self._groups(ev, k)
        blocks: list[dict[int, BlockBuilder]] = [dict() for _ in range(self.n)]
        merged: dict[tuple[int, int], list[Event]] = defaultdict(list)
        for (r, c), events in ev.items():
            merged[r, group[c]].extend(events)
        chans = ChannelTable(self.n)
        for (r, g), events in sorted(merged.items()):
            events.sort(key=lambda e: (e.pos, e.chunk))
            for e in events:
                if e.kind != "init":
                    chans.need(r, e.peer, g, e.ctype)
                if e.kind == "send":
                    chans.need_buffer(r, e.peer, self.land[e.op][0], e.ctype)
        for (r, g), events in sorted(merged.items()):
            blk = blocks[r].setdefault(g, BlockBuilder(g))
            for e in events:
                self._lower(r, blk, e, chans)
            blk.signal()
            chunks = sorted({e.chunk for e in events})
            what = f"chunk {chunks[0]}" if len(chunks) == 1 else f"{len(chunks)} chunks"
            if len(blk.ops) > MAX_OPS_PER_TB:
                return None, (r, f"{what} has {len(blk.ops)} operations, more than "
                              f"{MAX_OPS_PER_TB}")  # fmt: skip
            for ctype, ids in blk.channels.items():
                if len(ids) > MAX_CHANNELS_PER_TB:
                    return None, (r, f"{what} uses {len(ids)} {ctype} channels, more than "
                                  f"{MAX_CHANNELS_PER_TB}")  # fmt: skip
            for ctype, ids in blk.buffers.items():
                if len(ids) > MAX_REMOTE_BUFFERS_PER_TB:
                    return None, (r, f"{what} uses {len(ids)} {ctype} remote buffers, more "
                                  f"than {MAX_REMOTE_BUFFERS_PER_TB}")  # fmt: skip
        return [self._gpu(r, blocks[r], chans) for r in range(self.n)], ()

    def _lower(self, r: int, blk: BlockBuilder, e: Event, chans: ChannelTable) -> None:
        c = e.chunk
        if e.kind == "init":
            src, dst = self.init[r, c], self.work[r, c]
            blk.sync(src, dst)
            blk.ops.append(
                {"name": "copy", "src_buff": [slot_ref(src)], "dst_buff": [slot_ref(dst)]}
            )
            blk.dirty.add(dst)
            return
        ch = blk.local_channel(e.ctype, chans.index(r, e.peer, blk.group, e.ctype))
        if e.kind == "send":
            here = self.work[r, c]
            there = self.land[e.op]
            buf = blk.local_buffer(e.ctype, chans.buffer(r, e.peer, there[0], e.ctype))
            blk.sync(here)
            put = {
                "name": "put",
                "src_buff": [slot_ref(here)],
                "dst_buff": [{"buffer_id": buf, "index": there[1], "size": 1}],
                "channel_ids": [ch],
                "channel_type": e.ctype,
            }
            if e.ctype == "port":
                put["name"] = "pwsf"
                blk.nop()
                blk.ops.append(put)
                blk.nop()
            else:  # signalled with the puts that follow it, before the block next waits
                blk.ops.append(put)
                blk.unsignalled.append(ch)
            return
        # receive: wait for the sender's signal, then apply what landed
        blk.signal()
        blk.ops.append({"name": "wait", "channel_ids": [ch], "channel_type": e.ctype})
        blk.nop()
        landed, work = self.land[e.op], self.work[r, c]
        if landed == work:
            blk.dirty.add(work)
            return
        if e.op in self.redundant:
            return
        if self.s.kind[e.op] == OpKind.REDUCE:
            blk.ops.append({"name": "re", "src_buff": [slot_ref(work), slot_ref(landed)],
                            "dst_buff": [slot_ref(work)], "reduce_op": "sum"})  # fmt: skip
        else:
            blk.ops.append(
                {"name": "copy", "src_buff": [slot_ref(landed)], "dst_buff": [slot_ref(work)]}
            )
        blk.dirty.add(work)

    def _gpu(self, r: int, blocks: dict[int, BlockBuilder], chans: ChannelTable) -> dict:
        tbs = []
        for i, g in enumerate(sorted(blocks)):
            b = blocks[g]
            while b.ops and b.ops[-1]["name"] == "nop":
                b.ops.pop()
            entry: dict = {"id": i, "ops": b.ops}
            entry["channels"] = [{"channel_type": t, "channel_ids": ids}
                                 for t, ids in sorted(b.channels.items())]  # fmt: skip
            entry["remote_buffer_refs"] = [
                {"access_channel_type": t, "remote_buffer_ids": ids}
                for t, ids in sorted(b.buffers.items())
            ]
            tbs.append(entry)
        return {
            "id": r,
            "input_chunks": self.counts[0],
            "output_chunks": self.counts[1],
            "scratch_chunks": self.scratch[r],
            "threadblocks": tbs,
            "channels": chans.declared(r),
            "remote_buffers": chans.remote_buffers(r),
            "semaphores": [],
        }

    @property
    def counts(self) -> tuple[int, int]:
        """(input, output) chunks: one rank's buffers in chunks of one size, in-place or not
        (MSCCL++ requires input bytes / input chunks = output bytes / output chunks)."""
        return chunk_counts(self.coll.kind, self.n, self.coll.chunks_per_rank)


def chunk_counts(kind: CollKind, n: int, c: int) -> tuple[int, int]:
    """(input, output) chunks of one rank's buffers for ``n`` ranks, ``c`` chunks per rank."""
    return {
        CollKind.ALLGATHER: (c, n * c),
        CollKind.REDUCESCATTER: (n * c, c),
        CollKind.ALLREDUCE: (n * c, n * c),
        CollKind.ALLTOALL: (n * c, n * c),
        CollKind.BROADCAST: (c, c),
    }[kind]
