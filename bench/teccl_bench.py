"""TE-CCL (``--algo teccl``) benchmark: ``python bench/teccl_bench.py [--time-limit S]``.

For each topology/collective/size: synthesize with HiGHS under a time limit, verify, simulate,
and compare with the lower bound of ``collsynth.bound`` (ForestColl's exact cut bound and the
ingress/egress/latency bounds) and with the ``spt`` heuristic the solver starts from. Writes
``bench/results/teccl.json`` and ``bench/results/teccl.md``.

Setup (see docs/teccl.md): epoch ``fast`` on DGX-1 and MI250, ``slow`` on the multi-chassis
systems (as TE-CCL's own runs), and ``alpha_ratio_max=4`` — the epoch is at least a quarter of
the smallest alpha — so that small sizes stay at tens of epochs instead of TE-CCL's hundreds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from collsynth.bound import bound  # noqa: E402
from collsynth.collective import Collective  # noqa: E402
from collsynth.sim import simulate  # noqa: E402
from collsynth.synth import synthesize  # noqa: E402
from collsynth.synth.teccl import sample_alphas  # noqa: E402
from collsynth.topology import load_topology  # noqa: E402
from collsynth.units import fmt_size, fmt_time, parse_size  # noqa: E402
from collsynth.verify import ensure_verified  # noqa: E402

CASES = [
    # label, topology spec, collective, epoch
    ("DGX-1", "dgx1", "allgather", "fast"),
    ("NDv2 2ch", "ndv2:chassis=2", "allgather", "slow"),
    ("NDv2 2ch", "ndv2:chassis=2", "alltoall", "slow"),
    ("NDv2 4ch", "ndv2:chassis=4", "allgather", "slow"),
    ("NDv2 4ch", "ndv2:chassis=4", "alltoall", "slow"),
    ("DGX-2 2ch", "dgx2:chassis=2", "allgather", "slow"),
    ("MI250 1ch", "mi250", "allgather", "fast"),
]


def run_one(label, topo, kind, size, epoch, time_limit, extra=None, chunks=1, multiplier=1.0):
    coll = Collective.make(kind, topo.num_ranks, chunks)
    t0 = time.perf_counter()
    sched = synthesize("teccl", topo, coll, size=size, epoch=epoch, time_limit=time_limit,
                       gap=1e-4, alpha_ratio_max=4, epoch_multiplier=multiplier)
    synth_s = time.perf_counter() - t0
    ensure_verified(sched)
    sim = simulate(sched, size).time_s
    b = bound(topo, coll, size)
    m = sched.meta["teccl"]
    heur_sim = m.get("heuristic", {}).get("sim_time_s")
    if heur_sim is None:  # the LP path records only the heuristic's epochs
        heur_sim = simulate(synthesize("spt", topo, coll), size).time_s
    last = m["horizons"][-1] if m["horizons"] else {}
    row = {
        "system": label, "topology": topo.name, "collective": kind, "size_bytes": size,
        "size": fmt_size(size), "epoch": epoch, "mode": m["mode"], "status": m["status"],
        "gap": m["gap"], "makespan_gap": m["makespan_gap"],
        "epochs_required": m["epochs_required"], "lower_bound_epochs": m["lower_bound_epochs"],
        "tau_s": m["tau_s"], "estimate_s": m["estimate_s"], "plan_s": m["plan_s"],
        "sim_s": sim, "bound_s": b.time_s, "bound_kind": b.kind,
        "ratio_to_bound": sim / b.time_s, "spt_sim_s": heur_sim,
        "spt_ratio_to_bound": heur_sim / b.time_s, "algbw_GBps": size / sim / 1e9,
        "solver_time_s": m["solver_time_s"], "synth_wall_s": synth_s,
        "columns": last.get("columns"), "rows": last.get("rows"), "ops": sched.num_ops,
        "rounding_up_s": m["rounding_up_s"], "rounding_down_s": m["rounding_down_s"],
        # the documented agreement: estimate - tau - rounding_up <= sim <= estimate + down
        "sim_agrees": bool(m["estimate_s"] - m["tau_s"] - m["rounding_up_s"]
                           <= sim * (1 + 1e-9)
                           and sim <= (m["estimate_s"] + m["rounding_down_s"]) * (1 + 1e-9)),
        "verified": True, **(extra or {}),
    }
    print(f"{label:10s} {kind:9s} {fmt_size(size):>6s} {m['status']:22s} "
          f"K={m['epochs_required']:4d} "
          f"sim={fmt_time(sim):>9s} x bound={row['ratio_to_bound']:.3g} "
          f"(spt {row['spt_ratio_to_bound']:.3g}) solver {m['solver_time_s']:.1f}s", flush=True)
    return row


def write_md(rows, path, args):
    lines = [
        "# TE-CCL epoch MILP / LP on HiGHS (`--algo teccl`)",
        "",
        f"`python bench/teccl_bench.py --time-limit {args.time_limit:g}` on "
        f"{platform.machine()} ({os.cpu_count()} cores, shared), HiGHS 1 thread, "
        f"`alpha_ratio_max=4`, gap 1e-4. Times are the simulator's (`collsynth.sim`); "
        f"`x bound` is sim time / `collsynth.bound` (exact cut + ingress/egress/latency); "
        f"`spt x bound` is the simulated `spt` schedule (the warm start is the better of it "
        f"placed into epochs and rarest-first flooding). `agree`: estimate - tau - "
        f"rounding_up <= sim <= estimate + rounding_down (docs/teccl.md). Status `time_limit` = "
        f"improved or kept the warm start, gap open; `*_heuristic` = the solver returned "
        f"nothing better than the heuristic in time; `skipped_heuristic` = model over "
        f"`max_nonzeros` for the time limit, not solved.",
        "",
        "| system | collective | size | epoch | mode | status | gap | K | K lb | tau | estimate "
        "| sim | agree | algbw GB/s | x bound | spt x bound | solver s | columns |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['system']}{' ' + r['note'] if r.get('note') else ''} | {r['collective']} "
            f"| {r['size']} | {r['epoch']} | {r['mode']} | {r['status']} | {r['gap']:.3g} "
            f"| {r['epochs_required']} | {r['lower_bound_epochs']} | {fmt_time(r['tau_s'])} "
            f"| {fmt_time(r['estimate_s'])} | {fmt_time(r['sim_s'])} "
            f"| {'yes' if r['sim_agrees'] else 'NO'} | {r['algbw_GBps']:.4g} "
            f"| {r['ratio_to_bound']:.3g} | {r['spt_ratio_to_bound']:.3g} "
            f"| {r['solver_time_s']:.1f} | {r['columns']} |")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds per solve")
    ap.add_argument("--sizes", default="1KB,1MB,1GB")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--only", help="run only systems whose label contains this")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = []
    t0 = time.perf_counter()
    for label, spec, kind, epoch in CASES:
        if args.only and args.only.lower() not in label.lower():
            continue
        topo = load_topology(spec)
        for size in sizes:
            rows.append(run_one(label, topo, kind, size, epoch, args.time_limit))
    if not args.only or "grain" in args.only.lower():
        # epoch granularity: finer epochs (alpha rounding) and more chunks per GPU
        topo = load_topology("dgx1")
        for size, mult, chunks in ((1e6, 0.25, 1), (1e9, 1.0, 4)):
            rows.append(run_one("DGX-1", topo, "allgather", size, "fast", args.time_limit,
                                {"note": f"(epoch x{mult:g}, {chunks} chunks/GPU)"},
                                chunks=chunks, multiplier=mult))
    if not args.only or "alpha" in args.only.lower():
        # heterogeneous alpha (seed 004's study): DGX-1 with per-link alphas in [0.3, 3] us
        for seed in (1, 2, 3):
            topo = sample_alphas(load_topology("dgx1"), seed=seed, low=0.3e-6, high=3e-6)
            rows.append(run_one("DGX-1", topo, "allgather", 1e6, "fast", args.time_limit,
                                {"note": f"(random alpha, seed {seed})"}))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "teccl.json"), "w", encoding="utf-8") as fh:
        json.dump({"time_limit_s": args.time_limit, "wall_s": time.perf_counter() - t0,
                   "rows": rows}, fh, indent=1)
    write_md(rows, os.path.join(args.out, "teccl.md"), args)
    print(f"wrote {args.out}/teccl.json and teccl.md in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
