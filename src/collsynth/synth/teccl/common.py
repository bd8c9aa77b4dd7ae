"""Shared model types: commodities and epoch operations, the linear model (:class:`Model`,
built block by block with :class:`RowBlocks`), epoch distances and the demand of unicast
collectives. The cut bound is in :mod:`.cut_bound`, the solver in :mod:`.highs`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...topology.model import Topology

INF = np.iinfo(np.int64).max // 4


@dataclass
class EpochOp:
    """A GPU-to-GPU transfer planned in epochs: the unit the MILP/LP solutions decode into."""

    chunk: int
    src: int  # rank
    dst: int  # rank
    route: tuple[int, ...]  # link ids (through switches only)
    k0: int  # epoch of the first hop
    arrive: int  # epoch from which the receiver may use it
    dep: int = -1  # index of the EpochOp that delivered the data to src
    part: tuple[int, int, int] | None = None
    group: int = -1  # a multicast: transfers a switch copies from one stream (-1: none)


@dataclass
class Commodities:
    """Multicast commodities of the MILP: one per chunk (source rank, destination ranks)."""

    chunk: np.ndarray
    src: np.ndarray
    dests: list[np.ndarray]

    @classmethod
    def of(cls, collective: Collective) -> Commodities:
        srcs = collective.chunk_source
        chunks, s_out, d_out = [], [], []
        for c in range(collective.num_chunks):
            s = int(srcs[c])
            d = np.array([x for x in collective.destinations(c) if x != s], dtype=np.int64)
            if len(d):
                chunks.append(c)
                s_out.append(s)
                d_out.append(d)
        return cls(np.array(chunks, dtype=np.int64), np.array(s_out, dtype=np.int64), d_out)

    def __len__(self) -> int:
        return len(self.chunk)


def unicast_demand(collective: Collective) -> tuple[np.ndarray, list[list[list[int]]]]:
    """(dem[s, d] in chunks, chunk ids per (s, d)) for collectives whose chunks each have one
    destination (AllToAll, Scatter, Gather, demand matrices)."""
    n = collective.num_ranks
    dem = np.zeros((n, n))
    ids: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(n)]
    srcs = collective.chunk_source
    for c in range(collective.num_chunks):
        s = int(srcs[c])
        dsts = [x for x in collective.destinations(c) if x != s]
        if len(dsts) > 1:
            raise CollsynthError(
                f"teccl mode=lp needs one destination per chunk; chunk {c} of "
                f"{collective.describe()} has {len(dsts)} (use mode=milp)"
            )
        if dsts:
            dem[s, dsts[0]] += 1
            ids[s][dsts[0]].append(c)
    return dem, ids


def epoch_distances(topology: Topology, delay: np.ndarray) -> np.ndarray:
    """Fewest epochs from every node to every node along links with the given delays
    (INF where unreachable). Delays may be 0 (cut-through switch hops)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    t = topology
    n = t.num_nodes
    w = delay.astype(np.float64) + 1e-6  # keep zero-delay links as edges
    order = np.lexsort((w, t.link_dst, t.link_src))
    src, dst, ww = t.link_src[order], t.link_dst[order], w[order]
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    g = csr_matrix((ww[keep], (src[keep], dst[keep])), shape=(n, n))
    dist = dijkstra(g, directed=True)
    out = np.where(np.isfinite(dist), np.round(dist), INF)
    return out.astype(np.int64)


def to_gpu_distance(topology: Topology, delay: np.ndarray) -> np.ndarray:
    """Fewest epochs from each node to reach some compute node (0 for compute nodes)."""
    t = topology
    r = np.where(t.kind_codes == 0, 0, INF).astype(np.int64)
    sw_src = t.kind_codes[t.link_src] != 0
    ls, ld, dd = t.link_src[sw_src], t.link_dst[sw_src], delay[sw_src]
    for _ in range(t.num_nodes):
        cand = np.where(r[ld] >= INF, INF, r[ld] + dd)
        new = r.copy()
        np.minimum.at(new, ls, cand)
        if np.array_equal(new, r):
            break
        r = new
    return r


def drop_loops(t: Topology, route: tuple[int, ...]) -> tuple[int, ...]:
    """``route`` without the loops it makes (a node visited twice: the links between)."""
    nodes = [int(t.link_src[route[0]])]
    out: list[int] = []
    for l in route:
        nxt = int(t.link_dst[l])
        if nxt in nodes:
            i = nodes.index(nxt)
            nodes = nodes[: i + 1]
            out = out[:i]
        else:
            nodes.append(nxt)
            out.append(l)
    return tuple(out)


class RowBlocks:
    """Constraint rows gathered block by block (COO triplets plus row bounds), row ids offset
    as blocks are added; :meth:`model` turns them into a :class:`Model`."""

    def __init__(self) -> None:
        self.rows: list = []
        self.cols: list = []
        self.vals: list = []
        self.row_lower: list = []
        self.row_upper: list = []
        self.num_rows = 0

    def add(self, rows, cols, vals, lower, upper, count: int) -> None:
        """``count`` rows: entries ``(rows + offset, cols, vals)``, bounds ``lower <= row <=
        upper``."""
        self.rows.append(np.asarray(rows, dtype=np.int64) + self.num_rows)
        self.cols.append(np.asarray(cols, dtype=np.int64))
        self.vals.append(np.asarray(vals, dtype=np.float64))
        self.row_lower.append(np.broadcast_to(np.asarray(lower, dtype=np.float64), (count,)))
        self.row_upper.append(np.broadcast_to(np.asarray(upper, dtype=np.float64), (count,)))
        self.num_rows += count

    def model(self, cost, lower, upper, integer) -> Model:
        """The model with these rows and the given columns (cost, bounds, integrality)."""
        return Model(
            cost,
            lower,
            upper,
            integer,
            np.concatenate(self.rows),
            np.concatenate(self.cols),
            np.concatenate(self.vals),
            np.concatenate(self.row_lower).astype(float),
            np.concatenate(self.row_upper).astype(float),
        )


@dataclass
class Model:
    """A linear model in CSR form, built with numpy: columns then rows as triplets."""

    cost: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    integer: np.ndarray  # bool per column
    rows: np.ndarray  # triplet row ids
    cols: np.ndarray
    vals: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray

    @property
    def num_cols(self) -> int:
        return len(self.cost)

    @property
    def num_rows(self) -> int:
        return len(self.row_lower)


#: the collectives TE-CCL's formulation covers (none that reduces)
SUPPORTED = frozenset(
    {
        CollKind.ALLGATHER,
        CollKind.BROADCAST,
        CollKind.ALLTOALL,
        CollKind.GATHER,
        CollKind.SCATTER,
        CollKind.CUSTOM,
    }
)


def check_supported(collective: Collective) -> None:
    """Refuse the collectives TE-CCL's formulation does not cover (reductions and others)."""
    if collective.reduces:
        raise CollsynthError(f"teccl does not support {collective.kind.value} (reductions)")
    if collective.kind not in SUPPORTED:
        raise CollsynthError(f"teccl does not support {collective.kind.value}")
