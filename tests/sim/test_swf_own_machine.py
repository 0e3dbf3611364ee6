"""An SWF log is replayed on its own machine (``MaxProcs``) unless a resize is asked for."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kant.sim.scenarios import run_scenario, trace_scenario
from kant.sim.traces import trace_dir

NASA = "pwa-nasa-ipsc-1993/NASA-iPSC-1993-3.1-cln.swf.gz"

needs_nasa = pytest.mark.skipif(
    trace_dir() is None or not (trace_dir() / NASA).exists(),  # type: ignore[operator]
    reason="the shared NASA iPSC log is not here",
)


def _loaded(tmp: Path) -> Path:
    """The first 8,000 NASA jobs with submit times x0.55: above 0.8 of the log's 128
    processors."""
    assert trace_dir() is not None
    with gzip.open(trace_dir() / NASA, "rt") as f:  # type: ignore[operator]
        lines = f.read().splitlines()
    out, n = [], 0
    for ln in lines:
        if ln.startswith(";"):
            out.append(ln)
        elif ln.strip() and n < 8000:
            cells = ln.split()
            cells[1] = str(round(float(cells[1]) * 0.55))
            out.append(" ".join(cells))
            n += 1
    p = tmp / "loaded.swf"
    p.write_text("\n".join(out) + "\n")
    return p


@needs_nasa
def test_an_swf_log_above_the_target_load_is_replayed_on_its_own_machine_by_default(
    tmp_path: Path,
) -> None:
    # it once grew to 17 nodes silently, the offered load being above 0.8
    sc = trace_scenario("swf", path=_loaded(tmp_path))
    assert sum(n.gpus for n in sc.nodes) == 128


@needs_nasa
def test_an_swf_log_is_resized_for_an_offered_load_only_when_asked(tmp_path: Path) -> None:
    sc = trace_scenario("swf", path=_loaded(tmp_path), load=0.5)
    assert sum(n.gpus for n in sc.nodes) > 128


@needs_nasa
def test_the_nasa_log_runs_on_its_128_processors_as_16_whole_8_gpu_nodes() -> None:
    sc = trace_scenario("swf")
    assert sc.total_gpus == 128 and [n.gpus for n in sc.nodes] == [8] * 16
    assert {n.template for n in sc.nodes} == {"dgx-8gpu"}


def test_a_log_whose_maxprocs_is_no_multiple_of_8_runs_on_exactly_that_many_gpus(
    tmp_path: Path,
) -> None:
    # MaxProcs 100: 12 nodes of 8 GPUs and a last one of 4 (it ran on 13 nodes of 8, 104
    # GPUs: 4 the log's machine never had)
    rows = "".join(
        f"{i} {i * 10} -1 100 {p} -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1 -1\n"
        for i, p in enumerate([100, 4, 4, 4], start=1)
    )
    log = tmp_path / "m100.swf"
    log.write_text("; MaxProcs: 100\n" + rows)
    sc = trace_scenario("swf", path=log)
    assert sc.total_gpus == 100
    assert [n.gpus for n in sc.nodes] == [8] * 12 + [4]
    assert "100 GPUs" in sc.description
    last = sc.nodes[-1]
    assert last.leaf == sc.nodes[0].leaf and last.rdma_nics == 4
    # the 100-processor job fills the machine: it starts at once and ends
    res = run_scenario(sc)
    assert res.record("swf-1").started_at == 10 and res.summary.jobs["finished"] == 4


def _swf(tmp: Path, maxprocs: int, procs: list[int]) -> Path:
    rows = "".join(
        f"{i} {i * 10} -1 100 {p} -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1 -1\n"
        for i, p in enumerate(procs, start=1)
    )
    log = tmp / f"m{maxprocs}.swf"
    log.write_text(f"; MaxProcs: {maxprocs}\n" + rows)
    return log


@pytest.mark.parametrize(
    ("maxprocs", "big", "nodes"),
    [(21, 21, 3), (54, 49, 7)],  # 3 pods of 7 on 8+8+5; 7 pods of 7 on 6 x 8 + 6
)
def test_a_log_whose_job_cannot_be_packed_on_exactly_maxprocs_runs_on_whole_8_gpu_nodes(
    tmp_path: Path, maxprocs: int, big: int, nodes: int
) -> None:
    # (the exact machine kept the job waiting to the end of the run, never started)
    sc = trace_scenario("swf", path=_swf(tmp_path, maxprocs, [big, 4]))
    assert [n.gpus for n in sc.nodes] == [8] * nodes
    assert "rounded up to whole 8-GPU nodes" in sc.description and "swf-1" in sc.description
    res = run_scenario(sc)
    assert res.record("swf-1").started_at == 10 and res.summary.jobs["finished"] == 2


def test_a_log_whose_jobs_all_pack_on_exactly_maxprocs_keeps_its_machine(tmp_path: Path) -> None:
    # 23 processors are 8 + 8 + 7: they fill 8 + 8 + 7 exactly
    sc = trace_scenario("swf", path=_swf(tmp_path, 23, [23, 4, 16]))
    assert [n.gpus for n in sc.nodes] == [8, 8, 7] and "rounded" not in sc.description
