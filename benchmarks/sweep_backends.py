"""The cost of the sweep back-ends: one grid run on the local pool (1 and 2 processes) and on a
local Ray instance (1 and 2 CPUs), interleaved, each into a fresh store.

For each configuration it reports the sweep's wall time (Ray: without starting the instance,
given apart), the speed-up over one local process, and the overhead per run: (wall x
workers - the sum of the runs' own wall times) / runs, the time a worker slot spends not
running a run (building and shipping inputs, scheduling, collecting results, idling at the
end). Every configuration must store identical metrics; the script checks it.

    python benchmarks/sweep_backends.py                     # the 40-run grid of docs/sweeps.md
    python benchmarks/sweep_backends.py --jobs 300 --seeds 0-1 --repeat 1   # a quick look
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kant.sweep import Grid, LocalPool, RayCluster, Store, run_sweep


def one(grid: Grid, backend: Any, folder: Path, name: str) -> dict[str, Any]:
    store = Store(folder / f"{name}.jsonl")
    store.path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    if isinstance(backend, RayCluster):
        backend.__enter__()  # start the instance outside the timed sweep
        started = time.perf_counter() - t0
        try:
            summary = run_sweep(grid.runs(), store, _Entered(backend))
        finally:
            backend.__exit__(None, None, None)
    else:
        started = 0.0
        summary = run_sweep(grid.runs(), store, backend)
    recs = store.latest()
    work = sum(r["wall_s"] for r in recs.values())
    metrics = {k: r["metrics"] for k, r in recs.items()}
    assert summary.failed == 0, f"{name}: {summary.failed} runs failed"
    return {"wall": summary.wall_s, "start": started, "work": work, "metrics": metrics}


class _Entered:
    """A started RayCluster whose enter / exit do nothing (the caller starts and stops it)."""

    def __init__(self, inner: RayCluster) -> None:
        self.inner = inner
        self.workers = inner.workers

    def __enter__(self) -> Any:
        return self.inner

    def __exit__(self, *exc: object) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scenario", default="paper-training")
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--seeds", default="0-9", help="x the 4 default compare sets = the runs")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of every configuration")
    args = ap.parse_args()
    grid = Grid("compare", {"scenario": args.scenario, "jobs": args.jobs, "seeds": args.seeds})
    runs = len(grid.runs())
    configs = [
        ("local pool, 1 process", lambda: LocalPool(1), 1),
        ("local pool, 2 processes", lambda: LocalPool(2), 2),
        ("Ray, 1 worker", lambda: RayCluster(workers=1), 1),
        ("Ray, 2 workers", lambda: RayCluster(workers=2), 2),
    ]
    got: dict[str, list[dict[str, Any]]] = {name: [] for name, _b, _w in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.repeat):
            for name, make, _w in configs:
                r = one(grid, make(), Path(tmp), f"{rnd}-{len(got[name])}-{name[:5]}")
                got[name].append(r)
                print(f"round {rnd + 1} {name}: {r['wall']:.1f} s", flush=True)
    ref = got[configs[0][0]][0]["metrics"]
    assert all(r["metrics"] == ref for rs in got.values() for r in rs), "metrics differ"
    base = statistics.median(r["wall"] for r in got[configs[0][0]])
    print(f"\n{runs} runs ({args.scenario}, {args.jobs} jobs, seeds {args.seeds} x 4 sets), "
          f"median of {args.repeat} rounds; identical metrics in every store\n")  # fmt: skip
    print("| back-end | sweep wall (s) | Ray start-up (s) | speed-up vs 1 process | "
          "overhead per run (s) | run time, mean (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, _make, w in configs:
        rs = got[name]
        wall = statistics.median(r["wall"] for r in rs)
        start = statistics.median(r["start"] for r in rs)
        over = statistics.median((r["wall"] * w - r["work"]) / runs for r in rs)
        mean = statistics.median(r["work"] / runs for r in rs)
        start_s = f"{start:.1f}" if start else "-"
        print(f"| {name} | {wall:.1f} | {start_s} | x{base / wall:.2f} | {over:.3f} | {mean:.2f} |")


if __name__ == "__main__":
    main()
