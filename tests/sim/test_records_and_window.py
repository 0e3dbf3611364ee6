"""What the simulator reports of a job and of the observation window, on runs small enough to
work out by hand: a pod-level job's nodes, a failed job's end, a window with no sample, the
median SOR's bins, a run that starts late."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from kant import Scheduler
from kant.queueing import Backoff, Queue
from kant.sim import SimConfig, SimResult, Simulator
from kant.sim.report import format_summary, write_report
from kant.sim.scenarios import PolicySet, Scenario, run_scenario
from kant.testing import ClusterBuilder, job


def _run(jobs: list[Any], nodes: int, queue: Queue | None = None, **cfg: Any) -> SimResult:
    state = ClusterBuilder().leaf("lf0", nodes=nodes).build()
    s = Scheduler(state, queue=queue) if queue is not None else Scheduler(state)
    return Simulator(s, jobs, SimConfig(tick=0, **cfg)).run()


def test_a_pod_level_jobs_nodes_count_every_pod_not_only_the_first_cycles() -> None:
    # svc's first pod starts at t=1 on lf0-n1, its second at t=100 on lf0-n0 when the blocker
    # ends: two nodes, its optimum (it reported one: a NodeNum ratio of 0.5)
    res = _run([job("blocker", gpus=8, runtime=100, submitted_at=0),
                job("svc", gpus=8, replicas=2, gang=False, runtime=1000, submitted_at=1)],
               nodes=2)  # fmt: skip
    (svc,) = [r for r in res.records if r.job_id == "svc"]
    assert svc.nodes_used == 2
    assert res.summary.jtted["9-64"].node_ratio == 1.0


def test_a_job_failed_by_its_interruption_limit_ends_when_its_node_fails() -> None:
    res = _run([job("a", gpus=8, runtime=1000, submitted_at=0)], nodes=2,
               queue=Queue(backoff=Backoff(max_interruptions=0)),
               failures=((100, "lf0-n0"),))  # fmt: skip
    (a,) = res.records
    assert (a.state, a.started_at, a.finished_at) == ("failed", 0, 100)


def test_a_window_without_a_sample_is_read_from_the_last_sample_before_its_end() -> None:
    # the window is [50, 100] (half the arrivals' span left out), samples every 600 s: none
    # inside. The cluster is full throughout it; the drain after (one GPU of eight busy
    # for 100,000 s) is no part of it (GAR was 0.125, from every sample of the run)
    res = _run([job("a", gpus=8, runtime=100, submitted_at=0),
                job("b", gpus=1, runtime=100_000, submitted_at=100)], nodes=1, warmup=0.5)  # fmt: skip
    assert res.summary.gar == 1.0 and res.summary.sor == 1.0


def test_a_services_last_replica_wait_is_recorded_beside_its_first_pods() -> None:
    # svc's first replica starts at t=1, its second at t=100 when the blocker ends: its wait
    # is 0 (JWTD reads the first pod), its replicas' 99 (the experiment's service waits)
    res = _run([job("blocker", gpus=8, runtime=100, submitted_at=0),
                job("svc", gpus=8, replicas=2, gang=False, runtime=1000, submitted_at=1),
                job("g", gpus=8, runtime=10, submitted_at=2)], nodes=2)  # fmt: skip
    rec = {r.job_id: r for r in res.records}
    assert (rec["svc"].started_at, rec["svc"].all_started_at) == (1, 100)
    assert (rec["svc"].wait, rec["svc"].replica_wait) == (0, 99)
    assert rec["blocker"].all_started_at == rec["blocker"].started_at == 0  # a gang: its start
    assert rec["g"].replica_wait == rec["g"].wait


def test_a_service_whose_last_replica_never_ran_has_no_replica_wait() -> None:
    res = _run([job("svc", gpus=8, replicas=3, gang=False, runtime=50, submitted_at=0)],
               nodes=2, horizon=40)  # fmt: skip
    (svc,) = res.records
    assert svc.started_at == 0 and svc.all_started_at is None and svc.replica_wait is None


def test_a_record_whose_pods_all_ran_before_its_first_one_is_refused() -> None:
    from kant.errors import ValidationError
    from kant.metrics import JobRecord

    with pytest.raises(ValidationError, match="all_started_at"):
        JobRecord(job_id="a", submitted_at=0, started_at=5, all_started_at=4)
    with pytest.raises(ValidationError, match="all_started_at"):
        JobRecord(job_id="a", submitted_at=0, all_started_at=4)


def _failed_and_stuck(**cfg: Any) -> SimResult:
    """a (8 GPUs, ends at t=1000) fails with its node at t=10, never to run again; stuck
    (16 GPUs on one 8-GPU node) never starts; the node is repaired at t=30."""
    return _run([job("a", gpus=8, runtime=1000, submitted_at=0),
                 job("stuck", gpus=8, replicas=2, runtime=10, submitted_at=0)], nodes=1,
                queue=Queue(backoff=Backoff(max_interruptions=0)),
                failures=((10, "lf0-n0"),), mttr=20.0, **cfg)  # fmt: skip


def test_a_run_with_a_failed_job_and_a_stuck_one_ends_when_nothing_more_can_happen() -> None:
    # a fails when its node does at t=10 (its finish at t=1000 will never come); stuck needs
    # 16 GPUs of 8 and never starts. After the repair at t=30 nothing can change: the run
    # ends there (it ended at the dead finish, t=1000, stretching stuck's censored wait,
    # the window and SOR over 970 s of nothing)
    res = _failed_and_stuck(sample_interval=100.0)
    assert res.summary.end == 30
    assert res.summary.jwtd["9-64"].max == 30 and res.summary.jwtd["9-64"].unstarted == 1
    assert (res.summary.window_start, res.summary.window_end) == (0, 30)
    # 8 GPUs busy for 10 s, then none up for 20 s
    assert res.summary.sor == 1.0
    assert [x.t for x in res.samples] == [0]  # (every 100 s: none after the end)


def test_a_horizon_past_the_last_possible_change_does_not_stretch_the_run() -> None:
    res = _failed_and_stuck(horizon=500.0)
    assert res.summary.end == 30


def test_the_hourly_sor_median_covers_the_whole_window_in_equal_bins() -> None:
    # the window is [0, 6840] (1.9 h): the node is full for its first hour, then idle. Whole
    # hours alone gave one bin, [0, 3600], and a median of 100% for a window used at 53%;
    # two bins of 0.95 h cover it: 100% and 180 / 3420 = 5.3%
    res = _run([job("a", gpus=8, runtime=3600, submitted_at=0),
                job("z", gpus=8, runtime=10, submitted_at=6840)], nodes=1)  # fmt: skip
    s = res.summary
    assert (s.window_start, s.window_end) == (0, 6840)
    assert s.sor == pytest.approx(3600 / 6840)
    assert s.sor_median == pytest.approx((1 + 180 / 3420) / 2)


def test_a_run_that_starts_late_prints_its_length_and_window_from_its_first_arrival() -> None:
    # a trace's first job arrives a day in: the run lasts 2 h, its window [day + 0, day + 1 h]
    # (it printed "simulated 1.1 d, observation window 1.0 d to 1.0 d")
    day = 86_400
    jobs = (job("a", gpus=8, runtime=3600, submitted_at=day),
            job("b", gpus=8, runtime=3600, submitted_at=day + 3600))  # fmt: skip
    nodes = tuple(ClusterBuilder().leaf("lf0", nodes=1).specs())
    sc = Scenario(name="late", description="a day in", nodes=nodes, jobs=jobs,
                  config=SimConfig(tick=0))  # fmt: skip
    pol = PolicySet(queueing="strict-fifo", placement="ebinpack")
    res = run_scenario(sc, pol)
    assert (res.summary.start, res.summary.end) == (day, day + 7200)
    line = format_summary(sc, pol, res).splitlines()[2]
    assert line.startswith("simulated  2.0 h, observation window 0 s to 1.0 h"), line
    assert "from the first arrival (at 86,400 s)" in line
    assert res.summary.to_dict()["start"] == day


def test_a_late_runs_timeseries_csv_keeps_each_sample_time_exact(tmp_path: Path) -> None:
    # a trace whose first job arrives at 123,456,789 s, sampled every 10 s: every row of
    # timeseries.csv read t = 1.23457e+08 (six significant digits), 211 s after the first
    # sample, the same time for every sample
    t0 = 123_456_789.0
    jobs = (job("a", gpus=8, runtime=100, submitted_at=t0),
            job("b", gpus=4, runtime=50, submitted_at=t0 + 7))  # fmt: skip
    nodes = tuple(ClusterBuilder().leaf("lf0", nodes=1).specs())
    sc = Scenario(name="late", description="late", nodes=nodes, jobs=jobs,
                  config=SimConfig(tick=0, sample_interval=10))  # fmt: skip
    pol = PolicySet(queueing="strict-fifo", placement="ebinpack")
    res = run_scenario(sc, pol)
    write_report(tmp_path, sc, pol, res, plots=False)
    with (tmp_path / "timeseries.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["t"]) for r in rows] == [x.t for x in res.samples]
    assert rows[0]["t"] == "123456789.0" and rows[1]["t"] == "123456799.0"
    assert [int(r["pending"]) for r in rows] == list(res.queue_lengths)


def test_a_late_runs_plots_count_time_from_its_first_arrival(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a trace whose first job arrives 100 days in, for a run of 2 h: the comparison plots
    # drew its curves on an axis from day 0 to day 102 (all of them squeezed into the last
    # 2% of the width), and timeseries.png labelled "simulated time" the trace's own day 100
    pytest.importorskip("matplotlib")
    from kant.sim.report import plots

    day = 86_400
    jobs = (job("a", gpus=8, runtime=3600, submitted_at=100 * day),
            job("b", gpus=8, runtime=3600, submitted_at=100 * day + 3600))  # fmt: skip
    nodes = tuple(ClusterBuilder().leaf("lf0", nodes=1).specs())
    sc = Scenario(name="late", description="100 days in", nodes=nodes, jobs=jobs,
                  config=SimConfig(tick=0, sample_interval=600))  # fmt: skip
    pol = PolicySet(queueing="strict-fifo", placement="ebinpack")
    res = run_scenario(sc, pol)
    figs: dict[str, Any] = {}

    def keep(fig: Any, plt: Any, path: Path) -> Path:
        figs[path.name] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots.write_plots(tmp_path, res)
    plots.write_compare_plots(tmp_path, [(pol, res)])
    ts = figs["timeseries.png"].axes[0]
    assert ts.lines[0].get_xdata()[0] == 0.0  # (the first sample, at the first arrival)
    gar = figs["compare_gar_sor.png"].axes[0]
    assert gar.lines[0].get_xdata()[0] == 0.0
    assert gar.get_xlim() == pytest.approx((0, 1 / 24 * 1.02))  # (the window: 1 h)
