"""A refused call changes nothing: any sequence of valid and invalid calls on the facade
(malformed jobs and times, time running backwards, unknown or ended pods, unknown nodes, bad
pod capacities, bad start-estimate arguments, stale results, junk given as victims) leaves
the scheduler exactly as a twin that saw only the calls the first one accepted: the same
jobs, bindings, quota charges, node specs and clock, and the same next decisions. Every
refusal is a KantError; nothing else escapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, given, settings

from kant.admission import Admitter, Quota
from kant.cycle import CycleResult
from kant.errors import KantError
from kant.model import PodId
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job, node

Call = Callable[[Scheduler, list[CycleResult]], Any]
"""A call on a scheduler, given the results its own cycles returned so far."""


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

        def submit(x: Scheduler, _r: list[CycleResult]) -> None:
            x.submit(
                job(jid, gpus=gpus, models=models, tenant=tenant, replicas=replicas,
                    runtime=10.0, submitted_at=now),
                now=t,
            )  # fmt: skip

        return submit
    if kind == "step":

        def step(x: Scheduler, res: list[CycleResult]) -> None:
            r = x.schedule(t)
            res.append(r)
            x.apply(r, t)

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
        call = data.draw(_call(seen, now, n, len(mine)), label="call")
        try:
            call(seen, mine)
        except KantError:
            pass
        else:
            call(twin, theirs)  # what the first accepted, the twin accepts
        check_invariants(seen)
        assert _fingerprint(seen) == _fingerprint(twin)
    later = max(seen.clock, now) + 1.0
    a, b = seen.step(later), twin.step(later)
    assert (a.bindings, a.victims, a.pending) == (b.bindings, b.victims, b.pending)
