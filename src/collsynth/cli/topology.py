"""``collsynth topo show|export`` and ``collsynth list``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..errors import CollsynthError
from ..units import fmt_bandwidth, fmt_size, fmt_time
from .common import (
    Parser,
    add_command,
    add_json,
    add_output,
    console,
    emit_json,
    refuse_overwriting_inputs,
)


def add_parser(sub: Any) -> None:
    """Register ``topo`` (show, export) and ``list``."""
    topo = add_command(
        sub,
        "topo",
        "show or export a topology",
        "Inspect and export topologies. SPEC is NAME, NAME:key=value,... (see "
        "`collsynth list`), a file path (collsynth JSON/YAML, or a TE-CCL "
        "input JSON) or an imported file: nccl-xml:FILE, nvidia-smi:FILE or "
        "rocm-smi:FILE, with options such as nodes=N,fabric=rail (docs/formats.md).",
        examples=(
            "collsynth topo show -t mi250:chassis=2",
            "collsynth topo export -t dgx1 -o dgx1.yaml",
            "collsynth topo show -t nccl-xml:topo.xml,nodes=4,fabric=rail",
        ),
    )
    tsub = topo.add_subparsers(dest="topo_command", metavar="ACTION", parser_class=Parser)
    tsub.required = True
    show = add_command(
        tsub,
        "show",
        "summarize a topology",
        examples=(
            "collsynth topo show -t dgx_a100:nodes=2",
            "collsynth topo show -t my_fabric.yaml --json",
        ),
    )
    _add_spec(show)
    add_json(show)
    show.add_argument("--max-rows", type=int, default=64, help="per-node rows to print")
    show.set_defaults(func=cmd_topo_show)
    exp = add_command(
        tsub,
        "export",
        "write a topology file in the collsynth format",
        examples=("collsynth topo export -t ndv2:chassis=2 -o ndv2x2.json",),
    )
    _add_spec(exp)
    add_output(exp, help="output file (.json, .yaml or .yml)")
    exp.add_argument("--format", choices=("json", "yaml"), help="override the extension")
    add_json(exp)
    exp.set_defaults(func=cmd_topo_export)

    lst = add_command(
        sub,
        "list",
        "list zoo topologies, algorithms (with their options) and collectives",
        examples=(
            "collsynth list",
            "collsynth list --json",
            "collsynth list --options-markdown > docs/options.md",
        ),
    )
    add_json(lst)
    lst.add_argument(
        "--options-markdown",
        action="store_true",
        help="print the algorithms' option tables as Markdown (docs/options.md)",
    )
    lst.set_defaults(func=cmd_list)


def _add_spec(p: argparse.ArgumentParser) -> None:
    """``-t/--topology SPEC`` (the SPEC may also come positionally, as before)."""
    p.add_argument("spec", nargs="?", metavar="SPEC", help=argparse.SUPPRESS)
    p.add_argument(
        "-t",
        "--topology",
        metavar="SPEC",
        help="zoo NAME[:key=value,...], a topology file (JSON, YAML, TE-CCL input) or "
        "SOURCE:FILE[,key=value,...] (nccl-xml, nvidia-smi, rocm-smi)",
    )


def _spec(args: argparse.Namespace) -> str:
    """The topology named by ``-t`` or positionally (exactly one of them)."""
    if args.spec is not None and args.topology is not None and args.spec != args.topology:
        raise CollsynthError(f"two topologies given ({args.spec!r} and -t {args.topology!r})")
    spec = args.topology if args.topology is not None else args.spec
    if spec is None:
        raise CollsynthError(f"topo {args.topo_command}: -t/--topology SPEC is required")
    return spec


def cmd_topo_show(args: argparse.Namespace) -> int:
    """Print a topology's summary."""
    from ..topology import load_topology

    spec = _spec(args)
    topo = load_topology(spec)
    info = topo.summary()
    if args.json:
        emit_json(info)
        return 0
    from rich.markup import escape
    from rich.table import Table

    con = console()
    con.print(
        f"[bold]{escape(topo.name)}[/bold]  ({escape(spec)})  fingerprint {info['fingerprint']}"
    )
    diameter = info["hop_diameter"]
    if diameter is None:  # not proved exactly within the work limit: its bounds
        diameter = "{}..{}".format(*info["hop_diameter_bounds"])
    con.print(
        f"compute nodes {info['compute_nodes']}, switches {info['switches']}, routers "
        f"{info['routers']}, links {info['links']}, hop diameter {diameter}"
    )
    classes = ", ".join(f"{k}: {v}" for k, v in info["links_by_class"].items())
    con.print(f"links by class: {escape(classes)}")
    for key in ("source", "notes"):
        if key in topo.meta:
            con.print(f"{key}: {escape(str(topo.meta[key]))}")
    table = Table(title="per compute node")
    for col in ("rank", "name", "out links", "out bw", "in links", "in bw"):
        table.add_column(col, justify="right" if col != "name" else "left")
    rows = info["per_node"]
    shown = rows[: max(0, args.max_rows)]
    for r in shown:
        table.add_row(
            str(r["rank"]),
            escape(r["name"]),
            str(r["out_links"]),
            fmt_bandwidth(r["out_bw"]),
            str(r["in_links"]),
            fmt_bandwidth(r["in_bw"]),
        )
    con.print(table)
    if len(rows) > len(shown):
        con.print(f"... {len(rows) - len(shown)} more (use --max-rows or --json)")
    return 0


def cmd_topo_export(args: argparse.Namespace) -> int:
    """Write a topology file."""
    from ..topology import load_topology
    from ..topology.io import save_topology

    spec = _spec(args)
    refuse_overwriting_inputs({"-o": args.output}, {"-t": spec})
    topo = load_topology(spec)
    save_topology(topo, args.output, args.format)
    if args.json:
        emit_json(
            {
                "output": args.output,
                "name": topo.name,
                "fingerprint": topo.fingerprint,
                "compute_nodes": topo.num_ranks,
                "links": len(topo.links),
            }
        )
    else:
        print(
            f"wrote {args.output} ({topo.name}: {topo.num_ranks} compute nodes, "
            f"{len(topo.links)} links)"
        )
    return 0


def catalog() -> dict[str, Any]:
    """Zoo topologies, algorithms with their declared options, collectives, exporters."""
    from ..collective import CollKind
    from ..export import load_exporters
    from ..synth import load_all
    from ..topology import zoo as _zoo  # noqa: F401  (registers the zoo)
    from ..topology.registry import ZOO
    from ..topology.sources import entries

    return {
        "topologies": {
            name: {
                "summary": e.summary,
                "params": {
                    k: {"kind": p.kind, "default": _show_default(p), "doc": p.help}
                    for k, p in e.params.items()
                },
            }
            for name, e in sorted(ZOO.items())
        },
        "topology_sources": {
            e.name: {
                "summary": e.summary,
                "params": {
                    k: {"kind": p.kind, "default": _show_default(p), "doc": p.help}
                    for k, p in e.params.items()
                },
            }
            for _, e in sorted(entries().items())
        },
        "algorithms": {
            name: {
                "summary": a.summary,
                "collectives": sorted(k.value for k in a.collectives),
                "options": {k: o.to_dict() for k, o in a.options.items()},
                "size_aware": a.size_aware,
                "reference": a.reference,
            }
            for name, a in sorted(load_all().items())
        },
        "collectives": [k.value for k in CollKind],
        "exporters": {
            name: {
                "summary": e.summary,
                "suffix": e.suffix,
                "options": {k: o.to_dict() for k, o in e.options.items()},
            }
            for name, e in sorted(load_exporters().items())
        },
    }


def _show_default(p: Any) -> Any:
    if p.default is None:
        return None
    fmts: dict[str, Callable[[float], str]] = {
        "bw": fmt_bandwidth,
        "time": fmt_time,
        "size": fmt_size,
    }
    fmt = fmts.get(p.kind)
    return fmt(p.default) if fmt else p.default


def options_markdown() -> str:
    """The algorithms' option tables (docs/options.md), from their declarations."""
    from ..synth import DEFAULT_SIZE, load_all

    lines = [
        "# Algorithm options",
        "",
        "Generated from the algorithms' declarations by "
        "`collsynth list --options-markdown`; do not edit by hand.",
        "",
        "Give options as `--opt KEY=VALUE[,KEY=VALUE...]` (repeatable); `compare` and "
        "`tune` also take `--opt ALGO.KEY=VALUE`. Options marked with a flag also have a "
        "shorthand (`--k 2` is `--opt k=2`). Durations take units (`2us`), sizes too "
        f"(`1MB`). Size-aware algorithms plan for {fmt_size(DEFAULT_SIZE, binary=True)} "
        "when no `--size` is given.",
        "",
    ]
    for name, algo in sorted(load_all().items()):
        lines += [f"## {name}", "", algo.summary + ".", ""]
        if algo.reference:
            lines += [f"Reference: {algo.reference}.", ""]
        if not algo.options:
            lines += ["No options.", ""]
            continue
        lines += ["| option | values | default | flag | meaning |", "|---|---|---|---|---|"]
        for opt in algo.options.values():
            flag = f"`--{opt.name.replace('_', '-')}`" if opt.shorthand else ""
            values = opt.values_text().replace("|", "\\|")
            lines.append(
                f"| `{opt.name}` | {values} | `{opt.default_text()}` | {flag} | "
                f"{opt.help.replace('|', '/')} |"
            )
        lines.append("")
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    """Print the catalog (tables, JSON or the option tables)."""
    if args.options_markdown:
        print(options_markdown())
        return 0
    data = catalog()
    if args.json:
        emit_json(data)
        return 0
    from rich.table import Table

    con = console()
    tables = (
        ("topologies", "topologies (-t NAME:key=value,...)"),
        ("topology_sources", "topology sources (-t NAME:FILE,key=value,...)"),
    )
    for key, title in tables:
        t = Table(title=title)
        for col in ("name", "parameters (defaults)", "summary"):
            t.add_column(col)
        for name, e in data[key].items():
            params = ", ".join(f"{k}={v['default']}" for k, v in e["params"].items())
            t.add_row(name, params, e["summary"])
        con.print(t)
    t = Table(title="algorithms (--opt KEY=VALUE[,KEY=VALUE]; values and defaults)")
    for col in ("name", "collectives", "summary", "options"):
        t.add_column(col)
    for name, a in data["algorithms"].items():
        opts = "; ".join(
            f"{k}={o['values']} (default {o['default']})" for k, o in a["options"].items()
        )
        t.add_row(name, ", ".join(a["collectives"]), a["summary"], opts)
    con.print(t)
    con.print("collectives: " + ", ".join(data["collectives"]))
    con.print("exporters: " + ", ".join(data["exporters"]))
    return 0
