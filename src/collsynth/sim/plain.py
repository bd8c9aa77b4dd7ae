"""The event loop without numba, on Python lists instead of numpy arrays.

The loops of :mod:`collsynth.sim.engine` are written once, on numpy arrays and records, for
numba. Run as plain Python, each element read of a numpy array makes a numpy scalar and each
record read a record view, which costs several times a list's or a dict's item access: the
uncompiled loop did 10-25 k hops per second, and it is the one that runs every small
simulation (below :data:`~collsynth.sim.simulator.COMPILE_FROM_HOPS` hops, and the quotient
of a symmetric schedule, where loading the compiled loop would cost more than the whole run).

:func:`call_plain` runs the *same* loop function over Python containers: every array argument
becomes a list (a record array: a list of dicts, one per record, keyed by field name), nested
in the same tuples; after the call, every array gets its list's values back, so the caller
sees the state the loop left exactly as if it had run on the arrays. The arithmetic is the
same (Python floats are IEEE doubles, as float64 is; no integer here comes near 2**63), so the
results are identical, which the tests check against the compiled loop.

An argument must not alias another array argument's memory (two views of one buffer would
become two independent lists); the same array object passed twice becomes one list.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np


def _plain(x: Any, made: dict[int, tuple[np.ndarray, list]]) -> Any:
    """``x`` with every numpy array in it (in nested tuples) as a list; ``made``: each
    array's id -> (the array, its list)."""
    if isinstance(x, np.ndarray) and x.ndim == 1:
        if id(x) not in made:
            names = x.dtype.names
            values = [dict(zip(names, r)) for r in x.tolist()] if names else x.tolist()
            made[id(x)] = (x, values)
        return made[id(x)][1]
    if isinstance(x, tuple):
        return tuple(_plain(y, made) for y in x)
    return x


def _write_back(made: dict[int, tuple[np.ndarray, list]]) -> None:
    """Every array gets its list's values."""
    for arr, values in made.values():
        names = arr.dtype.names
        if not len(arr):
            continue
        if names:
            for n in names:
                arr[n] = list(map(itemgetter(n), values))
        else:
            arr[:] = values


def call_plain(loop: Callable, *args: Any) -> Any:
    """``loop(*args)`` run as plain Python over lists (see the module doc); what it returns
    (a scalar)."""
    made: dict[int, tuple[np.ndarray, list]] = {}
    plain = [_plain(a, made) for a in args]
    try:
        return loop(*plain)
    finally:
        _write_back(made)


__all__ = ["call_plain"]
