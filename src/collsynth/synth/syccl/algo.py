"""``syccl`` — SyCCL-style symmetric decomposition (seed 001), first version: AllGather (and
ReduceScatter by reversal) on island x rail fabrics. See ``docs/syccl.md``.

Stage 1 (sketches): a sketch is an order of the two dimensions. ``rail>island`` first gathers
along the rail group (GPU j of every island) and then spreads the S pieces each GPU holds over
its island; ``island>rail`` first gathers inside the island and then sends the whole island's m
pieces along the rail. Per unit of a rank's data, a GPU receives

* ``rail>island``: network ``S-1`` pieces, island ``S(m-1)`` pieces;
* ``island>rail``: network ``m(S-1)`` pieces, island ``m-1`` pieces.

In general a stage on groups of size g, after earlier stages of sizes g_1..g_k, loads each GPU
with ``(g-1) * g_1 * ... * g_k`` pieces on its dimension.

**Chunk allocation.** Every rank's data is split into fractions t_k over the sketches (sum 1).
With per-GPU capacities c_d (island ingress bandwidth; network share) the time is
``T(t) = max_d sum_k t_k L_{k,d} / c_d``; we minimize T over the simplex exactly (rational
arithmetic). With two dimensions an optimum uses at most two sketches, so the candidates are the
single sketches and, for each pair (a, b), the fraction equalising both dimensions
(w_d = u_d: each dimension's workload proportional to its capacity):

    t_a = (L_b,1/c_1 - L_b,2/c_2) / ((L_b,1 - L_a,1)/c_1 + (L_a,2 - L_b,2)/c_2),  t_b = 1 - t_a

kept when 0 <= t_a <= 1. The fraction is then rounded to a multiple of 1/QUANT for the IR.

Stage 2 (per sub-demand): the all-gather inside one group of each dimension is synthesized once
as a template on group positions (``direct``: every member sends to every other member in one
hop; ``ring``: a ring on positions 0..g-1) and replicated over every isomorphic group by mapping
positions to ranks (group j of the rail dimension, island s of the island dimension).

Stage 3 (global selection): a candidate (allocation, rail template, pipeline depth P) is
stitched into one IR: each sketch's byte range [lo, hi) of every chunk is cut into P parts
(``part``), a stage's operation depends on the operation that delivered that part to the
sender. Candidates are simulated at ``size`` (default 1 GB): first every allocation x template
at P = COARSE_P, then a P sweep for the best COARSE_KEEP of them; the fastest is kept (ties:
first candidate in a fixed order), so the result is deterministic. ReduceScatter reverses the
best AllGather candidates (:func:`reverse_to_reducescatter`).
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm
from typing import Any

from ...collective import CollKind, Collective
from ...errors import CollsynthError
from ...schedule.ir import OpKind, Schedule, ScheduleBuilder
from ...topology.model import Topology
from .. import register
from .symmetry import Fabric, detect

QUANT = 64
PIPELINES = (1, 2, 4, 8, 16)
REVERSE_TOP = 3
COARSE_P = 2
COARSE_KEEP = 2
DEFAULT_SIZE = 1e9
SKETCHES = (("rail", "island"), ("island", "rail"))


def sketch_loads(sketch: tuple[str, ...], sizes: dict[str, int]) -> dict[str, int]:
    """Pieces each GPU receives per dimension for one unit of every rank's data."""
    loads = {d: 0 for d in sizes}
    held = 1
    for d in sketch:
        loads[d] += (sizes[d] - 1) * held
        held *= sizes[d]
    return loads


def allocate(loads: list[dict[str, int]], caps: dict[str, Fraction]) -> tuple[list[Fraction],
                                                                             Fraction]:
    """Exact min-max chunk allocation over two dimensions: (fractions per sketch, time/unit)."""
    dims = sorted(caps)
    if len(dims) != 2:
        raise CollsynthError("syccl: chunk allocation needs exactly two dimensions")
    d1, d2 = dims
    K = len(loads)

    def cost(t: list[Fraction]) -> Fraction:
        return max(sum(t[k] * loads[k][d] for k in range(K)) / caps[d] for d in dims)

    cands: list[list[Fraction]] = []
    for a in range(K):
        cands.append([Fraction(int(k == a)) for k in range(K)])
    for a in range(K):
        for b in range(a + 1, K):
            la, lb = loads[a], loads[b]
            den = Fraction(lb[d1] - la[d1]) / caps[d1] + Fraction(la[d2] - lb[d2]) / caps[d2]
            if den == 0:
                continue
            ta = (Fraction(lb[d1]) / caps[d1] - Fraction(lb[d2]) / caps[d2]) / den
            if 0 <= ta <= 1:
                t = [Fraction(0)] * K
                t[a], t[b] = ta, 1 - ta
                cands.append(t)
    best = min(cands, key=cost)   # min keeps the first of equal costs
    return best, cost(best)


def _template(kind: str, g: int) -> list[tuple[int, int, int, int]]:
    """All-gather on positions 0..g-1: (src, dst, origin, index of the delivering transfer)."""
    out: list[tuple[int, int, int, int]] = []
    if kind == "direct" or g <= 2:
        for o in range(g):
            for b in range(g):
                if b != o:
                    out.append((o, b, o, -1))
        return out
    for o in range(g):
        prev = -1
        for h in range(g - 1):
            a, b = (o + h) % g, (o + h + 1) % g
            out.append((a, b, o, prev))
            prev = len(out) - 1
    return out


def build(topology: Topology, collective: Collective, fab: Fabric, fracs: list[Fraction],
          rail_kind: str, pipeline: int, meta: dict) -> Schedule:
    C = collective.chunks_per_rank
    q = [f.limit_denominator(QUANT) for f in fracs]
    q[-1] = 1 - sum(q[:-1])
    den = lcm(*[x.denominator for x in q]) * pipeline
    groups = {"island": fab.islands, "rail": fab.rails}
    templ = {"island": _template("direct", fab.island_size),
             "rail": _template(rail_kind, fab.servers)}
    routes = {"island": fab.island_routes, "rail": fab.net_routes}
    b = ScheduleBuilder(topology, collective, meta)
    lo = Fraction(0)
    n = topology.num_ranks
    steps: list[int] = []   # dependency depth of every op (its step)
    for k, sketch in enumerate(SKETCHES):
        if q[k] == 0:
            continue
        hi = lo + q[k]
        plo, phi = int(lo * den), int(hi * den)
        step = (phi - plo) // pipeline
        for p in range(pipeline):
            part = (plo + p * step, plo + (p + 1) * step if p < pipeline - 1 else phi, den)
            # have[r]: chunk -> op that delivered this part to r (-1: initial)
            have: list[dict[int, int]] = [{c: -1 for c in range(r * C, (r + 1) * C)}
                                          for r in range(n)]
            for si, dim in enumerate(sketch):
                base = si * max(fab.servers, fab.island_size)
                start = [dict(h) for h in have]
                for grp in groups[dim]:
                    ids: list[dict[int, int]] = []
                    for (a, bb, o, prev) in templ[dim]:
                        src, dst, org = grp[a], grp[bb], grp[o]
                        got: dict[int, int] = {}
                        for c in sorted(start[org]):
                            dep = ids[prev][c] if prev >= 0 else start[src][c]
                            # step: stage base + hop depth inside the stage (ring hops)
                            st = base if prev < 0 else steps[ids[prev][c]] + 1
                            op = b.add(src, dst, c, route=routes[dim][(src, dst)],
                                       kind=OpKind.COPY, deps=() if dep < 0 else (dep,),
                                       part=part, step=st)
                            steps.append(st)
                            got[c] = op
                            have[dst][c] = op
                        ids.append(got)
        lo = hi
    return b.build()


def reverse_to_reducescatter(ag: Schedule, collective: Collective) -> Schedule:
    """ReduceScatter as the reverse of an AllGather schedule.

    Each AllGather (chunk, part) forms a broadcast tree from the chunk's owner (every other rank
    receives it exactly once). Reversed, every edge becomes a ``reduce`` from the child to the
    parent that waits for the reversed edges of the child's own children, along the reversed
    route (each link replaced by the link between the same nodes in the other direction).
    """
    t = ag.topology
    back: dict[tuple[int, int], int] = {}
    for lk in sorted(t.links, key=lambda k: (-k.bw, k.id)):
        back.setdefault((lk.src, lk.dst), lk.id)
    N = ag.num_ops
    children: list[list[int]] = [[] for _ in range(N)]
    for i in range(N):
        for d in ag.deps(i):
            children[int(d)].append(i)
    smax = int(ag.step.max()) if ag.step is not None and N else 0
    b = ScheduleBuilder(t, collective, dict(ag.meta))
    for new in range(N):
        i = N - 1 - new
        route = []
        for lid in ag.route(i)[::-1]:
            lk = t.links[int(lid)]
            r = back.get((lk.dst, lk.src))
            if r is None:
                raise CollsynthError(f"syccl: reduce-scatter needs link {t.link_label(int(lid))} "
                                     f"in both directions")
            route.append(r)
        b.add(int(ag.dst[i]), int(ag.src[i]), int(ag.chunk[i]), route=route, kind=OpKind.REDUCE,
              deps=[N - 1 - ch for ch in children[i]],
              part=(int(ag.part_lo[i]), int(ag.part_hi[i]), int(ag.part_den[i])),
              step=smax - int(ag.step[i]))
    return b.build()


@register("syccl", collectives={CollKind.ALLGATHER, CollKind.REDUCESCATTER},
          summary="SyCCL-style symmetric decomposition: island/rail sketches, chunk allocation, "
                  "replicated sub-schedules, simulator selection (AllGather, ReduceScatter by "
                  "reversal; first version)",
          options={"workers": "worker processes (accepted; candidates are scored serially)"},
          size_aware=True)
def syccl(topology: Topology, collective: Collective, size: float | None = None,
          workers: Any = 1) -> Schedule:
    """SyCCL symmetric decomposition."""
    from ...sim import simulate

    try:
        w = int(workers)
    except (TypeError, ValueError):
        raise CollsynthError(f"syccl: workers {workers!r} is not an integer") from None
    if w < 1:
        raise CollsynthError(f"syccl: workers {w} must be at least 1")
    fab = detect(topology)
    reducing = collective.kind is CollKind.REDUCESCATTER
    ag = Collective(CollKind.ALLGATHER, collective.num_ranks, collective.chunks_per_rank)
    sizes = {"island": fab.island_size, "rail": fab.servers}
    caps = {"island": Fraction(fab.island_bw), "rail": Fraction(fab.net_bw)}
    loads = [sketch_loads(sk, sizes) for sk in SKETCHES]
    opt, unit = allocate(loads, caps)
    allocs = [("balanced", opt)]
    for k, sk in enumerate(SKETCHES):
        single = [Fraction(int(i == k)) for i in range(len(SKETCHES))]
        if single != opt:
            allocs.append((">".join(sk), single))
    rail_kinds = ["direct"] + (["ring"] if fab.servers > 2 else [])
    score_size = float(size) if size is not None else DEFAULT_SIZE
    best = None
    tried = []

    def score(name: str, fr: list[Fraction], rk: str, P: int) -> float:
        meta = {"syccl": {**fab.describe(), "allocation": name,
                          "fractions": [str(f) for f in fr], "rail_template": rk,
                          "pipeline": P, "sketches": [">".join(s) for s in SKETCHES]}}
        s = build(topology, ag, fab, fr, rk, P, meta)
        tm = simulate(s, score_size).time_s
        tried.append((tm, len(tried), s))
        return tm

    # two-step selection: coarse (every allocation x rail template at pipeline COARSE_P), then
    # a pipeline sweep for the best COARSE_KEEP combinations, stopping when deeper pipelining
    # stops helping
    coarse = []
    for name, fr in allocs:
        for rk in rail_kinds:
            coarse.append((score(name, fr, rk, COARSE_P), len(coarse), name, fr, rk))
    for _, _, name, fr, rk in sorted(coarse, key=lambda x: (x[0], x[1]))[:COARSE_KEEP]:
        prev = None
        for P in PIPELINES:
            if P == COARSE_P:
                tm = next(x[0] for x in coarse if x[2] == name and x[4] == rk)
            else:
                tm = score(name, fr, rk, P)
            if prev is not None and tm > prev and P > COARSE_P:
                break
            prev = tm
    if reducing:
        # rank the candidates by their AllGather time, reverse the best few and score those
        for tm, idx, s in sorted(tried, key=lambda x: (x[0], x[1]))[:REVERSE_TOP]:
            rs = reverse_to_reducescatter(s, collective)
            rt = simulate(rs, score_size).time_s
            if best is None or rt < best[0]:
                best = (rt, rs)
    else:
        best = min(tried, key=lambda x: (x[0], x[1]))[::2]
    sched = best[1]
    sched.meta["syccl"]["scored_size"] = score_size
    sched.meta["syccl"]["candidates"] = len(tried)
    return sched
