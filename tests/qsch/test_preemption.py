"""Preemption: who is a victim, the minimal set, conservatism, nominations, no cascades."""

from __future__ import annotations

import pytest

from kant.model import Job, NodeSelector, ReasonCode, Resources, Role, Tier, VictimReason
from kant.preemption import PreemptionPolicy
from kant.queueing import JobPhase
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, finish, nodes, pod, scheduler


def _fill(s: Scheduler, specs: list[tuple[str, int, int]], *, gang: bool = True) -> None:
    """Start jobs (id, gpus, priority) one per second, in order."""
    for t, (jid, gpus, prio) in enumerate(specs):
        s.submit(job(jid, gpus=gpus, priority=prio, submitted_at=t), now=t)
        r = s.step(now=t)
        assert r.placed == (jid,), r.pending


@pytest.mark.parametrize(
    ("running", "need", "victims"),
    [
        pytest.param(
            [("a", 2, 1), ("b", 2, 0), ("c", 2, 0), ("d", 2, 0)], 4, ["d", "c"],
            id="lowest priority first, then the most recently started",
        ),
        pytest.param(
            [("z", 3, 0), ("y", 4, 0), ("x", 1, 0)], 4, ["y"],
            id="a minimal set: the newest victim is spared when an older one suffices",
        ),
        pytest.param(
            [("hi", 4, 3), ("lo", 4, 1)], 8, ["lo", "hi"],
            id="several priorities, all strictly lower",
        ),
    ],
)  # fmt: skip
def test_priority_preemption_picks_lowest_priority_newest_first_and_a_minimal_set(
    running: list[tuple[str, int, int]], need: int, victims: list[str]
) -> None:
    s = scheduler(nodes(1))
    _fill(s, running)
    s.submit(job("p", gpus=need, priority=5, submitted_at=10), now=10)
    r = s.step(now=10)
    assert [v.job for v in r.victims] == victims
    assert all(v.reason is VictimReason.PRIORITY and v.preemptor == "p" for v in r.victims)
    assert r.pending["p"].code is ReasonCode.PREEMPTING
    assert [n.job for n in r.nominations] == ["p"]
    evict_victims(s, r, now=11)
    assert s.step(now=12).placed == ("p",)
    check_invariants(s)


def test_equal_priority_is_never_a_priority_victim() -> None:
    s = scheduler(nodes(1))
    _fill(s, [("a", 8, 5)])
    s.submit(job("p", gpus=8, priority=5, submitted_at=10), now=10)
    r = s.step(now=10)
    assert r.victims == () and r.pending["p"].code is ReasonCode.INSUFFICIENT_CAPACITY


def test_no_preemption_when_it_would_not_make_the_job_fit() -> None:
    s = scheduler(nodes(2))
    s.submit(job("keep", gpus=8, preemptible=False), now=0)
    s.submit(job("lo", gpus=8), now=0)
    s.step(now=0)
    s.submit(job("p", gpus=8, replicas=2, priority=9, submitted_at=1), now=1)
    r = s.step(now=1)
    assert r.victims == () and r.nominations == ()
    assert s.queue.status("lo").phase is JobPhase.RUNNING


def test_topology_is_part_of_the_fit_victims_must_free_one_leaf() -> None:
    s = scheduler(nodes(4, leaves=2))
    for k in range(4):  # one low-priority 8-GPU job per node, lf0 first
        s.submit(job(f"lo{k}", gpus=8, priority=k % 2, submitted_at=k), now=k)
    s.step(now=4)
    s.submit(job("p", gpus=8, replicas=2, priority=9, tier=Tier.LEAF, required=True), now=5)
    r = s.step(now=5)
    freed = {s.cluster.binding(p).node.split("-")[0] for v in r.victims for p in v.pods}
    assert len(r.victims) == 2 and len(freed) == 1  # two victims, in one leaf
    evict_victims(s, r, now=6)
    r = s.step(now=7)
    assert r.placed == ("p",) and len({b.node.split("-")[0] for b in r.bindings}) == 1


def test_non_preemptible_jobs_and_young_pods_are_never_victims() -> None:
    s = scheduler(nodes(1), preemption=PreemptionPolicy(min_runtime=100))
    s.submit(job("old-np", gpus=4, preemptible=False), now=0)
    s.step(now=0)
    s.submit(job("young", gpus=4, submitted_at=50), now=50)
    s.step(now=50)
    s.submit(job("p", gpus=4, priority=9, submitted_at=60), now=60)
    assert s.step(now=60).victims == ()  # young is 10 s old
    r = s.step(now=150)
    assert [v.job for v in r.victims] == ["young"]


def test_gang_victims_are_whole_jobs_and_pod_level_victims_single_pods() -> None:
    s = scheduler(nodes(1))
    s.submit(job("np", gpus=4, preemptible=False), now=0)
    s.submit(job("svc", gpus=2, replicas=2, gang=False), now=0)
    s.step(now=0)
    s.submit(job("p", gpus=2, priority=9, submitted_at=1), now=1)
    r = s.step(now=1)
    assert [(v.job, v.pods) for v in r.victims] == [("svc", (pod("svc", 0),))]
    evict_victims(s, r, now=2)
    assert s.queue.status("svc").phase is JobPhase.RUNNING  # its other pod runs on
    s2 = scheduler(nodes(1))
    s2.submit(job("gang", gpus=4, replicas=2), now=0)
    s2.step(now=0)
    s2.submit(job("p", gpus=2, priority=9, submitted_at=1), now=1)
    r = s2.step(now=1)
    assert [(v.job, v.pods) for v in r.victims] == [("gang", (pod("gang", 0), pod("gang", 1)))]


def test_a_pod_level_job_placed_in_part_preempts_for_its_other_pods_in_the_same_cycle() -> None:
    # Two nodes: lo (priority 0) runs on one, the other is free. hi (priority 1, two 8-GPU
    # pods) starts its first pod on the free node and, in the same cycle, evicts lo for its
    # second (as Volcano's preempt action follows its allocate action); before, it waited a
    # cycle to preempt, and what it needed could go to the jobs behind it first.
    s = scheduler(nodes(2))
    _fill(s, [("lo", 8, 0)])
    s.submit(job("hi", gpus=8, replicas=2, gang=False, priority=1, submitted_at=10), now=10)
    r = s.step(now=10)
    assert r.placed == ("hi",)
    assert [b.pod for b in r.bindings] == [pod("hi", 0)]
    assert [(v.job, v.preemptor) for v in r.victims] == [("lo", "hi")]
    (nom,) = r.nominations
    assert [b.pod for b in nom.bindings] == [pod("hi", 1)]
    st = s.queue.status("hi")
    assert st.phase is JobPhase.RUNNING and st.running == (pod("hi", 0),)
    assert st.nomination == nom  # (kept for the pod still to place)
    assert r.pending["hi"].code is ReasonCode.PREEMPTING
    # a job behind it does not take the devices lo frees
    s.submit(job("lo2", gpus=8, submitted_at=11), now=11)
    evict_victims(s, r, now=11)
    r = s.step(now=12)
    assert r.placed == ("hi",) and [b.pod for b in r.bindings] == [pod("hi", 1)]
    assert r.bindings[0].node == nom.bindings[0].node
    assert r.pending["lo"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert s.queue.status("hi").nomination is None
    check_invariants(s)


def test_a_pod_level_job_placed_in_part_preempts_for_no_pod_it_has_already_placed() -> None:
    # a and b fill node 0, c half of node 1. hi's first 4-GPU pod starts on node 1's free
    # half; its victims are for its two other pods only (c, then b: 8 GPUs), not for all
    # three (which would take a too).
    s = scheduler(nodes(2))
    _fill(s, [("a", 4, 0), ("b", 4, 0), ("c", 4, 0)])
    s.submit(job("hi", gpus=4, replicas=3, gang=False, priority=1, submitted_at=10), now=10)
    r = s.step(now=10)
    assert [b.pod for b in r.bindings] == [pod("hi", 0)]
    assert [v.job for v in r.victims] == ["c", "b"]
    (nom,) = r.nominations
    assert [b.pod for b in nom.bindings] == [pod("hi", 1), pod("hi", 2)]
    assert s.queue.status("a").phase is JobPhase.RUNNING
    check_invariants(s)


def test_a_job_placed_in_part_with_one_pod_per_node_preempts_in_the_same_cycle_away_from_its_first_pod() -> (
    None
):
    # hi's role allows one pod per node. Its first pod starts beside lo (node 1); in the same
    # cycle the victim search, as placement, counts that pod (the cluster state does not
    # hold it yet), so it takes lo2's node (node 0) for the second, and lo runs on. It used
    # to wait a cycle: a search counting the running pods only would have evicted lo (the
    # newest) for a second pod on node 1.
    s = scheduler(nodes(2))
    _fill(s, [("lo2", 8, 0), ("lo", 4, 0)])
    role = Role(name="w", replicas=2, resources=Resources(gpus=4), max_per_node=1)
    s.submit(Job(id="hi", priority=1, gang=False, roles=(role,), submitted_at=10), now=10)
    r = s.step(now=10)
    assert [(b.pod, b.node) for b in r.bindings] == [(pod("hi", 0, "w"), "lf0-n1")]
    assert [v.job for v in r.victims] == ["lo2"]
    assert [(b.pod, b.node) for n in r.nominations for b in n.bindings] == [
        (pod("hi", 1, "w"), "lf0-n0")
    ]
    assert s.queue.status("lo").phase is JobPhase.RUNNING
    evict_victims(s, r, now=11)
    r = s.step(now=12)
    assert [(b.pod, b.node) for b in r.bindings] == [(pod("hi", 1, "w"), "lf0-n0")]
    check_invariants(s)


def test_a_job_placed_in_part_preempts_at_once_for_pods_of_a_role_free_of_such_rules() -> None:
    # hi's head (one pod per node) starts beside lo; its two workers, a role with no such
    # rule, do not fit: they preempt in the same cycle (lo2's node holds both), whatever the
    # head's role asks.
    s = scheduler(nodes(2))
    _fill(s, [("lo2", 8, 0), ("lo", 4, 0)])
    head = Role(name="head", replicas=1, resources=Resources(gpus=4), max_per_node=1)
    workers = Role(name="w", replicas=2, resources=Resources(gpus=4))
    s.submit(Job(id="hi", priority=1, gang=False, roles=(head, workers), submitted_at=10), now=10)
    r = s.step(now=10)
    assert [b.pod for b in r.bindings] == [pod("hi", 0, "head")]
    assert [v.job for v in r.victims] == ["lo2"]
    (nom,) = r.nominations
    assert [(b.pod, b.node) for b in nom.bindings] == [
        (pod("hi", 0, "w"), "lf0-n0"),
        (pod("hi", 1, "w"), "lf0-n0"),
    ]
    check_invariants(s)


def test_a_hopeless_search_held_by_pods_placed_earlier_in_the_cycle_does_not_answer_another_job() -> (
    None
):
    # x (two 8-GPU pods, at most one per node) starts its first pod beside lo on the 16-GPU
    # node; its second has nowhere to go (hi, priority 5, holds the other node): hopeless.
    # y, one pod of the same role, tenant and priority, is held by no pod of its own: it
    # evicts lo on the big node. Searched with x's answer (the same kind of request, the
    # cycle unchanged since), it would never preempt.
    s = scheduler(ClusterBuilder().leaf("lf0", nodes=1, gpus=16).leaf("lf1", nodes=1).build())
    _fill(s, [("hi", 8, 5), ("lo", 8, 0)])
    w = {n: Role(name="w", replicas=n, resources=Resources(gpus=8), max_per_node=1) for n in (1, 2)}
    s.submit(Job(id="x", priority=1, gang=False, roles=(w[2],), submitted_at=10), now=10)
    s.submit(Job(id="y", priority=1, gang=False, roles=(w[1],), submitted_at=11), now=11)
    r = s.step(now=12)
    assert [(b.pod.job, b.node) for b in r.bindings] == [("x", "lf0-n0")]
    assert [(v.job, v.preemptor) for v in r.victims] == [("lo", "y")]
    assert r.pending["x"].code is ReasonCode.INSUFFICIENT_CAPACITY
    check_invariants(s)


def test_a_hopeless_search_held_by_where_its_job_runs_does_not_answer_another_job() -> None:
    # X (pod-level, two 8-GPU pods, one leaf required) runs its first pod in lf0, where no
    # victim can make room for its second: hopeless. Y, one pod of the same shape, tenant
    # and priority, is held by no pod of its own: it evicts lo1 in lf1. It used to be given
    # X's cached answer (the same kind of request) and never preempted.
    c = (
        ClusterBuilder()
        .leaf("lf0", nodes=2, labels={"rack": "r0"})
        .leaf("lf1", nodes=2, labels={"rack": "r1"})
        .build()
    )
    s = scheduler(c)
    for jid, prio, rack in [("hi0", 9, "r0"), ("f", 0, "r0"), ("hi1", 9, "r1"), ("lo1", 0, "r1")]:
        sel = NodeSelector.labels(rack=rack)
        s.submit(job(jid, gpus=8, priority=prio, submitted_at=0, selector=sel), now=0)
    s.step(now=0)
    finish(s, "f", now=0.5)
    wish = {"tier": Tier.LEAF, "required": True}
    s.submit(job("X", gpus=8, replicas=2, gang=False, priority=5, submitted_at=1, **wish), now=1)
    r = s.step(now=1)
    assert [b.pod for b in r.bindings] == [pod("X", 0)] and r.victims == ()
    s.submit(job("Y", gpus=8, priority=5, submitted_at=2, **wish), now=2)
    r = s.step(now=2)
    assert [(v.job, v.preemptor) for v in r.victims] == [("lo1", "Y")]
    assert r.pending["X"].code is ReasonCode.INSUFFICIENT_CAPACITY
    check_invariants(s)


def test_a_preemptor_preempts_once_and_victims_are_not_shared() -> None:
    s = scheduler(nodes(2))
    _fill(s, [("lo0", 8, 0), ("lo1", 8, 0)])
    s.submit(job("p1", gpus=8, priority=9, submitted_at=10), now=10)
    s.submit(job("p2", gpus=8, priority=8, submitted_at=10), now=10)
    r = s.step(now=10)
    by = {v.preemptor: v.job for v in r.victims}
    assert set(by) == {"p1", "p2"} and len(set(by.values())) == 2
    # victims are still terminating: nobody preempts again, both wait for their victims
    r = s.step(now=11)
    assert r.victims == ()
    assert {r.pending["p1"].code, r.pending["p2"].code} == {ReasonCode.PREEMPTING}
    check_invariants(s)


def test_nominated_devices_are_held_for_the_preemptor_until_it_is_placed() -> None:
    s = scheduler(nodes(1))
    _fill(s, [("lo", 8, 0)])
    s.submit(job("p", gpus=8, priority=5, submitted_at=10), now=10)
    r = s.step(now=10)
    assert [v.job for v in r.victims] == ["lo"]
    evict_victims(s, r, now=11)
    # an even more urgent small job arrives: the freed node is held for p
    s.submit(job("vip", gpus=1, priority=9, submitted_at=11), now=11)
    r = s.step(now=12)
    assert r.placed == ("p",)
    assert r.pending["vip"].code in (ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.NO_FIT)
    assert r.victims == ()  # p's bindings are not running yet: not victims this cycle


def test_a_nomination_is_dropped_when_its_victims_are_gone_but_the_job_still_does_not_fit() -> None:
    s = scheduler(nodes(1))
    _fill(s, [("lo", 8, 0)])
    s.submit(job("p", gpus=8, priority=5, submitted_at=10), now=10)
    r = s.step(now=10)
    evict_victims(s, r, now=11)
    s.gpu_unhealthy("lf0-n0", 3, now=11)
    r = s.step(now=12)
    assert r.dropped_nominations == ("p",) and r.placed == ()
    assert s.queue.status("p").nomination is None


def test_victims_are_requeued_not_dropped() -> None:
    s = scheduler(nodes(1))
    _fill(s, [("lo", 4, 0), ("svc", 4, 0)])
    s.submit(job("p", gpus=8, priority=5, submitted_at=10), now=10)
    r = s.step(now=10)
    assert sorted(v.job for v in r.victims) == ["lo", "svc"]
    assert s.queue.status("lo").terminating == (pod("lo"),)
    evict_victims(s, r, now=11)
    for jid in ("lo", "svc"):
        st = s.queue.status(jid)
        assert st.phase is JobPhase.PENDING and st.attempts == 0 and st.pending_since == 11
    check_invariants(s)


def test_preemption_can_be_switched_off() -> None:
    s = scheduler(
        nodes(1), preemption=PreemptionPolicy(priority=False, reclaim=False, backfill=False)
    )
    _fill(s, [("lo", 8, 0)])
    s.submit(job("p", gpus=8, priority=5, submitted_at=10), now=10)
    assert s.step(now=10).victims == ()


def test_a_finished_pod_is_never_offered_as_a_victim_in_a_later_cycle() -> None:
    # the victim index is cached across cycles; a pod that finished must leave it
    s = scheduler(nodes(1))
    s.submit(job("lo", gpus=4, replicas=2, gang=False, submitted_at=0), now=0)
    assert s.step(now=1).placed == ("lo",)
    s.submit(job("huge", gpus=16, priority=1, submitted_at=2), now=2)  # never fits: builds
    assert not s.step(now=2).victims  # the index and finds nothing worth a search
    s.pod_finished(pod("lo", 0), now=3)
    s.submit(job("hi", gpus=8, priority=2, submitted_at=4), now=4)
    r = s.step(now=4)
    assert [(v.job, v.pods) for v in r.victims] == [("lo", (pod("lo", 1),))]
