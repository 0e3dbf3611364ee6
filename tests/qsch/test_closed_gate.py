"""A queueing policy may close its gate for the rest of a cycle (Strict FIFO once a job
blocks): the cycle then gives every job left the policy's answer without walking them one by
one. The answers must be exactly those of the walk: a job waiting out its backoff keeps its
backoff reason and a job asking a GPU model no node has says so, behind the blocker or not."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from kant.contracts import CandidateView, CycleContext, Gate, PolicyRun, Reservation
from kant.cycle import _Cycle
from kant.model import BLOCKING_CODES, Reason, ReasonCode
from kant.queueing import StrictFIFO
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job
from kant.testing.strategies import clusters
from tests.qsch.test_incremental_cycle import _jobs, _op, _Pair, ops_of, play


class _Walked:
    """A policy run that never closes its gate: the cycle asks it of every job."""

    def __init__(self, run: PolicyRun, asked: list[str]) -> None:
        self.run = run
        self.asked = asked

    def gate(self, job: CandidateView) -> Gate:
        self.asked.append(job.id)
        return self.run.gate(job)

    def explain(self, job: CandidateView, reason: Reason) -> Reason:
        return self.run.explain(job, reason)

    def failed(self, job: CandidateView, reason: Reason) -> bool:
        return self.run.failed(job, reason)

    def reservation(self) -> Reservation | None:
        return self.run.reservation()


class _Closing(_Walked):
    """A policy run that closes its gate when Strict FIFO does."""

    def closed(self) -> Gate | None:
        return self.run.closed()  # type: ignore[attr-defined,no-any-return]


class _WalkedFIFO:
    """Strict FIFO, every job walked (the reference the closed gate must agree with), or
    (``closing``) with its gate closed as Strict FIFO closes it; records whom it was asked."""

    name = "strict-fifo-walked"

    def __init__(self, closing: bool = False) -> None:
        self.asked: list[str] = []
        self.closing = closing

    def begin(self, ctx: CycleContext) -> PolicyRun:
        return (_Closing if self.closing else _Walked)(StrictFIFO().begin(ctx), self.asked)


def _blocked_queue(policy: Any) -> Scheduler:
    """One 8-GPU node, 6 of its GPUs busy; then, in queue order: a head asking 4 GPUs
    (blocked), a job asking a GPU model no node has, two ordinary jobs and a job in backoff
    (its binding failed; it was submitted last)."""
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(), policy=policy)
    s.submit(job("busy", gpus=6), now=0)
    s.submit(job("flaky", gpus=1, submitted_at=9), now=0)
    s.step(now=1)
    s.binding_failed(next(iter(s.queue.entry("flaky").assigned)), now=2)
    for i, (name, kw) in enumerate(
        [("head", {"gpus": 4}), ("nowhere", {"models": "B200"}), ("a", {}), ("b", {})]
    ):
        s.submit(job(name, submitted_at=3 + i, **kw), now=3 + i)
    return s


def test_behind_a_blocked_head_each_job_gets_the_walks_answer_without_being_walked() -> None:
    walked, closing = _WalkedFIFO(), _WalkedFIFO(closing=True)
    fast, ref = _blocked_queue(closing), _blocked_queue(walked)
    closing.asked.clear()
    walked.asked.clear()
    got, want = fast.schedule(now=10), ref.schedule(now=10)
    assert got.pending == want.pending
    assert got.pending["head"].code in BLOCKING_CODES
    assert got.pending["a"].code is ReasonCode.BLOCKED
    assert got.pending["a"].message == "behind head"
    assert got.pending["b"] == got.pending["a"]
    assert got.pending["nowhere"].code is ReasonCode.NO_POOL
    assert got.pending["flaky"].code is ReasonCode.BACKOFF
    # the reference asked the gate of the jobs behind the head; the closed one did not
    assert walked.asked == ["head", "a", "b"]
    assert closing.asked == ["head"]
    assert fast.schedule(now=10).pending == _blocked_queue("strict-fifo").schedule(10).pending
    # the job waiting out its backoff is counted, behind the closed gate as when walked
    assert got.stats.backoff_jobs == want.stats.backoff_jobs == 1
    later = fast.queue.entry("flaky").backoff_until
    assert fast.schedule(now=later).stats.backoff_jobs == 0


def test_behind_a_head_still_blocked_only_what_changed_is_derived_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = _blocked_queue("strict-fifo")
    ref = _blocked_queue("strict-fifo")
    ref.incremental = False  # every cycle derives every answer
    asked: list[str] = []
    behind_gate = _Cycle._behind_gate

    def counted(cycle: _Cycle, e: Any) -> Reason | None:
        if cycle.queue is s.queue:
            asked.append(e.id)
        return behind_gate(cycle, e)

    monkeypatch.setattr(_Cycle, "_behind_gate", counted)

    reused: list[bool] = []

    def both(now: float) -> dict[str, Reason]:
        asked.clear()
        got = s.step(now)
        want = ref.step(now)
        assert (got.pending, got.stats.backoff_jobs) == (want.pending, want.stats.backoff_jobs)
        reused.append(got.stats.reused)
        return dict(got.pending)

    both(10)
    assert asked == ["nowhere", "a", "b", "flaky"]  # the first time, every job behind it
    later = s.queue.entry("flaky").backoff_until
    assert later > 11.5
    first = both(11)
    assert asked == [] and reused[-1]  # nothing changed, the backoff runs: answered again
    assert first["flaky"].code is ReasonCode.BACKOFF
    for x in (s, ref):
        x.submit(job("c", submitted_at=11.5), now=11.5)
    got = both(11.5)
    assert asked == ["flaky", "c"]  # the job waiting out its backoff, and one that joined
    assert got["c"] == got["a"]
    got = both(later)  # its backoff is over: it waits behind the head like the others
    assert asked == ["flaky"] and not reused[-1]
    assert got["flaky"] == got["a"]
    both(later + 1)
    assert asked == []
    for x in (s, ref):
        x.cancel("a", later + 2)  # a job behind the head leaves: the order differs, derived again
    got = both(later + 2)
    assert asked == ["nowhere", "b", "flaky", "c"]
    assert "a" not in got
    for x in (s, ref):  # a job that goes right after the head, too big once it starts
        x.submit(job("x", gpus=5, submitted_at=3.5), now=later + 3)
    got = both(later + 3)
    assert asked == ["x", "nowhere", "b", "flaky", "c"]
    for x in (s, ref):
        x.pod_finished(next(iter(x.queue.entry("busy").assigned)), now=later + 4)
    got = both(later + 4)  # the head starts, x blocks: the same jobs behind it, less x
    assert asked == []
    assert "head" not in got
    assert got["b"].message == "behind x"


def test_a_job_behind_the_head_whose_pod_failed_to_bind_waits_out_its_backoff() -> None:
    # p started 3 of its 4 pods before h, which goes first in the order, came and blocked;
    # then one of p's pods fails to bind: p, still behind h, now waits out a backoff
    def build(incremental: bool) -> Scheduler:
        s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(), policy="strict-fifo")
        s.incremental = incremental
        s.submit(job("busy", gpus=5), now=0)
        s.submit(job("p", gpus=1, replicas=4, gang=False, submitted_at=5), now=0)
        s.step(now=1)
        s.submit(job("h", gpus=2, submitted_at=0.5), now=2)
        return s

    s, ref = build(True), build(False)
    for x in (s, ref):
        assert len(x.queue.entry("p").assigned) == 3
    first = s.step(now=3)
    assert first.pending == ref.step(now=3).pending
    assert first.pending["p"].message == "behind h"
    for x in (s, ref):
        x.binding_failed(sorted(x.queue.entry("p").assigned)[0], now=4)
    got = s.step(now=5)
    assert got.pending == ref.step(now=5).pending
    assert got.pending["p"].code is ReasonCode.BACKOFF
    assert got.stats.backoff_jobs == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    state=clusters(max_nodes=5),
    quotas=st.booleans(),
    preempt=st.booleans(),
    ops=st.lists(_op, min_size=10, max_size=60),
    specs=st.lists(_jobs, min_size=60, max_size=60),
)
def test_a_closed_gate_decides_as_the_walk_of_every_job(
    state: ClusterState,
    quotas: bool,
    preempt: bool,
    ops: list[tuple[str, int]],
    specs: list[tuple[int, int, bool, str, int]],
) -> None:
    pair = _Pair(state, "strict-fifo", quotas, preempt)
    pair.ref.policy = _WalkedFIFO()  # the reference asks the gate of every job
    pair.same_walk = False  # (it may answer a job that must borrow after the others)
    play(pair, ops, specs)
    assert pair.inc.queue.statuses() == pair.ref.queue.statuses()
    check_invariants(pair.inc)


_tail_op = ops_of("submit", "cycle", "cycle", "bind_fail", "finish", "cancel")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(_tail_op, min_size=20, max_size=70),
    specs=st.lists(_jobs, min_size=70, max_size=70),
)
def test_the_answers_kept_behind_a_closed_gate_are_those_derived_again(
    ops: list[tuple[str, int]], specs: list[tuple[int, int, bool, str, int]]
) -> None:
    # a small cluster, so that the head blocks often, and binding failures, so that jobs
    # behind it wait out backoffs that end while they are still behind it
    state = ClusterBuilder().leaf("lf0", nodes=2, gpus=8).build()
    pair = _Pair(state, "strict-fifo", False, False)
    play(pair, ops, specs)
    assert pair.inc.queue.statuses() == pair.ref.queue.statuses()
