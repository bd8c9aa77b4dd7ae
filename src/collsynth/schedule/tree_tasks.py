"""Per tree, what the lowering emits from (:class:`TreeTask`): its edges in emission order
(out-trees breadth first, in-trees in post order), each edge's route, depth or level, and its
dependencies on other edges of the tree; built one tree at a time (:meth:`TreeTask.make`, after
:func:`check_edges`) or for all trees of one direction at once with numpy
(:func:`tasks_at_once`), which give the same tasks.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from ..errors import CollsynthError
from .dag import ragged_arange
from .ir import ScheduleBuilder


def check_edges(
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


@dataclass
class TreeTask:
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
    ) -> TreeTask:
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
            route_flat = cols["edge_route_links"][ragged_arange(route_len, rptr[eidx])]
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


def tasks_at_once(
    cols: dict[str, np.ndarray], ids: np.ndarray, direction: str, n: int, chunks: list
) -> list[TreeTask] | None:
    """:meth:`TreeTask.make` for the trees ``ids`` (of one direction) at once, with numpy: the
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
    eidx = ragged_arange(lens, tp[ids])
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
) -> list[TreeTask]:
    """One :class:`TreeTask` per tree: views of the direction's columns in emission order."""
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
    rflat = cols["edge_route_links"][ragged_arange(rlen, rptr[e_sorted])].astype(np.int32)
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
            TreeTask(
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


__all__ = ["TreeTask", "check_edges", "tasks_at_once"]
