"""A job allowed on several GPU models: quota and capacity judged on the same model. A
reclaim ends with its tenant within nominal on the model it runs on, and a job whose quota
admits it only on a pool too small for it can never fit."""

from __future__ import annotations

import pytest

from kant import Admitter, Quota, Scheduler
from kant.model import Job, ReasonCode, Resources, Role
from kant.preemption import PreemptionPolicy
from kant.sim import SimConfig, Simulator
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims

OFF = PreemptionPolicy(priority=False, reclaim=False, backfill=False)


def _h100_and_a100() -> ClusterBuilder:
    return ClusterBuilder().leaf("h", nodes=1, model="H100").leaf("x", nodes=1, model="A100")


def test_a_reclaimer_nominal_on_one_model_never_reclaims_on_another_where_it_would_borrow() -> None:
    # b's nominal is on A100 only, and the A100 node is full with an isolated tenant's job
    # no one may take; on H100, a borrows 4 of what d lends. b1 (4 GPUs, any model) fits
    # b's nominal on A100, but evicting a's borrowed job would run it on H100, where b
    # has no nominal: a reclaim would end with b borrowing
    adm = Admitter(
        [
            Quota.gpus("a", "H100", 4),
            Quota.gpus("d", "H100", 8),
            Quota.gpus("b", "A100", 8),
            Quota.gpus("c", "A100", 8),
        ],
        modes={"c": "isolated"},
    )
    s = Scheduler(_h100_and_a100().build(), admitter=adm)
    s.submit(job("c-fill", gpus=8, tenant="c", models="A100", preemptible=False), now=0)
    s.submit(job("a1", gpus=4, tenant="a", models="H100"), now=0)
    s.submit(job("a2", gpus=4, tenant="a", models="H100"), now=0)
    assert len(s.step(now=1).placed) == 3
    s.submit(job("b1", gpus=4, tenant="b"), now=2)
    r = s.step(now=3)
    assert r.victims == () and r.nominations == ()
    assert r.pending["b1"].code is not ReasonCode.PREEMPTING
    evict_victims(s, r, now=4)
    s.step(now=5)
    assert adm.used("b", "H100") == 0
    check_invariants(s)


def test_a_reclaimer_takes_back_on_the_model_where_it_is_within_nominal() -> None:
    # the same, but a borrows on A100 (from b's unused nominal): b1 reclaims there
    adm = Admitter(
        [Quota.gpus("a", "A100", 0), Quota.gpus("b", "A100", 8), Quota.gpus("e", "H100", 8)]
    )
    s = Scheduler(_h100_and_a100().build(), admitter=adm)
    s.submit(job("h-fill", gpus=8, tenant="e", models="H100", preemptible=False), now=0)
    s.submit(job("a1", gpus=8, tenant="a", models="A100"), now=0)
    assert len(s.step(now=1).placed) == 2
    s.submit(job("b1", gpus=4, tenant="b"), now=2)
    r = s.step(now=3)
    assert [v.job for v in r.victims] == ["a1"]
    evict_victims(s, r, now=4)
    assert s.step(now=5).placed == ("b1",)
    assert adm.used("b", "A100") == 4000 and adm.used("b", "H100") == 0


def test_a_gang_quota_admits_only_on_a_pool_too_small_for_it_never_fits() -> None:
    # b may use 16 GPUs of H100 and none of A100; the two pools hold 16 together, but
    # the H100 pool holds 8: the gang of two 8-GPU pods can never run, and under Strict
    # FIFO it must not keep small (which fits now) waiting for ever
    adm = Admitter([Quota.gpus("b", "H100", 16), Quota.gpus("b", "A100", 0)])
    s = Scheduler(_h100_and_a100().build(), admitter=adm, policy="strict-fifo")
    s.submit(job("big", gpus=8, replicas=2, tenant="b"), now=0)
    s.submit(job("small", gpus=1, tenant="b", models="H100"), now=1)
    r = s.step(now=2)
    assert r.placed == ("small",)
    why = r.pending["big"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    assert "quota could never admit it on A100" in why.message, why.message


@pytest.mark.parametrize("mode", ["isolated", "shared"])
def test_a_gang_whose_one_model_roles_together_exceed_its_quota_never_fits(mode: str) -> None:
    # two roles of 8 H100 GPUs each, a tenant allowed at most 8 H100 GPUs: each role alone
    # fits, the gang never does. It read QUOTA_EXCEEDED for ever and, under Strict FIFO,
    # kept its tenant's small job waiting behind it
    roles = tuple(
        Role(name=n, replicas=1, resources=Resources(gpus=8), gpu_models="H100")
        for n in ("r1", "r2")
    )
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=4).build(),
        admitter=Admitter([Quota.gpus("a", "H100", 8)], modes={"a": mode}),
        policy="strict-fifo",
    )
    s.submit(Job(id="two-roles", tenant="a", roles=roles, submitted_at=1), now=1)
    s.submit(job("small", gpus=1, tenant="a", submitted_at=2), now=2)
    r = s.step(now=2)
    assert r.placed == ("small",)
    why = r.pending["two-roles"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    assert "roles 'r1', 'r2' together" in why.message, why.message


def test_a_gang_whose_one_model_roles_fit_its_quota_together_is_not_called_unsatisfiable() -> None:
    # (the same gang under a quota of 16: admitted; a role on several models is not summed)
    roles = (
        Role(name="r1", replicas=1, resources=Resources(gpus=8), gpu_models="H100"),
        Role(name="r2", replicas=1, resources=Resources(gpus=8), gpu_models="H100"),
        Role(name="any", replicas=1, resources=Resources(gpus=8)),
    )
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=3).leaf("x", nodes=1, model="A100").build(),
        admitter=Admitter([Quota.gpus("a", "H100", 16), Quota.gpus("a", "A100", 8)]),
        policy="strict-fifo",
    )
    s.submit(Job(id="three-roles", tenant="a", roles=roles, submitted_at=1), now=1)
    assert s.step(now=2).placed == ("three-roles",)
    check_invariants(s)


def test_a_gang_quota_admits_on_a_pool_large_enough_is_not_called_unsatisfiable() -> None:
    # (the same, with two H100 nodes, one of them busy: big waits for capacity)
    adm = Admitter(
        [Quota.gpus("b", "H100", 16), Quota.gpus("b", "A100", 0), Quota.gpus("e", "H100", 8)]
    )
    s = Scheduler(
        ClusterBuilder().leaf("h", nodes=2, model="H100").leaf("x", nodes=1, model="A100").build(),
        admitter=adm,
        policy="strict-fifo",
    )
    s.submit(job("fill", gpus=8, tenant="e", models="H100"), now=0)
    assert s.step(now=1).placed == ("fill",)
    s.submit(job("big", gpus=8, replicas=2, tenant="b"), now=1)
    r = s.step(now=2)
    assert r.pending["big"].code is not ReasonCode.UNSATISFIABLE


def test_a_reclaimer_on_any_model_takes_back_all_it_needs_of_its_nominal_model() -> None:
    # b's nominal is 8 A100, all borrowed by a (two 4-GPU jobs); H100 is full of work no
    # one may take. b1 (8 GPUs, any model) must reclaim both of a's jobs and run on A100:
    # quota admitted it on H100 only (no A100 headroom left), so the search stopped at the
    # first victim, whose eviction left b short on A100, and reclaimed nothing
    adm = Admitter(
        [
            Quota.gpus("b", "A100", 8),
            Quota.gpus("a", "A100", 0),
            Quota.gpus("e", "H100", 8),
            Quota.gpus("d", "H100", 16),
            Quota.gpus("c", "A100", 4),
        ],
        modes={"e": "isolated", "c": "isolated"},
    )
    cluster = ClusterBuilder().leaf("h", nodes=1, model="H100").leaf("x", nodes=2, model="A100")
    s = Scheduler(cluster.build(), admitter=adm)
    s.submit(job("e-fill", gpus=8, tenant="e", models="H100", preemptible=False), now=0)
    s.submit(job("a1", gpus=4, tenant="a", models="A100"), now=0)
    s.step(now=1)
    s.submit(job("c-fill", gpus=4, tenant="c", models="A100", preemptible=False), now=1)
    s.submit(job("a2", gpus=4, tenant="a", models="A100"), now=1)
    s.step(now=2)
    assert adm.used("a", "A100") == 8000
    s.submit(job("b1", gpus=8, tenant="b"), now=3)
    r = s.step(now=3)
    assert sorted(v.job for v in r.victims) == ["a1", "a2"]
    evict_victims(s, r, now=4)
    assert s.step(now=5).placed == ("b1",)
    assert adm.used("b", "A100") == 8000 and adm.used("b", "H100") == 0
    check_invariants(s)


def _two_models_4_each() -> Scheduler:
    cluster = ClusterBuilder().leaf("h", nodes=1, model="H100", gpus=4)
    cluster = cluster.leaf("a", nodes=1, model="A100", gpus=4).build()
    quotas = [Quota.gpus("a", "H100", 4), Quota.gpus("a", "A100", 4)]
    return Scheduler(cluster, admitter=Admitter(quotas), preemption=OFF)


def test_a_pod_level_job_on_two_models_cut_by_quota_asks_for_a_cycle_at_once_for_its_rest() -> None:
    # w (3 pods of 2 GPUs) may run on H100 or A100, 4 GPUs of quota each: quota admits 2 pods,
    # counted on both models, since they may land on either. Once they are placed (on one
    # model) the third fits the other model's quota: the cycle asks for another at once,
    # which places it
    s = _two_models_4_each()
    s.submit(job("w", gpus=2, replicas=3, gang=False, tenant="a"), now=0)
    r = s.step(now=0)
    assert len(r.bindings) == 2 and r.pending["w"].code is ReasonCode.QUOTA_EXCEEDED
    assert r.again
    r = s.step(now=0)
    assert len(r.bindings) == 1 and not r.again
    assert s.status("w").pods_waiting == 0
    check_invariants(s)


def test_a_pod_level_job_on_two_models_cut_by_quota_starts_whole_in_the_simulator_with_nothing_else_happening() -> (
    None
):
    # x holds one H100 for 1000 s; w's 3 pods (2 GPUs each, H100 or A100): quota admits 2
    # (3 H100 GPUs left, 4 A100), placed on A100 at t=0; the third fits the H100 quota
    # left. No event follows until w's pods end at 50: its third pod must start at 0
    jobs = [
        job("x", gpus=1, models="H100", tenant="a", runtime=1000.0),
        job("w", gpus=2, replicas=3, gang=False, tenant="a", runtime=50.0),
    ]
    res = Simulator(_two_models_4_each(), jobs, SimConfig(tick=0.0)).run()
    assert res.record("w").all_started_at == 0.0


def test_a_pod_level_job_whose_admitted_model_ran_out_of_pod_slots_asks_for_a_cycle_at_once_for_the_other_model() -> (
    None
):
    # j0 (tenant c, no quota of its own: it borrows) has 4 one-GPU pods, H100 or A100; 2 H100
    # GPUs of quota are lendable, 4 A100: quota admits all 4 on A100 only, whose one node
    # takes 3 pods (max_pods). Placed, they leave 1 A100 GPU of quota: the last pod is then
    # admitted on either model, and the H100 node has a pod slot. The cycle asks for
    # another at once, which places it there
    cluster = ClusterBuilder().leaf("h", nodes=1, model="H100", gpus=4, max_pods=1)
    cluster = cluster.leaf("a", nodes=1, model="A100", gpus=8, max_pods=3).build()
    quotas = [Quota.gpus("a", "H100", 2), Quota.gpus("b", "A100", 4)]
    s = Scheduler(cluster, admitter=Admitter(quotas), preemption=OFF)
    s.submit(job("j0", gpus=1, replicas=4, gang=False, tenant="c"), now=0)
    r = s.step(now=0)
    assert {b.node for b in r.bindings} == {"a-n0"} and len(r.bindings) == 3
    assert r.again
    r = s.step(now=0)
    assert [b.node for b in r.bindings] == ["h-n0"] and not r.again
    check_invariants(s)


def test_a_pod_level_job_on_two_models_asks_for_no_other_cycle_when_one_model_alone_has_quota_left() -> (
    None
):
    # the A100 quota is used up (x): w's pods are admitted on H100 only, two of three; once
    # placed, no model has quota left for the third, so no cycle is asked for; and without
    # quotas a job placed in part (no room left anywhere) asks for none either
    s = _two_models_4_each()
    s.submit(job("x", gpus=4, models="A100", tenant="a"), now=0)
    s.submit(job("w", gpus=2, replicas=3, gang=False, tenant="a"), now=0)
    r = s.step(now=0)
    assert [b.pod.job for b in r.bindings] == ["x", "w", "w"] and not r.again
    cluster = ClusterBuilder().leaf("h", nodes=1, model="H100", gpus=4)
    s = Scheduler(cluster.leaf("a", nodes=1, model="A100", gpus=4).build(), preemption=OFF)
    s.submit(job("w", gpus=2, replicas=5, gang=False), now=0)
    r = s.step(now=0)
    assert len(r.bindings) == 4 and not r.again
