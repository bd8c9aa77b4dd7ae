"""The compact verifier's reduction executor over arrays, one orbit of chunks at a time.

It runs the rules of :meth:`collsynth.verify.compact._Execution._reducing` (reads after every
write, writes after every read, overwrites ordered with every other write, no contribution
combined twice, every asked-for buffer complete at the end) on the canonical buffers of one
orbit of chunks: buffers of chunks of different orbits never meet (an operation reads and
writes one chunk, whose canonical images lie in its orbit). Contributions are bit sets of
64-bit words, carried from the reader's frame into the writer's by the element between them;
"does this access follow that one" is a walk back through the explicit dependency graph in
compact coordinates (the dependency ``(B, h)`` of ``(C, k)`` is ``(B, k * h)``), with visits
kept in an open-addressing table. It only decides: a window passes (and how many copies were
redundant), fails, or could not be decided (the walk outgrew its table); the caller then runs
the Python executor on that window, which names the violation. Compiled with numba through
:func:`collsynth.jit.compiled`; plain Python otherwise.
"""

from __future__ import annotations

import numpy as np

from ..jit import compiled

#: a window passed / failed / could not be decided here (the Python executor decides)
PASS, FAIL, UNDECIDED = 0, 1, 2
#: visit marks are 32-bit: cleared and numbered again from here
STAMP_WRAP = 2**31 - 2
#: slots of the walk's visit table (a walk that would visit half as many is undecided)
TABLE_SLOTS = 1 << 20


def compact_precedes(b, h, a, e, pos, depth, dep_ptr, dep_orbit, dep_elem, mul, inv, order,
                     keys, marks, stack_o, stack_e, stamp):  # fmt: skip
    """Is ``(b, h)`` a transitive dependency of ``(a, e)``? 1 yes, 0 no, -1 undecided (the
    walk outgrew its table or stack). The walk goes back from ``(a, 1)`` towards ``(b, e^-1
    h)``, entering no orbit placed before ``b`` (``pos``) or no deeper (``depth``)."""
    h = mul[inv[e], h]
    if pos[b] >= pos[a] or depth[b] >= depth[a]:
        return 0
    if stamp[0] >= STAMP_WRAP:
        marks[:] = 0
        stamp[0] = 0
    stamp[0] += 1
    st = stamp[0]
    pb = pos[b]
    db = depth[b]
    target = b * order + h
    mask = keys.shape[0] - 1
    count = 0
    stack_o[0] = a
    stack_e[0] = 0
    top = 1
    while top > 0:
        top -= 1
        c = stack_o[top]
        k = stack_e[top]
        for j in range(dep_ptr[c], dep_ptr[c + 1]):
            d = dep_orbit[j]
            m = mul[k, dep_elem[j]]
            key = d * order + m
            if key == target:
                return 1
            if pos[d] <= pb or depth[d] <= db:
                continue
            slot = (key * 40503) & mask
            seen = False
            while marks[slot] == st:
                if keys[slot] == key:
                    seen = True
                    break
                slot = (slot + 1) & mask
            if seen:
                continue
            keys[slot] = key
            marks[slot] = st
            count += 1
            if 2 * count > keys.shape[0] or top >= stack_o.shape[0]:
                return -1
            stack_o[top] = d
            stack_e[top] = m
            top += 1
    return 0


#: de Bruijn's multiplier for the index of a 64-bit word's lowest set bit, and its table
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_BIT_INDEX = np.array([0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55, 59, 36,
                       53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5, 63, 47, 56, 27, 60, 41,
                       37, 16, 54, 35, 52, 21, 44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31, 10,
                       25, 14, 19, 9, 13, 8, 7, 6], dtype=np.int64)  # fmt: skip


def _carry(value, src_buf, has, own_bit, perm, identity, n_ranks, out):
    """``out`` = the contributions of buffer ``src_buf`` (its rank's own alone when it was
    never written) with every rank ``i`` moved to ``perm[i]``: word by word where ``perm`` is
    the identity or the set is every rank (a broadcast's), else bit by bit."""
    out[:] = 0
    if not has[src_buf]:
        i = own_bit[src_buf]
        j = perm[i]
        out[j >> 6] |= np.uint64(1) << np.uint64(j & 63)
        return
    words = value.shape[1]
    full = True
    for w in range(words):
        top = 64 if 64 * (w + 1) <= n_ranks else n_ranks - 64 * w
        want = ~np.uint64(0) if top == 64 else (np.uint64(1) << np.uint64(top)) - np.uint64(1)
        if value[src_buf, w] != want:
            full = False
            break
    if identity or full:
        for w in range(words):
            out[w] = value[src_buf, w]
        return
    for w in range(words):
        x = value[src_buf, w]
        while x != 0:
            low = x & (~x + np.uint64(1))
            bit = _BIT_INDEX[((low * _DEBRUIJN) >> np.uint64(58)) & np.uint64(63)]
            j = perm[w * 64 + bit]
            out[j >> 6] |= np.uint64(1) << np.uint64(j & 63)
            x ^= low


def _covered(cover_op, cover_el, cover_bound, buf, a, e, pos, depth, dep_ptr, dep_orbit,
             dep_elem, mul, inv, order, keys, marks, stack_o, stack_e, stamp):  # fmt: skip
    """The write nodes of ``buf`` below this index precede ``(a, e)`` (0: none known): those
    that its cover (an operation that follows each of them) precedes it by."""
    if cover_bound[buf] <= 0:
        return 0
    got = compact_precedes(cover_op[buf], cover_el[buf], a, e, pos, depth, dep_ptr, dep_orbit,
                           dep_elem, mul, inv, order, keys, marks, stack_o, stack_e,
                           stamp)  # fmt: skip
    return cover_bound[buf] if got == 1 else 0


def run_compact_window(row_op, row_kind, row_rb, row_wb, row_re, row_we, row_carry, own_bit,
                       n_ranks, rank_perms, post, pos, depth, dep_ptr, dep_orbit, dep_elem,
                       mul, inv, order, keys, marks, stack_o, stack_e, stamp):  # fmt: skip
    """Execute the rows (an operation on one segment: its representative, its kind (0 copy,
    1 reduce, 2 join), the canonical buffers it reads and writes, the members that do, the
    element carrying the read contributions into the writer's frame) in order on the
    window's buffers (``own_bit``: each buffer's rank, its contribution before any write),
    then check that every buffer of ``post`` holds every rank's contribution. Returns
    ``(status, row, redundant copies)``: the first failing row (-1: the postcondition) where
    not passed.

    A buffer's *cover* is an operation that follows each of its writes made before it (a join
    at its rank that does, or a read that was checked against them): an access that the cover
    precedes follows those writes too, with one walk instead of one per write (an AllReduce
    root's broadcasts each read what hundreds of reductions wrote). A cover is replaced only
    by one that covers more writes. A reduce is not asked whether it follows the reduces
    already written to its buffer (they may run at once; an earlier one it follows stays in
    the list, where every later reader and copy checks it, which gives the same verdicts)."""
    n_buf = own_bit.shape[0]
    words = (n_ranks + 63) // 64
    value = np.zeros((n_buf, words), dtype=np.uint64)
    has = np.zeros(n_buf, dtype=np.bool_)
    n = row_op.shape[0]
    node_op = np.empty(2 * n + 1, dtype=np.int64)
    node_el = np.empty(2 * n + 1, dtype=np.int64)
    node_copy = np.empty(2 * n + 1, dtype=np.bool_)
    node_next = np.empty(2 * n + 1, dtype=np.int64)
    used = 0
    r_head = np.full(n_buf, -1, dtype=np.int64)
    w_head = np.full(n_buf, -1, dtype=np.int64)
    cover_op = np.zeros(n_buf, dtype=np.int64)
    cover_el = np.zeros(n_buf, dtype=np.int64)
    cover_bound = np.zeros(n_buf, dtype=np.int64)
    last_write = np.full(n_buf, -1, dtype=np.int64)  # each buffer's newest write node
    v = np.zeros(words, dtype=np.uint64)
    redundant = 0
    for i in range(n):
        a = row_op[i]
        rb = row_rb[i]
        wb = row_wb[i]
        re = row_re[i]
        we = row_we[i]
        if row_kind[i] == 2:  # a join: a cover of its buffer where it follows every write
            if last_write[rb] >= cover_bound[rb]:
                upto = _covered(cover_op, cover_el, cover_bound, rb, a, re, pos, depth,
                                dep_ptr, dep_orbit, dep_elem, mul, inv, order, keys, marks,
                                stack_o, stack_e, stamp)  # fmt: skip
                follows = True
                w = w_head[rb]
                while w >= 0 and follows:
                    if w >= upto:
                        got = compact_precedes(node_op[w], node_el[w], a, re, pos, depth,
                                               dep_ptr, dep_orbit, dep_elem, mul, inv, order,
                                               keys, marks, stack_o, stack_e, stamp)  # fmt: skip
                        follows = got == 1
                    w = node_next[w]
                if follows:
                    cover_op[rb] = a
                    cover_el[rb] = re
                    cover_bound[rb] = last_write[rb] + 1
            continue
        is_copy = row_kind[i] == 0
        upto = _covered(cover_op, cover_el, cover_bound, rb, a, re, pos, depth, dep_ptr,
                        dep_orbit, dep_elem, mul, inv, order, keys, marks, stack_o, stack_e,
                        stamp)  # fmt: skip
        w = w_head[rb]
        while w >= 0:
            if w >= upto:
                got = compact_precedes(node_op[w], node_el[w], a, re, pos, depth, dep_ptr,
                                       dep_orbit, dep_elem, mul, inv, order, keys, marks,
                                       stack_o, stack_e, stamp)  # fmt: skip
                if got != 1:
                    return (FAIL if got == 0 else UNDECIDED), i, 0
            w = node_next[w]
        _carry(value, rb, has, own_bit, rank_perms[row_carry[i]], row_carry[i] == 0, n_ranks,
               v)  # fmt: skip
        if last_write[rb] >= cover_bound[rb]:  # this read follows every write so far
            cover_op[rb] = a
            cover_el[rb] = re
            cover_bound[rb] = last_write[rb] + 1
        node_op[used] = a
        node_el[used] = re
        node_copy[used] = False
        node_next[used] = r_head[rb]
        r_head[rb] = used
        used += 1
        r = r_head[wb]
        while r >= 0:
            got = compact_precedes(node_op[r], node_el[r], a, we, pos, depth, dep_ptr, dep_orbit,
                                   dep_elem, mul, inv, order, keys, marks, stack_o, stack_e,
                                   stamp)  # fmt: skip
            if got != 1:
                return (FAIL if got == 0 else UNDECIDED), i, 0
            r = node_next[r]
        upto = _covered(cover_op, cover_el, cover_bound, wb, a, we, pos, depth, dep_ptr,
                        dep_orbit, dep_elem, mul, inv, order, keys, marks, stack_o, stack_e,
                        stamp)  # fmt: skip
        w = w_head[wb]
        kept = -1
        while w >= 0:
            nxt = node_next[w]
            if w < upto:
                got = 1
            elif not is_copy and not node_copy[w]:
                got = 0  # reduces into one buffer may run at once: no query (kept either way)
            else:
                got = compact_precedes(node_op[w], node_el[w], a, we, pos, depth, dep_ptr,
                                       dep_orbit, dep_elem, mul, inv, order, keys, marks,
                                       stack_o, stack_e, stamp)  # fmt: skip
            if got < 0:
                return UNDECIDED, i, 0
            keep = True
            if got == 1:
                keep = (not is_copy) and node_copy[w]
            elif is_copy or node_copy[w]:
                return FAIL, i, 0
            if keep:
                node_next[w] = kept
                kept = w
            w = nxt
        if not has[wb]:
            value[wb, :] = 0
            ob = own_bit[wb]
            value[wb, ob >> 6] = np.uint64(1) << np.uint64(ob & 63)
            has[wb] = True
        if is_copy:
            same = True
            for k in range(words):
                if value[wb, k] != v[k]:
                    same = False
            if same:
                redundant += 1
            value[wb, :] = v
        else:
            for k in range(words):
                if value[wb, k] & v[k]:
                    return FAIL, i, 0
            for k in range(words):
                value[wb, k] |= v[k]
        node_op[used] = a
        node_el[used] = we
        node_copy[used] = is_copy
        node_next[used] = kept
        w_head[wb] = used
        last_write[wb] = used
        used += 1
        if is_copy:
            r_head[wb] = -1
    if not _complete(value, has, post, n_ranks):
        return FAIL, -1, 0
    return PASS, -1, redundant


def _complete(value, has, post, n_ranks):
    """Whether every buffer of ``post`` holds every rank's contribution."""
    full_words = n_ranks // 64
    rest = n_ranks - 64 * full_words
    for p in range(post.shape[0]):
        buf = post[p]
        if not has[buf]:
            if n_ranks != 1:
                return False
            continue
        for k in range(full_words):
            if value[buf, k] != ~np.uint64(0):
                return False
        if rest and value[buf, full_words] != (np.uint64(1) << np.uint64(rest)) - np.uint64(1):
            return False
    return True


def compiled_compact_window():
    """:func:`run_compact_window` compiled (memoized per process, cached on disk), or itself
    without numba; its helpers compiled with it."""
    precedes = compiled(compact_precedes)
    helpers = {
        "compact_precedes": precedes,
        "_carry": compiled(_carry),
        "_covered": compiled(_covered, helpers={"compact_precedes": precedes}),
        "_complete": compiled(_complete),
    }
    return compiled(run_compact_window, helpers=helpers)


def walk_arrays() -> tuple[np.ndarray, ...]:
    """The walk's table (keys, marks), stacks and stamp for one verification."""
    half = TABLE_SLOTS // 2 + 1
    return (np.zeros(TABLE_SLOTS, dtype=np.int64), np.zeros(TABLE_SLOTS, dtype=np.int32),
            np.zeros(half, dtype=np.int64), np.zeros(half, dtype=np.int64),
            np.zeros(1, dtype=np.int64))  # fmt: skip


__all__ = ["FAIL", "PASS", "UNDECIDED", "compiled_compact_window", "walk_arrays"]
