"""Queueing policies: Strict FIFO, Best-Effort FIFO, Backfill, EASY backfill."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kant.contracts import Gate
from kant.errors import ValidationError
from kant.model import Job, ReasonCode, Resources, Role, VictimReason
from kant.queueing import Backfill, EasyBackfill, JobPhase
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import check_invariants, job, node

from .conftest import evict_victims, finish, nodes, pod, scheduler


def test_strict_fifo_blocks_everyone_behind_a_blocked_head() -> None:
    s = scheduler(nodes(2), policy="strict-fifo")
    s.submit(job("run", gpus=8), now=0)
    s.step(now=0)
    s.submit(job("head", gpus=8, replicas=2, submitted_at=1), now=1)
    s.submit(job("small", gpus=1, submitted_at=2), now=2)
    r = s.step(now=3)
    assert r.placed == ()
    assert r.pending["head"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert r.pending["small"].code is ReasonCode.BLOCKED and "head" in r.pending["small"].message


def _h100_and_a100() -> ClusterState:
    kw: dict[str, Any] = dict(leaf="lf0", spine="sp0", superspine="ss0", template=None, nics=0)
    return ClusterState(
        [node("h100", gpus=8, model="H100", **kw), node("a100", gpus=4, model="A100", **kw)]
    )


def _any_then_a100_only(name: str, submitted_at: float) -> Job:
    """A gang of 3 one-GPU pods of any model, then 3 of A100 only, 50 s long."""
    return Job(
        id=name,
        submitted_at=submitted_at,
        runtime_estimate=50.0,
        roles=(
            Role(name="any", replicas=3, resources=Resources(gpus=1)),
            Role(name="a100only", replicas=3, resources=Resources(gpus=1), gpu_models="A100"),
        ),
    )


def test_strict_fifo_places_a_gang_head_whose_roles_fit_only_the_most_constrained_first() -> None:
    # role 'any' declared first would take the A100 node the A100-only role needs; the head
    # is placed (its A100-only role on the A100 node) and the job behind it runs too
    st = _h100_and_a100()
    s = scheduler(st, policy="strict-fifo")
    s.submit(_any_then_a100_only("head", submitted_at=0), now=0)
    s.submit(job("next", gpus=4, submitted_at=1), now=1)
    r = s.step(now=2)
    assert set(r.placed) == {"head", "next"}
    assert {b.node for b in s.status("head").bindings if b.pod.role == "a100only"} == {"a100"}


def test_easy_reserves_for_a_gang_head_whose_roles_fit_only_most_constrained_first() -> None:
    # at t=100 the A100 node is free and the H100 node has 5 GPUs: role 'any' declared first
    # would best-fit the A100 node for ever; the head's reservation starts at t=100
    st = _h100_and_a100()
    s = scheduler(st, policy=EasyBackfill())
    s.submit(job("on-a100", gpus=4, models="A100", runtime=100.0), now=0)
    s.submit(job("on-h100", gpus=3, models="H100", runtime=500.0), now=0)
    s.step(now=0)
    s.submit(_any_then_a100_only("head", submitted_at=1), now=1)
    s.submit(job("later", gpus=1, submitted_at=2, runtime=10.0), now=2)
    r = s.step(now=2)
    assert r.reservation is not None and r.reservation.job == "head"
    assert r.reservation.start == 100.0


def test_strict_fifo_quota_failure_blocks_only_that_tenants_queue() -> None:
    from kant.admission import Quota

    s = scheduler(
        nodes(2),
        policy="strict-fifo",
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 12)],
        modes={"a": "isolated", "b": "isolated"},
    )
    s.submit(job("a-first", gpus=4, tenant="a"), now=0)
    s.step(now=0)
    s.submit(job("a-big", gpus=8, tenant="a"), now=0)
    s.submit(job("a-small", gpus=1, tenant="a", submitted_at=1), now=1)
    s.submit(job("b-small", gpus=1, tenant="b", submitted_at=2), now=2)
    r = s.step(now=3)
    assert r.placed == ("b-small",)
    assert r.pending["a-big"].code is ReasonCode.QUOTA_EXCEEDED
    assert r.pending["a-small"].code is ReasonCode.BLOCKED


def _stream(s: Scheduler, head_gpus: int, steps: int, threshold_note: str = "") -> list[str]:
    """16 one-GPU jobs fill 2 nodes; a 16-GPU head arrives; every second the oldest small job
    finishes and a new small one arrives. Returns the head's phase per step."""
    for i in range(16):
        s.submit(job(f"s{i}", gpus=1, submitted_at=0), now=0)
    s.step(now=0)
    s.submit(job("head", gpus=8, replicas=head_gpus // 8, submitted_at=1), now=1)
    running = [f"s{i}" for i in range(16)]
    phases = []
    n = 16
    for t in range(2, 2 + steps):
        oldest = running.pop(0)
        if s.queue.status(oldest).phase is JobPhase.RUNNING:
            finish(s, oldest, now=t)
        s.submit(job(f"s{n}", gpus=1, submitted_at=t), now=t)
        running.append(f"s{n}")
        n += 1
        r = s.step(now=t)
        evict_victims(s, r, now=t)
        phases.append(s.queue.status("head").phase.value)
    return phases


def test_best_effort_fifo_lets_a_stream_of_small_jobs_starve_a_large_head() -> None:
    s = scheduler(nodes(2), policy="best-effort-fifo")
    phases = _stream(s, 16, steps=40)
    assert set(phases) == {"pending"}
    r = s.schedule(now=100)
    assert r.pending["head"].code in (ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.NO_FIT)
    check_invariants(s)


def test_backfill_stops_that_once_the_threshold_passes() -> None:
    s = scheduler(nodes(2), policy=Backfill(threshold=20))
    phases = _stream(s, 16, steps=40)
    start = phases.index("running")
    assert phases[:start] == ["pending"] * start
    # before the threshold it behaves like best effort; after it, the head preempts the
    # jobs that backfilled past it and starts as soon as they are gone
    assert 20 <= start + 2 <= 40
    check_invariants(s)


def test_backfill_victims_are_backfilled_jobs_only() -> None:
    s = scheduler(nodes(1), policy=Backfill(threshold=5))
    s.submit(job("before", gpus=4, submitted_at=0), now=0)
    s.step(now=0)
    s.submit(job("head", gpus=8, submitted_at=1), now=1)
    s.submit(job("after", gpus=4, submitted_at=2), now=2)
    r = s.step(now=2)
    assert r.placed == ("after",)
    r = s.step(now=10)
    assert [(v.job, v.reason) for v in r.victims] == []  # "before" is not backfilled; no fit
    s.pod_finished(pod("before"), now=11)
    r = s.step(now=11)
    assert [(v.job, v.reason) for v in r.victims] == [("after", VictimReason.BACKFILL)]


def test_easy_backfill_never_delays_the_heads_reserved_start() -> None:
    s = scheduler(nodes(2), policy=EasyBackfill())
    s.submit(job("r1", gpus=4, runtime=100), now=0)
    s.submit(job("r2", gpus=8, runtime=1000), now=0)
    s.step(now=0)
    nodes_of = {b.pod.job: b.node for b in s.cluster.pods()}
    assert nodes_of["r1"] != nodes_of["r2"]
    s.submit(job("head", gpus=8, runtime=10, submitted_at=1), now=1)
    s.submit(job("long", gpus=4, runtime=500, submitted_at=2), now=2)
    s.submit(job("short", gpus=4, runtime=50, submitted_at=3), now=3)
    r = s.step(now=4)
    assert r.reservation is not None and r.reservation.job == "head"
    assert r.reservation.start == 100
    assert r.placed == ("short",)  # ends at 54 <= 100
    assert r.pending["long"].code is ReasonCode.RESERVED
    finish(s, "short", now=54)
    assert s.step(now=60).placed == ()
    finish(s, "r1", now=100)
    assert s.step(now=100).placed[0] == "head"


@pytest.mark.parametrize("seed", range(12))
def test_easy_backfill_keeps_every_reservation_with_exact_estimates(seed: int) -> None:
    """Random workloads with exact runtimes: the head of each cycle starts no later than
    the first reservation made for it."""
    rng = np.random.default_rng(seed)
    s = scheduler(nodes(3), policy=EasyBackfill())
    end: dict[str, float] = {}
    promised: dict[str, float] = {}
    started: dict[str, float] = {}
    for i in range(25):
        s.submit(
            job(f"j{i}", gpus=int(rng.choice([1, 2, 4, 8])), replicas=int(rng.choice([1, 1, 2])),
                runtime=float(rng.integers(5, 60)), submitted_at=float(i // 3)),
            now=0.0,
        )  # fmt: skip
    t = 0.0
    while t < 2000 and len(started) < 25:
        for jid, e in list(end.items()):
            if e <= t and s.queue.status(jid).phase is JobPhase.RUNNING:
                finish(s, jid, now=t)
        r = s.step(now=t)
        if r.reservation is not None:
            promised.setdefault(r.reservation.job, r.reservation.start)
        for jid in r.placed:
            started[jid] = t
            est = s.queue.status(jid).job.runtime_estimate
            assert est is not None
            end[jid] = t + est
        nxt = [e for e in end.values() if e > t]
        t = min(nxt) if nxt else t + 1
    assert len(started) == 25
    assert promised  # reservations were made (the test is not vacuous)
    for jid, when in promised.items():
        assert started[jid] <= when, (jid, started[jid], when)


def _two_pools_with_two_blocked_jobs(policy: object) -> tuple[Scheduler, object]:
    """H100 node busy until 100, A100 node half busy until 200; h1 (H100) and h2 (A100) are
    blocked; x (A100, long) and y (A100, short) could start in the A100 node's free half."""
    from kant.testing import ClusterBuilder

    cluster = ClusterBuilder().leaf("lf0", nodes=1).leaf("lfa", nodes=1, model="A100").build()
    s = scheduler(cluster, policy=policy)
    s.submit(job("ra", gpus=8, models="H100", runtime=100), now=0)
    s.submit(job("rb", gpus=4, models="A100", runtime=200), now=0)
    s.step(now=0)
    s.submit(job("h1", gpus=8, models="H100", runtime=1000, submitted_at=1), now=1)
    s.submit(job("h2", gpus=8, models="A100", runtime=1000, submitted_at=2), now=2)
    s.submit(job("x", gpus=4, models="A100", runtime=500, submitted_at=3), now=3)
    s.submit(job("y", gpus=4, models="A100", runtime=50, submitted_at=4), now=4)
    return s, s.step(now=5)


def test_conservative_backfill_never_delays_any_reserved_job_where_easy_delays_the_second() -> None:
    from kant.queueing import ConservativeBackfill

    s, r = _two_pools_with_two_blocked_jobs(ConservativeBackfill())
    # x waits (it would delay h1) and books the A100 node after h2
    assert [(v.job, v.start) for v in r.reservations] == [("h1", 100), ("h2", 200), ("x", 1200)]
    assert r.reservation == r.reservations[0]
    assert r.placed == ("y",)  # ends at 55, before every reserved start
    assert r.pending["x"].code is ReasonCode.RESERVED and "h1" in r.pending["x"].message
    assert r.pending["h1"].message.endswith("reserved to start at 100")
    assert r.pending["h2"].message.endswith("reserved to start at 200")
    finish(s, "y", now=55)
    finish(s, "ra", now=100)
    assert s.step(now=100).placed == ("h1",)
    finish(s, "rb", now=200)
    assert s.step(now=200).placed == ("h2",)  # on time
    check_invariants(s)
    # EASY reserves for the head only: x starts and pushes h2 back to 505
    _s, r = _two_pools_with_two_blocked_jobs(EasyBackfill())
    assert [v.job for v in r.reservations] == ["h1"]
    assert r.placed == ("x",)
    assert r.pending["h1"].message.endswith("reserved to start at 100")


def test_conservative_backfill_reserves_for_at_most_depth_jobs() -> None:
    from kant.queueing import ConservativeBackfill

    _s, r = _two_pools_with_two_blocked_jobs(ConservativeBackfill(depth=1))
    assert [v.job for v in r.reservations] == ["h1"]
    assert r.placed == ("x",)


def test_conservative_backfill_refuses_a_bad_depth_or_runtime() -> None:
    from kant.errors import InvalidConfigError
    from kant.queueing import ConservativeBackfill, make_policy

    with pytest.raises(InvalidConfigError, match="depth"):
        ConservativeBackfill(depth=0)
    with pytest.raises(InvalidConfigError, match="default_runtime"):
        ConservativeBackfill(default_runtime=-1)
    for policy in (ConservativeBackfill, EasyBackfill):  # beyond the floats: not an OverflowError
        with pytest.raises(InvalidConfigError, match="default_runtime"):
            policy(default_runtime=10**400)
    assert make_policy("conservative-backfill", depth=3) == ConservativeBackfill(depth=3)


class _Answers:
    """A policy whose run answers every gate() with ``answer``."""

    name = "answers"

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def begin(self, ctx: Any) -> Any:
        answer = self.answer

        class Run:
            def gate(self, j: Any) -> Any:
                return answer

            def explain(self, j: Any, r: Any) -> Any:
                return r

            def failed(self, j: Any, r: Any) -> bool:
                return False

            def reservation(self) -> None:
                return None

        return Run()


@pytest.mark.parametrize("answer", [None, True, "skip"])
def test_a_policy_whose_gate_answers_something_else_than_a_gate_is_refused_naming_it(
    answer: Any,
) -> None:
    s = Scheduler(nodes(1), policy=_Answers(answer))
    s.submit(job("a", gpus=1), now=0)
    with pytest.raises(ValidationError, match="answers") as err:
        s.step(now=1)
    assert err.value.field == "policy"


class _Wrong:
    """A policy whose run answers one call (``call``) with ``answer``."""

    name = "wrong"

    def __init__(self, call: str, answer: Any) -> None:
        self.call, self.answer = call, answer

    def begin(self, ctx: Any) -> Any:
        if self.call == "begin":
            return self.answer
        wrong = {self.call: self.answer}

        class Run:
            def gate(self, j: Any) -> Gate:
                return Gate()

            def explain(self, j: Any, r: Any) -> Any:
                return wrong.get("explain", r)

            def failed(self, j: Any, r: Any) -> bool:
                return False

            def reservation(self) -> Any:
                return wrong.get("reservation")

            def closed(self) -> Any:
                return wrong.get("closed")

            def reservations(self) -> Any:
                return wrong.get("reservations", ())

            def time_horizon(self) -> Any:
                return wrong.get("time_horizon", np.float32(10.0))  # (numpy's numbers are)

        return Run()


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        ("begin", None),
        ("explain", None),
        ("explain", "no room"),
        ("reservation", "job b at 5"),
        ("reservations", None),
        ("reservations", ["job b at 5"]),
        ("closed", "closed"),
        ("closed", Gate()),  # (a closed gate skips every job left)
        ("time_horizon", None),
        ("time_horizon", "soon"),
    ],
)
def test_a_policy_run_answering_what_its_contract_does_not_allow_is_refused_naming_it(
    call: str, answer: Any
) -> None:
    # (each was an AttributeError, a ValueError or an assertion deep in the cycle)
    s = Scheduler(nodes(1), policy=_Wrong(call, answer))
    s.submit(job("a", gpus=8), now=0)
    s.submit(job("b", gpus=8), now=0)  # (not placed: explained)
    with pytest.raises(ValidationError, match="wrong") as err:
        s.step(now=1)
    assert err.value.field == "policy" and call in str(err.value)
    assert s.clock == 0 and s.cluster.num_pods == 0
    s.policy = _Wrong("none", None)
    assert s.step(now=1).placed == ("a",)
    check_invariants(s)


def test_a_gate_takes_numpy_bools_and_numbers_as_the_values_they_are() -> None:
    # a policy computing use_reserved=mask.any() or until from a numpy column was refused
    import numpy as np

    g = Gate(use_reserved=np.True_, until=np.float32(5.0))
    assert g.use_reserved is True and g.until == 5.0 and type(g.until) is float
    assert Gate(until=np.int64(7)).until == 7


@pytest.mark.parametrize(
    "fields", [{"skip": "not now"}, {"use_reserved": 1}, {"until": "soon"}, {"until": True}]
)
def test_a_gate_with_a_field_of_the_wrong_kind_is_refused_when_it_is_made(
    fields: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError) as err:
        Gate(**fields)
    assert err.value.field == next(iter(fields))
