"""A node's pod capacity (``NodeSpec.max_pods``, the Kubernetes ``allocatable.pods``): every
pod takes one slot whatever it asks for, and no path puts more pods on a node than it has
slots for -- pod by pod, in bulk, in a gang, for fractional GPU sharing, in a preemption
what-if, in a nomination's hold."""

from __future__ import annotations

from collections import Counter

import pytest

from kant.errors import AllocationConflictError, InvalidNodeError
from kant.model import Binding, NodeSpec, PodId, ReasonCode
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job, node


def _per_node(bindings: tuple[Binding, ...] | list[Binding]) -> Counter[str]:
    return Counter(b.node for b in bindings)


def _pod(jid: str, i: int = 0) -> PodId:
    return PodId(job=jid, role="worker", index=i)


def test_fractional_pods_stop_at_the_nodes_pod_capacity_and_say_so() -> None:
    # 0.1-GPU inference pods: 80 fit one 8-GPU node's GPUs, its kubelet admits 4
    state = ClusterState([node("n0", max_pods=4)])
    svc = job("svc", gpus=0, gpu_milli=100, replicas=10, gang=False, kind="inference")
    res = Placer("ebinpack").place(svc, state.snapshot())
    assert len(res.bindings) == 4 and len(res.unplaced) == 6
    why = next(iter(res.unplaced.values()))
    assert why.code is ReasonCode.NO_FIT and "max_pods" in why.message
    state.bind_many(res.bindings)
    check_invariants(state)


def test_a_gang_spreads_over_nodes_when_one_node_has_too_few_pod_slots() -> None:
    # E-Binpack would pack the four 1-GPU pods on one node; each node admits two pods
    state = ClusterBuilder().leaf("lf0", nodes=2, max_pods=2).build()
    for bulk in (True, False):
        res = Placer("ebinpack", bulk=bulk).place(job("g", gpus=1, replicas=4), state.snapshot())
        assert res.ok
        assert sorted(_per_node(res.bindings).values()) == [2, 2]


def test_a_gang_larger_than_the_pod_slots_left_is_refused_whole_naming_max_pods() -> None:
    state = ClusterBuilder().leaf("lf0", nodes=2, max_pods=2).build()
    res = Placer("ebinpack").place(job("g", gpus=1, replicas=5), state.snapshot())
    assert not res.ok and res.bindings == ()
    assert res.reason is not None and res.reason.code is ReasonCode.NO_FIT
    assert "max_pods" in res.reason.message


def test_pods_of_other_jobs_on_the_node_take_its_slots_even_cpu_only_ones() -> None:
    state = ClusterState([node("n0", max_pods=2), node("n1")])
    # a DaemonSet-like pod asking for no GPU holds one of n0's two slots
    state.bind(Binding(pod=_pod("ds"), node="n0", cpu_milli=100))
    res = Placer("ebinpack").place(
        job("svc", gpus=1, replicas=3, gang=False, kind="inference"), state.snapshot()
    )
    assert _per_node(res.bindings) == {"n0": 1, "n1": 2}


def test_a_node_without_a_limit_takes_as_many_pods_as_its_devices_allow() -> None:
    state = ClusterState([node("n0")])
    svc = job("svc", gpus=0, gpu_milli=100, replicas=80, gang=False, kind="inference")
    res = Placer("ebinpack").place(svc, state.snapshot())
    assert len(res.bindings) == 80 and not res.unplaced


def test_the_truth_refuses_a_binding_past_the_pod_capacity_and_changes_nothing() -> None:
    state = ClusterState([node("n0", max_pods=1)])
    state.bind(Binding(pod=_pod("a"), node="n0", gpus=(0,)))
    before = state.full_snapshot()
    with pytest.raises(AllocationConflictError, match="max_pods"):
        state.bind(Binding(pod=_pod("b"), node="n0", gpus=(1,)))
    with pytest.raises(AllocationConflictError, match="max_pods"):
        state.bind_many([Binding(pod=_pod("c", i), node="n0", gpus=(2 + i,)) for i in range(2)])
    with pytest.raises(AllocationConflictError, match="max_pods"):  # (fractional: general path)
        state.bind_many([Binding(pod=_pod("d"), node="n0", gpus=(3,), gpu_milli=500)])
    assert state.full_snapshot().same_as(before) == []
    assert state.pods_on("n0") == (_pod("a"),)
    check_invariants(state)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "110", 1 << 30])
def test_a_pod_capacity_that_is_not_a_count_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidNodeError, match="max_pods"):
        NodeSpec(name="n0", max_pods=bad)  # type: ignore[arg-type]


def test_a_node_with_no_pod_slots_takes_no_pod() -> None:
    state = ClusterState([node("n0", max_pods=0)])
    res = Placer().place(job("a", gpus=1), state.snapshot())
    assert not res.ok


def test_preemption_counts_the_pod_slot_a_victim_frees_and_holds_it_for_the_preemptor() -> None:
    # n0 admits two pods and runs two low-priority 1-GPU pods: six GPUs are free, no slot
    s = Scheduler(
        ClusterState([node("n0", max_pods=2)]),
        placer=Placer("ebinpack"),
        preemption=PreemptionPolicy(min_runtime=0.0),
    )
    s.submit(job("lo", gpus=1, replicas=2, gang=False, priority=0), now=0)
    assert len(s.step(now=0).bindings) == 2
    s.submit(job("hi", gpus=1, priority=5, submitted_at=1), now=1)
    r = s.step(now=1)
    assert [v.job for v in r.victims] == ["lo"] and len(r.victims[0].pods) == 1
    assert r.pending["hi"].code is ReasonCode.PREEMPTING
    for v in r.victims:
        for p in v.pods:
            s.pod_evicted(p, now=2)
    # a pod of equal priority arriving meanwhile does not take the slot held for "hi"
    s.submit(job("other", gpus=1, priority=5, submitted_at=2), now=2)
    r = s.step(now=3)
    assert "hi" in r.placed and "other" not in r.placed
    assert len(s.cluster.pods_on("n0")) == 2
    check_invariants(s)


def test_a_job_whose_only_nodes_admit_no_pod_is_unsatisfiable_and_says_why() -> None:
    s = Scheduler(ClusterState([node("n0", max_pods=0)]))
    s.submit(job("a", gpus=1), now=0)
    why = s.step(now=0).pending["a"]
    assert why.code is ReasonCode.UNSATISFIABLE and "max_pods" in why.message, why
