"""Shared builders for the QSCH scenario tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kant.admission import Admitter, Quota
from kant.cycle import CycleResult
from kant.model import PodId
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Backoff, JobPhase, Queue
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder


def nodes(n: int, *, leaves: int = 1, model: str = "H100", gpus: int = 8) -> ClusterState:
    """``n`` nodes spread over ``leaves`` leaves (names ``lf<k>-n<i>``)."""
    b = ClusterBuilder()
    per = n // leaves
    for k in range(leaves):
        b.leaf(f"lf{k}", nodes=per, model=model, gpus=gpus)
    return b.build()


def scheduler(
    cluster: ClusterState,
    *,
    policy: Any = "best-effort-fifo",
    quotas: Iterable[Quota] | None = None,
    modes: dict[str, str] | None = None,
    preemption: PreemptionPolicy | None = None,
    backoff: Backoff | None = None,
    strategy: str = "ebinpack",
) -> Scheduler:
    return Scheduler(
        cluster,
        queue=Queue(backoff=backoff),
        admitter=Admitter(quotas, modes=modes),
        placer=Placer(strategy),
        policy=policy,
        preemption=preemption,
    )


def placed(r: CycleResult) -> list[str]:
    return list(r.placed)


def victim_jobs(r: CycleResult) -> list[str]:
    return [v.job for v in r.victims]


def pod(job: str, index: int = 0, role: str = "worker") -> PodId:
    return PodId(job=job, role=role, index=index)


def evict_victims(s: Scheduler, r: CycleResult, now: float) -> None:
    """The orchestrator stops every victim of ``r`` and reports it."""
    for v in r.victims:
        for p in v.pods:
            s.pod_evicted(p, now)


def finish(s: Scheduler, job_id: str, now: float) -> None:
    for p in s.queue.status(job_id).running:
        s.pod_finished(p, now)


def finish_due(s: Scheduler, ends: dict[str, float], now: float) -> None:
    """Finish every running job of ``ends`` whose end time has come (and forget it), in job
    id order."""
    for jid, end in sorted(ends.items()):
        if end <= now and s.queue.status(jid).phase is JobPhase.RUNNING:
            finish(s, jid, now=now)
            del ends[jid]
