"""The emulated testbed's wiring plan: namespaces, veth pairs, addresses, routes and rates.

A pure function of the topology and a bandwidth scale (no ``ip`` or ``tc`` runs here), so it is
tested without root. Every node of the topology gets a network namespace: compute nodes
(``PREFIX-rR``, one per rank) and switches or routers (``PREFIX-sV``), which forward IP packets.
Each pair of neighbouring nodes is joined by one veth pair (all the topology's links between
them, both directions, bundled); each direction is shaped on its sending side to the sum of its
links' bandwidths times ``scale``.

Addressing is *routed*, not bridged, so that every path is explicit and loops between switches
(a WAN mesh of routers, a fat tree) cannot make broadcast storms: each node has one address, a
/32 on its first data interface (rank ``r``: ``198.18.0.0/16``'s host ``r + 1``; switch ``v``:
host ``32768 + v``), and every namespace has a host route to every rank through the interface
of its next hop. Next hops come from one shortest-path tree per destination rank, so routes are
consistent and loop-free (a route names its next hop's address, ``onlink``, so ARP asks for
an address that the neighbour owns): transit through switches and routers costs one hop, through a
rank (where the topology has no switched path, as between non-neighbours of a DGX-1) costs
1000, so a rank forwards packets only where nothing else can. collsynth's schedules never rely
on such forwarding (a relay through a GPU is two operations); MPI's own collectives do.

The unshaped management network (MPI's own start-up traffic) is a /23 of 198.19.0.0/16 chosen
by the prefix, on a bridge in the root namespace (its first address) with one veth into every
rank namespace. Names carry
a per-testbed prefix (``cs`` + 4 hex digits) so that ``down`` removes exactly what ``up`` made.
"""

from __future__ import annotations

import heapq
import ipaddress
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import CollsynthError
from ..topology.model import Topology

DATA_NET = ipaddress.IPv4Network("198.18.0.0/16")
MGMT_NET = ipaddress.IPv4Network("198.19.0.0/16")
#: Linux interface names hold at most 15 characters.
IFNAME_MAX = 15
#: The most namespaces one testbed makes (ranks, switches and routers).
MAX_NAMESPACES = 256
#: the cost of forwarding through a rank, against 1 through a switch or router
RANK_TRANSIT = 1000


@dataclass(frozen=True)
class Veth:
    """One veth pair between two namespaces, shaped per direction (bytes/s after scaling)."""

    a_ns: str
    a_if: str
    b_ns: str
    b_if: str
    rate_ab: float
    rate_ba: float
    nodes: tuple[int, int]  # topology node ids (a, b)
    alpha_ab: float = 0.0  # the links' latency (seconds, unscaled; the largest when bundled)
    alpha_ba: float = 0.0


@dataclass
class Wiring:
    """Everything ``up`` makes for one topology, in the order it makes it."""

    prefix: str
    topology: str
    scale: float
    namespaces: list[str] = field(default_factory=list)  # one per node, by node id
    addresses: list[str] = field(default_factory=list)  # one per node, by node id
    home: list[str] = field(default_factory=list)  # the interface holding each node's address
    forwarding: list[str] = field(default_factory=list)  # namespaces that forward packets
    veths: list[Veth] = field(default_factory=list)
    #: per namespace: (destination address, interface, next hop's address) host routes
    routes: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    #: the node path each rank's packets to each other rank take: paths[s][d]
    paths: list[list[tuple[int, ...]]] = field(default_factory=list)
    mgmt_bridge: str = ""
    mgmt_root: str = ""  # the root namespace's address (CIDR) on the management bridge
    mgmt: list[tuple[str, str, str, str]] = field(default_factory=list)  # ns, root if, ns if, addr

    def rank_address(self, topology: Topology, rank: int) -> str:
        return self.addresses[int(topology.node_of_rank(rank))]

    def to_dict(self) -> dict:
        return {
            "prefix": self.prefix,
            "topology": self.topology,
            "scale": self.scale,
            "namespaces": self.namespaces,
            "addresses": self.addresses,
            "veths": [v.__dict__ for v in self.veths],
            "mgmt_bridge": self.mgmt_bridge,
            "mgmt_root": self.mgmt_root,
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
        if topology.is_compute(v):
            r = int(topology.rank_of_node[v])
            w.namespaces.append(f"{prefix}-r{r}")
            w.addresses.append(str(DATA_NET[r + 1]))
        else:
            w.namespaces.append(f"{prefix}-s{v}")
            w.addresses.append(str(DATA_NET[32768 + v]))
    rates: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    alphas: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for link in topology.links:
        a, b = sorted((int(link.src), int(link.dst)))
        way = 0 if link.src == a else 1
        rates[(a, b)][way] += float(link.bw) * scale
        alphas[(a, b)][way] = max(alphas[(a, b)][way], float(link.alpha))
    port: dict[tuple[int, int], str] = {}  # (node, neighbour) -> the node's interface
    for i, ((a, b), (ab, ba)) in enumerate(sorted(rates.items())):
        a_if, b_if = f"{prefix}l{i}a", f"{prefix}l{i}b"
        if len(a_if) > IFNAME_MAX:
            raise CollsynthError(f"too many links for interface names ({len(rates)})")
        al = alphas[(a, b)]
        w.veths.append(
            Veth(w.namespaces[a], a_if, w.namespaces[b], b_if, ab, ba, (a, b), al[0], al[1])
        )
        port[(a, b)], port[(b, a)] = a_if, b_if
    w.home = [""] * n
    for (v, _), dev in sorted(port.items(), key=lambda kv: (kv[0][0], kv[1])):
        w.home[v] = w.home[v] or dev
    if any(not h for h in w.home):
        lone = w.home.index("")
        raise CollsynthError(f"node {topology.nodes[lone].name!r} has no link")
    _plan_routes(topology, w, port)
    w.mgmt_bridge = f"{prefix}mgmt"
    net = mgmt_net(prefix)
    hosts = net.hosts()
    w.mgmt_root = f"{next(hosts)}/{net.prefixlen}"
    for r in range(topology.num_ranks):
        ns = w.namespaces[int(topology.node_of_rank(r))]
        w.mgmt.append((ns, f"{prefix}m{r}a", f"{prefix}m{r}b", f"{next(hosts)}/{net.prefixlen}"))
    return w


def mgmt_net(prefix: str) -> ipaddress.IPv4Network:
    """The management /23 of the testbed ``prefix`` (one of 128 in 198.19.0.0/16)."""
    return list(MGMT_NET.subnets(new_prefix=23))[int(check_prefix(prefix)[2:], 16) % 128]


def next_hops(topology: Topology, dest: int) -> list[int]:
    """For every node, its next hop towards node ``dest`` (-1: none; ``dest`` itself: -1).

    Dijkstra from ``dest`` over the reversed links: entering a switch, a router or ``dest``
    costs 1, forwarding through another rank ``RANK_TRANSIT``; ties go to the lower node id.
    """
    n = topology.num_nodes
    into: list[list[int]] = [[] for _ in range(n)]  # v -> nodes u with a link u -> v
    for link in topology.links:
        into[int(link.dst)].append(int(link.src))
    dist = [float("inf")] * n
    nxt = [-1] * n
    dist[dest] = 0
    heap = [(0.0, dest)]
    while heap:
        d, v = heapq.heappop(heap)
        if d > dist[v]:
            continue
        step = 1 if (v == dest or not topology.is_compute(v)) else RANK_TRANSIT
        for u in sorted(set(into[v])):
            nd = d + step
            if nd < dist[u] or (nd == dist[u] and v < nxt[u]):
                if nd < dist[u]:
                    heapq.heappush(heap, (nd, u))
                dist[u], nxt[u] = nd, v
    return nxt


def _plan_routes(topology: Topology, w: Wiring, port: dict[tuple[int, int], str]) -> None:
    """Host routes to every rank in every namespace, and the paths they make."""
    n = topology.num_nodes
    ranks = [int(topology.node_of_rank(r)) for r in range(topology.num_ranks)]
    w.routes = {ns: [] for ns in w.namespaces}
    hop_of: dict[int, list[int]] = {}
    for d in ranks:
        nxt = next_hops(topology, d)
        hop_of[d] = nxt
        for v in range(n):
            if v != d and nxt[v] >= 0:
                hop = (w.addresses[d], port[(v, nxt[v])], w.addresses[nxt[v]])
                w.routes[w.namespaces[v]].append(hop)
    forwarders = set()
    w.paths = []
    for s in ranks:
        row = []
        for d in ranks:
            path = [s]
            while path[-1] != d:
                nh = hop_of[d][path[-1]]
                if nh < 0:
                    raise CollsynthError(
                        f"{topology.rank_name(int(topology.rank_of_node[s]))} cannot reach "
                        f"{topology.rank_name(int(topology.rank_of_node[d]))}"
                    )
                path.append(nh)
            forwarders.update(path[1:-1])
            row.append(tuple(path))
        w.paths.append(row)
    w.forwarding = [w.namespaces[v] for v in sorted(forwarders)]
