"""Immutable value objects are shared, not rebuilt, by ``copy.copy`` and ``copy.deepcopy``:
a deep copy of a scheduler's state (what a start-time estimate plays forward) holds the very
same jobs, pod ids and bindings, and nothing of it can differ."""

from __future__ import annotations

import copy

from kant.model import PodId, Reason, ReasonCode
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, job


def test_jobs_pod_ids_reasons_and_bindings_copy_as_themselves() -> None:
    j = job("a", gpus=2, runtime=10)
    pod = PodId(job="a", role="worker", index=0)
    why = Reason(code=ReasonCode.NO_FIT, message="x")
    for v in (j, j.roles[0], j.roles[0].resources, pod, why):
        assert copy.deepcopy(v) is v
        assert copy.copy(v) is v


def test_a_deep_copy_of_a_scheduler_state_shares_its_value_objects_only() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    s.submit(job("a", gpus=8, runtime=100), now=0)
    s.step(0)
    cluster, queue = copy.deepcopy((s.cluster, s.queue))
    assert cluster is not s.cluster and queue is not s.queue
    assert queue.entry("a") is not s.queue.entry("a")  # (mutable bookkeeping: copied)
    assert queue.entry("a").job is s.queue.entry("a").job
    b = next(iter(s.cluster.pods()))
    assert cluster.binding(b.pod) is b
