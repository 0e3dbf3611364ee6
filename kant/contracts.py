"""Every extension point of kant, each a small Protocol whose docstring is its contract.

Read this page to add a policy without editing the cycle. For each point it says when kant
calls it, what it may read, what it may change (usually nothing), and what it must cost.
Built-ins live in their packages and are chosen by name from a :class:`kant.registry.Registry`;
``docs/extending.md`` adds one of each from outside the package.

================  ==========================================  ===============================
point             protocol                                    registry / where it plugs in
================  ==========================================  ===============================
order key         :class:`OrderKey`                           ``Queue(order=...)``
queueing policy   :class:`QueueingPolicy` -> :class:`PolicyRun`  ``kant.queueing.POLICIES``
cycle context     :class:`CycleContext` (what a run may ask)  given to ``QueueingPolicy.begin``
candidate view    :class:`CandidateView` (a waiting job)      given to ``PolicyRun`` methods
placement         :class:`Strategy` (+ optional hooks)        ``kant.placement.STRATEGIES``
node filter       :class:`NodeFilter`                         ``Placer(filters=[...])``
placer            :class:`PlacerLike`                         ``schedule_cycle(..., placer)``
victim rule       :class:`VictimRule`                         ``PreemptionPolicy(rules=[...])``
what-if           :class:`WhatIf` (the victim search's view)  built by the cycle
================  ==========================================  ===============================

Determinism is part of every contract: given the same arguments, return the same answer; no
wall clock, no unseeded randomness, no iteration over unordered sets in a way that shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import numpy as np

from kant.errors import ValidationError
from kant.model import Binding, Job, PodId, Reason, VictimReason, instance_of, number

if TYPE_CHECKING:
    import numpy.typing as npt

    from kant.model import Role
    from kant.placement.context import PodRequest
    from kant.state import Snapshot

    IntArray = npt.NDArray[np.int64]
    FloatArray = npt.NDArray[np.float64]
    BoolArray = npt.NDArray[np.bool_]

# --------------------------------------------------------------------------- queueing


class OrderKey(Protocol):
    """The global queue order: ``key(job, seq)``, lower first.

    Called once per job, at submit; the key is stored and never recomputed, so it may read
    only the job and its submission sequence number ``seq`` (unique, increasing). It must end
    with ``seq`` so the order is total (a key that cannot be compared with the others, or
    holds a NaN, is refused at submit: InvalidConfigError naming the order key). The
    default, :func:`kant.queueing.order.paper_order`, is the paper's: priority (higher
    first), submit time, size (smaller first), ``seq``."""

    def __call__(self, job: Job, seq: int) -> tuple[Any, ...]: ...


class CandidateView(Protocol):
    """A waiting job as queueing policies see it (read-only).

    ``key`` is its order key, ``seq`` its submission sequence number, ``pending_since`` when
    its current wait began (submit, or its last requeue)."""

    @property
    def id(self) -> str:
        """The job's id."""
        ...

    @property
    def job(self) -> Job:
        """The job (read-only value)."""
        ...

    @property
    def seq(self) -> int:
        """Its submission sequence number (unique, increasing)."""
        ...

    @property
    def key(self) -> tuple[Any, ...]:
        """Its order key (lower goes first)."""
        ...

    @property
    def pending_since(self) -> float:
        """When its current wait began (submit, or its last requeue)."""
        ...


def _plain_bool(v: Any) -> Any:
    """A numpy bool as the bool it is (a policy computing ``mask.any()``); else as given."""
    return bool(v) if isinstance(v, np.bool_) else v


def _plain_number(v: Any) -> Any:
    """A numpy number as the Python number it is (a policy reading a numpy column); else as
    given (a bool stays a bool, for the check to refuse)."""
    return v.item() if isinstance(v, np.integer | np.floating) else v


@attrs.frozen(kw_only=True)
class Gate:
    """A policy's answer before a job is tried: ``skip`` it with that reason, or try it;
    ``use_reserved`` lets it use every device the policy reserved (it ends before any of
    them is needed); ``until`` (the job's expected end) lets it use the reserved devices
    that no reservation needs before that time: a device is open to it when every
    reservation booking it starts at or after ``until`` (conservative backfill, where each
    reservation books its own devices from its own start). Each field is checked: a ``skip``
    that is not a :class:`~kant.model.Reason`, a ``use_reserved`` that is not a bool or an
    ``until`` that is not a number raises :class:`~kant.errors.ValidationError` (numpy bools
    and numbers are taken as the Python values they are)."""

    skip: Reason | None = attrs.field(
        default=None, validator=instance_of(ValidationError, Reason, optional=True)
    )
    use_reserved: bool = attrs.field(
        default=False,
        converter=_plain_bool,
        validator=instance_of(ValidationError, bool),
    )
    until: float | None = attrs.field(
        default=None, converter=_plain_number, validator=number(ValidationError, optional=True)
    )


GO = Gate()
"""Try the job, with no reserved devices."""


@attrs.frozen(kw_only=True)
class Reservation:
    """A job's reserved start: the earliest time the running jobs' expected ends free enough
    resources for it, and the placement it would get then. A pod-level job may be booked
    pod by pod over time (conservative backfill): ``starts`` then gives each binding's own
    start, and ``start`` is the earliest of them."""

    job: str
    start: float
    bindings: tuple[Binding, ...]
    # per binding, its pod's start (empty: every pod at ``start``)
    starts: tuple[float, ...] = attrs.field(default=())

    @starts.validator
    def _check_starts(self, _attr: Any, starts: Any) -> None:
        """Empty, or a tuple of one finite number per binding whose least is ``start`` (a
        policy of one's own building a booking gets a ValidationError naming ``starts``,
        not an error of the cycle that holds it). O(bindings)."""
        if starts == ():
            return
        if (
            not isinstance(starts, tuple)
            or len(starts) != len(self.bindings)
            or not all(isinstance(t, int | float) and not isinstance(t, bool) for t in starts)
            or not all(math.isfinite(t) for t in starts)
            or min(starts) != self.start
        ):
            raise ValidationError(
                "starts", starts,
                f"must be empty or a tuple of one finite start per binding "
                f"({len(self.bindings)}), the earliest equal to start ({self.start!r})",
            )  # fmt: skip

    def pieces(self) -> list[tuple[float, tuple[Binding, ...]]]:
        """The bindings grouped by start, soonest first: ``[(start, bindings)]``."""
        if not self.starts:
            return [(self.start, self.bindings)]
        by: dict[float, list[Binding]] = {}
        for t, b in zip(self.starts, self.bindings, strict=True):
            by.setdefault(t, []).append(b)
        return [(t, tuple(bs)) for t, bs in sorted(by.items())]


class CycleContext(Protocol):
    """What a :class:`PolicyRun` may ask of the cycle that runs it. Nothing here changes the
    cluster or the queue; a reservation holds devices on the cycle's snapshot only."""

    @property
    def now(self) -> float:
        """The cycle's time (seconds, the caller's clock)."""
        ...

    @property
    def heads_may_preempt(self) -> bool:
        """Does a job the run answers :meth:`PolicyRun.failed` True for get anything by it:
        the cycle's preemption rules let it take back what backfilled past it (or user victim
        rules read the answer)? False: those answers change nothing the cycle decides (a
        run's ``time_horizon()`` need not count them)."""
        ...

    def is_nominated(self, job: CandidateView) -> bool:
        """Does the job hold devices nominated for it (it preempted; its victims are going)?"""
        ...

    def preempted_by(self, job: CandidateView) -> frozenset[str]:
        """The jobs that evicted ``job`` (one of their victims is a pod of it) and may start
        now on the devices nominated for them: their victims are all gone and they do not
        wait out a backoff. Costs one look at each nomination held this cycle."""
        ...

    def held_out_by(
        self,
        job: CandidateView,
        *,
        tenant: str | None = None,
        besides: Collection[str] = (),
    ) -> frozenset[str]:
        """The jobs that may start now on the devices nominated for them (as for
        :meth:`preempted_by`), of ``tenant`` when given and none of ``besides``, that
        preempted while ``job`` still held its devices (it was evicted by preemption since
        each was nominated) and that ``job`` can never preempt (its priority is at most
        theirs; of another tenant, theirs borrows on no GPU model with them started), when
        ``job``, the job being considered and just refused, would pass quota, readiness and
        placement with all their nominations' devices and quota free; empty otherwise (and
        always with user victim rules). Held back, they would lose their nominations to
        ``job``, and their victims would have been evicted for nothing. Costs one look at
        each nomination held and, when some are such jobs, one quota decision and one
        placement attempt."""
        ...

    def forecast(
        self,
        job: CandidateView,
        *,
        default_runtime: float | None,
        keep: bool = False,
        after: Sequence[Reservation] = (),
        by_pod: bool = False,
    ) -> Reservation | None:
        """The job's earliest start from the running jobs' expected ends (start plus
        ``runtime_estimate``, else ``default_runtime``, else never), and the placement it would
        get then, of its pods still to place (not those placed earlier in the cycle); None
        when quota or the known ends never make room. Costs up to a bounded
        number of placement attempts; changes nothing. With ``keep``, the queue's previous
        forecast is returned when it must give the same answer (the same head and quota
        decision, the same nodes and health, and the same jobs holding devices after now),
        and this one is kept for the next cycle. ``after``: reservations made earlier this
        cycle (held with :meth:`reserve`); each takes its devices from its start to its job's
        expected end, so the job is placed around them over time, not only now. With
        ``by_pod``, a pod-level job is booked pod by pod, as cycles would start it: at each
        expected end the pods that then fit (not all of them) are booked from then, each
        until its own expected end (:attr:`Reservation.starts`)."""
        ...

    def reserve(self, reservation: Reservation) -> None:
        """Hold the reservation's free devices out of placement for the rest of the cycle;
        a job whose gate says ``use_reserved`` may use them, and one whose gate says
        ``until=t`` those of them that no reservation starting before ``t`` books too."""
        ...

    def fits_unreserved(self, job: CandidateView) -> bool:
        """Would the job pass quota and readiness if the reserved devices were free?"""
        ...

    def quota_start(self, job: CandidateView, *, default_runtime: float | None) -> float | None:
        """The earliest time the running jobs' expected ends (as in :meth:`forecast`) give the
        job's tenant quota enough for its pods still to place (not those placed earlier in
        the cycle, which the quota already holds; ``now`` if it has it already); None
        when the known ends never do. Changes nothing."""
        ...


class PolicyRun(Protocol):
    """One cycle's worth of a queueing policy's state. The cycle walks the waiting jobs in
    the global order and, for each, calls :meth:`gate`; when a job tried is not (fully)
    placed, :meth:`explain` then :meth:`failed`. All O(1) per call unless stated.

    Three optional methods: ``reservations()``, every reservation the run made (a
    conservative backfill makes several); ``closed()``, asked after each job the cycle
    considers: None, or the :class:`Gate` (a skip) every job not yet walked gets for the rest
    of the cycle, which the cycle then gives them without asking :meth:`gate`. A gate must
    close for what the run read of the cluster, the quota and the jobs walked, never for the
    time (the simulator schedules no cycle for an arrival behind it when nothing else
    changed). ``time_horizon()``, asked at the end of every cycle: the earliest time after
    the cycle's at which the passing of time alone could change what this run answered,
    the jobs, the cluster and the quota staying the same (``math.inf``: never). It bounds
    the cycle's own (:meth:`kant.cycle.CycleResult.time_horizon`): a cycle that decided
    nothing is given again, without a run, to the cycles that come before then with nothing
    else changed (:func:`kant.schedule_cycle`); without it, the cycle cannot tell (its
    result is given again only at the same time). Strict FIFO and Best-Effort FIFO read no
    time (``math.inf``); Backfill gives the first time one of its heads not yet past the threshold
    passes it; EASY and conservative backfill read the time through their forecasts and
    declare none."""

    def gate(self, job: CandidateView) -> Gate:
        """Before the job is tried: skip it (with a reason), or try it."""
        ...

    def explain(self, job: CandidateView, reason: Reason) -> Reason:
        """The reason users should read for a job that was not placed (default: ``reason``)."""
        ...

    def failed(self, job: CandidateView, reason: Reason) -> bool:
        """Record that the job was not (fully) placed for ``reason``. True: it may preempt
        jobs that backfilled past it (a Backfill head past its threshold)."""
        ...

    def reservation(self) -> Reservation | None:
        """The reservation this run made, if any (reported in the cycle's result)."""
        ...


@runtime_checkable
class QueueingPolicy(Protocol):
    """A queueing policy (paper 3.2.2): a name and a :class:`PolicyRun` per cycle.

    ``begin`` is called once at the start of each cycle; the run lives for that cycle only,
    so a policy keeps no state between cycles (everything it needs is in the queue).

    One optional class attribute: ``arrivals_unblock_none`` (False when absent). True
    promises two things while the cluster, the quota and the running jobs stay the same:
    a job joining the queue last in its order and not placed lets no other waiting job be
    placed that would not have been without it; and the passing of time alone lets no
    job be placed as long as no running job outlives its expected end (start plus
    ``runtime_estimate``). Strict FIFO, Best-Effort FIFO and EASY backfill declare it.
    After a cycle that decided nothing (a reservation aside), the simulator then runs no
    cycle for an arrival that comes last and asks for more GPU than the cluster has free
    (:mod:`kant.sim.simulator`)."""

    @property
    def name(self) -> str:
        """The name the policy is registered and reported under."""
        ...

    def begin(self, ctx: CycleContext) -> PolicyRun:
        """Start a cycle: a fresh :class:`PolicyRun` for it, reading ``ctx`` only."""
        ...


# --------------------------------------------------------------------------- placement


class PodView(Protocol):
    """The placement question a strategy or a node filter answers (concretely a
    :class:`kant.placement.PodContext`): one pod of ``role`` of ``job``, asking ``req`` (the
    per-pod request in the snapshot's units), on the snapshot ``snap``. Read-only: only the
    Placer changes the snapshot."""

    @property
    def job(self) -> Job:
        """The job the pod belongs to."""
        ...

    @property
    def role(self) -> Role:
        """The role of the pod being placed."""
        ...

    @property
    def req(self) -> PodRequest:
        """The pod's per-pod request (GPUs or GPU milli, CPU, memory, NICs)."""
        ...

    @property
    def snap(self) -> Snapshot:
        """The cycle's snapshot (read-only for scoring and filtering)."""
        ...

    def job_pods_on(self, slots: IntArray) -> IntArray:
        """Per slot, the pods of this job already on that node (placed earlier in this
        placement, or running). O(len(slots) + nodes the job is on)."""
        ...

    def role_pods_on(self, slots: IntArray) -> IntArray:
        """Per slot, the pods of this role already on that node, counted like
        :meth:`job_pods_on`; kept only for a role with ``max_per_node`` (zeros otherwise)."""
        ...

    def gpu_after(self, slots: IntArray) -> FloatArray:
        """Per slot, the share of the node's GPU capacity left free after placing the pod
        (of its CPU, for a CPU-only pod), 0..1. O(len(slots))."""
        ...


@runtime_checkable
class Strategy(Protocol):
    """A placement strategy: score feasible candidate nodes, higher is better.

    ``score(ctx, slots)`` gets candidate node slots of one pod (ascending) that fit its
    resources and passed the node filters, and returns one float per slot; the highest wins,
    ties go to the lowest slot. Called once per pod per candidate set, vectorised:
    O(len(slots)) numpy work. Scores must be *node-local*: a node's score depends only on
    its row in the snapshot and on this job's pods on it (``ctx.job_pods_on``); the Placer
    relies on it to re-score only the node it just used while it fills a gang. It must not
    change the snapshot (it may keep caches of its own).

    Any object with ``name`` and ``score`` is a strategy. These optional hooks are read once,
    when a :class:`kant.placement.Placer` adopts the strategy; the ones it lacks get the
    defaults of :class:`kant.placement.BaseStrategy` (:func:`kant.placement.adapt_strategy`):

    - ``two_level: bool`` (False): single pods on large pools search the best NodeNetGroups
      (leaves) first;
    - ``topology_default: Tier | None`` (None): the tier search multi-pod gang roles that
      state no topology wish get;
    - ``fill_partly_used_first: bool`` (False): in the two-level search, a whole-GPU pod
      first takes the fullest partly used node of its pools;
    - ``fills_node_first: bool`` (False): the score is pure (no random draws) and never
      drops on a node when one more pod of the kind lands there, so identical pods fill the
      best node before the next: the Placer then places a role's pods in bulk, with exactly
      the bindings of the pod-by-pod path;
    - ``group_key(free_milli, in_use) -> tuple of arrays``: ``np.lexsort`` keys (last
      primary) ordering candidate NodeNetGroups, lower first (default: groups in use first,
      then fewest free GPU milli);
    - ``domain_key(capacity) -> IntArray``: order of topology domains by their capacity in
      pods, lower first (default: best fit, the capacity itself);
    - ``share_device(ctx, slot) -> int``: the GPU a fractional pod takes on the chosen node
      (default: the fullest that still fits, lowest index on ties);
    - ``candidate_sets(ctx, slots) -> Sequence[tuple[IntArray, Strategy]]``: node sets to
      try in turn, each with the strategy (any strategy) that scores it (default: absent, all
      candidates scored by this strategy). Asked for every pod, also inside a gang. The
      arrays are read, never changed (the Placer keeps a set's split by leaf while the same
      array comes back); a gang role's tier search sums room over the first pod's set when
      it gets one, and skips the strategy's default tier when it gets several;
    - ``reach(job, role) -> Reach | None``: the nodes this strategy may ever place a pod of
      ``role`` of ``job`` on, whatever runs (default: absent, every node), when
      ``candidate_sets`` keeps some pods off some nodes for good. The never-fits test reads
      it: a job that only nodes outside its reach could hold is ``UNSATISFIABLE`` (it waits
      without blocking a Strict FIFO queue) rather than ``NO_FIT`` for ever. It may say more
      nodes than the strategy uses (the test then finds fewer jobs that never fit), never
      fewer. Asked for each role of a job when a cycle first meets it (or a new version of
      it, or another strategy): O(1)."""

    @property
    def name(self) -> str:
        """The strategy's registered name."""
        ...

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        """One float per slot in ``slots`` (higher is better); node-local, changes nothing."""
        ...


class Reach(Protocol):
    """What a strategy's ``reach`` hook returns: which nodes it may ever use for a kind of
    pod. Hashable, equal for equal reaches (it keys the never-fits test's caches); ``str``
    says in a few words which nodes those are (it ends up in an ``UNSATISFIABLE`` reason).

    ``allows(snap)`` returns, per slot of ``snap``'s columns, whether the node there is in
    reach; it reads only what does not change while no node comes or goes (its GPUs, zone,
    pool, topology), so its answer is kept until one does. O(slots) numpy; changes nothing."""

    def allows(self, snap: Snapshot) -> BoolArray:
        """Per slot of ``snap``, whether the node there is in reach."""
        ...


class NodeFilter(Protocol):
    """A node filter: which candidate nodes a pod may use at all (``Placer(filters=[...])``).

    ``__call__(ctx, slots)`` gets candidate slots that fit the pod's resources and returns a
    boolean mask of the same length (True: keep). The Placer asks it wherever it picks nodes
    for a pod -- the flat pass, the NodeNetGroups of the two-level search, the best-fit index
    of partly used nodes, the topology domains of a gang -- always before scoring, so a node
    it drops is never scored nor used. Answers must be node-local, like scores: after a gang
    pod is bound, the filter is asked again about that node only. O(len(slots)) numpy work;
    must not change the snapshot. Several filters combine with AND, in order. When the
    filters leave no node for a pod that would otherwise fit, the pod is unplaced with
    ``NO_FIT`` and a message naming the filter (its ``name``, else ``__name__``, else repr)."""

    def __call__(self, ctx: PodView, slots: IntArray) -> BoolArray: ...


class PlacementLike(Protocol):
    """What a placement attempt returns: the bindings made and why the others were not."""

    @property
    def bindings(self) -> tuple[Binding, ...]:
        """The bindings made."""
        ...

    @property
    def unplaced(self) -> Mapping[PodId, Reason]:
        """Why each pod asked for was not placed."""
        ...


PlaceFn = Callable[[Job, Sequence[PodId]], PlacementLike]
"""Place these pods of this job on the cycle's snapshot, into the open transaction (the cycle
hands what-ifs and forecasts this instead of the placer, and counts each attempt)."""


class PlacerLike(Protocol):
    """The RSCH: place ``pods`` of ``job`` (all when None) on ``snap``.

    The bindings are applied to the snapshot (into the transaction the caller opened), so the
    caller commits or rolls them back; a gang that cannot be placed whole applies nothing.
    Deterministic; costs O(pods x candidate nodes) numpy work at worst."""

    def place(
        self, job: Job, snap: Snapshot, *, pods: Sequence[PodId] | None = None
    ) -> PlacementLike:
        """Place the pods (all when ``pods`` is None) on ``snap``; see the class docstring."""
        ...


# --------------------------------------------------------------------------- preemption


class VictimRule(Protocol):
    """A victim rule: may ``unit`` be evicted for ``preemptor``?

    Return a :class:`~kant.model.VictimReason` (eligible, for that reason), ``False`` (never:
    protected, stop asking; numpy's ``False_`` and ``0`` too), or ``None`` (no opinion: ask
    the next rule; ``True``, numpy's ``True_`` and ``1`` too: not protected, the next rules
    say whether and why it is eligible). Any other answer raises
    :class:`~kant.errors.ValidationError` naming the rule. The rules of a
    :class:`kant.preemption.PreemptionPolicy` are asked in order, user rules before the
    built-in ones (guaranteed share, reclaim, priority, backfill). Called per candidate unit
    per preemptor: keep it O(1); it reads only its arguments."""

    def __call__(self, preemptor: Any, unit: Any, borrowing: Any) -> VictimReason | bool | None: ...


class Scope(Protocol):
    """One what-if scope: :meth:`commit` keeps its changes in the enclosing scope."""

    def commit(self) -> None:
        """Keep this scope's changes in the enclosing scope when it ends."""
        ...


class WhatIf(Protocol):
    """The victim search's view of the cycle: snapshot and quota changes in nested scopes.

    Implemented by the cycle (:class:`kant.preemption.whatif.CycleWhatIf`); everything done
    inside a scope is undone when it ends unless committed into the enclosing one."""

    def scope(self) -> AbstractContextManager[Scope]:
        """Open a nested scope; what it changes is undone at its end unless committed."""
        ...

    def remove(self, unit: Any) -> None:
        """Free what ``unit`` holds (snapshot and quota ledger)."""
        ...

    def restore(self, unit: Any) -> None:
        """Take back exactly what :meth:`remove` freed for ``unit``."""
        ...

    def ready(self) -> bool:
        """Cheap necessary check (quota + readiness) for the preemptor."""
        ...

    def place(self) -> tuple[Binding, ...] | None:
        """Try the real placement (undone afterwards); its bindings, or None."""
        ...
