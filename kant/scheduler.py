"""The :class:`Scheduler` facade: submit jobs, run and apply cycles, and feed back what the
orchestrator observed (the events), each event with its :class:`EventReport`."""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence

import attrs

from kant.admission.quota import Admitter
from kant.apply import ApplyReport, apply
from kant.contracts import PlacerLike, QueueingPolicy
from kant.cycle import DEFAULT_POLICY, CycleResult, schedule_cycle
from kant.errors import InvalidConfigError, UnknownPodError, require
from kant.model import Binding, Job, PodId, Reason
from kant.preemption.policy import PreemptionPolicy
from kant.queueing import Entry, JobPhase, Queue, as_policy
from kant.state import ClusterState

logger = logging.getLogger(__name__)


class EvictionCause(enum.StrEnum):
    """Why kant released a pod the orchestrator must stop (see :class:`Eviction`)."""

    GANG_REQUEUED = "gang_requeued"
    """Another pod of the gang was lost or failed: the whole job restarts."""
    JOB_FAILED = "job_failed"
    """The job reached its retry limit."""
    CANCELLED = "cancelled"
    """The job was cancelled."""


@attrs.frozen(kw_only=True)
class Eviction:
    """A pod kant released that the orchestrator must stop (it may still be running)."""

    pod: PodId
    node: str
    cause: EvictionCause


@attrs.frozen(kw_only=True)
class EventReport:
    """What an orchestrator event changed. ``evictions`` are pods the orchestrator must stop."""

    released: tuple[PodId, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    requeued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class StatusReport:
    """One job as an orchestrator sees it (:meth:`Scheduler.status`).

    ``phase`` and ``reason`` (why it waits: a typed :class:`~kant.model.Reason`, None once
    running or done); ``bindings``: where its pods run now (sorted by pod); ``pods_waiting``:
    pods still to place; ``submitted_at`` (what FIFO orders by), ``pending_since`` (when its
    current wait began: its submission, or its last requeue) and ``started_at`` (when it last
    started, None before); ``wait``: seconds it waited before it started, or, still waiting,
    up to the ``now`` given to :meth:`Scheduler.status` (None without one); ``attempts``:
    failed bindings or starts so far."""

    job_id: str
    phase: JobPhase
    reason: Reason | None
    bindings: tuple[Binding, ...]
    pods_waiting: int
    submitted_at: float
    pending_since: float
    started_at: float | None
    wait: float | None
    attempts: int
    cancelled: bool


class Scheduler:
    """A small facade owning the cluster, queue, admitter, placer and queueing policy: submit
    jobs, run and apply cycles, and feed back what the orchestrator observed.

    >>> from kant.testing import ClusterBuilder, job
    >>> s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    >>> _ = s.submit(job("a", gpus=8, replicas=2), now=0)
    >>> [str(b.pod) for b in s.step(now=1).bindings]
    ['a/worker/0', 'a/worker/1']
    """

    def __init__(
        self,
        cluster: ClusterState,
        *,
        queue: Queue | None = None,
        admitter: Admitter | None = None,
        placer: PlacerLike | None = None,
        policy: QueueingPolicy | str = DEFAULT_POLICY,
        preemption: PreemptionPolicy | None = None,
    ) -> None:
        self.cluster = cluster
        self.queue = queue if queue is not None else Queue()
        self.admitter = admitter if admitter is not None else Admitter()
        self.policy: QueueingPolicy = as_policy(policy)
        self.preemption = preemption if preemption is not None else PreemptionPolicy()
        if not isinstance(self.preemption, PreemptionPolicy):
            raise InvalidConfigError("preemption", preemption, "must be a PreemptionPolicy")
        if placer is None:
            from kant.placement import Placer

            self.placer: PlacerLike = Placer()
        else:
            self.placer = placer

    # ----------------------------------------------------------------- jobs and cycles

    def submit(self, job: Job, now: float | None = None) -> None:
        """Queue a job (see :meth:`kant.queueing.Queue.submit`: raises DuplicateError or
        InvalidJobError, changing nothing); returns None."""
        self.queue.submit(job, now)

    def status(self, job_id: str, now: float | None = None) -> StatusReport:
        """Where job ``job_id`` is: its :class:`StatusReport` (``now`` measures the wait of a
        job still waiting). Raises :class:`~kant.errors.UnknownJobError` for a job never
        submitted. O(pods of the job)."""
        e = self.queue.entry(job_id)
        bound = tuple(
            self.cluster.binding(p) for p in sorted(e.assigned) if self.cluster.has_pod(p)
        )
        if e.phase is JobPhase.PENDING:
            wait = None if now is None else max(0.0, now - e.pending_since)
        elif e.started_at is not None:
            wait = max(0.0, e.started_at - e.pending_since)
        else:
            wait = None
        return StatusReport(
            job_id=e.id,
            phase=e.phase,
            reason=e.reason if e.schedulable else None,
            bindings=bound,
            pods_waiting=len(e.remaining()) if e.schedulable else 0,
            submitted_at=e.job.submitted_at,
            pending_since=e.pending_since,
            started_at=e.started_at,
            wait=wait,
            attempts=e.attempts,
            cancelled=e.cancelled,
        )

    def schedule(self, now: float) -> CycleResult:
        """Run one cycle at ``now`` (:func:`kant.schedule_cycle`): a :class:`CycleResult` of
        decisions, with nothing applied yet."""
        return schedule_cycle(
            self.cluster, self.queue, self.admitter, self.placer, now,
            policy=self.policy, preemption=self.preemption,
        )  # fmt: skip

    def apply(self, result: CycleResult, now: float) -> ApplyReport:
        """Apply a cycle's result at ``now`` (:func:`kant.apply`): bind, charge and mark what it
        decided; returns the :class:`ApplyReport`."""
        return apply(result, self.cluster, self.queue, self.admitter, now)

    def step(self, now: float) -> CycleResult:
        """Schedule and apply in one call (for simulators and simple loops)."""
        result = self.schedule(now)
        self.apply(result, now)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("cycle at %g: %d pods bound, %d victims, %d jobs pending (%.1f ms)",
                         now, len(result.bindings), len(result.victims), len(result.pending),
                         result.stats.elapsed_ms)  # fmt: skip
        return result

    def cancel(self, job_id: str, now: float) -> EventReport:
        """Cancel a job: it is FINISHED (cancelled); the pods it held are released and
        reported for eviction."""
        del now
        held = self.queue.cancel(job_id)
        logger.info("job %s cancelled; %d pods released", job_id, len(held))
        ev = tuple(self._release(p, EvictionCause.CANCELLED) for p in held)
        return EventReport(released=held, evictions=ev, finished=(job_id,))

    # ----------------------------------------------------------------- orchestrator events

    def confirm(self, pod: PodId, now: float) -> None:
        """The pod really started on its binding."""
        del now
        self.queue.mark_confirmed(pod)

    def binding_failed(self, pod: PodId, now: float, message: str = "") -> EventReport:
        """The pod could not be bound or started. Its resources are released and the job is
        requeued with backoff (a gang whole: its other pods are released and evicted; a
        pod-level job only that pod). Past the retry limit the job is FAILED and everything
        it holds is released."""
        e = self._held(pod)
        msg = message or f"binding of {pod} failed"
        logger.info("binding of %s failed at %g: %s", pod, now, msg)
        if self.queue.backoff.exhausted(e.attempts + 1) or e.job.gang:
            cause = (
                EvictionCause.JOB_FAILED
                if self.queue.backoff.exhausted(e.attempts + 1)
                else EvictionCause.GANG_REQUEUED
            )
            released, ev = self._release_job(e, skip=pod, cause=cause)
            st = self.queue.requeue(e.id, now, failed=True, message=msg)
            failed = (e.id,) if st.phase is JobPhase.FAILED else ()
            return EventReport(
                released=released, evictions=ev, requeued=() if failed else (e.id,), failed=failed
            )
        self._release(pod, None)
        self.queue.forget_pods(e.id, [pod], now, finished=False)
        self.queue.count_failure(e, now, msg)
        return EventReport(released=(pod,), requeued=(e.id,))

    def pod_finished(self, pod: PodId, now: float) -> EventReport:
        """The pod completed. Its quota is uncharged; the job finishes with its last pod."""
        e = self._held(pod)
        self._release(pod, None)
        self.queue.forget_pods(e.id, [pod], now, finished=True)
        done = (e.id,) if e.phase is JobPhase.FINISHED else ()
        return EventReport(released=(pod,), finished=done)

    def pod_evicted(self, pod: PodId, now: float) -> EventReport:
        """The pod was stopped (a victim going away, or killed for any other reason). A victim
        gang is requeued when its last pod is gone; any other gang is requeued whole at once
        (its other pods evicted); a pod-level pod just waits to be placed again."""
        return self._lost(self._held(pod), [self.cluster.binding(pod)], now, release=True)

    def node_lost(self, node: str, now: float) -> EventReport:
        """The node is gone: it is removed, and its pods' jobs are requeued (gangs whole)."""
        lost = self.cluster.remove_node(node)
        logger.warning("node %s lost at %g: %d pods were on it", node, now, len(lost))
        return self._lost_bindings(lost, now, released_already=True)

    def gpu_unhealthy(self, node: str, gpu: int, now: float, *, evict: bool = True) -> EventReport:
        """A GPU failed: nothing new lands on it; with ``evict`` the pods holding it are
        treated as lost (requeued, gangs whole)."""
        self.cluster.set_gpu_health(node, gpu, False)
        logger.warning("GPU %d of node %s unhealthy at %g", gpu, node, now)
        if not evict:
            return EventReport()
        hit = [
            self.cluster.binding(p)
            for p in self.cluster.pods_on(node)
            if gpu in self.cluster.binding(p).gpus
        ]
        return self._lost_bindings(hit, now, released_already=False)

    def gpu_healthy(self, node: str, gpu: int) -> None:
        """The GPU works again: it may be allocated. Raises UnknownNodeError, or InvalidNodeError
        for a GPU index the node lacks."""
        self.cluster.set_gpu_health(node, gpu, True)

    def nic_unhealthy(self, node: str, nic: int, now: float, *, evict: bool = True) -> EventReport:
        """An RDMA NIC failed: nothing new lands on it; with ``evict`` the pods holding it are
        treated as lost (a gang requeued whole, a pod-level job loses only those pods).
        Raises UnknownNodeError, or InvalidNodeError for a NIC index the node lacks, before
        anything changes."""
        self.cluster.set_nic_health(node, nic, False)
        if not evict:
            return EventReport()
        hit = [
            self.cluster.binding(p)
            for p in self.cluster.pods_on(node)
            if nic in self.cluster.binding(p).nics
        ]
        return self._lost_bindings(hit, now, released_already=False)

    def nic_healthy(self, node: str, nic: int) -> None:
        """The NIC works again: it may be allocated. Raises UnknownNodeError, or
        InvalidNodeError for a NIC index the node lacks."""
        self.cluster.set_nic_health(node, nic, True)

    def node_unhealthy(self, node: str, now: float, *, evict: bool = True) -> EventReport:
        """The node as a whole is unhealthy (NotReady: kubelet, driver, network): it offers
        nothing new but stays in the cluster; with ``evict`` every pod on it is treated as
        lost (gangs requeued whole, pod-level jobs lose only the pods on it). Raises
        UnknownNodeError before anything changes."""
        self.cluster.set_node_health(node, False)
        if not evict:
            return EventReport()
        hit = [self.cluster.binding(p) for p in self.cluster.pods_on(node)]
        return self._lost_bindings(hit, now, released_already=False)

    def node_healthy(self, node: str) -> None:
        """The node is healthy again: its healthy devices may be allocated. Raises
        UnknownNodeError."""
        self.cluster.set_node_health(node, True)

    # ----------------------------------------------------------------- internals

    def _held(self, pod: PodId) -> Entry:
        e = self.queue.get(pod.job)
        if e is None or pod not in e.assigned:
            raise UnknownPodError(pod)
        return e

    def _release(self, pod: PodId, cause: EvictionCause | None) -> Eviction:
        b = self.cluster.release(pod)
        self.admitter.uncharge(pod)
        return Eviction(pod=pod, node=b.node, cause=cause or EvictionCause.GANG_REQUEUED)

    def _release_job(
        self, e: Entry, *, skip: PodId | None, cause: EvictionCause
    ) -> tuple[tuple[PodId, ...], tuple[Eviction, ...]]:
        released = []
        ev = []
        for p in sorted(e.assigned):
            if not self.cluster.has_pod(p):
                continue
            x = self._release(p, cause)
            released.append(p)
            if p != skip:
                ev.append(x)
        return tuple(released), tuple(ev)

    def _lost_bindings(
        self, lost: Sequence[Binding], now: float, *, released_already: bool
    ) -> EventReport:
        by_job: dict[str, list[Binding]] = {}
        for b in lost:
            by_job.setdefault(b.pod.job, []).append(b)
        reports = []
        for jid in sorted(by_job):
            e = self.queue.get(jid)
            if e is None:
                if released_already:
                    continue
                for b in by_job[jid]:  # a pod kant does not know: just free it
                    self.cluster.release(b.pod)
                continue
            if released_already:
                for b in by_job[jid]:
                    self.admitter.uncharge(b.pod)
            reports.append(self._lost(e, by_job[jid], now, release=not released_already))
        return _merge(reports)

    def _lost(self, e: Entry, bs: Sequence[Binding], now: float, *, release: bool) -> EventReport:
        pods = [b.pod for b in bs]
        if release:
            for p in pods:
                self._release(p, None)
        victims = all(p in e.terminating for p in pods)
        if victims and pods:
            self.queue.mark_preempted(e.id, now)
        if e.job.gang and not victims:
            released, ev = self._release_job(e, skip=None, cause=EvictionCause.GANG_REQUEUED)
            self.queue.requeue(e.id, now, failed=False)
            return EventReport(released=(*pods, *released), evictions=ev, requeued=(e.id,))
        self.queue.forget_pods(e.id, pods, now, finished=False)
        if e.job.gang and e.phase is JobPhase.PENDING:
            self.queue.requeue(e.id, now, failed=False)  # forget the finished pods too
        return EventReport(released=tuple(pods), requeued=(e.id,))

    def check_invariants(self) -> None:
        """Every invariant across cluster, queue and admitter: each one's own
        ``check_invariants()``, then that assigned pods are bound and charged, gangs are
        bound whole (unless being evicted) and every bound pod of a known job is assigned.
        Raises :class:`~kant.errors.InvariantError` at the first difference.

        O(everything): for tests and debugging (:func:`kant.testing.check_invariants`)."""
        self.cluster.check_invariants()
        self.queue.check_invariants()
        self.admitter.check_invariants()
        for e in self.queue.entries():
            for p in e.assigned:
                require(self.cluster.has_pod(p), f"Scheduler: {p} assigned but not bound")
                require(self.admitter.is_charged(p), f"Scheduler: {p} bound but not charged")
            if e.job.gang and e.assigned and not e.terminating:
                want = set(e.job.pods()) - e.finished
                require(set(e.assigned) == want, f"Scheduler: gang {e.id} partly bound")
        for b in self.cluster.pods():
            owner = self.queue.get(b.pod.job)
            if owner is not None:
                require(b.pod in owner.assigned, f"Scheduler: {b.pod} bound but not assigned")


def _merge(reports: Sequence[EventReport]) -> EventReport:
    return EventReport(
        released=tuple(p for r in reports for p in r.released),
        evictions=tuple(x for r in reports for x in r.evictions),
        requeued=tuple(dict.fromkeys(j for r in reports for j in r.requeued)),
        failed=tuple(j for r in reports for j in r.failed),
        finished=tuple(j for r in reports for j in r.finished),
    )
