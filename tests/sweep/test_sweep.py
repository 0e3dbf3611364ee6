"""``kant sweep``: a small grid on local processes and on a local Ray instance, resumed after
an interruption, with a run that raises; the grid format; the report from a store."""

from __future__ import annotations

import io
import itertools
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.cli import main
from kant.errors import InvalidGridError
from kant.sim.analysis import mean_ci, run_metrics, seed_sweep, t_quantile
from kant.sim.scenarios import PolicySet, make_scenario, run_scenario
from kant.sweep import (
    Grid,
    LocalPool,
    ProgressBar,
    RayCluster,
    RunSpec,
    Store,
    load_grid,
    run_sweep,
)
from kant.sweep.progress import format_eta
from kant.sweep.report import format_report, packing_groups, sim_groups
from kant.sweep.runs import prepare

# a tiny grid: 2 seeds x 2 placements of the inference scenario with 60 jobs, and one
# placement that does not exist (its runs raise in the worker)
TINY = {"scenario": "inference", "jobs": 60, "seed": [0, 1], "placement": ["ebinpack", "spread"]}


def metrics_by_key(store: Store) -> dict[str, Any]:
    return {k: r["metrics"] for k, r in store.latest().items() if r["status"] == "ok"}


def test_a_grid_expands_every_combination_with_the_policy_innermost() -> None:
    runs = Grid("simulate", {**TINY, "load": [0.8, 0.9]}).runs()
    assert len(runs) == 8 and len({r.key for r in runs}) == 8
    # runs sharing a scenario are adjacent, so it is built (or shipped) once
    groups = [r.group for r in runs]
    blocks = [g for i, g in enumerate(groups) if i == 0 or g != groups[i - 1]]
    assert len(blocks) == len(set(groups)) == 4
    assert [r.params["placement"] for r in runs[:2]] == ["ebinpack", "spread"]


def test_compare_grids_expand_seeds_and_policy_sets_like_the_command() -> None:
    runs = Grid(
        "compare",
        {"scenario": "inference", "seeds": "3-4", "sets": "strict-fifo+ebinpack,backfill+spread"},
    ).runs()
    assert [(r.params["seed"], r.params["queueing"], r.params["placement"]) for r in runs] == [
        (3, "strict-fifo", "ebinpack"),
        (3, "backfill", "spread"),
        (4, "strict-fifo", "ebinpack"),
        (4, "backfill", "spread"),
    ]
    # a compare run and a simulate run with the same options are the same run
    same = Grid(
        "simulate",
        {
            "scenario": "inference",
            "seed": 3,
            "queueing": "strict-fifo",
            "placement": "ebinpack",
            "preemption": "auto",
        },
    ).runs()
    assert same[0].key == runs[0].key


@pytest.mark.parametrize(
    ("command", "options", "field"),
    [
        ("simulate", {"out": "x"}, "out"),
        ("nonsense", {}, "command"),
        ("compare", {"seeds": "9-1"}, "seeds"),
        ("compare", {"sets": "backfill+nosuch"}, "sets"),
        ("simulate", {"seed": []}, "seed"),
        ("simulate", {"load": [{"a": 1}]}, "load"),
        ("packing", {"seed": 1, "seeds": "1-2"}, "seeds"),
        ("simulate", {"load": math.nan}, "load"),
        ("simulate", {"tick": [1.0, math.inf]}, "tick"),
        ("packing", {"inflate": -math.inf}, "inflate"),
        ("simulate", {"seed": -1}, "seed"),
        ("simulate", {"seed": 1.5}, "seed"),
        ("packing", {"seed": [1, -2]}, "seed"),
        ("compare", {"seeds": [0, -1]}, "seeds"),
        ("simulate", {"threshold": 5, "queueing": "strict-fifo"}, "threshold"),
        ("simulate", {"load": 1e-6}, "load"),
        ("compare", {"load": [0.9, 11]}, "load"),
        ("simulate", {"tick": 1e10}, "tick"),
        ("simulate", {"jobs": 0}, "jobs"),
        ("compare", {"jobs": 10**12}, "jobs"),
        ("packing", {"inflate": 0}, "inflate"),
        ("packing", {"inflate": 1e9}, "inflate"),
        ("simulate", {"load": "high"}, "load"),
        ("simulate", {"threshold": [600, "soon"]}, "threshold"),
        ("packing", {"inflate": True}, "inflate"),
        ("compare", {"jobs": [100, False]}, "jobs"),
        (
            "simulate",
            {"threshold": [None, 60], "queueing": ["backfill", "best-effort-fifo"]},
            "threshold",
        ),
    ],
)
def test_a_bad_grid_is_refused_naming_the_option(
    command: str, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidGridError) as e:
        Grid(command, options).runs()
    assert e.value.field == field


def test_a_grid_file_takes_its_paths_and_store_from_its_folder(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text(
        "command: simulate\noptions:\n  trace: philly\n  trace-file: philly.csv\n  seed: [1, 2]\n"
    )
    grid = load_grid(tmp_path / "g.yaml")
    assert grid.store == str(tmp_path / "g.jsonl")
    runs = grid.runs()
    assert {r.inputs["trace_file"] for r in runs} == {str(tmp_path / "philly.csv")}
    assert {r.params["trace_file"] for r in runs} == {"philly.csv"}  # (what the key hashes)
    (tmp_path / "bad.yaml").write_text("command: simulate\nwhat: 1\n")
    with pytest.raises(InvalidGridError):
        load_grid(tmp_path / "bad.yaml")
    # (an empty name was read as '.', the folder: "'.': cannot be read: Is a directory")
    with pytest.raises(InvalidGridError) as e:
        load_grid("")
    assert (e.value.value, e.value.reason) == ("", "an empty path names no grid file")


def test_an_interrupted_sweep_resumes_without_redoing_finished_runs(tmp_path: Path) -> None:
    specs = Grid("simulate", TINY).runs()
    store = Store(tmp_path / "s.jsonl")
    first = run_sweep(specs, store, LocalPool(1), max_runs=3)
    assert (first.ran, first.left) == (3, 1)
    done = store.done()
    # the interruption left half a line behind
    with store.path.open("a") as f:
        f.write('{"key": "half a rec')
    seen: list[str] = []
    second = run_sweep(specs, store, LocalPool(1), on_done=lambda s, _r: seen.append(s.key))
    assert (second.skipped, second.ran, second.failed) == (3, 1, 0)
    assert seen == [s.key for s in specs if s.key not in done]
    assert store.done() == {s.key for s in specs} and store.unreadable == 1
    third = run_sweep(specs, store, LocalPool(1))
    assert (third.skipped, third.ran) == (4, 0)


def test_a_run_that_raises_is_recorded_as_failed_with_its_error_while_the_rest_go_on(
    tmp_path: Path,
) -> None:
    specs = Grid(
        "simulate",
        {**TINY, "placement": ["nosuch", "ebinpack"], "scenario": ["inference", "nosuch"]},
    ).runs()
    store = Store(tmp_path / "s.jsonl")
    summary = run_sweep(specs, store, LocalPool(2))
    latest = store.latest()
    assert summary.ran == 8 and summary.failed == 6 and len(latest) == 8
    for s in specs:
        rec = latest[s.key]
        if s.params["scenario"] == "nosuch":  # it cannot be built: every run on it fails
            assert rec["status"] == "failed" and "scenario" in rec["error"]
        elif s.params["placement"] == "nosuch":  # raises in the worker
            assert rec["status"] == "failed" and rec["error"].startswith("UnknownPolicyError")
            assert rec["metrics"] is None
        else:
            assert rec["status"] == "ok" and rec["metrics"]["placement"] == "ebinpack"
    # a re-run skips every run the store holds; asked to, it tries the failed ones again
    assert run_sweep(specs, store, LocalPool(1)).ran == 0
    again = run_sweep(specs, store, LocalPool(1), retry_failed=True)
    assert (again.skipped, again.ran, again.failed) == (2, 6, 6)


def test_local_processes_store_the_metrics_of_a_run_in_this_process(tmp_path: Path) -> None:
    specs = Grid("simulate", TINY).runs()
    one, two = Store(tmp_path / "one.jsonl"), Store(tmp_path / "two.jsonl")
    run_sweep(specs, one, LocalPool(1))
    run_sweep(specs, two, LocalPool(2))
    assert metrics_by_key(one) == metrics_by_key(two) and len(metrics_by_key(one)) == 4
    spec = specs[1]
    sc = make_scenario("inference", jobs=60, seed=spec.params["seed"])
    pol = PolicySet(queueing="backfill", placement=spec.params["placement"])
    direct = json.loads(json.dumps(run_metrics(sc, pol, run_scenario(sc, pol))))
    assert metrics_by_key(one)[spec.key] == direct


class _KillsItsWorker:
    """A run's input whose unpickling ends the worker process (as an OOM kill would)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os._exit, (3,))


def test_a_worker_process_that_dies_fails_only_its_own_run_and_every_other_run_completes() -> None:
    specs = Grid("simulate", TINY).runs()
    tasks = [(i, s.kind, prepare(s.kind, s.inputs), s.inputs) for i, s in enumerate(specs)]
    killer = (len(tasks), "sim", _KillsItsWorker(), specs[0].inputs)
    tasks.insert(1, killer)  # in flight with healthy runs, and runs after it
    with LocalPool(2) as pool:
        got = dict(pool.run(tasks))
    assert sorted(got) == list(range(len(tasks)))
    assert got[killer[0]]["status"] == "failed"
    assert "worker process died running this run alone" in got[killer[0]]["error"]
    with LocalPool(1) as one:
        expected = dict(one.run(t for t in tasks if t is not killer))
    assert {i: o["metrics"] for i, o in got.items() if i != killer[0]} == {
        i: o["metrics"] for i, o in expected.items()
    }


class _SignalsItsWorker:
    """A run's input whose unpickling sends its worker process a signal (``kill`` from
    outside, a terminal's Ctrl-C reaching the process group), then is the input itself."""

    def __init__(self, signum: int, inputs: Any) -> None:
        self.signum, self.inputs = signum, inputs

    def __reduce__(self) -> tuple[Any, ...]:
        return (_signal_self, (self.signum, self.inputs))


def _signal_self(signum: int, inputs: Any) -> Any:
    import time

    os.kill(os.getpid(), signum)
    time.sleep(0.5)  # (SIGTERM ends the worker here; SIGINT is to change nothing)
    return inputs


class _Raised(BaseException):
    pass


def _raise(signum: int, frame: object) -> None:
    raise _Raised


def test_a_worker_ends_quietly_on_sigterm_and_ignores_sigint_whatever_its_parents_handlers(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # the CLI turns SIGTERM into an exception, and a forked worker kept that handler: a sweep
    # stopped while a worker read its next task printed the worker's traceback under its
    # one-line "interrupted"
    import signal

    specs = Grid("simulate", TINY).runs()[:2]
    tasks = [(i, s.kind, prepare(s.kind, s.inputs), s.inputs) for i, s in enumerate(specs)]
    term = (0, tasks[0][1], _SignalsItsWorker(signal.SIGTERM, tasks[0][2]), tasks[0][3])
    interrupt = (1, tasks[1][1], _SignalsItsWorker(signal.SIGINT, tasks[1][2]), tasks[1][3])
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        with LocalPool(2) as pool:
            got = dict(pool.run([term, interrupt]))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert got[0]["status"] == "failed" and "worker process died" in got[0]["error"]
    assert got[1]["status"] == "ok", got[1]
    assert "Traceback" not in capfd.readouterr().err


def test_a_worker_terminated_before_its_first_task_ends_quietly_under_a_raising_parents_handler(
    tmp_path: Path,
) -> None:
    # a worker just forked ran with its parent's handlers until its initializer reset them:
    # terminated then (its sibling died and the broken pool terminated the rest; the sweep
    # was stopped), it printed the parent's exception's traceback from its start-up. Here
    # each worker waits a second right after its fork and is terminated in that second (in
    # a process of its own: pytest's capture does not see a forked worker's sys.stderr)
    import subprocess
    import sys

    script = tmp_path / "race.py"
    script.write_text(
        "import os, signal, time\n"
        "from kant.sweep import Grid\n"
        "from kant.sweep.backends import LocalPool, _terminate_workers\n"
        "from kant.sweep.runs import prepare\n"
        "class Raised(BaseException): pass\n"
        "def handler(signum, frame): raise Raised\n"
        "slow = [False]\n"
        "os.register_at_fork(after_in_child=lambda: slow[0] and time.sleep(1.0))\n"
        f"spec = Grid('simulate', {TINY!r}).runs()[0]\n"
        "task = (0, spec.kind, prepare(spec.kind, spec.inputs), spec.inputs)\n"
        "signal.signal(signal.SIGTERM, handler)\n"
        "slow[0] = True\n"
        "with LocalPool(2) as pool:\n"
        "    pool._submit(task)  # (the workers are forked here)\n"
        "    _terminate_workers(pool._pool)  # (at once: in their first second)\n"
        "print('stopped')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0 and "stopped" in proc.stdout, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_small_grid_on_ray_stores_the_same_metrics_as_on_local_processes(
    tmp_path: Path, ray_instance: Any
) -> None:
    specs = Grid("simulate", {**TINY, "placement": ["ebinpack", "spread", "nosuch"]}).runs()
    local, ray = Store(tmp_path / "local.jsonl"), Store(tmp_path / "ray.jsonl")
    run_sweep(specs, local, LocalPool(2))
    order: list[str] = []
    summary = run_sweep(specs, ray, RayCluster(), on_done=lambda s, _r: order.append(s.key))
    assert summary.ran == 6 and summary.failed == 2 and len(order) == 6
    assert metrics_by_key(ray) == metrics_by_key(local) and len(metrics_by_key(ray)) == 4
    for k, rec in ray.latest().items():
        if rec["status"] == "failed":
            assert rec["params"]["placement"] == "nosuch"
            assert rec["error"] == local.latest()[k]["error"]
    assert ray_instance.is_initialized()  # the sweep left the test's instance running
    resumed = run_sweep(specs, ray, RayCluster(), retry_failed=True)
    assert (resumed.skipped, resumed.ran, resumed.failed) == (4, 2, 2)


def test_workers_asked_of_a_running_ray_cluster_cap_the_runs_in_flight_there(
    tmp_path: Path, ray_instance: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the instance has 2 CPUs and the sweep asks for 1 worker: one run in flight at a time
    # (twice the workers were in flight, and the cluster ran both at once)
    from kant.sweep import backends

    in_flight: list[int] = []
    top_up = backends._top_up

    def counted(pending: dict[Any, int], *args: Any) -> bool:
        more = top_up(pending, *args)
        in_flight.append(len(pending))
        return more

    monkeypatch.setattr(backends, "_top_up", counted)
    specs = Grid("simulate", TINY).runs()
    summary = run_sweep(specs, Store(tmp_path / "ray.jsonl"), RayCluster(workers=1))
    assert summary.ran == 4 and max(in_flight) == 1


def _ray_init_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The calls of ``ray.init`` (none is made: Ray is never started) with Ray not
    initialized; skips the test without Ray."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'kant[ray]'")
    calls: list[Any] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    return calls


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_a_ray_address_nothing_answers_at_is_refused_in_seconds_without_calling_ray(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    address: str,
) -> None:
    calls = _ray_init_calls(monkeypatch)
    grid = tmp_path / "g.yaml"
    grid.write_text("command: simulate\noptions:\n  scenario: inference\n  jobs: 20\n")
    assert main(["sweep", str(grid), "--quiet", f"--ray={address}"]) == 2
    err = capsys.readouterr().err
    assert f"cannot start or reach Ray ({address}): cannot connect to 127.0.0.1:1" in err
    assert calls == [] and not (tmp_path / "g.jsonl").exists()


@pytest.mark.parametrize(
    ("flag", "env", "named"),
    [
        ("--ray=:", None, "--ray ':'"),
        ("--ray=ray://:10001", None, "--ray 'ray://:10001'"),
        ("--ray=host:port", None, "--ray 'host:port'"),
        ("--ray= 10.0.0.1:6379", None, "--ray ' 10.0.0.1:6379'"),
        ("--ray", ":6379", "$RAY_ADDRESS ':6379'"),
    ],
)
def test_a_ray_address_of_no_form_ray_takes_is_one_line_naming_it_without_calling_ray(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
    env: str | None,
    named: str,
) -> None:
    # (Ray logged a traceback of its own for an empty host before kant's line)
    calls = _ray_init_calls(monkeypatch)
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    grid = tmp_path / "g.yaml"
    grid.write_text("command: simulate\noptions:\n  scenario: inference\n  jobs: 20\n")
    assert main(["sweep", str(grid), "--quiet", flag]) == 2
    err = capsys.readouterr().err
    assert f"Ray address {named} is none of auto, local, HOST:PORT, ray://HOST[:PORT]" in err
    assert len(err.strip().splitlines()) == 1
    assert calls == [] and not (tmp_path / "g.jsonl").exists()


def test_the_report_of_a_store_is_the_seed_sweep_of_its_runs(tmp_path: Path) -> None:
    specs = Grid(
        "compare",
        {
            "scenario": "inference",
            "jobs": 60,
            "seeds": "0-2",
            "sets": "strict-fifo+ebinpack,backfill+ebinpack",
        },
    ).runs()
    store = Store(tmp_path / "s.jsonl")
    run_sweep(specs, store, LocalPool(2))
    (group,) = sim_groups(store.records())
    assert [s for s, _r in group.by_seed] == [0, 1, 2] and not group.incomplete
    direct = []
    for seed in (0, 1, 2):
        sc = make_scenario("inference", jobs=60, seed=seed)
        direct.append((seed, [(p, run_scenario(sc, p)) for p in group.sets]))
    assert json.dumps(seed_sweep(group.by_seed)) == json.dumps(seed_sweep(direct))
    text = format_report(store.records())
    assert "3 seeds (0-2)" in text and "±" in text and "failed" not in text


def test_kant_sweep_runs_a_grid_file_resumes_it_and_reports_its_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text(
        "command: compare\noptions:\n  scenario: inference\n  jobs: 60\n  seeds: 0-1\n"
        "  sets: [strict-fifo+ebinpack, backfill+ebinpack]\n"
    )
    assert main(["sweep", str(grid), "--workers", "1", "--max-runs", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["left"] == 1
    assert main(["sweep", str(grid), "--workers", "1", "--quiet", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (doc["skipped"], doc["ran"], doc["failed"]) == (3, 1, 0)
    out = tmp_path / "rep"
    assert main(["sweep", "report", str(tmp_path / "g.jsonl"), "--out", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert rep["sim"][0]["sweep"]["n_seeds"] == 2 and rep["failed"] == []
    assert (out / "report.txt").exists() and (out / "inference_jobs=60" / "compare.json").exists()


def test_kant_sweep_says_what_is_wrong_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("command: simulate\noptions:\n  jobz: 3\n")
    assert main(["sweep", str(bad)]) == 2
    assert "jobz" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "missing.yaml")]) == 2
    assert main(["sweep", "report", str(tmp_path / "none.jsonl")]) == 2
    assert "Traceback" not in capsys.readouterr().err


POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def test_a_packing_grid_runs_each_seed_and_reports_seed_means(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    rows = [POD_HEADER] + [
        f"p{i:03d},{1000 * (1 + i % 4)},{1024 * (1 + i % 3)},{1 if i % 5 else 2},"
        f"{1000 if i % 5 == 0 or i % 2 else 500},{'A' if i % 3 else ''}"
        for i in range(30)
    ]
    pods.write_text("\n".join(rows) + "\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        f"{NODE_HEADER}\nn0,32000,131072,8,A\nn1,32000,131072,4,B\nn2,16000,65536,2,A\n"
    )
    grid = Grid(
        "packing",
        {"pods": str(pods), "nodes": str(nodes), "policy": ["fgd", "bestfit"], "seeds": "1-3"},
    )
    store = Store(tmp_path / "p.jsonl")
    summary = run_sweep(grid.runs(), store, LocalPool(2))
    assert (summary.ran, summary.failed) == (6, 0)
    from kant.sim.packing import packing

    (group,) = packing_groups(store.records())
    from kant.sweep.report import packing_result

    assert (
        packing_result(group, "fgd").alloc_at
        == packing(pods, nodes, "fgd", seeds=(1, 2, 3)).alloc_at
    )
    assert "fgd" in format_report(store.records())


def test_a_packing_grid_without_seeds_runs_kant_packings_own_seeds() -> None:
    # kant packing runs seeds 42-51 when given none; such a grid ran seed 42 alone
    from kant.sim.packing import SEEDS

    options = {"pods": "p.csv", "nodes": "n.csv", "policy": ["fgd", "bestfit"]}
    runs = Grid("packing", options).runs()
    assert len(runs) == 20 and tuple(range(42, 52)) == SEEDS
    assert runs == Grid("packing", {**options, "seeds": "42-51"}).runs()
    one = Grid("packing", {"pods": "p.csv", "nodes": "n.csv", "policy": "fgd", "seed": 7})
    assert [r.params["seed"] for r in one.runs()] == [7]


def test_a_report_written_without_plots_leaves_no_plot_of_an_earlier_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "cmp"
    argv = ["compare", "--scenario", "inference", "--jobs", "60", "--seeds", "0-1", "--sets",
            "strict-fifo+ebinpack,backfill+ebinpack", "--workers", "1", "--quiet",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert {p.name for p in out.glob("*.png")} == {"compare_jwtd.png", "compare_ci.png"}
    assert main([*argv, "--no-plots"]) == 0
    assert not list(out.glob("*.png"))
    # a sweep report's packing groups too
    pods = tmp_path / "pods.csv"
    pods.write_text(f"{POD_HEADER}\n" + "".join(f"p{i},1000,1024,1,1000,\n" for i in range(6)))
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(f"{NODE_HEADER}\nn0,32000,131072,8,A\n")
    grid = Grid("packing", {"pods": str(pods), "nodes": str(nodes), "policy": "fgd", "seed": 1})
    store = Store(tmp_path / "p.jsonl")
    run_sweep(grid.runs(), store, LocalPool(1))
    rep = tmp_path / "rep"
    assert main(["sweep", "report", str(store.path), "--out", str(rep)]) == 0
    assert [p.name for p in rep.rglob("*.png")] == ["packing.png"]
    assert main(["sweep", "report", str(store.path), "--out", str(rep), "--no-plots"]) == 0
    assert not list(rep.rglob("*.png"))
    capsys.readouterr()


def test_confidence_intervals_use_students_t() -> None:
    assert t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.975, 9) == pytest.approx(2.262, abs=1e-3)
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-3)
    assert math.isnan(mean_ci([5.0])[1]) and math.isnan(mean_ci([])[0])


def test_kant_compare_seeds_runs_through_the_sweep_runner_into_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compare", "--scenario", "inference", "--jobs", "60", "--seeds", "0-1", "--sets",
            "strict-fifo+ebinpack,backfill+spread", "--workers", "1", "--quiet", "--no-plots",
            "--out", str(tmp_path), "--json"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out.splitlines()[-1])
    store = Store(tmp_path / "runs.jsonl")
    (group,) = sim_groups(store.records())
    assert len(store.done()) == 4
    assert doc["sets"] == json.loads(json.dumps(seed_sweep(group.by_seed)))["sets"]
    # bad options are refused before anything runs, naming the option
    sets = argv.index("--sets") + 1
    assert main([*argv[:sets], "backfill+spread,backfill+spread+auto", *argv[sets + 1 :]]) == 2
    assert "must differ" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--load", "-1"])
    assert exit_.value.code == 2
    assert "load" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["jobs", "load", "tick", "mtbf", "threshold", "placement"]),
        st.lists(st.integers(1, 5), min_size=1, max_size=3, unique=True),
        max_size=4,
    )
)
def test_a_grid_holds_every_combination_of_its_options_once(options: dict[str, list[int]]) -> None:
    runs = Grid("simulate", options).runs()
    assert len(runs) == math.prod(len(v) for v in options.values())
    assert len({r.key for r in runs}) == len(runs)
    combos = {tuple(r.params.get(k) for k in sorted(options)) for r in runs}
    assert combos == set(itertools.product(*(options[k] for k in sorted(options))))
    # a run's key depends on its options only, not on where it sits in the grid
    assert all(RunSpec("sim", dict(reversed(list(r.params.items())))).key == r.key for r in runs)


def test_the_progress_bar_shows_runs_failures_and_an_eta() -> None:
    out = io.StringIO()
    bar = ProgressBar(4, label="sweep g", stream=out, every_s=0.0)
    bar.update(True)
    bar.update(False)
    # the first run finished 30 s after the start (start-up), the second 10 s later
    bar.t0, bar.first = bar.first - 30.0, bar.first  # type: ignore[operator]
    text = bar.text(bar.first + 10.0)
    assert "2/4 runs" in text and "1 failed" in text and "ETA 20s" in text
    assert "elapsed 40s" in text
    assert "[############............]" in text
    assert out.getvalue().count("\n") == 2  # not a terminal: one line per update
    assert format_eta(3725) == "1h02m" and format_eta(65) == "1m05s"


@pytest.mark.parametrize(
    ("signame", "code", "word"), [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")]
)
def test_a_sweep_whose_process_alone_is_interrupted_stops_at_once(
    tmp_path: Path, signame: str, code: int, word: str
) -> None:
    # SIGINT to the sweep's own process only (kill -INT, a notebook's stop), or SIGTERM (a
    # service manager's stop), two runs of about ten seconds in its two workers: it waited
    # for both to end, then dropped them
    import signal
    import subprocess
    import sys
    import time

    grid = tmp_path / "long.yaml"
    grid.write_text(
        "command: simulate\n"
        "options: {scenario: paper-training, jobs: 20000, placement: [ebinpack, spread]}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kant", "sweep", str(grid), "--workers", "2", "--quiet"],
        stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        # (a process started in the background inherits SIGINT ignored: Python keeps it so)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    _wait_for_children(proc.pid, 2)  # (its workers: the sweep has begun, handlers in place)
    time.sleep(1)
    t0 = time.monotonic()
    proc.send_signal(getattr(signal, signame))
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == code and word in err and "Traceback" not in err
    assert time.monotonic() - t0 < 5
    assert not (tmp_path / "long.jsonl").exists() or Store(tmp_path / "long.jsonl").done() == set()


def _wait_for_children(pid: int, count: int) -> None:
    """Until process ``pid`` has ``count`` child processes (a fixed sleep was too short
    on a loaded machine: the signal came while the sweep was still importing kant)."""
    import time

    children = Path(f"/proc/{pid}/task/{pid}/children")
    deadline = time.monotonic() + 120
    while len(children.read_text().split()) < count:
        assert time.monotonic() < deadline, f"process {pid} never had {count} children"
        time.sleep(0.1)


def test_a_sweep_stopped_by_ctrl_c_keeps_its_finished_runs_and_resumes_from_there(
    tmp_path: Path,
) -> None:
    specs = Grid("simulate", TINY).runs()
    store = Store(tmp_path / "s.jsonl")
    seen: list[str] = []

    def stop_after_two(spec: Any, _rec: Any) -> None:
        seen.append(spec.key)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(specs, store, LocalPool(2), on_done=stop_after_two)
    assert store.done() == set(seen)
    rest = run_sweep(specs, store, LocalPool(2))
    assert (rest.skipped, rest.ran, rest.failed) == (2, 2, 0)
    assert store.done() == {s.key for s in specs} and len(store.records()) == 4


def test_a_sweep_without_workers_starts_no_more_local_workers_than_runs_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # (the default, up to 2, was not capped: one run to do forked a pool of 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    grid = tmp_path / "g.yaml"
    grid.write_text("command: simulate\noptions:\n  scenario: inference\n  jobs: 20\n")
    assert main(["sweep", str(grid), "--quiet"]) == 0
    assert "1 run on 1 local worker(s)" in capsys.readouterr().out
    assert main(["sweep", str(grid), "--quiet"]) == 0  # all stored: none to run
    assert "0 run on 1 local worker(s)" in capsys.readouterr().out


def test_a_report_refused_for_its_folder_prints_no_table_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text("command: simulate\noptions:\n  scenario: inference\n  jobs: 20\n")
    assert main(["sweep", str(grid), "--quiet"]) == 0
    capsys.readouterr()
    (tmp_path / "f").write_text("a file\n")
    store = str(tmp_path / "g.jsonl")
    assert main(["sweep", "report", store, "--no-plots", "--out", str(tmp_path / "f" / "r")]) == 2
    out, err = capsys.readouterr()
    want = f"kant sweep: --out {tmp_path / 'f' / 'r'}: cannot write the report: cannot create"
    assert out == "" and err.startswith(want) and err.count("\n") == 1
    assert not (tmp_path / "f").is_dir()


@pytest.mark.parametrize(
    "address",
    ["auto", "local", "localhost:6379", "[::1]:6379", "[fe80::1%eth0]:6379", "ray://head",
     "ray://[::1]:10001", "anyscale://project/cluster"],
)  # fmt: skip
def test_every_form_of_ray_address_ray_takes_passes_the_check(address: str) -> None:
    from kant.sweep.backends import _check_address

    _check_address(address, "--ray")  # (an IPv6 zone id, a client scheme Ray imports)
