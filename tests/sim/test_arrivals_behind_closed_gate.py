"""An arrival behind a closed gate schedules no cycle: with Strict FIFO blocked, preemption
off and nothing but arrivals since a cycle that decided nothing, a cycle could only skip the
new job. Every start is the same as when every arrival runs a cycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kant.contracts import GO, Gate
from kant.model import Reason, ReasonCode
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.sim import SimConfig, Simulator
from kant.testing import ClusterBuilder, job

from .every_arrival import REFERENCE, open_gate
from .nasa_loaded import OFF, loaded_nasa_jobs, needs_nasa, run_nasa


def _one_node(jobs: list[Any], policy: Any, cfg: SimConfig) -> Any:
    """Simulate ``jobs`` under ``policy`` on one 8-GPU node, preemption off."""
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(), policy=policy, preemption=OFF
    )
    return Simulator(s, jobs, cfg).run()


def _starts(res: Any) -> dict[str, float | None]:
    return {r.job_id: r.started_at for r in res.records}


def test_jobs_arriving_behind_a_blocked_head_wait_for_the_release_without_cycles() -> None:
    jobs = [
        job("a", gpus=8, submitted_at=0, runtime=100),
        job("head", gpus=8, submitted_at=10, runtime=100),
        job("c", gpus=1, submitted_at=20, runtime=10),
        job("d", gpus=1, submitted_at=30, runtime=10),
    ]
    cfg = SimConfig(tick=0.0, sample_interval=50.0, trace=True)

    def run(preemption: PreemptionPolicy, reference: bool = False) -> Any:
        s = Scheduler(
            ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(),
            policy=REFERENCE["strict-fifo"] if reference else "strict-fifo",
            preemption=preemption,
        )
        return Simulator(open_gate(s) if reference else s, jobs, cfg).run()

    res = run(OFF)
    assert _starts(res) == {"a": 0, "head": 100, "c": 200, "d": 200}
    # the head's arrival ran a cycle (it blocked there); c and d ran none
    assert res.summary.behind_closed_gate == 2
    assert [e.t for e in res.trace if e.kind == "cycle"] == [0, 10, 100, 200]
    ref = run(OFF, reference=True)
    assert (_starts(ref), ref.summary.behind_closed_gate) == (_starts(res), 0)
    assert ref.summary.cycles == res.summary.cycles + 2
    # with preemption on, time alone may make victims eligible: every arrival runs a cycle
    on = run(PreemptionPolicy())
    assert (_starts(on), on.summary.behind_closed_gate) == (_starts(res), 0)


def test_with_a_tick_a_job_behind_the_gate_still_runs_its_cycle() -> None:
    # with cycles at most every 7 s, the cycle c's arrival runs (at 14) puts the next one,
    # after a's release at 20, at 21: skipping it would move that to 20
    jobs = [
        job("a", gpus=8, submitted_at=0, runtime=20),
        job("head", gpus=4, submitted_at=1, runtime=10),
        job("c", gpus=1, submitted_at=10, runtime=10),
    ]
    res = _one_node(jobs, "strict-fifo", SimConfig(tick=7.0, sample_interval=50.0, trace=True))
    assert res.summary.behind_closed_gate == 0
    assert [e.t for e in res.trace if e.kind == "cycle"][:4] == [0, 7, 14, 21]
    assert _starts(res) == {"a": 0, "head": 21, "c": 21}


def test_a_job_that_arrives_ahead_of_the_blocked_head_runs_a_cycle_and_starts() -> None:
    jobs = [
        job("a", gpus=4, submitted_at=0, runtime=100),
        job("head", gpus=8, submitted_at=10, runtime=100),
        job("c", gpus=1, submitted_at=20, runtime=10),
        job("urgent", gpus=2, priority=1, submitted_at=30, runtime=10),
    ]
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(),
        policy="strict-fifo",
        preemption=OFF,
    )
    res = Simulator(s, jobs, SimConfig(tick=0.0, sample_interval=50.0)).run()
    # urgent comes before the head in the queue order: its arrival runs a cycle
    assert _starts(res) == {"a": 0, "head": 100, "c": 200, "urgent": 30}
    assert res.summary.behind_closed_gate == 1  # c only


class _OnePerCycle:
    """A policy that tries one job per cycle, then closes its gate (for the rest of the
    cycle only: the next cycle tries one more)."""

    name = "one-per-cycle"

    def begin(self, ctx: Any) -> Any:
        return _OneRun()


class _OneRun:
    def __init__(self) -> None:
        self.tried = 0

    def gate(self, job: Any) -> Gate:
        self.tried += 1
        return GO

    def closed(self) -> Gate | None:
        return (
            Gate(skip=Reason(code=ReasonCode.BLOCKED, message="one per cycle"))
            if self.tried
            else None
        )

    def explain(self, job: Any, reason: Reason) -> Reason:
        return reason

    def failed(self, job: Any, reason: Reason) -> bool:
        return False

    def reservation(self) -> None:
        return None


def test_after_a_cycle_that_decided_something_an_arrival_runs_a_cycle_again() -> None:
    jobs = [
        job("j1", gpus=1, submitted_at=0, runtime=100),
        job("j2", gpus=1, submitted_at=0, runtime=100),
        job("j3", gpus=1, submitted_at=5, runtime=100),
    ]
    res = _one_node(jobs, _OnePerCycle(), SimConfig(tick=0.0, sample_interval=50.0))
    # the cycle at 0 started j1 and closed its gate: the arrival at 5 still runs a cycle,
    # which starts j2 (one per cycle), and j3 waits for the next change
    assert _starts(res) == {"j1": 0, "j2": 5, "j3": 100}
    assert res.summary.behind_closed_gate == 0


@needs_nasa
def test_the_loaded_nasa_log_under_strict_fifo_starts_every_job_as_with_a_cycle_per_arrival(
    tmp_path: Path,
) -> None:
    jobs = loaded_nasa_jobs(tmp_path)
    res = run_nasa(jobs, "strict-fifo")
    ref = run_nasa(jobs, REFERENCE["strict-fifo"], wrap=open_gate)
    assert _starts(res) == _starts(ref)
    assert res.records == ref.records
    # (an arrival that runs no cycle may share its instant with one that does)
    skipped = res.summary.behind_closed_gate + res.summary.too_big_arrivals
    assert res.summary.behind_closed_gate > 100
    assert 100 < ref.summary.cycles - res.summary.cycles <= skipped
