"""The exporter registry: schedule IR -> a runtime's file format.

An exporter turns a verified schedule into text (``func(schedule, **options) -> str``), declares
its options the way algorithms do (:class:`~collsynth.synth.options.Option`), and may name an
independent ``check(text, schedule, options)`` that must pass before the text is written.
collsynth's own exporters and third-party ones register with :func:`register` from a module
named by a ``collsynth.exporters`` entry point (:mod:`collsynth.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CollsynthError
from ..plugins import load_group
from ..schedule.ir import Schedule
from ..synth.options import Option, declare, resolve


@dataclass
class Exporter:
    """A registered exporter."""

    name: str
    func: Callable[..., str]
    summary: str
    suffix: str
    options: dict[str, Option] = field(default_factory=dict)
    check: Callable[[str, Schedule, dict[str, Any]], Any] | None = None

    def export(self, schedule: Schedule, options: dict[str, Any] | None = None) -> tuple[str, Any]:
        """The exported text and the check's report (``None`` without a check)."""
        values = resolve(self.options, dict(options or {}), f"export {self.name}")
        text = self.func(schedule, **values)
        report = self.check(text, schedule, values) if self.check is not None else None
        return text, report


EXPORTERS: dict[str, Exporter] = {}


def register(
    name: str,
    summary: str,
    suffix: str,
    options: Iterable[Option] | None = None,
    check: Callable[[str, Schedule, dict[str, Any]], Any] | None = None,
):
    """Decorator: register ``func(schedule, **options) -> str`` as exporter ``name``."""

    def deco(func: Callable[..., str]) -> Callable[..., str]:
        EXPORTERS[name] = Exporter(name, func, summary, suffix, declare(options), check)
        return func

    return deco


def load_exporters() -> dict[str, Exporter]:
    """Every registered exporter: collsynth's own and the plugins'."""
    load_group("collsynth.exporters")
    return EXPORTERS


def get_exporter(name: str) -> Exporter:
    """The exporter called ``name``."""
    known = load_exporters()
    if name not in known:
        raise CollsynthError(f"unknown export format {name!r} (known: {', '.join(sorted(known))})")
    return known[name]
