"""The algorithm registry: :class:`Algorithm` records in :data:`ALGORITHMS`, filled by
:func:`register` when an algorithm's module is imported (collsynth's own and plugins' alike,
through the ``collsynth.algorithms`` entry points that :func:`load_all` loads), and the
look-ups over it: :func:`get`, the ``--opt`` parsing (:func:`parse_options`,
:func:`options_for`) and the ``--NAME`` shorthands (:func:`shorthand_options`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..collective import CollKind
from ..errors import CollsynthError
from ..plugins import load_group
from ..schedule.ir import Schedule
from .options import Option, declare, parse_assignments, resolve


@dataclass(frozen=True)
class Alternatives:
    """What an algorithm returns when its own estimate cannot tell schedules apart: the
    candidates within its tie window, its own first choice first. The algorithm knows nothing
    of how they execute; :func:`collsynth.synth.synthesize` keeps the one that is fastest in
    the realized model once its link orders are chosen (:func:`collsynth.synth.order.fastest`),
    and ``link_order=False`` keeps the first."""

    schedules: tuple[Any, ...]  # Schedule, or CompactSchedule where one was asked for

    def __post_init__(self) -> None:
        if not self.schedules:
            raise CollsynthError("an algorithm returned no schedule")


#: What :func:`register` takes: ``func(topology, collective, [size=,] **options)``
AlgorithmFunc = Callable[..., Schedule | Alternatives]


@dataclass
class Algorithm:
    """A registered synthesizer: its function, the collectives it supports, its declared
    options and whether it adapts the schedule to the message size."""

    name: str
    func: AlgorithmFunc
    collectives: frozenset[CollKind]
    summary: str
    options: dict[str, Option] = field(default_factory=dict)
    size_aware: bool = False  # takes ``size=`` and adapts the schedule to the message size
    reference: str = ""  # the paper or system it implements (authors, title, venue)
    # takes ``compact=True`` and may then return compact schedules (schedule/compact.py)
    compact_form: bool = False

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
    compact_form: bool = False,
):
    """Decorator: register ``func(topology, collective, [size=,] **options) -> Schedule`` (or
    :class:`Alternatives`) as algorithm ``name`` with its declared
    :class:`~collsynth.synth.options.Option` list. ``compact_form``: ``func`` also takes
    ``compact=True``, and may then return :class:`~collsynth.schedule.compact.CompactSchedule`
    (made without the explicit schedule: large symmetric fabrics)."""

    def deco(func: AlgorithmFunc) -> AlgorithmFunc:
        ALGORITHMS[name] = Algorithm(
            name,
            func,
            frozenset(collectives or set(CollKind)),
            summary or (func.__doc__ or "").strip().splitlines()[0],
            declare(options),
            size_aware,
            reference,
            compact_form,
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
