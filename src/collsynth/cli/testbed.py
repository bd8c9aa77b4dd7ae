"""``collsynth testbed up|down|status``: the emulated network testbed's wiring."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import CollsynthError
from .common import add_command, add_json, add_topology, emit_json

#: Default shaping: the fastest link of the topology becomes this many bytes/s (100 Mbit/s),
#: well under what 2 cores move over veth pairs.
DEFAULT_TOP_RATE = 12.5e6


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "testbed",
        "emulated network testbed: one namespace per rank, shaped links",
        "Make, list and remove emulated networks with the topology's shape: one network "
        "namespace per rank, a bridge namespace per switch, one veth pair per pair of "
        "neighbours shaped with tc. Needs root and iproute2; addresses only in 198.18.0.0/15.",
        examples=(
            "collsynth testbed up -t ring:n=4",
            "collsynth testbed status --json",
            "collsynth testbed down --all",
        ),
    )
    tsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    u = add_command(
        tsub,
        "up",
        "make a testbed for a topology",
        examples=("collsynth testbed up -t dgx1 --scale 1e-3",),
    )
    add_topology(u)
    u.add_argument(
        "--scale",
        type=float,
        default=None,
        help="multiply every bandwidth by this (default: the fastest link becomes 100 Mbit/s)",
    )
    add_json(u)
    u.set_defaults(func=cmd_up)
    d = add_command(tsub, "down", "remove a testbed", examples=("collsynth testbed down cs1a2b",))
    d.add_argument("prefix", nargs="?", metavar="PREFIX", help="the testbed to remove")
    d.add_argument("--all", action="store_true", help="remove every testbed on this machine")
    add_json(d)
    d.set_defaults(func=cmd_down)
    s = add_command(tsub, "status", "list the testbeds", examples=("collsynth testbed status",))
    add_json(s)
    s.set_defaults(func=cmd_status)


def cmd_up(args: argparse.Namespace) -> int:
    from ..testbed import netns, plan_wiring
    from ..topology import load_topology

    netns.require_tools()
    topo = load_topology(args.topology)
    scale = args.scale
    if scale is None:
        scale = DEFAULT_TOP_RATE / max(float(link.bw) for link in topo.links)
    w = plan_wiring(topo, scale, netns.new_prefix())
    netns.up(w)
    info = {
        "prefix": w.prefix,
        "topology": topo.name,
        "scale": w.scale,
        "namespaces": len(w.namespaces),
        "links": len(w.veths),
    }
    if args.json:
        emit_json(info)
    else:
        print(
            f"testbed {w.prefix}: {topo.name}, {len(w.namespaces)} namespaces, "
            f"{len(w.veths)} shaped links (bandwidth x {w.scale:.3g}); remove with "
            f"collsynth testbed down {w.prefix}"
        )
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from ..testbed import netns

    if bool(args.prefix) == bool(args.all):
        raise CollsynthError("testbed down: give a PREFIX or --all")
    netns.require_tools()
    gone = netns.down_all() if args.all else netns.down(args.prefix)
    if args.json:
        emit_json({"removed": gone})
    else:
        print(f"removed {len(gone)} namespaces and links")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from ..testbed import netns

    netns.require_tools()
    beds = netns.status()
    if args.json:
        emit_json({"testbeds": beds})
    elif not beds:
        print("no testbed")
    else:
        for b in beds:
            print(f"{b['prefix']}: {b['topology'] or '(leftover)'}, {b['namespaces']} namespaces")
    return 0
