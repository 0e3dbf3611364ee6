"""When could a waiting job start? A forecast from the running jobs' expected ends.

Used by reservation-based queueing (EASY backfill): release the running jobs' bindings in the
order of their expected ends (start + runtime estimate, else a default, else never) on the
cycle's snapshot, and after each distinct end time try the real placement. The first time it
fits is the job's reserved start. Everything happens in a rolled-back snapshot transaction.
"""

from __future__ import annotations

from collections.abc import Iterable

from kant.admission.holds import slot_or_none
from kant.admission.pools import Pools, restricted
from kant.admission.quota import QuotaLedger, admit_quota
from kant.contracts import PlaceFn, Reservation
from kant.model import Binding, PodId
from kant.queueing import Entry
from kant.state import ClusterState, Snapshot

MAX_PLACEMENTS = 32
"""At most this many placement attempts to find a job's reserved start."""


def expected_ends(
    running: Iterable[Entry],
    placed: Iterable[tuple[Entry, tuple[Binding, ...]]],
    *,
    cluster: ClusterState,
    now: float,
    default_runtime: float | None,
    victim_pods: set[PodId],
) -> list[tuple[float, int, tuple[Binding, ...]]]:
    """(expected end, job seq, bindings freed then), soonest first: the running pods with a
    known estimate, one entry per job and end time (victims excluded: their devices go to
    their preemptor), then the jobs placed earlier in this cycle (ending ``now`` +
    estimate)."""
    ends: list[tuple[float, int, tuple[Binding, ...]]] = []
    for r in running:
        est = r.job.runtime_estimate or default_runtime
        if est is None:
            continue
        by_end: dict[float, list[Binding]] = {}  # a gang's pods end together: one entry
        for p, t in sorted(r.assigned.items()):
            if p in r.terminating or p in victim_pods:
                continue
            by_end.setdefault(max(now, t + est), []).append(cluster.binding(p))
        ends.extend((end, r.seq, tuple(bs)) for end, bs in by_end.items())
    for pe, bs in placed:
        est = pe.job.runtime_estimate or default_runtime
        if est is not None:
            ends.append((now + est, pe.seq, bs))
    ends.sort(key=lambda x: (x[0], x[1]))
    return ends


def forecast(
    e: Entry,
    ends: list[tuple[float, int, tuple[Binding, ...]]],
    *,
    snap: Snapshot,
    ledger: QuotaLedger,
    pools: Pools,
    place: PlaceFn,
) -> Reservation | None:
    """The earliest of ``ends`` at which ``e``'s remaining pods pass quota, readiness and
    placement, with the placement then; None if none does within :data:`MAX_PLACEMENTS`
    attempts. Changes nothing."""
    job = e.job
    pods = e.remaining()
    role_models, no_pool = pools.role_models(job)
    if no_pool is not None:
        return None
    dec = admit_quota(ledger, job, pods, role_models)
    if not dec.ok or len(dec.pods) != len(pods):
        return None
    narrowed = restricted(job, dec)
    tries = 0
    with snap.transaction():
        i = 0
        while i < len(ends) and tries < MAX_PLACEMENTS:
            t = ends[i][0]
            freed: list[Binding] = []
            while i < len(ends) and ends[i][0] == t:
                freed.extend(b for b in ends[i][2] if slot_or_none(snap, b.node) is not None)
                i += 1
            snap.release_bindings(freed)  # one update per node, however many pods
            if pools.ready(job, dec) is not None:
                continue
            tries += 1
            with snap.transaction():
                res = place(narrowed, dec.pods)
                if res.bindings and not res.unplaced:
                    return Reservation(job=e.id, start=t, bindings=tuple(res.bindings))
    return None
