"""Applying a cycle's result to the truth: :func:`apply` and its :class:`ApplyReport`."""

from __future__ import annotations

import attrs

from kant.admission.quota import Admitter
from kant.cycle import CycleResult
from kant.errors import KantError
from kant.model import Binding, PodId
from kant.queueing import Queue
from kant.state import ClusterState


@attrs.frozen(kw_only=True)
class ApplyReport:
    """What :func:`apply` did: jobs bound, jobs whose bindings no longer fitted the cluster
    (left pending, no failure counted), victim pods marked terminating."""

    bound: tuple[str, ...]
    stale: tuple[str, ...]
    terminating: tuple[PodId, ...]


def apply(
    result: CycleResult,
    cluster: ClusterState,
    queue: Queue,
    admitter: Admitter,
    now: float,
) -> ApplyReport:
    """Record ``result``: assume its bindings (bind in ``cluster``, charge quota, jobs
    RUNNING), mark its victims terminating, keep its nominations, store pending reasons.

    A job whose bindings no longer fit (the cluster changed since the cycle) is bound not at
    all and stays pending; a job no longer waiting (cancelled meanwhile) is skipped."""
    bound: list[str] = []
    stale: list[str] = []
    # 1. Bindings, job by job: all of a job's bindings or none.
    by_job: dict[str, list[Binding]] = {}
    for b in result.bindings:
        by_job.setdefault(b.pod.job, []).append(b)
    for jid, bs in by_job.items():
        e = queue.get(jid)
        if e is None or not e.schedulable or not {b.pod for b in bs} <= set(e.remaining()):
            stale.append(jid)
            continue
        done: list[Binding] = []
        try:
            for b in bs:
                cluster.bind(b)
                done.append(b)
        except KantError:
            for b in done:
                cluster.release(b.pod)
            stale.append(jid)
            continue
        for b in bs:
            admitter.charge(e.job.tenant, b, cluster.node(b.node).gpu_model)
        queue.mark_assigned(jid, [b.pod for b in bs], now)
        bound.append(jid)
    # 2. Victims: terminating until the orchestrator reports them gone.
    terminating: list[PodId] = []
    for v in result.victims:
        ve = queue.get(v.job)
        if ve is None:
            continue
        pods = [p for p in v.pods if p in ve.assigned and p not in ve.terminating]
        queue.mark_terminating(pods, v.preemptor)
        terminating.extend(pods)
    # 3. Nominations made or dropped.
    placed = set(bound)
    for nom in result.nominations:
        pe = queue.get(nom.job)
        if pe is not None and pe.schedulable and nom.job not in placed:
            queue.set_nomination(nom, nom.job)
    for jid in result.dropped_nominations:
        if jid in queue and jid not in placed:
            queue.set_nomination(None, jid)
    # 4. Why the others wait.
    for jid, reason in result.pending.items():
        queue.set_reason(jid, reason)
    return ApplyReport(bound=tuple(bound), stale=tuple(stale), terminating=tuple(terminating))
