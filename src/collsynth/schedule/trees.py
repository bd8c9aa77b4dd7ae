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
is ReduceScatter over the in-trees followed by AllGather over the out-trees. Operations are
emitted round-robin over the trees (every tree's first chunk, then every tree's second chunk,
...), so that equally ready transfers are served in pipeline order.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..topology.model import Topology
from .ir import OpKind, Schedule, ScheduleBuilder


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


@dataclass
class TreeForm:
    """A set of trees; ``out`` trees broadcast, ``in`` trees reduce."""

    trees: list[Tree] = field(default_factory=list)

    def by_root(self, direction: str) -> dict[int, list[Tree]]:
        out: dict[int, list[Tree]] = defaultdict(list)
        for t in self.trees:
            if t.direction == direction:
                out[t.root].append(t)
        return dict(out)

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


def _is_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_tree(tree: Tree, n: int, members: set[int], what: str) -> dict[int, list[int]]:
    """Validate that ``tree`` spans ``members`` from its root; return children lists in
    data-flow order (for in-trees: the reversed edges, i.e. parent -> children)."""
    if not 0 <= tree.root < n:
        raise CollsynthError(f"{what}: root {tree.root} is not a rank")
    parent: dict[int, int] = {}
    children: dict[int, list[int]] = defaultdict(list)
    for a, b, _ in tree.edges:
        if not (0 <= a < n and 0 <= b < n) or a == b:
            raise CollsynthError(f"{what}: edge {a}->{b} is not between two ranks")
        child, par = (b, a) if tree.direction == "out" else (a, b)
        if child in parent:
            raise CollsynthError(f"{what}: rank {child} has two parents")
        if child == tree.root:
            raise CollsynthError(f"{what}: the root {child} has a parent")
        parent[child] = par
        children[par].append(child)
    seen = {tree.root}
    q = deque([tree.root])
    while q:
        u = q.popleft()
        for v in children.get(u, ()):
            if v not in seen:
                seen.add(v)
                q.append(v)
    if set(parent) - seen:
        raise CollsynthError(
            f"{what}: rank {min(set(parent) - seen)} is not connected to root {tree.root}"
        )
    if members - seen:
        raise CollsynthError(f"{what}: does not reach rank {min(members - seen)}")
    return children


def _chunk_plan(roots: dict[int, list[Tree]], pipeline: int) -> tuple[int, dict]:
    """Chunks per rank and, per (root, tree index), the local chunk indices it carries."""
    import math

    ks = {r: sum(t.mult for t in ts) for r, ts in roots.items()}
    k_all = 1
    for k in ks.values():
        k_all = math.lcm(k_all, k)
    cpr = k_all * pipeline
    plan = {}
    for r, ts in roots.items():
        scale = k_all // ks[r]
        off = 0
        for i, t in enumerate(ts):
            cnt = t.mult * scale * pipeline
            plan[(r, i)] = range(off, off + cnt)
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
    out_roots = form.by_root("out")
    in_roots = form.by_root("in")
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
    cpr_out, plan_out = _chunk_plan(out_roots, pipeline) if out_roots else (None, {})
    cpr_in, plan_in = _chunk_plan(in_roots, pipeline) if in_roots else (None, {})
    if cpr_out and cpr_in and cpr_out != cpr_in:
        raise CollsynthError("in-trees and out-trees must split each rank's data alike")
    cpr = cpr_out or cpr_in
    assert cpr is not None  # some trees are needed, so one of the plans exists
    coll = collective.with_chunks(cpr)
    b = ScheduleBuilder(topology, coll, meta=meta)
    b.trees = form
    reduced: dict[int, list[int]] = {}  # chunk -> ops that completed its reduction at the root
    tasks: dict[str, list] = {"in": [], "out": []}
    for direction, roots, plan in (("in", in_roots, plan_in), ("out", out_roots, plan_out)):
        for r, ts in sorted(roots.items()):
            for i, t in enumerate(ts):
                children = _check_tree(t, n, everyone, f"{direction}-tree {i} of rank {r}")
                routes = {(a, bb): rt for a, bb, rt in t.edges}
                edges = (_postorder_edges if direction == "in" else _bfs_edges)(t.root, children)
                tasks[direction].append(
                    (t.root, edges, routes, [_chunk_id(coll, r, loc) for loc in plan[(r, i)]])
                )
    # Emit round-robin over trees (chunk 0 of every tree, then chunk 1, ...) and give each
    # operation the step "round * width + depth" (width > every depth): steps are the planned
    # priority on shared links, so older pipeline rounds go first and every tree advances
    # together. AllReduce: every reduction is emitted (and stepped) before the broadcasts that
    # depend on it.
    step0 = 0
    for direction in ("in", "out"):
        rounds = max((len(c) for *_, c in tasks[direction]), default=0)
        width = 1 + max((e[2] for _, edges, _, _ in tasks[direction] for e in edges), default=0)
        last = step0
        for q in range(rounds):
            for root, edges, routes, chunks in tasks[direction]:
                if q >= len(chunks):
                    continue
                if direction == "in":
                    reduced[chunks[q]] = _lower_in(
                        b, root, edges, routes, chunks[q], step0 + q * width
                    )
                else:
                    _lower_out(
                        b,
                        root,
                        edges,
                        routes,
                        chunks[q],
                        reduced.get(chunks[q], []),
                        step0 + q * width,
                    )
                depth = max((e[2] for e in edges), default=0)
                last = max(last, step0 + q * width + depth + 1)
        step0 = last
    return b.build()


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


def _lower_out(
    b: ScheduleBuilder,
    root: int,
    edges: list[tuple[int, int, int]],
    routes: dict,
    chunk: int,
    root_deps: Sequence[int],
    step0: int,
) -> None:
    """Broadcast ``chunk`` down an out-tree; op ``u -> v`` has step ``step0 + depth(u)``."""
    arrived = {root: list(root_deps)}
    for u, v, depth in edges:
        arrived[v] = [
            b.add(
                u,
                v,
                chunk,
                route=routes.get((u, v)),
                kind=OpKind.COPY,
                deps=arrived[u],
                step=step0 + depth,
            )
        ]


def _lower_in(
    b: ScheduleBuilder,
    root: int,
    edges: list[tuple[int, int, int]],
    routes: dict,
    chunk: int,
    step0: int,
) -> list[int]:
    """Reduce ``chunk`` up an in-tree (op ``u -> parent`` at step ``step0 + level(u)``); return
    the ops that deliver into the root."""
    into: dict[int, list[int]] = defaultdict(list)
    for u, p, level in edges:
        into[p].append(
            b.add(
                u,
                p,
                chunk,
                route=routes.get((u, p)),
                kind=OpKind.REDUCE,
                deps=into[u],
                step=step0 + level,
            )
        )
    return into[root]
