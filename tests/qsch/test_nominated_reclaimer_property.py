"""A Hypothesis search over small two-model clusters with quotas and preemption on: a
reclaimer holding its nomination never starts borrowing, and no preemptor evicts a unit
twice for one need (a pod-level job that started some pods may preempt again for the next
ones, and a borrower's unit started again may then be reclaimed again)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs
import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from kant.admission import Quota
from kant.model import PodId, Resources, Role, VictimReason
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import scheduler

MODELS = ("H100", "A100")
TENANTS = ("a", "b", "c")


@st.composite
def _worlds(draw: Any) -> dict[str, Any]:
    nodes = {m: draw(st.lists(st.sampled_from((4, 8)), min_size=1, max_size=2)) for m in MODELS}
    nominal = {(t, m): draw(st.sampled_from((0, 4, 8))) for t in TENANTS for m in MODELS}
    shapes = st.tuples(
        st.sampled_from(TENANTS[1:]),
        st.integers(0, 2),  # priority
        st.sampled_from((1, 2, 4)),  # GPUs per pod
        st.integers(1, 4),  # pods
        st.booleans(),  # gang
        st.sampled_from(("H100", "A100", "H100|A100", "A100|H100")),
    )
    first = draw(st.lists(shapes, min_size=1, max_size=5))
    # a later job may be a gang of two roles (the second: GPUs per pod, pods, models)
    second = st.none() | st.tuples(
        st.sampled_from((1, 2, 4)), st.integers(1, 2), st.sampled_from(("H100|A100", "A100"))
    )
    # one later job, of tenant a alone: what a uses is its own (its other jobs taking a's
    # nominal quota first would leave it no longer within nominal, placed as any job)
    shape = draw(shapes)
    later = [(("a", *shape[1:]), draw(second))]
    events = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=4, max_size=8))
    return {"nodes": nodes, "nominal": nominal, "first": first, "later": later, "events": events}


def _build(w: dict[str, Any]) -> Scheduler:
    b = ClusterBuilder()
    for m in MODELS:
        for k, gpus in enumerate(w["nodes"][m]):
            b.leaf(f"l{m}{k}", nodes=1, model=m, gpus=gpus)
    quotas = [Quota.gpus(t, m, n) for (t, m), n in w["nominal"].items() if n]
    return scheduler(b.build(), quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))


def _submit(s: Scheduler, jid: str, shape: tuple[Any, ...], t: float, second: Any = None) -> None:
    tenant, prio, gpus, pods, gang, models = shape
    j = job(jid, tenant=tenant, priority=prio, gpus=gpus, replicas=pods,
            gang=gang or pods == 1 or second is not None, models=models,
            submitted_at=t)  # fmt: skip
    if second is not None:
        g2, n2, m2 = second
        r2 = Role(name="second", replicas=n2, resources=Resources(gpus=g2), gpu_models=m2)
        j = attrs.evolve(j, roles=(*j.roles, r2))
    s.submit(j, now=t)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_worlds())
@example(  # tests/qsch/test_nominated_reclaimer.py's first scenario, one 4-GPU node a model
    {
        "nodes": {"H100": [4], "A100": [4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 4, ("c", "A100"): 8},
        "first": [("b", 0, 1, 4, False, "H100"), ("c", 0, 4, 1, True, "A100")],
        "later": [(("a", 0, 4, 1, True, "H100|A100"), None)],
        "events": [(False, 1), (False, 0), (True, 0), (False, 0)],
    }
)
def test_a_reclaimer_never_starts_borrowing_and_no_preemptor_evicts_a_unit_twice(
    w: dict[str, Any],
) -> None:
    s = _build(w)
    for k, shape in enumerate(w["first"]):
        _submit(s, f"f{k}", shape, 0)
    s.step(now=0)
    for k, (shape, second) in enumerate(w["later"]):
        _submit(s, f"p{k}", shape, 1, second)
    evicted: Counter[tuple[str, int, PodId]] = Counter()
    reclaims: dict[str, bool] = {}
    t = 1.0
    for go, pick in w["events"]:
        noms = {j: s.queue.status(j).nomination for j in s.queue.jobs()}
        # (a pod-level job that started some pods may preempt again for the next ones)
        left = {j: len(s.queue.entry(j).remaining()) for j in s.queue.jobs()}
        r = s.step(now=t)
        for v in r.victims:
            for p in v.pods:
                evicted[(v.preemptor, left[v.preemptor], p)] += 1
        for n in r.nominations:  # (its victims taken by reclaim)
            reclaims[n.job] = any(
                v.reason is VictimReason.RECLAIM for v in r.victims if v.preemptor == n.job
            )
        for jid in r.placed:
            if noms.get(jid) is None or not reclaims.get(jid) or jid != "p0":
                continue
            # it lands only where its tenant's nominal quota holds what it places there
            tenant = s.queue.status(jid).job.tenant
            got: Counter[str] = Counter()
            for b in r.bindings:
                if b.pod.job == jid:
                    got[s.cluster.node(b.node).gpu_model] += b.total_milli
            for m, milli in got.items():
                assert milli <= s.admitter.table.nominal(tenant, m), (jid, m, r)
        t += 1
        if go:  # the victims go
            for te in s.queue.terminating():
                for p in sorted(te.terminating):
                    s.pod_evicted(p, t)
        else:  # some running job ends
            # (a job with pods still to place keeps them: its preemptions stay its own)
            running = [
                j
                for j in s.queue.jobs()
                if s.queue.status(j).running and not s.queue.entry(j).remaining()
            ]
            if running:
                jid = running[pick % len(running)]
                for p in s.queue.status(jid).running:
                    if p not in s.queue.status(jid).terminating:
                        s.pod_finished(p, t)
        t += 1
    assert max(evicted.values(), default=0) <= 1, evicted
    check_invariants(s)
