"""The queue's transitions (the calls kant's cycle and apply make, public for an
orchestrator that drives a Queue itself) check what they are given before they change
anything: a bad call raises a typed error and leaves the queue as it was."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from kant.errors import (
    InvalidTimeError,
    KantError,
    UnknownJobError,
    UnknownPodError,
    ValidationError,
)
from kant.model import PodId
from kant.queueing import Nomination, Queue
from kant.testing import job


def _queue(**kw: Any) -> tuple[Queue, PodId]:
    q = Queue(**kw)
    q.submit(job("a", gpus=1), 0.0)
    q.submit(job("b", gpus=1), 0.0)
    pa = PodId(job="a", role="worker", index=0)
    q.mark_assigned("a", [pa], 1.0)
    return q, pa


def _seen(q: Queue) -> Any:
    return (
        q.statuses(),
        [e.id for e in q.terminating()],
        [e.id for e in q.candidates()],
        [e.id for e in q.nominated()],
    )


ghost = PodId(job="ghost", role="worker", index=0)


@pytest.mark.parametrize(
    ("call", "err"),
    [
        # the first pod was marked terminating, then the unknown job raised
        (lambda q, pa: q.mark_terminating([pa, ghost], "b"), UnknownJobError),
        (lambda q, pa: q.mark_terminating([pa, "x"], "b"), UnknownPodError),
        (lambda q, pa: q.mark_confirmed("x"), UnknownPodError),
        # the pods were let go and a failure counted, then the time raised: RUNNING, no pods
        (lambda q, pa: q.requeue("a", "x", failed=True), InvalidTimeError),
        (lambda q, pa: q.requeue("a", math.nan, failed=True), InvalidTimeError),
        (lambda q, pa: q.fail("a", math.inf, "m"), InvalidTimeError),
        (lambda q, pa: q.mark_assigned("b", [PodId(job="b", role="worker", index=0)], math.nan),
         InvalidTimeError),
        (lambda q, pa: q.forget_pods("a", [pa], "x", finished=False), InvalidTimeError),
        # another job's pod, or one the job does not have, was kept as the job's: RUNNING
        # with a pod that can never finish it, or pods of another job forgotten
        (lambda q, pa: q.mark_assigned("b", [pa], 2.0), UnknownPodError),
        (lambda q, pa: q.mark_assigned("b", [PodId(job="b", role="worker", index=7)], 2.0),
         UnknownPodError),
        (lambda q, pa: q.mark_assigned("b", ["x"], 2.0), UnknownPodError),
        (lambda q, pa: q.forget_pods("b", [pa], 2.0, finished=True), UnknownPodError),
        (lambda q, pa: q.forget_pods("a", [PodId(job="a", role="ps", index=0)], 2.0,
                                     finished=True), UnknownPodError),
        (lambda q, pa: q.mark_preempted("a", math.nan), InvalidTimeError),
        (lambda q, pa: q.mark_preempted("a", 10**400), InvalidTimeError),
        # a nomination that is none, of another job, or for an ended job
        (lambda q, pa: q.set_nomination("junk", "b"), ValidationError),  # type: ignore[arg-type]
        (lambda q, pa: q.set_nomination(
            Nomination(job="a", bindings=(), victims=(), created_at=0.0), "b"), ValidationError),
    ],
)  # fmt: skip
def test_a_transition_given_something_wrong_raises_and_changes_nothing(
    call: Callable[[Queue, PodId], object], err: type[KantError]
) -> None:
    q, pa = _queue()
    before = _seen(q)
    with pytest.raises(err):
        call(q, pa)
    assert _seen(q) == before
    q.check_invariants()


def test_an_eviction_time_the_order_cannot_take_is_refused_before_it_is_kept() -> None:
    # (requeue_timestamp="eviction": evicted_at and ordered_at were set to -5 before the
    # order key refused it, and every later redescribe of the job raised)
    q, _ = _queue(requeue_timestamp="eviction")
    before = _seen(q)
    with pytest.raises(KantError):
        q.mark_preempted("a", -5.0)
    assert _seen(q) == before and q.entry("a").ordered_at is None
    q.mark_preempted("a", 2.0)  # (as if the bad call never happened)
    assert q.entry("a").ordered_at == 2.0
    q.check_invariants()


def test_a_nomination_for_an_ended_job_is_refused() -> None:
    q, _ = _queue()
    q.cancel("b")
    with pytest.raises(ValidationError, match="ended"):
        q.set_nomination(Nomination(job="b", bindings=(), victims=(), created_at=0.0), "b")
    q.set_nomination(None, "b")  # (clearing is always fine)
    q.check_invariants()
