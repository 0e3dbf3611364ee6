"""Backfill (paper Table 1 and 3.2.3): best effort, and a head blocked past a threshold may
preempt the jobs that backfilled past it."""

from __future__ import annotations

import math

import attrs

from kant.contracts import GO, CandidateView, CycleContext, Gate, PolicyRun, Reservation
from kant.errors import InvalidConfigError
from kant.model import BLOCKING_CODES, Reason, ReasonCode, nonneg_or_inf


class _BackfillRun:
    def __init__(self, policy: Backfill, ctx: CycleContext) -> None:
        self.threshold = policy.threshold
        self.now = ctx.now
        self.heads_may_preempt = ctx.heads_may_preempt
        self.head: str | None = None
        self.quota_heads: dict[str, str] = {}  # tenant -> its first job failing on quota
        self.wake = math.inf  # the first time a head not yet past the threshold passes it

    def gate(self, job: CandidateView) -> Gate:
        return GO

    def explain(self, job: CandidateView, reason: Reason) -> Reason:
        return reason

    def failed(self, job: CandidateView, reason: Reason) -> bool:
        if reason.code is ReasonCode.QUOTA_EXCEEDED:
            # the guarantee within a tenant's quota: its first job in order that quota
            # refuses is the tenant's head, and may preempt what backfilled past it
            if job.job.tenant in self.quota_heads:
                return False
            self.quota_heads[job.job.tenant] = job.id
            return self._past(job)
        if self.head is not None or reason.code not in BLOCKING_CODES:
            return False
        self.head = job.id
        return self._past(job)

    def _past(self, job: CandidateView) -> bool:
        """Has the head ``job`` waited the threshold? (If not, when it will have.)"""
        since = job.pending_since
        if self.now - since >= self.threshold:
            return True
        self.wake = min(self.wake, since + self.threshold)
        return False

    def time_horizon(self) -> float:
        """The first time a head of this run passes its threshold (it may then preempt):
        the only time the run reads; never when the cycle's preemption rules give a head
        nothing by it (``ctx.heads_may_preempt``)."""
        return self.wake if self.heads_may_preempt else math.inf

    def reservation(self) -> Reservation | None:
        return None


@attrs.frozen(kw_only=True)
class Backfill:
    """Best effort, but the head (the first job in order that does not fit) may, once it has
    waited ``threshold`` seconds, preempt *backfilled* jobs: running jobs behind it in the
    queue order that started while it was pending. The same holds within each tenant's
    quota: a tenant's first job in order that its quota refuses is that tenant's head, with
    the same right once it has waited ``threshold`` (so a large job is not starved by its own
    tenant's stream of small ones). A job that can never fit (``UNSATISFIABLE``) is never a
    head."""

    threshold: float = attrs.field(default=3600.0, validator=nonneg_or_inf(InvalidConfigError))
    name: str = "backfill"

    def begin(self, ctx: CycleContext) -> PolicyRun:
        """A run that marks the first blocked job as the head."""
        return _BackfillRun(self, ctx)
