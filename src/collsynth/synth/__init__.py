"""Synthesizers: modules that turn (topology, collective) into a schedule IR.

An algorithm registers itself with :func:`register`; :func:`synthesize` runs it by name. An
algorithm knows nothing of export, simulation or the CLI.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ..collective import CollKind, Collective
from ..errors import CollsynthError
from ..schedule.ir import Schedule
from ..topology.model import Topology

#: Modules that register algorithms when imported.
_MODULES = ("collsynth.synth.spt", "collsynth.synth.baselines", "collsynth.synth.forestcoll.algo",
            "collsynth.synth.mteg", "collsynth.synth.teccl", "collsynth.synth.scale",
            "collsynth.synth.syccl")


@dataclass
class Algorithm:
    name: str
    func: Callable[..., Schedule]
    collectives: frozenset[CollKind]
    summary: str
    options: dict[str, str] = field(default_factory=dict)
    size_aware: bool = False  # takes ``size=`` and adapts the schedule to the message size


ALGORITHMS: dict[str, Algorithm] = {}


def register(name: str, collectives: set[CollKind] | None = None, summary: str = "",
             options: dict[str, str] | None = None, size_aware: bool = False):
    def deco(func: Callable[..., Schedule]) -> Callable[..., Schedule]:
        ALGORITHMS[name] = Algorithm(name, func, frozenset(collectives or set(CollKind)),
                                     summary or (func.__doc__ or "").strip().splitlines()[0],
                                     dict(options or {}), size_aware)
        return func

    return deco


def load_all() -> dict[str, Algorithm]:
    for mod in _MODULES:
        importlib.import_module(mod)
    return ALGORITHMS


def get(name: str) -> Algorithm:
    algos = load_all()
    if name not in algos:
        raise CollsynthError(f"unknown algorithm {name!r} (known: {', '.join(sorted(algos))})")
    return algos[name]


def synthesize(name: str, topology: Topology, collective: Collective, *,
               size: float | None = None, **options: Any) -> Schedule:
    """Run algorithm ``name``; the result carries ``meta['algorithm']``.

    ``size`` (bytes) lets size-aware algorithms adapt the schedule to the message size; others
    ignore it.
    """
    algo = get(name)
    if collective.kind not in algo.collectives:
        raise CollsynthError(f"algorithm {name!r} does not support {collective.kind.value} "
                             f"(it supports {', '.join(sorted(k.value for k in algo.collectives))})")
    unknown = set(options) - set(algo.options)
    if unknown:
        raise CollsynthError(f"algorithm {name!r} has no option {sorted(unknown)[0]!r}")
    if algo.size_aware and size is not None:
        schedule = algo.func(topology, collective, size=size, **options)
    else:
        schedule = algo.func(topology, collective, **options)
    meta: dict[str, Any] = {"algorithm": name}
    if options:
        meta["options"] = {k: v for k, v in sorted(options.items())}
    return schedule.with_meta(**meta)


def parse_options(items: list[str] | None, algo: str | None = None) -> dict[str, dict[str, str]]:
    """Parse ``key=value`` / ``algo.key=value`` strings into ``{algo or '*': {key: value}}``."""
    out: dict[str, dict[str, str]] = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise CollsynthError(f"option {item!r} is not key=value")
        target, dot, opt = key.rpartition(".")
        target = target if dot else (algo or "*")
        out.setdefault(target, {})[opt] = value
    return out


def options_for(name: str, parsed: dict[str, dict[str, str]]) -> dict[str, str]:
    """The options of ``parsed`` that apply to algorithm ``name``: its own, plus the untargeted
    ones it declares."""
    algo = get(name)
    opts = {k: v for k, v in parsed.get("*", {}).items() if k in algo.options}
    opts.update(parsed.get(name, {}))
    return opts
