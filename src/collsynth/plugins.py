"""Plugins: algorithms, bounds and exporters found through Python entry points.

collsynth's own algorithms, bounds and exporters are registered the same way a third-party
package adds one: an entry point in the group ``collsynth.algorithms``, ``collsynth.bounds`` or
``collsynth.exporters`` whose value names a module (or an object in it) that registers itself
when imported, with :func:`collsynth.synth.register`, :func:`collsynth.bound.register` or
:func:`collsynth.export.register`. For example, in a plugin's ``pyproject.toml``::

    [project.entry-points."collsynth.algorithms"]
    mine = "my_package.my_algorithm"

A plugin that fails to import is skipped with a one-line warning on stderr (the rest of
collsynth keeps working); :func:`load_errors` lists such failures.
"""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint, entry_points

from .errors import CollsynthError

GROUPS = ("collsynth.algorithms", "collsynth.bounds", "collsynth.exporters")

_loaded: dict[str, list[str]] = {}
_errors: dict[str, str] = {}


def load_group(group: str) -> list[str]:
    """Import every entry point of ``group`` once per process; the names loaded.

    collsynth's own entries are loaded like the others (an error in one of them is a bug and
    propagates); they come from the installed package's metadata, so a new built-in module
    needs ``pip install -e .`` again. A third-party entry that fails is skipped with a warning.
    """
    if group in _loaded:
        return _loaded[group]
    names: list[str] = []
    eps = list(entry_points(group=group))
    if not any(_is_own(ep) for ep in eps):
        raise CollsynthError(
            f"collsynth's own {group} entry points are missing: install the "
            f"package (python -m pip install -e .)"
        )
    for ep in sorted(eps, key=lambda e: (not _is_own(e), e.name, e.value)):
        try:
            ep.load()
        except Exception as exc:  # a broken plugin must not break collsynth
            if _is_own(ep):
                raise
            msg = " ".join(str(exc).split())[:200]
            key = f"{group}:{ep.name}"
            if key not in _errors:
                _errors[key] = f"{type(exc).__name__}: {msg}"
                print(
                    f"collsynth: warning: plugin {ep.name!r} ({ep.value}) of {group} "
                    f"failed to load: {_errors[key]}",
                    file=sys.stderr,
                )
            continue
        names.append(ep.name)
    _loaded[group] = names
    return names


def _is_own(ep: EntryPoint) -> bool:
    """Whether an entry point is declared by collsynth itself."""
    dist = getattr(ep, "dist", None)
    return dist is not None and (dist.name or "").lower() == "collsynth"


def load_errors() -> dict[str, str]:
    """``{group:name: error}`` of the plugins that failed to load so far."""
    return dict(_errors)
