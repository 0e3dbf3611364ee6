"""The preemption options users of the peers expect, each both ways (docs/qsch.md has the
table): borrow_within_cohort (+ threshold), reclaim_others_first, cascade_window, and the
queue's requeue_timestamp."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kant.admission import Quota
from kant.cycle import CycleResult
from kant.errors import InvalidConfigError, InvalidJobError, ValidationError
from kant.model import PodId, VictimReason
from kant.preemption import PreemptionPolicy
from kant.queueing import Backoff, JobPhase, Queue
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, nodes, scheduler


def _borrowers(pre: PreemptionPolicy) -> Scheduler:
    # 16 GPUs; a and b have 4 nominal each, c lends 8 and is idle
    s = scheduler(
        nodes(2),
        quotas=[Quota.gpus("a", "H100", 4), Quota.gpus("b", "H100", 4), Quota.gpus("c", "H100", 8)],
        preemption=pre,
    )  # fmt: skip
    s.submit(job("b-lo", gpus=8, tenant="b", priority=0, submitted_at=0), now=0)
    s.submit(job("a0", gpus=4, tenant="a", preemptible=False, submitted_at=1), now=1)
    assert sorted(s.step(now=1).placed) == ["a0", "b-lo"]
    # a's 8-GPU job borrows (a ends at 12 > 4) and needs b-lo's node
    s.submit(job("a-hi", gpus=8, tenant="a", priority=10, submitted_at=2), now=2)
    return s


@pytest.mark.parametrize(
    ("pre", "victims"),
    [
        pytest.param(PreemptionPolicy(), [], id="default: a borrower never takes b's borrowed use"),
        pytest.param(
            PreemptionPolicy(borrow_within_cohort=True), [("b-lo", VictimReason.PRIORITY)],
            id="borrow_within_cohort: it may, for a lower priority",
        ),
        pytest.param(
            PreemptionPolicy(borrow_within_cohort=True, borrow_priority_threshold=-1), [],
            id="borrow_priority_threshold: not above the threshold",
        ),
        pytest.param(
            PreemptionPolicy(borrow_within_cohort=True, borrow_priority_threshold=0),
            [("b-lo", VictimReason.PRIORITY)],
            id="borrow_priority_threshold: at the threshold it may",
        ),
    ],
)  # fmt: skip
def test_a_borrowing_preemptor_takes_another_tenants_borrowed_use_only_when_allowed(
    pre: PreemptionPolicy, victims: list[tuple[str, VictimReason]]
) -> None:
    s = _borrowers(pre)
    r = s.step(now=2)
    assert [(v.job, v.reason) for v in r.victims] == victims
    if victims:
        evict_victims(s, r, now=2.5)
        assert s.step(now=3).placed == ("a-hi",)
    check_invariants(s)


@pytest.mark.parametrize(
    ("others_first", "victims"),
    [
        pytest.param(True, [("b2", VictimReason.RECLAIM)], id="others first (Kueue)"),
        pytest.param(False, [("a-lo", VictimReason.PRIORITY)], id="plain victim order"),
    ],
)
def test_reclaim_takes_other_tenants_borrowed_use_before_the_tenants_own_lower_priority_work(
    others_first: bool, victims: list[tuple[str, VictimReason]]
) -> None:
    s = scheduler(
        nodes(2),
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)],
        preemption=PreemptionPolicy(reclaim_others_first=others_first),
    )
    s.submit(job("b1", gpus=8, tenant="b", submitted_at=0), now=0)
    s.step(now=0)
    s.submit(job("b2", gpus=4, tenant="b", submitted_at=1), now=1)
    s.step(now=1)
    s.submit(job("a-lo", gpus=4, tenant="a", submitted_at=2), now=2)  # the newest
    s.step(now=2)
    s.submit(job("a-hi", gpus=4, tenant="a", priority=10, submitted_at=3), now=3)
    r = s.step(now=3)
    assert [(v.job, v.reason) for v in r.victims] == victims
    evict_victims(s, r, now=3.5)
    assert s.step(now=4).placed == ("a-hi",)
    check_invariants(s)


def _hi_evicts_mid(window: float) -> tuple[Scheduler, CycleResult]:
    """lo runs on the A100 node, mid on the H100 one; hi (H100 only) evicts mid at t=2."""
    cluster = ClusterBuilder().leaf("lf0", nodes=1).leaf("lfa", nodes=1, model="A100").build()
    s = scheduler(cluster, preemption=PreemptionPolicy(cascade_window=window))
    s.submit(job("lo", gpus=8, priority=0, models="A100", submitted_at=0), now=0)
    s.submit(job("mid", gpus=8, priority=5, models=frozenset({"H100", "A100"}), submitted_at=1))
    s.step(now=1)
    s.submit(job("hi", gpus=8, priority=10, models="H100", submitted_at=2), now=2)
    r = s.step(now=2)
    assert [v.job for v in r.victims] == ["mid"]
    return s, r


def _cascade(window: float) -> tuple[Scheduler, CycleResult]:
    s, r = _hi_evicts_mid(window)
    evict_victims(s, r, now=2.5)
    r = s.step(now=3)
    assert r.placed == ("hi",)
    return s, r


def test_with_the_cascade_guard_off_an_evicted_job_preempts_at_once() -> None:
    _s, r = _cascade(0.0)  # in the cycle that places hi
    assert [(v.job, v.preemptor) for v in r.victims] == [("lo", "mid")]


def test_an_evicted_job_may_preempt_again_once_the_cascade_window_has_passed() -> None:
    s, r = _cascade(100.0)
    assert not r.victims
    assert not s.step(now=50).victims
    r = s.step(now=103)
    assert [(v.job, v.preemptor) for v in r.victims] == [("lo", "mid")]


def test_a_victim_whose_pod_fails_while_it_is_evicted_is_preempted_not_failed() -> None:
    """The orchestrator reports mid's pod, killed as a victim, through binding_failed (it
    exited with an error on its stop signal): kant counts no failure against mid's retry
    limit, and mid is a job just evicted, which the cascade guard keeps from preempting."""
    s, r = _hi_evicts_mid(100.0)
    rep = s.binding_failed(r.victims[0].pods[0], now=2.5, message="exit code 143")
    assert rep.requeued == ("mid",) and not rep.failed
    assert s.queue.entry("mid").attempts == 0
    r = s.step(now=3)
    assert r.placed == ("hi",)
    assert not r.victims  # mid was just evicted: it does not preempt lo
    check_invariants(s)


def test_a_victim_spared_after_its_preemptor_is_cancelled_runs_on_and_may_be_chosen_again() -> None:
    """The orchestrator could not evict mid (a disruption budget) and hi was cancelled: mid is
    spared, holds its node as before, and a later preemptor may choose it again."""
    s, r = _hi_evicts_mid(0.0)
    victim = r.victims[0].pods[0]
    s.cancel("hi", now=2.5)
    assert s.victims_spared([victim, victim]) == (victim,)  # (a pod not going is skipped)
    assert not s.queue.entry("mid").terminating and not s.queue.terminating()
    check_invariants(s)
    assert not s.step(now=3).victims  # mid runs on, nothing to do
    s.submit(job("hi2", gpus=8, priority=10, models="H100", submitted_at=4), now=4)
    assert [v.pods for v in s.step(now=4).victims] == [(victim,)]
    check_invariants(s)


def _lone_preemption(cluster_nodes: int) -> Scheduler:
    from kant.admission import Admitter
    from kant.placement import Placer

    cluster = ClusterBuilder().leaf("lf0", nodes=cluster_nodes).build()
    return Scheduler(
        cluster,
        queue=Queue(),
        admitter=Admitter(None),
        placer=Placer("ebinpack"),
        policy="best-effort-fifo",
        preemption=PreemptionPolicy(min_runtime=0),
    )


def test_a_gang_victim_that_lost_a_pod_already_is_not_spared_and_its_other_pods_still_go() -> None:
    """A budget let one pod of gang v go and kept the other; hi is then cancelled. Sparing the
    pod left would leave v running on half its pods, never requeued: it is not spared, and
    once that pod is evicted too v waits again, whole."""
    s = _lone_preemption(2)
    s.submit(job("v", gpus=8, replicas=2, submitted_at=0), now=0)
    s.step(now=0)
    s.submit(job("hi", gpus=8, replicas=2, priority=10, submitted_at=1), now=1)
    pods = [p for v in s.step(now=1).victims for p in v.pods]
    s.pod_evicted(pods[0], now=2)
    s.cancel("hi", now=3)
    assert s.victims_spared([pods[1]]) == ()
    assert pods[1] in s.queue.entry("v").terminating
    check_invariants(s)
    s.pod_evicted(pods[1], now=4)
    assert s.queue.status("v").phase.value == "pending"
    assert s.step(now=5).placed == ("v",)
    check_invariants(s)


def test_a_gang_victim_is_spared_only_whole() -> None:
    s = _lone_preemption(2)
    s.submit(job("v", gpus=8, replicas=2, submitted_at=0), now=0)
    s.step(now=0)
    s.submit(job("hi", gpus=8, replicas=2, priority=10, submitted_at=1), now=1)
    pods = sorted(p for v in s.step(now=1).victims for p in v.pods)
    s.cancel("hi", now=2)
    assert s.victims_spared(pods[:1]) == ()  # (half of it would still be going)
    assert s.victims_spared(pods) == tuple(pods)
    assert not s.queue.entry("v").terminating
    check_invariants(s)


def test_a_victim_another_preemptor_waits_for_is_not_spared_when_the_first_goes_away() -> None:
    """v goes for A; B, placed in what v frees beyond A's need, waits for v too. A is
    cancelled: v is not spared, B's nomination holds, and nothing is preempted again."""
    s = _lone_preemption(1)
    s.submit(job("v", gpus=8, submitted_at=0), now=0)
    s.step(now=0)
    s.submit(job("A", gpus=4, priority=10, submitted_at=1), now=1)
    r = s.step(now=1)
    (victim,) = [p for v in r.victims for p in v.pods]
    s.submit(job("B", gpus=4, priority=10, submitted_at=2), now=2)
    r = s.step(now=2)
    assert [(n.job, n.victims) for n in r.nominations] == [("B", (victim,))]
    s.cancel("A", now=3)
    assert s.victims_spared([victim]) == ()
    r = s.step(now=4)
    assert not r.victims and not r.dropped_nominations
    s.pod_evicted(victim, now=5)
    assert s.step(now=6).placed == ("B",)
    check_invariants(s)


def _partly_running_preemptor() -> tuple[Scheduler, PodId]:
    """One 8-GPU node: v (4 GPUs) runs; hi, pod-level, two 4-GPU pods at priority 10,
    places its first pod in the free half at t=1 and, in the same cycle, preempts v for its
    second. Returns the scheduler and v's pod, being evicted, that hi (RUNNING) waits for."""
    s = _lone_preemption(1)
    s.submit(job("v", gpus=4, submitted_at=0), now=0)
    s.step(now=0)
    s.submit(job("hi", gpus=4, replicas=2, gang=False, priority=10, submitted_at=1), now=1)
    r = s.step(now=1)
    assert r.placed == ("hi",)
    (victim,) = [p for v in r.victims for p in v.pods]
    assert [(n.job, n.victims) for n in r.nominations] == [("hi", (victim,))]
    hi = s.queue.entry("hi")
    assert hi.phase is JobPhase.RUNNING and hi.nomination is not None and hi.remaining()
    return s, victim


def test_a_victim_a_partly_running_pod_level_preemptor_waits_for_is_not_spared() -> None:
    """hi runs one pod and waits for v's pod to go for its second (its nomination holds v's
    devices). The orchestrator asks to spare v (a budget keeps it): hi still waits for
    exactly that room, so v is not spared; once v goes, hi's second pod is placed."""
    s, victim = _partly_running_preemptor()
    assert s.victims_spared([victim]) == ()
    assert victim in s.queue.entry("v").terminating
    check_invariants(s)
    r = s.step(now=3)
    assert not r.victims and not r.dropped_nominations
    assert s.queue.entry("hi").nomination is not None
    s.pod_evicted(victim, now=4)
    assert s.step(now=5).placed == ("hi",)
    assert not s.queue.entry("hi").remaining()
    check_invariants(s)


def test_a_victim_of_a_partly_running_preemptor_is_spared_once_it_is_cancelled() -> None:
    """The same hi cancelled: nobody waits for v any more, and v runs on."""
    s, victim = _partly_running_preemptor()
    s.cancel("hi", now=3)
    assert s.victims_spared([victim]) == (victim,)
    assert not s.queue.entry("v").terminating and not s.queue.nominated()
    check_invariants(s)


def test_the_cascade_window_must_be_a_non_negative_number() -> None:
    with pytest.raises(InvalidConfigError, match="cascade_window"):
        PreemptionPolicy(cascade_window=-1)
    with pytest.raises(InvalidConfigError, match="borrow_within_cohort"):
        PreemptionPolicy(borrow_within_cohort="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["priority", "reclaim", "backfill"])
@pytest.mark.parametrize("value", ["false", "no", 0.0, None])
def test_a_preemption_switch_that_is_not_a_bool_is_refused_not_taken_for_its_truth(
    field: str, value: object
) -> None:
    # PreemptionPolicy(priority="false") was taken as true: a low-priority job was preempted
    with pytest.raises(InvalidConfigError, match=field):
        PreemptionPolicy(**{field: value})


def test_a_scheduler_switch_that_is_not_a_bool_is_refused_and_changes_nothing() -> None:
    # Scheduler(incremental="no") ran incrementally; node_unhealthy(evict="no") evicted
    with pytest.raises(ValidationError, match="incremental"):
        Scheduler(nodes(1), incremental="no")  # type: ignore[arg-type]
    s = Scheduler(nodes(1))
    s.submit(job("a", gpus=8), now=0)
    s.step(1)
    for call in (
        lambda: s.node_unhealthy("lf0-n0", 2, evict="no"),  # type: ignore[arg-type]
        lambda: s.gpu_unhealthy("lf0-n0", 0, 2, evict=None),  # type: ignore[arg-type]
        lambda: s.nic_unhealthy("lf0-n0", 0, 2, evict=1),  # type: ignore[arg-type]
        lambda: s.pod_evicted(next(iter(s.cluster.pods_on("lf0-n0"))), 2, interrupted="yes"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError, match=r"evict|interrupted"):
            call()
    assert s.queue.entry("a").phase is JobPhase.RUNNING and s.cluster.num_pods == 1
    assert s.cluster.is_healthy("lf0-n0") and s.cluster.gpu_healthy_mask("lf0-n0") == 0xFF
    check_invariants(s)


@pytest.mark.parametrize(
    ("timestamp", "order"),
    [
        pytest.param("submission", ["v", "w"], id="by submission: the victim keeps its place"),
        pytest.param("eviction", ["w", "v"], id="by eviction time (Kueue's Eviction)"),
    ],
)
def test_an_evicted_job_goes_back_in_the_queue_by_the_requeue_timestamp(
    timestamp: str, order: list[str]
) -> None:
    from kant.admission import Admitter
    from kant.placement import Placer

    s = Scheduler(
        nodes(1),
        queue=Queue(backoff=Backoff(), requeue_timestamp=timestamp),
        admitter=Admitter(),
        placer=Placer("ebinpack"),
    )
    s.submit(job("v", gpus=8, submitted_at=0), now=0)
    s.step(now=0)
    s.submit(job("w", gpus=8, submitted_at=1), now=1)
    s.submit(job("p", gpus=8, priority=5, submitted_at=2), now=2)
    r = s.step(now=2)
    assert [v.job for v in r.victims] == ["v"]
    evict_victims(s, r, now=3)
    assert [e.id for e in s.queue.candidates()] == ["p", *order]
    check_invariants(s)


def test_an_unknown_requeue_timestamp_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match="requeue_timestamp"):
        Queue(requeue_timestamp="creation")


# --------------------------------------------------------------------------- victim rules


def _evicted(rules: Any) -> list[str]:
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=1).build(), preemption=PreemptionPolicy(rules=rules)
    )
    s.submit(job("batch", gpus=8, tenant="prod", priority=0), now=0)
    s.step(now=1)
    s.submit(job("urgent", gpus=8, tenant="research", priority=9), now=2)
    return [v.job for v in s.step(now=3).victims]


@pytest.mark.parametrize("protected", [False, np.False_, 0, np.int64(0)])
def test_a_victim_rule_protects_a_job_with_any_boolean_false_numpy_and_zero_included(
    protected: Any,
) -> None:
    assert (
        _evicted([lambda pre, unit, borrowing: protected if unit.tenant == "prod" else None]) == []
    )


@pytest.mark.parametrize("defer", [None, True, np.True_, 1])
def test_a_victim_rule_answering_none_or_true_leaves_the_job_to_the_next_rules(defer: Any) -> None:
    assert _evicted([lambda pre, unit, borrowing: defer]) == ["batch"]


def test_a_victim_rule_answering_anything_else_is_refused_naming_the_rule() -> None:
    def sloppy(pre: Any, unit: Any, borrowing: Any) -> Any:
        return "protected"

    with pytest.raises(ValidationError, match="sloppy") as err:
        _evicted([sloppy])
    assert err.value.field == "rules"


@pytest.mark.parametrize(("rules", "field"), [([3], "rules[0]"), ((len, None), "rules[1]")])
def test_a_victim_rule_that_is_not_callable_is_refused_when_the_policy_is_built(
    rules: Any, field: str
) -> None:
    with pytest.raises(InvalidConfigError) as err:
        PreemptionPolicy(rules=rules)
    assert err.value.field == field


def test_a_single_victim_rule_not_in_a_sequence_is_refused_naming_rules() -> None:
    with pytest.raises(InvalidConfigError, match="single rule goes in a list") as err:
        PreemptionPolicy(rules=len)
    assert err.value.field == "rules"
    assert PreemptionPolicy(rules=(r for r in [len])).rules == (len,)


@pytest.mark.parametrize(
    "given",
    [["junk"], [("mid", "worker", 0)], "mid/worker/0", 5],
    ids=["a string among the pods", "a tuple in a PodId's place", "a string of pods",
         "a number"],
)  # fmt: skip
def test_victims_spared_given_what_is_not_pod_ids_is_refused_and_spares_nothing(
    given: object,
) -> None:
    """victims_spared([victim, "junk"]) raised AttributeError; now InvalidJobError, before
    anything is spared: the victim named first is still being evicted."""
    s, r = _hi_evicts_mid(0.0)
    victim = r.victims[0].pods[0]
    s.cancel("hi", now=2.5)
    asked = [victim, *given] if isinstance(given, list) else given
    with pytest.raises(InvalidJobError):
        s.victims_spared(asked)  # type: ignore[arg-type]
    assert victim in s.queue.entry("mid").terminating
    check_invariants(s)
    assert s.victims_spared([victim]) == (victim,)


def test_victims_spared_given_one_bare_pod_id_says_to_pass_it_in_a_list() -> None:
    """A PodId is itself a tuple: victims_spared(victim) walked its fields and refused the job
    name as "not a PodId"; it now names the mistake, and spares nothing."""
    s, r = _hi_evicts_mid(0.0)
    victim = r.victims[0].pods[0]
    s.cancel("hi", now=2.5)
    with pytest.raises(InvalidJobError, match=r"not one PodId: pass \[pod\]") as err:
        s.victims_spared(victim)
    assert err.value.field == "pods"
    assert victim in s.queue.entry("mid").terminating
    check_invariants(s)
    assert s.victims_spared([victim]) == (victim,)
