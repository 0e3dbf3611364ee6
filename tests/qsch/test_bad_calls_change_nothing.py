"""A refused call changes nothing: any sequence of valid and invalid calls on the facade
(malformed jobs and times, time running backwards, unknown or ended pods, unknown nodes, bad
pod capacities, bad start-estimate arguments, stale results, junk given as victims) leaves
the scheduler exactly as a twin that saw only the calls the first one accepted: the same
jobs, bindings, quota charges, node specs and clock, and the same next decisions. Every
refusal is a validation or lookup error (an AllocationConflictError or InvariantError is a
crash, not a refusal), and a cycle at a valid time is never refused."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, given, settings

from kant.admission import Admitter, Quota
from kant.cycle import CycleResult
from kant.errors import (
    DuplicateError,
    UnknownGpuModelError,
    UnknownJobError,
    UnknownNodeError,
    UnknownPodError,
    ValidationError,
)
from kant.model import PodId
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job, node

Call = Callable[[Scheduler, list[CycleResult]], Any]
"""A call on a scheduler, given the results its own cycles returned so far."""

REFUSALS = (
    ValidationError,
    UnknownJobError,
    UnknownPodError,
    UnknownNodeError,
    UnknownGpuModelError,
    DuplicateError,
)
"""What a refusal of bad input raises. Anything else (AllocationConflictError,
InvariantError, TransactionError, a TypeError) is a crash, never a refusal."""


def _scheduler() -> Scheduler:
    cluster = (
        ClusterBuilder().leaf("lf0", nodes=2, max_pods=3).leaf("lfa", nodes=1, model="A100").build()
    )
    return Scheduler(
        cluster,
        queue=Queue(),
        admitter=Admitter([Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)]),
        placer=Placer("ebinpack"),
        policy="backfill",
        preemption=PreemptionPolicy(min_runtime=0.0),
    )


def _fingerprint(s: Scheduler) -> tuple[Any, ...]:
    return (
        s.clock,
        s.queue.statuses(),
        sorted(s.cluster.bindings(), key=lambda b: b.pod),
        sorted(s.cluster.nodes(), key=lambda n: n.name),
        [s.cluster.health_masks(n.name) for n in sorted(s.cluster.nodes(), key=lambda n: n.name)],
        sorted(s.admitter.usage().items()),
        s.lost_nodes(),
    )


NODES = ["lf0-n0", "lf0-n1", "lfa-n0", "nope"]
BAD_TIMES = [float("nan"), float("inf"), -1.0, 10**400, True, "3"]
MAX_PODS = [None, 0, 1, 2, 5, -1, True, 2.5, 2**20 + 1, np.int64(2), "3"]


@st.composite
def _call(draw: st.DrawFn, s: Scheduler, now: float, n: int, results: int) -> Call:
    """One call on the state ``s`` is in, at ``now`` or a bad time; valid or not."""
    bound = sorted(b.pod for b in s.cluster.bindings())
    ids = sorted(e.id for e in s.queue.entries())
    t = draw(st.sampled_from([now, now, now, now - 5.0, *BAD_TIMES]))
    valid_time = type(t) is float and math.isfinite(t) and t >= s.clock
    kind = draw(
        st.sampled_from(
            ["submit", "submit", "step", "step", "finish", "evict", "fail", "max_pods",
             "lost", "recovered", "removed", "estimates", "stale", "spared", "cancel",
             "gpu", "added"]
        )
    )  # fmt: skip
    pod = draw(
        st.sampled_from([*bound, PodId(job="ghost", role="worker", index=0), "j1/worker/0", None])
    )
    if kind == "submit":
        jid = draw(st.sampled_from([f"j{n}", f"j{n}", *ids[:2], ""]))
        gpus = draw(st.sampled_from([1, 4, 8]))
        models = draw(st.sampled_from(["", "H100", "A100", "H100|A100", "B200"]))
        tenant = draw(st.sampled_from(["a", "b", "c"]))
        replicas = draw(st.integers(1, 3))
        priority = draw(st.sampled_from([0, 0, 5, 10]))
        gang = draw(st.booleans())

        def submit(x: Scheduler, _r: list[CycleResult]) -> None:
            x.submit(
                job(jid, gpus=gpus, models=models, tenant=tenant, replicas=replicas,
                    runtime=10.0, submitted_at=now, priority=priority, gang=gang),
                now=t,
            )  # fmt: skip

        return submit
    if kind == "step":

        def step(x: Scheduler, res: list[CycleResult]) -> None:
            r = x.schedule(t)
            res.append(r)
            x.apply(r, t)

        step.must_succeed = valid_time  # type: ignore[attr-defined]
        return step
    if kind == "finish":
        return lambda x, _r: x.pod_finished(pod, t)
    if kind == "evict":
        return lambda x, _r: x.pod_evicted(pod, t)
    if kind == "fail":
        return lambda x, _r: x.binding_failed(pod, t)
    if kind == "max_pods":
        name, cap = draw(st.sampled_from(NODES)), draw(st.sampled_from(MAX_PODS))
        return lambda x, _r: x.node_max_pods(name, cap, t)
    if kind in ("lost", "recovered", "removed"):
        name = draw(st.sampled_from(NODES))
        if kind == "recovered":
            return lambda x, _r: x.node_recovered(name, t)
        return lambda x, _r: getattr(x, f"node_{kind}")(name, t)
    if kind == "added":
        spec = node(f"new{n}", leaf=draw(st.sampled_from(["lf0", "lfa", "lfz"])))
        return lambda x, _r: x.node_added(spec, t)
    if kind == "estimates":
        kw = draw(
            st.sampled_from(
                [{}, {"horizon": 50.0}, {"horizon": -1}, {"tick": float("nan")},
                 {"max_cycles": 0}, {"jobs": "j1"}, {"jobs": ["ghost"]}, {"grace_period": 10**400},
                 {"first_cycle": float("inf")}, {"default_runtime": 0}]
            )
        )  # fmt: skip
        return lambda x, _r: x.start_estimates(t, **kw)
    if kind == "stale":
        k = draw(st.integers(0, results))  # (k == results: not a result at all)
        # (each scheduler applies its own k-th result: the same, as schedule is deterministic)
        return lambda x, res: x.apply(res[k] if k < len(res) else "junk", t)  # type: ignore[arg-type]
    if kind == "spared":
        junk = draw(st.sampled_from([[pod], [pod, "x"], "j1", 3]))
        return lambda x, _r: x.victims_spared(junk)  # type: ignore[arg-type]
    if kind == "cancel":
        jid = draw(st.sampled_from([*ids[:3], "ghost"]))
        return lambda x, _r: x.cancel(jid, t)
    name, gpu = draw(st.sampled_from(NODES)), draw(st.sampled_from([0, 7, 8, -1, True]))
    return lambda x, _r: x.gpu_unhealthy(name, gpu, t)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_refused_calls_leave_the_scheduler_as_a_twin_that_never_saw_them(
    data: st.DataObject,
) -> None:
    seen, twin = _scheduler(), _scheduler()
    mine: list[CycleResult] = []  # (each scheduler's own cycle results, for stale applies)
    theirs: list[CycleResult] = []
    now = 0.0
    for n in range(data.draw(st.integers(5, 30), label="calls")):
        now += data.draw(st.sampled_from([0.0, 1.0, 7.0]), label="dt")
        _run(seen, twin, data.draw(_call(seen, now, n, len(mine)), label="call"), mine, theirs)
    _same_next_cycle(seen, twin, now)


def _run(seen: Scheduler, twin: Scheduler, call: Call, mine: list[CycleResult],
         theirs: list[CycleResult]) -> bool:  # fmt: skip
    """Make ``call`` on ``seen``, and on ``twin`` if ``seen`` accepted it; whether it did. A
    refusal must be one of :data:`REFUSALS`, and a cycle at a valid time is never refused."""
    try:
        call(seen, mine)
    except REFUSALS:
        if getattr(call, "must_succeed", False):
            raise  # (a cycle at a valid time: a crash, not a refusal)
        accepted = False
    else:
        call(twin, theirs)  # what the first accepted, the twin accepts
        accepted = True
    check_invariants(seen)
    assert _fingerprint(seen) == _fingerprint(twin)
    return accepted


def _same_next_cycle(seen: Scheduler, twin: Scheduler, now: float) -> None:
    later = max(seen.clock, now) + 1.0
    a, b = seen.step(later), twin.step(later)
    assert (a.bindings, a.victims, a.pending) == (b.bindings, b.victims, b.pending)
    check_invariants(seen, twin)


def _do(do: Callable[[Scheduler], Any]) -> Call:
    """A scripted call other than a cycle: ``do(scheduler)``."""

    def call(x: Scheduler, _res: list[CycleResult]) -> None:
        do(x)

    return call


def _cycle(t: float) -> Call:
    """A scripted cycle at ``t``, a valid time: it must run."""

    def step(x: Scheduler, res: list[CycleResult]) -> None:
        r = x.schedule(t)
        res.append(r)
        x.apply(r, t)

    step.must_succeed = True  # type: ignore[attr-defined]
    return step


def test_preempting_on_a_node_whose_capacity_was_lowered_below_its_pods_crashes_no_cycle() -> None:
    """lo's 3 pods run on an lf0 node (capacity 3), lowered to 1; hi, above lo, preempts there and
    waits while its victims go one by one, then starts. Every cycle runs (a hold asking no pod
    slot on the node used to raise AllocationConflictError, which this test once counted as a
    refusal), a bad call in between changes nothing, and both schedulers decide alike."""
    seen, twin = _scheduler(), _scheduler()
    mine: list[CycleResult] = []
    theirs: list[CycleResult] = []

    def run(call: Call) -> bool:
        return _run(seen, twin, call, mine, theirs)

    lo = job("lo", gpus=1, tenant="a", replicas=3, gang=False, runtime=100.0)
    big = job("big", gpus=8, tenant="b", priority=20, runtime=100.0)
    hi = job("hi", gpus=1, cpu_milli=1000, tenant="a", priority=10, runtime=10.0)
    run(_do(lambda x: x.submit(lo, now=0.0)))
    run(_do(lambda x: x.submit(big, now=0.0)))
    run(_cycle(1.0))
    where = seen.cluster.binding(PodId(job="lo", role="worker", index=0)).node
    assert {seen.cluster.binding(PodId(job="lo", role="worker", index=i)).node
            for i in range(3)} == {where}  # fmt: skip
    assert run(_do(lambda x: x.node_max_pods(where, 1, 2.0)))
    run(_do(lambda x: x.submit(hi, now=2.0)))
    run(_cycle(3.0))
    victims = sorted(p for v in mine[-1].victims for p in v.pods)
    assert victims and {seen.cluster.binding(p).node for p in victims} == {where}
    assert not run(_do(lambda x: x.node_max_pods(where, -1, 3.0)))  # refused
    for i, p in enumerate(victims):
        t = 4.0 + i
        run(_do(lambda x, p=p, t=t: x.pod_evicted(p, t)))
        run(_cycle(t + 0.5))
    assert seen.queue.entry("hi").started_at is not None
    assert seen.cluster.binding(PodId(job="hi", role="worker", index=0)).node == where
    _same_next_cycle(seen, twin, 10.0)
