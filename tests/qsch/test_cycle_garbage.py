"""A cycle's working state is freed by reference counting, not left to the garbage collector.

The cycle's collaborators hold its methods, and a recursive closure refers to itself: each
is a reference cycle, freed only when the collector runs, after it has grown the older
generations that every later collection walks."""

from __future__ import annotations

import gc

from kant.scheduler import Scheduler
from kant.testing import job

from .conftest import nodes, scheduler


def _three_running() -> Scheduler:
    s = scheduler(nodes(1))
    for t, (jid, gpus) in enumerate([("z", 3), ("y", 4), ("x", 1)]):
        s.submit(job(jid, gpus=gpus, priority=0, submitted_at=t), now=t)
        assert s.step(now=t).placed == (jid,)
    return s


def _preempt(s: Scheduler) -> list[str]:
    """A higher-priority job preempts; the minimal set spares a victim the search first
    took (the newest: an older one suffices)."""
    s.submit(job("p", gpus=4, priority=5, submitted_at=10), now=10)
    return [v.job for v in s.step(now=10).victims]


_WORKING_MODULES = ("kant.cycle", "kant.cycle_context", "kant.preemption", "kant.admission.holds")


def _working_state(objs: list[object]) -> list[object]:
    """Among ``objs``, the cycle's working state: objects of the types and functions of the
    modules a cycle works in (another test's scheduler, dying in a thread of its own while
    this one runs, is not judged here)."""
    out = []
    for o in objs:
        fn = getattr(o, "__func__", o)  # (a bound method: its function)
        module = (getattr(fn, "__module__", None) if callable(fn) else None) or ""
        if type(o).__module__.startswith(_WORKING_MODULES) or module.startswith(_WORKING_MODULES):
            out.append(o)
    return out


def test_a_cycle_that_searches_victims_leaves_no_reference_cycles_behind() -> None:
    assert _preempt(_three_running()) == ["y"]  # (imports and first-call caches)
    s = _three_running()
    gc.collect()
    # keep what the collector finds (other threads' too: only the cycle's is judged)
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert _preempt(s) == ["y"]
        gc.collect()
        left = _working_state(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []
