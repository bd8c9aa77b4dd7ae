"""The MSCCL lowering passes for one channel count (the decisions are in
:mod:`collsynth.export.msccl`'s docstring).

Each pass is a function of what it reads that returns what it makes:

1. :func:`assign_channels` -> :class:`ChannelAssignment` (channel of every operation, which
   fusions hold, the peers pinned to one thread block);
2. :func:`make_steps` -> :class:`StepList` (send and receive halves, final copies, each with
   the waits its data needs; scratch slots per rank);
3. :func:`build_thread_blocks` -> :class:`ThreadBlockRoles` (one thread block per receive and
   send peer on each (GPU, channel), paired);
4. :func:`place_steps` -> :class:`Placement` (every step in its thread block), then
   :func:`check_coresidency`;
5. :func:`drop_implied_waits` -> the waits not implied by thread-block order, send -> receive
   matching and the waits kept before (vector clocks along the global order);
6. :func:`number_thread_blocks` -> :class:`Numbering` (ids per GPU, local block last; limits);
7. :func:`position_steps` -> :class:`Positions` (latest wait per thread block, ``s`` numbers
   with the nops counted, the waited-on steps).

:func:`lower` runs them in order into a :class:`LoweredProgram`, which
:mod:`collsynth.export.msccl_write` turns into text. Steps are numbered in one list (the
transfer steps in lowering order, then the final copies); waits name steps by that number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CollsynthError
from ..schedule.ir import OpKind
from .lowering import BufferLayout, Slot
from .msccl_options import MAX_NODES, MAX_STEPS, MAX_TBS_PER_CHANNEL
from .msccl_order import FusedOrder, OperationTables

#: the key of a GPU's local thread block (no peer), made only for a copy on a GPU without any
LOCAL = "local"


class TooManySteps(Exception):
    """A thread block exceeds the step limit (more channels may fix it)."""


# ---------------------------------------------------------------------- channels
@dataclass(frozen=True)
class ChannelAssignment:
    """``channel[op]``; ``kept_fusion[x]``: ``x``'s receive is really fused with its
    successor's send; ``recv_pair[(gpu, channel, receive peer)]`` = the send peer pinned to
    the same thread block by a fused step (``send_pair`` the reverse)."""

    channel: list[int]
    kept_fusion: list[bool]
    recv_pair: dict[tuple[int, int, int], int]
    send_pair: dict[tuple[int, int, int], int]


def assign_channels(ops: OperationTables, fused: FusedOrder, channels: int) -> ChannelAssignment:
    """Give every chain start the next channel of its pair; fused successors inherit."""
    src, dst = ops.src, ops.dst
    channel = [0] * ops.num_ops
    really_fused = [False] * ops.num_ops
    recv_pair: dict[tuple[int, int, int], int] = {}
    send_pair: dict[tuple[int, int, int], int] = {}
    heads: dict[tuple[int, int], int] = {}
    for op in fused.order:
        p = fused.fused_prev[op]
        if p >= 0:  # inherit unless the thread-block pairing conflicts
            g, ch = src[op], channel[p]
            a, b = src[p], dst[op]
            if recv_pair.get((g, ch, a), b) == b and send_pair.get((g, ch, b), a) == a:
                recv_pair[(g, ch, a)] = b
                send_pair[(g, ch, b)] = a
                channel[op] = ch
                really_fused[p] = True
                continue
        key = (src[op], dst[op])
        k = heads.get(key, 0)
        heads[key] = k + 1
        channel[op] = k % channels
    return ChannelAssignment(channel, really_fused, recv_pair, send_pair)


# ---------------------------------------------------------------------- steps
@dataclass(frozen=True)
class Step:
    """One XML step before placement: ``recv_op``/``send_op`` the operation it receives/sends
    (``-1``: none); ``waits`` the steps whose data it needs (numbers in the step list)."""

    gpu: int
    type: str
    src: Slot
    dst: Slot
    recv_op: int = -1
    send_op: int = -1
    chan: int = 0
    waits: tuple[int, ...] = ()


@dataclass(frozen=True)
class StepList:
    """The transfer steps in lowering order, then the final copies (numbered in that order),
    and the scratch slots each rank needs."""

    steps: list[Step]
    copies: list[Step]
    scratch: list[int]

    @property
    def all(self) -> list[Step]:
        return self.steps + self.copies


def make_steps(
    ops: OperationTables, fused: FusedOrder, channels: ChannelAssignment, layout: BufferLayout
) -> StepList:
    """Turn the operations, in lowering order, into send and receive steps; then a ``cpy`` for
    every destination whose data is not yet in its output slot.

    A read of chunk ``c`` at ``g`` waits for the latest earlier write; a reducing write waits
    for the reads since the latest write (or that write)."""
    src, dst, chunk, channel = ops.src, ops.dst, ops.chunk, channels.channel
    steps: list[Step] = []
    held: dict[tuple[int, int], Slot] = {}  # (gpu, chunk) -> where it is held now
    received: dict[tuple[int, int], Slot] = {}  # (gpu, chunk) -> where it is received
    scratch = [0] * ops.num_ranks
    last_write: dict[tuple[int, int], int] = {}
    reads_since: dict[tuple[int, int], list[int]] = {}

    def held_slot(g: int, c: int) -> Slot:
        """Where GPU ``g`` holds chunk ``c`` now (its input slot before any receive)."""
        key = (g, c)
        if key in held:
            return held[key]
        if ops.reduces or ops.chunk_source[c] == g:
            return layout.input_slot(g, c)
        raise CollsynthError(f"cannot export: rank {g} sends chunk {c} before holding it")

    def receive_slot(g: int, c: int) -> Slot:
        """Where GPU ``g`` receives chunk ``c``: its output slot, or a new scratch slot."""
        key = (g, c)
        slot = received.get(key)
        if slot is None:
            if ops.is_destination(g, c):
                slot = layout.output_slot(g, c)
            else:
                slot = ("s", scratch[g])
                scratch[g] += 1
            received[key] = slot
        return slot

    def read(g: int, c: int) -> tuple[int, ...]:
        """The waits of the step about to be added, a read of chunk ``c`` at ``g``."""
        w = last_write.get((g, c))
        reads_since.setdefault((g, c), []).append(len(steps))
        return () if w is None else (w,)

    def write(g: int, c: int) -> tuple[int, ...]:
        """The waits of the step about to be added, a write of chunk ``c`` at ``g``."""
        key = (g, c)
        waits: tuple[int, ...] = ()
        if ops.reduces:
            since = reads_since.get(key)
            if since:
                waits = tuple(since)
            elif key in last_write:
                waits = (last_write[key],)
        last_write[key] = len(steps)
        reads_since[key] = []
        return waits

    def add_send(op: int) -> None:
        """The send half ``s`` of an operation whose send is not fused with a receive."""
        a, c = src[op], chunk[op]
        loc = held_slot(a, c)
        steps.append(Step(a, "s", loc, loc, send_op=op, chan=channel[op], waits=read(a, c)))

    def add_receive(op: int) -> None:
        """The receive half: ``r``/``rrc``, or fused ``rcs``/``rrcs``/``rrs``."""
        g, c, ch = dst[op], chunk[op], channel[op]
        y = fused.fused_next[op] if channels.kept_fusion[op] else -1
        if y < 0:
            if ops.kind[op] == OpKind.REDUCE:
                here = held_slot(g, c)
                into = receive_slot(g, c)
                step = Step(g, "rrc", here, into, recv_op=op, chan=ch, waits=write(g, c))
            else:
                into = receive_slot(g, c)
                step = Step(g, "r", into, into, recv_op=op, chan=ch, waits=write(g, c))
            held[(g, c)] = into
        else:
            kind = fused.fused_type[op]
            if kind == "rcs":
                into = receive_slot(g, c)
                step = Step(g, "rcs", into, into, op, y, ch, write(g, c))
                held[(g, c)] = into
            elif kind == "rrcs":
                here = held_slot(g, c)
                into = receive_slot(g, c)
                step = Step(g, "rrcs", here, into, op, y, ch, write(g, c))
                held[(g, c)] = into
            else:  # rrs: nothing stored at g
                here = held_slot(g, c)
                step = Step(g, "rrs", here, here, op, y, ch, read(g, c))
        steps.append(step)

    for op in fused.order:
        p = fused.fused_prev[op]
        if not (p >= 0 and channels.kept_fusion[p]):
            add_send(op)
        add_receive(op)

    copies: list[Step] = []
    for r, c in ops.final_locations:
        loc = held.get((r, c))
        if loc is None:
            if not ops.reduces and ops.chunk_source[c] != r:
                raise CollsynthError(f"cannot export: rank {r} never receives chunk {c}")
            loc = layout.input_slot(r, c)
        out = layout.output_slot(r, c)
        if loc != out:
            waits = (last_write[(r, c)],) if (r, c) in last_write else ()
            copies.append(Step(r, "cpy", loc, out, chan=0, waits=waits))
    return StepList(steps, copies, scratch)


# ---------------------------------------------------------------------- thread blocks
@dataclass(frozen=True)
class ThreadBlock:
    """A thread block of ``gpu`` on channel ``chan`` with its peers (``-1``: none); ``key`` is
    ``(chan, recv, send)``, or :data:`LOCAL`."""

    gpu: int
    chan: int
    send: int
    recv: int
    key: tuple[int, int, int] | str


@dataclass(frozen=True)
class ThreadBlockRoles:
    """The thread blocks with a peer, and the block of each role: ``by_role[(gpu, channel,
    "r" or "s", peer)]`` is an index into ``blocks``."""

    blocks: list[ThreadBlock]
    by_role: dict[tuple[int, int, str, int], int]


def build_thread_blocks(
    step_list: StepList, ops: OperationTables, channels: ChannelAssignment
) -> ThreadBlockRoles:
    """One thread block per receive and send peer on each (GPU, channel), paired: fused pairs
    first, then the other roles in peer order."""
    src, dst = ops.src, ops.dst
    recv_pair, send_pair = channels.recv_pair, channels.send_pair
    recv_roles: dict[tuple[int, int], set[int]] = {}
    send_roles: dict[tuple[int, int], set[int]] = {}
    for st in step_list.steps:
        if st.recv_op >= 0:
            recv_roles.setdefault((st.gpu, st.chan), set()).add(src[st.recv_op])
        if st.send_op >= 0:
            send_roles.setdefault((st.gpu, st.chan), set()).add(dst[st.send_op])
    blocks: list[ThreadBlock] = []
    by_role: dict[tuple[int, int, str, int], int] = {}
    for g, ch in sorted(set(recv_roles) | set(send_roles)):
        receives = sorted(recv_roles.get((g, ch), ()))
        sends = sorted(send_roles.get((g, ch), ()))
        pairs = []
        free_r = [a for a in receives if (g, ch, a) not in recv_pair]
        free_s = [b for b in sends if (g, ch, b) not in send_pair]
        for a in receives:
            if (g, ch, a) in recv_pair:
                pairs.append((a, recv_pair[(g, ch, a)]))
        for i in range(max(len(free_r), len(free_s))):
            pairs.append(
                (free_r[i] if i < len(free_r) else -1, free_s[i] if i < len(free_s) else -1)
            )
        for a, b in pairs:
            index = len(blocks)
            blocks.append(ThreadBlock(g, ch, b, a, (ch, a, b)))
            if a >= 0:
                by_role[(g, ch, "r", a)] = index
            if b >= 0:
                by_role[(g, ch, "s", b)] = index
    return ThreadBlockRoles(blocks, by_role)


@dataclass(frozen=True)
class Placement:
    """Every thread block (local ones after the others), its steps in order, each GPU's blocks
    in the order they were made, and per step its block and position in it."""

    blocks: list[ThreadBlock]
    block_steps: list[list[int]]
    gpu_blocks: list[list[int]]
    block_of: list[int]
    index_in_block: list[int]


def place_steps(step_list: StepList, roles: ThreadBlockRoles, ops: OperationTables) -> Placement:
    """Append every step to its role's thread block, each copy to a short one."""
    src, dst = ops.src, ops.dst
    blocks = list(roles.blocks)
    block_steps: list[list[int]] = [[] for _ in blocks]
    gpu_blocks: list[list[int]] = [[] for _ in range(ops.num_ranks)]
    for index, made in enumerate(blocks):
        gpu_blocks[made.gpu].append(index)
    block_of: list[int] = []
    index_in_block: list[int] = []

    def append(block: int, step: int) -> None:
        block_of.append(block)
        index_in_block.append(len(block_steps[block]))
        block_steps[block].append(step)

    for i, st in enumerate(step_list.steps):
        if st.recv_op >= 0:
            append(roles.by_role[(st.gpu, st.chan, "r", src[st.recv_op])], i)
        else:
            append(roles.by_role[(st.gpu, st.chan, "s", dst[st.send_op])], i)
    for j, st in enumerate(step_list.copies):
        # a local copy needs no peer: append it to the GPU's shortest thread block (it reads
        # data that is in place from the start), or to a local one if there is none
        candidates = sorted(
            gpu_blocks[st.gpu], key=lambda b: (len(block_steps[b]), str(blocks[b].key))
        )
        if candidates:
            shortest = candidates[0]
        else:
            shortest = len(blocks)
            blocks.append(ThreadBlock(st.gpu, 0, -1, -1, LOCAL))
            block_steps.append([])
            gpu_blocks[st.gpu].append(shortest)
        append(shortest, len(step_list.steps) + j)
    return Placement(blocks, block_steps, gpu_blocks, block_of, index_in_block)


def check_coresidency(placement: Placement, instances: int, max_tbs: int) -> None:
    """Every GPU's thread blocks (times the instances) fit ``max_tbs``."""
    for g, mine in enumerate(placement.gpu_blocks):  # before the (costly) clocks
        if len(mine) * instances > max_tbs:
            raise CollsynthError(
                f"cannot export: GPU {g} needs "
                f"{len(mine) * instances} thread blocks, more "
                f"than the limit of {max_tbs}"
            )


# ---------------------------------------------------------------------- dependencies
def drop_implied_waits(step_list: StepList, placement: Placement) -> list[tuple[int, ...]]:
    """Per step, its waits without those implied by thread-block order, send -> receive and
    the waits kept so far (vector clocks over one valid execution: the global order)."""
    steps = step_list.steps
    block_of, index_in_block, block_steps = (
        placement.block_of,
        placement.index_in_block,
        placement.block_steps,
    )
    num_blocks = len(placement.blocks)
    send_step = {st.send_op: i for i, st in enumerate(steps) if st.send_op >= 0}
    clock: list[np.ndarray] = []
    kept_waits: list[tuple[int, ...]] = []
    for i, st in enumerate(step_list.all):
        block, index = block_of[i], index_in_block[i]
        vc = (
            clock[block_steps[block][index - 1]].copy()
            if index
            else np.zeros(num_blocks, dtype=np.int32)
        )
        if st.recv_op >= 0:
            np.maximum(vc, clock[send_step[st.recv_op]], out=vc)
        kept = []
        for w in sorted(st.waits, key=lambda x: -x):
            if vc[block_of[w]] > index_in_block[w]:
                continue
            np.maximum(vc, clock[w], out=vc)
            kept.append(w)
        kept_waits.append(tuple(kept))
        vc[block] = index + 1
        clock.append(vc)
    return kept_waits


@dataclass(frozen=True)
class Numbering:
    """Each GPU's thread blocks in id order (``gpu_order``) and each block's id."""

    gpu_order: list[list[int]]
    block_id: list[int]


def number_thread_blocks(
    placement: Placement, channels: int, instances: int, max_tbs: int
) -> Numbering:
    """Number each GPU's thread blocks (local last) and check the per-channel limits."""
    blocks = placement.blocks
    block_id = [-1] * len(blocks)
    gpu_order: list[list[int]] = []
    for g, mine in enumerate(placement.gpu_blocks):
        ordered = sorted((b for b in mine if blocks[b].key != LOCAL), key=lambda b: blocks[b].key)
        ordered += [b for b in mine if blocks[b].key == LOCAL]
        for i, b in enumerate(ordered):
            block_id[b] = i
        gpu_order.append(ordered)
        if len(ordered) * instances > max_tbs:
            raise CollsynthError(
                f"cannot export: GPU {g} needs {len(ordered) * instances} "
                f"thread blocks, more than the limit of {max_tbs}"
            )
        for ch in range(channels):
            sending = sum(1 for b in ordered if blocks[b].chan == ch and blocks[b].send >= 0)
            receiving = sum(1 for b in ordered if blocks[b].chan == ch and blocks[b].recv >= 0)
            if max(sending, receiving) > MAX_TBS_PER_CHANNEL:
                raise CollsynthError(
                    f"cannot export: GPU {g} needs {max(sending, receiving)} "
                    f"thread blocks on channel {ch}, more than "
                    f"{MAX_TBS_PER_CHANNEL}"
                )
    return Numbering(gpu_order, block_id)


@dataclass(frozen=True)
class Positions:
    """Per step: its waits (the latest per other thread block, by block id), its ``s`` number
    (the nops before it counted); the steps some step waits for (``hasdep``)."""

    waits: list[tuple[int, ...]]
    position: list[int]
    waited_on: frozenset[int]


def position_steps(
    kept_waits: list[tuple[int, ...]],
    placement: Placement,
    numbering: Numbering,
    dialect: str,
    instances: int,
) -> Positions:
    """Keep the latest wait per thread block, number the steps with their nops; check the step
    limit (:class:`TooManySteps`) and the XML node limit."""
    max_steps = MAX_STEPS[dialect]
    block_of, index_in_block, block_id = (
        placement.block_of,
        placement.index_in_block,
        numbering.block_id,
    )
    waits = list(kept_waits)
    position = [-1] * len(waits)
    for g, ordered in enumerate(numbering.gpu_order):
        for b in ordered:
            p = 0
            for i in placement.block_steps[b]:
                best: dict[int, int] = {}
                for w in waits[i]:
                    if block_of[w] == b:
                        continue
                    current = best.get(block_id[block_of[w]])
                    if current is None or index_in_block[w] > index_in_block[current]:
                        best[block_id[block_of[w]]] = w
                waits[i] = tuple(best[k] for k in sorted(best))
                p += max(0, len(waits[i]) - 1)
                position[i] = p
                p += 1
            if p > max_steps:
                raise TooManySteps(
                    f"GPU {g} thread block {block_id[b]} needs {p} steps, more "
                    f"than the {dialect} limit of {max_steps}"
                )
        nodes = (
            2
            + len(ordered) * instances
            + instances
            * sum(
                len(placement.block_steps[b])
                + sum(max(0, len(waits[i]) - 1) for i in placement.block_steps[b])
                for b in ordered
            )
        )
        if nodes > MAX_NODES:
            raise CollsynthError(
                f"cannot export: GPU {g} would have {nodes} XML nodes, "
                f"more than the parser's limit of {MAX_NODES}"
            )
    waited_on = frozenset(w for ws in waits for w in ws)
    return Positions(waits, position, waited_on)


# ---------------------------------------------------------------------- all passes
@dataclass(frozen=True)
class LoweredProgram:
    """What the XML writer needs: the steps, the thread blocks per GPU in id order, each
    block's steps, the steps' waits and positions, the channels used and the scratch slots."""

    steps: list[Step]
    blocks: list[ThreadBlock]
    block_steps: list[list[int]]
    numbering: Numbering
    block_of: list[int]
    positions: Positions
    num_channels: int
    scratch: list[int]


def lower(
    ops: OperationTables,
    fused: FusedOrder,
    layout: BufferLayout,
    channels: int,
    *,
    dialect: str,
    instances: int,
    max_tbs: int,
) -> LoweredProgram:
    """The passes in order with ``channels`` channels per instance."""
    assignment = assign_channels(ops, fused, channels)
    step_list = make_steps(ops, fused, assignment, layout)
    roles = build_thread_blocks(step_list, ops, assignment)
    placement = place_steps(step_list, roles, ops)
    check_coresidency(placement, instances, max_tbs)
    kept_waits = drop_implied_waits(step_list, placement)
    numbering = number_thread_blocks(placement, channels, instances, max_tbs)
    positions = position_steps(kept_waits, placement, numbering, dialect, instances)
    used = max(
        (placement.blocks[b].chan for ordered in numbering.gpu_order for b in ordered), default=0
    )
    return LoweredProgram(
        steps=step_list.all,
        blocks=placement.blocks,
        block_steps=placement.block_steps,
        numbering=numbering,
        block_of=placement.block_of,
        positions=positions,
        num_channels=used + 1,
        scratch=step_list.scratch,
    )
