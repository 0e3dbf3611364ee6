"""What one Strict FIFO pass costs: a cycle in which a preemptor passes a head that another
preemptor's victim became, with many jobs waiting between the two.

    PYTHONPATH=<checkout> python benchmarks/strict_pass.py [--jobs 3000] [--cycles 15]

The set-up (one 8-GPU node in rack r0, one in r1, 62 full ones in r2; Strict FIFO, the
built-in preemption rules): ``h`` (priority 1, 2 GPUs) runs on r0 and ``v`` (priority 0) on
r1; ``p`` (priority 1, held to r1) evicts ``v``, then ``q`` (priority 3, held to r0) evicts
``h``. ``--jobs`` jobs of priority 1 (3 to 8 GPUs, one or two pods, submitted between ``h``
and ``p``) then arrive; none fits anywhere, and a cycle sees them all blocked. Once ``v`` is
gone, ``h`` heads the queue and blocks, and ``p`` passes it (only ``p``'s nomination keeps
``h`` out, and ``h`` can never preempt ``p``): the cycle walks every job between them, each
refused by the gate.

Measured by the process's CPU clock, ``--cycles`` times each (median, and the first):

- ``pass_ms``: that cycle (not applied, so each one is the pass again);
- ``closed_ms``: the cycles after ``p`` started, a job that fits nowhere joining the end of
  the queue before each (``h`` blocks and the gate closes at once, so every job behind it
  is skipped together, as kept from the cycle before).

Both with a quota for the jobs' tenant (``quota``: each job walked during the pass also has
a quota decision) and without quotas (``no_quota``). Printed: one JSON line. Run it with
``PYTHONPATH`` set to each checkout in turn, alternating, to compare two.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from kant.admission import Admitter, Quota
from kant.model import NodeSelector
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, job

SHAPES = ((3, 1), (4, 1), (5, 1), (6, 1), (8, 1), (4, 2), (8, 2))  # (GPUs, pods) of the waiting


def setup(jobs: int, quota: bool) -> Scheduler:
    """The scheduler just before the pass: ``v`` and ``h`` evicted, ``q`` started, ``p``
    nominated, ``jobs`` jobs waiting between ``h`` and ``p``."""
    c = (
        ClusterBuilder()
        .leaf("lf0", nodes=1, labels={"rack": "r0"})
        .leaf("lf1", nodes=1, labels={"rack": "r1"})
        .leaf("lf2", nodes=62, labels={"rack": "r2"})
        .build()
    )
    adm = Admitter([Quota.gpus("t", "H100", 1_000_000)] if quota else None)
    s = Scheduler(c, queue=Queue(), admitter=adm, placer=Placer("ebinpack"),
                  policy="strict-fifo", preemption=PreemptionPolicy())  # fmt: skip
    r0, r1, r2 = (NodeSelector.labels(rack=x) for x in ("r0", "r1", "r2"))

    def start(t: float, jid: str, **kw: Any) -> None:
        s.submit(job(jid, submitted_at=t, tenant="t", **kw), now=t)
        r = s.step(now=t)
        assert r.placed == (jid,), r.pending

    start(0, "fa", gpus=6, priority=5, preemptible=False, selector=r0)
    start(0, "fb", gpus=6, priority=5, preemptible=False, selector=r1)
    for i in range(62):
        start(0, f"f{i}", gpus=8, priority=5, preemptible=False, selector=r2)
    start(0, "h", gpus=2, priority=1)
    start(0, "v", gpus=2, selector=r1)
    s.submit(job("p", gpus=2, priority=1, submitted_at=1, selector=r1, tenant="t"), now=1)
    ra = s.step(now=1)
    s.submit(job("q", gpus=2, priority=3, submitted_at=2, selector=r0, tenant="t"), now=2)
    rb = s.step(now=2)
    assert [v.job for v in ra.victims] == ["v"] and [v.job for v in rb.victims] == ["h"]
    for v in rb.victims:
        for pod in v.pods:
            s.pod_evicted(pod, 2.5)
    r = s.step(now=2.5)  # q starts; h blocks, and p waits for v to go
    assert r.placed == ("q",), r.placed
    for i in range(jobs):
        gpus, pods = SHAPES[i % len(SHAPES)]
        w = job(f"w{i}", gpus=gpus, replicas=pods, priority=1, submitted_at=0.5, tenant="t")
        s.submit(w, now=2.6)
    r = s.step(now=2.6)  # h blocks them all (p waits for v): their facts are known
    assert not r.placed and r.pending["w0"].message == "behind h", r.pending.get("w0")
    for v in ra.victims:
        for pod in v.pods:
            s.pod_evicted(pod, 2.7)
    return s


def cpu_ms(
    s: Scheduler, t0: float, cycles: int, placed: tuple[str, ...], arrive: bool = False
) -> list[float]:
    """CPU ms of ``cycles`` cycles from ``t0`` on, none applied; each places ``placed``.
    ``arrive``: a job that fits nowhere joins the end of the queue before each (a cycle
    that decided nothing is otherwise given again without a walk)."""
    out = []
    for k in range(cycles):
        if arrive:
            x = job(f"x{k}", gpus=16, priority=0, submitted_at=t0 + k * 1e-3, tenant="t")
            s.submit(x, now=t0 + k * 1e-3)
        c = time.process_time()
        r = s.schedule(t0 + k * 1e-3)
        out.append((time.process_time() - c) * 1000)
        assert r.placed == placed, (r.placed, list(r.pending.items())[:3])
    return out


def measure(jobs: int, cycles: int, quota: bool) -> dict[str, float]:
    s = setup(jobs, quota)
    passes = cpu_ms(s, 3.0, cycles, ("p",))
    r = s.step(now=4.0)  # p passes h and starts
    assert r.placed == ("p",) and r.pending["w0"].message == "behind h", r.pending.get("w0")
    closed = cpu_ms(s, 5.0, cycles, (), arrive=True)
    return {
        "pass_ms": round(statistics.median(passes), 3),
        "pass_first_ms": round(passes[0], 3),
        "closed_ms": round(statistics.median(closed), 3),
        "closed_first_ms": round(closed[0], 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=3000, help="jobs between head and preemptor")
    ap.add_argument("--cycles", type=int, default=15, help="cycles timed, each kind")
    args = ap.parse_args()
    out: dict[str, Any] = {"jobs": args.jobs}
    for name, quota in (("quota", True), ("no_quota", False)):
        out[name] = measure(args.jobs, args.cycles, quota)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
