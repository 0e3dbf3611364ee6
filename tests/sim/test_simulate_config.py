"""``kant simulate --config``: a config file's tenants, quotas and policies drive the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kant.cli import main
from kant.config import load_config_text
from kant.errors import ValidationError
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.sim.scenarios import PolicySet, make_scenario, run_scenario
from kant.sim.simulator import SimConfig, Simulator
from kant.testing import ClusterBuilder, job

ZERO_SEARCH = """
tenants:
  - name: search
    mode: isolated
    quotas: {L40: {nominalQuota: 0}, A100: {nominalQuota: 0}}
  - {name: ads, quotas: {L40: {nominalQuota: 100}}}
  - {name: recsys, quotas: {L40: {nominalQuota: 100}, A100: {nominalQuota: 48}}}
  - {name: chat, quotas: {L40: {nominalQuota: 20}, A100: {nominalQuota: 48}}}
  - {name: vision, quotas: {L40: {nominalQuota: 30}, A100: {nominalQuota: 48}}}
queueing: {policy: backfill, options: {threshold: 600}}
preemption: {priority: false, minRuntimeSeconds: 60}
"""


def _started(result: object, tenant: str) -> int:
    return sum(
        1
        for r in result.records  # type: ignore[attr-defined]
        if r.tenant == tenant and r.started_at is not None
    )


def test_a_quota_in_the_config_file_decides_which_tenants_jobs_run() -> None:
    sc = make_scenario("inference", jobs=60)
    assert _started(run_scenario(sc), "search") > 0  # under the scenario's own quotas
    cfg = load_config_text(ZERO_SEARCH, source="kant.yaml")
    pol = PolicySet.from_config(cfg)
    result = run_scenario(sc.with_tenants(cfg), pol)
    assert _started(result, "search") == 0  # isolated with a zero quota: never admitted
    assert _started(result, "ads") > 0
    assert pol.preemption == "reclaim+backfill"
    assert pol.preemption_policy(True) == PreemptionPolicy(priority=False, min_runtime=60)


def test_a_scenario_without_a_tenants_section_keeps_its_own_quotas() -> None:
    sc = make_scenario("inference", jobs=10)
    cfg = load_config_text("queueing: {policy: strict-fifo}")
    assert sc.with_tenants(cfg).quotas == sc.quotas
    assert (
        run_scenario(sc, PolicySet.from_config(cfg)).records
        == run_scenario(sc, PolicySet(queueing="strict-fifo", preemption="all")).records
    )


def test_kant_simulate_reports_the_config_files_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "kant.yaml"
    f.write_text(ZERO_SEARCH)
    argv = ["simulate", "--scenario", "inference", "--jobs", "40", "--config", str(f),
            "--quiet", "--no-plots", "--json", "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "policy     queueing backfill (threshold=600), placement ebinpack, preemption "
        f"reclaim+backfill (min_runtime=60); from {f}"
    ) in out
    d = json.loads(out.strip().splitlines()[-1])
    assert (d["preemption"], d["config"]) == ("reclaim+backfill", str(f))


@pytest.mark.parametrize(
    ("text", "extra", "message"),
    [
        ("tenants:\n  - {name: a, quotas: {L40: {nominalQuota: -1}}}\n", [],
         "tenants[0].quotas.L40.nominalQuota: must be a number of GPUs"),
        ("queueing: {polcy: backfill}\n", [], "queueing.polcy: unknown key"),
        ("queueing: {policy: backfill}\n", ["--queueing", "strict-fifo"],
         "--queueing strict-fifo and --config"),
    ],
)  # fmt: skip
def test_a_bad_config_file_exits_2_with_one_line_naming_the_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    extra: list[str],
    message: str,
) -> None:
    f = tmp_path / "kant.yaml"
    f.write_text(text)
    argv = ["simulate", "--scenario", "inference", "--jobs", "5", "--config", str(f),
            "--quiet", "--no-plots", "--out", str(tmp_path / "r"), *extra]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert "Traceback" not in err[0]


def test_a_missing_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--jobs", "5", "--config", str(tmp_path / "none.yaml"), "--quiet",
            "--no-plots", "--out", str(tmp_path / "r")]  # fmt: skip
    with pytest.raises(SystemExit) as exit_:  # (refused by --config's own check, as --cluster)
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none.yaml" in err[0] and "no such file" in err[0], err


@pytest.mark.parametrize("zone", [["a", "b"], 5, None, "", " inference", "a/b"])
def test_an_espread_zone_that_is_no_zone_name_is_refused_not_placed_or_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], zone: object
) -> None:
    from kant.errors import InvalidConfigError, InvalidConfigFileError
    from kant.placement import make_strategy

    with pytest.raises(InvalidConfigError) as exc:
        make_strategy("espread", zone=zone)
    assert (exc.value.field, exc.value.value) == ("zone", zone)
    text = f"placement:\n  strategy: espread\n  options: {json.dumps({'zone': zone})}\n"
    with pytest.raises(InvalidConfigFileError, match=r"kant\.yaml: placement\.options: .*'zone'"):
        load_config_text(text, source="kant.yaml")
    f = tmp_path / "kant.yaml"
    f.write_text(text)
    argv = ["simulate", "--scenario", "inference", "--jobs", "5", "--config", str(f),
            "--quiet", "--no-plots", "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "zone" in err[0] and "Traceback" not in err[0], err


@pytest.mark.parametrize("strategy", ["fgd", "fgdpp"])
def test_a_config_naming_an_fgd_strategy_runs_with_the_scenarios_jobs_as_its_workload(
    strategy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the file was refused, "placement.options: ... fgd needs the target workload", though
    # docs/simulator.md says the FGD strategies take it from the scenario)
    cfg = tmp_path / "kant.yaml"
    cfg.write_text(f"placement: {{strategy: {strategy}}}\n")
    out = tmp_path / "out"
    argv = ["simulate", "--scenario", "inference", "--jobs", "20", "--config", str(cfg)]
    assert main([*argv, "--quiet", "--no-plots", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert doc["placement"] == strategy and doc["jobs"]["finished"] > 0


@pytest.mark.parametrize("config", [True, False], ids=["config", "no config"])
def test_the_policy_line_names_the_interruption_limit_the_run_used(
    config: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the line showed the file's interruptionLimitCount, 3, while --max-interruptions 5 ran)
    f = tmp_path / "kant.yaml"
    f.write_text("queueing:\n  requeuing: {interruptionLimitCount: 3}\n")
    argv = ["simulate", "--scenario", "inference", "--jobs", "10", "--mtbf", "3000",
            "--mttr", "10", "--max-interruptions", "5", "--quiet", "--no-plots",
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert main([*argv, *(["--config", str(f)] if config else [])]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("policy"))
    assert "max_interruptions=5" in line and "max_interruptions=3" not in line, line
    assert (tmp_path / "r" / "summary.txt").read_text().count(line) == 1


@pytest.mark.parametrize("kind", ["bad key", "missing"])
def test_a_mistake_in_the_config_file_stops_the_run_before_the_workload_is_built(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # (kant simulate --config bad.yaml --jobs 200000 built the 200,000 jobs, seconds, before
    # it read the file)
    def built(*_a: object, **_k: object) -> None:
        raise AssertionError("the workload was built before the config file was read")

    monkeypatch.setattr("kant.cli.simulate.scenario_from_options", built)
    f = tmp_path / "bad.yaml"
    if kind == "bad key":
        f.write_text("queueing: {polcy: x}\n")
    argv = ["simulate", "--jobs", "200000", "--config", str(f), "--quiet", "--no-plots",
            "--out", str(tmp_path / "r")]  # fmt: skip
    try:
        code = main(argv)
    except SystemExit as e:  # (a missing file: refused by the option's own check)
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(f) in err[0], err
    assert ("queueing.polcy: unknown key" if kind == "bad key" else "--config") in err[0]


@pytest.mark.parametrize("seed", [None, -1, 1.5, "x", True])
def test_a_failure_seed_that_is_not_a_whole_number_of_at_least_zero_is_refused(
    seed: object,
) -> None:
    # None drew the node failures from the operating system's entropy (two runs of the same
    # inputs differed); -1, 1.5 or "x" reached numpy and raised its own ValueError/TypeError
    with pytest.raises(ValidationError, match="seed"):
        SimConfig(seed=seed)  # type: ignore[arg-type]


def test_a_simulator_run_a_second_time_is_refused_and_its_first_result_stands() -> None:
    # the second run found the scheduler's jobs done and returned plausible, wrong metrics
    # (GAR 0, every job never started)
    jobs = [job(f"j{i}", gpus=8, runtime=5000.0, submitted_at=10.0 * i) for i in range(6)]
    sim = Simulator(Scheduler(ClusterBuilder().leaf("lf0", nodes=4).build()), jobs)
    first = sim.run()
    with pytest.raises(ValidationError, match="has run already"):
        sim.run()
    assert first.summary.gar > 0


def _cluster() -> object:
    return ClusterBuilder().leaf("lf0", nodes=2).build()


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Simulator("s", []), "scheduler"),  # type: ignore[arg-type]
        (lambda: Simulator(Scheduler(_cluster()), 5), "jobs"),  # type: ignore[arg-type]
        (lambda: Simulator(Scheduler(_cluster()), [job("a", gpus=1), {"id": "b"}]), r"jobs\[1\]"),
        (lambda: Simulator(Scheduler(_cluster()), "ab"), r"jobs\[0\]"),
        (lambda: Simulator(Scheduler(_cluster()), [], {"tick": 0}), "config"),  # type: ignore[arg-type]
        (lambda: Simulator(Scheduler(_cluster()), [], progress=3), "progress"),  # type: ignore[arg-type]
        (lambda: Simulator(Scheduler(_cluster()), [], progress_every="x"), "progress_every"),  # type: ignore[arg-type]
        (lambda: Simulator(Scheduler(_cluster()), [], progress_every=0), "progress_every"),
        (lambda: Simulator(Scheduler(_cluster()), [], progress_every=1.5), "progress_every"),  # type: ignore[arg-type]
        (lambda: make_scenario("inference", jobs=50).with_jobs(2.5), "jobs"),  # type: ignore[arg-type]
        (lambda: make_scenario("inference", jobs=50).with_jobs("3"), "jobs"),  # type: ignore[arg-type]
        (lambda: make_scenario("inference", jobs=50).with_jobs(True), "jobs"),  # type: ignore[arg-type]
    ],
    ids=[
        "scheduler-not-a-scheduler", "jobs-not-iterable", "a-job-not-a-job", "jobs-a-string",
        "config-a-dict", "progress-not-callable", "progress-every-a-string", "progress-every-0",
        "progress-every-1.5", "with-jobs-2.5", "with-jobs-a-string", "with-jobs-true",
    ],
)  # fmt: skip
def test_a_simulator_or_scenario_given_the_wrong_kind_of_value_says_which(
    make: object, field: str
) -> None:
    # each raised Python's AttributeError, TypeError or ValueError from deep inside (or,
    # progress_every=1.5 and with_jobs(True), was taken as 1), not a KantError naming it
    with pytest.raises(ValidationError, match=field):
        make()  # type: ignore[operator]
