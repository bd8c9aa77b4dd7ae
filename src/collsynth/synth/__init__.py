"""Synthesizers: modules that turn (topology, collective) into a schedule IR.

An algorithm registers itself with :func:`register`, declaring its options once
(:mod:`collsynth.synth.options`); :func:`synthesize` runs it by name with validated, typed
options. collsynth's own algorithms and third-party ones are found the same way, through the
``collsynth.algorithms`` entry point group (:mod:`collsynth.plugins`). An algorithm knows
nothing of export, simulation, printing or the command line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .. import deadline
from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..plugins import load_group
from ..schedule.ir import Schedule
from ..schedule.timing import collect_timing
from ..topology.model import Topology
from .options import DEFAULT_SIZE, Option, declare, parse_assignments, plan_size, resolve
from .order import with_link_orders

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "DEFAULT_SIZE",
    "Option",
    "get",
    "load_all",
    "options_for",
    "parse_options",
    "register",
    "shorthand_options",
    "synthesize",
]


@dataclass
class Algorithm:
    """A registered synthesizer: its function, the collectives it supports, its declared
    options and whether it adapts the schedule to the message size."""

    name: str
    func: Callable[..., Schedule]
    collectives: frozenset[CollKind]
    summary: str
    options: dict[str, Option] = field(default_factory=dict)
    size_aware: bool = False  # takes ``size=`` and adapts the schedule to the message size
    reference: str = ""  # the paper or system it implements (authors, title, venue)

    def resolve_options(self, given: dict[str, Any] | None) -> dict[str, Any]:
        """Every declared option's typed value (``given`` parsed and validated)."""
        return resolve(self.options, dict(given or {}), self.name)


ALGORITHMS: dict[str, Algorithm] = {}


def register(
    name: str,
    collectives: set[CollKind] | None = None,
    summary: str = "",
    options: Iterable[Option] | None = None,
    size_aware: bool = False,
    reference: str = "",
):
    """Decorator: register ``func(topology, collective, [size=,] **options) -> Schedule`` as
    algorithm ``name`` with its declared :class:`~collsynth.synth.options.Option` list."""

    def deco(func: Callable[..., Schedule]) -> Callable[..., Schedule]:
        ALGORITHMS[name] = Algorithm(
            name,
            func,
            frozenset(collectives or set(CollKind)),
            summary or (func.__doc__ or "").strip().splitlines()[0],
            declare(options),
            size_aware,
            reference,
        )
        return func

    return deco


def load_all() -> dict[str, Algorithm]:
    """Every registered algorithm: collsynth's own and the plugins' (entry points)."""
    load_group("collsynth.algorithms")
    return ALGORITHMS


def get(name: str) -> Algorithm:
    """The algorithm called ``name`` (one line naming the known ones if there is none)."""
    algos = load_all()
    if name not in algos:
        raise CollsynthError(f"unknown algorithm {name!r} (known: {', '.join(sorted(algos))})")
    return algos[name]


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
    plans for ``size`` bytes (:data:`DEFAULT_SIZE` when ``None``); the others ignore it.
    ``budget_s`` (default: the limit of :func:`collsynth.deadline.each_synthesis`, if any)
    bounds the wall time (:func:`collsynth.deadline.time_limit`); solvers stop early and return
    their best schedule with ``meta.status = "time_limit"``, other work raises
    :class:`collsynth.deadline.TimeLimitError` when the limit passes.

    ``link_order`` (default): the schedule carries per-link orders taken from its planned
    timing at ``size`` (:mod:`collsynth.synth.order`), which the executors and exporters
    realize, so that its realized time is its planned one wherever one connection uses a link.
    ``link_order=False`` gives the algorithm's schedule as it is (callers that order it per
    size themselves, as :func:`collsynth.report.compare.compare` does for algorithms that are
    not size-aware).
    """
    budget = deadline.parse_limit(budget_s if budget_s is not None else deadline.each())
    with deadline.time_limit(budget, what=f"synthesis with {name}"):
        deadline.check(f"synthesis with {name}")
        schedule = _synthesize(name, topology, collective, size, options)
        if link_order:
            schedule = with_link_orders(schedule, plan_size(size, name))
        return schedule


def _synthesize(
    name: str, topology: Topology, collective: Collective, size: float | None, options: dict
) -> Schedule:
    algo = get(name)
    if collective.kind not in algo.collectives:
        raise CollsynthError(
            f"algorithm {name!r} does not support {collective.kind.value} "
            f"(it supports {', '.join(sorted(k.value for k in algo.collectives))})"
        )
    values = algo.resolve_options(options)
    if algo.size_aware:
        schedule = algo.func(topology, collective, size=plan_size(size, name), **values)
    else:
        schedule = algo.func(topology, collective, **values)
    meta: dict[str, Any] = {"algorithm": name}
    if options:
        meta["options"] = {k: values[k] for k in sorted(options)}
    schedule = schedule.with_meta(**meta)
    return replace(schedule, meta=collect_timing(schedule.meta))


def parse_options(items: list[str] | None, algo: str | None = None) -> dict[str, dict[str, str]]:
    """Parse ``KEY=VALUE`` / ``ALGO.KEY=VALUE`` items (repeated or comma-joined) into
    ``{algo or '*': {key: value}}``."""
    return parse_assignments(items, algo)


def options_for(name: str, parsed: dict[str, dict[str, str]]) -> dict[str, str]:
    """The options of ``parsed`` that apply to algorithm ``name``: its own, plus the untargeted
    ones it declares."""
    algo = get(name)
    opts = {k: v for k, v in parsed.get("*", {}).items() if k in algo.options}
    opts.update(parsed.get(name, {}))
    return opts


def shorthand_options() -> dict[str, Option]:
    """The options offered as ``--NAME`` flags (declared with ``shorthand=True``), by name."""
    out: dict[str, Option] = {}
    for algo in load_all().values():
        for opt in algo.options.values():
            if opt.shorthand:
                out.setdefault(opt.name, opt)
    return out
