"""collsynth.deadline: nested limits, solver budgets, cooperative checks and the hard stop."""

from __future__ import annotations

import math
import signal
import time

import pytest

from collsynth import deadline
from collsynth.collective import Collective, CollKind
from collsynth.errors import CollsynthError
from collsynth.synth import synthesize
from collsynth.topology import load_topology


def test_no_limit_means_infinite_and_budgets_unchanged():
    assert math.isinf(deadline.remaining())
    assert deadline.solver_budget(7.0) == 7.0
    deadline.check("nothing")  # never raises


def test_nested_limits_never_extend_the_outer_one():
    with deadline.time_limit(10):
        assert 9 < deadline.remaining() <= 10
        with deadline.time_limit(1000):
            assert deadline.remaining() <= 10 and deadline.limit() == 10
        with deadline.time_limit(1):
            assert deadline.remaining() <= 1
            assert deadline.solver_budget(60) <= deadline.SOLVER_SHARE * 1 + 1e-9
        assert deadline.remaining() > 5
    assert math.isinf(deadline.remaining())


def test_check_raises_once_the_limit_has_passed():
    with deadline.time_limit(0.05):
        time.sleep(0.06)
        with pytest.raises(deadline.TimeLimitError, match="0.05 s limit"):
            deadline.check("the test")


def test_hard_stop_interrupts_work_that_never_checks():
    old = signal.getsignal(signal.SIGALRM)
    t0 = time.monotonic()
    with pytest.raises(deadline.TimeLimitError, match="busy loop"):
        with deadline.time_limit(0.1, what="a busy loop"):
            while True:
                pass
    # the hard stop comes at limit * (1 + GRACE_FACTOR) + GRACE_S
    assert time.monotonic() - t0 < 0.1 * 1.1 + deadline.GRACE_S + 1
    assert signal.getsignal(signal.SIGALRM) is old
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "soon"])
def test_bad_limits_are_refused(bad):
    with pytest.raises(CollsynthError):
        deadline.parse_limit(bad)


def test_each_synthesis_gives_every_call_its_own_limit():
    t = load_topology("ring:n=4")
    c = Collective(CollKind.ALLGATHER, 4)
    with deadline.each_synthesis(1e-9):
        with pytest.raises(deadline.TimeLimitError):
            synthesize("ring", t, c)
    assert synthesize("ring", t, c, budget_s=60).num_ops > 0


def test_nearly_out_only_under_a_limit():
    assert not deadline.nearly_out()
    with deadline.time_limit(0.05):
        assert not deadline.nearly_out()
        time.sleep(0.03)
        assert deadline.nearly_out()


def test_watchdog_ends_a_compiled_loop_the_signal_cannot_interrupt(tmp_path):
    # a numba loop (nogil, as collsynth's simulation and SCALE-CCL loops are) ignores the
    # hard-stop signal until it returns; the command line's watchdog ends the process anyway
    import subprocess
    import sys

    code = """
import numba, sys
from collsynth import deadline

@numba.njit(nogil=True, cache=False)
def spin(n):
    x = 0.0
    for i in range(n):
        x += (i % 7) * 1e-9
    return x

spin(10)
with deadline.time_limit(0.2, what="a compiled loop", exit_status=4):
    spin(10**12)
print("not reached")
"""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t0
    assert p.returncode == 4, p.stderr
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1
    assert "time limit (0.2 s) ended during a compiled loop" in p.stderr
    bound = 0.2 * (1 + deadline.GRACE_FACTOR) + deadline.GRACE_S + deadline.EXIT_GRACE_S
    assert wall < bound + 15  # plus the interpreter's start-up and numba's import
