"""Required pod affinity and anti-affinity: a role's pods go only where the pods its affinity
terms select run in the same domain, never where the pods its anti-affinity terms select
run, and never where a running pod's anti-affinity term selects them. Pods placed earlier in
the same cycle count; pods rolled back or gone do not (docs/placement.md, "Pod affinity")."""

from __future__ import annotations

from typing import Any

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from kant.errors import InvalidJobError
from kant.model import (
    HOSTNAME_LABEL,
    Binding,
    Job,
    NodeRequirement,
    PodAffinityTerm,
    PodId,
    ReasonCode,
    Resources,
    Role,
    Tier,
    topology_value,
)
from kant.preemption import PreemptionPolicy
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job


def _sel(**labels: str) -> tuple[NodeRequirement, ...]:
    return tuple(NodeRequirement(key=k, operator="In", values=v) for k, v in labels.items())


def _term(key: str = HOSTNAME_LABEL, **labels: str) -> PodAffinityTerm:
    return PodAffinityTerm(selector=_sel(**labels), topology_key=key)


def _cluster(zones: list[str | None], leaves: int = 1) -> ClusterState:
    """One node per entry of ``zones`` (``lf<k>-n<i>``), labelled ``zone`` with it (None:
    no zone label), spread evenly over ``leaves`` leaves."""
    b = ClusterBuilder()
    per = len(zones) // leaves
    for k in range(leaves):
        b.leaf(f"lf{k}", nodes=per)
    specs = b.specs()
    return ClusterState(
        attrs.evolve(s, labels={} if z is None else {"zone": z})
        for s, z in zip(specs, zones, strict=True)
    )


def _run(state: ClusterState, *jobs: Job, now: float = 1, s: Scheduler | None = None) -> Scheduler:
    s = s or Scheduler(state)
    for j in jobs:
        s.submit(j, now=now - 1)
    s.step(now=now)
    check_invariants(s)
    return s


def _nodes(s: Scheduler, job_id: str) -> list[str]:
    return sorted(b.node for b in s.status(job_id).bindings)


def _zone(s: Scheduler, job_id: str) -> set[str | None]:
    return {s.cluster.node(n).labels.get("zone") for n in _nodes(s, job_id)}


def _on(job_id: str, node: str, *, role: str = "worker", gpu: int = 0) -> Binding:
    """A one-GPU binding of pod 0 of ``role`` of ``job_id`` on ``node`` (bound or restored
    directly, as an orchestrator does)."""
    return Binding(pod=PodId(job=job_id, role=role, index=0), node=node, gpus=(gpu,))


# --------------------------------------------------------------------------- anti-affinity


def test_replicas_submitted_together_with_hostname_anti_affinity_take_a_node_each() -> None:
    # E-Binpack would put all four 1-GPU pods on one node; each replica is its own job and
    # they are placed in one cycle, so each must see the ones placed before it
    s = _run(
        _cluster(["a", "a", "b", "b"]),
        *(job(f"w{i}", gpus=1, labels={"app": "web"}, anti_affinity=[_term(app="web")])
          for i in range(4)),
    )  # fmt: skip
    assert sorted(n for i in range(4) for n in _nodes(s, f"w{i}")) == [
        "lf0-n0", "lf0-n1", "lf0-n2", "lf0-n3"
    ]  # fmt: skip


def test_a_fifth_replica_on_four_nodes_waits_and_its_reason_names_pod_affinity() -> None:
    s = _run(
        _cluster(["a", "a", "b", "b"]),
        *(job(f"w{i}", gpus=1, labels={"app": "web"}, anti_affinity=[_term(app="web")])
          for i in range(5)),
    )  # fmt: skip
    st_ = s.status("w4")
    assert not st_.bindings
    assert st_.reason is not None and st_.reason.code is ReasonCode.NO_FIT
    assert "pod_affinity" in st_.reason.message


def test_anti_affinity_on_a_zone_keeps_the_second_pod_out_of_the_whole_zone() -> None:
    anti = _term("zone", app="db")
    s = _run(
        _cluster(["a", "a", "b", "b"]),
        job("db0", gpus=1, labels={"app": "db"}, anti_affinity=[anti]),
        job("db1", gpus=1, labels={"app": "db"}, anti_affinity=[anti]),
        job("db2", gpus=1, labels={"app": "db"}, anti_affinity=[anti]),
    )
    assert _zone(s, "db0") | _zone(s, "db1") == {"a", "b"}
    assert not s.status("db2").bindings  # both zones hold a db pod


def test_a_pod_without_terms_keeps_out_of_the_domain_of_a_running_pod_that_rejects_it() -> None:
    # the rule is symmetric: "db" says no other db in its zone; "plain" has no terms but its
    # labels are selected, so it goes to the other zone (Kubernetes' existing-pod rule)
    state = _cluster(["a", "a", "b", "b"])
    s = _run(
        state, job("db", gpus=1, labels={"app": "db"}, anti_affinity=[_term("zone", app="db")])
    )
    assert _zone(s, "db") == {"a"}
    s = _run(state, job("plain", gpus=1, labels={"app": "db"}), now=2, s=s)
    assert _zone(s, "plain") == {"b"}
    s = _run(state, job("other", gpus=1, labels={"app": "web"}), now=3, s=s)
    assert _zone(s, "other") == {"a"}  # not selected: E-Binpack packs it next to db


def test_a_node_without_the_topology_key_is_no_domain_for_anti_affinity() -> None:
    anti = _term("zone", app="db")
    s = _run(
        _cluster(["a", None, None]),
        *(job(f"db{i}", gpus=1, labels={"app": "db"}, anti_affinity=[anti]) for i in range(3)),
    )
    zones = [z for i in range(3) for z in _zone(s, f"db{i}")]
    assert sorted(zones, key=str) == [None, None, "a"]  # (the two without a zone may share)


def test_a_gang_with_hostname_anti_affinity_to_itself_takes_the_leaf_with_enough_nodes() -> None:
    # lf0 has 2 free nodes and lf1 has 4: three pods, one per node, fit only in lf1 (its
    # domains are counted one pod per node, not 8)
    gang = job("g", replicas=3, gpus=1, tier=Tier.LEAF, required=True, labels={"app": "g"},
               anti_affinity=[_term(app="g")])  # fmt: skip
    s = _run(_cluster(["a"] * 2 + ["b"] * 4, leaves=1), gang)
    assert len(set(_nodes(s, "g"))) == 3
    state = ClusterState(
        [
            *ClusterBuilder().leaf("lf0", nodes=2).specs(),
            *ClusterBuilder().leaf("lf1", nodes=4).specs(),
        ]
    )
    s = _run(state, gang)
    assert len(_nodes(s, "g")) == 3 and {n.split("-")[0] for n in _nodes(s, "g")} == {"lf1"}


def test_a_gang_with_zone_anti_affinity_to_itself_puts_one_pod_in_each_zone() -> None:
    gang = job("g", replicas=2, gpus=1, labels={"app": "g"}, anti_affinity=[_term("zone", app="g")])
    s = _run(_cluster(["a", "a", "b", "b"]), gang)
    assert _zone(s, "g") == {"a", "b"}
    s = _run(_cluster(["a", "a", "a", "a"]), gang)
    assert not s.status("g").bindings  # one zone: the gang cannot be placed


# --------------------------------------------------------------------------- affinity


def test_a_pod_with_affinity_goes_to_the_zone_of_the_pods_it_selects_or_waits() -> None:
    state = _cluster(["a", "a", "b", "b"])
    s = _run(state, job("fill", gpus=8), job("db", gpus=8, labels={"app": "db"}))
    assert _zone(s, "db") == {"a"}  # n0 then n1 (E-Binpack: lowest slot)
    # zone a is full: the cache pod waits rather than go to zone b
    s = _run(state, job("cache", gpus=1, affinity=[_term("zone", app="db")]), now=2, s=s)
    assert not s.status("cache").bindings
    reason = s.status("cache").reason
    assert reason is not None and "pod_affinity" in reason.message
    s.pod_finished(s.status("fill").bindings[0].pod, now=3)
    s.step(now=4)
    assert _nodes(s, "cache") == ["lf0-n0"]


def test_a_pod_with_affinity_to_pods_that_do_not_run_waits() -> None:
    s = _run(_cluster(["a", "b"]), job("cache", gpus=1, affinity=[_term("zone", app="db")]))
    assert not s.status("cache").bindings


def test_the_first_pod_of_a_self_affine_group_goes_anywhere_and_the_rest_follow_it() -> None:
    aff = _term("zone", app="etl")
    state = _cluster(["a", "a", "b", "b"])
    s = _run(state, job("fill", gpus=4))  # n0 half full: E-Binpack puts the first etl there
    s = _run(
        state,
        *(job(f"e{i}", gpus=4, labels={"app": "etl"}, affinity=[aff]) for i in range(4)),
        now=2, s=s,
    )  # fmt: skip
    placed = [i for i in range(4) if s.status(f"e{i}").bindings]
    assert placed == [0, 1, 2]  # zone a holds 12 more GPUs: three of the four
    assert set().union(*(_zone(s, f"e{i}") for i in placed)) == {"a"}


def test_a_node_without_the_topology_key_is_never_a_domain_for_affinity() -> None:
    state = _cluster([None, "a"])
    s = _run(state, job("db", gpus=1, labels={"app": "db"}))
    assert _nodes(s, "db") == ["lf0-n0"]
    # db runs on the node without a zone: no zone holds it, so the cache pod cannot go
    s = _run(state, job("cache", gpus=1, affinity=[_term("zone", app="db")]), now=2, s=s)
    assert not s.status("cache").bindings


def test_hostname_is_the_node_name_when_a_node_has_no_such_label() -> None:
    state = _cluster(["a", "a"])
    assert topology_value(state.node("lf0-n1"), HOSTNAME_LABEL) == "lf0-n1"
    s = _run(state, job("fill", gpus=4), job("db", gpus=1, labels={"app": "db"}))
    s = _run(state, job("side", gpus=1, affinity=[_term(app="db")]), now=2, s=s)
    assert _nodes(s, "side") == _nodes(s, "db")


def test_with_two_affinity_terms_only_a_pod_both_select_counts() -> None:
    # Kubernetes counts the pods that match all the terms: "a" and "b" each meet one
    state = _cluster(["z", "z"])
    s = _run(state, job("a", gpus=1, labels={"app": "a"}), job("b", gpus=1, labels={"tier": "b"}))
    assert _nodes(s, "a") == _nodes(s, "b") == ["lf0-n0"]
    both = [_term(app="a"), _term(tier="b")]
    s = _run(state, job("x", gpus=1, labels={"other": "1"}, affinity=both), now=2, s=s)
    assert not s.status("x").bindings


def test_a_pod_selected_by_one_term_of_two_leaves_a_self_affine_pod_the_first_of_its_kind() -> None:
    state = _cluster(["z", "z"])
    s = _run(state, job("a", gpus=1, labels={"app": "a"}))
    both = [_term(app="a"), _term(tier="b")]
    s = _run(state, job("x", gpus=1, labels={"app": "a", "tier": "b"}, affinity=both), now=2, s=s)
    assert len(_nodes(s, "x")) == 1


def test_a_matching_pod_on_a_node_without_the_key_does_not_count_for_affinity() -> None:
    state = _cluster([None, "a"])
    s = _run(state, job("e0", gpus=8, labels={"app": "etl"}))
    assert _nodes(s, "e0") == ["lf0-n0"]
    s = _run(state, job("e1", gpus=1, labels={"app": "etl"}, affinity=[_term("zone", app="etl")]),
             now=2, s=s)  # fmt: skip
    assert _nodes(s, "e1") == ["lf0-n1"]  # the first of its kind in a zone


def test_a_gangs_role_with_affinity_to_another_role_is_placed_after_it_whatever_their_order() -> (
    None
):
    launcher = Role(name="a", resources=Resources(gpus=1), labels={"app": "launcher"})
    workers = Role(name="b", replicas=2, resources=Resources(gpus=1), labels={"app": "worker"},
                   pod_affinity=(_term("zone", app="launcher"),))  # fmt: skip
    for roles in ((launcher, workers), (workers, launcher)):
        s = _run(_cluster(["x", "x", "y", "y"]), Job(id="g", roles=roles))
        assert len(_nodes(s, "g")) == 3
        assert _zone(s, "g") == {"x"}


def test_a_gangs_one_pod_per_zone_goes_to_a_node_the_other_filters_keep() -> None:
    # zone a is n0 and n1, but n0 runs "blk", which the gang may not share a node with: the
    # gang's pod for zone a takes n1 (its room is cut to one per zone after the filters)
    state = _cluster(["a", "a", "b", "b"])
    s = _run(state, job("blk", gpus=1, labels={"app": "blk"}))
    gang = job("g", replicas=2, gpus=1, gang=True, labels={"app": "g"},
               anti_affinity=[_term("zone", app="g"), _term(app="blk")])  # fmt: skip
    s = _run(state, gang, now=2, s=s)
    assert len(_nodes(s, "g")) == 2 and "lf0-n0" not in _nodes(s, "g")
    assert _zone(s, "g") == {"a", "b"}


# --------------------------------------------------------------------------- what counts


def test_pods_of_a_gang_rolled_back_in_the_cycle_do_not_count() -> None:
    # the gang's first role lands, its second cannot: the placement is undone, and the lone
    # pod after it in the same cycle may take the node the first role had taken
    gang = Job(
        id="g",
        roles=(
            Role(name="a", resources=Resources(gpus=1), labels={"app": "a"}),
            Role(name="b", replicas=3, resources=Resources(gpus=8)),
        ),
    )
    s = _run(
        _cluster(["a", "a"]),
        gang,
        job("x", gpus=1, anti_affinity=[_term(app="a")]),
    )
    assert not s.status("g").bindings
    assert _nodes(s, "x") == ["lf0-n0"]


def test_a_pod_that_finished_no_longer_keeps_others_away() -> None:
    state = _cluster(["a"])
    s = _run(state, job("db", gpus=1, labels={"app": "db"}, anti_affinity=[_term(app="db")]))
    s = _run(state, job("db2", gpus=1, labels={"app": "db"}), now=2, s=s)
    assert not s.status("db2").bindings
    s.pod_finished(s.status("db").bindings[0].pod, now=3)
    s.step(now=4)
    assert _nodes(s, "db2") == ["lf0-n0"]


def test_a_job_described_after_a_quiet_cycle_is_seen_by_the_next() -> None:
    # the orchestrator binds "db" itself, then describes it: the next cycle must not reuse
    # the quiet cycle's answer
    state = _cluster(["a", "b"])
    s = Scheduler(state)
    state.bind(_on("db", "lf0-n1"))
    s.submit(job("cache", gpus=1, affinity=[_term("zone", app="db")]), now=0)
    s.step(now=1)
    assert not s.status("cache").bindings
    state.describe(job("db", gpus=1, labels={"app": "db"}))
    s.step(now=5)
    assert _nodes(s, "cache") == ["lf0-n1"]


def test_describing_a_job_that_does_not_own_its_ids_running_pods_is_refused() -> None:
    from kant.errors import DuplicateError

    state = _cluster(["a", "a"])
    s = Scheduler(state)
    state.bind(_on("x", "lf0-n0", role="w"))
    with pytest.raises(InvalidJobError, match="x/w/0"):
        state.describe(job("x", gpus=1, labels={"app": "w"}))  # (its role is "worker")
    assert state.described("x") is None
    # a job of that id is not queued over pods bound directly: restore takes such a job in
    with pytest.raises(DuplicateError, match="bound directly"):
        s.submit(job("x", gpus=1, labels={"app": "v"}), now=0)
    # the scheduler goes on: a job with an anti-affinity term is placed
    _run(state, job("z", gpus=1, anti_affinity=[_term(app="q")]), s=s)
    assert _nodes(s, "z")


def test_a_job_that_cannot_be_described_once_bound_is_stale_and_leaves_nothing_bound() -> None:
    state = _cluster(["a", "a"])
    s = Scheduler(state)
    s.submit(job("x", gpus=1, labels={"app": "w"}), now=0)
    r = s.schedule(now=1)
    rogue = _on("x", "lf0-n1", role="other", gpu=7)  # (bound directly under the job's id)
    state.bind(rogue)
    assert s.apply(r, now=2).stale == ("x",)
    assert state.job_pods("x") == (rogue.pod,) and state.described("x") is None
    assert s.status("x").phase.value == "pending" and not s.status("x").bindings


def test_binding_a_pod_its_described_job_does_not_have_is_refused() -> None:
    state = _cluster(["a"])
    state.describe(job("x", gpus=1, labels={"app": "w"}))
    for bind in (state.bind, lambda b: state.bind_many([b])):
        for pod in (PodId(job="x", role="w", index=0), PodId(job="x", role="worker", index=1)):
            with pytest.raises(InvalidJobError, match=str(pod)):
                bind(Binding(pod=pod, node="lf0-n0", gpus=(0,)))
    assert not state.runs_job("x")
    state.bind(_on("x", "lf0-n0"))
    assert state.runs_job("x")


def test_pods_bound_by_restore_count_for_anti_affinity() -> None:
    state = _cluster(["a", "a"])
    s = Scheduler(state)
    db = job("db", gpus=1, labels={"app": "db"}, anti_affinity=[_term(app="db")])
    s.restore(db, [_on("db", "lf0-n0")], now=0)
    s = _run(state, job("db2", gpus=1, labels={"app": "db"}), now=1, s=s)
    assert _nodes(s, "db2") == ["lf0-n1"]


def test_preemption_evicts_the_pod_that_keeps_a_high_priority_pod_away() -> None:
    # the node has room for both; only the anti-affinity keeps "high" out, and evicting
    # "low" lifts it (as kube-scheduler's preemption does)
    state = _cluster(["a"])
    s = Scheduler(state, preemption=PreemptionPolicy())
    s = _run(state, job("low", gpus=1, priority=0, labels={"app": "batch"}), s=s)
    s.submit(job("high", gpus=1, priority=10, anti_affinity=[_term(app="batch")]), now=1)
    result = s.step(now=2)
    assert [v.job for v in result.victims] == ["low"]
    assert not s.status("high").bindings
    s.pod_evicted(s.status("low").bindings[0].pod, now=3)
    s.step(now=4)
    check_invariants(s)
    assert _nodes(s, "high") == ["lf0-n0"]


def test_preemption_keeps_the_victim_that_keeps_the_preemptor_out_among_its_victims() -> None:
    # two pods fill the node; evicting either frees room, but only evicting "blocker" lets
    # "high" in: the search that spares victims must not spare it
    state = _cluster(["a"])
    s = Scheduler(state, preemption=PreemptionPolicy())
    s = _run(state, job("blocker", gpus=4, priority=1, labels={"app": "batch"}),
             job("filler", gpus=4, priority=0), s=s)  # fmt: skip
    s.submit(job("high", gpus=4, priority=10, anti_affinity=[_term(app="batch")]), now=1)
    result = s.step(now=2)
    assert "blocker" in {v.job for v in result.victims}
    for v in result.victims:
        for p in v.pods:
            s.pod_evicted(p, now=3)
    s.step(now=4)
    assert _nodes(s, "high") == ["lf0-n0"]


def test_a_nominated_preemptor_counts_where_it_is_nominated() -> None:
    # "high" evicts "low" on n1 and waits there for it to go; "x", which must not run next to
    # "high", keeps off n1 meanwhile (kube-scheduler counts nominated pods too)
    state = _cluster(["a", "b"])
    s = Scheduler(state, preemption=PreemptionPolicy())
    s = _run(state, job("big", gpus=8, priority=20),
             job("low", gpus=4, priority=0, labels={"app": "batch"}), s=s)  # fmt: skip
    s.submit(job("high", gpus=2, priority=10, labels={"app": "high"},
                 anti_affinity=[_term(app="batch")]), now=1)  # fmt: skip
    result = s.step(now=2)
    assert {b.node for n in result.nominations for b in n.bindings} == {"lf0-n1"}
    s.submit(job("x", gpus=2, priority=10, anti_affinity=[_term(app="high")]), now=3)
    s.step(now=4)
    assert "lf0-n1" not in _nodes(s, "x")
    s.pod_evicted(s.status("low").bindings[0].pod, now=5)
    s.step(now=6)
    check_invariants(s)
    assert _nodes(s, "high") == ["lf0-n1"]


def test_a_result_applied_after_a_newer_one_does_not_break_anti_affinity() -> None:
    # r1 places A; r2, computed after A's node freed room, places B next to where A would
    # go; applied out of order, A is stale instead of running next to B
    state = _cluster(["a"])
    s = Scheduler(state)
    s = _run(state, job("X", gpus=4), s=s)
    web = _term(app="w")
    s.submit(job("A", gpus=4, labels={"app": "w"}, anti_affinity=[web]), now=2)
    r1 = s.schedule(now=3)
    s.pods_finished(list(state.job_pods("X")), now=4)
    s.submit(job("B", gpus=4, priority=10, labels={"app": "w"}, anti_affinity=[web]), now=5)
    r2 = s.schedule(now=6)
    assert [b.pod.job for b in r1.bindings] == ["A"] and [b.pod.job for b in r2.bindings] == ["B"]
    assert s.apply(r2, now=7).bound == ("B",)
    assert s.apply(r1, now=8).stale == ("A",)
    check_invariants(s)
    assert state.job_pods("A") == () and s.status("A").phase.value == "pending"


def test_a_result_applies_as_before_when_no_pod_with_labels_came_or_went() -> None:
    state = _cluster(["a", "a"])
    s = _run(state, job("plain", gpus=1))
    s.submit(job("A", gpus=1, labels={"app": "w"}, anti_affinity=[_term(app="w")]), now=1)
    r = s.schedule(now=2)
    s.pods_finished(list(state.job_pods("plain")), now=3)  # (no labels: no pod term reads it)
    assert s.apply(r, now=4).bound == ("A",)


def test_a_binding_to_a_node_relabelled_since_the_cycle_is_stale() -> None:
    state = _cluster(["a", "b"])
    s = _run(state, job("W1", gpus=1, labels={"app": "w"}))
    s.submit(job("W2", gpus=1, labels={"app": "w"}, anti_affinity=[_term("zone", app="w")]),
             now=2)  # fmt: skip
    r = s.schedule(now=3)
    (target,) = {b.node for b in r.bindings}
    s.node_relabelled(target, {"zone": "a"}, (), now=4)  # (now in W1's zone)
    assert s.apply(r, now=5).stale == ("W2",)
    s.step(now=6)
    check_invariants(s)
    assert not s.status("W2").bindings


def test_a_required_affinity_met_only_by_a_nominated_preemptor_waits() -> None:
    # P (app=db) evicts M and is nominated while M terminates; Q, which needs a db pod in its
    # zone, must not start on the strength of a pod that does not run yet (kube-scheduler
    # filters it with the nominated pods and without them)
    state = _cluster(["a", "a", "a"])
    s = Scheduler(state, preemption=PreemptionPolicy())
    s = _run(state, job("L", gpus=8), job("M", gpus=8), job("N", gpus=7, priority=10), s=s)
    s.submit(job("P", gpus=8, priority=5, labels={"app": "db"}), now=2)
    r = s.step(now=3)
    assert [n.job for n in r.nominations] == ["P"]
    s.submit(job("Q", gpus=1, affinity=[_term("zone", app="db")]), now=4)
    s.step(now=5)
    assert not s.status("Q").bindings
    s.pod_evicted(s.status("M").bindings[0].pod, now=6)
    s.step(now=7)
    assert _nodes(s, "P") and _zone(s, "Q") == _zone(s, "P")
    check_invariants(s)


def test_jobs_without_labels_or_terms_place_as_before() -> None:
    state = _cluster(["a", "a"])
    s = _run(state, job("p", gpus=3), job("q", gpus=3))
    assert _nodes(s, "p") == _nodes(s, "q") == ["lf0-n0"]
    assert not state.pod_terms_kept


# --------------------------------------------------------------------------- preferred terms


def _soft(weight: int, key: str = HOSTNAME_LABEL, anti: bool = False, **labels: str) -> Any:
    from kant.model import PreferredPodTerm

    return PreferredPodTerm(weight=weight, term=_term(key, **labels), anti=anti)


def _soft_job(jid: str, *prefs: Any, gpus: int = 1, **labels: str) -> Job:
    return Job(id=jid, roles=(Role(resources=Resources(gpus=gpus), labels=labels,
                                   pod_preferences=prefs),))  # fmt: skip


def test_replicas_with_preferred_anti_affinity_spread_evenly_and_all_run() -> None:
    # E-Binpack would put the six 1-GPU replicas on one node; the soft term spreads them two
    # a node over three nodes, and never keeps one waiting
    s = _run(
        _cluster(["a", "a", "b"]),
        *(_soft_job(f"w{i}", _soft(100, anti=True, app="web"), app="web") for i in range(6)),
    )
    per_node = [sum(1 for i in range(6) if _nodes(s, f"w{i}") == [n]) for n in
                ("lf0-n0", "lf0-n1", "lf0-n2")]  # fmt: skip
    assert per_node == [2, 2, 2]


def test_a_preferred_affinity_goes_where_it_prefers_while_there_is_room_then_anywhere() -> None:
    state = _cluster(["a", "b"])
    s = _run(state, job("fill", gpus=4), job("db", gpus=1, labels={"app": "db"}))
    assert _zone(s, "db") == {"a"}
    # the zone of db has 3 GPUs left: three caches there, the fourth elsewhere (not waiting)
    s = _run(state, *(_soft_job(f"c{i}", _soft(50, "zone", app="db")) for i in range(4)),
             now=2, s=s)  # fmt: skip
    zones = sorted(z for i in range(4) for z in _zone(s, f"c{i}"))
    assert zones == ["a", "a", "a", "b"]


def test_preferred_terms_add_up_by_weight_and_by_pods() -> None:
    # n0 holds two "x" pods, n1 one "y" pod: +10 a pod of x, +30 a pod of y: n1 (30) beats
    # n0 (20); with +20 for x, n0 (40) wins
    state = _cluster(["a", "a", "a"])
    s = _run(state, job("x0", gpus=1, labels={"app": "x"}), job("x1", gpus=1, labels={"app": "x"}))
    s.submit(job("y", gpus=1, labels={"app": "y"}, anti_affinity=[_term(app="x")]), now=1)
    s.step(now=2)
    assert _nodes(s, "x0") == _nodes(s, "x1") == ["lf0-n0"] and _nodes(s, "y") == ["lf0-n1"]
    s = _run(state, _soft_job("p", _soft(10, app="x"), _soft(30, app="y")), now=3, s=s)
    assert _nodes(s, "p") == ["lf0-n1"]
    s = _run(state, _soft_job("q", _soft(20, app="x"), _soft(30, app="y")), now=4, s=s)
    assert _nodes(s, "q") == ["lf0-n0"]


def test_a_gangs_pods_are_placed_as_without_preferred_terms() -> None:
    gang = Job(id="g", roles=(Role(replicas=3, resources=Resources(gpus=1), labels={"app": "g"},
                                   pod_preferences=(_soft(100, anti=True, app="g"),)),))  # fmt: skip
    plain = job("g", replicas=3, gpus=1, labels={"app": "g"})
    a = _run(_cluster(["a", "a"]), gang)
    b = _run(_cluster(["a", "a"]), plain)
    assert [x.node for x in a.status("g").bindings] == [x.node for x in b.status("g").bindings]


def test_a_preference_for_nodes_the_strategy_keeps_for_others_does_not_keep_a_pod_waiting() -> None:
    # E-Spread gives a training pod the general nodes only; the db pod it prefers to be near
    # runs in the inference zone: the pod goes to a general node
    from kant.placement import Placer
    from kant.state import ClusterState
    from kant.testing import node

    state = ClusterState([node("z0", leaf="lf0", zone="inference"), node("g0", leaf="lf0")])
    placer, snap = Placer("espread"), state.snapshot()
    (db,) = placer.place(job("db", gpus=1, labels={"app": "db"}, kind="inference"), snap).bindings
    assert db.node == "z0"
    got = placer.place(_soft_job("t", _soft(100, app="db"), app="t"), snap)
    assert [b.node for b in got.bindings] == ["g0"]


def test_a_one_pod_role_of_a_gang_does_not_read_its_preferences() -> None:
    # the launcher prefers the db's node, which the 7-GPU worker needs: read, the gang would
    # never start; a gang's pods do not read preferences
    gang = Job(id="g", roles=(
        Role(name="launcher", resources=Resources(gpus=1), labels={"app": "g"},
             pod_preferences=(_soft(100, app="db"),)),
        Role(name="worker", resources=Resources(gpus=7), labels={"app": "g"}),
    ))  # fmt: skip
    state = _cluster(["a", "a"])
    s = _run(state, job("db", gpus=1, labels={"app": "db"}),
             job("fill", gpus=4, anti_affinity=[_term(app="db")]))  # fmt: skip
    assert _nodes(s, "db") == ["lf0-n0"] and _nodes(s, "fill") == ["lf0-n1"]
    s = _run(state, gang, now=2, s=s)
    assert len(_nodes(s, "g")) == 2


def test_a_pod_keeps_away_from_a_running_pod_that_would_rather_not_have_it_near() -> None:
    # "quiet" would rather not run next to "noisy" pods; a noisy pod with no terms of its
    # own goes to the other node, where E-Binpack alone would pack it next to "quiet"
    state = _cluster(["a", "a"])
    s = _run(state, _soft_job("quiet", _soft(50, anti=True, app="noisy"), gpus=4))
    (home,) = _nodes(s, "quiet")
    s = _run(state, job("noisy", gpus=1, labels={"app": "noisy"}), now=2, s=s)
    assert _nodes(s, "noisy") != [home]
    # a pod it does not select packs next to it as before
    s = _run(state, job("calm", gpus=1, labels={"app": "calm"}), now=3, s=s)
    assert _nodes(s, "calm") == [home]


def test_a_pod_goes_where_a_running_pods_preferred_or_required_affinity_wants_it() -> None:
    # "web" runs in zone b with a preferred affinity to cache pods, "api" in zone a with a
    # required one to db pods (whose weight is kube-scheduler's hardPodAffinityWeight, 1):
    # a cache pod goes to zone b, a db pod to zone a, where E-Binpack alone takes lf0-n0
    state = _cluster(["a", "a", "b", "b"])
    s = Scheduler(state)
    web = _soft_job("web", _soft(10, "zone", app="cache"), **{"app": "web"})
    s.restore(web, [_on("web", "lf0-n3")], now=0)
    api = job("api", gpus=1, labels={"app": "api"}, affinity=[_term("zone", app="db")])
    state.bind(_on("api", "lf0-n1"))
    state.describe(api)
    s = _run(state, job("cache", gpus=1, labels={"app": "cache"}), now=1, s=s)
    assert _zone(s, "cache") == {"b"}
    s = _run(state, job("db", gpus=1, labels={"app": "db"}), now=2, s=s)
    assert _zone(s, "db") == {"a"}


def test_a_running_pods_preference_weighs_against_the_pods_own() -> None:
    # "x" prefers "y" pods' node (weight 30); a "y" pod there would rather not have "x"
    # pods near (weight 100): the sum keeps x away
    state = _cluster(["a", "a"])
    s = _run(state, _soft_job("y", _soft(100, anti=True, app="x"), gpus=1, app="y"))
    (home,) = _nodes(s, "y")
    s = _run(state, _soft_job("x", _soft(30, app="y"), gpus=1, app="x"), now=2, s=s)
    assert _nodes(s, "x") != [home]


def test_a_gangs_pods_do_not_read_running_pods_preferences() -> None:
    state = _cluster(["a", "a"])
    s = _run(state, _soft_job("quiet", _soft(50, anti=True, app="noisy"), gpus=4))
    (home,) = _nodes(s, "quiet")
    s = _run(state, job("g", gpus=2, replicas=2, labels={"app": "noisy"}), now=2, s=s)
    assert _nodes(s, "g") == [home, home]  # (E-Binpack: next to quiet, as without terms)


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize(
    "make",
    [
        lambda: PodAffinityTerm(selector=(NodeRequirement(key="a", operator="Gt", values="1"),)),
        lambda: PodAffinityTerm(
            selector=(NodeRequirement(key="metadata.name", operator="In", values="x", field=True),)
        ),
        lambda: PodAffinityTerm(topology_key=""),
        lambda: PodAffinityTerm(selector="app=db"),
        lambda: Role(labels={"": "x"}),
        lambda: Role(labels={"app": " padded "}),
        lambda: Role(pod_affinity=("zone",)),
        lambda: Role(pod_anti_affinity=(_sel(app="x"),)),
    ],
)
def test_a_malformed_term_or_label_is_refused_with_a_typed_error(make: object) -> None:
    with pytest.raises(InvalidJobError):
        make()  # type: ignore[operator]


def test_an_empty_selector_is_about_every_pod() -> None:
    everyone = PodAffinityTerm()
    assert everyone.selects({}) and everyone.selects({"app": "x"})
    state = _cluster(["a", "a"])
    s = _run(state, job("x", gpus=1, labels={"k": "v"}), job("y", gpus=1))
    s = _run(state, job("lonely", gpus=1, anti_affinity=[everyone]), now=2, s=s)
    assert _nodes(s, "x") == _nodes(s, "y") == ["lf0-n0"]
    # it keeps away from "x" (labelled); "y" has neither labels nor terms, and kant follows
    # only pods that have one or the other
    assert _nodes(s, "lonely") == ["lf0-n1"]


# --------------------------------------------------------------------------- the property

_APPS = ("a", "b", "c")


@st.composite
def _jobs(draw: st.DrawFn) -> list[Job]:
    out = []
    for i in range(draw(st.integers(1, 14))):
        app = draw(st.sampled_from(_APPS))
        anti = [
            _term(draw(st.sampled_from((HOSTNAME_LABEL, "zone"))), app=draw(st.sampled_from(_APPS)))
            for _ in range(draw(st.integers(0, 1)))
        ]
        aff = [
            _term(draw(st.sampled_from((HOSTNAME_LABEL, "zone"))), app=draw(st.sampled_from(_APPS)))
            for _ in range(draw(st.integers(0, 1)))
        ]
        reps = draw(st.integers(1, 3))
        out.append(job(f"j{i}", replicas=reps, gpus=draw(st.sampled_from((1, 2, 4))),
                       gang=draw(st.booleans()) if reps > 1 else False, labels={"app": app},
                       anti_affinity=anti, affinity=aff))  # fmt: skip
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=_jobs(), finish=st.lists(st.integers(0, 13), max_size=4))
def test_no_two_running_pods_ever_break_a_required_anti_affinity_term(
    jobs: list[Job], finish: list[int]
) -> None:
    state = _cluster(["a", "a", "b", "b", None, None])
    s = Scheduler(state)
    for j in jobs:
        s.submit(j, now=0)
    for t in range(1, 4):
        s.step(now=t)
        check_invariants(s)
        running = [(j.roles[0], b) for j in jobs for b in s.status(j.id).bindings]
        for role, b in running:
            for term in role.pod_anti_affinity:
                mine = topology_value(state.node(b.node), term.topology_key)
                for other, ob in running:
                    if ob.pod == b.pod or mine is None or not term.selects(other.labels):
                        continue
                    theirs = topology_value(state.node(ob.node), term.topology_key)
                    assert theirs != mine, (b, ob, term)
        for k in finish:
            if k < len(jobs):
                for b in s.status(jobs[k].id).bindings:
                    s.pod_finished(b.pod, now=t + 0.5)


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(("place", "nominate", "release", "begin", "commit",
                                   "rollback")),
                  st.integers(0, 5), st.integers(0, 3)),
        max_size=40,
    )
)  # fmt: skip
def test_the_kept_view_of_pods_equals_one_built_afresh_after_any_moves_and_rollbacks(
    steps: list[tuple[str, int, int]],
) -> None:
    from kant.model import PodId
    from kant.placement.affinity import PodsOnNodes

    state = _cluster(["a", "a", "b", "b"])
    snap = state.snapshot()
    from kant.model import PreferredPodTerm

    labelled = job("j", replicas=6, gpus=1, gang=False, labels={"app": "x"},
                   anti_affinity=[_term(app="x")], affinity=[_term("zone", app="x")],
                   pod_preferences=[PreferredPodTerm(weight=7, term=_term(app="y"))])  # fmt: skip
    kept = PodsOnNodes()
    txs = [snap.transaction()]
    for op, k, slot in steps:
        pod = PodId(job="j", role="worker", index=k)
        if op in ("place", "nominate"):
            snap.record_placed(labelled, [(pod, slot)], nominated=op == "nominate")
        elif op == "release":
            snap.pod_moves.append((pod, -1))
        elif op == "begin":
            txs.append(snap.transaction())
        elif len(txs) > 1:
            tx = txs.pop()
            tx.commit() if op == "commit" else tx.rollback()
        kept.sync(snap)
        fresh = PodsOnNodes()
        fresh.sync(snap)
        assert kept._pods == fresh._pods and kept._nominated == fresh._nominated
        assert kept._by_labels == fresh._by_labels
        assert kept._by_anti == fresh._by_anti and kept._by_soft == fresh._by_soft
    while txs:
        txs.pop().rollback()
