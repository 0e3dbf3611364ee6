"""``kant compare``: argument parsing and the command (several policy sets on one scenario,
or on each of several seeds, in worker processes).

The figures come from :mod:`kant.sim.analysis` and are shown by :mod:`kant.sim.report`; the
options shared with ``kant simulate`` are in :mod:`kant.cli.simulate`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Final

from kant.cli.options import UsageError, number, writing
from kant.cli.simulate import (
    add_common_arguments,
    check_common_args,
    check_own_inputs,
    load_warning,
    scenario_from_args,
)
from kant.errors import KantError, ValidationError
from kant.sim.analysis import compare_json, json_text, seed_sweep
from kant.sim.report import (
    COMPARE_FILES,
    PLOT_NAMES,
    format_compare,
    format_seed_sweep,
    write_compare_report,
    write_seed_sweep_report,
)
from kant.sim.scenarios import PolicySet, Scenario, parse_seeds, parse_sets, run_scenario
from kant.sim.simulator import SimResult

__all__ = ["add_compare_parser", "run_compare"]


def add_compare_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``kant compare`` to the top-level sub-command parsers and return its parser."""
    p: argparse.ArgumentParser = sub.add_parser(
        "compare",
        help="run several policy sets on the same workload and compare them",
        description=(
            "Run several policy sets (QUEUEING+PLACEMENT[+PREEMPTION]) on one scenario and "
            "print the paper-style comparison (median GAR / SOR, mean GFR, JWTD and JTTED by "
            "job size), with plots in the report folder."
        ),
    )
    add_common_arguments(p)
    p.add_argument(
        "--sets",
        metavar="LIST",
        help="comma-separated policy sets, QUEUEING+PLACEMENT[+PREEMPTION] (default: "
        "strict-fifo+ebinpack, backfill+ebinpack, best-effort-fifo+ebinpack, backfill+spread)",
    )
    p.add_argument(
        "--seeds",
        metavar="LIST",
        help="run every set on each of these seeds (e.g. 0-9) and print seed-mean GAR / SOR "
        "/ GFR, waits pooled over every job of every seed, and in how many seeds each "
        "experiment goes the paper's way (replaces --seed)",
    )
    p.add_argument(
        "--workers",
        type=number(int, low=1),
        default=min(2, os.cpu_count() or 1),
        help="runs in parallel (processes; default: the CPUs, at most 2)",
    )
    p.set_defaults(func=run_compare, check=check_compare_args, log_default="error")
    return p


def check_compare_args(args: argparse.Namespace) -> None:
    """:func:`~kant.cli.simulate.check_common_args`, plus ``--seeds`` (well-formed, each seed
    once, not with ``--seed``) and ``--sets`` (well-formed, all different)."""
    check_common_args(args)
    if args.seeds is not None:
        if args.seed is not None:
            raise UsageError(f"--seed {args.seed} and --seeds {args.seeds}: pick one")
        try:
            seeds = parse_seeds(args.seeds)
        except KantError as e:
            raise UsageError(f"--seeds {args.seeds!r}: {getattr(e, 'reason', e)}") from None
        if len(set(seeds)) != len(seeds):
            raise UsageError(f"--seeds {args.seeds!r}: name each seed once")
    if args.sets is not None:
        try:
            sets = parse_sets(args.sets)
        except KantError as e:
            raise UsageError(f"--sets {args.sets!r}: {getattr(e, 'reason', e)}") from None
        if not sets:
            raise UsageError(f"--sets {args.sets!r}: name at least one policy set")
        if len({p.label for p in sets}) != len(sets):
            raise UsageError(f"--sets {args.sets!r}: the policy sets must differ")


def _one(item: tuple[Scenario, PolicySet]) -> SimResult:
    sc, pol = item
    return run_scenario(sc, pol)


def run_compare(args: argparse.Namespace) -> int:
    """``kant compare``: run every policy set (``--seeds``: on every seed), print the
    comparison, write the report folder (and print the JSON line). A bad value in the options
    or the files they name raises :class:`~kant.errors.KantError` before any run
    (:func:`kant.cli.main` prints it on one line, exit 2)."""
    # (--seeds: the runs' store too, written afresh before the first run)
    store = ("runs.jsonl", PARTIAL_STORE) if getattr(args, "seeds", None) else ()
    check_own_inputs(args, (*COMPARE_FILES, *PLOT_NAMES, *store))
    if getattr(args, "seeds", None):
        return _run_seed_sweep(args)
    sc = scenario_from_args(args)
    sets = _sets(args, sc)
    note = load_warning(args, sc, sets)
    if note:
        print(f"kant compare: note: {note}", file=sys.stderr)
    t0 = time.perf_counter()
    results = _run_all(sc, sets, max(1, min(args.workers, len(sets))), quiet=args.quiet)
    wall = time.perf_counter() - t0
    runs = list(zip(sets, results, strict=True))
    print(format_compare(sc, runs))
    if note:
        print(f"\nnote: {note}")
    with writing("--out", args.out):
        files, hint = write_compare_report(args.out, sc, runs, wall, plots=not args.no_plots)
    if hint:
        print(hint, file=sys.stderr)
    print(f"\nreport: {args.out}/ ({', '.join(f.name for f in files)})  wall {wall:.1f} s")
    if args.json:
        print(json_text(compare_json(sc, runs, wall)))
    return 0


def _sets(args: argparse.Namespace, sc: Scenario) -> list[PolicySet]:
    sets = parse_sets(args.sets) if args.sets else list(sc.compare_sets)
    if len({p.label for p in sets}) != len(sets):
        raise UsageError("--sets: the policy sets must differ")
    return sets


def _run_seed_sweep(args: argparse.Namespace) -> int:
    """``kant compare --seeds``: every policy set on every seed's scenario, run by the sweep
    runner (:mod:`kant.sweep`) into ``<out>/runs.jsonl`` (written afresh)."""
    from kant.sweep import Grid, LocalPool, ProgressBar, Store, run_sweep

    names = ("trace", "trace_file", "cluster", "jobs", "load", "tick", "grace",
             "on_interrupt", "mtbf", "mttr", "horizon", "max_interruptions", "seeds",
             "sets")  # fmt: skip
    options = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    if args.trace is None:
        options["scenario"] = args.scenario
    specs = Grid("compare", options).runs()
    sets = _sets_of(specs)
    if len({p.label for p in sets}) != len(sets):
        raise ValidationError("sets", args.sets, "the policy sets must differ")
    seeds = list(dict.fromkeys(s.params["seed"] for s in specs))
    workers = max(1, min(args.workers, len(specs)))  # (a process per run at most)
    if not args.quiet:
        _stderr(f"compare: {len(sets)} policy sets x {len(seeds)} seeds, {workers} workers")
    # the runs are recorded in a store of their own, which replaces the folder's runs.jsonl
    # once one is recorded: until then (a run's input refused as it is built) the folder
    # keeps an earlier compare's store and report as they were
    final = Path(args.out) / "runs.jsonl"
    store = Store(final.with_name(PARTIAL_STORE))
    with writing("--out", args.out, after_run=False):  # before any run
        store.path.parent.mkdir(parents=True, exist_ok=True)
        store.path.unlink(missing_ok=True)
    bar = None if args.quiet else ProgressBar(len(specs), label="compare")
    t0 = time.perf_counter()
    try:
        summary = run_sweep(
            specs,
            store,
            LocalPool(workers),
            on_done=None if bar is None else (lambda _s, rec: bar.update(rec["status"] == "ok")),
            strict_prepare=True,
        )
    except BaseException:
        _take_store(args.out, store.path, final, failed=True)
        raise
    wall = time.perf_counter() - t0
    latest = store.latest()
    _take_store(args.out, store.path, final, failed=bool(summary.failed))
    store = Store(final)
    if summary.failed:
        for s in specs:
            if latest[s.key]["status"] != "ok":
                print(f"kant compare: {dict(s.params)} failed: {latest[s.key]['error']}",
                      file=sys.stderr)  # fmt: skip
        return 1
    k = len(sets)

    def run(key: str) -> dict[str, Any]:  # the stored metrics and the run's wall time
        return {**latest[key]["metrics"], "wall_s": latest[key]["wall_s"]}

    by_seed = [
        (seed, [(p, run(s.key)) for p, s in zip(sets, specs[i * k : (i + 1) * k], strict=True)])
        for i, seed in enumerate(seeds)
    ]
    name = by_seed[0][1][0][1]["scenario"]
    print(format_seed_sweep(name, by_seed))
    with writing("--out", args.out):
        files, hint = write_seed_sweep_report(args.out, name, by_seed, None, wall,
                                              plots=not args.no_plots)  # fmt: skip
    if hint:
        print(hint, file=sys.stderr)
    written = ", ".join([*(f.name for f in files), store.path.name])  # (the runs' records too)
    print(f"\nreport: {args.out}/ ({written})  wall {wall:.1f} s")
    if args.json:
        print(json_text({"scenario": name, **seed_sweep(by_seed), "wall_s": round(wall, 3)}))
    return 0


PARTIAL_STORE: Final = "runs.jsonl.part"
"""Where ``kant compare --seeds`` records its runs until the first is recorded."""


def _take_store(out: str, part: Path, final: Path, *, failed: bool) -> None:
    """Make the runs recorded in ``part`` the folder's store ``final`` (nothing when none
    was: the folder stays as it was); ``failed``: the report of an earlier compare goes
    too, not left beside a store of runs it was not made of."""
    if not part.exists():
        return
    with writing("--out", out):
        os.replace(part, final)
        if failed:
            for name in (*COMPARE_FILES, *PLOT_NAMES):
                (final.parent / name).unlink(missing_ok=True)


def _sets_of(specs: Sequence[Any]) -> list[PolicySet]:
    """The policy sets of a compare grid's runs, in order (those of its first seed)."""
    first = specs[0].params["seed"]
    return [
        PolicySet(queueing=s.params["queueing"], placement=s.params["placement"],
                  preemption=s.params["preemption"])
        for s in specs
        if s.params["seed"] == first
    ]  # fmt: skip


def _run_all(
    sc: Scenario, sets: Sequence[PolicySet], workers: int, *, quiet: bool
) -> list[SimResult]:
    say: Callable[[str], None] = (lambda _m: None) if quiet else _stderr
    say(f"compare {sc.name}: {len(sets)} policy sets, {len(sc.jobs):,} jobs, {workers} workers")
    return _run_tasks([(sc, pol) for pol in sets], workers, say, lambda _i, pol: pol.label)


def _run_tasks(
    tasks: Sequence[tuple[Scenario, PolicySet]],
    workers: int,
    say: Callable[[str], None],
    label: Callable[[int, PolicySet], str],
) -> list[SimResult]:
    """Run every (scenario, policy set), in ``workers`` processes when more than one, in
    order, saying ``label(i, policy)`` and the elapsed time as each finishes."""
    t0 = time.perf_counter()
    results: list[SimResult] = []
    with contextlib.ExitStack() as stack:
        if workers > 1 and len(tasks) > 1:
            # (a process per task at most: the pool forks all its workers at once)
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=min(workers, len(tasks))))
            done: Iterator[SimResult] = pool.map(_one, tasks)
        else:
            done = map(_one, tasks)
        for i, r in enumerate(done):
            results.append(r)
            say(f"  [{i + 1}/{len(tasks)}] {label(i, tasks[i][1])}  "
                f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
    return results


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
