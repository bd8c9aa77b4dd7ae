"""The ``collsynth`` command line: one module per command group, assembled here.

Contract: every command has ``--help`` (with every default and an example); ``--json`` prints
exactly one JSON document on stdout; sizes, bandwidths and times accept human units; a bad
input prints one line on stderr naming the problem and exits with status 2. Internal failures
print one line and exit with status 1 (``COLLSYNTH_DEBUG=1`` shows the traceback).

Modules: :mod:`.common` (parser, help layout, typed requests, output), :mod:`.topology`
(``topo``, ``list``), :mod:`.synth`, :mod:`.verify` (``verify``, ``simulate``), :mod:`.bound`,
:mod:`.compare` (``compare``, ``tune``), :mod:`.export` (``export``, ``check-xml``),
:mod:`.run`, :mod:`.wan`, :mod:`.bench`, :mod:`.demo`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import CollsynthError
from . import bench, bound, compare, demo, export, run, synth, topology, verify, wan
from .common import Parser, UsageError

#: The command groups, in the order ``--help`` lists them.
GROUPS = (topology, synth, verify, bound, compare, export, run, wan, bench, demo)


def build_parser() -> Parser:
    """The whole command line: each group adds its subcommands."""
    p = Parser(
        prog="collsynth",
        description="Design, bound, verify, simulate and export collective-communication "
        "schedules for accelerator networks.",
        epilog="examples:\n  collsynth demo\n  collsynth compare -t dgx1 -c allreduce "
        "--sizes 1KB:1GB:x8\n  collsynth COMMAND --help",
    )
    p.add_argument("--version", action="version", version=f"collsynth {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for group in GROUPS:
        group.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; map errors to exit statuses (2 bad input, 1 internal, 130 interrupt)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except UsageError as e:
        cmd = e.prog.removeprefix("collsynth").strip()
        where = f"{cmd}: " if cmd else ""
        print(f"collsynth: error: {where}{e} (see {e.prog} --help)", file=sys.stderr)
        return 2
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
        print(
            f"collsynth: internal error: {type(e).__name__}: {msg} "
            f"(set COLLSYNTH_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
