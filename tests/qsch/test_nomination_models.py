"""A nominated preemptor allowed on several GPU models: quota decides it on the models its
nomination holds devices on first, so a change of the quota ledger while its victims
terminate (another tenant's borrow reclaimed, a job ending) cannot send it to another model,
where it would be refused on what it holds and preempt again, cycle after cycle."""

from __future__ import annotations

from collections import Counter

import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from kant.admission import Quota
from kant.cycle import CycleResult
from kant.model import Binding, PodId
from kant.preemption import PreemptionPolicy
from kant.queueing import Nomination
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, scheduler


def _a100_and_h100(h100_nodes: int) -> ClusterState:
    """One 4-GPU A100 node (``lfa-n0``) and ``h100_nodes`` 8-GPU H100 nodes (``lfh-n*``)."""
    return (
        ClusterBuilder()
        .leaf("lfa", nodes=1, model="A100", gpus=4)
        .leaf("lfh", nodes=h100_nodes, model="H100", gpus=8)
        .build()
    )


def _borrowing_preemptor() -> tuple[Scheduler, CycleResult]:
    """One 4-GPU A100 node and two 8-GPU H100 nodes. Quotas (one cohort): ``d`` lends 4 A100,
    ``b`` has 8 H100 nominal, ``c`` 16 (8 never lent); ``a`` has none and borrows. ``b1``
    (16 pods of 1 GPU) borrows all of the H100 pool, ``lo`` (``a``, 4 pods) all of the A100
    one. ``p`` (``a``, priority 10, 8 pods on A100|H100) evicts ``lo`` (priority) and is
    nominated the 4 A100 GPUs; ``lo``'s pods then take their time to go."""
    cluster = _a100_and_h100(h100_nodes=2)
    quotas = [
        Quota.gpus("d", "A100", 4),
        Quota.gpus("b", "H100", 8),
        Quota.gpus("c", "H100", 16, lending_limit=8),
    ]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("b1", gpus=1, replicas=16, gang=False, tenant="b", models="H100"), now=0)
    s.submit(job("lo", gpus=1, replicas=4, gang=False, tenant="a", models="A100"), now=0)
    assert set(s.step(now=0).placed) == {"b1", "lo"}
    p = job("p", gpus=1, replicas=8, gang=False, tenant="a", priority=10,
            models="A100|H100", submitted_at=1)  # fmt: skip
    s.submit(p, now=1)
    r = s.step(now=1)
    assert [(v.job, v.reason.value) for v in r.victims] == [("lo", "priority")] * 4
    (nom,) = r.nominations
    assert {b.node for b in nom.bindings} == {"lfa-n0"}
    return s, r


def test_a_nominated_job_quota_would_send_elsewhere_starts_on_its_nominated_devices() -> None:
    # c reclaims 8 of b1's borrowed H100 pods: b borrows less, so a may now borrow 8 H100
    # GPUs, more than the 4 A100 ones p holds, though no H100 GPU is free (b1's pods going
    # are held for c1). Before, quota sent p to H100 only: refused there once lo was gone, p
    # gave up its nomination, lo started again on the A100 GPUs and p evicted it again, at
    # every event, for as long as the ledger stayed so.
    s, r1 = _borrowing_preemptor()
    nominated = {(b.node, b.gpus) for b in r1.nominations[0].bindings}
    s.submit(job("c1", gpus=1, replicas=8, gang=False, tenant="c", models="H100",
                 submitted_at=2), now=2)  # fmt: skip
    r = s.step(now=2)
    assert {v.job for v in r.victims} == {"b1"}  # (b1's pods stay terminating throughout)
    evicted: Counter[PodId] = Counter(p for v in r1.victims for p in v.pods)
    r = s.step(now=3)
    assert r.victims == () and r.pending["p"].code.value == "preempting"
    evict_victims(s, r1, now=4)  # lo's pods are gone; b1's still going
    r = s.step(now=4)
    assert r.placed == ("p",) and r.dropped_nominations == () and r.again
    assert {(b.node, b.gpus) for b in r.bindings if b.pod.job == "p"} == nominated
    assert r.victims == ()
    for t in range(5, 12):  # p's other 4 pods wait for H100 GPUs; nobody is evicted again
        r = s.step(now=t)
        evicted.update(p for v in r.victims if v.job != "b1" for p in v.pods)
        assert "lo" not in r.placed
    assert max(evicted.values()) == 1 and set(evicted) == {
        PodId(job="lo", role="worker", index=i) for i in range(4)
    }
    assert len(s.queue.status("p").running) == 4
    check_invariants(s)


def test_a_nominated_job_starts_at_once_where_quota_chooses_when_the_nodes_hold_it_now() -> None:
    # One 4-GPU A100 node, one 8-GPU H100 node; d lends 4 A100 GPUs, a has 8 H100 nominal.
    # a's h (priority 10) holds the H100 node, a's lo borrows the A100 one. p (a, priority
    # 10, 8 pods on A100|H100) evicts lo and is nominated the 4 A100 GPUs. Then h ends
    # while lo's pods still terminate: quota's own choice for p is now H100, within a's
    # nominal quota, and the 8 H100 GPUs are free. p starts there at once, all 8 pods (its
    # nomination ends with that placement). Holding p on its nominated A100 GPUs instead
    # left the H100 GPUs idle for the victims' grace period, then started half of p on
    # A100, borrowed, where d's own job later reclaimed them.
    cluster = _a100_and_h100(h100_nodes=1)
    quotas = [Quota.gpus("d", "A100", 4), Quota.gpus("a", "H100", 8)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("h", gpus=1, replicas=8, gang=False, tenant="a", models="H100", priority=10),
             now=0)  # fmt: skip
    s.submit(job("lo", gpus=1, replicas=4, gang=False, tenant="a", models="A100"), now=0)
    assert set(s.step(now=0).placed) == {"h", "lo"}
    s.submit(job("p", gpus=1, replicas=8, gang=False, tenant="a", priority=10,
                 models="A100|H100", submitted_at=1), now=1)  # fmt: skip
    r1 = s.step(now=1)
    assert {v.job for v in r1.victims} == {"lo"}
    assert {b.node for b in r1.nominations[0].bindings} == {"lfa-n0"}
    for pod in s.queue.status("h").running:
        s.pod_finished(pod, 2)
    r = s.step(now=2)
    assert r.placed == ("p",) and r.victims == () and "p" not in r.pending
    assert sorted(b.node for b in r.bindings) == ["lfh-n0"] * 8
    assert s.queue.status("p").nomination is None
    evict_victims(s, r1, now=40)  # lo's pods go; lo may start again on the A100 GPUs
    s.step(now=40)
    s.submit(job("dj", gpus=1, replicas=4, gang=False, tenant="d", models="A100",
                 submitted_at=50), now=50)  # fmt: skip
    r = s.step(now=50)
    assert "p" not in {v.job for v in r.victims}  # d reclaims from lo, never from p
    assert len(s.queue.status("p").running) == 8
    check_invariants(s)


def test_a_nominated_job_whose_nomination_covers_quotas_choice_gets_the_plain_reason() -> None:
    # p (a, no quota, 10 pods on A100|H100) is handed a nomination on both models; quota's
    # own choice (6 pods: e lends 6 H100 GPUs, d 2 A100) leaves A100 out, and placing it
    # starts 6 pods on H100. The other 4 are beyond the tenant's quota, as without a
    # nomination: no word about "its nomination's GPU models", which it was never narrowed to.
    cluster = _a100_and_h100(h100_nodes=1)
    quotas = [Quota.gpus("d", "A100", 2), Quota.gpus("e", "H100", 6)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("p", gpus=1, replicas=10, gang=False, tenant="a", priority=5,
                 models="A100|H100"), now=0)  # fmt: skip
    nodes = [("lfa-n0", 0), ("lfa-n0", 1), ("lfh-n0", 0), ("lfh-n0", 1)]
    held = tuple(Binding(pod=PodId(job="p", role="worker", index=i), node=n, gpus=(g,))
                 for i, (n, g) in enumerate(nodes))  # fmt: skip
    s.queue.set_nomination(Nomination(job="p", bindings=held, victims=(), created_at=0), "p")
    r = s.step(now=1)
    assert len(r.bindings) == 6 and {b.node for b in r.bindings} == {"lfh-n0"}
    assert r.pending["p"].message == "4 pods beyond the tenant's quota", r.pending["p"]
    check_invariants(s)


def test_a_nomination_on_every_model_of_its_role_costs_one_placement_attempt() -> None:
    # As above, but f's 6 non-preemptible pods fill the H100 node but for p's 2 nominated
    # GPUs: quota's own choice (6 pods on H100, lent by e) leaves A100 out and starts 2. The
    # nomination, on both models, narrows nothing, so that decision is the only one tried:
    # one placement attempt, 2 pods on H100, and the plain reason for the others.
    cluster = _a100_and_h100(h100_nodes=1)
    quotas = [Quota.gpus("d", "A100", 2), Quota.gpus("e", "H100", 6), Quota.gpus("f", "H100", 6)]
    s = scheduler(cluster, quotas=quotas, modes={"f": "isolated"}, preemption=PreemptionPolicy())
    s.submit(job("f6", gpus=1, replicas=6, gang=False, tenant="f", models="H100",
                 preemptible=False), now=0)  # fmt: skip
    assert s.step(now=0).placed == ("f6",)
    s.submit(job("p", gpus=1, replicas=10, gang=False, tenant="a", priority=5,
                 models="A100|H100", submitted_at=1), now=1)  # fmt: skip
    taken = {g for pod in s.queue.status("f6").running for g in s.cluster.binding(pod).gpus}
    h0, h1 = sorted(set(range(8)) - taken)
    nodes = [("lfa-n0", 0), ("lfa-n0", 1), ("lfh-n0", h0), ("lfh-n0", h1)]
    held = tuple(Binding(pod=PodId(job="p", role="worker", index=i), node=n, gpus=(g,))
                 for i, (n, g) in enumerate(nodes))  # fmt: skip
    s.queue.set_nomination(Nomination(job="p", bindings=held, victims=(), created_at=1), "p")
    r = s.step(now=2)
    assert r.stats.placement_attempts == 1
    assert {(b.node, b.gpus) for b in r.bindings} == {("lfh-n0", (h0,)), ("lfh-n0", (h1,))}
    assert "nomination" not in r.pending["p"].message
    check_invariants(s)


def test_a_nomination_on_a_model_quota_no_longer_admits_is_dropped_with_a_reason() -> None:
    # p's nomination (built by hand, as an orchestrator restoring its state may hand one
    # over) holds 2 A100 GPUs, but its tenant a has no A100 quota (isolated, H100 only), and
    # the H100 node is full with c's job, which a may not evict. The nomination is dropped at
    # once, with a reason that says why; its GPUs go to z's job behind p in the order.
    cluster = _a100_and_h100(h100_nodes=1)
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("c", "H100", 8), Quota.gpus("z", "A100", 4)]
    s = scheduler(cluster, quotas=quotas, modes={"a": "isolated", "c": "isolated"},
                  preemption=PreemptionPolicy())  # fmt: skip
    s.submit(job("c8", gpus=8, tenant="c", models="H100", preemptible=False), now=0)
    assert s.step(now=0).placed == ("c8",)
    s.submit(job("p", gpus=1, replicas=2, gang=False, tenant="a", priority=5,
                 models="A100|H100", submitted_at=1), now=1)  # fmt: skip
    s.submit(job("z4", gpus=4, tenant="z", models="A100", submitted_at=2), now=2)
    held = tuple(Binding(pod=PodId(job="p", role="worker", index=i), node="lfa-n0", gpus=(i,))
                 for i in range(2))  # fmt: skip
    s.queue.set_nomination(Nomination(job="p", bindings=held, victims=(), created_at=1), "p")
    r = s.step(now=2)
    assert r.dropped_nominations == ("p",) and r.placed == ("z4",) and r.victims == ()
    assert r.pending["p"].message.endswith(
        "its nomination on A100 was dropped: tenant 'a' needs 1 GPUs of A100 for role "
        "'worker'; quota left 0"
    ), r.pending["p"]
    assert s.queue.status("p").nomination is None
    check_invariants(s)


def test_a_gang_nominated_on_two_models_is_admitted_at_what_it_holds_on_each() -> None:
    # One 4-GPU H100 node and two 4-GPU A100 nodes, each a leaf of its own. b has 4 H100 and
    # 4 A100 GPUs nominal, c as many; c runs ch (2 H100 GPUs) and ca (priority 1, three
    # 2-GPU pods on A100, borrowing 2). b's gang g (four 1-GPU pods on H100|A100) reclaims
    # one of ca's pods and is nominated 2 GPUs on each model: b is held 2 of each. ca's
    # pod, requeued ahead of g, starts again on the 2 A100 GPUs left free (c borrows 2 of
    # b's A100 GPUs g does not hold). Before, g's quota counted its 4 pods on each model:
    # A100 had 2 GPUs of headroom for it, so g was decided on H100 alone, found 2 free
    # GPUs there, lost its nomination and reclaimed ca's next pod, which had started once
    # already: two rounds of evictions for one gang. g is now admitted at what its
    # nomination takes on each model, and starts on it.
    cluster = (
        ClusterBuilder()
        .leaf("lh", nodes=1, model="H100", gpus=4)
        .leaf("la0", nodes=1, model="A100", gpus=4)
        .leaf("la1", nodes=1, model="A100", gpus=4)
        .build()
    )
    quotas = [Quota.gpus(t, m, 4) for t in ("b", "c") for m in ("H100", "A100")]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))
    s.submit(job("ch", gpus=2, tenant="c", models="H100"), now=0)
    s.submit(job("ca", gpus=2, replicas=3, gang=False, tenant="c", priority=1, models="A100"),
             now=0)  # fmt: skip
    assert set(s.step(now=0).placed) == {"ch", "ca"}
    s.submit(job("g", gpus=1, replicas=4, tenant="b", models="H100|A100", submitted_at=1),
             now=1)  # fmt: skip
    r1 = s.step(now=1)
    assert [(v.job, v.reason.value) for v in r1.victims] == [("ca", "reclaim")]
    (nom,) = r1.nominations
    held = Counter(s.cluster.node(b.node).gpu_model for b in nom.bindings)
    assert held == {"H100": 2, "A100": 2}
    evicted: Counter[PodId] = Counter(p for v in r1.victims for p in v.pods)
    evict_victims(s, r1, now=2)
    r = s.step(now=2)
    # ca's pod starts again on the A100 GPUs g does not hold; g starts on its nomination
    assert set(r.placed) == {"ca", "g"} and r.victims == () and r.dropped_nominations == ()
    assert {(b.node, b.gpus) for b in r.bindings if b.pod.job == "g"} == {
        (b.node, b.gpus) for b in nom.bindings
    }
    for t in range(3, 6):
        r = s.step(now=t)
        evicted.update(p for v in r.victims for p in v.pods)
    assert max(evicted.values()) == 1 and len(evicted) == 1
    assert len(s.queue.status("ca").running) == 3 and len(s.queue.status("g").running) == 4
    check_invariants(s)


def _gang_nominated_beside_an_isolated_8_gpu_job() -> tuple[Scheduler, CycleResult]:
    """One 4-GPU H100 node and two A100 nodes, of 4 and 8 GPUs, each a leaf of its own. b
    has 4 H100 and 4 A100 GPUs nominal, c 4 H100 and 2 A100; d (isolated: its use is not
    the cohort's) runs dj on the whole 8-GPU node. c runs ch (2 H100 GPUs) and ca
    (priority 1, two 2-GPU pods on the 4-GPU A100 node, borrowing 2). b's gang g (four
    1-GPU pods on H100|A100) reclaims one of ca's pods and is nominated 2 GPUs on each
    model. Then dj ends while ca's pod goes."""
    cluster = (
        ClusterBuilder()
        .leaf("lh", nodes=1, model="H100", gpus=4)
        .leaf("la0", nodes=1, model="A100", gpus=4)
        .leaf("la1", nodes=1, model="A100", gpus=8)
        .build()
    )
    quotas = [
        Quota.gpus("b", "H100", 4),
        Quota.gpus("b", "A100", 4),
        Quota.gpus("c", "H100", 4),
        Quota.gpus("c", "A100", 2),
        Quota.gpus("d", "A100", 8),
    ]
    s = scheduler(cluster, quotas=quotas, modes={"d": "isolated"},
                  preemption=PreemptionPolicy(min_runtime=0.0))  # fmt: skip
    s.submit(job("dj", gpus=8, tenant="d", models="A100"), now=0)
    s.submit(job("ch", gpus=2, tenant="c", models="H100"), now=0)
    s.submit(job("ca", gpus=2, replicas=2, gang=False, tenant="c", priority=1, models="A100"),
             now=0)  # fmt: skip
    assert set(s.step(now=0).placed) == {"dj", "ch", "ca"}
    s.submit(job("g", gpus=1, replicas=4, tenant="b", models="H100|A100", submitted_at=1),
             now=1)  # fmt: skip
    r1 = s.step(now=1)
    assert [(v.job, v.reason.value) for v in r1.victims] == [("ca", "reclaim")]
    (nom,) = r1.nominations
    assert {b.node for b in nom.bindings} == {"lh-n0", "la0-n0"}
    for pod in s.queue.status("dj").running:
        s.pod_finished(pod, 2)
    evict_victims(s, r1, now=2)
    return s, r1


def test_a_gang_on_its_nomination_split_starts_there_though_the_placer_prefers_a_node() -> None:
    # ca's pod starts again on the 8-GPU node, and b's A100 headroom is back to the 2 GPUs
    # g's nomination takes there. Placed on H100|A100, g's four pods went to the 8-GPU
    # node, whose 6 free GPUs the placer prefers: 4 A100 GPUs where quota left b 2. That
    # placement is refused, and g is placed again on its nominated devices alone: it starts
    # there, and nothing is evicted again.
    s, r1 = _gang_nominated_beside_an_isolated_8_gpu_job()
    (nom,) = r1.nominations
    r = s.step(now=2)
    assert set(r.placed) == {"ca", "g"} and r.victims == () and r.dropped_nominations == ()
    assert [b.node for b in r.bindings if b.pod.job == "ca"] == ["la1-n0"]
    assert {(b.node, b.gpus) for b in r.bindings if b.pod.job == "g"} == {
        (b.node, b.gpus) for b in nom.bindings
    }
    assert s.admitter.used("b", "A100") == 2000
    for t in range(3, 6):
        assert s.step(now=t).victims == ()
    check_invariants(s)


def test_a_gang_whose_nominated_gpu_failed_is_refused_its_split_and_reclaims_once_more() -> None:
    # As above, but one of g's nominated A100 GPUs fails once ca's pod is gone. On its
    # split, the placer's choice (4 GPUs of the 8-GPU node, where quota left b 2) is
    # refused, and its nominated devices no longer hold it: g is not placed, and nothing of
    # that first placement is kept (committed, it would run b on 4 A100 GPUs where its
    # headroom is 2). Its nomination is replaced: it reclaims ca's other pod, and starts on
    # the devices that frees once it is gone.
    s, r1 = _gang_nominated_beside_an_isolated_8_gpu_job()
    (nom,) = r1.nominations
    a100 = next(b for b in nom.bindings if b.node == "la0-n0")
    s.gpu_unhealthy("la0-n0", a100.gpus[0], now=2)
    r = s.step(now=2)
    assert r.placed == ("ca",) and [b.node for b in r.bindings] == ["la1-n0"]
    assert s.admitter.used("b", "A100") == 0 and s.admitter.used("b", "H100") == 0
    assert [(v.job, v.reason.value) for v in r.victims] == [("ca", "reclaim")]
    assert r1.victims[0].pods != r.victims[0].pods
    (again,) = r.nominations
    assert again.job == "g" and {b.node for b in again.bindings} == {"la1-n0"}
    evict_victims(s, r, now=3)
    r = s.step(now=3)
    assert r.placed == ("g",) and r.victims == ()
    assert {(b.node, b.gpus) for b in r.bindings} == {(b.node, b.gpus) for b in again.bindings}
    assert s.admitter.used("b", "A100") == 4000
    check_invariants(s)


def test_a_gang_quota_refuses_on_each_model_starts_on_its_nomination_split() -> None:
    # The first gang's world with a second 4-GPU H100 node, where d (isolated) runs dj, and
    # c's cx (4 H100 GPUs) waiting for a node. g reclaims one of ca's pods and is nominated
    # 2 GPUs on each model (2 left free on ch's node). Then dj ends while ca's pod goes:
    # cx starts on dj's node and ca's pod again on A100, c borrowing 2 GPUs of each model.
    # b's headroom is 2 GPUs on each: quota refuses g's 4 pods on either model. Refused,
    # g lost its nomination, its victim gone, and reclaimed ca's other pod at once. Its
    # nomination's split (2 GPUs of each model) fits the headroom: g starts on it.
    cluster = (
        ClusterBuilder()
        .leaf("lh", nodes=1, model="H100", gpus=4)
        .leaf("lh1", nodes=1, model="H100", gpus=4)
        .leaf("la0", nodes=1, model="A100", gpus=4)
        .leaf("la1", nodes=1, model="A100", gpus=4)
        .build()
    )
    quotas = [Quota.gpus(t, m, 4) for t in ("b", "c") for m in ("H100", "A100")]
    quotas.append(Quota.gpus("d", "H100", 4))
    s = scheduler(cluster, quotas=quotas, modes={"d": "isolated"},
                  preemption=PreemptionPolicy(min_runtime=0.0))  # fmt: skip
    s.submit(job("dj", gpus=4, tenant="d", priority=5, models="H100"), now=0)
    s.submit(job("ch", gpus=2, tenant="c", priority=3, models="H100"), now=0)
    s.submit(job("ca", gpus=2, replicas=3, gang=False, tenant="c", priority=1, models="A100"),
             now=0)  # fmt: skip
    assert set(s.step(now=0).placed) == {"dj", "ch", "ca"}
    s.submit(job("cx", gpus=4, tenant="c", priority=2, models="H100", submitted_at=0.5),
             now=0.5)  # fmt: skip
    s.submit(job("g", gpus=1, replicas=4, tenant="b", models="H100|A100", submitted_at=1),
             now=1)  # fmt: skip
    r1 = s.step(now=1)
    assert [(v.job, v.reason.value) for v in r1.victims] == [("ca", "reclaim")]
    (nom,) = r1.nominations
    held = Counter(s.cluster.node(b.node).gpu_model for b in nom.bindings)
    assert held == {"H100": 2, "A100": 2}
    for pod in s.queue.status("dj").running:
        s.pod_finished(pod, 2)
    evict_victims(s, r1, now=2)
    r = s.step(now=2)
    assert set(r.placed) == {"ca", "cx", "g"} and r.victims == () and r.dropped_nominations == ()
    assert {(b.node, b.gpus) for b in r.bindings if b.pod.job == "g"} == {
        (b.node, b.gpus) for b in nom.bindings
    }
    assert s.admitter.used("c", "H100") == 6000 and s.admitter.used("c", "A100") == 6000
    assert s.admitter.used("b", "H100") == 2000 and s.admitter.used("b", "A100") == 2000
    for t in range(3, 6):
        assert s.step(now=t).victims == ()
    check_invariants(s)


_EVENT = st.one_of(
    st.tuples(st.just("go"), st.integers(0, 7)),  # a victim job's pods end their grace period
    st.tuples(
        st.just("submit"),
        st.sampled_from(
            [("a", "A100"), ("a", "A100|H100"), ("c", "H100"), ("c", "H100"), ("d", "A100")]
        ),
        st.integers(1, 8),
        st.integers(0, 2),
    ),
    st.tuples(st.just("finish"), st.integers(0, 20)),  # a job other than p and b1 ends
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(  # the first scenario: c reclaims 8 of b1's H100 pods, then lo's pods go
    p_pods=8, d_nominal=4, a_nominal=0,
    events=[("submit", ("c", "H100"), 8, 0), ("go", 1), ("finish", 0), ("go", 0)],
)  # fmt: skip
@given(
    p_pods=st.integers(2, 8),
    d_nominal=st.sampled_from([2, 4]),
    a_nominal=st.sampled_from([0, 2]),
    events=st.lists(_EVENT, min_size=4, max_size=30),
)
def test_a_nominated_preemptor_chooses_no_more_victims_until_it_starts_whatever_the_ledger_does(
    p_pods: int, d_nominal: int, a_nominal: int, events: list[tuple[object, ...]]
) -> None:
    # Under any run of arrivals, job ends and victims ending their grace period (a cycle
    # after each), the priority-10 pod-level job p (A100|H100) chooses victims at most once
    # between being nominated and placing pods: its nomination is what it starts on,
    # whatever quota would now choose for it. Nothing here drops a nomination for a node
    # change or a quota change (no node is lost, the quotas stay), so no second round is
    # ever due.
    cluster = _a100_and_h100(h100_nodes=2)
    quotas = [
        Quota.gpus("d", "A100", d_nominal),
        Quota.gpus("a", "A100", a_nominal),
        Quota.gpus("b", "H100", 8),
        Quota.gpus("c", "H100", 16, lending_limit=8),
    ]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("b1", gpus=1, replicas=16, gang=False, tenant="b", models="H100"), now=0)
    s.submit(job("lo", gpus=1, replicas=4, gang=False, tenant="a", models="A100"), now=0)
    s.step(now=0)
    s.submit(job("p", gpus=1, replicas=p_pods, gang=False, tenant="a", priority=10,
                 models="A100|H100", submitted_at=1), now=1)  # fmt: skip
    waiting = False  # p holds a nomination and placed no pod since
    now, n = 1.0, 0
    for ev in [("start",), *events, ("step",)]:  # a cycle after each event, as a driver runs
        now += 1
        if ev[0] == "go":
            going = sorted(s.queue.terminating(), key=lambda e: e.id)
            if going:
                for pod in sorted(going[int(ev[1]) % len(going)].terminating):  # type: ignore[call-overload]
                    s.pod_evicted(pod, now)
        elif ev[0] == "submit":
            n += 1
            _, (tenant, models), pods, prio = ev
            s.submit(job(f"j{n}", gpus=1, replicas=pods, gang=False, tenant=tenant,  # type: ignore[arg-type]
                         models=models, priority=prio, submitted_at=now), now=now)  # type: ignore[arg-type]  # fmt: skip
        elif ev[0] == "finish":
            running = sorted(e.id for e in s.queue.entries() if e.id not in ("p", "b1")
                             and e.assigned)  # fmt: skip
            if running:
                jid = running[int(ev[1]) % len(running)]  # type: ignore[call-overload]
                for pod in s.queue.status(jid).running:
                    s.pod_finished(pod, now)
        if ev[0] != "start":
            r = s.step(now=now)
            mine = [v for v in r.victims if v.preemptor == "p"]
            assert not (waiting and mine), (now, mine)
            if any(b.pod.job == "p" for b in r.bindings):
                waiting = False
            if any(nom.job == "p" for nom in r.nominations):
                waiting = True
    check_invariants(s)
