"""What the MSCCL and MSCCL++ exporters share: buffer layout, operation order, whole chunks.

* :class:`BufferLayout` / :func:`buffer_layout`: where every chunk of a collective starts and
  ends in a rank's input (``i``) and output (``o``) buffers, one runtime chunk per collective
  chunk (the table in :mod:`collsynth.export.msccl`), with the refusals of what neither format
  can lay out (collectives without a fixed layout, an in-place AllToAll).
* :func:`linear_order`: one linear extension of the dependencies and of each sender-receiver
  pair's link order, ties by planned start time, then step, then operation id.
* :func:`whole_chunks` / :func:`refine_parts`: byte-range operations turned into whole chunks
  (joins expanded first), for formats whose steps move whole chunks.
* :func:`refuse_groups`: the one-line refusal of in-network groups by point-to-point formats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import unique
from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..schedule.dag import topological_order
from ..schedule.ir import Schedule, ScheduleBuilder

#: The collectives with a buffer layout, in the order refusals list them.
LAID_OUT_KINDS = (
    CollKind.ALLGATHER,
    CollKind.REDUCESCATTER,
    CollKind.ALLREDUCE,
    CollKind.ALLTOALL,
    CollKind.BROADCAST,
    CollKind.REDUCE,
)

#: Most sub-chunks one chunk may be cut into when byte ranges are refined for export.
MAX_REFINE = 64

#: A buffer slot: the buffer's letter (``i``, ``o`` or ``s``) and the chunk index in it.
Slot = tuple[str, int]


@dataclass(frozen=True)
class BufferLayout:
    """One rank's buffers for a collective: ``chunks_per_loop`` (chunks of the larger buffer),
    the input and output buffer sizes in chunks (0 for a buffer an in-place layout aliases),
    and where each chunk starts (:meth:`input_slot`) and must end (:meth:`output_slot`)."""

    kind: CollKind
    num_ranks: int
    chunks_per_rank: int
    inplace: bool
    chunks_per_loop: int
    input_chunks: int
    output_chunks: int

    def input_slot(self, rank: int, chunk: int) -> Slot:
        """Where ``rank`` holds chunk ``chunk`` before the collective (its contribution, for
        reductions)."""
        kind, per_rank, inplace = self.kind, self.chunks_per_rank, self.inplace
        if kind is CollKind.ALLGATHER:
            return ("o", chunk) if inplace else ("i", chunk % per_rank)
        if kind is CollKind.ALLTOALL:
            return ("i", ((chunk // per_rank) % self.num_ranks) * per_rank + chunk % per_rank)
        if kind is CollKind.BROADCAST:
            return ("o", chunk) if inplace else ("i", chunk)
        return ("i", chunk)  # reductions: every contribution in the input

    def output_slot(self, rank: int, chunk: int) -> Slot:
        """Where chunk ``chunk`` must be at ``rank`` (a destination of it) at the end."""
        kind, per_rank, inplace = self.kind, self.chunks_per_rank, self.inplace
        if kind is CollKind.REDUCESCATTER:
            return ("i", chunk) if inplace else ("o", chunk % per_rank)
        if kind is CollKind.ALLTOALL:
            return ("o", ((chunk // per_rank) // self.num_ranks) * per_rank + chunk % per_rank)
        if kind in (CollKind.ALLREDUCE, CollKind.REDUCE):
            return ("i", chunk) if inplace else ("o", chunk)
        return ("o", chunk)  # allgather, broadcast


def buffer_layout(coll: Collective, inplace: bool) -> BufferLayout:
    """The buffer layout of ``coll`` (in place or not); refuses what has none."""
    n, per_rank, kind = coll.num_ranks, coll.chunks_per_rank, coll.kind
    if kind not in LAID_OUT_KINDS:
        raise CollsynthError(
            f"MSCCL export does not support {kind.value} collectives "
            f"(supported: {', '.join(x.value for x in LAID_OUT_KINDS)})"
        )
    if kind is CollKind.ALLTOALL and inplace:
        raise CollsynthError("MSCCL export of an in-place alltoall is not supported")
    everything = n * per_rank
    sizes = {  # (chunks per loop, input chunks, output chunks)
        CollKind.ALLGATHER: (everything, 0 if inplace else per_rank, everything),
        CollKind.REDUCESCATTER: (everything, everything, 0 if inplace else per_rank),
        CollKind.ALLREDUCE: (everything, everything, 0 if inplace else everything),
        CollKind.ALLTOALL: (everything, everything, everything),
        CollKind.BROADCAST: (per_rank, 0 if inplace else per_rank, per_rank),
        CollKind.REDUCE: (per_rank, per_rank, 0 if inplace else per_rank),
    }
    loop, inputs, outputs = sizes[kind]
    return BufferLayout(kind, n, per_rank, inplace, loop, inputs, outputs)


def linear_order(s: Schedule) -> np.ndarray:
    """The operations in one linear extension of the dependencies and of each pair's link
    order (:meth:`Schedule.pair_order_edges`); among the operations ready at once the one
    with the earliest planned start comes first (no start: last), then the lowest step, then
    the lowest id. Raises :class:`CollsynthError` on a cycle."""
    n = s.num_ops
    if s.start is not None:
        start = np.where(np.isnan(s.start), np.inf, s.start)
    else:
        start = np.zeros(n)
    step = s.step if s.step is not None else np.zeros(n, dtype=np.int64)
    key = [(float(start[i]), int(step[i])) for i in range(n)]
    order = topological_order(n, s.dep_ptr, s.dep_ids, key=key, extra=s.pair_order_edges())
    if order is None:
        raise CollsynthError("cannot export: the schedule's dependencies form a cycle")
    return order


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
    common = int(np.lcm.reduce(unique(den)))
    if common > MAX_REFINE:
        op = int(np.argmax(den))
        raise CollsynthError(
            f"cannot export: byte ranges of 1/{common} of a chunk (e.g. "
            f"{s.describe_op(op)}) would need {common} sub-chunks per chunk, more "
            f"than {MAX_REFINE}"
        )
    scale = common // den
    lo = s.part_lo.astype(np.int64) * scale
    pieces = s.part_hi.astype(np.int64) * scale - lo
    n = s.num_ops
    first = np.zeros(n + 1, dtype=np.int64)
    first[1:] = np.cumsum(pieces)
    orig = np.repeat(np.arange(n), pieces)
    j = np.arange(int(first[-1])) - first[orig]
    new_chunk = s.chunk[orig] * common + lo[orig] + j
    route_len = np.diff(s.route_ptr)[orig]
    route_ptr = np.zeros(len(orig) + 1, dtype=np.int64)
    route_ptr[1:] = np.cumsum(route_len)
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
    b = ScheduleBuilder(s.topology, coll.with_chunks(coll.chunks_per_rank * common), meta=s.meta)
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


__all__ = [
    "LAID_OUT_KINDS",
    "MAX_REFINE",
    "BufferLayout",
    "Slot",
    "buffer_layout",
    "linear_order",
    "refine_parts",
    "refuse_groups",
    "whole_chunks",
]
