"""Tenant queues, the global order, job lifecycle and requeue with backoff (QSCH, paper 3.2.2
and 3.2.4).

Every submitted job is in exactly one :class:`JobPhase`:

``PENDING``   nothing of it is placed; it waits for a cycle (possibly in backoff).
``RUNNING``   at least one of its pods holds resources (assumed by :func:`kant.apply.apply`
              or confirmed). A pod-level job may be RUNNING with pods still to place.
``FINISHED``  every pod finished, or the job was cancelled (``cancelled`` says which).
``FAILED``    its retry limit was reached; ``reason`` says why. It is never scheduled again.

A job evicted by preemption keeps its place in the order (its submission time), or, with
``Queue(requeue_timestamp="eviction")``, goes back as if submitted at its eviction (Kueue's
``requeuingStrategy.timestamp``); see :meth:`Queue.mark_preempted`.

Nothing is ever dropped while it is live: a job leaves the queue's books only after reaching
FINISHED or FAILED, and stays listed (:meth:`Queue.status`) after that while it is among the
``history`` most recently ended jobs (default :data:`DEFAULT_HISTORY`, like Slurm's
``MaxJobCount``), or until :meth:`Queue.forget` releases it (the orchestrator acknowledged
it). ``history=None`` keeps every job (the simulator does, for its records).

The global order is the queue's order key (:mod:`kant.queueing.order`; by default the paper's:
priority, submission time, size smaller first, then the unique submission sequence number), so
the order is total and deterministic.

The queue is pure bookkeeping: it never touches a cluster and holds no queueing policy.
:func:`kant.cycle.schedule_cycle` reads it; :func:`kant.apply.apply` and the
:class:`kant.scheduler.Scheduler` events change it.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any, Final

import attrs
from sortedcontainers import SortedList

from kant.contracts import OrderKey
from kant.errors import (
    DuplicateError,
    InvalidConfigError,
    InvalidJobError,
    InvalidTimeError,
    InvariantError,
    KantError,
    UnknownJobError,
    UnknownPodError,
    ValidationError,
    require,
)
from kant.model import (
    Binding,
    Job,
    PodId,
    ReadOnlyDict,
    Reason,
    ReasonCode,
    finite_time,
    is_finite_number,
    is_int,
    is_number,
    number,
)
from kant.queueing.backoff import Backoff
from kant.queueing.order import ORDER_KEYS, larger_first_order, paper_order

logger = logging.getLogger(__name__)

DEFAULT_HISTORY = 10_000
"""How many FINISHED or FAILED jobs a :class:`Queue` keeps by default (oldest ended first
released)."""

REQUEUE_TIMESTAMPS = ("submission", "eviction")
"""Where a job evicted by preemption goes back in the order (``Queue(requeue_timestamp=)``)."""


def _as_float(v: Any) -> Any:
    if not is_number(v):
        return v
    try:
        return float(v)
    except OverflowError:  # (an int beyond the floats: the check refuses it)
        return v


def _time(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    # -inf is "none"; +inf would hold the job back for ever ("retry at inf")
    if not isinstance(value, float) or not (math.isfinite(value) or value == -math.inf):
        raise InvalidJobError(attribute.name, value, "must be a finite number (-inf: none)")


def _opt_time(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, float) or not 0 <= value < math.inf):
        raise InvalidJobError(attribute.name, value, "must be None or a finite number >= 0")


def _reason(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, Reason):
        raise InvalidJobError(attribute.name, value, "must be None or a kant.model.Reason")


def _flag(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidJobError(attribute.name, value, "must be a bool")


class JobPhase(enum.StrEnum):
    """Where a job is in its lifecycle (see the module docstring)."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


# --------------------------------------------------------------------------- records


@attrs.frozen(kw_only=True)
class Nomination:
    """Devices nominated for a preemptor while its victims terminate.

    ``bindings`` is the placement found on the snapshot with the victims removed; each cycle
    holds the free part of it out of placement for other jobs, until the preemptor is placed
    or the nomination is dropped. ``victims`` are the victim pods still to go.
    ``membership`` is the cluster's :attr:`~kant.state.ClusterState.membership_version` the
    nomination was made at: a node it names whose
    :meth:`~kant.state.ClusterState.incarnation` is later (removed and added again under
    its name, perhaps as another GPU model, or relabelled) is not the node it was made for,
    and a cycle drops the nomination, as it does one naming a node gone (None: a nomination
    built by hand; only that its nodes exist is checked). ``by_priority`` says that some of
    its victims were chosen by a rule other than reclaim (priority or backfill preemption):
    a pod-level preemptor whose request borrows then starts every pod it holds devices for,
    not only its nominal part (its victims were evicted for all of them).
    ``within_nominal`` says exactly whether the victim search found ``bindings`` with the
    job held within its tenant's nominal quota, on the GPU models where its tenant stays
    within nominal: whether some victim taken for it is a unit of another tenant that a
    borrowing job of its priority may not take
    (:meth:`~kant.preemption.PreemptionPolicy.may_borrow_from`), whatever rule took the unit
    (reclaim, priority with reclaim off, a user rule); taking its own tenant's units holds
    it nowhere. While it holds the nomination, and its tenant's nominal models still include
    the GPU models of ``bindings``, the cycle places it on its nominal models too (all of
    them at that cycle: it never starts where its tenant borrows, but may start on a
    nominal model other than that of ``bindings`` when room frees up there first).
    Recomputed over the victims still its own when a victim is given back, as
    ``by_priority`` is.
    """

    job: str
    bindings: tuple[Binding, ...]
    victims: tuple[PodId, ...]
    created_at: float
    membership: int | None = None
    by_priority: bool = False
    within_nominal: bool = False


@attrs.frozen(kw_only=True)
class JobStatus:
    """A read-only view of one job's bookkeeping."""

    job: Job
    seq: int
    phase: JobPhase
    reason: Reason | None
    attempts: int
    backoff_until: float
    pending_since: float
    started_at: float | None
    running: tuple[PodId, ...]
    confirmed: tuple[PodId, ...]
    finished: tuple[PodId, ...]
    terminating: tuple[PodId, ...]
    cancelled: bool
    nomination: Nomination | None
    evicted_at: float | None = None
    interruptions: int = 0

    @property
    def id(self) -> str:
        """The job's id (``job.id``)."""
        return self.job.id


@attrs.frozen(kw_only=True)
class FailureHistory:
    """What a job carries on from an earlier job it stands in for (``Queue.submit(history=)``):
    its failures (``attempts``), when the backoff of the last one ends (``backoff_until``),
    the cluster's ``interruptions`` of it, its last ``reason`` (a ``backoff`` one is shown
    while the backoff lasts) and whether it had ``failed`` (no retry left: refused by
    ``submit``). An orchestrator that keeps these numbers outside kant (the Kubernetes shim
    stores them on the cluster's objects, across its restarts) builds one from them; one
    that holds the earlier job's :class:`JobStatus` passes that, or :meth:`of` it.

    Across a restart of the orchestrator, also: ``pending_since``, when the waiting job
    began to wait (None: at its submit; Backfill counts its threshold from it, and the jobs
    it may preempt are those started since; a time later than the submit's is read as the
    submit's), and ``evicted_at``, when it was last evicted by preemption (None: not since it
    last ran; within :attr:`~kant.preemption.PreemptionPolicy.cascade_window` of it, the job
    does not preempt in turn; not later than the submit's ``now`` when it is given)."""

    attempts: int = attrs.field(default=0, validator=number(InvalidJobError, low=0, integer=True))
    interruptions: int = attrs.field(
        default=0, validator=number(InvalidJobError, low=0, integer=True)
    )
    backoff_until: float = attrs.field(default=-math.inf, converter=_as_float, validator=_time)
    reason: Reason | None = attrs.field(default=None, validator=_reason)
    failed: bool = attrs.field(default=False, validator=_flag)
    pending_since: float | None = attrs.field(
        default=None, converter=_as_float, validator=_opt_time
    )
    evicted_at: float | None = attrs.field(default=None, converter=_as_float, validator=_opt_time)

    @classmethod
    def of(cls, status: JobStatus | Entry) -> FailureHistory:
        """The failures the job of ``status`` (or of a queue's entry) would carry on (its
        reason, its phase FAILED), its wait when it is PENDING and its last eviction."""
        return cls(
            attempts=status.attempts,
            interruptions=status.interruptions,
            backoff_until=status.backoff_until,
            reason=status.reason,
            failed=status.phase is JobPhase.FAILED,
            pending_since=status.pending_since if status.phase is JobPhase.PENDING else None,
            evicted_at=status.evicted_at,
        )

    @property
    def empty(self) -> bool:
        """Whether there is no failure to carry on: no failure, no interruption, not failed
        (a wait or an eviction is none)."""
        return not (self.attempts or self.interruptions or self.failed)


@attrs.define(eq=False)
class Entry:
    """Mutable bookkeeping of one job (internal to kant; read :class:`JobStatus` outside)."""

    job: Job
    seq: int
    key: tuple[Any, ...]
    phase: JobPhase
    pending_since: float
    reason: Reason | None = None
    attempts: int = 0
    interruptions: int = 0  # times the cluster took running pods from it (Backoff)
    backoff_until: float = -math.inf
    started_at: float | None = None
    assigned: dict[PodId, float] = attrs.field(factory=dict)  # pod -> time it was bound
    confirmed: set[PodId] = attrs.field(factory=set)
    finished: set[PodId] = attrs.field(factory=set)
    # victim pod -> (preemptor, when it was marked, None if not told)
    terminating: dict[PodId, tuple[str, float | None]] = attrs.field(factory=dict)
    cancelled: bool = False
    nomination: Nomination | None = None
    _remaining: tuple[PodId, ...] | None = None
    _pods: tuple[PodId, ...] | None = None  # every pod of the job, made once (see pods)
    _pod_set: frozenset[PodId] | None = None  # the same, as a set (see pod_set)
    evicted_at: float | None = None  # last eviction by preemption, until it runs again
    # the submit time its order key reads when not its job's own (Queue._key_of): with
    # requeue_timestamp="eviction", when it was last evicted by preemption
    ordered_at: float | None = None
    version: int = 0  # bumped by touch(): caches of what the job holds compare it

    @property
    def id(self) -> str:
        """The job's id (``job.id``)."""
        return self.job.id

    def pods(self) -> tuple[PodId, ...]:
        """Every pod of the job, in its pod order (``job.pods()``, made once per entry: the
        same pod ids every time the remaining pods are derived again)."""
        if self._pods is None:
            self._pods = tuple(self.job.pods())
        return self._pods

    def pod_set(self) -> frozenset[PodId]:
        """Every pod of the job, as a set (made once per entry, as :meth:`pods`)."""
        if self._pod_set is None:
            self._pod_set = frozenset(self.pods())
        return self._pod_set

    def drop_caches(self) -> None:
        """Forget the pods and remaining pods derived from the job (made again if asked)."""
        self._pods = self._remaining = self._pod_set = None

    def remaining(self) -> tuple[PodId, ...]:
        """Pods neither placed nor finished, in the job's pod order."""
        if self._remaining is None:
            if not self.assigned and not self.finished:
                self._remaining = self.pods()
            else:
                held, done = self.assigned, self.finished
                self._remaining = tuple(p for p in self.pods() if p not in held and p not in done)
        return self._remaining

    def touch(self) -> None:
        """Forget what is derived from the pods the job holds (call after any change); caches
        outside the queue notice through :attr:`version`."""
        self._remaining = None
        self.version += 1

    @property
    def schedulable(self) -> bool:
        """Has pods to place now: pending, or a pod-level job running with pods left."""
        if self.phase is JobPhase.PENDING:
            return True
        if self.phase is JobPhase.RUNNING and not self.job.gang:
            return bool(self.remaining())
        return False

    @property
    def waits_for_nomination(self) -> bool:
        """Holds a nomination and has pods to place: PENDING (in backoff too), or a pod-level
        job RUNNING with pods left. Such a nomination is live: every cycle holds its devices
        (its job is a candidate) until the job is placed or the nomination dropped, and the
        job waits for the nomination's ``victims`` to go. The one test of "its preemptor
        still waits for it" (:meth:`kant.scheduler.Scheduler.victims_spared`, the
        Kubernetes shim's evictions a budget holds back). O(1), but O(pods) once after a
        change of the pods a running pod-level job holds (:meth:`remaining`)."""
        return self.nomination is not None and self.schedulable

    def view(self) -> JobStatus:
        """A frozen :class:`JobStatus` of the job now (pod sets sorted). O(pods held)."""
        return JobStatus(
            job=self.job,
            seq=self.seq,
            phase=self.phase,
            reason=self.reason,
            attempts=self.attempts,
            backoff_until=self.backoff_until,
            pending_since=self.pending_since,
            started_at=self.started_at,
            running=tuple(sorted(self.assigned)),
            confirmed=tuple(sorted(self.confirmed)),
            finished=tuple(sorted(self.finished)),
            terminating=tuple(sorted(self.terminating)),
            cancelled=self.cancelled,
            nomination=self.nomination,
            evicted_at=self.evicted_at,
            interruptions=self.interruptions,
        )


def _check_time(now: object, call: str) -> None:
    """Refuse (InvalidTimeError naming ``call``) a ``now`` that is no finite number, before a
    transition changes anything: a NaN backoff was never honoured, a string broke the queue
    half way."""
    if type(now) is not float or not math.isfinite(now):
        finite_time(now, call)


def _pods_of(e: Entry, pods: Iterable[PodId]) -> list[PodId]:
    """``pods`` as a list, once each is known to be one of ``e``'s job's pods (UnknownPodError
    for the first that is not). O(pods), one set test in C."""
    pods = list(pods)
    mine = e.pod_set()

    def known(p: object) -> bool:  # (a plain tuple equals the PodId of its fields: none)
        try:
            return type(p) is PodId and p in mine
        except TypeError:  # (an unhashable item: no pod id)
            return False

    try:
        ok = mine.issuperset(pods) and all(type(p) is PodId for p in pods)
    except TypeError:
        ok = False
    if not ok:
        raise UnknownPodError(next(p for p in pods if not known(p)))
    return pods


_FINITE_ORDERS: Final = frozenset({paper_order, larger_first_order})
"""kant's order keys: their keys hold the priority, submission time and size of a job
accepted, never a NaN (so they are not looked into)."""


def _unequal_to_itself(key: object) -> bool:
    """Whether order key ``key`` holds a value not equal to itself (a NaN, inside tuples or
    lists too): it compares False both ways with any other, so a sorted index would neither
    order it nor find it again. Raises what ``!=`` raises (ValueError for a NumPy array)."""
    if isinstance(key, tuple | list):
        return any(_unequal_to_itself(v) for v in key)
    return bool(key != key)


def _not_an_id(field: str, value: object) -> InvalidJobError:
    """The error for a job id or tenant that is not hashable, so no job's."""
    return InvalidJobError(field, value, "must be a str (an id)")


# --------------------------------------------------------------------------- the queue


class Queue:
    """Per-tenant queues merged into one global order, plus every job's lifecycle.

    ``order`` is the order key (a :class:`kant.contracts.OrderKey` or a name registered in
    :data:`kant.queueing.order.ORDER_KEYS`, default ``"paper"``); ``backoff`` the requeue
    backoff; ``history`` how many FINISHED or FAILED jobs stay listed (``None``: all; see the
    module docstring); ``requeue_timestamp`` where a job evicted by preemption goes back in
    the order: ``"submission"`` (default: by its original submission time, so a victim that
    already waited keeps its place) or ``"eviction"`` (as if submitted when it was evicted,
    Kueue's ``requeuingStrategy.timestamp: Eviction``). All reads are deterministic (order
    keys end with a unique sequence number). A setting that cannot work (an ``order`` neither
    a name nor callable, a ``backoff`` not a Backoff) raises InvalidConfigError at once.
    """

    def __init__(
        self,
        *,
        order: OrderKey | str = "paper",
        backoff: Backoff | None = None,
        history: int | None = DEFAULT_HISTORY,
        requeue_timestamp: str = "submission",
    ) -> None:
        if history is not None and (
            not isinstance(history, int) or isinstance(history, bool) or history < 0
        ):
            raise InvalidConfigError("history", history, "must be None or an int >= 0")
        if not isinstance(order, str) and not callable(order):
            raise InvalidConfigError("order", order, "must be an order key name or an OrderKey")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise InvalidConfigError("backoff", backoff, "must be None or a Backoff")
        self.order: OrderKey = ORDER_KEYS.build(order) if isinstance(order, str) else order
        self.backoff = backoff if backoff is not None else Backoff()
        self.history = history
        self._ended: dict[str, None] = {}  # FINISHED or FAILED job ids, oldest ended first
        self.released = 0  # jobs released from the books (history bound or forget())
        if requeue_timestamp not in REQUEUE_TIMESTAMPS:
            raise InvalidConfigError(
                "requeue_timestamp", requeue_timestamp, "must be 'submission' or 'eviction'"
            )
        self.requeue_timestamp = requeue_timestamp
        self._entries: dict[str, Entry] = {}
        self._order: SortedList = SortedList()  # (key, job id) of schedulable jobs
        self._in_order: set[str] = set()
        self._tenants: dict[str, SortedList] = {}  # tenant -> (key, job id) of schedulable jobs
        self._running: dict[str, Entry] = {}  # RUNNING jobs, in the order they started
        self._terminating: set[str] = set()  # jobs with victim pods still to go
        self._nominated: dict[str, Entry] = {}  # jobs holding a nomination (see nominated)
        # job id -> the tick of its entry's last change, oldest first (see changed_since)
        self._changes: dict[str, int] = {}
        self._tick = 0
        # the reasons and incarnations set_reasons last applied in full, and the tick then
        self._reasons_done: tuple[Mapping[str, Reason], Mapping[str, Any], int] | None = None
        self._floor = 0  # changes up to this tick may be missing from _changes
        self._seq = 0
        self._cands: list[Entry] | None = None  # the global order's entries, kept in order
        self._inc: dict[str, tuple[int, int]] = {}  # in the order: job -> (seq, version)

    # ----------------------------------------------------------------- reads

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        try:
            return job_id in self._entries
        except TypeError:
            raise _not_an_id("job_id", job_id) from None

    def entry(self, job_id: str) -> Entry:
        """The job's bookkeeping; raises :class:`~kant.errors.UnknownJobError`."""
        try:
            return self._entries[job_id]
        except (KeyError, TypeError):  # (TypeError: not hashable, so no job's id)
            raise UnknownJobError(job_id) from None

    def get(self, job_id: str) -> Entry | None:
        """The job's bookkeeping, or None for a job never submitted or released from the books.
        Raises InvalidJobError for a ``job_id`` that cannot be an id (not hashable)."""
        try:
            return self._entries.get(job_id)
        except TypeError:
            raise _not_an_id("job_id", job_id) from None

    def entries(self) -> Iterator[Entry]:
        """Every job's bookkeeping, in submission order."""
        return iter(self._entries.values())

    def status(self, job_id: str) -> JobStatus:
        """The job's :class:`JobStatus` now; raises :class:`~kant.errors.UnknownJobError` for a job
        never submitted or released. O(pods held)."""
        return self.entry(job_id).view()

    def statuses(self) -> tuple[JobStatus, ...]:
        """Every job listed (not released), in submission order (a value: compare two of them)."""
        return tuple(e.view() for e in self._entries.values())

    def jobs(self, phase: JobPhase | None = None) -> Iterator[str]:
        """Job ids (submission order), optionally of one phase."""
        for e in self._entries.values():
            if phase is None or e.phase is phase:
                yield e.id

    def waiting(self) -> int:
        """How many jobs have pods to place (the length of the global order). O(1)."""
        return len(self._order)

    def candidates(self) -> list[Entry]:
        """Jobs with pods to place, in the global order (a new list). O(candidates): a copy
        of a list the queue keeps in order as jobs enter and leave it."""
        if self._cands is None:
            ents = self._entries
            self._cands = [ents[jid] for _key, jid in self._order]
        return list(self._cands)

    def incarnations(self) -> dict[str, tuple[int, int]]:
        """``{job id: (seq, version)}`` of every job with pods to place (a new dict): what
        :attr:`kant.cycle.CycleResult.seen` records of its candidates. O(candidates), a copy
        of a map the queue keeps as jobs change."""
        return dict(self._inc)

    def tenant_queue(self, tenant: str) -> list[str]:
        """The job ids waiting in ``tenant``'s queue, in order. Raises InvalidJobError for a
        ``tenant`` that cannot be a name (not hashable)."""
        try:
            sl = self._tenants.get(tenant)
        except TypeError:
            raise _not_an_id("tenant", tenant) from None
        return [jid for _key, jid in sl] if sl is not None else []

    def tenants(self) -> list[str]:
        """Tenants that have jobs with pods to place, sorted."""
        return sorted(self._tenants)

    def last_in_order(self) -> str | None:
        """The id of the last job of the global order (the job a cycle walks last), None
        when no job waits. O(log jobs)."""
        return self._order[-1][1] if self._order else None

    def running(self) -> list[Entry]:
        """RUNNING jobs, in the order they started (ties: submission order). A new list."""
        return list(self._running.values())

    def nominated(self) -> list[Entry]:
        """Jobs holding a nomination, in the order they came to hold one (a new list).
        O(nominations): an index kept where nominations are set and ended. Those whose
        job still waits for it: :attr:`Entry.waits_for_nomination`."""
        return list(self._nominated.values())

    def is_terminating(self, pod: PodId) -> bool:
        """Is ``pod`` a victim still to go (being evicted: chosen in an earlier cycle)? O(1).
        Raises UnknownPodError for what cannot be a pod id."""
        try:
            e = self._entries.get(pod.job)
        except (AttributeError, TypeError):  # (checked only when the look-up fails)
            raise UnknownPodError(pod) from None
        return e is not None and pod in e.terminating

    def terminating(self) -> list[Entry]:
        """RUNNING jobs with victim pods still to go, in the order they started. O(1) when
        there are none (most cycles), else O(running)."""
        if not self._terminating:
            return []
        term = self._terminating
        return [e for jid, e in self._running.items() if jid in term]

    @property
    def tick(self) -> int:
        """A counter of entry changes (see :meth:`changed_since`)."""
        return self._tick

    def changed_since(self, tick: int) -> list[str] | None:
        """The ids of the jobs whose entry changed after ``tick`` (a value of :attr:`tick`):
        its phase, its pods (its version), its victim pods, its nomination or its place in the
        order; each once, most recent first, including jobs since released from the books.
        None when the queue no longer knows (a job released since had changed after
        ``tick``): the caller must look at every entry. O(changes since ``tick``). Raises
        ValidationError for a ``tick`` that is no int."""
        if not is_int(tick):
            raise ValidationError("tick", tick, "must be an int (a value of Queue.tick)")
        if tick < self._floor:
            return None
        out = []
        for jid, t in reversed(self._changes.items()):
            if t <= tick:
                break
            out.append(jid)
        return out

    def _changed(self, jid: str) -> None:
        self._tick += 1
        changes = self._changes
        changes.pop(jid, None)
        changes[jid] = self._tick

    def counts(self) -> dict[str, int]:
        """How many jobs are in each phase, ``{phase value: count}`` (every phase listed).
        O(jobs)."""
        out = {p.value: 0 for p in JobPhase}
        for e in self._entries.values():
            out[e.phase.value] += 1
        return out

    # ----------------------------------------------------------------- submit / cancel

    def submit(
        self,
        job: Job,
        now: float | None = None,
        *,
        history: JobStatus | FailureHistory | None = None,
    ) -> JobStatus:
        """Add a job (PENDING). A duplicate id raises DuplicateError; a non-Job raises
        InvalidJobError; a ``now`` that is no finite number >= 0, InvalidTimeError; either way
        nothing changes. ``now`` (default ``job.submitted_at``)
        starts its wait.

        ``history``: the status of an earlier job this one stands in for (an orchestrator
        that dropped a job after a failure and submits its pods again as a new job), or the
        :class:`FailureHistory` of it: the job carries on its failures, waiting out the rest
        of that backoff with its reason, and its next failure counts on from them, as its
        interruptions do. A FAILED job (or one past the retry or interruption limit) has no
        retry left: InvalidJobError, as for a ``history`` that is neither.

        The submit time (what FIFO orders by) is the job's own ``submitted_at`` when it carries
        one, else ``now``: a job left at ``submitted_at=0``, the default, meaning "not given"
        (as Kubernetes reads a zero timestamp), is stored with ``submitted_at=now``. When both
        are given and differ, the job's wins (an orchestrator resubmitting after a restart
        keeps the job's place); its wait still starts at ``now``."""
        history = self.check_submit(job, now, history=history)
        if now is not None and job.submitted_at == 0 and now != 0:
            job = attrs.evolve(job, submitted_at=float(now))
        seq = self._seq + 1
        e = Entry(
            job=job,
            seq=seq,
            key=self.order(job, seq),
            phase=JobPhase.PENDING,
            pending_since=job.submitted_at if now is None else float(now),
        )
        if history is not None:
            e.attempts, e.backoff_until = history.attempts, history.backoff_until
            e.interruptions = history.interruptions
            if history.pending_since is not None:  # (the earlier: it waited since then)
                e.pending_since = min(e.pending_since, history.pending_since)
            e.evicted_at = history.evicted_at
            r = history.reason
            if r is not None and r.code is ReasonCode.BACKOFF and e.pending_since < e.backoff_until:
                e.reason = r
        self._sync(e)  # (first: an order key that cannot be compared changes nothing)
        self._seq = seq
        self._entries[job.id] = e
        return e.view()

    def check_submit(
        self,
        job: Job,
        now: float | None = None,
        *,
        history: JobStatus | FailureHistory | None = None,
    ) -> FailureHistory | None:
        """Raise what :meth:`submit` would raise for these arguments (DuplicateError,
        InvalidJobError, InvalidTimeError for a ``now`` that is no finite number >= 0),
        changing nothing; else return ``history`` as a FailureHistory (or
        None). For a caller that must know the job is accepted before it changes anything else
        (:meth:`kant.scheduler.Scheduler.restore`). O(1)."""
        if not isinstance(job, Job):
            raise InvalidJobError("job", job, "must be a kant.model.Job")
        if job.id in self._entries:
            raise DuplicateError(f"job {job.id!r} was already submitted")
        if now is not None and not is_finite_number(now):
            raise InvalidTimeError("now", now, "Queue.submit: must be a finite number")
        if now is not None and now < 0:
            raise InvalidTimeError("now", now, "Queue.submit: must be >= 0 (a submit time)")
        named: object = history
        if isinstance(history, JobStatus):
            named, history = history.id, FailureHistory.of(history)
        elif history is not None and not isinstance(history, FailureHistory):
            raise InvalidJobError(
                "history", history, "must be a kant.queueing.JobStatus or FailureHistory"
            )
        if history is not None and (
            history.failed
            or self.backoff.exhausted(history.attempts)
            or self.backoff.interruptions_exhausted(history.interruptions)
        ):
            raise InvalidJobError("history", named, "is past its retry or interruption limit")
        at = None if history is None else history.evicted_at
        if at is not None and now is not None and at > now:
            raise InvalidJobError("history.evicted_at", at, f"is later than the submit ({now:g})")
        return history

    def redescribe(self, job: Job) -> JobStatus:
        """Replace the description of the PENDING job ``job.id`` with ``job``, which has the
        same pods (``job.pods()``, in the same order): what an orchestrator does when what
        a waiting job asks changes but its pods do not (a Kubernetes pod's affinity terms
        that select namespaces by their labels, when a namespace is relabelled). The job
        keeps its place in the order (its sequence number; its order key is computed again
        from ``job`` with it, the same key unless ``job`` changes what the order reads, such
        as its priority; a job requeued as of its eviction, ``requeue_timestamp="eviction"``,
        stays ordered by that eviction time, not by ``job.submitted_at``), its wait
        (``pending_since``), its failures, backoff and reason, and its nomination: a cycle
        places it against ``job`` (a nomination whose devices no longer suit it is dropped
        once its victims are gone, as one that no longer fits, :mod:`kant.cycle`). A
        ``job`` that leaves ``submitted_at`` at 0 keeps the submit time stored. Cancelling
        and submitting it again would lose all of that.

        Raises, changing nothing: :class:`~kant.errors.InvalidJobError` for a ``job`` that is
        not a Job (field ``job``), a job that is not PENDING (field ``phase``), or one whose
        pods differ (field ``pods``); :class:`~kant.errors.UnknownJobError` for an id not
        listed; InvalidConfigError when the new order key cannot be compared with the
        others' (:meth:`submit`). O(log jobs + pods of the job)."""
        if not isinstance(job, Job):
            raise InvalidJobError("job", job, "must be a kant.model.Job")
        e = self.entry(job.id)
        if e.phase is not JobPhase.PENDING:
            raise InvalidJobError(
                "phase", e.phase.value,
                f"job {job.id!r} is not pending: only a waiting job is described again",
            )  # fmt: skip
        if tuple(job.pods()) != e.pods():
            raise InvalidJobError(
                "pods", [str(p) for p in job.pods()],
                f"must be the pods of job {job.id!r} as queued "
                f"({[str(p) for p in e.pods()]}): cancel it and submit the new job instead",
            )  # fmt: skip
        if job.submitted_at == 0 and e.job.submitted_at != 0:
            job = attrs.evolve(job, submitted_at=e.job.submitted_at)
        if job == e.job:
            return e.view()
        old_job, old_key = e.job, e.key
        key = self._key_of(e, job)
        inside = e.id in self._in_order  # (always, for a pending job)
        if inside:
            self._unsync(e)
        e.job, e.key = job, key
        try:
            self._sync(e)  # (raises before it changes anything: see _place_of)
        except KantError:  # (an order key whose keys do not compare: InvalidConfigError)
            e.job, e.key = old_job, old_key
            if inside:  # (back where it was: its old key compared there; no change logged)
                self._sync(e, log=False)
            raise
        e.drop_caches()
        e.touch()
        self._sync(e)  # (its new version, in the change log and the kept incarnations)
        return e.view()

    def forget(self, job_id: str) -> None:
        """Release a FINISHED or FAILED job from the books now (the orchestrator acknowledged
        it): it is no longer listed and its id may be submitted again. Raises
        :class:`~kant.errors.UnknownJobError` for a job not listed, or
        :class:`~kant.errors.InvalidJobError` for one still pending or running (nothing
        changes). O(1)."""
        e = self.entry(job_id)
        if e.phase not in (JobPhase.FINISHED, JobPhase.FAILED):
            raise InvalidJobError(
                "job", job_id, f"is {e.phase.value}: only a finished or failed job is forgotten"
            )
        self._release(job_id)

    def _release(self, job_id: str) -> None:
        del self._entries[job_id]
        self._nominated.pop(job_id, None)  # (an ended job holds none: kept so)
        t = self._changes.pop(job_id, None)
        if t is not None and t > self._floor:
            self._floor = t
        self._ended.pop(job_id, None)
        self.released += 1

    def cancel(self, job_id: str) -> tuple[PodId, ...]:
        """Mark the job FINISHED (cancelled). Returns the pods it still holds, which the caller
        must release (:meth:`kant.scheduler.Scheduler.cancel` does). Cancelling a finished or
        failed job changes nothing and returns ()."""
        e = self.entry(job_id)
        if e.phase in (JobPhase.FINISHED, JobPhase.FAILED):
            return ()
        held = tuple(sorted(e.assigned))
        e.assigned.clear()
        e.confirmed.clear()
        e.terminating.clear()
        e.cancelled = True
        self._nominate(e, None)
        e.reason = None
        e.touch()
        self._set_phase(e, JobPhase.FINISHED)
        return held

    # ----------------------------------------------------------------- transitions (kant-internal)

    def mark_assigned(self, job_id: str, pods: Iterable[PodId], now: float) -> None:
        """Pods were bound (assumed). The job becomes RUNNING; its nomination ends. Raises
        UnknownJobError, UnknownPodError for a pod the job does not have, or InvalidTimeError
        for a ``now`` that is no finite number, changing nothing."""
        e = self.entry(job_id)
        _check_time(now, "Queue.mark_assigned")
        pods = _pods_of(e, pods)
        e.assigned.update(dict.fromkeys(pods, now))
        if e.phase is JobPhase.PENDING:
            e.started_at = now
        e.evicted_at = None
        self._nominate(e, None)
        e.reason = None
        e.touch()
        self._set_phase(e, JobPhase.RUNNING)

    def mark_confirmed(self, pod: PodId) -> None:
        """The orchestrator confirmed the pod runs; raises :class:`~kant.errors.UnknownPodError` if
        its job is unknown or the pod is not placed (or it is no pod id)."""
        e = self._entries.get(pod.job) if isinstance(pod, PodId) else None
        if e is None or pod not in e.assigned:
            raise UnknownPodError(pod)
        e.confirmed.add(pod)

    def mark_terminating(
        self, pods: Iterable[PodId], preemptor: str, now: float | None = None
    ) -> None:
        """These victim pods are going away for ``preemptor`` from ``now`` on (when given:
        start-time estimates play their eviction a grace period after it); pods not held are
        skipped, and a pod marked already keeps its first mark (a time is filled in if that
        had none). Raises
        :class:`~kant.errors.UnknownJobError` for an unknown job, UnknownPodError for what is
        no pod id, InvalidTimeError for a ``now`` that is no finite number, before any pod
        is marked."""
        if now is not None:
            _check_time(now, "Queue.mark_terminating")
        pods = list(pods)
        for p in pods:
            if not isinstance(p, PodId):
                raise UnknownPodError(p)
            self.entry(p.job)
        for p in pods:
            e = self.entry(p.job)
            if p in e.assigned:
                was = e.terminating.get(p)
                if was is None or was[1] is None:  # (the first mark's, its time once known)
                    e.terminating[p] = (preemptor if was is None else was[0], now)
                self._terminating.add(e.id)
                self._changed(e.id)

    def unmark_terminating(self, pods: Iterable[PodId]) -> None:
        """These victim pods are not going after all (the orchestrator gave up evicting them):
        they hold their resources for their job as before. Pods not marked are skipped."""
        for p in pods:
            e = self._entries.get(p.job)
            if e is not None and e.terminating.pop(p, None) is not None:
                if not e.terminating:
                    self._terminating.discard(e.id)
                self._changed(e.id)

    def mark_preempted(self, job_id: str, now: float) -> None:
        """Pods of the job were evicted by preemption at ``now``: remember when (a job evicted
        a moment ago does not preempt in turn, :attr:`PreemptionPolicy.cascade_window`) and,
        with ``requeue_timestamp="eviction"``, move it in the order as if submitted ``now``.
        Raises :class:`~kant.errors.UnknownJobError`, InvalidTimeError for a ``now`` that is
        no finite number, and the order's error for one it cannot take as a submit time (a
        negative one), changing nothing."""
        e = self.entry(job_id)
        _check_time(now, "Queue.mark_preempted")
        key = e.key
        if self.requeue_timestamp == "eviction":
            was, e.ordered_at = e.ordered_at, float(now)
            try:
                key = self._key_of(e, e.job)
            except KantError:
                e.ordered_at = was
                raise
        e.evicted_at = float(now)
        self._changed(e.id)
        if key != e.key:  # (only ever with requeue_timestamp="eviction")
            inside = e.id in self._in_order
            if inside:
                self._unsync(e)
            e.key = key
            if inside:
                self._sync(e)

    def set_nomination(self, nom: Nomination | None, job_id: str) -> None:
        """Set (None: clear) the devices nominated for the job; raises
        :class:`~kant.errors.UnknownJobError`, and ValidationError for a ``nom`` that is no
        Nomination, is another job's, or is for a job that ended (an ended job holds none)."""
        e = self.entry(job_id)
        if nom is not None:
            if not isinstance(nom, Nomination) or nom.job != job_id:
                why = f"must be None or a Nomination of job {job_id!r}"
                raise ValidationError("nomination", nom, why)
            if e.phase in (JobPhase.FINISHED, JobPhase.FAILED):
                raise ValidationError("nomination", job_id, "is for a job that ended")
        if e.nomination is not nom:
            self._nominate(e, nom)
            self._changed(e.id)  # (a quiet cycle's result no longer holds, see kant.cycle)

    def set_reason(self, job_id: str, reason: Reason | None) -> None:
        """Set (None: clear) why the job is not (fully) placed; ignored for an unknown job or one
        that is not PENDING or RUNNING. Raises InvalidJobError for a ``job_id`` that cannot be
        an id (not hashable)."""
        try:
            e = self._entries.get(job_id)
        except TypeError:
            raise _not_an_id("job_id", job_id) from None
        if e is not None and e.phase in (JobPhase.PENDING, JobPhase.RUNNING):
            e.reason = reason
            self._reasons_done = None  # (a reason set_reasons gave may differ now)

    def set_reasons(
        self,
        reasons: Mapping[str, Reason],
        incarnations: Mapping[str, tuple[int, int]],
        *,
        current: Collection[str] = (),
    ) -> None:
        """:meth:`set_reason` for every job of ``reasons`` that is still the incarnation
        ``(seq, version)`` given in ``incarnations`` (or is in ``current``: known current
        by the caller); the others are left as they are. One pass, O(len(reasons)).

        O(1) when ``reasons`` and ``incarnations`` are the very read-only mappings
        (:class:`~kant.model.ReadOnlyDict`) of the last pass, with no ``current``, and no
        entry changed and no reason was set since: the pass would change nothing. A quiet
        cycle's result answered again shares its mappings (see
        :func:`kant.cycle.schedule_cycle`), so applying it again costs nothing."""
        done = self._reasons_done
        if (
            not current
            and done is not None
            and done[0] is reasons
            and done[1] is incarnations
            and done[2] == self._tick
        ):
            return
        ents = self._entries
        live = (JobPhase.PENDING, JobPhase.RUNNING)
        for jid, reason in reasons.items():
            e = ents.get(jid)
            if e is None or e.reason is reason or e.phase not in live:
                continue
            if incarnations.get(jid) == (e.seq, e.version) or jid in current:
                e.reason = reason
        # kept only for read-only mappings: a dict could be changed and passed again
        frozen = isinstance(reasons, ReadOnlyDict) and isinstance(incarnations, ReadOnlyDict)
        self._reasons_done = (reasons, incarnations, self._tick) if frozen and not current else None

    def forget_pods(
        self, job_id: str, pods: Iterable[PodId], now: float, *, finished: bool
    ) -> None:
        """Pods no longer hold resources: they finished (``finished=True``) or must be placed
        again. The phase follows: FINISHED when every pod finished, PENDING when nothing is
        held any more (a nomination, for the pods still to place, stays), else RUNNING. Raises
        UnknownJobError, UnknownPodError for a pod the job does not have, or InvalidTimeError
        for a ``now`` that is no finite number, changing nothing."""
        e = self.entry(job_id)
        _check_time(now, "Queue.forget_pods")
        pods = _pods_of(e, pods)
        for p in pods:
            e.assigned.pop(p, None)
            e.confirmed.discard(p)
            e.terminating.pop(p, None)
            if finished:
                e.finished.add(p)
        e.touch()
        if len(e.finished) == e.job.num_pods:
            e.reason = None
            self._nominate(e, None)
            self._set_phase(e, JobPhase.FINISHED)
        elif not e.assigned and e.phase is JobPhase.RUNNING:
            # a nomination is for pods still to place: it outlives the pods that went
            self._to_pending(e, now, keep_nomination=True)
        else:
            self._sync(e)

    def requeue(self, job_id: str, now: float, *, failed: bool, message: str = "") -> JobStatus:
        """Put the whole job back to PENDING (the caller released its pods).

        ``failed=True`` counts a failure: the job waits out its backoff, or becomes FAILED
        past the retry limit. ``failed=False`` (node lost, preempted) requeues at once.
        A gang restarts from scratch, so its finished pods are forgotten too. Raises
        UnknownJobError, or InvalidTimeError for a ``now`` that is no finite number (nothing
        changed)."""
        e = self.entry(job_id)
        _check_time(now, "Queue.requeue")
        if e.phase in (JobPhase.FINISHED, JobPhase.FAILED):
            return e.view()
        self._let_go(e, finished=e.job.gang)
        if failed and not self.count_failure(e, now, message):
            return e.view()
        self._to_pending(e, now)
        return e.view()

    def count_failure(self, e: Entry, now: float, message: str) -> bool:
        """Record one failure of ``e``: set its backoff, or mark it FAILED past the limit
        (returns False then)."""
        e.attempts += 1
        if self.backoff.exhausted(e.attempts):
            self._fail(e, now, f"retry limit {self.backoff.max_retries} reached; last: {message}")
            return False
        e.backoff_until = now + self.backoff.delay(e.attempts)
        self._changed(e.id)  # (what a closed gate answered it may differ now)
        logger.info("job %s failure %d at %g (%s): backoff until %g", e.id, e.attempts, now,
                    message, e.backoff_until)  # fmt: skip
        e.reason = Reason(
            code=ReasonCode.BACKOFF,
            message=f"failure {e.attempts} ({message}); retry at {e.backoff_until:.10g}",
        )
        return True

    def count_interruption(self, job_id: str) -> bool:
        """Record that the cluster took running pods from the job (a node lost, a GPU
        failing). Returns whether the job may go on: False past
        :attr:`Backoff.max_interruptions` (the caller releases what it holds, then
        :meth:`fail`). Raises :class:`~kant.errors.UnknownJobError`."""
        e = self.entry(job_id)
        e.interruptions += 1
        return not self.backoff.interruptions_exhausted(e.interruptions)

    def fail(self, job_id: str, now: float, message: str) -> JobStatus:
        """Mark the job FAILED at ``now`` for ``message`` (its reason): it holds nothing any
        more (the caller released its pods) and is never scheduled again. A job already
        FINISHED or FAILED is left as it is. Raises :class:`~kant.errors.UnknownJobError`, or
        InvalidTimeError for a ``now`` that is no finite number (nothing changed)."""
        e = self.entry(job_id)
        _check_time(now, "Queue.fail")
        if e.phase in (JobPhase.FINISHED, JobPhase.FAILED):
            return e.view()
        self._let_go(e)
        self._fail(e, now, message)
        return e.view()

    # ----------------------------------------------------------------- internals

    def _key_of(self, e: Entry, job: Job) -> tuple[Any, ...]:
        """The order key of ``e`` described by ``job``: the one place a key is computed
        again for a queued job, so that what :meth:`mark_preempted` did to it (an eviction
        time read as its submit time, :attr:`Entry.ordered_at`) holds through any later
        change (:meth:`redescribe`)."""
        if e.ordered_at is not None:
            job = attrs.evolve(job, submitted_at=e.ordered_at)
        return self.order(job, e.seq)

    @staticmethod
    def _let_go(e: Entry, *, finished: bool = False) -> None:
        """Forget the pods ``e`` holds (the caller released them), its finished ones too
        with ``finished`` (a gang starting again from scratch)."""
        e.assigned.clear()
        e.confirmed.clear()
        e.terminating.clear()
        if finished:
            e.finished.clear()
        e.touch()

    def _fail(self, e: Entry, now: float, message: str) -> None:
        e.reason = Reason(code=ReasonCode.FAILED, message=message)
        self._nominate(e, None)
        self._set_phase(e, JobPhase.FAILED)
        logger.warning("job %s FAILED at %g: %s", e.id, now, message)

    def _to_pending(self, e: Entry, now: float | None, *, keep_nomination: bool = False) -> None:
        if now is not None:
            e.pending_since = now
        e.started_at = None
        if not keep_nomination:
            self._nominate(e, None)
        self._set_phase(e, JobPhase.PENDING)

    def _nominate(self, e: Entry, nom: Nomination | None) -> None:
        """Set (None: end) ``e``'s nomination and follow it in the index of jobs holding
        one (:meth:`nominated`): every change of a nomination goes through here."""
        e.nomination = nom
        if nom is None:
            self._nominated.pop(e.id, None)
        else:
            self._nominated[e.id] = e

    def _set_phase(self, e: Entry, phase: JobPhase) -> None:
        e.phase = phase
        if phase is JobPhase.RUNNING:
            if e.id not in self._running:
                self._running[e.id] = e
        else:
            self._running.pop(e.id, None)
        self._sync(e)
        if phase in (JobPhase.FINISHED, JobPhase.FAILED):
            e.drop_caches()  # an ended job waits in the history only
            self._ended[e.id] = None
            if self.history is not None:
                while len(self._ended) > self.history:
                    self._release(next(iter(self._ended)))

    def _drop_candidate(self, item: tuple[Any, str]) -> None:
        """Take the entry of ``item`` (still in the order) out of the kept candidates list."""
        if self._cands is not None:
            del self._cands[self._order.index(item)]

    def _unsync(self, e: Entry) -> None:
        """Take ``e`` out of the order indices (to change its key)."""
        item = (e.key, e.id)
        self._drop_candidate(item)
        self._order.remove(item)
        self._in_order.discard(e.id)
        self._inc.pop(e.id, None)
        tq = self._tenants[e.job.tenant]
        tq.remove(item)
        if not tq:
            del self._tenants[e.job.tenant]

    def _sync(self, e: Entry, *, log: bool = True) -> None:
        """Follow a change of ``e`` (every change of an entry ends here): the order indices,
        the jobs with victim pods, the change log. Raises InvalidConfigError naming the order
        key, before anything changes, when ``e``'s key cannot be compared with the keys it
        goes among (:meth:`_place_of`). ``log=False``: ``e`` did not change (it is put back
        as it was after a refused change, :meth:`redescribe`), so the change log and
        :attr:`tick` are left as they are."""
        want = e.schedulable
        have = e.id in self._in_order
        pos = self._place_of(e) if want and not have else -1
        if log:
            self._changed(e.id)
        if e.id in self._terminating and not e.terminating:
            self._terminating.discard(e.id)
        if want == have:
            if have:  # every change of an entry (touch) is followed by a sync
                self._inc[e.id] = (e.seq, e.version)
            return
        item = (e.key, e.id)
        tq = self._tenants.get(e.job.tenant)
        if want:
            self._order.add(item)
            if self._cands is not None:
                self._cands.insert(pos, e)
            self._in_order.add(e.id)
            self._inc[e.id] = (e.seq, e.version)
            if tq is None:
                tq = self._tenants[e.job.tenant] = SortedList()
            tq.add(item)
        else:
            if tq is None:
                raise InvariantError(f"Queue: job {e.id} is ordered but its tenant has no queue")
            self._drop_candidate(item)
            self._order.remove(item)
            self._in_order.discard(e.id)
            self._inc.pop(e.id, None)
            tq.remove(item)
            if not tq:
                del self._tenants[e.job.tenant]

    def _place_of(self, e: Entry) -> int:
        """Where ``e`` goes in the global order: its index once added. Makes the comparisons
        adding it to the order and to its tenant's queue make (``bisect_right``, as
        ``SortedList.add`` does), so that a key that cannot be compared with its neighbours'
        raises InvalidConfigError naming the order key here, before anything changes, not a
        TypeError half-way through. O(log jobs)."""
        item = (e.key, e.id)
        why = ""
        try:
            if self.order not in _FINITE_ORDERS and _unequal_to_itself(e.key):
                why = "holds a NaN, which is neither before nor after any key"
            else:
                pos = int(self._order.bisect_right(item))
                tq = self._tenants.get(e.job.tenant)
                if tq is not None:
                    tq.bisect_right(item)
        except (TypeError, ValueError, ArithmeticError) as err:  # (ValueError: a NumPy array)
            why = f"cannot be compared with the keys of the jobs queued ({err})"
        if why:
            name = getattr(self.order, "__name__", type(self.order).__name__)
            raise InvalidConfigError(
                "order",
                name,
                f"the order key's result for job {e.id!r}, {e.key!r}, {why}: an order key "
                "must give keys that compare",
            )
        return pos

    def check_invariants(self) -> None:
        """Recompute the indices (global order, per-tenant queues, running set) from the
        entries and check every entry's pod bookkeeping against its phase; raise
        :class:`~kant.errors.InvariantError` (``"Queue: ..."``) at the first difference.

        O(everything): for tests and debugging (:func:`kant.testing.check_invariants`)."""
        want = sorted((e.key, e.id) for e in self._entries.values() if e.schedulable)
        require(list(self._order) == want, "Queue: global order index differs")
        if self._cands is not None:
            require(
                [e.id for e in self._cands] == [j for _k, j in want],
                "Queue: cached candidates differ from the global order",
            )
        require(self._in_order == {j for _k, j in want}, "Queue: in-order id set differs")
        inc = {j: (self._entries[j].seq, self._entries[j].version) for _k, j in want}
        require(self._inc == inc, "Queue: kept incarnations differ from the entries")
        by_t: dict[str, list[tuple[Any, str]]] = {}
        for k, j in want:
            by_t.setdefault(self._entries[j].job.tenant, []).append((k, j))
        tenants = {t: list(sl) for t, sl in self._tenants.items()}
        require(tenants == by_t, "Queue: tenant queues differ")
        run = {e.id for e in self._entries.values() if e.phase is JobPhase.RUNNING}
        require(set(self._running) == run, "Queue: running index differs")
        require(
            all(self._entries.get(j) is e for j, e in self._running.items()),
            "Queue: running index holds a stale entry",
        )
        term = {e.id for e in self._entries.values() if e.terminating}
        require(self._terminating == term, "Queue: jobs with victim pods to go differ")
        noms = {e.id for e in self._entries.values() if e.nomination is not None}
        require(set(self._nominated) == noms, "Queue: jobs holding a nomination differ")
        require(
            all(self._entries.get(j) is e for j, e in self._nominated.items()),
            "Queue: nomination index holds a stale entry",
        )
        require(
            set(self._entries) <= set(self._changes),
            "Queue: a job is missing from the change log",
        )
        ended = {
            e.id for e in self._entries.values() if e.phase in (JobPhase.FINISHED, JobPhase.FAILED)
        }
        require(set(self._ended) == ended, "Queue: ended index differs")
        if self.history is not None:
            require(len(ended) <= self.history, "Queue: more ended jobs kept than its history")
        for e in self._entries.values():
            pods = set(e.job.pods())
            where = f"Queue: job {e.id}"
            require(set(e.assigned) <= pods, f"{where}: assigned pods not of the job")
            require(e.finished <= pods, f"{where}: finished pods not of the job")
            require(not set(e.assigned) & e.finished, f"{where}: pod both running and finished")
            require(set(e.terminating) <= set(e.assigned), f"{where}: terminating pod not assigned")
            require(e.confirmed <= set(e.assigned), f"{where}: confirmed pod not assigned")
            if e.phase is JobPhase.RUNNING:
                require(e.assigned, f"{where}: RUNNING without pods")
            else:
                require(not e.assigned, f"{where}: {e.phase} but holds pods")
            if e.phase is JobPhase.FINISHED and not e.cancelled:
                require(e.finished == pods, f"{where}: FINISHED but not every pod finished")
