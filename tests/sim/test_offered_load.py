"""A trace's cluster is sized for the load it really sees, and a run too small to be contended
says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from kant.cli import main
from kant.sim.scenarios import (
    busy_window,
    cluster_for_jobs,
    load_note,
    make_scenario,
    offered_load,
    trace_scenario,
)
from kant.testing import job

DAY = 86400.0


def _sparse_then_busy() -> list:
    """10 jobs over 20 days, then 400 over one day: a trace's lead-in, then its real load."""
    lead = [job(f"l{i}", gpus=8, submitted_at=i * 2 * DAY, runtime=3600.0) for i in range(10)]
    busy = [
        job(f"b{i}", gpus=8, submitted_at=20 * DAY + i * DAY / 400, runtime=7200.0)
        for i in range(400)
    ]
    return lead + busy


def test_a_trace_with_a_sparse_lead_in_is_sized_for_its_busy_stretch() -> None:
    jobs = _sparse_then_busy()
    t0, t1 = busy_window(jobs)
    assert t0 >= 20 * DAY  # the lead-in is outside the middle 90% of arrivals
    gpus = cluster_for_jobs(jobs, load=0.8).total_gpus
    # over the busy day the cluster is offered about the target load, not a fraction of it
    assert 0.7 <= offered_load(jobs, gpus, t0, t1) <= 0.9


def test_offered_load_counts_only_the_gpu_time_inside_the_window() -> None:
    jobs = [job("a", gpus=4, submitted_at=0.0, runtime=100.0)]
    assert offered_load(jobs, 8, 50.0, 150.0) == pytest.approx(4 * 50 / (8 * 100))
    assert offered_load(jobs, 8, 200.0, 300.0) == 0.0


def test_a_run_with_too_few_jobs_to_be_contended_says_so() -> None:
    few = make_scenario("paper-training", jobs=3000)
    note = load_note(few, 0.95)
    assert note is not None and "barely contended" in note
    assert load_note(make_scenario("paper-training"), 0.95) is None


def test_kant_simulate_prints_the_note_with_its_results(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", "--jobs", "1500", "--no-plots", "--quiet", "--out", f"{tmp_path}/r"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "note: the offered load over the observation window" in out
    assert "note:" in err


def test_jobs_without_a_runtime_count_the_default_runtime_they_run_for(tmp_path: Path) -> None:
    # an SWF log whose run times are all unknown (-1): the simulator runs each job for its
    # default_runtime (3,600 s), so the cluster is sized, and the note measured, for that
    # work, not for none (8 GPUs for 200 8-GPU jobs arriving a minute apart, and "barely
    # contended" over four days of waits)
    rows = [f"{i + 1} {i * 60} 0 -1 8 -1 -1 8 -1 -1 1 1 1 -1 -1 -1 -1 -1" for i in range(200)]
    log = tmp_path / "no-runtimes.swf"
    log.write_text("\n".join(rows) + "\n")
    sc = trace_scenario("swf", path=log)
    assert sc.total_gpus > 400  # (about 180 jobs of 8 GPUs running at once, at load 0.8)
    assert load_note(sc, 0.8) is None
    assert sc.config.default_runtime == 3600.0
    t0, t1 = busy_window(sc.jobs)
    assert 0.7 <= offered_load(sc.jobs, sc.total_gpus, t0, t1, default_runtime=3600.0) <= 0.9
    jobs = [job("a", gpus=4, submitted_at=0.0)]
    assert offered_load(jobs, 8, 0.0, 7200.0) == pytest.approx(4 * 3600 / (8 * 7200))
    assert offered_load(jobs, 8, 0.0, 7200.0, default_runtime=60.0) == pytest.approx(
        4 * 60 / (8 * 7200)
    )


def test_the_note_on_a_trace_on_its_own_cluster_advises_only_options_the_run_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # openb runs on its node list, where --load is refused: the note advised "a higher load"
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        + "".join(
            f"p{i},1000,1024,1,1000,,LS,Running,{i * 600},{i * 600 + 60},{i * 600}\n"
            for i in range(20)
        )
    )
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},64000,262144,8,V100\n" for i in range(8))
    )
    argv = ["simulate", "--trace", "openb", "--trace-file", str(pods), "--cluster", str(nodes)]
    code = main([*argv, "--no-plots", "--quiet", "--out", f"{tmp_path}/r"])
    _out, err = capsys.readouterr()
    assert code == 0
    assert "barely contended" in err
    assert "higher load" not in err and "more jobs" not in err
    assert f"all the work the trace offers --cluster {nodes}: use a smaller --cluster" in err
    # and main refuses the advice it used to give
    assert main([*argv, "--load", "2", "--out", f"{tmp_path}/r"]) == 2
    capsys.readouterr()
    # an SWF log on its own machine (MaxProcs): --load would size a cluster in its place (not
    # a bigger load on it); more jobs once --jobs cut it
    log = tmp_path / "own.swf"
    log.write_text(
        "; MaxProcs: 64\n"
        + "".join(
            f"{i + 1} {i * 600} 0 60 1 -1 -1 1 -1 -1 1 1 1 -1 -1 -1 -1 -1\n" for i in range(20)
        )
    )
    argv = ["simulate", "--trace", "swf", "--trace-file", str(log), "--jobs", "10"]
    assert main([*argv, "--no-plots", "--quiet", "--out", f"{tmp_path}/s"]) == 0
    _out, err = capsys.readouterr()
    assert "barely contended" in err
    assert "offers its observation window: use more --jobs;" in err
    assert "or a higher --load" not in err
    assert "MaxProcs runs on that machine unless --load is given" in err


def test_a_trace_on_a_cluster_sized_by_load_is_not_told_a_higher_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --load sizes the trace's cluster for that load over its busiest arrivals, and the note
    # compares the window's load with the same --load: a higher one shrinks the cluster as
    # it raises the target (here the cluster is one node, its largest job's, at any load),
    # so the advice to raise it changed nothing
    log = tmp_path / "sparse.swf"
    log.write_text(
        "".join(f"{i + 1} {i * 600} 0 60 1 -1 -1 1 -1 -1 1 1 1 -1 -1 -1 -1 -1\n" for i in range(20))
    )
    argv = ["simulate", "--trace", "swf", "--trace-file", str(log), "--no-plots", "--quiet"]
    for load in ("0.8", "5"):
        assert main([*argv, "--load", load, "--out", f"{tmp_path}/r{load}"]) == 0
        _out, err = capsys.readouterr()
        assert "barely contended" in err  # (whatever the load)
        assert "use a higher --load" not in err and "or a higher --load" not in err
        assert "a higher --load raises the target as much" in err


def test_a_workload_arriving_all_at_once_gets_no_note_of_a_load_it_cannot_measure(
    tmp_path: Path,
) -> None:
    # an openb multigpu pod list has no times: every pod arrives at 0, and the simulator
    # measures from then to the run's end, unknown before the run; the note called such a
    # run "0.00, barely contended" (18 pods of 8 GPUs on 8 GPUs: 17 of them wait)
    pods = tmp_path / "multigpu.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        + "".join(f"p{i},1000,1024,8,1000\n" for i in range(18))
    )
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100\n")
    sc = trace_scenario("openb", path=pods, cluster=nodes)
    assert {j.submitted_at for j in sc.jobs} == {0.0}
    assert load_note(sc, 0.8) is None
