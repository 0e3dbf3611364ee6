"""Preemption and quota under contention (issue 12): no reclaim livelock, pod-level
preemption, reclaim judged after the tenant's own victims, no over-eviction across preemptors,
no cascades within or across cycles (a job whose pods are being evicted preempts by no kind,
backfill included), non-borrowing jobs first."""

from __future__ import annotations

from kant.admission import Admitter, Quota
from kant.cycle import CycleResult
from kant.model import NodeSelector, ReasonCode, VictimReason
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Backfill, JobPhase, Queue
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, finish, nodes, pod, scheduler


def _run(s: Scheduler, t0: float, cycles: int) -> list[CycleResult]:
    """``cycles`` cycles one second apart from ``t0``; every victim is gone by the next."""
    out = []
    for k in range(cycles):
        r = s.step(now=t0 + k)
        out.append(r)
        evict_victims(s, r, now=t0 + k + 0.5)
        check_invariants(s)
    return out


def test_a_reclaimed_victim_does_not_take_back_the_quota_held_for_its_preemptor() -> None:
    # a and b share 8 GPUs nominal each; an isolated tenant holds 8 more, idle (24 GPUs)
    s = scheduler(
        nodes(3),
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8), Quota.gpus("iso", "H100", 8)],
        modes={"iso": "isolated"},
    )  # fmt: skip
    s.submit(job("b1", gpus=8, tenant="b", submitted_at=0), now=0)
    s.submit(job("b2", gpus=8, tenant="b", submitted_at=1), now=1)
    assert s.step(now=1).placed == ("b1", "b2")  # b borrows a's 8
    s.submit(job("a1", gpus=8, tenant="a", submitted_at=5), now=5)
    rs = _run(s, 5, 6)
    victims = [v.job for r in rs for v in r.victims]
    assert victims == ["b2"]  # one reclaim, not one per cycle
    assert rs[0].victims[0].reason is VictimReason.RECLAIM
    assert s.queue.status("a1").phase is JobPhase.RUNNING
    assert s.queue.status("b2").phase is JobPhase.PENDING
    assert rs[-1].pending["b2"].code is ReasonCode.QUOTA_EXCEEDED


def test_a_pod_level_preemptor_preempts_for_as_many_pods_as_preemption_can_place() -> None:
    s = scheduler(nodes(1))
    s.submit(job("lo", gpus=8, priority=10, submitted_at=0), now=0)
    assert s.step(now=0).placed == ("lo",)
    s.submit(job("hi", gpus=8, replicas=2, gang=False, priority=100000, submitted_at=1), now=1)
    r = s.step(now=1)
    assert [(v.job, v.reason) for v in r.victims] == [("lo", VictimReason.PRIORITY)]
    assert r.pending["hi"].code is ReasonCode.PREEMPTING
    evict_victims(s, r, now=1.5)
    r = s.step(now=2)
    assert [str(b.pod) for b in r.bindings] == ["hi/worker/0"]
    check_invariants(s)


def test_a_tenant_reclaims_when_dropping_its_own_low_priority_job_brings_it_within_nominal() -> (
    None
):
    # 16 GPUs; a and b have 8 nominal each. a runs a low-priority 4-GPU job; b borrows 4.
    s = scheduler(nodes(2), quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)])
    s.submit(job("a-lo", gpus=4, tenant="a", priority=0, submitted_at=0), now=0)
    s.submit(job("b1", gpus=8, tenant="b", priority=20, submitted_at=1), now=1)
    s.submit(job("b2", gpus=4, tenant="b", priority=20, submitted_at=2), now=2)
    assert sorted(s.step(now=2).placed) == ["a-lo", "b1", "b2"]
    # a's important job needs 8: 4 + 8 > 8 nominal, but without a-lo it is within nominal
    s.submit(job("a-hi", gpus=8, tenant="a", priority=10, submitted_at=3), now=3)
    r = s.step(now=3)
    assert sorted((v.job, v.reason) for v in r.victims) == [
        ("a-lo", VictimReason.PRIORITY),
        ("b2", VictimReason.RECLAIM),
    ]
    evict_victims(s, r, now=3.5)
    assert s.step(now=4).placed == ("a-hi",)
    assert s.admitter.used("a", "H100") == 8000 and s.admitter.used("b", "H100") == 8000
    check_invariants(s)


def test_capacity_freed_beyond_a_preemptors_need_serves_a_later_preemptor_before_more_is_evicted() -> (
    None
):
    # 32 GPUs; b borrows all of them with b1 (3x8) and b2 (1x8)
    s = scheduler(nodes(4), quotas=[Quota.gpus("a", "H100", 24), Quota.gpus("b", "H100", 8)])
    s.submit(job("b1", gpus=8, replicas=3, tenant="b", submitted_at=0), now=0)
    s.submit(job("b2", gpus=8, tenant="b", submitted_at=1), now=1)
    assert sorted(s.step(now=1).placed) == ["b1", "b2"]
    s.submit(job("a1", gpus=8, replicas=2, tenant="a", submitted_at=5), now=5)
    s.submit(job("a2", gpus=2, tenant="a", submitted_at=6), now=6)
    rs = _run(s, 6, 3)
    assert [v.job for r in rs for v in r.victims] == ["b1"]  # b2 keeps running
    assert s.queue.status("a1").phase is JobPhase.RUNNING
    assert s.queue.status("a2").phase is JobPhase.RUNNING
    assert s.queue.status("b2").phase is JobPhase.RUNNING


def test_a_job_evicted_a_moment_ago_does_not_evict_a_lower_priority_job_in_turn() -> None:
    cluster = ClusterBuilder().leaf("lf0", nodes=1).leaf("lfa", nodes=1, model="A100").build()
    s = scheduler(cluster)
    s.submit(job("lo", gpus=8, priority=0, models="A100", submitted_at=0), now=0)
    s.submit(job("mid", gpus=8, priority=5, models=frozenset({"H100", "A100"}), submitted_at=1))
    assert sorted(s.step(now=1).placed) == ["lo", "mid"]
    s.submit(job("hi", gpus=8, priority=10, models="H100", submitted_at=2), now=2)
    rs = _run(s, 2, 5)
    assert [(v.job, v.preemptor) for r in rs for v in r.victims] == [("mid", "hi")]
    assert s.queue.status("lo").phase is JobPhase.RUNNING
    assert s.queue.status("mid").phase is JobPhase.PENDING


def test_a_job_within_its_nominal_quota_goes_before_a_borrowing_job_of_the_same_priority() -> None:
    s = scheduler(nodes(2), quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)])
    s.submit(job("b0", gpus=8, tenant="b", submitted_at=0), now=0)
    assert s.step(now=0).placed == ("b0",)
    s.submit(job("b1", gpus=8, tenant="b", submitted_at=1), now=1)  # would borrow a's 8
    s.submit(job("a1", gpus=8, tenant="a", submitted_at=2), now=2)  # within a's nominal
    rs = _run(s, 2, 3)
    assert rs[0].placed == ("a1",)
    assert rs[0].pending["b1"].code is ReasonCode.QUOTA_EXCEEDED
    assert not [v for r in rs for v in r.victims]  # no start-then-evict


# Runs the contention state machine (test_contention_machine.py) found with pod-level jobs,
# each reduced to the few steps that show it (tenants a and b share 8 GPUs nominal each, an
# isolated tenant holds 8 more, 32 GPUs in all; ebinpack; plain victim order).


def _contention_scheduler() -> Scheduler:
    cluster = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build()
    return Scheduler(
        cluster,
        queue=Queue(),
        admitter=Admitter(
            [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8), Quota.gpus("iso", "H100", 8)],
            modes={"iso": "isolated"},
        ),
        placer=Placer("ebinpack"),
        preemption=PreemptionPolicy(reclaim_others_first=False),
    )


def _run_contention(
    s: Scheduler, steps: list[list[tuple[int, int, int, str]] | None]
) -> list[CycleResult]:
    """Submit each step's jobs (gpus, replicas, priority, tenant; pod-level), or run a cycle
    (None) whose victims the orchestrator stops at once."""
    now, n, out = 0.0, 0, []
    for step in steps:
        if step is not None:
            for gpus, replicas, prio, tenant in step:
                n += 1
                s.submit(job(f"j{n}", gpus=gpus, replicas=replicas, gang=False, tenant=tenant,
                             priority=prio, submitted_at=now), now=now)  # fmt: skip
            continue
        now += 1.0
        r = s.schedule(now)
        s.apply(r, now)
        for v in r.victims:
            for p in v.pods:
                e = s.queue.get(p.job)
                if e is not None and p in e.assigned:
                    s.pod_evicted(p, now)
        out.append(r)
    return out


def test_a_pod_level_preemptor_keeps_its_held_quota_when_another_tenant_reclaims_its_victim() -> (
    None
):
    s = _contention_scheduler()
    _run_contention(s, [[(2, 1, 0, "a"), (2, 2, 0, "a"), (2, 2, 0, "b")], None,
             [(8, 2, 1, "b")], None,
             [(2, 1, 0, "a"), (2, 1, 2, "a")], None, None, None, None])  # fmt: skip
    assert s.queue.status("j4").phase is not JobPhase.PENDING


def test_a_reclaim_chosen_in_the_cycle_a_preemptor_is_placed_leaves_it_every_device_its_victims_freed() -> (
    None
):
    s = _contention_scheduler()
    rs = _run_contention(s, [[(2, 2, 0, "a"), (2, 2, 0, "a")], None,
                             [(2, 2, 0, "b"), (4, 2, 1, "a")], None,
                             [(2, 1, 1, "b")], None])  # fmt: skip
    # a borrows all of b's quota; b's j3 (2 pods) reclaims both pods of a's j2
    assert [(v.job, v.preemptor) for v in rs[1].victims] == [("j2", "j3"), ("j2", "j3")]
    nominated = {(b.node, b.gpus) for b in rs[1].nominations[0].bindings}
    # b's j5 reclaims a's j1 in the cycle j3 is placed: a's victim still holds quota until it
    # is gone, and j3's held quota must not be counted against it a second time
    assert [(v.job, v.preemptor) for v in rs[2].victims] == [("j1", "j5")]
    assert {(b.node, b.gpus) for b in rs[2].bindings if b.pod.job == "j3"} == nominated
    check_invariants(s)


def test_a_pod_level_job_whose_running_pod_is_being_evicted_does_not_preempt_for_its_other_pods() -> (
    None
):
    s = _contention_scheduler()
    rs = _run_contention(s, [[(2, 1, 0, "a"), (2, 2, 0, "a")], None,
                             [(2, 2, 0, "b"), (4, 2, 1, "a")], None,
                             [(2, 1, 1, "b")], None, None])  # fmt: skip
    assert len(rs[1].bindings) == 3  # j4 (a, priority 1) borrows; b's j3 runs one pod
    # b's priority-1 j5 evicts j3's running pod; j3 must not then reclaim a's j2 for its
    # other pod (a cascade within the cycle), only to lose that nomination when its last
    # running pod goes
    assert [(v.job, v.preemptor) for v in rs[2].victims] == [("j3", "j5")]
    assert rs[3].placed == ("j5",)
    assert not rs[3].victims
    check_invariants(s)


def test_a_backfill_head_whose_running_pod_is_reclaimed_does_not_backfill_preempt_in_that_cycle() -> (
    None
):
    # Two 8-GPU nodes, one per rack; a and b have 8 GPUs nominal each. On r0 run b's bigB
    # (4 GPUs) and, once a's Z is gone, b's Y and W (2 GPUs each, borrowed from a); on r1 a's
    # A1 (4 GPUs) and the first pod of b's X (two 4-GPU pods, pod-level), whose second pod
    # waits on quota. At t=4 a's r (priority 1, held to r1) reclaims X's running pod. X, the
    # Backfill head past its threshold, used to backfill-preempt Y and W in the same cycle
    # for its second pod, its search counting its first running: requeued, the first pod
    # started on the devices found for the second, Y and W started again on r1, and X
    # evicted them a second time. A job whose pods are being evicted preempts by no kind.
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=1, labels={"rack": "r0"})
        .leaf("lf1", nodes=1, labels={"rack": "r1"})
        .build()
    )
    s = scheduler(
        cluster,
        policy=Backfill(threshold=3),
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)],
        preemption=PreemptionPolicy(),
    )
    r0, r1 = NodeSelector.labels(rack="r0"), NodeSelector.labels(rack="r1")
    fixed = dict(preemptible=False, submitted_at=0)
    s.submit(job("bigB", gpus=4, tenant="b", selector=r0, **fixed), now=0)
    s.submit(job("A1", gpus=4, tenant="a", selector=r1, **fixed), now=0)
    s.submit(job("Z", gpus=2, tenant="a", selector=r0, **fixed), now=0)
    assert sorted(s.step(now=0).placed) == ["A1", "Z", "bigB"]
    s.submit(job("X", gpus=4, replicas=2, gang=False, tenant="b", submitted_at=1), now=1)
    assert [(b.pod, b.node) for b in s.step(now=1).bindings] == [(pod("X"), "lf1-n0")]
    s.submit(job("Y", gpus=2, tenant="b", submitted_at=2), now=2)
    assert s.step(now=2).placed == ("Y",)
    finish(s, "Z", now=3)
    s.submit(job("W", gpus=2, tenant="b", submitted_at=3), now=3)
    assert s.step(now=3).placed == ("W",)
    s.submit(job("r", gpus=2, tenant="a", priority=1, selector=r1, submitted_at=4), now=4)
    r = s.step(now=4)
    assert [(v.job, v.pods, v.reason, v.preemptor) for v in r.victims] == [
        ("X", (pod("X"),), VictimReason.RECLAIM, "r")
    ]
    assert s.queue.status("X").nomination is None
    victims = list(r.victims)
    for t in range(5, 12):
        evict_victims(s, r, now=t - 0.5)
        if t == 7:
            finish(s, "r", now=6.5)  # X's first pod starts again on r1 once r is done
        r = s.step(now=t)
        victims.extend(r.victims)
        check_invariants(s)
    assert [v.job for v in victims] == ["X"]  # Y and W were never evicted
    assert [s.queue.status(j).running for j in ("Y", "W", "X")] == [
        (pod("Y"),),
        (pod("W"),),
        (pod("X"),),
    ]
    assert s.status("X").pods_waiting == 1  # its second pod waits on quota


def test_a_preemptor_keeps_its_nomination_when_its_own_running_pods_are_evicted() -> None:
    # p's running pod goes while its victim lo terminates, stopped by the cluster (it
    # failed, a user deleted it): the nomination is for p's pods still to place and stands
    s = scheduler(nodes(2))
    s.submit(job("lo", gpus=8, priority=0, submitted_at=0), now=0)
    assert s.step(now=0).placed == ("lo",)
    s.submit(job("p", gpus=8, replicas=2, gang=False, priority=5, submitted_at=1), now=1)
    r = s.step(now=1)
    assert [b.node for b in r.bindings] == ["lf0-n1"]  # one pod; for the other it preempts
    assert [(v.job, v.preemptor) for v in r.victims] == [("lo", "p")]  # lo terminates slowly
    s.pod_evicted(pod("p"), now=2)
    assert s.queue.status("p").nomination is not None  # it is for p's pods still to place
    s.submit(job("q", gpus=8, priority=10, submitted_at=3), now=3)
    assert s.step(now=3).placed == ("q",)  # where p's pod was
    s.pod_evicted(pod("lo"), now=3.5)
    s.submit(job("w", gpus=8, priority=7, submitted_at=3.6), now=3.6)
    r4 = s.step(now=4)
    assert r4.placed == ("p",)
    assert r4.pending["w"].code is ReasonCode.INSUFFICIENT_CAPACITY
    check_invariants(s)


def test_a_preemptor_loses_no_running_pod_while_its_victims_terminate() -> None:
    # p evicts lo for its second pod, and lo terminates slowly. q (priority 10) finds no
    # victim meanwhile: taken then, p's running pod would come back and start where lo
    # was, lo would start again elsewhere, and p would evict it a second time. The cycle
    # lo is gone, p's second pod starts there and q takes p's first.
    s = scheduler(nodes(2))
    s.submit(job("lo", gpus=8, priority=0, submitted_at=0), now=0)
    assert s.step(now=0).placed == ("lo",)
    s.submit(job("p", gpus=8, replicas=2, gang=False, priority=5, submitted_at=1), now=1)
    r = s.step(now=1)
    assert [(v.job, v.preemptor) for v in r.victims] == [("lo", "p")]
    s.submit(job("q", gpus=8, priority=10, submitted_at=3), now=3)
    r3 = s.step(now=3)
    assert r3.victims == ()
    assert r3.pending["q"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert r3.pending["p"].code is ReasonCode.PREEMPTING
    s.pod_evicted(pod("lo"), now=3.5)
    r4 = s.step(now=4)
    assert [(b.pod, b.node) for b in r4.bindings] == [(pod("p", 1), "lf0-n0")]
    assert [(v.job, v.pods, v.preemptor) for v in r4.victims] == [("p", (pod("p"),), "q")]
    evict_victims(s, r4, now=4.5)
    assert s.step(now=5).placed == ("q",)
    assert s.queue.status("p").running == (pod("p", 1),)
    check_invariants(s)
