"""A cycle that decided nothing (no binding, victim or nomination made or dropped) is kept,
and a later cycle that would read the same cluster, queue, quota usage, placer, policy and
rules returns its result again without being run, until the first time at which the passing
of time alone could change a decision: a backoff ends, a Backfill head passes its threshold,
a job leaves its cascade window, a running job the victim search read passes the minimum
runtime. ``incremental=False`` never reuses. That both decide alike, with cycles at the same
time and later and nothing else happening, is a property here (small full clusters, where
preemption is frequent; and the chain behind a cascade window, with its times drawn, which
random operations rarely build) and in ``test_incremental_cycle.py`` (its ``idle`` op)."""

from __future__ import annotations

import math

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from kant.admission import Admitter, Quota
from kant.cycle import CycleResult, schedule_cycle
from kant.model import Binding, PodId, ReasonCode
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import Backfill, Queue
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job
from tests.qsch.test_incremental_cycle import _alike, _Pair, drive_alike, ops_of


def _one_node(**kw: object) -> Scheduler:
    """One 8-GPU node, "busy" running on all of it since t=1, "big" (4 GPUs) waiting."""
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(), **kw)  # type: ignore[arg-type]
    s.submit(job("busy", gpus=8), now=0)
    assert s.step(now=1).placed == ("busy",)
    s.submit(job("big", gpus=4), now=2)
    return s


def _quiet_until(s: Scheduler, quiet: float, before: float, at: float) -> CycleResult:
    """A cycle at ``quiet`` that decides nothing and is run, one at ``before`` answered again,
    and the one at ``at`` (when time alone changes a decision), run: returned. The first two
    tell ``at`` as their time horizon."""
    first = s.step(now=quiet)
    assert not (first.bindings or first.victims or first.stats.reused)
    again = s.step(now=before)
    assert again.stats.reused
    assert first.time_horizon() == again.time_horizon() == at
    r = s.step(now=at)
    assert not r.stats.reused
    return r


def _same(a: CycleResult, b: CycleResult) -> bool:
    """The same decisions (equality ignores the stats), ``b`` at its own time."""
    return a == attrs.evolve(b, now=a.now)


def test_a_cycle_that_decided_nothing_is_answered_again_while_nothing_changes() -> None:
    s = _one_node()
    first = s.step(now=3)
    assert first.pending["big"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert not first.stats.reused
    for t in (3, 4, 10**6):
        again = s.step(now=t)
        assert again.stats.reused and again.now == t and _same(again, first)
        assert again.stats.placement_attempts == 0 and again.stats.candidates == 1
    s.submit(job("small", gpus=1), now=10**6 + 1)  # an arrival: run again
    r = s.step(now=10**6 + 2)
    assert not r.stats.reused and r.pending["small"].code is ReasonCode.INSUFFICIENT_CAPACITY
    s.pod_finished(PodId(job="busy", role="worker", index=0), now=10**6 + 3)
    r = s.step(now=10**6 + 4)
    assert not r.stats.reused and r.placed == ("big", "small")


def test_answers_again_share_read_only_mappings_and_apply_as_a_full_pass_would() -> None:
    """Each answer again of a quiet cycle shares one read-only ``pending`` and ``seen``; applying
    it again after a reason was changed by hand puts the reason back."""
    s = _one_node()
    s.step(now=3)
    r4, r5 = s.step(now=4), s.step(now=5)
    assert r4.stats.reused and r5.stats.reused
    assert r4.pending is r5.pending and r4.seen is r5.seen
    with pytest.raises(TypeError):
        r5.pending["big"] = None  # type: ignore[index]
    why = s.queue.entry("big").reason
    assert why is r5.pending["big"]
    s.queue.set_reason("big", None)
    s.apply(r5, now=5)
    assert s.queue.entry("big").reason is why


def test_a_cycle_from_scratch_is_never_answered_again() -> None:
    s = _one_node(incremental=False)
    s.step(now=3)
    assert not s.step(now=3).stats.reused
    assert not s.step(now=4).stats.reused


def test_the_end_of_a_backoff_ends_the_answer_at_once() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build())
    s.submit(job("flaky", gpus=8), now=0)
    s.step(now=1)
    s.binding_failed(PodId(job="flaky", role="worker", index=0), now=2)  # backoff until 12
    assert s.queue.entry("flaky").backoff_until == 12
    assert _quiet_until(s, 3, 11.999, 12).placed == ("flaky",)


def test_a_backfill_head_passing_its_threshold_preempts_at_that_time() -> None:
    """The head ("big", waiting since 2) may take back what backfilled past it ("small",
    on the half "early" left) once it has waited the threshold, 100 s: the cycles before
    are answered again, the cycle at 102 is run and chooses the victim."""
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(),
        policy=Backfill(threshold=100.0),
    )
    s.submit(job("early", gpus=4), now=0)
    s.step(now=1)
    s.submit(job("big", gpus=8), now=2)
    s.submit(job("small", gpus=4), now=3)
    assert s.step(now=4).placed == ("small",)
    s.pod_finished(PodId(job="early", role="worker", index=0), now=5)
    r = _quiet_until(s, 5, 101.999, 102)
    assert [(v.job, v.preemptor) for v in r.victims] == [("small", "big")]


def test_a_running_job_passing_the_minimum_runtime_becomes_a_victim_at_that_time() -> None:
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(),
        preemption=PreemptionPolicy(min_runtime=600.0, reclaim=False, backfill=False),
    )
    s.submit(job("low", gpus=8, priority=0), now=0)
    s.step(now=1)  # "low" runs from 1: a victim from 601 on
    s.submit(job("high", gpus=8, priority=1), now=2)
    r = _quiet_until(s, 3, 600.999, 601)
    assert [(v.job, v.preemptor) for v in r.victims] == [("low", "high")]


def test_a_job_leaving_its_cascade_window_preempts_at_that_time() -> None:
    """ "mid", evicted for "top" at 161, may not preempt in turn for 300 s (no cascades): at
    461 it evicts "low" (which passed the minimum runtime, 100 s, at 250); the cycles
    between are answered again."""
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2, gpus=8).build(),
        preemption=PreemptionPolicy(
            min_runtime=100.0, cascade_window=300.0, reclaim=False, backfill=False
        ),
    )
    s.submit(job("mid", gpus=8, priority=1), now=0)
    s.step(now=1)
    s.submit(job("low", gpus=8, priority=0), now=149)
    s.step(now=150)
    s.submit(job("top", gpus=8, priority=2), now=159)
    assert [v.job for v in s.step(now=160).victims] == ["mid"]  # ("low" is too young)
    s.pod_evicted(PodId(job="mid", role="worker", index=0), now=161)
    assert s.step(now=162).placed == ("top",)
    r = _quiet_until(s, 300, 460.999, 461)
    assert [(v.job, v.preemptor) for v in r.victims] == [("low", "mid")]


def test_a_policy_that_declares_no_time_horizon_is_answered_again_only_at_the_same_time() -> None:
    s = _one_node(policy="easy-backfill")
    first = s.step(now=3)
    assert first.time_horizon() == 3  # (it cannot tell)
    assert s.step(now=3).stats.reused
    assert not s.step(now=3.5).stats.reused


def test_a_cycle_that_reads_no_time_tells_that_time_alone_never_changes_it() -> None:
    """Strict FIFO, no backoff, preemption off: ``math.inf``, for the answer again too; a
    result built by hand cannot tell (its own time)."""
    off = PreemptionPolicy(priority=False, reclaim=False, backfill=False)
    s = _one_node(policy="strict-fifo", preemption=off)
    first = s.step(now=3)
    assert first.time_horizon() == math.inf
    again = s.step(now=10**6)
    assert again.stats.reused and again.time_horizon() == math.inf
    hand = CycleResult(
        now=5.0, bindings=(), placed=(), victims=(), nominations=(), dropped_nominations=(),
        pending={}, reservation=None, seen={}, stats=first.stats,
    )  # fmt: skip
    assert hand.time_horizon() == 5.0
    assert hand == attrs.evolve(first, now=5.0, pending={}, seen={})  # (equality ignores it)


def test_any_change_to_what_the_cycle_reads_ends_the_answer() -> None:
    """A node's health, the quota's usage, a nomination, another policy or preemption rules,
    another placer: each makes the next cycle run."""
    s = _one_node()
    s.step(now=3)
    s.gpu_unhealthy("lf0-n0", 0, now=4)  # "busy" loses its GPU 0 and waits again
    r = s.step(now=5)
    assert not r.stats.reused and r.placed == ("big",)
    assert not s.step(now=6).stats.reused  # (big's binding changed the cluster)
    assert s.step(now=7).stats.reused

    s.admitter.charge(
        "someone", Binding(pod=PodId(job="x", role="w", index=0), node="lf0-n0"), None
    )
    assert not s.step(now=7.5).stats.reused

    s.queue.set_nomination(None, "busy")  # the same nomination (none): nothing changed
    assert s.step(now=8).stats.reused

    c, q, a = s.cluster, s.queue, s.admitter
    assert schedule_cycle(c, q, a, s.placer, 9).stats.reused  # (the same policy, by name)
    assert not schedule_cycle(c, q, a, s.placer, 10, policy="strict-fifo").stats.reused
    assert not schedule_cycle(c, q, a, s.placer, 11).stats.reused  # (back: run again)
    rules = PreemptionPolicy(cascade_window=1.0)
    assert not schedule_cycle(c, q, a, s.placer, 12, preemption=rules).stats.reused
    assert schedule_cycle(c, q, a, s.placer, 13, preemption=rules).stats.reused
    assert not schedule_cycle(c, q, a, Placer("spread"), 14, preemption=rules).stats.reused


def test_each_queue_keeps_its_own_quiet_cycle() -> None:
    """Two queues on one cluster: a quiet cycle of one is not the other's."""
    cluster = ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build()
    a, b = Admitter([Quota.gpus("t", "H100", 8)]), Admitter()
    qa, qb = Queue(), Queue()
    qa.submit(job("wide", gpus=16, tenant="t"), now=0)
    qb.submit(job("fits", gpus=8), now=0)
    placer = Placer("binpack")
    ra = schedule_cycle(cluster, qa, a, placer, 1)
    assert not ra.bindings and not ra.stats.reused
    rb = schedule_cycle(cluster, qb, b, placer, 2)
    assert not rb.stats.reused and [x.pod.job for x in rb.bindings] == ["fits"]
    assert schedule_cycle(cluster, qa, a, placer, 3).stats.reused


# cycles with nothing else happening, often; times, thresholds and windows of a scale the
# clock crosses within a few ops
_idle_ops = ops_of(
    "submit", "submit", "cycle", "finish", "evict", "gone", "bind_fail", "idle", "idle"
)
_timed_policies = st.sampled_from(["strict-fifo", "best-effort-fifo", "easy-backfill"]) | st.builds(
    Backfill, threshold=st.sampled_from([0.0, 25.0, 250.0])
)
_timed_preemption = st.builds(
    PreemptionPolicy,
    priority=st.booleans(),
    reclaim=st.booleans(),
    backfill=st.booleans(),
    cascade_window=st.sampled_from([0.0, 40.0, 400.0]),
    min_runtime=st.sampled_from([0.0, 30.0, 300.0]),
)


def _small(n: int) -> ClusterState:
    return ClusterBuilder().leaf("lf0", nodes=n, gpus=8).build()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    state=st.sampled_from([1, 2, 2, 3]).map(_small),
    policy=_timed_policies,
    quotas=st.booleans(),
    preemption=_timed_preemption,
    ops=st.lists(_idle_ops, min_size=10, max_size=40),
    specs=st.lists(_alike, min_size=40, max_size=40),
)
def test_quiet_cycles_answered_again_decide_as_cycles_from_scratch(
    state: ClusterState,
    policy: str | Backfill,
    quotas: bool,
    preemption: PreemptionPolicy,
    ops: list[tuple[str, int]],
    specs: list[tuple[int, int, bool, int]],
) -> None:
    """A small full cluster (1 to 3 nodes of 8 GPUs) where preemption is frequent, bursts of
    alike jobs of three priorities, many cycles with nothing else happening, the clock
    crossing backoffs, Backfill thresholds, cascade windows and minimum runtimes: the
    incremental scheduler (which answers quiet cycles again) decides as the one from
    scratch."""
    pair = _Pair(state, policy, quotas, preemption)  # type: ignore[arg-type]
    drive_alike(pair, ops, specs, bursts=2, priorities=3)
    assert pair.inc.queue.statuses() == pair.ref.queue.statuses()
    check_invariants(pair.inc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=_timed_policies,
    reclaim=st.booleans(),
    backfill=st.booleans(),
    window=st.integers(0, 400),
    min_runtime=st.integers(0, 400),
    low_at=st.integers(2, 400),
    top_after=st.integers(0, 400),
    gaps=st.lists(st.integers(0, 300), min_size=2, max_size=12),
)
def test_cascade_chains_answered_again_decide_as_cycles_from_scratch(
    policy: str | Backfill,
    reclaim: bool,
    backfill: bool,
    window: int,
    min_runtime: int,
    low_at: int,
    top_after: int,
    gaps: list[int],
) -> None:
    """The chain behind the cascade window, with its times drawn: on two 8-GPU nodes "mid"
    (priority 1) runs, then "low" (priority 0); "top" (priority 2) evicts one of them
    ("mid" while "low" is younger than the minimum runtime); its pods go, "top" starts, and
    quiet cycles follow at drawn gaps, across the end of "mid"'s cascade window and of
    "low"'s minimum runtime or not. Every cycle of the incremental scheduler (which answers
    quiet cycles again) decides as the one from scratch."""
    rules = PreemptionPolicy(
        reclaim=reclaim, backfill=backfill, cascade_window=float(window),
        min_runtime=float(min_runtime),
    )  # fmt: skip
    pair = _Pair(_small(2), policy, False, rules)  # type: ignore[arg-type]
    pair.both("submit", job("mid", gpus=8, priority=1), 0)
    pair.cycle(1)
    pair.both("submit", job("low", gpus=8, priority=0), low_at - 1)
    pair.cycle(low_at)
    now = low_at + top_after
    pair.both("submit", job("top", gpus=8, priority=2), now)
    pair.cycle(now + 1)
    for e in pair.ref.queue.terminating():  # the victims go
        for p in sorted(e.terminating):
            pair.both("pod_evicted", p, now + 2)
    now += 3
    for gap in gaps:
        pair.cycle(now)
        now += gap
    pair.cycle(now)
    assert pair.inc.queue.statuses() == pair.ref.queue.statuses()
    check_invariants(pair.inc)


def test_the_quiet_cycle_benchmark_answers_again_what_a_cycle_from_scratch_decides() -> None:
    """``benchmarks/quiet_cycle.py`` at a small scale (the bench cycle's cluster and
    workload, warmed up): both cycles after each applied quiet one are answered again, and
    equal a cycle from scratch at the same time."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "quiet_cycle.py"
    spec = importlib.util.spec_from_file_location("quiet_cycle", script)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.run(nodes=200, pending=80, rounds=3)
    assert out["reused_count"] == 6 and out["same_decisions"]


def test_under_backfill_only_the_heads_threshold_ends_the_answer() -> None:
    """Backfill reads the time for its heads only (the first blocked job, each tenant's first
    refused by quota): "small", behind the head, passing its own threshold at 150 changes
    nothing, so the cycle at 200 is answered again."""
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=1, gpus=8).build(), policy=Backfill(threshold=100.0)
    )
    s.submit(job("busy", gpus=8), now=0)
    s.step(now=0.5)
    s.submit(job("big", gpus=8), now=1)  # the head: past its threshold from 101
    s.submit(job("small", gpus=4), now=50)
    first = s.step(now=120)  # "big" may take back what backfilled past it: nothing did
    assert not (first.bindings or first.victims or first.stats.reused)
    assert s.step(now=200).stats.reused


def test_a_backfill_head_that_may_take_nothing_back_ends_no_answer_at_its_threshold() -> None:
    """With backfill preemption off (and no victim rules) a Backfill head passing its
    threshold changes nothing: the time horizon is never, and the cycle after the threshold
    is answered again."""
    for rules in (
        PreemptionPolicy(priority=False, reclaim=False, backfill=False),
        PreemptionPolicy(backfill=False),
    ):
        s = _one_node(policy=Backfill(threshold=100.0), preemption=rules)
        first = s.step(now=3)  # "big", the head since 2, passes the threshold at 102
        assert first.time_horizon() == math.inf
        assert s.step(now=500).stats.reused
    s = _one_node(policy=Backfill(threshold=100.0))
    assert s.step(now=3).time_horizon() == 102
