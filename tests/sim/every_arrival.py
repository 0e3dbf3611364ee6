"""The reference the simulator's arrival skips are checked against: the built-in policies
without ``arrivals_unblock_none``, and a scheduler whose cycles report no closed gate. With
both, every arrival runs a cycle."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from kant.queueing import BestEffortFIFO, EasyBackfill, StrictFIFO
from kant.scheduler import Scheduler


@attrs.frozen
class _EveryArrivalBE(BestEffortFIFO):
    """Best-Effort FIFO without the declaration."""

    arrivals_unblock_none: ClassVar[bool] = False


@attrs.frozen
class _EveryArrivalStrict(StrictFIFO):
    """Strict FIFO without the declaration (its closed gate still saves cycles)."""

    arrivals_unblock_none: ClassVar[bool] = False


@attrs.frozen(kw_only=True)
class _EveryArrivalEasy(EasyBackfill):
    """EASY backfill without the declaration."""

    arrivals_unblock_none: ClassVar[bool] = False


REFERENCE = {
    "best-effort-fifo": _EveryArrivalBE(),
    "strict-fifo": _EveryArrivalStrict(),
    "easy-backfill": _EveryArrivalEasy(),
}
"""Policy name -> the same policy without ``arrivals_unblock_none``."""


def open_gate(s: Scheduler) -> Scheduler:
    """``s`` with every cycle reported as if no gate closed (``closed_after`` None)."""
    schedule = s.schedule

    def no_gate(now: float) -> Any:
        return attrs.evolve(schedule(now), closed_after=None)

    s.schedule = no_gate  # type: ignore[method-assign]
    return s
