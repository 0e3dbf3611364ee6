"""``kant compare --seeds``: figures pooled over seeds, checked on hand-made timelines.

One 1,024-GPU cluster (128 nodes of 8 GPUs). In each "seed", a small job holds one node when
a 1,024-GPU gang arrives, and a second small job arrives behind the gang. Strict FIFO keeps
the second small job behind the gang; Best-Effort FIFO lets it start, so the gang waits for
it too -- the starvation the paper reports for the largest jobs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from kant.cli import main
from kant.sim.analysis import seed_sweep
from kant.sim.report import format_seed_sweep
from kant.sim.scenarios import PolicySet, Scenario, run_scenario
from kant.sim.simulator import SimConfig
from kant.testing import ClusterBuilder, job

STRICT = PolicySet(queueing="strict-fifo", placement="ebinpack")
BEST_EFFORT = PolicySet(queueing="best-effort-fifo", placement="ebinpack")


def scenario(second_runtime: float) -> Scenario:
    nodes = tuple(ClusterBuilder().leaf("a", nodes=64).leaf("b", nodes=64).specs())
    jobs = (
        job("small1", gpus=8, submitted_at=0, runtime=50),
        job("big", gpus=8, replicas=128, submitted_at=5, runtime=100),
        job("small2", gpus=8, submitted_at=10, runtime=second_runtime),
    )
    return Scenario(
        name="t",
        description="hand-made",
        nodes=nodes,
        jobs=jobs,
        config=SimConfig(tick=0.0, sample_interval=10.0),
    )


def sweep_runs(runtimes: tuple[float, ...] = (100.0, 200.0)) -> list:
    out = []
    for seed, rt in enumerate(runtimes):
        sc = scenario(rt)
        out.append((seed, [(p, run_scenario(sc, p)) for p in (STRICT, BEST_EFFORT)]))
    return out


def test_waits_are_pooled_over_every_job_of_every_seed() -> None:
    by_seed = sweep_runs()
    # Strict FIFO: the gang starts at 50 (wait 45) in both seeds; Best-Effort FIFO: when
    # small2 ends, at 110 then 210 (waits 105 and 205)
    for _seed, runs in by_seed:
        strict, best = runs[0][1], runs[1][1]
        assert strict.record("big").started_at == 50
        assert best.record("small2").started_at == 10
    sw = seed_sweep(by_seed)
    assert sw["seeds"] == [0, 1] and sw["n_seeds"] == 2
    assert sw["sets"][STRICT.label]["wait"]["=1024"] == pytest.approx(45)
    assert sw["sets"][BEST_EFFORT.label]["wait"]["=1024"] == pytest.approx((105 + 205) / 2)
    assert sw["sets"][STRICT.label]["jobs"]["=1024"] == 2
    # every job of both seeds once: strict waits 0, 45, 140 and 0, 45, 140
    assert sw["sets"][STRICT.label]["wait"]["all"] == pytest.approx((0 + 45 + 140) / 3)


def test_experiments_count_the_seeds_going_the_papers_way() -> None:
    sw = seed_sweep(sweep_runs())
    (e,) = sw["experiments"]
    assert e["title"] == "Best-Effort FIFO vs Strict FIFO"
    assert e["waits"]["=1024"] == {"ratio": pytest.approx(155 / 45), "seeds_longer": 2, "seeds": 2}
    assert 0 <= e["gar_seeds_paper_way"] <= 2 and not math.isnan(e["gar_gain"])
    assert sw["longest_wait"]["=1024"] == {STRICT.label: 0, BEST_EFFORT.label: 2}
    text = format_seed_sweep("t", sweep_runs())
    assert "x3.44 (2/2)" in text and "longest =1024-GPU wait (seeds)" in text


def test_a_tie_for_the_longest_wait_counts_for_no_policy_set() -> None:
    sc = scenario(100.0)
    same = [
        (p, run_scenario(sc, STRICT))
        for p in (STRICT, PolicySet(queueing="strict-fifo", placement="binpack"))
    ]
    sw = seed_sweep([(0, same)])
    assert set(sw["longest_wait"]["=1024"].values()) == {0}


def test_seeds_must_run_the_same_policy_sets() -> None:
    runs = sweep_runs()
    runs[1] = (1, list(reversed(runs[1][1])))
    with pytest.raises(ValueError, match="seed 1"):
        seed_sweep(runs)


def test_compare_with_seeds_prints_the_pooled_table_and_writes_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["compare", "--jobs", "120", "--seeds", "0-1", "--workers", "1", "--quiet"]
    args += ["--sets", "strict-fifo+ebinpack,best-effort-fifo+ebinpack"]
    assert main([*args, "--out", str(tmp_path), "--json", "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "2 seeds (0-1)" in text and "Best-Effort FIFO vs Strict FIFO" in text
    d = json.loads(text.strip().splitlines()[-1])
    assert d["seeds"] == [0, 1] and set(d["sets"]) == {STRICT.label, BEST_EFFORT.label}
    report = json.loads((tmp_path / "compare.json").read_text())
    assert [r["seed"] for r in report["runs"]] == [0, 1]
    assert all(len(r["runs"]) == 2 for r in report["runs"])


@pytest.mark.parametrize("seeds", ["3-1", "x", "0,1,0"])
def test_a_malformed_seed_list_is_a_usage_error(
    seeds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "--seeds", seeds, "--quiet", "--no-plots"]) == 2
    assert "seeds" in capsys.readouterr().err


def test_a_seed_sweep_whose_run_fails_leaves_no_report_of_an_earlier_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs' store is written afresh: when a run fails, the report files an earlier
    compare left in the folder go too, not left beside runs they were not made of."""
    args = ["compare", "--jobs", "40", "--seeds", "0-1", "--workers", "1", "--quiet"]
    args += ["--sets", "strict-fifo+ebinpack", "--out", str(tmp_path), "--no-plots"]
    assert main(args) == 0
    assert (tmp_path / "compare.json").exists() and (tmp_path / "compare.txt").exists()
    capsys.readouterr()

    import kant.sweep.runs as runs

    def broken(kind: str, shared: object, params: dict) -> dict:
        raise RuntimeError("the run broke")

    monkeypatch.setattr(runs, "_run", broken)
    assert main(args) == 1
    assert "the run broke" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.jsonl"]


def test_a_seed_sweep_stopped_by_a_later_seeds_input_keeps_the_runs_it_recorded_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # seed 0's runs are recorded, then seed 1's scenario is refused as it is built: the
    # folder holds those runs, and no report of an earlier compare beside them
    args = ["compare", "--jobs", "40", "--seeds", "0-1", "--workers", "1", "--quiet"]
    args += ["--sets", "strict-fifo+ebinpack", "--out", str(tmp_path), "--no-plots"]
    assert main(args) == 0
    capsys.readouterr()

    import kant.sweep.runner as runner
    from kant.errors import InvalidTraceError

    real = runner.prepare

    def refused(kind: str, inputs: Any) -> Any:
        if inputs.get("seed") == 1:
            raise InvalidTraceError("trace", "seed 1", "refused as it is built")
        return real(kind, inputs)

    monkeypatch.setattr(runner, "prepare", refused)
    assert main(args) == 2
    assert "refused as it is built" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.jsonl"]
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [r["params"]["seed"] for r in records] == [0]
