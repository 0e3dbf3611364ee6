"""A node's pod capacity (``NodeSpec.max_pods``, the Kubernetes ``allocatable.pods``): every
pod takes one slot whatever it asks for, and no path puts more pods on a node than it has
slots for -- pod by pod, in bulk, in a gang, for fractional GPU sharing, in a preemption
what-if, in a nomination's hold."""

from __future__ import annotations

from collections import Counter

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kant.errors import AllocationConflictError, InvalidNodeError, InvariantError
from kant.model import Binding, NodeSpec, PodId, ReasonCode, Tier
from kant.placement import Placer
from kant.placement.context import PodRequest
from kant.placement.search import why_not
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job, node
from kant.testing.strategies import clusters, jobs


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


# ------------------------------------------------ a gang that no pod capacity could ever hold


def _unsatisfiable(s: Scheduler, jid: str) -> str:
    why = s.step(now=0).pending.get(jid)
    assert why is not None and why.code is ReasonCode.UNSATISFIABLE, why
    assert "max_pods" in why.message, why
    return why.message


def test_a_gang_needing_more_pod_slots_than_its_nodes_will_ever_have_is_unsatisfiable() -> None:
    # two nodes admitting two pods each: a gang of five 1-GPU pods can never run; under
    # strict FIFO it must not block the small job behind it for ever
    s = Scheduler(
        ClusterState([node("n0", max_pods=2), node("n1", max_pods=2)]), policy="strict-fifo"
    )
    s.submit(job("big", gpus=1, replicas=5), now=0)
    s.submit(job("small", gpus=1, submitted_at=1), now=0)
    r = s.step(now=0)
    assert r.pending["big"].code is ReasonCode.UNSATISFIABLE, r.pending["big"]
    assert "max_pods" in r.pending["big"].message and "4" in r.pending["big"].message
    assert "small" in r.placed
    check_invariants(s)


def test_a_gang_that_fits_the_pod_slots_exactly_is_not_called_unsatisfiable() -> None:
    s = Scheduler(ClusterState([node("n0", max_pods=2), node("n1", max_pods=2)]))
    s.submit(job("g", gpus=1, replicas=4), now=0)
    assert "g" in s.step(now=0).placed


def test_pod_slots_count_only_as_far_as_the_nodes_devices_hold_pods() -> None:
    # 8 GPUs and 10 slots per node: 4-GPU pods take two slots' worth of a node at most
    s = Scheduler(ClusterState([node("n0", max_pods=10), node("n1", max_pods=1)]))
    s.submit(job("g", gpus=4, replicas=4), now=0)
    assert "3" in _unsatisfiable(s, "g")


def test_a_cpu_only_gang_needing_more_pod_slots_than_the_cluster_has_is_unsatisfiable() -> None:
    s = Scheduler(ClusterState([node("n0", max_pods=2), node("n1", max_pods=1)]))
    s.submit(job("cpu", gpus=0, cpu_milli=100, replicas=4), now=0)
    _unsatisfiable(s, "cpu")


def test_a_required_same_node_gang_larger_than_any_nodes_pod_capacity_is_unsatisfiable() -> None:
    s = Scheduler(ClusterState([node("n0", max_pods=2), node("n1", max_pods=2)]))
    s.submit(job("g", gpus=1, replicas=3, tier=Tier.NODE, required=True), now=0)
    _unsatisfiable(s, "g")


def test_a_required_leaf_gang_larger_than_any_leafs_pod_slots_is_unsatisfiable() -> None:
    state = ClusterBuilder().leaf("lf0", nodes=2, max_pods=1).leaf("lf1", nodes=2, max_pods=1)
    s = Scheduler(state.build())
    s.submit(job("g", gpus=1, replicas=3, tier=Tier.LEAF, required=True), now=0)
    _unsatisfiable(s, "g")
    s2 = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2, max_pods=1).leaf("lf1", nodes=2, max_pods=1).build()
    )
    s2.submit(job("g", gpus=1, replicas=2, tier=Tier.LEAF, required=True), now=0)
    assert "g" in s2.step(now=0).placed


def test_roles_sharing_nodes_need_their_pod_slots_together() -> None:
    base = job("g", gpus=1, replicas=3)
    worker = base.roles[0]
    ps = attrs.evolve(worker, name="ps", replicas=2)
    s = Scheduler(ClusterState([node("n0", max_pods=2), node("n1", max_pods=2)]))
    s.submit(attrs.evolve(base, roles=(worker, ps)), now=0)
    _unsatisfiable(s, "g")
    fits = attrs.evolve(base, id="h", roles=(attrs.evolve(worker, replicas=2), ps))
    s2 = Scheduler(ClusterState([node("n0", max_pods=2), node("n1", max_pods=2)]))
    s2.submit(fits, now=0)
    assert "h" in s2.step(now=0).placed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_job_called_unsatisfiable_is_one_no_strategy_places_on_the_empty_healthy_cluster(
    data: st.DataObject,
) -> None:
    state = data.draw(clusters(pod_caps=True))
    for spec in list(state.nodes()):
        state.set_node_health(spec.name, True)
        for g in range(spec.gpus):
            state.set_gpu_health(spec.name, g, True)
    j = data.draw(jobs(0, capped=True))
    s = Scheduler(state)
    s.submit(j, now=0)
    why = s.step(now=0).pending.get(j.id)
    if why is None or why.code is not ReasonCode.UNSATISFIABLE:
        return
    for strategy in ("ebinpack", "espread", "binpack", "spread", "topology", "firstfit"):
        assert not Placer(strategy).place(j, state.snapshot()).ok, (strategy, why)


# ------------------------------------------------ a node's pod capacity changed in place


def test_a_lowered_pod_capacity_keeps_the_pods_above_it_and_adds_none() -> None:
    s = Scheduler(ClusterState([node("n0", max_pods=4)]))
    s.submit(job("a", gpus=1, replicas=4, gang=False), now=0)
    assert "a" in s.step(now=0).placed
    assert s.node_max_pods("n0", 2, now=1)
    assert len(s.cluster.pods_on("n0")) == 4  # (nothing is evicted)
    check_invariants(s)
    s.submit(job("b", gpus=1, submitted_at=1), now=1)
    why = s.step(now=1).pending["b"]
    assert why.code is ReasonCode.NO_FIT and "max_pods" in why.message, why
    s.pod_finished(_pod("a", 0), now=2)
    s.pod_finished(_pod("a", 1), now=2)
    assert "b" not in s.step(now=2).placed  # two pods left: the new capacity is full
    s.pod_finished(_pod("a", 2), now=3)
    assert "b" in s.step(now=3).placed
    assert len(s.cluster.pods_on("n0")) == 2
    check_invariants(s)


def test_a_raised_or_removed_pod_capacity_is_seen_by_the_next_placement() -> None:
    s = Scheduler(ClusterState([node("n0", max_pods=1), node("n1", max_pods=1)]))
    s.submit(job("a", gpus=1), now=0)
    assert "a" in s.step(now=0).placed
    s.submit(job("g", gpus=1, replicas=3, submitted_at=1), now=1)
    assert s.step(now=1).pending["g"].code is ReasonCode.UNSATISFIABLE  # 2 slots in all
    assert s.node_max_pods("n0", 3, now=2)
    assert "g" in s.step(now=2).placed  # 2 slots left on n0, 1 on n1
    check_invariants(s)


def test_a_pod_capacity_changed_to_none_lifts_the_limit() -> None:
    s = Scheduler(ClusterState([node("n0", max_pods=1)]))
    s.submit(job("a", gpus=1), now=0)
    assert "a" in s.step(now=0).placed
    assert s.node_max_pods("n0", None, now=1)
    assert s.cluster.pod_capped_nodes == 0
    s.submit(job("b", gpus=1, replicas=3, gang=False, submitted_at=1), now=1)
    assert "b" in s.step(now=1).placed
    assert not s.node_max_pods("n0", None, now=2)  # nothing changed
    check_invariants(s)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, 2**21])
def test_a_bad_pod_capacity_change_is_refused_and_changes_nothing(bad: object) -> None:
    s = Scheduler(ClusterState([node("n0", max_pods=2)]))
    with pytest.raises(InvalidNodeError, match="max_pods"):
        s.node_max_pods("n0", bad, now=0)  # type: ignore[arg-type]
    assert s.cluster.node("n0").max_pods == 2
    check_invariants(s)


def test_why_not_counts_the_slots_of_millions_of_nodes_without_a_limit_without_overflow() -> None:
    # one node with a limit makes placement read pod slots; the candidates without a limit
    # (about 2**40 slots each) number 2**23 + 1 (one node repeated: the sum of their slots
    # overflowed int64 and read as no room at all, blaming max_pods)
    state = ClusterState([node("capped", max_pods=1), node("free")])
    snap = state.snapshot()
    assert snap.pods_capped
    slots = np.full((1 << 23) + 1, state.slot_of("free"), dtype=np.int64)
    why = why_not(snap, slots, PodRequest(gpus=1, milli=0, cpu=0, mem=0, nics=0), 2)
    assert why.code is ReasonCode.NO_FIT and "max_pods" not in why.message, why


def test_a_preemptor_evicts_at_once_what_makes_room_on_a_node_above_its_lowered_capacity() -> None:
    """n1 runs lo's 8 one-GPU pods and its capacity is lowered to 1 pod; n0 runs big. hi (one
    GPU) must preempt. Removing one pod from n1 frees a GPU but no pod slot (7 pods stay above
    the capacity of 1): the what-if counted it as a slot, so each cycle evicted one of lo's
    pods, named as enough, and hi waited 8 cycles. The victims one cycle picks now make room:
    once they are gone, hi starts."""
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(),
        preemption=PreemptionPolicy(min_runtime=0),
    )
    s.submit(job("lo", gpus=1, replicas=8, gang=False), now=0)
    s.submit(job("big", gpus=8, priority=5), now=0)
    s.step(now=1)
    lo_node = s.cluster.binding(_pod("lo")).node
    s.node_max_pods(lo_node, 1, now=2)
    s.submit(job("hi", gpus=1, priority=10), now=2)
    r = s.step(now=3)
    assert r.victims
    for v in r.victims:
        for p in v.pods:
            s.pod_evicted(p, now=3.5)
    check_invariants(s)
    assert s.step(now=4).placed == ("hi",)
    check_invariants(s)


def test_releasing_one_pod_of_a_node_above_its_capacity_frees_no_pod_slot_in_a_snapshot() -> None:
    state = ClusterState([node("n0")])
    for i in range(4):
        state.bind(Binding(pod=_pod("lo", i), node="n0", gpus=(i,)))
    state.set_max_pods("n0", 1)
    snap = state.snapshot()
    slot = snap.slot_of("n0")
    with snap.transaction() as tx:
        snap.release_bindings([state.binding(_pod("lo", 0))])
        assert not Placer("ebinpack").place(job("hi"), snap).ok  # 3 pods, 1 slot: no room
        snap.release_bindings([state.binding(_pod("lo", i)) for i in (1, 2, 3)])
        assert Placer("ebinpack").place(job("hi"), snap).ok  # no pod left: one slot
        tx.rollback()
    assert snap.cols.pod_free[slot] <= 0
    check_invariants(state)


def _lowered() -> Scheduler:
    """lo's 8 one-GPU pods on one node whose capacity is then lowered to 1 pod (its pod_free
    is -7); big fills the other node."""
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(),
        preemption=PreemptionPolicy(min_runtime=0),
    )
    s.submit(job("lo", gpus=1, replicas=8, gang=False), now=0)
    s.submit(job("big", gpus=8, priority=5), now=0)
    s.step(now=1)
    s.node_max_pods(s.cluster.binding(_pod("lo")).node, 1, now=2)
    return s


def test_a_cycle_after_some_victims_above_a_lowered_capacity_went_does_not_crash() -> None:
    """hi's victims are lo's 8 pods; 3 go, and the next cycle holds what is free for hi on a
    node still 4 pods above its capacity (a hold asking no pod slot there): it holds, it does
    not raise AllocationConflictError ("room for -4 more pods, needs 0")."""
    s = _lowered()
    s.submit(job("hi", gpus=1, priority=10), now=2)
    r = s.step(now=3)
    assert r.victims
    pods = [p for v in r.victims for p in v.pods]
    for p in pods[:3]:
        s.pod_evicted(p, now=3.5)
    s.step(now=4)
    check_invariants(s)
    for p in pods[3:]:
        s.pod_evicted(p, now=4.5)
    assert s.step(now=5).placed == ("hi",)
    check_invariants(s)


def test_a_cycle_with_a_nomination_asking_cpu_on_a_node_above_its_lowered_capacity_does_not_crash() -> (
    None
):
    s = _lowered()
    s.submit(job("hi", gpus=1, priority=10, cpu_milli=1000), now=2)
    assert s.step(now=3).victims
    s.step(now=4)
    check_invariants(s)


def test_a_snapshot_allocation_asking_no_pod_slot_fits_on_a_node_above_its_capacity() -> None:
    state = ClusterState([node("n0")])
    for i in range(4):
        state.bind(Binding(pod=_pod("lo", i), node="n0", gpus=(i,)))
    state.set_max_pods("n0", 1)
    snap = state.snapshot()
    slot = snap.slot_of("n0")
    with snap.transaction() as tx:
        snap.allocate(slot, gpu_mask=0b10000, pods=0)  # a hold's share of a free GPU
        assert snap.cols.pod_free[slot] == -3
        with pytest.raises(AllocationConflictError, match="more pods"):
            snap.allocate(slot, gpu_mask=0b100000, pods=1)
        tx.rollback()
    check_invariants(state)


def test_an_easy_reservation_on_a_node_above_its_lowered_capacity_does_not_crash() -> None:
    """wide (8 GPUs, some CPU) waits for the node where lo's 8 pods run above a capacity of 1
    and end first: EASY backfill reserves that node's free CPU for it (a hold asking no pod
    slot), which raised AllocationConflictError ("room for -7 more pods, needs 0")."""
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(),
        policy="easy-backfill",
        preemption=PreemptionPolicy(priority=False, reclaim=False, backfill=False),
    )
    s.submit(job("lo", gpus=1, replicas=8, gang=False, runtime=100), now=0)
    s.submit(job("big", gpus=8, runtime=1000), now=0)
    s.step(now=1)
    lo_node = s.cluster.binding(_pod("lo")).node
    s.node_max_pods(lo_node, 1, now=2)
    s.submit(job("wide", gpus=8, cpu_milli=1000, runtime=10, submitted_at=2), now=2)
    s.submit(job("small", gpus=1, runtime=5, submitted_at=3), now=3)
    r = s.step(now=3)
    assert r.reservation is not None and r.reservation.job == "wide"
    assert r.reservation.start == 101.0
    assert {b.node for b in r.reservation.bindings} == {lo_node}
    check_invariants(s)
    for i in range(8):
        s.pod_finished(_pod("lo", i), now=101)
    assert s.step(now=101).placed == ("wide",)
    assert s.cluster.binding(PodId(job="wide", role="worker", index=0)).node == lo_node
    check_invariants(s)


def _above(pods: int, cap: int) -> tuple[ClusterState, int]:
    state = ClusterState([node("n0")])
    for i in range(pods):
        state.bind(Binding(pod=_pod("lo", i), node="n0", gpus=(i,)))
    state.set_max_pods("n0", cap)
    return state, state.snapshot().slot_of("n0")


def test_a_what_if_puts_back_every_pod_it_released_on_a_node_above_its_capacity() -> None:
    # 2 pods under a capacity of 1: pod_free -1; both released (1), both put back: -1 again
    # (the second restore starts from pod_free 0, and is legitimate)
    state, slot = _above(2, 1)
    snap = state.snapshot()
    with snap.transaction() as tx:
        snap.release_bindings([state.binding(_pod("lo", i)) for i in (0, 1)])
        assert snap.cols.pod_free[slot] == 1
        for i in (0, 1):
            snap.allocate(slot, 1 << i, back=True)
        assert snap.cols.pod_free[slot] == -1
        check_invariants(snap)
        tx.rollback()


@pytest.mark.parametrize(("pods", "cap"), [(2, 1), (2, 2), (4, 2)])
def test_a_restore_never_counts_more_pods_than_the_capacity_or_the_pods_running_there(
    pods: int, cap: int
) -> None:
    # every pod released, a new pod placed in one of the freed slots: putting every pod back
    # would count pods + 1 on the node, above both its capacity and the pods that run there
    state, slot = _above(pods, cap)
    snap = state.snapshot()
    with snap.transaction() as tx:
        snap.release_bindings([state.binding(_pod("lo", i)) for i in range(pods)])
        snap.allocate(slot, 1 << 7)  # the new pod
        for i in range(pods - 1):  # (all but one back: pods in all, as many as run there)
            snap.allocate(slot, 1 << i, back=True)
        before = snap.cols.usage(slot)
        with pytest.raises(AllocationConflictError, match="more pods"):
            snap.allocate(slot, 1 << (pods - 1), back=True)
        assert snap.cols.usage(slot) == before
        tx.rollback()
    check_invariants(state)


def test_a_restore_on_a_snapshot_not_refreshed_since_a_pod_ended_puts_back_what_it_released() -> (
    None
):
    # the snapshot counts 2 pods on a node of capacity 1 (pod_free -1); one ends in the truth
    # (its pod_free 0) before the next refresh. A what-if on the snapshot releases both and
    # puts both back: it returns to the snapshot's own count, whatever the truth is now
    state, slot = _above(2, 1)
    snap = state.snapshot()
    bs = [state.binding(_pod("lo", i)) for i in (0, 1)]
    state.release(_pod("lo", 1))
    with snap.transaction() as tx:
        snap.release_bindings(bs)
        for i in (0, 1):
            snap.allocate(slot, 1 << i, back=True)
        assert snap.cols.pod_free[slot] == -1
        with pytest.raises(AllocationConflictError, match="more pods"):
            snap.allocate(slot, 1 << 2, back=True)  # (one more than it counted)
        tx.rollback()
    assert state.snapshot() is snap
    check_invariants(snap)


def test_a_restore_in_a_nested_what_if_takes_its_floor_from_the_outermost_one() -> None:
    # the outer what-if releases both pods, an inner one (committed into it) puts one back
    # and releases it again: the outer's restores still go back to the snapshot's -1
    state, slot = _above(2, 1)
    snap = state.snapshot()
    with snap.transaction() as tx:
        snap.release_bindings([state.binding(_pod("lo", i)) for i in (0, 1)])
        with snap.transaction() as inner:
            snap.allocate(slot, 1 << 0, back=True)
            snap.release(slot, 1 << 0)
            inner.commit()
        with snap.transaction():  # (a frame that holds the slot first at pod_free 1)
            for i in (0, 1):
                snap.allocate(slot, 1 << i, back=True)
            assert snap.cols.pod_free[slot] == -1
        tx.rollback()
    check_invariants(snap)


def test_a_restore_on_a_row_no_open_what_if_changed_goes_no_lower_than_zero() -> None:
    state, slot = _above(0, 1)
    snap = state.snapshot()
    with snap.transaction() as tx:
        snap.allocate(slot, 1 << 0, back=True)
        with pytest.raises(AllocationConflictError, match="more pods"):
            snap.allocate(slot, 1 << 1, back=True)
        tx.rollback()


def test_the_snapshot_invariants_catch_a_pod_count_that_is_not_the_truths() -> None:
    state, slot = _above(4, 1)
    snap = state.snapshot()
    check_invariants(snap)
    snap.cols.pod_free[slot] = 0  # as if the 3 pods above the capacity were gone
    with pytest.raises(InvariantError, match="the truth's is -3"):
        check_invariants(snap)
    snap = state.full_snapshot()
    with snap.transaction() as tx:  # a what-if's own row may count fewer pods, not more
        snap.release_bindings([state.binding(_pod("lo", 0))])
        check_invariants(snap)
        snap.cols.pod_free[slot] = -4
        with pytest.raises(InvariantError, match="below the truth's -3"):
            check_invariants(snap)
        tx.rollback()
