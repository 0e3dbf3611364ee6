"""``kant sweep GRID`` and ``kant sweep report STORE``: argument parsing and the commands
(the sweep itself is :mod:`kant.sweep`; ``docs/sweeps.md``), and :func:`check_grid`, which
checks a grid's runs with their command's own parser before any of them runs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from kant.cli.compare import add_compare_parser
from kant.cli.options import (
    KantArgumentParser,
    UsageError,
    number,
    out_dir,
    refuse_own_input,
    writing,
)
from kant.cli.packing import add_packing_parser
from kant.cli.simulate import add_simulate_parser
from kant.errors import InvalidGridError, KantError

if TYPE_CHECKING:
    from kant.sweep import Grid

__all__ = ["add_sweep_parser", "check_grid", "check_sweep_options", "run_sweep_command"]


def add_sweep_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``kant sweep`` to the top-level sub-command parsers and return its parser."""
    p: argparse.ArgumentParser = sub.add_parser(
        "sweep",
        help="run a grid of simulate / compare / packing runs (locally or on Ray), resumable",
        description=(
            "kant sweep GRID: run every combination of the grid file's options that its store "
            "does not hold yet, appending one JSON line per run. kant sweep report STORE: the "
            "tables and plots of a store, with 95% confidence intervals over seeds. See "
            "docs/sweeps.md."
        ),
    )
    p.add_argument("grid", metavar="GRID", help="grid file (YAML or JSON), or 'report'")
    p.add_argument("store_arg", nargs="?", metavar="STORE", help="with report: the store")
    p.add_argument("--store", help="result store (default: the grid's, else GRID.jsonl)")
    p.add_argument(
        "--workers",
        type=int,
        help="runs at once (local processes, default up to 2; Ray: default the cluster's CPUs)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run each run as a Ray task: on ADDRESS (auto, ray://host:10001), else on "
        "$RAY_ADDRESS, else on a new local instance (pip install 'kant[ray]'); put it after "
        "GRID, or write --ray=ADDRESS",
    )
    p.add_argument(
        "--max-runs", type=number(int, low=0), metavar="N", help="run at most N runs, then stop"
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="run again the runs whose last record failed (default: a re-run skips every "
        "run the store holds)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="report: folder (default: STORE without its extension, or STORE-report)",
    )
    p.add_argument("--no-plots", action="store_true", help="report: no PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="last line: one JSON object")
    p.set_defaults(func=run_sweep_command, check=check_sweep_options, log_default="error")
    return p


# the options of one mode only, as given on the command line (argparse's defaults: not given)
_RUN_ONLY = (("--store", "store"), ("--workers", "workers"), ("--ray", "ray"),
             ("--max-runs", "max_runs"), ("--retry-failed", "retry_failed"))  # fmt: skip
_REPORT_ONLY = (("--out", "out"), ("--no-plots", "no_plots"))


def check_sweep_options(args: argparse.Namespace) -> None:
    """Refuse an option the mode does not use (:class:`UsageError`, naming it) rather than
    ignore it: a report runs nothing, and a sweep writes no report."""
    report = args.grid == "report"
    for option, name in _RUN_ONLY if report else _REPORT_ONLY:
        given = getattr(args, name)
        if given is not None and given is not False:  # (--workers 0 is given)
            if report:
                raise UsageError(
                    f"{option} is an option of kant sweep GRID; kant sweep report STORE runs "
                    "nothing (it reads the store it is given)"
                )
            raise UsageError(
                f"{option} is an option of kant sweep report STORE; kant sweep GRID writes "
                "no report (it appends to its store)"
            )


def run_sweep_command(args: argparse.Namespace) -> int:
    """``kant sweep``: 0 when every run is ok, 1 when some failed, 2 on a usage error."""
    try:
        if args.grid == "report":
            return _report(args)
        return _run(args)
    except BrokenPipeError:
        raise  # (the reader went away, | head: kant.cli.main ends quietly)
    except (KantError, OSError) as e:  # one line (a YAML error spans several)
        print(f"kant sweep: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from kant.sim.analysis import json_text
    from kant.sweep import LocalPool, ProgressBar, RayCluster, Store, load_grid, run_sweep

    if args.store_arg is not None:
        print("kant sweep: one grid file (kant sweep report STORE for a report)", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print("kant sweep: --workers must be >= 1", file=sys.stderr)
        return 2
    grid = load_grid(args.grid)
    check_grid(grid)
    specs = grid.runs()
    store = Store(args.store or grid.store or Path(args.grid).with_suffix(".jsonl"))
    store.check_writable()
    todo = len({s.key for s in specs} - store.done(retry_failed=args.retry_failed))
    if args.max_runs is not None:
        todo = min(todo, args.max_runs)
    if args.ray is None:
        # (a local process per run to do at most: the pool forks all its workers at once)
        asked = LocalPool.default_workers() if args.workers is None else args.workers
        local = min(asked, max(1, todo))
        backend: LocalPool | RayCluster = LocalPool(local)
    else:
        backend = RayCluster(args.ray or None, args.workers)
    bar = None if args.quiet else ProgressBar(todo, label=f"sweep {Path(args.grid).name}")
    try:
        summary = run_sweep(
            specs,
            store,
            backend,
            max_runs=args.max_runs,
            retry_failed=args.retry_failed,
            on_done=None if bar is None else (lambda _s, rec: bar.update(rec["status"] == "ok")),
        )
    except KeyboardInterrupt:
        print(
            f"kant sweep: interrupted; the runs that ended are in {store.path}: the same command "
            "goes on from there",
            file=sys.stderr,
        )
        return 130
    where = "ray" if args.ray is not None else f"{backend.workers} local worker(s)"
    # every run of the grid whose last record in the store failed, this call's or an earlier
    latest = store.latest()
    failed = {s.key: s for s in specs if latest.get(s.key, {}).get("status", "ok") != "ok"}
    before = len(failed) - summary.failed
    print(
        f"{summary.total} runs: {summary.skipped} already in {store.path}, {summary.ran} run on "
        f"{where} ({summary.failed} failed), {summary.left} left; wall {summary.wall_s:.1f} s"
        + (f"; {before} failed before (--retry-failed runs them again)" if before > 0 else "")
    )
    for key, s in failed.items():
        print(f"  failed {key} {dict(s.params)}: {latest[key]['error']}")
    if args.json:
        out = {"store": str(store.path), **_summary_json(summary), "failed_in_store": len(failed)}
        print(json_text(out))
    return 1 if failed else 0


_COMMAND_PARSERS: Final[dict[str, Callable[[Any], Any]]] = {
    "simulate": add_simulate_parser,
    "compare": add_compare_parser,
    "packing": add_packing_parser,
}


class _Refused(Exception):
    """A command's own parser refused its arguments; the message is the parser's."""


class _CheckingParser(KantArgumentParser):
    """A command's own parser that raises :class:`_Refused` where it would print and exit."""

    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


def _command_parser(command: str) -> argparse.ArgumentParser:
    """``kant COMMAND``'s parser, as ``kant`` builds it now (its policy names are those
    registered in this process by then), raising :class:`_Refused` on a bad argument."""
    sub = _CheckingParser(prog="kant").add_subparsers(parser_class=_CheckingParser)
    _COMMAND_PARSERS[command](sub)
    parser: argparse.ArgumentParser = sub.choices[command]
    return parser


def _flag(name: str) -> str:
    """The command-line option a run's parameter ``name`` is (``on_interrupt``:
    ``--on-interrupt``)."""
    return "--" + name.replace("_", "-")


def check_grid(grid: Grid) -> None:
    """Refuse a grid with a run its command would refuse, before any run starts: each run's
    options are given, as text, to the command's own parser (``kant simulate``'s for a
    ``simulate`` grid, ``kant compare``'s, ``kant packing``'s: its types, ranges, choices of
    names and files that must exist) and then to the command's own check of options that do
    not go together, so a grid takes no value its command refuses, and says why.
    Raises :class:`~kant.errors.InvalidGridError` naming the grid option and its value (or,
    where no one option is at fault, the run's options) with the command's reason.

    Policy names are checked against those registered in this process when it runs: from the
    shell, kant's own (``kant`` loads no plugins); called in a process that registered a
    strategy or queueing policy first (``kant.cli.main([...])``, docs/extending.md), that one
    too. Seeds are not given to the parser: :class:`~kant.sweep.Grid` reads them as the
    commands do (an int >= 0 each; ``seeds`` by :func:`kant.sim.scenarios.parse_seeds`), and
    checking each of up to 100,000 seeds alone would cost seconds for nothing. ``sets`` too:
    the grid reads them with :meth:`~kant.sim.scenarios.PolicySet.parse`, as ``kant compare
    --sets`` does."""
    import attrs

    from kant.sweep import RunSpec
    from kant.sweep.grid import POLICY_OPTIONS

    parser = _command_parser(grid.command)
    check: Callable[[argparse.Namespace], None] = parser.get_default("check")
    kind = "packing" if grid.command == "packing" else "sim"
    # every value alone: the option's type, range, choices, file
    for written, value in grid.options.items():
        name = written.replace("-", "_")
        if name in _NOT_PARSED:
            continue
        for v in value if isinstance(value, list) else [value]:
            if v is None:  # (left at its default)
                continue
            given = RunSpec(kind, {name: v}, grid.base).inputs[name]  # (a path: from the grid)
            try:
                parser.parse_args([f"{_flag(name)}={given}"])
            except _Refused as e:
                raise InvalidGridError(written, v, _reason(grid.command, name, str(e))) from None
    # every combination of the other options: those that do not go together
    rest = {k: v for k, v in grid.options.items() if k.replace("-", "_") not in _NOT_PARSED}
    # (a compare run's policy options come from its sets, which kant compare reads alone)
    policy = POLICY_OPTIONS if grid.command == "compare" else ()
    done: set[str] = set()
    for spec in attrs.evolve(grid, options=rest).runs():
        params = {k: v for k, v in spec.params.items() if k not in policy}
        text = json.dumps(params, sort_keys=True)
        if text in done:
            continue
        done.add(text)
        argv = [f"{_flag(k)}={spec.inputs[k]}" for k in params]
        try:
            check(parser.parse_args(argv))
        except (_Refused, UsageError) as e:
            msg = " ".join(str(e).split())
            # the check names the option at fault first (--mttr 60 goes with --mtbf)
            at = next((k for k in params if msg.startswith(f"{_flag(k)} ")), None)
            why = f"kant {grid.command} refuses the run {params}: {msg}"
            if at is None:
                raise InvalidGridError("options", params, why) from None
            raise InvalidGridError(at, params[at], why) from None


_NOT_PARSED: Final = ("seed", "seeds", "sets")
"""Grid options :func:`check_grid` gives no parser: the grid reads them as the commands do."""


def _reason(command: str, name: str, message: str) -> str:
    """Why ``kant COMMAND`` refuses a grid option's value: its parser's message, without the
    ``argument --name:`` the grid error says already."""
    flag = _flag(name)
    message = message.removeprefix(f"argument {flag}: ")
    return f"as kant {command} {flag} refuses it: {message}"


def _summary_json(summary: Any) -> dict[str, Any]:
    return {
        "total": summary.total,
        "skipped": summary.skipped,
        "ran": summary.ran,
        "failed": summary.failed,
        "left": summary.left,
        "wall_s": round(summary.wall_s, 3),
    }


def report_folder(store: Path) -> Path:
    """The default folder of a store's report: the store without its extension
    (``grid.jsonl``: ``grid``), or ``STORE-report`` for a store without one or when that
    name is a file already (a grid named ``sweep`` beside its store ``sweep.jsonl``)."""
    plain = store.with_suffix("")
    if store.suffix and not (plain.exists() and not plain.is_dir()):
        return plain
    return store.with_name(f"{store.name}-report")


def _report_outputs(out: Path) -> list[Path]:
    """The files a sweep report into ``out`` may write, replace or remove that are there now:
    ``report.txt`` and, in each folder of ``out`` (a group's), its report's files."""
    from kant.sim.report import COMPARE_FILES, PLOT_NAMES

    files = [out / "report.txt"]
    if out.is_dir():
        names = (*COMPARE_FILES, *PLOT_NAMES, "packing.txt", "packing.png")
        for sub in sorted(p for p in out.iterdir() if p.is_dir()):
            files += [sub / n for n in names]
    return files


def _report(args: argparse.Namespace) -> int:
    from kant.sim.analysis import json_text
    from kant.sweep import Store
    from kant.sweep.report import format_report, sweep_json, write_sweep_report

    if args.store_arg is None:
        print("kant sweep report: name the store (kant sweep report STORE)", file=sys.stderr)
        return 2
    store = Store(args.store_arg)
    if not store.path.is_file():
        print(f"kant sweep report: no store at {store.path}", file=sys.stderr)
        return 2
    if args.out == "":  # (not "no --out": the report would go to the store's folder)
        raise UsageError("--out: an empty path")
    out = Path(args.out) if args.out else report_folder(store.path)
    option = "--out" if args.out else "report folder"
    if out.exists() and not out.is_dir():
        raise UsageError(f"{option} {out}: cannot write the report: a file, not a folder")
    try:  # (before the tables are printed: a report refused prints nothing first)
        out_dir(str(out))
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"{option} {out}: cannot write the report: {e}") from None
    refuse_own_input(option, out, _report_outputs(out), [("STORE", store.path)])
    records = store.records()
    print(format_report(records))
    if store.unreadable:
        print(f"({store.unreadable} unreadable line(s) skipped)", file=sys.stderr)
    with writing(option, out, after_run=False):
        files, hint = write_sweep_report(records, out, plots=not args.no_plots)
    if hint:
        print(hint, file=sys.stderr)
    print(f"\nreport: {out}/ ({len(files)} files)")
    if args.json:
        print(json_text(sweep_json(records)))
    return 0
