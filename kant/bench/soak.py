"""``kant bench soak``: a long run of scheduling cycles with churn; is a cycle's cost flat?

The cluster, tenants, quotas and job mix are those of ``kant bench cycle`` (an N-node 8-GPU
fat tree, 4 tenants with quotas, Backfill with preemption, E-Binpack), set up the same way
(one full job lifetime at a coarse step). Then ``--cycles`` cycles, ``--interval`` simulated
seconds apart, each preceded by churn through the :class:`~kant.scheduler.Scheduler` facade:

- jobs whose runtime is over finish (``pod_finished``), victims report gone (``pod_evicted``),
  new jobs arrive to keep J pending;
- node loss and return: every ``--node-loss-every`` cycles one node with pods is lost
  (``node_lost``); it comes back (``ClusterState.add_node``) ``--node-down-cycles`` later;
- GPU faults: every ``--gpu-fault-every`` cycles one GPU in use fails (``gpu_unhealthy``, its
  pods lost); it is repaired (``gpu_healthy``) ``--gpu-down-cycles`` later;
- binding failures: of each cycle's new bindings, one in ``--bind-fail-one-in`` fails
  (``binding_failed``: the gang requeued with backoff).

Every random choice comes from one seeded generator over sorted names, so two runs do the same
work. Measured per cycle: the CPU time (this thread) and wall time of ``schedule`` (the cycle;
``apply`` and the churn are not timed) and the resident memory after the cycle. Reported: the
median and p99 of each third of the run, of the CPU and of the wall time
(``cpu_p50_ms_first``, ``wall_p50_ms_middle``, ``wall_p99_ms_last``, ...), and
``last_vs_first`` = median CPU of the last third / median CPU of the first third (flat:
within 1.10).

Next to each cycle (untimed) a fixed piece of work, :func:`kant.bench.speed_probe`, measures
how fast the machine is then; ``probe_ms_first`` and ``probe_ms_last`` are its medians over
the first and last thirds, and ``last_vs_first_calibrated`` is ``last_vs_first`` with the
machine's speed taken out (:func:`kant.bench.calibrated_ratio`). On a shared machine whose
speed drifts during the run, that is the figure that says whether the code slows down.
``gc_ms_first`` and ``gc_ms_last`` are the garbage collector's time inside the cycles of the
first and last thirds (summed), and ``gc_collections`` the collections inside all measured
cycles per generation: what a growing heap costs the cycle.

What the cycles had to do, by the same thirds (``_first``, ``_last``): ``placed_pods`` and
``victim_pods`` (summed), ``preemption_searches`` (summed), and the medians over the third's
cycles of ``running_jobs`` and ``waiting_gpus`` (the mean GPUs per waiting job, read before
each cycle). The job mix that arrives is the same all run long, but the one that waits is
not: small jobs find room sooner, so the waiting set fills with larger jobs and the running
set with more, smaller ones, and a cycle has more to place and more to preempt for. A
``last_vs_first`` above 1 next to ``waiting_gpus_last`` above ``waiting_gpus_first`` is that
drift as much as the code; equal work and a ratio above 1 is the code.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from kant.bench import (
    CollectorClock,
    calibrated_ratio,
    check_counts,
    current_rss_mib,
    percentile,
    settled,
    speed_probe,
)
from kant.bench.cycle import evict_victims, finish_due, refill, setup, warm_up
from kant.errors import InvalidConfigError
from kant.model import MILLI, NodeSpec, PodId
from kant.queueing import JobPhase
from kant.scheduler import Scheduler


class _Churn:
    """Node loss and return, GPU faults and binding failures, seeded."""

    def __init__(
        self,
        s: Scheduler,
        seed: int,
        *,
        node_loss_every: int,
        node_down_cycles: int,
        gpu_fault_every: int,
        gpu_down_cycles: int,
        bind_fail_one_in: int,
    ) -> None:
        self.s = s
        self.rng = np.random.default_rng(seed)
        self.node_loss_every, self.node_down = node_loss_every, node_down_cycles
        self.gpu_fault_every, self.gpu_down = gpu_fault_every, gpu_down_cycles
        self.bind_fail_one_in = bind_fail_one_in
        self.down_nodes: list[tuple[int, NodeSpec]] = []
        self.down_gpus: list[tuple[int, str, int]] = []
        self.counts = {"nodes_lost": 0, "nodes_back": 0, "gpu_faults": 0, "gpu_repairs": 0,
                       "binding_failures": 0}  # fmt: skip

    def _busy_node(self) -> str | None:
        cluster = self.s.cluster
        names = sorted(n.name for n in cluster.nodes() if cluster.pods_on(n.name))
        if not names:
            return None
        return names[int(self.rng.integers(len(names)))]

    def before_cycle(self, i: int, now: float) -> None:
        s = self.s
        while self.down_nodes and self.down_nodes[0][0] <= i:
            _, spec = self.down_nodes.pop(0)
            s.cluster.add_node(spec)
            self.counts["nodes_back"] += 1
        while self.down_gpus and self.down_gpus[0][0] <= i:
            _, node, gpu = self.down_gpus.pop(0)
            if node in s.cluster:
                s.gpu_healthy(node, gpu)
                self.counts["gpu_repairs"] += 1
        if self.node_loss_every and i % self.node_loss_every == 0:
            name = self._busy_node()
            if name is not None:
                spec = s.cluster.node(name)
                self.down_gpus = [d for d in self.down_gpus if d[1] != name]
                s.node_lost(name, now)
                self.down_nodes.append((i + self.node_down, spec))
                self.counts["nodes_lost"] += 1
        if self.gpu_fault_every and i % self.gpu_fault_every == self.gpu_fault_every // 2:
            name = self._busy_node()
            if name is not None:
                used = sorted({g for p in s.cluster.pods_on(name)
                               for g in s.cluster.binding(p).gpus})  # fmt: skip
                gpu = used[int(self.rng.integers(len(used)))]
                s.gpu_unhealthy(name, gpu, now)
                self.down_gpus.append((i + self.gpu_down, name, gpu))
                self.counts["gpu_faults"] += 1

    def after_apply(self, pods: list[PodId], now: float) -> None:
        if not self.bind_fail_one_in:
            return
        s = self.s
        for p in pods:
            if self.rng.integers(self.bind_fail_one_in) == 0:
                e = s.queue.get(p.job)
                if e is not None and p in e.assigned:
                    s.binding_failed(p, now, "soak: injected binding failure")
                    self.counts["binding_failures"] += 1


# what a cycle had to do, and how a third of the run sums it up (see the module docstring)
_WORK: dict[str, Any] = {
    "placed_pods": sum,
    "victim_pods": sum,
    "preemption_searches": sum,
    "running_jobs": statistics.median,
    "waiting_gpus": statistics.median,
}


def work_by_thirds(work: dict[str, list[float]]) -> dict[str, float]:
    """``work[key]``: one value per cycle for each key of :data:`_WORK`; each key's sum or
    median (as :data:`_WORK` says) over the first and over the last third of the cycles, as
    ``key_first`` and ``key_last`` (0 for an empty third)."""
    out: dict[str, float] = {}
    for key, how in _WORK.items():
        parts = _thirds(work[key])
        for name, part in (("first", parts[0]), ("last", parts[2])):
            out[f"{key}_{name}"] = round(how(part), 2) if part else 0
    return out


def _thirds(values: list[float]) -> list[list[float]]:
    n = len(values)
    return [values[: n // 3], values[n // 3 : n - n // 3], values[n - n // 3 :]]


def bench_soak(
    nodes: int,
    pending: int,
    *,
    cycles: int = 300,
    seed: int = 7,
    policy: str = "backfill",
    strategy: str = "ebinpack",
    interval: float = 10.0,
    node_loss_every: int = 10,
    node_down_cycles: int = 20,
    gpu_fault_every: int = 10,
    gpu_down_cycles: int = 15,
    bind_fail_one_in: int = 50,
    gc_freeze: bool = True,
) -> dict[str, Any]:
    """``cycles`` cycles with churn on ``nodes`` 8-GPU nodes and ``pending`` waiting jobs;
    per-third medians of the cycle's CPU and wall time and of the resident memory
    (``gc_freeze``: see :func:`kant.bench.settled`). InvalidConfigError for fewer than 3
    cycles (the run is reported by thirds), and for other counts that are not ints of their
    least."""
    if not isinstance(cycles, int) or isinstance(cycles, bool) or cycles < 3:
        raise InvalidConfigError("cycles", cycles, "must be an int of at least 3 (thirds)")
    check_counts(nodes=(nodes, 1), pending=(pending, 1), seed=(seed, 0),
                 node_loss_every=(node_loss_every, 0), node_down_cycles=(node_down_cycles, 1),
                 gpu_fault_every=(gpu_fault_every, 0), gpu_down_cycles=(gpu_down_cycles, 1),
                 bind_fail_one_in=(bind_fail_one_in, 0))  # fmt: skip
    s, wl, _ = setup(nodes, pending, seed=seed, policy=policy, strategy=strategy,
                      preemption=True)  # fmt: skip
    total = s.cluster.total_gpus()
    t_setup = time.perf_counter()
    now = warm_up(s, wl, pending, interval)
    setup_s = time.perf_counter() - t_setup
    churn = _Churn(
        s, seed + 1, node_loss_every=node_loss_every, node_down_cycles=node_down_cycles,
        gpu_fault_every=gpu_fault_every, gpu_down_cycles=gpu_down_cycles,
        bind_fail_one_in=bind_fail_one_in,
    )  # fmt: skip
    cpu: list[float] = []
    wall: list[float] = []
    rss: list[float] = []
    probe: list[float] = []
    in_gc: list[float] = []  # the collector's time inside each cycle
    gens = [0, 0, 0]  # collections inside the cycles, per generation
    work: dict[str, list[float]] = {k: [] for k in _WORK}  # what each cycle had to do
    placed = victims = finished = 0
    with settled(gc_freeze), CollectorClock() as collector:
        for i in range(cycles):
            now += interval
            finished += finish_due(s, now)
            evict_victims(s, now)
            churn.before_cycle(i, now)
            refill(s, wl, pending, now)
            waiting = [e.job.gpu_units for e in s.queue.candidates()]
            work["waiting_gpus"].append(statistics.fmean(waiting) if waiting else 0.0)
            work["running_jobs"].append(len(s.queue.running()))
            probe.append(speed_probe())
            g0, n0 = collector.ms, list(collector.collections)
            t0, c0 = time.perf_counter(), time.thread_time()
            res = s.schedule(now)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.thread_time() - c0) * 1000)
            in_gc.append(collector.ms - g0)
            gens = [g + b - a for g, a, b in zip(gens, n0, collector.collections, strict=True)]
            work["placed_pods"].append(len(res.bindings))
            work["victim_pods"].append(sum(len(v.pods) for v in res.victims))
            work["preemption_searches"].append(res.stats.preemption_searches)
            s.apply(res, now)
            churn.after_apply([b.pod for b in res.bindings], now)
            rss.append(current_rss_mib())
            placed += res.stats.placed_jobs
            victims += len(res.victims)
    thirds = _thirds(cpu)
    out: dict[str, Any] = {
        "bench": "soak",
        "nodes": nodes,
        "gpus": total,
        "pending": pending,
        "policy": policy,
        "strategy": strategy,
        "gc_freeze": gc_freeze,
        "cycles": cycles,
        "interval_s": interval,
        "allocated_ratio": round(s.cluster.allocated_milli() / (MILLI * total), 3),
        "running_jobs": len(s.queue.running()),
        "pending_jobs": sum(1 for _ in s.queue.jobs(JobPhase.PENDING)),
        "cpu_p50_ms": round(statistics.median(cpu), 2),
        "cpu_p99_ms": round(percentile(cpu, 99), 2),
        "wall_p50_ms": round(statistics.median(wall), 2),
        "wall_p99_ms": round(percentile(wall, 99), 2),
    }
    for name, part, w in zip(("first", "middle", "last"), thirds, _thirds(wall), strict=True):
        out[f"cpu_p50_ms_{name}"] = round(statistics.median(part), 2)
        out[f"cpu_p99_ms_{name}"] = round(percentile(part, 99), 2)
        out[f"wall_p50_ms_{name}"] = round(statistics.median(w), 2)
        out[f"wall_p99_ms_{name}"] = round(percentile(w, 99), 2)
    out["last_vs_first"] = round(statistics.median(thirds[2]) / statistics.median(thirds[0]), 3)
    p = _thirds(probe)
    out["probe_ms_first"] = round(statistics.median(p[0]), 3)
    out["probe_ms_last"] = round(statistics.median(p[2]), 3)
    out["last_vs_first_calibrated"] = round(calibrated_ratio(thirds[2], p[2], thirds[0], p[0]), 3)
    g = _thirds(in_gc)
    out["gc_ms_first"] = round(sum(g[0]), 1)
    out["gc_ms_last"] = round(sum(g[2]), 1)
    out["gc_collections"] = gens
    r = _thirds(rss)
    out["rss_mib_first"] = round(statistics.median(r[0]), 1)
    out["rss_mib_last"] = round(statistics.median(r[2]), 1)
    out["rss_growth_mib"] = round(rss[-1] - rss[0], 1)
    out.update(work_by_thirds(work))
    out.update(churn.counts)
    out["finished_jobs"] = finished
    out["placed_per_cycle"] = round(placed / cycles, 2)
    out["victims_per_cycle"] = round(victims / cycles, 2)
    out["setup_s"] = round(setup_s, 1)
    return out
