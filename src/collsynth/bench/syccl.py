"""The ``syccl`` suite: SyCCL AllGather, ReduceScatter and AllToAll on ``a800_clos:servers=4``
(32 GPUs) and ``h800_rails`` at 8, 16 and 64 servers (64, 128, 512 GPUs), 1 KB to 4 GB.

``collsynth bench syccl -o bench/results`` writes ``syccl.json`` and ``syccl.md`` (rewritten
after each topology). For every (topology, collective, size): SyCCL's synthesis time (median of
``--repeat`` runs; the process is warm: imports and the simulator's compiled kernel are loaded
before the first timed run), the chosen candidate (allocation, rail template, pipeline depth),
the simulated completion time and busbw, the busbw ratio to ``ring`` (AllGather/ReduceScatter)
or ``direct`` (AllToAll; also ``ring`` where ring supports it), and the ratio of the simulated
time to the best lower bound (``collsynth.bound``; ForestColl's exact cut bound where it binds).
Every SyCCL schedule is verified. Every topology runs every size, 512 GPUs included (one timed
run per point there). ``--only`` matches ``COLLECTIVE TOPOLOGY`` (``alltoall h800_rails``).

The AllToAll bound's slow part at 512 GPUs is the ``demand-cut`` provider (about 2 minutes per
size: ``crossing_bytes`` rebuilds the n^2-entry AllToAll postcondition for each of the 128
server cuts). Its value is ``max over cuts S of need(S) / B+(S) + alpha_min(S)`` with
``need(S) = float(#chunks crossing S) * chunk_bytes(size)``: only ``chunk_bytes`` depends on
the size. :class:`DemandCutCache` runs the module's own per-cut code once per (topology,
collective) to get ``#chunks``, ``B+(S)`` and ``alpha_min(S)`` of every cut, then evaluates
the same float expression, in the same cut order with the same strict ``>``, at each size:
bit-for-bit the provider's value (the suite checks this against ``collsynth.bound`` at one
size per topology and stops if they differ). The other providers run as usual.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from ..bound import PROVIDERS, Bound, BoundResult, bound
from ..bound import cut as bc
from ..collective import Collective
from ..sim import simulate
from ..synth import synthesize
from ..topology import load_topology
from ..units import fmt_size, fmt_time
from ..verify import ensure_verified
from .common import merge_rows, read_json, select, summary, write_files

TOPOLOGIES = [
    "a800_clos:servers=4",
    "h800_rails:servers=8",
    "h800_rails:servers=16",
    "h800_rails:servers=64",
]
COLLECTIVES = ["allgather", "reducescatter", "alltoall"]
SIZES = [1e3, 32e3, 1e6, 32e6, 1e9, 4e9]
BIG = 256  # ranks from which a topology counts as big (1 timed run)
QUICK_TOPOLOGIES = ["a800_clos:servers=4", "h800_rails:servers=8"]


class DemandCutCache:
    """The ``demand-cut`` bound of one (topology, collective) at any size, from per-cut data
    computed once with the bound module's own helpers (see the module docstring)."""

    def __init__(self, topo, coll):
        self.topo, self.coll = topo, coll
        t = topo
        ref = 1e9
        cb = coll.chunk_bytes(ref)
        self.cuts = []  # (side, #crossing chunks, out bw, alpha) in the provider's order
        for side in bc._group_cuts(t):
            ranks = {int(t.rank_of_node[v]) for v in side if t.is_compute(v)}
            need = bc.crossing_bytes(coll, ref, ranks)
            count = round(need / cb)
            if float(count) * cb != need:  # pragma: no cover - not a whole chunk count
                raise RuntimeError("demand-cut: crossing bytes are not a chunk multiple")
            out_bw = sum(lk.bw for lk in t.links if lk.src in side and lk.dst not in side)
            self.cuts.append((side, count, out_bw, bc._alpha_min_out(t, side)))

    def bounds(self, size: float) -> list:
        """What ``demand_cut_bounds(topo, coll, size)`` returns, without recomputing cuts."""
        cb = self.coll.chunk_bytes(size)
        best = None
        for side, count, out_bw, alpha in self.cuts:
            need = float(count) * cb
            if need <= 0 or out_bw <= 0:
                continue
            val = need / out_bw + alpha
            if best is None or val > best[0]:
                best = (val, side, need, out_bw)
        if best is None:
            return []
        val, side, need, out_bw = best
        return [
            Bound("demand-cut", val, bc._names(self.topo, side), {"bytes": need, "cut_bw": out_bw})
        ]


def _bound(topo, coll, size, cache: DemandCutCache | None) -> tuple[float, str]:
    if cache is None:
        b = bound(topo, coll, size)
        return b.time_s, b.kind
    # every provider but demand-cut as usual, demand-cut from the cache, in PROVIDERS order
    bounds: list[Bound] = []
    for name in PROVIDERS:
        bounds += (
            cache.bounds(size)
            if name == "demand-cut"
            else bound(topo, coll, size, providers=[name]).bounds
        )
    b = BoundResult(float(size), bounds)
    return b.time_s, b.kind


def run(
    topologies: list[str],
    repeat: int,
    collectives: Sequence[str] = COLLECTIVES,
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """The rows of ``collectives`` on ``topologies``, every size."""
    rows = []
    for spec in topologies:
        topo = load_topology(spec)
        n = topo.num_ranks
        big = n >= BIG
        for cname in collectives:
            coll = Collective.make(cname, n)
            cache = None
            if big and cname == "alltoall" and "demand-cut" in PROVIDERS:
                t0 = time.perf_counter()
                cache = DemandCutCache(topo, coll)
                # self-check: the cached provider equals the module's, bit for bit
                want = bound(topo, coll, SIZES[0], providers=["demand-cut"]).bounds
                got = cache.bounds(SIZES[0])
                if [(x.kind, x.time_s, x.witness) for x in want] != [
                    (x.kind, x.time_s, x.witness) for x in got
                ]:
                    raise RuntimeError(f"demand-cut cache differs on {spec}: {got} != {want}")
                if progress:
                    progress(
                        f"{spec} {cname}: demand-cut cache built and checked in "
                        f"{time.perf_counter() - t0:.0f}s"
                    )
            baselines = {}
            for algo in (["direct"] if cname == "alltoall" else []) + ["ring"]:
                try:
                    baselines[algo] = synthesize(algo, topo, coll)
                except Exception:  # ring does not support AllToAll
                    continue
            for size in SIZES:
                times = []
                sched = None
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    sched = synthesize("syccl", topo, coll, size=size)
                    times.append(time.perf_counter() - t0)
                assert sched is not None
                ensure_verified(sched)
                sim = simulate(sched, size)
                meta = sched.meta["syccl"]
                b_t, b_kind = _bound(topo, coll, size, cache)
                row = {
                    "topology": spec,
                    "ranks": n,
                    "collective": cname,
                    "size": size,
                    "synth_s": statistics.median(times),
                    "synth_runs": times,
                    "ops": sched.num_ops,
                    "time_s": sim.time_s,
                    "busbw_Bps": sim.busbw,
                    "allocation": meta["allocation"],
                    "fractions": meta["fractions"],
                    "rail_template": meta["rail_template"],
                    "pipeline": meta["pipeline"],
                    "candidates": meta["candidates"],
                    "bound_s": b_t,
                    "bound_kind": b_kind,
                    "bound_ratio": sim.time_s / b_t if b_t > 0 else None,
                }
                for algo, bs in baselines.items():
                    bt = simulate(bs, size).time_s
                    row[f"{algo}_time_s"] = bt
                    row[f"vs_{algo}"] = bt / sim.time_s  # busbw ratio = inverse time ratio
                rows.append(row)
                if progress:
                    progress(_line(row))
    return rows


def _line(r: dict) -> str:
    vs = " ".join(f"x{r[k]:.2f} {k[3:]}" for k in ("vs_ring", "vs_direct") if k in r)
    return (
        f"{r['topology']:<22} {r['collective']:<13} {fmt_size(r['size']):>7} "
        f"synth {r['synth_s']:6.2f}s  {fmt_time(r['time_s']):>10}  "
        f"busbw {r['busbw_Bps'] / 1e9:7.2f} GB/s  {vs}  bound x{r['bound_ratio']:.3f} "
        f"({r['allocation']}, {r['rail_template']}, P={r['pipeline']})"
    )


def write(rows: list[dict], out: str) -> None:
    """Write ``OUT/syccl.json`` and ``OUT/syccl.md``."""
    env = {"python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count()}
    lines = [
        "# SyCCL benchmark (`collsynth bench syccl`)",
        "",
        "Simulated with the collsynth simulator; synthesis time is the median of the timed "
        "runs in a warm process on a shared 2-core machine (noisy). `vs ring` / `vs direct` "
        "= busbw ratio (baseline time / SyCCL time); `/bound` = SyCCL time / best lower "
        "bound.",
        "",
        "| topology | coll | size | synth (s) | time | busbw GB/s | vs ring | vs direct | "
        "/bound | bound | choice |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        vr = f"{r['vs_ring']:.2f}" if "vs_ring" in r else "-"
        vd = f"{r['vs_direct']:.2f}" if "vs_direct" in r else "-"
        lines.append(
            f"| {r['topology']} | {r['collective']} | {fmt_size(r['size'])} | "
            f"{r['synth_s']:.2f} | {fmt_time(r['time_s'])} | {r['busbw_Bps'] / 1e9:.2f} | "
            f"{vr} | {vd} | {r['bound_ratio']:.3f} | {r['bound_kind']} | "
            f"{r['allocation']} {'/'.join(r['fractions'])}, {r['rail_template']}, "
            f"P={r['pipeline']} |"
        )
    write_files(
        out,
        {
            "syccl.json": json.dumps({"env": env, "rows": rows}, indent=1),
            "syccl.md": "\n".join(lines) + "\n",
        },
    )


def _row_key(row: dict) -> tuple:
    return (row.get("topology"), row.get("collective"))


def run_suite(
    out_dir: str,
    repeat: int = 3,
    progress: Callable[[str], None] | None = None,
    only: str | None = None,
    topologies: Sequence[str] | None = None,
    quick: bool = False,
) -> dict:
    """Run the suite and write ``OUT/syccl.json`` and ``.md``. ``topologies``: the topology
    specs (default :data:`TOPOLOGIES`; ``quick``: :data:`QUICK_TOPOLOGIES`, 32 and 64 GPUs)."""
    t0 = time.perf_counter()
    tops = list(topologies or (QUICK_TOPOLOGIES if quick else TOPOLOGIES))
    all_cases = [(spec, c) for spec in tops for c in COLLECTIVES]
    chosen = select("syccl", all_cases, lambda sc: f"{sc[1]} {sc[0]}", only)
    old = read_json(os.path.join(out_dir, "syccl.json")).get("rows", []) if only else []
    # warm the process (imports, the simulator's compiled kernel) before timing
    t = load_topology("h800_rails:servers=2")
    simulate(synthesize("syccl", t, Collective.make("allgather", t.num_ranks)), 1e6)
    rows: list[dict] = []
    out: list[dict] = []
    for spec in tops:
        colls = [c for s, c in chosen if s == spec]
        if not colls:
            continue
        n = load_topology(spec).num_ranks
        rows += run([spec], 1 if n >= BIG else repeat, colls, progress)
        out = rows
        if only is not None:
            out = merge_rows(old, rows, set(chosen), _row_key, all_cases)
        write(out, out_dir)
    return {
        "suite": "syccl",
        "rows": out,
        "summary": summary(len(all_cases), len(chosen), len(out), time.perf_counter() - t0, only),
    }
