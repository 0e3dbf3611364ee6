"""The simulator runs a cycle when the passing of time alone could change a decision (the
cycle's ``CycleResult.time_horizon()``), not only at an arrival, a finish or an eviction: so
a simulated run decides as a library user who runs a cycle every second. Each scenario runs
through the simulator (``tick`` 0) and through the library by hand, one cycle a second,
with the same arrivals, finishes and evictions, and both preempt and start alike: a preemptor
evicted within its cascade window preempts when the window closes; a victim protected by
``min_runtime`` is preempted when it has run that long; a tenant's quota head under Backfill
preempts when it passes the threshold, although another tenant's job is the first blocked
job (whose own threshold passes earlier)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kant.admission import Admitter, Quota
from kant.model import Job, PodId
from kant.preemption import PreemptionPolicy
from kant.queueing import Backfill
from kant.scheduler import Scheduler
from kant.sim import SimConfig, Simulator
from kant.testing import ClusterBuilder, job

GRACE = 30.0

# (time, "start" | "preempt", job): what happened, in order
Events = list[tuple[float, str, str]]


def _simulated(s: Scheduler, jobs: Sequence[Job], until: float) -> Events:
    """The starts and preemptions of a simulation (``tick`` 0) up to ``until``."""
    cfg = SimConfig(tick=0.0, grace_period=GRACE, trace=True)
    res = Simulator(s, jobs, cfg).run()
    kinds = ("start", "preempt")
    return [(e.t, e.kind, e.subject) for e in res.trace if e.kind in kinds and e.t <= until]


def _by_hand(s: Scheduler, jobs: Sequence[Job], until: int) -> Events:
    """The starts and preemptions of one cycle a second from 0 to ``until``, each after that
    second's finishes (a job runs its estimate), evictions (``GRACE`` seconds after the cycle
    that chose the victim) and arrivals, as the simulator orders them."""
    runtime = {j.id: j.runtime_estimate for j in jobs}
    ends: dict[float, list[PodId]] = {}
    gone: dict[float, list[PodId]] = {}
    out: Events = []
    for t in range(until + 1):
        if t in ends:
            for p in ends.pop(t):
                if p in s.queue.entry(p.job).assigned:
                    s.pod_finished(p, now=t)
        for p in gone.pop(t, ()):
            s.pod_evicted(p, now=t)
        for j in jobs:
            if j.submitted_at == t:
                s.submit(j, now=t)
        r = s.step(now=t)
        for jid in r.placed:
            out.append((t, "start", jid))
            end = t + runtime[jid]
            ends.setdefault(end, []).extend(b.pod for b in r.bindings if b.pod.job == jid)
        for v in r.victims:
            out.append((t, "preempt", v.job))
            gone.setdefault(t + GRACE, []).extend(v.pods)
    return out


@pytest.mark.parametrize("policy", ["backfill", "easy-backfill"])
def test_a_preemptor_evicted_within_its_cascade_window_preempts_when_the_window_closes(
    policy: str,
) -> None:
    """``lo`` (A100) and ``mid`` (any model, priority 5) run; ``hi`` (H100, priority 10)
    evicts ``mid`` at 10, gone at 40; ``mid``, evicted within the 100 s window, may evict
    ``lo`` only from 140, with nothing else happening then. Under EASY too, whose run cannot
    tell its own horizon: the simulator still wakes at the window's close."""

    def scheduler() -> Scheduler:
        c = ClusterBuilder().leaf("h", nodes=1, model="H100").leaf("a", nodes=1, model="A100")
        return Scheduler(c.build(), policy=policy, preemption=PreemptionPolicy(cascade_window=100))

    jobs = [
        job("lo", gpus=8, models="A100", runtime=100_000, submitted_at=1),
        job("mid", gpus=8, priority=5, runtime=100_000, submitted_at=2),
        job("hi", gpus=8, models="H100", priority=10, runtime=100_000, submitted_at=10),
    ]
    want = [
        (1, "start", "lo"),
        (2, "start", "mid"),
        (10, "preempt", "mid"),
        (40, "start", "hi"),
        (140, "preempt", "lo"),
        (170, "start", "mid"),
    ]
    assert _simulated(scheduler(), jobs, 300) == want
    assert _by_hand(scheduler(), jobs, 300) == want


def test_a_victim_under_the_minimum_runtime_is_preempted_once_it_has_run_that_long() -> None:
    """``low`` runs from 0 on the only node; ``high`` (priority 1) arrives at 10, but
    ``low`` may be a victim only once it has run 600 s: at 600, with nothing else
    happening then."""

    def scheduler() -> Scheduler:
        c = ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build()
        return Scheduler(c, preemption=PreemptionPolicy(min_runtime=600))

    jobs = [
        job("low", gpus=8, runtime=100_000, submitted_at=0),
        job("high", gpus=8, priority=1, runtime=100_000, submitted_at=10),
    ]
    want = [(0, "start", "low"), (600, "preempt", "low"), (630, "start", "high")]
    assert _simulated(scheduler(), jobs, 800) == want
    assert _by_hand(scheduler(), jobs, 800) == want


def test_a_tenants_quota_head_preempts_past_the_threshold_behind_another_blocked_head() -> None:
    """Backfill, threshold 100. Tenant ``a``: ``a_run`` holds the A100 node; ``a_wait``
    (A100) waits from 1 for capacity, the first blocked job (past its threshold at 101, with
    nothing in its pool to take back). Tenant ``b`` (8 H100 GPUs of quota): ``b_short``
    runs from 2 to 52; ``b_big`` (8 GPUs) is refused by the quota from 5, the tenant's quota
    head; ``b_long`` (4 GPUs), submitted at 6, backfills past it. At 105 ``b_big`` has
    waited the threshold and takes back what backfilled past it, with nothing else happening
    then."""

    def scheduler() -> Scheduler:
        c = ClusterBuilder().leaf("h", nodes=1, model="H100").leaf("a", nodes=1, model="A100")
        quotas = Admitter(
            [Quota.gpus("a", "A100", 16), Quota.gpus("b", "H100", 8, borrowing_limit=0)]
        )
        return Scheduler(c.build(), admitter=quotas, policy=Backfill(threshold=100))

    jobs = [
        job("a_run", gpus=8, tenant="a", models="A100", runtime=100_000, submitted_at=0),
        job("a_wait", gpus=8, tenant="a", models="A100", runtime=100_000, submitted_at=1),
        job("b_short", gpus=4, tenant="b", models="H100", runtime=50, submitted_at=2),
        job("b_big", gpus=8, tenant="b", models="H100", runtime=100_000, submitted_at=5),
        job("b_long", gpus=4, tenant="b", models="H100", runtime=100_000, submitted_at=6),
    ]
    want = [
        (0, "start", "a_run"),
        (2, "start", "b_short"),
        (6, "start", "b_long"),
        (105, "preempt", "b_long"),
        (135, "start", "b_big"),
    ]
    assert _simulated(scheduler(), jobs, 300) == want
    assert _by_hand(scheduler(), jobs, 300) == want


def test_a_backfill_head_that_may_take_nothing_back_wakes_nobody_at_its_threshold() -> None:
    """Backfill with preemption off: a head passing its threshold changes nothing, so no
    cycle runs then (its cycles' time horizon is never); with backfill preemption on, one
    does (at 101), and finds nothing to take back."""
    jobs = [job("busy", gpus=8, runtime=1000, submitted_at=0), job("big", gpus=8, submitted_at=1)]
    cfg = SimConfig(tick=0.0, trace=True)

    def cycles(preemption: PreemptionPolicy) -> list[float]:
        c = ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build()
        s = Scheduler(c, policy=Backfill(threshold=100), preemption=preemption)
        res = Simulator(s, jobs, cfg).run()
        assert res.record("big").started_at == 1000
        return [e.t for e in res.trace if e.kind == "cycle"]

    assert cycles(PreemptionPolicy(priority=False, reclaim=False, backfill=False)) == [0, 1, 1000]
    assert cycles(PreemptionPolicy(priority=True, reclaim=True, backfill=False)) == [0, 1, 1000]
    assert cycles(PreemptionPolicy()) == [0, 1, 101, 1000]
