"""The emulated testbed's wiring: the plan (no root needed) and real namespaces (root only)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys

import pytest

from collsynth.cli import main
from collsynth.errors import CollsynthError
from collsynth.testbed import plan_wiring
from collsynth.topology import load_topology

TESTBED_NET = ipaddress.ip_network("198.18.0.0/15")


def _addrs(w):
    out = [a for v in w.veths for a in (v.a_addr, v.b_addr) if a]
    return out + [m[3] for m in w.mgmt]


def test_ring_plan_one_subnet_per_link():
    w = plan_wiring(load_topology("ring:n=4"), 1e-3, "cs0001")
    assert w.namespaces == [f"cs0001-r{r}" for r in range(4)]
    assert len(w.veths) == 4 and not w.bridges
    subnets = {ipaddress.ip_interface(v.a_addr).network for v in w.veths}
    assert len(subnets) == 4  # its own subnet per link: the route to a neighbour is that link
    for v in w.veths:
        assert ipaddress.ip_interface(v.a_addr).network == ipaddress.ip_interface(v.b_addr).network
        assert v.rate_ab == pytest.approx(50e9 * 1e-3) and v.rate_ba == v.rate_ab
    assert all(ipaddress.ip_interface(a).ip in TESTBED_NET for a in _addrs(w))
    assert all(len(name) <= 15 for v in w.veths for name in (v.a_if, v.b_if))


def test_switched_plan_bridges_and_shared_subnets():
    t = load_topology("dgx_a100:nodes=2")
    w = plan_wiring(t, 1e-4, "cs0002")
    assert len(w.namespaces) == t.num_nodes and len(w.bridges) == t.num_switches
    pairs = {tuple(sorted((int(link.src), int(link.dst)))) for link in t.links}
    assert len(w.veths) == len(pairs)
    for v in w.veths:  # a rank's port on a switch has an address, the bridge port none
        assert (v.a_addr is None) == (v.a_ns in w.bridges)
        assert (v.b_addr is None) == (v.b_ns in w.bridges)
    assert len(w.mgmt) == t.num_ranks
    assert all(ipaddress.ip_interface(a).ip in TESTBED_NET for a in _addrs(w))
    assert len(set(_addrs(w))) == len(_addrs(w))


@pytest.mark.parametrize("scale,prefix", [(0, "cs0003"), (-1, "cs0003"), (1e-3, "xx0003")])
def test_bad_plans_are_refused(scale, prefix):
    with pytest.raises(CollsynthError):
        plan_wiring(load_topology("ring:n=4"), scale, prefix)


def _root_ok() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "network namespaces not permitted"
    return None


root = pytest.mark.skipif(_root_ok() is not None, reason=str(_root_ok()))


def _namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.startswith(prefix)]


@root
def test_up_shapes_links_connects_neighbours_and_down_removes_everything():
    from collsynth.testbed import netns

    prefix = netns.new_prefix()
    w = plan_wiring(load_topology("ring:n=4"), 1e-3, prefix)
    try:
        netns.up(w)
        assert sorted(_namespaces(prefix)) == sorted(w.namespaces)
        v = w.veths[0]
        qd = subprocess.run(
            ["tc", "-n", v.a_ns, "qdisc", "show", "dev", v.a_if], capture_output=True, text=True
        ).stdout
        assert "tbf" in qd and "400Mbit" in qd  # 50 GB/s x 1e-3 = 50 MB/s = 400 Mbit/s
        # a TCP connection over the link, from one rank's namespace to its neighbour's
        b_ip = str(ipaddress.ip_interface(v.b_addr).ip)
        server = subprocess.Popen(
            ["ip", "netns", "exec", v.b_ns, sys.executable, "-c",
             f"import socket; s=socket.create_server(('{b_ip}', 5000)); c,_=s.accept(); "
             "c.sendall(c.recv(5))"],
        )  # fmt: skip
        client = (
            f"import socket,time\nfor _ in range(100):\n    try:\n"
            f"        c=socket.create_connection(('{b_ip}', 5000), timeout=2); break\n"
            "    except OSError: time.sleep(0.05)\nc.sendall(b'hello'); print(c.recv(5).decode())"
        )
        got = subprocess.run(
            ["ip", "netns", "exec", v.a_ns, sys.executable, "-c", client],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        server.wait(timeout=10)
        assert got.stdout.strip() == "hello", got.stderr
    finally:
        gone = netns.down(prefix)
    assert _namespaces(prefix) == [] and gone
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert prefix not in links


@root
def test_a_failed_up_leaves_nothing(monkeypatch):
    from collsynth.testbed import netns

    prefix = netns.new_prefix()
    w = plan_wiring(load_topology("ring:n=4"), 1e-3, prefix)
    real = netns.shape
    calls = []

    def failing(ns, dev, rate):
        calls.append(dev)
        if len(calls) == 3:
            raise CollsynthError("injected failure")
        real(ns, dev, rate)

    monkeypatch.setattr(netns, "shape", failing)
    with pytest.raises(CollsynthError, match="injected"):
        netns.up(w)
    assert _namespaces(prefix) == []


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
    assert _namespaces(prefix) == []
