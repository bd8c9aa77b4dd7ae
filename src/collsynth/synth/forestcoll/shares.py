"""AllReduce as ReduceScatter and AllGather at once, each on its own share of every link
(:func:`phase_shares`, :func:`share_trees`).

ReduceScatter then AllGather is optimal where every rank's egress equals its ingress: the
first phase is bound by what each rank must send, the second by what it must receive. Where
they differ the two phases are bound by different sides: on two DGX-2 the odd GPUs send over
InfiniBand besides their 125 GB/s into the NVSwitch and the even GPUs receive over it, so
ReduceScatter waits on the even GPUs' 125 GB/s out and AllGather on the odd GPUs' 125 GB/s in,
each phase 1.05x its share of the AllReduce bound (the transmissions bound,
:mod:`collsynth.bound.transmissions`: ``2 (N-1)`` crossings per byte over all the ranks'
egress). Run together, the phases can trade: at the bound every rank sends its ReduceScatter
data at half the *mean* egress (``E/2``; each rank must send ``(N-1)/N`` of its buffer in it)
and receives its AllGather data at ``E/2``, and the rest of its own links carry the other phase.

:func:`phase_shares` writes that down per link: links between ranks give each phase half; a
rank's links into switches give ReduceScatter what its direct links leave of ``E/2``, its links
from switches give AllGather what its direct links leave of ``E/2``, and links between switches
give each half. :func:`share_trees` packs ForestColl's in-trees on the ReduceScatter share and
its out-trees on the AllGather share (the same ``k``); each phase alone then takes the whole
AllReduce time on its share, so the phases must overlap. The lowering is the usual one (a
chunk's broadcast waits for its reduction); :func:`collsynth.synth.order.with_link_orders`
pipelines the phases by groups of chunks (``meta["overlap_phases"]``), which is what makes them
overlap under fair sharing. On two DGX-2 at 1 GB: 1.02-1.03x the bound in the realized model,
against 1.05x for ReduceScatter then AllGather.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ...schedule.trees import TreeForm
from ...topology.model import Topology
from .trees import forestcoll_trees

#: shares within this of one half on every link: the phases are alike, nothing to trade
SHARE_MIN_GAIN = 0.01
#: no phase gets less than this share of a link (nor more than one minus it)
SHARE_FLOOR = 0.05
#: shares are multiples of one over this: ForestColl's ``k`` grows with the denominators of
#: the bandwidth ratios, and a share like 0.44999999999999996 makes it astronomical
SHARE_GRID = 40


def phase_shares(topology: Topology) -> np.ndarray | None:
    """Per link, ReduceScatter's share of its bandwidth (AllGather has the rest), or ``None``
    where the phases have nothing to trade (every share within :data:`SHARE_MIN_GAIN` of one
    half) or a rank has no link into or from a switch (the shares of direct links are fixed
    at one half; the LP trees of :mod:`.lp_trees` serve switch-free fabrics)."""
    t = topology
    ranks = t.compute_nodes
    egress = np.array([t.out_bw(int(v)) for v in ranks])
    half = float(egress.mean()) / 2
    shares = np.full(len(t.links), 0.5)
    for v in ranks.tolist():
        for links, rs_side in ((t.out_links[v], True), (t.in_links[v], False)):
            to_switch = [l for l in links if not t.is_compute(_other(t, l, v))]
            direct = sum(t.links[l].bw for l in links if t.is_compute(_other(t, l, v)))
            cap = sum(t.links[l].bw for l in to_switch)
            if cap <= 0:
                return None
            # the rate this side's phase needs from the switch links: E/2 less what the
            # direct links give it
            want = min(max((half - direct / 2) / cap, SHARE_FLOOR), 1 - SHARE_FLOOR)
            want = round(want * SHARE_GRID) / SHARE_GRID
            for l in to_switch:
                shares[l] = want if rs_side else 1 - want
    if np.all(np.abs(shares - 0.5) <= SHARE_MIN_GAIN * 0.5):
        return None
    return shares


def _other(t: Topology, link: int, v: int) -> int:
    l = t.links[link]
    return int(l.dst if l.src == v else l.src)


def scaled_links(topology: Topology, factor: np.ndarray) -> Topology:
    """``topology`` with every link's bandwidth times ``factor`` (same nodes and link ids),
    ``factor`` on the grid of :data:`SHARE_GRID` (``bw * g / SHARE_GRID``: exact where the
    bandwidths are round)."""
    grid = [round(float(f) * SHARE_GRID) for f in factor]
    links = [replace(l, bw=l.bw * g / SHARE_GRID) for l, g in zip(topology.links, grid)]
    return Topology(topology.name, list(topology.nodes), links, topology.meta)


def share_trees(topology: Topology, shares: np.ndarray) -> tuple[TreeForm, dict[str, Any]]:
    """ForestColl's out-trees on AllGather's share (``1 - shares``; the optimum's ``k``) and
    in-trees on ReduceScatter's (``shares``; the same ``k``), routed on ``topology``'s links:
    the tree form (in-trees first) and ``{"out", "in", "inv_x", "k"}`` as ForestColl reports
    them, ``inv_x`` the slower phase's (they run at once)."""
    out_form, out_opt, out_info = forestcoll_trees(scaled_links(topology, 1 - shares))
    in_form, in_opt, in_info = forestcoll_trees(
        scaled_links(topology, shares), out_opt.k, direction="in"
    )
    form = TreeForm.concat([in_form, out_form])
    return form, {
        "out": out_info,
        "in": in_info,
        "inv_x": max(out_opt.inv_x, in_opt.inv_x),
        "k": out_opt.k,
    }
