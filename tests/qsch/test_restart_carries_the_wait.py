"""An orchestrator that restarts rebuilds kant's state: the jobs it finds bound
(``Scheduler.restore``) and the jobs still waiting (``Scheduler.submit``), each with the
``FailureHistory`` of what it had. The history carries the job's wait (``pending_since``, from
which Backfill counts its threshold and which backfilled jobs it may preempt) and its last
eviction by preemption (``evicted_at``, the no-cascade window), so the rebuilt scheduler
decides as the one that never restarted."""

from __future__ import annotations

import math

import pytest

from kant.errors import InvalidJobError, KantError
from kant.model import Binding, PodId
from kant.queueing import FailureHistory, JobPhase
from kant.queueing.backfill import Backfill
from kant.queueing.easy import EasyBackfill
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, job


def _restart(s: Scheduler, now: float, **kw: object) -> Scheduler:
    """A scheduler rebuilt at ``now`` from what an orchestrator sees of ``s``."""
    s2 = Scheduler(ClusterState(list(s.cluster.nodes())), **kw)  # type: ignore[arg-type]
    for e in sorted(s.queue.entries(), key=lambda e: e.seq):
        if e.phase in (JobPhase.FINISHED, JobPhase.FAILED):
            continue
        bs = [s.cluster.binding(p) for p in sorted(e.assigned)]
        if bs:
            s2.restore(e.job, bs, now, started_at=e.started_at, history=FailureHistory.of(e))
        else:
            s2.submit(e.job, now=now, history=FailureHistory.of(e))
    return s2


def _victims(r: object) -> list[str]:
    return [str(p) for v in r.victims for p in v.pods]  # type: ignore[attr-defined]


def test_a_backfill_head_keeps_its_wait_and_its_right_to_preempt_what_backfilled_past_it() -> None:
    # (rebuilt, H waited from 6: past its threshold only at 16, and B, started at 3, before
    # H waited, was no job that backfilled past it: no victim, ever)
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build(), policy=Backfill(threshold=10))
    s.submit(job("R", gpus=4, submitted_at=1), now=1)
    s.step(1)
    s.submit(job("H", gpus=8, submitted_at=2), now=2)
    s.submit(job("B", gpus=4, submitted_at=3), now=3)
    s.step(3)  # B backfills past H
    s.pod_finished(PodId(job="R", role="worker", index=0), 5)
    s2 = _restart(s, 6, policy=Backfill(threshold=10))
    assert s2.queue.entry("H").pending_since == 2.0
    r1, r2 = s.step(12), s2.step(12)
    assert _victims(r1) == _victims(r2) == ["B/worker/0"]


def test_a_job_evicted_a_moment_before_the_restart_still_does_not_preempt_in_turn() -> None:
    # (rebuilt, L forgot its eviction and preempted Z at once: a cascade)
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    s.submit(job("L", gpus=8, priority=1, submitted_at=1), now=1)
    s.submit(job("X", gpus=4, priority=1, submitted_at=1, preemptible=False), now=1)
    s.submit(job("Z", gpus=4, priority=0, submitted_at=1), now=1)
    s.step(1)
    s.submit(job("H", gpus=8, priority=2, submitted_at=2), now=2)
    r = s.step(2)  # H preempts L
    assert _victims(r) == ["L/worker/0"]
    s.pod_evicted(PodId(job="L", role="worker", index=0), 3)
    s.step(3)
    s.pod_finished(PodId(job="X", role="worker", index=0), 4)
    s2 = _restart(s, 5)
    assert s2.queue.entry("L").evicted_at == 3.0
    r1, r2 = s.schedule(5), s2.schedule(5)
    assert _victims(r1) == _victims(r2) == []
    assert r1.pending["L"].code == r2.pending["L"].code


def test_a_history_of_a_running_job_carries_no_wait() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    s.submit(job("R", gpus=4, submitted_at=1), now=1)
    s.step(1)
    h = FailureHistory.of(s.queue.entry("R"))
    assert h.pending_since is None and h.evicted_at is None and h.empty


def test_a_status_carried_to_a_new_job_keeps_the_earlier_wait_now_given_or_not() -> None:
    # (the old job waited from its requeue at 5, after its submit at 1: a new job submitted
    # with that status and no now was refused, "later than the submit")
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    s.submit(job("a", gpus=1, submitted_at=1), now=1)
    s.step(2)
    s.binding_failed(PodId(job="a", role="worker", index=0), 5)
    st = s.queue.status("a")
    assert st.pending_since == 5.0
    s.cancel("a", 6)
    s.queue.submit(job("a2", gpus=1, submitted_at=1), history=st)
    assert s.queue.entry("a2").pending_since == 1.0  # (its submit, earlier than the wait)
    s.submit(job("a3", gpus=1, submitted_at=1), now=7, history=st)
    assert s.queue.entry("a3").pending_since == 5.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("evicted_at", 7.0), ("pending_since", math.nan),
     ("evicted_at", math.inf), ("pending_since", -1.0), ("evicted_at", "3")],
)  # fmt: skip
def test_an_eviction_after_the_submit_or_a_time_that_is_none_is_refused(
    field: str, value: object
) -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    with pytest.raises(InvalidJobError):
        s.submit(job("a", gpus=1), now=5, history=FailureHistory(**{field: value}))  # type: ignore[arg-type]
    assert "a" not in s.queue


def test_a_pod_level_job_restored_with_each_pod_s_start_keeps_its_expected_ends() -> None:
    # (one start for all: pod 1, bound at 11 and ending at 31, was expected to end at 21,
    # so H was reserved at 21 and B, which fits before 31, waited)
    def mk(c: ClusterState) -> Scheduler:
        return Scheduler(c, policy=EasyBackfill())

    s = mk(ClusterBuilder().leaf("lf0", nodes=1).build())
    s.submit(job("P", gpus=2, replicas=2, gang=False, runtime=20, submitted_at=1), now=1)
    s.step(1)
    s.binding_failed(PodId(job="P", role="worker", index=1), 1)  # pod 1 placed again at 11
    s.step(11)
    e = s.queue.entry("P")
    assert sorted(e.assigned.values()) == [1.0, 11.0]
    s.submit(job("H", gpus=8, runtime=10, submitted_at=10), now=11)
    s.submit(job("B", gpus=4, runtime=15, submitted_at=11), now=11)
    s2 = mk(ClusterState(list(s.cluster.nodes())))
    bs = [s.cluster.binding(p) for p in sorted(e.assigned)]
    s2.restore(e.job, bs, 11, started_at=dict(e.assigned), history=FailureHistory.of(e))
    for jid in ("H", "B"):
        f = s.queue.entry(jid)
        s2.submit(f.job, now=11, history=FailureHistory.of(f))
    assert s2.queue.entry("P").assigned == e.assigned and s2.queue.entry("P").started_at == 1.0
    r1, r2 = s.schedule(11), s2.schedule(11)
    assert [str(b.pod) for b in r1.bindings] == [str(b.pod) for b in r2.bindings] == ["B/worker/0"]
    assert r1.reservations[0].start == r2.reservations[0].start == 31.0


@pytest.mark.parametrize(
    "started",
    [{PodId(job="P", role="worker", index=5): 1.0},  # no pod of the job
     {PodId(job="P", role="worker", index=1): 1.0},  # a pod of it that is not bound here
     {PodId(job="P", role="worker", index=0): 12.0},  # later than now
     {PodId(job="P", role="worker", index=0): math.nan},
     {"P/worker/0": 1.0}],
)  # fmt: skip
def test_a_start_per_pod_for_no_bound_pod_or_of_no_time_is_refused_changing_nothing(
    started: dict[object, float],
) -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    b = Binding(pod=PodId(job="P", role="worker", index=0), node="lf0-n0", gpus=(0, 1))
    with pytest.raises(KantError):
        s.restore(job("P", gpus=2, replicas=2, gang=False), [b], 11, started_at=started)  # type: ignore[arg-type]
    assert "P" not in s.queue and not s.cluster.runs_job("P")
