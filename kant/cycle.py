"""One scheduling cycle (QSCH + RSCH): :func:`schedule_cycle` and its :class:`CycleResult`.

The one place the pieces meet. It works on the cluster's snapshot inside one transaction that
it rolls back, so it changes neither the cluster nor the queue: it returns what to do.
:func:`kant.apply.apply` records a result; :class:`kant.scheduler.Scheduler` adds the
orchestrator's events. Per waiting job (:meth:`_Cycle.consider`): backoff, node pools, the
queueing policy's gate, quota, readiness, placement; on failure the policy explains and
decides, and the job may preempt (:mod:`kant.preemption`, one call).

Deterministic: the same inputs give the same result (timings in :class:`CycleStats` are
excluded from equality).
"""

from __future__ import annotations

import bisect
import itertools
import math
import numbers
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, ClassVar, Literal, NamedTuple

import attrs

from kant.admission.holds import Alloc, Hold, Holds, take_free_gpus
from kant.admission.pools import Pools
from kant.admission.quota import (
    Admitter,
    QuotaDecision,
    QuotaLedger,
    admit_quota,
    admit_without_quotas,
    fits_to_try,
    narrowed_fits,
    one_model_each,
    quota_models,
    quota_never_fits,
)
from kant.bits import mask_of
from kant.contracts import (
    Gate,
    PlacementLike,
    PlacerLike,
    QueueingPolicy,
    Reach,
    Reservation,
)
from kant.cycle_context import PolicyContext
from kant.errors import InvalidConfigError, ValidationError
from kant.model import (
    CAPACITY_CODES,
    Binding,
    Job,
    PodId,
    ReadOnlyDict,
    Reason,
    ReasonCode,
    Role,
    Victim,
    finite_time,
    flag,
    placed_by_own_pods,
    pods_per_role,
)
from kant.placement.placer import PlacementResult, Placer
from kant.preemption.candidates import VictimIndex
from kant.preemption.policy import PreemptionPolicy
from kant.preemption.preemptor import Preemption
from kant.queueing import Entry, Nomination, Queue, as_policy
from kant.state import ClusterState
from kant.state.columns import IntArray

DEFAULT_POLICY = "best-effort-fifo"
"""The queueing policy when none is given (the library's default; see ``docs/qsch.md``)."""


_ORIGINS: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
_ORIGIN_IDS = itertools.count(1)


def origin_of(queue: Queue, cluster: ClusterState) -> tuple[int, int]:
    """Numbers naming ``queue`` and ``cluster`` for as long as they live, never two alike
    in one process (unlike ``id``, never reused): what a :class:`CycleResult` records of
    where it was computed. O(1)."""
    out = []
    for obj in (queue, cluster):
        n = _ORIGINS.get(obj)
        if n is None:
            n = _ORIGINS[obj] = next(_ORIGIN_IDS)
        out.append(n)
    return out[0], out[1]


def _quota_capped(
    why: Reason, role_models: Mapping[str, tuple[str, ...]], capped: Mapping[str, tuple[str, ...]]
) -> Reason:
    """``why`` (a never-fits answer on the GPU models ``capped`` of ``role_models``) saying
    which models its tenant's quota could never admit it on."""
    out = sorted({m for r, ms in role_models.items() for m in ms if m not in capped.get(r, ())})
    return attrs.evolve(
        why, message=f"{why.message} (its tenant's quota could never admit it on {'|'.join(out)})"
    )


def strategy_of(placer: PlacerLike) -> object:
    """What names the strategy ``placer`` places by, for the keys of what cycles keep:
    kant's Placer's adapted hooks (new each time its ``strategy`` is set), else the placer
    itself. O(1)."""
    return placer.hooks if isinstance(placer, Placer) else placer


@attrs.frozen(kw_only=True)
class CycleStats:
    """Counts of one cycle's work, and its timings (excluded from equality).
    ``backoff_jobs``: the jobs left waiting out a backoff, exactly (their pending reasons say
    until when; the first end is in :meth:`CycleResult.time_horizon`, which looks for it only
    when there is one). ``reused``: the cycle was not run; its result is the last
    quiet cycle's, which nothing since has changed (see :func:`schedule_cycle`): no placement
    was attempted and no victim searched for."""

    candidates: int
    placed_jobs: int
    placed_pods: int
    placement_attempts: int
    preemption_searches: int
    victims: int
    elapsed_ms: float = attrs.field(eq=False)
    backoff_jobs: int = 0
    step_ms: Mapping[str, float] = attrs.field(eq=False, factory=dict)
    reused: bool = attrs.field(default=False, eq=False)


@attrs.frozen(kw_only=True)
class CycleResult:
    """What one cycle decided. Equality ignores timings, so two runs can be compared.

    ``bindings`` in placement order; ``placed`` the jobs that got pods; ``victims`` to evict
    (whole gang jobs, single pods otherwise); ``nominations`` new this cycle, and for a
    pod-level preemptor started in part while its victims still go, the nomination kept for
    its pods left (:meth:`_Cycle._hold_rest`);
    ``dropped_nominations`` preemptors whose nomination ends without placement (victims gone,
    still no fit; made for a node gone, or added again or relabelled, since, or naming a
    node or device unhealthy now: :func:`nomination_outlived`; or its job's GPU models have
    no pool any more; or quota admits none of its pods on the GPU models it names any
    more); ``pending``
    a reason for every job left with pods to place, in the order the cycle answered them (the
    queue's, except that a job that must borrow quota is answered after the jobs of its
    priority walked with it that need not: see ``_Cycle.walk``);
    ``reservation`` the queueing policy's (first) reservation, if it made one;
    ``reservations`` every reservation it made, in queue order (a conservative backfill
    reserves for several jobs; a policy run lists them with an optional ``reservations()``
    method). Every job with a reservation has its expected start in its pending reason.
    ``seen`` the incarnation ``(submission sequence number, version)`` of every job the cycle
    considered or chose as a victim, by which :func:`kant.apply.apply` tells a current entry
    from one that changed since (a stale result applied again binds nothing no longer current).
    ``membership`` the cluster's :attr:`~kant.state.ClusterState.membership_version` the
    cycle saw: a binding to a node removed and added again since (the same name, perhaps
    another model or leaf), or relabelled since, is not applied (None: a result built by
    hand, not checked). ``pod_terms`` the cluster's
    :attr:`~kant.state.ClusterState.pod_terms_version` the cycle saw: when pods with labels
    or pod terms came or went since, a job whose placement read them (required pod affinity
    or anti-affinity of its own, or labels a running pod's anti-affinity may select) is not
    applied (None: not checked).
    ``again``: a cycle run at once after this one is applied may place more: a reclaiming
    pod-level job started only its nominal part (or the pods its nomination won by
    priority), and its borrowed rest, which a placer other than kant's cannot place in the
    same cycle as pods it does not see (a role with ``max_per_node`` or a required topology
    wish), is decided by the next cycle, in its order among the borrowers; or a pod-level
    job on several GPU models placed some pods and left others
    that quota counted on every model they may use (see :func:`_more_may_pass`), or left
    the pods beyond what quota admits on its nomination's GPU models to a cycle deciding
    them on every model while another of their models has quota headroom for one. Set only
    by a cycle that placed pods. A driver that runs a cycle only when something happens runs
    one more (the simulator does, and the Kubernetes shim's loop runs one within seconds
    anyway); the time horizon does not say so.
    ``closed_after`` the queue order key (:attr:`kant.queueing.Entry.key`) of the last job
    the cycle walked before the queueing policy closed its gate (``PolicyRun.closed``): every
    job later in the order got the gate's skip (None: the gate stayed open). How the cycle
    walked, not what it decided: equality ignores it, as it ignores ``stats`` and the time
    horizon (:meth:`time_horizon`: until when the passing of time alone changes nothing),
    ``membership``, ``pod_terms`` and ``origin`` (which queue and cluster it was computed
    on: :func:`origin_of`; :func:`kant.apply.apply` refuses it on others).

    A result is read, not changed: the last quiet cycle's is kept, and answered again with
    read-only copies (:class:`~kant.model.ReadOnlyDict`) of its ``pending`` and ``seen``
    that every later answer shares (see :func:`schedule_cycle`); applying such an answer
    again, :meth:`kant.queueing.Queue.set_reasons` skips the pass that would change nothing.
    """

    now: float
    bindings: tuple[Binding, ...]
    placed: tuple[str, ...]
    victims: tuple[Victim, ...]
    nominations: tuple[Nomination, ...]
    dropped_nominations: tuple[str, ...]
    pending: Mapping[str, Reason]
    reservation: Reservation | None
    seen: Mapping[str, tuple[int, int]]
    stats: CycleStats = attrs.field(eq=False)
    reservations: tuple[Reservation, ...] = ()
    closed_after: tuple[Any, ...] | None = attrs.field(default=None, eq=False)
    again: bool = False
    membership: int | None = attrs.field(default=None, eq=False)
    pod_terms: int | None = attrs.field(default=None, eq=False)
    origin: tuple[int, int] | None = attrs.field(default=None, eq=False)
    # what time_horizon reads of the cycle (None: a result built by hand)
    _horizon: _Horizon | None = attrs.field(default=None, eq=False, repr=False)

    def time_horizon(self, *, policy: bool = True) -> float:
        """The first time after ``now`` at which the passing of time alone could change what
        the cycle decided, given the queue as the cycle saw it (the jobs, the cluster, the
        quota and the running jobs staying the same): ``math.inf`` when none; ``now`` when it
        cannot tell. The earliest of the queueing policy run's ``time_horizon()`` (a run that
        declares none cannot tell: EASY and conservative backfill; Backfill's is the first
        time one of its heads not yet past the threshold passes it), the first end of a
        backoff among the jobs the cycle considered and, with preemption on, the first close
        of the cascade window of a waiting job evicted within it and the first time a running
        unit the victim search read passes ``min_runtime`` (its index's ``time_horizon()``).

        A driver that runs a cycle only when something happens runs one at this time too
        (the simulator's wake-ups), to decide on time what a cycle run every second would;
        when the cycle cannot tell, there is no such time. A result answered again
        (``stats.reused``) gives the kept cycle's horizon; a result built by hand, ``now``.

        Derived on the first call and kept: O(1), plus O(jobs the cycle considered) when
        some of them waited out a backoff (``stats.backoff_jobs``) or preemption is on. It
        reads the waiting jobs' backoff ends and eviction times at that call: the same
        answer before and after the result is applied (a job it placed does not count
        either way); ask before anything else changes the queue (a job failing or evicted
        since would count).

        ``policy=False`` leaves the policy run's own horizon out: the first of the other
        times, which a driver may still wake for when the run cannot tell (EASY)."""
        h = self._horizon
        return self.now if h is None else h(policy)


_ABSENT: Any = object()  # (check_parts: a part the call does not take)


def check_result(result: object, queue: Queue, cluster: ClusterState) -> CycleResult:
    """``result`` if it is a :class:`CycleResult` computed on ``queue`` and ``cluster`` (its
    ``origin``; a result built by hand, with none, passes), else
    :class:`~kant.errors.ValidationError` naming it: what :func:`kant.apply.apply` and the
    metrics exporter take. O(1)."""
    if not isinstance(result, CycleResult):
        raise ValidationError("result", result, "must be a kant.cycle.CycleResult")
    if result.origin is not None and result.origin != origin_of(queue, cluster):
        raise ValidationError(
            "result",
            f"the result of the cycle at {result.now:g}",
            "was computed by another scheduler (on another queue or cluster)",
        )
    return result


def check_parts(
    cluster: object,
    queue: object,
    admitter: object,
    *,
    placer: object = _ABSENT,
    preemption: object = None,
    policy: object = _ABSENT,
    defaults: bool = False,
) -> QueueingPolicy | None:
    """Check the parts a cycle is run or applied with, before anything is done with them:
    ``cluster`` a ClusterState, ``queue`` a Queue, ``admitter`` an Admitter, ``preemption``
    a PreemptionPolicy or None, and when given ``placer`` an object with ``place`` and
    ``policy`` a registered name or a :class:`~kant.contracts.QueueingPolicy`.
    ``defaults``: None stands for the default queue, admitter and placer (the
    :class:`~kant.scheduler.Scheduler`'s constructor). Returns the policy object (None when
    none was given). Raises :class:`~kant.errors.InvalidConfigError` naming the argument
    (an unknown policy name: :class:`~kant.errors.UnknownPolicyError`). O(1)."""
    for field, given, cls, optional in (
        ("cluster", cluster, ClusterState, False),
        ("queue", queue, Queue, defaults),
        ("admitter", admitter, Admitter, defaults),
        ("preemption", preemption, PreemptionPolicy, True),
    ):
        if not isinstance(given, cls) and not (optional and given is None):
            raise InvalidConfigError(field, given, f"must be a {cls.__name__}")
    wants_placer = placer is not _ABSENT and not (defaults and placer is None)
    if wants_placer and not callable(getattr(placer, "place", None)):
        raise InvalidConfigError("placer", placer, "must have a place(job, snap, pods=) method")
    if policy is _ABSENT:
        return None
    pol = as_policy(policy) if isinstance(policy, str) else policy
    # (QueueingPolicy's members, without the cost of a Protocol isinstance every cycle)
    if not (hasattr(pol, "name") and callable(getattr(pol, "begin", None))):
        raise InvalidConfigError(
            "policy", policy, "must be a registered policy name or a QueueingPolicy"
        )
    return pol  # type: ignore[return-value]


def schedule_cycle(
    cluster: ClusterState,
    queue: Queue,
    admitter: Admitter,
    placer: PlacerLike,
    now: float,
    *,
    policy: QueueingPolicy | str = DEFAULT_POLICY,
    preemption: PreemptionPolicy | None = None,
    incremental: bool = True,
) -> CycleResult:
    """Run one scheduling cycle at time ``now`` under the queueing ``policy`` (an object or a
    registered name) and the ``preemption`` rules (default :class:`PreemptionPolicy()`), and
    return what to do; changes nothing. Raises :class:`~kant.errors.InvalidTimeError` for a
    ``now`` that is not a finite number, :class:`~kant.errors.InvalidConfigError` naming the
    argument for a part of another kind (:func:`check_parts`, as ``Scheduler`` refuses it).

    ``incremental`` (default) reuses what earlier cycles of the same queue derived and what
    cannot have changed since (``docs/architecture.md``, "The incremental cycle"); False
    derives everything from scratch. Both make the same decisions, except under a strategy
    that draws from a seeded generator per call (``random``, a baseline with
    ``ties="random"``): its draws depend on how many placements were asked, and the
    incremental cycle asks fewer. A quiet cycle (no
    binding, victim or nomination made or dropped) is kept: until the first time at which
    the passing of time alone could change a decision (its :meth:`CycleResult.time_horizon`:
    a backoff ends, a Backfill head passes its threshold, a preemptor leaves its cascade
    window, a running unit the victim search read passes the minimum runtime; at the same
    time only for a policy run that declares no ``time_horizon()``), a cycle with the same
    cluster, queue, quota usage, placer, policy and rules, none of them changed since,
    returns its result again (``now`` its own, ``stats.reused`` set) without being run.

    Cost: O(changed nodes) for the snapshot, O(1)-ish aggregate reads per waiting job, one
    placement per job that passes quota and readiness (failed shapes are remembered within
    the cycle), and the victim searches of the (few) jobs that preempt."""
    t0 = time.perf_counter()
    now = finite_time(now, "schedule_cycle")
    incremental = flag(incremental, "incremental")
    pol = check_parts(cluster, queue, admitter, placer=placer, preemption=preemption, policy=policy)
    assert pol is not None  # (for mypy: a policy was given)
    pre = preemption if preemption is not None else PreemptionPolicy()
    quiet = _Quiet.key(cluster, queue, admitter, placer, pol, pre) if incremental else None
    if quiet is not None:
        again = _Quiet.again(queue, quiet, now, t0)
        if again is not None:
            return again
    cyc = _Cycle(cluster, queue, admitter, placer, now, pol, pre)
    cyc.incremental = incremental
    # 1. Snapshot the cluster; everything below is tentative and rolled back at the end.
    with cyc.open():
        # 2. Hold the devices (and the quota) nominated for earlier preemptors.
        cyc.hold_nominations()
        # 3. Walk the jobs with pods to place in the global queue order (within one
        #    priority, jobs that fit their tenant's nominal quota before borrowing ones).
        # 4. Per job: backoff, pools, the policy's gate, quota, readiness, placement; on
        #    failure the policy explains and decides, and the job may preempt.
        cyc.walk()
        cyc.close_run()
        cyc.drop_gated_nominations()
        cyc.lap("walk")
    # 5. Report.
    try:
        result = cyc.result()
        if quiet is not None:
            _Quiet.keep(queue, quiet, result)
        return result
    finally:
        cyc.discard()


_Turn = tuple[int, Entry, "QuotaDecision | None", "_Facts", int]


def _place(turn: _Turn) -> int:
    """A turn's place in the order."""
    return turn[0]


class _Later:
    """The jobs of one priority the walk puts after the others (:meth:`_Cycle.walk`).

    ``turns``: those that may borrow (and borrowed rests), in the order, each with its place
    in the order, its quota decision (None for a rest) and the ledger's version the decision
    was made at. ``behind``: per tenant, its jobs held because a turn of its tenant comes
    before them, in their order: each goes once every turn of its tenant before it is taken,
    so that no job of a tenant passes an earlier one of its own (Kueue takes one head per
    ClusterQueue at a time). A job holding a nomination is the exception: it takes what is
    held for it at its place in the order."""

    __slots__ = ("behind", "pending", "turns")

    def __init__(self) -> None:
        self.turns: list[_Turn] = []
        # per tenant, the places of its turns not taken, ascending
        self.pending: dict[str, list[int]] = {}
        self.behind: dict[str, deque[tuple[int, Entry, _Facts]]] = {}

    def holds(self, tenant: str) -> bool:
        """Has ``tenant`` a turn not taken yet (its jobs later in the order wait for it)?"""
        return bool(self.pending.get(tenant))

    def hold(self, order: int, e: Entry, facts: _Facts) -> None:
        """Hold ``e`` (at ``order``) behind its tenant's turns; decided when it goes."""
        self.behind.setdefault(e.job.tenant, deque()).append((order, e, facts))

    def add(
        self,
        order: int,
        e: Entry,
        dec: QuotaDecision | None,
        facts: _Facts,
        version: int,
        at: int | None = None,
    ) -> None:
        """A turn for ``e`` at ``order``: appended (the walk adds them in the order), or
        put among the turns from ``at`` (the first not taken) before the first one later in
        the order."""
        turn = (order, e, dec, facts, version)
        if at is None:
            self.turns.append(turn)
        else:  # (the turns from ``at`` are in the order)
            self.turns.insert(bisect.bisect_right(self.turns, order, lo=at, key=_place), turn)
        bisect.insort(self.pending.setdefault(e.job.tenant, []), order)

    def took(self, tenant: str, order: int) -> None:
        """The turn of ``tenant`` at ``order`` was taken (O(1) for the first of its turns,
        as turns are taken in the order)."""
        pending = self.pending[tenant]
        del pending[bisect.bisect_left(pending, order)]

    def next_held(self, tenant: str) -> tuple[int, Entry, _Facts] | None:
        """The first job of ``tenant`` held behind its turns, if no turn of its tenant not
        yet taken comes before it (it goes now), else None."""
        held = self.behind.get(tenant)
        if not held:
            return None
        pending = self.pending.get(tenant)
        if pending and pending[0] < held[0][0]:
            return None
        return held.popleft()

    def entries(self) -> list[Entry]:
        """Every job with a turn or held behind one, in the order."""
        both = [(t[0], t[1]) for t in self.turns]
        both.extend((o, e) for jobs in self.behind.values() for o, e, _f in jobs)
        both.sort(key=lambda x: x[0])
        return [e for _o, e in both]

    def clear(self) -> None:
        self.turns.clear()
        self.pending.clear()
        self.behind.clear()


def _may_borrow(dec: QuotaDecision, ledger: QuotaLedger, e: Entry) -> bool:
    """Admitted, and its tenant may end above its nominal quota where it is placed (beyond
    nominal, within it only where borrowers must go, or admitted on a model where its
    tenant would borrow too: placement picks): a job the walk puts after the others. Not a
    pod-level job whose tenant can never go above its nominal quota on the models it is
    admitted on (isolated, a borrowing limit of 0, or shared in a cohort that lends it
    nothing: :meth:`~kant.admission.quota.QuotaTable.most`): quota admits it only the pods
    its nominal quota holds and refuses the rest, which borrows nowhere. O(1); O(roles x
    models) for a pod-level job beyond its nominal quota."""
    if not dec.ok or dec.borrows_nowhere:
        return False
    job = e.job
    if job.gang:
        return True
    table, tenant = ledger.table, job.tenant
    return any(
        table.most(tenant, m) > table.nominal(tenant, m)
        for r in job.roles
        if r.resources.total_milli
        for m in dec.models.get(r.name, ())
    )


class _Cycle:
    """One cycle's working state."""

    def __init__(
        self,
        cluster: ClusterState,
        queue: Queue,
        admitter: Admitter,
        placer: PlacerLike,
        now: float,
        policy: QueueingPolicy,
        preemption: PreemptionPolicy,
    ) -> None:
        self.t0 = self._lap = time.perf_counter()
        self.cluster, self.queue, self.admitter = cluster, queue, admitter
        self.placer, self.policy, self.preemption = placer, policy, preemption
        # kant's Placer skips checking the pods the cycle asks for: the job's own, by
        # construction; any other placer (a subclass overriding place too) is asked through
        # the protocol
        self._place: Callable[[Job, Any, Sequence[PodId]], PlacementLike]
        # kant's Placer also counts a job's pods placed earlier in the cycle (place_pods);
        # another placer (or one overriding place_trusted) reads the job's running pods alone
        self._place_after: Callable[..., PlacementLike] | None = None
        if isinstance(placer, Placer) and type(placer).place is Placer.place:
            self._place = placer.place_trusted
            if type(placer).place_trusted is Placer.place_trusted:
                self._place_after = placer.place_trusted
        else:
            self._place = lambda j, snap, pods: placer.place(j, snap, pods=pods)
        # the nodes the placer's strategy may ever use per role (optional on a PlacerLike)
        self.reach: Callable[[Job, Role], Reach | None] | None = getattr(placer, "reach", None)
        self._now = float(now)
        self.ledger = admitter.ledger()
        self.bindings: list[Binding] = []
        self.placed: list[str] = []
        self.nominations: list[Nomination] = []
        # pod-level preemptors started in part this cycle: what their nominations hold for
        # the pods left (_hold_rest)
        self.rest_nominated: dict[str, Nomination] = {}
        self.dropped: list[str] = []
        # tenants with a job refused by quota, holding no nomination, walked so far (a
        # quota-refused head: see _drop_gated), and the gated nominations whose quota stays
        # charged until the end of the walk for that (drop_gated_nominations releases it)
        self.refused: set[str] = set()
        self.kept_quota: list[Entry] = []
        self.gated_drops = 0  # nominations the policy's gate made give up this cycle
        # a job started a part of its pods and left the rest to a later cycle, which may
        # start them
        self.again = False
        # nominated jobs that started their nominal part: their borrowed rest has a second
        # turn in this cycle, among the borrowers of their priority (walk, _rest_turn)
        self.rest_turns: list[Entry] = []
        self.past_gate: set[str] = set()  # nominated jobs the policy's gate let through
        self.pending: dict[str, Reason] = {}
        self.closed_after: tuple[Any, ...] | None = None  # see CycleResult.closed_after
        self.failed_shapes: dict[tuple[Any, ...], Reason] = {}
        self.quota_memo: dict[tuple[Any, ...], tuple[Entry, QuotaDecision]] = {}
        self.quota_held: dict[str, list[tuple[str, str, int]]] = {}
        # victim pods still to go, taken off their tenant on this cycle's ledger
        self.uncharged: dict[PodId, tuple[str, str, int]] = {}
        # the live usage plus this cycle's placements (what apply checks), kept only while
        # the ledger has victims taken off (it is never stricter than the ledger otherwise)
        self.live: QuotaLedger | None = None
        self.attempts = 0
        self.backoffs = 0  # jobs left waiting out a backoff (CycleStats.backoff_jobs)
        self.step_ms: dict[str, float] = {}
        # (content version before, the reservation's hold and what it held, the per-pool
        # aggregates it gives) of the last time the reservation alone was opened or its
        # opening read off the rows (see _admit_and_place; a take makes a new list of what
        # a hold holds)
        self._reserved_opened: tuple[int, Hold, list[Alloc], IntArray] | None = None
        self.incremental = True

    @property
    def now(self) -> float:
        return self._now

    def discard(self) -> None:
        """Drop the cycle's working state once its result is built. Its collaborators (the
        policy context, the preemption search) hold its :meth:`place_pods`, so the cycle and
        everything it refers to form reference cycles: left alone, they would wait for the
        garbage collector, which would find them only in its older generations, after they
        had made those generations (and every collection of them) larger. Cleared here,
        reference counting frees them at once."""
        self.__dict__.clear()

    def lap(self, step: str) -> None:
        """Record the time since the previous lap as ``step`` (for CycleStats.step_ms)."""
        t = time.perf_counter()
        self.step_ms[step] = (t - self._lap) * 1000
        self._lap = t

    # ----------------------------------------------------------------- the steps

    @contextmanager
    def open(self) -> Iterator[None]:
        self._lap = time.perf_counter()
        self.snap = self.cluster.snapshot()
        self.holds = Holds(self.snap)
        self.pools = Pools(self.snap)
        self.candidates = self.queue.candidates()
        pol = self.preemption
        index = VictimIndex(
            self.queue, self.cluster, self.snap, self.pools.names,
            now=self._now, min_runtime=pol.min_runtime, keep=self.incremental,
        )  # fmt: skip
        self.pre = Preemption(
            pol, snap=self.snap, ledger=self.ledger, pools=self.pools, index=index,
            place=self.place_pods, now=self._now, holds=self.holds,
            uncharged=self.uncharged,
        )  # fmt: skip
        self.ctx = PolicyContext(
            now=self._now, queue=self.queue, cluster=self.cluster, snap=self.snap,
            ledger=self.ledger, pools=self.pools, holds=self.holds, place=self.place_pods,
            victim_pods=self.pre.victim_pods,
            heads_may_preempt=pol.enabled and (pol.backfill or bool(pol.rules)),
            quota_held=self.quota_held, victim_rules=bool(pol.rules),
            counts_placed=self._place_after is not None,
        )  # fmt: skip
        self.run = run = self.policy.begin(self.ctx)
        if not all(callable(getattr(run, m, None)) for m in _RUN_METHODS):
            raise _wrong_answer(
                self.policy, "begin(ctx)", run, "a run with gate, explain, failed and reservation"
            )
        # what a job's never-fits answer depends on besides the job (see _never_fits): the
        # nodes, the quota table and the strategy (its reach)
        self.strategy = strategy_of(self.placer)
        self.never_key = (
            self.cluster,
            self.cluster.membership_version,
            self.ledger.table,
            self.strategy,
        )
        self.facts = _JobFacts.for_cycle(
            self.queue, self.pools, self.candidates, keep=self.incremental
        )
        self.lap("snapshot")
        with self.snap.transaction() as tx:
            yield
            # kept, not rolled back: the rows the cycle changed are re-synced from the truth
            # at the next refresh anyway (after apply, most already equal it), so undoing them
            # here would move each one twice for nothing; an exception still rolls back
            tx.commit()
        self.lap("close")

    def hold_nominations(self) -> None:
        """Hold the devices and the quota of every nomination still valid. A nomination
        made for nodes no longer there as they were (:func:`nomination_outlived`: a node it
        names gone, or added again under its name or relabelled since, or unhealthy now, or
        a device it holds), or whose job's GPU models no pool has any more, is dropped
        instead (``dropped_nominations``): it would hold what another node now offers, or
        what no pod can take, for a job that may never take it. The job
        competes again and preempts again if it still needs to (its victims still going
        count as going)."""
        cluster = self.cluster
        for e in self.candidates:
            nom = e.nomination
            if nom is not None:
                if (
                    nomination_outlived(cluster, nom)
                    or self.facts.of(e, self.pools).no_pool is not None
                ):
                    self.dropped.append(e.id)
                    continue
                self.holds.nominate(e.id, nom.bindings, e.job)
                self._uncharge(nom.victims)
                self._hold_quota(e, nom.bindings)
        # every other pod still to go too (its preemptor placed elsewhere, or its nomination
        # dropped): the preemption rules count it gone, so must the quota (a tenant it
        # leaves within its nominal quota is not reclaimed from again)
        for te in self.queue.terminating():
            self._uncharge(sorted(te.terminating))
        self.lap("holds")

    def _hold_quota(self, e: Entry, bindings: Sequence[Binding]) -> None:
        """Charge the preemptor's tenant, on this cycle's ledger, for the devices nominated
        for it: the quota its victims free is its own until it is placed or gives up (its
        victims still to go are no longer charged to their tenants, :meth:`_uncharge`)."""
        tenant = e.job.tenant
        held = [(tenant, m, milli) for m, milli in self.pools.gpu_milli_by_model(bindings).items()]
        for t, m, milli in held:
            self.ledger.add(t, m, milli)
        self.quota_held[e.id] = held

    def _uncharge(self, pods: Sequence[PodId]) -> None:
        """Take the victim pods still to go (terminating, or chosen this cycle) off their
        tenants on this cycle's ledger, once each: the quota they free belongs to the
        preemptors they go for, whichever tenant they are of (each preemptor's tenant is
        charged for its whole nomination instead, :meth:`_hold_quota`). From the first one
        on, the cycle also keeps the live usage, which a placement must fit as well."""
        if self.ledger.table.unlimited:
            return
        for p in pods:
            if p in self.uncharged:
                continue
            ve = self.queue.get(p.job)
            if ve is None or p not in ve.assigned:
                continue  # gone already: its quota is free
            if p not in ve.terminating and p not in self.pre.victim_pods:
                continue
            b = self.cluster.binding(p)
            if not b.total_milli:
                continue
            if self.live is None:
                self.live = self.admitter.ledger()
                for pb in self.bindings:
                    pe = self.queue.entry(pb.pod.job)
                    self.live.add(pe.job.tenant, self.pools.model_of(pb), pb.total_milli)
            part = (ve.job.tenant, self.pools.model_of(b), b.total_milli)
            self.ledger.add(part[0], part[1], -part[2])
            self.uncharged[p] = part

    def _release_quota(self, e: Entry) -> None:
        for t, m, milli in self.quota_held.pop(e.id, ()):
            self.ledger.add(t, m, -milli)

    def walk(self) -> None:
        """Consider every candidate in the global order, except that within one priority a
        job that may borrow (its tenant ends above its nominal quota on some GPU model quota
        admits it on, :attr:`QuotaDecision.borrows_nowhere`) goes after the jobs that fit
        their nominal quota wherever they are placed (Kueue's entry ordering): it would
        otherwise take quota another tenant is guaranteed and be reclaimed a cycle later.
        The later jobs of its tenant in that priority go after it, in their order (Kueue
        takes one head per ClusterQueue at a time): a tenant's job passes an earlier one of
        its own only when it holds a nomination (what it takes is held for it already)."""
        # the policy may close its gate for every job left (Strict FIFO once its head is
        # blocked): those are then skipped without being walked one by one
        closed: Callable[[], Gate | None] | None = getattr(self.run, "closed", None)
        cands = self.candidates
        if self.ledger.table.unlimited:
            for i, e in enumerate(cands):
                self.consider(e)
                while self.rest_turns:  # (only with quotas; taken at once if ever)
                    t = self.rest_turns.pop(0)
                    self._rest_turn(t, self.facts.of(t, self.pools))
                if closed is not None and (gate := closed()) is not None:
                    self.closed_after = e.key
                    self._skip_all(cands[i + 1 :], gate)
                    return
            self.facts.tail = None  # (the gate stayed open: no answers behind it to keep)
            return
        later = _Later()
        band: int | None = None
        for i, e in enumerate(cands):
            if closed is not None and (gate := closed()) is not None:
                # (the last job walked in the order; a run closed from the start says None)
                self.closed_after = cands[i - 1].key if i else None
                self._skip_all(later.entries() + cands[i:], gate)
                return
            prio = e.job.priority
            if later.turns and prio != band:
                self._consider_later(later)
            band = prio
            if self._now < e.backoff_until or e.id in self.quota_held:
                self.consider(e)  # waits, or takes what is held for it
                self._take_rest_turns(later, i)
                continue
            facts = self.facts.of(e, self.pools)
            if facts.no_pool is not None:
                self.consider(e, facts=facts)
                continue
            if later.holds(e.job.tenant):
                later.hold(i, e, facts)  # (quota decides when it goes)
                continue
            dec = self._admit_quota(e, facts)
            if _may_borrow(dec, self.ledger, e):
                later.add(i, e, dec, facts, self.ledger.version)
            else:
                self.consider(e, dec, facts)  # the ledger is unchanged until its quota check
        self._consider_later(later)
        self.facts.tail = None

    def _skip_all(self, rest: Sequence[Entry], gate: Gate) -> None:
        """What :meth:`consider` answers for each job of ``rest`` once the policy's gate is
        closed (``gate``, a skip): the same steps up to the gate, none after it.

        The answers are kept with the facts (:class:`_Tail`): a later cycle whose gate
        closes before the same jobs, or before the same jobs less the first few (the head
        moved on), derives again only the answers of the jobs whose entry changed since,
        of those that were waiting out a backoff and of those that joined the end; every
        other job's answer is the skip (whatever it says now) or the one it had."""
        if not isinstance(gate, Gate) or gate.skip is None:  # (the run's closed() answer)
            raise _wrong_answer(self.policy, "closed()", gate, "None or a Gate that skips")
        facts, queue, now = self.facts, self.queue, self._now
        skip = facts.intern_reason(gate.skip)  # unchanged from the last cycle: the same object
        tail, changed, n = facts.tail, None, 0
        facts.tail = None  # (kept again once brought up to date: not half-updated on an error)
        if tail is not None and rest and now >= tail.now:
            kept = tail.entries
            try:
                k = kept.index(rest[0])  # (entries compare by identity)
            except ValueError:
                k = -1
            if k >= 0 and rest[: len(kept) - k] == kept[k:]:
                changed = queue.changed_since(tail.tick)
                if changed is not None:
                    tail.drop_first(k)
                    n = len(kept)
        if changed is None or tail is None:
            tail = _Tail()
        else:
            # the jobs kept whose answer may differ: changed since, or waiting out a backoff
            # (a job not waiting one then cannot be waiting one now without a change)
            again = [jid for jid in changed if jid in tail.at]
            again.extend(tail.backoff)
            tail.backoff = {}
            for jid in again:
                e = queue.entry(jid)
                tail.answer(e, self._behind_gate(e), now)
        for e in rest[n:]:
            tail.entries.append(e)
            tail.at[e.job.id] = None
            tail.answer(e, self._behind_gate(e), now)
        tail.now, tail.tick = now, queue.tick
        facts.tail = tail
        self.pending.update(zip(tail.at, itertools.repeat(skip)))
        self.pending.update(tail.other)
        self.backoffs += len(tail.backoff)

    def _behind_gate(self, e: Entry) -> Reason | None:
        """The answer to ``e`` behind a closed gate when it is not the gate's skip (None):
        its backoff, or that no pool has its GPU model."""
        if self._now < e.backoff_until:
            return self._backoff_reason(e)
        return self.facts.of(e, self.pools).no_pool

    @staticmethod
    def _backoff_reason(e: Entry) -> Reason:
        """The reason of a job that waits out its backoff: the one it had, if any."""
        when = f"retry at {e.backoff_until:.10g}"  # (whole seconds of a wall clock too)
        return e.reason or Reason(code=ReasonCode.BACKOFF, message=when)

    def _take_rest_turns(self, later: _Later, order: int, at: int | None = None) -> None:
        """Give the borrowed rest of each job that just started its nominal part
        (:attr:`rest_turns`) a turn among the borrowers of its priority, at its job's place
        in the order (``order``; ``at``: see :meth:`_Later.add`), with no quota decision yet
        (:meth:`_rest_turn` decides)."""
        for t in self.rest_turns:
            later.add(order, t, None, self.facts.of(t, self.pools), self.ledger.version, at)
        self.rest_turns.clear()

    def _consider_later(self, later: _Later) -> None:
        """Consider the jobs the walk put after the others of their priority, in their order,
        each with the quota decision it had if the ledger is unchanged since (the same
        decision :meth:`_admit_quota` would give), else deciding again; a borrowed rest
        (:meth:`_take_rest_turns`) has its turn. After each turn, the jobs of its tenant
        held behind it that no other turn of their tenant comes before go
        (:meth:`_release`). Leaves ``later`` empty."""
        led = self.ledger
        turns = later.turns
        i = 0
        while i < len(turns):
            order, e, dec, facts, version = turns[i]
            i += 1
            if dec is None:
                self._rest_turn(e, facts)
            elif led.version == version:
                self.consider(e, dec, facts)
            else:
                self.consider(e, facts=facts)
            later.took(e.job.tenant, order)
            self._take_rest_turns(later, order, at=i)
            self._release(later, e.job.tenant, i)
        later.clear()

    def _release(self, later: _Later, tenant: str, at: int) -> None:
        """Consider, in their order, the jobs of ``tenant`` held behind its turns that no
        turn not yet taken comes before (:meth:`_Later.next_held`): quota decides each now;
        one that may borrow gets a turn at its place among those not yet taken (from
        ``at``), and the jobs after it wait for that turn in turn."""
        while (held := later.next_held(tenant)) is not None:
            order, e, facts = held
            dec = self._admit_quota(e, facts)
            if _may_borrow(dec, self.ledger, e):
                later.add(order, e, dec, facts, self.ledger.version, at=at)
            else:
                self.consider(e, dec, facts)
                self._take_rest_turns(later, order, at=at)

    def consider(
        self, e: Entry, dec: QuotaDecision | None = None, facts: _Facts | None = None
    ) -> None:
        """Backoff, pools, the policy's gate, quota (``dec`` when the walk already decided
        it on the same ledger), readiness, placement; on failure explain, let the policy
        react and maybe preempt. ``facts``: the job's, if the walk already looked them up."""
        job = e.job
        jid = job.id
        # a. Backoff: wait without blocking anyone.
        if self._now < e.backoff_until:
            self.pending[jid] = self._backoff_reason(e)
            self.backoffs += 1
            return
        # b. Node pools: an unknown GPU model is unresolvable (and blocks nobody).
        if facts is None:
            facts = self.facts.facts.get(e.seq)  # _JobFacts.of, its hit inlined
            if facts is None or facts.job is not job or facts.version != e.version:
                facts = self.facts.of(e, self.pools)
        role_models, no_pool = facts.role_models, facts.no_pool
        if no_pool is not None:
            self.pending[jid] = no_pool
            return
        # c. The queueing policy may hold it back.
        gate = self.run.gate(e)
        if gate.__class__ is not Gate and not isinstance(gate, Gate):
            raise _wrong_answer(self.policy, f"gate({jid!r})", gate, "a Gate (GO to try the job)")
        if gate.skip is not None:
            self.pending[jid] = gate.skip
            if e.nomination is not None and jid in self.holds.nominated:
                self._drop_gated(e)
            return
        if e.nomination is not None:
            self.past_gate.add(jid)
        # d. Static quota (the quota held for its nomination is its own; with no quotas, the
        #    job's cached decision), then dynamic readiness, then placement.
        if dec is None:
            if self.quota_held:
                self._release_quota(e)
            dec = facts.unlimited_decision if self.ledger.table.unlimited else None
        rest = 0  # pods beyond the nominal part placed now, left to a later cycle
        deferred = False  # its pods not placed now wait for a later cycle by rule
        why_rest = ""
        narrowed = False  # decided on its nomination's GPU models only
        gave_up = ""  # why its nomination was dropped here (quota left its models out)
        # the decision on its nomination's GPU models, tried when quota's own choice (which
        # leaves one of them out) starts none of its pods now
        alt: tuple[QuotaDecision, Mapping[str, tuple[str, ...]]] | None = None
        # a reclaimer holding its nomination: the decision it is placed with, narrowed to
        # the models where its tenant stays within nominal, the decision it came from, and
        # the models its nomination holds devices on
        reclaiming: _Reclaiming | None = None
        quotas_own = dec  # quota's own decision (None: decided below)
        if dec is None:
            dec = quotas_own = self._admit_quota(e, facts)
            if jid in self.holds.nominated:  # (only a job holding a nomination pays)
                dec, alt, gave_up = self._on_nomination(e, dec, facts)
                if dec.nominal_pods and dec.ok and jid in self.holds.nominated:
                    dec, rest, why_rest = self._nominal_part(e, dec, role_models)
                reclaiming = self._as_reclaimer(e, dec, role_models)
                if reclaiming is not None:
                    dec = reclaiming.placed_with
        self.ctx.current = (jid, dec)
        reason = dec.reason if not dec.ok else None
        placed: tuple[Binding, ...] = ()
        freeing = False  # waits for the quota victims still hold, which they will free
        if reason is None:
            # Placement depends only on the shape and the snapshot (while nothing is freed:
            # holds.epoch), so a failed shape fails again this cycle. None: not cacheable
            # (pods already running, or devices nominated for it).
            holds = self.holds
            # what of the reservations it may use (False: none, True: all, else which)
            opens = gate.use_reserved or (gate.until is not None and holds.opens(gate.until))
            shape: tuple[Any, ...] | None = None
            if e.assigned or jid in holds.nominated:
                pass
            elif dec is facts.unlimited_decision:
                # the job's cached decision: its shape is cached too (interned as one int)
                sid = facts.shape if facts.shape is not None else self.facts.shape_id(facts)
                shape = (sid, opens, holds.epoch)
            else:
                # (a gang quota may decide by one GPU model per role may take another fit,
                # and be placed again with one model per role: with quotas, those follow
                # its tenant's quota, not only its shape. Any other job's failure is shared)
                sid = self.facts.decided_shape_id(facts, dec)
                own = not self.ledger.table.unlimited and one_model_each(
                    job, dec.pods, facts.role_models
                )
                shape = (sid, opens, holds.epoch, job.tenant if own else None)
            if shape is not None and self.incremental:
                failed = self.failed_shapes.get(shape)
                if failed is not None:
                    self._blocked(e, dec, failed, facts)
                    return
            placed, reason, freeing = self._admit_and_place(
                e, dec, opens, facts, shape, whole=alt is not None,
                held=None if reclaiming is None else reclaiming.held,
            )  # fmt: skip
            if alt is not None and not placed and not freeing:
                # quota's own choice starts none of its pods now: its nomination's models
                # (where it would otherwise be refused on what it holds and preempt again)
                dec, models = alt
                rest, why_rest, narrowed = 0, "", True
                if dec.nominal_pods:
                    dec, rest, why_rest = self._nominal_part(e, dec, models)
                reclaiming = self._as_reclaimer(e, dec, models)
                if reclaiming is not None:
                    dec = reclaiming.placed_with
                self.ctx.current = (jid, dec)
                reason = dec.reason if not dec.ok else None
                if reason is None:
                    placed, reason, freeing = self._admit_and_place(
                        e, dec, opens, facts, None, models=models,
                        held=None if reclaiming is None else reclaiming.held,
                    )  # fmt: skip
            left = len(e.remaining()) - len(placed)
            if narrowed and placed and left and len(placed) == len(dec.pods):
                deferred = True
                # the pods its nomination's models had no quota for: decided on every model
                # of theirs at once, in a cycle of their own
                self.again = self.again or _more_may_pass(
                    self.ledger, job, dec, role_models, cut=False
                )
                reason = Reason(
                    code=ReasonCode.QUOTA_EXCEEDED,
                    message=(
                        f"{left} pods beyond its nomination's GPU models wait for a later cycle"
                    ),
                )
            if rest and len(placed) + rest == len(e.remaining()):
                # its nominal part started: the rest is a borrower, with a turn among the
                # borrowers of its priority in this cycle when placement can count the
                # pods just placed (else at a later cycle's)
                if self._place_after is not None or not placed_by_own_pods(job):
                    self._commit_placed(e, placed)
                    self.rest_turns.append(e)
                    return
                deferred = True
                self.again = True
                reason = Reason(
                    code=ReasonCode.QUOTA_EXCEEDED,
                    message=(
                        f"{rest} pods beyond {why_rest} wait for their turn among the borrowers"
                    ),
                )
        preempt_dec = (
            reclaiming.decided if reclaiming is not None and dec is reclaiming.placed_with else dec
        )
        if preempt_dec.split is not None and quotas_own is not None:
            # (its nomination's split stands for the quota that nomination holds: a new
            # victim search is judged by quota's own decision, as any job's)
            preempt_dec = quotas_own
        self._settle(
            e, placed, reason, facts, preempt_dec,
            freeing=freeing, gave_up=gave_up, deferred=deferred,
        )  # fmt: skip

    def _rest_turn(self, e: Entry, facts: _Facts) -> None:
        """The borrowed rest of a nominated job that started its nominal part earlier in
        this cycle (:meth:`_nominal_part`): its turn among the borrowers of its priority
        (:meth:`walk`), in the same cycle. The quota left decides it, and placement counts
        the pods of the first turn as the job's own (``max_per_node``, topology wishes). If
        it waited for a later cycle, the jobs behind it (its own victims, requeued, among
        them) would take the room it needs first, and be evicted again for it. Not placed
        whole, it is any job that waits: explained, the policy told, and it may preempt for
        the pods left, in this cycle."""
        job, jid = e.job, e.job.id
        gate = self.run.gate(e)
        if gate.skip is not None:
            self.pending[jid] = gate.skip
            return
        todo = self.ctx.unplaced(e)
        dec = admit_quota(self.ledger, job, todo, facts.role_models)
        self.ctx.current = (jid, dec)
        reason = dec.reason if not dec.ok else None
        placed: tuple[Binding, ...] = ()
        freeing = False
        if reason is None:
            holds = self.holds
            opens = gate.use_reserved or (gate.until is not None and holds.opens(gate.until))
            placed, reason, freeing = self._admit_and_place(
                e, dec, opens, facts, None, earlier=len(e.remaining()) - len(todo)
            )
        self._settle(e, placed, reason, facts, dec, freeing=freeing, todo=todo)

    def _settle(
        self,
        e: Entry,
        placed: tuple[Binding, ...],
        reason: Reason | None,
        facts: _Facts,
        dec: QuotaDecision,
        *,
        freeing: bool = False,
        gave_up: str = "",
        deferred: bool = False,
        todo: tuple[PodId, ...] | None = None,
    ) -> None:
        """The end of a job's turn (:meth:`consider`, :meth:`_rest_turn`): ``placed``
        committed; if ``reason``, why the rest waits, the policy told, and maybe a
        preemption (with ``dec``, quota's decision on the pods tried, unless some were
        placed). ``todo``: the pods tried, when some of the job's pods were placed earlier
        in the cycle (None: :meth:`Entry.remaining`); ``deferred``: the pods not placed wait
        for a later cycle by rule; ``freeing``, ``gave_up``: see :meth:`consider`."""
        job, jid = e.job, e.job.id
        role_models = facts.role_models
        if placed:
            self._commit_placed(e, placed, first=todo is None)
        if reason is None:
            return
        # e. Not (fully) placed: a job that could never fit says so (and blocks nobody);
        #    otherwise explain, let the policy react, maybe preempt.
        if not placed and todo is None and reason.code in _NEVER_FIT_CANDIDATES:
            reason = self._never_fits(e, role_models, facts) or reason
        reason = self._explain(e, reason, freeing=freeing)
        if gave_up:
            reason = attrs.evolve(reason, message=f"{reason.message}; {gave_up}")
        nominated = jid in self.holds.nominated
        if nominated and e.nomination is not None:
            # still waiting for its victims (for its pods left, when some started now)
            self._hold_quota(e, self.rest_nominated.get(jid, e.nomination).bindings)
        self.pending[jid] = reason
        may_backfill = self.run.failed(e, reason)
        # A pod-level job placed in part may preempt for the pods it could not place, in
        # the same cycle (as Volcano's preempt action follows its allocate action), unless
        # those pods wait for a later cycle by rule (the pods beyond its nomination's
        # models, or a borrowed rest another placer cannot place with the pods just
        # placed), or, with a placer other than kant's (which counts the job's running pods
        # only, not those placed earlier in the cycle: place_pods), where they may go
        # depends on the pods just placed (placed_by_own_pods). Left to the next cycle, the
        # quota or devices they need would go to the jobs behind it first (its own victims
        # requeued among them), and be taken back from them: the same pods evicted twice by
        # one preemptor.
        pods = todo  # (None: its remaining pods)
        if placed:
            done = {b.pod for b in placed}
            pods = tuple(p for p in (e.remaining() if todo is None else todo) if p not in done)
        if not freeing and self.pre.may_preempt(
            reason,
            partly_placed=pods is not None
            and (
                deferred
                or job.gang
                or (self._place_after is None and placed_by_own_pods(job, {p.role for p in pods}))
            ),
            nominated=nominated,
        ):
            if placed:
                # (quota's word on the pods left, on the ledger that charges those placed)
                dec = admit_quota(self.ledger, job, pods or (), role_models)
            self._preempt(e, dec, role_models, may_backfill, pods=pods)
        self._note_refused(e, reason)

    def _note_refused(self, e: Entry, reason: Reason) -> None:
        """Remember ``e``'s tenant when quota refused ``e`` (``reason``, its final word) and
        it holds no nomination at the end of its turn: a quota-refused head that a gated
        nomination of its tenant later in the walk keeps its quota for
        (:meth:`_drop_gated`)."""
        if reason.code is ReasonCode.QUOTA_EXCEEDED and e.id not in self.holds.nominated:
            self.refused.add(e.job.tenant)

    def _as_reclaimer(
        self, e: Entry, dec: QuotaDecision, role_models: Mapping[str, tuple[str, ...]]
    ) -> _Reclaiming | None:
        """For a job holding a nomination its victim search found held within nominal (a
        reclaimer, :attr:`Nomination.within_nominal`) whose decision ``dec`` (on
        ``role_models``) is within nominal where it runs
        (:attr:`QuotaDecision.places_within_nominal`), and whose nominal models still
        include, for each role, every GPU model its nomination holds devices on: ``dec``
        narrowed to its nominal models (where its tenant stays within nominal), ``dec``, and
        the models its nomination holds devices on (:class:`_Reclaiming`); None for any
        other job (placed with ``dec``). A gang quota decides by one GPU model
        per role whose ``dec`` is not such, though within nominal, is judged on its other
        fits within nominal (:func:`fits_to_try`): the first whose nominal models include
        its nomination's, narrowed alike, and ``dec``; None when none does.

        The what-if that chose its victims placed it only where its tenant stayed within
        nominal (a reclaimer never borrows: :class:`kant.preemption.whatif.CycleWhatIf`),
        so while that still holds where its nomination is, the cycle places it on its
        nominal models too (those of ``dec``, at this cycle: the one its nomination holds
        devices on among them, not necessarily the one it starts on), and a gang's other
        fits and choices of one model per role are its choices within nominal alone.
        Placed on all of ``dec``'s models, it started wherever placement preferred, a
        model where its tenant borrows included: its victims were evicted for nothing, and
        it was reclaimed there in turn. When its tenant's use changed since (its
        higher-priority job took the nominated model's nominal share), narrowing it would
        move it off the devices its victims free, onto models they do not: it would lose
        its nomination there and preempt again, so it is placed with ``dec``, as any job.
        A gang's decision by quota alone is one of its fits (its first in role order, or
        one within nominal where a later role's models need more victims first): judged on
        that one alone, a gang whose nomination holds another fit within nominal was
        placed as any job, and started borrowing where GPUs freed up while its victims
        terminated. O(bindings of the nomination), and for such a gang the bounded search
        of :func:`fits_to_try`."""
        nom = e.nomination
        if nom is None or not nom.within_nominal or not dec.ok or not dec.within_nominal:
            return None
        held = self._held_models(e)
        # (where it holds devices it stays within nominal: the what-if's premise)
        if _holds_nominated(dec, held):
            if dec.nominal_models == dec.models:
                return _Reclaiming(dec, dec, held)
            return _Reclaiming(attrs.evolve(dec, models=dec.nominal_models), dec, held)
        if not e.job.gang:
            room = self._nominal_room(e, dec, role_models, held)
            return None if room is None else _Reclaiming(room, dec, held)
        for alt in fits_to_try(self.ledger, e.job, dec.pods, role_models, dec)[1:]:
            if alt.ok and alt.within_nominal and _holds_nominated(alt, held):
                return _Reclaiming(attrs.evolve(alt, models=alt.nominal_models), dec, held)
        # no fit quota chooses among holds it within nominal where it holds devices; what
        # its nomination takes on each model may still (each role on its nominated models,
        # capped at the nominal quota left on each)
        split = self._on_its_split(e, dec, role_models, anyway=True)
        if split is not None and split.within_nominal:
            return _Reclaiming(split, dec, held)
        return None  # (the what-if's premise is gone: where it holds devices, it borrows)

    def _nominal_room(
        self,
        e: Entry,
        dec: QuotaDecision,
        role_models: Mapping[str, tuple[str, ...]],
        held: Mapping[str, set[str]],
    ) -> QuotaDecision | None:
        """For a pod-level reclaimer whose decision ``dec`` (within nominal, on
        ``role_models``) has nominal models that leave out one its nomination holds devices
        on (``held``, per role): the decision that places it within its tenant's nominal
        quota left on each model; None when a model its nomination holds devices on has no
        room there for one of its pods (the what-if's premise is gone).

        Quota judges a pod-level role's whole request on each model, so a job whose pods
        are within nominal on one model alone has that model alone as its nominal models,
        though its victim search, placing its pods one by one, put some of them on another
        model where its tenant's nominal quota left holds them. Placed as any job, it
        started on every model quota admits, borrowing, and its victims were evicted for
        nothing. The decision: ``dec``'s pods, each role on its models where the nominal
        quota left holds one of its pods, and ``split`` that quota left (within the
        headroom) per model: its pods may take no more of a model than that together
        (:meth:`_place_capped`); those that do not fit so wait. O(roles x models)."""
        job, led, tenant = e.job, self.ledger, e.job.tenant
        counts = pods_per_role(job, dec.pods)
        models: dict[str, tuple[str, ...]] = {}
        split: dict[str, float] = {}
        for role in job.roles:
            name = role.name
            if not counts.get(name):
                continue
            per_pod = role.resources.total_milli
            allowed = role_models.get(name, ())
            if not per_pod or not allowed:
                models[name] = dec.models.get(name, allowed)
                continue
            for m in allowed:
                if m not in split:
                    left = led.nominal_left(tenant, m)
                    split[m] = max(0.0, min(led.headroom(tenant, m), left))
            on = tuple(m for m in allowed if split[m] >= per_pod)
            if not held.get(name, set()).issubset(on):
                return None
            models[name] = on
        return QuotaDecision(
            ok=True, pods=dec.pods, models=models, within_nominal=True,
            nominal_models=models, split=split,
        )  # fmt: skip

    def _held_models(self, e: Entry) -> dict[str, set[str]]:
        """The GPU models, per role, that ``e``'s nomination holds devices on (empty without
        a nomination). O(bindings of the nomination)."""
        held: dict[str, set[str]] = {}
        for b in e.nomination.bindings if e.nomination is not None else ():
            if b.total_milli:
                held.setdefault(b.pod.role, set()).add(self.pools.model_of(b))
        return held

    def _on_nomination(
        self, e: Entry, dec: QuotaDecision, facts: _Facts
    ) -> tuple[QuotaDecision, tuple[QuotaDecision, Mapping[str, tuple[str, ...]]] | None, str]:
        """For a job holding a nomination (``dec``: quota's own decision, on every GPU model
        of its roles): ``dec``, tried first; the decision on its nomination's GPU models and
        those models per role, tried when ``dec`` starts none of its pods (None: there is none
        to fall back on); and why the nomination was dropped ("" if it stands).

        Its nomination holds devices on some GPU models of a role allowed on several. When
        ``dec`` lets each such role use them, or the nomination holds devices on every model
        of each such role, there is nothing to fall back on. Otherwise (the ledger changed
        since the preemption) :meth:`consider` takes ``dec`` when the nodes place every pod
        it admits now, and else decides the job on its nominated models alone, where it
        would otherwise be refused on what it holds and preempt again. As with the fits the
        nodes pick for a gang (:func:`fits_to_try`), quota's own choice comes first, and
        what the job holds changes which fit is taken, never whether quota admits it. If
        quota admits none of its pods on its nominated models any more, the nomination is
        dropped (``dropped_nominations``), its devices go back to the others, and the job is
        decided by ``dec`` as any job (its victims still going count as going). A gang whose
        decision (``dec``, or that on its nominated models) is refused or leaves out a model
        its nomination holds devices on is decided instead on what its nomination takes on
        each model, when its tenant's quota holds that (:meth:`_on_its_split`): in place of
        a refused ``dec``, else as the decision to fall back on. O(bindings of the
        nomination + roles x models), and a quota decision more when ``dec`` leaves a
        nominated model out."""
        nom, role_models = e.nomination, facts.role_models
        if nom is None:
            return dec, None, ""
        if not dec.ok:
            # (a gang counted at its whole request on each model: its nomination's split)
            split = self._on_its_split(e, dec, role_models)
            return (dec if split is None else split), None, ""
        held = {r: ms for r, ms in self._held_models(e).items() if len(role_models.get(r, ())) > 1}
        if all(ms.issubset(dec.models.get(r, ())) for r, ms in held.items()):
            return dec, None, ""
        on = {r: tuple(m for m in ms if m in held[r]) if r in held else ms
              for r, ms in role_models.items()}  # fmt: skip
        if on == role_models:  # it holds devices on every model of those roles: no narrowing
            split = self._on_its_split(e, dec, role_models)
            return dec, (None if split is None else (split, role_models)), ""
        mine = admit_quota(self.ledger, e.job, e.remaining(), on)
        split = self._on_its_split(e, mine, on)
        if split is not None:
            return dec, (split, on), ""
        if mine.ok:
            return dec, (mine, on), ""
        self.holds.drop(e.id)
        self.dropped.append(e.id)
        names = "|".join(sorted({m for ms in held.values() for m in ms}))
        why = mine.reason.message if mine.reason is not None else "no quota left"
        return dec, None, f"its nomination on {names} was dropped: {why}"

    def _on_its_split(
        self,
        e: Entry,
        dec: QuotaDecision,
        role_models: Mapping[str, tuple[str, ...]],
        *,
        anyway: bool = False,
    ) -> QuotaDecision | None:
        """For a gang holding a nomination for all its remaining pods whose decision ``dec``
        (on ``role_models``) is refused, or leaves out of a role a GPU model its nomination
        holds devices on (``anyway``: whatever ``dec``, for a reclaimer none of whose fits
        holds it within nominal where it holds devices, :meth:`_as_reclaimer`): the decision
        on what its nomination takes on each model (its split), when its tenant's headroom
        holds that on each; else None.

        Quota counts a role's whole request against every model it is admitted on (its pods
        may land on any of them), but the quota held for a nomination is what its bindings
        take on each model (:meth:`_hold_quota`): 2 H100 and 2 A100 GPUs for a gang of four
        1-GPU pods nominated two on each. What it does not hold others may use meanwhile
        (its victims, requeued ahead of it, start again on the headroom left), so its whole
        request counted on each model may no longer fit a model where it holds devices:
        decided on the other model alone, it was not placed, lost its nomination once its
        victims were gone, and evicted again, its victims' pods started and evicted twice.

        The decision: every remaining pod, each role on the models its nomination holds
        devices on (in its own order; a role holding none on its ``role_models``), within
        nominal when the tenant stays within its nominal quota with each model's share (its
        ``nominal_models`` are then its models: a reclaimer may run on them), and ``split``
        the most its pods may take on each model: the headroom, and within nominal no more
        than the nominal quota left (a placement taking more is placed again on its
        nominated devices alone, :meth:`_place_split`, and refused if it still does,
        :meth:`_admit_and_place`). O(bindings of the nomination + roles x models)."""
        job, nom, led = e.job, e.nomination, self.ledger
        if not job.gang or nom is None or led.table.unlimited:
            return None
        pods = e.remaining()
        if len(nom.bindings) != len(pods) or {b.pod for b in nom.bindings} != set(pods):
            return None
        held = self._held_models(e)
        need = self.pools.gpu_milli_by_model(nom.bindings)
        if (
            not anyway
            and dec.ok
            and all(ms.issubset(dec.models.get(r, ())) for r, ms in held.items())
        ):
            return None  # (quota's decision holds its nomination's models)
        tenant = job.tenant
        room = {m: led.headroom(tenant, m) for m in need}
        if any(room[m] < milli for m, milli in need.items()):
            return None
        within = all(led.within_nominal(tenant, m, milli) for m, milli in need.items())
        if within:
            for m in need:
                room[m] = min(room[m], led.nominal_left(tenant, m))
        counts = pods_per_role(job, pods)
        models = {
            r.name: (
                tuple(m for m in role_models.get(r.name, ()) if m in held[r.name])
                if r.name in held
                else role_models.get(r.name, ())
            )
            for r in job.roles
            if counts.get(r.name)
        }
        return QuotaDecision(
            ok=True, pods=tuple(pods), models=models, within_nominal=within,
            nominal_models=models if within else {}, split=room,
        )  # fmt: skip

    def _nominal_part(
        self, e: Entry, dec: QuotaDecision, role_models: Mapping[str, tuple[str, ...]]
    ) -> tuple[QuotaDecision, int, str]:
        """The quota decision for the part of a nominated preemptor's request it starts now
        (``dec``: its whole request's, not within nominal, its first ``nominal_pods`` pods
        are), how many pods are left to its borrowed rest, and what they are beyond (for
        their reason).

        The part is its nominal part: those pods, on the GPU models where its tenant stays
        within nominal with them and, for a nomination won partly by priority or backfill,
        those it holds devices on (taken where its tenant borrows: narrowed off them, it
        placed nothing once its victims were gone, lost its nomination, and evicted them
        again; a reclaim's nomination is held to the nominal models). The nominated job
        starts them at its place in the order; its borrowed rest is a borrower, with its
        turn among the borrowers of its priority (:meth:`walk`, :meth:`_rest_turn`), so it
        passes no earlier borrower. A nomination won partly by priority or backfill
        preemption (:attr:`Nomination.by_priority`) starts every pod it holds devices for:
        its victims were evicted for them, and if those pods waited, the victims, requeued
        ahead of them in submission order, would start again on the quota the preemption
        freed and be evicted a second time."""
        remaining = e.remaining()
        nom = e.nomination
        if nom is not None and nom.by_priority and len(nom.bindings) > dec.nominal_pods:
            k = len(nom.bindings)
            if k >= len(remaining):
                return dec, 0, ""
            part = admit_quota(self.ledger, e.job, remaining[:k], role_models)
            return part, len(remaining) - k, "its nomination"
        part = admit_quota(self.ledger, e.job, remaining[: dec.nominal_pods], role_models)
        if (
            part.ok
            and part.within_nominal
            and part.places_within_nominal
            and part.nominal_models != part.models
        ):
            # (the models its nomination holds devices on are kept: narrowed off them, it
            # would lose those devices once its victims are gone, and evict again for them)
            # (a reclaim's nomination is not: a reclaimer never borrows, see _as_reclaimer)
            models = part.nominal_models
            held = self._held_models(e) if nom is not None and nom.by_priority else {}
            if any(not ms.issubset(models.get(r, ())) for r, ms in held.items()):
                models = {
                    r: tuple(m for m in ms if m in models.get(r, ()) or m in held.get(r, ()))
                    for r, ms in part.models.items()
                    if r in models or r in held
                }
            if models != part.models:
                part = attrs.evolve(part, models=models)
        return part, len(remaining) - dec.nominal_pods, "the tenant's nominal quota"

    def _blocked(self, e: Entry, dec: QuotaDecision, failed: Reason, facts: _Facts) -> None:
        """The rest of :meth:`consider` for a job whose placement shape already failed this
        cycle with nothing freed since (so it fails again, for ``failed``): what the general
        path does for it, in the fewest steps. Such a job holds no nomination and no pods
        (its shape is cached only then), so its reason is the policy's word, and it may
        preempt only past :meth:`Preemption.closed` (where most of a busy cycle's waiting
        jobs stop)."""
        reason = failed
        if reason.code in _NEVER_FIT_CANDIDATES:
            never = facts.never
            if never is not None and never[0] == self.never_key:
                reason = never[1] or reason
            else:
                reason = self._never_fits(e, facts.role_models, facts) or reason
        run = self.run
        reason = run.explain(e, reason)
        if reason.__class__ is not Reason and not isinstance(reason, Reason):
            self._explained(e, reason)  # (raises, naming the policy)
        self.pending[e.job.id] = reason
        may_backfill = run.failed(e, reason)
        pre = self.pre
        if pre.may_preempt(reason, partly_placed=False, nominated=False) and not pre.closed(
            e, dec, may_backfill
        ):
            self._preempt(e, dec, facts.role_models, may_backfill)
        self._note_refused(e, reason)

    def drop_gated_nominations(self) -> None:
        """End the nomination of every preemptor whose victims are gone but that the
        queueing policy held back this cycle (a Strict FIFO job behind a head it does not
        pass: one of its victims, or a victim that only its nomination keeps out, lets it
        pass): it could not take its devices, and holding them for it would keep them from
        the jobs the policy puts first, for ever if the head needs them. It competes again
        when the policy lets it (and may preempt again then). A job waiting out a backoff
        keeps it (one whose GPU model no pool has lost it already:
        :meth:`hold_nominations`). The quota kept for a quota-refused head
        (:meth:`_drop_gated`) is released here. Then, if a nomination was given up in the
        cycle, the victims the cycle chose before (for want of what it held) are tried again
        for give-back (:meth:`Preemption.spare_needless` with ``given_up``)."""
        queue = self.queue
        for jid in [j for j in self.holds.nominated if j not in self.past_gate]:
            self._drop_gated(queue.entry(jid), end=True)
        for e in self.kept_quota:
            self._release_quota(e)
        self.kept_quota.clear()
        if self.gated_drops and self.pre.victims:
            # victims chosen before a nomination was given up (at its turn or here) may be
            # needless now that its devices and quota are free
            for k, n in self.pre.spare_needless(self.nominations, given_up=True):
                self._spared(k, n)

    def _drop_gated(self, e: Entry, *, end: bool = False) -> None:
        """End ``e``'s nomination (see :meth:`drop_gated_nominations`) unless it waits out a
        backoff or one of its victims still terminates. At the job's own turn when the gate
        holds it back (it has no other turn in the cycle), so that the jobs after it in the
        walk find its devices and quota free: were they held to the end of the walk, a later
        preemptor could choose victims for want of them, needless once they are freed. The
        jobs the policy skips without a turn (a closed gate) at the end of the walk (``end``).

        One exception at the job's turn: when its tenant had a job refused by quota earlier
        in the walk that holds no nomination (a quota-refused head, :meth:`_note_refused`),
        its quota stays charged until the end of the walk (its devices are freed at once).
        That head was judged with the quota charged; freed now, the quota would go to a
        later job of the walk (another tenant borrowing through the cohort, another
        preemptor), and the head, for which the nomination was given up, would find it
        taken at the next cycle."""
        nom = e.nomination
        if (
            nom is None
            or self._now < e.backoff_until
            or any(self.queue.is_terminating(p) for p in nom.victims)
        ):
            return
        if not end and e.job.tenant in self.refused and e.id in self.quota_held:
            self.kept_quota.append(e)
        else:
            self._release_quota(e)
        self.holds.drop(e.id)
        self.dropped.append(e.id)
        self.gated_drops += 1

    def close_run(self) -> None:
        """Collect the policy run's reservations (inside the cycle's transaction: a run may
        still reserve for its last blocked job) and put each one's expected start in its
        job's pending reason."""
        self.first = first = self.run.reservation()
        if first is not None and not isinstance(first, Reservation):
            raise _wrong_answer(self.policy, "reservation()", first, "None or a Reservation")
        many = getattr(self.run, "reservations", None)
        self.reservations: tuple[Reservation, ...] = () if first is None else (first,)
        if callable(many):
            got = many()
            rs = tuple(got) if isinstance(got, Iterable) else None
            if rs is None or not all(isinstance(r, Reservation) for r in rs):
                raise _wrong_answer(self.policy, "reservations()", got, "Reservations only")
            self.reservations = rs
        for r in self.reservations:
            why = self.pending.get(r.job)
            if why is not None:
                self.pending[r.job] = attrs.evolve(
                    why, message=f"{why.message}; reserved to start at {r.start:g}"
                )

    def result(self) -> CycleResult:
        if self.pre.searches:
            self.step_ms["preemption (in walk)"] = self.pre.search_ms
        seen = (
            self.queue.incarnations()
            if self.incremental
            else {e.job.id: (e.seq, e.version) for e in self.candidates}
        )
        for v in self.pre.victims:
            ve = self.queue.get(v.job)
            if ve is not None:
                seen[v.job] = (ve.seq, ve.version)
        return CycleResult(
            horizon=_Horizon(self),
            now=self._now,
            bindings=tuple(self.bindings),
            placed=tuple(self.placed),
            victims=tuple(self.pre.victims),
            nominations=tuple(self.nominations) + self._rest_nominations(),
            dropped_nominations=tuple(self.dropped),
            pending=self.pending,  # (handed over: the cycle is discarded once reported)
            reservation=self.first,
            reservations=self.reservations,
            seen=seen,
            closed_after=self.closed_after,
            again=self.again,
            membership=self.cluster.membership_version,
            pod_terms=self.cluster.pod_terms_version,
            origin=origin_of(self.queue, self.cluster),
            stats=CycleStats(
                candidates=len(self.candidates),
                placed_jobs=len(self.placed),
                placed_pods=len(self.bindings),
                placement_attempts=self.attempts,
                preemption_searches=self.pre.searches,
                victims=sum(len(v.pods) for v in self.pre.victims),
                backoff_jobs=self.backoffs,
                elapsed_ms=(time.perf_counter() - self.t0) * 1000,
                step_ms=dict(self.step_ms),
            ),
        )

    def _rest_nominations(self) -> tuple[Nomination, ...]:
        """The nominations kept for the pods left of pod-level preemptors started in part
        this cycle (:meth:`_hold_rest`), of jobs with no nomination made this cycle."""
        if not self.rest_nominated:
            return ()
        made = {n.job for n in self.nominations}
        return tuple(n for j, n in self.rest_nominated.items() if j not in made)

    # ----------------------------------------------------------------- admission + placement

    def place_pods(self, job: Job, pods: Sequence[PodId]) -> PlacementLike:
        """One placement attempt on the snapshot (counted in the stats). kant's Placer
        counts the job's pods placed earlier in this cycle as its own
        (:attr:`PolicyContext.placed_of`), wherever they are placed from: the cycle, the
        victim search, a forecast."""
        self.attempts += 1
        placed_of = self.ctx.placed_of
        if placed_of and self._place_after is not None:
            earlier = placed_of.get(job.id)
            if earlier is not None:
                return self._place_after(job, self.snap, pods, earlier=earlier)
        return self._place(job, self.snap, pods)

    def _live_prefix(self, tenant: str, bindings: Sequence[Binding]) -> int:
        """How many of ``bindings`` (in order) the live usage admits too: what
        :func:`kant.apply.apply` checks, where victims still to go are charged until they are
        gone. Changes nothing."""
        live = self.live
        assert live is not None
        mark = live.mark()
        k = 0
        for b in bindings:
            milli = b.total_milli
            if milli:
                m = self.pools.model_of(b)
                if live.headroom(tenant, m) < milli:
                    break
                live.add(tenant, m, milli)
            k += 1
        live.rollback(mark)
        return k

    def _admit_and_place(
        self,
        e: Entry,
        dec: QuotaDecision,
        opens: bool | tuple[int, ...],
        facts: _Facts,
        shape: tuple[Any, ...] | None,
        *,
        whole: bool = False,
        models: Mapping[str, tuple[str, ...]] | None = None,
        held: Mapping[str, set[str]] | None = None,
        earlier: int = 0,
    ) -> tuple[tuple[Binding, ...], Reason | None, bool]:
        """Readiness and placement of the quota-admitted pods (``shape``: their placement
        shape, see :meth:`consider`; ``opens``: what of the reservations the job may use,
        :meth:`Holds.opens`; ``whole``: place all of ``dec.pods`` or none, as for a gang;
        ``models``: the GPU models per role ``dec`` was decided on, if not every model of
        the job's roles: another fit the nodes pick stays on them; ``held``: for a
        reclaimer holding its nomination (``dec`` narrowed to its nominal models,
        :meth:`_as_reclaimer`), the GPU models per role its nomination holds devices on: its
        other fits and choices of one model per role are those within nominal where it runs
        whose nominal models include them, narrowed alike; ``earlier``: how many of the
        job's pods were placed earlier in this cycle). Returns the bindings made (committed
        to the snapshot), why the job's remaining pods are not all placed, and whether that
        is only the quota that victims still to go hold (it frees itself: the cycle's ledger
        no longer charges them, the live usage still does)."""
        job = e.job
        if shape is not None and shape in self.failed_shapes:
            return (), self.failed_shapes[shape], False
        role_models = facts.role_models if models is None else models
        all_or_none = job.gang or whole
        holds = self.holds
        opening = holds.opening(opens) if opens else None
        reserved = opening if e.id not in holds.nominated else None
        before = self.snap.content_version
        # a job that may use the reservation alone may be refused without opening it (not a
        # gang with a choice of model per role: those totals judge quota's first fit only,
        # where opening it lets another fit the nodes hold be taken)
        refused = self._refused_with(reserved, job, dec) if reserved is not None else None
        if refused is not None and self._may_refit(job, dec, role_models):
            refused = None
        # (an attempt with the reservation given back is mostly rolled back, and the
        # reservation taken again: the sorted index follows only where read)
        deferred = self.snap.deferred_index() if reserved is not None else nullcontext()
        with deferred, self.snap.transaction() as tx:
            if refused is not None:
                reason: Reason | None = refused
            else:
                # the job's own nominated devices (and, if it ends in time, the
                # reservation) are open to it
                opened = holds.open_for(e.id, reserved=opening)
                if reserved is not None:
                    pool_agg = self.snap.agg["pool"].copy()
                    self._reserved_opened = (before, reserved, reserved.taken, pool_agg)
                reason = self.pools.ready(job, dec)
                if reason is not None and self._may_refit(job, dec, role_models):
                    dec, reason = self._fit_the_nodes(e, dec, role_models, reason, held=held)
            res: PlacementLike | None = None
            if reason is not None and held is not None and job.gang:
                # (the what-if's rule: its choices within nominal, when readiness refuses
                # its decision narrowed to its nominal models)
                got = self._place_narrowed(job, dec, role_models, held=held, tried=None)
                if got is not None:
                    (dec, res), reason = got, None
            if reason is None:
                over: Reason | None = None  # (a gang on its nomination's split: refused)
                if res is None:
                    if dec.split is not None and job.gang:
                        res, over = self._place_split(e, dec, facts)
                    elif dec.split is not None:
                        res = self._place_capped(e, dec, facts)
                    else:
                        got = (
                            self._place_within_nominal(e, dec, facts, whole=all_or_none)
                            if held is None
                            else None
                        )
                        if got is not None:
                            dec, res = got
                        else:
                            res = self.place_pods(self._restricted(job, dec, facts), dec.pods)
                    if job.gang and over is None and (res.unplaced or not res.bindings):
                        got = self._place_narrowed(job, dec, role_models, held=held)
                        if got is not None:
                            dec, res = got
                bindings = res.bindings
                if bindings and (not all_or_none or not res.unplaced):
                    k = (
                        len(bindings)
                        if self.live is None
                        else self._live_prefix(job.tenant, bindings)
                    )
                    if k and (k == len(bindings) or not all_or_none):
                        for b in bindings[k:]:
                            self.snap.release_binding(b)
                        bindings = bindings[:k]
                        tx.commit()
                        holds.placed(e.id, opened)
                        if opened[0] is not None and not all_or_none:
                            self._hold_rest(e, bindings)
                        left = len(e.remaining()) - earlier - k
                        if not left:
                            return bindings, None, False
                        if _more_may_pass(
                            self.ledger, job, dec, role_models, cut=k == len(dec.pods)
                        ):
                            self.again = True
                        return (
                            bindings,
                            _first_reason(res.unplaced)
                            or Reason(
                                code=ReasonCode.QUOTA_EXCEEDED,
                                message=f"{left} pods beyond the tenant's quota",
                            ),
                            False,
                        )
                    return (
                        (),
                        Reason(
                            code=ReasonCode.QUOTA_EXCEEDED,
                            message=f"{len(self.uncharged)} victim pods still to go hold its quota",
                        ),
                        True,
                    )
                reason = (
                    over
                    or _first_reason(res.unplaced)
                    or Reason(code=ReasonCode.NO_FIT, message="placement found no nodes")
                )
        if shape is not None:
            # the same reason object as in earlier cycles when it reads the same: a job
            # whose reason did not change is then passed over at a glance when the result
            # is applied (Queue.set_reasons)
            reason = self.failed_shapes[shape] = self.facts.intern_reason(reason)
        return (), reason, False

    def _place_within_nominal(
        self, e: Entry, dec: QuotaDecision, facts: _Facts, *, whole: bool
    ) -> tuple[QuotaDecision, PlacementLike] | None:
        """A job within its tenant's nominal quota that quota also admits on a GPU model
        where its tenant would borrow (:attr:`QuotaDecision.borrows_nowhere` False) placed
        on the models where it stays within nominal first: ``dec`` narrowed to them and its
        placement if that places every admitted pod; else, for a pod-level job (not
        ``whole``), the pods placed there kept and the others placed on every model quota
        admits (counting those as the job's own, as pods placed earlier in the cycle are),
        ``dec`` and both parts if together they place every admitted pod; else None (the
        snapshot as it was; it is then placed on every model quota admits, as any job).
        What is taken is committed into the caller's transaction. Placement picks among
        the models it is given by packing, not by quota: given all, it may take one where
        its tenant borrows while its nominal ones have room, and be reclaimed there as a
        borrower (Kueue's ``whenCanBorrow: TryNextFlavor``: a flavor that borrows is taken
        only when none fits without). Not for a job holding a nomination (its devices are
        chosen). O(one or two placements)."""
        if not dec.within_nominal or dec.borrows_nowhere or e.id in self.holds.nominated:
            return None
        nominal = dec.nominal_models
        models = {r: nominal.get(r, ()) if ms else ms for r, ms in dec.models.items()}
        if any(ms and not models[r] for r, ms in dec.models.items()):
            return None  # (a role within nominal on no model quota admits now)
        narrowed = attrs.evolve(dec, models=models)
        job = e.job
        tenant = job.tenant
        if self.pools.ready(job, narrowed) is not None:
            return None
        with self.snap.transaction() as tx:
            res = self.place_pods(self.pools.restricted(job, narrowed), narrowed.pods)
            # (all of it within the live usage too, where victims still to go count: else
            # placed on every model, as before, not left waiting for them)
            if not res.bindings or (
                self.live is not None
                and self._live_prefix(tenant, res.bindings) < len(res.bindings)
            ):
                return None
            if not res.unplaced:
                tx.commit()
                self.ctx.current = (job.id, narrowed)
                return narrowed, res
            if whole:
                return None
            rest = tuple(p for p in dec.pods if p in res.unplaced)
            more = self._place_beside(self._restricted(job, dec, facts), rest, res.bindings)
            if more is None or more.unplaced:
                return None
            order = {p: k for k, p in enumerate(dec.pods)}
            both = sorted((*res.bindings, *more.bindings), key=lambda b: order[b.pod])
            if self.live is not None and self._live_prefix(tenant, both) < len(both):
                return None
            tx.commit()
            self.ctx.current = (job.id, dec)
            return dec, PlacementResult(bindings=tuple(both))

    def _place_beside(
        self, job: Job, pods: Sequence[PodId], kept: Sequence[Binding]
    ) -> PlacementLike | None:
        """Place ``pods`` of ``job`` (restricted as the caller needs) beside ``kept``, the
        bindings of its other pods made in this turn and not yet in :attr:`PolicyContext.
        placed_of`, counted as the job's own as pods placed earlier in the cycle are
        (``max_per_node``, a required topology wish). None when the placer cannot count them
        and where those pods go depends on them (:func:`placed_by_own_pods`). One placement
        attempt, counted in the stats."""
        if self._place_after is not None:
            self.attempts += 1
            earlier = (*self.ctx.placed_of.get(job.id, ()), *kept)
            return self._place_after(job, self.snap, pods, earlier=earlier)
        if placed_by_own_pods(job, {p.role for p in pods}):
            return None
        return self.place_pods(job, pods)

    def _hold_rest(self, e: Entry, bindings: Sequence[Binding]) -> None:
        """A pod-level job holding a nomination was placed in part (``bindings``) while
        some of its victims still terminate: hold again, for its pods still to place, the
        devices nominated for it that those pods did not take (a pod may start on devices
        nominated for another of its pods), each pod left taking one of its role's in turn,
        as many per role as its nominated pods of that role not started (a pod the
        nomination was not for, such as a borrowed rest, holds none: the victims were
        evicted for the nominated pods), and keep that nomination in
        :attr:`rest_nominated`: for its turn's end (the quota it holds, its reason) and for
        the result (:func:`kant.apply.apply` keeps it for the job, whose nomination its
        bindings end). Were they free, a job after it in the walk would start on them, and
        the preemptor would evict it at the next cycle, its first victims still going."""
        nom = e.nomination
        if nom is None:
            return
        victims = tuple(p for p in nom.victims if self.queue.is_terminating(p))
        if not victims:
            return
        done = {b.pod for b in bindings}
        taken = {(b.node, g) for b in bindings for g in b.gpus}
        free: dict[str, list[Binding]] = {}
        for b in nom.bindings:
            if not any((b.node, g) in taken for g in b.gpus):
                free.setdefault(b.pod.role, []).append(b)
        owed = Counter(b.pod.role for b in nom.bindings)
        owed.subtract(b.pod.role for b in bindings)
        keep: list[Binding] = []
        for p in self.ctx.unplaced(e):
            mine = free.get(p.role)
            if p not in done and mine and owed[p.role] > 0:
                owed[p.role] -= 1
                b = mine.pop(0)
                keep.append(b if b.pod == p else attrs.evolve(b, pod=p))
        if keep:
            rest = attrs.evolve(nom, bindings=tuple(keep), victims=victims)
            self.holds.nominate(e.id, rest.bindings, e.job)
            self.rest_nominated[e.id] = rest

    def _place_split(
        self, e: Entry, dec: QuotaDecision, facts: _Facts
    ) -> tuple[PlacementLike, Reason | None]:
        """The placement of a gang decided on its nomination's split (``dec.split``,
        :meth:`_on_its_split`), and None; or, refused, a placement with no bindings and why.

        First as any placement on ``dec``'s models, taken when it takes no more of a model
        than the split allows there (or when it does not place the gang: nothing is applied
        then). Else once more with every other GPU free on the nodes of the split's models
        held out of it, so on its nominated devices there alone (a placer that prefers other
        free GPUs of a model to the nominated ones would otherwise have it refused on quota,
        and it would lose its nomination once its victims were gone, and evict again). If
        that does not place it within the split either, it is refused, for what the first
        placement took beyond the split (:func:`_beyond_split`); nothing of either attempt
        stays on the snapshot. A placement taken is committed into the caller's transaction.
        A placement attempt more, and O(nodes of those models) allocations, only when the
        first takes too much."""
        job, snap, split, nom = e.job, self.snap, dec.split, e.nomination
        assert split is not None and nom is not None
        restricted = self._restricted(job, dec, facts)
        with snap.transaction() as tx:
            res = self.place_pods(restricted, dec.pods)
            if res.unplaced or not res.bindings:
                tx.commit()  # (a gang not placed whole applied nothing)
                return res, None
            over = _beyond_split(self.pools, split, res.bindings)
            if over is None:
                tx.commit()
                return res, None
        keep: dict[int, int] = {}
        for b in nom.bindings:
            slot = snap.slot_if_here(b.node)
            if slot is not None:
                keep[slot] = keep.get(slot, 0) | mask_of(b.gpus)
        ids = [self.pools.models[m] for m in split if m in self.pools.models]
        with snap.transaction() as tx:
            hidden = take_free_gpus(snap, ids, keep)
            again = self.place_pods(restricted, dec.pods)
            for a in reversed(hidden):
                a.give(snap)
            if (
                again.bindings
                and not again.unplaced
                and _beyond_split(self.pools, split, again.bindings) is None
            ):
                tx.commit()
                return again, None
        return PlacementResult(), over

    def _place_capped(self, e: Entry, dec: QuotaDecision, facts: _Facts) -> PlacementLike:
        """The placement of a pod-level job decided with a ``split`` (the most its pods may
        take of each GPU model together, :meth:`_nominal_room`): placed as any job on
        ``dec``'s models, then the pods that take a model beyond the split (in pod order)
        are released and placed again on the models with room left for them, until none
        is over or none has room. Placed again, the pods kept count as the job's own, as
        pods placed earlier in the cycle do (``max_per_node``, a required topology wish);
        with a placer that cannot count them, pods whose placement depends on them are not
        placed again. The bindings kept are committed to the snapshot; the pods left out
        are unplaced, for what placement said or the split. At most one placement attempt
        more per GPU model of the split."""
        job, split = e.job, dec.split
        assert split is not None
        left = dict(split)
        order = {p: k for k, p in enumerate(dec.pods)}
        kept: list[Binding] = []
        unplaced: dict[PodId, Reason] = {}
        todo, models = dec.pods, dec.models
        per_pod = {r.name: r.resources.total_milli for r in job.roles}
        for _ in range(len(split) + 1):
            restricted = self._restricted(job, attrs.evolve(dec, pods=todo, models=models), facts)
            if not kept:
                res = self.place_pods(restricted, todo)
            elif (beside := self._place_beside(restricted, todo, kept)) is not None:
                res = beside
            else:
                why = Reason(
                    code=ReasonCode.QUOTA_EXCEEDED,
                    message="beyond its tenant's nominal quota left where its pods went first",
                )
                unplaced.update((p, why) for p in todo)
                break
            unplaced.update(res.unplaced)
            over: list[Binding] = []
            for b in res.bindings:
                milli = b.total_milli
                m = self.pools.model_of(b) if milli else ""
                if milli and left.get(m, 0) < milli:
                    over.append(b)
                    continue
                if milli:
                    left[m] -= milli
                kept.append(b)
            if not over:
                break
            for b in over:
                self.snap.release_binding(b)
            todo = tuple(b.pod for b in over)
            models = {
                r: tuple(m for m in ms if left.get(m, 0) >= per_pod[r])
                for r, ms in dec.models.items()
            }
            if not any(models.get(p.role) for p in todo):
                names = "|".join(sorted(split))
                why = Reason(
                    code=ReasonCode.QUOTA_EXCEEDED,
                    message=f"beyond its tenant's nominal quota left on {names}",
                )
                unplaced.update((p, why) for p in todo)
                break
        kept.sort(key=lambda b: order[b.pod])
        return PlacementResult(bindings=tuple(kept), unplaced=unplaced)

    def _place_narrowed(
        self,
        job: Job,
        dec: QuotaDecision,
        role_models: Mapping[str, tuple[str, ...]],
        *,
        held: Mapping[str, set[str]] | None = None,
        tried: Mapping[str, tuple[str, ...]] | Literal[True] | None = True,
    ) -> tuple[QuotaDecision, PlacementLike] | None:
        """A gang whose placement with ``dec`` failed, placed with one GPU model per role
        (of ``role_models``): the first of :func:`narrowed_fits` (one model per role of the
        fits quota allows, those within nominal first, at most 8; not ``dec``'s models
        again) that readiness passes and placement places whole, and its placement
        (committed to the snapshot); None when none does, or the job has no role on several
        models (:func:`one_model_each`: nothing to narrow). Only for a gang whose placement
        failed; each attempt is counted in the stats. ``held``: for a reclaimer holding its
        nomination, the GPU models per role it holds devices on: it is placed from the
        choices within nominal alone (the preemption what-if's rule) that keep each role on
        the models its nomination holds (:func:`_holds_nominated`); ``tried``: the models
        of the placement that failed (True: ``dec``'s; None: ``dec`` was not placed,
        readiness refused it)."""
        if not one_model_each(job, dec.pods, role_models):
            return None
        fits = narrowed_fits(self.ledger, job, dec.pods, role_models)
        if held is not None:
            fits = tuple(f for f in fits if f.within_nominal and _holds_nominated(f, held))
        skip = dec.models if tried is True else tried
        got = self.pools.place_narrowed(job, fits, self.place_pods, skip) if fits else None
        if got is not None:
            self.ctx.current = (job.id, got[0])
        return got

    def _may_refit(
        self, job: Job, dec: QuotaDecision, role_models: Mapping[str, tuple[str, ...]]
    ) -> bool:
        """Is ``job`` a gang that quota decides by one GPU model per role (of
        ``role_models``), so that another fit than ``dec``'s may be taken with the nodes in
        view? (Never without quotas: no choice to make.) O(roles)."""
        return not self.ledger.table.unlimited and one_model_each(job, dec.pods, role_models)

    def _fit_the_nodes(
        self,
        e: Entry,
        dec: QuotaDecision,
        role_models: Mapping[str, tuple[str, ...]],
        refused: Reason,
        *,
        held: Mapping[str, set[str]] | None = None,
    ) -> tuple[QuotaDecision, Reason | None]:
        """A gang decided by one GPU model per role whose decision ``dec`` readiness
        ``refused`` on the snapshot now (what the job may use of it opened): the first of the
        other decisions :func:`admit_quota` chooses among given the live nodes
        (:func:`fits_to_try`, in their order of preference) that readiness passes, and None;
        else ``dec`` and ``refused`` (the reason of the first fit quota found stands).
        Decided afresh each time (what the nodes hold changes as the cycle places jobs):
        only for such a gang readiness refused, whose shape did not fail already this
        cycle. ``held``: for a reclaimer holding its nomination (``dec`` narrowed to its
        nominal models, :meth:`_as_reclaimer`), the GPU models per role its nomination holds
        devices on: only the fits within nominal where it runs whose nominal models include
        them (:func:`_holds_nominated`), each narrowed alike. Another fit within nominal
        that the free GPUs hold while its victims terminate would start it there, off the
        devices they free, and they would have been evicted for nothing. O(fits x
        readiness)."""
        job = e.job
        for alt in fits_to_try(self.ledger, job, dec.pods, role_models, dec)[1:]:
            if held is not None:
                if not (alt.ok and alt.within_nominal and _holds_nominated(alt, held)):
                    continue
                alt = attrs.evolve(alt, models=alt.nominal_models)
            if self.pools.ready(job, alt) is None:
                self.ctx.current = (job.id, alt)
                return alt, None
        return dec, refused

    def _refused_with(self, reserved: Hold, job: Job, dec: QuotaDecision) -> Reason | None:
        """Readiness's refusal of ``job`` with the reservation alone opened (it ends before
        the reservation is needed), when the per-pool aggregates that opening would give
        decide it: read off the reservation's rows, or kept from the last time at the same
        snapshot contents. None: only opening it tells."""
        contents = self.snap.content_version
        seen = self._reserved_opened
        if (
            seen is not None
            and seen[0] == contents
            and seen[1] is reserved
            and seen[2] is reserved.taken
        ):
            agg: IntArray | None = seen[3]
        else:
            agg = reserved.pool_agg_given_back(self.snap)
            if agg is not None:
                self._reserved_opened = (contents, reserved, reserved.taken, agg)
        return None if agg is None else self.pools.refused_by_aggregates(job, dec, agg)

    def _admit_quota(self, e: Entry, facts: _Facts) -> QuotaDecision:
        """:func:`admit_quota` of the job's remaining pods on the cycle's ledger. The
        decision depends only on the ledger's usage (its ``version``), the tenant, and per
        role its name, per-pod GPU milli, number of pods asked and GPU models: jobs alike in
        those share one decision while the ledger is unchanged (their own pods put in: a
        one-role job the same number of its pods, in order; a job of several roles that is
        admitted anything gets its own decision)."""
        led = self.ledger
        if not self.incremental:
            return admit_quota(led, e.job, e.remaining(), facts.role_models)
        if facts.quota_key is None:
            job = e.job
            counts = pods_per_role(job, e.remaining())
            facts.quota_key = self.facts.intern_quota_key(
                (
                    job.tenant,
                    job.gang,
                    tuple(
                        (r.name, r.resources.total_milli, counts.get(r.name, 0),
                         facts.role_models.get(r.name, ()))
                        for r in job.roles
                    ),
                )
            )  # fmt: skip
        key = (led.version, facts.quota_key)
        hit = self.quota_memo.get(key)
        if hit is not None and hit[0] is e:
            return hit[1]
        if hit is None:
            dec = admit_quota(led, e.job, e.remaining(), facts.role_models)
        elif not hit[1].pods:
            dec = hit[1]  # nothing admitted: the same decision for any job alike
        elif len(e.job.roles) == 1:
            # one role: the same number of its pods, taken in order (admit_quota's prefix)
            alike = hit[1]
            rem = e.remaining()
            all_pods = len(alike.pods) == len(rem)
            whole = facts.whole if all_pods else None
            if (
                whole is not None
                and whole.within_nominal == alike.within_nominal
                and whole.models == alike.models
                and whole.nominal_models == alike.nominal_models
                and whole.nominal_pods == alike.nominal_pods
            ):
                dec = whole  # all its pods, as in an earlier cycle: the same decision
            else:
                dec = QuotaDecision(
                    ok=True, pods=rem[: len(alike.pods)], models=alike.models,
                    within_nominal=alike.within_nominal, nominal_models=alike.nominal_models,
                    nominal_pods=alike.nominal_pods,
                )  # fmt: skip
                if all_pods:
                    facts.whole = dec
        else:
            dec = admit_quota(led, e.job, e.remaining(), facts.role_models)
        self.quota_memo[key] = (e, dec)
        return dec

    def _restricted(self, job: Job, dec: QuotaDecision, facts: _Facts) -> Job:
        """The job narrowed to the GPU models quota admits (kept in the facts for the job's
        cached decision, which live as long as the pools do)."""
        if dec is not facts.unlimited_decision:
            return self.pools.restricted(job, dec)
        if facts.restricted is None:
            facts.restricted = self.pools.restricted(job, dec)
        return facts.restricted

    def _never_fits(
        self, e: Entry, role_models: dict[str, tuple[str, ...]], facts: _Facts
    ) -> Reason | None:
        """``UNSATISFIABLE`` when the job's remaining pods could never fit its pools even empty
        (on the nodes the strategy may use), or never within its tenant's quota ceiling; else
        None. The answer depends only on the job's remaining pods (its entry's version), the
        cluster's nodes (their static capacity: ``membership_version``), the quota table and
        the strategy, so it is kept in the job's facts across cycles until one of them
        changes."""
        key = self.never_key
        if facts.never is not None and facts.never[0] == key:
            return facts.never[1]
        known = self.facts.never_answers(key)  # per never shape, for jobs alike
        # (the shape holds the strategy's reach: found again for another strategy)
        if facts.never_shape is None or facts.never_shape[0] is not self.strategy:
            sid = self.facts.never_shape_id(e.job, e.remaining(), role_models, self.reach)
            facts.never_shape = (self.strategy, sid)
        sid = facts.never_shape[1]
        if sid in known:
            why = known[sid]
        else:
            pods = e.remaining()
            table = self.ledger.table
            why = self.pools.never_fits(e.job, pods, role_models, self.reach) or quota_never_fits(
                table, e.job, pods, role_models
            )
            capped = (
                role_models if why is not None else quota_models(table, e.job, pods, role_models)
            )
            if capped is not role_models:  # (the pools quota could ever admit it on)
                why = self.pools.never_fits(e.job, pods, capped, self.reach)
                if why is not None:
                    why = _quota_capped(why, role_models, capped)
            known[sid] = why
        facts.never = (key, why)
        return why

    def _commit_placed(
        self, e: Entry, bindings: tuple[Binding, ...], *, first: bool = True
    ) -> None:
        """Charge ``bindings`` of ``e``, placed on the snapshot, and record them in the
        result; ``first``: the job's first bindings of the cycle (not its rest's turn)."""
        by_model: dict[str, int] = {}  # one ledger change per GPU model (the same usage)
        models: dict[str, str] = {}
        for b in bindings:
            m = models.get(b.node)
            if m is None:
                m = models[b.node] = self.pools.model_of(b)
            by_model[m] = by_model.get(m, 0) + b.total_milli
        tenant = e.job.tenant
        for m, milli in by_model.items():
            self.ledger.add(tenant, m, milli)
            if self.live is not None:
                self.live.add(tenant, m, milli)
        self.bindings.extend(bindings)
        if first:
            self.placed.append(e.id)
        self.ctx.note_placed(e, bindings)
        if e.nomination is not None and e.id in self.dropped:
            self.dropped.remove(e.id)  # (dropped as outlived: its placement ends it)

    def _explained(self, e: Entry, got: object) -> Reason:
        """``got``, the queueing policy run's ``explain`` answer for ``e``, if it is a
        Reason; anything else is a ValidationError naming the policy."""
        if got.__class__ is not Reason and not isinstance(got, Reason):
            raise _wrong_answer(self.policy, f"explain({e.id!r}, ...)", got, "a Reason")
        return got

    def _explain(self, e: Entry, reason: Reason, *, freeing: bool = False) -> Reason:
        """The reason users should read: a preemptor waits for its victims (or its nomination
        has served its time); otherwise the queueing policy's word. ``freeing``: it failed
        only on quota that victims still to go hold (its nomination stands)."""
        nom = e.nomination
        if nom is None or not self.holds.is_nominated(e.id):
            return self._explained(e, self.run.explain(e, reason))
        left = [p for p in nom.victims if self.queue.is_terminating(p)]
        if left:
            return Reason(
                code=ReasonCode.PREEMPTING, message=f"waiting for {len(left)} victim pods to go"
            )
        if freeing:
            return Reason(
                code=ReasonCode.PREEMPTING,
                message=f"waiting for {len(self.uncharged)} victim pods to free quota",
            )
        # victims are gone and it still does not fit: the nomination has served its time
        self.holds.drop(e.id)
        self.dropped.append(e.id)
        return reason

    def _preempt(
        self,
        e: Entry,
        dec: QuotaDecision,
        role_models: dict[str, tuple[str, ...]],
        may_backfill: bool,
        *,
        pods: tuple[PodId, ...] | None = None,
    ) -> None:
        """Search victims for ``e`` (for ``pods``, those of its pods it still waits to
        place: :meth:`Entry.remaining` unless some were placed this cycle) and record what
        was found: its nomination, held, and its victims' quota, released."""
        epoch = (len(self.bindings), self.holds.epoch)
        found = self.pre.preempt(e, dec, role_models, may_backfill, epoch=epoch, pods=pods)
        if found is None:
            return
        nom, units = found
        if e.id in self.dropped:  # its old nomination ended; this one replaces it
            self.dropped.remove(e.id)
        self.nominations.append(nom)
        self.holds.nominate(e.id, nom.bindings, e.job)
        self._uncharge(nom.victims)
        self._hold_quota(e, nom.bindings)
        self.pending[e.id] = _preempting(self.pre.victims[len(self.pre.victims) - units :], nom)
        # victims earlier preemptors chose that these made needless are given back
        for k, n in self.pre.spare_needless(self.nominations) if units else ():
            self._spared(k, n)

    def _spared(self, k: int, n: Nomination) -> None:
        """Record ``n``, this cycle's ``k``-th nomination after some of its victims were
        given back (:meth:`Preemption.spare_needless`), and its job's reason."""
        self.nominations[k] = n
        mine = [v for v in self.pre.victims if v.preemptor == n.job]
        if mine or n.victims:
            self.pending[n.job] = _preempting(mine, n)
        else:
            self.pending[n.job] = Reason(
                code=ReasonCode.PREEMPTING,
                message="its victims given back: waiting to start on the devices held for it",
            )


def nomination_outlived(cluster: ClusterState, nom: Nomination) -> bool:
    """Was ``nom`` made for nodes no longer there as they were: a node it names removed, or
    added again under its name or relabelled after the nomination was made (its
    :meth:`~kant.state.ClusterState.incarnation` later than ``nom.membership``), or taking
    no pods now (unhealthy or cordoned), or a GPU or NIC it holds unhealthy? A decision
    taken against an earlier incarnation of a node does not apply to the node there now, and
    devices that cannot be bound are held for no one. O(1) while no node came, went or was
    relabelled since and every node and device is healthy; else O(its bindings)."""
    since = nom.membership
    if since is None or since != cluster.membership_version:
        for b in nom.bindings:
            if b.node not in cluster or (since is not None and cluster.incarnation(b.node) > since):
                return True
    if cluster.all_healthy:
        return False
    for b in nom.bindings:
        healthy, gpus, nics = cluster.health_masks(b.node)
        if not healthy or any(not gpus >> g & 1 for g in b.gpus):
            return True
        if any(not nics >> n & 1 for n in b.nics):
            return True
    return False


def _preempting(victims: Sequence[Victim], nom: Nomination) -> Reason:
    """A preemptor's reason: the victims it chose this cycle are being evicted, or (none)
    it waits for the pods of its nomination already going."""
    if victims:
        pods = sum(len(v.pods) for v in victims)
        message = f"evicting {pods} pods of {len(victims)} victims"
    else:
        message = f"waiting for {len(nom.victims)} pods already being evicted"
    return Reason(code=ReasonCode.PREEMPTING, message=message)


class _Facts:
    """What a job's consideration derives from the job alone (and the cycle's pools): each
    role's GPU models, or why there is none; with no quotas, the quota decision (every
    remaining pod, on every allowed model) and its placement shape, interned as an int; and
    whether its remaining pods could never fit (``never``: the answer with the static
    capacity and the quota table it was derived for). ``version`` is the entry's version
    when they were derived."""

    __slots__ = (
        "decided_shape", "job", "never", "never_shape", "no_pool", "quota_key", "restricted",
        "role_models", "shape", "unlimited_decision", "version", "whole",
    )  # fmt: skip

    def __init__(self, e: Entry, pools: Pools) -> None:
        job = self.job = e.job
        self.version = e.version
        self.role_models, self.no_pool = pools.role_models(job)
        self.unlimited_decision: QuotaDecision | None = None
        if self.no_pool is None:
            self.unlimited_decision = admit_without_quotas(job, e.remaining(), self.role_models)
        self.shape: int | None = None
        self.never: tuple[tuple[Any, ...], Reason | None] | None = None
        # what the never answer reads of the job (interned), for the strategy it was found for
        self.never_shape: tuple[object, int] | None = None
        self.quota_key: int | None = None  # what its quota decision depends on (interned)
        self.restricted: Job | None = None  # the job narrowed to its cached decision's models
        # with quotas: the decision admitting every remaining pod (alike jobs' decisions
        # are made from another job's, :meth:`_Cycle._admit_quota`), kept across cycles
        self.whole: QuotaDecision | None = None
        # with quotas: the last decision's pods and models, and its placement shape's id
        self.decided_shape: tuple[tuple[PodId, ...], Mapping[str, tuple[str, ...]], int] | None
        self.decided_shape = None


class _Tail:
    """The answers a closed gate gave the jobs behind it (see :meth:`_Cycle._skip_all`):
    the entries it skipped, in order, and their ids (``at``); the answers that were not the
    skip (``other``); the ids of those that were waiting out a backoff; and the time and the
    queue's change tick they were given at."""

    __slots__ = ("at", "backoff", "entries", "now", "other", "tick")

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.at: dict[str, None] = {}  # their ids, in order
        self.other: dict[str, Reason] = {}
        self.backoff: dict[str, None] = {}  # (in order)
        self.now = -math.inf
        self.tick = 0

    def answer(self, e: Entry, other: Reason | None, now: float) -> None:
        """Keep the answer to ``e`` (``other``, None for the skip)."""
        jid = e.job.id
        if other is None:
            self.other.pop(jid, None)
        else:
            self.other[jid] = other
        if now < e.backoff_until:
            self.backoff[jid] = None

    def drop_first(self, k: int) -> None:
        """Forget the first ``k`` entries (the gate now closes after them)."""
        if not k:
            return
        gone = self.entries[:k]
        del self.entries[:k]
        for e in gone:
            jid = e.job.id
            del self.at[jid]
            self.other.pop(jid, None)
            self.backoff.pop(jid, None)


class _Quiet:
    """The last quiet cycle of a queue (it bound, evicted, nominated and dropped nothing), what
    it read and until when its result holds (see :func:`schedule_cycle`): its time horizon
    (:meth:`CycleResult.time_horizon`) made a little earlier, derived on the first cycle that
    could reuse it (most quiet cycles of a simulation are followed by a change), unchanged
    while the queue is."""

    _KEPT: ClassVar[weakref.WeakKeyDictionary[Queue, _Quiet]] = weakref.WeakKeyDictionary()
    __slots__ = ("inputs", "now", "pending", "result", "seen", "until")

    def __init__(self, inputs: tuple[Any, ...], result: CycleResult) -> None:
        self.inputs, self.now, self.result = inputs, result.now, result
        self.until: float | None = None
        # the mappings every answer again shares: read-only copies, made by the first answer
        self.pending: Mapping[str, Reason] | None = None
        self.seen: Mapping[str, tuple[int, int]] = {}

    @staticmethod
    def key(
        cluster: ClusterState,
        queue: Queue,
        admitter: Admitter,
        placer: PlacerLike,
        policy: QueueingPolicy,
        preemption: PreemptionPolicy,
    ) -> tuple[Any, ...]:
        """Everything a cycle reads besides the time: the objects, and the counters of
        their changes (the cluster's nodes and described jobs, the queue's entries, the
        quota's usage)."""
        return (
            cluster, cluster.generation, cluster.membership_version, cluster.pod_terms_version,
            queue.tick, admitter, admitter.table, admitter.version, placer, strategy_of(placer),
            policy, preemption,
        )  # fmt: skip

    @classmethod
    def again(cls, queue: Queue, key: tuple[Any, ...], now: float, t0: float) -> CycleResult | None:
        """The kept result at ``now``, if it still holds: the same inputs (``key``) and ``now``
        its time or later, before the first time the passing of time could change it
        (``t0``: when the cycle began, for its ``elapsed_ms``)."""
        kept = cls._KEPT.get(queue)
        if kept is None or now < kept.now:
            return None
        if any(a is not b and a != b for a, b in zip(key, kept.inputs, strict=True)):
            return None
        if now != kept.now:
            if kept.until is None:
                kept.until = kept.horizon()
            if not now < kept.until:
                return None
        r = kept.result
        if kept.pending is None:  # (one copy for all: apply sees the same again, O(1))
            kept.pending = ReadOnlyDict(r.pending)
            kept.seen = ReadOnlyDict(r.seen)
        st = r.stats
        stats = CycleStats(
            candidates=st.candidates, placed_jobs=0, placed_pods=0, placement_attempts=0,
            preemption_searches=0, victims=0, backoff_jobs=st.backoff_jobs,
            elapsed_ms=(time.perf_counter() - t0) * 1000, reused=True,
        )  # fmt: skip
        # (the kept result's horizon goes with it: the same inputs, the same horizon)
        return attrs.evolve(r, now=now, pending=kept.pending, seen=kept.seen, stats=stats)

    @classmethod
    def keep(cls, queue: Queue, key: tuple[Any, ...], result: CycleResult) -> None:
        """Keep ``result`` if it is quiet (forget the last one otherwise). O(1)."""
        if result.bindings or result.victims or result.nominations or result.dropped_nominations:
            cls._KEPT.pop(queue, None)
        else:
            cls._KEPT[queue] = cls(key, result)

    def horizon(self) -> float:
        """The kept cycle's time horizon (:meth:`CycleResult.time_horizon`), made a little
        earlier (see :func:`_earlier`); its time when it cannot tell. Valid while the queue
        is unchanged (it reads fields of its entries)."""
        first = self.result.time_horizon()
        return first if first <= self.now else _earlier(first)


class _Horizon:
    """What :meth:`CycleResult.time_horizon` reads of a cycle, taken when its result is built
    (the cycle is discarded right after; O(1)), and the horizon once derived
    (:func:`_time_horizon`): the policy run's own (asked now: the run is the cycle's), the
    victim index's, whether any job waited out a backoff, the cascade window (None:
    preemption off), the jobs considered and the jobs placed, kept only while they may be
    read."""

    __slots__ = ("backoffs", "candidates", "now", "placed", "run", "values", "victims", "window")

    def __init__(self, cyc: _Cycle) -> None:
        now = self.now = cyc.now
        declared: Callable[[], float] | None = getattr(cyc.run, "time_horizon", None)
        self.run = now  # (none declared: cannot tell)
        if declared is not None:
            got = declared()
            if isinstance(got, bool) or not isinstance(got, numbers.Real):
                raise _wrong_answer(cyc.policy, "time_horizon()", got, "a number of seconds")
            self.run = float(got)
        pol = cyc.preemption
        on = pol.enabled
        self.window = pol.cascade_window if on else None
        self.victims = cyc.pre.index.time_horizon() if on else math.inf
        self.backoffs = cyc.backoffs > 0
        self.candidates: Sequence[Entry] = cyc.candidates if on or self.backoffs else ()
        self.placed: Sequence[str] = cyc.placed if on else ()
        self.values: dict[bool, float] = {}  # with the policy run's horizon or without

    def __call__(self, policy: bool = True) -> float:
        got = self.values.get(policy)
        if got is None:
            got = self.values[policy] = _time_horizon(
                self.now, self.run if policy else math.inf, self.candidates,
                backoffs=self.backoffs, window=self.window, victims=self.victims,
                placed=self.placed,
            )  # fmt: skip
        return got


def _time_horizon(
    now: float,
    run: float,
    candidates: Sequence[Entry],
    *,
    backoffs: bool,
    window: float | None,
    victims: float,
    placed: Sequence[str] = (),
) -> float:
    """The first time after ``now`` at which the passing of time alone could change what a
    cycle at ``now`` that considered ``candidates`` decided, ``now`` when it cannot tell,
    ``math.inf`` when never: the earliest of its policy run's horizon (``run``: ``now`` for a
    run that declares none), the first end of a backoff among the candidates (looked for only
    with ``backoffs``: the cycle counted a job waiting one out, ``CycleStats.backoff_jobs``)
    and, with preemption on (``window``, its cascade window; None: off), the first close of
    the window of a candidate evicted within it and not ``placed`` by the cycle (it may
    preempt again then; a job placed runs again, which ends the window when the result is
    applied, so the answer is the same before and after) and ``victims`` (the victim index's
    horizon: a running unit passes the minimum runtime). Valid while the candidates' entries
    are unchanged but for that. O(1), plus O(candidates) with backoffs or preemption."""
    first = run
    if first <= now:
        return now
    if backoffs:
        for e in candidates:
            b = e.backoff_until
            if now < b < first:
                first = b
    if window is not None:
        ran: Collection[str] = set(placed) if len(placed) > 8 else placed
        for e in candidates:
            ev = e.evicted_at
            if ev is not None and now - ev < window and ev + window < first and e.id not in ran:
                first = ev + window
        first = min(first, victims)
    return first if first > now else now


def _earlier(t: float) -> float:
    """``t`` made earlier by more than the rounding of the comparisons it stands for (a
    threshold ``x + d`` stands for ``now - x >= d``, which float rounding may pass a few
    units in the last place before ``now`` reaches ``x + d``)."""
    if t == math.inf:
        return t
    return t - 1e-12 * max(1.0, abs(t))


class _JobFacts:
    """Per-job facts kept across cycles (per queue, while the node pools are the same and a
    job's entry is unchanged), so a job that waits costs a dictionary read instead of a
    recomputation of what cannot have changed. Kept only for the jobs of the last cycle."""

    _KEPT: ClassVar[weakref.WeakKeyDictionary[Queue, _JobFacts]] = weakref.WeakKeyDictionary()

    def __init__(self, pools_key: tuple[tuple[str, int], ...]) -> None:
        self.pools_key = pools_key
        self.facts: dict[int, _Facts] = {}
        self.shapes: dict[tuple[Any, ...], int] = {}
        self.quota_keys: dict[tuple[Any, ...], int] = {}
        self.reasons: dict[Reason, Reason] = {}
        self.never_shapes: dict[tuple[Any, ...], int] = {}
        self.never: tuple[tuple[Any, ...], dict[int, Reason | None]] = ((), {})
        self.tail: _Tail | None = None  # the last closed gate's answers

    def never_shape_id(
        self,
        job: Job,
        pods: Sequence[PodId],
        role_models: Mapping[str, tuple[str, ...]],
        reach: Callable[[Job, Role], Reach | None] | None = None,
    ) -> int:
        """A small int naming everything the never-fits answer of ``pods`` of ``job`` reads
        besides the static capacity and the quota table (:meth:`kant.admission.Pools.never_fits`,
        :func:`quota_never_fits`): its tenant, whether it is a gang, and per role its name,
        pods, GPU models, :attr:`~kant.model.Role.placement_key` and the strategy's
        ``reach`` (:meth:`kant.placement.Placer.reach`, given one)."""
        counts = pods_per_role(job, pods)
        shape = (
            job.tenant,
            job.gang,
            tuple(
                (
                    r.name,
                    counts.get(r.name, 0),
                    role_models.get(r.name),
                    r.placement_key,
                    None if reach is None else reach(job, r),
                )
                for r in job.roles
            ),
        )
        return self.never_shapes.setdefault(shape, len(self.never_shapes))

    def never_answers(self, key: tuple[Any, ...]) -> dict[int, Reason | None]:
        """The never-fits answers found so far per never shape, for the static capacity and
        quota table ``key`` (forgotten when it changes)."""
        if self.never[0] != key:
            self.never = (key, {})
        return self.never[1]

    def intern_reason(self, reason: Reason) -> Reason:
        """The first reason equal to ``reason`` met while these facts were kept (at most
        :data:`_REASONS_KEPT` are remembered)."""
        got = self.reasons.get(reason)
        if got is None:
            if len(self.reasons) >= _REASONS_KEPT:
                self.reasons.clear()
            got = self.reasons[reason] = reason
        return got

    def intern_quota_key(self, key: tuple[Any, ...]) -> int:
        """A small int naming what a job's quota decision depends on (equal keys, equal
        ints), so the cycle's memo of quota decisions hashes two ints per lookup."""
        return self.quota_keys.setdefault(key, len(self.quota_keys))

    @classmethod
    def for_cycle(
        cls, queue: Queue, pools: Pools, candidates: Sequence[Entry], *, keep: bool = True
    ) -> _JobFacts:
        """The facts ``queue``'s previous cycle kept, if its node pools were the same (a
        fresh, unkept set with ``keep=False``). Facts of jobs no longer waiting are dropped
        once they outnumber the waiting jobs (amortised O(1) per cycle), and all of them once
        the shapes interned outnumber the waiting jobs four times and :data:`_SHAPES_KEPT`
        more."""
        key = pools.key
        if not keep:
            return cls(key)
        cur = cls._KEPT.get(queue)
        interned = 0 if cur is None else len(cur.shapes) + len(cur.never_shapes)
        if cur is None or cur.pools_key != key or interned > 4 * len(candidates) + _SHAPES_KEPT:
            # (jobs of shapes gone, e.g. a node selector per job naming its host, would keep
            # their interned shapes for ever: past the bound the facts start afresh)
            cur = cls._KEPT[queue] = cls(key)
        elif len(cur.facts) > 2 * len(candidates) + 64:
            old = cur.facts
            cur.facts = {e.seq: f for e in candidates if (f := old.get(e.seq)) is not None}
        return cur

    def of(self, e: Entry, pools: Pools) -> _Facts:
        """The facts of ``e`` (derived again if its job or version changed)."""
        f = self.facts.get(e.seq)
        if f is None or f.job is not e.job or f.version != e.version:
            f = self.facts[e.seq] = _Facts(e, pools)
        return f

    def decided_shape_id(self, f: _Facts, dec: QuotaDecision) -> int:
        """A small int naming the placement shape of ``dec``'s pods of ``f``'s job (kept in
        ``f`` for the same pods and models)."""
        got = f.decided_shape
        if got is not None and got[0] == dec.pods and got[1] == dec.models:
            return got[2]
        sid = self._shape_id(f.job, dec)
        f.decided_shape = (dec.pods, dec.models, sid)
        return sid

    def shape_id(self, f: _Facts) -> int:
        """A small int naming the placement shape of ``f``'s cached quota decision."""
        if f.shape is not None:
            return f.shape
        assert f.unlimited_decision is not None
        f.shape = self._shape_id(f.job, f.unlimited_decision)
        return f.shape

    def _shape_id(self, job: Job, dec: QuotaDecision) -> int:
        """The placement shape of ``dec``'s pods of ``job``, interned (equal shapes, equal
        ints)."""
        return self.shapes.setdefault(placement_shape(job, dec), len(self.shapes))


_REASONS_KEPT = 4096
_SHAPES_KEPT = 4096
"""Interned shapes past which (beyond four per waiting job) a queue's kept facts start afresh."""

_NEVER_FIT_CANDIDATES = CAPACITY_CODES | {ReasonCode.QUOTA_EXCEEDED}

_RUN_METHODS = ("gate", "explain", "failed", "reservation")
"""What a queueing policy's run must have (:class:`kant.contracts.PolicyRun`)."""


def _wrong_answer(policy: object, call: str, got: object, want: str) -> ValidationError:
    """The error of a queueing policy (or its run) whose ``call`` answered ``got``, not what
    its contract asks (``want``): a ValidationError naming the policy."""
    name = getattr(policy, "name", type(policy).__name__)
    return ValidationError("policy", name, f"{call} returned {got!r}: it must return {want}")


def placement_shape(job: Job, dec: QuotaDecision) -> tuple[Any, ...]:
    """Everything a placement of ``dec``'s pods of ``job`` depends on besides the snapshot:
    two jobs of one shape place alike, so a shape that failed fails again while nothing is
    freed (the cycle's memo of failed shapes). A job with pod terms is a shape of its own: a
    pod placed, not only one freed, can let it in (affinity)."""
    counts = pods_per_role(job, dec.pods)
    return (
        job.gang,
        job.kind,
        tuple((counts.get(r.name, 0), dec.models.get(r.name), r.placement_key) for r in job.roles),
        job.id if job.pod_terms else None,
    )


def _beyond_split(
    pools: Pools, split: Mapping[str, float], bindings: Sequence[Binding]
) -> Reason | None:
    """Why ``bindings`` take more of a GPU model than ``split`` allows there
    (:attr:`QuotaDecision.split`); None when they take no more. O(bindings)."""
    for m, milli in pools.gpu_milli_by_model(bindings).items():
        most = split.get(m, 0)
        if milli > most:
            return Reason(
                code=ReasonCode.QUOTA_EXCEEDED,
                message=(
                    f"its placement takes {milli / 1000:g} GPUs of {m}; quota left there "
                    f"{most / 1000:g}"
                ),
            )
    return None


def _first_reason(unplaced: Mapping[PodId, Reason]) -> Reason | None:
    return unplaced[min(unplaced)] if unplaced else None


class _Reclaiming(NamedTuple):
    """How a reclaimer holding its nomination is placed (:meth:`_Cycle._as_reclaimer`)."""

    placed_with: QuotaDecision  # its decision narrowed to its nominal models
    decided: QuotaDecision  # the decision that came from (a new victim search's)
    held: dict[str, set[str]]  # per role, the GPU models its nomination holds devices on


def _holds_nominated(dec: QuotaDecision, held: Mapping[str, set[str]]) -> bool:
    """Is ``dec`` within nominal where it runs, with every role's nominal models including
    the models ``held`` (per role) that its nomination holds devices on? What a reclaimer
    holding its nomination is placed on: its victim search placed it there within nominal
    (:class:`kant.preemption.whatif.CycleWhatIf`), and the devices its victims free are
    on those models."""
    return dec.places_within_nominal and all(
        ms.issubset(dec.nominal_models.get(r, ())) for r, ms in held.items()
    )


def _more_may_pass(
    ledger: QuotaLedger,
    job: Job,
    dec: QuotaDecision,
    role_models: Mapping[str, tuple[str, ...]],
    *,
    cut: bool,
) -> bool:
    """Whether a pod-level job placed in part may have more pods pass a cycle run at once
    (``dec``: its quota decision, on ``ledger`` as it was then; ``cut``: quota admitted fewer
    pods than it has left, and all were placed). Quota admits a role's pods on the GPU models
    where most of them fit and counts them on each of those; placed, they count on their own
    model only. So a cycle at once admits more of a role that quota cut when two of its
    models had room for a pod (the pods take one, the other still has it), or admits the
    rest on a model with room that quota left out this time (where placement may find
    GPUs or pod slots the admitted models had not). O(roles x models)."""
    tenant = job.tenant
    for role in job.roles:
        models = role_models.get(role.name, ())
        per_pod = role.resources.total_milli
        if len(models) < 2 or not per_pod:
            continue
        room = [m for m in models if ledger.headroom(tenant, m) >= per_pod]
        if len(room) >= 2 if cut else any(m not in dec.models.get(role.name, ()) for m in room):
            return True
    return False
