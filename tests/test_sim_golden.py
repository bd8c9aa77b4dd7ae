"""The simulator against reference results written by the event loop of commit e0943c5
(``tests/data/sim_golden``, written by ``make.py`` there): the same times to 1e-12 relative, in
every link model, with a per-operation cost and with release at planned starts, on schedules
with link orders, in-network groups, planned start times and WAN links. Any change to the loop
or to what prepares its arrays (link orders as hops, connections) must keep them."""

import json
import os

import numpy as np
import pytest

from collsynth.schedule.io import load_schedule
from collsynth.sim import simulate
from collsynth.topology import load_topology

HERE = os.path.join(os.path.dirname(__file__), "data", "sim_golden")
GOLDEN = np.load(os.path.join(HERE, "golden.npz"))
RUNS = json.loads(str(GOLDEN["runs"]))
RTOL = 1e-12


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=RTOL, atol=0.0))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("case", sorted({r["case"] for r in RUNS}))
def test_same_results_as_the_reference_loop(case, compiled):
    runs = [r for r in RUNS if r["case"] == case]
    s = load_schedule(os.path.join(HERE, f"{case}.npz"), load_topology(runs[0]["topology"]))
    if not compiled and s.num_ops > 1_000:
        runs = runs[:2]  # the plain loop is slow: one model, both sizes
    for r in runs:
        # the event loop itself, every hop (symmetric=False): the quotient is checked
        # against it in test_quotient.py
        got = simulate(s, r["size"], order=r["order"], op_cost_s=r["op_cost_s"],
                       release=r["release"], compiled=compiled, symmetric=False)  # fmt: skip
        what = f"{case} {r['order']} op_cost={r['op_cost_s']} release={r['release']} {r['size']}"
        assert got.time_s == pytest.approx(r["time_s"], rel=RTOL, abs=0.0), what
        assert _close(got.op_finish_s, GOLDEN[f"{r['key']}.op"]), what
        if f"{r['key']}.hop_start" in GOLDEN:
            assert _close(got.hop_start_s, GOLDEN[f"{r['key']}.hop_start"]), what
            assert _close(got.hop_end_s, GOLDEN[f"{r['key']}.hop_end"]), what
