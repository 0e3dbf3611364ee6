"""Scenario tests of interruptions: the cluster taking running pods from a job (a node lost,
removed or unhealthy, a device failing, a pod stopped that was no victim) and the limit of
them a job may take (``Backoff.max_interruptions``, docs/qsch.md "Interruptions")."""

from __future__ import annotations

import pytest

from kant.errors import InvalidConfigError, InvalidJobError
from kant.model import Binding, ReasonCode
from kant.preemption import PreemptionPolicy
from kant.queueing import Backoff, FailureHistory, JobPhase, Queue
from kant.scheduler import EvictionCause, Scheduler
from kant.testing import check_invariants, job

from .conftest import evict_victims, nodes, pod, scheduler


def _limited(limit: int | None, n_nodes: int = 4, **kw: object) -> Scheduler:
    return scheduler(nodes(n_nodes), backoff=Backoff(max_interruptions=limit), **kw)  # type: ignore[arg-type]


def _node_of(s: Scheduler, job_id: str, index: int = 0) -> str:
    return s.cluster.binding(pod(job_id, index)).node


def _node_of_lost(s: Scheduler) -> str:
    (name,) = s.lost_nodes()
    return name


def test_by_default_a_gang_survives_any_number_of_lost_nodes() -> None:
    s = _limited(None)
    s.submit(job("g", gpus=8, replicas=2), now=0)
    for k in range(10):
        s.step(now=10 * k + 1)
        rep = s.node_lost(_node_of(s, "g"), 10 * k + 2)
        assert rep.requeued == ("g",) and rep.failed == ()
        s.node_recovered(_node_of_lost(s), 10 * k + 3)
    st = s.status("g")
    assert st.phase is JobPhase.PENDING and st.interruptions == 10 and st.attempts == 0
    check_invariants(s)


def test_a_gang_past_the_limit_fails_and_its_other_pods_are_released_as_evictions() -> None:
    s = _limited(1)
    s.submit(job("g", gpus=8, replicas=2), now=0)
    s.step(now=1)
    first = s.node_lost(_node_of(s, "g"), 2)
    assert first.requeued == ("g",) and first.failed == ()
    assert s.status("g").interruptions == 1
    s.step(now=3)
    other = _node_of(s, "g", 1)
    rep = s.node_lost(_node_of(s, "g", 0), 4)
    assert rep.failed == ("g",) and rep.requeued == ()
    assert [(e.pod, e.node, e.cause) for e in rep.evictions] == [
        (pod("g", 1), other, EvictionCause.JOB_FAILED)
    ]
    st = s.status("g")
    assert st.phase is JobPhase.FAILED and st.interruptions == 2 and st.bindings == ()
    assert st.reason is not None and st.reason.code is ReasonCode.FAILED
    lost = s.lost_nodes()[-1]
    assert st.reason.message == f"interruption limit 1 reached; last: node {lost} lost"
    assert s.cluster.pods_on(other) == ()
    assert s.step(now=5).placed == ()  # never scheduled again
    check_invariants(s)


def test_a_limit_of_zero_fails_a_job_at_its_first_interruption() -> None:
    s = _limited(0)
    s.submit(job("g", gpus=8, replicas=2), now=0)
    s.step(now=1)
    rep = s.node_removed(_node_of(s, "g"), 2)
    assert rep.failed == ("g",)
    assert s.status("g").reason.message.endswith("node lf0-n0 removed")  # type: ignore[union-attr]
    check_invariants(s)


def test_each_event_interrupts_each_job_it_hits_once_however_many_pods_it_took() -> None:
    s = _limited(1, n_nodes=2)
    s.submit(job("p", gpus=1, replicas=8, gang=False), now=0)  # all 8 pods on one node
    s.step(now=1)
    rep = s.node_unhealthy(_node_of(s, "p"), 2)
    assert len(rep.released) == 8 and rep.failed == ()
    assert s.status("p").interruptions == 1
    check_invariants(s)


def test_a_pod_level_job_past_the_limit_fails_and_releases_its_pods_on_other_nodes() -> None:
    s = _limited(0, n_nodes=2)
    s.submit(job("p", gpus=8, replicas=2, gang=False), now=0)
    s.step(now=1)
    n0, n1 = _node_of(s, "p", 0), _node_of(s, "p", 1)
    assert n0 != n1
    rep = s.gpu_unhealthy(n0, 3, 2)
    assert rep.failed == ("p",)
    assert [(e.pod, e.cause) for e in rep.evictions] == [
        (pod("p", 0), EvictionCause.UNHEALTHY),  # (the pod on the GPU: it may still run)
        (pod("p", 1), EvictionCause.JOB_FAILED),
    ]
    assert s.cluster.pods_on(n1) == () and s.status("p").phase is JobPhase.FAILED
    assert s.status("p").reason.message.endswith(f"GPU 3 of node {n0} unhealthy")  # type: ignore[union-attr]
    check_invariants(s)


def test_a_pod_the_cluster_stopped_is_an_interruption_and_one_that_failed_is_not() -> None:
    s = _limited(0)
    s.submit(job("p", gpus=8, replicas=2, gang=False), now=0)
    s.step(now=1)
    rep = s.pod_evicted(pod("p", 1), 2)  # it failed, or a user deleted it
    assert rep.failed == () and s.status("p").interruptions == 0
    rep = s.pod_evicted(pod("p", 0), 3, interrupted=True)  # a drain, a node-pressure eviction
    assert rep.failed == ("p",)
    assert s.status("p").reason.message.endswith("p/worker/0 evicted")  # type: ignore[union-attr]
    check_invariants(s)


def test_preemption_is_never_an_interruption() -> None:
    s = _limited(0, n_nodes=1, preemption=PreemptionPolicy())
    s.submit(job("lo", gpus=8, priority=0), now=0)
    s.step(now=1)
    s.submit(job("hi", gpus=8, priority=10), now=2)
    r = s.step(now=3)
    assert [v.job for v in r.victims] == ["lo"]
    evict_victims(s, r, 4)
    st = s.status("lo")
    assert st.phase is JobPhase.PENDING and st.interruptions == 0
    check_invariants(s)


def test_a_lost_node_under_a_victim_being_evicted_is_no_interruption() -> None:
    s = _limited(0, n_nodes=1, preemption=PreemptionPolicy())
    s.submit(job("lo", gpus=8, priority=0), now=0)
    s.step(now=1)
    s.submit(job("hi", gpus=8, priority=10), now=2)
    assert [v.job for v in s.step(now=3).victims] == ["lo"]
    rep = s.node_lost("lf0-n0", 4)  # the node dies during the victim's grace period
    assert rep.failed == () and s.status("lo").interruptions == 0
    check_invariants(s)


def test_the_count_is_carried_on_by_history_and_a_job_past_the_limit_is_refused() -> None:
    s = _limited(1)
    s.submit(job("g", gpus=8, replicas=2), now=0)
    s.step(now=1)
    s.node_lost(_node_of(s, "g"), 2)
    before = s.queue.status("g")
    assert before.interruptions == 1
    s.cancel("g", 3)
    s.submit(job("g2", gpus=8, replicas=2), now=3, history=before)
    assert s.status("g2").interruptions == 1
    s.step(now=4)
    assert s.node_lost(_node_of(s, "g2"), 5).failed == ("g2",)
    q = Queue(backoff=Backoff(max_interruptions=1))
    with pytest.raises(InvalidJobError, match="history"):
        q.submit(job("g3", gpus=8), now=6, history=s.queue.status("g2"))


def test_a_job_taken_back_at_a_restart_counts_on_from_the_interruptions_it_had() -> None:
    # a restarted orchestrator takes back a running gang that one lost node had interrupted
    # already: the next one fails it, as it would have without the restart
    s = _limited(1)
    j = job("g", gpus=8, replicas=2)
    names = [n.name for n in s.cluster.nodes()][:2]
    bs = [
        Binding(pod=p, node=n, gpus=tuple(range(8))) for p, n in zip(j.pods(), names, strict=True)
    ]
    s.restore(j, bs, now=5, history=FailureHistory(interruptions=1))
    assert s.status("g").interruptions == 1
    assert s.node_lost(names[0], 6).failed == ("g",)
    check_invariants(s)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_limit_that_is_not_an_int_of_zero_or_more_is_refused(bad: object) -> None:
    with pytest.raises(InvalidConfigError, match="max_interruptions"):
        Backoff(max_interruptions=bad)  # type: ignore[arg-type]
