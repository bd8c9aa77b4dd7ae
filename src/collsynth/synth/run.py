""":func:`synthesize`: run a registered algorithm by name with validated, typed options, within
a time limit, and give its schedule per-link orders planned at the message size (of the
schedules an algorithm could not tell apart, the one that realizes fastest with them);
:func:`synthesize_alternatives`: the algorithm's schedules as they are, for callers that order
them per size themselves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from .. import deadline
from ..collective import Collective
from ..errors import CollsynthError
from ..schedule.ir import Schedule
from ..schedule.timing import collect_timing
from ..topology.model import Topology
from .options import plan_size
from .order import fastest
from .registry import Alternatives, get


def synthesize(
    name: str,
    topology: Topology,
    collective: Collective,
    *,
    size: float | None = None,
    budget_s: float | str | None = None,
    link_order: bool = True,
    **options: Any,
) -> Schedule:
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
    """
    with _time_limit(name, budget_s):
        schedules = _synthesize(name, topology, collective, size, options)
        if link_order:
            return fastest(schedules, plan_size(size, name))
        return schedules[0]


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
        return _synthesize(name, topology, collective, size, options)


@contextmanager
def _time_limit(name: str, budget_s: float | str | None) -> Iterator[None]:
    """The synthesis time limit (``budget_s``, else :func:`collsynth.deadline.each`), checked
    once on entry."""
    budget = deadline.parse_limit(budget_s if budget_s is not None else deadline.each())
    with deadline.time_limit(budget, what=f"synthesis with {name}"):
        deadline.check(f"synthesis with {name}")
        yield


def _synthesize(
    name: str, topology: Topology, collective: Collective, size: float | None, options: dict
) -> tuple[Schedule, ...]:
    algo = get(name)
    if collective.kind not in algo.collectives:
        raise CollsynthError(
            f"algorithm {name!r} does not support {collective.kind.value} "
            f"(it supports {', '.join(sorted(k.value for k in algo.collectives))})"
        )
    values = algo.resolve_options(options)
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
