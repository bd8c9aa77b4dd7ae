"""ForestColl's optimality search: the exact AllGather optimum (Algorithm 1) and the fixed-k
search (Algorithm 3) of ForestColl (Zhao et al., 'ForestColl: Throughput-Optimal Collective
Communications on Heterogeneous Network Fabrics', arXiv 2402.06787), §3.1, §4.2, §4.5 and
Appendix C.1, C.4 (Theorems 1, 13, 14, Propositions 2, 3). ReduceScatter's optimum is
AllGather's on the transposed topology (:func:`transpose`, §4.6).

Both ForestColl's tree construction (:mod:`collsynth.synth.forestcoll`) and the exact cut lower
bounds (:mod:`collsynth.bound.cut`) use it.

Units
-----
Bandwidths (bytes/s floats) are first made exact integers (:func:`integer_bandwidths`): each is
read as the shortest decimal that round-trips (``Fraction(repr(b))``, exact for every bandwidth
written in decimal), all are multiplied by the lcm of their denominators and divided by the gcd
of the results. So ``b_e = int_bw[e] * unit`` exactly, with ``unit`` (bytes/s, a Fraction) the
largest common measure of all link bandwidths (25 GB/s for DGX A100, 2 GB/s for MI250).

:class:`Optimum` reports ``inv_x`` = 1/x* in **seconds per byte of shard**: AllGather of ``M``
bytes (nccl-tests size, ``M/N`` per rank) needs ``T = (M/N) * inv_x`` with

    inv_x = max over S ⊂ V with S ⊉ V_c of |S ∩ V_c| / B+(S)        (Theorem 1, eq. (1))

(B+(S) in bytes/s; a cut with no compute node has ratio 0 and never binds). ``ratio`` is the same
number in integer-capacity units (``inv_x = ratio / unit``). ``k`` trees per root and the
per-tree bandwidth ``y`` follow Proposition 3: with ``ratio = p/q`` in lowest terms,
``U = p / gcd(q, {int_bw})``, ``k = q / gcd(q, {int_bw})``, ``y = unit / U`` bytes/s, and link
``e`` carries at most ``caps[e] = U * int_bw[e]`` trees (an integer).

Search
------
Algorithm 1 as written: bracket ``[(N-1)/min_v B-(v), N-1]``, probe with one max-flow per compute
node on the auxiliary network (source ``s`` with an arc of capacity ``x`` to every compute node;
feasible iff every max-flow is ``N x``), stop when the bracket is narrower than
``1/min_v B-(v)^2`` and return the unique fraction in it whose denominator is at most
``min_v B-(v)`` (Proposition 2), found exactly by the Stern–Brocot / continued-fraction search
:func:`simplest_between`. All arithmetic is on Fractions; probes scale the network to integers.

Departures (documented, exactness unchanged):

* Probe points are the *simplest* fraction in the middle half of the bracket, not the exact
  midpoint, so the integers in the probe networks stay small (the bracket still shrinks to at most
  3/4 per probe).
* ``accelerate=True`` (default) also uses the minimum cut of a failed probe: that cut ``S`` has
  ``|S ∩ V_c| / B+(S) > 1/x``, which is a certified lower bound, so the lower end jumps to it; a
  lower end that is the ratio of a known cut is probed directly and, if feasible, is the exact
  optimum with that cut as witness (a discrete Newton / Dinkelbach step). ``accelerate=False``
  runs Algorithm 1 literally. Both return the same Fraction (tested).
* The bottleneck cut is returned too: from the Newton step, or else from one extra probe just
  below the optimum (any violated cut there is a bottleneck cut, by Proposition 2's spacing).

Fixed k (Algorithm 3 / Theorem 14): the smallest ``U`` such that the capacities
``floor(U * int_bw[e])`` admit ``k`` edge-disjoint spanning out-trees per root (max-flow test of
Theorem 5), bracket ``[(N-1)k/min_v B-(v), (N-1)k]``, stop below ``1/max_e b_e^2``, exact recovery
with denominator at most ``max_e b_e``. Acceleration: a violated cut gives the exact smallest ``U``
that cut alone allows (a breakpoint ``m / b_e``), probed next.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import reduce
from typing import Any

import numpy as np

from ..errors import CollsynthError
from ..topology.model import Topology, TopologyBuilder
from . import maxflow
from .maxflow import rooted_check


# ---------------------------------------------------------------------------------- rationals
def simplest_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction with the smallest denominator in the closed interval ``[lo, hi]`` (lo >= 0).

    Stern–Brocot descent written as a continued-fraction recursion; exact.
    """
    lo, hi = Fraction(lo), Fraction(hi)
    if lo > hi:
        raise ValueError("empty interval")
    if lo < 0:
        raise ValueError("negative interval")
    # iterative form of: f = floor(lo); lo integer -> lo; f+1 <= hi -> f+1;
    # else f + 1 / simplest(1/(hi-f), 1/(lo-f))
    terms: list[int] = []
    while True:
        f = math.floor(lo)
        if lo == f:
            terms.append(f)
            break
        if f + 1 <= hi:
            terms.append(f + 1)
            break
        terms.append(f)
        lo, hi = 1 / (hi - f), 1 / (lo - f)
    val = Fraction(terms[-1])
    for a in reversed(terms[:-1]):
        val = a + 1 / val
    return val


# ---------------------------------------------------------------------------------- graphs
def transpose(topo: Topology) -> Topology:
    """``topo`` with every link reversed; link ``i`` of the result is link ``i`` reversed.

    ReduceScatter on ``topo`` is AllGather on ``transpose(topo)`` run backwards (ForestColl
    §4.6), so ``optimal_allgather(transpose(topo))`` is ReduceScatter's exact optimum.
    """
    b = TopologyBuilder(topo.name + "^T", meta=dict(topo.meta, transposed_of=topo.name))
    for nd in topo.nodes:
        b.node(nd.name, nd.kind, **nd.attrs)
    for l in topo.links:
        b.link(l.dst, l.src, l.bw, l.alpha, l.cls, l.lanes)
    return b.build()


def integer_bandwidths(bws: Sequence[float]) -> tuple[list[int], Fraction]:
    """Exact integers and unit with ``bws[i] == ints[i] * unit`` exactly (see the module doc)."""
    fr = [Fraction(repr(float(b))) for b in bws]
    if any(f <= 0 for f in fr):
        raise CollsynthError("ForestColl needs positive bandwidths")
    lcm = reduce(math.lcm, (f.denominator for f in fr), 1)
    ints = [f.numerator * (lcm // f.denominator) for f in fr]
    g = reduce(math.gcd, ints, 0)
    return [x // g for x in ints], Fraction(g, lcm)


@dataclass
class IntGraph:
    """A directed multigraph with integer arc capacities (one arc per link, parallel arcs ok)."""

    name: str
    n: int
    compute: tuple[int, ...]
    tails: tuple[int, ...]
    heads: tuple[int, ...]
    caps: tuple[int, ...]
    unit: Fraction
    names: tuple[str, ...]

    @classmethod
    def from_links(
        cls,
        name: str,
        n: int,
        compute: Sequence[int],
        src: Sequence[int],
        dst: Sequence[int],
        caps: Sequence[int],
        unit: Fraction,
        names: Sequence[str],
    ) -> IntGraph:
        keep = [(int(a), int(b), int(c)) for a, b, c in zip(src, dst, caps) if c > 0 and a != b]
        return cls(
            name,
            n,
            tuple(int(c) for c in compute),
            tuple(a for a, _, _ in keep),
            tuple(b for _, b, _ in keep),
            tuple(c for _, _, c in keep),
            unit,
            tuple(names),
        )

    def in_cap(self) -> list[int]:
        out = [0] * self.n
        for b, c in zip(self.heads, self.caps):
            out[b] += c
        return out

    def cut_out(self, side: set[int] | frozenset[int]) -> int:
        return sum(
            c for a, b, c in zip(self.tails, self.heads, self.caps) if a in side and b not in side
        )


def topology_graph(
    topo: Topology, int_bw: Sequence[int] | None = None, unit: Fraction | None = None
) -> tuple[IntGraph, list[int]]:
    """The integer graph of ``topo`` (exact bandwidths, :func:`integer_bandwidths`)."""
    if int_bw is None:
        int_bw, unit = integer_bandwidths(topo.link_bw.tolist())
    elif unit is None:
        raise ValueError("topology_graph: int_bw given without its unit")
    g = IntGraph.from_links(
        topo.name,
        topo.num_nodes,
        topo.compute_nodes.tolist(),
        topo.link_src.tolist(),
        topo.link_dst.tolist(),
        int_bw,
        unit,
        [nd.name for nd in topo.nodes],
    )
    return g, list(int_bw)


# ---------------------------------------------------------------------------------- result
@dataclass(frozen=True)
class Optimum:
    """The AllGather optimum of a topology (or the best time with a fixed ``k``).

    ``inv_x``: seconds per byte of shard (Fraction): ``time(M) = (M/N) * inv_x``.
    ``ratio``: ``inv_x`` in integer-capacity units (``inv_x = ratio / unit``); for the optimum it
    is ``max |S ∩ V_c| / B+(S)`` over cuts, for fixed k it is ``U / k``.
    ``unit``: bytes/s of one integer-capacity unit; ``int_bw[e] * unit`` is link ``e``'s bandwidth.
    ``k``: trees per root. ``U``: trees per unit of bandwidth (``1/y`` in units); ``y`` (property):
    bytes/s used by one tree. ``caps[e]``: trees link ``e`` may carry, ``floor(U * int_bw[e])``.
    ``cut``: node indices of a bottleneck cut ``S`` (for the optimum ``|S ∩ V_c| / B+(S)``
    equals ``ratio``; for fixed k, a cut that cannot carry ``k`` trees per root with a smaller
    ``U``), or None if none was identified. ``fixed_k``: True for :func:`fixed_k` results.
    ``stats``: probes and max-flow counts of the search.
    """

    topology: str
    num_ranks: int
    inv_x: Fraction
    ratio: Fraction
    unit: Fraction
    int_bw: tuple[int, ...]
    k: int
    U: Fraction
    caps: tuple[int, ...]
    cut: frozenset[int] | None
    cut_names: tuple[str, ...] | None
    cut_compute: int
    cut_bw: Fraction | None
    fixed_k: bool = False
    stats: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def y(self) -> Fraction:
        """Bandwidth of one tree, bytes/s."""
        return self.unit / self.U

    @property
    def x(self) -> Fraction:
        """Bandwidth broadcast by each root (``k * y``), bytes/s."""
        return 1 / self.inv_x

    @property
    def algbw(self) -> float:
        """AllGather algorithmic bandwidth ``M / T`` in bytes/s (``N / inv_x``)."""
        return float(self.num_ranks / self.inv_x)

    def time(self, size: float) -> float:
        """Seconds for an AllGather of ``size`` bytes (nccl-tests size: ``size / N`` per rank)."""
        return float(Fraction(repr(float(size))) / self.num_ranks * self.inv_x)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topology": self.topology,
            "ranks": self.num_ranks,
            "fixed_k": self.fixed_k,
            "k": self.k,
            "inv_x": str(self.inv_x),
            "ratio": str(self.ratio),
            "unit_Bps": str(self.unit),
            "tree_bw_Bps": float(self.y),
            "algbw_Bps": self.algbw,
            "cut": list(self.cut_names) if self.cut_names is not None else None,
            "cut_compute": self.cut_compute,
            "cut_bw_Bps": float(self.cut_bw) if self.cut_bw is not None else None,
            "stats": dict(self.stats),
        }


# ---------------------------------------------------------------------------------- search core
def _exact_search(
    probe, bound, lo: Fraction, lo_cut, hi: Fraction, max_den: int, accelerate: bool, stats: dict
):
    """Smallest feasible value ``a`` (a fraction with denominator <= ``max_den``) in ``[lo, hi]``.

    ``probe(v) -> (ok, cut)``; ``bound(cut)`` is a certified lower bound on ``a`` greater than the
    failed probe value. ``lo_cut`` (or None) is a cut whose bound is exactly ``lo``.
    Returns ``(a, cut_or_None)`` where the cut (if any) certifies ``a`` (``bound(cut) == a``).
    """
    tol = Fraction(1, max_den * max_den)
    lo_probed = not accelerate or lo_cut is None
    while hi - lo >= tol:
        if not lo_probed:
            ok, cut = probe(lo)
            stats["probes"] += 1
            if ok:
                return lo, lo_cut
            b = bound(cut)
            assert b > lo, "a violated cut must raise the lower end"
            lo, lo_cut = b, cut
            continue
        span = hi - lo
        mid = simplest_between(lo + span / 4, hi - span / 4)
        ok, cut = probe(mid)
        stats["probes"] += 1
        if ok:
            hi = mid
        elif accelerate:
            b = bound(cut)
            assert b > mid
            lo, lo_cut, lo_probed = b, cut, False
        else:
            lo, lo_cut = mid, None
    ans = simplest_between(lo, hi)
    assert ans.denominator <= max_den
    return ans, (lo_cut if (lo_cut is not None and ans == lo) else None)


def _sinks(topo, g: IntGraph) -> list[int]:
    """The sinks a rooted max-flow check must try: one compute node per orbit of the
    topology's automorphism group (:func:`~collsynth.topology.symmetry.topology_group`), the
    smallest; every compute node where it has none (or ``topo`` is a switch-free logical
    topology). The flow network (arcs, their capacities scaled from the links' bandwidths,
    one equal source arc per compute node) is invariant under the group, so an automorphism
    carries a flow to a sink and its minimum cut onto a flow and a cut of the same value to
    the sink's image: the check passes for every sink iff it passes for the orbits'
    representatives."""
    from ..topology.symmetry import topology_group

    if not isinstance(topo, Topology):
        return list(g.compute)
    group = topology_group(topo)
    if group is None or group.order < 2:
        return list(g.compute)
    nodes = group.node_perms[:, np.asarray(g.compute, dtype=np.int64)].min(axis=0)
    return sorted({int(v) for v in nodes})


def _names(g: IntGraph, cut) -> tuple[str, ...] | None:
    return None if cut is None else tuple(g.names[v] for v in sorted(cut))


def _graph_of(topo):
    """(IntGraph, per-link int bandwidths or None) for a Topology or a LogicalTopology."""
    if isinstance(topo, Topology):
        return topology_graph(topo)
    to_graph = getattr(topo, "int_graph", None)
    if to_graph is None:
        raise CollsynthError(f"{topo!r} is not a topology")
    return to_graph(), None


def optimal_allgather(topo, *, accelerate: bool = True) -> Optimum:
    """The exact AllGather optimum of ``topo`` (Theorem 1 via Algorithm 1); see the module doc.

    ``topo`` is a :class:`~collsynth.topology.model.Topology` or any object with an
    ``int_graph()`` method returning an :class:`IntGraph` (ForestColl's switch-free
    ``LogicalTopology``: then over its integer capacities, with ``unit`` its per-capacity
    bandwidth).
    """
    g, int_bw = _graph_of(topo)
    stats = {"probes": 0, "maxflows": 0}
    mf0 = maxflow.COUNTERS["maxflows"]
    n_c = len(g.compute)
    compute_set = frozenset(g.compute)
    indeg = g.in_cap()
    dmin = min(indeg[v] for v in g.compute)
    if dmin <= 0:
        raise CollsynthError(f"{g.name}: a compute node has no incoming bandwidth")
    vmin = min(g.compute, key=lambda v: (indeg[v], v))
    all_nodes = frozenset(range(g.n))
    order = _sinks(topo, g)

    def ratio(cut) -> Fraction:
        return Fraction(len(compute_set & cut), g.cut_out(cut))

    def probe(r: Fraction):
        # 1/x = r = a/b: links scaled by a, source arcs b, need N*b
        a, b = r.numerator, r.denominator
        ok, bad, cut = rooted_check(
            g.n,
            g.tails,
            g.heads,
            [c * a for c in g.caps],
            list(g.compute),
            [b] * n_c,
            n_c * b,
            order,
        )
        if not ok:  # check the failing sink first next time
            assert bad is not None and cut is not None  # rooted_check reports both on failure
            order.remove(bad)
            order.insert(0, bad)
            return False, frozenset(cut)
        return True, None

    lo_cut = all_nodes - {vmin}
    lo = ratio(lo_cut)
    hi = Fraction(n_c - 1)
    ans, cut = _exact_search(probe, ratio, lo, lo_cut, hi, dmin, accelerate, stats)
    if cut is None:
        # any cut violated just below the optimum is a bottleneck cut (Proposition 2 spacing)
        total = sum(g.caps)
        eps = Fraction(1, 2 * dmin * total)
        ok, cut = probe(ans - eps)
        stats["probes"] += 1
        assert not ok and ratio(cut) == ans, "bottleneck cut recovery failed"
    assert ratio(cut) == ans
    p, q = ans.numerator, ans.denominator
    caps_all = g.caps if int_bw is None else int_bw
    gg = reduce(math.gcd, caps_all, q)
    U = Fraction(p, gg)
    k = q // gg
    caps = tuple(c * p // gg for c in caps_all)
    stats["maxflows"] = maxflow.COUNTERS["maxflows"] - mf0
    return Optimum(
        topology=g.name,
        num_ranks=n_c,
        inv_x=ans / g.unit,
        ratio=ans,
        unit=g.unit,
        int_bw=tuple(caps_all),
        k=k,
        U=U,
        caps=caps,
        cut=frozenset(cut),
        cut_names=_names(g, cut),
        cut_compute=len(compute_set & cut),
        cut_bw=g.cut_out(cut) * g.unit,
        fixed_k=False,
        stats=stats,
    )


def at_scale(topo, k: int, U: Fraction, *, note: str = "scaled") -> Optimum:
    """The fixed-``k`` result for a given ``U`` (not searched): ``caps = floor(U * int_bw)``.

    Used when a larger ``U`` than the optimum is needed (edge splitting on non-Eulerian
    topologies); ``inv_x = U / (k * unit)`` is then the time the trees achieve.
    """
    g, int_bw = _graph_of(topo)
    caps_all = g.caps if int_bw is None else int_bw
    a, b = U.numerator, U.denominator
    return Optimum(
        topology=g.name,
        num_ranks=len(g.compute),
        inv_x=U / (k * g.unit),
        ratio=U / k,
        unit=g.unit,
        int_bw=tuple(caps_all),
        k=k,
        U=U,
        caps=tuple((c * a) // b for c in caps_all),
        cut=None,
        cut_names=None,
        cut_compute=0,
        cut_bw=None,
        fixed_k=True,
        stats={"note": note},
    )


def _min_u_for_cut(caps: Sequence[int], need: int) -> Fraction:
    """Smallest U with ``sum(floor(U * c) for c in caps) >= need`` (a breakpoint ``m / c``)."""
    if need <= 0:
        return Fraction(0)
    if not caps:
        raise CollsynthError("a cut with no exiting capacity cannot carry any tree")
    best = None
    for c in sorted(set(caps)):
        lo_m, hi_m = 0, need * c  # f(need) >= need * sum(caps) >= need
        while hi_m - lo_m > 1:
            mid = (lo_m + hi_m) // 2
            if sum((x * mid) // c for x in caps) >= need:
                hi_m = mid
            else:
                lo_m = mid
        cand = Fraction(hi_m, c)
        if best is None or cand < best:
            best = cand
    assert best is not None  # caps is non-empty
    return best


def fixed_k(topo, k: int, *, accelerate: bool = True) -> Optimum:
    """Best AllGather with exactly ``k`` trees per root (Algorithm 3 / Theorem 14).

    Returns an :class:`Optimum` with ``fixed_k=True``: ``U`` is the smallest value for which
    ``caps[e] = floor(U * int_bw[e])`` admits ``k`` edge-disjoint spanning out-trees per root;
    ``inv_x = U / (k * unit)``, so ``time(M) = (M / (N k)) * U / unit``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise CollsynthError(f"k must be a positive integer, got {k!r}")
    g, int_bw = _graph_of(topo)
    stats = {"probes": 0, "maxflows": 0}
    mf0 = maxflow.COUNTERS["maxflows"]
    n_c = len(g.compute)
    compute_set = frozenset(g.compute)
    indeg = g.in_cap()
    dmin = min(indeg[v] for v in g.compute)
    cmax = max(g.caps)
    order = _sinks(topo, g)
    out_arcs: dict[int, list[int]] = {}
    for i, a in enumerate(g.tails):
        out_arcs.setdefault(a, []).append(i)

    def floor_caps(U: Fraction) -> list[int]:
        a, b = U.numerator, U.denominator
        return [(c * a) // b for c in g.caps]

    def probe(U: Fraction):
        ok, bad, cut = rooted_check(
            g.n, g.tails, g.heads, floor_caps(U), list(g.compute), [k] * n_c, n_c * k, order
        )
        if not ok:
            assert bad is not None and cut is not None  # rooted_check reports both on failure
            order.remove(bad)
            order.insert(0, bad)
            return False, frozenset(cut)
        return True, None

    def bound(cut) -> Fraction:
        caps = [g.caps[i] for a in cut for i in out_arcs.get(a, ()) if g.heads[i] not in cut]
        return _min_u_for_cut(caps, len(compute_set & cut) * k)

    hi = Fraction((n_c - 1) * k)
    if accelerate:
        # the exact single-node-ingress bounds (cut V - v) are certified candidates; the arcs
        # leaving V - v are those into v, so each is read off v's in-arcs (bound(cut) itself
        # would walk every arc of the fabric per rank)
        in_arcs: dict[int, list[int]] = {}
        for i, h in enumerate(g.heads):
            in_arcs.setdefault(h, []).append(i)
        lo, lo_v = Fraction(-1), None
        for v in g.compute:
            into = [g.caps[i] for i in in_arcs.get(v, ()) if g.tails[i] != v]
            b = _min_u_for_cut(into, (n_c - 1) * k)
            if b > lo:
                lo, lo_v = b, v
        lo_cut = frozenset(range(g.n)) - {lo_v} if lo_v is not None else None
    else:
        lo, lo_cut = Fraction((n_c - 1) * k, dmin), None
    U, cut = _exact_search(probe, bound, lo, lo_cut, hi, cmax, accelerate, stats)
    if cut is None and U > 0:
        eps = Fraction(1, 2 * cmax * cmax)
        ok, cut = probe(U - eps)
        stats["probes"] += 1
        assert not ok and bound(cut) == U, "fixed-k cut recovery failed"
    caps_all = g.caps if int_bw is None else int_bw
    a, b = U.numerator, U.denominator
    caps = tuple((c * a) // b for c in caps_all)
    stats["maxflows"] = maxflow.COUNTERS["maxflows"] - mf0
    return Optimum(
        topology=g.name,
        num_ranks=n_c,
        inv_x=U / (k * g.unit),
        ratio=U / k,
        unit=g.unit,
        int_bw=tuple(caps_all),
        k=k,
        U=U,
        caps=caps,
        cut=frozenset(cut) if cut is not None else None,
        cut_names=_names(g, cut),
        cut_compute=len(compute_set & cut) if cut is not None else 0,
        cut_bw=g.cut_out(cut) * g.unit if cut is not None else None,
        fixed_k=True,
        stats=stats,
    )
