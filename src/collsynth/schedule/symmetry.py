"""Symmetries of one schedule: the operation maps that a topology automorphism induces.

An automorphism ``g`` of the topology (:mod:`collsynth.topology.symmetry`) maps a schedule
onto itself when a permutation ``sigma`` of its operations keeps everything the schedule says:
``sigma(i)`` goes from ``g(src[i])`` to ``g(dst[i])`` along the image of ``i``'s route, with
the same kind, bytes, step and planned times, and ``sigma`` maps the dependency edges onto the
dependency edges. This module finds ``sigma`` for one generator, either read off the planned
link orders (:func:`map_by_orders`: the operation at position ``p`` of link ``l``'s order goes
to the one at position ``p`` of ``g(l)``'s) or from the schedule's structure
(:func:`map_by_structure`: by route, ranks, kind and chunk), verifies it exactly
(:func:`check_op_map`), and splits the operations into orbits (:func:`op_orbits`). Nothing is
assumed from how the schedule was made; a map that does not verify raises
:class:`NotSymmetric` with the reason in words.

The simulator's quotient (:mod:`collsynth.sim.quotient`) and the compact schedule form
(:mod:`collsynth.schedule.compact`) both stand on it.
"""

from __future__ import annotations

import numpy as np

from ..arrays import MIX64, match_in_turn, spread64
from .dag import owners, ragged_arange
from .ir import OpKind, Schedule


class NotSymmetric(Exception):
    """The schedule is not symmetric under the group (or the quotient would not be exact):
    why, in words."""


def flat_orders(s: Schedule, n_links: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The link orders as (pointers per link, operations, each entry's link); None when an
    order names a link outside the topology (or one twice) or an operation that does not
    exist."""
    assert s.link_order is not None
    links, listed, ops = s.link_order_entries()
    if len(links) == 0 or links[0] < 0 or links[-1] >= n_links:
        return None
    if (np.diff(links) == 0).any():
        return None
    lengths = np.zeros(n_links, dtype=np.int64)
    lengths[links] = listed
    if len(ops) and (ops.min() < 0 or ops.max() >= s.num_ops):
        return None
    ptr = np.zeros(n_links + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    return ptr, ops, owners(ptr)


def _same(a: np.ndarray | None, perm: np.ndarray) -> bool:
    """Whether the per-operation column ``a`` (None: absent) is kept by ``perm``."""
    return a is None or bool(np.array_equal(a[perm], a, equal_nan=a.dtype.kind == "f"))


def _edges_kept(sigma: np.ndarray, dep_ptr: np.ndarray, dep_ids: np.ndarray) -> bool:
    """Whether ``sigma`` maps the dependency edges onto the dependency edges."""
    lengths = np.diff(dep_ptr)
    if not np.array_equal(lengths[sigma], lengths):
        return False
    if not len(dep_ids):
        return True
    owner = owners(dep_ptr)
    k = np.arange(len(dep_ids), dtype=np.int64) - dep_ptr[owner]
    if np.array_equal(dep_ids[dep_ptr[sigma[owner]] + k], sigma[dep_ids]):
        return True  # the images list their dependencies in the same order
    n = len(sigma)
    mapped = np.sort(sigma[owner] * n + sigma[dep_ids])
    return bool(np.array_equal(mapped, np.sort(owner * n + dep_ids)))


def map_by_orders(s, gen, entries, counts, hop_op, hop_k) -> np.ndarray:
    """The operation map of one generator (``gen``: its rank and link permutations), read off
    the link orders and verified (condition 2 of the module doc)."""
    rank_perm, link_perm = gen
    ptr, entry_op, entry_link = entries
    if not np.array_equal(counts[link_perm], counts):
        raise NotSymmetric("a generator maps a link onto one with another number of hops")
    shift = ptr[link_perm] - ptr[:-1]  # where each link's order starts in its image's
    image = entry_op[np.arange(len(entry_op), dtype=np.int64) + np.repeat(shift, counts)]
    n = s.num_ops
    sigma = np.full(n, -1, dtype=np.int64)
    sigma[entry_op] = image
    if not np.array_equal(sigma[entry_op], image):
        raise NotSymmetric("the link orders are not symmetric")
    _join_images(s, sigma, rank_perm)
    if sigma.min() < 0:
        raise NotSymmetric("the link orders are not symmetric")
    check_op_map(s, sigma, gen, hop_op, hop_k)
    return sigma


def _join_images(s: Schedule, sigma: np.ndarray, rank_perm: np.ndarray) -> None:
    """Where each join goes (into ``sigma``, whose other operations are mapped): to the join
    at the image of its rank whose dependencies are the images of its own (joins have no
    route, so no link order places them; their dependencies do). Verified with the rest."""
    joins = np.flatnonzero(s.kind == OpKind.JOIN)
    if not len(joins):
        return
    dep_ptr = s.dep_ptr.astype(np.int64)
    lengths = np.diff(dep_ptr)[joins]
    owner = np.repeat(np.arange(len(joins), dtype=np.int64), lengths)
    deps = s.dep_ids.astype(np.int64)[ragged_arange(lengths, dep_ptr[joins])]
    images = sigma[deps]
    if images.min(initial=0) < 0:
        raise NotSymmetric("a join waits for a join")
    mine = np.zeros(len(joins), dtype=np.uint64)
    theirs = np.zeros(len(joins), dtype=np.uint64)
    np.add.at(mine, owner, spread64(deps))
    np.add.at(theirs, owner, spread64(images))
    rank = s.src.astype(np.int64)[joins]
    mine ^= spread64(rank) * MIX64[2]
    theirs ^= spread64(rank_perm[rank]) * MIX64[2]
    found, one = match_keys(mine, theirs)
    if not one.all():
        raise NotSymmetric("joins are not told apart by rank and dependencies")
    sigma[joins] = joins[found]


def check_op_map(s, sigma, gen, hop_op, hop_k) -> None:
    """Refuse ``sigma`` unless it is a permutation of the operations that the generator
    ``gen`` (rank and link permutations) maps the schedule by (condition 2 of the module
    doc, link orders apart)."""
    rank_perm, link_perm = gen
    n = s.num_ops
    hit = np.zeros(n, dtype=np.bool_)
    hit[sigma] = True
    if not hit.all():
        raise NotSymmetric("the link orders do not map the operations one to one")
    if not (np.array_equal(s.src[sigma], rank_perm[s.src])
            and np.array_equal(s.dst[sigma], rank_perm[s.dst])):  # fmt: skip
        raise NotSymmetric("senders or receivers are not symmetric")
    for column in (s.kind, s.start, s.duration, s.step, s.part_lo, s.part_hi, s.part_den):
        if not _same(column, sigma):
            raise NotSymmetric("kinds, sizes, steps or planned times are not symmetric")
    lengths = np.diff(s.route_ptr)
    if not np.array_equal(lengths[sigma], lengths):
        raise NotSymmetric("routes are not symmetric")
    if not np.array_equal(s.route_links[s.route_ptr[sigma[hop_op]] + hop_k],
                          link_perm[s.route_links]):  # fmt: skip
        raise NotSymmetric("routes are not symmetric")
    if not _edges_kept(sigma, s.dep_ptr.astype(np.int64), s.dep_ids.astype(np.int64)):
        raise NotSymmetric("dependencies are not symmetric")


def _route_hashes(s: Schedule, link_perm: np.ndarray, hop_op, hop_k) -> tuple:
    """Each operation's route hashed, as it is and mapped by ``link_perm``."""
    weights = np.random.default_rng(0x5EED).integers(1, 2**63, size=int(hop_k.max(initial=0)) + 1,
                                                     dtype=np.uint64) | np.uint64(1)  # fmt: skip
    w = weights[hop_k]
    links = s.route_links.astype(np.uint64) + np.uint64(1)
    mapped = link_perm[s.route_links].astype(np.uint64) + np.uint64(1)
    mine = np.zeros(s.num_ops, dtype=np.uint64)
    theirs = np.zeros(s.num_ops, dtype=np.uint64)
    routed = np.flatnonzero(np.diff(s.route_ptr) > 0)  # a join has no hop: hash 0
    if len(routed):
        starts = s.route_ptr[routed].astype(np.int64)
        mine[routed] = np.add.reduceat(links * w, starts)
        theirs[routed] = np.add.reduceat(mapped * w, starts)
    return mine, theirs


def match_keys(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``wanted``, the index of the one entry of ``keys`` equal to it (-1 where
    none) and whether exactly one is.

    Both sides are sorted by value (``np.sort``, several times faster than ``np.argsort``):
    each key's top ``64 - _INDEX_BITS`` bits with its index in the bits below. A wanted
    value whose top bits one key alone has matches it if the whole values are equal; top
    bits that several keys share with equal values are duplicates (no unique match); top
    bits shared by different values (a rare coincidence of hashes) are searched exactly."""
    n, m = len(keys), len(wanted)
    if n == 0 or m == 0 or max(n, m) >= 1 << _INDEX_BITS:
        return _match_exactly(keys, wanted)
    shift, low = np.uint64(_INDEX_BITS), np.uint64((1 << _INDEX_BITS) - 1)
    packed = np.sort(((keys >> shift) << shift) | np.arange(n, dtype=np.uint64))
    order = (packed & low).astype(np.int64)
    top = packed >> shift
    full = keys[order]
    new_run = np.empty(n, dtype=np.bool_)
    new_run[0] = True
    np.not_equal(top[1:], top[:-1], out=new_run[1:])
    run = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    mixed = np.zeros(len(starts), dtype=np.bool_)  # runs whose whole values differ
    mixed[run[full != full[starts[run]]]] = True
    w_packed = np.sort(((wanted >> shift) << shift) | np.arange(m, dtype=np.uint64))
    w_idx = (w_packed & low).astype(np.int64)
    w_top = w_packed >> shift
    lo = np.searchsorted(top, w_top, side="left")
    hi = np.searchsorted(top, w_top, side="right")
    hit = np.flatnonzero(hi > lo)
    lo, hi, w_idx = lo[hit], hi[hit], w_idx[hit]
    out = np.full(m, -1, dtype=np.int64)
    one = np.zeros(m, dtype=np.bool_)
    ok = (hi - lo == 1) & (full[lo] == wanted[w_idx])
    out[w_idx[ok]] = order[lo[ok]]
    one[w_idx[ok]] = True
    exact = mixed[run[lo]]
    if exact.any():
        cand = np.unique(order[ragged_arange(hi[exact] - lo[exact], lo[exact])])
        found, once = _match_exactly(keys[cand], wanted[w_idx[exact]])
        out[w_idx[exact]] = np.where(once, cand[found], -1)
        one[w_idx[exact]] = once
    return out, one


#: the bits of an index in :func:`match_keys`'s packed values (up to 16 M operations)
_INDEX_BITS = 24


def _match_exactly(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`match_keys` by indirect sorts (any size)."""
    order = np.argsort(keys)  # only entries met exactly once are used: no need for stability
    ordered = keys[order]
    # the wanted keys searched in sorted order (each search starts where the last ended:
    # about ten times faster than searching a million keys at random)
    by = np.argsort(wanted)
    lo = np.empty(len(wanted), dtype=np.int64)
    hi = np.empty(len(wanted), dtype=np.int64)
    lo[by] = np.searchsorted(ordered, wanted[by], side="left")
    hi[by] = np.searchsorted(ordered, wanted[by], side="right")
    one = hi - lo == 1
    out = np.full(len(wanted), -1, dtype=np.int64)
    out[one] = order[lo[one]]
    return out, one


def _chunk_guess(c, rank_perm: np.ndarray) -> np.ndarray:
    """Where each chunk goes under the rank permutation, as the collective says where it
    can (-1 elsewhere): a chunk anchored at one rank (its source, or its one destination)
    goes to the chunk of the same index among those anchored at the image rank."""
    n_chunks = c.num_chunks
    anchor = c.chunk_source.copy()
    if anchor.min(initial=0) < 0:
        anchor = np.array([d[0] if len(d := c.destinations(k)) == 1 else -1
                           for k in range(n_chunks)], dtype=np.int64)  # fmt: skip
    out = np.full(n_chunks, -1, dtype=np.int64)
    known = np.flatnonzero(anchor >= 0)
    if not len(known):
        return out
    by_anchor = known[np.argsort(anchor[known], kind="stable")]
    ranks = anchor[by_anchor]
    start = np.searchsorted(ranks, np.arange(c.num_ranks + 1))
    index = np.arange(len(by_anchor)) - start[ranks]
    counts = np.diff(start)
    target = rank_perm[ranks]
    ok = index < counts[target]
    out[by_anchor[ok]] = by_anchor[start[target[ok]] + index[ok]]
    return out


def _chunk_signatures(chunk, base, base_img, n_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each chunk goes by what its operations are: the chunk whose operations' keys
    (route, ranks, kind) are the images of its own, where exactly one is (-1 elsewhere);
    and the same with chunks that look alike (the pipelined pieces of one tree) paired in
    turn, by chunk id (-1 where none is). Guesses that the exact check of the whole map
    then accepts or refuses."""
    mine = np.zeros(n_chunks, dtype=np.uint64)
    theirs = np.zeros(n_chunks, dtype=np.uint64)
    np.add.at(mine, chunk, spread64(base))
    np.add.at(theirs, chunk, spread64(base_img))
    found, one = match_keys(mine, theirs)
    return np.where(one, found, -1), match_in_turn(mine, theirs)[0]


def map_by_structure(s: Schedule, gen, hop_op, hop_k) -> np.ndarray:
    """The operation map of one generator found from the schedule's structure, without link
    orders: an operation goes to the one whose route, sender, receiver and kind are the
    images of its own; where several share them, the chunk decides (and the part of the
    chunk), mapped as the operations matched uniquely map it, else as its operations say
    (:func:`_chunk_signatures`) or the collective anchors it; joins go by their
    dependencies (:func:`_join_images`); verified exactly."""
    rank_perm, link_perm = gen
    h, h_img = _route_hashes(s, link_perm, hop_op, hop_k)
    src, dst = s.src.astype(np.int64), s.dst.astype(np.int64)
    kind = s.kind.astype(np.uint64)
    base = (h ^ (src.astype(np.uint64) * MIX64[0]) ^ (dst.astype(np.uint64) * MIX64[1])
            ^ (kind * MIX64[2]))  # fmt: skip
    base_img = (h_img ^ (rank_perm[src].astype(np.uint64) * MIX64[0])
                ^ (rank_perm[dst].astype(np.uint64) * MIX64[1]) ^ (kind * MIX64[2]))  # fmt: skip
    sigma, one = match_keys(base, base_img)
    is_join = s.kind == OpKind.JOIN
    sigma[is_join] = -1  # placed by their dependencies below
    one &= ~is_join
    if not (one | is_join).all():
        chunk = s.chunk.astype(np.int64)
        if chunk.min(initial=0) < 0 or chunk.max(initial=0) >= s.collective.num_chunks:
            raise NotSymmetric("a chunk id is outside the collective")
        image = _chunk_guess(s.collective, rank_perm)
        routed = ~is_join
        by_ops, in_turn = _chunk_signatures(chunk[routed], base[routed], base_img[routed],
                                            len(image))  # fmt: skip
        # a chunk told apart by its operations goes where they say; else where the
        # collective anchors it; else to its look-alike of the same turn
        image = np.where(by_ops >= 0, by_ops, np.where(image >= 0, image, in_turn))
        image[chunk[one]] = chunk[sigma[one]]
        if not np.array_equal(image[chunk[one]], chunk[sigma[one]]):
            raise NotSymmetric("the chunks are not mapped consistently")
        rest = ~one & ~is_join
        if image[chunk[rest]].min() < 0:
            raise NotSymmetric("some chunk's image is not determined")
        part = np.zeros(len(chunk), dtype=np.uint64)
        if s.part_lo is not None and s.part_hi is not None:
            part = (s.part_lo.astype(np.uint64) * MIX64[4]) ^ (
                s.part_hi.astype(np.uint64) * MIX64[5]
            )
        full = base ^ (chunk.astype(np.uint64) * MIX64[3]) ^ part
        full_img = base_img[rest] ^ (image[chunk[rest]].astype(np.uint64) * MIX64[3]) ^ part[rest]
        found, unique_ = match_keys(full, full_img)
        if not unique_.all():
            raise NotSymmetric("operations are not told apart by route, ranks and chunk")
        sigma[rest] = found
    _join_images(s, sigma, rank_perm)
    check_op_map(s, sigma, gen, hop_op, hop_k)
    return sigma


def op_orbits(sigmas: list[np.ndarray], orders: list[int], size: int) -> tuple[np.ndarray,
                                                                           np.ndarray]:  # fmt: skip
    """The orbits of the operations under the maps ``sigmas`` (of orders ``orders``): the
    representatives (the smallest operation of each orbit) and every operation's orbit (an
    index into them); refused unless every orbit has ``size`` members. Each map's cycles get
    their smallest member by pointer doubling (``log2`` of its order rounds of two gathers),
    map after map, until every map keeps the labels (after one pass where the generators
    commute)."""
    n = len(sigmas[0])
    label = np.arange(n, dtype=np.int64)
    for _ in range(2 * len(sigmas) + 2):
        for sigma, order in zip(sigmas, orders):
            jump = sigma
            reach = 1
            while reach < order:
                label = np.minimum(label, label[jump])
                reach *= 2
                if reach < order:
                    jump = jump[jump]
        if all(np.array_equal(label[sg], label) for sg in sigmas):
            break
    else:
        raise NotSymmetric("the orbits of the operations were not found")
    is_rep = label == np.arange(n, dtype=np.int64)
    reps = np.flatnonzero(is_rep)
    index = np.cumsum(is_rep) - 1
    label = index[label]
    if len(reps) * size != n or not (np.bincount(label) == size).all():
        raise NotSymmetric("the operations do not fall into orbits of one size")
    return reps, label


def order_of(perm: np.ndarray) -> int:
    """The order of a permutation acting freely (every cycle as long): the length of the
    cycle through 0."""
    x, m = int(perm[0]), 1
    while x != 0:
        x, m = int(perm[x]), m + 1
    return m


__all__ = [
    "NotSymmetric",
    "check_op_map",
    "flat_orders",
    "map_by_orders",
    "map_by_structure",
    "match_keys",
    "op_orbits",
    "order_of",
]
