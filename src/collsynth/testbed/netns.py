"""Making and removing the testbed's namespaces, veth pairs, bridges and ``tc`` shaping.

Every command goes through :func:`_ip`/:func:`_tc` (``ip``/``tc`` from iproute2, run as root);
:func:`up` removes whatever it made when any step fails, and :func:`down` removes exactly the
namespaces and root-namespace links whose names carry the testbed's prefix. The state of each
testbed (its wiring) is kept in ``/run/collsynth-testbed/PREFIX.json``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess

from ..atomic import write_text_atomic
from ..errors import CollsynthError
from .wiring import Wiring, check_prefix

STATE_DIR = os.environ.get("COLLSYNTH_TESTBED_STATE", "/run/collsynth-testbed")
NAME_RE = re.compile(r"^(cs[0-9a-f]{4})[-a-z]")
#: tbf's queue: how long a packet may wait before it is dropped
TBF_LATENCY = "200ms"


def require_tools() -> None:
    """One line (exit status 2) when the testbed cannot run here: not root, or no iproute2."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise CollsynthError(
                f"the testbed needs '{tool}' (Debian/Ubuntu: apt-get install iproute2)"
            )
    if os.geteuid() != 0:
        raise CollsynthError("the testbed needs root (network namespaces and tc)")
    try:
        _run(["ip", "netns", "list"])
    except CollsynthError as e:
        raise CollsynthError(f"network namespaces are not available here: {e}") from None


def new_prefix() -> str:
    """A fresh prefix not used by any namespace on this machine."""
    used = {m.group(1) for m in map(NAME_RE.match, list_namespaces()) if m}
    while True:
        p = f"cs{secrets.token_hex(2)}"
        if p not in used:
            return p


def up(w: Wiring) -> None:
    """Make the namespaces, bridges, links, addresses and shaping of ``w``; on any failure,
    remove everything made so far and raise."""
    require_tools()
    try:
        _make(w)
        os.makedirs(STATE_DIR, exist_ok=True)
        write_text_atomic(os.path.join(STATE_DIR, f"{w.prefix}.json"), json.dumps(w.to_dict()))
    except BaseException:
        down(w.prefix)
        raise


def _make(w: Wiring) -> None:
    for ns in w.namespaces:
        _ip(["netns", "add", ns])
        _ip(["-n", ns, "link", "set", "lo", "up"])
    for ns, br in w.bridges.items():
        _ip(["-n", ns, "link", "add", br, "type", "bridge"])
        _ip(["-n", ns, "link", "set", br, "up"])
    for v in w.veths:
        _ip(["link", "add", v.a_if, "netns", v.a_ns, "type", "veth", "peer", "name", v.b_if,
             "netns", v.b_ns])  # fmt: skip
        for ns, dev, addr, rate in ((v.a_ns, v.a_if, v.a_addr, v.rate_ab),
                                    (v.b_ns, v.b_if, v.b_addr, v.rate_ba)):  # fmt: skip
            if addr is not None:
                _ip(["-n", ns, "addr", "add", addr, "dev", dev])
            elif ns in w.bridges:
                _ip(["-n", ns, "link", "set", dev, "master", w.bridges[ns]])
            _ip(["-n", ns, "link", "set", dev, "up"])
            shape(ns, dev, rate)
    _ip(["link", "add", w.mgmt_bridge, "type", "bridge"])
    _ip(["link", "set", w.mgmt_bridge, "up"])
    for ns, root_if, ns_if, addr in w.mgmt:
        _ip(["link", "add", root_if, "type", "veth", "peer", "name", ns_if, "netns", ns])
        _ip(["link", "set", root_if, "master", w.mgmt_bridge])
        _ip(["link", "set", root_if, "up"])
        _ip(["-n", ns, "addr", "add", addr, "dev", ns_if])
        _ip(["-n", ns, "link", "set", ns_if, "up"])


def shape(ns: str, dev: str, rate_Bps: float) -> None:
    """A token-bucket filter on ``dev``'s egress at ``rate_Bps`` bytes/s."""
    bits = max(8_000, int(rate_Bps * 8))
    burst = max(16_000, int(rate_Bps / 100))  # at least one timer tick's worth (HZ = 100)
    _tc(["-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{bits}bit",
         "burst", str(burst), "latency", TBF_LATENCY])  # fmt: skip


def down(prefix: str) -> list[str]:
    """Remove every namespace and root-namespace link named with ``prefix``; the names removed."""
    check_prefix(prefix)
    gone: list[str] = []
    for ns in list_namespaces():
        if ns.startswith(prefix + "-"):
            _run(["ip", "netns", "delete", ns], ok_missing=True)
            gone.append(ns)
    for dev in _root_links():
        if dev.startswith(prefix):
            _run(["ip", "link", "delete", dev], ok_missing=True)
            gone.append(dev)
    try:
        os.unlink(os.path.join(STATE_DIR, f"{prefix}.json"))
    except OSError:
        pass
    return gone


def down_all() -> list[str]:
    """Remove every testbed on this machine (leftovers of crashed runs included)."""
    prefixes = {m.group(1) for m in map(NAME_RE.match, list_namespaces() + _root_links()) if m}
    if os.path.isdir(STATE_DIR):
        prefixes |= {f[:-5] for f in os.listdir(STATE_DIR) if NAME_RE.match(f[:6] + "-")}
    gone: list[str] = []
    for p in sorted(prefixes):
        gone += down(p)
    return gone


def status() -> list[dict]:
    """The testbeds on this machine: prefix, topology, namespaces present."""
    names = list_namespaces()
    out = []
    prefixes = sorted({m.group(1) for m in map(NAME_RE.match, names) if m})
    for p in prefixes:
        info: dict = {"prefix": p, "namespaces": sum(n.startswith(p + "-") for n in names)}
        try:
            with open(os.path.join(STATE_DIR, f"{p}.json"), encoding="utf-8") as f:
                state = json.load(f)
            info.update(topology=state.get("topology"), scale=state.get("scale"))
        except (OSError, ValueError):
            info["topology"] = None  # a leftover without its state
        out.append(info)
    return out


def list_namespaces() -> list[str]:
    text = _run(["ip", "netns", "list"])
    return [ln.split()[0] for ln in text.splitlines() if ln.strip()]


def _root_links() -> list[str]:
    text = _run(["ip", "-o", "link", "show"])
    names = []
    for ln in text.splitlines():
        parts = ln.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def _ip(args: list[str]) -> None:
    _run(["ip", *args])


def _tc(args: list[str]) -> None:
    _run(["tc", *args])


def _run(cmd: list[str], ok_missing: bool = False) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CollsynthError(f"{' '.join(cmd)}: {e}") from None
    if p.returncode != 0:
        if ok_missing:
            return ""
        why = " ".join(p.stderr.split()) or f"exit status {p.returncode}"
        raise CollsynthError(f"{' '.join(cmd)} failed: {why}")
    return p.stdout
