"""Benchmarks behind ``kant bench``. Each returns a dict of figures (also printed as JSON).

Timings use ``time.perf_counter`` around the operation only; set-up is excluded. Figures are
medians (and p99 where stated) over repeated runs with a fixed seed, so two runs on the same
machine measure the same work.
"""

from __future__ import annotations

import copy
import gc
import resource
import statistics
import time
from typing import Any

import numpy as np

from kant.model import Binding, NodeSpec, PodId
from kant.state import ClusterState


def rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mib() -> float:
    """Current resident set size in MiB (``/proc/self/statm``; falls back to the peak)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:
        return rss_mib()


def fat_tree_nodes(n_nodes: int, *, gpus: int = 8, nodes_per_leaf: int = 32) -> list[NodeSpec]:
    """An ``n_nodes`` 8-GPU fat tree (DGX-like nodes), via :mod:`kant.topology`."""
    from kant.topology import fat_tree_for_nodes

    del gpus  # the DGX template fixes 8 GPUs per node
    return list(fat_tree_for_nodes(n_nodes, nodes_per_leaf=nodes_per_leaf).nodes)


class _Occupier:
    """Binds and releases pods of 1/2/4/8 GPUs at random, deterministically (seeded)."""

    def __init__(self, state: ClusterState, seed: int) -> None:
        self.state = state
        self.rng = np.random.default_rng(seed)
        self.seq = 0

    def bind_random(self, name: str) -> bool:
        st = self.state
        slot = st.slot_of(name)
        free = int(st.columns.free_mask[slot])
        nfree = free.bit_count()
        if nfree == 0:
            return False
        sizes = [s for s in (1, 2, 4, 8) if s <= nfree]
        k = int(self.rng.choice(sizes))
        gpus = []
        m = free
        while len(gpus) < k:
            low = m & -m
            gpus.append(low.bit_length() - 1)
            m ^= low
        spec = st.node(name)
        nic = (gpus[0] // 2,) if spec.rdma_nics else ()
        nic_free = int(st.columns.nic_mask[slot])
        if nic and not nic_free >> nic[0] & 1:
            nic = ()
        self.seq += 1
        st.bind(
            Binding(
                pod=PodId(job=f"b{self.seq}", role="w", index=0),
                node=name,
                gpus=tuple(gpus),
                nics=nic,
                cpu_milli=1000 * k,
                memory_mib=8192 * k,
            )
        )
        return True

    def fill(self, target: float) -> None:
        st = self.state
        names = [n.name for n in st.nodes()]
        total = st.total_gpus()
        used = 0
        order = self.rng.permutation(len(names))
        i = 0
        while used < target * total and i < 50 * len(names):
            name = names[order[i % len(names)]]
            before = int(st.columns.free_gpus[st.slot_of(name)])
            if self.bind_random(name):
                used += before - int(st.columns.free_gpus[st.slot_of(name)])
            i += 1

    def change(self, name: str) -> None:
        pods = self.state.pods_on(name)
        if pods and self.rng.random() < 0.5:
            self.state.release(pods[int(self.rng.integers(len(pods)))])
        elif not self.bind_random(name) and pods:
            self.state.release(pods[0])


def bench_snapshot(
    nodes: int, changed: int, *, repeats: int = 50, copy_repeats: int = 3, seed: int = 7
) -> dict[str, Any]:
    """Median time to refresh the snapshot after ``changed`` node changes, against a naive
    ``copy.deepcopy`` of the same state, on an ``nodes``-node 8-GPU fat tree ~70% allocated."""
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
        "incremental_p99_ms": round(float(np.percentile(inc, 99)), 4),
        "full_copy_ms": round(full_ms, 2),
        "speedup": round(full_ms / inc_ms, 1),
        "state_rss_mib": round(rss_state - rss0, 1),
        "peak_rss_mib": round(rss_mib(), 1),
    }
