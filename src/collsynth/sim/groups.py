"""Multicasts and in-switch reductions in the simulator: which member carries each link of a
group's tree (:func:`group_plan`), and the engine's arrays for them (:func:`group_arrays`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule.ir import OpKind, Schedule


@dataclass
class GroupPlan:
    """Multicasts and in-switch reductions in the simulator: each link of a group's tree is one
    hop, owned by the first member whose route uses it. Per operation, the links of its route
    it owns (a multicast branch owns the links after the point where it parts from earlier
    members; a reduction member those before it meets one); hops named ``(op, i)``: the
    ``i``-th link the operation owns."""

    own_ptr: np.ndarray  # per op: its owned links, CSR over route_links' kind of ids
    own_links: np.ndarray
    forked: np.ndarray  # per op: its first hop is requested where it parts (multicast)
    fork_from: list[tuple[int, int]]  # hop -> ...
    fork_to: list[tuple[int, int]]  # ... a hop requested alpha after it starts
    user_hop: list[tuple[int, int]]  # hop -> ...
    user_op: list[int]  # ... an operation whose arrival waits for it ...
    user_tail: list[float]  # ... with these alphas still ahead on that operation's path


def group_plan(s: Schedule) -> GroupPlan:
    """The owned links, branches, merges and arrivals of every in-network group (the other
    operations own their whole routes and wait for their own hops)."""
    t = s.topology
    g = s.group
    assert g is not None
    n = s.num_ops
    own: list[list[int]] = [s.route(o).tolist() for o in range(n)]
    forked = np.zeros(n, dtype=bool)
    fork_from: list[tuple[int, int]] = []
    fork_to: list[tuple[int, int]] = []
    user_hop: list[tuple[int, int]] = []
    user_op: list[int] = []
    user_tail: list[float] = []
    members = np.flatnonzero(g >= 0)
    order = members[np.argsort(g[members], kind="stable")]
    in_group = np.zeros(n, dtype=bool)
    in_group[members] = True
    for block in np.split(order, np.flatnonzero(np.diff(g[order])) + 1):
        ops = sorted(int(o) for o in block)
        multicast = s.kind[ops[0]] == OpKind.COPY
        owner: dict[tuple, tuple[int, int]] = {}  # path from the shared end -> hop
        hops_of_group: dict[tuple[int, int], float] = {}
        for o in ops:
            route = own[o] if multicast else own[o][::-1]
            alphas = t.link_alpha[own[o]]
            path: tuple = ()
            shared = 0
            for link in route:
                path = path + (link,)
                if path in owner:
                    shared += 1
                else:
                    break
            if multicast:
                own[o] = route[shared:]
                if shared:
                    forked[o] = True
                    fork_from.append(owner[tuple(route[:shared])])
                    fork_to.append((o, 0))
                for i in range(len(route)):  # every hop of its path, each to be waited for
                    hop = owner.get(tuple(route[: i + 1]), (o, i - shared))
                    user_hop.append(hop)
                    user_op.append(o)
                    user_tail.append(float(alphas[i:].sum()))
                for i in range(shared, len(route)):
                    owner[tuple(route[: i + 1])] = (o, i - shared)
            else:
                mine = len(route) - shared  # the links before it meets an earlier member
                own[o] = own[o][:mine]
                if shared:
                    fork_from.append((o, mine - 1))
                    fork_to.append(owner[tuple(route[:shared])])
                for i in range(len(route)):  # (reversed: position i from the receiver)
                    hop = owner.get(tuple(route[: i + 1]), (o, len(route) - 1 - i))
                    hops_of_group[hop] = float(alphas[len(route) - 1 - i :].sum())
                for i in range(shared, len(route)):
                    owner[tuple(route[: i + 1])] = (o, len(route) - 1 - i)
        if not multicast:  # every member's result arrives with the combined stream
            for hop, tail in hops_of_group.items():
                for o in ops:
                    user_hop.append(hop)
                    user_op.append(o)
                    user_tail.append(tail)
    for o in np.flatnonzero(~in_group).tolist():
        alphas = t.link_alpha[own[o]]
        for i in range(len(own[o])):
            user_hop.append((o, i))
            user_op.append(o)
            user_tail.append(float(alphas[i:].sum()))
    lens = np.array([len(x) for x in own], dtype=np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    links = np.array([lk for x in own for lk in x], dtype=np.int64)
    return GroupPlan(ptr, links, forked, fork_from, fork_to, user_hop, user_op, user_tail)


def group_arrays(
    plan: GroupPlan | None, own_ptr: np.ndarray, route_ptr: np.ndarray
) -> tuple[tuple, np.ndarray, np.ndarray]:
    """The engine's view of in-network groups over the final hops (``route_ptr``: each
    operation's hops, virtual ones first, over ``own_ptr``'s owned links): ``(flags, hops into
    each hop, branch pointers, branch hops, user pointers, user operations, user tails)``,
    the hops each operation's arrival waits for, and each operation's first hop (-1 for a
    branch, requested where it parts). Without groups: empty arrays the engine ignores."""
    n_ops = len(route_ptr) - 1
    first = route_ptr[:-1].copy()
    if plan is None:
        i1, f1 = np.zeros(1, dtype=np.int64), np.zeros(1)
        empty = (np.zeros(1, dtype=np.bool_), i1, i1, i1, i1, i1, f1)
        return empty, np.diff(route_ptr).astype(np.int64), first
    n_hops = int(route_ptr[-1])
    virtual = np.diff(route_ptr) - np.diff(own_ptr)  # 0 or 1 per operation, in front

    def hop_ids(pairs: list[tuple[int, int]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.int64)
        arr = np.array(pairs, dtype=np.int64)
        return route_ptr[arr[:, 0]] + virtual[arr[:, 0]] + arr[:, 1]

    ops = np.arange(n_ops, dtype=np.int64)
    v_ops = ops[virtual > 0]  # each virtual hop: waited for by its own operation, no alpha
    u_hop = np.concatenate((hop_ids(plan.user_hop), route_ptr[v_ops]))
    u_op = np.concatenate((np.array(plan.user_op, dtype=np.int64), v_ops))
    u_tail = np.concatenate((np.array(plan.user_tail, dtype=np.float64), np.zeros(len(v_ops))))
    by = np.argsort(u_hop, kind="stable")
    user_ptr = np.zeros(n_hops + 1, dtype=np.int64)
    np.cumsum(np.bincount(u_hop, minlength=n_hops), out=user_ptr[1:])
    f_from, f_to = hop_ids(plan.fork_from), hop_ids(plan.fork_to)
    by_f = np.argsort(f_from, kind="stable")
    fork_ptr = np.zeros(n_hops + 1, dtype=np.int64)
    np.cumsum(np.bincount(f_from, minlength=n_hops), out=fork_ptr[1:])
    need = np.ones(n_hops, dtype=np.int64)  # the hop before it on its operation's route ...
    need[route_ptr[:-1]] = 0  # ... none for a first hop, requested when the operation is ready
    np.add.at(need, f_to, 1)  # ... and every hop that branches or merges into it
    first[plan.forked] = -1
    groups = (np.ones(1, dtype=np.bool_), need, fork_ptr, f_to[by_f], user_ptr, u_op[by],
              u_tail[by])  # fmt: skip
    return groups, np.bincount(u_op, minlength=n_ops).astype(np.int64), first


__all__ = ["GroupPlan", "group_arrays", "group_plan"]
