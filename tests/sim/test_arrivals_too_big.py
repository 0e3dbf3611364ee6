"""An arrival too big to start schedules no cycle: after a cycle that decided nothing (a
reservation aside), with preemption off and nothing but arrivals since, a job that comes last
in the queue order and asks for more GPU than the cluster has free cannot start, and under
a policy that declares ``arrivals_unblock_none`` (Strict FIFO, Best-Effort FIFO, EASY), with
every runtime estimate known, it cannot make another job start either. Every record is the
same as when every arrival runs a cycle."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.scheduler import Scheduler
from kant.sim import SimConfig, Simulator
from kant.state import ClusterState
from kant.testing import ClusterBuilder, job
from kant.testing.strategies import clusters, jobs

from .every_arrival import REFERENCE, open_gate
from .nasa_loaded import OFF, loaded_nasa_jobs, needs_nasa, run_nasa

CFG = SimConfig(tick=0.0, sample_interval=50.0, trace=True)


def _starts(res: Any) -> dict[str, float | None]:
    return {r.job_id: r.started_at for r in res.records}


def _one_node() -> ClusterState:
    return ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build()


def test_jobs_too_big_for_the_free_gpus_wait_for_the_release_without_cycles() -> None:
    jobs_ = [
        job("a", gpus=6, submitted_at=0, runtime=100),
        job("b", gpus=4, submitted_at=10, runtime=100),  # 2 free: a cycle, which places none
        job("c", gpus=3, submitted_at=20, runtime=10),  # too big: no cycle
        job("d", gpus=1, replicas=3, gang=True, submitted_at=30, runtime=10),  # 3 > 2: none
        job("e", gpus=1, submitted_at=40, runtime=10),  # fits: a cycle, which starts it
        job("f", gpus=2, submitted_at=45, runtime=10),  # 1 free, but the last cycle
        # started e: a cycle
    ]

    def run(policy: Any) -> Any:
        s = Scheduler(_one_node(), policy=policy, preemption=OFF)
        return Simulator(s, jobs_, CFG).run()

    res = run("best-effort-fifo")
    assert _starts(res) == {"a": 0, "b": 100, "c": 100, "d": 110, "e": 40, "f": 50}
    assert res.summary.too_big_arrivals == 2  # c and d
    assert [e.t for e in res.trace if e.kind == "cycle"] == [0, 10, 40, 45, 50, 60, 100, 110]
    ref = run(REFERENCE["best-effort-fifo"])
    assert (_starts(ref), ref.summary.too_big_arrivals) == (_starts(res), 0)
    assert ref.records == res.records
    assert ref.summary.cycles == res.summary.cycles + 2
    # with preemption on, time alone may make victims eligible: every arrival runs a cycle
    s = Scheduler(_one_node(), policy="best-effort-fifo")
    on = Simulator(s, jobs_, CFG).run()
    assert on.summary.too_big_arrivals == 0


def test_with_a_tick_every_arrival_runs_its_cycle_so_later_cycles_keep_their_times() -> None:
    # with cycles at most every 7 s, the cycle c's arrival runs (at 14, deciding nothing)
    # puts the next one, after a's release at 20, at 21: skipping it would move that to 20
    jobs_ = [
        job("a", gpus=8, submitted_at=0, runtime=20),
        job("b", gpus=4, submitted_at=1, runtime=10),
        job("c", gpus=8, submitted_at=10, runtime=10),
    ]
    cfg = SimConfig(tick=7.0, sample_interval=50.0, trace=True)
    for policy in ("best-effort-fifo", "easy-backfill"):
        s = Scheduler(_one_node(), policy=policy, preemption=OFF)
        res = Simulator(s, jobs_, cfg).run()
        assert res.summary.too_big_arrivals == 0
        assert [e.t for e in res.trace if e.kind == "cycle"][:4] == [0, 7, 14, 21]
        assert _starts(res)["b"] == 21


def test_a_pod_level_job_needs_only_its_smallest_pod_to_fit() -> None:
    jobs_ = [
        job("a", gpus=7, submitted_at=0, runtime=100),
        job("b", gpus=2, submitted_at=10, runtime=100),  # 1 GPU free: a cycle that places
        # nothing (the cycle at 0 decided something)
        job("pods", gpus=1, replicas=3, gang=False, submitted_at=20, runtime=10),
        job("gang", gpus=1, replicas=3, gang=True, submitted_at=30, runtime=10),
    ]
    s = Scheduler(_one_node(), policy="best-effort-fifo", preemption=OFF)
    res = Simulator(s, jobs_, CFG).run()
    # one pod of "pods" fits at 20 (its cycle runs and starts it); the gang cannot at 30,
    # but the cycle at 20 started a pod, so its arrival still runs a cycle
    assert [e.t for e in res.trace if e.kind == "cycle"][:4] == [0, 10, 20, 30]
    assert res.summary.too_big_arrivals == 0
    ref = Simulator(
        Scheduler(_one_node(), policy=REFERENCE["best-effort-fifo"], preemption=OFF), jobs_, CFG
    ).run()
    assert ref.records == res.records


def test_easy_holds_its_reservation_while_too_big_jobs_arrive_behind_it() -> None:
    jobs_ = [
        job("a", gpus=6, submitted_at=0, runtime=100),
        job("head", gpus=4, submitted_at=10, runtime=50),  # blocked: a reservation at 100
        job("short", gpus=2, submitted_at=20, runtime=30),  # fits before 100: starts
        job("big", gpus=3, submitted_at=30, runtime=10),  # 0 free: last, too big
        job("urgent", gpus=1, priority=5, submitted_at=40, runtime=10),  # not last: a cycle
    ]

    def run(policy: Any) -> Any:
        s = Scheduler(_one_node(), policy=policy, preemption=OFF)
        return Simulator(s, jobs_, CFG).run()

    res = run("easy-backfill")
    assert _starts(res) == {"a": 0, "head": 100, "short": 20, "big": 100, "urgent": 50}
    # the cycle at 20 started "short"; the one at 30 would decide nothing (reservation
    # aside): "big" runs none. "urgent" comes first in the order: its arrival runs a cycle
    assert res.summary.too_big_arrivals == 0
    assert [e.t for e in res.trace if e.kind == "cycle"] == [0, 10, 20, 30, 40, 50, 60, 100]
    late = [attrs.evolve(j, submitted_at=j.submitted_at + 5) if j.id == "urgent" else j
            for j in jobs_]  # fmt: skip
    ref = run(REFERENCE["easy-backfill"])
    assert ref.records == res.records

    def with_extra(policy: Any, extra: Any) -> Any:
        s = Scheduler(_one_node(), policy=policy, preemption=OFF)
        return Simulator(s, [*late, extra], CFG).run()

    # a second too-big job behind "big": no cycle, the same records as the reference
    extra = job("big2", gpus=4, submitted_at=33, runtime=10)
    res2, ref2 = with_extra("easy-backfill", extra), with_extra(REFERENCE["easy-backfill"], extra)
    assert res2.summary.too_big_arrivals == 1
    assert ref2.summary.too_big_arrivals == 0
    assert res2.records == ref2.records


def test_a_too_big_job_that_comes_first_moves_easy_s_reservation_and_runs_a_cycle() -> None:
    jobs_ = [
        job("a", gpus=7, submitted_at=0, runtime=100),
        job("wide", gpus=8, submitted_at=10, runtime=100),  # head: all 8 GPUs reserved at 100
        job("long", gpus=1, submitted_at=20, runtime=200),  # would delay "wide": waits
        # first in the order, too big for the 1 GPU free: it becomes the head and reserves
        # only 2 GPUs at 100, so "long" may take the free one now
        job("urgent", gpus=2, priority=5, submitted_at=30, runtime=10),
    ]
    s = Scheduler(_one_node(), policy="easy-backfill", preemption=OFF)
    res = Simulator(s, jobs_, CFG).run()
    assert res.summary.too_big_arrivals == 0
    assert _starts(res)["long"] == 30


def test_no_skip_without_the_declaration_or_with_an_unknown_runtime() -> None:
    jobs_ = [
        job("a", gpus=8, submitted_at=0, runtime=100),
        job("b", gpus=1, submitted_at=10, runtime=10),
        job("c", gpus=1, submitted_at=20, runtime=10),
    ]
    for policy in ("backfill", "conservative-backfill", REFERENCE["best-effort-fifo"]):
        s = Scheduler(_one_node(), policy=policy, preemption=OFF)
        res = Simulator(s, jobs_, CFG).run()
        assert res.summary.too_big_arrivals == 0
        assert [e.t for e in res.trace if e.kind == "cycle"] == [0, 10, 20, 100]
    # a job without an estimate may outlive the end EASY expects of it: every arrival runs
    # a cycle, whatever the policy
    unknown = [*jobs_[:2], attrs.evolve(jobs_[2], runtime_estimate=None)]
    for policy in ("best-effort-fifo", "easy-backfill"):
        s = Scheduler(_one_node(), policy=policy, preemption=OFF)
        res = Simulator(s, unknown, CFG).run()
        assert res.summary.too_big_arrivals == 0
    s = Scheduler(_one_node(), policy="best-effort-fifo", preemption=OFF)
    assert Simulator(s, jobs_, CFG).run().summary.too_big_arrivals == 1


def _timed(j: Any, submitted_at: int, runtime: int) -> Any:
    return attrs.evolve(j, submitted_at=float(submitted_at), runtime_estimate=float(runtime))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=clusters(max_nodes=4),
    stream=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 30)), min_size=1, max_size=14),
    data=st.data(),
    policy=st.sampled_from(sorted(REFERENCE)),
    tick=st.sampled_from([0.0, 7.0]),
    on_interrupt=st.sampled_from(["resume", "restart"]),
)
def test_skipping_too_big_arrivals_changes_no_record(
    cluster: ClusterState,
    stream: list[tuple[int, int]],
    data: st.DataObject,
    policy: str,
    tick: float,
    on_interrupt: str,
) -> None:
    # random jobs (gangs or not, whole or shared GPUs, GPU models, topology wishes) arriving
    # in bursts on a random cluster with unhealthy devices, cycles at once or at most every
    # 7 s, and up to two node failures (jobs requeued, nodes back 20 s later): the same
    # records as a run where every arrival runs a cycle
    t = 0
    stream_jobs = []
    for i, (gap, runtime) in enumerate(stream):
        t += gap
        stream_jobs.append(_timed(data.draw(jobs(i)), t, runtime))
    names = [n.name for n in cluster.nodes()]
    failures = data.draw(
        st.lists(st.tuples(st.integers(0, t + 30), st.sampled_from(names)), max_size=2)
    )
    cfg = SimConfig(
        tick=tick, sample_interval=50.0, failures=tuple((float(a), n) for a, n in failures),
        mttr=20.0, on_interrupt=on_interrupt,
    )  # fmt: skip

    def run(p: Any, state: ClusterState, reference: bool) -> Any:
        s = Scheduler(state, policy=p, preemption=OFF)
        return Simulator(open_gate(s) if reference else s, stream_jobs, cfg).run()

    res = run(policy, copy.deepcopy(cluster), False)
    ref = run(REFERENCE[policy], cluster, True)
    assert res.records == ref.records
    assert ref.summary.too_big_arrivals == ref.summary.behind_closed_gate == 0


@needs_nasa
def test_the_loaded_nasa_log_under_best_effort_and_easy_keeps_every_record(tmp_path: Path) -> None:
    jobs_ = loaded_nasa_jobs(tmp_path)
    for policy in ("best-effort-fifo", "easy-backfill"):
        res, ref = run_nasa(jobs_, policy), run_nasa(jobs_, REFERENCE[policy])
        assert res.records == ref.records
        # (an arrival that runs no cycle may share its instant with one that does)
        assert 100 < ref.summary.cycles - res.summary.cycles <= res.summary.too_big_arrivals
