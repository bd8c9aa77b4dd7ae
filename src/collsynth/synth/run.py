""":func:`synthesize`: run a registered algorithm by name with validated, typed options, within
a time limit, and give its schedule per-link orders planned at the message size (of the
schedules an algorithm could not tell apart, the one that realizes fastest with them);
:func:`synthesize_alternatives`: the algorithm's schedules as they are, for callers that order
them per size themselves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Literal, cast, overload

from .. import deadline
from ..collective import Collective
from ..errors import CollsynthError
from ..schedule.compact import CompactSchedule, compact_or_reason
from ..schedule.ir import Schedule
from ..schedule.timing import collect_timing
from ..topology.model import Topology
from .options import plan_size
from .order import fastest
from .registry import Alternatives, get


@overload
def synthesize(
    name: str,
    topology: Topology,
    collective: Collective,
    *,
    size: float | None = ...,
    budget_s: float | str | None = ...,
    link_order: bool = ...,
    compact: Literal[False] = ...,
    **options: Any,
) -> Schedule: ...


@overload
def synthesize(
    name: str,
    topology: Topology,
    collective: Collective,
    *,
    size: float | None = ...,
    budget_s: float | str | None = ...,
    link_order: bool = ...,
    compact: Literal[True],
    **options: Any,
) -> CompactSchedule: ...


def synthesize(
    name: str,
    topology: Topology,
    collective: Collective,
    *,
    size: float | None = None,
    budget_s: float | str | None = None,
    link_order: bool = True,
    compact: bool = False,
    **options: Any,
) -> Schedule | CompactSchedule:
    """Run algorithm ``name``; the result carries ``meta['algorithm']``.

    ``options`` (strings from the command line or typed values) are parsed and validated
    against the algorithm's declaration; undeclared ones are refused. A size-aware algorithm
    plans for ``size`` bytes (:data:`~collsynth.synth.options.DEFAULT_SIZE` when ``None``);
    the others ignore it.
    ``budget_s`` (default: the limit of :func:`collsynth.deadline.each_synthesis`, if any)
    bounds the wall time (:func:`collsynth.deadline.time_limit`); solvers stop early and return
    their best schedule with ``meta.status = "time_limit"``, other work raises
    :class:`collsynth.deadline.TimeLimitError` when the limit passes.

    ``link_order`` (default): the schedule carries per-link orders taken from its planned
    timing at ``size`` (:mod:`collsynth.synth.order`), which the executors and exporters
    realize, so that its realized time is its planned one wherever one connection uses a link.
    Where the algorithm returns :class:`~collsynth.synth.registry.Alternatives` (schedules its
    own estimate cannot tell apart), each is ordered so and the fastest in the realized model
    is kept (:func:`collsynth.synth.order.fastest`; ``meta["alternatives"]`` gives every one's
    time).
    ``link_order=False`` gives the algorithm's schedule as it is (its first choice where it
    gave alternatives; callers that order per size themselves use
    :func:`synthesize_alternatives`).

    ``compact``: the result is a :class:`~collsynth.schedule.compact.CompactSchedule` (one
    operation per orbit of the fabric's symmetry group): made so by an algorithm that can
    (registered with ``compact_form``; ForestColl on large symmetric fabrics), else the
    explicit schedule's compact form (:func:`~collsynth.schedule.compact.compact_or_reason`),
    or a one-line error saying why there is none.
    """
    with _time_limit(name, budget_s):
        schedules = _synthesize(name, topology, collective, size, options, compact)
        got = fastest(schedules, plan_size(size, name)) if link_order else schedules[0]
        if compact:
            return as_compact(got, name)
        assert isinstance(got, Schedule)  # only asked-for compact forms are made
        return got


def as_compact(s: Schedule | CompactSchedule, name: str) -> CompactSchedule:
    """``s`` in its compact form (as it is when it has it), or one line saying why not."""
    if isinstance(s, CompactSchedule):
        return s
    got = compact_or_reason(s)
    if isinstance(got, str):
        raise CollsynthError(f"the {name} schedule has no compact form ({got})")
    return got


def synthesize_alternatives(
    name: str,
    topology: Topology,
    collective: Collective,
    *,
    size: float | None = None,
    budget_s: float | str | None = None,
    **options: Any,
) -> tuple[Schedule, ...]:
    """The schedules algorithm ``name`` gives (as :func:`synthesize` with ``link_order=False``):
    one, or its :class:`~collsynth.synth.registry.Alternatives` (its first choice first).
    :func:`collsynth.synth.order.fastest` orders them at a size and keeps the fastest."""
    with _time_limit(name, budget_s):
        return cast(tuple[Schedule, ...], _synthesize(name, topology, collective, size, options))


@contextmanager
def _time_limit(name: str, budget_s: float | str | None) -> Iterator[None]:
    """The synthesis time limit (``budget_s``, else :func:`collsynth.deadline.each`), checked
    once on entry."""
    budget = deadline.parse_limit(budget_s if budget_s is not None else deadline.each())
    with deadline.time_limit(budget, what=f"synthesis with {name}"):
        deadline.check(f"synthesis with {name}")
        yield


def _synthesize(
    name: str,
    topology: Topology,
    collective: Collective,
    size: float | None,
    options: dict,
    compact: bool = False,
) -> tuple[Any, ...]:  # Schedule, or CompactSchedule where ``compact`` asked for it
    algo = get(name)
    if collective.kind not in algo.collectives:
        raise CollsynthError(
            f"algorithm {name!r} does not support {collective.kind.value} "
            f"(it supports {', '.join(sorted(k.value for k in algo.collectives))})"
        )
    values = algo.resolve_options(options)
    if compact and algo.compact_form:
        values["compact"] = True
    if algo.size_aware:
        made = algo.func(topology, collective, size=plan_size(size, name), **values)
    else:
        made = algo.func(topology, collective, **values)
    meta: dict[str, Any] = {"algorithm": name}
    if options:
        meta["options"] = {k: values[k] for k in sorted(options)}
    schedules = made.schedules if isinstance(made, Alternatives) else (made,)
    out = []
    for schedule in schedules:
        schedule = schedule.with_meta(**meta)
        out.append(replace(schedule, meta=collect_timing(schedule.meta)))
    return tuple(out)
