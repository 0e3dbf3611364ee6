"""The AccaSim side-by-side's paired kant worker (``benchmarks/peers``): kant EASY and kant best
effort taking turns in two threads of one process decide exactly as each does alone, whichever
starts, and each thread's CPU time is its own."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "peers" / "accasim_side_by_side.py"


@pytest.fixture(scope="module")
def side_by_side() -> ModuleType:
    spec = importlib.util.spec_from_file_location("accasim_side_by_side", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def busy_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """150 jobs of 1-128 processors on the 128-processor machine, arriving faster than they
    finish (so EASY reserves and backfills), in SWF's 18 fields."""
    rng = random.Random(7)
    rows, t = [], 0
    for n in range(1, 151):
        t += rng.randint(0, 40)
        procs = rng.choice([1, 2, 4, 8, 16, 32, 64, 128])
        run = rng.randint(1, 900)
        rows.append(f"{n} {t} 0 {run} {procs} -1 -1 {procs} {run} -1 1 1 1 -1 -1 -1 -1 -1")
    path = tmp_path_factory.mktemp("swf") / "busy.swf"
    path.write_text("; MaxProcs: 128\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("easy_first", [True, False])
def test_the_paired_runs_start_every_job_as_the_lone_runs_do(
    side_by_side: ModuleType, busy_log: Path, easy_first: bool
) -> None:
    paired = side_by_side.kant_paired_worker(busy_log, 1, easy_first)
    alone_easy = side_by_side.kant_worker(busy_log, "kant-easy", 1)
    alone_best = side_by_side.kant_worker(busy_log, "easy", 1)
    assert paired["easy_starts"] == alone_easy["starts"]
    assert paired["best_effort_starts"] == alone_best["starts"]
    assert len(paired["easy_starts"]) == 150
    assert paired["easy_starts"] != paired["best_effort_starts"]  # EASY held jobs back
    assert paired["easy_cpu_s"] > 0 and paired["best_effort_cpu_s"] > 0
    assert paired["easy_first"] is easy_first


@pytest.mark.parametrize("policy", ["fifo", "easy", "kant-easy"])
def test_on_the_wide_machine_one_gpu_pods_start_as_on_the_logs_own(
    side_by_side: ModuleType, busy_log: Path, policy: str
) -> None:
    """128 single-GPU nodes (the ``wide`` work's machine) or 16 of 8: with one-GPU pods that
    may go anywhere, only how many GPUs are free decides, so every job starts at the same
    time on both (each pod on a node of its own on the wide one)."""
    wide = side_by_side.kant_worker(busy_log, policy, 1, (128, 1))
    own = side_by_side.kant_worker(busy_log, policy, 1)
    assert len(wide["starts"]) == 150
    assert wide["starts"] == own["starts"]
