"""schedule_cycle(): non-mutation, determinism, apply, and the orchestrator's events."""

from __future__ import annotations

import pytest

from kant.admission import Quota
from kant.apply import apply
from kant.cycle import schedule_cycle
from kant.errors import InvalidNodeError, UnknownNodeError, UnknownPodError
from kant.model import Binding, ReasonCode, Tier
from kant.queueing import Backfill, EasyBackfill, JobPhase
from kant.scheduler import EvictionCause, Scheduler
from kant.testing import check_invariants, job

from .conftest import evict_victims, nodes, pod, scheduler


def _busy(policy: object = "best-effort-fifo") -> Scheduler:
    """A cluster with running jobs, a preemptor, a reservation-worthy head and waiters."""
    s = scheduler(
        nodes(4, leaves=2), policy=policy,
        quotas=[Quota.gpus("a", "H100", 16), Quota.gpus("b", "H100", 32)],
    )  # fmt: skip
    for i in range(4):
        s.submit(job(f"r{i}", gpus=8, tenant="ab"[i % 2], runtime=50 + i), now=0)
    s.step(now=0)
    s.submit(job("hi", gpus=8, priority=5, tenant="a", runtime=10, submitted_at=1), now=1)
    s.submit(job("head", gpus=8, replicas=2, tenant="b", runtime=10, submitted_at=2), now=2)
    s.submit(job("tiny", gpus=1, tenant="b", runtime=5, submitted_at=3), now=3)
    s.submit(job("ghost", gpus=1, models="B200", submitted_at=4), now=4)
    return s


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param("strict-fifo", id="strict fifo"),
        pytest.param("best-effort-fifo", id="best effort"),
        pytest.param(Backfill(threshold=0), id="backfill past its threshold"),
        pytest.param(EasyBackfill(), id="easy backfill"),
    ],
)
def test_a_cycle_never_mutates_the_cluster_or_the_queue(policy: object) -> None:
    s = _busy(policy)
    before_state = s.cluster.full_snapshot()
    before_pods = list(s.cluster.pods())
    before_queue = s.queue.statuses()
    before_usage = s.admitter.usage()
    r = s.schedule(now=5)
    assert r.victims or r.placed or r.reservation is not None  # it did decide things
    assert s.cluster.full_snapshot().same_as(before_state) == []
    assert s.cluster.snapshot().same_as(before_state) == []  # tentative changes undone
    assert list(s.cluster.pods()) == before_pods
    assert s.queue.statuses() == before_queue
    assert s.admitter.usage() == before_usage


@pytest.mark.parametrize("policy", ["best-effort-fifo", EasyBackfill(), Backfill(threshold=0)])
def test_the_same_inputs_give_the_same_result(policy: object) -> None:
    a, b = _busy(policy), _busy(policy)
    ra, rb = a.schedule(now=5), b.schedule(now=5)
    assert ra == rb
    assert a.schedule(now=5) == ra  # and again on the same state
    assert ra.stats.elapsed_ms >= 0  # timings are reported but not compared


def test_every_waiting_job_gets_a_typed_reason() -> None:
    s = _busy()
    r = s.schedule(now=5)
    waiting = {e for e in s.queue.jobs() if s.queue.status(e).phase is JobPhase.PENDING}
    assert set(r.pending) | set(r.placed) >= waiting
    assert r.pending["ghost"].code is ReasonCode.NO_POOL
    assert all(isinstance(x.code, ReasonCode) for x in r.pending.values())


def test_apply_binds_charges_quota_and_marks_victims_terminating() -> None:
    s = _busy()
    r = s.schedule(now=5)
    rep = apply(r, s.cluster, s.queue, s.admitter, now=5)
    assert set(rep.bound) == set(r.placed)
    for b in r.bindings:
        assert s.cluster.binding(b.pod) == b
        assert s.admitter.is_charged(b.pod)
    assert set(rep.terminating) == {p for v in r.victims for p in v.pods}
    for v in r.victims:
        assert set(s.queue.status(v.job).terminating) == set(v.pods)
    for n in r.nominations:
        assert s.queue.status(n.job).nomination == n
    for jid, reason in r.pending.items():
        if s.queue.status(jid).phase is JobPhase.PENDING:
            assert s.queue.status(jid).reason == reason
    check_invariants(s)


def test_apply_leaves_a_job_pending_when_its_devices_were_taken_meanwhile() -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=8), now=0)
    r = schedule_cycle(s.cluster, s.queue, s.admitter, s.placer, now=1)
    s.cluster.bind(Binding(pod=pod("intruder"), node="lf0-n0", gpus=(0,)))
    rep = s.apply(r, now=1)
    assert rep.stale == ("a",) and rep.bound == ()
    st = s.queue.status("a")
    assert st.phase is JobPhase.PENDING and st.attempts == 0
    assert s.cluster.num_pods == 1
    check_invariants(s)


def test_a_gang_losing_a_node_is_requeued_whole_and_its_other_pods_evicted() -> None:
    s = scheduler(nodes(2))
    s.submit(job("g", gpus=8, replicas=2), now=0)
    r = s.step(now=0)
    lost_node = r.bindings[0].node
    rep = s.node_lost(lost_node, now=5)
    assert rep.requeued == ("g",)
    assert [(e.pod, e.cause) for e in rep.evictions] == [(pod("g", 1), EvictionCause.GANG_REQUEUED)]
    st = s.queue.status("g")
    assert st.phase is JobPhase.PENDING and st.attempts == 0 and st.running == ()
    assert s.cluster.num_pods == 0 and s.admitter.usage() == {}
    check_invariants(s)
    s.cluster.add_node(s.cluster.node(r.bindings[1].node).__class__(
        name="spare", gpu_model="H100", gpus=8, leaf="lf0", spine="sp0", superspine="ss0"))  # fmt: skip
    assert s.step(now=6).placed == ("g",)


def test_a_pod_level_job_losing_a_node_requeues_only_the_lost_pods() -> None:
    s = scheduler(nodes(2))
    s.submit(job("svc", gpus=8, replicas=2, gang=False), now=0)
    r = s.step(now=0)
    rep = s.node_lost(r.bindings[0].node, now=5)
    assert rep.evictions == () and rep.released == (r.bindings[0].pod,)
    st = s.queue.status("svc")
    assert st.phase is JobPhase.RUNNING and st.running == (r.bindings[1].pod,)
    r2 = s.schedule(now=6)
    assert r2.pending["svc"].code in (ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.NO_FIT)
    check_invariants(s)


def test_an_unhealthy_gpu_requeues_the_pods_on_it_and_gets_nothing_new() -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=1), now=0)
    s.submit(job("b", gpus=1), now=0)
    r = s.step(now=0)
    gpu = s.cluster.binding(pod("a")).gpus[0]
    rep = s.gpu_unhealthy("lf0-n0", gpu, now=1)
    assert rep.requeued == ("a",) and s.queue.status("b").phase is JobPhase.RUNNING
    r = s.step(now=2)
    assert r.placed == ("a",) and gpu not in r.bindings[0].gpus
    check_invariants(s)
    assert s.gpu_unhealthy("lf0-n0", 7, now=3, evict=False).released == ()


def test_a_job_finishes_with_its_last_pod_and_its_quota_is_returned() -> None:
    s = scheduler(nodes(1), quotas=[Quota.gpus("t", "H100", 8)])
    s.submit(job("g", gpus=2, replicas=2, tenant="t"), now=0)
    s.step(now=0)
    s.confirm(pod("g", 0), now=1)
    assert s.queue.status("g").confirmed == (pod("g", 0),)
    assert s.pod_finished(pod("g", 0), now=2).finished == ()
    assert s.admitter.used("t", "H100") == 2000
    assert s.pod_finished(pod("g", 1), now=3).finished == ("g",)
    assert s.queue.status("g").phase is JobPhase.FINISHED
    assert s.admitter.usage() == {}
    with pytest.raises(UnknownPodError):
        s.pod_finished(pod("g", 1), now=4)
    check_invariants(s)


def test_a_gang_victim_is_requeued_when_its_last_pod_is_gone() -> None:
    s = scheduler(nodes(1))
    s.submit(job("lo", gpus=4, replicas=2), now=0)
    s.step(now=0)
    s.submit(job("p", gpus=8, priority=9, submitted_at=1), now=1)
    r = s.step(now=1)
    assert [v.job for v in r.victims] == ["lo"]
    s.pod_evicted(pod("lo", 0), now=2)
    assert s.queue.status("lo").phase is JobPhase.RUNNING  # still terminating
    check_invariants(s)
    s.pod_evicted(pod("lo", 1), now=3)
    assert s.queue.status("lo").phase is JobPhase.PENDING
    assert s.step(now=4).placed == ("p",)
    check_invariants(s)


def test_pods_on_a_failed_gpu_or_a_not_ready_node_are_returned_as_evictions() -> None:
    # the pods hit may still run (a GPU failed under them, a node unreachable): kant released
    # them and places them again, so the orchestrator must stop them. Before, only a gang's
    # other pods were evictions: an orchestrator stopping what `evictions` lists (docs/qsch.md)
    # left p/worker/0 running on its failed GPU while kant placed it again elsewhere
    s = scheduler(nodes(2))
    s.submit(job("p", gpus=4, replicas=2, gang=False), now=0)
    s.submit(job("g", gpus=4, replicas=2), now=0)
    s.step(now=0)
    x = s.cluster.binding(pod("p", 0)).node
    y = s.cluster.binding(pod("g", 0)).node
    assert s.cluster.pods_on(x) == (pod("p", 0), pod("p", 1)) and x != y  # (packed)
    gpu = s.cluster.binding(pod("p", 0)).gpus[0]
    rep = s.gpu_unhealthy(x, gpu, now=1)
    assert rep.released == (pod("p", 0),) and rep.requeued == ("p",)
    assert [(e.pod, e.node, e.cause) for e in rep.evictions] == [
        (pod("p", 0), x, EvictionCause.UNHEALTHY)
    ]
    rep = s.node_unhealthy(y, now=2)
    assert sorted(rep.released) == [pod("g", 0), pod("g", 1)] and rep.requeued == ("g",)
    assert sorted((e.pod, e.node, e.cause) for e in rep.evictions) == [
        (pod("g", 0), y, EvictionCause.UNHEALTHY),
        (pod("g", 1), y, EvictionCause.UNHEALTHY),
    ]
    assert s.gpu_unhealthy(x, gpu, now=3).evictions == ()  # (nothing holds it now)
    check_invariants(s)


def test_an_unexpected_eviction_of_a_gang_pod_requeues_the_gang() -> None:
    s = scheduler(nodes(2))
    s.submit(job("g", gpus=8, replicas=2), now=0)
    s.step(now=0)
    rep = s.pod_evicted(pod("g", 1), now=1)
    assert [e.pod for e in rep.evictions] == [pod("g", 0)] and rep.requeued == ("g",)
    assert s.queue.status("g").phase is JobPhase.PENDING
    check_invariants(s)


def test_a_failed_binding_of_a_pod_level_pod_requeues_that_pod_with_backoff() -> None:
    s = scheduler(nodes(1))
    s.submit(job("svc", gpus=1, replicas=3, gang=False), now=0)
    s.step(now=0)
    rep = s.binding_failed(pod("svc", 1), now=1, message="node agent refused")
    assert rep.released == (pod("svc", 1),) and rep.evictions == ()
    st = s.queue.status("svc")
    assert st.phase is JobPhase.RUNNING and st.attempts == 1 and st.backoff_until > 1
    r = s.step(now=2)
    assert r.pending["svc"].code is ReasonCode.BACKOFF
    assert s.step(now=st.backoff_until).placed == ("svc",)
    check_invariants(s)


def test_pod_level_pods_failing_together_count_as_one_failure() -> None:
    # six replicas fail to start at once (a bad image): one failure, one backoff, then a
    # retry of all six; as a gang of six counts one failure
    s = scheduler(nodes(1))
    s.submit(job("svc", gpus=1, replicas=6, gang=False), now=0)
    s.step(now=0)
    for i in range(6):
        rep = s.binding_failed(pod("svc", i), now=1, message="ErrImagePull")
        assert rep.released == (pod("svc", i),) and rep.failed == ()
    st = s.queue.status("svc")
    assert st.phase is JobPhase.PENDING and st.attempts == 1 and st.backoff_until == 11
    assert s.step(now=5).pending["svc"].code is ReasonCode.BACKOFF
    assert len(s.step(now=11).bindings) == 6
    rep = s.binding_failed(pod("svc", 0), now=12)  # after the backoff: a new failure
    assert s.queue.status("svc").attempts == 2
    check_invariants(s)


def test_a_failed_binding_of_a_gang_pod_releases_the_whole_gang() -> None:
    s = scheduler(nodes(2))
    s.submit(job("g", gpus=8, replicas=2), now=0)
    s.step(now=0)
    rep = s.binding_failed(pod("g", 0), now=1)
    assert rep.released == (pod("g", 0), pod("g", 1))
    assert [e.pod for e in rep.evictions] == [pod("g", 1)]
    assert s.queue.status("g").phase is JobPhase.PENDING and s.cluster.num_pods == 0
    check_invariants(s)


def test_a_minimal_orchestrator_loop_runs_everything_to_completion() -> None:
    s = _busy(EasyBackfill())
    s.cancel("ghost", now=4)
    t = 5.0
    while t < 500 and s.queue.counts()["finished"] < len(s.queue):
        r = s.step(now=t)
        evict_victims(s, r, now=t)
        for e in s.queue.running():
            est = e.job.runtime_estimate or 1.0
            if e.started_at is not None and e.started_at + est <= t:
                for p in list(s.queue.status(e.id).running):
                    s.pod_finished(p, now=t)
        check_invariants(s)
        t += 1
    assert s.queue.counts() == {"pending": 0, "running": 0, "finished": 8, "failed": 0}


def test_a_failed_nic_requeues_a_gang_whole_and_gets_nothing_new() -> None:
    s = scheduler(nodes(2))
    s.submit(job("g", gpus=4, replicas=2, nics=2, tier=Tier.NODE), now=0)
    s.submit(job("other", gpus=4, nics=2), now=0)
    s.step(now=0)
    g0 = s.cluster.binding(pod("g", 0))
    nic = g0.nics[0]
    rep = s.nic_unhealthy(g0.node, nic, now=1)
    assert rep.requeued == ("g",)  # the whole gang, though one pod held the NIC
    assert set(rep.released) == {pod("g", 0), pod("g", 1)}
    assert s.queue.status("g").phase is JobPhase.PENDING
    assert s.queue.status("other").phase is JobPhase.RUNNING
    assert not s.cluster.health_masks(g0.node)[2] >> nic & 1
    r = s.step(now=2)
    assert "g" in r.placed and all(nic not in b.nics for b in r.bindings if b.node == g0.node)
    check_invariants(s)
    s.nic_healthy(g0.node, nic)
    assert s.cluster.health_masks(g0.node)[2] >> nic & 1


def test_a_failed_nic_costs_a_pod_level_job_only_the_pod_holding_it() -> None:
    s = scheduler(nodes(2))
    s.submit(job("svc", gpus=2, replicas=3, nics=1, gang=False), now=0)
    s.step(now=0)
    hit = s.cluster.binding(pod("svc", 1))
    rep = s.nic_unhealthy(hit.node, hit.nics[0], now=1)
    assert rep.released == (pod("svc", 1),)
    assert [(e.pod, e.cause) for e in rep.evictions] == [(pod("svc", 1), EvictionCause.UNHEALTHY)]
    st = s.queue.status("svc")
    assert st.phase is JobPhase.RUNNING and set(st.running) == {pod("svc", 0), pod("svc", 2)}
    check_invariants(s)
    assert s.nic_unhealthy(hit.node, 7, now=2, evict=False).released == ()


def test_an_unhealthy_node_requeues_a_gang_whole_and_a_pod_level_job_loses_only_its_pods() -> None:
    s = scheduler(nodes(3))
    s.submit(job("g", gpus=4, replicas=2, spread=True), now=0)
    s.submit(job("svc", gpus=1, replicas=8, gang=False, spread=True), now=0)
    s.step(now=0)  # both spread over the nodes: svc has pods next to g's
    sick = s.cluster.binding(pod("g", 0)).node
    on_sick = {b.pod for b in s.cluster.pods() if b.node == sick and b.pod.job == "svc"}
    assert on_sick
    rep = s.node_unhealthy(sick, now=1)
    assert "g" in rep.requeued
    assert s.queue.status("g").phase is JobPhase.PENDING and s.cluster.job_pods("g") == ()
    st = s.queue.status("svc")
    assert set(st.running) == {p for p in job("svc", replicas=8).pods()} - on_sick
    assert sick in s.cluster and not s.cluster.is_healthy(sick)
    r = s.step(now=2)
    assert all(b.node != sick for b in r.bindings)
    check_invariants(s)
    s.node_healthy(sick)
    assert s.cluster.is_healthy(sick)


def test_health_events_for_an_unknown_node_or_nic_change_nothing() -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=1, nics=1), now=0)
    s.step(now=0)
    with pytest.raises(UnknownNodeError):
        s.node_unhealthy("nowhere", now=1)
    with pytest.raises(InvalidNodeError):
        s.nic_unhealthy("lf0-n0", 99, now=1)
    assert s.queue.status("a").phase is JobPhase.RUNNING and s.cluster.is_healthy("lf0-n0")
    check_invariants(s)
