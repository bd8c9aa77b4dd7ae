"""Running a compact schedule: every rank plans its own part from the compact form
(runtime/compact_plan.py) and gets the plan the expanded schedule gives it."""

import json
import subprocess
import sys

import numpy as np
import pytest

from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.runtime.compact_plan import compact_rank_plan
from collsynth.runtime.launcher import mpi_available
from collsynth.runtime.plan import build_rank_plan
from collsynth.synth import synthesize
from collsynth.topology import load_topology
from test_compact import CASES, _made

FIELDS = ("ops", "is_send", "peer", "offset", "nbytes", "reduce", "tag", "recv_pre")


def _same_plans(c, ranks, tag_limit: int) -> None:
    x = c.expand().expand_joins()
    for rank in ranks:
        want = build_rank_plan(x, rank, 64, 4, tag_limit)
        got, ops = compact_rank_plan(c, rank, 64, 4, tag_limit)
        for f in FIELDS:
            assert np.array_equal(getattr(want, f), getattr(got, f)), (rank, f)
        assert want.done_pre == got.done_pre and want.slots == got.slots
        assert [sorted(p) for p in want.post_pre] == [sorted(p) for p in got.post_pre]
        if got.num_local:  # the executor's messages name the operation as the expansion does
            op = int(got.ops[-1])
            assert ops.describe_op(op) == x.describe_op(op)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_rank_plans_from_the_compact_form_are_the_expanded_ones(case):
    _, c = _made(*case)
    n = c.collective.num_ranks
    _same_plans(c, range(n), 1000)
    _same_plans(c, [0, n - 1], 3)  # tags that collide: posted in order


@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_forestcoll_compact_plans_with_link_orders(kind):
    t = load_topology("dgx_a100:nodes=4")
    c = synthesize("forestcoll", t, Collective.make(kind, t.num_ranks), size=1e6, compact=True)
    assert c.order_links is not None
    _same_plans(c, range(0, t.num_ranks, 9), 1000)


def test_a_rank_outside_is_refused():
    _, c = _made("ring:n=8", "allgather", "ring")
    with pytest.raises(CollsynthError, match="not a rank"):
        compact_rank_plan(c, 8, 64, 4, 100)


@pytest.mark.skipif(not mpi_available(), reason="mpiexec not installed")
def test_run_a_compact_file(tmp_path):
    path = str(tmp_path / "ar.npz")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "collsynth", *args], capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip

    p = cli("synth", "-t", "ring:n=4", "-c", "allreduce", "-a", "ring", "--compact", "-o", path)
    assert p.returncode == 0, p.stderr
    p = cli("run", path, "--size", "4KiB", "--check", "--iters", "2", "--launch", "4", "--json")
    assert p.returncode == 0, p.stderr
    run = json.loads(p.stdout)["runs"][0]
    assert run["check"] == "passed" and run["ops"] == 48 and run["compact"] == 4
