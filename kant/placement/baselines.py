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
                   (:mod:`kant.placement.fragmentation`): ``100 * sigmoid(-growth / 1000)``.
``fgdpp``          kant's refinement of FGD (see :class:`FGDPlusPlus` and ``docs/packing.md``).

All but ``random`` and ``firstfit`` choose a shared pod's GPU "best fit" (the fullest GPU that
still fits, lowest index on ties), as the reference does; FGD chooses it by fragmentation.

**Ties.** Integer scores tie often. ``ties="random"`` (the default) breaks them with a seeded
random draw, like kube-scheduler's ``selectHost``, which the reference runs; ``ties="first"``
takes the lowest slot. Either way a run is deterministic for a given ``seed``.

**Target workload.** FGD (and ``fgdpp``) need the workload they defragment for: a sequence of
:class:`~kant.placement.fragmentation.TaskClass` (or a compiled one), passed as ``workload=``.
Scores are cached per (task class, node) and recomputed only for nodes whose free resources
changed since (the snapshot rows are compared, so any change, committed or rolled back, is
seen): placing a pod costs O(changed nodes x classes x GPUs) numpy work after warm-up.

These strategies are flat (no NodeNetGroup search, no topology default).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, ClassVar, Final

import attrs
import numpy as np
import numpy.typing as npt

from kant.errors import ValidationError
from kant.model import MILLI
from kant.placement.context import FloatArray, IntArray, PodContext, PodRequest
from kant.placement.fragmentation import (
    CompiledWorkload,
    TaskClassLike,
    compile_workload,
    node_fragmentation_rows,
)
from kant.placement.strategies import BaseStrategy, register_strategy
from kant.state import NodeColumns, Snapshot

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
    """Which node rows changed between calls. A private copy of the free GPU, CPU and
    memory columns is compared with the snapshot's on the rows its change log names
    (:meth:`~kant.state.Snapshot.rows_changed_since`; every row when the log cannot say),
    so a row changed and rolled back keeps its version. A new snapshot, or nodes coming or
    going, starts a new *epoch* (every cache entry is stale)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.clock = 0
        self._key: tuple[int, int, int, int] = (-1, -1, -1, -1)
        self._position = -1
        self.version = np.zeros(0, dtype=np.int64)
        self._g = np.zeros((0, 0), dtype=np.int64)
        self._c = np.zeros(0, dtype=np.int64)
        self._m = np.zeros(0, dtype=np.int64)

    def sync(self, snap: Snapshot) -> IntArray:
        cols = snap.cols
        n = snap.num_slots
        key = (snap.token, n, cols.width, snap.state.membership_version)
        if key == self._key and snap.log_position == self._position:
            return self.version  # no row can have changed since the last call
        if key != self._key:
            self._key = key
            self._position = snap.log_position
            self.epoch += 1
            self.version = np.zeros(n, dtype=np.int64)
            self._g = cols.gpu_free[:n].copy()
            self._c = cols.cpu_free[:n].copy()
            self._m = cols.mem_free[:n].copy()
            return self.version
        logged = snap.rows_changed_since(self._position)
        self._position = snap.log_position
        idx = np.arange(n) if logged is None else logged  # repeats do no harm
        changed = (cols.gpu_free[idx] != self._g[idx]).any(axis=1)
        changed |= cols.cpu_free[idx] != self._c[idx]
        changed |= cols.mem_free[idx] != self._m[idx]
        idx = idx[changed]
        if idx.shape[0]:
            self.clock += 1
            self.version[idx] = self.clock
            self._g[idx] = cols.gpu_free[idx]
            self._c[idx] = cols.cpu_free[idx]
            self._m[idx] = cols.mem_free[idx]
        return self.version


class _Cache:
    """Per-node values (``width`` per node) computed at a row version (``at == -1``:
    never)."""

    __slots__ = ("at", "epoch", "values")

    def __init__(self, n: int, epoch: int, width: int) -> None:
        self.epoch = epoch
        self.values = np.zeros((n, width), dtype=np.float64)
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
    return _row_groups(rows)


def _sigmoid(x: FloatArray) -> FloatArray:
    return 1.0 / (1.0 + np.exp(-x))


@attrs.frozen(eq=False)
class Alternatives:
    """The places a pod could take on ``n`` node rows, as hypothetical rows.

    ``g[i]`` is row ``row[i]`` with the pod placed as alternative column ``col[i]`` (of
    ``width``). A shared pod has one column per GPU, but only the first GPU of each free
    value is evaluated (``same[r, d]``: the column whose value GPU ``d`` shares; ``ok``:
    the GPUs the share fits on); whole-GPU and CPU-only pods have one column."""

    g: IntArray
    row: IntArray
    col: IntArray
    width: int
    same: IntArray | None = None
    ok: npt.NDArray[np.bool_] | None = None

    def before_after(
        self, cols: NodeColumns, s: IntArray, req: PodRequest, use: IntArray | None = None
    ) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """Free GPU milli, CPU, memory and pool of node slots ``s`` as they are, followed by
        the alternatives (``use``: those indices only) with the pod placed: one batch."""
        r = self.row if use is None else self.row[use]
        after = self.g if use is None else self.g[use]
        cpu, mem, pool = cols.cpu_free[s], cols.mem_free[s], cols.pool_id[s]
        return (
            np.concatenate((cols.gpu_free[s], after)),
            np.concatenate((cpu, cpu[r] - req.cpu)),
            np.concatenate((mem, mem[r] - req.mem)),
            np.concatenate((pool, pool[r])),
        )

    def scatter(
        self, values: FloatArray, missing: float, use: IntArray | None = None
    ) -> FloatArray:
        """[n, width]: ``values`` at the evaluated alternatives (``use``: those only), copied
        to the GPUs that share them; ``missing`` elsewhere."""
        n = self.ok.shape[0] if self.ok is not None else self.row.shape[0]
        out = np.full((n, self.width), missing)
        r = self.row if use is None else self.row[use]
        c = self.col if use is None else self.col[use]
        out[r, c] = values
        return self.spread(out, missing)

    def spread(self, values: FloatArray, missing: float) -> FloatArray:
        """``values`` [n, width], set at the evaluated columns, copied to the GPUs that
        share them; ``missing`` where the share does not fit."""
        if self.same is None or self.ok is None:
            return values
        n = values.shape[0]
        return np.where(self.ok, values[np.arange(n)[:, None], self.same], missing)


class FGD(PackingBaseline):
    """Fragmentation gradient descent (Weng et al., ATC '23).

    For each feasible node, the growth of its expected fragmented GPU amount ``F_n(M)`` for
    the target workload ``M`` if the pod were placed there (:mod:`kant.placement.fragmentation`;
    a shared pod tries every GPU that fits); the node, and GPU, with the least growth wins.
    Scores are the reference's ``int(100 * sigmoid(-growth / 1000))``, so growths within
    about 40 milli-GPU tie (broken by ``ties``); the GPU is the first with the best score.

    ``workload``: task classes (see :func:`kant.placement.fragmentation.task_classes`), or a
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
        """``F_n(M)`` in milli for node rows (real or hypothetical; int64 arrays)."""
        return node_fragmentation_rows(gpu_free, cpu, mem, pool, self.workload(snap))

    def _cached(
        self, key: Any, ctx: PodContext, slots: IntArray, fill: Any, width: int = 1
    ) -> FloatArray:
        """``fill(stale_slots) -> values [stale, width]`` for slots whose rows changed since
        they were cached (row versions as of the last :meth:`RowVersions.sync`); cached
        values otherwise. Returns [len(slots), width]."""
        version = self.rows.version
        c = self._caches.get(key)
        n = version.shape[0]
        if c is None or c.epoch != self.rows.epoch or c.values.shape != (n, width):
            c = self._caches[key] = _Cache(n, self.rows.epoch, width)
        stale = slots[c.at[slots] != version[slots]]
        if stale.shape[0] >= _DEDUP_MIN:
            first, inverse = alike_rows(ctx.snap, stale)
            c.values[stale] = fill(stale[first])[inverse]
            c.at[stale] = version[stale]
        elif stale.shape[0]:
            c.values[stale] = fill(stale)
            c.at[stale] = version[stale]
        return c.values[slots]

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

    def _primary(self, ctx: PodContext, s: IntArray) -> tuple[FloatArray, Alternatives]:
        """FGD scores of node slots ``s`` per alternative [len(s), width] (-1 where the pod
        does not fit) and the alternatives. The rows as they are and as they would be are
        evaluated together, in one batch."""
        cols = ctx.snap.cols
        alt = self.alternatives(ctx.req, cols.gpu_free[s])
        frag = self.fragmentation(ctx.snap, *alt.before_after(cols, s, ctx.req))
        n = s.shape[0]
        return alt.scatter(self.growth_points(frag[n:] - frag[:n][alt.row]), -1.0), alt

    def device_points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        """Scores [len(slots), alternatives + 1]: per GPU for a shared pod (-1 where it does
        not fit), one column otherwise; the last column is the row's best. Cached per (pod
        class, node row)."""

        def fill(s: IntArray) -> FloatArray:
            pts, _ = self._primary(ctx, s)
            return np.column_stack((pts, pts.max(axis=1)))

        width = ctx.snap.cols.width + 1 if ctx.req.milli else 2
        return self._cached(("device", pod_key(ctx)), ctx, slots, fill, width)

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        self.rows.sync(ctx.snap)
        return self.device_points(ctx, slots)[:, -1]

    def share_device(self, ctx: PodContext, slot: int) -> int:
        self.rows.sync(ctx.snap)
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
        workload: Iterable[TaskClassLike] | CompiledWorkload | None = None,
        secondary_workload: Iterable[TaskClassLike] | None = None,
        scarcity: bool = True,
        in_use: bool = True,
        cpu_share: bool = True,
    ) -> None:
        super().__init__(seed=seed, ties=ties, workload=workload)
        self.scarcity = bool(scarcity)
        self.in_use = bool(in_use)
        self.cpu_share = bool(cpu_share)
        self._gpu_cpu_share = 1.0
        self._secondary_in = None if secondary_workload is None else tuple(secondary_workload)
        self._secondary: RefillModel | None = None
        self._secondary_for: tuple[Any, ...] = ()

    def secondary_workload(self, snap: Snapshot) -> RefillModel:
        """The secondary workload compiled for the snapshot's pools, scarcity-weighted."""
        state = snap.state
        key = (id(state), state.membership_version)
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
        if gpu_free.shape[0] >= _DEDUP_MIN:
            rows = np.column_stack((pool, cpu, mem, gpu_free))
            first, inverse = _row_groups(rows)
            uniq = rows[first]
            values = model.evaluate(uniq[:, 3:], uniq[:, 1], uniq[:, 2], uniq[:, 0])
            return values[inverse]
        return model.evaluate(gpu_free, cpu, mem, pool)

    def _ranked(self, ctx: PodContext, s: IntArray) -> FloatArray:
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

    def ranked(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        """:meth:`_ranked` of ``slots``, cached per (pod class, node row)."""
        self.rows.sync(ctx.snap)
        fill = functools.partial(self._ranked, ctx)
        return self._cached(("ranked", pod_key(ctx)), ctx, slots, fill, width=3)

    def points(self, ctx: PodContext, slots: IntArray) -> FloatArray:
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

    def share_device(self, ctx: PodContext, slot: int) -> int:
        version = self.rows.sync(ctx.snap)
        c = self._caches.get(("ranked", pod_key(ctx)))
        if c is not None and c.epoch == self.rows.epoch and c.at[slot] == version[slot]:
            return int(c.values[slot, 2])  # scored a moment ago for this placement
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


def _row_groups(rows: IntArray) -> tuple[IntArray, IntArray]:
    """Identical rows of ``rows`` [n, k]: ``(first, inverse)`` with ``rows[first]`` one row
    per group (in sorted order) and ``inverse[i]`` the group of row ``i``. One lexsort."""
    order = np.lexsort(rows.T[::-1])
    sorted_rows = rows[order]
    new = np.ones(order.shape[0], dtype=np.bool_)
    new[1:] = (sorted_rows[1:] != sorted_rows[:-1]).any(axis=1)
    group_sorted = np.cumsum(new) - 1
    inverse = np.empty_like(group_sorted)
    inverse[order] = group_sorted
    return order[new], inverse


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
