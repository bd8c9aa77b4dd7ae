"""Compare algorithms across data sizes: synthesize, verify, simulate, and relate to the bound."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import deadline
from ..bound import bound
from ..collective import Collective
from ..errors import CollsynthError
from ..parallel import Pool, run_cases
from ..schedule.ir import Schedule
from ..sim import REALIZED, simulate
from ..synth import load_all, options_for, synthesize_alternatives
from ..synth.order import fastest, without_chosen_order
from ..topology.model import Topology
from ..verify import ensure_verified


@dataclass
class Row:
    algo: str
    size_bytes: float
    time_s: float
    algbw_Bps: float  # bytes/s, like every bandwidth in collsynth's JSON
    busbw_Bps: float
    bound_time_s: float
    bound_kind: str
    ratio_to_bound: float  # time / bound (>= 1; 1 is optimal)
    synth_wall_s: float  # wall clock: in the row's ``timing`` block of the JSON
    ops: int
    chunks_per_rank: int
    model: str = "fair"  # the simulator's link model ``time_s`` is in (``MODELS``)
    planned_time_s: float | None = None  # the same schedule in the planned order, if asked

    def to_dict(self, timing: bool = True) -> dict:
        """The row; its wall-clock figure sits in a ``timing`` block (left out without
        ``timing``, so the same inputs give the same bytes)."""
        d = asdict(self)
        if d["planned_time_s"] is None:
            del d["planned_time_s"]
        wall = d.pop("synth_wall_s")
        if timing:
            d["timing"] = {"synth_wall_s": wall}
        return d


@dataclass
class Comparison:
    topology: str
    collective: str
    sizes: list[float]
    rows: list[Row] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    model: str = REALIZED  # the simulator's link model of every row's ``time_s``

    def best_rows(self) -> list[Row]:
        """Per size, the fastest algorithm's row."""
        best: dict[float, Row] = {}
        for r in self.rows:
            if r.size_bytes not in best or r.time_s < best[r.size_bytes].time_s:
                best[r.size_bytes] = r
        return [best[s] for s in self.sizes if s in best]

    def to_dict(self, best_only: bool = False, timing: bool = True) -> dict:
        rows = self.best_rows() if best_only else self.rows
        return {
            "topology": self.topology,
            "collective": self.collective,
            "sizes": self.sizes,
            "model": self.model,
            "rows": [r.to_dict(timing) for r in rows],
            "skipped": self.skipped,
        }


class OutOfTime(str):
    """Why an algorithm was skipped, when the time limit ended it (a ``str``: it pickles,
    prints and serializes as its text)."""


def applicable(collective: Collective) -> list[str]:
    """Names of the registered algorithms that support this collective's kind."""
    return sorted(name for name, a in load_all().items() if collective.kind in a.collectives)


def resolve_algos(spec: str | Sequence[str], collective: Collective) -> tuple[list[str], bool]:
    """``all``, ``best`` or a comma list -> (algorithm names, best_only)."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise CollsynthError("no algorithm given (use e.g. ring,tree or all or best)")
    if names in (["all"], ["best"]):
        algos = applicable(collective)
        if not algos:
            raise CollsynthError(f"no algorithm supports {collective.kind.value}")
        return algos, names == ["best"]
    known = load_all()
    for n in names:
        if n not in known:
            raise CollsynthError(f"unknown algorithm {n!r} (known: {', '.join(sorted(known))})")
    return names, False


def compare(
    topology: Topology,
    collective: Collective,
    sizes: Sequence[float],
    algos: Sequence[str],
    *,
    skip_failures: bool = True,
    on_step: Callable[[str], None] | None = None,
    options: dict[str, dict[str, str]] | None = None,
    keep: dict[tuple[str, float], Schedule] | None = None,
    pool: Pool | None = None,
    order: str = REALIZED,
    also_planned: bool = False,
) -> Comparison:
    """Synthesize, verify and simulate each algorithm at each size.

    An algorithm that cannot handle this topology (it raises a CollsynthError) is listed in
    ``skipped`` with its reason when ``skip_failures``; otherwise the error propagates.
    ``on_step`` hears ``"running ALGO"`` before (in this process) and ``"done ALGO"`` after
    each algorithm. With ``keep`` (a dict), the verified schedule used for each
    ``(algorithm, size)`` is stored there (one object shared by all sizes when the algorithm
    is not size-aware). ``pool``: where the algorithms run (:mod:`collsynth.parallel`; one
    case per algorithm, the same result either way). ``order``: the simulator's link model
    for ``time_s`` (default: the realized one, links shared fairly by connections that carry
    their messages in the schedule's link orders, as the executors and exporters post them);
    ``also_planned`` adds each schedule's time in the planned order (``planned_time_s``).
    Every schedule carries the link orders of its planned timing at the row's size
    (:mod:`collsynth.synth.order`).
    """
    result = Comparison(
        topology.name, collective.describe(), [float(s) for s in sizes], model=order
    )
    bounds = {s: bound(topology, collective, s) for s in result.sizes}
    cases = [
        (topology, collective, result.sizes, name, options_for(name, options or {}), bounds,
         skip_failures, keep is not None, order, also_planned)
        for name in algos
    ]  # fmt: skip
    names = list(algos)
    outs = run_cases(
        algorithm_case,
        cases,
        pool,
        on_start=(lambda i: on_step(f"running {names[i]}")) if on_step else None,
        on_done=(lambda i, done, total: on_step(f"done {names[i]}")) if on_step else None,
        warm=load_all,
    )
    for name, (rows, skipped, scheds) in zip(names, outs):
        result.rows.extend(rows)
        if skipped is not None:
            result.skipped.append({"algo": name, "reason": skipped})
        if keep is not None:
            for size, sched in scheds:  # one object for every size where it was made once
                keep[(name, size)] = sched
    timed_out = [s for s in result.skipped if isinstance(s["reason"], OutOfTime)]
    if not result.rows and timed_out:  # the time limit ended before any result: exit 4
        why = "; ".join(f"{s['algo']}: {s['reason']}" for s in timed_out[:3])
        raise deadline.TimeLimitError(
            f"the time limit ended before any algorithm produced a schedule ({why})"
        )
    return result


def algorithm_case(
    topology: Topology,
    collective: Collective,
    sizes: list[float],
    name: str,
    opts: dict,
    bounds: dict,
    skip_failures: bool,
    want_schedules: bool,
    order: str = REALIZED,
    also_planned: bool = False,
) -> tuple[list[Row], str | None, list[tuple[float, Schedule]]]:
    """One algorithm of a comparison at every size: (its rows, why it was skipped or None,
    the ``(size, schedule)`` it used when ``want_schedules``). A case of
    :func:`collsynth.parallel.run_cases`. An algorithm that is not size-aware is synthesized
    once and given the link orders of its planned timing at each size."""
    per_size = load_all()[name].size_aware
    cache: dict = {}
    rows: list[Row] = []
    used: list[tuple[float, Schedule]] = []
    used_last: tuple[Schedule, Schedule] | None = None
    for size in sizes:
        key = size if per_size else None
        if key not in cache:
            try:
                t0 = time.perf_counter()
                made = synthesize_alternatives(name, topology, collective, size=key, **opts)
                synth_s = time.perf_counter() - t0
                cache[key] = (made, synth_s)
            except CollsynthError as e:
                if not skip_failures:
                    raise
                out_of_time = isinstance(e, deadline.TimeLimitError)
                return rows, OutOfTime(e) if out_of_time else str(e), used
        base, synth_s = cache[key]
        sched = fastest(base, size)
        if used_last is not None and used_last[0] is base and _same_orders(sched, used_last[1]):
            sched = used_last[1]  # one object (and one exported file) while the order holds
        used_last = (base, sched)
        ensure_verified(sched)
        if want_schedules:
            used.append((size, sched))
        sim = simulate(sched, size, order=order)
        b = bounds[size]
        rows.append(
            Row(
                algo=name,
                size_bytes=size,
                time_s=sim.time_s,
                algbw_Bps=sim.algbw,
                busbw_Bps=sim.busbw,
                bound_time_s=b.time_s,
                bound_kind=b.kind,
                ratio_to_bound=sim.time_s / b.time_s if b.time_s > 0 else float("inf"),
                synth_wall_s=synth_s,
                ops=sched.num_ops,
                chunks_per_rank=sched.collective.chunks_per_rank,
                model=order,
                planned_time_s=simulate(without_chosen_order(sched), size, order="plan").time_s
                if also_planned
                else None,
            )
        )
    return rows, None, used


def _same_orders(a: Schedule, b: Schedule) -> bool:
    """Whether two orderings of one algorithm's schedule (same operations) have the same link
    orders and the same dependencies (the senders' pacing adds some)."""
    la, lb = a.link_order or {}, b.link_order or {}
    return (
        la.keys() == lb.keys()
        and all(np.array_equal(la[k], lb[k]) for k in la)
        and np.array_equal(a.dep_ptr, b.dep_ptr)
        and np.array_equal(a.dep_ids, b.dep_ids)
    )
