"""Strict FIFO (paper Table 1): once a job cannot be placed, every job behind it waits."""

from __future__ import annotations

import math
from typing import ClassVar

import attrs

from kant.contracts import GO, CandidateView, CycleContext, Gate, PolicyRun, Reservation
from kant.model import BLOCKING_CODES, Reason, ReasonCode


class _StrictRun:
    def __init__(self, ctx: CycleContext) -> None:
        self.ctx = ctx
        self.blocked_by: str | None = None
        self.blocked: Gate | None = None  # one answer for every job behind the blocker
        self.tenant_blocked: dict[str, str] = {}
        # per blocker, the preemptors that may start now and pass its block: those that
        # evicted it, and those whose nominations alone keep it out (_block)
        self.passes: dict[str, frozenset[str]] = {}
        self.seen: set[str] = set()  # nominated jobs gated so far
        self.left: set[str] = set()  # preemptors passing the blocker, not gated yet

    def gate(self, job: CandidateView) -> Gate:
        jid = job.id
        if self.left:
            self.left.discard(jid)
        if self.ctx.is_nominated(job):
            self.seen.add(jid)
        blocker = self.blocked_by
        if blocker is not None and jid not in self.passes.get(blocker, ()):
            return self._behind()
        head = self.tenant_blocked.get(job.job.tenant)
        if head is not None and jid not in self.passes.get(head, ()):
            return Gate(
                skip=Reason(code=ReasonCode.BLOCKED, message=f"behind {head} (tenant quota)")
            )
        return GO

    def closed(self) -> Gate | None:
        """Once a job blocks, every job behind it gets the same answer: the cycle need not
        ask :meth:`gate` of each (a quota block is per tenant: the gate stays open). It stays
        open while a job that evicted the blocker and may start now is still to come."""
        return None if self.blocked_by is None or self.left else self._behind()

    def _behind(self) -> Gate:
        if self.blocked is None:
            self.blocked = Gate(
                skip=Reason(code=ReasonCode.BLOCKED, message=f"behind {self.blocked_by}")
            )
        return self.blocked

    def _block(self, job: CandidateView, tenant: str | None = None) -> frozenset[str]:
        """Record ``job`` as a blocker (of ``tenant``'s queue only, when given) and return
        the preemptors that may start now and pass its block: those that evicted it (it
        cannot fit while their nominations hold its room: were they held back, their
        nominations would be dropped, it would take the room back and be evicted again, for
        ever), and those still to come that preempted while it still ran (another
        preemptor evicted it since) when their nominations alone keep it out (held back,
        they would lose their nominations to it: their victims evicted for nothing)."""
        own = self.ctx.preempted_by(job)
        passing = own | self.ctx.held_out_by(job, tenant=tenant, besides=own | self.seen)
        if passing:
            self.passes[job.id] = passing
        return passing

    def explain(self, job: CandidateView, reason: Reason) -> Reason:
        return reason

    def failed(self, job: CandidateView, reason: Reason) -> bool:
        # (a preemptor passing a block and failing leaves the blocker as it was)
        if reason.code in BLOCKING_CODES:
            if self.blocked_by is None:
                self.blocked_by, self.blocked = job.id, None
                self.left = set(self._block(job) - self.seen)
        elif reason.code is ReasonCode.QUOTA_EXCEEDED:
            tenant = job.job.tenant
            if tenant not in self.tenant_blocked:
                self.tenant_blocked[tenant] = job.id
                self._block(job, tenant)
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
        return _StrictRun(ctx)
