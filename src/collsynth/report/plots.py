"""Pictures: algbw against size (like the papers' figures) and per-link Gantt timelines."""

from __future__ import annotations

import os

import numpy as np

from ..atomic import check_writable
from ..errors import CollsynthError
from ..units import fmt_size


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> None:
    """Render to memory, then write the file atomically (never half a picture)."""
    from ..atomic import write_bytes_atomic

    data = _render(fig, _format(path), path)
    write_bytes_atomic(path, data)


def _format(path: str) -> str:
    return os.path.splitext(path)[1].lstrip(".").lower() or "png"


def _render(fig, fmt: str, path: str) -> bytes:
    """The picture's bytes; matplotlib's warnings (e.g. the PostScript backend's note on
    transparency) are kept off stderr, and a format that cannot be rendered (pgf without
    LaTeX) is one line."""
    import io
    import logging
    import warnings

    buf = io.BytesIO()
    log = logging.getLogger("matplotlib")
    level, propagate = log.level, log.propagate
    log.setLevel(logging.ERROR)
    log.propagate = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig.savefig(buf, dpi=130, bbox_inches="tight", format=fmt)
    except (OSError, ValueError, RuntimeError) as e:
        raise CollsynthError(f"cannot write plot {path}: {' '.join(str(e).split())}") from None
    finally:
        log.setLevel(level)
        log.propagate = propagate
    return buf.getvalue()


def check_plot_path(path: str, what: str = "plot") -> None:
    """Refuse a picture path that cannot be written, before any computation: an unknown
    format, a format this machine cannot render (a small test picture is drawn: pgf needs
    LaTeX), or a path :func:`collsynth.atomic.check_writable` refuses."""
    if not path:
        raise CollsynthError(f"{what} needs a file name")
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1, 1))
    try:
        supported = fig.canvas.get_supported_filetypes()
        if fmt not in supported:
            raise CollsynthError(
                f"cannot write plot {path}: unknown picture format {fmt!r} "
                f"(use one of {', '.join(sorted(supported))})"
            )
        check_writable(path, what)
        ax.plot([1, 2], [1, 2], label="1 GB/s", alpha=0.5)
        ax.set_xlabel("size")
        ax.legend()
        try:
            _render(fig, fmt, path)
        except CollsynthError as e:
            raise CollsynthError(f"{e} (the {fmt} format cannot be drawn here)") from None
    finally:
        plt.close(fig)


def plot_algbw(comparison, path: str, baseline=None, log_y: bool = False) -> None:
    """algbw (GB/s) against size on a log axis, one line per algorithm, the bound dashed, and
    with ``baseline`` (an nccl-tests log) its measured algbw as a thick grey line; ``log_y``
    puts algbw on a log axis too (small sizes stay readable)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    algos = list(dict.fromkeys(r.algo for r in comparison.rows))
    markers = "os^vD<>ph*x+"
    for i, algo in enumerate(algos):
        rows = sorted((r for r in comparison.rows if r.algo == algo), key=lambda r: r.size_bytes)
        ax.plot(
            [r.size_bytes for r in rows],
            [r.algbw_Bps / 1e9 for r in rows],
            marker=markers[i % len(markers)],
            label=algo,
        )
    bound_rows = {r.size_bytes: r for r in comparison.rows}
    if bound_rows:
        xs = sorted(bound_rows)
        ax.plot(
            xs,
            [x / bound_rows[x].bound_time_s / 1e9 for x in xs],
            "k--",
            linewidth=1.2,
            label="bound: no schedule is faster",
        )
    if baseline is not None:
        from .nccl_tests import measured_at

        got = sorted(measured_at(baseline).items())
        ax.plot(
            [s for s, _ in got],
            [t.algbw_Bps / 1e9 for _, t in got],
            color="0.45",
            linewidth=3,
            alpha=0.7,
            marker="X",
            label=f"nccl-tests, measured ({os.path.basename(baseline.path)})",
            zorder=1,
        )
    ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("data size")
    ax.set_ylabel("algorithm bandwidth (GB/s)")
    ax.set_title(f"{comparison.collective} on {comparison.topology}")
    sizes = sorted({r.size_bytes for r in comparison.rows})
    if sizes:
        ax.set_xticks(sizes)
        # powers of two read best in binary units (1KiB, not 1.024KB); many ticks lean over
        binary = all(s >= 1 and float(s).is_integer() and int(s) & (int(s) - 1) == 0
                     for s in sizes)  # fmt: skip
        lean = len(sizes) > 6
        ax.set_xticklabels(
            [fmt_size(s, binary=binary) for s in sizes],
            rotation=40 if lean else 0,
            ha="right" if lean else "center",
        )
        ax.minorticks_off()
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    _save(fig, path)
    plt.close(fig)


def plot_gantt(sim, path: str, max_links: int = 48) -> None:
    """Per-link timeline: one row per busy link (the busiest ``max_links``), a bar per hop."""
    plt = _pyplot()
    t = sim.schedule.topology
    busy = sim.link_busy_s
    used = np.flatnonzero(busy > 0)
    used = used[np.argsort(-busy[used], kind="stable")][:max_links]
    used = np.sort(used)
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.28 * len(used) + 1.5)))
    sel = np.isin(sim.hop_link, used)
    hops = np.flatnonzero(sel)
    if len(hops) > 20000:  # keep the picture drawable: sample evenly
        hops = hops[np.linspace(0, len(hops) - 1, 20000).astype(np.int64)]
    hop_row = np.searchsorted(used, sim.hop_link[hops])
    cmap = plt.get_cmap("tab20")
    # colour = the rank whose slice a chunk belongs to (chunk // chunks per rank; AllToAll:
    # its source), so a legend can name it; more than 20 ranks share colours modulo 20
    coll = sim.schedule.collective
    per = max(1, coll.chunks_per_rank) * (coll.num_ranks if coll.kind.value == "alltoall" else 1)
    home = np.asarray(sim.schedule.chunk, dtype=np.int64) // per
    scale = 1e6  # microseconds
    for row in range(len(used)):
        mine = hops[hop_row == row]
        if not len(mine):
            continue
        starts = sim.hop_start_s[mine] * scale
        widths = (sim.hop_end_s[mine] - sim.hop_start_s[mine]) * scale
        colors = [cmap(int(h) % 20) for h in home[sim.hop_op[mine]]]
        ax.broken_barh(
            list(zip(starts, widths)), (row - 0.4, 0.8), facecolors=colors, edgecolor="none"
        )
    ax.set_yticks(range(len(used)))
    ax.set_yticklabels(
        [f"{t.nodes[t.links[l].src].name}->{t.nodes[t.links[l].dst].name}" for l in used],
        fontsize=7,
    )
    ax.invert_yaxis()
    ax.set_xlabel("time (us)")
    algo = sim.schedule.meta.get("algorithm", "schedule")
    ax.set_title(
        f"{algo}: {sim.schedule.collective.describe()} on {t.name}, "
        f"{fmt_size(sim.size)} in {sim.time_s * scale:.4g} us"
    )
    ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    shown = sorted({int(h) % 20 for h in home[sim.hop_op[hops]]}) if len(hops) else []
    wrap = coll.num_ranks > 20
    ax.legend(
        handles=[
            Patch(color=cmap(c), label=f"rank {c}" + (" (mod 20)" if wrap else "")) for c in shown
        ],  # fmt: skip
        title="data of",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=7,
        title_fontsize=8,
    )
    _save(fig, path)
    plt.close(fig)


def plot_testbed(measured: dict, path: str) -> None:
    """A testbed measurement (``collsynth testbed compare --json``'s document): left, algbw
    against size, measured (solid) and simulated (dashed) per algorithm, Open MPI's own
    dotted; right, measured against simulated time per case, with the line where they agree."""
    plt = _pyplot()
    fig, (ax, sc) = plt.subplots(1, 2, figsize=(13, 5))
    rows = measured["rows"]
    algos = list(dict.fromkeys(r["algo"] for r in rows))
    cmap = plt.get_cmap("tab10")
    for i, algo in enumerate(algos):
        mine = sorted((r for r in rows if r["algo"] == algo), key=lambda r: r["size_bytes"])
        xs = [r["size_bytes"] for r in mine]
        color = cmap(i % 10)
        ax.plot(xs, [r["measured_algbw_Bps"] / 1e9 for r in mine], "o-", color=color, label=algo)
        ax.plot(xs, [r["simulated_algbw_Bps"] / 1e9 for r in mine], "--", color=color)
        sc.scatter(
            [r["simulated_time_s"] for r in mine],
            [r["measured_time_s"] for r in mine],
            color=color,
            label=algo,
        )
    mpi = sorted(measured.get("mpi", []), key=lambda r: r["size_bytes"])
    if mpi:
        ax.plot(
            [r["size_bytes"] for r in mpi],
            [r["measured_algbw_Bps"] / 1e9 for r in mpi],
            "k:",
            marker="x",
            label="Open MPI's own",
        )
    ax.set_xscale("log")
    ax.set_xlabel("data size")
    ax.set_ylabel("algbw (GB/s, topology units)")
    ax.set_title(f"{measured['collective']} on {measured['topology']}: measured (solid) vs "
                 "simulated (dashed)", fontsize=9)  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    times = [r[k] for r in rows for k in ("simulated_time_s", "measured_time_s")]
    if times:
        lo, hi = min(times) / 1.5, max(times) * 1.5
        sc.plot([lo, hi], [lo, hi], "k-", linewidth=0.8, label="measured = simulated")
        sc.set_xlim(lo, hi)
        sc.set_ylim(lo, hi)
    sc.set_xscale("log")
    sc.set_yscale("log")
    sc.set_xlabel("simulated time (s)")
    sc.set_ylabel("measured time (s, topology units)")
    sc.set_title(f"testbed at scale {measured['scale']:.3g}", fontsize=9)
    sc.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
