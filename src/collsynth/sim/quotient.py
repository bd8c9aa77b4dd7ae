"""Simulation on the quotient by a schedule's symmetry: one representative per orbit.

A schedule on a symmetric fabric is often symmetric itself: shifting every chassis by one (an
automorphism ``g`` of the topology, :func:`collsynth.topology.symmetry.automorphism_group`)
maps every operation onto another one with the same bytes, kind and priority, whose route is
the image of its route, whose dependencies are the images of its dependencies, and which
stands at the same position of its link's planned order. Then every orbit of operations under
the group ``G`` finishes at one time, and each link carries at every instant exactly the
images of what any other link of its orbit carries. So it is enough to simulate one
representative per orbit of operations, on one representative link per orbit of links: the
*quotient*, ``|G|`` times smaller (512 on ``dgx_a100:nodes=128``).

:func:`find_quotient` finds and *verifies* the symmetry (nothing is assumed from how the
schedule was made); :func:`collsynth.sim.simulator.simulate` uses it when it is found and
expands the results to every operation, hop and link.

**When it is exact.** The explicit simulation is deterministic; it gives every operation of
an orbit the same times when the schedule is invariant under the group *and* every choice the
simulation makes is invariant too. The choices that could break ties by operation id are
which waiting transfer a link (planned model) or a connection (realized model) serves next;
the quotient is used only where the schedule's link orders decide all of them: every hop of
every link stands in its link's order (and in the realized model the connection's order is
that order restricted to the pair, mapped by the group as well). The first-served model
(``fcfs``) breaks ties by hop id, so it is always simulated explicitly, as are schedules with
multicasts, a per-operation cost, or without complete link orders. Joins (no route, so no
link order) are mapped by their rank and dependencies. The conditions
checked (each vectorised, linear in hops and dependencies):

1. ``G`` acts freely on the ranks (by construction of the group) and on every link that
   carries a hop: every orbit of used links has ``|G|`` members.
2. For every generator ``g``, the map ``sigma`` read off the link orders (the operation at
   position ``p`` of link ``l``'s order goes to the one at position ``p`` of ``g(l)``'s) is
   one permutation of the operations that keeps source and destination ranks (mapped by
   ``g``), kind, bytes, planned start, duration and step, maps every route hop by hop and the
   dependency edges onto the dependency edges.
3. Every orbit of operations has ``|G|`` members (its representative is its smallest
   operation; orbits found by pointer doubling along each generator); and every
   representative link receives
   the positions ``0 .. n - 1`` of its order exactly once from the representatives' hops
   (so its queue in the quotient is exactly the one it has in the explicit simulation).

The simulation then runs on the representatives, each hop on its link's representative, at
the position its own hop has in its own link's order, and in the realized model in the
connection (representative link, image of the sender, image of the receiver) that the group
element carrying its link onto the representative gives. Results agree with the explicit
simulation to rounding (the test suite compares both on symmetric schedules it makes); on
large schedules the explicit realized simulation amplifies its own rounding (its symmetric
operations drift apart), and the quotient's figure is the symmetric execution's
(``docs/simulator.md``, "Symmetric schedules").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import MIX64, match_in_turn, spread64
from ..schedule.dag import owners, ragged_arange
from ..schedule.ir import OpKind, Schedule
from ..topology.symmetry import link_frames, topology_group


@dataclass(frozen=True)
class Quotient:
    """A verified symmetry of a schedule and what the quotient simulation needs.

    ``reps``: the representative operations (one per orbit, increasing ids); ``op_orbit``:
    every operation's orbit (an index into ``reps``); ``route_ptr``/``hops``: the
    representatives' routes (``hops`` are the explicit hop ids, route by route);
    ``hop_link``: the representative of each of those hops' links; ``hop_pos``: its position
    in its own link's order; ``order_ptr``/``order_hops``: per representative link, its hops
    in that order; ``hop_src``/``hop_dst``: the sender and receiver of the
    operation that the hop stands for on the representative link; ``link_rep``: every link's
    representative; ``dep_ptr``/``dep_ids``: the representatives' dependencies, as orbits;
    ``all_hop_op``/``all_hop_k``: every explicit hop's operation and place in its route."""

    order: int
    reps: np.ndarray
    op_orbit: np.ndarray
    route_ptr: np.ndarray
    hops: np.ndarray
    hop_link: np.ndarray
    hop_pos: np.ndarray
    order_ptr: np.ndarray
    order_hops: np.ndarray
    hop_src: np.ndarray
    hop_dst: np.ndarray
    link_rep: np.ndarray
    dep_ptr: np.ndarray
    dep_ids: np.ndarray
    all_hop_op: np.ndarray
    all_hop_k: np.ndarray

    @property
    def num_hops(self) -> int:
        return int(len(self.hops))

    def fits(self, s: Schedule) -> bool:
        """Whether this quotient has the shape of ``s``'s (a cheap check against passing
        another schedule's; it was verified for the schedule it was found for)."""
        return len(self.op_orbit) == s.num_ops and len(self.all_hop_op) == len(s.route_links)


class _NotExact(Exception):
    """The quotient would not be exact (or no symmetry was found): why, in words."""


def _flat_orders(s: Schedule, n_links: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
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


def _sigma(s, gen, entries, counts, hop_op, hop_k) -> np.ndarray:
    """The operation map of one generator (``gen``: its rank and link permutations), read off
    the link orders and verified (condition 2 of the module doc)."""
    rank_perm, link_perm = gen
    ptr, entry_op, entry_link = entries
    if not np.array_equal(counts[link_perm], counts):
        raise _NotExact("a generator maps a link onto one with another number of hops")
    shift = ptr[link_perm] - ptr[:-1]  # where each link's order starts in its image's
    image = entry_op[np.arange(len(entry_op), dtype=np.int64) + np.repeat(shift, counts)]
    n = s.num_ops
    sigma = np.full(n, -1, dtype=np.int64)
    sigma[entry_op] = image
    if not np.array_equal(sigma[entry_op], image):
        raise _NotExact("the link orders are not symmetric")
    _join_images(s, sigma, rank_perm)
    if sigma.min() < 0:
        raise _NotExact("the link orders are not symmetric")
    _check_sigma(s, sigma, gen, hop_op, hop_k)
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
        raise _NotExact("a join waits for a join")
    mine = np.zeros(len(joins), dtype=np.uint64)
    theirs = np.zeros(len(joins), dtype=np.uint64)
    np.add.at(mine, owner, spread64(deps))
    np.add.at(theirs, owner, spread64(images))
    rank = s.src.astype(np.int64)[joins]
    mine ^= spread64(rank) * MIX64[2]
    theirs ^= spread64(rank_perm[rank]) * MIX64[2]
    found, one = _match(mine, theirs)
    if not one.all():
        raise _NotExact("joins are not told apart by rank and dependencies")
    sigma[joins] = joins[found]


def _check_sigma(s, sigma, gen, hop_op, hop_k) -> None:
    """Refuse ``sigma`` unless it is a permutation of the operations that the generator
    ``gen`` (rank and link permutations) maps the schedule by (condition 2 of the module
    doc, link orders apart)."""
    rank_perm, link_perm = gen
    n = s.num_ops
    hit = np.zeros(n, dtype=np.bool_)
    hit[sigma] = True
    if not hit.all():
        raise _NotExact("the link orders do not map the operations one to one")
    if not (np.array_equal(s.src[sigma], rank_perm[s.src])
            and np.array_equal(s.dst[sigma], rank_perm[s.dst])):  # fmt: skip
        raise _NotExact("senders or receivers are not symmetric")
    for column in (s.kind, s.start, s.duration, s.step, s.part_lo, s.part_hi, s.part_den):
        if not _same(column, sigma):
            raise _NotExact("kinds, sizes, steps or planned times are not symmetric")
    lengths = np.diff(s.route_ptr)
    if not np.array_equal(lengths[sigma], lengths):
        raise _NotExact("routes are not symmetric")
    if not np.array_equal(s.route_links[s.route_ptr[sigma[hop_op]] + hop_k],
                          link_perm[s.route_links]):  # fmt: skip
        raise _NotExact("routes are not symmetric")
    if not _edges_kept(sigma, s.dep_ptr.astype(np.int64), s.dep_ids.astype(np.int64)):
        raise _NotExact("dependencies are not symmetric")


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


def _match(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


#: the bits of an index in :func:`_match`'s packed values (up to 16 M operations)
_INDEX_BITS = 24


def _match_exactly(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_match` by indirect sorts (any size)."""
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
    found, one = _match(mine, theirs)
    return np.where(one, found, -1), match_in_turn(mine, theirs)[0]


def _structural_sigma(s: Schedule, gen, hop_op, hop_k) -> np.ndarray:
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
    sigma, one = _match(base, base_img)
    is_join = s.kind == OpKind.JOIN
    sigma[is_join] = -1  # placed by their dependencies below
    one &= ~is_join
    if not (one | is_join).all():
        chunk = s.chunk.astype(np.int64)
        if chunk.min(initial=0) < 0 or chunk.max(initial=0) >= s.collective.num_chunks:
            raise _NotExact("a chunk id is outside the collective")
        image = _chunk_guess(s.collective, rank_perm)
        routed = ~is_join
        by_ops, in_turn = _chunk_signatures(chunk[routed], base[routed], base_img[routed],
                                            len(image))  # fmt: skip
        # a chunk told apart by its operations goes where they say; else where the
        # collective anchors it; else to its look-alike of the same turn
        image = np.where(by_ops >= 0, by_ops, np.where(image >= 0, image, in_turn))
        image[chunk[one]] = chunk[sigma[one]]
        if not np.array_equal(image[chunk[one]], chunk[sigma[one]]):
            raise _NotExact("the chunks are not mapped consistently")
        rest = ~one & ~is_join
        if image[chunk[rest]].min() < 0:
            raise _NotExact("some chunk's image is not determined")
        part = np.zeros(len(chunk), dtype=np.uint64)
        if s.part_lo is not None and s.part_hi is not None:
            part = (s.part_lo.astype(np.uint64) * MIX64[4]) ^ (
                s.part_hi.astype(np.uint64) * MIX64[5]
            )
        full = base ^ (chunk.astype(np.uint64) * MIX64[3]) ^ part
        full_img = base_img[rest] ^ (image[chunk[rest]].astype(np.uint64) * MIX64[3]) ^ part[rest]
        found, unique_ = _match(full, full_img)
        if not unique_.all():
            raise _NotExact("operations are not told apart by route, ranks and chunk")
        sigma[rest] = found
    _join_images(s, sigma, rank_perm)
    _check_sigma(s, sigma, gen, hop_op, hop_k)
    return sigma


def _orbits(sigmas: list[np.ndarray], orders: list[int], size: int) -> tuple[np.ndarray,
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
        raise _NotExact("the orbits of the operations were not found")
    is_rep = label == np.arange(n, dtype=np.int64)
    reps = np.flatnonzero(is_rep)
    index = np.cumsum(is_rep) - 1
    label = index[label]
    if len(reps) * size != n or not (np.bincount(label) == size).all():
        raise _NotExact("the operations do not fall into orbits of one size")
    return reps, label


def _order_of(perm: np.ndarray) -> int:
    """The order of a permutation acting freely (every cycle as long): the length of the
    cycle through 0."""
    x, m = int(perm[0]), 1
    while x != 0:
        x, m = int(perm[x]), m + 1
    return m


def find_quotient(s: Schedule, policy: str, orbit_ties: bool = False) -> Quotient | None:
    """The verified symmetry of ``s`` for simulation in model ``policy`` (``plan``/``auto``,
    ``fair``; with ``orbit_ties`` also ``fcfs``), or None where the quotient is not exact or
    no symmetry is found (see the module doc for the conditions; :func:`quotient_or_reason`
    says which). ``orbit_ties``: for a schedule without link orders, simulate with ties
    broken by orbit (see the module doc): a different tie rule from the explicit
    simulation's, so its results are those of a symmetric execution, not the explicit one's."""
    found = quotient_or_reason(s, policy, orbit_ties)
    return found if isinstance(found, Quotient) else None


def quotient_or_reason(s: Schedule, policy: str, orbit_ties: bool = False) -> Quotient | str:
    """:func:`find_quotient`, or why there is none (one phrase)."""
    try:
        return _quotient(s, policy, orbit_ties)
    except _NotExact as e:
        return str(e)


def _usable(s: Schedule, policy: str, orbit_ties: bool) -> None:
    """Refuse the schedules and models the quotient does not cover."""
    if s.num_ops == 0:
        raise _NotExact("the schedule is empty")
    if s.link_order and orbit_ties:
        raise _NotExact("orbit ties are for schedules without link orders")
    if not orbit_ties:
        if policy not in ("plan", "auto", "fair"):
            raise _NotExact("the first-served model breaks ties by hop id")
        if not s.link_order:
            raise _NotExact("the schedule has no link orders")
    if s.has_groups:
        raise _NotExact("the schedule has multicasts or in-switch reductions")
    if (np.diff(s.route_ptr)[s.kind != OpKind.JOIN] < 1).any():
        raise _NotExact("some operation other than a join has no route")


def _group(t, counts: np.ndarray):
    """The fabric's group, refused where it is trivial or fixes a link that carries hops."""
    group = topology_group(t)
    if group is None or group.order < 2:
        raise _NotExact("no symmetry of the fabric was found")
    if (group.link_orbit_sizes[counts > 0] != group.order).any():
        raise _NotExact("a used link is fixed by a symmetry of the fabric")
    return group


def _quotient(s: Schedule, policy: str, orbit_ties: bool) -> Quotient:
    _usable(s, policy, orbit_ties)
    t = s.topology
    n_links = len(t.links)
    route_ptr = s.route_ptr.astype(np.int64)
    route_links = s.route_links.astype(np.int64)
    counts = np.bincount(route_links, minlength=n_links)
    entries = None
    if not orbit_ties:
        entries = _flat_orders(s, n_links)
        if entries is None:
            raise _NotExact("a link order names a link or an operation that does not exist")
        if not np.array_equal(np.diff(entries[0]), counts):
            raise _NotExact("some hop is in no link order")
    group = _group(t, counts)
    rank_perms = group.rank_perms(t)
    rows = [int(np.flatnonzero((group.node_perms == np.asarray(g)).all(axis=1))[0])
            for g in group.generators]  # fmt: skip
    hop_op = owners(route_ptr)
    hop_k = np.arange(len(route_links), dtype=np.int64) - route_ptr[hop_op]
    sigmas = []
    for r in rows:
        gen = (rank_perms[r], group.link_perms[r])
        if entries is None:
            sigmas.append(_structural_sigma(s, gen, hop_op, hop_k))
        else:
            sigmas.append(_sigma(s, gen, entries, counts, hop_op, hop_k))
    reps, label = _orbits(sigmas, [_order_of(rank_perms[r]) for r in rows], group.order)
    link_rep, link_elem = link_frames(t, group)
    q_ptr, q_hops, q_link, q_pos, q_order = _rep_hops(
        reps, label, route_ptr, route_links, counts, link_rep, entries
    )
    elem = link_elem[route_links[q_hops]]
    rep_op = reps[owners(q_ptr)]
    q_dep_ptr, q_dep_ids = _rep_deps(s, reps, label)
    return Quotient(
        order=group.order,
        reps=reps,
        op_orbit=label,
        route_ptr=q_ptr,
        hops=q_hops,
        hop_link=q_link,
        hop_pos=q_pos,
        order_ptr=q_order[0],
        order_hops=q_order[1],
        hop_src=rank_perms[elem, s.src[rep_op]].astype(np.int64),
        hop_dst=rank_perms[elem, s.dst[rep_op]].astype(np.int64),
        link_rep=link_rep,
        dep_ptr=q_dep_ptr,
        dep_ids=q_dep_ids,
        all_hop_op=hop_op,
        all_hop_k=hop_k,
    )


def _rep_hops(reps, label, route_ptr, route_links, counts, link_rep, entries):
    """The representatives' hops (route pointers, explicit hop ids), each on its link's
    representative and at its own position in its own link's order (-1 without orders),
    and the representative links' orders (pointers, hops); refused unless every
    representative link gets exactly its own number of hops and every position of its
    order once (condition 3 of the module doc)."""
    n_links = len(counts)
    q_ptr = np.zeros(len(reps) + 1, dtype=np.int64)
    np.cumsum(np.diff(route_ptr)[reps], out=q_ptr[1:])
    q_op = owners(q_ptr)
    q_hops = route_ptr[reps][q_op] + (np.arange(int(q_ptr[-1]), dtype=np.int64) - q_ptr[q_op])
    q_orig = route_links[q_hops]
    q_link = link_rep[q_orig]
    per_link = np.bincount(q_link, minlength=n_links)
    if not np.array_equal(per_link, np.where(link_rep == np.arange(n_links), counts, 0)):
        raise _NotExact("a representative link gets another number of hops")
    if entries is None:
        q_pos = np.full(len(q_hops), -1, dtype=np.int64)
        return q_ptr, q_hops, q_link, q_pos, (np.zeros(n_links + 1, dtype=np.int64), q_pos[:0])
    q_pos = _positions(entries, label, reps, q_op, q_orig, n_links)
    q_link_ptr = np.zeros(n_links + 1, dtype=np.int64)
    np.cumsum(per_link, out=q_link_ptr[1:])
    by_place = np.lexsort((q_pos, q_link))
    placed = q_link[by_place]
    if not np.array_equal(q_pos[by_place], np.arange(len(placed)) - q_link_ptr[placed]):
        raise _NotExact("a representative link gets a position of its order twice")
    return q_ptr, q_hops, q_link, q_pos, (q_link_ptr, by_place.astype(np.int64))


def _rep_deps(s: Schedule, reps: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The representatives' dependencies, as orbits (CSR pointers and ids)."""
    dep_ptr = s.dep_ptr.astype(np.int64)
    q_dep_ptr = np.zeros(len(reps) + 1, dtype=np.int64)
    np.cumsum(np.diff(dep_ptr)[reps], out=q_dep_ptr[1:])
    owner = owners(q_dep_ptr)
    at = dep_ptr[reps][owner] + (np.arange(int(q_dep_ptr[-1]), dtype=np.int64) - q_dep_ptr[owner])
    return q_dep_ptr, label[s.dep_ids.astype(np.int64)[at]]


def _positions(entries, label, reps, q_op, q_orig, n_links) -> np.ndarray:
    """Each representative hop's position in its own link's order (the order entry of its
    operation on its link); refused where an operation crosses one link twice or is missing
    from the order of a link it uses."""
    ptr, entry_op, entry_link = entries
    is_rep = np.zeros(len(label), dtype=np.bool_)
    is_rep[reps] = True
    mine = np.flatnonzero(is_rep[entry_op])
    e_key = label[entry_op[mine]] * n_links + entry_link[mine]
    h_key = q_op * n_links + q_orig
    order = np.argsort(e_key, kind="stable")
    sorted_keys = e_key[order]
    at = np.searchsorted(sorted_keys, h_key)
    if len(np.unique(h_key)) != len(h_key) or len(np.unique(e_key)) != len(e_key):
        raise _NotExact("an operation crosses one link twice")
    if at.max(initial=0) >= len(sorted_keys) or not np.array_equal(sorted_keys[at], h_key):
        raise _NotExact("an operation is missing from the order of a link it uses")
    found = mine[order[at]]
    return found - ptr[entry_link[found]]


__all__ = ["Quotient", "find_quotient", "quotient_or_reason"]
