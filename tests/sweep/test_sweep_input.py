"""Bad input to kant sweep: a store path that holds another file, files that are not text,
records a report cannot read, grid values no run can take. Each is refused with a typed
error naming the file (and line) or the field, before anything runs or is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kant.cli import main
from kant.cli.sweep import check_grid
from kant.errors import InvalidGridError, InvalidStoreError
from kant.placement import STRATEGIES
from kant.sim.scenarios import MAX_SEEDS, parse_seeds
from kant.sweep import Grid, LocalPool, Store, load_grid, run_sweep

GRID = "command: simulate\noptions:\n  scenario: inference\n  jobs: 20\n"


def write_grid(folder: Path, text: str = GRID) -> Path:
    grid = folder / "g.yaml"
    grid.write_text(text)
    return grid


def test_a_store_path_that_holds_another_file_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "notes.txt"
    other.write_bytes(b"important line 1\n")
    assert main(["sweep", str(write_grid(tmp_path)), "--store", str(other), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(other) in err and "not a sweep store" in err and "Traceback" not in err
    assert other.read_bytes() == b"important line 1\n"
    # the library refuses it too, before any run
    with pytest.raises(InvalidStoreError) as e:
        run_sweep(
            Grid("simulate", {"scenario": "inference", "jobs": 20}).runs(),
            Store(other),
            LocalPool(1),
        )
    assert e.value.where == f"{other}:1"
    assert other.read_bytes() == b"important line 1\n"


@pytest.mark.parametrize(
    "text",
    [
        '{"some": "json"}\n',  # a JSON object that is not a run record
        "[1, 2]\n",  # JSON, not an object
        '{"key": "k", "kind": "sim", "params": {}, "status": "failed", "error": "x"}\nhello\n',
    ],
)
def test_a_file_with_a_line_that_is_not_a_run_record_is_not_a_store(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(text)
    with pytest.raises(InvalidStoreError) as e:
        Store(path).records()
    assert str(path) in str(e.value) and "not a sweep store" in str(e.value)


def test_an_empty_file_is_taken_as_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"")
    assert main(["sweep", str(write_grid(tmp_path)), "--store", str(path), "--quiet"]) == 0
    assert len(Store(path).records()) == 1


BINARY = bytes.fromhex("c4212026 06cad57d 7adbf8e1 c5c70882") + b"\n\x00\xff{\n"


@pytest.mark.parametrize("name", ["g.yaml", "g.json"])
def test_a_grid_file_that_is_not_text_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    grid = tmp_path / name
    grid.write_bytes(BINARY)
    with pytest.raises(InvalidGridError) as e:
        load_grid(grid)
    assert e.value.value == str(grid) and "not a text file" in str(e.value)
    assert main(["sweep", str(grid), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(grid) in err and "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()


def test_a_store_that_is_not_text_is_refused_by_the_sweep_and_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.jsonl"
    store.write_bytes(BINARY)
    assert main(["sweep", "report", str(store), "--no-plots"]) == 2
    assert main(["sweep", str(write_grid(tmp_path)), "--store", str(store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count(f"{store}:1: ") == 2 and "not text" in err and "Traceback" not in err
    assert store.read_bytes() == BINARY
    assert not (tmp_path / "s").exists()


OK_SIM = (
    '{"key": "k", "kind": "sim", "params": {"seed": 1}, "status": "ok", "error": null, '
    '"wall_s": 1, "metrics": %s}\n'
)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (OK_SIM % '{"gar": "x"}', "'scenario'"),
        (OK_SIM % "null", "metrics"),
        (OK_SIM.replace('"ok"', '"done"') % "null", "status"),
        (OK_SIM.replace('"sim"', '"train"') % "null", "kind"),
        (OK_SIM.replace('{"seed": 1}', "[1]") % "null", "params"),
        (
            '{"key": "k", "kind": "packing", "params": {"pods": "p.csv", "nodes": "n.csv"}, '
            '"status": "ok", "error": null, "wall_s": 1, "metrics": {"alloc": [1.0]}}\n',
            "alloc",
        ),
        # NaN and Infinity are no JSON (kant writes neither); both were read as floats
        (OK_SIM.replace('"wall_s": 1', '"wall_s": NaN') % "null", "NaN"),
        (OK_SIM.replace('{"seed": 1}', '{"load": -Infinity}') % "null", "-Infinity"),
        # both passed the check, then the sweep and the report raised (KeyError, TypeError)
        ('{"key": "g", "kind": "sim", "params": {}, "status": "failed"}\n', "error"),
        (
            '{"key": "k", "kind": "packing", "params": {"pods": "p.csv", "nodes": "n.csv", '
            '"inflate": null}, "status": "ok", "error": null, "wall_s": 1, "metrics": {}}\n',
            "inflate",
        ),
    ],
)
def test_a_record_the_report_cannot_read_is_refused_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, reason: str
) -> None:
    store = tmp_path / "s.jsonl"
    store.write_text(
        '{"key": "f", "kind": "sim", "params": {}, "status": "failed", "error": "E: x"}\n' + line
    )
    with pytest.raises(InvalidStoreError) as e:
        Store(store).records()
    assert e.value.where == f"{store}:2" and reason in str(e.value)
    assert main(["sweep", "report", str(store), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"{store}:2: " in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(("option", "text"), [("load", ".nan"), ("tick", ".inf")])
def test_a_grid_value_that_is_not_a_finite_number_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, text: str
) -> None:
    grid = write_grid(tmp_path, GRID + f"  {option}: {text}\n")
    with pytest.raises(InvalidGridError) as e:
        load_grid(grid)
    assert e.value.field == option and "finite" in str(e.value)
    assert main(["sweep", str(grid), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()


def test_a_grid_with_more_seeds_than_kant_takes_is_refused_naming_the_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = write_grid(tmp_path, GRID.replace("simulate", "compare") + "  seeds: 0-99999999999\n")
    with pytest.raises(InvalidGridError) as e:
        load_grid(grid).runs()
    assert e.value.field == "seeds" and f"{MAX_SEEDS:,}" in str(e.value)
    # a list of ranges counts every seed of every range
    with pytest.raises(InvalidGridError):
        Grid("compare", {"seeds": ["0-60000", "60001-120000"]}).runs()
    assert main(["sweep", str(grid), "--quiet"]) == 2
    assert "seeds" in capsys.readouterr().err
    assert not (tmp_path / "g.jsonl").exists()
    assert len(parse_seeds(f"1-{MAX_SEEDS}")) == MAX_SEEDS


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ("  seed: -1\n", "field 'seed' = -1: must be an int >= 0"),
        ("  mttr: 100\n", "field 'mttr' = 100: goes with mtbf"),  # (no failure to repair)
        (
            "  threshold: 5\n  queueing: strict-fifo\n",
            "field 'threshold' = 5: is Backfill's; queueing strict-fifo has none",
        ),
    ],
)
def test_a_grid_run_the_cli_would_refuse_is_refused_when_the_grid_is_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, said: str
) -> None:
    grid = write_grid(tmp_path, GRID + options)
    assert main(["sweep", str(grid), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()


def test_a_threshold_with_no_queueing_option_is_taken_as_backfills_and_accepted() -> None:
    runs = Grid("simulate", {"threshold": [None, 60], "queueing": "backfill"}).runs()
    assert [r.params.get("threshold") for r in runs] == [None, 60]
    assert len(Grid("simulate", {"threshold": 60}).runs()) == 1
    assert len(Grid("simulate", {"threshold": 60, "queueing": [None, "backfill"]}).runs()) == 2


def test_a_failed_runs_record_is_read_back_whatever_parameters_made_it_fail(
    tmp_path: Path,
) -> None:
    # a store kant wrote before the grid checked these values: each run failed on them
    path = tmp_path / "s.jsonl"
    failed = [
        {"key": "a", "kind": "sim", "params": {"threshold": "soon", "seed": 1.5},
         "status": "failed", "error": "ValidationError: threshold", "metrics": None},
        {"key": "b", "kind": "packing", "params": {"inflate": "lots"},
         "status": "failed", "error": "ValidationError: inflate", "metrics": None},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in failed))
    assert [r["key"] for r in Store(path).records()] == ["a", "b"]
    ok = {**failed[0], "key": "c", "status": "ok", "metrics": {}}
    with path.open("a") as f:
        f.write(json.dumps(ok) + "\n")
    with pytest.raises(InvalidStoreError, match=r"line 3 .*params\.seed 1\.5 is not an int"):
        Store(path).records()


def test_a_malformed_seeds_value_is_reported_once() -> None:
    with pytest.raises(InvalidGridError) as e:
        Grid("compare", {"seeds": "x"}).runs()
    assert str(e.value) == (
        "invalid sweep grid: field 'seeds' = 'x': expected seeds like 42-51 or 42,43"
    )


@pytest.mark.parametrize(
    "options",
    ["  1: 2\n", "  on: 2\n", "  on-interrupt: resume\n  on_interrupt: restart\n"],
    ids=["a number", "a bool (on:)", "one option twice"],
)
def test_a_grid_option_name_that_is_not_text_or_named_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str
) -> None:
    grid = write_grid(tmp_path, GRID + options)
    with pytest.raises(InvalidGridError):
        load_grid(grid)
    assert main(["sweep", str(grid), "--quiet"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_grid_key_that_is_not_text_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidGridError, match="unknown key"):
        load_grid(write_grid(tmp_path, GRID + "1: x\nfoo: y\n"))


def test_a_grids_runs_have_the_same_keys_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "c.yaml").write_text("version: 1\nnodes: []\n")
    grid = folder / "g.yaml"
    grid.write_text("command: simulate\noptions: {trace: swf, cluster: c.yaml}\n")
    keys = []
    for cwd, name in ((folder, "g.yaml"), (tmp_path, "g/g.yaml"), (Path("/"), str(grid))):
        monkeypatch.chdir(cwd)
        keys.append([r.key for r in load_grid(name).runs()])
    assert keys[0] == keys[1] == keys[2]


def test_a_sweep_run_again_exits_1_while_a_run_of_its_grid_has_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a trace file the options' check cannot see into: the run fails reading it
    (tmp_path / "bad.swf").write_text("not a trace\n")
    grid = write_grid(
        tmp_path, "command: simulate\noptions: {trace: swf, trace-file: bad.swf, jobs: 20}\n"
    )
    assert main(["sweep", str(grid), "--quiet"]) == 1
    capsys.readouterr()
    assert main(["sweep", str(grid), "--quiet", "--json"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "1 failed before" in out[0] and "InvalidTraceError" in out[1]
    summary = json.loads(out[-1])
    assert summary["failed"] == 0 and summary["failed_in_store"] == 1


def test_a_negative_max_runs_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", str(write_grid(tmp_path)), "--max-runs", "-1", "--quiet"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--max-runs: must be an int >= 0 (got '-1')" in err and "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()


@pytest.mark.parametrize(
    ("mode", "option"),
    [
        ("report", ["--ray"]),
        ("report", ["--workers", "0"]),
        ("report", ["--max-runs", "1"]),
        ("report", ["--retry-failed"]),
        ("report", ["--store", "other.jsonl"]),
        ("grid", ["--out", "rep"]),
        ("grid", ["--no-plots"]),
    ],
)
def test_an_option_the_mode_does_not_use_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str, option: list[str]
) -> None:
    grid, store = write_grid(tmp_path), tmp_path / "g.jsonl"
    if mode == "report":
        store.write_text("")  # (an empty store: its report is written, exit 0)
    argv = ["sweep", "report", str(store)] if mode == "report" else ["sweep", str(grid)]
    assert main([*argv, *option, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kant sweep: {option[0]} is an option of kant sweep ")
    assert err.count("\n") == 1
    assert store.read_text() == "" if mode == "report" else not store.exists()
    assert not (tmp_path / "g").exists() and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("seeds", ["1,,2", "0-3,", [0, ",4"]])
def test_a_seeds_value_with_an_empty_item_is_refused_naming_it_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seeds: object
) -> None:
    # (the empty item was dropped: "1,,2" ran seeds 1 and 2 as if nothing were amiss)
    with pytest.raises(InvalidGridError) as e:
        Grid("compare", {"seeds": seeds}).runs()
    assert e.value.field == "seeds" and "empty item" in e.value.reason
    grid = write_grid(
        tmp_path, f"command: compare\noptions: {{jobs: 20, seeds: {json.dumps(seeds)}}}\n"
    )
    assert main(["sweep", str(grid), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "field 'seeds'" in err and "empty item" in err and "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("command: simulate\noptions: []\n", "options"),  # (ran the default 20,000 jobs)
        ("command: simulate\noptions: jobs\n", "options"),
        ("command: simulate\noptions: 5\n", "options"),
        ("command: [simulate]\noptions: {jobs: 20}\n", "command"),
        ("command: packing\noptions: {pods: 5, nodes: n.csv}\n", "pods"),  # (a TypeError run)
        ("command: simulate\noptions: {trace: swf, cluster: [7, c.yaml]}\n", "cluster"),
        ("command: compare\noptions: {trace: swf, trace-file: 1.5}\n", "trace_file"),
    ],
)
def test_a_grid_key_of_the_wrong_type_is_refused_naming_it_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str
) -> None:
    grid = write_grid(tmp_path, text)
    with pytest.raises(InvalidGridError) as e:
        load_grid(grid)
    assert e.value.field == field
    assert main(["sweep", str(grid), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"field {field!r}" in err and "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()


def test_a_grid_made_in_code_with_keys_of_the_wrong_type_is_refused_naming_them() -> None:
    for args, kwargs, field in [
        (("simulate", []), {}, "options"),
        ((["simulate"],), {}, "command"),
        (("simulate",), {"store": 5}, "store"),
    ]:
        with pytest.raises(InvalidGridError) as e:
            Grid(*args, **kwargs)
        assert e.value.field == field


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("g.yaml", "command: simulate\noptions: {jobs: 10, jobs: 20}\n", "jobs"),
        ("g.yaml", "command: simulate\noptions:\n  jobs: 10\n  seed: 1\n  jobs: 20\n", "jobs"),
        ("g.yaml", "command: compare\ncommand: simulate\noptions: {jobs: 20}\n", "command"),
        ("g.json", '{"command": "simulate", "options": {"jobs": 10, "jobs": 20}}', "jobs"),
    ],
)
def test_a_key_given_twice_in_a_grid_file_is_refused_naming_it_not_taken_last_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, key: str
) -> None:
    grid = tmp_path / name
    grid.write_text(text)
    with pytest.raises(InvalidGridError, match=f"'{key}'.* twice"):
        load_grid(grid)
    assert main(["sweep", str(grid), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"'{key}'" in err and "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()


def test_a_grid_file_that_is_not_valid_yaml_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = write_grid(tmp_path, "command: simulate\noptions: {jobs: [1,\n")
    assert main(["sweep", str(grid), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(grid) in err and "not valid YAML" in err


# a value kant simulate / compare / packing refuses on its command line: the grid ran every
# other run first, then recorded these as failed (or, pods: 5, failed with a TypeError)
SIM = "command: simulate\noptions: {scenario: inference, jobs: 20, "
REFUSED_BY_THE_COMMAND = [
    (SIM + "seed: [0, 1], placement: [ebinpack, ebinpak]}\n", "placement", "'ebinpak'"),
    (SIM + "queueing: nosuch}\n", "queueing", "invalid choice: 'nosuch'"),
    (SIM + "queueing: [backfill, backfil]}\n", "queueing", "invalid choice: 'backfil'"),
    (SIM + "preemption: every}\n", "preemption", "invalid choice: 'every'"),
    (SIM + "grace: -1}\n", "grace", "must be a number >= 0 and <= 6.3072e+08 (got '-1')"),
    (SIM + "mtbf: 0}\n", "mtbf", "must be a number >= 1 and <= 6.3072e+08 (got '0')"),
    (
        SIM + "mtbf: [3600, 1.0e-6]}\n",
        "mtbf",
        "must be a number >= 1 and <= 6.3072e+08 (got '1e-06')",
    ),
    (SIM + "mtbf: 100, mttr: -5}\n", "mttr", "must be a number >= 0 and <= 6.3072e+08 (got '-5')"),
    (SIM + "horizon: -5}\n", "horizon", "must be a number > 0 and <= 6.3072e+08 (got '-5')"),
    (SIM + "on-interrupt: never}\n", "on-interrupt", "invalid choice: 'never'"),
    ("command: simulate\noptions: {scenario: 5, jobs: 20}\n", "scenario", "invalid choice: '5'"),
    ("command: compare\noptions: {jobs: 20, grace: -1, seeds: 0-1}\n", "grace", "kant compare"),
    (
        "command: packing\noptions: {pods: p.csv, nodes: n.csv, policy: nosuch}\n",
        "policy",
        "nosuch",
    ),
    ("command: packing\noptions: {pods: none.csv, nodes: n.csv}\n", "pods", "no such file"),
]


@pytest.mark.parametrize(("text", "field", "said"), REFUSED_BY_THE_COMMAND)
def test_a_grid_value_its_command_refuses_is_refused_naming_it_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, said: str
) -> None:
    (tmp_path / "p.csv").write_text("name\n")
    err = _refused_before_any_run(tmp_path, capsys, text, field, said)
    assert err.count("\n") == 1 and f"field {field!r} = " in err
    assert "Traceback" not in err


def _refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, said: str
) -> str:
    """The grid ``text`` is refused for ``field`` (saying ``said``) by check_grid and by
    kant sweep, before any run (no store, the valid runs neither); kant sweep's stderr."""
    (tmp_path / "n.csv").write_text("sn\n")
    grid = write_grid(tmp_path, text)
    with pytest.raises(InvalidGridError) as e:
        check_grid(load_grid(grid))
    assert e.value.field == field and said in e.value.reason
    assert main(["sweep", str(grid), "--quiet", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert said in err and not (tmp_path / "g.jsonl").exists()
    return err


def test_a_json_grid_value_of_the_wrong_number_type_is_refused_as_the_command_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "g.json"
    grid.write_text('{"command": "simulate", "options": {"scenario": "inference", "jobs": 10.0}}')
    assert main(["sweep", str(grid), "--quiet", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "field 'jobs' = 10.0" in err and "must be an int" in err
    assert not (tmp_path / "g.jsonl").exists()


@pytest.mark.parametrize(
    ("text", "field", "said"),
    [
        (SIM + "trace: swf}\n", "scenario", "--scenario inference and --trace swf: pick one"),
        (SIM + "cluster: n.csv}\n", "cluster", "goes with --trace"),
        ("command: packing\noptions: {nodes: n.csv, seeds: 1-2}\n", "options", "--pods FILE"),
    ],
)
def test_grid_options_that_do_not_go_together_are_refused_as_the_command_refuses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, said: str
) -> None:
    _refused_before_any_run(tmp_path, capsys, text, field, said)


def test_a_grid_takes_a_names_case_variant_as_its_command_does(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_text("name\n")
    # kant compare --sets backfill+EBinpack, kant packing --policy FGD and kant simulate
    # --queueing Backfill --placement EBinpack --preemption ALL take them
    check_grid(Grid("compare", {"jobs": 20, "sets": "backfill+EBinpack"}))
    check_grid(
        Grid("packing", {"pods": "p.csv", "nodes": "p.csv", "policy": "FGD"}, base=str(tmp_path))
    )
    names = {"queueing": "Backfill", "placement": "EBinpack", "preemption": "ALL"}
    check_grid(Grid("simulate", {"jobs": 20, **names, "threshold": 60}))


class LastNodeFirst:
    """A strategy of the caller's own (docs/extending.md): the highest slot first."""

    name = "test-grid-last-node-first"

    def score(self, ctx: Any, slots: Any) -> Any:
        return slots.astype(float)


def test_a_strategy_registered_in_the_process_that_runs_the_sweep_passes_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = write_grid(tmp_path, SIM + f"placement: [ebinpack, {LastNodeFirst.name}]}}\n")
    with pytest.raises(InvalidGridError, match=LastNodeFirst.name):  # not registered yet
        check_grid(load_grid(grid))
    STRATEGIES.register(LastNodeFirst.name, LastNodeFirst)
    try:
        assert main(["sweep", str(grid), "--quiet", "--workers", "1"]) == 0
    finally:
        STRATEGIES._entries.pop(LastNodeFirst.name)
    records = Store(tmp_path / "g.jsonl").records()
    assert sorted(r["params"]["placement"] for r in records if r["status"] == "ok") == [
        "ebinpack",
        LastNodeFirst.name,
    ]
    # reported by a process where the strategy is not registered (it was refused: "unknown
    # placement policy 'last-node-first'", exit 2, nothing reported)
    capsys.readouterr()
    out = tmp_path / "report"
    assert (
        main(["sweep", "report", str(tmp_path / "g.jsonl"), "--no-plots", "--out", str(out)]) == 0
    )
    assert f"backfill+{LastNodeFirst.name}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("afile/x.jsonl", "afile is a file"),
        ("folder", "is not a regular file"),
        ("a\0b", "NUL"),  # (it ran, then its record could not be written: the run lost)
        # (links to nothing passed as new names: the first run ran, then "[Errno 2] No such
        # file or directory" (a link into a folder that does not exist) or "[Errno 40] Too
        # many levels of symbolic links")
        ("dang", "a symbolic link to nothing"),
        ("loop", "a symbolic link to nothing"),
        ("dangdir/x.jsonl", "a symbolic link to nothing"),
    ],
)
def test_a_store_that_cannot_be_written_is_one_line_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str, said: str
) -> None:
    # (an OSError's "[Errno 17] File exists: 'afile'" or "[Errno 22] Invalid argument")
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "folder").mkdir()
    for link, to in (("dang", "nowhere/x.jsonl"), ("loop", "loop"), ("dangdir", "nowhere/sub")):
        (tmp_path / link).symlink_to(tmp_path / to)
    grid = write_grid(tmp_path, "command: simulate\noptions: {scenario: inference, jobs: 5}\n")
    assert main(["sweep", str(grid), "--store", str(tmp_path / store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and said in err and "Errno" not in err
    names = ["afile", "dang", "dangdir", "folder", grid.name, "loop"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


@pytest.mark.parametrize("sets", ["backfill+ebinpack,,strict-fifo+ebinpack", "backfill+spread,"])
def test_a_sets_value_with_an_empty_item_is_refused_naming_it(sets: str) -> None:
    # (the empty item was dropped, as an empty seed item was)
    with pytest.raises(InvalidGridError) as e:
        Grid("compare", {"sets": sets}).runs()
    assert e.value.field == "sets" and "empty item" in e.value.reason


def test_a_names_case_variants_are_one_run_with_the_key_of_the_same_run_in_compare() -> None:
    # (EBinpack and ebinpack were two runs, and neither had the key kant compare gives it)
    g = Grid("simulate", {"jobs": 5, "placement": ["EBinpack", "ebinpack"]})
    (run,) = g.runs()
    assert run.params["placement"] == "ebinpack"
    (same,) = Grid("compare", {"jobs": 5, "sets": "backfill+EBinpack"}).runs()
    named = Grid("simulate", {"jobs": 5, "queueing": "Backfill", "placement": "EBinpack",
                              "preemption": "AUTO"})  # fmt: skip
    assert named.runs()[0].key == same.key


def test_a_store_through_a_link_to_a_new_file_in_a_folder_that_exists_is_written_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (a file is made through a link to a name that does not exist yet: kept working)
    (tmp_path / "real").mkdir()
    (tmp_path / "store.jsonl").symlink_to(tmp_path / "real" / "new.jsonl")
    grid = write_grid(tmp_path, "command: simulate\noptions: {scenario: inference, jobs: 5}\n")
    assert main(["sweep", str(grid), "--store", str(tmp_path / "store.jsonl"), "--quiet"]) == 0
    assert len((tmp_path / "real" / "new.jsonl").read_text().splitlines()) == 1
