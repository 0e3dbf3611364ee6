"""Applying a cycle's result to the truth: :func:`apply` and its :class:`ApplyReport`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from kant.admission.quota import Admitter, QuotaLedger
from kant.cycle import CycleResult, check_parts, check_result, nomination_outlived
from kant.errors import KantError, ValidationError
from kant.model import (
    MILLI,
    Binding,
    Job,
    PodId,
    Reason,
    Resources,
    Victim,
    finite_time,
    is_int,
)
from kant.queueing import Entry, Nomination, Queue
from kant.state import ClusterState


@attrs.frozen(kw_only=True)
class ApplyReport:
    """What :func:`apply` did: jobs bound, jobs ``stale`` (no longer current: changed since
    the cycle, in backoff, or their bindings no longer fit the cluster or their tenant's
    quota; left as they are, no failure counted), victim pods marked terminating."""

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

    Only what is still current is applied: a job whose entry changed since the cycle (placed,
    requeued, finished, cancelled or resubmitted: its incarnation in ``result.seen`` differs),
    that is in backoff at ``now``, one of whose nodes was removed and added again or relabelled
    since the cycle (``result.membership``), whose placement read pods with labels or terms that
    came or went since (``result.pod_terms``), whose bindings no longer fit the cluster or whose
    tenant's quota no longer admits them, is bound not at all and listed in ``stale`` (it stays
    as it is, no failure counted). A nomination naming a node removed, or added again or
    relabelled, since the cycle, or a node or device unhealthy now, is not kept
    (:func:`kant.cycle.nomination_outlived`): its job
    competes again at the next cycle, and preempts again if it must. Victims, nominations
    and reasons of jobs no longer current are skipped, so applying an old result again (an
    orchestrator retrying) changes nothing it should not. Raises
    :class:`~kant.errors.ValidationError` for a ``result`` that is not a
    :class:`~kant.cycle.CycleResult` or that another queue or cluster computed (its
    ``origin``), :class:`~kant.errors.InvalidConfigError` naming the argument for a
    ``cluster``, ``queue`` or ``admitter`` of another kind (:func:`kant.cycle.check_parts`),
    :class:`~kant.errors.InvalidTimeError` for a ``now`` that is not a finite number
    (nothing changed)."""
    if not isinstance(result, CycleResult):
        raise ValidationError("result", result, "must be a kant.cycle.CycleResult")
    check_parts(cluster, queue, admitter)
    check_result(result, queue, cluster)
    now = finite_time(now, "apply")
    if result.origin is None:
        _check_by_hand(result, queue, cluster)
    seen = result.seen

    def is_current(jid: str) -> bool:
        e = queue.get(jid)
        return e is not None and seen.get(jid) == (e.seq, e.version)

    # which jobs are current is decided before anything changes (binding a job changes it)
    by_job: dict[str, list[Binding]] = {}
    for b in result.bindings:
        by_job.setdefault(b.pod.job, []).append(b)
    current = {jid for jid in by_job if is_current(jid)}
    current.update(j for v in result.victims for j in (v.job, v.preemptor) if is_current(j))
    current.update(n.job for n in result.nominations if is_current(n.job))
    current.update(j for j in result.dropped_nominations if is_current(j))
    ledger = admitter.ledger()
    bound: list[str] = []
    stale: list[str] = []
    # nodes came or went since the cycle: a binding to a node added since (the same name
    # again, perhaps another model or leaf than the cycle placed on) is stale
    since = result.membership
    if since is None or since == cluster.membership_version:
        since = None
    # pods with labels or pod terms came or went since the cycle: a job whose placement
    # read them is stale (the cycle's own jobs were placed knowing each other)
    terms_moved = result.pod_terms is not None and result.pod_terms != cluster.pod_terms_version
    anti_running = cluster.anti_terms_kept
    # 1. Bindings, job by job: all of a job's bindings or none.
    for jid, bs in by_job.items():
        e = queue.get(jid)
        mark = ledger.mark()
        if (
            e is None
            or jid not in current
            or not e.schedulable
            or now < e.backoff_until
            or not {b.pod for b in bs} <= set(e.remaining())
            or (
                since is not None
                and any(b.node in cluster and cluster.incarnation(b.node) > since for b in bs)
            )
            or (terms_moved and _reads_pods(e.job, anti_running))
            or not quota_admits(ledger, e.job.tenant, bs, cluster)
        ):
            stale.append(jid)
            continue
        try:
            cluster.bind_many(bs)  # all or none, one update per node
        except KantError:
            ledger.rollback(mark)
            stale.append(jid)
            continue
        try:
            cluster.describe(e.job)  # (its pods' labels and pod terms, for pod affinity)
        except KantError:  # (a pod of its id bound directly that is not one of its pods)
            cluster.release_many([b.pod for b in bs])
            ledger.rollback(mark)
            stale.append(jid)
            continue
        models: dict[str, str | None] = {}
        for b in bs:
            if b.node not in models:
                models[b.node] = cluster.node(b.node).gpu_model
        admitter.charge_many(e.job.tenant, bs, [models[b.node] for b in bs])
        queue.mark_assigned(jid, [b.pod for b in bs], now)
        bound.append(jid)
    # 2. Victims: terminating until the orchestrator reports them gone.
    terminating: list[PodId] = []
    for v in result.victims:
        ve = queue.get(v.job)
        if ve is None or v.job not in current or v.preemptor not in current:
            continue
        pods = [p for p in v.pods if p in ve.assigned and p not in ve.terminating]
        queue.mark_terminating(pods, v.preemptor, now)
        terminating.extend(pods)
    # 3. Nominations made or dropped.
    placed = set(bound)
    for nom in result.nominations:
        pe = queue.get(nom.job)
        if (
            pe is not None
            and nom.job in current
            and pe.schedulable
            # (a pod-level job bound in part this cycle may have preempted for the rest)
            and (nom.job not in placed or _for_pods_left(pe, nom))
            and not nomination_outlived(cluster, nom)
        ):
            queue.set_nomination(nom, nom.job)
    for jid in result.dropped_nominations:
        if jid in current and jid not in placed:
            queue.set_nomination(None, jid)
    # 4. Why the others wait (a job bound in step 1 was current before it changed).
    queue.set_reasons(result.pending, result.seen, current=placed)
    return ApplyReport(bound=tuple(bound), stale=tuple(stale), terminating=tuple(terminating))


def _check_by_hand(result: CycleResult, queue: Queue, cluster: ClusterState) -> None:
    """Refuse (:class:`ValidationError` naming the field, nothing changed) a result built by
    hand (no ``origin``: a cycle's own is made right) whose fields are not of their kinds, or
    one of whose bindings of a job in ``queue`` on a node of ``cluster`` is not what the pod's
    role asks (its GPUs, share, NICs, CPU and memory) or lands on a GPU model the role does not
    allow: applied, it would be charged for what it does not hold, or break the state. So are
    its nominations' bindings (which must name devices their node has), and a victim that is
    its own preemptor or of a job that is not preemptible."""
    finite_time(result.now, "apply", "result.now")
    for field, kind in (
        ("bindings", Binding), ("victims", Victim), ("nominations", Nomination),
        ("placed", str), ("dropped_nominations", str),
    ):  # fmt: skip
        v = getattr(result, field)
        if not isinstance(v, tuple) or not all(isinstance(x, kind) for x in v):
            raise ValidationError(f"result.{field}", v, f"must be a tuple of {kind.__name__}")
    pending, seen = result.pending, result.seen
    if not isinstance(pending, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Reason) for k, v in pending.items()
    ):
        raise ValidationError("result.pending", pending, "must be a mapping of job id -> Reason")
    if not isinstance(seen, Mapping) or not all(
        isinstance(k, str) and _seq_version(v) for k, v in seen.items()
    ):
        why = "must be a mapping of job id -> (seq, version)"
        raise ValidationError("result.seen", seen, why)
    for field in ("membership", "pod_terms"):
        v = getattr(result, field)
        if v is not None and not is_int(v):
            raise ValidationError(f"result.{field}", v, "must be None or an int")
    for b in result.bindings:
        e = queue.get(b.pod.job)
        if e is None or b.node not in cluster or not e.job.has_pod(b.pod):
            continue  # (stale, or not one of its job's pods: apply leaves it)
        _check_role(b, e.job, cluster, "result.bindings")
    # a victim is evicted by the orchestrator: never one kant would not choose
    for v in result.victims:
        ve = queue.get(v.job)
        if v.job == v.preemptor:
            raise ValidationError("result.victims", v.job, "is its own preemptor")
        if ve is not None and not ve.job.preemptible:
            why = "is not preemptible (Job.preemptible=False): kant never evicts it"
            raise ValidationError("result.victims", v.job, why)
    # a nomination is held by every cycle until it is taken or dropped: one its node cannot
    # hold (a GPU index past the node's) failed every cycle after
    for nom in result.nominations:
        e = queue.get(nom.job)
        if e is None:
            continue  # (stale: apply leaves it)
        for b in nom.bindings:
            if not e.job.has_pod(b.pod):
                raise ValidationError(
                    "result.nominations", str(b.pod), f"is no pod of job {nom.job!r}"
                )
            if b.node not in cluster:
                continue  # (a node gone: the next cycle drops the nomination)
            spec = cluster.node(b.node)
            for device, ids, have in (("GPU", b.gpus, spec.gpus), ("NIC", b.nics, spec.rdma_nics)):
                for i in ids:
                    if i >= have:
                        why = f"holds {device} {i}, which node {b.node!r} does not have"
                        raise ValidationError("result.nominations", str(b.pod), why)
            _check_role(b, e.job, cluster, "result.nominations")


def _check_role(b: Binding, job: Job, cluster: ClusterState, field: str) -> None:
    """Refuse (ValidationError naming ``field``) a binding of a pod of ``job`` on a node of
    ``cluster`` that does not hold what its role asks or is on a GPU model the role does not
    allow."""
    role = job.role(b.pod.role)
    model = cluster.node(b.node).gpu_model
    if role.gpu_models and model not in role.gpu_models:
        why = f"is on a {model} node, which role {role.name!r} does not allow"
        raise ValidationError(field, str(b.pod), why)
    if not _holds(b, role.resources):
        why = f"does not hold what role {role.name!r} asks ({role.resources})"
        raise ValidationError(field, str(b.pod), why)


def _seq_version(v: object) -> bool:
    return isinstance(v, tuple) and len(v) == 2 and all(is_int(x) for x in v)


def _holds(b: Binding, r: Resources) -> bool:
    """Does ``b`` hold exactly what ``r`` asks: its whole GPUs (or its share of one), NICs,
    CPU and memory?"""
    if r.gpu_milli:
        gpus_ok = len(b.gpus) == 1 and b.gpu_milli == r.gpu_milli
    else:
        gpus_ok = len(b.gpus) == r.gpus and (not r.gpus or b.gpu_milli == MILLI)
    return (
        gpus_ok
        and len(b.nics) == r.rdma_nics
        and b.cpu_milli == r.cpu_milli
        and b.memory_mib == r.memory_mib
    )


def _for_pods_left(e: Entry, nom: Nomination) -> bool:
    """Is ``nom`` for pods of ``e`` still to place (none of them bound)?"""
    left = set(e.remaining())
    return all(b.pod in left for b in nom.bindings)


def _reads_pods(job: Job, anti_running: bool) -> bool:
    """Whether where ``job``'s pods may run depends on the pods running: it has required pod
    affinity or anti-affinity terms, or some running pod has an anti-affinity term
    (``anti_running``: a term may select pods without labels, ``NotIn`` or
    ``DoesNotExist``); preferred terms only order nodes."""
    if job.anti_terms or anti_running:
        return True
    return job.pod_terms and any(r.pod_affinity for r in job.roles)


def quota_admits(
    ledger: QuotaLedger, tenant: str, bindings: Sequence[Binding], cluster: ClusterState
) -> bool:
    """Does the live quota still admit ``bindings`` of ``tenant`` (after what this apply already
    charged)? Charges them on ``ledger`` if so; changes nothing if not."""
    if ledger.table.unlimited:
        return True
    mark = ledger.mark()
    for b in bindings:
        milli = b.total_milli
        if not milli:
            continue
        if b.node not in cluster:
            ledger.rollback(mark)
            return False
        model = cluster.node(b.node).gpu_model
        if model is None:
            continue
        if ledger.headroom(tenant, model) < milli:
            ledger.rollback(mark)
            return False
        ledger.add(tenant, model, milli)
    return True
