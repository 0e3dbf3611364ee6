"""One scheduling cycle (QSCH + RSCH), applying its result, and the orchestrator's events.

``schedule_cycle(cluster, queue, admitter, placer, now)`` is the one place the pieces meet. It
works on the cluster's snapshot inside one transaction that it rolls back before returning, so
it never changes the cluster or the queue: it returns a :class:`CycleResult` (bindings to
make, victims to evict, devices nominated for preemptors, a typed reason for every job left
waiting). :func:`apply` records a result (assumes the bindings, charges quota, marks victims
terminating); the orchestrator then reports what really happened through the
:class:`Scheduler` events (confirmed, binding failed, finished, evicted, node lost, GPU
unhealthy), which release resources and requeue jobs. Nothing is dropped silently.

Determinism: the same cluster, queue, admitter, placer and ``now`` give the same result
(candidates in the queue's total order, victims in a total order, no wall clock except the
timing figures in :class:`CycleStats`, which are excluded from equality).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import attrs

from kant.admission.preemption import (
    Preemptor,
    VictimUnit,
    find_victims,
    victim_reason,
)
from kant.admission.quota import Admitter, QuotaDecision, admit_quota
from kant.admission.readiness import PoolFacts, readiness
from kant.errors import KantError, UnknownNodeError, UnknownPodError
from kant.model import (
    Binding,
    Job,
    PodId,
    Reason,
    ReasonCode,
    Victim,
    VictimReason,
)
from kant.queueing.policies import RESOURCE_CODES, Gate, PolicyRun
from kant.queueing.queue import Entry, JobPhase, Nomination, Queue
from kant.state import ClusterState, Snapshot, Transaction

PREEMPTION_CODES = frozenset(
    {
        ReasonCode.QUOTA_EXCEEDED,
        ReasonCode.INSUFFICIENT_CAPACITY,
        ReasonCode.NO_FIT,
        ReasonCode.TOPOLOGY,
    }
)
"""Failures that preemption may resolve (``NO_POOL`` never: no victim creates a pool)."""

RESERVATION_PLACEMENTS = 32
"""EASY: at most this many placement attempts to find the head's reserved start."""

LIGHT_CHECKS_PER_SEARCH = 4
"""Preemption: per allowed victim search, how many would-be preemptors may run the cheap
checks that decide whether a search is worth it (``PreemptionPolicy.max_searches_per_cycle``
times this, per cycle)."""


# --------------------------------------------------------------------------- placer contract


class PlacementLike(Protocol):
    @property
    def bindings(self) -> tuple[Binding, ...]: ...

    @property
    def unplaced(self) -> Mapping[PodId, Reason]: ...


class PlacerLike(Protocol):
    """What the cycle needs of :class:`kant.placement.Placer`: place ``pods`` of ``job`` (all
    when None) on ``snap``, applying the bindings to it (into the open transaction)."""

    def place(
        self, job: Job, snap: Snapshot, *, pods: Sequence[PodId] | None = None
    ) -> PlacementLike: ...


# --------------------------------------------------------------------------- results


@attrs.frozen(kw_only=True)
class Reservation:
    """EASY backfill: the head's reserved start and the placement it would get then."""

    job: str
    start: float
    bindings: tuple[Binding, ...]


@attrs.frozen(kw_only=True)
class CycleStats:
    candidates: int
    placed_jobs: int
    placed_pods: int
    placement_attempts: int
    preemption_searches: int
    victims: int
    elapsed_ms: float = attrs.field(eq=False)
    step_ms: Mapping[str, float] = attrs.field(eq=False, factory=dict)


@attrs.frozen(kw_only=True)
class CycleResult:
    """What one cycle decided. Equality ignores timings, so two runs can be compared.

    ``bindings`` in placement order; ``placed`` the jobs that got pods; ``victims`` to evict
    (whole gang jobs, single pods otherwise); ``nominations`` new this cycle;
    ``dropped_nominations`` preemptors whose nomination ends without placement (victims gone,
    still no fit); ``pending`` a reason for every job left with pods to place, in queue order;
    ``reservation`` the EASY head's reservation, if one was made.
    """

    now: float
    bindings: tuple[Binding, ...]
    placed: tuple[str, ...]
    victims: tuple[Victim, ...]
    nominations: tuple[Nomination, ...]
    dropped_nominations: tuple[str, ...]
    pending: Mapping[str, Reason]
    reservation: Reservation | None
    stats: CycleStats = attrs.field(eq=False)


# --------------------------------------------------------------------------- snapshot helpers


@attrs.frozen
class _Alloc:
    slot: int
    gpu_mask: int
    milli: int
    nic_mask: int
    cpu: int
    mem: int

    def take(self, snap: Snapshot) -> None:
        snap.allocate(self.slot, self.gpu_mask, self.milli, self.nic_mask, self.cpu, self.mem)

    def give(self, snap: Snapshot) -> None:
        snap.release(self.slot, self.gpu_mask, self.milli, self.nic_mask, self.cpu, self.mem)


def _slot(snap: Snapshot, node: str) -> int | None:
    try:
        s = snap.slot_of(node)
    except UnknownNodeError:
        return None
    return s if s < len(snap.names) and snap.names[s] == node else None


def _free_part(snap: Snapshot, b: Binding) -> _Alloc | None:
    """The part of ``b`` that is free on the snapshot now (for holds)."""
    s = _slot(snap, b.node)
    if s is None:
        return None
    cols = snap.cols
    row = cols.gpu_free[s]
    mask = 0
    for g in b.gpus:
        if g < row.shape[0] and row[g] >= b.gpu_milli:
            mask |= 1 << g
    nic = 0
    free_nic = int(cols.nic_mask[s])
    for n in b.nics:
        if free_nic >> n & 1:
            nic |= 1 << n
    cpu = min(int(cols.cpu_free[s]), b.cpu_milli)
    mem = min(int(cols.mem_free[s]), b.memory_mib)
    if not (mask or nic or cpu or mem):
        return None
    return _Alloc(s, mask, b.gpu_milli, nic, cpu, mem)


def _release_exact(snap: Snapshot, b: Binding) -> _Alloc | None:
    """Release ``b`` on the snapshot and return exactly what came back (unhealthy devices stay
    unallocatable, so re-allocating the result restores the rows exactly)."""
    s = _slot(snap, b.node)
    if s is None:
        return None
    cols = snap.cols
    before = [int(cols.gpu_free[s, g]) for g in b.gpus]
    nic0, cpu0, mem0 = int(cols.nic_mask[s]), int(cols.cpu_free[s]), int(cols.mem_free[s])
    snap.release_binding(b)
    mask = 0
    for g, v in zip(b.gpus, before, strict=True):
        if int(cols.gpu_free[s, g]) > v:
            mask |= 1 << g
    return _Alloc(
        s,
        mask,
        b.gpu_milli,
        int(cols.nic_mask[s]) & ~nic0,
        int(cols.cpu_free[s]) - cpu0,
        int(cols.mem_free[s]) - mem0,
    )


class _Hold:
    """Devices held out of placement on the snapshot (a nomination or a reservation)."""

    def __init__(self, bindings: Sequence[Binding]) -> None:
        self.bindings = tuple(bindings)
        self.taken: list[_Alloc] = []

    def take(self, snap: Snapshot) -> None:
        self.taken = []
        for b in self.bindings:
            a = _free_part(snap, b)
            if a is not None:
                a.take(snap)
                self.taken.append(a)

    def give_back(self, snap: Snapshot) -> None:
        for a in self.taken:
            a.give(snap)

    def __bool__(self) -> bool:
        return bool(self.taken)


# --------------------------------------------------------------------------- the cycle


@attrs.define(eq=False, slots=True)
class _Ref:
    """A victim unit, unbuilt: its place in victim order, what it holds and where."""

    order: tuple[int, float, int, str, int]  # (priority, -started, -seq, role, index)
    entry: Entry
    pods: tuple[PodId, ...]
    held: int  # GPU milli
    usage: tuple[tuple[str, int], ...]  # (GPU model, milli)
    slots: tuple[tuple[int, int], ...]  # (node slot, GPUs held there) per pod


def schedule_cycle(
    cluster: ClusterState,
    queue: Queue,
    admitter: Admitter,
    placer: PlacerLike,
    now: float,
) -> CycleResult:
    """Run one scheduling cycle at time ``now`` and return what to do; changes nothing.

    Cost: O(changed nodes) for the snapshot, O(1)-ish aggregate reads per waiting job, one
    placement per job that passes quota and readiness (failed shapes are remembered within
    the cycle), and the victim searches of the (few) jobs that preempt."""
    cyc = _Cycle(cluster, queue, admitter, placer, now)
    # 1. Snapshot the cluster; everything below is tentative and rolled back at the end.
    with cyc.open():
        # 2. Hold the devices nominated for earlier preemptors out of placement.
        cyc.hold_nominations()
        # 3. Walk the jobs with pods to place in the global queue order.
        for entry in cyc.candidates:
            # 4. Static quota, readiness, placement; on failure the policy decides, and the
            #    job may preempt.
            cyc.consider(entry)
        cyc.lap("walk")
    # 5. Report.
    return cyc.result()


class _Cycle:
    def __init__(
        self,
        cluster: ClusterState,
        queue: Queue,
        admitter: Admitter,
        placer: PlacerLike,
        now: float,
    ) -> None:
        self.t0 = time.perf_counter()
        self._lap = self.t0
        self.cluster = cluster
        self.queue = queue
        self.admitter = admitter
        self.placer = placer
        self._now = float(now)
        self.ledger = admitter.ledger()
        self.policy = admitter.preemption
        self.candidates: list[Entry] = []
        self.bindings: list[Binding] = []
        self.placed: list[str] = []
        self.placed_entries: list[tuple[Entry, tuple[Binding, ...]]] = []
        self.victims: list[Victim] = []
        self.victim_pods: set[PodId] = set()
        self.nominations: list[Nomination] = []
        self.dropped: list[str] = []
        self.pending: dict[str, Reason] = {}
        self.holds: dict[str, _Hold] = {}
        self.res_hold: _Hold | None = None
        self.reservation: Reservation | None = None
        self.failed_shapes: dict[tuple[Any, ...], Reason] = {}
        self.free_epoch = 0
        self.preemptors = 0
        self.attempts = 0
        self.searches = 0
        self.step_ms: dict[str, float] = {}
        self._unit_refs: list[_Ref] | None = None
        self._unit_cache: dict[tuple[PodId, ...], VictimUnit] = {}
        self._unit_tenants: list[str] = []
        self.hopeless: set[tuple[Any, ...]] = set()
        self.light_checks = 0
        self._pool_names: dict[int, str] = {}

    @property
    def now(self) -> float:
        return self._now

    # ----------------------------------------------------------------- steps

    def lap(self, step: str) -> None:
        """Record the time since the previous lap as ``step`` (for CycleStats.step_ms)."""
        t = time.perf_counter()
        self.step_ms[step] = (t - self._lap) * 1000
        self._lap = t

    @contextmanager
    def open(self) -> Iterator[None]:
        self._lap = time.perf_counter()
        self.snap = self.cluster.snapshot()
        self.facts = PoolFacts(self.snap)
        self.models = self._live_models()
        self.candidates = self.queue.candidates()
        self.run: PolicyRun = self.queue.policy.begin(self)
        self.lap("snapshot")
        with self.snap.transaction():
            yield
        self.lap("rollback")

    def hold_nominations(self) -> None:
        for e in self.candidates:
            if e.nomination is not None:
                h = _Hold(e.nomination.bindings)
                h.take(self.snap)
                self.holds[e.id] = h
        self.lap("holds")

    def consider(self, e: Entry) -> None:
        job = e.job
        # a. Backoff: wait without blocking anyone.
        if self._now < e.backoff_until:
            self.pending[e.id] = e.reason or Reason(
                code=ReasonCode.BACKOFF, message=f"retry at {e.backoff_until:g}"
            )
            return
        # b. Node pools: an unknown GPU model is unresolvable (and blocks nobody).
        role_models, no_pool = self._role_models(job)
        if no_pool is not None:
            self.pending[e.id] = no_pool
            return
        # c. The queueing policy may hold it back.
        gate = self.run.gate(e)
        if gate.skip is not None:
            self.pending[e.id] = gate.skip
            return
        pods = e.remaining()
        # d. Static quota, then dynamic readiness, then placement.
        dec = admit_quota(self.ledger, job, pods, role_models)
        reason = dec.reason if not dec.ok else None
        placed: tuple[Binding, ...] = ()
        if reason is None:
            placed, reason = self._admit_and_place(e, dec, gate)
        if placed:
            self._commit_placed(e, placed)
        if reason is None:
            return
        # e. Not (fully) placed: explain, let the policy react, maybe preempt.
        reason = self._explain(e, reason, gate, dec)
        self.pending[e.id] = reason
        may_backfill = self.run.failed(e, reason)
        if self._may_preempt(e, reason, bool(placed)):
            self._preempt(e, dec, may_backfill)

    def result(self) -> CycleResult:
        elapsed = (time.perf_counter() - self.t0) * 1000
        placed_pods = len(self.bindings)
        return CycleResult(
            now=self._now,
            bindings=tuple(self.bindings),
            placed=tuple(self.placed),
            victims=tuple(self.victims),
            nominations=tuple(self.nominations),
            dropped_nominations=tuple(self.dropped),
            pending=dict(self.pending),
            reservation=self.reservation,
            stats=CycleStats(
                candidates=len(self.candidates),
                placed_jobs=len(self.placed),
                placed_pods=placed_pods,
                placement_attempts=self.attempts,
                preemption_searches=self.searches,
                victims=sum(len(v.pods) for v in self.victims),
                elapsed_ms=elapsed,
                step_ms=dict(self.step_ms),
            ),
        )

    # ----------------------------------------------------------------- admission + placement

    def _live_models(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name in self.cluster.group_names("pool"):
            gid = self.cluster.group_id("pool", name)
            if self.facts.live(gid):
                out[name] = gid
                self._pool_names[gid] = name
        return out

    def _role_models(self, job: Job) -> tuple[dict[str, tuple[str, ...]], Reason | None]:
        out: dict[str, tuple[str, ...]] = {}
        for role in job.roles:
            if role.gpu_models:
                ms = tuple(sorted(m for m in role.gpu_models if m in self.models))
                if not ms and role.resources.total_milli:
                    return out, Reason(
                        code=ReasonCode.NO_POOL,
                        message=(
                            f"role {role.name!r} asks for "
                            f"{'|'.join(sorted(role.gpu_models))}: no such node pool"
                        ),
                    )
            elif role.resources.total_milli:
                ms = tuple(sorted(self.models))
                if not ms:
                    return out, Reason(code=ReasonCode.NO_POOL, message="no GPU node pool")
            else:
                ms = ()
            out[role.name] = ms
        return out, None

    def _restricted(self, job: Job, dec: QuotaDecision) -> Job:
        """The job with each role's GPU models narrowed to those quota admits."""
        roles = []
        changed = False
        for role in job.roles:
            ms = dec.models.get(role.name)
            if ms and frozenset(ms) != role.gpu_models:
                roles.append(attrs.evolve(role, gpu_models=frozenset(ms)))
                changed = True
            else:
                roles.append(role)
        return attrs.evolve(job, roles=tuple(roles)) if changed else job

    def _ready(self, job: Job, dec: QuotaDecision) -> Reason | None:
        counts: dict[str, int] = {}
        for p in dec.pods:
            counts[p.role] = counts.get(p.role, 0) + 1
        pools = {r: tuple(self.models[m] for m in ms) for r, ms in dec.models.items()}
        return readiness(self.facts, job, counts, pools)

    def _shape(self, e: Entry, dec: QuotaDecision, gate: Gate) -> tuple[Any, ...] | None:
        """Placement depends only on this key and the snapshot (while nothing is freed), so a
        failed shape fails again this cycle. None: not cacheable (pods already running)."""
        if e.assigned or e.id in self.holds:
            return None
        counts: dict[str, int] = {}
        for p in dec.pods:
            counts[p.role] = counts.get(p.role, 0) + 1
        job = e.job
        return (
            job.gang,
            job.kind,
            gate.use_reserved,
            self.free_epoch,
            tuple(
                (counts.get(r.name, 0), r.resources, dec.models.get(r.name), r.topology, r.spread)
                for r in job.roles
            ),
        )

    def _admit_and_place(
        self, e: Entry, dec: QuotaDecision, gate: Gate
    ) -> tuple[tuple[Binding, ...], Reason | None]:
        """Readiness and placement of the quota-admitted pods. Returns the bindings made
        (committed to the snapshot) and why the job's remaining pods are not all placed."""
        job = e.job
        own = self.holds.get(e.id)
        use_res = gate.use_reserved and self.res_hold is not None
        shape = self._shape(e, dec, gate)
        if shape is not None and shape in self.failed_shapes:
            return (), self.failed_shapes[shape]
        with self.snap.transaction() as tx:
            # the job's own nominated devices (and, if it ends in time, the EASY reservation)
            # are open to it
            if own is not None:
                own.give_back(self.snap)
            if use_res:
                assert self.res_hold is not None
                self.res_hold.give_back(self.snap)
            reason = self._ready(job, dec)
            if reason is None:
                self.attempts += 1
                res = self.placer.place(self._restricted(job, dec), self.snap, pods=dec.pods)
                if res.bindings and (not job.gang or not res.unplaced):
                    tx.commit()
                    if own is not None:
                        del self.holds[e.id]
                        self.free_epoch += 1
                    if use_res:
                        assert self.res_hold is not None
                        self.res_hold.take(self.snap)
                        self.free_epoch += 1
                    left = len(e.remaining()) - len(res.bindings)
                    if not left:
                        return res.bindings, None
                    return res.bindings, self._first_reason(res.unplaced) or Reason(
                        code=ReasonCode.QUOTA_EXCEEDED,
                        message=f"{left} pods beyond the tenant's quota",
                    )
                reason = self._first_reason(res.unplaced) or Reason(
                    code=ReasonCode.NO_FIT, message="placement found no nodes"
                )
        if shape is not None:
            self.failed_shapes[shape] = reason
        return (), reason

    @staticmethod
    def _first_reason(unplaced: Mapping[PodId, Reason]) -> Reason | None:
        if not unplaced:
            return None
        return unplaced[min(unplaced)]

    def _commit_placed(self, e: Entry, bindings: tuple[Binding, ...]) -> None:
        for b in bindings:
            self.ledger.add(e.job.tenant, self._model_of(b), b.total_milli)
        self.bindings.extend(bindings)
        self.placed.append(e.id)
        self.placed_entries.append((e, bindings))

    def _model_of(self, b: Binding) -> str:
        s = _slot(self.snap, b.node)
        if s is None:
            return ""
        return self._pool_names.get(int(self.snap.cols.pool_id[s]), "")

    def _explain(self, e: Entry, reason: Reason, gate: Gate, dec: QuotaDecision) -> Reason:
        """Turn the raw failure into the reason users should read."""
        nom = e.nomination
        if nom is not None and e.id in self.holds:
            if self._victims_left(nom):
                return Reason(
                    code=ReasonCode.PREEMPTING,
                    message=f"waiting for {len(self._victims_left(nom))} victim pods to go",
                )
            # victims are gone and it still does not fit: the nomination has served its time
            self.holds.pop(e.id).give_back(self.snap)
            self.free_epoch += 1
            self.dropped.append(e.id)
            return reason
        if (
            self.res_hold
            and not gate.use_reserved
            and self.reservation is not None
            and self.reservation.job != e.id
            and reason.code in RESOURCE_CODES
            and dec.ok
        ):
            with self.snap.transaction():
                self.res_hold.give_back(self.snap)
                free = self._ready(e.job, dec) is None
            if free:
                r = self.reservation
                return Reason(
                    code=ReasonCode.RESERVED,
                    message=f"would delay {r.job}, reserved to start at {r.start:g}",
                )
        return reason

    def _victims_left(self, nom: Nomination) -> list[PodId]:
        out = []
        for p in nom.victims:
            ve = self.queue._entries.get(p.job)
            if ve is not None and p in ve.terminating:
                out.append(p)
        return out

    # ----------------------------------------------------------------- preemption

    def _may_preempt(self, e: Entry, reason: Reason, partly_placed: bool) -> bool:
        pol = self.policy
        return (
            pol.enabled
            and reason.code in PREEMPTION_CODES
            and not partly_placed
            and e.id not in self.holds
            and (
                pol.max_preemptors_per_cycle is None
                or self.preemptors < pol.max_preemptors_per_cycle
            )
        )

    def _unit_index(self) -> list[_Ref]:
        """Every running, preemptible eviction unit past the minimum runtime, in victim order
        (lowest priority, then most recently started), as light records with what each holds
        where (built once a cycle, when a job first considers preempting; :meth:`_unit`
        materialises one when a search reaches it). O(running pods)."""
        if self._unit_refs is not None:
            return self._unit_refs
        out: list[_Ref] = []
        min_rt = self.policy.min_runtime
        now = self._now
        bindings = self.cluster.bindings_view()  # by id; avoids a sort of every pod
        slot_of = self.cluster.slot_of
        names = self._pool_names
        pool_of = self.snap.cols.pool_id[: self.snap.num_slots].tolist()
        for e in self.queue.running():
            job = e.job
            if not job.preemptible or (job.gang and e.terminating):
                continue
            key = (len(e.terminating), e.started_at)
            cached = e.victim_groups
            if cached is None or cached[0] != key:
                refs = []
                prio, seq = job.priority, -e.seq
                for started, pods, held, usage, slots in self._groups_of(
                    e, bindings, slot_of, names, pool_of
                ):
                    t0 = e.started_at if started is None else started
                    first = pods[0]
                    refs.append(
                        (
                            t0,
                            _Ref(
                                (prio, -(now if t0 is None else t0), seq, first.role, first.index),
                                e,
                                pods,
                                held,
                                usage,
                                slots,
                            ),
                        )
                    )
                cached = (key, refs)
                if e.started_at is not None:
                    e.victim_groups = cached
            for t0, ref in cached[1]:
                if now - (now if t0 is None else t0) >= min_rt:
                    out.append(ref)
        out.sort(key=lambda r: r.order)
        self._unit_refs = out
        self._unit_tenants = sorted({r.entry.job.tenant for r in out})
        return out

    @staticmethod
    def _groups_of(
        e: Entry,
        bindings: Mapping[PodId, Binding],
        slot_of: Callable[[str], int],
        names: Mapping[int, str],
        pool_of: list[int],
    ) -> list[
        tuple[
            float | None,
            tuple[PodId, ...],
            int,
            tuple[tuple[str, int], ...],
            tuple[tuple[int, int], ...],
        ]
    ]:
        """A job's eviction units with what each holds where: the whole job for a gang (its
        start time read at use), one unit per pod otherwise. Cached on the entry until its
        pods change (:meth:`Entry.touch`), since bindings of running pods never move."""
        live = (
            [p for p in e.assigned if p not in e.terminating] if e.terminating else list(e.assigned)
        )
        if not live:
            return []
        groups: list[tuple[float | None, list[PodId]]] = (
            [(None, live)] if e.job.gang else [(e.assigned[p], [p]) for p in live]
        )
        out = []
        for started, pods in groups:
            usage: dict[str, int] = {}
            slots = []
            for p in pods:
                b = bindings[p]
                slot = slot_of(b.node)
                m = names.get(pool_of[slot], "")
                usage[m] = usage.get(m, 0) + len(b.gpus) * b.gpu_milli
                slots.append((slot, len(b.gpus)))
            out.append(
                (started, tuple(pods), sum(usage.values()), tuple(usage.items()), tuple(slots))
            )
        return out

    def _unit(self, ref: _Ref) -> VictimUnit:
        u = self._unit_cache.get(ref.pods)
        if u is None:
            e = ref.entry
            u = VictimUnit(
                job=e.id,
                tenant=e.job.tenant,
                priority=e.job.priority,
                started_at=-ref.order[1],
                seq=e.seq,
                pods=ref.pods,
                bindings=tuple(self.cluster.binding(p) for p in ref.pods),
                usage=tuple(sorted(ref.usage)),
                pools=frozenset(int(self.snap.cols.pool_id[s]) for s, _ in ref.slots),
            )
            self._unit_cache[ref.pods] = u
        return u

    def _reachable(
        self,
        e: Entry,
        dec: QuotaDecision,
        pools: set[int],
        picked: list[_Ref],
        role_models: dict[str, tuple[str, ...]],
    ) -> list[_Ref]:
        """The candidates worth a search, or [] when it would be hopeless. A light replay of
        the search on the quota ledger and per-node GPU counts, no snapshot work:

        1. walk the candidates in victim order; another tenant's unit counts only while that
           tenant still borrows (as in the search);
        2. at geometrically spaced points, and at the end: does the job fit its quota with
           them gone, and, for whole-GPU pods of ``g`` GPUs, do enough nodes reach ``g`` free
           GPUs to hold its pods? Both: worth a search (stop here). Never: hopeless.

        For a job blocked by capacity only, candidates whose nodes cannot reach ``g`` free
        GPUs even with every candidate gone are dropped first (the search's minimisation
        would spare them anyway). O(candidate pods), a few quota checks."""
        pods = e.remaining()
        gs = {r.resources.gpus for r in e.job.roles if r.resources.total_milli}
        g = gs.pop() if len(gs) == 1 else 0
        free = self.snap.cols.free_gpus
        if g > 1 and dec.ok:
            potential: dict[int, int] = {}
            for r in picked:
                for slot, n in r.slots:
                    potential[slot] = potential.get(slot, int(free[slot])) + n
            picked = [r for r in picked if any(potential[s] >= g for s, _ in r.slots)]

        def room_ok(kept: list[_Ref]) -> bool:
            if g < 1:
                return True
            pot: dict[int, int] = {}
            for r in kept:
                for slot, n in r.slots:
                    pot[slot] = pot.get(slot, int(free[slot])) + n
            room = sum(v // g for v in pot.values())
            for pool in sorted(pools):
                for slot in self.snap.best_fit(pool, g):
                    if room >= len(pods):
                        return True
                    if slot not in pot:
                        room += int(free[slot]) // g
            return room >= len(pods)

        def quota_ok() -> bool:
            if dec.ok:
                return True
            full = admit_quota(led, e.job, pods, role_models)
            return full.ok and len(full.pods) == len(pods)

        led = self.ledger
        tenant = e.job.tenant
        kept: list[_Ref] = []
        mark = led.mark()
        try:
            check_at = 1
            for i, r in enumerate(picked):
                t = r.entry.job.tenant
                if t != tenant and not led.table.unlimited:
                    if not any(led.borrowing(t, m) for m, _ in r.usage):
                        continue
                    for m, milli in r.usage:
                        led.add(t, m, -milli)
                elif not dec.ok:
                    for m, milli in r.usage:
                        led.add(t, m, -milli)
                kept.append(r)
                if len(kept) >= check_at:
                    check_at *= 2
                    if quota_ok() and room_ok(kept):
                        return kept + picked[i + 1 :]
            return kept if kept and quota_ok() and room_ok(kept) else []
        finally:
            led.rollback(mark)

    def _preempt(self, e: Entry, dec: QuotaDecision, may_backfill: bool) -> None:
        pol = self.policy
        if pol.max_searches_per_cycle is not None and self.searches >= pol.max_searches_per_cycle:
            return
        job = e.job
        pods = e.remaining()
        role_models, _ = self._role_models(job)
        models = {m for ms in role_models.values() for m in ms}
        pools = {self.models[m] for m in models}
        pre = Preemptor(
            job=job.id,
            tenant=job.tenant,
            priority=job.priority,
            within_nominal=dec.within_nominal,
            backfill=may_backfill,
            pending_since=e.pending_since,
            order_key=e.key,
        )
        ledger = self.ledger

        def eligible(u: VictimUnit, _chosen: Sequence[VictimUnit]) -> VictimReason | None:
            return victim_reason(pre, u, u_keys[u.job], policy=pol, borrowing=ledger.borrowing)

        # a cheap static pre-filter over the light records (exact checks come per unit)
        refs = self._unit_index()
        reclaim = pol.reclaim and pre.within_nominal
        backfill = pol.backfill and may_backfill
        prio = job.priority if pol.priority else None
        if not (reclaim or backfill) and (prio is None or not refs or refs[0].order[0] >= prio):
            return  # only priority preemption is open, and nobody runs at a lower priority
        # the same kind of request from the same kind of preemptor, with nothing changed since,
        # has the same (hopeless) answer; and the light checks have a budget per cycle
        counts: dict[str, int] = {}
        for p in pods:
            counts[p.role] = counts.get(p.role, 0) + 1
        memo = (
            job.tenant,
            prio,
            reclaim,
            (e.key, e.pending_since) if backfill else None,
            dec.ok,
            job.gang,
            job.kind,
            tuple(
                (counts.get(r.name, 0), r.resources, role_models.get(r.name), r.topology)
                for r in job.roles
            ),
            len(self.bindings),
            len(self.victim_pods),
            self.free_epoch,
        )
        if memo in self.hopeless:
            return
        cap = pol.max_searches_per_cycle
        if cap is not None and self.light_checks >= LIGHT_CHECKS_PER_SEARCH * cap:
            return
        self.light_checks += 1
        exposed = {t: any(ledger.borrowing(t, m) for m in models) for t in self._unit_tenants}
        picked: list[_Ref] = []
        held = 0
        for r in refs:
            ve = r.entry
            if ve is e:
                continue
            other = ve.job.tenant != job.tenant
            if other and not exposed[ve.job.tenant]:
                continue
            rprio = r.order[0]
            if not (
                (other and reclaim)
                or (prio is not None and rprio < prio)
                or (backfill and ve.key > e.key and -r.order[1] >= e.pending_since)
            ):
                if not (reclaim or backfill) and prio is not None and rprio >= prio:
                    break  # sorted by priority: nothing further qualifies
                continue
            if not self.victim_pods.isdisjoint(r.pods):
                continue
            picked.append(r)
            held += r.held
            if pol.max_candidates is not None and len(picked) >= pol.max_candidates:
                break
        # necessary: free GPU milli plus what the candidates hold covers the request
        agg = self.snap.agg["pool"]
        free = sum(int(agg[p, Snapshot.AGG_FREE_MILLI]) for p in pools)
        need = sum(job.role(p.role).resources.total_milli for p in pods)
        if picked and free + held >= need:
            picked = self._reachable(e, dec, pools, picked, role_models)
        else:
            picked = []
        if not picked:
            self.hopeless.add(memo)
            return
        u_keys = {r.entry.id: r.entry.key for r in picked}
        cands = (u for u in map(self._unit, picked) if u.pools & pools)
        self.searches += 1
        t = time.perf_counter()
        found = find_victims(cands, eligible, _WhatIf(self, e, pods, role_models))
        ms = (time.perf_counter() - t) * 1000
        self.step_ms["preemption (in walk)"] = self.step_ms.get("preemption (in walk)", 0.0) + ms
        if found is None:
            self.hopeless.add(memo)
            return
        chosen, bindings = found
        self.preemptors += 1
        victim_pods: list[PodId] = []
        for u, why in chosen:
            self.victims.append(Victim(job=u.job, pods=u.pods, reason=why, preemptor=job.id))
            self.victim_pods.update(u.pods)
            victim_pods.extend(u.pods)
        nom = Nomination(
            job=job.id, bindings=bindings, victims=tuple(victim_pods), created_at=self._now
        )
        self.nominations.append(nom)
        hold = _Hold(bindings)
        hold.take(self.snap)
        self.holds[job.id] = hold
        self.pending[job.id] = Reason(
            code=ReasonCode.PREEMPTING,
            message=f"evicting {len(victim_pods)} pods of {len(chosen)} victims",
        )

    # ----------------------------------------------------------------- EASY reservation

    def is_nominated(self, e: Entry) -> bool:
        return e.id in self.holds

    def reserve(self, e: Entry) -> float | None:
        """The head's earliest start from running jobs' expected ends; holds its devices."""
        if e.id in self.holds:
            return None  # its nomination already holds its devices
        job = e.job
        pods = e.remaining()
        role_models, no_pool = self._role_models(job)
        if no_pool is not None:
            return None
        dec = admit_quota(self.ledger, job, pods, role_models)
        if not dec.ok or len(dec.pods) != len(pods):
            return None
        default = getattr(self.queue.policy, "default_runtime", None)
        ends: list[tuple[float, int, tuple[Binding, ...]]] = []
        for r in self.queue.running():
            est = r.job.runtime_estimate or default
            for p, t in sorted(r.assigned.items()):
                if est is None or p in r.terminating or p in self.victim_pods:
                    # unknown end; or a victim, whose devices go to its preemptor
                    continue
                end = max(self._now, t + est)
                ends.append((end, r.seq, (self.cluster.binding(p),)))
        for pe, bs in self.placed_entries:
            est = pe.job.runtime_estimate or default
            if est is not None:
                ends.append((self._now + est, pe.seq, bs))
        ends.sort(key=lambda x: (x[0], x[1]))
        restricted = self._restricted(job, dec)
        tries = 0
        found: tuple[float, tuple[Binding, ...]] | None = None
        with self.snap.transaction():
            i = 0
            while i < len(ends) and tries < RESERVATION_PLACEMENTS:
                t = ends[i][0]
                while i < len(ends) and ends[i][0] == t:
                    for b in ends[i][2]:
                        if _slot(self.snap, b.node) is not None:
                            self.snap.release_binding(b)
                    i += 1
                if self._ready(job, dec) is not None:
                    continue
                tries += 1
                self.attempts += 1
                with self.snap.transaction():
                    res = self.placer.place(restricted, self.snap, pods=dec.pods)
                    if res.bindings and not res.unplaced:
                        found = (t, tuple(res.bindings))
                if found is not None:
                    break
        if found is None:
            return None
        start, bindings = found
        self.res_hold = _Hold(bindings)
        self.res_hold.take(self.snap)
        self.reservation = Reservation(job=e.id, start=start, bindings=bindings)
        return start


class _WhatIf:
    """The victim search's view of the cycle: snapshot + ledger changes in nested scopes."""

    def __init__(
        self,
        cyc: _Cycle,
        e: Entry,
        pods: tuple[PodId, ...],
        role_models: dict[str, tuple[str, ...]],
    ) -> None:
        self.cyc = cyc
        self.e = e
        self.pods = pods
        self.role_models = role_models
        self.freed: dict[tuple[PodId, ...], list[_Alloc]] = {}
        self.dec: QuotaDecision | None = None
        self.pools = sorted({cyc.models[m] for ms in role_models.values() for m in ms})
        self.need = sum(e.job.role(p.role).resources.total_milli for p in pods)

    @contextmanager
    def scope(self) -> Iterator[_Scope]:
        snap = self.cyc.snap
        mark = self.cyc.ledger.mark()
        with snap.transaction() as tx:
            s = _Scope(tx)
            yield s
            if s.committed:
                tx.commit()
        if not s.committed:
            self.cyc.ledger.rollback(mark)

    def remove(self, unit: VictimUnit) -> None:
        snap = self.cyc.snap
        freed = []
        for b in unit.bindings:
            a = _release_exact(snap, b)
            if a is not None:
                freed.append(a)
        self.freed[unit.pods] = freed
        for m, milli in unit.usage:
            self.cyc.ledger.add(unit.tenant, m, -milli)

    def restore(self, unit: VictimUnit) -> None:
        for a in self.freed.get(unit.pods, ()):
            a.take(self.cyc.snap)
        for m, milli in unit.usage:
            self.cyc.ledger.add(unit.tenant, m, milli)

    def ready(self) -> bool:
        cyc = self.cyc
        agg = cyc.snap.agg["pool"]
        if sum(int(agg[p, Snapshot.AGG_FREE_MILLI]) for p in self.pools) < self.need:
            return False
        dec = admit_quota(cyc.ledger, self.e.job, self.pods, self.role_models)
        if not dec.ok or len(dec.pods) != len(self.pods):
            return False
        self.dec = dec
        return cyc._ready(self.e.job, dec) is None

    def place(self) -> tuple[Binding, ...] | None:
        cyc = self.cyc
        dec = self.dec
        if dec is None:
            return None
        cyc.attempts += 1
        with cyc.snap.transaction():
            res = cyc.placer.place(cyc._restricted(self.e.job, dec), cyc.snap, pods=dec.pods)
            ok = bool(res.bindings) and not res.unplaced
            return tuple(res.bindings) if ok else None


class _Scope:
    def __init__(self, tx: Transaction) -> None:
        self.tx = tx
        self.committed = False

    def commit(self) -> None:
        self.committed = True


# --------------------------------------------------------------------------- apply + events


class EvictionCause(enum.StrEnum):
    GANG_REQUEUED = "gang_requeued"
    """Another pod of the gang was lost or failed: the whole job restarts."""
    JOB_FAILED = "job_failed"
    """The job reached its retry limit."""
    CANCELLED = "cancelled"


@attrs.frozen(kw_only=True)
class Eviction:
    """A pod kant released that the orchestrator must stop (it may still be running)."""

    pod: PodId
    node: str
    cause: EvictionCause


@attrs.frozen(kw_only=True)
class ApplyReport:
    """What :func:`apply` did: jobs bound, jobs whose bindings no longer fitted the cluster
    (left pending, no failure counted), victim pods marked terminating."""

    bound: tuple[str, ...]
    stale: tuple[str, ...]
    terminating: tuple[PodId, ...]


@attrs.frozen(kw_only=True)
class EventReport:
    """What an orchestrator event changed. ``evictions`` are pods the orchestrator must stop."""

    released: tuple[PodId, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    requeued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()


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
        e = queue._entries.get(jid)
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
        ve = queue._entries.get(v.job)
        if ve is None:
            continue
        pods = [p for p in v.pods if p in ve.assigned and p not in ve.terminating]
        queue.mark_terminating(pods, v.preemptor)
        terminating.extend(pods)
    # 3. Nominations made or dropped.
    placed = set(bound)
    for nom in result.nominations:
        pe = queue._entries.get(nom.job)
        if pe is not None and pe.schedulable and nom.job not in placed:
            queue.set_nomination(nom, nom.job)
    for jid in result.dropped_nominations:
        if jid in queue and jid not in placed:
            queue.set_nomination(None, jid)
    # 4. Why the others wait.
    for jid, reason in result.pending.items():
        queue.set_reason(jid, reason)
    return ApplyReport(bound=tuple(bound), stale=tuple(stale), terminating=tuple(terminating))


class Scheduler:
    """A small facade owning the cluster, queue, admitter and placer: submit jobs, run and
    apply cycles, and feed back what the orchestrator observed.

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
    ) -> None:
        self.cluster = cluster
        self.queue = queue if queue is not None else Queue()
        self.admitter = admitter if admitter is not None else Admitter()
        if placer is None:
            from kant.placement import Placer

            self.placer: PlacerLike = Placer()
        else:
            self.placer = placer

    # ----------------------------------------------------------------- jobs and cycles

    def submit(self, job: Job, now: float | None = None) -> None:
        self.queue.submit(job, now)

    def schedule(self, now: float) -> CycleResult:
        return schedule_cycle(self.cluster, self.queue, self.admitter, self.placer, now)

    def apply(self, result: CycleResult, now: float) -> ApplyReport:
        return apply(result, self.cluster, self.queue, self.admitter, now)

    def step(self, now: float) -> CycleResult:
        """Schedule and apply in one call (for simulators and simple loops)."""
        result = self.schedule(now)
        self.apply(result, now)
        return result

    def cancel(self, job_id: str, now: float) -> EventReport:
        """Cancel a job: it is FINISHED (cancelled); the pods it held are released and
        reported for eviction."""
        del now
        held = self.queue.cancel(job_id)
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
        return self._lost_bindings(lost, now, released_already=True)

    def gpu_unhealthy(self, node: str, gpu: int, now: float, *, evict: bool = True) -> EventReport:
        """A GPU failed: nothing new lands on it; with ``evict`` the pods holding it are
        treated as lost (requeued, gangs whole)."""
        self.cluster.set_gpu_health(node, gpu, False)
        if not evict:
            return EventReport()
        hit = [
            self.cluster.binding(p)
            for p in self.cluster.pods_on(node)
            if gpu in self.cluster.binding(p).gpus
        ]
        return self._lost_bindings(hit, now, released_already=False)

    def gpu_healthy(self, node: str, gpu: int) -> None:
        self.cluster.set_gpu_health(node, gpu, True)

    # ----------------------------------------------------------------- internals

    def _held(self, pod: PodId) -> Entry:
        e = self.queue._entries.get(pod.job)
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
            e = self.queue._entries.get(jid)
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
        if e.job.gang and not victims:
            released, ev = self._release_job(e, skip=None, cause=EvictionCause.GANG_REQUEUED)
            self.queue.requeue(e.id, now, failed=False)
            return EventReport(released=(*pods, *released), evictions=ev, requeued=(e.id,))
        self.queue.forget_pods(e.id, pods, now, finished=False)
        if e.job.gang and e.phase is JobPhase.PENDING:
            self.queue.requeue(e.id, now, failed=False)  # forget the finished pods too
        return EventReport(released=tuple(pods), requeued=(e.id,))

    def _check(self) -> None:
        """Every invariant across cluster, queue and admitter (tests call it after each step)."""
        self.cluster._check()
        self.queue._check()
        self.admitter._check()
        for e in self.queue._entries.values():
            for p in e.assigned:
                assert self.cluster.has_pod(p), f"{p} assigned but not bound"
                assert self.admitter.is_charged(p), f"{p} bound but not charged"
            if e.job.gang and e.assigned and not e.terminating:
                want = set(e.job.pods()) - e.finished
                assert set(e.assigned) == want, f"gang {e.id} partly bound"
        for b in self.cluster.pods():
            owner = self.queue._entries.get(b.pod.job)
            if owner is not None:
                assert b.pod in owner.assigned, f"{b.pod} bound but not assigned"


def _merge(reports: Sequence[EventReport]) -> EventReport:
    return EventReport(
        released=tuple(p for r in reports for p in r.released),
        evictions=tuple(x for r in reports for x in r.evictions),
        requeued=tuple(dict.fromkeys(j for r in reports for j in r.requeued)),
        failed=tuple(j for r in reports for j in r.failed),
        finished=tuple(j for r in reports for j in r.finished),
    )
