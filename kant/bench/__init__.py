"""Benchmarks behind ``kant bench``: one module per benchmark in this package, each with
``bench_*`` functions that return a dict of figures (their command-line options are in
:mod:`kant.cli.bench`).

Timings use ``time.perf_counter`` around the operation only; set-up is excluded. Figures are
medians (and p99 where stated) over repeated runs with a fixed seed, so two runs on the same
machine measure the same work.
"""

from __future__ import annotations

import contextlib
import gc
import resource
import statistics
import time
from collections.abc import Iterator

import numpy as np

from kant.errors import InvalidConfigError
from kant.model import Binding, NodeSpec, PodId, is_int
from kant.state import ClusterState


def check_counts(**counts: tuple[object, int]) -> None:
    """Each ``name=(value, least)``: ``value`` must be an int >= ``least``, else
    InvalidConfigError naming it (the benchmarks' Python calls check what their options
    check: 0 repeats failed at the end in ``statistics``, a negative seed in NumPy)."""
    for name, (v, least) in counts.items():
        if not is_int(v) or v < least:
            raise InvalidConfigError(name, v, f"must be an int >= {least}")


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
        gpus: list[int] = []
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

    def change(self, name: str, target: float = 0.7) -> None:
        """Change one node: release one of its pods, or bind one, steering the cluster's
        allocation back towards ``target``."""
        st = self.state
        pods = st.pods_on(name)
        below = st.allocated_milli() < target * 1000 * st.total_gpus()
        if pods and not below:
            st.release(pods[int(self.rng.integers(len(pods)))])
        elif not self.bind_random(name) and pods:
            st.release(pods[0])


@contextlib.contextmanager
def settled(freeze: bool) -> Iterator[None]:
    """Collect garbage before the measured cycles and, with ``freeze``, move everything alive
    then (the cluster, the queue, the set-up's objects) out of the collector's reach for the
    measurement (``gc.freeze``), as a long-running scheduler process does after start-up:
    otherwise a full collection that walks the whole state lands inside a cycle now and then
    (measured at 12,500 nodes: about 450 ms, twice in 300 cycles)."""
    gc.collect()
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()


def speed_probe() -> float:
    """CPU milliseconds (this thread) of a fixed piece of pure-Python work: dictionary
    reads and writes and integer arithmetic, what a scheduling cycle is made of. Run next
    to each measured cycle (outside its timing), it says how fast the machine was then: on
    a shared machine the same work takes up to 1.7x longer for tens of seconds at a time,
    which a ratio of two parts of one run would otherwise read as the code slowing down
    (see :func:`calibrated_ratio`). It allocates one dictionary and no other object the
    garbage collector tracks, so it triggers no collection: what the process itself
    spends more on as it runs (a collector walking more objects) stays in the cycle's time
    and out of the probe's. About 1.5 ms."""
    c0 = time.thread_time()
    seen: dict[int, int] = {}
    acc = 0
    for i in range(6000):
        k = (i * 7919) % 509
        seen[k] = seen.get(k, 0) + (i ^ k)
        acc = (acc * 31 + k) & 0xFFFFFFFF
    return (time.thread_time() - c0) * 1000


class CollectorClock:
    """While entered: the wall time the garbage collector spends in its collections
    (``ms``, from each collection's start callback to its stop) and their number per
    generation (``collections``)."""

    def __init__(self) -> None:
        self.ms = 0.0
        self.collections = [0, 0, 0]
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.ms += (time.perf_counter() - self._start) * 1000
            self.collections[info["generation"]] += 1

    def __enter__(self) -> CollectorClock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def calibrated_ratio(
    later: list[float], later_probe: list[float], earlier: list[float], earlier_probe: list[float]
) -> float:
    """How much more a cycle of ``later`` costs than one of ``earlier`` on a machine of
    the same speed: the median of each cycle's time over its :func:`speed_probe` (measured
    next to it), later over earlier. A machine twice as slow in the later part doubles
    both a cycle and its probe, and leaves this ratio as it was."""

    def per_probe(ms: list[float], probe: list[float]) -> float:
        return statistics.median(m / p for m, p in zip(ms, probe, strict=True))

    return per_probe(later, later_probe) / per_probe(earlier, earlier_probe)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100, linear interpolation) of ``values``; numpy raises
    IndexError on an empty list."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def fill_with_placer(
    state: ClusterState, target: float, *, seed: int, strategy: str = "ebinpack"
) -> int:
    """Allocate about ``target`` of the GPUs the way a kant-run cluster fills up: a mix of
    1-8 GPU pods and 2-16 node gangs placed by the Placer and bound in ``state``.
    Returns the number of jobs placed."""
    from kant.placement import Placer
    from kant.testing import job

    rng = np.random.default_rng(seed)
    placer = Placer(strategy)
    total = state.total_gpus() * 1000
    n = 0
    misses = 0
    while state.allocated_milli() < target * total and misses < 50:
        snap = state.snapshot()
        if rng.random() < 0.15:
            j = job(f"fill{n}", gpus=8, replicas=int(rng.integers(2, 17)), nics=8)
        else:
            j = job(f"fill{n}", gpus=int(rng.choice([1, 2, 4, 8])), cpu_milli=4000)
        res = placer.place(j, snap)
        for b in res.bindings:
            state.bind(b)
        misses = 0 if res.ok else misses + 1
        n += 1
    state.snapshot()
    return n
