"""The compact schedule form (collsynth.schedule.compact): found from symmetric schedules,
expanded back, written and read, verified without expansion in agreement with the explicit
verifier (correct schedules and planted defects), simulated on its quotient to the explicit
simulation's figures, refused in one line when a file is bad."""

from __future__ import annotations

import zipfile
from dataclasses import replace

import numpy as np
import pytest

from collsynth.bench.compact import plants
from collsynth.cli.app import main
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.schedule.compact import (
    BadGroup,
    CompactSchedule,
    compact_or_reason,
    compact_schedule,
    group_action,
)
from collsynth.schedule.io import load_any, load_schedule, save_schedule
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.topology.spec import load_topology
from collsynth.verify import check_schedule
from collsynth.verify.compact import check_compact

#: (fabric, collective, algorithm): symmetric schedules of several algorithms and groups
CASES = [
    ("ring:n=8", "allgather", "ring"),
    ("ring:n=8", "allreduce", "ring"),
    ("full:n=8", "reducescatter", "spt"),
    ("hypercube", "allreduce", "rd"),
    ("fat_tree:k=4", "allreduce", "forestcoll"),
    ("dgx2:chassis=2", "reducescatter", "forestcoll"),
    ("mi250:chassis=2", "allgather", "spt"),
    ("ndv2", "allgather", "direct"),
    ("dgx_a100:nodes=4", "allgather", "forestcoll"),
    ("dgx_a100:nodes=4", "allreduce", "forestcoll"),
    ("dgx_h100", "alltoall", "bruck"),  # (a chunk from a rank to itself: carried by none)
]
_MADE: dict = {}


def _made(fabric: str, kind: str, algo: str, size: float = 1e6):
    key = (fabric, kind, algo, size)
    if key not in _MADE:
        t = load_topology(fabric)
        s = synthesize(algo, t, Collective.make(kind, t.num_ranks), size=size)
        _MADE[key] = (s, compact_or_reason(s))
    return _MADE[key]


def _rows(s) -> list[tuple]:
    """A schedule's operations as comparable rows (independent of numbering)."""
    return sorted(
        (
            int(s.src[i]),
            int(s.dst[i]),
            int(s.chunk[i]),
            int(s.kind[i]),
            tuple(s.route(i).tolist()),
        )  # fmt: skip
        for i in range(s.num_ops)
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_compact_expands_to_the_schedule_and_verifies_alike(case):
    s, c = _made(*case)
    assert isinstance(c, CompactSchedule), c
    assert c.num_reps * c.action.order == s.num_ops
    x = c.expand()
    assert _rows(x) == _rows(s)
    mine, theirs = check_compact(c), check_schedule(s)
    assert mine.ok and theirs.ok, mine.error
    assert mine.redundant_deliveries == theirs.redundant_deliveries
    assert check_schedule(x).ok
    for order in ("plan", "fair"):
        fast = simulate(c, 1e6, order=order)
        full = simulate(s, 1e6, order=order, symmetric=False)
        assert fast.quotient == c.action.order
        assert abs(fast.time_s - full.time_s) <= 1e-9 * full.time_s, (case, order)
        assert np.max(np.abs(fast.link_busy_s - full.link_busy_s)) <= 1e-9 * full.time_s
        assert np.max(np.abs(fast.per_rank_time_s - full.per_rank_time_s)) <= 1e-9 * full.time_s
        assert fast.hops == len(s.route_links)
        plain = simulate(c, 1e6, order=order, compiled=False)
        compiled = simulate(c, 1e6, order=order, compiled=True)
        assert np.array_equal(compiled.op_finish_s, plain.op_finish_s)


@pytest.mark.parametrize("case", CASES[4:], ids=lambda c: "-".join(c))
def test_planted_defects_are_caught_by_both_verifiers_alike(case):
    _, c = _made(*case)
    rng = np.random.default_rng(7)
    caught = set()
    for _ in range(2):
        for name, bad in plants(c, rng):
            mine, theirs = check_compact(bad), check_schedule(bad.expand())
            # (a dependency planted on another member of its orbit, or dropped, may have been
            # redundant: the schedule is then still correct, and both must accept it)
            assert mine.ok == theirs.ok, (case, name, mine.error, theirs.error)
            assert mine.error_check == theirs.error_check, (case, name, mine.error, theirs.error)
            if not theirs.ok:
                caught.add(name)
    assert {"image breaks a link", "chunk moved"} <= caught  # these always break it


def test_deadlocking_link_orders_are_caught_on_the_quotient():
    _, c = _made("ring:n=8", "allgather", "ring")
    # every link serves its transfers in the reverse order: each waits for one that
    # (transitively) waits for it
    ptr = c.order_ptr
    flip = np.concatenate([np.arange(ptr[i + 1] - 1, ptr[i] - 1, -1)
                           for i in range(len(c.order_links))])  # fmt: skip
    bad = replace(c, order_orbit=c.order_orbit[flip], order_elem=c.order_elem[flip])
    mine, theirs = check_compact(bad), check_schedule(bad.expand())
    assert not theirs.ok and not mine.ok
    assert mine.error_check == theirs.error_check == "link-order", (mine.error, theirs.error)
    assert check_compact(c).ok


def test_bad_groups_are_refused():
    _, c = _made("dgx_a100:nodes=4", "allgather", "forestcoll")
    a = c.action
    t, coll = c.topology, c.collective
    swapped = a.generators.copy()
    switches = np.flatnonzero(t.kind_codes != t.kind_codes[t.compute_nodes[0]])
    swapped[0, [switches[0], switches[-1]]] = swapped[0, [switches[-1], switches[0]]]
    with pytest.raises(BadGroup, match="not an automorphism of the topology"):
        group_action(t, coll, swapped, a.chunk_generators)
    chunks = a.chunk_generators.copy()
    chunks[0, [0, -1]] = chunks[0, [-1, 0]]  # chunks of different sources
    with pytest.raises(BadGroup, match="source"):
        group_action(t, coll, a.generators, chunks)
    assert coll.chunks_per_rank > 1
    chunks = a.chunk_generators.copy()
    chunks[0, [0, 1]] = chunks[0, [1, 0]]  # two chunks of one source: not one action
    with pytest.raises(BadGroup, match="chunks"):
        group_action(t, coll, a.generators, chunks)
    ranks = np.arange(t.num_nodes)  # the identity: not a permutation that moves a rank
    with pytest.raises(BadGroup):
        group_action(t, coll, ranks[None, :] * 0, a.chunk_generators[:1])
    # a forged table (the group's tables must be the generators')
    forged = replace(c, action=replace(a, mul=np.roll(a.mul, 1, axis=1)))
    got = check_compact(forged)
    assert not got.ok and got.error_check == "group"


def test_no_compact_form_says_why():
    s, c = _made("dgx_a100:nodes=4", "allgather", "ring")
    assert c == "the link orders are not symmetric"
    assert compact_schedule(s) is None


def test_file_round_trip(tmp_path):
    s, c = _made("dgx_a100:nodes=4", "allreduce", "forestcoll")
    path = str(tmp_path / "c.npz")
    save_schedule(c, path)
    got = load_any(path)
    assert isinstance(got, CompactSchedule)
    again = str(tmp_path / "again.npz")
    save_schedule(got, again)
    assert open(path, "rb").read() == open(again, "rb").read()  # same bytes
    assert _rows(load_schedule(path)) == _rows(s)  # commands that want every operation
    assert check_compact(got).ok
    with pytest.raises(CollsynthError, match=r"\.npz only"):
        save_schedule(c, str(tmp_path / "c.json"))


def _rewrite(src: str, dst: str, **change) -> None:
    """Copy a compact file with some entries replaced (arrays as .npy, header as a dict)."""
    import io
    import json

    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for name in z.namelist():
            data = z.read(name)
            key = name.removesuffix(".npy").removesuffix(".json")
            if key in change:
                value = change[key]
                if name == "header.json":
                    head = json.loads(data)
                    head.update(value)
                    data = json.dumps(head).encode()
                else:
                    buf = io.BytesIO()
                    np.lib.format.write_array(buf, np.asarray(value), allow_pickle=False)
                    data = buf.getvalue()
            out.writestr(name, data)


def test_bad_compact_files_get_one_line(tmp_path, capsys):
    _, c = _made("dgx_a100:nodes=4", "allgather", "forestcoll")
    good = str(tmp_path / "good.npz")
    save_schedule(c, good)
    a = c.action
    not_auto = a.generators.copy()
    not_auto[0, [0, 1]] = not_auto[0, [1, 0]]
    bad_orbit = c.dep_orbit.copy()
    bad_orbit[0] = c.num_reps
    cases = {
        "not an automorphism": {"group_generators": not_auto.ravel()},
        "source": {"group_chunk_generators": np.roll(a.chunk_generators, 1, axis=1).ravel()},
        "generators x nodes": {"group_generators": a.generators.ravel()[:-1]},
        "names no representative": {"dep_orbit": bad_orbit},
        "the header says": {"header": {"group_order": a.order * 2}},
        "outside": {"route_links": np.full(len(c.reps.route_links), 10**6)},
    }
    for expect, change in cases.items():
        path = str(tmp_path / "bad.npz")
        _rewrite(good, path, **change)
        for argv in (["verify", path], ["simulate", path, "-s", "1MB"],
                     ["export", "msccl", path, "-o", str(tmp_path / "x.xml")]):  # fmt: skip
            rc = main(argv)
            err = capsys.readouterr().err
            assert rc == 2 and len(err.splitlines()) == 1 and expect in err, (expect, err)
            assert "Traceback" not in err
        assert not (tmp_path / "x.xml").exists()


def test_cli_synth_verify_simulate_compact(tmp_path, capsys):
    out = str(tmp_path / "ag.npz")
    rc = main(["synth", "-t", "dgx_a100:nodes=4", "-c", "allgather", "-a", "forestcoll",
               "-s", "1MB", "--compact", "-o", out, "--json", "--no-timing"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    import json

    info = json.loads(capsys.readouterr().out)
    assert info["representatives"] * info["group_order"] == info["ops"]
    assert main(["verify", out, "--json", "--no-timing"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["ok"] and got["compact"]["group_order"] == 16 and "group" in got["checks"]
    assert main(["simulate", out, "--json", "--no-timing"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert fast["quotient"] == 16 and fast["ops"] == info["ops"]
    assert main(["simulate", out, "--json", "--no-timing", "--explicit"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["quotient"] == 1
    assert abs(fast["time_s"] - full["time_s"]) <= 1e-9 * full["time_s"]
    # not symmetric, or not .npz: one line, nothing written
    rc = main(["synth", "-t", "dgx_a100:nodes=4", "-c", "allgather", "-a", "ring",
               "--compact", "-o", str(tmp_path / "r.npz")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "no compact form" in err and not (tmp_path / "r.npz").exists()
    rc = main(["synth", "-t", "dgx_a100:nodes=4", "-c", "allgather", "-a", "forestcoll",
               "--compact", "-o", str(tmp_path / "r.json")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and ".npz only" in err and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
def test_forestcoll_makes_the_compact_form_directly(kind):
    t = load_topology("dgx_a100:nodes=4")
    coll = Collective.make(kind, t.num_ranks)
    c = synthesize("forestcoll", t, coll, size=1e8, compact=True)
    assert isinstance(c, CompactSchedule)
    made = c.meta["forestcoll"]["compact"]
    assert made == {"group_order": 16, "roots_lowered": 2}  # two ranks per node orbit
    assert c.order_links is not None and c.meta["link_order"]["from"]
    assert check_compact(c).ok
    x = c.expand()
    assert check_schedule(x).ok
    # the compact form's link orders are the expansion's: both simulate alike, in both models
    for order in ("plan", "fair"):
        fast = simulate(c, 1e8, order=order)
        full = simulate(x, 1e8, order=order, symmetric=False)
        assert abs(fast.time_s - full.time_s) <= 1e-9 * full.time_s
    # the operation budget counts representatives: at least as deep a pipeline as explicitly
    s = synthesize("forestcoll", t, coll, size=1e8)
    assert c.meta["forestcoll"]["pipeline"] >= s.meta["forestcoll"]["pipeline"]
    # only the representatives' trees were made; the facts count every root's
    for d in ("out_trees", "in_trees"):
        if d in s.meta["forestcoll"]:
            mine, theirs = c.meta["forestcoll"][d], s.meta["forestcoll"][d]
            assert mine["trees"] == theirs["trees"] and mine["congestion_ok"]
            assert mine["heights_max"] == theirs["heights_max"]


def test_representative_trees_count_their_images():
    """The congestion check of one root's trees per orbit, every image counted, is the
    check of all the trees."""
    from collsynth.flow.optimality import optimal_allgather
    from collsynth.synth.forestcoll import automorphisms, symmetric_trees, tree_congestion

    t = load_topology("dgx_a100:nodes=4")
    opt = optimal_allgather(t)
    group = automorphisms(t)
    full, _ = symmetric_trees(t, opt, group)
    reps, info = symmetric_trees(t, opt, group, images=False)
    assert info["images"] is False and len(full) == len(reps) * len(group[0])
    a, b = tree_congestion(t, opt, full), tree_congestion(t, opt, reps, group[1])
    assert a["ok"] and b["ok"] and a["load"] == b["load"] and a["inv_x"] == b["inv_x"]
    assert max(a["load"]) > 0


def test_json_form_is_refused_above_its_size(tmp_path, monkeypatch):
    from collsynth.schedule import io

    s, _ = _made("dgx_a100:nodes=4", "allgather", "forestcoll")
    monkeypatch.setattr(io, "JSON_MAX_VALUES", 4 * s.num_ops)  # fewer than this schedule has
    path = tmp_path / "s.json"
    with pytest.raises(CollsynthError, match=r"NAME\.npz"):
        save_schedule(s, str(path))
    assert not path.exists()
    save_schedule(s, str(tmp_path / "s.npz"))  # the binary form has no such limit


def test_paced_senders_keep_their_steps_in_both_verifiers():
    from collsynth.synth.order import paced

    s, _ = _made("dgx_a100:nodes=4", "allgather", "forestcoll")
    assert s.link_order and s.step is not None
    one_sender = sorted(l for l, ops in s.link_order.items()
                        if len(ops) > 2 and (s.src[ops] == s.src[ops[0]]).all())  # fmt: skip
    p = paced(s, one_sender, 1)  # each transfer waits for the one before it on the link
    assert p is not None and p.meta["link_order"]["pacing"]
    c = compact_or_reason(p)
    assert isinstance(c, CompactSchedule), c
    mine, theirs = check_compact(c), check_schedule(p)
    assert theirs.ok and mine.ok, mine.error
    # the same dependencies without the pacing mark break step-order in both
    meta = {k: v for k, v in c.meta.items() if k != "link_order"}
    bare = check_compact(replace(c, meta=meta))
    assert not bare.ok and bare.error_check == "step-order"
    assert check_schedule(replace(p, meta=meta)).error_check == "step-order"
