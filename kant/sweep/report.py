"""``kant sweep report``: the tables and plots of ``kant compare`` and ``kant packing`` from
any store, with 95% confidence intervals over seeds.

Simulation runs are grouped by scenario (every option but the seed and the policy's); in a
group the columns are the policy sets and the rows the figures of ``kant compare --seeds``
(:func:`kant.sim.analysis.seed_sweep`) over the seeds every set finished. Packing runs are
grouped by trace, node list and inflation; a row per policy gives the allocation ratio at
100% and 130% arrived load and the fragmented GPUs at 130%, seed means with their intervals.
The store keeps figures, not time series, so the over-time plots of ``kant compare`` are not
redrawn: the sweep report draws the pooled waits, the seed means with their intervals and the
packing curves.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from kant.sim.analysis import mean_ci, seed_sweep
from kant.sim.packing import PackingResult, mean_curve, seed_text
from kant.sim.report import (
    clear_seed_sweep_report,
    format_seed_sweep,
    staged,
    write_seed_sweep_report,
)
from kant.sim.scenarios import PolicySet
from kant.sweep.grid import POLICY_OPTIONS

__all__ = [
    "PackingGroup",
    "SimGroup",
    "format_report",
    "packing_groups",
    "sim_groups",
    "write_sweep_report",
]


@attrs.frozen(kw_only=True)
class SimGroup:
    """The simulation runs of one scenario: ``by_seed`` as
    :func:`~kant.sim.analysis.seed_sweep` takes it (stored metrics as runs), and the seeds
    left out because some set has no ``ok`` run on them."""

    title: str
    sets: tuple[PolicySet, ...]
    by_seed: tuple[tuple[int, tuple[tuple[PolicySet, Mapping[str, Any]], ...]], ...]
    incomplete: tuple[int, ...]
    wall_s: float
    """The sum of the wall times of the group's runs (as they ran, on their workers)."""


@attrs.frozen(kw_only=True)
class PackingGroup:
    """The packing runs of one trace, node list and inflation: per policy, its runs'
    metrics by seed."""

    title: str
    trace: str
    inflate: float
    runs: Mapping[str, Mapping[int, Mapping[str, Any]]]


def _ok(records: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    latest = {r["key"]: r for r in records}
    return [r for r in latest.values() if r["kind"] == kind and r["status"] == "ok"]


def _label(m: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    label = f"{m['queueing']}+{m['placement']}"
    if m.get("preemption", "auto") != "auto":
        label += f"+{m['preemption']}"
    if params.get("threshold") is not None:
        label += f" threshold={params['threshold']:.15g}"  # (:g made 1e6 of 1000001)
    return label


def sim_groups(records: Sequence[Mapping[str, Any]]) -> list[SimGroup]:
    """The ``sim`` runs of a store (the last record of each run), by scenario."""
    groups: dict[str, dict[str, Any]] = {}
    for r in _ok(records, "sim"):
        p, m = r["params"], r["metrics"]
        scen = {k: v for k, v in p.items() if k not in POLICY_OPTIONS and k != "seed"}
        extra = ", ".join(
            f"{k}={v}" for k, v in sorted(scen.items()) if k not in ("scenario", "trace")
        )
        title = m["scenario"] + (f" ({extra})" if extra else "")
        g = groups.setdefault(title, {"sets": {}, "runs": {}, "wall": 0.0})
        g["wall"] += r.get("wall_s") or 0.0
        label = _label(m, p)
        if label not in g["sets"]:
            # the names as the run stored them: a strategy or policy registered by the process
            # that ran the sweep need not be registered in the one that reports it
            with attrs.validators.disabled():
                g["sets"][label] = PolicySet(
                    queueing=m["queueing"], placement=m["placement"],
                    preemption=m["preemption"], threshold=p.get("threshold"), name=label,
                )  # fmt: skip
        g["runs"][(p.get("seed", 0), label)] = m
    out = []
    for title, g in sorted(groups.items()):
        sets = sorted(g["sets"].values(), key=lambda s: s.label)
        seeds = sorted({seed for seed, _l in g["runs"]})
        full = [s for s in seeds if all((s, p.label) in g["runs"] for p in sets)]
        by_seed = tuple((s, tuple((p, g["runs"][(s, p.label)]) for p in sets)) for s in full)
        incomplete = tuple(s for s in seeds if s not in full)
        out.append(
            SimGroup(
                title=title,
                sets=tuple(sets),
                by_seed=by_seed,
                incomplete=incomplete,
                wall_s=g["wall"],
            )
        )
    return out


def packing_groups(records: Sequence[Mapping[str, Any]]) -> list[PackingGroup]:
    """The ``packing`` runs of a store (the last record of each run), by trace, node list
    and inflation."""
    groups: dict[tuple[str, str, float], dict[str, dict[int, Mapping[str, Any]]]] = {}
    for r in _ok(records, "packing"):
        p = r["params"]
        k = (p["pods"], p["nodes"], float(p.get("inflate", 1.3)))
        pol = str(p.get("policy", "fgd")).lower()
        groups.setdefault(k, {}).setdefault(pol, {})[int(p.get("seed", 42))] = r["metrics"]
    pods_name = _names({pods for pods, _n, _i in groups})
    nodes_name = _names({nodes for _p, nodes, _i in groups})
    out = []
    for (pods, nodes, inflate), runs in sorted(groups.items()):
        trace = pods_name[pods]
        title = f"{trace} on {nodes_name[nodes]}, inflate {inflate:g}"
        out.append(PackingGroup(title=title, trace=trace, inflate=inflate, runs=runs))
    return out


def _names(paths: set[str]) -> dict[str, str]:
    """Each path's name in a title: its file name without the extension, or the path as the
    grid writes it when another path has the same name (``a/pods.csv``, ``b/pods.csv``)."""
    stems: dict[str, set[str]] = {}
    for p in paths:
        stems.setdefault(Path(p).stem, set()).add(p)
    return {p: Path(p).stem if len(stems[Path(p).stem]) == 1 else p for p in paths}


def packing_result(group: PackingGroup, policy: str) -> PackingResult:
    """The seed means of one policy in a packing group, as ``kant packing`` computes them."""
    runs = group.runs[policy]
    seeds = sorted(runs)
    return PackingResult(
        policy=policy,
        trace=group.trace,
        seeds=tuple(seeds),
        inflate=group.inflate,
        alloc_at=mean_curve([runs[s]["alloc"] for s in seeds]),
        frag_at=mean_curve([runs[s]["frag"] for s in seeds]),
        wall_s=math.nan,
        runs=(),
    )


def _at(curve: Sequence[float | None], p: int) -> float:
    v = curve[p]
    return math.nan if v is None else float(v)


def _ci_text(values: Sequence[float]) -> str:
    """The mean ± CI half-width of the values that are numbers, with ``(k/n seeds)`` when
    only ``k`` of the ``n`` seeds have one (a run whose curve has no value at that load);
    ``-`` when none has."""
    mean, half = mean_ci(values)
    if math.isnan(mean):
        return "-"
    k = sum(1 for v in values if not math.isnan(v))
    short = "" if k == len(values) else f" ({k}/{len(values)} seeds)"
    return f"{mean:.2f}" + ("" if math.isnan(half) else f" ±{half:.2f}") + short


def format_packing(group: PackingGroup) -> str:
    """One packing group's table: per policy, seed means (± 95% CI half-width) of the
    allocation ratio at 100% and 130% arrived load and of fragmented GPUs at 130%."""
    rows = [["policy", "seeds", "alloc % at 100", "alloc % at 130", "frag % at 130"]]
    for pol in sorted(group.runs):
        runs = group.runs[pol]
        seeds = sorted(runs)
        rows.append(
            [
                pol,
                f"{seed_text(seeds)} ({len(seeds)})",
                _ci_text([_at(runs[s]["alloc"], 100) for s in seeds]),
                _ci_text([_at(runs[s]["alloc"], 130) for s in seeds]),
                _ci_text([_at(runs[s]["frag"], 130) for s in seeds]),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"packing  {group.title} (seed means ± the 95% CI half-width over seeds)", ""]
    for k, r in enumerate(rows):
        lines.append(
            "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _failed_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    latest = {r["key"]: r for r in records}
    bad = [r for r in latest.values() if r["status"] != "ok"]
    if not bad:
        return []
    lines = [f"failed runs ({len(bad)}; kant sweep --retry-failed runs them again):"]
    for r in bad:
        params = ", ".join(f"{k}={v}" for k, v in sorted(r["params"].items()))
        lines.append(f"  {r['key']}  {params}: {r['error']}")
    return lines


def format_report(records: Sequence[Mapping[str, Any]]) -> str:
    """Every group's table, then the runs whose last record failed."""
    parts = []
    for g in sim_groups(records):
        if g.by_seed:
            parts.append(format_seed_sweep(g.title, g.by_seed))
        if g.incomplete:
            parts.append(
                f"{g.title}: seeds {seed_text(g.incomplete)} left out (not every policy set "
                "has an ok run on them)"
            )
    parts.extend(format_packing(g) for g in packing_groups(records))
    failed = _failed_lines(records)
    if failed:
        parts.append("\n".join(failed))
    if not parts:
        return "the store holds no runs"
    return "\n\n".join(parts)


_SLUG = 80  # the longest group folder name


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")


def _folders(titles: Sequence[str]) -> list[str]:
    """A folder name per group title, each its own: the title with every character but
    letters, digits and ``_.=-`` as ``_``; one that would be longer than 80 characters, the
    same as another group's (case aside) or not a usable name (``..``) is cut to 71 and
    given ``-`` and 8 hex digits of a hash of the whole title (a second group of the very
    same title gets ``-2``, and so on)."""
    slugs = [_slug(t) for t in titles]
    taken = Counter(s.lower() for s in slugs)  # (a file system may not tell A from a)
    out: list[str] = []
    for title, slug in zip(titles, slugs, strict=True):
        if len(slug) > _SLUG or taken[slug.lower()] > 1 or slug in ("", ".", ".."):
            digest = hashlib.sha256(title.encode()).hexdigest()[:8]
            slug = f"{slug[: _SLUG - 9]}-{digest}"
        name, n = slug, 1
        while name.lower() in (o.lower() for o in out):
            n += 1
            name = f"{slug}-{n}"
        out.append(name)
    return out


def write_sweep_report(
    records: Sequence[Mapping[str, Any]], folder: str | Path, *, plots: bool = True
) -> tuple[list[Path], str | None]:
    """Write ``report.txt`` (:func:`format_report`) into ``folder``, and per group a
    folder: a simulation group's ``compare.txt``, ``compare.json``, ``compare_jwtd.png`` and
    ``compare_ci.png`` (as ``kant compare --seeds``), a packing group's ``packing.txt`` and
    ``packing.png`` (allocation ratio against arrived load, one line per policy). A
    simulation group with no seed every set finished has no figures: its folder, if an
    earlier report made it, is cleared of them. Returns the files and a hint when plots were
    skipped."""
    out = Path(folder)
    with staged(out) as st:  # (whole or not at all, as every report file)
        (st.folder / "report.txt").write_text(
            format_report(records) + "\n", encoding="utf-8", errors="backslashreplace"
        )
    files = [out / "report.txt"]
    hint = None
    sims, packs = sim_groups(records), packing_groups(records)
    folders = _folders([g.title for g in sims] + [g.title for g in packs])
    for g, name in zip(sims, folders[: len(sims)], strict=True):
        if not g.by_seed:  # (no seed every set finished: no figures, none of an earlier report)
            clear_seed_sweep_report(out / name)
            continue
        got, h = write_seed_sweep_report(
            out / name, g.title, g.by_seed, None, g.wall_s, plots=plots
        )
        files += got
        hint = hint or h
    for pg, name in zip(packs, folders[len(sims) :], strict=True):
        sub = out / name
        # (whole or not at all; no earlier run's plot left behind)
        with staged(sub, replaces=("packing.png",)) as st:
            (st.folder / "packing.txt").write_text(
                format_packing(pg) + "\n", encoding="utf-8", errors="backslashreplace"
            )
            got = [sub / "packing.txt"]
            if plots:
                try:
                    from kant.sim.report.plots import plot_curves

                    runs = [packing_result(pg, p) for p in sorted(pg.runs)]
                    plot_curves(runs, st.folder / "packing.png")
                    got.append(sub / "packing.png")
                except Exception as e:  # matplotlib missing: say so, keep the tables
                    hint = hint or f"plots skipped: {e}"
        files += got
    return files, hint


def sweep_json(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The report as one JSON object: per simulation group its :func:`seed_sweep` figures,
    per packing group its seed means per policy; and the failed runs."""
    latest = {r["key"]: r for r in records}
    return {
        "sim": [
            {"title": g.title, "sweep": seed_sweep(g.by_seed)}
            for g in sim_groups(records)
            if g.by_seed
        ],
        "packing": [
            {
                "title": g.title,
                "policies": {
                    p: packing_result(g, p).to_json() | {"wall_s": None} for p in sorted(g.runs)
                },
            }
            for g in packing_groups(records)
        ],
        "failed": [
            {"key": r["key"], "params": r["params"], "error": r["error"]}
            for r in latest.values()
            if r["status"] != "ok"
        ],
    }
