"""Symmetry aggregation of the multicast MILP: one commodity per orbit.

TE-CCL's MILP has a flow column per chunk, link and epoch, so a 32-GPU AllGather with fast
epochs has hundreds of thousands of columns. Fabrics such as ``dgx2:chassis=2`` have a group
``G`` of automorphisms (permutations of nodes that map links onto links with the same
bandwidth and alpha, :func:`collsynth.synth.forestcoll.symmetry.automorphisms`) acting freely
on the ranks. When the collective's chunks are also permuted by ``G`` (AllGather: chunk ``j``
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

from ...topology.model import Topology
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
    from ..forestcoll.symmetry import automorphisms

    t = topology
    got = automorphisms(t)
    if got is None:
        return None
    P, Lp = (np.asarray(a, dtype=np.int64) for a in got)
    # the grid derives from bandwidth and alpha, which the group keeps; check it anyway
    for arr in (grid.delay, grid.window, grid.per_window, grid.alpha_ep):
        if not np.array_equal(arr[Lp], np.broadcast_to(arr, Lp.shape)):
            return None
    if not np.array_equal(t.kind_codes[P], np.broadcast_to(t.kind_codes, P.shape)):
        return None
    R = t.rank_of_node[P[:, t.compute_nodes]]  # (G, ranks)
    image = _commodity_images(com, R)
    if image is None:
        return None
    reps: list[int] = []
    first = np.full(len(com), -1, dtype=np.int64)
    for q in range(len(com)):
        if first[q] < 0:
            first[image[q]] = len(reps)
            reps.append(q)
    reps_a = np.array(reps, dtype=np.int64)
    link_class, weight = _link_orbits(Lp)
    return Symmetry(P, Lp, R, reps_a, image[reps_a], link_class, weight)


def _commodity_images(com: Commodities, R: np.ndarray) -> np.ndarray | None:
    """``image[q, g]``: the commodity with source ``g(src q)`` and destinations ``g(dests q)``
    (the i-th such commodity for the i-th; None if some has no image)."""
    by_key: dict[tuple, list[int]] = {}
    pos = np.zeros(len(com), dtype=np.int64)
    for q in range(len(com)):
        key = (int(com.src[q]), tuple(sorted(com.dests[q].tolist())))
        lst = by_key.setdefault(key, [])
        pos[q] = len(lst)
        lst.append(q)
    image = np.empty((len(com), len(R)), dtype=np.int64)
    for q in range(len(com)):
        for g in range(len(R)):
            key = (int(R[g, com.src[q]]), tuple(sorted(R[g, com.dests[q]].tolist())))
            got = by_key.get(key)
            if got is None or len(got) <= pos[q]:
                return None
            image[q, g] = got[pos[q]]
    return image


def _link_orbits(Lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orbit id of every link (numbered by smallest member) and ``|G| / |orbit|``."""
    L = Lp.shape[1]
    cls = np.full(L, -1, dtype=np.int64)
    size: list[int] = []
    for l in range(L):
        if cls[l] < 0:
            members = np.unique(Lp[:, l])
            cls[members] = len(size)
            size.append(len(members))
    weight = Lp.shape[0] / np.array(size, dtype=np.float64)[cls]
    return cls, weight


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
    topology: Topology, grid: EpochGrid, schedule, sym: Symmetry, com: Commodities
) -> tuple[list[EpochOp], int] | None:
    """A *symmetric* epoch placement of a heuristic schedule (the warm start and horizon of
    the symmetric model): the schedule's operations on the representatives' chunks, each
    placed with all its images at the earliest epoch where its input has arrived and every
    image fits the window capacities (images may share a link). Two list orders (the
    schedule's, and by tree depth); the representatives' ops of the one that finishes first,
    with its completion epoch, or None when the schedule does not reach every destination
    of the representatives."""
    from .lower import _LinkUsage

    t = topology
    d = grid.delay
    reps = {int(com.chunk[q]) for q in sym.reps.tolist()}
    mine = [i for i in range(schedule.num_ops) if int(schedule.chunk[i]) in reps]
    depth = np.zeros(schedule.num_ops, dtype=np.int64)
    for i in range(schedule.num_ops):
        deps = schedule.deps(i)
        if len(deps):
            depth[i] = depth[deps].max() + 1
    best: tuple[list[EpochOp], int] | None = None
    for order in (mine, sorted(mine, key=lambda i: (int(depth[i]), i))):
        use = _LinkUsage(grid, len(t.links))
        arrive: dict[int, int] = {}
        pos: dict[int, int] = {}
        ops: list[EpochOp] = []
        for i in order:
            route = [int(x) for x in schedule.route(i)]
            deps = [int(x) for x in schedule.deps(i)]
            if any(x not in arrive for x in deps):
                return None  # (a dependency on another chunk: not a copy tree)
            offs = np.concatenate(([0], np.cumsum(d[route])[:-1])).astype(np.int64).tolist()
            images = [[int(sym.link_perm[g][l]) for l in route] for g in range(sym.order)]
            k = max((arrive[x] for x in deps), default=0)
            while not _fits_all(use, images, k, offs):
                k += 1
            arr = k + offs[-1] + int(d[route[-1]])
            arrive[i] = arr
            pos[i] = len(ops)
            dep = pos[deps[0]] if deps else -1
            ops.append(
                EpochOp(
                    int(schedule.chunk[i]),
                    int(schedule.src[i]),
                    int(schedule.dst[i]),
                    tuple(route),
                    k,
                    arr,
                    dep,
                )  # fmt: skip
            )
        done = max(arrive.values(), default=0)
        if best is None or done < best[1]:
            best = (ops, done)
    return best


def _fits_all(use, images: list[list[int]], k: int, offs: list[int]) -> bool:
    """Book every image at epoch ``k`` if all fit together (else book nothing)."""
    use._room(k + max(offs) + int(use.win.max()) + 2)
    for route in images:
        use.add(route, k, offs)
    ok = True
    for route in images:
        for l, off in zip(route, offs):
            kk = k + off
            w = int(use.win[l])
            lo = max(0, kk - w + 1)
            c = np.concatenate(([0], np.cumsum(use.usage[l, lo : kk + w])))
            if (
                max(c[j - lo + 1] - c[max(lo, j - w + 1) - lo] for j in range(kk, kk + w))
                > (use.cap[l])
            ):
                ok = False
                break
        if not ok:
            break
    if not ok:
        for route in images:
            for l, off in zip(route, offs):
                use.usage[l, k + off] -= 1
    return ok
