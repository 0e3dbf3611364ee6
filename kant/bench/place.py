"""``kant bench place`` and ``kant bench gang``: Placer throughput and gang latency."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from kant.bench import check_counts, fat_tree_nodes, fill_with_placer, percentile
from kant.errors import InvalidConfigError, ValidationError
from kant.model import Tier, is_finite_number
from kant.placement import Placer
from kant.state import ClusterState
from kant.testing import job


def bench_place(
    nodes: int, pods: int, *, strategy: str = "ebinpack", mixed: bool = False, seed: int = 3
) -> dict[str, Any]:
    """Place ``pods`` one-pod jobs one at a time on an empty ``nodes``-node 8-GPU fat tree.

    Single-GPU pods, or (``mixed``) 1/2/4/8-GPU pods drawn uniformly. Each pod is one
    ``Placer.place`` call on the cycle's snapshot (the bindings accumulate in it). Raises
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
    jobs = [
        job(f"p{i}", gpus=int(g), cpu_milli=4000 * int(g), memory_mib=32768 * int(g), nics=0)
        for i, g in enumerate(sizes.tolist())
    ]
    lat: list[float] = []
    placed = 0
    with snap.transaction():
        t_all = time.perf_counter()
        for j in jobs:
            t0 = time.perf_counter()
            res = placer.place(j, snap)
            lat.append((time.perf_counter() - t0) * 1e6)
            placed += len(res.bindings)
        wall = time.perf_counter() - t_all
        snap.check_invariants()
    return {
        "bench": "place",
        "strategy": strategy,
        "nodes": nodes,
        "pods": pods,
        "mixed": mixed,
        "placed": placed,
        "pods_per_s": round(pods / wall, 1),
        "p50_us": round(statistics.median(lat), 1),
        "p99_us": round(percentile(lat, 99), 1),
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
    same partly filled cluster. InvalidConfigError for counts that are not ints of their
    least, or a ``fill`` outside [0, 1)."""
    check_counts(nodes=(nodes, 1), replicas=(replicas, 1), gangs=(gangs, 1), seed=(seed, 0))
    if not (is_finite_number(fill) and 0 <= fill < 1):
        raise InvalidConfigError("fill", fill, "must be a number in [0, 1)")
    st = ClusterState(fat_tree_nodes(nodes))
    fill_with_placer(st, fill, seed=seed, strategy=strategy)
    snap = st.snapshot()
    placer = Placer(strategy)
    lat: list[float] = []
    ok = 0
    for g in range(gangs):
        j = job(f"gang{g}", gpus=8, replicas=replicas, nics=8, tier=Tier.SPINE, required=True)
        with snap.transaction():
            t0 = time.perf_counter()
            res = placer.place(j, snap)
            lat.append((time.perf_counter() - t0) * 1000)
            ok += res.ok
    snap.check_invariants()
    return {
        "bench": "gang",
        "strategy": strategy,
        "nodes": nodes,
        "replicas": replicas,
        "gangs": gangs,
        "placed_gangs": ok,
        "fill": fill,
        "ms_per_gang": round(statistics.median(lat), 3),
        "p99_ms": round(percentile(lat, 99), 3),
    }
