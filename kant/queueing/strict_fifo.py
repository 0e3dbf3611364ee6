"""Strict FIFO (paper Table 1): once a job cannot be placed, every job behind it waits."""

from __future__ import annotations

import math
from typing import ClassVar

import attrs

from kant.contracts import GO, CandidateView, CycleContext, Gate, PolicyRun, Reservation
from kant.model import BLOCKING_CODES, Reason, ReasonCode


class _StrictRun:
    def __init__(self) -> None:
        self.blocked_by: str | None = None
        self.blocked: Gate | None = None  # one answer for every job behind the blocker
        self.tenant_blocked: dict[str, str] = {}

    def gate(self, job: CandidateView) -> Gate:
        if self.blocked_by is not None:
            return self._behind()
        head = self.tenant_blocked.get(job.job.tenant)
        if head is not None:
            return Gate(
                skip=Reason(code=ReasonCode.BLOCKED, message=f"behind {head} (tenant quota)")
            )
        return GO

    def closed(self) -> Gate | None:
        """Once a job blocks, every job behind it gets the same answer: the cycle need not
        ask :meth:`gate` of each (a quota block is per tenant: the gate stays open)."""
        return None if self.blocked_by is None else self._behind()

    def _behind(self) -> Gate:
        if self.blocked is None:
            self.blocked = Gate(
                skip=Reason(code=ReasonCode.BLOCKED, message=f"behind {self.blocked_by}")
            )
        return self.blocked

    def explain(self, job: CandidateView, reason: Reason) -> Reason:
        return reason

    def failed(self, job: CandidateView, reason: Reason) -> bool:
        if reason.code in BLOCKING_CODES:
            self.blocked_by, self.blocked = job.id, None
        elif reason.code is ReasonCode.QUOTA_EXCEEDED:
            self.tenant_blocked.setdefault(job.job.tenant, job.id)
        return False

    def reservation(self) -> Reservation | None:
        return None

    def time_horizon(self) -> float:
        return math.inf  # time is not read


@attrs.frozen
class StrictFIFO:
    """Jobs run strictly in queue order: once a job cannot be placed, every job behind it
    waits (``BLOCKED``); a quota failure blocks the rest of its tenant's queue only. Fair and
    simple; idles resources behind a large head."""

    name: str = "strict-fifo"
    # a new job can only close the gate; time is not read (see QueueingPolicy)
    arrivals_unblock_none: ClassVar[bool] = True

    def begin(self, ctx: CycleContext) -> PolicyRun:
        """A fresh run for one cycle (it keeps which job blocks, and per tenant)."""
        return _StrictRun()
