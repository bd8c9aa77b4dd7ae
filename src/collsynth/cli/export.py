"""``collsynth export FORMAT`` and ``collsynth check-xml``."""

from __future__ import annotations

import argparse
from typing import Any

from .common import Parser, add_command, add_json, add_output, emit_json, refuse_overwriting_inputs


def _positive_int(text: str) -> int:
    """An integer of at least 1 (argparse ``type``: a bad value is a one-line usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_parser(sub: Any) -> None:
    """Register ``export`` (one subcommand per registered exporter) and ``check-xml``."""
    from ..export import load_exporters

    exp = add_command(
        sub,
        "export",
        "export a schedule to a runtime format",
        "Export a schedule file with a registered exporter; where the exporter "
        "has an independent checker, the output passes it before it is written.",
        examples=("collsynth export msccl ar.json --dialect executor -o ar.xml",),
    )
    esub = exp.add_subparsers(dest="export_format", metavar="FORMAT", parser_class=Parser)
    esub.required = True
    for name, exporter in sorted(load_exporters().items()):
        p = add_command(
            esub,
            name,
            exporter.summary,
            examples=(f"collsynth export {name} s.json -o s{exporter.suffix}",),
        )
        p.add_argument("schedule", metavar="SCHEDULE.json")
        for opt in exporter.options.values():
            _add_option_flag(p, opt)
        if name == "msccl":  # the old spelling of --protocol
            p.add_argument(
                "--proto",
                dest="protocol",
                choices=("Simple", "LL", "LL128"),
                help=argparse.SUPPRESS,
            )
        add_output(p, help=f"file to write ({exporter.suffix})")
        add_json(p)
        p.set_defaults(func=cmd_export, exporter=name)

    chk = add_command(
        sub,
        "check-xml",
        "check an MSCCL XML file independently",
        "Parse an MSCCL XML file, enforce the structural rules, pair sends and "
        "receives, detect cycles and deadlocks, execute it symbolically and "
        "confirm the collective's postcondition.",
        examples=("collsynth check-xml ar.xml -t dgx1",),
    )
    chk.add_argument("xml", metavar="FILE.xml")
    chk.add_argument(
        "-t",
        "--topology",
        metavar="SPEC",
        help="check GPU count and that every sending pair has a route",
    )
    chk.add_argument(
        "--dialect",
        choices=("msccl", "executor"),
        default=None,
        help="default: detected from the attributes",
    )
    chk.add_argument("--root", type=int, default=0, help="root of broadcast/reduce programs")
    chk.add_argument(
        "--fifo-slots",
        type=_positive_int,
        default=None,
        metavar="N",
        help="transfers one (sender, receiver, channel) connection buffers before a send "
        "waits (default: 8, the MSCCL runtime's NCCL_STEPS; 1 checks that the program runs "
        "even with one slot, as every file collsynth writes does)",
    )
    add_json(chk)
    chk.set_defaults(func=cmd_check_xml)

    pp = add_command(
        sub,
        "check-mscclpp",
        "check an MSCCL++ execution plan independently",
        "Parse an MSCCL++ execution plan (JSON), enforce the executor's structural rules and "
        "limits, resolve every channel and buffer reference, pair signals with waits, execute "
        "it symbolically (deadlocks, races between unordered accesses) and confirm the "
        "collective's postcondition.",
        examples=("collsynth check-mscclpp plan.json",),
    )
    pp.add_argument("plan", metavar="PLAN.json")
    pp.add_argument("--root", type=int, default=0, help="root of a broadcast plan")
    add_json(pp)
    pp.set_defaults(func=cmd_check_mscclpp)


def _add_option_flag(p: argparse.ArgumentParser, opt: Any) -> None:
    """A ``--NAME`` flag for a declared exporter option (validated by the declaration)."""
    flag = "--" + opt.name.replace("_", "-")
    if opt.kind == "bool":
        p.add_argument(
            flag, dest=opt.name, action="store_const", const="true", default=None, help=opt.help
        )
        return
    p.add_argument(
        flag,
        dest=opt.name,
        default=None,
        metavar=opt.name.upper(),
        help=f"{opt.help} ({opt.values_text()}; default: {opt.default_text()})",
    )


def cmd_export(args: argparse.Namespace) -> int:
    """Export, check, then write the file atomically."""
    from ..atomic import write_text_atomic
    from ..export import get_exporter
    from ..schedule.io import load_schedule

    exporter = get_exporter(args.exporter)
    refuse_overwriting_inputs({"-o": args.output}, {"the schedule": args.schedule})
    sched = load_schedule(args.schedule)
    given = {
        name: getattr(args, name)
        for name in exporter.options
        if getattr(args, name, None) is not None
    }
    text, report = exporter.export(sched, given)
    write_text_atomic(args.output, text)
    values = exporter.options and {
        k: (given.get(k, o.default)) for k, o in exporter.options.items()
    }
    info: dict[str, Any] = {
        "output": args.output,
        "format": exporter.name,
        "checked": report is not None and bool(getattr(report, "ok", True)),
    }
    if report is not None:
        info.update({k: v for k, v in report.to_dict().items() if k != "ok"})
    if "dialect" in (values or {}):
        info["dialect"] = exporter.options["dialect"].parse(values["dialect"], "export")
    if args.json:
        emit_json(info)
    elif exporter.name == "msccl" and report is not None:
        print(
            f"wrote {args.output} ({info['dialect']} dialect, {report.ngpus} GPUs, "
            f"{report.nchannels} channel(s), {report.threadblocks} thread blocks, "
            f"{report.steps} steps); the independent XML checker passed"
        )
    elif exporter.name == "mscclpp" and report is not None:
        print(
            f"wrote {args.output} (MSCCL++ plan, {report.ngpus} GPUs, {report.threadblocks} "
            f"thread blocks, {report.operations} operations); the independent plan checker "
            "passed"
        )
    else:
        checked = "; its checker passed" if report is not None else ""
        print(f"wrote {args.output} ({exporter.name}){checked}")
    return 0


def cmd_check_xml(args: argparse.Namespace) -> int:
    """Check an MSCCL XML file."""
    from ..export import check_msccl_xml
    from ..export.check import RUNTIME_FIFO_SLOTS
    from ..topology import load_topology
    from ..topology.io import read_text

    topo = load_topology(args.topology) if args.topology else None
    text = read_text(args.xml)
    report = check_msccl_xml(text, topo, dialect=args.dialect, root=args.root,
                             fifo_slots=args.fifo_slots or RUNTIME_FIFO_SLOTS)  # fmt: skip
    if args.json:
        emit_json({"xml": args.xml, **report.to_dict()})
    else:
        print(
            f"OK: {args.xml}: {report.coll} on {report.ngpus} GPUs ({report.dialect} "
            f"dialect), {report.threadblocks} thread blocks, {report.steps} steps, "
            f"{report.transfers} transfers; checks: {', '.join(report.checks)}"
        )
    return 0


def cmd_check_mscclpp(args: argparse.Namespace) -> int:
    """Check an MSCCL++ execution plan."""
    from ..export.mscclpp_check import check_mscclpp_plan
    from ..topology.io import read_text

    report = check_mscclpp_plan(read_text(args.plan), root=args.root, source=args.plan)
    if args.json:
        emit_json(report.to_dict())
    else:
        print(
            f"{args.plan}: {report.collective} on {report.ngpus} GPUs, {report.threadblocks} "
            f"thread blocks, {report.operations} operations, {report.transfers} transfers; "
            "the plan is sound"
        )
    return 0
