"""Hypothesis state machine of preemption and quota under contention (issue 12).

Tenants ``a`` and ``b`` share a cohort (8 GPUs nominal each), ``iso`` is isolated (8 GPUs,
rarely used), and the cluster has idle capacity outside the cohort (32 GPUs in all); the
same runs also go without quotas (priority preemption alone), and on two GPU models with
quotas per tenant x model (jobs asking one model or either). Jobs
borrow, carry priorities 0-2, are gangs or pod-level; the orchestrator evicts every victim
right after each cycle. The two leaves are labelled ``rack: r0`` and ``rack: r1``, and half the
jobs select one of them. For every run:

- no preemptor evicts a pod again unless a job ended after that pod started again (a pod
  started again on room its preemptor could not use yet may be taken back once a job's end
  makes the preemptor's need satisfiable; with nothing ended it would be a livelock);
- a preemptor whose victims are gone is bound within 3 cycles (for a pod-level preemptor:
  it places pods), unless it was cancelled;
- no eviction frees capacity that sits unused while its preemptor is bound: when a
  preemptor is placed (and no job finished meanwhile, nor, under Strict FIFO, any
  nomination was dropped), each of its victims has a device in
  use again, or putting the victim back would break a quota (it was evicted for quota, not
  capacity).
"""

from __future__ import annotations

import os

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kant.admission import Admitter, Quota
from kant.cycle import CycleResult
from kant.model import Binding, NodeSelector, PodId, ReasonCode, Victim
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import JobPhase, Queue
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job

BIND_WITHIN = 3


def _racks() -> ClusterState:
    """The machines' cluster: two leaves of two 8-GPU nodes, labelled ``rack: r0`` and
    ``rack: r1``."""
    return (
        ClusterBuilder()
        .leaf("lf0", nodes=2, labels={"rack": "r0"})
        .leaf("lf1", nodes=2, labels={"rack": "r1"})
        .build()
    )


class ContentionMachine(RuleBasedStateMachine):
    policy = "best-effort-fifo"
    quotas = True  # False: no quotas (priority preemption alone)
    models: tuple[str, ...] = ("H100",)  # the cluster's GPU models
    bind_within: int | None = BIND_WITHIN
    drops_change = False  # a dropped nomination counts as a job finishing

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.n = 0
        self.cycle = 0
        self.evictions: dict[tuple[str, str], int] = {}  # (victim, preemptor) -> evictions
        self.ended = 0  # jobs finished so far
        self.started: dict[PodId, int] = {}  # pod -> jobs finished when it last started
        self.evicted: set[tuple[PodId, str]] = set()  # (pod, preemptor) evictions seen
        # preemptor -> (cycle its victims were gone, its victims with their bindings)
        self.waiting: dict[str, tuple[int, list[tuple[Victim, tuple[Binding, ...]]]]] = {}
        self.changed: set[str] = set()  # preemptors that saw a job finish while waiting

    @initialize(strategy=st.sampled_from(["ebinpack", "spread"]), others_first=st.booleans())
    def setup(self, strategy: str, others_first: bool) -> None:
        self.s = Scheduler(
            self._cluster(),
            queue=Queue(),
            admitter=(
                Admitter(self._quotas(), modes={"iso": "isolated"}) if self.quotas else Admitter()
            ),
            placer=Placer(strategy),
            policy=self.policy,
            preemption=PreemptionPolicy(reclaim_others_first=others_first),
        )

    def _cluster(self) -> ClusterState:
        return _racks()

    def _quotas(self) -> list[Quota]:
        """The quotas (when :attr:`quotas`; ``iso`` is isolated)."""
        return [Quota.gpus(t, "H100", 8) for t in ("a", "b", "iso")]

    @rule(
        gpus=st.sampled_from([2, 4, 8]),
        replicas=st.integers(1, 2),
        gang=st.booleans(),
        tenant=st.sampled_from(["a", "a", "b", "b", "iso"]),
        priority=st.integers(0, 2),
        rack=st.sampled_from([None, None, "r0", "r1"]),
    )
    def submit(
        self, gpus: int, replicas: int, gang: bool, tenant: str, priority: int, rack: str | None
    ) -> None:
        self.n += 1
        sel = None if rack is None else NodeSelector.labels(rack=rack)
        self.s.submit(
            job(f"j{self.n}", gpus=gpus, replicas=replicas, gang=gang, tenant=tenant,
                priority=priority, submitted_at=self.now, selector=sel),
            now=self.now,
        )  # fmt: skip

    @rule(dt=st.sampled_from([1.0, 5.0]))
    def cycle_and_evict(self, dt: float) -> None:
        self.now += dt
        self.cycle += 1
        s = self.s
        r = s.schedule(self.now)
        held = {
            v.pods: tuple(s.cluster.binding(p) for p in v.pods) for v in r.victims
        }  # before they go
        s.apply(r, self.now)
        for b in r.bindings:
            self.started[b.pod] = self.ended
        if r.dropped_nominations and self.drops_change:
            # a nomination given up frees the room and quota it held: the waiting
            # preemptors' victims may then be needless
            self.changed.update(self.waiting)
        for jid in r.placed:
            if jid in self.waiting:
                if jid not in self.changed:
                    self._check_no_idle_victim(jid)
                del self.waiting[jid]
                self.changed.discard(jid)
        for v in r.victims:
            k = (v.job, v.preemptor)
            self.evictions[k] = self.evictions.get(k, 0) + 1
            for p in v.pods:
                again = (p, v.preemptor) in self.evicted
                assert not again or self.started.get(p, -1) < self.ended, (
                    f"{p} evicted again by {v.preemptor} with no job ended since it started"
                )
                self.evicted.add((p, v.preemptor))
            _c, vs = self.waiting.setdefault(v.preemptor, (self.cycle, []))
            vs.append((v, held[v.pods]))
        # (this cycle's own victims are checked even when it gave a Strict FIFO nomination
        # up: the cycle gives back those that what the nomination held made needless)
        for v in r.victims:  # the orchestrator stops every victim at once
            for p in v.pods:
                e = s.queue.get(p.job)
                if e is not None and p in e.assigned:
                    s.pod_evicted(p, self.now)
        for jid, (since, _vs) in list(self.waiting.items()):
            st_ = s.queue.status(jid)
            if st_.phase in (JobPhase.FINISHED, JobPhase.FAILED):
                del self.waiting[jid]
                continue
            if self.bind_within is not None:
                assert self.cycle - since <= self.bind_within, f"preemptor {jid} not bound"

    def _check_no_idle_victim(self, jid: str) -> None:
        s = self.s
        pre = s.queue.entry(jid).job
        used = {(b.node, g) for b in s.cluster.pods() for g in b.gpus}
        for v, bindings in self.waiting[jid][1]:
            if any((b.node, g) in used for b in bindings for g in b.gpus):
                continue
            # every device it held is idle: it must have been needed for quota
            led = s.admitter.ledger()
            tenant = s.queue.entry(v.job).job.tenant
            for b in bindings:
                led.add(tenant, s.cluster.node(b.node).gpu_model or "", b.total_milli)
            tb = led.table
            over = any(c > tb.pool.get(m, 0) for m, c in led.cohort.items())
            for m in self.models:
                over = over or led.used(pre.tenant, m) > tb.nominal(pre.tenant, m)
                over = over or led.used(tenant, m) > tb.ceiling(tenant, m)
            assert over, f"victim {v.job} of {jid} freed capacity that sits unused"

    @precondition(lambda self: self.s.queue.running())
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        e = data.draw(st.sampled_from(self.s.queue.running()))
        for p in sorted(e.assigned):
            self.s.pod_finished(p, self.now)
        self.ended += 1
        self.changed.update(self.waiting)

    @invariant()
    def consistent(self) -> None:
        if hasattr(self, "s"):
            check_invariants(self.s)


# Randomized: a different set of runs each time, no example database. CI runs 200 (a few
# seconds); KANT_CONTENTION_EXAMPLES raises the count for an offline sweep, e.g.
#   for n in $(seq 0 29); do KANT_CONTENTION_EXAMPLES=600 python -m pytest -q \
#     tests/qsch/test_contention_machine.py --hypothesis-seed=$n; done
ContentionMachine.TestCase.settings = settings(
    derandomize=False,
    database=None,
    max_examples=int(os.environ.get("KANT_CONTENTION_EXAMPLES", "200")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestContention = ContentionMachine.TestCase


class _StrictFifo:
    """A machine's runs under Strict FIFO (put before the machine's class). A preemptor may
    wait longer here: behind a head that arrived after it preempted, it gives up its
    nomination and waits its turn (what it gave up may leave another preemptor's victims
    needless, as a job ending does)."""

    policy = "strict-fifo"
    bind_within: int | None = None
    drops_change = True


class StrictContentionMachine(_StrictFifo, ContentionMachine):
    """The same runs under Strict FIFO."""


StrictContentionMachine.TestCase.settings = ContentionMachine.TestCase.settings
TestStrictContention = StrictContentionMachine.TestCase


class NoQuotaContentionMachine(ContentionMachine):
    """The same runs with no quotas (priority preemption alone, the usual set-up of a
    cluster without tenants' shares): a victim is then taken for devices alone, so every
    victim of a preemptor bound has a device in use again."""

    quotas = False


NoQuotaContentionMachine.TestCase.settings = ContentionMachine.TestCase.settings
TestNoQuotaContention = NoQuotaContentionMachine.TestCase


class StrictNoQuotaContentionMachine(_StrictFifo, NoQuotaContentionMachine):
    """Strict FIFO with no quotas."""


StrictNoQuotaContentionMachine.TestCase.settings = ContentionMachine.TestCase.settings
TestStrictNoQuotaContention = StrictNoQuotaContentionMachine.TestCase


class TwoModelContentionMachine(ContentionMachine):
    """The same runs on two GPU models, two 4-GPU H100 and two 4-GPU A100 nodes: ``a``
    has 4 H100 and 2 A100 GPUs nominal, ``b`` 2 and 4, ``iso`` (isolated) 2 H100; jobs of
    1 to 4 GPUs a pod ask for one model or either (cross-pool admission, reclaim on the
    model a preemptor runs on)."""

    models = ("H100", "A100")

    def _cluster(self) -> ClusterState:
        return (
            ClusterBuilder()
            .leaf("lh", nodes=2, model="H100", gpus=4)
            .leaf("la", nodes=2, model="A100", gpus=4)
            .build()
        )

    def _quotas(self) -> list[Quota]:
        nominal = {("a", "H100"): 4, ("a", "A100"): 2, ("b", "H100"): 2, ("b", "A100"): 4,
                   ("iso", "H100"): 2}  # fmt: skip
        return [Quota.gpus(t, m, n) for (t, m), n in nominal.items()]

    @rule(
        gpus=st.sampled_from([1, 2, 4]),
        replicas=st.integers(1, 2),
        gang=st.booleans(),
        tenant=st.sampled_from(["a", "a", "b", "b", "iso"]),
        priority=st.integers(0, 2),
        rack=st.sampled_from(["H100", "A100", "H100|A100", "A100|H100"]),
    )
    def submit(
        self, gpus: int, replicas: int, gang: bool, tenant: str, priority: int, rack: str | None
    ) -> None:
        """(``rack``: the GPU models the job asks for; ``iso``'s jobs ask H100.)"""
        self.n += 1
        self.s.submit(
            job(f"j{self.n}", gpus=gpus, replicas=replicas, gang=gang, tenant=tenant,
                priority=priority, submitted_at=self.now,
                models="H100" if tenant == "iso" or rack is None else rack),
            now=self.now,
        )  # fmt: skip


TwoModelContentionMachine.TestCase.settings = ContentionMachine.TestCase.settings
TestTwoModelContention = TwoModelContentionMachine.TestCase


class StrictTwoModelContentionMachine(_StrictFifo, TwoModelContentionMachine):
    """Strict FIFO on two GPU models."""


StrictTwoModelContentionMachine.TestCase.settings = ContentionMachine.TestCase.settings
TestStrictTwoModelContention = StrictTwoModelContentionMachine.TestCase


def test_two_reclaims_in_one_cycle_free_no_capacity_that_then_sits_idle() -> None:
    # Found by this machine: j3 reclaims a pod of a's j2 for quota and is nominated the
    # devices it frees; in the same cycle j4 (held to rack r0) must take a's 8-GPU gang j1
    # whole for 4 GPUs of quota, which leaves j2's pod needless. It is given back (j3 is
    # placed again away from it and waits for j1's pods), so its devices do not sit idle
    # while it is placed again elsewhere.
    m = ContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=True, gpus=4, priority=0, rack=None, replicas=2, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack="r1", replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="b")
    m.submit(gang=False, gpus=2, priority=0, rack="r0", replicas=2, tenant="b")
    m.submit(gang=False, gpus=2, priority=1, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="iso")
    m.submit(gang=False, gpus=2, priority=1, rack=None, replicas=1, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.cycle_and_evict(dt=1.0)  # (asserts: no victim's capacity sits idle)


def test_a_victim_is_given_back_beside_a_later_nomination_held_whole_on_its_node() -> None:
    # Found by the Strict FIFO machine in CI: a runs the whole cohort (j1, an 8-GPU gang;
    # j2's last 2-GPU pod on lf0-n0; j4). a's j6 (priority 1) evicts j2's pod by priority
    # for quota; later in the cycle b's j5 reclaims j1 whole, which leaves a within its
    # nominal quota with j2's pod running. j5's nomination lies on lf0-n0 too, on devices
    # free beside j2's pod, and the give-back used to refuse any victim on a node another
    # nomination of the cycle uses: j2's pod was evicted and its devices sat idle. A
    # nomination held whole there waits for nothing of the victim's, so it is given back.
    m = StrictContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=True, gpus=4, priority=0, rack=None, replicas=2, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="b")
    m.submit(gang=False, gpus=2, priority=1, rack="r1", replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="b")
    m.submit(gang=False, gpus=2, priority=1, rack=None, replicas=1, tenant="a")
    m.cycle_and_evict(dt=1.0)
    assert m.evictions == {("j2", "j3"): 1, ("j1", "j5"): 1}  # j2's last pod given back
    m.cycle_and_evict(dt=1.0)  # (asserts: no victim's capacity sits idle)
    # j2's evicted pod starts again, borrowing b's unused quota: j2 (smaller) is ahead of a's
    # requeued j1 in the order, and no job of a passes an earlier one of a's. (It used to
    # wait "behind j1 (tenant quota)": j1, refused by quota, was walked before it.)
    assert len(m.s.queue.entry("j2").assigned) == 2
    assert {"j5", "j6"} <= {e.job.id for e in m.s.queue.running()}


def test_a_victim_chosen_before_a_nomination_is_given_up_in_its_cycle_is_not_evicted_for_nothing() -> (
    None
):
    # Found by the Strict FIFO machine (seed 0). t=3: b's j6 (priority 2) evicts b's j1's
    # last pod; b's j4 (priority 1), nominated lf0-n0's GPUs 0-3 a cycle earlier, its victim
    # gone, is held behind j6 by b's quota. Its nomination was given up at the end of the
    # walk, after a's j5 (2 GPUs, priority 0) had found those GPUs held and reclaimed a pod
    # of b's j3; the next cycle j5 and j3's pod started on lf0-n0 and the 2 GPUs j3's pod
    # left on lf0-n1 sat idle. It is now given up at j4's turn: j5 starts on those GPUs.
    m = StrictContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=False, gpus=4, priority=0, rack=None, replicas=2, tenant="b")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=1, rack=None, replicas=2, tenant="a")
    m.submit(gang=False, gpus=2, priority=1, rack=None, replicas=2, tenant="b")
    m.submit(gang=False, gpus=4, priority=1, rack=None, replicas=1, tenant="b")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=2, rack=None, replicas=2, tenant="b")
    r = m.s.schedule(m.now + 1.0)
    assert r.dropped_nominations == ("j4",)
    assert [v.job for v in r.victims] == ["j1"]
    assert [(b.pod.job, b.node) for b in r.bindings] == [("j5", "lf0-n0")]
    m.cycle_and_evict(dt=1.0)
    assert ("j3", "j5") not in m.evictions
    m.cycle_and_evict(dt=1.0)  # (asserts: no victim's capacity sits idle)


def _finish(m: ContentionMachine, jid: str) -> None:
    e = m.s.queue.entry(jid)
    for p in sorted(e.assigned):
        m.s.pod_finished(p, m.now)
    m.ended += 1
    m.changed.update(m.waiting)


def test_a_pod_level_preemptor_does_not_evict_the_same_pod_again_for_its_next_pod() -> None:
    # Found by this machine in CI: j5 (a, priority 1, two 8-GPU pods) evicts the first pod
    # of a's j4 (priority 0, two 4-GPU pods) for quota, nominated for its own first pod on a
    # free node (its second would still borrow too much). b's j3 then ends; j5 starts its
    # first pod, and used to wait a cycle to preempt for its second: j4's evicted pod started
    # again on the quota left, and j5 evicted both of j4's pods the next cycle (j4's first pod
    # twice). Now j5 takes j4's second pod in the cycle its first pod starts.
    m = ContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="iso")
    m.cycle_and_evict(dt=1.0)
    _finish(m, "j1")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="b")
    m.submit(gang=False, gpus=4, priority=0, rack=None, replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=8, priority=1, rack=None, replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    _finish(m, "j3")
    m.cycle_and_evict(dt=1.0)
    m.cycle_and_evict(dt=1.0)  # (asserts: no pod evicted again by its preemptor for nothing)
    assert m.evictions == {("j4", "j5"): 2}  # each of j4's pods once
    assert m.s.queue.status("j5").running == tuple(
        PodId(job="j5", role="worker", index=i) for i in (0, 1)
    )
    assert m.s.queue.status("j4").running == ()


def test_a_victim_started_again_on_room_its_preemptor_cannot_use_yet_is_taken_again_once_a_job_ends() -> (
    None
):
    # Found by this machine in CI (a random seed): b's j6 (priority 1, two 8-GPU pods)
    # evicts both 4-GPU pods of b's j1 (priority 0) by priority for its first pod. Once a's
    # j4 ends, j6 starts that pod; its second would take b to 18 GPUs of the cohort's 16
    # (a's j5 runs 2) and the only pod of b's it could evict is j3's 2 GPUs: it waits, and
    # j1's first pod starts again on the 4 GPUs of quota left, as a lower-priority job
    # that fits is started past one that does not (Kueue's BestEffortFIFO, Slurm's
    # backfill of a blocked partition). When j5 ends, j6's second pod needs 6 GPUs more
    # than are free: it evicts j1's pod (again) and j3. A third eviction of j1 by j6, but
    # no livelock: a job ended between j1's start and its eviction, and without that end
    # j6 could not have used j1's room.
    m = ContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=False, gpus=4, priority=0, rack=None, replicas=2, tenant="b")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="b")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    _finish(m, "j2")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=8, priority=1, rack=None, replicas=2, tenant="b")
    m.cycle_and_evict(dt=1.0)
    assert m.evictions == {("j1", "j6"): 2}
    _finish(m, "j4")
    m.cycle_and_evict(dt=1.0)
    assert m.s.queue.status("j6").running == (PodId(job="j6", role="worker", index=0),)
    assert m.s.queue.status("j1").running == (PodId(job="j1", role="worker", index=0),)
    _finish(m, "j5")
    m.cycle_and_evict(dt=1.0)  # (asserts: a pod evicted again only after a job ended)
    assert m.evictions == {("j1", "j6"): 3, ("j3", "j6"): 1}
    m.cycle_and_evict(dt=1.0)
    assert len(m.s.queue.status("j6").running) == 2


def test_a_priority_preemptor_starts_its_borrowed_rest_before_its_victims_start_again() -> None:
    # Found by this machine: b's j4 (priority 1, two 8-GPU pods) evicts b's j2 (priority 0,
    # two 2-GPU pods) by priority, nominated for its first pod (within b's nominal 8). Once
    # a's j3 ends, j4's second pod fits too, borrowing 8 of a's. It used to start its
    # nominal pod only, its borrowed rest left to a later cycle: j2, requeued, started again
    # on that room and was evicted again the next cycle. Now the rest has its turn among
    # the borrowers of priority 1 in the same cycle, before j2's turn.
    m = ContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=2, tenant="b")
    m.submit(gang=False, gpus=4, priority=0, rack=None, replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    _finish(m, "j1")
    m.submit(gang=False, gpus=8, priority=1, rack=None, replicas=2, tenant="b")
    m.cycle_and_evict(dt=1.0)
    _finish(m, "j3")
    m.cycle_and_evict(dt=1.0)
    assert len(m.s.queue.entry("j4").assigned) == 2  # both pods, in the one cycle
    m.cycle_and_evict(dt=1.0)  # (asserts: no pod evicted again by its preemptor for nothing)
    assert m.evictions == {("j2", "j4"): 2}  # each of j2's pods once


def test_a_borrowed_rest_refused_at_its_turn_preempts_in_that_turn() -> None:
    # Found by a search of this machine for a rest's turn that preempts. a's j5 (priority 1,
    # two 4-GPU pods) evicts a's j4 pod for its nominal pod. Once it is gone, j5 starts that
    # pod, and its borrowed rest has its turn among the borrowers of priority 1: no room,
    # so it evicts a's lower-priority pods there and then (j4's other pod and j1), and
    # starts on them a cycle later.
    m = ContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=2, tenant="b")
    m.submit(gang=False, gpus=4, priority=0, rack=None, replicas=2, tenant="b")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=4, priority=1, rack=None, replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    assert m.evictions == {("j3", "j4"): 1, ("j4", "j5"): 1}
    s = m.s
    r = s.schedule(m.now + 1.0)
    assert [(b.pod.job, b.pod.index) for b in r.bindings] == [("j5", 0)]
    assert [(v.job, v.pods[0].index, v.preemptor, v.reason.value) for v in r.victims] == [
        ("j4", 1, "j5", "priority"),
        ("j1", 0, "j5", "priority"),
    ]
    assert [[b.pod.index for b in n.bindings] for n in r.nominations] == [[1]]
    m.cycle_and_evict(dt=1.0)  # (that cycle again, applied; its victims go)
    m.cycle_and_evict(dt=1.0)
    assert len(s.queue.entry("j5").assigned) == 2
    check_invariants(s)


def test_a_preemptor_is_not_reclaimed_in_the_cycle_it_preempts_and_evicts_its_victims_once() -> (
    None
):
    # Found by a stricter variant of this machine (each pod, not each job, evicted at most
    # once by one preemptor; victims that leave slowly). j5 (b, priority 2, two 4-GPU pods,
    # one running on borrowed quota) evicts b's j2 by priority for its second pod. a's j6,
    # later in the same cycle, used to reclaim j5's running pod: requeued, that pod started
    # on the devices nominated for the second, j2 started again elsewhere, and j5 evicted j2
    # a second time for its other pod. A job preempting in a cycle is no victim in it: j6
    # reclaims b's gang j4 instead, and j5 starts its second pod where j2 was.
    m = ContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    s = m.s

    def cycle(evict: bool = True) -> CycleResult:
        m.now += 1.0
        r = s.schedule(m.now)
        s.apply(r, m.now)
        for v in r.victims:
            k = (v.job, v.preemptor)
            m.evictions[k] = m.evictions.get(k, 0) + 1
            for p in v.pods if evict else ():
                s.pod_evicted(p, m.now)
        return r

    m.submit(gang=True, gpus=8, priority=0, rack=None, replicas=2, tenant="a")  # j1
    cycle(evict=False)
    m.submit(gang=True, gpus=2, priority=0, rack=None, replicas=2, tenant="b")  # j2: reclaims j1
    cycle(evict=False)
    _finish(m, "j1")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="iso")
    m.submit(gang=True, gpus=8, priority=2, rack=None, replicas=1, tenant="b")  # j4
    m.submit(gang=False, gpus=4, priority=2, rack=None, replicas=2, tenant="b")  # j5
    cycle()
    assert s.queue.status("j5").running == (PodId(job="j5", role="worker", index=0),)
    m.submit(gang=True, gpus=2, priority=0, rack=None, replicas=1, tenant="a")  # j6
    r = cycle()  # j5 evicts j2 for its second pod; j6 reclaims j4, not j5's running pod
    assert [(v.job, v.preemptor, v.reason.value) for v in r.victims] == [
        ("j2", "j5", "priority"),
        ("j4", "j6", "reclaim"),
    ]
    _finish(m, "j3")
    m.submit(gang=False, gpus=4, priority=2, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    cycle(evict=False)
    cycle()
    assert m.evictions == {("j1", "j2"): 1, ("j2", "j5"): 1, ("j4", "j6"): 1}
    assert s.queue.status("j5").running == tuple(
        PodId(job="j5", role="worker", index=i) for i in (0, 1)
    )
    check_invariants(s)


def test_a_preemptor_reclaimed_while_its_victims_terminate_does_not_evict_them_twice() -> None:
    # The scenario above with j2 taking one more cycle to go, and j6 submitted a cycle later.
    # t=4: j5 evicts j2 by priority for its second pod. t=5: j2 still terminates. j6 used to
    # reclaim j5's running pod then (j5 preempted in no cycle any more); at t=6 that pod,
    # requeued, started on the devices nominated for the second, j2 started again on the
    # other leaf, and at t=7 j5 evicted j2 a second time. A job whose victims are still to
    # go is no victim: j6 reclaims b's gang j4, and j5 starts its second pod where j2 was.
    m = ContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    s = m.s
    going: list[PodId] = []  # victims of the last cycle, evicted after the next one

    def cycle(evict: bool = True) -> CycleResult:
        m.now += 1.0
        r = s.schedule(m.now)
        s.apply(r, m.now)
        for v in r.victims:
            k = (v.job, v.preemptor)
            m.evictions[k] = m.evictions.get(k, 0) + 1
        going.extend(p for v in r.victims for p in v.pods)
        if evict:
            for p in going:
                if p in s.queue.entry(p.job).assigned:
                    s.pod_evicted(p, m.now)
            going.clear()
        return r

    m.submit(gang=True, gpus=8, priority=0, rack=None, replicas=2, tenant="a")  # j1
    cycle(evict=False)
    m.submit(gang=True, gpus=2, priority=0, rack=None, replicas=2, tenant="b")  # j2: reclaims j1
    cycle(evict=False)
    going.clear()
    _finish(m, "j1")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="iso")
    m.submit(gang=True, gpus=8, priority=2, rack=None, replicas=1, tenant="b")  # j4
    m.submit(gang=False, gpus=4, priority=2, rack=None, replicas=2, tenant="b")  # j5
    cycle()
    assert s.queue.status("j5").running == (PodId(job="j5", role="worker", index=0),)
    r = cycle(evict=False)  # t=4: j5 evicts j2 for its second pod; j2 goes after t=5
    assert [(v.job, v.preemptor) for v in r.victims] == [("j2", "j5")]
    m.submit(gang=True, gpus=2, priority=0, rack=None, replicas=1, tenant="a")  # j6
    r = cycle()  # t=5
    assert [(v.job, v.pods, v.preemptor) for v in r.victims] == [
        ("j4", (PodId(job="j4", role="worker", index=0),), "j6")
    ]
    _finish(m, "j3")
    m.submit(gang=False, gpus=4, priority=2, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    for _ in range(6):
        cycle()
        check_invariants(s)
    assert m.evictions == {("j1", "j2"): 1, ("j2", "j5"): 1, ("j4", "j6"): 1}
    second = s.cluster.binding(PodId(job="j5", role="worker", index=1))
    assert (second.node, second.gpus) == ("lf0-n0", (0, 1, 2, 3))  # where j2 was


def test_a_strict_fifo_reclaimer_evicts_a_victim_that_heads_the_queue_once() -> None:
    # Found by this machine run under Strict FIFO: iso's j2 (priority 0) reclaims a's gang
    # j1 (priority 1, borrowing 8 GPUs), both held to rack r0. j1, requeued ahead of j2,
    # could not fit while j2's nomination held 2 of r0's GPUs, and blocked j2; j2's
    # nomination was dropped, j1 started again and j2 evicted it again, every 3 cycles.
    m = StrictContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=True, gpus=8, priority=1, rack="r0", replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack="r0", replicas=1, tenant="iso")
    for _ in range(8):
        m.cycle_and_evict(dt=1.0)  # (asserts: no pod evicted again by its preemptor for nothing)
    assert m.evictions == {("j1", "j2"): 1}
    assert m.s.queue.status("j2").phase is JobPhase.RUNNING


def _strict_reclaim_beside_a_priority_preemption() -> StrictContentionMachine:
    """b's j5 (priority 1, two 4-GPU pods, one running) has evicted b's j1 (priority 0) by
    priority for quota for its second pod, and in the same cycle a's j4 has reclaimed a pod
    of b's j3 (priority 1, earlier than j5); both victims are gone."""
    m = StrictContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="b")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=2, tenant="a")
    m.submit(gang=False, gpus=2, priority=1, rack=None, replicas=2, tenant="b")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=4, priority=1, rack=None, replicas=2, tenant="b")
    m.cycle_and_evict(dt=1.0)  # j5 evicts j1; j4 reclaims j3's pod (both go at once)
    assert m.evictions == {("j1", "j5"): 1, ("j3", "j4"): 1}
    return m


def test_a_strict_fifo_preemptor_whose_victims_are_gone_starts_within_three_cycles() -> None:
    # Found by this machine under Strict FIFO (whose own check lets it pass). Requeued, j3
    # heads b's queue and is refused by quota while j5's nomination holds it. j5 used to be
    # held behind it, its nomination dropped; j3 then started on the quota j1's eviction
    # freed, and j5's second pod waited: j1 was evicted for nothing. j3 still ran when j5
    # preempted, and only j5's nomination keeps it out: j5 passes it and starts at once.
    m = _strict_reclaim_beside_a_priority_preemption()
    r = m.s.schedule(m.now + 1.0)
    assert r.placed == ("j5", "j4") and r.dropped_nominations == ()
    for _ in range(3):
        m.cycle_and_evict(dt=1.0)
    assert len(m.s.queue.entry("j5").assigned) == 2
    assert m.evictions == {("j1", "j5"): 1, ("j3", "j4"): 1}


def test_a_strict_fifo_head_passed_by_a_preemptor_starts_first_when_room_frees() -> None:
    # The same; j3 stays the head of b's queue once j5 has passed it: when a's j4 ends, j3
    # starts on the quota it frees, before b's j1 (priority 0) behind it.
    m = _strict_reclaim_beside_a_priority_preemption()
    s = m.s
    m.cycle_and_evict(dt=1.0)  # j5 passes j3 and starts its second pod
    m.cycle_and_evict(dt=1.0)
    j3, j1 = s.queue.status("j3").reason, s.queue.status("j1").reason
    assert j3 is not None and j3.code is ReasonCode.QUOTA_EXCEEDED
    assert j1 is not None and j1.message == "behind j3 (tenant quota)"
    _finish(m, "j4")
    m.cycle_and_evict(dt=1.0)
    assert s.queue.status("j3").running == tuple(
        PodId(job="j3", role="worker", index=i) for i in (0, 1)
    )
    assert s.queue.status("j1").phase is JobPhase.PENDING
    assert m.evictions == {("j1", "j5"): 1, ("j3", "j4"): 1}


def test_a_strict_fifo_victim_its_own_tenants_preemptor_made_needless_is_given_back() -> None:
    # Found by this machine under Strict FIFO. b's j5 (priority 1, 8 GPUs, within b's
    # nominal) reclaims a's j2 (2 GPUs) for quota; in the same cycle a's j4 (priority 1, 2
    # GPUs) evicts a pod of a's j1 (4 GPUs) by priority, after which a is within its
    # nominal quota even with j2 running. j2 used to be evicted all the same (a had a
    # nominated preemptor, j4), waited behind j1's requeued pod (4 GPUs, of the 2 left),
    # and the devices it left sat idle. Now it is given back and j5 waits for j1's pod.
    m = StrictContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    m.submit(gang=False, gpus=4, priority=0, rack=None, replicas=2, tenant="a")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=2, priority=0, rack=None, replicas=1, tenant="iso")
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=2, priority=1, rack=None, replicas=1, tenant="a")
    m.submit(gang=False, gpus=8, priority=1, rack=None, replicas=1, tenant="b")
    m.cycle_and_evict(dt=1.0)
    m.cycle_and_evict(dt=1.0)  # (asserts: no victim's capacity sits idle)
    assert m.evictions == {("j1", "j4"): 1}
    assert m.s.queue.status("j2").phase is JobPhase.RUNNING
    assert m.s.queue.status("j5").phase is JobPhase.RUNNING


def _j4_of_a_preempting(
    running: list[tuple[str, int, int]], rack: str | None = None
) -> StrictContentionMachine:
    """The Strict FIFO machine (E-Binpack) running j1-j3 (``running``: tenant, GPUs and
    priority of each, one pod, on ``rack``), then a's j4 (4 GPUs, priority 1) submitted
    and a cycle run, in which it preempts."""
    m = StrictContentionMachine()
    m.setup(strategy="ebinpack", others_first=False)
    for tenant, gpus, priority in running:
        m.submit(gang=False, gpus=gpus, priority=priority, rack=rack, replicas=1, tenant=tenant)
    m.cycle_and_evict(dt=1.0)
    m.submit(gang=False, gpus=4, priority=1, rack=rack, replicas=1, tenant="a")
    m.cycle_and_evict(dt=1.0)
    return m


def test_a_nomination_given_up_behind_its_tenants_quota_refused_head_keeps_its_quota_from_the_jobs_after_it() -> (
    None
):
    # a's j4 (priority 1) evicts a's j3 by priority for quota, a and b using the whole
    # cohort (a's j2, priority 2, and b's j1). t=3: a's j5 (priority 2) arrives and is
    # refused by quota while j4's nomination holds it, with nothing to preempt; j4, behind
    # it, gives its nomination up at its turn. Its quota used to be released there: b's j6,
    # a borrower walked after j4, took it, and at t=4 j5 reclaimed j6, started a cycle
    # earlier. j4's quota now stays charged until the end of the walk: j6 waits, and j5
    # starts at t=4 on the quota j4 gave up.
    m = _j4_of_a_preempting([("b", 8, 0), ("a", 4, 2), ("a", 4, 0)])  # j4 evicts j3
    s = m.s
    assert m.evictions == {("j3", "j4"): 1}
    m.submit(gang=False, gpus=4, priority=2, rack=None, replicas=1, tenant="a")  # j5
    m.submit(gang=False, gpus=4, priority=0, rack=None, replicas=1, tenant="b")  # j6
    r = s.schedule(m.now + 1.0)
    assert r.dropped_nominations == ("j4",)
    assert r.placed == ()  # j6 does not borrow the quota j4 gave up for j5
    m.cycle_and_evict(dt=1.0)
    m.cycle_and_evict(dt=1.0)
    assert m.evictions == {("j3", "j4"): 1}
    assert s.queue.status("j5").phase is JobPhase.RUNNING
    assert s.queue.status("j6").phase is JobPhase.PENDING


def test_a_victim_reclaimed_before_a_nomination_is_given_up_at_its_turn_is_given_back() -> None:
    # a runs j1 (8 GPUs) and j2 (4 GPUs), both priority 2, borrowing from b, and a's j4
    # (priority 1) has evicted a's j3 for quota. t=3: b's j5 (priority 2) finds the cohort
    # full, j4's nomination holding a's quota, and reclaims j2; then a's j6 (priority 2) is
    # refused by quota, and j4, behind it, gives its nomination up. With j4's quota free,
    # j2's eviction was needless: it used to go all the same and start again at t=4 (an
    # eviction for nothing). Now it is given back; j5 waits for no victim and starts at t=4.
    m = _j4_of_a_preempting([("a", 8, 2), ("a", 4, 2), ("a", 4, 0)])  # j4 evicts j3
    s = m.s
    assert m.evictions == {("j3", "j4"): 1}
    m.submit(gang=False, gpus=4, priority=2, rack=None, replicas=1, tenant="b")  # j5
    m.submit(gang=False, gpus=4, priority=2, rack=None, replicas=1, tenant="a")  # j6
    r = s.schedule(m.now + 1.0)
    assert r.dropped_nominations == ("j4",)
    assert r.victims == ()
    assert [(n.job, n.victims) for n in r.nominations] == [("j5", ())]
    why = r.pending["j5"]
    assert why.code is ReasonCode.PREEMPTING and why.message.startswith("its victims given back")
    m.cycle_and_evict(dt=1.0)
    m.cycle_and_evict(dt=1.0)
    assert m.evictions == {("j3", "j4"): 1}
    assert {"j1", "j2", "j5"} <= {e.job.id for e in s.queue.running()}
    check_invariants(s)


def test_a_victim_chosen_before_a_nomination_is_given_up_behind_a_closed_gate_is_given_back() -> (
    None
):
    # Rack r0 is full: b's j1 (8 GPUs, priority 2), a's j2 and iso's j3 (4 GPUs each,
    # priority 0). a's j4 (priority 1) evicts j2 for r0. t=3: iso's j5 (priority 2, r0)
    # finds j2's GPUs held for j4 and evicts iso's j3; it blocks, and j4, behind the closed
    # gate, gives its nomination up at the end of the walk. j3 used to be evicted all the
    # same: j5 and j4 then started on r0, j4 on j3's GPUs, a priority-1 job of a that may
    # not evict iso's job. Now j3 is given back and j5 starts on j2's GPUs; j4 waits.
    m = _j4_of_a_preempting([("b", 8, 2), ("a", 4, 0), ("iso", 4, 0)], rack="r0")
    s = m.s  # (j4 evicts j2)
    assert m.evictions == {("j2", "j4"): 1}
    m.submit(gang=False, gpus=4, priority=2, rack="r0", replicas=1, tenant="iso")  # j5
    r = s.schedule(m.now + 1.0)
    assert r.dropped_nominations == ("j4",)
    assert r.victims == ()
    assert [(n.job, n.victims) for n in r.nominations] == [("j5", ())]
    m.cycle_and_evict(dt=1.0)
    m.cycle_and_evict(dt=1.0)
    assert m.evictions == {("j2", "j4"): 1}
    assert {"j1", "j3", "j5"} <= {e.job.id for e in s.queue.running()}
    assert s.queue.status("j4").phase is JobPhase.PENDING
    check_invariants(s)


def test_without_quotas_a_victim_chosen_before_a_nomination_is_given_up_behind_a_closed_gate_is_given_back() -> (
    None
):
    # The same world with no quotas, j3 of priority 1 (so that j4, priority 1, may not
    # evict it). Rack r0 is full: j1 (8 GPUs, priority 2), j2 (4 GPUs, priority 0) and j3
    # (4 GPUs, priority 1). j4 (priority 1) evicts j2 for r0. t=3: j5 (priority 2, r0)
    # finds j2's GPUs held for j4 and evicts j3; it blocks, and j4, behind the closed gate,
    # gives its nomination up at the end of the walk. j3 used to be evicted all the same
    # (the give-back read the victims' quota), and j5 started on its GPUs while j2's sat
    # idle. Now j3 is given back and j5 starts on the GPUs j4 gave up.
    cluster = _racks()
    s = Scheduler(cluster, queue=Queue(), placer=Placer("ebinpack"), policy="strict-fifo")
    r0 = NodeSelector.labels(rack="r0")
    for jid, gpus, priority, at in (("j1", 8, 2, 0), ("j2", 4, 0, 0), ("j3", 4, 1, 0)):
        s.submit(job(jid, gpus=gpus, priority=priority, submitted_at=at, selector=r0), now=at)
    s.step(now=1)
    s.submit(job("j4", gpus=4, priority=1, submitted_at=1, selector=r0), now=1)
    r = s.step(now=2)
    assert [(v.job, v.preemptor) for v in r.victims] == [("j2", "j4")]
    for v in r.victims:
        for p in v.pods:
            s.pod_evicted(p, 2)
    s.submit(job("j5", gpus=4, priority=2, submitted_at=3, selector=r0), now=3)
    r = s.step(now=3)
    assert r.dropped_nominations == ("j4",)
    assert r.victims == ()
    assert [(n.job, n.victims) for n in r.nominations] == [("j5", ())]
    r = s.step(now=4)
    assert r.placed == ("j5",) and r.victims == ()
    assert {e.job.id for e in s.queue.running()} == {"j1", "j3", "j5"}
    assert s.queue.status("j4").phase is JobPhase.PENDING
    check_invariants(s)
