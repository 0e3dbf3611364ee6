"""The loaded NASA iPSC/860 log the simulator's arrival tests replay: its first 1,500 jobs,
submit times x0.55 (a queue builds up), on the log's own 16 x 8 processors, first fit, one
1-GPU pod per processor and preemption off (the AccaSim side-by-side's work, shortened)."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kant.model import Job
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Queue
from kant.scheduler import Scheduler
from kant.sim import SimConfig, SimResult, Simulator, load_swf_jobs
from kant.sim.traces import trace_dir
from kant.state import ClusterState
from kant.topology import fat_tree_for_nodes

NASA = "pwa-nasa-ipsc-1993/NASA-iPSC-1993-3.1-cln.swf.gz"
OFF = PreemptionPolicy(priority=False, reclaim=False, backfill=False)

needs_nasa = pytest.mark.skipif(
    trace_dir() is None or not (trace_dir() / NASA).exists(),  # type: ignore[operator]
    reason="the shared NASA iPSC log is not here",
)


def loaded_nasa_jobs(folder: Path, n: int = 1500, factor: float = 0.55) -> list[Job]:
    """The first ``n`` jobs of the log with submit times x ``factor``, as kant jobs."""
    traces = trace_dir()
    assert traces is not None
    with gzip.open(traces / NASA, "rt") as f:
        rows = [ln for ln in f.read().splitlines() if ln.strip() and not ln.startswith(";")]
    loaded = []
    for ln in rows[:n]:
        cells = ln.split()
        cells[1] = str(round(float(cells[1]) * factor))
        loaded.append(" ".join(cells))
    swf = folder / "loaded.swf"
    swf.write_text("\n".join(loaded) + "\n")
    return list(load_swf_jobs(swf, tenant_by="none", max_gpus_per_pod=1).jobs)


def run_nasa(
    jobs: list[Job], policy: Any, wrap: Callable[[Scheduler], Scheduler] | None = None
) -> SimResult:
    """Simulate ``jobs`` under ``policy`` on the log's machine (``wrap``: applied to the
    scheduler before the run)."""
    s = Scheduler(
        ClusterState(fat_tree_for_nodes(16, nodes_per_leaf=16).nodes),
        queue=Queue(history=None),
        placer=Placer("firstfit"),
        policy=policy,
        preemption=OFF,
    )
    cfg = SimConfig(tick=0.0, grace_period=0.0, sample_interval=86400.0)
    return Simulator(wrap(s) if wrap is not None else s, jobs, cfg).run()
