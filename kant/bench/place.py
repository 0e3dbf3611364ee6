"""``kant bench place`` and ``kant bench gang``: Placer throughput and gang latency."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from kant.bench import check_counts, fat_tree_nodes, fill_with_placer, percentile
from kant.errors import InvalidConfigError, ValidationError
from kant.model import Job, Tier, is_finite_number
from kant.placement import Placer
from kant.state import ClusterState, Snapshot
from kant.testing import job


def bench_place(
    nodes: int, pods: int, *, strategy: str = "ebinpack", mixed: bool = False, seed: int = 3
) -> dict[str, Any]:
    """Place ``pods`` one-pod jobs one at a time on an empty ``nodes``-node 8-GPU fat tree.

    Single-GPU pods, or (``mixed``) 1/2/4/8-GPU pods drawn uniformly. Each pod is one
    ``Placer.place`` call on the cycle's snapshot (the bindings accumulate in it). Before the
    timing, one untimed warm-up placement (the first pod's size, by another placer of the
    strategy, on the snapshot rolled back: it changes no placement) pays the process's
    one-off costs. Reported: ``placed`` and ``failed`` pods (mixed sizes may leave a pod no
    node with room), ``pods_per_s`` = pods placed / wall time of all the calls (the failed
    ones' time included), and ``p50_us`` / ``p99_us``, the latency of the calls that placed
    their pod (a failed call is not a placement) but the first, in which the placer builds
    its caches for the cluster (unless it is the only one; its time counts in
    ``pods_per_s``). Raises
    :class:`~kant.errors.ValidationError` when the pods ask more GPUs than the nodes have
    (every pod past them would be a failed placement, not a placement measured), and
    InvalidConfigError for counts that are not ints of their least."""
    check_counts(nodes=(nodes, 1), pods=(pods, 1), seed=(seed, 0))
    st = ClusterState(fat_tree_nodes(nodes))
    snap = st.snapshot()
    placer = Placer(strategy)
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 4, 8], size=pods) if mixed else np.ones(pods, dtype=np.int64)
    if int(sizes.sum()) > 8 * nodes:  # (the pods past the cluster's GPUs would not place)
        raise ValidationError(
            "pods", pods, f"{int(sizes.sum())} GPUs asked; {nodes} nodes have {8 * nodes}"
        )

    def pod(name: str, g: int) -> Job:
        return job(name, gpus=g, cpu_milli=4000 * g, memory_mib=32768 * g, nics=0)

    jobs = [pod(f"p{i}", g) for i, g in enumerate(sizes.tolist())]
    _warm_up(strategy, pod("warm-up", int(sizes[0])), snap)
    lat: list[tuple[int, float]] = []  # (call, us) of the pods placed
    placed = 0
    with snap.transaction():
        t_all = time.perf_counter()
        for i, j in enumerate(jobs):
            t0 = time.perf_counter()
            res = placer.place(j, snap)
            t1 = time.perf_counter()
            if res.bindings:
                lat.append((i, (t1 - t0) * 1e6))
                placed += len(res.bindings)
        wall = time.perf_counter() - t_all
        snap.check_invariants()
    # (the first call builds the placer's caches for the cluster: left out, unless alone)
    p50, p99 = _median_p99([us for i, us in lat if i] or [us for _i, us in lat], 1)
    return {
        "bench": "place",
        "strategy": strategy,
        "nodes": nodes,
        "pods": pods,
        "mixed": mixed,
        "placed": placed,
        "failed": pods - placed,
        "pods_per_s": round(placed / wall, 1),
        "p50_us": p50,
        "p99_us": p99,
    }


def bench_gang(
    nodes: int,
    replicas: int,
    *,
    gangs: int = 30,
    strategy: str = "ebinpack",
    fill: float = 0.5,
    seed: int = 5,
) -> dict[str, Any]:
    """Place ``gangs`` gang jobs of ``replicas`` x 8-GPU pods asking for leaf-or-spine
    locality (a required SPINE wish; leaf preferred first) on a cluster ``fill`` allocated by
    random 1-8 GPU pods. Each gang is placed and rolled back, so every measurement sees the
    same partly filled cluster; one untimed warm-up gang before them (by another placer of the
    strategy, rolled back) pays the process's one-off costs, and the first gang's time, in
    which the placer builds its caches for the cluster, is left out of the times (unless it
    is the only gang). Reported apart: ``placed_gangs`` and ``ms_per_gang`` / ``p99_ms``,
    the median and p99 time of the gangs placed (None when none was timed), and
    ``failed_gangs`` and ``ms_per_failed_gang``, the median time to find that a gang does
    not fit (None when none failed).
    InvalidConfigError for counts that are not ints of their least, or a ``fill`` outside
    [0, 1)."""
    check_counts(nodes=(nodes, 1), replicas=(replicas, 1), gangs=(gangs, 1), seed=(seed, 0))
    if not (is_finite_number(fill) and 0 <= fill < 1):
        raise InvalidConfigError("fill", fill, "must be a number in [0, 1)")
    st = ClusterState(fat_tree_nodes(nodes))
    fill_with_placer(st, fill, seed=seed, strategy=strategy)
    snap = st.snapshot()
    placer = Placer(strategy)

    def gang(name: str) -> Job:
        return job(name, gpus=8, replicas=replicas, nics=8, tier=Tier.SPINE, required=True)

    _warm_up(strategy, gang("warm-up"), snap)
    runs: list[tuple[bool, float]] = []  # (placed, ms) of each gang
    for g in range(gangs):
        j = gang(f"gang{g}")
        with snap.transaction():
            t0 = time.perf_counter()
            res = placer.place(j, snap)
            runs.append((res.ok, (time.perf_counter() - t0) * 1000))
    snap.check_invariants()
    timed = runs[1:] or runs  # (the first builds the placer's caches for the cluster)
    lat = {ok: [ms for placed, ms in timed if placed is ok] for ok in (True, False)}
    ms, p99 = _median_p99(lat[True], 3)
    return {
        "bench": "gang",
        "strategy": strategy,
        "nodes": nodes,
        "replicas": replicas,
        "gangs": gangs,
        "placed_gangs": sum(placed for placed, _ms in runs),
        "failed_gangs": sum(not placed for placed, _ms in runs),
        "fill": fill,
        "ms_per_gang": ms,
        "p99_ms": p99,
        "ms_per_failed_gang": _median_p99(lat[False], 3)[0],
    }


def _warm_up(strategy: str, j: Job, snap: Snapshot) -> None:
    """Place ``j`` untimed on ``snap``, rolled back, by a placer of ``strategy`` of its own
    (the benchmark's placer draws its seeded ties as without it): the first call's one-off
    costs, paid before the timing."""
    with snap.transaction():
        Placer(strategy).place(j, snap)


def _median_p99(values: list[float], digits: int) -> tuple[float | None, float | None]:
    """The median and p99 of ``values`` rounded to ``digits`` (None, None: no values)."""
    if not values:
        return None, None
    return round(statistics.median(values), digits), round(percentile(values, 99), digits)
