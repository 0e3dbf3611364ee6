"""Which preemptions are enabled, their conservative limits, and the victim rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from kant.contracts import VictimRule
from kant.errors import InvalidConfigError
from kant.model import VictimReason, finite_nonneg, opt_pos_int
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
