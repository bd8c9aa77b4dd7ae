"""The one topology model of collsynth: a validated, immutable directed multigraph.

Nodes have a kind:

* ``compute`` — a GPU/NPU. It holds buffers, stores and forwards (a chunk is forwarded only
  after it has fully arrived), may copy one received chunk to several out-links, and may reduce.
  Compute nodes are the *ranks* of a collective, numbered in node order.
* ``switch`` — no buffer, cut-through, no multicast, no reduction (NVSwitch, NIC, IB/Ethernet
  switch).
* ``router`` — a WAN border router: cut-through, no buffer (SCALE-CCL, Xiong et al., ACM
  INET4AI 2025, §3).

A link is directed: ``src -> dst`` with a bandwidth in bytes/s, a latency ``alpha`` in seconds, a
class label (``nvlink``, ``xgmi``, ``nvswitch``, ``pcie``, ``ib``, ``eth``, ``wan``, ...) and a
``lanes`` count (how many physical links of that class it bundles: a DGX-1 double NVLink is one
50 GB/s link with ``lanes=2``). Parallel links are allowed.

Build topologies with :class:`TopologyBuilder`; :meth:`TopologyBuilder.build` validates and
raises :class:`~collsynth.errors.CollsynthError` with one line naming the first problem.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import CollsynthError
from ..units import BANDWIDTH, LATENCY


class NodeKind(str, Enum):
    COMPUTE = "compute"
    SWITCH = "switch"
    ROUTER = "router"

    @classmethod
    def parse(cls, value: Any) -> NodeKind:
        try:
            return cls(str(value))
        except ValueError:
            raise CollsynthError(
                f"unknown node kind {value!r} (expected compute, switch or router)"
            ) from None


#: Size guards: beyond these a topology is almost surely a typo (and would exhaust memory).
MAX_NODES = 1 << 20
MAX_LINKS = 1 << 23
#: Link visits :meth:`Topology.summary` spends on the hop diameter (about a second).
DIAMETER_WORK = 60_000_000
#: Longest node, topology or link-class name, in characters.
MAX_NAME = 1024
#: Character categories no name may hold: control characters (NUL, newline, escape, ...),
#: lone surrogates (not encodable as UTF-8), line and paragraph separators.
_BAD_CATEGORIES = {"Cc", "Cs", "Zl", "Zp"}


def check_name(name: Any, what: str) -> str:
    """``name`` when it is a usable name: a non-empty string of at most :data:`MAX_NAME`
    characters, encodable as UTF-8, without control characters or line breaks.

    Names reach tables, JSON and XML outputs (MSCCL, MSCCL++) and error messages; one with a
    NUL, a newline or a lone surrogate would break them, so it is refused where it enters.
    """
    if not isinstance(name, str) or not name:
        raise CollsynthError(f"{what} {_short(name)} must be a non-empty string")
    if len(name) > MAX_NAME:
        raise CollsynthError(f"{what} {_short(name)} is longer than {MAX_NAME} characters")
    _refuse_bad_chars(name, what)
    return name


def _refuse_bad_chars(text: str, what: str) -> None:
    """One line naming the first control character, line break or surrogate in ``text``."""
    if text.isprintable():  # fast path: printable text passes
        return
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            raise CollsynthError(
                f"{what} {_short(text)} holds the character U+{ord(ch):04X} at position "
                f"{i} (no control characters, line breaks or lone surrogates in names)"
            )


def _short(value: Any) -> str:
    """``value`` for an error message: escaped (``ascii``), one line, at most ~60 characters."""
    text = ascii(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_strings(value: Any, what: str, labels: bool = False) -> None:
    """Every string in ``value`` (attributes, meta; keys too) encodable as UTF-8; with
    ``labels`` (node attributes) also free of control characters and line breaks.

    A lone surrogate (JSON ``"\\udc80"``) cannot be written to any output; it is refused on
    read instead of failing half-way through printing.
    """
    stack = [value]
    seen: set[int] = set()  # containers visited (YAML aliases may share or nest them)
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if isinstance(item, str):
            if labels:
                _refuse_bad_chars(item, f"{what}: value")
            if item.isascii():
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as e:
                raise CollsynthError(
                    f"{what}: {_short(item)} holds a lone surrogate U+{ord(item[e.start]):04X} "
                    f"(not encodable as UTF-8)"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


KIND_CODE = {NodeKind.COMPUTE: 0, NodeKind.SWITCH: 1, NodeKind.ROUTER: 2}


@dataclass(frozen=True)
class Node:
    name: str
    kind: NodeKind
    attrs: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def is_compute(self) -> bool:
        return self.kind is NodeKind.COMPUTE


@dataclass(frozen=True)
class Link:
    id: int
    src: int
    dst: int
    bw: float  # bytes / second
    alpha: float  # seconds
    cls: str = "link"
    lanes: int = 1


class Topology:
    """An immutable, validated topology. Use :class:`TopologyBuilder` to make one."""

    def __init__(self, name: str, nodes: list[Node], links: list[Link], meta: dict | None = None):
        self.name = name
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.links: tuple[Link, ...] = tuple(links)
        self.meta: dict = dict(meta or {})
        self._index = {n.name: i for i, n in enumerate(self.nodes)}
        n = len(self.nodes)
        self.kind_codes = np.array([KIND_CODE[nd.kind] for nd in self.nodes], dtype=np.int8)
        self.link_src = np.array([l.src for l in self.links], dtype=np.int64)
        self.link_dst = np.array([l.dst for l in self.links], dtype=np.int64)
        self.link_bw = np.array([l.bw for l in self.links], dtype=np.float64)
        self.link_alpha = np.array([l.alpha for l in self.links], dtype=np.float64)
        self.compute_nodes = np.flatnonzero(self.kind_codes == 0)
        self.rank_of_node = np.full(n, -1, dtype=np.int64)
        self.rank_of_node[self.compute_nodes] = np.arange(len(self.compute_nodes))
        out: list[list[int]] = [[] for _ in range(n)]
        inn: list[list[int]] = [[] for _ in range(n)]
        for l in self.links:
            out[l.src].append(l.id)
            inn[l.dst].append(l.id)
        self.out_links: tuple[tuple[int, ...], ...] = tuple(tuple(x) for x in out)
        self.in_links: tuple[tuple[int, ...], ...] = tuple(tuple(x) for x in inn)
        self.multicast_nodes = self._capability("multicast")
        self.reduce_nodes = self._capability("reduce")

    def _capability(self, attr: str) -> np.ndarray:
        """Which nodes have the switch capability ``attr`` (``multicast``: copy one incoming
        stream to several out-links, as NVLink SHARP and InfiniBand SHARP do; ``reduce``:
        combine several incoming streams into one). Only switches can; the value is a bool."""
        has = np.zeros(len(self.nodes), dtype=bool)
        for i, nd in enumerate(self.nodes):
            if attr not in nd.attrs:
                continue
            value = nd.attrs[attr]
            if not isinstance(value, bool):
                raise CollsynthError(f"node {nd.name!r}: attribute {attr!r} must be true or false")
            if value and nd.kind is not NodeKind.SWITCH:
                raise CollsynthError(
                    f"node {nd.name!r}: only a switch can have the {attr!r} capability"
                )
            has[i] = value
        return has

    @property
    def in_network(self) -> bool:
        """Some switch multicasts or reduces in flight."""
        return bool(self.multicast_nodes.any() or self.reduce_nodes.any())

    # ------------------------------------------------------------------ basic queries
    def __repr__(self) -> str:
        return (
            f"Topology({self.name!r}, compute={self.num_ranks}, "
            f"switches={self.num_switches}, routers={self.num_routers}, "
            f"links={len(self.links)})"
        )

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_ranks(self) -> int:
        return len(self.compute_nodes)

    @property
    def num_switches(self) -> int:
        return int(np.count_nonzero(self.kind_codes == 1))

    @property
    def num_routers(self) -> int:
        return int(np.count_nonzero(self.kind_codes == 2))

    def index(self, name: str) -> int:
        """Node index of ``name`` (raises CollsynthError if unknown)."""
        try:
            return self._index[name]
        except (KeyError, TypeError):
            raise CollsynthError(f"topology {self.name!r} has no node named {name!r}") from None

    def has_node(self, name: str) -> bool:
        return name in self._index

    def node_of_rank(self, rank: int) -> int:
        return int(self.compute_nodes[rank])

    def rank_name(self, rank: int) -> str:
        return self.nodes[self.node_of_rank(rank)].name

    def is_compute(self, node: int) -> bool:
        return self.kind_codes[node] == 0

    def links_between(self, src: int, dst: int) -> list[int]:
        """Ids of the (parallel) links ``src -> dst``."""
        return [lid for lid in self.out_links[src] if self.links[lid].dst == dst]

    def link_label(self, lid: int) -> str:
        l = self.links[lid]
        return f"link {lid} ({self.nodes[l.src].name}->{self.nodes[l.dst].name})"

    # ------------------------------------------------------------------ derived facts
    def out_bw(self, node: int) -> float:
        return float(sum(self.links[l].bw for l in self.out_links[node]))

    def in_bw(self, node: int) -> float:
        return float(sum(self.links[l].bw for l in self.in_links[node]))

    def classes(self) -> dict[str, int]:
        """Number of links per class label."""
        counts: dict[str, int] = {}
        for l in self.links:
            counts[l.cls] = counts.get(l.cls, 0) + 1
        return dict(sorted(counts.items()))

    def hop_distances(self, sources: Iterable[int] | None = None) -> np.ndarray:
        """BFS hop counts from each node in ``sources`` (default: compute nodes) to every node.

        Unreachable entries are ``-1``. Returns an array of shape (len(sources), num_nodes).
        """
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import shortest_path

        src = np.asarray(self.compute_nodes if sources is None else list(sources), dtype=np.int64)
        n = self.num_nodes
        adj = csr_matrix((np.ones(len(self.links)), (self.link_src, self.link_dst)), shape=(n, n))
        dist = shortest_path(adj, method="D", unweighted=True, indices=src)
        dist = np.atleast_2d(dist)
        out = np.where(np.isfinite(dist), dist, -1).astype(np.int64)
        return out

    @cached_property
    def hop_diameter(self) -> int:
        """Largest shortest-path hop count between two compute nodes (links counted).

        Exact, with memory linear in the topology (no ranks x nodes matrix); the time may
        grow to one BFS per compute node (see :meth:`hop_diameter_bounds`).
        """
        lo, hi = self.hop_diameter_bounds(None)
        assert lo == hi
        return lo

    def hop_diameter_bounds(self, work: int | None = DIAMETER_WORK) -> tuple[int, int]:
        """``(lo, hi)`` around :attr:`hop_diameter`; ``lo == hi`` when it is known exactly.

        Breadth-first searches from chosen nodes bound every compute node's eccentricity
        (the bounding-diameters method: ``ecc(v) <= d(v, w) + ecc(w)`` and
        ``ecc(v) >= ecc(w) - d(w, v)``), starting from the best-connected node (a hub gives
        the exact answer at once for stars and trees). The searches stop when the bounds
        meet or after about ``work`` link visits (``None``: no limit, always exact). Memory
        stays linear in nodes + links; the choice of nodes is deterministic.
        """
        if self.num_ranks < 2:
            return 0, 0
        cached = self.__dict__.get("hop_diameter")
        if cached is not None:
            return cached, cached
        return _diameter_bounds(self, work)

    @cached_property
    def fingerprint(self) -> str:
        """Short content hash of nodes and links (names, kinds, bandwidths, alphas, classes) and
        of the switches' multicast and reduce capabilities, where any switch has one."""
        payload: dict[str, Any] = {
            "nodes": [[n.name, n.kind.value] for n in self.nodes],
            "links": [
                [l.src, l.dst, repr(l.bw), repr(l.alpha), l.cls, l.lanes] for l in self.links
            ],
        }
        if self.in_network:
            payload["multicast"] = np.flatnonzero(self.multicast_nodes).tolist()
            payload["reduce"] = np.flatnonzero(self.reduce_nodes).tolist()
        blob = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def summary(self) -> dict:
        """The facts ``collsynth topo show --json`` prints."""
        per_node = []
        for r, node_id in enumerate(self.compute_nodes):
            node = int(node_id)
            per_node.append(
                {
                    "rank": r,
                    "name": self.nodes[node].name,
                    "out_bw": self.out_bw(node),
                    "in_bw": self.in_bw(node),
                    "out_links": len(self.out_links[node]),
                    "in_links": len(self.in_links[node]),
                }
            )
        kinds = {k.value: 0 for k in NodeKind}
        for nd in self.nodes:
            kinds[nd.kind.value] += 1
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "compute_nodes": self.num_ranks,
            "switches": self.num_switches,
            "routers": self.num_routers,
            "nodes": self.num_nodes,
            "links": len(self.links),
            "links_by_class": self.classes(),
            "total_link_bw": float(self.link_bw.sum()),
            **_diameter_fields(self),
            "per_node": per_node,
            "meta": self.meta,
        }


def _diameter_fields(topo: Topology) -> dict[str, Any]:
    """``hop_diameter`` (``None`` when not known exactly within the work limit) and, only
    then, ``hop_diameter_bounds`` ``[lo, hi]``."""
    lo, hi = topo.hop_diameter_bounds()
    if lo == hi:
        return {"hop_diameter": lo}
    return {"hop_diameter": None, "hop_diameter_bounds": [lo, hi]}


def _diameter_bounds(topo: Topology, work: int | None) -> tuple[int, int]:
    """See :meth:`Topology.hop_diameter_bounds`."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    n = topo.num_nodes
    ones = np.ones(len(topo.links))
    fwd = csr_matrix((ones, (topo.link_src, topo.link_dst)), shape=(n, n))
    fwd.sum_duplicates()
    fwd.data = np.ones_like(fwd.data)  # parallel links count once
    bwd = fwd.T.tocsr()
    symmetric = (fwd != bwd).nnz == 0
    comp = topo.compute_nodes
    cost = (n + len(topo.links)) * (1 if symmetric else 2)

    def bfs(graph: Any, start: int) -> np.ndarray:
        d = shortest_path(graph, method="D", unweighted=True, indices=[start])[0]
        return np.where(np.isfinite(d), d, np.inf)

    r = len(comp)
    hi = np.full(r, np.inf)  # upper bound of each rank's eccentricity (to compute nodes)
    lo_v = np.zeros(r)  # lower bound of each rank's eccentricity
    exact = np.zeros(r, dtype=bool)
    lower = 0.0
    spent = 0
    degree = np.bincount(topo.link_src, minlength=n) + np.bincount(topo.link_dst, minlength=n)
    probes: list[int] = [int(np.argmax(degree))]  # the best-connected node first
    turn = 0
    while True:
        w = probes.pop() if probes else -1
        if w < 0:
            open_ = ~exact & (hi > lower)
            if not open_.any():
                break
            if turn % 2 == 0:  # the rank that may be farthest of all
                pick = np.where(open_, hi, -np.inf)
            else:  # the rank known to be far: raises the lower bound
                pick = np.where(open_, lo_v, -np.inf)
            turn += 1
            w = int(comp[int(np.argmax(pick))])
        if work is not None and spent + cost > work and spent > 0:
            break
        spent += cost
        d_from = bfs(fwd, w)  # d(w, .)
        d_to = d_from if symmetric else bfs(bwd, w)  # d(., w)
        ecc_out = float(d_from[comp].max())  # ecc of w to the compute nodes
        ecc_in = float(d_to[comp].max())
        if topo.kind_codes[w] == 0:
            k = int(topo.rank_of_node[w])
            hi[k] = lo_v[k] = ecc_out
            exact[k] = True
            lower = max(lower, ecc_out, ecc_in)
            lo_v = np.maximum(lo_v, np.maximum(d_to[comp], ecc_out - d_from[comp]))
        hi = np.minimum(hi, d_to[comp] + ecc_out)
        lower = max(lower, float(lo_v.max()))
        if float(hi.max()) <= lower:
            break
    upper = float(hi.max())
    if not np.isfinite(upper):
        upper = float(n - 1)
    lo_i, hi_i = int(lower), int(max(upper, lower))
    return lo_i, hi_i


class TopologyBuilder:
    """Accumulates nodes and links, then validates them into a :class:`Topology`.

    Nodes may be referred to by name or index in :meth:`link`.
    """

    def __init__(self, name: str, meta: dict | None = None):
        self.name = check_name(name, "topology name")
        self.meta: dict = dict(meta or {})
        check_strings(self.meta, f"topology {name!r} meta")
        self._nodes: list[Node] = []
        self._index: dict[str, int] = {}
        self._links: list[tuple[Any, Any, Any, Any, Any, Any]] = []

    # nodes -------------------------------------------------------------------------
    def node(self, name: str, kind: NodeKind | str = NodeKind.COMPUTE, **attrs: Any) -> int:
        if len(self._nodes) >= MAX_NODES:
            raise CollsynthError(f"topology {self.name!r} is too large (over {MAX_NODES} nodes)")
        check_name(name, "node name")
        if name in self._index:
            raise CollsynthError(f"duplicate node name {_short(name)}")
        kind = kind if isinstance(kind, NodeKind) else NodeKind.parse(kind)
        if attrs:
            check_strings(attrs, f"node {name!r} attributes", labels=True)
        self._index[name] = len(self._nodes)
        self._nodes.append(Node(name, kind, dict(attrs)))
        return self._index[name]

    def compute(self, name: str, **attrs: Any) -> int:
        return self.node(name, NodeKind.COMPUTE, **attrs)

    def switch(self, name: str, **attrs: Any) -> int:
        return self.node(name, NodeKind.SWITCH, **attrs)

    def router(self, name: str, **attrs: Any) -> int:
        return self.node(name, NodeKind.ROUTER, **attrs)

    def __len__(self) -> int:
        return len(self._nodes)

    # links -------------------------------------------------------------------------
    def link(
        self,
        src: int | str,
        dst: int | str,
        bw: float,
        alpha: float = 0.0,
        cls: str = "link",
        lanes: int = 1,
    ) -> None:
        """Add one directed link ``src -> dst`` (checked in :meth:`build`)."""
        if len(self._links) >= MAX_LINKS:
            raise CollsynthError(f"topology {self.name!r} is too large (over {MAX_LINKS} links)")
        self._links.append((src, dst, bw, alpha, cls, lanes))

    def bilink(
        self,
        a: int | str,
        b: int | str,
        bw: float,
        alpha: float = 0.0,
        cls: str = "link",
        lanes: int = 1,
    ) -> None:
        """Add a link each way between ``a`` and ``b`` with the same parameters."""
        self.link(a, b, bw, alpha, cls, lanes)
        self.link(b, a, bw, alpha, cls, lanes)

    # build -------------------------------------------------------------------------
    def _resolve(self, ref: Any, lid: int, end: str) -> int:
        if isinstance(ref, bool):
            raise CollsynthError(f"link {lid}: {end} {ref!r} is not a node")
        if isinstance(ref, (int, np.integer)):
            if 0 <= int(ref) < len(self._nodes):
                return int(ref)
            raise CollsynthError(f"link {lid}: {end} node index {ref} does not exist")
        if isinstance(ref, str):
            if ref in self._index:
                return self._index[ref]
            raise CollsynthError(f"link {lid}: {end} {ref!r} is not a known node")
        raise CollsynthError(f"link {lid}: {end} {ref!r} is not a node name")

    def build(self) -> Topology:
        links: list[Link] = []
        bw_lo, bw_hi, alpha_hi = BANDWIDTH.lo, BANDWIDTH.hi, LATENCY.hi
        classes: set[str] = set()  # link classes already checked
        for lid, (s, d, bw, alpha, cls, lanes) in enumerate(self._links):
            src = self._resolve(s, lid, "source")
            dst = self._resolve(d, lid, "destination")
            if (  # the common case, checked without building messages
                src != dst
                and type(bw) is float
                and bw_lo <= bw <= bw_hi
                and type(alpha) is float
                and 0.0 <= alpha <= alpha_hi
                and type(cls) is str
                and cls in classes
                and type(lanes) is int
                and lanes >= 1
            ):
                links.append(Link(lid, src, dst, bw, alpha, cls, lanes))
                continue
            label = f"link {lid} ({self._nodes[src].name}->{self._nodes[dst].name})"
            if src == dst:
                raise CollsynthError(f"{label}: self loop")
            bw = BANDWIDTH.check(_number(bw, f"{label}: bandwidth"), f"{label}: bandwidth")
            alpha = LATENCY.check(_number(alpha, f"{label}: alpha"), f"{label}: alpha")
            classes.add(check_name(cls, f"{label}: class"))
            if isinstance(lanes, bool) or not isinstance(lanes, (int, np.integer)) or lanes < 1:
                raise CollsynthError(f"{label}: lanes {lanes!r} must be a positive integer")
            links.append(Link(lid, src, dst, float(bw), float(alpha), cls, int(lanes)))
        topo = Topology(self.name, self._nodes, links, self.meta)
        _check_connectivity(topo)
        return topo


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CollsynthError(f"{what} {value!r} is not a number")
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        return math.inf if value > 0 else -math.inf


def _reach(topo: Topology, start: int, reverse: bool) -> np.ndarray:
    seen = np.zeros(topo.num_nodes, dtype=bool)
    seen[start] = True
    q = deque([start])
    adj = topo.in_links if reverse else topo.out_links
    while q:
        u = q.popleft()
        for lid in adj[u]:
            l = topo.links[lid]
            v = l.src if reverse else l.dst
            if not seen[v]:
                seen[v] = True
                q.append(v)
    return seen


def _check_connectivity(topo: Topology) -> None:
    if topo.num_ranks < 2:
        raise CollsynthError(
            f"topology {topo.name!r} has {topo.num_ranks} compute node(s); at least 2 are needed"
        )
    c0 = int(topo.compute_nodes[0])
    fwd = _reach(topo, c0, reverse=False)
    for c in topo.compute_nodes:
        if not fwd[c]:
            raise CollsynthError(
                f"compute node {topo.nodes[c0].name!r} cannot reach compute node "
                f"{topo.nodes[int(c)].name!r}"
            )
    bwd = _reach(topo, c0, reverse=True)
    for c in topo.compute_nodes:
        if not bwd[c]:
            raise CollsynthError(
                f"compute node {topo.nodes[int(c)].name!r} cannot reach compute node "
                f"{topo.nodes[c0].name!r}"
            )
