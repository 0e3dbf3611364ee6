"""A reclaimer holding its nomination is placed by its what-if's rule: on the GPU models
where its tenant stays within its nominal quota (at that cycle: not necessarily the model
its nomination holds devices on, when it has several). Placed on every model quota admits,
it started wherever placement preferred, on a model where its tenant borrows too: its
victims were evicted for nothing, the borrowers took their GPUs back, and the reclaimer was
reclaimed in turn. When its tenant's use changed so that it borrows where its nomination
holds devices, or the victim search did not hold it within nominal, it is placed as any
job."""

from __future__ import annotations

from collections import Counter

import attrs

from kant.admission import Quota
from kant.cycle import CycleResult
from kant.model import MILLI, Binding, Job, PodId, Resources, Role, VictimReason
from kant.preemption import PreemptionPolicy, Preemptor, VictimView
from kant.queueing import Nomination
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, finish, pod, scheduler


def _h100_and_a100(h100_gpus: int = 8) -> ClusterState:
    """One H100 node (leaf ``lfh``) of ``h100_gpus`` GPUs and one 8-GPU A100 node (``lfa``)."""
    return (
        ClusterBuilder()
        .leaf("lfh", nodes=1, model="H100", gpus=h100_gpus)
        .leaf("lfa", nodes=1, model="A100", gpus=8)
        .build()
    )


def _two_of_each() -> ClusterState:
    """Two 4-GPU H100 nodes (leaf ``lh``) and two 4-GPU A100 nodes (``la``)."""
    return (
        ClusterBuilder()
        .leaf("lh", nodes=2, model="H100", gpus=4)
        .leaf("la", nodes=2, model="A100", gpus=4)
        .build()
    )


def _borrowed_h100(
    h100_gpus: int, *, a100_jobs: tuple[int, ...], policy: PreemptionPolicy | None = None
) -> Scheduler:
    """One H100 node of ``h100_gpus`` GPUs, one 8-GPU A100 node. ``a`` has 8 H100 GPUs
    nominal, ``d`` 16 A100 (it lends what it does not use); ``c`` has no quota and borrows.
    ``c``'s ``cb`` (one 1-GPU pod per H100 GPU) borrows a's H100 share, ``d``'s jobs of
    ``a100_jobs`` GPUs fill the A100 node."""
    cluster = _h100_and_a100(h100_gpus)
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("d", "A100", 16)]
    s = scheduler(cluster, quotas=quotas, preemption=policy or PreemptionPolicy())
    s.submit(job("cb", gpus=1, replicas=h100_gpus, gang=False, tenant="c", models="H100"), now=0)
    for k, gpus in enumerate(a100_jobs):
        s.submit(job(f"d{k}", gpus=gpus, tenant="d", models="A100"), now=0)
    s.step(now=0)
    assert len(s.queue.status("cb").running) == 8
    return s


def test_a_reclaimer_waits_for_its_victims_rather_than_start_borrowing_where_gpus_free_up() -> None:
    # p (a, 4 GPUs, H100|A100) reclaims 4 of cb's pods on H100, within a's nominal quota.
    # d's job ends while cb's pods still terminate: quota would let a borrow A100 GPUs, and
    # they are free. Before, p started there at once: cb's 4 pods were evicted for nothing
    # and started again on the H100 GPUs they left, and d's next job reclaimed p's A100
    # GPUs. p now waits for its victims and starts on H100, where the reclaim was for.
    s = _borrowed_h100(8, a100_jobs=(8,))
    s.submit(job("p", gpus=4, tenant="a", models="H100|A100", submitted_at=1), now=1)
    r1 = s.step(now=1)
    assert {(v.job, v.reason.value) for v in r1.victims} == {("cb", "reclaim")}
    (nom,) = r1.nominations
    assert nom.within_nominal and {b.node for b in nom.bindings} == {"lfh-n0"}
    finish(s, "d0", now=2)
    r = s.step(now=2)
    assert r.placed == () and r.pending["p"].code.value == "preempting", r.pending
    evict_victims(s, r1, now=3)
    r = s.step(now=3)
    assert r.placed == ("p",) and {b.node for b in r.bindings} == {"lfh-n0"}
    assert s.admitter.used("a", "H100") == 4 * MILLI and s.admitter.used("a", "A100") == 0
    evicted: Counter[PodId] = Counter(p for v in r1.victims for p in v.pods)
    s.submit(job("d9", gpus=8, tenant="d", models="A100", submitted_at=4), now=4)
    for t in range(4, 10):
        r = s.step(now=t)
        assert "p" not in {v.job for v in r.victims}  # nobody reclaims from p
        evicted.update(p for v in r.victims for p in v.pods)
    assert max(evicted.values()) == 1 and len(evicted) == 4  # cb's pods, once
    assert len(s.queue.status("p").running) == 1
    check_invariants(s)


def test_a_preemptor_held_within_nominal_by_priority_victims_waits_for_them_as_a_reclaimer_does() -> (
    None
):
    # Reclaim off: p (a, priority 5, 4 GPUs, H100|A100) takes 4 of cb's borrowed H100 pods
    # by priority. The victim search held it within a's nominal quota all the same (a
    # borrowing job may not take another tenant's unit), and placed it on H100. Before, its
    # nomination did not say so (only victims taken by reclaim did): when d's job ended, p
    # started at once on the free A100 GPUs, borrowed, and cb's 4 pods were evicted for
    # nothing. It now waits for them and starts on H100.
    s = _borrowed_h100(8, a100_jobs=(8,), policy=PreemptionPolicy(reclaim=False))
    s.submit(job("p", gpus=4, tenant="a", priority=5, models="H100|A100", submitted_at=1), now=1)
    r1 = s.step(now=1)
    assert {(v.job, v.reason.value) for v in r1.victims} == {("cb", "priority")}
    (nom,) = r1.nominations
    assert nom.within_nominal and {b.node for b in nom.bindings} == {"lfh-n0"}
    finish(s, "d0", now=2)
    r = s.step(now=2)
    assert r.placed == () and r.pending["p"].code.value == "preempting", r.pending
    evict_victims(s, r1, now=3)
    r = s.step(now=3)
    assert r.placed == ("p",) and {b.node for b in r.bindings} == {"lfh-n0"}
    assert s.admitter.used("a", "A100") == 0
    check_invariants(s)


def test_a_reclaimer_starts_where_its_victims_left_room_though_placement_prefers_a_borrowed_model() -> (
    None
):
    # A 16-GPU H100 node: cb runs 16 pods, 8 of them borrowed from a. p reclaims 4 of them.
    # When they are gone, d's 4-GPU job has just ended too: the A100 node (4 GPUs free) is
    # the fuller one, and E-Binpack prefers it. Before, p started there, borrowed, and the 4
    # H100 GPUs its victims freed went back to cb. It now starts on H100, within nominal.
    s = _borrowed_h100(16, a100_jobs=(4, 4))
    s.submit(job("p", gpus=4, tenant="a", models="H100|A100", submitted_at=1), now=1)
    r1 = s.step(now=1)
    assert {(v.job, v.reason.value) for v in r1.victims} == {("cb", "reclaim")}
    finish(s, "d1", now=2)
    evict_victims(s, r1, now=2)
    r = s.step(now=2)
    assert r.placed == ("p",) and {b.node for b in r.bindings} == {"lfh-n0"}
    assert s.admitter.used("a", "A100") == 0
    check_invariants(s)


def test_a_reclaiming_gang_starts_each_role_where_its_tenant_stays_within_nominal_though_a_borrowed_gpu_is_free() -> (
    None
):
    # a has 8 A100 GPUs nominal and no H100; c borrows them all (eight 1-GPU pods), e runs 7
    # of its 8 H100 GPUs. g (a, a gang of two 1-GPU roles on H100|A100) reclaims two of c's
    # pods and is nominated both its pods on A100. Before, once the victims were gone, it
    # was placed on every model quota admits and started one role on the free H100 GPU,
    # borrowed from e. It now starts both on A100, within a's nominal quota.
    cluster = _h100_and_a100()
    quotas = [Quota.gpus("a", "A100", 8), Quota.gpus("e", "H100", 8)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("cb", gpus=1, replicas=8, gang=False, tenant="c", models="A100"), now=0)
    s.submit(job("eh", gpus=7, tenant="e", models="H100"), now=0)
    assert sorted(s.step(now=0).placed) == ["cb", "eh"]
    g = job("g", gpus=1, gang=True, tenant="a", models="H100|A100", submitted_at=1)
    second = Role(name="s", replicas=1, resources=Resources(gpus=1), gpu_models="H100|A100")
    s.submit(attrs.evolve(g, roles=(*g.roles, second)), now=1)
    r1 = s.step(now=1)
    assert r1.placed == ()
    assert [(v.job, v.reason.value) for v in r1.victims] == [("cb", "reclaim")] * 2
    (nom,) = r1.nominations
    assert nom.within_nominal
    assert {(b.pod.role, b.node) for b in nom.bindings} == {("worker", "lfa-n0"), ("s", "lfa-n0")}
    evict_victims(s, r1, now=2)
    r = s.step(now=2)
    assert r.placed == ("g",)
    assert {(b.pod.role, b.node) for b in r.bindings if b.pod.job == "g"} == {
        ("worker", "lfa-n0"), ("s", "lfa-n0"),
    }  # fmt: skip
    assert s.admitter.used("a", "H100") == 0 and s.admitter.used("a", "A100") == 2 * MILLI
    check_invariants(s)


def _own_job_takes_the_nominated_model() -> tuple[Scheduler, CycleResult]:
    """Two 8-GPU H100 nodes, one 8-GPU A100 node. ``a`` has 8 GPUs nominal of each model,
    ``e`` 8 H100, ``d`` 8 A100 (unused: it lends them), ``c`` none. ``ej`` (e) fills one
    H100 node, ``cb`` (c, eight 1-GPU pods) borrows a's H100 share on the other, and ``dj``
    (c, priority 1) borrows on the A100 node.
    p (a, 8 GPUs, H100|A100, priority 1) reclaims cb's pods: H100 comes first."""
    cluster = (
        ClusterBuilder()
        .leaf("lh0", nodes=1, model="H100", gpus=8)
        .leaf("lh1", nodes=1, model="H100", gpus=8)
        .leaf("la", nodes=1, model="A100", gpus=8)
        .build()
    )
    quotas = [
        Quota.gpus("a", "H100", 8),
        Quota.gpus("a", "A100", 8),
        Quota.gpus("e", "H100", 8),
        Quota.gpus("d", "A100", 8),
    ]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("cb", gpus=1, replicas=8, gang=False, tenant="c", models="H100"), now=0)
    s.submit(job("ej", gpus=8, tenant="e", models="H100"), now=0)
    s.submit(job("dj", gpus=8, tenant="c", priority=1, models="A100"), now=0)
    r = s.step(now=0)
    assert {(b.pod.job, b.node) for b in r.bindings} == {
        ("cb", "lh1-n0"), ("ej", "lh0-n0"), ("dj", "la-n0"),
    }  # fmt: skip
    s.submit(job("p", gpus=8, tenant="a", priority=1, models="H100|A100", submitted_at=1), now=1)
    r1 = s.step(now=1)
    assert {(v.job, v.reason.value) for v in r1.victims} == {("cb", "reclaim")}
    (nom,) = r1.nominations
    assert {b.node for b in nom.bindings} == {"lh1-n0"}
    return s, r1


def test_a_reclaimer_whose_own_tenant_took_its_nominated_models_nominal_share_starts_there_and_evicts_no_more() -> (
    None
):
    # While cb's pods terminate, ej ends and r (a, priority 5, H100) starts on its node,
    # taking a's 8 H100 GPUs of nominal quota: p on H100 now borrows (e lends its 8), and a
    # is within nominal on A100 only, which dj fills. Before, p was narrowed to A100 once its
    # victims were gone, did not fit there, lost its nomination and reclaimed dj too: two
    # rounds of evictions for one job, and cb started again on the H100 GPUs it had left. The
    # what-if's premise (a within nominal where it holds devices) is gone, so p is placed as
    # any job: it starts on the H100 GPUs its victims freed, and nobody else is evicted.
    s, r1 = _own_job_takes_the_nominated_model()
    finish(s, "ej", now=2)
    s.submit(job("r", gpus=8, tenant="a", priority=5, models="H100", submitted_at=2), now=2)
    r = s.step(now=2)
    assert r.placed == ("r",) and r.pending["p"].code.value == "preempting", r.pending
    evict_victims(s, r1, now=3)
    r = s.step(now=3)
    assert r.placed == ("p",) and {b.node for b in r.bindings} == {"lh1-n0"}
    assert r.victims == () and r.dropped_nominations == ()
    for t in range(4, 8):
        r = s.step(now=t)
        assert r.victims == ()
    assert s.queue.status("dj").running and not s.queue.status("cb").running
    check_invariants(s)


def _own_lower_is_reclaim(
    pre: Preemptor, unit: VictimView, borrowing: object
) -> VictimReason | None:
    """A user rule: the preemptor's own tenant's lower-priority units are taken as RECLAIM."""
    if unit.tenant == pre.tenant and unit.priority < pre.priority:
        return VictimReason.RECLAIM
    return None


def test_a_user_rule_calling_an_own_tenant_unit_a_reclaim_does_not_move_its_preemptor_off_its_nomination() -> (
    None
):
    # a has 8 H100 GPUs nominal, which ej (e, within its own nominal) fills; la (a, 4 GPUs)
    # borrows A100 from d. p (a, priority 5, H100|A100) takes la by the user rule, which
    # calls it a reclaim: the what-if placed p anywhere quota admits (taking its own
    # tenant's unit holds it within nominal nowhere), on la's A100 GPUs. Before, the cycle
    # narrowed p to H100 (full) once la was gone: its nomination was dropped, la started
    # again, p took it again, and so on (la evicted every second cycle). p now starts on
    # the A100 GPUs la left.
    cluster = _h100_and_a100()
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("e", "H100", 8), Quota.gpus("d", "A100", 16)]
    policy = PreemptionPolicy(rules=(_own_lower_is_reclaim,))
    s = scheduler(cluster, quotas=quotas, preemption=policy)
    s.submit(job("ej", gpus=8, tenant="e", models="H100"), now=0)
    s.submit(job("la", gpus=4, tenant="a", models="A100"), now=0)
    s.submit(job("dj", gpus=4, tenant="d", models="A100"), now=0)
    assert sorted(s.step(now=0).placed) == ["dj", "ej", "la"]
    s.submit(job("p", gpus=4, tenant="a", priority=5, models="H100|A100", submitted_at=1), now=1)
    r1 = s.step(now=1)
    assert {(v.job, v.reason.value) for v in r1.victims} == {("la", "reclaim")}
    (nom,) = r1.nominations
    assert {b.node for b in nom.bindings} == {"lfa-n0"}
    assert not nom.within_nominal  # (the search held it nowhere: la is a's own)
    evicted = Counter(p for v in r1.victims for p in v.pods)
    evict_victims(s, r1, now=2)
    for t in range(2, 10):
        r = s.step(now=t)
        evicted.update(p for v in r.victims for p in v.pods)
        for v in r.victims:
            s.pod_evicted(v.pods[0], t)
    assert max(evicted.values()) == 1
    assert len(s.queue.status("p").running) == 1
    assert {s.cluster.binding(p).node for p in s.queue.status("p").running} == {"lfa-n0"}
    check_invariants(s)


def test_a_pod_level_reclaimers_borrowed_rest_starts_with_its_nominal_part_though_its_victim_still_terminates() -> (
    None
):
    # One 8-GPU H100 node, one 4-GPU A100 node; a and c have 4 H100 GPUs nominal each, b
    # none. b's f0 (three 2-GPU pods) borrows 6 H100 GPUs. p0 (a, three 2-GPU pods on H100)
    # starts one pod on the 2 free GPUs and reclaims one of f0's pods for its second (its
    # third would borrow: it is no reclaimer's). f0 ends while that pod still terminates:
    # p0 starts its second pod at once, within nominal, on GPUs f0 left (not those it was
    # nominated: by choice, docs/qsch.md), and its third, its borrowed rest, has its turn
    # among the borrowers in the same cycle and borrows c's unused quota. a then runs 6 GPUs
    # of its nominal 4: the reclaim ended within nominal, the rest is a borrower, as it was
    # a cycle later before the rest had a turn in the same cycle. (The world
    # tests/qsch/test_nominated_reclaimer_property.py's search found, read there as a
    # reclaimer borrowing.)
    cluster = (
        ClusterBuilder()
        .leaf("lh", nodes=1, model="H100", gpus=8)
        .leaf("la", nodes=1, model="A100", gpus=4)
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 4), Quota.gpus("c", "H100", 4)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))
    s.submit(job("f0", gpus=2, replicas=3, gang=False, tenant="b", models="H100"), now=0)
    assert s.step(now=0).placed == ("f0",)
    s.submit(
        job("p0", gpus=2, replicas=3, gang=False, tenant="a", models="H100", submitted_at=1),
        now=1,
    )
    r1 = s.step(now=1)
    assert [b.pod for b in r1.bindings] == [pod("p0", 0)]
    assert [(v.job, v.reason.value, v.pods) for v in r1.victims] == [
        ("f0", "reclaim", (pod("f0", 0),))
    ]
    (nom,) = r1.nominations
    assert nom.within_nominal and [b.pod for b in nom.bindings] == [pod("p0", 1)]
    for p in (pod("f0", 1), pod("f0", 2)):
        s.pod_finished(p, 2)
    r = s.step(now=3)
    # the nominal part, then the borrowed rest at its turn: a's nominal 4 GPUs, then 2 more
    assert [b.pod for b in r.bindings] == [pod("p0", 1), pod("p0", 2)]
    assert s.queue.status("p0").nomination is None and r.victims == ()
    assert tuple(s.queue.status("f0").terminating) == (pod("f0", 0),)
    assert s.admitter.used("a", "H100") == 6 * MILLI and s.admitter.used("a", "A100") == 0
    evict_victims(s, r1, now=4)
    for t in range(4, 8):
        assert s.step(now=t).victims == ()
    check_invariants(s)


def _gang_of_two_roles(jid: str, tenant: str, *, at: float) -> Job:
    """A gang on H100|A100: role ``worker`` of two 4-GPU pods and role ``second`` of one
    1-GPU pod."""
    g = job(jid, gpus=4, replicas=2, gang=True, tenant=tenant, models="H100|A100", submitted_at=at)
    second = Role(name="second", replicas=1, resources=Resources(gpus=1), gpu_models="H100|A100")
    return attrs.evolve(g, roles=(*g.roles, second))


def test_a_reclaiming_gang_starts_on_its_nominated_fit_within_nominal_though_quota_first_chooses_another() -> (
    None
):
    # A 4-GPU and an 8-GPU H100 node, a 4-GPU A100 node; a has 8 GPUs nominal of each
    # model, c 4 H100 (unused: it lends them), b none. b runs three 1-GPU pods on the small
    # H100 node and a 2-GPU job on the big one. g (a, a gang of two 4-GPU workers and one
    # 1-GPU pod, all on H100|A100) reclaims b's 2-GPU job: its workers are nominated the big
    # H100 node, its 1-GPU pod the A100 node, within a's nominal quota. Once the job is
    # gone, quota's first fit is the workers on A100 and the 1-GPU pod on H100, whose
    # nominal models leave out the nominated ones. Before, g was then placed as any job
    # (as if a's use had changed) and started its 1-GPU pod on the free H100 GPU of the
    # small node, borrowing from c: 9 H100 GPUs of a's 8. It now starts on the fit its
    # nomination holds, within nominal.
    cluster = (
        ClusterBuilder()
        .leaf("lh4", nodes=1, model="H100", gpus=4)
        .leaf("lh8", nodes=1, model="H100", gpus=8)
        .leaf("la", nodes=1, model="A100", gpus=4)
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 8), Quota.gpus("c", "H100", 4)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))
    for k in range(3):
        s.submit(job(f"b{k}", gpus=1, tenant="b", models="H100"), now=0)
    s.submit(job("b2g", gpus=2, tenant="b", models="H100"), now=0)
    r = s.step(now=0)
    assert {(b.pod.job, b.node) for b in r.bindings} == {
        ("b0", "lh4-n0"), ("b1", "lh4-n0"), ("b2", "lh4-n0"), ("b2g", "lh8-n0"),
    }  # fmt: skip
    s.submit(_gang_of_two_roles("g", "a", at=1), now=1)
    r1 = s.step(now=1)
    assert [(v.job, v.reason.value) for v in r1.victims] == [("b2g", "reclaim")]
    (nom,) = r1.nominations
    assert nom.within_nominal
    held = {(b.pod.role, b.node) for b in nom.bindings}
    assert held == {("worker", "lh8-n0"), ("second", "la-n0")}
    evict_victims(s, r1, now=2)
    r = s.step(now=2)
    assert r.placed == ("g",)
    assert {(b.pod.role, b.node) for b in r.bindings} == held
    assert s.admitter.used("a", "H100") == 8 * MILLI and s.admitter.used("a", "A100") == MILLI
    check_invariants(s)


def test_a_reclaiming_gang_waits_for_its_victims_rather_than_start_on_a_fit_the_free_gpus_hold_that_borrows() -> (
    None
):
    # Two 4-GPU H100 nodes and two 4-GPU A100 nodes; a has 4 H100 GPUs nominal and 8 A100,
    # c 4 of each (unused), b none. b runs three 1-GPU pods on one H100 node and one 1-GPU
    # pod on each A100 node. g (a, a gang of two 4-GPU workers and one 1-GPU pod, all on
    # H100|A100) reclaims b's two A100 pods: its workers are nominated the A100 nodes, its
    # 1-GPU pod an H100 GPU, within a's nominal quota. b's H100 pods end while the A100
    # pods still terminate: both H100 nodes are free, and quota's choice is now the
    # workers on H100 (where a borrows 4 of c's GPUs), which it says is within nominal but
    # not where it runs. Before, g was placed as any job and started its workers on the
    # two H100 nodes, 8 GPUs of a's 4, and b's A100 pods were evicted for nothing. It now
    # waits for them and starts on the fit its nomination holds.
    cluster = _two_of_each()
    quotas = [
        Quota.gpus("a", "H100", 4),
        Quota.gpus("a", "A100", 8),
        Quota.gpus("c", "H100", 4),
        Quota.gpus("c", "A100", 4),
    ]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))
    for k in range(3):
        s.submit(job(f"bh{k}", gpus=1, tenant="b", models="H100"), now=0)
    for k in range(2):
        s.submit(job(f"ba{k}", gpus=1, tenant="b", models="A100"), now=0)
    r = s.step(now=0)
    assert len(r.placed) == 5
    s.submit(_gang_of_two_roles("g", "a", at=1), now=1)
    r1 = s.step(now=1)
    assert sorted((v.job, v.reason.value) for v in r1.victims) == [
        ("ba0", "reclaim"), ("ba1", "reclaim"),
    ]  # fmt: skip
    (nom,) = r1.nominations
    assert nom.within_nominal
    assert {(b.pod.role, s.cluster.node(b.node).gpu_model) for b in nom.bindings} == {
        ("worker", "A100"), ("second", "H100"),
    }  # fmt: skip
    for k in range(3):
        finish(s, f"bh{k}", now=2)
    r = s.step(now=2)
    assert r.placed == () and r.pending["g"].code.value == "preempting", r.pending
    assert s.admitter.used("a", "H100") == 0
    evict_victims(s, r1, now=3)
    r = s.step(now=3)
    assert r.placed == ("g",) and r.victims == ()
    assert {(b.pod.role, s.cluster.node(b.node).gpu_model) for b in r.bindings} == {
        ("worker", "A100"), ("second", "H100"),
    }  # fmt: skip
    assert s.admitter.used("a", "H100") == MILLI and s.admitter.used("a", "A100") == 8 * MILLI
    check_invariants(s)


def test_a_reclaiming_gang_waits_for_its_victims_rather_than_start_on_another_fit_within_nominal_the_free_gpus_hold() -> (
    None
):
    # An 8-GPU and a 4-GPU A100 node, an 8-GPU and a 4-GPU H100 node; a has 8 GPUs nominal
    # of each model, c 4 H100 and 8 A100 (unused: it lends them), b none. b runs two 2-GPU
    # jobs on the big A100 node and four 1-GPU pods on the small one, and eleven 1-GPU pods
    # on the H100 nodes (one H100 GPU free). g (a, a gang of two 4-GPU workers and one 1-GPU
    # pod on H100|A100) reclaims seven of b's H100 pods: its workers are nominated the big
    # H100 node, its 1-GPU pod a free A100 GPU, within nominal. b's A100 jobs end while the
    # H100 pods terminate: the A100 nodes are free, readiness refuses the nominated fit
    # (its H100 GPUs are still taken), and another fit within nominal is ready: the
    # workers on A100, the 1-GPU pod on the free H100 GPU. Before, g started there, 8 A100
    # GPUs and 1 H100 GPU, and b's seven pods were evicted for nothing (they started again
    # on the H100 GPUs they left). It now waits for them and starts on the models it was
    # nominated on.
    cluster = (
        ClusterBuilder()
        .leaf("la8", nodes=1, model="A100", gpus=8)
        .leaf("la4", nodes=1, model="A100", gpus=4)
        .leaf("lh8", nodes=1, model="H100", gpus=8)
        .leaf("lh4", nodes=1, model="H100", gpus=4)
        .build()
    )
    quotas = [
        Quota.gpus("a", "H100", 8),
        Quota.gpus("a", "A100", 8),
        Quota.gpus("c", "H100", 4),
        Quota.gpus("c", "A100", 8),
    ]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))
    a100_jobs = ["b2g", "bx", "bs0", "bs1", "bs2", "bs3"]
    for jid in a100_jobs:
        s.submit(job(jid, gpus=2 if jid in ("b2g", "bx") else 1, tenant="b", models="A100"), now=0)
    for k in range(11):
        s.submit(job(f"bh{k}", gpus=1, tenant="b", models="H100"), now=0)
    r = s.step(now=0)
    assert len(r.placed) == 17
    s.submit(_gang_of_two_roles("g", "a", at=1), now=1)
    r1 = s.step(now=1)
    assert len(r1.victims) == 7 and {v.reason.value for v in r1.victims} == {"reclaim"}
    (nom,) = r1.nominations
    assert nom.within_nominal
    nominated = {(b.pod.role, b.node) for b in nom.bindings}
    assert nominated == {("worker", "lh8-n0"), ("second", "la8-n0")}
    for jid in a100_jobs:
        finish(s, jid, now=2)
    r = s.step(now=2)
    assert r.placed == () and r.pending["g"].code.value == "preempting", r.pending
    assert s.admitter.used("a", "A100") == 0
    evict_victims(s, r1, now=3)
    r = s.step(now=3)
    assert r.placed == ("g",) and r.victims == ()
    assert {(b.pod.role, s.cluster.node(b.node).gpu_model) for b in r.bindings} == {
        ("worker", "H100"), ("second", "A100"),
    }  # fmt: skip
    assert s.admitter.used("a", "H100") == 8 * MILLI and s.admitter.used("a", "A100") == MILLI
    check_invariants(s)


def test_a_pod_level_preemptor_nominated_by_priority_where_it_borrows_starts_there_though_its_nominal_part_is_on_another_model() -> (
    None
):
    # Found by the randomized property. c's f (priority 1, 3 x 2 GPUs, H100|A100) runs its
    # first pod on H100; c's nominal quota left there holds one more pod (its nominal
    # part), but b's pods fill the H100 node. f evicts c's own cf by priority on A100,
    # where c borrows, and is nominated there for one pod. Its nominal part used to be
    # narrowed onto H100, where c stays within nominal: once cf was gone, f placed nothing,
    # lost its nomination, cf started again on the A100 GPUs it left, and f evicted it a
    # second time, every two cycles. f now starts that pod on the A100 GPUs its nomination
    # holds.
    cluster = (
        ClusterBuilder()
        .leaf("lfh", nodes=1, model="H100", gpus=4)
        .leaf("lfa", nodes=1, model="A100", gpus=4)
        .build()
    )
    quotas = [Quota.gpus("b", "H100", 4), Quota.gpus("b", "A100", 4), Quota.gpus("c", "H100", 4)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))
    s.submit(job("b0", gpus=1, tenant="b", models="H100", submitted_at=0), now=0)
    s.submit(job("b1", gpus=1, tenant="b", models="H100", priority=1, submitted_at=0), now=0)
    s.submit(job("cf", gpus=1, tenant="c", models="A100", submitted_at=0), now=0)
    s.submit(job("b2", gpus=1, tenant="b", models="A100", submitted_at=0), now=0)
    s.submit(
        job("f", gpus=2, replicas=3, gang=False, tenant="c", priority=1, models="H100|A100",
            submitted_at=0),
        now=0,
    )  # fmt: skip
    s.step(now=0)
    assert [s.cluster.binding(p).node.split("-")[0] for p in s.queue.status("f").running] == ["lfh"]
    evicted: Counter[PodId] = Counter()
    r = s.step(now=1)
    assert [(v.job, v.reason) for v in r.victims] == [("cf", VictimReason.PRIORITY)]
    (nom,) = r.nominations
    assert nom.by_priority and not nom.within_nominal
    assert [(b.pod, b.node.split("-")[0]) for b in nom.bindings] == [(pod("f", 1), "lfa")]
    evicted.update(p for v in r.victims for p in v.pods)
    # b2 ends and cf's pod goes: quota's choice for f's two pods left is H100|A100 again
    finish(s, "b2", now=2)
    evict_victims(s, r, now=2)
    r = s.step(now=3)
    assert [(b.pod, b.node.split("-")[0]) for b in r.bindings][:1] == [(pod("f", 1), "lfa")]
    for t in range(4, 10):
        r = s.step(now=t)
        evicted.update(p for v in r.victims for p in v.pods)
        evict_victims(s, r, now=t)
    assert evicted == {pod("cf"): 1}
    check_invariants(s)


def test_a_pod_level_reclaimer_nominated_on_two_models_starts_no_pod_beyond_its_nominal_quota_on_either() -> (
    None
):
    # Two 4-GPU H100 nodes, two 4-GPU A100 nodes; a has 8 H100 and 4 A100 GPUs nominal, b
    # 4 H100, c 4 H100 and 4 A100 (unused: it lends them). b's f0 (1 GPU) and f2 (two
    # 3-GPU pods) run on H100, 3 GPUs borrowed; f1 (1 GPU) borrows on A100. p (a, four
    # 2-GPU pods on H100|A100, pod-level) reclaims one of f2's pods; its victim search
    # places two pods, one on each model. f1 ends while that pod terminates. p's four pods
    # are within nominal on H100 alone, which leaves out A100, where its nomination holds a
    # device: it used to be placed as any job, and all four started on the free A100 GPUs,
    # 8 where a's nominal is 4, borrowing, and f2's pod was evicted for nothing. It now
    # starts two pods on A100 (a's 4 nominal GPUs); its other two pods wait, nominated
    # anew without another victim, one on the H100 GPUs f2's pod is leaving, and start
    # there once it is gone. (The second of them, which needs no victim, is nominated
    # where placement puts it, a free A100 GPU, borrowed from c: a pod that evicts nobody
    # is not a reclaimer's.)
    cluster = _two_of_each()
    quotas = [
        Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 4), Quota.gpus("b", "H100", 4),
        Quota.gpus("c", "H100", 4), Quota.gpus("c", "A100", 4),
    ]  # fmt: skip
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))
    s.submit(job("f0", gpus=1, tenant="b", models="H100"), now=0)
    s.submit(job("f1", gpus=1, tenant="b", models="A100"), now=0)
    s.submit(job("f2", gpus=3, replicas=2, gang=False, tenant="b", models="H100"), now=0)
    assert s.step(now=0).placed == ("f0", "f1", "f2")
    s.submit(
        job("p", gpus=2, replicas=4, gang=False, tenant="a", models="H100|A100", submitted_at=1),
        now=1,
    )
    r1 = s.step(now=1)
    assert [(v.job, v.reason, v.pods) for v in r1.victims] == [
        ("f2", VictimReason.RECLAIM, (pod("f2", 0),))
    ]
    (nom,) = r1.nominations
    assert nom.within_nominal
    assert sorted(s.cluster.node(b.node).gpu_model for b in nom.bindings) == ["A100", "H100"]
    finish(s, "f1", now=2)
    r = s.step(now=3)
    assert [b.pod for b in r.bindings] == [pod("p", 0), pod("p", 1)] and r.victims == ()
    assert {s.cluster.node(b.node).gpu_model for b in r.bindings} == {"A100"}
    assert s.admitter.used("a", "A100") == 4 * MILLI and s.admitter.used("a", "H100") == 0
    (nom,) = r.nominations
    assert nom.bindings[0].pod == pod("p", 2) and nom.bindings[0].node == "lh-n0"
    victim_node = s.cluster.binding(pod("f2", 0)).node
    assert victim_node == "lh-n0"
    evict_victims(s, r1, now=4)
    r = s.step(now=4)
    assert [(b.pod, b.node) for b in r.bindings] == [(b.pod, b.node) for b in nom.bindings]
    assert s.admitter.used("a", "H100") == 2 * MILLI and r.victims == ()
    evicted: Counter[PodId] = Counter(p for v in r1.victims for p in v.pods)
    for t in range(5, 10):
        r = s.step(now=t)
        evicted.update(p for v in r.victims for p in v.pods)
        evict_victims(s, r, now=t)
    assert evicted == {pod("f2", 0): 1}
    assert len(s.queue.status("p").running) == 4
    check_invariants(s)


def test_a_pod_level_reclaimer_placed_again_within_its_nominal_quota_keeps_at_most_one_pod_per_node() -> (
    None
):
    # a has 8 H100 and 2 A100 GPUs nominal; b's two 1-GPU pods make the A100 node la-n0
    # the fullest. p (a, three 2-GPU pods on H100|A100, at most one per node) holds a
    # within-nominal nomination on la-n0 and lh-n0 (set here as a victim search would
    # leave it). Its three pods are within nominal on H100 alone, so it is placed within
    # a's nominal quota left on each model: E-Binpack puts a pod on each A100 node, one
    # too many for A100's 2 GPUs, and that pod is placed again on H100. Placed again
    # without counting the pods just kept, it went beside p's H100 pod on lh-n0 (two pods
    # on a node of a job allowed one); it now goes to lh-n1.
    cluster = _two_of_each()
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 2), Quota.gpus("b", "A100", 4)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(min_runtime=0.0))
    for jid in ("b0", "b1"):
        s.submit(job(jid, gpus=1, tenant="b", models="A100"), now=0)
    s.step(now=0)
    s.submit(
        job("p", gpus=2, replicas=3, gang=False, tenant="a", models="H100|A100", max_per_node=1,
            submitted_at=1),
        now=1,
    )  # fmt: skip
    held = (
        Binding(pod=pod("p", 0), node="la-n0", gpus=(2, 3), gpu_milli=MILLI),
        Binding(pod=pod("p", 1), node="lh-n0", gpus=(0, 1), gpu_milli=MILLI),
    )
    s.queue.set_nomination(
        Nomination(job="p", bindings=held, victims=(), created_at=1.0, within_nominal=True), "p"
    )
    r = s.step(now=1)
    assert r.placed == ("p",)
    nodes = [b.node for b in r.bindings]
    assert len(set(nodes)) == 3, nodes
    assert s.admitter.used("a", "A100") == 2 * MILLI and s.admitter.used("a", "H100") == 4 * MILLI
    check_invariants(s)
