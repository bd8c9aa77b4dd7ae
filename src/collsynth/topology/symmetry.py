"""Automorphisms of a topology: node permutations that keep every link and its bandwidth.

An *automorphism* of a :class:`~collsynth.topology.model.Topology` is a permutation ``p`` of its
nodes that keeps node kinds and maps the multiset of links ``(src, dst, bw, alpha, cls, lanes)``
onto itself: for every link ``src -> dst`` there is a link ``p(src) -> p(dst)`` with the same
bandwidth, alpha, class and lanes (parallel links are matched one to one). It permutes the
links too (:func:`link_permutation`), and the compute nodes, hence the ranks
(:func:`rank_permutations`). Schedules found for one rank carry over to its images: ForestColl
builds trees for one root per rank orbit, TE-CCL keeps one commodity per orbit.

What this module computes:

* :func:`automorphism_group`: a group ``G`` of automorphisms that *acts freely on the ranks*
  (no element but the identity fixes a rank, so every rank orbit has ``|G|`` elements), with its
  generators and the full tables of node and link permutations. It is found from node
  attributes, not by a general graph-isomorphism search: for every non-negative integer
  attribute (``chassis`` first, then ``local``, ``x``, ``y``, ... by name), the smallest cyclic
  shift ``a -> a + d`` (:func:`attribute_shift`) that is an automorphism, matching the other
  attributes, or all but one of them, or none of the other integer ones (attributes derived
  from the shifted one, such as a torus node's linear index, or an MI250 GCD's package when
  ``local -> local + 8``); see :func:`candidate_generators`. Each candidate is *verified*
  (:func:`link_permutation`). Generators are added one by one (:func:`closure`) and kept only
  while the group stays within ``max_order`` elements and acts freely on the ranks.
  :func:`automorphisms` returns the same group as ``(node_perms, link_perms)``.
* :func:`is_automorphism`: whether a given node permutation is an automorphism.
* Orbits: :func:`orbits` (from generators, by :func:`components`), :func:`orbit_ids` (from a
  table of permutations, one row per element), :func:`representatives` (the first element of
  each orbit in a given order), :func:`acts_freely` and :func:`is_invariant` (a per-element
  quantity that every permutation keeps).

Complexity, for ``N`` nodes, ``L`` links, ``A`` integer attributes and a group of order ``G``:
:func:`link_permutation` is ``O(L)`` expected (hashing); :func:`candidate_generators` tries at
most ``A`` shifts per attribute value, each ``O(N + L)``; :func:`closure` is ``O(G (N + L))``
time and memory per generator tried (the tables are what the callers use);
:func:`components` is near linear in its pairs (union-find with path halving).

The group is found by fixed rules, so it may be smaller than the full automorphism group (a
fabric without integer attributes, such as one read from a file, gets none); every element it
returns is verified.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..arrays import MIX64, match_in_turn, spread64, unique
from .model import Link, Topology

#: permutation tables of about this many entries at most (``max_order`` default: 400 MB of
#: int64 node and link permutations)
TABLE_ENTRIES = 50_000_000


def link_signature(link: Link) -> tuple:
    """What an automorphism keeps of a link: its ends, bandwidth, alpha, class and lanes."""
    return (link.src, link.dst, link.bw, link.alpha, link.cls, link.lanes)


def link_permutation(topology: Topology, node_permutation: Sequence[int]) -> list[int] | None:
    """The link permutation induced by ``node_permutation``, or None when it is not an
    automorphism of the links (some link has no image left with the same signature).

    Link ``l`` maps to a link ``p(src) -> p(dst)`` with the same bandwidth, alpha, class and
    lanes; parallel links of one signature map in id order. Node kinds are not checked (see
    :func:`is_automorphism`). ``O(L log L)`` (two sorts)."""
    out = link_images(topology, np.asarray(node_permutation, dtype=np.int64))
    return None if out is None else out.tolist()


def _link_classes(topology: Topology) -> np.ndarray:
    """Per link, a code for what an automorphism keeps of it besides its ends (bandwidth,
    alpha, class, lanes): equal codes for equal values."""
    cached = getattr(topology, "_symmetry_link_classes", None)
    if cached is not None:
        return cached
    links = topology.links
    names: dict[str, int] = {}
    cls = np.array([names.setdefault(l.cls, len(names)) for l in links], dtype=np.int64)
    lanes = np.array([l.lanes for l in links], dtype=np.int64)
    rows = np.stack([topology.link_bw.view(np.int64), topology.link_alpha.view(np.int64), cls,
                     lanes], axis=1) if links else np.zeros((0, 4), dtype=np.int64)  # fmt: skip
    codes = row_codes(rows)
    topology._symmetry_link_classes = codes  # type: ignore[attr-defined]
    return codes


def row_codes(rows: np.ndarray) -> np.ndarray:
    """A code per row of the integer table ``rows``: equal codes for equal rows, numbered in
    lexicographic order of the rows (what ``np.unique(rows, axis=0, return_inverse=True)``
    gives, with one sort of the columns)."""
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    new = np.ones(len(rows), dtype=np.bool_)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    codes = np.empty(len(rows), dtype=np.int64)
    codes[order] = np.cumsum(new) - 1
    return codes


def link_images(topology: Topology, p: np.ndarray) -> np.ndarray | None:
    """:func:`link_permutation` as an array: links sorted by (source, destination, class, id)
    and their images by the same key, matched position by position."""
    n_links = len(topology.links)
    if n_links == 0:
        return np.zeros(0, dtype=np.int64)
    code = _link_classes(topology)
    ids = np.arange(n_links, dtype=np.int64)
    src, dst = topology.link_src, topology.link_dst
    mine = np.lexsort((ids, code, dst, src))
    mapped_src, mapped_dst = p[src], p[dst]
    theirs = np.lexsort((ids, code, mapped_dst, mapped_src))
    if not (np.array_equal(src[mine], mapped_src[theirs])
            and np.array_equal(dst[mine], mapped_dst[theirs])
            and np.array_equal(code[mine], code[theirs])):  # fmt: skip
        return None
    out = np.empty(n_links, dtype=np.int64)
    out[theirs] = mine
    return out


def is_automorphism(topology: Topology, node_permutation: Sequence[int]) -> bool:
    """Whether ``node_permutation`` (image of every node) is an automorphism of
    ``topology``: a permutation of the nodes that keeps node kinds and maps the links onto
    links of the same signature (:func:`link_signature`)."""
    p = np.asarray(node_permutation, dtype=np.int64)
    n = topology.num_nodes
    if p.shape != (n,) or not np.array_equal(np.sort(p), np.arange(n)):
        return False
    if not np.array_equal(topology.kind_codes[p], topology.kind_codes):
        return False
    return link_permutation(topology, p.tolist()) is not None


def automorphism_from_ranks(
    topology: Topology, rank_permutation: Sequence[int] | np.ndarray
) -> list[int] | None:
    """The automorphism of ``topology`` that permutes the ranks by ``rank_permutation``
    (image of every rank), found from the structure alone (no node attributes), or None
    where this finds none.

    The compute nodes go where their ranks do; then, round after round, every other node
    goes to the one node of its kind, not yet an image, whose links to nodes already
    placed are the images of its own (same direction, same signature besides the ends,
    :func:`link_signature`), where exactly one has them. The permutation found is then
    verified (:func:`is_automorphism`). Unique matches suffice where every switch is told
    apart by the nodes around it (an island's NVSwitch by its GPUs, a NIC by its GPU, a
    rail's leaf by its NICs); where a round has none, nodes that look alike (spines that the
    same leaves reach) are paired in turn, by id, a guess the verification accepts or not.
    ``O(R (N + L) log N)`` for ``R`` rounds (the depth of the switches behind the GPUs)."""
    t = topology
    n = t.num_nodes
    ranks = np.asarray(rank_permutation, dtype=np.int64)
    if ranks.shape != (t.num_ranks,) or not np.array_equal(np.sort(ranks), np.arange(len(ranks))):
        return None
    perm = np.full(n, -1, dtype=np.int64)
    perm[t.compute_nodes] = t.compute_nodes[ranks]
    src = np.array([l.src for l in t.links], dtype=np.int64)
    dst = np.array([l.dst for l in t.links], dtype=np.int64)
    cls = _link_classes(t).astype(np.uint64)
    kind = t.kind_codes.astype(np.uint64)
    while (perm < 0).any():
        placed = perm >= 0
        taken = np.zeros(n, dtype=np.bool_)
        taken[perm[placed]] = True
        mine = kind * MIX64[3]  # each node's links to placed nodes, by their images
        theirs = kind * MIX64[3]  # each node's links to images, as they are
        for a, b, way in ((src, dst, 1), (dst, src, 2)):  # b: the far end of a's link
            out = placed[b]
            np.add.at(mine, a[out], _link_key(perm[b[out]], cls[out], way))
            into = taken[b]
            np.add.at(theirs, a[into], _link_key(b[into], cls[into], way))
        todo = np.flatnonzero(~placed)
        free = np.flatnonzero(~taken)
        found_at, count = match_in_turn(theirs[free], mine[todo])
        go = (found_at >= 0) & (count == 1)
        if not go.any():
            # look-alikes (switches that only the same nodes reach): paired in turn, by id
            go = found_at >= 0
        if not go.any():
            return None
        perm[todo[go]] = free[found_at[go]]
    found = perm.tolist()
    return found if is_automorphism(t, found) else None


def _link_key(node: np.ndarray, cls: np.ndarray, way: int) -> np.ndarray:
    """A link to ``node`` (of class ``cls``, direction ``way``) hashed: summed per node into
    its key (keys only propose a match; the permutation is then verified exactly)."""
    return spread64(node.astype(np.uint64) * MIX64[0] + cls * MIX64[1] + np.uint64(way) * MIX64[2])


def attribute_shift(
    topology: Topology, attribute: str, shift: int, ignore: frozenset = frozenset()
) -> list[int] | None:
    """The node permutation shifting integer attribute ``attribute`` by ``shift`` (modulo its
    range per node kind and role); every other attribute is kept, except those in ``ignore``
    (attributes derived from ``attribute``, such as a torus node's linear index when its ``x``
    shifts), which are not matched. None if some image does not exist or is not unique, or the
    attribute is not a non-negative integer everywhere. Not verified against the links."""
    table = _attribute_table(topology)
    names, values, groups = table
    if attribute not in names:
        return list(range(topology.num_nodes))
    a = names.index(attribute)
    column = values[:, a]
    has = column != _MISSING
    ints = table_ints(topology)[:, a]
    if not ints[has].all():
        return None
    ranges = np.zeros(int(groups.max(initial=0)) + 1, dtype=np.int64)
    np.maximum.at(ranges, groups[has], column[has] + 1)
    keep = [i for i, name in enumerate(names) if name not in ignore]
    ignored = [i for i, name in enumerate(names) if name in ignore]
    if ignored and ((values[:, ignored] != _MISSING).any(axis=1) & ~has).any():
        return None
    shifted = values.copy()
    shifted[has, a] = (column[has] + shift) % ranges[groups[has]]
    rows = np.concatenate((topology.kind_codes.astype(np.int64)[:, None], values[:, keep]), axis=1)
    wanted = np.concatenate((topology.kind_codes.astype(np.int64)[:, None], shifted[:, keep]),
                            axis=1)  # fmt: skip
    codes = row_codes(np.concatenate((rows, wanted[has])))
    mine, theirs = codes[: len(rows)], codes[len(rows) :]
    counts = np.bincount(mine, minlength=int(codes.max()) + 1)
    node_of = np.full(len(counts), -1, dtype=np.int64)
    node_of[mine] = np.arange(len(rows), dtype=np.int64)
    if (counts[theirs] != 1).any():
        return None  # an image that does not exist or is not unique
    permutation = np.arange(topology.num_nodes, dtype=np.int64)
    permutation[has] = node_of[theirs]
    if len(np.unique(permutation)) != len(permutation):
        return None
    return permutation.tolist()


_MISSING = np.iinfo(np.int64).min


def _attribute_table(topology: Topology) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The nodes' attributes as a table: the names, a value code per node and name
    (``_MISSING`` where absent; the integer itself for non-negative integers, else a code per
    distinct ``repr`` below zero), and each node's (kind, role) group."""
    cached = getattr(topology, "_symmetry_table", None)
    if cached is not None:
        return cached
    names: list[str] = []
    for node in topology.nodes:
        for k in node.attrs:
            if k not in names:
                names.append(k)
    values = np.full((topology.num_nodes, len(names)), _MISSING, dtype=np.int64)
    ints = np.zeros((topology.num_nodes, len(names)), dtype=np.bool_)
    others: dict[str, int] = {}
    groups: dict[tuple, int] = {}
    group = np.zeros(topology.num_nodes, dtype=np.int64)
    index = {k: i for i, k in enumerate(names)}
    for n, node in enumerate(topology.nodes):
        group[n] = groups.setdefault((node.kind, node.attrs.get("role")), len(groups))
        for k, v in node.attrs.items():
            i = index[k]
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                values[n, i] = v
                ints[n, i] = True
            else:
                values[n, i] = -1 - others.setdefault(repr(v), len(others))
    table = (names, values, group)
    topology._symmetry_table = table  # type: ignore[attr-defined]
    topology._symmetry_ints = ints  # type: ignore[attr-defined]
    return table


def table_ints(topology: Topology) -> np.ndarray:
    """Where :func:`_attribute_table`'s values are non-negative integers."""
    _attribute_table(topology)
    return topology._symmetry_ints  # type: ignore[attr-defined]


def candidate_generators(topology: Topology) -> list[list[int]]:
    """Candidate generators (node permutations, each a verified automorphism of the links):
    for every non-negative integer node attribute (``chassis`` first, then by name), the
    smallest shift that is an automorphism, matching all other attributes, or all but one, or
    all but the other integer ones (derived indices). Duplicates are left out."""
    int_attrs: list[str] = []
    for node in topology.nodes:
        for k, v in node.attrs.items():
            if isinstance(v, int) and not isinstance(v, bool) and k not in int_attrs:
                int_attrs.append(k)
    identity = list(range(topology.num_nodes))
    generators = []
    for attribute in sorted(int_attrs, key=lambda a: (a != "chassis", a)):
        highest = max(
            node.attrs[attribute]
            for node in topology.nodes
            if isinstance(node.attrs.get(attribute), int)
        )
        others = [b for b in int_attrs if b != attribute]
        ignores: list[frozenset[str]] = [frozenset()] + [frozenset([b]) for b in others]
        if len(others) > 1:
            ignores.append(frozenset(others))
        found = None
        for shift in range(1, highest + 1):
            for ignore in ignores:
                p = attribute_shift(topology, attribute, shift, ignore)
                if p is not None and p != identity and link_permutation(topology, p) is not None:
                    found = p
                    break
            if found is not None:
                break
        if found is not None and found not in generators:
            generators.append(found)
    return generators


def closure(
    topology: Topology, generators: Sequence[Sequence[int]], max_order: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The group generated by ``generators`` (automorphisms, as node permutations):
    ``(node_perms, link_perms)``, one row per element, the identity first and the others in
    breadth-first order of words in the generators; None when it has more than ``max_order``
    elements. ``O(G (N + L))`` for a group of order ``G``."""
    link_generators = []
    for g in generators:
        images = link_images(topology, np.asarray(g, dtype=np.int64))
        if images is None:
            raise ValueError("closure: a generator is not an automorphism of the links")
        link_generators.append(images)
    node_generators = [np.array(g, dtype=np.int64) for g in generators]
    nodes = [np.arange(topology.num_nodes, dtype=np.int64)[None, :]]
    links = [np.arange(len(topology.links), dtype=np.int64)[None, :]]
    elements = {nodes[0][0].tobytes()}
    count = 1
    frontier = 0
    while frontier < len(nodes):  # breadth first, one layer of words at a time
        layer_nodes, layer_links = nodes[frontier], links[frontier]
        frontier += 1
        # each element of the layer, then each generator (element-major: the order of a
        # breadth-first search one element at a time)
        composed = np.stack([g[layer_nodes] for g in node_generators], axis=1).reshape(
            -1, layer_nodes.shape[1]
        )
        new = []
        for i, row in enumerate(composed):
            key = row.tobytes()
            if key not in elements:
                elements.add(key)
                new.append(i)
        if new:
            count += len(new)
            if count > max_order:
                return None
            pick = np.array(new, dtype=np.int64)
            nodes.append(composed[pick])
            images = np.stack([gl[layer_links] for gl in link_generators], axis=1)
            links.append(images.reshape(-1, layer_links.shape[1])[pick])
    return np.concatenate(nodes), np.concatenate(links)


def acts_freely(permutations: np.ndarray, elements: np.ndarray) -> bool:
    """Whether no row of ``permutations`` but the first (the identity) fixes one of
    ``elements``: every orbit of them then has as many members as the group has elements."""
    if len(permutations) <= 1:
        return True
    return not bool((permutations[1:][:, elements] == elements[None, :]).any())


def default_max_order(topology: Topology) -> int:
    """The largest group whose tables fit in about :data:`TABLE_ENTRIES` entries."""
    return max(2, TABLE_ENTRIES // max(1, topology.num_nodes + len(topology.links)))


@dataclass(frozen=True)
class AutomorphismGroup:
    """A group of automorphisms of one topology: its generators (node permutations) and every
    element as a node and a link permutation (one row each, the identity first)."""

    generators: list[list[int]]
    node_perms: np.ndarray  # (G, nodes)
    link_perms: np.ndarray  # (G, links)

    @property
    def order(self) -> int:
        return len(self.node_perms)

    @cached_property
    def link_frames(self) -> tuple[np.ndarray, np.ndarray]:
        """Per link, its orbit's representative (smallest id) and the element carrying the
        link onto it (see :func:`link_frames`); computed once per group."""
        element = self.link_perms.argmin(axis=0)
        return self.link_perms[element, np.arange(self.link_perms.shape[1])], element

    @cached_property
    def link_orbit_sizes(self) -> np.ndarray:
        """Per link, how many links its orbit has."""
        rep = self.link_frames[0]
        return np.bincount(rep, minlength=len(rep))[rep]

    def rank_perms(self, topology: Topology) -> np.ndarray:
        """Every element as a permutation of the ranks: ``(G, ranks)``."""
        return rank_permutations(topology, self.node_perms)


def automorphism_group(
    topology: Topology, max_order: int | None = None
) -> AutomorphismGroup | None:
    """A verified automorphism group acting freely on the ranks (see the module doc), or None
    if no nontrivial one is found.

    ``max_order``: the most elements (default :func:`default_max_order`). The candidates of
    :func:`candidate_generators` are tried in order; one is dropped when adding it makes the
    group larger than ``max_order`` or not free on the ranks."""
    if max_order is None:
        max_order = default_max_order(topology)
    compute = np.array(topology.compute_nodes.tolist(), dtype=np.int64)
    kept: list[list[int]] = []
    best = None
    for g in candidate_generators(topology):
        got = closure(topology, kept + [g], max_order)
        if got is None:
            continue
        if not acts_freely(got[0], compute):
            continue
        kept.append(g)
        best = got
    if best is None:
        return None
    return AutomorphismGroup(kept, best[0], best[1])


_REMEMBERED: dict[tuple, AutomorphismGroup | None] = {}


def topology_group(topology: Topology) -> AutomorphismGroup | None:
    """:func:`automorphism_group` of ``topology`` (default order limit), remembered by the
    topology's content (its fingerprint and node attributes: what the search reads), so that
    the same fabric built again (a transposed or re-scaled copy made twice, each simulation
    and synthesis step) finds it once."""
    names, values, _ = _attribute_table(topology)
    key = (topology.fingerprint, tuple(names), values.tobytes())
    if key in _REMEMBERED:
        return _REMEMBERED[key]
    group = automorphism_group(topology)
    if len(_REMEMBERED) >= 4:  # (each holds tables of |G| x (nodes + links) entries)
        _REMEMBERED.pop(next(iter(_REMEMBERED)))
    _REMEMBERED[key] = group
    return group


def link_frames(topology: Topology, group: AutomorphismGroup) -> tuple[np.ndarray, np.ndarray]:
    """Per link, its orbit's representative (smallest id) and the element (row of the
    group's tables) carrying the link onto it. Where the group acts freely on a link's orbit
    the element is unique, so ``rank_perms[element[l], r]`` is rank ``r`` seen from the
    representative: the same for ``(l, r)`` and every image ``(g l, g r)``."""
    return group.link_frames


def automorphisms(
    topology: Topology, max_order: int | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`automorphism_group` as ``(node_perms, link_perms)`` (one row per element, the
    identity first), or None."""
    if max_order is None:  # the default order limit: the group remembered for the topology
        group = topology_group(topology)
    else:
        group = automorphism_group(topology, max_order)
    if group is None:
        return None
    return group.node_perms, group.link_perms


def rank_permutations(topology: Topology, node_perms: np.ndarray) -> np.ndarray:
    """Node permutations (rows) of kind-keeping automorphisms as rank permutations:
    ``(G, ranks)``, row ``g`` maps rank ``r`` to the rank of ``g(node of r)``."""
    return topology.rank_of_node[node_perms[:, topology.compute_nodes]]


def is_invariant(values: np.ndarray, permutations: np.ndarray) -> bool:
    """Whether ``values`` (one per permuted element) is kept by every permutation (row):
    ``values[p] == values`` for every ``p``."""
    return bool(np.array_equal(values[permutations], np.broadcast_to(values, permutations.shape)))


def components(elements: Iterable[int], pairs: Iterable[tuple[int, int]]) -> list[list[int]]:
    """The connected components of the graph on ``elements`` whose edges are ``pairs`` (both
    ends among ``elements``): each sorted, ordered by smallest member. Union-find with path
    halving, the smaller root kept, so near linear in the pairs."""
    parent = {v: v for v in elements}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in pairs:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)
    groups: dict[int, list[int]] = {}
    for v in parent:
        groups.setdefault(find(v), []).append(v)
    return [sorted(members) for _, members in sorted(groups.items())]


def orbits(generators: Sequence[Sequence[int]], count: int) -> list[list[int]]:
    """The orbits of ``0 .. count-1`` under the group generated by ``generators``
    (permutations): the components of ``i -- g(i)``; each sorted, ordered by smallest member.
    ``O(count x generators)``; needs no group table."""
    return components(range(count), ((i, int(g[i])) for g in generators for i in range(count)))


def orbit_ids(permutations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orbit id of every permuted element and the size of every orbit, for a table of a
    group's elements (one permutation per row): the orbit of ``x`` is the column
    ``permutations[:, x]``; orbits are numbered by smallest member. ``O(orbits x G log G)``."""
    count = permutations.shape[1]
    ids = np.full(count, -1, dtype=np.int64)
    sizes: list[int] = []
    for x in range(count):
        if ids[x] < 0:
            members = unique(permutations[:, x])
            ids[members] = len(sizes)
            sizes.append(len(members))
    return ids, np.array(sizes, dtype=np.int64)


def representatives(permutations: np.ndarray, elements: Iterable[int]) -> list[int]:
    """One member per orbit that meets ``elements``: the first of ``elements`` (in their
    order) not in the orbit of an earlier one. ``permutations``: a table of a group's
    elements, one per row (the orbit of ``x`` is the column ``permutations[:, x]``)."""
    seen = np.zeros(permutations.shape[1], dtype=bool)
    out: list[int] = []
    for x in elements:
        if not seen[x]:
            out.append(x)
            seen[permutations[:, x]] = True
    return out


__all__ = [
    "TABLE_ENTRIES",
    "AutomorphismGroup",
    "acts_freely",
    "attribute_shift",
    "automorphism_from_ranks",
    "automorphism_group",
    "automorphisms",
    "candidate_generators",
    "closure",
    "components",
    "default_max_order",
    "is_automorphism",
    "is_invariant",
    "link_frames",
    "link_permutation",
    "link_signature",
    "orbit_ids",
    "orbits",
    "rank_permutations",
    "representatives",
    "row_codes",
    "topology_group",
]
