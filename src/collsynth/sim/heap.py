"""The binary heaps of the simulator's event loop, over parallel key arrays.

A heap is a segment ``k0[base:base + size]``, ``k1[...]``, ``k2[...]`` of three arrays, ordered
by ``(k0, k1, k2)``: the global event heap (time, priority, id) and every link's and
connection's waiting queue live in such segments, so the loop allocates nothing per event.
Plain Python on numpy arrays, compiled with the loop (:mod:`collsynth.sim.engine`).
"""

from __future__ import annotations

import numpy as np

#: the base of a heap that starts its array: a typed zero (a literal ``0`` argument would make
#: numba compile every heap function a second time, for the literal)
ZERO = np.int64(0)


def heap_less(a0, a1, a2, b0, b1, b2):
    if a0 != b0:
        return a0 < b0
    if a1 != b1:
        return a1 < b1
    return a2 < b2


def heap_push(k0, k1, k2, base, size, v0, v1, v2):
    """Push (v0, v1, v2) onto the binary heap stored in ``k*[base:base+size]``; new size."""
    i = size
    while i > 0:
        parent = (i - 1) // 2
        b = base + parent
        if heap_less(v0, v1, v2, k0[b], k1[b], k2[b]):
            a = base + i
            k0[a] = k0[b]
            k1[a] = k1[b]
            k2[a] = k2[b]
            i = parent
        else:
            break
    a = base + i
    k0[a] = v0
    k1[a] = v1
    k2[a] = v2
    return size + 1


def heap_pop(k0, k1, k2, base, size):
    """Remove the smallest entry of the heap in ``k*[base:base+size]``; (v0, v1, v2, size)."""
    r0 = k0[base]
    r1 = k1[base]
    r2 = k2[base]
    size -= 1
    last = base + size
    v0 = k0[last]
    v1 = k1[last]
    v2 = k2[last]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        small = left
        right = left + 1
        if right < size:
            a = base + right
            b = base + left
            if heap_less(k0[a], k1[a], k2[a], k0[b], k1[b], k2[b]):
                small = right
        c = base + small
        if heap_less(k0[c], k1[c], k2[c], v0, v1, v2):
            a = base + i
            k0[a] = k0[c]
            k1[a] = k1[c]
            k2[a] = k2[c]
            i = small
        else:
            break
    a = base + i
    k0[a] = v0
    k1[a] = v1
    k2[a] = v2
    return r0, r1, r2, size


# ------------------------------------------------------------------ indexed heap
# One entry per item (a link), keyed by (key[item], item); ``pos[item]`` is the item's place in
# ``order[:size]`` or -1. Setting an item's key moves it in place, so the heap never holds
# superseded entries (the global event heap would keep one per change of a link's next event).


def index_less(key, a, b):
    if key[a] != key[b]:
        return key[a] < key[b]
    return a < b


def index_up(key, order, pos, i):
    x = order[i]
    while i > 0:
        parent = (i - 1) // 2
        y = order[parent]
        if index_less(key, x, y):
            order[i] = y
            pos[y] = i
            i = parent
        else:
            break
    order[i] = x
    pos[x] = i


def index_down(key, order, pos, size, i):
    x = order[i]
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        small = left
        if left + 1 < size and index_less(key, order[left + 1], order[left]):
            small = left + 1
        y = order[small]
        if index_less(key, y, x):
            order[i] = y
            pos[y] = i
            i = small
        else:
            break
    order[i] = x
    pos[x] = i


def index_set(key, order, pos, size, item, value):
    """Set ``key[item] = value`` and restore the heap (``value`` = inf: remove the item);
    the new size."""
    key[item] = value
    i = pos[item]
    if value == np.inf:
        if i >= 0:
            size -= 1
            last = order[size]
            pos[item] = -1
            if last != item:
                order[i] = last
                pos[last] = i
                index_up(key, order, pos, i)
                index_down(key, order, pos, size, pos[last])
        return size
    if i < 0:
        order[size] = item
        pos[item] = size
        index_up(key, order, pos, size)
        return size + 1
    index_up(key, order, pos, i)
    index_down(key, order, pos, size, pos[item])
    return size


__all__ = ["ZERO", "heap_less", "heap_pop", "heap_push", "index_down", "index_less", "index_set",
           "index_up"]  # fmt: skip
