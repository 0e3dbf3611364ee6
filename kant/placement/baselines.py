"""Baseline placement policies of the FGD paper, for packing experiments (``kant packing``).

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC '23, compare FGD with five heuristics. Each is written here as a
:class:`~kant.placement.strategies.BaseStrategy` from its definition in the paper and in the
reference simulator's score plugins (``hkust-adsl/kubernetes-scheduler-simulator``), whose
scores are integers on the kube-scheduler scale 0..100 (higher wins):

``random``         a uniformly random feasible node; a shared pod takes a random GPU that fits.
``firstfit``       the first feasible node in node (slot) order (not in the paper; a floor).
``bestfit``        the node with the least left after placement:
                   ``100 * (1 - (cpu_left / 128 cores + gpu_left / 8 GPUs) / 2)``.
``dotprod``        Tetris' alignment, as the reference uses it: the node whose free
                   (CPU, GPU) vector has the *smallest* dot product with the request
                   (both divided by 128 cores and 8 GPUs).
``gpuclustering``  put pods of one kind (a GPU share, or k whole GPUs) together: nodes that
                   hold only that kind > nodes that also hold it > nodes without GPU pods >
                   others, each band ordered by how much GPU is in use.
``gpupacking``     shared GPUs first (fullest first), then free GPUs on a used node (fewest
                   first), then a wholly free node (the smaller the better).
``fgd``            fragmentation gradient descent: the node (and, for a shared pod, the GPU)
                   whose expected fragmented GPU amount for the *target workload* grows least
                   (:mod:`kant.metrics.fragmentation`): ``100 * sigmoid(-growth / 1000)``.
``fgdpp``          kant's refinement of FGD (see :class:`FGDPlusPlus` and ``docs/packing.md``).

All but ``random`` and ``firstfit`` choose a shared pod's GPU "best fit" (the fullest GPU that
still fits, lowest index on ties), as the reference does; FGD chooses it by fragmentation.

**Ties.** Integer scores tie often. ``ties="random"`` (the default) breaks them with a seeded
random draw, like kube-scheduler's ``selectHost``, which the reference runs; ``ties="first"``
takes the lowest slot. Either way a run is deterministic for a given ``seed``.

**Target workload.** FGD (and ``fgdpp``) need the workload they defragment for: a sequence of
:class:`~kant.metrics.fragmentation.TaskClass` (or a compiled one), passed as ``workload=``.
Scores are cached per (task class, node) and recomputed only for nodes whose free resources
changed since (the snapshot rows are compared, so any change, committed or rolled back, is
seen): placing a pod costs O(changed nodes x classes x GPUs) numpy work after warm-up.

These strategies are flat (no NodeNetGroup search, no topology default).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from kant.errors import ValidationError
from kant.metrics.fragmentation import (
    CompiledWorkload,
    TaskClassLike,
    compile_workload,
    node_fragmentation,
)
from kant.model import MILLI
from kant.placement.context import FloatArray, IntArray, PodContext
from kant.placement.strategies import BaseStrategy, register_strategy
from kant.state import Snapshot

MAX_SPEC_CPU: Final = 128_000
"""CPU milli of the largest node the reference normalises by (128 cores)."""
MAX_SPEC_GPU: Final = 8 * MILLI
"""GPU milli of the largest node the reference normalises by (8 GPUs)."""
MAX_SCORE: Final = 100

TIES: Final = ("order", "random", "first")

PodKey = tuple[int, int, int, int, tuple[str, ...]]


def pod_key(ctx: PodContext) -> PodKey:
    """What a node's score depends on: (whole GPUs, share milli, CPU, memory, models)."""
    r = ctx.req
    return (r.gpus, r.milli, r.cpu, r.mem, tuple(sorted(ctx.role.gpu_models)))


# --------------------------------------------------------------------------- base


class PackingBaseline(BaseStrategy):
    """A baseline with integer scores (0..100) and a tie rule.

    Subclasses implement :meth:`points`; :meth:`score` adds the tie-break: a seeded uniform
    draw in [0, 0.5) (``ties="random"``: a uniformly random node among the best) or nothing
    (``ties="first"``: the lowest slot, the Placer's rule).
    """

    name: ClassVar[str] = "baseline"
    wants_workload: ClassVar[bool] = False

    def __init__(self, *, seed: int = 0, ties: str = "order", workload: Any = None) -> None:
        if ties not in TIES:
            raise ValidationError("ties", ties, f"must be one of {list(TIES)}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValidationError("seed", seed, "must be an int")
        self.seed = seed
        self.ties = ties
        self.rng = np.random.default_rng(seed)
        self._order = np.zeros(0, dtype=np.float64)
        del workload  # only the workload-aware policies use it

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        """Integer-valued scores, higher is better."""
        raise NotImplementedError

    def score(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        pts = self.points(ctx, slots)
        if slots.shape[0] <= 1 or self.ties == "first":
            return pts
        if self.ties == "random":
            return pts + 0.5 * self.rng.random(slots.shape[0])
        return pts + 0.5 * self.node_order(ctx.snap)[slots]

    def node_order(self, snap: Snapshot) -> FloatArray:
        """A fixed random priority in [0, 1) per slot, drawn once from the seed (higher first)."""
        n = snap.num_slots
        if self._order.shape[0] < n:
            grown = np.random.default_rng([self.seed, n]).permutation(n) / n
            self._order = grown.astype(np.float64)
        return self._order

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed}, ties={self.ties!r})"


def _gpu_left(ctx: PodContext, slots: IntArray) -> IntArray:
    return ctx.snap.cols.free_milli[slots]


class RandomPlacement(PackingBaseline):
    """A uniformly random feasible node; a shared pod takes a uniformly random GPU that fits
    (the reference's ``random`` GPU selection)."""

    name = "random"

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        return np.zeros(slots.shape[0], dtype=np.float64)

    def score(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        return np.asarray(self.rng.random(slots.shape[0]), dtype=np.float64)

    def share_device(self, ctx: PodContext, slot: int) -> int:
        cols = ctx.snap.cols
        row = cols.gpu_free[slot, : int(cols.gpus[slot])]
        fits = np.flatnonzero(row >= ctx.req.milli)
        return int(fits[int(self.rng.integers(fits.shape[0]))])


class FirstFit(PackingBaseline):
    """The first feasible node in slot order (ties are the whole point: always the first)."""

    name = "firstfit"

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        return np.zeros(slots.shape[0], dtype=np.float64)

    def score(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        return self.points(ctx, slots)


class BestFit(PackingBaseline):
    """The node with the least left after placement: CPU and GPU left, each divided by the
    largest node's capacity (128 cores, 8 GPUs), averaged, on the 0..100 scale."""

    name = "bestfit"

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        cols = ctx.snap.cols
        req = ctx.req
        left = 0.5 * (cols.cpu_free[slots] - req.cpu) / MAX_SPEC_CPU
        left = left + 0.5 * (_gpu_left(ctx, slots) - req.total_milli) / MAX_SPEC_GPU
        return np.trunc((1.0 - left) * MAX_SCORE)


class DotProd(PackingBaseline):
    """Tetris' dot product of the node's free (CPU, GPU) and the request, both divided by the
    largest node's capacity; the reference (and FGD's evaluation) prefers the *smallest*
    product: ``100 * (1 - dot / 2)``."""

    name = "dotprod"

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        cols = ctx.snap.cols
        req = ctx.req
        dot = (cols.cpu_free[slots] / MAX_SPEC_CPU) * (req.cpu / MAX_SPEC_CPU)
        dot = dot + (_gpu_left(ctx, slots) / MAX_SPEC_GPU) * (req.total_milli / MAX_SPEC_GPU)
        return np.trunc((1.0 - dot / 2.0) * MAX_SCORE)


class GpuPacking(PackingBaseline):
    """Use shared GPUs first, then free GPUs of used nodes, then free nodes.

    Bands (reference scale): a shared pod that fits on a partly used GPU scores
    ``100 - floor(free% of that GPU / 10)`` (>= 50; the fullest such GPU is taken); a pod
    that needs ``k`` wholly free GPUs of a partly used node scores ``max(50 - k, 33)``; on a
    node whose GPUs are all free, ``max(33 - gpus, gpus)``. CPU-only pods score 0 (random).
    """

    name = "gpupacking"

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        req = ctx.req
        if not req.needs_gpu:
            return np.zeros(slots.shape[0], dtype=np.float64)
        cols = ctx.snap.cols
        free = cols.free_gpus[slots]
        used_node = max(MAX_SCORE // 2 - max(req.gpus, 1), MAX_SCORE // 3)
        out = np.full(slots.shape[0], float(used_node))
        if req.milli:
            rows = cols.gpu_free[slots]
            shared = (rows >= req.milli) & (rows < MILLI)
            pct = np.where(shared, rows, MILLI).min(axis=1) * 100 // MILLI
            on_shared = np.maximum(MAX_SCORE - pct // 10, MAX_SCORE // 2)
            out = np.where(shared.any(axis=1), on_shared, out)
        free_node = np.maximum(MAX_SCORE // 3 - free, free)
        return np.where(free == cols.gpus[slots], free_node, out)


_SHARE_KIND: Final = 0


class GpuClustering(PackingBaseline):
    """Keep pods of one kind together (kinds: a GPU share; k whole GPUs).

    Bands (reference scale, each plus ``25 * GPU-in-use / 8 GPUs``): 75 for a node whose GPU
    pods are all of the pod's kind, 50 for a node that holds that kind among others, 25 for a
    node without GPU pods, 0 otherwise. CPU-only pods score 0 (random).

    The kinds on a node come from the pods the cluster state reports there (cached per node
    generation); pods placed tentatively in the same snapshot transaction are not seen.
    """

    name = "gpuclustering"

    def __init__(self, *, seed: int = 0, ties: str = "order", workload: Any = None) -> None:
        super().__init__(seed=seed, ties=ties, workload=workload)
        self._state_id = -1
        self._gen = np.zeros(0, dtype=np.int64)
        self._kinds = np.zeros(0, dtype=np.uint64)

    def kinds(self, snap: Snapshot, slots: IntArray) -> npt.NDArray[np.uint64]:
        """Bit mask of pod kinds per slot: bit 0 a GPU share, bit k (<= 63) k whole GPUs."""
        state = snap.state
        gen = state.node_generation
        n = state.num_slots
        if self._state_id != id(state) or self._gen.shape[0] < n:
            self._state_id = id(state)
            self._gen = np.full(max(n, 1), -1, dtype=np.int64)
            self._kinds = np.zeros(max(n, 1), dtype=np.uint64)
        stale = slots[self._gen[slots] != gen[slots]]
        for s in stale.tolist():
            mask = 0
            for pod in state.pods_on(state.name_of(s)):
                b = state.binding(pod)
                if not b.gpus:
                    continue
                bit = _SHARE_KIND if b.gpu_milli < MILLI else min(len(b.gpus), 63)
                mask |= 1 << bit
            self._kinds[s] = mask
            self._gen[s] = gen[s]
        return self._kinds[slots]

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        req = ctx.req
        if not req.needs_gpu:
            return np.zeros(slots.shape[0], dtype=np.float64)
        bit = np.uint64(1 << (_SHARE_KIND if req.milli else min(req.gpus, 63)))
        kinds = self.kinds(ctx.snap, slots)
        used = MAX_SPEC_GPU - _gpu_left(ctx, slots)
        base = np.fix(MAX_SCORE // 4 * used / MAX_SPEC_GPU)
        band = np.where(
            (kinds & bit) != 0,
            np.where(kinds == bit, 75, 50),
            np.where(kinds == 0, 25, 0),
        )
        return (band + base).astype(np.float64)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- FGD


class RowVersions:
    """Which node rows changed between calls: compares the snapshot's free GPU, CPU and
    memory columns with a private copy (O(nodes x GPUs) numpy per call). A new snapshot, or
    nodes coming or going, starts a new *epoch* (every cache entry is stale)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.clock = 0
        self._key: tuple[int, int, int, int] = (-1, -1, -1, -1)
        self.version = np.zeros(0, dtype=np.int64)
        self._g = np.zeros((0, 0), dtype=np.int64)
        self._c = np.zeros(0, dtype=np.int64)
        self._m = np.zeros(0, dtype=np.int64)

    def sync(self, snap: Snapshot) -> IntArray:
        cols = snap.cols
        n = snap.num_slots
        key = (id(snap), n, cols.width, snap.state._membership_version)
        g = cols.gpu_free[:n]
        if key != self._key:
            self._key = key
            self.epoch += 1
            self.version = np.zeros(n, dtype=np.int64)
            self._g = g.copy()
            self._c = cols.cpu_free[:n].copy()
            self._m = cols.mem_free[:n].copy()
            return self.version
        changed = (g != self._g).any(axis=1)
        changed |= cols.cpu_free[:n] != self._c
        changed |= cols.mem_free[:n] != self._m
        idx = np.flatnonzero(changed)
        if idx.shape[0]:
            self.clock += 1
            self.version[idx] = self.clock
            self._g[idx] = g[idx]
            self._c[idx] = cols.cpu_free[idx]
            self._m[idx] = cols.mem_free[idx]
        return self.version


class _Cache:
    """Per-node values computed at a row version (``at == -1``: never)."""

    __slots__ = ("at", "epoch", "values")

    def __init__(self, n: int, epoch: int) -> None:
        self.epoch = epoch
        self.values = np.zeros(n, dtype=np.float64)
        self.at = np.full(n, -1, dtype=np.int64)


_DEDUP_MIN: Final = 32
"""Batches of at least this many nodes are evaluated once per distinct node row."""


def alike_rows(snap: Snapshot, slots: IntArray) -> tuple[IntArray, IntArray]:
    """Group nodes whose free GPUs, CPU, memory and pool are identical: ``(first, inverse)``
    with ``slots[first]`` one node per group and ``inverse[i]`` the group of ``slots[i]``.
    O(n log n) (one lexsort)."""
    cols = snap.cols
    rows = np.column_stack(
        (cols.pool_id[slots], cols.cpu_free[slots], cols.mem_free[slots], cols.gpu_free[slots])
    )
    order = np.lexsort(rows.T[::-1])
    sorted_rows = rows[order]
    new = np.ones(order.shape[0], dtype=np.bool_)
    new[1:] = (sorted_rows[1:] != sorted_rows[:-1]).any(axis=1)
    group_sorted = np.cumsum(new) - 1
    inverse = np.empty_like(group_sorted)
    inverse[order] = group_sorted
    return order[new], inverse


def _sigmoid(x: FloatArray) -> FloatArray:
    return 1.0 / (1.0 + np.exp(-x))


class FGD(PackingBaseline):
    """Fragmentation gradient descent (Weng et al., ATC '23).

    For each feasible node, the growth of its expected fragmented GPU amount ``F_n(M)`` for
    the target workload ``M`` if the pod were placed there (:mod:`kant.metrics.fragmentation`;
    a shared pod tries every GPU that fits); the node, and GPU, with the least growth wins.
    Scores are the reference's ``int(100 * sigmoid(-growth / 1000))``, so growths within
    about 40 milli-GPU tie (broken by ``ties``); the GPU is the first with the best score.

    ``workload``: task classes (see :func:`kant.metrics.fragmentation.task_classes`), or a
    workload compiled for the cluster's pool names. Memory in task classes is honoured; give
    classes ``memory_mib=0`` to match the reference, which checks CPU only.
    """

    name = "fgd"
    wants_workload = True
    quantized: ClassVar[bool] = True

    def __init__(
        self,
        *,
        seed: int = 0,
        ties: str = "order",
        workload: Iterable[TaskClassLike] | CompiledWorkload | None = None,
    ) -> None:
        super().__init__(seed=seed, ties=ties)
        if workload is None:
            raise ValidationError(
                "workload", None, f"{self.name} needs the target workload (task classes)"
            )
        self._workload_in = workload if isinstance(workload, CompiledWorkload) else tuple(workload)
        self._compiled: CompiledWorkload | None = None
        self._compiled_for: tuple[str, ...] = ()
        self.rows = RowVersions()
        self._caches: dict[Any, _Cache] = {}

    # -- workload and fragmentation -------------------------------------------

    def workload(self, snap: Snapshot) -> CompiledWorkload:
        """The target workload compiled for the snapshot's pool (GPU model) ids."""
        names = tuple(snap.state.group_names("pool"))
        if self._compiled is None or self._compiled_for != names:
            self._compiled = compile_workload(self._workload_in, names)
            self._compiled_for = names
        return self._compiled

    def fragmentation(
        self, snap: Snapshot, gpu_free: IntArray, cpu: IntArray, mem: IntArray, pool: IntArray
    ) -> FloatArray:
        """``F_n(M)`` in milli for node rows (real or hypothetical)."""
        return node_fragmentation(gpu_free, cpu, mem, pool, self.workload(snap))

    def _cached(self, key: Any, ctx: PodContext, slots: IntArray, fill: Any) -> FloatArray:
        """``fill(stale_slots) -> values`` for slots whose rows changed since they were
        cached (row versions as of the last :meth:`RowVersions.sync`)."""
        version = self.rows.version
        c = self._caches.get(key)
        n = version.shape[0]
        if c is None or c.epoch != self.rows.epoch or c.values.shape[0] != n:
            c = self._caches[key] = _Cache(n, self.rows.epoch)
        stale = slots[c.at[slots] != version[slots]]
        if stale.shape[0] >= _DEDUP_MIN:
            first, inverse = alike_rows(ctx.snap, stale)
            c.values[stale] = fill(stale[first])[inverse]
            c.at[stale] = version[stale]
        elif stale.shape[0]:
            c.values[stale] = fill(stale)
            c.at[stale] = version[stale]
        return c.values[slots]

    def current(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        """``F_n(M)`` of the nodes as they are."""
        snap = ctx.snap
        cols = snap.cols

        def fill(s: IntArray) -> FloatArray:
            return self.fragmentation(
                snap, cols.gpu_free[s], cols.cpu_free[s], cols.mem_free[s], cols.pool_id[s]
            )

        return self._cached("current", ctx, slots, fill)

    def after(self, ctx: PodContext, slots: IntArray) -> tuple[FloatArray, IntArray]:
        """``F_n(M)`` after placing the pod on each node (for a shared pod: on each GPU,
        ``inf`` where it does not fit): float [len(slots), alternatives], and the GPU index
        of each alternative column (-1: whole GPUs or none)."""
        snap = ctx.snap
        cols = snap.cols
        req = ctx.req
        g = cols.gpu_free[slots].copy()
        cpu = cols.cpu_free[slots] - req.cpu
        mem = cols.mem_free[slots] - req.mem
        pool = cols.pool_id[slots]
        if req.milli:
            w = g.shape[1]
            alt = np.repeat(g[:, None, :], w, axis=1)  # [s, device, W]
            d = np.arange(w)
            alt[:, d, d] -= req.milli
            ok = alt[:, d, d] >= 0
            flat = self.fragmentation(
                snap,
                alt.reshape(-1, w),
                np.repeat(cpu, w),
                np.repeat(mem, w),
                np.repeat(pool, w),
            ).reshape(-1, w)
            return np.where(ok, flat, np.inf), d
        if req.gpus:
            whole = g == MILLI
            take = whole & (np.cumsum(whole, axis=1) <= req.gpus)
            g[take] = 0
        f = self.fragmentation(snap, g, cpu, mem, pool)
        return f[:, None], np.array([-1])

    def growth_points(self, growth: FloatArray) -> FloatArray:
        """Score of a fragmentation growth (milli): the reference's integer sigmoid."""
        return np.trunc(_sigmoid(-growth / 1000.0) * MAX_SCORE)

    def _node_points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        before = self.current(ctx, slots)
        after, _ = self.after(ctx, slots)
        pts = self.growth_points(after - before[:, None])
        return pts.max(axis=1)  # type: ignore[no-any-return]

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        self.rows.sync(ctx.snap)
        return self._cached(
            ("points", pod_key(ctx)), ctx, slots, lambda s: self._node_points(ctx, s)
        )

    def share_device(self, ctx: PodContext, slot: int) -> int:
        self.rows.sync(ctx.snap)
        s = np.array([slot], dtype=np.int64)
        before = self.current(ctx, s)
        after, devices = self.after(ctx, s)
        pts = self.growth_points(after[0] - before[0])
        return int(devices[int(np.argmax(pts))])


def refill_fragmentation(
    gpu_free: IntArray, cpu: IntArray, mem: IntArray, pool: IntArray, cw: CompiledWorkload
) -> FloatArray:
    """GPU capacity (milli) of each node row that repeated tasks could not use: for class
    ``m``, the free GPU milli minus what the most tasks of ``m`` the node can still take
    would hold (limited by per-GPU shares, whole free GPUs, CPU and memory); all of it for
    CPU-only classes and classes barred by GPU model. Weighted by popularity. O(rows x
    classes x GPUs)."""
    total = gpu_free.sum(axis=1).astype(np.float64)
    by_class = np.repeat(total[:, None], len(cw.classes), axis=1)
    gc = np.flatnonzero(cw.count > 0)
    if gc.shape[0] and gpu_free.shape[0]:
        need, count = cw.need[gc], cw.count[gc]
        per_gpu = (gpu_free[:, None, :] // need[None, :, None]).sum(axis=2)
        whole = (gpu_free == MILLI).sum(axis=1)[:, None] // count[None, :]
        tasks = np.where((need < MILLI)[None, :], per_gpu, whole)
        for req, have in ((cw.cpu[gc], cpu), (cw.mem[gc], mem)):
            limit = have[:, None] // np.maximum(req, 1)[None, :]
            tasks = np.where((req > 0)[None, :], np.minimum(tasks, limit), tasks)
        tasks = tasks * cw.model_ok[gc][:, pool].T
        by_class[:, gc] = total[:, None] - tasks * (need * count)[None, :]
    return by_class @ cw.weight


class FGDPlusPlus(FGD):
    """FGD, with its ties broken by how much GPU capacity repeated tasks could not use.

    Primary: FGD's integer score (growth of expected fragmentation, :class:`FGD`). Among
    the nodes (and GPUs) with the best primary score, the secondary score is the same integer
    sigmoid of the growth of :func:`refill_fragmentation`, which also sees a node's CPU and
    memory running short for *several* more tasks and a GPU share that fits one task where
    it fitted two -- erosion FGD only notices once not even one task fits. Remaining ties:
    ``ties``. See ``docs/packing.md`` for the measurements.
    """

    name = "fgdpp"

    def secondary(
        self, snap: Snapshot, gpu_free: IntArray, cpu: IntArray, mem: IntArray, pool: IntArray
    ) -> FloatArray:
        cw = self.workload(snap)
        if gpu_free.shape[0] >= _DEDUP_MIN:
            rows = np.column_stack((pool, cpu, mem, gpu_free))
            uniq, inverse = _unique_rows(rows)
            values = refill_fragmentation(uniq[:, 3:], uniq[:, 1], uniq[:, 2], uniq[:, 0], cw)
            return values[inverse]
        return refill_fragmentation(gpu_free, cpu, mem, pool, cw)

    def _lexicographic(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        """[slots, alternatives] of ``1000 * primary + secondary`` (-inf: does not fit)."""
        snap = ctx.snap
        cols = snap.cols
        req = ctx.req
        before = self.current(ctx, slots)
        after, _ = self.after(ctx, slots)
        primary = self.growth_points(after - before[:, None])
        g = cols.gpu_free[slots]
        cpu, mem, pool = cols.cpu_free[slots], cols.mem_free[slots], cols.pool_id[slots]
        base = self.secondary(snap, g, cpu, mem, pool)
        if req.milli:
            w = g.shape[1]
            d = np.arange(w)
            alt = np.repeat(g[:, None, :], w, axis=1)
            alt[:, d, d] -= req.milli
            fits = alt[:, d, d] >= 0
            sec_after = self.secondary(
                snap,
                alt.reshape(-1, w),
                np.repeat(cpu - req.cpu, w),
                np.repeat(mem - req.mem, w),
                np.repeat(pool, w),
            ).reshape(-1, w)
            sec_after = np.where(fits, sec_after, np.inf)
        else:
            g2 = g.copy()
            if req.gpus:
                whole = g2 == MILLI
                g2[whole & (np.cumsum(whole, axis=1) <= req.gpus)] = 0
            sec_after = self.secondary(snap, g2, cpu - req.cpu, mem - req.mem, pool)[:, None]
        secondary = self.growth_points(sec_after - base[:, None])
        return np.where(np.isfinite(after), primary * _LEX + secondary, -np.inf)

    def _tie_points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        """Secondary score of each node among its GPUs with the node's best primary score."""
        lex = self._lexicographic(ctx, slots)
        return lex.max(axis=1) % _LEX  # type: ignore[no-any-return]

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        primary = super().points(ctx, slots)
        out = primary * _LEX
        if slots.shape[0] > 1:
            top = primary == primary.max()
            key = ("tie", pod_key(ctx))
            out[top] += self._cached(key, ctx, slots[top], lambda s: self._tie_points(ctx, s))
        return out

    def share_device(self, ctx: PodContext, slot: int) -> int:
        self.rows.sync(ctx.snap)
        s = np.array([slot], dtype=np.int64)
        return int(np.argmax(self._lexicographic(ctx, s)[0]))


_LEX: Final = 1000.0
"""Primary-score multiplier of :class:`FGDPlusPlus` (secondary scores are 0..100)."""


def _unique_rows(rows: IntArray) -> tuple[IntArray, IntArray]:
    order = np.lexsort(rows.T[::-1])
    sorted_rows = rows[order]
    new = np.ones(order.shape[0], dtype=np.bool_)
    new[1:] = (sorted_rows[1:] != sorted_rows[:-1]).any(axis=1)
    group_sorted = np.cumsum(new) - 1
    inverse = np.empty_like(group_sorted)
    inverse[order] = group_sorted
    return sorted_rows[new], inverse


PACKING_STRATEGIES: Final[tuple[type[PackingBaseline], ...]] = (
    RandomPlacement,
    FirstFit,
    BestFit,
    DotProd,
    GpuClustering,
    GpuPacking,
    FGD,
    FGDPlusPlus,
)
"""The packing policies, in the paper's order then kant's; their factories take ``seed``,
``ties`` and ``workload`` keywords."""

for _cls in PACKING_STRATEGIES:
    register_strategy(_cls.name, _cls)
