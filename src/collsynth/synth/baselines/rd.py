"""``rd`` — recursive doubling (AllGather) and recursive halving/doubling (Rabenseifner:
ReduceScatter, AllReduce), the MPICH classics (Thakur, Rabenseifner & Gropp 2005).

For n = 2^m ranks, numbered by positions q = 0..n-1 (see *numbering*), in steps over the bits b
of q (see *bit order*), rank q exchanges data with its partner ``q xor 2^b``:

* **AllGather** (recursive doubling): at each step every rank sends its partner everything it
  holds; after m steps everyone holds everything (message sizes 1, 2, 4, ... blocks).
* **ReduceScatter** (recursive halving): every rank starts with its contribution to every chunk
  and a region covering all chunks; at each step it keeps the half of its region whose final
  owners lie on its own side of bit b and sends the other half to its partner with ``reduce``
  operations (n/2, n/4, ... blocks); after m steps each rank holds its own chunks, fully reduced.
* **AllReduce** (Rabenseifner): that ReduceScatter, then recursive-doubling AllGather of the
  reduced blocks with the bits in reverse order.

An operation moves one chunk; all operations a rank sends at a step depend on everything it
received at the step before (one MPI message per step), so simulated times follow the textbook
``sum over steps of (alpha + bytes_k / bw)``.

Non-power-of-two n (MPICH's approach): with p = 2^floor(log2 n) and r = n - p, the ranks at
positions 2i (i < r) first fold: each sends all its data to position 2i+1 (``reduce``) and sits
out; the p remaining ranks run the algorithm above (the region of a rank that absorbed a folded
partner also covers the partner's chunks), and finally send the folded ranks their result
(AllReduce: everything; ReduceScatter: their own chunks). AllGather on non-power-of-two n uses
Bruck's algorithm instead (ceil(log2 n) steps; at step k position i sends the
min(2^k, n - 2^k) blocks it holds to position i - 2^k).

Numbering: candidates are the rank order, the ring order of :mod:`.ring` (a Hamiltonian cycle,
so bit-0 partners are neighbours) and, for n = 2^m, a hypercube embedding found by capped
backtracking (every partner pair directly connected, as on DGX-1, hypercubes and 4x4 tori);
the candidate needing the fewest relay hops wins (ties in that order).

Bit order: ReduceScatter processes the bits whose partner pairs are cheapest (fewest relays, then
fastest routes) first, so the largest messages use the best links (ties: highest bit first, the
classic halving order); AllGather uses the reverse (the slowest dimension carries the smallest
message), AllReduce both.

Where it departs from MPICH: MPICH picks these algorithms by message size and sends one
message per step; here each chunk is its own operation (a step's operations to one partner
share the link back to back), the numbering and bit order adapt to the topology, and partners
need not be neighbours.

Partners without a direct route relay through GPUs along the shortest compute-graph path
(store-and-forward copies). Partial sums may only be relayed through GPUs whose buffers for those
chunks are free: ranks outside the sender's current group (they passed those chunks on at an
earlier step) and folded ranks; otherwise the next numbering is tried and a CollsynthError
raised if none works. AllGather and the AllGather half of AllReduce relay final values through
any GPU.
"""

from __future__ import annotations

from ...collective import Collective, CollKind
from ...errors import CollsynthError
from ...schedule.ir import Schedule
from ...topology.model import Topology
from .. import register
from ._common import COPY, REDUCE, ComputeGraph, Ops, Tracker
from .ring_search import RingFinder


class _Unsafe(Exception):
    """A reduction relay would overwrite a live buffer."""


def hypercube_embedding(graph: ComputeGraph, n: int, cap: int = 20000) -> list[int] | None:
    """Ranks for labels 0..n-1 (n = 2^m) such that labels differing in one bit are directly
    connected both ways; None if the capped search finds none."""
    m = n.bit_length() - 1
    if 1 << m != n:
        return None
    sym = []
    for u in range(n):
        sym.append({v for v in graph.out[u] if graph.has(v, u)})
    if min(len(s) for s in sym) < m:
        return None
    assign = [-1] * n
    used: set[int] = set()
    expansions = 0

    def cands(v: int) -> list[int]:
        cons = [assign[v ^ (1 << b)] for b in range(m) if (v ^ (1 << b)) < v]
        if not cons:
            return [u for u in range(n) if u not in used]
        s = set(sym[cons[0]])
        for c in cons[1:]:
            s &= sym[c]
        return sorted(s - used)

    stack = [iter(cands(0))]
    v = 0
    while stack:
        advanced = False
        for u in stack[-1]:
            expansions += 1
            if expansions > cap:
                return None
            assign[v] = u
            used.add(u)
            if v == n - 1:
                return list(assign)
            v += 1
            stack.append(iter(cands(v)))
            advanced = True
            break
        if not advanced:
            stack.pop()
            v -= 1
            if v >= 0:
                used.discard(assign[v])
                assign[v] = -1
    return None


class _Plan:
    """One numbering of the ranks and the resulting partner structure."""

    def __init__(self, order: list[int], graph: ComputeGraph, coll: Collective):
        self.order = order
        self.graph = graph
        n = len(order)
        self.n = n
        self.p = 1 << (n.bit_length() - 1)
        self.r = n - self.p
        self.bruck = coll.kind is CollKind.ALLGATHER and self.r > 0
        # participants and folded partners (positions)
        if self.r:
            self.part = [2 * q + 1 if q < self.r else q + self.r for q in range(self.p)]
            self.folded = {2 * q + 1: 2 * q for q in range(self.r)}
        else:
            self.part = list(range(n))
            self.folded = {}
        self.m = self.p.bit_length() - 1

    def rank(self, pos: int) -> int:
        return self.order[pos]

    def pairs(self) -> list[tuple[int, int]]:
        """Rank pairs (sender, receiver) the algorithm uses."""
        out = []
        if self.bruck:
            k = 1
            while k < self.n:
                out += [(self.rank(i), self.rank((i - k) % self.n)) for i in range(self.n)]
                k <<= 1
            return out
        for a, b in self.folded.items():
            out += [(self.rank(b), self.rank(a)), (self.rank(a), self.rank(b))]
        for b in range(self.m):
            for q in range(self.p):
                out.append((self.rank(self.part[q]), self.rank(self.part[q ^ (1 << b)])))
        return out

    def relay_hops(self) -> int:
        total = 0
        for u, v in self.pairs():
            path = self.graph.relay_path(u, v)
            total += len(path) - 2 if path is not None else 10**6
        return total

    def bit_cost(self, b: int) -> tuple[int, float]:
        relays, worst = 0, 0.0
        for q in range(self.p):
            u = self.rank(self.part[q])
            v = self.rank(self.part[q ^ (1 << b)])
            path = self.graph.path_or_fail(u, v)  # topologies are strongly connected
            relays += len(path) - 2
            cost = 0.0
            for a, c in zip(path[:-1], path[1:]):
                route = self.graph.routes.route(a, c)
                assert route is not None  # relay path hops are direct routes
                cost += self.graph.routes.inv_bw(route)
            worst = max(worst, cost)
        return relays, worst

    def rs_bits(self) -> list[int]:
        """Bit order of the halving phase: cheapest first, ties highest bit first."""
        return sorted(range(self.m), key=lambda b: (self.bit_cost(b), -b))


def _synth(plan: _Plan, ops: Ops, coll: Collective) -> None:
    """The algorithm on ``plan``'s numbering, written into ``ops`` (see the module doc)."""
    kind = coll.kind
    run = _Exchanges(plan, ops, coll)
    if plan.bruck:
        _bruck(run)
        return
    region = _regions(run)
    folded_ranks = {plan.rank(f) for f in plan.folded.values()}
    if plan.folded:
        if kind is CollKind.ALLGATHER:  # pragma: no cover - Bruck handles it
            raise CollsynthError("internal: fold in AllGather")
        sends = [
            (plan.rank(f), plan.rank(a), list(range(coll.num_chunks)))
            for a, f in plan.folded.items()
        ]
        run.exchange(sends, REDUCE)
    rs_bits = plan.rs_bits()
    if kind is CollKind.ALLGATHER:
        _doubling_allgather(run, region, rs_bits)
        return
    _halving(run, region, rs_bits, folded_ranks)
    if kind is CollKind.ALLREDUCE:
        _doubling_allgather(run, region, rs_bits)
    if plan.folded:
        _unfold(run)


class _Exchanges:
    """The steps of one run: every step is one message per (sender, receiver), whose
    operations depend on everything the sender received at the step before."""

    def __init__(self, plan: _Plan, ops: Ops, coll: Collective):
        self.plan, self.ops, self.coll = plan, ops, coll
        self.tr = Tracker(ops, coll.reduces)
        self.arrived: dict[int, list[int]] = {r: [] for r in plan.order}

    def chunks_of_pos(self, pos: int) -> list[int]:
        """The chunks of the rank at position ``pos``."""
        r = self.plan.rank(pos)
        C = self.coll.chunks_per_rank
        return list(range(r * C, (r + 1) * C))

    def exchange(
        self, sends: list[tuple[int, int, list[int]]], op_kind: int, allowed_of=None
    ) -> None:
        """One step: (sender rank, receiver rank, chunks); message deps on last arrivals."""
        graph = self.plan.graph
        new: dict[int, list[int]] = {r: [] for r in self.plan.order}
        for u, v, chunks in sends:
            if not chunks:
                continue
            allowed = allowed_of(u) if allowed_of is not None else None
            path = graph.relay_path(u, v, allowed)
            if path is None:
                raise _Unsafe(
                    f"no relay path from {self.ops.topology.rank_name(u)} to "
                    f"{self.ops.topology.rank_name(v)} through GPUs with free buffers"
                )
            deps = self.arrived[u]
            for c in chunks:
                op = self.tr.send_path(path, c, kind=op_kind, deps=deps)
                new[v].append(op)
        for r in self.plan.order:
            self.arrived[r] = new[r]


def _bruck(run: _Exchanges) -> None:
    """Bruck AllGather over all n positions."""
    n, rank = run.plan.n, run.plan.rank
    k = 1
    while k < n:
        cnt = min(k, n - k)
        sends = []
        for i in range(n):
            blocks = [c for j in range(cnt) for c in run.chunks_of_pos((i + j) % n)]
            sends.append((rank(i), rank((i - k) % n), blocks))
        run.exchange(sends, COPY)
        k <<= 1


def _regions(run: _Exchanges) -> list[list[int]]:
    """Chunks finally owned by each participant, including its folded partner's."""
    plan = run.plan
    region = []
    for q in range(plan.p):
        pos = plan.part[q]
        ch = run.chunks_of_pos(pos)
        if pos in plan.folded:
            ch = run.chunks_of_pos(plan.folded[pos]) + ch
        region.append(ch)
    return region


def _doubling_allgather(run: _Exchanges, region: list[list[int]], rs_bits: list[int]) -> None:
    """Recursive doubling over the bits in reverse: each step exchanges all holdings."""
    p, part, rank = run.plan.p, run.plan.part, run.plan.rank
    holdings = [list(region[q]) for q in range(p)]
    for b in reversed(rs_bits):
        sends = [(rank(part[q]), rank(part[q ^ (1 << b)]), list(holdings[q])) for q in range(p)]
        run.exchange(sends, COPY)
        holdings = [holdings[q] + holdings[q ^ (1 << b)] for q in range(p)]


def _halving(
    run: _Exchanges, region: list[list[int]], rs_bits: list[int], folded_ranks: set[int]
) -> None:
    """Recursive halving: at each bit every participant reduces the half of its region owned
    across the bit into its partner; partial sums relay only through free buffers."""
    p, part, rank = run.plan.p, run.plan.part, run.plan.rank
    processed: list[int] = []
    for b in rs_bits:
        groups_mask = sum(1 << x for x in processed)
        sends = []
        for q in range(p):
            w = q ^ (1 << b)
            members = [
                x
                for x in range(p)
                if (x & groups_mask) == (q & groups_mask) and ((x >> b) & 1) == ((w >> b) & 1)
            ]
            sends.append((rank(part[q]), rank(part[w]), [c for x in members for c in region[x]]))

        def allowed_of(u: int, mask=groups_mask) -> set[int]:
            q = next(x for x in range(p) if rank(part[x]) == u)
            free = {rank(part[x]) for x in range(p) if (x & mask) != (q & mask)}
            return free | folded_ranks

        run.exchange(sends, REDUCE, allowed_of)
        processed.append(b)


def _unfold(run: _Exchanges) -> None:
    """Send the folded ranks their result (AllReduce: everything; else their own chunks)."""
    plan, coll = run.plan, run.coll
    sends = []
    for a, f in plan.folded.items():
        chunks = (
            list(range(coll.num_chunks))
            if coll.kind is CollKind.ALLREDUCE
            else run.chunks_of_pos(f)
        )
        sends.append((plan.rank(a), plan.rank(f), chunks))
    run.exchange(sends, COPY)


@register(
    "rd",
    collectives={CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLREDUCE},
    summary="recursive doubling AllGather, recursive halving ReduceScatter, "
    "Rabenseifner AllReduce (MPICH); Bruck / folding for non-powers of two",
)
def rd(topology: Topology, collective: Collective) -> Schedule:
    """Recursive doubling / halving (MPICH classics)."""
    graph = ComputeGraph(topology)
    n = topology.num_ranks
    cands: list[tuple[str, list[int]]] = [("rank order", list(range(n)))]
    ring = RingFinder(topology, graph).first()
    cands.append(("ring order", list(ring.order)))
    if n & (n - 1) == 0:
        emb = hypercube_embedding(graph, n)
        if emb is not None:
            cands.append(("hypercube embedding", emb))
    plans = [(name, _Plan(order, graph, collective)) for name, order in cands]
    scored = sorted(range(len(plans)), key=lambda i: (plans[i][1].relay_hops(), i))
    last_error = None
    for i in scored:
        name, plan = plans[i]
        meta = {"numbering": name, "order": plan.order}
        if plan.bruck:
            meta["variant"] = "bruck"
        elif plan.folded:
            meta["variant"] = f"fold {plan.r} rank(s) into partners"
        if not plan.bruck:
            meta["bits"] = plan.rs_bits()
        ops = Ops(topology, collective, graph.routes, meta)
        try:
            _synth(plan, ops, collective)
        except _Unsafe as e:
            last_error = e
            continue
        return ops.build()
    raise CollsynthError(
        f"rd: {last_error}; no numbering lets partial sums avoid relaying "
        f"through GPUs that still hold their own data; use ring or tree"
    )
