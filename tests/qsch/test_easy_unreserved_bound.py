"""EASY asks, for each blocked job after the head, whether it would fit with the reservation
free (then it waits as ``RESERVED``). A job that needs more whole GPUs than are free plus
every reserved one is answered without giving the reservation back: the same answers."""

from __future__ import annotations

from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.cycle_context import PolicyContext
from kant.queueing import EasyBackfill
from kant.testing import check_invariants, job

from .conftest import finish_due, nodes, scheduler

_JOB = st.tuples(
    st.sampled_from([0, 1, 1, 2, 4, 8]),  # GPUs per pod (0: a half-GPU share)
    st.integers(1, 8),  # pods
    st.booleans(),  # gang (with more than one pod)
    st.integers(1, 40),  # runtime estimate (exact)
    st.integers(0, 20),  # arrival
)


def _run(specs: list[tuple[int, int, bool, int, int]], n_nodes: int) -> list[object]:
    s = scheduler(nodes(n_nodes), policy=EasyBackfill(), strategy="firstfit")
    ends: dict[str, float] = {}
    out: list[object] = []
    for t in range(0, 100):
        now = float(t)
        finish_due(s, ends, now)
        for i, (g, n, gang, est, arrive) in enumerate(specs):
            if arrive == t:
                s.submit(
                    job(f"j{i}", gpus=g or 1, gpu_milli=0 if g else 500, replicas=n,
                        gang=gang and n > 1, runtime=float(est), submitted_at=now),
                    now=now,
                )  # fmt: skip
        r = s.step(now=now)
        for jid in r.placed:
            ends.setdefault(jid, now + specs[int(jid[1:])][3])
        out.append((t, r.placed, r.bindings, sorted(r.pending.items()), r.reservation))
    check_invariants(s)
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(_JOB, min_size=4, max_size=16), n_nodes=st.integers(1, 3))
def test_the_bound_on_free_gpus_gives_the_answers_of_giving_the_reservation_back(
    specs: list[tuple[int, int, bool, int, int]], n_nodes: int
) -> None:
    fast = _run(specs, n_nodes)
    with mock.patch.object(PolicyContext, "_too_few_gpus", return_value=False):
        slow = _run(specs, n_nodes)
    assert fast == slow
