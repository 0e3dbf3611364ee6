"""What ``kant simulate`` and ``kant compare`` compute from simulation results, as plain
values (no printing, no files): JSON-ready summaries of a run (:func:`result_json`) and of a
comparison (:func:`compare_json`), the paper's experiments found among policy sets
(:func:`experiments`), mean waits by job size (:func:`wait_by_size`) and the figures of a
seed sweep (:func:`seed_sweep`).

:mod:`kant.sim.report` turns these into tables, files and plots.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

import numpy as np

from kant.metrics import JobRecord
from kant.sim.scenarios import PolicySet, Scenario
from kant.sim.simulator import SimResult

__all__ = [
    "SIZES_OF_NOTE",
    "SeedRuns",
    "compare_json",
    "experiments",
    "result_json",
    "seed_sweep",
    "wait_by_size",
]

SIZES_OF_NOTE: Final = (1024, 2048)
"""Job sizes the paper singles out in its JWTD figure (the largest jobs)."""

Waits: TypeAlias = Callable[[SimResult], dict[str, tuple[int, float]]]


def wait_by_size(records: Sequence[JobRecord], gpus: float, now: float) -> tuple[int, float]:
    """(jobs, mean wait) of the jobs asking exactly ``gpus`` GPUs; jobs that never started
    count with their wait up to ``now`` (as in JWTD)."""
    waits = [
        (r.started_at if r.started_at is not None else now) - r.submitted_at
        for r in records
        if r.gpus == gpus
    ]
    return len(waits), (float(np.mean(waits)) if waits else math.nan)


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


def compare_json(
    scenario: Scenario, runs: Sequence[tuple[PolicySet, SimResult]], wall_s: float
) -> dict[str, Any]:
    """The JSON object of a comparison (``kant compare --json``'s last line): the scenario,
    every run's :func:`result_json` and the wall time."""
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
    waits: Waits = _waits_of,
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
    if not by_seed:
        raise ValueError("a seed sweep needs at least one seed")
    sets = [p for p, _r in by_seed[0][1]]
    for seed, runs in by_seed:
        if [p.label for p, _r in runs] != [p.label for p in sets]:
            raise ValueError(f"seed {seed}: the policy sets differ from the first seed's")
    memo: dict[int, dict[str, tuple[int, float]]] = {}

    def size_waits(r: SimResult) -> dict[str, tuple[int, float]]:
        got = memo.get(id(r))
        if got is None:
            got = memo[id(r)] = _waits_of(r)
        return got

    def of(pol: PolicySet) -> list[SimResult]:
        k = sets.index(pol)
        return [runs[k][1] for _seed, runs in by_seed]

    return {
        "seeds": [seed for seed, _runs in by_seed],
        "n_seeds": len(by_seed),
        "sets": {pol.label: _set_figures(of(pol), size_waits) for pol in sets},
        "experiments": [
            _experiment_figures(title, base, treat, of(base), of(treat), size_waits)
            for title, base, treat in experiments(by_seed[0][1])
        ],
        "longest_wait": _longest_waits(by_seed, sets, size_waits),
    }


def _set_figures(rs: Sequence[SimResult], waits: Waits) -> dict[str, Any]:
    """One policy set's seed means and pooled waits (``seed_sweep()["sets"]``)."""
    pooled = _pooled(rs, waits)
    return {
        "gar": _nanmean([r.summary.gar for r in rs]),
        "sor_median": _nanmean([r.summary.sor_median for r in rs]),
        "gfr": _nanmean([r.summary.gfr for r in rs]),
        "wait": {k: m for k, (_n, m) in pooled.items()},
        "jobs": {k: n for k, (n, _m) in pooled.items()},
        "preemptions": sum(r.summary.preemptions for r in rs),
    }


def _experiment_figures(
    title: str,
    base: PolicySet,
    treat: PolicySet,
    a: Sequence[SimResult],
    b: Sequence[SimResult],
    waits: Waits,
) -> dict[str, Any]:
    """One experiment's gains over seeds (``a``: the baseline's runs, ``b``: the
    treatment's, seed by seed) and its pooled wait ratios (``seed_sweep()["experiments"]``)."""
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
    pa, pb = _pooled(a, waits), _pooled(b, waits)
    for size in SIZES_OF_NOTE:
        key = f"={size}"
        if key not in pa or key not in pb:
            continue
        pairs = [(waits(x).get(key), waits(y).get(key)) for x, y in zip(a, b, strict=True)]
        both = [(u[1], v[1]) for u, v in pairs if u and v]
        sizes[key] = {
            "ratio": pb[key][1] / pa[key][1] if pa[key][1] > 0 else math.nan,
            "seeds_longer": sum(1 for u, v in both if v > u),
            "seeds": len(both),
        }
    entry["waits"] = sizes
    return entry


def _longest_waits(
    by_seed: SeedRuns, sets: Sequence[PolicySet], waits: Waits
) -> dict[str, dict[str, int]]:
    """Per size of note, in how many seeds each set has the longest mean wait of all sets (a
    tie for the longest counts for no set) (``seed_sweep()["longest_wait"]``)."""
    longest: dict[str, dict[str, int]] = {}
    for size in SIZES_OF_NOTE:
        key = f"={size}"
        counts = {p.label: 0 for p in sets}
        for _seed, runs in by_seed:
            means = [(waits(r).get(key), p.label) for p, r in runs]
            have = sorted((nm[1], label) for nm, label in means if nm)
            if len(have) == 1 or (len(have) > 1 and have[-1][0] > have[-2][0]):
                counts[have[-1][1]] += 1
        longest[key] = counts
    return longest
