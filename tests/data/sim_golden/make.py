"""Write the simulator's reference results (``golden.npz``) and the schedules they are of
(``*.npz``): ``python tests/data/sim_golden/make.py``.

``golden.npz`` holds, per run, the completion time of every operation (``K.op``) and, for the
smaller schedules, the start and end of every hop (``K.hop_start``, ``K.hop_end``), and the
runs' list (``runs``, JSON). The files in this folder were written by the plain-Python event
loop of commit e0943c5; ``tests/test_sim_golden.py`` checks that the current simulator gives
the same times to 1e-12 relative, so that a faster loop can be checked against it. Run this
again only to add a case, with the simulator the reference should come from (not with one
under test: the test would then check it against itself).
"""

from __future__ import annotations

import json
import os

import numpy as np

from collsynth.collective import Collective
from collsynth.schedule.io import load_schedule, save_schedule
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.topology import load_topology

HERE = os.path.dirname(os.path.abspath(__file__))
#: (name, algorithm, topology, collective, chunks)
CASES = [
    ("forestcoll_ag_dgx1", "forestcoll", "dgx1", "allgather", 1),
    ("forestcoll_rs_dgx1", "forestcoll", "dgx1", "reducescatter", 1),
    ("forestcoll_ag_a100x4", "forestcoll", "dgx_a100:nodes=4", "allgather", 1),
    ("spt_ar_a100x2", "spt", "dgx_a100:nodes=2", "allreduce", 2),
    ("ring_ag_h800x2", "ring", "h800_rails:servers=2", "allgather", 2),
    ("spt_a2a_star6", "spt", "star:n=6", "alltoall", 3),
    ("spt_ar_wan", "spt", "wan:dcs=3,gpus=3,km=10", "allreduce", 1),
    ("nvls_ar_h100", "nvls", "dgx_h100", "allreduce", 2),
    ("mteg_ag_ring8", "mteg", "ring:n=8", "allgather", 1),
]
#: (model, per-operation cost in seconds, release at planned starts)
RUNS = [("plan", 0.0, False), ("fcfs", 0.0, False), ("fair", 0.0, False),
        ("fair", 3e-6, False), ("plan", 3e-6, False), ("plan", 0.0, True)]  # fmt: skip
SIZES = (1e6, 64e6)
#: schedules with more hops than this keep only their operations' completion times
HOPS_KEPT = 1_000


def main() -> None:
    runs, arrays = [], {}
    for name, algo, spec, kind, chunks in CASES:
        topo = load_topology(spec)
        path = os.path.join(HERE, f"{name}.npz")
        if not os.path.exists(path):
            s = synthesize(algo, topo, Collective.make(kind, topo.num_ranks, chunks))
            save_schedule(s, path, timing=False)
        s = load_schedule(path, topo)
        for order, op_cost, release in RUNS:
            for size in SIZES:
                r = simulate(s, size, order=order, op_cost_s=op_cost, release=release,
                             compiled=False)  # fmt: skip
                key = str(len(runs))
                runs.append({"key": key, "case": name, "topology": spec, "order": order,
                             "op_cost_s": op_cost, "release": release, "size": size,
                             "time_s": r.time_s})  # fmt: skip
                arrays[f"{key}.op"] = r.op_finish_s
                if len(r.hop_start_s) <= HOPS_KEPT:
                    arrays[f"{key}.hop_start"] = r.hop_start_s
                    arrays[f"{key}.hop_end"] = r.hop_end_s
    arrays["runs"] = np.array(json.dumps(runs))
    np.savez_compressed(os.path.join(HERE, "golden.npz"), **arrays)


if __name__ == "__main__":
    main()
