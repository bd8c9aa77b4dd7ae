"""TE-CCL's file formats: read an input file (``teccl solve --input_args``), write TE-CCL-style
output.

Input: ``TopologyParams`` builds the topology
(:func:`collsynth.topology.teccl_params.topology_from_teccl`); ``InstanceParams`` gives the
collective (1 = AllGather, 2 = AlltoAll), chunks, epoch type/duration/multiplier,
``num_epochs``, alpha threshold and ratio, ``switch_copy`` and the objective; ``GurobiParams``
map to HiGHS where they mean something (the result's options are those of the ``teccl``
synthesizer):

=================== =========================== ==============================================
TE-CCL / Gurobi     teccl option / HiGHS option note
=================== =========================== ==============================================
time_limit (hours)  ``time_limit`` (x 3600 s)   ``TimeLimit`` (s) is accepted too
mip_gap, MIPGap     ``gap`` (mip_rel_gap)       0.3 is TE-CCL's "early stop"
feasibility_tol     primal_feasibility_tolerance
intfeas_tol         mip_feasibility_tolerance
optimality_tol      dual_feasibility_tolerance
heuristics          mip_heuristic_effort
presolve            presolve ("off" for 0)      -1 keeps HiGHS' default
mip_focus, method,  (none)                      no HiGHS equivalent; recorded in the notes
crossover, ...
=================== =========================== ==============================================

``objective_type`` 1 (BINARY_USED_EPOCHS) maps to ``makespan``, 3 (PAPER) to ``paper``; 2
(TOTAL_DEMAND) and 4 (ASTAR) are not implemented and map to ``makespan`` with a note.
``solution_method`` (one-shot / iterative) is noted: collsynth always starts from the heuristic
horizon and minimises the completion epoch within it.

Output (of a schedule made by ``--algo teccl``): TE-CCL's keys ``1-Epoch_Duration`` ...
``8-Chunk paths`` and ``Solver_Time``, sorted, indent 2. Nodes are topology node indices
(switches included), as in TE-CCL. ``4-Collective_Finish_Time`` is the MILP/LP estimate
``K* x tau``; collsynth adds ``collsynth`` with the plan, status and gap.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..atomic import write_text_atomic
from ..collective import Collective, CollKind
from ..errors import CollsynthError
from ..schedule.ir import Schedule
from ..topology.model import Topology
from ..topology.teccl_params import teccl_instance, topology_from_teccl

__all__ = [
    "TecclInput",
    "read_teccl_input",
    "teccl_output",
    "teccl_output_text",
    "write_teccl_output",
]


@dataclass
class TecclInput:
    """What a TE-CCL input file asks for: the problem and the ``teccl`` options."""

    topology: Topology
    collective: Collective
    size: float
    options: dict
    notes: list[str] = field(default_factory=list)


def _num(sec: dict, key: str, source: str, default: Any = None) -> Any:
    """A finite number ``sec[key]`` (``default`` when absent; None stays None)."""
    v = sec.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise CollsynthError(f"{source}: {key} must be a number, got {v!r}")
    return v


def read_teccl_input(path: str) -> TecclInput:
    """Topology, collective, size and teccl options of a TE-CCL input file."""
    from ..files import read_structured

    data = read_structured(path)  # within the input limits, one-line errors
    if not isinstance(data, dict) or "TopologyParams" not in data:
        raise CollsynthError(f"{path}: not a TE-CCL input file (no TopologyParams)")
    for sec in ("InstanceParams", "GurobiParams"):
        if sec in data and not isinstance(data[sec], dict):
            raise CollsynthError(f"{path}: {sec} must be an object")
    topo = topology_from_teccl(data, source=path)
    inst = teccl_instance(data, topo, source=path)
    coll = Collective.make(inst["collective"], topo.num_ranks, inst["chunks_per_rank"])
    ip = data.get("InstanceParams", {}) or {}
    gp = data.get("GurobiParams", {}) or {}
    notes: list[str] = list(topo.meta.get("notes", []))
    opts = _epoch_options(ip, path)
    opts.update(_objective_options(ip, path, notes))
    opts.update(_gurobi_options(gp, path, notes))
    return TecclInput(topo, coll, float(inst["size_bytes"]), opts, notes)


def _epoch_options(ip: dict, path: str) -> dict[str, Any]:
    """The epoch, multiplier, horizon, alpha and switch-copy options of InstanceParams."""
    opts: dict[str, Any] = {}
    etype = _num(ip, "epoch_type", path, 1)
    dur = _num(ip, "epoch_duration", path, -1)
    if dur is not None and dur != -1:
        if dur <= 0:
            raise CollsynthError(f"{path}: epoch_duration must be positive or -1")
        opts["epoch"] = float(dur)
    elif etype == 1:
        opts["epoch"] = "fast"
    elif etype == 2:
        opts["epoch"] = "slow"
    elif etype == 3:
        raise CollsynthError(f"{path}: epoch_type 3 (user input) needs an epoch_duration")
    else:
        raise CollsynthError(f"{path}: epoch_type must be 1, 2 or 3, got {etype!r}")
    mult = _num(ip, "epoch_multiplier", path, 1)
    if mult <= 0:
        raise CollsynthError(f"{path}: epoch_multiplier must be positive")
    opts["epoch_multiplier"] = float(mult)
    k = _num(ip, "num_epochs", path, -1)
    if k != -1:
        if k < 1 or k != int(k):
            raise CollsynthError(f"{path}: num_epochs must be a positive integer or -1")
        opts["epochs"] = int(k)
    for key, opt in (
        ("alpha_threshold", "alpha_threshold"),
        ("alpha_epoch_duration_ratio_max", "alpha_ratio_max"),
    ):
        v = _num(ip, key, path)
        if v is not None:
            if v < 0:
                raise CollsynthError(f"{path}: {key} must be non-negative")
            opts[opt] = float(v)
    if "switch_copy" in ip:
        if not isinstance(ip["switch_copy"], bool):
            raise CollsynthError(f"{path}: switch_copy must be true or false")
        opts["switch_copy"] = ip["switch_copy"]
    return opts


def _objective_options(ip: dict, path: str, notes: list[str]) -> dict[str, Any]:
    """The objective of InstanceParams (and a note for what is not implemented)."""
    opts: dict[str, Any] = {}
    obj = _num(ip, "objective_type", path, 3)
    if obj == 1:
        opts["objective"] = "makespan"
    elif obj == 3:
        opts["objective"] = "paper"
    elif obj in (2, 4):
        opts["objective"] = "makespan"
        notes.append(
            f"objective_type {int(obj)} ({'TOTAL_DEMAND' if obj == 2 else 'ASTAR'}) "
            f"is not implemented; using makespan"
        )
    else:
        raise CollsynthError(f"{path}: objective_type must be 1, 2, 3 or 4, got {obj!r}")
    method = _num(ip, "solution_method", path, 1)
    if method not in (1, 2):
        raise CollsynthError(f"{path}: solution_method must be 1 or 2, got {method!r}")
    if method == 2:
        notes.append(
            "solution_method 2 (ITERATIVE): collsynth minimises the completion epoch "
            "within the heuristic horizon instead"
        )
    return opts


def _gurobi_options(gp: dict, path: str, notes: list[str]) -> dict[str, Any]:
    """GurobiParams mapped to teccl options and HiGHS options."""
    opts: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    tl = _num(gp, "time_limit", path)
    if tl is not None:
        opts["time_limit"] = float(tl) * 3600.0
    tl_s = _num(gp, "TimeLimit", path)
    if tl_s is not None:
        opts["time_limit"] = float(tl_s)
    for key in ("mip_gap", "MIPGap"):
        g = _num(gp, key, path)
        if g is not None:
            if g < 0:
                raise CollsynthError(f"{path}: {key} must be non-negative")
            opts["gap"] = float(g)
    for key, hkey in (
        ("feasibility_tol", "primal_feasibility_tolerance"),
        ("intfeas_tol", "mip_feasibility_tolerance"),
        ("optimality_tol", "dual_feasibility_tolerance"),
        ("heuristics", "mip_heuristic_effort"),
    ):
        v = _num(gp, key, path)
        if v is not None:
            if v <= 0:
                raise CollsynthError(f"{path}: {key} must be positive")
            highs[hkey] = float(v)
    pre = _num(gp, "presolve", path)
    if pre is not None and pre == 0:
        highs["presolve"] = "off"
    ignored = sorted(
        k
        for k in gp
        if k
        in (
            "mip_focus",
            "method",
            "crossover",
            "solution_limit",
            "output_flag",
            "log_file",
            "log_to_console",
        )
    )
    if ignored:
        notes.append(f"Gurobi parameters without a HiGHS meaning ignored: {', '.join(ignored)}")
    if highs:
        opts["highs"] = highs
    return opts


def _hop_epochs(schedule: Schedule, delays: np.ndarray, op: int) -> list[int]:
    """The epoch an operation enters each link of its route, then its arrival epoch."""
    assert schedule.step is not None
    k = int(schedule.step[op])
    out = []
    for l in schedule.route(op).tolist():
        out.append(k)
        k += int(delays[l])
    out.append(k)  # arrival
    return out


def _chunk_label(coll: Collective, node: np.ndarray, c: int) -> tuple[int, int]:
    """TE-CCL's name of chunk ``c``: (source node, TE-CCL chunk number)."""
    n = coll.num_ranks
    C = coll.chunks_per_rank
    s = int(coll.chunk_source[c])
    if coll.kind is CollKind.ALLTOALL:
        d = (c // C) % n
        return int(node[s]), d + (c % C) * n
    if coll.kind in (CollKind.ALLGATHER, CollKind.GATHER):
        return int(node[s]), c % C
    return int(node[s]), c


def _flows(schedule: Schedule, delays: np.ndarray, lp: bool) -> tuple[list[str], list[list[str]]]:
    """``7-Flows``: one line per operation, ordered by its first epoch then operation id; and
    per operation, the text of each of its hops (link and epoch), for ``8-Chunk paths``."""
    t = schedule.topology
    coll = schedule.collective
    node = t.compute_nodes
    frac = schedule.op_fraction()
    flows = []
    hop_text: list[list[str]] = []
    for op in range(schedule.num_ops):
        ks = _hop_epochs(schedule, delays, op)
        route = schedule.route(op).tolist()
        s_node, cnum = _chunk_label(coll, node, int(schedule.chunk[op]))
        u, v = int(node[schedule.src[op]]), int(node[schedule.dst[op]])
        via = [int(t.link_dst[l]) for l in route[:-1]]
        vol = f" with volume {frac[op]:.6g}" if lp else ""
        text = f"Chunk {cnum} from {s_node} traveled over {u}->{v}{vol} in epoch {ks[0]}" + (
            f" via switches {' -> '.join(str(x) for x in via)}" if via else ""
        )
        flows.append((ks[0], op, text))
        hop_text.append(
            [
                f"{int(t.link_src[l])}->{int(t.link_dst[l])}{vol} in epoch {k}"
                for l, k in zip(route, ks)
            ]
        )
    flows.sort()
    return [x[2] for x in flows], hop_text


def _chunk_paths(
    schedule: Schedule, delays: np.ndarray, lp: bool, tau: float, hop_text: list[list[str]]
) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, float]]]]:
    """``8-Chunk paths`` and ``6-Demand_Met``: for each operation delivering a chunk to one of
    its destinations, the hops of the chain of operations that brought it there (following
    each operation's first dependency back), and (not for LP) the time the demand is met."""
    coll = schedule.collective
    node = schedule.topology.compute_nodes
    dep_of = [schedule.deps(op).tolist() for op in range(schedule.num_ops)]
    paths: dict[str, Any] = {}
    demand: dict[str, dict[str, dict[str, float]]] = {}
    for op in range(schedule.num_ops):
        c = int(schedule.chunk[op])
        d_rank = int(schedule.dst[op])
        if d_rank not in coll.destinations(c):
            continue
        s_node, cnum = _chunk_label(coll, node, c)
        chain = []
        x = op
        while True:
            chain.append(x)
            deps = dep_of[x]
            if not deps:
                break
            x = deps[0]
        chain.reverse()
        ks = _hop_epochs(schedule, delays, op)
        arrive = ks[-1]
        d_node = int(node[d_rank])
        hops = [h for y in chain for h in hop_text[y]]
        if lp:
            key = f"Demand at {d_node} for chunk {cnum} from {s_node}"
            paths.setdefault(key, []).append([[int(h.rsplit(" ", 1)[1]), h] for h in hops])
        else:
            key = f"Demand at {d_node} for chunk {cnum} from {s_node} met by epoch {arrive - 1}"
            paths[key] = hops
            demand.setdefault(f"GPU {d_node}", {}).setdefault(f"GPU {s_node}", {})[
                f"Chunk {cnum}"
            ] = tau * arrive
    return paths, demand


def teccl_output(schedule: Schedule) -> dict:
    """TE-CCL-style output keys for a ``teccl`` schedule."""
    from ..synth.teccl.epochs import make_grid  # the epoch grid the schedule was solved on

    m = schedule.meta.get("teccl")
    size = schedule.size
    if not isinstance(m, dict) or schedule.step is None or size is None:
        raise CollsynthError("--teccl-output needs a schedule made by --algo teccl")
    t = schedule.topology
    coll = schedule.collective
    tau = float(m["tau_s"])
    grid = make_grid(t, coll.chunk_bytes(size), tau, 1.0, float(m.get("alpha_threshold", 0.1)), 0.0)
    lp = m.get("mode") == "lp"
    delays = grid.lp_delay if lp else grid.delay
    finish = float(m["estimate_s"])
    flows, hop_text = _flows(schedule, delays, lp)
    out: dict[str, Any] = {
        "1-Epoch_Duration": tau,
        "2-Expected_Epoch_Duration": float(m["expected_tau_s"]),
        "3-Epochs_Required": int(m["epochs_required"]),
        "4-Collective_Finish_Time": finish,
        "5-Algo_Bandwidth": (size / finish / 1e9) if finish > 0 else 0.0,
        "7-Flows": flows,
        "Solver_Time": schedule.meta.get("timing", {}).get("teccl.solver_wall_s"),
        "collsynth": {
            "status": m["status"],
            "gap": m["gap"],
            "plan_s": m["plan_s"],
            "epochs_required": m["epochs_required"],
            "mode": m.get("mode"),
        },
    }
    paths, demand = _chunk_paths(schedule, delays, lp, tau, hop_text)
    if not lp:
        out["6-Demand_Met"] = demand
    out["8-Chunk paths"] = paths
    return out


def write_teccl_output(schedule: Schedule, path: str) -> None:
    """Write :func:`teccl_output` of ``schedule`` to ``path`` as JSON (sorted keys, indent 2),
    atomically."""
    write_text_atomic(path, teccl_output_text(schedule))


def teccl_output_text(schedule: Schedule) -> str:
    """The file text of :func:`teccl_output` (sorted keys, indent 2)."""
    return json.dumps(teccl_output(schedule), indent=2, sort_keys=True) + "\n"
