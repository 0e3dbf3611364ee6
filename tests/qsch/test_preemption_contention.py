"""Preemption under contention: what a preemptor's nomination may hold from others, which
victims a reclaim chooses, and whose quota victims still to go count against."""

from __future__ import annotations

import pytest

from kant.admission import Quota
from kant.cycle import CycleResult
from kant.model import NodeSelector, ReasonCode, VictimReason
from kant.preemption import PreemptionPolicy
from kant.preemption.rules import Preemptor, VictimView
from kant.queueing import JobPhase
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, finish, nodes, pod, scheduler


def _start(s: Scheduler, t: float, jid: str, **kw: object) -> None:
    s.submit(job(jid, submitted_at=t, **kw), now=t)  # type: ignore[arg-type]
    r = s.step(now=t)
    assert r.placed == (jid,), r.pending


def _victims(r: CycleResult) -> list[tuple[str, str]]:
    return [(v.job, v.reason.value) for v in r.victims]


def test_a_preemptor_held_back_behind_a_new_head_gives_up_its_nomination() -> None:
    # Strict FIFO: p7 (priority 2) evicts lo and is nominated its GPU; h (priority 3, the
    # whole node) arrives and heads the queue, so p7 waits behind it. Once f ends, h must
    # get the node: p7, whose victim is gone and who cannot be placed before h, gives up
    # its nomination, else its GPU is held from h and nothing ever runs again.
    s = scheduler(nodes(1), policy="strict-fifo", preemption=PreemptionPolicy())
    s.submit(job("f", gpus=7, priority=5, preemptible=False), now=0)
    s.submit(job("lo", gpus=1), now=0)
    s.step(now=0)
    s.submit(job("p7", gpus=1, priority=2, submitted_at=1), now=1)
    r = s.step(now=1)
    assert _victims(r) == [("lo", "priority")]
    evict_victims(s, r, now=1.5)
    s.submit(job("h", gpus=8, priority=3, submitted_at=2), now=2)
    r = s.step(now=2)
    assert r.pending["p7"].message == "behind h" and r.dropped_nominations == ("p7",)
    finish(s, "f", now=3)
    assert s.step(now=3).placed == ("h",)
    check_invariants(s)


def _reclaim_or_priority(a_nominal: int, c_nominal: int) -> Scheduler:
    """lf0: c-hi (1 GPU, kept), c19 (2 GPUs, priority 2), c6 (1 GPU, priority 1); lf1: a-x
    (2 GPUs, kept) and b14 (2 GPUs, b borrows all). Then p (c, 1 GPU, priority 3) arrives."""
    cluster = ClusterBuilder().leaf("lf0", nodes=1, gpus=4).leaf("lf1", nodes=1, gpus=4).build()
    quotas = [Quota.gpus("a", "H100", a_nominal), Quota.gpus("b", "H100", 0),
              Quota.gpus("c", "H100", c_nominal)]  # fmt: skip
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    _start(s, 0, "c-hi", gpus=1, tenant="c", priority=3, preemptible=False)
    _start(s, 1, "c19", gpus=2, tenant="c", priority=2)
    _start(s, 2, "c6", gpus=1, tenant="c", priority=1)
    _start(s, 3, "a-x", gpus=2, tenant="a", priority=3, preemptible=False)
    _start(s, 4, "b14", gpus=2, tenant="b", priority=3)
    s.submit(job("p", gpus=1, tenant="c", priority=3, submitted_at=5), now=5)
    return s


def test_a_reclaim_spared_in_the_end_does_not_leave_a_victim_its_rule_made_needed() -> None:
    # p fits by evicting c6 alone; the search first evicted b14 too (a reclaim: c must then
    # stay within its nominal 2) and kept c19 for that rule, then spared b14
    s = _reclaim_or_priority(a_nominal=6, c_nominal=2)
    assert _victims(s.step(now=5)) == [("c6", "priority")]


def test_a_lower_priority_victim_is_chosen_once_no_reclaim_is_needed() -> None:
    # with c's nominal 3 the search kept c19 (priority 2) and spared c6 (priority 1) while
    # the reclaim of b14 was in, then spared b14; c6 alone does
    s = _reclaim_or_priority(a_nominal=5, c_nominal=3)
    assert _victims(s.step(now=5)) == [("c6", "priority")]


def test_a_victim_whose_preemptor_started_elsewhere_no_longer_counts_as_its_tenants_use() -> None:
    # b runs 10 GPUs against a nominal of 8; a1 reclaims b4 (2 GPUs) and, before b4 is gone,
    # starts on GPUs a0 freed. b4 still terminating brings b to its nominal 8: a2 (within
    # a's nominal) must not reclaim from b a second time.
    cluster = ClusterBuilder().leaf("lf0", nodes=2, gpus=8).leaf("lf1", nodes=1, gpus=4).build()
    quotas = [Quota.gpus("a", "H100", 12), Quota.gpus("b", "H100", 8), Quota.gpus("c", "H100", 0)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    specs = [("c0", "c", 4), ("b1", "b", 4), ("b2", "b", 4), ("a0", "a", 2), ("a00", "a", 2),
             ("a000", "a", 2), ("b4", "b", 2)]  # fmt: skip
    for t, (jid, tenant, g) in enumerate(specs):
        _start(s, t, jid, gpus=g, tenant=tenant, preemptible=jid != "c0")
    s.submit(job("a1", gpus=2, tenant="a", submitted_at=7), now=7)
    assert _victims(s.step(now=7)) == [("b4", "reclaim")]
    finish(s, "a0", now=8)
    assert s.step(now=8).placed == ("a1",)
    s.submit(job("a2", gpus=4, tenant="a", submitted_at=9), now=9)
    r = s.step(now=9)
    assert r.victims == ()
    check_invariants(s)


def _strict_reclaim() -> Scheduler:
    """Racks r0 and r1, 2 x 8 GPUs each; quotas a 8, b 8, iso 8 (isolated). a's ``big``
    (priority 1, a gang of 4 x 4 GPUs held to r0) runs, borrowing 8; iso's ``small``
    (priority 0, 2 GPUs held to r0) arrives, within iso's nominal quota."""
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=2, labels={"rack": "r0"})
        .leaf("lf1", nodes=2, labels={"rack": "r1"})
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8),
              Quota.gpus("iso", "H100", 8)]  # fmt: skip
    s = scheduler(cluster, policy="strict-fifo", quotas=quotas, modes={"iso": "isolated"},
                  preemption=PreemptionPolicy())  # fmt: skip
    r0 = NodeSelector.labels(rack="r0")
    _start(s, 0, "big", gpus=4, replicas=4, gang=True, tenant="a", priority=1, selector=r0)
    s.submit(job("small", gpus=2, tenant="iso", submitted_at=1, selector=r0), now=1)
    return s


def _evictions_in_nine_cycles(s: Scheduler) -> int:
    """Victim units chosen over cycles at t=1..9, each cycle's victims gone half a second
    after it."""
    evictions = 0
    for t in range(1, 10):
        r = s.step(now=t)
        evictions += len(r.victims)
        evict_victims(s, r, now=t + 0.5)
    return evictions


def test_a_strict_fifo_reclaimer_passes_its_victim_heading_the_queue_and_starts() -> None:
    # small reclaims big (a reclaim takes any priority); big, requeued as of its submission
    # and of higher priority, heads the queue and cannot fit while small's nomination holds
    # 2 of r0's GPUs. It used to block small behind it, small's nomination was dropped, big
    # started again and small evicted it again, every 3 cycles for ever. Now small, whose
    # victim is the head blocking it, passes it and starts; big waits for the room.
    s = _strict_reclaim()
    assert _evictions_in_nine_cycles(s) == 1
    assert s.queue.status("small").phase is JobPhase.RUNNING
    assert s.queue.status("big").phase is JobPhase.PENDING
    assert "needs 16 GPUs" in s.step(now=10).pending["big"].message
    check_invariants(s)


def _own_tenant_any(pre: Preemptor, unit: VictimView, borrowing: object) -> VictimReason | None:
    """A user rule: any unit of the preemptor's own tenant may be taken."""
    return VictimReason.PRIORITY if unit.tenant == pre.tenant else None


def test_a_strict_fifo_preemptor_passes_its_victim_heading_its_tenant_queue_for_quota() -> None:
    # The same under a tenant's quota block: a user rule lets p (a, priority 0) take v (a,
    # priority 1, all of a's 8 GPUs). v, requeued ahead of p, is refused by quota while p's
    # nomination holds 2 of a's GPUs, and blocked the rest of a's queue, p included: v
    # started again and p evicted it again, every 3 cycles. Now p passes and starts. (The
    # rule lets any job of a take any other, so once p's cascade window is over v takes p
    # back by priority, and so on, an hour apart: the rule's own churn, past these cycles.)
    s = scheduler(nodes(2), policy="strict-fifo", quotas=[Quota.gpus("a", "H100", 8)],
                  preemption=PreemptionPolicy(rules=(_own_tenant_any,)))  # fmt: skip
    _start(s, 0, "v", gpus=8, tenant="a", priority=1)
    s.submit(job("p", gpus=2, tenant="a", submitted_at=1), now=1)
    assert _evictions_in_nine_cycles(s) == 1
    assert s.queue.status("p").phase is JobPhase.RUNNING
    assert s.step(now=10).pending["v"].code is ReasonCode.QUOTA_EXCEEDED
    check_invariants(s)


@pytest.mark.parametrize("policy", ["strict-fifo", "best-effort-fifo"])
def test_a_victim_taken_for_quota_is_given_back_when_its_own_tenants_preemptor_frees_it(
    policy: str,
) -> None:
    # Found by the contention machine under Strict FIFO. a runs a-pods (two 4-GPU pods) and
    # a-small (2 GPUs, newest), borrowing 2 of b's 8. b-big (b, 8 GPUs, priority 1, within
    # b's nominal) goes first and reclaims a-small for quota; a-hi (a, 2 GPUs, priority 1)
    # then takes a pod of a-pods by priority: 4 GPUs for its 2, and a is back within its
    # nominal quota even with a-small running. a-small used to be evicted all the same (its
    # tenant had a nominated preemptor, a-hi, so it was never given back): under Strict FIFO
    # it then waited behind a-pods' requeued pod (which needs 4 GPUs of the 2 left) and the
    # devices it left sat idle; otherwise it started again at once. Now it is given back
    # (a stays within nominal with it) and b-big waits for a-pods' pod instead.
    s = scheduler(nodes(4, leaves=2), policy=policy,
                  quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)],
                  preemption=PreemptionPolicy())  # fmt: skip
    _start(s, 0, "a-pods", gpus=4, replicas=2, gang=False, tenant="a")
    _start(s, 1, "a-small", gpus=2, tenant="a")
    s.submit(job("a-hi", gpus=2, priority=1, tenant="a", submitted_at=2), now=2)
    s.submit(job("b-big", gpus=8, priority=1, tenant="b", submitted_at=2), now=2)
    r = s.step(now=2)
    assert [(v.job, v.reason.value, v.preemptor) for v in r.victims] == [
        ("a-pods", "priority", "a-hi")
    ]
    noms = {n.job: n for n in r.nominations}
    assert noms["b-big"].victims == noms["a-hi"].victims == (pod("a-pods"),)
    evict_victims(s, r, now=2.5)
    assert sorted(s.step(now=3).placed) == ["a-hi", "b-big"]
    assert s.queue.status("a-small").running == (pod("a-small"),)
    assert s.admitter.used("a", "H100") == s.admitter.used("b", "H100") == 8000
    check_invariants(s)


def test_a_victim_is_not_given_back_when_its_tenant_would_borrow_under_its_reclaimer() -> None:
    # The limit of that rule. a runs a-keep (4 GPUs, priority 2), a-lo (2) and v (4,
    # newest), borrowing 2; c runs c-big (8) and c-x (6), borrowing 6. q (b, 4 GPUs,
    # priority 1) reclaims v. l (a, 4 GPUs, priority 1) is within a's nominal once a-lo is
    # gone, and reclaims c-x for the 2 GPUs of quota it still lacks: 6 freed, 4 more than
    # it needs, so v charged again would fit the cohort; but a would then use 12 of its 8
    # while l took c's borrowed unit to keep a within nominal. A reclaimer never ends
    # borrowing: v is not given back.
    quotas = [Quota.gpus(t, "H100", 8) for t in ("a", "b", "c")]
    s = scheduler(nodes(5), quotas=quotas, preemption=PreemptionPolicy())
    _start(s, 0, "c-big", gpus=8, tenant="c")
    _start(s, 1, "c-x", gpus=6, tenant="c")
    _start(s, 2, "a-keep", gpus=4, tenant="a", priority=2)
    _start(s, 3, "a-lo", gpus=2, tenant="a")
    _start(s, 4, "v", gpus=4, tenant="a")
    s.submit(job("q", gpus=4, tenant="b", priority=1, submitted_at=5), now=5)
    s.submit(job("l", gpus=4, tenant="a", priority=1, submitted_at=5), now=5)
    r = s.step(now=5)
    assert [(v.job, v.reason.value, v.preemptor) for v in r.victims] == [
        ("v", "reclaim", "q"),
        ("c-x", "reclaim", "l"),
        ("a-lo", "priority", "l"),
    ]
    assert all(n.within_nominal for n in r.nominations)
    evict_victims(s, r, now=5.5)
    assert {"l", "q"} <= set(s.step(now=6).placed)
    assert s.queue.status("v").phase is JobPhase.PENDING
    check_invariants(s)


def _racks_with_victims(
    h_gpus: int, h_priority: int = 1, *, window: float = 3600.0, b_nominal: int | None = None
) -> Scheduler:
    """Racks r0 and r1, one 8-GPU node each, Strict FIFO (``window``: the cascade window).
    Kept (priority 5, not preemptible): ``fa`` on r0, ``fb`` (6 GPUs) on r1. ``h``
    (``h_priority``, ``h_gpus`` GPUs, on any rack) runs on r0 beside ``fa`` (8 - ``h_gpus``
    GPUs), ``v`` (priority 0, 2 GPUs) on r1. With ``b_nominal``, quotas apply: ``fa`` and
    ``fb`` are tenant k's (nominal 16: 4 GPUs to lend), ``h`` (and ``q``, :func:`_p_then_q`) a's (nominal
    4), ``v`` (and ``p``) b's (nominal ``b_nominal``)."""
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=1, labels={"rack": "r0"})
        .leaf("lf1", nodes=1, labels={"rack": "r1"})
        .build()
    )
    quotas = None
    if b_nominal is not None:
        quotas = [Quota.gpus("k", "H100", 16), Quota.gpus("a", "H100", 4),
                  Quota.gpus("b", "H100", b_nominal)]  # fmt: skip
    s = scheduler(
        cluster,
        policy="strict-fifo",
        quotas=quotas,
        preemption=PreemptionPolicy(cascade_window=window),
    )
    k, a, b = ({"tenant": t} if quotas else {} for t in "kab")
    r0, r1 = NodeSelector.labels(rack="r0"), NodeSelector.labels(rack="r1")
    _start(s, 0, "fa", gpus=8 - h_gpus, priority=5, preemptible=False, selector=r0, **k)
    _start(s, 0, "fb", gpus=6, priority=5, preemptible=False, selector=r1, **k)
    _start(s, 0, "h", gpus=h_gpus, priority=h_priority, **a)
    _start(s, 0, "v", gpus=2, selector=r1, **b)
    return s


def _p_then_q(s: Scheduler, q_gpus: int) -> None:
    """``p`` (priority 1, 2 GPUs on r1) evicts ``v``; while ``v`` goes, ``q`` (priority 3,
    ``q_gpus`` GPUs on r0) evicts ``h``; both victims are then gone (``p`` and ``q`` are of
    ``v``'s and ``h``'s tenants)."""
    a, b = s.queue.entry("h").job.tenant, s.queue.entry("v").job.tenant
    s.submit(job("p", gpus=2, priority=1, submitted_at=1, tenant=b,
                 selector=NodeSelector.labels(rack="r1")), now=1)  # fmt: skip
    r1 = s.step(now=1)
    assert _victims(r1) == [("v", "priority")]
    s.submit(job("q", gpus=q_gpus, priority=3, submitted_at=2, tenant=a,
                 selector=NodeSelector.labels(rack="r0")), now=2)  # fmt: skip
    r2 = s.step(now=2)
    assert _victims(r2) == [("h", "priority")] and r2.placed == ()
    evict_victims(s, r1, now=2.5)
    evict_victims(s, r2, now=2.5)


def _evictions_until(s: Scheduler, end: float) -> list[str]:
    """Step every 100 s (and at ``end``) from 100 to ``end``, the victims stopped at once;
    the jobs evicted, in order."""
    out: list[str] = []
    for t in [*range(100, int(end), 100), end]:
        r = s.step(now=t)
        out += [v.job for v in r.victims]
        evict_victims(s, r, now=t + 0.5)
        check_invariants(s)
    return out


@pytest.mark.parametrize("window", [3600.0, 0.0])
def test_a_strict_fifo_preemptor_passes_a_victim_only_its_nomination_keeps_out(
    window: float,
) -> None:
    # p evicts v for r1; q then evicts h (priority 1 as p, ahead of p) from r0. Requeued, h
    # heads the queue and fits nowhere: r0 is q's, and r1's free GPUs are v's, held for p.
    # p used to be held behind h and give up its nomination; h then started on v's GPUs, and
    # p waited for r1 to free up again: v was evicted for nothing. h still ran when p
    # preempted, only p's nomination keeps it out, and h can never preempt p (its priority
    # is not above p's): p passes h and starts on v's GPUs, and stays there once h may
    # preempt again (with any cascade window, Kueue's 0 too); h waits for room, which it
    # gets first when it frees.
    s = _racks_with_victims(h_gpus=2, window=window)
    _p_then_q(s, q_gpus=2)
    r = s.step(now=3)
    assert r.placed == ("q", "p") and r.dropped_nominations == ()
    assert r.pending["h"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert r.pending["v"].message == "behind h"
    assert _evictions_until(s, 3700.0) == []
    finish(s, "q", now=3800)
    assert s.step(now=3800).placed == ("h",)
    check_invariants(s)


def test_a_strict_fifo_preemptor_does_not_pass_a_higher_priority_victim_that_would_evict_it() -> (
    None
):
    # The same with h of priority 2, above p. Passed, p would start on v's GPUs, and once
    # h's cascade window ended (an hour) h would evict p by priority and start there: v, h
    # and p evicted where v and h do, and h an hour late. h blocks p as any head does: p
    # gives up its nomination, h starts on v's GPUs a cycle later, and nobody else is
    # evicted.
    s = _racks_with_victims(h_gpus=2, h_priority=2)
    _p_then_q(s, q_gpus=2)
    r = s.step(now=3)
    assert r.placed == ("q",) and r.dropped_nominations == ("p",)
    assert r.pending["p"].message == "behind h"
    assert s.step(now=4).placed == ("h",)
    assert _evictions_until(s, 3700.0) == []
    assert s.queue.status("p").phase is JobPhase.PENDING
    check_invariants(s)


@pytest.mark.parametrize(("b_nominal", "passes"), [(2, True), (0, False)])
def test_a_strict_fifo_preemptor_passes_another_tenants_victim_only_within_its_nominal_quota(
    b_nominal: int, passes: bool
) -> None:
    # The first scenario with quotas: h and q are a's, p and v b's. With b's nominal quota
    # 2, b borrows nothing with p started: its use is guaranteed, h (a's) cannot reclaim it,
    # and p passes h. With b's nominal 0, b borrows with p started: once h's cascade window
    # ended, a's h (within a's nominal) could reclaim p's GPUs; so h blocks p, p gives up its
    # nomination and h starts on v's GPUs a cycle later.
    s = _racks_with_victims(h_gpus=2, b_nominal=b_nominal)
    _p_then_q(s, q_gpus=2)
    r = s.step(now=3)
    if passes:
        assert r.placed == ("q", "p") and r.dropped_nominations == ()
        assert s.step(now=4).placed == ()
    else:
        assert r.placed == ("q",) and r.dropped_nominations == ("p",)
        assert s.step(now=4).placed == ("h",)
    assert _evictions_until(s, 3700.0) == []
    check_invariants(s)


def test_a_strict_fifo_preemptor_stays_behind_a_victim_needing_more_room() -> None:
    # The first scenario with h of 4 GPUs: v's 2 do not make it fit, so p's nomination is
    # not what keeps it out. h blocks p as any head does: p gives up its nomination, v's
    # GPUs stay free (nobody behind h may take them), and once q ends h starts first, then
    # p.
    s = _racks_with_victims(h_gpus=4)
    _p_then_q(s, q_gpus=4)
    r = s.step(now=3)
    assert r.placed == ("q",) and r.dropped_nominations == ("p",)
    assert r.pending["p"].message == "behind h"
    finish(s, "q", now=4)
    assert s.step(now=4).placed == ("h", "p")
    assert s.queue.status("v").phase is JobPhase.PENDING
    check_invariants(s)


def test_a_strict_fifo_preemptor_gives_its_nomination_to_a_new_head_that_needs_it() -> None:
    # p evicts v for r1; while v goes, h2 (priority 2, 2 GPUs on r1) arrives and heads the
    # queue. Only p's nomination keeps it out, but h2 did not run when p preempted (it
    # arrived since), and it may preempt: passed, p would start and h2 would evict it a
    # cycle later. Strict FIFO keeps its order: p gives up its nomination and h2 starts on
    # v's GPUs (one eviction, not two).
    s = _racks_with_victims(h_gpus=2)
    r1 = NodeSelector.labels(rack="r1")
    s.submit(job("p", gpus=2, priority=1, submitted_at=1, selector=r1), now=1)
    r = s.step(now=1)
    assert _victims(r) == [("v", "priority")]
    s.submit(job("h2", gpus=2, priority=2, submitted_at=2, selector=r1), now=2)
    assert s.step(now=2).victims == ()
    evict_victims(s, r, now=2.5)
    r = s.step(now=3)
    assert r.placed == () and r.dropped_nominations == ("p",)
    assert s.step(now=4).placed == ("h2",)
    check_invariants(s)


def _racks_of_two_tenants(b_nominal: int) -> Scheduler:
    """Racks r0 and r1, one 8-GPU node each, Strict FIFO, quotas: k 16 (the kept jobs'),
    a 4 (it borrows nothing: ``borrowing_limit=0``), b ``b_nominal``."""
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=1, labels={"rack": "r0"})
        .leaf("lf1", nodes=1, labels={"rack": "r1"})
        .build()
    )
    quotas = [Quota.gpus("k", "H100", 16), Quota.gpus("a", "H100", 4, borrowing_limit=0),
              Quota.gpus("b", "H100", b_nominal)]  # fmt: skip
    return scheduler(cluster, policy="strict-fifo", quotas=quotas, preemption=PreemptionPolicy())


def test_a_strict_fifo_preemptor_gives_its_nomination_to_a_victim_already_waiting_when_it_preempted() -> (
    None
):
    # q evicts h before p preempts: h waits, held back by its tenant's quota only, so b's p,
    # behind h, still preempts v. Once a's quota frees, h heads the queue and only p's
    # nomination keeps it out, and h can never preempt p (its priority is p's; b borrows
    # nothing with p started). But h was not running when p preempted: it was already
    # waiting, ahead of p, so it takes the room as any head does (p passes only a head
    # that still ran when it preempted). p gives up its nomination and h starts on v's GPUs
    # a cycle later.
    s = _racks_of_two_tenants(b_nominal=4)
    r0, r1 = NodeSelector.labels(rack="r0"), NodeSelector.labels(rack="r1")
    _start(s, 0, "fa", gpus=4, priority=5, preemptible=False, selector=r0, tenant="k")
    _start(s, 0, "fb", gpus=6, priority=5, preemptible=False, selector=r1, tenant="k")
    _start(s, 0, "h", gpus=2, priority=1, selector=r0, tenant="a")
    _start(s, 0, "v", gpus=2, selector=r0, tenant="b")
    _start(s, 0, "u", gpus=2, selector=r1, tenant="a")
    # 1. q (a's, priority 3) evicts h from r0; h is requeued and blocks a's queue for quota
    s.submit(job("q", gpus=2, priority=3, submitted_at=1, selector=r0, tenant="a"), now=1)
    r = s.step(now=1)
    assert _victims(r) == [("h", "priority")]
    evict_victims(s, r, now=1.5)
    r = s.step(now=1.5)
    assert r.placed == ("q",) and r.pending["h"].code is ReasonCode.QUOTA_EXCEEDED
    # 2. b's p, behind h but not of its tenant, evicts v for r0 while h waits
    s.submit(job("p", gpus=2, priority=1, submitted_at=2, selector=r0, tenant="b"), now=2)
    r = s.step(now=2)
    assert _victims(r) == [("v", "priority")]
    assert r.pending["h"].code is ReasonCode.QUOTA_EXCEEDED
    evict_victims(s, r, now=2.5)
    # 3. u ends: a's quota lets h in, and only p's nomination keeps it out of r0
    finish(s, "u", now=3)
    r = s.step(now=3)
    assert r.placed == () and r.dropped_nominations == ("p",)
    assert r.pending["h"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert r.pending["p"].message == "behind h"
    assert s.step(now=4).placed == ("h",)
    check_invariants(s)


def test_a_strict_fifo_preemptor_does_not_pass_its_tenants_quota_head_on_another_tenants_nomination() -> (
    None
):
    # a's p evicts v for r0 and b's p2 evicts v2 for r1; then q evicts h (a's, as p) from r1.
    # Requeued, h heads a's queue and is refused by quota while p's nomination holds a's
    # quota; it would fit with p's quota free and p2's room on r1 free. But a's quota block
    # holds back a's jobs only: p2 is not held back and starts on its room in that cycle,
    # so only p's nomination counts, and with it alone free h still fits nowhere (it needs
    # r1). p stays behind h and gives up its nomination; p2 starts.
    s = _racks_of_two_tenants(b_nominal=8)
    r0, r1 = NodeSelector.labels(rack="r0"), NodeSelector.labels(rack="r1")
    _start(s, 0, "fa", gpus=6, priority=5, preemptible=False, selector=r0, tenant="k")
    _start(s, 0, "fb", gpus=4, priority=5, preemptible=False, selector=r1, tenant="k")
    _start(s, 0, "h", gpus=2, priority=1, selector=r1, tenant="a")
    _start(s, 0, "v", gpus=2, selector=r0, tenant="a")
    _start(s, 0, "v2", gpus=2, selector=r1, tenant="b")
    # 1. p evicts v (for a's quota and r0) and p2 evicts v2 (for r1)
    s.submit(job("p", gpus=2, priority=1, submitted_at=1, selector=r0, tenant="a"), now=1)
    s.submit(job("p2", gpus=2, priority=1, submitted_at=1, selector=r1, tenant="b"), now=1)
    first = s.step(now=1)
    assert _victims(first) == [("v", "priority"), ("v2", "priority")]
    # 2. q (a's, priority 3) evicts h from r1 while v and v2 go
    s.submit(job("q", gpus=2, priority=3, submitted_at=2, selector=r1, tenant="a"), now=2)
    r = s.step(now=2)
    assert _victims(r) == [("h", "priority")]
    evict_victims(s, first, now=2.5)
    evict_victims(s, r, now=2.5)
    # 3. every victim gone: h blocks a's queue for quota, and p does not pass it
    r = s.step(now=3)
    assert r.placed == ("q", "p2") and r.dropped_nominations == ("p",)
    assert r.pending["h"].code is ReasonCode.QUOTA_EXCEEDED
    assert r.pending["p"].message == "behind h (tenant quota)"
    check_invariants(s)


def test_with_user_victim_rules_a_strict_fifo_preemptor_does_not_pass_another_preemptors_victim() -> (
    None
):
    # The first scenario with a user victim rule that decides nothing itself (it defers to
    # the built-in rules): a user rule may make any unit a victim of any job, so no head is
    # known never to preempt p, and h blocks p as any head does: p gives up its nomination
    # and h starts on v's GPUs a cycle later.
    s = _racks_with_victims(h_gpus=2)
    s.preemption = PreemptionPolicy(rules=[_defer])
    _p_then_q(s, q_gpus=2)
    r = s.step(now=3)
    assert r.placed == ("q",) and r.dropped_nominations == ("p",)
    assert s.step(now=4).placed == ("h",)
    check_invariants(s)


def _defer(pre: Preemptor, unit: VictimView, borrowing: object) -> None:
    """A victim rule that leaves every unit to the next rule."""
    return None


def _two_racks(
    r1_nodes: int,
    quotas: list[Quota],
    *,
    isolated: tuple[str, ...] = (),
    policy: str = "best-effort-fifo",
) -> Scheduler:
    """One 8-GPU node on rack r0 and ``r1_nodes`` on rack r1; tenant iso isolated with 8
    GPUs, and ``quotas`` (their tenants in ``isolated`` isolated too); E-Binpack, every
    preemption rule."""
    from kant.admission import Admitter
    from kant.placement import Placer

    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=1, labels={"rack": "r0"})
        .leaf("lf1", nodes=r1_nodes, labels={"rack": "r1"})
        .build()
    )
    modes = dict.fromkeys(("iso", *isolated), "isolated")
    return Scheduler(
        cluster,
        admitter=Admitter([Quota.gpus("iso", "H100", 8), *quotas], modes=modes),
        placer=Placer("ebinpack"), policy=policy, preemption=PreemptionPolicy(),
    )  # fmt: skip


@pytest.mark.parametrize(
    "policy",
    ["strict-fifo", "best-effort-fifo", "backfill", "easy-backfill", "conservative-backfill"],
)
def test_a_pod_level_preemptor_started_in_part_keeps_the_devices_nominated_for_the_rest(
    policy: str,
) -> None:
    # iso's hi (3 pods of 4 GPUs, on rack r1 only) evicts both pods of iso's lo: the one on
    # r1 for room, the one on r0 for quota, and is nominated both halves of the r1 node.
    # The r1 victim goes; the r0 one still terminates, so the live quota admits one pod of
    # hi. It starts that pod; the devices nominated for its second pod stay held while the
    # r0 victim goes (c's small job does not start on them), and hi chooses no new victim.
    # Its nomination used to end with its first pod: c's job started on those devices and
    # hi evicted it a cycle later, its first victim still going.
    s = _two_racks(1, [Quota.gpus("a", "H100", 8)], policy=policy)
    s.submit(job("lo", gpus=4, replicas=2, gang=False, max_per_node=1, tenant="iso"), now=0)
    s.step(0)
    r1 = NodeSelector.labels(rack="r1")
    s.submit(job("hi", gpus=4, replicas=3, gang=False, priority=2, tenant="iso", selector=r1), 1)
    r = s.schedule(2)
    s.apply(r, 2)
    assert sorted(p.index for v in r.victims for p in v.pods) == [0, 1]
    held = {b.pod.index: b.gpus for b in r.nominations[0].bindings}
    (gone,) = [b.pod for b in s.status("lo").bindings if b.node == "lf1-n0"]
    s.pod_evicted(gone, 2.5)
    s.submit(job("cj", gpus=2, tenant="c", selector=r1), now=2.5)
    r = s.schedule(3)
    s.apply(r, 3)
    (started,) = [b for b in r.bindings if b.pod.job == "hi"]
    assert [b.pod.job for b in r.bindings] == ["hi"]  # cj waits: the rest is held
    e = s.queue.entry("hi")
    assert e.nomination is not None  # the part of it for the pod not started
    rest = {b.pod.index: b.gpus for b in e.nomination.bindings}
    assert rest == {i: g for i, g in held.items() if i != started.pod.index}
    assert e.reason is not None and e.reason.code is ReasonCode.PREEMPTING
    r = s.schedule(4)
    assert r.victims == () and "cj" not in r.placed
    s.apply(r, 4)
    (last,) = [p for p in s.queue.entry("lo").terminating]
    s.pod_evicted(last, 4.5)  # its last victim gone: the pod left starts where it was held
    r = s.schedule(5)
    s.apply(r, 5)
    assert {b.pod.index: b.gpus for b in r.bindings if b.pod.job == "hi"} == rest
    assert s.queue.entry("hi").nomination is None and r.victims == ()
    check_invariants(s)


def test_a_pod_level_preemptor_whose_first_pod_starts_on_its_second_pods_devices_holds_the_first_pods_for_the_rest() -> (
    None
):
    # hi's pods are nominated on lf1-n0 (0-3, lo's pod there evicted) and lf1-n1 (4-7,
    # where c's xA runs); lo's other pod, on r0, is evicted for iso's quota. lo's lf1-n0
    # pod goes and xA ends: hi's pod 0 starts on lf1-n1 4-7, the devices nominated for its
    # pod 1. The part kept for pod 1 is lf1-n0 0-3 (the devices its pod 0 did not take),
    # held there: c's 8-GPU job does not start on lf1-n0, and hi's pod 1 starts there once
    # lo's last pod is gone, no new victim chosen
    from kant.model import Binding, Job, PodId

    s = _two_racks(2, [Quota.gpus("c", "H100", 16)], isolated=("c",))

    def at(j: Job, i: int, node: str, gpus: tuple[int, ...]) -> Binding:
        return Binding(pod=PodId(job=j.id, role=j.roles[0].name, index=i), node=node, gpus=gpus)

    lo = job("lo", gpus=4, replicas=2, gang=False, tenant="iso")
    s.restore(lo, [at(lo, 0, "lf1-n0", (0, 1, 2, 3)), at(lo, 1, "lf0-n0", (0, 1, 2, 3))], 0)
    xa, xb = job("xA", gpus=4, tenant="c"), job("xB", gpus=4, tenant="c")
    s.restore(xa, [at(xa, 0, "lf1-n0", (4, 5, 6, 7))], 0)
    s.restore(xb, [at(xb, 0, "lf1-n1", (0, 1, 2, 3))], 0)
    r1 = NodeSelector.labels(rack="r1")
    s.submit(job("hi", gpus=4, replicas=2, gang=False, priority=2, tenant="iso", selector=r1), 1)
    r = s.schedule(2)
    s.apply(r, 2)
    assert {b.pod.index: b.node for b in r.nominations[0].bindings} == {0: "lf1-n0", 1: "lf1-n1"}
    s.pod_evicted(at(lo, 0, "lf1-n0", (0,)).pod, 2.5)
    s.pod_finished(at(xa, 0, "lf1-n0", (4,)).pod, 2.6)
    r = s.schedule(3)
    s.apply(r, 3)
    assert [(b.pod.index, b.node) for b in r.bindings] == [(0, "lf1-n1")]
    kept = s.queue.entry("hi").nomination
    assert kept is not None
    assert [(b.pod.index, b.node, b.gpus) for b in kept.bindings] == [(1, "lf1-n0", (0, 1, 2, 3))]
    s.submit(job("cj", gpus=8, tenant="c", selector=r1), now=3.5)
    r = s.schedule(4)
    s.apply(r, 4)
    assert r.bindings == () and r.victims == ()
    s.pod_evicted(at(lo, 1, "lf0-n0", (0,)).pod, 4.5)
    r = s.schedule(5)
    s.apply(r, 5)
    assert [(b.pod.job, b.pod.index, b.node) for b in r.bindings] == [("hi", 1, "lf1-n0")]
    assert r.victims == ()
    check_invariants(s)
