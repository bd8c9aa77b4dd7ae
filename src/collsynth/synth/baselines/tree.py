"""``tree`` — NCCL's double binary tree: AllReduce, and Broadcast/Reduce over binary trees.

What it implements (NCCL >= 2.4, Sanders/Speck/Träff's two-tree scheme):

* ranks are numbered along a ring order (ring 0 of :mod:`.ring`'s search: a Hamiltonian cycle
  of the compute graph, chassis kept contiguous), and tree 1 is NCCL's in-order binary tree
  ``ncclGetBtree`` over those positions (position 0 is the root, with a single child);
* tree 2 is NCCL's complement: the mirror image (position p -> n-1-p) for even n, the tree
  shifted by one position for odd n, so most leaves of one tree are inner nodes of the other;
* **AllReduce**: chunk c goes to tree ``c mod 2`` (each tree carries half of the data), is
  reduced up its tree (each rank adds its children's partial sums to its own contribution and
  sends the result to its parent with a ``reduce`` operation) and then broadcast down it;
  the chunks are pipelined: chunk ``p`` of a tree starts at step ``p`` and every operation is
  one step after the ones it depends on;
* **Broadcast** / **Reduce**: NCCL's tree 1 built on the ring order rotated to start at the
  root, and a second tree rooted at the root too, on the other ranks shifted by one position
  (complementary leaves); chunk k goes to tree ``k mod 2``. With ``chunks_per_rank`` C = 1 the
  schedule is for ``with_chunks(2)`` (one chunk per tree); an odd C > 1 is rounded up to even
  (``meta['note']``). For AllReduce an odd number of chunks n*C gives tree 1 one chunk more.
* ``meta``: ``order`` (the ring order), ``tree_orders`` (the numbering each tree was built
  on), ``roots``, ``num_trees``.

Option ``trees=1`` uses tree 1 only (a plain pipelined binary tree).

Tree edges whose ranks have no direct route relay through GPUs along the shortest path of the
compute graph (extra copy operations). Going up (reductions), a relay GPU's buffer for the
chunk must be free: it may only be a rank that sends its own partial sum up before the child
does (earlier in post-order: the child's subtree, which with the ring order is the in-order
interval between child and parent, and the subtrees to its left), and the relay copy waits for
that send. Going down, relays carry the final value and may pass any GPU. When an edge has no
such path, other numberings are tried: AllReduce uses the first rotation of the ring order or
of its reverse on which both trees work; Broadcast/Reduce the first rotation or reversal of the
non-root ranks for tree 1 and the reversed order for tree 2. Failing that one tree carries all
chunks (``meta['note']``), and if no tree works a CollsynthError says so.

Where it departs from NCCL: NCCL builds its trees across nodes only (one rank per node, chains
inside a node) and splits each tree's data into many pipelined chunks; here the trees span all
ranks and the pipelining depth is the collective's chunking.
"""

from __future__ import annotations

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ..options import Option
from ._common import COPY, REDUCE, ComputeGraph, Ops, Tracker, round_up_chunks
from .ring_search import RingFinder


def nccl_btree(n: int, rank: int) -> tuple[int, list[int]]:
    """(parent, children) of ``rank`` in NCCL's binary tree over ranks 0..n-1 (ncclGetBtree)."""
    bit = 1
    while bit < n:
        if bit & rank:
            break
        bit <<= 1
    if rank == 0:
        return -1, ([bit >> 1] if n > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    lowbit = bit >> 1
    d0 = -1 if lowbit == 0 else rank - lowbit
    down1 = -1 if lowbit == 0 else rank + lowbit
    while down1 >= n:
        down1 = -1 if lowbit == 0 else rank + lowbit
        lowbit >>= 1
    return up, [c for c in (d0, down1) if c != -1]


def btree_parents(n: int) -> list[int]:
    return [nccl_btree(n, p)[0] for p in range(n)]


def dtree_parents(n: int) -> tuple[list[int], list[int]]:
    """Parents (by position) of NCCL's two trees (ncclGetDtree): mirror for even n, shift for
    odd n."""
    t1 = btree_parents(n)
    t2 = []
    for p in range(n):
        if n % 2:
            u = t1[(p - 1) % n]
            t2.append(-1 if u == -1 else (u + 1) % n)
        else:
            u = t1[n - 1 - p]
            t2.append(-1 if u == -1 else n - 1 - u)
    return t1, t2


class _Tree:
    """A tree over ranks: parent map, children, subtrees, relay paths of its edges."""

    def __init__(self, order: list[int], parents_by_pos: list[int]):
        self.order = list(order)
        self.parent = {order[p]: (order[q] if q >= 0 else -1) for p, q in enumerate(parents_by_pos)}
        roots = [v for v, u in self.parent.items() if u == -1]
        if len(roots) != 1:
            raise CollsynthError("internal: tree has no unique root")
        self.root = roots[0]
        self.children: dict[int, list[int]] = {v: [] for v in self.parent}
        for p, q in enumerate(parents_by_pos):
            if q >= 0:
                self.children[order[q]].append(order[p])
        self.post: list[int] = []
        stack = [(self.root, False)]
        while stack:
            v, expanded = stack.pop()
            if expanded:
                self.post.append(v)
                continue
            stack.append((v, True))
            for c in reversed(self.children[v]):
                stack.append((c, False))
        self.pre = list(reversed(self.post))
        # a parent precedes its children in reversed post-order
        self.subtree: dict[int, set[int]] = {}
        for v in self.post:
            s = {v}
            for c in self.children[v]:
                s |= self.subtree[c]
            self.subtree[v] = s
        self.up_path: dict[int, list[int]] = {}
        self.down_path: dict[int, list[int]] = {}

    def plan(self, graph: ComputeGraph, restricted: bool, up: bool, down: bool) -> bool:
        """Relay paths of every edge; False if one is missing.

        With ``restricted`` (reductions) the relays of the edge child -> parent may only be
        ranks that send their own partial sum up before the child does (earlier in post-order:
        the child's subtree and the subtrees to its left), so that their buffer is free.
        Broadcast relays carry the final value and may pass any rank.
        """
        index = {v: i for i, v in enumerate(self.post)}
        for v, u in self.parent.items():
            if u == -1:
                continue
            if up:
                allowed = set(self.post[: index[v]]) if restricted else None
                p = graph.relay_path(v, u, allowed)
                if p is None:
                    return False
                self.up_path[v] = p
            if down:
                p = graph.relay_path(u, v)
                if p is None:
                    return False
                self.down_path[v] = p
        return True


def _reduce_up(tr: Tracker, tree: _Tree, chunk: int, base: int) -> None:
    for v in tree.post:
        if v != tree.root:
            tr.send_path(tree.up_path[v], chunk, kind=REDUCE, base=base)


def _bcast_down(tr: Tracker, tree: _Tree, chunk: int, base: int) -> None:
    for v in tree.pre:
        if v != tree.root:
            tr.send_path(tree.down_path[v], chunk, kind=COPY, base=base)


@register(
    "tree",
    collectives={CollKind.ALLREDUCE, CollKind.BROADCAST, CollKind.REDUCE},
    summary="NCCL double binary tree: pipelined AllReduce, Broadcast and Reduce",
    options=(
        Option(
            "trees",
            "int",
            2,
            minimum=1,
            maximum=2,
            help="2 (NCCL's double binary tree) or 1 (one binary tree)",
        ),
    ),
    reference="NVIDIA NCCL double binary trees (Sanders, Speck and Träff, 'Two-tree "
    "algorithms for full bandwidth broadcast, reduction and scan', Parallel "
    "Computing 2009)",
)
def tree(topology: Topology, collective: Collective, trees: int = 2) -> Schedule:
    """NCCL's double binary tree."""
    T = int(trees)  # 1 or 2, validated by the declaration
    graph = ComputeGraph(topology)
    order = RingFinder(topology, graph).first().order
    kind = collective.kind
    notes: list[str] = []
    reducing = collective.reduces
    if kind is CollKind.ALLREDUCE:
        coll = collective
        tree_list = _allreduce_trees(graph, order, T, notes)
    else:
        coll, note = round_up_chunks(collective, T)
        if note:
            notes.append(note)
        assert coll.root is not None  # the other kinds here are rooted
        tree_list = _rooted_trees(graph, order, int(coll.root), kind, T, reducing, notes)
    meta = {
        "num_trees": len(tree_list),
        "order": order,
        "tree_orders": [tt.order for tt in tree_list],
        "roots": [tt.root for tt in tree_list],
    }
    if notes:
        meta["note"] = "; ".join(notes)
    ops = Ops(topology, coll, graph.routes, meta)
    tr = Tracker(ops, reducing)
    nt = len(tree_list)
    for chunk in range(coll.num_chunks):
        tt = tree_list[chunk % nt]
        p = chunk // nt
        if kind is CollKind.ALLREDUCE:
            _reduce_up(tr, tt, chunk, p)
            _bcast_down(tr, tt, chunk, p)
        elif kind is CollKind.REDUCE:
            _reduce_up(tr, tt, chunk, p)
        else:
            _bcast_down(tr, tt, chunk, p)
    return ops.build()


def _allreduce_trees(
    graph: ComputeGraph, order: list[int], T: int, notes: list[str]
) -> list[_Tree]:
    """AllReduce's trees: NCCL's tree and its complement on the first numbering where both
    work (else one tree), reductions relayed through free buffers only."""
    n = len(order)
    t1, t2 = dtree_parents(n)
    # numberings: the ring order, its reverse, then their rotations (the root must not be
    # the only way out of a part of the graph, as GPU 0 of an NDv2 chassis is)
    rev = [order[0]] + order[1:][::-1]
    cands = [o[i:] + o[:i] for i in range(n) for o in (order, rev)]
    tree_list = []
    for cand in cands:
        first = _Tree(cand, t1)
        if not first.plan(graph, True, True, True):
            continue
        tree_list = [first]
        if T == 2:
            second = _Tree(cand, t2)
            if second.plan(graph, True, True, True):
                tree_list.append(second)
            else:
                continue
        break
    if not tree_list and T == 2:
        for cand in cands:
            first = _Tree(cand, t1)
            if first.plan(graph, True, True, True):
                tree_list = [first]
                notes.append("no usable second tree: one tree carries all chunks")
                break
    if not tree_list:
        raise CollsynthError(
            "tree: some tree edge has no relay path through GPUs whose buffers are free "
            "(e.g. no Hamiltonian cycle usable in both directions); use ring or rd"
        )
    if tree_list[0].order != order:
        notes.append("trees use a rotated or reversed ring order")
    return tree_list


def _rooted_trees(
    graph: ComputeGraph,
    order: list[int],
    root: int,
    kind: CollKind,
    T: int,
    reducing: bool,
    notes: list[str],
) -> list[_Tree]:
    """Broadcast/Reduce trees rooted at ``root``: tree 1 on the first rotation or reversal of
    the other ranks that works, tree 2 on complementary orders."""
    n = len(order)
    i = order.index(root)
    order1 = order[i:] + order[:i]
    up, down = kind is CollKind.REDUCE, kind is CollKind.BROADCAST
    rest = order1[1:]
    tries = [[root] + o[k:] + o[:k] for k in range(n - 1) for o in (rest, rest[::-1])]
    for t_i, cand in enumerate(tries):
        first = _Tree(cand, btree_parents(n))
        if first.plan(graph, reducing, up, down):
            if t_i:
                notes.append("tree 1 uses a rotated or reversed ring order")
            order1 = cand
            break
    else:
        raise CollsynthError(
            "tree: some tree edge has no relay path through GPUs whose buffers are free; use ring"
        )
    tree_list = [first]
    if T == 2:
        cands = [
            [root] + order1[2:] + order1[1:2],
            [root] + order1[1:][::-1],
            [root] + order1[:1:-1] + order1[1:2],
        ]
        for cand in cands:
            t2 = _Tree(cand, btree_parents(n))
            if t2.plan(graph, reducing, up, down):
                tree_list.append(t2)
                if cand is not cands[0]:
                    notes.append("tree 2 uses the reversed order")
                break
        else:
            notes.append("no usable second tree: one tree carries all chunks")
    return tree_list
