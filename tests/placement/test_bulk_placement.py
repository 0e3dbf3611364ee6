"""The bulk path places a role's identical pods with exactly the pod-by-pod bindings, and
costs one snapshot update per node, not one per pod."""

from __future__ import annotations

import attrs
import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from kant.model import Binding, Job, Resources, Role, Tier
from kant.placement import Placer
from kant.state import ClusterState, Snapshot
from kant.testing import check_invariants
from kant.testing.builders import node
from kant.testing.strategies import clusters, jobs, standalone_placement_strategies

# every built-in that needs no target workload, and the tie rules of the FGD baselines
STRATEGIES = [(n, {}) for n in standalone_placement_strategies()] + [
    (n, {"ties": t}) for n in ("bestfit", "dotprod", "firstfit") for t in ("first", "random")
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=clusters(pod_caps=True), pick=st.sampled_from(STRATEGIES), data=st.data())
def test_the_bulk_path_gives_exactly_the_bindings_and_reasons_of_the_pod_by_pod_path(
    state: ClusterState, pick: tuple[str, dict[str, str]], data: st.DataObject
) -> None:
    name, kwargs = pick
    bulk = Placer(name, **kwargs)
    one_by_one = Placer(name, bulk=False, **kwargs)
    for i in range(data.draw(st.integers(1, 6))):
        j = data.draw(jobs(i))
        if data.draw(st.booleans()):  # many pods: where the bulk path matters
            role = j.roles[0]
            wish = role.topology  # (a role required on one node cannot spread)
            one_node = wish is not None and wish.required and wish.tier is Tier.NODE
            j = Job(
                id=j.id, kind=j.kind, gang=j.gang,
                roles=(Role(replicas=data.draw(st.integers(6, 24)), resources=role.resources,
                            gpu_models=role.gpu_models, topology=role.topology,
                            max_per_node=role.max_per_node,
                            spread=data.draw(st.booleans()) and not one_node),),
            )  # fmt: skip
        snap = state.snapshot()
        with snap.transaction():
            fast = bulk.place(j, snap)
            after_fast = _rows(snap)
        with snap.transaction() as tx:
            slow = one_by_one.place(j, snap)
            assert _rows(snap) == after_fast
            tx.commit()
        assert fast.bindings == slow.bindings
        for b in fast.bindings:  # Binding.trusted made exactly what the validators accept
            assert b == Binding(**attrs.asdict(b, recurse=False))
        assert dict(fast.unplaced) == dict(slow.unplaced)
        check_invariants(snap)
        for b in slow.bindings:
            state.bind(b)
        assert state.snapshot().same_as(state.full_snapshot()) == []


def _rows(snap: Snapshot) -> list[list[object]]:
    """Every row of the snapshot, comparable with ``==``."""
    return [[v.tolist() for v in snap.cols.row(s)] for s in range(snap.num_slots)]


def test_a_gang_of_many_one_gpu_pods_updates_the_snapshot_once_per_node() -> None:
    """The NASA log's mapping: a job of P processors is a gang of P one-GPU pods. First fit
    fills three 8-GPU nodes with 20 pods: three snapshot updates, not twenty."""
    state = ClusterState([node(f"n{i}", gpus=8) for i in range(4)])
    snap = state.snapshot()
    calls: list[int] = []
    allocate = snap.allocate

    def counting(slot: int, *args: int) -> None:
        calls.append(slot)
        allocate(slot, *args)

    snap.allocate = counting  # type: ignore[method-assign]
    job = Job(id="j", gang=True, roles=(Role(replicas=20, resources=Resources(gpus=1)),))
    with snap.transaction():
        res = Placer("firstfit").place(job, snap)
    assert res.ok and len(res.bindings) == 20
    assert [b.node for b in res.bindings] == ["n0"] * 8 + ["n1"] * 8 + ["n2"] * 4
    assert calls == [0, 1, 2]
