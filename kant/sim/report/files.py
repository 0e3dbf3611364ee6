"""Report folders of ``kant simulate`` (:func:`write_report`), ``kant compare``
(:func:`write_compare_report`) and ``kant compare --seeds`` (:func:`write_seed_sweep_report`):
JSON summaries, the printed tables as text, per-job and time-series CSV, and (with
matplotlib) the plots of :mod:`kant.sim.report.plots`.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from kant.metrics import JobRecord
from kant.sim.analysis import SeedRuns, compare_json, json_text, result_json, seed_sweep
from kant.sim.report.plots import write_compare_plots, write_plots, write_seed_sweep_plots
from kant.sim.report.text import format_compare, format_seed_sweep, format_summary
from kant.sim.scenarios import PolicySet, Scenario
from kant.sim.simulator import SimResult

__all__ = [
    "clear_seed_sweep_report",
    "write_compare_report",
    "write_report",
    "write_seed_sweep_report",
]


PLOT_NAMES: Final = (
    "timeseries.png", "jwtd.png", "jtted.png",
    "compare_gar_sor.png", "compare_gfr.png", "compare_jwtd.png", "compare_jtted.png",
    "compare_ci.png",
)  # fmt: skip
"""Every PNG a report of this module writes (:mod:`kant.sim.report.plots`). A report folder
is cleared of them first, so a run with ``--no-plots`` (or another command) never leaves an
older run's plots beside its results."""


def _clear_plots(out: Path) -> None:
    for name in PLOT_NAMES:
        (out / name).unlink(missing_ok=True)


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
    _clear_plots(out)
    files = []
    p = out / "summary.json"
    p.write_text(
        json_text(result_json(scenario, policy, result), indent=2) + "\n", errors="backslashreplace"
    )
    files.append(p)
    p = out / "summary.txt"
    p.write_text(format_summary(scenario, policy, result) + "\n", errors="backslashreplace")
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
        "nodes_used", "groups_used", "preempted", "requeued", "state", "all_started_at",
    )  # fmt: skip
    with path.open("w", newline="", errors="backslashreplace") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in records:
            w.writerow(["" if getattr(r, k) is None else getattr(r, k) for k in fields])
    return path


def _series_csv(path: Path, result: SimResult) -> Path:
    cols = result.series()
    names = ("t", "gar", "sor", "gfr", "gfr_degree", "pending")
    with path.open("w", newline="", errors="backslashreplace") as f:
        w = csv.writer(f)
        w.writerow(names)
        for i in range(cols["t"].shape[0]):
            w.writerow([f"{cols[k][i]:.6g}" for k in names])
    return path


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
    _clear_plots(out)
    files = []
    p = out / "compare.json"
    p.write_text(
        json_text(compare_json(scenario, runs, wall_s), indent=2) + "\n", errors="backslashreplace"
    )
    files.append(p)
    p = out / "compare.txt"
    p.write_text(format_compare(scenario, runs) + "\n", errors="backslashreplace")
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
    scenarios: Mapping[int, Scenario] | None,
    wall_s: float,
    *,
    plots: bool = True,
) -> tuple[list[Path], str | None]:
    """``kant compare --seeds``: ``compare.json`` (the :func:`seed_sweep` figures and every
    run's JSON object), ``compare.txt`` and (with matplotlib) ``compare_jwtd.png``, the
    pooled mean waits by job size. A run is a :class:`SimResult` (its JSON object made with
    the seed's scenario from ``scenarios``) or the stored
    :func:`~kant.sim.analysis.run_metrics` of one (``scenarios`` may then be None)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    _clear_plots(out)
    sw = seed_sweep(by_seed)
    doc = {
        "scenario": scenario_name,
        "sweep": sw,
        "runs": [
            {"seed": seed, "runs": [_run_json(scenarios, seed, p, r) for p, r in runs]}
            for seed, runs in by_seed
        ],
        "wall_s": round(wall_s, 3),
    }
    files = [out / "compare.json", out / "compare.txt"]
    files[0].write_text(json_text(doc, indent=2) + "\n", errors="backslashreplace")
    files[1].write_text(format_seed_sweep(scenario_name, by_seed) + "\n", errors="backslashreplace")
    if not plots:
        return files, None
    got, hint = write_seed_sweep_plots(out, scenario_name, [p for p, _r in by_seed[0][1]], sw)
    files.extend(got)
    return files, hint


def clear_seed_sweep_report(folder: str | Path) -> None:
    """Remove from ``folder`` (if it is there) what :func:`write_seed_sweep_report` writes:
    ``compare.json``, ``compare.txt`` and every plot; for a sweep report's group that has
    nothing to show now, so an earlier report's figures are not taken for its own."""
    out = Path(folder)
    if not out.is_dir():
        return
    _clear_plots(out)
    for name in ("compare.json", "compare.txt"):
        (out / name).unlink(missing_ok=True)


def _run_json(
    scenarios: Mapping[int, Scenario] | None,
    seed: int,
    policy: PolicySet,
    run: SimResult | Mapping[str, Any],
) -> dict[str, Any]:
    if isinstance(run, SimResult):
        if scenarios is None:
            raise ValueError("a SimResult needs its scenario to be written")
        return result_json(scenarios[seed], policy, run)
    return dict(run)
