"""MSCCL++ execution-plan export and its independent checker, with planted defects."""

from __future__ import annotations

import copy
import json

import pytest

from collsynth.cli import main
from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.export.mscclpp import MAX_OPS_PER_TB, to_mscclpp_plan
from collsynth.export.mscclpp_check import PlanCheckError, check_mscclpp_plan
from collsynth.report.compare import applicable
from collsynth.synth import synthesize
from collsynth.topology import load_topology

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall")


def _sched(spec="ring:n=4", kind="allgather", algo="ring", chunks=1, **kw):
    t = load_topology(spec)
    return synthesize(algo, t, Collective.make(kind, t.num_ranks, chunks, **kw))


def _plan(**kw) -> dict:
    export = {k: kw.pop(k) for k in ("inplace", "channel", "max_tbs") if k in kw}
    return json.loads(to_mscclpp_plan(_sched(**kw), **export))


def _check(doc: dict, **kw):
    return check_mscclpp_plan(json.dumps(doc), **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_every_algorithm_exports_and_checks(kind):
    # every applicable algorithm on a ring of 4, AllGather, ReduceScatter, AllReduce, AllToAll
    t = load_topology("ring:n=4")
    coll = Collective.make(kind, 4, 1)
    done = []
    for algo in applicable(coll):
        try:
            s = synthesize(algo, t, coll)
        except CollsynthError:
            continue  # not applicable here (the algorithm says why)
        text = to_mscclpp_plan(s)
        rep = check_mscclpp_plan(text)
        assert rep.ok and rep.collective == kind and rep.ngpus == 4
        assert rep.transfers == s.num_ops  # one put per operation of the schedule
        done.append(algo)
    assert len(done) >= 4, done


@pytest.mark.parametrize(
    "spec,kind,chunks",
    [
        ("dgx1", "allgather", 2),
        ("dgx1", "reducescatter", 1),
        ("dgx1", "allreduce", 1),
        ("dgx1", "alltoall", 1),
        ("ndv2:chassis=2", "allgather", 1),
        ("dgx_a100:nodes=2", "allreduce", 1),
    ],
)
@pytest.mark.parametrize("inplace", [False, True])
def test_larger_topologies_in_and_out_of_place(spec, kind, chunks, inplace):
    if kind == "alltoall" and inplace:
        with pytest.raises(CollsynthError, match="in-place alltoall"):
            to_mscclpp_plan(_sched(spec, kind, "spt"), inplace=True)
        return
    algo = "ring" if kind != "alltoall" else "spt"
    doc = json.loads(to_mscclpp_plan(_sched(spec, kind, algo, chunks), inplace=inplace))
    rep = _check(doc)
    assert rep.inplace is inplace and rep.chunks_per_rank >= chunks
    for g in doc["gpus"]:
        assert all(len(tb["ops"]) <= MAX_OPS_PER_TB for tb in g["threadblocks"])


def test_plan_layout_matches_the_executor_format():
    doc = _plan(spec="ring:n=4", kind="allgather")
    assert list(doc)[:6] == ["name", "collective", "protocol", "inplace", "reuse_resources",
                             "gpus"]  # fmt: skip
    assert doc["protocol"] == "Simple" and doc["max_message_size"] == 2**64 - 1
    for i, g in enumerate(doc["gpus"]):
        assert g["id"] == i and g["input_chunks"] * 4 == g["output_chunks"]
        assert [tb["id"] for tb in g["threadblocks"]] == list(range(len(g["threadblocks"])))
        assert g["channels"] and all(c["channel_type"] == "memory" for c in g["channels"])
        for tb in g["threadblocks"]:
            names = [op["name"] for op in tb["ops"]]
            assert set(names) <= {"copy", "put", "nop", "signal", "wait", "re"}


def test_network_routes_use_port_channels():
    doc = _plan(spec="ndv2:chassis=2", kind="allgather")
    types = {c["channel_type"] for g in doc["gpus"] for c in g["channels"]}
    assert types == {"memory", "port"}
    ops = {op["name"] for g in doc["gpus"] for tb in g["threadblocks"] for op in tb["ops"]}
    assert "pwsf" in ops
    every = _plan(spec="ring:n=4", kind="allreduce", channel="port")
    assert {c["channel_type"] for g in every["gpus"] for c in g["channels"]} == {"port"}
    _check(every)


def test_deterministic_bytes():
    s = _sched("dgx1", "allreduce", "ring")
    assert to_mscclpp_plan(s) == to_mscclpp_plan(s)


def test_refusals_are_one_line():
    with pytest.raises(CollsynthError, match="does not support reduce"):
        to_mscclpp_plan(_sched("ring:n=4", "reduce", "spt", root=0))
    with pytest.raises(CollsynthError, match="thread blocks"):
        to_mscclpp_plan(_sched("dgx1", "allreduce", "ring", 4), max_tbs=2)
    with pytest.raises(CollsynthError, match="channel type"):
        to_mscclpp_plan(_sched(), channel="nvls")


# ------------------------------------------------------------------ planted defects
def _find(doc, name, nth=0):
    """(gpu, block, index) of the ``nth`` operation called ``name``."""
    k = 0
    for g in doc["gpus"]:
        for tb in g["threadblocks"]:
            for i, op in enumerate(tb["ops"]):
                if op["name"] == name:
                    if k == nth:
                        return g, tb, i
                    k += 1
    raise AssertionError(f"no {name} #{nth}")


def _planted(mutate, **kw):
    doc = _plan(**kw)
    _check(doc)  # sound before the defect
    bad = copy.deepcopy(doc)
    mutate(bad)
    with pytest.raises(PlanCheckError) as e:
        _check(bad)
    return e.value


def test_missing_nop_after_wait_is_a_race():
    def drop(doc):
        g, tb, i = _find(doc, "wait", 2)
        assert tb["ops"][i + 1]["name"] == "nop"
        del tb["ops"][i + 1]

    assert _planted(drop, kind="allreduce").check == "race"


def test_missing_wait_is_caught():
    def drop(doc):
        g, tb, i = _find(doc, "wait", 1)
        del tb["ops"][i]

    assert _planted(drop, kind="allgather").check in ("race", "pairing")


def test_missing_signal_deadlocks():
    def drop(doc):
        g, tb, i = _find(doc, "signal", 0)
        del tb["ops"][i]

    err = _planted(drop, kind="allgather")
    assert err.check == "deadlock" and "can never finish" in str(err)


def test_waits_in_a_cycle_deadlock():
    # rank 0 waits for rank 1 before it signals, and rank 1 likewise: neither moves
    def cycle(doc):
        for g in doc["gpus"][:2]:
            tb = g["threadblocks"][0]
            w = next(i for i, op in enumerate(tb["ops"]) if op["name"] == "wait")
            tb["ops"].insert(0, tb["ops"].pop(w))

    assert _planted(cycle, spec="line:n=2", kind="allgather", algo="direct").check == "deadlock"


def test_wrong_destination_chunk_breaks_the_postcondition():
    def shift(doc):
        g, tb, i = _find(doc, "put", 0)
        ref = tb["ops"][i]["dst_buff"][0]
        ref["index"] = (ref["index"] + 1) % 2

    assert _planted(shift, kind="allgather", algo="direct").check in (
        "postcondition", "race", "values"
    )  # fmt: skip


def test_double_reduction_counts_a_rank_twice():
    def twice(doc):
        g, tb, i = _find(doc, "re", 0)
        tb["ops"].insert(i + 1, {"name": "nop"})
        tb["ops"].insert(i + 2, copy.deepcopy(tb["ops"][i]))

    err = _planted(twice, kind="allreduce")
    assert err.check == "values" and "twice" in str(err)


def test_unpaired_channel():
    def extra(doc):
        doc["gpus"][0]["channels"][0]["connected_to"].append(1)

    err = _planted(extra, kind="allgather")
    assert err.check == "channels" and "no partner" in str(err)


def test_bad_references():
    def buffer(doc):
        g, tb, i = _find(doc, "put", 0)
        tb["ops"][i]["dst_buff"][0]["buffer_id"] = 7

    assert _planted(buffer).check == "references"

    def chunk(doc):
        g, tb, i = _find(doc, "copy", 0)
        tb["ops"][i]["src_buff"][0]["index"] = 99

    assert "outside" in str(_planted(chunk))

    def peer(doc):  # a put whose channel leads to another rank than the buffer's owner
        bufs = doc["gpus"][1]["remote_buffers"]
        bufs[0], bufs[1] = bufs[1], bufs[0]

    assert _planted(peer, kind="allgather").check in ("references", "race", "postcondition")


def test_structure_and_limits():
    def order(doc):
        doc["gpus"][0], doc["gpus"][1] = doc["gpus"][1], doc["gpus"][0]

    assert "listed by rank" in str(_planted(order))

    def long(doc):
        doc["gpus"][0]["threadblocks"][0]["ops"] += [{"name": "nop"}] * 70

    assert _planted(long).check == "limits"

    def unknown(doc):
        doc["gpus"][0]["threadblocks"][0]["ops"].insert(0, {"name": "rre"})

    assert _planted(unknown).check == "operations"

    def counts(doc):
        for g in doc["gpus"]:
            g["output_chunks"] += 1

    assert _planted(counts).check == "structure"
    with pytest.raises(PlanCheckError, match="not valid JSON"):
        check_mscclpp_plan("{")


# ------------------------------------------------------------------ command line
def test_cli_export_and_check(capsys, tmp_path):
    s, p = tmp_path / "s.json", tmp_path / "plan.json"
    rc = main(["synth", "-t", "dgx1", "-c", "allreduce", "--algo", "ring", "-o", str(s)])
    assert rc == 0
    capsys.readouterr()
    rc = main(["export", "mscclpp", str(s), "-o", str(p), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    info = json.loads(out)
    assert info["checked"] is True and info["format"] == "mscclpp" and info["ngpus"] == 8
    doc = json.loads(p.read_text())
    assert doc["collective"] == "allreduce" and not doc["inplace"]
    rc = main(["check-mscclpp", str(p), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and json.loads(out)["ok"] is True
    # a bad option: one line, exit 2, nothing written
    q = tmp_path / "q.json"
    rc = main(["export", "mscclpp", str(s), "-o", str(q), "--channel", "nvls"])
    out, err = capsys.readouterr()
    assert rc == 2 and len(err.splitlines()) == 1 and not q.exists()
    # a broken plan: one line naming the rule
    doc["gpus"][0]["threadblocks"][0]["ops"].insert(0, {"name": "rre"})
    p.write_text(json.dumps(doc))
    rc = main(["check-mscclpp", str(p)])
    out, err = capsys.readouterr()
    assert rc == 2 and "operations:" in err and len(err.splitlines()) == 1
