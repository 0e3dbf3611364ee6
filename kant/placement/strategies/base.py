"""The strategy protocol and :class:`BaseStrategy`, the defaults of its optional hooks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from kant.model import MILLI, Tier
from kant.placement.context import FloatArray, IntArray, PodContext


@runtime_checkable
class Strategy(Protocol):
    """The one method a strategy must have: score candidates, higher is better.

    ``slots`` are feasible candidate nodes (ascending); return one float per candidate.
    Ties go to the first (lowest slot), so scores decide and determinism is free.

    Scores must be *node-local*: a node's score depends only on that node's row in the
    snapshot and on this job's pods on that node (``ctx.job_pods_on``). The Placer relies on
    it to re-score only the node it just used when it fills a gang.
    """

    name: str

    def score(self, ctx: PodContext, slots: IntArray) -> FloatArray: ...


class BaseStrategy:
    """Defaults for the optional hooks; subclass and override what differs.

    - ``two_level``: for single pods, rank NodeNetGroups (leaves) by their aggregates with
      :meth:`group_key` and look for a node inside the best groups before any wider search.
    - ``topology_default``: the preferred tier for multi-pod gang roles that state no
      topology wish (``None`` = no tier search unless the job asks for one).
    - ``fill_partly_used_first``: in the two-level search, a whole-GPU pod first takes the
      fullest partly used node of its pools that fits (the per-pool best-fit index), and
      only opens a wholly free node, chosen by the group level, when none does.
    """

    name: ClassVar[str] = "base"
    two_level: ClassVar[bool] = False
    topology_default: ClassVar[Tier | None] = None
    fill_partly_used_first: ClassVar[bool] = False

    def score(self, ctx: PodContext, slots: IntArray) -> FloatArray:
        return -ctx.gpu_after(slots)

    def group_key(self, free_milli: IntArray, in_use: IntArray) -> Any:
        """Sort key (np.lexsort order, last key primary) for candidate groups; lower first.

        Default (packing): groups already in use first, then fewest free GPU milli."""
        return (free_milli, 1 - in_use)

    def domain_key(self, capacity: IntArray) -> IntArray:
        """Order of topology domains that can hold a role, by their capacity in pods; lower
        first. Default best fit: the tightest domain, keeping big domains whole."""
        return capacity

    def candidate_sets(
        self, ctx: PodContext, slots: IntArray
    ) -> Sequence[tuple[IntArray, BaseStrategy]]:
        """Node sets to try in order, each with the strategy that scores it (E-Spread tries
        the inference zone first). Default: all candidates, scored by this strategy."""
        return ((slots, self),)

    def share_device(self, ctx: PodContext, slot: int) -> int:
        """GPU index for a fractional pod on node ``slot``: the device with the least free
        share that still fits (keep whole GPUs whole), lowest index on ties."""
        row = ctx.snap.cols.gpu_free[slot, : int(ctx.snap.cols.gpus[slot])]
        fits = row >= ctx.req.milli
        best = np.where(fits, row, MILLI + 1)
        return int(np.argmin(best))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
