"""Conservative backfill (Slurm's backfill): every reservation of a cycle is a booking of
devices from its start to its expected end, none shares a device with another over time, and
no job starts if it would delay one of them. The runs replay exact estimates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kant.admission import Quota
from kant.contracts import Reservation
from kant.cycle import CycleResult
from kant.model import ReasonCode
from kant.queueing import ConservativeBackfill, EasyBackfill
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import finish_due, nodes, scheduler


def _replay(s: Scheduler, r: CycleResult, now: float, ends: dict[str, float]) -> dict[str, float]:
    """Run to the end with every job ending at its start plus its estimate (``ends``: the
    running jobs' ends); the start of each job placed from ``r`` on."""
    started: dict[str, float] = {}
    t = now
    while True:
        for jid in r.placed:
            started[jid] = t
            ends[jid] = t + s.queue.status(jid).job.runtime_estimate  # type: ignore[operator]
        later = [e for e in ends.values() if e > t]
        if not later:
            return started
        t = min(later)
        finish_due(s, ends, t)
        r = s.step(now=t)


def _booked(r: Reservation, s: Scheduler) -> tuple[float, float, set[tuple[str, int]]]:
    est = s.queue.status(r.job).job.runtime_estimate
    end = r.start + est if est is not None else math.inf
    return r.start, end, {(b.node, g) for b in r.bindings for g in b.gpus}


def test_two_reservations_never_book_the_same_gpus_and_a_backfill_delays_neither() -> None:
    # n0 runs r1 (8 GPUs) to 100; n1 runs r2 (4 GPUs) to 150 with 4 free. h1 and h2 ask 8
    # GPUs for 1000 s; x (4 GPUs, 10000 s) fits n1's free half now.
    s = scheduler(nodes(2), policy=ConservativeBackfill())
    s.submit(job("r1", gpus=8, runtime=100), now=0)
    s.submit(job("r2", gpus=4, runtime=150), now=0)
    s.step(now=0)
    s.submit(job("h1", gpus=8, runtime=1000, submitted_at=1), now=1)
    s.submit(job("h2", gpus=8, runtime=1000, submitted_at=2), now=2)
    s.submit(job("x", gpus=4, runtime=10000, submitted_at=3), now=3)
    r = s.step(now=5)
    # h1 books r1's node at 100; h2 cannot have it before 1100: it books r2's at 150; x
    # waits (RESERVED) and books the first node free after both
    got = {v.job: (v.start, {b.node for b in v.bindings}) for v in r.reservations}
    assert {j: start for j, (start, _n) in got.items()} == {"h1": 100, "h2": 150, "x": 1100}
    assert got["h1"][1] == {s.cluster.binding(p).node for p in s.queue.status("r1").running}
    assert got["h2"][1] == {s.cluster.binding(p).node for p in s.queue.status("r2").running}
    assert r.placed == ()
    assert r.pending["x"].code is ReasonCode.RESERVED
    started = _replay(s, r, 5, {"r1": 100, "r2": 150})
    assert started == {"h1": 100, "h2": 150, "x": 1100}
    check_invariants(s)


def test_a_job_waiting_only_for_a_reservation_gets_its_own() -> None:
    # H100 node: 7 GPUs free to 100 (h1 books all 8 then). A100 node: 2 free to 200. j2 (7
    # GPUs, any model) would fit the H100 node's 7 if h1 did not hold them: RESERVED, and it
    # books the A100 node at 200; j3 (2 GPUs, 10000 s) must not take that node's free 2 (it
    # books the H100 node after h1).
    cluster = ClusterBuilder().leaf("lfh", nodes=1).leaf("lfa", nodes=1, model="A100").build()
    s = scheduler(cluster, policy=ConservativeBackfill())
    s.submit(job("r1", gpus=1, models="H100", runtime=100), now=0)
    s.submit(job("r2", gpus=6, models="A100", runtime=200), now=0)
    s.step(now=0)
    s.submit(job("h1", gpus=8, models="H100", runtime=1000, submitted_at=1), now=1)
    s.submit(job("j2", gpus=7, runtime=1000, submitted_at=2), now=2)
    s.submit(job("j3", gpus=2, runtime=10000, submitted_at=3), now=3)
    r = s.step(now=5)
    assert [(v.job, v.start) for v in r.reservations] == [("h1", 100), ("j2", 200), ("j3", 1100)]
    assert r.pending["j2"].code is ReasonCode.RESERVED
    assert r.pending["j2"].message.endswith("reserved to start at 200")
    assert r.placed == ()
    started = _replay(s, r, 5, {"r1": 100, "r2": 200})
    assert started["h1"] == 100 and started["j2"] == 200
    check_invariants(s)


@pytest.mark.parametrize("policy", [EasyBackfill(), ConservativeBackfill()], ids=lambda p: p.name)
def test_a_tenants_first_job_refused_by_quota_is_not_delayed_by_its_later_jobs(
    policy: EasyBackfill | ConservativeBackfill,
) -> None:
    # Tenant a's quota is 8 GPUs and a-run holds 4 until 100: a-big (8) waits for quota;
    # a-long (4, 10000 s) would take the quota a-big waits for.
    s = scheduler(
        nodes(2), policy=policy, quotas=[Quota.gpus("a", "H100", 8)], modes={"a": "isolated"}
    )
    s.submit(job("a-run", gpus=4, tenant="a", runtime=100), now=0)
    s.step(now=0)
    s.submit(job("a-big", gpus=8, tenant="a", runtime=100, submitted_at=1), now=1)
    s.submit(job("a-long", gpus=4, tenant="a", runtime=10000, submitted_at=2), now=2)
    r = s.step(now=5)
    assert r.placed == ()
    assert r.pending["a-long"].code is ReasonCode.RESERVED
    assert "a-big" in r.pending["a-long"].message
    started = _replay(s, r, 5, {"a-run": 100})
    assert started == {"a-big": 100, "a-long": 200}


def _random_run(seed: int) -> list[tuple[float, list[tuple[float, float, set[tuple[str, int]]]]]]:
    """25 jobs of 1 to 16 GPUs on 3 nodes, exact estimates: each cycle's bookings."""
    rng = np.random.default_rng(seed)
    s = scheduler(nodes(3), policy=ConservativeBackfill())
    for i in range(25):
        s.submit(
            job(
                f"j{i}",
                gpus=int(rng.choice([1, 2, 4, 8])),
                replicas=int(rng.choice([1, 1, 2])),
                runtime=float(rng.integers(5, 60)),
                submitted_at=float(i // 3),
            ),
            now=0.0,
        )
    ends: dict[str, float] = {}
    out = []
    t = 0.0
    for _ in range(200):
        finish_due(s, ends, t)
        r = s.step(now=t)
        out.append((t, [_booked(v, s) for v in r.reservations]))
        for jid in r.placed:
            ends[jid] = t + s.queue.status(jid).job.runtime_estimate  # type: ignore[operator]
        if not ends:
            break
        t = min(ends.values())
    check_invariants(s)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_no_two_bookings_of_a_cycle_share_a_gpu_over_time(seed: int) -> None:
    for t, booked in _random_run(seed):
        for i, (s1, e1, g1) in enumerate(booked):
            assert s1 >= t
            for s2, e2, g2 in booked[:i]:
                assert not (g1 & g2 and s1 < e2 and s2 < e1), (t, booked)
