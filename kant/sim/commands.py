"""``kant simulate`` and ``kant compare``: argument parsing and the two commands.

:mod:`kant.cli` adds the subcommands with :func:`add_simulate_parser` and
:func:`add_compare_parser`; everything else lives here and in :mod:`kant.sim`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TextIO

import attrs

from kant.errors import KantError, ValidationError
from kant.queueing import policy_names
from kant.sim.analysis import compare_json, result_json, seed_sweep
from kant.sim.report import (
    format_compare,
    format_seed_sweep,
    format_summary,
    write_compare_report,
    write_report,
    write_seed_sweep_report,
)
from kant.sim.scenarios import (
    PREEMPTION_MODES,
    SCENARIOS,
    TRACES,
    PolicySet,
    Scenario,
    make_scenario,
    parse_seeds,
    placement_names,
    run_scenario,
    trace_scenario,
)
from kant.sim.simulator import RESTART, RESUME, Progress, SimResult

__all__ = ["add_compare_parser", "add_simulate_parser", "run_compare", "run_simulate"]

DEFAULT_OUT = "kant-report"


# --------------------------------------------------------------------------- arguments


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload and cluster")
    g.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default="paper-training",
        help="built-in scenario (default: paper-training, the paper's 8,000-GPU cluster)",
    )
    g.add_argument(
        "--trace",
        choices=TRACES,
        help="replay a real trace instead of a built-in scenario",
    )
    g.add_argument(
        "--trace-file",
        metavar="FILE",
        help="the trace file (default: the one in the shared trace folder, $KANT_TRACES)",
    )
    g.add_argument(
        "--cluster",
        metavar="FILE",
        help="cluster file (JSON/YAML, docs/topology.md) for a trace run",
    )
    g.add_argument("--jobs", type=int, metavar="N", help="only the first N jobs")
    g.add_argument("--seed", type=int, default=0, help="workload and failure seed (default 0)")
    g.add_argument(
        "--load",
        type=float,
        help="offered load of a built-in scenario's workload (default 0.95 training, 0.9 "
        "inference)",
    )
    s = p.add_argument_group("simulation")
    s.add_argument("--tick", type=float, help="at most one cycle per TICK seconds")
    s.add_argument("--grace", type=float, help="termination grace period of victims (s)")
    s.add_argument(
        "--on-interrupt",
        choices=(RESUME, RESTART),
        help="a preempted or lost job resumes its work (default) or restarts it",
    )
    s.add_argument("--mtbf", type=float, help="mean time between failures of a node (s)")
    s.add_argument("--mttr", type=float, help="time to repair a failed node (s)")
    s.add_argument("--horizon", type=float, help="stop after this much simulated time (s)")
    o = p.add_argument_group("output")
    o.add_argument(
        "--out", default=DEFAULT_OUT, metavar="DIR", help=f"report folder (default {DEFAULT_OUT})"
    )
    o.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    o.add_argument("--quiet", action="store_true", help="no progress line")
    o.add_argument("--json", action="store_true", help="last line: one JSON object")


def add_simulate_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="simulate a scenario or a trace and report the paper's metrics",
        description=(
            "Run the discrete-event simulator (default: the paper's 8,000-GPU training "
            "cluster with 20,000 jobs under backfill + ebinpack), print GAR, SOR, GFR, JWTD "
            "and JTTED, and write a report folder with plots."
        ),
    )
    _common(p)
    g = p.add_argument_group("policies")
    g.add_argument("--queueing", choices=policy_names(), help="queueing policy")
    g.add_argument("--placement", choices=placement_names(), help="placement strategy")
    g.add_argument(
        "--preemption",
        choices=PREEMPTION_MODES,
        default="auto",
        help="auto (default): only backfill preempts, plus quota reclaim where tenants have quotas",
    )
    g.add_argument("--threshold", type=float, help="Backfill head preemption threshold (s)")
    p.set_defaults(func=run_simulate)
    return p


def add_compare_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "compare",
        help="run several policy sets on the same workload and compare them",
        description=(
            "Run several policy sets (QUEUEING+PLACEMENT[+PREEMPTION]) on one scenario and "
            "print the paper-style comparison (median GAR / SOR, mean GFR, JWTD and JTTED by "
            "job size), with plots in the report folder."
        ),
    )
    _common(p)
    p.add_argument(
        "--sets",
        metavar="LIST",
        help="comma-separated policy sets (default: strict-fifo+ebinpack, backfill+ebinpack, "
        "best-effort-fifo+ebinpack, backfill+spread)",
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
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="runs in parallel (processes; default: up to 2)",
    )
    p.set_defaults(func=run_compare)
    return p


# --------------------------------------------------------------------------- helpers


def _scenario(args: argparse.Namespace) -> Scenario:
    if args.trace is not None:
        if args.load is not None:
            raise SystemExit("kant: --load goes with a built-in scenario, not --trace")
        sc = trace_scenario(
            args.trace, path=args.trace_file, cluster=args.cluster, jobs=args.jobs, seed=args.seed
        )
    else:
        if args.cluster is not None or args.trace_file is not None:
            raise SystemExit("kant: --cluster and --trace-file go with --trace")
        sc = make_scenario(args.scenario, jobs=args.jobs, seed=args.seed, load=args.load)
    changes = {
        "tick": args.tick,
        "grace_period": args.grace,
        "on_interrupt": args.on_interrupt,
        "mtbf": args.mtbf,
        "mttr": args.mttr,
        "horizon": args.horizon,
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    if changes:
        sc = attrs.evolve(sc, config=attrs.evolve(sc.config, **changes))
    return sc


class ProgressLine:
    """A one-line progress display on ``stream``: rewritten in place on a terminal, a new
    line at most every ``every_s`` seconds otherwise. Wall-clock time is read only here, to
    pace the display."""

    def __init__(self, label: str, stream: TextIO = sys.stderr, every_s: float = 0.5) -> None:
        self.label = label
        self.stream = stream
        self.tty = stream.isatty()
        self.every = every_s if self.tty else max(every_s, 5.0)
        self.t0 = time.perf_counter()
        self.last = -1e9
        self.shown = False

    def __call__(self, p: Progress) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        self.last = now
        span = max(p.end_estimate, 1.0)
        text = (
            f"{self.label}  day {p.now / 86400:5.2f} (arrivals end {span / 86400:.2f})  "
            f"jobs {p.arrived:,}/{p.total_jobs:,} arrived, {p.finished:,} done, "
            f"{p.running:,} running, {p.pending:,} waiting  cycles {p.cycles:,}  "
            f"{now - self.t0:5.1f} s"
        )
        if self.tty:
            self.stream.write("\r" + text[:160].ljust(100))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# --------------------------------------------------------------------------- commands


def run_simulate(args: argparse.Namespace) -> int:
    try:
        sc = _scenario(args)
        base = sc.default_policy
        pol = PolicySet(
            queueing=args.queueing or base.queueing,
            placement=args.placement or base.placement,
            preemption=args.preemption,
            threshold=args.threshold,
        )
    except KantError as e:
        print(f"kant simulate: {e}", file=sys.stderr)
        return 2
    bar = None if args.quiet else ProgressLine(f"simulate {sc.name} {pol.label}")
    result = run_scenario(sc, pol, progress=bar)
    if bar is not None:
        bar.done()
    print(format_summary(sc, pol, result))
    files, hint = write_report(args.out, sc, pol, result, plots=not args.no_plots)
    if hint:
        print(hint, file=sys.stderr)
    print(f"\nreport: {args.out}/ ({', '.join(f.name for f in files)})")
    if args.json:
        out = result_json(sc, pol, result)
        out["report"] = str(args.out)
        print(json.dumps(out))
    return 0


def _one(item: tuple[Scenario, PolicySet]) -> SimResult:
    sc, pol = item
    return run_scenario(sc, pol)


def run_compare(args: argparse.Namespace) -> int:
    if getattr(args, "seeds", None):
        return _run_seed_sweep(args)
    try:
        sc = _scenario(args)
        sets = _sets(args, sc)
    except KantError as e:
        print(f"kant compare: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results = _run_all(sc, sets, max(1, args.workers), quiet=args.quiet)
    wall = time.perf_counter() - t0
    runs = list(zip(sets, results, strict=True))
    print(format_compare(sc, runs))
    files, hint = write_compare_report(args.out, sc, runs, wall, plots=not args.no_plots)
    if hint:
        print(hint, file=sys.stderr)
    print(f"\nreport: {args.out}/ ({', '.join(f.name for f in files)})  wall {wall:.1f} s")
    if args.json:
        print(json.dumps(compare_json(sc, runs, wall)))
    return 0


def _sets(args: argparse.Namespace, sc: Scenario) -> list[PolicySet]:
    if args.sets:
        sets = [PolicySet.parse(t) for t in args.sets.split(",") if t.strip()]
    else:
        sets = list(sc.compare_sets)
    if len({p.label for p in sets}) != len(sets):
        raise SystemExit("kant compare: the policy sets must differ")
    return sets


def _run_seed_sweep(args: argparse.Namespace) -> int:
    """``kant compare --seeds``: every policy set on every seed's scenario."""
    try:
        seeds = parse_seeds(args.seeds)
        if len(set(seeds)) != len(seeds):
            raise ValidationError("seeds", args.seeds, "name each seed once")
        scenarios = {
            seed: _scenario(argparse.Namespace(**{**vars(args), "seed": seed})) for seed in seeds
        }
        first = scenarios[seeds[0]]
        sets = _sets(args, first)
    except KantError as e:
        print(f"kant compare: {e}", file=sys.stderr)
        return 2
    say: Callable[[str], None] = (lambda _m: None) if args.quiet else _stderr
    workers = max(1, args.workers)
    tasks = [(scenarios[seed], pol) for seed in seeds for pol in sets]
    say(f"compare {first.name}: {len(sets)} policy sets x {len(seeds)} seeds, {workers} workers")
    t0 = time.perf_counter()
    results = _run_tasks(
        tasks, workers, say, lambda i, pol: f"seed {seeds[i // len(sets)]} {pol.label}"
    )
    wall = time.perf_counter() - t0
    by_seed = [
        (seed, list(zip(sets, results[k * len(sets) : (k + 1) * len(sets)], strict=True)))
        for k, seed in enumerate(seeds)
    ]
    print(format_seed_sweep(first.name, by_seed))
    files, hint = write_seed_sweep_report(
        args.out, first.name, by_seed, scenarios, wall, plots=not args.no_plots
    )
    if hint:
        print(hint, file=sys.stderr)
    print(f"\nreport: {args.out}/ ({', '.join(f.name for f in files)})  wall {wall:.1f} s")
    if args.json:
        print(json.dumps({"scenario": first.name, **seed_sweep(by_seed), "wall_s": round(wall, 3)}))
    return 0


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
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=workers))
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
