"""Every registered synthesizer, end to end: synthesize -> verify -> export MSCCL XML -> the
independent XML checker -> run under mpiexec with --check (the whole path a user deploys).

Driven by the registry, so an algorithm added later is covered without editing this file.
"""

from __future__ import annotations

import math

import pytest

from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.export import check_msccl_xml, to_msccl_xml
from collsynth.runtime import launch
from collsynth.runtime.plan import size_quantum
from collsynth.schedule.io import save_schedule
from collsynth.synth import load_all, synthesize
from collsynth.topology import load_topology

#: Collectives MSCCL XML can express, tried for every algorithm that supports them.
KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
#: Small topologies, tried in order: the first one an algorithm accepts is used (hierarchical
#: algorithms need grouped ranks, which the 4-rank ring lacks).
TOPOLOGIES = ("ring:n=4", "wan:dcs=2,gpus=2", "dgx_h100")  # (the last for nvls)
#: Options that keep the schedules small enough for a quick MPI run.
OPTIONS = {"forestcoll": {"pipeline": 1}, "teccl": {"time_limit": 5}, "nvls": {"pipeline": 1}}


def _cases():
    cases = []
    for name, algo in sorted(load_all().items()):
        for kind in KINDS:
            if any(k.value == kind for k in algo.collectives):
                cases.append((name, kind))
    return cases


def _synthesize(name: str, kind: str):
    errors = []
    for spec in TOPOLOGIES:
        topo = load_topology(spec)
        try:
            return synthesize(
                name,
                topo,
                Collective.make(kind, topo.num_ranks, 1),
                size=64e3,
                **OPTIONS.get(name, {}),
            )
        except CollsynthError as e:
            errors.append(f"{spec}: {e}")
    pytest.fail(f"{name} {kind}: no small topology accepted it ({'; '.join(errors)})")


def test_every_synthesizer_exports_checks_and_runs_under_mpi(tmp_path):
    cases = _cases()
    names = {n for n, _ in cases}
    assert {"ring", "forestcoll", "teccl", "mteg", "spt"} <= names
    by_ranks: dict[int, list[tuple[str, object]]] = {}
    for name, kind in cases:
        sched = _synthesize(name, kind)
        # (MSCCL XML has no switch multicast: a schedule with it is exported copy by copy)
        xml = to_msccl_xml(sched.expand_groups())  # verifies the schedule first
        root = sched.collective.root if sched.collective.rooted else 0
        rep = check_msccl_xml(xml, sched.topology, root=root or 0)
        assert rep.ok
        path = tmp_path / f"{name}_{kind}.json"
        save_schedule(sched, str(path))
        by_ranks.setdefault(sched.topology.num_ranks, []).append((str(path), sched))
    for nranks, items in sorted(by_ranks.items()):
        q = 1
        for _, s in items:
            q = math.lcm(q, size_quantum(s, 4 if s.collective.reduces else 1))
        size = q * max(1, math.ceil(8192 / q))
        rep = launch([p for p, _ in items], size, nranks, check=True, iters=1, warmup=0, timeout=30)
        assert rep.ok, rep.error
        assert len(rep.runs) == len(items)
        for run in rep.runs:
            assert run["check"] == "passed", run
