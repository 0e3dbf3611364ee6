"""``CycleResult.time_horizon()``: the first time after the cycle's at which the passing of
time alone could change what it decided (``math.inf``: never; the cycle's own time: it
cannot tell). The scenarios of ``test_quiet_cycle.py`` check it at each kind of time (a
backoff's end, a Backfill head's threshold, a cascade window's close, the minimum runtime);
the simulator wakes at it (``tests/sim/test_time_alone_wakes.py``)."""

from __future__ import annotations

import math

from kant.model import PodId
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, job


def _mid_evicted() -> Scheduler:
    """``lo`` (A100) and ``mid`` (any model, priority 5) run; ``hi`` (H100, priority 10)
    evicts ``mid``, gone at 40 and within its 100 s cascade window until 140."""
    c = ClusterBuilder().leaf("h", nodes=1, model="H100").leaf("a", nodes=1, model="A100")
    s = Scheduler(c.build(), preemption=PreemptionPolicy(cascade_window=100))
    s.submit(job("lo", gpus=8, models="A100"), now=1)
    s.step(now=1)
    s.submit(job("mid", gpus=8, priority=5), now=2)
    s.step(now=2)
    s.submit(job("hi", gpus=8, models="H100", priority=10), now=10)
    assert [v.job for v in s.step(now=10).victims] == ["mid"]
    s.pod_evicted(PodId(job="mid", role="worker", index=0), now=40)
    return s


def test_a_waiting_preemptor_within_its_cascade_window_tells_when_the_window_closes() -> None:
    s = _mid_evicted()
    r = s.step(now=40)
    assert r.placed == ("hi",) and r.time_horizon() == 140


def test_a_job_placed_within_its_cascade_window_counts_neither_before_nor_after_apply() -> None:
    """``lo`` ends at 50 and ``mid`` starts in its place, within its window: the close of
    the window changes nothing the cycle decided, asked before the result is applied (the
    job still evicted) or after (it runs again)."""
    horizons = []
    for before in (True, False):
        s = _mid_evicted()
        s.step(now=40)
        s.pod_finished(PodId(job="lo", role="worker", index=0), now=50)
        r = s.schedule(now=50)
        assert r.placed == ("mid",)
        if before:
            horizons.append(r.time_horizon())
        s.apply(r, now=50)
        horizons.append(r.time_horizon())
    assert horizons == [math.inf] * 3
