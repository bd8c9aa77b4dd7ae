"""Epochs: the time grid of the TE-CCL formulation (Liu et al., "Rethinking Machine Learning
Collective Communication as a Multi-Commodity Flow Problem", ACM SIGCOMM 2024, §3.1, and the
epoch durations of TE-CCL's public implementation).

An :class:`EpochGrid` fixes the epoch duration ``tau`` and turns every link into integers:

* ``cap[l]``     chunks link ``l`` moves per epoch, ``bw * tau / chunk_bytes`` (a float);
* ``alpha_ep[l]`` ``ceil(alpha/tau)`` epochs of propagation (0 when ``alpha/tau`` is at most
  ``alpha_threshold``, as TE-CCL does);
* ``beta_ep[l]``  extra epochs a chunk occupies a slow link: ``ceil(1/cap) - 1``;
* ``window[l]`` / ``per_window[l]``: the link carries at most ``per_window`` chunks in any
  ``window = beta_ep + 1`` consecutive epochs (TE-CCL's sliding-window capacity);
* ``delay[l]``   epochs from the start of a send on ``l`` to the epoch from which the receiver
  may use it (see :func:`link_delays`).

Every link keeps its own alpha (heterogeneous alpha everywhere); :func:`sample_alphas` draws
per-link alphas with a fixed seed for experiments (the heterogeneous-alpha setting of
Srinivasan, "A Performance Evaluation of Collective Communication Libraries", MSc project,
University of Victoria, 2026).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CollsynthError
from ...topology.model import Topology, TopologyBuilder
from ...units import parse_time

#: Float slack for ceil/floor of ratios that are integers up to rounding.
_EPS = 1e-9
#: The most epochs one chunk may take to cross a link (latency plus transmission); a shorter
#: epoch would make every model and heuristic grow without bound.
MAX_LINK_EPOCHS = 512


def _ceil(x: np.ndarray | float) -> np.ndarray:
    return np.ceil(np.asarray(x, dtype=np.float64) - _EPS).astype(np.int64)


@dataclass(frozen=True)
class EpochGrid:
    tau: float  # epoch duration used (s)
    expected_tau: float  # before the alpha check
    chunk_bytes: float
    cap: np.ndarray  # chunks per epoch, per link
    alpha_ep: np.ndarray
    beta_ep: np.ndarray
    window: np.ndarray
    per_window: np.ndarray  # whole chunks per window (MILP)
    delay: np.ndarray  # epochs (MILP, whole chunks)
    lp_delay: np.ndarray  # epochs (LP, fluid volumes)
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "tau_s": self.tau,
            "expected_tau_s": self.expected_tau,
            "chunk_bytes": self.chunk_bytes,
            "max_alpha_epochs": int(self.alpha_ep.max()) if len(self.alpha_ep) else 0,
            "max_beta_epochs": int(self.beta_ep.max()) if len(self.beta_ep) else 0,
            **({"note": self.note} if self.note else {}),
        }


def parse_epoch(value: Any) -> str | float:
    """``fast``, ``slow`` or a duration (``2us``, a number of seconds)."""
    if value is None:
        return "fast"
    if isinstance(value, str) and value.strip().lower() in ("fast", "slow"):
        return value.strip().lower()
    t = parse_time(value, "teccl option epoch")
    if t <= 0:
        raise CollsynthError(
            f"teccl option epoch={value!r} must be fast, slow or a positive duration"
        )
    return t


def link_delays(
    topology: Topology, alpha_ep: np.ndarray, beta_ep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(MILP delay, LP delay) in epochs for every link.

    A GPU stores and forwards: a chunk sent on ``l`` from a GPU in epoch ``k`` may be used (sent
    on, or counted as delivered) from epoch ``k + alpha_ep + beta_ep + 1`` (TE-CCL §4.2). A switch
    has no buffer and forwards in the epoch the chunk reaches it; its hop to a GPU is
    cut-through, as in TE-CCL's default ``switch_to_gpu_link_on = false``: it adds only its
    alpha epochs (plus any serialization epochs the out-link needs beyond the slowest in-link,
    so the estimate never undercuts a slower downlink). A switch-to-switch hop costs
    ``alpha_ep + beta_ep + 1`` like a GPU hop (so no zero-delay cycle through switches exists).
    The LP moves fluid volumes no larger than a link's per-epoch capacity, so it has no beta
    term: ``alpha_ep + 1`` (``alpha_ep`` for a switch-to-GPU hop).
    """
    t = topology
    kinds = t.kind_codes
    src_sw = kinds[t.link_src] != 0
    dst_gpu = kinds[t.link_dst] == 0
    delay = alpha_ep + beta_ep + 1
    lp = alpha_ep + 1
    if np.any(src_sw):
        min_in_beta = np.full(t.num_nodes, 0, dtype=np.int64)
        for v in np.flatnonzero(kinds != 0).tolist():
            ins = list(t.in_links[v])
            min_in_beta[v] = int(beta_ep[ins].min()) if ins else 0
        sw_gpu = src_sw & dst_gpu
        extra = np.maximum(0, beta_ep - min_in_beta[t.link_src])
        delay = np.where(sw_gpu, alpha_ep + extra, delay)
        lp = np.where(sw_gpu, alpha_ep, lp)
    return delay.astype(np.int64), lp.astype(np.int64)


def make_grid(
    topology: Topology,
    chunk_bytes: float,
    epoch: Any = "fast",
    multiplier: float = 1.0,
    alpha_threshold: float = 0.1,
    alpha_ratio_max: float = 200.0,
) -> EpochGrid:
    """The epoch grid for chunks of ``chunk_bytes`` (TE-CCL's ``set_epoch_duration``)."""
    if not (chunk_bytes > 0 and math.isfinite(chunk_bytes)):
        raise CollsynthError(f"chunk size {chunk_bytes!r} must be positive")
    if not (multiplier > 0 and math.isfinite(multiplier)):
        raise CollsynthError(f"teccl option epoch_multiplier={multiplier!r} must be positive")
    t = topology
    bw = t.link_bw
    alpha = t.link_alpha
    mode = parse_epoch(epoch)
    if mode == "fast":
        expected = multiplier * chunk_bytes / float(bw.max())
    elif mode == "slow":
        expected = multiplier * chunk_bytes / float(bw.min())
    else:
        expected = float(mode) * multiplier
    tau = expected
    note = ""
    positive = alpha[alpha > 0]
    if alpha_ratio_max and len(positive) and positive.min() / tau > alpha_ratio_max:
        tau = float(positive.min()) / alpha_ratio_max
        note = (
            f"epoch raised from {expected:.4g}s to min alpha / {alpha_ratio_max:g} = "
            f"{tau:.4g}s (TE-CCL's alpha check)"
        )
    cap = bw * tau / chunk_bytes
    ratio = alpha / tau
    worst = float(np.max(ratio + 1.0 / cap)) if len(cap) else 0.0
    if not worst <= MAX_LINK_EPOCHS:
        raise CollsynthError(
            f"teccl: an epoch of {tau:.4g} s is too short: a chunk of {chunk_bytes:.6g} bytes "
            f"needs about {worst:.3g} epochs to cross a link (limit {MAX_LINK_EPOCHS}); use a "
            "longer epoch (epoch=fast or a larger epoch_multiplier)"
        )
    alpha_ep = np.where(ratio > alpha_threshold, _ceil(ratio), 0).astype(np.int64)
    beta_ep = np.maximum(0, _ceil(1.0 / cap) - 1).astype(np.int64)
    window = beta_ep + 1
    per_window = np.maximum(1, np.floor(window * cap + _EPS)).astype(np.int64)
    delay, lp_delay = link_delays(t, alpha_ep, beta_ep)
    return EpochGrid(
        tau,
        expected,
        float(chunk_bytes),
        cap,
        alpha_ep,
        beta_ep,
        window,
        per_window,
        delay,
        lp_delay,
        note,
    )


def sample_alphas(
    topology: Topology,
    seed: int,
    low: float = 0.3e-6,
    high: float = 3e-6,
    classes: set[str] | None = None,
    symmetric: bool = True,
) -> Topology:
    """A copy of ``topology`` whose link alphas are drawn uniformly from ``[low, high]`` seconds.

    Deterministic for a given ``seed``. ``classes`` restricts the draw to links of those class
    labels (others keep their alpha). With ``symmetric`` a link and its reverse (the first link
    back between the same nodes) share one draw, as a physical cable would.
    """
    if not (0 <= low <= high) or not math.isfinite(high):
        raise CollsynthError(f"alpha range [{low!r}, {high!r}] is not 0 <= low <= high")
    t = topology
    rng = np.random.default_rng(int(seed))
    draws = rng.uniform(low, high, size=len(t.links))
    alpha = t.link_alpha.copy()
    done: dict[tuple[int, int], float] = {}
    for l in t.links:
        if classes is not None and l.cls not in classes:
            continue
        key = (l.dst, l.src)
        if symmetric and key in done:
            alpha[l.id] = done.pop(key)
        else:
            alpha[l.id] = float(draws[l.id])
            if symmetric:
                done[(l.src, l.dst)] = alpha[l.id]
    b = TopologyBuilder(
        f"{t.name}-alpha{seed}",
        meta={**t.meta, "alpha_seed": int(seed), "alpha_range_s": [low, high]},
    )
    for nd in t.nodes:
        b.node(nd.name, nd.kind, **nd.attrs)
    for l in t.links:
        b.link(l.src, l.dst, l.bw, float(alpha[l.id]), l.cls, lanes=l.lanes)
    return b.build()
