"""A preemptor whose pods need more GPU milli than its pools have free now plus all that the
victims still to go hold does not build the future with those victims gone
(:meth:`Preemption._may_fit_after`): the job could not fit there. The cycle decides exactly
as when it builds that future."""

from __future__ import annotations

from typing import Any
from unittest import mock

from kant.preemption.preemptor import Preemption
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, job

_may_fit_after = Preemption._may_fit_after


def _two_full_nodes_one_victim_going() -> Scheduler:
    """Two 8-GPU nodes held by low-priority jobs; a high-priority 8-GPU job preempted one of
    them, whose pods are still terminating."""
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2, gpus=8).build())
    s.submit(job("low1", gpus=8, priority=0), now=0)
    s.submit(job("low2", gpus=8, priority=0), now=1)
    s.step(now=2)
    s.submit(job("high1", gpus=8, priority=5), now=3)
    r = s.step(now=4)
    assert [v.job for v in r.victims] == ["low2"]  # most recently started goes first
    return s


def _cycle(s: Scheduler, *, bound: bool) -> tuple[Any, list[bool]]:
    """One cycle at t=10; ``bound=False``: the future is always built. Returns the result and
    the bound's answers."""
    answers: list[bool] = []

    def spy(self: Preemption, *args: Any) -> bool:
        ok = _may_fit_after(self, *args)
        answers.append(ok)
        return ok if bound else True

    with mock.patch.object(Preemption, "_may_fit_after", spy):
        return s.schedule(now=10), answers


def test_a_gang_larger_than_free_plus_going_skips_the_future_and_decides_the_same() -> None:
    a, b = _two_full_nodes_one_victim_going(), _two_full_nodes_one_victim_going()
    for s in (a, b):
        s.submit(job("high2", gpus=8, replicas=2, priority=5), now=5)  # 16 GPUs
    got, answers = _cycle(a, bound=True)
    want, _ = _cycle(b, bound=False)
    assert answers == [False]  # 0 free + 8,000 milli going < 16,000
    assert got == want


def test_a_job_within_free_plus_going_builds_the_future() -> None:
    a, b = _two_full_nodes_one_victim_going(), _two_full_nodes_one_victim_going()
    for s in (a, b):
        s.submit(job("high2", gpus=8, priority=5), now=5)
    got, answers = _cycle(a, bound=True)
    want, _ = _cycle(b, bound=False)
    assert answers == [True]  # 8,000 milli going: the future is built (high1 holds it)
    assert got == want
