"""The queue: order, submit/cancel, lifecycle, requeue with backoff."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kant.errors import (
    DuplicateError,
    InvalidConfigError,
    InvalidJobError,
    InvalidTimeError,
    UnknownJobError,
)
from kant.model import ReadOnlyDict, Reason, ReasonCode
from kant.queueing import Backoff, FailureHistory, JobPhase, Queue, make_policy, policy_names
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import check_invariants, job

from .conftest import nodes, pod, scheduler


def test_order_is_priority_then_submit_time_then_smaller_first_then_sequence() -> None:
    q = Queue()
    q.submit(job("late", submitted_at=5))
    q.submit(job("big", gpus=8, submitted_at=1))
    q.submit(job("small", gpus=1, submitted_at=1))
    q.submit(job("urgent", priority=5, submitted_at=9))
    q.submit(job("small-twin", gpus=1, submitted_at=1))
    assert [e.id for e in q.candidates()] == ["urgent", "small", "small-twin", "big", "late"]


def test_larger_first_flips_only_the_size_tiebreak() -> None:
    q = Queue(order="larger-first")
    q.submit(job("small", gpus=1, submitted_at=1))
    q.submit(job("big", gpus=8, submitted_at=1))
    q.submit(job("early", gpus=1, submitted_at=0))
    assert [e.id for e in q.candidates()] == ["early", "big", "small"]


def test_an_order_key_whose_keys_cannot_be_compared_is_refused_at_submit_changing_nothing() -> None:
    def by_estimate(j, seq):  # None for a job without an estimate: not comparable with 60.0
        return (j.runtime_estimate, seq)

    q = Queue(order=by_estimate)
    q.submit(job("a", gpus=1, runtime=60), now=0)
    q.candidates()  # (the kept candidates list is built)
    with pytest.raises(InvalidConfigError, match="by_estimate") as err:
        q.submit(job("b", gpus=1), now=0)
    assert err.value.field == "order"
    with pytest.raises(UnknownJobError):
        q.status("b")
    check_invariants(q)
    q.submit(job("b", gpus=1, runtime=5), now=0)  # the same id, with a key that compares
    assert [e.id for e in q.candidates()] == ["b", "a"]
    check_invariants(q)


def test_an_order_key_giving_nan_or_an_array_is_refused_at_submit_not_when_placed() -> None:
    def per_pod(j, seq):  # a job without an estimate: NaN, which is neither before nor after
        rt = j.runtime_estimate if j.runtime_estimate is not None else float("nan")
        return (rt / j.num_pods, seq)

    s = Scheduler(nodes(1), queue=Queue(order=per_pod))
    s.submit(job("a", gpus=8, runtime=100), now=0)
    for first in (False, True):  # (the NaN job alone in the order, too)
        with pytest.raises(InvalidConfigError, match="per_pod") as err:
            s.submit(job("b", gpus=8), now=0)
        assert err.value.field == "order"
        with pytest.raises(UnknownJobError):
            s.status("b")
        check_invariants(s)
        if not first:
            s.cancel("a", 0)
    s.submit(job("c", gpus=8, runtime=60), now=0)
    assert [b.pod.job for b in s.step(now=1).bindings] == ["c"]  # (a ValueError was here)
    check_invariants(s)

    q = Queue(order=lambda j, seq: np.array([-j.priority, seq]))
    with pytest.raises(InvalidConfigError) as err:
        q.submit(job("x", gpus=1), now=0)  # (alone: its comparisons would raise later)
    assert err.value.field == "order"
    assert len(q) == 0


def test_each_tenant_has_its_own_queue_in_global_order() -> None:
    q = Queue()
    q.submit(job("a1", tenant="a", submitted_at=2))
    q.submit(job("b1", tenant="b", submitted_at=1))
    q.submit(job("a0", tenant="a", submitted_at=0))
    assert q.tenant_queue("a") == ["a0", "a1"]
    assert q.tenant_queue("b") == ["b1"]
    assert q.tenants() == ["a", "b"]


def test_duplicate_submit_is_rejected_and_changes_nothing() -> None:
    q = Queue()
    q.submit(job("a", gpus=2))
    before = q.statuses()
    with pytest.raises(DuplicateError):
        q.submit(job("a", gpus=4))
    assert q.statuses() == before
    with pytest.raises(InvalidJobError):
        q.submit("not a job")  # type: ignore[arg-type]
    assert q.statuses() == before
    check_invariants(q)


def test_cancel_a_pending_job_finishes_it_as_cancelled() -> None:
    q = Queue()
    q.submit(job("a"))
    assert q.cancel("a") == ()
    st = q.status("a")
    assert st.phase is JobPhase.FINISHED and st.cancelled
    assert q.candidates() == []
    assert q.cancel("a") == ()  # idempotent
    with pytest.raises(UnknownJobError):
        q.cancel("nope")


def test_cancel_a_running_job_releases_and_evicts_its_pods() -> None:
    s = scheduler(nodes(1))
    s.submit(job("a", gpus=2, replicas=2), now=0)
    s.step(now=1)
    rep = s.cancel("a", now=2)
    assert sorted(e.pod for e in rep.evictions) == [pod("a", 0), pod("a", 1)]
    assert s.cluster.num_pods == 0 and s.admitter.usage() == {}
    assert s.queue.status("a").phase is JobPhase.FINISHED
    check_invariants(s)


def test_backoff_grows_exponentially_up_to_its_cap() -> None:
    b = Backoff(base=10, factor=2, cap=60, max_retries=9)
    assert [b.delay(k) for k in range(1, 6)] == [10, 20, 40, 60, 60]
    assert not b.exhausted(9) and b.exhausted(10)
    with pytest.raises(InvalidConfigError):
        Backoff(factor=0.5)
    with pytest.raises(InvalidConfigError):
        Backoff(max_retries=-1)


def test_a_huge_backoff_factor_reaches_the_cap_instead_of_overflowing() -> None:
    b = Backoff(base=10, factor=1e300, cap=600, max_retries=99)
    assert [b.delay(k) for k in (1, 2, 3, 70)] == [10, 600, 600, 600]
    assert Backoff(base=0, factor=1e300).delay(3) == 0
    assert Backoff(base=1, factor=10**200, cap=5).delay(9) == 5


def test_a_failed_binding_requeues_with_backoff_then_fails_past_the_retry_limit() -> None:
    s = scheduler(nodes(1), backoff=Backoff(base=10, factor=2, cap=100, max_retries=2))
    s.submit(job("a", gpus=1), now=0)
    now = 0.0
    delays = []
    for _ in range(3):
        r = s.step(now)
        assert r.placed == ("a",)
        rep = s.binding_failed(pod("a"), now, "image pull failed")
        st = s.queue.status("a")
        if st.phase is JobPhase.FAILED:
            break
        assert rep.requeued == ("a",)
        assert st.reason is not None and st.reason.code is ReasonCode.BACKOFF
        delays.append(st.backoff_until - now)
        # while backing off, the job waits (and says so) without blocking anyone
        r = s.step(now + 1)
        assert r.placed == () and r.pending["a"].code is ReasonCode.BACKOFF
        now = st.backoff_until
    assert delays == [10, 20]
    st = s.queue.status("a")
    assert st.phase is JobPhase.FAILED and st.attempts == 3
    assert st.reason is not None and st.reason.code is ReasonCode.FAILED
    assert "image pull failed" in st.reason.message
    assert s.cluster.num_pods == 0
    assert s.step(now + 1000).placed == ()  # never scheduled again
    check_invariants(s)


def test_a_job_submitted_with_an_earlier_jobs_history_carries_on_its_failures() -> None:
    # an orchestrator drops job a#1 after its binding failed and submits its pods as a#2
    s = scheduler(nodes(1), backoff=Backoff(base=10, factor=2, cap=100, max_retries=2))
    s.submit(job("a#1", gpus=1), now=0)
    assert s.step(0).placed == ("a#1",)
    s.binding_failed(pod("a#1"), 0, "webhook said no")
    old = s.queue.status("a#1")  # (before the cancel, which clears its reason)
    s.cancel("a#1", 1)
    s.submit(job("a#2", gpus=1), now=2, history=old)
    st = s.queue.status("a#2")
    assert (st.attempts, st.backoff_until) == (1, 10)
    r = s.step(5)  # the rest of a#1's backoff, with its reason
    assert r.placed == () and r.pending["a#2"].code is ReasonCode.BACKOFF
    assert "webhook said no" in r.pending["a#2"].message
    assert s.step(10).placed == ("a#2",)
    s.binding_failed(pod("a#2"), 10, "webhook said no")
    assert s.queue.status("a#2").backoff_until == 30  # its second failure: 20 s
    assert s.step(30).placed == ("a#2",)
    s.binding_failed(pod("a#2"), 30, "webhook said no")
    failed = s.queue.status("a#2")
    assert failed.phase is JobPhase.FAILED and failed.attempts == 3
    # a FAILED job has no retry left to carry on, and history must be a status
    for bad in (failed, "a#2"):
        with pytest.raises(InvalidJobError):
            s.submit(job("a#3", gpus=1), now=31, history=bad)  # type: ignore[arg-type]
    assert s.queue.get("a#3") is None
    check_invariants(s)


def test_a_failure_history_kept_outside_kant_carries_on_as_a_status_would() -> None:
    # an orchestrator that kept only the numbers (across its restart) submits a#2 with them
    s = scheduler(nodes(1), backoff=Backoff(base=10, factor=2, cap=100, max_retries=2))
    said = Reason(code=ReasonCode.BACKOFF, message="failure 1 (webhook said no); retry at 10")
    h = FailureHistory(attempts=1, backoff_until=10, reason=said)
    s.submit(job("a#2", gpus=1), now=2, history=h)
    st = s.queue.status("a#2")
    assert (st.attempts, st.backoff_until, st.interruptions) == (1, 10.0, 0)
    r = s.step(5)
    assert r.placed == () and r.pending["a#2"] is said
    assert s.step(10).placed == ("a#2",)
    s.binding_failed(pod("a#2"), 10, "webhook said no")
    assert s.queue.status("a#2").backoff_until == 30  # its second failure: 20 s
    # what a status says is the same history
    assert FailureHistory.of(s.queue.status("a#2")).attempts == 2
    # no retry left: failed, or past the limit under this queue
    for bad in (FailureHistory(failed=True), FailureHistory(attempts=3)):
        with pytest.raises(InvalidJobError, match="history"):
            s.submit(job("a#3", gpus=1), now=31, history=bad)
    assert s.queue.get("a#3") is None
    check_invariants(s)


@pytest.mark.parametrize(
    "bad",
    [
        {"attempts": -1},
        {"attempts": 1.5},
        {"attempts": True},
        {"interruptions": -2},
        {"backoff_until": math.nan},
        # +inf held the job back for ever ("retry at inf"); 10**400 raised OverflowError
        {"backoff_until": math.inf},
        {"backoff_until": 10**400},
        {"backoff_until": "10"},
        {"reason": "backoff"},
        {"failed": 1},
    ],
)
def test_a_failure_history_of_wrong_values_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidJobError):
        FailureHistory(**bad)  # type: ignore[arg-type]


def test_every_submitted_job_is_in_exactly_one_phase_and_none_is_dropped() -> None:
    s = scheduler(nodes(1))
    for i in range(6):
        s.submit(job(f"j{i}", gpus=4, submitted_at=i), now=i)
    s.step(now=10)
    s.pod_finished(pod("j0"), now=11)
    s.cancel("j5", now=11)
    counts = s.queue.counts()
    assert counts == {"pending": 3, "running": 1, "finished": 2, "failed": 0}
    assert sum(counts.values()) == len(s.queue) == 6


def test_policies_come_from_a_registry_by_name() -> None:
    assert policy_names() == [
        "backfill",
        "best-effort-fifo",
        "conservative-backfill",
        "easy-backfill",
        "strict-fifo",
    ]
    assert make_policy("backfill", threshold=60).threshold == 60  # type: ignore[attr-defined]
    assert Scheduler(ClusterState(), policy="strict-fifo").policy.name == "strict-fifo"
    from kant.errors import UnknownPolicyError

    with pytest.raises(UnknownPolicyError):
        make_policy("lottery")
    from kant.queueing import register_policy

    with pytest.raises(DuplicateError):
        register_policy("backfill", lambda: make_policy("backfill"))


def test_a_policy_option_it_does_not_take_or_a_name_that_is_no_string_is_refused_naming_it() -> (
    None
):
    # (a misspelt option was a bare TypeError, a name of None an AttributeError)
    from kant.errors import UnknownPolicyError
    from kant.placement import make_strategy

    with pytest.raises(InvalidConfigError, match=r"'treshold'.*takes: threshold"):
        make_policy("backfill", treshold=600)
    with pytest.raises(InvalidConfigError, match="'threshold'"):
        make_policy("strict-fifo", threshold=1)
    with pytest.raises(InvalidConfigError, match="'tie'"):
        make_strategy("binpack", tie="first")
    with pytest.raises(UnknownPolicyError):
        make_policy(None)  # type: ignore[arg-type]
    assert make_policy("backfill", threshold=60).threshold == 60  # type: ignore[attr-defined]


def test_the_change_log_names_each_job_changed_since_a_tick_once_most_recent_first() -> None:
    q = Queue(history=1)
    q.submit(job("a"))
    q.submit(job("b"))
    t0 = q.tick
    assert q.changed_since(t0) == []
    a0 = pod("a")
    q.mark_assigned("a", [a0], now=1.0)
    q.mark_assigned("b", [pod("b")], now=1.0)
    q.mark_terminating([a0], "b")
    assert q.changed_since(t0) == ["a", "b"]
    assert [e.id for e in q.terminating()] == ["a"]
    t1 = q.tick
    q.forget_pods("a", [a0], now=2.0, finished=True)  # a finishes: its victim pod is gone
    assert q.changed_since(t1) == ["a"] and q.terminating() == []
    check_invariants(q)
    # a second job ending pushes "a" out of the bounded history: a reader that last looked
    # before "a" changed can no longer be told everything (None: look at every entry)
    t2 = q.tick
    q.forget_pods("b", [pod("b")], now=3.0, finished=True)
    assert "a" not in q
    assert q.changed_since(t1) is None
    assert q.changed_since(t2) == ["b"]
    check_invariants(q)


def test_a_victim_pod_keeps_its_first_mark_and_a_time_once_told() -> None:
    # (start-time estimates play its eviction a grace period after the time; a record half
    # of one mark and half of another, or a time never filled in, would mislead them)
    q = Queue()
    q.submit(job("a", replicas=2, gang=False))
    a0, a1 = pod("a"), pod("a", 1)
    q.mark_assigned("a", [a0, a1], now=1.0)
    q.mark_terminating([a0], "p", 5.0)
    q.mark_terminating([a0], "r", 9.0)
    q.mark_terminating([a1], "p")
    q.mark_terminating([a1], "r", 7.0)
    assert q.entry("a").terminating == {a0: ("p", 5.0), a1: ("p", 7.0)}
    with pytest.raises(InvalidTimeError):
        q.mark_terminating([a0], "p", math.nan)
    assert q.entry("a").terminating == {a0: ("p", 5.0), a1: ("p", 7.0)}


def test_a_failure_counted_with_a_backoff_is_a_change_of_the_job() -> None:
    # (what a closed gate answered the job behind it, kept across cycles, depends on it)
    q = Queue()
    q.submit(job("a"))
    t0 = q.tick
    assert q.count_failure(q.entry("a"), 5.0, "boom")
    assert q.entry("a").backoff_until > 5.0
    assert q.changed_since(t0) == ["a"]


def test_a_job_s_remaining_pods_are_its_pod_ids_made_once_and_follow_placements() -> None:
    q = Queue()
    q.submit(job("g", replicas=4, gang=False))
    e = q.entry("g")
    p0, p1, p2, p3 = e.remaining()
    assert e.pods() == (p0, p1, p2, p3) and e.pods() is e.pods()
    q.mark_assigned("g", [p1, p2], now=1.0)
    assert e.remaining() == (p0, p3) and e.remaining()[0] is p0  # the same ids, filtered
    q.forget_pods("g", [p1], now=2.0, finished=True)
    q.forget_pods("g", [p2], now=2.0, finished=False)  # lost: to place again, in pod order
    assert e.remaining() == (p0, p2, p3)
    q.mark_assigned("g", [p0, p2, p3], now=3.0)
    q.forget_pods("g", [p0, p2, p3], now=4.0, finished=True)
    assert e.phase is JobPhase.FINISHED and e.remaining() == ()
    check_invariants(q)


class _CountedReasons(ReadOnlyDict):
    """A read-only dict that counts the passes over it (``items()``)."""

    passes = 0

    def items(self):  # type: ignore[no-untyped-def]
        self.passes += 1
        return super().items()


def test_the_same_read_only_reasons_applied_again_with_nothing_changed_are_not_walked() -> None:
    """set_reasons walks a read-only mapping it already applied only if something could have
    changed since: an entry (a submission), a reason set by hand, a plain dict, ``current``."""
    q = Queue()
    q.submit(job("a", gpus=1), now=0)
    seen = ReadOnlyDict({"a": (q.entry("a").seq, q.entry("a").version)})
    why = Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message="full")
    reasons = counted = _CountedReasons(a=why)
    q.set_reasons(reasons, seen)
    q.set_reasons(reasons, seen)
    assert counted.passes == 1 and q.entry("a").reason is why
    q.set_reason("a", None)  # by hand: the next pass puts the reason back
    q.set_reasons(reasons, seen)
    assert counted.passes == 2 and q.entry("a").reason is why
    q.submit(job("b", gpus=1), now=1)  # an entry changed
    q.set_reasons(reasons, seen)
    q.set_reasons(reasons, seen, current={"a"})
    q.set_reasons(reasons, seen, current={"a"})
    assert counted.passes == 5
    plain = dict(reasons)  # a dict may have changed since: always walked
    q.set_reasons(plain, seen)
    plain["a"] = other = Reason(code=ReasonCode.NO_FIT, message="no node")
    q.set_reasons(plain, seen)
    assert q.entry("a").reason is other


def test_set_reasons_gives_a_reason_only_to_a_live_job_still_as_the_cycle_saw_it() -> None:
    """Of a cycle's reasons, set_reasons keeps those of jobs it does not know, that ended or
    that changed since the cycle (unless named current) out, and leaves a reason that is
    already the very one given as it is."""
    q = Queue()
    for jid in ("waits", "changed", "current", "done", "same"):
        q.submit(job(jid, gpus=1, replicas=2, gang=False), now=0)
    seen = {jid: (q.entry(jid).seq, q.entry(jid).version) for jid in q.jobs()}
    q.mark_assigned("done", [pod("done", 0), pod("done", 1)], now=1)
    q.forget_pods("done", [pod("done", 0), pod("done", 1)], now=2, finished=True)
    q.mark_assigned("changed", [pod("changed")], now=1)  # one of its pods bound since
    q.mark_assigned("current", [pod("current")], now=1)
    same = Reason(code=ReasonCode.NO_FIT, message="kept")
    q.set_reason("same", same)
    why = {jid: Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message=jid) for jid in seen}
    why["same"] = same
    why["gone"] = Reason(code=ReasonCode.NO_FIT, message="unknown job")
    q.set_reasons(why, seen, current={"current"})
    assert q.entry("waits").reason is why["waits"]
    assert q.entry("current").reason is why["current"]
    assert q.entry("changed").reason is None
    assert q.entry("done").reason is None and q.entry("done").phase is JobPhase.FINISHED
    assert q.entry("same").reason is same
    assert q.get("gone") is None
    check_invariants(q)


def test_a_queue_asked_about_what_cannot_be_a_job_id_or_tenant_says_so_with_a_typed_error() -> None:
    q = Queue()
    q.submit(job("a"), now=0)
    before = q.statuses()
    for ask in (
        lambda: q.get([1]),  # type: ignore[arg-type]
        lambda: [1] in q,
        lambda: q.set_reason([1], None),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidJobError, match="field 'job_id' = \\[1\\]"):
            ask()
    with pytest.raises(InvalidJobError, match="field 'tenant'"):
        q.tenant_queue([1])  # type: ignore[arg-type]
    with pytest.raises(UnknownJobError):
        q.entry([1])  # type: ignore[arg-type]
    assert q.get("a") is not None and "a" in q and q.get("b") is None and "b" not in q
    assert q.statuses() == before
    check_invariants(q)


def test_a_queue_look_up_given_what_cannot_be_its_argument_raises_a_typed_error() -> None:
    # is_terminating("a") raised AttributeError and changed_since("x") TypeError
    from kant.errors import UnknownPodError, ValidationError

    q = Queue()
    q.submit(job("a"), 0)
    with pytest.raises(UnknownPodError):
        q.is_terminating("a")  # type: ignore[arg-type]
    for tick in ("x", None, 1.5, True):
        with pytest.raises(ValidationError, match="'tick'"):
            q.changed_since(tick)  # type: ignore[arg-type]
    assert q.changed_since(q.tick) == []
