"""Topology tables of the SCALE-CCL event loop: what it reads about the graph, as flat arrays.

They depend on the graph only (node kinds and link ends), not on bandwidths, delays or queues,
so re-plans of one topology share them (:func:`graph_tables` keeps a few).

Datacenters (*domains*) are the connected components of the GPU-only graph, numbered by their
lowest rank. Sets of datacenters are bit sets of ``dom_words`` int64 words of 63 bits (see
:mod:`.state`).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ...topology.model import Topology

#: Bits used per int64 word of a bit set (the sign bit stays clear).
WORD = 63

Graph = namedtuple(
    "Graph",
    [
        "n_ranks",
        "n_links",
        "n_nodes",
        "n_doms",
        "dom_words",
        # per link
        "link_src",  # tail node
        "link_dst",  # head node
        "link_src_gpu",  # 1 when the tail is a GPU
        "link_src_rank",  # rank of the tail (-1 for a switch/router)
        "link_dst_rank",  # rank of the head (-1 for a switch/router)
        "link_dst_gpu",  # 1 when the head is a GPU
        "link_dst_dom",  # datacenter of the head GPU (-1 for a switch/router)
        "link_doms",  # [link, word]: datacenters the link leads into, directly or via routers
        "queue_pos",  # position of a GPU link among the queues (GPU in-links) of its head
        # per rank
        "rank_dom",  # datacenter of each rank
        "gpu_out_ptr",
        "gpu_out",  # CSR: out-links of each rank's GPU
        # per node
        "queue_ptr",
        "queue_link",  # CSR: in-links from GPUs (Algorithm 1's queues)
        "queue_rank",  # sender rank of each queue (aligned with queue_link)
        "node_doms",  # [node, word]: datacenters reachable through switches/routers only
        "out_ptr",
        "out_link",  # CSR: out-links
        "entry_ptr",
        "entry_link",  # CSR: out-links into a GPU (datacenter entries)
        "hop_ptr",
        "hop_link",  # CSR: out-links into a switch/router
        "net_nodes",  # the switch/router nodes, ascending
        # capacities
        "max_route",  # links of the longest possible route (GPU, routers..., GPU)
        "max_entries",  # entries of the router Dijkstra's heap
        "max_queues",  # most queues towards one node
    ],
)

_CACHE: dict = {}


def graph_tables(t: Topology) -> Graph:
    """The :class:`Graph` of ``t``, shared by topologies with the same graph."""
    key = (t.kind_codes.tobytes(), t.link_src.tobytes(), t.link_dst.tobytes())
    hit = _CACHE.get(key)
    if hit is None:
        hit = _build(t)
        if len(_CACHE) >= 8:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = hit
    return hit


def domains(t: Topology) -> np.ndarray:
    """Datacenter of every rank: components of the GPU-only graph, by lowest rank."""
    n = t.num_ranks
    is_gpu = t.kind_codes == 0
    rank_of = t.rank_of_node
    parent = list(range(n))

    def find(x: int) -> int:
        """Root of ``x``'s component (with path halving)."""
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s, d in zip(t.link_src.tolist(), t.link_dst.tolist()):
        if is_gpu[s] and is_gpu[d]:
            a, b = find(int(rank_of[s])), find(int(rank_of[d]))
            if a != b:
                parent[max(a, b)] = min(a, b)
    roots = sorted({find(r) for r in range(n)})
    dom_id = {r: i for i, r in enumerate(roots)}
    return np.array([dom_id[find(r)] for r in range(n)], dtype=np.int64)


def _net_reach(t: Topology, dom: np.ndarray) -> np.ndarray:
    """[node, datacenter]: a switch/router reaches the datacenter through switches/routers."""
    is_gpu = t.kind_codes == 0
    rank_of = t.rank_of_node
    link_dst = t.link_dst.tolist()
    reach = np.zeros((t.num_nodes, int(dom.max()) + 1 if len(dom) else 0), dtype=bool)
    for x in np.flatnonzero(~is_gpu).tolist():
        seen = {x}
        todo = [x]
        while todo:
            u = todo.pop()
            for lid in t.out_links[u]:
                v = link_dst[lid]
                if is_gpu[v]:
                    reach[x, dom[rank_of[v]]] = True
                elif v not in seen:
                    seen.add(v)
                    todo.append(v)
    return reach


def _csr(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR form (pointers, values) of a list of int lists."""
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    flat = np.fromiter((x for r in rows for x in r), dtype=np.int64, count=int(ptr[-1]))
    return ptr, flat


def _masks(flags: np.ndarray, words: int) -> np.ndarray:
    """Rows of booleans as bit sets of ``words`` words of 63 bits."""
    rows, cols = flags.shape
    full = np.zeros((rows, words * WORD), dtype=np.int64)
    full[:, :cols] = flags
    weights = np.left_shift(np.int64(1), np.arange(WORD, dtype=np.int64))
    return (full.reshape(rows, words, WORD) * weights).sum(axis=2, dtype=np.int64)


def _build(t: Topology) -> Graph:
    """Derive the tables of ``t``."""
    i64 = np.int64
    m, n_nodes = len(t.links), t.num_nodes
    is_gpu = t.kind_codes == 0
    rank_of = t.rank_of_node.astype(i64)
    dom = domains(t)
    n_doms = int(dom.max()) + 1 if len(dom) else 0
    words = max(1, (n_doms + WORD - 1) // WORD)
    link_src, link_dst = t.link_src.astype(i64), t.link_dst.astype(i64)
    dst_gpu = is_gpu[link_dst]
    dst_rank = rank_of[link_dst]
    dst_dom = np.where(dst_gpu, dom[np.maximum(dst_rank, 0)], -1).astype(i64)
    node_doms = _masks(_net_reach(t, dom), words)
    own = np.zeros((m, n_doms), dtype=bool)
    own[np.flatnonzero(dst_gpu), dst_dom[dst_gpu]] = True
    link_doms = np.where(dst_gpu[:, None], _masks(own, words), node_doms[link_dst])
    out = [list(t.out_links[x]) for x in range(n_nodes)]
    queues = [[l for l in t.in_links[x] if is_gpu[link_src[l]]] for x in range(n_nodes)]
    queue_pos = np.full(m, -1, dtype=i64)
    for qs in queues:
        for i, q in enumerate(qs):
            queue_pos[q] = i
    gpu_out_ptr, gpu_out = _csr([out[int(x)] for x in t.compute_nodes])
    queue_ptr, queue_link = _csr(queues)
    out_ptr, out_link = _csr(out)
    entry_ptr, entry_link = _csr([[l for l in ls if dst_gpu[l]] for ls in out])
    hop_ptr, hop_link = _csr([[l for l in ls if not dst_gpu[l]] for ls in out])
    net_nodes = np.flatnonzero(~is_gpu).astype(i64)
    return Graph(
        n_ranks=t.num_ranks,
        n_links=m,
        n_nodes=n_nodes,
        n_doms=n_doms,
        dom_words=words,
        link_src=link_src,
        link_dst=link_dst,
        link_src_gpu=is_gpu[link_src].astype(np.uint8),
        link_src_rank=rank_of[link_src],
        link_dst_rank=dst_rank,
        link_dst_gpu=dst_gpu.astype(np.uint8),
        link_dst_dom=dst_dom,
        link_doms=np.ascontiguousarray(link_doms, dtype=i64),
        queue_pos=queue_pos,
        rank_dom=dom,
        gpu_out_ptr=gpu_out_ptr,
        gpu_out=gpu_out,
        queue_ptr=queue_ptr,
        queue_link=queue_link,
        queue_rank=rank_of[link_src][queue_link],
        node_doms=node_doms,
        out_ptr=out_ptr,
        out_link=out_link,
        entry_ptr=entry_ptr,
        entry_link=entry_link,
        hop_ptr=hop_ptr,
        hop_link=hop_link,
        net_nodes=net_nodes,
        max_route=len(net_nodes) + 2,
        max_entries=len(hop_link) + 2,
        max_queues=max(1, max(len(q) for q in queues)),
    )
