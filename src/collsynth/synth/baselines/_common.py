"""Machinery shared by the classic baselines: fast operation tables, routes, the compute graph,
relay paths through GPUs and buffer tracking for reductions.

* :class:`Ops` accumulates operations, interning routes, and hands them to
  :meth:`ScheduleBuilder.add_many` in one go (``builder.build()`` makes the schedule). It exists
  for speed: ``ScheduleBuilder.add`` costs a few microseconds per operation, and a ring
  AllGather on 1024 GPUs has a million operations, which :meth:`Ops.add_block` appends as numpy
  arrays. Per-operation :meth:`Ops.add` serves the irregular algorithms.
* :class:`Routes` answers "the direct route from rank u to rank v" (through switches and routers
  only) by delegating to :class:`~collsynth.topology.paths.RouteTable` (fewest links, then least
  alpha, then an ECMP hash over the equal-cost alternatives), whose single-pair look-ups trace
  only the requested destination; it returns None instead of raising when there is no route.
* :class:`ComputeGraph` is the graph of ranks with an edge u -> v when a direct route exists;
  :meth:`ComputeGraph.relay_path` finds the fewest-transfer path of ranks (ties: least alpha,
  then lowest ranks) between two ranks, optionally restricted to allowed relay GPUs.
* :class:`Tracker` adds, per (rank, chunk) buffer, the dependencies that make every read see the
  latest write and order every write after the reads and writes before it (the verifier's
  ``race`` rule); concurrent ``reduce`` operations into one buffer stay unordered.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...collective import Collective
from ...errors import CollsynthError
from ...schedule.ir import OpKind, Schedule, ScheduleBuilder
from ...topology.model import Topology
from ...topology.paths import RouteTable

COPY = int(OpKind.COPY)
REDUCE = int(OpKind.REDUCE)

#: Node attributes that group compute nodes into servers/chassis/datacenters, in preference order.
GROUP_ATTRS = ("chassis", "dc", "pod", "group")


# ---------------------------------------------------------------------------------- chunking
def round_up_chunks(collective: Collective, multiple: int) -> tuple[Collective, str | None]:
    """The collective with chunks per rank rounded up to a multiple of ``multiple``.

    ``C = 1`` (the user asked for no particular chunking) becomes ``multiple``; an explicit
    ``C > 1`` that is not a multiple is rounded up (the returned note says so).
    """
    c = collective.chunks_per_rank
    if c % multiple == 0:
        return collective, None
    if c == 1:
        return collective.with_chunks(multiple), None
    new = -(-c // multiple) * multiple
    return collective.with_chunks(new), (
        f"chunks_per_rank {c} rounded up to {new}, a multiple of {multiple}"
    )


# ---------------------------------------------------------------------------------- grouping
def group_attr(topology: Topology, attrs: Sequence[str] = GROUP_ATTRS) -> str | None:
    """The first attribute of ``attrs`` that every compute node carries."""
    nodes = [topology.nodes[int(x)] for x in topology.compute_nodes]
    for a in attrs:
        if all(a in nd.attrs for nd in nodes):
            return a
    return None


def natural_order(topology: Topology) -> list[int]:
    """Ranks grouped by chassis/dc/pod/group (when every compute node has one), then by rank."""
    attr = group_attr(topology)
    n = topology.num_ranks
    if attr is None:
        return list(range(n))
    keys = []
    for r in range(n):
        v = topology.nodes[topology.node_of_rank(r)].attrs[attr]
        keys.append((_sortable(v), r))
    return [r for _, r in sorted(keys)]


def _sortable(v: Any) -> tuple:
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return (0, float(v), "")
    return (1, 0.0, str(v))


# ---------------------------------------------------------------------------------- routes
class Routes:
    """Direct routes between ranks: a thin view of :class:`~collsynth.topology.paths.RouteTable`
    (which traces single pairs cheaply and caches them) with ``None`` for "no route"."""

    def __init__(self, topology: Topology, table: RouteTable | None = None):
        self.topology = topology
        self.table = table if table is not None else RouteTable(topology)

    def route(self, u: int, v: int) -> tuple[int, ...] | None:
        """Best direct route from rank ``u`` to rank ``v``, or None."""
        return self.table.find(u, v)

    def row(self, u: int) -> dict[int, tuple[int, ...]]:
        """Best direct route from ``u`` to every rank it reaches (RouteTable.direct)."""
        return self.table.direct(u)

    def alpha(self, route: Sequence[int]) -> float:
        return float(sum(self.topology.links[l].alpha for l in route))

    def inv_bw(self, route: Sequence[int]) -> float:
        """Time per byte of a route's bottleneck link."""
        return 1.0 / float(min(self.topology.links[l].bw for l in route))


class ComputeGraph:
    """Ranks with an edge u -> v when a direct route exists; relay paths through GPUs."""

    def __init__(self, topology: Topology, routes: Routes | None = None):
        self.topology = topology
        self.routes = routes or Routes(topology)
        self.n = topology.num_ranks
        self._out: list[list[int]] | None = None
        self._relay_cache: dict[tuple[int, int], list[int] | None] = {}

    @property
    def out(self) -> list[list[int]]:
        """Sorted out-neighbour ranks of every rank."""
        if self._out is None:
            self._out = [sorted(self.routes.row(u)) for u in range(self.n)]
        return self._out

    def has(self, u: int, v: int) -> bool:
        return self.routes.route(u, v) is not None

    def relay_path(self, u: int, v: int, allowed: Iterable[int] | None = None) -> list[int] | None:
        """Ranks ``[u, r1, ..., v]``: fewest transfers, then least alpha, then lowest ranks.

        With ``allowed``, intermediate ranks must belong to it. None if there is no such path.
        """
        if self.routes.route(u, v) is not None:
            return [u, v]
        key = (u, v)
        if allowed is None and key in self._relay_cache:
            cached = self._relay_cache[key]
            return None if cached is None else list(cached)
        allow = None if allowed is None else set(allowed)
        best: dict[int, tuple[int, float, int]] = {u: (0, 0.0, -1)}
        parent: dict[int, int] = {}
        heap = [(0, 0.0, u)]
        done: set[int] = set()
        while heap:
            hops, alpha, x = heapq.heappop(heap)
            if x in done:
                continue
            done.add(x)
            if x == v:
                break
            if x != u and allow is not None and x not in allow:
                continue
            for y in self.out[x]:
                if y in done:
                    continue
                if y != v and allow is not None and y not in allow:
                    continue
                r = self.routes.route(x, y)
                assert r is not None  # y is an out-neighbour of x
                key2 = (hops + 1, alpha + self.routes.alpha(r), x)
                old = best.get(y)
                if old is None or key2 < old:
                    best[y] = key2
                    parent[y] = x
                    heapq.heappush(heap, (key2[0], key2[1], y))
        if v not in parent:
            result = None
        else:
            result = [v]
            while result[-1] != u:
                result.append(parent[result[-1]])
            result.reverse()
        if allowed is None:
            self._relay_cache[key] = result
        return None if result is None else list(result)

    def path_or_fail(
        self, u: int, v: int, allowed: Iterable[int] | None = None, why: str = ""
    ) -> list[int]:
        p = self.relay_path(u, v, allowed)
        if p is None:
            t = self.topology
            extra = f" ({why})" if why else ""
            raise CollsynthError(
                f"no path from {t.rank_name(u)} to {t.rank_name(v)} through "
                f"allowed relay GPUs{extra}"
            )
        return p


# ---------------------------------------------------------------------------------- ops
class Ops:
    """Operations appended one by one (:meth:`add`) or as numpy blocks (:meth:`add_block`)."""

    def __init__(
        self,
        topology: Topology,
        collective: Collective,
        routes: Routes | None = None,
        meta: dict | None = None,
    ):
        if collective.num_ranks != topology.num_ranks:
            raise CollsynthError(
                f"collective has {collective.num_ranks} ranks but topology {topology.name!r} "
                f"has {topology.num_ranks} compute nodes"
            )
        self.topology = topology
        self.collective = collective
        self.routes = routes or Routes(topology)
        self.meta = dict(meta or {})
        self._rlist: list[tuple[int, ...]] = []
        self._rid: dict[tuple[int, ...], int] = {}
        self._blocks: list[dict[str, Any]] = []
        self._start_cur = 0
        self._reset_cur()
        self.count = 0

    def _reset_cur(self) -> None:
        self._src: list[int] = []
        self._dst: list[int] = []
        self._chunk: list[int] = []
        self._kind: list[int] = []
        self._rids: list[int] = []
        self._deps: list[tuple[int, ...]] = []
        self._step: list[int] = []

    def __len__(self) -> int:
        return self.count

    def route_id(self, route: Sequence[int]) -> int:
        r = tuple(int(x) for x in route)
        rid = self._rid.get(r)
        if rid is None:
            rid = len(self._rlist)
            self._rid[r] = rid
            self._rlist.append(r)
        return rid

    def direct_route(self, u: int, v: int) -> tuple[int, ...]:
        r = self.routes.route(u, v)
        if r is None:
            t = self.topology
            raise CollsynthError(
                f"no route from {t.rank_name(u)} to {t.rank_name(v)} through switches/routers only"
            )
        return r

    def add(
        self,
        src: int,
        dst: int,
        chunk: int,
        *,
        route: Sequence[int] | None = None,
        kind: int = COPY,
        deps: Iterable[int] = (),
        step: int = -1,
    ) -> int:
        if route is None:
            route = self.direct_route(src, dst)
        self._src.append(int(src))
        self._dst.append(int(dst))
        self._chunk.append(int(chunk))
        self._kind.append(int(kind))
        self._rids.append(self.route_id(route))
        self._deps.append(tuple(sorted({int(d) for d in deps})))
        self._step.append(int(step))
        op = self.count
        self.count += 1
        return op

    def step_of(self, op: int) -> int:
        """Step of an operation appended with :meth:`add` since the last block."""
        return self._step[op - self._start_cur]

    def _flush(self) -> None:
        m = len(self._src)
        if not m:
            return
        lengths = np.fromiter((len(d) for d in self._deps), dtype=np.int64, count=m)
        flat = np.fromiter(
            (x for d in self._deps for x in d), dtype=np.int64, count=int(lengths.sum())
        )
        self._blocks.append(
            {
                "src": np.array(self._src, dtype=np.int64),
                "dst": np.array(self._dst, dtype=np.int64),
                "chunk": np.array(self._chunk, dtype=np.int64),
                "kind": np.array(self._kind, dtype=np.int8),
                "rid": np.array(self._rids, dtype=np.int64),
                "dep_len": lengths,
                "dep_flat": flat,
                "step": np.array(self._step, dtype=np.int64),
            }
        )
        self._reset_cur()
        self._start_cur = self.count

    def add_block(self, src, dst, chunk, rid, kind, step, deps=None) -> int:
        """Append ``m`` operations given as arrays; ``deps`` is an ``(m, k)`` int array with
        ``-1`` for no dependency (or None). Returns the id of the first appended operation."""
        self._flush()
        src = np.asarray(src, dtype=np.int64).ravel()
        m = len(src)
        first = self.count

        def col(x, dtype):
            a = np.asarray(x, dtype=dtype)
            return np.broadcast_to(a, (m,)).copy() if a.ndim == 0 else a.ravel().astype(dtype)

        if deps is None:
            dep_len = np.zeros(m, dtype=np.int64)
            dep_flat = np.zeros(0, dtype=np.int64)
        else:
            d = np.asarray(deps, dtype=np.int64).reshape(m, -1)
            mask = d >= 0
            dep_len = mask.sum(axis=1).astype(np.int64)
            dep_flat = d[mask]
        self._blocks.append(
            {
                "src": src,
                "dst": col(dst, np.int64),
                "chunk": col(chunk, np.int64),
                "kind": col(kind, np.int8),
                "rid": col(rid, np.int64),
                "dep_len": dep_len,
                "dep_flat": dep_flat,
                "step": col(step, np.int64),
            }
        )
        self.count += m
        self._start_cur = self.count
        return first

    def build(self) -> Schedule:
        self._flush()
        blocks = self._blocks
        n = self.count

        def cat(name, dtype):
            if not blocks:
                return np.zeros(0, dtype=dtype)
            return np.concatenate([b[name] for b in blocks]).astype(dtype, copy=False)

        src, dst, chunk = cat("src", np.int64), cat("dst", np.int64), cat("chunk", np.int64)
        kind, rid, step = cat("kind", np.int8), cat("rid", np.int64), cat("step", np.int64)
        dep_len, dep_flat = cat("dep_len", np.int64), cat("dep_flat", np.int64)
        # routes: interned table -> per-op CSR
        rlen = np.array([len(r) for r in self._rlist], dtype=np.int64)
        rtab_ptr = np.zeros(len(self._rlist) + 1, dtype=np.int64)
        rtab_ptr[1:] = np.cumsum(rlen)
        rtab = np.fromiter(
            (x for r in self._rlist for x in r), dtype=np.int64, count=int(rtab_ptr[-1])
        )
        lengths = rlen[rid] if n else np.zeros(0, dtype=np.int64)
        route_ptr = np.zeros(n + 1, dtype=np.int64)
        route_ptr[1:] = np.cumsum(lengths)
        total = int(route_ptr[-1])
        if total:
            offs = np.repeat(rtab_ptr[rid] - route_ptr[:-1], lengths)
            route_links = rtab[np.arange(total, dtype=np.int64) + offs]
        else:
            route_links = np.zeros(0, dtype=np.int64)
        dep_ptr = np.zeros(n + 1, dtype=np.int64)
        dep_ptr[1:] = np.cumsum(dep_len)
        any_step = bool(n and np.any(step >= 0))
        builder = ScheduleBuilder(self.topology, self.collective, self.meta)
        if n:
            builder.add_many(
                src,
                dst,
                chunk,
                route_ptr=route_ptr,
                route_links=route_links,
                dep_ptr=dep_ptr,
                dep_ids=dep_flat,
                kind=kind,
                step=step if any_step else None,
            )
        return builder.build()


# ---------------------------------------------------------------------------------- tracker
class Tracker:
    """Sends chunks between ranks adding the dependencies each (rank, chunk) buffer needs.

    * data: an operation depends on every current writer of the sender's buffer (the ops whose
      results it forwards; the initial value needs none);
    * for reducing collectives also write-after-read and write-after-write: an operation
      writing the receiver's buffer depends on the reads of it since its last write and, if it
      overwrites (copy) or the last write was a copy, on the current writers. Concurrent reduces
      into one buffer stay unordered (the verifier allows them).

    Steps are automatic: ``max(base, 1 + max(step of dependencies))``.
    """

    def __init__(self, ops: Ops, reducing: bool):
        self.ops = ops
        self.reducing = reducing
        self.writers: dict[tuple[int, int], list[int]] = {}
        self.wcopy: dict[tuple[int, int], bool] = {}
        self.readers: dict[tuple[int, int], list[int]] = {}
        self._steps: dict[int, int] = {}

    def step(self, op: int) -> int:
        return self._steps[op]

    def send(
        self,
        src: int,
        dst: int,
        chunk: int,
        *,
        route: Sequence[int] | None = None,
        kind: int = COPY,
        deps: Iterable[int] = (),
        base: int = 0,
        step: int | None = None,
    ) -> int:
        d = set(deps)
        skey = (src, chunk)
        dkey = (dst, chunk)
        d.update(self.writers.get(skey, ()))
        if self.reducing:
            d.update(self.readers.get(dkey, ()))
            if kind == COPY or self.wcopy.get(dkey, False):
                d.update(self.writers.get(dkey, ()))
        if step is None:
            step = base
            for x in d:
                s = self._steps.get(x)
                if s is not None and s + 1 > step:
                    step = s + 1
        op = self.ops.add(src, dst, chunk, route=route, kind=kind, deps=d, step=step)
        self._steps[op] = step
        self.readers.setdefault(skey, []).append(op)
        if kind == COPY or self.wcopy.get(dkey, False):
            self.writers[dkey] = [op]
        else:
            self.writers.setdefault(dkey, []).append(op)
        self.wcopy[dkey] = kind == COPY
        self.readers[dkey] = []
        return op

    def send_path(
        self,
        path: Sequence[int],
        chunk: int,
        *,
        kind: int = COPY,
        deps: Iterable[int] = (),
        base: int = 0,
    ) -> int:
        """Send along ranks ``path`` (relays are copies, the last hop has ``kind``)."""
        op = -1
        first = True
        for a, b in zip(path[:-1], path[1:]):
            last = b == path[-1]
            op = self.send(
                a,
                b,
                chunk,
                route=self.ops.direct_route(a, b),
                kind=kind if last else COPY,
                deps=deps if first else (),
                base=base,
            )
            first = False
        return op
