"""What ``kant simulate`` and ``kant compare`` compute from simulation results, as plain
values (no printing, no files): JSON-ready summaries of a run (:func:`result_json`) and of a
comparison (:func:`compare_json`), the paper's experiments found among policy sets
(:func:`experiments`), mean waits by job size (:func:`wait_by_size`) and the figures of a
seed sweep (:func:`seed_sweep`).

:mod:`kant.sim.report` turns these into tables, files and plots.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs
import numpy as np

from kant.metrics import JobRecord
from kant.sim.scenarios import PolicySet, Scenario
from kant.sim.simulator import SimResult

__all__ = [
    "SIZES_OF_NOTE",
    "RunFigures",
    "SeedRuns",
    "compare_json",
    "experiments",
    "json_text",
    "mean_ci",
    "result_json",
    "run_metrics",
    "seed_sweep",
    "strict_json",
    "t_quantile",
    "wait_by_size",
]

SIZES_OF_NOTE: Final = (1024, 2048)
"""Job sizes the paper singles out in its JWTD figure (the largest jobs)."""

Waits: TypeAlias = Callable[["RunFigures"], dict[str, tuple[int, float]]]


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
        **({"config": policy.config.source} if policy.config is not None else {}),
    }


def experiments(
    runs: Sequence[tuple[PolicySet, Any]],
) -> list[tuple[str, PolicySet, PolicySet]]:
    """The paper's two experiments found among ``runs``: (title, baseline, treatment).

    Backfill: ``strict-fifo+P`` vs ``backfill+P``; Best-Effort: ``strict-fifo+P`` vs
    ``best-effort-fifo+P``; E-Binpack: ``Q+X`` vs ``Q+ebinpack`` for a non-E-Binpack X. The
    two sets of an experiment have the same preemption mode (and an E-Binpack pair the same
    Backfill threshold): it differs in one policy only."""
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
            same = (
                q.queueing == p.queueing
                and q.preemption == p.preemption
                and q.threshold == p.threshold  # (Backfill's: another threshold is another Q)
            )
            if q.placement == "ebinpack" and same:
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


SeedRuns: TypeAlias = Sequence[
    tuple[int, Sequence[tuple[PolicySet, "SimResult | Mapping[str, Any]"]]]
]
"""``kant compare --seeds``: per seed, the runs of every policy set (same sets, same order);
a run is a :class:`SimResult` or its stored :func:`run_metrics`."""


def strict_json(x: Any) -> Any:
    """``x`` as strict JSON holds it, recursively: a float that is not finite (NaN, an
    interval over one seed; inf) as None, tuples as lists."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {k: strict_json(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [strict_json(v) for v in x]
    return x


def json_text(x: Any, **kw: Any) -> str:
    """``json.dumps`` of :func:`strict_json` of ``x`` (``kw``: ``indent``, ``sort_keys``):
    valid JSON, no ``NaN`` token. Every JSON kant prints or writes goes through it."""
    return json.dumps(strict_json(x), allow_nan=False, **kw)


def run_metrics(scenario: Scenario, policy: PolicySet, result: SimResult) -> dict[str, Any]:
    """What a sweep stores of one run: :func:`result_json` without its wall times (so two
    runs with the same inputs store equal metrics) and ``waits``, the (jobs, mean wait) per
    JWTD bucket, per size of note (``"=1024"``) and overall (``"all"``) that a seed sweep
    pools. Strict JSON: NaN is stored as None."""
    out = result_json(scenario, policy, result)
    del out["wall_s"], out["cycle_s"]
    out["waits"] = {k: [n, m] for k, (n, m) in _waits_of(result).items()}
    return dict(strict_json(out))


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


@attrs.frozen(kw_only=True)
class RunFigures:
    """The figures of one run a seed sweep uses, from a :class:`SimResult` or from its
    stored :func:`run_metrics` (:meth:`of`)."""

    gar: float
    sor_median: float
    gfr: float
    preemptions: int
    waits: Mapping[str, tuple[int, float]]

    @classmethod
    def of(cls, run: SimResult | Mapping[str, Any]) -> RunFigures:
        """The figures of ``run`` (a result, or the mapping :func:`run_metrics` made)."""
        if isinstance(run, SimResult):
            s = run.summary
            return cls(
                gar=s.gar, sor_median=s.sor_median, gfr=s.gfr, preemptions=s.preemptions,
                waits=_waits_of(run),
            )  # fmt: skip
        return cls(
            gar=_num(run["gar"]),
            sor_median=_num(run["sor_median"]),
            gfr=_num(run["gfr"]),
            preemptions=int(run["preemptions"]),
            waits={k: (int(n), _num(m)) for k, (n, m) in run["waits"].items()},
        )


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t distribution with ``df`` degrees of
    freedom: bisection on its CDF, integrated with Simpson's rule (no SciPy needed)."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x: float) -> float:  # P(T <= x) for x >= 0
        n = 2000
        h = x / n
        ys = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
        total: float = ys[0] + ys[-1] + 4 * sum(ys[1:-1:2]) + 2 * sum(ys[2:-1:2])
        return 0.5 + h / 3 * total

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width of its ``level`` confidence interval) of ``values`` (NaN left
    out): Student's t interval over independent runs (seeds). The half-width is NaN with
    fewer than two values."""
    vals = [float(v) for v in values if not math.isnan(v)]
    if not vals:
        return math.nan, math.nan
    mean = float(np.mean(vals))
    if len(vals) < 2:
        return mean, math.nan
    sd = float(np.std(vals, ddof=1))
    return mean, t_quantile(0.5 + level / 2, len(vals) - 1) * sd / math.sqrt(len(vals))


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


def _pooled(results: Sequence[RunFigures], waits: Waits) -> dict[str, tuple[int, float]]:
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
    figs = [(seed, [(p, RunFigures.of(r)) for p, r in runs]) for seed, runs in by_seed]

    def size_waits(r: RunFigures) -> dict[str, tuple[int, float]]:
        return dict(r.waits)

    def of(pol: PolicySet) -> list[RunFigures]:
        k = sets.index(pol)
        return [runs[k][1] for _seed, runs in figs]

    return {
        "seeds": [seed for seed, _runs in by_seed],
        "n_seeds": len(by_seed),
        "sets": {pol.label: _set_figures(of(pol), size_waits) for pol in sets},
        "experiments": [
            _experiment_figures(title, base, treat, of(base), of(treat), size_waits)
            for title, base, treat in experiments(by_seed[0][1])
        ],
        "longest_wait": _longest_waits(figs, sets, size_waits),
    }


def _set_figures(rs: Sequence[RunFigures], waits: Waits) -> dict[str, Any]:
    """One policy set's seed means (with the half-width of their 95% confidence interval
    over seeds, ``*_ci``) and pooled waits (``seed_sweep()["sets"]``)."""
    pooled = _pooled(rs, waits)
    out: dict[str, Any] = {}
    for key in ("gar", "sor_median", "gfr"):
        out[key] = _nanmean([getattr(r, key) for r in rs])
    for key in ("gar", "sor_median", "gfr"):
        out[f"{key}_ci"] = mean_ci([getattr(r, key) for r in rs])[1]
    out["wait"] = {k: m for k, (_n, m) in pooled.items()}
    out["jobs"] = {k: n for k, (n, _m) in pooled.items()}
    out["preemptions"] = sum(r.preemptions for r in rs)
    return out


def _experiment_figures(
    title: str,
    base: PolicySet,
    treat: PolicySet,
    a: Sequence[RunFigures],
    b: Sequence[RunFigures],
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
        gains = [getattr(y, key) - getattr(x, key) for x, y in zip(a, b, strict=True)]
        ok = [g for g in gains if not math.isnan(g)]
        entry[f"{key}_gain"] = _nanmean(gains)
        entry[f"{key}_gain_ci"] = mean_ci(gains)[1]
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
    by_seed: Sequence[tuple[int, Sequence[tuple[PolicySet, RunFigures]]]],
    sets: Sequence[PolicySet],
    waits: Waits,
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
