"""What a cycle costs under EASY backfill while the waiting head is a gang whose roles may
each use several GPU models (quota decides it by one GPU model per role, and which fit it
takes may depend on what the nodes hold).

    python benchmarks/bench_crosspool_easy.py [--n 32 64 128] [--cycles 60] [--repeat 3]
                                              [--no-quotas] [--policy easy|default] [--json]

The set-up: ``n`` 8-GPU H100 nodes and ``n`` 8-GPU A100 nodes, filled by ``2n`` one-node
jobs of tenant ``b`` whose expected ends are staggered (one every 10 s from 1000 s on);
then the head, tenant ``a``'s gang ``g`` of a role of 2 pods of 8 GPUs and a role of 1 pod
of 8 GPUs, both H100|A100 (``a``: 16 H100 and 16 A100, isolated; ``b``: the whole cluster,
isolated). Each cycle one new 8-GPU job of ``b`` arrives (it waits: the cluster is full)
and a cycle runs and is applied, ``--cycles`` times, 1 s apart, before any job ends.
Printed: per ``n``, the median and mean milliseconds of a cycle (this thread's CPU clock),
the lowest of ``--repeat`` runs (each from scratch: a shared machine's noise only adds).
With ``--no-quotas`` the admitter has no quotas.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from kant import Admitter, Quota, Scheduler
from kant.model import Job, Resources, Role
from kant.queueing import EasyBackfill
from kant.testing import ClusterBuilder, job


def run(n: int, cycles: int, quotas: bool, policy: str) -> dict[str, Any]:
    cl = (
        ClusterBuilder()
        .leaf("h", nodes=n, model="H100", gpus=8)
        .leaf("x", nodes=n, model="A100", gpus=8)
        .build()
    )
    adm = (
        Admitter(
            [
                Quota.gpus("a", "H100", 16),
                Quota.gpus("a", "A100", 16),
                Quota.gpus("b", "H100", 8 * n),
                Quota.gpus("b", "A100", 8 * n),
            ],
            modes={"a": "isolated", "b": "isolated"},
        )
        if quotas
        else Admitter(None)
    )
    if policy == "easy":
        s = Scheduler(cl, admitter=adm, policy=EasyBackfill())
    else:
        s = Scheduler(cl, admitter=adm)
    for k in range(2 * n):
        s.submit(
            job(f"fill{k}", tenant="b", gpus=8, models="H100|A100", runtime=1000 + 10 * k), now=0
        )
    placed = s.step(now=0).placed
    assert len(placed) == 2 * n, len(placed)
    roles = (
        Role(name="two", replicas=2, resources=Resources(gpus=8), gpu_models="H100|A100"),
        Role(name="one", replicas=1, resources=Resources(gpus=8), gpu_models="H100|A100"),
    )
    s.submit(Job(id="g", tenant="a", roles=roles, runtime_estimate=50, submitted_at=1), now=1)
    s.step(now=1)
    ms: list[float] = []
    for c in range(cycles):
        t = 2.0 + c
        s.submit(
            job(f"new{c}", tenant="b", gpus=8, models="H100|A100", runtime=500, submitted_at=t),
            now=t,
        )
        c0 = time.thread_time()
        r = s.step(now=t)
        ms.append((time.thread_time() - c0) * 1000)
        assert not r.placed, r.placed
    return {
        "n": n,
        "policy": policy,
        "quotas": quotas,
        "cycles": cycles,
        "median_ms": round(statistics.median(ms), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[32, 64, 128])
    ap.add_argument("--cycles", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-quotas", action="store_true")
    ap.add_argument("--policy", choices=("easy", "default"), default="easy")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for n in a.n:
        runs = [run(n, a.cycles, not a.no_quotas, a.policy) for _ in range(a.repeat)]
        rows.append(min(runs, key=lambda r: r["median_ms"]))
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(
            f"n={row['n']:<4} {row['policy']:<7} quotas={row['quotas']!s:<5} "
            f"median {row['median_ms']:8.3f} ms/cycle  mean {row['mean_ms']:8.3f}"
        )


if __name__ == "__main__":
    main()
