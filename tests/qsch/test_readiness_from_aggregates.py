"""Readiness decided by the per-pool aggregates alone, and what the cycle saves with it: a
backfill candidate refused even with the head's reservation opened does not open it again
while the snapshot is as it was then."""

from __future__ import annotations

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, given, settings

from kant.admission.holds import Holds
from kant.admission.pools import Pools
from kant.admission.quota import admit_without_quotas
from kant.model import Job, ReasonCode
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


def test_a_candidate_refused_with_the_reservation_open_does_not_open_it_again(
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
    # b16 opened the reservation and was refused; b12, at the same contents, was refused
    # by the aggregates b16 saw; b2 passes them, so it opens the reservation to be placed
    assert opened == ["b16", "b2"]
