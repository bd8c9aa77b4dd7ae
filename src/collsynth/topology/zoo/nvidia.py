"""NVIDIA fabrics of the zoo: DGX-1, Azure NDv2, DGX-2, DGX A100 and DGX H100.

Each constructor documents its source (the paper or public tool whose wiring it follows; see
``docs/references.md``) and every default. Bandwidths are bytes/s per direction, alphas seconds.
"""

from __future__ import annotations

from ..model import Topology, TopologyBuilder
from ..registry import Param, zoo
from .common import GB, LANES, US, wire_pairs

# --------------------------------------------------------------------------------------------
# NVIDIA DGX-1 (V100) hybrid cube-mesh
# --------------------------------------------------------------------------------------------

#: NVLink counts per unordered GPU pair in the canonical DGX-1 numbering, identical in SCCL's
#: ``dgx1()`` (Cai et al., PPoPP 2021), TACCL's NDv2 profile (Shah et al., NSDI 2023) and TE-CCL's
#: ``DGX1`` (Liu et al., SIGCOMM 2024): 8 double links and 8 single links, 6 NVLinks per GPU.
DGX1_NVLINKS: dict[tuple[int, int], int] = {
    (0, 1): 2,
    (0, 4): 2,
    (1, 3): 2,
    (2, 3): 2,
    (2, 6): 2,
    (4, 5): 2,
    (5, 7): 2,
    (6, 7): 2,
    (0, 2): 1,
    (0, 3): 1,
    (1, 2): 1,
    (1, 5): 1,
    (3, 7): 1,
    (4, 6): 1,
    (4, 7): 1,
    (5, 6): 1,
}


@zoo(
    "dgx1",
    nvlink=Param("bw", 25 * GB, "bandwidth of one NVLink, per direction"),
    alpha=Param("time", 0.7 * US, "NVLink latency"),
    lanes=Param(
        "choice",
        "merge",
        "merge: one link per GPU pair carrying all its NVLinks; "
        "split: one parallel link per NVLink",
        choices=("merge", "split"),
    ),
)
def dgx1(nvlink: float, alpha: float, lanes: str) -> Topology:
    """NVIDIA DGX-1 (8x V100) hybrid cube-mesh, the TE-CCL/SCCL/TACCL numbering.

    Source: the DGX-1 wiring of SCCL (Cai et al., PPoPP 2021), TACCL (Shah et al., NSDI 2023) and
    TE-CCL (Liu et al., SIGCOMM 2024), one numbering in all three. Each GPU has six NVLinks of
    25 GB/s: two double links (50 GB/s) and two single links (25 GB/s). Alpha 0.7 us (TE-CCL's
    NDv2 NVLink value).
    """
    b = TopologyBuilder(
        "dgx1",
        meta={
            "source": "SCCL/TACCL/TE-CCL DGX-1 numbering (SCCL, Cai et "
            "al., PPoPP 2021; TACCL, Shah et al., NSDI 2023; "
            "TE-CCL, Liu et al., SIGCOMM 2024)"
        },
    )
    gpus = [b.compute(f"gpu{i}", chassis=0, local=i) for i in range(8)]
    wire_pairs(b, gpus, DGX1_NVLINKS, nvlink, alpha, "nvlink", lanes == "split")
    return b.build()


# --------------------------------------------------------------------------------------------
# Azure NDv2 (DGX-1-like V100 chassis joined by InfiniBand)
# --------------------------------------------------------------------------------------------


@zoo(
    "ndv2",
    chassis=Param("int", 2, "number of NDv2 chassis (8 V100 each)", min=1, max=512),
    nvlink=Param("bw", 25 * GB, "bandwidth of one NVLink, per direction"),
    nvlink_alpha=Param("time", 0.7 * US, "NVLink latency"),
    ib=Param("bw", 12.5 * GB, "bandwidth of each inter-chassis IB link, per direction"),
    ib_alpha=Param("time", 1.3 * US, "latency of each inter-chassis IB link"),
    lanes=LANES,
)
def ndv2(
    chassis: int, nvlink: float, nvlink_alpha: float, ib: float, ib_alpha: float, lanes: str
) -> Topology:
    """Azure NDv2: C chassis of 8 V100 on the DGX-1 cube-mesh, joined by one IB NIC each (TE-CCL).

    Source: TE-CCL's NDv2 topology (Liu et al., SIGCOMM 2024; ``ndv2.py``, which follows TACCL's
    NDv2 sketch ``internode_conn {"0": [1]}``, Shah et al., NSDI 2023) and the SCCL/TACCL/TE-CCL
    DGX-1 numbering for the NVLink wiring. Defaults:
    chassis=2, NVLink 25 GB/s per physical link (double links 50 GB/s), NVLink alpha 0.7 us,
    IB 12.5 GB/s with alpha 1.3 us (TE-CCL's hard-coded values).

    * C=1: one DGX-1 (no switch, no IB; TE-CCL's pointless GPU0 -> switch -> GPU1 loop is dropped).
    * C=2: two directed IB links, ``c0.gpu0 -> c1.gpu1`` and ``c1.gpu0 -> c0.gpu1``, no switch.
    * C>=3: one global IB switch ``ib0``; per chassis only ``gpu0 -> ib0`` and ``ib0 -> gpu1``.

    Unlike TE-CCL, GPU 0 is never treated as a switch: all 8C GPUs are compute nodes.
    Nodes: ``c{c}.gpu{i}`` (attrs ``chassis``, ``local``); switch ``ib0`` (role ``ib``).
    """
    b = TopologyBuilder(
        f"ndv2x{chassis}",
        meta={
            "source": "TE-CCL's NDv2 (Liu et al., SIGCOMM 2024) after TACCL's "
            "NDv2 sketch (Shah et al., NSDI 2023); SCCL/TACCL/TE-CCL "
            "DGX-1 NVLink numbering"
        },
    )
    gpus: list[list[int]] = []
    for c in range(chassis):
        g = [b.compute(f"c{c}.gpu{i}", chassis=c, local=i) for i in range(8)]
        wire_pairs(b, g, DGX1_NVLINKS, nvlink, nvlink_alpha, "nvlink", lanes == "split")
        gpus.append(g)
    if chassis == 2:
        b.link(gpus[0][0], gpus[1][1], ib, ib_alpha, "ib")
        b.link(gpus[1][0], gpus[0][1], ib, ib_alpha, "ib")
    elif chassis >= 3:
        sw = b.switch("ib0", role="ib")
        for c in range(chassis):
            b.link(gpus[c][0], sw, ib, ib_alpha, "ib")
            b.link(sw, gpus[c][1], ib, ib_alpha, "ib")
    return b.build()


# --------------------------------------------------------------------------------------------
# NVIDIA DGX-2 (16 V100 on NVSwitch)
# --------------------------------------------------------------------------------------------


def dgx2_ib_target(c: int, gpu: int, chassis: int) -> tuple[int, int]:
    """(chassis, local GPU) that odd local GPU ``gpu`` of chassis ``c`` sends its IB link to."""
    m = gpu // 2
    return (c + 1 + m % (chassis - 1)) % chassis, 2 * m


@zoo(
    "dgx2",
    chassis=Param("int", 2, "number of DGX-2 chassis (16 GPUs each)", min=1, max=512),
    nvswitch=Param("bw", 125 * GB, "bandwidth of each GPU <-> NVSwitch link, per direction"),
    nvswitch_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NVSwitch link"),
    ib=Param("bw", 12.5 * GB, "bandwidth of each inter-chassis IB link"),
    ib_alpha=Param("time", 2.6 * US, "latency of each inter-chassis IB link"),
    switch_copy=Param(
        "bool", False, "the NVSwitch copies one incoming stream to several GPUs (TE-CCL's model)"
    ),
)
def dgx2(
    chassis: int,
    nvswitch: float,
    nvswitch_alpha: float,
    ib: float,
    ib_alpha: float,
    switch_copy: bool = False,
) -> Topology:
    """NVIDIA DGX-2: C chassis of 16 GPUs on an NVSwitch, odd GPUs sending IB to even GPUs (TE-CCL).

    Source: TE-CCL's DGX-2 topology (Liu et al., SIGCOMM 2024; ``dgx2.py``; the inter-chassis map
    is TACCL's sketch, Shah et al., NSDI 2023). Defaults: chassis=2, GPU <-> NVSwitch 125 GB/s
    each way with alpha 0.35 us (class ``nvswitch``), IB 12.5 GB/s with alpha 2.6 us (class
    ``ib``).

    Inter-chassis links are directed GPU -> GPU. For C=2 (TE-CCL): odd local GPU 2m+1 of
    chassis i sends to even local GPU 2m of the other chassis. TE-CCL hard-codes C=2; our
    generalisation for C>2: odd GPU 2m+1 of chassis i -> even GPU 2m of chassis
    ``(i + 1 + (m mod (C-1))) mod C``. Every GPU keeps exactly one IB link (odd GPUs send, even
    GPUs receive, i.e. one NIC each), every chassis has 8 outgoing and 8 incoming IB links, and
    these are spread as evenly as possible over the C-1 other chassis (exactly evenly when C-1
    divides 8; for C>9 some chassis pairs have no direct link). C=2 reduces to TE-CCL's wiring;
    C=1 has no IB at all. Nodes: ``c{c}.gpu{j}``, switch ``c{c}.nvswitch`` (role ``nvswitch``).
    ``switch_copy=1`` gives the NVSwitch the ``multicast`` capability: TE-CCL's switch model
    (its published DGX-2 figures copy chunks in the switch); the V100-era NVSwitch itself has
    no multicast, so it is off by default.
    """
    b = TopologyBuilder(
        f"dgx2x{chassis}",
        meta={
            "source": "TE-CCL's DGX-2 (Liu et al., SIGCOMM 2024), inter-chassis "
            "map after TACCL's sketch (Shah et al., NSDI 2023)"
        },
    )
    gpus: list[list[int]] = []
    for c in range(chassis):
        g = [b.compute(f"c{c}.gpu{j}", chassis=c, local=j) for j in range(16)]
        sw = b.switch(f"c{c}.nvswitch", role="nvswitch", chassis=c, multicast=bool(switch_copy))
        for x in g:
            b.bilink(x, sw, nvswitch, nvswitch_alpha, "nvswitch")
        gpus.append(g)
    if chassis >= 2:
        for c in range(chassis):
            for odd in range(1, 16, 2):
                t, even = dgx2_ib_target(c, odd, chassis)
                b.link(gpus[c][odd], gpus[t][even], ib, ib_alpha, "ib")
    return b.build()


# --------------------------------------------------------------------------------------------
# NVIDIA DGX A100 (ForestColl model)
# --------------------------------------------------------------------------------------------


@zoo(
    "dgx_a100",
    nodes=Param("int", 2, "number of DGX A100 nodes (8 GPUs each)", min=1, max=1024),
    nvswitch=Param("bw", 300 * GB, "bandwidth of each GPU <-> NVSwitch link, per direction"),
    nvswitch_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NVSwitch link (assumption)"),
    pcie=Param("bw", 25 * GB, "bandwidth of each GPU <-> NIC link, per direction"),
    pcie_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NIC link (assumption)"),
    ib=Param("bw", 25 * GB, "bandwidth of each NIC <-> IB switch link, per direction"),
    ib_alpha=Param("time", 0.65 * US, "latency of each NIC <-> IB switch link (assumption)"),
)
def dgx_a100(
    nodes: int,
    nvswitch: float,
    nvswitch_alpha: float,
    pcie: float,
    pcie_alpha: float,
    ib: float,
    ib_alpha: float,
) -> Topology:
    """NVIDIA DGX A100: N nodes of 8 GPUs on an NVSwitch, 8 NICs on two IB planes (ForestColl).

    Source: ForestColl's DGX A100 model (Zhao et al., arXiv 2402.06787; ``a100_topology``). Per
    node 8 GPUs <-> one NVSwitch node ``c{n}.nvswitch`` at 300 GB/s each way (class
    ``nvswitch``).
    When N>1: GPU b <-> NIC ``c{n}.nic{b}`` (role ``nic``) at 25 GB/s (class ``pcie``) and
    NIC b <-> global IB switch ``ib{b mod 2}`` (role ``ib``) at 25 GB/s (class ``ib``): two IB
    planes, even NICs and odd NICs. N=1 has no NICs.

    Defaults: nodes=2, bandwidths as above. ForestColl has no latencies; ours are assumptions:
    0.35 us per GPU <-> NVSwitch hop (TE-CCL's DGX-2 NVSwitch value, so GPU -> GPU costs 0.7 us),
    0.35 us per GPU <-> NIC hop and 0.65 us per NIC <-> IB switch hop (GPU -> GPU across nodes
    2.0 us).
    """
    b = TopologyBuilder(
        f"dgx_a100x{nodes}",
        meta={"source": "ForestColl (Zhao et al., arXiv 2402.06787) DGX A100 model"},
    )
    gpus: list[list[int]] = []
    for n in range(nodes):
        g = [b.compute(f"c{n}.gpu{i}", chassis=n, local=i) for i in range(8)]
        sw = b.switch(f"c{n}.nvswitch", role="nvswitch", chassis=n)
        for x in g:
            b.bilink(x, sw, nvswitch, nvswitch_alpha, "nvswitch")
        gpus.append(g)
    if nodes > 1:
        planes = [b.switch(f"ib{k}", role="ib", plane=k) for k in range(2)]
        for n in range(nodes):
            for i in range(8):
                nic = b.switch(f"c{n}.nic{i}", role="nic", chassis=n, local=i, plane=i % 2)
                b.bilink(gpus[n][i], nic, pcie, pcie_alpha, "pcie")
                b.bilink(nic, planes[i % 2], ib, ib_alpha, "ib")
    return b.build()


# --------------------------------------------------------------------------------------------
# NVIDIA DGX H100 (NVLink SHARP)
# --------------------------------------------------------------------------------------------


@zoo(
    "dgx_h100",
    nodes=Param("int", 1, "number of DGX H100 nodes (8 GPUs each)", min=1, max=1024),
    nvlink=Param("bw", 450 * GB, "bandwidth of each GPU <-> NVSwitch link, per direction"),
    nvlink_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NVSwitch link (assumption)"),
    nvls=Param("bool", True, "the NVSwitch multicasts and reduces (NVLink SHARP)"),
    pcie=Param("bw", 64 * GB, "bandwidth of each GPU <-> NIC link, per direction"),
    pcie_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NIC link (assumption)"),
    ib=Param("bw", 50 * GB, "bandwidth of each NIC <-> rail switch link (400 Gb/s)"),
    ib_alpha=Param("time", 0.65 * US, "latency of each NIC <-> rail switch link (assumption)"),
)
def dgx_h100(
    nodes: int,
    nvlink: float,
    nvlink_alpha: float,
    nvls: bool,
    pcie: float,
    pcie_alpha: float,
    ib: float,
    ib_alpha: float,
) -> Topology:
    """NVIDIA DGX H100: N nodes of 8 GPUs on NVSwitch with NVLink SHARP, 8 rails of 400 Gb/s IB.

    Per node the four third-generation NVSwitch chips are one switch node ``c{n}.nvswitch``
    (role ``nvswitch``): 18 NVLink 4 links per GPU, 450 GB/s each way (NVIDIA's DGX H100
    figures), alpha 0.35 us per hop (an assumption, as for the DGX A100). With ``nvls`` the
    switch has the ``multicast`` and ``reduce`` capabilities (NVLink SHARP: the switch
    copies a store to many GPUs and reduces loads from many). With N>1, GPU b <-> NIC
    ``c{n}.nic{b}`` (PCIe Gen5 x16, 64 GB/s) <-> rail switch ``rail{b}`` (400 Gb/s, 50 GB/s):
    a rail-optimised fabric, one rail per local GPU index; the rail switches do no in-network
    reduction (no InfiniBand SHARP modelled).
    """
    b = TopologyBuilder(
        f"dgx_h100x{nodes}",
        meta={"source": "NVIDIA DGX H100 figures (NVLink 4, NVLink SHARP, 8x 400 Gb/s rails)"},
    )
    gpus: list[list[int]] = []
    for n in range(nodes):
        g = [b.compute(f"c{n}.gpu{i}", chassis=n, local=i) for i in range(8)]
        sw = b.switch(
            f"c{n}.nvswitch", role="nvswitch", chassis=n, multicast=bool(nvls), reduce=bool(nvls)
        )
        for x in g:
            b.bilink(x, sw, nvlink, nvlink_alpha, "nvlink")
        gpus.append(g)
    if nodes > 1:
        rails = [b.switch(f"rail{i}", role="ib", rail=i) for i in range(8)]
        for n in range(nodes):
            for i in range(8):
                nic = b.switch(f"c{n}.nic{i}", role="nic", chassis=n, local=i)
                b.bilink(gpus[n][i], nic, pcie, pcie_alpha, "pcie")
                b.bilink(nic, rails[i], ib, ib_alpha, "ib")
    return b.build()
