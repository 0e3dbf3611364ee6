"""Conservative backfill (Slurm's backfill): every reservation of a cycle is a booking of
devices from its start to its expected end, none shares a device with another over time, and
no job starts if it would delay one of them. The runs replay exact estimates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.admission import Quota
from kant.contracts import Reservation
from kant.cycle import CycleResult
from kant.errors import ValidationError
from kant.model import Binding, Job, PodId, ReasonCode, Resources, Role, Tier
from kant.preemption import PreemptionPolicy
from kant.queueing import ConservativeBackfill, EasyBackfill
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import finish, finish_due, nodes, scheduler

_NO_PREEMPTION = PreemptionPolicy(priority=False, reclaim=False, backfill=False)


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


@pytest.mark.parametrize("policy", [EasyBackfill(), ConservativeBackfill()], ids=lambda p: p.name)
def test_a_pod_level_job_placed_in_part_reserves_only_its_pods_still_waiting(
    policy: EasyBackfill | ConservativeBackfill,
) -> None:
    # p (3 x 8 GPUs) gets two free nodes; its third pod waits for run (4 GPUs of lf0-n0)
    # to end at 100. Its reservation is that pod on lf0-n0 from 100, not all three pods
    # re-placed after its own two end (1002), so q (4 GPUs until 502) must not take lf0-n0
    s = scheduler(nodes(3), policy=policy, preemption=_NO_PREEMPTION)
    s.submit(job("run", gpus=4, runtime=100), now=0)
    s.step(now=0)
    s.submit(job("p", gpus=8, replicas=3, gang=False, runtime=1000, submitted_at=1), now=1)
    s.submit(job("q", gpus=4, runtime=500, submitted_at=2), now=2)
    r = s.step(now=2)
    assert sorted(b.pod.index for b in r.bindings if b.pod.job == "p") == [0, 1]
    assert r.reservation is not None and r.reservation.job == "p"
    assert r.reservation.start == 100
    assert [(b.pod.index, b.node) for b in r.reservation.bindings] == [(2, "lf0-n0")]
    assert r.pending["q"].code is ReasonCode.RESERVED
    assert _replay(s, r, 2, {"run": 100})["p"] == 100  # (its last pod)


@pytest.mark.parametrize("policy", [EasyBackfill(), ConservativeBackfill()], ids=lambda p: p.name)
def test_a_pod_level_head_more_than_the_cluster_holds_at_once_is_reserved_its_most_pods_or_each_in_turn(
    policy: EasyBackfill | ConservativeBackfill,
) -> None:
    # p (3 x 8 GPUs, pod-level) on two 8-GPU nodes can never run all its pods at once: EASY
    # reserves it the most pods any expected end gives it, at the earliest (two, when long
    # ends at 5000: lf0-n0, free from 100, and lf0-n1); conservative backfill books its pods
    # one by one, as cycles start them: lf0-n0 from 100, then from 1100 and 2100, as each
    # ends. Before, it was reserved nothing, the cycle went on as best effort, and q (4 GPUs
    # for 10,000 s) took lf0-n0's free half: no pod of p could start before 10,002
    s = scheduler(nodes(2), policy=policy, preemption=_NO_PREEMPTION)
    s.submit(job("run", gpus=4, runtime=100), now=0)
    s.submit(job("long", gpus=8, runtime=5000), now=0)
    s.step(now=0)
    s.submit(job("p", gpus=8, replicas=3, gang=False, runtime=1000, submitted_at=1), now=1)
    s.submit(job("q", gpus=4, runtime=10000, submitted_at=2), now=2)
    r = s.step(now=2)
    assert r.placed == ()
    assert r.reservation is not None and r.reservation.job == "p"
    if isinstance(policy, EasyBackfill):
        assert r.reservation.start == 5000
        assert sorted(b.node for b in r.reservation.bindings) == ["lf0-n0", "lf0-n1"]
    else:
        assert r.reservation.start == 100
        assert _pod_starts(r.reservation) == [100, 1100, 2100]
        assert {b.node for b in r.reservation.bindings} == {"lf0-n0"}
    assert r.pending["q"].code is ReasonCode.RESERVED
    finish(s, "run", now=100)
    first = s.step(now=100)
    assert [(b.pod.job, b.node) for b in first.bindings] == [("p", "lf0-n0")]


@pytest.mark.parametrize("policy", [EasyBackfill(), ConservativeBackfill()], ids=lambda p: p.name)
def test_a_pod_level_head_that_quota_admits_in_part_is_reserved_the_pods_quota_admits(
    policy: EasyBackfill | ConservativeBackfill,
) -> None:
    # tenant a's quota admits 2 of p's 3 pods (16 of 24 GPUs): p is reserved those two,
    # lf0-n0 (free from 100) and lf0-n2 (from 500), as a cycle then places them (EASY at
    # 500, both; conservative backfill books each pod from when it fits). Before, a
    # head quota admitted in part was reserved nothing, and q (4 GPUs for 10,000 s, of a
    # lower priority: walked after p) took lf0-n0's free half
    quotas = [Quota.gpus("a", "H100", 16), Quota.gpus("b", "H100", 24)]
    s = scheduler(
        nodes(3), policy=policy, preemption=_NO_PREEMPTION, quotas=quotas,
        modes={"a": "isolated", "b": "isolated"},
    )  # fmt: skip
    s.submit(job("run", gpus=4, tenant="b", runtime=100), now=0)
    s.submit(job("long", gpus=8, tenant="b", runtime=10**6), now=0)
    s.submit(job("mid", gpus=8, tenant="b", runtime=500), now=0)
    s.step(now=0)
    s.submit(
        job("p", gpus=8, replicas=3, gang=False, tenant="a", runtime=1000, submitted_at=1), now=1
    )
    s.submit(job("q", gpus=4, tenant="b", runtime=10000, priority=-1, submitted_at=2), now=2)
    r = s.step(now=2)
    assert r.placed == ()
    assert r.reservation is not None and r.reservation.job == "p"
    assert _pod_starts(r.reservation) == (
        [500, 500] if isinstance(policy, EasyBackfill) else [100, 500]
    )
    assert r.pending["q"].code is ReasonCode.RESERVED


@pytest.mark.parametrize("policy", [EasyBackfill(), ConservativeBackfill()], ids=lambda p: p.name)
def test_a_pod_level_quota_head_placed_in_part_waits_for_the_quota_of_its_unplaced_pods(
    policy: EasyBackfill | ConservativeBackfill,
) -> None:
    # p's H100 pod fits tenant a's quota and is placed; its A100 pod waits for the A100
    # quota a-run frees at 100. A 10 s H100 job behind it ends long before: it runs.
    # (Counting p's H100 pod twice, quota admitted p once that job ends: it waited.)
    # a-run has p's priority: p does not preempt it.
    cluster = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=1, model="A100", gpus=4)
    quotas = [Quota.gpus("a", "H100", 16), Quota.gpus("a", "A100", 4)]
    s = scheduler(cluster.build(), policy=policy, quotas=quotas, modes={"a": "isolated"})
    s.submit(job("a-run", gpus=4, tenant="a", models="A100", runtime=100, priority=1), now=0)
    s.step(now=0)
    roles = (
        Role(name="h", replicas=1, resources=Resources(gpus=8), gpu_models="H100"),
        Role(name="a", replicas=1, resources=Resources(gpus=4), gpu_models="A100"),
    )
    p = Job(
        id="p", tenant="a", priority=1, gang=False, roles=roles, runtime_estimate=1000,
        submitted_at=1,
    )  # fmt: skip
    s.submit(p, now=1)
    s.submit(job("short", gpus=1, tenant="a", models="H100", runtime=10, submitted_at=2), now=2)
    r = s.step(now=5)
    assert r.pending["p"].code is ReasonCode.QUOTA_EXCEEDED
    assert set(r.placed) == {"p", "short"}


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


def _three_pools() -> Scheduler:
    """Three 8-GPU nodes: A (H100) free at 10, B (A100) at 30, C (L40) at 15. Z (2 x 8 GPUs
    on H100 or A100, 100 s) is reserved both A and B at 30, X (8 L40 GPUs, 100 s) C at 15,
    and Y (4 H100 GPUs, 15 s), submitted at 3, A at 10."""
    c = (
        ClusterBuilder()
        .leaf("A", nodes=1, model="H100")
        .leaf("B", nodes=1, model="A100")
        .leaf("C", nodes=1, model="L40")
        .build()
    )
    s = scheduler(c, policy=ConservativeBackfill())
    for j, m, rt in (("rA", "H100", 10), ("rB", "A100", 30), ("rC", "L40", 15)):
        s.submit(job(j, gpus=8, models=m, runtime=rt), now=0)
    s.step(now=0)
    s.submit(job("Z", gpus=8, replicas=2, models="H100|A100", runtime=100), now=1)
    s.submit(job("X", gpus=8, models="L40", runtime=100), now=2)
    s.submit(job("Y", gpus=4, models="H100", runtime=15), now=3)
    r = s.step(now=3)
    assert [(v.job, v.start) for v in r.reservations] == [("Z", 30), ("X", 15), ("Y", 10)]
    finish(s, "rA", now=10)
    return s


def test_a_job_reserved_to_start_now_starts_on_devices_whose_bookings_begin_after_it_ends() -> None:
    # at 10, Y would end at 25: after X's start at 15, but X books only C; A's bookings (Z
    # at 30) begin after it ends. W (4 H100 GPUs, 4 s) ends at 14, before every booking of
    # A: it takes A's other half
    s = _three_pools()
    s.submit(job("W", gpus=4, models="H100", runtime=4), now=10)
    r = s.step(now=10)
    assert r.placed == ("Y", "W")
    assert [(v.job, v.start) for v in r.reservations] == [("Z", 30), ("X", 15)]
    assert {b.node for b in r.bindings} == {"A-n0"}
    started = _replay(s, r, 10, {"rB": 30, "rC": 15})
    assert started == {"Y": 10, "W": 10, "X": 15, "Z": 30}
    check_invariants(s)


def test_a_later_job_that_would_hold_a_device_past_its_booked_start_waits() -> None:
    # W (4 H100 GPUs, 25 s) would hold A's other half until 35, past Z's start at 30
    s = _three_pools()
    s.submit(job("W", gpus=4, models="H100", runtime=25), now=10)
    r = s.step(now=10)
    assert r.placed == ("Y",)
    assert r.pending["W"].code is ReasonCode.RESERVED
    assert r.pending["W"].message.startswith("would delay 2 reserved jobs, the first X")
    started = _replay(s, r, 10, {"rB": 30, "rC": 15})
    assert started == {"Y": 10, "X": 15, "Z": 30, "W": 130}


def _two_bookings(
    x_runtime: float | None, policy: ConservativeBackfill
) -> tuple[Scheduler, CycleResult]:
    """n0 runs r1 (8 GPUs) until 50, n1 runs r2 (4 GPUs) until 100 with 4 free; h1 and h2
    (8 GPUs, 1000 s) are reserved n0 at 50 and n1 at 100; then x (4 GPUs) arrives at 5."""
    s = scheduler(nodes(2), policy=policy)
    s.submit(job("r1", gpus=8, runtime=50), now=0)
    s.submit(job("r2", gpus=4, runtime=100), now=0)
    s.step(now=0)
    s.submit(job("h1", gpus=8, runtime=1000, submitted_at=1), now=1)
    s.submit(job("h2", gpus=8, runtime=1000, submitted_at=2), now=2)
    s.submit(job("x", gpus=4, runtime=x_runtime, submitted_at=3), now=3)
    return s, s.step(now=5)


@pytest.mark.parametrize(("runtime", "starts"), [(95, True), (96, False)])
def test_a_job_ending_exactly_at_a_reserved_start_may_use_that_reservations_devices(
    runtime: float, starts: bool
) -> None:
    # x ends at 100 (h2's start, on n1) or 1 s later; h1 starts at 50 but books only n0
    s, r = _two_bookings(runtime, ConservativeBackfill())
    assert [(v.job, v.start) for v in r.reservations][:2] == [("h1", 50), ("h2", 100)]
    if starts:
        assert r.placed == ("x",)
        assert {b.node for b in r.bindings} == {
            s.cluster.binding(p).node for p in s.queue.status("r2").running
        }
    else:
        assert r.placed == ()
        assert r.pending["x"].code is ReasonCode.RESERVED
    started = _replay(s, r, 5, {"r1": 50, "r2": 100})
    assert started["h1"] == 50 and started["h2"] == 100
    check_invariants(s)


@pytest.mark.parametrize(("default_runtime", "starts"), [(None, False), (95, True)])
def test_a_job_with_no_estimate_uses_reserved_devices_only_by_the_default_runtime(
    default_runtime: float | None, starts: bool
) -> None:
    # no estimate and no default: x might run for ever, so it may use no reserved device
    _s, r = _two_bookings(None, ConservativeBackfill(default_runtime=default_runtime))
    assert r.placed == (("x",) if starts else ())
    if not starts:
        assert r.pending["x"].code is ReasonCode.RESERVED


_JOB = st.tuples(
    st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
    st.sampled_from([1, 1, 2]),  # pods (a gang of two)
    st.integers(1, 60),  # runtime, exact
    st.sampled_from(["", "H100", "A100"]),  # GPU models
    st.integers(0, 30),  # arrival
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(_JOB, min_size=6, max_size=14))
def test_no_job_started_ahead_delays_a_reservation(
    specs: list[tuple[int, int, int, str, int]],
) -> None:
    """Jobs arrive over time on two H100 nodes and an A100 node, every estimate exact, a
    cycle at every arrival and end. In each cycle no job placed holds a GPU that a
    reservation of the cycle books while both would run, and every job starts no later
    than the first start reserved for it (first-fit placement, so that a job backfilled on
    devices no reservation needs does not move the others' placements)."""
    cluster = ClusterBuilder().leaf("A", nodes=2).leaf("B", nodes=1, model="A100").build()
    s = scheduler(cluster, policy=ConservativeBackfill(), strategy="firstfit")
    est = {f"j{i}": float(rt) for i, (_g, _n, rt, _m, _a) in enumerate(specs)}
    ends: dict[str, float] = {}
    promised: dict[str, float] = {}
    started: dict[str, float] = {}
    t = 0.0
    while True:
        finish_due(s, ends, t)
        for i, (g, n, rt, m, a) in enumerate(specs):
            if a == t:
                s.submit(job(f"j{i}", gpus=g, replicas=n, runtime=float(rt), models=m,
                             submitted_at=t), now=t)  # fmt: skip
        r = s.step(now=t)
        booked = [(v.job, *_booked(v, s)) for v in r.reservations]
        for jid in r.placed:
            started[jid] = t
            ends[jid] = t + est[jid]
            mine = {(b.node, g) for b in r.bindings if b.pod.job == jid for g in b.gpus}
            for other, start, end, gpus in booked:
                assert not (mine & gpus and start < ends[jid] and t < end), (t, jid, other)
        for other, start, _end, _gpus in booked:
            assert start >= t
            promised.setdefault(other, start)
        later = [e for e in ends.values() if e > t] + [a for *_x, a in specs if a > t]
        if not later:
            break
        t = min(later)
    for jid, when in promised.items():
        assert started[jid] <= when, (jid, started[jid], when)
    check_invariants(s)


def _pod_starts(v: Reservation) -> list[float]:
    """The booked start of each pod of a reservation (a pod-level job's pods may be booked
    over time, each from when it fits), soonest first."""
    return sorted(v.starts or (v.start,) * len(v.bindings))


def _run_pods(
    s: Scheduler, now: float, ends: dict[PodId, float]
) -> tuple[dict[PodId, float], list[tuple[float, list[Reservation]]]]:
    """Run to the end with every pod ending at its start plus its job's estimate (``ends``:
    the running pods' ends), a cycle at every end: each pod's start, and each cycle's time
    and reservations."""
    started: dict[PodId, float] = {}
    cycles: list[tuple[float, list[Reservation]]] = []
    t = now
    while True:
        for p in sorted(p for p, e in ends.items() if e <= t):
            s.pod_finished(p, t)
            del ends[p]
        r = s.step(now=t)
        cycles.append((t, list(r.reservations)))
        for b in r.bindings:
            started[b.pod] = t
            ends[b.pod] = t + s.queue.status(b.pod.job).job.runtime_estimate  # type: ignore[operator]
        if not ends:
            return started, cycles
        t = min(ends.values())


def _kept(started: dict[PodId, float], cycles: list[tuple[float, list[Reservation]]]) -> None:
    """Every reservation a cycle announced was kept: the pods of its job started after that
    cycle, soonest first, start no later than its pods' booked starts, soonest first."""
    for t, reserved in cycles:
        for v in reserved:
            assert all(start >= t for start in _pod_starts(v)), (t, v)
            got = sorted(when for p, when in started.items() if p.job == v.job and when > t)
            booked = _pod_starts(v)
            assert len(got) >= len(booked), (t, v.job, got, booked)
            assert all(g <= b for g, b in zip(got, booked, strict=False)), (t, v.job, got, booked)


def test_a_pod_level_job_is_booked_pod_by_pod_and_its_early_pods_delay_no_later_reservation() -> (
    None
):
    # One 8-GPU node: a (3 GPUs) runs until 164, b (4 GPUs) until 52. p (2 x 4 GPUs,
    # pod-level, 23 s) waits, then g (a gang of 2 x 2 GPUs, 55 s). A cycle starts each of
    # p's pods as soon as it fits: one at 52 (b's GPUs), the other when that one ends at 75.
    # p is booked so, and g after it, at 98 when p's second pod ends. Before, p was booked
    # both pods at 164 and g b's GPUs from 52; at 52 p's first pod took them, and g,
    # announced at 52, started at 98
    s = scheduler(nodes(1), policy=ConservativeBackfill(), preemption=_NO_PREEMPTION)
    s.submit(job("a", gpus=3, runtime=164), now=0)
    s.submit(job("b", gpus=4, runtime=52), now=0)
    s.step(now=0)
    s.submit(job("p", gpus=4, replicas=2, gang=False, runtime=23, submitted_at=1), now=1)
    s.submit(job("g", gpus=2, replicas=2, gang=True, runtime=55, submitted_at=2), now=2)
    r = s.step(now=2)
    assert [(v.job, _pod_starts(v)) for v in r.reservations] == [
        ("p", [52, 75]),
        ("g", [98, 98]),
    ]
    assert r.pending["p"].message.endswith("reserved to start at 52")
    ends = {p: 164.0 for p in s.queue.status("a").running}
    ends.update({p: 52.0 for p in s.queue.status("b").running})
    started, cycles = _run_pods(s, 2, ends)
    assert sorted((p.job, when) for p, when in started.items()) == [
        ("g", 98), ("g", 98), ("p", 52), ("p", 75),
    ]  # fmt: skip
    _kept(started, [(2, list(r.reservations)), *cycles])
    check_invariants(s)


_POD_JOB = st.tuples(
    st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
    st.integers(1, 3),  # pods
    st.booleans(),  # a gang (else pod-level: its pods may start one by one)
    st.integers(1, 60),  # runtime, exact
)


# derandomized: the same examples on every run. A reservation may still move when placement
# picks other devices within a node than its forecast did (docs/qsch.md); none of these does.
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    running=st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 80)), max_size=4),
    specs=st.lists(_POD_JOB, min_size=2, max_size=8),
)
def test_every_reservation_a_cycle_announces_is_kept_when_estimates_are_exact(
    running: list[tuple[int, int]], specs: list[tuple[int, int, bool, int]]
) -> None:
    """Two 8-GPU nodes, some jobs running, then gangs and pod-level jobs waiting; every
    estimate exact and nothing arriving after. Every reservation of every cycle is kept:
    each pod of its job starts no later than booked, a pod-level job's pods each from when
    a cycle can start it (first-fit placement, as above)."""
    s = scheduler(
        nodes(2), policy=ConservativeBackfill(), strategy="firstfit", preemption=_NO_PREEMPTION
    )
    for i, (g, rt) in enumerate(running):
        s.submit(job(f"r{i}", gpus=g, runtime=float(rt)), now=0)
    s.step(now=0)
    ends = {
        p: float(rt) for i, (_g, rt) in enumerate(running) for p in s.queue.status(f"r{i}").running
    }
    for i, (g, n, gang, rt) in enumerate(specs):
        s.submit(
            job(f"j{i}", gpus=g, replicas=n, gang=gang, runtime=float(rt), submitted_at=1 + i),
            now=1,
        )
    started, cycles = _run_pods(s, 1, ends)
    _kept(started, cycles)
    check_invariants(s)


@pytest.mark.parametrize("wish", ["max_per_node", "required_node"])
def test_a_pod_level_job_booked_pod_by_pod_keeps_its_later_pods_where_its_earlier_ones_send_them(
    wish: str,
) -> None:
    # Two 8-GPU nodes; lf0-n0 runs x (4 GPUs) until 10. p (2 x 4 GPUs, pod-level, 100 s)
    # may run one pod a node (lf0-n0 runs y, 4 GPUs, until 20; lf0-n1 z, 8 GPUs, until
    # 500), or must keep its pods on one node (lf0-n0 runs w, 4 GPUs, until 1000; lf0-n1 y
    # and z, 4 GPUs each, until 20 and 500). Its first pod starts on lf0-n0 at 10; its
    # second can join neither lf0-n0 at 20 (one a node) nor lf0-n1 at 20 (one node), only
    # lf0-n0 when the first ends at 110. Before, the pods booked earlier were not the job's
    # own to the placement: the second was booked at 20, beside the first or on lf0-n1,
    # where no cycle would start it
    s = scheduler(
        nodes(2), policy=ConservativeBackfill(), strategy="firstfit", preemption=_NO_PREEMPTION
    )
    running = (
        {"x": (4, 10), "y": (4, 20), "z": (8, 500)}
        if wish == "max_per_node"
        else {"x": (4, 10), "w": (4, 1000), "y": (4, 20), "z": (4, 500)}
    )
    for jid, (g, rt) in running.items():
        s.submit(job(jid, gpus=g, runtime=rt), now=0)
    s.step(now=0)
    assert {b.node for b in s.status("x").bindings} == {"lf0-n0"}
    kw: dict[str, object] = (
        {"max_per_node": 1} if wish == "max_per_node" else {"tier": Tier.NODE, "required": True}
    )
    s.submit(
        job("p", gpus=4, replicas=2, gang=False, runtime=100, submitted_at=1, **kw),  # type: ignore[arg-type]
        now=1,
    )
    r = s.step(now=2)
    (v,) = r.reservations
    assert v.job == "p"
    assert _pod_starts(v) == [10, 110]
    assert [b.node for b in v.bindings] == ["lf0-n0", "lf0-n0"]
    ends = {p: float(running[p.job][1]) for jid in running for p in s.queue.status(jid).running}
    started, _cycles = _run_pods(s, 2, ends)
    assert sorted(when for p, when in started.items() if p.job == "p") == [10, 110]
    check_invariants(s)


def _booking(n: int) -> list[Binding]:
    """``n`` bindings of job ``p``'s pods on one node, one GPU each."""
    return [
        Binding(pod=PodId(job="p", role="worker", index=i), node="lf0-n0", gpus=(i,))
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("start", "starts"),
    [
        (10.0, (10.0,)),  # one start for two bindings
        (10.0, (10.0, 20.0, 30.0)),  # three for two
        (20.0, (10.0, 20.0)),  # start is not the earliest
        (10.0, (10.0, math.nan)),
        (10.0, (10.0, "20")),
        (10.0, [10.0, 20.0]),  # not a tuple
    ],
)
def test_a_reservation_whose_pod_starts_do_not_match_its_bindings_is_refused_when_made(
    start: float, starts: object
) -> None:
    # a policy of one's own building a pod-by-pod booking gets the mistake where it makes
    # it, not a ValueError deep in the cycle that holds it
    with pytest.raises(ValidationError, match="starts"):
        Reservation(job="p", start=start, bindings=tuple(_booking(2)), starts=starts)  # type: ignore[arg-type]


def test_a_reservation_booked_pod_by_pod_groups_its_bindings_by_start() -> None:
    bs = tuple(_booking(3))
    r = Reservation(job="p", start=10.0, bindings=bs, starts=(20.0, 10.0, 20.0))
    assert r.pieces() == [(10.0, (bs[1],)), (20.0, (bs[0], bs[2]))]
    assert Reservation(job="p", start=5.0, bindings=bs).pieces() == [(5.0, bs)]
