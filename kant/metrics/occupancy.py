"""Time-based metrics: the SOR collector and a time-series sampler (Kant paper, section 4.2).

**SOR** (Scheduling Occupation Ratio) is GPU-time allocated to workloads over GPU-time
available in the cluster, over a window::

    SOR(t0, t1) = integral_{t0}^{t1} allocated(t) dt / integral_{t0}^{t1} total(t) dt

``allocated(t)`` counts a gang job's GPUs only from the moment its *whole* job is bound (the
job-level rule for gang scheduling), and a pod-level job's GPUs pod by pod from each pod's
binding. Allocation counts from scheduling completion (binding), not from container start.

**Feeding it.** :class:`SorCollector` is fed events in non-decreasing time order; it never
reads the cluster state, so a simulator and a real orchestrator drive it the same way:

- ``on_capacity(total_gpus, t)``: the cluster now has ``total_gpus`` GPUs (absolute; call it
  at the start and whenever nodes join or leave);
- ``on_pods_bound(job, pods_gpu_milli, t, gang=..., job_complete=...)``: pods of ``job``
  holding ``pods_gpu_milli`` milli in total were bound at ``t``; for a gang job pass
  ``job_complete=True`` with the call that binds its last pod (all earlier milli of the job
  start counting then); pod-level jobs count at once;
- ``on_pods_released(job, pods_gpu_milli, t)``: pods of ``job`` holding that much gave their
  GPUs back (finished, preempted, lost, failed binding). Milli of a gang job that never
  completed its binding were never counted and simply leave.

Each event is O(log events) (amortised O(1)); :meth:`SorCollector.sor` over any window is
O(log events). :class:`TimeSeries` samples GAR, SOR-so-far and GFR at chosen times.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

import attrs
import numpy as np
import numpy.typing as npt

from kant.errors import InvariantError, ValidationError
from kant.metrics.allocation import gar, gfr
from kant.model import MILLI, finite_number, flag, is_int, is_whole
from kant.state import ClusterState


def _gpus(v: object) -> float:
    """A GPU count: a finite number >= 0, else ValidationError naming ``total_gpus``."""
    why = "must be a finite number >= 0"
    total = finite_number(v, "total_gpus", why)
    if total < 0:
        raise ValidationError("total_gpus", v, why)
    return total


def _milli(job: object, v: int | Iterable[int]) -> int:
    """The milli of an event's pods (an int, NumPy's too, or per-pod ints), once ``job`` is
    known to be a job id: checked before the event moves anything. Text, bytes (their ints
    are characters), a mapping (its keys) and a set (equal pods merged) are no per-pod ints."""
    if not isinstance(job, str):
        raise ValidationError("job", job, "must be a job id (a string)")
    if type(v) is int and v >= 0:  # (an int: every simulator event)
        return v
    why = "must be an int >= 0 or ints >= 0"
    if isinstance(v, bool | str | bytes | bytearray | memoryview | Mapping | AbstractSet):
        raise ValidationError("pods_gpu_milli", v, why)
    if is_whole(v):
        total = int(v)
    else:
        try:
            each = list(v)  # type: ignore[arg-type]
        except TypeError:  # (no iterable)
            raise ValidationError("pods_gpu_milli", v, why) from None
        if not all(is_whole(x) and x >= 0 for x in each):
            raise ValidationError("pods_gpu_milli", v, why)
        total = sum(int(x) for x in each)
    if total < 0:
        raise ValidationError("pods_gpu_milli", v, why)
    return total


class SorCollector:
    """Accumulates allocated and available GPU-time from bind / release / capacity events.

    ``start`` is the beginning of the measured window; ``total_gpus`` the capacity then.
    Times are seconds (any epoch). An event earlier than the previous one raises
    :class:`~kant.errors.ValidationError`, as does releasing more than a job holds, and so
    does a time or a GPU count that is no finite number (here, in an event or in a query),
    naming it: nothing is changed then.
    """

    def __init__(self, *, start: float = 0.0, total_gpus: float = 0.0) -> None:
        self.start = finite_number(start, "start")
        self._t = self.start
        self._alloc_milli = 0
        self._total = _gpus(total_gpus)
        self._counted: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        # Breakpoints: time, cumulative allocated milli-seconds, cumulative GPU-seconds, and
        # the rates in force from that time on.
        self._bt: list[float] = [self.start]
        self._ba: list[float] = [0.0]
        self._bc: list[float] = [0.0]
        self._ra: list[int] = [0]
        self._rc: list[float] = [self._total]

    # ----------------------------------------------------------------- events

    def on_capacity(self, total_gpus: float, t: float) -> None:
        """From ``t`` on the cluster has ``total_gpus`` GPUs."""
        total = _gpus(total_gpus)
        self._advance(t)
        self._total = total
        self._mark()

    def on_pods_bound(
        self,
        job: str,
        pods_gpu_milli: int | Iterable[int],
        t: float,
        *,
        gang: bool,
        job_complete: bool,
    ) -> None:
        """Pods of ``job`` holding ``pods_gpu_milli`` milli (an int or per-pod ints) were bound
        at ``t``. A gang job counts from the call with ``job_complete=True``. ``gang`` and
        ``job_complete`` are bools: another kind is a ValidationError naming it."""
        milli = _milli(job, pods_gpu_milli)
        if type(gang) is not bool or type(job_complete) is not bool:
            flag(gang, "gang")
            flag(job_complete, "job_complete")
        self._advance(t)
        if gang and not job_complete and job not in self._counted:
            self._pending[job] = self._pending.get(job, 0) + milli
            return
        add = milli + self._pending.pop(job, 0)
        self._counted[job] = self._counted.get(job, 0) + add
        self._alloc_milli += add
        self._mark()

    def on_pods_released(self, job: str, pods_gpu_milli: int | Iterable[int], t: float) -> None:
        """Pods of ``job`` holding ``pods_gpu_milli`` milli released their GPUs at ``t``."""
        milli = _milli(job, pods_gpu_milli)
        held = self._counted.get(job, 0) + self._pending.get(job, 0)
        if milli > held:
            raise ValidationError("pods_gpu_milli", milli, f"job {job!r} holds only {held} milli")
        self._advance(t)
        pending = self._pending.get(job, 0)
        if pending:
            left = pending - milli
            if left > 0:
                self._pending[job] = left
                return
            del self._pending[job]
            milli = -left
        if milli:
            left = self._counted[job] - milli
            if left:
                self._counted[job] = left
            else:
                del self._counted[job]
            self._alloc_milli -= milli
            self._mark()

    # ----------------------------------------------------------------- queries

    @property
    def now(self) -> float:
        """Time of the latest event."""
        return self._t

    @property
    def allocated_gpus(self) -> float:
        """GPUs counted as allocated now (gang jobs only once fully bound)."""
        return self._alloc_milli / MILLI

    @property
    def total_gpus(self) -> float:
        """GPUs in the cluster the collector measures against."""
        return self._total

    def gpu_seconds(self, until: float | None = None) -> tuple[float, float]:
        """``(allocated GPU-seconds, available GPU-seconds)`` from ``start`` to ``until``
        (default: the latest event; a later time extends the current rates)."""
        return self._seconds(until, "until")

    def _seconds(self, until: float | None, field: str) -> tuple[float, float]:
        t = self._t if until is None else finite_number(until, field)
        if t < self.start:
            raise ValidationError(field, until, f"is before start={self.start}")
        i = bisect.bisect_right(self._bt, t) - 1
        dt = t - self._bt[i]
        return (
            (self._ba[i] + self._ra[i] * dt) / MILLI,
            self._bc[i] + self._rc[i] * dt,
        )

    def sor(self, until: float | None = None, since: float | None = None) -> float:
        """SOR over ``[since, until]`` (default: ``start`` to the latest event); 0.0 when no
        GPU-time was available. A ``since`` after ``until`` is a ValidationError naming
        ``since`` (it read 0.0, as an empty window does)."""
        a1, c1 = self._seconds(until, "until")
        if since is not None:
            t1 = self._t if until is None else float(until)
            if finite_number(since, "since") > t1:
                raise ValidationError("since", since, f"must not be after until={t1:g}")
        a0, c0 = (0.0, 0.0) if since is None else self._seconds(since, "since")
        avail = c1 - c0
        return (a1 - a0) / avail if avail > 0 else 0.0

    def jobs_counted(self) -> dict[str, int]:
        """Milli counted per job right now (gang jobs once fully bound)."""
        return dict(self._counted)

    # ----------------------------------------------------------------- internals

    def _advance(self, t: float) -> None:
        if type(t) is not float or not math.isfinite(t):  # (a float: every simulator event)
            t = finite_number(t, "t")
        if t < self._t:
            raise ValidationError("t", t, f"events must not go back in time (last {self._t})")
        self._t = float(t)

    def _mark(self) -> None:
        t = self._t
        dt = t - self._bt[-1]
        ba = self._ba[-1] + self._ra[-1] * dt
        bc = self._bc[-1] + self._rc[-1] * dt
        if dt == 0:
            # Same instant as the previous breakpoint: overwrite its rates.
            self._ra[-1] = self._alloc_milli
            self._rc[-1] = self._total
            return
        self._bt.append(t)
        self._ba.append(ba)
        self._bc.append(bc)
        self._ra.append(self._alloc_milli)
        self._rc.append(self._total)


@attrs.frozen(kw_only=True)
class Sample:
    """One time-series point: GAR, SOR since the collector's start, GFR ratio and degree."""

    t: float
    gar: float
    sor: float
    gfr: float
    gfr_degree: float


class TimeSeries:
    """Samples GAR, SOR-so-far and GFR of a cluster at chosen times.

    Sample times are ``start, start + interval, ...`` or an explicit ascending ``times``.
    A discrete-event simulator calls :meth:`advance` with the time of the next event *before*
    applying it: every sample time strictly before it sees the current state (which has not
    changed since the previous event); at the end, :meth:`advance` with ``inclusive=True``.
    An orchestrator can instead call :meth:`sample` whenever it likes. ``sor`` (optional) is
    the :class:`SorCollector` fed with the same events; without it SOR reads NaN. ``pool``
    restricts GAR and GFR to one GPU model. ``max_samples`` (None: no limit): :meth:`advance`
    raises ValidationError rather than record more (a run whose times run far away). An
    ``interval``, ``start``, sample time or ``t`` that is no finite number, or a ``sor`` that
    is no SorCollector, is refused with a ValidationError naming it (an infinite one would
    never be reached, or sampled for ever).
    """

    def __init__(
        self,
        sor: SorCollector | None = None,
        *,
        interval: float | None = None,
        start: float = 0.0,
        times: Iterable[float] | None = None,
        pool: str | None = None,
        max_samples: int | None = None,
    ) -> None:
        if sor is not None and not isinstance(sor, SorCollector):
            raise ValidationError("sor", sor, "must be None or a kant.metrics.SorCollector")
        if max_samples is not None and (not is_int(max_samples) or max_samples < 0):
            raise ValidationError("max_samples", max_samples, "must be None or an int >= 0")
        self.max_samples = max_samples
        if (interval is None) == (times is None):
            raise ValidationError("interval", interval, "give exactly one of interval / times")
        if interval is not None:
            why = "must be a finite number > 0"
            if not finite_number(interval, "interval", why) > 0:
                raise ValidationError("interval", interval, why)
        start = finite_number(start, "start")
        sample_times = None
        if times is not None:
            try:
                given = list(times)
            except TypeError:
                raise ValidationError("times", times, "must be finite numbers") from None
            sample_times = sorted(
                finite_number(x, "times", "must be finite numbers") for x in given
            )
        self.sor = sor
        self.pool = pool
        self._interval = interval
        self._start = start
        self._times = sample_times
        self._k = 0
        self.samples: list[Sample] = []

    def _due(self) -> float | None:
        if self._times is not None:
            return self._times[self._k] if self._k < len(self._times) else None
        if self._interval is None:  # __init__ sets exactly one of times / interval
            raise InvariantError("TimeSeries: neither sample times nor an interval")
        return self._start + self._k * self._interval

    def sample(self, state: ClusterState, t: float) -> Sample:
        """Measure ``state`` now, record it as time ``t`` and return it."""
        t = finite_number(t, "t")
        g = gfr(state, self.pool)
        s = Sample(
            t=t,
            gar=gar(state, self.pool),
            sor=self.sor.sor(until=t) if self.sor is not None else math.nan,
            gfr=g.ratio,
            gfr_degree=g.degree,
        )
        self.samples.append(s)
        return s

    def advance(self, state: ClusterState, t: float, *, inclusive: bool = False) -> int:
        """Record every due sample time before ``t`` (up to and including ``t`` if
        ``inclusive``) with the current state; returns how many were recorded. GAR and GFR are
        measured once per call."""
        if type(t) is not float or not math.isfinite(t):  # (a float: every simulator event)
            t = finite_number(t, "t")
        first: Sample | None = None
        n = 0
        while True:
            due = self._due()
            if due is None or due > t or (due == t and not inclusive):
                break
            if self.max_samples is not None and len(self.samples) >= self.max_samples:
                raise ValidationError(
                    "interval", self._interval,
                    f"more than {self.max_samples:,} samples up to t={t:g}: sample less "
                    "often, or shorten the run",
                )  # fmt: skip
            if first is None:
                first = self.sample(state, due)
            else:
                sor = self.sor.sor(until=due) if self.sor is not None else math.nan
                self.samples.append(attrs.evolve(first, t=due, sor=sor))
            self._k += 1
            n += 1
        return n

    def arrays(self) -> dict[str, npt.NDArray[np.float64]]:
        """The samples as columns: ``t``, ``gar``, ``sor``, ``gfr``, ``gfr_degree``."""
        names = ("t", "gar", "sor", "gfr", "gfr_degree")
        return {k: np.array([getattr(s, k) for s in self.samples], dtype=np.float64) for k in names}
