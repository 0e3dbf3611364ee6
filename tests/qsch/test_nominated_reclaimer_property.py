"""A Hypothesis search over small two-model clusters with quotas and preemption on: a
reclaimer holding its nomination (``Nomination.within_nominal``) never takes its tenant's
use over nominal on a model it starts on, and no preemptor evicts a unit twice for one
need, nor in two cycles (a pod-level job that started some pods, or lost some to
preemption, may preempt again for the next ones). The reclaimer's tenant may also submit a
higher-priority job that takes the nominal share its nomination holds devices on: the
reclaimer is then placed as any job, may start borrowing, and must still evict for one
need once.

A pod-level reclaimer whose pods left would borrow reclaims for its nominal part only (the
first pods its tenant's nominal quota left holds on one of its models, the quota held for
the rival's nomination counted as used): the pods beyond it, its borrowed rest, are a
borrower with a turn of its own in the same cycle, bound after the nominal part, and may
borrow (docs/qsch.md, "Pod-level preemptors"). Those pods, and those alone, are left out
of the first check (the @example where f0 ends while its reclaimed pod terminates: p0's
nominal pod starts on the GPUs f0 left, and its rest borrows 2 GPUs; and the next one).

A pod-level reclaimer whose search placed only its first pods, on two models, is decided
on all its pods, whose nominal models may leave one of those out: it is placed within its
tenant's nominal quota left on each model (the last @example)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import attrs
import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from kant.admission import Quota
from kant.model import PodId, Resources, Role
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
    # one later job of tenant a, and maybe a rival: a's 1-pod priority-5 job submitted
    # before the given event's step (event index, GPUs, model), which may take a's nominal
    # share where the later job's nomination holds devices
    shape = draw(shapes)
    later = [(("a", *shape[1:]), draw(second))]
    rival = draw(
        st.none() | st.tuples(st.integers(0, 3), st.sampled_from((4, 8)), st.sampled_from(MODELS))
    )
    events = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=4, max_size=8))
    return {"nodes": nodes, "nominal": nominal, "first": first, "later": later,
            "rival": rival, "events": events}  # fmt: skip


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


# CI runs 20; KANT_RECLAIMER_EXAMPLES raises the count for an offline sweep, e.g.
#   for n in $(seq 0 40); do KANT_RECLAIMER_EXAMPLES=500 python -m pytest -q \
#     tests/qsch/test_nominated_reclaimer_property.py --hypothesis-seed=$n; done
@settings(
    max_examples=int(os.environ.get("KANT_RECLAIMER_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_worlds())
@example(  # tests/qsch/test_nominated_reclaimer.py's first scenario, one 4-GPU node a model
    {
        "nodes": {"H100": [4], "A100": [4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 4, ("c", "A100"): 8},
        "first": [("b", 0, 1, 4, False, "H100"), ("c", 0, 4, 1, True, "A100")],
        "later": [(("a", 0, 4, 1, True, "H100|A100"), None)],
        "rival": None,
        "events": [(False, 1), (False, 0), (True, 0), (False, 0)],
    }
)
@example(  # ..._own_tenant_took_its_nominated_models_nominal_share_starts_there_and_evicts_no_more
    {
        "nodes": {"H100": [8, 8], "A100": [8]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 8, ("a", "A100"): 8, ("b", "H100"): 8, ("b", "A100"): 8},
        "first": [
            ("c", 0, 1, 8, False, "H100"),
            ("b", 0, 8, 1, True, "H100"),
            ("c", 1, 8, 1, True, "A100"),
        ],
        "later": [(("a", 1, 8, 1, True, "H100|A100"), None)],
        "rival": (1, 8, "H100"),
        "events": [(False, 1), (True, 0), (False, 7), (False, 7)],
    }
)
@example(  # p0 reclaims a pod of f0 for its second pod (its third would borrow); f0 ends
    # while that pod terminates: p0's second pod starts, within nominal, and its third,
    # its borrowed rest, at its turn, borrowing
    {
        "nodes": {"H100": [8], "A100": [4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 4, ("c", "H100"): 4},
        "first": [("b", 0, 2, 3, False, "H100")],
        "later": [(("a", 0, 2, 3, False, "H100"), None)],
        "rival": None,
        "events": [(False, 0), (False, 0), (False, 0), (False, 0)],
    }
)
@example(  # ... with a's rival holding 4 of a's 8 A100 GPUs of nominal quota for its
    # nomination: p0's nominal part is one pod, and its second, its rest, borrows on H100
    {
        "nodes": {"H100": [8, 8], "A100": [4, 4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 4, ("a", "A100"): 8, ("c", "H100"): 8},
        "first": [
            ("b", 0, 1, 1, False, "H100"),
            ("b", 0, 1, 1, False, "H100"),
            ("b", 0, 1, 1, False, "A100"),
            ("b", 0, 2, 2, False, "A100"),
            ("b", 0, 2, 4, False, "H100"),
        ],
        "later": [(("a", 0, 4, 2, False, "H100|A100"), None)],
        "rival": (0, 4, "A100"),
        "events": [(False, 0), (False, 3), (False, 0), (False, 0)],
    }
)
@example(  # a reclaiming gang nominated on a fit within nominal that is not quota's first
    # (workers on H100, its 1-GPU pod on A100): it starts there, not borrowing on H100
    {
        "nodes": {"H100": [4, 8], "A100": [4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 8, ("a", "A100"): 8, ("c", "H100"): 4},
        "first": [("b", 0, 1, 1, False, "H100")] * 3 + [("b", 0, 2, 1, False, "H100")],
        "later": [(("a", 0, 4, 2, False, "H100|A100"), (1, 1, "H100|A100"))],
        "rival": None,
        "events": [(True, 0), (False, 0), (False, 0), (False, 0)],
    }
)
@example(  # ... and, while its victims terminate, quota's choice is a fit the free H100 GPUs
    # hold that borrows: it waits for them
    {
        "nodes": {"H100": [4, 4], "A100": [4, 4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 4, ("a", "A100"): 8, ("c", "H100"): 4, ("c", "A100"): 4},
        "first": [("b", 0, 1, 1, False, "H100")] * 3 + [("b", 0, 1, 1, False, "A100")] * 2,
        "later": [(("a", 0, 4, 2, False, "H100|A100"), (1, 1, "H100|A100"))],
        "rival": None,
        "events": [(False, 0), (False, 0), (False, 0), (False, 0)],
    }
)
@example(  # f4, of c, evicts its own f2 by priority for a pod that borrows on A100, while c's
    # nominal quota left holds one pod on H100 alone: f4 starts that pod on the A100 GPUs
    # its nomination holds, and f2 is not evicted a second time
    {
        "nodes": {"H100": [4], "A100": [4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("b", "H100"): 4, ("b", "A100"): 4, ("c", "H100"): 4},
        "first": [
            ("b", 0, 1, 1, False, "H100"),
            ("b", 1, 1, 1, False, "H100"),
            ("c", 0, 1, 1, False, "A100"),
            ("b", 0, 1, 1, False, "A100"),
            ("c", 1, 2, 3, False, "H100|A100"),
        ],
        "later": [(("a", 0, 1, 1, False, "H100"), None)],
        "rival": None,
        "events": [(False, 3), (True, 0), (False, 0), (False, 0)],
    }
)
@example(  # f0, a gang of b, reclaims a pod of f2 and is nominated 2 GPUs on each model;
    # the pod starts again on the A100 GPUs left, and f0, counted at its 4 GPUs on A100,
    # reclaimed again: it is now admitted at the 2 its nomination takes there
    {
        "nodes": {"H100": [4], "A100": [4, 4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("b", "H100"): 4, ("b", "A100"): 4, ("c", "H100"): 4, ("c", "A100"): 4},
        "first": [
            ("b", 0, 1, 4, True, "H100|A100"),
            ("c", 0, 1, 1, False, "H100"),
            ("c", 1, 2, 3, False, "A100"),
        ],
        "later": [(("a", 0, 1, 1, False, "H100"), None)],
        "rival": None,
        "events": [(True, 0), (False, 0), (False, 0), (False, 0)],
    }
)
@example(  # p0's search placed 2 of its 4 pods, one on each model, and its 4 pods are
    # within nominal on H100 alone; f1 ends: 2 start on A100 (all 4 did, 8 GPUs of a's 4)
    {
        "nodes": {"H100": [4, 4], "A100": [4, 4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 8, ("a", "A100"): 4, ("b", "H100"): 4}
        | {("c", "H100"): 4, ("c", "A100"): 4},
        "first": [
            ("b", 0, 1, 1, False, "H100"),
            ("b", 0, 1, 1, False, "A100"),
            ("b", 0, 2, 3, False, "H100"),
        ],
        "later": [(("a", 0, 2, 4, False, "H100|A100"), None)],
        "rival": None,
        "events": [(False, 1), (False, 0), (False, 0), (False, 0)],
    }
)
@example(  # the same for a pod-level p0: its last pod, nominated on A100, starts on a free
    # H100 GPU once a's rival (priority 5, 4 A100 GPUs) holds a's A100 nominal share
    {
        "nodes": {"H100": [4], "A100": [8]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "A100"): 4, ("c", "H100"): 4, ("c", "A100"): 4},
        "first": [("b", 0, 1, 1, False, "H100")] * 4 + [("b", 0, 2, 3, True, "A100")],
        "later": [(("a", 0, 1, 3, False, "H100|A100"), None)],
        "rival": (1, 4, "A100"),
        "events": [(False, 0), (False, 0), (False, 0), (False, 0)],
    }
)
@example(  # a's rival (priority 5, 8 A100 GPUs) is nominated, walked before p0, on the
    # A100 devices p0's victims free, its quota held taking a's A100 nominal share: p0, a
    # gang whose second role was nominated on A100, is placed as any job and starts it on
    # a free H100 GPU, borrowing (the property used to read that as a reclaimer borrowing)
    {
        "nodes": {"H100": [4, 4], "A100": [4, 8]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 4, ("a", "A100"): 4, ("c", "H100"): 4, ("c", "A100"): 8},
        "first": [("b", 0, 2, 2, False, "H100"), ("b", 0, 4, 3, True, "A100")],
        "later": [(("a", 0, 2, 2, False, "H100"), (1, 1, "H100|A100"))],
        "rival": (0, 8, "A100"),
        "events": [(False, 0), (False, 0), (False, 0), (False, 0)],
    }
)
@example(  # p0, a gang of three 1-GPU pods and two 4-GPU pods on H100|A100, reclaims b's
    # A100 pod, nominated its first role on H100 and its second on A100 (within a's 8 + 8
    # nominal); no fit quota chooses among held it within nominal where it holds devices,
    # so it was placed as any job and started all 11 GPUs on H100 while its victim still
    # went. It is capped at its nomination's split now (seed 250, 500 examples)
    {
        "nodes": {"H100": [4, 8], "A100": [4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 8, ("a", "A100"): 8, ("c", "H100"): 4, ("c", "A100"): 4},
        "first": [
            ("b", 0, 1, 1, False, "H100"),
            ("b", 0, 1, 1, False, "H100"),
            ("b", 0, 1, 2, False, "A100"),
        ],
        "later": [(("a", 0, 1, 3, False, "H100|A100"), (4, 2, "H100|A100"))],
        "rival": None,
        "events": [(False, 0), (False, 0), (False, 0), (False, 0)],
    }
)
@example(  # p0 (three 2-GPU pods, a's 4 nominal H100) reclaims f0's first 4-GPU pod for its
    # first two; f0's second pod ends and they start there, the victim still going. The
    # victim's devices were held again for p0's third pod, its borrowed rest, under the
    # nomination made within nominal for the first two: p0 started it borrowing as a
    # reclaimer. A pod-level preemptor started in part holds again only as many devices as
    # its nominated pods not started (seed 286, 500 examples)
    {
        "nodes": {"H100": [8], "A100": [4]},
        "nominal": {(t, m): 0 for t in TENANTS for m in MODELS}
        | {("a", "H100"): 4, ("c", "H100"): 4},
        "first": [("b", 0, 4, 2, False, "H100")],
        "later": [(("a", 0, 2, 3, False, "H100"), None)],
        "rival": None,
        "events": [(False, 0), (False, 0), (True, 0), (False, 0)],
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
    # a need: a job, the pods it has left to place, and how many of its own pods it has lost
    # to preemption (a job that lost a started pod needs it again)
    evicted: Counter[tuple[str, int, int, PodId]] = Counter()
    rounds: Counter[tuple[str, int, int]] = Counter()  # cycles in which it evicted, a need
    lost: Counter[str] = Counter()
    t = 1.0
    for k, (go, pick) in enumerate(w["events"]):
        if w["rival"] is not None and w["rival"][0] == k:
            _, gpus, model = w["rival"]
            s.submit(
                job("r", tenant="a", priority=5, gpus=gpus, models=model, submitted_at=t), now=t
            )
        noms = {j: s.queue.status(j).nomination for j in s.queue.jobs()}
        # while a's rival holds no GPUs, p0 is a's only job: a stays within nominal where
        # p0's nomination holds devices (a reclaimer is narrowed onto its nominal models)
        alone = "r" not in noms or not s.queue.status("r").running
        # (a pod-level job that started some pods may preempt again for the next ones)
        need = {j: (j, len(s.queue.entry(j).remaining()), lost[j]) for j in s.queue.jobs()}
        todo = need["p0"][1] if "p0" in need else 0  # p0's pods left to place
        r = s.step(now=t)
        # (a job placed in part preempts after its placement, for the pods left: its need
        # is then those)
        started = Counter(b.pod.job for b in r.bindings)
        for j, n in started.items():
            need[j] = (j, need[j][1] - n, need[j][2])
        for v in r.victims:
            for p in v.pods:
                evicted[(*need[v.preemptor], p)] += 1
            lost[v.job] += len(v.pods)
        rounds.update({need[v.preemptor] for v in r.victims})
        nom = noms.get("p0")
        mine = [i for i, b in enumerate(r.bindings) if b.pod.job == "p0"]
        # (nor has it started before p0 in this cycle)
        alone = alone and not any(b.pod.job == "r" for b in r.bindings[: mine[0] if mine else 0])
        # (nor, for a gang, been nominated, walked before p0 by its priority: its quota held
        # may take the nominal share p0's nomination holds devices on, and p0 is then placed
        # as any job, docs/qsch.md rule 5 of "How a reclaimer is placed"; a pod-level p0
        # counts that quota below)
        if "r" in noms and s.queue.status("p0").job.gang:
            alone = alone and s.queue.status("r").nomination is None
        if mine and nom is not None and nom.within_nominal and alone:
            # a's use stays within nominal on each model p0's reclaiming pods start on: a's
            # pods running there (p0's, started now or before), less its pods still
            # terminating (victims, charged until they go), the rival's pods bound after
            # p0's in this cycle, and p0's borrowed rest
            model_of = {i: s.cluster.node(r.bindings[i].node).gpu_model for i in mine}
            use: Counter[str] = Counter()
            for j in s.queue.jobs():
                status = s.queue.status(j)
                if status.job.tenant == "a":
                    for p in status.running:
                        if p not in status.terminating:
                            b = s.cluster.binding(p)
                            use[s.cluster.node(b.node).gpu_model] += b.total_milli
            for b in r.bindings[mine[-1] + 1 :]:
                if b.pod.job == "r":
                    use[s.cluster.node(b.node).gpu_model] -= b.total_milli
            # (a pod-level p0 whose pods left would borrow starts its nominal part, the
            # first pods a's nominal quota left holds on one of its models, and then its
            # borrowed rest, a borrower at its own turn in the same cycle, bound after it:
            # docs/qsch.md, "Pod-level preemptors". Only the nominal part reclaims)
            status = s.queue.status("p0")
            if not status.job.gang:
                (role,) = status.job.roles
                per_pod = role.resources.total_milli
                kept = [i for i in mine if r.bindings[i].pod not in status.terminating]
                before = use.copy()  # (a's use at p0's turn: the rival's held quota too)
                for i in kept:
                    before[model_of[i]] -= per_pod
                rn = s.queue.status("r").nomination if "r" in noms else None
                rival = rn is not None
                if rn is not None:
                    for b in rn.bindings:
                        before[s.cluster.node(b.node).gpu_model] += b.total_milli
                held = max(
                    (s.admitter.table.nominal("a", m) - before[m]) // per_pod
                    for m in role.gpu_models
                )
                if held <= 0 and rival:
                    # (the rival's held quota took all of a's nominal share left: p0 is
                    # placed as any job, docs/qsch.md rule 5 of "How a reclaimer is placed")
                    mine = []
                elif 0 < held < todo:
                    for i in mine[held:]:
                        if i in kept:
                            use[model_of[i]] -= per_pod
                    mine = mine[:held]
            for m in {model_of[i] for i in mine}:
                assert use[m] <= s.admitter.table.nominal("a", m), (m, use, r)
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
    assert max(rounds.values(), default=0) <= 1, rounds
    check_invariants(s)
