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

import importlib
import sys
from importlib.metadata import entry_points

GROUPS = ("collsynth.algorithms", "collsynth.bounds", "collsynth.exporters")

_loaded: dict[str, list[str]] = {}
_errors: dict[str, str] = {}


def load_group(group: str, builtin: tuple[str, ...] = ()) -> list[str]:
    """Import every entry point of ``group`` once per process; the names loaded.

    ``builtin`` lists collsynth's own modules of the group. They are declared as entry points
    too; importing them here as well keeps a source tree that was never installed (no entry
    point metadata) working.
    """
    if group in _loaded:
        return _loaded[group]
    names: list[str] = []
    for module in builtin:
        importlib.import_module(module)
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
        try:
            ep.load()
        except Exception as exc:  # a broken plugin must not break collsynth
            msg = " ".join(str(exc).split())[:200]
            key = f"{group}:{ep.name}"
            if key not in _errors:
                _errors[key] = f"{type(exc).__name__}: {msg}"
                print(f"collsynth: warning: plugin {ep.name!r} ({ep.value}) of {group} "
                      f"failed to load: {_errors[key]}", file=sys.stderr)
            continue
        names.append(ep.name)
    _loaded[group] = names
    return names


def load_errors() -> dict[str, str]:
    """``{group:name: error}`` of the plugins that failed to load so far."""
    return dict(_errors)
