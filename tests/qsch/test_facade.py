"""The Scheduler facade as an embedding orchestrator uses it: the submit time and status."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant import JobPhase, PodId, ReasonCode, Scheduler
from kant.errors import InvalidTimeError, UnknownJobError, ValidationError
from kant.testing import ClusterBuilder, job


def _one_node(policy: str = "strict-fifo") -> Scheduler:
    return Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build(), policy=policy)


def test_a_job_submitted_at_t10_is_not_queued_behind_one_submitted_at_t20() -> None:
    s = _one_node()
    s.submit(job("first", gpus=8), now=10)  # job() leaves submitted_at unset
    s.submit(job("second", gpus=4), now=20)
    r = s.step(now=30)
    assert [b.pod.job for b in r.bindings] == ["first"]
    assert s.status("second").phase is JobPhase.PENDING


def test_the_submit_time_a_job_carries_wins_over_the_time_it_is_submitted() -> None:
    s = _one_node()
    s.submit(job("fresh", gpus=4), now=10)
    s.submit(job("resubmitted", gpus=8, submitted_at=5), now=50)  # time never runs backwards
    r = s.step(now=60)
    assert [b.pod.job for b in r.bindings] == ["resubmitted"]
    assert s.queue.status("resubmitted").job.submitted_at == 5
    assert s.queue.status("fresh").job.submitted_at == 10


def test_a_negative_submit_time_is_refused_as_a_time_naming_now_and_nothing_changes() -> None:
    s = _one_node()
    with pytest.raises(InvalidTimeError, match="'now'"):
        s.submit(job("a"), now=-1)
    assert "a" not in s.queue


def test_status_tells_a_pending_job_its_reason_and_wait_so_far() -> None:
    s = _one_node()
    s.submit(job("first", gpus=8), now=10)  # holds the node
    s.submit(job("big", gpus=4, replicas=2), now=10)
    s.step(now=20)
    st = s.status("big", now=100)
    assert st.phase is JobPhase.PENDING
    assert st.reason is not None and st.reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert st.bindings == ()
    assert st.pods_waiting == 2
    assert st.wait == 90


def test_status_tells_a_running_job_its_bindings_and_the_wait_it_had() -> None:
    s = _one_node()
    s.submit(job("a", gpus=4, replicas=2), now=10)
    r = s.step(now=25)
    st = s.status("a", now=500)
    assert st.phase is JobPhase.RUNNING and st.reason is None
    assert st.bindings == tuple(sorted(r.bindings, key=lambda b: b.pod))
    assert st.pods_waiting == 0
    assert st.started_at == 25 and st.wait == 15
    s.pod_finished(r.bindings[0].pod, now=600)
    s.pod_finished(r.bindings[1].pod, now=600)
    done = s.status("a")
    assert done.phase is JobPhase.FINISHED and done.bindings == () and done.wait == 15


def test_status_of_a_job_never_submitted_is_a_typed_error() -> None:
    with pytest.raises(UnknownJobError, match="'ghost'"):
        _one_node().status("ghost")


def test_a_pod_id_given_positional_arguments_says_it_takes_keywords() -> None:
    from kant import PodId

    with pytest.raises(TypeError, match=r"keyword arguments only: PodId\(job=\.\.\., role="):
        PodId("a", "w", 0)  # type: ignore[misc]
    assert str(PodId(job="a", role="w", index=0)) == "a/w/0"


def test_the_cluster_lists_its_bindings_by_that_name() -> None:
    s = _one_node()
    s.submit(job("a", gpus=8), now=0)
    r = s.step(now=1)
    assert list(s.cluster.bindings()) == list(r.bindings) == list(s.cluster.pods())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1000), st.one_of(st.just(0), st.integers(1, 1000))),
        min_size=1,
        max_size=12,
    )
)
def test_the_queue_orders_by_the_time_each_job_carries_else_the_time_it_was_submitted(
    subs: list[tuple[int, int]],
) -> None:
    from kant.queueing import Queue

    q = Queue()
    want = []
    for i, (now, carried) in enumerate(subs):
        q.submit(job(f"j{i}", gpus=1, submitted_at=carried), now=now)
        want.append((carried or now, i))
    order = [e.id for e in q.candidates()]
    assert order == [f"j{i}" for _t, i in sorted(want)]


# ----------------------------------------------------------------- restore (a restart)


def _restarting(quota_gpus: int) -> tuple[Scheduler, Any, list[Any]]:
    """A scheduler whose tenant ``t`` may now use ``quota_gpus`` GPUs (isolated), a pod-level
    job of two 8-GPU pods of ``t``, and bindings of both on the two nodes."""
    from kant.admission.quota import Admitter, Quota
    from kant.model import Binding

    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(),
        admitter=Admitter([Quota.gpus("t", "H100", quota_gpus)], modes={"t": "isolated"}),
    )
    j = job("a", gpus=8, replicas=2, gang=False, tenant="t")
    nodes = [n.name for n in s.cluster.nodes()]
    bs = [
        Binding(pod=p, node=n, gpus=tuple(range(8))) for p, n in zip(j.pods(), nodes, strict=True)
    ]
    return s, j, bs


def test_a_restored_job_runs_on_its_bindings_and_is_charged_to_its_tenant() -> None:
    s, j, bs = _restarting(quota_gpus=16)
    s.restore(j, bs, now=5)
    st = s.status("a", now=6)
    assert st.phase is JobPhase.RUNNING and st.bindings == tuple(bs) and st.started_at == 5
    assert s.admitter.usage() == {("t", "H100"): 16_000}
    s.check_invariants()
    s.submit(job("b", gpus=8, tenant="t"), now=7)
    assert s.step(now=7).bindings == ()  # nothing placed twice, nor beyond the quota


def test_a_restore_beyond_the_tenants_quota_now_is_refused_and_changes_nothing() -> None:
    from kant.errors import QuotaExceededError

    s, j, bs = _restarting(quota_gpus=8)  # the quota was lowered while the pods ran
    with pytest.raises(QuotaExceededError, match="'t'"):
        s.restore(j, bs, now=5)
    assert s.cluster.num_pods == 0 and s.admitter.usage() == {}
    with pytest.raises(UnknownJobError):
        s.status("a")


def test_a_restore_that_does_not_fit_the_cluster_changes_nothing() -> None:
    from kant.errors import AllocationConflictError

    s, j, bs = _restarting(quota_gpus=16)
    s.restore(j, bs[:1], now=5)  # one pod of a pod-level job: the other waits
    assert s.status("a", now=5).pods_waiting == 1
    clash = job("c", gpus=8, tenant="t")
    with pytest.raises(AllocationConflictError):
        s.restore(clash, [bs[0].__class__(pod=next(iter(clash.pods())), node=bs[0].node,
                                          gpus=bs[0].gpus)], now=6)  # fmt: skip
    with pytest.raises(UnknownJobError):
        s.status("c")
    s.check_invariants()


def test_a_job_running_on_a_node_cordoned_or_a_gpu_failed_before_the_restart_is_restored() -> None:
    """The pods run there: a node that takes no new pods (cordoned, unhealthy, its max_pods
    lowered) or an unhealthy GPU they hold does not refuse them, as it does not release the
    pods there when it fails. Before, restore raised AllocationConflictError ("node is unhealthy"), so an
    orchestrator reporting its nodes' health before its pods could not take the job back."""
    s, j, bs = _restarting(quota_gpus=16)
    s.node_unhealthy(bs[0].node, 1, evict=False)
    s.gpu_unhealthy(bs[1].node, 3, 2, evict=False)
    s.node_max_pods(bs[1].node, 0, 3)  # (lowered under it too: it stays, as on a live node)
    s.restore(j, bs, now=5)
    assert s.status("a", now=5).phase is JobPhase.RUNNING
    assert [s.cluster.binding(b.pod) for b in bs] == bs
    assert s.admitter.usage() == {("t", "H100"): 16_000}
    assert s.cluster.snapshot().same_as(s.cluster.full_snapshot()) == []
    s.node_healthy(bs[0].node)  # (nothing free there: its pod holds every GPU)
    s.gpu_healthy(bs[1].node, 3)
    assert int(s.cluster.columns.free_gpus[: s.cluster.num_slots].sum()) == 0
    s.check_invariants()


def test_restoring_a_job_id_already_running_leaves_its_pods_labels_as_they_were() -> None:
    import attrs

    from kant.errors import DuplicateError
    from kant.model import Binding

    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    web = job("a", gpus=8, replicas=2, gang=False, labels={"app": "web"})
    s.submit(web, now=0)
    s.step(now=1)  # a/worker/0 runs, a/worker/1 waits for a node
    s.node_added(attrs.evolve(s.cluster.node("lf0-n0"), name="lf0-n1"), now=1)
    waiting = next(p for p in web.pods() if not s.cluster.has_pod(p))
    terms = s.cluster.pod_terms_version
    for other in (job("a", gpus=8, replicas=2, gang=False),
                  job("a", gpus=8, replicas=2, gang=False, labels={"app": "x"})):  # fmt: skip
        with pytest.raises(DuplicateError, match="'a'"):
            s.restore(other, [Binding(pod=waiting, node="lf0-n1", gpus=tuple(range(8)))], now=2)
        assert s.cluster.described("a") is web and s.cluster.pod_terms_version == terms
        assert not s.cluster.has_pod(waiting)
    s.check_invariants()


def test_a_gangs_restore_must_bind_or_finish_every_pod() -> None:
    from kant.errors import ValidationError

    s, _, bs = _restarting(quota_gpus=16)
    gang = job("g", gpus=8, replicas=2, tenant="t")
    pods = list(gang.pods())
    one = bs[0].__class__(pod=pods[0], node=bs[0].node, gpus=bs[0].gpus)
    with pytest.raises(ValidationError, match="every pod of the gang"):
        s.restore(gang, [one], now=5)
    s.restore(gang, [one], now=5, finished=pods[1:])  # its other pod ended meanwhile
    assert s.status("g", now=5).phase is JobPhase.RUNNING
    s.check_invariants()


@pytest.mark.parametrize("item", ["z/worker/0", ["z", "worker", 0], {"job": "z"}])
def test_a_restore_that_names_a_finished_pod_by_something_else_is_refused(item: object) -> None:
    # a list or a mapping (unhashable) raised TypeError where a string raised ValidationError
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    with pytest.raises(ValidationError, match="must be distinct pods of job 'z'"):
        s.restore(job("z", gpus=1, gang=False, replicas=2), [], 1, finished=[item])  # type: ignore[list-item]
    assert len(s.queue) == 0


def test_a_pod_restored_on_a_model_its_role_does_not_allow_is_not_taken_for_a_broken_state() -> (
    None
):
    """restore records running pods as given, unchecked against their roles (docs), but
    check_invariants then raised InvariantError ("a A100 node its role does not allow")."""
    from kant.model import Binding, PodId
    from kant.testing import check_invariants

    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).leaf("lf1", nodes=1, model="A100").build())
    pod = PodId(job="r", role="worker", index=0)
    s.restore(
        job("r", gpus=8, models="H100"), [Binding(pod=pod, node="lf1-n0", gpus=tuple(range(8)))], 5
    )
    check_invariants(s)
    s.pod_evicted(pod, 6, interrupted=True)  # requeued: placed again by kant, on an H100 node
    s.step(7)
    assert s.cluster.binding(pod).node == "lf0-n0"
    check_invariants(s)


def _victim_gang() -> Scheduler:
    """A 2-pod gang ``low`` on a 2-node cluster, both pods chosen as victims of ``hi``."""
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build(), policy="best-effort-fifo")
    s.submit(job("low", gpus=8, replicas=2, priority=0), now=1)
    s.step(now=2)
    s.submit(job("hi", gpus=8, replicas=2, priority=10), now=3)
    r = s.step(now=4)
    assert sorted(str(p) for v in r.victims for p in v.pods) == ["low/worker/0", "low/worker/1"]
    return s


@pytest.mark.parametrize("first", ["evicted", "finished"])
def test_a_victim_gang_whose_pods_end_one_evicted_one_finished_runs_again_whole(
    first: str,
) -> None:
    # informers give no order between pods: evicted then finished left the gang pending with
    # its finished pod remembered, and the next cycle ran the evicted pod alone
    s = _victim_gang()
    evicted = PodId(job="low", role="worker", index=0)
    finished = PodId(job="low", role="worker", index=1)
    events = [lambda: s.pod_evicted(evicted, 5), lambda: s.pod_finished(finished, 5)]
    reports = [e() for e in (events if first == "evicted" else events[::-1])]
    assert [r.requeued for r in reports] == [(), ("low",)]  # (requeued with its last pod)
    st = s.status("low")
    assert (st.phase, st.pods_waiting) == (JobPhase.PENDING, 2)
    s.check_invariants()
    s.cancel("hi", 6)
    r = s.step(now=7)
    assert sorted(str(b.pod) for b in r.bindings) == ["low/worker/0", "low/worker/1"]
