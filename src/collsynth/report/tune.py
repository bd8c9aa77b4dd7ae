"""Per-size selection (``collsynth tune``): the fastest verified schedule for every size window,
exported to MSCCL XML with its ``minBytes``/``maxBytes`` window (or, with ``dialect="mscclpp"``,
to MSCCL++ execution plans with ``min_message_size``/``max_message_size``, both inclusive:
a closed window ends at ``max - 1``).

Every applicable algorithm (or a given list) is synthesized, verified and simulated at every
size (:func:`collsynth.report.compare.compare`). For each size the fastest schedule wins; its
window reaches halfway (geometrically) to the neighbouring sizes, the first window starts at 0
and the last one is open. Neighbouring sizes won by the same schedule object (an algorithm that
does not adapt to the size) share one file. A winner the exporter cannot express (for instance
a schedule with more steps than a thread block may hold) gives way to the next fastest
schedule for that size; the summary says so. Every file is checked by the independent XML
checker before it is written.

Window semantics differ by MSCCL runtime dialect (Microsoft's ``msccl`` NCCL fork and the MSCCL
executor, ``msccl-executor-nccl``): the old fork selects
``min <= n < max`` (so the open end is written as 2^40), the executor ``min <= n <= max`` with
``maxBytes=0`` meaning no limit (so a closed window is written with ``max - 1``).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..atomic import check_output_dir, write_text_atomic
from ..collective import Collective
from ..errors import CollsynthError
from ..export import check_msccl_xml, to_msccl_xml
from ..export.msccl import step_floor
from ..export.mscclpp import to_mscclpp_plan
from ..export.mscclpp_check import check_mscclpp_plan
from ..parallel import Pool
from ..schedule.io import save_schedule
from ..schedule.ir import Schedule
from ..sim import REALIZED, simulate
from ..synth import load_all, options_for, synthesize
from ..topology.model import Topology
from ..units import fmt_size, fmt_time
from .compare import Comparison, Row, compare

#: The names tune writes into its folder: ``tune.json`` and ``KIND_ALGO_MINBYTES`` with
#: ``.xml``, ``.plan.json`` (MSCCL++) and ``.json`` (the schedule).
_WRITES = re.compile(r"tune\.json|[a-z]+_.+_[0-9]+\.(xml|json|plan\.json)")


def writes_name(name: str) -> bool:
    """Whether ``name`` is a file name tune may write into its folder."""
    return _WRITES.fullmatch(name) is not None


def check_out_dir(
    out_dir: str, what: str = "the output folder", inputs: dict | None = None,
    parents: bool = False,
) -> None:  # fmt: skip
    """Refuse, before any work, a folder tune cannot write its files into, or where they
    would replace one of ``inputs`` (``{flag: path}``) or a file that is not a regular one
    (:func:`collsynth.atomic.check_output_dir`). ``parents``: missing parent folders are
    made by :func:`tune` (the demo's default per-user folder), so they are not refused."""
    from ..topology.sources import input_files

    check_output_dir(out_dir, what, input_files(inputs or {}), owned=writes_name, parents=parents)


#: The open upper end of the last window in the old fork's dialect.
OPEN_MAX = 1 << 40
#: tune's "dialect" for MSCCL++ execution plans (``--format mscclpp``)
MSCCLPP = "mscclpp"


@dataclass
class Window:
    algo: str
    sizes: list[float]
    min_bytes: int
    max_bytes: int | None  # None: open-ended
    time_s: list[float]
    ratio_to_bound: list[float]
    xml: str
    schedule: str
    note: str = ""


@dataclass
class TuneResult:
    topology: str
    collective: str
    dialect: str
    windows: list[Window] = field(default_factory=list)
    comparison: Comparison | None = None
    model: str = REALIZED  # the simulator's link model the winners were ranked in

    def to_dict(self, timing: bool = True) -> dict:
        return {
            "topology": self.topology,
            "collective": self.collective,
            "dialect": self.dialect,
            "model": self.model,
            "windows": [asdict(w) for w in self.windows],
            "comparison": self.comparison.to_dict(timing=timing) if self.comparison else None,
        }


def _with_window(xml: str, min_bytes: int, max_bytes: int) -> str:
    """``xml`` (exported with placeholder ``minBytes``/``maxBytes``) with the window set: the
    same text the exporter writes for that window, without lowering the schedule again."""
    m = re.match(r"\s*(<!--.*?-->\s*)*<algo\b[^>]*>", xml, re.S)
    if m is None:
        raise CollsynthError("exported XML does not start with an <algo> element")
    head = re.sub(r'\bminBytes="\d+"', f'minBytes="{int(min_bytes)}"', m.group(0), count=1)
    head = re.sub(r'\bmaxBytes="\d+"', f'maxBytes="{int(max_bytes)}"', head, count=1)
    return head + xml[m.end() :]


def _plan_window(plan: str, min_bytes: int, max_bytes: int | None) -> str:
    """An MSCCL++ plan with its message-size window (``max_bytes`` inclusive; None: open)."""
    doc = json.loads(plan)
    doc["min_message_size"] = int(min_bytes)
    doc["max_message_size"] = 2**64 - 1 if max_bytes is None else int(max_bytes)
    return json.dumps(doc, indent=1) + "\n"


def _export_text(sched: Schedule, dialect: str, proto: str, instances: int) -> str:
    """The schedule in tune's format (placeholder window)."""
    if dialect == MSCCLPP:
        return to_mscclpp_plan(sched)
    return to_msccl_xml(
        sched, dialect=dialect, proto=proto, instances=instances, min_bytes=0, max_bytes=0
    )


def _edges(sizes: list[float]) -> list[int]:
    """Window boundaries between consecutive sizes (geometric midpoints, whole bytes)."""
    return [int(math.ceil(math.sqrt(a * b))) for a, b in zip(sizes, sizes[1:])]


def _shallower(
    row: Row,
    sched: Schedule,
    topology: Topology,
    collective: Collective,
    size: float,
    options,
    dialect: str,
    proto: str,
    instances: int,
    order: str = REALIZED,
):
    """For a pipelined schedule the exporter cannot express (too many steps), the same
    algorithm with shallower pipelines (halving) until one exports: (row, schedule, xml,
    depth), the row with the variant's own simulated time (in the model ``order``)."""
    algo = load_all()[row.algo]
    if "pipeline" not in algo.options or "pipeline" in options_for(row.algo, options or {}):
        return None
    depth = int((sched.meta.get(row.algo) or {}).get("pipeline") or 0)
    opts: dict[str, Any] = dict(options_for(row.algo, options or {}))
    if dialect != MSCCLPP:
        floor, limit, _, _ = step_floor(sched, dialect, instances)
        if floor > limit:  # steps grow with the depth: jump close to a depth that fits
            depth = max(2, 2 * (1 << int(math.log2(max(1.0, depth * limit / floor)))))
    while depth > 1:
        depth //= 2
        try:
            alt = synthesize(row.algo, topology, collective, size=size, pipeline=depth, **opts)
            xml = _export_text(alt, dialect, proto, instances)
        except CollsynthError:
            continue
        sim = simulate(alt, size, order=order)
        return (
            replace(
                row,
                time_s=sim.time_s,
                algbw_Bps=sim.algbw,
                busbw_Bps=sim.busbw,
                ratio_to_bound=sim.time_s / row.bound_time_s
                if row.bound_time_s > 0
                else float("inf"),
                ops=alt.num_ops,
            ),
            alt,
            xml,
            depth,
        )
    return None


def _make_dir(out_dir: str) -> None:
    """Create ``out_dir`` itself (never its parents); an existing directory is reused."""
    if os.path.isdir(out_dir):
        return
    try:
        os.mkdir(out_dir)
    except FileNotFoundError:
        raise CollsynthError(
            f"cannot create {out_dir}: its parent directory does not exist"
        ) from None
    except OSError as e:
        raise CollsynthError(f"cannot create {out_dir}: {e.strerror or e}") from None


def tune(
    topology: Topology,
    collective: Collective,
    sizes: Sequence[float],
    algos: Sequence[str],
    out_dir: str,
    *,
    dialect: str = "msccl",
    proto: str = "Simple",
    instances: int = 1,
    options: dict[str, dict[str, str]] | None = None,
    on_step: Callable[[str], None] | None = None,
    timing: bool = True,
    pool: Pool | None = None,
    order: str = REALIZED,
) -> TuneResult:
    """Compare ``algos`` at ``sizes``, pick per size the fastest schedule the format can
    express, and write one checked XML file (and its schedule) per window of sizes that share
    a schedule, plus ``tune.json``, into ``out_dir``. ``on_step`` hears what is being done;
    ``timing=False`` leaves wall-clock figures out of the files; ``pool``: where the
    algorithms run (:mod:`collsynth.parallel`); ``order``: the simulator's link model the
    schedules are ranked in (default: the realized one, :data:`collsynth.sim.REALIZED`)."""
    sizes = sorted({float(s) for s in sizes})
    if not sizes:
        raise CollsynthError("tune needs at least one size")
    check_out_dir(out_dir)
    keep: dict[tuple[str, float], Schedule] = {}
    comp = compare(topology, collective, sizes, algos, on_step=on_step, options=options,
                   keep=keep, pool=pool, order=order)  # fmt: skip
    if not comp.rows:
        why = "; ".join(f"{s['algo']}: {s['reason']}" for s in comp.skipped[:3])
        raise CollsynthError(f"no algorithm produced a schedule ({why})")
    _make_dir(out_dir)
    export = _Exporter(topology, collective, options, dialect, proto, instances, order)
    picks = []
    for size in sizes:
        if on_step:
            on_step(f"exporting the fastest at {fmt_size(size)}")
        picks.append(export.pick(comp, keep, size))
    result = TuneResult(topology.name, collective.describe(), dialect, comparison=comp, model=order)
    _write_windows(result, topology, collective, picks, keep, sizes, out_dir, timing)
    summary = os.path.join(out_dir, "tune.json")
    write_text_atomic(summary, json.dumps(result.to_dict(timing), indent=1))
    return result


@dataclass
class _Exporter:
    """Per size, the fastest candidate that exports (each schedule exported once)."""

    topology: Topology
    collective: Collective
    options: dict[str, dict[str, str]] | None
    dialect: str
    proto: str
    instances: int
    order: str = REALIZED
    exported: dict[int, str] = field(default_factory=dict)  # id(schedule) -> xml text

    def xml(self, sched: Schedule) -> str:
        if id(sched) not in self.exported:
            self.exported[id(sched)] = _export_text(sched, self.dialect, self.proto, self.instances)
        return self.exported[id(sched)]

    def pick(
        self, comp: Comparison, keep: dict[tuple[str, float], Schedule], size: float
    ) -> tuple[Row, str, str]:
        """(row, xml text, note) of the fastest exportable schedule at ``size``; a pipelined
        schedule the exporter cannot express is re-made shallower and ranked again."""
        cands = sorted(
            (r for r in comp.rows if r.size_bytes == size), key=lambda r: (r.time_s, r.algo)
        )
        note = ""
        while cands:
            r = cands.pop(0)
            sched = keep[(r.algo, size)]
            try:
                return r, self.xml(sched), note.rstrip("; ")
            except CollsynthError as e:
                note += f"{r.algo}: {e}; "
            alt = _shallower(
                r,
                sched,
                self.topology,
                self.collective,
                size,
                self.options,
                self.dialect,
                self.proto,
                self.instances,
                self.order,
            )
            if alt is not None:  # try it where its (slower) simulated time ranks it
                row, alt_sched, xml, depth = alt
                note += f"{r.algo} re-made with pipeline={depth} ({fmt_time(row.time_s)}); "
                keep[(r.algo, size)] = alt_sched
                self.exported[id(alt_sched)] = xml
                cands.append(row)
                cands.sort(key=lambda x: (x.time_s, x.algo))
        what = "an MSCCL++ plan" if self.dialect == MSCCLPP else "MSCCL XML"
        raise CollsynthError(
            f"no schedule for {fmt_size(size)} can be exported to {what} ({note.rstrip('; ')})"
        )


def _write_windows(
    result: TuneResult,
    topology: Topology,
    collective: Collective,
    picks: list[tuple[Row, str, str]],
    keep: dict[tuple[str, float], Schedule],
    sizes: list[float],
    out_dir: str,
    timing: bool,
) -> None:
    """One checked XML file and schedule per run of sizes sharing a schedule."""
    edges = _edges(sizes)
    lows = [0] + edges
    highs: list[int | None] = edges + [None]
    i = 0
    while i < len(sizes):
        row, _, note = picks[i]
        sched = keep[(row.algo, sizes[i])]
        j = i
        while j + 1 < len(sizes) and keep[(picks[j + 1][0].algo, sizes[j + 1])] is sched:
            j += 1
        lo, hi = lows[i], highs[j]
        root = collective.root if collective.rooted else 0
        tag = f"{collective.kind.value}_{row.algo}_{lo}"
        if result.dialect == MSCCLPP:
            xml = _plan_window(picks[i][1], lo, None if hi is None else hi - 1)
            check_mscclpp_plan(xml, root=root or 0)
            xml_path = os.path.join(out_dir, f"{tag}.plan.json")
        else:
            if result.dialect == "executor":
                min_b, max_b = lo, (0 if hi is None else hi - 1)
            else:
                min_b, max_b = lo, (OPEN_MAX if hi is None else hi)
            xml = _with_window(picks[i][1], min_b, max_b)
            check_msccl_xml(xml, topology, dialect=result.dialect, root=root or 0)
            xml_path = os.path.join(out_dir, f"{tag}.xml")
        sched_path = os.path.join(out_dir, f"{tag}.json")
        write_text_atomic(xml_path, xml)
        save_schedule(sched, sched_path, timing=timing)
        rows = [picks[q][0] for q in range(i, j + 1)]
        result.windows.append(
            Window(
                algo=row.algo,
                sizes=sizes[i : j + 1],
                min_bytes=lo,
                max_bytes=hi,
                time_s=[r.time_s for r in rows],
                ratio_to_bound=[r.ratio_to_bound for r in rows],
                xml=xml_path,
                schedule=sched_path,
                note="; ".join(picks[q][2] for q in range(i, j + 1) if picks[q][2]),
            )
        )
        i = j + 1
