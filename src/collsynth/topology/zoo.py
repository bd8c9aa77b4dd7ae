"""The topology zoo: named, parameterised constructors for real and generic fabrics.

Each constructor documents its source (the paper or public tool whose wiring it follows; see
``docs/references.md``) and every default. Bandwidths are bytes/s per direction, alphas seconds.
Spec strings on the command line look like ``mi250:chassis=2,inter=forestcoll``.
"""

from __future__ import annotations

import itertools
import math
from typing import NoReturn

import numpy as np

from ..errors import CollsynthError
from .model import Topology, TopologyBuilder
from .registry import Param, zoo

GB = 1e9
US = 1e-6

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


def _nvlink_pairs(
    b: TopologyBuilder,
    gpus: list[int],
    counts: dict[tuple[int, int], int],
    per_link_bw: float,
    alpha: float,
    cls: str,
    split: bool,
) -> None:
    """Wire ``counts[(i, j)]`` physical links between local GPUs i and j, both directions.

    With ``split`` every physical link is its own parallel link; otherwise they are bundled into
    one link of ``count * per_link_bw`` with ``lanes=count``.
    """
    for (i, j), count in counts.items():
        if split:
            for _ in range(count):
                b.bilink(gpus[i], gpus[j], per_link_bw, alpha, cls, 1)
        else:
            b.bilink(gpus[i], gpus[j], count * per_link_bw, alpha, cls, count)


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
    _nvlink_pairs(b, gpus, DGX1_NVLINKS, nvlink, alpha, "nvlink", lanes == "split")
    return b.build()


_LANES = Param(
    "choice",
    "merge",
    "merge: one link per GPU pair carrying all its physical links "
    "(lanes=count); split: one parallel link per physical link",
    choices=("merge", "split"),
)


def _fail(message: str) -> NoReturn:
    raise CollsynthError(message)


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
    lanes=_LANES,
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
        _nvlink_pairs(b, g, DGX1_NVLINKS, nvlink, nvlink_alpha, "nvlink", lanes == "split")
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
# AMD MI250 (16 GCDs per chassis on xGMI)
# --------------------------------------------------------------------------------------------

#: xGMI link counts per unordered GCD pair (ForestColl's ``MI250_ADJ_MAT``, Zhao et al., arXiv
#: 2402.06787, identical to TE-CCL's ``AMD`` adjacency): 28 pairs, 56 links, 7 links per GCD.
MI250_XGMI: dict[tuple[int, int], int] = {
    (0, 1): 4,
    (2, 3): 4,
    (4, 5): 4,
    (6, 7): 4,
    (8, 9): 4,
    (10, 11): 4,
    (12, 13): 4,
    (14, 15): 4,
    (0, 4): 2,
    (3, 7): 2,
    (8, 12): 2,
    (11, 15): 2,
    (0, 8): 1,
    (1, 5): 1,
    (1, 9): 1,
    (1, 10): 1,
    (2, 6): 1,
    (2, 9): 1,
    (2, 10): 1,
    (3, 11): 1,
    (4, 6): 1,
    (5, 6): 1,
    (5, 7): 1,
    (9, 13): 1,
    (10, 14): 1,
    (12, 14): 1,
    (13, 14): 1,
    (13, 15): 1,
}


#: ``topo show``'s source line of each MI250 inter-chassis model.
_MI250_SOURCE = {
    "forestcoll": "ForestColl (Zhao et al., arXiv 2402.06787) MI250 wiring",
    "teccl": "ForestColl (Zhao et al., arXiv 2402.06787) MI250 xGMI wiring; TE-CCL's inter-chassis "
    "model (Liu et al., SIGCOMM 2024)",
}


@zoo(
    "mi250",
    chassis=Param("int", 1, "number of MI250 chassis (16 GCDs each)", min=1, max=512),
    inter=Param(
        "choice",
        "forestcoll",
        "inter-chassis model: forestcoll (every GCD <-> one IB "
        "switch) or teccl (one switch per GCD pair, uplinked to one global switch)",
        choices=("forestcoll", "teccl"),
    ),
    xgmi=Param("bw", 50 * GB, "bandwidth of one xGMI link, per direction"),
    xgmi_alpha=Param("time", 0.7 * US, "xGMI latency (assumption)"),
    ib=Param(
        "bw",
        None,
        "inter-chassis bandwidth per link and direction; default 16 GB/s "
        "(forestcoll) or 25 GB/s (teccl)",
    ),
    ib_alpha=Param("time", 1.3 * US, "latency of each link to the global IB switch (assumption)"),
    switch_alpha=Param(
        "time", 0.35 * US, "teccl only: latency of each GCD <-> pair-switch link (assumption)"
    ),
    lanes=_LANES,
)
def mi250(
    chassis: int,
    inter: str,
    xgmi: float,
    xgmi_alpha: float,
    ib: float | None,
    ib_alpha: float,
    switch_alpha: float,
    lanes: str,
) -> Topology:
    """AMD MI250: C chassis of 16 GCDs on xGMI (ForestColl/TE-CCL wiring), IB between chassis.

    Source: the MI250 wiring of ForestColl (Zhao et al., arXiv 2402.06787; ``MI250_ADJ_MAT`` and
    ``mi250_topology``) and of TE-CCL's ``amd.py`` (Liu et al., SIGCOMM 2024), the same xGMI
    adjacency in both. xGMI: 4 links between the two GCDs of a package, 2 links on (0,4) (3,7)
    (8,12) (11,15), 1 link on 16 more pairs, 50 GB/s per link per direction, so every GCD has
    7 links = 350 GB/s (class ``xgmi``, ``lanes`` = link
    count unless ``lanes=split``). Defaults: chassis=1, inter=forestcoll, xGMI 50 GB/s per link,
    xGMI alpha 0.7 us (assumption: neither tool sets one; TE-CCL's NVLink value), IB alpha 1.3 us
    (assumption: TE-CCL's NDv2 IB value), teccl GCD <-> pair-switch alpha 0.35 us (assumption).

    Inter-chassis links exist only when C>1:

    * ``forestcoll`` (ForestColl ``mi250_topology``): every GCD <-> one global switch ``ib0``
      (role ``ib``) at 16 GB/s each way (default of ``ib``), class ``ib``, alpha ``ib_alpha``.
    * ``teccl`` (TE-CCL ``amd.py``, the intended design without its off-by-one bugs): per chassis
      one switch per GCD pair (2p, 2p+1), named ``c{c}.nic{p}`` (role ``nic``: it plays the part
      of RCCL's one NIC per GCD pair), GCD <-> pair switch at 25 GB/s each way (class ``pcie``,
      alpha ``switch_alpha``), pair switch <-> ``ib0`` at 25 GB/s each way (class ``ib``, alpha
      ``ib_alpha``); 200 GB/s off-chassis per chassis.

    Nodes: ``c{c}.gpu{j}`` for GCD j (attrs ``chassis``, ``local``, ``package`` = j // 2).
    """
    split = lanes == "split"
    if ib is None:
        ib = 16 * GB if inter == "forestcoll" else 25 * GB
    b = TopologyBuilder(
        f"mi250x{chassis}" + (f"-{inter}" if chassis > 1 else ""),
        meta={"source": _MI250_SOURCE[inter], "inter": inter},
    )
    gcds: list[list[int]] = []
    for c in range(chassis):
        g = [b.compute(f"c{c}.gpu{j}", chassis=c, local=j, package=j // 2) for j in range(16)]
        _nvlink_pairs(b, g, MI250_XGMI, xgmi, xgmi_alpha, "xgmi", split)
        gcds.append(g)
    if chassis > 1:
        top = b.switch("ib0", role="ib")
        for c in range(chassis):
            if inter == "forestcoll":
                for x in gcds[c]:
                    b.bilink(x, top, ib, ib_alpha, "ib")
            else:
                for p in range(8):
                    nic = b.switch(f"c{c}.nic{p}", role="nic", chassis=c, local=p)
                    b.bilink(gcds[c][2 * p], nic, ib, switch_alpha, "pcie")
                    b.bilink(gcds[c][2 * p + 1], nic, ib, switch_alpha, "pcie")
                    b.bilink(nic, top, ib, ib_alpha, "ib")
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


# --------------------------------------------------------------------------------------------
# SyCCL fabrics: A800 2-layer Clos testbed and H800 multi-rail fabric
# --------------------------------------------------------------------------------------------


def _rail_fabric(
    b: TopologyBuilder,
    servers: int,
    nics: int,
    nvlink: float,
    nvlink_alpha: float,
    nic: float,
    pcie_alpha: float,
    net_alpha: float,
    spines: int,
) -> Topology:
    """Wire 8 GPUs per server to an NVSwitch and, for >1 server, NICs, rail leaves and spines."""
    per = 8 // nics
    gpus: list[list[int]] = []
    for s in range(servers):
        g = [b.compute(f"c{s}.gpu{i}", chassis=s, local=i, rail=i // per) for i in range(8)]
        sw = b.switch(f"c{s}.nvswitch", role="nvswitch", chassis=s)
        for x in g:
            b.bilink(x, sw, nvlink, nvlink_alpha, "nvswitch")
        gpus.append(g)
    if servers > 1:
        leaves = [b.switch(f"leaf{r}", role="leaf", rail=r) for r in range(nics)]
        for s in range(servers):
            for j in range(nics):
                n = b.switch(f"c{s}.nic{j}", role="nic", chassis=s, local=j, rail=j)
                for i in range(j * per, (j + 1) * per):
                    b.bilink(gpus[s][i], n, nic, pcie_alpha, "pcie")
                b.bilink(n, leaves[j], nic, net_alpha, "eth")
        if nics > 1:
            up = servers * nic / spines
            tops = [b.switch(f"spine{k}", role="spine") for k in range(spines)]
            for leaf in leaves:
                for top in tops:
                    b.bilink(leaf, top, up, net_alpha, "eth")
    return b.build()


@zoo(
    "a800_clos",
    servers=Param("int", 4, "number of servers (8 A800 each)", min=1, max=2048),
    nics=Param(
        "int", 4, "NICs per server (NIC j serves GPUs j*8/nics ...); must divide 8", min=1, max=8
    ),
    spines=Param("int", 4, "number of spine switches", min=1, max=256),
    nvlink=Param("bw", 180 * GB, "bandwidth of each GPU <-> NVSwitch link, per direction"),
    nvlink_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NVSwitch link (assumption)"),
    nic=Param("bw", 25 * GB, "bandwidth of each NIC (200 Gb/s), per direction"),
    pcie_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NIC link (assumption)"),
    net_alpha=Param("time", 0.65 * US, "latency of each NIC/leaf/spine link (assumption)"),
)
def a800_clos(
    servers: int,
    nics: int,
    spines: int,
    nvlink: float,
    nvlink_alpha: float,
    nic: float,
    pcie_alpha: float,
    net_alpha: float,
) -> Topology:
    """SyCCL's A800 testbed: servers of 8 A800 on NVSwitch, 4 x 200 Gb/s NICs, 2-layer Clos.

    Source: SyCCL (Cao et al., SIGCOMM 2025), its evaluation testbed: 4 servers of 8 A800
    (NVLink 180 GB/s), 4 x 200 Gb/s RDMA NICs per server, a 2-layer Clos.
    Defaults: servers=4, nics=4 (NIC j serves GPUs 2j and 2j+1), spines=4, NVLink 180 GB/s per
    GPU per direction (to the server's NVSwitch node, class ``nvswitch``), NIC 25 GB/s.
    The sources do not give the Clos wiring; we model the 2-layer Clos as rail leaves + spines,
    exactly like ``h800_rails``.

    Fabric: one leaf switch ``leaf{r}`` (role ``leaf``) per rail r (rail r = NIC r of every
    server), every leaf linked both ways to every spine ``spine{k}`` (role ``spine``) with a
    non-blocking aggregate uplink: each leaf <-> spine link carries servers * nic / spines per
    direction. NIC <-> leaf and leaf <-> spine links have class ``eth`` (RDMA over Converged
    Ethernet, as in Alibaba's HPN fabrics); GPU <-> NIC links have class ``pcie`` and the NIC's
    bandwidth. A single server has no NICs or network; with a single rail there are no spines.
    Nodes: ``c{s}.gpu{i}`` (attrs ``chassis`` = server, ``local``, ``rail``),
    ``c{s}.nvswitch``, ``c{s}.nic{j}`` (role ``nic``, attr ``rail``), ``leaf{r}``, ``spine{k}``.
    Latency assumptions (the sources give none): 0.35 us per GPU <-> NVSwitch hop (TE-CCL's
    DGX-2 NVSwitch value), 0.35 us per GPU <-> NIC hop, 0.65 us per network hop.
    """
    if 8 % nics:
        _fail(f"a800_clos parameter nics {nics} must divide 8 (1, 2, 4 or 8)")
    b = TopologyBuilder(
        f"a800_clos_s{servers}", meta={"source": "SyCCL (Cao et al., SIGCOMM 2025) A800 testbed"}
    )
    return _rail_fabric(b, servers, nics, nvlink, nvlink_alpha, nic, pcie_alpha, net_alpha, spines)


@zoo(
    "h800_rails",
    servers=Param(
        "int", 4, "number of servers (8 H800 each; the paper simulates 64)", min=1, max=2048
    ),
    spines=Param("int", 8, "number of spine switches", min=1, max=256),
    nvlink=Param("bw", 200 * GB, "bandwidth of each GPU <-> NVSwitch link, per direction"),
    nvlink_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NVSwitch link (assumption)"),
    nic=Param("bw", 50 * GB, "bandwidth of each NIC (400 Gb/s), per direction"),
    pcie_alpha=Param("time", 0.35 * US, "latency of each GPU <-> NIC link (assumption)"),
    net_alpha=Param("time", 0.65 * US, "latency of each NIC/leaf/spine link (assumption)"),
)
def h800_rails(
    servers: int,
    spines: int,
    nvlink: float,
    nvlink_alpha: float,
    nic: float,
    pcie_alpha: float,
    net_alpha: float,
) -> Topology:
    """SyCCL's simulated H800 fabric: servers of 8 H800 on NVSwitch, 8 x 400 Gb/s NICs, multi-rail.

    Source: SyCCL (Cao et al., SIGCOMM 2025), its simulated fabric: 64 servers of 8 H800
    (NVLink), 8 x 400 Gb/s RDMA NICs per server, multi-rail (HPN-style). NIC i serves GPU i, so
    GPU i of every server sits on rail i. Defaults: servers=4 (the paper's simulated fabric has
    64), spines=8, NVLink 200 GB/s per GPU per direction (assumption: H800 NVLink is 400 GB/s
    bidirectional; the source gives no number), NIC 50 GB/s.

    Fabric: one leaf switch ``leaf{r}`` (role ``leaf``) per rail r (rail r = NIC r of every
    server), every leaf linked both ways to every spine ``spine{k}`` (role ``spine``) with a
    non-blocking aggregate uplink: each leaf <-> spine link carries servers * nic / spines per
    direction. NIC <-> leaf and leaf <-> spine links have class ``eth`` (RDMA over Converged
    Ethernet, as in Alibaba's HPN fabrics); GPU <-> NIC links have class ``pcie`` and the NIC's
    bandwidth. A single server has no NICs or network; with a single rail there are no spines.
    Nodes: ``c{s}.gpu{i}`` (attrs ``chassis`` = server, ``local``, ``rail``),
    ``c{s}.nvswitch``, ``c{s}.nic{j}`` (role ``nic``, attr ``rail``), ``leaf{r}``, ``spine{k}``.
    Latency assumptions (the sources give none): 0.35 us per GPU <-> NVSwitch hop (TE-CCL's
    DGX-2 NVSwitch value), 0.35 us per GPU <-> NIC hop, 0.65 us per network hop.
    """
    b = TopologyBuilder(
        f"h800_rails_s{servers}",
        meta={"source": "SyCCL (Cao et al., SIGCOMM 2025) simulated H800 multi-rail fabric"},
    )
    return _rail_fabric(b, servers, 8, nvlink, nvlink_alpha, nic, pcie_alpha, net_alpha, spines)


# --------------------------------------------------------------------------------------------
# SCALE-CCL multi-datacenter WAN
# --------------------------------------------------------------------------------------------


def wan_intra_links(gpus: int, connectivity: float) -> int:
    """Number of intra-DC GPU pairs linked: round(P * G(G-1)/2), at least G-1, at most G(G-1)/2."""
    full = gpus * (gpus - 1) // 2
    return min(full, max(gpus - 1, int(round(connectivity * full))))


def _random_connected_pairs(n: int, m: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """m unordered pairs over n nodes: a random spanning tree plus random extra pairs."""
    perm = rng.permutation(n)
    tree: set[tuple[int, int]] = set()
    for i in range(1, n):
        u, v = int(perm[i]), int(perm[int(rng.integers(0, i))])
        tree.add((min(u, v), max(u, v)))
    rest = [p for p in itertools.combinations(range(n), 2) if p not in tree]
    extra: np.ndarray | list[int] = (
        rng.permutation(len(rest))[: m - len(tree)] if m > len(tree) else []
    )
    return sorted(tree | {rest[int(k)] for k in extra})


@zoo(
    "wan",
    dcs=Param("int", 3, "number of datacenters", min=1, max=256),
    gpus=Param("int", 8, "GPUs per datacenter", min=1, max=4096),
    connectivity=Param(
        "float", 0.5, "intra-DC connectivity: linked GPU pairs / all GPU pairs", min=0, max=1
    ),
    km=Param("float", 150.0, "WAN distance between border routers in km", min=0),
    seed=Param("int", 0, "seed of the random intra-DC wiring", min=0),
    gateways=Param(
        "int", None, "GPUs per DC linked to the border router (gpu0 ...); default all", min=1
    ),
    gpu_bw=Param("bw", 50 * GB, "bandwidth of each intra-DC GPU <-> GPU link"),
    gpu_alpha=Param("time", 0.7 * US, "latency of each intra-DC GPU <-> GPU link"),
    router_bw=Param("bw", 12.5 * GB, "bandwidth of each GPU <-> border router link"),
    router_alpha=Param("time", 0.7 * US, "latency of each GPU <-> border router link (assumption)"),
    wan_bw=Param("bw", 12.5 * GB, "bandwidth of each router <-> router WAN link"),
    per_km=Param("time", 5 * US, "WAN propagation delay per km"),
)
def wan(
    dcs: int,
    gpus: int,
    connectivity: float,
    km: float,
    seed: int,
    gateways: int | None,
    gpu_bw: float,
    gpu_alpha: float,
    router_bw: float,
    router_alpha: float,
    wan_bw: float,
    per_km: float,
) -> Topology:
    """SCALE-CCL multi-datacenter model: random intra-DC GPU graphs, border routers, WAN full mesh.

    Source: SCALE-CCL (Xiong et al., ACM INET4AI 2025) §3 (GPUs and border routers, WAN abstracted
    as direct router-to-router links; routers cut-through) and §5 (defaults: intra-DC GPU-GPU
    links 50 GB/s and 0.7 us; GPU-router and WAN links 12.5 GB/s; connectivity 0.5 = linked /
    all intra-DC pairs; 150 km WAN = 0.75 ms, i.e. 5 us per km). Defaults: dcs=3, gpus=8,
    connectivity=0.5, km=150, seed=0, all GPUs are gateways. The number of DCs and GPUs per DC
    and the GPU-router latency (0.7 us) are our assumptions (the paper does not state them).

    Per DC: round(P * G(G-1)/2) (at least G-1, at most G(G-1)/2) GPU pairs are linked both ways
    (class ``nvlink``): a uniformly random recursive spanning tree plus uniformly random extra
    pairs, drawn from ``numpy.random.default_rng(seed)`` DC after DC, so each DC is connected
    and the result is deterministic. One border router ``dc{d}.router`` (kind router, role
    ``router``) per DC, linked both ways to the first ``gateways`` GPUs (class ``eth``). Routers
    form a full mesh of WAN links (class ``wan``) with alpha = km * per_km.
    Nodes: ``dc{d}.gpu{j}`` (attrs ``dc``, ``local``), routers with attr ``dc``.
    """
    if gateways is None:
        gateways = gpus
    if gateways > gpus:
        _fail(f"wan parameter gateways {gateways} must be at most gpus ({gpus})")
    rng = np.random.default_rng(seed)
    m = wan_intra_links(gpus, connectivity)
    b = TopologyBuilder(
        f"wan_d{dcs}g{gpus}", meta={"source": "SCALE-CCL (Xiong et al., ACM INET4AI 2025) §3, §5"}
    )
    routers = []
    for d in range(dcs):
        g = [b.compute(f"dc{d}.gpu{j}", dc=d, local=j) for j in range(gpus)]
        for u, v in _random_connected_pairs(gpus, m, rng):
            b.bilink(g[u], g[v], gpu_bw, gpu_alpha, "nvlink")
        r = b.router(f"dc{d}.router", dc=d, role="router")
        for x in g[:gateways]:
            b.bilink(x, r, router_bw, router_alpha, "eth")
        routers.append(r)
    for d, e in itertools.combinations(range(dcs), 2):
        b.bilink(routers[d], routers[e], wan_bw, km * per_km, "wan")
    return b.build()


# --------------------------------------------------------------------------------------------
# Generic fabrics
# --------------------------------------------------------------------------------------------

_BW = Param("bw", 50 * GB, "bandwidth of each link, per direction")
_ALPHA = Param("time", 0.7 * US, "latency of each link")


@zoo("ring", n=Param("int", 8, "number of compute nodes", min=2, max=65536), bw=_BW, alpha=_ALPHA)
def ring(n: int, bw: float, alpha: float) -> Topology:
    """Bidirectional ring of n compute nodes (node i linked to i+1 mod n, both ways)."""
    b = TopologyBuilder(f"ring{n}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    if n == 2:
        b.bilink(ids[0], ids[1], bw, alpha, "link")
    else:
        for i in range(n):
            b.bilink(ids[i], ids[(i + 1) % n], bw, alpha, "link")
    return b.build()


@zoo("line", n=Param("int", 8, "number of compute nodes", min=2, max=65536), bw=_BW, alpha=_ALPHA)
def line(n: int, bw: float, alpha: float) -> Topology:
    """Bidirectional line (chain) of n compute nodes: gpu i <-> gpu i+1.

    Defaults: n=8, every link 50 GB/s per direction with alpha 0.7 us.
    """
    b = TopologyBuilder(f"line{n}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    for i in range(n - 1):
        b.bilink(ids[i], ids[i + 1], bw, alpha, "link")
    return b.build()


@zoo("full", n=Param("int", 8, "number of compute nodes", min=2, max=2048), bw=_BW, alpha=_ALPHA)
def full(n: int, bw: float, alpha: float) -> Topology:
    """Fully connected n compute nodes: every pair linked both ways.

    Defaults: n=8, every link 50 GB/s per direction with alpha 0.7 us.
    """
    b = TopologyBuilder(f"full{n}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    for i, j in itertools.combinations(range(n), 2):
        b.bilink(ids[i], ids[j], bw, alpha, "link")
    return b.build()


@zoo("star", n=Param("int", 8, "number of compute nodes", min=2, max=65536), bw=_BW, alpha=_ALPHA)
def star(n: int, bw: float, alpha: float) -> Topology:
    """Star: n compute nodes each linked both ways to one switch ``sw0`` (role ``switch``).

    Defaults: n=8, every link 50 GB/s per direction with alpha 0.7 us.
    """
    b = TopologyBuilder(f"star{n}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    hub = b.switch("sw0", role="switch")
    for x in ids:
        b.bilink(x, hub, bw, alpha, "link")
    return b.build()


def _grid_pairs(dims: tuple[int, ...], wrap: bool) -> list[tuple[int, int]]:
    """Unordered neighbour pairs of a grid (row-major, first dimension fastest).

    With ``wrap`` a dimension of size >= 3 closes into a ring; sizes 1 and 2 never produce a
    self link or a duplicate pair.
    """
    strides = [1]
    for d in dims[:-1]:
        strides.append(strides[-1] * d)
    pairs = []
    for coord in itertools.product(*[range(d) for d in reversed(dims)]):
        coord = tuple(reversed(coord))
        idx = sum(c * s for c, s in zip(coord, strides))
        for k, size in enumerate(dims):
            c = coord[k]
            if c + 1 < size:
                nb = idx + strides[k]
            elif wrap and size >= 3:
                nb = idx - c * strides[k]
            else:
                continue
            pairs.append((min(idx, nb), max(idx, nb)))
    return pairs


def _grid(
    kind: str, name: str, dims: tuple[int, ...], wrap: bool, bw: float, alpha: float
) -> Topology:
    total = math.prod(dims)
    if total < 2:
        _fail(f"{kind} needs at least 2 nodes (got {'x'.join(map(str, dims))})")
    axes = "xyz"
    b = TopologyBuilder(name)
    ids = []
    for i in range(total):
        coord, rest = {}, i
        for k, size in enumerate(dims):
            coord[axes[k]] = rest % size
            rest //= size
        ids.append(b.compute(f"gpu{i}", local=i, **coord))
    for u, v in _grid_pairs(dims, wrap):
        b.bilink(ids[u], ids[v], bw, alpha, "link")
    return b.build()


@zoo(
    "mesh2d",
    w=Param("int", 4, "width", min=1, max=1024),
    h=Param("int", 4, "height", min=1, max=1024),
    bw=_BW,
    alpha=_ALPHA,
)
def mesh2d(w: int, h: int, bw: float, alpha: float) -> Topology:
    """2-D mesh of w x h compute nodes, neighbours linked both ways (no wrap-around).

    Node ``gpu{i}`` sits at x = i mod w, y = i // w (attrs ``x``, ``y``). Defaults: 4 x 4, every
    link 50 GB/s per direction with alpha 0.7 us. (A true mesh, unlike TE-CCL's ``Mesh``, which
    wraps row ends into the next row.)
    """
    return _grid("mesh2d", f"mesh{w}x{h}", (w, h), False, bw, alpha)


@zoo(
    "torus2d",
    w=Param("int", 4, "width", min=1, max=1024),
    h=Param("int", 4, "height", min=1, max=1024),
    bw=_BW,
    alpha=_ALPHA,
)
def torus2d(w: int, h: int, bw: float, alpha: float) -> Topology:
    """2-D torus of w x h compute nodes (wrap-around in each dimension of size >= 3).

    Node ``gpu{i}`` sits at x = i mod w, y = i // w. A dimension of size 2 has one link between
    its two nodes (no duplicate wrap link), size 1 none; so the degree is 4 when w, h >= 3.
    Defaults: 4 x 4, every link 50 GB/s per direction with alpha 0.7 us.
    """
    return _grid("torus2d", f"torus{w}x{h}", (w, h), True, bw, alpha)


@zoo(
    "torus3d",
    x=Param("int", 4, "size in x", min=1, max=64),
    y=Param("int", 4, "size in y", min=1, max=64),
    z=Param("int", 4, "size in z", min=1, max=64),
    bw=_BW,
    alpha=_ALPHA,
)
def torus3d(x: int, y: int, z: int, bw: float, alpha: float) -> Topology:
    """3-D torus of x * y * z compute nodes (wrap-around in each dimension of size >= 3).

    Node ``gpu{i}`` sits at (i mod x, (i // x) mod y, i // (x*y)). Sizes 1 and 2 behave as in
    ``torus2d``; degree 6 when all sizes are >= 3. Defaults: 4 x 4 x 4, every link 50 GB/s per
    direction with alpha 0.7 us.
    """
    return _grid("torus3d", f"torus{x}x{y}x{z}", (x, y, z), True, bw, alpha)


@zoo(
    "hypercube",
    d=Param("int", 4, "dimension (2^d compute nodes)", min=1, max=16),
    bw=_BW,
    alpha=_ALPHA,
)
def hypercube(d: int, bw: float, alpha: float) -> Topology:
    """Hypercube of 2^d compute nodes: i <-> i xor 2^k for every bit k, both ways (degree d).

    Defaults: d=4 (16 nodes), every link 50 GB/s per direction with alpha 0.7 us.
    """
    n = 1 << d
    b = TopologyBuilder(f"hypercube{d}")
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    for i in range(n):
        for k in range(d):
            j = i ^ (1 << k)
            if i < j:
                b.bilink(ids[i], ids[j], bw, alpha, "link")
    return b.build()


@zoo("fat_tree", k=Param("int", 4, "switch radix (even)", min=2, max=64), bw=_BW, alpha=_ALPHA)
def fat_tree(k: int, bw: float, alpha: float) -> Topology:
    """Classic k-ary fat tree: k pods of k/2 edge + k/2 aggregation switches, (k/2)^2 cores.

    k^3/4 hosts (compute nodes), k/2 per edge switch. In each pod every edge switch links to every
    aggregation switch; aggregation switch a of every pod links to cores a*k/2 ... a*k/2 + k/2 - 1.
    All links both ways. Nodes: hosts ``pod{p}.gpu{i}`` (attrs ``pod``, ``edge``, ``local``),
    ``pod{p}.edge{e}`` (role ``edge``), ``pod{p}.agg{a}`` (role ``agg``), ``core{c}`` (role
    ``core``). Defaults: k=4 (16 hosts, 20 switches), every link 50 GB/s per direction with alpha
    0.7 us.
    """
    if k % 2:
        _fail(f"fat_tree parameter k {k} must be even")
    half = k // 2
    b = TopologyBuilder(f"fat_tree{k}")
    hosts = [
        [b.compute(f"pod{p}.gpu{i}", pod=p, edge=i // half, local=i) for i in range(half * half)]
        for p in range(k)
    ]
    cores = [b.switch(f"core{c}", role="core") for c in range(half * half)]
    for p in range(k):
        edges = [b.switch(f"pod{p}.edge{e}", role="edge", pod=p, local=e) for e in range(half)]
        aggs = [b.switch(f"pod{p}.agg{a}", role="agg", pod=p, local=a) for a in range(half)]
        for i, hst in enumerate(hosts[p]):
            b.bilink(hst, edges[i // half], bw, alpha, "link")
        for e in edges:
            for a in aggs:
                b.bilink(e, a, bw, alpha, "link")
        for a, agg in enumerate(aggs):
            for c in range(a * half, (a + 1) * half):
                b.bilink(agg, cores[c], bw, alpha, "link")
    return b.build()


def dragonfly_global_pairs(a: int, h: int, groups: int) -> list[tuple[int, int, int, int]]:
    """Global links ``(group g, router r, group t, router q)`` of the absolute arrangement."""
    out = []
    for g, t in itertools.combinations(range(groups), 2):
        # Group g's global port toward t is t-1 (t > g), group t's port toward g is g; port p
        # belongs to router p // h.
        out.append((g, (t - 1) // h, t, g // h))
    return out


@zoo(
    "dragonfly",
    a=Param("int", 4, "routers per group", min=1, max=32),
    p=Param("int", 2, "compute nodes per router", min=1, max=32),
    h=Param("int", 2, "global links per router", min=1, max=32),
    groups=Param("int", None, "number of groups (at most a*h+1, the default)", min=1),
    bw=_BW,
    alpha=_ALPHA,
)
def dragonfly(a: int, p: int, h: int, groups: int | None, bw: float, alpha: float) -> Topology:
    """Dragonfly: groups of a fully linked routers, p compute nodes each, one link per group pair.

    Routers are switch nodes ``g{g}.r{r}`` (role ``router``); compute nodes ``g{g}.gpu{i}`` with
    i = r*p + j (attrs ``group``, ``router``, ``local``). g = a*h+1 groups by default (``groups``
    may be smaller). Global links use the absolute (consecutive) arrangement: group g numbers its
    a*h global ports 0 ... a*h-1, port q belongs to router q // h and leads to group q if q < g,
    else q+1; so every pair of groups has exactly one global link and each router has at most h.
    All links both ways. Defaults: a=4, p=2, h=2 (9 groups, 36 routers, 72 compute nodes), every
    link 50 GB/s per direction with alpha 0.7 us.
    """
    gmax = a * h + 1
    if groups is None:
        groups = gmax
    if groups > gmax:
        _fail(f"dragonfly parameter groups {groups} must be at most a*h+1 = {gmax}")
    b = TopologyBuilder(f"dragonfly_a{a}p{p}h{h}g{groups}")
    routers = []
    for g in range(groups):
        rs = []
        for r in range(a):
            rid = b.switch(f"g{g}.r{r}", role="router", group=g, local=r)
            for j in range(p):
                i = r * p + j
                c = b.compute(f"g{g}.gpu{i}", group=g, router=r, local=i)
                b.bilink(c, rid, bw, alpha, "link")
            rs.append(rid)
        for r1, r2 in itertools.combinations(range(a), 2):
            b.bilink(rs[r1], rs[r2], bw, alpha, "link")
        routers.append(rs)
    for g, r, t, q in dragonfly_global_pairs(a, h, groups):
        b.bilink(routers[g][r], routers[t][q], bw, alpha, "link")
    return b.build()


_RR_ATTEMPTS = 1000


@zoo(
    "random_regular",
    n=Param("int", 16, "number of compute nodes", min=2, max=65536),
    d=Param("int", 3, "degree of every node", min=1, max=64),
    seed=Param("int", 0, "random seed", min=0),
    bw=_BW,
    alpha=_ALPHA,
)
def random_regular(n: int, d: int, seed: int, bw: float, alpha: float) -> Topology:
    """Random connected d-regular graph on n compute nodes (networkx.random_regular_graph).

    Draws with seed, seed+1, ... until the graph is connected (at most 1000 tries), so the
    result is deterministic. Needs d < n and n*d even; d=1 is connected only for n=2.
    Defaults: n=16, d=3, seed=0, every link 50 GB/s per direction with alpha 0.7 us.
    """
    import networkx as nx

    if d >= n:
        _fail(f"random_regular needs d < n (got d={d}, n={n})")
    if (n * d) % 2:
        _fail(f"random_regular needs n*d even (got n={n}, d={d})")
    if d == 1 and n > 2:
        _fail(f"random_regular with d=1 is never connected for n={n} > 2")
    for attempt in range(_RR_ATTEMPTS):
        graph = nx.random_regular_graph(d, n, seed=seed + attempt)
        if nx.is_connected(graph):
            break
    else:
        _fail(
            f"random_regular found no connected {d}-regular graph on {n} nodes "
            f"in {_RR_ATTEMPTS} tries"
        )
    b = TopologyBuilder(f"random_regular_n{n}d{d}s{seed}", meta={"seed_used": seed + attempt})
    ids = [b.compute(f"gpu{i}", local=i) for i in range(n)]
    for u, v in sorted((min(e), max(e)) for e in graph.edges()):
        b.bilink(ids[u], ids[v], bw, alpha, "link")
    return b.build()
