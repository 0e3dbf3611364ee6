"""Scenario tests of the fault campaign (issue 17) and the newcomer's time rule (issue 15):
stale results, non-finite and backward times, the node lifecycle, typed misuse, the
history of ended jobs. Each fails on the code before the fix."""

from __future__ import annotations

import math
import re

import attrs
import pytest

from kant.admission import Admitter, Quota
from kant.apply import apply
from kant.cycle import CycleResult, schedule_cycle
from kant.errors import (
    InvalidConfigError,
    InvalidJobError,
    InvalidNodeError,
    KantError,
    UnknownJobError,
    UnknownNodeError,
    UnknownPodError,
    UnknownTemplateError,
)
from kant.errors import ValidationError as Invalid
from kant.model import Job, NodeSpec, ReasonCode, Tier
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Backfill, Backoff, EasyBackfill, JobPhase, Queue
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job, node

from .conftest import nodes, pod, scheduler


def _isolated(n_nodes: int = 2) -> Scheduler:
    return scheduler(
        nodes(n_nodes),
        quotas=[Quota.gpus("a", "H100", 8)],
        modes={"a": "isolated"},
        backoff=Backoff(base=100, factor=2, cap=1000, max_retries=5),
    )


# --------------------------------------------------------------------------- 1. stale results


def test_an_old_result_applied_again_keeps_an_isolated_tenant_within_its_quota() -> None:
    s = _isolated()
    s.submit(job("j1", gpus=4, tenant="a"), now=0)
    s.submit(job("j2", gpus=4, tenant="a", cpu_milli=150_000), now=0)
    old = s.schedule(1)
    assert s.apply(old, 1).bound == ("j1", "j2")
    s.binding_failed(pod("j1"), 2, "image pull")  # j1 requeued, in backoff until 102
    s.submit(job("j3", gpus=4, tenant="a", cpu_milli=100_000), now=3)
    assert s.step(4).placed == ("j3",)  # on the other node: j2 holds most of the CPU
    assert s.cluster.binding(pod("j3")).node != s.cluster.binding(pod("j2")).node
    rep = s.apply(old, 5)  # an orchestrator retrying the first result
    assert rep.bound == ()
    assert set(rep.stale) == {"j1", "j2"}
    assert s.admitter.used("a", "H100") == 8_000
    assert s.queue.status("j1").phase is JobPhase.PENDING
    check_invariants(s)


def test_an_old_result_never_binds_a_job_still_in_backoff() -> None:
    s = scheduler(nodes(1), backoff=Backoff(base=100, factor=2, cap=1000, max_retries=5))
    s.submit(job("j", gpus=8), now=0)
    old = s.schedule(1)
    s.apply(old, 1)
    s.binding_failed(pod("j"), 2, "boom")
    assert s.apply(old, 3).stale == ("j",)
    assert s.queue.status("j").phase is JobPhase.PENDING
    assert s.cluster.num_pods == 0


def test_victims_of_an_old_result_never_mark_the_new_incarnation_terminating() -> None:
    s = scheduler(nodes(1), preemption=PreemptionPolicy(min_runtime=0))
    s.submit(job("low", gpus=8, priority=0), now=0)
    s.step(1)
    s.submit(job("high", gpus=8, priority=5), now=2)
    old = s.step(3)
    assert [v.job for v in old.victims] == ["low"]
    s.pod_evicted(pod("low"), 4)  # the victim goes; high takes the node
    assert s.step(5).placed == ("high",)
    s.node_added(NodeSpec(name="extra", gpu_model="H100", gpus=8), 6)
    assert s.step(7).placed == ("low",)  # low runs again: a new incarnation
    rep = s.apply(old, 8)
    assert rep.terminating == ()
    assert s.queue.status("low").terminating == ()


def test_a_result_of_another_scheduler_is_refused_and_changes_nothing() -> None:
    """Two schedulers with the same job and node names; the node is an A100 on the second.
    The first's result, applied to the second, bound its H100-only job on the A100 node."""
    s1 = scheduler(ClusterBuilder().leaf("lf0", nodes=1, model="H100").build())
    s2 = scheduler(ClusterBuilder().leaf("lf0", nodes=1, model="A100").build())
    for s in (s1, s2):
        s.submit(job("a", gpus=8, models="H100"), now=0)
    r1 = s1.schedule(1)
    assert s2.schedule(1).pending["a"].code is ReasonCode.NO_POOL
    with pytest.raises(Invalid, match="another scheduler"):
        s2.apply(r1, 1)
    assert s2.cluster.num_pods == 0 and not s2.admitter.usage()
    check_invariants(s2)
    # a result of the same queue on another cluster is refused too
    from kant.apply import apply

    other = ClusterBuilder().leaf("lf0", nodes=1, model="H100").build()
    with pytest.raises(Invalid, match="another scheduler"):
        apply(r1, other, s1.queue, s1.admitter, 1)
    assert other.num_pods == 0 and s1.apply(r1, 1).bound == ("a",)


def _hand_built() -> tuple[Scheduler, CycleResult]:
    s = scheduler(ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=1, model="A100").build())
    s.submit(job("a", gpus=8, models="H100"), now=0)
    return s, s.schedule(1)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"pending": None}, "result.pending"),
        ({"victims": ("x",)}, "result.victims"),
        ({"nominations": [None]}, "result.nominations"),
        ({"dropped_nominations": None}, "result.dropped_nominations"),
        ({"seen": {"a": "x"}}, "result.seen"),
        ({"membership": "x"}, "result.membership"),
        ({"now": "x"}, "result.now"),
        ({"now": None}, "result.now"),
    ],
)
def test_a_result_built_by_hand_with_a_field_of_the_wrong_kind_is_refused_changing_nothing(
    change: dict[str, object], field: str
) -> None:
    """pending=None raised AttributeError after the job was bound (RUNNING, the clock not
    moved); the others raised AttributeError or TypeError."""
    import attrs

    s, r = _hand_built()
    with pytest.raises(Invalid, match=re.escape(repr(field))):
        s.apply(attrs.evolve(r, origin=None, **change), 2)
    assert s.status("a").phase is JobPhase.PENDING and s.cluster.num_pods == 0
    assert s.clock == 1.0
    check_invariants(s)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"node": "lf1-n0"}, "A100 node, which role 'worker' does not allow"),
        ({"gpus": (0,)}, "does not hold what role 'worker' asks"),
        ({"cpu_milli": 1}, "does not hold what role 'worker' asks"),
    ],
)
def test_a_binding_built_by_hand_that_breaks_its_role_is_refused_changing_nothing(
    change: dict[str, object], why: str
) -> None:
    """Bound on an A100 node, the H100-only pod broke check_invariants; holding 1 GPU for
    the 8 it asks, it was charged as 1 GPU."""
    import attrs

    s, r = _hand_built()
    b = attrs.evolve(r.bindings[0], **change)
    with pytest.raises(Invalid, match=why):
        s.apply(attrs.evolve(r, origin=None, bindings=(b,)), 2)
    assert s.cluster.num_pods == 0 and not s.admitter.usage()
    assert s.apply(attrs.evolve(r, origin=None), 2).bound == ("a",)  # as the cycle made it
    check_invariants(s)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"gpus": (60,)}, "GPU 60, which node 'lf0-n0' does not have"),
        ({"gpus": (0, 1, 2, 3, 4, 5, 6, 60)}, "GPU 60, which node 'lf0-n0' does not have"),
        ({"nics": (9,)}, "NIC 9, which node 'lf0-n0' does not have"),
        ({"node": "lf1-n0"}, "A100 node, which role 'worker' does not allow"),
        ({"gpus": (0,)}, "does not hold what role 'worker' asks"),
        ({"pod": pod("b")}, "is no pod of job 'a'"),
    ],
)
def test_a_nomination_built_by_hand_that_its_node_or_role_cannot_hold_is_refused(
    change: dict[str, object], why: str
) -> None:
    """A nomination holding GPU 60 of an 8-GPU node was kept: every later cycle raised
    IndexError holding it, until its job was cancelled."""
    import attrs

    from kant.queueing import Nomination

    s, r = _hand_built()
    b = attrs.evolve(r.bindings[0], **change)
    nom = Nomination(job="a", bindings=(b,), victims=(), created_at=1.0)
    with pytest.raises(Invalid, match=re.escape(why)):
        s.apply(attrs.evolve(r, origin=None, bindings=(), nominations=(nom,)), 2)
    assert s.queue.entry("a").nomination is None and s.clock == 1.0
    s.apply(
        attrs.evolve(
            r, origin=None, bindings=(), nominations=(attrs.evolve(nom, bindings=r.bindings),)
        ),
        2,
    )
    assert s.queue.entry("a").nomination is not None  # (as the cycle made it: held)
    check_invariants(s)


@pytest.mark.parametrize("victim", ["keep", "low"], ids=["not preemptible", "itself"])
def test_a_victim_built_by_hand_that_kant_would_never_evict_is_refused(victim: str) -> None:
    # (its pods were marked terminating: the orchestrator would have evicted them)
    import attrs

    from kant.model import Victim, VictimReason

    s = scheduler(nodes(1))
    s.submit(job(victim, gpus=8, priority=100, preemptible=victim != "keep"), now=0)
    s.step(1)
    if victim == "keep":
        s.submit(job("low", gpus=8), now=2)
    r = s.schedule(3)
    v = Victim(job=victim, pods=(pod(victim),), reason=VictimReason.PRIORITY, preemptor="low")
    with pytest.raises(Invalid, match=re.escape("result.victims")):
        s.apply(attrs.evolve(r, origin=None, victims=(v,)), 3)
    assert not s.queue.entry(victim).terminating
    check_invariants(s)


def test_a_result_is_not_applied_to_a_node_removed_and_added_again_under_its_name() -> None:
    """The job may run on H100 only; its node is replaced by an A100 node of the same name
    between the cycle and the apply: the binding is stale, and the next cycle says why."""
    s = scheduler(nodes(1))
    s.submit(job("j", gpus=8, models="H100"), now=0)
    r = s.schedule(1)
    assert [b.node for b in r.bindings] == ["lf0-n0"]
    spec = s.cluster.node("lf0-n0")
    s.node_removed("lf0-n0", 2)
    s.node_added(NodeSpec(name=spec.name, gpus=8, gpu_model="A100", leaf="lf0"), 3)
    assert s.apply(r, 4).stale == ("j",)
    assert s.cluster.num_pods == 0
    assert s.step(5).pending["j"].code is ReasonCode.NO_POOL
    # a node added that the result does not use leaves it current
    s2 = scheduler(nodes(1))
    s2.submit(job("j", gpus=8), now=0)
    r = s2.schedule(1)
    s2.node_added(
        NodeSpec(name="other", gpus=8, gpu_model="H100", leaf="lf0", spine="sp0", superspine="ss0"),
        2,
    )
    assert s2.apply(r, 3).bound == ("j",)


def _nominated_on_x() -> Scheduler:
    """``high`` (8 H100 GPUs) preempted ``low`` and holds a nomination on node x."""
    s = Scheduler(ClusterState([node("x", gpus=8, model="H100", leaf="lf0")]))
    s.submit(job("low", gpus=8, models="H100"), now=0)
    s.step(now=0)
    s.submit(job("high", gpus=8, priority=5, models="H100"), now=1)
    r = s.step(now=1)
    assert [(n.job, [b.node for b in n.bindings]) for n in r.nominations] == [("high", ["x"])]
    return s


def test_a_nomination_does_not_hold_a_node_removed_and_added_again_under_its_name() -> None:
    # x is lost with high's victim on it and comes back as an A100 node: high's nomination
    # was for the H100 node, so it ends (high has no pool now) and an A100 job takes x
    s = _nominated_on_x()
    s.node_lost("x", 2)
    s.node_added(node("x", gpus=8, model="A100", leaf="lf0"), 3)
    s.submit(job("a100", gpus=8, models="A100"), now=4)
    r = s.step(now=4)
    assert r.dropped_nominations == ("high",)
    assert r.placed == ("a100",) and r.pending["high"].code is ReasonCode.NO_POOL
    assert s.queue.entry("high").nomination is None
    check_invariants(s)


def test_a_higher_priority_job_takes_a_node_that_came_back_instead_of_a_stale_hold_on_it() -> None:
    # x is removed with high's victim on it and added again as the same H100 node; top
    # (priority 9) arrives: high's nomination was for the node that went, so it holds nothing
    # now and top, first in the order, takes x (it waited behind the stale hold before)
    s = _nominated_on_x()
    s.node_removed("x", 2)
    s.node_added(node("x", gpus=8, model="H100", leaf="lf0"), 3)
    s.submit(job("top", gpus=8, priority=9, models="H100"), now=4)
    r = s.step(now=4)
    assert r.placed == ("top",) and [b.node for b in r.bindings] == ["x"]
    assert r.dropped_nominations == ("high",) and r.nominations == () and r.victims == ()
    assert r.pending["high"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert s.queue.entry("high").nomination is None
    check_invariants(s)


def test_a_preemptor_alone_is_placed_on_its_node_come_back_and_not_listed_as_dropped() -> None:
    # (a control: the code before the fix places it too, holding the old nomination) the
    # nomination ends with the node that went, and high, the victims' going having left
    # room, is placed on x as on any free node: a placement is no dropped nomination
    s = _nominated_on_x()
    s.node_removed("x", 2)
    s.node_added(node("x", gpus=8, model="H100", leaf="lf0"), 3)
    r = s.step(now=4)
    assert r.dropped_nominations == () and r.placed == ("high",)
    assert [b.node for b in r.bindings] == ["x"]
    assert s.queue.entry("high").nomination is None
    check_invariants(s)


def test_a_victim_first_in_submission_order_takes_back_its_node_come_back_as_it_was() -> None:
    # the queue orders by submission time alone: low, requeued when x was removed, comes
    # before its preemptor high; x is added again as the same H100 node, which high's
    # nomination was not made for, so nothing holds it from low. The next cycle high
    # preempts low again, on the node there now
    s = Scheduler(
        ClusterState([node("x", gpus=8, model="H100", leaf="lf0")]),
        queue=Queue(order=lambda j, seq: (j.submitted_at, seq)),
    )
    s.submit(job("low", gpus=8, models="H100"), now=0)
    s.step(now=0)
    s.submit(job("high", gpus=8, priority=5, models="H100"), now=1)
    assert [n.job for n in s.step(now=1).nominations] == ["high"]
    assert s.node_removed("x", 2).requeued == ("low",)
    s.node_added(node("x", gpus=8, model="H100", leaf="lf0"), 3)
    r = s.step(now=4)
    assert r.placed == ("low",) and [b.node for b in r.bindings] == ["x"]
    assert r.dropped_nominations == ("high",) and r.nominations == ()
    assert s.queue.entry("high").nomination is None
    r = s.step(now=5)
    assert [v.job for v in r.victims] == ["low"]
    assert [(n.job, n.created_at, n.membership) for n in r.nominations] == [
        ("high", 5.0, s.cluster.membership_version)
    ]
    check_invariants(s)


def test_a_preemptor_whose_node_came_back_is_nominated_again_without_new_victims() -> None:
    # high (16 GPUs) preempted lx on x and ly on y; x is removed (lx requeued) and added
    # again as the same H100 node while ly is still going: the nomination made for the x
    # that went is dropped, and high is nominated again at once on x and y, waiting for ly
    # only, evicting nothing more
    s = Scheduler(
        ClusterState(
            [
                node("x", gpus=8, model="H100", leaf="lf0"),
                node("y", gpus=8, model="H100", leaf="lf0"),
            ]
        )
    )
    s.submit(job("lx", gpus=8, models="H100"), now=0)
    s.submit(job("ly", gpus=8, models="H100"), now=0)
    s.step(now=0)
    s.submit(job("high", gpus=8, replicas=2, priority=5, models="H100"), now=1)
    first = s.step(now=1).nominations[0]
    assert sorted(v.job for v in first.victims) == ["lx", "ly"]
    s.node_removed("x", 2)
    s.node_added(node("x", gpus=8, model="H100", leaf="lf0"), 3)
    r = s.step(now=4)
    assert r.victims == () and r.dropped_nominations == () and r.placed == ()
    [nom] = r.nominations
    assert nom.job == "high" and nom.created_at == 4.0
    assert sorted(b.node for b in nom.bindings) == ["x", "y"]
    assert nom.victims == (pod("ly"),)
    assert nom.membership == s.cluster.membership_version > first.membership
    assert s.queue.entry("high").nomination == nom
    assert r.pending["high"].code is ReasonCode.PREEMPTING
    s.pod_evicted(pod("ly"), 5)
    r = s.step(now=5)
    assert r.placed == ("high",) and sorted(b.node for b in r.bindings) == ["x", "y"]
    check_invariants(s)


def test_a_relabelled_node_ends_a_nomination_and_its_preemptor_is_nominated_again_at_once() -> None:
    # x keeps its model and its pods, only a label is added: high's nomination was made
    # for x as it was, so the cycle drops it and nominates high again in the same cycle,
    # on x, waiting for low already going (no new victims), at the membership now
    s = _nominated_on_x()
    old = s.queue.entry("high").nomination
    assert s.node_relabelled("x", {"feature.node/x": "1"}, (), now=2)
    r = s.step(now=3)
    assert r.victims == () and r.dropped_nominations == () and r.placed == ()
    [nom] = r.nominations
    assert nom.job == "high" and [b.node for b in nom.bindings] == ["x"]
    assert nom.victims == (pod("low"),) and nom.created_at == 3.0
    assert nom.membership == s.cluster.membership_version > old.membership
    assert s.queue.entry("high").nomination == nom
    assert r.pending["high"].code is ReasonCode.PREEMPTING
    # the new nomination is current: the next cycle keeps it, nominating nothing
    r = s.step(now=4)
    assert r.nominations == () and r.dropped_nominations == ()
    assert s.queue.entry("high").nomination == nom
    s.pod_evicted(pod("low"), 5)
    assert s.step(now=5).placed == ("high",)
    check_invariants(s)


def test_a_preemptor_nominated_on_a_node_cordoned_since_preempts_elsewhere_at_once() -> None:
    # high preempted low on x; x is then cordoned (unhealthy, its pods run on): the devices
    # held for high on x can take no pod, so the next cycle drops that nomination and high
    # preempts mid on y at once. Before, high held x until low was gone (its grace period),
    # then found x closed and only then preempted mid: two grace periods waited
    s = Scheduler(
        ClusterState(
            [
                node("x", gpus=8, model="H100", leaf="lf0"),
                node("y", gpus=8, model="H100", leaf="lf0"),
            ]
        )
    )
    s.submit(job("low", gpus=8), now=0)
    s.step(now=0)
    s.submit(job("mid", gpus=8, priority=1), now=0)
    s.step(now=0)
    assert s.cluster.binding(pod("low")).node == "x"
    s.submit(job("high", gpus=8, priority=5), now=1)
    r = s.step(now=1)
    assert [(n.job, [b.node for b in n.bindings]) for n in r.nominations] == [("high", ["x"])]
    s.node_unhealthy("x", 2, evict=False)
    r = s.step(now=3)
    assert [(v.job, v.preemptor) for v in r.victims] == [("mid", "high")]
    assert [(n.job, [b.node for b in n.bindings]) for n in r.nominations] == [("high", ["y"])]
    assert [b.node for b in s.queue.entry("high").nomination.bindings] == ["y"]
    s.pod_evicted(pod("mid"), 4)
    assert s.step(now=4).placed == ("high",)
    assert s.cluster.binding(pod("high")).node == "y"
    check_invariants(s)


def _high_nominated_over_low() -> tuple[Scheduler, CycleResult]:
    """One H100 node ``x`` running ``low``; a cycle at 1 nominating ``high`` (priority 5) for
    it, its result not applied yet."""
    s = Scheduler(ClusterState([node("x", gpus=8, model="H100", leaf="lf0")]))
    s.submit(job("low", gpus=8, models="H100"), now=0)
    s.step(now=0)
    s.submit(job("high", gpus=8, priority=5, models="H100"), now=1)
    r = s.schedule(1)
    assert [n.job for n in r.nominations] == ["high"]
    return s, r


def test_a_nomination_is_not_kept_from_a_result_applied_after_a_device_it_holds_failed() -> None:
    s, r = _high_nominated_over_low()
    s.gpu_unhealthy("x", 3, 2, evict=False)  # (low runs on)
    s.apply(r, 3)
    assert s.queue.entry("high").nomination is None
    check_invariants(s)


def test_a_nomination_is_not_kept_from_a_result_applied_after_its_node_came_back() -> None:
    s, r = _high_nominated_over_low()
    s.node_lost("x", 2)
    s.node_added(node("x", gpus=8, model="A100", leaf="lf0"), 3)
    s.apply(r, 4)
    assert s.queue.entry("high").nomination is None


def test_a_fresh_result_still_applies_when_an_unrelated_job_changed_meanwhile() -> None:
    s = scheduler(nodes(2))
    s.submit(job("a", gpus=8), now=0)
    s.step(1)
    s.submit(job("b", gpus=8), now=2)
    r = s.schedule(3)
    s.pod_finished(pod("a"), 3)
    assert s.apply(r, 3).bound == ("b",)


# --------------------------------------------------------------------------- 4. times


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "x", None, True])
def test_a_time_that_is_not_a_finite_number_is_refused_by_every_timed_call(bad: object) -> None:
    s = scheduler(nodes(2))
    s.submit(job("r", gpus=8), now=0)
    s.submit(job("w", gpus=8, replicas=2), now=0)
    s.step(1)
    before = s.queue.statuses()
    calls = [
        lambda: s.step(bad),  # type: ignore[arg-type]
        lambda: s.schedule(bad),  # type: ignore[arg-type]
        lambda: s.node_lost("lf0-n1", bad),  # type: ignore[arg-type]
        lambda: s.binding_failed(pod("r"), bad),  # type: ignore[arg-type]
        lambda: s.pod_finished(pod("r"), bad),  # type: ignore[arg-type]
        lambda: s.pod_evicted(pod("r"), bad),  # type: ignore[arg-type]
        lambda: s.confirm(pod("r"), bad),  # type: ignore[arg-type]
        lambda: s.cancel("r", bad),  # type: ignore[arg-type]
        lambda: s.gpu_unhealthy("lf0-n0", 0, bad),  # type: ignore[arg-type]
        lambda: s.nic_unhealthy("lf0-n0", 0, bad),  # type: ignore[arg-type]
        lambda: s.node_unhealthy("lf0-n0", bad),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(Invalid, match="finite"):
            call()
    assert s.queue.statuses() == before
    assert len(s.cluster) == 2
    check_invariants(s)


@pytest.mark.parametrize("bad", [math.nan, math.inf, "x", True])
def test_status_refuses_a_time_that_is_not_a_finite_number(bad: object) -> None:
    s = scheduler(nodes(1))
    s.submit(job("r", gpus=8), now=0)
    s.submit(job("w", gpus=8), now=0)
    s.step(1)
    for jid in ("r", "w"):  # running and waiting
        with pytest.raises(Invalid, match="status: must be a finite"):
            s.status(jid, bad)  # type: ignore[arg-type]
    assert s.status("w", 3).wait == 3.0


def test_pods_finished_takes_any_iterable_of_pods_and_refuses_what_is_not_one() -> None:
    s = scheduler(nodes(2))
    s.submit(job("a", gpus=8, replicas=2), now=0)
    s.step(0)
    with pytest.raises(InvalidJobError, match="'pods' = None"):
        s.pods_finished(None, 1)  # type: ignore[arg-type]
    # "" finished nothing without a word; one bare PodId was read as its three fields
    for bad in ("", pod("a", 0)):
        with pytest.raises(InvalidJobError, match="'pods'"):
            s.pods_finished(bad, 1)  # type: ignore[arg-type]
    assert s.status("a").phase is JobPhase.RUNNING and s.clock == 0
    report = s.pods_finished((pod("a", i) for i in range(2)), 1)
    assert report.released == (pod("a", 0), pod("a", 1)) and report.finished == ("a",)
    check_invariants(s)


def test_a_lost_node_at_an_infinite_time_leaves_the_backfill_head_able_to_preempt() -> None:
    s = scheduler(nodes(2), policy="backfill")
    s.submit(job("r", gpus=8), now=0)
    s.step(1)
    with pytest.raises(Invalid):
        s.node_lost("lf0-n0", math.inf)
    st = s.queue.status("r")
    assert st.phase is JobPhase.RUNNING and math.isfinite(st.pending_since)


def test_time_cannot_run_backwards_between_cycles() -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=8), now=0)
    s.step(200)
    with pytest.raises(Invalid, match=r"5 is before 200"):
        s.step(5)
    assert s.queue.status("a").started_at == 200


def test_a_pod_cannot_finish_before_it_was_bound() -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=8), now=0)
    s.step(100)
    with pytest.raises(Invalid, match=r"50 is before it was bound, at 100"):
        s.pod_finished(pod("a"), 50)
    assert s.queue.status("a").phase is JobPhase.RUNNING
    assert s.cluster.has_pod(pod("a"))


def test_a_binding_failure_at_an_infinite_time_never_leaves_a_job_waiting_for_ever() -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=8), now=0)
    s.step(1)
    with pytest.raises(Invalid):
        s.binding_failed(pod("a"), math.inf)
    assert s.queue.status("a").backoff_until == -math.inf


# --------------------------------------------------------------------------- 6. node lifecycle


def test_a_direct_node_removal_releases_the_quota_of_the_pods_it_held() -> None:
    s = _isolated()
    s.submit(job("g", gpus=8, tenant="a"), now=0)
    s.step(1)
    node = s.cluster.binding(pod("g")).node
    s.cluster.remove_node(node)  # an orchestrator going around the facade
    assert s.admitter.used("a", "H100") == 0
    assert s.queue.status("g").phase is JobPhase.PENDING
    check_invariants(s)
    rep = s.cancel("g", 2)
    assert rep.finished == ("g",) and rep.released == ()
    check_invariants(s)


def test_the_pods_of_a_directly_removed_node_are_placed_again() -> None:
    s = scheduler(nodes(2))
    s.submit(job("g", gpus=8, replicas=2), now=0)
    s.submit(job("p", gpus=4), now=0)
    s.step(1)
    s.cluster.remove_node("lf0-n0")
    s.node_added(NodeSpec(name="new", gpu_model="H100", gpus=8), 2)
    s.node_added(NodeSpec(name="new2", gpu_model="H100", gpus=8), 2)
    r = s.step(3)
    assert "g" in r.placed
    check_invariants(s)


def test_a_lost_node_recovers_with_its_spec_and_a_removed_one_does_not() -> None:
    s = scheduler(nodes(2))
    spec = s.cluster.node("lf0-n0")
    s.node_lost("lf0-n0", 1)
    assert s.lost_nodes() == ("lf0-n0",)
    s.node_recovered("lf0-n0", 2)
    assert s.cluster.node("lf0-n0") == spec and s.lost_nodes() == ()
    with pytest.raises(UnknownNodeError):
        s.node_recovered("lf0-n0", 3)
    s.node_removed("lf0-n1", 4)
    with pytest.raises(UnknownNodeError):
        s.node_recovered("lf0-n1", 5)
    assert len(s.cluster) == 1
    # a lost node may be decommissioned: it is then neither lost nor recoverable
    s.node_lost("lf0-n0", 6)
    s.node_removed("lf0-n0", 7)
    assert s.lost_nodes() == () and len(s.cluster) == 0
    with pytest.raises(UnknownNodeError):
        s.node_recovered("lf0-n0", 8)
    with pytest.raises(UnknownNodeError):
        s.node_removed("lf0-n0", 9)


def test_a_lost_node_added_again_and_removed_through_the_cluster_is_no_longer_lost() -> None:
    # (it was listed lost again once removed, and node_recovered brought back its old spec)
    import attrs

    s = scheduler(nodes(2))
    spec = s.cluster.node("lf0-n1")
    s.node_lost("lf0-n1", 1)
    s.cluster.add_node(attrs.evolve(spec, gpus=4, rdma_nics=0, template=None))
    assert s.lost_nodes() == ()
    s.cluster.remove_node("lf0-n1")
    assert s.lost_nodes() == ()
    with pytest.raises(UnknownNodeError):
        s.node_recovered("lf0-n1", 2)
    assert "lf0-n1" not in s.cluster
    check_invariants(s)


def test_removing_a_node_requeues_its_gang_whole() -> None:
    s = scheduler(nodes(2))
    s.submit(job("g", gpus=8, replicas=2), now=0)
    s.step(1)
    rep = s.node_removed("lf0-n0", 2)
    assert rep.requeued == ("g",)
    assert s.queue.status("g").phase is JobPhase.PENDING
    assert s.cluster.num_pods == 0
    check_invariants(s)


# --------------------------------------------------------------------------- 11 / 12. misuse


def test_confirming_a_pod_that_holds_nothing_is_an_unknown_pod() -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=8, replicas=2), now=0)
    with pytest.raises(UnknownPodError, match="a/worker/0"):
        s.confirm(pod("a"), 1)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.confirm("a/worker/0", 1),
        lambda s: s.pod_finished("a/worker/0", 1),
        lambda s: s.binding_failed(None, 1),
        lambda s: s.apply("not a result", 1),
        lambda s: s.step(None),
        lambda s: s.step("x"),
        lambda s: s.step(10**400),  # (beyond the floats)
        lambda s: s.cancel(["a"], 1),
        lambda s: s.status(["a"]),
        lambda s: s.node_recovered(["lf0-n0"], 1),
        lambda s: s.restore(job("r"), None, 1),
        lambda s: s.restore(job("r"), [], 1, finished=None),
        lambda s: s.restore(job("r"), [], 1, started_at=2),  # (after now)
        lambda s: s.restore(job("r"), [], 1, started_at=-1),
        lambda s: s.restore(job("r"), [], 1, started_at=math.nan),
        lambda s: s.pods_finished([], math.nan),
        lambda s: s.pods_finished([], -1),  # (before the clock)
    ],
)
def test_every_misuse_of_the_facade_is_a_kant_error(call: object) -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=8), now=0)
    s.step(0)
    before = s.queue.incarnations()
    with pytest.raises(KantError):
        call(s)  # type: ignore[operator]
    assert s.queue.incarnations() == before and s.clock == 0
    check_invariants(s)


@pytest.mark.parametrize(
    ("field", "make"),
    [
        ("cluster", lambda c: Scheduler(None)),  # type: ignore[arg-type]
        ("cluster", lambda c: Scheduler("lf0")),  # type: ignore[arg-type]
        ("admitter", lambda c: Scheduler(c, admitter="a")),  # type: ignore[arg-type]
        ("queue", lambda c: Scheduler(c, queue=[])),  # type: ignore[arg-type]
        ("placer", lambda c: Scheduler(c, placer="ebinpack")),  # type: ignore[arg-type]
        ("policy", lambda c: Scheduler(c, policy=5)),  # type: ignore[arg-type]
        ("backoff", lambda c: Queue(backoff="x")),  # type: ignore[arg-type]
        ("backoff", lambda c: Queue(backoff=10)),  # type: ignore[arg-type]
        ("order", lambda c: Queue(order=5)),  # type: ignore[arg-type]
    ],
)
def test_a_scheduler_or_queue_given_a_part_that_cannot_work_is_refused_naming_it(
    field: str, make: object
) -> None:
    cluster = ClusterBuilder().leaf("lf0", nodes=1).build()
    with pytest.raises(InvalidConfigError, match=f"field '{field}'"):
        make(cluster)  # type: ignore[operator]
    s = Scheduler(cluster)  # the cluster is as it was: a scheduler still takes it
    s.submit(job("a", gpus=8), now=0)
    assert s.step(now=1).placed == ("a",)


def _parts() -> tuple[ClusterState, Queue, Admitter, Placer]:
    cluster = ClusterBuilder().leaf("lf0", nodes=1).build()
    q = Queue()
    q.submit(job("a", gpus=1), now=0)
    return cluster, q, Admitter(), Placer("ebinpack")


@pytest.mark.parametrize(
    ("field", "call"),
    [
        ("policy", lambda c, q, a, p: schedule_cycle(c, q, a, p, 1, policy=3)),
        ("placer", lambda c, q, a, p: schedule_cycle(c, q, a, "ebinpack", 1)),
        ("preemption", lambda c, q, a, p: schedule_cycle(c, q, a, p, 1, preemption="all")),
        ("cluster", lambda c, q, a, p: schedule_cycle(None, q, a, p, 1)),
        ("queue", lambda c, q, a, p: schedule_cycle(c, None, a, p, 1)),
        ("admitter", lambda c, q, a, p: schedule_cycle(c, q, None, p, 1)),
        ("cluster", lambda c, q, a, p: apply(schedule_cycle(c, q, a, p, 1), None, q, a, 2)),
        ("admitter", lambda c, q, a, p: apply(schedule_cycle(c, q, a, p, 1), c, q, None, 2)),
        ("rules", lambda c, q, a, p: PreemptionPolicy(rules=lambda pre, u, b: None)),
        ("filters", lambda c, q, a, p: Placer("ebinpack", filters=lambda ctx, s: s > 0)),
        ("filters[0]", lambda c, q, a, p: Placer("ebinpack", filters=[3])),
    ],
)
def test_a_cycle_or_apply_given_a_part_that_cannot_work_is_refused_naming_it_changing_nothing(
    field: str, call: object
) -> None:
    c, q, a, p = _parts()
    with pytest.raises(InvalidConfigError) as err:
        call(c, q, a, p)  # type: ignore[operator]
    assert err.value.field == field
    assert c.num_pods == 0 and q.status("a").phase is JobPhase.PENDING
    check_invariants(c, q, a)
    apply(schedule_cycle(c, q, a, p, 1), c, q, a, 2)  # the parts still work
    assert q.status("a").phase is JobPhase.RUNNING


@pytest.mark.parametrize("index", [True, False, 1.0, "1", None])
def test_a_gpu_or_nic_index_that_is_not_an_int_is_refused_and_nothing_is_evicted(
    index: object,
) -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=8, nics=8), now=0)
    s.step(0)
    before = s.queue.statuses()
    calls = {
        "gpu": lambda: s.gpu_unhealthy("lf0-n0", index, 1),  # type: ignore[arg-type]
        "nic": lambda: s.nic_unhealthy("lf0-n0", index, 1),  # type: ignore[arg-type]
    }
    for field, call in calls.items():
        with pytest.raises(InvalidNodeError, match=f"'{field}' = {index!r}"):
            call()
    assert s.cluster.health_masks("lf0-n0") == (True, 0xFF, 0xFF)
    assert s.queue.statuses() == before and s.cluster.pods_on("lf0-n0") == (pod("a"),)
    check_invariants(s)


def test_cancelling_a_failed_job_reports_nothing_finished() -> None:
    s = scheduler(nodes(1), backoff=Backoff(base=1, factor=1, cap=1, max_retries=0))
    s.submit(job("f", gpus=8), now=0)
    s.step(1)
    s.binding_failed(pod("f"), 2)
    assert s.queue.status("f").phase is JobPhase.FAILED
    rep = s.cancel("f", 3)
    assert rep.finished == () and rep.released == ()


# --------------------------------------------------------------------------- 9. history


def test_a_long_lived_scheduler_keeps_only_a_bounded_history_of_ended_jobs() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build(), queue=Queue(history=3))
    for i in range(10):
        s.submit(job(f"j{i}", gpus=8), now=i)
        s.step(i)
        s.pod_finished(pod(f"j{i}"), i)
    assert list(s.queue.jobs()) == ["j7", "j8", "j9"]
    assert s.queue.released == 7
    with pytest.raises(UnknownJobError):
        s.queue.status("j0")
    s.acknowledge("j9")
    assert list(s.queue.jobs()) == ["j7", "j8"]
    s.submit(job("j9", gpus=8), now=20)  # a released id may be used again
    with pytest.raises(Invalid):
        s.acknowledge("j9")  # pending: still the scheduler's to keep
    check_invariants(s)


def test_the_default_queue_bounds_its_history() -> None:
    from kant.queueing.queue import DEFAULT_HISTORY

    assert Queue().history == DEFAULT_HISTORY
    with pytest.raises(Invalid):
        Queue(history=-1)


# --------------------------------------------------------------------------- 2. unsatisfiable


def _stream_behind(s: Scheduler, ghost: Job, steps: int) -> list[str]:
    """A job that can never fit arrives first, then a 16-GPU gang behind it, while 16 one-GPU
    jobs keep 2 nodes busy (every second the oldest finishes, a new one arrives)."""
    for i in range(16):
        s.submit(job(f"s{i}", gpus=1), now=0)
    s.step(now=0)
    s.submit(ghost, now=0)
    s.submit(job("gang", gpus=8, replicas=2, submitted_at=1), now=1)
    running = [f"s{i}" for i in range(16)]
    phases = []
    for t in range(2, 2 + steps):
        oldest = running.pop(0)
        if s.queue.status(oldest).phase is JobPhase.RUNNING:
            s.pod_finished(pod(oldest), t)
        s.submit(job(f"s{t + 14}", gpus=1, submitted_at=t), now=t)
        running.append(f"s{t + 14}")
        r = s.step(now=t)
        for v in r.victims:
            for p in v.pods:
                s.pod_evicted(p, t)
        phases.append(s.queue.status("gang").phase.value)
    return phases


@pytest.mark.parametrize(
    "ghost",
    [
        job("ghost", gpus=8, replicas=4, submitted_at=0.5),  # 32 GPUs on a 16-GPU pool
        job("ghost", gpus=8, replicas=2, tier=Tier.LEAF, required=True, submitted_at=0.5),
    ],
    ids=["more GPUs than the pool", "a required leaf no leaf offers"],
)
@pytest.mark.parametrize("policy", ["backfill", "easy-backfill"])
def test_a_job_that_can_never_fit_is_never_the_backfill_head(ghost: Job, policy: str) -> None:
    cluster = ClusterBuilder().leaf("lf0", nodes=1).leaf("lf1", nodes=1).build()
    pol = Backfill(threshold=10) if policy == "backfill" else EasyBackfill(default_runtime=5)
    s = scheduler(cluster, policy=pol)
    phases = _stream_behind(s, ghost, steps=40)
    assert "running" in phases, "the gang behind the unsatisfiable job starved"
    r = s.schedule(now=100)
    assert r.pending["ghost"].code is ReasonCode.UNSATISFIABLE
    assert "never fit" in r.pending["ghost"].message
    check_invariants(s)


@pytest.mark.parametrize("policy", ["strict-fifo", "backfill", "easy-backfill"])
def test_a_job_larger_than_its_cohort_could_ever_lend_is_unsatisfiable(policy: str) -> None:
    """Tenants a and b share 16 H100 of quota (8 each, a may borrow without limit) on a
    32-GPU cluster: a can never hold more than 16, so a's 24-GPU gang can never be admitted.
    It is unsatisfiable and does not hold a's 1-GPU job behind it."""
    cluster = ClusterBuilder().leaf("lf0", nodes=4).build()
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)]
    s = scheduler(cluster, policy=policy, quotas=quotas)
    s.submit(job("big", gpus=8, replicas=3, tenant="a"), now=0)
    s.submit(job("small", gpus=1, tenant="a", submitted_at=1), now=1)
    r = s.step(now=10)
    assert r.pending["big"].code is ReasonCode.UNSATISFIABLE, r.pending["big"]
    assert "at most 16" in r.pending["big"].message
    assert s.queue.status("small").phase is JobPhase.RUNNING
    check_invariants(s)


def test_a_job_within_what_its_cohort_lends_is_not_unsatisfiable() -> None:
    """The same cluster, a's gang of 16 GPUs: all the cohort lends, so it waits for quota."""
    cluster = ClusterBuilder().leaf("lf0", nodes=4).build()
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)]
    s = scheduler(cluster, policy="strict-fifo", quotas=quotas)
    s.submit(job("hog", gpus=8, tenant="b"), now=0)
    s.submit(job("big", gpus=8, replicas=2, tenant="a", submitted_at=1), now=1)
    r = s.step(now=10)
    assert r.pending["big"].code is ReasonCode.QUOTA_EXCEEDED, r.pending["big"]


@pytest.mark.parametrize(
    "ghost",
    [
        job("ghost", gpus=0, cpu_milli=10**9),  # more CPU than any node has
        job("ghost", gpus=1, memory_mib=10**9),  # more memory than any node of its pool has
        job("ghost", gpus=1, nics=9),  # more NICs than any node has
        job("ghost", gpus=0, cpu_milli=1000, tier=Tier.HBD, required=True),  # no HBD node
    ],
    ids=["cpu", "memory", "nics", "a cpu pod requiring an hbd on a cluster without one"],
)
def test_a_pod_no_node_could_ever_hold_is_unsatisfiable_and_blocks_nobody(ghost: Job) -> None:
    cluster = ClusterBuilder().leaf("lf0", nodes=2).build()
    s = scheduler(cluster, policy="strict-fifo")
    s.submit(ghost, now=0)
    s.submit(job("small", gpus=1, submitted_at=1), now=1)
    r = s.step(now=2)
    assert r.pending["ghost"].code is ReasonCode.UNSATISFIABLE, r.pending["ghost"]
    assert r.placed == ("small",)


@pytest.mark.parametrize(
    "ghost",
    [
        job("ghost", gpus=5, replicas=3),  # 15 of 16 GPUs, but a node holds one 5-GPU pod
        job("ghost", gpus=1, nics=5, replicas=3),  # 8 NICs a node: one pod of 5 each
        job("ghost", gpus=1, cpu_milli=100_000, replicas=3),  # 192 cores a node: one pod
        job("ghost", gpus=0, cpu_milli=100_000, replicas=3),  # the same without a GPU
    ],
    ids=["gpus", "nics", "cpu", "cpu only"],
)
def test_a_gang_whose_pods_its_nodes_could_never_hold_at_once_is_unsatisfiable(
    ghost: Job,
) -> None:
    # two empty 8-GPU nodes hold enough GPUs for the gang in all, but never all its pods:
    # it used to wait as NO_FIT for ever and block the strict FIFO queue behind it
    cluster = ClusterBuilder().leaf("lf0", nodes=2).build()
    s = scheduler(cluster, policy="strict-fifo")
    s.submit(ghost, now=0)
    s.submit(job("small", gpus=1, submitted_at=1), now=1)
    r = s.step(now=2)
    why = r.pending["ghost"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    assert "needs 3 pods at once" in why.message and "admit 2" in why.message, why
    assert r.placed == ("small",)
    for strategy in ("ebinpack", "espread", "binpack", "spread", "topology"):
        empty = ClusterBuilder().leaf("lf0", nodes=2).build().snapshot()
        assert not Placer(strategy).place(ghost, empty).ok


def test_a_gang_whose_roles_together_its_nodes_could_never_hold_is_unsatisfiable() -> None:
    # two 5-GPU workers and one 5-GPU ps: each role alone fits two 8-GPU nodes, 15 GPUs of
    # 16 in all, but a node holds one such pod of either role: three never run together
    worker = job("g", gpus=5, replicas=2).roles[0]
    gang = attrs.evolve(
        job("g", gpus=5, replicas=2), roles=(worker, attrs.evolve(worker, name="ps", replicas=1))
    )
    s = scheduler(ClusterBuilder().leaf("lf0", nodes=2).build(), policy="strict-fifo")
    s.submit(gang, now=0)
    s.submit(job("small", gpus=1, submitted_at=1), now=1)
    r = s.step(now=2)
    why = r.pending["g"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    assert "need 3 pods at once" in why.message and "admit 2" in why.message, why
    assert r.placed == ("small",)
    # a 3-GPU ps fits beside a 5-GPU worker: not called unsatisfiable
    fits = attrs.evolve(
        gang,
        id="h",
        roles=(
            worker,
            attrs.evolve(
                worker, name="ps", replicas=1, resources=attrs.evolve(worker.resources, gpus=3)
            ),
        ),
    )
    s2 = scheduler(ClusterBuilder().leaf("lf0", nodes=2).build(), policy="strict-fifo")
    s2.submit(fits, now=0)
    assert s2.step(now=1).placed == ("h",)


def test_a_gang_no_leaf_of_which_could_hold_its_pods_at_once_is_unsatisfiable() -> None:
    # 15 GPUs in one leaf of 16: a leaf's two nodes hold two 5-GPU pods, never three
    s = scheduler(ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build())
    s.submit(job("g", gpus=5, replicas=3, tier=Tier.LEAF, required=True), now=0)
    why = s.step(now=1).pending["g"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    assert "needs 3 pods in one leaf" in why.message and "admits 2" in why.message, why


def test_a_gang_its_nodes_hold_exactly_is_not_called_unsatisfiable() -> None:
    s = scheduler(ClusterBuilder().leaf("lf0", nodes=2).build(), policy="strict-fifo")
    s.submit(job("g", gpus=4, nics=4, cpu_milli=96_000, replicas=4), now=0)
    assert s.step(now=1).placed == ("g",)


def test_an_unsatisfiable_job_waits_and_fits_once_the_cluster_grows() -> None:
    s = scheduler(nodes(1))
    s.submit(job("big", gpus=8, replicas=2), now=0)
    assert s.step(1).pending["big"].code is ReasonCode.UNSATISFIABLE
    s.node_added(NodeSpec(name="more", gpu_model="H100", gpus=8), 2)
    assert s.step(3).placed == ("big",)


def test_a_gang_over_its_tenants_quota_ceiling_can_never_fit() -> None:
    s = _isolated()
    s.submit(job("big", gpus=8, replicas=2, tenant="a"), now=0)
    r = s.step(1)
    assert r.pending["big"].code is ReasonCode.UNSATISFIABLE
    assert "quota" in r.pending["big"].message


# --------------------------------------------------------------------------- 5 / 7. sizes


@pytest.mark.parametrize("field", ["cpu_milli", "memory_mib"])
def test_a_node_too_large_for_the_columns_is_refused_before_it_is_registered(field: str) -> None:
    s = scheduler(nodes(1))
    with pytest.raises(Invalid, match=field):
        s.node_added(NodeSpec(name="ghost", gpu_model="H100", gpus=8, **{field: 2**63}), 1)
    assert "ghost" not in s.cluster
    s.node_added(NodeSpec(name="ghost", gpu_model="H100", gpus=8), 2)  # no DuplicateError
    check_invariants(s)


@pytest.mark.parametrize("incremental", [False, True])
def test_a_node_naming_an_unknown_template_is_refused_and_never_gets_a_pod(
    incremental: bool,
) -> None:
    s = Scheduler(nodes(1), incremental=incremental)
    with pytest.raises(UnknownTemplateError, match="no-such-template"):
        s.node_added(node("bad", template="no-such-template"), 1)
    assert "bad" not in s.cluster
    s.submit(job("big", gpus=8), now=1)
    s.submit(job("x", gpus=8), now=1)
    assert s.step(2).placed == ("big",)
    assert s.step(3).placed == ()
    check_invariants(s)


def test_a_job_with_more_pods_than_any_cluster_holds_is_refused_at_submit() -> None:
    with pytest.raises(Invalid, match="replicas"):
        job("huge", gpus=1, replicas=10**8)
    from kant.model import MAX_PODS_PER_JOB, Resources, Role

    roles = tuple(
        Role(name=f"r{i}", replicas=MAX_PODS_PER_JOB // 2 + 1, resources=Resources(gpus=1))
        for i in range(2)
    )
    with pytest.raises(Invalid, match="at most"):
        Job(id="two-halves", roles=roles)


# --------------------------------------------------------------------------- 3. quota heads


def _own_stream(policy: object, mode: str, steps: int = 40, *, until: int = 10**9) -> list[str]:
    """Tenant ``a`` (quota 8 GPUs, ``mode``) keeps 8 one-GPU jobs running, one ending every
    second and a new one arriving (up to t=``until``); its 8-GPU job arrives at t=1. Capacity
    is never short (32 GPUs). Returns the big job's phase per second."""
    s = scheduler(
        nodes(4), policy=policy, quotas=[Quota.gpus("a", "H100", 8)], modes={"a": mode},
        preemption=PreemptionPolicy(min_runtime=0),
    )  # fmt: skip
    ends: dict[str, float] = {}
    for i in range(8):
        s.submit(job(f"s{i}", gpus=1, tenant="a", runtime=i + 1.0), now=0)
    for jid in s.step(0).placed:
        ends[jid] = float(s.queue.status(jid).job.runtime_estimate or 0)
    s.submit(job("big", gpus=8, tenant="a", runtime=100, submitted_at=1), now=1)
    phases = []
    for t in range(1, steps):
        for jid, end in sorted(ends.items()):
            if end <= t and s.queue.status(jid).phase is JobPhase.RUNNING:
                s.pod_finished(pod(jid), t)
        if t <= until:
            s.submit(job(f"s{t + 7}", gpus=1, tenant="a", runtime=8, submitted_at=t), now=t)
        r = s.step(t)
        for jid in r.placed:
            if jid != "big":
                ends[jid] = t + 8.0
        for v in r.victims:
            for p in v.pods:
                s.pod_evicted(p, t)
                ends.pop(p.job, None)
        phases.append(s.queue.status("big").phase.value)
        check_invariants(s)
    return phases


@pytest.mark.parametrize("mode", ["isolated", "shared"])
def test_best_effort_lets_a_tenants_small_jobs_starve_its_large_one(mode: str) -> None:
    assert set(_own_stream("best-effort-fifo", mode)) == {"pending"}


@pytest.mark.parametrize("mode", ["isolated", "shared"])
def test_easy_backfill_holds_a_tenants_quota_for_its_large_job(mode: str) -> None:
    phases = _own_stream(EasyBackfill(), mode)
    assert "running" in phases, "the tenant's large job starved behind its own small jobs"
    assert phases.index("running") <= 8  # when the small jobs running at its arrival end


@pytest.mark.parametrize("mode", ["isolated", "shared"])
def test_a_tenants_quota_head_preempts_its_backfilled_small_jobs_past_the_threshold(
    mode: str,
) -> None:
    # the stream stops when the big job has waited 10 s: without preemption it would get its
    # quota only when the last small job started by then ends (t=18)
    phases = _own_stream(Backfill(threshold=10), mode, until=10)
    assert "running" in phases
    assert phases.index("running") + 1 <= 12, "the quota head did not preempt past its threshold"


def _held_on_h100(other: Job) -> Scheduler:
    """Tenant a (isolated: 8 H100, 16 A100) runs an 8-GPU H100 job until t=1000; its next
    H100 job waits for that quota (a's quota head, 100 s long); ``other`` comes after it."""
    cluster = ClusterBuilder().leaf("h", nodes=2).leaf("x", nodes=2, model="A100").build()
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 16)]
    s = scheduler(cluster, policy=EasyBackfill(), quotas=quotas, modes={"a": "isolated"})
    s.submit(job("run", gpus=8, tenant="a", models="H100", runtime=1000), now=0)
    s.step(now=0)
    s.submit(job("head", gpus=8, tenant="a", models="H100", runtime=100, submitted_at=1), now=1)
    s.submit(other, now=2)
    return s


def test_easy_holds_a_tenants_quota_only_against_jobs_that_could_take_it() -> None:
    """A long job of the tenant on A100 cannot take the H100 quota its head waits for: it
    starts; a long job that may use H100 waits behind the head."""
    s = _held_on_h100(job("other", gpus=8, tenant="a", models="A100", runtime=5000, submitted_at=2))
    r = s.step(now=3)
    assert r.placed == ("other",), r.pending
    s = _held_on_h100(
        job("other", gpus=4, tenant="a", models="H100|A100", runtime=5000, submitted_at=2)
    )
    r = s.step(now=3)
    assert r.pending["other"].code is ReasonCode.RESERVED, r.pending["other"]
    assert "first of tenant 'a' waiting for quota" in r.pending["other"].message


@pytest.mark.parametrize("policy", [EasyBackfill(default_runtime=20), "conservative-backfill"])
def test_a_preemptor_whose_victims_left_starts_though_its_own_hold_made_a_quota_head(
    policy: object,
) -> None:
    # a-small reclaims a borrowed GPU of tenant c on n3; the quota held for it leaves tenant
    # a 12 of its 24, so a-big (16, higher priority) is refused by quota and becomes a's
    # quota head, expected at once (a-run is past its expected end): a-small was gated as
    # RESERVED behind it, its nomination dropped once its victim left, c took n3 back, and
    # a-small evicted again, one pod more each round, for ever
    cluster = ClusterBuilder().leaf("lf0", nodes=4).build()
    s = Scheduler(
        cluster,
        admitter=Admitter(
            [
                Quota.gpus("a", "H100", 24),
                Quota.gpus("b", "H100", 24),
                Quota.gpus("idle", "H100", 8),
            ],
            modes={"a": "isolated"},
        ),
        policy=policy,  # type: ignore[arg-type]
        preemption=PreemptionPolicy(min_runtime=0),
    )
    s.submit(job("b1", tenant="b", gpus=8, replicas=2, priority=5, preemptible=False), now=0)
    s.submit(job("b2", tenant="b", gpus=4, priority=5, preemptible=False), now=0)
    s.submit(job("a-run", tenant="a", gpus=4, priority=5, preemptible=False, runtime=3), now=0)
    s.step(0)
    s.submit(job("a-big", tenant="a", gpus=8, replicas=2, priority=2), now=5)
    s.submit(job("a-small", tenant="a", gpus=8, priority=1), now=5)
    s.submit(job("c0", tenant="c", gpus=1, priority=9), now=5)
    evicted: list[str] = []
    t = 5.0
    for k in range(8):
        if k in (3, 6):
            s.submit(job(f"c{k}", tenant="c", gpus=1, priority=9), now=t)
        r = s.step(t)
        check_invariants(s)
        for v in r.victims:
            for p in v.pods:
                s.pod_evicted(p, t + 0.5)
                evicted.append(str(p))
        t += 1
    assert s.status("a-small").phase is JobPhase.RUNNING
    assert len(evicted) == len(set(evicted)) == 1, evicted  # c0, once


def test_the_examples_of_the_reliability_docs_run() -> None:
    import doctest
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
    res = doctest.testfile(str(doc), module_relative=False)
    assert res.attempted > 0 and res.failed == 0


def test_a_backoff_on_a_wall_clock_says_when_to_the_second() -> None:
    # (an orchestrator's clock in seconds since the epoch: "retry at 1.718e+09" said nothing)
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=8), now=1_718_000_000)
    s.step(now=1_718_000_001)
    s.binding_failed(pod("a"), 1_718_000_002, "refused")
    assert s.status("a").reason.message == "failure 1 (refused); retry at 1718000012"  # type: ignore[union-attr]
