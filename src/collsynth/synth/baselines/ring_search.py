"""Finding NCCL-style rings: Hamiltonian cycles of the compute graph that spread link load.

Used by ``ring`` (:mod:`.ring`) and the baselines built on rings (hierarchical rings, trees,
recursive doubling, AllToAll).

Finding rings (deterministic):

* the *compute graph* has an edge u -> v when a direct route (through switches/routers only)
  exists; a ring is a Hamiltonian cycle of it, and ring hops use the RouteTable routes;
* rings are found one after the other; ring r minimises the increase of
  ``sum over links of (load * max_bw / bw) ** 4``, where ``load`` counts the ring hops (of the
  rings so far) routed over each link: a smooth stand-in for the bottleneck ``max(load / bw)``,
  so rings prefer direct links and short routes, avoid links earlier rings use and spread load
  in proportion to bandwidth;
* candidates for ring r, each improved by best-improvement local search (or-opt: move 1-3
  consecutive ranks; 2-opt: reverse a stretch when the reverse hops exist), the cheapest kept:
  (a) when compute nodes carry a ``chassis``/``dc``/``pod``/``group`` attribute, a cycle that
  visits every group contiguously, with the entry and exit rank of each group chosen by dynamic
  programming around the cycle of groups to minimise the cost of the group-to-group hops: on
  switch fabrics (DGX A100, DGX-2, rails, fat trees) this keeps each chassis/server contiguous
  and makes successive rings leave and enter it through different NICs, as NCCL's rings do;
  (b) a greedy cycle (cheapest next rank, then fewest onward neighbours), else Pósa's
  rotation-extension heuristic on symmetric graphs (fixed-seed choices), else capped
  backtracking with reachability pruning; (c) the previous ring and its reverse;
* above 256 ranks there is no cost matrix: ring 0 is the chassis-then-rank order if it is a
  cycle (otherwise a capped Warnsdorff search) and ring 1 its reverse; when ranks are grouped
  into chassis, rings 2j and 2j+1 are the same with every chassis rotated by j GPUs, so their
  chassis-to-chassis hops leave through other GPUs and NICs (fast: 1024 GPUs on one
  switch or on a ring take about a second);
* ``rings=K`` asks for K rings (reused cyclically if fewer distinct rings exist). By default up
  to 8 rings are found and the schedule uses the smallest prefix with the best estimated ring
  throughput ``R / max_link(load / bw)``: on a star one ring, on a bidirectional ring two (one
  per direction), on DGX-1 six, on 2-node DGX A100 eight (one per NIC).

Fallback: when the search finds no Hamiltonian cycle (e.g. a line), :meth:`RingFinder.find`
returns the chassis-then-rank order whose hops without a direct route relay through GPUs along
the shortest path of the compute graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ...errors import CollsynthError
from ...topology.model import Topology
from ._common import ComputeGraph, group_attr, natural_order

#: Largest ring size searched with a cost matrix and local search.
TSP_MAX = 256
#: Most rings found automatically.
MAX_RINGS = 8
_BIG = np.inf
#: Ring costs are the increase of sum over links of (load * max_bw / bw) ** _POWER: a smooth
#: stand-in for the bottleneck max(load / bw) that still prefers short routes.
_POWER = 4


@dataclass
class Ring:
    order: list[int]  # ranks, cyclic
    hops: list[list[int]] = field(default_factory=list)  # hops[i]: ranks order[i] .. order[i+1]

    @property
    def direct(self) -> bool:
        return all(len(h) == 2 for h in self.hops)

    def rotated(self, first: int) -> Ring:
        i = self.order.index(first)
        return Ring(self.order[i:] + self.order[:i], self.hops[i:] + self.hops[:i])


class RingFinder:
    """Finds rings over ``ranks`` (default: all ranks) of a topology; see the module docstring."""

    def __init__(
        self,
        topology: Topology,
        graph: ComputeGraph | None = None,
        ranks: Sequence[int] | None = None,
    ):
        self.topology = topology
        self.graph = graph or ComputeGraph(topology)
        self.routes = self.graph.routes
        if ranks is None:
            self.ranks = natural_order(topology)
        else:
            pos = {r: i for i, r in enumerate(natural_order(topology))}
            self.ranks = sorted(set(int(r) for r in ranks), key=lambda r: pos[r])
        self.m = len(self.ranks)
        self.load = np.zeros(len(topology.links))
        self.bw = topology.link_bw
        self._inc = None
        self._last: list[int] | None = None  # previous ring (local indices)
        self._large0: list[int] | None = None  # ring 0 above TSP_MAX ranks
        self.notes: list[str] = []

    # ------------------------------------------------------------------ public
    def find(self, count: int | None = None) -> list[Ring]:
        """``count`` rings, or (None) the automatic choice."""
        if self.m < 2:
            raise CollsynthError("a ring needs at least 2 ranks")
        want = MAX_RINGS if count is None else count
        rings: list[Ring] = []
        throughput: list[float] = []
        for r in range(want):
            ring = self._next_ring(r)
            if ring is None:
                break
            rings.append(ring)
            self._add_load(ring)
            throughput.append(self._throughput(len(rings)))
        if not rings:
            rings = [self._relay_ring()]
        if count is None:
            best = max(throughput) if throughput else 0.0
            keep = next((i + 1 for i, t in enumerate(throughput) if t >= best * (1 - 1e-9)), 1)
            rings = rings[:keep]
        elif len(rings) < count:
            self.notes.append(
                f"found {len(rings)} distinct ring(s); rings are reused cyclically for {count}"
            )
            rings = [rings[i % len(rings)] for i in range(count)]
        return rings

    def first(self) -> Ring:
        """One good ring (ring 0 of :meth:`find`)."""
        ring = self._next_ring(0)
        return ring if ring is not None else self._relay_ring()

    # ------------------------------------------------------------------ load bookkeeping
    def _hop_routes(self, ring: Ring):
        for path in ring.hops:
            for a, b in zip(path[:-1], path[1:]):
                yield self.routes.route(a, b)

    def _add_load(self, ring: Ring) -> None:
        for route in self._hop_routes(ring):
            for l in route:
                self.load[l] += 1

    def _throughput(self, count: int) -> float:
        ratio = self.load / self.bw
        worst = float(ratio.max())
        return count / worst if worst > 0 else float("inf")

    # ------------------------------------------------------------------ ring construction
    def _make(self, order: list[int]) -> Ring:
        hops = [[order[i], order[(i + 1) % len(order)]] for i in range(len(order))]
        return Ring(list(order), hops)

    def _next_ring(self, index: int) -> Ring | None:
        if self.m == 2:
            a, b = self.ranks
            if self.routes.route(a, b) is None or self.routes.route(b, a) is None:
                return None
            return self._make([a, b])
        if self.m > TSP_MAX:
            return self._large_ring(index)
        W = self._costs()
        adj = W < _BIG
        starts = [_grouped(W, adj, self._groups()), _construct(W, adj, cap=5000)]
        if starts[1] is None:
            starts.append(_construct(W, adj, cap=5000, warnsdorff=True))
        prev = self._last
        if prev is not None:
            # any earlier ring is a Hamiltonian cycle: a start for the local search
            starts.append(prev)
            rev = [prev[0]] + prev[1:][::-1]
            if all(adj[rev[i], rev[(i + 1) % self.m]] for i in range(self.m)):
                starts.append(rev)
        best = None
        for cyc in starts:
            if cyc is None:
                continue
            cyc = _improve(cyc, W, adj, max_iter=20 * self.m)
            cost = float(W[cyc, np.roll(cyc, -1)].sum())
            if best is None or cost < best[0] * (1 - 1e-12):
                best = (cost, cyc)
        if best is None:
            return None
        cyc = best[1]
        self._last = list(cyc)
        # start the cycle at the first rank of the natural order (stable output)
        i = cyc.index(0)
        cyc = cyc[i:] + cyc[:i]
        return self._make([self.ranks[x] for x in cyc])

    def _groups(self) -> list[list[int]] | None:
        """Local indices grouped by chassis/dc/pod/group (None when fewer than 2 groups)."""
        attr = group_attr(self.topology)
        if attr is None:
            return None
        groups: dict = {}
        for i, r in enumerate(self.ranks):
            v = self.topology.nodes[self.topology.node_of_rank(r)].attrs[attr]
            groups.setdefault(v, []).append(i)
        if len(groups) < 2:
            return None
        return sorted(groups.values(), key=lambda g: g[0])

    def _incidence(self):
        """Sparse matrix: row u*m+v holds the links of the direct route u -> v."""
        if self._inc is None:
            from scipy.sparse import csr_matrix

            m = self.m
            rows, cols = [], []
            has = np.zeros(m * m, dtype=bool)
            pos = {r: i for i, r in enumerate(self.ranks)}
            for i, u in enumerate(self.ranks):
                row = self.routes.row(u)
                for v, route in row.items():
                    j = pos.get(v)
                    if j is None:
                        continue
                    has[i * m + j] = True
                    rows.extend([i * m + j] * len(route))
                    cols.extend(route)
            A = csr_matrix(
                (np.ones(len(rows)), (rows, cols)), shape=(m * m, len(self.topology.links))
            )
            self._inc = (A, has)
        return self._inc

    def _costs(self) -> np.ndarray:
        A, has = self._incidence()
        d = float(self.bw.max()) / self.bw
        w = ((self.load + 1.0) * d) ** _POWER - (self.load * d) ** _POWER
        W = np.asarray(A @ w).ravel()
        costs = np.where(has, W, _BIG).reshape(self.m, self.m)
        np.fill_diagonal(costs, _BIG)
        return costs

    def _large_ring(self, index: int) -> Ring | None:
        if index == 0:
            order = list(self.ranks)
            if all(
                self.routes.route(order[i], order[(i + 1) % self.m]) is not None
                for i in range(self.m)
            ):
                self._large0 = order
                return self._make(order)
            found = _warnsdorff(self.ranks, self.graph, cap=50 * self.m)
            if found is None:
                return None
            self._large0 = found
            return self._make(found)
        if index == 1:
            base = self._large0
            if base is None:
                return None
            order = [base[0]] + base[1:][::-1]
            if all(
                self.routes.route(order[i], order[(i + 1) % self.m]) is not None
                for i in range(self.m)
            ):
                return self._make(order)
            return None
        # more rings: chassis-contiguous, each chassis entered one GPU further along (ring
        # 2j and its reverse 2j+1 rotate every chassis by j), so successive rings cross between
        # chassis through different GPUs and NICs, as NCCL's channels do
        groups = self._groups()
        if groups is None:
            return None
        j = index // 2
        if any(j >= len(g) for g in groups):
            return None
        order_local = [i for g in groups for i in (g[j:] + g[:j])]
        if index % 2:
            order_local = [order_local[0]] + order_local[1:][::-1]
        order = [self.ranks[i] for i in order_local]
        if all(
            self.routes.route(order[i], order[(i + 1) % self.m]) is not None for i in range(self.m)
        ):
            return self._make(order)
        return None

    def _relay_ring(self) -> Ring:
        order = list(self.ranks)
        hops = []
        for i in range(self.m):
            a, b = order[i], order[(i + 1) % self.m]
            path = self.graph.relay_path(a, b)
            if path is None:
                t = self.topology
                raise CollsynthError(f"no path from {t.rank_name(a)} to {t.rank_name(b)}")
            hops.append(path)
        self.notes.append(
            "no Hamiltonian cycle found: ring hops without a direct route relay through GPUs"
        )
        return Ring(order, hops)


# ---------------------------------------------------------------------------------- search
def _grouped(W: np.ndarray, adj: np.ndarray, groups: list[list[int]] | None) -> list[int] | None:
    """A cycle visiting each group contiguously, groups in order; the entry e_g and exit x_g of
    every group minimise the summed cost of the group-to-group hops (dynamic programming around
    the cycle of groups); inside a group the path goes greedily from e_g to x_g."""
    if groups is None:
        return None
    k = len(groups)
    Winf = np.where(adj, W, np.inf)
    best = None
    for e0 in groups[0]:
        f = np.where(np.array(groups[0]) == e0, 0.0, np.inf)
        backs = []
        for g in range(k):
            G = np.array(groups[g])
            H = np.array(groups[(g + 1) % k])
            if len(G) == 1:
                h = f.copy()
                harg = np.zeros(1, dtype=np.int64)
            else:
                order = np.argsort(f, kind="stable")
                b1, b2 = int(order[0]), int(order[1])
                h = np.where(np.arange(len(G)) == b1, f[b2], f[b1])
                harg = np.where(np.arange(len(G)) == b1, b2, b1)
            M = h[:, None] + Winf[np.ix_(G, H)]
            if g == k - 1:
                M = np.where(H[None, :] == e0, M, np.inf)
            farg = np.argmin(M, axis=0)
            f = M[farg, np.arange(len(H))]
            backs.append((harg, farg))
        j0 = groups[0].index(e0)
        total = f[j0]
        if np.isfinite(total) and (best is None or total < best[0]):
            best = (float(total), e0, backs)
    if best is None:
        return None
    _, e0, backs = best
    entries = [0] * k
    exits = [0] * k
    e_idx = groups[0].index(e0)
    for g in range(k - 1, -1, -1):
        harg, farg = backs[g]
        x_idx = int(farg[e_idx])
        exits[g] = groups[g][x_idx]
        e_idx = int(harg[x_idx])
        entries[g] = groups[g][e_idx]
    cyc: list[int] = []
    for g in range(k):
        e, x = entries[g], exits[g]
        cyc.append(e)
        rest = [v for v in groups[g] if v != e and v != x]
        cur = e
        while rest:
            cands = [v for v in rest if adj[cur, v]]
            if not cands:
                return None
            cur = min(cands, key=lambda v: (W[cur, v], v))
            rest.remove(cur)
            cyc.append(cur)
        if x != e:
            if not adj[cur, x]:
                return None
            cyc.append(x)
    if cyc[0] != 0 and 0 in cyc:
        i = cyc.index(0)
        cyc = cyc[i:] + cyc[:i]
    return cyc


def _construct(
    W: np.ndarray, adj: np.ndarray, cap: int, warnsdorff: bool = False
) -> list[int] | None:
    """A Hamiltonian cycle through node 0 of ``adj``, or None.

    Greedy first, then Pósa's heuristic on symmetric graphs, then capped backtracking that
    prunes a partial path when the unvisited nodes are no longer all reachable from its end or
    none of them leads back to node 0. Candidates are tried cheapest first, then with the fewest
    unvisited out-neighbours (Warnsdorff's rule), then by index (``warnsdorff``: fewest
    out-neighbours first).
    """
    m = len(W)
    out = [int(sum(1 << int(v) for v in np.flatnonzero(adj[u]))) for u in range(m)]
    into0 = int(sum(1 << u for u in range(m) if adj[u, 0]))
    full = (1 << m) - 1

    def key(u: int, v: int, free: int) -> tuple:
        if warnsdorff:
            return ((out[v] & free).bit_count(), W[u, v], v)
        return (W[u, v], (out[v] & free).bit_count(), v)

    # greedy
    free = full & ~1
    path = [0]
    while free:
        u = path[-1]
        cands = out[u] & free
        if not cands:
            break
        v = min(_bits(cands), key=lambda v: key(u, v, free & ~(1 << v)))
        path.append(v)
        free &= ~(1 << v)
    if not free and adj[path[-1], 0]:
        return path
    if np.array_equal(adj, adj.T):
        cyc = _posa(W, adj, out, iters=50 * m)
        if cyc is not None:
            return cyc
    # backtracking with reachability pruning
    free = full & ~1
    path = [0]

    def cands_of(u: int, free: int):
        return iter(sorted(_bits(out[u] & free), key=lambda v: key(u, v, free & ~(1 << v))))

    stack = [cands_of(0, free)]
    expansions = 0
    while stack:
        if not free:
            if adj[path[-1], 0]:
                return path
            stack.pop()
            free |= 1 << path.pop()
            continue
        advanced = False
        for v in stack[-1]:
            expansions += 1
            if expansions > cap:
                return None
            rest = free & ~(1 << v)
            if _feasible(out, into0, rest, v):
                path.append(v)
                free = rest
                stack.append(cands_of(v, free))
                advanced = True
                break
        if not advanced:
            stack.pop()
            free |= 1 << path.pop()
    return None


def _posa(W: np.ndarray, adj: np.ndarray, out: list[int], iters: int) -> list[int] | None:
    """Pósa's rotation-extension heuristic on a symmetric graph (deterministic).

    Extend the path from its end while possible (cheapest, then fewest onward neighbours);
    otherwise rotate: for a neighbour ``path[i]`` of the end, reverse ``path[i+1:]`` so that
    ``path[i+1]`` becomes the end (preferring rotations whose new end can extend, else any;
    chosen by a fixed-seed generator, so the result is deterministic). Once all nodes are on
    the path, rotate until the end is adjacent to the start.
    """
    m = len(W)
    path = [0]
    free = ((1 << m) - 1) & ~1
    rng = np.random.default_rng(0)  # fixed seed: deterministic
    for _it in range(iters):
        end = path[-1]
        nxt = out[end] & free
        if nxt:
            v = min(_bits(nxt), key=lambda v: (W[end, v], (out[v] & free).bit_count(), v))
            path.append(v)
            free &= ~(1 << v)
            continue
        if not free and adj[end, path[0]]:
            return path
        cands = [i for i in range(len(path) - 2) if adj[end, path[i]]]
        if not cands:
            return None
        good = [
            i for i in cands if (out[path[i + 1]] & free if free else adj[path[i + 1], path[0]])
        ]
        pool = good or cands
        pick = pool[int(rng.integers(len(pool)))]
        path = path[: pick + 1] + path[pick + 1 :][::-1]
    return None


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _feasible(out: list[int], into0: int, free: int, cur: int) -> bool:
    """Can a path from ``cur`` still cover every node of ``free`` and return to node 0?"""
    if not free:
        return bool(out[cur] & 1)
    if not into0 & free:
        return False
    reached = out[cur] & free
    frontier = reached
    while frontier:
        nxt = 0
        while frontier:
            low = frontier & -frontier
            nxt |= out[low.bit_length() - 1]
            frontier ^= low
        nxt &= free & ~reached
        reached |= nxt
        frontier = nxt
    return reached == free


def _improve(cyc: list[int], W: np.ndarray, adj: np.ndarray, max_iter: int) -> list[int]:
    """Best-improvement or-opt (segments of 1-3) and 2-opt on a directed cycle."""
    m = len(cyc)
    if m < 4:
        return cyc
    Wf = np.where(adj, W, 0.0)
    c = np.array(cyc, dtype=np.int64)
    idx = np.arange(m)
    scale = float(np.abs(Wf).max()) or 1.0
    eps = 1e-9 * scale
    for _ in range(max_iter):
        nxt = np.roll(c, -1)
        e = Wf[c, nxt]
        best_delta = -eps
        best_move: tuple[Literal["or"], int, int, int] | tuple[Literal["2opt"], int, int] | None = (
            None
        )
        # or-opt: move segment c[i .. i+L-1] between c[k] and c[k+1]
        for L in (1, 2, 3):
            if m - L < 3:
                break
            s0 = c
            sl = c[(idx + L - 1) % m]
            a = c[(idx - 1) % m]
            b = c[(idx + L) % m]
            gain = Wf[a, s0] + Wf[sl, b] - Wf[a, b]
            add = Wf[c[None, :], s0[:, None]] + Wf[sl[:, None], nxt[None, :]] - e[None, :]
            delta = add - gain[:, None]
            valid = (
                adj[a, b][:, None] & adj[c[None, :], s0[:, None]] & adj[sl[:, None], nxt[None, :]]
            )
            for t in range(-1, L):
                valid[idx, (idx + t) % m] = False
            delta = np.where(valid, delta, np.inf)
            flat = int(np.argmin(delta))
            if delta.flat[flat] < best_delta:
                best_delta = float(delta.flat[flat])
                best_move = ("or", L, flat // m, flat % m)
        # 2-opt: reverse c[i+1 .. j]
        rb = Wf[nxt, c]  # reverse of edge k: c[k+1] -> c[k]
        rok = adj[nxt, c]
        F = np.concatenate(([0.0], np.cumsum(e)))
        B = np.concatenate(([0.0], np.cumsum(rb)))
        bad = np.concatenate(([0], np.cumsum(~rok)))
        I = idx[:, None]
        J = idx[None, :]
        ci, cj = c[I], c[J]
        ci1, cj1 = c[(I + 1) % m], c[(J + 1) % m]
        inner_rev = B[J] - B[np.minimum(I + 1, m)]
        inner_fwd = F[J] - F[np.minimum(I + 1, m)]
        delta = Wf[ci, cj] + Wf[ci1, cj1] - e[I] - e[J] + inner_rev - inner_fwd
        valid = (
            (J - I >= 2)
            & ~((I == 0) & (J == m - 1))
            & adj[ci, cj]
            & adj[ci1, cj1]
            & (bad[J] - bad[np.minimum(I + 1, m)] == 0)
        )
        delta = np.where(valid, delta, np.inf)
        flat = int(np.argmin(delta))
        if delta.flat[flat] < best_delta:
            best_delta = float(delta.flat[flat])
            best_move = ("2opt", flat // m, flat % m)
        if best_move is None:
            break
        lst = c.tolist()
        if best_move[0] == "or":
            _, L, i, k = best_move
            seg = [lst[(i + t) % m] for t in range(L)]
            x = lst[k]
            rest = [v for v in lst if v not in seg]
            p = rest.index(x)
            lst = rest[: p + 1] + seg + rest[p + 1 :]
        else:
            _, i, j = best_move
            lst = lst[: i + 1] + lst[i + 1 : j + 1][::-1] + lst[j + 1 :]
        c = np.array(lst, dtype=np.int64)
    return c.tolist()


def _warnsdorff(ranks: list[int], graph: ComputeGraph, cap: int) -> list[int] | None:
    """Capped backtracking Hamiltonian cycle search on adjacency lists (fewest onward first)."""
    allowed = set(ranks)
    out = {u: [v for v in graph.out[u] if v in allowed] for u in ranks}
    start = ranks[0]
    into_start = {u for u in ranks if start in out[u]}
    if not into_start:
        return None
    seen = {start}
    path = [start]
    m = len(ranks)

    def cands(u):
        free = [v for v in out[u] if v not in seen]
        return iter(sorted(free, key=lambda v: (sum(1 for w in out[v] if w not in seen), v)))

    stack = [cands(start)]
    expansions = 0
    while stack:
        if len(path) == m:
            if path[-1] in into_start:
                return path
            stack.pop()
            seen.discard(path.pop())
            continue
        advanced = False
        for v in stack[-1]:
            if v in seen:
                continue
            expansions += 1
            if expansions > cap:
                return None
            seen.add(v)
            path.append(v)
            stack.append(cands(v))
            advanced = True
            break
        if not advanced:
            stack.pop()
            seen.discard(path.pop())
    return None
