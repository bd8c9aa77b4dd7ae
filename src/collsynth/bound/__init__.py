"""Lower bounds on the completion time of any schedule (optimality certificates).

Every provider returns a time that *no* schedule on the topology can beat, under the simulator's
model (links carry at most their bandwidth, data cannot arrive before the alpha of its path).
``bound(topology, collective, size)`` reports the largest one and which kind binds.

Simple certified bounds (this module):

* ``ingress`` — rank ``t`` must receive ``B_in(t)`` bytes at no more than its total in-bandwidth,
  and nothing arrives before the alpha-closest source can reach it:
  ``T >= min_s d_alpha(s, t) + B_in(t) / in_bw(t)``.
* ``egress`` — rank ``s`` must send ``B_out(s)`` bytes at no more than its out-bandwidth, and the
  last byte still has to reach the alpha-closest rank that needs it:
  ``T >= B_out(s) / out_bw(s) + min_t d_alpha(s, t)``.
* ``latency`` — for every (source, destination) pair that must exchange ``B(s, t)`` bytes, the
  last of those bytes leaves ``s`` no earlier than ``B(s, t) / min(out_bw(s), in_bw(t))`` and then
  travels at least the alpha-shortest path:
  ``T >= B(s, t) / min(out_bw(s), in_bw(t)) + d_alpha(s, t)``.

* ``transmissions`` (AllReduce) — every byte of the result must be transmitted rank to rank at
  least ``2(N-1)`` times: once the first rank holds the complete sum, each of the other ``N-1``
  ranks has sent (its contribution had to leave it before) and each still has to receive after
  (nobody held the complete value before), two disjoint sets of ``N-1`` transmissions. This is
  the directed gossip bound (Harary and Schwenk, "The communication problem on graphs and
  digraphs", J. Franklin Inst. 1974), which gives Patarasuk and Yuan's bandwidth bound for
  AllReduce ("Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC
  2009) when every rank has the same bandwidth ``b``: ``2(N-1) M / (N b)``. In general, all
  ranks together send (and receive) ``2(N-1) M`` bytes, so ``T`` is at least the larger of
  ``2(N-1) M / Σ_r out_bw(r)`` and ``2(N-1) M / Σ_r in_bw(r)``, plus the smallest alpha between
  two ranks (the last byte still travels). The same holds between groups (chassis, servers,
  datacenters): a group merges its members' partial sums for free, so every byte crosses
  between ``m`` groups ``2(m-1)`` times, over the groups' outside links. It holds because
  switches only forward: a switch
  that reduces or multicasts (SHARP, NVLS) would need its own bound. On symmetric fabrics it
  equals the ReduceScatter bound plus the AllGather bound, so there ReduceScatter followed by
  AllGather is optimal.

``B_in``/``B_out``/``B`` per collective (``M`` = size, ``n`` ranks) are in :func:`demands`.
More providers register with :func:`register` from modules named by ``collsynth.bounds`` entry
points (:mod:`collsynth.plugins`): collsynth's own exact cut bounds (:mod:`.cut`) and any
plugin's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..collective import Collective
from ..errors import CollsynthError
from ..plugins import load_group
from ..topology.model import Topology


@dataclass
class Bound:
    kind: str
    time_s: float
    witness: str = ""  # the rank, pair or cut that binds
    detail: dict = field(default_factory=dict)


@dataclass
class BoundResult:
    size: float
    bounds: list[Bound]

    @property
    def best(self) -> Bound:
        return max(self.bounds, key=lambda b: b.time_s)

    @property
    def time_s(self) -> float:
        return self.best.time_s

    @property
    def kind(self) -> str:
        return self.best.kind

    def algbw(self) -> float:
        return self.size / self.time_s if self.time_s > 0 else float("inf")

    def to_dict(self) -> dict:
        b = self.best
        return {
            "size_bytes": self.size,
            "time_s": b.time_s,
            "algbw_Bps": self.algbw(),
            "kind": b.kind,
            "witness": b.witness,
            "bounds": [
                {"kind": x.kind, "time_s": x.time_s, "witness": x.witness, **x.detail}
                for x in self.bounds
            ],
        }


Provider = Callable[[Topology, Collective, float], list[Bound]]
PROVIDERS: dict[str, Provider] = {}


def register(name: str):
    def deco(func: Provider) -> Provider:
        PROVIDERS[name] = func
        return func

    return deco


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


@register("transmissions")
def transmission_bounds(topology: Topology, collective: Collective, size: float) -> list[Bound]:
    """AllReduce: ``2(m-1)`` transmissions of every byte between ``m`` groups over all the
    groups' egress (and ingress) bandwidth together, plus the smallest alpha between two ranks:
    for groups of one rank each, and for the chassis/dc/pod/server groups of the topology's
    node attributes (a group merges its members' partial sums for free, so the gossip argument
    holds between groups). The tightest one."""
    from ..collective import CollKind

    t = topology
    n = t.num_ranks
    if collective.kind is not CollKind.ALLREDUCE or n < 2 or t.in_network:
        return []  # (a switch that reduces or copies carries one stream for many)
    d = alpha_distances(t)
    alpha = float(d[~np.eye(n, dtype=bool)].min())
    best: Bound | None = None
    for attr, regions in groupings(t):
        m = len(regions)
        out_bw = sum(_region_bw(t, r, leaving=True) for r in regions)
        in_bw = sum(_region_bw(t, r, leaving=False) for r in regions)
        bw, side = (out_bw, "egress") if out_bw <= in_bw else (in_bw, "ingress")
        if bw <= 0:
            continue
        total = 2.0 * (m - 1) * size
        what = "every rank's" if attr == "rank" else f"every {attr}'s"
        b = Bound(
            "transmissions",
            total / bw + alpha,
            f"{what} {side}",
            {"bytes": total, "bw": float(bw), "groups": m, "transmissions_per_byte": 2 * (m - 1)},
        )
        if best is None or b.time_s > best.time_s:
            best = b
    return [best] if best is not None else []


def groupings(t: Topology) -> list[tuple[str, list[set[int]]]]:
    """Disjoint node sets to count transmissions between: one per rank, and per value of each
    grouping attribute that every compute node has (a set: the compute nodes and switches with
    that value)."""
    out: list[tuple[str, list[set[int]]]] = [("rank", [{int(v)} for v in t.compute_nodes])]
    for attr in ("chassis", "server", "pod", "dc", "group"):
        if not all(attr in t.nodes[int(v)].attrs for v in t.compute_nodes):
            continue
        groups: dict[str, set[int]] = {}
        for v in range(t.num_nodes):
            a = t.nodes[v].attrs.get(attr)
            if a is not None:
                groups.setdefault(repr(a), set()).add(v)
        if len(groups) >= 2:
            out.append((attr, list(groups.values())))
    return out


def _region_bw(t: Topology, region: set[int], leaving: bool) -> float:
    """Bandwidth of the links leaving (or entering) ``region``."""
    inside = np.zeros(t.num_nodes, dtype=bool)
    inside[list(region)] = True
    cross = (
        inside[t.link_src] & ~inside[t.link_dst]
        if leaving
        else (~inside[t.link_src] & inside[t.link_dst])
    )
    return float(t.link_bw[cross].sum())


#: Most ranks :func:`bound` takes: its demand and distance matrices are ranks x ranks.
MAX_BOUND_RANKS = 4096


def bound(
    topology: Topology, collective: Collective, size: float, providers: list[str] | None = None
) -> BoundResult:
    """All registered lower bounds for moving ``size`` bytes; ``.best`` binds."""
    if not (np.isfinite(size) and size > 0):
        raise CollsynthError(f"size {size!r} must be a positive number of bytes")
    if collective.num_ranks != topology.num_ranks:
        raise CollsynthError(
            f"collective has {collective.num_ranks} ranks but the topology has "
            f"{topology.num_ranks} compute nodes"
        )
    if collective.num_ranks > MAX_BOUND_RANKS:
        r = collective.num_ranks
        raise CollsynthError(
            f"bound: {r} ranks is more than {MAX_BOUND_RANKS} (the bounds keep rank x rank "
            f"demand and distance matrices: {r * r * 8 / 2**30:.1f} GiB each)"
        )
    load_group("collsynth.bounds")
    names = providers or list(PROVIDERS)
    bounds: list[Bound] = []
    for name in names:
        if name not in PROVIDERS:
            raise CollsynthError(f"unknown bound {name!r} (known: {', '.join(PROVIDERS)})")
        bounds.extend(PROVIDERS[name](topology, collective, size))
    if not bounds:
        bounds.append(Bound("trivial", 0.0, ""))
    return BoundResult(float(size), bounds)
