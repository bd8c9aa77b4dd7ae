"""Per-rank programs: what one rank sends, receives and waits for (see docs/runtime.md).

A schedule's operations and dependencies are global. :func:`build_rank_plan` turns them into
the part that one rank executes, with only *local* waiting conditions:

* a global execution order ``order``: a topological order of the dependencies plus the planned
  per-link orders (by level, then op id, so every rank computes the same one);
* for each operation ``i`` that involves rank ``r`` (as sender or receiver), its *local
  frontier* ``P_r(i)``: the operations involving ``r`` that are reached from ``deps(i)`` by
  walking back through operations that do not involve ``r``. Rank ``r`` posts the send of ``i``
  (sender) or applies the received data of ``i`` (receiver) only once every operation in
  ``P_r(i)`` has completed locally (a send: its request completed; a receive: its data applied).
  By induction this makes every ``r``-local ancestor of ``i`` complete first, which is all that
  can influence the bytes ``r`` sends or the order of writes into ``r``'s buffer;
* message tags: the operations between one ordered pair of ranks are numbered in ``order``;
  the tag is that number modulo the backend's tag limit. Operations whose tags collide are posted
  in that order (sends and receives alike), so non-overtaking matching stays unambiguous.
* per-link order: among the operations this rank sends to one peer, one that follows another
  in a link's planned order is posted after it (one connection carries them in that order).

Buffer layout: every rank keeps one working byte buffer with one slot per chunk it touches
(holds initially, sends, receives or must end with). Inputs are loaded into it, operations read
and write byte ranges of it, outputs are read from it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from math import gcd

import numpy as np

from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..schedule.compact import CompactSchedule
from ..schedule.dag import levels, owners
from ..schedule.ir import OpKind, Schedule


# ---------------------------------------------------------------------- collective layout
def input_chunks(coll: Collective, rank: int) -> list[int]:
    """Global chunk ids of ``rank``'s input buffer, in buffer order."""
    n, c, k = coll.num_ranks, coll.chunks_per_rank, coll.kind
    if coll.reduces:
        return list(range(coll.num_chunks))
    if k in (CollKind.ALLGATHER, CollKind.GATHER):
        return list(range(rank * c, (rank + 1) * c))
    if k is CollKind.BROADCAST:
        return list(range(c)) if rank == coll.root else []
    if k is CollKind.SCATTER:
        return list(range(n * c)) if rank == coll.root else []
    if k is CollKind.ALLTOALL:
        return list(range(rank * n * c, (rank + 1) * n * c))
    return [ch for ch, (s, _) in enumerate(coll.custom_chunks) if s == rank]


def output_chunks(coll: Collective, rank: int) -> list[int]:
    """Global chunk ids of ``rank``'s output buffer, in buffer order."""
    n, c, k = coll.num_ranks, coll.chunks_per_rank, coll.kind
    if k in (CollKind.ALLGATHER, CollKind.ALLREDUCE):
        return list(range(n * c))
    if k is CollKind.BROADCAST:
        return list(range(c))
    if k in (CollKind.REDUCESCATTER, CollKind.SCATTER):
        return list(range(rank * c, (rank + 1) * c))
    if k is CollKind.REDUCE:
        return list(range(c)) if rank == coll.root else []
    if k is CollKind.GATHER:
        return list(range(n * c)) if rank == coll.root else []
    if k is CollKind.ALLTOALL:
        return [s * n * c + rank * c + j for s in range(n) for j in range(c)]
    return [ch for ch, (s, d) in enumerate(coll.custom_chunks) if rank in d]


# ---------------------------------------------------------------------- sizes
def size_quantum(sched: Schedule | CompactSchedule, elem: int) -> int:
    """Smallest number of bytes that every valid ``size`` is a multiple of.

    Chunk bytes must be whole elements and every byte range boundary ``lo/den`` of a chunk must
    fall on an element boundary. (A compact schedule's representatives have every byte range
    its images have.)
    """
    if isinstance(sched, CompactSchedule):
        sched = sched.reps
    q = int(elem)
    if sched.part_den is not None and sched.num_ops:
        assert sched.part_lo is not None and sched.part_hi is not None
        bounds = np.unique(
            np.concatenate(
                [
                    np.stack([sched.part_lo, sched.part_den], axis=1),
                    np.stack([sched.part_hi, sched.part_den], axis=1),
                ]
            ),
            axis=0,
        )
        for num, den in bounds.tolist():
            if den <= 0:
                continue
            m = den * elem
            need = m // gcd(int(num), m) if num else 1
            q = q * need // gcd(q, need)
    return q * sched.collective.size_units


def chunk_bytes_for(sched: Schedule | CompactSchedule, size: float, elem: int) -> int:
    """Bytes per chunk for ``size``; a one-line error when ``size`` does not fit the schedule."""
    quantum = size_quantum(sched, elem)
    if not size > 0 or size != int(size) or int(size) % quantum:
        shown = f"{int(size)}" if size == int(size) else f"{size:g}"
        below = int(size) // quantum * quantum
        near = f"{below} or {below + quantum}" if below > 0 else f"{quantum}"
        raise CollsynthError(
            f"size {shown} B does not fit this schedule: it needs a positive multiple of "
            f"{quantum} B ({sched.collective.size_units} chunks, byte ranges and {elem}-byte "
            f"elements), e.g. {near}"
        )
    return int(size) // sched.collective.size_units


def io_chunk_counts(coll: Collective) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, how many chunks its input and its output buffer hold (the lengths of
    :func:`input_chunks` and :func:`output_chunks`, computed without listing them)."""
    n, c, k = coll.num_ranks, coll.chunks_per_rank, coll.kind
    ins = np.zeros(n, dtype=np.int64)
    outs = np.zeros(n, dtype=np.int64)
    if k is CollKind.CUSTOM:
        srcs = np.fromiter((s for s, _ in coll.custom_chunks), dtype=np.int64)
        dsts = np.fromiter((d for _, ds in coll.custom_chunks for d in ds), dtype=np.int64)
        return np.bincount(srcs, minlength=n), np.bincount(dsts, minlength=n)
    root = coll.root if coll.root is not None else 0
    if coll.reduces:
        ins[:] = coll.num_chunks
    elif k in (CollKind.ALLGATHER, CollKind.GATHER):
        ins[:] = c
    elif k is CollKind.BROADCAST:
        ins[root] = c
    elif k is CollKind.SCATTER:
        ins[root] = n * c
    elif k is CollKind.ALLTOALL:
        ins[:] = n * c
    if k in (CollKind.ALLGATHER, CollKind.ALLREDUCE, CollKind.ALLTOALL):
        outs[:] = n * c
    elif k in (CollKind.BROADCAST, CollKind.REDUCESCATTER, CollKind.SCATTER):
        outs[:] = c
    elif k is CollKind.REDUCE:
        outs[root] = c
    elif k is CollKind.GATHER:
        outs[root] = n * c
    return ins, outs


def rank_buffer_bytes(coll: Collective, chunk_bytes: int) -> np.ndarray:
    """Per rank, the fewest bytes its buffers take in a run with ``chunk_bytes`` per chunk:
    the working buffer (at least every chunk of its input or its output), the input itself
    and the copy of the output (the reference and staged receives come on top)."""
    ins, outs = io_chunk_counts(coll)
    return (np.maximum(ins, outs) + ins + outs).astype(object) * int(chunk_bytes)


#: Environment variable: the most bytes the ranks of one machine may need for their buffers
#: (default: the machine's physical memory).
MEMORY_ENV = "COLLSYNTH_MAX_RUN_BYTES"


def memory_limit() -> int | None:
    """The bytes that the buffers of the ranks on this machine may take at most:
    ``COLLSYNTH_MAX_RUN_BYTES``, else the physical memory (None where it is not known)."""
    from ..files import env_limit

    if os.environ.get(MEMORY_ENV, "").strip():
        return env_limit(MEMORY_ENV, 0)
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None
    return pages * page if pages > 0 and page > 0 else None


def check_memory(
    coll: Collective, chunk_bytes: int, local_ranks: int, per_chunk: np.ndarray | None = None
) -> None:
    """Refuse, before anything is allocated, a run whose ``local_ranks`` ranks on this
    machine (the hungriest ones) need more bytes for their buffers than
    :func:`memory_limit`. ``per_chunk``: ``rank_buffer_bytes(coll, 1)``, when the caller
    checks many sizes of one collective (it is linear in the chunks)."""
    limit = memory_limit()
    if limit is None:
        return
    unit = rank_buffer_bytes(coll, 1) if per_chunk is None else per_chunk
    need = sorted((unit * int(chunk_bytes)).tolist(), reverse=True)
    total = sum(need[: max(1, local_ranks)])
    if total > limit:
        from ..units import fmt_size

        who = "one rank" if local_ranks <= 1 else f"the {min(local_ranks, len(need))} ranks"
        where = (
            f"the limit {MEMORY_ENV}={limit}"
            if os.environ.get(MEMORY_ENV, "").strip()
            else f"this machine's memory ({fmt_size(limit)}; set {MEMORY_ENV} to change the limit)"
        )
        raise CollsynthError(
            f"the buffers of {who} on this machine need at least "
            f"{fmt_size(float(min(total, 10**300)))}, more than "
            f"{where}"
        )


# ---------------------------------------------------------------------- order
def execution_order(sched: Schedule) -> np.ndarray:
    """A topological order of dependencies plus planned link orders.

    Operations are sorted by *level* (0 for an operation with no predecessor, else one more
    than the highest level of its predecessors, :func:`collsynth.schedule.dag.levels` of the
    dependencies and link orders together), then by op id.
    """
    n = sched.num_ops
    pred_src = [np.asarray(sched.dep_ids, dtype=np.int64)]  # predecessor
    pred_dst = [owners(sched.dep_ptr)]
    if sched.link_order:
        for _, seq in sorted(sched.link_order.items()):
            seq = np.asarray(seq, dtype=np.int64)
            if len(seq) > 1:
                pred_src.append(seq[:-1])
                pred_dst.append(seq[1:])
    a = np.concatenate(pred_src)
    b = np.concatenate(pred_dst)
    by_dst = np.argsort(b, kind="stable")
    pred_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(b, minlength=n), out=pred_ptr[1:])
    level = levels(n, pred_ptr, a[by_dst])
    if level is None:
        raise CollsynthError("the schedule's dependencies and link orders form a cycle")
    return np.lexsort((np.arange(n), level)).astype(np.int64)


# ---------------------------------------------------------------------- per-rank plan
@dataclass
class RankPlan:
    """Everything one rank needs to execute its part of a schedule (local indices ``j``).

    Local operations are numbered in the global execution order. Waiting conditions:

    * ``done_pre[j]``: local ops whose local completion op ``j`` waits for (its frontier);
    * ``post_pre[j]``: local sends that must be *posted* before send ``j`` (link order and
      colliding tags);
    * ``recv_pre[j]``: the local receive that must have *arrived* before receive ``j`` is
      posted (colliding tags), or -1.
    """

    rank: int
    num_ranks: int
    chunk_bytes: int
    elem: int
    ops: np.ndarray  # global op id per local op
    is_send: np.ndarray  # bool
    peer: np.ndarray  # the other rank
    offset: np.ndarray  # byte offset in the working buffer
    nbytes: np.ndarray  # bytes moved
    reduce: np.ndarray  # bool: receiver combines (sum) instead of overwriting
    tag: np.ndarray
    done_pre: list[list[int]]
    post_pre: list[list[int]]
    recv_pre: np.ndarray
    slots: dict[int, int]  # global chunk id -> slot number in the working buffer
    input_chunks: list[int]
    output_chunks: list[int]

    @property
    def num_local(self) -> int:
        return int(len(self.ops))

    @property
    def buffer_bytes(self) -> int:
        return len(self.slots) * self.chunk_bytes


def _op_range(sched: Schedule, op: int, chunk_bytes: int) -> tuple[int, int]:
    if sched.part_den is None:
        return 0, chunk_bytes
    assert sched.part_lo is not None and sched.part_hi is not None
    lo, hi, den = int(sched.part_lo[op]), int(sched.part_hi[op]), int(sched.part_den[op])
    return chunk_bytes * lo // den, chunk_bytes * hi // den


def build_rank_plan(
    sched: Schedule,
    rank: int,
    chunk_bytes: int,
    elem: int,
    tag_limit: int,
    order: np.ndarray | None = None,
) -> RankPlan:
    """Rank ``rank``'s part of ``sched`` (see the module doc); ``order``: the execution order
    when already computed."""
    coll = sched.collective
    if not 0 <= rank < coll.num_ranks:
        raise CollsynthError(f"rank {rank} is not a rank of the schedule (0..{coll.num_ranks - 1})")
    if tag_limit < 1:
        raise CollsynthError(f"tag limit must be at least 1, got {tag_limit}")
    if order is None:
        order = execution_order(sched)
    src, dst = sched.src, sched.dst
    local_mask = (src == rank) | (dst == rank)
    pre_global = _frontiers(sched, order, local_mask)
    local_ops = [int(x) for x in order.tolist() if local_mask[x]]
    index = {op: j for j, op in enumerate(local_ops)}
    L = len(local_ops)

    # chunk slots: chunks touched, held initially or required at the end
    ins = input_chunks(coll, rank)
    outs = output_chunks(coll, rank)
    touched = set(ins) | set(outs) | {int(sched.chunk[op]) for op in local_ops}
    slots = {ch: i for i, ch in enumerate(sorted(touched))}

    ops = np.array(local_ops, dtype=np.int64)
    is_send = src[ops] == rank if L else np.zeros(0, dtype=bool)
    peer = np.where(is_send, dst[ops], src[ops]) if L else np.zeros(0, dtype=np.int64)
    offset, nbytes = _byte_ranges(sched, local_ops, slots, chunk_bytes)
    reduce = (sched.kind[ops] == OpKind.REDUCE) if L else np.zeros(0, dtype=bool)
    tag, recv_pre, post_pre = _tags(sched, local_ops, is_send, tag_limit)
    _link_order_pre(sched, rank, index, post_pre)
    done_pre = [sorted(index[p] for p in pre_global[op]) for op in local_ops]
    return RankPlan(
        rank=rank,
        num_ranks=coll.num_ranks,
        chunk_bytes=int(chunk_bytes),
        elem=int(elem),
        ops=ops,
        is_send=is_send.astype(bool),
        peer=peer,
        offset=offset,
        nbytes=nbytes,
        reduce=reduce.astype(bool),
        tag=tag,
        done_pre=done_pre,
        post_pre=post_pre,
        recv_pre=recv_pre,
        slots=slots,
        input_chunks=ins,
        output_chunks=outs,
    )


def _frontiers(
    sched: Schedule, order: np.ndarray, local_mask: np.ndarray
) -> dict[int, tuple[int, ...]]:
    """The local frontier ``P_r(i)`` of every local operation ``i`` (global op ids)."""
    # frontier sets, computed in execution order (deps come first); tuples are shared
    # between operations whenever possible, so long chains cost no copying
    ptr = sched.dep_ptr.tolist()
    flat = sched.dep_ids.tolist()
    is_local = local_mask.tolist()
    empty: tuple[int, ...] = ()
    frontier: list[tuple[int, ...]] = [empty] * sched.num_ops  # F_r(x)
    pre_global: dict[int, tuple[int, ...]] = {}
    for x in order.tolist():
        a, b = ptr[x], ptr[x + 1]
        if b == a:
            acc = empty
        elif b == a + 1:
            acc = frontier[flat[a]]
        else:
            parts = [frontier[d] for d in flat[a:b]]
            parts = [t for t in parts if t]
            if not parts:
                acc = empty
            elif len(parts) == 1 or all(t is parts[0] for t in parts):
                acc = parts[0]
            else:
                acc = tuple(set().union(*parts))
        if is_local[x]:
            pre_global[x] = acc
            frontier[x] = (x,)
        else:
            frontier[x] = acc
    return pre_global


def _byte_ranges(
    sched: Schedule, local_ops: list[int], slots: dict[int, int], chunk_bytes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Offset in the working buffer and bytes moved of every local operation."""
    L = len(local_ops)
    offset = np.zeros(L, dtype=np.int64)
    nbytes = np.zeros(L, dtype=np.int64)
    for j, op in enumerate(local_ops):
        lo, hi = _op_range(sched, op, chunk_bytes)
        offset[j] = slots[int(sched.chunk[op])] * chunk_bytes + lo
        nbytes[j] = hi - lo
    return offset, nbytes


def _tags(
    sched: Schedule, local_ops: list[int], is_send: np.ndarray, tag_limit: int
) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """:func:`tags_in_order` of the local operations (every operation between this rank and
    a peer is local, so their sequence numbers per ordered pair are the pair's own)."""
    ops = np.asarray(local_ops, dtype=np.int64)
    return tags_in_order(sched.src[ops].astype(np.int64), sched.dst[ops].astype(np.int64),
                         is_send, sched.collective.num_ranks, tag_limit)  # fmt: skip


def tags_in_order(
    src: np.ndarray, dst: np.ndarray, is_send: np.ndarray, n_ranks: int, tag_limit: int
) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """Message tags of one rank's operations in execution order (ends ``src``, ``dst``):
    per ordered pair, the sequence number in that order, which both ranks of the pair agree
    on, modulo ``tag_limit``; and the posting order of colliding tags:
    ``(tag, recv_pre, post_pre)``."""
    L = len(src)
    tag = np.zeros(L, dtype=np.int64)
    recv_pre = np.full(L, -1, dtype=np.int64)
    post_pre: list[list[int]] = [[] for _ in range(L)]
    pair = src.astype(np.int64) * n_ranks + dst.astype(np.int64)
    by_pair = np.argsort(pair, kind="stable")
    sorted_pair = pair[by_pair]
    seq = np.empty(L, dtype=np.int64)
    seq[by_pair] = np.arange(L) - np.searchsorted(sorted_pair, sorted_pair, side="left")
    last_with_tag: dict[tuple[int, int], int] = {}
    for j, (k, p) in enumerate(zip(seq.tolist(), pair.tolist())):
        t = k % tag_limit
        tag[j] = t
        key = (p, t)
        prev = last_with_tag.get(key)
        if prev is not None:
            if is_send[j]:
                post_pre[j].append(prev)
            else:
                recv_pre[j] = prev
        last_with_tag[key] = j
    return tag, recv_pre, post_pre


def _link_order_pre(
    sched: Schedule, rank: int, index: dict[int, int], post_pre: list[list[int]]
) -> None:
    """Add the per-link order among this rank's own sends to each peer to ``post_pre``: a
    send to one peer that follows another in a link's planned order is posted after it, so the
    connection to that peer carries them in that order (the simulator's realized model,
    ``order="fair"``). Sends to different peers share the link however they are posted, so
    they are not held back for each other."""
    if sched.link_order:
        src, dst = sched.src, sched.dst
        for _, seq in sorted(sched.link_order.items()):
            last: dict[int, int] = {}  # peer -> the previous send to it on this link
            for o in np.asarray(seq, dtype=np.int64).tolist():
                if o not in index or src[o] != rank:
                    continue
                b, peer = index[o], int(dst[o])
                a = last.get(peer)
                if a is not None and a not in post_pre[b]:
                    post_pre[b].append(a)
                last[peer] = b
