"""The reduction executor over arrays, for large schedules: one window of segments at a time.

It runs the same rules as the verifier's Python executor (:func:`.reducing.execute_window` and
:func:`.reducing.check_reduced`) on the same window, with the contributions of each (rank,
segment) buffer as a bit set of 64-bit words and its readers and writers as linked lists in one
node pool. It only decides: a window passes (and how many copies were redundant) or fails; on a
failure the verifier runs the Python executor on that window, which names the violation in
exactly the words it always has. Compiled with numba when present, through
:func:`collsynth.jit.compiled` (about 50 times faster than the Python executor per operation);
plain Python otherwise.
"""

from __future__ import annotations

import numpy as np

from ..jit import compiled
from .ancestry import ancestor

#: a window passed / failed (the Python executor then names the violation)
PASS, FAIL = 0, 1


def _before(a, x, cur, dmark, pos, depth, ptr, ids, mark, stack, stamp):
    """``a`` precedes ``x``: a direct dependency (``dmark[a] == cur``, marked when ``x``
    began) or a transitive one."""
    return dmark[a] == cur or ancestor(a, x, pos, depth, ptr, ids, mark, stack, stamp)


def run_window(order, src, dst, kind, seg_lo, seg_hi, s0, s1, n_ranks, post_rank, post_seg_lo,
               post_seg_hi, pos, depth, ptr, ids, mark, stack, stamp, dmark):  # fmt: skip
    """Execute the operations ``order`` (in dependency order; ``kind``: 0 copy, 1 reduce,
    2 join) on the segments ``s0 <= seg < s1`` and check the postcondition ``post_*`` (rank
    ``post_rank[i]`` must end with every contribution in segments ``post_seg_lo[i] <= seg <
    post_seg_hi[i]``). Returns ``(PASS, redundant copies)`` or ``(FAIL, 0)``.

    A join that follows every write to a buffer of its rank *covers* the buffer until the
    next write: a reader that follows the join follows every write, with one query instead of
    one per write (an AllReduce root's broadcasts each read what hundreds of reductions
    wrote)."""
    width = s1 - s0
    n_buf = n_ranks * width
    words = (n_ranks + 63) // 64
    value = _own_contributions(n_ranks, width)
    cap = _pool_size(order, kind, seg_lo, seg_hi, s0, s1)
    node_op = np.empty(cap, dtype=np.int64)
    node_next = np.empty(cap, dtype=np.int64)
    used = 0
    w_head = np.full(n_buf, -1, dtype=np.int64)
    r_head = np.full(n_buf, -1, dtype=np.int64)
    writes = np.zeros(n_buf, dtype=np.int64)  # writes so far, per buffer
    cover = np.full(n_buf, -1, dtype=np.int64)  # a join after every write so far, or -1
    cover_at = np.zeros(n_buf, dtype=np.int64)  # ... as of this many writes
    v = np.empty(words, dtype=np.uint64)
    anc = (dmark, pos, depth, ptr, ids, mark, stack, stamp)
    redundant = 0
    for i in range(order.shape[0]):
        op = order[i]
        if stamp[1] >= stamp[2]:  # 32-bit marks: clear them and number again
            dmark[:] = 0
            stamp[1] = 0
        stamp[1] += 1
        cur = stamp[1]
        for j in range(ptr[op], ptr[op + 1]):
            dmark[ids[j]] = cur
        if kind[op] == 2:
            for seg in range(max(seg_lo[op], s0), min(seg_hi[op], s1)):
                b = src[op] * width + (seg - s0)
                if _all_before(w_head[b], node_op, node_next, op, cur, anc):
                    cover[b] = op
                    cover_at[b] = writes[b]
            continue
        cp = kind[op] == 0
        a_rank = src[op]
        b_rank = dst[op]
        for seg in range(max(seg_lo[op], s0), min(seg_hi[op], s1)):
            rk = a_rank * width + (seg - s0)
            c = cover[rk]
            if not (
                c >= 0
                and cover_at[rk] == writes[rk]
                and _before(c, op, cur, dmark, pos, depth, ptr, ids, mark, stack, stamp)
            ):  # the sender's buffer: every write to it comes first
                if not _all_before(w_head[rk], node_op, node_next, op, cur, anc):
                    return FAIL, 0
            for k in range(words):
                v[k] = value[rk, k]
            node_op[used] = op
            node_next[used] = r_head[rk]
            r_head[rk] = used
            used += 1
            wk = b_rank * width + (seg - s0)
            # the receiver's buffer: every read of it comes first
            if not _all_before(r_head[wk], node_op, node_next, op, cur, anc):
                return FAIL, 0
            head = -1  # the writes to keep: unordered ones, and ordered copies before a reduce
            w = w_head[wk]
            while w != -1:
                nxt = node_next[w]
                o = node_op[w]
                keep = True
                if _before(o, op, cur, dmark, pos, depth, ptr, ids, mark, stack, stamp):
                    keep = (not cp) and kind[o] == 0
                elif cp or kind[o] == 0:
                    return FAIL, 0
                if keep:
                    node_next[w] = head
                    head = w
                w = nxt
            if cp:
                same = True
                for k in range(words):
                    if value[wk, k] != v[k]:
                        same = False
                    value[wk, k] = v[k]
                if same:
                    redundant += 1
            else:
                for k in range(words):
                    if value[wk, k] & v[k]:
                        return FAIL, 0
                    value[wk, k] |= v[k]
            node_op[used] = op
            node_next[used] = head
            w_head[wk] = used
            used += 1
            writes[wk] += 1
            if cp:
                r_head[wk] = -1
    if not _complete(value, n_ranks, width, s0, s1, post_rank, post_seg_lo, post_seg_hi):
        return FAIL, 0
    return PASS, redundant


def _all_before(node, node_op, node_next, op, cur, anc):
    """Every operation of the list from ``node`` precedes ``op`` (``anc``: the marks and
    arrays of :func:`_before`)."""
    dmark, pos, depth, ptr, ids, mark, stack, stamp = anc
    while node != -1:
        if not _before(node_op[node], op, cur, dmark, pos, depth, ptr, ids, mark, stack, stamp):
            return False
        node = node_next[node]
    return True


def _own_contributions(n_ranks, width):
    """The buffers of ``n_ranks`` ranks times ``width`` segments, each holding its own rank's
    contribution (bit sets of 64-bit words)."""
    words = (n_ranks + 63) // 64
    value = np.zeros((n_ranks * width, words), dtype=np.uint64)
    for b in range(n_ranks * width):
        r = b // width
        value[b, r // 64] = np.uint64(1) << np.uint64(r % 64)
    return value


def _pool_size(order, kind, seg_lo, seg_hi, s0, s1):
    """List nodes the window needs: a read and a write per operation and segment."""
    cap = 1
    for i in range(order.shape[0]):
        op = order[i]
        if kind[op] != 2:
            cap += 2 * max(0, min(seg_hi[op], s1) - max(seg_lo[op], s0))
    return cap


def _complete(value, n_ranks, width, s0, s1, post_rank, post_seg_lo, post_seg_hi):
    """Every buffer the postcondition names holds every rank's contribution."""
    words = value.shape[1]
    full = np.zeros(words, dtype=np.uint64)
    for r in range(n_ranks):
        full[r // 64] |= np.uint64(1) << np.uint64(r % 64)
    for i in range(post_rank.shape[0]):
        for seg in range(max(post_seg_lo[i], s0), min(post_seg_hi[i], s1)):
            b = post_rank[i] * width + (seg - s0)
            for k in range(words):
                if value[b, k] != full[k]:
                    return False
    return True


def compiled_run_window():
    """:func:`run_window` compiled with numba (memoized per process, cached on disk), or
    itself without numba: the window's loop calls its helpers compiled."""
    before = compiled(_before, helpers={"ancestor": compiled(ancestor)})
    helpers = {
        "_before": before,
        "_all_before": compiled(_all_before, helpers={"_before": before}),
        "_own_contributions": compiled(_own_contributions),
        "_pool_size": compiled(_pool_size),
        "_complete": compiled(_complete),
    }
    return compiled(run_window, helpers=helpers)
