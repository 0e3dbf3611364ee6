"""``--workers`` is how many runs go at once: never more processes than there are runs (a
process pool forks all its workers when it starts)."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any, ClassVar

import pytest

import kant.sweep
from kant.cli import main

BASE = ["--scenario", "inference", "--jobs", "20", "--quiet", "--no-plots"]


def test_compare_starts_no_more_processes_than_policy_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (--workers 64 forked 64 processes for two runs)
    started: list[int | None] = []

    class Pool(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, max_workers: int | None = None, **kw: Any) -> None:
            started.append(max_workers)
            super().__init__(max_workers=max_workers, **kw)

    monkeypatch.setattr("kant.cli.compare.ProcessPoolExecutor", Pool)
    sets = "backfill+ebinpack,strict-fifo+ebinpack"
    argv = ["compare", *BASE, "--sets", sets, "--workers", "64", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    assert started == [2]


class _Pool(kant.sweep.LocalPool):
    asked: ClassVar[list[int | None]] = []

    def __init__(self, workers: int | None = None) -> None:
        _Pool.asked.append(workers)
        super().__init__(1)  # (the runs in this process: only the number asked matters)


@pytest.mark.parametrize(
    ("argv", "runs"),
    [
        (["compare", *BASE, "--seeds", "0-1", "--sets", "backfill+ebinpack"], 2),
        (["sweep", "{grid}"], 2),
    ],
    ids=["compare --seeds", "sweep"],
)
def test_a_sweep_starts_no_more_local_processes_than_runs_to_do(
    argv: list[str], runs: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text("command: simulate\noptions: {scenario: inference, jobs: 20, seed: [0, 1]}\n")
    monkeypatch.setattr(kant.sweep, "LocalPool", _Pool)
    _Pool.asked = []
    args = [a.replace("{grid}", str(grid)) for a in argv]
    if args[0] == "compare":
        args += ["--out", str(tmp_path / "o")]
    assert main([*args, "--workers", "64", "--quiet"]) == 0
    assert _Pool.asked == [runs]
