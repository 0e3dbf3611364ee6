"""Placement strategies: small objects that *score* candidate nodes (vectorised) and order
NodeNetGroups and topology domains. The :class:`~kant.placement.placer.Placer` does the rest
(feasibility, device choice, gang transactions, the topology tier search).

A strategy is chosen by name from a registry (:func:`make_strategy`), so a config file or the
simulator can pick one; :func:`register_strategy` adds new ones without touching the engine.

Built-ins (section 3.3 of the Kant paper):

``binpack``   fill partly used nodes first (least GPU left after placement wins).
``ebinpack``  E-Binpack: node level, co-locate replicas of one job on as few nodes as
              possible; group level, put small jobs in NodeNetGroups already in use (fullest
              first) and keep wholly free groups for large jobs; multi-pod gangs search the
              tightest topology tier first.
``spread``    spread replicas over nodes (most free first, one job's pods apart).
``espread``   E-Spread: inference pods smaller than a node are spread inside the inference
              dedicated zone (one replica per node); the remaining replicas, and every other
              pod, are E-Binpacked in the general pool, so whole nodes stay free.
``topology``  tightest tier first (node, leaf, spine, superspine), best-fit domains, binpack
              inside.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from kant.contracts import PodView, Strategy
from kant.errors import InvalidConfigError
from kant.model import NAME_REASON, Job, JobKind, Role, Tier, is_name
from kant.placement.context import FloatArray, IntArray
from kant.placement.strategies.base import BaseStrategy
from kant.state import Snapshot
from kant.state.cluster import BoolArray


class Binpack(BaseStrategy):
    """Fill partly used nodes first: the node with the least GPU left after the pod wins."""

    name = "binpack"
    fills_node_first = True  # less GPU left after each pod: a higher score


class EBinpack(BaseStrategy):
    """E-Binpack: co-locate a job's replicas on few nodes, pack small jobs into NodeNetGroups
    already in use, keep free groups whole; multi-pod gangs take the tightest tier."""

    name = "ebinpack"
    two_level = True
    topology_default = Tier.LEAF
    fill_partly_used_first = True
    fills_node_first = True  # binpack plus a co-location bonus that only grows
    colocate_weight: ClassVar[float] = 2.0

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """Binpack plus ``colocate_weight`` on nodes holding this job's pods. O(len(slots))."""
        return -ctx.gpu_after(slots) + self.colocate_weight * np.minimum(ctx.job_pods_on(slots), 1)


class Spread(BaseStrategy):
    """Spread replicas: the emptiest NodeNetGroup first (the two-level search), in it the
    most free node, nodes without this job's pods first."""

    name = "spread"
    two_level = True

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """Most GPU left after the pod, minus 2 per pod of this job there. O(len(slots))."""
        return ctx.gpu_after(slots) - 2.0 * ctx.job_pods_on(slots)

    def group_key(self, free_milli: IntArray, in_use: IntArray) -> Any:
        """The emptiest NodeNetGroups first."""
        return (-free_milli,)

    def domain_key(self, capacity: IntArray) -> IntArray:
        """The roomiest topology domains first."""
        return -capacity


class ESpread(BaseStrategy):
    """E-Spread: the inference dedicated zone.

    Inference pods asking for fewer GPUs than a node has are spread inside the zone (nodes
    whose ``zone`` is :attr:`zone`) as :class:`Spread` spreads them (the emptiest zone group
    first, in it the most free node), one replica of a job per node; replicas that find no
    such zone node, and all other pods, are E-Binpacked on the general (non-zone) nodes. A
    gang of such inference pods is placed pod by pod over those two sets (the Placer skips
    the default tier when a pod has several sets); other gangs search the tiers over the
    general nodes.

    ``zone`` must be a name a node's ``zone`` can have (a non-empty string without
    surrounding spaces or ``'/'``), else :class:`~kant.errors.InvalidConfigError`; a name no
    node has leaves every node general.
    """

    name = "espread"
    two_level = True
    topology_default = Tier.LEAF

    def __init__(self, zone: str = "inference") -> None:
        if not is_name(zone):
            raise InvalidConfigError("zone", zone, f"{NAME_REASON} (a node's zone)")
        self.zone = zone
        self._general = EBinpack()
        self._spread = Spread()
        # the last split made: (slots, (zone id, state, its nodes' version), general, in zone)
        self._last: tuple[IntArray, tuple[int, int, int], IntArray, Any] | None = None

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """E-Binpack's score (the general pool's)."""
        return self._general.score(ctx, slots)

    def candidate_sets(self, ctx: PodView, slots: IntArray) -> Sequence[tuple[IntArray, Strategy]]:
        """Zone nodes without this job's pods, scored by Spread, for a small inference pod;
        then (or only) the general nodes, scored by E-Binpack. Asked for every pod. The
        general nodes are ``slots`` itself when none is in the zone, and the same array
        while ``slots`` is (so the Placer's two-level search keeps its split by leaf).
        O(len(slots)) for an inference pod or new ``slots``, else O(1)."""
        general, in_zone = self._split(ctx, slots)
        if in_zone is None or ctx.job.kind is not JobKind.INFERENCE:
            return ((general, self._general),)
        small = ctx.req.gpus < ctx.snap.cols.gpus[slots]
        zone_ok = in_zone & small & (ctx.job_pods_on(slots) == 0)
        if zone_ok.any():
            return ((slots[zone_ok], self._spread), (general, self._general))
        return ((general, self._general),)

    def reach(self, job: Job, role: Role) -> ZoneReach:
        """The nodes :meth:`candidate_sets` may ever give a pod of ``role`` of ``job``: the
        general ones, and for an inference job's pod the zone nodes with more GPUs than it
        asks (:class:`ZoneReach`). O(1)."""
        below = role.resources.gpus if job.kind is JobKind.INFERENCE else None
        return ZoneReach(strategy=self.name, zone=self.zone, below=below)

    def _split(self, ctx: PodView, slots: IntArray) -> tuple[IntArray, Any]:
        """(the general nodes of ``slots``, which of ``slots`` are in the zone): ``slots``
        and None when none is. Remembered for the last ``slots`` array, while its nodes are
        the same. O(len(slots)) on a miss."""
        snap = ctx.snap
        zid = snap.group_id("zone", self.zone)
        key = (zid, snap.state.token, snap.membership_version)
        last = self._last
        if last is not None and last[0] is slots and last[1] == key:
            return last[2], last[3]
        in_zone = snap.cols.zone_id[slots] == zid if zid >= 0 else None
        if in_zone is None or not in_zone.any():
            general, in_zone = slots, None
        else:
            general = slots[~in_zone]
            general.flags.writeable = False  # (kept: the Placer checks it once, see _inside)
        self._last = (slots, key, general, in_zone)
        return general, in_zone


@attrs.frozen
class ZoneReach:
    """E-Spread's reach (:class:`kant.contracts.Reach`): the nodes outside zone ``zone``,
    and with ``below`` set (an inference pod of that many GPUs) the zone nodes with more
    GPUs than ``below``. Every node when no node is in the zone. ``strategy`` names the
    strategy in the reason it gives."""

    strategy: str
    zone: str
    below: int | None = None

    def allows(self, snap: Snapshot) -> BoolArray:
        """Per slot of ``snap``, whether the node there is in reach. O(slots)."""
        cols = snap.cols
        zid = snap.group_id("zone", self.zone)
        if zid < 0:
            return np.ones(cols.zone_id.shape, dtype=bool)
        out: BoolArray = cols.zone_id != zid
        if self.below is not None:
            out |= cols.gpus > self.below
        return out

    def __str__(self) -> str:
        outside = f"{self.strategy}: the nodes outside zone {self.zone!r}"
        if self.below is None:
            return outside
        return f"{outside} and those in it with more than {self.below} GPUs"


class Topology(BaseStrategy):
    """Topology first: tightest tier (node < leaf < spine < superspine), best-fit domains,
    binpack inside."""

    name = "topology"
    two_level = True
    topology_default = Tier.LEAF
    fills_node_first = True  # binpack inside

    def group_key(self, free_milli: IntArray, in_use: IntArray) -> Any:
        """The fullest NodeNetGroups first, in use or not."""
        return (free_milli,)
