"""Scenario tests of work restarted after node failures: a run that could restart without
end is refused, and the queue's interruption limit (``Backoff.max_interruptions``) ends it
with the job FAILED (docs/simulator.md, "Interrupted work")."""

from __future__ import annotations

import json
import subprocess
import sys

import attrs
import pytest

from kant.errors import InvalidGridError, ValidationError
from kant.queueing import Backoff, JobPhase, Queue
from kant.scheduler import Scheduler
from kant.sim.scenarios import PolicySet, Scenario, scenario_from_options
from kant.sim.simulator import SimConfig, Simulator
from kant.sweep import Grid
from kant.testing import ClusterBuilder, check_invariants, job


def _scenario(**cfg: object) -> Scenario:
    # a two-node gang of a day on nodes failing every hour on average: a try succeeds with a
    # chance of about e^-48, so under restart it never finishes
    cfg = {"mtbf": 3600.0, **cfg}
    return Scenario(
        name="t",
        description="hand-made",
        nodes=tuple(ClusterBuilder().leaf("lf0", nodes=2).specs()),
        jobs=(
            job("long", gpus=8, replicas=2, runtime=86_400),
            job("short", gpus=8, runtime=60, submitted_at=10),
        ),
        config=SimConfig(tick=0, sample_interval=600, mttr=60.0, seed=1, trace=True, **cfg),
        default_policy=PolicySet(queueing="best-effort-fifo", placement="ebinpack"),
    )


def test_restart_with_random_failures_and_no_bound_is_refused_before_the_run() -> None:
    sc = _scenario(on_interrupt="restart")
    with pytest.raises(ValidationError, match=r"on_interrupt.*horizon or a limit of interrupt"):
        Simulator(sc.scheduler(), sc.jobs, sc.config)


@pytest.mark.parametrize(
    "cfg",
    [
        {"on_interrupt": "resume"},  # work is kept: the job ends
        {"on_interrupt": "restart", "horizon": 50_000.0},
        {"on_interrupt": "restart", "mtbf": None, "failures": ((100.0, "lf0-n0"),)},
    ],
)
def test_a_run_that_ends_anyway_is_not_refused(cfg: dict[str, object]) -> None:
    sc = _scenario(**cfg)
    Simulator(sc.scheduler(), sc.jobs, sc.config).run()


def test_the_limit_fails_the_restarting_job_and_the_run_ends() -> None:
    sc = attrs.evolve(_scenario(on_interrupt="restart"), max_interruptions=3)
    s = sc.scheduler()
    res = Simulator(s, sc.jobs, sc.config).run()
    check_invariants(s)
    long = res.record("long")
    # (it ended when its last node failed: finished_at set, as for any job that ended)
    assert long.state == "failed" and long.finished_at is not None and long.requeued == 3
    assert res.record("short").state == "finished"
    assert res.summary.jobs["failed"] == 1
    assert s.queue.entry("long").interruptions == 4
    assert [e.detail for e in res.trace if e.kind == "fail"] == ["interruptions=4"]
    # nothing of it is held after its failure
    assert s.cluster.num_pods == 0


def test_a_config_files_limit_is_used_and_the_scenarios_overrides_it(tmp_path) -> None:
    from kant.config import load_config

    f = tmp_path / "kant.yaml"
    f.write_text(
        "queueing:\n  policy: best-effort-fifo\n  requeuing:\n    interruptionLimitCount: 1\n"
    )
    pol = PolicySet.from_config(load_config(f))
    sc = _scenario(on_interrupt="restart")
    assert sc.scheduler(pol).queue.backoff.max_interruptions == 1
    assert attrs.evolve(sc, max_interruptions=5).scheduler(pol).queue.backoff == Backoff(
        max_interruptions=5
    )
    res = Simulator(sc.scheduler(pol), sc.jobs, sc.config).run()
    assert res.record("long").state == "failed" and res.record("long").requeued == 1


def test_a_library_user_sets_the_limit_on_the_queue() -> None:
    sc = _scenario(on_interrupt="restart")
    s = Scheduler(
        sc.scheduler().cluster,
        queue=Queue(backoff=Backoff(max_interruptions=0), history=None),
        policy="best-effort-fifo",
    )
    res = Simulator(s, sc.jobs, sc.config).run()
    assert s.queue.entry("long").phase is JobPhase.FAILED
    assert res.record("long").requeued == 0


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_the_scenario_option_takes_an_int_of_zero_or_more(bad: object) -> None:
    with pytest.raises(ValidationError, match="max_interruptions"):
        scenario_from_options({"scenario": "inference", "max_interruptions": bad})


def test_a_grid_where_some_run_would_restart_for_ever_is_refused() -> None:
    base = {"scenario": "inference", "on_interrupt": ["resume", "restart"], "mtbf": 3600}
    with pytest.raises(InvalidGridError, match="on_interrupt"):
        Grid("simulate", base).runs()
    with pytest.raises(InvalidGridError, match="on_interrupt"):
        Grid("simulate", {**base, "max_interruptions": [None, 2]}).runs()
    assert len(Grid("simulate", {**base, "max_interruptions": [1, 2]}).runs()) == 4
    assert len(Grid("simulate", {**base, "horizon": 86400}).runs()) == 2
    with pytest.raises(InvalidGridError, match="max_interruptions"):
        Grid("simulate", {**base, "max_interruptions": -1}).runs()


def _kant(*args: str, level: str | None = "error") -> subprocess.CompletedProcess[str]:
    """``kant <args>`` in a fresh process (``level``: its ``--log-level``, None: the default)."""
    opts = ["--log-level", level] if level else []
    return subprocess.run(
        [sys.executable, "-m", "kant", *opts, *args], capture_output=True, text=True, timeout=300
    )


def test_kant_simulate_refuses_an_unbounded_restart_in_one_line(tmp_path) -> None:
    p = _kant(
        "simulate", "--scenario", "inference-paper", "--mtbf", "3600",
        "--on-interrupt", "restart", "--out", str(tmp_path / "r"), "--quiet",
    )  # fmt: skip
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert "--max-interruptions" in p.stderr and "horizon" in p.stderr
    assert not (tmp_path / "r").exists()


def test_a_limit_too_large_to_bound_a_restarting_run_is_refused_in_one_line(tmp_path) -> None:
    # (any limit passed: 10**23 interruptions per job ran for ever, 1,000 took 9.6 s of 20
    # jobs, the run's length growing with the limit)
    p = _kant(
        "simulate", "--scenario", "inference-paper", "--mtbf", "100", "--on-interrupt", "restart",
        "--max-interruptions", "99999999999999999999999", "--out", str(tmp_path / "r"),
        "--quiet", "--no-plots",
    )  # fmt: skip
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "at most 10,000" in p.stderr and not (tmp_path / "r").exists()
    grid = {"scenario": "inference", "on_interrupt": "restart", "mtbf": 3600}
    with pytest.raises(InvalidGridError, match="on_interrupt"):
        Grid("simulate", {**grid, "max_interruptions": 10**5}).runs()
    assert len(Grid("simulate", {**grid, "max_interruptions": 10**4}).runs()) == 1


def test_kant_simulate_with_a_limit_ends_and_reports_the_failed_jobs(tmp_path) -> None:
    p = _kant(
        "simulate", "--scenario", "inference-paper", "--mtbf", "3600",
        "--on-interrupt", "restart", "--max-interruptions", "3",
        "--out", str(tmp_path / "r"), "--quiet", "--no-plots", "--json",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    jobs = json.loads(p.stdout.strip().splitlines()[-1])["jobs"]
    assert jobs["failed"] > 0 and jobs["total"] == 56 and jobs["pending"] == 0


def test_kant_simulate_does_not_print_a_warning_per_simulated_node_failure(tmp_path) -> None:
    args = ["simulate", "--scenario", "inference", "--jobs", "40", "--mtbf", "20000",
            "--out", str(tmp_path / "r"), "--quiet", "--no-plots"]  # fmt: skip
    quiet = _kant(*args, level=None)
    assert quiet.returncode == 0, quiet.stderr
    assert "lost at" not in quiet.stderr
    loud = _kant(*args, level="warning")
    assert loud.returncode == 0 and "WARNING kant.scheduler: node" in loud.stderr
