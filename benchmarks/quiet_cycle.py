"""What a cycle costs when nothing changed since the last one (issue 18: "a cycle in which no
job arrived, finished or became eligible and no capacity changed should cost next to
nothing").

    python benchmarks/quiet_cycle.py [--nodes 12500] [--pending 3000] [--rounds 20] [--json]

The set-up is ``kant bench cycle``'s (an N-node 8-GPU fat tree, 4 tenants with quotas,
Backfill + E-Binpack, preemption with ``min_runtime`` 600 s, J jobs kept waiting, warmed up
for one job lifetime). Each round, timed by this thread's CPU clock:

- ``changed``: 10 simulated seconds later, the jobs due finish, the victims go, new jobs
  arrive to keep J waiting, and a cycle runs (then applied);
- ``quiet_run``: a cycle at the same time, nothing changed since the last one was applied
  (the first cycle after a change: it decides nothing and is run, then kept; counted only
  when it was run, ``quiet_run_count``: when the ``changed`` cycle itself decided nothing,
  this one is answered with its result);
- ``reused``: a cycle 1 s later, nothing changed (answered with the kept result, if the
  time horizon allows: ``reused_count`` says how many were; the first reuse derives the
  time horizon, O(waiting jobs));
- ``reused_again``: one more, 2 s later (the horizon already known);
- ``from_scratch``: the same cycle as ``reused`` with ``incremental=False`` (what a cycle that
  walks every waiting job costs with nothing kept), not applied; ``same_decisions``: its
  result equals the reused one in every round (equality ignores the stats);
- ``apply_quiet_run``, ``apply_reused``, ``apply_reused_again``: applying the result of
  ``quiet_run``, ``reused`` and ``reused_again`` (every waiting job's reason already in
  place; the answers again share one read-only ``pending``, so the second one's apply skips
  the pass over them).

Printed: the medians (ms) and the ratios ``reused / quiet_run`` and ``reused / changed``,
measured in one run. ``reused_count`` counts both kinds of reuse (2 per round at most).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

from kant.apply import apply
from kant.bench.cycle import evict_victims, finish_due, refill, setup, warm_up
from kant.cycle import schedule_cycle


def run(nodes: int, pending: int, rounds: int) -> dict[str, Any]:
    s, wl, rules = setup(
        nodes, pending, seed=7, policy="backfill", strategy="ebinpack", preemption=True
    )
    now = warm_up(s, wl, pending, 10.0)
    cl, q, ad = s.cluster, s.queue, s.admitter
    ms: dict[str, list[float]] = {
        "changed": [],
        "quiet_run": [],
        "reused": [],
        "reused_again": [],
        "from_scratch": [],
        "apply_quiet_run": [],
        "apply_reused": [],
        "apply_reused_again": [],
    }
    reused = same = 0

    def timed(name: str, t: float, *, incremental: bool = True) -> Any:
        c0 = time.thread_time()
        r = schedule_cycle(
            cl, q, ad, s.placer, t, policy=s.policy, preemption=rules, incremental=incremental
        )
        took = (time.thread_time() - c0) * 1000
        if name != "quiet_run" or not r.stats.reused:
            ms[name].append(took)
        return r

    def applied(name: str, r: Any, t: float) -> None:
        c0 = time.thread_time()
        apply(r, cl, q, ad, t)
        ms[name].append((time.thread_time() - c0) * 1000)

    for _ in range(rounds):
        now += 10.0
        finish_due(s, now)
        evict_victims(s, now)
        refill(s, wl, pending, now)
        apply(timed("changed", now), cl, q, ad, now)
        r = timed("quiet_run", now)
        if r.stats.reused:
            apply(r, cl, q, ad, now)
        else:
            applied("apply_quiet_run", r, now)
        r = timed("reused", now + 1.0)
        reused += r.stats.reused
        same += timed("from_scratch", now + 1.0, incremental=False) == r
        applied("apply_reused", r, now + 1.0)
        r = timed("reused_again", now + 2.0)
        reused += r.stats.reused
        applied("apply_reused_again", r, now + 2.0)
    med = {k: statistics.median(v) if v else math.nan for k, v in ms.items()}
    return {
        "bench": "quiet_cycle",
        "nodes": nodes,
        "pending": pending,
        "rounds": rounds,
        "quiet_run_count": len(ms["quiet_run"]),
        "reused_count": reused,
        "same_decisions": same == rounds,
        **{f"{k}_p50_ms": round(v, 3) for k, v in med.items()},
        "reused_over_quiet_run": round(med["reused"] / med["quiet_run"], 4),
        "reused_over_changed": round(med["reused"] / med["changed"], 4),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=12_500)
    ap.add_argument("--pending", type=int, default=3_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    out = run(a.nodes, a.pending, a.rounds)
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>24}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
