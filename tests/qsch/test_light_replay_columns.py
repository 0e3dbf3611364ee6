"""The light replay over columns (:func:`kant.preemption.replay.light_replay`) gives every
would-be preemptor the same answer as the replay one candidate at a time
(:meth:`Preemption._reachable_walk`), on the kept victim index and on one derived from
scratch, over random sequences of submissions, cycles, finishes, evictions, node losses and
GPU faults (the operations of ``test_incremental_cycle``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, cast
from unittest import mock

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, given, settings

from kant.admission import Admitter, Quota
from kant.model import PodId
from kant.preemption import PreemptionPolicy
from kant.preemption.candidates import VictimColumns, VictimRef, victim_order
from kant.preemption.preemptor import Preemption
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job
from kant.testing.strategies import clusters
from tests.qsch.test_incremental_cycle import POLICIES, _jobs, _op, _Pair, play

_reachable = Preemption._reachable


@contextmanager
def _compared() -> Iterator[list[int]]:
    """Every light replay given the candidates' positions is also walked one by one; the
    answers must be the same candidates in the same order. Yields [calls compared]."""
    seen = [0]

    def both(self: Preemption, e: Any, dec: Any, pods: Any, pools: Any, picked: Any,
             role_models: Any, pos: Any = None, on: Any = None) -> Any:  # fmt: skip
        got = _reachable(self, e, dec, pods, pools, picked, role_models, pos, on)
        if pos is not None:
            gs = {r.resources.gpus for r in e.job.roles if r.resources.total_milli}
            g = gs.pop() if len(gs) == 1 else 0
            want = self._reachable_walk(e, dec, pods, pools, picked, role_models, g, on)
            assert [r.pods for r in got] == [r.pods for r in want]
            seen[0] += 1
        return got

    with mock.patch.object(Preemption, "_reachable", both):
        yield seen


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    state=clusters(max_nodes=5),
    policy=st.sampled_from(POLICIES),
    quotas=st.booleans(),
    ops=st.lists(_op, min_size=10, max_size=60),
    specs=st.lists(_jobs, min_size=60, max_size=60),
)
def test_the_light_replay_over_columns_answers_as_the_walk_one_candidate_at_a_time(
    state: ClusterState,
    policy: str,
    quotas: bool,
    ops: list[tuple[str, int]],
    specs: list[tuple[int, int, bool, str, int]],
) -> None:
    with _compared():
        pair = _Pair(state, policy, quotas, True)
        play(pair, ops, specs, priorities=lambda x: x % 4)
    check_invariants(pair.inc)


def test_a_borrowing_tenant_gives_up_units_only_until_it_is_back_within_its_quota() -> None:
    """Reclaim over columns: tenant b borrows 4 GPUs beyond its nominal 4; a's reclaim may
    count b's units only while b still borrows, and the replay over columns and the walk
    agree on which (and the cycle finds the same victims either way)."""
    cluster = ClusterBuilder().leaf("lf0", nodes=4, gpus=4).build()
    quotas = [Quota.gpus(t, "H100", 8, borrowing_limit=8) for t in ("a", "b")]
    s = Scheduler(
        cluster, admitter=Admitter(quotas), policy="best-effort-fifo",
        preemption=PreemptionPolicy(min_runtime=0.0),
    )  # fmt: skip
    for i in range(12):
        s.submit(job(f"b{i}", gpus=1, tenant="b", priority=1), now=float(i))
    r = s.step(now=20.0)
    assert len(r.placed) == 12
    s.submit(job("a-big", gpus=4, replicas=2, tenant="a", priority=1), now=21.0)
    with _compared() as seen:
        r = s.step(now=30.0)
    assert seen[0] >= 1
    assert {v.job for v in r.victims} <= {f"b{i}" for i in range(12)}
    # b used 12 GPUs of nominal 8: at most its 4 borrowed ones go
    assert 1 <= sum(len(v.pods) for v in r.victims) <= 4
    check_invariants(s)


class _Snap:
    """What the replay reads of a snapshot: free whole GPUs per slot, whether the node takes
    new pods (every one here: a cordoned node's units are a scenario of
    tests/qsch/test_reclaim_victims.py), and the slots of a pool with at least ``g`` free,
    fewest first."""

    def __init__(self, free: list[int], pool_of: list[int]) -> None:
        self.cols = SimpleNamespace(
            free_gpus=np.array(free, dtype=np.int64), ready=np.ones(len(free), dtype=bool)
        )
        self.pool_of = pool_of

    def best_fit(self, pool: int, g: int) -> Iterator[int]:
        free = self.cols.free_gpus
        slots = [s for s, p in enumerate(self.pool_of) if p == pool and free[s] >= g]
        yield from sorted(slots, key=lambda s: (int(free[s]), s))


@st.composite
def _replays(draw: Any) -> dict[str, Any]:
    nslots = draw(st.integers(1, 8))
    free = draw(st.lists(st.integers(0, 8), min_size=nslots, max_size=nslots))
    pool_of = draw(st.lists(st.integers(0, 1), min_size=nslots, max_size=nslots))
    refs: list[VictimRef] = []
    for seq in range(draw(st.integers(0, 14))):
        tenant = draw(st.sampled_from(("a", "b", "c")))
        entry = SimpleNamespace(id=f"v{seq}", seq=seq, job=SimpleNamespace(tenant=tenant),
                                key=(0, seq))  # fmt: skip
        pods = tuple(PodId(job=f"v{seq}", role="w", index=i)
                     for i in range(draw(st.integers(1, 3))))  # fmt: skip
        slots = tuple((draw(st.integers(0, nslots - 1)), draw(st.integers(1, 4))) for _ in pods)
        gpus = sum(n for _s, n in slots)
        models = draw(st.sampled_from((("H100",), ("A100",), ("H100", "A100"))))
        if len(models) == 1 or draw(st.integers(0, 9)):
            usage: tuple[tuple[str, int], ...] = ((models[0], 1000 * gpus),)
        else:  # rarely: a unit on two GPU models (the replay walks those one by one)
            usage = (("A100", 1000), ("H100", 1000 * (gpus - 1)))
        order = victim_order(draw(st.integers(0, 2)), float(draw(st.integers(0, 5))), seq, pods[0])
        refs.append(VictimRef(order, cast(Any, entry), pods, 1000 * gpus, usage, slots))
    refs.sort(key=lambda r: r.order)
    picked = [i for i in range(len(refs)) if draw(st.integers(0, 3))]
    if draw(st.booleans()):  # reclaim_others_first's order
        picked = [i for i in picked if refs[i].tenant != "a"] + [
            i for i in picked if refs[i].tenant == "a"
        ]
    usage_of = {(t, m): draw(st.integers(0, 12)) * 1000 for t in ("a", "b", "c")
                for m in ("H100", "A100")}  # fmt: skip
    return dict(
        free=free, pool_of=pool_of, refs=refs, picked=picked, usage=usage_of,
        nominal=draw(st.integers(0, 8)), limit=draw(st.one_of(st.none(), st.integers(0, 8))),
        unlimited=draw(st.integers(0, 4)) == 0, dec_ok=draw(st.booleans()),
        # (quota admitted it, but not yet where its tenant is within nominal: a reclaimer)
        nominal_ok=draw(st.booleans()),
        gpus=draw(st.sampled_from((0, 1, 2, 4, 8))), replicas=draw(st.integers(1, 3)),
        pools=draw(st.sampled_from(({0}, {1}, {0, 1}))),
        # (a reclaim's models: another tenant's unit counts only while it borrows on them)
        on=draw(st.sampled_from((None, frozenset({"H100"}), frozenset({"A100"}),
                                 frozenset({"H100", "A100"})))),
        others_first=draw(st.booleans()),
        # (the nodes the preemptor may use, per slot: None, any)
        allowed=draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=nslots,
                                                   max_size=nslots))),
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(case=_replays())
def test_the_light_replay_over_columns_answers_as_the_walk_on_any_candidates(
    case: dict[str, Any],
) -> None:
    """The same, on random candidate records, quota usage and free GPUs (a borrowing
    tenant's units count only while it still borrows; checks at 1, 2, 4... counted units)."""
    refs, picked_at = case["refs"], case["picked"]
    table = (
        None
        if case["unlimited"]
        else [
            Quota.gpus(t, m, case["nominal"], borrowing_limit=case["limit"])
            for t in ("a", "b", "c")
            for m in ("H100", "A100")
        ]
    )
    ledger = Admitter(table).ledger()
    for (t, m), milli in case["usage"].items():
        ledger.add(t, m, milli)
    tenants = sorted({r.tenant for r in refs})
    index = SimpleNamespace(columns=lambda: VictimColumns(refs, tenants))
    p = Preemption.__new__(Preemption)
    p.snap = cast(Any, _Snap(case["free"], case["pool_of"]))
    p.ledger, p.index = ledger, cast(Any, index)
    p._cut = False
    j = job("p", gpus=case["gpus"], replicas=case["replicas"], tenant="a")
    e = cast(Any, SimpleNamespace(job=j))
    pods = tuple(j.pods())
    ok, nominal_ok = case["dec_ok"], case["nominal_ok"]
    dec = cast(Any, SimpleNamespace(ok=ok, places_within_nominal=nominal_ok,
                                    clears_quota=ok and nominal_ok))  # fmt: skip
    role_models = {"worker": ("H100", "A100")}
    picked = [refs[i] for i in picked_at]
    before = dict(ledger.usage)
    got = p._reachable(e, dec, pods, case["pools"], picked, role_models,
                       np.array(picked_at, dtype=np.int64), case["on"])  # fmt: skip
    gs = {r.resources.gpus for r in j.roles if r.resources.total_milli}
    g = gs.pop() if len(gs) == 1 else 0
    want = p._reachable_walk(e, dec, pods, case["pools"], picked, role_models, g, case["on"])
    assert [r.pods for r in got] == [r.pods for r in want]
    assert ledger.usage == before  # rolled back
    # a reclaim's second walk orders them alike over columns and one by one
    p.policy = PreemptionPolicy(reclaim_others_first=case["others_first"])
    pre = cast(Any, SimpleNamespace(tenant="a"))
    allowed = None if case["allowed"] is None else np.array(case["allowed"], dtype=bool)
    fast = p._room_first(pre, picked, np.array(picked_at, dtype=np.int64), allowed)
    slow = p._room_first(pre, picked, None, allowed)
    assert (fast is None) == (slow is None)
    if fast is not None and slow is not None:
        assert [r.pods for r in fast[0]] == [r.pods for r in slow[0]]
        if allowed is not None and not case["others_first"]:
            # a unit on no node it may use comes after every unit on one
            on = [any(allowed[s] for s, _n in r.slots) for r in fast[0]]
            assert on == sorted(on, reverse=True)
