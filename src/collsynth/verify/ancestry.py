"""Reachability on the dependency DAG: is operation ``a`` a (transitive) dependency of ``x``?

The executions ask it for every pair of accesses to one buffer that must be ordered, so it is a
compiled walk (:func:`ancestor`, through :func:`collsynth.jit.compiled`) over arrays the
:class:`Ancestry` of one verification holds.
"""

from __future__ import annotations

import numpy as np

from ..jit import compiled
from ..schedule.ir import Schedule

#: visit marks are 32-bit: they are cleared and numbered again from here
STAMP_WRAP = 2**31 - 2


def ancestor(a, x, pos, depth, ptr, ids, mark, stack, stamp):
    """Is operation ``a`` a transitive dependency of ``x``? A backwards walk from ``x`` that
    never enters an operation placed before ``a`` in the topological order (``pos``) or no
    deeper than ``a`` (``depth``); visits are marked with the walk's number ``stamp[0]``
    (marks cleared and numbering restarted at ``stamp[2]``)."""
    if pos[a] >= pos[x] or depth[a] >= depth[x]:
        return False
    if stamp[0] >= stamp[2]:  # 32-bit marks: clear them and number again
        mark[:] = 0
        stamp[0] = 0
    stamp[0] += 1  # (stamp[1] numbers the operations, for ``dmark``)
    st = stamp[0]
    pa = pos[a]
    da = depth[a]
    stack[0] = x
    top = 1
    mark[x] = st
    while top > 0:
        top -= 1
        u = stack[top]
        for j in range(ptr[u], ptr[u + 1]):
            d = ids[j]
            if d == a:
                return True
            if mark[d] != st and pos[d] > pa and depth[d] > da:
                mark[d] = st
                stack[top] = d
                top += 1
    return False


def dependency_depth(order, ptr, ids):
    """Each operation's depth: the longest chain of dependencies above it (``order``: the
    operations in dependency order)."""
    n = len(order)
    depth = np.zeros(n, dtype=np.int32)  # (a depth is below the number of operations)
    for i in range(n):
        x = order[i]
        best = 0
        for j in range(ptr[x], ptr[x + 1]):
            v = depth[ids[j]] + 1
            if v > best:
                best = v
        depth[x] = best
    return depth


class Ancestry:
    """Reachability queries on the dependency DAG: is ``a`` a (transitive) dependency of ``x``?

    A backwards walk from ``x`` that never enters an operation which cannot reach ``a``: one
    placed before ``a`` in the topological order, or whose depth (longest dependency chain
    above it) is not greater than ``a``'s. Depth pruning keeps the walk to a thin band of the
    DAG, so the many negative queries of tree reductions (siblings reducing into one buffer)
    end at once. The walk is compiled with numba; visited marks are stamped per query, so no
    per-query allocation.
    """

    def __init__(self, s: Schedule, order: np.ndarray, pos: np.ndarray):
        n = s.num_ops
        self.ptr = np.ascontiguousarray(s.dep_ptr, dtype=np.int64)
        self.ids = np.ascontiguousarray(s.dep_ids, dtype=np.int64)
        self.pos = np.ascontiguousarray(pos, dtype=np.int64)
        depth_of = compiled(dependency_depth)
        self.depth = depth_of(np.ascontiguousarray(order, dtype=np.int64), self.ptr, self.ids)
        # int32: memory at tens of millions of operations (stamps wrap before 2**31)
        self.mark = np.zeros(n, dtype=np.int32)
        self.stack = np.empty(max(n, 1), dtype=np.int32 if n < 2**31 else np.int64)
        # the walk's number, the compiled executor's operation number, where both wrap
        self.stamps = np.array([0, 0, STAMP_WRAP], dtype=np.int64)
        self._walk = compiled(ancestor)

    def rearm(self) -> None:
        """Set where the visit marks wrap (``STAMP_WRAP``) before a walk or a window."""
        self.stamps[2] = STAMP_WRAP

    def query(self, a: int, x: int) -> bool:
        self.rearm()
        return bool(
            self._walk(
                a, x, self.pos, self.depth, self.ptr, self.ids, self.mark, self.stack, self.stamps
            )
        )
