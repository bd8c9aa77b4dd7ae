"""Synthesizers: modules that turn (topology, collective) into a schedule IR.

An algorithm registers itself with :func:`register`, declaring its options once
(:mod:`collsynth.synth.options`); :func:`synthesize` runs it by name with validated, typed
options. collsynth's own algorithms and third-party ones are found the same way, through the
``collsynth.algorithms`` entry point group (:mod:`collsynth.plugins`). An algorithm knows
nothing of export, simulation, printing or the command line.

Modules: :mod:`.registry` (the registry and its look-ups), :mod:`.run` (:func:`synthesize`),
:mod:`.options` (declared options), :mod:`.order` (per-link orders), one package or module per
algorithm.
"""

from __future__ import annotations

from .options import DEFAULT_SIZE, Option
from .registry import (
    ALGORITHMS,
    Algorithm,
    Alternatives,
    get,
    load_all,
    options_for,
    parse_options,
    register,
    shorthand_options,
)
from .run import synthesize, synthesize_alternatives

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Alternatives",
    "DEFAULT_SIZE",
    "Option",
    "get",
    "load_all",
    "options_for",
    "parse_options",
    "register",
    "shorthand_options",
    "synthesize",
    "synthesize_alternatives",
]
