"""``collsynth wan stats|replan``: SCALE-CCL re-planning from measured link statistics."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..errors import CollsynthError
from ..units import fmt_time
from .common import (
    Parser,
    add_command,
    add_json,
    add_output,
    add_size,
    add_topology,
    emit_json,
    parse_positive_size,
    refuse_overwriting_inputs,
)


def add_parser(sub: Any) -> None:
    """Register ``wan`` (replan, stats)."""
    wan = add_command(
        sub,
        "wan",
        "WAN tools: SCALE-CCL re-planning from link statistics",
        "Multi-datacenter tools (SCALE-CCL's event-driven re-planning).",
        examples=(
            "collsynth wan stats -t wan:dcs=3,gpus=8 -o stats.json",
            "collsynth wan replan -t wan:dcs=3,gpus=8 --stats stats.json -o s.json",
        ),
    )
    wsub = wan.add_subparsers(dest="wan_command", metavar="ACTION", parser_class=Parser)
    wsub.required = True
    rep = add_command(
        wsub,
        "replan",
        "re-plan a schedule under link statistics",
        "Re-plan with SCALE-CCL under measured link statistics (bandwidth, "
        "delay, queue per link), verify, write JSON.",
        examples=(
            "collsynth wan replan -t wan:dcs=3,gpus=8 --stats stats.json "
            "--subchunks 8 -s 64MB -o s.json",
        ),
    )
    add_topology(rep)
    rep.add_argument(
        "--stats",
        required=True,
        metavar="STATS.json",
        help="link statistics (see docs/scale.md; `collsynth wan stats` writes one)",
    )
    rep.add_argument("-c", "--collective", default="allgather", help="allgather or broadcast")
    rep.add_argument("--root", type=int, default=None, help="root rank for broadcast")
    rep.add_argument("--subchunks", type=int, default=8, help="subchunks per chunk")
    add_size(rep, help="data size (default: 1MiB)")
    rep.add_argument(
        "--engine",
        choices=("auto", "numba", "python"),
        default="auto",
        help="event loop: numba (compiled; loading it takes about a second in a "
        "fresh process, the first compile on a machine about 30 s), python, "
        "or auto (numba when already loaded)",
    )
    add_output(rep, help="schedule file to write (JSON; .npz: binary)")
    add_json(rep)
    rep.set_defaults(func=cmd_replan)

    st = add_command(
        wsub,
        "stats",
        "write a topology's link statistics (a template)",
        examples=("collsynth wan stats -t wan:dcs=3,gpus=8 --perturb 1 -o stats.json",),
    )
    add_topology(st)
    st.add_argument(
        "--perturb",
        type=int,
        metavar="SEED",
        help="multiply bandwidths and delays by seeded random factors",
    )
    st.add_argument(
        "--spread",
        type=float,
        default=0.3,
        help="perturbation: factors uniform in [1-spread, 1+spread]",
    )
    add_output(st, help="statistics file to write (JSON)")
    add_json(st)
    st.set_defaults(func=cmd_stats)


def cmd_replan(args: argparse.Namespace) -> int:
    """Re-plan under link statistics, verify, write."""
    from ..collective import Collective
    from ..schedule.io import save_schedule
    from ..synth.scale import LinkStats, load_kernel, replan
    from ..topology import load_topology
    from ..verify import ensure_verified

    refuse_overwriting_inputs({"-o": args.output}, {"--stats": args.stats, "-t": args.topology})
    topo = load_topology(args.topology)
    stats = LinkStats.load(args.stats, topo)
    if args.subchunks < 1:
        raise CollsynthError(f"--subchunks {args.subchunks} must be at least 1")
    size = parse_positive_size(args.size, "--size") if args.size is not None else None
    root = args.root
    if root is not None and not 0 <= root < topo.num_ranks:
        raise CollsynthError(f"--root {root} is not a rank of {topo.name!r}")
    coll = Collective.make(args.collective, topo.num_ranks, 1, root)
    if args.engine == "numba":
        load_kernel()  # compile or load from cache: not part of the re-plan time
    t0 = time.perf_counter()
    sched = replan(
        topo, stats, coll, subchunks=args.subchunks, size=size, verify=False, engine=args.engine
    )
    replan_s = time.perf_counter() - t0
    report = ensure_verified(sched)
    save_schedule(sched, args.output)
    info = {
        "output": args.output,
        "algorithm": "scale",
        "topology": topo.name,
        "collective": sched.collective.to_dict(),
        "ops": sched.num_ops,
        "subchunks": args.subchunks,
        "size": sched.size,
        "replan_time_s": replan_s,
        "planned_time_s": sched.meta["scale"]["plan_time_s"],
        "verified": report.ok,
        "engine": sched.meta["scale"].get("engine"),
    }
    if args.json:
        emit_json(info)
    else:
        print(
            f"wrote {args.output}: {sched.num_ops} ops, planned completion "
            f"{fmt_time(info['planned_time_s'])}, re-planned in {fmt_time(replan_s)} "
            f"(verified)"
        )
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """Write a topology's link statistics (its own values, empty queues) as a template."""
    from ..synth.scale import LinkStats
    from ..topology import load_topology

    if args.perturb is not None and args.perturb < 0:
        raise CollsynthError(f"--perturb {args.perturb}: the seed must be 0 or more")
    if not 0 <= args.spread < 1:  # also refuses NaN
        raise CollsynthError(f"--spread {args.spread}: must be at least 0 and below 1")
    refuse_overwriting_inputs({"-o": args.output}, {"-t": args.topology})
    topo = load_topology(args.topology)
    stats = LinkStats.from_topology(topo)
    if args.perturb is not None:
        stats = stats.perturbed(args.perturb, args.spread, args.spread)
    stats.save(args.output, topo)
    if args.json:
        emit_json(
            {
                "output": args.output,
                "topology": topo.name,
                "links": len(topo.links),
                "perturb_seed": args.perturb,
                "spread": args.spread,
            }
        )
    else:
        print(f"wrote {args.output}: statistics of {len(topo.links)} links of {topo.name}")
    return 0
