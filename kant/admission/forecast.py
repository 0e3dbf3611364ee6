"""When could a waiting job start? A forecast from the running jobs' expected ends.

Used by reservation-based queueing (EASY backfill): release the running jobs' bindings in the
order of their expected ends (start + runtime estimate, else a default, else never) on the
cycle's snapshot, and after each distinct end time try the real placement. The first time it
fits is the job's reserved start. Everything happens in a rolled-back snapshot transaction.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from kant.admission.holds import Hold, slot_or_none
from kant.admission.pools import Pools
from kant.admission.quota import (
    QuotaDecision,
    QuotaLedger,
    admit_quota,
    fits_to_try,
    narrowed_fits,
    one_model_each,
)
from kant.contracts import PlaceFn, PlacementLike, Reservation
from kant.model import Binding, Job, PodId, placed_by_own_pods
from kant.queueing import Entry
from kant.state import ClusterState, Snapshot

MAX_PLACEMENTS = 32
"""At most this many placement attempts to find a job's reserved start."""

PlaceOwnFn = Callable[[Job, Sequence[PodId], tuple[Binding, ...]], PlacementLike]
"""A :data:`~kant.contracts.PlaceFn` that also counts the given bindings (pods of the job
placed on the snapshot) as the job's own pods, as the cycle counts its pods placed earlier in
it: for ``max_per_node`` and the domain of a pod-level role's required topology wish."""


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


Item = tuple[float, int, tuple[Binding, ...]]
"""(time its devices are free, job seq, bindings): an entry of :func:`expected_ends`, or with
time ``inf`` a running job with no known end."""


@attrs.frozen(kw_only=True, eq=False)
class Occupancy:
    """Everything that holds devices on the snapshot when a forecast starts, for
    :class:`KeptForecast`: the expected ends, and the running jobs that never end (as
    items at ``inf``). Only built when nothing else does (no nomination, reservation,
    victim or terminating pod, and every bound pod belongs to a running job)."""

    now: float
    static: tuple[Any, ...]  # the cluster, its membership and health versions, the default
    items: list[Item]  # soonest first, then the never-ending ones by seq


@attrs.define(eq=False)
class _Kept:
    static: tuple[Any, ...]
    head: Entry
    version: int
    pods: tuple[PodId, ...]
    dec: tuple[Any, ...]
    now: float
    first: float  # the earliest expected end then: the first state tried
    floor: float  # states from this time on were tried: ``first``, or -inf when the state
    # before any end (everything in ``items`` holding its devices) was found to fail readiness
    items: list[Item]
    result: Reservation | None
    exhausted: bool  # every end time was tried (not cut by MAX_PLACEMENTS)
    clean: bool  # it placed at the first state readiness passed (every earlier one failed it)


class KeptForecast:
    """The last forecast of one queue, reused while it must give the same answer (Slurm's
    backfill and Maui likewise keep a reservation until the running set or the head
    changes). Kept per queue across cycles; ``hits`` and ``misses`` count its use, ``grown``
    the hits where jobs started since (below).

    Why a reuse is exact: on the snapshot a forecast starts from, the devices free at time
    ``t`` are the cluster's minus those of every item whose time is after ``t``. If the
    head, its quota decision and the cluster's nodes and health are unchanged, and the
    items after the new ``now`` are the same as then, every state the new forecast would
    try (the end times from ``now`` up to the kept start) is one the kept forecast tried
    and rejected, except the last, where it placed: the same start and placement (or, when
    every end was tried, the same None). A state at ``now`` made of items the kept forecast
    released before its first end time was never tried: then it is computed afresh.

    It is also reused when jobs that started since hold devices only until the kept start
    (the items after ``now`` are the kept ones plus items ending by then: a job backfilled on
    the reserved devices), provided the kept forecast placed at the first state that passed
    readiness. Every state the new forecast tries before the start then holds at least what
    the kept state of that time held (readiness, :func:`kant.admission.readiness.readiness`,
    only compares free amounts with what is needed, so it fails there again, and no
    placement is attempted), and the state at the start is the kept one: the same start
    and placement."""

    def __init__(self) -> None:
        self.kept: _Kept | None = None
        self.hits = 0
        self.misses = 0
        # hits (counted in ``hits`` too) where jobs that started since end by the start
        self.grown = 0

    def lookup(
        self, e: Entry, pods: tuple[PodId, ...], dec: tuple[Any, ...], occ: Occupancy
    ) -> tuple[bool, Reservation | None]:
        """(True, the kept answer) when it holds for ``e`` on ``occ``, else (False, None)."""
        k = self.kept
        now = occ.now
        if (
            k is None
            or k.head is not e
            or k.version != e.version
            or k.static != occ.static
            or k.pods != pods
            or k.dec != dec
            or now < k.now
        ):
            self.misses += 1
            return False, None
        r = k.result
        if r is not None and r.start < now:
            self.misses += 1  # its start passed and it still waits: the ends were wrong
            return False, None
        if r is None and not k.exhausted:
            self.misses += 1
            return False, None
        items = occ.items
        if (r is None or r.start > now) and items and items[0][0] <= now and k.floor > now:
            self.misses += 1  # a state at now the kept forecast never tried
            return False, None
        after = _after(items, now)
        kept_after = _after(k.items, now)
        if after != kept_after:
            if not _grown(k, items, after, kept_after, now):
                self.misses += 1
                return False, None
            self.grown += 1
        self.hits += 1
        return True, r

    def forget(self) -> None:
        """Keep no forecast: the next lookup computes one afresh."""
        self.kept = None

    def store(
        self,
        e: Entry,
        pods: tuple[PodId, ...],
        dec: tuple[Any, ...],
        occ: Occupancy,
        result: Reservation | None,
        exhausted: bool,
        *,
        clean: bool = False,
        before_failed: bool = False,
    ) -> None:
        """Keep this forecast (the previous one is forgotten). ``clean``: it placed at the
        first state that passed readiness; ``before_failed``: the state before any end
        failed readiness."""
        first = occ.items[0][0] if occ.items else math.inf
        floor = -math.inf if before_failed else first
        self.kept = _Kept(
            occ.static, e, e.version, pods, dec, occ.now, first, floor, occ.items, result,
            exhausted, clean,
        )  # fmt: skip


def _grown(
    k: _Kept, items: list[Item], after: list[Item], kept_after: list[Item], now: float
) -> bool:
    """Does the kept forecast hold although the items after ``now`` changed? Only when they
    are the kept ones plus items that end by the kept start (so the state at the start is the
    kept one), every state the new forecast tries before the start is at least as full as a
    kept state that failed readiness (a time from the kept first end on, and the kept
    forecast placed at the first state readiness passed), and the start is after ``now``."""
    r = k.result
    if r is None or not k.clean or r.start <= now or len(after) < len(kept_after):
        return False
    start = r.start
    if items and k.floor > items[0][0] < start:
        return False  # a state the kept forecast never tried
    i, n = 0, len(kept_after)
    for it in after:
        if i < n and it == kept_after[i]:
            i += 1
        elif it[0] > start:
            return False  # an item the kept forecast did not have, held past the start
    return i == n


def _after(items: list[Item], t: float) -> list[Item]:
    """The items whose devices are still held after time ``t``."""
    i = bisect.bisect_right(items, t, key=lambda x: x[0])
    return items[i:]


@attrs.frozen
class Booking:
    """An earlier reservation as a conservative backfill sees it: its devices are taken from
    its ``start`` to its ``end`` (start plus its job's estimate; ``inf`` when unknown)."""

    start: float
    end: float
    bindings: tuple[Binding, ...]


class _Booked:
    """The bookings held on the snapshot at each state a forecast tries: a booking is held
    at time ``t`` for a job running until ``until`` when their times overlap (it starts
    before ``until`` and ends after ``t``).

    Kept lazily, as placement needs it: a booking whose time is over is given back at once
    (the state then has what it should have free, or more); one to hold is taken, and one
    held whose nodes freed devices since it was taken is taken again (devices busy before may
    be free now), only in :meth:`sync`, when readiness passed on that state (which has at
    least as much free: readiness compares free amounts with what is needed, so a state it
    fails on fails with the bookings held too)."""

    def __init__(self, snap: Snapshot, booked: Sequence[Booking]) -> None:
        self.snap = snap
        self.booked = booked
        self.nodes = [frozenset(b.node for b in k.bindings) for k in booked]
        self.held: dict[int, Hold] = {}
        self.want: list[bool] = [False] * len(booked)
        self.freed: set[str] = set()  # nodes whose devices freed since the last sync

    def at(self, t: float, until: float, freed: Iterable[Binding]) -> None:
        """Move to the state at ``t`` for a job running until ``until`` (``freed``: the
        bindings released since the last state): give back the bookings over by then."""
        self.freed.update(b.node for b in freed)
        held = self.held
        want = self.want = [k.start < until and k.end > t for k in self.booked]
        for i in [i for i in held if not want[i]]:
            held.pop(i).give_back(self.snap)
            self.freed |= self.nodes[i]

    def sync(self) -> bool:
        """Hold every booking of the state exactly; True when that changed the snapshot."""
        snap, held, freed = self.snap, self.held, self.freed
        changed = False
        for i, w in enumerate(self.want):
            if not w:
                continue
            h = held.get(i)
            if h is None:
                h = held[i] = Hold(self.booked[i].bindings)
                h.take(snap)
                changed = changed or bool(h)
            else:
                on = freed.intersection(self.nodes[i])
                if on:
                    h.retake(snap, on)
                    changed = True
        freed.clear()
        return changed


def _allowed_any(snap: Snapshot, job: Job) -> np.ndarray | None:
    """Per slot, whether some role of ``job`` may use the node by its labels and taints
    (:meth:`ClusterState.allowed_slots`), or None when a role of it may use any node."""
    out: np.ndarray | None = None
    for role in job.roles:
        allowed = snap.state.allowed_slots(role)
        if allowed is None:
            return None
        out = allowed if out is None else out | allowed
    return out


def forecast(
    e: Entry,
    ends: list[tuple[float, int, tuple[Binding, ...]]],
    *,
    snap: Snapshot,
    ledger: QuotaLedger,
    pools: Pools,
    place: PlaceFn,
    kept: KeptForecast | None = None,
    occupancy: Occupancy | None = None,
    booked: Sequence[Booking] = (),
    held: Hold | None = None,
    runtime: float | None = None,
    pods: tuple[PodId, ...] | None = None,
    by_pod: bool = False,
    place_own: PlaceOwnFn | None = None,
) -> Reservation | None:
    """The earliest of ``ends`` at which ``e``'s pods still to place (``pods``, default
    ``e.remaining()``; a cycle passes them without those it placed already) pass quota,
    readiness and placement, with the placement then; None if none does within
    :data:`MAX_PLACEMENTS` attempts, or when no pod is left. A pod-level job is forecast for
    the pods quota admits now (a cycle places no more), and when no state tried places them
    all (more than the cluster holds at once), for the most pods a state placed, at the
    earliest state placing that many (never kept). Changes nothing. With ``kept``
    and ``occupancy`` (what holds devices now), the kept forecast when it must give the same
    answer (:class:`KeptForecast`), and this one kept for next time.

    With ``booked`` (a conservative backfill's earlier reservations), each state at time
    ``t`` also holds the bookings that overlap the job's run from ``t`` to ``t`` plus
    ``runtime`` (its estimate; None: it never ends), and a booking's end is a state tried
    too; ``held`` (what the cycle holds of those bookings now) is given back first.

    With ``by_pod`` (conservative backfill), a pod-level job is booked pod by pod, as the
    cycles to come start it: at each state, the pods still to book that then place are
    booked from then (:attr:`Reservation.starts`) and held until their own expected end,
    which is a state too; the rest wait for a later state. The reservation is every pod
    booked so (its ``start`` the earliest; ``starts`` empty when they all start then), or
    those booked within :data:`MAX_PLACEMENTS` attempts; never kept. Its pods booked
    earlier and still running at a state count as its own there (``place_own``), for a role
    whose pods go where its other pods are (``max_per_node``, a required topology wish:
    :func:`~kant.model.placed_by_own_pods`); without ``place_own`` such a job is booked all
    at once, as without ``by_pod``."""
    job = e.job
    if pods is None:
        pods = e.remaining()
    if not pods:
        return None
    role_models, no_pool = pools.role_models(job)
    if no_pool is not None:
        return None
    dec = admit_quota(ledger, job, pods, role_models)
    if not dec.ok or (job.gang and len(dec.pods) != len(pods)):
        return None  # (a pod-level job is reserved the pods quota admits, as a cycle places)
    # a gang decided by one GPU model per role: at a state readiness refuses its decision,
    # the first other decision quota allows that readiness passes there (as a cycle then
    # would). The ledger is fixed during the forecast: those decisions are found once, and
    # the answer depends on them, not on the rest of the ledger (the kept forecast's key).
    # A gang with a role on several models whose placement fails at a state is placed
    # again there with one model per role (narrowed_fits, the list a cycle then places
    # from): it follows from the fits, whether the gang is within nominal and the
    # tenant's nominal quota left on its models (in the key too)
    multi = one_model_each(job, pods, role_models)
    if not ledger.table.unlimited and multi:
        fits = fits_to_try(ledger, job, pods, role_models, dec)
        left = tuple(
            (m, ledger.table.terms(job.tenant, m)[1] - ledger.used(job.tenant, m))
            for m in sorted({m for ms in role_models.values() for m in ms})
        )
    else:
        fits = (dec,)
        left = ()
    dec_key = (
        tuple(dec.pods),
        dec.within_nominal,
        left,
        *((tuple(sorted(f.models.items())), tuple(sorted(f.nominal_models.items()))) for f in fits),
    )
    narrowings: list[tuple[QuotaDecision, ...]] = []  # (found once, at the first need)

    def narrowed() -> tuple[QuotaDecision, ...]:
        if not narrowings:
            narrowings.append(narrowed_fits(ledger, job, pods, role_models, fits))
        return narrowings[0]

    def ready() -> QuotaDecision | None:
        """The first of ``fits`` (``dec`` first) readiness passes on the state now, or
        None. O(fits x readiness)."""
        for f in fits:
            if pools.ready(job, f) is None:
                return f
        return None

    # a pod-level job booked pod by pod: the groups of pods booked so far, each with its start
    over_time = by_pod and not job.gang and (place_own is not None or not placed_by_own_pods(job))
    own_counts = over_time and place_own is not None and placed_by_own_pods(job)
    pieces: list[tuple[float, tuple[Binding, ...]]] = []
    if over_time:
        kept = None
    if kept is not None and occupancy is not None:
        hit, r = kept.lookup(e, pods, dec_key, occupancy)
        if hit:
            return r
    restricted = pools.restricted(job, dec)
    tries = 0
    found: Reservation | None = None
    # a pod-level job when no state places every pod: the most pods a state placed, at the
    # earliest state placing that many (what a cycle then starts)
    most: Reservation | None = None
    clean = False  # placed at the first state that passed readiness
    keep = kept is not None and occupancy is not None
    # does the state before any end (the snapshot now) fail readiness? (for KeptForecast)
    before_failed = keep and ready() is None
    book: _Booked | None = None
    length = math.inf if runtime is None else runtime
    if booked:
        ends = sorted([*ends, *((k.end, -1, ()) for k in booked if k.end < math.inf)],
                      key=lambda x: (x[0], x[1]))  # fmt: skip
    elif over_time:
        ends = list(ends)  # (its own pods' ends are added)
    # every release and placement below is undone at the end: the sorted index follows
    # them only where read
    with snap.deferred_index(), snap.transaction():
        if booked:
            if held is not None:
                held.give_back(snap)
            book = _Booked(snap, booked)
        i = 0
        # a job whose roles may use only some nodes (node selectors, taints): after a failed
        # placement, a state that freed none of those nodes (and ended no booking) fails
        # again, so it is not tried (nor counted against MAX_PLACEMENTS)
        allowed = _allowed_any(snap, job)
        moved = True  # anything the job may use freed since its last failed placement
        skipped = False
        while i < len(ends) and tries < MAX_PLACEMENTS:
            t = ends[i][0]
            freed: list[Binding] = []
            while i < len(ends) and ends[i][0] == t:
                moved = moved or ends[i][1] == -1  # (a booking's end)
                freed.extend(b for b in ends[i][2] if slot_or_none(snap, b.node) is not None)
                i += 1
            if not moved and allowed is not None:
                moved = any(allowed[snap.slot_of(b.node)] for b in freed)
            snap.release_bindings(freed)  # one update per node, however many pods
            if book is not None:
                book.at(t, t + length, freed)
            cur = ready()
            if cur is None:
                continue
            if book is not None and book.sync() and (cur := ready()) is None:
                continue
            if not moved:
                skipped = True  # (a state readiness passed, not tried: no longer clean)
                continue
            tries += 1
            with snap.transaction() as tx:
                which = restricted if cur is dec else pools.restricted(job, cur)
                # (its pods booked earlier and running then are its own to the placement)
                running = (
                    tuple(b for ts, bs in pieces if ts + length > t for b in bs)
                    if own_counts
                    else ()
                )
                if running:
                    assert place_own is not None  # (own_counts)
                    res = place_own(which, cur.pods, running)
                else:
                    res = place(which, cur.pods)
                placed = res.bindings and not res.unplaced
                if not placed and multi and (alts := narrowed()):
                    got = pools.place_narrowed(job, alts, place, cur.models)
                    if got is not None:
                        res, placed = got[1], True
                if over_time and res.bindings:
                    # these pods start here: held until their expected end (a state too)
                    tx.commit()
                    pieces.append((t, tuple(res.bindings)))
                    if placed:
                        break
                    done = {b.pod for b in res.bindings}
                    pending = tuple(p for p in cur.pods if p not in done)
                    dec = admit_quota(ledger, job, pending, role_models)
                    fits = (dec,)  # (one fit: a pod-level job is never decided per role)
                    restricted = pools.restricted(job, dec)
                    if length < math.inf:
                        bisect.insort(ends, (t + length, -1, pieces[-1][1]),
                                      key=lambda x: (x[0], x[1]))  # fmt: skip
                    moved = allowed is None
                    continue
                if placed:
                    found = Reservation(job=e.id, start=t, bindings=tuple(res.bindings))
                    clean = tries == 1 and not skipped
                    # (kept into the outer transaction, which undoes everything at once)
                    tx.commit()
                    break
                if not job.gang and len(res.bindings) > (0 if most is None else len(most.bindings)):
                    most = Reservation(job=e.id, start=t, bindings=tuple(res.bindings))
            moved = allowed is None  # (a job any node may take: every end may help)
        exhausted = i >= len(ends)
    if pieces:
        return Reservation(
            job=e.id,
            start=pieces[0][0],
            bindings=tuple(b for _t, bs in pieces for b in bs),
            starts=() if len(pieces) == 1 else tuple(t for t, bs in pieces for _b in bs),
        )
    if found is None and most is not None:
        if kept is not None:  # (not the answer of the last state tried: never reused)
            kept.forget()
        return most
    if kept is not None and occupancy is not None:
        kept.store(
            e, pods, dec_key, occupancy, found, exhausted, clean=clean, before_failed=before_failed
        )
    return found
