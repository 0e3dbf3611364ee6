"""Hypothesis stateful test of the whole QSCH loop: submit / cycle / apply / finish / evict /
binding failure / node loss / GPU health / cancel / victims spared, with the design invariants
checked after every step:

- no GPU (or share) allocated twice, no node above its pod capacity (``max_pods``, drawn),
  every index consistent (``check_invariants(scheduler)``);
- a gang is fully bound or not at all (unless its eviction is in progress);
- isolated quota is never exceeded, usage equals what the pods hold;
- victims were running, preemptible, and allowed by their reason;
- bindings go to healthy devices of an allowed GPU model (a fresh result applies cleanly);
- a cycle is deterministic and does not mutate its inputs;
- every submitted job is in exactly one of pending / running / finished / failed, or was
  released from the books after it ended (nothing lost);
- quota is charged exactly for the pods bound, and every bound pod of a job is charged.

Faults (issue 17): old results applied again, times that are not finite or run backwards,
direct node removal (around the facade), lost nodes coming back, absurd sizes (a node or a
job no column or cluster could hold, a job that can never fit), ended jobs acknowledged.
"""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
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
from kant.errors import InvalidTimeError, ValidationError
from kant.model import MAX_PODS_PER_JOB, NodeSpec, VictimReason
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
        self.old_results: list[CycleResult] = []
        self.released = 0

    @initialize(
        policy=st.sampled_from(POLICIES),
        strategy=st.sampled_from(["ebinpack", "spread"]),
        max_pods=st.sampled_from([None, None, 1, 2, 4]),
    )
    def setup(self, policy: str, strategy: str, max_pods: int | None) -> None:
        cluster = (
            ClusterBuilder()
            .leaf("lf0", nodes=1, max_pods=max_pods)
            .leaf("lf1", nodes=1)
            .leaf("lfa", nodes=1, model="A100", max_pods=max_pods)
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
        self.old_results = [*self.old_results[-4:], r]

    @precondition(lambda self: self.old_results)
    @rule(data=st.data(), dt=st.sampled_from([0.0, 1.0]))
    def reapply_old_result(self, data: st.DataObject, dt: float) -> None:
        """An orchestrator retrying: an old result binds nothing no longer current."""
        self.now += dt
        r = data.draw(st.sampled_from(self.old_results))
        before = {e.id: (e.seq, e.version) for e in self.s.queue.entries()}
        rep = self.s.apply(r, self.now)
        for jid in rep.bound:
            assert r.seen[jid] == before[jid], "a stale entry was bound"
        for p in rep.terminating:
            assert r.seen[p.job] == before[p.job], "a new incarnation marked terminating"

    @rule(
        call=st.sampled_from(["step", "schedule", "node_lost", "cancel", "submit", "gpu"]),
        bad=st.sampled_from([math.nan, math.inf, -math.inf, -1.0]),
    )
    def bad_time(self, call: str, bad: float) -> None:
        """A time that is not finite, or runs backwards (-1 before the last), changes
        nothing."""
        s = self.s
        t = self.now - 1.0 if bad == -1.0 else bad
        if t == self.now - 1.0 and not math.isfinite(s.clock):
            return  # nothing seen yet: an earlier time is not backwards
        before = (s.queue.statuses(), s.admitter.usage(), list(s.cluster.pods()), len(s.cluster))
        name = next(iter(sorted(n.name for n in s.cluster.nodes())), "none")
        calls = {
            "step": lambda: s.step(t),
            "schedule": lambda: s.schedule(t),
            "node_lost": lambda: s.node_lost(name, t),
            "cancel": lambda: s.cancel(next(iter(sorted(self.submitted)), "none"), t),
            "submit": lambda: s.submit(job(f"late{self.n}", gpus=1), now=t),
            "gpu": lambda: s.gpu_unhealthy(name, 0, t),
        }
        with pytest.raises((InvalidTimeError, KeyError)):
            calls[call]()
        assert (
            s.queue.statuses(),
            s.admitter.usage(),
            list(s.cluster.pods()),
            len(s.cluster),
        ) == before

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

    @precondition(lambda self: any(e.terminating for e in self.s.queue.running()))
    @rule(data=st.data())
    def victims_spared(self, data: st.DataObject) -> None:
        """The orchestrator gives up evicting some victims (a budget kept them): none that
        a job still waiting for its nomination counts on (pending, or pod-level and running
        with pods left: read here from the phases, not from the queue's index) is spared,
        and the pods spared run on."""
        q = self.s.queue
        going = sorted(p for e in q.running() for p in e.terminating)
        asked = data.draw(st.lists(st.sampled_from(going), min_size=1, unique=True))
        awaited = {
            v
            for w in q.entries()
            if w.nomination is not None
            and (
                w.phase is JobPhase.PENDING
                or (w.phase is JobPhase.RUNNING and not w.job.gang and w.remaining())
            )
            for v in w.nomination.victims
        }
        spared = self.s.victims_spared(asked)
        assert not set(spared) & awaited
        assert set(spared) <= set(asked)
        for p in asked:
            assert (p in q.entry(p.job).terminating) is (p not in spared)

    @precondition(lambda self: self.s.queue.running())
    @rule(data=st.data())
    def binding_failure(self, data: st.DataObject) -> None:
        e = data.draw(st.sampled_from(self.s.queue.running()))
        p = data.draw(st.sampled_from(sorted(e.assigned)))
        self.s.binding_failed(p, self.now, "boom")

    @precondition(lambda self: len(self.s.cluster) > 1)
    @rule(data=st.data(), door=st.sampled_from(["lost", "removed", "direct"]))
    def node_loss(self, data: st.DataObject, door: str) -> None:
        name = data.draw(st.sampled_from([n.name for n in self.s.cluster.nodes()]))
        if door == "lost":
            self.s.node_lost(name, self.now)
        elif door == "removed":
            self.s.node_removed(name, self.now)
        else:  # around the facade: what the node held must still be released
            self.s.cluster.remove_node(name)

    @precondition(lambda self: self.s.lost_nodes())
    @rule(data=st.data())
    def node_back(self, data: st.DataObject) -> None:
        self.s.node_recovered(data.draw(st.sampled_from(self.s.lost_nodes())), self.now)

    @rule(model=st.sampled_from(["H100", "A100"]))
    def node_added(self, model: str) -> None:
        self.extra_nodes += 1
        self.s.node_added(node(f"x{self.extra_nodes}", model=model, leaf="lfx",
                               spine="sp0", superspine="ss0"), self.now)  # fmt: skip

    @rule(what=st.sampled_from(["cpu", "memory", "replicas", "never-fits"]))
    def absurd_size(self, what: str) -> None:
        """What no column or cluster could hold is refused before anything changes; a job that
        can never fit waits (UNSATISFIABLE) without blocking anyone."""
        s = self.s
        if what == "never-fits":
            self.n += 1
            jid = f"j{self.n}"
            s.submit(job(jid, gpus=8, replicas=64, submitted_at=self.now), now=self.now)
            self.submitted.add(jid)
            return
        before = (len(s.cluster), len(s.queue))
        with pytest.raises(ValidationError):
            if what == "replicas":
                s.submit(job("absurd", gpus=1, replicas=MAX_PODS_PER_JOB + 1), now=self.now)
            else:
                field = "cpu_milli" if what == "cpu" else "memory_mib"
                s.node_added(NodeSpec(name="ghost", gpu_model="H100", gpus=8, **{field: 2**63}),
                             self.now)  # fmt: skip
        assert (len(s.cluster), len(s.queue)) == before and "ghost" not in s.cluster

    @precondition(
        lambda self: (
            any(True for _ in self.s.queue.jobs("finished"))
            or any(True for _ in self.s.queue.jobs("failed"))
        )
    )
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        ended = sorted([*self.s.queue.jobs(JobPhase.FINISHED), *self.s.queue.jobs(JobPhase.FAILED)])
        jid = data.draw(st.sampled_from(ended))
        self.s.acknowledge(jid)
        self.submitted.discard(jid)
        self.released += 1

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
        s = self.s
        check_invariants(s)
        counts = s.queue.counts()
        assert sum(counts.values()) == len(s.queue) == len(self.submitted)
        assert s.queue.released == self.released  # nothing lost but what was acknowledged
        held = {p for e in s.queue.entries() for p in e.assigned}
        assert set(s.admitter.charged()) == held == {b.pod for b in s.cluster.pods()}


QSCHMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQSCH = QSCHMachine.TestCase
