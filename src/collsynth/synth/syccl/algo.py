"""``syccl`` — SyCCL-style symmetric decomposition (Cao et al., "SyCCL: Exploiting Symmetry
for Efficient Collective Communication Scheduling", ACM SIGCOMM 2025): AllGather, ReduceScatter
(by reversal) and AllToAll on island x rail fabrics. See ``docs/syccl.md``.

Stage 1 (sketches): a sketch is an order of the dimensions, one stage per dimension.
:mod:`.sketch` enumerates the candidate sketches with the paper's pruning rules; for AllGather
the survivors are ``rail>island`` (first gather along the rail group, GPU j of every island,
then spread the S pieces each GPU holds over its island) and ``island>rail``. Per unit of a
rank's data a GPU receives

* ``rail>island``: network ``S-1`` pieces, island ``S(m-1)`` pieces;
* ``island>rail``: network ``m(S-1)`` pieces, island ``m-1`` pieces.

In general a stage on groups of size g, after earlier stages of sizes g_1..g_k, loads each GPU
with ``(g-1) * g_1 * ... * g_k`` pieces on its dimension. AllToAll sketches route each block
along one dimension per stage (the block moves to the group member whose coordinate on that
dimension is its destination's): ``rail>island`` is PXN (send over the rail to the destination
island's rail mate, which forwards inside its island), ``island>rail`` the reverse; both load a
GPU with ``m(S-1)`` network and ``S(m-1)`` island blocks.

**Chunk allocation.** Every rank's data is split into fractions t_k over the sketches (sum 1).
With per-GPU capacities c_d (island ingress bandwidth; network share) the time is
``T(t) = max_d sum_k t_k L_{k,d} / c_d``; we minimize T over the simplex exactly (rational
arithmetic). With two dimensions an optimum uses at most two sketches, so the candidates are the
single sketches and, for each pair (a, b), the fraction equalising both dimensions
(w_d = u_d: each dimension's workload proportional to its capacity):

    t_a = (L_b,1/c_1 - L_b,2/c_2) / ((L_b,1 - L_a,1)/c_1 + (L_a,2 - L_b,2)/c_2),  t_b = 1 - t_a

kept when 0 <= t_a <= 1. The fraction is then rounded to a multiple of 1/QUANT for the IR.

Stage 2 (per sub-demand): the all-gather inside one group of each dimension is synthesized once
as a template on group positions (``shift``: every member sends to every other member in one
hop, in pairwise-shift order, step ``(b - o) mod g - 1``, the order TE-CCL's MILP finds on these
groups; ``ring``: a ring on positions 0..g-1; ``milp``: TE-CCL's epoch MILP solution of the
sub-demand, :mod:`.stage2`, with ``stage2=milp``) and replicated over every isomorphic group by
mapping positions to ranks (group j of the rail dimension, island s of the island dimension).
The AllToAll sub-demand of a group is the one-hop exchange (pairwise-shift order).

Stage 3 (global selection): a candidate (allocation, rail template, pipeline depth P) is
stitched into one IR with numpy (``ScheduleBuilder.add_many`` with byte ranges): each sketch's
byte range [lo, hi) of every chunk is cut into P parts, a stage's operation depends on the
operation that delivered that part to the sender. Candidates are simulated at ``size``
(default 1 GB): every allocation x template at P = COARSE_P, then a P sweep for the best
COARSE_KEEP of them (stopping when deeper pipelining stops helping, or at the op budget);
the fastest is kept (ties: first candidate in a fixed order), so the result is deterministic.
ReduceScatter reverses the best AllGather candidate and orders the reduces by its simulated
timeline run backwards (:func:`reverse_to_reducescatter`). AllToAll also scores the one-stage
sketch (the ``direct`` baseline schedule).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from ...topology.paths import RouteTable
from .. import register
from ..options import Option, plan_size
from .allocation import QUANT, allocate, quantize, sketch_loads
from .build import Plan, Template, build, direct_candidate, reverse_to_reducescatter
from .sketch import enumerate_sketches
from .symmetry import Fabric, detect

__all__ = [
    "QUANT",
    "allocate",
    "build",
    "direct_candidate",
    "quantize",
    "reverse_to_reducescatter",
    "sketch_loads",
    "syccl",
]

PIPELINES = (1, 2, 4, 8, 16)
COARSE_P = 2
COARSE_KEEP = 1
#: most operations a candidate may have (bounds memory and simulation time at 512+ GPUs)
OP_BUDGET = 3_000_000
#: relative improvement a pipeline step must bring for the sweep to go on
MIN_GAIN = 0.01
SKETCHES = (("rail", "island"), ("island", "rail"))


_POOL: dict = {}  # the forked scorers' view of the candidates (set before the pool forks)


def _pool_time(i: int) -> float:
    make, cands, size = _POOL["make"], _POOL["cands"], _POOL["size"]
    from ...sim import simulate

    return simulate(make(*cands[i]), size, order="plan").time_s


def _times_in_pool(make, cands: list[tuple], size: float, workers: int) -> list[float]:
    """Simulated times of ``cands`` (``make`` arguments) in a fork pool, in list order."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    _POOL.update(make=make, cands=cands, size=size)
    try:
        ctx = mp.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(cands)), mp_context=ctx) as pool:
            return list(pool.map(_pool_time, range(len(cands))))
    finally:
        _POOL.clear()


class _SubDemands:
    """Stage-2 MILP sub-demands of the candidates: one id per distinct MILP (dimension + epoch
    grid, :func:`.stage2.subdemand_key`), solved once in the process pool and shared by every
    candidate, stage and group that needs it."""

    def __init__(self, plan: Plan, sketches: list[tuple[str, ...]], size: float, workers: int):
        self.plan, self.sketches, self.size, self.workers = plan, sketches, size, workers
        self.ids: dict[tuple, int] = {}
        self.info: list[dict] = []
        self.pending: list[tuple[int, tuple]] = []

    def specs(self, fr: list[Fraction], P: int, mult: float) -> tuple:
        """Per-sketch, per-stage template ids of the MILP candidate (fractions ``fr``, pipeline
        ``P``) at epoch ``mult`` x fast: the stage's sub-demand is the all-gather in one group
        of one item per member, an item being what a member holds entering the stage (its
        fraction of a rank's share, one pipeline part, times the group sizes of the earlier
        stages)."""
        from .stage2 import MILP_MAX_GROUP, subdemand_key

        plan = self.plan
        q = quantize(fr)
        share = self.size / plan.topology.num_ranks
        out: list[tuple[str | int, ...]] = []
        for k, sk in enumerate(self.sketches):
            if q[k] == 0:
                out.append(())
                continue
            held = 1
            stages: list[str | int] = []
            for d in sk:
                g = plan.groups[d].shape[1]
                if g > MILP_MAX_GROUP:
                    stages.append("shift")
                else:
                    cb = float(q[k]) * held * share / P
                    key = subdemand_key(plan.sub_topology(d), d, cb, mult)
                    if key not in self.ids:
                        self.ids[key] = len(self.info)
                        self.info.append({})
                        self.pending.append((self.ids[key], (d, plan.sub_topology(d), cb, mult)))
                    stages.append(self.ids[key])
                held *= g
            out.append(tuple(stages))
        return tuple(out)

    def solve(self) -> float:
        """Solve the pending sub-demands (pool order fixed); returns the wall time."""
        import time

        from .stage2 import solve_many

        t0 = time.perf_counter()
        jobs, self.pending = self.pending, []
        for (sid, job), (rows, info) in zip(jobs, solve_many([j for _, j in jobs], self.workers)):
            if rows is not None:
                try:
                    self.plan.milp[sid] = Template("milp", self.plan.groups[job[0]].shape[1], rows)
                except CollsynthError as e:
                    info = {**info, "error": str(e)}
            self.info[sid] = {"id": sid, **info}
        return time.perf_counter() - t0


@register(
    "syccl",
    collectives={CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL},
    summary="SyCCL-style symmetric decomposition: island/rail sketches, chunk allocation, "
    "replicated sub-schedules, simulator selection (AllGather, ReduceScatter by "
    "reversal, AllToAll with PXN-style two-stage sketches)",
    options=(
        Option(
            "workers",
            "int",
            1,
            minimum=1,
            shorthand=True,
            unit="processes",
            help="worker processes for the stage-2 sub-MILPs and candidate scoring",
        ),
        Option(
            "stage2",
            "choice",
            "template",
            choices=("template", "milp"),
            help="template (direct/ring sub-schedules) or milp (also TE-CCL's epoch "
            "MILP per distinct sub-demand, groups <= 16: coarse epoch to "
            "filter, fine epoch to select)",
        ),
        Option(
            "fine_keep",
            "int",
            1,
            minimum=1,
            words=("all",),
            help="stage2=milp: coarse-epoch candidates re-solved at the fine epoch "
            "(all: no filtering)",
        ),
    ),
    size_aware=True,
    reference="Cao et al., 'SyCCL: Exploiting Symmetry for Efficient Collective "
    "Communication Scheduling', ACM SIGCOMM 2025",
)
def syccl(
    topology: Topology,
    collective: Collective,
    size: float | None = None,
    workers: int = 1,
    stage2: str = "template",
    fine_keep: int | str = 1,
) -> Schedule:
    """SyCCL symmetric decomposition; options arrive typed (see the declaration above)."""
    w = int(workers)
    keep = None if fine_keep == "all" else int(fine_keep)
    routes = RouteTable(topology)  # shared by detection and the direct candidate
    fab = detect(topology, routes)
    search = _stage1(topology, collective, fab, size, w, stage2)
    a2a = collective.kind is CollKind.ALLTOALL
    rail_kinds = ["shift"] + (["ring"] if fab.servers > 2 and not a2a else [])
    # (AllToAll stages are one-hop pairwise-shift exchanges whatever the rail template)
    coarse = _score_coarse(search, rail_kinds)
    if stage2 == "milp" and not a2a:
        _score_milp(search, keep, coarse)
    _sweep_pipelines(search, coarse)
    return _record(_chosen(search, topology, collective, routes), search)


class _Search:
    """The candidates of stage 3: builds them, simulates them at ``size`` and keeps the first
    eligible one of least time (``kept``: its key, schedule and simulated op finish times)."""

    def __init__(
        self,
        plan: Plan,
        sketches: list[tuple[str, ...]],
        allocs: list[tuple[str, list[Fraction]]],
        common: dict,
        size: float,
        workers: int,
    ):
        self.plan, self.sketches, self.allocs, self.common = plan, sketches, allocs, common
        self.size, self.workers = size, workers
        # (time, order, candidate, eligible): coarse-epoch MILP candidates only filter
        self.tried: list[tuple[float, int, Any, bool]] = []
        self.kept: dict = {}

    def make(self, name: str, fr: list[Fraction], rk: Any, P: int) -> Schedule:
        """The schedule of candidate (allocation ``name`` with fractions ``fr``, rail template
        ``rk``, pipeline depth ``P``)."""
        meta = {
            "syccl": {
                **self.common,
                "allocation": name,
                "fractions": [str(f) for f in fr],
                "rail_template": rk if isinstance(rk, str) else "milp",
                "pipeline": P,
            }
        }
        if not isinstance(rk, str):
            meta["syccl"]["milp_subdemands"] = [list(x) for x in rk[2]]
        return build(self.plan, self.sketches, fr, rk, P, meta)

    def score(self, name: str, fr: list[Fraction], rk: Any, P: int, eligible: bool = True) -> float:
        """Simulated time of one candidate; an eligible one faster than the kept is kept."""
        from ...sim import simulate

        s = self.make(name, fr, rk, P)
        res = simulate(s, self.size, order="plan")
        tm = res.time_s
        if eligible and (not self.kept or tm < self.kept["time"]):
            self.kept.update(key=(name, fr, rk, P), finish=res.op_finish_s, sched=s, time=tm)
        self.tried.append((tm, len(self.tried), (name, fr, rk, P), eligible))
        return tm

    def score_all(
        self, cands: list[tuple[str, list[Fraction], Any, int]], eligible: bool = True
    ) -> list[float]:
        """``score`` for each candidate (name, fr, rk, P), in order. With ``workers`` > 1 (and
        fork available) they are built and simulated in a process pool that returns only the
        times; the best of them is then rebuilt and re-simulated here if it beats the kept
        one (its schedule and op finish times are needed). Same times, same order, same
        choice as one by one."""
        import multiprocessing as mp

        from ...sim import simulate

        w = self.workers
        if w == 1 or len(cands) < 2 or "fork" not in mp.get_all_start_methods():
            return [self.score(*c, eligible=eligible) for c in cands]
        times = _times_in_pool(self.make, cands, self.size, w)
        j = min(range(len(cands)), key=lambda i: (times[i], i))  # first of least time
        if eligible and (not self.kept or times[j] < self.kept["time"]):
            s = self.make(*cands[j])
            res = simulate(s, self.size, order="plan")
            self.kept.update(key=cands[j], finish=res.op_finish_s, sched=s, time=times[j])
        for c, tm in zip(cands, times):
            self.tried.append((tm, len(self.tried), c, eligible))
        return times

    def fits(self, fr, rk, P) -> bool:
        """Whether the candidate stays within :data:`OP_BUDGET` operations."""
        return self.plan.ops_per_unit(self.sketches, fr, rk) * P <= OP_BUDGET

    def p0(self, fr, rk) -> int:
        """The first pipeline depth of a candidate: ``COARSE_P``, or 1 over the budget."""
        return COARSE_P if self.fits(fr, rk, COARSE_P) else 1


def _allocations(
    sketches: list[tuple[str, ...]],
    loads: list[dict[str, int]],
    caps: dict[str, Fraction],
    a2a: bool,
) -> list[tuple[str, list[Fraction]]]:
    """The chunk allocations to score: the balanced optimum, each sketch alone and, for
    AllToAll, an even split."""
    opt, _ = allocate(loads, caps)
    allocs = [("balanced", opt)]
    for k, sk in enumerate(sketches):
        single = [Fraction(int(i == k)) for i in range(len(sketches))]
        if single != opt:
            allocs.append((">".join(sk), single))
    if a2a:
        half = [Fraction(1, len(sketches))] * len(sketches)
        if all(half != fr for _, fr in allocs):
            allocs.append(("even", half))
    return allocs


def _stage1(
    topology: Topology,
    collective: Collective,
    fab: Fabric,
    size: float | None,
    workers: int,
    stage2: str,
) -> _Search:
    """Stage 1: the sketches, their per-dimension loads and the chunk allocations to score."""
    a2a = collective.kind is CollKind.ALLTOALL
    base = (
        collective
        if a2a
        else Collective(CollKind.ALLGATHER, collective.num_ranks, collective.chunks_per_rank)
    )
    sizes = {"island": fab.island_size, "rail": fab.servers}
    caps = {"island": Fraction(fab.island_bw), "rail": Fraction(fab.net_bw)}
    sk_info = enumerate_sketches(sizes, CollKind.ALLTOALL if a2a else CollKind.ALLGATHER, caps=caps)
    sketches = [s.dims for s in sk_info]
    loads = [sketch_loads(sk, sizes, base.kind) for sk in sketches]
    allocs = _allocations(sketches, loads, caps, a2a)
    score_size = plan_size(size, "syccl")
    plan = Plan(topology, base, fab)
    common = {
        **fab.describe(),
        "sketches": [">".join(s) for s in sketches],
        "sketches_enumerated": [s.describe() for s in sk_info],
        "stage2": stage2,
    }
    return _Search(plan, sketches, allocs, common, score_size, workers)


def _score_coarse(search: _Search, rail_kinds: list[str]) -> list[tuple]:
    """Stage 3, first step: every allocation x rail template at pipeline ``COARSE_P``; returns
    ``(time, order, name, fractions, rail template, P)`` per candidate."""
    first = [(name, fr, rk, search.p0(fr, rk)) for name, fr in search.allocs for rk in rail_kinds]
    return [(tm, i, *c) for i, (c, tm) in enumerate(zip(first, search.score_all(first)))]


def _score_milp(search: _Search, keep: int | None, coarse: list[tuple]) -> None:
    """Stage 2 with ``stage2=milp``, two-step epoch duration: (a) every allocation's
    sub-demands at the coarse epoch, candidates scored (filter only); (b) the best ``keep``
    re-solved at the fine epoch and scored as real candidates (appended to ``coarse``)."""
    from .stage2 import COARSE_MULT, FINE_MULT

    subs = _SubDemands(search.plan, search.sketches, search.size, search.workers)
    mc = []
    for name, fr in search.allocs:
        P0 = search.p0(fr, "shift")
        mc.append((name, fr, ("milp", "coarse", subs.specs(fr, P0, COARSE_MULT)), P0))
    t_coarse = subs.solve()
    c_scores = [(tm, i) for i, tm in enumerate(search.score_all(mc, eligible=False))]
    survivors = sorted(c_scores)[:keep] if keep is not None else c_scores
    surv = sorted(i for _, i in survivors)  # fixed (allocation) order
    fc = []
    for i in surv:
        name, fr, _, P0 = mc[i]
        fc.append((name, fr, ("milp", "fine", subs.specs(fr, P0, FINE_MULT)), P0))
    t_fine = subs.solve()
    f_scores = search.score_all(fc)
    for (name, fr, rk, P0), tm in zip(fc, f_scores):
        coarse.append((tm, len(coarse), name, fr, rk, P0))
    search.common["milp"] = {
        "coarse_epoch_multiplier": COARSE_MULT,
        "fine_epoch_multiplier": FINE_MULT,
        "fine_keep": "all" if keep is None else keep,
        "subdemands": subs.info,
        "coarse": [{"allocation": mc[i][0], "time_s": tm} for tm, i in c_scores],
        "fine": [{"allocation": c[0], "time_s": tm} for c, tm in zip(fc, f_scores)],
        "solve_wall_s": {"coarse": t_coarse, "fine": t_fine},
    }


def _sweep_pipelines(search: _Search, coarse: list[tuple]) -> None:
    """Stage 3, second step: a pipeline sweep for the best ``COARSE_KEEP`` candidates."""
    for tm0, _, name, fr, rk, P0 in sorted(coarse, key=lambda x: (x[0], x[1]))[:COARSE_KEEP]:
        # deeper pipelines while they help by more than MIN_GAIN (and fit the op budget);
        # shallower ones only when the first deeper one did not help
        times = {P0: tm0}
        i0 = PIPELINES.index(P0)
        for P in PIPELINES[i0 + 1 :]:
            if not search.fits(fr, rk, P):
                break
            times[P] = search.score(name, fr, rk, P)
            if times[P] >= times[PIPELINES[PIPELINES.index(P) - 1]] * (1 - MIN_GAIN):
                break
        if len(times) <= 2 and min(times, key=lambda p: (times[p], p)) == P0:
            for P in PIPELINES[:i0][::-1]:
                times[P] = search.score(name, fr, rk, P)
                if times[P] >= times[PIPELINES[PIPELINES.index(P) + 1]] * (1 - MIN_GAIN):
                    break


def _chosen(
    search: _Search, topology: Topology, collective: Collective, routes: RouteTable
) -> Schedule:
    """The kept candidate (the first eligible one of least time) as the answer: ReduceScatter
    runs it backwards; AllToAll takes the one-stage sketch instead when that is faster."""
    from ...sim import simulate

    kept = search.kept
    best_t = kept["time"]
    if collective.kind is CollKind.REDUCESCATTER:
        # the best AllGather run backwards: its simulated timeline, reversed, plans the order
        return reverse_to_reducescatter(kept["sched"], collective, kept["finish"])
    sched = kept["sched"]
    if collective.kind is CollKind.ALLTOALL:
        # the one-stage sketch: every block straight to its destination (``direct``)
        from .. import synthesize

        d = direct_candidate(topology, collective, routes)
        if d is None:
            d = synthesize("direct", topology, collective, link_order=False)
        dt = simulate(d, search.size, order="plan").time_s
        search.tried.append((dt, len(search.tried), ("direct",), True))
        if dt < best_t:
            sched = d.with_meta(
                syccl={
                    **search.common,
                    "allocation": "direct",
                    "fractions": [],
                    "rail_template": None,
                    "pipeline": 1,
                }
            )
    return sched


def _record(sched: Schedule, search: _Search) -> Schedule:
    """Record the selection (MILP sub-demands, scoring size, candidates) in ``meta``."""
    if "milp" in search.common:
        sched.meta["syccl"]["milp"] = search.common["milp"]
    sched.meta["syccl"]["scored_size"] = search.size
    sched.meta["syccl"]["candidates"] = len(search.tried)
    sched.meta["syccl"]["workers"] = search.workers
    return sched
