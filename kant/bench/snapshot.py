"""``kant bench snapshot``: incremental snapshot refresh against a naive full deep copy."""

from __future__ import annotations

import copy
import gc
import statistics
import time
from typing import Any

import numpy as np

from kant.bench import _Occupier, check_counts, current_rss_mib, fat_tree_nodes, percentile, rss_mib
from kant.errors import InvalidConfigError
from kant.state import ClusterState


def bench_snapshot(
    nodes: int, changed: int, *, repeats: int = 50, copy_repeats: int = 3, seed: int = 7
) -> dict[str, Any]:
    """Median time to refresh the snapshot after ``changed`` node changes, against a naive
    ``copy.deepcopy`` of the same state, on an ``nodes``-node 8-GPU fat tree ~70% allocated.
    InvalidConfigError when ``changed`` exceeds ``nodes`` (each change is a distinct node),
    and for counts that are not ints of their least."""
    check_counts(nodes=(nodes, 1), changed=(changed, 1), repeats=(repeats, 1),
                 copy_repeats=(copy_repeats, 1), seed=(seed, 0))  # fmt: skip
    if changed > nodes:
        raise InvalidConfigError(
            "changed", changed, f"at most the number of nodes ({nodes}): each is a distinct node"
        )
    gc.collect()
    rss0 = current_rss_mib()
    st = ClusterState(fat_tree_nodes(nodes))
    occ = _Occupier(st, seed)
    occ.fill(0.7)
    gc.collect()
    rss_state = current_rss_mib()
    st.snapshot()  # the first snapshot is a full build
    names = [n.name for n in st.nodes()]
    rng = np.random.default_rng(seed + 1)
    inc: list[float] = []
    for _ in range(repeats):
        for i in rng.choice(len(names), size=changed, replace=False).tolist():
            occ.change(names[i])
        t0 = time.perf_counter()
        st.snapshot()
        inc.append((time.perf_counter() - t0) * 1000)
    full: list[float] = []
    for _ in range(copy_repeats):
        t0 = time.perf_counter()
        clone = copy.deepcopy(st)
        full.append((time.perf_counter() - t0) * 1000)
        del clone
    inc_ms = statistics.median(inc)
    full_ms = statistics.median(full)
    return {
        "bench": "snapshot",
        "nodes": nodes,
        "gpus": st.total_gpus(),
        "changed": changed,
        "pods": st.num_pods,
        "allocated_ratio": round(st.allocated_milli() / (1000 * st.total_gpus()), 3),
        "incremental_ms": round(inc_ms, 4),
        "incremental_p99_ms": round(percentile(inc, 99), 4),
        "full_copy_ms": round(full_ms, 2),
        "speedup": round(full_ms / inc_ms, 1),
        "state_rss_mib": round(rss_state - rss0, 1),
        "peak_rss_mib": round(rss_mib(), 1),
    }
