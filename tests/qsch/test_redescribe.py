"""A pending job described again (``Scheduler.redescribe``): what it asks changes, its pods do
not; it keeps its place in the order, its wait, its failures and its nomination, and the next
cycle places it as it asks now. Refused, changing nothing, for a job that is unknown, not
pending, or whose pods differ."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant import JobPhase, Scheduler
from kant.errors import InvalidConfigError, InvalidJobError, UnknownJobError
from kant.model import NodeRequirement, PodAffinityTerm
from kant.queueing import FailureHistory, Nomination, Queue
from kant.testing import ClusterBuilder, check_invariants, job

_DB = PodAffinityTerm(selector=(NodeRequirement(key="app", operator="In", values=("db",)),))


def _one_node(policy: str = "strict-fifo") -> Scheduler:
    return Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build(), policy=policy)


def test_a_pending_job_described_again_keeps_its_place_among_ties_its_wait_and_its_failures() -> (
    None
):
    s = _one_node()
    s.submit(job("big", gpus=8), now=0)
    s.step(now=1)
    history = FailureHistory(attempts=1, backoff_until=2)
    s.submit(job("a", gpus=8, submitted_at=5), now=5, history=history)
    s.submit(job("b", gpus=8, submitted_at=5), now=5)  # (tied with a: a is first by sequence)
    before = s.queue.entry("a")
    seq, since = before.seq, before.pending_since
    s.redescribe(job("a", gpus=8, labels={"team": "x"}))  # (submitted_at left 0: kept)
    e = s.queue.entry("a")
    assert (e.seq, e.pending_since, e.attempts, e.backoff_until) == (seq, since, 1, 2)
    assert e.job.roles[0].labels == {"team": "x"} and e.job.submitted_at == 5
    assert [c.id for c in s.queue.candidates()] == ["a", "b"]
    check_invariants(s)
    s.cancel("big", now=10)
    r = s.step(now=11)
    assert [b.pod.job for b in r.bindings] == ["a"]


def test_the_next_cycle_places_a_job_described_again_as_it_asks_now() -> None:
    s = _one_node()
    s.submit(job("db", gpus=1, labels={"app": "db"}), now=0)
    s.step(now=1)
    s.submit(job("w", gpus=1, anti_affinity=[_DB]), now=2)
    assert not s.step(now=3).bindings  # (its anti-affinity keeps it off the db's node)
    s.redescribe(job("w", gpus=1, submitted_at=2))
    assert [b.pod.job for b in s.step(now=4).bindings] == ["w"]
    # and the other way: a job that may go there now may no longer
    s.submit(job("v", gpus=1), now=5)
    s.redescribe(job("v", gpus=1, submitted_at=5, anti_affinity=[_DB]))
    assert not s.step(now=6).bindings
    assert s.status("v").phase is JobPhase.PENDING


def test_a_preemptor_described_again_keeps_its_nomination() -> None:
    s = _one_node()
    s.submit(job("p", gpus=8), now=0)
    nom = Nomination(job="p", bindings=(), victims=(), created_at=0)
    s.queue.set_nomination(nom, "p")
    s.redescribe(job("p", gpus=8, labels={"team": "x"}))
    assert s.queue.entry("p").nomination is nom
    assert [e.id for e in s.queue.nominated()] == ["p"]
    check_invariants(s)


def test_a_job_described_again_is_refused_changing_nothing_when_unknown_not_pending_or_of_other_pods() -> (
    None
):
    s = _one_node()
    s.submit(job("run", gpus=1), now=0)
    s.step(now=1)
    s.submit(job("wait", gpus=2, replicas=2), now=2)
    before = s.queue.statuses()
    tick = s.queue.tick
    with pytest.raises(UnknownJobError):
        s.redescribe(job("never", gpus=1))
    with pytest.raises(InvalidJobError) as err:
        s.redescribe(job("run", gpus=1, labels={"x": "y"}))
    assert err.value.field == "phase"
    with pytest.raises(InvalidJobError) as err:
        s.redescribe(job("wait", gpus=2, replicas=3))  # (one pod more)
    assert err.value.field == "pods"
    with pytest.raises(InvalidJobError) as err:
        s.redescribe(job("wait", gpus=2, replicas=2, role="other"))  # (other pod ids)
    assert err.value.field == "pods"
    with pytest.raises(InvalidJobError) as err:
        s.redescribe("wait")  # type: ignore[arg-type]
    assert err.value.field == "job"
    assert s.queue.statuses() == before and s.queue.tick == tick
    check_invariants(s)


def test_an_order_key_that_cannot_compare_the_new_description_changes_nothing() -> None:
    q = Queue(order=lambda j, seq: (j.runtime_estimate, seq))
    q.submit(job("a", gpus=1, runtime=60), now=0)
    q.submit(job("b", gpus=1, runtime=30), now=0)
    q.candidates()
    before, tick, version = q.statuses(), q.tick, q.entry("a").version
    with pytest.raises(InvalidConfigError) as err:
        q.redescribe(job("a", gpus=1))  # (no estimate: None does not compare with 30.0)
    assert err.value.field == "order"
    assert q.entry("a").job.runtime_estimate == 60
    # nothing changed: not its job's tick nor the change log a quiet cycle reads
    assert q.statuses() == before and q.entry("a").version == version
    assert q.tick == tick and q.changed_since(tick) == []
    assert [e.id for e in q.candidates()] == ["b", "a"]
    check_invariants(q)


def _evict(q: Queue, jid: str, now: float) -> None:
    """Job ``jid`` runs, then is evicted by preemption at ``now`` and waits again."""
    q.mark_assigned(jid, q.entry(jid).pods(), now=now)
    q.mark_preempted(jid, now=now)
    q.requeue(jid, now=now, failed=False)


def test_a_job_requeued_as_of_its_eviction_keeps_that_place_when_described_again() -> None:
    q = Queue(requeue_timestamp="eviction")
    q.submit(job("v", gpus=1, submitted_at=1), now=1)
    q.submit(job("w", gpus=1, submitted_at=50), now=50)
    _evict(q, "v", now=100)  # (v goes back as if submitted at 100: after w)
    assert [e.id for e in q.candidates()] == ["w", "v"]
    q.redescribe(attrs.evolve(q.entry("v").job, roles=(
        attrs.evolve(q.entry("v").job.roles[0], pod_anti_affinity=(_DB,)),)))  # fmt: skip
    assert [e.id for e in q.candidates()] == ["w", "v"]
    assert q.entry("v").job.submitted_at == 1  # (its own submit time is kept, as shown)
    check_invariants(q)
    # and a later eviction moves it again, from its new description
    q.submit(job("x", gpus=1, submitted_at=150), now=150)
    _evict(q, "v", now=200)
    assert [e.id for e in q.candidates()] == ["w", "x", "v"]
    check_invariants(q)


@settings(max_examples=100, deadline=None)
@given(
    prios=st.lists(st.integers(0, 2), min_size=1, max_size=5),
    changes=st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 2), st.sampled_from([None, 3.0, 4.0])),
        max_size=8,
    ),
    requeue_timestamp=st.sampled_from(["submission", "eviction"]),
)
def test_a_job_described_again_stands_where_it_would_had_it_been_submitted_so(
    prios: list[int], changes: list[tuple[int, int, float | None]], requeue_timestamp: str
) -> None:
    """Descriptions changed (priority, estimate) and evictions (at 3 or 4, later than every submit),
    in any order: the order is the one of a queue given the final descriptions and the last
    eviction of each job."""
    q = Queue(requeue_timestamp=requeue_timestamp)
    for i, p in enumerate(prios):
        q.submit(job(f"j{i}", gpus=1 + i % 3, priority=p, submitted_at=i % 2 + 1))
    q.candidates()  # (the kept candidates list follows every change)
    final = {e.id: e.job for e in q.entries()}
    evicted: dict[str, float] = {}
    for step, (i, p, evict_at) in enumerate(changes):
        jid = f"j{i % len(prios)}"
        if evict_at is not None:
            _evict(q, jid, evict_at)
            evicted[jid] = evict_at
        else:  # (an estimate the order does not read: described again, if at the same place)
            final[jid] = attrs.evolve(final[jid], priority=p, runtime_estimate=step + 1.0)
            q.redescribe(final[jid])
        check_invariants(q)
    fresh = Queue(requeue_timestamp=requeue_timestamp)
    for jid in sorted(final, key=lambda j: int(j[1:])):
        fresh.submit(final[jid])
    for jid, t in evicted.items():
        _evict(fresh, jid, t)
    assert [e.id for e in q.candidates()] == [e.id for e in fresh.candidates()]
    assert [e.seq for e in q.entries()] == [e.seq for e in fresh.entries()]
