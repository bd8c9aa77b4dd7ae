"""The testbed study's figures: its simulator models, the statistics over measured rows, and
their markdown (``testbed.md`` and the generated part of docs/testbed.md).

:func:`study` gathers the figures over every case (rank correlations, calibrated ratios on
bandwidth-bound rows, winners, Open MPI's own collective; :mod:`collsynth.bench.testbed`
describes the study); :func:`to_markdown` writes the results page, :func:`study_markdown` the
figures docs/testbed.md shows, which :func:`update_doc` rewrites between ``DOC_BEGIN`` and
``DOC_END``. ``ORDER`` and ``ALTERNATIVES`` are the simulator models every row is compared in.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from ..units import fmt_size

#: the simulator's link model for the comparison: what the testbed's links do (TCP connections
#: of different rank pairs share a link, each carries its messages in order; see
#: :func:`collsynth.testbed.measure.measure`); the study also gives the first-served figures
ORDER = "fair"
#: the secondary models every row is also simulated with: name -> (order, with the calibrated
#: cost per operation)
ALTERNATIVES = {"op_cost": (ORDER, True), "fcfs": ("fcfs", False)}


def study(rows: list[dict], cases: list[dict]) -> dict:
    """The study's figures over every case (see :mod:`collsynth.bench.testbed`)."""
    # rows still CPU-bound after the slower re-run test the CPU, not the simulator; rows whose
    # links still failed their rate test the emulation
    bw = [r for r in rows if r["bandwidth_bound"] and not r.get("cpu_bound")
          and r.get("link_faithful", True)]  # fmt: skip
    ratios = sorted(r["ratio_calibrated"] for r in bw)
    rhos_bw, agree, losses, vs_mpi = [], 0, [], []
    rhos_alt: dict[str, list[float]] = {name: [] for name in ALTERNATIVES}
    sizes = 0
    for c in cases:
        for s in c["per_size"]:
            sizes += 1
            mine = [r for r in bw if r["case"] == c["case"] and r["size_bytes"] == s["size_bytes"]]
            if s["spearman"] is not None and len(mine) >= 3:
                rhos_bw.append(s["spearman"])
                for name, got in rhos_alt.items():
                    if s.get(f"spearman_{name}") is not None:
                        got.append(s[f"spearman_{name}"])
            agree += s["simulated_winner"] == s["measured_winner"]
            losses.append(s["loss"])
            if s["best_vs_mpi"] is not None:
                vs_mpi.append(s["best_vs_mpi"])
    out = {
        "bandwidth_bound_rows": len(bw),
        "cpu_bound_rows": sum(bool(r.get("cpu_bound")) for r in rows),
        "remeasured_rows": sum("remeasured_from_scale" in r for r in rows),
        "rows_with_retransmits": sum(bool(r.get("tcp_retransmits")) for r in rows),
        "spearman_bandwidth_bound": _rhos(rhos_bw),
        "ratio_calibrated_bandwidth_bound": _ratios(ratios),
        "winner_agrees": agree,
        "sizes": sizes,
        "median_loss": statistics.median(losses) if losses else None,
        "max_loss": max(losses) if losses else None,
        "best_vs_mpi_median": statistics.median(vs_mpi) if vs_mpi else None,
        "link_fidelity": _fidelity(rows),
    }
    out["ratio_calibrated_plan_bandwidth_bound"] = _ratios(
        sorted(r["ratio_calibrated_plan"] for r in bw if "ratio_calibrated_plan" in r)
    )
    for name, got in rhos_alt.items():  # the secondary models (ALTERNATIVES)
        out[f"spearman_{name}_bandwidth_bound"] = _rhos(got)
        out[f"ratio_calibrated_{name}_bandwidth_bound"] = _ratios(
            sorted(r[f"ratio_calibrated_{name}"] for r in bw if f"ratio_calibrated_{name}" in r)
        )
    return out


def _fidelity(rows: list[dict]) -> dict:
    """The link fidelity check over the rows that were traced (:func:`collsynth.testbed.
    measure.link_fidelity`): how many rows, how many of their timed iterations were judged,
    how many of those left the median (a transfer alone on its links under the floor, or, where
    the trace has the executor's due times, a send posted late: :func:`collsynth.testbed.
    measure.post_delay`), how many rows were measured again for it, and how many stayed
    unfaithful."""
    traced = [r for r in rows if r.get("link_fidelity")]
    judged = sum(r["link_fidelity"]["judged_iterations"] for r in traced)
    total = sum(r["link_fidelity"]["iterations"] for r in traced)
    good = sum(r["link_fidelity"]["faithful_iterations"] for r in traced)
    return {
        "rows": len(traced),
        "iterations": total,
        "judged_iterations": judged,
        "left_out": sum(
            len(r["raw"].get("times_all_s", r["raw"]["times_s"])) - len(r["raw"]["times_s"])
            for r in traced
        ),  # fmt: skip
        "unfaithful_iterations": total - good,
        "posting_judged_rows": sum("late_iterations" in r["link_fidelity"] for r in traced),
        "late_iterations": sum(r["link_fidelity"].get("late_iterations", 0) for r in traced),
        "remeasured_rows": sum("fidelity" in r.get("remeasured_because", "") for r in rows),
        "unfaithful_rows": sum(not r.get("link_faithful", True) for r in rows),
    }


def _rhos(rhos: list[float]) -> dict:
    """Rank correlations in figures: median, minimum, how many of how many reach 0.8."""
    return {
        "median": statistics.median(rhos) if rhos else None,
        "min": min(rhos) if rhos else None,
        "at_least_0.8": sum(x >= 0.8 for x in rhos),
        "of": len(rhos),
    }


def _ratios(ratios: list[float]) -> dict:
    """Sorted ratios in figures: range, median, how many of how many lie in 0.7-1.3."""
    return {
        "min": ratios[0] if ratios else None,
        "median": statistics.median(ratios) if ratios else None,
        "max": ratios[-1] if ratios else None,
        "within_0.7_1.3": sum(0.7 <= x <= 1.3 for x in ratios),
        "within_0.9_1.1": sum(0.9 <= x <= 1.1 for x in ratios),
        "of": len(ratios),
    }


#: the study's figures in docs/testbed.md sit between these lines (rewritten by every run)
DOC_BEGIN = "<!-- bench testbed: study figures (generated; do not edit by hand) -->"
DOC_END = "<!-- bench testbed: end of generated figures -->"


def doc_path(out_dir: str) -> str:
    """docs/testbed.md of the checkout whose ``bench/results`` is ``out_dir``."""
    return os.path.normpath(os.path.join(out_dir, os.pardir, os.pardir, "docs", "testbed.md"))


def update_doc(path: str, data: dict) -> bool:
    """Rewrite the generated figures of ``path`` (between ``DOC_BEGIN`` and ``DOC_END``) from
    ``data``; False (nothing written) where the file or its markers are missing."""
    from ..atomic import write_text_atomic

    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return False
    a, b = text.find(DOC_BEGIN), text.find(DOC_END)
    if a < 0 or b < a:
        return False
    new = text[: a + len(DOC_BEGIN)] + "\n" + study_markdown(data) + text[b:]
    if new != text:
        write_text_atomic(path, new)
    return True


def study_markdown(data: dict) -> str:
    """The study's figures as docs/testbed.md shows them."""
    from ..testbed.measure import MESSAGES_PER_RANK

    st, h = data["study"], data["header"]
    sp, ra = st["spearman_bandwidth_bound"], st["ratio_calibrated_bandwidth_bound"]
    cal = h["calibration"]
    done = [c["case"] for c in data["cases"] if not c.get("failed")]
    failed = [c for c in data["cases"] if c.get("failed")]
    steps = [(c["case"], f) for c in data["cases"] for f in c.get("failed_steps", [])]
    asked = sorted({r.get("requested_size_bytes", r["size_bytes"]) for r in data["rows"]})
    out = [
        f"Cases measured: {', '.join(done)} (sizes {', '.join(fmt_size(x) for x in asked)}, "
        "each rounded per case to a size every schedule can split; "
        f"{_iterations_text(h, data['rows'])}), every applicable algorithm, "
        f"`--check` on every row. Calibration: one link carries {_efficiency_text(data)} of its "
        f"set rate; {_op_cost_text(cal)}"
        if asked
        else "No case was measured.",
        "",
        f"- **Rank correlation** (Spearman, simulated against measured time, per case and size "
        f"with at least three bandwidth-bound schedules): median {_figure(sp['median'])}, minimum "
        f"{_figure(sp['min'])}; {sp['at_least_0.8']} of {sp['of']} at least 0.8. "
        f"{_op_cost_rho_text(st)}",
        f"- **Calibrated measured/simulated ratio** (realized model) on the {ra['of']} "
        f"bandwidth-bound rows: median {_figure(ra['median'])}, range {_figure(ra['min'])}-"
        f"{_figure(ra['max'])}; {ra['within_0.7_1.3']} of {ra['of']} within 0.7-1.3, "
        f"{ra.get('within_0.9_1.1', '-')} within 0.9-1.1.",
        _plan_ratio_text(st),
        f"- **CPU headroom**: {st.get('remeasured_rows', 0)} rows had less than they need (3x, "
        f"or 3x per {MESSAGES_PER_RANK} messages the busiest rank sends where that is more) and "
        f"were measured again at a lower scale; {st.get('cpu_bound_rows', 0)} still had too "
        "little at the lowest scale and are left out of the two figures above.",
        _fidelity_text(st),
        f"- **Winners**: the simulator's pick was the measured best in {st['winner_agrees']} of "
        f"{st['sizes']} (case, size); trusting it lost {100 * (st['median_loss'] or 0):.0f}% at "
        f"the median and {100 * (st['max_loss'] or 0):.0f}% at most.",
        f"- **Against Open MPI's own collective** on the same network, the best schedule was "
        f"{_figure(st['best_vs_mpi_median'])}x faster at the median.",
    ]
    for case, eff, med in calibration_outliers(data):
        out.append(
            f"- **Calibration far from the others** {case}: one link carried {100 * eff:.1f}% "
            f"of its set rate in this case's run, against {100 * med:.1f}% at the median over "
            "the cases; other work on the machine is the usual cause, and it moves every row "
            "of the case: measure the case again on a quiet machine."
        )
    for c in failed:
        out.append(f"- **Failed case** {c['case']}: {c['failed']}")
    for case, f in steps:
        out.append(f"- **Failed step** {case}, {f['what']} at {fmt_size(f['size_bytes'])}: "
                   f"{f['error']}")  # fmt: skip
    return "\n".join(out) + "\n"


def _fidelity_text(st: dict) -> str:
    """The bullet on the link fidelity check."""
    from ..testbed.measure import FIDELITY_MIN, POST_LATE_MIN_S, POST_LATE_SHARE

    f = st.get("link_fidelity") or {}
    if not f.get("rows"):
        return "- **Link fidelity**: no row was traced (measured before the check existed)."
    posting = ""
    if f.get("posting_judged_rows"):
        posting = (
            f" In {f['posting_judged_rows']} rows the trace also has when each send was due "
            f"(its data ready, its emulated latency over): an iteration with a send posted more "
            f"than {POST_LATE_SHARE:.0%} of the row's expected time (at least "
            f"{POST_LATE_MIN_S * 1e3:g} ms raw) after it was due waited for its rank's CPU and "
            f"fails as well ({f['late_iterations']} iterations)."
        )
    return (
        f"- **Link fidelity** (every timed iteration traced; an iteration in which a transfer "
        f"alone on its links got under {FIDELITY_MIN:.0%} of their rate measured the emulation, "
        f"not the schedule): {f['rows']} rows traced, {f['judged_iterations']} of their "
        f"{f['iterations']} iterations had such a transfer to judge, {f['unfaithful_iterations']} "
        f"failed and {f['left_out']} of those left their row's median; {f['remeasured_rows']} "
        f"rows were measured again at a lower scale for it, {f['unfaithful_rows']} still had "
        "fewer than half of their iterations faithful and are left out of the ratios above, as "
        "rows still CPU-bound are. Rows merged from runs before the check have no trace." + posting
    )


def _iterations_text(h: dict, rows: list[dict]) -> str:
    """How many timed iterations (and launches) each row's median is over."""
    launches = h.get("launches", 1)
    if launches > 1:
        older = sum(r.get("launches", 1) < launches for r in rows)
        more = f"; {older} rows merged from earlier runs: one launch" if older else ""
        return (f"{launches} launches of {h['iters']} timed iterations each after a warm-up, "
                f"the median over all of them{more}")  # fmt: skip
    return f"{h['iters']} timed iterations each after a warm-up"


#: a case whose calibrated efficiency is this far (absolute) from the median over the cases'
#: own calibrations is flagged: a run that overlapped numba's background build read 0.82
#: against 0.95 and moved every row of its case to about 0.87 (docs/testbed.md)
CALIBRATION_SPREAD = 0.04


def calibration_outliers(data: dict) -> list[tuple[str, float, float]]:
    """``(case, its efficiency, the median over the cases)`` for every case whose own
    calibration is more than :data:`CALIBRATION_SPREAD` from the median over the cases with
    one (three or more of them: fewer give no median to trust)."""
    own = [(c["case"], c["calibration"]["efficiency"]) for c in data["cases"]
           if c.get("calibration") and not c.get("failed")]  # fmt: skip
    if len(own) < 3:
        return []
    med = statistics.median(e for _, e in own)
    return [(case, e, med) for case, e in own if abs(e - med) > CALIBRATION_SPREAD]


def _efficiency_text(data: dict) -> str:
    """The calibrated efficiency in words: one figure, or the range over the cases' runs."""
    latest = data["header"]["calibration"]
    effs = sorted({(c.get("calibration") or latest)["efficiency"] for c in data["cases"]})
    effs = effs or [latest["efficiency"]]
    if len(effs) == 1 or effs[-1] - effs[0] < 5e-4:
        return f"{100 * effs[0]:.1f}%"
    return f"{100 * effs[0]:.1f}-{100 * effs[-1]:.1f}% (each case's own run)"


def _plan_ratio_text(st: dict) -> str:
    """The bullet on measured over the planned order's time."""
    rp = st.get("ratio_calibrated_plan_bandwidth_bound")
    if not rp or not rp.get("of"):
        return "- **Over the planned order**: no row has a planned-order figure."
    return (
        f"- **Calibrated measured/planned ratio** (the planned order, one transfer at a time per "
        f"link with the plan's priorities, which no executor enforces) on the same rows: median "
        f"{_figure(rp['median'])}, range {_figure(rp['min'])}-{_figure(rp['max'])}; "
        f"{rp.get('within_0.9_1.1', '-')} of {rp['of']} within 0.9-1.1."
    )


def _op_cost_text(cal: dict) -> str:
    """The per-operation calibration in a sentence."""
    oc = cal.get("op_cost")
    if not oc:
        return "no cost per operation was calibrated."
    return (
        f"issuing one operation costs a rank {1e3 * oc['op_cost_raw_s']:.3f} ms (raw; "
        f"{oc['ops']} small messages at once on `{oc['topology']}` took "
        f"{1e3 * oc['measured_raw_s']:.1f} ms, the pure alpha-beta model says "
        f"{1e3 * oc['simulated_alpha_beta_raw_s']:.1f} ms), scaled by the case's ranks / "
        f"{oc['ranks']} (the ranks share the cores)."
    )


#: the secondary models as the study's text names them
ALTERNATIVE_TEXT = {
    "op_cost": "with the calibrated cost per operation",
    "fcfs": "first-served (one transfer at a time per link)",
}


def _op_cost_rho_text(st: dict) -> str:
    """The rank correlations and ratios of the secondary models, for comparison."""
    out = []
    for name, text in ALTERNATIVE_TEXT.items():
        rho = st.get(f"spearman_{name}_bandwidth_bound")
        ra = st.get(f"ratio_calibrated_{name}_bandwidth_bound")
        if not rho or not rho["of"]:
            continue
        more = ""
        if ra and ra["of"]:
            more = f", ratio within 0.7-1.3 on {ra['within_0.7_1.3']} of {ra['of']} rows"
        out.append(
            f"Simulated {text} instead: median {_figure(rho['median'])}, "
            f"minimum {_figure(rho['min'])}; "
            f"{rho['at_least_0.8']} of {rho['of']} at least 0.8{more}."
        )
    return " ".join(out)


def _figure(x: Any, fmt: str = ".2f") -> str:
    """``x`` in ``fmt``; ``-`` where there is none."""
    return "-" if x is None else format(x, fmt)


def _headroom_cell(r: dict) -> str:
    """A row's CPU headroom as its table shows it (``*`` measured again at a lower scale,
    ``!`` still under its required headroom)."""
    if "headroom" not in r:
        return "-"
    mark = "!" if r.get("cpu_bound") else "\\*" if "remeasured_from_scale" in r else ""
    return f"{r['headroom']:.1f}x{mark}"


def to_markdown(data: dict) -> str:
    """The results page, ``testbed.md``: the summary, then every case's tables."""
    h, st = data["header"], data["study"]
    cal = h["calibration"]
    sp, ra = st["spearman_bandwidth_bound"], st["ratio_calibrated_bandwidth_bound"]
    out = [
        "# Testbed study: simulated against measured",
        "",
        f"{h['machine']}, Python {h['python']}, {_iterations_text(h, data['rows'])} per row "
        "(raw min..max in the JSON). Regenerate: `collsynth bench testbed -o "
        "bench/results` (root, mpiexec). Times are in the topology's own units (measured "
        "raw time x scale).",
        "",
        f"Calibration (one link, {fmt_size(cal['size_bytes'])}, the latest run): ideal "
        f"{cal['ideal_raw_s']:.3f} s, measured {cal['measured_raw_s']:.3f} s: efficiency "
        f"**{cal['efficiency']:.3f}**; `cal` = measured/simulated x the efficiency of the run "
        "that measured the row (each case's heading gives it).",
        "",
        "## Summary",
        "",
        f"- bandwidth-bound rows: {st['bandwidth_bound_rows']} (rows measured again at a lower "
        f"scale for CPU headroom: {st.get('remeasured_rows', 0)}; still CPU-bound, left out: "
        f"{st.get('cpu_bound_rows', 0)}; rows whose launch saw TCP retransmissions: "
        f"{st.get('rows_with_retransmits', 0)})",
        f"- Spearman (bandwidth-bound, per case and size): "
        f"median {_figure(sp['median'])}, min {_figure(sp['min'])}, "
        f"{sp['at_least_0.8']} of {sp['of']} "
        f"at least 0.8. {_op_cost_rho_text(st)}",
        f"- cost per operation: {_op_cost_text(cal)}",
        f"- calibrated measured/simulated (bandwidth-bound): min {_figure(ra['min'])}, median "
        f"{_figure(ra['median'])}, max {_figure(ra['max'])}; "
        f"{ra['within_0.7_1.3']} of {ra['of']} within "
        "0.7-1.3",
        f"- simulator's winner = measured winner: {st['winner_agrees']} of {st['sizes']} "
        f"(case, size); trusting the simulator lost {100 * (st['median_loss'] or 0):.0f}% at the "
        f"median, {100 * (st['max_loss'] or 0):.0f}% at most",
        f"- best measured schedule against Open MPI's own collective: "
        f"{_figure(st['best_vs_mpi_median'])}x faster at the median",
        "",
    ]
    for c in data["cases"]:
        pic = [] if c.get("failed") else [f"![{c['case']}]({c['picture']})", ""]
        eff = (c.get("calibration") or cal)["efficiency"]
        out += [f"## {c['case']} (scale {c['scale']:.3g}, efficiency {eff:.3f})", "", *pic,
                "| size | Spearman | Spearman, op cost | Spearman, first-served "
                "| simulator's pick | measured best | loss | best vs MPI |",
                "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for s in c["per_size"]:
            out.append(
                f"| {fmt_size(s['size_bytes'])} | {_figure(s['spearman'])} "
                f"| {_figure(s.get('spearman_op_cost'))} | {_figure(s.get('spearman_fcfs'))} "
                f"| {s['simulated_winner']} "
                f"| {s['measured_winner']} | {100 * s['loss']:.0f}% "
                f"| {_figure(s['best_vs_mpi'])}x |"
            )
        out += ["", "| algo | size | simulated | with op cost | first-served | measured | ratio "
                "| cal | bw-bound | headroom | check | off-route ops | TCP resent |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        mine = [r for r in data["rows"] if r["case"] == c["case"]]
        for r in sorted(mine, key=lambda r: (r["size_bytes"], r["measured_time_s"])):
            out.append(
                f"| {r['algo']} | {fmt_size(r['size_bytes'])} | {r['simulated_time_s']:.3g} "
                f"| {_figure(r.get('simulated_op_cost_s'), '.3g')} "
                f"| {_figure(r.get('simulated_fcfs_s'), '.3g')} | {r['measured_time_s']:.3g} "
                f"| {r['ratio']:.2f} | {r['ratio_calibrated']:.2f} "
                f"| {'yes' if r['bandwidth_bound'] else 'no'} | {_headroom_cell(r)} "
                f"| {r['check'] or '-'} "
                f"| {r.get('route_mismatch_ops', '-')} | {r.get('tcp_retransmits', '-')} |"
            )
        for m in data["mpi"]:
            if m["case"] == c["case"]:
                out.append(
                    f"| Open MPI's own | {fmt_size(m['size_bytes'])} | - | - | - "
                    f"| {m['measured_time_s']:.3g} | - | - | - | - | - | - | "
                    f"{m.get('tcp_retransmits', '-')} |"
                )
        if c.get("failed"):
            out += ["", f"**This case failed:** {c['failed']}"]
        for f in c.get("failed_steps", []):
            out += ["", f"**{f['what']} at {fmt_size(f['size_bytes'])} failed:** {f['error']}"]
        if c["ceiling"]:
            out += ["", f"CPU ceiling: least headroom {c['ceiling']['headroom']:.1f}x "
                    f"({c['ceiling']['algo']} at {fmt_size(c['ceiling']['size_bytes'])}); "
                    "`*` measured again at a lower scale, `!` still under its required "
                    "headroom."]  # fmt: skip
        for sk in c["skipped"]:
            out.append(f"\nskipped {sk['algo']}: {sk['reason']}")
        out.append("")
    return "\n".join(out) + "\n"
