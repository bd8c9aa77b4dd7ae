"""``collsynth bound``: a certified lower bound on any schedule's time."""

from __future__ import annotations

import argparse
from typing import Any

from ..units import fmt_bandwidth, fmt_size, fmt_time
from .common import add_command, add_json, add_problem, add_size, build_request, emit_json


def add_parser(sub: Any) -> None:
    """Register ``bound``."""
    p = add_command(
        sub,
        "bound",
        "lower bound on the time of any schedule",
        "Certified lower bounds (ingress, egress, latency, exact cuts, demand "
        "cuts, and any plugin bound); the largest binds.",
        examples=(
            "collsynth bound -t dgx_a100:nodes=2 -c allreduce -s 256MB",
            "collsynth bound -t mi250:chassis=2 -c allgather -s 1GB --json",
        ),
    )
    add_problem(p, chunks=False)
    add_size(p, required=True, help="collective size, e.g. 1GB")
    add_json(p)
    p.set_defaults(func=cmd_bound)


def cmd_bound(args: argparse.Namespace) -> int:
    """Print the bounds."""
    from ..bound import bound

    req = build_request(args)
    size = req.sizes[0]
    res = bound(req.topology, req.collective, size)
    if args.json:
        emit_json(
            {"topology": req.topology.name, "collective": req.collective.to_dict(), **res.to_dict()}
        )
        return 0
    best = res.best
    print(
        f"{req.collective.describe()} of {fmt_size(size)} on {req.topology.name}: no schedule "
        f"beats {fmt_time(best.time_s)} (algbw <= {fmt_bandwidth(res.algbw())}); binding "
        f"bound: {best.kind} at {best.witness}"
    )
    for b in sorted(res.bounds, key=lambda x: -x.time_s):
        print(f"  {b.kind:<10} {fmt_time(b.time_s):>12}  {b.witness}")
    return 0
