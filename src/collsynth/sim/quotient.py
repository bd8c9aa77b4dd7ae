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

from ..errors import CollsynthError
from ..schedule.compact import CompactSchedule
from ..schedule.dag import owners
from ..schedule.ir import OpKind, Schedule
from ..schedule.symmetry import NotSymmetric as _NotExact
from ..schedule.symmetry import flat_orders, map_by_orders, map_by_structure, op_orbits, order_of
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
        entries = flat_orders(s, n_links)
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
            sigmas.append(map_by_structure(s, gen, hop_op, hop_k))
        else:
            sigmas.append(map_by_orders(s, gen, entries, counts, hop_op, hop_k))
    reps, label = op_orbits(sigmas, [order_of(rank_perms[r]) for r in rows], group.order)
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


def compact_quotient(c: CompactSchedule) -> Quotient:
    """The quotient of a compact schedule, read off its representatives and group (no
    symmetry to find: the compact form is symmetric by construction and its verifier checks
    the group). Operations are the representatives themselves (``reps`` the identity); the
    results it gives are per representative. Raises :class:`CollsynthError` where the quotient
    is not exact: a link that carries hops fixed by an element of the group, or hops that no
    link order places."""
    a, r = c.action, c.reps
    n_links = len(c.topology.links)
    n = r.num_ops
    order = a.order
    route_ptr = r.route_ptr.astype(np.int64)
    hops_orig = r.route_links.astype(np.int64)
    link_rep, link_elem = a.link_frames
    if (a.link_orbit_sizes[hops_orig] != order).any():
        raise CollsynthError("a link that carries data is fixed by an element of the "
                             "group: the compact schedule cannot be simulated on its "
                             "quotient")  # fmt: skip
    hop_op = owners(route_ptr)
    hop_k = np.arange(len(hops_orig), dtype=np.int64) - route_ptr[hop_op]
    q_link = link_rep[hops_orig]
    back = a.inv[link_elem[hops_orig]]  # the element carrying each hop's link onto its rep
    if c.order_links is None:
        q_pos = np.full(len(hops_orig), -1, dtype=np.int64)
        order_ptr = np.zeros(n_links + 1, dtype=np.int64)
        order_hops = q_pos[:0]
    else:
        assert c.order_ptr is not None and c.order_orbit is not None
        assert c.order_elem is not None
        lids = c.order_links.astype(np.int64)
        o_ptr = np.asarray(c.order_ptr, dtype=np.int64)
        lengths = o_ptr[1:] - o_ptr[:-1]
        e_link = np.repeat(lids, lengths)
        e_pos = np.arange(len(e_link), dtype=np.int64) - np.repeat(o_ptr[:-1], lengths)
        e_key = (e_link * n + c.order_orbit) * order + c.order_elem
        h_key = (q_link * n + hop_op) * order + back
        by = np.argsort(e_key, kind="stable")
        at = np.searchsorted(e_key[by], h_key)
        at = np.minimum(at, max(len(by) - 1, 0))
        if not len(by) or not np.array_equal(e_key[by][at], h_key):
            raise CollsynthError("a hop of the compact schedule is in no link order: it cannot "
                                 "be simulated on its quotient in this model")  # fmt: skip
        if len(by) != len(h_key):
            raise CollsynthError("the compact schedule's link orders list operations that do "
                                 "not cross their links")  # fmt: skip
        q_pos = e_pos[by][at]
        per_link = np.bincount(q_link, minlength=n_links)
        order_ptr = np.zeros(n_links + 1, dtype=np.int64)
        np.cumsum(per_link, out=order_ptr[1:])
        order_hops = np.lexsort((q_pos, q_link)).astype(np.int64)
    ops = np.arange(n, dtype=np.int64)
    return Quotient(
        order=order,
        reps=ops,
        op_orbit=ops,
        route_ptr=route_ptr,
        hops=np.arange(len(hops_orig), dtype=np.int64),
        hop_link=q_link,
        hop_pos=q_pos,
        order_ptr=order_ptr,
        order_hops=order_hops,
        hop_src=a.rank_perms[back, r.src[hop_op]].astype(np.int64),
        hop_dst=a.rank_perms[back, r.dst[hop_op]].astype(np.int64),
        link_rep=link_rep,
        dep_ptr=c.dep_ptr.astype(np.int64),
        dep_ids=c.dep_orbit.astype(np.int64),
        all_hop_op=hop_op,
        all_hop_k=hop_k,
    )


__all__ = ["Quotient", "compact_quotient", "find_quotient", "quotient_or_reason"]
