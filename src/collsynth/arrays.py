"""Array helpers every layer shares.

:func:`unique` is ``np.unique`` for one-dimensional arrays without the extra outputs, by sorting:
numpy 2.3+ answers a plain ``np.unique`` call on integers from a hash table, which is tens of
times slower than a sort when most values are distinct (1 M distinct int64: about 1.9 s against
0.04 s on this project's 2-core machines), and schedules, link orders and dependency keys are
exactly that. ``tests/test_arrays.py`` checks that the two agree.
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
