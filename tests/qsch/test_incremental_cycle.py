"""The incremental cycle (what it keeps across cycles) decides exactly as a cycle that derives
everything from scratch (``schedule_cycle(incremental=False)``), over random sequences of
submissions, cycles, finishes, evictions, cancellations, node losses and returns and GPU
faults and repairs."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from kant.admission import Admitter, Quota
from kant.model import PodId, ReasonCode
from kant.preemption import PreemptionPolicy
from kant.queueing import JobPhase
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import check_invariants, job
from kant.testing.strategies import MODELS, clusters

POLICIES = ("best-effort-fifo", "strict-fifo", "backfill", "easy-backfill")
TENANTS = ("a", "b")


def ops_of(*names: str) -> st.SearchStrategy[tuple[str, int]]:
    """Operations named ``names`` (a name given twice is drawn twice as often), each with a
    random number that picks its subject and how far the clock moves before it."""
    return st.one_of(*(st.tuples(st.just(n), st.integers(0, 10**6)) for n in names))


_op = ops_of(
    "submit", "cycle", "cycle", "finish", "evict", "bind_fail", "cancel", "node_lost",
    "node_back", "gpu_fault", "gpu_repair", "idle",
)  # fmt: skip


def _pick(xs: list[PodId] | list[str], r: int) -> object | None:
    return xs[r % len(xs)] if xs else None


class _Pair:
    """Two schedulers on copies of one cluster: incremental and from scratch."""

    def __init__(
        self, state: ClusterState, policy: str, quotas: bool, preempt: bool | PreemptionPolicy
    ) -> None:
        def make(incremental: bool) -> Scheduler:
            adm = (
                Admitter([Quota.gpus(t, m, 3, borrowing_limit=3) for t in TENANTS for m in MODELS])
                if quotas
                else Admitter()
            )
            if isinstance(preempt, PreemptionPolicy):
                pol = preempt
            elif preempt:
                pol = PreemptionPolicy()
            else:
                pol = PreemptionPolicy(priority=False, reclaim=False, backfill=False)
            return Scheduler(
                copy.deepcopy(state), admitter=adm, policy=policy, preemption=pol,
                incremental=incremental,
            )  # fmt: skip

        self.inc, self.ref = make(True), make(False)
        self.same_walk = True  # both walk the jobs alike (False: the reference walks more)
        self.now = 0.0
        self.faults: list[tuple[str, int]] = []
        self.reused = 0  # cycles the incremental side answered with its last quiet result

    def both(self, name: str, *args: object) -> None:
        ra = getattr(self.inc, name)(*args)
        rb = getattr(self.ref, name)(*args)
        assert ra == rb, f"{name}{args}: {ra} != {rb}"

    def cycle(self, now: float) -> None:
        """A cycle on both, compared, then applied on both. A reused result (the incremental
        side's last quiet cycle, nothing changed since) did no work of its own: its counts of
        decisions are compared, not of attempts."""
        ra, rb = self.inc.schedule(now), self.ref.schedule(now)
        assert ra == rb
        # exact (the time horizon looks for backoffs only when some job waits one out)
        waiting = sum(now < e.backoff_until for e in self.ref.queue.candidates())
        assert ra.stats.backoff_jobs == rb.stats.backoff_jobs == waiting
        if self.same_walk:  # (the order the cycle answered them in)
            assert list(ra.pending) == list(rb.pending)
            # (the same policy: the kept victim records tell no later time than from scratch)
            assert ra.time_horizon() <= rb.time_horizon()
        if ra.stats.reused:
            self.reused += 1
            kept = ("candidates", "placed_jobs", "placed_pods", "victims", "backoff_jobs")
            assert [getattr(ra.stats, k) for k in kept] == [getattr(rb.stats, k) for k in kept]
        else:
            assert ra.stats == rb.stats
        # (each its own result: a result applies only to the scheduler that computed it)
        got = self.inc.apply(ra, now)
        assert got == self.ref.apply(rb, now), f"apply at {now}: {got} differs"

    def step(self, op: str, r: int, n: int, draw_job: object) -> None:
        s = self.ref
        self.now += 1 + r % 7
        now = self.now
        running = sorted(p for e in s.queue.running() for p in e.assigned)
        if op == "submit":
            self.both("submit", draw_job, now)
        elif op == "cycle":
            self.cycle(now)
        elif op == "idle":  # nothing else happens: cycles at the same time, then much later
            self.cycle(now)
            self.cycle(now)
            # (past a backoff, a threshold, a cascade window, a minimum runtime, or not)
            for k in range(1 + r % 3):
                self.now += r % 4001 if (r >> k) % 3 == 0 else (r >> k) % 301
                self.cycle(self.now)
        elif op == "finish" and running:
            self.both("pod_finished", _pick(running, r), now)
        elif op == "evict" and running:
            self.both("pod_evicted", _pick(running, r), now)
        elif op == "gone":  # the victims chosen so far go, as an orchestrator reports them
            for p in sorted(p for e in s.queue.terminating() for p in e.terminating):
                self.both("pod_evicted", p, now)
        elif op == "bind_fail" and running:  # requeued, or waits out a backoff
            self.both("binding_failed", _pick(running, r), now)
        elif op == "cancel" and len(s.queue):
            ids = sorted(s.queue.jobs())
            self.both("cancel", _pick(ids, r), now)
        elif op == "node_lost":
            names = sorted(x.name for x in s.cluster.nodes())
            if len(names) > 1:
                self.both("node_lost", _pick(names, r), now)
        elif op == "node_back" and s.lost_nodes():
            self.both("node_recovered", _pick(list(s.lost_nodes()), r), now)
        elif op == "gpu_fault":
            names = sorted(x.name for x in s.cluster.nodes())
            name = str(_pick(names, r))
            gpu = r % s.cluster.node(name).gpus
            self.both("gpu_unhealthy", name, gpu, now)
            self.faults.append((name, gpu))
        elif op == "gpu_repair" and self.faults:
            name, gpu = self.faults.pop(r % len(self.faults))
            if name in s.cluster:
                self.both("gpu_healthy", name, gpu)


_jobs = st.tuples(
    st.integers(1, 8),  # GPUs per pod
    st.integers(1, 4),  # pods
    st.booleans(),  # gang
    st.sampled_from(["", "H100", "A100", "B200"]),  # GPU model asked ("": any)
    st.integers(0, 10**6),  # tenant, priority, runtime, preemptible
)


def play(
    pair: _Pair,
    ops: list[tuple[str, int]],
    specs: list[tuple[int, int, bool, str, int]],
    *,
    priorities: Callable[[int], int] = lambda x: x % 3 // 2,
) -> None:
    """Run ``ops`` on both schedulers of ``pair``, the n-th submitting the job ``specs[n]``
    describes (its priority ``priorities(x)``); most submissions are followed by a cycle, and
    a cycle ends the run."""
    for n, (op, r) in enumerate(ops):
        gpus, pods, gang, model, x = specs[n]
        j = job(
            f"j{n}", gpus=gpus, replicas=pods, gang=gang and pods > 1, models=model or frozenset(),
            tenant=TENANTS[x % 2], priority=priorities(x), runtime=float(60 + x % 600),
            preemptible=x % 5 != 0,
        )  # fmt: skip
        pair.step(op, r, n, j)
        if op == "submit" and r % 3:  # most submissions are followed by a cycle
            pair.step("cycle", r // 7, n, None)
    pair.step("cycle", 0, len(ops), None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    state=clusters(max_nodes=5),
    policy=st.sampled_from(POLICIES),
    quotas=st.booleans(),
    preempt=st.booleans(),
    ops=st.lists(_op, min_size=10, max_size=60),
    specs=st.lists(_jobs, min_size=60, max_size=60),
)
def test_the_incremental_cycle_decides_as_a_cycle_from_scratch(
    state: ClusterState,
    policy: str,
    quotas: bool,
    preempt: bool,
    ops: list[tuple[str, int]],
    specs: list[tuple[int, int, bool, str, int]],
) -> None:
    pair = _Pair(state, policy, quotas, preempt)
    play(pair, ops, specs)
    assert pair.inc.queue.statuses() == pair.ref.queue.statuses()
    check_invariants(pair.inc)


def test_a_job_that_fits_an_emptier_cluster_is_unsatisfiable_once_a_node_is_gone() -> None:
    """The never-fits answer kept across cycles is derived again when the nodes change."""
    from kant.testing import ClusterBuilder

    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2, gpus=4).build())
    s.submit(job("small", gpus=4), now=0)
    s.step(now=1)
    s.submit(job("big", gpus=4, replicas=2), now=2)
    assert s.step(now=3).pending["big"].code is ReasonCode.INSUFFICIENT_CAPACITY
    free = next(n.name for n in s.cluster.nodes() if not s.cluster.pods_on(n.name))
    s.node_lost(free, now=4)
    why = s.step(now=5).pending["big"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    s.node_recovered(free, now=6)
    s.pod_finished(PodId(job="small", role="worker", index=0), now=7)
    assert [b.pod.job for b in s.step(now=8).bindings] == ["big", "big"]
    assert s.queue.entry("big").phase is JobPhase.RUNNING


def test_a_quota_refusal_shared_by_jobs_alike_is_derived_again_once_the_tenant_uses_more() -> None:
    """Jobs alike share a quota refusal only while the cycle's ledger is unchanged."""
    from kant.testing import ClusterBuilder

    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(),
        admitter=Admitter([Quota.gpus("a", "H100", 6, borrowing_limit=2)]),
    )
    s.submit(job("r", gpus=4, tenant="a"), now=0)
    s.step(now=1)
    # (a alone lends its 6 to the cohort: 6 GPUs is all it can ever use, A and C ask 6)
    for t, (name, gpus, pods) in enumerate((("A", 3, 2), ("B", 1, 1), ("C", 3, 2))):
        s.submit(job(name, gpus=gpus, replicas=pods, tenant="a"), now=2 + t)  # in this order
    r = s.step(now=5)
    assert r.placed == ("B",)
    assert r.pending["A"].message.endswith("quota left 2")
    assert r.pending["C"].message.endswith("quota left 1")  # after B's GPU


def test_a_job_alike_gets_as_many_of_its_own_pods_admitted_as_the_job_before_it() -> None:
    """A quota decision shared by one-role jobs alike admits the same number of pods."""
    from kant.testing import ClusterBuilder

    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=1).build(),
        admitter=Admitter([Quota.gpus("a", "H100", 3)], modes={"a": "isolated"}),
    )
    s.submit(job("p1", gpus=1, replicas=3, gang=False, max_per_node=1, tenant="a"), now=0)
    assert s.step(now=1).placed == ("p1",)  # one pod: one per node
    # p1 (2 pods left) and p2 (2 pods) ask alike; the tenant has 2 GPUs of quota left
    s.submit(job("p2", gpus=1, replicas=2, gang=False, max_per_node=1, tenant="a"), now=2)
    r = s.step(now=3)
    assert r.placed == ("p2",)
    assert [str(b.pod) for b in r.bindings] == ["p2/worker/0"]
    assert r.pending["p2"].code is ReasonCode.NO_FIT  # not QUOTA_EXCEEDED: both pods admitted


_preemptions = st.builds(
    PreemptionPolicy,
    priority=st.booleans(),
    reclaim=st.booleans(),
    backfill=st.booleans(),
    max_preemptors_per_cycle=st.sampled_from([None, 1, 2]),
    max_searches_per_cycle=st.sampled_from([None, 1, 3]),
    cascade_window=st.sampled_from([0.0, 30.0, 3600.0]),
    min_runtime=st.sampled_from([0.0, 0.0, 20.0, 900.0]),
)
# a few shapes, so that many waiting jobs of one cycle are alike (the walk's short path for a
# job whose shape already failed this cycle, and preemption's cheap exits)
_alike = st.tuples(
    st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
    st.sampled_from([1, 2]),  # pods
    st.booleans(),  # gang
    st.integers(0, 10**6),  # tenant, priority, runtime, preemptible
)


def drive_alike(
    pair: _Pair,
    ops: list[tuple[str, int]],
    specs: Sequence[tuple[int, int, bool, int]],
    *,
    bursts: int,
    priorities: int,
) -> None:
    """Per op: a burst of 1..``bursts`` alike jobs of ``specs`` (priorities 0..``priorities``
    - 1), so that a cycle has many waiting, then the op, then a cycle."""
    for n, (op, r) in enumerate(ops):
        gpus, pods, gang, x = specs[n]
        for k in range(1 + r % bursts):
            j = job(
                f"j{n}-{k}", gpus=gpus, replicas=pods, gang=gang and pods > 1,
                tenant=TENANTS[x % 2], priority=x % 3 * priorities // 3,
                runtime=float(60 + x % 600), preemptible=x % 5 != 0,
            )  # fmt: skip
            pair.step("submit", r + k, n, j)
        if op != "submit":
            pair.step(op, r, n, None)
        pair.step("cycle", r // 7, n, None)


alike_scenarios = given(
    state=clusters(max_nodes=3),
    policy=st.sampled_from(POLICIES),
    quotas=st.booleans(),
    preemption=_preemptions,
    ops=st.lists(_op, min_size=10, max_size=40),
    specs=st.lists(_alike, min_size=40, max_size=40),
)
"""The inputs of :func:`drive_alike` scenarios: a small cluster, a policy, quotas or not,
preemption options, ops and job specs."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@alike_scenarios
def test_many_jobs_alike_waiting_in_one_cycle_decide_as_in_a_cycle_from_scratch(
    state: ClusterState,
    policy: str,
    quotas: bool,
    preemption: PreemptionPolicy,
    ops: list[tuple[str, int]],
    specs: list[tuple[int, int, bool, int]],
) -> None:
    pair = _Pair(state, policy, quotas, preemption)
    drive_alike(pair, ops, specs, bursts=4, priorities=2)
    pair.step("cycle", 0, len(ops), None)
    assert pair.inc.queue.statuses() == pair.ref.queue.statuses()
    check_invariants(pair.inc)


def test_jobs_alike_but_of_tenants_with_different_ceilings_get_their_own_never_fits_answer() -> (
    None
):
    """Never-fits answers are shared by jobs alike in everything the answer reads: here the
    same gang of two tenants, one whose quota ceiling it exceeds. A node lost and back makes
    both answers be derived again, still apart."""
    from kant.testing import ClusterBuilder

    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=4).build(),
        admitter=Admitter(
            [Quota.gpus("small", "H100", 8, borrowing_limit=0), Quota.gpus("big", "H100", 32)]
        ),
    )
    for t in ("small", "big"):
        s.submit(job(f"{t}-0", gpus=8, replicas=2, tenant=t), now=0)
        s.submit(job(f"{t}-1", gpus=8, replicas=2, tenant=t), now=0)
    r = s.step(now=1)
    assert r.placed == ("big-0", "big-1")
    assert {j: r.pending[j].code for j in ("small-0", "small-1")} == {
        "small-0": ReasonCode.UNSATISFIABLE,
        "small-1": ReasonCode.UNSATISFIABLE,
    }
    s.pod_finished(PodId(job="big-1", role="worker", index=0), now=2)
    s.pod_finished(PodId(job="big-1", role="worker", index=1), now=2)
    s.submit(job("big-2", gpus=8, replicas=2, tenant="big"), now=2)
    name = next(n.name for n in s.cluster.nodes() if not s.cluster.pods_on(n.name))
    s.node_lost(name, now=3)
    r = s.step(now=4)
    assert r.pending["big-2"].code is not ReasonCode.UNSATISFIABLE
    assert r.pending["small-1"].code is ReasonCode.UNSATISFIABLE
    s.node_recovered(name, now=5)
    r = s.step(now=6)
    assert r.placed == ("big-2",)
    assert r.pending["small-0"].code is ReasonCode.UNSATISFIABLE
