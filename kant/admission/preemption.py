"""Preemption control (paper 3.2.3): who may be evicted for whom, and the victim search.

Three kinds, each a :class:`kant.model.VictimReason`:

``RECLAIM``   the preemptor's tenant stays within its *nominal* quota with this job, so it may
              take back what other tenants borrowed: victims are jobs of tenants that use more
              than their nominal quota of that GPU model (any priority). The lender's own jobs
              are never reclaim victims.
``PRIORITY``  victims have a strictly lower priority than the preemptor.
``BACKFILL``  (Backfill policy) the head has waited past the threshold: victims are jobs behind
              it in the queue order that started while it was pending.

A tenant's use *within its nominal quota* is guaranteed: another tenant's job may evict it for
none of the three reasons (with ``quotas=None`` nothing is guaranteed). Non-preemptible jobs
and pods younger than ``min_runtime`` are never victims.

Victim units: a gang job is evicted whole; a pod-level job one pod at a time. Candidates are
tried lowest priority first, then most recently started. The search (:func:`find_victims`)
removes candidates in that order on the snapshot, inside a transaction, until the preemptor's
quota, readiness and **real placement** (topology included) succeed; then it puts back every
victim it can do without (newest choice first), so the set is minimal: no victim can be spared.
If even all candidates together do not make the job fit, nothing is evicted (conservative).
Everything happens in rolled-back snapshot transactions; only the answer leaves the search.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import attrs

from kant.errors import InvalidConfigError
from kant.model import Binding, PodId, VictimReason


def _nonneg(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0:
        raise InvalidConfigError(attribute.name, value, "must be a finite number >= 0")


def _opt_pos_int(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise InvalidConfigError(attribute.name, value, "must be None or an int >= 1")


@attrs.frozen(kw_only=True)
class PreemptionPolicy:
    """Which preemptions are enabled, and the conservative limits.

    ``min_runtime``: pods running for less than this many seconds are never victims.
    ``max_preemptors_per_cycle``: at most this many jobs preempt in one cycle (None: no cap).
    ``max_searches_per_cycle``: at most this many victim searches per cycle, successful or
    not, by the first jobs in queue order that could preempt (None: no cap).
    ``max_candidates``: consider at most this many victim units per preemptor (the first ones
    in victim order); bounds the search on huge clusters (None: all).
    """

    priority: bool = True
    reclaim: bool = True
    backfill: bool = True
    min_runtime: float = attrs.field(default=0.0, validator=_nonneg)
    max_preemptors_per_cycle: int | None = attrs.field(default=None, validator=_opt_pos_int)
    max_searches_per_cycle: int | None = attrs.field(default=4, validator=_opt_pos_int)
    max_candidates: int | None = attrs.field(default=None, validator=_opt_pos_int)

    @property
    def enabled(self) -> bool:
        return self.priority or self.reclaim or self.backfill


@attrs.frozen(kw_only=True)
class VictimUnit:
    """What one eviction removes: a whole gang job, or one pod of a pod-level job."""

    job: str
    tenant: str
    priority: int
    started_at: float
    seq: int
    pods: tuple[PodId, ...]
    bindings: tuple[Binding, ...]
    usage: tuple[tuple[str, int], ...]  # (GPU model, milli) it is charged for
    pools: frozenset[int]

    def order(self) -> tuple[int, float, int, str, int]:
        """Victim preference: lowest priority first, then most recently started (then the
        later submission, then pod order: a total order)."""
        first = min(self.pods)
        return (self.priority, -self.started_at, -self.seq, first.role, first.index)


@attrs.frozen(kw_only=True)
class Preemptor:
    """The facts about a would-be preemptor that the eligibility rules read."""

    job: str
    tenant: str
    priority: int
    within_nominal: bool
    backfill: bool  # may preempt backfilled jobs (Backfill head past its threshold)
    pending_since: float
    order_key: tuple[Any, ...]


def victim_reason(
    pre: Preemptor,
    unit: VictimUnit,
    unit_key: tuple[Any, ...],
    *,
    policy: PreemptionPolicy,
    borrowing: Callable[[str, str], bool],
) -> VictimReason | None:
    """Why ``unit`` may be evicted for ``pre``, or None. ``borrowing(tenant, model)`` says
    whether a tenant uses more than its nominal quota of a model right now (with the victims
    chosen so far removed); ``unit_key`` is the victim job's queue order key."""
    if unit.job == pre.job:
        return None
    if unit.tenant != pre.tenant and not any(borrowing(unit.tenant, m) for m, _ in unit.usage):
        return None  # another tenant's guaranteed (nominal) share is never preempted
    if policy.reclaim and unit.tenant != pre.tenant and pre.within_nominal:
        return VictimReason.RECLAIM
    if policy.priority and unit.priority < pre.priority:
        return VictimReason.PRIORITY
    if (
        policy.backfill
        and pre.backfill
        and unit_key > pre.order_key
        and unit.started_at >= pre.pending_since
    ):
        return VictimReason.BACKFILL
    return None


class Scope(Protocol):
    def commit(self) -> None: ...


class WhatIf(Protocol):
    """The snapshot-side operations the search needs (implemented by the cycle)."""

    def scope(self) -> AbstractContextManager[Scope]:
        """A (nestable) transaction over the snapshot and the quota ledger: everything done
        inside is undone when it ends, unless committed into the enclosing one."""
        ...

    def remove(self, unit: VictimUnit) -> None:
        """Free what ``unit`` holds (snapshot and quota ledger)."""
        ...

    def restore(self, unit: VictimUnit) -> None:
        """Take back exactly what :meth:`remove` freed for ``unit``."""
        ...

    def ready(self) -> bool:
        """Cheap necessary check (quota + readiness) for the preemptor."""
        ...

    def place(self) -> tuple[Binding, ...] | None:
        """Try the real placement (undone afterwards); its bindings, or None."""
        ...


def find_victims(
    candidates: Iterable[VictimUnit],
    eligible: Callable[[VictimUnit, Sequence[VictimUnit]], VictimReason | None],
    whatif: WhatIf,
) -> tuple[list[tuple[VictimUnit, VictimReason]], tuple[Binding, ...]] | None:
    """The minimal victim set (see the module docstring) and the placement it yields.

    ``candidates`` are in victim order; ``eligible(unit, chosen)`` re-checks a candidate given
    the victims chosen before it (a borrower stops being one once enough of it is evicted).

    1. Greedy: remove candidates in victim order; once the cheap check (quota + readiness)
       passes, try the real placement at geometrically spaced points (after 1, 2, 4...
       further removals) and once more with every candidate removed. No fit: None.
    2. Minimise: the victims on nodes the found placement does not use are spared at once if
       the job still fits without them; then the others are spared where possible, newest
       choice first, in halving chunks (a whole chunk when the job still fits without it,
       else each half). Every victim left is needed: sparing any one of them breaks the fit.

    Cost: O(k) removals and O(log k) placements for step 1, O(m log k) placements for step 2
    (k candidates tried, m victims kept)."""
    # 1. Greedy.
    with whatif.scope():
        chosen: list[tuple[VictimUnit, VictimReason]] = []
        units: list[VictimUnit] = []
        fit: tuple[Binding, ...] | None = None
        checked_at = 0
        next_check = 1
        for c in candidates:
            why = eligible(c, units)
            if why is None:
                continue
            whatif.remove(c)
            chosen.append((c, why))
            units.append(c)
            if len(units) < next_check or not whatif.ready():
                continue
            checked_at = len(units)
            fit = whatif.place()
            if fit is not None:
                break
            next_check = 2 * len(units)
        if fit is None and chosen and checked_at < len(units) and whatif.ready():
            fit = whatif.place()
    if fit is None:
        return None
    # 2. Minimise. Victims on nodes the found placement does not use are likely not needed:
    #    first see whether the others alone suffice; then spare what can be spared.
    used = {b.node for b in fit}
    order = list(range(len(chosen) - 1, -1, -1))
    near = [i for i in order if any(b.node in used for b in chosen[i][0].bindings)]
    away = [i for i in order if not any(b.node in used for b in chosen[i][0].bindings)]
    spared: set[int] = set()

    def spare(idxs: list[int], known_bad: bool) -> None:
        if not idxs:
            return
        if not known_bad:
            with whatif.scope() as s:
                for i in idxs:
                    whatif.restore(chosen[i][0])
                if whatif.ready() and whatif.place() is not None:
                    s.commit()
                    spared.update(idxs)
                    return
        if len(idxs) > 1:
            mid = len(idxs) // 2
            spare(idxs[:mid], False)
            spare(idxs[mid:], False)

    with whatif.scope():
        for i in near:
            whatif.remove(chosen[i][0])
        if away and not (whatif.ready() and whatif.place() is not None):
            for i in away:
                whatif.remove(chosen[i][0])
            spare(away, True)
        else:
            spared.update(away)
        spare(near, len(spared) == len(away))
        bindings = whatif.place() if whatif.ready() else None
    if bindings is None:  # cannot happen: the same set fitted above
        return None
    return [cw for i, cw in enumerate(chosen) if i not in spared], bindings
