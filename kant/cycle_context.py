"""The cycle as its queueing policy sees it: :class:`PolicyContext`, the implementation of
:class:`kant.contracts.CycleContext`.

A policy run may ask whether a job holds a nomination, forecast a job's earliest start from
the running jobs' expected ends, reserve devices for it, and ask whether a job would fit if
the reservation were free. Nothing here changes the cluster or the queue; a reservation holds
devices on the cycle's snapshot only.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kant.admission import forecast as fc
from kant.admission.holds import Hold, Holds
from kant.admission.pools import Pools
from kant.admission.quota import QuotaDecision, QuotaLedger, admit_quota
from kant.contracts import CandidateView, PlaceFn, PlacementLike, Reservation
from kant.model import Binding, Job, PodId, pods_per_role
from kant.queueing import Entry, Queue
from kant.state import ClusterState, Snapshot


class _Memos:
    """What one queue's cycles keep for forecasts: the running pods by bind time
    (:class:`fc.EndsMemo`) and the last forecast (:class:`fc.KeptForecast`)."""

    def __init__(self) -> None:
        self.ends = fc.EndsMemo()
        self.kept = fc.KeptForecast()


_MEMOS: weakref.WeakKeyDictionary[Queue, _Memos] = weakref.WeakKeyDictionary()


def kept_forecast(queue: Queue) -> fc.KeptForecast:
    """The forecast ``queue``'s cycles keep (its ``hits`` and ``misses`` count reuses)."""
    memo = _MEMOS.get(queue)
    if memo is None:
        memo = _MEMOS[queue] = _Memos()
    return memo.kept


class PolicyContext:
    """What one cycle offers its queueing policy run. The cycle keeps :attr:`placed` (jobs
    placed so far, for forecasts) and :attr:`current` (the job being considered and its quota
    decision) up to date."""

    def __init__(
        self,
        *,
        now: float,
        queue: Queue,
        cluster: ClusterState,
        snap: Snapshot,
        ledger: QuotaLedger,
        pools: Pools,
        holds: Holds,
        place: PlaceFn,
        victim_pods: set[PodId],
        heads_may_preempt: bool = True,
        quota_held: Mapping[str, Sequence[tuple[str, str, int]]] | None = None,
        victim_rules: bool = False,
        counts_placed: bool = False,
    ) -> None:
        self._now = now
        # do user victim rules decide who may be evicted (PreemptionPolicy.rules)? Then no
        # job is known never to preempt another, and held_out_by finds nobody
        self._victim_rules = victim_rules
        # per nominated job, the quota the cycle's ledger charges its tenant for its
        # nomination ((tenant, GPU model, milli) each; the cycle's own record, read only)
        self.quota_held: Mapping[str, Sequence[tuple[str, str, int]]] = (
            {} if quota_held is None else quota_held
        )
        self._heads_may_preempt = heads_may_preempt
        self.queue, self.cluster, self.snap = queue, cluster, snap
        self.ledger, self.pools, self.holds = ledger, pools, holds
        self.place, self.victim_pods = place, victim_pods
        self.placed: list[tuple[Entry, tuple[Binding, ...]]] = []
        # job id -> its bindings placed so far this cycle (placed, by job: note_placed)
        self.placed_of: dict[str, tuple[Binding, ...]] = {}
        # does ``place`` count a job's pods of placed_of as its own (kant's Placer)?
        self._counts_placed = counts_placed
        memo = _MEMOS.get(queue)
        if memo is None:
            memo = _MEMOS[queue] = _Memos()
        self.memo = memo
        self.current: tuple[str, QuotaDecision] | None = None
        # fits_unreserved's answers per readiness key, valid while the snapshot's content
        # stays _unreserved_at (nothing allocated or released since, or only rolled back)
        self._unreserved: dict[tuple[Any, ...], list[int]] = {}
        self._unreserved_at = -1
        self._keys: dict[int, tuple[QuotaDecision, Job, tuple[tuple[Any, ...], int]]] = {}

    @property
    def now(self) -> float:
        """The cycle's time."""
        return self._now

    @property
    def heads_may_preempt(self) -> bool:
        """Do the cycle's preemption rules let a head take back what backfilled past it (or
        user victim rules read whether it may)?"""
        return self._heads_may_preempt

    def is_nominated(self, job: CandidateView) -> bool:
        """Does the job hold devices nominated for it?"""
        return self.holds.is_nominated(job.id)

    def preempted_by(self, job: CandidateView) -> frozenset[str]:
        """The nominated jobs one of whose victims is a pod of ``job``, whose victims are
        all gone and that do not wait out a backoff (they may start on their nomination)."""
        jid, queue, now, out = job.id, self.queue, self._now, []
        for pid in self.holds.nominated:
            e = queue.get(pid)
            if e is None or e.nomination is None or now < e.backoff_until:
                continue
            nom = e.nomination
            victims = nom.victims
            if any(p.job == jid for p in victims) and not any(
                queue.is_terminating(p) for p in victims
            ):
                out.append(pid)
        return frozenset(out)

    def held_out_by(
        self,
        job: CandidateView,
        *,
        tenant: str | None = None,
        besides: Collection[str] = (),
    ) -> frozenset[str]:
        """The nominated jobs that may start now (as for :meth:`preempted_by`), of
        ``tenant`` when given and none of ``besides``, nominated no later than ``job`` was
        last evicted by preemption (it still held its devices when they preempted), that
        ``job`` can never preempt (:meth:`_safe_from`), when ``job`` (being considered, just
        refused, holding no nomination itself) would pass quota, readiness and placement
        with the nominations of all of them free. Empty otherwise, and always with user
        victim rules. See :meth:`kant.contracts.CycleContext.held_out_by`."""
        jid, queue, now, holds = job.id, self.queue, self._now, self.holds
        e = queue.get(jid)
        if e is None or e.evicted_at is None or self._victim_rules or holds.is_nominated(jid):
            return frozenset()
        evicted = e.evicted_at
        out: list[str] = []
        for pid in holds.nominated:
            if pid in besides:
                continue
            pe = queue.get(pid)
            if pe is None or pe.nomination is None or now < pe.backoff_until:
                continue
            nom = pe.nomination
            if (tenant is not None and pe.job.tenant != tenant) or nom.created_at > evicted:
                continue
            if not self._safe_from(e, pe):
                continue
            if not any(queue.is_terminating(p) for p in nom.victims):
                out.append(pid)
        if not out or not self._fits_without(e, out):
            return frozenset()
        return frozenset(out)

    def _safe_from(self, head: Entry, pe: Entry) -> bool:
        """Can ``head`` never preempt the nominated ``pe`` once it runs (with the built-in
        victim rules, Strict FIFO's head taking no backfilled jobs)? Never by priority:
        ``head``'s priority is at most ``pe``'s. Never by reclaim (which takes another
        tenant's units while that tenant borrows on a GPU model the reclaim is for): the two
        are of one tenant, or there are no quotas (no job reclaims then), or ``pe``'s tenant
        borrows on no GPU model with ``pe`` started (the ledger charges its nomination): its
        use is all guaranteed."""
        if head.job.priority > pe.job.priority:
            return False
        tenant = pe.job.tenant
        led = self.ledger
        if head.job.tenant == tenant or led.table.unlimited:
            return True
        return not any(led.borrowing(t, m) for t, m in led.usage if t == tenant)

    def _fits_without(self, e: Entry, nominated: Sequence[str]) -> bool:
        """Would ``e``'s pods still to place pass quota (all of them, for a gang), readiness
        and placement were the nominations of ``nominated`` not held (their devices given
        back, their quota no longer charged)? Everything is undone after. One quota
        decision, one readiness check and one placement attempt at most."""
        job = e.job
        models, no_pool = self.pools.role_models(job)
        pods = self.unplaced(e)
        if no_pool is not None or not pods:
            return False
        led, snap, holds = self.ledger, self.snap, self.holds
        mark = led.mark()
        try:
            for pid in nominated:
                for tenant, model, milli in self.quota_held.get(pid, ()):
                    led.add(tenant, model, -milli)
            dec = admit_quota(led, job, pods, models)
            if not dec.ok or (job.gang and len(dec.pods) != len(pods)):
                return False
            with snap.deferred_index(), snap.transaction():
                for pid in nominated:
                    holds.nominated[pid].give_back(snap)
                if self.pools.ready(job, dec) is not None:
                    return False
                res = self.place(self.pools.restricted(job, dec), dec.pods)
                return bool(res.bindings) and not (job.gang and res.unplaced)
        finally:
            led.rollback(mark)

    def forecast(
        self,
        job: CandidateView,
        *,
        default_runtime: float | None,
        keep: bool = False,
        after: Sequence[Reservation] = (),
        by_pod: bool = False,
    ) -> Reservation | None:
        """The job's earliest start and placement (:func:`kant.admission.forecast.forecast`);
        None for a nominated job (its nomination already holds its devices). With ``keep``,
        the queue's last forecast when it must give the same answer
        (:class:`kant.admission.forecast.KeptForecast`), and this one kept. ``after``: the
        reservations made before it this cycle, each taking its devices from its start to
        its job's expected end (its estimate, else ``default_runtime``, else never), each
        group of its pods booked over time (:attr:`Reservation.starts`) from its own start.
        ``by_pod``: a pod-level job is booked pod by pod over time."""
        if self.is_nominated(job):
            return None
        running = self.queue.running()
        ends = fc.expected_ends(
            running, self.placed, cluster=self.cluster, now=self._now,
            default_runtime=default_runtime, victim_pods=self.victim_pods, memo=self.memo.ends,
        )  # fmt: skip
        occupancy = self._occupancy(running, ends, default_runtime) if keep else None
        booked = [
            fc.Booking(t, t + self._runtime(r.job, default_runtime), bs)
            for r in after
            for t, bs in r.pieces()
        ]
        e = self.queue.entry(job.id)
        return fc.forecast(
            e, ends, snap=self.snap, ledger=self.ledger,
            pools=self.pools, place=self.place, kept=self.memo.kept if keep else None,
            occupancy=occupancy, booked=booked, held=self.holds.reserved,
            runtime=job.job.runtime_estimate or default_runtime, pods=self.unplaced(e),
            by_pod=by_pod, place_own=self._place_own if self._counts_placed else None,
        )  # fmt: skip

    def _place_own(
        self, job: Job, pods: Sequence[PodId], own: tuple[Binding, ...]
    ) -> PlacementLike:
        """``place``, with ``own`` (pods of the job on the snapshot: a forecast's earlier
        bookings of it) counted as its pods placed earlier in the cycle (:attr:`placed_of`)."""
        jid = job.id
        before = self.placed_of.get(jid)
        self.placed_of[jid] = own if before is None else before + own
        try:
            return self.place(job, pods)
        finally:
            if before is None:
                del self.placed_of[jid]
            else:
                self.placed_of[jid] = before

    def note_placed(self, e: Entry, bindings: tuple[Binding, ...]) -> None:
        """Record ``bindings`` of ``e``, just placed on the snapshot (:attr:`placed`,
        :attr:`placed_of`)."""
        self.placed.append((e, bindings))
        before = self.placed_of.get(e.job.id)
        self.placed_of[e.job.id] = bindings if before is None else before + bindings

    def unplaced(self, e: Entry) -> tuple[PodId, ...]:
        """The pods of ``e`` still to place: :meth:`Entry.remaining` without those placed
        earlier in this cycle (:attr:`placed_of`: the queue learns of them only when the
        result is applied, and the ledger and the snapshot already hold them). A pod-level
        job placed in part is forecast, and waits for quota, for the rest only. O(pods)."""
        pods = e.remaining()
        got = self.placed_of.get(e.job.id)
        if not got:
            return pods
        done = {b.pod for b in got}
        return tuple(p for p in pods if p not in done)

    def _runtime(self, job_id: str, default_runtime: float | None) -> float:
        """A waiting job's expected runtime: its estimate, else the default, else inf."""
        est = self.queue.entry(job_id).job.runtime_estimate or default_runtime
        return math.inf if est is None else est

    def _occupancy(
        self, running: list[Entry], ends: list[fc.Item], default_runtime: float | None
    ) -> fc.Occupancy | None:
        """What holds devices on the snapshot now, when only the running jobs and the jobs
        placed this cycle do (else None: no forecast is reused or kept)."""
        h = self.holds
        if h.nominated or h.reserved is not None or self.victim_pods:
            return None
        never: list[fc.Item] = []
        bound = 0
        for r in running:
            if r.terminating:
                return None
            bound += len(r.assigned)
            if (r.job.runtime_estimate or default_runtime) is None:
                groups = self.memo.ends.bound(r, self.cluster)[2]
                never.append((math.inf, r.seq, tuple(b for _t, bs in groups for b in bs)))
        if bound != self.cluster.num_pods:
            return None  # some bound pod belongs to no running job
        for pe, bs in self.placed:
            if (pe.job.runtime_estimate or default_runtime) is None:
                never.append((math.inf, pe.seq, bs))
        never.sort(key=lambda x: x[1])
        c = self.cluster
        static = (c, c.membership_version, c.health_version, default_runtime)
        return fc.Occupancy(now=self._now, static=static, items=ends + never)

    def quota_start(self, job: CandidateView, *, default_runtime: float | None) -> float | None:
        """The earliest expected end (:func:`kant.admission.forecast.expected_ends`) after
        which quota admits the job's pods still to place (:meth:`unplaced`; every tenant's
        ends count: shared tenants lend to each other); ``now`` if it already does; None if no
        known end does. O(running pods x roles x models); changes nothing."""
        e = self.queue.entry(job.id)
        models, no_pool = self.pools.role_models(e.job)
        if no_pool is not None:
            return None
        pods = self.unplaced(e)
        led = self.ledger

        def admitted() -> bool:
            dec = admit_quota(led, e.job, pods, models)
            return dec.ok and (not e.job.gang or len(dec.pods) == len(pods))

        if admitted():
            return self._now
        ends = fc.expected_ends(
            self.queue.running(), self.placed, cluster=self.cluster, now=self._now,
            default_runtime=default_runtime, victim_pods=self.victim_pods, memo=self.memo.ends,
        )  # fmt: skip
        mark = led.mark()
        try:
            for t, _seq, bs in ends:
                for b in bs:
                    owner = self.queue.get(b.pod.job)
                    if owner is not None:
                        led.add(owner.job.tenant, self.pools.model_of(b), -b.total_milli)
                if admitted():
                    return t
            return None
        finally:
            led.rollback(mark)

    def reserve(self, reservation: Reservation) -> None:
        """Hold the reservation's free devices for the rest of the cycle (from its start,
        each group of pods booked over time from its own:
        :meth:`kant.admission.holds.Holds.reserve`)."""
        for t, bs in reservation.pieces():
            self.holds.reserve(bs, t)

    def fits_unreserved(self, job: CandidateView) -> bool:
        """Would the job being considered pass readiness with the reservation free? (False
        when nothing is reserved or the job did not pass quota.)"""
        cur, held = self.current, self.holds.reserved
        if not held or cur is None or cur[0] != job.id or not cur[1].ok:
            return False
        dec = cur[1]
        if self._unreserved_at != self.snap.content_version:
            self._unreserved.clear()  # the snapshot changed since the answers were found
            self._unreserved_at = self.snap.content_version
        key, n = self._ready_key(job.job, dec)
        known = self._unreserved.get(key)
        if known is None:
            known = self._unreserved[key] = [0, _NEVER]  # most pods ready, fewest not ready
        if n <= known[0]:
            return True
        if n >= known[1]:
            return False
        if self._too_few_gpus(job.job, dec, held):
            known[1] = n
            return False
        with self.snap.deferred_index(), self.snap.transaction():
            held.give_back(self.snap)
            ok = self.pools.ready(job.job, dec) is None
        if ok:
            known[0] = n
        else:
            known[1] = n
        return ok

    def _too_few_gpus(self, job: Job, dec: QuotaDecision, held: Hold) -> bool:
        """True when the job cannot pass readiness even with ``held`` given back: a gang
        role (a pod-level job: every role) needs more whole GPUs than its pools have free
        plus every GPU ``held`` holds there (giving back frees at most those). False means
        "not known": readiness decides. O(roles x pools + held allocations), nothing
        changed."""
        counts = pods_per_role(job, dec.pods)
        snap = self.snap
        pool_of = snap.cols.pool_id
        back: dict[int, int] = {}  # pool id -> GPUs the hold holds there
        for a in held.taken:
            if a.gpu_mask:
                pid = int(pool_of[a.slot])
                back[pid] = back.get(pid, 0) + a.gpu_mask.bit_count()
        agg = snap.agg["pool"]
        models = self.pools.models
        asked = False
        for role in job.roles:
            n = counts.get(role.name, 0)
            if not n:
                continue
            asked = True
            g = role.resources.gpus
            if not g:
                return False  # CPU only or a GPU share: not bounded here
            pools = [models[m] for m in dec.models.get(role.name, ())]
            if not pools:
                return False
            most = sum(int(agg[p, snap.AGG_FREE_GPUS]) + back.get(p, 0) for p in pools)
            short = g * (n if job.gang else 1) > most
            if job.gang and short:
                return True
            if not job.gang and not short:
                return False
        return asked and not job.gang

    def _ready_key(self, job: Job, dec: QuotaDecision) -> tuple[tuple[Any, ...], int]:
        """What :meth:`kant.admission.pools.Pools.ready` reads besides the snapshot, as a key
        and a pod count. Readiness is monotone in the count of a one-role gang that needs no
        topology (more pods need more free devices and nodes): its count is left out of the
        key, so one answer settles the smaller (ready) or larger (not ready) gangs of its
        shape. Otherwise the count is in the key (and returned as 1)."""
        got = self._keys.get(id(dec))
        if got is not None and got[0] is dec and got[1] is job:
            return got[2]
        counts = pods_per_role(job, dec.pods)
        roles = job.roles
        if job.gang and len(roles) == 1 and not (roles[0].topology and roles[0].topology.required):
            r = roles[0]
            out: tuple[tuple[Any, ...], int] = (
                (True, r.resources, r.topology, dec.models.get(r.name)),
                counts.get(r.name, 0),
            )
        else:
            # a pod-level job is ready when one pod of some role is: only "any pods" counts
            rk = tuple(
                (
                    r.name,
                    counts.get(r.name, 0) if job.gang else min(1, counts.get(r.name, 0)),
                    r.resources,
                    r.topology,
                    dec.models.get(r.name),
                )
                for r in roles
            )
            out = ((job.gang, rk), 1)
        self._keys[id(dec)] = (dec, job, out)
        return out


_NEVER = 1 << 62
