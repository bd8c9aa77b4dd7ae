"""TE-CCL input import: the topology TE-CCL means, without its documented bugs."""

import json

import pytest

from collsynth.errors import CollsynthError
from collsynth.topology import load_topology
from collsynth.topology.teccl_params import teccl_instance, topology_from_teccl


def _input(name, chassis=1, **extra):
    tp = {"name": name, "chassis": chassis, "chunk_size": 0.0625, "option": 1}
    tp.update(extra)
    return {
        "TopologyParams": tp,
        "GurobiParams": {"time_limit": 2},
        "InstanceParams": {"collective": 1, "num_chunks": 2},
    }


def test_ndv2_two_chassis_has_sixteen_gpus_and_two_ib_links():
    topo = topology_from_teccl(_input("NDv2", 2))
    assert topo.num_ranks == 16  # TE-CCL's bug makes GPU 0 a switch (15 GPUs)
    assert topo.num_switches == 0
    ib = [l for l in topo.links if l.cls == "ib"]
    assert len(ib) == 2
    assert all(l.bw == 12.5e9 and l.alpha == pytest.approx(1.3e-6) for l in ib)
    # GPU0 of one chassis sends to GPU1 of the other (teccl.md §1.3: 0->9 and 8->1)
    pairs = {(topo.rank_of_node[l.src], topo.rank_of_node[l.dst]) for l in ib}
    assert pairs == {(0, 9), (8, 1)}


def test_ndv2_four_chassis_uses_one_global_switch():
    topo = topology_from_teccl(_input("NDv2", 4))
    assert topo.num_ranks == 32 and topo.num_switches == 1
    assert sum(1 for l in topo.links if l.cls == "ib") == 8


def test_dgx2_honours_chassis_and_fixed_alphas():
    topo = topology_from_teccl(_input("DGX2", 2, alpha=[1e-6, 1e-6]))
    assert topo.num_ranks == 32 and topo.num_switches == 2
    nvs = [l for l in topo.links if l.cls == "nvswitch"]
    assert len(nvs) == 64 and all(l.bw == 125e9 and l.alpha == pytest.approx(0.35e-6) for l in nvs)
    assert any("ignores the alpha" in n for n in topo.meta["notes"])


def test_amd_two_chassis_intended_design():
    topo = topology_from_teccl(_input("AMD", 2, alpha=[1e-7, 2e-7]))
    assert topo.num_ranks == 32
    assert topo.num_switches == 2 * 8 + 1
    # every GCD keeps 350 GB/s of xGMI and gets one 25 GB/s link to its pair switch
    for node in topo.compute_nodes:
        xgmi = sum(topo.links[l].bw for l in topo.out_links[node] if topo.links[l].cls == "xgmi")
        other = [topo.links[l] for l in topo.out_links[node] if topo.links[l].cls != "xgmi"]
        assert xgmi == pytest.approx(350e9)
        assert len(other) == 1 and other[0].bw == pytest.approx(25e9)
        assert other[0].alpha == pytest.approx(2e-7)
    assert all(l.alpha == pytest.approx(1e-7) for l in topo.links if l.cls == "xgmi")


def test_dgx1_and_mesh():
    dgx1 = topology_from_teccl(_input("DGX1", 1, alpha=[7e-7, 0]))
    assert dgx1.num_ranks == 8 and all(l.alpha == pytest.approx(7e-7) for l in dgx1.links)
    mesh = topology_from_teccl(_input("Mesh", 1, side_length=3))
    assert mesh.num_ranks == 9
    assert len(mesh.links) == 24  # a true 3x3 mesh: 12 edges, both ways (TE-CCL's has 28)
    assert all(l.bw == 100e9 for l in mesh.links)


def test_file_detection_and_instance(tmp_path):
    path = tmp_path / "in.json"
    path.write_text(json.dumps(_input("NDv2", 2)))
    topo = load_topology(str(path))
    assert topo.num_ranks == 16
    inst = teccl_instance(_input("NDv2", 2), topo)
    assert inst["collective"] == "allgather" and inst["chunks_per_rank"] == 2
    assert inst["size_bytes"] == pytest.approx(0.0625e9 * 16 * 2)


@pytest.mark.parametrize(
    "bad",
    [
        {"TopologyParams": {"name": "Torus"}},
        {"TopologyParams": {"name": "NDv2", "chassis": 0}},
        {"TopologyParams": {"name": "DGX1", "alpha": ["x", 0]}},
        {"TopologyParams": {"name": "DGX1", "bogus": 1}},
        {"TopologyParams": "DGX1"},
    ],
)
def test_bad_inputs_are_one_line_errors(bad):
    with pytest.raises(CollsynthError) as e:
        topology_from_teccl(bad)
    assert "\n" not in str(e.value)
