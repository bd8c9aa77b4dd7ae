"""The schedule IR: operations on chunks, stored column-wise so schedules scale to 1000s of GPUs.

A :class:`Schedule` belongs to one topology and one collective. Operation ``i`` is a transfer

* of chunk ``chunk[i]`` (or of the byte range ``[lo/den, hi/den)`` of it, see ``part``),
* from rank ``src[i]`` to rank ``dst[i]`` (ranks are the topology's compute nodes in order),
* along ``route(i)``: link ids forming a path from the source node to the destination node whose
  intermediate nodes are switches or routers (a relay through a GPU is two operations),
* of kind ``copy`` (the receiver's copy is overwritten) or ``reduce`` (the receiver combines the
  incoming data with what it holds),
* after every operation in ``deps(i)`` has completed. Data availability is established by
  dependencies alone: an operation may send only what the sender held initially or received
  from an operation it (transitively) depends on.

An operation of kind ``join`` moves nothing: it has ``src == dst``, an empty route, and completes
as soon as its dependencies have. Operations that wait for the same many operations depend on one
join instead (MSCCL's ``nop``): an AllReduce root's broadcasts of a chunk each wait for every
reduction into it, fan-in times fan-out dependencies without a join, fan-in plus fan-out with one.
:meth:`Schedule.expand_joins` gives the equivalent schedule without joins, for consumers that
want plain dependencies.

Optional per-operation plan fields, for time-slotted and timed methods:

* ``start[i]`` — planned start time in seconds (NaN where none) for the schedule's ``size``;
* ``duration[i]`` — planned transmission time (NaN: bytes / bottleneck bandwidth of the route);
* ``step[i]`` — a step or slot number (-1 where none);
* ``link_order`` — for some links, the planned order (a list of operation ids) in which the
  link serves its operations;
* ``group[i]`` — in-network operations (-1 where none): copies with the same group id are one
  **multicast**: one stream leaves their common sender, and a switch with the ``multicast``
  capability copies it where their routes part (they share sender, chunk, byte range and
  dependencies; each still delivers to its own receiver); reduces with the same group id are
  one **in-switch reduction**: their streams are combined by a switch with the ``reduce``
  capability where their routes meet and go on as one to their common receiver. Both mean
  exactly what the same operations mean one by one (the verifier checks them so); what changes
  is that a link their routes share carries the data once.

Build schedules with :class:`ScheduleBuilder`; a :class:`Schedule` itself is immutable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from ..collective import Collective
from ..errors import CollsynthError
from ..topology.model import Topology


class OpKind(IntEnum):
    COPY = 0
    REDUCE = 1
    JOIN = 2

    @classmethod
    def parse(cls, value: Any) -> OpKind:
        if isinstance(value, OpKind):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        elif (
            isinstance(value, (int, np.integer))
            and not isinstance(value, bool)
            and int(value) in (0, 1, 2)
        ):
            return cls(int(value))
        raise CollsynthError(f"operation kind {value!r} is not copy, reduce or join")


def _csr(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    if lists:
        ptr[1:] = np.cumsum([len(x) for x in lists])
    flat = np.fromiter((v for x in lists for v in x), dtype=np.int64, count=int(ptr[-1]))
    return ptr, flat


@dataclass(frozen=True, eq=False)
class Schedule:
    topology: Topology
    collective: Collective
    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    kind: np.ndarray
    route_ptr: np.ndarray
    route_links: np.ndarray
    dep_ptr: np.ndarray
    dep_ids: np.ndarray
    start: np.ndarray | None = None
    duration: np.ndarray | None = None
    step: np.ndarray | None = None
    part_lo: np.ndarray | None = None
    part_hi: np.ndarray | None = None
    part_den: np.ndarray | None = None
    link_order: dict[int, np.ndarray] | None = None
    size: float | None = None
    meta: dict = field(default_factory=dict)
    trees: Any = None  # a collsynth.schedule.trees.TreeForm when the schedule came from trees
    group: np.ndarray | None = None  # multicast / in-switch reduction of each op (-1: none)

    # ------------------------------------------------------------------ access
    @property
    def num_ops(self) -> int:
        return int(len(self.src))

    def __len__(self) -> int:
        return self.num_ops

    def __repr__(self) -> str:
        return (
            f"Schedule({self.collective.describe()} on {self.topology.name!r}, "
            f"{self.num_ops} ops, algo={self.meta.get('algorithm')!r})"
        )

    def route(self, op: int) -> np.ndarray:
        return self.route_links[self.route_ptr[op] : self.route_ptr[op + 1]]

    def deps(self, op: int) -> np.ndarray:
        return self.dep_ids[self.dep_ptr[op] : self.dep_ptr[op + 1]]

    @property
    def timed(self) -> bool:
        return self.start is not None and bool(np.any(~np.isnan(self.start)))

    @property
    def has_parts(self) -> bool:
        return self.part_den is not None

    def op_fraction(self) -> np.ndarray:
        """Fraction of its chunk that each operation carries."""
        if self.part_den is None:
            return np.ones(self.num_ops)
        # the three part columns are set together (see ScheduleBuilder.build)
        assert self.part_lo is not None and self.part_hi is not None
        return (self.part_hi - self.part_lo) / self.part_den

    def op_bytes(self, size: float) -> np.ndarray:
        """Bytes each operation carries when the collective moves ``size`` bytes."""
        return self.op_fraction() * self.collective.chunk_bytes(size)

    @property
    def has_groups(self) -> bool:
        return self.group is not None and bool(np.any(self.group >= 0))

    def expand_groups(self) -> Schedule:
        """The same operations one by one (every link carries every copy): what a format or
        executor without switch multicast or reduction can run. ``self`` when no group."""
        if self.group is None:
            return self
        from dataclasses import replace

        from .derive import expanded_link_order

        return replace(self, group=None, link_order=expanded_link_order(self))

    def link_order_entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The planned link orders flattened, link by link in increasing link id: (the
        links that have one, how many operations each lists, the operations, in order).
        Empty arrays where the schedule has none; nothing is checked here (the verifier's
        ``link-order`` rule does that)."""
        orders = self.link_order or {}
        links = sorted(orders, key=int)
        seqs = [np.asarray(orders[l], dtype=np.int64).ravel() for l in links]
        lengths = np.array([len(q) for q in seqs], dtype=np.int64)
        ops = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
        return np.array([int(l) for l in links], dtype=np.int64), lengths, ops

    def pair_order_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The link orders as each connection sees them: arrays ``(a, b)`` of operations with
        the same sender and receiver where ``b`` comes right after ``a`` among that pair's
        operations in some link's planned order (each edge once, sorted). This is the order
        the executors post a pair's messages in and the exporters give a thread block's steps;
        it is all of a link order that a runtime can enforce, since different pairs share a
        link however their messages are posted."""
        from .derive import pair_order_edges

        return pair_order_edges(self)

    def carried_hops(self) -> np.ndarray:
        """Per entry of ``route_links``: False where an earlier member of the operation's
        in-network group already carries the data over that link (a multicast's shared
        prefix, an in-switch reduction's shared suffix: the same path from the common sender
        or to the common receiver), True elsewhere. The link's planned order and its capacity
        name the carrying member only."""
        from .derive import carried_hops

        return carried_hops(self)

    @property
    def has_joins(self) -> bool:
        return bool(np.any(self.kind == OpKind.JOIN))

    def describe_op(self, op: int) -> str:
        t = self.topology
        k = OpKind(int(self.kind[op])).name.lower()
        if self.kind[op] == OpKind.JOIN:
            return f"op {op} (join chunk {int(self.chunk[op])} at {t.rank_name(int(self.src[op]))})"
        part = ""
        lo, hi, dens = self.part_lo, self.part_hi, self.part_den
        if (
            lo is not None
            and hi is not None
            and dens is not None
            and not (lo[op] == 0 and hi[op] == dens[op])
        ):
            den = dens[op]
            part = f"[{lo[op]}/{den}..{hi[op]}/{den}]"
        return (
            f"op {op} ({k} chunk {int(self.chunk[op])}{part} "
            f"{t.rank_name(int(self.src[op]))}->{t.rank_name(int(self.dst[op]))})"
        )

    def with_meta(self, **meta: Any) -> Schedule:
        from dataclasses import replace

        return replace(self, meta={**self.meta, **meta})

    def expand_joins(self) -> Schedule:
        """The same schedule without join operations: every dependency on a join is replaced
        by the join's own (transitively), duplicates dropped; the other operations keep their
        order and are renumbered. ``self`` when there is no join. The dependency lists grow to
        fan-in times fan-out entries, so this is for small schedules (exporters, executors)."""
        from .derive import expand_joins

        return expand_joins(self)

    def stats(self) -> dict:
        routes = np.diff(self.route_ptr)
        return {
            "ops": self.num_ops,
            "copy_ops": int(np.count_nonzero(self.kind == OpKind.COPY)),
            "reduce_ops": int(np.count_nonzero(self.kind == OpKind.REDUCE)),
            "join_ops": int(np.count_nonzero(self.kind == OpKind.JOIN)),
            "link_hops": int(routes.sum()),
            "max_route_links": int(routes.max()) if self.num_ops else 0,
            "deps": int(len(self.dep_ids)),
            "timed": self.timed,
            "steps": int(self.step.max()) + 1
            if self.step is not None and self.num_ops and self.step.max() >= 0
            else None,
        }


class ScheduleBuilder:
    """Appends operations and freezes them into a :class:`Schedule`.

    :meth:`add` appends one operation (routes default to the fewest-hop path from the source
    to the destination through switches/routers only, see
    :class:`collsynth.topology.paths.RouteTable`); :meth:`add_many` appends arrays of
    operations at once, for schedules with millions of operations. Both can be mixed; op ids
    are consecutive in the order of addition.
    """

    _COLUMNS = ("src", "dst", "chunk", "kind", "start", "duration", "step", "part", "group")

    def __init__(self, topology: Topology, collective: Collective, meta: dict | None = None):
        if collective.num_ranks != topology.num_ranks:
            raise CollsynthError(
                f"collective has {collective.num_ranks} ranks but topology {topology.name!r} "
                f"has {topology.num_ranks} compute nodes"
            )
        self.topology = topology
        self.collective = collective
        self.meta = dict(meta or {})
        self._segments: list[dict] = []  # frozen blocks of operations (numpy columns)
        self._frozen = 0  # number of operations in self._segments
        self._reset_pending()
        self._any = {
            "start": False,
            "duration": False,
            "step": False,
            "part": False,
            "group": False,
        }
        self.link_order: dict[int, list[int]] = {}
        self.size: float | None = None
        self.trees: Any = None
        self._routes_table = None

    def _reset_pending(self) -> None:
        self._src: list[int] = []
        self._dst: list[int] = []
        self._chunk: list[int] = []
        self._kind: list[int] = []
        self._routes: list[Sequence[int]] = []
        self._deps: list[Sequence[int]] = []
        self._start: list[float] = []
        self._duration: list[float] = []
        self._step: list[int] = []
        self._part: list[tuple[int, int, int]] = []
        self._group: list[int] = []

    def __len__(self) -> int:
        return self._frozen + len(self._src)

    @property
    def routes(self):
        if self._routes_table is None:
            from ..topology.paths import RouteTable

            self._routes_table = RouteTable(self.topology)
        return self._routes_table

    def add(
        self,
        src: int,
        dst: int,
        chunk: int,
        *,
        route: Sequence[int] | None = None,
        kind: OpKind | str = OpKind.COPY,
        deps: Iterable[int] = (),
        start: float | None = None,
        duration: float | None = None,
        step: int | None = None,
        part: tuple[int, int, int] | None = None,
        group: int | None = None,
    ) -> int:
        """Append one operation and return its id (a join: ``src == dst``, no route; ``group``:
        a multicast or in-switch reduction it belongs to, see :class:`Schedule`)."""
        if route is None and OpKind.parse(kind) == OpKind.JOIN:
            route = ()
        if route is None:
            route = self.routes.route(src, dst)
        op = len(self)
        self._src.append(int(src))
        self._dst.append(int(dst))
        self._chunk.append(int(chunk))
        self._kind.append(int(OpKind.parse(kind)))
        self._routes.append(tuple(int(x) for x in route))
        self._deps.append(tuple(int(d) for d in deps))
        self._start.append(float("nan") if start is None else float(start))
        self._duration.append(float("nan") if duration is None else float(duration))
        self._step.append(-1 if step is None else int(step))
        self._part.append(part if part is not None else (0, 1, 1))
        self._group.append(-1 if group is None else int(group))
        self._any["group"] |= group is not None
        self._any["start"] |= start is not None
        self._any["duration"] |= duration is not None
        self._any["step"] |= step is not None
        self._any["part"] |= part is not None
        return op

    def add_many(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        chunk: np.ndarray,
        *,
        route_ptr: np.ndarray,
        route_links: np.ndarray,
        dep_ptr: np.ndarray | None = None,
        dep_ids: np.ndarray | None = None,
        kind: np.ndarray | int = OpKind.COPY,
        step: np.ndarray | None = None,
        part: np.ndarray | tuple[int, int, int] | None = None,
        group: np.ndarray | None = None,
    ) -> np.ndarray:
        """Append operations from arrays and return their ids.

        Routes and dependencies are CSR arrays (``*_ptr`` has one more entry than there are
        operations, starting at 0); dependency ids are global op ids. ``part`` is the byte range
        ``(lo, hi, den)`` of the chunk each operation carries (as in :meth:`add`): one triple for
        all of them or an array of shape ``(k, 3)``; ``None`` means whole chunks.
        """
        self._flush()
        k = len(src)
        base = self._frozen
        seg: dict[str, Any] = {
            "src": np.asarray(src, dtype=np.int64),
            "dst": np.asarray(dst, dtype=np.int64),
            "chunk": np.asarray(chunk, dtype=np.int64),
            "kind": np.broadcast_to(np.asarray(kind, dtype=np.int8), (k,)).copy(),
            "route_ptr": np.asarray(route_ptr, dtype=np.int64),
            "route_links": np.asarray(route_links, dtype=np.int64),
            "dep_ptr": (
                np.zeros(k + 1, dtype=np.int64)
                if dep_ptr is None
                else np.asarray(dep_ptr, dtype=np.int64)
            ),
            "dep_ids": (
                np.zeros(0, dtype=np.int64)
                if dep_ids is None
                else np.asarray(dep_ids, dtype=np.int64)
            ),
            "step": None if step is None else np.asarray(step, dtype=np.int64),
            "group": None if group is None else np.asarray(group, dtype=np.int64),
            "start": None,
            "duration": None,
            "part": None,
            "n": k,
        }
        if part is not None:
            arr = np.asarray(part, dtype=np.int64)
            if arr.shape == (3,):
                arr = np.broadcast_to(arr, (k, 3))
            if arr.shape != (k, 3):
                raise CollsynthError(
                    f"add_many: part has shape {tuple(arr.shape)}, expected (3,) or ({k}, 3)"
                )
            seg["part"] = np.array(arr, dtype=np.int64)
        for name in ("dst", "chunk"):
            if len(seg[name]) != k:
                raise CollsynthError(
                    f"add_many: column {name} has {len(seg[name])} entries, expected {k}"
                )
        if len(seg["route_ptr"]) != k + 1 or len(seg["dep_ptr"]) != k + 1:
            raise CollsynthError("add_many: route_ptr and dep_ptr need one entry per op plus one")
        self._any["step"] |= step is not None
        self._any["part"] |= part is not None
        self._any["group"] |= group is not None
        self._segments.append(seg)
        self._frozen += k
        return np.arange(base, base + k, dtype=np.int64)

    def _flush(self) -> None:
        """Freeze the operations added one by one into a segment."""
        n = len(self._src)
        if not n:
            return
        route_ptr, route_links = _csr(self._routes)
        dep_ptr, dep_ids = _csr(self._deps)
        self._segments.append(
            {
                "src": np.array(self._src, dtype=np.int64),
                "dst": np.array(self._dst, dtype=np.int64),
                "chunk": np.array(self._chunk, dtype=np.int64),
                "kind": np.array(self._kind, dtype=np.int8),
                "route_ptr": route_ptr,
                "route_links": route_links,
                "dep_ptr": dep_ptr,
                "dep_ids": dep_ids,
                "start": np.array(self._start, dtype=np.float64),
                "duration": np.array(self._duration, dtype=np.float64),
                "step": np.array(self._step, dtype=np.int64),
                "part": np.array(self._part, dtype=np.int64).reshape(n, 3),
                "group": np.array(self._group, dtype=np.int64),
                "n": n,
            }
        )
        self._frozen += n
        self._reset_pending()

    def set_link_order(self, link: int, ops: Sequence[int]) -> None:
        self.link_order[int(link)] = [int(o) for o in ops]

    def build(self) -> Schedule:
        self._flush()
        segs = self._segments

        # Each column is joined and its pieces dropped before the next: the peak is the
        # operations once plus one column, not twice (schedules of tens of millions of ops).
        def join(parts, dtype):
            if not parts:
                return np.zeros(0, dtype=dtype)
            if len(parts) == 1:
                return parts[0].astype(dtype, copy=False)
            return np.concatenate(parts).astype(dtype, copy=False)

        def cat(name, dtype):
            parts = [sg[name] for sg in segs]
            for sg in segs:
                sg[name] = None
            return join(parts, dtype)

        def cat_csr(ptr_name, ids_name):
            ptrs, offset = [np.zeros(1, dtype=np.int64)], 0
            for sg in segs:
                ptrs.append(sg[ptr_name][1:] + offset)
                offset += int(sg[ptr_name][-1])
                sg[ptr_name] = None
            ptr = np.concatenate(ptrs).astype(np.int64)
            del ptrs
            return ptr, cat(ids_name, np.int64)

        def optional(name, fill, dtype, shape=()):
            if not self._any[name]:
                return None
            parts = [
                sg[name] if sg[name] is not None else np.full((sg["n"],) + shape, fill, dtype=dtype)
                for sg in segs
            ]
            return np.concatenate(parts).astype(dtype, copy=False)

        route_ptr, route_links = cat_csr("route_ptr", "route_links")
        dep_ptr, dep_ids = cat_csr("dep_ptr", "dep_ids")
        if self._any["part"]:
            parts = []
            for sg in segs:
                if sg["part"] is not None:
                    parts.append(sg["part"])
                else:
                    block = np.zeros((sg["n"], 3), dtype=np.int64)
                    block[:, 1:] = 1
                    parts.append(block)
            part = np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)
        else:
            part = None
        sched = Schedule(
            topology=self.topology,
            collective=self.collective,
            src=cat("src", np.int64),
            dst=cat("dst", np.int64),
            chunk=cat("chunk", np.int64),
            kind=cat("kind", np.int8),
            route_ptr=route_ptr,
            route_links=route_links,
            dep_ptr=dep_ptr,
            dep_ids=dep_ids,
            start=optional("start", np.nan, np.float64),
            duration=optional("duration", np.nan, np.float64),
            step=optional("step", -1, np.int64),
            group=optional("group", -1, np.int64),
            part_lo=part[:, 0].copy() if part is not None else None,
            part_hi=part[:, 1].copy() if part is not None else None,
            part_den=part[:, 2].copy() if part is not None else None,
            link_order={k: np.array(v, dtype=np.int64) for k, v in self.link_order.items()} or None,
            size=self.size,
            meta=dict(self.meta),
            trees=self.trees,
        )
        # the pieces were dropped as they were joined: the builder now holds the joined
        # columns as its one segment (shared with the schedule; later additions never write
        # into them), so it can go on and build again
        n = sched.num_ops
        self._segments = [
            {
                "src": sched.src,
                "dst": sched.dst,
                "chunk": sched.chunk,
                "kind": sched.kind,
                "route_ptr": sched.route_ptr,
                "route_links": sched.route_links,
                "dep_ptr": sched.dep_ptr,
                "dep_ids": sched.dep_ids,
                "start": sched.start,
                "duration": sched.duration,
                "step": sched.step,
                "group": sched.group,
                "part": part,
                "n": n,
            }
        ]
        return sched
