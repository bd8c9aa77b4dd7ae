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
fewer dependencies (fan-in plus fan-out instead of fan-in times fan-out). With
``shares="mult"`` an AllReduce's roots hold unequal shares instead: each tree carries its
multiplicity's share of the whole buffer (ForestColl's Appendix E trees). Operations are
emitted round-robin over the trees (every tree's first chunk, then every tree's second chunk,
...), so that equally ready transfers are served in pipeline order.

This module holds the tree form (:class:`Tree`, :class:`TreeForm` and its columns);
:mod:`collsynth.schedule.tree_lowering` holds :func:`lower` (re-exported here) and
:mod:`collsynth.schedule.tree_tasks` the per-tree edge orders and dependencies it emits from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from ..errors import CollsynthError
from .dag import owners, ragged_arange
from .tree_lowering import lower


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
        owner = owners(c["tree_ptr"])
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
    eidx = ragged_arange(lens, tp[idx])
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
        "edge_route_links": cols["edge_route_links"][ragged_arange(rlens, rp[eidx])],
    }
    return out


def _is_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


__all__ = ["Tree", "TreeForm", "lower"]
