"""A gang whose roles may use several GPU models: quota admits it when one GPU model per role
fits, whatever the order of its roles (Kueue gives each pod set one flavor too, but greedily
in order); it is within nominal iff one model per role fits its tenant's nominal quota left;
it can never fit when no model per role fits the most its tenant could
ever use; of several fits, it takes one the live nodes can hold (within nominal first)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kant import Admitter, CycleResult, PreemptionPolicy, Quota, Scheduler
from kant.admission.pools import Pools
from kant.admission.quota import (
    _SEARCH_STEPS,
    QuotaDecision,
    QuotaLedger,
    QuotaTable,
    _admit_in_order,
    _one_model_each,
    admit_quota,
    fits_to_try,
    narrowed_fits,
    quota_models,
    quota_never_fits,
)
from kant.cycle_context import kept_forecast
from kant.model import MILLI, Job, PodId, ReasonCode, Resources, Role, pods_per_role
from kant.queueing import EasyBackfill
from kant.testing import ClusterBuilder, check_invariants, job, node

from .conftest import evict_victims

MODELS = ("A100", "H100", "L40")


def _gang(*roles: tuple[str, int, str], tenant: str = "a", replicas: int = 1) -> Job:
    """A gang of one pod per role (``(name, GPUs, "H100|A100")``) unless ``replicas``."""
    return Job(
        id="g",
        tenant=tenant,
        roles=tuple(
            Role(name=n, replicas=replicas, resources=Resources(gpus=g), gpu_models=ms)
            for n, g, ms in roles
        ),
    )


def _role_models(j: Job) -> dict[str, tuple[str, ...]]:
    return {r.name: tuple(sorted(r.gpu_models)) for r in j.roles}


def _admit(led: QuotaLedger, j: Job) -> QuotaDecision:
    return admit_quota(led, j, tuple(j.pods()), _role_models(j))


def _ledger(quotas: Sequence[Quota], mode: str = "shared", usage: Mapping | None = None):
    modes = {q.tenant: mode for q in quotas} if mode == "isolated" else None
    return QuotaLedger(QuotaTable(quotas, modes), dict(usage or {}))


def _h100_and_a100(nodes: int = 1) -> ClusterBuilder:
    return (
        ClusterBuilder().leaf("h", nodes=nodes, model="H100").leaf("x", nodes=nodes, model="A100")
    )


# --------------------------------------------------------------------------- defect A


@pytest.mark.parametrize("mode", ["isolated", "shared"])
@pytest.mark.parametrize("flex_first", [True, False])
def test_a_gang_with_a_role_on_two_models_is_admitted_whichever_role_comes_first(
    mode: str, flex_first: bool
) -> None:
    # flex may use H100 or A100, a100 only A100; a has 4 GPUs on each. flex first was
    # counted against both models, leaving a100 "quota left 0" for ever
    roles = [("flex", 4, "H100|A100"), ("a100", 4, "A100")]
    j = _gang(*(roles if flex_first else roles[::-1]))
    adm = Admitter([Quota.gpus("a", "H100", 4), Quota.gpus("a", "A100", 4)], modes={"a": mode})
    s = Scheduler(_h100_and_a100().build(), admitter=adm)
    s.submit(j, now=0)
    assert s.step(now=1).placed == ("g",)
    assert adm.used("a", "H100") == 4 * MILLI and adm.used("a", "A100") == 4 * MILLI
    check_invariants(s)


@pytest.mark.parametrize("mode", ["isolated", "shared"])
def test_three_roles_in_a_ring_of_models_are_admitted_within_nominal_in_every_order(
    mode: str,
) -> None:
    ring = [("r1", 4, "H100|A100"), ("r2", 4, "A100|L40"), ("r3", 4, "L40|H100")]
    quotas = [Quota.gpus("a", m, 4) for m in MODELS]
    for order in itertools.permutations(ring):
        dec = _admit(_ledger(quotas, mode), _gang(*order))
        assert dec.ok and dec.within_nominal and dec.clears_quota, (order, dec)
        # every model holds all the roles that may land on it
        for m in MODELS:
            assert sum(4 * MILLI for r, ms in dec.models.items() if m in ms) <= 4 * MILLI


def test_a_gang_with_its_flexible_role_first_reclaims_its_nominal_from_a_borrower() -> None:
    # b borrows a's 4 A100 (b runs 8 A100, 4 of its own). a's gang, flex (H100 or A100)
    # then a100, is within a's nominal 4 + 4 with flex on H100: it reclaims b's job. It was
    # refused ("quota left 0" for a100) and judged beyond nominal, so it never reclaimed
    adm = Admitter([Quota.gpus(t, m, 4) for t in ("a", "b") for m in ("H100", "A100")])
    s = Scheduler(_h100_and_a100().build(), admitter=adm)
    s.submit(job("b-big", gpus=8, tenant="b", models="A100"), now=0)
    assert s.step(now=1).placed == ("b-big",)
    s.submit(_gang(("flex", 4, "H100|A100"), ("a100", 4, "A100")), now=2)
    r = s.step(now=3)
    assert [(v.job, v.reason.value) for v in r.victims] == [("b-big", "reclaim")], r.pending
    evict_victims(s, r, now=4)
    assert s.step(now=5).placed == ("g",)
    assert adm.used("a", "H100") == 4 * MILLI and adm.used("a", "A100") == 4 * MILLI
    check_invariants(s)


def test_a_gang_within_nominal_in_role_order_stays_within_nominal_when_it_may_borrow() -> None:
    # a: 8 H100 nominal, none on A100; b borrows 4 of a's H100. In role order, flex
    # (H100 or A100) is counted on both and the H100 role finds no H100 headroom left: refused,
    # but within nominal (a may reclaim its H100). One model per role admits it now, flex
    # borrowing A100: it stays within nominal, so if it does not fit it may still reclaim
    quotas = [
        Quota.gpus("a", "H100", 8),
        Quota.gpus("a", "A100", 0),
        Quota.gpus("b", "H100", 0),
        Quota.gpus("b", "A100", 8),
    ]
    led = _ledger(quotas, usage={("b", "H100"): 4 * MILLI})
    dec = _admit(led, _gang(("flex", 4, "H100|A100"), ("h100", 4, "H100")))
    assert dec.ok and dec.within_nominal
    assert dec.models == {"flex": ("A100",), "h100": ("H100",)}
    # (not where a reclaimer may run: the H100 borrowed from a must come back first)
    assert not dec.places_within_nominal
    # b's borrowed H100 gone, it is admitted within nominal on H100 alone
    led.add("b", "H100", -4 * MILLI)
    dec = _admit(led, _gang(("flex", 4, "H100|A100"), ("h100", 4, "H100")))
    assert dec.ok and dec.clears_quota
    assert dec.nominal_models == {"flex": ("H100",), "h100": ("H100",)}


@pytest.mark.parametrize("roles", [13, 40])
def test_many_identical_roles_on_two_models_are_decided_at_once(roles: int) -> None:
    # identical roles are interchangeable: the search assigns how many go to each model,
    # not which. 13 roles of 1 GPU on H100|A100, quota 7 + 6: admitted; 6 + 6: refused
    half = roles // 2
    names = [(f"w{i:02d}", 1, "H100|A100") for i in range(roles)]
    j = _gang(*names)
    for h100, ok in ((roles - half, True), (roles - half - 1, False)):
        quotas = [Quota.gpus("a", "H100", h100), Quota.gpus("a", "A100", half)]
        start = time.perf_counter()
        dec = _admit(_ledger(quotas, "isolated"), j)
        assert time.perf_counter() - start < 0.5
        assert dec.ok is ok and dec.within_nominal is ok, dec
        if ok:
            assert sorted(ms for ms in dec.models.values()) == sorted(
                [("A100",)] * half + [("H100",)] * (roles - half)
            )


def test_a_job_of_one_model_roles_or_of_one_role_is_decided_as_before() -> None:
    # (the fast path: roles in order, nothing else looked at)
    quotas = [Quota.gpus("a", "H100", 4), Quota.gpus("a", "A100", 4)]
    dec = _admit(_ledger(quotas), _gang(("r1", 4, "H100"), ("r2", 4, "A100")))
    assert dec.ok and dec.models == {"r1": ("H100",), "r2": ("A100",)}
    one = _gang(("w", 4, "H100|A100"), replicas=2)
    dec = _admit(_ledger(quotas, "isolated"), one)
    assert not dec.ok and dec.reason is not None
    assert dec.reason.message == "tenant 'a' needs 8 GPUs of A100|H100 for role 'w'; quota left 4"


def _even_roles_odd_quota() -> tuple[list[tuple[str, int, str]], dict[str, int]]:
    """24 roles of 2, 4, .., 48 GPUs on three models, and a quota of exactly as many GPUs,
    odd on two models: no fit, and nothing but trying shows it."""
    roles = [(f"r{i:02d}", 2 * (i + 1), "H100|A100|L40") for i in range(24)]
    total = sum(g for _n, g, _m in roles)
    odd = total // 3 | 1
    return roles, {"H100": odd, "A100": odd, "L40": total - 2 * odd}


def test_a_search_too_large_gives_up_and_the_decision_in_role_order_stands() -> None:
    # 24 roles of different sizes on three models, quota exactly all of them but odd: no
    # fit exists, and proving it takes more than the search may try
    roles, caps = _even_roles_odd_quota()
    quotas = [Quota.gpus("a", m, c) for m, c in caps.items()]
    j = _gang(*roles)
    needs = [(g * MILLI, ("A100", "H100", "L40")) for _n, g, _m in roles]
    cap = {q.gpu_model: q.nominal for q in quotas}
    start = time.perf_counter()
    pick, complete = _one_model_each(needs, cap)  # (gave up: undecided)
    assert time.perf_counter() - start < 2.0
    assert pick is None
    led = _ledger(quotas, "isolated")
    dec = _admit(led, j)
    assert dec == _admit_in_order(led, j, tuple(j.pods()), _role_models(j))
    assert not dec.ok
    assert not complete and _SEARCH_STEPS == 2_000


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from(MODELS)), min_size=1, max_size=4),
    st.lists(st.integers(0, 8), min_size=3, max_size=3),
    st.booleans(),
)
def test_a_job_of_one_model_roles_one_role_or_pods_is_decided_in_role_order(
    roles: list[tuple[int, str]], nominal: list[int], gang: bool
) -> None:
    quotas = [Quota.gpus("a", m, n) for m, n in zip(MODELS, nominal, strict=True)]
    led = _ledger(quotas, "isolated")
    one_model = _gang(*((f"r{i}", g, m) for i, (g, m) in enumerate(roles)))
    one_role = _gang(("w", roles[0][0], "|".join(MODELS)), replicas=len(roles))
    pod_level = Job(
        id="p", tenant="a", gang=False,
        roles=tuple(
            Role(name=f"r{i}", replicas=2, resources=Resources(gpus=g), gpu_models="H100|L40")
            for i, (g, _m) in enumerate(roles)
        ),
    )  # fmt: skip
    for j in (one_model, one_role, pod_level) if gang else (pod_level,):
        rm = _role_models(j)
        assert _admit(led, j) == _admit_in_order(led, j, tuple(j.pods()), rm)


# --------------------------------------------------------------------------- properties


def _fits(needs: Sequence[tuple[int, tuple[str, ...]]], cap: Mapping[str, float]) -> bool:
    """Brute force: some GPU model per need with every model's needs within ``cap``."""
    for pick in itertools.product(*(ms for _d, ms in needs)):
        used: dict[str, int] = {}
        for (d, _ms), m in zip(needs, pick, strict=True):
            used[m] = used.get(m, 0) + d
        if all(u <= cap[m] for m, u in used.items()):
            return True
    return False


_model_sets = st.sets(st.sampled_from(MODELS), min_size=1).map(lambda s: "|".join(sorted(s)))
_roles = st.lists(st.tuples(st.integers(1, 4), _model_sets), min_size=1, max_size=4)
_quota = st.integers(0, 8)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[QuotaLedger, Job]:
    mode = draw(st.sampled_from(["isolated", "shared"]))
    quotas = [Quota.gpus(t, m, draw(_quota)) for t in ("a", "b") for m in MODELS]
    usage = {}
    for t, m in itertools.product(("a", "b"), MODELS):
        u = draw(st.integers(0, 10))
        if u:
            usage[(t, m)] = u * MILLI
    led = _ledger(quotas, mode)
    # (only usage the quotas allow: what the admitter could have charged)
    for (t, m), u in usage.items():
        led.add(t, m, min(u, int(min(led.headroom(t, m), 10 * MILLI))))
    roles = draw(_roles)
    j = _gang(*((f"r{i}", g, ms) for i, (g, ms) in enumerate(roles)))
    return led, j


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_a_gang_is_admitted_iff_one_model_per_role_fits_its_headroom(
    case: tuple[QuotaLedger, Job],
) -> None:
    led, j = case
    rm = _role_models(j)
    needs = [(r.resources.total_milli, rm[r.name]) for r in j.roles]
    models = {m for _d, ms in needs for m in ms}
    room = {m: led.headroom("a", m) for m in models}
    left = {m: led.table.nominal("a", m) - led.used("a", m) for m in models}
    dec = _admit(led, j)
    assert dec.ok is _fits(needs, room), dec
    # within nominal (it may reclaim) iff one model per role fits the nominal quota left
    # (the search completes on these small gangs)
    assert dec.within_nominal is _fits(needs, left), dec
    # admitted in role order: on the same models
    in_order = _admit_in_order(led, j, tuple(j.pods()), rm)
    if in_order.ok:
        assert dec.models == in_order.models
    # the same whatever the order of the roles
    for order in itertools.permutations(j.roles):
        other = admit_quota(led, _gang(*((r.name, r.resources.gpus, "|".join(
            sorted(r.gpu_models))) for r in order)), tuple(j.pods()), rm)  # fmt: skip
        assert other.ok is dec.ok
    if not dec.ok:
        return
    demand = {r.name: r.resources.total_milli for r in j.roles}
    # every model holds all the roles that may land on it, and within nominal where a
    # reclaimer may run, the same on its nominal models
    for m in models:
        assert sum(demand[r] for r, ms in dec.models.items() if m in ms) <= room[m]
    assert all(dec.models[r.name] for r in j.roles)
    if dec.within_nominal:
        for r, ms in dec.nominal_models.items():
            assert set(ms) <= set(dec.models[r])
        if dec.places_within_nominal:
            for m in models:
                on = sum(demand[r] for r, ms in dec.nominal_models.items() if m in ms)
                assert on == 0 or on <= left[m]
    assert _admit(led, j) == dec  # (deterministic)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_a_gang_never_fits_iff_no_model_per_role_fits_the_most_its_tenant_could_use(
    case: tuple[QuotaLedger, Job],
) -> None:
    led, j = case
    table = led.table
    rm = _role_models(j)
    pods = tuple(j.pods())
    needs = [(r.resources.total_milli, rm[r.name]) for r in j.roles]
    most = {m: table.most("a", m) for _d, ms in needs for m in ms}
    never = quota_never_fits(table, j, pods, rm)
    assert (never is None) is _fits(needs, most), never
    if never is not None:
        assert never.code is ReasonCode.UNSATISFIABLE
        return
    capped = quota_models(table, j, pods, rm)
    for k, r in enumerate(j.roles):
        want = tuple(
            m for m in rm[r.name] if _fits([*needs[:k], (needs[k][0], (m,)), *needs[k + 1 :]], most)
        )
        assert capped[r.name] == want
    # an empty ledger admits it
    assert _admit(QuotaLedger(table, {}), j).ok


# --------------------------------------------------------------------------- defect B


@pytest.mark.parametrize("mode", ["isolated", "shared"])
def test_a_gang_whose_roles_on_several_models_together_exceed_its_quota_never_fits(
    mode: str,
) -> None:
    # flex (8 GPUs, H100 or A100), h100 (8, H100), a100 (8, A100): 24 GPUs, a tenant that may
    # use at most 8 of each. Each role alone fits, and the one-model roles fit their models:
    # the gang read QUOTA_EXCEEDED for ever and, under Strict FIFO, kept small waiting
    adm = Admitter([Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 8)], modes={"a": mode})
    s = Scheduler(_h100_and_a100(nodes=2).build(), admitter=adm, policy="strict-fifo")
    big = _gang(("flex", 8, "H100|A100"), ("h100", 8, "H100"), ("a100", 8, "A100"))
    s.submit(big, now=1)
    s.submit(job("small", gpus=1, tenant="a", submitted_at=2), now=2)
    r = s.step(now=2)
    assert r.placed == ("small",)
    why = r.pending["g"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    assert why.message == (
        "can never fit: tenant 'a' needs 24 GPUs of A100|H100 for roles 'flex', 'h100', "
        "'a100' together, one GPU model per role; its quota allows at most 8 of A100, 8 of H100"
    )


def test_a_gang_whose_other_role_takes_a_model_it_needs_never_fits_a_pool_too_small() -> None:
    # flex (2 x 8 GPUs, H100 or A100) and a100 (8 GPUs, A100 only), a tenant allowed 16 of
    # each, one H100 node and three A100 nodes. Quota admits flex on H100 only (on A100 the
    # two roles are 24), where one node cannot hold 16: the gang can never run
    adm = Admitter([Quota.gpus("a", "H100", 16), Quota.gpus("a", "A100", 16)])
    cluster = ClusterBuilder().leaf("h", nodes=1, model="H100").leaf("x", nodes=3, model="A100")
    s = Scheduler(cluster.build(), admitter=adm, policy="strict-fifo")
    roles = (
        Role(name="flex", replicas=2, resources=Resources(gpus=8), gpu_models="H100|A100"),
        Role(name="a100", replicas=1, resources=Resources(gpus=8), gpu_models="A100"),
    )
    s.submit(Job(id="g", tenant="a", roles=roles), now=1)
    s.submit(job("small", gpus=1, tenant="a", submitted_at=2), now=2)
    r = s.step(now=2)
    assert r.placed == ("small",)
    why = r.pending["g"]
    assert why.code is ReasonCode.UNSATISFIABLE, why
    assert "quota could never admit it on A100" in why.message, why.message


@pytest.mark.parametrize("roles", [13, 40])
def test_many_identical_roles_on_two_models_never_fit_only_beyond_the_quota(roles: int) -> None:
    half = roles // 2
    j = _gang(*((f"w{i:02d}", 1, "H100|A100") for i in range(roles)))
    for h100, fits in ((roles - half, True), (roles - half - 1, False)):
        table = QuotaTable([Quota.gpus("a", "H100", h100), Quota.gpus("a", "A100", half)])
        never = quota_never_fits(table, j, tuple(j.pods()), _role_models(j))
        assert (never is None) is fits, never


# --------------------------------------------------------------------------- review fixes


def test_a_gang_that_must_borrow_to_run_now_waits_behind_a_job_within_nominal() -> None:
    # a: 8 H100, no A100; b: no H100, 8 A100, and b-h borrows 4 of a's H100. a's gang g
    # (flex on H100|A100, h100 on H100) is within a's nominal only on H100 (b-h must go
    # first), so admitted now it borrows A100. b-a (8 A100, b's own) comes next at the same
    # priority: g must wait behind it (and reclaim b-h), not take b's A100 to be reclaimed
    # at once and then be held off by the reclaim window
    adm = Admitter(
        [
            Quota.gpus("a", "H100", 8),
            Quota.gpus("a", "A100", 0),
            Quota.gpus("b", "H100", 0),
            Quota.gpus("b", "A100", 8),
        ]
    )
    s = Scheduler(_h100_and_a100().build(), admitter=adm)
    s.submit(job("b-h", gpus=4, tenant="b", models="H100"), now=0)
    assert s.step(now=1).placed == ("b-h",)
    g = _gang(("flex", 4, "H100|A100"), ("h100", 4, "H100"))
    s.submit(attrs.evolve(g, submitted_at=2), now=2)
    s.submit(job("b-a", gpus=8, tenant="b", models="A100", submitted_at=3), now=3)
    r = s.step(now=4)
    assert r.placed == ("b-a",), r.pending
    assert [(v.job, v.reason.value) for v in r.victims] == [("b-h", "reclaim")]
    evict_victims(s, r, now=5)
    assert s.step(now=6).placed == ("g",)
    assert adm.used("a", "H100") == 8 * MILLI and adm.used("b", "A100") == 8 * MILLI
    check_invariants(s)


def test_a_gang_is_not_within_nominal_when_no_model_per_role_fits_its_nominal_quota_left() -> None:
    # a: no H100, 8 L40 (b borrows 1 of them); b lends a 4 H100. r0 and r1 (4 GPUs, H100|L40)
    # and r2 (1 GPU, L40) fit the headroom (r0 on H100) but not the nominal 8 L40 left
    # (9 GPUs). In role order r1 was refused before r2 was looked at, "within nominal" so far
    quotas = [
        Quota.gpus("a", "H100", 0),
        Quota.gpus("a", "L40", 8),
        Quota.gpus("b", "H100", 4),
        Quota.gpus("b", "L40", 0),
    ]
    led = _ledger(quotas, usage={("b", "L40"): 1 * MILLI})
    j = _gang(("r0", 4, "H100|L40"), ("r1", 4, "H100|L40"), ("r2", 1, "L40"))
    assert _admit_in_order(led, j, tuple(j.pods()), _role_models(j)).within_nominal
    dec = _admit(led, j)
    assert dec.ok and not dec.within_nominal and dec.nominal_models == {}
    # admitted in role order on H100 (b borrows all 3 of a's L40): r0 and r1 (2 GPUs each,
    # H100|L40) were each within a's 3 L40 left, the other not counted there; together no
    quotas = [
        Quota.gpus("a", "H100", 0),
        Quota.gpus("a", "L40", 3),
        Quota.gpus("b", "H100", 8),
        Quota.gpus("b", "L40", 0),
    ]
    led = _ledger(quotas, usage={("b", "L40"): 3 * MILLI})
    j = _gang(("r0", 2, "H100|L40"), ("r1", 2, "H100|L40"))
    in_order = _admit_in_order(led, j, tuple(j.pods()), _role_models(j))
    assert in_order.ok and in_order.within_nominal and in_order.models["r0"] == ("H100",)
    dec = _admit(led, j)
    assert dec.ok and not dec.within_nominal and dec.models == in_order.models


def test_a_gang_refused_at_its_first_role_is_judged_within_nominal_on_all_its_roles() -> None:
    # r0 (4 H100) is within a's nominal 8 H100 but b borrows 6 of them; r1 (4 A100) is
    # beyond a's nominal 0 A100. Refused at r0, the gang was "within nominal" (r1 unread)
    quotas = [
        Quota.gpus("a", "H100", 8),
        Quota.gpus("a", "A100", 0),
        Quota.gpus("b", "H100", 0),
        Quota.gpus("b", "A100", 8),
    ]
    led = _ledger(quotas, usage={("b", "H100"): 6 * MILLI})
    dec = _admit(led, _gang(("r0", 4, "H100"), ("r1", 4, "A100")))
    assert not dec.ok and not dec.within_nominal
    dec = _admit(led, _gang(("r0", 4, "H100"), ("r1", 4, "H100")))
    assert not dec.ok and dec.within_nominal  # (8 H100: a reclaims b's 6)


_FOUR = ("A100", "B200", "H100", "L40")
_SUBSETS = [c for k in (2, 3, 4) for c in itertools.combinations(_FOUR, k)]


def _distinct_roles(n: int) -> list[tuple[str, int, str]]:
    """``n`` roles of 1..n GPUs, each on two to four of four models."""
    return [(f"r{i:02d}", i + 1, "|".join(_SUBSETS[i % len(_SUBSETS)])) for i in range(n)]


def test_a_gang_one_gpu_short_of_its_quota_on_all_its_models_is_refused_without_a_search() -> None:
    # 30 roles of 1..30 GPUs on two to four of four models, quota one GPU short of all of
    # them together: no search needed (the search gave up after 10,000 choices, 0.2 s)
    roles = _distinct_roles(30)
    total = sum(g for _n, g, _m in roles)
    caps = {m: total // 4 for m in _FOUR}
    caps["L40"] = total - 3 * (total // 4) - 1
    needs = [(g * MILLI, tuple(sorted(ms.split("|")))) for _n, g, ms in roles]
    cap = {m: c * MILLI for m, c in caps.items()}
    assert _one_model_each(needs, cap) == (None, True)
    # nor when a set of models is short: the roles on A100|B200 only ask more than both have
    two = [(d, ms) for d, ms in needs if set(ms) <= {"A100", "B200"}]
    tight = dict(cap, A100=sum(d for d, _ms in two) // 2, B200=sum(d for d, _ms in two) // 2 - 1)
    assert _one_model_each(needs, tight) == (None, True)
    j = _gang(*roles)
    quotas = [Quota.gpus("a", m, c) for m, c in caps.items()]
    table = QuotaTable(quotas, {"a": "isolated"})
    start = time.perf_counter()
    dec = admit_quota(QuotaLedger(table, {}), j, tuple(j.pods()), _role_models(j))
    never = quota_never_fits(table, j, tuple(j.pods()), _role_models(j))
    assert time.perf_counter() - start < 0.1
    assert not dec.ok and never is not None


def test_a_search_that_gave_up_is_not_repeated_for_the_same_gang_and_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kant.admission.quota as quota

    roles, caps = _even_roles_odd_quota()
    needs = [(g * MILLI, ("A100", "H100", "L40")) for _n, g, _m in roles]
    cap = {m: c * MILLI for m, c in caps.items()}
    calls: list[int] = []
    search = quota._search

    def counted(*args: object) -> object:
        calls.append(1)
        return search(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(quota, "_search", counted)
    monkeypatch.setattr(quota, "_GAVE_UP", {})
    first = _one_model_each(needs, cap)
    assert first[1] is False  # (gave up)
    assert _one_model_each(needs, cap) == first and len(calls) == 1
    assert _one_model_each(needs, dict(cap, L40=cap["L40"] + MILLI)) == first  # (new quota)
    assert len(calls) == 2
    # a remembered search counts the choices it made, as when it was made: a caller spending
    # a budget of choices over several searches (quota_models) decides the same whether or
    # not the process made that search before
    monkeypatch.setattr(quota, "_GAVE_UP", {})
    made = quota._one_model_each_counted(needs, cap, quota._SEARCH_STEPS)
    assert made[2] > 0
    assert quota._one_model_each_counted(needs, cap, quota._SEARCH_STEPS) == made


def test_narrowing_a_gang_whose_searches_give_up_stays_cheap() -> None:
    # quota_models tried up to 1,000 choices per role and model: 0.4 s and more for 30 roles
    roles = _distinct_roles(30)
    total = sum(g for _n, g, _m in roles)
    caps = {m: total // 4 for m in _FOUR}
    caps["L40"] = total - 3 * (total // 4)
    j = _gang(*roles)
    table = QuotaTable([Quota.gpus("a", m, c) for m, c in caps.items()], {"a": "isolated"})
    start = time.perf_counter()
    quota_models(table, j, tuple(j.pods()), _role_models(j))
    assert time.perf_counter() - start < 0.15


def _f2_f1(f1_models: str = "H100|A100", f2_models: str = "H100|A100") -> Job:
    """Gang ``g`` of tenant ``a``: ``f2`` (2 pods of 4 GPUs) then ``f1`` (1 pod of 8 GPUs)."""
    return Job(
        id="g",
        tenant="a",
        roles=(
            Role(name="f2", replicas=2, resources=Resources(gpus=4), gpu_models=f2_models),
            Role(name="f1", replicas=1, resources=Resources(gpus=8), gpu_models=f1_models),
        ),
    )


def _isolated_8_and_8(cluster: ClusterBuilder) -> Scheduler:
    """Tenant ``a`` (isolated) with 8 H100 and 8 A100 on ``cluster``; ``b`` with 8 A100."""
    adm = Admitter(
        [Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 8), Quota.gpus("b", "A100", 8)],
        modes={"a": "isolated", "b": "isolated"},
    )
    return Scheduler(cluster.build(), admitter=adm)


def _models_of(s: Scheduler, r: object) -> dict[str, set[str]]:
    """Per role of the placed gang, the GPU models of the nodes its pods were bound to."""
    out: dict[str, set[str]] = {}
    for b in r.bindings:  # type: ignore[attr-defined]
        out.setdefault(b.pod.role, set()).add(s.cluster.node(b.node).gpu_model)
    return out


def test_a_gang_whose_first_quota_fit_no_node_can_hold_runs_at_once_on_a_fit_the_nodes_hold() -> (
    None
):
    # a: 8 H100 + 8 A100, isolated; two 4-GPU H100 nodes and one 8-GPU A100 node. Quota
    # alone found f2 on A100 and f1 on H100 first (16 GPUs fit either way), and no H100 node
    # holds an 8-GPU pod: g waited NO_FIT for ever. f1 on A100 and f2 on H100 run now
    s = _isolated_8_and_8(
        ClusterBuilder()
        .leaf("h", nodes=2, model="H100", gpus=4)
        .leaf("x", nodes=1, model="A100", gpus=8)
    )
    s.submit(_f2_f1(), now=0)
    r = s.step(now=1)
    assert r.placed == ("g",) and not r.pending
    assert _models_of(s, r) == {"f2": {"H100"}, "f1": {"A100"}}
    s.check_invariants()
    # the role order does not matter (f1 first was admitted in role order on A100 only)
    s2 = _isolated_8_and_8(
        ClusterBuilder()
        .leaf("h", nodes=2, model="H100", gpus=4)
        .leaf("x", nodes=1, model="A100", gpus=8)
    )
    g = _f2_f1()
    s2.submit(attrs.evolve(g, roles=g.roles[::-1]), now=0)
    assert s2.step(now=1).placed == ("g",)


def _busy_a100(tenant: str = "b") -> Scheduler:
    """Two 4-GPU H100 nodes and one 8-GPU A100 node that ``tenant``'s job ``busy`` fills: f2
    fits only H100, f1 nowhere now."""
    s = _isolated_8_and_8(
        ClusterBuilder()
        .leaf("h", nodes=2, model="H100", gpus=4)
        .leaf("x", nodes=1, model="A100", gpus=8)
    )
    s.submit(job("busy", tenant=tenant, gpus=8, models="A100"), now=0)
    assert s.step(now=0).placed == ("busy",)
    return s


def test_a_gang_no_fit_of_which_the_nodes_can_hold_keeps_the_reason_of_the_first_quota_fit() -> (
    None
):
    s = _busy_a100()
    s.submit(_f2_f1(), now=0)
    r = s.step(now=1)
    assert r.placed == ()
    # quota's first fit is f2 on A100, f1 on H100: readiness refuses f2 first, as before
    assert r.pending["g"].code is ReasonCode.INSUFFICIENT_CAPACITY
    assert r.pending["g"].message == "role 'f2' needs 8 GPUs, 0 free in its pools"


def test_a_node_added_changes_the_model_per_role_on_the_next_cycle() -> None:
    s = _busy_a100()
    s.submit(_f2_f1(), now=0)
    assert s.step(now=1).placed == ()
    assert s.step(now=2).placed == ()  # (decided again on the same nodes: the same answer)
    s.node_added(node("x-n1", model="A100", gpus=8, leaf="x", spine="sp0", superspine="ss0"), now=3)
    r = s.step(now=4)
    # quota's first fit (f2 on A100, f1 on H100) still has no H100 node for f1; the other
    # fit has an A100 node for f1 now
    assert r.placed == ("g",)
    assert _models_of(s, r) == {"f2": {"H100"}, "f1": {"A100"}}


def test_a_gang_preempts_for_the_fit_the_nodes_hold_and_runs_there_once_its_victim_is_gone() -> (
    None
):
    # a's low-priority job fills the 8-GPU A100 node (and a's A100 quota). g (priority 10)
    # fits no node now; with that job gone, f1 on A100 and f2 on H100 run. The preemption
    # what-if judged quota's first fit only (f1 on H100, which no node holds): it found no
    # victims, and g waited for ever ("quota left 0" for f1)
    s = _busy_a100("a")
    s.submit(attrs.evolve(_f2_f1(), priority=10), now=1)
    r = s.step(now=2)
    assert [v.job for v in r.victims] == ["busy"], r.pending
    evict_victims(s, r, now=3)
    r = s.step(now=4)
    assert r.placed == ("g",) and _models_of(s, r) == {"f2": {"H100"}, "f1": {"A100"}}
    check_invariants(s)


def test_a_backfill_reservation_is_made_for_the_fit_the_nodes_will_hold() -> None:
    # b's job fills the A100 node until 100. EASY's forecast for g judged quota's first fit
    # only (f1 on H100, which no node ever holds): no reservation, and b's 500-second job
    # took the H100 nodes g needs at 100. Now g is reserved f2 on H100 and f1 on A100 at
    # 100, the long job waits, and g runs at 100
    adm = Admitter(
        [Quota.gpus(t, m, 8) for t in ("a", "b") for m in ("H100", "A100")],
        modes={"a": "isolated", "b": "isolated"},
    )
    cl = (
        ClusterBuilder()
        .leaf("h", nodes=2, model="H100", gpus=4)
        .leaf("x", nodes=1, model="A100", gpus=8)
        .build()
    )
    s = Scheduler(cl, admitter=adm, policy=EasyBackfill())
    s.submit(job("busy", tenant="b", gpus=8, models="A100", runtime=100), now=0)
    busy = s.step(now=0)
    s.submit(attrs.evolve(_f2_f1(), runtime_estimate=10, submitted_at=1), now=1)
    s.submit(job("long", tenant="b", gpus=4, models="H100", runtime=500, submitted_at=2), now=2)
    r = s.step(now=3)
    assert r.placed == () and r.reservation is not None and r.reservation.start == 100
    assert r.pending["long"].code is ReasonCode.RESERVED
    s.pods_finished([b.pod for b in busy.bindings], now=100)
    r = s.step(now=100)
    assert r.placed[0] == "g" and _models_of(s, r)["f1"] == {"A100"}
    check_invariants(s)


def _backfill_beside(reserve: bool) -> CycleResult:
    """Two 4-GPU H100 nodes, one 8-GPU A100 node, b's 4-GPU job on the A100 node until 100;
    with ``reserve``, b's 8-GPU A100 job ``head`` (1000 s) waits first and is reserved the
    A100 node. Then a's gang g: f2 (2 pods of 4 GPUs) and f1 (1 pod of 4 GPUs), both
    H100|A100, 10 seconds. The result of the cycle at 3."""
    adm = Admitter(
        [Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 8), Quota.gpus("b", "A100", 32)],
        modes={"a": "isolated", "b": "isolated"},
    )
    cl = (
        ClusterBuilder()
        .leaf("h", nodes=2, model="H100", gpus=4)
        .leaf("x", nodes=1, model="A100", gpus=8)
        .build()
    )
    s = Scheduler(cl, admitter=adm, policy=EasyBackfill())
    s.submit(job("busy", tenant="b", gpus=4, models="A100", runtime=100), now=0)
    assert s.step(now=0).placed == ("busy",)
    if reserve:
        s.submit(
            job("head", tenant="b", gpus=8, models="A100", runtime=1000, submitted_at=1), now=1
        )
    f2 = Role(name="f2", replicas=2, resources=Resources(gpus=4), gpu_models="H100|A100")
    f1 = Role(name="f1", replicas=1, resources=Resources(gpus=4), gpu_models="H100|A100")
    s.submit(Job(id="g", tenant="a", roles=(f2, f1), runtime_estimate=10, submitted_at=2), now=2)
    return s.step(now=3)


def test_a_gang_that_may_use_a_reservation_takes_the_fit_the_nodes_hold_too() -> None:
    # quota's first fit puts f2 on A100 (4 GPUs free, beside busy) and f1 on H100; the
    # nodes hold f2 on the two H100 nodes and f1 on A100. Without a reservation g runs so.
    # With head reserved the A100 node at 100, g (ending at 13) may use it: it was refused
    # from the pool totals on quota's first fit before the other fit was looked at, and
    # waited behind a reservation it did not delay
    assert _backfill_beside(reserve=False).placed == ("g",)
    r = _backfill_beside(reserve=True)
    assert r.reservation is not None and r.reservation.job == "head"
    assert "g" in r.placed, r.pending


def _reserved_gang(quotas: bool = True) -> Scheduler:
    """b's job fills the 8-GPU A100 node until 100 (two 4-GPU H100 nodes beside it); a's
    gang g (f2 2x4, f1 1x8, both H100|A100) waits, and b's 500-second job ``long`` (4 H100
    GPUs) behind it: EASY reserves f2 on H100 and f1 on A100 at 100 for g."""
    adm = (
        Admitter(
            [Quota.gpus(t, m, 8) for t in ("a", "b") for m in ("H100", "A100")],
            modes={"a": "isolated", "b": "isolated"},
        )
        if quotas
        else Admitter(None)
    )
    cl = (
        ClusterBuilder()
        .leaf("h", nodes=2, model="H100", gpus=4)
        .leaf("x", nodes=1, model="A100", gpus=8)
        .build()
    )
    s = Scheduler(cl, admitter=adm, policy=EasyBackfill())
    s.submit(job("busy", tenant="b", gpus=8, models="A100", runtime=100), now=0)
    s.step(now=0)
    s.submit(attrs.evolve(_f2_f1(), runtime_estimate=10, submitted_at=1), now=1)
    # (a job behind it that would take the H100 nodes: the reservation gates it)
    s.submit(job("long", tenant="b", gpus=4, models="H100", runtime=500, submitted_at=2), now=2)
    return s


def test_a_waiting_gang_with_a_choice_of_model_per_role_keeps_its_reservation_across_cycles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # its forecast was computed afresh every cycle, with a quota search at every future
    # state: now the fits quota allows are found once per forecast (the ledger is fixed
    # meanwhile), each state only checks readiness on them, and the forecast is kept while
    # they and what holds devices are unchanged
    import kant.admission.forecast as forecast

    s = _reserved_gang()
    first = s.step(now=3).reservation
    assert first is not None and first.job == "g" and first.start == 100
    calls = {"admit_quota": 0, "fits_to_try": 0}
    for name in calls:
        real = getattr(forecast, name)

        def counted(*a: object, _real: object = real, _name: str = name, **k: object) -> object:
            calls[_name] += 1
            return _real(*a, **k)  # type: ignore[operator]

        monkeypatch.setattr(forecast, name, counted)
    kept = kept_forecast(s.queue)
    hits = kept.hits
    for t in range(4, 9):  # jobs that cannot start arrive; nothing ends
        s.submit(job(f"big{t}", tenant="b", gpus=8, models="A100", submitted_at=t), now=t)
        assert s.step(now=t).reservation == first
    assert kept.hits == hits + 5
    assert calls == {"admit_quota": 5, "fits_to_try": 5}  # (one each per cycle)


def test_without_quotas_a_gang_with_a_choice_of_model_per_role_is_never_decided_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # no quotas: every role is on every model it has, no fit of quota to choose (each cycle
    # and forecast asked quota again for nothing)
    import kant.admission.forecast as forecast
    import kant.cycle as cycle

    def never(*_a: object, **_k: object) -> object:
        raise AssertionError("decided again without quotas")

    monkeypatch.setattr(forecast, "fits_to_try", never)
    monkeypatch.setattr(cycle, "fits_to_try", never)
    s = _reserved_gang(quotas=False)
    assert "g" in s.step(now=3).pending
    s.submit(job("big", tenant="b", gpus=8, models="A100", submitted_at=4), now=4)
    assert "g" in s.step(now=4).pending


def test_a_node_removed_changes_the_model_per_role_on_the_next_cycle() -> None:
    # an 8-GPU node of each model: quota's first fit (f2 on A100, f1 on H100) runs. With the
    # H100 node replaced by two 4-GPU ones, the next gang alike takes the other fit
    s = _isolated_8_and_8(
        ClusterBuilder()
        .leaf("h", nodes=1, model="H100", gpus=8)
        .leaf("x", nodes=1, model="A100", gpus=8)
    )
    s.submit(_f2_f1(), now=0)
    r = s.step(now=1)
    assert r.placed == ("g",) and _models_of(s, r) == {"f2": {"A100"}, "f1": {"H100"}}
    s.pods_finished([b.pod for b in r.bindings], now=2)
    s.node_removed("h-n0", now=3)
    s.node_added(node("h-n1", model="H100", gpus=4, leaf="h", spine="sp0", superspine="ss0"), now=3)
    s.node_added(node("h-n2", model="H100", gpus=4, leaf="h", spine="sp0", superspine="ss0"), now=3)
    s.submit(attrs.evolve(_f2_f1(), id="g2"), now=4)
    r = s.step(now=5)
    assert r.placed == ("g2",) and _models_of(s, r) == {"f2": {"H100"}, "f1": {"A100"}}


def test_a_gang_within_nominal_where_no_node_holds_it_waits_rather_than_borrow_where_they_do() -> (
    None
):
    # a (shared): 16 H100 nominal, no A100; b lends 8 A100. Four 4-GPU H100 nodes, one 8-GPU
    # A100 node. Within nominal, g runs all on H100, where no node holds f1's 8-GPU pod; on
    # A100 f1 runs now, but borrowing (it would be reclaimed): g waits within nominal
    adm = Admitter([Quota.gpus("a", "H100", 16), Quota.gpus("b", "A100", 8)])
    cl = (
        ClusterBuilder()
        .leaf("h", nodes=4, model="H100", gpus=4)
        .leaf("x", nodes=1, model="A100", gpus=8)
        .build()
    )
    s = Scheduler(cl, admitter=adm)
    s.submit(_f2_f1(), now=0)
    r = s.step(now=1)
    assert r.placed == () and r.pending["g"].code is ReasonCode.NO_FIT


class _Nodes:
    """What the nodes hold, for :func:`admit_quota` (:class:`NodesNow`): per role, the
    models readiness passes it alone on; per model, the GPUs free."""

    def __init__(self, ready: Mapping[str, str], free: Mapping[str, int]) -> None:
        self.ready, self.free_gpus = ready, free

    def fits(
        self, job: Job, counts: Mapping[str, int], models: Mapping[str, tuple[str, ...]]
    ) -> bool:
        on: dict[str, int] = {}
        for r in job.roles:
            ms = models.get(r.name, ())
            if not set(ms) & set(self.ready.get(r.name, "").split("|")):
                return False
            if len(ms) == 1:
                on[ms[0]] = on.get(ms[0], 0) + r.resources.gpus * counts[r.name]
        return all(n <= self.free_gpus[m] for m, n in on.items())


def _decide(led: QuotaLedger, j: Job, nodes: _Nodes | None) -> QuotaDecision:
    return admit_quota(led, j, tuple(j.pods()), _role_models(j), nodes=nodes)


def test_of_the_fits_within_nominal_the_one_the_nodes_hold_is_taken() -> None:
    led = _ledger([Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 8)], "isolated")
    j = _f2_f1()
    alone = _decide(led, j, None)
    assert alone.models == {"f2": ("A100",), "f1": ("H100",)}
    nodes = _Nodes({"f2": "H100|A100", "f1": "A100"}, {"H100": 8, "A100": 8})
    dec = _decide(led, j, nodes)
    assert dec.models == {"f2": ("H100",), "f1": ("A100",)}
    assert dec.within_nominal and dec.nominal_models == dec.models
    # nodes that hold quota's first fit: it is kept, and nothing more is read
    held = _Nodes({"f2": "A100", "f1": "H100"}, {"H100": 8, "A100": 8})
    assert _decide(led, j, held) == alone


def test_a_gang_that_borrows_anyway_takes_a_borrowing_fit_the_nodes_hold() -> None:
    # a (shared): 8 H100 nominal, 8 A100 nominal all in use; b lends 16 L40. f2 and f1 (8
    # GPUs each) on H100|L40: no fit within nominal (16 > 8 H100); quota alone puts f1 on
    # L40, where the nodes hold only f2 (and f1 on H100 only)
    quotas = [
        Quota.gpus("a", "H100", 8),
        Quota.gpus("a", "A100", 8),
        Quota.gpus("b", "L40", 16),
    ]
    led = _ledger(quotas, usage={("a", "A100"): 8 * MILLI})
    j = _f2_f1(f1_models="H100|L40", f2_models="H100|L40")
    alone = _decide(led, j, None)
    assert alone.ok and not alone.within_nominal
    nodes = _Nodes({"f2": "L40", "f1": "H100"}, {"H100": 8, "A100": 0, "L40": 16})
    assert not nodes.fits(j, {"f2": 2, "f1": 1}, alone.models)
    dec = _decide(led, j, nodes)
    assert dec.ok and not dec.within_nominal
    assert dec.models == {"f2": ("L40",), "f1": ("H100", "L40")}
    assert nodes.fits(j, {"f2": 2, "f1": 1}, dec.models)


def test_with_every_search_remembered_the_fit_taken_follows_what_the_nodes_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kant.admission.quota as quota

    monkeypatch.setattr(quota, "_REMEMBERED_STEPS", -1)  # (every search remembered)
    monkeypatch.setattr(quota, "_GAVE_UP", {})
    led = _ledger([Quota.gpus("a", "H100", 8), Quota.gpus("a", "A100", 8)], "isolated")
    j = _f2_f1()
    on_a100 = _Nodes({"f2": "H100|A100", "f1": "A100"}, {"H100": 8, "A100": 8})
    on_h100 = _Nodes({"f2": "A100", "f1": "H100"}, {"H100": 8, "A100": 8})
    for _cycle in range(2):
        assert _decide(led, j, on_a100).models == {"f2": ("H100",), "f1": ("A100",)}
        assert _decide(led, j, on_h100).models == {"f2": ("A100",), "f1": ("H100",)}
    # the same readiness, less free: f2 no longer fits H100 beside nothing else
    less = _Nodes({"f2": "H100|A100", "f1": "A100"}, {"H100": 4, "A100": 8})
    assert _decide(led, j, less).models == {"f2": ("A100",), "f1": ("H100",)}


@st.composite
def _clusters_and_gangs(
    draw: st.DrawFn,
) -> tuple[list[tuple[str, int]], list[tuple[int, int, str]], dict[str, int]]:
    """Nodes (model, GPUs: 4 or 8), a gang's roles (pods, GPUs per pod: 4 or 8, models) and
    an isolated tenant's quota per model (GPUs)."""
    nodes = draw(
        st.lists(
            st.tuples(st.sampled_from(("A100", "H100")), st.sampled_from((4, 8))),
            min_size=2,
            max_size=5,
        )
    )
    roles = draw(
        st.lists(
            st.tuples(
                st.integers(1, 2),
                st.sampled_from((4, 8)),
                st.sampled_from(("A100", "H100", "A100|H100")),
            ),
            min_size=2,
            max_size=3,
        )
    )
    quota = {m: draw(st.sampled_from((0, 8, 16, 24))) for m in ("A100", "H100")}
    return nodes, roles, quota


def _modelfit_run(
    nodes: Sequence[tuple[str, int]],
    roles: Sequence[tuple[int, int, str]],
    quota: Mapping[str, int],
) -> bool:
    """Is the gang placed in the first cycle on an empty cluster of ``nodes``?"""
    b = ClusterBuilder()
    for k, (m, g) in enumerate(nodes):
        b.add(node(f"n{k}", model=m, gpus=g, leaf="l0"))
    adm = Admitter([Quota.gpus("a", m, q) for m, q in quota.items()], modes={"a": "isolated"})
    s = Scheduler(b.build(), admitter=adm)
    s.submit(_modelfit_gang(roles), now=0)
    return s.step(now=1).placed == ("g",)


def test_a_gang_admitted_in_role_order_where_no_node_holds_a_role_takes_a_fit_the_nodes_hold() -> (
    None
):
    # a: 16 H100 + 8 A100, isolated; two 4-GPU H100 nodes and one 8-GPU A100 node. In role
    # order f2 is admitted on both models and f1 (beside it) on H100 only, within nominal:
    # that decision was kept without a look at the nodes, and no H100 node holds f1's
    # 8-GPU pod: g waited NO_FIT for ever, though f2 on H100 and f1 on A100 run now
    nodes = [("H100", 4), ("H100", 4), ("A100", 8)]
    quota = {"A100": 8, "H100": 16}
    assert _modelfit_run(nodes, [(2, 4, "H100"), (1, 8, "A100")], quota)
    assert _modelfit_run(nodes, [(2, 4, "A100|H100"), (1, 8, "A100|H100")], quota)


def _modelfit_gang(roles: Sequence[tuple[int, int, str]]) -> Job:
    return Job(
        id="g",
        tenant="a",
        roles=tuple(
            Role(name=f"r{i}", replicas=n, resources=Resources(gpus=gp), gpu_models=ms)
            for i, (n, gp, ms) in enumerate(roles)
        ),
    )


def _modelfit_decision(
    nodes: Sequence[tuple[str, int]],
    roles: Sequence[tuple[int, int, str]],
    quota: Mapping[str, int],
) -> tuple[bool, bool]:
    """The decision quota takes with the empty ``nodes`` in view: is it admitted, and does
    readiness pass it?"""
    b = ClusterBuilder()
    for k, (m, g) in enumerate(nodes):
        b.add(node(f"n{k}", model=m, gpus=g, leaf="l0"))
    pools = Pools(b.build().snapshot())
    j = _modelfit_gang(roles)
    rm, no_pool = pools.role_models(j)
    assert no_pool is None
    led = _ledger([Quota.gpus("a", m, q) for m, q in quota.items()], "isolated")
    pods = tuple(j.pods())
    dec = admit_quota(led, j, pods, rm, nodes=pools)
    return dec.ok, dec.ok and pools.fits(j, pods_per_role(j, pods), dec.models)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_clusters_and_gangs())
@example(
    (
        [("H100", 4), ("H100", 4), ("A100", 8)],
        [(2, 4, "A100|H100"), (1, 8, "A100|H100")],
        {"A100": 8, "H100": 8},
    )
)
@example(  # (admitted in role order within nominal on a fit no node holds)
    (
        [("H100", 4), ("H100", 4), ("A100", 8)],
        [(2, 4, "A100|H100"), (1, 8, "A100|H100")],
        {"A100": 16, "H100": 16},
    )
)
@example(
    (
        [("A100", 4), ("A100", 8), ("A100", 8), ("H100", 8), ("H100", 4)],
        [(1, 4, "H100"), (1, 4, "A100|H100"), (2, 8, "A100|H100")],
        {"A100": 16, "H100": 24},
    )
)
@example(  # (readiness passes the widened fit; placement, greedy in role order, does not)
    (
        [("A100", 4), ("A100", 4), ("H100", 8)],
        [(2, 4, "A100|H100"), (1, 8, "A100|H100")],
        {"A100": 16, "H100": 16},
    )
)
def test_a_gang_takes_a_fit_readiness_passes_whenever_one_model_per_role_fits_quota_and_the_nodes(
    case: tuple[list[tuple[str, int]], list[tuple[int, int, str]], dict[str, int]],
) -> None:
    # What is claimed is readiness's (the nodes' aggregates), not placement's: placement
    # takes the roles in order, so a fit with a role on two models that readiness passes
    # may still not place (see the last example and docs/qsch.md, "Left")
    nodes, roles, quota = case
    live = {m for m, _g in nodes}
    choices = [[m for m in ms.split("|") if m in live] for _n, _g, ms in roles]
    if not all(choices):
        return
    placed = {
        pick
        for pick in itertools.product(*choices)
        if _modelfit_run(
            nodes, [(n, g, m) for (n, g, _ms), m in zip(roles, pick, strict=True)], quota
        )
    }
    if placed:
        admitted, ready = _modelfit_decision(nodes, roles, quota)
        assert admitted and ready


def _modelfit_scheduler(
    nodes: Sequence[tuple[str, int]], quota: Mapping[str, int] | None, **kw: Any
) -> Scheduler:
    """A scheduler (``kw``: its other arguments) on an empty cluster of ``nodes`` (model,
    GPUs), tenant ``a`` isolated with ``quota`` GPUs per model (None: no quotas)."""
    b = ClusterBuilder()
    for k, (m, g) in enumerate(nodes):
        b.add(node(f"n{k}", model=m, gpus=g, leaf="l0"))
    if quota is None:
        return Scheduler(b.build(), **kw)
    adm = Admitter([Quota.gpus("a", m, q) for m, q in quota.items()], modes={"a": "isolated"})
    return Scheduler(b.build(), admitter=adm, **kw)


@pytest.mark.parametrize("quotas", [True, False], ids=["with quotas", "without quotas"])
def test_a_gang_whose_first_role_takes_the_node_the_next_needs_runs_at_once_on_one_model_per_role(
    quotas: bool,
) -> None:
    # two 4-GPU A100 nodes and one 8-GPU H100 node, 16 + 16 GPUs of quota: every fit puts
    # both roles on both models and readiness passes it; placement put r0's two 4-GPU pods
    # (first) on the H100 node, r1's 8-GPU pod had no node, and g waited NO_FIT for ever.
    # Placement is now tried again with one model per role: r0 on A100, r1 on H100
    nodes = [("A100", 4), ("A100", 4), ("H100", 8)]
    quota = {"A100": 16, "H100": 16} if quotas else None
    s = _modelfit_scheduler(nodes, quota)
    s.submit(_modelfit_gang([(2, 4, "A100|H100"), (1, 8, "A100|H100")]), now=0)
    r = s.step(now=1)
    assert r.placed == ("g",)
    model = {"n0": "A100", "n1": "A100", "n2": "H100"}
    assert {(b.pod.role, model[b.node]) for b in r.bindings} == {("r0", "A100"), ("r1", "H100")}
    if quotas:
        # charged where the pods landed: exactly the fit quota allowed
        assert s.admitter.used("a", "A100") == 8 * MILLI
        assert s.admitter.used("a", "H100") == 8 * MILLI
    check_invariants(s)


def _rolefit_busy(*, runtime: float | None = None, **kw: Any) -> Scheduler:
    """Two 4-GPU A100 nodes and one 8-GPU H100 node, a (isolated) with 24 A100 + 16 H100 (``kw``:
    the scheduler's other arguments); a's job ``busy`` (2 pods of 4 GPUs, A100, priority 0)
    runs on the A100 nodes."""
    nodes = [("A100", 4), ("A100", 4), ("H100", 8)]
    s = _modelfit_scheduler(nodes, {"A100": 24, "H100": 16}, **kw)
    s.submit(job("busy", tenant="a", gpus=4, replicas=2, models="A100", runtime=runtime), now=0)
    assert s.step(now=0).placed == ("busy",)
    return s


def test_a_gang_preempts_for_one_model_per_role_when_its_first_role_would_take_the_node_the_next_needs() -> (
    None
):
    # g (priority 10): r0 2 pods of 4 GPUs, r1 1 pod of 8, both A100|H100; busy fills the
    # A100 nodes. With busy gone, placement of the widened fit puts r0 on the H100 node and
    # r1 has none: the what-if found no victims (placement failed with every unit removed)
    # and g waited for ever behind a lower-priority job. The what-if now places as the
    # cycle does, one model per role: it evicts busy, and g runs r0 on A100, r1 on H100
    s = _rolefit_busy(preemption=PreemptionPolicy(min_runtime=0.0))
    g = attrs.evolve(_modelfit_gang([(2, 4, "A100|H100"), (1, 8, "A100|H100")]), priority=10)
    s.submit(g, now=1)
    r = s.step(now=2)
    assert [v.job for v in r.victims] == ["busy"], r.pending
    evict_victims(s, r, now=3)
    r = s.step(now=4)
    model = {"n0": "A100", "n1": "A100", "n2": "H100"}
    assert r.placed == ("g",)
    assert {(b.pod.role, model[b.node]) for b in r.bindings} == {("r0", "A100"), ("r1", "H100")}
    check_invariants(s)


def test_a_backfill_reservation_is_made_where_one_model_per_role_places() -> None:
    # busy holds the A100 nodes until 100. EASY's forecast placed g's widened fit at 100
    # (r0 on the H100 node first, r1 on none): no reservation, so a later 8-GPU H100 job of
    # 500 seconds ran at once and g waited until 500. Now g is reserved at 100 (r0 on A100,
    # r1 on H100) and the long job, which would delay it, waits
    s = _rolefit_busy(runtime=100, policy=EasyBackfill())
    g = attrs.evolve(
        _modelfit_gang([(2, 4, "A100|H100"), (1, 8, "A100|H100")]),
        runtime_estimate=10,
        submitted_at=1,
    )
    s.submit(g, now=1)
    s.submit(job("long", tenant="a", gpus=8, models="H100", runtime=500, submitted_at=2), now=2)
    r = s.step(now=3)
    assert r.placed == () and r.reservation is not None and r.reservation.start == 100
    assert r.pending["long"].code is ReasonCode.RESERVED
    s.pods_finished([PodId(job="busy", role="worker", index=k) for k in range(2)], now=100)
    r = s.step(now=100)
    assert r.placed[0] == "g"
    check_invariants(s)


def test_a_gang_reclaiming_its_nominal_quota_evicts_the_borrowers_where_only_one_model_per_role_places() -> (
    None
):
    # a has 8 A100 + 8 H100 of nominal quota, all lent to b (bA on the 8-GPU A100 node, bH
    # on the two 4-GPU H100 nodes); c lends 16 + 16 more. g (a): r0 2 pods of 4 GPUs, r1 1
    # pod of 8, both A100|H100: only r0 on H100 and r1 on A100 places, within a's nominal.
    # The what-if narrowed a reclaimer's decision to the nominal models quota found first
    # (r0 on A100, r1 on H100), readiness refused it (no H100 node holds 8), and the
    # choices of one model per role were never tried: no victims, g waited for ever
    b = ClusterBuilder()
    b.add(node("nA", model="A100", gpus=8, leaf="l0"))
    b.add(node("nH0", model="H100", gpus=4, leaf="l0"))
    b.add(node("nH1", model="H100", gpus=4, leaf="l0"))
    adm = Admitter(
        [Quota.gpus("a", "A100", 8), Quota.gpus("a", "H100", 8)]
        + [Quota.gpus("b", m, 0) for m in ("A100", "H100")]
        + [Quota.gpus("c", m, 16) for m in ("A100", "H100")]
    )
    s = Scheduler(b.build(), admitter=adm, preemption=PreemptionPolicy(min_runtime=0.0))
    s.submit(job("bA", tenant="b", gpus=8, models="A100"), now=0)
    s.submit(job("bH", tenant="b", gpus=4, replicas=2, models="H100"), now=0)
    assert s.step(now=0).placed == ("bA", "bH")
    s.submit(
        attrs.evolve(_modelfit_gang([(2, 4, "A100|H100"), (1, 8, "A100|H100")]), submitted_at=1),
        now=1,
    )
    r = s.step(now=2)
    assert sorted({v.job for v in r.victims}) == ["bA", "bH"], r.pending
    evict_victims(s, r, now=3)
    r = s.step(now=4)
    assert r.placed == ("g",)
    model = {"nA": "A100", "nH0": "H100", "nH1": "H100"}
    assert {(x.pod.role, model[x.node]) for x in r.bindings} == {("r0", "H100"), ("r1", "A100")}
    # within its nominal quota, as the reclaim promised
    assert adm.used("a", "A100") == 8 * MILLI and adm.used("a", "H100") == 8 * MILLI
    check_invariants(s)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_a_choice_of_one_model_per_role_is_within_nominal_iff_its_roles_fit_the_nominal_quota_left_and_those_come_first(
    case: tuple[QuotaLedger, Job],
) -> None:
    # each choice narrowed_fits gives is labelled within nominal (a reclaimer may take it)
    # exactly when every model's roles on it fit the tenant's nominal quota left, whichever
    # fit it came from, and every such choice comes before every choice that borrows
    led, j = case
    rm = _role_models(j)
    pods = tuple(j.pods())
    got = narrowed_fits(led, j, pods, rm)
    dec = admit_quota(led, j, pods, rm)
    labels = []
    for f in got:
        assert all(len(ms) == 1 for ms in f.models.values())
        assert f.within_nominal == dec.within_nominal and f.pods == dec.pods
        used: dict[str, int] = {}
        for role in j.roles:
            (m,) = f.models[role.name]
            used[m] = used.get(m, 0) + role.resources.total_milli * role.replicas
        mine = all(led.within_nominal("a", m, u) for m, u in used.items())
        nominal = f.within_nominal and f.places_within_nominal
        assert nominal == (mine and dec.within_nominal)
        labels.append(nominal)
    assert labels == sorted(labels, reverse=True)
    assert len({tuple(sorted(f.models.items())) for f in got}) == len(got)


def test_gangs_of_one_model_per_role_of_many_tenants_that_fail_alike_are_placed_once_a_cycle() -> (
    None
):
    # six tenants' gangs of one shape (r0: 1 GPU of H100, r1: 2 pods of 3 GPUs of A100;
    # each role on one model: no other fit, nothing to place again) pass readiness and do
    # not place (the A100 nodes keep 4 and 2 free GPUs). The failed shape is shared: one
    # placement attempt in the cycle, not one per tenant
    n = 6
    b = ClusterBuilder()
    b.add(node("h0", model="H100", gpus=8, leaf="l0"))
    b.add(node("a0", model="A100", gpus=8, leaf="l0"))
    b.add(node("a1", model="A100", gpus=8, leaf="l0"))
    qs = [Quota.gpus("f", "A100", 16)]
    for t in range(n):
        qs += [Quota.gpus(f"t{t}", "H100", 8), Quota.gpus(f"t{t}", "A100", 16)]
    modes = {q.tenant: "isolated" for q in qs}
    s = Scheduler(b.build(), admitter=Admitter(qs, modes=modes))
    s.submit(job("fill0", tenant="f", gpus=4, models="A100"), now=0)
    s.submit(job("fill1", tenant="f", gpus=6, models="A100"), now=0)
    assert s.step(now=0).placed == ("fill0", "fill1")
    for t in range(n):
        roles = (
            Role(name="r0", replicas=1, resources=Resources(gpus=1), gpu_models=("H100",)),
            Role(name="r1", replicas=2, resources=Resources(gpus=3), gpu_models=("A100",)),
        )
        s.submit(Job(id=f"g{t}", tenant=f"t{t}", submitted_at=1 + t, roles=roles), now=1)
    r = s.step(now=2)
    assert r.placed == ()
    assert r.stats.placement_attempts == 1
    assert {r.pending[f"g{t}"].code for t in range(n)} == {ReasonCode.NO_FIT}
    check_invariants(s)


def test_a_gang_of_another_tenant_of_the_same_shape_takes_the_fit_its_own_quota_allows() -> None:
    # two 4-GPU A100 nodes, one 8-GPU H100 node; ga (tenant a) and gb (tenant b) have one
    # shape: r0 2 pods of 4 GPUs, r1 1 pod of 8, both A100|H100. Both have 16 A100 and 8
    # H100 of headroom, so quota decides both r0 A100|H100, r1 A100 (no A100 node holds 8).
    # a is within nominal (16 A100 of its own): it keeps to its fits within nominal, all
    # on A100, and waits. b owns nothing and borrows anyway: its fit r0 A100, r1 A100|H100
    # places. ga fails first (b must borrow: it comes after); had the failed shape been
    # shared across tenants, gb would have waited with ga's reason
    b = ClusterBuilder()
    b.add(node("nA0", model="A100", gpus=4, leaf="l0"))
    b.add(node("nA1", model="A100", gpus=4, leaf="l0"))
    b.add(node("nH", model="H100", gpus=8, leaf="l0"))
    adm = Admitter(
        [
            Quota.gpus("a", "A100", 16),
            Quota.gpus("a", "H100", 0),
            Quota.gpus("b", "A100", 0),
            Quota.gpus("b", "H100", 0),
            Quota.gpus("l", "H100", 8),
        ]
    )
    s = Scheduler(b.build(), admitter=adm)
    gang = _modelfit_gang([(2, 4, "A100|H100"), (1, 8, "A100|H100")])
    s.submit(attrs.evolve(gang, id="ga", tenant="a", submitted_at=0), now=0)
    s.submit(attrs.evolve(gang, id="gb", tenant="b", submitted_at=1), now=1)
    r = s.step(now=2)
    assert r.placed == ("gb",), r.pending
    model = {"nA0": "A100", "nA1": "A100", "nH": "H100"}
    assert {(x.pod.role, model[x.node]) for x in r.bindings} == {("r0", "A100"), ("r1", "H100")}
    assert "ga" in r.pending
    check_invariants(s)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_clusters_and_gangs(), st.booleans())
@example(
    (
        [("A100", 4), ("A100", 4), ("H100", 8)],
        [(2, 4, "A100|H100"), (1, 8, "A100|H100")],
        {"A100": 16, "H100": 16},
    ),
    True,
)
def test_a_gang_places_whenever_some_one_model_per_role_places_when_given_alone(
    case: tuple[list[tuple[str, int]], list[tuple[int, int, str]], dict[str, int]],
    quotas: bool,
) -> None:
    # brute force: every assignment of one model per role, each given alone to a fresh
    # scheduler (so within what quota allows, and readiness, and placement); when one runs,
    # the gang with its roles on their models runs in its first cycle too
    nodes, roles, quota = case
    live = {m for m, _g in nodes}
    choices = [[m for m in ms.split("|") if m in live] for _n, _g, ms in roles]
    if not all(choices):
        return
    q = quota if quotas else None

    def runs(rs: Sequence[tuple[int, int, str]]) -> bool:
        s = _modelfit_scheduler(nodes, q)
        s.submit(_modelfit_gang(rs), now=0)
        r = s.step(now=1)
        check_invariants(s)
        return r.placed == ("g",)

    alone = any(
        runs([(n, g, m) for (n, g, _ms), m in zip(roles, pick, strict=True)])
        for pick in itertools.product(*choices)
    )
    if alone:
        assert runs(roles)


@st.composite
def _with_nodes(draw: st.DrawFn) -> tuple[QuotaLedger, Job, _Nodes]:
    """A case of :func:`_cases` and what the nodes hold: per role the models it passes
    alone on, per model the GPUs free."""
    led, j = draw(_cases())
    ready = {r.name: "|".join(sorted(draw(st.sets(st.sampled_from(MODELS))))) for r in j.roles}
    free = {m: draw(st.integers(0, 12)) for m in MODELS}
    return led, j, _Nodes(ready, free)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_with_nodes())
def test_the_nodes_change_which_fit_is_taken_never_what_quota_allows(
    case: tuple[QuotaLedger, Job, _Nodes],
) -> None:
    led, j, nodes = case
    rm = _role_models(j)
    pods = tuple(j.pods())
    alone = admit_quota(led, j, pods, rm)
    dec = admit_quota(led, j, pods, rm, nodes=nodes)
    assert dec.ok is alone.ok and dec.within_nominal is alone.within_nominal
    if not dec.ok:
        assert dec == alone
        return
    demand = {r.name: r.resources.total_milli for r in j.roles}
    models = {m for ms in rm.values() for m in ms}
    room = {m: led.headroom("a", m) for m in models}
    left = {m: led.table.nominal("a", m) - led.used("a", m) for m in models}
    # every model holds all the roles that may land on it; where a reclaimer may run, the
    # same within the nominal quota left
    for m in models:
        assert sum(demand[r] for r, ms in dec.models.items() if m in ms) <= room[m]
    if dec.within_nominal and dec.places_within_nominal:
        for m in models:
            on = sum(demand[r] for r, ms in dec.nominal_models.items() if m in ms)
            assert on == 0 or on <= left[m]
    # a decision that places within nominal is never traded for one that borrows
    if alone.within_nominal and alone.places_within_nominal:
        assert dec.places_within_nominal
    # the decision quota alone gives is kept whenever the nodes hold it
    counts = {r.name: r.replicas for r in j.roles}
    if nodes.fits(j, counts, alone.models):
        assert dec == alone
    assert admit_quota(led, j, pods, rm, nodes=nodes) == dec  # (deterministic)


_some_models = st.sets(st.sampled_from(MODELS), min_size=1).map(lambda s: "|".join(sorted(s)))


@st.composite
def _tenants_and_gang(draw: st.DrawFn) -> tuple[QuotaLedger, Job]:
    """Three tenants, each isolated or shared (with or without borrowing and lending
    limits), usage the quotas allow, and a gang of tenant ``a`` of 2 to 4 roles."""
    modes = {t: draw(st.sampled_from(["isolated", "shared"])) for t in ("a", "b", "c")}
    quotas = []
    for t in ("a", "b", "c"):
        for m in MODELS:
            nom = draw(st.integers(0, 8))
            shared = modes[t] == "shared"
            bl = draw(st.one_of(st.none(), st.integers(0, 8))) if shared else None
            ll = draw(st.one_of(st.none(), st.integers(0, nom))) if shared else None
            quotas.append(Quota.gpus(t, m, nom, borrowing_limit=bl, lending_limit=ll))
    led = QuotaLedger(QuotaTable(quotas, modes), {})
    for t, m in itertools.product(("b", "c", "a"), MODELS):
        u = draw(st.integers(0, 12))
        if u:
            led.add(t, m, min(u * MILLI, int(min(led.headroom(t, m), 12 * MILLI))))
    roles = draw(
        st.lists(
            st.tuples(st.integers(1, 4), st.integers(1, 2), _some_models), min_size=2, max_size=4
        )
    )
    j = Job(
        id="g",
        tenant="a",
        roles=tuple(
            Role(name=f"r{i}", replicas=n, resources=Resources(gpus=g), gpu_models=ms)
            for i, (g, n, ms) in enumerate(roles)
        ),
    )
    return led, j


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(_tenants_and_gang())
def test_every_fit_the_nodes_may_choose_is_one_quota_allows_as_it_allows_its_own_decision(
    case: tuple[QuotaLedger, Job],
) -> None:
    led, j = case
    rm = _role_models(j)
    pods = tuple(j.pods())
    dec = admit_quota(led, j, pods, rm)
    fits = fits_to_try(led, j, pods, rm, dec)
    assert fits[0] == dec
    assert fits == fits_to_try(led, j, pods, rm, dec)  # (deterministic)
    if not dec.ok:
        assert fits == (dec,)
        return
    demand = {r.name: r.resources.total_milli * r.replicas for r in j.roles}
    models = {m for ms in rm.values() for m in ms}
    room = {m: led.headroom("a", m) for m in models}
    left = {m: led.table.terms("a", m)[1] - led.used("a", m) for m in models}
    keys = set()
    for f in fits:
        k = tuple(sorted(f.models.items()))
        assert k not in keys  # (no two fits on the same models)
        keys.add(k)
        assert f.ok and set(f.pods) == set(pods) and len(f.pods) == len(pods)
        assert f.within_nominal is dec.within_nominal, (f, dec)
        for r, ms in f.models.items():
            assert ms and set(ms) <= set(rm[r])
        # every model holds all the roles that may land on it, within the headroom
        for m in models:
            assert sum(demand[r] for r, ms in f.models.items() if m in ms) <= room[m], (m, f)
        if f.within_nominal:
            # where a reclaimer may run, within the nominal quota left
            for r, ms in f.nominal_models.items():
                assert set(ms) <= set(f.models[r])
            for m in models:
                on = sum(demand[r] for r, ms in f.nominal_models.items() if m in ms)
                assert on == 0 or on <= left[m], (m, f)
        if dec.within_nominal and dec.places_within_nominal:
            assert f.places_within_nominal, (f, dec)
    # wherever each role's pods land among its models, every model's charge fits
    for f in fits:
        for pick in itertools.product(*(f.models[r] for r in f.models)):
            used: dict[str, int] = {}
            for r, m in zip(f.models, pick, strict=True):
                used[m] = used.get(m, 0) + demand[r]
            assert all(u <= room[m] for m, u in used.items())


def test_identical_roles_give_each_split_of_them_among_their_models_once() -> None:
    # two 8-GPU roles and four 4-GPU roles, all on A100|H100; 16 + 16 GPUs (isolated), all
    # of it asked: the fits are 2, 1 or 0 of the 8-GPU roles on A100 (with 0, 2 or 4 of the
    # 4-GPU ones). Which of identical roles goes where matters neither to quota nor to the
    # nodes, so each split is one fit to try: the depth-first search gave orderings of the
    # same splits (7 of its 8 fits) and never the third
    led = _ledger([Quota.gpus("a", "A100", 16), Quota.gpus("a", "H100", 16)], "isolated")
    big = [(f"b{i}", 8, "A100|H100") for i in range(2)]
    small = [(f"s{i}", 4, "A100|H100") for i in range(4)]
    j = _gang(*big, *small)
    rm = _role_models(j)
    pods = tuple(j.pods())
    dec = admit_quota(led, j, pods, rm)
    fits = fits_to_try(led, j, pods, rm, dec)
    splits = [
        tuple(sum(f.models[n] == ("A100",) for n, _g, _ms in roles) for roles in (big, small))
        for f in fits
    ]
    assert sorted(splits) == [(0, 4), (1, 2), (2, 0)], splits
