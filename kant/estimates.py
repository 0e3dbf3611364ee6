"""Start-time estimates of waiting jobs: the scheduler's own cycles played forward on a copy.

:meth:`kant.scheduler.Scheduler.start_estimates` copies the scheduler's state (cluster, queue,
admitter, placer, queueing policy, preemption rules) and hands the copy to :func:`play`,
which runs it as kant's simulator runs a scheduler, with no arrival and no failure: each
running pod ends at its expected end (bind time + its job's ``runtime_estimate``, else the
default runtime; at ``now`` when that is past), a cycle runs at every instant something
changed (or at most one per ``tick``), victims chosen by a cycle go ``grace_period`` seconds
later and are requeued (their work starting again: a requeued job runs its whole estimate
from its next start), and the cycle's time horizon wakes a cycle when time alone can change
a decision. A waiting job's estimate is the time of the first cycle that binds a pod of it.

The original is never touched: everything happens on the copy, which is dropped after.
Cost: one copy of the state (O(nodes + pods + jobs)) plus one cycle per distinct event time
until the last job asked for starts, the horizon is passed or nothing is left to happen.
See ``docs/qsch.md`` (start-time estimates).
"""

from __future__ import annotations

import enum
import heapq
import itertools
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from kant.model import PodId, ReasonCode

if TYPE_CHECKING:
    from kant.scheduler import Scheduler

__all__ = ["EstimateStatus", "PlayStats", "StartEstimate", "play"]


class EstimateStatus(enum.StrEnum):
    """What a :class:`StartEstimate` says."""

    EXPECTED = "expected"
    """The job is expected to start at ``start``."""
    RUNNING = "running"
    """The job already runs (``start``: when it last started); nothing to estimate."""
    ENDED = "ended"
    """The job is FINISHED or FAILED; it will not start."""
    NEVER = "never"
    """Played forward, nothing is left to happen and the job still waits: it never fits,
    or it waits behind a job that never does, unless something changes (a job arrives or is
    cancelled, a node is added, a quota grows). A job whose own reason, as the play's
    cycles set it, says it never fits (``no_pool``, ``unsatisfiable``) is NEVER whatever
    else the play ended with."""
    UNKNOWN_END = "unknown_end"
    """The job still waits when only running pods without an expected end (no runtime
    estimate and no default runtime, or pods of jobs kant does not know) hold what it would
    need: its start is the end of a job whose end nobody estimated."""
    BEYOND_HORIZON = "beyond_horizon"
    """The job had not started when the play reached the horizon (seconds after ``now``, or
    cycles played)."""


@attrs.frozen(kw_only=True)
class StartEstimate:
    """One job's expected start (:meth:`kant.scheduler.Scheduler.start_estimates`).

    ``start`` is a time (EXPECTED: the expected start; RUNNING: when it last started) or None
    (``status`` says why). ``made_at``: the ``now`` the estimate was made at."""

    job_id: str
    status: EstimateStatus
    start: float | None
    made_at: float

    @property
    def wait(self) -> float | None:
        """Seconds from ``made_at`` to the expected start (EXPECTED only, else None)."""
        if self.status is not EstimateStatus.EXPECTED or self.start is None:
            return None
        return self.start - self.made_at


_NEVER_FITS = frozenset({ReasonCode.NO_POOL, ReasonCode.UNSATISFIABLE})
"""A waiting job's own reason that no end of a running pod changes: no node of a GPU model
it allows, or more than the cluster could ever hold (static capacity)."""

# event kinds, as the simulator orders them at one instant: releases, then wake-ups, then
# the cycle
_FINISH = 0
_EVICT = 1
_WAKE = 5
_TICK = 6


@attrs.frozen(kw_only=True)
class PlayStats:
    """What one play cost: cycles run, events handled, simulated seconds covered."""

    cycles: int
    events: int
    until: float


def play(
    twin: Scheduler,
    now: float,
    targets: Iterable[str],
    *,
    until: float = math.inf,
    max_cycles: int | None = None,
    grace_period: float = 0.0,
    default_runtime: float | None = None,
    tick: float = 0.0,
    first_cycle: float | None = None,
) -> tuple[dict[str, StartEstimate], PlayStats]:
    """Play ``twin`` (a copy: it is changed) forward from ``now`` with nothing arriving and
    return the estimate of each of ``targets`` (ids of PENDING jobs of its queue), in the
    order given, with the play's cost. ``until``: no event after this time is played;
    ``max_cycles``: at most this many cycles; ``first_cycle``: when the first cycle runs
    (default ``now``), later ones at most one per ``tick`` seconds."""
    q = twin.queue
    heap: list[tuple[float, int, int, Any]] = []
    order = itertools.count()

    def push(t: float, kind: int, payload: Any) -> None:
        heapq.heappush(heap, (t, kind, next(order), payload))

    def runtime(jid: str) -> float | None:
        return q.entry(jid).job.runtime_estimate or default_runtime

    # pods being evicted go a grace period after they were marked (now, if not told when)
    evicting: dict[float, list[PodId]] = {}
    for e in q.running():  # (in the order they started, as the simulator pushed them)
        est = runtime(e.id)
        for p, (_by, at) in sorted(e.terminating.items()):
            t_gone = now + grace_period if at is None else max(now, at + grace_period)
            evicting.setdefault(t_gone, []).append(p)
        if est is None:
            continue
        groups: dict[float, list[PodId]] = {}
        for p, t in sorted(e.assigned.items()):
            groups.setdefault(t, []).append(p)
        for t, pods in groups.items():
            push(max(now, t + est), _FINISH, (e.id, t, tuple(pods)))
    for t_gone, going in sorted(evicting.items()):
        push(t_gone, _EVICT, tuple(going))

    pending = dict.fromkeys(targets)
    started: dict[str, float] = {}
    tick_at: float | None = None
    last_cycle = -math.inf
    wakes: set[float] = set()
    cycles = events = 0
    horizon_hit = False

    def changed(t: float) -> None:
        nonlocal tick_at
        if tick_at is not None or not q.waiting():
            return
        tick_at = max(t, last_cycle + tick)
        push(tick_at, _TICK, None)

    if q.waiting():
        tick_at = now if first_cycle is None else max(now, first_cycle)
        push(tick_at, _TICK, None)
    last_t = now
    while heap and pending:
        t, kind, _n, payload = heap[0]
        if t > until or (kind == _TICK and max_cycles is not None and cycles >= max_cycles):
            horizon_hit = True
            break
        heapq.heappop(heap)
        events += 1
        last_t = t
        if kind == _TICK:
            tick_at = None
            last_cycle = t
            cycles += 1
            result = twin.schedule(t)
            report = twin.apply(result, t)
            bound = set(report.bound)
            by_job: dict[str, list[PodId]] = {}
            for b in result.bindings:
                if b.pod.job in bound:
                    by_job.setdefault(b.pod.job, []).append(b.pod)
            for jid, pods in by_job.items():
                if jid in pending:
                    del pending[jid]
                    started[jid] = t
                est = runtime(jid)
                if est is not None:
                    push(t + est, _FINISH, (jid, t, tuple(pods)))
            if report.terminating:
                hit = set(report.terminating)
                for v in result.victims:
                    gone = tuple(p for p in v.pods if p in hit)
                    if gone:
                        push(t + grace_period, _EVICT, gone)
            if result.again and bound:  # (as the simulator: a nominal part started)
                changed(t)
            wake = result.time_horizon()
            if wake <= t:  # the policy run cannot tell (EASY): still the other times
                wake = result.time_horizon(policy=False)
            if t < wake < math.inf and wake not in wakes:
                wakes.add(wake)
                push(wake, _WAKE, None)
        elif kind == _FINISH:
            jid, at, pods = payload
            owner = q.get(jid)
            mine = [p for p in pods if owner is not None and owner.assigned.get(p) == at]
            if mine:  # (the end of a run requeued since is stale: nothing happens then, no
                twin.pods_finished(mine, t)  # cycle either, as in the simulator)
                changed(t)
        elif kind == _EVICT:
            for p in payload:
                owner = q.get(p.job)
                if owner is not None and p in owner.terminating:
                    twin.pod_evicted(p, t)
            changed(t)
        else:
            wakes.discard(t)
            changed(t)
    if horizon_hit:
        rest = EstimateStatus.BEYOND_HORIZON
    elif twin.cluster.num_pods:  # only pods without an end hold devices now
        rest = EstimateStatus.UNKNOWN_END
    else:
        rest = EstimateStatus.NEVER
    out: dict[str, StartEstimate] = {}
    for jid in dict.fromkeys(targets):
        at = started.get(jid)
        if at is not None:
            out[jid] = StartEstimate(
                job_id=jid, status=EstimateStatus.EXPECTED, start=at, made_at=now
            )
        else:  # (one that never fits says so, whatever else the play ended with; its
            own = q.get(jid) if cycles else None  # reason is the play's once a cycle ran)
            why = None if own is None or own.reason is None else own.reason.code
            status = EstimateStatus.NEVER if why in _NEVER_FITS else rest
            out[jid] = StartEstimate(job_id=jid, status=status, start=None, made_at=now)
    return out, PlayStats(cycles=cycles, events=events, until=last_t)
