"""AMD fabrics of the zoo: MI250 (16 GCDs per chassis on xGMI).

The constructor documents its source (the papers and public tools whose wiring it follows; see
``docs/references.md``) and every default. Bandwidths are bytes/s per direction, alphas seconds.
"""

from __future__ import annotations

from ..model import Topology, TopologyBuilder
from ..registry import Param, zoo
from .common import GB, LANES, US, wire_pairs

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
    lanes=LANES,
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
        wire_pairs(b, g, MI250_XGMI, xgmi, xgmi_alpha, "xgmi", split)
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
