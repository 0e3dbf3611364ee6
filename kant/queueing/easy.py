"""EASY backfill (the EASY scheduler of Lifka, 1995: only the head holds a reservation)."""

from __future__ import annotations

from typing import ClassVar

import attrs

from kant.contracts import GO, CandidateView, CycleContext, Gate, PolicyRun, Reservation
from kant.errors import InvalidConfigError
from kant.model import BLOCKING_CODES, Reason, ReasonCode, number
from kant.queueing.quota_heads import QuotaHeads

_DEFAULT_RUNTIME = number(
    InvalidConfigError, low=0, low_inclusive=False, finite=True, optional=True
)
"""A reservation policy's ``default_runtime``: None, or a finite number of seconds > 0."""

_USE_RESERVED = Gate(use_reserved=True)
"""Try the job with the reserved devices too (it ends before they are needed)."""


class _EasyRun:
    def __init__(self, policy: EasyBackfill, ctx: CycleContext) -> None:
        self.ctx = ctx
        self.default_runtime = policy.default_runtime
        self.keep = policy.keep_reservation
        self.head: CandidateView | None = None
        self.reserved = False
        self.made: Reservation | None = None
        self.used_reserved: str | None = None  # the job whose gate last opened the reservation
        self.quota = QuotaHeads(ctx, policy.default_runtime)

    def gate(self, job: CandidateView) -> Gate:
        skip = self.quota.gate(job)
        if skip is not None:
            return skip
        return self._capacity_gate(job)

    def _capacity_gate(self, job: CandidateView) -> Gate:
        if self.head is not None and not self.reserved:
            # reserve lazily: the head may have preempted meanwhile, and its nomination is
            # then its reservation (the next blocked job becomes the head)
            if self.ctx.is_nominated(self.head):
                self.head = None
            else:
                self.reserved = True
                self.made = self.ctx.forecast(
                    self.head, default_runtime=self.default_runtime, keep=self.keep
                )
                if self.made is not None:
                    self.ctx.reserve(self.made)
        self.used_reserved = None
        if self.made is None:
            return GO
        est = job.job.runtime_estimate
        if est is None:
            est = self.default_runtime
        if est is not None and self.ctx.now + est <= self.made.start:
            self.used_reserved = job.id
            return _USE_RESERVED
        return GO

    def explain(self, job: CandidateView, reason: Reason) -> Reason:
        r = self.made
        if (
            r is not None
            and self.used_reserved != job.id
            and r.job != job.id
            and reason.code in BLOCKING_CODES
            and self.ctx.fits_unreserved(job)
        ):
            return Reason(
                code=ReasonCode.RESERVED,
                message=f"would delay {r.job}, reserved to start at {r.start:g}",
            )
        return reason

    def failed(self, job: CandidateView, reason: Reason) -> bool:
        self.quota.failed(job, reason)
        if self.head is None and reason.code in BLOCKING_CODES:
            self.head = job
        return False

    def reservation(self) -> Reservation | None:
        return self.made


@attrs.frozen(kw_only=True)
class EasyBackfill:
    """EASY backfill. The head (first job in order that does not fit) gets a reservation: the
    placement it would get at the earliest time the running jobs' expected ends (start +
    ``runtime_estimate``) free enough resources. A later job may start if it ends before that
    time (its own estimate), or if it fits without the reserved devices. Only the head holds
    a reservation (Slurm's backfill, by contrast, reserves for many jobs).

    Jobs without an estimate use ``default_runtime``; ``None`` means "unknown": such a
    running job is assumed never to end, and such a waiting job never uses reserved devices.
    If no reservation can be computed at all, the cycle goes on as best effort.

    The same holds within each tenant's quota: a tenant's first job in order that its quota
    refuses holds the quota its running jobs' expected ends will free for it
    (:meth:`kant.contracts.CycleContext.quota_start`); a later job of that tenant that may use
    one of the head's GPU models starts only if it ends (its estimate) by then, else it waits
    as ``RESERVED`` (a job on other models, or asking no GPU, takes none of that quota). When
    that time is unknown the tenant's jobs go on as best effort. A job that can never fit
    (``UNSATISFIABLE``) is never a head.

    With ``keep_reservation`` (the default) the head's reservation is kept across cycles
    and reused while it must be the same (same head, quota decision, nodes and health, and
    the same jobs holding devices after now, or those plus jobs started since that end by the
    reserved start: :class:`kant.admission.forecast.KeptForecast`),
    as Slurm's backfill and Maui keep theirs; ``False`` computes it afresh every cycle. The
    decisions are the same either way.
    """

    default_runtime: float | None = attrs.field(default=None, validator=_DEFAULT_RUNTIME)
    keep_reservation: bool = attrs.field(default=True)
    name: str = "easy-backfill"
    # the last job in order changes no head and no reservation; time moves a reservation
    # only once a running job outlives its expected end (see QueueingPolicy)
    arrivals_unblock_none: ClassVar[bool] = True

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.keep_reservation, bool):
            raise InvalidConfigError("keep_reservation", self.keep_reservation, "must be a bool")

    def begin(self, ctx: CycleContext) -> PolicyRun:
        """A run that reserves for the first blocked job when the next job is gated."""
        return _EasyRun(self, ctx)
