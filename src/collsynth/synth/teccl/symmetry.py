"""Symmetry aggregation of the multicast MILP: one commodity per orbit.

TE-CCL's MILP has a flow column per chunk, link and epoch, so a 32-GPU AllGather with fast
epochs has hundreds of thousands of columns. Fabrics such as ``dgx2:chassis=2`` have a group
``G`` of automorphisms (permutations of nodes that map links onto links with the same
bandwidth and alpha, :func:`collsynth.topology.symmetry.automorphisms`) acting freely on the
ranks. When the collective's chunks are also permuted by ``G`` (AllGather: chunk ``j``
of rank ``s`` goes to chunk ``j`` of rank ``g(s)``), the model keeps only one commodity per
orbit and assumes every other one does the same thing mapped by its group element: the
*symmetric* schedules, ``f[g q, g l, k] = f[q, l, k]``.

* The per-commodity rows (buffers, sends, switches) of a representative are those of the full
  model; the images' rows follow by symmetry.
* Capacity is shared: on link ``l`` the images of every representative flow on links of
  ``l``'s orbit ``O`` land ``|G| / |O|`` times each, so one row per link *orbit* and epoch
  window bounds ``(|G| / |O|) x`` (representative flows on ``O``) by the link's capacity.

Columns and rows shrink by about ``|G|`` (16 on ``dgx2:chassis=2``). The restriction is
exact for the LP relaxation (averaging any solution over ``G`` gives a symmetric one with
the same objective) but not for integer solutions: the MIP gap HiGHS reports is within
symmetric schedules, so the caller measures the final makespan against bounds valid for
every schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...schedule.ir import Schedule
from ...topology.model import Topology
from ...topology.symmetry import (
    automorphisms,
    is_invariant,
    orbit_ids,
    rank_permutations,
    representatives,
)
from . import lower as _lower
from .common import Commodities, EpochOp
from .epochs import EpochGrid


@dataclass(frozen=True)
class Symmetry:
    """A group acting on the MILP: ``G`` permutations of nodes, links and ranks (identity
    first), the representative commodities and where each lands under each element."""

    node_perm: np.ndarray  # (G, nodes)
    link_perm: np.ndarray  # (G, links)
    rank_perm: np.ndarray  # (G, ranks)
    reps: np.ndarray  # indices of the representative commodities (into the full set)
    image: np.ndarray  # (reps, G): full commodity index of g(rep)
    link_class: np.ndarray  # (links,) orbit id of each link
    weight: np.ndarray  # (links,) |G| / |orbit|: images landing on each link of the orbit

    @property
    def order(self) -> int:
        return len(self.node_perm)

    def representatives(self, com: Commodities) -> Commodities:
        """The commodities the aggregated model keeps."""
        r = self.reps.tolist()
        return Commodities(com.chunk[self.reps], com.src[self.reps], [com.dests[q] for q in r])

    def to_dict(self, com: Commodities) -> dict:
        return {
            "group_order": self.order,
            "commodities": len(self.reps),
            "of": len(com),
            "link_orbits": int(self.link_class.max()) + 1 if len(self.link_class) else 0,
        }


def find(topology: Topology, com: Commodities, grid: EpochGrid) -> Symmetry | None:
    """The symmetry of ``(topology, commodities, epoch grid)``, or None when the fabric has
    no usable automorphism group or the chunks are not permuted by it."""
    t = topology
    got = automorphisms(t)
    if got is None:
        return None
    node_perms, link_perms = (np.asarray(a, dtype=np.int64) for a in got)
    # the grid derives from bandwidth and alpha, which the group keeps; check it anyway
    for per_link in (grid.delay, grid.window, grid.per_window, grid.alpha_ep):
        if not is_invariant(per_link, link_perms):
            return None
    if not is_invariant(t.kind_codes, node_perms):
        return None
    rank_perms = rank_permutations(t, node_perms)  # (G, ranks)
    image = _commodity_images(com, rank_perms)
    if image is None:
        return None
    # the images of commodity q are row q of ``image``: its transpose is the group's table
    reps = np.array(representatives(image.T, range(len(com))), dtype=np.int64)
    link_class, weight = _link_orbits(link_perms)
    return Symmetry(node_perms, link_perms, rank_perms, reps, image[reps], link_class, weight)


def _commodity_images(com: Commodities, rank_perms: np.ndarray) -> np.ndarray | None:
    """``image[q, g]``: the commodity with source ``g(src q)`` and destinations ``g(dests q)``
    (the i-th such commodity for the i-th; None if some has no image)."""
    by_key: dict[tuple, list[int]] = {}
    pos = np.zeros(len(com), dtype=np.int64)
    for q in range(len(com)):
        key = (int(com.src[q]), tuple(sorted(com.dests[q].tolist())))
        lst = by_key.setdefault(key, [])
        pos[q] = len(lst)
        lst.append(q)
    image = np.empty((len(com), len(rank_perms)), dtype=np.int64)
    for q in range(len(com)):
        for g in range(len(rank_perms)):
            ranks = rank_perms[g]
            key = (int(ranks[com.src[q]]), tuple(sorted(ranks[com.dests[q]].tolist())))
            got = by_key.get(key)
            if got is None or len(got) <= pos[q]:
                return None
            image[q, g] = got[pos[q]]
    return image


def _link_orbits(link_perms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orbit id of every link (numbered by smallest member) and ``|G| / |orbit|``."""
    link_class, size = orbit_ids(link_perms)
    weight = link_perms.shape[0] / size.astype(np.float64)[link_class]
    return link_class, weight


def expand(sym: Symmetry, com: Commodities, ops: list[EpochOp]) -> list[EpochOp]:
    """The full schedule: the representatives' epoch ops mapped by every group element
    (element by element; dependencies and multicast groups renumbered per image)."""
    rep_of_chunk = {int(com.chunk[q]): i for i, q in enumerate(sym.reps.tolist())}
    n = len(ops)
    ngroups = max((o.group for o in ops), default=-1) + 1
    out: list[EpochOp] = []
    for g in range(sym.order):
        rk, lk = sym.rank_perm[g], sym.link_perm[g]
        for o in ops:
            q = int(sym.image[rep_of_chunk[o.chunk], g])
            out.append(
                EpochOp(
                    int(com.chunk[q]),
                    int(rk[o.src]),
                    int(rk[o.dst]),
                    tuple(int(lk[l]) for l in o.route),
                    o.k0,
                    o.arrive,
                    o.dep + g * n if o.dep >= 0 else -1,
                    o.part,
                    o.group + g * ngroups if o.group >= 0 else -1,
                )
            )
    return out


def greedy_epochs(
    topology: Topology, grid: EpochGrid, schedule: Schedule, sym: Symmetry, com: Commodities
) -> tuple[list[EpochOp], int] | None:
    """A *symmetric* epoch placement of a heuristic schedule (the warm start and horizon of
    the symmetric model): the schedule's operations on the representatives' chunks, each
    placed with all its images at the earliest epoch where its input has arrived and every
    image fits the window capacities (images may share a link). Two list orders (the
    schedule's, and by tree depth); the representatives' ops of the one that finishes first,
    with its completion epoch, or None when an operation depends on another chunk's."""
    reps = {int(com.chunk[q]) for q in sym.reps.tolist()}
    for i in range(schedule.num_ops):
        if any(int(schedule.chunk[x]) != int(schedule.chunk[i]) for x in schedule.deps(i)):
            return None  # (not a copy tree per chunk)
    mine = [i for i in range(schedule.num_ops) if int(schedule.chunk[i]) in reps]
    perms = sym.link_perm

    def images(route: list[int]) -> list[list[int]]:
        return [[int(p[l]) for l in route] for p in perms]

    return _lower.greedy_epochs(topology, grid, schedule, mine, images)
