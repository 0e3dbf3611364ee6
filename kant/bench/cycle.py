"""``kant bench cycle``: steady-state scheduling cycles with J pending mixed jobs.

The cluster is an N-node 8-GPU fat tree shared by 4 tenants with quotas (shared mode, each
nominal a quarter of the GPUs, borrowing up to another quarter). Jobs are a paper-like mix:
most need fewer than 8 GPUs, a few need 64 to 512; gang training jobs and pod-level inference
jobs; 10% have a higher priority; every job carries a runtime estimate.

Set-up (not timed): the workload runs for one full job lifetime (4 h simulated, a cycle every
10 simulated minutes, the queue refilled to J pending jobs), so the cluster is full and the
running jobs have spread ages; then 5 cycles at the measured interval absorb the backlog of
the coarse set-up step. Measured: ``--cycles`` cycles, ``--interval`` simulated seconds
apart (default 10): jobs whose runtime is over finish, victims report gone, new jobs arrive to
keep J pending, then one ``schedule_cycle`` (timed) and its ``apply`` (not timed).

Wall-clock figures (``p50_ms``, ``p99_ms``) are the headline; ``cpu_*`` (this thread's CPU
time) tell them apart from a busy machine. ``probe_ms`` is the median of
:func:`kant.bench.speed_probe`, a fixed piece of work timed next to each cycle: how fast the
machine was during the run (on a shared machine it varies by up to 1.7x from one minute to
the next). ``jobs_per_s`` is the number of waiting jobs a
cycle examines per second of cycle time (J / mean cycle time); ``placed_per_cycle`` how many
of them it placed on average. ``--no-preemption`` measures the cycle without victim searches.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from kant.admission import Admitter, Quota
from kant.apply import apply
from kant.bench import check_counts, fat_tree_nodes, percentile, rss_mib, settled, speed_probe
from kant.cycle import schedule_cycle
from kant.model import MILLI, Job, JobKind, Resources, Role
from kant.preemption import PreemptionPolicy
from kant.queueing import JobPhase, Queue
from kant.scheduler import Scheduler
from kant.state import ClusterState

TENANTS = ("t0", "t1", "t2", "t3")
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SIZE_P = (0.35, 0.15, 0.15, 0.15, 0.06, 0.05, 0.04, 0.03, 0.015, 0.005)
MIN_RUNTIME = 600
MAX_RUNTIME = 14_400
WARMUP_STEP = 600.0
SETTLE_CYCLES = 5


class _Workload:
    """Deterministic (seeded) stream of mixed jobs."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def job(self, now: float) -> Job:
        rng = self.rng
        self.n += 1
        size = int(rng.choice(SIZES, p=SIZE_P))
        tenant = TENANTS[int(rng.integers(len(TENANTS)))]
        priority = 1 if rng.random() < 0.1 else 0
        runtime = float(rng.integers(MIN_RUNTIME, MAX_RUNTIME))
        if size < 8 and rng.random() < 0.3:
            # pod-level inference service: a few replicas of a small pod
            replicas = int(rng.integers(2, 5))
            role = Role(replicas=replicas, resources=Resources(gpus=size, cpu_milli=1000 * size))
            return Job(
                id=f"j{self.n}", tenant=tenant, priority=priority, submitted_at=now,
                kind=JobKind.INFERENCE, gang=False, roles=(role,), runtime_estimate=runtime,
            )  # fmt: skip
        per_pod = min(size, 8)
        role = Role(
            replicas=size // per_pod, resources=Resources(gpus=per_pod, cpu_milli=1000 * per_pod)
        )
        return Job(
            id=f"j{self.n}", tenant=tenant, priority=priority, submitted_at=now,
            gang=True, roles=(role,), runtime_estimate=runtime,
        )  # fmt: skip


def finish_due(s: Scheduler, now: float) -> int:
    done = 0
    for e in s.queue.running():
        est = e.job.runtime_estimate or 0.0
        if e.started_at is not None and e.started_at + est <= now:
            for p in sorted(e.assigned):
                if e.id in s.queue and p in s.queue.entry(e.id).assigned:
                    s.pod_finished(p, now)
            done += 1
    return done


def evict_victims(s: Scheduler, now: float) -> None:
    for e in s.queue.running():
        for p in sorted(e.terminating):
            if p in s.queue.entry(e.id).assigned:
                s.pod_evicted(p, now)


def refill(s: Scheduler, wl: _Workload, target: int, now: float) -> None:
    waiting = sum(1 for _ in s.queue.jobs(JobPhase.PENDING))
    for _ in range(target - waiting):
        s.submit(wl.job(now), now)


def setup(
    nodes: int, pending: int, *, seed: int, policy: str, strategy: str, preemption: bool
) -> tuple[Scheduler, _Workload, PreemptionPolicy]:
    """The benchmark's cluster (4 tenants with quotas), scheduler and workload."""
    from kant.placement import Placer

    del pending
    cluster = ClusterState(fat_tree_nodes(nodes))
    quarter = cluster.total_gpus() / len(TENANTS)
    quotas = [Quota.gpus(t, "H100", quarter, borrowing_limit=quarter) for t in TENANTS]
    rules = PreemptionPolicy(min_runtime=600.0, max_preemptors_per_cycle=2)
    if not preemption:
        rules = PreemptionPolicy(priority=False, reclaim=False, backfill=False)
    s = Scheduler(
        cluster, queue=Queue(), admitter=Admitter(quotas), placer=Placer(strategy),
        policy=policy, preemption=rules,
    )  # fmt: skip
    return s, _Workload(seed), rules


def warm_up(s: Scheduler, wl: _Workload, pending: int, interval: float) -> float:
    """Set-up (not timed): run the workload for one full job lifetime at a coarse step, so
    the running jobs have spread ages and finish at a steady rate when measuring starts;
    then a few cycles at the measured interval absorb the coarse step's backlog. Returns the
    simulated time reached."""
    now = 0.0
    while now < MAX_RUNTIME:
        finish_due(s, now)
        evict_victims(s, now)
        refill(s, wl, pending, now)
        s.step(now)
        now += WARMUP_STEP
    for _ in range(SETTLE_CYCLES):
        now += interval
        finish_due(s, now)
        evict_victims(s, now)
        refill(s, wl, pending, now)
        s.step(now)
    return now


def bench_cycle(
    nodes: int,
    pending: int,
    *,
    cycles: int = 50,
    seed: int = 7,
    policy: str = "backfill",
    strategy: str = "ebinpack",
    interval: float = 10.0,
    preemption: bool = True,
    gc_freeze: bool = True,
) -> dict[str, Any]:
    """Median and p99 cycle time with ``pending`` waiting jobs on ``nodes`` 8-GPU nodes
    (``gc_freeze``: see :func:`kant.bench.settled`). InvalidConfigError for counts that
    are not ints of their least."""
    check_counts(nodes=(nodes, 1), pending=(pending, 1), cycles=(cycles, 1), seed=(seed, 0))
    s, wl, rules = setup(nodes, pending, seed=seed, policy=policy, strategy=strategy,
                          preemption=preemption)  # fmt: skip
    cluster, queue, admitter = s.cluster, s.queue, s.admitter
    total = cluster.total_gpus()
    t_setup = time.perf_counter()
    now = warm_up(s, wl, pending, interval)
    setup_s = time.perf_counter() - t_setup
    times: list[float] = []
    cpu: list[float] = []
    probe: list[float] = []
    placed = 0
    victims = 0
    attempts = 0
    with settled(gc_freeze):
        for _ in range(cycles):
            now += interval
            finish_due(s, now)
            evict_victims(s, now)
            refill(s, wl, pending, now)
            probe.append(speed_probe())
            t0, c0 = time.perf_counter(), time.thread_time()
            res = schedule_cycle(
                cluster, queue, admitter, s.placer, now, policy=s.policy, preemption=rules
            )
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.thread_time() - c0) * 1000)
            apply(res, cluster, queue, admitter, now)
            placed += res.stats.placed_jobs
            victims += len(res.victims)
            attempts += res.stats.placement_attempts
    mean_ms = statistics.fmean(times)
    return {
        "bench": "cycle",
        "nodes": nodes,
        "gpus": total,
        "pending": pending,
        "policy": policy,
        "strategy": strategy,
        "cycles": cycles,
        "interval_s": interval,
        "preemption": preemption,
        "gc_freeze": gc_freeze,
        "allocated_ratio": round(cluster.allocated_milli() / (MILLI * total), 3),
        "running_jobs": len(queue.running()),
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(percentile(times, 99), 2),
        "max_ms": round(max(times), 2),
        "cpu_p50_ms": round(statistics.median(cpu), 2),
        "cpu_p99_ms": round(percentile(cpu, 99), 2),
        "probe_ms": round(statistics.median(probe), 3),
        "jobs_per_s": round(pending / (mean_ms / 1000), 1),
        "placed_per_cycle": round(placed / cycles, 2),
        "placements_per_cycle": round(attempts / cycles, 2),
        "victims_per_cycle": round(victims / cycles, 2),
        "setup_s": round(setup_s, 1),
        "peak_rss_mib": round(rss_mib(), 1),
    }
