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

FGD and ``fgdpp`` are in :mod:`kant.placement.strategies.fgd`.

These strategies are flat (no NodeNetGroup search, no topology default).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from kant.contracts import PodView
from kant.errors import ValidationError
from kant.model import MILLI
from kant.placement.context import FloatArray, IntArray
from kant.placement.strategies.base import BaseStrategy
from kant.state import Snapshot

MAX_SPEC_CPU: Final = 128_000
"""CPU milli of the largest node the reference normalises by (128 cores)."""
MAX_SPEC_GPU: Final = 8 * MILLI
"""GPU milli of the largest node the reference normalises by (8 GPUs)."""
MAX_SCORE: Final = 100

TIES: Final = ("order", "random", "first")


class PackingBaseline(BaseStrategy):
    """A baseline with integer scores (0..100) and a tie rule.

    Subclasses implement :meth:`points`; :meth:`score` adds the tie-break: a seeded uniform
    draw in [0, 0.5) (``ties="random"``: a uniformly random node among the best) or nothing
    (``ties="first"``: the lowest slot, the Placer's rule).
    """

    name: ClassVar[str] = "baseline"
    monotone: ClassVar[bool] = False
    """Do :meth:`points` never drop on a node that takes one more pod of the kind?"""
    constant: ClassVar[bool] = False
    """Is :meth:`score` the same for every node (no tie-break drawn)?"""

    def __init__(self, *, seed: int = 0, ties: str = "order", workload: Any = None) -> None:
        if ties not in TIES:
            raise ValidationError("ties", ties, f"must be one of {list(TIES)}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValidationError("seed", seed, "must be an int >= 0")
        self.seed = seed
        self.ties = ties
        self.rng = np.random.default_rng(seed)
        self._order = np.zeros(0, dtype=np.float64)
        # bulk placement (BaseStrategy.fills_node_first): monotone points and a tie rule
        # that draws nothing (ties="random" draws per call, so the number of calls counts)
        self.fills_node_first = self.monotone and (ties != "random" or self.constant)
        del workload  # only the workload-aware policies use it

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """Integer-valued scores, higher is better."""
        raise NotImplementedError

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """:meth:`points` plus the tie-break (< 0.5, so it only orders equal points); the
        ``random`` rule draws from the seeded generator, so the call sequence matters.
        O(len(slots))."""
        pts = self.points(ctx, slots)
        if slots.shape[0] <= 1 or self.ties == "first":
            return pts
        if self.ties == "random":
            return pts + 0.5 * self.rng.random(slots.shape[0])
        return pts + 0.5 * self.node_order(ctx.snap)[slots]

    def node_order(self, snap: Snapshot) -> FloatArray:
        """A fixed random priority in [0, 1) per slot, drawn from the seed and the number of
        slots (higher first): kept while that number stays, so a strategy that placed on
        another cluster orders this one's nodes as a fresh one would."""
        n = snap.num_slots
        if self._order.shape[0] != n:
            grown = np.random.default_rng([self.seed, n]).permutation(n) / n
            self._order = grown.astype(np.float64)
        return self._order

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed}, ties={self.ties!r})"


def _gpu_left(ctx: PodView, slots: IntArray) -> IntArray:
    return ctx.snap.cols.free_milli[slots]


class RandomPlacement(PackingBaseline):
    """A uniformly random feasible node; a shared pod takes a uniformly random GPU that fits
    (the reference's ``random`` GPU selection)."""

    name = "random"

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """All equal: the draw in :meth:`score` decides."""
        return np.zeros(slots.shape[0], dtype=np.float64)

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """One seeded uniform draw per slot. O(len(slots))."""
        return np.asarray(self.rng.random(slots.shape[0]), dtype=np.float64)

    def share_device(self, ctx: PodView, slot: int) -> int:
        """A uniformly random GPU of the node that fits the share (seeded). O(GPUs)."""
        cols = ctx.snap.cols
        row = cols.gpu_free[slot, : int(cols.gpus[slot])]
        fits = np.flatnonzero(row >= ctx.req.milli)
        return int(fits[int(self.rng.integers(fits.shape[0]))])


class FirstFit(PackingBaseline):
    """The first feasible node in slot order (ties are the whole point: always the first)."""

    name = "firstfit"
    monotone = True
    constant = True

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """All equal: the lowest slot wins."""
        return np.zeros(slots.shape[0], dtype=np.float64)

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """:meth:`points`, never a tie-break."""
        return self.points(ctx, slots)


class BestFit(PackingBaseline):
    """The node with the least left after placement: CPU and GPU left, each divided by the
    largest node's capacity (128 cores, 8 GPUs), averaged, on the 0..100 scale."""

    name = "bestfit"
    monotone = True  # less left, more points

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """The class formula, truncated to an integer. O(len(slots))."""
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
    monotone = True  # less free, a smaller product, more points

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """The class formula, truncated to an integer. O(len(slots))."""
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

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """The class's bands. O(len(slots) x GPUs)."""
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
        self._state_token = -1
        self._gen = np.zeros(0, dtype=np.int64)
        self._kinds = np.zeros(0, dtype=np.uint64)

    def kinds(self, snap: Snapshot, slots: IntArray) -> npt.NDArray[np.uint64]:
        """Bit mask of pod kinds per slot: bit 0 a GPU share, bit k (<= 63) k whole GPUs."""
        state = snap.state
        gen = state.node_generation
        n = state.num_slots
        if self._state_token != state.token or self._gen.shape[0] < n:
            self._state_token = state.token
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

    def points(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """The class's bands plus GPU in use. O(len(slots)) after :meth:`kinds`."""
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
