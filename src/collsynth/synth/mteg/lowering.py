"""Lowering a slot plan to the timed IR (the paper's step 3.3): one operation per
transmission edge of every tree, a planned order on every link whose busy windows allow one,
and the ``mteg`` metadata."""

from __future__ import annotations

from ...schedule.ir import Schedule, ScheduleBuilder
from .plans import Plan


def lower(p: Plan) -> Schedule:
    """The timed IR of a plan: one operation per transmission edge of every tree."""
    g, pl = p.graph, p.planner
    t = g.topology
    coll_tasks = p.tasks
    b = ScheduleBuilder(t, p.collective)
    tau = g.tau
    on_link: dict[int, list[tuple[float, int]]] = {}
    edges = g.edges
    for op, (chunk, e, slot, parent) in enumerate(
        zip(pl.op_chunk, pl.op_edge, pl.op_slot, pl.op_parent)
    ):
        edge = edges[e]
        b.add(
            edge.src,
            edge.dst,
            chunk,
            route=edge.route,
            deps=(parent,) if parent >= 0 else (),
            start=slot * tau,
            step=slot,
            group=pl.op_group[op] if pl.op_group[op] >= 0 else None,
        )
        for l, a, _w in pl.op_occ[op]:  # a multicast's shared hops: its carrier's order only
            on_link.setdefault(l, []).append((slot + a, op))
    # A planned order per link: the order of its busy windows. The verifier (and the simulator)
    # need the orders of all links to fit one global order of operations; with routes through
    # switches whose hops start at different alpha offsets, a link's window order can disagree
    # with the departure order. Such a link gets no explicit order (the simulator then serves it
    # by planned start time; held to the planned starts it still meets no contention).
    unordered = 0
    slots = pl.op_slot
    for l in sorted(on_link):
        seq = [op for _s, op in sorted(on_link[l])]
        keys = [(slots[op], op) for op in seq]
        if all(x < y for x, y in zip(keys, keys[1:])):
            b.set_link_order(l, seq)
        else:
            unordered += 1
    b.size = p.size
    rounding = [edges[e].length * tau - edges[e].exact_s for e in pl.op_edge]
    b.meta.update(
        {
            "mteg": {
                "slot_s": tau,
                "occupancy": "exact" if g.exact else "slot",
                "trees": p.trees,
                "nearest": p.nearest,
                "price": p.price,
                "chunk_bytes": g.chunk_bytes,
                "plan_slots": pl.finish,
                "plan_time_s": pl.finish * tau,
                "horizon_slots": pl.horizon,
                "initial_horizon_slots": pl.initial_horizon,
                "horizon_growths": pl.growths,
                "switch_copy": g.multicast,
                "multicast_groups": pl.groups,
                "tasks": len(coll_tasks),
                "transmission_edges": len(edges),
                "max_rounding_s": float(max(rounding)) if rounding else 0.0,
                "links_without_order": unordered,
                "asap_s": p.asap,
                "negotiation": p.negotiation
                or {
                    "rounds": 0,
                    "best_round": 0,
                    "first_slots": pl.finish,
                    "best_slots": pl.finish,
                    "first_asap_s": p.asap,
                    "best_asap_s": p.asap,
                },
            }
        }
    )
    return b.build()
