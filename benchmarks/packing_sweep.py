"""Run the FGD packing protocol for many policies x openb traces and report: a thin user of
``kant sweep`` (one packing run per policy, trace and seed; ``docs/sweeps.md``).

Results go to a sweep store (JSON lines, one record per run; resumable: runs already there are
skipped), from which ``--report`` writes the markdown table of ``docs/packing.md``, the wall
time of every policy and trace (the sum over its seeds, and the slowest), and the PNG plot of
allocation ratio against arrived load.

    python benchmarks/packing_sweep.py --out benchmarks/packing_results.jsonl
    python benchmarks/packing_sweep.py --out benchmarks/packing_results.jsonl --report \\
        --plot docs/img/packing_default.png --plot-trace openb_pod_list_default

``--ray [ADDRESS]`` runs it on Ray instead of local processes. Uses ``$KANT_TRACES`` or
``../shared/traces`` for the trace folder (``--traces-dir``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kant.sim.report.plots import plot_curves
from kant.sim.traces import trace_dir
from kant.sweep import Grid, LocalPool, ProgressBar, RayCluster, Store, run_sweep
from kant.sweep.report import PackingGroup, packing_groups, packing_result

PAPER = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
POLICIES = (*PAPER, "fgdpp")


def trace_files(folder: Path) -> list[Path]:
    """The openb pod lists: the 20 with gpu_spec first (cpu*, default, gpushare*, gpuspec*),
    then the 4 multigpu ones."""
    files = sorted(folder.glob("openb_pod_list_*.csv"))
    main = [f for f in files if "multigpu" not in f.name]
    return main + [f for f in files if "multigpu" in f.name]


def run(args: argparse.Namespace) -> None:
    folder = Path(args.traces_dir) if args.traces_dir else trace_dir()
    if folder is None:
        sys.exit("no trace folder (set KANT_TRACES or --traces-dir)")
    folder = folder / "alibaba-openb-v2023" if (folder / "alibaba-openb-v2023").is_dir() else folder
    traces = trace_files(folder)
    if args.traces:
        wanted = set(args.traces.split(","))
        traces = [t for t in traces if t.stem.removeprefix("openb_pod_list_") in wanted]
    policies = args.policies.split(",") if args.policies else list(POLICIES)
    grid = Grid(
        "packing",
        {
            "pods": [str(t) for t in traces],
            "nodes": str(folder / "openb_node_list_gpu_node.csv"),
            "policy": policies,
            "seeds": args.seeds,
        },
    )
    specs = grid.runs()
    store = Store(args.out)
    backend = LocalPool(args.workers) if args.ray is None else RayCluster(args.ray or None)
    todo = len({s.key for s in specs} - store.done(retry_failed=args.retry_failed))
    bar = ProgressBar(todo, label="packing sweep", every_s=30.0)
    summary = run_sweep(
        specs,
        store,
        backend,
        retry_failed=args.retry_failed,
        on_done=lambda _s, rec: bar.update(rec["status"] == "ok"),
    )
    print(
        f"{summary.ran} runs ({summary.failed} failed), {summary.skipped} already in {args.out}; "
        f"wall {summary.wall_s:.1f} s"
    )


def _name(trace: str) -> str:
    return trace.removeprefix("openb_pod_list_")


def _order(g: PackingGroup) -> tuple[int, str]:
    return (1 if _name(g.trace).startswith("multigpu") else 0, _name(g.trace))


def report(args: argparse.Namespace) -> None:
    """Markdown: allocation ratio (%) at 130% arrived per trace and policy (seed means), fgdpp's
    gain over FGD, and in how many seeds fgdpp is ahead (same seed, same arrivals)."""
    store = Store(args.out)
    records = store.records()
    groups = sorted(packing_groups(records), key=_order)
    policies = [p for p in POLICIES if any(p in g.runs for g in groups)]
    head = "| trace | " + " | ".join(policies) + " | fgdpp - fgd | seeds fgdpp > fgd |"
    lines = [head, "|---" * (len(policies) + 3) + "|"]
    for g in groups:
        at130 = {p: packing_result(g, p).alloc_at.get("130") for p in policies if p in g.runs}
        cells = ["" if at130.get(p) is None else f"{at130[p]:.2f}" for p in policies]
        gain = ahead = ""
        if "fgd" in g.runs and "fgdpp" in g.runs:
            gain = f"{at130['fgdpp'] - at130['fgd']:+.2f}"  # type: ignore[operator]
            seeds = sorted(set(g.runs["fgd"]) & set(g.runs["fgdpp"]))
            wins = sum(
                g.runs["fgdpp"][s]["alloc"][130] > g.runs["fgd"][s]["alloc"][130] for s in seeds
            )
            ahead = f"{wins}/{len(seeds)}"
        lines.append(f"| {_name(g.trace)} | " + " | ".join(cells) + f" | {gain} | {ahead} |")
    print("\n".join(lines))
    print()
    print(wall_table(records, groups, policies))
    if args.plot:
        chosen = [g for g in groups if g.trace == args.plot_trace]
        if not chosen:
            sys.exit(f"no runs of {args.plot_trace} in {args.out}")
        plot_curves([packing_result(chosen[0], p) for p in policies if p in chosen[0].runs],
                    args.plot)  # fmt: skip
        print(f"\nplot: {args.plot}")


def wall_table(
    records: list[Mapping[str, Any]], groups: list[PackingGroup], policies: list[str]
) -> str:
    """Markdown: the wall time (s) of each policy on each trace (the sum over its seeds, as
    run), and the slowest."""
    wall: dict[tuple[str, str], float] = {}
    for r in {r["key"]: r for r in records}.values():
        if r["kind"] == "packing" and r["status"] == "ok":
            k = (Path(r["params"]["pods"]).stem, str(r["params"].get("policy", "fgd")).lower())
            wall[k] = wall.get(k, 0.0) + (r["wall_s"] or 0.0)
    lines = ["| trace | " + " | ".join(policies) + " |", "|---" * (len(policies) + 1) + "|"]
    for g in groups:
        cells = ["" if (g.trace, p) not in wall else f"{wall[(g.trace, p)]:.1f}" for p in policies]
        lines.append(f"| {_name(g.trace)} | " + " | ".join(cells) + " |")
    if wall:
        (trace, pol), w = max(wall.items(), key=lambda kv: kv[1])
        lines.append(f"\nslowest: {pol}/{trace} {w:.1f} s (all its seeds)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="benchmarks/packing_results.jsonl", help="the sweep store")
    ap.add_argument("--traces-dir")
    ap.add_argument("--traces", help="comma-separated trace names (default: all)")
    ap.add_argument("--policies", help=f"comma-separated (default: {','.join(POLICIES)})")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workers", type=int, default=2, help="local processes")
    ap.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="run on Ray (ADDRESS, $RAY_ADDRESS or a new local instance)")  # fmt: skip
    ap.add_argument("--retry-failed", action="store_true", help="run failed runs again")
    ap.add_argument("--report", action="store_true", help="print the table from --out")
    ap.add_argument("--plot", help="with --report: PNG of the allocation curves")
    ap.add_argument("--plot-trace", default="openb_pod_list_default")
    args = ap.parse_args()
    if args.report:
        report(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
