"""What a simulation returns: :class:`SimResult` (times, bandwidths, the timeline of every hop
and each link's busy time)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule.compact import CompactSchedule
from ..schedule.ir import Schedule


@dataclass
class SimResult:
    schedule: Schedule | CompactSchedule
    size: float
    time_s: float
    per_rank_time_s: np.ndarray
    op_start_s: np.ndarray  # start of each operation's first hop
    op_finish_s: np.ndarray  # arrival (plus reduction) of each operation
    hop_link: np.ndarray  # link of every hop (the timeline)
    hop_op: np.ndarray
    hop_start_s: np.ndarray
    hop_end_s: np.ndarray
    link_busy_s: np.ndarray  # per link id
    order_policy: str
    wall_s: float
    op_cost_s: float = 0.0  # what issuing one operation cost its sender
    quotient: int = 1  # simulated on the quotient by a group of this order (1: explicitly)
    op_orbit: np.ndarray | None = None  # each operation's orbit there (None: explicitly)

    @property
    def algbw(self) -> float:
        """Bytes per second: size / time."""
        return self.size / self.time_s if self.time_s > 0 else float("inf")

    @property
    def busbw(self) -> float:
        return self.algbw * self.schedule.collective.busbw_factor

    @property
    def link_utilisation(self) -> np.ndarray:
        if self.time_s <= 0:
            return np.zeros_like(self.link_busy_s)
        return self.link_busy_s / self.time_s

    @property
    def compact(self) -> bool:
        """Whether a compact schedule was simulated (the arrays are its representatives')."""
        return not isinstance(self.schedule, Schedule)

    @property
    def hops(self) -> int:
        """Link hops of the (explicit) schedule."""
        return int(len(self.hop_link)) * (self.quotient if self.compact else 1)

    def to_dict(self, links: int = 10) -> dict:
        t = self.schedule.topology
        util = self.link_utilisation
        top = np.argsort(-util, kind="stable")[:links]
        return {
            "size_bytes": self.size,
            "time_s": self.time_s,
            "algbw_Bps": self.algbw,
            "busbw_Bps": self.busbw,
            "per_rank_time_s": self.per_rank_time_s.tolist(),
            "ops": self.schedule.num_ops,
            "hops": self.hops,
            "order_policy": self.order_policy,
            "op_cost_s": self.op_cost_s,
            "quotient": self.quotient,
            "busiest_links": [
                {
                    "link": int(l),
                    "src": t.nodes[t.links[l].src].name,
                    "dst": t.nodes[t.links[l].dst].name,
                    "busy_s": float(self.link_busy_s[l]),
                    "utilisation": float(util[l]),
                }
                for l in top
                if util[l] > 0
            ],
            "mean_utilisation_of_used_links": float(util[util > 0].mean())
            if np.any(util > 0)
            else 0.0,
            "sim_wall_s": self.wall_s,
        }


__all__ = ["SimResult"]
