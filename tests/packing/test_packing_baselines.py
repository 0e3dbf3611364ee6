"""Each packing baseline's defining preference, on tiny hand-made clusters.

Nodes are named for what they hold; every scenario places one pod with one policy and checks
the node (and, for shared pods, the GPU) it lands on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from kant.errors import ValidationError
from kant.metrics.fragmentation import TaskClass, compile_workload
from kant.model import Binding, NodeSpec, PodId, Resources
from kant.placement import Placer, make_strategy
from kant.placement.strategies import PACKING_STRATEGIES
from kant.placement.strategies.fgd import (
    gpu_cpu_share,
    refill_fragmentation,
    scarcity_weighted,
)
from kant.state import ClusterState
from kant.testing import job, node

_SEQ = iter(range(1_000_000))


def gpu_node(name: str, gpus: int = 4, *, cpu: int = 64_000, mem: int = 256_000) -> NodeSpec:
    return node(name, gpus=gpus, model="G", cpu_milli=cpu, memory_mib=mem, template=None, nics=0)


def occupy(
    state: ClusterState,
    name: str,
    gpus: Sequence[int] = (),
    *,
    milli: int = 1000,
    cpu: int = 0,
) -> None:
    """Bind a filler pod holding ``milli`` on each of ``gpus`` (and ``cpu``) on ``name``."""
    state.bind(
        Binding(
            pod=PodId(job=f"filler{next(_SEQ)}", role="w", index=0),
            node=name,
            gpus=tuple(gpus),
            gpu_milli=milli,
            cpu_milli=cpu,
        )
    )


def place(
    state: ClusterState, policy: str, *, gpus: int = 1, milli: int = 0, cpu: int = 0, **kw: Any
) -> Binding:
    placer = Placer(make_strategy(policy, **kw))
    result = placer.place(job("p", gpus=gpus, gpu_milli=milli, cpu_milli=cpu), state.snapshot())
    assert result.ok, result.unplaced
    (binding,) = result.bindings
    return binding


def workload(*classes: tuple[int, int, float]) -> tuple[TaskClass, ...]:
    """Task classes from (whole GPUs, share milli, weight)."""
    return tuple(
        TaskClass(resources=Resources(gpus=g, gpu_milli=m), weight=w) for g, m, w in classes
    )


# --------------------------------------------------------------------------- node choice


def test_best_fit_picks_the_node_with_the_least_left_after_placement() -> None:
    st = ClusterState([gpu_node("empty"), gpu_node("half-used"), gpu_node("one-free")])
    occupy(st, "half-used", (0, 1))
    occupy(st, "one-free", (0, 1, 2))
    assert place(st, "bestfit", ties="first").node == "one-free"


def test_best_fit_counts_cpu_left_too() -> None:
    st = ClusterState([gpu_node("cpu-rich", cpu=128_000), gpu_node("cpu-poor", cpu=16_000)])
    assert place(st, "bestfit", cpu=8_000, ties="first").node == "cpu-poor"


def test_dot_product_picks_the_node_whose_free_resources_align_least_with_the_request() -> None:
    # a GPU-heavy pod: the node with the least free GPU has the smallest dot product
    st = ClusterState([gpu_node("four-free"), gpu_node("two-free")])
    occupy(st, "two-free", (0, 1))
    assert place(st, "dotprod", ties="first").node == "two-free"


def test_gpu_packing_prefers_a_partly_used_gpu() -> None:
    st = ClusterState([gpu_node("fresh"), gpu_node("shared"), gpu_node("used-whole")])
    occupy(st, "shared", (2,), milli=500)
    occupy(st, "used-whole", (0,))
    b = place(st, "gpupacking", milli=300, ties="first")
    assert (b.node, b.gpus) == ("shared", (2,))


def test_gpu_packing_puts_whole_gpu_pods_on_used_nodes_before_free_ones() -> None:
    st = ClusterState([gpu_node("fresh"), gpu_node("used")])
    occupy(st, "used", (0,))
    assert place(st, "gpupacking", gpus=2, ties="first").node == "used"


def test_gpu_clustering_puts_a_pod_next_to_pods_of_its_own_kind() -> None:
    st = ClusterState([gpu_node("fresh"), gpu_node("two-gpu-pods"), gpu_node("share-pods")])
    occupy(st, "two-gpu-pods", (0, 1))
    occupy(st, "share-pods", (0,), milli=500)
    assert place(st, "gpuclustering", gpus=2, ties="first").node == "two-gpu-pods"
    assert place(st, "gpuclustering", milli=200, ties="first").node == "share-pods"


def test_gpu_clustering_prefers_an_idle_node_to_one_of_another_kind() -> None:
    st = ClusterState([gpu_node("share-pods"), gpu_node("fresh")])
    occupy(st, "share-pods", (0,), milli=500)
    assert place(st, "gpuclustering", gpus=1, ties="first").node == "fresh"


def test_first_fit_takes_the_first_feasible_node() -> None:
    st = ClusterState([gpu_node("full", gpus=1), gpu_node("second"), gpu_node("third")])
    occupy(st, "full", (0,))
    assert place(st, "firstfit").node == "second"


def test_random_placement_is_deterministic_per_seed_and_spreads() -> None:
    names = [f"n{i}" for i in range(16)]
    picks = set()
    for seed in range(12):
        st = ClusterState([gpu_node(n) for n in names])
        first = place(st, "random", seed=seed).node
        again = place(ClusterState([gpu_node(n) for n in names]), "random", seed=seed).node
        assert first == again
        picks.add(first)
    assert len(picks) > 3


@pytest.mark.parametrize("policy", ["bestfit", "dotprod", "gpupacking", "gpuclustering"])
def test_a_baselines_tie_order_on_a_cluster_is_the_same_after_it_placed_on_a_larger_one(
    policy: str,
) -> None:
    # the default tie rule is a fixed random order of the cluster's nodes, drawn from the
    # seed: a strategy (or placer) kept from a larger cluster must not bring that one's
    # order to the next, so the same cluster and seed give the same node either way
    def small() -> ClusterState:
        return ClusterState([gpu_node(f"n{i}") for i in range(4)])

    kept = Placer(make_strategy(policy))
    kept.place(job("p", gpus=1), ClusterState([gpu_node(f"m{i}") for i in range(64)]).snapshot())
    after = [b.node for b in kept.place(job("p", gpus=1), small().snapshot()).bindings]
    assert after == [place(small(), policy).node]


# --------------------------------------------------------------------------- FGD


def test_fgd_puts_a_shared_pod_where_it_removes_an_unusable_share() -> None:
    # the workload runs 600-milli tasks: 400 milli left on a GPU is a fragment; filling it
    # shrinks fragmentation, while a fresh GPU would keep 600 usable (no change)
    st = ClusterState([gpu_node("fresh"), gpu_node("hole")])
    occupy(st, "hole", (1,), milli=600)
    wl = workload((0, 600, 1.0))
    b = place(st, "fgd", milli=400, workload=wl, ties="first")
    assert (b.node, b.gpus) == ("hole", (1,))


def test_fgd_chooses_the_gpu_whose_remaining_share_still_fits_the_workload() -> None:
    # best fit would take GPU 1 (the fuller); FGD keeps 700 free there for a 600 task
    st = ClusterState([gpu_node("only", gpus=2)])
    occupy(st, "only", (1,), milli=300)
    wl = workload((0, 600, 1.0))
    assert place(st, "fgd", milli=300, workload=wl, ties="first").gpus == (0,)
    st2 = ClusterState([gpu_node("only", gpus=2)])
    occupy(st2, "only", (1,), milli=300)
    assert place(st2, "bestfit", milli=300, ties="first").gpus == (1,)


def test_fgd_keeps_a_whole_node_free_for_whole_node_tasks() -> None:
    # half the workload needs 4 GPUs: a 1-GPU pod goes to the node already broken up
    st = ClusterState([gpu_node("whole"), gpu_node("broken")])
    occupy(st, "broken", (0,))
    wl = workload((4, 0, 0.5), (1, 0, 0.5))
    assert place(st, "fgd", workload=wl, ties="first").node == "broken"


def test_fgd_needs_a_target_workload() -> None:
    with pytest.raises(ValidationError, match="workload"):
        make_strategy("fgd")


@pytest.mark.parametrize("policy", ["fgd", "fgdpp"])
@pytest.mark.parametrize(
    ("workload", "field"),
    [
        ("abc", "'workload'"),
        (5, "'workload'"),
        ([1], r"'workload\[0\]'"),
        ([(Resources(gpus=1), -1)], "'weight'"),
        ([(Resources(gpus=1), float("nan"))], "'weight'"),
        ([("x", 1)], "'resources'"),
    ],
    ids=["a-string", "an-int", "not-a-class", "negative-weight", "nan-weight", "no-resources"],
)
def test_a_target_workload_is_checked_when_the_strategy_is_built(
    policy: str, workload: Any, field: str
) -> None:
    # (accepted: the error came at each cycle's first placement, so the scheduler never
    # scheduled; an int was a TypeError)
    with pytest.raises(ValidationError, match=f"field {field} ="):
        make_strategy(policy, workload=workload)


@pytest.mark.parametrize("log_keep", [1 << 16, 1], ids=["change log", "log always too old"])
@pytest.mark.parametrize("policy", ["fgd", "fgdpp"])
def test_fgd_scores_match_a_fresh_instance_after_changes(
    policy: str, log_keep: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-node score caches only reuse values of rows that did not change, whether the
    changed rows come from the snapshot's change log or from comparing every row."""
    import kant.state.snapshot

    monkeypatch.setattr(kant.state.snapshot, "_CHANGE_LOG_KEEP", log_keep)
    wl = workload((0, 500, 0.5), (1, 0, 0.3), (2, 0, 0.2))
    st = ClusterState([gpu_node(f"n{i}") for i in range(6)])
    strat = make_strategy(policy, workload=wl, ties="first")
    placer = Placer(strat)
    rng = np.random.default_rng(5)
    for i in range(30):
        milli = int(rng.choice([0, 300, 500]))
        j = job(f"j{i}", gpus=1, gpu_milli=milli)
        result = placer.place(j, st.snapshot())
        for b in result.bindings:
            st.bind(b)
        snap = st.snapshot()
        ctx = _ctx(snap, j)
        slots = np.flatnonzero(snap.cols.alive[: snap.num_slots])
        fresh = make_strategy(policy, workload=wl, ties="first")
        np.testing.assert_array_equal(strat.points(ctx, slots), fresh.points(ctx, slots))


# --------------------------------------------------------------------------- fgdpp


def test_refill_fragmentation_counts_the_gpus_repeated_tasks_could_not_use() -> None:
    def refill(classes: Sequence[TaskClass], gpu_free: list[int], cpu: int, pool: int = 0) -> float:
        cw = compile_workload(classes, ["G", "H"])
        g = np.array([gpu_free], dtype=np.int64)
        one = np.array([cpu], dtype=np.int64)
        mem = np.array([10**9], dtype=np.int64)
        return float(refill_fragmentation(g, one, mem, np.array([pool]), cw)[0])

    cpu_bound = TaskClass(resources=Resources(gpus=1, cpu_milli=4000))
    # four free GPUs but CPU for two more tasks: two GPUs can never be used
    assert refill([cpu_bound], [1000] * 4, cpu=10_000) == 2000
    assert refill([cpu_bound], [1000] * 4, cpu=16_000) == 0
    # 600-milli shares: one fits on each of the two GPUs with 1000 free, none on the 500
    share = TaskClass(resources=Resources(gpu_milli=600))
    assert refill([share], [1000, 500, 1000, 0], cpu=0) == 2500 - 2 * 600
    # classes are weighted by popularity; a class barred by GPU model counts everything free
    barred = TaskClass(resources=Resources(gpus=1), weight=3.0, gpu_models={"H"})
    assert refill([cpu_bound, barred], [1000] * 4, cpu=10_000) == 0.25 * 2000 + 0.75 * 4000


def test_fgdpp_breaks_fgd_ties_toward_the_node_whose_cpu_lasts_for_more_tasks() -> None:
    # the workload's tasks take 1 GPU and 8 cores; the pod takes 1 GPU and 16 cores.
    # On either node another task still fits afterwards, so FGD sees no fragmentation and
    # ties; on "short" the pod leaves CPU for only 2 more tasks on its 3 GPUs, on "roomy" 3.
    def cluster() -> ClusterState:
        return ClusterState([gpu_node("short", cpu=32_000), gpu_node("roomy")])

    wl = (TaskClass(resources=Resources(gpus=1, cpu_milli=8000)),)
    assert place(cluster(), "fgd", cpu=16_000, workload=wl, ties="first").node == "short"
    assert place(cluster(), "fgdpp", cpu=16_000, workload=wl, ties="first").node == "roomy"


def test_fgdpp_puts_a_share_on_the_gpu_where_more_tasks_still_fit_afterwards() -> None:
    # 400-milli tasks; free 1000 / 700 / 600. A 300-milli pod on GPU 2 would leave 300, a
    # fragment, so FGD ties GPUs 0 and 1 and takes GPU 0 (1000 -> 700: one 400 task and
    # 300 wasted). On GPU 1 (700 -> 400) one task fits with nothing wasted: fgdpp's pick,
    # made once for scoring the node and reused for the binding.
    def cluster() -> ClusterState:
        st = ClusterState([gpu_node("only", gpus=3)])
        occupy(st, "only", (1,), milli=300)
        occupy(st, "only", (2,), milli=400)
        return st

    wl = workload((0, 400, 1.0))
    assert place(cluster(), "fgd", milli=300, workload=wl, ties="first").gpus == (0,)
    assert place(cluster(), "fgdpp", milli=300, workload=wl, ties="first").gpus == (1,)
    # asked directly, with nothing scored before, it makes the same choice
    st = cluster()
    strat = make_strategy("fgdpp", workload=wl)
    assert strat.share_device(_ctx(st.snapshot(), job("p", gpus=1, gpu_milli=300)), 0) == 1


def test_fgdpp_prefers_a_node_already_in_use_when_all_else_ties() -> None:
    def cluster() -> ClusterState:
        st = ClusterState([gpu_node("idle"), gpu_node("used")])
        occupy(st, "used", cpu=1000)  # a CPU-only pod: no GPU, no effect on the workload
        return st

    wl = workload((1, 0, 1.0))
    assert place(cluster(), "fgd", workload=wl, ties="first").node == "idle"
    assert place(cluster(), "fgdpp", workload=wl, ties="first").node == "used"


def test_a_cpu_only_pod_counts_only_the_gpu_tasks_share_of_a_nodes_cpu() -> None:
    # half the workload's CPU demand is CPU-only tasks, so GPU tasks can count on half of a
    # node's CPU. The pod takes 8 cores. On "roomy" (48 cores) that leaves 40 -> 20 for GPU
    # tasks: 2 of its 4 GPUs stay usable instead of 3. On "tight" (40 cores) 20 -> 16: 2
    # either way. Counting all the CPU, both nodes keep all 4 GPUs usable and tie.
    def cluster() -> ClusterState:
        return ClusterState([gpu_node("roomy", cpu=48_000), gpu_node("tight", cpu=40_000)])

    wl = (
        TaskClass(resources=Resources(gpus=1, cpu_milli=8000), weight=0.5),
        TaskClass(resources=Resources(cpu_milli=8000), weight=0.5),
    )
    kw: dict[str, Any] = {"gpus": 0, "cpu": 8000, "workload": wl, "ties": "first"}
    assert place(cluster(), "fgdpp", cpu_share=False, **kw).node == "roomy"  # a tie: slot 0
    assert place(cluster(), "fgdpp", **kw).node == "tight"
    assert gpu_cpu_share(compile_workload(wl, ["G"])) == 0.5
    # a GPU pod is judged on the whole CPU, as before
    gpu_kw: dict[str, Any] = {"gpus": 1, "cpu": 8000, "workload": wl, "ties": "first"}
    assert (
        place(cluster(), "fgdpp", **gpu_kw).node
        == place(cluster(), "fgdpp", cpu_share=False, **gpu_kw).node
    )


def test_fgdpp_tells_a_used_node_from_an_idle_one_with_the_same_free_resources() -> None:
    # 20 idle 32-core nodes, then 20 64-core nodes with 32 cores held: the same free rows
    # (scored once per distinct row), but only the latter are in use
    st = ClusterState([gpu_node(f"idle{i}", cpu=32_000) for i in range(20)])
    for i in range(20):
        st.add_node(gpu_node(f"used{i}"))
        occupy(st, f"used{i}", cpu=32_000)
    wl = workload((1, 0, 1.0))
    assert place(st, "fgdpp", workload=wl, ties="first").node == "used0"


def test_scarcity_weights_favour_classes_few_nodes_can_host() -> None:
    # 8-GPU tasks fit only on the two 8-GPU nodes (16 of 28 GPUs), 1-GPU tasks anywhere
    st = ClusterState([gpu_node(f"big{i}", gpus=8) for i in range(2)])
    for i in range(6):
        st.add_node(gpu_node(f"small{i}", gpus=2))
    cw = compile_workload(workload((8, 0, 1.0), (1, 0, 1.0), (0, 0, 1.0)), ["G"])
    weighted = scarcity_weighted(cw, st.snapshot())
    # the CPU-only class is dropped; 1 x 28/16 against 1 x 28/28, normalised
    assert len(weighted.classes) == 2
    np.testing.assert_allclose(weighted.weight, [1.75 / 2.75, 1 / 2.75])


def _ctx(snap: Any, j: Any) -> Any:
    from kant.placement import PodContext, PodRequest

    role = j.roles[0]
    return PodContext(snap=snap, job=j, role=role, req=PodRequest.of(role.resources), on_node={})


# --------------------------------------------------------------------------- ties


@pytest.mark.parametrize(
    ("ties", "varies_per_seed", "varies_per_call"),
    [
        pytest.param("first", False, False, id="first: always the lowest slot"),
        pytest.param("order", True, False, id="order: a fixed node order drawn from the seed"),
        pytest.param("random", True, True, id="random: a fresh draw at every decision"),
    ],
)
def test_ties_are_broken_by_the_chosen_rule(
    ties: str, varies_per_seed: bool, varies_per_call: bool
) -> None:
    names = [f"n{i:02d}" for i in range(24)]

    def picks(seed: int) -> list[str]:
        placer = Placer(make_strategy("bestfit", seed=seed, ties=ties))
        st = ClusterState([gpu_node(n) for n in names])
        out = []
        for i in range(3):
            snap = st.snapshot()
            r = placer.place(job(f"j{i}", gpus=0, cpu_milli=1000), snap)
            out.append(r.bindings[0].node)
            # undo so that every call sees the same (all-tied) cluster
            st = ClusterState([gpu_node(n) for n in names])
        return out

    a, b = picks(1), picks(2)
    assert a == picks(1)  # deterministic
    assert (a != b) == varies_per_seed
    assert (len(set(a)) > 1) == varies_per_call
    if ties == "first":
        assert a == ["n00"] * 3


def test_an_unknown_tie_rule_is_rejected() -> None:
    with pytest.raises(ValidationError, match="ties"):
        make_strategy("bestfit", ties="sometimes")


def test_every_packing_policy_is_registered_and_flat() -> None:
    for cls in PACKING_STRATEGIES:
        s = make_strategy(cls.name, workload=workload((1, 0, 1.0)))
        assert type(s) is cls
        assert cls.two_level is False and cls.topology_default is None


def test_a_growth_of_zero_scores_the_same_whatever_the_float_noise() -> None:
    # fragmentation is a weighted sum from a matrix product: its last bits depend on the
    # batch; a zero growth must score 50 (sigmoid(0)), not 49, whatever the noise
    fgd = make_strategy("fgd", workload=workload((1, 0, 1.0)))
    pts = fgd.growth_points(np.array([0.0, 4.5e-13, -4.5e-13, 1.0]))
    assert pts.tolist() == [50.0, 50.0, 50.0, 49.0]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"jobs": "x"}, "jobs"),
        ({"jobs": [1]}, "jobs"),
        ({"popularity": "0.5"}, "popularity"),
        ({"popularity": None}, "popularity"),
        ({"popularity": True}, "popularity"),
        ({"popularity": float("nan")}, "popularity"),
    ],
)
def test_a_workload_from_jobs_names_jobs_or_a_popularity_of_the_wrong_kind(
    kw: dict[str, Any], field: str
) -> None:
    # (AttributeError or TypeError; popularity=True was taken as 1)
    from kant.metrics import workload_from_jobs
    from kant.testing import job

    args: dict[str, Any] = {"jobs": [job("a", gpus=1)], **kw}
    jobs = args.pop("jobs")
    with pytest.raises(ValidationError, match=f"field '{field}' ="):
        workload_from_jobs(jobs, **args)


def test_a_secondary_workload_is_named_as_the_secondary() -> None:
    from kant.placement import FragmentationTarget

    ok = [(Resources(gpus=1), 1.0)]
    for bad, field in (((), "'secondary'"), ([5], r"'secondary\[0\]'")):
        with pytest.raises(ValidationError, match=f"field {field} ="):
            FragmentationTarget(classes=ok, secondary=bad)
