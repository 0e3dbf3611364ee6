"""Node selectors and taints: a role runs only on the nodes its ``node_selector`` matches and
whose ``NoSchedule`` / ``NoExecute`` taints it tolerates, wherever kant picks nodes
(placement, gangs, readiness, preemption, the queueing policies)."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from kant.errors import InvalidJobError, InvalidNodeError
from kant.model import (
    NodeRequirement,
    NodeSelector,
    ReasonCode,
    Taint,
    TaintEffect,
    Tier,
    Toleration,
)
from kant.placement import Placer
from kant.preemption import PreemptionPolicy
from kant.queueing import JobPhase
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job, node
from tests.qsch.conftest import evict_victims, finish, finish_due, scheduler

POOL_B = NodeSelector.labels(pool="b")
DEDICATED = Taint(key="dedicated", value="inference", effect=TaintEffect.NO_SCHEDULE)


def _two_pools() -> ClusterState:
    """lf0: two unlabelled nodes; lf1: two nodes labelled pool=b."""
    return ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2, labels={"pool": "b"}).build()


def _req(key: str, op: str, *values: str, field: bool = False) -> NodeRequirement:
    return NodeRequirement(key=key, operator=op, values=values, field=field)


# --------------------------------------------------------------------------- the rules


@pytest.mark.parametrize(
    ("requirement", "labels", "name", "ok"),
    [
        pytest.param(_req("pool", "In", "a", "b"), {"pool": "b"}, "x", True, id="In: one of the values"),
        pytest.param(_req("pool", "In", "a"), {}, "x", False, id="In: an absent label never matches"),
        pytest.param(_req("pool", "NotIn", "a"), {}, "x", True, id="NotIn: an absent label matches"),
        pytest.param(_req("pool", "NotIn", "a"), {"pool": "a"}, "x", False, id="NotIn: a listed value"),
        pytest.param(_req("gpu", "Exists"), {"gpu": ""}, "x", True, id="Exists: an empty value is set"),
        pytest.param(_req("gpu", "DoesNotExist"), {"gpu": "1"}, "x", False, id="DoesNotExist"),
        pytest.param(_req("rank", "Gt", "4"), {"rank": "5"}, "x", True, id="Gt reads integers"),
        pytest.param(_req("rank", "Gt", "4"), {"rank": "10"}, "x", True, id="Gt: not as strings"),
        pytest.param(_req("rank", "Lt", "4"), {"rank": "four"}, "x", False, id="Lt: not an integer"),
        pytest.param(_req("rank", "Gt", "-2"), {}, "x", False, id="Gt: an absent label"),
        pytest.param(_req("rank", "Lt", "9223372036854775807"), {"rank": "9223372036854775806"},
                     "x", True, id="Lt: any 64-bit integer"),
        pytest.param(_req("rank", "Gt", "1"), {"rank": "9223372036854775808"}, "x", False,
                     id="Gt: past 64 bits is no integer"),
        pytest.param(_req("metadata.name", "In", "n1", field=True), {}, "n1", True, id="the name"),
        pytest.param(_req("metadata.name", "NotIn", "n1", field=True), {}, "n1", False, id="not the name"),
    ],
)  # fmt: skip
def test_a_requirement_reads_a_node_label_as_kubernetes_does(
    requirement: NodeRequirement, labels: dict[str, str], name: str, ok: bool
) -> None:
    sel = NodeSelector(terms=((requirement,),))
    assert sel.matches(node(name, labels=labels)) is ok


def test_terms_are_ored_and_the_requirements_of_a_term_anded() -> None:
    sel = NodeSelector(
        terms=(
            (_req("pool", "In", "a"), _req("rack", "In", "r1")),
            (_req("pool", "In", "b"),),
        )
    )
    assert sel.matches(node("n", labels={"pool": "a", "rack": "r1"}))
    assert not sel.matches(node("n", labels={"pool": "a", "rack": "r2"}))
    assert sel.matches(node("n", labels={"pool": "b"}))


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        pytest.param(Toleration(key="dedicated", value="inference"), True, id="Equal: key and value"),
        pytest.param(Toleration(key="dedicated", value="batch"), False, id="Equal: another value"),
        pytest.param(Toleration(key="dedicated", operator="Exists"), True, id="Exists: any value"),
        pytest.param(Toleration(operator="Exists"), True, id="an empty key with Exists: every taint"),
        pytest.param(
            Toleration(key="dedicated", operator="Exists", effect="NoExecute"), False,
            id="another effect",
        ),
        pytest.param(
            Toleration(key="dedicated", operator="Exists", effect="NoSchedule"), True,
            id="the same effect",
        ),
    ],
)  # fmt: skip
def test_a_toleration_lets_a_role_onto_a_tainted_node_as_kubernetes_does(
    toleration: Toleration, tolerated: bool
) -> None:
    assert toleration.tolerates(DEDICATED) is tolerated
    one = job("j", tolerations=[toleration]).roles[0]
    assert one.can_run_on(node("n", taints=[DEDICATED])) is tolerated


def test_a_prefer_no_schedule_taint_keeps_no_pod_off_its_node() -> None:
    soft = Taint(key="spot", effect=TaintEffect.PREFER_NO_SCHEDULE)
    assert job("j").roles[0].can_run_on(node("n", taints=[soft]))


@pytest.mark.parametrize(
    ("make", "error"),
    [
        pytest.param(lambda: _req("pool", "In"), InvalidJobError, id="In without values"),
        pytest.param(lambda: _req("pool", "Exists", "x"), InvalidJobError, id="Exists with a value"),
        pytest.param(lambda: _req("rank", "Gt", "1", "2"), InvalidJobError, id="Gt with two values"),
        pytest.param(lambda: _req("rank", "Lt", "1.5"), InvalidJobError, id="Lt with a non-integer"),
        pytest.param(lambda: _req("pool", "Near", "x"), InvalidJobError, id="an unknown operator"),
        pytest.param(lambda: _req("spec.x", "In", "x", field=True), InvalidJobError, id="a field but the name"),
        pytest.param(lambda: _req(" pool", "In", "x"), InvalidJobError, id="a key with spaces"),
        pytest.param(lambda: NodeSelector(terms=()), InvalidJobError, id="no term"),
        pytest.param(lambda: NodeSelector(terms=((),)), InvalidJobError, id="an empty term"),
        pytest.param(lambda: Toleration(key="", value="x"), InvalidJobError, id="empty key, Equal"),
        pytest.param(lambda: Toleration(key="k", operator="Exists", value="v"), InvalidJobError, id="Exists, a value"),
        pytest.param(lambda: Toleration(key="k", effect="Never"), InvalidJobError, id="a bad effect"),
        pytest.param(lambda: Taint(key="k", effect="Sometimes"), InvalidNodeError, id="a bad taint effect"),
        pytest.param(lambda: node("n", labels={"pool": 5}), InvalidNodeError, id="a label value not a string"),
        pytest.param(lambda: node("n", labels={"": "x"}), InvalidNodeError, id="an empty label key"),
        pytest.param(lambda: node("n", labels={"k": "x" * 254}), InvalidNodeError, id="a label value too long"),
        pytest.param(lambda: node("n", taints=["dedicated"]), InvalidNodeError, id="a taint not a Taint"),
        pytest.param(lambda: job("j", tolerations=["dedicated"]), InvalidJobError, id="a toleration not a Toleration"),
    ],
)  # fmt: skip
def test_a_malformed_selector_taint_or_label_is_refused_naming_it(
    make: object, error: type
) -> None:
    with pytest.raises(error):
        make()  # type: ignore[operator]


def test_a_node_with_labels_is_a_hashable_value_whose_labels_cannot_change() -> None:
    spec = node("n", labels={"pool": "b"})
    assert hash(spec) == hash(node("n", labels={"pool": "b"}))
    assert spec == node("n", labels={"pool": "b"}) != node("n", labels={"pool": "c"})
    with pytest.raises(TypeError):
        spec.labels["pool"] = "c"  # type: ignore[index]


# --------------------------------------------------------------------------- placement


def test_a_selected_gang_goes_to_the_labelled_nodes_even_where_ebinpack_prefers_others() -> None:
    state = _two_pools()
    res = Placer("ebinpack").place(job("g", gpus=4, replicas=4, selector=POOL_B), state.snapshot())
    assert res.ok
    assert {b.node for b in res.bindings} == {"lf1-n0", "lf1-n1"}
    plain = Placer("ebinpack").place(job("p", gpus=4, replicas=2), state.snapshot())
    assert {b.node for b in plain.bindings} == {"lf0-n0"}  # E-Binpack's first choice


def test_a_selector_that_matches_no_node_is_a_no_pool_reason_naming_it() -> None:
    res = Placer("ebinpack").place(
        job("g", gpus=1, selector=NodeSelector.labels(pool="zzz")), _two_pools().snapshot()
    )
    assert not res.ok and res.reason is not None
    assert res.reason.code is ReasonCode.NO_POOL
    assert "node selector" in res.reason.message


def test_a_tainted_node_takes_only_the_pods_that_tolerate_its_taint() -> None:
    state = ClusterBuilder().leaf("lf0", nodes=1).leaf("inf", nodes=1, taints=[DEDICATED]).build()
    placer = Placer("ebinpack")
    plain = placer.place(job("p", gpus=8, replicas=2), state.snapshot())
    assert not plain.ok  # the untainted node holds only one of the two pods
    ok = placer.place(
        job("t", gpus=8, replicas=2, tolerations=[Toleration(key="dedicated", operator="Exists")]),
        state.snapshot(),
    )
    assert ok.ok and {b.node for b in ok.bindings} == {"lf0-n0", "inf-n0"}


def test_a_required_leaf_counts_only_the_selected_nodes_of_each_leaf() -> None:
    # lf0 has four free nodes but only one labelled; lf1 two labelled: the gang of two needs lf1
    b = ClusterBuilder().leaf("lf0", nodes=3).leaf("lf1", nodes=2, labels={"pool": "b"})
    b.add(node("lf0-x", leaf="lf0", spine="sp0", superspine="ss0", labels={"pool": "b"}))
    state = b.build()
    res = Placer("ebinpack").place(
        job("g", gpus=8, replicas=2, tier=Tier.LEAF, required=True, selector=POOL_B),
        state.snapshot(),
    )
    assert res.ok and {b.node for b in res.bindings} == {"lf1-n0", "lf1-n1"}


def test_a_node_added_later_with_the_selected_label_takes_the_waiting_job() -> None:
    state = _two_pools()
    placer = Placer("ebinpack")
    sel = NodeSelector.labels(pool="c")
    assert not placer.place(job("j", gpus=8, selector=sel), state.snapshot()).ok
    state.add_node(node("new", leaf="lf1", spine="sp0", superspine="ss0", labels={"pool": "c"}))
    res = placer.place(job("j", gpus=8, selector=sel), state.snapshot())
    assert res.ok and res.bindings[0].node == "new"
    state.remove_node("new")
    assert not placer.place(job("j", gpus=8, selector=sel), state.snapshot()).ok
    check_invariants(state)


# --------------------------------------------------------------------------- the cycle


def test_a_job_too_big_for_its_selected_nodes_is_unsatisfiable_and_does_not_block_strict_fifo() -> (
    None
):
    s = scheduler(_two_pools(), policy="strict-fifo")
    s.submit(job("big", gpus=8, replicas=3, selector=POOL_B), now=0)
    s.submit(job("small", gpus=8), now=1)
    r = s.step(now=2)
    assert r.placed == ("small",)
    assert r.pending["big"].code is ReasonCode.UNSATISFIABLE
    assert "node selector" in r.pending["big"].message


def test_a_selected_job_waits_for_its_nodes_while_other_nodes_are_free() -> None:
    s = scheduler(_two_pools())
    s.submit(job("fill", gpus=8, replicas=2, selector=POOL_B), now=0)
    assert s.step(now=0).placed == ("fill",)
    s.submit(job("j", gpus=8, selector=POOL_B), now=1)
    r = s.step(now=1)
    assert r.placed == () and r.pending["j"].code in {
        ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.NO_FIT
    }  # fmt: skip
    finish(s, "fill", now=2)
    r = s.step(now=2)
    assert r.placed == ("j",) and r.bindings[0].node.startswith("lf1")
    check_invariants(s)


def test_a_preemptor_evicts_only_on_the_nodes_its_selector_allows() -> None:
    s = scheduler(_two_pools(), preemption=PreemptionPolicy())
    unlabelled = NodeSelector(terms=((_req("pool", "DoesNotExist"),),))
    s.submit(job("lo-a", gpus=8, replicas=2, selector=unlabelled, submitted_at=0), now=0)
    assert s.step(now=0).placed == ("lo-a",)
    s.submit(job("lo-b", gpus=8, replicas=2, priority=1, submitted_at=1), now=1)
    assert s.step(now=1).placed == ("lo-b",)
    where = {b.pod.job: b.node for b in s.cluster.bindings()}
    assert where["lo-a"].startswith("lf0") and where["lo-b"].startswith("lf1")
    # lo-a has the lowest priority, but its nodes are not pool b: lo-b is the victim
    s.submit(job("hi", gpus=8, priority=5, selector=POOL_B, submitted_at=2), now=2)
    r = s.step(now=2)
    assert [v.job for v in r.victims] == ["lo-b"]
    evict_victims(s, r, now=3)
    r = s.step(now=3)
    assert r.placed == ("hi",) and r.bindings[0].node.startswith("lf1")
    check_invariants(s)


@pytest.mark.parametrize("policy", ["strict-fifo", "best-effort-fifo", "backfill", "easy-backfill"])
def test_every_queueing_policy_keeps_pods_on_the_nodes_they_may_use(policy: str) -> None:
    state = _two_pools()
    s = scheduler(state, policy=policy, preemption=PreemptionPolicy())
    unlabelled = NodeSelector(terms=((_req("pool", "DoesNotExist"),),))
    for t, (jid, sel) in enumerate([("a", POOL_B), ("b", unlabelled), ("c", POOL_B), ("d", None)]):
        s.submit(job(jid, gpus=8, selector=sel, submitted_at=t, runtime=10.0), now=t)
    for t in range(4, 8):
        s.step(now=t)
    where = {b.pod.job: b.node for b in state.bindings()}
    assert sorted(where) == ["a", "b", "c", "d"]
    assert {where["a"], where["c"]} == {"lf1-n0", "lf1-n1"}
    assert {where["b"], where["d"]} == {"lf0-n0", "lf0-n1"}


# --------------------------------------------------------------------------- the invariant


_KEYS = ("pool", "rack")


@st.composite
def _labelled_cluster(draw: st.DrawFn) -> ClusterState:
    b = ClusterBuilder()
    for leaf in range(draw(st.integers(1, 3))):
        for k in range(draw(st.integers(1, 3))):
            labels = {
                key: draw(st.sampled_from(["a", "b", "1", "2"]))
                for key in _KEYS
                if draw(st.booleans())
            }
            taints = [DEDICATED] if draw(st.integers(0, 3)) == 0 else []
            b.add(node(f"lf{leaf}-n{k}", gpus=draw(st.sampled_from([2, 4, 8])),
                       model=draw(st.sampled_from(["H100", "A100"])),
                       template=None, nics=0, leaf=f"lf{leaf}", spine="sp0", superspine="ss0",
                       hbd=f"h{leaf}" if leaf == 0 and k < 2 else None,
                       labels=labels, taints=taints))  # fmt: skip
    return b.build()


_REQUIREMENTS = st.one_of(
    st.builds(_req, st.sampled_from(_KEYS), st.just("In"), st.sampled_from(["a", "b", "1"])),
    st.builds(_req, st.sampled_from(_KEYS), st.just("NotIn"), st.sampled_from(["a", "2"])),
    st.builds(_req, st.sampled_from(_KEYS), st.sampled_from(["Exists", "DoesNotExist"])),
    st.builds(_req, st.sampled_from(_KEYS), st.sampled_from(["Gt", "Lt"]), st.sampled_from(["1"])),
    st.builds(
        _req, st.just("metadata.name"), st.sampled_from(["In", "NotIn"]),
        st.sampled_from(["lf0-n0", "lf1-n1"]), field=st.just(True),
    ),
)  # fmt: skip
_SELECTORS = st.none() | st.builds(
    NodeSelector,
    terms=st.lists(st.lists(_REQUIREMENTS, min_size=1, max_size=2).map(tuple), min_size=1, max_size=2),
)  # fmt: skip
_TOLERATIONS = st.sampled_from([(), (Toleration(key="dedicated", operator="Exists"),)])
_WISHES = st.sampled_from([None, (Tier.LEAF, True), (Tier.HBD, False), (Tier.LEAF, False)])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _labelled_cluster(),
    st.lists(
        st.tuples(st.sampled_from([1, 2, 4]), st.integers(1, 3), st.integers(0, 2), _SELECTORS,
                  _TOLERATIONS, st.booleans(), _WISHES, st.sampled_from(["", "H100"])),
        min_size=1, max_size=8,
    ),
    st.sampled_from(["strict-fifo", "best-effort-fifo", "easy-backfill"]),
)  # fmt: skip
def test_no_pod_ever_runs_on_a_node_its_role_may_not_use(
    state: ClusterState,
    specs: list[tuple[int, int, int, NodeSelector | None, tuple[Toleration, ...], bool,
                      tuple[Tier, bool] | None, str]],
    policy: str,
) -> None:  # fmt: skip
    s = scheduler(state, policy=policy, preemption=PreemptionPolicy())
    jobs = {}
    for t, (gpus, replicas, prio, sel, tol, gang, wish, model) in enumerate(specs):
        tier, required = wish or (None, False)
        j = job(f"j{t}", gpus=gpus, replicas=replicas, priority=prio, selector=sel,
                tolerations=tol, gang=gang or replicas == 1, submitted_at=t, runtime=5.0,
                tier=tier, required=required, models=model or frozenset())  # fmt: skip
        jobs[j.id] = j
        s.submit(j, now=t)
        r = s.step(now=t)
        evict_victims(s, r, now=t)
    for t in range(len(specs), len(specs) + 6):
        r = s.step(now=t)
        evict_victims(s, r, now=t)
        for b in state.bindings():
            role = jobs[b.pod.job].role(b.pod.role)
            assert role.can_run_on(state.node(b.node)), (b, role)
        for jid in sorted(jobs):
            if s.queue.status(jid).phase is JobPhase.RUNNING and t % 2:
                finish(s, jid, now=t)
    check_invariants(s)


# --------------------------------------------------------------------------- changes


def test_relabelling_a_node_moves_later_placements_and_leaves_its_pods_where_they_run() -> None:
    state = _two_pools()
    s = scheduler(state)
    s.submit(job("a", gpus=4, selector=POOL_B), now=0)
    r = s.step(now=0)
    (where,) = {b.node for b in r.bindings}
    assert s.node_relabelled(where, {"pool": "c"}, (), now=1)
    assert not s.node_relabelled(where, {"pool": "c"}, (), now=1)  # nothing changed
    assert s.queue.status("a").phase is JobPhase.RUNNING  # it stays where it runs
    s.submit(job("b", gpus=4, selector=POOL_B), now=2)
    r = s.step(now=2)
    assert r.placed == ("b",) and r.bindings[0].node != where
    s.submit(job("c", gpus=4, selector=NodeSelector.labels(pool="c")), now=3)
    r = s.step(now=3)
    assert r.placed == ("c",) and r.bindings[0].node == where
    check_invariants(s)


def test_a_taint_added_to_a_node_keeps_new_pods_off_it_and_a_bad_one_changes_nothing() -> None:
    state = ClusterBuilder().leaf("lf0", nodes=2).build()
    s = scheduler(state)
    s.node_relabelled("lf0-n0", {}, [DEDICATED], now=0)
    assert state.hard_tainted_nodes == 1
    s.submit(job("a", gpus=8, replicas=2), now=1)
    assert s.step(now=1).placed == ()
    with pytest.raises(InvalidNodeError):
        s.node_relabelled("lf0-n0", {"ok": "x"}, ["not a taint"], now=2)  # type: ignore[list-item]
    assert state.node("lf0-n0").taints == (DEDICATED,) and not state.node("lf0-n0").labels
    s.node_relabelled("lf0-n0", {}, [], now=3)
    assert state.hard_tainted_nodes == 0
    assert s.step(now=3).placed == ("a",)
    check_invariants(s)


@pytest.mark.parametrize("policy", ["strict-fifo", "best-effort-fifo"])
def test_a_job_alike_but_for_its_tolerations_is_not_answered_by_the_first_jobs_failure(
    policy: str,
) -> None:
    # the cycle remembers failed placement shapes and never-fit answers for jobs alike:
    # tolerations and selectors are part of the shape
    state = ClusterBuilder().leaf("inf", nodes=1, taints=[DEDICATED]).build()
    s = scheduler(state, policy=policy, preemption=PreemptionPolicy())
    s.submit(job("plain", gpus=8, priority=1), now=0)
    s.submit(job("tolerant", gpus=8, tolerations=[Toleration(key="dedicated", operator="Exists")]),
             now=1)  # fmt: skip
    r = s.step(now=2)
    assert r.placed == ("tolerant",)
    assert r.pending["plain"].code is ReasonCode.NO_POOL  # (and it blocks no Strict FIFO)


def test_a_job_alike_but_for_its_selector_is_not_answered_by_the_first_jobs_failure() -> None:
    s = scheduler(_two_pools())
    s.submit(job("fill", gpus=8, replicas=2, selector=POOL_B), now=0)
    assert s.step(now=0).placed == ("fill",)
    s.submit(job("x", gpus=8, selector=POOL_B), now=1)  # waits: pool b is full
    s.submit(job("y", gpus=8), now=2)
    r = s.step(now=2)
    assert r.placed == ("y",) and r.bindings[0].node.startswith("lf0")
    assert r.pending["x"].code in {ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.NO_FIT}


def test_many_distinct_selectors_keep_a_bounded_number_of_allowed_node_sets() -> None:
    # a shim whose pods each name their host would otherwise keep one set per pod forever
    state = ClusterBuilder().leaf("lf0", nodes=4).build()
    placer = Placer("ebinpack")
    snap = state.snapshot()
    for i in range(700):
        sel = NodeSelector(terms=((_req("metadata.name", "In", "lf0-n1", f"h{i}", field=True),),))
        res = placer.place(job(f"j{i}", gpus=1, gpu_milli=1, selector=sel), snap)
        assert res.ok and res.bindings[0].node == "lf0-n1"
    assert len(state._allowed) <= 256
    assert len(placer._cand) <= 512


def test_the_best_fit_index_never_offers_a_partly_used_node_the_selector_excludes() -> None:
    # on a pool large enough for the two-level search, the fullest partly used node outside
    # HBDs is excluded: the per-pool best-fit index serves the restricted candidates (their
    # split by HBD included) and must skip it
    b = ClusterBuilder().leaf("lf0", nodes=100).leaf("lf1", nodes=100, labels={"pool": "b"})
    b.leaf("lf2", nodes=4, hbd="hbd0", labels={"pool": "b"})
    state = b.build()
    placer = Placer("ebinpack")
    snap = state.snapshot()
    first = placer.place(job("fill", gpus=6), snap)
    assert first.bindings[0].node.startswith("lf0")
    for i in range(3):
        res = placer.place(job(f"j{i}", gpus=1, selector=POOL_B), snap)
        assert res.ok and res.bindings[0].node.startswith("lf1"), res


@pytest.mark.parametrize(
    "wish",
    [
        pytest.param(Tier.LEAF, id="one leaf: each holds 4 allowed GPUs"),
        pytest.param(Tier.NODE, id="one node: the allowed nodes have 4 GPUs"),
        pytest.param(Tier.HBD, id="hbd nodes: one allowed, of 4 GPUs"),
    ],
)
def test_a_required_topology_no_allowed_domain_holds_is_unsatisfiable_and_blocks_nothing(
    wish: Tier,
) -> None:
    # per leaf a 4-GPU pool-b node and an 8-GPU other node: two 4-GPU pods fit every tier of
    # the pool, but no leaf, node or set of HBD nodes that pool b has
    b = ClusterBuilder()
    for k, leaf in enumerate(("lf0", "lf1")):
        place = {"leaf": leaf, "spine": "sp0", "superspine": "ss0"}
        b.add(node(f"{leaf}-b", gpus=4, template="openb-4gpu", labels={"pool": "b"},
                   hbd="h0" if k == 0 else None, **place))  # fmt: skip
        b.add(node(f"{leaf}-x", hbd=f"h{k}", **place))
    s = scheduler(b.build(), policy="strict-fifo")
    s.submit(job("big", gpus=4, replicas=2, tier=wish, required=True, selector=POOL_B), now=0)
    s.submit(job("small", gpus=8), now=1)
    r = s.step(now=2)
    assert r.pending["big"].code is ReasonCode.UNSATISFIABLE, r.pending["big"]
    assert "selector" in r.pending["big"].message
    assert r.placed == ("small",)


def test_jobs_of_ever_new_selectors_do_not_grow_the_queues_kept_shapes_without_bound() -> None:
    from kant.cycle import _SHAPES_KEPT, _JobFacts

    s = scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    for i in range(_SHAPES_KEPT + 200):
        sel = NodeSelector(terms=((_req("app", "In", f"v{i}"),),))  # matches no node
        s.submit(job(f"j{i}", gpus=1, selector=sel), now=i)
        s.step(now=i)
        s.cancel(f"j{i}", now=i)
        s.acknowledge(f"j{i}")
    kept = _JobFacts._KEPT[s.queue]
    assert len(kept.shapes) + len(kept.never_shapes) <= _SHAPES_KEPT + 4


@pytest.mark.parametrize("policy", ["easy-backfill", "conservative-backfill"])
def test_a_selected_heads_reservation_is_not_lost_to_ends_on_nodes_it_may_not_use(
    policy: str,
) -> None:
    # two pool-b nodes end at 50 and 100; forty other nodes end at 51..90, before the head's
    # start: the forecast must not spend its tries on them, or the head loses its reservation
    # and a long backfilled job takes its node
    b = ClusterBuilder().leaf("lf0", nodes=40).leaf("lf1", nodes=2, labels={"pool": "b"})
    s = scheduler(b.build(), policy=policy)
    ends = {"b1": 50.0, "b2": 100.0} | {f"f{i}": 51.0 + i for i in range(40)}
    s.submit(job("b1", gpus=8, runtime=50.0, selector=POOL_B), now=0)
    s.submit(job("b2", gpus=8, runtime=100.0, selector=POOL_B), now=0)
    unlabelled = NodeSelector(terms=((_req("pool", "DoesNotExist"),),))
    for i in range(40):
        s.submit(job(f"f{i}", gpus=8, runtime=51.0 + i, selector=unlabelled), now=0)
    assert len(s.step(now=0).placed) == 42
    s.submit(job("head", gpus=8, replicas=2, runtime=10.0, selector=POOL_B), now=0.5)
    s.submit(job("bf", gpus=8, runtime=200.0, selector=POOL_B), now=0.6)
    started: dict[str, float] = {}
    for t in range(1, 130):
        finish_due(s, ends, now=t)
        for jid in s.step(now=t).placed:
            started[jid] = t
            ends[jid] = t + {"head": 10.0, "bf": 200.0}[jid]
    assert started == {"head": 100, "bf": 110}


def test_a_job_alike_but_for_its_selector_gets_its_own_never_fits_answer() -> None:
    # x can never fit its 2 pool-b nodes; y, of the same shape, may use all 4 but 2 are busy:
    # it waits for capacity, it is not unsatisfiable
    s = scheduler(_two_pools())
    unlabelled = NodeSelector(terms=((_req("pool", "DoesNotExist"),),))
    s.submit(job("busy", gpus=8, replicas=2, selector=unlabelled), now=0)
    assert s.step(now=0).placed == ("busy",)
    s.submit(job("x", gpus=8, replicas=3, selector=POOL_B), now=1)
    anywhere = NodeSelector(terms=((_req("pool", "NotIn", "zzz"),),))
    s.submit(job("y", gpus=8, replicas=3, selector=anywhere), now=2)
    r = s.step(now=3)
    assert r.pending["x"].code is ReasonCode.UNSATISFIABLE
    assert r.pending["y"].code is not ReasonCode.UNSATISFIABLE, r.pending["y"]


def test_a_preemptor_alike_but_for_its_selector_is_not_answered_by_a_hopeless_one() -> None:
    # pool b runs a job that cannot be preempted: a pool-b preemptor is hopeless; the same
    # request on the unlabelled nodes, where a preemptible job runs, is not
    s = scheduler(_two_pools(), preemption=PreemptionPolicy())
    unlabelled = NodeSelector(terms=((_req("pool", "DoesNotExist"),),))
    s.submit(job("fixed", gpus=8, replicas=2, preemptible=False, selector=POOL_B), now=0)
    s.submit(job("lo", gpus=8, replicas=2, selector=unlabelled), now=0)
    assert set(s.step(now=0).placed) == {"fixed", "lo"}
    s.submit(job("p1", gpus=8, priority=5, selector=POOL_B), now=1)
    s.submit(job("p2", gpus=8, priority=5, selector=unlabelled), now=2)
    r = s.step(now=3)
    assert [(v.job, v.preemptor) for v in r.victims] == [("lo", "p2")]
