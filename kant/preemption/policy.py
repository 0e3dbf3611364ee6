"""Which preemptions are enabled, their conservative limits, and the victim rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from kant.contracts import VictimRule
from kant.errors import InvalidConfigError, ValidationError
from kant.model import (
    VictimReason,
    finite_nonneg,
    instance_of,
    nonneg_or_inf,
    number,
    opt_pos_int,
)
from kant.preemption.rules import Preemptor, VictimView, builtin_reason


def _to_rules(v: Any) -> Any:
    """A sequence of rules as a tuple; anything else (one rule, a string) as given, for
    :func:`_check_rules` to refuse."""
    if callable(v) or isinstance(v, str | bytes):
        return v
    try:
        return tuple(v)
    except TypeError:
        return v


def _check_rules(_inst: Any, _attr: Any, v: Any) -> None:
    """``rules`` must be a sequence of callables: InvalidConfigError naming the first that
    is not (``rules[i]``), or ``rules`` itself when it is not a sequence."""
    if not isinstance(v, tuple):
        raise InvalidConfigError(
            "rules", v, "must be a sequence of victim rules (a single rule goes in a list)"
        )
    for i, rule in enumerate(v):
        if not callable(rule):
            raise InvalidConfigError(
                f"rules[{i}]",
                rule,
                "must be a victim rule: a callable (preemptor, unit, borrowing)",
            )


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
    rules (a rule returning ``False`` -- or numpy's ``False_``, or ``0`` -- protects a unit;
    one returning a reason makes it eligible; ``None`` or ``True`` -- ``True_``, ``1`` --
    defers to the next rule; any other answer raises ValidationError naming the rule). A
    rule that is not callable is refused here (InvalidConfigError naming ``rules[i]``).

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

    priority: bool = attrs.field(default=True, validator=instance_of(InvalidConfigError, bool))
    reclaim: bool = attrs.field(default=True, validator=instance_of(InvalidConfigError, bool))
    backfill: bool = attrs.field(default=True, validator=instance_of(InvalidConfigError, bool))
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
    rules: tuple[VictimRule, ...] = attrs.field(
        default=(), converter=_to_rules, validator=_check_rules
    )
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
            if verdict is None or verdict is True:
                continue
            if verdict is False:
                return None
            if isinstance(verdict, VictimReason):
                return verdict
            if _bool_like(verdict):  # numpy's bools, 0 and 1
                if not verdict:
                    return None
                continue
            raise ValidationError(
                "rules",
                _rule_name(rule),
                f"a victim rule returned {verdict!r}: it must return a VictimReason "
                "(eligible), False (protected), True or None (ask the next rule)",
            )
        return builtin_reason(self, pre, unit, exposed=exposed)


def _bool_like(v: Any) -> bool:
    """Is ``v`` a boolean other than Python's: a numpy bool, or an integer 0 or 1?"""
    if isinstance(v, np.bool_):
        return True
    return isinstance(v, int | np.integer) and not isinstance(v, bool) and v in (0, 1)


def _rule_name(rule: Any) -> str:
    return str(getattr(rule, "__qualname__", None) or type(rule).__name__)
