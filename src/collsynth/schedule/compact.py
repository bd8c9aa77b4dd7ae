"""The compact schedule form: orbit representatives plus the group that maps them onto every rank.

A schedule on a symmetric fabric is usually symmetric itself: shifting every server by one
maps its operations onto its operations. The explicit IR (:class:`~.ir.Schedule`) still spells
out every image, one row per chunk hop; a :class:`CompactSchedule` keeps one operation per orbit
(the *representatives*) and the group (:class:`GroupAction`), so its size is the explicit
schedule's divided by the group's order (512 on ``dgx_a100:nodes=512``).

**The group.** :class:`GroupAction` is a group of automorphisms of the topology that acts
freely on the ranks, given by generators: node permutations of the topology and, for each, a
permutation of the collective's chunks. Every element is named by an index ``0 .. |G| - 1``:
element ``e`` is the one that sends rank 0's orbit representative (rank 0 itself, the smallest
rank) to the ``e``-th smallest rank of rank 0's orbit, so element 0 is the identity and the
numbering depends on the group only, not on the generators that name it. The group must be
an automorphism of the collective too: chunk ``c`` and its image have the same source
(mapped), the same destinations (mapped) and the same size.

**The operations.** Representative ``A`` is an ordinary operation (ranks, chunk, byte range,
kind, route, plan fields); its dependencies are pairs ``(B, h)``: "the image of representative
``B`` under element ``h``". The explicit schedule has operation ``A * |G| + e`` for every
representative ``A`` and element ``e``: the image ``g_e(A)``, which goes from ``g_e(src)`` to
``g_e(dst)`` along the image of ``A``'s route, carries the chunk ``g_e(chunk)`` and depends on
``g_e(g_h(B)) = (B, e * h)`` for each dependency ``(B, h)`` of ``A``. A planned link order is
given for one link per orbit of links, as a list of pairs ``(B, h)``; link ``g_e(l)``'s order is
the list of ``(B, e * h)``.

:meth:`CompactSchedule.expand` gives the explicit schedule (for small cases, for commands that
want every operation, and as the reference the compact verifier is tested against);
:func:`compact_schedule` finds the compact form of an explicit schedule by the schedule's own
verified symmetry (:mod:`.symmetry`). Files: :mod:`.compact_io`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..topology.model import Topology
from ..topology.symmetry import acts_freely, closure, link_images, topology_group
from .dag import owners
from .ir import OpKind, Schedule
from .symmetry import (
    NotSymmetric,
    flat_orders,
    map_by_orders,
    map_by_structure,
    op_orbits,
    order_of,
)

#: the most elements a group of a compact schedule may have (its tables are |G| x |G|)
MAX_GROUP_ORDER = 8192


class BadGroup(CollsynthError):
    """The generators of a compact schedule do not give a group it can use: why, in words."""


@dataclass(frozen=True, eq=False)
class GroupAction:
    """A group of topology automorphisms acting freely on the ranks, and its action on the
    collective's chunks (see the module doc for how elements are numbered).

    ``generators``: ``(m, nodes)`` node permutations; ``chunk_generators``: ``(m, chunks)``.
    Tables, one row per element: ``node_perms``, ``link_perms``, ``rank_perms``;
    ``mul[a, b]``: the element ``g_a g_b`` (``g_b`` applied first); ``inv[a]``: the inverse
    of ``a``. The group acts freely on the chunks too, held as frames (memory per chunk, not
    per chunk and element): ``chunk_rep`` (each chunk's orbit's smallest chunk),
    ``chunk_elem`` (the element carrying that one onto it), ``chunk_at[o, e]`` (element
    ``e``'s image of orbit ``o``'s smallest chunk); :meth:`chunk_image` maps chunks."""

    topology: Topology
    collective: Collective
    generators: np.ndarray
    chunk_generators: np.ndarray
    node_perms: np.ndarray
    link_perms: np.ndarray
    rank_perms: np.ndarray
    chunk_rep: np.ndarray
    chunk_elem: np.ndarray
    chunk_at: np.ndarray
    mul: np.ndarray
    inv: np.ndarray

    def chunk_image(self, elem, chunk) -> np.ndarray:
        """Where element(s) ``elem`` send chunk(s) ``chunk`` (broadcast together): the
        chunk ``(elem * e)(rep)`` for ``chunk = e(rep)``."""
        c = np.asarray(chunk, dtype=np.int64)
        return self.chunk_at[self.chunk_orbit[c], self.mul[elem, self.chunk_elem[c]]]

    @cached_property
    def chunk_orbit(self) -> np.ndarray:
        """Per chunk, its orbit's index (a row of ``chunk_at``)."""
        reps = np.unique(self.chunk_rep)
        return np.searchsorted(reps, self.chunk_rep)

    @property
    def order(self) -> int:
        return int(len(self.node_perms))

    @cached_property
    def rank_frames(self) -> tuple[np.ndarray, np.ndarray]:
        """Per rank, its orbit's representative (smallest rank) and the element carrying the
        representative onto it."""
        rep = self.rank_perms.min(axis=0)
        # the element sending rep[r] to r: the row g with rank_perms[g, rep[r]] == r
        elem = np.empty(self.rank_perms.shape[1], dtype=np.int64)
        cols = self.rank_perms[:, rep]  # (G, ranks): where each element sends r's rep
        g, r = np.nonzero(cols == np.arange(self.rank_perms.shape[1])[None, :])
        elem[r] = g
        return rep, elem

    @cached_property
    def link_frames(self) -> tuple[np.ndarray, np.ndarray]:
        """Per link, its orbit's representative (smallest link) and an element carrying the
        representative onto it (the only one where the orbit is free)."""
        rep = self.link_perms.min(axis=0)
        n = self.link_perms.shape[1]
        cols = self.link_perms[:, rep]
        hit = cols == np.arange(n)[None, :]
        return rep, hit.argmax(axis=0).astype(np.int64)

    @cached_property
    def link_orbit_sizes(self) -> np.ndarray:
        rep = self.link_frames[0]
        return np.bincount(rep, minlength=len(rep))[rep]

    def element_sending(self, rank_from: np.ndarray, rank_to: np.ndarray) -> np.ndarray:
        """The element sending each ``rank_from`` to ``rank_to`` (-1 where they lie in
        different orbits)."""
        rep, elem = self.rank_frames
        a = np.asarray(rank_from, dtype=np.int64)
        b = np.asarray(rank_to, dtype=np.int64)
        out = self.mul[elem[b], self.inv[elem[a]]]
        return np.where(rep[a] == rep[b], out, -1)


def _permutation_rows(a: np.ndarray, size: int) -> bool:
    return bool(a.ndim == 2 and a.shape[1] == size
                and (np.sort(a, axis=1) == np.arange(size)[None, :]).all())  # fmt: skip


def group_action(
    topology: Topology,
    collective: Collective,
    generators: np.ndarray,
    chunk_generators: np.ndarray,
    max_order: int = MAX_GROUP_ORDER,
) -> GroupAction:
    """The group generated by ``generators`` (node permutations) acting on ``topology``'s
    ranks and, through ``chunk_generators``, on ``collective``'s chunks: verified to be
    automorphisms of both, free on the ranks, a well-defined action on the chunks, and of at
    most ``max_order`` elements; raises :class:`BadGroup` naming what fails."""
    gens = np.asarray(generators, dtype=np.int64)
    cgens = np.asarray(chunk_generators, dtype=np.int64)
    n_nodes, n_chunks = topology.num_nodes, collective.num_chunks
    if gens.ndim != 2 or len(gens) == 0:
        raise BadGroup("the group has no generators")
    if not _permutation_rows(gens, n_nodes):
        raise BadGroup(f"a generator is not a permutation of the topology's {n_nodes} nodes")
    if cgens.shape != (len(gens), n_chunks) or not _permutation_rows(cgens, n_chunks):
        raise BadGroup(f"a chunk generator is not a permutation of the {n_chunks} chunks, "
                       "one per generator")  # fmt: skip
    for i, g in enumerate(gens):
        if not np.array_equal(topology.kind_codes[g], topology.kind_codes) or (
            link_images(topology, g) is None
        ):
            raise BadGroup(f"generator {i} is not an automorphism of the topology")
        _check_collective(collective, topology.rank_of_node[g[topology.compute_nodes]],
                          cgens[i], i)  # fmt: skip
    got = closure(topology, gens.tolist(), max_order)
    if got is None:
        raise BadGroup(f"the generators make a group of more than {max_order} elements")
    node_perms, link_perms = got
    compute = np.asarray(topology.compute_nodes, dtype=np.int64)
    if not acts_freely(node_perms, compute):
        raise BadGroup("the group does not act freely on the ranks (an element other than "
                       "the identity fixes a rank)")  # fmt: skip
    rank_perms = topology.rank_of_node[node_perms[:, compute]].astype(np.int64)
    # number the elements by where they send rank 0
    by = np.argsort(rank_perms[:, 0], kind="stable")
    node_perms, link_perms, rank_perms = node_perms[by], link_perms[by], rank_perms[by]
    order = len(by)
    index_of = np.full(topology.num_ranks, -1, dtype=np.int64)
    index_of[rank_perms[:, 0]] = np.arange(order)
    mul = index_of[rank_perms[:, rank_perms[:, 0]]]  # g_a(g_b(0))
    inv = np.empty(order, dtype=np.int64)
    a, b = np.nonzero(mul == 0)
    inv[a] = b
    c_rep, c_elem, c_at = _chunk_frames(rank_perms, index_of, gens, cgens, topology, n_chunks)
    return GroupAction(topology, collective, gens, cgens, node_perms, link_perms, rank_perms,
                       c_rep, c_elem, c_at, mul, inv)  # fmt: skip


def _chunk_frames(rank_perms, index_of, gens, cgens, topology, n_chunks) -> tuple:
    """The chunk frames ``(chunk_rep, chunk_elem, chunk_at)`` of the action the chunk
    generators give: each chunk's orbit found by breadth first search over the generators
    from the orbits' smallest chunks (``chunks(s e) = cgen_s(chunks(e))``), then checked to be
    one free action: every orbit has ``|G|`` chunks, one per element, and every generator
    composed with every element gives the chunk of their product."""
    order = len(rank_perms)
    gen_ranks = topology.rank_of_node[gens[:, topology.compute_nodes]].astype(np.int64)
    left = index_of[gen_ranks[:, rank_perms[:, 0]]]  # (m, G): the element s e
    label = np.arange(n_chunks, dtype=np.int64)  # the smallest chunk of each orbit
    for _ in range(n_chunks + 1):
        before = label
        for cg in cgens:
            label = np.minimum(label, label[cg])
            label[cg] = np.minimum(label[cg], label)
        label = label[label]
        if np.array_equal(label, before):
            break
    rep = label
    elem = np.full(n_chunks, -1, dtype=np.int64)
    reps = np.flatnonzero(rep == np.arange(n_chunks))
    elem[reps] = 0
    frontier = reps
    while len(frontier):
        fresh = []
        for s, cg in enumerate(cgens):
            targets = cg[frontier]
            new = elem[targets] < 0
            if new.any():
                t, f = targets[new], frontier[new]
                t, first = np.unique(t, return_index=True)
                elem[t] = left[s, elem[f[first]]]
                fresh.append(t)
        frontier = np.concatenate(fresh) if fresh else np.zeros(0, dtype=np.int64)
    orbit = np.searchsorted(reps, rep)
    if not (np.bincount(orbit, minlength=len(reps)) == order).all():
        raise BadGroup("the group does not act freely on the chunks (an orbit of chunks has "
                       "fewer members than the group has elements)")  # fmt: skip
    at = np.full((len(reps), order), -1, dtype=np.int64)
    at[orbit, elem] = np.arange(n_chunks, dtype=np.int64)
    if (at < 0).any():
        raise BadGroup("the group does not act freely on the chunks (two elements send a "
                       "chunk to one place)")  # fmt: skip
    for s, cg in enumerate(cgens):
        if not (np.array_equal(rep[cg], rep) and np.array_equal(elem[cg], left[s, elem])):
            raise BadGroup("the chunk generators do not act as the group does (a product of "
                           "generators maps the chunks in two ways)")  # fmt: skip
    return rep, elem, at


def _check_collective(c: Collective, ranks: np.ndarray, chunks: np.ndarray, i: int) -> None:
    """Refuse generator ``i`` (rank map ``ranks``, chunk map ``chunks``) unless it is an
    automorphism of the collective: sources and destinations mapped."""
    if c.rooted:
        raise BadGroup(f"a rooted collective ({c.kind.value}) has no symmetry that moves "
                       "every rank")  # fmt: skip
    src = c.chunk_source
    mapped = np.where(src >= 0, ranks[np.maximum(src, 0)], -1)
    if not np.array_equal(src[chunks], mapped):
        raise BadGroup(f"chunk generator {i} does not map each chunk's source to its "
                       "image's source")  # fmt: skip
    if c.kind in (CollKind.ALLGATHER, CollKind.ALLREDUCE):
        return  # every rank is a destination of every chunk
    if c.kind in (CollKind.REDUCESCATTER, CollKind.ALLTOALL):
        ids = np.arange(c.num_chunks, dtype=np.int64)
        per = c.chunks_per_rank
        dst = ids // per if c.kind is CollKind.REDUCESCATTER else (ids // per) % c.num_ranks
        if not np.array_equal(dst[chunks], ranks[dst]):
            raise BadGroup(f"chunk generator {i} does not map each chunk's destination to "
                           "its image's destination")  # fmt: skip
        return
    for k in range(c.num_chunks):
        if set(c.destinations(int(chunks[k]))) != {int(ranks[r]) for r in c.destinations(k)}:
            raise BadGroup(f"chunk generator {i} does not map chunk {k}'s destinations to "
                           "its image's")  # fmt: skip


@dataclass(frozen=True, eq=False)
class CompactSchedule:
    """A schedule as orbit representatives and a group (see the module doc).

    ``reps``: the representative operations as a :class:`Schedule` over the same topology and
    collective whose dependencies and link orders are empty (they live here, as pairs);
    ``dep_ptr``/``dep_orbit``/``dep_elem``: each representative's dependencies ``(B, h)``;
    ``order_links``: one link per orbit with a planned order, ``order_ptr``/``order_orbit``/
    ``order_elem``: the orders, as pairs."""

    action: GroupAction
    reps: Schedule
    dep_ptr: np.ndarray
    dep_orbit: np.ndarray
    dep_elem: np.ndarray
    order_links: np.ndarray | None = None
    order_ptr: np.ndarray | None = None
    order_orbit: np.ndarray | None = None
    order_elem: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    @property
    def topology(self) -> Topology:
        return self.reps.topology

    @property
    def collective(self) -> Collective:
        return self.reps.collective

    @property
    def size(self) -> float | None:
        return self.reps.size

    @property
    def num_reps(self) -> int:
        return self.reps.num_ops

    @property
    def num_ops(self) -> int:
        """Operations of the explicit schedule."""
        return self.num_reps * self.action.order

    @property
    def num_hops(self) -> int:
        """Link hops of the explicit schedule."""
        return int(len(self.reps.route_links)) * self.action.order

    def stats(self) -> dict:
        """:meth:`Schedule.stats` of the explicit schedule, with the compact form's sizes."""
        per = self.reps.stats()
        order = self.action.order
        out = {k: v * order if k in ("ops", "copy_ops", "reduce_ops", "join_ops", "link_hops")
               else v for k, v in per.items()}  # fmt: skip
        out["deps"] = int(len(self.dep_orbit)) * order
        out.update(representatives=self.num_reps, group_order=order)
        return out

    def with_size(self, size: float | None) -> CompactSchedule:
        """A copy recording ``size`` bytes."""
        return replace(self, reps=replace(self.reps, size=size))

    def with_meta(self, **kv) -> CompactSchedule:
        """A copy with ``kv`` added to ``meta``."""
        return replace(self, meta={**self.meta, **kv})

    def describe_op(self, op: int) -> str:
        return self.reps.describe_op(op)

    def __repr__(self) -> str:
        return (f"CompactSchedule({self.collective.describe()} on {self.topology.name!r}, "
                f"{self.num_reps} representatives x {self.action.order} elements)")  # fmt: skip

    def expand(self) -> Schedule:
        """The explicit schedule: operation ``A * |G| + e`` is representative ``A``'s image
        under element ``e``."""
        a, r = self.action, self.reps
        order, n_reps = a.order, r.num_ops
        e = np.tile(np.arange(order, dtype=np.int64), n_reps)
        rep = np.repeat(np.arange(n_reps, dtype=np.int64), order)
        src = a.rank_perms[e, r.src[rep]]
        dst = a.rank_perms[e, r.dst[rep]]
        chunk = a.chunk_image(e, r.chunk[rep])
        lengths = np.diff(r.route_ptr)[rep]
        route_ptr = np.zeros(len(rep) + 1, dtype=np.int64)
        np.cumsum(lengths, out=route_ptr[1:])
        hop_op = owners(route_ptr)
        k = np.arange(int(route_ptr[-1]), dtype=np.int64) - route_ptr[hop_op]
        route_links = a.link_perms[e[hop_op], r.route_links[r.route_ptr[rep[hop_op]] + k]]
        d_len = np.diff(self.dep_ptr)[rep]
        dep_ptr = np.zeros(len(rep) + 1, dtype=np.int64)
        np.cumsum(d_len, out=dep_ptr[1:])
        d_op = owners(dep_ptr)
        d_k = np.arange(int(dep_ptr[-1]), dtype=np.int64) - dep_ptr[d_op]
        at = self.dep_ptr[rep[d_op]] + d_k
        dep_ids = self.dep_orbit[at] * order + a.mul[e[d_op], self.dep_elem[at]]
        link_order = None
        if self.order_links is not None:
            assert self.order_ptr is not None and self.order_orbit is not None
            assert self.order_elem is not None
            link_order = {}
            for i, lid in enumerate(self.order_links.tolist()):
                lo, hi = int(self.order_ptr[i]), int(self.order_ptr[i + 1])
                orb, el = self.order_orbit[lo:hi], self.order_elem[lo:hi]
                for g in range(order):
                    link_order[int(a.link_perms[g, lid])] = orb * order + a.mul[g, el]
            link_order = dict(sorted(link_order.items()))

        def rep_col(col):
            return None if col is None else col[rep]

        meta = {k: v for k, v in r.meta.items()}
        return Schedule(
            r.topology, r.collective, src, dst, chunk, r.kind[rep], route_ptr, route_links,
            dep_ptr, dep_ids, rep_col(r.start), rep_col(r.duration), rep_col(r.step),
            rep_col(r.part_lo), rep_col(r.part_hi), rep_col(r.part_den), link_order, r.size,
            meta,
        )  # fmt: skip


def _no_deps(s: Schedule, keep: np.ndarray) -> Schedule:
    """The operations ``keep`` of ``s`` as a schedule without dependencies or link orders."""
    ptr = s.route_ptr.astype(np.int64)
    lengths = np.diff(ptr)[keep]
    new_ptr = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_ptr[1:])
    hop_op = owners(new_ptr)
    links = s.route_links.astype(np.int64)[
        ptr[keep][hop_op] + np.arange(int(new_ptr[-1]), dtype=np.int64) - new_ptr[hop_op]
    ]

    def col(c):
        return None if c is None else np.asarray(c)[keep]

    return Schedule(
        s.topology, s.collective, s.src[keep].astype(np.int64), s.dst[keep].astype(np.int64),
        s.chunk[keep].astype(np.int64), s.kind[keep], new_ptr, links,
        np.zeros(len(keep) + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), col(s.start),
        col(s.duration), col(s.step), col(s.part_lo), col(s.part_hi), col(s.part_den), None,
        s.size, dict(s.meta),
    )  # fmt: skip


def compact_or_reason(s: Schedule) -> CompactSchedule | str:
    """:func:`compact_schedule`, or why ``s`` has no compact form (one phrase)."""
    try:
        return _compact(s)
    except (NotSymmetric, BadGroup) as e:
        return str(e)


def compact_schedule(s: Schedule) -> CompactSchedule | None:
    """The compact form of ``s`` by the fabric's group (:func:`topology_group`), when ``s``
    is symmetric under it (verified: :mod:`.symmetry`); None otherwise. Its expansion is
    ``s`` with the operations numbered orbit by orbit."""
    got = compact_or_reason(s)
    return got if isinstance(got, CompactSchedule) else None


def _compact(s: Schedule) -> CompactSchedule:
    if s.num_ops == 0:
        raise NotSymmetric("the schedule is empty")
    if s.has_groups:
        raise NotSymmetric("the schedule has multicasts or in-switch reductions")
    t = s.topology
    n_links = len(t.links)
    group = topology_group(t)
    if group is None or group.order < 2:
        raise NotSymmetric("no symmetry of the fabric was found")
    route_ptr = s.route_ptr.astype(np.int64)
    route_links = s.route_links.astype(np.int64)
    counts = np.bincount(route_links, minlength=n_links)
    entries = None
    if s.link_order:
        entries = flat_orders(s, n_links)
        if entries is None:
            raise NotSymmetric("a link order names a link or an operation that does not exist")
        if not np.array_equal(np.diff(entries[0]), counts):
            raise NotSymmetric("some hop is in no link order")
    hop_op = owners(route_ptr)
    hop_k = np.arange(len(route_links), dtype=np.int64) - route_ptr[hop_op]
    rank_perms = group.rank_perms(t)
    rows = [int(np.flatnonzero((group.node_perms == np.asarray(g)).all(axis=1))[0])
            for g in group.generators]  # fmt: skip
    sigmas = []
    chunk_gens = []
    chunk = s.chunk.astype(np.int64)
    for r in rows:
        gen = (rank_perms[r], group.link_perms[r])
        if entries is None:
            sigma = map_by_structure(s, gen, hop_op, hop_k)
        else:
            sigma = map_by_orders(s, gen, entries, counts, hop_op, hop_k)
        sigmas.append(sigma)
        chunk_gens.append(_chunk_map(s, chunk, sigma, rank_perms[r].astype(np.int64)))
    action = group_action(t, s.collective, np.asarray(group.generators, dtype=np.int64),
                          np.asarray(chunk_gens))  # fmt: skip
    reps, label = op_orbits(sigmas, [order_of(rank_perms[r]) for r in rows], action.order)
    elem = action.element_sending(s.src[reps][label], s.src)
    if elem.min() < 0:
        raise NotSymmetric("an operation's orbit does not follow its sender's")
    dep_ptr = np.zeros(len(reps) + 1, dtype=np.int64)
    ptr = s.dep_ptr.astype(np.int64)
    np.cumsum(np.diff(ptr)[reps], out=dep_ptr[1:])
    d_owner = owners(dep_ptr)
    at = ptr[reps][d_owner] + np.arange(int(dep_ptr[-1]), dtype=np.int64) - dep_ptr[d_owner]
    deps = s.dep_ids.astype(np.int64)[at]
    order_fields: tuple[np.ndarray | None, ...] = (None, None, None, None)
    if entries is not None:
        e_ptr, o_ops, _ = entries
        link_rep = action.link_frames[0]
        rep_links = np.flatnonzero((link_rep == np.arange(n_links)) & (counts > 0))
        lengths = counts[rep_links]
        new_ptr = np.zeros(len(rep_links) + 1, dtype=np.int64)
        np.cumsum(lengths, out=new_ptr[1:])
        own = owners(new_ptr)
        ops = o_ops[e_ptr[rep_links][own] + np.arange(int(new_ptr[-1])) - new_ptr[own]]
        order_fields = (rep_links, new_ptr, label[ops], elem[ops])
    o_links, o_ptr, o_orbit, o_elem = order_fields
    return CompactSchedule(action, _no_deps(s, reps), dep_ptr, label[deps], elem[deps], o_links,
                           o_ptr, o_orbit, o_elem, dict(s.meta))  # fmt: skip


def _chunk_map(
    s: Schedule, chunk: np.ndarray, sigma: np.ndarray, rank_perm: np.ndarray
) -> np.ndarray:
    """The chunk permutation that the operation map ``sigma`` induces: every operation's chunk
    goes to its image's; a chunk that no operation carries (an AllToAll's chunk from a rank
    to itself) goes where the collective's numbering and the rank map ``rank_perm`` put it,
    where the collective numbers its chunks by ranks, else stays. Refused where a chunk would
    go to two places or two chunks to one."""
    c = s.collective
    n = c.num_chunks
    moved = s.kind != OpKind.JOIN
    ids = np.arange(n, dtype=np.int64)
    per, ranks = c.chunks_per_rank, c.num_ranks
    if c.kind is CollKind.ALLTOALL:  # chunk (s * N + d) * C + j goes from s to d
        out = (rank_perm[ids // (per * ranks)] * ranks + rank_perm[(ids // per) % ranks]) * per
        out += ids % per
    elif c.kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLREDUCE):
        out = rank_perm[ids // per] * per + ids % per  # rank r's j-th chunk
    else:
        out = ids.copy()
    mine, theirs = chunk[moved], chunk[sigma[moved]]
    out[mine] = theirs
    if not np.array_equal(out[mine], theirs) or len(np.unique(out)) != n:
        raise NotSymmetric("the operation map does not map the chunks one to one")
    return out


def from_representatives(
    reps: Schedule, generators: np.ndarray, chunk_generators: np.ndarray
) -> CompactSchedule:
    """The compact schedule whose representatives are the operations of ``reps``, each
    depending on the representatives its dependencies name (element 0: the same member), under
    the group of ``generators`` (node permutations) acting on the chunks by
    ``chunk_generators``: what an algorithm that builds one representative per orbit (ForestColl's
    trees of one root per rank orbit) returns. ``reps`` has no link orders."""
    action = group_action(reps.topology, reps.collective, generators, chunk_generators)
    deps = reps.dep_ids.astype(np.int64)
    bare = _no_deps(reps, np.arange(reps.num_ops, dtype=np.int64))
    return CompactSchedule(action, bare, reps.dep_ptr.astype(np.int64), deps,
                           np.zeros(len(deps), dtype=np.int64), meta=dict(reps.meta))  # fmt: skip


def rank_chunk_generators(
    topology: Topology, collective: Collective, generators: np.ndarray
) -> np.ndarray:
    """Chunk generators for a collective whose chunks belong to ranks (chunk ``r * C + j`` is
    rank ``r``'s ``j``-th: AllGather's sources, ReduceScatter's destinations, AllReduce's
    owners): each generator sends it to its image rank's ``j``-th chunk."""
    per = collective.chunks_per_rank
    ids = np.arange(collective.num_chunks, dtype=np.int64)
    ranks = topology.rank_of_node[generators[:, topology.compute_nodes]].astype(np.int64)
    return ranks[:, ids // per] * per + ids % per


__all__ = [
    "MAX_GROUP_ORDER",
    "BadGroup",
    "CompactSchedule",
    "GroupAction",
    "compact_or_reason",
    "compact_schedule",
    "from_representatives",
    "group_action",
    "rank_chunk_generators",
]
