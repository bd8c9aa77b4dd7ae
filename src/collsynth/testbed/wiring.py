"""The emulated testbed's wiring plan: namespaces, veth pairs, addresses and shaping rates.

A pure function of the topology and a bandwidth scale (no ``ip`` or ``tc`` runs here), so it is
tested without root. Every compute node gets a network namespace; every switch or router gets
a namespace holding a Linux bridge. Each pair of neighbouring nodes is joined by one veth pair
(all the topology's links between them, both directions, bundled); each direction is shaped on
its sending side to the sum of its links' bandwidths times ``scale``.

Addresses come only from 198.18.0.0/15 (RFC 2544's range for benchmarking): data links from
198.18.0.0/16, one /30 per rank-to-rank pair and one /24 per switch (the ranks on a switch share
its bridge), and the unshaped management network (MPI's own start-up traffic) from
198.19.0.0/16 on a bridge in the root namespace. Names carry a per-testbed prefix
(``cs`` + 4 hex digits) so that ``down`` removes exactly what ``up`` made.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import CollsynthError
from ..topology.model import NodeKind, Topology

DATA_NET = ipaddress.IPv4Network("198.18.0.0/16")
MGMT_NET = ipaddress.IPv4Network("198.19.0.0/16")
#: Linux interface names hold at most 15 characters.
IFNAME_MAX = 15
#: The most namespaces one testbed makes (ranks, switches and routers).
MAX_NAMESPACES = 256


@dataclass(frozen=True)
class Veth:
    """One veth pair between two namespaces, shaped per direction (bytes/s after scaling)."""

    a_ns: str
    a_if: str
    a_addr: str | None  # CIDR, or None for a bridge port
    b_ns: str
    b_if: str
    b_addr: str | None
    rate_ab: float
    rate_ba: float
    nodes: tuple[int, int]  # topology node ids (a, b)


@dataclass
class Wiring:
    """Everything ``up`` makes for one topology, in the order it makes it."""

    prefix: str
    topology: str
    scale: float
    namespaces: list[str] = field(default_factory=list)  # one per node, by node id
    bridges: dict[str, str] = field(default_factory=dict)  # switch namespace -> bridge name
    veths: list[Veth] = field(default_factory=list)
    mgmt_bridge: str = ""
    mgmt: list[tuple[str, str, str, str]] = field(default_factory=list)  # ns, root if, ns if, addr
    rank_addr: dict[int, list[str]] = field(default_factory=dict)  # rank -> its data addresses

    def to_dict(self) -> dict:
        return {
            "prefix": self.prefix,
            "topology": self.topology,
            "scale": self.scale,
            "namespaces": self.namespaces,
            "bridges": self.bridges,
            "veths": [v.__dict__ for v in self.veths],
            "mgmt_bridge": self.mgmt_bridge,
            "mgmt": self.mgmt,
        }


def check_prefix(prefix: str) -> str:
    if not (len(prefix) == 6 and prefix.startswith("cs") and _is_hex(prefix[2:])):
        raise CollsynthError(f"testbed prefix {prefix!r} is not 'cs' and 4 hex digits")
    return prefix


def _is_hex(s: str) -> bool:
    return all(c in "0123456789abcdef" for c in s)


def plan_wiring(topology: Topology, scale: float, prefix: str) -> Wiring:
    """The wiring of ``topology`` with every bandwidth multiplied by ``scale``."""
    check_prefix(prefix)
    if not scale > 0:
        raise CollsynthError(f"--scale {scale!r} must be positive")
    n = topology.num_nodes
    if n > MAX_NAMESPACES:
        raise CollsynthError(
            f"topology {topology.name!r} has {n} nodes; the testbed makes at most "
            f"{MAX_NAMESPACES} namespaces"
        )
    w = Wiring(prefix, topology.name, float(scale))
    for v in range(n):
        rank = int(topology.rank_of_node[v]) if topology.is_compute(v) else None
        w.namespaces.append(f"{prefix}-r{rank}" if rank is not None else f"{prefix}-s{v}")
        if topology.nodes[v].kind is not NodeKind.COMPUTE:
            w.bridges[w.namespaces[v]] = f"{prefix}br{v}"
    rates: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for link in topology.links:
        a, b = sorted((int(link.src), int(link.dst)))
        rates[(a, b)][0 if link.src == a else 1] += float(link.bw) * scale
    switches = {v for v in range(n) if not topology.is_compute(v)}
    switch_net: dict[int, int] = {}  # switch node -> index of its /24
    next_host: dict[int, int] = defaultdict(lambda: 1)
    pairs = iter(DATA_NET.subnets(new_prefix=30))
    for i, ((a, b), (ab, ba)) in enumerate(sorted(rates.items())):
        a_if, b_if = f"{prefix}l{i}a", f"{prefix}l{i}b"
        if len(a_if) > IFNAME_MAX:
            raise CollsynthError(f"too many links for interface names ({len(rates)})")
        a_sw, b_sw = a in switches, b in switches
        a_addr = b_addr = None
        if not a_sw and not b_sw:
            net = next(pairs)
            if net.network_address >= ipaddress.IPv4Address("198.18.128.0"):
                raise CollsynthError("the testbed ran out of link subnets")
            hosts = list(net.hosts())
            a_addr, b_addr = f"{hosts[0]}/30", f"{hosts[1]}/30"
        elif a_sw != b_sw:  # a rank on a switch: an address in the switch's /24
            sw = a if a_sw else b
            idx = switch_net.setdefault(sw, len(switch_net))
            if idx >= 128:
                raise CollsynthError("the testbed ran out of switch subnets")
            host = next_host[sw]
            next_host[sw] += 1
            if host > 254:
                raise CollsynthError(f"switch node {sw} has more than 254 ranks")
            addr = f"198.18.{128 + idx}.{host}/24"
            if a_sw:
                b_addr = addr
            else:
                a_addr = addr
        w.veths.append(
            Veth(w.namespaces[a], a_if, a_addr, w.namespaces[b], b_if, b_addr, ab, ba, (a, b))
        )
        for node, ad in ((a, a_addr), (b, b_addr)):
            if ad and topology.is_compute(node):
                w.rank_addr.setdefault(int(topology.rank_of_node[node]), []).append(ad)
    w.mgmt_bridge = f"{prefix}mgmt"
    mgmt_hosts = MGMT_NET.hosts()
    next(mgmt_hosts)  # .0.1 stays free
    for r in range(topology.num_ranks):
        ns = w.namespaces[int(topology.node_of_rank(r))]
        w.mgmt.append((ns, f"{prefix}m{r}a", f"{prefix}m{r}b", f"{next(mgmt_hosts)}/16"))
    return w
