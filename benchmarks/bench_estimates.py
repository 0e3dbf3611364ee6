"""What a start-time estimate costs (``Scheduler.start_estimates``).

    python benchmarks/bench_estimates.py [--nodes 12500] [--pending 3000]
        [--horizons 600,3600] [--cycles 100] [--json]

The set-up is ``kant bench cycle``'s (an N-node 8-GPU fat tree, 4 tenants with quotas,
Backfill + E-Binpack, preemption with ``min_runtime`` 600 s, J jobs kept waiting, warmed up
for one job lifetime; not timed). Then, each timed once by this thread's CPU clock and the
wall clock:

- ``copy``: the copy of the scheduler's state every estimate starts from;
- ``head``: the estimate of the first waiting job in the queue order (the play stops when it
  starts);
- ``all_<H>s``: every waiting job, played H simulated seconds ahead (``horizon``, each of
  ``--horizons``), with how many of them got a start and the latest start found;
- ``all_<C>_cycles``: every waiting job, at most C cycles (``max_cycles``, ``--cycles``);
- ``same_after``: the scheduler's next cycle decides the same as a twin's that was never
  asked (the estimates changed nothing).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

from kant.bench.cycle import setup, warm_up
from kant.estimates import EstimateStatus
from kant.scheduler import Scheduler


def _timed(fn: Any) -> tuple[Any, float, float]:
    w0, c0 = time.perf_counter(), time.thread_time()
    out = fn()
    return out, (time.perf_counter() - w0) * 1000, (time.thread_time() - c0) * 1000


def run(nodes: int, pending: int, horizons: list[float], cycles: int) -> dict[str, Any]:
    s, wl, _rules = setup(
        nodes, pending, seed=7, policy="backfill", strategy="ebinpack", preemption=True
    )
    now = warm_up(s, wl, pending, 10.0) + 10.0
    twin = copy.deepcopy((s.cluster, s.queue, s.admitter, s.placer, s.policy, s.preemption))
    plain = Scheduler(twin[0], queue=twin[1], admitter=twin[2], placer=twin[3],
                      policy=twin[4], preemption=twin[5])  # fmt: skip
    out: dict[str, Any] = {
        "nodes": nodes,
        "waiting": s.queue.waiting(),
        "running": len(s.queue.running()),
    }
    _twin, w, c = _timed(s._twin)
    out["copy"] = {"wall_ms": round(w, 1), "cpu_ms": round(c, 1)}
    head = s.queue.candidates()[0].id
    runs: dict[str, dict[str, Any]] = {"head": {"jobs": [head]}}
    for h in horizons:
        runs[f"all_{h:g}s"] = {"horizon": h}
    runs[f"all_{cycles}_cycles"] = {"max_cycles": cycles}
    for name, kw in runs.items():
        got, w, c = _timed(lambda kw=kw: s.start_estimates(now, **kw))
        expected = [e for e in got.values() if e.status is EstimateStatus.EXPECTED]
        starts = [e.start - now for e in expected if e.start is not None]
        out[name] = {
            "wall_ms": round(w, 1),
            "cpu_ms": round(c, 1),
            "asked": len(got),
            "expected": len(expected),
            "last_start_s": max(starts, default=None),
        }
    a, b = s.schedule(now), plain.schedule(now)
    out["same_after"] = (a.bindings, a.victims, a.nominations) == (
        b.bindings, b.victims, b.nominations
    )  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=12_500)
    p.add_argument("--pending", type=int, default=3_000)
    p.add_argument("--horizons", default="600,3600", help="seconds, comma-separated")
    p.add_argument("--cycles", type=int, default=100)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    horizons = [float(x) for x in args.horizons.split(",") if x]
    out = run(args.nodes, args.pending, horizons, args.cycles)
    if args.json:
        print(json.dumps(out))
        return
    for k, v in out.items():
        print(f"{k:>16}: {v}")


if __name__ == "__main__":
    main()
