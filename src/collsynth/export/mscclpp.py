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
from dataclasses import dataclass, field

import numpy as np

from ..collective import CollKind
from ..errors import CollsynthError
from ..schedule.ir import OpKind, Schedule
from .msccl import _layout, _linear_order, whole_chunks
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


@dataclass
class _Event:
    """One rank's half of a transfer (or an initial copy), in ``L`` order."""

    pos: int  # position in L (-1: initial copy)
    kind: str  # "init", "send" or "recv"
    chunk: int
    op: int = -1
    peer: int = -1
    ctype: str = "memory"


@dataclass
class _Block:
    """One thread block being emitted."""

    group: int
    ops: list = field(default_factory=list)
    dirty: set = field(default_factory=set)  # slots written since the last nop
    channels: dict = field(default_factory=dict)  # ctype -> [gpu-level channel ids]
    buffers: dict = field(default_factory=dict)  # ctype -> [gpu-level remote buffer ids]

    unsignalled: list = field(default_factory=list)  # memory channels put to, not signalled

    def sync(self, *slots: tuple[str, int]) -> None:
        """A ``nop`` first if one of ``slots`` was written since the last one."""
        if any(s in self.dirty for s in slots):
            self.nop()

    def nop(self) -> None:
        if self.ops and self.ops[-1]["name"] != "nop":
            self.ops.append({"name": "nop"})
        self.dirty.clear()

    def signal(self) -> None:
        """Signal every memory channel put to since the last signal, after a ``nop`` (so the
        puts are complete): one ``signal`` per up to 8 distinct channels."""
        if not self.unsignalled:
            return
        self.nop()
        batch: list[int] = []
        for ch in self.unsignalled:
            if ch in batch or len(batch) == 8:
                self.ops.append({"name": "signal", "channel_ids": batch,
                                 "channel_type": "memory"})  # fmt: skip
                batch = []
            batch.append(ch)
        self.ops.append({"name": "signal", "channel_ids": batch, "channel_type": "memory"})
        self.unsignalled = []

    def local_channel(self, ctype: str, gpu_level: int) -> int:
        ids = self.channels.setdefault(ctype, [])
        if gpu_level not in ids:
            ids.append(gpu_level)
        return ids.index(gpu_level)

    def local_buffer(self, ctype: str, gpu_level: int) -> int:
        ids = self.buffers.setdefault(ctype, [])
        if gpu_level not in ids:
            ids.append(gpu_level)
        return ids.index(gpu_level)


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
    if channel not in CHANNEL_CHOICES:
        raise CollsynthError(f"channel type {channel!r} is not one of {', '.join(CHANNEL_CHOICES)}")
    if not isinstance(max_tbs, int) or isinstance(max_tbs, bool) or not 1 <= max_tbs <= 1024:
        raise CollsynthError(f"max_tbs must be an integer in 1..1024, got {max_tbs!r}")
    hi = MAX_MESSAGE if max_bytes is None else int(max_bytes)
    if not 0 <= int(min_bytes) <= hi <= MAX_MESSAGE:
        raise CollsynthError(f"message size range {min_bytes}..{hi} is not valid")
    if schedule.has_groups:  # in-network: switch channels (glres) where the pattern fits
        s = _prepare_groups(schedule, inplace, verify)
        plan = nvls_gpus(s, inplace)
    else:
        s = _prepare(schedule, inplace, verify)
        plan = _Lowering(s, inplace, channel).emit(max_tbs)
    coll = s.collective
    doc = {
        "name": name or _default_name(s, inplace),
        "collective": _NAMES[coll.kind],
        "protocol": "Simple",
        "inplace": bool(inplace),
        "reuse_resources": False,
        "gpus": plan,
        "num_threads_per_block": 1024,
        "use_double_scratch_buffer": False,
        "buffer_alignment": 16,
        "min_message_size": int(min_bytes),
        "max_message_size": hi,
    }
    return json.dumps(doc, indent=1) + "\n"


def _default_name(s: Schedule, inplace: bool) -> str:
    algo = s.meta.get("algorithm", "schedule")
    where = "inplace" if inplace else "outofplace"
    return f"collsynth-{algo}-{_NAMES[s.collective.kind]}-{s.topology.name}-{where}"


def _prepare(schedule: Schedule, inplace: bool, verify: bool) -> Schedule:
    coll = schedule.collective
    if coll.kind not in _NAMES:
        raise CollsynthError(
            f"MSCCL++ export does not support {coll.kind.value} collectives "
            f"(supported: {', '.join(k.value for k in _NAMES)})"
        )
    _layout(coll, inplace)  # the MSCCL layout's own refusals (in-place alltoall)
    schedule = whole_chunks(schedule)
    if schedule.num_ops == 0:
        raise CollsynthError("cannot export an empty schedule to MSCCL++")
    if verify:
        from ..verify import ensure_verified

        ensure_verified(schedule)
    return schedule


def _prepare_groups(schedule: Schedule, inplace: bool, verify: bool) -> Schedule:
    """A schedule with in-network groups, for :func:`.mscclpp_nvls.nvls_gpus`: joins expanded,
    whole chunks, verified."""
    s = schedule.expand_joins()
    if s.part_den is not None and not bool(np.all((s.part_lo == 0) & (s.part_hi == s.part_den))):
        raise CollsynthError(
            "the MSCCL++ export of in-network groups needs whole chunks (this schedule moves "
            "byte ranges)"
        )
    _layout(s.collective, inplace)
    if verify:
        from ..verify import ensure_verified

        ensure_verified(s)
    return s


class _Lowering:
    """Working slots, events per (rank, chunk), thread-block groups and emission."""

    def __init__(self, s: Schedule, inplace: bool, channel: str):
        self.s = s
        coll = s.collective
        self.n = coll.num_ranks
        self.coll = coll
        self.ncpl, self.ic, self.oc, self.inloc, self.outloc = _layout(coll, inplace)
        self.order = _linear_order(s)
        self.ctype = [self._ctype(op, channel) for op in range(s.num_ops)]
        self._slots()

    def _ctype(self, op: int, channel: str) -> str:
        if channel != "auto":
            return channel
        t = self.s.topology
        net = any(t.links[int(l)].cls in NETWORK_CLASSES for l in self.s.route(op))
        return "port" if net else "memory"

    def _slots(self) -> None:
        """Working slot of every (rank, chunk) handled, the initial copies, and where each
        transfer lands."""
        s, coll = self.s, self.coll
        src, dst, chunk = s.src.tolist(), s.dst.tolist(), s.chunk.tolist()
        writes: dict[tuple[int, int], list[int]] = defaultdict(list)
        touched: set[tuple[int, int]] = set()
        for op in range(s.num_ops):
            writes[dst[op], chunk[op]].append(op)
            touched.add((src[op], chunk[op]))
            touched.add((dst[op], chunk[op]))
        holds = self._initial_holders()
        self.scratch = [0] * self.n
        self.work: dict[tuple[int, int], tuple[str, int]] = {}
        self.init: dict[tuple[int, int], tuple[str, int]] = {}  # copy from this input slot
        for c in range(coll.num_chunks):
            dests = set(coll.destinations(c))
            for r in range(self.n):
                key = (r, c)
                start = r in holds[c]
                if not (key in touched or (r in dests and start)):
                    continue
                if r in dests:
                    slot = self.outloc(r, c)
                elif start and not writes.get(key):
                    slot = self.inloc(r, c)
                else:
                    slot = self._new_scratch(r)
                self.work[key] = slot
                if start and slot != self.inloc(r, c):
                    self.init[key] = self.inloc(r, c)
        self.land: list[tuple[str, int]] = []
        for op in range(s.num_ops):
            key = (dst[op], chunk[op])
            direct = s.kind[op] == OpKind.COPY and writes[key] == [op] and key not in self.init
            self.land.append(self.work[key] if direct else self._new_scratch(dst[op]))
        # a copy into a working slot that already holds the chunk (the rank started with it,
        # or an earlier copy in L order brought it) changes nothing: it is only waited for
        self.redundant: set[int] = set()
        held = {(r, c) for (r, c) in self.work if r in holds[c]}
        for op in self.order.tolist():
            key = (dst[op], chunk[op])
            if s.kind[op] == OpKind.COPY and not coll.reduces:
                if key in held:
                    self.redundant.add(op)
                held.add(key)

    def _initial_holders(self) -> list[set[int]]:
        coll = self.coll
        if coll.reduces:
            every = set(range(self.n))
            return [every for _ in range(coll.num_chunks)]
        return [{int(r)} for r in coll.chunk_source.tolist()]

    def _new_scratch(self, r: int) -> tuple[str, int]:
        self.scratch[r] += 1
        return ("s", self.scratch[r] - 1)

    # ------------------------------------------------------------------ grouping
    def _events(self) -> dict[tuple[int, int], list[_Event]]:
        """Per (rank, chunk): its initial copy and transfer halves, in L order."""
        s = self.s
        ev: dict[tuple[int, int], list[_Event]] = defaultdict(list)
        for key in sorted(self.init):
            ev[key].append(_Event(-1, "init", key[1]))
        for pos, op in enumerate(self.order.tolist()):
            a, g, c = int(s.src[op]), int(s.dst[op]), int(s.chunk[op])
            ev[a, c].append(_Event(pos, "send", c, op, g, self.ctype[op]))
            ev[g, c].append(_Event(pos, "recv", c, op, a, self.ctype[op]))
        return ev

    @staticmethod
    def _weight(events: list[_Event]) -> int:
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
        blocks: list[dict[int, _Block]] = [dict() for _ in range(self.n)]
        merged: dict[tuple[int, int], list[_Event]] = defaultdict(list)
        for (r, c), events in ev.items():
            merged[r, group[c]].extend(events)
        chans = _Channels(self.n)
        for (r, g), events in sorted(merged.items()):
            events.sort(key=lambda e: (e.pos, e.chunk))
            for e in events:
                if e.kind != "init":
                    chans.need(r, e.peer, g, e.ctype)
                if e.kind == "send":
                    chans.need_buffer(r, e.peer, self.land[e.op][0], e.ctype)
        for (r, g), events in sorted(merged.items()):
            blk = blocks[r].setdefault(g, _Block(g))
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

    def _lower(self, r: int, blk: _Block, e: _Event, chans: _Channels) -> None:
        c = e.chunk
        if e.kind == "init":
            src, dst = self.init[r, c], self.work[r, c]
            blk.sync(src, dst)
            blk.ops.append({"name": "copy", "src_buff": [_ref(src)], "dst_buff": [_ref(dst)]})
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
                "src_buff": [_ref(here)],
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
            blk.ops.append({"name": "re", "src_buff": [_ref(work), _ref(landed)],
                            "dst_buff": [_ref(work)], "reduce_op": "sum"})  # fmt: skip
        else:
            blk.ops.append({"name": "copy", "src_buff": [_ref(landed)], "dst_buff": [_ref(work)]})
        blk.dirty.add(work)

    def _gpu(self, r: int, blocks: dict[int, _Block], chans: _Channels) -> dict:
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


class _Channels:
    """Channel pairs per (pair of ranks, group, type), and remote buffers per rank."""

    def __init__(self, n: int):
        self.n = n
        self.pairs: dict[tuple[int, int, str], set[int]] = defaultdict(set)  # (lo, hi, type)
        self._order: dict[int, dict[str, list[tuple[int, int]]]] | None = None
        self.bufs: list[dict[tuple[int, str], set[str]]] = [defaultdict(set) for _ in range(n)]

    def need(self, a: int, b: int, group: int, ctype: str) -> None:
        self.pairs[min(a, b), max(a, b), ctype].add(group)
        self._order = None

    def _declared_order(self) -> dict[int, dict[str, list[tuple[int, int]]]]:
        """Per rank and type: its channels as (peer, group), in GPU-level order (by peer,
        then group: the k-th channel toward a peer pairs with the peer's k-th toward it)."""
        if self._order is None:
            out: dict[int, dict[str, list[tuple[int, int]]]] = {
                r: defaultdict(list) for r in range(self.n)
            }
            for (lo, hi, ctype), groups in sorted(self.pairs.items()):
                for g in sorted(groups):
                    out[lo][ctype].append((hi, g))
                    out[hi][ctype].append((lo, g))
            for r in out:
                for ctype in out[r]:
                    out[r][ctype].sort()
            self._order = out
        return self._order

    def index(self, r: int, peer: int, group: int, ctype: str) -> int:
        return self._declared_order()[r][ctype].index((peer, group))

    def declared(self, r: int) -> list[dict]:
        order = self._declared_order()[r]
        return [{"channel_type": t, "connected_to": [p for p, _ in order[t]]}
                for t in sorted(order) if order[t]]  # fmt: skip

    def need_buffer(self, r: int, peer: int, btype: str, ctype: str) -> None:
        self.bufs[r][peer, btype].add(ctype)

    def buffer(self, r: int, peer: int, btype: str, ctype: str) -> int:
        """GPU-level id of ``peer``'s buffer ``btype`` in ``r``'s remote buffers (every
        buffer declared first with :meth:`need_buffer`)."""
        assert ctype in self.bufs[r][peer, btype]
        return sorted(self.bufs[r]).index((peer, btype))

    def remote_buffers(self, r: int) -> list[dict]:
        return [{"rank": p, "type": t, "access_channel_types": sorted(self.bufs[r][p, t])}
                for p, t in sorted(self.bufs[r])]  # fmt: skip


def chunk_counts(kind: CollKind, n: int, c: int) -> tuple[int, int]:
    """(input, output) chunks of one rank's buffers for ``n`` ranks, ``c`` chunks per rank."""
    return {
        CollKind.ALLGATHER: (c, n * c),
        CollKind.REDUCESCATTER: (n * c, c),
        CollKind.ALLREDUCE: (n * c, n * c),
        CollKind.ALLTOALL: (n * c, n * c),
        CollKind.BROADCAST: (c, c),
    }[kind]


def _ref(slot: tuple[str, int]) -> dict:
    return {"type": slot[0], "index": int(slot[1]), "size": 1}
