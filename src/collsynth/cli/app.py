"""The command line's assembly and its exit statuses.

:func:`build_parser` assembles every command group's subcommands (``GROUPS``, in ``--help``'s
order); :func:`main` runs one command under the one interrupt handler
(:mod:`collsynth.interrupt`) with warnings kept off stderr, and maps what ends it to one line
on stderr and an exit status (2 bad input, 3 a failed run, 4 time limit, 1 internal, 128 + the
signal's number for an interruption). :func:`debugging` says whether internal errors show
their traceback (``COLLSYNTH_DEBUG``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence

from .. import __version__, deadline, interrupt
from ..errors import CollsynthError
from ..params import TRUE_WORDS
from . import bench, bound, compare, demo, export, run, synth, testbed, topology, verify, wan
from .common import HELP_AS_JSON, Parser, UsageError, add_quiet, time_limit_of

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
    for leaf in _commands(p):  # every command takes -q (it hides progress where there is any)
        if not {"-q", "--quiet"} & set(leaf._option_string_actions):
            add_quiet(leaf)
    return p


def _commands(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of every command (the leaves under the command groups)."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [p]
    return [leaf for s in subs for c in dict.fromkeys(s.choices.values()) for leaf in _commands(c)]


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
    limit, 1 internal; an interrupting signal: 128 + its number, 130 SIGINT, 143 SIGTERM,
    129 SIGHUP). SIGINT, SIGTERM and SIGHUP share one handler (:mod:`collsynth.interrupt`);
    warnings never reach stderr."""
    with interrupt.handled(), _no_warnings():
        try:
            status = _main(argv)
        except KeyboardInterrupt as e:  # arrived while an error line was being printed
            status = _interrupted(e)
        finally:
            HELP_AS_JSON[0] = False
    if argv is None and status in {128 + s for s in interrupt.SIGNALS}:  # a process's end
        _last_line_said()
    return status


def _interrupted(e: BaseException) -> int:
    """One line naming the signal; exit status 128 + its number."""
    name = interrupt.signal_name(getattr(e, "signum", 2))
    print(f"collsynth: interrupted ({name})", file=sys.stderr)
    return interrupt.status_of(e)


def _last_line_said() -> None:
    """The process ends after an interruption: what libraries report while it shuts down
    (a half-started Dask cluster, asyncio's unfinished tasks) goes to /dev/null, so stderr
    holds the one line."""
    try:
        sys.stderr.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
    except (OSError, ValueError):  # pragma: no cover
        pass


@contextlib.contextmanager
def _no_warnings() -> Iterator[None]:
    """Warnings (numpy's RuntimeWarnings on extreme numbers, libraries' deprecations) never
    reach stderr, here or in the processes the command starts (``PYTHONWARNINGS``); stderr
    holds collsynth's own lines only."""
    had = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "ignore"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if had is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = had


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # --help with --json prints the help as one JSON document
    HELP_AS_JSON[0] = "--json" in words[: words.index("--")] if "--" in words else "--json" in words
    try:
        parser = build_parser()
        args = parser.parse_args(words)
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
    except KeyboardInterrupt as e:  # SIGINT, SIGTERM or SIGHUP (collsynth.interrupt)
        return _interrupted(e)
    except BrokenPipeError:
        return 0
    except ValueError as e:
        if "null byte" not in str(e):
            return _internal(e)
        print("collsynth: error: a file name or argument contains a NUL byte", file=sys.stderr)
        return 2
    except Exception as e:  # a bug: still one line, unless debugging
        cause = _interruption_in(e)
        if cause is not None:  # a signal's exception surfaced through compiled code
            return _interrupted(cause)
        return _internal(e)


def _interruption_in(e: BaseException) -> BaseException | None:
    """The interruption behind ``e`` (a handler that raised while a compiled call returned
    surfaces as a ``SystemError`` caused by it), else ``None``."""
    cur: BaseException | None = e
    for _ in range(20):
        if cur is None or isinstance(cur, KeyboardInterrupt):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def _internal(e: Exception) -> int:
    """A bug: one line (``COLLSYNTH_DEBUG=1`` re-raises for the traceback); exit status 1."""
    if debugging():
        raise e
    msg = " ".join(str(e).split())[:300]
    print(
        f"collsynth: internal error: {type(e).__name__}: {msg} "
        f"(set COLLSYNTH_DEBUG=1 for a traceback)",
        file=sys.stderr,
    )
    return 1


def debugging() -> bool:
    """``COLLSYNTH_DEBUG`` is 1, true, yes or on (any case): internal errors show their
    traceback. Anything else (unset, empty, 0, false, no, off) keeps them to one line."""
    return os.environ.get("COLLSYNTH_DEBUG", "").strip().lower() in TRUE_WORDS
