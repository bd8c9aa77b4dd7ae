"""Array helpers every layer shares.

:func:`unique` is ``np.unique`` for one-dimensional arrays without the extra outputs, by sorting:
numpy 2.3+ answers a plain ``np.unique`` call on integers from a hash table, which is tens of
times slower than a sort when most values are distinct (1 M distinct int64: about 1.9 s against
0.04 s on this project's 2-core machines), and schedules, link orders and dependency keys are
exactly that. ``tests/test_arrays.py`` checks that the two agree.

:func:`spread64` and :data:`MIX64` hash integers into 64-bit words (sums of them tell multisets
apart), and :func:`match_in_turn` pairs equal keys: what the symmetry searches use to propose
maps (of nodes, operations, chunks) that they then verify exactly.
"""

from __future__ import annotations

import numpy as np


def unique(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a one-dimensional array (``np.unique(values)``)."""
    a = np.sort(np.asarray(values).ravel())
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


#: odd 64-bit constants that spread small integers over the whole word
MIX64 = tuple(
    np.uint64(c)
    for c in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
              0x27D4EB2F165667C5, 0x85EBCA77C2B2AE63, 0xFF51AFD7ED558CCD)
)  # fmt: skip


def spread64(x: np.ndarray) -> np.ndarray:
    """A 64-bit mix of integers (nonlinear, so that sums of mixed values tell sets apart;
    a hash that proposes a match, never one that decides it)."""
    z: np.ndarray = np.asarray(x).astype(np.uint64) + MIX64[0]
    z = (z ^ (z >> np.uint64(30))) * MIX64[5]
    z = (z ^ (z >> np.uint64(27))) * MIX64[1]
    return z ^ (z >> np.uint64(31))


def match_in_turn(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``wanted``, an entry of ``keys`` equal to it, paired in turn where several
    are equal: the ``i``-th wanted entry (by index) of a value gets the ``i``-th key (by
    index) of that value; -1 where the value is missing or is met a different number of
    times among the keys and the wanted entries. Also how many keys have each wanted value."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    by = np.argsort(wanted, kind="stable")
    w = wanted[by]
    lo = np.searchsorted(ordered, w, side="left")
    hi = np.searchsorted(ordered, w, side="right")
    first = np.searchsorted(w, w, side="left")
    turn = np.arange(len(w), dtype=np.int64) - first  # the entry's turn among its equals
    ok = hi - lo == np.searchsorted(w, w, side="right") - first
    out = np.full(len(wanted), -1, dtype=np.int64)
    out[by[ok]] = order[lo[ok] + turn[ok]]
    count = np.empty(len(wanted), dtype=np.int64)
    count[by] = hi - lo
    return out, count
