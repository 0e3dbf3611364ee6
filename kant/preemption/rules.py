"""Victim rules (paper 3.2.3): who may be evicted for whom.

Three kinds, each a :class:`kant.model.VictimReason`:

``RECLAIM``   the preemptor's tenant stays within its *nominal* quota with this job, so it may
              take back what other tenants borrowed: victims are jobs of tenants that use more
              than their nominal quota of a GPU model the reclaim is for (one where the
              preemptor's tenant stays within nominal: :attr:`Preemptor.reclaim_models`), any
              priority. The lender's own jobs are never reclaim victims.
``PRIORITY``  victims have a strictly lower priority than the preemptor. Another tenant's
              borrowed use is a priority victim only of a preemptor that stays within its
              nominal quota (then it is a reclaim), or with ``borrow_within_cohort``.
``BACKFILL``  (Backfill policy) the head has waited past the threshold: victims are jobs behind
              it in the queue order that started while it was pending.

A tenant's use *within its nominal quota* is guaranteed: another tenant's job may evict it for
none of the three reasons (with ``quotas=None`` nothing is guaranteed). Non-preemptible jobs
and pods younger than ``min_runtime`` are never candidates at all
(:mod:`kant.preemption.candidates`). This module is the one place these rules are written;
the cheap pre-filter of the preemptor and the exact check per unit both call it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import attrs

from kant.model import Binding, PodId, VictimReason

if TYPE_CHECKING:
    from kant.preemption.policy import PreemptionPolicy


class VictimView(Protocol):
    """What a victim rule may read of a candidate unit (a gang job, or one pod)."""

    @property
    def job(self) -> str:
        """The unit's job id."""
        ...

    @property
    def tenant(self) -> str:
        """The tenant of the unit's job."""
        ...

    @property
    def priority(self) -> int:
        """The priority of the unit's job."""
        ...

    @property
    def started_at(self) -> float:
        """When the unit started running."""
        ...

    @property
    def key(self) -> tuple[Any, ...]:
        """Its job's order key in the global queue."""
        ...


@attrs.frozen(kw_only=True)
class Preemptor:
    """The facts about a would-be preemptor that the eligibility rules read."""

    job: str
    tenant: str
    priority: int
    within_nominal: bool  # within nominal once its own tenant's eligible victims are gone
    backfill: bool  # may preempt backfilled jobs (Backfill head past its threshold)
    pending_since: float
    order_key: tuple[Any, ...]
    borrowing: bool = False  # quotas apply and the tenant ends above its nominal quota
    cascade: bool = False  # evicted within cascade_window: no priority or reclaim victims
    # A reclaim (quotas apply): the GPU models it is for, where its tenant stays within its
    # nominal quota with the job (the only ones it may run on while it reclaims). Another
    # tenant's unit is then exposed only while that tenant borrows on one of them (Kueue: a
    # preemptee's ClusterQueue is above nominal for a resource the preemptor requires).
    # None: exposure is judged on any model (not a reclaim).
    reclaim_models: frozenset[str] | None = None


@attrs.frozen(kw_only=True)
class VictimUnit:
    """What one eviction removes: a whole gang job, or one pod of a pod-level job, with the
    bindings it holds and the quota it is charged for (``usage``: (GPU model, milli))."""

    job: str
    tenant: str
    priority: int
    started_at: float
    seq: int
    key: tuple[Any, ...]
    pods: tuple[PodId, ...]
    bindings: tuple[Binding, ...]
    usage: tuple[tuple[str, int], ...]
    pools: frozenset[int]


def builtin_reason(
    policy: PreemptionPolicy, pre: Preemptor, unit: VictimView, *, exposed: bool
) -> VictimReason | None:
    """The built-in rules, in order: never the preemptor itself; another tenant's unit only
    while that tenant borrows (``exposed``); then reclaim, priority, backfill (a preemptor
    evicted within ``cascade_window`` only the last)."""
    if unit.job == pre.job:
        return None
    other = unit.tenant != pre.tenant
    if other and not exposed:
        return None  # another tenant's guaranteed (nominal) share is never preempted
    if policy.reclaim and other and pre.within_nominal and not pre.cascade:
        return VictimReason.RECLAIM
    if policy.priority and unit.priority < pre.priority and not pre.cascade:
        if other and pre.borrowing and not policy.may_borrow_from(pre.priority, unit.priority):
            return None  # a borrower does not take another tenant's borrowed use
        return VictimReason.PRIORITY
    if (
        policy.backfill
        and pre.backfill
        and unit.key > pre.order_key
        and unit.started_at >= pre.pending_since
    ):
        return VictimReason.BACKFILL
    return None
