"""Readable tables, JSON and PNG plots of simulation results (``kant simulate`` and
``kant compare``).

Plots need matplotlib (the ``cli`` extra: ``pip install 'kant[cli]'``); it is imported only
when plotting, with the non-interactive Agg backend. Without it :func:`write_plots` and
:func:`write_compare_plots` write nothing and return a hint instead.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeAlias

import numpy as np

from kant.metrics import BUCKETS, JobRecord
from kant.sim.scenarios import PolicySet, Scenario
from kant.sim.simulator import SimResult

__all__ = [
    "MATPLOTLIB_HINT",
    "SIZES_OF_NOTE",
    "compare_json",
    "format_compare",
    "format_duration",
    "format_seed_sweep",
    "format_summary",
    "result_json",
    "seed_sweep",
    "wait_by_size",
    "write_compare_plots",
    "write_compare_report",
    "write_plots",
    "write_report",
    "write_seed_sweep_report",
]

MATPLOTLIB_HINT: Final = (
    "plots skipped: matplotlib is not installed (pip install 'kant[cli]' or pip install matplotlib)"
)

SIZES_OF_NOTE: Final = (1024, 2048)
"""Job sizes the paper singles out in its JWTD figure (the largest jobs)."""

DAY: Final = 86_400.0


# --------------------------------------------------------------------------- formatting


def format_duration(seconds: float | None) -> str:
    """``42 s``, ``12.5 min``, ``3.2 h``, ``1.5 d``; ``-`` for None / NaN."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = float(seconds)
    if abs(s) < 60:
        return f"{s:.0f} s"
    if abs(s) < 3600:
        return f"{s / 60:.1f} min"
    if abs(s) < DAY:
        return f"{s / 3600:.1f} h"
    return f"{s / DAY:.1f} d"


def _pct(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{100 * x:.{digits}f}%"


def _ratio(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2f}"


def _table(rows: Sequence[Sequence[str]], *, right_from: int = 1) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        cells = [
            c.ljust(widths[i]) if i < right_from else c.rjust(widths[i]) for i, c in enumerate(r)
        ]
        out.append("  ".join(cells).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def wait_by_size(records: Sequence[JobRecord], gpus: float, now: float) -> tuple[int, float]:
    """(jobs, mean wait) of the jobs asking exactly ``gpus`` GPUs; jobs that never started
    count with their wait up to ``now`` (as in JWTD)."""
    waits = [
        (r.started_at if r.started_at is not None else now) - r.submitted_at
        for r in records
        if r.gpus == gpus
    ]
    return len(waits), (float(np.mean(waits)) if waits else math.nan)


def format_summary(scenario: Scenario, policy: PolicySet, result: SimResult) -> str:
    """The metrics table ``kant simulate`` prints."""
    s = result.summary
    pre = policy.preemption_policy(scenario.quotas is not None)
    kinds = [k for k in ("priority", "reclaim", "backfill") if getattr(pre, k)]
    jobs = dict(s.jobs)
    total = sum(jobs.values())
    lines = [
        f"scenario   {scenario.name}: {scenario.description}",
        f"policy     queueing {policy.queueing}, placement {policy.placement}, "
        f"preemption {'+'.join(kinds) or 'none'}",
        f"simulated  {format_duration(s.end)}, observation window "
        f"{format_duration(s.window_start)} to {format_duration(s.window_end)} (arrivals, "
        f"warm-up excluded); {s.cycles:,} cycles, {s.events:,} events; wall "
        f"{result.wall_s:.1f} s (cycles {result.cycle_ms / 1000:.1f} s)",
        "",
    ]
    head = [
        ("metric", "value"),
        ("GAR median (window)", _pct(s.gar)),
        ("GAR mean (window)", _pct(s.gar_mean)),
        ("SOR (window)", _pct(s.sor)),
        ("SOR median of hourly windows", _pct(s.sor_median)),
        ("GFR mean (window)", _pct(s.gfr, 2)),
        ("GFR degree mean (window)", _pct(s.gfr_degree, 2)),
        ("wait, mean of all jobs", format_duration(s.wait_mean)),
        ("wait, GPU-weighted mean", format_duration(s.wait_gpu_weighted)),
        ("jobs submitted", f"{total:,}"),
        *((f"  {k}", f"{v:,}") for k, v in jobs.items()),
        ("preemptions (victim units)", f"{s.preemptions:,}"),
        ("  jobs preempted", f"{s.preempted_jobs:,}"),
        ("  pods evicted", f"{s.evicted_pods:,}"),
        ("node failures", f"{s.node_failures:,}"),
    ]
    lines.append(_table(head))
    lines.append("")
    lines.append("JWTD: waiting time by job size (GPUs); never-started jobs count up to the end")
    rows = [("bucket", "jobs", "mean", "p50", "p95", "max", "never started")]
    for b, r in s.jwtd.items():
        rows.append(
            (
                b,
                f"{r.count:,}",
                format_duration(r.mean_wait),
                format_duration(r.p50),
                format_duration(r.p95),
                format_duration(r.max),
                f"{r.unstarted:,}",
            )
        )
    for size in SIZES_OF_NOTE:
        n, mean = wait_by_size(result.records, size, s.end)
        if n:
            rows.append((f"={size}", f"{n:,}", format_duration(mean), "", "", "", ""))
    lines.append(_table(rows))
    lines.append("")
    lines.append("JTTED: actual / optimal nodes and leaf groups (1.00 is optimal)")
    rows2 = [("bucket", "jobs", "NodeNum ratio", "NodeNetGroupNum ratio", "worst group ratio")]
    for b, t in s.jtted.items():
        rows2.append(
            (b, f"{t.count:,}", _ratio(t.node_ratio), _ratio(t.group_ratio),
             _ratio(t.max_group_ratio))
        )  # fmt: skip
    lines.append(_table(rows2))
    return "\n".join(lines)


def result_json(scenario: Scenario, policy: PolicySet, result: SimResult) -> dict[str, Any]:
    """The JSON object of one run (``kant simulate --json``'s last line)."""
    d = result.summary.to_dict()
    jobs = dict(d["jobs"])
    jobs["total"] = sum(result.summary.jobs.values())
    by_size = {}
    for size in SIZES_OF_NOTE:
        n, mean = wait_by_size(result.records, size, result.summary.end)
        if n:
            by_size[str(size)] = {"count": n, "mean_wait": mean}
    return {
        "scenario": scenario.name,
        "policy": policy.label,
        "queueing": policy.queueing,
        "placement": policy.placement,
        "preemption": policy.preemption,
        "gpus": scenario.total_gpus,
        **{k: v for k, v in d.items() if k != "jobs"},
        "jobs": jobs,
        "jwtd_by_size": by_size,
        "wall_s": round(result.wall_s, 3),
        "cycle_s": round(result.cycle_ms / 1000, 3),
    }


def _sim_days(result: SimResult) -> np.ndarray[Any, np.dtype[np.float64]]:
    return result.series()["t"] / DAY


def write_report(
    folder: str | Path,
    scenario: Scenario,
    policy: PolicySet,
    result: SimResult,
    *,
    plots: bool = True,
) -> tuple[list[Path], str | None]:
    """Write ``summary.json``, ``summary.txt``, ``jobs.csv``, ``timeseries.csv`` and (with
    matplotlib) ``timeseries.png``, ``jwtd.png``, ``jtted.png`` into ``folder``. Returns the
    files written and a hint when plots were skipped."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    p = out / "summary.json"
    p.write_text(json.dumps(result_json(scenario, policy, result), indent=2) + "\n")
    files.append(p)
    p = out / "summary.txt"
    p.write_text(format_summary(scenario, policy, result) + "\n")
    files.append(p)
    files.append(_jobs_csv(out / "jobs.csv", result.records))
    files.append(_series_csv(out / "timeseries.csv", result))
    hint = None
    if plots:
        got, hint = write_plots(out, result, title=f"{scenario.name}: {policy.label}")
        files.extend(got)
    return files, hint


def _jobs_csv(path: Path, records: Sequence[JobRecord]) -> Path:
    fields = (
        "job_id", "tenant", "gpus", "gang", "submitted_at", "started_at", "finished_at",
        "nodes_used", "groups_used", "preempted", "requeued", "state",
    )  # fmt: skip
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in records:
            w.writerow(["" if getattr(r, k) is None else getattr(r, k) for k in fields])
    return path


def _series_csv(path: Path, result: SimResult) -> Path:
    cols = result.series()
    names = ("t", "gar", "sor", "gfr", "gfr_degree", "pending")
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        for i in range(cols["t"].shape[0]):
            w.writerow([f"{cols[k][i]:.6g}" for k in names])
    return path


# --------------------------------------------------------------------------- comparison


def _rows_for(runs: Sequence[tuple[PolicySet, SimResult]]) -> list[tuple[str, list[str]]]:
    rows: list[tuple[str, list[str]]] = []

    def add(name: str, vals: list[str]) -> None:
        rows.append((name, vals))

    sums = [r.summary for _p, r in runs]
    add("GAR median", [_pct(s.gar) for s in sums])
    add("SOR median (hourly)", [_pct(s.sor_median) for s in sums])
    add("SOR (window)", [_pct(s.sor) for s in sums])
    add("GFR mean", [_pct(s.gfr, 2) for s in sums])
    for b in BUCKETS:
        if any(b in s.jwtd for s in sums):
            add(
                f"JWTD mean {b} GPUs",
                [format_duration(s.jwtd[b].mean_wait) if b in s.jwtd else "-" for s in sums],
            )
    for size in SIZES_OF_NOTE:
        vals = [wait_by_size(r.records, size, r.summary.end) for _p, r in runs]
        if any(n for n, _m in vals):
            add(f"JWTD mean ={size} GPUs", [format_duration(m) if n else "-" for n, m in vals])
    add("JWTD mean, all jobs", [format_duration(s.wait_mean) for s in sums])
    add("JWTD mean, GPU-weighted", [format_duration(s.wait_gpu_weighted) for s in sums])
    for b in BUCKETS:
        if any(b in s.jtted and s.jtted[b].group_count for s in sums):
            add(
                f"JTTED group ratio {b}",
                [_ratio(s.jtted[b].group_ratio) if b in s.jtted else "-" for s in sums],
            )
    for b in BUCKETS:
        if any(b in s.jtted for s in sums):
            add(
                f"JTTED node ratio {b}",
                [_ratio(s.jtted[b].node_ratio) if b in s.jtted else "-" for s in sums],
            )
    add("jobs finished", [f"{s.jobs.get('finished', 0):,}" for s in sums])
    add("jobs pending at end", [f"{s.jobs.get('pending', 0):,}" for s in sums])
    add("preemptions", [f"{s.preemptions:,}" for s in sums])
    add("wall", [f"{r.wall_s:.1f} s" for _p, r in runs])
    return rows


def experiments(
    runs: Sequence[tuple[PolicySet, SimResult]],
) -> list[tuple[str, PolicySet, PolicySet]]:
    """The paper's two experiments found among ``runs``: (title, baseline, treatment).

    Backfill: ``strict-fifo+P`` vs ``backfill+P``; Best-Effort: ``strict-fifo+P`` vs
    ``best-effort-fifo+P``; E-Binpack: ``Q+X`` vs ``Q+ebinpack`` for a non-E-Binpack X."""
    pols = [p for p, _r in runs]
    out = []
    for p in pols:
        if p.queueing != "strict-fifo":
            continue
        for q in pols:
            if q.placement == p.placement and q.preemption == p.preemption:
                if q.queueing == "backfill":
                    out.append(("Backfill vs Strict FIFO", p, q))
                elif q.queueing == "best-effort-fifo":
                    out.append(("Best-Effort FIFO vs Strict FIFO", p, q))
    for p in pols:
        if p.placement == "ebinpack":
            continue
        for q in pols:
            if q.placement == "ebinpack" and q.queueing == p.queueing:
                out.append((f"E-Binpack vs {p.placement}", p, q))
    return out


def _gain(a: float, b: float) -> str:
    if any(math.isnan(x) for x in (a, b)):
        return "-"
    return f"{100 * (b - a):+.1f} pt"


def format_compare(scenario: Scenario, runs: Sequence[tuple[PolicySet, SimResult]]) -> str:
    """The paper-style comparison table ``kant compare`` prints, and the experiments'
    deltas (treatment minus baseline, in percentage points)."""
    header = ["", *(p.label for p, _r in runs)]
    rows = [header, *([name, *vals] for name, vals in _rows_for(runs))]
    lines = [f"scenario  {scenario.name}: {scenario.description}", "", _table(rows)]
    by_label = {p.label: r for p, r in runs}
    exp = experiments(runs)
    if exp:
        lines += ["", "experiments (treatment - baseline)"]
        erows = [("experiment", "GAR median", "SOR median", "SOR window", "GFR mean")]
        for title, base, treat in exp:
            a, b = by_label[base.label].summary, by_label[treat.label].summary
            erows.append(
                (
                    f"{title} ({treat.label} vs {base.label})",
                    _gain(a.gar, b.gar),
                    _gain(a.sor_median, b.sor_median),
                    _gain(a.sor, b.sor),
                    _gain(a.gfr, b.gfr),
                )
            )
        lines.append(_table(erows))
    return "\n".join(lines)


def compare_json(
    scenario: Scenario, runs: Sequence[tuple[PolicySet, SimResult]], wall_s: float
) -> dict[str, Any]:
    return {
        "scenario": scenario.name,
        "jobs": len(scenario.jobs),
        "gpus": scenario.total_gpus,
        "runs": [result_json(scenario, p, r) for p, r in runs],
        "wall_s": round(wall_s, 3),
    }


SeedRuns: TypeAlias = Sequence[tuple[int, Sequence[tuple[PolicySet, SimResult]]]]
"""``kant compare --seeds``: per seed, the runs of every policy set (same sets, same order)."""


def _waits_of(r: SimResult) -> dict[str, tuple[int, float]]:
    """(jobs, mean wait) per JWTD bucket, per size of note (``"=1024"``) and overall
    (``"all"``); jobs that never started count with their wait up to the end, as in JWTD."""
    s = r.summary
    out = {b: (row.count, row.mean_wait) for b, row in s.jwtd.items()}
    for size in SIZES_OF_NOTE:
        n, mean = wait_by_size(r.records, size, s.end)
        if n:
            out[f"={size}"] = (n, mean)
    waits = [
        (x.started_at if x.started_at is not None else s.end) - x.submitted_at for x in r.records
    ]
    if waits:
        out["all"] = (len(waits), float(np.mean(waits)))
    return out


def _pooled(
    results: Sequence[SimResult],
    waits: Callable[[SimResult], dict[str, tuple[int, float]]] = _waits_of,
) -> dict[str, tuple[int, float]]:
    """``waits`` (:func:`_waits_of`) pooled over runs: every job of every run counts once."""
    tot: dict[str, list[float]] = {}
    for r in results:
        for key, (n, mean) in waits(r).items():
            if not n or math.isnan(mean):
                continue
            t = tot.setdefault(key, [0, 0.0])
            t[0] += n
            t[1] += n * mean
    return {k: (int(n), w / n) for k, (n, w) in tot.items() if n}


def _nanmean(xs: Sequence[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return float(np.mean(vals)) if vals else math.nan


def seed_sweep(by_seed: SeedRuns) -> dict[str, Any]:
    """The figures of a seed sweep, JSON-ready.

    - ``sets``: per policy set, GAR median / hourly SOR median / GFR mean averaged over the
      seeds, and mean waits per job size **pooled** over the seeds (every job of every seed
      counts once: a single seed has only a handful of 1,024- and 2,048-GPU jobs);
    - ``experiments``: per experiment of :func:`experiments`, the mean gain over seeds and
      in how many seeds it goes the paper's way (GAR and SOR up, GFR down), and for the
      sizes of note the pooled wait ratio treatment / baseline and in how many seeds the
      treatment's mean wait is longer;
    - ``longest_wait``: per size of note, in how many seeds each set has the longest mean
      wait of all sets (a tie counts for none)."""
    if not by_seed:
        raise ValueError("a seed sweep needs at least one seed")
    sets = [p for p, _r in by_seed[0][1]]
    for seed, runs in by_seed:
        if [p.label for p, _r in runs] != [p.label for p in sets]:
            raise ValueError(f"seed {seed}: the policy sets differ from the first seed's")
    n_seeds = len(by_seed)
    memo: dict[int, dict[str, tuple[int, float]]] = {}

    def _size_waits(r: SimResult) -> dict[str, tuple[int, float]]:
        got = memo.get(id(r))
        if got is None:
            got = memo[id(r)] = _waits_of(r)
        return got

    def of(pol: PolicySet) -> list[SimResult]:
        k = sets.index(pol)
        return [runs[k][1] for _seed, runs in by_seed]

    per_set: dict[str, Any] = {}
    for pol in sets:
        rs = of(pol)
        pooled = _pooled(rs, _size_waits)
        per_set[pol.label] = {
            "gar": _nanmean([r.summary.gar for r in rs]),
            "sor_median": _nanmean([r.summary.sor_median for r in rs]),
            "gfr": _nanmean([r.summary.gfr for r in rs]),
            "wait": {k: m for k, (_n, m) in pooled.items()},
            "jobs": {k: n for k, (n, _m) in pooled.items()},
            "preemptions": sum(r.summary.preemptions for r in rs),
        }
    exps = []
    for title, base, treat in experiments(by_seed[0][1]):
        a, b = of(base), of(treat)
        entry: dict[str, Any] = {
            "title": title,
            "baseline": base.label,
            "treatment": treat.label,
        }
        for key, up in (("gar", True), ("sor_median", True), ("gfr", False)):
            gains = [
                getattr(y.summary, key) - getattr(x.summary, key) for x, y in zip(a, b, strict=True)
            ]
            ok = [g for g in gains if not math.isnan(g)]
            entry[f"{key}_gain"] = _nanmean(gains)
            entry[f"{key}_seeds_paper_way"] = sum(1 for g in ok if (g > 0 if up else g < 0))
            entry[f"{key}_seeds"] = len(ok)
        sizes = {}
        pa, pb = _pooled(a, _size_waits), _pooled(b, _size_waits)
        for size in SIZES_OF_NOTE:
            key = f"={size}"
            if key not in pa or key not in pb:
                continue
            pairs = [
                (_size_waits(x).get(key), _size_waits(y).get(key))
                for x, y in zip(a, b, strict=True)
            ]
            both = [(u[1], v[1]) for u, v in pairs if u and v]
            sizes[key] = {
                "ratio": pb[key][1] / pa[key][1] if pa[key][1] > 0 else math.nan,
                "seeds_longer": sum(1 for u, v in both if v > u),
                "seeds": len(both),
            }
        entry["waits"] = sizes
        exps.append(entry)
    longest: dict[str, dict[str, int]] = {}
    for size in SIZES_OF_NOTE:
        key = f"={size}"
        counts = {p.label: 0 for p in sets}
        for _seed, runs in by_seed:
            means = [(_size_waits(r).get(key), p.label) for p, r in runs]
            have = sorted((nm[1], label) for nm, label in means if nm)
            if len(have) == 1 or (len(have) > 1 and have[-1][0] > have[-2][0]):
                counts[have[-1][1]] += 1  # a tie for the longest counts for no set
        longest[key] = counts
    return {
        "seeds": [seed for seed, _runs in by_seed],
        "n_seeds": n_seeds,
        "sets": per_set,
        "experiments": exps,
        "longest_wait": longest,
    }


def format_seed_sweep(scenario_name: str, by_seed: SeedRuns) -> str:
    """The table ``kant compare --seeds`` prints (figures of :func:`seed_sweep`)."""
    sw = seed_sweep(by_seed)
    n = sw["n_seeds"]
    labels = list(sw["sets"])
    cols = [sw["sets"][k] for k in labels]
    seeds = sw["seeds"]
    if len(seeds) == 1:
        span = str(seeds[0])
    elif seeds == list(range(seeds[0], seeds[-1] + 1)):
        span = f"{seeds[0]}-{seeds[-1]}"
    else:
        span = ", ".join(map(str, seeds))
    lines = [
        f"scenario  {scenario_name}, {n} seed{'s' if n != 1 else ''} ({span}): "
        "GAR / SOR / GFR averaged over seeds, waits pooled over every job of every seed",
        "",
    ]
    rows: list[list[str]] = [["", *labels]]
    rows.append(["GAR median, seed mean", *(_pct(c["gar"]) for c in cols)])
    rows.append(["SOR median (hourly), seed mean", *(_pct(c["sor_median"]) for c in cols)])
    rows.append(["GFR mean, seed mean", *(_pct(c["gfr"], 2) for c in cols)])
    keys = [b for b in BUCKETS] + [f"={s}" for s in SIZES_OF_NOTE] + ["all"]
    for key in keys:
        if not any(key in c["wait"] for c in cols):
            continue
        name = "all jobs" if key == "all" else f"{key} GPUs"
        jobs = max(c["jobs"].get(key, 0) for c in cols)
        rows.append(
            [
                f"JWTD mean {name} ({jobs:,} jobs)",
                *(format_duration(c["wait"][key]) if key in c["wait"] else "-" for c in cols),
            ]
        )
    for key, counts in sw["longest_wait"].items():
        if any(counts.values()):
            rows.append([f"longest {key}-GPU wait (seeds)", *(f"{counts[k]}/{n}" for k in labels)])
    rows.append(["preemptions, all seeds", *(f"{c['preemptions']:,}" for c in cols)])
    lines.append(_table(rows))
    if sw["experiments"]:
        lines += ["", f"experiments (treatment - baseline; seeds going the paper's way of {n})"]
        erows = [["experiment", "GAR median", "SOR median", "GFR mean"]]
        erows[0] += [f"wait ={s} (ratio, seeds longer)" for s in SIZES_OF_NOTE]
        for e in sw["experiments"]:
            row = [f"{e['title']} ({e['treatment']} vs {e['baseline']})"]
            for key in ("gar", "sor_median", "gfr"):
                gain, k, m = e[key + "_gain"], e[key + "_seeds_paper_way"], e[key + "_seeds"]
                row.append("-" if math.isnan(gain) else f"{100 * gain:+.1f} pt ({k}/{m})")
            for s in SIZES_OF_NOTE:
                w = e["waits"].get(f"={s}")
                row.append(
                    "-"
                    if w is None or math.isnan(w["ratio"])
                    else f"x{w['ratio']:.2f} ({w['seeds_longer']}/{w['seeds']})"
                )
            erows.append(row)
        lines.append(_table(erows))
    return "\n".join(lines)


def write_compare_report(
    folder: str | Path,
    scenario: Scenario,
    runs: Sequence[tuple[PolicySet, SimResult]],
    wall_s: float,
    *,
    plots: bool = True,
) -> tuple[list[Path], str | None]:
    """Write ``compare.json``, ``compare.txt`` and (with matplotlib) the comparison plots."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    p = out / "compare.json"
    p.write_text(json.dumps(compare_json(scenario, runs, wall_s), indent=2) + "\n")
    files.append(p)
    p = out / "compare.txt"
    p.write_text(format_compare(scenario, runs) + "\n")
    files.append(p)
    hint = None
    if plots:
        got, hint = write_compare_plots(out, runs, title=scenario.name)
        files.extend(got)
    return files, hint


def write_seed_sweep_report(
    folder: str | Path,
    scenario_name: str,
    by_seed: SeedRuns,
    scenarios: Mapping[int, Scenario],
    wall_s: float,
    *,
    plots: bool = True,
) -> tuple[list[Path], str | None]:
    """``kant compare --seeds``: ``compare.json`` (the :func:`seed_sweep` figures and every
    run's JSON object), ``compare.txt`` and (with matplotlib) ``compare_jwtd.png``, the
    pooled mean waits by job size."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    sw = seed_sweep(by_seed)
    doc = {
        "scenario": scenario_name,
        "sweep": sw,
        "runs": [
            {"seed": seed, "runs": [result_json(scenarios[seed], p, r) for p, r in runs]}
            for seed, runs in by_seed
        ],
        "wall_s": round(wall_s, 3),
    }
    files = [out / "compare.json", out / "compare.txt"]
    files[0].write_text(json.dumps(doc, indent=2) + "\n")
    files[1].write_text(format_seed_sweep(scenario_name, by_seed) + "\n")
    if not plots:
        return files, None
    plt = _pyplot()
    if plt is None:
        return files, MATPLOTLIB_HINT
    pooled = [(p, {k: v / 3600 for k, v in sw["sets"][p.label]["wait"].items() if k != "all"})
              for p, _r in by_seed[0][1]]  # fmt: skip
    path = out / "compare_jwtd.png"
    _grouped_bars(
        plt, path, pooled, lambda v: v, ylabel="mean wait (hours, log scale)",
        title=f"{scenario_name}  JWTD pooled over {sw['n_seeds']} seeds", log=True,
    )  # fmt: skip
    files.append(path)
    return files, None


# --------------------------------------------------------------------------- plots


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
    s = result.summary
    cols = result.series()
    days = cols["t"] / DAY
    files = []

    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    ax = axes[0]
    ax.plot(days, 100 * cols["gar"], label="GAR", lw=1)
    if result.sor_bins:
        sb = np.array(result.sor_bins)
        ax.step(sb[:, 0] / DAY, 100 * sb[:, 1], where="post", label="SOR (hourly)", lw=1)
    ax.set_ylabel("%")
    ax.set_ylim(0, 105)
    ax.legend(loc="lower right")
    ax.set_title(f"{title}  GAR / SOR / GFR over time")
    _shade_window(ax, s.window_start, s.window_end)
    ax = axes[1]
    ax.plot(days, 100 * cols["gfr"], color="tab:red", lw=1, label="GFR")
    ax.plot(days, 100 * cols["gfr_degree"], color="tab:orange", lw=1, label="GFR degree")
    ax.set_ylabel("%")
    ax.legend(loc="upper right")
    _shade_window(ax, s.window_start, s.window_end)
    ax = axes[2]
    ax.plot(days, cols["pending"], color="tab:gray", lw=1)
    ax.set_ylabel("jobs waiting")
    ax.set_xlabel("simulated time (days)")
    _shade_window(ax, s.window_start, s.window_end)
    fig.tight_layout()
    p = out / "timeseries.png"
    files.append(_save(fig, plt, p))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = list(s.jwtd)
    means = [s.jwtd[b].mean_wait / 3600 for b in labels]
    p95 = [s.jwtd[b].p95 / 3600 for b in labels]
    x = np.arange(len(labels))
    ax.bar(x - 0.2, means, 0.4, label="mean")
    ax.bar(x + 0.2, p95, 0.4, label="p95")
    ax.set_xticks(x, labels)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel("wait (hours)")
    ax.set_title(f"{title}  JWTD")
    ax.legend()
    fig.tight_layout()
    p = out / "jwtd.png"
    files.append(_save(fig, plt, p))

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
    p = out / "jtted.png"
    files.append(_save(fig, plt, p))
    return files, None


def _shade_window(ax: Any, w0: float, w1: float) -> None:
    ax.axvspan(w0 / DAY, w1 / DAY, color="tab:blue", alpha=0.05, lw=0)


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
    for pol, r in runs:
        cols = r.series()
        axes[0].plot(cols["t"] / DAY, 100 * cols["gar"], lw=0.8, label=pol.label)
        if r.sor_bins:
            sb = np.array(r.sor_bins)
            axes[1].plot(sb[:, 0] / DAY, 100 * sb[:, 1], lw=0.8, label=pol.label)
    w1 = runs[0][1].summary.window_end / DAY if runs else 0.0
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
        axes[0].plot(cols["t"] / DAY, 100 * cols["gfr"], lw=0.8, label=pol.label)
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
        ylabel="mean wait (hours, log scale)", title=f"{title}  JWTD", log=True,
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
    vals = {b: row.mean_wait / 3600 for b, row in s.jwtd.items()}
    for size in SIZES_OF_NOTE:
        n, mean = wait_by_size(r.records, size, s.end)
        if n:
            vals[f"={size}"] = mean / 3600
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
    ax.set_xticks(x, labels)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
