"""The victim index kept across cycles (:class:`kant.preemption.candidates.VictimIndex` with
``keep=True``) lists the same records in the same order, with the same columns, as one
derived from scratch, whatever happened in between: jobs started, finished, evicted,
preempted, forgotten and submitted again under the same id, released by a bounded history,
time going forward or back, the minimum runtime changing, cycles skipped."""

from __future__ import annotations

from unittest.mock import patch

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from kant.admission import Pools
from kant.model import PodId
from kant.preemption.candidates import VictimIndex, _Labels
from kant.queueing import JobPhase, Queue
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, job

_steps = st.lists(
    st.tuples(
        st.sampled_from(["submit", "cycle", "finish", "evict", "terminate", "forget", "look"]),
        st.integers(0, 10**6),
    ),
    min_size=5,
    max_size=40,
)


def _index(s: Scheduler, now: float, min_runtime: float, keep: bool) -> VictimIndex:
    snap = s.cluster.snapshot()
    pools = Pools(snap)
    return VictimIndex(
        s.queue, s.cluster, snap, pools.names, now=now, min_runtime=min_runtime, keep=keep
    )


def _same(s: Scheduler, now: float, min_runtime: float) -> None:
    kept, fresh = _index(s, now, min_runtime, True), _index(s, now, min_runtime, False)
    a, b = kept.refs(), fresh.refs()
    assert [(r.order, r.pods, r.held, r.usage, r.slots) for r in a] == [
        (r.order, r.pods, r.held, r.usage, r.slots) for r in b
    ]
    assert kept.tenants == fresh.tenants
    ca, cb = kept.columns(), fresh.columns()
    for name in ("tenant", "started_at", "held", "seq"):
        assert np.array_equal(getattr(ca, name), getattr(cb, name)), name
    keys = [*sorted({r.key for r in b}), (-1,), (10**9,)]
    for k in keys:
        assert np.array_equal(ca.after_key(k), cb.after_key(k)), k
    for prio in (-1, 0, 1, 2, 3):
        assert ca.lower_than(prio) == cb.lower_than(prio)
        assert ca.at_most(prio) == cb.at_most(prio)
    pods = {p for r in b[::3] for p in r.pods}
    assert set(ca.of_pods(pods)) == set(cb.of_pods(pods))  # (duplicates: one per pod)
    fa, fb = ca.flat(), cb.flat()
    assert np.array_equal(fa.ptr, fb.ptr)
    assert np.array_equal(fa.slot, fb.slot) and np.array_equal(fa.n, fb.n)
    assert np.array_equal(fa.milli, fb.milli)
    assert [fa.models[m] for m in fa.model.tolist()] == [fb.models[m] for m in fb.model.tolist()]


@settings(max_examples=60, deadline=None)
@given(steps=_steps)
def test_the_kept_victim_index_lists_what_one_derived_from_scratch_lists(
    steps: list[tuple[str, int]],
) -> None:
    history = [None, 1, 3][steps[0][1] % 3]
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=3, gpus=4).build(), queue=Queue(history=history)
    )
    # little room between key labels now and then: they run out within a batch
    with patch.object(_Labels, "GAP", 1 if steps[0][1] % 2 else _Labels.GAP):
        _play(s, steps)


def _play(s: Scheduler, steps: list[tuple[str, int]]) -> None:
    now = 0.0
    for n, (op, r) in enumerate(steps):
        now += r % 5
        running = sorted(p for e in s.queue.running() for p in e.assigned)
        ended = [e.id for e in s.queue.entries() if e.phase is JobPhase.FINISHED]
        if op == "submit":
            s.submit(
                job(f"j{n % 7}" if f"j{n % 7}" not in s.queue else f"j{n}",
                    gpus=1 + r % 2, replicas=1 + r % 3, gang=bool(r % 2),
                    tenant="ab"[r % 2], priority=r % 3, preemptible=r % 7 != 0),
                now=now,
            )  # fmt: skip
        elif op == "forget" and ended:
            s.queue.forget(ended[r % len(ended)])
        elif op == "cycle":
            s.apply(s.schedule(now), now)
        elif op == "finish" and running:
            s.pod_finished(running[r % len(running)], now)
        elif op == "evict" and running:
            s.pod_evicted(running[r % len(running)], now)
        elif op == "terminate" and running:
            s.queue.mark_terminating([running[r % len(running)]], "someone")
        # the minimum runtime changes now and then; time goes back now and then; some
        # changes are seen by no index until later
        if r % 4:
            _same(s, now - (r % 11 == 0) * 7.0, float(r % 3) * 2.0)


def test_a_job_started_a_moment_ago_joins_the_kept_index_once_past_the_minimum_runtime() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2, gpus=4).build())
    s.submit(job("old", gpus=4), now=0.0)
    s.apply(s.schedule(0.0), 0.0)
    s.submit(job("new", gpus=4), now=50.0)
    s.apply(s.schedule(50.0), 50.0)
    seen = [[r.job for r in _index(s, t, 60.0, True).refs()] for t in (60.0, 100.0, 120.0, 30.0)]
    assert seen == [["old"], ["old"], ["new", "old"], []]  # most recently started first
    _same(s, 120.0, 60.0)
    assert PodId(job="new", role="worker", index=0) in s.queue.entry("new").assigned


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=200))
def test_kept_key_labels_follow_the_keys_order_through_any_inserts_and_removals(
    ops: list[tuple[bool, int]],
) -> None:
    labels = _Labels()
    labels.GAP = 4  # little room: relabelling happens
    held: dict[int, int] = {}
    for add, k in ops:
        if add or not held.get(k):
            labels.add((k,))
            held[k] = held.get(k, 0) + 1
        else:
            labels.discard((k,))
            held[k] -= 1
        if labels.stale and k % 3 == 0:  # a batch of additions ends now and then
            labels.relabel()
        if labels.stale:
            continue
        live = sorted(k for k, c in held.items() if c)
        got = [labels.label[(k,)] for k in live]
        assert got == sorted(got) and len(set(got)) == len(got)
        for probe in range(-1, 32):
            thr = labels.greater((probe,))
            want = [k > probe for k in live]
            assert [thr is None or lab > thr for lab in got] == want


def test_a_job_started_between_two_running_ones_in_queue_order_gets_its_label_in_the_batch() -> (
    None
):
    """With no room between two kept labels, a job started between them in queue order makes
    the labels stale; the batch ends with every key labelled again, in order."""
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=3, gpus=4).build())
    with patch.object(_Labels, "GAP", 1):
        s.submit(job("a", gpus=2), now=0.0)
        s.submit(job("c", gpus=2), now=2.0)
        s.apply(s.schedule(2.0), 2.0)
        _same(s, 2.0, 0.0)
        s.submit(job("b", gpus=2, submitted_at=1.0), now=3.0)  # between "a" and "c" in order
        s.apply(s.schedule(3.0), 3.0)
        kept = _index(s, 3.0, 0.0, True)
        kept.refs()
        assert kept._kept is not None and kept._kept.labels.relabelled == 1
        assert [e.id for e in s.queue.running()] == ["a", "c", "b"]
        _same(s, 3.0, 0.0)
