"""Making and removing the testbed's namespaces, veth pairs, routes and ``tc`` shaping.

Every command goes through :func:`_run` (``ip``/``tc`` from iproute2, run as root; many
commands per namespace in one ``ip -batch``);
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
import signal
import subprocess

from ..atomic import check_output_dir, write_text_atomic
from ..errors import CollsynthError
from .wiring import Wiring, check_prefix, mgmt_net

STATE_DIR = os.environ.get("COLLSYNTH_TESTBED_STATE", "/run/collsynth-testbed")
NAME_RE = re.compile(r"^(cs[0-9a-f]{4})[-a-z]")
#: the data queue holds this long at the link's rate...
TBF_QUEUE_S = 0.05
#: ...and at least this many bytes. Accelerator links are lossless (credits, back-pressure),
#: and a lossy emulation is not a test of the simulator: with a 50 ms queue on NDv2's
#: InfiniBand link scaled to 0.5 MB/s (17 packets), 250 KB messages from a few flows overflow
#: it every round trip and TCP stalls in retransmission back-off (a ring AllGather took 6.5x its
#: simulated time; Open MPI's own over 300 s). A queue deeper than what the flows sharing a link
#: keep in flight (one eager message each, at most Open MPI's 4 MiB eager limit) drops nothing
TBF_QUEUE_MIN_BYTES = 4 << 20
#: TCP's minimum retransmission timeout stays between Linux's default and this (see rto_min)
RTO_MIN_FLOOR_S = 0.2
RTO_MIN_CAP_S = 30.0
#: the data links' MTU (Ethernet's: a token bucket holds at least one packet, and a small
#: bucket keeps short messages from passing faster than the rate after an idle spell)
MTU = 1500
#: the shaper's bucket holds this much time at the link's rate (and at least two packets)
TBF_BUCKET_S = 1e-3
#: every shaped interface hands the shaper one packet at a time: with segmentation offload a
#: veth passes TCP super-packets of up to 64 KB, and ``htb`` (like ``tbf``) lets a packet
#: through whenever its bucket is not empty, so a whole super-packet left at once after an idle
#: spell and medium messages crossed a link in no time (see docs/testbed.md)
GSO_OFF = " gso_max_segs 1"


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
    """A fresh prefix: no namespace on this machine uses it, nor its management subnet."""
    used = {m.group(1) for m in map(NAME_RE.match, list_namespaces() + _root_links()) if m}
    nets = {str(mgmt_net(p)) for p in used}
    while True:
        p = f"cs{secrets.token_hex(2)}"
        if p not in used and str(mgmt_net(p)) not in nets:
            return p


def check_state_dir() -> None:
    """Refuse, before any work, a state folder (``COLLSYNTH_TESTBED_STATE``) where the
    testbed's records (``PREFIX.json``) cannot be written."""
    check_output_dir(
        STATE_DIR,
        "the testbed state folder (COLLSYNTH_TESTBED_STATE)",
        owned=lambda name: name.endswith(".json"),
        parents=True,
    )


def up(w: Wiring, shaped: bool = True, netem: bool = False) -> None:
    """Make the namespaces, links, addresses, routes and shaping of ``w`` (``shaped=False``:
    no ``tc``, to measure what the CPU can move; ``netem``: each direction of each link also
    delays its packets by its links' ``alpha / scale``); on any failure, remove everything
    made so far and raise."""
    require_tools()
    check_state_dir()
    try:
        os.makedirs(STATE_DIR, exist_ok=True)
        # the state first: a crash half-way leaves a record that ``down --all`` finds
        write_text_atomic(os.path.join(STATE_DIR, f"{w.prefix}.json"), json.dumps(w.to_dict()))
        _make(w, shaped, netem)
    except BaseException:
        down(w.prefix)
        raise


def _make(w: Wiring, shaped: bool, netem: bool) -> None:
    for ns in w.namespaces:
        _ip(["netns", "add", ns])
    for ns in w.namespaces:  # before any interface exists, so that they inherit it
        keys = {"net/ipv4/conf/all/rp_filter": 0, "net/ipv4/conf/default/rp_filter": 0,
                # no IPv6 chatter (router solicitations) on the shaped links
                "net/ipv6/conf/all/disable_ipv6": 1, "net/ipv6/conf/default/disable_ipv6": 1,
                # a connection idle between two messages keeps its window (no slow start)
                "net/ipv4/tcp_slow_start_after_idle": 0}  # fmt: skip
        if ns in w.forwarding:
            keys["net/ipv4/ip_forward"] = 1
        if shaped:
            keys["net/ipv4/tcp_rto_min_us"] = int(rto_min(w) * 1e6)
        _sysctl(ns, keys)
    root = [f"link add {w.mgmt_bridge} type bridge", f"addr add {w.mgmt_root} dev {w.mgmt_bridge}",
            f"link set {w.mgmt_bridge} up"]  # fmt: skip
    for v in w.veths:
        root.append(f"link add {v.a_if} netns {v.a_ns} type veth peer name {v.b_if} netns {v.b_ns}")
    for ns, root_if, ns_if, _ in w.mgmt:
        root.append(f"link add {root_if} type veth peer name {ns_if} netns {ns}")
        root.append(f"link set {root_if} master {w.mgmt_bridge} up")
    _batch(["ip", "-batch", "-"], root)
    inside: dict[str, list[str]] = {ns: ["link set lo up"] for ns in w.namespaces}
    qdiscs: dict[str, list[tuple[str, float, float]]] = {ns: [] for ns in w.namespaces}
    for v in w.veths:
        for ns, dev, rate, alpha in ((v.a_ns, v.a_if, v.rate_ab, v.alpha_ab),
                                     (v.b_ns, v.b_if, v.rate_ba, v.alpha_ba)):  # fmt: skip
            inside[ns].append(f"link set {dev} mtu {MTU}{GSO_OFF} up")
            qdiscs[ns].append((dev, rate, alpha / w.scale if netem else 0.0))
    for ns, _, ns_if, addr in w.mgmt:
        inside[ns] += [f"addr add {addr} dev {ns_if}", f"link set {ns_if} up"]
    for node, ns in enumerate(w.namespaces):
        me = w.addresses[node]
        inside[ns].append(f"addr add {me}/32 dev {w.home[node]}")
        for dest, dev, via in w.routes.get(ns, []):
            inside[ns].append(f"route add {dest}/32 via {via} dev {dev} onlink src {me}")
    for ns in w.namespaces:
        _batch(["ip", "-n", ns, "-batch", "-"], inside[ns])
        if shaped:
            shape(ns, qdiscs[ns])


def queue_bytes(rate_Bps: float) -> int:
    """The data queue of a link shaped at ``rate_Bps``."""
    return max(int(rate_Bps * TBF_QUEUE_S), TBF_QUEUE_MIN_BYTES)


def rto_min(w: Wiring) -> float:
    """TCP's smallest retransmission timeout in the testbed (seconds): twice the longest a full
    data queue takes to drain, so that a segment waiting in queues is not taken for lost.

    A queue deep enough never to drop (see ``TBF_QUEUE_MIN_BYTES``) holds seconds on a slow
    link; with Linux's 200 ms the first segments of a flow that joins a full queue time out,
    are sent again into the same queue, and the link fills with copies (22 000 retransmitted
    segments in one Open MPI AllGather on NDv2, none of them dropped by a queue)."""
    worst = max((queue_bytes(r) / r for v in w.veths for r in (v.rate_ab, v.rate_ba) if r > 0),
                default=0.0)  # fmt: skip
    return min(max(2 * worst, RTO_MIN_FLOOR_S), RTO_MIN_CAP_S)


def _bucket(rate_Bps: float) -> tuple[int, int]:
    """(bits/s, bucket bytes) of a shaper at ``rate_Bps`` bytes/s."""
    return max(8_000, int(rate_Bps * 8)), max(2 * MTU + 100, int(rate_Bps * TBF_BUCKET_S))


def shape(ns: str, devs: list[tuple[str, float, float]]) -> None:
    """Shape the egress of each (interface, bytes/s, delay in seconds) in ``ns`` (one
    ``tc -batch``, see :func:`qdisc_lines`)."""
    if devs:
        _batch(["tc", "-n", ns, "-batch", "-"], qdisc_lines(devs))


def qdisc_lines(devs: list[tuple[str, float, float]]) -> list[str]:
    """The ``tc -batch`` lines of :func:`shape`: per interface an ``htb`` shaper at the link's
    rate with two classes under it, small packets (under 128 bytes: TCP's acknowledgements,
    MPI's control messages) served first and data after them, into a deep byte FIFO; and a
    ``netem`` delay under each class where the delay is positive.

    Small packets go first because on a real accelerator link acknowledgements do not queue
    behind data. Here they would: the reverse direction of a busy slow link holds up to a second
    of data, every flow's round trip stretches by it, and window- or model-based congestion
    control (BBR's window is twice the bandwidth-delay product at the *smallest* round trip)
    stalls to a fraction of the link.
    """
    lines = []
    for dev, rate, delay in devs:
        bits, burst = _bucket(rate)
        limit = queue_bytes(rate)
        cls = f"htb rate {{}}bit ceil {bits}bit burst {burst} cburst {burst} quantum {MTU + 100}"
        lines += [
            f"qdisc add dev {dev} root handle 1: htb default 20",
            f"class add dev {dev} parent 1: classid 1:1 htb rate {bits}bit ceil {bits}bit "
            f"burst {burst} cburst {burst}",
            f"class add dev {dev} parent 1:1 classid 1:10 {cls.format(max(8_000, bits // 10))} "
            "prio 0",
            f"class add dev {dev} parent 1:1 classid 1:20 "
            f"{cls.format(max(8_000, bits - bits // 10))} prio 1",
            # the IPv4 total length (bytes 2-3 of the header) under 128
            f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match u16 0x0000 0xff80 at 2 "
            "flowid 1:10",
        ]
        for leaf, fifo in (("10", "pfifo limit 1000"), ("20", f"bfifo limit {limit}")):
            if delay > 0:  # packets: the delay line must hold a whole window in flight
                fifo = f"netem delay {delay * 1e6:.0f}us limit 10000"
            lines.append(f"qdisc add dev {dev} parent 1:{leaf} handle {leaf}: {fifo}")
    return lines


def netem_available(prefix: str) -> bool:
    """Whether this kernel has ``netem`` (tried on the loopback of a scratch namespace named
    with ``prefix``, removed at once)."""
    ns = f"{check_prefix(prefix)}-probe"
    try:
        _run(["ip", "netns", "add", ns])
        _run(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
        return True
    except CollsynthError:
        return False
    finally:
        _run(["ip", "netns", "delete", ns], ok_missing=True)


def down(prefix: str) -> list[str]:
    """Kill the processes left inside the testbed ``prefix``, then remove every namespace and
    root-namespace link named with it; the names removed."""
    check_prefix(prefix)
    kill_processes(prefix)
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


def kill_processes(prefix: str) -> list[int]:
    """SIGKILL every process still inside a namespace of testbed ``prefix``; their pids."""
    check_prefix(prefix)
    pids: list[int] = []
    for ns in list_namespaces():
        if ns.startswith(prefix + "-"):
            out = _run(["ip", "netns", "pids", ns], ok_missing=True)
            pids += [int(x) for x in out.split() if x.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids


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


def tcp_retransmits(namespaces: list[str]) -> int:
    """TCP segments sent again so far, summed over ``namespaces`` (from each one's
    /proc/net/snmp): a shaped link that drops, or a retransmission timer that fires while a
    segment still waits in a queue, shows here."""
    total = 0
    for ns in namespaces:
        text = _run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"])
        rows = [line.split() for line in text.splitlines() if line.startswith("Tcp:")]
        if len(rows) >= 2 and "RetransSegs" in rows[0]:
            total += int(rows[1][rows[0].index("RetransSegs")])
    return total


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


def _batch(cmd: list[str], lines: list[str]) -> None:
    """One ``ip -batch -`` (or ``tc -batch -``) run: many commands in one process."""
    _run(cmd, stdin="\n".join(lines) + "\n")


def _sysctl(ns: str, keys: dict[str, int]) -> None:
    """Set kernel parameters inside ``ns`` (written to /proc/sys: no procps needed)."""
    script = "; ".join(
        f"if [ -e /proc/sys/{k} ]; then echo {int(v)} > /proc/sys/{k}; fi" for k, v in keys.items()
    )
    _run(["ip", "netns", "exec", ns, "sh", "-c", script])


def _run(cmd: list[str], ok_missing: bool = False, stdin: str | None = None) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, input=stdin)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CollsynthError(f"{' '.join(cmd)}: {e}") from None
    if p.returncode != 0:
        if ok_missing:
            return ""
        why = " ".join(p.stderr.split()) or f"exit status {p.returncode}"
        raise CollsynthError(f"{' '.join(cmd)} failed: {why}")
    return p.stdout
