"""Topology importers: NCCL topology XML, ``nvidia-smi topo -m`` and ``rocm-smi --showtopo``.

The sample files under ``tests/data/topo/`` were written for these tests from the documented
formats: a DGX-1 (V100 hybrid cube-mesh, 4 NICs), an H100 NVSwitch node (8 NICs), an 8-GPU PCIe
box (NICs under two-level PCIe switches), the nvidia-smi matrices of a DGX-1 and of an 8-GPU
NVSwitch box, and the rocm-smi tables of a 16-GCD MI250 node.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.synth import synthesize
from collsynth.topology import load_topology
from collsynth.topology.model import NodeKind, Topology
from collsynth.topology.rates import nvlink_gen_of_sm, pcie_bw
from collsynth.topology.zoo import DGX1_NVLINKS, MI250_XGMI
from collsynth.verify import ensure_verified

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "topo"
GB = 1e9

SAMPLES = {
    "nccl-xml:dgx1.xml": 8,
    "nccl-xml:dgx_h100.xml": 8,
    "nccl-xml:pcie8.xml": 8,
    "nvidia-smi:dgx1.smi.txt": 8,
    "nvidia-smi:nvswitch8.smi.txt": 8,
    "rocm-smi:mi250.rocm.txt": 16,
}


def load(sample: str, options: str = "") -> Topology:
    kind, name = sample.split(":")
    return load_topology(f"{kind}:{DATA / name}" + (f",{options}" if options else ""))


def peers(topo: Topology, cls: str) -> dict[str, dict[str, int]]:
    """For every rank: {peer rank name: lanes} over direct links of class ``cls``."""
    out: dict[str, dict[str, int]] = {topo.rank_name(r): {} for r in range(topo.num_ranks)}
    for l in topo.links:
        if l.cls == cls and topo.is_compute(l.src) and topo.is_compute(l.dst):
            out[topo.nodes[l.src].name][topo.nodes[l.dst].name] = l.lanes
    return out


def out_links(topo: Topology, name: str, cls: str | None = None) -> list:
    return [
        topo.links[l]
        for l in topo.out_links[topo.index(name)]
        if cls is None or topo.links[l].cls == cls
    ]


def expected_peers(table: dict[tuple[int, int], int], lanes: bool = True) -> dict:
    want: dict[str, dict[str, int]] = {}
    for (a, b), c in table.items():
        want.setdefault(f"c0.gpu{a}", {})[f"c0.gpu{b}"] = c if lanes else 1
        want.setdefault(f"c0.gpu{b}", {})[f"c0.gpu{a}"] = c if lanes else 1
    return want


# ------------------------------------------------------------------------------ figures
def test_link_figures():
    assert pcie_bw(8.0, 16) == 15.75 * GB  # Gen3 x16, 128b/130b, rounded to 0.25 GB/s
    assert pcie_bw(16.0, 16) == 31.5 * GB
    assert pcie_bw(32.0, 16) == 63 * GB
    assert pcie_bw(2.5, 1) == 0.25 * GB  # 8b/10b
    assert [nvlink_gen_of_sm(sm, "x")[1] / GB for sm in (60, 70, 80, 86, 90, 100)] == [
        20,
        25,
        25,
        25,
        25,
        50,
    ]
    with pytest.raises(CollsynthError, match="predates NVLink"):
        nvlink_gen_of_sm(52, "gpu")


# ------------------------------------------------------------------------------ NCCL XML
def test_nccl_xml_dgx1_hybrid_cube_mesh():
    topo = load("nccl-xml:dgx1.xml")
    assert topo.num_ranks == 8 and topo.name == "dgx1"
    assert peers(topo, "nvlink") == expected_peers(DGX1_NVLINKS)
    for r in range(8):
        name = f"c0.gpu{r}"
        nv = out_links(topo, name, "nvlink")
        assert sum(l.bw for l in nv) == pytest.approx(150 * GB)  # 6 NVLink2 x 25 GB/s
        assert sum(l.lanes for l in nv) == 6
        assert [l.bw for l in out_links(topo, name, "pcie")] == [15.75 * GB]  # Gen3 x16
    assert {g["generation"] for g in topo.meta["nvlink"].values()} == {"nvlink2"}
    assert [n["bw"] for n in topo.meta["nics"]] == [12.5 * GB] * 4  # 100000 Mbit/s
    assert topo.classes()["sys"] == 2  # the two sockets, both ways
    assert load("nccl-xml:dgx1.xml").fingerprint == topo.fingerprint


def test_nccl_xml_h100_nvswitch_node():
    topo = load("nccl-xml:dgx_h100.xml")
    assert topo.num_ranks == 8
    assert peers(topo, "nvlink") == {f"c0.gpu{r}": {} for r in range(8)}
    switches = [n.name for n in topo.nodes if n.attrs.get("role") == "nvswitch"]
    assert switches == ["c0.nvswitch"]
    for r in range(8):
        (link,) = out_links(topo, f"c0.gpu{r}", "nvswitch")
        assert (link.bw, link.lanes) == (18 * 25 * GB, 18)  # 5+4+4+5 NVLink4 links
        assert topo.nodes[link.dst].name == "c0.nvswitch"
    assert [n["bw"] for n in topo.meta["nics"]] == [50 * GB] * 8  # 400 Gb/s
    assert [n["device"] for n in topo.meta["nics"]] == [f"mlx5_{i}" for i in range(8)]
    assert not topo.has_node("c0.pci0000:c0:00.0")  # the bridge holding only NVSwitches


def test_nccl_xml_pcie_box():
    topo = load("nccl-xml:pcie8.xml")
    assert topo.num_ranks == 8 and "nvlink" not in topo.classes()
    for r in range(8):
        assert [l.bw for l in out_links(topo, f"c0.gpu{r}")] == [31.5 * GB]  # Gen4 x16
    hops = topo.hop_distances([topo.index("c0.gpu0")])[0]
    assert hops[topo.index("c0.gpu1")] == 4  # GPU, downstream, upstream, downstream, GPU
    assert hops[topo.index("c0.gpu2")] == 6  # through the CPU
    assert hops[topo.index("c0.gpu4")] == 7  # and across the sockets
    assert [n["bw"] for n in topo.meta["nics"]] == [25 * GB] * 4


@pytest.mark.parametrize("sample", [s for s, n in SAMPLES.items() if n == 8])
def test_four_nodes_on_rails(sample):
    topo = load(sample, "nodes=4,fabric=rail")
    assert topo.num_ranks == 32
    rails = sorted(n.name for n in topo.nodes if n.attrs.get("role") == "rail")
    nics = len(load(sample).meta["nics"])
    assert len(rails) == nics
    for j in range(nics):
        members = {
            topo.nodes[topo.links[l].src].name for l in topo.in_links[topo.index(f"rail{j}")]
        }
        assert members == {f"c{n}.nic{j}" for n in range(4)}
    assert topo.hop_diameter > 0


def test_fat_tree_and_single_switch():
    tree = load("nccl-xml:dgx1.xml", "nodes=4,fabric=fat_tree")
    assert tree.num_ranks == 32 and tree.name == "dgx1x4-fat_tree"
    spines = [n.name for n in tree.nodes if n.attrs.get("role") == "spine"]
    assert spines == [f"spine{k}" for k in range(4)]
    up = [l for l in out_links(tree, "leaf0") if tree.nodes[l.dst].attrs.get("role") == "spine"]
    assert [l.bw for l in up] == [12.5 * GB] * 4  # 4 nodes x 12.5 GB/s over 4 spines
    two = load("nccl-xml:dgx1.xml", "nodes=4,fabric=fat_tree,spines=2")
    assert [l.bw for l in out_links(two, "leaf0") if two.nodes[l.dst].name.startswith("spine")] == [
        25 * GB
    ] * 2
    one = load("nccl-xml:pcie8.xml", "nodes=2,fabric=single_switch")
    assert one.num_ranks == 16 and len(one.in_links[one.index("net0")]) == 8


def test_spec_forms(monkeypatch):
    monkeypatch.chdir(ROOT)
    absolute = load_topology(f"nccl-xml:{DATA / 'dgx1.xml'},nodes=4")
    relative = load_topology("nccl-xml:tests/data/topo/dgx1.xml,nodes=4")
    keyed = load_topology("nccl_xml:file=tests/data/topo/dgx1.xml,nodes=4")
    assert absolute.fingerprint == relative.fingerprint == keyed.fingerprint
    assert absolute.num_ranks == 32 and absolute.meta["importer"] == "nccl-xml"
    assert load_topology("nccl-xml:tests/data/topo/dgx1.xml").num_ranks == 8
    for spec, msg in [
        ("nccl-xml", "needs a file"),
        ("nccl-xml:nodes=2", "needs a file"),
        ("nccl-xml:tests/data/topo/dgx1.xml,file=x.xml", "given twice"),
        ("nccl-xml:tests/data/topo/dgx1.xml,colour=red", "unknown parameter 'colour'"),
        ("nccl-xml:tests/data/topo/dgx1.xml,fabric=torus", "not one of"),
        ("nccl-xml:tests/data/topo/none.xml", "file not found"),
    ]:
        with pytest.raises(CollsynthError, match=msg):
            load_topology(spec)


SKELETON = """<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="AuthenticAMD">
    <pci busid="0000:01:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0001:00:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"/>
      <pci busid="0002:00:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"/>
      <pci busid="0003:00:00.0" class="0x020700" link_speed="16.0 GT/s PCIe" link_width="16"/>
    </pci>
  </cpu>
</system>
"""


def test_skeleton_file_without_gpu_and_nic_details(tmp_path):
    """Cloud topology files list bare PCI devices: GPUs by class 0x03.., NICs by class 0x02.."""
    path = tmp_path / "skeleton.xml"
    path.write_text(SKELETON)
    topo = load_topology(f"nccl-xml:{path},nic=100Gb/s")
    assert topo.num_ranks == 2 and topo.meta["nics"][0]["bw"] == 12.5 * GB
    assert load_topology(f"nccl-xml:{path},nodes=3").num_ranks == 6


def gpu(bus: str, dev: int, links: str = "", sm: str = ' sm="80"') -> str:
    head = f'<pci busid="{bus}" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">'
    return f'{head}<gpu dev="{dev}"{sm} rank="{dev}" gdr="1">{links}</gpu></pci>\n'


def system(*parts: str) -> str:
    return (
        '<system version="1">\n<cpu numaid="0" arch="x86_64">\n'
        + "".join(parts)
        + "</cpu>\n</system>\n"
    )


def nvl(target: str, count: int = 1, tclass: str = ' tclass="0x030200"') -> str:
    return f'<nvlink target="{target}" count="{count}"{tclass}/>'


def test_nvlink_targets_by_bus_id_and_to_the_cpu(tmp_path):
    switch = '<pci busid="0000:c1:00.0" class="0x068000" link_speed="" link_width="0"/>\n'
    body = system(
        gpu("0000:01:00.0", 0, nvl("0000:c1:00.0", 6, "") + nvl("0", 2, ' tclass="0x068001"')),
        gpu("0000:02:00.0", 1, nvl("0000:c1:00.0", 6, "")),
        switch,
    )
    path = tmp_path / "p9.xml"
    path.write_text(body)
    topo = load_topology(f"nccl-xml:{path}")
    (sw,) = out_links(topo, "c0.gpu0", "nvswitch")
    assert sw.bw == 6 * 25 * GB
    cpu = [l for l in out_links(topo, "c0.gpu0", "nvlink") if topo.nodes[l.dst].name == "c0.cpu0"]
    assert cpu[0].bw == 2 * 25 * GB


# ------------------------------------------------------------------------------ nvidia-smi
def test_nvidia_smi_dgx1():
    topo = load("nvidia-smi:dgx1.smi.txt", "gen=nvlink2")
    assert topo.num_ranks == 8 and topo.meta["nvswitch"] is False
    assert peers(topo, "nvlink") == expected_peers(DGX1_NVLINKS)
    for r in range(8):
        assert sum(l.bw for l in out_links(topo, f"c0.gpu{r}", "nvlink")) == 150 * GB
        assert [l.bw for l in out_links(topo, f"c0.gpu{r}", "pcie")] == [15.75 * GB]  # Gen3
    # PIX groups: GPU0, GPU1 (and mlx5_0) share a PCIe switch, GPU0 and GPU2 meet at the host
    up0, up1, up2 = (
        topo.nodes[out_links(topo, f"c0.gpu{r}", "pcie")[0].dst].name for r in (0, 1, 2)
    )
    assert up0 == up1 != up2 and up0.startswith("c0.pcie")
    assert [n["device"] for n in topo.meta["nics"]] == [f"mlx5_{k}" for k in range(4)]


def test_nvidia_smi_nvswitch_box():
    topo = load("nvidia-smi:nvswitch8.smi.txt")  # the header carries terminal escape codes
    assert topo.num_ranks == 8 and topo.meta["nvswitch"] is True
    for r in range(8):
        (link,) = out_links(topo, f"c0.gpu{r}", "nvswitch")
        assert (link.bw, link.lanes) == (300 * GB, 12)  # NV12 x NVLink3
    assert [n["device"] for n in topo.meta["nics"]] == [f"mlx5_{k}" for k in range(8)]
    pairs = load("nvidia-smi:nvswitch8.smi.txt", "nvswitch=no")
    assert all(len(p) == 7 for p in peers(pairs, "nvlink").values())
    h100 = load("nvidia-smi:nvswitch8.smi.txt", "gen=nvlink5")
    assert out_links(h100, "c0.gpu0", "nvswitch")[0].bw == 12 * 50 * GB


# ------------------------------------------------------------------------------ rocm-smi
def test_rocm_smi_mi250():
    topo = load("rocm-smi:mi250.rocm.txt")
    assert topo.num_ranks == 16 and set(topo.classes()) == {"xgmi"}
    assert peers(topo, "xgmi") == expected_peers(MI250_XGMI, lanes=False)
    for r in range(16):
        degree = sum(1 for pair in MI250_XGMI if r in pair)
        assert sum(l.bw for l in out_links(topo, f"c0.gpu{r}")) == degree * 50 * GB
    assert load("rocm-smi:mi250.rocm.txt", "nodes=2").num_ranks == 32


def test_rocm_smi_weights_only_and_pcie(tmp_path):
    lines = (DATA / "mi250.rocm.txt").read_text().splitlines()
    hops = next(i for i, line in enumerate(lines) if "Hops between" in line)
    kinds = next(i for i, line in enumerate(lines) if "Link Type between" in line)
    no_hops = "\n".join(lines[:hops] + lines[kinds:]) + "\n"
    path = tmp_path / "weights.txt"
    path.write_text(no_hops)
    assert peers(load_topology(f"rocm-smi:{path}"), "xgmi") == expected_peers(
        MI250_XGMI, lanes=False
    )
    pcie = tmp_path / "pcie.txt"
    pcie.write_text(
        "=== Link Type between two GPUs ===\n      GPU0   GPU1   GPU2\n"
        "GPU0  0      PCIE   PCIE\nGPU1  PCIE   0      PCIE\nGPU2  PCIE   PCIE   0\n"
    )
    topo = load_topology(f"rocm-smi:{pcie},pcie=16GB/s")
    assert topo.num_ranks == 3 and topo.classes() == {"pcie": 6}


# ------------------------------------------------------------------------------ errors
BAD_XML = {
    "root": ('<topology version="1"><cpu numaid="0"/></topology>\n', "unknown root element"),
    "malformed": (
        '<system version="1">\n<cpu numaid="0">\n<pci busid="0000:01:00.0">\n</cpu>\n</system>\n',
        "not well-formed XML (line 4",
    ),
    "target": (
        system(gpu("0000:01:00.0", 0, nvl("0000:09:00.0")), gpu("0000:02:00.0", 1)),
        "missing NVLink target",
    ),
    "no-links": (
        system(gpu("0000:01:00.0", 0), '<gpu dev="1" sm="80" rank="1"/>\n'),
        "has no links",
    ),
    "dtd": (
        '<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY a "aaaa">]>\n<system>&a;</system>\n',
        "DOCTYPE is not allowed",
    ),
    "count": (
        system(
            gpu("0000:01:00.0", 0, nvl("0000:02:00.0", 2)),
            gpu("0000:02:00.0", 1, nvl("0000:01:00.0", 1)),
        ),
        "1 NVLinks to gpu0",
    ),
    "rank": (system(gpu("0000:01:00.0", 0), gpu("0000:02:00.0", 0)), "rank 0 is used"),
    "sm": (
        system(gpu("0000:01:00.0", 0, nvl("0000:02:00.0"), sm=""), gpu("0000:02:00.0", 1)),
        "no 'sm' attribute",
    ),
    "one-gpu": (system(gpu("0000:01:00.0", 0)), "found 1 GPU"),
    "no-cpu": ('<system version="1">\n</system>\n', "no <cpu> elements"),
    "hosts": (
        '<system version="1">\n<cpu numaid="0" host_hash="0x1"/>\n'
        '<cpu numaid="1" host_hash="0x2"/>\n</system>\n',
        "several hosts",
    ),
    "busid": (system(gpu("pci-1", 0), gpu("0000:02:00.0", 1)), "is not a PCI bus id"),
    "tclass": (
        system(
            gpu("0000:01:00.0", 0, nvl("0000:02:00.0", 1, ' tclass="0x010000"')),
            gpu("0000:02:00.0", 1),
        ),
        "unknown tclass",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_XML))
def test_bad_nccl_xml_one_line(tmp_path, case):
    text, msg = BAD_XML[case]
    path = tmp_path / f"{case}.xml"
    path.write_text(text)
    with pytest.raises(CollsynthError) as e:
        load_topology(f"nccl-xml:{path}")
    assert msg in str(e.value) and "\n" not in str(e.value)
    assert str(path) in str(e.value)


def test_xml_limits_and_clusters_need_nics(tmp_path, monkeypatch):
    path = tmp_path / "two.xml"
    path.write_text(system(gpu("0000:01:00.0", 0), gpu("0000:02:00.0", 1)))
    assert load_topology(f"nccl-xml:{path}").num_ranks == 2
    with pytest.raises(CollsynthError, match="no NICs in the file"):
        load_topology(f"nccl-xml:{path},nodes=2")
    monkeypatch.setenv("COLLSYNTH_MAX_DEPTH", "3")
    with pytest.raises(CollsynthError, match="nested deeper than 3 levels"):
        load_topology(f"nccl-xml:{path}")
    monkeypatch.delenv("COLLSYNTH_MAX_DEPTH")
    monkeypatch.setenv("COLLSYNTH_MAX_FILE_BYTES", "100")
    with pytest.raises(CollsynthError, match="larger than 100 bytes"):
        load_topology(f"nccl-xml:{path}")


def _smi_lines() -> list[str]:
    return (DATA / "dgx1.smi.txt").read_text().splitlines()


def _smi_edit(row: int, col: int, value: str, *more: tuple[int, int, str]) -> str:
    lines = _smi_lines()
    for r, c, v in [(row, col, value), *more]:
        cells = lines[r].split("\t")
        cells[c] = v
        lines[r] = "\t".join(cells)
    return "\n".join(lines) + "\n"


BAD_SMI = {
    "entry": (_smi_edit(2, 3, "NVX"), "line 3: unreadable entry 'NVX' in column GPU2"),
    "asymmetric": (_smi_edit(1, 2, "NV1"), "GPU0-GPU1 is NV1 but GPU1-GPU0 is NV2"),
    "short": ("\n".join(_smi_lines()[:3] + [_smi_lines()[3][:20]]) + "\n", "line 4: row GPU2 has"),
    "missing-row": ("\n".join(_smi_lines()[:5]) + "\n", "GPU4 has no row"),
    "stray": (
        "\n".join(_smi_lines()[:3] + ["garbage here"]) + "\n",
        "line 4: unreadable matrix row",
    ),
    "no-header": ("hello\nworld\n", "no matrix header"),
    "diagonal": (_smi_edit(1, 1, "SYS"), "X marks the diagonal only"),
    "nv-nic": (
        _smi_edit(9, 1, "NV1", (1, 9, "NV1")),
        "line 2: NV1 between GPU0 and mlx5_0: not two GPUs",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SMI))
def test_bad_nvidia_smi_one_line(tmp_path, case):
    text, msg = BAD_SMI[case]
    path = tmp_path / f"{case}.txt"
    path.write_text(text)
    with pytest.raises(CollsynthError) as e:
        load_topology(f"nvidia-smi:{path}")
    assert msg in str(e.value) and "\n" not in str(e.value)


ROCM_HEAD = "=== Link Type between two GPUs ===\n      GPU0   GPU1   GPU2\n"
BAD_ROCM = {
    "type": (
        ROCM_HEAD + "GPU0 0 XGMI QPI\nGPU1 XGMI 0 XGMI\nGPU2 XGMI XGMI 0\n",
        "unknown link type 'QPI'",
    ),
    "isolated": (
        ROCM_HEAD
        + "GPU0 0 XGMI XGMI\nGPU1 XGMI 0 XGMI\nGPU2 XGMI XGMI 0\n"
        + "=== Hops between two GPUs ===\n GPU0 GPU1 GPU2\n"
        + "GPU0 0 1 2\nGPU1 1 0 2\nGPU2 2 2 0\n",
        "GPU2 has no links",
    ),
    "table": (
        "=== Weight between two GPUs ===\n GPU0 GPU1\nGPU0 0 15\nGPU1 15 0\n",
        "no 'Link Type",
    ),
    "row": (ROCM_HEAD + "GPU0 0 XGMI\nGPU1 XGMI 0 XGMI\nGPU2 XGMI XGMI 0\n", "line 3: unreadable"),
    "hops": (
        ROCM_HEAD
        + "GPU0 0 XGMI XGMI\nGPU1 XGMI 0 XGMI\nGPU2 XGMI XGMI 0\n"
        + "=== Hops between two GPUs ===\n GPU0 GPU1 GPU2\n"
        + "GPU0 0 1 x\nGPU1 1 0 1\nGPU2 1 1 0\n",
        "'x' in column GPU2 is not a number",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ROCM))
def test_bad_rocm_smi_one_line(tmp_path, case):
    text, msg = BAD_ROCM[case]
    path = tmp_path / f"{case}.txt"
    path.write_text(text)
    with pytest.raises(CollsynthError) as e:
        load_topology(f"rocm-smi:{path}")
    assert msg in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------ synthesis
@pytest.mark.parametrize("algo", ["ring", "forestcoll"])
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_synthesize_and_verify(sample, algo):
    topo = load(sample)
    assert topo.num_ranks == SAMPLES[sample]
    sched = synthesize(algo, topo, Collective.make("allgather", topo.num_ranks, 1))
    ensure_verified(sched)


def test_synthesize_on_a_cluster():
    topo = load("nccl-xml:dgx_h100.xml", "nodes=4,fabric=rail")
    ensure_verified(synthesize("ring", topo, Collective.make("allgather", 32, 1)))


# ------------------------------------------------------------------------------ CLI
def test_cli_topo_show(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["topo", "show", "-t", "nccl-xml:tests/data/topo/dgx1.xml"]) == 0
    assert "dgx1" in capsys.readouterr().out
    spec = "nvidia-smi:tests/data/topo/nvswitch8.smi.txt,nodes=4"
    assert main(["topo", "show", "-t", spec, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compute_nodes"] == 32
    assert main(["topo", "show", "-t", "nccl-xml:tests/data/topo/nothere.xml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "file not found" in err and "\n" not in err
    assert main(["list", "--json"]) == 0
    sources = json.loads(capsys.readouterr().out)["topology_sources"]
    assert set(sources) == {"nccl-xml", "nvidia-smi", "rocm-smi"}


def test_switches_say_what_they_are():
    for sample in SAMPLES:
        topo = load(sample, "nodes=2")
        for nd in topo.nodes:
            if nd.kind is not NodeKind.COMPUTE:
                assert nd.attrs.get("role"), (sample, nd.name)
