"""Binding and releasing many pods in one call does what binding and releasing them one by
one does, all or nothing."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from kant.errors import (
    AllocationConflictError,
    DuplicateError,
    InvalidJobError,
    InvalidTimeError,
    UnknownPodError,
    ValidationError,
)
from kant.model import Binding, PodId
from kant.placement import Placer
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import check_invariants
from kant.testing.builders import job, node
from kant.testing.strategies import clusters, jobs


def _twin(state: ClusterState) -> ClusterState:
    """A second state with the same nodes and health (no pods)."""
    other = ClusterState(state.nodes())
    for spec in state.nodes():
        other.set_node_health(spec.name, state.is_healthy(spec.name))
        ok = state.gpu_healthy_mask(spec.name)
        for g in range(spec.gpus):
            other.set_gpu_health(spec.name, g, bool(ok >> g & 1))
    return other


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=clusters(pod_caps=True), data=st.data())
def test_bulk_bind_and_release_match_one_by_one(state: ClusterState, data: st.DataObject) -> None:
    bulk = _twin(state)
    placer = Placer("binpack")
    placed: list[list[Binding]] = []
    for i in range(data.draw(st.integers(1, 6))):
        res = placer.place(data.draw(jobs(i)), state.snapshot())
        for b in res.bindings:
            state.bind(b)
        bulk.bind_many(res.bindings)
        placed.append(list(res.bindings))
    assert bulk.columns.rows_equal(state.columns, state.num_slots) == []
    snap_one, snap_bulk = state.snapshot(), bulk.snapshot()
    freed = [b for bs in placed for b in bs][::2]
    with snap_one.transaction(), snap_bulk.transaction():
        for b in freed:
            snap_one.release_binding(b)
        snap_bulk.release_bindings(freed)
        assert snap_one.same_as(snap_bulk) == []
        check_invariants(snap_bulk)
    for bs in placed[::2]:
        for b in bs:
            state.release(b.pod)
        assert bulk.release_many([b.pod for b in bs]) == tuple(bs)
    assert bulk.columns.rows_equal(state.columns, state.num_slots) == []
    assert sorted(bulk.bindings_view()) == sorted(state.bindings_view())
    check_invariants(bulk)
    assert bulk.snapshot().same_as(bulk.full_snapshot()) == []


def test_a_bulk_bind_that_does_not_fit_changes_nothing() -> None:
    state = ClusterState([node("n0", gpus=2), node("n1", gpus=2)])
    ok = Binding(pod=PodId(job="a", role="w", index=0), node="n1", gpus=(0,))
    clash = [
        ok,
        Binding(pod=PodId(job="a", role="w", index=1), node="n0", gpus=(0, 1)),
        Binding(pod=PodId(job="a", role="w", index=2), node="n0", gpus=(1,)),
    ]
    before = state.snapshot().cols.row(0)[0]
    with pytest.raises(AllocationConflictError, match="GPU 1 has 0 milli free"):
        state.bind_many(clash)
    with pytest.raises(DuplicateError):
        state.bind_many([ok, ok])
    assert state.num_pods == 0 and state.snapshot().cols.row(0)[0] == before
    check_invariants(state)
    state.bind_many([ok])
    other = Binding(pod=PodId(job="b", role="w", index=0), node="n0", gpus=(0,))
    with pytest.raises(DuplicateError, match="already bound to 'n1'"):
        state.bind_many([other, ok])
    with pytest.raises(AllocationConflictError, match="not a Binding"):
        state.bind_many([other, "b/w/0"])  # type: ignore[list-item]
    assert not state.has_pod(other.pod)
    with pytest.raises(UnknownPodError):
        state.release_many([ok.pod, PodId(job="b", role="w", index=0)])
    with pytest.raises(UnknownPodError):
        state.release_many([ok.pod, ok.pod])
    assert state.has_pod(ok.pod)
    check_invariants(state)


def test_binding_and_releasing_many_take_any_iterable_and_refuse_what_is_not_one() -> None:
    state = ClusterState([node("n0", gpus=4)])
    bs = [Binding(pod=PodId(job="a", role="w", index=i), node="n0", gpus=(i,)) for i in range(3)]
    state.bind_many(b for b in bs)  # a generator is read once
    assert state.num_pods == 3
    for bad in (None, 5, "a/w/0"):
        with pytest.raises(ValidationError, match="'bindings'"):
            state.bind_many(bad)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="'pods'"):
            state.release_many(bad)  # type: ignore[arg-type]
    ghost = PodId(job="ghost", role="w", index=0)
    with pytest.raises(UnknownPodError, match="ghost"):  # (the pods after it were released)
        state.release_many(p for p in [bs[0].pod, ghost, bs[1].pod])
    assert state.num_pods == 3
    assert state.release_many(b.pod for b in bs[:2]) == tuple(bs[:2])
    check_invariants(state)


def _scheduler() -> Scheduler:
    s = Scheduler(
        ClusterState([node(f"n{i}", gpus=8) for i in range(3)]), placer=Placer("firstfit")
    )
    s.submit(job("big", replicas=12), 0.0)
    s.submit(job("small", replicas=3, gang=False), 0.0)
    s.apply(s.schedule(0.0), 0.0)
    return s


def test_finishing_pods_in_one_call_is_finishing_them_one_by_one() -> None:
    one, bulk = _scheduler(), _scheduler()
    pods = [*sorted(one.queue.entry("big").assigned), PodId(job="small", role="worker", index=0)]
    reports = [one.pod_finished(p, 5.0) for p in pods]
    rep = bulk.pods_finished(pods, 5.0)
    assert rep.released == tuple(pods) and rep.finished == ("big",)
    assert [r.finished for r in reports if r.finished] == [("big",)]
    for jid in ("big", "small"):
        assert bulk.status(jid) == one.status(jid)
    assert list(bulk.cluster.bindings()) == list(one.cluster.bindings())
    assert bulk.cluster.columns.rows_equal(one.cluster.columns, 3) == []
    check_invariants(bulk.cluster)
    with pytest.raises(UnknownPodError):  # finished already: nothing changes
        bulk.pods_finished([PodId(job="small", role="worker", index=1), pods[0]], 6.0)
    assert bulk.cluster.has_pod(PodId(job="small", role="worker", index=1))


def test_finishing_every_pod_of_one_gang_at_once_is_finishing_them_one_by_one() -> None:
    one, bulk = _scheduler(), _scheduler()
    pods = sorted(one.queue.entry("big").assigned, reverse=True)  # any order
    reports = [one.pod_finished(p, 5.0) for p in pods]
    rep = bulk.pods_finished(pods, 5.0)
    assert rep.released == tuple(pods) and rep.finished == ("big",) == reports[-1].finished
    assert bulk.status("big") == one.status("big")
    assert list(bulk.cluster.bindings()) == list(one.cluster.bindings())
    assert bulk.cluster.columns.rows_equal(one.cluster.columns, 3) == []
    check_invariants(bulk.cluster)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ("before its binding", InvalidTimeError, "before it was bound"),
        ("not a number", InvalidTimeError, "must be a finite number"),
        ("a plain tuple", InvalidJobError, "must be a kant.model.PodId"),
        ("a pod twice", UnknownPodError, "big"),
        ("a pod missing", None, None),
    ],
)
def test_a_whole_gang_finished_with_something_wrong_is_refused_as_pod_by_pod(
    change: str, error: type[Exception] | None, message: str | None
) -> None:
    s = _scheduler()
    s.pod_finished(PodId(job="small", role="worker", index=0), 3.0)  # the clock is at 3
    pods = sorted(s.queue.entry("big").assigned)
    now: object = 5.0
    if change == "before its binding":
        s = _scheduler()
        now = -1.0
    elif change == "not a number":
        now = float("nan")
    elif change == "a plain tuple":
        pods = [tuple(pods[0]), *pods[1:]]  # type: ignore[list-item]
    elif change == "a pod twice":
        pods = [*pods[:-1], pods[0]]
    else:
        pods = pods[:-1]  # fine: the gang's other pods finish, one stays
    before = sorted(s.cluster.bindings_view())
    if error is None:
        rep = s.pods_finished(pods, now)  # type: ignore[arg-type]
        assert rep.finished == () and len(s.cluster.job_pods("big")) == 1
        return
    with pytest.raises(error, match=message):
        s.pods_finished(pods, now)  # type: ignore[arg-type]
    assert sorted(s.cluster.bindings_view()) == before
