"""One node's plan, read from a file, copied ``nodes`` times and joined by a network fabric.

The importers (:mod:`.nccl_xml`, :mod:`.smi`) describe one node as a :class:`NodePlan`: its GPUs,
its switches (NVSwitch, PCIe switches, CPUs / host bridges), its links (all both ways) and its
NICs with the node they hang from. :func:`build_cluster` makes the topology:

* node ``n`` gets ``c{n}.`` in front of every name (``c0.gpu3``, ``c1.nvswitch``); GPUs carry
  ``chassis`` and ``local`` attributes, switches a ``role``;
* with ``nodes=1`` the NICs are left out (no collective inside one node uses them) and
  switches that lead nowhere (a CPU with no device, a bridge that only held a NIC) are pruned;
* with ``nodes>1`` NIC ``j`` of node ``n`` is a switch ``c{n}.nic{j}`` (role ``nic``, attribute
  ``rail=j``) linked to its PCIe parent at the PCIe bandwidth, and the NICs are joined by the
  fabric:

  ``rail``           one switch ``rail{j}`` per rail; NIC ``j`` of every node on it.
  ``single_switch``  one switch ``net0`` holding every NIC.
  ``fat_tree``       one leaf ``leaf{j}`` per rail as in ``rail``, plus ``spines`` spine
                     switches ``spine{k}`` (default: one per rail), every leaf linked to every
                     spine at ``nodes * NIC bandwidth / spines`` (non-blocking); with a single
                     rail there are no spines.

  NIC <-> switch links carry the NIC's bandwidth (class ``ib``, or ``eth`` for Ethernet names),
  alpha 0.65 us per hop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import CollsynthError
from .model import MAX_LINKS, MAX_NODES, Topology, TopologyBuilder
from .rates import NET_ALPHA, PCIE_ALPHA

FABRICS = ("rail", "fat_tree", "single_switch")


@dataclass
class PlanLink:
    a: str
    b: str
    bw: float
    alpha: float
    cls: str
    lanes: int = 1


@dataclass
class PlanNic:
    """A NIC: ``attach`` is the local node it hangs from, ``pcie_bw`` that link, ``bw`` the
    network side (bytes/s per direction), ``cls`` the network link class."""

    attach: str
    pcie_bw: float
    bw: float
    cls: str = "ib"
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class NodePlan:
    """One node: local names (no ``c{n}.`` prefix), links both ways, NICs in rail order."""

    label: str
    gpus: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    switches: dict[str, dict[str, Any]] = field(default_factory=dict)
    links: list[PlanLink] = field(default_factory=list)
    nics: list[PlanNic] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def gpu(self, name: str, **attrs: Any) -> str:
        self.gpus.append((name, {"local": len(self.gpus), **attrs}))
        return name

    def switch(self, name: str, role: str, **attrs: Any) -> str:
        if name not in self.switches:
            self.switches[name] = {"role": role, **attrs}
        return name

    def link(self, a: str, b: str, bw: float, alpha: float, cls: str, lanes: int = 1) -> None:
        self.links.append(PlanLink(a, b, bw, alpha, cls, lanes))

    def note(self, text: str) -> None:
        self.meta.setdefault("notes", []).append(text)


def _prune(plan: NodePlan, keep: set[str]) -> tuple[set[str], list[PlanLink]]:
    """Drop switches (not in ``keep``) with at most one neighbour, until none is left."""
    alive = set(plan.switches)
    links = list(plan.links)
    while True:
        degree: dict[str, set[str]] = {s: set() for s in alive}
        for l in links:
            if l.a in degree:
                degree[l.a].add(l.b)
            if l.b in degree:
                degree[l.b].add(l.a)
        dead = {s for s, nb in degree.items() if len(nb) <= 1 and s not in keep}
        if not dead:
            return alive, links
        alive -= dead
        links = [l for l in links if l.a not in dead and l.b not in dead]


def build_cluster(
    plan: NodePlan, nodes: int, fabric: str, spines: int, name: str, meta: dict[str, Any]
) -> Topology:
    """``nodes`` copies of ``plan`` joined by ``fabric`` (see the module docstring)."""
    if fabric not in FABRICS:
        raise CollsynthError(f"fabric {fabric!r} is not one of {', '.join(FABRICS)}")
    if nodes > 1 and not plan.nics:
        raise CollsynthError(
            f"{plan.label}: no NICs in the file, so nodes={nodes} cannot be joined by a fabric"
        )
    keep = {n.attach for n in plan.nics} if nodes > 1 else set()
    switches, links = _prune(plan, keep)
    _check_size(plan, nodes, fabric, spines, len(switches), len(links))
    b = TopologyBuilder(name, meta={**meta, **plan.meta})
    for n in range(nodes):
        p = f"c{n}."
        for gname, attrs in plan.gpus:
            b.compute(p + gname, chassis=n, **attrs)
        for sname, attrs in plan.switches.items():
            if sname in switches:
                b.switch(p + sname, chassis=n, **attrs)
        for l in links:
            b.bilink(p + l.a, p + l.b, l.bw, l.alpha, l.cls, l.lanes)
    if nodes > 1:
        _fabric(b, plan, nodes, fabric, spines)
    return b.build()


def _check_size(
    plan: NodePlan, nodes: int, fabric: str, spines: int, switches: int, links: int
) -> None:
    """Refuse a cluster over the topology limits before building any of it."""
    nics = len(plan.nics) if nodes > 1 else 0
    tops = 0 if nodes == 1 else (1 if fabric == "single_switch" else nics)
    spine = (spines or nics) if fabric == "fat_tree" and nics > 1 and nodes > 1 else 0
    total_nodes = nodes * (len(plan.gpus) + switches + nics) + tops + spine
    total_links = 2 * (nodes * (links + 2 * nics) + nics * spine)
    if total_nodes > MAX_NODES or total_links > MAX_LINKS:
        raise CollsynthError(
            f"{plan.label}: nodes={nodes} would make {total_nodes} nodes and {total_links} "
            f"links, more than a topology may have ({MAX_NODES} nodes, {MAX_LINKS} links)"
        )


def _fabric(b: TopologyBuilder, plan: NodePlan, nodes: int, fabric: str, spines: int) -> None:
    """NIC switches of every node and the switches joining them."""
    rails = len(plan.nics)
    if fabric == "single_switch":
        tops = [b.switch("net0", role="switch")]
    else:
        role = "rail" if fabric == "rail" else "leaf"
        tops = [b.switch(f"{role}{j}", role=role, rail=j) for j in range(rails)]
    for n in range(nodes):
        for j, nic in enumerate(plan.nics):
            node = b.switch(f"c{n}.nic{j}", role="nic", chassis=n, rail=j, **nic.attrs)
            b.bilink(f"c{n}.{nic.attach}", node, nic.pcie_bw, PCIE_ALPHA, "pcie")
            top = tops[0] if fabric == "single_switch" else tops[j]
            b.bilink(node, top, nic.bw, NET_ALPHA, nic.cls)
    if fabric == "fat_tree" and rails > 1:
        count = spines or rails
        spine = [b.switch(f"spine{k}", role="spine") for k in range(count)]
        for j, nic in enumerate(plan.nics):
            for s in spine:
                b.bilink(tops[j], s, nodes * nic.bw / count, NET_ALPHA, nic.cls)
