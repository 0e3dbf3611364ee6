"""Node preferences: a role's preferred terms (Kubernetes' preferred node affinity) and the
``PreferNoSchedule`` taints it does not tolerate order the nodes it may use. The Placer tries
the most preferred nodes first, widening level by level, and never leaves a pod waiting for
a preference (docs/placement.md, "Preferred nodes")."""

from __future__ import annotations

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from kant.errors import InvalidJobError
from kant.model import (
    Job,
    NodeRequirement,
    NodeSelector,
    PreferredTerm,
    Resources,
    Role,
    Taint,
    TaintEffect,
    Tier,
    Toleration,
)
from kant.placement import Placer
from kant.scheduler import Scheduler
from kant.state import ClusterState
from kant.state.cluster import MAX_PREFERENCE_LEVELS
from kant.testing import ClusterBuilder, check_invariants, job, node

SPOT = Taint(key="spot", effect=TaintEffect.PREFER_NO_SCHEDULE)


def _pref(weight: int, key: str, *values: str) -> PreferredTerm:
    return PreferredTerm(
        weight=weight, requirements=(NodeRequirement(key=key, operator="In", values=values),)
    )


def _cluster(labels: dict[int, dict[str, str]], taints: dict[int, list[Taint]] | None = None,
             nodes: int = 4, leaves: int = 1) -> ClusterState:  # fmt: skip
    """``leaves`` leaves of ``nodes`` nodes in all (``lf<k>-n<i>``); node ``i`` (in that order)
    gets ``labels[i]`` and ``taints[i]``."""
    b = ClusterBuilder()
    per = nodes // leaves
    for k in range(leaves):
        b.leaf(f"lf{k}", nodes=per)
    specs = b.specs()
    for i, spec in enumerate(specs):
        specs[i] = attrs.evolve(spec, labels=labels.get(i, {}), taints=(taints or {}).get(i, ()))
    return ClusterState(specs)


def _where(s: Scheduler, job_id: str) -> list[str]:
    return sorted(b.node for b in s.status(job_id).bindings)


def _place(state: ClusterState, *jobs: object, now: float = 1) -> Scheduler:
    s = Scheduler(state)
    for j in jobs:
        s.submit(j, now=0)  # type: ignore[arg-type]
    s.step(now=now)
    check_invariants(s)
    return s


# --------------------------------------------------------------------------- the rules


def test_a_pod_goes_to_the_node_its_preferred_term_names_rather_than_where_ebinpack_would() -> None:
    s = _place(
        _cluster({3: {"disk": "ssd"}}), job("a", gpus=4, preferred=[_pref(1, "disk", "ssd")])
    )
    assert _where(s, "a") == ["lf0-n3"]


def test_the_weights_of_the_terms_a_node_meets_add_up() -> None:
    # n1 meets the 60 term, n2 both 40 terms (80): n2 is preferred
    state = _cluster({1: {"a": "1"}, 2: {"b": "1", "c": "1"}})
    terms = [_pref(60, "a", "1"), _pref(40, "b", "1"), _pref(40, "c", "1")]
    s = _place(state, job("j", gpus=8, preferred=terms))
    assert _where(s, "j") == ["lf0-n2"]


def test_a_pod_whose_preferred_nodes_are_full_goes_elsewhere_at_once() -> None:
    state = _cluster({3: {"disk": "ssd"}})
    first = job("first", gpus=8, preferred=[_pref(1, "disk", "ssd")])
    second = job("second", gpus=8, preferred=[_pref(1, "disk", "ssd")], submitted_at=1)
    s = _place(state, first, second)
    assert _where(s, "first") == ["lf0-n3"] and _where(s, "second") == ["lf0-n0"]


def test_an_intolerant_pod_keeps_off_a_prefer_no_schedule_node_while_others_have_room() -> None:
    s = _place(_cluster({}, {0: [SPOT], 1: [SPOT]}), job("a", gpus=8), job("b", gpus=8))
    assert _where(s, "a") == ["lf0-n2"] and _where(s, "b") == ["lf0-n3"]


def test_the_tainted_nodes_take_pods_once_no_other_node_has_room() -> None:
    s = _place(_cluster({}, {0: [SPOT]}, nodes=2), job("a", gpus=8), job("b", gpus=8))
    assert _where(s, "a") == ["lf0-n1"] and _where(s, "b") == ["lf0-n0"]


def test_a_pod_that_tolerates_the_taint_places_as_if_it_were_not_there() -> None:
    tolerant = job("t", gpus=4, tolerations=[Toleration(key="spot", operator="Exists")])
    s = _place(_cluster({}, {0: [SPOT]}), tolerant)
    assert _where(s, "t") == ["lf0-n0"]  # E-Binpack's first node, as on a cluster untainted


def test_avoiding_a_prefer_no_schedule_taint_comes_before_any_affinity_weight() -> None:
    state = _cluster({0: {"disk": "ssd"}}, {0: [SPOT]})
    s = _place(state, job("a", gpus=8, preferred=[_pref(100, "disk", "ssd")]))
    assert _where(s, "a") == ["lf0-n1"]
    role = job("a", preferred=[_pref(100, "disk", "ssd")]).roles[0]
    assert role.preference(state.node("lf0-n0")) == (1, -100)
    assert role.preference(state.node("lf0-n1")) == (0, 0)


def test_a_gang_goes_whole_to_the_best_level_that_holds_it() -> None:
    # the two best nodes cannot hold a gang of three: it goes to the best two levels
    state = _cluster({3: {"z": "a"}, 4: {"z": "a"}, 5: {"z": "b"}}, nodes=6)
    terms = [_pref(50, "z", "a"), _pref(10, "z", "b")]
    s = _place(state, job("g", gpus=8, replicas=3, preferred=terms))
    assert _where(s, "g") == ["lf0-n3", "lf0-n4", "lf0-n5"]


def test_a_required_leaf_is_taken_among_the_preferred_nodes_first() -> None:
    # lf1's nodes are preferred: the gang's leaf is lf1, though E-Binpack starts at lf0
    state = _cluster({2: {"z": "a"}, 3: {"z": "a"}}, nodes=4, leaves=2)
    g = job("g", gpus=8, replicas=2, tier=Tier.LEAF, required=True, preferred=[_pref(5, "z", "a")])
    s = _place(state, g)
    assert _where(s, "g") == ["lf1-n0", "lf1-n1"]


def _launcher_and_worker(**launcher: object) -> Job:
    """A gang of a 4-GPU launcher and an 8-GPU worker that only a ``big=1`` node takes."""
    return Job(
        id="mpi",
        gang=True,
        roles=(
            Role(name="launcher", resources=Resources(gpus=4), **launcher),  # type: ignore[arg-type]
            Role(name="worker", resources=Resources(gpus=8),
                 node_selector=NodeSelector.labels(big="1")),
        ),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("labels", "taints", "launcher"),
    [
        pytest.param({1: {"big": "1"}}, {}, {"preferred": (_pref(1, "big", "1"),)},
                     id="the launcher prefers the worker's node"),
        pytest.param({1: {"big": "1"}}, {0: [SPOT]}, {}, id="the other node is soft-tainted"),
    ],
)  # fmt: skip
def test_a_gang_whose_role_took_another_roles_only_node_by_preference_is_placed_without_it(
    labels: dict[int, dict[str, str]], taints: dict[int, list[Taint]], launcher: dict[str, object]
) -> None:
    s = _place(_cluster(labels, taints, nodes=2), _launcher_and_worker(**launcher))
    where = {b.pod.role: b.node for b in s.status("mpi").bindings}
    assert where == {"launcher": "lf0-n0", "worker": "lf0-n1"}


def test_a_preference_never_costs_a_gang_the_leaf_that_holds_it() -> None:
    # the preferred nodes are two in each leaf: no leaf of them holds the gang, lf0 does
    state = _cluster({i: {"z": "a"} for i in (0, 1, 4, 5)}, nodes=8, leaves=2)
    g = job("g", gpus=8, replicas=4, tier=Tier.LEAF, preferred=[_pref(1, "z", "a")])
    assert _where(_place(state, g), "g") == ["lf0-n0", "lf0-n1", "lf0-n2", "lf0-n3"]
    soft = _cluster({}, {3: [SPOT], 7: [SPOT]}, nodes=8, leaves=2)
    g = job("g", gpus=8, replicas=4, tier=Tier.LEAF)
    assert _where(_place(soft, g), "g") == ["lf0-n0", "lf0-n1", "lf0-n2", "lf0-n3"]


def test_a_pod_level_job_with_a_required_leaf_takes_the_preferred_leaf_and_nodes() -> None:
    state = _cluster({2: {"z": "a"}, 3: {"z": "a"}}, nodes=4, leaves=2)
    p = job("p", gpus=8, replicas=2, gang=False, tier=Tier.LEAF, required=True,
            preferred=[_pref(5, "z", "a")])  # fmt: skip
    assert _where(_place(state, p), "p") == ["lf1-n0", "lf1-n1"]
    one_leaf = _cluster({1: {"z": "a"}}, nodes=2)
    p = job("p", gpus=4, replicas=2, gang=False, tier=Tier.LEAF, required=True,
            preferred=[_pref(5, "z", "a")])  # fmt: skip
    assert _where(_place(one_leaf, p), "p") == ["lf0-n1", "lf0-n1"]


def test_a_preference_never_overrides_the_node_selector_or_a_hard_taint() -> None:
    hard = Taint(key="dedicated", effect=TaintEffect.NO_SCHEDULE)
    state = _cluster({0: {"disk": "ssd"}}, {0: [hard]})
    s = _place(state, job("a", gpus=8, preferred=[_pref(100, "disk", "ssd")]))
    assert _where(s, "a") == ["lf0-n1"]


def test_a_preference_reading_node_names_prefers_the_named_node() -> None:
    by_name = PreferredTerm(
        weight=1,
        requirements=(
            NodeRequirement(key="metadata.name", operator="In", values=("lf0-n2",), field=True),
        ),
    )
    s = _place(_cluster({}), job("a", gpus=8, preferred=[by_name]))
    assert _where(s, "a") == ["lf0-n2"]


def test_relabelling_a_node_moves_the_preference_of_later_placements() -> None:
    state = _cluster({1: {"disk": "ssd"}})
    s = Scheduler(state)
    pref = [_pref(1, "disk", "ssd")]
    s.submit(job("a", gpus=4, preferred=pref), now=0)
    s.step(now=1)
    assert _where(s, "a") == ["lf0-n1"]
    s.node_relabelled("lf0-n1", {}, (), 2)
    s.node_relabelled("lf0-n3", {"disk": "ssd"}, (), 2)
    s.submit(job("b", gpus=4, preferred=pref), now=3)
    s.step(now=4)
    assert _where(s, "b") == ["lf0-n3"]
    check_invariants(s)


def test_levels_past_the_fourth_are_tried_together_with_all_the_other_nodes() -> None:
    n = MAX_PREFERENCE_LEVELS + 3
    state = _cluster({i: {"rank": str(i)} for i in range(n)}, nodes=n)
    terms = [_pref(10 * (i + 1), "rank", str(i)) for i in range(n)]  # node i: weight 10(i+1)
    role = job("j", preferred=terms).roles[0]
    levels = state.preference_levels(role)
    assert len(levels) == MAX_PREFERENCE_LEVELS
    assert [int(m.sum()) for m in levels] == [1, 2, 3, 4]
    # the four best nodes fill in order of weight, then the rest by E-Binpack
    s = Scheduler(state)
    for k in range(n):
        s.submit(job(f"p{k}", gpus=8, preferred=terms, submitted_at=k), now=k)
    s.step(now=n)
    got = [_where(s, f"p{k}")[0] for k in range(n)]
    assert got == [f"lf0-n{i}" for i in (6, 5, 4, 3, 0, 1, 2)]
    check_invariants(s)


def test_without_preferences_or_soft_taints_no_level_is_made() -> None:
    state = _cluster({0: {"disk": "ssd"}}, {1: [Taint(key="x", effect=TaintEffect.NO_SCHEDULE)]})
    assert state.preference_levels(job("j").roles[0]) == ()
    # one level over all nodes: nothing to prefer
    assert state.preference_levels(job("j", preferred=[_pref(1, "nope", "x")]).roles[0]) == ()


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: PreferredTerm(weight=0, requirements=(
            NodeRequirement(key="a", operator="Exists"),)), id="weight 0"),
        pytest.param(lambda: PreferredTerm(weight=101, requirements=(
            NodeRequirement(key="a", operator="Exists"),)), id="weight 101"),
        pytest.param(lambda: PreferredTerm(weight=1.5, requirements=(
            NodeRequirement(key="a", operator="Exists"),)), id="a weight not an int"),
        pytest.param(lambda: PreferredTerm(weight=1, requirements=()), id="no requirement"),
        pytest.param(lambda: job("j", preferred=["ssd"]), id="a term not a PreferredTerm"),
    ],
)  # fmt: skip
def test_a_malformed_preference_is_refused_naming_it(make: object) -> None:
    with pytest.raises(InvalidJobError):
        make()  # type: ignore[operator]


def test_a_job_alike_but_for_its_preference_places_by_its_own() -> None:
    # the cycle's memos of jobs alike (placement_key) tell them apart
    a = job("a", gpus=8).roles[0]
    b = job("b", gpus=8, preferred=[_pref(1, "disk", "ssd")]).roles[0]
    assert a.placement_key != b.placement_key


# --------------------------------------------------------------------------- the invariant


_VALUES = ("a", "b")


@st.composite
def _preferring_cluster(draw: st.DrawFn) -> ClusterState:
    b = ClusterBuilder()
    for leaf in range(draw(st.integers(1, 2))):
        for k in range(draw(st.integers(1, 4))):
            labels = {
                key: draw(st.sampled_from(_VALUES)) for key in ("x", "y") if draw(st.booleans())
            }
            taints = [SPOT] if draw(st.integers(0, 2)) == 0 else []
            b.add(node(f"lf{leaf}-n{k}", gpus=draw(st.sampled_from([4, 8])), template=None,
                       nics=0, leaf=f"lf{leaf}", spine="sp0", superspine="ss0",
                       labels=labels, taints=taints))  # fmt: skip
    return b.build()


_TERMS = st.lists(
    st.builds(_pref, st.integers(1, 100), st.sampled_from(["x", "y"]), st.sampled_from(_VALUES)),
    max_size=3,
)
_TOLERATE = st.sampled_from([(), (Toleration(key="spot", operator="Exists"),)])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _preferring_cluster(),
    st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), _TERMS, _TOLERATE), min_size=1, max_size=10),
    st.sampled_from(["ebinpack", "binpack", "spread", "espread"]),
)
def test_a_lone_pod_lands_on_a_node_of_the_best_preference_that_has_room(
    state: ClusterState,
    pods: list[tuple[int, list[PreferredTerm], tuple[Toleration, ...]]],
    strategy: str,
) -> None:
    placer = Placer(strategy)
    for i, (gpus, terms, tol) in enumerate(pods):
        j = job(f"j{i}", gpus=gpus, preferred=terms, tolerations=tol)
        role = j.roles[0]
        snap = state.snapshot()
        fits = [
            spec for spec in state.nodes()
            if int(snap.cols.free_gpus[state.slot_of(spec.name)]) >= gpus
        ]  # fmt: skip
        res = placer.place(j, snap)
        if not fits:
            assert not res.bindings
            continue
        (b,) = res.bindings
        best = min(role.preference(spec) for spec in fits)
        assert role.preference(state.node(b.node)) == best, (b.node, best)
        state.bind(b)
