"""Static quota admission: shared and isolated tenants, borrowing, lending, reclaim."""

from __future__ import annotations

import re
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from kant.admission import Admitter, Quota, QuotaLedger, QuotaTable
from kant.admission.quota import QuotaDecision, admit_quota
from kant.errors import DuplicateError, InvalidConfigError, InvalidJobError, ValidationError
from kant.model import MILLI, Binding, Job, PodId, ReasonCode, Resources, Role, VictimReason
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import JobPhase, Queue
from kant.scheduler import Scheduler
from kant.sim.simulator import SimConfig, Simulator
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job

from .conftest import evict_victims, nodes, scheduler

G = MILLI  # one GPU in milli


def test_an_isolated_tenant_never_exceeds_its_nominal_quota() -> None:
    s = scheduler(
        nodes(4),
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 24)],
        modes={"a": "isolated"},
    )
    for i in range(3):
        s.submit(job(f"a{i}", gpus=4, tenant="a", submitted_at=i), now=i)
    r = s.step(now=5)
    assert r.placed == ("a0", "a1")
    assert r.pending["a2"].code is ReasonCode.QUOTA_EXCEEDED
    assert s.admitter.used("a", "H100") == 8 * G  # free GPUs exist; quota says no
    check_invariants(s)


def test_a_shared_tenant_borrows_unused_quota_up_to_its_borrowing_limit() -> None:
    s = scheduler(
        nodes(4),
        quotas=[Quota.gpus("a", "H100", 8, borrowing_limit=8), Quota.gpus("b", "H100", 24)],
    )
    for i in range(5):
        s.submit(job(f"a{i}", gpus=4, tenant="a", submitted_at=i), now=i)
    r = s.step(now=5)
    assert r.placed == ("a0", "a1", "a2", "a3")
    assert r.pending["a4"].code is ReasonCode.QUOTA_EXCEEDED
    assert s.admitter.used("a", "H100") == 16 * G


def test_a_lending_limit_keeps_the_rest_of_the_lenders_quota_unborrowable() -> None:
    s = scheduler(
        nodes(4),
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 24, lending_limit=4)],
    )
    for i in range(4):
        s.submit(job(f"a{i}", gpus=4, tenant="a", submitted_at=i), now=i)
    r = s.step(now=5)
    assert r.placed == ("a0", "a1", "a2")  # 8 own + 4 lent by b
    assert r.pending["a3"].code is ReasonCode.QUOTA_EXCEEDED


def test_a_tenant_without_quota_may_only_borrow() -> None:
    s = scheduler(nodes(2), quotas=[Quota.gpus("a", "H100", 4)])
    s.submit(job("x", gpus=4, tenant="nobody"), now=0)
    s.submit(job("y", gpus=1, tenant="nobody", submitted_at=1), now=1)
    r = s.step(now=2)
    assert r.placed == ("x",)
    assert r.pending["y"].code is ReasonCode.QUOTA_EXCEEDED


def test_reclaim_takes_from_the_borrower_never_from_the_lender() -> None:
    # 2 nodes = 16 GPUs; a and b have 8 each. b borrows 4 of a's while a is idle.
    s = scheduler(nodes(2), quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)])
    s.submit(job("b-old", gpus=8, tenant="b", submitted_at=0), now=0)
    s.step(now=1)
    s.submit(job("b-new", gpus=4, tenant="b", submitted_at=2), now=2)
    s.step(now=3)
    # the lender's own job is the newest of all, and has the lowest priority
    s.submit(job("a-old", gpus=4, tenant="a", priority=-1, submitted_at=4), now=4)
    s.step(now=5)
    assert s.admitter.used("b", "H100") == 12 * G and s.cluster.num_pods == 3
    # a wants its nominal back: 4 more GPUs, quota full because b borrowed
    s.submit(job("a-new", gpus=4, tenant="a", priority=-1, submitted_at=6), now=6)
    r = s.step(now=7)
    assert [(v.job, v.reason) for v in r.victims] == [("b-new", VictimReason.RECLAIM)]
    assert r.pending["a-new"].code is ReasonCode.PREEMPTING
    evict_victims(s, r, now=8)
    r = s.step(now=9)
    assert r.placed == ("a-new",)
    assert s.admitter.used("a", "H100") == 8 * G and s.admitter.used("b", "H100") == 8 * G
    assert s.queue.status("b-new").phase is JobPhase.PENDING  # requeued, not dropped
    check_invariants(s)


@pytest.mark.parametrize(
    ("a1_priority", "victims"),
    [
        pytest.param(10, [], id="no victim when only the other tenant's guaranteed share runs"),
        pytest.param(0, ["a1"], id="a tenant's own lower-priority job is the victim, not b's"),
    ],
)
def test_guaranteed_use_is_safe_from_other_tenants(a1_priority: int, victims: list[str]) -> None:
    s = scheduler(nodes(2), quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)])
    s.submit(job("a1", gpus=8, tenant="a", priority=a1_priority), now=0)
    s.submit(job("b1", gpus=8, tenant="b", priority=0), now=0)
    s.step(now=1)
    # a is at its nominal: a higher-priority job of a may not evict b's guaranteed share
    s.submit(job("a2", gpus=8, tenant="a", priority=10, submitted_at=2), now=2)
    r = s.step(now=3)
    assert [v.job for v in r.victims] == victims
    if not victims:
        assert r.pending["a2"].code is ReasonCode.QUOTA_EXCEEDED


def test_quota_ledger_headroom_follows_the_cohort() -> None:
    table = QuotaTable(
        [Quota.gpus("a", "H100", 8, lending_limit=2), Quota.gpus("b", "H100", 8)], {"c": "isolated"}
    )
    led = QuotaLedger(table, {})
    assert led.headroom("a", "H100") == 16 * G  # own 8 + b's 8 (a's guaranteed part is its own)
    led.add("b", "H100", 9 * G)  # b borrows 1 of a's 2 lendable
    assert led.headroom("a", "H100") == 7 * G  # 6 guaranteed + 1 left in the pool
    assert led.headroom("b", "H100") == 1 * G
    assert led.borrowing("b", "H100") and not led.borrowing("a", "H100")
    assert led.headroom("c", "H100") == 0  # isolated without quota
    mark = led.mark()
    led.add("a", "H100", 7 * G)
    assert led.headroom("a", "H100") == 0
    led.rollback(mark)
    assert led.usage == {("b", "H100"): 9 * G} and led.headroom("a", "H100") == 7 * G


def test_no_quotas_means_no_static_limit() -> None:
    a = Admitter()
    led = a.ledger()
    assert led.headroom("anyone", "H100") == float("inf")
    assert led.borrowing("anyone", "H100")  # nothing is guaranteed


def test_quota_configuration_is_validated() -> None:
    with pytest.raises(InvalidConfigError):
        Quota.gpus("a", "H100", 4, lending_limit=8)
    with pytest.raises(InvalidConfigError):
        Quota(tenant="a", gpu_model="H100", nominal=-1)
    with pytest.raises(DuplicateError):
        Admitter([Quota.gpus("a", "H100", 4), Quota.gpus("a", "H100", 8)])
    with pytest.raises(InvalidConfigError):
        Admitter([Quota.gpus("a", "H100", 4)], modes={"a": "hermit"})


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"nominal": -1}, "'nominal' = -1: must be a number of GPUs >= 0"),
        ({"borrowing_limit": -0.5}, "'borrowing_limit' = -0.5: must be a number of GPUs >= 0"),
        ({"lending_limit": 2}, "'lending_limit' = 2: cannot exceed nominal (1 GPUs)"),
        ({"lending_limit": 1.5}, "'lending_limit' = 1.5: cannot exceed nominal (1 GPUs)"),
    ],
)
def test_a_quota_given_in_gpus_is_refused_in_the_gpus_it_was_given_in(
    kw: dict[str, float], said: str
) -> None:
    # (Quota.gpus("a", "H100", -1) said "'nominal' = -1000: must be an int >= 0 (GPU milli)",
    # and a lending limit of 2 GPUs on 1 "= 2000: cannot exceed nominal 1000")
    args = {"nominal": 1, **kw}
    with pytest.raises(InvalidConfigError, match=re.escape(said)):
        Quota.gpus("a", "H100", **args)


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("quotas", {"quotas": 5}),
        ("quotas", {"quotas": "a"}),
        ("quotas", {"quotas": [5]}),
        ("modes", {"quotas": [], "modes": ["a"]}),
        ("modes", {"quotas": [], "modes": "isolated"}),
        ("modes['a']", {"quotas": [], "modes": {"a": ["isolated"]}}),
    ],
)
def test_a_quota_table_of_something_that_is_not_quotas_or_modes_is_refused_naming_it(
    field: str, kw: dict[str, object]
) -> None:
    named = re.escape(f"field {field!r}")
    with pytest.raises(InvalidConfigError, match=named):
        QuotaTable(**kw)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match=named):
        Admitter(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("tenant", ["team/a", " a", "", 5])
def test_a_quota_or_a_mode_for_a_tenant_no_job_can_belong_to_is_refused_naming_it(
    tenant: object,
) -> None:
    # (a job's tenant is a name without '/' or surrounding spaces, as a config file's is:
    # Quota.gpus("team/a", ...) and modes={"team/a": ...} were taken, a quota and a mode
    # no job could ever use, while team/a's jobs, refused, could not say why)
    with pytest.raises(InvalidJobError):
        job("j", tenant=tenant)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="field 'tenant'"):
        Quota.gpus(tenant, "H100", 8)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="field 'modes'"):
        Admitter([Quota.gpus("a", "H100", 8)], modes={tenant: "isolated"})  # type: ignore[dict-item]
    with pytest.raises(InvalidConfigError, match="field 'modes'"):
        QuotaTable([], modes={tenant: "shared"})  # type: ignore[dict-item]


def test_charging_a_job_at_once_is_all_or_none_and_uncharging_skips_pods_not_charged() -> None:
    def b(i: int, node: str = "n0") -> Binding:
        return Binding(pod=PodId(job="j", role="w", index=i), node=node, gpus=(i,))

    a = Admitter([Quota.gpus("a", "H100", 8)])
    a.charge_many("a", [b(0), b(1), b(2, "cpu")], ["H100", "H100", None])
    assert a.usage() == {("a", "H100"): 2 * MILLI}
    with pytest.raises(DuplicateError):
        a.charge_many("a", [b(3), b(1)], ["H100", "H100"])  # pod 1 is already charged
    with pytest.raises(DuplicateError):
        a.charge_many("a", [b(4), b(4)], ["H100", "H100"])  # named twice
    assert a.usage() == {("a", "H100"): 2 * MILLI}  # neither call changed anything
    assert not a.is_charged(b(3).pod) and not a.is_charged(b(4).pod)
    a.uncharge_charged([b(0).pod, b(9).pod, b(2).pod])  # pod 9 was never charged
    assert a.usage() == {("a", "H100"): MILLI}
    assert a.charged() == [b(1).pod]
    a.uncharge_charged([b(1).pod])
    assert a.usage() == {}
    check_invariants(a)


def test_charging_a_job_with_fewer_models_than_bindings_is_refused_and_charges_nothing() -> None:
    bs = [Binding(pod=PodId(job="j", role="w", index=i), node="n0", gpus=(i,)) for i in range(3)]
    a = Admitter([Quota.gpus("a", "H100", 8)])
    for models in (["H100", "H100"], ["H100"] * 4, "A10", None):
        with pytest.raises(ValidationError, match="'models'"):
            a.charge_many("a", bs, models)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="'bindings'"):
        a.charge_many("a", [bs[0], "j/w/1"], ["H100", "H100"])  # type: ignore[list-item]
    assert a.charged() == [] and a.usage() == {} and a.version == 0
    check_invariants(a)


def test_a_charge_of_the_wrong_kind_is_refused_and_an_uncharge_of_one_puts_back_what_it_took() -> (
    None
):
    # charge(None, b, 5) was recorded under (None, 5) and charge("t", "x", ...) raised
    # AttributeError; uncharge_charged([p0, ["junk"]]) dropped p0's charge but kept its usage
    bs = [Binding(pod=PodId(job="j", role="w", index=i), node="n0", gpus=(i,)) for i in range(2)]
    a = Admitter([Quota.gpus("a", "H100", 8)])
    a.charge_many("a", bs, ["H100", "H100"])
    late = Binding(pod=PodId(job="k", role="w", index=0), node="n0", gpus=(2,))
    for call in (
        lambda: a.charge(None, late, "H100"),  # type: ignore[arg-type]
        lambda: a.charge("a", late, 5),  # type: ignore[arg-type]
        lambda: a.charge("a", "k/w/0", "H100"),  # type: ignore[arg-type]
        lambda: a.charge_many(None, [late], ["H100"]),  # type: ignore[arg-type]
        lambda: a.charge_many("a", [late], [5]),  # type: ignore[list-item]
        lambda: a.uncharge_charged([bs[0].pod, ["junk"]]),  # type: ignore[list-item]
        lambda: a.uncharge_charged(5),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError):
            call()
        assert a.charged() == [b.pod for b in bs] and a.usage() == {("a", "H100"): 2 * MILLI}
        check_invariants(a)


@pytest.mark.parametrize(
    "quota",
    [
        Quota.gpus("iso", "H100", 8, borrowing_limit=8),
        Quota.gpus("iso", "H100", 8, lending_limit=2),
    ],
)
def test_an_isolated_tenants_borrowing_or_lending_limit_is_refused_not_ignored(
    quota: Quota,
) -> None:
    with pytest.raises(InvalidConfigError, match="isolated tenant neither borrows nor lends"):
        Admitter([quota], modes={"iso": "isolated"})
    with pytest.raises(InvalidConfigError, match="iso/H100"):
        Admitter([quota], default_mode="isolated")
    assert Admitter([quota]).table.ceiling("iso", "H100") > 0  # (shared: the limit holds)


# --------------------------------------------------------------------------- pod-level jobs
# beyond their tenant's nominal quota: the nominal share of their first pods


def _decide(
    usage: dict[tuple[str, str], int],
    quotas: list[Quota],
    j: Job,
    models: tuple[str, ...] = ("H100",),
) -> QuotaDecision:
    led = QuotaLedger(QuotaTable(quotas), usage)
    return admit_quota(led, j, tuple(j.pods()), {j.roles[0].name: models})


@pytest.mark.parametrize(
    ("usage", "quotas", "asked", "models", "want"),
    [
        pytest.param(
            {}, [Quota.gpus("a", "H100", 8)], 9, ("H100",), 8,
            id="nine pods on eight GPUs of nominal quota: the first eight",
        ),
        pytest.param(
            {("a", "H100"): 5 * G}, [Quota.gpus("a", "H100", 8)], 9, ("H100",), 3,
            id="what the tenant's running pods use is not counted again",
        ),
        pytest.param(
            {("a", "H100"): 8 * G}, [Quota.gpus("a", "H100", 8)], 9, ("H100",), 0,
            id="a tenant at its nominal quota has no nominal share left",
        ),
        pytest.param(
            {}, [Quota.gpus("a", "H100", 4), Quota.gpus("a", "A100", 4)], 9,
            ("H100", "A100"), 4,
            id="two models of four each: four pods, the most one model holds, not their sum",
        ),
        pytest.param(
            {("b", "H100"): 16 * G}, [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)],
            9, ("H100",), 8,
            id="what another tenant borrows of the nominal quota does not count against it",
        ),
    ],
)  # fmt: skip
def test_nominal_pods_counts_a_pod_level_jobs_first_pods_within_its_tenants_nominal_quota_left(
    usage: dict[tuple[str, str], int],
    quotas: list[Quota],
    asked: int,
    models: tuple[str, ...],
    want: int,
) -> None:
    j = job("a1", gpus=1, replicas=asked, gang=False, tenant="a", models=frozenset(models))
    dec = _decide(usage, quotas, j, models)
    assert not dec.within_nominal
    assert dec.nominal_pods == want


def test_nominal_pods_is_zero_for_a_request_within_nominal_a_gang_and_one_pod() -> None:
    q = [Quota.gpus("a", "H100", 8)]
    assert _decide({}, q, job("p", gpus=1, replicas=8, gang=False, tenant="a")).nominal_pods == 0
    gang = _decide({}, q, job("g", gpus=1, replicas=9, gang=True, tenant="a"))
    assert not gang.within_nominal and gang.nominal_pods == 0
    one = _decide({}, q, job("o", gpus=9, tenant="a"))
    assert not one.within_nominal and one.nominal_pods == 0


@settings(max_examples=200, deadline=None)
@given(
    nominal=st.lists(st.integers(0, 12), min_size=2, max_size=2),
    used=st.lists(st.integers(0, 14), min_size=2, max_size=2),
    per_pod=st.integers(1, 3),
    first=st.integers(1, 6),
    second=st.integers(0, 6),
    models=st.sampled_from([("H100",), ("A100",), ("H100", "A100")]),
)
def test_nominal_pods_is_the_longest_prefix_of_the_request_within_nominal(
    nominal: list[int],
    used: list[int],
    per_pod: int,
    first: int,
    second: int,
    models: tuple[str, ...],
) -> None:
    # a pod-level job of one or two roles; its first k pods (roles in order) are within
    # its tenant's nominal quota, its first k + 1 are not
    table = QuotaTable(
        [Quota.gpus("a", m, n) for m, n in zip(("H100", "A100"), nominal, strict=True)]
    )
    led = QuotaLedger(table, {("a", m): u * G for m, u in zip(("H100", "A100"), used, strict=True)})
    roles = [
        Role(
            name="r0",
            replicas=first,
            resources=Resources(gpus=per_pod),
            gpu_models=frozenset(models),
        )
    ]
    if second:
        roles.append(
            Role(
                name="r1",
                replicas=second,
                resources=Resources(gpus=1),
                gpu_models=frozenset({"H100"}),
            )
        )
    j = Job(id="j", tenant="a", roles=tuple(roles), gang=False)
    role_models = {"r0": models, "r1": ("H100",)}
    pods = tuple(j.pods())
    before = dict(led.usage)
    dec = admit_quota(led, j, pods, role_models)
    assert led.usage == before  # (a decision changes nothing)
    if dec.within_nominal:
        assert dec.nominal_pods == 0
        return
    k = dec.nominal_pods
    assert 0 <= k < len(pods)
    assert k == 0 or admit_quota(led, j, pods[:k], role_models).within_nominal
    assert not admit_quota(led, j, pods[: k + 1], role_models).within_nominal


@pytest.mark.parametrize("asked", [8, 9, 16])
def test_a_pod_level_job_asking_more_than_its_nominal_quota_reclaims_its_nominal_share(
    asked: int,
) -> None:
    # a and b have 8 GPUs nominal each; b's pod-level job of 16 one-GPU pods borrows all of
    # a's. a's pod-level job reclaims 8 pods, however many it asks: with 9 it reclaimed
    # nothing, ever (the whole request was judged, and the whole request borrows)
    s = scheduler(nodes(2), quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)])
    s.submit(job("b1", gpus=1, replicas=16, gang=False, tenant="b", models="H100"), now=0)
    s.step(now=0)
    assert s.admitter.used("b", "H100") == 16 * G
    s.submit(job("a1", gpus=1, replicas=asked, gang=False, tenant="a", submitted_at=10), now=10)
    r = s.step(now=10)
    assert [(v.job, v.reason) for v in r.victims] == [("b1", VictimReason.RECLAIM)] * 8
    assert r.pending["a1"].code is ReasonCode.PREEMPTING
    evict_victims(s, r, now=11)
    r = s.step(now=20)
    assert r.placed == ("a1",)
    for t in (30, 40):  # and no more: the rest of a1 would borrow, and b is within nominal
        r = s.step(now=t)
        assert r.victims == ()
        assert s.admitter.used("a", "H100") == 8 * G and s.admitter.used("b", "H100") == 8 * G
    check_invariants(s)


def test_two_pod_level_jobs_of_one_tenant_reclaim_its_nominal_share_once_between_them() -> None:
    # a's first job reclaims 5 pods in the cycle; the second job's nominal share is the 3
    # GPUs left of a's 8, not 8 again: the quota held for the first one counts
    s = scheduler(nodes(2), quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)])
    s.submit(job("b1", gpus=1, replicas=16, gang=False, tenant="b", models="H100"), now=0)
    s.step(now=0)
    s.submit(job("a1", gpus=1, replicas=5, gang=False, tenant="a", submitted_at=10), now=10)
    s.submit(job("a2", gpus=1, replicas=9, gang=False, tenant="a", submitted_at=11), now=11)
    r = s.step(now=12)
    by = {p: sum(len(v.pods) for v in r.victims if v.preemptor == p) for p in ("a1", "a2")}
    assert by == {"a1": 5, "a2": 3}
    assert {v.reason for v in r.victims} == {VictimReason.RECLAIM}
    evict_victims(s, r, now=13)
    s.step(now=20)
    s.step(now=30)
    assert s.admitter.used("a", "H100") == 8 * G and s.admitter.used("b", "H100") == 8 * G
    check_invariants(s)


@pytest.mark.parametrize("policy", ["best-effort-fifo", "strict-fifo", "easy-backfill"])
def test_a_reclaimers_nominal_part_starts_at_its_place_and_its_borrowed_rest_waits_its_turn_among_the_borrowers(
    policy: str,
) -> None:
    # four 8-GPU nodes; quotas a 8, b 8, e 16. b1 borrows 8 GPUs of e's; d (tenant c, no
    # quota, 8 GPUs, t=1) and n (tenant a, 12 one-GPU pods, t=2) wait. n reclaims 8 of b1's
    # pods; once they are gone and 8 more GPUs free up, n starts its nominal part (8) with
    # its nomination, and its 4 borrowed pods have their turn in the same cycle, behind
    # b1's requeued pods (t=0) and d (t=1), the earlier borrowers: before, they passed both,
    # and d stayed QUOTA_EXCEEDED
    s = scheduler(
        nodes(4),
        quotas=[
            Quota.gpus("a", "H100", 8),
            Quota.gpus("b", "H100", 8),
            Quota.gpus("e", "H100", 16),
        ],
    )
    s.submit(job("e1", gpus=8, replicas=2, gang=False, tenant="e", models="H100"), now=0)
    s.submit(job("b1", gpus=1, replicas=16, gang=False, tenant="b", models="H100"), now=0)
    assert s.step(now=0).placed == ("e1", "b1")
    s.submit(job("d", gpus=8, tenant="c", submitted_at=1), now=1)
    s.submit(
        job("n", gpus=1, replicas=12, gang=False, tenant="a", models="H100", submitted_at=2), now=2
    )
    r = s.step(now=3)
    assert [(v.job, v.reason) for v in r.victims] == [("b1", VictimReason.RECLAIM)] * 8
    assert r.pending["n"].code is ReasonCode.PREEMPTING
    evict_victims(s, r, now=4)
    s.pod_finished(PodId(job="e1", role="worker", index=1), now=4)
    r = s.step(now=5)
    placed = {j: sum(1 for b in r.bindings if b.pod.job == j) for j in r.placed}
    assert placed == {"n": 8, "b1": 8}  # n's nominal part, then the first borrower
    assert r.pending["n"].code is ReasonCode.QUOTA_EXCEEDED  # (its rest, after d's turn)
    assert not r.again  # (its rest had its turn: no cycle at once is needed for it)
    assert r.pending["d"].code is ReasonCode.QUOTA_EXCEEDED
    assert {t: s.admitter.used(t, "H100") // G for t in "abce"} == {"a": 8, "b": 16, "c": 0, "e": 8}
    r = s.step(now=6)
    assert r.placed == () and not r.again  # n's rest borrows, behind d
    s.pod_finished(PodId(job="e1", role="worker", index=0), now=7)
    r = s.step(now=8)
    assert r.placed == ("d",)
    assert s.status("n").pods_waiting == 4
    check_invariants(s)


def _capped_reclaimer_whose_victims_are_gone(placer: Placer) -> Scheduler:
    """Quotas a 4, b 4, c 16; a 16-GPU node and an 8-GPU one. b1 (8 one-GPU pods) borrows 4
    of a's; n (tenant a, 2 x 4 GPUs, at most one per node) reclaims 4 of b1's pods on the
    big node for its nominal pod; then those pods are gone and c1 (8 GPUs, on the big node)
    ends: the big node has 12 GPUs free, the other none."""
    cluster = ClusterBuilder().leaf("l0", nodes=1, gpus=16).leaf("l1", nodes=1).build()
    s = Scheduler(
        cluster,
        queue=Queue(),
        admitter=Admitter(
            [Quota.gpus("a", "H100", 4), Quota.gpus("b", "H100", 4), Quota.gpus("c", "H100", 16)]
        ),
        placer=placer,
    )
    s.submit(job("c2", gpus=8, tenant="c"), now=0)
    s.submit(job("b1", gpus=1, replicas=8, gang=False, tenant="b"), now=0)
    s.submit(job("c1", gpus=8, tenant="c"), now=0)
    r = s.step(now=0)
    assert {b.pod.job: b.node for b in r.bindings} == {"c2": "l1-n0", "c1": "l0-n0", "b1": "l0-n0"}
    s.submit(job("n", gpus=4, replicas=2, gang=False, tenant="a", max_per_node=1), now=1)
    r = s.step(now=2)
    assert [(v.job, v.reason) for v in r.victims] == [("b1", VictimReason.RECLAIM)] * 4
    evict_victims(s, r, now=3)
    for p in s.queue.status("c1").running:
        s.pod_finished(p, now=3)
    return s


def test_a_reclaimers_borrowed_rest_has_its_turn_in_the_same_cycle_counting_the_pods_just_placed() -> (
    None
):
    # n starts its nominal pod on the big node, b1's requeued pods (the earlier borrower)
    # take 4 GPUs there, and n's borrowed pod has its turn in the same cycle: the 4 GPUs
    # left are on the node of its first pod, which the cap rules out (the cluster state does
    # not hold that pod yet: placement counts it as the job's own). Before, the rest waited
    # for a later cycle
    s = _capped_reclaimer_whose_victims_are_gone(Placer("ebinpack"))
    r = s.step(now=4)
    assert [(b.pod.job, b.node) for b in r.bindings] == [("n", "l0-n0")] + [("b1", "l0-n0")] * 4
    why = r.pending["n"]
    assert why.code is ReasonCode.NO_FIT and "max_per_node" in why.message
    assert not r.again and r.victims == ()
    check_invariants(s)


class _PlacerOfItsOwn(Placer):
    """A placer overriding ``place``: the cycle asks it through the protocol, which tells
    it nothing of the pods placed earlier in the cycle."""

    def place(self, job: Job, snap: Any, pods: Any = None) -> Any:
        return super().place(job, snap, pods=pods)


def test_a_rest_a_placer_other_than_kants_cannot_place_with_its_first_pods_waits_a_cycle() -> None:
    # the same, with a placer that reads only the running pods: n's rest waits for the next
    # cycle (which the result asks for at once), where its first pod runs and the cap holds
    s = _capped_reclaimer_whose_victims_are_gone(_PlacerOfItsOwn("ebinpack"))
    r = s.step(now=4)
    assert [(b.pod.job, b.node) for b in r.bindings] == [("n", "l0-n0")] + [("b1", "l0-n0")] * 4
    assert r.pending["n"].message == (
        "1 pods beyond the tenant's nominal quota wait for their turn among the borrowers"
    )
    assert r.again
    r = s.step(now=4)
    why = r.pending["n"]
    assert why.code is ReasonCode.NO_FIT and "max_per_node" in why.message
    check_invariants(s)


def test_a_reclaimers_borrowed_rest_starts_in_the_simulator_though_nothing_happens_after_its_nominal_part() -> (
    None
):
    # 40 GPUs; quotas a 8, b 8, e 24. n (tenant a, 12 pods) reclaims 8 of b1's pods at t=1;
    # at t=31 b1's victims are gone and e1 ends: n starts its nominal part (8), and its rest
    # (4) has its turn in the same cycle. No event follows until t=100000: the rest starts
    # at t=31, not when others end (it was left to a cycle the simulator ran at once, on
    # CycleResult.again; with a placer that does not count the pods just placed it still is:
    # test_a_rest_a_placer_other_than_kants_cannot_place_with_its_first_pods_waits_a_cycle)
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=5, model="H100", gpus=8).build(),
        queue=Queue(history=None),
        admitter=Admitter(
            [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8), Quota.gpus("e", "H100", 24)]
        ),
        placer=Placer("ebinpack"),
        policy="best-effort-fifo",
        preemption=PreemptionPolicy(),
    )
    jobs = [
        job("e1", gpus=1, replicas=12, gang=False, tenant="e", runtime=31, submitted_at=0),
        job("e2", gpus=1, replicas=12, gang=False, tenant="e", runtime=1e5, submitted_at=0),
        job("b1", gpus=1, replicas=16, gang=False, tenant="b", runtime=1e5, submitted_at=0),
        job("n", gpus=1, replicas=12, gang=False, tenant="a", runtime=1e5, submitted_at=1),
    ]
    res = Simulator(s, jobs, SimConfig(tick=0, grace_period=30, horizon=5e4)).run()
    n = next(r for r in res.records if r.job_id == "n")
    assert n.started_at == 31.0 and n.all_started_at == 31.0
    assert s.status("n").pods_waiting == 0
    check_invariants(s)


def test_a_partly_nominal_pod_level_job_is_a_borrower_as_a_whole_and_then_reclaims_its_nominal_part() -> (
    None
):
    # b (8 nominal) and d (2 nominal, idle: it lends them) have quota on 24 GPUs. b1 (12
    # pods) may borrow d's 2, so it is a borrower as a whole and goes after c1 (4 pods,
    # smaller), which takes d's 2 GPUs and 2 of b's 8; b1 starts 6. At the next cycle b1's
    # first 2 remaining pods are within b's nominal quota and reclaim 2 of c1's pods; once
    # they are gone b1 starts those 2 (no more: the rest would borrow d's 2, which c1 holds)
    s = scheduler(nodes(3), quotas=[Quota.gpus("b", "H100", 8), Quota.gpus("d", "H100", 2)])
    s.submit(job("b1", gpus=1, replicas=12, gang=False, tenant="b"), now=0)
    s.submit(job("c1", gpus=1, replicas=4, gang=False, tenant="c"), now=0)
    assert s.step(now=0).placed == ("c1", "b1")
    assert s.admitter.used("b", "H100") == 6 * G and s.admitter.used("c", "H100") == 4 * G
    r = s.step(now=1)
    assert [(v.job, v.reason, v.preemptor) for v in r.victims] == [
        ("c1", VictimReason.RECLAIM, "b1")
    ] * 2
    evict_victims(s, r, now=2)
    r = s.step(now=3)
    assert r.placed == ("b1",) and len(r.bindings) == 2
    assert r.pending["b1"].code is ReasonCode.QUOTA_EXCEEDED
    assert s.step(now=4).victims == ()
    assert s.admitter.used("b", "H100") == 8 * G and s.admitter.used("c", "H100") == 2 * G
    check_invariants(s)


def test_a_shared_tenants_pod_level_job_nobody_lends_to_starts_its_nominal_pods_at_once() -> None:
    # b (8 nominal) is the only tenant with quota on 24 GPUs: nobody lends to it, so b1
    # (12 pods) is no borrower and is walked at its place, before c1 (4 pods, smaller, which
    # would borrow b's unused GPUs): b1 starts its 8 nominal pods and c1 finds nothing to
    # borrow. As a borrower, b1 went after c1, which took 4 of b's 8 GPUs, and reclaimed them
    # a cycle later
    s = scheduler(nodes(3), quotas=[Quota.gpus("b", "H100", 8)])
    s.submit(job("b1", gpus=1, replicas=12, gang=False, tenant="b"), now=0)
    s.submit(job("c1", gpus=1, replicas=4, gang=False, tenant="c"), now=0)
    r = s.step(now=0)
    assert r.placed == ("b1",) and len(r.bindings) == 8
    assert r.pending["c1"].code is ReasonCode.QUOTA_EXCEEDED
    assert s.step(now=1).victims == ()
    assert s.admitter.used("b", "H100") == 8 * G and s.admitter.used("c", "H100") == 0
    check_invariants(s)


@pytest.mark.parametrize("mode", ["isolated", "shared"])
@pytest.mark.parametrize("policy", ["strict-fifo", "best-effort-fifo"])
def test_a_pod_level_job_of_a_tenant_that_can_never_borrow_keeps_its_place_in_the_order(
    policy: str, mode: str
) -> None:
    # a (16 nominal) can never borrow: isolated, or shared in a cohort where nobody lends
    # (b and c are isolated). Quota admits 2 of p's 3 pods, within its nominal quota, and
    # refuses the third. p is no borrower: walked at its place, before q (another tenant's,
    # submitted after it), it starts its 2 pods on the 2 free nodes. Walked after the
    # others as a borrower, q took one and p started 1 pod
    quotas = [Quota.gpus(t, "H100", n) for t, n in (("a", 16), ("b", 8), ("c", 8))]
    modes = {"a": mode, "b": "isolated", "c": "isolated"}
    s = scheduler(nodes(3), policy=policy, quotas=quotas, modes=modes)
    s.submit(job("r", gpus=8, tenant="c"), now=0)
    s.step(now=0)
    s.submit(job("p", gpus=8, replicas=3, gang=False, tenant="a", submitted_at=1), now=1)
    s.submit(job("q", gpus=8, tenant="b", submitted_at=2), now=2)
    r = s.step(now=2)
    assert [(b.pod.job, b.pod.index) for b in r.bindings] == [("p", 0), ("p", 1)]
    assert r.pending["p"].code is ReasonCode.QUOTA_EXCEEDED
    assert r.pending["q"].code is ReasonCode.INSUFFICIENT_CAPACITY
    check_invariants(s)


def _borrowing_j1_j2_then_j3(replicas: int) -> Scheduler:
    """Tenant a (8 nominal, may borrow 8 of b's: 16 in all) runs j1 (2 GPUs) and the
    pod-level j2 (2 x 4 GPUs): 10 GPUs; then j3 (priority 1, pod-level, ``replicas`` x 8
    GPUs) arrives."""
    cluster = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build()
    s = Scheduler(
        cluster,
        admitter=Admitter(
            [Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8), Quota.gpus("iso", "H100", 8)],
            modes={"iso": "isolated"},
        ),
        placer=Placer("ebinpack"),
    )
    s.submit(job("j1", gpus=2, tenant="a", submitted_at=0), now=0)
    s.step(now=1)
    s.submit(job("j2", gpus=4, replicas=2, gang=False, tenant="a", submitted_at=1), now=1)
    s.step(now=2)
    s.submit(
        job("j3", gpus=8, replicas=replicas, gang=False, tenant="a", priority=1, submitted_at=2),
        now=2,
    )
    return s


def test_a_pod_level_preemptor_that_won_its_whole_request_by_priority_starts_it_whole_and_evicts_no_victim_twice() -> (
    None
):
    # Found by the contention machine. j3 (2 x 8 GPUs) needs all 16 GPUs a may use, takes
    # them by priority and is nominated for both pods. Once its victims were gone it used to
    # start only its nominal part (8 GPUs): its victims, requeued ahead of it in submission
    # order, started again on the rest of the quota, and the next cycle j3 evicted them a
    # second time.
    s = _borrowing_j1_j2_then_j3(2)
    evicted: dict[str, int] = {}
    for t in range(3, 9):
        r = s.step(now=t)
        for v in r.victims:
            evicted[v.job] = evicted.get(v.job, 0) + 1
            for p in v.pods:
                s.pod_evicted(p, now=t)
        if t == 4:
            assert r.placed[0] == "j3"
            assert len(s.queue.get("j3").assigned) == 2  # its whole request, at once
    assert evicted == {"j1": 1, "j2": 2}  # each victim pod once
    assert sorted(b.total_milli for b in s.cluster.pods() if b.pod.job == "j3") == [8000, 8000]
    check_invariants(s)


def test_a_priority_preemptor_nominated_for_part_of_its_request_tries_its_rest_in_the_same_cycle() -> (
    None
):
    # j3 (3 x 8 GPUs) is nominated for 2 pods by priority; once its victims are gone it
    # starts those 2, and its third pod has its turn among the borrowers of priority 1 in
    # the same cycle: quota refuses it (a may use 16 GPUs in all)
    s = _borrowing_j1_j2_then_j3(3)
    r = s.step(now=3)
    (nom,) = r.nominations
    assert nom.by_priority and len(nom.bindings) == 2
    evict_victims(s, r, now=3)
    r = s.step(now=4)
    assert r.placed == ("j3",) and len(s.queue.get("j3").assigned) == 2
    assert r.pending["j3"].code is ReasonCode.QUOTA_EXCEEDED
    assert r.pending["j3"].message == (
        "tenant 'a' needs 8 GPUs of H100 for role 'worker'; quota left 0"
    )
    assert not r.again and r.victims == ()  # (all 16 GPUs a may use are j3's own now)
    check_invariants(s)


# ------------------------------------------------------- a tenant's jobs keep their order


def _h100_and_a100_node() -> ClusterState:
    """One 8-GPU H100 node (lf0-n0) and one 8-GPU A100 node (lfa-n0)."""
    return ClusterBuilder().leaf("lf0", nodes=1).leaf("lfa", nodes=1, model="A100").build()


@pytest.mark.parametrize("policy", ["strict-fifo", "best-effort-fifo", "backfill"])
def test_a_later_job_of_a_tenant_within_nominal_does_not_pass_its_borrowing_job(
    policy: str,
) -> None:
    # a1 (12 GPUs) borrows 4 of b's unused quota; a2 (2 GPUs), behind it in a's queue,
    # fits a's nominal quota. Walked before a1 as a job that does not borrow, a2 took 2 of
    # a's 12 and a1 was refused for quota (Strict FIFO too); a1 goes first and starts
    s = scheduler(
        nodes(2), policy=policy, quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)]
    )
    s.submit(job("b-x", gpus=4, tenant="b"), now=0)
    s.step(1)
    s.submit(job("a1", gpus=4, replicas=3, tenant="a", submitted_at=2), now=2)
    s.submit(job("a2", gpus=2, tenant="a", submitted_at=3), now=3)
    r = s.schedule(4)
    assert r.placed == ("a1",)
    assert r.pending["a2"].code is ReasonCode.QUOTA_EXCEEDED
    s.apply(r, 4)
    assert s.admitter.used("a", "H100") == 12 * G
    check_invariants(s)


def test_under_strict_fifo_a_tenants_job_refused_by_quota_blocks_only_the_jobs_behind_it() -> None:
    # a1 may borrow and has its turn after the jobs that do not; a2, behind it and too big
    # for a's quota, used to be refused at its own place first, and a1 then waited
    # "behind a2 (tenant quota)": blocked by a job behind it
    s = scheduler(
        nodes(2),
        policy="strict-fifo",
        quotas=[Quota.gpus("a", "H100", 8), Quota.gpus("b", "H100", 8)],
    )
    s.submit(job("b-x", gpus=4, tenant="b"), now=0)
    s.step(1)
    s.submit(job("a1", gpus=4, replicas=3, tenant="a", submitted_at=2), now=2)
    s.submit(job("a2", gpus=8, replicas=2, tenant="a", submitted_at=3), now=3)
    r = s.schedule(4)
    assert r.placed == ("a1",)
    assert r.pending["a2"].code is ReasonCode.QUOTA_EXCEEDED


def test_a_tenants_job_held_behind_its_borrower_goes_right_after_it_not_after_later_borrowers() -> (
    None
):
    # a's head h may borrow (10 GPUs of a's 8) and its rack r1 is full: its turn comes after
    # the jobs that do not borrow, and it fails. a-small, behind h in a's queue and within
    # a's nominal quota, goes right after h's turn, before c-mid (a borrower submitted
    # between them): it takes the last 4 free GPUs, c-mid is refused. Held until the end of
    # the borrowers instead, it would lose them to c-mid
    from kant.model import NodeSelector

    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=2, labels={"rack": "r0"})
        .leaf("lf1", nodes=2, labels={"rack": "r1"})
        .build()
    )
    quotas = [Quota.gpus(t, "H100", n) for t, n in (("a", 8), ("b", 8), ("c", 0), ("e", 32))]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(reclaim=False))
    r0, r1 = NodeSelector.labels(rack="r0"), NodeSelector.labels(rack="r1")
    s.submit(job("b-x", gpus=8, tenant="b", selector=r1), now=0)
    s.submit(job("c-r1", gpus=8, tenant="c", selector=r1), now=0)
    s.submit(job("c-r2", gpus=8, tenant="c", selector=r0), now=0)
    s.submit(job("c-r3", gpus=4, tenant="c", selector=r0), now=0)
    assert set(s.step(1).placed) == {"b-x", "c-r1", "c-r2", "c-r3"}  # 4 GPUs left, on r0
    s.submit(job("h", gpus=5, replicas=2, tenant="a", selector=r1, submitted_at=2), now=2)
    s.submit(job("c-mid", gpus=4, tenant="c", submitted_at=3), now=3)
    s.submit(job("a-small", gpus=4, tenant="a", submitted_at=4), now=4)
    r = s.schedule(5)
    assert r.placed == ("a-small",)
    assert r.victims == ()
    assert r.pending["h"].code is not ReasonCode.QUOTA_EXCEEDED  # (room, not quota)
    check_invariants(s)


def test_a_job_within_nominal_on_one_model_but_admitted_on_another_it_would_borrow_goes_after_the_nominal_jobs() -> (
    None
):
    # a-new fits a's nominal H100 but quota admits it on A100 too, where a would borrow;
    # E-Binpack prefers the fuller A100 node. Walked first, it took a's A100 beyond nominal
    # and b-job, within b's nominal A100, reclaimed a's guaranteed a-x for it. Walked after
    # b-job (it may borrow), it finds the A100 node too full and starts on H100: nothing evicted
    cluster = _h100_and_a100_node()
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 4), Quota.gpus("b", "A100", 4)]
    s = scheduler(cluster, quotas=quotas)
    s.submit(job("a-x", gpus=2, tenant="a", models="A100"), now=0)
    s.step(1)
    s.submit(job("a-new", gpus=3, tenant="a", models="H100|A100"), now=2)
    s.submit(job("b-job", gpus=4, tenant="b", models="A100"), now=2)
    r = s.schedule(3)
    assert r.victims == ()
    assert set(r.placed) == {"a-new", "b-job"}
    assert {b.pod.job: b.node for b in r.bindings} == {"a-new": "lf0-n0", "b-job": "lfa-n0"}
    s.apply(r, 3)
    assert s.admitter.usage() == {("a", "A100"): 2000, ("a", "H100"): 3000, ("b", "A100"): 4000}


def test_a_job_whose_selector_leaves_it_only_the_model_it_would_borrow_does_not_pass_a_nominal_job() -> (
    None
):
    # ajob's selector keeps it on rack r0 (H100 only), where a's nominal is used up; quota
    # found it within nominal on A100, a model it cannot run on. Walked first it borrowed
    # H100 and bjob, within b's nominal, reclaimed a's x for it; now bjob goes first
    from kant.model import NodeSelector

    cluster = (
        ClusterBuilder()
        .leaf("lf0", nodes=2, labels={"rack": "r0"})
        .leaf("lfa", nodes=1, model="A100", labels={"rack": "r1"})
        .build()
    )
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 4), Quota.gpus("b", "H100", 8)]
    s = scheduler(cluster, quotas=quotas)
    s.submit(job("x", gpus=8, tenant="a", models="H100"), now=0)
    s.step(1)
    s.submit(job("bjob", gpus=8, tenant="b", models="H100"), now=2)
    s.submit(
        job(
            "ajob", gpus=2, replicas=2, tenant="a", models="H100|A100",
            selector=NodeSelector.labels(rack="r0"),
        ),
        now=2,
    )  # fmt: skip
    r = s.schedule(3)
    assert r.victims == ()
    assert r.placed == ("bjob",)
    assert "ajob" in r.pending


def test_a_tenants_held_job_does_not_wait_for_the_borrowed_rest_of_its_later_nominated_job() -> (
    None
):
    # n (a's 12 1-GPU pods, nominated after evicting b's pods) starts its nominal part at its
    # place and its borrowed rest has a turn at n's place among the borrowers. a1 (borrowing
    # H100) and a2 (within a's nominal A100) come before n: a2, held behind a1, goes right
    # after a1's turn, before f1 (no quota, borrowing A100). It used to wait for n's rest
    # too, so f1 took a2's guaranteed A100 and a2 reclaimed it a cycle later
    cluster = ClusterBuilder().leaf("lf0", nodes=4).leaf("lfa", nodes=1, model="A100").build()
    quotas = [
        Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 8),
        Quota.gpus("b", "H100", 8), Quota.gpus("e", "H100", 16),
    ]  # fmt: skip
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("e1", gpus=8, replicas=2, gang=False, tenant="e", models="H100"), now=0)
    s.submit(job("b1", gpus=1, replicas=16, gang=False, tenant="b", models="H100"), now=0)
    assert set(s.step(now=0).placed) == {"e1", "b1"}
    s.submit(
        job("n", gpus=1, replicas=12, gang=False, tenant="a", models="H100", submitted_at=2), now=2
    )
    r = s.step(now=3)
    assert {v.preemptor for v in r.victims} == {"n"}
    evict_victims(s, r, now=4)
    s.pod_finished(PodId(job="e1", role="worker", index=1), now=4)
    s.submit(job("a1", gpus=8, tenant="a", models="H100", submitted_at=1.0), now=4)
    s.submit(job("a2", gpus=8, tenant="a", models="A100", submitted_at=1.5), now=4)
    s.submit(job("f1", gpus=8, tenant="f", models="A100", submitted_at=1.8), now=4)
    assert [e.id for e in s.queue.candidates()] == ["b1", "a1", "a2", "f1", "n"]
    r = s.step(now=5)
    assert "a2" in r.placed and r.victims == ()
    assert r.pending["f1"].code is ReasonCode.QUOTA_EXCEEDED
    assert s.step(now=6).victims == ()
    check_invariants(s)


def test_a_job_within_nominal_on_one_model_starts_there_though_packing_prefers_a_model_it_would_borrow() -> (
    None
):
    # a-new (3 GPUs, H100|A100) fits a's nominal H100; quota admits it on A100 too, where a
    # would borrow (a runs 2 of its 4 nominal A100). E-Binpack prefers the fuller A100 node:
    # placed there, a borrowed and b's A100 job, within b's nominal, reclaimed a-new a cycle
    # later. It is placed on H100 first, and nothing is evicted
    cluster = _h100_and_a100_node()
    quotas = [Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 4), Quota.gpus("b", "A100", 4)]
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("a-x", gpus=2, tenant="a", models="A100"), now=0)
    s.step(1)
    s.submit(job("a-new", gpus=3, tenant="a", models="H100|A100"), now=2)
    r = s.step(3)
    assert {b.node for b in r.bindings} == {"lf0-n0"}
    assert s.admitter.usage() == {("a", "A100"): 2 * G, ("a", "H100"): 3 * G}
    s.submit(job("b-job", gpus=4, tenant="b", models="A100", submitted_at=4), now=4)
    r = s.step(5)
    assert r.placed == ("b-job",) and r.victims == ()
    check_invariants(s)


def test_a_job_within_nominal_on_one_model_borrows_on_another_when_its_nominal_model_is_full() -> (
    None
):
    # the H100 node is full (b's job): a-new, within a's nominal H100 but admitted on A100
    # too, starts on A100, borrowing: the nominal model is tried first, not alone
    cluster = _h100_and_a100_node()
    quotas = [
        Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 4),
        Quota.gpus("b", "H100", 8), Quota.gpus("b", "A100", 4),
    ]  # fmt: skip
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy(reclaim=False))
    s.submit(job("b-h", gpus=8, tenant="b", models="H100"), now=0)
    s.submit(job("a-x", gpus=2, tenant="a", models="A100"), now=0)
    s.step(1)
    s.submit(job("a-new", gpus=3, tenant="a", models="H100|A100"), now=2)
    r = s.step(3)
    assert {b.node for b in r.bindings} == {"lfa-n0"}
    assert s.admitter.used("a", "A100") == 5 * G  # (one GPU borrowed from b)
    check_invariants(s)


def test_a_job_within_nominal_on_one_model_that_only_victims_still_going_keep_from_it_borrows_on_another_at_once() -> (
    None
):
    # a-r reclaims one of d's 8-GPU H100 pods; the pod still runs. a-new (3 GPUs, H100|A100)
    # is within a's nominal H100 on the cycle's ledger, which no longer charges the victim,
    # but the live usage still does: an H100 placement is refused until the pod is gone.
    # Placed on H100 first, it waited for that victim; it starts on A100 at once, as it did
    cluster = ClusterBuilder().leaf("lf0", nodes=4).leaf("lfa", nodes=1, model="A100").build()
    quotas = [
        Quota.gpus("a", "H100", 16), Quota.gpus("a", "A100", 0), Quota.gpus("d", "H100", 0),
        Quota.gpus("e", "H100", 6), Quota.gpus("b", "A100", 8),
    ]  # fmt: skip
    s = scheduler(cluster, quotas=quotas, preemption=PreemptionPolicy())
    s.submit(job("e-x", gpus=4, tenant="e", models="H100"), now=0)
    s.submit(job("d-x", gpus=8, replicas=2, gang=False, tenant="d", models="H100"), now=0)
    s.submit(job("b-x", gpus=5, tenant="b", models="A100"), now=0)
    s.step(1)
    s.submit(job("a-r", gpus=4, tenant="a", models="H100"), now=2)
    assert [v.job for v in s.step(3).victims] == ["d-x"]  # (not stopped yet)
    s.submit(job("a-new", gpus=3, tenant="a", models="H100|A100"), now=4)
    r = s.step(5)
    assert r.placed == ("a-new",)
    assert {b.node for b in r.bindings} == {"lfa-n0"}
    check_invariants(s)


def test_a_pod_level_job_within_nominal_puts_the_pods_its_nominal_model_has_room_for_there() -> (
    None
):
    # a-new (3 pods of 1 GPU, pod-level, H100|A100) fits a's nominal H100, where b's job
    # leaves room for 2 pods; quota admits it on A100 too, where a would borrow. Spread
    # prefers the emptier A100 node: when its nominal model could not take all 3, all 3
    # went to A100, a borrowed one GPU there, and b's A100 job, within b's nominal, reclaimed
    # it a cycle later. 2 pods start on H100 and only the third on A100: a stays within its
    # nominal quota on both, and nothing is evicted
    quotas = [
        Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 4),
        Quota.gpus("b", "H100", 8), Quota.gpus("b", "A100", 4),
    ]  # fmt: skip
    s = scheduler(
        _h100_and_a100_node(), quotas=quotas, preemption=PreemptionPolicy(), strategy="spread"
    )
    s.submit(job("b-h", gpus=6, tenant="b", models="H100"), now=0)
    s.submit(job("a-x", gpus=2, tenant="a", models="A100"), now=0)
    s.step(1)
    s.submit(job("a-new", gpus=1, replicas=3, gang=False, tenant="a", models="H100|A100"), now=2)
    r = s.step(3)
    assert [b.node for b in r.bindings] == ["lf0-n0", "lf0-n0", "lfa-n0"]
    assert s.admitter.usage() == {
        ("a", "A100"): 3 * G, ("a", "H100"): 2 * G, ("b", "H100"): 6 * G,
    }  # fmt: skip
    s.submit(job("b-job", gpus=4, tenant="b", models="A100", submitted_at=4), now=4)
    r = s.step(5)
    assert r.placed == ("b-job",) and r.victims == ()
    check_invariants(s)


def test_the_admitter_and_its_ledger_name_what_cannot_be_a_pod_amount_or_mark() -> None:
    """`uncharge([1])` and `is_charged([1])` raised TypeError once anything was charged; a
    ledger's `rollback(-1)` undid everything and then raised IndexError, `rollback("x")`
    TypeError; `add(t, m, nan)` kept NaN as the tenant's use."""
    from kant.errors import UnknownPodError

    a = Admitter()
    b = Binding(pod=PodId(job="j", role="w", index=0), node="n", gpus=(0,))
    a.charge("t", b, "A100")
    for bad in ([1], {"x": 1}):
        with pytest.raises(UnknownPodError):
            a.uncharge(bad)  # type: ignore[arg-type]
        with pytest.raises(UnknownPodError):
            a.is_charged(bad)  # type: ignore[arg-type]
    assert a.is_charged(b.pod)
    ledger = a.ledger()
    mark = ledger.mark()
    ledger.add("t", "A100", 1000)
    usage = dict(ledger.usage)
    for bad_mark in (-1, "x", 99, True):
        with pytest.raises(ValidationError, match="'mark'"):
            ledger.rollback(bad_mark)  # type: ignore[arg-type]
    for bad_milli in (float("nan"), 1.5, "5", None):
        with pytest.raises(ValidationError, match="'milli'"):
            ledger.add("t", "A100", bad_milli)  # type: ignore[arg-type]
    assert ledger.usage == usage
    ledger.rollback(mark)
    assert ledger.usage == {("t", "A100"): 1000}
    a.check_invariants()
