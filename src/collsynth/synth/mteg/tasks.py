"""MTEGCCA's multicast tasks (the paper's §2.2 steps 1–2): which collectives it plans
(:data:`SUPPORTED`), the decomposition of a collective into one task per chunk
(:func:`decompose`) and their planning order (largest data first, ties by round, then by the
source's place in the farthest-first order of :func:`spread_order`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...topology.model import Topology

#: Collectives MTEGCCA handles: every one whose chunks travel from one source to destinations.
SUPPORTED = {
    CollKind.ALLGATHER,
    CollKind.BROADCAST,
    CollKind.CUSTOM,
    CollKind.GATHER,
    CollKind.SCATTER,
    CollKind.ALLTOALL,
}


@dataclass(frozen=True)
class Task:
    """One multicast: chunk ``chunk`` from rank ``source`` to ``dests`` (the paper's step 1)."""

    chunk: int
    source: int
    dests: tuple[int, ...]
    volume: float  # bytes delivered: chunk bytes x destinations
    round: int  # position of the chunk among its source's chunks
    spread: int  # the source's position in the farthest-first order of ranks

    @property
    def key(self) -> tuple:
        """The paper's step 2: largest data first; ties by round, farthest-first source, chunk
        id."""
        return (-self.volume, self.round, self.spread, self.chunk)


def spread_order(topology: Topology) -> list[int]:
    """Ranks in farthest-first order: rank 0, then repeatedly the rank whose hop distance to
    the ranks already listed is largest (ties: lowest rank).

    Used to break ties between equally large broadcasts so that consecutive trees start in
    different parts of the topology (e.g. alternate chassis) instead of one region claiming
    every link near it first.
    """
    n = topology.num_ranks
    dist = topology.hop_distances()[:, topology.compute_nodes].astype(np.float64)
    dist = np.where(dist < 0, np.inf, dist)
    sym = np.minimum(dist, dist.T)
    order = [0]
    near = sym[0].copy()
    chosen = np.zeros(n, dtype=bool)
    chosen[0] = True
    for _ in range(n - 1):
        cand = np.where(chosen, -1.0, near)
        r = int(np.argmax(cand))  # first maximum: lowest rank among ties
        order.append(r)
        chosen[r] = True
        near = np.minimum(near, sym[r])
    return order


def decompose(
    collective: Collective, chunk_bytes: float, spread: list[int] | None = None
) -> list[Task]:
    """Multicast tasks of a non-reducing collective, in planning order (the paper's steps 1–2).

    Broadcast: one task per chunk. AllGather: one broadcast per (source, chunk), ``C`` chunks
    per rank. Multicast (custom collectives), Gather, Scatter, AllToAll: one task per chunk to
    its destination set. Ties in size are broken by the chunk's round at its source (its
    position among the source's chunks; for AllToAll its destination's offset from the source),
    then by the source's position in ``spread``, then by chunk id.
    """
    if collective.kind not in SUPPORTED:
        raise CollsynthError(
            f"mteg does not support {collective.kind.value} (it plans copies only, no reductions)"
        )
    src = collective.chunk_source
    pos = list(range(collective.num_ranks))
    if spread is not None:
        for i, r in enumerate(spread):
            pos[r] = i
    seen: dict[int, int] = {}
    tasks = []
    n, cpr = collective.num_ranks, collective.chunks_per_rank
    shift = collective.kind is CollKind.ALLTOALL
    for c in range(collective.num_chunks):
        s = int(src[c])
        dests = tuple(d for d in collective.destinations(c) if d != s)
        r = seen.get(s, 0)
        seen[s] = r + 1
        if shift:
            # AllToAll: rank s's chunks to s+1, s+2, ... first (a shift pattern), so that equal
            # rounds do not all aim at the same destination
            d = (c // cpr) % n
            r = ((d - s) % n) * cpr + c % cpr
        if dests:
            tasks.append(Task(c, s, dests, chunk_bytes * len(dests), r, pos[s]))
    tasks.sort(key=lambda t: t.key)
    return tasks
