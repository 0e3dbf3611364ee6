"""A scheduler, its cluster and its snapshot are freed once the caller drops them: nothing
kant keeps across cycles (per snapshot, per queue) holds them. A table keyed by snapshot
whose values named their snapshot kept every cluster alive: a sweep or ``kant compare``
running scenarios one after another in one process grew by a cluster per run, and the
test suite spent most of a long property test in garbage collection."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from kant import Scheduler
from kant.admission import Admitter, Quota
from kant.sim.scenarios import make_scenario
from kant.sim.simulator import Simulator
from kant.testing import ClusterBuilder, job


def _refs(policy: str) -> list[weakref.ref[Any]]:
    c = ClusterBuilder().leaf("lf0", nodes=4).build()
    quotas = [Quota.gpus("a", "H100", 16), Quota.gpus("b", "H100", 16)]
    s = Scheduler(c, policy=policy, admitter=Admitter(quotas))
    for i in range(6):
        s.submit(job(f"j{i}", gpus=8, replicas=1 + i % 2, tenant="ab"[i % 2], runtime=100,
                     priority=i % 3), now=0)  # fmt: skip
    for t in range(3):
        s.step(now=t)
    return [weakref.ref(x) for x in (c, c.snapshot(), s.queue, s)]


@pytest.mark.parametrize(
    "policy",
    ["strict-fifo", "best-effort-fifo", "backfill", "easy-backfill", "conservative-backfill"],
)
def test_a_dropped_scheduler_frees_its_cluster_and_snapshot(policy: str) -> None:
    refs = _refs(policy)
    gc.collect()
    assert [r() is None for r in refs] == [True] * 4


def test_a_simulation_run_frees_its_cluster_once_its_result_is_read() -> None:
    sc = make_scenario("inference", jobs=60)
    sched = sc.scheduler()
    state = weakref.ref(sched.cluster)
    assert Simulator(sched, sc.jobs, sc.config).run().records
    del sched
    gc.collect()
    assert state() is None
