"""The MSCCL lowering's order and fusion, independent of the channel count.

:func:`operation_tables` reads a (whole-chunk) schedule into plain lists once;
:func:`fuse_order` puts the operations in the order ``L`` of :mod:`collsynth.export.msccl`
(a linear extension of the dependencies and link orders) and fuses each receive with a send of
the same chunk moved right after it (``rcs``, ``rrcs``, ``rrs``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule.ir import OpKind, Schedule
from .lowering import linear_order


@dataclass(frozen=True)
class OperationTables:
    """The schedule's operations as lists (sender, receiver, chunk, kind, dependencies), the
    collective's chunk sources, each moved chunk's destinations and the (rank, chunk) pairs
    the collective leaves a chunk at (sorted)."""

    src: list[int]
    dst: list[int]
    chunk: list[int]
    kind: list[int]
    deps: list[list[int]]
    reduces: bool
    chunk_source: list[int]
    destinations: dict[int, frozenset[int]]
    final_locations: list[tuple[int, int]]
    num_ranks: int

    def is_destination(self, rank: int, chunk: int) -> bool:
        """Whether rank ``rank`` is a destination of chunk ``chunk`` (a chunk some operation
        moves)."""
        return rank in self.destinations[chunk]

    @property
    def num_ops(self) -> int:
        return len(self.src)


def operation_tables(s: Schedule) -> OperationTables:
    """The lists the lowering passes read, from schedule ``s``."""
    coll = s.collective
    chunk = s.chunk.tolist()
    post_ranks, post_chunks = coll.postcondition()
    return OperationTables(
        src=s.src.tolist(),
        dst=s.dst.tolist(),
        chunk=chunk,
        kind=s.kind.tolist(),
        deps=[s.deps(i).tolist() for i in range(s.num_ops)],
        reduces=coll.reduces,
        chunk_source=coll.chunk_source.tolist(),
        destinations={c: frozenset(coll.destinations(c)) for c in sorted(set(chunk))},
        final_locations=sorted(zip(post_ranks.tolist(), post_chunks.tolist())),
        num_ranks=coll.num_ranks,
    )


@dataclass(frozen=True)
class FusedOrder:
    """The operations in lowering order, and the fusions: ``fused_next[x] = y`` when ``x``'s
    receive is fused with ``y``'s send (``-1``: none; ``fused_prev`` the reverse), of type
    ``fused_type[x]`` (``rcs``, ``rrcs`` or ``rrs``)."""

    order: list[int]
    fused_next: list[int]
    fused_type: list[str]
    fused_prev: list[int]


def pair_order_predecessors(s: Schedule) -> list[list[int]]:
    """Per operation, the operations of the same sender-receiver pair that precede it directly
    in a link's planned order (:meth:`Schedule.pair_order_edges`)."""
    preds: list[list[int]] = [[] for _ in range(s.num_ops)]
    a, b = s.pair_order_edges()
    for x, y in zip(a.tolist(), b.tolist()):
        preds[y].append(x)
    return preds


def fuse_order(s: Schedule, ops: OperationTables) -> FusedOrder:
    """The order ``L``, each receive fused with a send of the same chunk moved after it
    (``ops``: :func:`operation_tables` of ``s``)."""
    n = s.num_ops
    src, dst, chunk, kind, deps = ops.src, ops.dst, ops.chunk, ops.kind, ops.deps
    linear = linear_order(s).tolist()
    touching: dict[tuple[int, int], list[int]] = {}
    senders: dict[tuple[int, int], list[int]] = {}
    for op in linear:
        c = chunk[op]
        touching.setdefault((src[op], c), []).append(op)
        touching.setdefault((dst[op], c), []).append(op)
        senders.setdefault((src[op], c), []).append(op)
    dependents: dict[int, set[int]] = {}
    for v in range(n):
        for d in deps[v]:
            dependents.setdefault(d, set()).add(v)
    order_preds = pair_order_predecessors(s)
    placed = [False] * n
    active = [False] * n
    order: list[int] = []
    fused_next = [-1] * n  # X -> Y: X's receive is fused with Y's send
    fused_type = [""] * n

    def ready(y: int, but: int = -1) -> bool:
        """Whether ``y`` may be placed now (``but``: a dependency about to be placed)."""
        return all(placed[d] or d == but for d in deps[y]) and all(
            placed[d] for d in order_preds[y]
        )

    def pull(x: int) -> None:
        """Before ``x``: the sends that must precede the send ``x``'s receive could be fused
        with (earlier in their pair's link order), where they can be placed now, so that the
        receive and the send still fuse (a ring: a GPU sends its own chunk, then receives and
        forwards)."""
        g, c = dst[x], chunk[x]
        for y in senders.get((g, c), ()):
            if placed[y] or y not in dependents.get(x, ()):
                continue
            if not all(placed[d] or d == x for d in deps[y]):
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
            g, c = dst[x], chunk[x]
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
            if kind[x] == OpKind.REDUCE:
                rest = [o for o in touching[(g, c)] if o != x and o != y]
                if not ops.is_destination(g, c) and all(placed[o] for o in rest):
                    fused = "rrs"
                else:
                    fused = "rrcs"
            else:
                fused = "rcs"
            fused_next[x] = y
            fused_type[x] = fused
            placed[y] = True
            order.append(y)
            x = y
        active[op] = False

    for op in linear:
        if not placed[op]:
            place(op)
    fused_prev = [-1] * n
    for x, y in enumerate(fused_next):
        if y >= 0:
            fused_prev[y] = x
    return FusedOrder(order, fused_next, fused_type, fused_prev)
