"""A run's key names its input files as the grid writes them, not their content: each record
keeps the digests of the files its run read, and a sweep whose files under those names hold
other content than the store's runs were made from is refused before any run, instead of
taking those runs as done and reporting the other files' results."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from kant.cli import main
from kant.errors import ChangedInputError, InvalidStoreError
from kant.sweep import Grid, LocalPool, Store, run_sweep
from kant.sweep import inputs as sweep_inputs

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
PACKING = {"pods": "pods.csv", "nodes": "nodes.csv", "policy": ["fgd", "bestfit"], "seeds": "1-3"}
SWF = """; MaxProcs: 32
1 0 10 3600 8 -1 -1 8 3600 -1 1 1 1 1 1 -1 -1 -1
2 60 10 3600 16 -1 -1 16 3600 -1 1 1 1 1 1 -1 -1 -1
3 120 10 7200 8 -1 -1 8 7200 -1 1 1 1 1 1 -1 -1 -1
"""


def packing_folder(folder: Path, gpus: int = 1) -> Path:
    """A folder with a 4-pod list of ``gpus`` GPUs each and a one-node list."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"p{i},1000,1024,{gpus},1000,\n" for i in range(4))
    (folder / "pods.csv").write_text(f"{POD_HEADER}\n{rows}")
    (folder / "nodes.csv").write_text(f"{NODE_HEADER}\nn0,32000,131072,8,A\n")
    return folder


def sweep(folder: Path, store: Store, **kw: Any) -> Any:
    """The packing grid :data:`PACKING` with its files read from ``folder``, into ``store``."""
    return run_sweep(Grid("packing", PACKING).resolved(folder).runs(), store, LocalPool(1), **kw)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class NeverEntered(LocalPool):
    """A back-end that fails the test if the sweep starts it."""

    def __enter__(self) -> LocalPool:
        raise AssertionError("the sweep started its back-end")


@pytest.mark.parametrize("where", ["another folder", "replaced in place"])
def test_a_grid_whose_file_of_the_same_name_holds_other_content_is_refused_before_any_run(
    tmp_path: Path, where: str
) -> None:
    store = Store(tmp_path / "s.jsonl")
    first = packing_folder(tmp_path / "a")
    assert sweep(first, store).ran == 6
    written = store.path.read_bytes()
    second = packing_folder(tmp_path / ("b" if where == "another folder" else "a"), gpus=2)
    specs = Grid("packing", PACKING).resolved(second).runs()
    with pytest.raises(ChangedInputError) as e:
        run_sweep(specs, store, NeverEntered(1))
    assert (e.value.field, e.value.value, e.value.where) == ("pods", "pods.csv", str(store.path))
    message = str(e.value)
    assert "6 records" in message and "new store" in message and "name of its own" in message
    assert "--retry-failed" not in message  # (the runs are ok: retrying them runs nothing)
    assert isinstance(e.value, InvalidStoreError)  # (a store this sweep cannot use)
    assert store.path.read_bytes() == written
    # neither does --retry-failed: it runs no ok run again
    with pytest.raises(ChangedInputError):
        run_sweep(specs, store, NeverEntered(1), retry_failed=True)
    assert store.path.read_bytes() == written


def test_the_same_grid_twice_runs_nothing_the_second_time_and_reads_each_file_once_per_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = packing_folder(tmp_path)
    read: list[str] = []
    digest = sweep_inputs.file_digest

    def counted(path: str) -> str | None:
        read.append(Path(path).name)
        return digest(path)

    monkeypatch.setattr(sweep_inputs, "file_digest", counted)
    store = Store(tmp_path / "s.jsonl")
    assert sweep(folder, store).ran == 6
    assert sorted(read) == ["nodes.csv", "pods.csv"]  # 6 runs, 2 files: 2 digests
    records = store.records()
    want = {"pods": sha256(folder / "pods.csv"), "nodes": sha256(folder / "nodes.csv")}
    assert len(records) == 6 and all(r["inputs"] == want for r in records)
    read.clear()
    summary = sweep(folder, store)
    assert (summary.skipped, summary.ran) == (6, 0)
    assert sorted(read) == ["nodes.csv", "pods.csv"]
    assert store.records() == records


def test_a_run_of_no_input_file_records_no_digest_and_a_trace_file_is_recorded_by_its_name(
    tmp_path: Path,
) -> None:
    (tmp_path / "t.swf").write_text(SWF)
    grid = Grid("simulate", {"trace": "swf", "trace_file": "t.swf"}).resolved(tmp_path)
    store = Store(tmp_path / "s.jsonl")
    run_sweep(grid.runs(), store, LocalPool(1))
    run_sweep(Grid("simulate", {"scenario": "inference", "jobs": 20}).runs(), store, LocalPool(1))
    trace, builtin = store.records()
    assert trace["inputs"] == {"trace_file": sha256(tmp_path / "t.swf")}
    assert trace["params"]["trace_file"] == "t.swf"  # (the key's path: as the grid wrote it)
    assert builtin["inputs"] == {}


def test_a_record_written_before_stores_kept_digests_is_taken_as_before(tmp_path: Path) -> None:
    folder = packing_folder(tmp_path)
    store = Store(tmp_path / "s.jsonl")
    sweep(folder, store)
    old = [{k: v for k, v in r.items() if k != "inputs"} for r in store.records()]
    store.path.write_text("".join(json.dumps(r) + "\n" for r in old))
    packing_folder(tmp_path, gpus=2)  # (nothing to compare it with)
    summary = sweep(folder, store)
    assert (summary.skipped, summary.ran) == (6, 0)
    assert store.records() == old


def test_the_last_record_of_a_run_is_the_one_its_files_are_compared_with(tmp_path: Path) -> None:
    folder = packing_folder(tmp_path)
    store = Store(tmp_path / "s.jsonl")
    sweep(folder, store)
    before = store.records()
    packing_folder(tmp_path, gpus=2)
    # the same runs recorded again on the new content: their last records count
    now = {**before[0]["inputs"], "pods": sha256(folder / "pods.csv")}
    with store.path.open("a") as f:
        f.writelines(json.dumps({**r, "inputs": now}) + "\n" for r in before)
    assert sweep(folder, store).ran == 0
    # and recorded once more on the old content: the last records are of another file
    with store.path.open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in before[:1])
    with pytest.raises(ChangedInputError, match="1 record of"):
        sweep(folder, store)


def test_a_failed_run_whose_trace_was_fixed_is_refused_unless_run_again_with_retry_failed(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.swf"
    trace.write_text("not a trace\n")
    grid = Grid("simulate", {"trace": "swf", "trace_file": "t.swf"}).resolved(tmp_path)
    store = Store(tmp_path / "s.jsonl")
    assert run_sweep(grid.runs(), store, LocalPool(1)).failed == 1
    trace.write_text(SWF)
    with pytest.raises(ChangedInputError, match="--retry-failed") as e:
        run_sweep(grid.runs(), store, NeverEntered(1))
    assert (e.value.field, e.value.value) == ("trace_file", "t.swf")
    # the failed run is run again on the file as it is now; its new record replaces the old
    assert run_sweep(grid.runs(), store, LocalPool(1), retry_failed=True).failed == 0
    (rec,) = store.latest().values()
    assert rec["status"] == "ok" and rec["inputs"] == {"trace_file": sha256(trace)}
    assert run_sweep(grid.runs(), store, LocalPool(1)).skipped == 1


def test_a_record_whose_inputs_are_not_digests_is_refused_naming_the_line(
    tmp_path: Path,
) -> None:
    rec = {"key": "k", "kind": "sim", "params": {}, "status": "failed", "error": "x"}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({**rec, "inputs": {"pods": 3}}) + "\n")
    with pytest.raises(InvalidStoreError, match="inputs") as e:
        Store(path).records()
    assert e.value.where == f"{path}:1"


def test_kant_sweep_refuses_a_changed_input_file_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = packing_folder(tmp_path / "g")
    grid = folder / "g.yaml"
    grid.write_text(f"command: packing\noptions: {json.dumps(PACKING)}\n")
    store = tmp_path / "store.jsonl"
    assert main(["sweep", str(grid), "--store", str(store), "--quiet", "--workers", "1"]) == 0
    capsys.readouterr()
    written = store.read_bytes()
    packing_folder(folder, gpus=2)
    assert main(["sweep", str(grid), "--store", str(store), "--quiet", "--workers", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"kant sweep: {store}: invalid sweep input: field 'pods' = 'pods.csv':")
    assert "new store" in err
    assert store.read_bytes() == written
    # the report reads records with their digests as before
    assert main(["sweep", "report", str(store), "--no-plots", "--out", str(tmp_path / "r")]) == 0
