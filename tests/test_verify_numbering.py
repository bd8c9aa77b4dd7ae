"""The verifier's verdict does not depend on how the operations are numbered."""

from __future__ import annotations

import re

import pytest

from collsynth.collective import Collective
from collsynth.schedule.io import schedule_from_dict, schedule_to_dict
from collsynth.schedule.ir import Schedule, ScheduleBuilder
from collsynth.schedule.trees import TreeForm, lower
from collsynth.synth import synthesize
from collsynth.verify import check_schedule
from conftest import (
    REDUCE_ENGINES,
    RL,
    allreduce_rs_ag,
    builder,
    full_featured_schedule,
    in_forest,
    out_forest,
    racy_read,
    ring4,
    switch4,
    zoo,
)


def renumber(s: Schedule, perm: list[int]) -> Schedule:
    """The same schedule with operation ``i`` renamed ``perm[i]`` (deps and link orders too)."""
    d = schedule_to_dict(s)
    d.pop("trees", None)
    ops = d["ops"]
    n = ops["count"]
    inv = [0] * n
    for old, new in enumerate(perm):
        inv[new] = old
    for key, col in list(ops.items()):
        if isinstance(col, list):
            ops[key] = [col[inv[i]] for i in range(n)]
    if "deps" in ops:
        ops["deps"] = [[perm[x] for x in deps] for deps in ops["deps"]]
    if "link_order" in d:
        d["link_order"] = {k: [perm[x] for x in v] for k, v in d["link_order"].items()}
    return schedule_from_dict(d)


def _racy_copy():
    t = switch4()
    b = builder(t, "allreduce")
    w = b.add(0, 1, 0, kind="copy")
    b.add(2, 1, 0, kind="reduce", deps=[w])
    b.add(3, 1, 0, kind="reduce")
    return b.build()


def _relay_without_dep():
    t = ring4()
    b = ScheduleBuilder(t, Collective.custom(4, [(0, [2]), (1, [3])]))
    b.add(1, 2, 1, route=[RL(t, 1, 2)])
    b.add(0, 1, 0, route=[RL(t, 0, 1)])
    b.add(2, 3, 1, route=[RL(t, 2, 3)], deps=[0])
    b.add(1, 2, 0, route=[RL(t, 1, 2)], deps=[0])  # should depend on op 1
    return b.build()


NUMBERING_CASES = {
    "spt-dgx1-allreduce": (
        lambda: synthesize("spt", zoo("dgx1"), Collective.make("allreduce", 8)),
        None,
    ),
    "rs+ag": (lambda: allreduce_rs_ag(ring4()), None),
    "timed": (full_featured_schedule, None),
    "trees": (
        lambda: lower(
            zoo("ring:n=5"),
            Collective.make("allreduce", 5),
            TreeForm(out_forest(5, range(5)) + in_forest(5, range(5))),
        ),
        None,
    ),
    "racy-read": (racy_read, "race"),
    "racy-copy": (_racy_copy, "race"),
    "relay": (_relay_without_dep, "data-not-held"),
}

#: the cases whose collective reduces (the others execute no reduction)
NUMBERING_REDUCING = ("racy-copy", "racy-read", "rs+ag", "spt-dgx1-allreduce", "timed", "trees")


@pytest.mark.parametrize(
    "case, reduce_engine",
    [
        (c, e)
        for c in sorted(NUMBERING_CASES)
        for e in (REDUCE_ENGINES if c in NUMBERING_REDUCING else ("auto",))
    ],
)
def test_verdict_does_not_depend_on_op_numbering(case, reduce_engine):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    make, expected = NUMBERING_CASES[case]
    s = make()
    assert s.collective.reduces == (case in NUMBERING_REDUCING)
    rep = check_schedule(s, reduce_engine=reduce_engine)
    assert rep.error_check == expected, rep.error

    @settings(max_examples=30, deadline=None, derandomize=True)
    @given(perm=st.permutations(range(s.num_ops)))
    def prop(perm):
        again = check_schedule(renumber(s, list(perm)), reduce_engine=reduce_engine)
        assert again.error_check == expected, again.error
        if expected is None:
            assert again.planned_finish_s == rep.planned_finish_s
        else:
            assert re.search(rf"\bop {again.error_op}\b", again.error)

    prop()
