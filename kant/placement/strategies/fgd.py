"""FGD and kant's FGD++ (``fgd``, ``fgdpp``): placement by the growth of expected GPU
fragmentation for a target workload (Weng et al., USENIX ATC '23; ``docs/packing.md``).

**Target workload.** Both need the workload they defragment for: a sequence of
:class:`~kant.placement.fragmentation.TaskClass` (or a compiled one), passed as ``workload=``.
Scores are cached per (task class, node) and recomputed only for nodes whose free resources
changed since (:class:`~kant.placement.score_cache.ScoreCache`: the snapshot rows are
compared, so any change, committed or rolled back, is seen): placing a pod costs O(changed
nodes x classes x GPUs) numpy work after warm-up.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, ClassVar, Final

import attrs
import numpy as np

from kant.contracts import PodView
from kant.errors import ValidationError
from kant.model import MILLI
from kant.placement.context import FloatArray, IntArray, PodRequest
from kant.placement.fragmentation import (
    CompiledWorkload,
    TaskClassLike,
    WorkloadLike,
    compile_workload,
    fragmentation_target,
    node_fragmentation_rows,
)
from kant.placement.score_cache import DEDUP_MIN, Alternatives, ScoreCache, row_groups
from kant.placement.strategies.baselines import MAX_SCORE, PackingBaseline
from kant.state import Snapshot

PodKey = tuple[int, int, int, int, tuple[str, ...]]


def pod_key(ctx: PodView) -> PodKey:
    """What a node's score depends on: (whole GPUs, share milli, CPU, memory, models)."""
    r = ctx.req
    return (r.gpus, r.milli, r.cpu, r.mem, tuple(sorted(ctx.role.gpu_models)))


def _sigmoid(x: FloatArray) -> FloatArray:
    return 1.0 / (1.0 + np.exp(-x))


class FGD(PackingBaseline):
    """Fragmentation gradient descent (Weng et al., ATC '23).

    For each feasible node, the growth of its expected fragmented GPU amount ``F_n(M)`` for
    the target workload ``M`` if the pod were placed there (:mod:`kant.placement.fragmentation`;
    a shared pod tries every GPU that fits); the node, and GPU, with the least growth wins.
    Scores are the reference's ``int(100 * sigmoid(-growth / 1000))``, so growths within
    about 40 milli-GPU tie (broken by ``ties``); the GPU is the first with the best score.

    ``workload``: the target workload, in any form :func:`fragmentation_target` takes: the
    jobs the run will see (their task classes, :func:`workload_from_jobs`), task classes
    (:func:`kant.placement.fragmentation.task_classes`), a workload compiled for the
    cluster's pool names, or a :class:`FragmentationTarget`. Registered with ``uses=("seed",
    "workload")``: built from a :class:`~kant.registry.BuildContext`, it takes the context's
    seed and workload. Memory in task classes is honoured; give classes ``memory_mib=0`` to
    match the reference, which checks CPU only.
    """

    name = "fgd"
    quantized: ClassVar[bool] = True

    def __init__(
        self,
        *,
        seed: int = 0,
        ties: str = "order",
        workload: WorkloadLike | None = None,
    ) -> None:
        super().__init__(seed=seed, ties=ties)
        target = fragmentation_target(workload)
        if target is None:
            raise ValidationError(
                "workload", None, f"{self.name} needs the target workload (task classes)"
            )
        self.target = target
        self._workload_in = target.classes
        self._compiled: CompiledWorkload | None = None
        self._compiled_for: tuple[str, ...] = ()
        self.cache = ScoreCache()

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
        """``F_n(M)`` in milli for node rows (real or hypothetical; int64 arrays)."""
        return node_fragmentation_rows(gpu_free, cpu, mem, pool, self.workload(snap))

    def alternatives(self, req: PodRequest, g: IntArray) -> Alternatives:
        """Where the pod could go on node rows ``g`` (free milli per GPU): one hypothetical
        row per alternative worth evaluating (see :class:`Alternatives`)."""
        n, w = g.shape
        if req.milli:
            d = np.arange(w)
            ok = g >= req.milli
            # node scores are symmetric in a node's GPUs: GPUs with the same free milli give
            # the same result, so evaluate the first GPU of each free value only
            first_equal = (g[:, :, None] == g[:, None, :]).argmax(axis=2)  # [n, device]
            rows, cols = np.nonzero(ok & (first_equal == d[None, :]))
            alt = g[rows]
            alt[np.arange(rows.shape[0]), cols] -= req.milli
            return Alternatives(g=alt, row=rows, col=cols, width=w, same=first_equal, ok=ok)
        alt = g.copy()
        if req.gpus:
            whole = alt == MILLI
            alt[whole & (np.cumsum(whole, axis=1) <= req.gpus)] = 0
        rows = np.arange(n)
        return Alternatives(g=alt, row=rows, col=np.zeros(n, dtype=np.int64), width=1)

    def growth_points(self, growth: FloatArray) -> FloatArray:
        """Score of a fragmentation growth (milli): the reference's integer sigmoid.

        The growth is rounded to 1e-6 milli first: fragmentation is a weighted sum computed
        by a matrix product whose last bits depend on the batch a row is evaluated in, and
        a growth that is exactly 0 must not score 49 instead of 50 because of them."""
        return np.trunc(_sigmoid(-np.round(growth, 6) / 1000.0) * MAX_SCORE)

    def _primary(self, ctx: PodView, s: IntArray) -> tuple[FloatArray, Alternatives]:
        """FGD scores of node slots ``s`` per alternative [len(s), width] (-1 where the pod
        does not fit) and the alternatives. The rows as they are and as they would be are
        evaluated together, in one batch."""
        cols = ctx.snap.cols
        alt = self.alternatives(ctx.req, cols.gpu_free[s])
        frag = self.fragmentation(ctx.snap, *alt.before_after(cols, s, ctx.req))
        n = s.shape[0]
        return alt.scatter(self.growth_points(frag[n:] - frag[:n][alt.row]), -1.0), alt

    def device_points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """Scores [len(slots), alternatives + 1]: per GPU for a shared pod (-1 where it does
        not fit), one column otherwise; the last column is the row's best. Cached per (pod
        class, node row)."""

        def fill(s: IntArray) -> FloatArray:
            pts, _ = self._primary(ctx, s)
            return np.column_stack((pts, pts.max(axis=1)))

        width = ctx.snap.cols.width + 1 if ctx.req.milli else 2
        return self.cache.get(("device", pod_key(ctx)), ctx.snap, slots, fill, width)

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """The best FGD score of each slot over its alternatives (cached per pod class and
        node row: O(changed rows x classes x GPUs) numpy after warm-up)."""
        self.cache.sync(ctx.snap)
        return self.device_points(ctx, slots)[:, -1]

    def share_device(self, ctx: PodView, slot: int) -> int:
        """The GPU with the best FGD score on node ``slot`` (lowest index on ties)."""
        self.cache.sync(ctx.snap)
        return int(np.argmax(self.device_points(ctx, np.array([slot], dtype=np.int64))[0, :-1]))


def refill_fragmentation(
    gpu_free: IntArray, cpu: IntArray, mem: IntArray, pool: IntArray, cw: CompiledWorkload
) -> FloatArray:
    """GPU capacity (milli) of each node row that repeated tasks could not use: for class
    ``m``, the free GPU milli minus what the most tasks of ``m`` the node can still take
    would hold (limited by per-GPU shares, whole free GPUs, CPU and memory); all of it for
    CPU-only classes and classes barred by GPU model. Weighted by popularity. O(rows x
    classes + rows x share sizes x GPUs)."""
    return RefillModel(cw).evaluate(gpu_free, cpu, mem, pool)


class RefillModel:
    """:func:`refill_fragmentation` for one compiled workload, its per-class arrays
    prepared once."""

    def __init__(self, cw: CompiledWorkload) -> None:
        self.workload = cw
        gc = np.flatnonzero(cw.count > 0)
        self.need = cw.need[gc]
        self.count = cw.count[gc]
        self.shared = self.need < MILLI
        sizes, which = np.unique(self.need[self.shared], return_inverse=True)
        self.sizes = sizes
        self.which = which.reshape(-1)
        # tasks of a share size a GPU with f milli free still takes: LUT[size, f]
        self.per_gpu = (np.arange(MILLI + 1)[None, :] // np.maximum(sizes, 1)[:, None]).astype(
            np.float64
        )
        self.count_whole = self.count[~self.shared].astype(np.float64)
        # CPU and memory limits in float: a quotient of integers below 2**53 rounds to an
        # integer only when it is one, so floor() matches integer division exactly
        self.cpu_div = np.where(cw.cpu[gc] > 0, cw.cpu[gc], 1).astype(np.float64)
        self.cpu_off = cw.cpu[gc] <= 0
        self.mem_div = np.where(cw.mem[gc] > 0, cw.mem[gc], 1).astype(np.float64)
        self.mem_off = cw.mem[gc] <= 0
        self.model_ok_t = np.ascontiguousarray(cw.model_ok[gc].T, dtype=np.float64)
        self.held = (self.need * self.count * cw.weight[gc]).astype(np.float64)

    def evaluate(
        self, gpu_free: IntArray, cpu: IntArray, mem: IntArray, pool: IntArray
    ) -> FloatArray:
        """:func:`refill_fragmentation` of node rows (milli). O(rows x classes)."""
        total = gpu_free.sum(axis=1).astype(np.float64)
        n = gpu_free.shape[0]
        k = self.need.shape[0]
        if not k or not n:
            return total  # type: ignore[no-any-return]
        tasks = np.empty((n, k), dtype=np.float64)
        if self.sizes.shape[0]:
            free = np.maximum(gpu_free, 0)  # hypothetical rows may go below 0
            per_size = self.per_gpu[:, free] @ np.ones(free.shape[1])  # [sizes, n]
            tasks[:, self.shared] = per_size.T[:, self.which]
        if not self.shared.all():
            whole = (gpu_free == MILLI).sum(axis=1).astype(np.float64)
            tasks[:, ~self.shared] = np.floor(whole[:, None] / self.count_whole[None, :])
        for have, div, off in (
            (cpu, self.cpu_div, self.cpu_off),
            (mem, self.mem_div, self.mem_off),
        ):
            limit = np.floor(have.astype(np.float64)[:, None] / div[None, :])
            if off.any():
                limit[:, off] = np.inf
            np.minimum(tasks, limit, out=tasks)
        tasks *= self.model_ok_t[pool]
        return total - tasks @ self.held  # type: ignore[no-any-return]


class FGDPlusPlus(FGD):
    """FGD with informed tie-breaking (kant's packing policy; ``docs/packing.md``).

    Candidates are ranked lexicographically:

    1. FGD's integer score (:class:`FGD`): the growth of expected fragmentation for the
       target ``workload``;
    2. the same integer sigmoid of the growth of :func:`refill_fragmentation` for the
       ``secondary_workload`` (default: ``workload``) with each class weighted by popularity
       x *scarcity* (cluster GPUs / GPUs on the nodes able to host the class at all): the GPU
       capacity repeated tasks could not use, counting CPU, memory and per-GPU shares, so a
       node running short for *several* more tasks, or the last kind of node a large task
       fits on, is seen before the cliff FGD waits for;
    3. a node already in use before an untouched one;
    4. ``ties`` (default: a fixed node order drawn from the seed).

    For a CPU-only pod, 2 counts only the GPU tasks' share of each node's CPU
    (:func:`gpu_cpu_share` of the secondary workload): CPU-only tasks keep arriving and take
    the rest, so CPU that merely covers a node's free GPUs is already short.

    A shared pod's GPU is chosen by 1 then 2 (then the lowest index). ``scarcity=False``
    keeps plain popularity weights in 2, ``cpu_share=False`` counts all the CPU for CPU-only
    pods too, and ``in_use=False`` drops 3 (for ablations).
    """

    name = "fgdpp"

    def __init__(
        self,
        *,
        seed: int = 0,
        ties: str = "order",
        workload: WorkloadLike | None = None,
        secondary_workload: Iterable[TaskClassLike] | None = None,
        scarcity: bool = True,
        in_use: bool = True,
        cpu_share: bool = True,
    ) -> None:
        super().__init__(seed=seed, ties=ties, workload=workload)
        for option, value in (("scarcity", scarcity), ("in_use", in_use), ("cpu_share", cpu_share)):
            if not isinstance(value, bool):  # ("false" or 0 would read as a setting)
                raise ValidationError(option, value, "must be a bool")
        self.scarcity = scarcity
        self.in_use = in_use
        self.cpu_share = cpu_share
        self._gpu_cpu_share = 1.0
        if secondary_workload is None:
            secondary_workload = self.target.secondary
        self._secondary_in = None if secondary_workload is None else tuple(secondary_workload)
        self._secondary: RefillModel | None = None
        self._secondary_for: tuple[Any, ...] = ()

    def secondary_workload(self, snap: Snapshot) -> RefillModel:
        """The secondary workload compiled for the snapshot's pools, scarcity-weighted."""
        state = snap.state
        key = (state.token, state.membership_version, snap.membership_version)
        if self._secondary is None or self._secondary_for != key:
            names = tuple(state.group_names("pool"))
            if self._secondary_in is None:
                cw = self.workload(snap)
                classes: Any = cw.classes
            else:
                classes = self._secondary_in
            cw = compile_workload(classes, names)
            self._secondary = RefillModel(scarcity_weighted(cw, snap) if self.scarcity else cw)
            self._gpu_cpu_share = gpu_cpu_share(cw)
            self._secondary_for = key
        return self._secondary

    def secondary(
        self, snap: Snapshot, gpu_free: IntArray, cpu: IntArray, mem: IntArray, pool: IntArray
    ) -> FloatArray:
        """Scarcity-weighted :func:`refill_fragmentation` of node rows (milli)."""
        model = self.secondary_workload(snap)
        if gpu_free.shape[0] >= DEDUP_MIN:
            rows = np.column_stack((pool, cpu, mem, gpu_free))
            first, inverse = row_groups(rows)
            uniq = rows[first]
            values = model.evaluate(uniq[:, 3:], uniq[:, 1], uniq[:, 2], uniq[:, 0])
            return values[inverse]
        return model.evaluate(gpu_free, cpu, mem, pool)

    def _ranked(self, ctx: PodView, s: IntArray) -> FloatArray:
        """[len(s), 3] per node slot: the best FGD score over its alternatives; the tie
        score ``2 * secondary``, with the secondary score of the alternative chosen among
        those with that best FGD score; and that alternative (the GPU
        :meth:`share_device` takes for a shared pod; 0 otherwise). The secondary is
        evaluated, in one batch with the rows as they are, only for alternatives with their
        node's best FGD score: the others can never win."""
        snap = ctx.snap
        cols = snap.cols
        req = ctx.req
        primary, alt = self._primary(ctx, s)
        n = s.shape[0]
        top = primary.max(axis=1)
        best = (primary == top[:, None]) & (primary >= 0)
        use = np.flatnonzero(best[alt.row, alt.col])
        g, cpu, mem, pool = alt.before_after(cols, s, req, use)
        if self.cpu_share and not req.needs_gpu:
            self.secondary_workload(snap)
            if self._gpu_cpu_share < 1.0:
                # a CPU-only pod: GPU tasks can count on their share of a node's CPU only
                cpu = np.floor(cpu * self._gpu_cpu_share).astype(np.int64)
        sec = self.secondary(snap, g, cpu, mem, pool)
        second = alt.scatter(self.growth_points(sec[n:] - sec[:n][alt.row[use]]), 0.0, use)
        # lowest index among the best primary scores with the best secondary score
        pick = np.where(best, second, -1.0).argmax(axis=1)
        tie = 2.0 * np.where(top >= 0, second[np.arange(n), pick], 0.0)
        return np.column_stack((top, tie, pick))

    def ranked(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """:meth:`_ranked` of ``slots``, cached per (pod class, node row)."""
        self.cache.sync(ctx.snap)
        fill = functools.partial(self._ranked, ctx)
        return self.cache.get(("ranked", pod_key(ctx)), ctx.snap, slots, fill, width=3)

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """``_LEX * primary + tie score + in use``, the last two only for the nodes with the
        best primary score: they break its ties, nothing else. (In use reads capacities,
        which the cache's grouping of alike rows does not compare: it is not cached.)"""
        ranked = self.ranked(ctx, slots)
        primary = ranked[:, 0]
        out = primary * _LEX
        if slots.shape[0] <= 1:
            return out
        top = np.flatnonzero(primary == primary.max())
        out[top] += ranked[top, 1]
        if self.in_use:
            t = slots[top]
            cols = ctx.snap.cols
            out[top] += (
                (cols.free_gpus[t] < cols.gpus[t])
                | (cols.cpu_free[t] < cols.cpu_cap[t])
                | (cols.mem_free[t] < cols.mem_cap[t])
            )
        return out

    def share_device(self, ctx: PodView, slot: int) -> int:
        """The GPU :meth:`ranked` picked for node ``slot`` (cached from the scoring a moment
        ago when the row is unchanged: O(1))."""
        self.cache.sync(ctx.snap)
        row = self.cache.fresh(("ranked", pod_key(ctx)), slot)
        if row is not None:
            return int(row[2])  # scored a moment ago for this placement
        return int(self.ranked(ctx, np.array([slot], dtype=np.int64))[0, 2])


_LEX: Final = 1000.0
"""Primary-score multiplier of :class:`FGDPlusPlus` (secondary scores are 0..100)."""


def gpu_cpu_share(cw: CompiledWorkload) -> float:
    """The GPU classes' share of the workload's CPU demand (popularity x CPU; 1.0 when it
    asks no CPU): how much of a node's CPU its GPU tasks can expect, the CPU-only tasks
    taking the rest."""
    demand = cw.weight * cw.cpu
    total = float(demand.sum())
    return float(demand[cw.count > 0].sum()) / total if total > 0 else 1.0


def scarcity_weighted(cw: CompiledWorkload, snap: Snapshot) -> CompiledWorkload:
    """``cw`` with GPU classes re-weighted by popularity x (cluster GPUs / GPUs on the nodes
    whose capacity -- GPU count, CPU, memory, model -- can host one task of the class), and
    CPU-only classes (and classes no node can host) dropped; renormalised."""
    cols = snap.cols
    n = snap.num_slots
    alive = np.flatnonzero(cols.alive[:n])
    gpus = cols.gpus[alive]
    able = (
        (gpus[None, :] >= cw.count[:, None])
        & (cols.cpu_cap[alive][None, :] >= cw.cpu[:, None])
        & (cols.mem_cap[alive][None, :] >= cw.mem[:, None])
        & cw.model_ok[:, cols.pool_id[alive]]
    )
    homes = (able * gpus[None, :]).sum(axis=1).astype(np.float64)
    use = np.flatnonzero((cw.count > 0) & (homes > 0))
    if not use.shape[0]:
        return cw
    w = cw.weight[use] * float(gpus.sum()) / homes[use]
    classes = tuple(
        attrs.evolve(cw.classes[i], weight=float(x)) for i, x in zip(use.tolist(), w, strict=True)
    )
    return compile_workload(classes, cw.model_names)
