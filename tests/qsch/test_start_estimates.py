"""``Scheduler.start_estimates``: when each waiting job would start if the running jobs end
at their expected ends and nothing else happens, played forward on a copy: the scheduler
itself is never changed, and bad input is refused with a typed error."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.errors import InvalidJobError, InvalidTimeError, UnknownJobError, ValidationError
from kant.estimates import EstimateStatus
from kant.preemption import PreemptionPolicy
from kant.queueing import ConservativeBackfill, EasyBackfill
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

OFF = PreemptionPolicy(priority=False, reclaim=False, backfill=False)
POLICIES = ["strict-fifo", "best-effort-fifo", "backfill", "easy-backfill", "conservative-backfill"]


def _sched(policy: Any = "best-effort-fifo", *, nodes: int = 1, rules: Any = OFF) -> Scheduler:
    return Scheduler(ClusterBuilder().leaf("lf0", nodes=nodes).build(), policy=policy,
                     preemption=rules)  # fmt: skip


def _starts(s: Scheduler, now: float, **kw: Any) -> dict[str, Any]:
    return {j: (e.status.value, e.start) for j, e in s.start_estimates(now, **kw).items()}


def test_a_waiting_job_is_expected_when_the_running_job_it_waits_for_ends() -> None:
    s = _sched()
    s.submit(job("a", gpus=6, runtime=100), now=0)
    s.step(0)
    s.submit(job("b", gpus=4, runtime=50), now=10)
    s.submit(job("c", gpus=8, runtime=10), now=20)
    assert _starts(s, 20) == {"b": ("expected", 100.0), "c": ("expected", 150.0)}
    est = s.start_estimates(20)["b"]
    assert (est.made_at, est.wait) == (20, 80.0)


@pytest.mark.parametrize(
    ("policy", "want"),
    [
        # FIFO: "small" waits behind "wide"; best effort lets it run in the 2 free GPUs
        ("strict-fifo", {"wide": 100.0, "small": 200.0}),
        ("best-effort-fifo", {"wide": 100.0, "small": 20.0}),
        # EASY and conservative: "small" ends before the reservation of "wide": it backfills
        (EasyBackfill(), {"wide": 100.0, "small": 20.0}),
        (ConservativeBackfill(), {"wide": 100.0, "small": 20.0}),
    ],
    ids=["strict fifo", "best-effort fifo", "easy", "conservative"],
)
def test_each_queueing_policy_is_played_as_it_would_decide(policy: Any, want: Any) -> None:
    s = _sched(policy)
    s.submit(job("a", gpus=6, runtime=100), now=0)
    s.step(0)
    s.submit(job("wide", gpus=8, runtime=100), now=10)
    s.submit(job("small", gpus=2, runtime=30), now=11)
    s.step(12)  # (wide blocks; small starts or not)
    got = s.start_estimates(20)
    for jid, t in want.items():
        if s.queue.entry(jid).started_at is None:
            assert (got[jid].status, got[jid].start) == (EstimateStatus.EXPECTED, t)
        else:
            assert got.get(jid) is None  # running: not listed by default


@pytest.mark.parametrize("policy", ["strict-fifo", "best-effort-fifo", "easy-backfill"])
def test_a_job_that_never_fits_says_never_and_the_jobs_after_it_still_start(policy: str) -> None:
    s = _sched(policy)
    s.submit(job("a", gpus=8, runtime=100), now=0)
    s.step(0)
    s.submit(job("huge", gpus=8, replicas=3), now=1)  # 24 GPUs on an 8-GPU cluster
    s.submit(job("small", gpus=1, runtime=5), now=2)  # (a job that never fits blocks none)
    assert _starts(s, 3) == {"huge": ("never", None), "small": ("expected", 100.0)}


@pytest.mark.parametrize("policy", ["strict-fifo", "best-effort-fifo", "easy-backfill"])
def test_a_job_that_never_fits_says_never_while_a_job_without_an_estimate_runs(
    policy: str,
) -> None:
    # (both said unknown_end: whether the play ended with pods still bound was read for
    # the whole cluster, not each job's own reason)
    s = _sched(policy, nodes=2)
    s.submit(job("a", gpus=1), now=0)  # no runtime estimate: it never ends in the play
    s.step(0)
    s.submit(job("b200", gpus=1, models="B200"), now=1)  # no B200 node
    s.submit(job("huge", gpus=8, replicas=3), now=1)  # 24 GPUs on a 16-GPU cluster
    s.submit(job("wide", gpus=8, replicas=2), now=2)  # waits for "a"
    got = _starts(s, 3)
    assert (got["b200"], got["huge"]) == (("never", None), ("never", None))
    assert got["wide"] == ("unknown_end", None)
    s2 = _sched(policy, nodes=2)
    s2.submit(job("a", gpus=1, runtime=100), now=0)
    s2.step(0)
    s2.submit(job("huge", gpus=8, replicas=3), now=1)
    s2.submit(job("wide", gpus=8, replicas=2), now=2)
    got = _starts(s2, 3, horizon=10)  # ("a" ends past the horizon)
    assert (got["huge"], got["wide"]) == (("never", None), ("beyond_horizon", None))


def test_a_reason_the_play_did_not_set_does_not_make_a_job_never_start() -> None:
    # (no cycle ran before the horizon: the job's reason was the live cycle's, no_pool
    # before its model's node came, and the estimate said never)
    import attrs

    s = _sched()
    s.submit(job("b200", gpus=1, models="B200"), now=1)
    s.step(1)
    n0 = next(iter(s.cluster.nodes()))
    s.node_added(attrs.evolve(n0, name="newb200", gpu_model="B200"), now=2)
    assert _starts(s, 3, horizon=10, first_cycle=50) == {"b200": ("beyond_horizon", None)}
    assert _starts(s, 3) == {"b200": ("expected", 3.0)}


def test_a_job_waiting_on_a_job_without_an_estimate_says_unknown_end() -> None:
    s = _sched()
    s.submit(job("a", gpus=8), now=0)  # no runtime estimate, and no default
    s.step(0)
    s.submit(job("b", gpus=4, runtime=10), now=1)
    assert _starts(s, 2) == {"b": ("unknown_end", None)}
    # a default runtime gives it one: the argument, or the policy's own
    assert _starts(s, 2, default_runtime=50.0) == {"b": ("expected", 50.0)}
    e = _sched(EasyBackfill(default_runtime=70.0))
    e.submit(job("a", gpus=8), now=0)
    e.step(0)
    e.submit(job("b", gpus=4, runtime=10), now=1)
    assert _starts(e, 2) == {"b": ("expected", 70.0)}


def test_an_overdue_running_job_is_expected_to_end_now() -> None:
    s = _sched()
    s.submit(job("a", gpus=8, runtime=10), now=0)
    s.step(0)
    s.submit(job("b", gpus=8, runtime=10), now=1)
    assert _starts(s, 25) == {"b": ("expected", 25.0)}


def test_a_horizon_in_seconds_or_cycles_bounds_the_play() -> None:
    s = _sched()
    s.submit(job("a", gpus=8, runtime=100), now=0)
    s.step(0)
    for i in range(3):
        s.submit(job(f"w{i}", gpus=8, runtime=100), now=1 + i)
    assert _starts(s, 5) == {
        "w0": ("expected", 100.0), "w1": ("expected", 200.0), "w2": ("expected", 300.0)
    }  # fmt: skip
    assert _starts(s, 5, horizon=250) == {
        "w0": ("expected", 100.0), "w1": ("expected", 200.0), "w2": ("beyond_horizon", None)
    }  # fmt: skip
    # one cycle now (places nothing), one at 100: w0 only
    assert _starts(s, 5, max_cycles=2) == {
        "w0": ("expected", 100.0), "w1": ("beyond_horizon", None), "w2": ("beyond_horizon", None)
    }  # fmt: skip
    # (a NumPy int, as the other arguments take NumPy numbers: it was refused)
    assert _starts(s, 5, max_cycles=np.int64(2)) == _starts(s, 5, max_cycles=2)


def test_jobs_asked_are_listed_in_queue_order_then_the_ones_not_waiting() -> None:
    s = _sched()
    s.submit(job("run", gpus=8, runtime=100), now=0)
    s.step(0)
    s.submit(job("done", gpus=1, runtime=1), now=0)
    s.cancel("done", now=1)
    s.submit(job("late", gpus=2, runtime=10), now=2)
    s.submit(job("vip", gpus=4, runtime=10, priority=3), now=3)
    got = s.start_estimates(4, jobs=["late", "done", "run", "vip", "late"])
    assert list(got) == ["vip", "late", "run", "done"]
    assert [(e.status.value, e.start) for e in got.values()] == [
        ("expected", 100.0), ("expected", 100.0), ("running", 0.0), ("ended", None)
    ]  # fmt: skip
    assert list(s.start_estimates(4)) == ["vip", "late"]  # default: every waiting job


def _lo_then_w_then_hi() -> Scheduler:
    """One 8-GPU node, priority preemption: lo (100 s) runs from 0, w (10 s) waits from 5,
    and hi (50 s, priority 5) arrives at 10."""
    s = _sched(rules=PreemptionPolicy(priority=True, reclaim=False, backfill=False))
    s.submit(job("lo", gpus=8, runtime=100), now=0)
    s.step(0)
    s.submit(job("w", gpus=8, runtime=10), now=5)
    s.submit(job("hi", gpus=8, runtime=50, priority=5), now=10)
    return s


def test_preemption_in_the_play_requeues_the_victim_after_its_grace_period() -> None:
    s = _lo_then_w_then_hi()
    # hi preempts lo at 10, gets its GPUs when lo is gone (10 + 30 s) and ends at 90; lo is
    # requeued and, before w in the order, runs its whole estimate again: w starts at 190
    got = _starts(s, 10, jobs=["hi", "w", "lo"])
    assert got == {"hi": ("expected", 40.0), "w": ("expected", 190.0), "lo": ("running", 0.0)}
    assert _starts(s, 10, grace_period=0.0)["w"] == ("expected", 160.0)


def test_a_victim_already_in_its_grace_period_goes_when_its_grace_period_ends() -> None:
    # hi preempts lo (100 s) at 10, grace 30: lo is gone at 40. Asked at 30, the play took
    # lo as going at 30 + 30 = 60 (hi expected 20 s late); asked at 75, with lo still being
    # evicted past its grace period, at 105, after lo's expected end (100): lo finished
    # there instead of being requeued, and w was expected a whole run of lo early (150).
    s = _lo_then_w_then_hi()
    assert [v.job for v in s.step(10).victims] == ["lo"]
    # hi 40-90, lo requeued (ahead of w) 90-190, w then
    assert _starts(s, 30, jobs=["hi", "w"]) == {"hi": ("expected", 40.0), "w": ("expected", 190.0)}
    # its grace period over, lo goes now: hi 75-125, lo 125-225, w then
    assert _starts(s, 75, jobs=["hi", "w"]) == {"hi": ("expected", 75.0), "w": ("expected", 225.0)}


def test_asking_changes_nothing_in_the_scheduler() -> None:
    s = _sched("easy-backfill", rules=PreemptionPolicy())
    s.submit(job("a", gpus=6, runtime=100), now=0)
    s.step(0)
    s.submit(job("b", gpus=8, runtime=50), now=10)
    s.submit(job("c", gpus=2, runtime=10, priority=2), now=11)
    before = (
        s.clock,
        s.queue.statuses(),
        tuple(s.cluster.pods()),
        s.admitter.charged(),
        s.queue.tick,
    )
    s.start_estimates(12)
    check_invariants(s)
    assert (s.clock, s.queue.statuses(), tuple(s.cluster.pods()), s.admitter.charged(),
            s.queue.tick) == before  # fmt: skip
    assert len(s.cluster._removal_listeners) == 1  # the copy's scheduler listens to the copy


@pytest.mark.parametrize(
    ("kw", "err"),
    [
        ({"now": math.nan}, InvalidTimeError),
        ({"now": math.inf}, InvalidTimeError),
        ({"now": 4.0}, InvalidTimeError),  # before the clock (5)
        ({"now": "6"}, InvalidTimeError),
        ({"jobs": ["nope"]}, UnknownJobError),
        ({"jobs": ["b", "nope"]}, UnknownJobError),
        ({"jobs": "b"}, InvalidJobError),
        ({"jobs": 3}, InvalidJobError),
        ({"horizon": 0}, ValidationError),
        ({"horizon": -1.0}, ValidationError),
        ({"horizon": math.inf}, ValidationError),
        ({"max_cycles": 0}, ValidationError),
        ({"max_cycles": 1.5}, ValidationError),
        ({"max_cycles": True}, ValidationError),
        ({"grace_period": -1}, ValidationError),
        ({"grace_period": math.nan}, ValidationError),
        ({"default_runtime": 0}, ValidationError),
        ({"tick": -1}, ValidationError),
        ({"first_cycle": math.nan}, InvalidTimeError),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else v.__name__,
)
def test_bad_input_is_refused_with_a_typed_error_and_changes_nothing(kw: Any, err: Any) -> None:
    s = _sched()
    s.submit(job("a", gpus=8, runtime=10), now=0)
    s.step(0)
    s.submit(job("b", gpus=8, runtime=10), now=5)
    before = (s.clock, s.queue.statuses())
    args = {"now": 6.0, **kw}
    now = args.pop("now")
    with pytest.raises(err):
        s.start_estimates(now, **args)
    assert (s.clock, s.queue.statuses()) == before


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["submit", "step", "finish", "ask", "lose", "recover", "remove"]),
            st.integers(1, 8),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=25,
    ),
    policy=st.sampled_from(POLICIES),
)
def test_a_scheduler_asked_for_estimates_decides_as_one_that_was_not(
    ops: list[tuple[str, int, int]], policy: str
) -> None:
    asked, plain = (_sched(policy, nodes=2, rules=PreemptionPolicy()) for _ in range(2))
    now = 0.0
    n = 0
    for op, gpus, prio in ops:
        now += 7
        if op == "submit":
            n += 1
            for s in (asked, plain):
                s.submit(job(f"j{n}", gpus=gpus, priority=prio, runtime=10.0 * gpus), now=now)
        elif op == "step":
            r1, r2 = asked.step(now), plain.step(now)
            assert (r1.bindings, r1.victims, r1.nominations, dict(r1.pending)) == (
                r2.bindings, r2.victims, r2.nominations, dict(r2.pending)
            )  # fmt: skip
        elif op == "finish":
            for s in (asked, plain):
                for e in s.queue.running():
                    pods = [p for p in sorted(e.assigned) if p not in e.terminating]
                    if pods and min(e.assigned[p] for p in pods) + 20 <= now:
                        s.pods_finished(pods, now)
                for e in s.queue.terminating():
                    for p in sorted(e.terminating):
                        s.pod_evicted(p, now)
        elif op in ("lose", "remove"):  # a node, lost (it may come back) or removed
            nodes = sorted(n.name for n in asked.cluster.nodes())
            if not nodes:
                continue
            node = nodes[gpus % len(nodes)]
            event = "node_lost" if op == "lose" else "node_removed"
            rep1, rep2 = (getattr(s, event)(node, now) for s in (asked, plain))
            assert rep1 == rep2
        elif op == "recover":
            lost = asked.lost_nodes()
            if lost:
                for s in (asked, plain):
                    s.node_recovered(lost[gpus % len(lost)], now)
        else:
            asked.start_estimates(now)
            check_invariants(asked)
        check_invariants(plain)
        assert asked.queue.statuses() == plain.queue.statuses()
        assert tuple(asked.cluster.pods()) == tuple(plain.cluster.pods())
    check_invariants(asked)


def test_a_first_cycle_that_is_not_finite_is_refused_under_its_own_name() -> None:
    s = _sched()
    s.submit(job("a", gpus=8, runtime=10), now=0)
    with pytest.raises(InvalidTimeError) as err:
        s.start_estimates(1.0, first_cycle=math.inf)
    assert err.value.field == "first_cycle"  # (before: "now", which was fine)
    with pytest.raises(InvalidTimeError) as err:
        s.start_estimates(math.nan)
    assert err.value.field == "now"
