"""MSCCL XML export (collsynth.export.msccl) and the independent XML checker (export.check).

Every exported file must pass the checker (structure, send/recv pairing, no cycle or
deadlock, symbolic execution reaching the collective's postcondition); files broken in one
specific way must be rejected by the rule that names that way, with a message naming the
GPU / thread block / step.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from collsynth.collective import Collective
from collsynth.errors import CollsynthError
from collsynth.export import XmlCheckError, check_msccl_xml, to_msccl_xml
from collsynth.schedule.ir import ScheduleBuilder
from collsynth.synth import synthesize
from collsynth.topology import load_topology

_TOPO: dict = {}
_SCHED: dict = {}


def topo(spec):
    if spec not in _TOPO:
        _TOPO[spec] = load_topology(spec)
    return _TOPO[spec]


def sched(algo, spec, kind, C=1, **opts):
    """The algorithm's schedule as it is (without the link orders synthesis chooses for
    execution: the golden layouts and planted defects below are the exporter's on a bare
    schedule; ``test_ordered_export_keeps_every_pair_order`` covers ordered ones)."""
    key = (algo, spec, kind, C, tuple(sorted(opts.items())))
    if key not in _SCHED:
        t = topo(spec)
        if algo == "forestcoll":
            opts.setdefault("pipeline", 1)
        _SCHED[key] = synthesize(
            algo, t, Collective.make(kind, t.num_ranks, C), link_order=False, **opts
        )
    return _SCHED[key]


@pytest.mark.parametrize(
    "algo,spec,kind",
    [("ring", "ring:n=4", "allgather"), ("ring", "ring:n=6", "reducescatter"),
     ("forestcoll", "dgx1", "allreduce"), ("spt", "dgx1", "allgather")],
)  # fmt: skip
def test_ordered_export_keeps_every_pair_order(algo, spec, kind):
    """Every thread block sends to its peer in the pair's link order (per channel), and the
    file checks; on a ring all but one GPU send their own chunk first and fuse the rest (the
    one that breaks the cycle of 'send first' receives first)."""
    t = topo(spec)
    opts = {"forestcoll": {"pipeline": 2}, "ring": {"rings": 1}}.get(algo, {})
    s = synthesize(algo, t, Collective.make(kind, t.num_ranks), size=1e6, **opts)
    assert s.link_order
    xml = to_msccl_xml(s)
    check_msccl_xml(xml, t)
    from collsynth.export.lowering import whole_chunks
    from collsynth.export.msccl_order import fuse_order, operation_tables

    w = whole_chunks(s)  # joins expanded: operations numbered as the exporter sees them
    fused = fuse_order(w, operation_tables(w))
    pos = {op: i for i, op in enumerate(fused.order)}
    a, b = w.pair_order_edges()
    assert len(a)
    assert all(pos[int(x)] < pos[int(y)] for x, y in zip(a, b))
    if algo == "ring" and kind == "allgather":
        fused = [re.findall(r'type="(\w+)"', body).count("rcs") for _, body in _gpus(xml)]
        assert sum(f == 2 for f in fused) >= t.num_ranks - 1


# ------------------------------------------------------------------------------ round trips
CASES = [
    ("spt", "ring:n=4", "allgather"),
    ("spt", "dgx1", "allgather"),
    ("spt", "dgx1", "reducescatter"),
    ("spt", "dgx1", "allreduce"),
    ("spt", "star:n=8", "alltoall"),
    ("spt", "dgx_a100:nodes=2", "allgather"),
    ("spt", "dgx_a100:nodes=2", "allreduce"),
    ("spt", "dgx1", "broadcast"),
    ("spt", "dgx1", "reduce"),
    ("ring", "ring:n=4", "allgather"),
    ("ring", "ring:n=4", "reducescatter"),
    ("ring", "dgx1", "allreduce"),
    ("ring", "dgx_a100:nodes=2", "allgather"),
    ("rd", "ring:n=4", "allgather"),
    ("rd", "dgx1", "reducescatter"),
    ("rd", "star:n=8", "allreduce"),
    ("rd", "dgx_a100:nodes=2", "allreduce"),
    ("direct", "dgx1", "allgather"),
    ("direct", "star:n=8", "alltoall"),
    ("direct", "dgx_a100:nodes=2", "alltoall"),
    ("forestcoll", "dgx1", "allgather"),
    ("forestcoll", "star:n=8", "reducescatter"),
    ("forestcoll", "star:n=8", "allreduce"),
    ("forestcoll", "ring:n=4", "allreduce"),
    ("tree", "dgx1", "allreduce"),
    ("bruck", "star:n=8", "alltoall"),
]


@pytest.mark.parametrize("algo,spec,kind", CASES)
@pytest.mark.parametrize("dialect", ["msccl", "executor"])
def test_export_passes_checker(algo, spec, kind, dialect):
    s = sched(algo, spec, kind)
    xml = to_msccl_xml(s, dialect=dialect)
    rep = check_msccl_xml(xml, topo(spec))
    assert rep.ok and rep.dialect == dialect
    assert rep.ngpus == topo(spec).num_ranks
    assert rep.checks[-1] == "postcondition"
    assert rep.transfers >= s.num_ops  # one transfer per operation


@pytest.mark.parametrize(
    "algo,spec,kind",
    [
        ("ring", "ring:n=4", "allgather"),
        ("spt", "dgx1", "reducescatter"),
        ("rd", "dgx1", "allreduce"),
        ("spt", "dgx1", "broadcast"),
        ("spt", "dgx1", "reduce"),
        ("forestcoll", "star:n=8", "allgather"),
    ],
)
def test_export_in_place(algo, spec, kind):
    s = sched(algo, spec, kind)
    for dialect in ("msccl", "executor"):
        xml = to_msccl_xml(s, dialect=dialect, inplace=True)
        rep = check_msccl_xml(xml, topo(spec))
        assert rep.inplace


@pytest.mark.parametrize(
    "kw",
    [
        {"instances": 2},
        {"channels": 4},
        {"channels": 2, "instances": 3, "proto": "LL128"},
        {"proto": "LL", "min_bytes": 1024, "max_bytes": 1 << 20},
    ],
)
def test_export_options(kw):
    s = sched("spt", "dgx1", "allreduce", C=2)
    base = check_msccl_xml(to_msccl_xml(s), topo("dgx1"))
    for dialect in ("msccl", "executor"):
        xml = to_msccl_xml(s, dialect=dialect, **kw)
        rep = check_msccl_xml(xml, topo("dgx1"))
        n = kw.get("instances", 1)
        assert rep.nchunksperloop == base.nchunksperloop * n
        assert rep.nchannels <= 32
        assert f'proto="{kw.get("proto", "Simple")}"' in xml
        if "channels" in kw:
            assert rep.nchannels <= kw["channels"] * n
    xml = to_msccl_xml(s, dialect="executor", min_bytes=1024, max_bytes=4096)
    assert 'minBytes="1024" maxBytes="4096"' in xml


def test_channels_spread_and_tb_rule():
    s = sched("spt", "dgx1", "allgather", C=4)
    xml = to_msccl_xml(s, channels=4)
    rep = check_msccl_xml(xml, topo("dgx1"))
    assert rep.nchannels > 1
    # at most one thread block per (channel, peer) and direction on every GPU
    for gpu in re.findall(r"<gpu .*?</gpu>", xml, re.S):
        tbs = re.findall(r'<tb id="(\d+)" send="(-?\d+)" recv="(-?\d+)" chan="(\d+)"', gpu)
        sends = [(c, s_) for _, s_, _, c in tbs if s_ != "-1"]
        recvs = [(c, r_) for _, _, r_, c in tbs if r_ != "-1"]
        assert len(sends) == len(set(sends)) and len(recvs) == len(set(recvs))


# ------------------------------------------------------------------------------ golden facts
def _gpus(xml):
    return re.findall(r"<gpu (.*?)>(.*?)</gpu>", xml, re.S)


def test_golden_ring_allgather():
    s = sched("ring", "ring:n=4", "allgather", rings=1)
    assert s.collective.chunks_per_rank == 1
    xml = to_msccl_xml(s)
    head = xml.splitlines()[0]
    assert head == (
        '<algo name="collsynth-ring-allgather-n4" proto="Simple" nchannels="1" '
        'nchunksperloop="4" ngpus="4" coll="allgather" inplace="0">'
    )
    gpus = _gpus(xml)
    assert len(gpus) == 4
    for g, (attrs, body) in enumerate(gpus):
        assert attrs == f'id="{g}" i_chunks="1" o_chunks="4" s_chunks="0"'
        tbs = re.findall(r'<tb id="(\d+)" send="(-?\d+)" recv="(-?\d+)" chan="(\d+)">', body)
        # one ring: one thread block receiving from the left and sending to the right
        assert tbs == [("0", str((g + 1) % 4), str((g - 1) % 4), "0")]
        types = re.findall(r'type="(\w+)"', body)
        assert sorted(types) == ["cpy", "r", "rcs", "rcs", "s"]
    rep = check_msccl_xml(xml, topo("ring:n=4"))
    assert (rep.threadblocks, rep.steps, rep.transfers) == (4, 20, 12)


def test_golden_attributes_per_dialect():
    s = sched("ring", "ring:n=4", "reducescatter", rings=1)
    old = to_msccl_xml(s, dialect="msccl")
    new = to_msccl_xml(s, dialect="executor")
    assert 'coll="reduce_scatter"' in old and "outofplace" not in old
    assert "minBytes" not in old and "maxBytes" not in old
    assert 'coll="reducescatter"' in new
    assert 'inplace="0" outofplace="1" minBytes="0" maxBytes="0"' in new
    # reduce-scatter: i has the n contributions, o the rank's own result
    assert 'i_chunks="4" o_chunks="1" s_chunks="0"' in new
    # partial sums are forwarded with the fused receive-reduce-send (nothing stored), the
    # rank's own chunk ends with a receive-reduce-copy into the output
    assert new.count('type="rrs"') == 8 and new.count('type="rrc"') == 4
    ip = to_msccl_xml(s, dialect="executor", inplace=True)
    assert 'inplace="1" outofplace="0"' in ip and 'o_chunks="0"' in ip
    check_msccl_xml(ip, topo("ring:n=4"))


def _nop_schedule(n=6):
    """Direct allreduce plus a redundant copy back to rank 0 after rank 0's final value was
    read by several thread blocks: that write waits on several thread blocks (nop chain)."""
    t = topo(f"star:n={n}")
    b = ScheduleBuilder(t, Collective.make("allreduce", n, 1))
    for ch in range(n):
        others = [r for r in range(n) if r != ch]
        red = [b.add(r, ch, ch, kind="reduce") for r in others]
        bc = [b.add(ch, r, ch, deps=red) for r in others]
        if ch == 0:
            b.add(1, 0, 0, deps=bc)
    return t, b.build()


def test_nop_chains_and_hasdep():
    t, s = _nop_schedule()
    xml = to_msccl_xml(s)
    check_msccl_xml(xml, t)
    lines = xml.splitlines()
    nops = [i for i, line in enumerate(lines) if 'type="nop"' in line]
    assert len(nops) == 2 and nops[1] == nops[0] + 1
    real = lines[nops[1] + 1]
    assert 'type="r"' in real and _get(real, "depid") != "-1"
    for i in nops + [nops[1] + 1]:  # every waited-on step publishes its completion
        g = next(
            int(m.group(1))
            for line in reversed(lines[:i])
            for m in [re.search(r'<gpu id="(\d+)"', line)]
            if m
        )
        assert g == 0
    assert xml.count('hasdep="1"') >= 3
    # planted: the step after the nop chain loses its own dependency
    bad = list(lines)
    bad[nops[1] + 1] = _set(_set(real, "depid", -1), "deps", -1)
    _reject("\n".join(bad), "star:n=6", "dependency", "chain of nops")


# ------------------------------------------------------------------------------ formatting
@pytest.mark.parametrize("dialect", ["msccl", "executor"])
def test_formatting_rules(dialect):
    xml = to_msccl_xml(sched("spt", "dgx1", "allreduce"), dialect=dialect)
    assert xml.startswith("<algo ")
    assert "<?xml" not in xml and "\t" not in xml and "'" not in xml
    for line in xml.splitlines():
        # one tag per line, indented with spaces, every attribute double-quoted
        assert re.fullmatch(r'( {2})*(</\w+>|<\w+( \w+="[^"<>]*")*/?>)', line), line
        assert len(re.findall(r'\w+="', line)) <= 16


def test_deterministic():
    t = topo("dgx1")
    a = synthesize("spt", t, Collective.make("allreduce", 8, 2))
    b = synthesize("spt", t, Collective.make("allreduce", 8, 2))
    for dialect in ("msccl", "executor"):
        assert to_msccl_xml(a, dialect=dialect) == to_msccl_xml(b, dialect=dialect)
        assert to_msccl_xml(a, dialect=dialect) == to_msccl_xml(a, dialect=dialect)


# ------------------------------------------------------------------------------ other IR
def test_timed_schedule():
    """Start times order the thread blocks; a timed schedule exports and checks."""
    t = topo("ring:n=4")
    s0 = sched("ring", "ring:n=4", "allgather", rings=1)
    b = ScheduleBuilder(t, s0.collective, meta={"algorithm": "timed"})
    b.size = 4e3
    for i in range(s0.num_ops):
        b.add(
            int(s0.src[i]),
            int(s0.dst[i]),
            int(s0.chunk[i]),
            route=s0.route(i).tolist(),
            deps=s0.deps(i).tolist(),
            start=float(s0.step[i]) * 1e-3 + (3 - i % 4) * 1e-7,
        )
    s = b.build()
    assert s.timed
    check_msccl_xml(to_msccl_xml(s, dialect="executor"), t)


def test_unsupported_inputs():
    s = sched("ring", "ring:n=4", "allgather", rings=1)
    with pytest.raises(CollsynthError, match="dialect"):
        to_msccl_xml(s, dialect="nccl")
    with pytest.raises(CollsynthError, match="protocol"):
        to_msccl_xml(s, proto="Fast")
    with pytest.raises(CollsynthError, match="instances"):
        to_msccl_xml(s, instances=33)
    with pytest.raises(CollsynthError, match="32-channel"):
        to_msccl_xml(s, channels=8, instances=8)
    star = topo("star:n=4")
    g = synthesize("direct", star, Collective.make("gather", 4, 1))
    with pytest.raises(CollsynthError, match="does not support gather"):
        to_msccl_xml(g)
    a2a = sched("direct", "star:n=8", "alltoall")
    with pytest.raises(CollsynthError, match="in-place alltoall"):
        to_msccl_xml(a2a, inplace=True)
    b = ScheduleBuilder(star, Collective.make("allgather", 4, 1))
    for r in range(4):
        for d in range(4):
            if d != r:
                b.add(r, d, r, part=(0, 1, 128))
                b.add(r, d, r, part=(1, 128, 128))
    with pytest.raises(CollsynthError, match="sub-chunks per chunk"):
        to_msccl_xml(b.build())
    big = synthesize("forestcoll", topo("dgx1"), Collective.make("allreduce", 8, 1), pipeline=64)
    with pytest.raises(CollsynthError) as e:
        to_msccl_xml(big, dialect="executor")
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------ planted defects
def _step_lines(xml):
    """(line index, gpu, tb, step index) of every step line."""
    out, g, tb, k = [], None, None, 0
    for i, line in enumerate(xml.splitlines()):
        m = re.search(r'<gpu id="(\d+)"', line)
        if m:
            g = int(m.group(1))
        m = re.search(r'<tb id="(\d+)"', line)
        if m:
            tb, k = int(m.group(1)), 0
        if "<step " in line:
            out.append((i, g, tb, k))
            k += 1
    return out


def _set(line, key, value):
    return re.sub(rf' {key}="[^"]*"', f' {key}="{value}"', line, count=1)


def _get(line, key):
    return re.search(rf' {key}="([^"]*)"', line).group(1)


def _reject(xml, spec, check, *words):
    with pytest.raises(XmlCheckError) as e:
        check_msccl_xml(xml, topo(spec))
    msg = str(e.value)
    assert e.value.check == check, msg
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg
    return msg


def test_defect_mismatched_send_recv_order():
    xml = to_msccl_xml(sched("ring", "ring:n=4", "allgather", rings=1))
    lines = xml.splitlines()
    # gpu 2 forwards chunks 0 and 1 to gpu 3 in that order; swap the two steps
    st = [x for x in _step_lines(xml) if x[1] == 2 and x[2] == 0]
    i, j = st[0][0], st[1][0]
    assert _get(lines[i], "dstoff") == "0" and _get(lines[j], "dstoff") == "1"
    lines[i], lines[j] = _set(lines[j], "s", 0), _set(lines[i], "s", 1)
    _reject("\n".join(lines), "ring:n=4", "data", "gpu 2 tb 0 step 0", "out of order")


def test_defect_missing_hasdep():
    xml = to_msccl_xml(sched("spt", "dgx1", "allgather"))
    lines = xml.splitlines()
    for i, g, tb, k in _step_lines(xml):
        if 'hasdep="1"' in lines[i]:
            lines[i] = _set(lines[i], "hasdep", 0)
            break
    _reject("\n".join(lines), "dgx1", "dependency", f"gpu {g} tb {tb} step {k}", "hasdep")


def test_defect_duplicate_channel_peer():
    xml = to_msccl_xml(sched("spt", "dgx1", "allgather"))
    tbs = re.findall(r'<tb id="(\d+)" send="(-?\d+)"', _gpus(xml)[0][1])
    first_send = tbs[0][1]
    lines = xml.splitlines()
    k = next(i for i, line in enumerate(lines) if '<tb id="1"' in line)  # gpu 0, tb 1
    lines[k] = _set(lines[k], "send", first_send)
    _reject(
        "\n".join(lines),
        "dgx1",
        "structure",
        "gpu 0",
        "thread blocks 0 and 1",
        f"send to {first_send} on channel 0",
    )


def test_defect_dependency_cycle():
    xml = to_msccl_xml(sched("spt", "dgx1", "allgather"))
    lines = xml.splitlines()
    where = {(g, tb, k): i for i, g, tb, k in _step_lines(xml)}
    for (g, tb, k), i in where.items():
        dep = int(_get(lines[i], "depid"))
        if dep >= 0:
            t = (g, dep, int(_get(lines[i], "deps")))
            # the waited-on step now waits for the waiting step: a cycle
            lines[where[t]] = _set(_set(lines[where[t]], "depid", tb), "deps", k)
            lines[i] = _set(lines[i], "hasdep", 1)
            break
    msg = _reject("\n".join(lines), "dgx1", "dependency-cycle", "cycle")
    assert f"gpu {g} tb {tb} step {k}" in msg


def test_defect_missing_chunk():
    xml = to_msccl_xml(sched("ring", "ring:n=4", "allgather", rings=1))
    lines = [
        line for line in xml.splitlines() if not ('type="cpy"' in line and 'dstoff="0"' in line)
    ]  # gpu 0's own chunk
    _reject("\n".join(lines), "ring:n=4", "postcondition", "gpu 0", "o[0]", "chunk 0")


def test_defect_send_without_receive():
    xml = to_msccl_xml(sched("ring", "ring:n=4", "allgather", rings=1))
    lines = xml.splitlines()
    # drop gpu 2's plain receive (its last real step before the copy): counts no longer match
    st = [x for x in _step_lines(xml) if x[1] == 2]
    i = next(x[0] for x in st if 'type="r"' in lines[x[0]])
    nxt = [x for x in st if x[0] > i]
    for x in nxt:
        lines[x[0]] = _set(lines[x[0]], "s", x[3] - 1)
    del lines[i]
    _reject("\n".join(lines), "ring:n=4", "pairing", "gpu 1", "gpu 2", "channel 0")


def test_defect_duplicate_contribution():
    xml = to_msccl_xml(sched("ring", "ring:n=4", "allreduce", rings=1))
    lines = xml.splitlines()
    # turn a final plain receive (copy phase) into a receive-reduce: contributions twice
    i, g, tb, k = next(x for x in _step_lines(xml) if 'type="r"' in lines[x[0]])
    lines[i] = _set(
        _set(_set(lines[i], "type", "rrc"), "srcbuf", _get(lines[i], "dstbuf")),
        "srcoff",
        _get(lines[i], "dstoff"),
    )
    _reject("\n".join(lines), "ring:n=4", "data", f"gpu {g} tb {tb} step {k}", "twice")


@pytest.mark.parametrize(
    "mutate,word",
    [
        (lambda x: '<?xml version="1.0"?>\n' + x, "declaration"),
        (lambda x: x.replace("  <gpu", "\t<gpu", 1), "tab"),
        (lambda x: x.replace('proto="Simple"', "proto='Simple'", 1), "double quotes"),
        (lambda x: x.replace('" nchannels', '"\n nchannels', 1), "several lines"),
    ],
)
def test_defect_formatting(mutate, word):
    xml = to_msccl_xml(sched("ring", "ring:n=4", "allgather", rings=1))
    _reject(mutate(xml), "ring:n=4", "format", word)


def test_checker_structure_rules():
    xml = to_msccl_xml(sched("ring", "ring:n=4", "reducescatter", rings=1), dialect="executor")
    _reject(
        xml.replace('coll="reducescatter"', 'coll="reduce_scatter"'),
        "ring:n=4",
        "structure",
        "old-fork spelling",
    )
    _reject(xml.replace(' maxBytes="0"', ""), "ring:n=4", "structure", "maxBytes")
    _reject(xml.replace('<step s="1"', '<step s="2"', 1), "ring:n=4", "structure", "position")
    _reject(
        xml.replace('<tb id="0"', '<tb id="3"', 1),
        "ring:n=4",
        "structure",
        "thread block 0 is missing",
    )
    with pytest.raises(XmlCheckError, match="ngpus=4"):
        check_msccl_xml(xml, topo("dgx1"))


def test_defect_missing_dependency_is_a_race():
    xml = to_msccl_xml(sched("spt", "dgx1", "allgather"))
    lines = xml.splitlines()
    i, g, tb, k = next(x for x in _step_lines(xml) if _get(lines[x[0]], "depid") != "-1")
    lines[i] = _set(_set(lines[i], "depid", -1), "deps", -1)
    msg = str(pytest.raises(XmlCheckError, check_msccl_xml, "\n".join(lines), topo("dgx1")).value)
    assert msg.startswith(("race:", "data:")) and f"gpu {g} tb {tb} step {k}" in msg


BCAST_CHAIN = """<algo name="bcast_chain" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="3" coll="broadcast" inplace="0" outofplace="1" minBytes="0" maxBytes="0">
  <!-- hand-written (reference §1.1): root 0 -> 1 -> 2 -->
  <gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="-1" recv="0" chan="0">
      <step s="0" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>
    </tb>
    <tb id="1" send="2" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="0" deps="0" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="2" i_chunks="1" o_chunks="1" s_chunks="0">
    <tb id="0" send="-1" recv="1" chan="0">
      <step s="0" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""


def test_checker_on_hand_written_xml():
    rep = check_msccl_xml(BCAST_CHAIN, root=0)
    assert rep.ok and rep.dialect == "executor" and rep.transfers == 2
    # without gpu 1's dependency, its forward may read o[0] before the receive wrote it
    with pytest.raises(XmlCheckError) as e:
        check_msccl_xml(BCAST_CHAIN.replace('depid="0" deps="0"', 'depid="-1" deps="-1"'))
    assert e.value.check in ("race", "data") and "gpu 1 tb 1 step 0" in str(e.value)
    # the wrong root: gpu 1 would have to hold the data first
    with pytest.raises(XmlCheckError, match="postcondition|data"):
        check_msccl_xml(BCAST_CHAIN, root=1)


def test_checker_topology_and_old_fork_rules():
    xml = to_msccl_xml(sched("spt", "star:n=4", "allgather"))
    check_msccl_xml(xml, topo("star:n=4"))
    # star:n=4 sends between every pair; ring:n=4 has no direct route from 0 to 2
    with pytest.raises(XmlCheckError, match="no direct route"):
        check_msccl_xml(xml, topo("ring:n=4"))
    # old fork: i_chunks x ngpus must equal nchunksperloop for allgather
    bad = xml.replace('i_chunks="1"', 'i_chunks="2"', 1)
    _reject(bad, "star:n=4", "structure", "gpu 0", "i_chunks=2")


def test_byte_ranges_export_as_refined_chunks():
    # halves and a relay of the second half: chunk c becomes sub-chunks 2c, 2c+1 in the XML
    star = topo("star:n=4")
    coll = Collective.make("allgather", 4, 1)
    b = ScheduleBuilder(star, coll)
    for r in range(4):
        for d in range(4):
            if d != r:
                b.add(r, d, r, part=(0, 1, 2))
        nxt = (r + 1) % 4
        first = b.add(r, nxt, r, part=(1, 2, 2))
        for d in range(4):
            if d not in (r, nxt):
                b.add(nxt, d, r, part=(1, 2, 2), deps=[first])
    s = b.build()
    xml = to_msccl_xml(s)
    assert 'nchunksperloop="8"' in xml
    check_msccl_xml(xml, star)
    # a byte-range AllToAll from the TE-CCL LP exports and checks as well
    t = topo("dgx1")
    a2a = synthesize("teccl", t, Collective.make("alltoall", 8, 1), size=1e6)
    if a2a.has_parts and not bool(np.all((a2a.part_lo == 0) & (a2a.part_hi == a2a.part_den))):
        check_msccl_xml(to_msccl_xml(a2a), t)


@pytest.mark.parametrize("channels", [0, -1, True, 2.5])
def test_a_bad_channel_count_is_one_line_before_any_arithmetic(channels):
    """``channels=0`` used to reach the step-floor check first and divide by zero."""
    s = synthesize("ring", load_topology("dgx1"), Collective.make("allgather", 8, 1))
    with pytest.raises(CollsynthError, match="channels must be a positive integer"):
        to_msccl_xml(s, channels=channels)


def _send_all_then_receive(k: int) -> str:
    """A two-GPU AllGather in the msccl-tools style: each GPU's one thread block sends its k
    chunks to the other, then receives the other's k, then copies its own: correct when a
    connection buffers k transfers, a slot deadlock with fewer."""
    lines = [
        f'<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="{2 * k}" ngpus="2" '
        'coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="0">'
    ]
    for g in (0, 1):
        o = 1 - g
        lines.append(f'  <gpu id="{g}" i_chunks="{k}" o_chunks="{2 * k}" s_chunks="0">')
        lines.append(f'    <tb id="0" send="{o}" recv="{o}" chan="0">')
        steps = [("s", "i", c, g * k + c) for c in range(k)]
        steps += [("r", "o", o * k + c, o * k + c) for c in range(k)]
        steps += [("cpy", "i", c, g * k + c) for c in range(k)]
        for i, (kind, buf, src, dst) in enumerate(steps):
            lines.append(
                f'      <step s="{i}" type="{kind}" srcbuf="{buf}" srcoff="{src}" dstbuf="o" '
                f'dstoff="{dst}" cnt="1" depid="-1" deps="-1" hasdep="0"/>'
            )
        lines += ["    </tb>", "  </gpu>"]
    return "\n".join(lines + ["</algo>"]) + "\n"


def test_checker_connection_slots_as_the_runtime_has_them(tmp_path, capsys):
    from collsynth.cli import main
    from collsynth.export.check import RUNTIME_FIFO_SLOTS

    two = _send_all_then_receive(2)
    with pytest.raises(XmlCheckError, match="waits for a free slot") as e:
        check_msccl_xml(two)  # the library's default: one slot, what collsynth's files meet
    assert e.value.check == "deadlock"
    assert check_msccl_xml(two, fifo_slots=2).ok
    full = _send_all_then_receive(RUNTIME_FIFO_SLOTS)
    over = _send_all_then_receive(RUNTIME_FIFO_SLOTS + 1)
    paths = {}
    for name, text in (("two", two), ("full", full), ("over", over)):
        paths[name] = str(tmp_path / f"{name}.xml")
        with open(paths[name], "w") as f:
            f.write(text)

    def cli(*argv):
        code = main(["check-xml", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    # the command's default is the runtime's slots: programs that need up to that many pass
    assert cli(paths["two"])[0] == 0 and cli(paths["full"])[0] == 0
    code, out, err = cli(paths["over"])  # a real slot deadlock is still caught
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "slot" in err
    code, _, err = cli(paths["two"], "--fifo-slots", "1")
    assert code == 2 and "deadlock" in err
    for bad in ("0", "-3", "two"):
        code, out, err = cli(paths["two"], "--fifo-slots", bad)
        assert code == 2 and not out and len(err.strip().splitlines()) == 1 and "fifo-slots" in err
