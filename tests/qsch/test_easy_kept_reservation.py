"""EASY backfill keeps the head's reservation across cycles (``keep_reservation``): the same
decisions as computing it afresh every cycle, for less work."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.cycle_context import kept_forecast
from kant.model import ReasonCode
from kant.queueing import EasyBackfill
from kant.scheduler import Scheduler
from kant.testing import check_invariants, job

from .conftest import evict_victims, finish, finish_due, nodes, scheduler

_JOB = st.tuples(
    st.sampled_from([1, 1, 2, 4, 8]),  # GPUs per pod
    st.integers(1, 6),  # pods (a gang when more than one)
    st.one_of(st.none(), st.integers(1, 40)),  # runtime estimate
    st.sampled_from([1.0, 1.0, 1.0, 0.5, 2.0]),  # actual run time / estimate
    st.integers(0, 30),  # arrival
)


def _run(
    keep: bool,
    specs: list[tuple[int, int, int | None, float, int]],
    n_nodes: int,
    strategy: str,
    sick: list[tuple[int, int, int]],
    default_runtime: float | None,
) -> tuple[list[tuple[object, ...]], Scheduler]:
    s = scheduler(
        nodes(n_nodes),
        policy=EasyBackfill(default_runtime=default_runtime, keep_reservation=keep),
        strategy=strategy,
    )
    names = sorted(s.cluster.slot_names)
    ends: dict[str, float] = {}
    actual = {f"j{i}": (est or 10) * f for i, (_g, _n, est, f, _a) in enumerate(specs)}
    out: list[tuple[object, ...]] = []
    for t in range(0, 120):
        now = float(t)
        finish_due(s, ends, now)
        for when, node, gpu in sick:
            if when == t:
                name = names[node % len(names)]
                s.cluster.set_gpu_health(name, gpu, not s.cluster.gpu_healthy_mask(name) >> gpu & 1)
        for i, (g, n, est, _f, arrive) in enumerate(specs):
            if arrive == t:
                s.submit(
                    job(f"j{i}", gpus=g, replicas=n, runtime=None if est is None else float(est),
                        submitted_at=now),
                    now=now,
                )  # fmt: skip
        r = s.step(now=now)
        evict_victims(s, r, now=now)
        for jid in r.placed:
            ends[jid] = now + actual[jid]
        out.append(
            (t, r.placed, r.bindings, sorted(r.pending.items()), r.reservation, r.victims,
             r.nominations)
        )  # fmt: skip
    return out, s


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(_JOB, min_size=4, max_size=14),
    n_nodes=st.integers(1, 3),
    strategy=st.sampled_from(["firstfit", "ebinpack"]),
    sick=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 2), st.integers(0, 7)), max_size=2),
    default_runtime=st.sampled_from([None, 15.0]),
)
def test_a_kept_reservation_gives_the_decisions_of_one_computed_afresh(
    specs: list[tuple[int, int, int | None, float, int]],
    n_nodes: int,
    strategy: str,
    sick: list[tuple[int, int, int]],
    default_runtime: float | None,
) -> None:
    kept, s_kept = _run(True, specs, n_nodes, strategy, sick, default_runtime)
    fresh, s_fresh = _run(False, specs, n_nodes, strategy, sick, default_runtime)
    assert kept == fresh
    check_invariants(s_kept)
    assert kept_forecast(s_fresh.queue).hits == 0  # the switch turns reuse off


def _blocked_head() -> Scheduler:
    """Two 8-GPU nodes: r1 (4 GPUs) ends at 100, r2 (8 GPUs) at 1000; the 8-GPU head
    waits for r1's node (EASY reserves when the job after the head is gated)."""
    s = scheduler(nodes(2), policy=EasyBackfill(), strategy="firstfit")
    s.submit(job("r1", gpus=4, runtime=100), now=0)
    s.submit(job("r2", gpus=8, runtime=1000), now=0)
    s.step(now=0)
    s.submit(job("head", gpus=8, runtime=10, submitted_at=1), now=1)
    s.submit(job("long", gpus=8, runtime=500, submitted_at=1), now=1)  # gated: reserve
    return s


def test_a_head_waiting_while_only_arrivals_happen_keeps_its_reservation() -> None:
    s = _blocked_head()
    first = s.step(now=2).reservation
    assert first is not None and first.start == 100
    kept = kept_forecast(s.queue)
    hits = kept.hits
    for t in range(3, 8):  # jobs that cannot start arrive; nothing ends
        s.submit(job(f"big{t}", gpus=8, replicas=2, runtime=50, submitted_at=t), now=t)
        r = s.step(now=t)
        assert r.reservation == first
        assert r.pending[f"big{t}"].code in (ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.NO_FIT)
    assert kept.hits == hits + 5


def test_a_kept_reservation_is_recomputed_when_a_running_job_ends_early() -> None:
    s = scheduler(nodes(2), policy=EasyBackfill(), strategy="firstfit")
    s.submit(job("r1", gpus=4, runtime=100), now=0)
    s.submit(job("r2", gpus=8, runtime=1000), now=0)
    s.step(now=0)
    s.submit(job("head", gpus=8, replicas=2, runtime=10, submitted_at=1), now=1)
    s.submit(job("long", gpus=8, runtime=500, submitted_at=2), now=2)  # gated: reserve
    assert s.step(now=2).reservation.start == 1000  # type: ignore[union-attr]
    assert s.step(now=3).reservation.start == 1000  # type: ignore[union-attr]
    finish(s, "r2", now=5)  # expected at 1000: the head now waits for r1 only
    r = s.step(now=5)
    assert r.reservation is not None and r.reservation.start == 100


def test_a_job_backfilled_onto_the_reserved_devices_leaves_the_heads_reservation_kept() -> None:
    s = _blocked_head()
    first = s.step(now=2).reservation
    assert first is not None and first.start == 100
    s.submit(job("short", gpus=4, runtime=50, submitted_at=3), now=3)
    assert "short" in s.step(now=3).placed  # it ends at 53, before the head's start
    kept = kept_forecast(s.queue)
    hits, misses = kept.hits, kept.misses
    for t in range(4, 8):  # the head waits for r1 at 100 still: nothing to recompute
        s.submit(job(f"big{t}", gpus=8, replicas=2, runtime=50, submitted_at=t), now=t)
        assert s.step(now=t).reservation == first
    assert (kept.hits, kept.misses) == (hits + 4, misses)
    assert kept.grown >= 4


def test_a_job_started_past_the_reserved_start_has_the_heads_reservation_recomputed() -> None:
    """Four 8-GPU nodes: the 2 x 8-GPU head waits until 1000 (nodes n0 and n1); a job that
    will hold n3 past 1000 starts beside the reservation: no reuse (the state at 1000 is not
    the kept one), the same answer computed afresh."""
    s = scheduler(nodes(4), policy=EasyBackfill(), strategy="firstfit")
    for name, gpus, runtime in [("r1", 4, 100), ("r2", 4, 1000), ("r3", 4, 1000),
                                ("r4", 8, 1000), ("r5", 4, 1000)]:  # fmt: skip
        s.submit(job(name, gpus=gpus, runtime=runtime), now=0)
    s.step(now=0)  # n0: r1 + r2, n1: r3 + r5, n2: r4; n3 free
    s.submit(job("head", gpus=8, replicas=2, runtime=10, submitted_at=1), now=1)
    s.submit(job("long", gpus=8, replicas=3, runtime=500, submitted_at=1), now=1)  # gated
    first = s.step(now=2).reservation
    assert first is not None and first.start == 1000
    assert {b.node for b in first.bindings} == {"lf0-n0", "lf0-n1"}
    kept = kept_forecast(s.queue)
    misses = kept.misses
    s.submit(job("other", gpus=4, runtime=5000, submitted_at=3), now=3)
    assert "other" in s.step(now=3).placed  # after the head's reservation was looked up
    assert kept.misses == misses
    assert s.step(now=4).reservation == first
    assert kept.misses == misses + 1
    assert s.step(now=5).reservation == first
    assert kept.misses == misses + 1  # kept again from 4 on


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from([1, 1, 2, 4, 8]),
            st.integers(1, 12),  # wide gangs of small pods, as in an SWF replay
            st.integers(1, 40),  # every job has an estimate...
            st.sampled_from([1.0, 1.0, 1.0, 1.0, 0.5]),  # ...mostly exact: jobs backfill
            st.integers(0, 30),
        ),
        min_size=6,
        max_size=18,
    ),
    n_nodes=st.integers(2, 4),
    strategy=st.sampled_from(["firstfit", "ebinpack"]),
)
def test_a_reservation_kept_while_jobs_backfill_before_its_start_gives_the_same_decisions(
    specs: list[tuple[int, int, int | None, float, int]], n_nodes: int, strategy: str
) -> None:
    kept, s_kept = _run(True, specs, n_nodes, strategy, [], None)
    fresh, _s = _run(False, specs, n_nodes, strategy, [], None)
    assert kept == fresh
    check_invariants(s_kept)
