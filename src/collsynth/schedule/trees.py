"""The tree form of the IR: weighted spanning trees per root, lowered to pipelined chunk ops.

ForestColl-style methods produce, for every root rank, a few trees with integer multiplicities:
tree ``(root, mult)`` carries ``mult / k`` of the root's data, where ``k`` is the total
multiplicity of the root's trees. A tree is

* an **out-tree** (``direction="out"``): data flows from the root along its edges (broadcast;
  used by AllGather and Broadcast), or
* an **in-tree** (``direction="in"``): data flows toward the root, each node reducing what its
  children send before passing it on (used by ReduceScatter and Reduce).

Edges are ``(from_rank, to_rank, route)`` in the direction data flows, with ``route`` a list of
link ids (or ``None`` for the default shortest route through switches).

:func:`lower` turns a :class:`TreeForm` into chunk operations: every root's data is cut into
``k * pipeline`` chunks; tree ``i`` carries ``mult_i * pipeline`` of them; each chunk travels
every edge of its tree with a dependency on the operation that brought it to the edge's tail
(out-trees) or on the operations that brought the children's partial sums (in-trees). AllReduce
is ReduceScatter over the in-trees followed by AllGather over the out-trees; a chunk's broadcasts
from its root wait for its reductions into the root through one join operation where that makes
fewer dependencies (fan-in plus fan-out instead of fan-in times fan-out). Operations are
emitted round-robin over the trees (every tree's first chunk, then every tree's second chunk,
...), so that equally ready transfers are served in pipeline order.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..files import dependency_limit
from ..topology.model import Topology
from .ir import OpKind, Schedule, ScheduleBuilder, spread_ranges


@dataclass(frozen=True)
class Tree:
    root: int
    edges: tuple[tuple[int, int, tuple[int, ...] | None], ...]
    mult: int = 1
    direction: str = "out"

    def to_dict(self) -> dict:
        return {
            "root": self.root,
            "mult": self.mult,
            "direction": self.direction,
            "edges": [[a, b, list(r) if r is not None else None] for a, b, r in self.edges],
        }


_COLUMN_NAMES = ("tree_root", "tree_mult", "tree_in", "tree_ptr", "edge_from", "edge_to",
                 "edge_routed", "edge_route_ptr", "edge_route_links")  # fmt: skip


#: per-edge columns held narrow (ranks and link ids fit 32 bits: a topology has at most
#: 2**23 links, see docs/cli.md): millions of edges take half the memory
_COLUMN_TYPES: dict[str, Any] = {
    "edge_from": np.int32,
    "edge_to": np.int32,
    "edge_routed": np.int8,
    "edge_route_links": np.int32,
}


class TreeForm:
    """A set of trees; ``out`` trees broadcast, ``in`` trees reduce.

    Held either as :class:`Tree` objects (``TreeForm(trees)``) or as integer columns
    (``TreeForm(columns=...)``, see :meth:`to_columns`), each made from the other on first
    use. Large forms (thousands of trees of thousands of edges) stay columns from synthesis to
    file: lowering, heights and loads work on the columns without a Python object per edge.
    """

    def __init__(self, trees: Iterable[Tree] = (), *, columns: dict[str, np.ndarray] | None = None):
        self._trees: list[Tree] | None
        self._columns: dict[str, np.ndarray] | None
        if columns is not None:
            missing = [c for c in _COLUMN_NAMES if c not in columns]
            if missing:
                raise CollsynthError(f"tree columns need {missing[0]!r}")
            self._columns = _typed(columns)
            self._trees = None
        else:
            self._trees = list(trees)
            self._columns = None

    @property
    def trees(self) -> list[Tree]:
        """The trees as :class:`Tree` objects (made from the columns on first use)."""
        if self._trees is None:
            assert self._columns is not None
            self._trees = _trees_of(self._columns)
        return self._trees

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """The trees as columns (see :meth:`to_columns`; made on first use, do not modify)."""
        if self._columns is None:
            self._columns = _typed(_columns_of(self.trees))
        return self._columns

    def __len__(self) -> int:
        return len(self._trees) if self._trees is not None else len(self.columns["tree_root"])

    def __repr__(self) -> str:
        return f"TreeForm({len(self)} trees)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TreeForm):
            return NotImplemented
        a, b = self.columns, other.columns
        return all(np.array_equal(a[c], b[c]) for c in _COLUMN_NAMES)

    __hash__ = None  # type: ignore[assignment]

    def to_columns(self) -> dict[str, np.ndarray]:
        """The trees as integer columns (the binary schedule file's ``tree_*`` and ``edge_*``
        entries): per tree its root, mult, direction (``tree_in``: 1 for in-trees) and
        ``tree_ptr`` (its edges ``tree_ptr[i]:tree_ptr[i+1]``); per edge its ranks, whether it
        has a route (``edge_routed``) and the route's links (CSR ``edge_route_ptr``,
        ``edge_route_links``)."""
        return dict(self.columns)

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray]) -> TreeForm:
        """The inverse of :meth:`to_columns`; the offsets are checked by the caller."""
        return cls(columns=cols)

    def unit(self) -> TreeForm:
        """Every tree of multiplicity ``m`` as ``m`` trees of multiplicity 1 (in place)."""
        c = self.columns
        mult = c["tree_mult"]
        if np.all(mult == 1):
            return self
        idx = np.repeat(np.arange(len(mult)), mult)
        return TreeForm(columns=_select(c, idx, np.ones(len(idx), dtype=np.int64)))

    @staticmethod
    def concat(forms: Sequence[TreeForm]) -> TreeForm:
        """The trees of ``forms``, in order."""
        cols = [f.columns for f in forms]
        out = {}
        for name in ("tree_root", "tree_mult", "tree_in", "edge_from", "edge_to",
                     "edge_routed", "edge_route_links"):  # fmt: skip
            out[name] = np.concatenate([c[name] for c in cols])
        for ptr in ("tree_ptr", "edge_route_ptr"):
            parts, off = [np.zeros(1, dtype=np.int64)], 0
            for c in cols:
                parts.append(c[ptr][1:] + off)
                off += int(c[ptr][-1])
            out[ptr] = np.concatenate(parts)
        return TreeForm(columns=out)

    def route_sums(self, per_link: np.ndarray) -> np.ndarray:
        """Per edge, the sum of ``per_link`` over its route (0 for edges without one)."""
        c = self.columns
        acc = np.zeros(len(c["edge_route_links"]) + 1)
        np.cumsum(np.asarray(per_link, dtype=float)[c["edge_route_links"]], out=acc[1:])
        ptr = c["edge_route_ptr"]
        return acc[ptr[1:]] - acc[ptr[:-1]]

    def heights(self, n: int) -> np.ndarray:
        """Per tree, its height in edges (trees over ranks ``0..n-1``; the trees must be valid,
        see :func:`lower`)."""
        c = self.columns
        t = len(c["tree_root"])
        if t == 0:
            return np.zeros(0, dtype=np.int64)
        owner = np.repeat(np.arange(t, dtype=np.int64), np.diff(c["tree_ptr"]))
        down = c["tree_in"][owner] == 0
        child = np.where(down, c["edge_to"], c["edge_from"])
        parent = np.where(down, c["edge_from"], c["edge_to"])
        node = np.arange(t * n, dtype=np.int64)
        up = node.copy()
        up[owner * n + child] = owner * n + parent
        depth = np.zeros(t * n, dtype=np.int64)
        depth[owner * n + child] = 1
        for _ in range(max(1, n).bit_length() + 1):  # pointer jumping: log2(height) rounds
            nxt = up[up]
            if np.array_equal(nxt, up):
                break
            depth += depth[up]
            up = nxt
        return depth.reshape(t, n).max(axis=1)

    def to_dict(self) -> dict:
        return {"trees": [t.to_dict() for t in self.trees]}

    @classmethod
    def from_dict(cls, data: Any, source: str = "trees") -> TreeForm:
        if not isinstance(data, dict) or not isinstance(data.get("trees"), list):
            raise CollsynthError(f"{source}: 'trees' must be an object with a 'trees' list")
        trees = []
        for i, td in enumerate(data["trees"]):
            if not isinstance(td, dict):
                raise CollsynthError(f"{source}: tree {i} must be an object")
            root = td.get("root")
            mult = td.get("mult", 1)
            direction = td.get("direction", "out")
            edges = td.get("edges")
            if not _is_int(root) or not _is_int(mult) or mult < 1:
                raise CollsynthError(f"{source}: tree {i} needs an integer root and mult >= 1")
            if direction not in ("out", "in"):
                raise CollsynthError(f"{source}: tree {i} direction must be 'out' or 'in'")
            if not isinstance(edges, list):
                raise CollsynthError(f"{source}: tree {i} edges must be a list")
            parsed = []
            for j, e in enumerate(edges):
                if (
                    not isinstance(e, list)
                    or len(e) not in (2, 3)
                    or not _is_int(e[0])
                    or not _is_int(e[1])
                ):
                    raise CollsynthError(
                        f"{source}: tree {i} edge {j} must be [from, to] or [from, to, route]"
                    )
                route = e[2] if len(e) == 3 else None
                if route is not None and (
                    not isinstance(route, list) or not all(_is_int(x) for x in route)
                ):
                    raise CollsynthError(f"{source}: tree {i} edge {j} route must be link ids")
                parsed.append((int(e[0]), int(e[1]), tuple(route) if route is not None else None))
            trees.append(Tree(int(root), tuple(parsed), int(mult), direction))
        return cls(trees)


def _typed(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Tree columns in their held types; a value that does not fit its type is refused (a
    rank or link id of 2**31 or more is no rank or link of any topology)."""
    out = {}
    for c in _COLUMN_NAMES:
        a = np.asarray(columns[c])
        t = _COLUMN_TYPES.get(c, np.int64)
        if t is not np.int64 and a.size and a.dtype != t:
            info = np.iinfo(t)
            lo, hi = info.min, info.max
            if int(a.min()) < lo or int(a.max()) > hi:
                raise CollsynthError(f"tree column {c!r} holds a value beyond {hi}")
        out[c] = a.astype(t, copy=False)
    return out


def _columns_of(trees: Sequence[Tree]) -> dict[str, np.ndarray]:
    """:meth:`TreeForm.to_columns` of ``trees``."""
    edges = [e for t in trees for e in t.edges]
    routes = [r if r is not None else () for _, _, r in edges]
    tree_ptr = np.zeros(len(trees) + 1, dtype=np.int64)
    np.cumsum([len(t.edges) for t in trees], out=tree_ptr[1:])
    route_ptr = np.zeros(len(edges) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in routes], out=route_ptr[1:])
    return {
        "tree_root": np.array([t.root for t in trees], dtype=np.int64),
        "tree_mult": np.array([t.mult for t in trees], dtype=np.int64),
        "tree_in": np.array([t.direction == "in" for t in trees], dtype=np.int64),
        "tree_ptr": tree_ptr,
        "edge_from": np.array([e[0] for e in edges], dtype=np.int64),
        "edge_to": np.array([e[1] for e in edges], dtype=np.int64),
        "edge_routed": np.array([e[2] is not None for e in edges], dtype=np.int64),
        "edge_route_ptr": route_ptr,
        "edge_route_links": np.fromiter(
            (x for r in routes for x in r), dtype=np.int64, count=int(route_ptr[-1])
        ),
    }


def _trees_of(cols: dict[str, np.ndarray]) -> list[Tree]:
    """The :class:`Tree` objects of tree columns."""
    ptr = cols["tree_ptr"].tolist()
    return [
        Tree(root, _edges_of(cols, ptr[i], ptr[i + 1]), mult, "in" if d else "out")
        for i, (root, mult, d) in enumerate(
            zip(cols["tree_root"].tolist(), cols["tree_mult"].tolist(), cols["tree_in"].tolist())
        )
    ]


def _edges_of(cols: dict[str, np.ndarray], lo: int, hi: int) -> tuple:
    """Edges ``lo:hi`` of tree columns as ``(from, to, route or None)`` tuples."""
    a, b = cols["edge_from"][lo:hi].tolist(), cols["edge_to"][lo:hi].tolist()
    routed = cols["edge_routed"][lo:hi].tolist()
    rptr = cols["edge_route_ptr"][lo : hi + 1].tolist()
    links = cols["edge_route_links"][rptr[0] : rptr[-1]].tolist()
    base = rptr[0]
    return tuple(
        (a[i], b[i], tuple(links[rptr[i] - base : rptr[i + 1] - base]) if routed[i] else None)
        for i in range(len(a))
    )


def _select(cols: dict[str, np.ndarray], idx: np.ndarray, mult: np.ndarray) -> dict:
    """Trees ``idx`` of tree columns (in that order, repeats allowed) with multiplicities
    ``mult``."""
    tp = cols["tree_ptr"]
    lens = np.diff(tp)[idx]
    eidx = spread_ranges(tp[idx], lens)
    rp = cols["edge_route_ptr"]
    rlens = np.diff(rp)[eidx]
    out = {
        "tree_root": cols["tree_root"][idx],
        "tree_mult": np.asarray(mult, dtype=np.int64),
        "tree_in": cols["tree_in"][idx],
        "tree_ptr": np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
        "edge_from": cols["edge_from"][eidx],
        "edge_to": cols["edge_to"][eidx],
        "edge_routed": cols["edge_routed"][eidx],
        "edge_route_ptr": np.concatenate([[0], np.cumsum(rlens)]).astype(np.int64),
        "edge_route_links": cols["edge_route_links"][spread_ranges(rp[eidx], rlens)],
    }
    return out


def _is_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_edges(
    root: int, src: list[int], dst: list[int], direction: str, n: int, what: str
) -> dict[int, list[int]]:
    """Validate that the tree ``root`` with edges ``src[i] -> dst[i]`` spans ranks ``0..n-1``
    from its root; return children lists in data-flow order (for in-trees: the reversed
    edges, i.e. parent -> children)."""
    if not 0 <= root < n:
        raise CollsynthError(f"{what}: root {root} is not a rank")
    parent: dict[int, int] = {}
    children: dict[int, list[int]] = defaultdict(list)
    for a, b in zip(src, dst):
        if not (0 <= a < n and 0 <= b < n) or a == b:
            raise CollsynthError(f"{what}: edge {a}->{b} is not between two ranks")
        child, par = (b, a) if direction == "out" else (a, b)
        if child in parent:
            raise CollsynthError(f"{what}: rank {child} has two parents")
        if child == root:
            raise CollsynthError(f"{what}: the root {child} has a parent")
        parent[child] = par
        children[par].append(child)
    seen = {root}
    q = deque([root])
    while q:
        u = q.popleft()
        for v in children.get(u, ()):
            if v not in seen:
                seen.add(v)
                q.append(v)
    if set(parent) - seen:
        raise CollsynthError(
            f"{what}: rank {min(set(parent) - seen)} is not connected to root {root}"
        )
    if len(seen) < n:
        missing = next(v for v in range(n) if v not in seen)
        raise CollsynthError(f"{what}: does not reach rank {missing}")
    return children


def _roots(form: TreeForm, direction: str) -> dict[int, list[int]]:
    """Per root, the indices of its ``direction`` trees, in order."""
    c = form.columns
    want = 1 if direction == "in" else 0
    out: dict[int, list[int]] = defaultdict(list)
    for i, (r, d) in enumerate(zip(c["tree_root"].tolist(), c["tree_in"].tolist())):
        if d == want:
            out[r].append(i)
    return dict(out)


def _chunk_plan(roots: dict[int, list[int]], mult: list[int], pipeline: int) -> tuple[int, dict]:
    """Chunks per rank and, per tree index, the local chunk indices it carries."""
    import math

    ks = {r: sum(mult[i] for i in ts) for r, ts in roots.items()}
    k_all = 1
    for k in ks.values():
        k_all = math.lcm(k_all, k)
    cpr = k_all * pipeline
    plan = {}
    for r, ts in roots.items():
        scale = k_all // ks[r]
        off = 0
        for i in ts:
            cnt = mult[i] * scale * pipeline
            plan[i] = range(off, off + cnt)
            off += cnt
    return cpr, plan


def lower(
    topology: Topology,
    collective: Collective,
    form: TreeForm,
    pipeline: int = 1,
    meta: dict | None = None,
) -> Schedule:
    """Lower trees to a chunk schedule for ``collective`` (its chunk count is set here)."""
    if pipeline < 1:
        raise CollsynthError(f"pipeline depth must be at least 1, got {pipeline}")
    n = topology.num_ranks
    kind = collective.kind
    out_roots = _roots(form, "out")
    in_roots = _roots(form, "in")
    everyone = set(range(n))
    # Collective requires a root for the rooted kinds (broadcast, reduce)
    root_set: set[int] = {collective.root} if collective.root is not None else set()
    if kind in (CollKind.ALLGATHER, CollKind.BROADCAST):
        need_out = everyone if kind is CollKind.ALLGATHER else root_set
        need_in: set[int] = set()
    elif kind in (CollKind.REDUCESCATTER, CollKind.REDUCE):
        need_out = set()
        need_in = everyone if kind is CollKind.REDUCESCATTER else root_set
    elif kind is CollKind.ALLREDUCE:
        need_out = need_in = everyone
    else:
        raise CollsynthError(f"trees cannot express {kind.value}")
    for name, roots, need in (("out", out_roots, need_out), ("in", in_roots, need_in)):
        if set(roots) != need:
            miss = sorted(need - set(roots)) or sorted(set(roots) - need)
            raise CollsynthError(
                f"{kind.value} needs {name}-trees rooted at exactly ranks "
                f"{sorted(need)[:8]}...; rank {miss[0]} differs"
            )
    cols = form.columns
    mult = cols["tree_mult"].tolist()
    cpr_out, plan_out = _chunk_plan(out_roots, mult, pipeline) if out_roots else (None, {})
    cpr_in, plan_in = _chunk_plan(in_roots, mult, pipeline) if in_roots else (None, {})
    if cpr_out and cpr_in and cpr_out != cpr_in:
        raise CollsynthError("in-trees and out-trees must split each rank's data alike")
    cpr = cpr_out or cpr_in
    assert cpr is not None  # some trees are needed, so one of the plans exists
    coll = collective.with_chunks(cpr)
    b = ScheduleBuilder(topology, coll, meta=meta)
    b.trees = form
    ptr = cols["tree_ptr"].tolist()
    # Emit round-robin over trees (chunk 0 of every tree, then chunk 1, ...) and give each
    # operation the step "round * width + depth" (width > every depth): steps are the planned
    # priority on shared links, so older pipeline rounds go first and every tree advances
    # together. AllReduce: every reduction is emitted (and stepped) before the broadcasts that
    # depend on it.
    reduced = _Reduced(coll.num_chunks)  # chunk -> ops that completed its reduction at the root
    step0, base = 0, 0
    for direction, roots, plan in (("in", in_roots, plan_in), ("out", out_roots, plan_out)):
        ids = [t for _, ts in sorted(roots.items()) for t in ts]
        chunks = [
            np.array([_chunk_id(coll, r, loc) for loc in plan[t]], np.int64)
            for r, ts in sorted(roots.items())
            for t in ts
        ]
        tasks = _tasks_at_once(cols, np.array(ids, dtype=np.int64), direction, n, chunks)
        if tasks is None:  # default routes, or a tree to refuse: one tree at a time
            tasks = []
            for r, ts in sorted(roots.items()):
                for i, t in enumerate(ts):
                    lo, hi = ptr[t], ptr[t + 1]
                    src = cols["edge_from"][lo:hi].tolist()
                    dst = cols["edge_to"][lo:hi].tolist()
                    what = f"{direction}-tree {i} of rank {r}"
                    children = _check_edges(r, src, dst, direction, n, what)
                    ch = chunks[len(tasks)]
                    tasks.append(_Task.make(b, r, direction, src, dst, cols, lo, children, ch))
        if direction == "out" and tasks and reduced.ptr is not None:
            joins = _joins(tasks, reduced, coll, step0, base)
            if joins is not None:
                b.add_many(**joins)
                base += len(joins["src"])
                step0 += 1
        if tasks:
            block, step0 = _emit(tasks, direction, reduced, step0, base)
            del tasks  # one direction's tasks at a time
            b.add_many(**block)
            base += len(block["src"])
            del block
    return b.build()


@dataclass
class _Task:
    """One tree with the chunks it carries, as arrays over its edges in emission order: edge
    ``e`` is ``src[e] -> dst[e]`` at depth (out-trees) or level (in-trees) ``depth[e]``
    (32-bit: a direction's templates hold every edge of its trees)."""

    src: np.ndarray
    dst: np.ndarray
    depth: np.ndarray
    route_len: np.ndarray  # links per edge
    route_flat: np.ndarray  # the edges' routes, concatenated
    dep_len: np.ndarray  # dependencies per edge on other edges of the tree
    dep_owner: np.ndarray  # for each such dependency: the edge that has it ...
    dep_within: np.ndarray  # ... its position in that edge's list ...
    dep_edge: np.ndarray  # ... and the edge it waits for
    from_root: np.ndarray  # out-trees: the edges leaving the root; in-trees: entering it
    chunks: np.ndarray

    @classmethod
    def make(
        cls,
        b: ScheduleBuilder,
        root: int,
        direction: str,
        src: list[int],
        dst: list[int],
        cols: dict[str, np.ndarray],
        lo: int,
        children: dict[int, list[int]],
        chunks: np.ndarray,
    ) -> _Task:
        """The task of the tree with edges ``src -> dst`` (edges ``lo:`` of ``cols``)."""
        index = {(u, v): lo + j for j, (u, v) in enumerate(zip(src, dst))}
        if direction == "in":
            edges = _postorder_edges(root, children)
        else:
            edges = _bfs_edges(root, children)
        eidx = np.array([index[(u, v)] for u, v, _ in edges], dtype=np.int64)
        rptr = cols["edge_route_ptr"]
        if len(eidx) and cols["edge_routed"][eidx].all():
            route_len = rptr[eidx + 1] - rptr[eidx]
            route_flat = cols["edge_route_links"][spread_ranges(rptr[eidx], route_len)]
        else:
            routed = cols["edge_routed"]
            route_list = [
                cols["edge_route_links"][rptr[e] : rptr[e + 1]].tolist()
                if routed[e]
                else b.routes.route(u, v)
                for (u, v, _), e in zip(edges, eidx.tolist())
            ]
            route_len = np.array([len(r) for r in route_list], dtype=np.int64)
            route_flat = np.array([x for r in route_list for x in r], dtype=np.int64)
        deps: list[list[int]] = []
        if direction == "in":
            into: dict[int, list[int]] = defaultdict(list)
            for e, (u, p, _) in enumerate(edges):
                deps.append(into[u])
                into[p].append(e)
            from_root = into[root]
        else:
            arrived: dict[int, list[int]] = {}
            for e, (u, v, _) in enumerate(edges):
                deps.append(arrived.get(u, []))
                arrived[v] = [e]
            from_root = [e for e, (u, _, _) in enumerate(edges) if u == root]
        dep_len = np.array([len(d) for d in deps], dtype=np.int32)
        return cls(
            src=np.array([e[0] for e in edges], dtype=np.int32),
            dst=np.array([e[1] for e in edges], dtype=np.int32),
            depth=np.array([e[2] for e in edges], dtype=np.int32),
            route_len=route_len.astype(np.int32),
            route_flat=route_flat.astype(np.int32),
            dep_len=dep_len,
            dep_owner=np.repeat(np.arange(len(edges), dtype=np.int32), dep_len),
            dep_within=np.array([j for d in deps for j in range(len(d))], dtype=np.int32),
            dep_edge=np.array([x for d in deps for x in d], dtype=np.int32),
            from_root=np.array(from_root, dtype=np.int32),
            chunks=chunks,
        )


@dataclass
class _Forest:
    """One direction's trees as arrays over their edges (tree ``owner[e]``, in ``ids`` order)
    and over the nodes of every tree (``g = tree * n + rank``)."""

    n: int
    owner: np.ndarray  # per edge: its tree (0..T-1)
    eidx: np.ndarray  # per edge: its index in the tree columns
    child: np.ndarray  # per edge: the rank it leads to from the root's side
    par: np.ndarray  # per edge: the rank on the root's side
    root: np.ndarray  # per tree
    lens: np.ndarray  # per tree: its edge count
    depth: np.ndarray  # per node g: its depth below its root

    @property
    def gchild(self) -> np.ndarray:
        return self.owner * self.n + self.child

    @property
    def gpar(self) -> np.ndarray:
        return self.owner * self.n + self.par


def _tasks_at_once(
    cols: dict[str, np.ndarray], ids: np.ndarray, direction: str, n: int, chunks: list
) -> list[_Task] | None:
    """:meth:`_Task.make` for the trees ``ids`` (of one direction) at once, with numpy: the
    same tasks, or None when a tree is not a spanning tree of ranks ``0..n-1`` (the caller
    then checks the trees one at a time, which names the fault) or an edge has no route.

    Out-trees are ordered breadth first (by depth, then the parent's order, then edge order),
    level by level; in-trees in post order (children in edge order), from the subtree sizes
    (bottom-up) and preorder positions (top-down): ``post = pre + size - 1 - depth``."""
    if len(ids) == 0:
        return []
    f = _spanning_forest(cols, ids, direction, n)
    if f is None:
        return None
    emit, edge_depth = (_bfs_order if direction == "out" else _post_order)(f)
    M = len(f.eidx)
    tstart = np.concatenate(([0], np.cumsum(f.lens)))
    em = np.empty(M, dtype=np.int64)  # emission index of every edge within its tree
    em[emit] = np.arange(M) - tstart[f.owner[emit]]
    deps = _tree_dependencies(f, em, direction)
    return _make_tasks(cols, f, emit, edge_depth, em, tstart, deps, direction, chunks)


def _spanning_forest(
    cols: dict[str, np.ndarray], ids: np.ndarray, direction: str, n: int
) -> _Forest | None:
    """The trees ``ids`` as a :class:`_Forest` with node depths (pointer jumping), or None
    when an edge has no route or a tree is not a spanning tree of ranks ``0..n-1``."""
    T = len(ids)
    tp = cols["tree_ptr"]
    lens = tp[ids + 1] - tp[ids]
    eidx = spread_ranges(tp[ids], lens)
    if not np.all(cols["edge_routed"][eidx]):
        return None
    owner = np.repeat(np.arange(T, dtype=np.int64), lens)
    a = cols["edge_from"][eidx].astype(np.int64)
    b = cols["edge_to"][eidx].astype(np.int64)
    child, par = (b, a) if direction == "out" else (a, b)
    root = cols["tree_root"][ids]
    if (
        np.any(lens != n - 1)
        or np.any((root < 0) | (root >= n))
        or np.any((a < 0) | (a >= n) | (b < 0) | (b >= n) | (a == b))
        or np.any(child == root[owner])
    ):
        return None
    gchild, gpar = owner * n + child, owner * n + par
    if np.any(np.bincount(gchild, minlength=T * n) > 1):
        return None
    groot = np.arange(T, dtype=np.int64) * n + root
    up = np.arange(T * n, dtype=np.int64)
    up[gchild] = gpar
    depth = np.zeros(T * n, dtype=np.int64)
    depth[gchild] = 1
    for _ in range(max(1, n).bit_length() + 1):
        nxt = up[up]
        if np.array_equal(nxt, up):
            break
        depth += depth[up]
        up = nxt
    if not np.array_equal(up.reshape(T, n), np.repeat(groot[:, None], n, axis=1)):
        return None  # a cycle: some node does not reach its root
    return _Forest(n, owner, eidx, child, par, root, lens, depth)


def _levels(f: _Forest) -> tuple[np.ndarray, np.ndarray, int]:
    """Edges by the depth of their child (``by_depth``), where each depth starts in it
    (``level_at[d]``), and the greatest depth."""
    dchild = f.depth[f.gchild]
    height = int(dchild.max()) if len(dchild) else 0
    by_depth = np.argsort(dchild, kind="stable")
    level_at = np.searchsorted(dchild[by_depth], np.arange(height + 2))
    return by_depth, level_at, height


def _bfs_order(f: _Forest) -> tuple[np.ndarray, np.ndarray]:
    """Out-trees: the edges in breadth-first order per tree, and each edge's depth (of its
    parent)."""
    by_depth, level_at, height = _levels(f)
    gchild, gpar, owner = f.gchild, f.gpar, f.owner
    epos = np.arange(len(owner), dtype=np.int64)
    rank = np.zeros(len(f.depth), dtype=np.int64)  # position within (tree, depth)
    for d in range(1, height + 1):
        sel = by_depth[level_at[d] : level_at[d + 1]]
        sel = sel[np.lexsort((epos[sel], rank[gpar[sel]], owner[sel]))]
        first = np.searchsorted(owner[sel], owner[sel])
        rank[gchild[sel]] = np.arange(len(sel)) - first
    dchild = f.depth[gchild]
    return np.lexsort((rank[gchild], dchild, owner)), dchild - 1


def _post_order(f: _Forest) -> tuple[np.ndarray, np.ndarray]:
    """In-trees: the edges in post order per tree (children in edge order), and each edge's
    level (the height of the subtree it leaves)."""
    by_depth, level_at, height = _levels(f)
    gchild, gpar = f.gchild, f.gpar
    epos = np.arange(len(gchild), dtype=np.int64)
    size = np.ones(len(f.depth), dtype=np.int64)
    lev = np.zeros(len(f.depth), dtype=np.int64)
    for d in range(height, 0, -1):
        sel = by_depth[level_at[d] : level_at[d + 1]]
        np.add.at(size, gpar[sel], size[gchild[sel]])
        np.maximum.at(lev, gpar[sel], lev[gchild[sel]] + 1)
    pre = np.zeros(len(f.depth), dtype=np.int64)
    for d in range(1, height + 1):
        sel = by_depth[level_at[d] : level_at[d + 1]]
        sel = sel[np.lexsort((epos[sel], gpar[sel]))]
        sz = size[gchild[sel]]
        cs = np.cumsum(sz)
        first = np.searchsorted(gpar[sel], gpar[sel])
        before = cs - sz - (cs[first] - sz[first])  # earlier siblings' subtree sizes
        pre[gchild[sel]] = pre[gpar[sel]] + 1 + before
    post = pre + size - 1 - f.depth
    return np.lexsort((post[gchild], f.owner)), lev[gchild]


def _tree_dependencies(f: _Forest, em: np.ndarray, direction: str) -> tuple:
    """The intra-tree dependencies as ``(owner edge, position, awaited edge, tree)`` arrays
    (emission indices, sorted by tree), and the edges at the root (``from_root``, a mask)."""
    gchild, gpar, owner = f.gchild, f.gpar, f.owner
    em_of = np.full(len(f.depth), -1, dtype=np.int64)  # the emission index of each node's edge
    em_of[gchild] = em
    from_root = f.par == f.root[owner]
    has = ~from_root
    if direction == "out":  # edge (u, v) waits for the edge that brought u
        d_owner, d_edge, d_tree = em[has], em_of[gpar[has]], owner[has]
        d_within = np.zeros(len(d_owner), dtype=np.int64)
    else:  # edge (u, p) waits for the edges from u's children, in emission order
        d_owner, d_edge, d_tree = em_of[gpar[has]], em[has], owner[has]
        o = np.lexsort((d_edge, d_owner, d_tree))
        d_owner, d_edge, d_tree = d_owner[o], d_edge[o], d_tree[o]
        key = d_tree * f.n + d_owner
        d_within = np.arange(len(key)) - np.searchsorted(key, key)
    o = np.argsort(d_tree, kind="stable")
    return d_owner[o], d_within[o], d_edge[o], d_tree[o], from_root


def _make_tasks(
    cols: dict[str, np.ndarray],
    f: _Forest,
    emit: np.ndarray,
    edge_depth: np.ndarray,
    em: np.ndarray,
    tstart: np.ndarray,
    deps: tuple,
    direction: str,
    chunks: list,
) -> list[_Task]:
    """One :class:`_Task` per tree: views of the direction's columns in emission order."""
    d_owner, d_within, d_edge, d_tree, from_root = deps
    T = len(f.lens)
    owner = f.owner
    d_at = np.searchsorted(d_tree, np.arange(T + 1))
    d_len = np.bincount(tstart[d_tree] + d_owner, minlength=len(em))
    r_edges = np.flatnonzero(from_root)
    r_edges = r_edges[np.lexsort((em[r_edges], owner[r_edges]))]
    r_at = np.searchsorted(owner[r_edges], np.arange(T + 1))
    e_sorted = f.eidx[emit]
    rptr = cols["edge_route_ptr"]
    rlen = rptr[e_sorted + 1] - rptr[e_sorted]
    rflat = cols["edge_route_links"][spread_ranges(rptr[e_sorted], rlen)].astype(np.int32)
    r_off = np.concatenate(([0], np.cumsum(rlen)))
    src_s, dst_s = f.par[emit].astype(np.int32), f.child[emit].astype(np.int32)
    if direction == "in":  # data flows child -> parent
        src_s, dst_s = dst_s, src_s
    dep_s = edge_depth[emit].astype(np.int32)
    rlen32, dlen32 = rlen.astype(np.int32), d_len.astype(np.int32)
    tasks = []
    for t in range(T):
        lo, hi = int(tstart[t]), int(tstart[t + 1])
        dl, dh = int(d_at[t]), int(d_at[t + 1])
        tasks.append(
            _Task(
                src=src_s[lo:hi],
                dst=dst_s[lo:hi],
                depth=dep_s[lo:hi],
                route_len=rlen32[lo:hi],
                route_flat=rflat[r_off[lo] : r_off[hi]],
                dep_len=dlen32[lo:hi],
                dep_owner=d_owner[dl:dh].astype(np.int32),
                dep_within=d_within[dl:dh].astype(np.int32),
                dep_edge=d_edge[dl:dh].astype(np.int32),
                from_root=em[r_edges[r_at[t] : r_at[t + 1]]].astype(np.int32),
                chunks=chunks[t],
            )
        )
    return tasks


class _Reduced:
    """Per chunk, the operations that complete its reduction at its root (CSR over chunks)."""

    def __init__(self, num_chunks: int):
        self.num_chunks = num_chunks
        self.len = np.zeros(num_chunks, dtype=np.int64)
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []  # (chunks, ops per chunk row)
        self.ptr: np.ndarray | None = None
        self.ids = np.zeros(0, dtype=np.int64)

    def add(self, chunks: np.ndarray, ops: np.ndarray) -> None:
        self.len[chunks] = ops.shape[1]
        self.parts.append((chunks, ops))

    def freeze(self) -> None:
        self.ptr = np.zeros(self.num_chunks + 1, dtype=np.int64)
        np.cumsum(self.len, out=self.ptr[1:])
        self.ids = np.zeros(int(self.ptr[-1]), dtype=np.int64)
        for chunks, ops in self.parts:
            self.ids[self.ptr[chunks][:, None] + np.arange(ops.shape[1])] = ops
        self.parts = []

    def replace(self, chunks: np.ndarray, ops: np.ndarray) -> None:
        """The reduction of each of ``chunks`` is now complete at the one operation ``ops[i]``
        (a join), instead of its list."""
        assert self.ptr is not None
        lens = self.len.copy()
        lens[chunks] = 1
        ptr = np.zeros(self.num_chunks + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        keep = np.ones(self.num_chunks, dtype=bool)
        keep[chunks] = False
        kept = np.flatnonzero(keep)
        ids = np.empty(int(ptr[-1]), dtype=np.int64)
        ids[spread_ranges(ptr[kept], lens[kept])] = self.ids[
            spread_ranges(self.ptr[kept], self.len[kept])
        ]
        ids[ptr[chunks]] = ops
        self.len, self.ptr, self.ids = lens, ptr, ids


def _joins(
    tasks: list[_Task], reduced: _Reduced, coll: Collective, step: int, base: int
) -> dict | None:
    """AllReduce: a join at the root of every chunk whose broadcasts would otherwise each
    wait for every reduction into the root, where that saves dependencies (fan-in times
    fan-out above fan-in plus fan-out), as :meth:`ScheduleBuilder.add_many` columns (op ids
    from ``base``, all at ``step``); ``reduced`` then names the join for those chunks. None
    where no chunk gains."""
    fan_out = np.zeros(coll.num_chunks, dtype=np.int64)
    for t in tasks:
        fan_out[t.chunks] = len(t.from_root)
    fan_in = reduced.len
    chunks = np.flatnonzero(fan_in * fan_out > fan_in + fan_out)
    if not len(chunks):
        return None
    assert reduced.ptr is not None  # frozen after the in-trees
    lens = fan_in[chunks]
    dep_ptr = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum(lens, out=dep_ptr[1:])
    dep_ids = reduced.ids[spread_ranges(reduced.ptr[chunks], lens)]
    root = chunks // coll.chunks_per_rank  # AllReduce: chunk r * per rank + i belongs to r
    reduced.replace(chunks, base + np.arange(len(chunks), dtype=np.int64))
    return {
        "src": root,
        "dst": root,
        "chunk": chunks,
        "route_ptr": np.zeros(len(chunks) + 1, dtype=np.int64),
        "route_links": np.zeros(0, dtype=np.int64),
        "dep_ptr": dep_ptr,
        "dep_ids": dep_ids,
        "kind": int(OpKind.JOIN),
        "step": np.full(len(chunks), step, dtype=np.int64),
    }


def _emit(
    tasks: list[_Task], direction: str, reduced: _Reduced, step0: int, base: int
) -> tuple[dict, int]:
    """The operations of one direction's trees as :meth:`ScheduleBuilder.add_many` columns
    (op ids from ``base``), and the first step after them. Operations are ordered by pipeline
    round, then tree, then edge."""
    rounds = np.array([len(t.chunks) for t in tasks], dtype=np.int64)
    sizes = np.array([len(t.src) for t in tasks], dtype=np.int64)
    q_max = int(rounds.max())
    per = np.where(np.arange(q_max)[:, None] < rounds[None, :], sizes[None, :], 0)
    starts = (np.cumsum(per.ravel()) - per.ravel()).reshape(per.shape) + base
    total = int(per.sum())
    width = 1 + max((int(t.depth.max()) for t in tasks if len(t.depth)), default=0)
    src = np.empty(total, dtype=np.int64)
    dst = np.empty(total, dtype=np.int64)
    chunk = np.empty(total, dtype=np.int64)
    step = np.empty(total, dtype=np.int64)
    rlen = np.empty(total, dtype=np.int64)
    dlen = np.empty(total, dtype=np.int64)
    last = step0
    ids_of: list[np.ndarray] = []
    for j, t in enumerate(tasks):
        q = np.arange(rounds[j], dtype=np.int64)
        first = starts[: rounds[j], j]  # op id of each round's first edge
        ids = (first - base)[:, None] + np.arange(sizes[j], dtype=np.int64)[None, :]
        ids_of.append(ids)
        src[ids] = t.src
        dst[ids] = t.dst
        chunk[ids] = t.chunks[:, None]
        step[ids] = step0 + q[:, None] * width + t.depth[None, :]
        rlen[ids] = t.route_len
        dlen[ids] = t.dep_len
        if direction == "out" and len(t.from_root):
            dlen[ids[:, t.from_root]] = reduced.len[t.chunks][:, None]
        depth = int(t.depth.max()) if len(t.depth) else 0
        last = max(last, step0 + (int(rounds[j]) - 1) * width + depth + 1)
        if direction == "in":
            reduced.add(t.chunks, first[:, None] + t.from_root[None, :])
    route_ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(rlen, out=route_ptr[1:])
    dep_ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(dlen, out=dep_ptr[1:])
    limit = dependency_limit()
    if int(dep_ptr[-1]) + base > limit:  # (base: at most one per earlier op, in-trees)
        fan = int(dlen.max()) if total else 0
        raise CollsynthError(
            f"these trees need {int(dep_ptr[-1]):,} dependencies in their {direction}-tree "
            f"operations (up to {fan} per operation), more than the limit of {limit:,} "
            f"(COLLSYNTH_MAX_DEPS raises it; each takes 8 bytes and more to verify)"
        )
    route_links = np.empty(int(route_ptr[-1]), dtype=np.int64)
    dep_ids = np.empty(int(dep_ptr[-1]), dtype=np.int64)
    if direction == "in":
        reduced.freeze()
    for j, t in enumerate(tasks):
        ids = ids_of[j]
        first = ids[:, :1]
        if len(t.route_flat):
            owner = np.repeat(np.arange(len(t.src), dtype=np.int64), t.route_len)
            within = np.arange(len(t.route_flat)) - np.repeat(
                np.cumsum(t.route_len) - t.route_len, t.route_len
            )
            route_links[route_ptr[first + owner[None, :]] + within[None, :]] = t.route_flat
        if len(t.dep_edge):
            dep_ids[dep_ptr[first + t.dep_owner[None, :]] + t.dep_within[None, :]] = (
                first + base + t.dep_edge[None, :]
            )
        if direction == "out" and len(t.from_root) and reduced.ptr is not None:
            ops = ids[:, t.from_root].ravel()
            chunks = np.repeat(t.chunks, len(t.from_root))
            lens = reduced.len[chunks]
            into = spread_ranges(dep_ptr[ops], lens)
            dep_ids[into] = reduced.ids[spread_ranges(reduced.ptr[chunks], lens)]
    kind = OpKind.REDUCE if direction == "in" else OpKind.COPY
    block = {
        "src": src,
        "dst": dst,
        "chunk": chunk,
        "route_ptr": route_ptr,
        "route_links": route_links,
        "dep_ptr": dep_ptr,
        "dep_ids": dep_ids,
        "kind": int(kind),
        "step": step,
    }
    return block, last


def _chunk_id(coll: Collective, root: int, local: int) -> int:
    if coll.kind in (CollKind.BROADCAST, CollKind.REDUCE):
        return local
    return root * coll.chunks_per_rank + local


def _bfs_edges(root: int, children: dict[int, list[int]]) -> list[tuple[int, int, int]]:
    """Out-tree edges ``(u, v, depth(u))`` in breadth-first order."""
    out = []
    depth = {root: 0}
    q = deque([root])
    while q:
        u = q.popleft()
        for v in children.get(u, ()):
            depth[v] = depth[u] + 1
            out.append((u, v, depth[u]))
            q.append(v)
    return out


def _postorder_edges(root: int, children: dict[int, list[int]]) -> list[tuple[int, int, int]]:
    """In-tree edges ``(u, parent, level(u))`` with every node after its children; leaves have
    level 0 and a node's level exceeds its children's."""
    order: list[int] = []
    stack = [(root, False)]
    while stack:
        u, done = stack.pop()
        if done:
            order.append(u)
            continue
        stack.append((u, True))
        for v in reversed(children.get(u, ())):
            stack.append((v, False))
    parent = {v: u for u, vs in children.items() for v in vs}
    level: dict[int, int] = {}
    out = []
    for u in order:
        level[u] = 1 + max((level[c] for c in children.get(u, ())), default=-1)
        if u != root:
            out.append((u, parent[u], level[u]))
    return out
