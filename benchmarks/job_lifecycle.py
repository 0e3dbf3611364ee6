"""The fixed cost of one job's life in kant, phase by phase: what every job of a trace pays
whatever its size, and where the AccaSim side-by-side's whole-log runs spend their time
(their queue is nearly always empty: one cycle per arrival, one job per cycle).

    python benchmarks/job_lifecycle.py [--jobs 3000] [--pods 1] [--nodes 16]

On a cluster of ``--nodes`` 8-GPU nodes (one leaf), with Strict FIFO, first fit and no
preemption, each of ``--jobs`` jobs (a gang of ``--pods`` one-GPU pods) is submitted, a
cycle places it, the result is applied and its pods finish, before the next job comes:
``Scheduler.submit``, ``schedule``, ``apply`` and ``pods_finished`` each timed (wall clock,
the set-up out of the collector's reach as in ``kant bench``). ``empty_cycle_us`` is a cycle
with nothing waiting. Prints one JSON line of microseconds per job (medians over
``--rounds`` rounds).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing.builders import job
from kant.topology import fat_tree_for_nodes

PHASES = ("submit", "schedule", "apply", "finish")


def _scheduler(nodes: int) -> Scheduler:
    return Scheduler(
        ClusterState(fat_tree_for_nodes(nodes, nodes_per_leaf=nodes).nodes),
        queue=Queue(history=None),
        placer=Placer("firstfit"),
        policy="strict-fifo",
        preemption=PreemptionPolicy(priority=False, reclaim=False, backfill=False),
    )


def one_round(n_jobs: int, pods: int, nodes: int) -> dict[str, float]:
    """Microseconds per job of each phase, and of an empty cycle, over one fresh scheduler."""
    s = _scheduler(nodes)
    jobs = [job(f"j{i}", gpus=1, replicas=pods, gang=True) for i in range(n_jobs)]
    gc.collect()
    gc.freeze()
    try:
        clock = time.perf_counter
        spent = dict.fromkeys(PHASES, 0.0)
        for i, j in enumerate(jobs):
            now = float(i)
            t0 = clock()
            s.submit(j, now=now)
            t1 = clock()
            result = s.schedule(now=now)
            t2 = clock()
            s.apply(result, now=now)
            t3 = clock()
            s.pods_finished([b.pod for b in result.bindings], now=now + 0.5)
            t4 = clock()
            if len(result.bindings) != pods:
                raise RuntimeError(f"job {j.id} was not placed: {result.pending}")
            spent["submit"] += t1 - t0
            spent["schedule"] += t2 - t1
            spent["apply"] += t3 - t2
            spent["finish"] += t4 - t3
        t = clock()
        for i in range(n_jobs):
            s.schedule(now=float(n_jobs + i))
        empty = clock() - t
    finally:
        gc.unfreeze()
    out = {k: v / n_jobs * 1e6 for k, v in spent.items()}
    out["total"] = sum(out[k] for k in PHASES)
    out["empty_cycle"] = empty / n_jobs * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--pods", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    rounds = [one_round(a.jobs, a.pods, a.nodes) for _ in range(a.rounds)]
    out: dict[str, object] = {
        "bench": "job-lifecycle", "jobs": a.jobs, "pods": a.pods, "nodes": a.nodes,
        "rounds": a.rounds,
    }  # fmt: skip
    for k in (*PHASES, "total", "empty_cycle"):
        out[f"{k}_us"] = round(statistics.median(r[k] for r in rounds), 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
