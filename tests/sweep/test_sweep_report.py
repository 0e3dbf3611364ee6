"""``kant sweep report``'s folders and files: each group its own folder, files that are strict
JSON, nothing an earlier report wrote left behind, a default folder that is not the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kant.cli import main
from kant.sweep import Grid, LocalPool, Store, run_sweep
from kant.sweep.report import PackingGroup, format_packing, packing_groups, write_sweep_report
from tests.sim.c_locale import kant_in_c_locale

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def swept(path: Path, command: str, options: dict[str, object]) -> Store:
    store = Store(path)
    run_sweep(Grid(command, options).runs(), store, LocalPool(1))
    return store


def test_two_groups_whose_titles_differ_only_after_80_characters_get_folders_of_their_own(
    tmp_path: Path,
) -> None:
    options = {"scenario": "inference", "jobs": 20, "load": 0.9, "grace": 30, "horizon": 200000,
               "mtbf": 1e8, "mttr": 3600, "on_interrupt": "resume", "tick": [30, 60]}  # fmt: skip
    store = swept(tmp_path / "s.jsonl", "simulate", options)
    write_sweep_report(store.records(), tmp_path / "rep", plots=False)
    docs = [json.loads(p.read_text()) for p in (tmp_path / "rep").glob("*/compare.json")]
    assert sorted(d["scenario"][-8:] for d in docs) == ["tick=30)", "tick=60)"]
    assert all(len(p.name) <= 80 for p in (tmp_path / "rep").iterdir())


def test_packing_traces_of_the_same_file_name_in_two_folders_are_told_apart(
    tmp_path: Path,
) -> None:
    for sub, gpus in (("a", 1), ("b", 2)):
        (tmp_path / sub).mkdir()
        pods = "".join(f"p{i},1000,1024,{gpus},1000,\n" for i in range(4))
        (tmp_path / sub / "pods.csv").write_text(f"{POD_HEADER}\n{pods}")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(f"{NODE_HEADER}\nn0,32000,131072,8,A\n")
    pods = [str(tmp_path / "a" / "pods.csv"), str(tmp_path / "b" / "pods.csv")]
    store = swept(tmp_path / "p.jsonl", "packing", {"pods": pods, "nodes": str(nodes)})
    titles = [g.title for g in packing_groups(store.records())]
    assert len(set(titles)) == 2 and all("/pods.csv on nodes" in t for t in titles)
    write_sweep_report(store.records(), tmp_path / "rep", plots=False)
    written = sorted(p.read_text() for p in (tmp_path / "rep").glob("*/packing.txt"))
    assert len(written) == 2 and "/a/pods.csv" in written[0] and "/b/pods.csv" in written[1]


def strict(text: str) -> Any:
    """``text`` read as strict JSON (``NaN``, ``Infinity``: not JSON)."""

    def refuse(token: str) -> Any:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_single_seed_comparison_and_its_sweep_report_are_strict_json_with_null_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    argv = ["compare", "--scenario", "inference", "--jobs", "40", "--seeds", "0", "--sets",
            "strict-fifo+ebinpack,backfill+ebinpack", "--workers", "1", "--quiet",
            "--no-plots", "--out", str(out), "--json"]  # fmt: skip
    assert main(argv) == 0
    doc = strict(capsys.readouterr().out.splitlines()[-1])
    assert doc["n_seeds"] == 1 and doc["sets"]["backfill+ebinpack"]["gar_ci"] is None
    strict((out / "compare.json").read_text())
    rep = tmp_path / "rep"
    argv = ["sweep", "report", str(out / "runs.jsonl"), "--out", str(rep), "--no-plots", "--json"]
    assert main(argv) == 0
    strict(capsys.readouterr().out.splitlines()[-1])
    strict((rep / "inference_jobs=40" / "compare.json").read_text())


def test_a_group_left_with_no_complete_seed_keeps_no_figures_of_an_earlier_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "s.jsonl"
    swept(
        path,
        "compare",
        {"scenario": "inference", "jobs": 20, "seeds": "0", "sets": "backfill+ebinpack"},
    )
    rep, folder = tmp_path / "rep", tmp_path / "rep" / "inference_jobs=20"
    assert main(["sweep", "report", str(path), "--out", str(rep)]) == 0
    assert {p.name for p in folder.iterdir()} >= {"compare.json", "compare.txt", "compare_jwtd.png"}
    # another set on another seed: no seed has both sets now
    swept(
        path,
        "compare",
        {"scenario": "inference", "jobs": 20, "seeds": "1", "sets": "backfill+spread"},
    )
    assert main(["sweep", "report", str(path), "--out", str(rep), "--no-plots"]) == 0
    assert "seeds 0-1 left out" in capsys.readouterr().out
    assert list(folder.iterdir()) == []


def test_a_store_without_an_extension_gets_its_report_folder_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = swept(tmp_path / "runs", "simulate", {"scenario": "inference", "jobs": 20})
    before = store.path.read_text()
    assert main(["sweep", "report", str(store.path), "--no-plots"]) == 0
    assert (tmp_path / "runs-report" / "report.txt").exists()
    assert store.path.read_text() == before
    # a store whose plain name is a file (the grid "sweep" beside "sweep.jsonl") too
    grid = tmp_path / "sweep"
    grid.write_text("not a folder")
    beside = swept(tmp_path / "sweep.jsonl", "simulate", {"scenario": "inference", "jobs": 20})
    assert main(["sweep", "report", str(beside.path), "--no-plots"]) == 0
    assert (tmp_path / "sweep.jsonl-report" / "report.txt").exists()
    assert grid.read_text() == "not a folder"
    # an --out that is a file, or under one, is refused naming --out
    for out in (store.path, store.path / "rep"):
        assert main(["sweep", "report", str(store.path), "--out", str(out), "--no-plots"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kant sweep: --out {out}: cannot write") and err.count("\n") == 1


def test_a_packing_cell_some_seeds_do_not_reach_says_over_how_many_seeds_it_is() -> None:
    # seeds 1 and 2 stop before 100% arrived load, seed 3 reaches 130%: the cells at 100 and
    # 130 are seed 3's value alone, and must say so next to the "1-3 (3)" seeds column
    full = [50.0] * 131
    short = [40.0] * 100 + [None] * 31
    runs = {"fgd": {1: {"alloc": short, "frag": short}, 2: {"alloc": short, "frag": short},
                    3: {"alloc": full, "frag": full}}}  # fmt: skip
    text = format_packing(PackingGroup(title="t", trace="t", inflate=1.3, runs=runs))
    row = next(line for line in text.splitlines() if line.startswith("fgd"))
    assert "1-3 (3)" in row and row.count("50.00 (1/3 seeds)") == 3


def test_a_report_txt_cut_short_by_a_full_disk_leaves_the_earlier_one_whole(
    tmp_path: Path,
) -> None:
    # (report.txt and packing.txt were written in place: a failed write left them cut short)
    import os
    import resource
    import subprocess
    import sys

    store = tmp_path / "s.jsonl"

    def fill(error: str) -> None:  # (300 failed runs: a report.txt of some 35 KB)
        rec = {"kind": "sim", "status": "failed", "error": error, "wall_s": 1.0}
        store.write_text(
            "".join(
                json.dumps({**rec, "key": f"k{i}", "params": {"seed": i}}) + "\n"
                for i in range(300)
            )
        )

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = tmp_path / "rep"
    fill("first " * 20)
    cmd = [sys.executable, "-m", "kant", "sweep", "report", str(store), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    assert subprocess.run(cmd, capture_output=True, check=False, env=env).returncode == 0
    before = (out / "report.txt").read_bytes()
    assert len(before) > 4096
    fill("second " * 20)
    r = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env=env, preexec_fn=small_files
    )
    assert r.returncode == 2 and "cannot write" in r.stderr, r.stderr
    assert (out / "report.txt").read_bytes() == before
    assert [p.name for p in out.iterdir()] == ["report.txt"]


def test_runs_of_thresholds_that_differ_past_six_digits_keep_their_own_columns() -> None:
    # both were labelled "threshold=1e+06": one column, one of the two runs silently lost
    from kant.sweep.report import sim_groups

    records = [
        {"key": str(t), "kind": "sim", "status": "ok", "params": {"threshold": t, "seed": 0},
         "metrics": {"scenario": "x", "queueing": "backfill", "placement": "ebinpack",
                     "preemption": "auto"}}
        for t in (1000000, 1000001, 600)
    ]  # fmt: skip
    (group,) = sim_groups(records)
    assert [s.label for s in group.sets] == [
        "backfill+ebinpack threshold=1000000",
        "backfill+ebinpack threshold=1000001",
        "backfill+ebinpack threshold=600",
    ]


def test_a_report_is_written_in_utf8_whatever_the_locale(tmp_path: Path) -> None:
    # report.txt was written in the locale's encoding: under an ASCII one (LC_ALL=C without
    # coercion), a failed run's error naming a file 'tracé.csv' ended the report in a
    # UnicodeEncodeError traceback, and a Latin-1 or cp1252 machine wrote other bytes
    store = tmp_path / "s.jsonl"
    rec = {"kind": "sim", "status": "failed", "wall_s": 1.0, "key": "k0", "params": {"seed": 0}}
    store.write_text(json.dumps({**rec, "error": "tracé.csv: 2 jobs, € 5"}) + "\n")
    out = tmp_path / "rep"
    r = kant_in_c_locale("sweep", "report", str(store), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "tracé.csv: 2 jobs, € 5" in (out / "report.txt").read_text(encoding="utf-8")
