"""What every command shares: the parser class, help layout, output helpers, and the typed
request (topology, collective, algorithm, options, sizes) that handlers build from arguments."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..atomic import check_outputs
from ..collective import Collective
from ..errors import CollsynthError
from ..topology.model import Topology
from ..units import parse_size, parse_size_list, parse_time

#: The sizes ``compare`` and ``tune`` use when ``--sizes`` is not given.
DEFAULT_SIZES = "1KB,32KB,1MB,32MB,1GB"


class UsageError(CollsynthError):
    """A command-line usage error; ``prog`` names the (sub)command."""

    def __init__(self, message: str, prog: str):
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one-line :class:`UsageError` (exit status 2) and lays
    out help with every default shown and the epilog (examples) kept as written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)

    def print_help(self, file: Any = None) -> None:
        """The help; with ``--json`` on the command line, as one JSON document
        ``{"command", "usage", "help"}`` (the same text, stdout holding one document)."""
        if not HELP_AS_JSON[0]:
            return super().print_help(file)
        usage = " ".join(self.format_usage().split())
        emit_json({"command": self.prog, "usage": usage.removeprefix("usage: "),
                   "help": self.format_help()})  # fmt: skip


#: whether ``--help`` prints JSON (``--json`` is on the command line; set by ``cli.main``)
HELP_AS_JSON = [False]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` after every option that has a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
            or isinstance(default, (list, tuple))
        ):
            return text
        return f"{text} (default: %(default)s)"


def add_command(
    sub: Any, name: str, help: str, description: str | None = None, examples: tuple[str, ...] = ()
) -> Parser:
    """A subcommand whose help ends with its examples."""
    epilog = None
    if examples:
        epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(
        name, help=help, description=description or help[:1].upper() + help[1:], epilog=epilog
    )


def add_json(p: argparse.ArgumentParser) -> None:
    """``--json``: print exactly one JSON document on stdout."""
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_time_limit(p: argparse.ArgumentParser, each: bool = False) -> None:
    """``--time-limit TIME``: bound the command's work (``each``: every single synthesis)."""
    scope = (
        "of every synthesis in the suite"
        if each
        else "of the whole command (synthesis, solving, verification)"
    )
    p.add_argument(
        "--time-limit",
        metavar="TIME",
        help=f"wall-time limit {scope}, e.g. 30s or 120s; solvers stop early and return their "
        "best verified schedule (meta.status=time_limit); other work that cannot finish in "
        "time ends with exit status 4 (default: no limit)",
    )
    p.set_defaults(time_limit_each=each)


def time_limit_of(args: argparse.Namespace) -> float | None:
    """The ``--time-limit`` of ``args`` in seconds (``None``: none given)."""
    from .. import deadline

    text = getattr(args, "time_limit", None)
    if text is None:
        return None
    return deadline.parse_limit(parse_time(text, "--time-limit"))


def add_output(
    p: argparse.ArgumentParser,
    required: bool = True,
    default: str | None = None,
    metavar: str = "FILE",
    help: str = "file to write",
) -> None:
    """``-o/--output`` (``--out`` is accepted as an old spelling)."""
    p.add_argument(
        "-o",
        "--output",
        "--out",
        dest="output",
        required=required,
        default=default,
        metavar=metavar,
        help=help,
    )


def add_topology(p: argparse.ArgumentParser, required: bool = True) -> None:
    """``-t/--topology SPEC``."""
    p.add_argument(
        "-t",
        "--topology",
        required=required,
        metavar="SPEC",
        help="zoo NAME[:key=value,...] or a topology file (JSON, YAML, TE-CCL input)",
    )


def add_size(p: argparse.ArgumentParser, required: bool = False, help: str = "") -> None:
    """``-s/--size SIZE``."""
    p.add_argument(
        "-s",
        "--size",
        required=required,
        metavar="SIZE",
        help=help or "collective size, e.g. 1MB (nccl-tests convention)",
    )


def add_sizes(p: argparse.ArgumentParser, default: str | None = DEFAULT_SIZES) -> None:
    """``--sizes LIST|SWEEP``, and nccl-tests' ``-b/-e/-f/-i`` sweep flags."""
    p.add_argument(
        "--sizes",
        default=default,
        metavar="SIZES",
        help="comma-separated sizes and sweeps: 1KB,1MB or 1KB:1GB:x2 (x factor) or "
        "1MB:8MB:+1MB (step)" + (f" (default {default})" if default else ""),
    )
    g = p.add_argument_group(
        "size sweep as nccl-tests spells it, instead of --sizes (a bare K/M/G is 1024-based "
        "as in nccl-tests: -e 128M is 128 MiB)"
    )
    g.add_argument("-b", "--minbytes", metavar="SIZE", help="smallest size (nccl-tests -b)")
    g.add_argument("-e", "--maxbytes", metavar="SIZE", help="largest size (nccl-tests -e)")
    g.add_argument(
        "-f", "--stepfactor", metavar="F", help="multiply the size by F each step (default 2)"
    )
    g.add_argument("-i", "--stepbytes", metavar="SIZE", help="add SIZE each step instead")


def sizes_text(args: argparse.Namespace) -> str:
    """The sizes asked for: ``--sizes``, or the sweep of ``-b/-e/-f/-i`` (nccl-tests' flags,
    which default to 32 MB for ``-e`` and to the other end for a missing ``-b``)."""
    b, e = getattr(args, "minbytes", None), getattr(args, "maxbytes", None)
    f, i = getattr(args, "stepfactor", None), getattr(args, "stepbytes", None)
    if b is None and e is None and f is None and i is None:
        return args.sizes
    if args.sizes is not None and args.sizes is not DEFAULT_SIZES:  # argparse keeps the default
        raise CollsynthError("give either --sizes or -b/-e/-f/-i, not both")
    if f is not None and i is not None:
        raise CollsynthError("give -f (a factor) or -i (a step), not both")
    if b is None and e is None:
        raise CollsynthError("-f/-i need -b and/or -e")
    lo = str(b if b is not None else e)
    hi = str(e if e is not None else b)
    step = f"+{_binary(i)}" if i is not None else f"x{f if f is not None else 2}"
    return f"{_binary(lo)}:{_binary(hi)}:{step}"


def _binary(text: str) -> str:
    """nccl-tests reads a bare K/M/G/T suffix as a power of 1024 (``-e 128M`` is 128 MiB);
    collsynth's own sizes read ``MB`` as 10^6 and ``MiB`` as 2^20, so ``128M`` becomes
    ``128MiB`` here."""
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGTkmgt])\s*", text)
    return f"{m.group(1)}{m.group(2).upper()}iB" if m else text


def add_problem(p: argparse.ArgumentParser, chunks: bool = True, required: bool = True) -> None:
    """``-t``, ``-c``, ``--root``, ``--chunks`` and ``--demand`` (synth, bound, compare, tune)."""
    add_topology(p, required=required)
    p.add_argument(
        "-c",
        "--collective",
        required=required,
        metavar="NAME",
        help="allgather, reducescatter, allreduce, broadcast, reduce, alltoall, "
        "gather, scatter or custom",
    )
    p.add_argument("--root", type=int, default=None, help="root rank of rooted collectives")
    p.add_argument(
        "--chunks", type=int, default=1, help="chunks per rank" if chunks else argparse.SUPPRESS
    )
    p.add_argument(
        "--demand",
        metavar="FILE",
        help="custom collective: a JSON demand matrix (list of rows) or "
        '{"chunks": [[src, [dsts]], ...]}',
    )


def add_options(p: argparse.ArgumentParser, targeted: bool) -> None:
    """``--opt`` plus one ``--NAME`` flag per declared shorthand option."""
    from ..synth import shorthand_options

    what = "[ALGO.]KEY=VALUE[,...]" if targeted else "KEY=VALUE[,...]"
    extra = (
        ": ALGO.KEY for one algorithm, KEY for every algorithm that declares it" if targeted else ""
    )
    p.add_argument(
        "--opt",
        action="append",
        metavar=what,
        help=f"algorithm options (repeatable or comma-joined){extra}; "
        f"`collsynth list` shows each algorithm's options",
    )
    for name, opt in sorted(shorthand_options().items()):
        flag = "--" + name.replace("_", "-")
        p.add_argument(
            flag,
            dest=f"opt_{name}",
            metavar=name.upper(),
            help=f"same as --opt {name}=VALUE: {opt.help.split(';')[0]}",
        )


# ------------------------------------------------------------------------------ requests
@dataclass
class Request:
    """A typed request: what a handler hands to the library."""

    topology: Topology
    collective: Collective
    algorithm: str | None = None
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    sizes: list[float] = field(default_factory=list)

    @property
    def size(self) -> float | None:
        return self.sizes[0] if self.sizes else None


def make_collective(args: argparse.Namespace, topo: Topology) -> Collective:
    """The collective of ``-c/--collective``, ``--root``, ``--chunks`` and ``--demand``."""
    from ..collective import parse_kind

    kind = parse_kind(args.collective)
    if kind.value == "custom":
        return _custom_collective(args.demand, topo)
    chunks = getattr(args, "chunks", 1)
    if chunks < 1:
        raise CollsynthError(f"--chunks must be at least 1, got {chunks}")
    root = args.root
    if root is not None and not 0 <= root < topo.num_ranks:
        raise CollsynthError(
            f"--root {root} is not a rank of {topo.name} (0..{topo.num_ranks - 1})"
        )
    if root is not None and kind.value not in ("broadcast", "reduce", "gather", "scatter"):
        raise CollsynthError(f"--root does not apply to {kind.value}")
    return Collective.make(kind, topo.num_ranks, chunks, root)


def _custom_collective(path: str | None, topo: Topology) -> Collective:
    """A custom collective from a demand file."""
    if not path:
        raise CollsynthError("--collective custom needs --demand FILE.json")
    from ..topology.io import read_structured

    data = read_structured(path)
    n = topo.num_ranks
    # the ranks are checked against the topology before any chunk is listed
    given = data.get("ranks", n) if isinstance(data, dict) else n
    if isinstance(data, list) and all(isinstance(r, list) and len(r) == len(data) for r in data):
        given = len(data)  # a square matrix: its side
    if isinstance(given, int) and not isinstance(given, bool) and given != n:
        raise CollsynthError(f"{path}: demand is for {given} ranks but the topology has {n}")
    if isinstance(data, dict):
        coll = Collective.from_dict({"kind": "custom", "ranks": n, **data}, source=path)
    else:
        try:
            coll = Collective.from_demand_matrix(data, n)
        except CollsynthError as e:
            raise CollsynthError(f"{path}: {e}") from None
    if coll.num_ranks != topo.num_ranks:
        raise CollsynthError(
            f"{path}: demand is for {coll.num_ranks} ranks but the topology has {topo.num_ranks}"
        )
    return coll


def parse_positive_size(text: str, flag: str) -> float:
    """A size that must be positive."""
    size = parse_size(text, flag)
    if not size > 0:
        raise CollsynthError(f"{flag} {text!r} must be positive")
    return size


def parse_sizes(text: str, flag: str = "--sizes") -> list[float]:
    """``--sizes``: a list and/or sweeps, every size positive."""
    sizes = parse_size_list(text, flag)
    if any(not x > 0 for x in sizes):
        raise CollsynthError(f"{flag} must all be positive")
    return sizes


def algo_options(args: argparse.Namespace, algo: str | None) -> dict[str, dict[str, str]]:
    """``--opt`` items plus the shorthand flags, as ``{algo or '*': {key: value}}``."""
    from ..synth import parse_options, shorthand_options

    items = list(getattr(args, "opt", None) or [])
    for name in shorthand_options():
        value = getattr(args, f"opt_{name}", None)
        if value is not None:
            items.append(f"{name}={value}")
    return parse_options(items, algo)


def build_request(
    args: argparse.Namespace, *, sizes: bool = False, algorithm: str | None = None
) -> Request:
    """The request of a problem command: topology, collective, options and sizes."""
    from ..topology import load_topology

    topo = load_topology(args.topology)
    coll = make_collective(args, topo)
    req = Request(topo, coll, algorithm, algo_options(args, algorithm))
    if sizes:
        req.sizes = parse_sizes(sizes_text(args))
    elif getattr(args, "size", None) is not None:
        req.sizes = [parse_positive_size(args.size, "--size")]
    return req


# ------------------------------------------------------------------------------ output
def emit_json(obj: Any) -> None:
    """Write one JSON document on stdout, whole (an interrupting signal waits until it is
    out): strict JSON, numpy values converted and a number that is not finite (an infinite
    or undefined figure) written as ``null``, never as the non-JSON ``Infinity``/``NaN``."""
    from ..interrupt import deferred

    text = json.dumps(finite_json(obj), default=_json_default, allow_nan=False) + "\n"
    with deferred():
        sys.stdout.write(text)
        sys.stdout.flush()


def write_json_file(path: str, obj: Any) -> None:
    """Write ``obj`` to ``path`` as strict JSON (as :func:`emit_json`), atomically: a reader
    sees the old file or the whole new one, never half of it."""
    from ..atomic import write_text_atomic

    write_text_atomic(path, json.dumps(finite_json(obj), default=_json_default, allow_nan=False))


def finite_json(obj: Any) -> Any:
    """``obj`` with every float that is not finite replaced by ``None`` (numpy numbers and
    arrays converted; containers copied, other values kept)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    if type(obj).__module__ == "numpy":
        return finite_json(_json_default(obj))
    return obj


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def console():
    """A rich console on stdout (wide when not a terminal, so tables are not squeezed)."""
    from rich.console import Console

    con = Console(highlight=False)
    if not con.is_terminal:
        con = Console(highlight=False, width=max(con.width, 140))
    return con


def progress(total: int, enabled: bool):
    """A rich progress bar on stderr (a no-op context when disabled or when stderr is not a
    terminal: a successful run leaves a redirected stderr empty)."""
    if not enabled:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if not Console(stderr=True).is_terminal:
        return nullcontext(None)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )


def add_quiet(p: argparse.ArgumentParser) -> None:
    """``-q/--quiet`` (``--no-progress`` is the old spelling): no progress on stderr."""
    p.add_argument(
        "-q",
        "--quiet",
        "--no-progress",
        dest="quiet",
        action="store_true",
        help="no progress display on stderr (progress never reaches stdout)",
    )


MODEL_HELP = (
    "the simulator's link model for every time printed: fair (default: what the executors "
    "and exporters realize and the emulated testbed measured: links shared equally by the "
    "rank pairs using them, each pair in its posting order, the schedule's link order), "
    "plan/auto (the planned order: one transfer at a time per link, the plan's priorities "
    "first; no executor enforces it), fcfs (one transfer at a time per link, first ready "
    "first served); docs/simulator.md"
)


def add_model(p: argparse.ArgumentParser) -> None:
    """``--order``/``--model``: the simulator's link model (default: the realized one)."""
    p.add_argument(
        "--order",
        "--model",
        dest="order",
        choices=("fair", "plan", "auto", "fcfs"),
        default="fair",
        help=MODEL_HELP,
    )


def add_timing(p: argparse.ArgumentParser) -> None:
    """``--no-timing``: leave wall-clock figures out, for byte-identical outputs."""
    p.add_argument(
        "--no-timing",
        dest="timing",
        action="store_false",
        help="leave wall-clock figures (the timing blocks) out of written files and --json "
        "output, so the same inputs give the same bytes",
    )


@contextmanager
def stages(enabled: bool) -> Iterator[Callable[[str], None]]:
    """``stage(text)`` names the running step on a one-line status on stderr (a no-op when
    disabled or when stderr is not a terminal)."""
    if not enabled:
        yield lambda text: None
        return
    from rich.console import Console

    con = Console(stderr=True)
    if not con.is_terminal:
        yield lambda text: None
        return
    with con.status("starting") as status:
        yield lambda text: status.update(text)


def add_pool(p: argparse.ArgumentParser) -> None:
    """``--jobs`` and ``--scheduler``: where independent cases run (collsynth.parallel)."""
    p.add_argument(
        "--jobs",
        "-j",
        metavar="N",
        help="run the cases (one per algorithm) on a local Dask cluster of N worker processes "
        "(auto: one per core); default 1, in this process (or $COLLSYNTH_JOBS)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="run the cases on the existing Dask cluster of this scheduler, e.g. "
        "tcp://host:8786 (its workers need collsynth installed; or $COLLSYNTH_SCHEDULER)",
    )


def pool_of(args: argparse.Namespace) -> Any:
    """The :class:`collsynth.parallel.Pool` of ``--jobs`` and ``--scheduler``."""
    from ..parallel import make_pool

    return make_pool(getattr(args, "jobs", None), getattr(args, "scheduler", None))


def with_progress(
    names: list[str], enabled: bool, work: Callable[[Callable[[str], None] | None], Any]
) -> Any:
    """Run ``work(on_step)`` with a progress bar over ``names``."""
    with progress(len(names), enabled) as prog:
        if prog is None:
            return work(None)
        task = prog.add_task("synthesize, verify, simulate", total=len(names))

        def step(what: str) -> None:
            """``done ...`` advances the bar; anything else names what runs now."""
            prog.update(task, advance=int(what.startswith("done ")), description=what)

        return work(step)


def default_output_dir(kind: str) -> str:
    """Where ``bench`` and ``demo`` write when no ``-o`` is given: a per-user data folder
    (``$XDG_DATA_HOME/collsynth/KIND``, else ``~/.local/share/collsynth/KIND``), never the
    current folder, which may be a source tree."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "collsynth", kind)


def refuse_overwriting_inputs(
    outputs: dict[str, str | None], inputs: dict[str, str | list[str] | None]
) -> None:
    """Refuse, before any work, an output path that names an input file (or another output)
    however spelled, a directory or other non-regular file, or a place in a missing or
    read-only folder: ``{flag: path}`` (:func:`collsynth.atomic.check_outputs`). A topology
    spec counts with the files it reads (``-t nccl-xml:t.xml`` protects ``t.xml``)."""
    from ..topology.sources import input_files

    check_outputs(outputs, input_files(inputs))


def check_plot(
    path: str | None, inputs: dict[str, str | list[str] | None] | None = None, flag: str = "--plot"
) -> None:
    """A picture path that cannot be written (its format included, or naming one of the
    command's ``inputs``) is refused before the computation."""
    if path is not None:
        from ..report.plots import check_plot_path

        check_plot_path(path, flag)
        refuse_overwriting_inputs({flag: path}, inputs or {})
