"""Bit-set and co-timing helpers of the SCALE-CCL loop (compiled with it, see :mod:`.kernel`).

Bit sets are rows of int64 words of 63 bits (:data:`.tables.WORD`; the sign bit stays clear):
bit ``b`` is bit ``b % 63`` of word ``b // 63``.
"""

from __future__ import annotations

from .tables import WORD


def low_bit(x):
    """Index of the lowest set bit of a non-zero word."""
    p = x & -x
    i = 0
    if p >= (1 << 32):
        p >>= 32
        i += 32
    if p >= (1 << 16):
        p >>= 16
        i += 16
    if p >= (1 << 8):
        p >>= 8
        i += 8
    if p >= (1 << 4):
        p >>= 4
        i += 4
    if p >= (1 << 2):
        p >>= 2
        i += 2
    if p >= 2:
        i += 1
    return i


def pop_count(x):
    """Number of set bits of a word."""
    c = 0
    while x:
        x &= x - 1
        c += 1
    return c


def bit_at(sets, row, b):
    """Bit ``b`` of the bit set ``sets[row]``."""
    return (sets[row, b // WORD] >> (b % WORD)) & 1


def bit_in(words, b):
    """Bit ``b`` of the one-row bit set ``words``."""
    return (words[b // WORD] >> (b % WORD)) & 1


def row_meets(sets, row, words, n):
    """Whether ``sets[row]`` and ``words`` (``n`` words) share a bit."""
    for x in range(n):
        if sets[row, x] & words[x]:
            return True
    return False


def words_meet(a, b, n):
    """Whether the bit sets ``a`` and ``b`` (``n`` words) share a bit."""
    for x in range(n):
        if a[x] & b[x]:
            return True
    return False


def round_limit(t, eps):
    """Latest time co-timed with ``t``."""
    return t + (eps if t <= 1.0 else eps * t)
