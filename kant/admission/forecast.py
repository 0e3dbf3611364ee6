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


class EndsMemo:
    """Each running job's bound pods, kept across cycles while its entry is unchanged: in
    pod order, grouped by bind time (a gang's pods are bound together: one group), each
    with its binding. :func:`expected_ends` then costs O(running jobs) a cycle instead of
    sorting every running pod again. Keep one per queue (entries are compared by identity
    and :attr:`~kant.queueing.Entry.version`, which every change of ``assigned`` bumps)."""

    def __init__(self) -> None:
        # seq -> (entry, version, [(bind time, bindings in pod order)], [(time, pod, binding)])
        self.jobs: dict[int, _Bound] = {}

    def bound(self, r: Entry, cluster: ClusterState) -> _Bound:
        """The memo of running entry ``r`` (derived again when its version changed)."""
        got = self.jobs.get(r.seq)
        if got is not None and got[0] is r and got[1] == r.version:
            return got
        pods = sorted(r.assigned.items(), key=lambda kv: (kv[0].job, kv[0].role, kv[0].index))
        flat = tuple((t, p, cluster.binding(p)) for p, t in pods)
        by_t: dict[float, list[Binding]] = {}
        for t, _p, b in flat:
            by_t.setdefault(t, []).append(b)
        got = (r, r.version, tuple((t, tuple(bs)) for t, bs in by_t.items()), flat)
        self.jobs[r.seq] = got
        return got

    def keep_only(self, seqs: set[int]) -> None:
        """Forget the jobs not in ``seqs`` (those no longer running)."""
        if len(self.jobs) > len(seqs):
            self.jobs = {k: v for k, v in self.jobs.items() if k in seqs}


_Bound = tuple[
    Entry,
    int,
    tuple[tuple[float, tuple[Binding, ...]], ...],
    tuple[tuple[float, PodId, Binding], ...],
]


def expected_ends(
    running: Iterable[Entry],
    placed: Iterable[tuple[Entry, tuple[Binding, ...]]],
    *,
    cluster: ClusterState,
    now: float,
    default_runtime: float | None,
    victim_pods: set[PodId],
    memo: EndsMemo | None = None,
) -> list[tuple[float, int, tuple[Binding, ...]]]:
    """(expected end, job seq, bindings freed then), soonest first: the running pods with a
    known estimate, one entry per job and end time (victims excluded: their devices go to
    their preemptor), then the jobs placed earlier in this cycle (ending ``now`` +
    estimate). With ``memo`` (kept across cycles), the same list from remembered pods."""
    ends: list[tuple[float, int, tuple[Binding, ...]]] = []
    seen: set[int] = set()
    for r in running:
        est = r.job.runtime_estimate or default_runtime
        if est is None:
            continue
        if memo is not None:
            seen.add(r.seq)
            _e, _v, groups, flat = memo.bound(r, cluster)
            mine = [(max(now, t + est), r.seq, bs) for t, bs in groups]
            if (
                not r.terminating
                and not (victim_pods and any(p in victim_pods for _t, p, _b in flat))
                and (len(mine) == 1 or len({m[0] for m in mine}) == len(mine))
            ):
                ends.extend(mine)  # no two bind times end together: the groups stand
                continue
            pods = [(p, t) for t, p, _b in flat]
        else:
            pods = sorted(r.assigned.items())
        by_end: dict[float, list[Binding]] = {}  # a gang's pods end together: one entry
        for p, t in pods:
            if p in r.terminating or p in victim_pods:
                continue
            by_end.setdefault(max(now, t + est), []).append(cluster.binding(p))
        ends.extend((end, r.seq, tuple(bs)) for end, bs in by_end.items())
    if memo is not None:
        memo.keep_only(seen)
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
