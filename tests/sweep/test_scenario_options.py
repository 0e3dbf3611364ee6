"""A sweep's ``sim`` runs and ``kant simulate`` build their scenario with one function."""

from __future__ import annotations

from pathlib import Path

import pytest

from kant.cli import build_parser
from kant.cli.simulate import scenario_from_args
from kant.errors import ValidationError
from kant.sweep.runs import scenario_from_params

SWF = """; MaxProcs: 32
1 0 10 3600 8 -1 -1 8 3600 -1 1 1 1 1 1 -1 -1 -1
2 60 10 3600 16 -1 -1 16 3600 -1 1 1 1 1 1 -1 -1 -1
3 120 10 7200 8 -1 -1 8 7200 -1 1 1 1 1 1 -1 -1 -1
4 180 10 3600 32 -1 -1 32 3600 -1 1 1 1 1 1 -1 -1 -1
"""


def _swf(tmp: Path) -> str:
    p = tmp / "tiny.swf"
    p.write_text(SWF)
    return str(p)


def test_a_sweep_run_sizes_a_traces_cluster_for_its_load_as_kant_simulate_does(
    tmp_path: Path,
) -> None:
    path = _swf(tmp_path)
    args = build_parser().parse_args(
        ["simulate", "--trace", "swf", "--trace-file", path, "--load", "0.1"]
    )
    by_cli = scenario_from_args(args)
    by_sweep = scenario_from_params(
        {"trace": "swf", "trace_file": path, "load": 0.1, "queueing": "backfill", "seed": 0}
    )
    assert by_cli.total_gpus > 32  # resized for the load, not the log's own 32 processors
    assert by_sweep.nodes == by_cli.nodes
    assert by_sweep.jobs == by_cli.jobs


@pytest.mark.parametrize(
    "argv",
    [
        ["--scenario", "inference", "--jobs", "30", "--seed", "3", "--tick", "10"],
        ["--jobs", "40", "--load", "0.5", "--grace", "5", "--mtbf", "1e6", "--mttr", "60"],
        ["--scenario", "inference", "--jobs", "20", "--on-interrupt", "restart", "--horizon", "9"],
    ],
)
def test_kant_simulate_options_and_sweep_params_give_the_same_scenario(argv: list[str]) -> None:
    args = build_parser().parse_args(["simulate", *argv])
    params = {
        k: getattr(args, k)
        for k in ("scenario", "jobs", "seed", "load", "tick", "grace", "on_interrupt",
                  "mtbf", "mttr", "horizon")
        if getattr(args, k) is not None
    }  # fmt: skip
    assert scenario_from_params(params) == scenario_from_args(args)


def test_a_sweep_run_refuses_a_cluster_without_a_trace() -> None:
    with pytest.raises(ValidationError, match="goes with a trace"):
        scenario_from_params({"scenario": "inference", "cluster": "c.yaml"})


@pytest.mark.parametrize("scenario", ["paper-training", "inference", "inference-paper"])
def test_a_compare_grid_without_sets_runs_the_scenarios_own_sets_as_kant_compare_does(
    scenario: str,
) -> None:
    # inference-paper compares its own three (E-Spread first); the grid, and so
    # `kant compare --seeds`, ran the training scenario's four, E-Spread left out
    from kant.sim.scenarios import make_scenario
    from kant.sweep import Grid

    runs = Grid("compare", {"scenario": scenario, "jobs": 20, "seeds": "0"}).runs()
    got = [(r.params["queueing"], r.params["placement"]) for r in runs]
    want = [(p.queueing, p.placement) for p in make_scenario(scenario, jobs=20).compare_sets]
    assert got == want


def test_a_compare_grid_over_scenarios_runs_each_ones_own_sets() -> None:
    from kant.sweep import Grid

    runs = Grid("compare", {"scenario": ["inference", "inference-paper"], "jobs": 20}).runs()
    by = {}
    for r in runs:
        by.setdefault(r.params["scenario"], []).append(r.params["placement"])
    assert by == {
        "inference": ["ebinpack", "ebinpack", "ebinpack", "spread"],
        "inference-paper": ["espread", "ebinpack", "spread"],
    }
