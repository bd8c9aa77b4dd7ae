"""SCALE-CCL benchmark (issue 8): seed 000 §5 on the ``wan`` topology.

Experiments (AllGather, 3 datacenters x 8 GPUs, intra-DC connectivity 0.5 unless noted; the
chunk is what each GPU contributes, the collective's size is 24 chunks):

* §5.1 / Table 1 — 150 km (750 us) WAN, chunk 1..256 MB, subchunks 1, 2, 4, 8: synthesis time
  of ``scale`` (best of 2), ``sph`` and ``ring`` (both given ``chunks_per_rank = c``, the
  subchunks), simulated completion of each, and the lower bound (``collsynth.bound``);
* §5.2 / Fig. 9 — WAN delay 50, 250, 500, 750, 1000 us (10..200 km), 1 subchunk;
* §5.3 / Fig. 10 — 100 km (500 us), subchunks 1, 2, 4;
* connectivity 0.7 and 0.9 (a few rows);
* TE-CCL (``teccl``, ``time_limit`` 5 s) on small WAN instances where it finishes;
* re-planning: wall time of ``replan`` for 3 DCs x 8 GPUs with 8 subchunks under 20 seeded
  perturbed statistics (target <= 100 ms);
* robustness: a plan made under the nominal statistics simulated under perturbed ones (every
  bandwidth and delay times a seeded factor in [0.7, 1.3]) vs re-planning, ``sph`` and ``ring``.

Run from the repository root: ``python bench/scale_bench.py`` (writes
``bench/results/scale_ccl.json`` and ``bench/results/scale_ccl.md``); ``--quick`` runs a subset;
``--replan-only`` re-runs only the re-planning measurement and merges it into those files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace

from collsynth.bound import bound
from collsynth.collective import Collective
from collsynth.sim import simulate
from collsynth.synth import synthesize
from collsynth.synth.scale import LinkStats, replan
from collsynth.topology import load_topology
from collsynth.units import fmt_time
from collsynth.verify import ensure_verified

MB = 1e6
CHUNKS_MB = [1, 4, 16, 64, 256]
KM_ALL = [10, 50, 100, 150, 200]


def _timed(fn, repeat: int = 1):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def run_config(km: float, chunk_mb: float, c: int, connectivity: float = 0.5,
               baselines: bool = True) -> dict:
    spec = f"wan:km={km:g},connectivity={connectivity:g}"
    topo = load_topology(spec)
    n = topo.num_ranks
    size = chunk_mb * MB * n
    ag = Collective.make("allgather", n)
    sched, synth_s = _timed(lambda: synthesize("scale", topo, ag, size=size, subchunks=c), 2)
    ensure_verified(sched)
    row = {"topology": spec, "km": km, "wan_delay_us": km * 5, "chunk_mb": chunk_mb,
           "subchunks": c, "connectivity": connectivity, "size": size, "ops": sched.num_ops,
           "scale_synth_s": synth_s, "scale_plan_s": sched.meta["scale"]["plan_time_s"],
           "scale_s": simulate(sched, size).time_s,
           "bound_s": float(bound(topo, ag, size).best.time_s)}
    if baselines:
        coll_c = Collective.make("allgather", n, c)
        for algo in ("sph", "ring"):
            s, t = _timed(lambda: synthesize(algo, topo, coll_c, size=size))
            row[f"{algo}_synth_s"] = t
            row[f"{algo}_s"] = simulate(s, size).time_s
    return row


def run_teccl(time_limit: float) -> list[dict]:
    rows = []
    for spec in ("wan:dcs=2,gpus=2,km=10", "wan:dcs=3,gpus=2,km=10", "wan:dcs=2,gpus=2,km=150",
                 "wan:dcs=3,gpus=2,km=150"):
        topo = load_topology(spec)
        n = topo.num_ranks
        for chunk_mb in (1, 16):
            size = chunk_mb * MB * n
            for c in (1, 2):
                row = {"topology": spec, "chunk_mb": chunk_mb, "subchunks": c}
                s, t = _timed(lambda: synthesize("scale", topo, Collective.make("allgather", n),
                                                 size=size, subchunks=c))
                row.update(scale_synth_s=t, scale_s=simulate(s, size).time_s)
                try:
                    te, t = _timed(lambda: synthesize("teccl", topo,
                                                      Collective.make("allgather", n, c),
                                                      size=size, time_limit=time_limit))
                    row.update(teccl_synth_s=t, teccl_status=te.meta.get("teccl", {})
                               .get("status"), teccl_s=simulate(te, size).time_s)
                except Exception as e:  # noqa: BLE001 - report, keep benchmarking
                    row.update(teccl_status=f"error: {e}")
                rows.append(row)
    return rows


def run_replan(trials: int = 20) -> dict:
    topo = load_topology("wan")
    ag = Collective.make("allgather", topo.num_ranks)
    base = LinkStats.from_topology(topo)
    out = {}
    for chunk_mb in (1, 64):
        size = chunk_mb * MB * topo.num_ranks
        replan(topo, base, ag, subchunks=8, size=size, verify=False)   # warm-up
        times = []
        for seed in range(trials):
            st = base.perturbed(seed)
            t0 = time.perf_counter()
            replan(topo, st, ag, subchunks=8, size=size, verify=False)
            times.append(time.perf_counter() - t0)
        times.sort()
        out[f"{chunk_mb}MB"] = {"trials": trials, "median_s": statistics.median(times),
                                "min_s": times[0], "p90_s": times[int(0.9 * (trials - 1))],
                                "max_s": times[-1]}
    return out


def run_robustness(km: float = 150, chunk_mb: float = 64, c: int = 4, seeds: int = 10,
                   spread: float = 0.3) -> dict:
    topo = load_topology(f"wan:km={km:g}")
    n = topo.num_ranks
    size = chunk_mb * MB * n
    ag = Collective.make("allgather", n)
    plan0 = synthesize("scale", topo, ag, size=size, subchunks=c)
    coll_c = Collective.make("allgather", n, c)
    sph0 = synthesize("sph", topo, coll_c)
    ring0 = synthesize("ring", topo, coll_c)
    base = LinkStats.from_topology(topo)
    rows = []
    for seed in range(seeds):
        st = base.perturbed(seed, spread, spread)
        pt = st.apply(topo)
        re = replan(topo, st, ag, subchunks=c, size=size, verify=False)
        rows.append({
            "seed": seed,
            "stale_plan_s": simulate(replace(plan0, topology=pt), size).time_s,
            "replanned_s": simulate(re, size).time_s,
            "sph_s": simulate(replace(sph0, topology=pt), size).time_s,
            "ring_s": simulate(replace(ring0, topology=pt), size).time_s,
            "bound_s": float(bound(pt, ag, size).best.time_s)})
    return {"km": km, "chunk_mb": chunk_mb, "subchunks": c, "spread": spread,
            "nominal_s": simulate(plan0, size).time_s, "rows": rows}


def _md(results: dict) -> str:
    L = ["# SCALE-CCL (`--algo scale`, issue 8) on `wan` — seed 000 §5", "",
         f"`python bench/scale_bench.py` on {results['machine']}. AllGather, 3 DCs x 8 GPUs "
         "(`wan`), GPU links 50 GB/s, GPU-router and WAN links 12.5 GB/s; `chunk` = bytes per GPU "
         "(size = 24 chunks). Times are the simulator's (`collsynth.sim`, planned-start "
         "priority). `sph`/`ring` get `chunks_per_rank = c`. `x bound` = time / "
         "`collsynth.bound` best. Synthesis times are wall seconds on this shared 2-core "
         "machine (scale: best of 2).", ""]
    L += ["## Completion and synthesis time", "",
          "| WAN delay | conn. | chunk | c | scale | x bound | sph | ring | scale vs sph | "
          "scale vs ring | scale synth s | sph synth s | ring synth s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["grid"]:
        L.append(f"| {r['wan_delay_us']:g}us | {r['connectivity']:g} | {r['chunk_mb']:g}MB | "
                 f"{r['subchunks']} | {fmt_time(r['scale_s'])} | "
                 f"{r['scale_s'] / r['bound_s']:.3f} | {fmt_time(r['sph_s'])} | "
                 f"{fmt_time(r['ring_s'])} | {r['sph_s'] / r['scale_s']:.2f}x faster | "
                 f"{r['ring_s'] / r['scale_s']:.2f}x faster | {r['scale_synth_s']:.3f} | "
                 f"{r['sph_synth_s']:.3f} | {r['ring_synth_s']:.3f} |")
    g = results["grid"]
    slower = [r for r in g if r["scale_s"] > min(r["sph_s"], r["ring_s"]) * (1 + 1e-9)]
    L += ["", f"Rows: {len(g)}. scale faster than both sph and ring in "
          f"{len(g) - len(slower)} of {len(g)}; x bound median "
          f"{statistics.median(r['scale_s'] / r['bound_s'] for r in g):.3f}, max "
          f"{max(r['scale_s'] / r['bound_s'] for r in g):.3f}; scale synthesis "
          f"{min(r['scale_synth_s'] for r in g):.3f}..{max(r['scale_synth_s'] for r in g):.3f} s "
          "(paper: 0.04..0.76 s).", ""]
    L += ["## Against the TE-CCL MILP (small instances, `time_limit` "
          f"{results['teccl_time_limit']:g} s)", "",
          "| topology | chunk | c | scale | teccl | status | scale / teccl | scale synth s | "
          "teccl synth s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results["teccl"]:
        if "teccl_s" in r:
            L.append(f"| {r['topology']} | {r['chunk_mb']}MB | {r['subchunks']} | "
                     f"{fmt_time(r['scale_s'])} | {fmt_time(r['teccl_s'])} | "
                     f"{r['teccl_status']} | {r['scale_s'] / r['teccl_s']:.3f} | "
                     f"{r['scale_synth_s']:.3f} | {r['teccl_synth_s']:.2f} |")
        else:
            L.append(f"| {r['topology']} | {r['chunk_mb']}MB | {r['subchunks']} | "
                     f"{fmt_time(r['scale_s'])} | — | {r['teccl_status']} | — | "
                     f"{r['scale_synth_s']:.3f} | — |")
    L += ["", "## Re-planning time (3 DCs x 8 GPUs, 8 subchunks; target <= 100 ms)", "",
          "| chunk | trials | median | p90 | min | max |", "|---|---|---|---|---|---|"]
    for k, v in results["replan"].items():
        L.append(f"| {k} | {v['trials']} | {v['median_s'] * 1e3:.1f} ms | "
                 f"{v['p90_s'] * 1e3:.1f} ms | {v['min_s'] * 1e3:.1f} ms | "
                 f"{v['max_s'] * 1e3:.1f} ms |")
    rb = results["robustness"]
    L += ["", f"## Robustness ({rb['km']:g} km, {rb['chunk_mb']:g} MB chunk, "
          f"{rb['subchunks']} subchunks; bandwidths and delays x U[{1 - rb['spread']:g}, "
          f"{1 + rb['spread']:g}], seeded)", "",
          f"Nominal plan under nominal statistics: {fmt_time(rb['nominal_s'])}.", "",
          "| seed | stale plan | re-planned | sph | ring | bound | stale / re-planned |",
          "|---|---|---|---|---|---|---|"]
    for r in rb["rows"]:
        L.append(f"| {r['seed']} | {fmt_time(r['stale_plan_s'])} | "
                 f"{fmt_time(r['replanned_s'])} | {fmt_time(r['sph_s'])} | "
                 f"{fmt_time(r['ring_s'])} | {fmt_time(r['bound_s'])} | "
                 f"{r['stale_plan_s'] / r['replanned_s']:.3f} |")
    L.append("")
    return "\n".join(L)


def _replan_only(out_dir: str) -> int:
    """Re-run the re-planning measurement and merge it into ``scale_ccl.json``/``.md`` (the
    other sections are kept as they are)."""
    path = os.path.join(out_dir, "scale_ccl.json")
    try:
        with open(path) as f:
            results = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"--replan-only needs an earlier full run's {path}: {e}", file=sys.stderr)
        return 1
    results["replan"] = run_replan()
    for k, v in results["replan"].items():
        print(f"replan {k}: median {v['median_s'] * 1e3:.1f} ms, p90 {v['p90_s'] * 1e3:.1f} ms")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out_dir, "scale_ccl.md"), "w") as f:
        f.write(_md(results))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small subset")
    ap.add_argument("--teccl-time-limit", type=float, default=5.0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("--replan-only", action="store_true",
                    help="only the re-planning measurement, merged into existing results")
    args = ap.parse_args(argv)
    t_all = time.perf_counter()
    if args.replan_only:
        return _replan_only(args.out)
    configs = []
    chunks = [1, 64] if args.quick else CHUNKS_MB
    for ch in chunks:                                   # §5.1 Table 1: 150 km, c = 1, 2, 4, 8
        for c in (1, 2, 4, 8):
            configs.append((150, ch, c, 0.5))
    for km in KM_ALL:                                    # §5.2 Fig. 9: delays, c = 1
        if km != 150:
            for ch in chunks:
                configs.append((km, ch, 1, 0.5))
    for ch in chunks:                                    # §5.3 Fig. 10: 100 km, c = 2, 4
        for c in (2, 4):
            configs.append((100, ch, c, 0.5))
    for conn in (0.7, 0.9):                              # connectivity variants
        configs.append((150, 64, 4, conn))
    grid = []
    for km, ch, c, conn in configs:
        r = run_config(km, ch, c, conn)
        grid.append(r)
        print(f"km={km} chunk={ch}MB c={c} conn={conn}: scale {fmt_time(r['scale_s'])} "
              f"({r['scale_synth_s']:.3f}s) sph {fmt_time(r['sph_s'])} ring "
              f"{fmt_time(r['ring_s'])} bound {fmt_time(r['bound_s'])}", flush=True)
    results = {"machine": f"{platform.machine()} ({os.cpu_count()} cores, shared), Python "
                          f"{platform.python_version()}",
               "grid": grid, "teccl_time_limit": args.teccl_time_limit,
               "teccl": run_teccl(args.teccl_time_limit),
               "replan": run_replan(), "robustness": run_robustness()}
    results["wall_s"] = time.perf_counter() - t_all
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "scale_ccl.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "scale_ccl.md"), "w") as f:
        f.write(_md(results))
    print(f"done in {results['wall_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
