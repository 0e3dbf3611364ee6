"""Reclaim victims: where a reclaim's units count (quota anywhere, room only on the nodes the
preemptor may use), the victims of one cycle minimal together (a later reclaim that frees
more quota than it needs gives back what an earlier one took for quota), whose units a
reclaim takes (of tenants borrowing on the GPU models it is for; none of a job preempting in
the same cycle) and which of a borrower's units (a second walk when victim order takes the
ones that free no room first, ranking units by the room they free on the nodes the preemptor
may use)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kant.admission import Quota
from kant.cycle import CycleResult
from kant.model import Job, NodeSelector, ReasonCode, Resources, Role
from kant.preemption import PreemptionPolicy
from kant.preemption.rules import VictimView
from kant.queueing import JobPhase
from kant.scheduler import Scheduler
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, pod, scheduler

R0 = NodeSelector.labels(rack="r0")
R1 = NodeSelector.labels(rack="r1")


def _racks(r0_nodes: int = 2) -> Scheduler:
    """Rack r0 (leaf lf0) and rack r1 (leaf lf1, 2 nodes) of 8-GPU nodes; tenants a and b
    with 8 GPUs nominal each (one cohort of 16)."""
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=r0_nodes, labels={"rack": "r0"})
        .leaf("lf1", nodes=2, labels={"rack": "r1"})
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)]
    return scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())


def _start(s: Scheduler, t: float, jid: str, **kw: object) -> None:
    s.submit(job(jid, submitted_at=t, **kw), now=t)  # type: ignore[arg-type]
    r = s.step(now=t)
    assert r.placed == (jid,), r.pending


def _victims(r: CycleResult) -> list[tuple[str, str, str]]:
    return [(v.job, v.reason.value, v.preemptor) for v in r.victims]


def _nodes(r: CycleResult, jid: str) -> set[str]:
    return {b.node for n in r.nominations if n.job == jid for b in n.bindings}


@pytest.mark.parametrize(
    ("r0_nodes", "victims"),
    [
        pytest.param(
            2, [("a-small", "reclaim", "p")],
            id="a reclaim held to one rack takes a small unit on another rack for quota "
            "alone rather than the large unit on its own rack",
        ),
        pytest.param(
            1, [("a-big", "reclaim", "p")],
            id="room still comes only from the nodes the preemptor may use: the unit on "
            "another rack frees quota but no room there, and is spared",
        ),
    ],
)  # fmt: skip
def test_a_reclaim_counts_units_anywhere_toward_quota_and_on_its_nodes_toward_room(
    r0_nodes: int, victims: list[tuple[str, str, str]]
) -> None:
    # b runs 4 GPUs on r1; a runs 2 GPUs on r1, an 8-GPU gang on r0 and, newest (first in
    # victim order), 2 more GPUs on r1: the cohort's 16 are in use, a borrows 4 (and still
    # does once its newest unit is gone). p (b, held to r0) needs 2 GPUs of quota; with two
    # r0 nodes the second has room for it, with one it has none
    s = _racks(r0_nodes)
    _start(s, 0, "b0", gpus=4, tenant="b", selector=R1)
    _start(s, 1, "a-old", gpus=2, tenant="a", selector=R1)
    _start(s, 2, "a-big", gpus=4, replicas=2, tenant="a", selector=R0)
    _start(s, 3, "a-small", gpus=2, tenant="a", selector=R1)
    s.submit(job("p", gpus=2, tenant="b", selector=R0, submitted_at=4), now=4)
    r = s.step(now=4)
    assert _victims(r) == victims
    assert _nodes(r, "p") <= {f"lf0-n{i}" for i in range(r0_nodes)}
    evict_victims(s, r, now=5)
    assert s.step(now=6).placed == ("p",)
    check_invariants(s)


def _two_reclaims(b2_unit: Sequence[tuple[str, int]]) -> tuple[Scheduler, CycleResult]:
    """a uses the whole cohort: ``b2_unit`` (one-pod jobs on r0, as (id, GPUs)), a-pods (two
    2-GPU pods on r1, newer) and 4 GPUs at priority 1 on r1 (last in victim order); then
    b1 (2 GPUs, any node) and b2 (two 2-GPU pods, held to r0) arrive in one cycle. b1
    reclaims a-pods' first pod; b2 needs 4 GPUs of quota, and a-pods' second pod alone
    does not free them."""
    s = _racks()
    t = 0
    for jid, gpus in b2_unit:
        _start(s, t, jid, gpus=gpus, tenant="a", selector=R0)
        t += 1
    _start(s, t, "a-pods", gpus=2, replicas=2, gang=False, tenant="a", selector=R1)
    _start(s, t + 1, "a-hi", gpus=4, priority=1, tenant="a", selector=R1)
    if sum(g for _j, g in b2_unit) < 8:
        _start(s, t + 2, "a-x", gpus=4, priority=1, tenant="a", selector=R1)
    now = t + 3
    s.submit(job("b1", gpus=2, tenant="b", submitted_at=now), now=now)
    s.submit(job("b2", gpus=2, replicas=2, gang=False, tenant="b", selector=R0,
                 submitted_at=now), now=now)  # fmt: skip
    return s, s.step(now=now)


def test_a_reclaim_that_frees_more_than_it_needs_gives_back_what_an_earlier_one_took() -> None:
    # b2 must take a-big (8 GPUs for 4): a is left below its nominal quota with
    # a-pods' first pod running again, so b1's victim is needless. It is given back, and b1
    # (placed again away from it) waits for a-big's pods, whose quota it now shares.
    s, r = _two_reclaims([("a-big", 8)])
    assert _victims(r) == [("a-big", "reclaim", "b2")]
    assert r.pending["b1"].code is ReasonCode.PREEMPTING
    assert r.pending["b1"].message == "waiting for 1 pods already being evicted"
    (nom,) = [n for n in r.nominations if n.job == "b1"]
    assert set(nom.victims) == set(s.queue.status("a-big").running)
    assert "lf1-n0" not in _nodes(r, "b1")  # (a-pods' node)
    evict_victims(s, r, now=5)
    assert sorted(s.step(now=6).placed) == ["b1", "b2"]
    assert len(s.queue.status("a-pods").running) == 2
    assert s.queue.status("a-big").phase is JobPhase.PENDING
    check_invariants(s)


def test_a_nomination_whose_only_victim_is_given_back_is_no_longer_held_within_nominal() -> None:
    # b1's one victim (a-pods' first pod, another tenant's: the search held b1 within b's
    # nominal quota for it) is given back; b1 now only waits for b2's victims, and nothing
    # holds it within nominal any more, as nothing was taken for it by priority (its
    # nomination says neither). Before, within_nominal stayed set while by_priority was
    # recomputed.
    _s, r = _two_reclaims([("a-big", 8)])
    assert _victims(r) == [("a-big", "reclaim", "b2")]
    noms = {n.job: n for n in r.nominations}
    assert not noms["b1"].within_nominal and not noms["b1"].by_priority
    assert noms["b2"].within_nominal


def test_an_earlier_reclaims_victim_stays_when_the_later_frees_no_more_than_it_needs() -> None:
    # a 4-GPU gang on r0 instead: b2 takes it and frees exactly its 4 GPUs, so b1's
    # victim is still needed for b1's quota
    s, r = _two_reclaims([("a-mid", 4)])
    assert _victims(r) == [("a-pods", "reclaim", "b1"), ("a-mid", "reclaim", "b2")]
    assert all(n.within_nominal for n in r.nominations)
    evict_victims(s, r, now=5)
    assert sorted(s.step(now=6).placed) == ["b1", "b2"]
    check_invariants(s)


def test_a_reclaim_takes_from_the_tenant_borrowing_on_the_model_it_needs_not_on_another() -> None:
    # H100 (2 nodes): a and b 8 GPUs nominal each; A100 (1 node): c 8 nominal. e (no quota)
    # borrows 8 H100; b's gang X holds 8 H100 (exactly b's nominal) and 4 A100 (borrowed).
    # a (8 GPUs, H100 or A100) stays within its nominal quota on H100 only: the reclaim is
    # of H100, where e borrows and b does not, so e's job goes and X keeps running (it was
    # taken, since b borrows on A100, and then waited at quota left 0 on H100)
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=2, model="H100")
        .leaf("lf1", nodes=1, model="A100")
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8), Quota.gpus("c", "A100", 8)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    _start(s, 0, "e-run", gpus=8, tenant="e", models="H100")
    x = Job(
        id="X",
        tenant="b",
        gang=True,
        submitted_at=1,
        roles=(
            Role(name="h", replicas=1, resources=Resources(gpus=8), gpu_models="H100"),
            Role(name="g", replicas=1, resources=Resources(gpus=4), gpu_models="A100"),
        ),
    )
    s.submit(x, now=1)
    assert s.step(now=1).placed == ("X",)
    s.submit(job("a1", gpus=8, tenant="a", models="H100|A100", submitted_at=2), now=2)
    r = s.step(now=2)
    assert _victims(r) == [("e-run", "reclaim", "a1")]
    evict_victims(s, r, now=3)
    assert s.step(now=3).placed == ("a1",)
    assert s.queue.status("X").phase is JobPhase.RUNNING
    check_invariants(s)


def test_a_reclaim_takes_a_borrowers_units_that_free_room_when_victim_order_cannot() -> None:
    # Two 8-GPU nodes; a, c and x have 8 GPUs nominal each. c runs two 4-GPU jobs on n0 and,
    # at priority 5, three 1-GPU pods on n1: it borrows 3. a (using nothing) needs one
    # 8-GPU pod. Taking c's newest priority-0 job first (victim order) leaves c within its
    # nominal quota, so nothing else of c's may go and n0 is not freed: the search gave up.
    # Reclaim is of any priority: c's three pods on n1 bring c back to its nominal quota and
    # free n1, and they are the victims
    cluster = ClusterBuilder().leaf("lf0", nodes=2).build()
    quotas = [Quota.gpus(t, "H100", 8) for t in ("a", "c", "x")]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    _start(s, 0, "c-old1", gpus=4, tenant="c")
    _start(s, 1, "c-old2", gpus=4, tenant="c")
    _start(s, 2, "c-hi", gpus=1, replicas=3, gang=False, tenant="c", priority=5)
    s.submit(job("a1", gpus=8, tenant="a", submitted_at=3), now=3)
    r = s.step(now=3)
    assert _victims(r) == [("c-hi", "reclaim", "a1")] * 3
    assert _nodes(r, "a1") == {"lf0-n1"}
    evict_victims(s, r, now=4)
    assert s.step(now=4).placed == ("a1",)
    assert s.admitter.usage() == {("a", "H100"): 8000, ("c", "H100"): 8000}
    check_invariants(s)


def test_a_reclaims_second_walk_ranks_a_borrowers_units_by_the_room_they_free_on_its_own_nodes() -> (
    None
):
    # One 8-GPU node per rack; a and b have 8 GPUs nominal each. b runs two 4-GPU jobs on r0
    # and, newer (first in victim order), two on r1: it borrows 8. a's r (4 GPUs, held to
    # r0) reclaims: victim order takes b's r1 jobs first, after which b borrows nothing and
    # no other unit of its is a victim, and r0 stays full. The second walk ranked units by
    # the room they free on any node: every unit frees 4 GPUs on its own, the order stayed,
    # and r never reclaimed. It counts only the nodes r may use: b's newest r0 job goes.
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=1, labels={"rack": "r0"})
        .leaf("lf1", nodes=1, labels={"rack": "r1"})
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    _start(s, 0, "b-r0-old", gpus=4, tenant="b", selector=R0)
    _start(s, 1, "b-r0-new", gpus=4, tenant="b", selector=R0)
    _start(s, 2, "b-r1-old", gpus=4, tenant="b", selector=R1)
    _start(s, 3, "b-r1-new", gpus=4, tenant="b", selector=R1)
    s.submit(job("r", gpus=4, tenant="a", selector=R0, submitted_at=4), now=4)
    r = s.step(now=4)
    assert _victims(r) == [("b-r0-new", "reclaim", "r")]
    assert _nodes(r, "r") == {"lf0-n0"}
    evict_victims(s, r, now=5)
    assert s.step(now=6).placed == ("r",)
    assert s.admitter.usage() == {("a", "H100"): 4000, ("b", "H100"): 12000}
    check_invariants(s)


def test_a_reclaims_second_walk_ranks_a_unit_on_a_cordoned_node_last() -> None:
    # As above, with a second r0 node running b's oldest job (8 GPUs), cordoned. b borrows 8.
    # Victim order takes b's r1 jobs first (newest), which leaves r0 full and b within its
    # nominal quota. The second walk ranked b-big first (its node frees 8 GPUs once it is
    # gone), took it, and b was within nominal again with r0 still full for r: no victim.
    # A node that takes no new pod frees nothing r may use: b's newest r0 job goes.
    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=2, labels={"rack": "r0"})
        .leaf("lf1", nodes=1, labels={"rack": "r1"})
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 16)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    _start(s, 0, "b-big", gpus=8, tenant="b", selector=R0)
    _start(s, 1, "b-r0-old", gpus=4, tenant="b", selector=R0)
    _start(s, 2, "b-r0-new", gpus=4, tenant="b", selector=R0)
    _start(s, 3, "b-r1-old", gpus=4, tenant="b", selector=R1)
    _start(s, 4, "b-r1-new", gpus=4, tenant="b", selector=R1)
    (big,) = {b.node for b in s.cluster.bindings() if b.pod.job == "b-big"}
    s.node_unhealthy(big, now=5, evict=False)  # (a cordon: its pods run on)
    s.submit(job("r", gpus=4, tenant="a", selector=R0, submitted_at=6), now=6)
    r = s.step(now=6)
    assert _victims(r) == [("b-r0-new", "reclaim", "r")]
    check_invariants(s)


def test_a_pod_level_job_beyond_its_nominal_quota_reclaims_for_its_first_pods_once_its_own_lower_priority_pods_are_gone() -> (
    None
):
    # a and b have 8 GPUs nominal on 16. a runs a-lo (4 pods, priority -1), b runs 12 pods
    # (borrowing 4). a-hi (9 pods) is within a's nominal quota for 4 pods as a uses it now,
    # and for 8 once a-lo is gone: it takes b's 4 borrowed pods (RECLAIM) and a-lo's 4
    # (PRIORITY), and no more: its ninth pod would borrow
    s = scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(),
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)],
        preemption=PreemptionPolicy(),
    )
    s.submit(job("a-lo", gpus=1, replicas=4, gang=False, tenant="a", priority=-1), now=0)
    s.submit(job("b1", gpus=1, replicas=12, gang=False, tenant="b"), now=0)
    assert set(s.step(now=0).placed) == {"a-lo", "b1"}
    s.submit(job("a-hi", gpus=1, replicas=9, gang=False, tenant="a", submitted_at=5), now=5)
    r = s.step(now=5)
    got = sorted((v.job, v.reason.value, len(v.pods)) for v in r.victims)
    assert got == [("a-lo", "priority", 1)] * 4 + [("b1", "reclaim", 1)] * 4
    evict_victims(s, r, now=6)
    s.step(now=10)
    r = s.step(now=20)
    assert r.victims == ()
    assert s.admitter.used("a", "H100") == 8000 and s.admitter.used("b", "H100") == 8000
    assert s.status("a-hi").pods_waiting == 1
    check_invariants(s)


def test_a_reclaim_takes_no_pod_of_a_job_preempting_in_the_same_cycle_and_takes_it_a_cycle_later() -> (
    None
):
    # a and b have 8 GPUs nominal on 16 (two 8-GPU nodes); pods are victims from 10 s on.
    # b runs big (8 GPUs, not preemptible), lo (priority 0, 4 GPUs) and the first pod of p
    # (priority 1, two 4-GPU pods): 8 of a's GPUs borrowed. Once lo is old enough, p evicts
    # it for its second pod; in the same cycle a's r (4 GPUs) reclaims, and the only unit
    # it may take is p's running pod: p's search counted it running, so r finds no victim
    # this cycle. The next cycle p starts its second pod where lo was, and r takes p's first.
    s = scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(),
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)],
        preemption=PreemptionPolicy(min_runtime=10),
    )
    _start(s, 0, "big", gpus=8, tenant="b", priority=1, preemptible=False)
    _start(s, 0, "lo", gpus=4, tenant="b")
    s.submit(job("p", gpus=4, replicas=2, gang=False, tenant="b", priority=1), now=1)
    r = s.step(now=1)
    assert [b.pod.index for b in r.bindings] == [0] and r.victims == ()  # lo is too young
    s.submit(job("r", gpus=4, tenant="a", submitted_at=20), now=20)
    r = s.step(now=20)
    assert _victims(r) == [("lo", "priority", "p")]
    assert r.pending["r"].code is ReasonCode.QUOTA_EXCEEDED
    evict_victims(s, r, now=21)
    r = s.step(now=21)
    assert [(b.pod.job, b.pod.index) for b in r.bindings] == [("p", 1)]
    assert [(v.job, v.pods, v.reason.value, v.preemptor) for v in r.victims] == [
        ("p", (pod("p", 0),), "reclaim", "r")
    ]
    check_invariants(s)


def test_a_reclaim_waits_while_the_borrower_preempts_anew_each_cycle_and_reclaims_the_cycle_it_stops() -> (
    None
):
    # r0 has 8 GPUs, r1 6; a has 8 GPUs nominal, b 6. b's lo0..lo2 (2 GPUs each) fill r1
    # and b's nominal quota; b's p (priority 2, seven 2-GPU pods) runs four pods on r0 on
    # the 8 GPUs a lends. A user rule lets lo<i> go only once it has checkpointed (t=10+i),
    # so p evicts one lo a cycle, each for its next pod, from t=10 on. a's r (2 GPUs, held to
    # r0) arrives at t=10 for a's lent quota: only p's pods on r0 free room for it, and a job
    # preempting in a cycle is no victim in it. r waits for as long as p is nominated anew
    # each cycle, and reclaims one of p's pods the cycle p places its last pod.
    checkpointed: set[str] = set()

    def after_checkpoint(_pre: object, unit: VictimView, _borrowing: object) -> bool | None:
        return False if unit.job.startswith("lo") and unit.job not in checkpointed else None

    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=1, labels={"rack": "r0"})
        .leaf("lf1", nodes=1, labels={"rack": "r1"}, gpus=6)
        .build()
    )
    s = scheduler(
        cluster,
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 6)],
        preemption=PreemptionPolicy(rules=(after_checkpoint,)),
    )
    for i in range(3):
        _start(s, i, f"lo{i}", gpus=2, tenant="b", selector=R1)
    s.submit(
        job("p", gpus=2, replicas=7, gang=False, tenant="b", priority=2, submitted_at=3), now=3
    )
    r = s.step(now=3)
    assert {b.node for b in r.bindings} == {"lf0-n0"} and len(r.bindings) == 4
    s.submit(job("r", gpus=2, tenant="a", selector=R0, submitted_at=10), now=10)
    for t in (10, 11, 12):
        checkpointed.add(f"lo{t - 10}")
        r = s.step(now=t)
        assert _victims(r) == [(f"lo{t - 10}", "priority", "p")]
        assert r.pending["r"].code is ReasonCode.QUOTA_EXCEEDED
        evict_victims(s, r, now=t + 0.5)
    r = s.step(now=13)
    assert [b.pod for b in r.bindings] == [pod("p", 6)]
    assert [(v.job, v.reason.value, v.preemptor) for v in r.victims] == [("p", "reclaim", "r")]
    assert _nodes(r, "r") == {"lf0-n0"}
    evict_victims(s, r, now=13.5)
    assert s.step(now=14).placed == ("r",)
    check_invariants(s)
