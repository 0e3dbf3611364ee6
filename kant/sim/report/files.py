"""Report folders of ``kant simulate`` (:func:`write_report`), ``kant compare``
(:func:`write_compare_report`) and ``kant compare --seeds`` (:func:`write_seed_sweep_report`):
JSON summaries, the printed tables as text, per-job and time-series CSV, and (with
matplotlib) the plots of :mod:`kant.sim.report.plots`.

A report is written whole or not at all: its files are written into a temporary folder
inside the report folder and moved into place together once every one is complete
(:func:`staged`); a write that fails (a full disk, a file size limit) removes what it wrote
and leaves the folder as it was, an earlier report in it whole.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from kant.metrics import JobRecord
from kant.sim.analysis import SeedRuns, compare_json, json_text, result_json, seed_sweep
from kant.sim.report.plots import write_compare_plots, write_plots, write_seed_sweep_plots
from kant.sim.report.text import format_compare, format_seed_sweep, format_summary
from kant.sim.scenarios import PolicySet, Scenario
from kant.sim.simulator import SimResult

__all__ = [
    "COMPARE_FILES",
    "PLOT_NAMES",
    "REPORT_FILES",
    "clear_seed_sweep_report",
    "staged",
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


REPORT_FILES: Final = ("summary.json", "summary.txt", "jobs.csv", "timeseries.csv")
"""The files :func:`write_report` writes besides its plots."""

COMPARE_FILES: Final = ("compare.json", "compare.txt")
"""The files :func:`write_compare_report` and :func:`write_seed_sweep_report` write besides
their plots."""


def _clear_plots(out: Path) -> None:
    for name in PLOT_NAMES:
        (out / name).unlink(missing_ok=True)


class _Staging:
    """The temporary folder of :func:`staged` (``folder``) and the report folder its files go
    to (``out``); :meth:`final` is where a file written into ``folder`` ends up."""

    def __init__(self, folder: Path, out: Path) -> None:
        self.folder = folder
        self.out = out

    def final(self, paths: Sequence[Path]) -> list[Path]:
        """The paths in ``out`` of files written into ``folder``."""
        return [self.out / p.name for p in paths]


@contextlib.contextmanager
def staged(folder: str | Path, *, replaces: Sequence[str] = ()) -> Iterator[_Staging]:
    """Write a report's files into a temporary folder inside ``folder`` (created if need
    be); when the block ends without error, move every file it holds into ``folder``
    (``os.replace``: each file is the old one or the new one, never a part) and remove the
    files named in ``replaces`` that the new report lacks (an older run's plots), all or
    nothing (:func:`_commit`: a folder where a file goes is refused first). When the
    block fails (an ``OSError``, Ctrl-C), remove the temporary folder with what it holds, and
    ``folder`` and its parents that this call created, if empty: the file system is as it
    was."""
    out = Path(folder)
    created: list[Path] = []  # (the folders this call creates, the deepest first)
    up = out
    while not up.exists() and up.parent != up:
        created.append(up)
        up = up.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".kant-report-", dir=out))
    except BaseException:
        _remove_empty(created)
        raise
    done = False
    try:
        yield _Staging(tmp, out)
        names = sorted(p.name for p in tmp.iterdir())
        _commit(tmp, out, names, [n for n in replaces if n not in names])
        done = True
    finally:
        aside = tmp / _ASIDE
        if done or not (aside.is_dir() and any(aside.iterdir())):
            shutil.rmtree(tmp, ignore_errors=True)
        # (else an old file could not be put back: it is left there, not deleted)
        _remove_empty(created)


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove ``folders`` in order (the deepest first) until one is not there or not empty
    (the report is in it)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


_ASIDE: Final = ".old"
"""The folder inside a staging folder that the files a report replaces are moved into."""


def _commit(tmp: Path, out: Path, names: Sequence[str], removed: Sequence[str]) -> None:
    """Move the files ``names`` of ``tmp`` into ``out`` and remove ``removed`` from it, all
    or nothing. Every target is checked first: one that is there and is neither a file nor a
    symbolic link (a folder) raises ``OSError`` naming it before anything moves. Then the
    files there are moved aside into ``tmp`` and the new ones in; on any error or
    interruption (Ctrl-C, SIGTERM) the new ones are taken out and the old ones put back (one
    that cannot be is left in ``tmp``'s :data:`_ASIDE`), and the error goes on."""
    for name in (*names, *removed):
        target = out / name
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            what = "a folder" if stat.S_ISDIR(mode) else "not a file"
            raise OSError(
                errno.EISDIR if stat.S_ISDIR(mode) else errno.EEXIST,
                f"{target} is {what}, which a report does not replace (nothing was written)",
                str(target),
            )
    aside = tmp / _ASIDE
    aside.mkdir()
    moved: list[str] = []  # (old files moved aside)
    placed: list[str] = []  # (new files moved in)
    try:
        for name in (*names, *removed):
            if os.path.lexists(out / name):
                os.replace(out / name, aside / name)
                moved.append(name)
        for name in names:
            os.replace(tmp / name, out / name)
            placed.append(name)
    except BaseException:
        for name in placed:
            if name not in moved:
                with contextlib.suppress(OSError):
                    os.unlink(out / name)
        for name in moved:
            with contextlib.suppress(OSError):
                os.replace(aside / name, out / name)
        raise


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
    hint = None
    with staged(folder, replaces=PLOT_NAMES) as st:
        tmp = st.folder
        files = _json_and_text(
            tmp / "summary",
            result_json(scenario, policy, result),
            format_summary(scenario, policy, result),
        )
        files.append(_jobs_csv(tmp / "jobs.csv", result.records))
        files.append(_series_csv(tmp / "timeseries.csv", result))
        if plots:
            got, hint = write_plots(tmp, result, title=f"{scenario.name}: {policy.label}")
            files.extend(got)
    return st.final(files), hint


def _json_and_text(stem: Path, doc: Any, text: str) -> list[Path]:
    """Write ``doc`` as ``<stem>.json`` and ``text`` as ``<stem>.txt``; both paths."""
    out = [stem.with_suffix(".json"), stem.with_suffix(".txt")]
    out[0].write_text(json_text(doc, indent=2) + "\n", encoding="utf-8", errors="backslashreplace")
    out[1].write_text(text + "\n", encoding="utf-8", errors="backslashreplace")
    return out


def _jobs_csv(path: Path, records: Sequence[JobRecord]) -> Path:
    fields = (
        "job_id", "tenant", "gpus", "gang", "submitted_at", "started_at", "finished_at",
        "nodes_used", "groups_used", "preempted", "requeued", "state", "all_started_at",
    )  # fmt: skip
    with path.open("w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in records:
            w.writerow(["" if getattr(r, k) is None else getattr(r, k) for k in fields])
    return path


def _series_csv(path: Path, result: SimResult) -> Path:
    """One row per sample: its time exact (as jobs.csv writes times: six significant digits
    made every sample of a run past 10^6 s read the same time), the ratios to six significant
    digits, the jobs waiting as an int."""
    names = ("t", "gar", "sor", "gfr", "gfr_degree", "pending")
    with path.open("w", newline="", encoding="utf-8", errors="backslashreplace") as f:
        w = csv.writer(f)
        w.writerow(names)
        for s, pending in zip(result.samples, result.queue_lengths, strict=True):
            ratios = (s.gar, s.sor, s.gfr, s.gfr_degree)
            w.writerow([repr(float(s.t)), *(f"{x:.6g}" for x in ratios), pending])
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
    hint = None
    with staged(folder, replaces=PLOT_NAMES) as st:
        tmp = st.folder
        files = _json_and_text(
            tmp / "compare", compare_json(scenario, runs, wall_s), format_compare(scenario, runs)
        )
        if plots:
            got, hint = write_compare_plots(tmp, runs, title=scenario.name)
            files.extend(got)
    return st.final(files), hint


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
    hint = None
    with staged(folder, replaces=PLOT_NAMES) as st:
        tmp = st.folder
        files = _json_and_text(tmp / "compare", doc, format_seed_sweep(scenario_name, by_seed))
        if plots:
            sets = [p for p, _r in by_seed[0][1]]
            got, hint = write_seed_sweep_plots(tmp, scenario_name, sets, sw)
            files.extend(got)
    return st.final(files), hint


def clear_seed_sweep_report(folder: str | Path) -> None:
    """Remove from ``folder`` (if it is there) what :func:`write_seed_sweep_report` writes:
    ``compare.json``, ``compare.txt`` and every plot; for a sweep report's group that has
    nothing to show now, so an earlier report's figures are not taken for its own."""
    out = Path(folder)
    if not out.is_dir():
        return
    _clear_plots(out)
    for name in COMPARE_FILES:
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
