"""The discrete-event simulator: hand-checkable timelines, determinism, preemption with a
grace period, node failures, accounting of every job, and no busy loops."""

from __future__ import annotations

import math

import attrs
import pytest

from kant.model import Job
from kant.sim.scenarios import PolicySet, Scenario, make_scenario, run_scenario
from kant.sim.simulator import EventKind, SimConfig, SimResult, Simulator
from kant.testing import ClusterBuilder, check_invariants, job

# --------------------------------------------------------------------------- helpers


def one_leaf(nodes: int = 1) -> tuple:
    return tuple(ClusterBuilder().leaf("lf0", nodes=nodes).specs())


def scenario(
    jobs: list[Job],
    *,
    nodes: int = 1,
    tick: float = 0.0,
    grace: float = 30.0,
    sample_interval: float = 10.0,
    **cfg: object,
) -> Scenario:
    return Scenario(
        name="t",
        description="hand-made",
        nodes=one_leaf(nodes),
        jobs=tuple(jobs),
        config=SimConfig(
            tick=tick, grace_period=grace, sample_interval=sample_interval, trace=True, **cfg
        ),
        default_policy=PolicySet(queueing="best-effort-fifo", placement="ebinpack"),
    )


def run(sc: Scenario, policy: PolicySet | None = None) -> SimResult:
    s = sc.scheduler(policy)
    result = Simulator(s, sc.jobs, sc.config).run()
    check_invariants(s)  # cluster, queue and admitter agree after the run
    return result


def times(result: SimResult, job_id: str) -> tuple[float | None, float | None]:
    r = result.record(job_id)
    return r.started_at, r.finished_at


def events(result: SimResult, kinds: tuple[str, ...] = ("start", "finish")) -> list[tuple]:
    return [(e.t, e.kind, e.subject) for e in result.trace if e.kind in kinds]


# --------------------------------------------------------------------------- timelines


def test_second_job_waits_for_the_first_on_one_node() -> None:
    sc = scenario(
        [
            job("a", gpus=8, submitted_at=0, runtime=100),
            job("b", gpus=8, submitted_at=10, runtime=50),
        ]
    )
    res = run(sc)
    assert times(res, "a") == (0, 100)
    assert times(res, "b") == (100, 150)
    assert [r.wait for r in res.records] == [0, 90]
    assert events(res) == [
        (0, "start", "a"),
        (100, "finish", "a"),
        (100, "start", "b"),
        (150, "finish", "b"),
    ]


def test_a_tick_coalesces_cycles_and_delays_decisions_to_the_next_tick() -> None:
    sc = scenario(
        [
            job("a", gpus=8, submitted_at=0, runtime=100),
            job("b", gpus=8, submitted_at=10, runtime=50),
        ],
        tick=60,
    )
    res = run(sc)
    # cycles at 0 (a starts), 60 (b does not fit), 120 (after a finished at 100)
    assert [e.t for e in res.trace if e.kind == "cycle"] == [0, 60, 120]
    assert times(res, "b") == (120, 170)
    assert res.record("b").wait == 110


def test_two_small_jobs_share_the_node_and_run_at_once() -> None:
    sc = scenario(
        [
            job("a", gpus=4, submitted_at=0, runtime=100),
            job("b", gpus=4, submitted_at=5, runtime=100),
        ]
    )
    res = run(sc)
    assert times(res, "a") == (0, 100)
    assert times(res, "b") == (5, 105)
    # both on the one node: GAR 50% from 0, 100% from 5, 50% from 100
    gar = {s.t: s.gar for s in res.samples}
    assert (gar[0], gar[10], gar[100]) == (0.5, 1.0, 0.5)
    assert res.summary.jobs["finished"] == 2


def test_pod_level_pods_run_and_finish_one_by_one() -> None:
    svc = job("svc", gpus=8, replicas=2, gang=False, kind="inference", runtime=100)
    res = run(scenario([svc]))
    # one pod starts at 0; the second waits for the first's GPUs and runs 100..200
    assert times(res, "svc") == (0, 200)
    starts = [(e.t, e.detail) for e in res.trace if e.kind == "start"]
    assert starts == [(0, "pods=1"), (100, "pods=1")]


def test_a_gang_counts_from_full_binding_and_ends_as_a_whole() -> None:
    g = job("g", gpus=8, replicas=2, runtime=300)
    res = run(scenario([g], nodes=2))
    assert times(res, "g") == (0, 300)
    r = res.record("g")
    assert (r.nodes_used, r.groups_used) == (2, 1)
    assert math.isclose(res.samples[1].gar, 1.0)


# --------------------------------------------------------------------------- preemption


def priority_scenario(on_interrupt: str = "resume") -> Scenario:
    return scenario(
        [
            job("low", gpus=8, submitted_at=0, runtime=1000, priority=0),
            job("high", gpus=8, submitted_at=100, runtime=200, priority=1),
        ],
        on_interrupt=on_interrupt,
    )


PRIORITY = PolicySet(queueing="best-effort-fifo", placement="ebinpack", preemption="priority")


def test_victims_keep_their_gpus_for_the_grace_period_then_the_preemptor_starts() -> None:
    res = run(priority_scenario(), PRIORITY)
    assert events(res, ("preempt", "evict", "requeue", "start")) == [
        (0, "start", "low"),
        (100, "preempt", "low"),
        (130, "evict", "low/worker/0"),
        (130, "requeue", "low"),
        (130, "start", "high"),
        (330, "start", "low"),
    ]
    gar = {s.t: s.gar for s in res.samples}
    assert gar[110] == 1.0 and gar[120] == 1.0  # the victim still holds its GPUs
    assert times(res, "high") == (130, 330)
    low = res.record("low")
    assert (low.preempted, low.requeued) == (1, 1)
    assert low.started_at == 0  # JWTD counts the first start
    # resume: 130 s of its 1,000 s were done, 870 s are left
    assert low.finished_at == 330 + 870
    assert res.summary.preemptions == 1 and res.summary.evicted_pods == 1


def test_restart_runs_the_whole_runtime_again() -> None:
    res = run(priority_scenario("restart"), PRIORITY)
    assert res.record("low").finished_at == 330 + 1000


def test_a_victim_that_finishes_within_the_grace_period_just_finishes() -> None:
    sc = scenario(
        [
            job("low", gpus=8, submitted_at=0, runtime=110, priority=0),
            job("high", gpus=8, submitted_at=100, runtime=200, priority=1),
        ]
    )
    res = run(sc, PRIORITY)
    assert times(res, "low") == (0, 110)
    assert res.record("low").requeued == 0
    assert res.summary.evicted_pods == 0
    assert times(res, "high") == (110, 310)
    # it was chosen as a victim all the same: an eviction asked counts, evicted or not
    assert (res.summary.preemptions, res.summary.preempted_jobs) == (1, 1)
    assert res.record("low").preempted == 1


def test_the_backfill_head_preempts_at_its_threshold_with_nothing_else_happening() -> None:
    sc = scenario(
        [
            job("a1", gpus=4, submitted_at=0, runtime=50),
            job("a2", gpus=4, submitted_at=0, runtime=100),
            job("head", gpus=8, submitted_at=10, runtime=100),
            job("b", gpus=4, submitted_at=20, runtime=10_000),
        ]
    )
    pol = PolicySet(queueing="backfill", placement="ebinpack", threshold=300)
    res = run(sc, pol)
    # b backfills at 50; at 10 + 300 a wake-up cycle lets the head preempt it
    assert times(res, "b")[0] == 50
    assert [e.t for e in res.trace if e.kind == "preempt"] == [310]
    assert times(res, "head") == (340, 440)
    assert res.record("b").finished_at == 440 + (10_000 - (340 - 50))


# --------------------------------------------------------------------------- failures


def test_a_lost_node_requeues_its_gang_which_resumes_when_the_node_is_back() -> None:
    g = job("g", gpus=8, replicas=2, runtime=1000)
    sc = scenario([g], nodes=2, failures=((400, "lf0-n0"),), mttr=100)
    res = run(sc)
    assert events(res, ("start", "node_fail", "requeue", "node_up", "finish")) == [
        (0, "start", "g"),
        (400, "node_fail", "lf0-n0"),
        (400, "requeue", "g"),
        (500, "node_up", "lf0-n0"),
        (500, "start", "g"),
        (1100, "finish", "g"),
    ]
    r = res.record("g")
    assert (r.requeued, r.started_at, r.finished_at) == (1, 0, 1100)
    assert res.summary.node_failures == 1
    # 16 GPUs held for 400 + 600 s; capacity dropped to 8 GPUs for 100 s of the 1,100 s
    assert math.isclose(res.summary.sor, 16 * (400 + 600) / (16 * 1000 + 8 * 100), rel_tol=1e-9)


def test_random_failures_are_seeded_and_every_job_is_accounted_for() -> None:
    sc = make_scenario("paper-training", jobs=150, seed=3)
    cfg = attrs.evolve(sc.config, mtbf=2 * 86400.0, mttr=1800.0, seed=5)
    a = run_scenario(sc, config=cfg)
    b = run_scenario(sc, config=cfg)
    assert a == b
    assert a.summary.node_failures > 0
    assert sum(a.summary.jobs.values()) == 150
    assert a.summary.jobs["finished"] == 150


def test_a_node_still_fails_while_the_gang_it_would_hold_waits_for_another_repair() -> None:
    g = job("g", gpus=8, replicas=2, runtime=1000)
    sc = scenario([g], nodes=2, failures=((300, "lf0-n0"), (400, "lf0-n1")), mttr=500)
    res = run(sc)
    # n0 fails at 300 and the gang waits (700 s of work left); n1 fails at 400 all the same,
    # so the gang starts again only when n1 is back at 900
    assert events(res, ("start", "node_fail", "node_up", "finish")) == [
        (0, "start", "g"),
        (300, "node_fail", "lf0-n0"),
        (400, "node_fail", "lf0-n1"),
        (800, "node_up", "lf0-n0"),
        (900, "node_up", "lf0-n1"),
        (900, "start", "g"),
        (1600, "finish", "g"),
    ]
    assert res.summary.node_failures == 2


def failures_by_node(res: SimResult) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for e in res.trace:
        if e.kind == "node_fail":
            out.setdefault(e.subject, []).append(e.t)
    return out


def test_with_mtbf_every_node_keeps_failing_while_a_job_waits_for_a_repair() -> None:
    g = job("g", gpus=8, replicas=2, runtime=200_000)
    res = run(scenario([g], nodes=2, mtbf=20_000.0, mttr=5_000.0, seed=3))
    end = res.summary.end
    fails = failures_by_node(res)
    # a node up 20,000 s on average, then 5,000 s in repair: about 10 failures each over the
    # run; none of its failures is dropped while the gang waits for the other node, so its
    # chain of failures runs to the end
    for node in ("lf0-n0", "lf0-n1"):
        assert len(fails[node]) >= 6, (node, fails[node])
        assert fails[node][-1] > end - 4 * 25_000, (node, fails[node], end)


def test_explicit_failures_do_not_make_a_node_fail_more_often_under_mtbf() -> None:
    def failures(explicit: tuple[tuple[float, str], ...], seed: int) -> int:
        sc = scenario(
            [job("j", gpus=1, runtime=1_000_000)],
            mtbf=10_000.0,
            mttr=1.0,
            seed=seed,
            failures=explicit,
            sample_interval=10_000.0,  # (a 10^6 s run: 100 samples, not 100,000, which
            # took four fifths of the test; sampling decides nothing)
        )
        return run(sc).summary.node_failures

    three = tuple((t, "lf0-n0") for t in (1.0, 2.0, 3.0))
    alone = sum(failures((), seed) for seed in range(5))
    mixed = sum(failures(three, seed) for seed in range(5))
    # about 100 random failures per run either way, plus the 3 explicit ones: one chain of
    # random failures per node, however many explicit failures it also has
    assert 400 < alone < 600
    assert abs(mixed - (alone + 5 * 3)) < 0.2 * alone, (alone, mixed)


# --------------------------------------------------------------------------- accounting


def test_a_job_that_can_never_fit_stays_pending_and_the_run_ends_without_busy_looping() -> None:
    sc = scenario(
        [
            job("ok", gpus=8, submitted_at=0, runtime=100),
            job("huge", gpus=8, replicas=4, submitted_at=0, runtime=100),
        ]
    )
    res = run(sc)
    assert res.summary.jobs == {"pending": 1, "running": 0, "finished": 1, "failed": 0}
    assert res.summary.cycles == 2  # at 0, and after "ok" finished; then nothing can change
    huge = res.record("huge")
    assert huge.started_at is None and huge.state == "pending"
    assert res.summary.jwtd["9-64"].unstarted == 1


def test_every_submitted_job_is_in_exactly_one_final_state() -> None:
    sc = make_scenario("paper-training", jobs=300, seed=1)
    res = run_scenario(sc, PolicySet(queueing="backfill", placement="ebinpack", threshold=60))
    assert sum(res.summary.jobs.values()) == 300
    assert len(res.records) == 300
    assert {r.state for r in res.records} <= {"finished", "pending", "running", "failed"}
    assert all(r.started_at is not None for r in res.records if r.state == "finished")


def test_a_horizon_stops_the_run_and_reports_running_and_unarrived_jobs() -> None:
    sc = scenario(
        [
            job("a", gpus=8, submitted_at=0, runtime=1000),
            job("b", gpus=8, submitted_at=5000, runtime=10),
        ],
        horizon=500,
    )
    res = run(sc)
    assert res.summary.jobs["running"] == 1 and res.summary.jobs["not_arrived"] == 1
    assert res.summary.end == 500


def test_the_same_seed_gives_identical_results() -> None:
    sc = make_scenario("paper-training", jobs=400, seed=7)
    pol = PolicySet(queueing="backfill", placement="ebinpack", threshold=120)
    a = run_scenario(sc, pol)
    b = run_scenario(sc, pol)
    assert a == b
    assert a.summary.to_dict() == b.summary.to_dict()


def test_inference_scenario_runs_with_quotas_and_accounts_for_every_service() -> None:
    sc = make_scenario("inference", jobs=150)
    s = sc.scheduler()
    res = Simulator(s, sc.jobs, sc.config).run()
    check_invariants(s)
    assert sum(res.summary.jobs.values()) == 150
    assert res.summary.jobs["finished"] == 150
    assert 0 < res.summary.gar <= 1


def test_events_at_one_instant_release_before_arrivals_and_cycle_last() -> None:
    assert EventKind.FINISH < EventKind.EVICT < EventKind.ARRIVAL < EventKind.TICK


def test_bad_config_values_are_rejected_with_the_field_name() -> None:
    from kant.errors import ValidationError

    with pytest.raises(ValidationError, match="on_interrupt"):
        SimConfig(on_interrupt="retry")
    with pytest.raises(ValidationError, match="failures"):
        SimConfig(failures=((-1, "n0"),))
    with pytest.raises(ValidationError, match="warmup"):
        SimConfig(warmup=1.0)


def test_a_failure_naming_a_node_the_cluster_does_not_have_is_refused() -> None:
    from kant.errors import ValidationError

    sc = scenario([job("g", gpus=8, runtime=10)], nodes=1, failures=((5, "lf0-n9"),))
    with pytest.raises(ValidationError, match=r"lf0-n9.*names no node"):
        run(sc)


def test_random_failures_never_keep_a_finished_or_stuck_run_going() -> None:
    sc = scenario(
        [
            job("ok", gpus=8, submitted_at=0, runtime=1000),
            job("huge", gpus=8, replicas=4, submitted_at=0, runtime=100),
        ],
        mtbf=300.0,
        mttr=60.0,
    )
    res = run(sc)
    assert res.summary.jobs["finished"] == 1 and res.summary.jobs["pending"] == 1
    assert res.summary.node_failures > 0
    assert res.summary.end < 10 * 86400


def test_an_evicted_gang_is_one_preemption_and_one_requeue_whatever_its_pods() -> None:
    sc = scenario(
        [
            job("low", gpus=8, replicas=2, submitted_at=0, runtime=1000, priority=0),
            job("high", gpus=8, replicas=2, submitted_at=100, runtime=200, priority=1),
        ],
        nodes=2,
    )
    res = run(sc, PRIORITY)
    low = res.record("low")
    assert (low.preempted, low.requeued) == (1, 1)
    assert res.summary.preemptions == 1 and res.summary.evicted_pods == 2
    assert times(res, "high") == (130, 330)
    assert low.finished_at == 330 + 870


@pytest.mark.parametrize("cause", ["preemption", "node failure"])
def test_one_interruption_of_a_services_two_pods_counts_one_requeue_whatever_caused_it(
    cause: str,
) -> None:
    # both pods of svc lose their GPUs at the same instant and it goes back to the queue
    # once: one requeue (a preemption of the two pods in one cycle counted 2, one per victim
    # pod, where a node failure counted 1)
    svc = job("svc", gpus=4, replicas=2, gang=False, submitted_at=0, runtime=1000)
    if cause == "preemption":
        hi = job("hi", gpus=8, submitted_at=100, runtime=50, priority=10)
        res = run(scenario([svc, hi], grace=10.0), PRIORITY)
        assert res.summary.preemptions == 2 and res.summary.evicted_pods == 2
        assert [e.t for e in res.trace if e.kind == "evict"] == [110, 110]
    else:
        res = run(scenario([svc], failures=((100.0, "lf0-n0"),), mttr=10.0))
    r = res.record("svc")
    assert r.requeued == 1 and r.preempted == (cause == "preemption")
    assert [e.t for e in res.trace if e.kind == "requeue"] == [
        110 if cause == "preemption" else 100
    ]


def test_a_services_pods_evicted_by_two_cycles_are_two_requeues() -> None:
    # two preemptions, at 100 and 200, each of one pod: two interruptions
    sc = scenario(
        [
            job("svc", gpus=4, replicas=2, gang=False, submitted_at=0, runtime=1000),
            job("h1", gpus=4, submitted_at=100, runtime=1000, priority=10),
            job("h2", gpus=4, submitted_at=200, runtime=1000, priority=10),
        ],
        grace=10.0,
    )
    r = run(sc, PRIORITY).record("svc")
    assert (r.preempted, r.requeued) == (2, 2)


def test_a_simulator_refuses_a_queue_that_would_forget_jobs_it_must_report() -> None:
    from kant import Scheduler
    from kant.errors import ValidationError
    from kant.queueing import Queue

    cluster = ClusterBuilder().leaf("lf0", nodes=1).build()
    jobs = [job(f"j{i}", gpus=1, runtime=10.0, submitted_at=float(i)) for i in range(3)]
    with pytest.raises(ValidationError, match="history"):
        Simulator(Scheduler(cluster, queue=Queue(history=2)), jobs)
    Simulator(Scheduler(cluster, queue=Queue(history=3)), jobs)  # enough for every job
