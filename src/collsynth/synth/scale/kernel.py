"""Compiled SCALE-CCL event loop (numba): the same decisions as :class:`.algo.Planner`.

:class:`.algo.Planner` is the readable reference; this module runs the identical loop over
flat numpy arrays so a re-plan takes milliseconds. Every rule, tie-break and floating-point
expression is the reference's, evaluated in the same order, so the two produce bit-identical
plans (``tests/test_scale.py`` compares them operation by operation and pins digests).

Representation:

* subchunk sets are bit sets of ``W`` int64 words holding 63 bits each (the sign bit is never
  used, so ``x & -x``, ``x & (x - 1)`` and shifts behave as on Python integers); subchunk ``b``
  is bit ``b % 63`` of word ``b // 63``, so "lowest set bit" is still the first in queue order;
* datacenter sets are int64 bit masks (at most 63 datacenters, else the reference runs);
* the completion-event heap is four parallel arrays ordered by ``(time, type, seq)``, exactly
  the reference's tuple order; start events are a heap of bare times;
* the router Dijkstra (:func:`_reach`) keeps its entries (cost, node, arrival, chain, free) in
  arrays and orders them like the reference's tuples, chain compared lexicographically; its
  last result is memoised until a stream through routers is committed (the reference's cache);
* ``watch`` (router link -> GPU links waiting for it) is a boolean matrix, ``blocked_any`` a
  flag array plus a list; the links touched in a round are a list sorted before deciding;
* the heaps and the operation columns grow (doubling) before a round's decisions whenever
  they might not hold what the round can add (each touched link commits at most once);
* a stream whose link frees less than ``eps`` after the round's time starts when it frees
  (``noise``: the reference's ``NOISE``), as in :meth:`.algo.Planner.commit`.

Counters and scalar state live in the int64 array ``st`` (indices below) and ``fs`` (floats).
"""

from __future__ import annotations

import numpy as np
from numba import njit

TX_END, RX_END, TX_START, RX_START = 0, 1, 2, 3
WB = 63             # bits per word

# st[] indices
SEQ, HN, SN, NOPS, NRL, GEN, WHY, NBUSY, SS, LWNF, REFUSED, DUPS, ROUNDS = range(13)
EV0 = 13            # EV0 + event type: events processed/scheduled by type
RC_X, RC_GEN, STAMP, TRN, BN, OKMASK, ERR, RC_STAMP = range(17, 25)
NST = 25
# fs[] indices
RC_TA = 0
NFS = 1
# why codes (a GPU link into a router that sent nothing: what it waits for)
WHY_NONE, WHY_ANY, WHY_BUSY = 0, 1, 2


@njit(cache=True)
def _low(x):
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


@njit(cache=True)
def _pop(x):
    c = 0
    while x:
        x &= x - 1
        c += 1
    return c


@njit(cache=True)
def _hasbit(a, b):
    return (a[b // WB] >> (b % WB)) & 1


# ---------------------------------------------------------------------------- heaps
@njit(cache=True)
def _eless(ht, hk, hs, i, j):
    if ht[i] != ht[j]:
        return ht[i] < ht[j]
    if hk[i] != hk[j]:
        return hk[i] < hk[j]
    return hs[i] < hs[j]


@njit(cache=True)
def _eswap(ht, hk, hs, ha, i, j):
    ht[i], ht[j] = ht[j], ht[i]
    hk[i], hk[j] = hk[j], hk[i]
    hs[i], hs[j] = hs[j], hs[i]
    ha[i], ha[j] = ha[j], ha[i]


@njit(cache=True)
def _epush(ht, hk, hs, ha, st, t, kind, a):
    st[SEQ] += 1
    i = st[HN]
    st[HN] = i + 1
    ht[i] = t
    hk[i] = kind
    hs[i] = st[SEQ]
    ha[i] = a
    while i > 0:
        p = (i - 1) >> 1
        if _eless(ht, hk, hs, i, p):
            _eswap(ht, hk, hs, ha, i, p)
            i = p
        else:
            break


@njit(cache=True)
def _epop(ht, hk, hs, ha, st):
    """Remove the root; its fields are left at index ``HN`` (the old last slot)."""
    n = st[HN] - 1
    st[HN] = n
    _eswap(ht, hk, hs, ha, 0, n)
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _eless(ht, hk, hs, c + 1, c):
            c += 1
        if _eless(ht, hk, hs, c, i):
            _eswap(ht, hk, hs, ha, i, c)
            i = c
        else:
            break
    return n


@njit(cache=True)
def _spush(sh, st, t):
    i = st[SN]
    st[SN] = i + 1
    sh[i] = t
    while i > 0:
        p = (i - 1) >> 1
        if sh[i] < sh[p]:
            sh[i], sh[p] = sh[p], sh[i]
            i = p
        else:
            break


@njit(cache=True)
def _spop(sh, st):
    n = st[SN] - 1
    st[SN] = n
    sh[0] = sh[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and sh[c + 1] < sh[c]:
            c += 1
        if sh[c] < sh[i]:
            sh[i], sh[c] = sh[c], sh[i]
            i = c
        else:
            break


@njit(cache=True)
def _trigger_all(n, gout_ptr, gout, trig_in, trig_list, trig_none):
    """Mark every GPU out-link for a scheduling pass (the seed's schedule-all); returns the
    number of links listed."""
    tn = 0
    for u in range(n):
        for p in range(gout_ptr[u], gout_ptr[u + 1]):
            l = gout[p]
            if not trig_in[l]:
                trig_in[l] = 1
                trig_list[tn] = l
                tn += 1
            trig_none[l] = 1
    return tn


@njit(cache=True)
def _grow(a, cap):
    """A copy of 1-d ``a`` with room for ``cap`` elements."""
    out = np.zeros(cap, dtype=a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True)
def _sort_links(a, n, mark):
    """Sort ``a[:n]`` (distinct link ids, ``mark[l]`` set for each) in place: insertion sort
    for short lists, else one pass over the marks."""
    if n < 48:
        for i in range(1, n):
            x = a[i]
            j = i - 1
            while j >= 0 and a[j] > x:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
    else:
        j = 0
        for l in range(len(mark)):
            if mark[l]:
                a[j] = l
                j += 1


# ---------------------------------------------------------------------------- router Dijkstra
@njit(cache=True)
def _rless(e_cost, e_y, e_ty, e_free, e_len, e_chain, i, j):
    """Tuple order of the reference's heap entries (cost, node, arrival, chain, free)."""
    if e_cost[i] != e_cost[j]:
        return e_cost[i] < e_cost[j]
    if e_y[i] != e_y[j]:
        return e_y[i] < e_y[j]
    if e_ty[i] != e_ty[j]:
        return e_ty[i] < e_ty[j]
    li, lj = e_len[i], e_len[j]
    for p in range(min(li, lj)):
        if e_chain[i, p] != e_chain[j, p]:
            return e_chain[i, p] < e_chain[j, p]
    if li != lj:
        return li < lj
    return e_free[i] < e_free[j]


@njit(cache=True)
def _reach(x, ta, T, D, R):
    """Cut-through reach of switch/router ``x`` for a head arriving at ``ta`` (the
    reference's ``reach_now``): labels per node and the mask of datacenters whose best entry
    needs no waiting, in ``st[OKMASK]``."""
    (link_dst, ldst_gpu, hop_kd, gh_ptr, gh_l, nh_ptr, nh_l, delta, alpha, eps, ndom) = T
    free, st, fs = D
    (lab, lab_e, e_cost, e_y, e_ty, e_free, e_len, e_chain, eh, best_c, best_f) = R
    if st[RC_X] == x and fs[RC_TA] == ta and st[RC_GEN] == st[GEN]:
        return
    stamp = st[STAMP] + 1
    st[STAMP] = stamp
    for kd in range(ndom):
        best_c[kd] = np.inf
        best_f[kd] = 0
    e_cost[0] = 0.0
    e_y[0] = x
    e_ty[0] = ta
    e_free[0] = 1
    e_len[0] = 0
    ne = 1
    eh[0] = 0
    hn = 1
    while hn > 0:
        e = eh[0]
        hn -= 1
        eh[0] = eh[hn]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= hn:
                break
            if c + 1 < hn and _rless(e_cost, e_y, e_ty, e_free, e_len, e_chain,
                                     eh[c + 1], eh[c]):
                c += 1
            if _rless(e_cost, e_y, e_ty, e_free, e_len, e_chain, eh[c], eh[i]):
                eh[i], eh[c] = eh[c], eh[i]
                i = c
            else:
                break
        y = e_y[e]
        if lab[y] == stamp:
            continue
        lab[y] = stamp
        lab_e[y] = e
        cost = e_cost[e]
        ty = e_ty[e]
        fr = e_free[e]
        lim = ty + (eps if ty <= 1.0 else eps * ty)
        for p in range(gh_ptr[y], gh_ptr[y + 1]):      # entries into datacenters
            l2 = gh_l[p]
            kd = hop_kd[l2]
            fa = free[l2]
            if fa > lim:
                c2 = cost + (fa - ty) + delta[l2] + alpha[l2]
                if c2 < best_c[kd]:
                    best_c[kd] = c2
                    best_f[kd] = 0
            else:
                c2 = cost + delta[l2] + alpha[l2]
                old = best_c[kd]
                if c2 < old:
                    best_c[kd] = c2
                    best_f[kd] = fr
                elif fr != 0 and c2 == old:
                    best_f[kd] = 1
        for p in range(nh_ptr[y], nh_ptr[y + 1]):      # on to further switches/routers
            l2 = nh_l[p]
            v = link_dst[l2]
            if lab[v] != stamp:
                fa = free[l2]
                wait = fa - ty if fa > lim else 0.0
                k = ne
                ne += 1
                e_cost[k] = cost + wait + delta[l2] + alpha[l2]
                e_y[k] = v
                e_ty[k] = ty + alpha[l2]
                e_free[k] = 1 if (fr != 0 and wait == 0.0) else 0
                L = e_len[e]
                for q in range(L):
                    e_chain[k, q] = e_chain[e, q]
                e_chain[k, L] = l2
                e_len[k] = L + 1
                i = hn
                hn += 1
                eh[i] = k
                while i > 0:
                    par = (i - 1) >> 1
                    if _rless(e_cost, e_y, e_ty, e_free, e_len, e_chain, eh[i], eh[par]):
                        eh[i], eh[par] = eh[par], eh[i]
                        i = par
                    else:
                        break
    ok = 0
    for kd in range(ndom):
        if best_f[kd]:
            ok |= 1 << kd
    st[OKMASK] = ok
    st[RC_X] = x
    st[RC_GEN] = st[GEN]
    st[RC_STAMP] = stamp
    fs[RC_TA] = ta


@njit(cache=True)
def _serve(u, lid, d, t, T, D, R, V, P):
    """Subchunk Scheduling for GPU link ``lid`` into switch/router ``d`` with LWNF at the
    routers (the reference's ``serve_link``, ``useful_net`` and ``forward``). Returns
    ``(route length, subchunk)``, the route in ``chain``; length -1 when nothing was sent (the
    link then waits in ``watch`` or ``blocked``)."""
    (link_dst, ldst_gpu, hop_kd, gh_ptr, gh_l, nh_ptr, nh_l, delta, alpha, eps, ndom) = T
    free, st, fs = D
    (lab, lab_e, e_cost, e_y, e_ty, e_free, e_len, e_chain, eh, best_c, best_f) = R
    (W, nch, k, gin_ptr, qpos, qrank, rdmask, out_ptr, out_l, ldmask, ldst_rank, net_nodes,
     has, cov, dwant, dcov, inflight, excluded, held, useful, row, rows, busy, chain, watch,
     blocked, blist) = V
    rm = rdmask[d]
    cl = -1
    b = -1
    # ------------------------------------------------ serve_link(u, lid, t)
    ta = t + alpha[lid]
    base = gin_ptr[d]
    nq = gin_ptr[d + 1] - base
    mine = qpos[lid]
    for w in range(W):
        excluded[w] = 0
    st[WHY] = WHY_ANY
    for _attempt in range(4):
        st[SS] += 1
        for w in range(W):
            held[w] = has[u, w] & ~excluded[w]
        # ---------------------------------------- useful_net(d, ta, held)
        needy = 0
        for kd in range(ndom):
            if (rm >> kd) & 1:
                for w in range(W):
                    if dwant[kd, w] & ~dcov[kd, w] & held[w]:
                        needy |= 1 << kd
                        break
        anyrow = False
        if needy == 0:
            st[WHY] = WHY_NONE
        else:
            lim2 = ta + (eps if ta <= 1.0 else eps * ta)
            first = 0
            nb = 0
            for p in range(out_ptr[d], out_ptr[d + 1]):
                l2 = out_l[p]
                if free[l2] <= lim2:
                    first |= ldmask[l2]
                elif ldmask[l2] & needy:
                    busy[nb] = l2
                    nb += 1
            if not first & needy:
                st[WHY] = WHY_BUSY
                st[NBUSY] = nb
            else:
                st[WHY] = WHY_ANY
                _reach(d, ta, T, D, R)
                ok = st[OKMASK]
                for w in range(W):
                    out = 0
                    for kd in range(ndom):
                        if (ok >> kd) & 1:
                            out |= dwant[kd, w] & ~dcov[kd, w]
                    useful[w] = out
                    rw = held[w] & out
                    row[w] = rw
                    if rw:
                        anyrow = True
        if not anyrow:
            break
        for i in range(nq):
            r = qrank[base + i]
            for w in range(W):
                rows[i, w] = has[r, w] & useful[w]
        for w in range(W):
            rows[mine, w] = row[w]
        b = _pick(row, rows, nq, lid, mine, t, W, P)
        if b < 0:
            break
        # -------------------------------------------- forward(lid, b, t)
        _reach(d, ta, T, D, R)
        st[LWNF] += 1
        ok = st[OKMASK]
        bw_ = b // WB
        bb = np.int64(1) << (b % WB)
        dmiss = 0
        for kd in range(ndom):
            if (ok >> kd) & 1 != 0 and dwant[kd, bw_] & ~dcov[kd, bw_] & bb != 0:
                dmiss |= 1 << kd
        L = -1
        if dmiss == 0:
            st[REFUSED] += 1
        else:
            ch = b % nch
            best = -1
            best_fv = np.inf
            best_y = -1
            stamp = st[RC_STAMP]
            for yi in range(len(net_nodes)):
                y = net_nodes[yi]
                if lab[y] != stamp:
                    continue
                e = lab_e[y]
                if not e_free[e]:
                    continue
                cost = e_cost[e]
                ty = e_ty[e]
                lim3 = ty + (eps if ty <= 1.0 else eps * ty)
                for p in range(out_ptr[y], out_ptr[y + 1]):
                    l2 = out_l[p]
                    if not ldst_gpu[l2] or free[l2] > lim3:
                        continue
                    r = ldst_rank[l2]
                    kd = hop_kd[l2]
                    if (dmiss >> kd) & 1 == 0 or cov[r, bw_] & bb != 0:
                        continue
                    q = inflight[r] * delta[l2]
                    cnt = 0
                    for j in range(k):
                        cnt += _hasbit(cov[r], j * nch + ch)
                    prog = cnt / k * delta[l2]
                    f = cost + delta[l2] + alpha[l2] + 1.0 * q + 1.0 * prog
                    if f < best_fv:
                        best = l2
                        best_fv = f
                        best_y = y
            if best < 0:
                st[REFUSED] += 1
            else:
                e = lab_e[best_y]
                L = e_len[e]
                chain[0] = lid
                for q2 in range(L):
                    chain[1 + q2] = e_chain[e, q2]
                chain[1 + L] = best
                L += 2
        if L > 0:
            cl = L
            break
        excluded[bw_] |= bb
        st[WHY] = WHY_ANY
    if cl < 0:
        why = st[WHY]
        if why == WHY_ANY:
            if not blocked[lid]:
                blocked[lid] = 1
                blist[st[BN]] = lid
                st[BN] += 1
        elif why == WHY_BUSY:
            for p in range(st[NBUSY]):
                watch[busy[p], lid] = 1
    return cl, b


# ---------------------------------------------------------------------------- the planner
@njit(cache=True)
def _commit(u, chain, L, b, t, A, B):
    (sub_bytes, S, bw, alpha, ldst_rank, dom, want, noise) = A
    (free, st, ht, hk, hs, ha, sh, has, cov, dcov, dneed, dneed_bits, via, inflight,
     op_src, op_dst, op_sub, op_start, op_fin, op_dep, op_rptr, route_l) = B
    op = st[NOPS]
    last = chain[L - 1]
    v = ldst_rank[last]
    if L == 1:      # GPU -> GPU: one hop, starting now (or when the link frees, < eps on)
        if free[last] - t > noise * t:
            t = free[last]
        dur = sub_bytes / bw[last]
        free[last] = t + dur
        _epush(ht, hk, hs, ha, st, t + dur, TX_END, last)
        s = t + alpha[last]
        _spush(sh, st, s)
        st[EV0 + TX_START] += 1
        st[EV0 + RX_START] += 1
    else:
        st[GEN] += 1    # links out of switches/routers change: the reach memo is stale
        mn = bw[chain[0]]
        for i in range(1, L):
            if bw[chain[i]] < mn:
                mn = bw[chain[i]]
        dur = sub_bytes / mn
        s = t
        shift = 0.0
        for i in range(L):
            l = chain[i]
            late = free[l] - s
            if late > shift and late > noise * s:
                shift = late
            s += alpha[l]
        if shift > 0.0:
            t = t + shift
        s = t
        for i in range(L):
            l = chain[i]
            free[l] = s + dur
            st[EV0 + TX_START] += 1
            if s != t:
                _spush(sh, st, s)
            _epush(ht, hk, hs, ha, st, s + dur, TX_END, l)
            s += alpha[l]
            _spush(sh, st, s)
            st[EV0 + RX_START] += 1
    fin = s + dur
    _epush(ht, hk, hs, ha, st, fin, RX_END, op)
    op_src[op] = u
    op_dst[op] = v
    op_sub[op] = b
    op_start[op] = t
    op_fin[op] = fin
    op_dep[op] = via[u * S + b]
    nr = st[NRL]
    for i in range(L):
        route_l[nr + i] = chain[i]
    st[NRL] = nr + L
    op_rptr[op + 1] = nr + L
    st[NOPS] = op + 1
    inflight[v] += 1
    w = b // WB
    bit = np.int64(1) << (b % WB)
    if not cov[v, w] & bit:
        cov[v, w] |= bit
        kd = dom[v]
        dcov[kd, w] |= bit
        if want[v, w] & bit:
            i = kd * S + b
            dneed[i] -= 1
            if dneed[i] == 0:
                dneed_bits[kd, w] &= ~bit


@njit(cache=True)
def _pick(row, rows, nq, lid, mine, t, W, P):
    """Algorithm 1 given the queues (the reference's ``Planner.pick``)."""
    (gin_ptr, gin, link_dst, delta, free, st, once, twice, tq, dq, dups) = P
    for w in range(W):
        o = 0
        tw = 0
        for i in range(nq):
            r = rows[i, w]
            tw |= o & r
            o |= r
        once[w] = o
        twice[w] = tw
    for w in range(W):
        uq = row[w] & ~twice[w]
        if uq:
            return w * WB + _low(uq)
    st[DUPS] += 1
    st[WHY] = WHY_ANY
    base = gin_ptr[link_dst[lid]]
    for i in range(nq):
        q = gin[base + i]
        dq[i] = delta[q]
        fq = free[q] - t
        cnt = 0
        for w in range(W):
            cnt += _pop(rows[i, w] & (once[w] & ~twice[w]))
        tq[i] = (0.0 if 0.0 > fq else fq) + dq[i] * cnt
    for w in range(W):
        dups[w] = twice[w]
    for w in range(W):
        x = dups[w]
        while x:
            low = x & -x
            x ^= low
            best_i = -1
            best_c = np.inf
            for i in range(nq):
                if rows[i, w] & low:
                    c = tq[i] + dq[i]
                    if c < best_c:
                        best_i = i
                        best_c = c
            tq[best_i] += dq[best_i]
            if best_i == mine:
                return w * WB + _low(low)
    return -1


@njit(cache=True)
def run(dims, fdims, link_dst, link_src_gpu, lsrc_rank, ldst_rank, ldst_gpu, hop_kd, ldmask,
        gout_ptr, gout, gin_ptr, gin, qrank, qpos, rdmask, out_ptr, out_l, gh_ptr, gh_l,
        nh_ptr, nh_l, net_nodes, dom, bw, alpha, delta, free, has, want):
    """The event loop. ``has``/``want``/``free`` are updated in place (copies are passed).

    Returns (st, op_src, op_dst, op_sub, op_start, op_fin, op_dep, op_rptr, route_l);
    ``st[ERR]`` is 1 when ranks cannot be reached."""
    n, m, W, S, nch, k, ndom, nnodes, max_ops, max_route, max_heap, max_ent = (  # initial
        dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7], dims[8],
        dims[9], dims[10], dims[11])
    sub_bytes, eps = fdims[0], fdims[1]
    st = np.zeros(NST, dtype=np.int64)
    fs = np.zeros(NFS, dtype=np.float64)
    st[RC_X] = -1
    # state
    cov = has.copy()
    for r in range(n):
        for w in range(W):
            want[r, w] &= ~has[r, w]
    dcov = np.zeros((ndom, W), dtype=np.int64)
    dwant = np.zeros((ndom, W), dtype=np.int64)
    dneed = np.zeros(ndom * S, dtype=np.int64)
    for r in range(n):
        kd = dom[r]
        for w in range(W):
            dcov[kd, w] |= cov[r, w]
            dwant[kd, w] |= want[r, w]
            x = want[r, w]
            while x:
                low = x & -x
                dneed[kd * S + w * WB + _low(low)] += 1
                x ^= low
    dneed_bits = dwant.copy()
    via = np.full(n * S, -1, dtype=np.int64)
    inflight = np.zeros(n, dtype=np.int64)
    ht = np.zeros(max_heap, dtype=np.float64)
    hk = np.zeros(max_heap, dtype=np.int64)
    hs = np.zeros(max_heap, dtype=np.int64)
    ha = np.zeros(max_heap, dtype=np.int64)
    sh = np.zeros(max_heap, dtype=np.float64)
    op_src = np.zeros(max_ops, dtype=np.int64)
    op_dst = np.zeros(max_ops, dtype=np.int64)
    op_sub = np.zeros(max_ops, dtype=np.int64)
    op_start = np.zeros(max_ops, dtype=np.float64)
    op_fin = np.zeros(max_ops, dtype=np.float64)
    op_dep = np.zeros(max_ops, dtype=np.int64)
    op_rptr = np.zeros(max_ops + 1, dtype=np.int64)
    route_l = np.zeros(max_ops * 2, dtype=np.int64)
    watch = np.zeros((m, m), dtype=np.uint8)
    blocked = np.zeros(m, dtype=np.uint8)
    blist = np.zeros(m, dtype=np.int64)
    trig_in = np.zeros(m, dtype=np.uint8)
    trig_none = np.zeros(m, dtype=np.uint8)
    trig_bits = np.zeros((m, W), dtype=np.int64)
    trig_list = np.zeros(m, dtype=np.int64)
    busy = np.zeros(m, dtype=np.int64)
    chain = np.zeros(max_route, dtype=np.int64)
    # scratch
    useful = np.zeros(W, dtype=np.int64)
    row = np.zeros(W, dtype=np.int64)
    held = np.zeros(W, dtype=np.int64)
    excluded = np.zeros(W, dtype=np.int64)
    once = np.zeros(W, dtype=np.int64)
    twice = np.zeros(W, dtype=np.int64)
    dups = np.zeros(W, dtype=np.int64)
    maxq = 1
    for x in range(nnodes):
        maxq = max(maxq, gin_ptr[x + 1] - gin_ptr[x])
    rows = np.zeros((maxq, W), dtype=np.int64)
    tq = np.zeros(maxq, dtype=np.float64)
    dq = np.zeros(maxq, dtype=np.float64)
    # router Dijkstra
    lab = np.zeros(nnodes, dtype=np.int64)
    lab_e = np.zeros(nnodes, dtype=np.int64)
    e_cost = np.zeros(max_ent, dtype=np.float64)
    e_y = np.zeros(max_ent, dtype=np.int64)
    e_ty = np.zeros(max_ent, dtype=np.float64)
    e_free = np.zeros(max_ent, dtype=np.int64)
    e_len = np.zeros(max_ent, dtype=np.int64)
    e_chain = np.zeros((max_ent, max_route), dtype=np.int64)
    eh = np.zeros(max_ent, dtype=np.int64)
    best_c = np.zeros(max(ndom, 1), dtype=np.float64)
    best_f = np.zeros(max(ndom, 1), dtype=np.int64)

    T = (link_dst, ldst_gpu, hop_kd, gh_ptr, gh_l, nh_ptr, nh_l, delta, alpha, eps, ndom)
    D = (free, st, fs)
    R = (lab, lab_e, e_cost, e_y, e_ty, e_free, e_len, e_chain, eh, best_c, best_f)
    A = (sub_bytes, S, bw, alpha, ldst_rank, dom, want, fdims[2])
    B = (free, st, ht, hk, hs, ha, sh, has, cov, dcov, dneed, dneed_bits, via, inflight,
         op_src, op_dst, op_sub, op_start, op_fin, op_dep, op_rptr, route_l)
    P = (gin_ptr, gin, link_dst, delta, free, st, once, twice, tq, dq, dups)
    V = (W, nch, k, gin_ptr, qpos, qrank, rdmask, out_ptr, out_l, ldmask, ldst_rank, net_nodes,
         has, cov, dwant, dcov, inflight, excluded, held, useful, row, rows, busy, chain, watch,
         blocked, blist)

    # queued traffic (re-planning input) completes its transmission when the queue drains
    for lid in range(m):
        if free[lid] > 0:
            _epush(ht, hk, hs, ha, st, free[lid], TX_END, lid)
    # schedule_all(0)
    now = 0.0
    st[TRN] = _trigger_all(n, gout_ptr, gout, trig_in, trig_list, trig_none)
    pending = True
    kicks = 0
    rounds = 0
    while True:
        if pending:
            # ---------------------------------------------------- schedule_links(triggered, now)
            tn = st[TRN]
            # room for what this round's decisions can add (each link commits at most once)
            grown = False
            need = st[HN] + tn * (max_route + 1) + 1
            if need > len(ht):
                cap = max(2 * len(ht), need)
                ht, hk, hs, ha = _grow(ht, cap), _grow(hk, cap), _grow(hs, cap), _grow(ha, cap)
                grown = True
            need = st[SN] + tn * 2 * max_route + 1
            if need > len(sh):
                sh = _grow(sh, max(2 * len(sh), need))
                grown = True
            need = st[NOPS] + tn + 1
            if need > len(op_src):
                cap = max(2 * len(op_src), need)
                op_src, op_dst, op_sub = _grow(op_src, cap), _grow(op_dst, cap), _grow(op_sub, cap)
                op_start, op_fin = _grow(op_start, cap), _grow(op_fin, cap)
                op_dep, op_rptr = _grow(op_dep, cap), _grow(op_rptr, cap + 1)
                grown = True
            need = st[NRL] + tn * max_route
            if need > len(route_l):
                route_l = _grow(route_l, max(2 * len(route_l), need))
                grown = True
            if grown:
                B = (free, st, ht, hk, hs, ha, sh, has, cov, dcov, dneed, dneed_bits, via,
                     inflight, op_src, op_dst, op_sub, op_start, op_fin, op_dep, op_rptr, route_l)
            _sort_links(trig_list, tn, trig_in)
            t = now
            lim = t + (eps if t <= 1.0 else eps * t)
            calls = 0
            for oi in range(tn):
                lid = trig_list[oi]
                hint_none = trig_none[lid]
                if free[lid] > lim:
                    continue
                u = lsrc_rank[lid]
                cl = -1
                b = -1
                if ldst_gpu[lid]:
                    v = ldst_rank[lid]
                    kd = dom[v]
                    anyrow = False
                    for w in range(W):
                        uw = (want[v, w] | dneed_bits[kd, w]) & ~cov[v, w]
                        useful[w] = uw
                        rw = has[u, w] & uw
                        row[w] = rw
                        if hint_none:
                            if rw:
                                anyrow = True
                        elif trig_bits[lid, w] & rw:
                            anyrow = True
                    if not anyrow:
                        continue
                    calls += 1
                    d = link_dst[lid]
                    base = gin_ptr[d]
                    nq = gin_ptr[d + 1] - base
                    b = -1
                    for w in range(W):
                        o = 0
                        tw = 0
                        for i in range(nq):
                            j = has[qrank[base + i], w] & useful[w]
                            tw |= o & j
                            o |= j
                        uq = row[w] & ~tw
                        if uq:
                            b = w * WB + _low(uq)
                            break
                    if b < 0:
                        for i in range(nq):
                            r = qrank[base + i]
                            for w in range(W):
                                rows[i, w] = has[r, w] & useful[w]
                        b = _pick(row, rows, nq, lid, qpos[lid], t, W, P)
                    if b >= 0:
                        chain[0] = lid
                        cl = 1
                else:
                    # useful_static: what some datacenter reachable through the router lacks
                    d = link_dst[lid]
                    anyrow = False
                    rm = rdmask[d]
                    for w in range(W):
                        hw = has[u, w] if hint_none else trig_bits[lid, w] & has[u, w]
                        if not hw:
                            continue
                        us = 0
                        for kd in range(ndom):
                            if (rm >> kd) & 1:
                                us |= dwant[kd, w] & ~dcov[kd, w]
                        if hw & us:
                            anyrow = True
                            break
                    if not anyrow:
                        continue
                    cl, b = _serve(u, lid, d, t, T, D, R, V, P)
                if cl > 0:
                    _commit(u, chain, cl, b, t, A, B)
            st[SS] += calls
            for oi in range(tn):
                l = trig_list[oi]
                trig_in[l] = 0
                trig_none[l] = 0
                for w in range(W):
                    trig_bits[l, w] = 0
            st[TRN] = 0
            pending = False
        # ---------------------------------------------------------------- next round
        if st[HN] == 0:
            if st[SN] > 0:      # only start events left: rounds of nothing to decide
                now = sh[0]
                lim = now + (eps if now <= 1.0 else eps * now)
                while st[SN] > 0 and sh[0] <= lim:
                    _spop(sh, st)
                rounds += 1
                continue
            missing = False
            for r in range(n):
                for w in range(W):
                    if want[r, w] & ~cov[r, w]:
                        missing = True
            if missing:
                # nothing in flight yet something is missing: retry from the last time
                kicks += 1
                later = np.inf
                for l in range(m):
                    if free[l] > now and free[l] < later:
                        later = free[l]
                if kicks > 2 and later == np.inf:
                    st[ERR] = 1
                    break
                if later != np.inf:
                    now = later
                st[TRN] = _trigger_all(n, gout_ptr, gout, trig_in, trig_list, trig_none)
                pending = True
                continue
            break
        now = ht[0]
        if st[SN] > 0 and sh[0] < now:
            now = sh[0]
        lim = now + (eps if now <= 1.0 else eps * now)
        while st[SN] > 0 and sh[0] <= lim:
            _spop(sh, st)
        tn = 0
        while st[HN] > 0 and ht[0] <= lim:
            i = _epop(ht, hk, hs, ha, st)
            kind = hk[i]
            a = ha[i]
            st[EV0 + kind] += 1
            if kind == TX_END:
                if link_src_gpu[a]:
                    if not trig_in[a]:
                        trig_in[a] = 1
                        trig_list[tn] = a
                        tn += 1
                    trig_none[a] = 1
                else:
                    for l in range(m):
                        if watch[a, l]:
                            watch[a, l] = 0
                            if not trig_in[l]:
                                trig_in[l] = 1
                                trig_list[tn] = l
                                tn += 1
                            trig_none[l] = 1
                    nbk = st[BN]
                    for p in range(nbk):
                        l = blist[p]
                        blocked[l] = 0
                        if not trig_in[l]:
                            trig_in[l] = 1
                            trig_list[tn] = l
                            tn += 1
                        trig_none[l] = 1
                    st[BN] = 0
            else:       # RX_END
                v = op_dst[a]
                b = op_sub[a]
                w = b // WB
                bit = np.int64(1) << (b % WB)
                has[v, w] |= bit
                via[v * S + b] = a
                inflight[v] -= 1
                for p in range(gout_ptr[v], gout_ptr[v + 1]):
                    l = gout[p]
                    if not trig_in[l]:
                        trig_in[l] = 1
                        trig_list[tn] = l
                        tn += 1
                    if not trig_none[l]:
                        trig_bits[l, w] |= bit
        rounds += 1
        st[TRN] = tn
        if tn > 0:
            pending = True
    st[ROUNDS] = rounds
    no = st[NOPS]
    return (st, op_src[:no].copy(), op_dst[:no].copy(), op_sub[:no].copy(),
            op_start[:no].copy(), op_fin[:no].copy(), op_dep[:no].copy(),
            op_rptr[:no + 1].copy(), route_l[:st[NRL]].copy())
