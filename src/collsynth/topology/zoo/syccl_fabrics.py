"""The fabrics of SyCCL's evaluation (Cao et al., SIGCOMM 2025) in the zoo: its A800 2-layer
Clos testbed and its simulated H800 multi-rail fabric.

Each constructor documents its source and every default. Bandwidths are bytes/s per direction,
alphas seconds.
"""

from __future__ import annotations

from ..model import Topology, TopologyBuilder
from ..registry import Param, zoo
from .common import GB, US, fail


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
        fail(f"a800_clos parameter nics {nics} must divide 8 (1, 2, 4 or 8)")
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
