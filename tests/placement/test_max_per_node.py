"""A role's ``max_per_node``: a hard cap on its pods per node (the DLRM trace's
``max_instance_per_node``), honoured everywhere the Placer picks nodes."""

from __future__ import annotations

from collections import Counter

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from kant import Scheduler
from kant.errors import InvalidJobError
from kant.model import Binding, PodId, ReasonCode, Role, Tier, TopologyWish
from kant.placement import Placer
from kant.state import ClusterState
from kant.testing import ClusterBuilder, job
from kant.testing.strategies import clusters, jobs


def _per_node(bindings: tuple[Binding, ...] | list[Binding]) -> Counter[str]:
    return Counter(b.node for b in bindings)


def test_a_service_capped_at_two_per_node_never_puts_a_third_replica_on_one_node() -> None:
    state = ClusterBuilder().leaf("lf0", nodes=3).build()
    svc = job("svc", gpus=1, replicas=5, gang=False, kind="inference", max_per_node=2)
    res = Placer("ebinpack").place(svc, state.snapshot())
    assert res.ok
    assert sorted(_per_node(res.bindings).values()) == [1, 2, 2]
    # without the cap, E-Binpack packs all five replicas on one node
    free = job("free", gpus=1, replicas=5, gang=False, kind="inference")
    assert len(_per_node(Placer("ebinpack").place(free, state.snapshot()).bindings)) == 1


def test_a_capped_gang_takes_exactly_the_nodes_its_cap_needs_inside_one_leaf() -> None:
    state = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=4).build()
    res = Placer("ebinpack").place(
        job("g", gpus=2, replicas=6, max_per_node=2, tier=Tier.LEAF), state.snapshot()
    )
    assert res.ok
    counts = _per_node(res.bindings)
    assert sorted(counts.values()) == [2, 2, 2]
    assert {state.node(n).leaf for n in counts} == {"lf1"}  # lf0's 2 nodes hold only 4


def test_replicas_already_running_count_against_the_cap() -> None:
    state = ClusterBuilder().leaf("lf0", nodes=2).build()
    svc = job("svc", gpus=1, replicas=4, gang=False, kind="inference", max_per_node=2)
    pods = list(svc.pods())
    placer = Placer("ebinpack")
    first = placer.place(svc, state.snapshot(), pods=pods[:2])
    for b in first.bindings:
        state.bind(b)
    assert len(_per_node(first.bindings)) == 1  # two replicas packed on one node
    (node,) = _per_node(first.bindings)
    later = placer.place(svc, state.snapshot())  # the two replicas not yet running
    assert later.ok and set(_per_node(later.bindings)) == {"lf0-n0", "lf0-n1"} - {node}


def test_pods_placed_earlier_on_the_same_snapshot_count_against_the_cap() -> None:
    # the cycle places a job's pods in two turns on one snapshot (a borrowed rest): the
    # second counts the first turn's pods, which the cluster state does not hold yet
    state = ClusterBuilder().leaf("lf0", nodes=2).build()
    svc = job("svc", gpus=1, replicas=3, gang=False, max_per_node=1)
    pods = list(svc.pods())
    placer = Placer("ebinpack")
    snap = state.snapshot()
    with snap.transaction() as tx:
        first = placer.place_trusted(svc, snap, pods[:1])
        tx.commit()
    (node,) = _per_node(first.bindings)
    rest = placer.place_trusted(svc, snap, pods[1:], earlier=first.bindings)
    assert set(_per_node(rest.bindings)) == {"lf0-n0", "lf0-n1"} - {node}
    assert list(rest.unplaced) == [pods[2]]  # (two nodes, one pod each)
    # a required wish: the rest stays in the domain of the first turn's pods
    two = ClusterBuilder().leaf("lf0", nodes=1).leaf("lf1", nodes=1).build()
    leafy = job("leafy", gpus=6, replicas=2, gang=False, tier=Tier.LEAF, required=True)
    snap = two.snapshot()
    with snap.transaction() as tx:
        first = placer.place_trusted(leafy, snap, list(leafy.pods())[:1])
        tx.commit()
    rest = placer.place_trusted(leafy, snap, list(leafy.pods())[1:], earlier=first.bindings)
    assert not rest.bindings and rest.unplaced  # (its leaf has 2 GPUs left; the other 8)
    alone = placer.place_trusted(leafy, snap, list(leafy.pods())[1:])
    assert alone.bindings  # (not told of the first pod, it starts a domain of its own)


def test_a_role_with_no_node_left_under_its_cap_is_refused_naming_the_cap() -> None:
    state = ClusterBuilder().leaf("lf0", nodes=2).build()
    res = Placer().place(job("g", gpus=1, replicas=3, max_per_node=1), state.snapshot())
    assert not res.ok
    reason = res.reason
    assert reason is not None and reason.code is ReasonCode.NO_FIT
    assert "max_per_node" in reason.message
    pod = Placer().place(job("s", gpus=1, replicas=3, gang=False, max_per_node=1), state.snapshot())
    assert len(pod.bindings) == 2 and len(pod.unplaced) == 1
    (why,) = pod.unplaced.values()
    assert why.code is ReasonCode.NO_FIT and "max_per_node" in why.message


def test_the_scheduler_counts_running_replicas_when_a_service_grows_over_several_cycles() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=3).build())
    s.submit(job("big", gpus=8, replicas=2), now=0)
    assert len(s.step(now=1).bindings) == 2  # two of the three nodes are full
    s.submit(job("svc", gpus=1, replicas=6, gang=False, kind="inference", max_per_node=2), now=2)
    assert len(s.step(now=3).bindings) == 2  # the cap stops it at 2 on the free node
    for p in s.cluster.job_pods("big"):
        s.pod_finished(p, now=4)
    s.step(now=5)
    on = Counter(s.cluster.binding(p).node for p in s.cluster.job_pods("svc"))
    assert sorted(on.values()) == [2, 2, 2]
    s.check_invariants()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", 2**63, (1 << 17) + 1])
def test_a_max_per_node_that_is_not_a_positive_int_is_refused(bad: object) -> None:
    with pytest.raises(InvalidJobError, match="max_per_node"):
        Role(max_per_node=bad)  # type: ignore[arg-type]


def test_a_cap_below_a_required_single_node_role_is_refused() -> None:
    wish = TopologyWish(tier=Tier.NODE, required=True)
    with pytest.raises(InvalidJobError, match=r"max_per_node.*one node for its 3 replicas"):
        Role(replicas=3, topology=wish, max_per_node=2)
    assert Role(replicas=2, topology=wish, max_per_node=2).max_per_node == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=clusters(), data=st.data())
def test_no_node_ever_holds_more_of_a_role_than_its_cap(
    state: ClusterState, data: st.DataObject
) -> None:
    work = [data.draw(jobs(i, capped=True)) for i in range(data.draw(st.integers(1, 5)))]
    strategy = data.draw(st.sampled_from(["ebinpack", "espread", "spread", "binpack"]))
    snap = state.snapshot()
    placer = Placer(strategy)
    for j in work:
        res = placer.place(j, snap)
        cap = j.roles[0].max_per_node
        assert cap is not None
        assert all(n <= cap for n in _per_node(res.bindings).values())
    snap.check_invariants()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=clusters(), data=st.data())
def test_a_cap_no_smaller_than_the_replicas_changes_no_placement(
    state: ClusterState, data: st.DataObject
) -> None:
    import attrs

    work = [data.draw(jobs(i)) for i in range(data.draw(st.integers(1, 5)))]
    loose = [
        attrs.evolve(j, roles=(attrs.evolve(j.roles[0], max_per_node=j.roles[0].replicas),))
        for j in work
    ]

    def run(js: list) -> list[tuple[Binding, ...]]:  # type: ignore[type-arg]
        snap = state.snapshot()
        placer = Placer()
        return [placer.place(j, snap).bindings for j in js]

    assert run(work) == run(loose)


def test_pods_of_another_role_of_the_job_do_not_count_against_the_cap() -> None:
    from kant.model import Job, Resources

    state = ClusterBuilder().leaf("lf0", nodes=1).build()
    res = Resources(gpus=1)
    j = Job(
        id="pd",
        kind="inference",
        gang=False,
        roles=(
            Role(name="prefill", replicas=3, resources=res),
            Role(name="decode", replicas=2, resources=res, max_per_node=2),
        ),
    )
    out = Placer().place(j, state.snapshot())
    assert out.ok and len(_per_node(out.bindings)) == 1
    assert PodId(job="pd", role="decode", index=1) in {b.pod for b in out.bindings}


def test_a_gang_that_fails_on_its_cap_does_not_make_the_same_gang_without_a_cap_fail() -> None:
    # one 8-GPU node and no quotas: a 2-pod gang capped at one pod per node can never fit,
    # the same gang without the cap fits; a cycle's memo of failed shapes must tell them apart
    state = ClusterBuilder().leaf("lf0", nodes=1).build()
    sched = Scheduler(state)
    sched.submit(job("capped", gpus=1, replicas=2, max_per_node=1, submitted_at=1.0), now=1.0)
    sched.submit(job("free", gpus=1, replicas=2, submitted_at=2.0), now=2.0)
    res = sched.step(now=3.0)
    assert {b.pod.job for b in res.bindings} == {"free"}
