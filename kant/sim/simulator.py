"""A deterministic discrete-event simulator that drives kant exactly as an orchestrator would.

One heap of events ordered by ``(time, priority, sequence)`` (the simpy idea): at equal times,
releases come before arrivals and the scheduling cycle comes last, so a cycle sees every
change of its instant; the sequence number (the order events were scheduled in) breaks the
remaining ties. Nothing reads the wall clock to decide anything; the same scenario, policies
and seed give identical results on every run (only ``wall_s`` differs).

What happens, and when:

``ARRIVAL``   at ``job.submitted_at`` the job is submitted (:meth:`Scheduler.submit`).
``TICK``      a scheduling cycle: :func:`~kant.cycle.schedule_cycle` then
              :func:`~kant.apply.apply`. A tick is scheduled only when something changed
              (an arrival, a release, a node coming or going, a wake-up), at the earliest
              ``tick`` seconds after the previous cycle; when nothing can change no tick is
              scheduled at all, so an idle or stuck cluster costs nothing. Nor do two kinds
              of arrival, when the last cycle decided nothing (no binding, victim or
              nomination), preemption is off, ``tick`` is 0 (with a tick, the time of each
              cycle sets the earliest time of the next one, so no cycle may be left out)
              and only arrivals happened since: a job behind a closed gate (the queueing
              policy closed it, ``CycleResult.closed_after``: Strict FIFO behind a blocked
              job; nothing was reserved; the job is later in the queue order than the last
              one walked) would only be skipped (``behind_closed_gate`` counts them); a job
              that comes last in the queue order and asks for more GPU than the cluster has
              free (all its pods for a gang, its smallest pod otherwise) cannot start, and
              under a policy declaring ``arrivals_unblock_none`` (Strict FIFO, Best-Effort
              FIFO, EASY backfill), with every job's runtime estimate known, it makes no
              other job start either (``too_big_arrivals`` counts them).
``FINISH``    a gang job ends ``runtime`` seconds after its whole gang was bound (all its pods
              finish together); a pod-level job's pods end one by one, each ``runtime``
              seconds after its own binding (:meth:`Scheduler.pod_finished`).
``EVICT``     victims chosen by a cycle keep their devices for ``grace_period`` seconds
              (Kubernetes' termination grace period), then are reported gone
              (:meth:`Scheduler.pod_evicted`); kant requeues the preempted job.
``NODE_FAIL`` with ``mtbf`` set, each node fails after an exponential time (mean ``mtbf``,
              seeded) and is lost (:meth:`Scheduler.node_lost`: its jobs are requeued, gangs
              whole); ``NODE_UP`` brings it back empty ``mttr`` seconds later and draws its
              next failure (one chain per node: the draw replaces a failure still queued
              from before an explicit one, ``SimConfig.failures``). A failure happens while
              any job runs, holds GPUs or waits.
``WAKE``      a time at which a decision can change with nothing else happening: the last
              cycle's time horizon (:meth:`~kant.cycle.CycleResult.time_horizon`: a
              requeue backoff ends, a Backfill head passes its preemption threshold, a
              preemptor's cascade window closes, a running job passes ``min_runtime``).

**Start-time estimates.** With ``estimate_every`` n > 0, every n-th arriving job is given
its start-time estimate right after its submission
(:meth:`Scheduler.start_estimates`, with the run's ``grace_period``, ``default_runtime``,
``tick``, the time of the next cycle and the horizon left); the result keeps them
(``SimResult.estimates``) and :func:`estimate_accuracy` compares each with the job's real
start. Off by default: each estimate copies the scheduler's state and plays its cycles
forward, and the run's own decisions are the same with or without them.

**Work after an interruption.** A preempted or lost job is requeued by kant; what it still
has to run is ``resume`` (the default: it continues where it stopped, as a training job that
checkpoints would; work done during the grace period counts) or ``restart`` (it runs its whole
runtime again). Gang jobs resume as a whole, pod-level pods each on their own. A job the
cluster interrupted more often than the queue's ``Backoff.max_interruptions`` is FAILED and
stops (its record's state ``failed``). Under ``restart``, random failures (``mtbf``) need a
bound: a ``horizon`` or an interruption limit. Without one, a job longer than its nodes' time
between failures would restart without end, and the :class:`Simulator` refuses the run
(``ValidationError``).

**Bindings always succeed** and start at once (the simulator never reports
``binding_failed``); a job's actual runtime is its ``runtime_estimate`` (``default_runtime``
when it has none).

The result has one :class:`~kant.metrics.JobRecord` per submitted job, the GAR / SOR / GFR
time series (:class:`~kant.metrics.TimeSeries`), and a :class:`Summary`: median GAR and
median hourly SOR over the *observation window* (from the first arrival, less a ``warmup``
share, to the last arrival: the cluster under its offered load, before the final drain),
overall SOR over that window, mean GFR, and the JWTD / JTTED tables over all jobs.
"""

from __future__ import annotations

import enum
import gc
import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import numpy as np

from kant.cycle import CycleResult
from kant.errors import ValidationError
from kant.estimates import EstimateStatus, StartEstimate
from kant.metrics import (
    JobRecord,
    JttedRow,
    JwtdRow,
    Sample,
    SorCollector,
    TimeSeries,
    jtted,
    jwtd,
)
from kant.metrics.jobs import optimum_shape, pool_shapes
from kant.metrics.records import FirstNodes, leaf_groups, placed_nodes
from kant.model import (
    MILLI,
    Binding,
    Job,
    NodeSpec,
    PodId,
    finite_nonneg,
    is_finite_number,
    is_int,
    number,
    one_of,
)
from kant.queueing import JobPhase
from kant.scheduler import Scheduler

__all__ = [
    "EstimateAccuracy",
    "EventKind",
    "Progress",
    "SimConfig",
    "SimResult",
    "Simulator",
    "Summary",
    "TraceEvent",
    "check_span",
    "estimate_accuracy",
]


class EventKind(enum.IntEnum):
    """Event kinds; the value is the priority among events at the same time (lower first):
    resources are released before new work arrives, and the cycle runs last."""

    FINISH = 0
    EVICT = 1
    NODE_FAIL = 2
    NODE_UP = 3
    ARRIVAL = 4
    WAKE = 5
    TICK = 6


RESUME = "resume"
RESTART = "restart"

MAX_SPAN: float = 20 * 365 * 86400.0
"""The longest stretch of simulated time a run may cover, in seconds (20 years): the
submission times of its jobs from the first, a runtime, a repair, a grace period, a mean
time between failures, a failure's time or a horizon beyond it is refused (a broken
timestamp in a trace, most likely), since samples are taken every ``sample_interval`` over
the whole run."""
MAX_TIME: float = float(2**43)
"""The latest submission time a run takes, in seconds (about 278,000 years; a Unix time in
milliseconds is below it): up to it plus :data:`MAX_SPAN`, a float still counts
milliseconds (its step there is 2 ms at most), so a 1 s job never ends when it starts."""
MAX_SAMPLES: int = 2_000_000
"""At most this many samples a run (about 38 years at the default 600 s)."""
DEFAULT_RUNTIME: float = 3600.0
"""How long a job without a ``runtime_estimate`` runs, in seconds (:attr:`SimConfig.
default_runtime`'s default): what sizing a trace's cluster and measuring its offered load
count for such a job too (:func:`kant.sim.scenarios.offered_load`)."""
MIN_MTBF: float = 1.0
"""The shortest mean time between failures of a node, in seconds. Below it a run's clock
may not advance: a failure draw shorter than the clock's resolution (``--mtbf 1e-300``)
lands at the same instant, and with ``mttr`` 0 the node fails, comes back and fails again
there for ever (or, ``1e-6``, a million events a simulated second per node). At or above
it the clock always advances, but a run still has about nodes x span / ``mtbf`` failures:
a short ``mtbf`` makes a long run, not an endless one."""


_nonneg = finite_nonneg(ValidationError)


_opt_pos = number(ValidationError, low=0, low_inclusive=False, finite=True, optional=True)
_mtbf = number(
    ValidationError,
    low=MIN_MTBF,
    finite=True,
    optional=True,
    reason=f"must be None (no failures) or a finite number of seconds >= {MIN_MTBF:g} "
    "(shorter times between failures make a run whose clock cannot advance)",
)
_pos = number(ValidationError, low=0, low_inclusive=False, finite=True)
_fraction = number(ValidationError, low=0, high=1)
_count = number(ValidationError, low=0, integer=True)


def _to_failures(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return tuple(_failure(tuple(x) if isinstance(x, list) else x) for x in v)
    return v


def _failure(x: Any) -> Any:
    """A ``(time, node)`` pair whose time is a NumPy number or a Fraction with that time as
    a float (an int or a float is kept as it is); anything else as it is, for the check."""
    numpy_or_fraction = isinstance(x, tuple) and len(x) == 2 and type(x[0]) not in (int, float)
    if numpy_or_fraction and is_finite_number(x[0]):
        return (float(x[0]), x[1])
    return x


def _failures_ok(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    ok = isinstance(value, tuple) and all(
        isinstance(x, tuple)
        and len(x) == 2
        and is_finite_number(x[0])
        and x[0] >= 0
        and isinstance(x[1], str)
        for x in value
    )
    if not ok:
        raise ValidationError(attribute.name, value, "must be (time >= 0, node name) pairs")


_on_interrupt = one_of(ValidationError, (RESUME, RESTART))


@attrs.frozen(kw_only=True)
class SimConfig:
    """How the simulation runs (times in seconds of simulated time).

    ``tick``: at most one scheduling cycle per ``tick`` seconds (0: a cycle at every instant
    something changed). ``grace_period``: how long victims keep their devices.
    ``sample_interval``: GAR / SOR / GFR sampling period. ``sor_bin``: the widest of the
    equal windows whose SOR values give the median SOR (and the width of
    :attr:`SimResult.sor_bins`). ``on_interrupt``: ``"resume"`` or ``"restart"``
    (see the module docstring). ``mtbf`` / ``mttr``: node failures (None: no failures;
    ``mtbf`` at least :data:`MIN_MTBF`, a second).
    ``failures``: explicit ``(time, node)`` failures (the :class:`Simulator` refuses a node
    its cluster does not have), ``time`` counted from the first submission, as the run's
    clock starts there.
    ``horizon``: stop this long after the first submission (None: when every job is done or
    nothing can change).
    ``warmup``: the share of the arrival span, from the first arrival, left out of the
    observation window (the cluster starts empty and takes a while to fill).
    ``default_runtime``: runtime of jobs without an estimate. ``seed``: failure draws (a
    whole number, at least 0).
    ``trace``: keep the event trace in the result (tests read it).
    ``estimate_every``: give every n-th arriving job its start-time estimate at its
    arrival (0, the default: none; see the module docstring).
    """

    tick: float = attrs.field(default=60.0, validator=_nonneg)
    grace_period: float = attrs.field(default=30.0, validator=_nonneg)
    sample_interval: float = attrs.field(default=600.0, validator=_pos)
    sor_bin: float = attrs.field(default=3600.0, validator=_pos)
    on_interrupt: str = attrs.field(default=RESUME, validator=_on_interrupt)
    mtbf: float | None = attrs.field(default=None, validator=_mtbf)
    mttr: float = attrs.field(default=3600.0, validator=_nonneg)
    failures: tuple[tuple[float, str], ...] = attrs.field(
        default=(), converter=_to_failures, validator=_failures_ok
    )
    horizon: float | None = attrs.field(default=None, validator=_opt_pos)
    warmup: float = attrs.field(default=0.0, validator=_fraction)
    default_runtime: float = attrs.field(default=DEFAULT_RUNTIME, validator=_pos)
    seed: int = attrs.field(default=0, validator=_count)
    trace: bool = False
    estimate_every: int = attrs.field(default=0, validator=_count)


def check_span(jobs: Sequence[Job], cfg: SimConfig) -> None:
    """Refuse times that would make a run of ``jobs`` (in submission order) under ``cfg``
    cover more than :data:`MAX_SPAN`, submissions after :data:`MAX_TIME`, or more than
    :data:`MAX_SAMPLES` samples over the span of its submissions (ValidationError naming
    the job, and for a span, the first job too: either may hold the broken time). What the
    :class:`Simulator` checks first; :func:`kant.sim.scenarios.scenario_from_options` checks
    it as it builds a scenario, before anything is printed or run. O(jobs)."""
    years = f"{MAX_SPAN:g} s (20 years)"
    for name in ("grace_period", "mttr", "mtbf", "horizon", "default_runtime"):
        v = getattr(cfg, name)
        if v is not None and v > MAX_SPAN:
            raise ValidationError(name, v, f"must be at most {years}")
    for t, node in cfg.failures:
        if t > MAX_SPAN:
            raise ValidationError("failures", (t, node), f"times must be at most {years}")
    if not jobs:
        return
    first, last = jobs[0].submitted_at, jobs[-1]  # (in submission order)
    if last.submitted_at > MAX_TIME:
        raise ValidationError(
            "jobs", last.id,
            f"submitted at {last.submitted_at:g} s, after {MAX_TIME:g} s, where times lose "
            "their milliseconds: a broken timestamp? (subtract the first submission time)",
        )  # fmt: skip
    for j in jobs:
        if j.submitted_at - first > MAX_SPAN:
            raise ValidationError(
                "jobs", j.id,
                f"submitted {j.submitted_at - first:g} s after the first job "
                f"({jobs[0].id!r}), more than {years}: a broken timestamp (of one of the "
                "two)?",
            )  # fmt: skip
        if j.runtime_estimate is not None and j.runtime_estimate > MAX_SPAN:
            raise ValidationError(
                "jobs", j.id, f"runtime {j.runtime_estimate:g} s is more than {years}"
            )
    span = jobs[-1].submitted_at - first
    if span / cfg.sample_interval > MAX_SAMPLES:
        raise ValidationError(
            "sample_interval", cfg.sample_interval,
            f"would take more than {MAX_SAMPLES:,} samples over the {span:g} s of the "
            "submissions",
        )  # fmt: skip


UNBOUNDED_RESTART: Final = (
    "a job that runs longer than its nodes' time between failures would start again for ever"
)
"""Why a run that restarts work after random node failures needs a bound
(:func:`restarts_unbounded`)."""


MAX_RESTART_LIMIT: Final = 10_000
"""The largest limit of interruptions per job taken as a bound of a run restarting work after
random node failures (:func:`restarts_unbounded`): a cap, for such a run's length grows with
the limit (1,000 made 20 jobs take 9.6 s of CPU; 10**23 never ended)."""


def restarts_unbounded(
    on_interrupt: str | None,
    mtbf: float | None,
    horizon: float | None,
    max_interruptions: int | None,
) -> bool:
    """Whether a run with these settings may never end: work that restarts after an
    interruption, random node failures, and neither a horizon nor a limit of at most
    :data:`MAX_RESTART_LIMIT` interruptions per job (the :class:`Simulator` refuses it, and
    so does a sweep's grid)."""
    return (
        on_interrupt == RESTART and mtbf is not None and horizon is None
        and (max_interruptions is None or max_interruptions > MAX_RESTART_LIMIT)
    )  # fmt: skip


def _check_bounded(scheduler: Scheduler, cfg: SimConfig) -> None:
    """Refuse a run that may never end (:func:`restarts_unbounded`)."""
    limit = scheduler.queue.backoff.max_interruptions
    if restarts_unbounded(cfg.on_interrupt, cfg.mtbf, cfg.horizon, limit):
        raise ValidationError(
            "on_interrupt", RESTART,
            f"with random node failures (mtbf {cfg.mtbf:g} s) needs a horizon or a limit of "
            f"interruptions per job of at most {MAX_RESTART_LIMIT:,} "
            "(Backoff.max_interruptions, kant simulate --max-interruptions, a config file's "
            "interruptionLimitCount"
            f"{'' if limit is None else f'; {limit!r} given'}): {UNBOUNDED_RESTART}",
        )  # fmt: skip


@attrs.frozen(kw_only=True)
class TraceEvent:
    """One line of the event trace: what happened at ``t`` to ``subject``."""

    t: float
    kind: str
    subject: str
    detail: str = ""


@attrs.frozen(kw_only=True)
class Progress:
    """Where a running simulation is (for progress displays)."""

    now: float
    end_estimate: float
    arrived: int
    total_jobs: int
    finished: int
    running: int
    pending: int
    cycles: int


@attrs.frozen(kw_only=True)
class Summary:
    """The headline figures of one run.

    ``gar`` / ``gar_mean``: median / mean of the GAR samples in the observation window
    ``[window_start, window_end]``; ``sor``: SOR over that window; ``sor_median``: median of
    the SOR of its sub-windows, as many equal ones as ``sor_bin`` widths it has begun;
    ``gfr`` / ``gfr_degree``: mean GFR ratio / degree of the samples in the window.
    ``jwtd`` (waits of jobs that never started count up to ``end``) and ``jtted`` cover
    every job; ``wait_mean`` is the mean wait of all jobs, ``wait_gpu_weighted`` the mean
    weighted by each job's GPUs (a GPU-second of waiting counts the same whoever waits).
    ``start``: the first submission, when the run's clock starts (times are the trace's
    own, so a trace may start late); ``end``: when the run ended. ``jobs``: final phase ->
    count (every submitted job is in exactly one). ``preemptions``: victim units chosen,
    i.e. evictions asked (a gang whole, a pod of a pod-level job), counted when a cycle
    chooses them: a victim whose work ends within its grace period counts though it is
    never evicted (``evicted_pods`` counts the pods actually evicted); ``preempted_jobs``:
    distinct jobs chosen as victims at least once.
    ``behind_closed_gate`` and ``too_big_arrivals``: arrivals that scheduled no cycle, the
    job being behind a closed gate or asking for more GPU than was free (see the module
    docstring).
    """

    gar: float
    gar_mean: float
    sor: float
    sor_median: float
    gfr: float
    gfr_degree: float
    jwtd: Mapping[str, JwtdRow]
    jtted: Mapping[str, JttedRow]
    wait_mean: float
    wait_gpu_weighted: float
    jobs: Mapping[str, int]
    preemptions: int
    preempted_jobs: int
    evicted_pods: int
    node_failures: int
    cycles: int
    events: int
    behind_closed_gate: int
    too_big_arrivals: int
    window_start: float
    window_end: float
    end: float
    start: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (NaN becomes None)."""

        def num(x: float) -> float | None:
            return None if isinstance(x, float) and math.isnan(x) else x

        return {
            "gar": num(self.gar),
            "gar_mean": num(self.gar_mean),
            "sor": num(self.sor),
            "sor_median": num(self.sor_median),
            "gfr": num(self.gfr),
            "gfr_degree": num(self.gfr_degree),
            "jwtd": {
                b: {k: num(v) for k, v in attrs.asdict(r).items()} for b, r in self.jwtd.items()
            },
            "jtted": {
                b: {k: num(v) for k, v in attrs.asdict(r).items()} for b, r in self.jtted.items()
            },
            "wait_mean": num(self.wait_mean),
            "wait_gpu_weighted": num(self.wait_gpu_weighted),
            "jobs": dict(self.jobs),
            "preemptions": self.preemptions,
            "preempted_jobs": self.preempted_jobs,
            "evicted_pods": self.evicted_pods,
            "node_failures": self.node_failures,
            "cycles": self.cycles,
            "events": self.events,
            "behind_closed_gate": self.behind_closed_gate,
            "too_big_arrivals": self.too_big_arrivals,
            "window": [self.window_start, self.window_end],
            "start": self.start,
            "end": self.end,
        }


@attrs.frozen(kw_only=True)
class SimResult:
    """Everything a run produced. Equality ignores ``wall_s`` and ``cycle_ms``, so two runs
    with the same inputs compare equal. ``estimates``: the start-time estimates made at
    arrivals (``SimConfig.estimate_every``), in arrival order."""

    summary: Summary
    records: tuple[JobRecord, ...]
    samples: tuple[Sample, ...]
    queue_lengths: tuple[int, ...]
    sor_bins: tuple[tuple[float, float], ...] = ()
    trace: tuple[TraceEvent, ...] = ()
    estimates: tuple[StartEstimate, ...] = ()
    wall_s: float = attrs.field(default=0.0, eq=False)
    cycle_ms: float = attrs.field(default=0.0, eq=False)

    def record(self, job_id: str) -> JobRecord:
        """The record of one job (linear search; for tests and small runs)."""
        for r in self.records:
            if r.job_id == job_id:
                return r
        raise KeyError(job_id)

    def series(self) -> dict[str, np.ndarray[Any, np.dtype[np.float64]]]:
        """Sample columns: ``t``, ``gar``, ``sor`` (SOR so far), ``gfr``, ``gfr_degree``,
        ``pending`` (jobs waiting)."""
        names = ("t", "gar", "sor", "gfr", "gfr_degree")
        out = {k: np.array([getattr(s, k) for s in self.samples], dtype=np.float64) for k in names}
        out["pending"] = np.array(self.queue_lengths, dtype=np.float64)
        return out


# --------------------------------------------------------------------------- bookkeeping


@attrs.define(eq=False)
class _Run:
    """The simulator's own view of one job (what an orchestrator would remember)."""

    job: Job
    runtime: float
    remaining: float  # gang: work left for the whole job
    run: int = 0  # current run id (a stale FINISH event carries an older one)
    active: bool = False  # gang: running now (its FINISH event is live)
    run_start: float = 0.0
    pod_remaining: dict[PodId, float] = attrs.field(factory=dict)
    pod_run: dict[PodId, tuple[int, float]] = attrs.field(factory=dict)  # run id, start
    started_at: float | None = None
    finished_at: float | None = None
    nodes_used: int = 0
    groups_used: int = 0
    # a pod-level job: the node each of its pods was first bound to (its pods start in
    # several cycles: JTTED reads them all, as its optimum does)
    first_nodes: FirstNodes = attrs.field(factory=dict)
    all_started_at: float | None = None  # (every pod bound at least once)
    preempted: int = 0
    requeued: int = 0
    evicted_in: int = 0  # the cycle whose evictions last requeued it (one interruption)


def _checked_inputs(
    scheduler: Any, jobs: Any, config: Any, progress: Any, progress_every: Any
) -> list[Job]:
    """The jobs a :class:`Simulator` is given, as a list, once every argument is of its kind
    (:class:`ValidationError` naming the first that is not)."""
    if not isinstance(scheduler, Scheduler):
        raise ValidationError("scheduler", type(scheduler).__name__, "must be a Scheduler")
    if config is not None and not isinstance(config, SimConfig):
        raise ValidationError("config", type(config).__name__, "must be None or a SimConfig")
    if progress is not None and not callable(progress):
        raise ValidationError("progress", progress, "must be None or a callable")
    if not is_int(progress_every) or progress_every < 1:
        raise ValidationError("progress_every", progress_every, "must be an int >= 1")
    try:
        given = list(jobs)
    except TypeError:
        raise ValidationError("jobs", type(jobs).__name__, "must be an iterable of Job") from None
    for i, j in enumerate(given):
        if not isinstance(j, Job):
            raise ValidationError(f"jobs[{i}]", j, "must be a Job")
    return given


class Simulator:
    """Replays ``jobs`` through ``scheduler`` (which owns the cluster, queue, admitter and
    placer) under ``config``; :meth:`run` returns a :class:`SimResult`.

    The scheduler must be fresh (no jobs submitted, no pods bound). ``progress`` is called
    with a :class:`Progress` now and then (every ``progress_every`` events and at the end).

    (About 480 lines: one event loop whose handlers share its run state; the summary at the
    end reads the same state. Splitting the handlers into objects would put an indirection
    on every event of every run for no reader's gain.)
    """

    def __init__(
        self,
        scheduler: Scheduler,
        jobs: Iterable[Job],
        config: SimConfig | None = None,
        *,
        progress: Callable[[Progress], None] | None = None,
        progress_every: int = 2000,
    ) -> None:
        given = _checked_inputs(scheduler, jobs, config, progress, progress_every)
        self.s = scheduler
        self.cfg = config if config is not None else SimConfig()
        self.jobs = sorted(given, key=lambda j: j.submitted_at)
        if len({j.id for j in self.jobs}) != len(self.jobs):
            raise ValidationError("jobs", "<duplicate ids>", "job ids must be unique")
        if scheduler.cluster.num_pods or len(scheduler.queue):
            raise ValidationError("scheduler", scheduler, "must be fresh (no jobs, no pods)")
        check_span(self.jobs, self.cfg)
        _check_bounded(scheduler, self.cfg)
        history = scheduler.queue.history
        if history is not None and history < len(self.jobs):
            raise ValidationError(
                "scheduler.queue.history",
                history,
                f"must be None or at least the {len(self.jobs)} jobs simulated (the records of "
                "every job are read from the queue at the end): use Queue(history=None)",
            )
        self.progress = progress
        self.progress_every = progress_every
        self._ran = False
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._now = 0.0
        self._runs: dict[str, _Run] = {}
        self._held: dict[PodId, int] = {}  # pod -> GPU milli it holds (what SOR counted)
        self._tick_at: float | None = None
        self._last_cycle = -math.inf
        self._wakes: set[float] = set()
        # True while nothing but arrivals happened since a cycle that decided nothing (a
        # reservation aside), with preemption off and tick 0; then the queue order key after
        # which an arrival cannot change a decision, if the gate closed and nothing was
        # reserved (see the module docstring, TICK)
        self._quiet = False
        self._closed_after: tuple[Any, ...] | None = None
        # no running job outlives its expected end when every job has an estimate: it runs
        # for exactly that long (or less, resumed)
        self._ends_known = all(j.runtime_estimate is not None for j in self.jobs)
        self.behind_closed_gate = 0
        self.too_big_arrivals = 0
        self._trace: list[TraceEvent] = []
        self._estimates: list[StartEstimate] = []
        self._start = 0.0  # the first submission (the clock's start)
        self._rng = np.random.default_rng(self.cfg.seed)
        self._down: dict[str, NodeSpec] = {}
        self._chains: dict[str, int] = {}  # node -> number of its live random failure event
        self._pending_recoveries = 0
        self._running_jobs = 0
        self._arrived = 0
        self._finished = 0
        self.cycles = 0
        self.events = 0
        self.preemptions = 0
        self.evicted_pods = 0
        self.node_failures = 0
        self._cycle_s = 0.0
        cluster = scheduler.cluster
        for _t, name in self.cfg.failures:
            if name not in cluster:
                raise ValidationError("failures", name, "names no node of the cluster")
        self._leaf_of = {n.name: n.leaf for n in cluster.nodes()}
        self._spec_of = {n.name: n for n in cluster.nodes()}
        self._pool_shape = pool_shapes(cluster.nodes())
        # job -> (GPUs per node, nodes per leaf) of its JTTED optimum, once its nodes are known
        self._job_shape: dict[str, tuple[int, int]] = {}

    # ----------------------------------------------------------------- the loop

    def run(self) -> SimResult:
        """Replay every job to the end (every job done, nothing left that can change, or the
        horizon) and return the :class:`SimResult`. Call it once: it needs the fresh scheduler
        (a second call raises :class:`~kant.errors.ValidationError`, changing nothing).
        Runs at most one scheduling cycle per ``tick`` of simulated time (see
        :class:`SimConfig`).

        The objects alive before the run (the jobs, the cluster, the scheduler's state) are
        frozen out of the garbage collector's reach for its duration (``gc.freeze``): the
        oldest generation's collections would otherwise walk them again and again while
        the run allocates (about a fifth of a long replay's CPU). Nothing is disabled:
        cycles created during the run are still collected. Only the young generations are
        collected before the freeze: a full collection costs as much as the process is
        large (in a test run or a long-lived embedding process, more than a short replay),
        and cyclic garbage already old waits for the first collection after the run."""
        if self._ran:
            raise ValidationError(
                "simulator", self, "has run already: build a new Simulator on a fresh scheduler"
            )
        self._ran = True
        gc.collect(1)
        gc.freeze()
        try:
            return self._run()
        finally:
            gc.unfreeze()

    def _run(self) -> SimResult:
        t_wall = time.perf_counter()
        cfg = self.cfg
        s = self.s
        start = self.jobs[0].submitted_at if self.jobs else 0.0
        self._now = start
        self._start = start
        sor = SorCollector(start=start, total_gpus=s.cluster.total_gpus())
        series = TimeSeries(sor, interval=cfg.sample_interval, start=start, max_samples=MAX_SAMPLES)
        queue_lengths: list[int] = []
        self._sor = sor
        for job in self.jobs:
            runtime = job.runtime_estimate or cfg.default_runtime
            self._runs[job.id] = _Run(job=job, runtime=runtime, remaining=runtime)
            self._push(job.submitted_at, EventKind.ARRIVAL, job)
        if cfg.mtbf is not None:
            for spec in s.cluster.nodes():
                self._arm_failure(spec.name)
        for t, name in cfg.failures:
            self._push(start + t, EventKind.NODE_FAIL, (name, None))
        horizon = math.inf if cfg.horizon is None else start + cfg.horizon
        end = start
        while self._heap:
            t, kind, _seq, payload = self._heap[0]
            if self._idle_forever():  # (before the horizon: events left are dead ones)
                break
            if t > horizon:
                end = horizon
                break
            heapq.heappop(self._heap)
            n = series.advance(s.cluster, t)
            if n:
                queue_lengths.extend([self._pending_count()] * n)
            self._now = t
            end = t
            self.events += 1
            self._dispatch(EventKind(kind), payload)
            if self.progress is not None and self.events % self.progress_every == 0:
                self.progress(self._progress())
        if end > sor.now:
            sor.on_capacity(sor.total_gpus, end)
        n = series.advance(s.cluster, end, inclusive=True)
        queue_lengths.extend([self._pending_count()] * n)
        if self.progress is not None:
            self.progress(self._progress())
        records = self._records()
        summary = self._summarise(records, series.samples, end)
        return SimResult(
            summary=summary,
            records=records,
            samples=tuple(series.samples),
            queue_lengths=tuple(queue_lengths),
            sor_bins=tuple(self._sor_bins(start, end)),
            trace=tuple(self._trace),
            estimates=tuple(self._estimates),
            wall_s=time.perf_counter() - t_wall,
            cycle_ms=self._cycle_s * 1000,
        )

    def _idle_forever(self) -> bool:
        """True when nothing can happen to a job any more: every arrival was processed,
        nothing runs or holds GPUs, and either no job waits or no tick, wake-up or repair is
        due. The events left then change nothing: node failures (no job runs to interrupt,
        and a waiting job waits on) and dead finishes and evictions (of runs that ended:
        interrupted, failed, or finished within a grace period), whose times are no moment
        of the run. Node failures alone never keep a finished simulation going."""
        if self._arrived < len(self.jobs) or self._running_jobs or self._held:
            return False
        if not self._pending_count():
            return True
        # (a live finish or eviction needs a running pod or one holding GPUs: none here)
        return not (self._pending_recoveries or self._tick_at is not None or self._wakes)

    def _push(self, t: float, kind: EventKind, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, int(kind), self._seq, payload))

    def _note(self, kind: str, subject: object, detail: str = "", *args: object) -> None:
        """Record a trace event (with ``SimConfig.trace``): ``str(subject)``, and ``detail``
        formatted with ``args`` (``str.format``). Both are made only for a trace, so a run
        without one formats nothing."""
        if self.cfg.trace:
            text = detail.format(*args) if args else detail
            self._trace.append(
                TraceEvent(t=self._now, kind=kind, subject=str(subject), detail=text)
            )

    def _dispatch(self, kind: EventKind, payload: Any) -> None:
        if kind is not EventKind.ARRIVAL:
            self._quiet = False  # (a cycle, or a change a cycle must look at)
            self._closed_after = None
        if kind is EventKind.TICK:
            self._tick_at = None
            self._cycle()
        elif kind is EventKind.ARRIVAL:
            self._arrive(payload)
        elif kind is EventKind.FINISH:
            self._finish(*payload)
        elif kind is EventKind.EVICT:
            self._evict(*payload)
        elif kind is EventKind.NODE_FAIL:
            self._node_fail(*payload)
        elif kind is EventKind.NODE_UP:
            self._node_up(payload)
        elif kind is EventKind.WAKE:
            self._wakes.discard(self._now)
            self._changed()

    def _changed(self) -> None:
        """Something happened that a cycle may react to: make sure one is scheduled (unless
        no job has pods to place: then no cycle can do anything)."""
        if self._tick_at is not None or not self._pending_count():
            return
        t = max(self._now, self._last_cycle + self.cfg.tick)
        self._tick_at = t
        self._push(t, EventKind.TICK, None)

    # ----------------------------------------------------------------- events

    def _arrive(self, job: Job) -> None:
        self.s.submit(job, now=self._now)
        self._arrived += 1
        self._note("arrival", job.id)
        every = self.cfg.estimate_every
        if every and self._arrived % every == 0:
            self._estimate(job.id)
        if self._quiet:  # a cycle now would decide nothing if:
            closed = self._closed_after
            if closed is not None and self.s.queue.entry(job.id).key > closed:
                self.behind_closed_gate += 1  # the job is behind the closed gate
                return
            if (
                self._ends_known
                and getattr(self.s.policy, "arrivals_unblock_none", False)
                and self.s.queue.last_in_order() == job.id
                and _least_start_milli(job) > self._free_milli_bound()
            ):
                self.too_big_arrivals += 1  # it cannot start, nor make another start
                return
        self._changed()

    def _estimate(self, jid: str) -> None:
        """Keep job ``jid``'s start-time estimate, made now, as this run would start it: the
        next cycle when one is due (else now, or a ``tick`` after the last), the run's grace
        period, default runtime and tick, and the horizon left."""
        cfg = self.cfg
        now = self._now
        first = self._tick_at if self._tick_at is not None else self._last_cycle + cfg.tick
        horizon = None if cfg.horizon is None else self._start + cfg.horizon - now
        if horizon is not None and horizon <= 0:
            return
        got = self.s.start_estimates(
            now, jobs=(jid,), horizon=horizon, grace_period=cfg.grace_period,
            default_runtime=cfg.default_runtime, tick=cfg.tick,
            first_cycle=max(now, first),
        )  # fmt: skip
        self._estimates.append(got[jid])

    def _free_milli_bound(self) -> int:
        """At least the GPU milli free in the cluster (unhealthy devices count as free)."""
        cluster = self.s.cluster
        return cluster.total_gpus() * MILLI - cluster.allocated_milli()

    def _cycle(self) -> None:
        now = self._now
        self._last_cycle = now
        self.cycles += 1
        t0 = time.perf_counter()
        result = self.s.schedule(now)
        report = self.s.apply(result, now)
        # the first time at which the passing of time alone could change what it decided
        wake = result.time_horizon()
        if wake <= now:  # the policy run cannot tell (EASY): still the other times
            wake = result.time_horizon(policy=False)
        self._cycle_s += time.perf_counter() - t0
        self._note("cycle", f"#{self.cycles}", "bound={}", len(report.bound))
        if report.bound:
            self._started(result, set(report.bound))
        if report.terminating:
            self._victims(result, set(report.terminating))
        if result.again and report.bound:  # (a nominal part started: its rest next)
            self._changed()
        # (a horizon at the cycle's own time cannot tell: no wake-up, or a run of tick 0
        # would wake again and again at the same time)
        if now < wake < math.inf and wake not in self._wakes:
            self._wakes.add(wake)
            self._push(wake, EventKind.WAKE, None)
        if (
            not self.s.preemption.enabled
            and self.cfg.tick == 0  # (else a cycle's time sets the earliest next one)
            and not (result.bindings or result.victims or result.nominations)
            and not result.dropped_nominations
        ):
            self._quiet = True
            self._closed_after = None if result.reservations else result.closed_after

    def _started(self, result: CycleResult, bound: set[str]) -> None:
        now = self._now
        by_job: dict[str, list[Binding]] = {}
        for b in result.bindings:
            if b.pod.job in bound:
                by_job.setdefault(b.pod.job, []).append(b)
        for jid, bs in by_job.items():
            r = self._runs[jid]
            job = r.job
            milli = [b.total_milli for b in bs]
            self._held.update(zip([b.pod for b in bs], milli, strict=True))
            self._sor.on_pods_bound(jid, sum(milli), now, gang=job.gang, job_complete=True)
            nodes: set[str] | None = None  # (the job's nodes, when they are known anew)
            if r.started_at is None:
                r.started_at = now
                if job.gang:  # (bound whole: no pod to remember)
                    nodes = placed_nodes({}, bs, job.num_pods)
                    r.all_started_at = now
            if not job.gang:  # (pods placed in later cycles count too: 0 until all were)
                nodes = placed_nodes(r.first_nodes, bs, job.num_pods)
                if nodes is not None and r.all_started_at is None:
                    r.all_started_at = now
            if nodes is not None:
                r.nodes_used = len(nodes)
                r.groups_used = leaf_groups(nodes, self._leaf_of.get)
                specs = (self._spec_of[n] for n in nodes)
                self._job_shape[jid] = optimum_shape(self._pool_shape, specs)
            if job.gang:
                r.run += 1
                r.active = True
                r.run_start = now
                self._running_jobs += 1
                self._push(now + r.remaining, EventKind.FINISH, (jid, None, r.run))
                self._note("start", jid, "pods={} ends={:g}", len(bs), now + r.remaining)
            else:
                if not r.pod_run:
                    self._running_jobs += 1
                for b in bs:
                    r.run += 1
                    left = r.pod_remaining.get(b.pod, r.runtime)
                    r.pod_run[b.pod] = (r.run, now)
                    self._push(now + left, EventKind.FINISH, (jid, b.pod, r.run))
                self._note("start", jid, "pods={}", len(bs))

    def _victims(self, result: CycleResult, terminating: set[PodId]) -> None:
        hit: set[str] = set()
        for v in result.victims:
            pods = tuple(p for p in v.pods if p in terminating)
            if not pods:
                continue
            self.preemptions += 1
            if v.job not in hit:  # a job is preempted once per cycle, however many pods
                hit.add(v.job)
                self._runs[v.job].preempted += 1
            self._note("preempt", v.job, "for={} reason={}", v.preemptor, v.reason.value)
            self._push(self._now + self.cfg.grace_period, EventKind.EVICT, (pods, self.cycles))

    def _finish(self, jid: str, pod: PodId | None, run: int) -> None:
        r = self._runs[jid]
        now = self._now
        if pod is None:  # a gang: all its pods end together
            if not r.active or r.run != run:
                return
            pods = sorted(self.s.queue.entry(jid).assigned)  # (PodId: a tuple, C order)
            self.s.pods_finished(pods, now)  # one release for the whole gang
            self._release(jid, pods)
            r.active = False
            self._running_jobs -= 1
        else:
            cur = r.pod_run.get(pod)
            if cur is None or cur[0] != run:
                return
            self.s.pod_finished(pod, now)
            self._release(jid, [pod])
            del r.pod_run[pod]
            r.pod_remaining[pod] = 0.0
            if not r.pod_run:
                self._running_jobs -= 1
        if self.s.queue.entry(jid).phase is JobPhase.FINISHED:
            r.finished_at = now
            self._finished += 1
            self._note("finish", jid)
        self._changed()

    def _evict(self, pods: Sequence[PodId], cycle: int) -> None:
        """The grace period of victim ``pods`` chosen by cycle number ``cycle`` ended."""
        q = self.s.queue
        now = self._now
        released: list[PodId] = []
        requeued: dict[str, None] = {}
        for p in pods:
            e = q.entry(p.job)
            if p not in e.terminating:
                continue  # finished or lost meanwhile
            report = self.s.pod_evicted(p, now)
            self.evicted_pods += 1
            self._note("evict", p)
            released.extend(report.released)
            requeued.update(dict.fromkeys(report.requeued))
        # one cycle's evictions are one interruption of each job they hit, however many
        # victim units (a pod-level job's pods are one each) and events they took (kant
        # reports a pod-level job as requeued with each eviction, a gang with its last pod)
        runs = self._runs
        again = [j for j in requeued if runs[j].evicted_in != cycle]
        for j in again:
            runs[j].evicted_in = cycle
        self._lost(released, again)
        self._changed()

    def _node_fail(self, name: str, chain: int | None) -> None:
        """``name`` fails: an explicit failure (``chain`` None) or the random one its failure
        chain armed (``chain``: the chain's number then; an older number is stale)."""
        if chain is not None and chain != self._chains[name]:
            return  # re-armed since, by a repair: one chain of random failures per node
        if name not in self.s.cluster:
            return  # down already (its repair re-arms its random failures)
        # (a failure while jobs only wait still matters: it delays them. Once no job waits,
        # runs or holds GPUs the run has ended: see _idle_forever)
        now = self._now
        spec = self.s.cluster.node(name)
        report = self.s.node_lost(name, now)
        self.node_failures += 1
        self._down[name] = spec
        self._pending_recoveries += 1
        self._note("node_fail", name, "pods={}", len(report.released))
        self._lost(report.released, report.requeued)
        for jid in report.failed:
            self._runs[jid].finished_at = now  # (it ended: failed, its pods released now)
            self._note("fail", jid, "interruptions={}", self.s.queue.entry(jid).interruptions)
        self._sor.on_capacity(self.s.cluster.total_gpus(), now)
        self._push(now + self.cfg.mttr, EventKind.NODE_UP, name)
        self._changed()

    def _node_up(self, name: str) -> None:
        spec = self._down.pop(name)
        self._pending_recoveries -= 1
        self.s.cluster.add_node(spec)
        self._sor.on_capacity(self.s.cluster.total_gpus(), self._now)
        self._note("node_up", name)
        if self.cfg.mtbf is not None:
            self._arm_failure(name)
        self._changed()

    def _arm_failure(self, name: str) -> None:
        """(With ``mtbf``) the next random failure of ``name``, an uptime drawn from now. It
        replaces the one armed before, if any (still queued when an explicit failure took the
        node down): a repair starts the node's one chain again, never a second one."""
        assert self.cfg.mtbf is not None
        chain = self._chains.get(name, 0) + 1
        self._chains[name] = chain
        uptime = float(self._rng.exponential(self.cfg.mtbf))
        self._push(self._now + uptime, EventKind.NODE_FAIL, (name, chain))

    # ----------------------------------------------------------------- interruptions

    def _release(self, jid: str, pods: Iterable[PodId]) -> None:
        milli = [self._held.pop(p) for p in pods if p in self._held]
        if milli:
            self._sor.on_pods_released(jid, sum(milli), self._now)

    def _lost(self, released: Iterable[PodId], requeued: Iterable[str]) -> None:
        """Pods kant released because of an eviction or a lost node: stop their runs, keep
        (``resume``) or forget (``restart``) the work they did."""
        now = self._now
        resume = self.cfg.on_interrupt == RESUME
        by_job: dict[str, list[PodId]] = {}
        for p in released:
            by_job.setdefault(p.job, []).append(p)
        for jid, pods in by_job.items():
            r = self._runs[jid]
            self._release(jid, pods)
            if r.job.gang:
                if r.active:
                    if resume:
                        r.remaining = max(0.0, r.remaining - (now - r.run_start))
                    else:
                        r.remaining = r.runtime
                    r.active = False  # its FINISH event is stale now
                    self._running_jobs -= 1
            else:
                had = bool(r.pod_run)
                for p in pods:
                    cur = r.pod_run.pop(p, None)
                    if cur is None:
                        continue
                    left = r.pod_remaining.get(p, r.runtime)
                    r.pod_remaining[p] = max(0.0, left - (now - cur[1])) if resume else r.runtime
                if had and not r.pod_run:
                    self._running_jobs -= 1
        for jid in requeued:
            self._runs[jid].requeued += 1
            self._note("requeue", jid)

    # ----------------------------------------------------------------- results

    def _pending_count(self) -> int:
        return self.s.queue.waiting()

    def _progress(self) -> Progress:
        last = self.jobs[-1].submitted_at if self.jobs else 0.0
        return Progress(
            now=self._now,
            end_estimate=last,
            arrived=self._arrived,
            total_jobs=len(self.jobs),
            finished=self._finished,
            running=self._running_jobs,
            pending=self._pending_count(),
            cycles=self.cycles,
        )

    def _records(self) -> tuple[JobRecord, ...]:
        q = self.s.queue
        out = []
        for job in self.jobs:
            if job.id not in q:
                continue  # arrives after the horizon
            r = self._runs[job.id]
            phase = q.entry(job.id).phase
            out.append(
                JobRecord.for_job(
                    job,
                    started_at=r.started_at,
                    all_started_at=r.all_started_at,
                    finished_at=(
                        r.finished_at if phase in (JobPhase.FINISHED, JobPhase.FAILED) else None
                    ),
                    nodes_used=r.nodes_used,
                    groups_used=r.groups_used,
                    preempted=r.preempted,
                    requeued=r.requeued,
                    state=phase.value,
                )
            )
        return tuple(out)

    def _summarise(
        self, records: Sequence[JobRecord], samples: Sequence[Sample], end: float
    ) -> Summary:
        if self.jobs:
            w0, w1 = self.jobs[0].submitted_at, self.jobs[-1].submitted_at
        else:
            w0 = w1 = 0.0
        w1 = min(w1, end)
        if w1 <= w0:
            w1 = end
        w0 += self.cfg.warmup * (w1 - w0)
        inside = [x for x in samples if w0 <= x.t <= w1]
        if not inside:  # (a window shorter than the sampling interval: the last sample
            before = [x for x in samples if x.t <= w1]  # before its end stands for it)
            inside = before[-1:] or list(samples)
        gars = np.array([x.gar for x in inside], dtype=np.float64)
        gfrs = np.array([x.gfr for x in inside], dtype=np.float64)
        degs = np.array([x.gfr_degree for x in inside], dtype=np.float64)
        nan = float("nan")
        sor = self._sor.sor(until=w1, since=w0) if w1 > w0 else nan
        bins = self._even_sor_bins(w0, w1)
        sor_median = float(np.median(bins)) if bins else sor
        shape = self._job_shape  # (jtted reads it only for jobs whose nodes are known)

        def per_node(rec: JobRecord) -> int:
            return shape[rec.job_id][0]

        def per_leaf(rec: JobRecord) -> int:
            return shape[rec.job_id][1]

        waits = np.array(
            [(r.started_at if r.started_at is not None else end) - r.submitted_at for r in records],
            dtype=np.float64,
        )
        weights = np.array([max(r.gpus, 1e-3) for r in records], dtype=np.float64)
        counts = {p.value: 0 for p in JobPhase}
        for rec in records:
            counts[rec.state] += 1
        if len(records) < len(self.jobs):
            counts["not_arrived"] = len(self.jobs) - len(records)
        return Summary(
            gar=float(np.median(gars)) if gars.size else nan,
            gar_mean=float(gars.mean()) if gars.size else nan,
            sor=sor,
            sor_median=sor_median,
            gfr=float(gfrs.mean()) if gfrs.size else nan,
            gfr_degree=float(degs.mean()) if degs.size else nan,
            jwtd=jwtd(records, now=end),
            jtted=jtted(records, nodes_per_leaf=per_leaf, gpus_per_node=per_node),
            wait_mean=float(waits.mean()) if waits.size else nan,
            wait_gpu_weighted=float(np.average(waits, weights=weights)) if waits.size else nan,
            jobs=counts,
            preemptions=self.preemptions,
            preempted_jobs=sum(1 for r in self._runs.values() if r.preempted),
            evicted_pods=self.evicted_pods,
            node_failures=self.node_failures,
            cycles=self.cycles,
            events=self.events,
            behind_closed_gate=self.behind_closed_gate,
            too_big_arrivals=self.too_big_arrivals,
            window_start=w0,
            window_end=w1,
            end=end,
            start=self._start,
        )

    def _even_sor_bins(self, t0: float, t1: float) -> list[float]:
        """SOR of each of ``ceil((t1 - t0) / sor_bin)`` equal windows from ``t0`` to ``t1``,
        none wider than ``sor_bin``: they leave no part of the span out, where whole windows
        (:meth:`_sor_bins`) leave out the rest of the last one begun."""
        if t1 <= t0:
            return []
        n = max(1, math.ceil((t1 - t0) / self.cfg.sor_bin - 1e-9))
        edges = [t0 + (t1 - t0) * k / n for k in range(n)] + [t1]
        return [self._sor.sor(until=b, since=a) for a, b in itertools.pairwise(edges)]

    def _sor_bins(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """SOR of each whole ``sor_bin``-wide window from ``t0`` up to ``t1``: (start, SOR)."""
        width = self.cfg.sor_bin
        out = []
        k = 0
        while t0 + (k + 1) * width <= t1 + 1e-9:
            a = t0 + k * width
            out.append((a, self._sor.sor(until=a + width, since=a)))
            k += 1
        return out


@attrs.frozen(kw_only=True)
class EstimateAccuracy:
    """How the start-time estimates of a run compare with the real starts
    (:func:`estimate_accuracy`). ``made``: estimates made; ``expected``: those that named a
    start (the others: never, unknown end, beyond the horizon); ``compared``: expected
    ones whose job started; ``exact``: of those, started within 1 ms of the estimate;
    ``late`` / ``early``: started after / before it; ``mean_abs_error``,
    ``median_abs_error``, ``p90_abs_error``: seconds between estimate and start (NaN when
    none compared); ``no_start_but_started``: estimates with no start whose job did
    start."""

    made: int
    expected: int
    compared: int
    exact: int
    late: int
    early: int
    mean_abs_error: float
    median_abs_error: float
    p90_abs_error: float
    no_start_but_started: int


def estimate_accuracy(result: SimResult) -> EstimateAccuracy:
    """Compare ``result.estimates`` with the records' real starts. O(estimates + records)."""
    started = {r.job_id: r.started_at for r in result.records}
    errors: list[float] = []
    expected = no_start = 0
    for est in result.estimates:
        real = started.get(est.job_id)
        if est.status is EstimateStatus.EXPECTED and est.start is not None:
            expected += 1
            if real is not None:
                errors.append(real - est.start)
        elif real is not None:
            no_start += 1
    err = np.abs(np.array(errors, dtype=np.float64))
    nan = float("nan")
    return EstimateAccuracy(
        made=len(result.estimates),
        expected=expected,
        compared=len(errors),
        exact=int((err <= 1e-3).sum()),
        late=sum(1 for e in errors if e > 1e-3),
        early=sum(1 for e in errors if e < -1e-3),
        mean_abs_error=float(err.mean()) if err.size else nan,
        median_abs_error=float(np.median(err)) if err.size else nan,
        p90_abs_error=float(np.percentile(err, 90)) if err.size else nan,
        no_start_but_started=no_start,
    )


def _least_start_milli(job: Job) -> int:
    """The least GPU milli ``job`` (none of its pods running) must get to start at all: all
    its pods for a gang, its smallest pod otherwise."""
    if job.gang:
        return job.total_milli
    return min((r.resources.total_milli for r in job.roles if r.replicas), default=0)
