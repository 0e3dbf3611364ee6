"""``kant simulate``: argument parsing and the command, plus what ``kant compare`` shares
with it (:func:`add_common_arguments`, :func:`scenario_from_args`, :class:`ProgressLine`).

The simulation itself is :func:`kant.sim.run_scenario`; the figures come from
:mod:`kant.sim.analysis` and are shown by :mod:`kant.sim.report`.
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import attrs

from kant.cli.options import (
    UsageError,
    existing_file,
    number,
    out_dir,
    readable_input,
    refuse_own_input,
    writing,
)
from kant.config import load_config
from kant.errors import ValidationError
from kant.queueing import policy_names
from kant.sim.analysis import json_text, result_json
from kant.sim.report import PLOT_NAMES, REPORT_FILES, format_summary, write_report
from kant.sim.scenarios import (
    LOAD_RANGE,
    MAX_JOBS,
    MAX_TICK,
    PREEMPTION_MODES,
    SCENARIO_OPTIONS,
    SCENARIOS,
    TARGET_LOAD,
    TRACES,
    UNDER_LOAD_ADVICE,
    PolicySet,
    Scenario,
    check_preemption,
    load_note,
    placement_names,
    run_scenario,
    scenario_from_options,
    zone_note,
)
from kant.sim.simulator import (
    MAX_RESTART_LIMIT,
    MAX_SPAN,
    MIN_MTBF,
    RESTART,
    RESUME,
    EstimateAccuracy,
    Progress,
    SimResult,
    estimate_accuracy,
    restarts_unbounded,
)

__all__ = [
    "DEFAULT_OUT",
    "ProgressLine",
    "add_common_arguments",
    "add_simulate_parser",
    "check_common_args",
    "check_own_inputs",
    "check_simulate_args",
    "run_simulate",
    "scenario_from_args",
    "target_load",
]

DEFAULT_OUT: Final = "kant-report"
"""The default report folder."""


class _Given(argparse.Action):
    """Stores the value and notes that the option was given (``<dest>_given``)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """The options ``kant simulate`` and ``kant compare`` share: workload and cluster,
    simulation, output."""
    g = p.add_argument_group("workload and cluster")
    g.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        action=_Given,
        default="paper-training",
        help="built-in scenario (default: paper-training, the paper's 8,000-GPU cluster)",
    )
    p.set_defaults(scenario_given=False)
    g.add_argument(
        "--trace",
        choices=TRACES,
        help="replay a real trace instead of a built-in scenario (docs/traces.md)",
    )
    g.add_argument(
        "--trace-file",
        metavar="FILE",
        type=existing_file,
        help="the trace file (default: the one in the shared trace folder, $KANT_TRACES)",
    )
    g.add_argument(
        "--cluster",
        metavar="FILE",
        type=existing_file,
        help="cluster file (JSON/YAML, docs/topology.md) for a trace run (default: a fat tree "
        "sized for the trace; openb: its node list)",
    )
    g.add_argument(
        "--jobs",
        type=number(int, low=1, high=MAX_JOBS),
        metavar="N",
        help=f"only the first N jobs, at most {MAX_JOBS:,} (default: all the scenario's or "
        "trace's)",
    )
    g.add_argument("--seed", type=number(int, low=0), help="workload and failure seed (default 0)")
    g.add_argument(
        "--load",
        type=number(float, low=LOAD_RANGE[0], high=LOAD_RANGE[1]),
        help="offered load of a built-in scenario's workload (default 0.95 paper-training and "
        "inference-paper, 0.9 inference); with --trace, size the cluster for it (default: an "
        f"SWF log on its own machine, MaxProcs; other traces 0.8); {LOAD_RANGE[0]:g} to "
        f"{LOAD_RANGE[1]:g}",
    )
    s = p.add_argument_group("simulation")
    s.add_argument(
        "--tick",
        type=number(float, low=0, high=MAX_TICK),
        help="at most one cycle per TICK seconds, 0: at every change, at most "
        f"{MAX_TICK:g} (default: the scenario's: 60 s paper-training, 30 s inference and "
        "inference-paper)",
    )
    s.add_argument(
        "--grace",
        type=number(float, low=0, high=MAX_SPAN),
        help="termination grace period of victims in s (default: the scenario's, 30 s)",
    )
    s.add_argument(
        "--on-interrupt",
        choices=(RESUME, RESTART),
        help="a preempted or lost job resumes its work or restarts it (default: resume)",
    )
    s.add_argument(
        "--mtbf",
        type=number(float, low=MIN_MTBF, high=MAX_SPAN),
        help=f"mean time between failures of a node in s, at least {MIN_MTBF:g} (default: no "
        "failures)",
    )
    s.add_argument(
        "--mttr",
        type=number(float, low=0, high=MAX_SPAN),
        help="time to repair a failed node in s (default 3600)",
    )
    s.add_argument(
        "--horizon",
        type=number(float, low=0, low_inclusive=False, high=MAX_SPAN),
        help="stop after this much simulated time in s (default: run until every job ends)",
    )
    s.add_argument(
        "--max-interruptions",
        type=number(int, low=0),
        metavar="N",
        help="a job whose nodes failed under it more than N times fails (default: no limit, "
        "or the --config file's interruptionLimitCount); --on-interrupt restart with --mtbf "
        "needs this or --horizon",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        type=out_dir,
        help=f"report folder (default {DEFAULT_OUT}); checked to be writable before the run",
    )
    o.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    o.add_argument("--quiet", action="store_true", help="no progress line")
    o.add_argument("--json", action="store_true", help="last line: one JSON object")


def preemption_mode(text: str) -> str:
    """``--preemption``: a mode, or kinds joined by ``+`` (``reclaim+backfill``, as a report's
    policy line names them), in any case, as :class:`PolicySet` and ``--sets`` take it."""
    mode = text.lower()
    try:
        check_preemption(mode)
    except ValidationError:
        modes = ", ".join(repr(m) for m in PREEMPTION_MODES)
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {modes}, or distinct kinds joined by '+', "
            "e.g. 'reclaim+backfill')"
        ) from None
    return mode


def add_simulate_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``kant simulate`` to the top-level sub-command parsers and return its parser."""
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="simulate a scenario or a trace and report the paper's metrics",
        description=(
            "Run the discrete-event simulator (default: the paper's 8,000-GPU training "
            "cluster with 20,000 jobs under backfill + ebinpack), print GAR, SOR, GFR, JWTD "
            "and JTTED, and write a report folder with plots."
        ),
    )
    add_common_arguments(p)
    g = p.add_argument_group("policies")
    g.add_argument(
        "--queueing",
        type=str.lower,
        choices=policy_names(),
        help="queueing policy (default: the scenario's, backfill: the paper's recommendation; "
        "the library's Scheduler defaults to best-effort-fifo, see docs/simulator.md)",
    )
    g.add_argument(
        "--placement",
        type=str.lower,
        choices=placement_names(),
        help="placement strategy (default: the scenario's, ebinpack)",
    )
    g.add_argument(
        "--preemption",
        type=preemption_mode,
        metavar="{auto,none,all,KIND[+KIND...]}",
        help="auto (default): backfill preemption under backfill, quota reclaim where tenants "
        "have quotas, no priority preemption; none; all: every kind, as the library's default; "
        "or the kinds priority, reclaim, backfill, one or several joined by '+', as the report "
        "names them (e.g. reclaim+backfill)",
    )
    g.add_argument(
        "--threshold",
        type=number(float, low=0, allow_inf=True),
        help="Backfill head preemption threshold in s, with --queueing backfill (default 3600)",
    )
    g.add_argument(
        "--config",
        metavar="FILE",
        type=readable_input,
        help="a config file (docs/config.md): its tenants and quotas replace the scenario's, "
        "its queueing, placement and preemption sections set the policies (instead of "
        "--queueing, --placement, --preemption, --threshold)",
    )
    e = p.add_argument_group("start-time estimates")
    e.add_argument(
        "--estimates",
        type=number(int, low=0),
        default=0,
        metavar="N",
        help="give every N-th arriving job its start-time estimate at its arrival and report "
        "how close they came to the real starts (default 0: none; each estimate plays the "
        "scheduler's cycles forward on a copy of its state, so this costs time; decisions "
        "are the same)",
    )
    p.set_defaults(func=run_simulate, check=check_simulate_args, log_default="error")
    return p


def check_common_args(args: argparse.Namespace) -> None:
    """Refuse options that do not go together (:class:`UsageError`), before any work."""
    if args.mttr is not None and args.mtbf is None:
        raise UsageError(
            f"--mttr {args.mttr:g} is how long a failed node is away: it goes with --mtbf "
            "(without it no node fails)"
        )
    if getattr(args, "config", None) is None:  # (else the file's limit counts: run_simulate)
        check_restarts_bounded(args, args.max_interruptions)
    if args.trace is not None:
        if args.load is not None and args.cluster is not None:
            raise UsageError(
                f"--load {args.load:g} sizes a trace's own cluster, not the one --cluster gives"
            )
        if args.load is not None and args.trace == "openb":
            raise UsageError(
                f"--load {args.load:g} sizes a trace's own cluster; openb runs on its node list"
            )
        if args.scenario_given:
            raise UsageError(f"--scenario {args.scenario} and --trace {args.trace}: pick one")
    else:
        for opt, v in (("--cluster", args.cluster), ("--trace-file", args.trace_file)):
            if v is not None:
                raise UsageError(f"{opt} {v} goes with --trace (a built-in scenario has its own)")


def check_restarts_bounded(args: argparse.Namespace, limit: int | None) -> None:
    """Refuse ``--on-interrupt restart`` with ``--mtbf`` and neither ``--horizon`` nor an
    interruption limit ``limit`` of at most 10,000 (the Simulator would refuse the run, but
    only once the workload is built and, under compare, the runs started)."""
    if restarts_unbounded(args.on_interrupt, args.mtbf, args.horizon, limit):
        given = "" if args.max_interruptions is None else f" --max-interruptions {limit}"
        raise UsageError(
            f"--on-interrupt restart with --mtbf {args.mtbf:g}{given}: a job that runs longer "
            "than its nodes' time between failures would start again for ever; give --horizon "
            f"or --max-interruptions N of at most {MAX_RESTART_LIMIT:,}"
        )


def check_simulate_args(args: argparse.Namespace) -> None:
    """:func:`check_common_args`, plus ``--threshold`` only with the Backfill policy."""
    check_common_args(args)
    if args.config is not None:
        for opt in ("queueing", "placement", "preemption", "threshold"):
            if getattr(args, opt) is not None:
                raise UsageError(
                    f"--{opt} {getattr(args, opt)} and --config {args.config}: the file sets "
                    "the policies (docs/config.md)"
                )
    if args.threshold is not None and (args.queueing or "backfill") != "backfill":
        raise UsageError(
            f"--threshold {args.threshold:g} is Backfill's; --queueing {args.queueing} has none"
        )


def check_own_inputs(args: argparse.Namespace, names: Sequence[str]) -> None:
    """Refuse (:class:`UsageError`) an ``--out`` folder where one of the files ``names`` the
    command writes or removes there is one of the run's input files (``--trace-file``,
    ``--cluster``, ``--config``): the report would replace what it was made from."""
    inputs = [(f"--{k.replace('_', '-')}", getattr(args, k, None))
              for k in ("trace_file", "cluster", "config")]  # fmt: skip
    refuse_own_input("--out", args.out, [Path(args.out) / n for n in names], inputs)


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The scenario the common options name (a built-in scenario or a trace, with the
    simulation options applied; options checked by :func:`check_common_args`), built by
    :func:`kant.sim.scenarios.scenario_from_options` as a sweep's ``sim`` runs are. Raises
    :class:`kant.errors.KantError` on bad values."""
    options = {k: getattr(args, k, None) for k in SCENARIO_OPTIONS}
    if args.trace is not None:
        options["scenario"] = None  # the built-in default; check_common_args refused a given one
    return scenario_from_options(options)


def target_load(args: argparse.Namespace) -> float:
    """The offered load the run aims at: ``--load`` (a built-in scenario's workload, or the
    load a trace's cluster is sized for), else the built-in scenario's default load, else (a
    trace) :data:`kant.sim.scenarios.TARGET_LOAD`, its default cluster's sizing."""
    if args.load is not None:
        return float(args.load)
    if args.trace is not None:
        return TARGET_LOAD
    param = inspect.signature(SCENARIOS[args.scenario]).parameters.get("load")
    if param is None or not isinstance(param.default, int | float):
        return TARGET_LOAD
    return float(param.default)


def load_warning(
    args: argparse.Namespace, sc: Scenario, sets: Sequence[PolicySet] = ()
) -> str | None:
    """:func:`kant.sim.scenarios.load_note` for the run the options name, and
    :func:`~kant.sim.scenarios.zone_note` for each of the policy sets ``sets``: one line."""
    note = load_note(sc, target_load(args), advice=_under_load_advice(args))
    notes = [note, *(zone_note(sc, p) for p in sets)]
    return "; ".join(n for n in dict.fromkeys(notes) if n) or None


def _under_load_advice(args: argparse.Namespace) -> str:
    """What the options could change for a run under its target load: a built-in scenario's
    jobs or load; a trace's jobs when ``--jobs`` cut it, or a smaller ``--cluster`` where
    the cluster is given (openb's node list by default), which takes no ``--load``. Not a
    higher ``--load`` for a trace on a cluster it sizes: that cluster holds the load over
    the busiest arrivals and the note compares the window's with the same ``--load``, so a
    higher one shrinks the cluster as it raises the target."""
    if args.trace is None:
        return UNDER_LOAD_ADVICE
    more = "more --jobs or " if args.jobs is not None else ""
    if args.cluster is not None:
        return (
            f"that is all the work the trace offers --cluster {args.cluster}: use {more}a "
            "smaller --cluster (--load does not resize a given cluster)"
        )
    if args.trace == "openb":
        return (
            f"that is all the work the trace offers its node list: use {more}a smaller "
            "--cluster (openb takes no --load)"
        )
    own = (
        " (an SWF log that names its MaxProcs runs on that machine unless --load is given)"
        if args.trace == "swf" and args.load is None
        else ""
    )
    return (
        f"that is all the work the trace offers its observation window"
        f"{': use more --jobs' if args.jobs is not None else ''}; a cluster --load sizes holds "
        "that load over the busiest 90% of the arrivals, and no fewer GPUs than the largest "
        f"job, so a higher --load raises the target as much{own}"
    )


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
        """Show ``p`` (at most every ``every_s`` seconds)."""
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
        """End the display (a newline after an in-place line)."""
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run_simulate(args: argparse.Namespace) -> int:
    """``kant simulate``: run, print the table, write the report folder (and print the JSON
    line). A bad value in the options or the files they name raises
    :class:`~kant.errors.KantError` before the run (:func:`kant.cli.main` prints it on one
    line, exit 2); a mistake in the ``--config`` file before the workload is built."""
    check_own_inputs(args, (*REPORT_FILES, *PLOT_NAMES))
    cfg = load_config(args.config) if args.config is not None else None
    if cfg is not None:
        limit = cfg.queueing.backoff.max_interruptions
        check_restarts_bounded(
            args, limit if args.max_interruptions is None else args.max_interruptions
        )
    sc = scenario_from_args(args)
    if cfg is not None:
        sc = sc.with_tenants(cfg)
        pol = PolicySet.from_config(cfg)
    else:
        base = sc.default_policy
        pol = PolicySet(
            queueing=args.queueing or base.queueing,
            placement=args.placement or base.placement,
            preemption=args.preemption or "auto",
            threshold=args.threshold,
        )
    note = load_warning(args, sc, (pol,))
    if note:
        print(f"kant simulate: note: {note}", file=sys.stderr)
    every = getattr(args, "estimates", 0) or 0
    if every:
        sc = attrs.evolve(sc, config=attrs.evolve(sc.config, estimate_every=every))
    bar = None if args.quiet else ProgressLine(f"simulate {sc.name} {pol.label}")
    result = run_scenario(sc, pol, progress=bar)
    if bar is not None:
        bar.done()
    print(format_summary(sc, pol, result))
    acc = estimate_accuracy(result) if every else None
    if acc is not None:
        print(format_estimates(acc, result, every))
    if note:
        print(f"\nnote: {note}")
    with writing("--out", args.out):
        files, hint = write_report(args.out, sc, pol, result, plots=not args.no_plots)
    if hint:
        print(hint, file=sys.stderr)
    print(f"\nreport: {args.out}/ ({', '.join(f.name for f in files)})")
    if args.json:
        out = result_json(sc, pol, result)
        out["report"] = str(args.out)
        if acc is not None:
            out["estimates"] = {
                k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in attrs.asdict(acc).items()
            }
        print(json_text(out))
    return 0


def format_estimates(acc: EstimateAccuracy, result: SimResult, every: int) -> str:
    """The start-time estimates of a run (of every ``every``-th arrival) against the real
    starts, a few lines."""
    if not acc.made:
        return (
            f"\nstart-time estimates at arrival: none made (every {every:,}-th arrival; the "
            f"workload has {len(result.records):,} jobs)"
        )
    by_status: dict[str, int] = {}
    for est in result.estimates:
        by_status[est.status.value] = by_status.get(est.status.value, 0) + 1
    kinds = ", ".join(f"{n:,} {k}" for k, n in sorted(by_status.items()))
    lines = [f"\nstart-time estimates at arrival: {acc.made:,} made ({kinds})"]
    if acc.compared:
        lines.append(
            f"  vs real start ({acc.compared:,} started): {acc.exact:,} exact, {acc.late:,} "
            f"later, {acc.early:,} earlier; |error| mean {acc.mean_abs_error:,.0f} s, median "
            f"{acc.median_abs_error:,.0f} s, p90 {acc.p90_abs_error:,.0f} s"
        )
    if acc.no_start_but_started:
        lines.append(f"  {acc.no_start_but_started:,} estimated with no start did start")
    return "\n".join(lines)
