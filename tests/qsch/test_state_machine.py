"""Hypothesis stateful test of the whole QSCH loop: submit / cycle / apply / finish / evict /
binding failure / node loss / GPU health / cancel, with the design invariants checked after
every step:

- no GPU (or share) allocated twice, every index consistent (``check_invariants(scheduler)``);
- a gang is fully bound or not at all (unless its eviction is in progress);
- isolated quota is never exceeded, usage equals what the pods hold;
- victims were running, preemptible, and allowed by their reason;
- bindings go to healthy devices of an allowed GPU model (a fresh result applies cleanly);
- a cycle is deterministic and does not mutate its inputs;
- every submitted job is in exactly one of pending / running / finished / failed.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kant.admission import Admitter, Quota
from kant.cycle import CycleResult
from kant.model import VictimReason
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import (
    Backfill,
    Backoff,
    ConservativeBackfill,
    EasyBackfill,
    JobPhase,
    Queue,
)
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job, node

POLICIES = ["strict-fifo", "best-effort-fifo", "backfill", "easy-backfill", "conservative-backfill"]


class QSCHMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.n = 0
        self.extra_nodes = 0
        self.submitted: set[str] = set()

    @initialize(policy=st.sampled_from(POLICIES), strategy=st.sampled_from(["ebinpack", "spread"]))
    def setup(self, policy: str, strategy: str) -> None:
        cluster = (
            ClusterBuilder()
            .leaf("lf0", nodes=1)
            .leaf("lf1", nodes=1)
            .leaf("lfa", nodes=1, model="A100")
            .build()
        )
        pol = {
            "backfill": Backfill(threshold=2),
            "easy-backfill": EasyBackfill(default_runtime=20),
            "conservative-backfill": ConservativeBackfill(default_runtime=20, depth=3),
        }.get(policy, policy)
        self.s = Scheduler(
            cluster,
            queue=Queue(backoff=Backoff(base=2, factor=2, cap=8, max_retries=2)),
            admitter=Admitter(
                [
                    Quota.gpus("a", "H100", 8),
                    Quota.gpus("b", "H100", 8, borrowing_limit=8),
                    Quota.gpus("b", "A100", 8),
                    Quota.gpus("idle", "H100", 16),  # lends to the cohort, never submits
                ],
                modes={"a": "isolated"},
            ),
            placer=Placer(strategy),
            policy=pol,
            preemption=PreemptionPolicy(min_runtime=1.0),
        )

    # ------------------------------------------------------------------ jobs

    @rule(
        gpus=st.sampled_from([1, 2, 4, 8]),
        replicas=st.integers(1, 3),
        gang=st.booleans(),
        tenant=st.sampled_from(["a", "b", "c"]),
        priority=st.integers(0, 2),
        preemptible=st.booleans(),
        models=st.sampled_from(["", "", "", "H100", "H100", "A100", "H100|A100", "B200"]),
        copies=st.integers(1, 3),
        runtime=st.sampled_from([None, 3.0, 10.0]),
        milli=st.sampled_from([0, 0, 0, 500]),
    )
    def submit(
        self, gpus: int, replicas: int, gang: bool, tenant: str, priority: int,
        preemptible: bool, models: str, runtime: float | None, milli: int, copies: int,
    ) -> None:  # fmt: skip
        for _ in range(copies):
            self.n += 1
            jid = f"j{self.n}"
            self.s.submit(
                job(jid, gpus=gpus, gpu_milli=milli, replicas=replicas, gang=gang,
                    tenant=tenant, priority=priority, preemptible=preemptible, models=models,
                    runtime=runtime, submitted_at=self.now),
                now=self.now,
            )  # fmt: skip
            self.submitted.add(jid)

    @precondition(lambda self: self.submitted)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        jid = data.draw(st.sampled_from(sorted(self.submitted)))
        self.s.cancel(jid, self.now)

    # ------------------------------------------------------------------ cycles

    @rule(dt=st.sampled_from([0.0, 1.0, 3.0]))
    def cycle_and_apply(self, dt: float) -> None:
        self.now += dt
        s = self.s
        before_snap = s.cluster.full_snapshot()
        before_pods = list(s.cluster.pods())
        before_queue = s.queue.statuses()
        before_usage = s.admitter.usage()
        r = s.schedule(self.now)
        # non-mutating and deterministic
        assert s.cluster.full_snapshot().same_as(before_snap) == []
        assert list(s.cluster.pods()) == before_pods
        assert s.queue.statuses() == before_queue
        assert s.admitter.usage() == before_usage
        assert s.schedule(self.now) == r
        self._check_result(r)
        rep = s.apply(r, self.now)
        assert rep.stale == ()  # a fresh result applies cleanly: devices free and healthy
        assert set(rep.bound) == set(r.placed)

    def _check_result(self, r: CycleResult) -> None:
        s = self.s
        bound: dict[str, int] = {}
        for b in r.bindings:
            e = s.queue.entry(b.pod.job)
            role = e.job.role(b.pod.role)
            model = s.cluster.node(b.node).gpu_model
            if role.gpu_models and role.resources.total_milli:
                assert model in role.gpu_models
            for g in b.gpus:
                assert s.cluster.gpu_healthy_mask(b.node) >> g & 1
            assert s.cluster.is_healthy(b.node)
            bound[b.pod.job] = bound.get(b.pod.job, 0) + 1
        for jid, n in bound.items():
            e = s.queue.entry(jid)
            if e.job.gang:
                assert n == len(e.remaining()), "gang placed partly"
        for v in r.victims:
            ve = s.queue.entry(v.job)
            pre = s.queue.entry(v.preemptor)
            assert ve.phase is JobPhase.RUNNING and ve.job.preemptible
            assert all(p in ve.assigned and p not in ve.terminating for p in v.pods)
            assert self.now - min(ve.assigned[p] for p in v.pods) >= 1.0  # min runtime
            if ve.job.gang:
                assert set(v.pods) == set(ve.assigned)
            else:
                assert len(v.pods) == 1
            if v.reason is VictimReason.PRIORITY:
                assert ve.job.priority < pre.job.priority
            elif v.reason is VictimReason.RECLAIM:
                assert ve.job.tenant != pre.job.tenant
            else:
                assert isinstance(s.policy, Backfill)
            assert (
                ve.job.tenant == pre.job.tenant
                or s.admitter.table.mode(ve.job.tenant) != "isolated"
            )
        victims = [p for v in r.victims for p in v.pods]
        assert len(victims) == len(set(victims)), "a victim chosen twice"

    # ------------------------------------------------------------------ orchestrator events

    def _running_pods(self) -> list[tuple[str, object]]:
        return [(e.id, p) for e in self.s.queue.running() for p in sorted(e.assigned)]

    @precondition(lambda self: self.s.queue.running())
    @rule(data=st.data(), whole=st.booleans())
    def finish(self, data: st.DataObject, whole: bool) -> None:
        e = data.draw(st.sampled_from(self.s.queue.running()))
        pods = sorted(e.assigned) if whole else [data.draw(st.sampled_from(sorted(e.assigned)))]
        for p in pods:
            if p in e.assigned:
                self.s.pod_finished(p, self.now)

    @precondition(lambda self: any(e.terminating for e in self.s.queue.running()))
    @rule()
    def victims_go(self) -> None:
        for e in self.s.queue.running():
            for p in sorted(e.terminating):
                if p in e.assigned:
                    self.s.pod_evicted(p, self.now)

    @precondition(lambda self: self.s.queue.running())
    @rule(data=st.data())
    def binding_failure(self, data: st.DataObject) -> None:
        e = data.draw(st.sampled_from(self.s.queue.running()))
        p = data.draw(st.sampled_from(sorted(e.assigned)))
        self.s.binding_failed(p, self.now, "boom")

    @precondition(lambda self: len(self.s.cluster) > 1)
    @rule(data=st.data())
    def node_loss(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from([n.name for n in self.s.cluster.nodes()]))
        self.s.node_lost(name, self.now)

    @rule(model=st.sampled_from(["H100", "A100"]))
    def node_added(self, model: str) -> None:
        self.extra_nodes += 1
        self.s.cluster.add_node(node(f"x{self.extra_nodes}", model=model, leaf="lfx",
                                     spine="sp0", superspine="ss0"))  # fmt: skip

    @rule(data=st.data(), healthy=st.booleans(), evict=st.booleans())
    def gpu_health(self, data: st.DataObject, healthy: bool, evict: bool) -> None:
        spec = data.draw(st.sampled_from(list(self.s.cluster.nodes())))
        gpu = data.draw(st.integers(0, spec.gpus - 1))
        if healthy:
            self.s.gpu_healthy(spec.name, gpu)
        else:
            self.s.gpu_unhealthy(spec.name, gpu, self.now, evict=evict)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "s"):
            return
        check_invariants(self.s)
        counts = self.s.queue.counts()
        assert sum(counts.values()) == len(self.s.queue) == len(self.submitted)


QSCHMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQSCH = QSCHMachine.TestCase
