"""The simulator's speed as a user sees it: ``collsynth bench sim``.

Every case runs the ``simulate`` command itself in a fresh process, as a user would, on a
schedule file that ``synth`` (or, for the largest, the library) wrote first:

* ``1024:MODEL`` for each link model (``plan``, ``fcfs``, ``fair``): ForestColl's AllGather on
  1,024 GPUs (``dgx_a100:nodes=128``) at 1 GB, ``collsynth simulate FILE --size 1GB --order
  MODEL --json``, ``--repeat`` times (at least 5): the median command wall time, the median
  ``timing.sim_wall_s`` (what the command reports as its simulation), the link hops, link hops
  per second of each, and the command's peak memory.
* ``4096:allreduce``: ForestColl's AllReduce on 4,096 GPUs (``dgx_a100:nodes=512``, written
  without link orders so that the bench's own synthesis stays short; the simulator's work does
  not depend on them), simulated once in the realized model.
* ``1024:compact:MODEL`` (planned, realized): the same 1,024-GPU schedule in the compact form
  (``schedule.compact.compact_schedule`` of the ``synth`` file: the same operations, held as
  one per orbit and the group), simulated by the same command. First served needs every hop
  (``simulate`` expands a compact file for it): its row is ``1024:fcfs``.
* ``4096:allreduce:compact``: the 4,096-GPU AllReduce as ``synth --compact`` writes it
  (ForestColl's own compact form, pipelined and with link orders), simulated once in the
  realized model.

The targets: at least 10 M link hops per second of ``sim_wall_s`` in every model at 1,024 GPUs;
the 4,096-GPU AllReduce within 30 s and 4 GiB. The load average when a case starts is recorded
beside it: on a loaded machine every figure moves by 2-4x, so quote a run on a quiet machine
and say what else ran. ``collsynth bench sim -o bench/results`` writes ``sim.json`` and
``sim.md``; ``--only 1024`` (or ``fair``, ``4096``) re-runs the matching cases.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import CollsynthError
from .common import merge_rows, read_json, select, summary, write_files

Progress = Callable[[str], None] | None

GiB = 2**30
#: link models, in table order, with the names the tables give them
MODELS = {"plan": "planned", "fcfs": "first served", "fair": "realized"}
#: the throughput target, link hops per second of ``sim_wall_s``
HOPS_PER_S_TARGET = 10e6
#: the 4,096-GPU AllReduce's targets: seconds and bytes of the whole command
BIG_SECONDS, BIG_BYTES = 30.0, 4 * GiB
#: the input limit the 4,096-GPU row raises ``COLLSYNTH_MAX_FILE_BYTES`` to
BIG_FILE_BYTES = 16 * GiB
#: one child process's limit
CHILD_LIMIT_S = 1800.0
#: runs per model at least (the figures are medians)
MIN_RUNS = 5


@dataclass(frozen=True)
class Schedule:
    """A schedule file the cases simulate: made by ``synth`` (``library=False``) or by the
    library without link orders."""

    name: str
    topology: str
    collective: str
    size: str
    library: bool = False
    compact: str = ""  # "of:NAME": NAME's file in the compact form; "synth": synth --compact


#: the schedules, by name
SCHEDULES = {
    "1024": Schedule("1024", "dgx_a100:nodes=128", "allgather", "1GB"),
    "4096": Schedule("4096", "dgx_a100:nodes=512", "allreduce", "1GB", library=True),
    "1024c": Schedule("1024c", "dgx_a100:nodes=128", "allgather", "1GB", compact="of:1024"),
    "4096c": Schedule("4096c", "dgx_a100:nodes=512", "allreduce", "1GB", compact="synth"),
}
#: the cases: label -> (schedule name, link model, repeats: None for ``--repeat``)
CASES: dict[str, tuple[str, str, int | None]] = {
    **{f"1024:{m}": ("1024", m, None) for m in MODELS},
    "1024:compact:plan": ("1024c", "plan", None),
    "1024:compact:fair": ("1024c", "fair", None),
    "4096:allreduce": ("4096", "fair", 1),
    "4096:allreduce:compact": ("4096c", "fair", 1),
}


def _run(
    argv: list[str], limit: float = CHILD_LIMIT_S, env: dict[str, str] | None = None
) -> tuple[str, float, int]:
    """Run ``argv`` (with ``env`` added to the environment); its stdout, wall time and peak
    resident bytes (one line on failure)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        full = dict(os.environ, **env) if env else None
        p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=full)
        deadline = t0 + limit
        while True:  # wait4: this child's own peak memory, not the largest child's so far
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9
                raise CollsynthError(f"bench sim: {' '.join(argv[2:])} took over {limit:.0f} s")
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, tail = out.read().decode(), err.read().decode().strip()
    if p.returncode != 0:
        last = (tail.splitlines() or ["no message"])[-1]
        raise CollsynthError(f"bench sim: {' '.join(argv[2:])} failed: {last}")
    return text, wall, usage.ru_maxrss * 1024


def _make(sched: Schedule, folder: str, progress: Progress) -> str:
    """The schedule's file in ``folder`` (made once per run)."""
    path = os.path.join(folder, f"s{sched.name}.npz")
    if os.path.exists(path):
        return path
    if progress:
        progress(f"writing the {sched.name}-GPU schedule ({sched.topology} {sched.collective})")
    if sched.compact.startswith("of:"):
        source = _make(SCHEDULES[sched.compact[3:]], folder, progress)
        code = (
            "from collsynth.schedule.compact import compact_or_reason\n"
            "from collsynth.schedule.io import load_schedule, save_schedule\n"
            f"c = compact_or_reason(load_schedule({source!r}))\n"
            "assert not isinstance(c, str), c\n"
            f"save_schedule(c, {path!r}, timing=False)\n"
        )
        _run([sys.executable, "-c", code])
    elif sched.compact == "synth":
        _run([sys.executable, "-m", "collsynth", "synth", "-t", sched.topology, "-c",
              sched.collective, "--algo", "forestcoll", "-s", sched.size, "--compact", "-o",
              path, "-q", "--no-timing"])  # fmt: skip
    elif sched.library:
        code = (
            "from collsynth.collective import Collective\n"
            "from collsynth.schedule.io import save_schedule\n"
            "from collsynth.synth import synthesize\n"
            "from collsynth.topology import load_topology\n"
            "from collsynth.units import parse_size\n"
            f"t = load_topology({sched.topology!r})\n"
            f"c = Collective.make({sched.collective!r}, t.num_ranks, 1)\n"
            f"s = synthesize('forestcoll', t, c, size=parse_size({sched.size!r}), "
            "link_order=False)\n"
            f"save_schedule(s, {path!r}, timing=False)\n"
        )
        _run([sys.executable, "-c", code])
    else:
        _run([sys.executable, "-m", "collsynth", "synth", "-t", sched.topology, "-c",
              sched.collective, "--algo", "forestcoll", "-s", sched.size, "-o", path, "-q",
              "--no-timing"])  # fmt: skip
    return path


def run_case(label: str, folder: str, repeat: int, progress: Progress = None) -> dict:
    """One case (see the module): its figures, medians over the repeats."""
    name, model, fixed = CASES[label]
    sched = SCHEDULES[name]
    path = _make(sched, folder, progress)
    load = os.getloadavg()[0]
    # a file that expands beyond the default input limit (the 4,096-GPU schedule: about
    # 2.5 GB) is read with the limit raised, as its user would have to; the row says so
    env = {"COLLSYNTH_MAX_FILE_BYTES": str(BIG_FILE_BYTES)} if name == "4096" else None
    walls: list[float] = []
    sims: list[float] = []
    peak, hops, quotient = 0, 0, 1
    for i in range(fixed or repeat):
        if progress:
            progress(f"{label}: simulate --order {model} ({i + 1} of {fixed or repeat})")
        text, wall, mem = _run([sys.executable, "-m", "collsynth", "simulate", path, "--size",
                                sched.size, "--order", model, "--json"], env=env)  # fmt: skip
        doc = json.loads(text)
        walls.append(wall)
        sims.append(float(doc["timing"]["sim_wall_s"]))
        hops = int(doc["hops"])
        quotient = int(doc.get("quotient", 1))
        peak = max(peak, mem)
    wall, sim = statistics.median(walls), statistics.median(sims)
    row: dict[str, Any] = {
        "case": label,
        "topology": sched.topology,
        "collective": sched.collective,
        "size": sched.size,
        "model": model,
        "runs": len(walls),
        "hops": hops,
        "quotient": quotient,
        "command_wall_s": wall,
        "command_walls_s": walls,
        "sim_wall_s": sim,
        "sim_walls_s": sims,
        "sim_hops_per_s": hops / sim if sim > 0 else None,
        "command_hops_per_s": hops / wall if wall > 0 else None,
        "peak_bytes": peak,
        "load_average": load,
    }
    if env:
        row["env"] = env
    if name.startswith("4096"):
        row["target"] = f"<= {BIG_SECONDS:.0f} s and <= {BIG_BYTES / GiB:.0f} GiB (command)"
        row["holds"] = wall <= BIG_SECONDS and peak <= BIG_BYTES
    else:
        row["target"] = f">= {HOPS_PER_S_TARGET / 1e6:.0f} M hops/s (sim_wall_s)"
        row["holds"] = (row["sim_hops_per_s"] or 0) >= HOPS_PER_S_TARGET
    return row


def run_suite(out_dir: str, repeat: int = MIN_RUNS, progress: Progress = None,
              only: str | None = None) -> dict:  # fmt: skip
    """Run the cases (see the module) and write ``OUT/sim.json`` and ``OUT/sim.md`` (rows of
    cases not run are kept from the existing file under ``--only``)."""
    t0 = time.perf_counter()
    labels = list(CASES)
    todo = select("sim", labels, lambda c: c, only)
    repeat = max(MIN_RUNS, repeat)
    rows = []
    with tempfile.TemporaryDirectory(prefix="collsynth-bench-sim-") as folder:
        for label in todo:
            try:
                rows.append(run_case(label, folder, repeat, progress))
            except CollsynthError as e:  # the failure is a figure too
                rows.append({"case": label, "error": str(e), "holds": False})
    old = read_json(os.path.join(out_dir, "sim.json")) if only is not None else {}
    if old.get("rows") and "case" in old["rows"][0]:
        rows = merge_rows(old["rows"], rows, set(todo), lambda r: r["case"], labels)
    data = {
        "suite": "sim",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "repeat": repeat,
        "rows": rows,
    }
    write_files(out_dir, {"sim.json": json.dumps(data, indent=1), "sim.md": to_markdown(data)})
    return {"summary": summary(len(labels), len(todo), len(rows), time.perf_counter() - t0, only)}


def to_markdown(data: dict) -> str:
    """The results page, ``sim.md``."""
    out = [
        "# bench suite `sim`",
        "",
        f"The `simulate` command in a fresh process on this machine ({data['machine']['cpus']} "
        f"cores, Python {data['machine']['python']}); medians over {data['repeat']} runs per "
        "model (the 4,096-GPU row: one run). `sim s` is the command's own `timing.sim_wall_s`, "
        "`command s` its whole wall time (start-up, loading the file, simulating, printing). "
        "Link models: planned (the plan's priorities and link orders), first served (one "
        "transfer at a time per link), realized (links shared by connections, the default; "
        "`docs/simulator.md`). `load` is the 1-minute load average when the case started: "
        "figures taken under load are 2-4x slower. `quotient`: the order of the symmetry "
        "group the simulator ran the schedule on its quotient by (1: every hop simulated; "
        '`docs/simulator.md`, "Symmetric schedules").',
        "",
        "| case | model | link hops | quotient | sim s | M hops/s | command s "
        "| M hops/s (command) | peak GiB | load | target | holds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        if "error" in r:
            out.append(f"| {r['case']} | - | - | - | - | - | - | - | - | - | - "
                       f"| no: {r['error']} |")  # fmt: skip
            continue
        out.append(
            f"| {r['case']} | {MODELS.get(r['model'], r['model'])} | {r['hops']:,} "
            f"| {r.get('quotient', 1)} | {r['sim_wall_s']:.3f} "
            f"| {(r['sim_hops_per_s'] or 0) / 1e6:.2f} "
            f"| {r['command_wall_s']:.2f} | {(r['command_hops_per_s'] or 0) / 1e6:.2f} "
            f"| {r['peak_bytes'] / GiB:.2f} | {r['load_average']:.1f} | {r['target']} "
            f"| {'yes' if r['holds'] else 'no'} |"
        )
    envs = [r for r in data["rows"] if r.get("env")]
    for r in envs:
        setting = " ".join(f"{k}={v}" for k, v in sorted(r["env"].items()))
        out.append(f"\n`{r['case']}` ran with `{setting}`: its file expands beyond the default "
                   "input limit (docs/cli.md), which a user must raise the same way.")  # fmt: skip
    return "\n".join(out) + "\n"


__all__ = ["CASES", "MODELS", "SCHEDULES", "Schedule", "run_case", "run_suite", "to_markdown"]
