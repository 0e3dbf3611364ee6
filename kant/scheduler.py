"""The :class:`Scheduler` facade: submit jobs, run and apply cycles, and feed back what the
orchestrator observed (the events), each event with its :class:`EventReport`."""

from __future__ import annotations

import copy
import enum
import logging
import math
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from kant.admission.quota import Admitter
from kant.apply import ApplyReport, apply, quota_admits
from kant.contracts import PlacerLike, QueueingPolicy
from kant.cycle import DEFAULT_POLICY, CycleResult, check_parts, schedule_cycle
from kant.errors import (
    DuplicateError,
    InvalidJobError,
    InvalidTimeError,
    KantError,
    QuotaExceededError,
    UnknownNodeError,
    UnknownPodError,
    ValidationError,
    require,
)
from kant.estimates import EstimateStatus, StartEstimate, play
from kant.model import (
    Binding,
    Job,
    NodeSpec,
    PodId,
    Reason,
    Taint,
    finite_time,
    flag,
    is_finite_number,
    is_whole,
)
from kant.preemption.policy import PreemptionPolicy
from kant.queueing import Entry, FailureHistory, JobPhase, JobStatus, Queue
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
    UNHEALTHY = "unhealthy"
    """The node, GPU or NIC it runs on failed (:meth:`Scheduler.node_unhealthy`,
    :meth:`~Scheduler.gpu_unhealthy`, :meth:`~Scheduler.nic_unhealthy` with ``evict``): it
    may still run there, and kant places it again."""


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

    ``phase`` and ``reason`` (why it or pods of it wait, or why it FAILED: a typed
    :class:`~kant.model.Reason`; None otherwise); ``bindings``: where its pods run now
    (sorted by pod); ``pods_waiting``: pods still to place; ``submitted_at`` (what FIFO
    orders by), ``pending_since`` (when its current wait began: its submission, or its last
    requeue) and ``started_at`` (when it last started, None before); ``wait``: seconds it
    waited before it started, or, still waiting, up to the ``now`` given to
    :meth:`Scheduler.status` (None without one); ``attempts``: failed bindings or starts so
    far; ``interruptions``: times the cluster took running pods from it
    (:attr:`~kant.queueing.Backoff.max_interruptions`)."""

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
    interruptions: int = 0


class Scheduler:
    """A small facade owning the cluster, queue, admitter, placer and queueing policy: submit
    jobs, run and apply cycles, and feed back what the orchestrator observed.

    >>> from kant.testing import ClusterBuilder, job
    >>> s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    >>> _ = s.submit(job("a", gpus=8, replicas=2), now=0)
    >>> [str(b.pod) for b in s.step(now=1).bindings]
    ['a/worker/0', 'a/worker/1']

    ``incremental`` (default True) lets each cycle reuse what earlier cycles derived and
    what cannot have changed since; False derives everything afresh (the same decisions,
    slower; see :func:`kant.cycle.schedule_cycle`).

    A part that cannot work is refused at once with InvalidConfigError naming the argument:
    a ``cluster`` that is not a ClusterState, a ``queue``, ``admitter`` or ``preemption`` not
    of its class, a ``placer`` without ``place``, a ``policy`` neither a registered name
    (UnknownPolicyError) nor a QueueingPolicy.
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
        incremental: bool = True,
    ) -> None:
        pol = check_parts(
            cluster,
            queue,
            admitter,
            placer=placer,
            preemption=preemption,
            policy=policy,
            defaults=True,
        )
        assert pol is not None  # (for mypy: a policy was given)
        self.cluster = cluster
        self.incremental = flag(incremental, "incremental")  # see schedule_cycle
        self.queue = queue if queue is not None else Queue()
        self.admitter = admitter if admitter is not None else Admitter()
        self.policy: QueueingPolicy = pol
        self.preemption = preemption if preemption is not None else PreemptionPolicy()
        if placer is None:
            from kant.placement import Placer

            self.placer: PlacerLike = Placer()
        else:
            self.placer = placer
        self._clock = -math.inf  # the last time seen (time never runs backwards)
        self._clock_by = ""  # the call that brought it
        self._lost_nodes: dict[str, NodeSpec] = {}  # node_lost and not recovered
        self._removal: EventReport | None = None  # what the last node removal released
        self._removing = "removed"  # how the node being removed went (lost, removed)
        # the bindings restore recorded as given (pods that run: not checked against their
        # roles), which check_invariants does not hold to their roles while they stand
        self._restored: dict[PodId, Binding] = {}
        self._listen()

    def _listen(self) -> None:
        """Hear every node removal of :attr:`cluster` (:meth:`_node_gone`), whichever door
        it came through."""
        gone = weakref.WeakMethod(self._node_gone)  # the cluster must not keep us alive

        def on_remove(node: str, lost: tuple[Binding, ...]) -> None:
            handler = gone()
            if handler is not None:
                handler(node, lost)

        self.cluster.on_remove(on_remove)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (``copy.deepcopy``, unpickling) is a scheduler of its own: its cluster
        (a copy, which carries no listener: :meth:`ClusterState.__getstate__`) reports its
        node removals to it, and nothing of it reaches the original."""
        self.__dict__.update(state)
        self._listen()

    # ----------------------------------------------------------------- time

    @property
    def clock(self) -> float:
        """The last time the scheduler saw (``-inf`` before the first timed call). Every
        timed call must give a finite time not earlier than this (:meth:`_time`)."""
        return self._clock

    def _time(self, now: object, call: str) -> float:
        """``now`` as a float, or :class:`~kant.errors.InvalidTimeError` (naming both times)
        if it is not a finite number or earlier than :attr:`clock`. Changes nothing."""
        t = finite_time(now, call)
        if t < self._clock:
            raise InvalidTimeError(
                "now", now,
                f"{call} at {t:g} is before {self._clock:g}, the time of the last call "
                f"({self._clock_by}); time cannot run backwards",
            )  # fmt: skip
        return t

    def _tick(self, t: float, call: str) -> None:
        self._clock = t
        self._clock_by = call

    def _pod_time(self, e: Entry, pod: PodId, now: object, call: str) -> float:
        t = finite_time(now, call)
        bound = e.assigned[pod]
        if t < bound:
            raise InvalidTimeError(
                "now", now, f"{call} of {pod} at {t:g} is before it was bound, at {bound:g}"
            )
        return self._time(t, call)

    # ----------------------------------------------------------------- jobs and cycles

    def submit(
        self,
        job: Job,
        now: float | None = None,
        *,
        history: JobStatus | FailureHistory | None = None,
    ) -> None:
        """Queue a job (see :meth:`kant.queueing.Queue.submit`: raises DuplicateError or
        InvalidJobError, or InvalidTimeError for a ``now`` that is not finite, negative or
        runs backwards, changing nothing); returns None. DuplicateError too when pods of that id
        run in the cluster while the queue has no such job (bound directly: :meth:`restore`
        takes such a job in). ``history``: the status of an earlier job this one stands in
        for, or its :class:`~kant.queueing.FailureHistory`, whose failures and backoff it
        carries on."""
        t = None if now is None else self._time(now, "submit")
        if isinstance(job, Job) and self.cluster.runs_job(job.id) and job.id not in self.queue:
            raise DuplicateError(
                f"job {job.id!r}: pods of that id run in the cluster and kant's queue has no "
                "such job (bound directly); restore it, or give the new job another id"
            )
        self.queue.submit(job, t, history=history)
        if t is not None:
            self._tick(t, "submit")

    def restore(
        self,
        job: Job,
        bindings: Iterable[Binding],
        now: float,
        *,
        finished: Iterable[PodId] = (),
        started_at: float | Mapping[PodId, float] | None = None,
        history: FailureHistory | None = None,
    ) -> None:
        """Take in a job some of whose pods already run: an orchestrator that restarts
        rebuilds kant's state from the pods it finds bound. ``job`` is submitted and
        ``bindings`` (some of its pods, each once) are bound, charged to its tenant and marked
        as a cycle's placement would have. ``finished``: pods of the job that ended
        meanwhile. ``started_at`` (default ``now``, never later): when those pods were bound,
        so that the expected ends EASY and conservative backfill reserve by
        (start + ``runtime_estimate``) are the ones before the restart; a mapping gives
        each bound pod its own (a pod-level job's pods bound at different times; a pod it
        does not name was bound ``now``). The job's other pods
        wait as usual; a gang has none (its pods are all bound or finished). ``history``: the
        failures and interruptions it had before the restart, which its next ones count on
        from (as :meth:`submit`'s).

        All or nothing: raises and changes nothing when a binding is not one of the job's pods
        or a pod is named twice, or a gang's pods are not all bound or finished
        (ValidationError), a binding does not fit the cluster (the errors of
        :meth:`kant.state.ClusterState.bind_many` with ``running``: a node or device
        unhealthy now, or a ``max_pods`` lowered, does not refuse a pod that runs there),
        the tenant's quota does not admit them
        now (QuotaExceededError: quotas were lowered meanwhile), the job is refused
        (DuplicateError, InvalidJobError), or ``now`` is not finite or runs backwards, or
        ``started_at`` is not finite or later than ``now`` (InvalidTimeError), or names a
        pod not among ``bindings`` (ValidationError)."""
        t = self._time(now, "restore")

        def start_of(value: object) -> float:
            try:
                start = finite_time(value, "restore")
            except InvalidTimeError:
                start = math.nan
            if not 0 <= start <= t:
                raise InvalidTimeError(
                    "started_at", value,
                    f"restore: must be a finite number of seconds from 0 to now ({t:g})",
                )  # fmt: skip
            return start

        # each bound pod's start: its own (a mapping), else the one given, else now
        per_pod = (
            {p: start_of(v) for p, v in started_at.items()}
            if isinstance(started_at, Mapping)
            else {}
        )
        start = t if started_at is None or isinstance(started_at, Mapping) else start_of(started_at)
        if not isinstance(job, Job):
            raise ValidationError("job", job, "must be a kant.model.Job")
        for name, given in (("bindings", bindings), ("finished", finished)):
            if isinstance(given, str | bytes) or not isinstance(given, Iterable):
                raise ValidationError(name, given, "must be an iterable")
        bs = tuple(bindings)
        done = tuple(finished)
        mine = set(job.pods())
        pods = [b.pod if isinstance(b, Binding) else None for b in bs]
        named = [*pods, *done]
        strange = any(not isinstance(p, PodId) or p not in mine for p in named)
        if strange or len(set(named)) != len(named):
            raise ValidationError(
                "bindings", [str(p) for p in named],
                f"must be distinct pods of job {job.id!r} (bound, then finished)",
            )  # fmt: skip
        if job.gang and len(named) != len(mine):
            raise ValidationError(
                "bindings", [str(p) for p in named],
                f"must bind or finish every pod of the gang {job.id!r}",
            )  # fmt: skip
        if not per_pod.keys() <= set(pods):
            raise ValidationError(
                "started_at", sorted(str(p) for p in per_pod.keys() - set(pods)),
                "names pods that are not among the bindings",
            )  # fmt: skip
        # what the queue would refuse (an id already queued: the job there runs, described)
        # is refused before anything is bound or described
        self.queue.check_submit(job, t, history=history)
        self.cluster.bind_many(bs, running=True)  # (all or none; they run, healthy or not)
        try:
            if not quota_admits(self.admitter.ledger(), job.tenant, bs, self.cluster):
                raise QuotaExceededError(
                    f"job {job.id!r}: tenant {job.tenant!r}'s quota does not admit its "
                    f"{len(bs)} running pods"
                )
            if bs:  # (refused for a pod of its id bound directly that is not one of its)
                self.cluster.describe(job)
            self.queue.submit(job, t, history=history)
        except KantError:
            self.cluster.release_many([b.pod for b in bs])  # (its last pod undescribes it)
            raise
        if bs:
            models = [self.cluster.node(b.node).gpu_model for b in bs]
            self.admitter.charge_many(job.tenant, bs, models)
            # (by start, earliest first: the job started with its first pod)
            by_start: dict[float, list[PodId]] = {}
            for b in bs:
                by_start.setdefault(per_pod.get(b.pod, start), []).append(b.pod)
            for start in sorted(by_start):
                self.queue.mark_assigned(job.id, by_start[start], start)
            self._restored.update((b.pod, b) for b in bs)
        if done:
            self.queue.forget_pods(job.id, done, t, finished=True)
        self._tick(t, "restore")

    def status(self, job_id: str, now: float | None = None) -> StatusReport:
        """Where job ``job_id`` is: its :class:`StatusReport` (``now`` measures the wait of a
        job still waiting; it only reads, so it may be earlier than :attr:`clock`). Raises
        :class:`~kant.errors.UnknownJobError` for a job never submitted, InvalidTimeError for
        a ``now`` that is not a finite number. O(pods of the job)."""
        if now is not None:
            now = finite_time(now, "status")
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
            reason=e.reason if e.schedulable or e.phase is JobPhase.FAILED else None,
            bindings=bound,
            pods_waiting=len(e.remaining()) if e.schedulable else 0,
            submitted_at=e.job.submitted_at,
            pending_since=e.pending_since,
            started_at=e.started_at,
            wait=wait,
            attempts=e.attempts,
            cancelled=e.cancelled,
            interruptions=e.interruptions,
        )

    def start_estimates(
        self,
        now: float,
        *,
        jobs: Iterable[str] | None = None,
        horizon: float | None = None,
        max_cycles: int | None = None,
        grace_period: float = 30.0,
        default_runtime: float | None = None,
        tick: float = 0.0,
        first_cycle: float | None = None,
    ) -> dict[str, StartEstimate]:
        """When would waiting jobs start? For each job of ``jobs`` (default: every PENDING
        job), a :class:`~kant.estimates.StartEstimate`: the time of the first cycle that
        would bind a pod of it if the running jobs end at their expected ends and nothing
        else happens (no job arrives, is cancelled or fails; no node comes or goes).

        The estimate plays this scheduler's own cycles forward on a copy of its state
        (:func:`kant.estimates.play`: its queueing policy, quotas, placer and preemption
        included): a running pod ends at its bind time + its job's ``runtime_estimate``,
        else ``default_runtime`` (default: the queueing policy's ``default_runtime``, if it
        has one), at ``now`` if that is past, never without either; victims chosen go
        ``grace_period`` seconds after the cycle that chose them (pods already being evicted:
        ``grace_period`` after ``now``) and their jobs are requeued, to run their whole
        estimate again; a cycle runs at every instant something changes (at most one per
        ``tick`` seconds; the first at ``first_cycle``, default ``now``) and when the passing
        of time alone can change a decision (:meth:`CycleResult.time_horizon`). The
        scheduler itself is not changed in any way (not even its :attr:`clock`).

        The mapping lists the jobs asked (each once) in the queue's global order, then the
        jobs that wait for nothing (RUNNING, FINISHED, FAILED) in submission order. A job
        without a start says why (:class:`~kant.estimates.EstimateStatus`): NEVER, nothing
        left to happen starts it; UNKNOWN_END, it waits on pods without an expected end;
        BEYOND_HORIZON, it had not started ``horizon`` seconds after ``now`` or after
        ``max_cycles`` cycles. ``horizon`` and ``max_cycles`` bound the work, which is one
        copy of the state (O(nodes + pods + jobs)) and one cycle per distinct event time
        until the last job asked starts.

        Raises UnknownJobError for a job never submitted, InvalidJobError for ``jobs`` that
        is a string or not an iterable, InvalidTimeError for a ``now`` that is not finite or
        runs backwards (or a ``first_cycle`` that is not finite), ValidationError for a
        ``horizon``, ``grace_period``, ``default_runtime`` or ``tick`` that is not a finite
        number in range (positive; >= 0; positive; >= 0) or a ``max_cycles`` that is not an
        int >= 1 (NumPy's too; not a bool); nothing is changed then."""
        t = self._time(now, "start_estimates")
        horizon = _seconds("horizon", horizon, positive=True, optional=True)
        grace_period = _seconds("grace_period", grace_period, positive=False, optional=False)
        default_runtime = _seconds("default_runtime", default_runtime, positive=True, optional=True)
        tick = _seconds("tick", tick, positive=False, optional=False)
        if max_cycles is not None and not (is_whole(max_cycles) and max_cycles >= 1):
            raise ValidationError("max_cycles", max_cycles, "must be None or an int >= 1")
        max_cycles = None if max_cycles is None else int(max_cycles)
        first = None
        if first_cycle is not None:
            first = finite_time(first_cycle, "start_estimates", "first_cycle")
        q = self.queue
        if jobs is None:
            asked = [e for e in q.candidates() if e.phase is JobPhase.PENDING]
        else:
            if isinstance(jobs, str | bytes) or not isinstance(jobs, Iterable):
                raise InvalidJobError("jobs", jobs, "must be None or an iterable of job ids")
            given = {id(e): e for e in (q.entry(j) for j in jobs)}  # UnknownJobError first
            waiting = {e.id for e in given.values() if e.phase is JobPhase.PENDING}
            asked = [e for e in q.candidates() if e.id in waiting] if waiting else []
            asked += sorted((e for e in given.values() if e.id not in waiting), key=_seq)
        targets = [e.id for e in asked if e.phase is JobPhase.PENDING]
        found: dict[str, StartEstimate] = {}
        if targets:
            if default_runtime is None:
                default_runtime = getattr(self.policy, "default_runtime", None)
            twin = self._twin()
            found, _stats = play(
                twin, t, targets, until=math.inf if horizon is None else t + horizon,
                max_cycles=max_cycles, grace_period=float(grace_period),
                default_runtime=default_runtime, tick=float(tick), first_cycle=first,
            )  # fmt: skip
        out: dict[str, StartEstimate] = {}
        for e in asked:
            if e.id in found:
                out[e.id] = found[e.id]
            elif e.phase is JobPhase.RUNNING:
                out[e.id] = StartEstimate(
                    job_id=e.id, status=EstimateStatus.RUNNING, start=e.started_at, made_at=t
                )
            else:
                out[e.id] = StartEstimate(
                    job_id=e.id, status=EstimateStatus.ENDED, start=None, made_at=t
                )
        return out

    def _twin(self) -> Scheduler:
        """A scheduler on a copy of this one's state and policies (one ``copy.deepcopy`` of
        them all, so what they share stays shared), at the same clock: what a what-if may
        change freely. O(nodes + pods + jobs)."""
        parts = (self.cluster, self.queue, self.admitter, self.placer, self.policy,
                 self.preemption)  # fmt: skip
        cluster, queue, admitter, placer, policy, preemption = copy.deepcopy(parts)
        twin = Scheduler(
            cluster, queue=queue, admitter=admitter, placer=placer, policy=policy,
            preemption=preemption, incremental=self.incremental,
        )  # fmt: skip
        twin._clock, twin._clock_by = self._clock, self._clock_by
        twin._lost_nodes = dict(self._lost_nodes)
        twin._restored = dict(self._restored)
        return twin

    def schedule(self, now: float) -> CycleResult:
        """Run one cycle at ``now`` (:func:`kant.schedule_cycle`): a :class:`CycleResult` of
        decisions, with nothing applied yet. Raises InvalidTimeError for a ``now`` that is not
        finite or runs backwards."""
        t = self._time(now, "schedule")
        result = schedule_cycle(
            self.cluster, self.queue, self.admitter, self.placer, t,
            policy=self.policy, preemption=self.preemption, incremental=self.incremental,
        )  # fmt: skip
        self._tick(t, "schedule")
        return result

    def apply(self, result: CycleResult, now: float) -> ApplyReport:
        """Apply a cycle's result at ``now`` (:func:`kant.apply`): bind, charge and mark what it
        decided and is still current; returns the :class:`ApplyReport`. Raises
        InvalidTimeError for a ``now`` that is not finite, runs backwards or is before the
        result's own time; ValidationError for a result that is not a CycleResult."""
        t = self._time(now, "apply")
        if isinstance(result, CycleResult):
            at = finite_time(result.now, "apply", "result.now")  # (one built by hand)
            if t < at:
                raise InvalidTimeError(
                    "now", now, f"apply at {t:g} is before the cycle's own time, {at:g}"
                )
        rep = apply(result, self.cluster, self.queue, self.admitter, t)
        self._tick(t, "apply")
        return rep

    def step(self, now: float) -> CycleResult:
        """Schedule and apply in one call (for simulators and simple loops)."""
        result = self.schedule(now)
        self.apply(result, now)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("cycle at %g: %d pods bound, %d victims, %d jobs pending (%.1f ms)",
                         now, len(result.bindings), len(result.victims), len(result.pending),
                         result.stats.elapsed_ms)  # fmt: skip
        return result

    def redescribe(self, job: Job) -> JobStatus:
        """Replace the description of the pending job ``job.id`` with ``job``, which has the
        same pods: it keeps its place in the order, its wait, its failures and its
        nomination, which cancelling it and submitting ``job`` would lose (a Backfill head
        would wait out its threshold again, and a job tied with it in the order would go
        first). The next cycle places it as ``job`` asks. See
        :meth:`kant.queueing.Queue.redescribe`: raises, changing nothing, UnknownJobError
        for a job not listed, InvalidJobError for a job not pending (field ``phase``) or
        whose pods differ (field ``pods``)."""
        return self.queue.redescribe(job)

    def cancel(self, job_id: str, now: float) -> EventReport:
        """Cancel a job: it is FINISHED (cancelled); the pods it held are released and
        reported for eviction. Cancelling a job already FINISHED or FAILED changes nothing and
        reports nothing. Raises UnknownJobError, or InvalidTimeError."""
        t = self._time(now, "cancel")
        e = self.queue.entry(job_id)
        if e.phase in (JobPhase.FINISHED, JobPhase.FAILED):
            self._tick(t, "cancel")
            return EventReport()
        held = self.queue.cancel(job_id)
        # release what is still bound and charged (a pod is both unless state was changed
        # behind kant's back; cancelling must not fail half-way then)
        logger.info("job %s cancelled; %d pods released", job_id, len(held))
        released = tuple(p for p in held if self.cluster.has_pod(p))
        ev = tuple(self._release(p, EvictionCause.CANCELLED) for p in released)
        for p in held:
            if p not in released and self.admitter.is_charged(p):
                self.admitter.uncharge(p)
        self._tick(t, "cancel")
        return EventReport(released=released, evictions=ev, finished=(job_id,))

    def acknowledge(self, job_id: str) -> None:
        """The orchestrator has read what it needs of a FINISHED or FAILED job: release it from
        the books now (:meth:`kant.queueing.Queue.forget`; otherwise it stays listed while it
        is among the queue's ``history`` most recently ended jobs). Raises UnknownJobError, or
        InvalidJobError for a job still pending or running (nothing changes)."""
        self.queue.forget(job_id)

    # ----------------------------------------------------------------- orchestrator events

    def confirm(self, pod: PodId, now: float) -> None:
        """The pod really started on its binding. Raises UnknownPodError for a pod that holds
        nothing, InvalidTimeError for a time before its binding."""
        e = self._held(pod)
        t = self._pod_time(e, pod, now, "confirm")
        self.queue.mark_confirmed(pod)
        self._tick(t, "confirm")

    def victims_spared(self, pods: Iterable[PodId]) -> tuple[PodId, ...]:
        """The orchestrator would give up evicting these victim pods (their preemptor went
        away while a disruption budget kept them): those it may spare run on, charged to
        their tenant, and may be chosen as victims again. Returns them, in pod order; the
        others are still to be evicted. Not spared: a pod not being evicted; a pod that the
        nomination of a job still waiting for it counts on
        (:attr:`~kant.queueing.queue.Entry.waits_for_nomination`: it has pods to place, a
        pod-level job running some of its pods included; its own preemptor, or another
        preemptor waiting for it too); a gang's pod unless the gang still holds all its pods
        and every one of them being evicted is spared in this call (a gang that lost a pod to
        the eviction already, or kept half its pods going, would run on partly bound).
        Raises InvalidJobError for ``pods`` that is a string, one bare PodId or not an
        iterable of PodId, sparing nothing. O(pods asked + victims of the nominations held),
        not O(jobs)."""
        _check_pods(pods)
        queue = self.queue
        asked: dict[str, set[PodId]] = {}
        for p in pods:
            if not isinstance(p, PodId):  # (before anything is spared)
                raise InvalidJobError("pod", p, "must be a kant.model.PodId")
            e = queue.get(p.job)
            if e is not None and p in e.terminating:
                asked.setdefault(p.job, set()).add(p)
        if not asked:
            return ()
        # (the jobs holding a nomination, not every job: a preemptor waits for its victims
        # while it has pods to place, a pod-level job running some of its pods too)
        awaited = {
            v
            for w in queue.nominated()
            if w.nomination is not None and w.waits_for_nomination
            for v in w.nomination.victims
        }
        spared: list[PodId] = []
        for jid in sorted(asked):
            e = queue.entry(jid)
            mine = asked[jid] - awaited
            if e.job.gang and (
                mine != set(e.terminating) or len(e.assigned) + len(e.finished) < e.job.num_pods
            ):
                continue
            spared.extend(sorted(mine))
        queue.unmark_terminating(spared)
        return tuple(spared)

    def binding_failed(self, pod: PodId, now: float, message: str = "") -> EventReport:
        """The pod could not be bound or started. Its resources are released and the job is
        requeued with backoff (a gang whole: its other pods are released and evicted; a
        pod-level job only that pod; pods of a pod-level job failing while it waits out the
        backoff of an earlier failure count as that failure). Past the retry limit the job is
        FAILED and everything it holds is released. A victim's pod being evicted that fails
        is evicted (:meth:`pod_evicted`: its stop made it fail, no failure is counted). Raises
        UnknownPodError, or InvalidTimeError for a time that is not finite or is before the
        pod's binding."""
        e = self._held(pod)
        now = self._pod_time(e, pod, now, "binding_failed")
        self._tick(now, "binding_failed")
        if pod in e.terminating:
            logger.info("%s failed while evicted at %g: evicted", pod, now)
            return self._lost(e, [self.cluster.binding(pod)], now, None, release=True)
        msg = message or f"binding of {pod} failed"
        logger.info("binding of %s failed at %g: %s", pod, now, msg)
        if not e.job.gang and now < e.backoff_until:
            # a pod-level job already waiting out a failure's backoff (its pods failing
            # together, as for a bad image): the same failure, counted once
            self._release(pod, None)
            self.queue.forget_pods(e.id, [pod], now, finished=False)
            return EventReport(released=(pod,), requeued=(e.id,))
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
        """The pod completed. Its quota is uncharged; the job finishes with its last pod. A
        victim gang whose other pods were evicted before this one ended is requeued whole
        (``requeued``), whichever order its pods ended in. Raises UnknownPodError, or
        InvalidTimeError for a time before the pod's binding."""
        e = self._held(pod)
        now = self._pod_time(e, pod, now, "pod_finished")
        self._tick(now, "pod_finished")
        self._release(pod, None)
        self.queue.forget_pods(e.id, [pod], now, finished=True)
        again = (e.id,) if self._whole_again(e, now) else ()
        done = (e.id,) if e.phase is JobPhase.FINISHED else ()
        return EventReport(released=(pod,), finished=done, requeued=again)

    def pods_finished(self, pods: Iterable[PodId], now: float) -> EventReport:
        """Every pod of ``pods`` completed at ``now``: what :meth:`pod_finished` on each, in
        order, does, with one release in the cluster state for all of them (one update per
        node; a simulator finishing a gang calls it once). ``pods`` may be any iterable of
        PodId. Raises what :meth:`pod_finished` raises, InvalidJobError for ``pods`` that are
        not iterable (or are a string or one bare PodId), or UnknownPodError for a pod named
        twice, before changing anything."""
        _check_pods(pods)
        if not isinstance(pods, Sequence):  # a list or tuple is used as it is; a generator
            pods = tuple(pods)  # is read once, into a tuple
        whole = self._whole_job(pods, now)
        if whole is not None:  # every pod one job holds: checked at once
            e, now = whole
            entries: dict[str, Entry] = {e.id: e}
            return self._pods_finished(pods, now, entries)
        entries = {}
        t: float | None = None
        for pod in pods:
            e = self._held(pod)
            entries.setdefault(e.id, e)
            if t is None:  # the checks of _pod_time, the time's own once
                t = self._pod_time(e, pod, now, "pods_finished")
            elif t < e.assigned[pod]:
                self._pod_time(e, pod, t, "pods_finished")  # raises, naming the pod
        if t is not None:
            now = t
        if len(set(pods)) != len(pods):
            raise UnknownPodError(next(p for i, p in enumerate(pods) if p in pods[:i]))
        if not pods:
            self._time(now, "pods_finished")  # (nothing to do, but a bad time is still one)
            return EventReport()
        return self._pods_finished(pods, now, entries)

    def _whole_job(self, pods: Sequence[PodId], now: float) -> tuple[Entry, float] | None:
        """When ``pods`` are exactly the pods one job holds, each once, bound at or before
        ``now``: that job's entry and the time. None otherwise (then the pod by pod checks
        decide, and raise what is wrong). O(pods), in C but the type check."""
        if not pods or not all(type(p) is PodId for p in pods):
            return None
        e = self.queue.get(pods[0].job)
        if e is None or len(e.assigned) != len(pods) or e.assigned.keys() != set(pods):
            return None
        t = finite_time(now, "pods_finished")  # (what the pod by pod checks would raise)
        if t < max(e.assigned.values()):
            return None  # the pod by pod checks name the pod
        return e, self._time(t, "pods_finished")

    def _pods_finished(
        self, pods: Sequence[PodId], now: float, entries: dict[str, Entry]
    ) -> EventReport:
        self._tick(now, "pods_finished")
        self.cluster.release_many(pods)
        self.admitter.uncharge_charged(pods)
        by_job: dict[str, list[PodId]] = {}
        for pod in pods:
            by_job.setdefault(pod.job, []).append(pod)
        for jid, mine in by_job.items():
            self.queue.forget_pods(jid, mine, now, finished=True)
        again = tuple(j for j, e in entries.items() if self._whole_again(e, now))
        done = tuple(j for j, e in entries.items() if e.phase is JobPhase.FINISHED)
        return EventReport(released=tuple(pods), finished=done, requeued=again)

    def pod_evicted(self, pod: PodId, now: float, *, interrupted: bool = False) -> EventReport:
        """The pod was stopped (a victim going away, or killed for any other reason). A victim
        gang is requeued when its last pod is gone; any other gang is requeued whole at once
        (its other pods evicted); a pod-level pod just waits to be placed again.
        ``interrupted``: the cluster stopped a pod that was no victim (a node-pressure
        eviction, a drain), an interruption of its job
        (:attr:`~kant.queueing.Backoff.max_interruptions`); a pod that failed or that a user
        deleted is not one. Raises UnknownPodError, or InvalidTimeError for a time before
        the pod's binding."""
        flag(interrupted, "interrupted")
        e = self._held(pod)
        now = self._pod_time(e, pod, now, "pod_evicted")
        self._tick(now, "pod_evicted")
        why = f"{pod} evicted" if interrupted else None
        return self._lost(e, [self.cluster.binding(pod)], now, why, release=True)

    # ----------------------------------------------------------------- the node lifecycle

    def node_added(self, spec: NodeSpec, now: float) -> None:
        """A new node joined the cluster (healthy, empty). Raises InvalidNodeError for a
        malformed spec (a GPU count other than its template's included) or a place in the
        fabric that contradicts the nodes present (its leaf under another spine, say: see
        :meth:`ClusterState.add_node`), UnknownTemplateError for a template that is not
        registered, DuplicateError for a name already present, InvalidTimeError; nothing
        changes then. A node that was lost and comes back is :meth:`node_recovered`."""
        t = self._time(now, "node_added")
        self.cluster.add_node(spec)
        self._lost_nodes.pop(spec.name, None)
        self._tick(t, "node_added")

    def node_relabelled(
        self, node: str, labels: Mapping[str, str], taints: Iterable[Taint], now: float
    ) -> bool:
        """Node ``node``'s labels and taints are now these (:meth:`ClusterState.relabel`):
        its pods stay, and placements from now on read them. Returns whether anything
        changed. Raises UnknownNodeError, InvalidNodeError for a bad label or taint,
        InvalidTimeError; nothing changes then."""
        t = self._time(now, "node_relabelled")
        changed = self.cluster.relabel(node, labels=labels, taints=taints)
        self._tick(t, "node_relabelled")
        return changed

    def node_max_pods(self, node: str, max_pods: int | None, now: float) -> bool:
        """Node ``node``'s pod capacity is now ``max_pods`` (None: no limit;
        :meth:`ClusterState.set_max_pods`): its pods stay, those above a lowered capacity
        included, and placements from now on read it. Returns whether anything changed.
        Raises UnknownNodeError, InvalidNodeError for a bad value, InvalidTimeError;
        nothing changes then."""
        t = self._time(now, "node_max_pods")
        changed = self.cluster.set_max_pods(node, max_pods)
        self._tick(t, "node_max_pods")
        return changed

    def node_removed(self, node: str, now: float) -> EventReport:
        """The node was decommissioned: it is removed, its pods released (quota uncharged) and
        their jobs requeued (gangs whole). A node reported :meth:`node_lost` may be removed
        too: it is no longer lost (not in :meth:`lost_nodes`, never :meth:`node_recovered`).
        Raises UnknownNodeError (neither in the cluster nor lost) or InvalidTimeError."""
        t = self._time(now, "node_removed")
        if isinstance(node, str) and node in self._lost_nodes and node not in self.cluster:
            del self._lost_nodes[node]
            self._tick(t, "node_removed")
            return EventReport()
        return self._remove(node, t, "node_removed")  # (_node_gone forgets it lost)

    def node_lost(self, node: str, now: float) -> EventReport:
        """The node is gone (failed, unreachable): it is removed, and its pods' jobs are
        requeued (gangs whole). Its spec is remembered for :meth:`node_recovered`. Raises
        UnknownNodeError or InvalidTimeError."""
        t = self._time(now, "node_lost")
        spec = self.cluster.node(node)
        rep = self._remove(node, t, "node_lost")
        self._lost_nodes[node] = spec
        logger.warning("node %s lost at %g: %d pods were on it", node, t, len(rep.released))
        return rep

    def node_recovered(self, node: str, now: float) -> None:
        """A node reported :meth:`node_lost` is back, healthy and empty, as it was. Raises
        UnknownNodeError for a node that is not lost (never lost, removed, or already back),
        InvalidTimeError, InvalidNodeError when the nodes added meanwhile place its fabric
        names elsewhere (:meth:`ClusterState.add_node`); nothing changes then."""
        t = self._time(now, "node_recovered")
        spec = self._lost_nodes.get(node) if isinstance(node, str) else None
        if spec is None or node in self.cluster:
            raise UnknownNodeError(f"{node} (not lost)")
        self.cluster.add_node(spec)
        del self._lost_nodes[node]
        self._tick(t, "node_recovered")

    def lost_nodes(self) -> tuple[str, ...]:
        """Nodes reported lost and not back (recovered, or re-added through any door) nor
        removed since, sorted."""
        return tuple(sorted(n for n in self._lost_nodes if n not in self.cluster))

    def _remove(self, node: str, t: float, call: str) -> EventReport:
        self.cluster.node(node)  # UnknownNodeError before anything changes
        self._tick(t, call)
        self._removal = None
        self._removing = "lost" if call == "node_lost" else "removed"
        try:
            self.cluster.remove_node(node)  # _node_gone releases and requeues
        finally:
            self._removing = "removed"
        rep = self._removal
        self._removal = None
        return rep if rep is not None else EventReport()

    def _node_gone(self, node: str, lost: tuple[Binding, ...]) -> None:
        """Listener of every :meth:`ClusterState.remove_node`, whichever door it came
        through: the pods on the node lose their quota charges and their jobs are requeued
        (gangs whole) at the last time seen; the report is kept for the facade call that
        removed it."""
        now = self._clock if math.isfinite(self._clock) else 0.0
        why = f"node {node} {self._removing}"
        self._removal = self._lost_bindings(lost, now, why, released_already=True)
        if self._removing != "lost":  # (lost and re-added through the cluster, now removed:
            self._lost_nodes.pop(node, None)  # node_lost keeps the spec of the one it lost)

    # ----------------------------------------------------------------- device health

    def gpu_unhealthy(self, node: str, gpu: int, now: float, *, evict: bool = True) -> EventReport:
        """A GPU failed: nothing new lands on it; with ``evict`` the pods holding it are
        treated as lost (requeued, gangs whole). Raises UnknownNodeError, InvalidNodeError
        for a GPU index the node lacks, or InvalidTimeError."""
        now = self._time(now, "gpu_unhealthy")
        flag(evict, "evict")
        self.cluster.set_gpu_health(node, gpu, False)
        self._tick(now, "gpu_unhealthy")
        logger.warning("GPU %d of node %s unhealthy at %g", gpu, node, now)
        if not evict:
            return EventReport()
        hit = [
            self.cluster.binding(p)
            for p in self.cluster.pods_on(node)
            if gpu in self.cluster.binding(p).gpus
        ]
        return self._lost_bindings(
            hit, now, f"GPU {gpu} of node {node} unhealthy", released_already=False
        )

    def gpu_healthy(self, node: str, gpu: int) -> None:
        """The GPU works again: it may be allocated. Raises UnknownNodeError, or InvalidNodeError
        for a GPU index the node lacks."""
        self.cluster.set_gpu_health(node, gpu, True)

    def nic_unhealthy(self, node: str, nic: int, now: float, *, evict: bool = True) -> EventReport:
        """An RDMA NIC failed: nothing new lands on it; with ``evict`` the pods holding it are
        treated as lost (a gang requeued whole, a pod-level job loses only those pods).
        Raises UnknownNodeError, InvalidNodeError for a NIC index the node lacks, or
        InvalidTimeError, before anything changes."""
        now = self._time(now, "nic_unhealthy")
        flag(evict, "evict")
        self.cluster.set_nic_health(node, nic, False)
        self._tick(now, "nic_unhealthy")
        if not evict:
            return EventReport()
        hit = [
            self.cluster.binding(p)
            for p in self.cluster.pods_on(node)
            if nic in self.cluster.binding(p).nics
        ]
        return self._lost_bindings(
            hit, now, f"NIC {nic} of node {node} unhealthy", released_already=False
        )

    def nic_healthy(self, node: str, nic: int) -> None:
        """The NIC works again: it may be allocated. Raises UnknownNodeError, or
        InvalidNodeError for a NIC index the node lacks."""
        self.cluster.set_nic_health(node, nic, True)

    def node_unhealthy(self, node: str, now: float, *, evict: bool = True) -> EventReport:
        """The node as a whole is unhealthy (NotReady: kubelet, driver, network): it offers
        nothing new but stays in the cluster; with ``evict`` every pod on it is treated as
        lost (gangs requeued whole, pod-level jobs lose only the pods on it). Raises
        UnknownNodeError or InvalidTimeError before anything changes."""
        now = self._time(now, "node_unhealthy")
        flag(evict, "evict")
        self.cluster.set_node_health(node, False)
        self._tick(now, "node_unhealthy")
        if not evict:
            return EventReport()
        hit = [self.cluster.binding(p) for p in self.cluster.pods_on(node)]
        return self._lost_bindings(hit, now, f"node {node} unhealthy", released_already=False)

    def node_healthy(self, node: str) -> None:
        """The node is healthy again: its healthy devices may be allocated. Raises
        UnknownNodeError."""
        self.cluster.set_node_health(node, True)

    # ----------------------------------------------------------------- internals

    def _held(self, pod: PodId) -> Entry:
        if not isinstance(pod, PodId):
            raise InvalidJobError("pod", pod, "must be a kant.model.PodId")
        e = self.queue.get(pod.job)
        if e is None or pod not in e.assigned:
            raise UnknownPodError(pod)
        return e

    def _release(self, pod: PodId, cause: EvictionCause | None) -> Eviction:
        b = self.cluster.release(pod)
        if self.admitter.is_charged(pod):
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
        self, lost: Sequence[Binding], now: float, why: str, *, released_already: bool
    ) -> EventReport:
        """The cluster took ``lost`` from their jobs (``why``: how): each job is interrupted
        once (:meth:`_lost`); pods of jobs kant does not know are just freed. Pods still on
        their node (not ``released_already``: a node, GPU or NIC failed under them) are
        evictions too (:attr:`EvictionCause.UNHEALTHY`): they may still run."""
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
                    if self.admitter.is_charged(b.pod):
                        self.admitter.uncharge(b.pod)
                reports.append(self._lost(e, by_job[jid], now, why, release=False))
                continue
            hit = tuple(
                Eviction(pod=b.pod, node=b.node, cause=EvictionCause.UNHEALTHY) for b in by_job[jid]
            )
            reports.append(EventReport(evictions=hit))
            reports.append(self._lost(e, by_job[jid], now, why, release=True))
        return _merge(reports)

    def _lost(
        self, e: Entry, bs: Sequence[Binding], now: float, why: str | None, *, release: bool
    ) -> EventReport:
        """Pods ``bs`` of ``e`` are gone (``release``: free them first); the job is requeued
        (a gang whole, a pod-level job's lost pods only). Victims being evicted mark the job
        preempted; another loss the cluster caused (``why`` says how; None: not the
        cluster's doing) is an interruption of the job, which past the interruption limit
        fails it and releases the rest of its pods."""
        pods = [b.pod for b in bs]
        if release:
            for p in pods:
                self._release(p, None)
        victims = all(p in e.terminating for p in pods)
        if victims and pods:
            self.queue.mark_preempted(e.id, now)
        elif pods and why is not None and not self.queue.count_interruption(e.id):
            released, ev = self._release_job(e, skip=None, cause=EvictionCause.JOB_FAILED)
            limit = self.queue.backoff.max_interruptions
            self.queue.fail(e.id, now, f"interruption limit {limit} reached; last: {why}")
            return EventReport(released=(*pods, *released), evictions=ev, failed=(e.id,))
        if e.job.gang and not victims:
            released, ev = self._release_job(e, skip=None, cause=EvictionCause.GANG_REQUEUED)
            self.queue.requeue(e.id, now, failed=False)
            return EventReport(released=(*pods, *released), evictions=ev, requeued=(e.id,))
        self.queue.forget_pods(e.id, pods, now, finished=False)
        if e.job.gang and not self._whole_again(e, now):
            return EventReport(released=tuple(pods))  # (its other victims still terminating)
        return EventReport(released=tuple(pods), requeued=(e.id,))

    def _whole_again(self, e: Entry, now: float) -> bool:
        """Requeue gang ``e`` whole if its last pod has just gone and it is PENDING: some of
        its pods were evicted (victims) before the others ended, finished or evicted in any
        order, and the finished ones are forgotten so that it runs all of its pods again (a
        gang runs all or nothing). Returns whether it was requeued."""
        if e.job.gang and e.phase is JobPhase.PENDING:
            self.queue.requeue(e.id, now, failed=False)  # forget the finished pods too
            return True
        return False

    def check_invariants(self) -> None:
        """Every invariant across cluster, queue and admitter: each one's own
        ``check_invariants()``, then that assigned pods are bound and charged, gangs are
        bound whole (unless being evicted), every bound pod of a known job is assigned and
        on a node of a GPU model its role allows, and no node holds more pods of a role
        than its ``max_per_node`` (taints and selectors are not checked: a node relabelled
        after keeps what runs there).
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
        per_node: dict[tuple[str, str, str], int] = {}
        for b in self.cluster.pods():
            owner = self.queue.get(b.pod.job)
            if owner is not None:
                require(b.pod in owner.assigned, f"Scheduler: {b.pod} bound but not assigned")
                if self._restored.get(b.pod) == b:
                    continue  # (as restore recorded it: a pod that runs, whatever its role)
                role = owner.job.role(b.pod.role)
                if role.max_per_node is not None:
                    k = (b.pod.job, b.pod.role, b.node)
                    per_node[k] = n = per_node.get(k, 0) + 1
                    require(
                        n <= role.max_per_node,
                        f"Scheduler: {n} pods of {b.pod.job}/{b.pod.role} on {b.node}, "
                        f"max_per_node {role.max_per_node}",
                    )
                models = role.gpu_models
                model = self.cluster.node(b.node).gpu_model
                require(
                    not models or model in models,
                    f"Scheduler: {b.pod} bound on {b.node}, a {model} node its role does not allow",
                )
        for p in self.admitter.charged():
            require(self.cluster.has_pod(p), f"Scheduler: {p} charged but not bound")


def _seq(e: Entry) -> int:
    return e.seq


def _check_pods(pods: object) -> None:
    """Refuse (InvalidJobError) ``pods`` that are no iterable of pod ids: a string ("" would
    be none), one bare PodId (itself a tuple: its fields are no pods) or no iterable."""
    if isinstance(pods, PodId):
        raise InvalidJobError(
            "pods", pods, "must be an iterable of kant.model.PodId, not one PodId: pass [pod]"
        )
    if isinstance(pods, str | bytes) or not isinstance(pods, Iterable):
        raise InvalidJobError("pods", pods, "must be an iterable of kant.model.PodId")


def _seconds(name: str, v: object, *, positive: bool, optional: bool) -> Any:
    """``v`` as a float (None kept when ``optional``), or ValidationError naming ``name`` (and
    the value given) unless it is a finite number of seconds whose float is > 0
    (``positive``) or >= 0."""
    if v is None and optional:
        return None
    # the range is checked on the float kept (Fraction(1, 10**400) > 0, but its float is 0.0)
    f = float(v) if is_finite_number(v) else math.nan  # type: ignore[arg-type]
    if not (f > 0 if positive else f >= 0):  # (NaN: not a finite number)
        low = "> 0" if positive else ">= 0"
        none = "None or " if optional else ""
        raise ValidationError(name, v, f"must be {none}a finite number of seconds {low}")
    return f


def _merge(reports: Sequence[EventReport]) -> EventReport:
    return EventReport(
        released=tuple(p for r in reports for p in r.released),
        evictions=tuple(x for r in reports for x in r.evictions),
        requeued=tuple(dict.fromkeys(j for r in reports for j in r.requeued)),
        failed=tuple(j for r in reports for j in r.failed),
        finished=tuple(j for r in reports for j in r.finished),
    )
