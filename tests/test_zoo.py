"""Tests of the topology zoo: every constructor against the wiring facts it documents."""

from __future__ import annotations

import itertools
from collections import Counter, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.errors import CollsynthError
from collsynth.topology import zoo as Z
from collsynth.topology.model import NodeKind, Topology
from collsynth.topology.registry import ZOO, build_named

GB = 1e9
US = 1e-6


# ------------------------------------------------------------------------------ helpers
def node(topo: Topology, name: str) -> int:
    return topo.index(name)


def out_of(topo: Topology, name: str, cls: str | None = None) -> list:
    return [
        topo.links[l]
        for l in topo.out_links[node(topo, name)]
        if cls is None or topo.links[l].cls == cls
    ]


def in_of(topo: Topology, name: str, cls: str | None = None) -> list:
    return [
        topo.links[l]
        for l in topo.in_links[node(topo, name)]
        if cls is None or topo.links[l].cls == cls
    ]


def links_of(topo: Topology, cls: str) -> list:
    return [l for l in topo.links if l.cls == cls]


def name_of(topo: Topology, idx: int) -> str:
    return topo.nodes[idx].name


def attr(topo: Topology, idx: int, key: str):
    return topo.nodes[idx].attrs.get(key)


def neighbours(topo: Topology, idx: int) -> list[int]:
    return [topo.links[l].dst for l in topo.out_links[idx]]


def assert_simple_symmetric(topo: Topology) -> None:
    """No self loops, no parallel links, every link has a reverse twin with the same bw."""
    pairs = Counter((l.src, l.dst) for l in topo.links)
    assert all(c == 1 for c in pairs.values()), "parallel links"
    bw = {(l.src, l.dst): l.bw for l in topo.links}
    for (s, d), b in bw.items():
        assert s != d
        assert bw.get((d, s)) == b


def connected_within(topo: Topology, members: list[int], cls: str) -> bool:
    """Are ``members`` connected using only links of class ``cls`` among them?"""
    allowed = set(members)
    seen = {members[0]}
    q = deque([members[0]])
    while q:
        u = q.popleft()
        for lid in topo.out_links[u]:
            l = topo.links[lid]
            if l.cls == cls and l.dst in allowed and l.dst not in seen:
                seen.add(l.dst)
                q.append(l.dst)
    return seen == allowed


# ------------------------------------------------------------------------------ every entry
EXPECTED = {
    "dgx1",
    "ndv2",
    "dgx2",
    "mi250",
    "dgx_a100",
    "a800_clos",
    "h800_rails",
    "wan",
    "ring",
    "line",
    "full",
    "star",
    "mesh2d",
    "torus2d",
    "torus3d",
    "hypercube",
    "fat_tree",
    "dragonfly",
    "random_regular",
}


def test_zoo_has_every_required_entry():
    assert EXPECTED <= set(ZOO)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_entry_builds_with_defaults(name):
    entry = ZOO[name]
    topo = build_named(name)
    assert topo.num_ranks >= 2
    assert topo.meta["zoo"] == name
    assert set(topo.meta["params"]) == set(entry.params)
    # docstring: one-line summary, every parameter documented
    assert entry.summary and entry.summary.endswith(".")
    for key, p in entry.params.items():
        assert p.help, f"{name}.{key} has no help"
    # all bandwidths positive, all links labelled with a known class
    assert all(l.bw > 0 and l.alpha >= 0 for l in topo.links)
    assert set(topo.classes()) <= {"nvlink", "xgmi", "nvswitch", "pcie", "ib", "eth", "wan", "link"}
    # every switch and router says what it is
    for nd in topo.nodes:
        if nd.kind is not NodeKind.COMPUTE:
            assert nd.attrs.get("role"), nd.name
    # deterministic
    assert build_named(name).fingerprint == topo.fingerprint
    s = topo.summary()
    assert s["compute_nodes"] == topo.num_ranks and s["links"] == len(topo.links)


@pytest.mark.parametrize(
    "name", ["ndv2", "dgx2", "mi250", "dgx_a100", "a800_clos", "h800_rails", "wan"]
)
def test_real_fabrics_document_their_source(name):
    assert "Source:" in ZOO[name].doc and "Default" in ZOO[name].doc


# ------------------------------------------------------------------------------ DGX-1 / NDv2
def test_dgx1_six_nvlinks_per_gpu():
    topo = build_named("dgx1")
    for r in range(8):
        links = out_of(topo, f"gpu{r}")
        assert sum(l.lanes for l in links) == 6
        assert sum(l.bw for l in links) == pytest.approx(150 * GB)
        assert len(links) == 4
    split = build_named("dgx1", {"lanes": "split"})
    assert len(split.links) == 48 and all(l.bw == 25 * GB for l in split.links)


def test_dgx1_table_has_six_links_per_gpu():
    deg = Counter()
    for (i, j), c in Z.DGX1_NVLINKS.items():
        deg[i] += c
        deg[j] += c
    assert deg == {g: 6 for g in range(8)}


def test_ndv2_two_chassis():
    topo = build_named("ndv2", {"chassis": "2"})
    assert topo.num_ranks == 16 and topo.num_switches == 0
    ib = links_of(topo, "ib")
    assert len(ib) == 2
    pairs = {(name_of(topo, l.src), name_of(topo, l.dst)) for l in ib}
    assert pairs == {("c0.gpu0", "c1.gpu1"), ("c1.gpu0", "c0.gpu1")}
    assert all(l.bw == 12.5 * GB and l.alpha == pytest.approx(1.3 * US) for l in ib)
    for c, g in itertools.product(range(2), range(8)):
        nv = out_of(topo, f"c{c}.gpu{g}", "nvlink")
        assert sum(l.lanes for l in nv) == 6
        assert all(l.alpha == pytest.approx(0.7 * US) for l in nv)


def test_ndv2_four_chassis_switch():
    topo = build_named("ndv2", {"chassis": "4"})
    assert topo.num_ranks == 32 and topo.num_switches == 1
    ib = links_of(topo, "ib")
    assert len(ib) == 8
    sw = node(topo, "ib0")
    assert attr(topo, sw, "role") == "ib"
    assert len(topo.out_links[sw]) == 4 and len(topo.in_links[sw]) == 4
    for c in range(4):
        assert [name_of(topo, l.dst) for l in out_of(topo, f"c{c}.gpu0", "ib")] == ["ib0"]
        assert [name_of(topo, l.src) for l in in_of(topo, f"c{c}.gpu1", "ib")] == ["ib0"]


def test_ndv2_one_chassis_is_a_dgx1():
    topo = build_named("ndv2", {"chassis": "1"})
    assert topo.num_ranks == 8 and topo.num_switches == 0 and "ib" not in topo.classes()
    assert len(topo.links) == len(build_named("dgx1").links)


# ------------------------------------------------------------------------------ DGX-2
@pytest.mark.parametrize("chassis", [1, 2, 3, 4])
def test_dgx2_nvswitch_and_ib(chassis):
    topo = build_named("dgx2", {"chassis": str(chassis)})
    assert topo.num_ranks == 16 * chassis and topo.num_switches == chassis
    for c, g in itertools.product(range(chassis), range(16)):
        name = f"c{c}.gpu{g}"
        nvs = out_of(topo, name, "nvswitch")
        assert len(nvs) == 1 and nvs[0].bw == 125 * GB
        assert nvs[0].alpha == pytest.approx(0.35 * US)
        assert name_of(topo, nvs[0].dst) == f"c{c}.nvswitch"
        n_out, n_in = len(out_of(topo, name, "ib")), len(in_of(topo, name, "ib"))
        if chassis == 1:
            assert n_out == n_in == 0
        else:
            assert n_out + n_in == 1
            assert (n_out, n_in) == ((1, 0) if g % 2 else (0, 1))
    ib = links_of(topo, "ib")
    assert len(ib) == (8 * chassis if chassis > 1 else 0)
    outs = Counter(attr(topo, l.src, "chassis") for l in ib)
    ins = Counter(attr(topo, l.dst, "chassis") for l in ib)
    if chassis > 1:
        assert outs == {c: 8 for c in range(chassis)} and ins == outs
    for l in ib:
        assert l.bw == 12.5 * GB and l.alpha == pytest.approx(2.6 * US)
        assert attr(topo, l.src, "chassis") != attr(topo, l.dst, "chassis")
        assert attr(topo, l.dst, "local") == attr(topo, l.src, "local") - 1


def test_dgx2_two_chassis_is_teccl_map():
    topo = build_named("dgx2")
    pairs = {(name_of(topo, l.src), name_of(topo, l.dst)) for l in links_of(topo, "ib")}
    expected = {
        (f"c{i}.gpu{2 * m + 1}", f"c{1 - i}.gpu{2 * m}") for i in range(2) for m in range(8)
    }
    assert pairs == expected


@pytest.mark.parametrize("chassis,spread", [(3, {4}), (4, {2, 3}), (5, {2}), (9, {1})])
def test_dgx2_ib_links_spread_over_other_chassis(chassis, spread):
    topo = build_named("dgx2", {"chassis": str(chassis)})
    per_pair = Counter(
        (attr(topo, l.src, "chassis"), attr(topo, l.dst, "chassis")) for l in links_of(topo, "ib")
    )
    assert len(per_pair) == chassis * (chassis - 1)
    assert set(per_pair.values()) == spread


# ------------------------------------------------------------------------------ MI250
def test_mi250_table():
    assert len(Z.MI250_XGMI) == 28 and sum(Z.MI250_XGMI.values()) == 56
    deg = Counter()
    for (i, j), c in Z.MI250_XGMI.items():
        assert i < j
        deg[i] += c
        deg[j] += c
    assert deg == {g: 7 for g in range(16)}
    assert sorted(Counter(Z.MI250_XGMI.values()).items()) == [(1, 16), (2, 4), (4, 8)]


def test_mi250_one_chassis_xgmi():
    topo = build_named("mi250")
    assert topo.num_ranks == 16 and topo.num_switches == 0
    assert len(topo.links) == 56
    pairs = {tuple(sorted((l.src, l.dst))) for l in topo.links}
    assert len(pairs) == 28
    for g in range(16):
        xg = out_of(topo, f"c0.gpu{g}", "xgmi")
        assert sum(l.bw for l in xg) == pytest.approx(350 * GB)
        assert sum(l.lanes for l in xg) == 7
        assert sum(l.bw for l in in_of(topo, f"c0.gpu{g}")) == pytest.approx(350 * GB)
    split = build_named("mi250", {"lanes": "split"})
    assert len(split.links) == 112 and all(l.bw == 50 * GB for l in split.links)


def test_mi250_forestcoll_inter():
    topo = build_named("mi250", {"chassis": "2", "inter": "forestcoll"})
    assert topo.num_ranks == 32 and topo.num_switches == 1
    sw = node(topo, "ib0")
    assert len(topo.in_links[sw]) == len(topo.out_links[sw]) == 32
    for c, g in itertools.product(range(2), range(16)):
        ib_out = out_of(topo, f"c{c}.gpu{g}", "ib")
        ib_in = in_of(topo, f"c{c}.gpu{g}", "ib")
        assert [l.bw for l in ib_out] == [16 * GB] and [l.bw for l in ib_in] == [16 * GB]
        assert ib_out[0].alpha == pytest.approx(1.3 * US)
        assert sum(l.lanes for l in out_of(topo, f"c{c}.gpu{g}", "xgmi")) == 7


def test_mi250_teccl_inter():
    topo = build_named("mi250", {"chassis": "2", "inter": "teccl"})
    assert topo.num_ranks == 32 and topo.num_switches == 2 * 8 + 1
    top = node(topo, "ib0")
    assert len(topo.in_links[top]) == len(topo.out_links[top]) == 16
    assert all(topo.links[l].bw == 25 * GB for l in topo.out_links[top])
    for c in range(2):
        for p in range(8):
            nic = f"c{c}.nic{p}"
            assert attr(topo, node(topo, nic), "role") == "nic"
            downs = sorted(name_of(topo, l.dst) for l in out_of(topo, nic, "pcie"))
            assert downs == [f"c{c}.gpu{2 * p}", f"c{c}.gpu{2 * p + 1}"]
            assert [name_of(topo, l.dst) for l in out_of(topo, nic, "ib")] == ["ib0"]
            assert [l.bw for l in in_of(topo, nic)] == [25 * GB] * 3
        for g in range(16):
            pc = out_of(topo, f"c{c}.gpu{g}", "pcie")
            assert len(pc) == 1 and pc[0].bw == 25 * GB
            assert pc[0].alpha == pytest.approx(0.35 * US)
        off = sum(l.bw for l in links_of(topo, "ib") if name_of(topo, l.src).startswith(f"c{c}."))
        assert off == pytest.approx(200 * GB)


def test_mi250_ib_bandwidth_parameter():
    topo = build_named("mi250", {"chassis": "3", "ib": "20GB/s"})
    assert {l.bw for l in links_of(topo, "ib")} == {20 * GB}


# ------------------------------------------------------------------------------ DGX A100
def test_dgx_a100_two_nodes():
    topo = build_named("dgx_a100")
    assert topo.num_ranks == 16
    assert topo.num_switches == 2 + 2 + 16  # nvswitches, IB planes, NICs
    for n, b in itertools.product(range(2), range(8)):
        g = f"c{n}.gpu{b}"
        assert topo.out_bw(node(topo, g)) == pytest.approx(325 * GB)
        assert [l.bw for l in out_of(topo, g, "nvswitch")] == [300 * GB]
        (pc,) = out_of(topo, g, "pcie")
        assert name_of(topo, pc.dst) == f"c{n}.nic{b}" and pc.bw == 25 * GB
        (ib,) = out_of(topo, f"c{n}.nic{b}", "ib")
        assert name_of(topo, ib.dst) == f"ib{b % 2}" and ib.bw == 25 * GB
    for k in range(2):
        assert len(topo.in_links[node(topo, f"ib{k}")]) == 8


def test_dgx_a100_one_node():
    topo = build_named("dgx_a100", {"nodes": "1"})
    assert topo.num_ranks == 8 and topo.num_switches == 1
    for b in range(8):
        assert topo.out_bw(node(topo, f"c0.gpu{b}")) == pytest.approx(300 * GB)


# ------------------------------------------------------------------------------ SyCCL fabrics
def _leaf_spine_checks(topo, servers, rails, spines, nic):
    for r in range(rails):
        leaf = f"leaf{r}"
        downs = out_of(topo, leaf, "eth")
        to_nics = [l for l in downs if attr(topo, l.dst, "role") == "nic"]
        to_spines = [l for l in downs if attr(topo, l.dst, "role") == "spine"]
        assert sorted(name_of(topo, l.dst) for l in to_nics) == sorted(
            f"c{s}.nic{r}" for s in range(servers)
        )
        assert len(to_spines) == spines
        assert all(l.bw == pytest.approx(servers * nic / spines) for l in to_spines)
        # non-blocking: uplink capacity == downlink capacity
        assert sum(l.bw for l in to_spines) == pytest.approx(sum(l.bw for l in to_nics))


def test_a800_clos_defaults():
    topo = build_named("a800_clos")
    assert topo.num_ranks == 32
    roles = Counter(attr(topo, i, "role") for i in range(topo.num_nodes) if not topo.is_compute(i))
    assert roles == {"nvswitch": 4, "nic": 16, "leaf": 4, "spine": 4}
    for s, g in itertools.product(range(4), range(8)):
        name = f"c{s}.gpu{g}"
        assert [l.bw for l in out_of(topo, name, "nvswitch")] == [180 * GB]
        (pc,) = out_of(topo, name, "pcie")
        assert name_of(topo, pc.dst) == f"c{s}.nic{g // 2}" and pc.bw == 25 * GB
    _leaf_spine_checks(topo, 4, 4, 4, 25 * GB)


def test_h800_rails_defaults_and_paper_scale():
    topo = build_named("h800_rails")
    assert topo.num_ranks == 32
    for s, g in itertools.product(range(4), range(8)):
        name = f"c{s}.gpu{g}"
        assert [l.bw for l in out_of(topo, name, "nvswitch")] == [200 * GB]
        (pc,) = out_of(topo, name, "pcie")
        assert name_of(topo, pc.dst) == f"c{s}.nic{g}" and pc.bw == 50 * GB
        assert attr(topo, node(topo, name), "rail") == g
    _leaf_spine_checks(topo, 4, 8, 8, 50 * GB)
    big = build_named("h800_rails", {"servers": "64"})
    assert big.num_ranks == 512
    _leaf_spine_checks(big, 64, 8, 8, 50 * GB)


def test_rail_fabrics_single_server_and_options():
    one = build_named("h800_rails", {"servers": "1"})
    assert one.num_ranks == 8 and one.num_switches == 1
    topo = build_named("a800_clos", {"nics": "8", "spines": "2"})
    _leaf_spine_checks(topo, 4, 8, 2, 25 * GB)
    single_rail = build_named("a800_clos", {"nics": "1"})
    assert not any(attr(single_rail, i, "role") == "spine" for i in range(single_rail.num_nodes))


# ------------------------------------------------------------------------------ WAN
def _dc_gpu_nodes(topo, d):
    return [i for i in topo.compute_nodes if attr(topo, int(i), "dc") == d]


@pytest.mark.parametrize(
    "dcs,gpus,p,seed",
    [(3, 8, 0.5, 0), (2, 6, 0.7, 3), (4, 5, 0.0, 1), (2, 7, 1.0, 2), (3, 10, 0.3, 9)],
)
def test_wan_intra_link_counts(dcs, gpus, p, seed):
    topo = build_named(
        "wan", {"dcs": str(dcs), "gpus": str(gpus), "connectivity": str(p), "seed": str(seed)}
    )
    assert topo.num_ranks == dcs * gpus and topo.num_routers == dcs
    expected = max(gpus - 1, round(p * gpus * (gpus - 1) / 2))
    for d in range(dcs):
        members = [int(i) for i in _dc_gpu_nodes(topo, d)]
        intra = [l for l in links_of(topo, "nvlink") if l.src in members]
        assert all(l.dst in members for l in intra)
        assert len(intra) == 2 * expected
        assert all(l.bw == 50 * GB and l.alpha == pytest.approx(0.7 * US) for l in intra)
        assert connected_within(topo, members, "nvlink")
        r = node(topo, f"dc{d}.router")
        assert topo.nodes[r].kind is NodeKind.ROUTER and attr(topo, r, "dc") == d
        assert len([l for l in topo.out_links[r] if topo.links[l].cls == "eth"]) == gpus
    assert_simple_symmetric(topo)


def test_wan_defaults_and_alpha():
    topo = build_named("wan")
    assert topo.num_ranks == 24
    assert len(links_of(topo, "nvlink")) == 2 * 3 * 14  # round(0.5 * 28) per DC
    wan = links_of(topo, "wan")
    assert len(wan) == 6
    assert all(l.alpha == pytest.approx(750 * US) and l.bw == 12.5 * GB for l in wan)
    assert all(l.bw == 12.5 * GB for l in links_of(topo, "eth"))
    for km in (10, 200):
        t = build_named("wan", {"km": str(km)})
        assert {round(l.alpha / US, 9) for l in links_of(t, "wan")} == {5.0 * km}


def test_wan_gateways():
    topo = build_named("wan", {"gateways": "2"})
    for d in range(3):
        gws = sorted(name_of(topo, l.src) for l in in_of(topo, f"dc{d}.router", "eth"))
        assert gws == [f"dc{d}.gpu0", f"dc{d}.gpu1"]


def test_wan_determinism():
    a = build_named("wan", {"seed": "7"})
    b = build_named("wan", {"seed": "7"})
    assert a.fingerprint == b.fingerprint
    prints = {build_named("wan", {"seed": str(s)}).fingerprint for s in range(5)}
    assert len(prints) >= 4


@settings(max_examples=25, deadline=None)
@given(gpus=st.integers(1, 9), p=st.floats(0, 1), seed=st.integers(0, 10**6))
def test_wan_intra_link_count_property(gpus, p, seed):
    topo = build_named("wan", {"dcs": 2, "gpus": gpus, "connectivity": p, "seed": seed})
    full = gpus * (gpus - 1) // 2
    expected = min(full, max(gpus - 1, round(p * full)))
    assert len(links_of(topo, "nvlink")) == 2 * 2 * expected


# ------------------------------------------------------------------------------ generic
def test_line_full_star():
    line = build_named("line", {"n": "5"})
    assert len(line.links) == 8 and line.hop_diameter == 4
    full = build_named("full", {"n": "6", "bw": "10GB/s"})
    assert len(full.links) == 30 and full.hop_diameter == 1
    assert {l.bw for l in full.links} == {10 * GB}
    star = build_named("star", {"n": "7"})
    assert star.num_ranks == 7 and star.num_switches == 1 and len(star.links) == 14
    assert all(len(star.out_links[int(c)]) == 1 for c in star.compute_nodes)
    for t in (line, full, star):
        assert_simple_symmetric(t)


def test_generic_alpha_parameter():
    topo = build_named("ring", {"n": "4", "alpha": "2us"})
    assert all(l.alpha == pytest.approx(2 * US) for l in topo.links)


def test_mesh2d_degrees():
    topo = build_named("mesh2d", {"w": "4", "h": "3"})
    assert topo.num_ranks == 12
    assert len(topo.links) == 2 * (3 * 3 + 4 * 2)
    degs = Counter(len(topo.out_links[int(c)]) for c in topo.compute_nodes)
    assert degs == {2: 4, 3: 6, 4: 2}
    assert_simple_symmetric(topo)


def test_torus_degrees():
    t2 = build_named("torus2d", {"w": "5", "h": "3"})
    assert all(len(t2.out_links[int(c)]) == 4 for c in t2.compute_nodes)
    t3 = build_named("torus3d")
    assert t3.num_ranks == 64
    assert all(len(t3.out_links[int(c)]) == 6 for c in t3.compute_nodes)
    for t in (t2, t3):
        assert_simple_symmetric(t)


@pytest.mark.parametrize("w,h", [(w, h) for w in range(1, 5) for h in range(1, 5) if w * h >= 2])
def test_torus2d_small_sizes_have_no_duplicates(w, h):
    topo = build_named("torus2d", {"w": str(w), "h": str(h)})
    assert_simple_symmetric(topo)

    def dim_deg(size):
        return 0 if size == 1 else 1 if size == 2 else 2

    assert all(len(topo.out_links[int(c)]) == dim_deg(w) + dim_deg(h) for c in topo.compute_nodes)


@settings(max_examples=20, deadline=None)
@given(x=st.integers(1, 4), y=st.integers(1, 4), z=st.integers(1, 4))
def test_torus3d_property(x, y, z):
    if x * y * z < 2:
        with pytest.raises(CollsynthError):
            build_named("torus3d", {"x": x, "y": y, "z": z})
        return
    topo = build_named("torus3d", {"x": x, "y": y, "z": z})
    assert topo.num_ranks == x * y * z
    assert_simple_symmetric(topo)
    deg = sum(0 if s == 1 else 1 if s == 2 else 2 for s in (x, y, z))
    assert all(len(topo.out_links[int(c)]) == deg for c in topo.compute_nodes)


def test_torus2x2x2_is_a_cube():
    t = build_named("torus3d", {"x": "2", "y": "2", "z": "2"})
    assert len(t.links) == 24 and t.hop_diameter == 3


@pytest.mark.parametrize("d", [1, 3, 5])
def test_hypercube_degree(d):
    topo = build_named("hypercube", {"d": str(d)})
    assert topo.num_ranks == 2**d
    for c in topo.compute_nodes:
        c = int(c)
        nbs = neighbours(topo, c)
        assert len(nbs) == d
        assert all(
            bin(attr(topo, c, "local") ^ attr(topo, n, "local")).count("1") == 1 for n in nbs
        )
    assert topo.hop_diameter == d


@pytest.mark.parametrize("k", [2, 4, 6])
def test_fat_tree_counts(k):
    topo = build_named("fat_tree", {"k": str(k)})
    half = k // 2
    assert topo.num_ranks == k**3 // 4
    roles = Counter(attr(topo, i, "role") for i in range(topo.num_nodes) if not topo.is_compute(i))
    assert roles == {"edge": k * half, "agg": k * half, "core": half * half}
    assert len(topo.links) == 2 * 3 * k**3 // 4
    # every switch has k ports (cores: k, one per pod)
    for i in range(topo.num_nodes):
        if not topo.is_compute(i):
            assert len(topo.out_links[i]) == k
    for c in topo.compute_nodes:
        (l,) = [topo.links[x] for x in topo.out_links[int(c)]]
        assert attr(topo, l.dst, "role") == "edge"
    assert topo.hop_diameter == 6  # host - edge - agg - core - agg - edge - host
    assert_simple_symmetric(topo)


@pytest.mark.parametrize(
    "a,p,h,groups", [(4, 2, 2, None), (2, 1, 1, None), (3, 2, 2, 4), (2, 2, 3, 7)]
)
def test_dragonfly_counts(a, p, h, groups):
    args = {"a": str(a), "p": str(p), "h": str(h)}
    if groups is not None:
        args["groups"] = str(groups)
    topo = build_named("dragonfly", args)
    g = groups if groups is not None else a * h + 1
    assert topo.num_ranks == g * a * p and topo.num_switches == g * a
    routers = [i for i in range(topo.num_nodes) if attr(topo, i, "role") == "router"]
    global_per_router = Counter()
    group_pairs = Counter()
    for l in topo.links:
        if l.src in routers and l.dst in routers:
            gs, gd = attr(topo, l.src, "group"), attr(topo, l.dst, "group")
            if gs != gd:
                global_per_router[l.src] += 1
                group_pairs[(gs, gd)] += 1
    assert group_pairs == {(x, y): 1 for x in range(g) for y in range(g) if x != y}
    assert max(global_per_router.values(), default=0) <= h
    for r in routers:
        local = [n for n in neighbours(topo, r) if topo.is_compute(n)]
        assert len(local) == p
    n_links = g * a * p + g * a * (a - 1) // 2 + g * (g - 1) // 2
    assert len(topo.links) == 2 * n_links
    assert_simple_symmetric(topo)


def test_dragonfly_full_size_uses_every_global_port():
    topo = build_named("dragonfly", {"a": "3", "p": "1", "h": "2"})
    for i in range(topo.num_nodes):
        if attr(topo, i, "role") == "router":
            g = attr(topo, i, "group")
            glob = [
                n
                for n in neighbours(topo, i)
                if not topo.is_compute(n) and attr(topo, n, "group") != g
            ]
            assert len(glob) == 2


@pytest.mark.parametrize("n,d", [(16, 3), (10, 4), (20, 2), (2, 1), (9, 8)])
def test_random_regular_degree(n, d):
    topo = build_named("random_regular", {"n": str(n), "d": str(d), "seed": "5"})
    assert topo.num_ranks == n
    assert all(len(topo.out_links[int(c)]) == d for c in topo.compute_nodes)
    assert_simple_symmetric(topo)
    again = build_named("random_regular", {"n": str(n), "d": str(d), "seed": "5"})
    assert again.fingerprint == topo.fingerprint


def test_random_regular_seed_changes_graph():
    prints = {build_named("random_regular", {"seed": str(s)}).fingerprint for s in range(4)}
    assert len(prints) >= 3


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "name,args,fragment",
    [
        ("fat_tree", {"k": "3"}, "even"),
        ("ring", {"n": "1"}, "at least 2"),
        ("ring", {"m": "4"}, "unknown parameter"),
        ("ring", {"n": "x"}, "not an integer"),
        ("ring", {"bw": "0GB/s"}, "positive"),
        ("ndv2", {"chassis": "0"}, "at least 1"),
        ("mi250", {"inter": "mesh"}, "not one of"),
        ("a800_clos", {"nics": "3"}, "divide 8"),
        ("wan", {"connectivity": "1.5"}, "at most 1"),
        ("wan", {"gateways": "9"}, "gateways"),
        ("wan", {"dcs": "1", "gpus": "1"}, "at least 2"),
        ("dragonfly", {"groups": "10"}, "a*h+1"),
        ("random_regular", {"n": "5", "d": "3"}, "even"),
        ("random_regular", {"n": "4", "d": "4"}, "d < n"),
        ("random_regular", {"n": "6", "d": "1"}, "never connected"),
        ("mesh2d", {"w": "1", "h": "1"}, "at least 2"),
        ("hypercube", {"d": "0"}, "at least 1"),
        ("nosuchtopo", {}, "unknown topology"),
    ],
)
def test_bad_parameters_give_one_line_error(name, args, fragment):
    with pytest.raises(CollsynthError) as info:
        build_named(name, args)
    msg = str(info.value)
    assert "\n" not in msg and fragment in msg
