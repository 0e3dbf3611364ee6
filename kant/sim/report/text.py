"""Readable text of simulation results: the tables ``kant simulate`` (:func:`format_summary`),
``kant compare`` (:func:`format_compare`) and ``kant compare --seeds``
(:func:`format_seed_sweep`) print, and :func:`format_duration`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from kant.config import KantConfig
from kant.metrics import BUCKETS
from kant.sim.analysis import SIZES_OF_NOTE, SeedRuns, experiments, seed_sweep, wait_by_size
from kant.sim.scenarios import PREEMPTION_KINDS, PolicySet, Scenario
from kant.sim.simulator import SimResult

__all__ = [
    "DAY",
    "format_compare",
    "format_duration",
    "format_seed_sweep",
    "format_summary",
    "policy_line",
]

DAY: Final = 86_400.0
"""Seconds in a day."""


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


def _pct_ci(x: float | None, half: float | None, digits: int = 1) -> str:
    """``12.3%`` and, when ``half`` is a number, `` ±0.4`` (points)."""
    if half is None or (isinstance(half, float) and math.isnan(half)) or _pct(x) == "-":
        return _pct(x, digits)
    return f"{_pct(x, digits)} ±{100 * half:.{digits}f}"


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


def _options(d: Mapping[str, Any]) -> str:
    return f" ({', '.join(f'{k}={v}' for k, v in d.items())})" if d else ""


def policy_line(scenario: Scenario, policy: PolicySet) -> str:
    """``queueing Q, placement P, preemption K``: the kinds of preemption on (``none``,
    ``priority``, ``reclaim+backfill``, ...); the settings of the run that are not the
    library's defaults follow their part in brackets (a config file's, ``--threshold``, the
    scenario's interruption limit, which overrides the file's), and the file's name ends
    the line: what ran."""
    pre = policy.preemption_policy(scenario.quotas is not None)
    kinds = "+".join(k for k in PREEMPTION_KINDS if getattr(pre, k)) or "none"
    cfg = policy.config
    if cfg is None:
        opts: dict[str, Any] = {}
        if policy.threshold is not None and policy.queueing == "backfill":
            opts["threshold"] = f"{policy.threshold:g}"
        if scenario.max_interruptions is not None:
            opts["max_interruptions"] = scenario.max_interruptions
        return (
            f"queueing {policy.queueing}{_options(opts)}, placement {policy.placement}, "
            f"preemption {kinds}"
        )
    base = KantConfig()
    q, p = cfg.queueing, cfg.placement
    qo = {**q.options, **({"order": q.order} if q.order != base.queueing.order else {})}
    backoff = scenario.backoff(q.backoff)  # (what ran: --max-interruptions over the file's)
    if backoff != base.queueing.backoff:
        qo["backoff"] = backoff
    if q.requeue_timestamp != base.queueing.requeue_timestamp:
        qo["requeue_timestamp"] = q.requeue_timestamp
    po = dict(p.options)
    if p.group_probe != base.placement.group_probe:
        po["group_probe"] = p.group_probe
    if p.seed != base.placement.seed:
        po["seed"] = p.seed
    pr = {
        f.name: v
        for f in attrs.fields(type(pre))
        if f.name not in PREEMPTION_KINDS
        and (v := getattr(pre, f.name)) != getattr(base.preemption, f.name)
    }
    return (
        f"queueing {q.policy}{_options(qo)}, placement {p.strategy}{_options(po)}, "
        f"preemption {kinds}{_options(pr)}; from {cfg.source}"
    )


def _from_first(start: float) -> str:
    """What the run's times count from, when not 0: the first arrival."""
    return f", from the first arrival (at {start:,.10g} s)" if start else ""


def format_summary(scenario: Scenario, policy: PolicySet, result: SimResult) -> str:
    """The metrics table ``kant simulate`` prints."""
    s = result.summary
    jobs = dict(s.jobs)
    total = sum(jobs.values())
    lines = [
        f"scenario   {scenario.name}: {scenario.description}",
        f"policy     {policy_line(scenario, policy)}",
        f"simulated  {format_duration(s.end - s.start)}, observation window "
        f"{format_duration(s.window_start - s.start)} to "
        f"{format_duration(s.window_end - s.start)} (arrivals, warm-up excluded)"
        f"{_from_first(s.start)}; {s.cycles:,} cycles, {s.events:,} events; wall "
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
        "GAR / SOR / GFR averaged over seeds (± the half-width of the 95% confidence "
        "interval over seeds), waits pooled over every job of every seed",
        "",
    ]
    rows: list[list[str]] = [["", *labels]]
    ci = " (95% CI)" if n > 1 else ""
    for name, key, digits in (
        ("GAR median", "gar", 1), ("SOR median (hourly)", "sor_median", 1), ("GFR mean", "gfr", 2)
    ):  # fmt: skip
        rows.append(
            [f"{name}, seed mean{ci}", *(_pct_ci(c[key], c[key + "_ci"], digits) for c in cols)]
        )
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
                half = e[key + "_gain_ci"]
                pm = "" if math.isnan(half) else f" ±{100 * half:.1f}"
                row.append("-" if math.isnan(gain) else f"{100 * gain:+.1f}{pm} pt ({k}/{m})")
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
