"""PNG plots of simulation results (``kant simulate``, ``kant compare``, ``kant compare
--seeds``) and of packing curves (``kant packing --plot``).

matplotlib (the ``cli`` extra: ``pip install 'kant[cli]'``) is imported only here and only
when a plot is drawn, with the non-interactive Agg backend, so importing this module does not
import it. Without it the ``write_*_plots`` functions write nothing and return
:data:`MATPLOTLIB_HINT` instead; :func:`plot_curves` raises.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from kant.errors import ValidationError
from kant.sim.analysis import SIZES_OF_NOTE, wait_by_size
from kant.sim.packing import PackingResult, curve_points, seed_text
from kant.sim.report.text import DAY, format_duration
from kant.sim.scenarios import PolicySet
from kant.sim.simulator import SimResult

__all__ = [
    "MATPLOTLIB_HINT",
    "plot_curves",
    "write_compare_plots",
    "write_plots",
    "write_seed_sweep_plots",
]

MATPLOTLIB_HINT: Final = (
    "plots skipped: matplotlib is not installed (pip install 'kant[cli]' or pip install matplotlib)"
)
"""What the ``write_*_plots`` functions return when matplotlib is missing."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(
    folder: str | Path, result: SimResult, *, title: str = ""
) -> tuple[list[Path], str | None]:
    """``timeseries.png`` (GAR, hourly SOR, GFR and waiting jobs over time), ``jwtd.png``
    and ``jtted.png`` of one run. Returns the files and None, or [] and a hint."""
    plt = _pyplot()
    if plt is None:
        return [], MATPLOTLIB_HINT
    out = Path(folder)
    return [
        _timeseries_png(plt, out / "timeseries.png", result, title),
        _jwtd_png(plt, out / "jwtd.png", result, title),
        _jtted_png(plt, out / "jtted.png", result, title),
    ], None


def _timeseries_png(plt: Any, path: Path, result: SimResult, title: str) -> Path:
    s = result.summary
    cols = result.series()
    days = (cols["t"] - s.start) / DAY  # (from the first arrival, as the printed summary)
    w0, w1 = s.window_start - s.start, s.window_end - s.start
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    ax = axes[0]
    ax.plot(days, 100 * cols["gar"], label="GAR", lw=1)
    if result.sor_bins:
        sb = np.array(result.sor_bins)
        ax.step((sb[:, 0] - s.start) / DAY, 100 * sb[:, 1], where="post", label="SOR (hourly)",
                lw=1)  # fmt: skip
    ax.set_ylabel("%")
    ax.set_ylim(0, 105)
    _shade_window(ax, w0, w1, label="observation window (measured)")
    ax.legend(loc="lower right")
    ax.set_title(f"{title}  GAR / SOR / GFR over time (shaded: the window the figures cover)")
    ax = axes[1]
    ax.plot(days, 100 * cols["gfr"], color="tab:red", lw=1, label="GFR")
    ax.plot(days, 100 * cols["gfr_degree"], color="tab:orange", lw=1, label="GFR degree")
    ax.set_ylabel("%")
    ax.legend(loc="upper right")
    _shade_window(ax, w0, w1)
    ax = axes[2]
    ax.plot(days, cols["pending"], color="tab:gray", lw=1)
    ax.set_ylabel("jobs waiting")
    ax.set_xlabel("simulated time (days)")
    _shade_window(ax, w0, w1)
    fig.tight_layout()
    return _save(fig, plt, path)


def _jwtd_png(plt: Any, path: Path, result: SimResult, title: str) -> Path:
    s = result.summary
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = list(s.jwtd)
    per, unit = wait_unit(max([s.jwtd[b].p95 for b in labels], default=0.0))
    means = [s.jwtd[b].mean_wait / per for b in labels]
    p95 = [s.jwtd[b].p95 / per for b in labels]
    x = np.arange(len(labels))
    ax.bar(x - 0.2, means, 0.4, label="mean")
    ax.bar(x + 0.2, p95, 0.4, label="p95")
    ax.set_xticks(x, labels)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel(f"wait ({unit})")
    ax.set_title(f"{title}  JWTD")
    ax.legend()
    fig.tight_layout()
    return _save(fig, plt, path)


def _jtted_png(plt: Any, path: Path, result: SimResult, title: str) -> Path:
    s = result.summary
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = list(s.jtted)
    x = np.arange(len(labels))
    ax.bar(x - 0.2, [s.jtted[b].node_ratio for b in labels], 0.4, label="NodeNum ratio")
    ax.bar(
        x + 0.2,
        [0.0 if math.isnan(s.jtted[b].group_ratio) else s.jtted[b].group_ratio for b in labels],
        0.4,
        label="NodeNetGroupNum ratio",
    )
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(x, labels)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel("actual / optimal")
    ax.set_title(f"{title}  JTTED")
    ax.legend()
    fig.tight_layout()
    return _save(fig, plt, path)


def _shade_window(ax: Any, w0: float, w1: float, label: str | None = None) -> None:
    """Shade the observation window: arrivals, warm-up excluded; GAR, SOR and GFR are
    measured over it."""
    ax.axvspan(w0 / DAY, w1 / DAY, color="tab:blue", alpha=0.05, lw=0, label=label)


_WAIT_UNITS: Final = ((120.0, 1.0, "seconds"), (2 * 3600.0, 60.0, "minutes"),
                      (3 * DAY, 3600.0, "hours"), (math.inf, DAY, "days"))  # fmt: skip
_NICE_WAITS: Final = (1, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 10 * 3600, DAY, 3 * DAY,
                      7 * DAY, 30 * DAY)  # fmt: skip


def wait_unit(largest_s: float) -> tuple[float, str]:
    """The unit to plot waits in when the largest is ``largest_s`` seconds: ``(seconds per
    unit, name)``, seconds under 2 min, minutes under 2 h, hours under 3 days, else days."""
    for limit, per, name in _WAIT_UNITS:
        if largest_s < limit:
            return per, name
    return DAY, "days"


def _duration_axis(ax: Any) -> None:
    """A log axis of waits in seconds, ticked at round durations labelled in their own unit
    (``30 s``, ``5.0 min``, ``3.0 h``)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.yaxis.set_major_locator(FixedLocator(list(_NICE_WAITS)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_duration(v)))


def write_compare_plots(
    folder: str | Path, runs: Sequence[tuple[PolicySet, SimResult]], *, title: str = ""
) -> tuple[list[Path], str | None]:
    """``compare_gar_sor.png``, ``compare_gfr.png``, ``compare_jwtd.png``,
    ``compare_jtted.png``: every policy set on one figure per metric."""
    plt = _pyplot()
    if plt is None:
        return [], MATPLOTLIB_HINT
    out = Path(folder)
    files = []

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    # (times from each run's first arrival, as the printed summary counts them: a trace that
    # starts late was drawn on an axis from its time 0, squeezed into the last of the width)
    for pol, r in runs:
        cols = r.series()
        t0 = r.summary.start
        axes[0].plot((cols["t"] - t0) / DAY, 100 * cols["gar"], lw=0.8, label=pol.label)
        if r.sor_bins:
            sb = np.array(r.sor_bins)
            axes[1].plot((sb[:, 0] - t0) / DAY, 100 * sb[:, 1], lw=0.8, label=pol.label)
    w1 = (runs[0][1].summary.window_end - runs[0][1].summary.start) / DAY if runs else 0.0
    for ax, name in zip(axes, ("GAR", "SOR (hourly windows)"), strict=True):
        ax.set_xlim(0, w1 * 1.02 if w1 else None)
        ax.set_ylim(0, 105)
        ax.set_xlabel("simulated time (days)")
        ax.set_ylabel("%")
        ax.set_title(f"{title}  {name}")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    files.append(_save(fig, plt, out / "compare_gar_sor.png"))

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    for pol, r in runs:
        cols = r.series()
        axes[0].plot((cols["t"] - r.summary.start) / DAY, 100 * cols["gfr"], lw=0.8,
                     label=pol.label)  # fmt: skip
    axes[0].set_xlim(0, w1 * 1.02 if w1 else None)
    axes[0].set_xlabel("simulated time (days)")
    axes[0].set_ylabel("GFR %")
    axes[0].set_title(f"{title}  GFR over time")
    axes[0].legend(loc="upper right", fontsize=8)
    labels = [p.label for p, _r in runs]
    axes[1].bar(np.arange(len(runs)), [100 * r.summary.gfr for _p, r in runs],
                color=[f"C{i}" for i in range(len(runs))])  # fmt: skip
    axes[1].set_xticks(np.arange(len(runs)), labels, rotation=30, ha="right", fontsize=7)
    axes[1].set_ylabel("mean GFR %")
    fig.tight_layout()
    files.append(_save(fig, plt, out / "compare_gfr.png"))

    _grouped_bars(
        plt, out / "compare_jwtd.png", runs, _jwtd_values,
        ylabel="mean wait (log scale)", title=f"{title}  JWTD", log=True, durations=True,
    )  # fmt: skip
    files.append(out / "compare_jwtd.png")
    _grouped_bars(
        plt, out / "compare_jtted.png", runs, _jtted_values,
        ylabel="NodeNetGroupNum deviation ratio", title=f"{title}  JTTED", log=False, ref=1.0,
    )  # fmt: skip
    files.append(out / "compare_jtted.png")
    return files, None


def _save(fig: Any, plt: Any, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _jwtd_values(r: SimResult) -> Mapping[str, float]:
    s = r.summary
    vals = {b: row.mean_wait for b, row in s.jwtd.items()}
    for size in SIZES_OF_NOTE:
        n, mean = wait_by_size(r.records, size, s.end)
        if n:
            vals[f"={size}"] = mean
    return vals


def _jtted_values(r: SimResult) -> Mapping[str, float]:
    return {b: row.group_ratio for b, row in r.summary.jtted.items()}


def _grouped_bars(
    plt: Any,
    path: Path,
    runs: Sequence[tuple[PolicySet, Any]],
    values: Any,
    *,
    ylabel: str,
    title: str,
    log: bool,
    ref: float | None = None,
    durations: bool = False,
) -> None:
    per_run = [values(r) for _p, r in runs]
    labels: list[str] = []
    for v in per_run:
        for k in v:
            if k not in labels:
                labels.append(k)
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(runs))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, ((pol, _r), v) in enumerate(zip(runs, per_run, strict=True)):
        ys = [v.get(k, math.nan) for k in labels]
        ys = [y if not math.isnan(y) and (y > 0 or not log) else math.nan for y in ys]
        ax.bar(x - 0.4 + width * (i + 0.5), ys, width, label=pol.label)
    if ref is not None:
        ax.axhline(ref, color="k", lw=0.8, ls="--")
    if log:
        ax.set_yscale("log")
    if durations:
        _duration_axis(ax)
    ax.set_xticks(x, labels)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_seed_sweep_plots(
    folder: str | Path, scenario_name: str, sets: Sequence[PolicySet], sweep: Mapping[str, Any]
) -> tuple[list[Path], str | None]:
    """``compare_jwtd.png`` of ``kant compare --seeds``: the mean waits by job size of every
    set in ``sets``, pooled over the seeds (``sweep`` is :func:`kant.sim.analysis.seed_sweep`'s
    result), and with two seeds or more ``compare_ci.png``: GAR, SOR and GFR seed means with
    their 95% confidence intervals. Returns the files and None, or [] and a hint."""
    plt = _pyplot()
    if plt is None:
        return [], MATPLOTLIB_HINT
    waits = {p.label: sweep["sets"][p.label]["wait"] for p in sets}
    pooled = [(p, {k: v for k, v in waits[p.label].items() if k != "all"}) for p in sets]
    path = Path(folder) / "compare_jwtd.png"
    _grouped_bars(
        plt, path, pooled, lambda v: v, ylabel="mean wait (log scale)",
        title=f"{scenario_name}  JWTD pooled over {sweep['n_seeds']} seeds", log=True,
        durations=True,
    )  # fmt: skip
    files = [path]
    if sweep["n_seeds"] > 1:
        files.append(_ci_png(plt, Path(folder) / "compare_ci.png", scenario_name, sets, sweep))
    return files, None


def _ci_png(
    plt: Any, path: Path, scenario_name: str, sets: Sequence[PolicySet], sweep: Mapping[str, Any]
) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.5))
    x = np.arange(len(sets))
    for ax, (key, name) in zip(
        axes, (("gar", "GAR median"), ("sor_median", "SOR median (hourly)"), ("gfr", "GFR mean")),
        strict=True,
    ):  # fmt: skip
        figs = [sweep["sets"][p.label] for p in sets]
        means = [100 * f[key] for f in figs]
        halves = [0.0 if math.isnan(f[key + "_ci"]) else 100 * f[key + "_ci"] for f in figs]
        ax.bar(x, means, 0.6, yerr=halves, capsize=4, color=[f"C{i}" for i in range(len(sets))])
        ax.set_xticks(x, [p.label for p in sets], rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("%")
        ax.set_title(f"{name}, seed mean (95% CI)", fontsize=9)
    fig.suptitle(f"{scenario_name}, {sweep['n_seeds']} seeds")
    fig.tight_layout()
    return _save(fig, plt, path)


def plot_curves(
    results: Sequence[PackingResult], path: str | os.PathLike[str], *, title: str | None = None
) -> None:
    """Save a PNG of allocation ratio against arrived load, one line per result (needs
    matplotlib, the ``cli`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ValidationError("plot", str(path), "needs matplotlib (pip install kant[cli])") from e
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    curves = [curve_points(r.alloc_at) for r in results]
    for r, curve in zip(results, curves, strict=True):
        ax.plot(
            [x for x, _v in curve],
            [v for _x, v in curve],
            label=f"{r.policy} ({r.alloc_at.get('130', 0):.2f})",
        )
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("arrived GPU request (% of cluster GPUs)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 100)
    ax.grid(True, linewidth=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if title or results:
        ax.set_title(title or f"{results[0].trace}, seeds {seed_text(results[0].seeds)}")
    inset = ax.inset_axes((0.08, 0.55, 0.4, 0.4))
    for curve in curves:
        tail = [(x, v) for x, v in curve if x >= 80]
        inset.plot([x for x, _v in tail], [v for _x, v in tail])
    inset.set_xlim(80, 130)
    lows = [r.alloc_at.get("90", 80.0) for r in results]
    inset.set_ylim(min(lows) - 1.0, max(r.alloc_at.get("130", 100.0) for r in results) + 0.5)
    inset.tick_params(labelsize=6)
    inset.grid(True, linewidth=0.3)
    fig.tight_layout()
    _save_replacing(fig, Path(path), dpi=120)
    plt.close(fig)


def _save_replacing(fig: Any, path: Path, *, dpi: int) -> None:
    """Save ``fig`` to a new file beside ``path`` (same extension, so the same format) and
    move it onto ``path`` once complete: ``path`` is the old file or the new one, never a
    part; a save that fails removes the new file."""
    tmp = path.with_name(f".{path.stem}.{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
