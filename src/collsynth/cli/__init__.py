"""The ``collsynth`` command line: one module per command group, assembled here.

Contract: every command has ``--help`` (with every default and an example); ``--json`` prints
exactly one JSON document on stdout; sizes, bandwidths and times accept human units; a bad
input prints one line on stderr naming the problem and exits with status 2; a ``--time-limit``
that ends before any result exits with status 4. Internal failures
print one line and exit with status 1 (``COLLSYNTH_DEBUG=1`` shows the traceback).

Modules: :mod:`.common` (parser, help layout, typed requests, output), :mod:`.topology`
(``topo``, ``list``), :mod:`.synth`, :mod:`.verify` (``verify``, ``simulate``), :mod:`.bound`,
:mod:`.compare` (``compare``, ``tune``), :mod:`.export` (``export``, ``check-xml``,
``check-mscclpp``), :mod:`.run`, :mod:`.testbed`, :mod:`.wan`, :mod:`.bench`, :mod:`.demo`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__, deadline
from ..errors import CollsynthError
from . import bench, bound, compare, demo, export, run, synth, testbed, topology, verify, wan
from .common import Parser, UsageError, time_limit_of

#: The command groups, in the order ``--help`` lists them.
GROUPS = (topology, synth, verify, bound, compare, export, run, testbed, wan, bench, demo)


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


def _run(args: argparse.Namespace) -> int:
    """The command's handler, within its ``--time-limit`` where it has one."""
    limit = time_limit_of(args)
    if getattr(args, "time_limit_each", False):
        with deadline.each_synthesis(limit):
            return int(args.func(args) or 0)
    with deadline.time_limit(limit, what=f"collsynth {args.command}", exit_status=4):
        return int(args.func(args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; map errors to exit statuses (2 bad input, 3 a failed run, 4 time
    limit, 1 internal, 130 interrupt)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return _run(args)
    except UsageError as e:
        cmd = e.prog.removeprefix("collsynth").strip()
        where = f"{cmd}: " if cmd else ""
        print(f"collsynth: error: {where}{e} (see {e.prog} --help)", file=sys.stderr)
        return 2
    except deadline.TimeLimitError as e:
        print(f"collsynth: error: {e}", file=sys.stderr)
        return 4
    except CollsynthError as e:
        print(f"collsynth: error: {e}", file=sys.stderr)
        return int(getattr(e, "exit_status", 2))
    except KeyboardInterrupt:
        print("collsynth: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except ValueError as e:
        if "null byte" not in str(e):
            return _internal(e)
        print("collsynth: error: a file name or argument contains a NUL byte", file=sys.stderr)
        return 2
    except Exception as e:  # a bug: still one line, unless debugging
        return _internal(e)


def _internal(e: Exception) -> int:
    """A bug: one line (``COLLSYNTH_DEBUG=1`` re-raises for the traceback); exit status 1."""
    if os.environ.get("COLLSYNTH_DEBUG"):
        raise e
    msg = " ".join(str(e).split())[:300]
    print(
        f"collsynth: internal error: {type(e).__name__}: {msg} "
        f"(set COLLSYNTH_DEBUG=1 for a traceback)",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
