"""Seeded synthetic workloads keep the properties they document."""

from __future__ import annotations

from collections import Counter

import pytest

from kant.errors import ValidationError
from kant.model import JobKind, Tier
from kant.sim.workloads import (
    INFERENCE_POOLS,
    describe_workload,
    inference_cluster_nodes,
    inference_workload,
    paper_training_workload,
    tenant_quotas,
)
from kant.topology import ClusterDescription


@pytest.fixture(scope="module")
def training() -> list:
    return paper_training_workload()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_training_workload_is_mostly_small_jobs_but_mostly_large_job_gpu_time(
    seed: int,
) -> None:
    jobs = paper_training_workload(seed=seed)
    stats = describe_workload(jobs, cluster_gpus=8000)
    assert stats.jobs == 20_000
    assert stats.share_jobs_below_8_gpus > 0.90
    assert stats.gpu_time_share_256_plus > 0.50
    assert 0.9 <= stats.offered_load <= 1.1


def test_training_sizes_span_1_to_2048_gpus_as_8_gpu_pods(training: list) -> None:
    sizes = Counter(j.total_milli // 1000 for j in training)
    assert set(sizes) == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}
    for j in training:
        g = j.total_milli // 1000
        (role,) = j.roles
        assert j.gang and j.kind is JobKind.TRAINING and j.runtime_estimate
        if g <= 8:
            assert role.replicas == 1 and role.topology is None
        else:
            assert role.resources.gpus == 8 and role.replicas == g // 8
            assert role.topology is not None and role.topology.tier is Tier.LEAF
            assert not role.topology.required


def test_training_jobs_come_sorted_with_priorities_and_tenants(training: list) -> None:
    times = [j.submitted_at for j in training]
    assert times == sorted(times) and times[0] == 0.0
    assert [j.id for j in training[:2]] == ["train-00000", "train-00001"]
    assert {j.priority for j in training} == {0, 1, 2}
    assert all(j.preemptible == (j.priority < 2) for j in training)
    assert len({j.tenant for j in training}) == 5
    big = [j.runtime_estimate for j in training if j.total_milli >= 256_000]
    small = [j.runtime_estimate for j in training if j.total_milli == 1000]
    assert sorted(big)[len(big) // 2] > sorted(small)[len(small) // 2]  # larger runs longer


def test_the_same_seed_gives_the_same_jobs_and_another_seed_does_not(training: list) -> None:
    assert paper_training_workload(seed=0) == training
    assert paper_training_workload(n_jobs=50, seed=1) != paper_training_workload(n_jobs=50)


def test_the_offered_load_follows_the_load_argument() -> None:
    jobs = paper_training_workload(n_jobs=2000, seed=5, load=0.5, cluster_gpus=1000)
    assert describe_workload(jobs, 1000).offered_load == pytest.approx(0.5, rel=1e-3)
    nics = paper_training_workload(n_jobs=500, seed=5, rdma_nics_per_pod=8, cpu_milli_per_gpu=1)
    multi = [j for j in nics if j.num_pods > 1]
    assert multi and all(j.roles[0].resources.rdma_nics == 8 for j in multi)
    assert all(j.roles[0].resources.rdma_nics == 0 for j in nics if j.num_pods == 1)


def test_bad_generator_arguments_are_rejected() -> None:
    with pytest.raises(ValidationError):
        paper_training_workload(n_jobs=0)
    with pytest.raises(ValidationError):
        paper_training_workload(n_jobs=5, load=0)
    with pytest.raises(ValidationError):
        paper_training_workload(n_jobs=5, sizes={0: 1.0})
    with pytest.raises(ValidationError):
        inference_workload(n_jobs=5, high_priority_share=2)
    with pytest.raises(ValidationError):
        inference_workload(n_jobs=5, pools={"T4": 8}, tenants={"a": {"T4": 1.0}})


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("runtime_sigma", {"runtime_sigma": float("nan")}),
        ("runtime_sigma", {"runtime_sigma": float("inf")}),
        ("runtime_sigma", {"runtime_sigma": -1.0}),
        ("max_runtime", {"min_runtime": 100.0, "max_runtime": 10.0}),
    ],
)
def test_a_training_workload_with_a_runtime_spread_it_cannot_draw_is_refused_naming_it(
    field: str, kw: dict
) -> None:
    # a NaN sigma passed the check (NaN < 0 is false) and failed later as an invalid job's
    # submitted_at; min > max was reported as a bad runtime_sigma
    with pytest.raises(ValidationError) as e:
        paper_training_workload(n_jobs=20, **kw)
    assert e.value.field == field


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        # a pod shape is GPU milli: a share in 1..999 or whole GPUs (a multiple of 1000)
        ("shapes[L40]", {"shapes": {"L40": {0.5: 1.0}, "A100": {1000: 1.0}}}),  # (0 GPUs)
        ("shapes[L40]", {"shapes": {"L40": {1500: 1.0}, "A100": {1000: 1.0}}}),  # (1 GPU)
        ("shapes[L40]", {"shapes": {"L40": {0: 1.0}, "A100": {1000: 1.0}}}),
        ("shapes[L40]", {"shapes": {"L40": {250.7: 1.0}, "A100": {1000: 1.0}}}),
        ("shapes[L40]", {"shapes": {"L40": {True: 1.0}, "A100": {1000: 1.0}}}),
        ("shapes[L40]", {"shapes": {"L40": {-500: 1.0}, "A100": {1000: 1.0}}}),
        ("replicas", {"replicas": {1.5: 1.0}}),  # (1 replica)
        ("lifetime_sigma", {"lifetime_sigma": float("nan")}),
        ("lifetime_sigma", {"lifetime_sigma": -1.0}),
        ("max_lifetime", {"min_lifetime": 100.0, "max_lifetime": 1.0}),
    ],
)
def test_an_inference_workload_with_a_pod_shape_or_lifetime_it_cannot_honour_is_refused(
    field: str, kw: dict
) -> None:
    # a share of half a GPU written as 0.5 became a pod of no GPU, 1500 milli one GPU and
    # 1.5 replicas one: a workload other than the one asked, with a wrong offered load
    with pytest.raises(ValidationError) as e:
        inference_workload(n_jobs=20, **kw)
    assert e.value.field == field


def test_tenant_quotas_divide_each_pool_exactly() -> None:
    q = tenant_quotas()
    assert q == {
        "search": {"L40": 58, "A100": 24},
        "ads": {"L40": 48},
        "recsys": {"L40": 38, "A100": 15},
        "chat": {"L40": 19, "A100": 43},
        "vision": {"L40": 29, "A100": 14},
    }
    for model, size in INFERENCE_POOLS.items():
        assert sum(per.get(model, 0) for per in q.values()) == size
    assert tenant_quotas({"A100": 10}, {"x": {"A100": 1}, "y": {"A100": 2}}) == {
        "x": {"A100": 3},
        "y": {"A100": 7},
    }


@pytest.mark.parametrize(
    ("field", "pools", "tenants"),
    [
        ("pools[L40]", {"L40": -8}, {"a": {"L40": 1.0}}),  # (negative quotas)
        ("pools[L40]", {"L40": 8.5}, {"a": {"L40": 1.0}}),  # (a TypeError)
        ("pools[L40]", {"L40": float("nan")}, {"a": {"L40": 1.0}}),
        ("pools[L40]", {"L40": True}, {"a": {"L40": 1.0}}),
        ("tenants[a][L40]", {"L40": 8}, {"a": {"L40": float("nan")}, "b": {"L40": 1.0}}),
        ("tenants[a][L40]", {"L40": 8}, {"a": {"L40": -1.0}, "b": {"L40": 1.0}}),
        ("tenants[a][L40]", {"L40": 8}, {"a": {"L40": "1"}}),
    ],
)
def test_quotas_of_a_pool_that_is_no_gpu_count_or_of_a_share_that_is_no_weight_are_refused(
    field: str, pools: dict, tenants: dict
) -> None:
    # a NaN or negative share left its tenant out without a word; a negative pool gave
    # negative quotas, and the inference workload on it failed in NumPy
    with pytest.raises(ValidationError) as e:
        tenant_quotas(pools, tenants)
    assert e.value.field == field
    with pytest.raises(ValidationError) as e:
        inference_workload(n_jobs=5, pools=pools, tenants=tenants)
    assert e.value.field == field


def test_the_inference_workload_loads_each_pool_at_the_requested_level() -> None:
    jobs = inference_workload(seed=3)
    stats = describe_workload(jobs, cluster_gpus=sum(INFERENCE_POOLS.values()))
    assert stats.offered_load == pytest.approx(0.9, rel=1e-3)
    for model, size in INFERENCE_POOLS.items():
        mine = [j for j in jobs if j.gpu_models == {model}]
        gpu_s = sum(j.total_milli / 1000 * (j.runtime_estimate or 0) for j in mine)
        assert gpu_s / (size * stats.span) == pytest.approx(0.9, rel=1e-3)
    quotas = tenant_quotas()
    assert all(model in quotas[j.tenant] for j in jobs for model in j.gpu_models)


def test_inference_jobs_are_pod_level_spread_services_with_shared_and_whole_gpus() -> None:
    jobs = inference_workload(n_jobs=1500, seed=1)
    assert all(j.kind is JobKind.INFERENCE and not j.gang for j in jobs)
    assert all(j.roles[0].spread == (j.roles[0].replicas > 1) for j in jobs)
    shapes = Counter(j.roles[0].resources.total_milli for j in jobs)
    assert {250, 500, 1000, 2000, 4000, 8000} <= set(shapes)
    assert any(j.roles[0].resources.is_shared for j in jobs)
    assert all(j.preemptible == (j.priority == 0) for j in jobs)
    assert inference_workload(n_jobs=100, seed=1) == inference_workload(n_jobs=100, seed=1)


def test_the_inference_cluster_matches_the_pools() -> None:
    nodes = inference_cluster_nodes()
    by_model = Counter(n.gpu_model for n in nodes)
    assert by_model == {"L40": 24, "A100": 12}
    assert sum(n.gpus for n in nodes) == 288
    assert {n.template for n in nodes if n.gpu_model == "A100"} == {"dgx-8gpu"}
    assert {n.template for n in nodes if n.gpu_model == "L40"} == {"pcie-8gpu"}
    assert nodes[0].name == "l40-n000" and nodes[0].leaf == "l40-lf0"
    assert len({n.name for n in nodes}) == len(nodes)
    assert ClusterDescription(nodes=tuple(nodes)).total_gpus == 288  # a valid description


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("gpus_per_node", {"gpus_per_node": 0}),  # (a ZeroDivisionError)
        ("nodes_per_leaf", {"nodes_per_leaf": 0}),  # (a ZeroDivisionError)
        ("nodes_per_leaf", {"nodes_per_leaf": -1}),  # (leaves named l40-lf-1, ...)
        ("pools[L40]", {"pools": {"L40": -8}}),  # (no node, without a word)
        ("pools[L40]", {"pools": {"L40": 8.5}}),
    ],
)
def test_an_inference_cluster_of_a_shape_no_cluster_has_is_refused_naming_it(
    field: str, kw: dict
) -> None:
    with pytest.raises(ValidationError) as e:
        inference_cluster_nodes(**kw)
    assert e.value.field == field
