"""Import of ``nvidia-smi topo -m`` and ``rocm-smi --showtopo`` text output.

``nvidia-smi:FILE[,gen=nvlink3,nodes=N,fabric=...]`` reads the GPU/NIC matrix:

* ``NV#`` between two GPUs: # bonded NVLinks at the per-link figure of ``gen=`` (or
  ``nvlink=``), one link per pair (class ``nvlink``, ``lanes=#``). When a GPU's NVLinks to its
  peers add up to more than a GPU of that generation has (``nvswitch=auto``), or with
  ``nvswitch=yes``, the GPUs hang from one NVSwitch node instead, each with the largest ``#``
  it shows (an 8-GPU A100 box shows NV12 for every pair: 12 links to the switch).
* ``PIX``/``PXB`` put two devices under one PCIe switch (grouped transitively into
  ``pcie{k}`` switches); ``PHB``/``NODE``/``SYS`` only meet at the host: every group and every
  lone device links to one ``host`` switch. All PCIe links carry ``pcie=`` (default: x16 of the
  PCIe generation of ``gen``). Cross-socket costs are not modelled (one host switch).
* Columns that are not ``GPU<n>`` are NICs (``NIC<n>`` named through the "NIC Legend"), in
  column order (rails), each at ``nic=`` (the matrix gives no speed).

``rocm-smi:FILE[,xgmi=50GB/s,...]`` reads the "Link Type", "Hops" and "Weight between two
GPUs" tables: a pair of type ``XGMI`` at 1 hop is a direct xGMI link (class ``xgmi``, one link
of ``xgmi=`` per pair: the output does not count links); without a "Hops" table, the pairs of
the smallest XGMI weight; without either, every XGMI pair. If any pair is ``PCIE``, every GPU
also links to a ``host`` switch at ``pcie=``. rocm-smi lists no NICs: for ``nodes>1`` there are
``nics=`` assumed NICs per node (default one per GPU), NIC ``j`` serving an equal share of
GPUs, each at ``nic=``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import NoReturn

from ..errors import CollsynthError
from ..files import read_text
from ..params import Parameter
from .cluster import FABRICS, NodePlan, PlanNic, build_cluster
from .model import MAX_LINKS, MAX_NODES, Topology
from .rates import (
    GB,
    NVLINK_ALPHA,
    NVLINK_GENS,
    NVSWITCH_ALPHA,
    PCIE_ALPHA,
    PCIE_GT_OF_GEN,
    XGMI_ALPHA,
    XGMI_BW,
    nvlink_gen,
    pcie_bw,
)
from .registry import Param
from .sources import source

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"^GPU(\d+)$")
_DEVICE = re.compile(r"^[A-Za-z][\w.\-]*$")
_NV = re.compile(r"^NV(\d+)$")
_PCI_WORDS = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}
_STOP = {"CPU", "NUMA", "GPU"}  # header columns after the devices: CPU/NUMA Affinity, GPU NUMA ID
_GENS = tuple(g[0] for g in NVLINK_GENS)


@dataclass
class Matrix:
    """A square device matrix: names, entries ``cells[i][j]``, the line of each row."""

    source: str
    names: list[str]
    cells: list[list[str]]
    lines: list[int]
    legend: dict[str, str] = field(default_factory=dict)

    def fail(self, row: int, what: str) -> NoReturn:
        raise CollsynthError(f"{self.source}: line {self.lines[row]}: {what}")


def _label(path: str, fallback: str) -> str:
    base = os.path.basename(path)
    return base.split(".")[0] or fallback


def _common_params() -> dict[str, Parameter]:
    return {
        "nodes": Param(
            "int", 1, "number of copies of the node, joined by the fabric", min=1, max=4096
        ),
        "fabric": Param(
            "choice",
            "rail",
            "how the nodes' NICs are joined: " + ", ".join(FABRICS),
            choices=FABRICS,
        ),
        "spines": Param(
            "int", 0, "fat_tree only: spine switches (0: one per rail)", min=0, max=1024
        ),
        "nic": Param("bw", 25 * GB, "bandwidth of each NIC (200 Gb/s; the output has none)"),
    }


# ------------------------------------------------------------------------------ nvidia-smi
def _find_header(lines: list[str], source: str) -> tuple[int, list[str]]:
    for ln, line in enumerate(lines):
        tokens = line.split()
        if tokens and tokens[0] == "GPU0" and (len(tokens) < 2 or tokens[1] != "X"):
            names: list[str] = []
            for tok in tokens:
                if tok in _STOP:
                    break
                if not _DEVICE.match(tok) or tok in names:
                    raise CollsynthError(f"{source}: line {ln + 1}: bad header column {tok!r}")
                names.append(tok)
            return ln, names
    raise CollsynthError(
        f"{source}: no matrix header (a line starting with GPU0 GPU1 ...): "
        f"expected the output of nvidia-smi topo -m"
    )


def read_nvidia_matrix(
    text: str, source: str, copies: int = 1, switch_above: int | None = -1
) -> Matrix:
    """The device matrix of ``nvidia-smi topo -m`` output, checked entry by entry.

    The topology limits apply while reading (``copies`` nodes of this matrix): a header with
    more devices than :data:`~.model.MAX_NODES`, or more device pairs than
    :data:`~.model.MAX_LINKS`, is refused before any row is read, and the ``NV#`` entries
    (each a link) are counted row by row, refused as soon as there are too many. They stop
    counting once the GPUs are known to hang from an NVSwitch instead: ``switch_above`` is
    the NVLink total of one GPU above which that happens (``None``: always; ``-1``: never).
    """
    switched = switch_above is None
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    lines = text.splitlines()
    head, names = _find_header(lines, source)
    n = len(names)
    if n * copies > MAX_NODES or n * (n - 1) > MAX_LINKS:
        raise CollsynthError(
            f"{source}: line {head + 1}: a matrix of {n} devices (times nodes={copies}) has "
            f"more nodes or device pairs than a topology may have ({MAX_NODES} nodes, "
            f"{MAX_LINKS} links)"
        )
    nv_links = 0
    rows: dict[str, tuple[int, list[str]]] = {}
    legend: dict[str, str] = {}
    in_table = True
    for ln in range(head + 1, len(lines)):
        tokens = lines[ln].split()
        if not tokens:
            continue
        if tokens[0] in ("Legend:", "NIC") or tokens[0].startswith("Legend"):
            in_table = False
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", lines[ln])
        if not in_table:
            if m:
                legend[m.group(1)] = m.group(2)
            continue
        if tokens[0] not in names:
            raise CollsynthError(f"{source}: line {ln + 1}: unreadable matrix row {tokens[0]!r}")
        if tokens[0] in rows:
            raise CollsynthError(f"{source}: line {ln + 1}: a second row for {tokens[0]}")
        if len(tokens) < n + 1:
            raise CollsynthError(
                f"{source}: line {ln + 1}: row {tokens[0]} has {len(tokens) - 1} entries, "
                f"the header has {n} devices"
            )
        rows[tokens[0]] = (ln + 1, tokens[1 : n + 1])
        counts = [int(m.group(1)) for c in rows[tokens[0]][1] if (m := _NV.match(c))]
        nv_links += len(counts)
        if switch_above is not None and switch_above >= 0 and sum(counts) > switch_above:
            switched = True
        if not switched and nv_links * copies > MAX_LINKS:
            raise CollsynthError(
                f"{source}: line {ln + 1}: more than {MAX_LINKS // copies} NV# entries so far"
                + (f" (times nodes={copies})" if copies > 1 else "")
                + f": the topology would have more than {MAX_LINKS} links"
            )
    for name in names:
        if name not in rows:
            raise CollsynthError(f"{source}: line {head + 1}: {name} has no row in the matrix")
    mat = Matrix(source, names, [rows[x][1] for x in names], [rows[x][0] for x in names], legend)
    _check_nvidia_cells(mat)
    return mat


def _check_nvidia_cells(mat: Matrix) -> None:
    for i, row in enumerate(mat.cells):
        for j, cell in enumerate(row):
            col = mat.names[j]
            if (cell == "X") != (i == j):
                mat.fail(i, f"entry {cell!r} in column {col}: X marks the diagonal only")
            if cell != "X" and cell not in _PCI_WORDS and not _NV.match(cell):
                mat.fail(
                    i,
                    f"unreadable entry {cell!r} in column {col} (expected X, NV#, PIX, PXB, "
                    f"PHB, NODE or SYS)",
                )
            if _NV.match(cell) and mat.cells[j][i] != cell:
                mat.fail(
                    i,
                    f"{mat.names[i]}-{col} is {cell} but {col}-{mat.names[i]} is {mat.cells[j][i]}",
                )


def _pcie_groups(mat: Matrix) -> list[list[int]]:
    """Devices joined (transitively) by PIX/PXB entries, in column order."""
    parent = list(range(len(mat.names)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, row in enumerate(mat.cells):
        for j, cell in enumerate(row):
            if cell in ("PIX", "PXB"):
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(mat.names)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values())


def _nvidia_plan(
    mat: Matrix, path: str, per_link: float, max_links: int, pcie: float, nvswitch: str, nic: float
) -> NodePlan:
    """One node from the matrix (see the module docstring)."""
    plan = NodePlan(_label(path, "nvidia-smi"))
    gpus = [i for i, x in enumerate(mat.names) if _GPU.match(x)]
    if len(gpus) < 2:
        raise CollsynthError(f"{mat.source}: found {len(gpus)} GPU column(s); at least 2 needed")
    local = {i: plan.gpu(f"gpu{k}", device=mat.names[i]) for k, i in enumerate(gpus)}
    every = range(len(mat.names))
    nv = {
        (i, j): int(m.group(1)) for i in every for j in every if (m := _NV.match(mat.cells[i][j]))
    }
    for i, j in nv:
        if i not in local or j not in local:
            mat.fail(
                i, f"{mat.cells[i][j]} between {mat.names[i]} and {mat.names[j]}: not two GPUs"
            )
    totals = dict.fromkeys(gpus, 0)  # NVLinks of each GPU to its peers
    most = dict.fromkeys(gpus, 0)  # the largest NV# each GPU shows
    for (i, _), count in nv.items():
        totals[i] += count
        most[i] = max(most[i], count)
    switched = nvswitch == "yes" or (nvswitch == "auto" and max(totals.values()) > max_links)
    plan.meta["nvswitch"] = switched
    for (i, j), count in nv.items():
        if switched:
            continue
        if i < j:
            plan.link(local[i], local[j], count * per_link, NVLINK_ALPHA, "nvlink", count)
    if switched:
        sw = plan.switch("nvswitch", "nvswitch")
        for i in gpus:
            count = most[i]
            if count:
                plan.link(local[i], sw, count * per_link, NVSWITCH_ALPHA, "nvswitch", count)
    _nvidia_pcie(plan, mat, local, pcie, nic)
    return plan


def _nvidia_pcie(
    plan: NodePlan, mat: Matrix, local: dict[int, str], pcie: float, nic: float
) -> None:
    """PCIe switches from PIX/PXB groups, one host switch, NICs in column order."""
    host = plan.switch("host", "host")
    attach: dict[int, str] = {}
    for k, group in enumerate(_pcie_groups(mat)):
        if len(group) == 1:
            attach[group[0]] = host
            continue
        sw = plan.switch(f"pcie{k}", "pcie")
        plan.link(sw, host, pcie, PCIE_ALPHA, "pcie")
        for i in group:
            attach[i] = sw
    for i, name in local.items():
        plan.link(name, attach[i], pcie, PCIE_ALPHA, "pcie")
    for i, col in enumerate(mat.names):
        if i not in local:
            device = mat.legend.get(col, col)
            cls = "eth" if device.startswith(("eth", "en", "bond")) else "ib"
            plan.nics.append(PlanNic(attach[i], pcie, nic, cls, {"device": device}))
    plan.meta["nics"] = [
        {"rail": j, "device": n.attrs["device"], "bw": n.bw} for j, n in enumerate(plan.nics)
    ]


@source(
    "nvidia-smi",
    **_common_params(),
    gen=Param("choice", "nvlink3", "NVLink generation of NV# links", choices=_GENS),
    nvlink=Param("bw", None, "bandwidth of one NVLink (default: from gen)"),
    nvswitch=Param(
        "choice", "auto", "GPUs on an NVSwitch: auto, yes or no", choices=("auto", "yes", "no")
    ),
    pcie=Param("bw", None, "bandwidth of every PCIe link (default: x16 of gen's PCIe)"),
)
def nvidia_smi(
    path: str,
    nodes: int,
    fabric: str,
    spines: int,
    nic: float,
    gen: str,
    nvlink: float | None,
    nvswitch: str,
    pcie: float | None,
) -> Topology:
    """nvidia-smi topo -m output: NV# links or an NVSwitch, PCIe groups, NICs."""
    per_link, max_links = nvlink_gen(gen)
    above = {"yes": None, "auto": max_links, "no": -1}[nvswitch]
    mat = read_nvidia_matrix(read_text(path), path, nodes, above)
    pcie_link = pcie if pcie is not None else pcie_bw(PCIE_GT_OF_GEN[gen], 16)
    plan = _nvidia_plan(mat, path, nvlink or per_link, max_links, pcie_link, nvswitch, nic)
    plan.meta["nvlink"] = {"generation": gen, "per_link": nvlink or per_link}
    name = plan.label if nodes == 1 else f"{plan.label}x{nodes}-{fabric}"
    meta = {"source": f"nvidia-smi topo -m output {path}"}
    return build_cluster(plan, nodes, fabric, spines, name, meta)


# ------------------------------------------------------------------------------ rocm-smi
_BANNER = re.compile(r"^\s*=+\s*(.*?)\s*=+\s*$")


def _rocm_sections(text: str) -> dict[str, list[tuple[int, str]]]:
    """Lines of each ``==== Title ====`` section, by lower-case title."""
    sections: dict[str, list[tuple[int, str]]] = {}
    current: list[tuple[int, str]] | None = None
    for ln, line in enumerate(text.splitlines(), 1):
        m = _BANNER.match(line)
        if m:
            current = sections.setdefault(m.group(1).lower(), [])
            continue
        if current is not None and line.strip():
            current.append((ln, line))
    return sections


def _rocm_matrix(rows: list[tuple[int, str]], title: str, source: str) -> Matrix:
    if not rows:
        raise CollsynthError(f"{source}: the {title!r} table is empty")
    head_ln, head = rows[0]
    names = head.split()
    if not names or not all(_GPU.match(x) for x in names):
        raise CollsynthError(f"{source}: line {head_ln}: unreadable {title!r} header {head!r}")
    found: dict[str, tuple[int, list[str]]] = {}
    for ln, line in rows[1:]:
        tokens = line.split()
        if tokens[0] not in names or tokens[0] in found or len(tokens) != len(names) + 1:
            raise CollsynthError(
                f"{source}: line {ln}: unreadable {title!r} row (expected GPUn and "
                f"{len(names)} entries)"
            )
        found[tokens[0]] = (ln, tokens[1:])
    for x in names:
        if x not in found:
            raise CollsynthError(f"{source}: line {head_ln}: {x} has no row in {title!r}")
    return Matrix(source, names, [found[x][1] for x in names], [found[x][0] for x in names])


def _rocm_int(mat: Matrix, i: int, j: int, title: str) -> int:
    cell = mat.cells[i][j]
    if not cell.isdigit():
        mat.fail(i, f"{title!r} entry {cell!r} in column {mat.names[j]} is not a number")
    return int(cell)


def _rocm_direct(sections: dict[str, list[tuple[int, str]]], kinds: Matrix) -> set[tuple[int, int]]:
    """Pairs with a direct xGMI link (see the module docstring)."""
    n = len(kinds.names)
    xgmi = [(i, j) for i in range(n) for j in range(n) if i != j and kinds.cells[i][j] == "XGMI"]
    for title, pick in (("hops between two gpus", None), ("weight between two gpus", "min")):
        if title not in sections:
            continue
        mat = _rocm_matrix(sections[title], title, kinds.source)
        if mat.names != kinds.names:
            mat.fail(0, f"{title!r} lists other GPUs than the link type table")
        value = {(i, j): _rocm_int(mat, i, j, title) for i, j in xgmi}
        want = min(value.values(), default=0) if pick else 1
        return {p for p, v in value.items() if v == want}
    return set(xgmi)


def _rocm_plan(
    text: str, path: str, xgmi: float, pcie: float, nodes: int, nics: int, nic: float
) -> NodePlan:
    sections = _rocm_sections(text)
    title = "link type between two gpus"
    if title not in sections:
        raise CollsynthError(
            f"{path}: no 'Link Type between two GPUs' table (expected rocm-smi --showtopo output)"
        )
    kinds = _rocm_matrix(sections[title], title, path)
    n = len(kinds.names)
    if n < 2:
        raise CollsynthError(f"{path}: found {n} GPU; at least 2 are needed")
    for i in range(n):
        for j in range(n):
            if i != j and kinds.cells[i][j] not in ("XGMI", "PCIE"):
                kinds.fail(
                    i,
                    f"unknown link type {kinds.cells[i][j]!r} in column "
                    f"{kinds.names[j]} (expected XGMI or PCIE)",
                )
    plan = NodePlan(_label(path, "rocm-smi"))
    gpus = [plan.gpu(f"gpu{i}", device=name) for i, name in enumerate(kinds.names)]
    direct = _rocm_direct(sections, kinds)
    pcie_pairs = any(c == "PCIE" for row in kinds.cells for c in row)
    for i in range(n):
        if not any((i, j) in direct or (j, i) in direct for j in range(n)) and not pcie_pairs:
            kinds.fail(i, f"{kinds.names[i]} has no links (no XGMI neighbour at 1 hop, no PCIE)")
    for i, j in sorted(direct):
        if i < j or (j, i) not in direct:
            plan.link(gpus[min(i, j)], gpus[max(i, j)], xgmi, XGMI_ALPHA, "xgmi")
    if pcie_pairs:
        host = plan.switch("host", "host")
        for g in gpus:
            plan.link(g, host, pcie, PCIE_ALPHA, "pcie")
    if nodes > 1:
        _rocm_nics(plan, gpus, pcie, nics or n, nic, path)
    return plan


def _rocm_nics(
    plan: NodePlan, gpus: list[str], pcie: float, count: int, nic: float, path: str
) -> None:
    """``count`` assumed NICs; NIC j serves GPUs j*n/count ... (directly when it serves one)."""
    n = len(gpus)
    if count > n:
        raise CollsynthError(f"{path}: nics={count} is more than the {n} GPUs of a node")
    for j in range(count):
        served = gpus[j * n // count : (j + 1) * n // count]
        attach = served[0]
        if len(served) > 1:
            attach = plan.switch(f"nichub{j}", "pcie")
            for g in served:
                plan.link(g, attach, pcie, PCIE_ALPHA, "pcie")
        plan.nics.append(PlanNic(attach, pcie, nic, "ib", {"device": f"assumed{j}"}))


@source(
    "rocm-smi",
    **_common_params(),
    xgmi=Param("bw", XGMI_BW, "bandwidth of one xGMI link (MI250: 50 GB/s per direction)"),
    pcie=Param("bw", pcie_bw(16.0, 16), "bandwidth of each GPU's PCIe link (Gen4 x16)"),
    nics=Param("int", 0, "assumed NICs per node for nodes>1 (0: one per GPU)", min=0, max=64),
)
def rocm_smi(
    path: str, nodes: int, fabric: str, spines: int, nic: float, xgmi: float, pcie: float, nics: int
) -> Topology:
    """rocm-smi --showtopo output: AMD GPUs with their direct xGMI links."""
    plan = _rocm_plan(read_text(path), path, xgmi, pcie, nodes, nics, nic)
    plan.meta["xgmi_per_link"] = xgmi
    name = plan.label if nodes == 1 else f"{plan.label}x{nodes}-{fabric}"
    meta = {"source": f"rocm-smi --showtopo output {path}"}
    return build_cluster(plan, nodes, fabric, spines, name, meta)
