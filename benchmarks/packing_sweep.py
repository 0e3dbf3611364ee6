"""Run the FGD packing protocol for many policies x openb traces and report.

Results go to a JSON file (one entry per policy and trace, resumable: entries already there
are skipped), from which ``--report`` writes the markdown table of ``docs/packing.md``, the
wall time of every entry (and the slowest), and the PNG plot of allocation ratio against
arrived load.

    python benchmarks/packing_sweep.py --out benchmarks/packing_results.json
    python benchmarks/packing_sweep.py --out benchmarks/packing_results.json --report \\
        --plot docs/img/packing_default.png --plot-trace openb_pod_list_default

Uses ``$KANT_TRACES`` or ``../shared/traces`` for the trace folder (``--traces-dir``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from kant.sim.packing import PackingResult, packing
from kant.sim.report.plots import plot_curves
from kant.sim.scenarios import parse_seeds
from kant.sim.traces import trace_dir

PAPER = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
POLICIES = (*PAPER, "fgdpp")
PUBLISHED_DEFAULT = {
    "random": (86.30, 87.47),
    "dotprod": (90.62, 90.85),
    "gpuclustering": (91.65, 91.88),
    "gpupacking": (91.78, 92.00),
    "bestfit": (92.86, 93.08),
    "fgd": (95.23, 95.39),
}


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
    nodes = folder / "openb_node_list_gpu_node.csv"
    out = Path(args.out)
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    seeds = parse_seeds(args.seeds)
    traces = trace_files(folder)
    if args.traces:
        wanted = set(args.traces.split(","))
        traces = [t for t in traces if t.stem.removeprefix("openb_pod_list_") in wanted]
    policies = args.policies.split(",") if args.policies else list(POLICIES)
    for t in traces:
        for p in policies:
            key = f"{p}/{t.stem}"
            if key in results and results[key]["seeds"] == list(seeds):
                continue
            t0 = time.perf_counter()
            r = packing(t, nodes, p, seeds=seeds, workers=args.workers)
            entry = r.to_json()
            entry["per_seed_130"] = [run.alloc[130] for run in r.runs]
            entry["per_seed_100"] = [run.alloc[100] for run in r.runs]
            results[key] = entry
            out.write_text(json.dumps(results, indent=1, sort_keys=True))
            print(
                f"{key:<45} 100%: {r.alloc_at['100']:6.2f}  130%: {r.alloc_at['130']:6.2f}"
                f"  ({time.perf_counter() - t0:5.1f} s)",
                flush=True,
            )


def report(args: argparse.Namespace) -> None:
    """Markdown: allocation ratio (%) at 130% arrived per trace and policy, fgdpp's gain over
    FGD, and in how many seeds fgdpp is ahead (same seed, same arrivals)."""
    results: dict[str, Any] = json.loads(Path(args.out).read_text())
    traces = sorted({k.split("/", 1)[1] for k in results}, key=_trace_order)
    policies = [p for p in POLICIES if any(k.startswith(p + "/") for k in results)]
    head = "| trace | " + " | ".join(policies) + " | fgdpp - fgd | seeds fgdpp > fgd |"
    lines = [head, "|---" * (len(policies) + 3) + "|"]
    for t in traces:
        cells = []
        for p in policies:
            e = results.get(f"{p}/{t}")
            cells.append("" if e is None else f"{e['alloc_at']['130']:.2f}")
        a, b = results.get(f"fgd/{t}"), results.get(f"fgdpp/{t}")
        gain = ahead = ""
        if a is not None and b is not None:
            gain = f"{b['alloc_at']['130'] - a['alloc_at']['130']:+.2f}"
            pairs = list(zip(a["per_seed_130"], b["per_seed_130"], strict=True))
            ahead = f"{sum(y > x for x, y in pairs)}/{len(pairs)}"
        name = t.removeprefix("openb_pod_list_")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {gain} | {ahead} |")
    print("\n".join(lines))
    print()
    print(wall_table(results, traces, policies))
    if args.plot:
        trace = args.plot_trace
        chosen = [
            _as_result(results[f"{p}/{trace}"]) for p in policies if f"{p}/{trace}" in results
        ]
        plot_curves(chosen, args.plot)
        print(f"\nplot: {args.plot}")


def wall_table(results: dict[str, Any], traces: list[str], policies: list[str]) -> str:
    """Markdown: the wall time (s) of each policy on each trace (all its seeds, as run), and
    the slowest entry."""
    lines = ["| trace | " + " | ".join(policies) + " |", "|---" * (len(policies) + 1) + "|"]
    for t in traces:
        cells = [
            "" if (e := results.get(f"{p}/{t}")) is None else f"{e['wall_s']:.1f}" for p in policies
        ]
        lines.append(f"| {t.removeprefix('openb_pod_list_')} | " + " | ".join(cells) + " |")
    if results:
        key, e = max(results.items(), key=lambda kv: kv[1]["wall_s"])
        lines.append(f"\nslowest: {key} {e['wall_s']:.1f} s ({len(e['seeds'])} seeds)")
    return "\n".join(lines)


def _trace_order(name: str) -> tuple[int, str]:
    stem = name.removeprefix("openb_pod_list_")
    return (1 if stem.startswith("multigpu") else 0, stem)


def _as_result(e: dict[str, Any]) -> PackingResult:
    return PackingResult(
        policy=e["policy"],
        trace=e["trace"],
        seeds=tuple(e["seeds"]),
        inflate=1.3,
        alloc_at=e["alloc_at"],
        frag_at=e["frag_at"],
        wall_s=e["wall_s"],
        runs=(),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="benchmarks/packing_results.json")
    ap.add_argument("--traces-dir")
    ap.add_argument("--traces", help="comma-separated trace names (default: all)")
    ap.add_argument("--policies", help=f"comma-separated (default: {','.join(POLICIES)})")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workers", type=int, default=2)
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
