"""The simple certified bounds, provider ``simple``: ``ingress``, ``egress`` and ``latency``
(formulas in :mod:`collsynth.bound`), from the bytes every rank and pair must move
(:func:`demands`) and the alpha-shortest distances between ranks (:func:`alpha_distances`)."""

from __future__ import annotations

import numpy as np

from ..collective import Collective
from ..topology.model import Topology
from .model import Bound, register


def alpha_distances(topology: Topology) -> np.ndarray:
    """Alpha-shortest-path distance between every pair of ranks (through any nodes)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    t = topology
    n = t.num_nodes
    # parallel links: keep the smallest alpha per (src, dst)
    order = np.lexsort((t.link_alpha, t.link_dst, t.link_src))
    src, dst, alpha = t.link_src[order], t.link_dst[order], t.link_alpha[order]
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    graph = csr_matrix((alpha[keep], (src[keep], dst[keep])), shape=(n, n))
    dist = dijkstra(graph, directed=True, indices=t.compute_nodes)
    return dist[:, t.compute_nodes]


def demands(collective: Collective, size: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B_in per rank, B_out per rank, B[s, t] pair matrix) in bytes that any schedule must move.

    Non-reducing collectives: exactly the data a rank lacks / owns for others. Reductions: rank
    ``t`` must receive at least one chunk-sized value for every chunk it must end with that
    combines others' contributions, and rank ``s`` must send its contribution to every chunk it
    does not keep, so ``B(s, t)`` is the bytes of the chunks ``t`` must end with.
    """
    n = collective.num_ranks
    cb = collective.chunk_bytes(size)
    pair = np.zeros((n, n))
    post_r, post_c = collective.postcondition()
    if collective.reduces:
        per_rank = np.bincount(post_r, minlength=n).astype(np.float64) * cb
        pair[:] = per_rank[None, :]
        np.fill_diagonal(pair, 0.0)
        b_in = per_rank.copy()
        # s must send its contribution for every chunk some other rank ends with: every
        # chunk two or more ranks end with, and every chunk one rank other than s ends with
        key = np.sort(post_c.astype(np.int64) * n + post_r)
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]  # (np.unique hashes: slow)
        chunk_of, rank_of = key // n, key % n
        owners = np.bincount(chunk_of, minlength=collective.num_chunks)
        single = owners[chunk_of] == 1
        shared = int(np.count_nonzero(owners >= 2))
        mine = np.bincount(rank_of[single], minlength=n)
        b_out = (shared + int(np.count_nonzero(owners == 1)) - mine).astype(np.float64) * cb
        return b_in, b_out, pair
    src = collective.chunk_source
    mask = src[post_c] != post_r
    np.add.at(pair, (src[post_c[mask]], post_r[mask]), cb)
    b_in = pair.sum(axis=0)
    # egress: a source must send each of its chunks at least once if anyone else needs it
    needed = np.zeros(collective.num_chunks, dtype=bool)
    needed[post_c[mask]] = True
    b_out = np.bincount(src[needed], minlength=n).astype(np.float64) * cb
    return b_in, b_out, pair


@register("simple")
def simple_bounds(topology: Topology, collective: Collective, size: float) -> list[Bound]:
    t = topology
    n = t.num_ranks
    d = alpha_distances(t)
    b_in, b_out, pair = demands(collective, size)
    in_bw = np.array([t.in_bw(int(v)) for v in t.compute_nodes])
    out_bw = np.array([t.out_bw(int(v)) for v in t.compute_nodes])
    out: list[Bound] = []
    # ingress
    senders = pair > 0
    best_in = (0.0, -1)
    for r in range(n):
        if b_in[r] <= 0:
            continue
        srcs = (
            np.flatnonzero(senders[:, r]) if not collective.reduces else np.delete(np.arange(n), r)
        )
        first = float(d[srcs, r].min()) if len(srcs) else 0.0
        val = first + b_in[r] / in_bw[r]
        if val > best_in[0]:
            best_in = (val, r)
    if best_in[1] >= 0:
        out.append(
            Bound(
                "ingress",
                best_in[0],
                t.rank_name(best_in[1]),
                {"bytes": float(b_in[best_in[1]]), "bw": float(in_bw[best_in[1]])},
            )
        )
    best_out = (0.0, -1)
    for s in range(n):
        if b_out[s] <= 0:
            continue
        dsts = (
            np.flatnonzero(senders[s, :]) if not collective.reduces else np.delete(np.arange(n), s)
        )
        last = float(d[s, dsts].min()) if len(dsts) else 0.0
        val = b_out[s] / out_bw[s] + last
        if val > best_out[0]:
            best_out = (val, s)
    if best_out[1] >= 0:
        out.append(
            Bound(
                "egress",
                best_out[0],
                t.rank_name(best_out[1]),
                {"bytes": float(b_out[best_out[1]]), "bw": float(out_bw[best_out[1]])},
            )
        )
    rate = np.minimum(out_bw[:, None], in_bw[None, :])
    lat = np.where(pair > 0, pair / rate + d, 0.0)
    if np.any(pair > 0):
        s_idx, r_idx = np.unravel_index(int(np.argmax(lat)), lat.shape)
        s, r = int(s_idx), int(r_idx)
        pair_name = f"{t.rank_name(s)}->{t.rank_name(r)}"
        out.append(
            Bound(
                "latency",
                float(lat[s, r]),
                pair_name,
                {"alpha_path_s": float(d[s, r]), "bytes": float(pair[s, r])},
            )
        )
    return out
