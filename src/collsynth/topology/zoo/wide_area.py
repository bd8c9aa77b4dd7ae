"""The zoo's multi-datacenter WAN: SCALE-CCL's model (Xiong et al., ACM INET4AI 2025).

GPUs in datacenters on random intra-DC graphs, one border router per datacenter, a full mesh of
WAN links. Bandwidths are bytes/s per direction, alphas seconds.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..model import Topology, TopologyBuilder
from ..registry import Param, zoo
from .common import GB, US, fail


def wan_intra_links(gpus: int, connectivity: float) -> int:
    """Number of intra-DC GPU pairs linked: round(P * G(G-1)/2), at least G-1, at most G(G-1)/2."""
    full = gpus * (gpus - 1) // 2
    return min(full, max(gpus - 1, int(round(connectivity * full))))


def _random_connected_pairs(n: int, m: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """m unordered pairs over n nodes: a random spanning tree plus random extra pairs."""
    perm = rng.permutation(n)
    tree: set[tuple[int, int]] = set()
    for i in range(1, n):
        u, v = int(perm[i]), int(perm[int(rng.integers(0, i))])
        tree.add((min(u, v), max(u, v)))
    rest = [p for p in itertools.combinations(range(n), 2) if p not in tree]
    extra: np.ndarray | list[int] = (
        rng.permutation(len(rest))[: m - len(tree)] if m > len(tree) else []
    )
    return sorted(tree | {rest[int(k)] for k in extra})


@zoo(
    "wan",
    dcs=Param("int", 3, "number of datacenters", min=1, max=256),
    gpus=Param("int", 8, "GPUs per datacenter", min=1, max=4096),
    connectivity=Param(
        "float", 0.5, "intra-DC connectivity: linked GPU pairs / all GPU pairs", min=0, max=1
    ),
    km=Param("float", 150.0, "WAN distance between border routers in km", min=0),
    seed=Param("int", 0, "seed of the random intra-DC wiring", min=0),
    gateways=Param(
        "int", None, "GPUs per DC linked to the border router (gpu0 ...); default all", min=1
    ),
    gpu_bw=Param("bw", 50 * GB, "bandwidth of each intra-DC GPU <-> GPU link"),
    gpu_alpha=Param("time", 0.7 * US, "latency of each intra-DC GPU <-> GPU link"),
    router_bw=Param("bw", 12.5 * GB, "bandwidth of each GPU <-> border router link"),
    router_alpha=Param("time", 0.7 * US, "latency of each GPU <-> border router link (assumption)"),
    wan_bw=Param("bw", 12.5 * GB, "bandwidth of each router <-> router WAN link"),
    per_km=Param("time", 5 * US, "WAN propagation delay per km"),
)
def wan(
    dcs: int,
    gpus: int,
    connectivity: float,
    km: float,
    seed: int,
    gateways: int | None,
    gpu_bw: float,
    gpu_alpha: float,
    router_bw: float,
    router_alpha: float,
    wan_bw: float,
    per_km: float,
) -> Topology:
    """SCALE-CCL multi-datacenter model: random intra-DC GPU graphs, border routers, WAN full mesh.

    Source: SCALE-CCL (Xiong et al., ACM INET4AI 2025) §3 (GPUs and border routers, WAN abstracted
    as direct router-to-router links; routers cut-through) and §5 (defaults: intra-DC GPU-GPU
    links 50 GB/s and 0.7 us; GPU-router and WAN links 12.5 GB/s; connectivity 0.5 = linked /
    all intra-DC pairs; 150 km WAN = 0.75 ms, i.e. 5 us per km). Defaults: dcs=3, gpus=8,
    connectivity=0.5, km=150, seed=0, all GPUs are gateways. The number of DCs and GPUs per DC
    and the GPU-router latency (0.7 us) are our assumptions (the paper does not state them).

    Per DC: round(P * G(G-1)/2) (at least G-1, at most G(G-1)/2) GPU pairs are linked both ways
    (class ``nvlink``): a uniformly random recursive spanning tree plus uniformly random extra
    pairs, drawn from ``numpy.random.default_rng(seed)`` DC after DC, so each DC is connected
    and the result is deterministic. One border router ``dc{d}.router`` (kind router, role
    ``router``) per DC, linked both ways to the first ``gateways`` GPUs (class ``eth``). Routers
    form a full mesh of WAN links (class ``wan``) with alpha = km * per_km.
    Nodes: ``dc{d}.gpu{j}`` (attrs ``dc``, ``local``), routers with attr ``dc``.
    """
    if gateways is None:
        gateways = gpus
    if gateways > gpus:
        fail(f"wan parameter gateways {gateways} must be at most gpus ({gpus})")
    rng = np.random.default_rng(seed)
    m = wan_intra_links(gpus, connectivity)
    b = TopologyBuilder(
        f"wan_d{dcs}g{gpus}", meta={"source": "SCALE-CCL (Xiong et al., ACM INET4AI 2025) §3, §5"}
    )
    routers = []
    for d in range(dcs):
        g = [b.compute(f"dc{d}.gpu{j}", dc=d, local=j) for j in range(gpus)]
        for u, v in _random_connected_pairs(gpus, m, rng):
            b.bilink(g[u], g[v], gpu_bw, gpu_alpha, "nvlink")
        r = b.router(f"dc{d}.router", dc=d, role="router")
        for x in g[:gateways]:
            b.bilink(x, r, router_bw, router_alpha, "eth")
        routers.append(r)
    for d, e in itertools.combinations(range(dcs), 2):
        b.bilink(routers[d], routers[e], wan_bw, km * per_km, "wan")
    return b.build()
