"""Hypothesis: whatever the cluster, jobs and strategy, no GPU or milli share is allocated
twice, gangs are all-or-nothing, and only allowed GPU models and healthy devices are used."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, given, settings

from kant.errors import ValidationError
from kant.model import Job, Resources, Role, Tier, TopologyWish
from kant.placement import Placer, PodRequest, fit_count, make_strategy, strategy_names
from kant.placement.context import fits
from kant.state import ClusterState
from kant.testing import check_invariants, node

MODELS = ["H100", "A100"]


def _standalone(name: str) -> bool:
    """Strategies that need no target workload (FGD-style ones are covered in tests/packing)."""
    try:
        make_strategy(name)
    except ValidationError:
        return False
    return True


STRATEGIES = [n for n in strategy_names() if _standalone(n)]


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    n = draw(st.integers(1, 8))
    specs = []
    for i in range(n):
        gpus = draw(st.sampled_from([2, 4, 8]))
        specs.append(
            node(
                f"n{i}",
                gpus=gpus,
                model=draw(st.sampled_from(MODELS)),
                template="dgx-8gpu" if gpus == 8 else f"openb-{gpus}gpu",
                nics=8 if gpus == 8 else 0,
                cpu_milli=64000,
                memory_mib=256000,
                leaf=f"lf{i % 3}",
                spine=f"sp{i % 3 // 2}",
                superspine="ss0",
                hbd=f"h{i // 2}",
                zone="inference" if i == 0 else None,
            )
        )
    state = ClusterState(specs)
    for spec in specs:
        for g in range(spec.gpus):
            if draw(st.integers(0, 9)) == 0:
                state.set_gpu_health(spec.name, g, False)
        if draw(st.integers(0, 14)) == 0:
            state.set_node_health(spec.name, False)
    return state


@st.composite
def jobs(draw: st.DrawFn, idx: int) -> Job:
    shared = draw(st.booleans()) and draw(st.booleans())
    res = Resources(
        gpus=0 if shared else draw(st.integers(0, 8)),
        gpu_milli=draw(st.sampled_from([100, 250, 500, 900])) if shared else 0,
        cpu_milli=draw(st.sampled_from([0, 1000, 16000])),
        memory_mib=draw(st.sampled_from([0, 1024])),
        rdma_nics=draw(st.integers(0, 2)),
    )
    tier = draw(st.sampled_from([None, Tier.NODE, Tier.HBD, Tier.LEAF, Tier.SPINE]))
    return Job(
        id=f"j{idx}",
        kind=draw(st.sampled_from(["training", "inference"])),
        gang=draw(st.booleans()),
        roles=(
            Role(
                replicas=draw(st.integers(1, 5)),
                resources=res,
                gpu_models=draw(st.sampled_from([frozenset(), {"H100"}, {"A100"}, {"B200"}])),
                topology=None
                if tier is None
                else TopologyWish(tier=tier, required=draw(st.booleans())),
            ),
        ),
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    state=clusters(),
    strategy=st.sampled_from(STRATEGIES),
    data=st.data(),
)
def test_placements_respect_devices_gangs_models_and_health(
    state: ClusterState, strategy: str, data: st.DataObject
) -> None:
    snap = state.snapshot()
    placer = Placer(strategy)
    for i in range(data.draw(st.integers(1, 6))):
        j = data.draw(jobs(i))
        before = state.full_snapshot() if j.gang else None
        with snap.transaction() as tx:
            res = placer.place(j, snap)
            tx.commit()
        check_invariants(snap)
        placed = {b.pod for b in res.bindings}
        assert placed.isdisjoint(res.unplaced)
        assert placed | set(res.unplaced) == set(j.pods())
        if j.gang and not res.ok:
            assert res.bindings == ()
        for b in res.bindings:
            spec = state.node(b.node)
            allowed = j.role(b.pod.role).gpu_models
            assert not allowed or spec.gpu_model in allowed
            assert state.is_healthy(b.node)
            mask = state.gpu_healthy_mask(b.node)
            assert all(mask >> g & 1 for g in b.gpus)
            # the truth accepts every binding: nothing is allocated twice
            state.bind(b)
        check_invariants(state)
        if before is not None and not res.ok:
            assert state.full_snapshot().same_as(before) == []
        # the snapshot saw exactly what the truth now holds
        assert state.snapshot().same_as(state.full_snapshot()) == []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=clusters(), data=st.data())
def test_the_placers_feasibility_test_agrees_with_the_fit_count(
    state: ClusterState, data: st.DataObject
) -> None:
    """``fits`` (comparisons, once per pod) says yes exactly where ``fit_count`` > 0."""
    placer = Placer("binpack")
    for i in range(data.draw(st.integers(0, 6))):  # fill the cluster some
        for b in placer.place(data.draw(jobs(i)), state.snapshot()).bindings:
            state.bind(b)
    snap = state.snapshot()
    slots = np.arange(snap.num_slots, dtype=np.int64)
    for _ in range(5):
        shared = data.draw(st.booleans())
        req = PodRequest(
            gpus=0 if shared else data.draw(st.integers(0, 8)),
            milli=data.draw(st.integers(1, 999)) if shared else 0,
            cpu=data.draw(st.sampled_from([0, 1000, 64000, 64001])),
            mem=data.draw(st.sampled_from([0, 1024, 256001])),
            nics=data.draw(st.integers(0, 2)),
        )
        np.testing.assert_array_equal(fits(snap, slots, req), fit_count(snap, slots, req) > 0)
