"""The shared symmetry core (:mod:`collsynth.topology.symmetry`): every group element it finds is
an automorphism, the group acts freely on the ranks, orbits are unions under the generators."""

from __future__ import annotations

import random

import numpy as np
import pytest

from collsynth.topology import load_topology
from collsynth.topology.symmetry import (
    acts_freely,
    automorphism_from_ranks,
    automorphism_group,
    automorphisms,
    closure,
    components,
    is_automorphism,
    is_invariant,
    link_permutation,
    orbit_ids,
    orbits,
    rank_permutations,
    representatives,
)
from conftest import islands_on_rails

SYMMETRIC = [
    "dgx1",
    "dgx2:chassis=2",
    "mi250:chassis=2",
    "dgx_a100:nodes=2",
    "ndv2:chassis=2",
    "torus2d:w=3,h=3",
    "ring:n=6",
    "hypercube:d=3",
]


@pytest.mark.parametrize("spec", SYMMETRIC)
def test_every_element_is_an_automorphism_and_free_on_ranks(spec):
    topo = load_topology(spec)
    group = automorphism_group(topo)
    assert group is not None and group.order > 1 and group.generators
    for g in group.generators:
        assert is_automorphism(topo, g)
    assert np.array_equal(group.node_perms[0], np.arange(topo.num_nodes))
    for nodes, links in zip(group.node_perms, group.link_perms):
        assert is_automorphism(topo, nodes.tolist())
        assert link_permutation(topo, nodes.tolist()) == links.tolist()
    compute = topo.compute_nodes.astype(np.int64)
    assert acts_freely(group.node_perms, compute)
    # every rank orbit has |G| members; the rank permutations are permutations
    ranks = group.rank_perms(topo)
    assert np.array_equal(ranks, rank_permutations(topo, group.node_perms))
    assert all(sorted(row.tolist()) == list(range(topo.num_ranks)) for row in ranks)
    ids, sizes = orbit_ids(ranks)
    assert set(sizes.tolist()) == {group.order}
    # a group: closed under composition, no repeated element
    rows = {row.tobytes() for row in group.node_perms}
    assert len(rows) == group.order
    for a in group.node_perms[: min(8, group.order)]:
        for b in group.generators:
            assert np.asarray(b)[a].tobytes() in rows
    # node kinds and link bandwidths are kept
    assert is_invariant(topo.kind_codes, group.node_perms)
    assert is_invariant(topo.link_bw, group.link_perms)
    assert automorphisms(topo) is not None
    assert np.array_equal(automorphisms(topo)[0], group.node_perms)


@pytest.mark.parametrize("spec", SYMMETRIC)
def test_orbits_are_unions_under_the_generators(spec):
    topo = load_topology(spec)
    group = automorphism_group(topo)
    assert group is not None
    node_orbits = orbits(group.generators, topo.num_nodes)
    assert sorted(v for orbit in node_orbits for v in orbit) == list(range(topo.num_nodes))
    for orbit in node_orbits:
        members = set(orbit)
        for g in group.generators:
            assert {g[v] for v in orbit} == members
    # the same orbits from the table of every element, numbered by smallest member
    ids, sizes = orbit_ids(group.node_perms)
    by_table: dict[int, list[int]] = {}
    for v, i in enumerate(ids.tolist()):
        by_table.setdefault(i, []).append(v)
    assert [by_table[i] for i in sorted(by_table)] == node_orbits
    assert sizes.tolist() == [len(o) for o in node_orbits]
    # one representative per orbit, the first in the given order
    reps = representatives(group.node_perms, range(topo.num_nodes))
    assert reps == [orbit[0] for orbit in node_orbits]
    backwards = representatives(group.node_perms, reversed(range(topo.num_nodes)))
    assert sorted(backwards) == sorted(orbit[-1] for orbit in node_orbits)


def test_fabrics_without_attributes_have_no_group():
    for spec in ("line", "mesh2d", "random_regular:n=8,d=3"):
        assert automorphism_group(load_topology(spec)) is None


def test_is_automorphism_rejects():
    topo = load_topology("ring:n=6")
    group = automorphism_group(topo)
    assert group is not None
    shift = group.generators[0]
    assert is_automorphism(topo, shift)
    assert not is_automorphism(topo, shift[:-1])  # wrong length
    assert not is_automorphism(topo, [0] * topo.num_nodes)  # not a permutation
    swap = list(range(topo.num_nodes))
    swap[0], swap[2] = 2, 0  # not a ring rotation or reflection
    assert not is_automorphism(topo, swap)
    # a kind-changing permutation is refused even where the links would match
    star = load_topology("star:n=3")
    switch = int(np.flatnonzero(star.kind_codes != 0)[0])
    relabel = list(range(star.num_nodes))
    relabel[switch], relabel[0] = 0, switch
    assert not is_automorphism(star, relabel)


def test_closure_and_its_limit():
    topo = load_topology("torus2d:w=3,h=3")
    group = automorphism_group(topo)
    assert group is not None and group.order == 9
    assert closure(topo, group.generators, 8) is None
    nodes, links = closure(topo, group.generators, 9)
    assert np.array_equal(nodes, group.node_perms) and np.array_equal(links, group.link_perms)
    assert automorphism_group(topo, max_order=1) is None
    assert acts_freely(nodes[:1], np.arange(3))


def test_components_match_a_plain_search():
    rng = random.Random(7)
    for _ in range(20):
        n = rng.randint(1, 30)
        elements = rng.sample(range(100), n)
        pairs = [(rng.choice(elements), rng.choice(elements)) for _ in range(rng.randint(0, n))]
        got = components(elements, pairs)
        adjacency: dict[int, set[int]] = {v: set() for v in elements}
        for a, b in pairs:
            adjacency[a].add(b)
            adjacency[b].add(a)
        seen: set[int] = set()
        want = []
        for v in sorted(elements):
            if v in seen:
                continue
            stack, found = [v], {v}
            while stack:
                for w in adjacency[stack.pop()]:
                    if w not in found:
                        found.add(w)
                        stack.append(w)
            seen |= found
            want.append(sorted(found))
        assert got == want


def test_orbit_helpers_on_a_cyclic_group():
    # the rotation of 0..5 by 2 generates {id, +2, +4}: orbits {0, 2, 4} and {1, 3, 5}
    rotate = [(i + 2) % 6 for i in range(6)]
    assert orbits([rotate], 6) == [[0, 2, 4], [1, 3, 5]]
    table = np.array([[(i + 2 * k) % 6 for i in range(6)] for k in range(3)])
    ids, sizes = orbit_ids(table)
    assert ids.tolist() == [0, 1, 0, 1, 0, 1] and sizes.tolist() == [3, 3]
    assert representatives(table, [3, 2, 1, 0]) == [3, 2]
    assert acts_freely(table, np.arange(6))
    assert is_invariant(np.array([5, 7, 5, 7, 5, 7]), table)
    assert not is_invariant(np.arange(6), table)


def test_algorithm_modules_use_the_shared_core():
    from collsynth.synth.forestcoll import automorphisms as forestcoll_automorphisms
    from collsynth.synth.forestcoll import symmetry as forestcoll_symmetry

    assert forestcoll_automorphisms is automorphisms
    assert forestcoll_symmetry.automorphisms is automorphisms


def _reference_link_permutation(topology, p):
    """The link permutation by hand: each link to the first unused link with the image ends
    and the same bandwidth, alpha, class and lanes, in id order; None where there is none."""
    buckets: dict[tuple, list[int]] = {}
    for link in topology.links:
        key = (link.src, link.dst, link.bw, link.alpha, link.cls, link.lanes)
        buckets.setdefault(key, []).append(link.id)
    out = []
    for link in topology.links:
        ids = buckets.get((p[link.src], p[link.dst], link.bw, link.alpha, link.cls, link.lanes))
        if not ids:
            return None
        out.append(ids.pop(0))
    return out


@pytest.mark.parametrize("spec", SYMMETRIC + ["a800_clos", "fat_tree", "wan"])
def test_vectorised_link_permutation_matches_the_definition(spec):
    t = load_topology(spec)
    group = automorphism_group(t)
    rng = random.Random(7)
    perms = [list(row) for row in group.node_perms[:6]] if group is not None else []
    for _ in range(4):  # permutations that are (almost always) not automorphisms
        p = list(range(t.num_nodes))
        i, j = rng.sample(range(t.num_nodes), 2)
        p[i], p[j] = p[j], p[i]
        perms.append(p)
    for p in perms:
        assert link_permutation(t, p) == _reference_link_permutation(t, [int(x) for x in p])


@pytest.mark.parametrize("spec", ["dgx_a100:nodes=4", "h800_rails:servers=4", "mi250:chassis=2"])
def test_automorphism_from_ranks_finds_the_group_elements(spec):
    """Given only where the ranks go, the structure places every switch: the group's own
    elements (found from attributes) come back node for node."""
    t = load_topology(spec)
    group = automorphism_group(t)
    assert group is not None
    ranks = group.rank_perms(t)
    for e in range(min(group.order, 6)):
        found = automorphism_from_ranks(t, ranks[e])
        assert found is not None and is_automorphism(t, found)
        assert np.array_equal(np.asarray(found)[t.compute_nodes], t.compute_nodes[ranks[e]])
        assert np.array_equal(found, group.node_perms[e])


def test_automorphism_from_ranks_without_attributes():
    t = islands_on_rails()
    assert automorphism_group(t) is None  # nothing to shift: no integer attributes
    shift = (np.arange(12) + 4) % 12  # every island's GPU j to the next island's GPU j
    found = automorphism_from_ranks(t, shift)
    assert found is not None and is_automorphism(t, found)
    swap = np.arange(12)
    swap[[0, 1]] = [1, 0]  # two GPUs of one island: their leaves differ, no automorphism
    assert automorphism_from_ranks(t, swap) is None
    assert automorphism_from_ranks(t, [0, 0] + list(range(2, 12))) is None  # not a permutation
    assert automorphism_from_ranks(t, np.arange(5)) is None  # not every rank
    # island 2 wired unlike the others: the shift is no automorphism
    assert automorphism_from_ranks(islands_on_rails(cross=True), shift) is None
