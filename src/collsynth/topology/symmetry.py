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

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import unique
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
    :func:`is_automorphism`). ``O(L)`` expected time."""
    buckets: dict[tuple, list[int]] = {}
    for link in topology.links:
        buckets.setdefault(link_signature(link), []).append(link.id)
    used = {key: 0 for key in buckets}
    out = [0] * len(topology.links)
    p = node_permutation
    for link in topology.links:
        key = (p[link.src], p[link.dst], link.bw, link.alpha, link.cls, link.lanes)
        ids = buckets.get(key)
        if ids is None or used[key] >= len(ids):
            return None
        out[link.id] = ids[used[key]]
        used[key] += 1
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


def attribute_shift(
    topology: Topology, attribute: str, shift: int, ignore: frozenset = frozenset()
) -> list[int] | None:
    """The node permutation shifting integer attribute ``attribute`` by ``shift`` (modulo its
    range per node kind and role); every other attribute is kept, except those in ``ignore``
    (attributes derived from ``attribute``, such as a torus node's linear index when its ``x``
    shifts), which are not matched. None if some image does not exist or is not unique, or the
    attribute is not a non-negative integer everywhere. Not verified against the links."""
    nodes = topology.nodes
    ranges: dict[tuple, int] = {}
    for node in nodes:
        attrs = node.attrs
        if attribute in attrs:
            value = attrs[attribute]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return None
            group = (node.kind, attrs.get("role"))
            ranges[group] = max(ranges.get(group, 0), value + 1)

    def key(kind: Any, attrs: dict) -> tuple:
        return (kind, tuple(sorted((k, repr(v)) for k, v in attrs.items() if k not in ignore)))

    index: dict[tuple, int] = {}
    for i, node in enumerate(nodes):
        node_key = key(node.kind, node.attrs)
        index[node_key] = -1 if node_key in index else i  # -1: ambiguous
    permutation = []
    for i, node in enumerate(nodes):
        attrs = node.attrs
        if attribute not in attrs:
            if any(k in attrs for k in ignore):
                return None
            permutation.append(i)
            continue
        shifted = dict(attrs)
        shifted[attribute] = (attrs[attribute] + shift) % ranges[(node.kind, attrs.get("role"))]
        image = index.get(key(node.kind, shifted), -1)
        if image < 0:
            return None
        permutation.append(image)
    if len(set(permutation)) != len(permutation):
        return None
    return permutation


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
    link_generators = [np.array(link_permutation(topology, g), dtype=np.int64) for g in generators]
    node_generators = [np.array(g, dtype=np.int64) for g in generators]
    identity = np.arange(topology.num_nodes, dtype=np.int64)
    elements = {identity.tobytes(): None}
    node_rows = [identity]
    link_rows = [np.arange(len(topology.links), dtype=np.int64)]
    queue = deque([0])
    while queue:
        i = queue.popleft()
        for g, g_links in zip(node_generators, link_generators):
            composed = g[node_rows[i]]  # apply element i, then the generator
            key = composed.tobytes()
            if key not in elements:
                elements[key] = None
                node_rows.append(composed)
                link_rows.append(g_links[link_rows[i]])
                queue.append(len(node_rows) - 1)
                if len(node_rows) > max_order:
                    return None
    return np.array(node_rows, dtype=np.int64), np.array(link_rows, dtype=np.int64)


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


def automorphisms(
    topology: Topology, max_order: int | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`automorphism_group` as ``(node_perms, link_perms)`` (one row per element, the
    identity first), or None."""
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
    "automorphism_group",
    "automorphisms",
    "candidate_generators",
    "closure",
    "components",
    "default_max_order",
    "is_automorphism",
    "is_invariant",
    "link_permutation",
    "link_signature",
    "orbit_ids",
    "orbits",
    "rank_permutations",
    "representatives",
]
