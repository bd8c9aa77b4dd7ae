"""Import of NCCL topology XML (the files of ``NCCL_TOPO_FILE`` and ``NCCL_TOPO_DUMP_FILE``).

Spec: ``nccl-xml:FILE[,nodes=N,fabric=rail|fat_tree|single_switch,...]``. What is read (the
mapping and its figures are in ``docs/formats.md``):

* ``<system>`` holds ``<cpu numaid=...>`` elements: each becomes a switch ``cpu{numaid}``
  (role ``cpu``, the host bridge); CPUs are joined pairwise at ``sys`` (class ``sys``).
* ``<pci busid class link_speed link_width>`` nests the PCIe tree. A ``<pci>`` holding a
  ``<gpu>`` (or of class ``0x03....``) is a GPU, one holding a ``<nic>`` (or of class
  ``0x02....``) a NIC, one of class ``0x068000`` an NVSwitch, any other ``<pci>`` with
  ``<pci>`` children a PCIe switch ``pci{busid}`` (role ``pcie``). Every device links to its
  parent at ``link_speed x link_width`` (class ``pcie``); width 0 means 16 (as NCCL does), a
  missing or unknown speed 8 GT/s (noted in ``meta.notes``); a width outside 0..32 or a
  negative speed is refused.
* ``<gpu dev sm rank>`` children ``<nvlink target count tclass>``: to another GPU (``target`` is
  its bus id) one link per GPU pair of ``count`` NVLinks (class ``nvlink``, ``lanes=count``); to
  an NVSwitch (``tclass="0x068000"``, or a target that is an NVSwitch ``<pci>`` of the file) a
  link to the node's single switch ``nvswitch`` carrying all of the GPU's switch NVLinks (class
  ``nvswitch``); to the CPU (``tclass="0x068001"``) a link to the GPU's ``cpu`` node. The
  per-link figure comes from ``sm`` (:mod:`.rates`), or ``nvlink=`` for all.
* ``<nic>`` children ``<net dev speed name ...>``: one NIC per ``<nic>`` (nets without ``dev``
  are skipped, as NCCL does); its bandwidth is the sum of its nets' ``speed`` (Mbit/s), ``nic=``
  where a speed is missing or 0 (a negative speed is refused). Rails follow the smallest net
  ``dev``.

GPUs are ordered by ``rank`` (else ``dev``, else file order) and named ``gpu{i}``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import NoReturn

from ..errors import CollsynthError
from .cluster import FABRICS, NodePlan, PlanNic, build_cluster
from .model import Topology
from .rates import (
    DEFAULT_PCIE_GT,
    GB,
    NVLINK_ALPHA,
    NVSWITCH_ALPHA,
    PCIE_ALPHA,
    SYS_ALPHA,
    nvlink_gen_of_sm,
    parse_gt,
    pcie_bw,
)
from .registry import Param
from .sources import source
from .xmltree import XElem, read_xml

NVSWITCH_CLASS = "0x068000"
CPU_CLASS = "0x068001"
_BUSID = re.compile(r"^(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
_ETH_NAMES = ("eth", "en", "bond")


@dataclass
class _Gpu:
    elem: XElem  # the <gpu> element, or the <pci> of a GPU without one
    busid: str
    parent: str
    cpu: str
    pcie: float
    name: str = ""


@dataclass
class _Nic:
    elem: XElem
    parent: str
    pcie: float | None
    nets: list[XElem]
    busid: str = ""


@dataclass
class _Ctx:
    source: str
    plan: NodePlan
    nic_bw: float
    gpus: list[_Gpu] = field(default_factory=list)
    nics: list[_Nic] = field(default_factory=list)
    nvswitches: set[str] = field(default_factory=set)
    unknown_speed: int = 0

    def fail(self, elem: XElem, what: str) -> NoReturn:
        raise CollsynthError(f"{self.source}: {elem.where()}: {what}")


def _int(ctx: _Ctx, elem: XElem, key: str, default: int | None = None) -> int:
    text = elem.attrs.get(key)
    if text is None or not text.strip():
        if default is None:
            ctx.fail(elem, f"missing attribute {key!r}")
        return default
    try:
        if not text.strip().isascii() or len(text.strip()) > 20:
            raise ValueError
        return int(text.strip(), 0)
    except ValueError:
        ctx.fail(elem, f"{key}={ascii(text)[:40]} is not an integer")


def _busid(ctx: _Ctx, elem: XElem, key: str = "busid") -> str:
    raw = elem.attrs.get(key)
    if raw is None:
        ctx.fail(elem, f"missing attribute {key!r}")
    text = raw.strip().lower()
    if not _BUSID.match(text):
        ctx.fail(elem, f"{key}={raw!r} is not a PCI bus id (like 0000:07:00.0)")
    return text if text.count(":") == 2 else "0000:" + text


def _pcie(ctx: _Ctx, elem: XElem) -> float:
    """The bandwidth of a ``<pci>`` element's link to its parent."""
    width = _int(ctx, elem, "link_width", 0)
    if not 0 <= width <= 32:
        ctx.fail(elem, f"link_width {width} is not a PCIe lane count (1 to 32; 0 means 16)")
    width = width or 16
    speed = elem.attrs.get("link_speed", "")
    if speed.strip().startswith("-"):
        ctx.fail(elem, f"link_speed {ascii(speed)[:40]} is negative")
    gt = parse_gt(speed)
    if gt is None:
        ctx.unknown_speed += 1
        gt = DEFAULT_PCIE_GT
    return pcie_bw(gt, width)


def _walk_cpu(ctx: _Ctx, cpu: XElem) -> None:
    numa = _int(ctx, cpu, "numaid")
    name = f"cpu{numa}"
    if name in ctx.plan.switches:
        ctx.fail(cpu, f"a second <cpu> with numaid {numa}")
    ctx.plan.switch(name, "cpu", numa=numa)
    for child in cpu.children:
        if child.tag == "pci":
            _walk_pci(ctx, child, name, name)
        elif child.tag == "nic":
            ctx.nics.append(_Nic(child, name, None, child.subs("net")))
        elif child.tag == "gpu":
            ctx.fail(child, "has no links: a <gpu> must sit in a <pci> element (its bus id)")


def _walk_pci(ctx: _Ctx, pci: XElem, parent: str, cpu: str) -> None:
    busid = _busid(ctx, pci)
    cls = pci.attrs.get("class", "").strip().lower()
    tags = {c.tag for c in pci.children}
    if "gpu" in tags or (cls.startswith("0x03") and "pci" not in tags):
        elem = pci.subs("gpu")[0] if "gpu" in tags else pci
        ctx.gpus.append(_Gpu(elem, busid, parent, cpu, _pcie(ctx, pci)))
    elif "nic" in tags:
        nic = pci.subs("nic")[0]
        ctx.nics.append(_Nic(nic, parent, _pcie(ctx, pci), nic.subs("net"), busid))
    elif cls.startswith("0x02") and "pci" not in tags:
        ctx.nics.append(_Nic(pci, parent, _pcie(ctx, pci), [], busid))
    elif cls == NVSWITCH_CLASS:
        ctx.nvswitches.add(busid)
    elif cls.startswith("0x0604") or "pci" in tags:
        name = ctx.plan.switch(f"pci{busid}", "pcie", busid=busid)
        ctx.plan.link(name, parent, _pcie(ctx, pci), PCIE_ALPHA, "pcie")
        for child in pci.subs("pci"):
            _walk_pci(ctx, child, name, cpu)


def _order_gpus(ctx: _Ctx) -> None:
    """Sort by rank, else dev, else file order; name them ``gpu{i}``; add them to the plan."""
    for key in ("rank", "dev"):
        if ctx.gpus and all(key in g.elem.attrs for g in ctx.gpus):
            values = [_int(ctx, g.elem, key) for g in ctx.gpus]
            for g, v in zip(ctx.gpus, values):
                if values.count(v) > 1:
                    ctx.fail(g.elem, f"{key} {v} is used by another GPU too")
            ctx.gpus.sort(key=lambda g: _int(ctx, g.elem, key))
            break
    seen: dict[str, _Gpu] = {}
    for i, g in enumerate(ctx.gpus):
        if g.busid in seen:
            ctx.fail(g.elem, f"bus id {g.busid} is used by another GPU too")
        seen[g.busid] = g
        g.name = f"gpu{i}"
        attrs = {"busid": g.busid}
        if "sm" in g.elem.attrs:
            attrs["sm"] = str(_int(ctx, g.elem, "sm"))
        ctx.plan.gpu(g.name, **attrs)
        ctx.plan.link(g.name, g.parent, g.pcie, PCIE_ALPHA, "pcie")


def _per_link(ctx: _Ctx, g: _Gpu, nvlink: float | None) -> float:
    if nvlink is not None:
        return nvlink
    if "sm" not in g.elem.attrs:
        ctx.fail(g.elem, "has <nvlink> children but no 'sm' attribute (or give nvlink=BW)")
    sm = _int(ctx, g.elem, "sm")
    gen, bw = nvlink_gen_of_sm(sm, f"{ctx.source}: {g.elem.where()}")
    ctx.plan.meta.setdefault("nvlink", {})[g.name] = {"sm": sm, "generation": gen, "per_link": bw}
    return bw


def _target(ctx: _Ctx, nv: XElem, g: _Gpu, by_bus: dict[str, _Gpu]) -> _Gpu | str:
    """The GPU an ``<nvlink>`` reaches, or ``"nvswitch"`` / ``"cpu"``."""
    tclass = nv.attrs.get("tclass", "").strip().lower()
    if tclass == NVSWITCH_CLASS:
        return "nvswitch"
    if tclass == CPU_CLASS:
        return "cpu"
    if tclass and not tclass.startswith("0x03"):
        ctx.fail(
            nv, f"unknown tclass {tclass!r} (expected 0x03...., {NVSWITCH_CLASS} or {CPU_CLASS})"
        )
    if "target" not in nv.attrs:
        ctx.fail(nv, "missing attribute 'target' (the bus id of the GPU it reaches)")
    target = _busid(ctx, nv, "target")
    if not tclass and target in ctx.nvswitches:
        return "nvswitch"
    if target == g.busid:
        ctx.fail(nv, "an NVLink from a GPU to itself")
    if target not in by_bus:
        ctx.fail(nv, f"missing NVLink target: no GPU or NVSwitch with bus id {target} in the file")
    return by_bus[target]


def _add_nvlinks(ctx: _Ctx, nvlink: float | None) -> None:
    by_bus = {g.busid: g for g in ctx.gpus}
    sides: dict[tuple[str, str], list] = {}  # (from, to) -> [count, per-link bw, first element]
    for g in ctx.gpus:
        to_switch = to_cpu = 0
        for nv in g.elem.subs("nvlink"):
            count = _int(ctx, nv, "count")
            if count < 1:
                ctx.fail(nv, f"count {count} must be at least 1")
            bw = _per_link(ctx, g, nvlink)
            tgt = _target(ctx, nv, g, by_bus)
            if tgt == "nvswitch":
                to_switch += count
            elif tgt == "cpu":
                to_cpu += count
            elif isinstance(tgt, _Gpu):
                side = sides.setdefault((g.name, tgt.name), [0, bw, nv])
                side[0] += count
        if to_switch:
            sw = ctx.plan.switch("nvswitch", "nvswitch")
            bw = _per_link(ctx, g, nvlink) * to_switch
            ctx.plan.link(g.name, sw, bw, NVSWITCH_ALPHA, "nvswitch", to_switch)
        if to_cpu:
            bw = _per_link(ctx, g, nvlink) * to_cpu
            ctx.plan.link(g.name, g.cpu, bw, NVSWITCH_ALPHA, "nvlink", to_cpu)
    _pair_links(ctx, sides)


def _pair_links(ctx: _Ctx, sides: dict[tuple[str, str], list]) -> None:
    """One link per GPU pair; when both GPUs list the pair, their counts must agree."""
    for (a, b), (count, bw, elem) in sides.items():
        back = sides.get((b, a))
        if back is not None:
            if a > b:
                continue
            if back[0] != count:
                ctx.fail(back[2], f"{back[0]} NVLinks to {a}, but {elem.where()} says {count}")
            bw = min(bw, back[1])
        ctx.plan.link(a, b, count * bw, NVLINK_ALPHA, "nvlink", count)


def _net_class(names: list[str]) -> str:
    return "eth" if names and all(n.startswith(_ETH_NAMES) for n in names) else "ib"


def _add_nics(ctx: _Ctx) -> None:
    """NICs in rail order (smallest net dev, else file order) with their bandwidths."""
    found: list[tuple[int, int, PlanNic]] = []
    for pos, nic in enumerate(ctx.nics):
        nets = [n for n in nic.nets if "dev" in n.attrs] if nic.elem.tag == "nic" else []
        if nic.elem.tag == "nic" and not nets:
            ctx.plan.note(f"{nic.elem.where()}: no <net> with a dev, skipped (as NCCL does)")
            continue
        bw, names, devs = 0.0, [], []
        for net in nets:
            devs.append(_int(ctx, net, "dev"))
            mbps = _int(ctx, net, "speed", -1)
            if mbps < 0 and net.attrs.get("speed", "").strip():
                ctx.fail(net, f"speed {mbps} is negative (Mbit/s; 0 or none: nic= is used)")
            bw += mbps * 1e6 / 8 if mbps > 0 else ctx.nic_bw
            names.append(net.attrs.get("name", "").strip())
        if not nets:
            bw = ctx.nic_bw
        attrs = {"device": ",".join(n for n in names if n) or nic.busid, "busid": nic.busid}
        pcie = nic.pcie if nic.pcie is not None else bw
        plan_nic = PlanNic(nic.parent, pcie, bw, _net_class(names), attrs)
        found.append((min(devs, default=1 << 30), pos, plan_nic))
    found.sort(key=lambda t: (t[0], t[1]))
    ctx.plan.nics = [n for _, _, n in found]
    ctx.plan.meta["nics"] = [
        {"rail": j, "device": n.attrs["device"], "bw": n.bw, "attach": n.attach}
        for j, n in enumerate(ctx.plan.nics)
    ]


def _read_node(path: str, nic_bw: float, nvlink: float | None, sys_bw: float) -> NodePlan:
    """One node's plan from an NCCL topology XML file."""
    root = read_xml(path)
    label = os.path.splitext(os.path.basename(path))[0] or "nccl"
    ctx = _Ctx(path, NodePlan(label), nic_bw)
    if root.tag != "system":
        ctx.fail(root, "unknown root element: an NCCL topology XML has <system> at its root")
    cpus = root.subs("cpu")
    if not cpus:
        ctx.fail(root, "no <cpu> elements (nothing to import)")
    hosts = {c.attrs.get("host_hash", "") for c in cpus}
    if len(hosts) > 1:
        ctx.fail(cpus[-1], "the file holds several hosts (host_hash); give one node's file")
    for cpu in cpus:
        _walk_cpu(ctx, cpu)
    if len(ctx.gpus) < 2:
        ctx.fail(root, f"found {len(ctx.gpus)} GPU(s); at least 2 are needed")
    _order_gpus(ctx)
    _add_nvlinks(ctx, nvlink)
    names = [n for n, a in ctx.plan.switches.items() if a["role"] == "cpu"]
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ctx.plan.link(a, b, sys_bw, SYS_ALPHA, "sys")
    _add_nics(ctx)
    if ctx.unknown_speed:
        ctx.plan.note(
            f"{ctx.unknown_speed} <pci> element(s) without a known link_speed: 8 GT/s assumed"
        )
    return ctx.plan


@source(
    "nccl-xml",
    nodes=Param("int", 1, "number of copies of the node, joined by the fabric", min=1, max=4096),
    fabric=Param(
        "choice", "rail", "how the nodes' NICs are joined: " + ", ".join(FABRICS), choices=FABRICS
    ),
    spines=Param("int", 0, "fat_tree only: spine switches (0: one per rail)", min=0, max=1024),
    nic=Param("bw", 25 * GB, "bandwidth of a NIC whose <net> gives no speed (200 Gb/s)"),
    nvlink=Param("bw", None, "bandwidth of one NVLink (default: from each GPU's sm)"),
    sys=Param("bw", 32 * GB, "bandwidth between two CPU sockets (assumption)"),
)
def nccl_xml(
    path: str,
    nodes: int,
    fabric: str,
    spines: int,
    nic: float,
    nvlink: float | None,
    sys: float,
) -> Topology:
    """NCCL topology XML (NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE): GPUs, NVLink, PCIe, NICs."""
    plan = _read_node(path, nic, nvlink, sys)
    name = plan.label if nodes == 1 else f"{plan.label}x{nodes}-{fabric}"
    meta = {"source": f"NCCL topology XML {path}"}
    return build_cluster(plan, nodes, fabric, spines, name, meta)
