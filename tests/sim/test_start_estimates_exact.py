"""Start-time estimates are exact where they can be: with every runtime equal to its
estimate, no arrival after the estimate and no failure, each waiting job starts when its
estimate said, under each queueing policy, with and without preemption; and a run that is
asked for estimates decides exactly as one that is not."""

from __future__ import annotations

import copy
from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.estimates import EstimateStatus, StartEstimate
from kant.model import Job
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.sim import SimConfig, Simulator, estimate_accuracy
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job
from kant.testing.strategies import clusters, jobs

POLICIES = ("strict-fifo", "best-effort-fifo", "backfill", "easy-backfill", "conservative-backfill")
OFF = PreemptionPolicy(priority=False, reclaim=False, backfill=False)
# runtimes equal to the estimates, victims gone at once and requeued to run their whole
# estimate again: what the estimate assumes
CFG = SimConfig(
    tick=0.0, grace_period=0.0, on_interrupt="restart", sample_interval=50.0, trace=True
)


class _AskAtLastArrival(Scheduler):
    """A scheduler that, when the simulator asks for the start estimate of its last arrival
    (``estimate_every``: with the run's next cycle and tick), also asks, with the same
    settings, for the estimates of every waiting job (and checks its invariants before and
    after)."""

    seen: dict[str, StartEstimate] | None = None

    def start_estimates(self, now: float, **kw: Any) -> dict[str, StartEstimate]:
        check_invariants(self)
        got = super().start_estimates(now, **kw)
        self.seen = super().start_estimates(now, **{**kw, "jobs": None})
        check_invariants(self)
        assert got.items() <= self.seen.items()  # (one job's estimate: the same alone)
        return got


def _run(cluster: ClusterState, jobs_: list[Job], policy: str, rules: PreemptionPolicy,
         *, ask: bool, tick: float, grace: float = 0.0) -> tuple[Any, Scheduler]:  # fmt: skip
    """One run (the last job arrives alone, after the others); asked (``ask``): the
    simulator estimates its last arrival, the scheduler every waiting job then."""
    cls = _AskAtLastArrival if ask else Scheduler
    s = cls(copy.deepcopy(cluster), policy=policy, preemption=rules)
    cfg = attrs.evolve(CFG, tick=tick, grace_period=grace,
                       estimate_every=len(jobs_) if ask else 0)  # fmt: skip
    return Simulator(s, jobs_, cfg).run(), s


def _timed(j: Job, submitted_at: float, runtime: float, priority: int) -> Job:
    return attrs.evolve(j, submitted_at=submitted_at, runtime_estimate=runtime, priority=priority)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=clusters(max_nodes=4),
    stream=st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 150), st.integers(0, 2)),
        min_size=1,
        max_size=10,
    ),
    data=st.data(),
    policy=st.sampled_from(POLICIES),
    preempt=st.booleans(),
    tick=st.sampled_from([0.0, 7.5, 60.0]),
)
def test_with_no_later_arrival_each_waiting_job_starts_when_its_estimate_said(
    cluster: ClusterState,
    stream: list[tuple[int, int, int]],
    data: st.DataObject,
    policy: str,
    preempt: bool,
    tick: float,
) -> None:
    # random jobs (gangs or not, whole or shared GPUs, GPU models, topology wishes, three
    # priorities) arriving in bursts on a random cluster with unhealthy devices; the last
    # one arrives alone, after the others, and then every waiting job is estimated
    t = 0.0
    made: list[Job] = []
    for i, (gap, runtime, prio) in enumerate(stream):
        t += gap
        made.append(_timed(data.draw(jobs(i)), t, float(runtime), prio))
    made[-1] = attrs.evolve(made[-1], submitted_at=t + 1.0)
    _assert_exact(cluster, made, policy, PreemptionPolicy() if preempt else OFF, tick)


TICKS = st.sampled_from([0.0, 7.5, 60.0])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 3),
    stream=st.lists(
        st.tuples(
            st.integers(0, 5),
            st.sampled_from([2, 4, 8, 16]),
            st.integers(1, 300),
            st.integers(0, 3),
        ),
        min_size=2,
        max_size=8,
    ),
    policy=st.sampled_from(POLICIES),
    tick=TICKS,
    grace=st.sampled_from([0.0, 10.0, 45.0]),
)
def test_with_preemption_and_a_tick_each_waiting_job_starts_when_its_estimate_said(
    nodes: int, stream: list[tuple[int, int, int, int]], policy: str, tick: float, grace: float
) -> None:
    # plain jobs of 2 to 16 GPUs (16: a gang of two 8-GPU pods) with four priorities on a
    # few 8-GPU nodes, with preemption: victims preempted in the play, whose runs would
    # have ended later (a stale end, which must not run a cycle: the tick's grid would move);
    # with a grace period, victims still going when the estimates are made go when theirs
    # ends, not a grace period after the estimates (their job finished in the play instead)
    t = 0.0
    made: list[Job] = []
    for i, (gap, gpus, runtime, prio) in enumerate(stream):
        t += gap
        made.append(
            job(f"j{i}", gpus=min(gpus, 8), replicas=max(1, gpus // 8), submitted_at=t,
                runtime=float(runtime), priority=prio)
        )  # fmt: skip
    made[-1] = attrs.evolve(made[-1], submitted_at=t + 1.0)
    cluster = ClusterBuilder().leaf("lf0", nodes=nodes, gpus=8).build()
    _assert_exact(cluster, made, policy, PreemptionPolicy(), tick, grace)


def _assert_exact(
    cluster: ClusterState,
    made: list[Job],
    policy: str,
    rules: PreemptionPolicy,
    tick: float,
    grace: float = 0.0,
) -> None:
    """The last of ``made`` arrives alone, after the others; then every waiting job is
    estimated, and starts (from then on) when its estimate said."""
    asked, s = _run(cluster, made, policy, rules, ask=True, tick=tick, grace=grace)
    plain, _ = _run(cluster, made, policy, rules, ask=False, tick=tick, grace=grace)
    assert asked.records == plain.records  # asking changed no decision
    assert asked.summary.to_dict() == plain.summary.to_dict()
    t_ask = made[-1].submitted_at
    starts: dict[str, float] = {}  # each job's first start from then on (it may have run
    for e in asked.trace:  # before, and been preempted)
        if e.kind == "start" and e.t >= t_ask:
            starts.setdefault(e.subject, e.t)
    assert [e.job_id for e in asked.estimates] == [made[-1].id]
    assert isinstance(s, _AskAtLastArrival)
    assert s.seen is not None
    for jid, est in s.seen.items():
        if est.status is EstimateStatus.EXPECTED:
            assert starts[jid] == est.start, (jid, est)
        else:
            assert est.status is EstimateStatus.NEVER, (jid, est)
            assert jid not in starts, (jid, est)


def _one_node() -> ClusterState:
    return ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build()


def test_the_simulator_estimates_each_arrival_and_reports_how_close_they_came() -> None:
    jobs_ = [
        job("a", gpus=6, submitted_at=0, runtime=100),
        job("b", gpus=4, submitted_at=10, runtime=50),  # waits for a: starts at 100
        job("c", gpus=8, submitted_at=20, runtime=10),  # after b (FIFO): at 150
        job("d", gpus=2, submitted_at=30, runtime=10, priority=5),  # fits now: at 30
        job("e", gpus=8, submitted_at=40, runtime=10),  # after c: 160
    ]
    cfg = attrs.evolve(CFG, estimate_every=1)
    s = Scheduler(_one_node(), policy="best-effort-fifo", preemption=OFF)
    res = Simulator(s, jobs_, cfg).run()
    got = {e.job_id: (e.status.value, e.start, e.made_at) for e in res.estimates}
    assert got == {
        "a": ("expected", 0.0, 0.0),
        "b": ("expected", 100.0, 10.0),
        "c": ("expected", 150.0, 20.0),
        "d": ("expected", 30.0, 30.0),
        "e": ("expected", 160.0, 40.0),
    }
    acc = estimate_accuracy(res)
    assert (acc.made, acc.expected, acc.compared, acc.exact) == (5, 5, 5, 5)
    assert acc.mean_abs_error == 0.0
    plain = Simulator(Scheduler(_one_node(), policy="best-effort-fifo", preemption=OFF), jobs_, CFG)
    assert plain.run().records == res.records  # the same decisions without estimates


def test_a_later_arrival_of_higher_priority_makes_an_estimate_late() -> None:
    jobs_ = [
        job("a", gpus=8, submitted_at=0, runtime=100),
        job("b", gpus=8, submitted_at=10, runtime=50),  # estimated 100
        job("vip", gpus=8, submitted_at=20, runtime=30, priority=9),  # goes first: 100
    ]
    cfg = attrs.evolve(CFG, estimate_every=1)
    s = Scheduler(_one_node(), policy="best-effort-fifo", preemption=OFF)
    res = Simulator(s, jobs_, cfg).run()
    assert [e.start for e in res.estimates] == [0.0, 100.0, 100.0]
    assert res.record("b").started_at == 130.0
    acc = estimate_accuracy(res)
    assert (acc.compared, acc.exact, acc.late, acc.early) == (3, 2, 1, 0)
    assert acc.mean_abs_error == 10.0  # (0 + 30 + 0) / 3


def test_every_nth_arrival_only_is_estimated() -> None:
    jobs_ = [job(f"j{i}", gpus=8, submitted_at=i, runtime=10) for i in range(6)]
    cfg = attrs.evolve(CFG, estimate_every=3)
    s = Scheduler(_one_node(), policy="best-effort-fifo", preemption=OFF)
    res = Simulator(s, jobs_, cfg).run()
    assert [e.job_id for e in res.estimates] == ["j2", "j5"]
    assert estimate_accuracy(res).exact == 2


def test_the_stale_end_of_a_preempted_run_runs_no_cycle_in_the_play_as_in_the_simulator() -> None:
    # tick 60: a starts at 0 (ends at 200), hi preempts it at 60 and starts at 120; a's
    # first run would have ended at 200, but it was requeued: the simulator runs no cycle
    # then, so hi's end at 250 runs one at once (a starts again, c after it, at 450). A
    # cycle at the stale end (200) would have put the next at 260, and c at 460
    jobs_ = [
        job("a", gpus=8, submitted_at=0, runtime=200),
        job("hi", gpus=8, submitted_at=1, runtime=130, priority=5),
        job("c", gpus=8, submitted_at=2, runtime=10),  # estimated at its arrival
    ]
    cfg = attrs.evolve(CFG, tick=60.0, estimate_every=3)
    for policy in POLICIES:
        res = Simulator(Scheduler(_one_node(), policy=policy), jobs_, cfg).run()
        assert [(e.job_id, e.start) for e in res.estimates] == [("c", 450.0)], policy
        assert res.record("c").started_at == 450.0
