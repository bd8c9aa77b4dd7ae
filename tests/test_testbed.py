"""The emulated testbed's wiring: the plan (no root needed) and real namespaces (root only)."""

from __future__ import annotations

import ipaddress
import subprocess
import sys

import pytest

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.testbed import plan_wiring
from collsynth.topology import load_topology
from testbed_helpers import namespaces, root

TESTBED_NET = ipaddress.ip_network("198.18.0.0/15")


def _addrs(w):
    return [f"{a}/32" for a in w.addresses] + [m[3] for m in w.mgmt] + [w.mgmt_root]


def test_ring_plan_one_link_per_neighbour_pair_and_one_address_per_node():
    w = plan_wiring(load_topology("ring:n=4"), 1e-3, "cs0001")
    assert w.namespaces == [f"cs0001-r{r}" for r in range(4)]
    assert len(w.veths) == 4
    for v in w.veths:
        assert v.rate_ab == pytest.approx(50e9 * 1e-3) and v.rate_ba == v.rate_ab
    assert w.addresses == ["198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4"]
    assert all(ipaddress.ip_interface(a).ip in TESTBED_NET for a in _addrs(w))
    assert len(set(_addrs(w))) == len(_addrs(w))
    assert all(len(name) <= 15 for v in w.veths for name in (v.a_if, v.b_if))
    # a neighbour is one hop away; the opposite rank is reached through a forwarding rank
    assert w.paths[0][1] == (0, 1) and len(w.paths[0][2]) == 3
    assert w.forwarding and set(w.forwarding) <= set(w.namespaces)
    # every namespace routes to every other rank, through its next hop's address
    for ns in w.namespaces:
        assert len(w.routes[ns]) == 3


def test_switched_plan_routes_through_switches_only():
    t = load_topology("dgx_a100:nodes=2")
    w = plan_wiring(t, 1e-4, "cs0002")
    assert len(w.namespaces) == t.num_nodes
    pairs = {tuple(sorted((int(link.src), int(link.dst)))) for link in t.links}
    assert len(w.veths) == len(pairs)
    from collsynth.topology.paths import RouteTable

    routes = RouteTable(t)
    relayed = 0
    for s in range(t.num_ranks):  # a rank forwards only where no switched path exists
        for d in range(t.num_ranks):
            inner = w.paths[s][d][1:-1]
            if s != d and routes.has_route(s, d):
                assert all(not t.is_compute(v) for v in inner)
                assert len(w.paths[s][d]) == len(routes.route(s, d)) + 1
            else:
                relayed += any(t.is_compute(v) for v in inner)
    assert relayed  # GPU i of one node reaches GPU j != i of the other through a GPU (rails)
    assert len(w.mgmt) == t.num_ranks
    assert all(ipaddress.ip_interface(a).ip in TESTBED_NET for a in _addrs(w))
    assert len(set(_addrs(w))) == len(_addrs(w))


def test_wan_routers_make_no_loops():
    from collsynth.testbed.wiring import next_hops

    t = load_topology("wan:dcs=3,gpus=2")
    w = plan_wiring(t, 1e-4, "cs0003")
    for d in range(t.num_nodes):
        if not t.is_compute(d):
            continue
        nxt = next_hops(t, d)
        for v in range(t.num_nodes):  # following next hops reaches d without revisiting
            seen, x = set(), v
            while x != d:
                assert x not in seen
                seen.add(x)
                x = nxt[x]
    assert all(len(p) <= t.num_nodes for row in w.paths for p in row)


def test_management_subnets_differ_between_prefixes():
    from collsynth.testbed.wiring import mgmt_net

    assert mgmt_net("cs0001") != mgmt_net("cs0002")
    assert mgmt_net("cs0001").subnet_of(ipaddress.ip_network("198.19.0.0/16"))


@pytest.mark.parametrize("scale,prefix", [(0, "cs0003"), (-1, "cs0003"), (1e-3, "xx0003")])
def test_bad_plans_are_refused(scale, prefix):
    with pytest.raises(CollsynthError):
        plan_wiring(load_topology("ring:n=4"), scale, prefix)


def _json(cmd: list[str]):
    import json

    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def _tcp_exchange(w, src_ns: str, dst_ns: str, dst_ip: str) -> str:
    """One TCP round trip from ``src_ns`` to ``dst_ip`` inside ``dst_ns``; what came back."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", dst_ns, sys.executable, "-c",
         f"import socket; s=socket.create_server(('{dst_ip}', 5000)); c,_=s.accept(); "
         "c.sendall(c.recv(5))"],
    )  # fmt: skip
    client = (
        f"import socket,time\nfor _ in range(100):\n    try:\n"
        f"        c=socket.create_connection(('{dst_ip}', 5000), timeout=2); break\n"
        "    except OSError: time.sleep(0.05)\nc.sendall(b'hello'); print(c.recv(5).decode())"
    )
    try:
        got = subprocess.run(
            ["ip", "netns", "exec", src_ns, sys.executable, "-c", client],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        server.wait(timeout=10)
    finally:
        server.kill()
    return got.stdout.strip() or got.stderr


@root
@pytest.mark.parametrize("spec", ["ring:n=4", "star:n=3"])
def test_up_wires_the_topology_and_down_removes_everything(spec):
    from collsynth.testbed import netns

    topo = load_topology(spec)
    prefix = netns.new_prefix()
    w = plan_wiring(topo, 1e-3, prefix)
    try:
        netns.up(w)
        assert sorted(namespaces(prefix)) == sorted(w.namespaces)
        veths = 0
        for v, ns in enumerate(w.namespaces):
            links = _json(["ip", "-j", "-n", ns, "link", "show"])
            mine = [x for x in links if x["ifname"].startswith(f"{prefix}l")]
            veths += len(mine)
            addrs = _json(["ip", "-j", "-n", ns, "addr", "show"])
            ips = [a["local"] for x in addrs for a in x.get("addr_info", [])
                   if a.get("family") == "inet" and a["local"].startswith("198.18.")]  # fmt: skip
            assert ips == [w.addresses[v]]  # one data address per node, in 198.18.0.0/15
            routes = _json(["ip", "-j", "-n", ns, "route", "show"])
            assert len([r for r in routes if r["dst"].startswith("198.18.")]) == len(w.routes[ns])
            # the shaping rate read back from tc, per interface (bytes/s)
            for x in mine:
                qds = _json(["tc", "-j", "-n", ns, "qdisc", "show", "dev", x["ifname"]])
                want = next(
                    (vv.rate_ab if vv.a_if == x["ifname"] else vv.rate_ba)
                    for vv in w.veths
                    if x["ifname"] in (vv.a_if, vv.b_if)
                )
                assert [q["kind"] for q in qds] == ["htb", "pfifo", "bfifo"]
                assert _htb_rate(ns, x["ifname"]) == pytest.approx(want, rel=2e-3)
        assert veths == 2 * len(w.veths)  # both ends of one pair per pair of neighbours
        # TCP across the testbed: to a neighbour, and to the farthest rank (forwarded)
        far = max(range(topo.num_ranks), key=lambda r: len(w.paths[0][r]))
        for d in (1, far):
            got = _tcp_exchange(w, f"{prefix}-r0", f"{prefix}-r{d}", w.rank_address(topo, d))
            assert got == "hello", got
    finally:
        gone = netns.down(prefix)
    assert namespaces(prefix) == [] and gone
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert prefix not in links


def _htb_rate(ns: str, dev: str) -> float:
    """The rate of the htb class 1:1 on ``dev`` (bytes/s; ``tc`` prints classes as text)."""
    import re

    text = subprocess.run(["tc", "-n", ns, "class", "show", "dev", dev], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    m = re.search(r"class htb 1:1 root rate ([0-9.]+)([KMG]?)bit", text)
    assert m, text
    return float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)] / 8


@root
def test_a_failed_up_leaves_nothing(monkeypatch):
    from collsynth.testbed import netns

    prefix = netns.new_prefix()
    w = plan_wiring(load_topology("ring:n=4"), 1e-3, prefix)
    real = netns.shape
    calls = []

    def failing(ns, devs):
        calls.append(ns)
        if len(calls) == 3:
            raise CollsynthError("injected failure")
        real(ns, devs)

    monkeypatch.setattr(netns, "shape", failing)
    with pytest.raises(CollsynthError, match="injected"):
        netns.up(w)
    assert namespaces(prefix) == []


@root
def test_cli_up_status_down(capsys):
    assert main(["testbed", "up", "-t", "ring:n=3", "--json"]) == 0
    import json

    prefix = json.loads(capsys.readouterr().out)["prefix"]
    try:
        assert main(["testbed", "status", "--json"]) == 0
        beds = json.loads(capsys.readouterr().out)["testbeds"]
        assert any(b["prefix"] == prefix and b["namespaces"] == 3 for b in beds)
    finally:
        assert main(["testbed", "down", prefix]) == 0
    assert namespaces(prefix) == []


def test_links_carry_their_latency_and_netem_sits_inside_the_bucket():
    from collsynth.testbed.netns import qdisc_lines

    t = load_topology("ring:n=4")
    w = plan_wiring(t, 1e-3, "cs0004")
    assert all(v.alpha_ab == pytest.approx(700e-9) for v in w.veths)
    lines = qdisc_lines([("x", 1e6, 0.0007), ("y", 1e6, 0.0)])
    x = [ln for ln in lines if " dev x " in ln]
    y = [ln for ln in lines if " dev y " in ln]
    assert x[0] == "qdisc add dev x root handle 1: htb default 20"
    assert "classid 1:1 htb rate 8000000bit ceil 8000000bit" in x[1]
    # small packets (acknowledgements) first, data after them; both delayed by netem
    assert "flowid 1:10" in x[4] and "prio 0" in x[2] and "prio 1" in x[3]
    assert x[5:] == [
        "qdisc add dev x parent 1:10 handle 10: netem delay 700us limit 10000",
        "qdisc add dev x parent 1:20 handle 20: netem delay 700us limit 10000",
    ]
    assert len(y) == 7 and not any("netem" in ln for ln in y) and "bfifo" in y[-1]


def test_queues_are_deep_and_rto_outlasts_them():
    from collsynth.testbed import netns

    # a slow link's queue holds seconds, and TCP's retransmission timer waits longer
    assert netns.queue_bytes(0.5e6) == netns.TBF_QUEUE_MIN_BYTES
    assert netns.queue_bytes(1e9) == int(1e9 * netns.TBF_QUEUE_S)
    w = plan_wiring(load_topology("ndv2:chassis=2"), 4e-5, "cs0005")
    slowest = min(r for v in w.veths for r in (v.rate_ab, v.rate_ba) if r > 0)
    assert netns.rto_min(w) == pytest.approx(
        min(2 * netns.TBF_QUEUE_MIN_BYTES / slowest, netns.RTO_MIN_CAP_S)
    )
    fast = plan_wiring(load_topology("ring:n=4"), 1.0, "cs0006")
    assert netns.rto_min(fast) == netns.RTO_MIN_FLOOR_S


@root
def test_netem_probe_leaves_nothing_and_latency_mode_follows_it():
    from collsynth.testbed import netns
    from collsynth.testbed.session import Testbed

    prefix = netns.new_prefix()
    have = netns.netem_available(prefix)
    assert namespaces(prefix) == []
    with Testbed(load_topology("ring:n=3"), 1e-3) as tb:
        assert tb.latency == ("netem" if have else "executor")
        assert tb.alpha_delay == (0.0 if have else pytest.approx(1e3))
        if have:
            v = tb.wiring.veths[0]
            qd = subprocess.run(["tc", "-n", v.a_ns, "qdisc", "show", "dev", v.a_if],
                                capture_output=True, text=True).stdout  # fmt: skip
            assert "netem" in qd and "htb" in qd
    assert namespaces(tb.prefix) == []
