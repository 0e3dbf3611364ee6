"""Best-Effort FIFO (paper Table 1): later jobs that fit pass a blocked head."""

from __future__ import annotations

import math
from typing import ClassVar

import attrs

from kant.contracts import GO, CandidateView, CycleContext, Gate, PolicyRun, Reservation
from kant.model import Reason


class _BestEffortRun:
    def gate(self, job: CandidateView) -> Gate:
        return GO

    def explain(self, job: CandidateView, reason: Reason) -> Reason:
        return reason

    def failed(self, job: CandidateView, reason: Reason) -> bool:
        return False

    def reservation(self) -> Reservation | None:
        return None

    def time_horizon(self) -> float:
        return math.inf  # time is not read


@attrs.frozen
class BestEffortFIFO:
    """A blocked head does not stop later jobs: any job that fits now is placed. High
    throughput; a large head can starve under a stream of small jobs."""

    name: str = "best-effort-fifo"
    # every job is tried on its own; time is not read (see QueueingPolicy)
    arrivals_unblock_none: ClassVar[bool] = True

    def begin(self, ctx: CycleContext) -> PolicyRun:
        """A stateless run: every job is tried."""
        return _BestEffortRun()
