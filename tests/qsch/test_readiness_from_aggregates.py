"""Readiness decided by the per-pool aggregates alone, and what the cycle saves with it: a
backfill candidate that the head's reservation, opened, would still leave too few GPUs is
refused without opening it (the aggregates it would give are read off the rows, or kept
while the snapshot is as it was)."""

from __future__ import annotations

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, given, settings

from kant.admission.holds import Hold, Holds
from kant.admission.pools import Pools
from kant.admission.quota import admit_without_quotas
from kant.model import Binding, Job, PodId, ReasonCode
from kant.state import ClusterState
from kant.testing import job
from kant.testing.strategies import clusters, jobs

from .conftest import nodes, scheduler


@st.composite
def _jobs(draw: st.DrawFn) -> Job:
    """A job of one role (:func:`kant.testing.strategies.jobs`) or of two (its role and
    another's, renamed)."""
    one = draw(jobs(0))
    if not draw(st.booleans()):
        return one
    other = attrs.evolve(draw(jobs(1)).roles[0], name="other")
    return Job(id="j0", kind=one.kind, gang=one.gang, roles=(one.roles[0], other))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=clusters(max_nodes=6), job_=_jobs(), busy=st.lists(st.integers(0, 255), max_size=6))
def test_a_refusal_from_the_aggregates_is_the_one_readiness_gives(
    state: ClusterState, job_: Job, busy: list[int]
) -> None:
    """Whenever the aggregates alone decide, they decide what readiness does, on every
    occupancy (``busy``: GPUs taken per node, as bit masks)."""
    snap = state.snapshot()
    pools = Pools(snap)
    role_models, no_pool = pools.role_models(job_)
    if no_pool is not None:
        return
    dec = admit_without_quotas(job_, job_.pods(), role_models)
    with snap.transaction():
        for slot, mask in enumerate(busy[: snap.num_slots]):
            free = int(snap.cols.free_mask[slot]) & mask
            if free:
                snap.allocate(slot, free)
        refused = pools.refused_by_aggregates(job_, dec, snap.agg["pool"])
        event("decided by the aggregates" if refused is not None else "undecided")
        if refused is not None:
            assert refused == pools.ready(job_, dec)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    state=clusters(max_nodes=6),
    held=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 255)), max_size=6),
    busy=st.lists(st.integers(0, 255), max_size=6),
)
def test_the_aggregates_a_hold_would_give_back_are_those_giving_it_back_leaves(
    state: ClusterState, held: list[tuple[int, int]], busy: list[int]
) -> None:
    """A hold of whole GPUs (``held``: node, GPUs as a bit mask), taken on a snapshot where
    other GPUs are then taken too (``busy``), some on its nodes: the per-pool aggregates it
    says giving it back leaves are the ones giving it back leaves."""
    snap = state.snapshot()
    names = [spec.name for spec in state.nodes()]
    bindings = []
    for i, (k, mask) in enumerate(held):
        spec = state.node(names[k % len(names)])
        gpus = tuple(g for g in range(spec.gpus) if mask >> g & 1)
        if gpus:
            bindings.append(
                Binding(pod=PodId(job="h", role="r", index=i), node=spec.name, gpus=gpus)
            )
    with snap.transaction():
        hold = Hold(bindings)
        hold.take(snap)
        for slot, mask in enumerate(busy[: snap.num_slots]):
            free = int(snap.cols.free_mask[slot]) & mask
            if free:
                snap.allocate(slot, free)
        said = hold.pool_agg_given_back(snap)
        event("read off the rows" if said is not None else "not a hold of whole GPUs")
        hold.give_back(snap)
        if said is not None:
            assert (said == snap.agg["pool"]).all()


def test_a_candidate_the_opened_reservation_would_refuse_does_not_open_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 4 nodes of 8 GPUs: 24 run until 100; the head (32) is reserved the 8 free ones and
    # those the running job frees at 100; the two candidates end in time but need more than
    # the 8 GPUs the reservation holds now
    s = scheduler(nodes(4), policy="easy-backfill")
    s.submit(job("run", gpus=8, replicas=3, runtime=100), now=0)
    s.step(now=0)
    s.submit(job("head", gpus=8, replicas=4, runtime=50, submitted_at=1), now=1)
    s.submit(job("b16", gpus=1, replicas=16, runtime=10, submitted_at=2), now=2)
    s.submit(job("b12", gpus=1, replicas=12, runtime=10, submitted_at=3), now=3)
    s.submit(job("b2", gpus=1, replicas=2, runtime=10, submitted_at=4), now=4)
    opened: list[str] = []
    real = Holds.open_for

    def spy(self: Holds, job_id: str, *, reserved: bool) -> object:
        if reserved:
            opened.append(job_id)
        return real(self, job_id, reserved=reserved)

    monkeypatch.setattr(Holds, "open_for", spy)
    r = s.schedule(now=5)
    assert r.reservation is not None and r.reservation.job == "head"
    assert r.pending["b16"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert r.pending["b16"].message == "role 'worker' needs 16 GPUs, 8 free in its pools"
    assert r.pending["b12"].message == "role 'worker' needs 12 GPUs, 8 free in its pools"
    assert r.placed == ("b2",)  # fits the reserved GPUs and ends before they are needed
    # b16 and b12 are refused by the aggregates the reservation would give back (read off
    # its rows for b16, kept for b12 at the same contents); b2 passes them, so it opens
    # the reservation to be placed
    assert opened == ["b2"]
