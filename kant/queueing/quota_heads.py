"""The reservation-based policies' hold within each tenant's quota: a tenant's first job that
its quota refuses is not pushed back by the tenant's later jobs (EASY and conservative
backfill share it)."""

from __future__ import annotations

from kant.contracts import CandidateView, CycleContext, Gate
from kant.model import Job, Reason, ReasonCode


class QuotaHeads:
    """Per tenant, its first job in order that quota refused (its *quota head*), when the
    running jobs' expected ends are expected to give it its quota
    (:meth:`~kant.contracts.CycleContext.quota_start`), and the GPU models it may use. A
    later job of that tenant that may use one of those models waits as ``RESERVED`` unless
    it ends (its estimate, else ``default_runtime``) by then; when that time is unknown the
    tenant's jobs go on as best effort. One per policy run."""

    def __init__(self, ctx: CycleContext, default_runtime: float | None) -> None:
        self.ctx = ctx
        self.default_runtime = default_runtime
        # tenant -> (its quota head, when quota is expected to admit it, the GPU models it
        # may use: None, any)
        self.heads: dict[str, tuple[str, float | None, frozenset[str] | None]] = {}

    def gate(self, job: CandidateView) -> Gate | None:
        """The skip for a job that would take quota its tenant's head waits for, else None.
        A job holding a nomination is never skipped: the quota it needs is held for it
        already (its hold may even be what made the head wait), and gating it would drop
        the nomination once its victims left, to preempt for it again the next cycle."""
        qh = self.heads.get(job.job.tenant)
        if qh is None or qh[1] is None or qh[0] == job.id or self.ctx.is_nominated(job):
            return None
        est = job.job.runtime_estimate
        if est is None:
            est = self.default_runtime
        if (est is None or self.ctx.now + est > qh[1]) and _share_models(qh[2], job.job):
            return Gate(
                skip=Reason(
                    code=ReasonCode.RESERVED,
                    message=(
                        f"would delay {qh[0]}, first of tenant {job.job.tenant!r} waiting "
                        f"for quota, expected at {qh[1]:g}"
                    ),
                )
            )
        return None

    def failed(self, job: CandidateView, reason: Reason) -> None:
        """A job was not placed for ``reason``: the tenant's first refused by quota is its
        head."""
        tenant = job.job.tenant
        if reason.code is ReasonCode.QUOTA_EXCEEDED and tenant not in self.heads:
            start = self.ctx.quota_start(job, default_runtime=self.default_runtime)
            self.heads[tenant] = (job.id, start, _gpu_models(job.job))


def _gpu_models(job: Job) -> frozenset[str] | None:
    """The GPU models the job's GPU roles may use (None: any; empty: it asks no GPU)."""
    out: set[str] = set()
    for role in job.roles:
        if role.resources.total_milli:
            if not role.gpu_models:
                return None
            out.update(role.gpu_models)
    return frozenset(out)


def _share_models(head: frozenset[str] | None, job: Job) -> bool:
    """May ``job`` use a GPU model the quota head may use (so take quota it waits for)?
    Quota is per tenant and GPU model, and a cohort lends per model: a job on other models
    cannot delay the head."""
    mine = _gpu_models(job)
    if mine is None:
        return head is None or bool(head)
    return bool(mine) and (head is None or not mine.isdisjoint(head))
