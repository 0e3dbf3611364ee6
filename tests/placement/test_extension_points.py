"""Placement extension points: any object with ``name`` + ``score`` is a strategy, node filters
are honoured on every search path, and the registry builds every strategy from one context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import hypothesis.strategies as hst
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from kant import Scheduler
from kant.contracts import PodView, Strategy
from kant.errors import (
    DuplicateError,
    InvalidConfigError,
    InvariantError,
    UnknownPolicyError,
    ValidationError,
)
from kant.model import Binding, Job, JobKind, PodId, ReasonCode, Taint, Tier
from kant.placement import (
    STRATEGIES,
    BaseStrategy,
    FragmentationTarget,
    Placer,
    adapt_strategy,
    make_strategy,
    register_strategy,
    strategy_names,
)
from kant.placement.fragmentation import TaskClass, workload_from_jobs
from kant.registry import BuildContext
from kant.state import ClusterState
from kant.testing import ClusterBuilder, check_invariants, job, node

FloatArray = Any
IntArray = Any


class HighestSlot:
    """A strategy that is no BaseStrategy: just a name and a score (the highest slot wins)."""

    name = "highest-slot"

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        return slots.astype(np.float64)


def hold(st: ClusterState, node_name: str, gpus: tuple[int, ...], tag: str) -> None:
    st.bind(Binding(pod=PodId(job=tag, role="w", index=0), node=node_name, gpus=gpus))


# --------------------------------------------------------------------------- plain strategies


def test_a_strategy_that_is_only_a_name_and_a_score_places_a_pod_through_the_placer() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    placer = Placer(HighestSlot())
    (b,) = placer.place(job("one", gpus=2), st.snapshot()).bindings
    assert b.node == "lf0-n2"
    assert placer.hooks.two_level is False and placer.hooks.candidate_sets is None
    assert isinstance(HighestSlot(), Strategy) and not isinstance(HighestSlot(), BaseStrategy)


def test_a_strategy_that_is_only_a_name_and_a_score_places_a_gang_in_a_topology_domain() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build()
    gang = job("g", gpus=8, replicas=2, tier=Tier.LEAF, required=True)
    res = Placer(HighestSlot()).place(gang, st.snapshot())
    # the first leaf that holds both (best fit, ties by id), its highest slot first
    assert [b.node for b in res.bindings] == ["lf0-n1", "lf0-n0"]


def test_a_plain_strategy_gets_the_default_hooks_of_base_strategy() -> None:
    hooks = adapt_strategy(HighestSlot())
    base = adapt_strategy(BaseStrategy())
    assert hooks.name == "highest-slot" and hooks.topology_default is None
    free, in_use = np.array([5, 3]), np.array([0, 1])
    assert [k.tolist() for k in hooks.group_key(free, in_use)] == [
        k.tolist() for k in base.group_key(free, in_use)
    ]
    assert hooks.domain_key(np.array([4, 2])).tolist() == [4, 2]


def test_candidate_sets_may_return_plain_strategies() -> None:
    class OddNodesFirst(BaseStrategy):
        name = "odd-first"

        def candidate_sets(
            self, ctx: PodView, slots: IntArray
        ) -> Sequence[tuple[IntArray, Strategy]]:
            return ((slots[slots % 2 == 1], HighestSlot()), (slots, self))

    st = ClusterBuilder().leaf("lf0", nodes=5).build()
    res = Placer(OddNodesFirst()).place(job("g", gpus=8, replicas=3, tier=Tier.LEAF), st.snapshot())
    # the odd nodes (n1, n3) first, highest slot first, then the rest by binpack
    assert [b.node for b in res.bindings] == ["lf0-n3", "lf0-n1", "lf0-n0"]


class Everywhere:
    """A strategy whose candidate sets ignore the pod's candidates: every node of the cluster."""

    name = "everywhere"

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        return slots.astype(np.float64)

    def candidate_sets(self, ctx: PodView, slots: IntArray) -> Sequence[tuple[IntArray, Any]]:
        return ((np.arange(ctx.snap.num_slots, dtype=np.int64), self),)


def test_candidate_sets_naming_nodes_outside_the_pods_candidates_cannot_widen_them() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2, model="H100").leaf("lf1", nodes=2, model="A100")
    st = st.build()
    res = Placer(Everywhere()).place(job("a", gpus=1, models="H100"), st.snapshot())
    assert [st.node(b.node).gpu_model for b in res.bindings] == ["H100"]
    res = Placer(Everywhere()).place(job("g", gpus=8, replicas=2, models="A100"), st.snapshot())
    assert {st.node(b.node).gpu_model for b in res.bindings} == {"A100"}


def test_candidate_sets_naming_a_tainted_node_do_not_put_an_untolerating_pod_there() -> None:
    taint = Taint(key="k", value="v", effect="NoSchedule")
    st = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2, taints=[taint]).build()
    res = Placer(Everywhere()).place(job("t", gpus=1), st.snapshot())
    assert [b.node for b in res.bindings] == ["lf0-n1"]


class HighestFirst:
    """A strategy whose one candidate set is the pod's candidates in its own order: the
    highest slot first (a gang's topology search then hands it domains in that order)."""

    name = "highest-first"
    topology_default = Tier.LEAF

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        return slots.astype(np.float64)

    def candidate_sets(self, ctx: PodView, slots: IntArray) -> Sequence[tuple[IntArray, Any]]:
        return ((np.ascontiguousarray(np.sort(slots)[::-1]), self),)


def test_candidate_sets_in_their_own_order_keep_every_candidate_node() -> None:
    # the sets were kept to the candidates by a binary search that took the candidates as
    # ascending; a leaf handed over highest first lost its nodes, and a gang that fits in a
    # leaf was refused with TOPOLOGY
    st = ClusterBuilder().leaf("lf0", nodes=3).leaf("lf1", nodes=3).build()
    g = job("g", gpus=8, replicas=2, tier=Tier.LEAF, required=True)
    res = Placer(HighestFirst()).place(g, st.snapshot())
    assert res.ok and len({st.node(b.node).leaf for b in res.bindings}) == 1


class OneBuffer:
    """A strategy that reuses one array for its candidate set, rewriting it for each pod:
    the pod's candidates the first time, every node of the cluster after."""

    name = "one-buffer"

    def __init__(self) -> None:
        self.buf: IntArray | None = None

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        return slots.astype(np.float64)  # (the highest slot wins)

    def candidate_sets(self, ctx: PodView, slots: IntArray) -> Sequence[tuple[IntArray, Any]]:
        n = ctx.snap.num_slots
        if self.buf is None:
            self.buf = np.resize(slots, n).astype(np.int64)  # (only candidates)
        else:
            self.buf[:] = np.arange(n)  # every node, in place
        return ((self.buf, self),)


def test_a_candidate_set_rewritten_in_place_is_kept_to_the_candidates_each_time() -> None:
    # the set checked last was remembered by identity: the same array, found inside the
    # candidates once and then rewritten to name every node, came back as it was checked,
    # and an H100-only pod went to an A100 node
    st = ClusterBuilder().leaf("lf0", nodes=2, model="H100").leaf("lf1", nodes=2, model="A100")
    st = st.build()
    placer = Placer(OneBuffer())
    snap = st.snapshot()
    first = placer.place(job("h1", gpus=1, models="H100"), snap)
    second = placer.place(job("h2", gpus=1, models="H100"), snap)
    assert [st.node(b.node).gpu_model for b in first.bindings] == ["H100"]
    assert [st.node(b.node).gpu_model for b in second.bindings] == ["H100"]


def test_check_invariants_notices_a_pod_bound_on_a_gpu_model_its_role_does_not_allow() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=1, model="H100").leaf("lf1", nodes=1, model="A100")
    s = Scheduler(st.build())
    s.submit(job("a", gpus=1, models="H100"), now=0)
    s.step(now=1)
    check_invariants(s)
    pod = PodId(job="a", role="worker", index=0)
    s.cluster.release(pod)
    s.cluster.bind(Binding(pod=pod, node="lf1-n0", gpus=(0,)))
    with pytest.raises(InvariantError, match="A100 node its role does not allow"):
        check_invariants(s)


def test_an_object_without_a_score_is_refused_with_a_clear_error() -> None:
    class NoScore:
        name = "nothing"

    with pytest.raises(ValidationError, match="score"):
        Placer(NoScore())  # type: ignore[arg-type]


class _Answers:
    """A strategy whose hooks answer what a test sets (wrong answers, here)."""

    name = "answers"
    two_level = True  # (so group_key is asked)

    def __init__(self, **hooks: Any) -> None:
        for k, v in hooks.items():
            setattr(self, k, v)

    def score(self, ctx: PodView, slots: IntArray) -> FloatArray:
        return np.zeros(slots.shape[0])


@pytest.mark.parametrize(
    ("hooks", "placer", "pods", "said"),
    [
        # each raised NumPy's or Python's error deep in the Placer, or placed wrongly
        ({"score": lambda ctx, slots: np.array(["a", "z"][: len(slots)])}, {}, {}, "score"),
        ({"score": lambda ctx, slots: np.ones(len(slots)) * 1j}, {}, {}, "score"),
        ({}, {"filters": [lambda ctx, slots: np.flatnonzero(np.ones(len(slots), bool))]}, {},
         "filters"),
        ({}, {"filters": [lambda ctx, slots: ["no"] * len(slots)]}, {}, "filters"),
        ({"share_device": lambda ctx, slot: -1}, {}, {"gpus": 0, "gpu_milli": 500},
         "share_device"),
        ({"share_device": lambda ctx, slot: 99}, {}, {"gpus": 0, "gpu_milli": 500},
         "share_device"),
        ({"group_key": lambda free, in_use: None}, {}, {}, "group_key"),
        ({"domain_key": lambda cap: None, "topology_default": Tier.LEAF}, {}, {"replicas": 2},
         "domain_key"),
        ({"candidate_sets": lambda ctx, slots: None}, {}, {}, "candidate_sets"),
        ({"candidate_sets": lambda ctx, slots: [(["x"], HighestSlot())]}, {}, {},
         "candidate_sets"),
    ],
)  # fmt: skip
def test_a_hook_that_answers_the_wrong_kind_is_refused_naming_it_and_changes_nothing(
    hooks: dict[str, Any], placer: dict[str, Any], pods: dict[str, Any], said: str
) -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build(),
                  placer=Placer(cast(Strategy, _Answers(**hooks)), **placer))  # fmt: skip
    s.submit(job("a", **{"gpus": 8, **pods}), now=0)
    with pytest.raises(ValidationError, match=said):
        s.step(1)
    assert s.cluster.num_pods == 0
    check_invariants(s)


# --------------------------------------------------------------------------- node filters


def _workload_jobs() -> list[Job]:
    return [job(f"w{i}", gpus=g) for i, g in enumerate([1, 2, 4, 8, 1, 1])] + [
        job("share", gpus=0, gpu_milli=500)
    ]


def _build(name: str) -> Any:
    return STRATEGIES.build(name, BuildContext(seed=3, workload=_workload_jobs()))


def _cluster() -> ClusterState:
    b = ClusterBuilder()
    for lf in range(3):
        b.leaf(f"lf{lf}", nodes=3)
    b.add(node("z0", leaf="lf9", zone="inference"))
    b.add(node("z1", leaf="lf9", zone="inference"))
    st = b.build()
    hold(st, "lf1-n0", (0, 1, 2, 3), "half")
    hold(st, "lf2-n1", (0, 1, 2, 3, 4, 5), "most")
    hold(st, "z0", (0,), "zone")
    return st


class Exclude:
    """A node filter dropping the named nodes."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.name = f"exclude{sorted(names)}"

    def __call__(self, ctx: PodView, slots: IntArray) -> Any:
        snap = ctx.snap
        return np.array([snap.name_of(int(s)) not in self.names for s in slots], dtype=bool)


JOBS = {
    "single whole-GPU pod": lambda: job("p", gpus=2),
    "single shared pod": lambda: job("p", gpus=0, gpu_milli=300),
    "inference replicas": lambda: job("p", gpus=2, replicas=3, gang=False, kind=JobKind.INFERENCE),
    "gang": lambda: job("p", gpus=4, replicas=3),
    "gang in a leaf": lambda: job("p", gpus=2, replicas=2, tier=Tier.LEAF),
}


@pytest.fixture(params=[False, True], ids=["flat", "two-level"])
def two_level(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param:
        from kant.placement import placer as placer_mod

        monkeypatch.setattr(placer_mod, "_TWO_LEVEL_MIN", 1)
    return bool(request.param)


@pytest.mark.parametrize("shape", list(JOBS))
@pytest.mark.parametrize("name", strategy_names())
def test_a_node_filter_excluding_the_chosen_nodes_is_honoured_by_every_strategy(
    name: str, shape: str, two_level: bool
) -> None:
    chosen = Placer(_build(name)).place(JOBS[shape](), _cluster().snapshot())
    assert chosen.ok
    banned = {b.node for b in chosen.bindings}
    res = Placer(_build(name), filters=[Exclude(banned)]).place(
        JOBS[shape](), _cluster().snapshot()
    )
    assert res.ok, res.unplaced
    assert not banned & {b.node for b in res.bindings}


def test_a_filter_that_leaves_no_node_gives_no_fit_naming_the_filter() -> None:
    everything = {f"lf0-n{i}" for i in range(3)}
    for j in (job("one", gpus=1), job("g", gpus=8, replicas=2)):
        st = ClusterBuilder().leaf("lf0", nodes=3).build()
        res = Placer("ebinpack", filters=[Exclude(everything)]).place(j, st.snapshot())
        assert res.reason is not None and res.reason.code is ReasonCode.NO_FIT
        assert "exclude[" in res.reason.message
        assert st.snapshot().free_gpus[:3].tolist() == [8, 8, 8]  # nothing applied


def test_a_filter_is_asked_again_about_the_node_a_gang_pod_just_took() -> None:
    def one_per_node(ctx: PodView, slots: IntArray) -> Any:
        return ctx.job_pods_on(slots) == 0

    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    gang = job("g", gpus=2, replicas=3, tier=Tier.LEAF)
    packed = Placer("ebinpack").place(gang, st.snapshot())
    assert len({b.node for b in packed.bindings}) == 1  # ebinpack co-locates the replicas
    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    apart = Placer("ebinpack", filters=[one_per_node]).place(gang, st.snapshot())
    assert sorted(b.node for b in apart.bindings) == ["lf0-n0", "lf0-n1", "lf0-n2"]
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    short = Placer("ebinpack", filters=[one_per_node]).place(gang, st.snapshot())
    assert short.reason is not None and "one_per_node" in short.reason.message


def test_a_gang_attempt_rolled_back_in_one_domain_leaves_no_pods_behind_for_the_next() -> None:
    class OnePerNode(BaseStrategy):
        name = "one-per-node"
        topology_default = Tier.LEAF

        def candidate_sets(
            self, ctx: PodView, slots: IntArray
        ) -> Sequence[tuple[IntArray, Strategy]]:
            return ((slots[ctx.job_pods_on(slots) == 0], self),)

    # every NODE-tier attempt binds one pod, then finds no second node and rolls back; the
    # LEAF tier must then see no pod of the job anywhere
    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    res = Placer(OnePerNode()).place(job("g", gpus=2, replicas=3), st.snapshot())
    assert sorted(b.node for b in res.bindings) == ["lf0-n0", "lf0-n1", "lf0-n2"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=hst.sampled_from(strategy_names()),
    banned=hst.sets(hst.integers(0, 7), max_size=5),
    gpus=hst.sampled_from([1, 2, 4, 8]),
    replicas=hst.integers(1, 4),
    gang=hst.booleans(),
)
def test_no_strategy_ever_uses_a_node_a_filter_drops(
    name: str, banned: set[int], gpus: int, replicas: int, gang: bool
) -> None:
    st = ClusterBuilder().leaf("lf0", nodes=4).leaf("lf1", nodes=4).build()
    hold(st, "lf0-n1", (0, 1, 2), "resident")
    names = {f"lf{i // 4}-n{i % 4}" for i in banned}
    j = job("p", gpus=gpus, replicas=replicas, gang=gang if replicas > 1 else None)
    res = Placer(_build(name), filters=[Exclude(names)]).place(j, st.snapshot())
    assert not names & {b.node for b in res.bindings}


# --------------------------------------------------------------------------- registry


def test_the_registry_builds_packing_baselines_with_the_seed_and_workload_of_the_context() -> None:
    jobs = _workload_jobs()
    ctx = BuildContext(seed=11, workload=jobs)
    bestfit = STRATEGIES.build("bestfit", ctx)
    assert bestfit.seed == 11  # type: ignore[attr-defined]
    fgd = STRATEGIES.build("fgd", ctx)
    assert fgd.seed == 11  # type: ignore[attr-defined]
    assert fgd.target.classes == workload_from_jobs(jobs)  # type: ignore[attr-defined]
    assert STRATEGIES.uses("fgdpp") == ("seed", "workload")
    assert STRATEGIES.uses("random") == ("seed",) and STRATEGIES.uses("ebinpack") == ()


def test_fgdpp_takes_its_secondary_workload_from_a_fragmentation_target() -> None:
    primary = (TaskClass(resources=job("a", gpus=1).roles[0].resources),)
    secondary = (TaskClass(resources=job("b", gpus=2).roles[0].resources, weight=2.0),)
    target = FragmentationTarget(classes=primary, secondary=secondary)
    fgdpp = STRATEGIES.build("fgdpp", BuildContext(seed=5, workload=target))
    assert fgdpp.target.classes == primary  # type: ignore[attr-defined]
    assert fgdpp._secondary_in == secondary  # type: ignore[attr-defined]


def test_one_build_context_builds_every_registered_strategy() -> None:
    ctx = BuildContext(seed=1, workload=_workload_jobs(), cluster=_cluster().nodes())
    for name in strategy_names():
        assert isinstance(STRATEGIES.build(name, ctx), Strategy)


def test_register_strategy_refuses_a_duplicate_name_and_passes_uses() -> None:
    with pytest.raises(DuplicateError):
        register_strategy("binpack", BaseStrategy)
    with pytest.raises(DuplicateError):
        register_strategy("EBinpack", BaseStrategy)
    with pytest.raises(UnknownPolicyError):
        make_strategy("seeded-highest")

    class Seeded(HighestSlot):
        def __init__(self, *, seed: int) -> None:
            self.seed = seed

    register_strategy("test-seeded-highest", Seeded, uses=("seed",))
    try:
        built = STRATEGIES.build("test-seeded-highest", BuildContext(seed=9))
        assert built.seed == 9  # type: ignore[attr-defined]
        assert make_strategy("test-seeded-highest", seed=2).seed == 2  # type: ignore[attr-defined]
    finally:
        STRATEGIES._entries.pop("test-seeded-highest")


@pytest.mark.parametrize("bad", [None, b"bs", "", "my+plug", "a,b", " pad", "a b", 3])
def test_a_name_a_policy_set_label_could_not_name_is_refused_and_the_registry_unchanged(
    bad: Any,
) -> None:
    before = strategy_names()
    with pytest.raises(InvalidConfigError) as err:
        register_strategy(bad, HighestSlot)
    assert err.value.field == "name"
    assert strategy_names() == before


def test_a_factory_that_is_not_callable_is_refused_and_the_registry_unchanged() -> None:
    with pytest.raises(InvalidConfigError) as err:
        register_strategy("not-a-factory", cast(Any, 3))
    assert err.value.field == "factory"
    assert "not-a-factory" not in STRATEGIES


@pytest.mark.parametrize("uses", [None, "seed", 3, ("seed", "epoch"), (["seed"],)])
def test_uses_that_are_not_context_field_names_are_refused_naming_what_was_given(
    uses: Any,
) -> None:
    # (None and 3 were a bare TypeError, "seed" a refusal of 's')
    with pytest.raises(InvalidConfigError) as err:
        register_strategy("test-uses", HighestSlot, uses=uses)
    assert err.value.field == "uses" and err.value.value == uses
    assert "test-uses" not in STRATEGIES


@pytest.mark.parametrize("name", [3, None, ["binpack"]])
def test_asking_the_uses_of_what_is_no_name_is_an_unknown_policy(name: Any) -> None:
    with pytest.raises(UnknownPolicyError):  # (was an AttributeError or a TypeError)
        STRATEGIES.uses(name)


class Scores:
    """A strategy whose score is ``answer(slots)``."""

    def __init__(self, name: str, answer: Any) -> None:
        self.name = name
        self.answer = answer

    def score(self, ctx: PodView, slots: IntArray) -> Any:
        return self.answer(slots)


@pytest.mark.parametrize(
    "answer",
    [
        lambda s: np.arange(s.shape[0] + 5, dtype=np.float64),
        lambda s: s[:-1].astype(np.float64),
        lambda s: None,
        lambda s: 1.0,
    ],
    ids=["too-long", "too-short", "none", "scalar"],
)
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_strategy_giving_other_than_one_score_per_slot_is_refused_naming_it(
    answer: Any, replicas: int
) -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build()
    with pytest.raises(ValidationError, match="odd-scores") as err:
        Placer(Scores("odd-scores", answer)).place(
            job("a", gpus=2, replicas=replicas), st.snapshot()
        )
    assert err.value.field == "strategy"


@pytest.mark.parametrize("bulk", [True, False])
def test_a_strategy_scoring_a_node_nan_is_refused_not_given_the_pod(bulk: bool) -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build()
    nan = Scores("nan-scores", lambda s: np.where(s == 3, np.nan, s.astype(np.float64)))
    nan.fills_node_first = bulk  # type: ignore[attr-defined]  # (True: the bulk fill)
    with pytest.raises(ValidationError, match="NaN"):
        Placer(nan).place(job("a", gpus=2, replicas=2), st.snapshot())
    with pytest.raises(ValidationError, match="NaN"):
        Placer(nan).place(job("b", gpus=2), st.snapshot())


def test_a_strategy_giving_a_list_of_one_score_per_slot_is_read_as_an_array() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    listed = Scores("listed", lambda s: [float(x) for x in s])
    assert [b.node for b in Placer(listed).place(job("a", gpus=8), st.snapshot()).bindings] == [
        "lf0-n1"
    ]
