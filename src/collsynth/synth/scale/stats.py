"""Link statistics for SCALE-CCL re-planning: bandwidth, propagation delay, queue occupancy.

A :class:`LinkStats` holds, for every link of one topology, the sampled bandwidth (bytes/s),
propagation delay alpha (s) and queue occupancy (bytes already waiting on the link when the
collective starts). Links a statistics file does not mention keep the topology's values and an
empty queue.

JSON form (``LinkStats.to_dict`` / ``from_dict``; values may be numbers in base units or
strings with units such as ``"12.5GB/s"``, ``"750us"``, ``"4MB"``)::

    {"format": "collsynth-link-stats", "version": 1, "topology": "wan_d3g8",
     "links": [{"link": 52, "src": "dc0.router", "dst": "dc1.router",
                "bandwidth": 1.25e10, "alpha": 7.5e-4, "queue": 0}, ...]}

A link is named by ``link`` (its id) or by ``src`` and ``dst`` node names (enough when exactly
one link joins them). Any problem is a one-line :class:`CollsynthError`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CollsynthError
from ...topology.model import Link, Topology
from ...units import BUFFER, LATENCY, parse_bandwidth, parse_size, parse_time

FORMAT = "collsynth-link-stats"


@dataclass(frozen=True)
class LinkStats:
    """Per-link statistics of one topology (arrays indexed by link id)."""

    bandwidth: np.ndarray  # bytes/s
    alpha: np.ndarray  # seconds
    queue: np.ndarray  # bytes waiting on the link at time 0

    @classmethod
    def from_topology(cls, topology: Topology) -> LinkStats:
        """The topology's own values, empty queues."""
        return cls(
            topology.link_bw.copy(), topology.link_alpha.copy(), np.zeros(len(topology.links))
        )

    # ------------------------------------------------------------------ derived
    def check(self, topology: Topology) -> None:
        """One-line error unless the arrays fit ``topology`` and hold valid values."""
        m = len(topology.links)
        for name in ("bandwidth", "alpha", "queue"):
            if len(getattr(self, name)) != m:
                raise CollsynthError(
                    f"link statistics have {len(getattr(self, name))} "
                    f"{name} values but topology {topology.name!r} has {m} links"
                )
        if not np.all(np.isfinite(self.bandwidth) & (self.bandwidth > 0)):
            lid = int(np.flatnonzero(~(np.isfinite(self.bandwidth) & (self.bandwidth > 0)))[0])
            raise CollsynthError(f"link statistics: bandwidth of link {lid} must be positive")
        for name in ("alpha", "queue"):
            v = getattr(self, name)
            bad = ~(np.isfinite(v) & (v >= 0))
            if bad.any():
                lid = int(np.flatnonzero(bad)[0])
                raise CollsynthError(
                    f"link statistics: {name} of link {lid} must be a non-negative number"
                )

    def apply(self, topology: Topology) -> Topology:
        """A copy of ``topology`` whose links carry these bandwidths and delays."""
        self.check(topology)
        links = [
            Link(
                l.id,
                l.src,
                l.dst,
                float(self.bandwidth[l.id]),
                float(self.alpha[l.id]),
                l.cls,
                l.lanes,
            )
            for l in topology.links
        ]
        return Topology(
            topology.name, list(topology.nodes), links, meta={**topology.meta, "link_stats": True}
        )

    def queue_delay(self) -> np.ndarray:
        """Seconds each link needs to drain its queue before it is free."""
        return self.queue / self.bandwidth

    def perturbed(
        self,
        seed: int,
        bw_spread: float = 0.3,
        alpha_spread: float = 0.3,
        classes: tuple[str, ...] | None = None,
        topology: Topology | None = None,
    ) -> LinkStats:
        """Statistics with every bandwidth and delay multiplied by a seeded random factor,
        uniform in ``[1 - spread, 1 + spread]`` (only links of ``classes`` when given, which
        needs ``topology``)."""
        if not (0 <= bw_spread < 1 and 0 <= alpha_spread < 1):
            raise CollsynthError("perturbation spreads must be in [0, 1)")
        rng = np.random.default_rng(seed)
        m = len(self.bandwidth)
        fb = rng.uniform(1 - bw_spread, 1 + bw_spread, m)
        fa = rng.uniform(1 - alpha_spread, 1 + alpha_spread, m)
        if classes is not None:
            if topology is None:
                raise CollsynthError("perturbed(classes=...) needs the topology")
            sel = np.array([l.cls in classes for l in topology.links])
            fb = np.where(sel, fb, 1.0)
            fa = np.where(sel, fa, 1.0)
        return LinkStats(self.bandwidth * fb, self.alpha * fa, self.queue.copy())

    # ------------------------------------------------------------------ JSON
    def to_dict(self, topology: Topology) -> dict:
        """The JSON form: every link by id and end names, in base units."""
        self.check(topology)
        names = [nd.name for nd in topology.nodes]
        return {
            "format": FORMAT,
            "version": 1,
            "topology": topology.name,
            "links": [
                {
                    "link": l.id,
                    "src": names[l.src],
                    "dst": names[l.dst],
                    "bandwidth": float(self.bandwidth[l.id]),
                    "alpha": float(self.alpha[l.id]),
                    "queue": float(self.queue[l.id]),
                }
                for l in topology.links
            ],
        }

    @classmethod
    def from_dict(cls, data: Any, topology: Topology, source: str = "link statistics") -> LinkStats:
        """Statistics from their JSON form (unlisted links keep the topology's values)."""
        if isinstance(data, list):
            entries = data
        elif isinstance(data, dict):
            fmt = data.get("format", FORMAT)
            if fmt != FORMAT:
                raise CollsynthError(f"{source}: format {fmt!r} is not {FORMAT!r}")
            name = data.get("topology")
            if name is not None and name != topology.name:
                raise CollsynthError(
                    f"{source}: they are for topology {name!r}, not {topology.name!r}"
                )
            links = data.get("links")
            if not isinstance(links, list):
                raise CollsynthError(f"{source}: 'links' must be a list of link entries")
            entries = links
        else:
            raise CollsynthError(f"{source}: expected a JSON object with a 'links' list")
        out = cls.from_topology(topology)
        bw, alpha, queue = out.bandwidth, out.alpha, out.queue
        seen: set[int] = set()
        for i, e in enumerate(entries):
            where = f"{source}: links[{i}]"
            if not isinstance(e, dict):
                raise CollsynthError(f"{where} is not an object")
            unknown = set(e) - {"link", "src", "dst", "bandwidth", "bw", "alpha", "delay", "queue"}
            if unknown:
                raise CollsynthError(f"{where}: unknown field {sorted(unknown)[0]!r}")
            lid = _link_id(e, topology, where)
            if lid in seen:
                raise CollsynthError(f"{where}: link {lid} is listed twice")
            seen.add(lid)
            if "bandwidth" in e or "bw" in e:
                v = parse_bandwidth(
                    e["bandwidth"] if "bandwidth" in e else e["bw"], f"{where} bandwidth"
                )
                if not (math.isfinite(v) and v > 0):
                    raise CollsynthError(f"{where}: bandwidth must be positive")
                bw[lid] = v
            if "alpha" in e or "delay" in e:
                v = parse_time(
                    e["alpha"] if "alpha" in e else e["delay"], f"{where} alpha", LATENCY
                )
                if not (math.isfinite(v) and v >= 0):
                    raise CollsynthError(f"{where}: alpha must be a non-negative time")
                alpha[lid] = v
            if "queue" in e:
                v = parse_size(e["queue"], f"{where} queue", BUFFER)
                if not (math.isfinite(v) and v >= 0):
                    raise CollsynthError(f"{where}: queue must be a non-negative size")
                queue[lid] = v
        return out

    def save(self, path: str, topology: Topology) -> None:
        """Write the JSON form to ``path`` (atomically)."""
        from ...atomic import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(topology), indent=1) + "\n")

    @classmethod
    def load(cls, path: str, topology: Topology) -> LinkStats:
        """Read statistics of ``topology`` from the JSON file ``path`` (within the input
        limits of :mod:`collsynth.files`)."""
        from ...files import read_structured

        data = read_structured(path)
        return cls.from_dict(data, topology, f"link statistics {path!r}")


def _link_id(e: dict, topology: Topology, where: str) -> int:
    """The link an entry names, by ``link`` id or by ``src``/``dst`` node names."""
    m = len(topology.links)
    if "link" in e:
        lid = e["link"]
        if isinstance(lid, bool) or not isinstance(lid, int) or not 0 <= lid < m:
            raise CollsynthError(
                f"{where}: link {lid!r} is not a link id of {topology.name!r} (0..{m - 1})"
            )
        if "src" in e or "dst" in e:
            l = topology.links[lid]
            for end, node in (("src", l.src), ("dst", l.dst)):
                if end in e and e[end] != topology.nodes[node].name:
                    raise CollsynthError(
                        f"{where}: link {lid} has {end} "
                        f"{topology.nodes[node].name!r}, not {e[end]!r}"
                    )
        return int(lid)
    if "src" in e and "dst" in e:
        for end in ("src", "dst"):
            if not isinstance(e[end], str) or not topology.has_node(e[end]):
                raise CollsynthError(
                    f"{where}: {end} {e[end]!r} is not a node of {topology.name!r}"
                )
        ids = topology.links_between(topology.index(e["src"]), topology.index(e["dst"]))
        if len(ids) != 1:
            raise CollsynthError(
                f"{where}: {len(ids)} links join {e['src']} and {e['dst']}; name it by 'link' id"
            )
        return int(ids[0])
    raise CollsynthError(f"{where}: name the link by 'link' id or by 'src' and 'dst'")
