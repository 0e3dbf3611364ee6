"""Conservative backfill (Slurm's backfill): a reservation for each of the first ``depth``
blocked jobs, and no job starts if it would delay any of them: a job uses a reserved device
only when every reservation booking it starts at or after the job's expected end."""

from __future__ import annotations

import math

import attrs

from kant.contracts import GO, CandidateView, CycleContext, Gate, PolicyRun, Reservation
from kant.errors import InvalidConfigError
from kant.model import BLOCKING_CODES, Reason, ReasonCode, number
from kant.queueing.easy import _DEFAULT_RUNTIME, _USE_RESERVED
from kant.queueing.quota_heads import QuotaHeads


class _ConservativeRun:
    def __init__(self, policy: ConservativeBackfill, ctx: CycleContext) -> None:
        self.ctx = ctx
        self.default_runtime = policy.default_runtime
        self.depth = policy.depth
        self.made: list[Reservation] = []
        self.first = math.inf  # the earliest and the latest reserved start
        self.last = -math.inf
        self.asked = 0  # blocked jobs a reservation was computed for (at most depth)
        self.todo: CandidateView | None = None  # blocked, to reserve for at the next gate
        self.used_reserved: str | None = None
        self.quota = QuotaHeads(ctx, policy.default_runtime)

    def _reserve_pending(self) -> None:
        """Reserve for the last blocked job, lazily: it may have preempted meanwhile (its
        nomination is then its reservation)."""
        job, self.todo = self.todo, None
        if job is None or self.ctx.is_nominated(job):
            return
        self.asked += 1
        # placed around the earlier reservations over time: no two share a device while
        # both would run; a pod-level job booked pod by pod, each pod from when it fits (as
        # the cycles to come start it)
        r = self.ctx.forecast(
            job, default_runtime=self.default_runtime, after=self.made, by_pod=True
        )
        if r is not None:
            self.ctx.reserve(r)  # its free devices held from now on
            self.made.append(r)
            self.first = min(self.first, r.start)
            self.last = max(self.last, max(r.starts, default=r.start))

    def gate(self, job: CandidateView) -> Gate:
        skip = self.quota.gate(job)
        if skip is not None:
            return skip
        self._reserve_pending()
        self.used_reserved = None
        if not self.made:
            return GO
        end = self._end(job)
        # it may use a reserved device only if every reservation booking it starts at or
        # after the job's expected end (one with no known end uses none)
        if end is None or end > self.last:
            return GO
        if end <= self.first:
            self.used_reserved = job.id  # every reserved device is open to it
            return _USE_RESERVED
        return Gate(until=end)

    def _end(self, job: CandidateView) -> float | None:
        """The job's expected end if it started now (its estimate, else the default); None
        when unknown."""
        est = job.job.runtime_estimate
        if est is None:
            est = self.default_runtime
        return None if est is None else self.ctx.now + est

    def explain(self, job: CandidateView, reason: Reason) -> Reason:
        if (
            self.made
            and self.used_reserved != job.id
            and reason.code in BLOCKING_CODES
            and self.ctx.fits_unreserved(job)
        ):
            end = self._end(job)
            delayed = [r for r in self.made if end is None or r.start < end]
            if delayed:
                first = min(delayed, key=lambda r: (r.start, r.job))
                return Reason(
                    code=ReasonCode.RESERVED,
                    message=(
                        f"would delay {len(delayed)} reserved jobs, the first {first.job} "
                        f"reserved to start at {first.start:g}"
                    ),
                )
        return reason

    def failed(self, job: CandidateView, reason: Reason) -> bool:
        self.quota.failed(job, reason)
        # a job that waits only because it would delay a reservation gets one too
        if (reason.code in BLOCKING_CODES or reason.code is ReasonCode.RESERVED) and (
            self.asked < self.depth
        ):
            self._reserve_pending()
            self.todo = job
        return False

    def reservation(self) -> Reservation | None:
        self._reserve_pending()
        return self.made[0] if self.made else None

    def reservations(self) -> tuple[Reservation, ...]:
        """Every reservation this run made, in queue order."""
        self._reserve_pending()
        return tuple(self.made)


@attrs.frozen(kw_only=True)
class ConservativeBackfill:
    """Conservative backfill, as Slurm's backfill scheduler does it. Each of the first
    ``depth`` jobs in order that does not fit (blocked for resources) gets a reservation: the
    placement it would get at the earliest time the running jobs' expected ends (start +
    ``runtime_estimate``) free enough resources, around the earlier reservations over time:
    each books its devices from its start to its expected end. A later job may start only if
    it delays none of them: it may use a reserved device only when every reservation booking
    that device starts at or after the job's expected end (now plus its estimate, else
    ``default_runtime``; a job with neither uses no reserved device). A job that would fit
    with every reserved device free but waits by this rule is ``RESERVED``.

    Compared with :class:`~kant.queueing.EasyBackfill` (only the head has a reservation),
    more jobs are protected from being pushed back, at the cost of fewer backfilled jobs and
    up to ``depth`` start forecasts per cycle (Slurm's ``bf_max_job_test`` bounds the same
    work). Jobs without an estimate use ``default_runtime``; ``None`` means unknown (such a
    running job never ends, such a waiting job never uses reserved devices).
    """

    default_runtime: float | None = attrs.field(default=None, validator=_DEFAULT_RUNTIME)
    depth: int = attrs.field(default=16, validator=number(InvalidConfigError, low=1, integer=True))
    name: str = "conservative-backfill"

    def begin(self, ctx: CycleContext) -> PolicyRun:
        """A run that reserves for each of the first ``depth`` blocked jobs."""
        return _ConservativeRun(self, ctx)
