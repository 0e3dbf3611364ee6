"""The cycle as its queueing policy sees it: :class:`PolicyContext`, the implementation of
:class:`kant.contracts.CycleContext`.

A policy run may ask whether a job holds a nomination, forecast a job's earliest start from
the running jobs' expected ends, reserve devices for it, and ask whether a job would fit if
the reservation were free. Nothing here changes the cluster or the queue; a reservation holds
devices on the cycle's snapshot only.
"""

from __future__ import annotations

import weakref
from typing import Any

from kant.admission import forecast as fc
from kant.admission.holds import Holds
from kant.admission.pools import Pools
from kant.admission.quota import QuotaDecision, QuotaLedger, admit_quota
from kant.contracts import CandidateView, PlaceFn, Reservation
from kant.model import Binding, Job, PodId
from kant.queueing import Entry, Queue
from kant.state import ClusterState, Snapshot

_ENDS: weakref.WeakKeyDictionary[Queue, fc.EndsMemo] = weakref.WeakKeyDictionary()
"""Each queue's running pods by expected end, kept across cycles (:class:`fc.EndsMemo`)."""


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
    ) -> None:
        self._now = now
        self.queue, self.cluster, self.snap = queue, cluster, snap
        self.ledger, self.pools, self.holds = ledger, pools, holds
        self.place, self.victim_pods = place, victim_pods
        self.placed: list[tuple[Entry, tuple[Binding, ...]]] = []
        self.ends_memo = _ENDS.setdefault(queue, fc.EndsMemo())
        self.current: tuple[str, QuotaDecision] | None = None
        # fits_unreserved's answers per readiness key, valid while the snapshot's change log
        # stays at _unreserved_at (nothing allocated, released or rolled back since)
        self._unreserved: dict[tuple[Any, ...], bool] = {}
        self._unreserved_at = -1

    @property
    def now(self) -> float:
        """The cycle's time."""
        return self._now

    def is_nominated(self, job: CandidateView) -> bool:
        """Does the job hold devices nominated for it?"""
        return self.holds.is_nominated(job.id)

    def forecast(self, job: CandidateView, *, default_runtime: float | None) -> Reservation | None:
        """The job's earliest start and placement (:func:`kant.admission.forecast.forecast`);
        None for a nominated job (its nomination already holds its devices)."""
        if self.is_nominated(job):
            return None
        ends = fc.expected_ends(
            self.queue.running(), self.placed, cluster=self.cluster, now=self._now,
            default_runtime=default_runtime, victim_pods=self.victim_pods, memo=self.ends_memo,
        )  # fmt: skip
        return fc.forecast(
            self.queue.entry(job.id), ends, snap=self.snap, ledger=self.ledger,
            pools=self.pools, place=self.place,
        )  # fmt: skip

    def quota_start(self, job: CandidateView, *, default_runtime: float | None) -> float | None:
        """The earliest expected end (:func:`kant.admission.forecast.expected_ends`) after
        which quota admits the job's remaining pods (every tenant's ends count: shared tenants
        lend to each other); ``now`` if it already does; None if no known end does. O(running
        pods x roles x models); changes nothing."""
        e = self.queue.entry(job.id)
        models, no_pool = self.pools.role_models(e.job)
        if no_pool is not None:
            return None
        pods = e.remaining()
        led = self.ledger

        def admitted() -> bool:
            dec = admit_quota(led, e.job, pods, models)
            return dec.ok and (not e.job.gang or len(dec.pods) == len(pods))

        if admitted():
            return self._now
        ends = fc.expected_ends(
            self.queue.running(), self.placed, cluster=self.cluster, now=self._now,
            default_runtime=default_runtime, victim_pods=self.victim_pods, memo=self.ends_memo,
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
        """Hold the reservation's free devices for the rest of the cycle."""
        self.holds.reserve(reservation.bindings)

    def fits_unreserved(self, job: CandidateView) -> bool:
        """Would the job being considered pass readiness with the reservation free? (False
        when nothing is reserved or the job did not pass quota.)"""
        cur, held = self.current, self.holds.reserved
        if not held or cur is None or cur[0] != job.id or not cur[1].ok:
            return False
        dec = cur[1]
        if self._unreserved_at != self.snap.log_position:
            self._unreserved.clear()  # the snapshot changed since the answers were found
        key = _ready_key(job.job, dec)
        got = self._unreserved.get(key)
        if got is None:
            with self.snap.transaction():
                held.give_back(self.snap)
                got = self._unreserved[key] = self.pools.ready(job.job, dec) is None
            self._unreserved_at = self.snap.log_position  # giving back and rolling back
        return got


def _ready_key(job: Job, dec: QuotaDecision) -> tuple[Any, ...]:
    """Everything :meth:`kant.admission.pools.Pools.ready` reads besides the snapshot."""
    counts: dict[str, int] = {}
    for p in dec.pods:
        counts[p.role] = counts.get(p.role, 0) + 1
    return (
        job.gang,
        tuple(
            (r.name, counts.get(r.name, 0), r.resources, r.topology, dec.models.get(r.name))
            for r in job.roles
        ),
    )
