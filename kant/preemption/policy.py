"""Which preemptions are enabled, their conservative limits, and the victim rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from kant.contracts import VictimRule
from kant.errors import InvalidConfigError
from kant.model import (
    VictimReason,
    finite_nonneg,
    instance_of,
    nonneg_or_inf,
    number,
    opt_pos_int,
)
from kant.preemption.rules import Preemptor, VictimView, builtin_reason


@attrs.frozen(kw_only=True)
class PreemptionPolicy:
    """Which preemptions are enabled (paper 3.2.3), and the conservative limits.

    ``priority``, ``reclaim``, ``backfill``: the three kinds (see :mod:`kant.preemption`).
    ``min_runtime``: pods running for less than this many seconds are never victims.
    ``max_preemptors_per_cycle``: at most this many jobs preempt in one cycle (None: no cap).
    ``max_searches_per_cycle``: at most this many victim searches per cycle, successful or
    not, by the first jobs in queue order that could preempt (None: no cap).
    ``max_candidates``: consider at most this many victim units per preemptor (the first ones
    in victim order); bounds the search on huge clusters (None: all).
    ``rules``: extra :class:`kant.contracts.VictimRule` callables, asked before the built-in
    rules (a rule returning ``False`` protects a unit; one returning a reason makes it
    eligible; ``None`` defers).

    Options users of the peers expect (``docs/qsch.md`` has a table with examples):

    ``borrow_within_cohort``: may a preemptor that will *borrow* (its tenant ends above its
    nominal quota) priority-preempt another tenant's borrowed use? Default False, as Kueue's
    ``borrowWithinCohort`` off and KAI-Scheduler's reclaim; True allows it for victims of a
    strictly lower priority that is at most ``borrow_priority_threshold`` (None: any lower
    priority), as Kueue's ``borrowWithinCohort: LowerPriority, maxPriorityThreshold``.
    ``reclaim_others_first``: a reclaiming preemptor takes other tenants' borrowed use before
    its own tenant's lower-priority work (Kueue's candidate order; its own work is still taken
    when it is needed to get within nominal). False: the plain victim order for every
    candidate (lowest priority, newest first).
    ``cascade_window``: a job evicted by preemption may not preempt until it has run again or
    this many seconds have passed since its eviction (default 3600: the paper's "no cascades"
    across cycles, finite so that a job whose only way in is preemption cannot starve;
    ``inf``: never before it runs again). ``0`` turns the guard off (Kueue behaves so).
    """

    priority: bool = True
    reclaim: bool = True
    backfill: bool = True
    min_runtime: float = attrs.field(default=0.0, validator=finite_nonneg(InvalidConfigError))
    max_preemptors_per_cycle: int | None = attrs.field(
        default=None, validator=opt_pos_int(InvalidConfigError)
    )
    max_searches_per_cycle: int | None = attrs.field(
        default=4, validator=opt_pos_int(InvalidConfigError)
    )
    max_candidates: int | None = attrs.field(
        default=None, validator=opt_pos_int(InvalidConfigError)
    )
    rules: tuple[VictimRule, ...] = attrs.field(default=(), converter=tuple)
    borrow_within_cohort: bool = attrs.field(
        default=False, validator=instance_of(InvalidConfigError, bool)
    )
    borrow_priority_threshold: int | None = attrs.field(
        default=None, validator=number(InvalidConfigError, integer=True, optional=True)
    )
    reclaim_others_first: bool = attrs.field(
        default=True, validator=instance_of(InvalidConfigError, bool)
    )
    cascade_window: float = attrs.field(default=3600.0, validator=nonneg_or_inf(InvalidConfigError))

    def may_borrow_from(self, preemptor_priority: int, victim_priority: int) -> bool:
        """May a borrowing preemptor of ``preemptor_priority`` priority-preempt another
        tenant's borrowed unit of ``victim_priority`` (``borrow_within_cohort``)?"""
        thr = self.borrow_priority_threshold
        return (
            self.borrow_within_cohort
            and self.priority
            and victim_priority < preemptor_priority
            and (thr is None or victim_priority <= thr)
        )

    @property
    def enabled(self) -> bool:
        """Is any kind of preemption on?"""
        return self.priority or self.reclaim or self.backfill

    def reason(
        self,
        pre: Preemptor,
        unit: VictimView,
        *,
        exposed: bool,
        borrowing: Callable[[str, str], bool],
    ) -> VictimReason | None:
        """Why ``unit`` may be evicted for ``pre``, or None: the user rules first, then the
        built-in ones (:func:`kant.preemption.rules.builtin_reason`). ``exposed``: the
        unit's tenant borrows (uses more than its nominal quota) where it matters."""
        for rule in self.rules:
            verdict: Any = rule(pre, unit, borrowing)
            if verdict is False:
                return None
            if isinstance(verdict, VictimReason):
                return verdict
        return builtin_reason(self, pre, unit, exposed=exposed)
