"""The ``collsynth`` command line.

Contract (later commands follow it): every command has ``--help``; ``--json`` prints exactly one
JSON object on stdout; sizes, bandwidths and times accept human units; a bad input prints one
line on stderr naming the problem and exits with status 2. Internal failures print one line and
exit with status 1 (``COLLSYNTH_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Sequence

from . import __version__
from .errors import CollsynthError
from .units import fmt_bandwidth, fmt_size, fmt_time, parse_size


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one-line CollsynthErrors (exit status 2)."""

    def error(self, message: str):  # type: ignore[override]
        raise CollsynthError(f"{self.prog}: {message}")


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _console():
    from rich.console import Console

    con = Console(highlight=False)
    if not con.is_terminal:  # pipes and CI logs: do not squeeze tables into 80 columns
        con = Console(highlight=False, width=max(con.width, 140))
    return con


# ---------------------------------------------------------------------------------- topo
def _cmd_topo_show(args: argparse.Namespace) -> int:
    from .topology import load_topology

    topo = load_topology(args.spec)
    info = topo.summary()
    if args.json:
        _emit_json(info)
        return 0
    from rich.markup import escape
    from rich.table import Table

    con = _console()
    con.print(f"[bold]{escape(topo.name)}[/bold]  ({escape(args.spec)})  "
              f"fingerprint {info['fingerprint']}")
    con.print(f"compute nodes {info['compute_nodes']}, switches {info['switches']}, routers "
              f"{info['routers']}, links {info['links']}, hop diameter {info['hop_diameter']}")
    classes = ", ".join(f"{k}: {v}" for k, v in info["links_by_class"].items())
    con.print(f"links by class: {escape(classes)}")
    for key in ("source", "notes"):
        if key in topo.meta:
            con.print(f"{key}: {escape(str(topo.meta[key]))}")
    table = Table(title="per compute node")
    for col in ("rank", "name", "out links", "out bw", "in links", "in bw"):
        table.add_column(col, justify="right" if col != "name" else "left")
    rows = info["per_node"]
    shown = rows if len(rows) <= args.max_rows else rows[: args.max_rows]
    for r in shown:
        table.add_row(str(r["rank"]), escape(r["name"]), str(r["out_links"]),
                      fmt_bandwidth(r["out_bw"]),
                      str(r["in_links"]), fmt_bandwidth(r["in_bw"]))
    con.print(table)
    if len(rows) > len(shown):
        con.print(f"... {len(rows) - len(shown)} more (use --max-rows or --json)")
    return 0


def _cmd_topo_export(args: argparse.Namespace) -> int:
    from .topology import load_topology
    from .topology.io import save_topology

    topo = load_topology(args.spec)
    save_topology(topo, args.output, args.format)
    if args.json:
        _emit_json({"output": args.output, "name": topo.name, "fingerprint": topo.fingerprint,
                    "compute_nodes": topo.num_ranks, "links": len(topo.links)})
    else:
        print(f"wrote {args.output} ({topo.name}: {topo.num_ranks} compute nodes, "
              f"{len(topo.links)} links)")
    return 0


# ---------------------------------------------------------------------------------- list
def _cmd_list(args: argparse.Namespace) -> int:
    from .collective import CollKind
    from .synth import load_all
    from .topology import zoo as _zoo  # noqa: F401
    from .topology.registry import ZOO

    algos = load_all()
    data = {
        "topologies": {name: {"summary": e.summary,
                              "params": {k: {"kind": p.kind, "default": _show_default(p),
                                             "doc": p.doc} for k, p in e.params.items()}}
                       for name, e in sorted(ZOO.items())},
        "algorithms": {name: {"summary": a.summary,
                              "collectives": sorted(k.value for k in a.collectives)}
                       for name, a in sorted(algos.items())},
        "collectives": [k.value for k in CollKind],
    }
    if args.json:
        _emit_json(data)
        return 0
    from rich.table import Table

    con = _console()
    t = Table(title="topologies (spec: NAME:key=value,...)")
    t.add_column("name")
    t.add_column("parameters (defaults)")
    t.add_column("summary")
    for name, e in data["topologies"].items():
        t.add_row(name, ", ".join(f"{k}={v['default']}" for k, v in e["params"].items()),
                  e["summary"])
    con.print(t)
    t = Table(title="algorithms")
    t.add_column("name")
    t.add_column("collectives")
    t.add_column("summary")
    for name, a in data["algorithms"].items():
        t.add_row(name, ", ".join(a["collectives"]), a["summary"])
    con.print(t)
    con.print("collectives: " + ", ".join(data["collectives"]))
    return 0


def _show_default(p) -> Any:
    if p.default is None:
        return None
    if p.kind == "bw":
        return fmt_bandwidth(p.default)
    if p.kind == "time":
        return fmt_time(p.default)
    if p.kind == "size":
        return fmt_size(p.default)
    return p.default


# ---------------------------------------------------------------------------------- synth
def _make_collective(args: argparse.Namespace, topo) -> Any:
    from .collective import Collective, parse_kind

    kind = parse_kind(args.collective)
    if kind.value == "custom":
        if not args.demand:
            raise CollsynthError("--collective custom needs --demand FILE.json")
        from .topology.io import read_structured

        data = read_structured(args.demand)
        if isinstance(data, dict):
            coll = Collective.from_dict({"kind": "custom", "ranks": topo.num_ranks, **data},
                                        source=args.demand)
        else:
            coll = Collective.from_demand_matrix(data)
        if coll.num_ranks != topo.num_ranks:
            raise CollsynthError(f"{args.demand}: demand is for {coll.num_ranks} ranks but the "
                                 f"topology has {topo.num_ranks}")
        return coll
    if args.chunks < 1:
        raise CollsynthError(f"--chunks must be at least 1, got {args.chunks}")
    root = args.root
    if root is not None and not 0 <= root < topo.num_ranks:
        raise CollsynthError(f"--root {root} is not a rank of {topo.name} "
                             f"(0..{topo.num_ranks - 1})")
    if root is not None and kind.value not in ("broadcast", "reduce", "gather", "scatter"):
        raise CollsynthError(f"--root does not apply to {kind.value}")
    return Collective.make(kind, topo.num_ranks, args.chunks, root)


def _cmd_synth(args: argparse.Namespace) -> int:
    from .schedule.io import save_schedule
    from .synth import synthesize
    from .topology import load_topology
    from .verify import ensure_verified

    topo = load_topology(args.topology)
    coll = _make_collective(args, topo)
    t0 = time.perf_counter()
    sched = synthesize(args.algo, topo, coll)
    synth_s = time.perf_counter() - t0
    if args.size is not None:
        from dataclasses import replace

        if sched.size is None:
            sched = replace(sched, size=parse_size(args.size, "--size"))
    t1 = time.perf_counter()
    report = ensure_verified(sched)
    verify_s = time.perf_counter() - t1
    save_schedule(sched, args.output)
    info = {"output": args.output, "algorithm": args.algo, "topology": topo.name,
            "collective": sched.collective.to_dict(), "ops": sched.num_ops,
            "synth_time_s": synth_s, "verify_time_s": verify_s, "verified": report.ok,
            **{k: v for k, v in sched.stats().items() if k != "ops"}}
    if args.json:
        _emit_json(info)
    else:
        print(f"{args.algo}: {sched.collective.describe()} on {topo.name}: {sched.num_ops} ops, "
              f"verified, synthesized in {fmt_time(synth_s)}; wrote {args.output}")
    return 0


# ---------------------------------------------------------------------------------- verify
def _cmd_verify(args: argparse.Namespace) -> int:
    from .schedule.io import load_schedule
    from .topology import load_topology
    from .verify import check_schedule

    topo = load_topology(args.topology) if args.topology else None
    sched = load_schedule(args.schedule, topology=topo)
    t0 = time.perf_counter()
    report = check_schedule(sched)
    elapsed = time.perf_counter() - t0
    if args.json:
        _emit_json({"schedule": args.schedule, "topology": sched.topology.name,
                    "collective": sched.collective.to_dict(), "verify_time_s": elapsed,
                    **report.to_dict()})
        if not report.ok:
            print(f"collsynth: error: {args.schedule}: {report.error}", file=sys.stderr)
        return 0 if report.ok else 2
    if report.ok:
        extra = ""
        if report.planned_finish_s is not None:
            extra = f", planned finish {fmt_time(report.planned_finish_s)}"
        if report.redundant_deliveries:
            extra += f", {report.redundant_deliveries} redundant deliveries"
        print(f"OK: {sched.collective.describe()} on {sched.topology.name}: {report.ops} ops, "
              f"{report.link_hops} link hops; checks: {', '.join(report.checks)}{extra}")
        return 0
    raise CollsynthError(f"{args.schedule}: {report.error}")


# ---------------------------------------------------------------------------------- demo
DEMO_TOPOLOGIES = ("dgx1", "ndv2:chassis=2", "dgx2:chassis=2", "mi250:chassis=2",
                   "dgx_a100:nodes=2", "wan:dcs=3,gpus=8")


def _cmd_demo(args: argparse.Namespace) -> int:
    from .collective import Collective
    from .synth import synthesize
    from .topology import load_topology
    from .verify import ensure_verified

    rows = []
    for spec in DEMO_TOPOLOGIES:
        topo = load_topology(spec)
        for kind in ("allgather", "allreduce"):
            coll = Collective.make(kind, topo.num_ranks, 1)
            t0 = time.perf_counter()
            sched = synthesize("spt", topo, coll)
            synth_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            report = ensure_verified(sched)
            rows.append({"topology": spec, "compute_nodes": topo.num_ranks,
                         "switches": topo.num_switches, "routers": topo.num_routers,
                         "links": len(topo.links), "hop_diameter": topo.hop_diameter,
                         "collective": kind, "algorithm": "spt", "ops": sched.num_ops,
                         "link_hops": report.link_hops, "verified": report.ok,
                         "synth_time_s": synth_s,
                         "verify_time_s": time.perf_counter() - t1})
    if args.json:
        _emit_json({"demo": "zoo topologies, spt schedules, independent verifier", "rows": rows})
        return 0
    from rich.table import Table

    con = _console()
    con.print("[bold]collsynth demo[/bold]: build zoo topologies, synthesize shortest-path-tree "
              "schedules, verify them independently")
    table = Table()
    for col in ("topology", "GPUs", "switches", "routers", "links", "diameter", "collective",
                "ops", "link hops", "verified", "synth", "verify"):
        table.add_column(col, justify="left" if col in ("topology", "collective") else "right")
    for r in rows:
        table.add_row(r["topology"], str(r["compute_nodes"]), str(r["switches"]),
                      str(r["routers"]), str(r["links"]), str(r["hop_diameter"]),
                      r["collective"], str(r["ops"]), str(r["link_hops"]),
                      "yes" if r["verified"] else "NO", fmt_time(r["synth_time_s"]),
                      fmt_time(r["verify_time_s"]))
    con.print(table)
    con.print(f"{len(rows)} schedules synthesized and verified.")
    return 0


# ---------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="collsynth",
                description="Design, bound, verify, simulate and export collective-communication "
                            "schedules for accelerator networks.")
    p.add_argument("--version", action="version", version=f"collsynth {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    topo = sub.add_parser("topo", help="show or export a topology",
                          description="Inspect and export topologies. SPEC is NAME, "
                                      "NAME:key=value,... (see `collsynth list`) or a file path "
                                      "(collsynth JSON/YAML, or a TE-CCL input JSON).")
    tsub = topo.add_subparsers(dest="topo_command", metavar="ACTION", parser_class=_Parser)
    tsub.required = True
    show = tsub.add_parser("show", help="summarize a topology")
    show.add_argument("spec", metavar="SPEC")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.add_argument("--max-rows", type=int, default=64, help="per-node rows to print")
    show.set_defaults(func=_cmd_topo_show)
    exp = tsub.add_parser("export", help="write a topology file")
    exp.add_argument("spec", metavar="SPEC")
    exp.add_argument("-o", "--output", required=True, help="output file (.json, .yaml or .yml)")
    exp.add_argument("--format", choices=("json", "yaml"), help="override the extension")
    exp.add_argument("--json", action="store_true", help="print one JSON object")
    exp.set_defaults(func=_cmd_topo_export)

    lst = sub.add_parser("list", help="list zoo topologies, algorithms and collectives")
    lst.add_argument("--json", action="store_true", help="print one JSON object")
    lst.set_defaults(func=_cmd_list)

    syn = sub.add_parser("synth", help="synthesize a schedule, verify it and write it",
                         description="Synthesize a schedule with ALGO, verify it with the "
                                     "independent verifier and write it as JSON.")
    syn.add_argument("--topology", "-t", required=True, metavar="SPEC")
    syn.add_argument("--collective", "-c", required=True, metavar="NAME",
                     help="allgather, reducescatter, allreduce, broadcast, reduce, alltoall, "
                          "gather, scatter or custom")
    syn.add_argument("--algo", "-a", default="spt", help="algorithm (see `collsynth list`)")
    syn.add_argument("--root", type=int, default=None, help="root rank of rooted collectives")
    syn.add_argument("--chunks", type=int, default=1, help="chunks per rank (default 1)")
    syn.add_argument("--demand", metavar="FILE",
                     help="custom collective: a JSON demand matrix (list of rows) or "
                          "{\"chunks\": [[src, [dsts]], ...]}")
    syn.add_argument("--size", help="data size to record in the schedule (e.g. 1GB)")
    syn.add_argument("-o", "--output", required=True, help="schedule file to write (JSON)")
    syn.add_argument("--json", action="store_true", help="print one JSON object")
    syn.set_defaults(func=_cmd_synth)

    ver = sub.add_parser("verify", help="check that a schedule implements its collective",
                         description="Symbolically execute a schedule file on its topology and "
                                     "report the first violation in one line (exit status 2).")
    ver.add_argument("schedule", metavar="SCHEDULE.json")
    ver.add_argument("--topology", "-t", metavar="SPEC",
                     help="check against this topology (must match the embedded one)")
    ver.add_argument("--json", action="store_true", help="print one JSON object")
    ver.set_defaults(func=_cmd_verify)

    demo = sub.add_parser("demo", help="run the built-in example end to end")
    demo.add_argument("--json", action="store_true", help="print one JSON object")
    demo.set_defaults(func=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except CollsynthError as e:
        print(f"collsynth: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("collsynth: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: still one line, unless debugging
        if os.environ.get("COLLSYNTH_DEBUG"):
            raise
        msg = " ".join(str(e).split())[:300]
        print(f"collsynth: internal error: {type(e).__name__}: {msg} "
              f"(set COLLSYNTH_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
