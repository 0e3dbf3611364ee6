"""Every translation rule of kant.k8s.translate, on recorded Pod / Node / PodGroup JSON."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from kant.errors import InvalidConfigFileError, InvalidObjectError
from kant.k8s.settings import DEFAULT_TOPOLOGY, K8sSettings, parse_settings
from kant.k8s.translate import (
    NodeNeed,
    PodFacts,
    binding_annotations,
    build_job,
    job_id,
    node_facts,
    pod_facts,
    pod_group_key,
    pod_group_min_member,
    pod_state,
    quantity,
    recorded_binding,
    recorded_tenant,
)
from kant.model import PodId, Resources, Tier, TopologyWish

DATA = Path(__file__).parent / "data"
S = K8sSettings()


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text())


# ----------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8), ("500m", Decimal("0.5")), ("16Gi", 16 * 2**30), ("2113645544Ki", 2113645544 * 1024),
     ("1e3", 1000), ("1.5", Decimal("1.5")), (4, 4), ("3M", 3 * 10**6),
     ("9223372036854775807", 2**63 - 1), ("7Ei", 7 * 2**60)],
)  # fmt: skip
def test_quantities_parse_as_kubernetes_writes_them(text: Any, value: Any) -> None:
    assert quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    "text",
    # (the last four raised decimal.Overflow, decimal.InvalidOperation or OverflowError)
    ["eight", "8Xi", "", True, "1..2", "1e1000000", "1e999999999Ki", float("inf"), float("nan"),
     "1e999999", "-9223372036854775808", "8Ei"],
)  # fmt: skip
def test_a_malformed_quantity_is_an_invalid_object_error(text: Any) -> None:
    # "1e999999" as a pod's memory took 29 s to turn into MiB, then was refused as too large
    with pytest.raises(InvalidObjectError, match="is not a quantity"):
        quantity(text, where="Pod a/b")


def _asking(*requests: dict[str, Any]) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(requests)]
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"schedulerName": "kant", "containers": containers},
    }


@pytest.mark.parametrize(
    ("requests", "field", "why"),
    [
        ([{"nvidia.com/gpu": "1.5"}], "requests.nvidia.com/gpu", "whole number"),
        ([{"nvidia.com/gpu": "500m"}], "requests.nvidia.com/gpu", "whole number"),
        ([{"nvidia.com/gpu": "-1"}], "requests.nvidia.com/gpu", ">= 0"),
        ([{"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "-3"}], "requests.nvidia.com/gpu", ">= 0"),
        ([{"rdma/hca": "2.5"}], "requests.rdma/hca", "whole number"),
        ([{"cpu": "-2"}], "requests.cpu", ">= 0"),
        ([{"memory": "-1Gi"}], "requests.memory", ">= 0"),
        ([{"cpu": "1e999999999"}], "requests.cpu", "is not a quantity"),
    ],
)
def test_a_request_kubernetes_would_refuse_is_refused_not_rounded(
    requests: list[dict[str, Any]], field: str, why: str
) -> None:
    # "1.5" GPUs was read as 1, "500m" as a CPU-only pod, "-1" as 0, and 4 + -3 as 1 GPU
    with pytest.raises(InvalidObjectError, match=why) as e:
        pod_facts(_asking(*requests), S)
    assert field in e.value.field


@pytest.mark.parametrize("gpus", ["1.5", "500m", "1e999999999", float("inf")])
def test_a_node_allocatable_gpu_count_that_is_no_whole_number_is_refused(gpus: Any) -> None:
    # "1.5" was read as 1 GPU and "500m" as none; the huge ones raised decimal's errors
    n = load("node_h100")
    n["status"]["allocatable"]["nvidia.com/gpu"] = gpus
    with pytest.raises(InvalidObjectError, match=r"nvidia\.com/gpu"):
        node_facts(n, S)
    assert node_facts(n, S, need=NodeNeed(gpus=2)).spec.gpus == 2


# ----------------------------------------------------------------- nodes


def test_a_gpu_node_gives_its_model_capacity_and_fabric_place() -> None:
    f = node_facts(load("node_h100"), S)
    s = f.spec
    assert (s.name, s.gpu_model, s.gpus, s.rdma_nics) == (
        "gpu-node-7",
        "NVIDIA-H100-80GB-HBM3",
        8,
        8,
    )
    assert s.cpu_milli == 223500
    assert s.memory_mib == 2113543144 // 1024
    assert s.hbd == "gpu.clique=a1b2c3.0"
    assert (s.leaf, s.spine, s.superspine) == (
        "leaf=sw-leaf-12",
        "spine=sw-spine-3",
        "core=sw-core-1",
    )
    assert f.alive and f.schedulable


def test_the_first_listed_label_of_a_tier_wins_and_the_zone_is_the_fallback_superspine() -> None:
    f = node_facts(load("node_zone_only_notready"), S)
    # no leaf or spine labels: the node shares those tiers with no other node
    assert f.spec.superspine == "zone=us-east-1b"
    assert f.spec.spine == "zone=us-east-1b|a100-3"
    assert f.spec.leaf == "zone=us-east-1b|a100-3|a100-3"


def test_a_node_whose_ready_condition_is_not_true_is_not_alive_and_a_cordoned_one_takes_no_pods() -> (
    None
):
    f = node_facts(load("node_zone_only_notready"), S)
    assert not f.alive and not f.schedulable
    n = load("node_zone_only_notready")
    n["status"]["conditions"][0]["status"] = "True"
    f = node_facts(n, S)
    assert f.alive and not f.schedulable  # spec.unschedulable: cordoned


def test_a_node_without_gpus_is_a_cpu_node_and_an_unlabelled_gpu_node_gets_the_default_model() -> (
    None
):
    assert node_facts(load("node_cpu"), S).spec.gpu_model is None
    n = load("node_h100")
    del n["metadata"]["labels"]["nvidia.com/gpu.product"]
    assert node_facts(n, S).spec.gpu_model == "gpu"


def test_configured_topology_levels_replace_the_defaults() -> None:
    st = parse_settings(
        {"topologyLevels": [{"nodeLabel": "topology.kubernetes.io/zone", "tier": "leaf"}]}
    )
    s = node_facts(load("node_h100"), st).spec
    assert (s.leaf, s.spine, s.hbd) == ("zone=zone-a", None, None)


def test_a_nodes_allocatable_pods_is_its_pod_capacity_and_none_without_it() -> None:
    n = load("node_h100")
    assert node_facts(n, S).spec.max_pods == 110
    n["status"]["allocatable"]["pods"] = "2"
    assert node_facts(n, S).spec.max_pods == 2
    del n["status"]["allocatable"]["pods"]
    assert node_facts(n, S).spec.max_pods is None
    n["status"]["allocatable"]["pods"] = "-3"
    with pytest.raises(InvalidObjectError, match="max_pods"):
        node_facts(n, S)


@pytest.mark.parametrize("bad", ["500m", "1.5", "1500m"])
def test_a_pod_count_that_is_not_a_whole_number_is_refused_naming_allocatable_pods(
    bad: str,
) -> None:
    n = load("node_h100")
    n["status"]["allocatable"]["pods"] = bad  # (was read as max_pods 0 or 1: silently)
    with pytest.raises(InvalidObjectError, match=r"allocatable\.pods"):
        node_facts(n, S)


@pytest.mark.parametrize("big", [str(2**20 + 1), "2M", "1e9"])
def test_a_pod_count_above_max_pods_per_node_is_no_limit(big: str) -> None:
    n = load("node_h100")
    n["status"]["allocatable"]["pods"] = big
    assert node_facts(n, S).spec.max_pods is None
    n["status"]["allocatable"]["pods"] = str(2**20)
    assert node_facts(n, S).spec.max_pods == 2**20


def test_a_malformed_node_allocatable_names_the_node() -> None:
    n = load("node_h100")
    n["status"]["allocatable"]["nvidia.com/gpu"] = "lots"
    with pytest.raises(InvalidObjectError, match="Node gpu-node-7"):
        node_facts(n, S)


# ----------------------------------------------------------------- pods


def test_a_pod_request_is_the_sum_of_its_containers_or_its_largest_init_container() -> None:
    f = pod_facts(load("pod_podgroup_worker"), S)
    # containers: 16.5 CPU, 256.5 GiB; the init container asks 40 CPU, 8 GiB
    assert f.resources == Resources(
        gpus=8, cpu_milli=40000, memory_mib=256 * 1024 + 512, rdma_nics=4
    )


def test_limits_stand_for_missing_extended_resource_requests() -> None:
    f = pod_facts(load("pod_kueue_group_affinity"), S)
    assert f.resources.gpus == 2
    assert f.resources.cpu_milli == 0  # cpu given only as a limit: no request


def test_the_tenant_comes_from_the_first_queue_label_found_then_the_namespace() -> None:
    assert pod_facts(load("pod_podgroup_worker"), S).tenant == "research"  # Kueue
    assert pod_facts(load("pod_kueue_group_affinity"), S).tenant == "ignored-after-kueue"  # KAI
    assert pod_facts(load("pod_fraction_volcano"), S).tenant == "interactive"  # Volcano
    assert pod_facts(load("pod_default_scheduler"), S).tenant == "default"  # namespace
    p = load("pod_podgroup_worker")
    p["metadata"]["labels"]["kant.io/queue"] = "mine"
    assert pod_facts(p, S).tenant == "mine"


def test_priority_comes_from_the_spec_and_preemption_policy_never_makes_a_pod_non_preemptible() -> (
    None
):
    a = pod_facts(load("pod_podgroup_worker"), S)
    b = pod_facts(load("pod_kueue_group_affinity"), S)
    assert (a.priority, a.preemptible) == (1000, True)
    assert (b.priority, b.preemptible) == (10, False)


def test_gpu_models_come_from_the_node_selector_or_the_required_affinity_terms() -> None:
    assert pod_facts(load("pod_podgroup_worker"), S).gpu_models == {"NVIDIA-H100-80GB-HBM3"}
    # two ORed terms: the union of their allowed models
    got = pod_facts(load("pod_kueue_group_affinity"), S).gpu_models
    assert got == {"A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3", "L40S"}
    p = load("pod_kueue_group_affinity")
    p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ].append(
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
    )
    assert pod_facts(p, S).gpu_models == frozenset()  # a term without a model: any model


@pytest.mark.parametrize(
    "how",
    ["a node selector and an affinity that disagree", "one term asking two models at once"],
)
def test_gpu_model_constraints_that_allow_no_model_are_refused_not_read_as_any_model(
    how: str,
) -> None:
    p = load("pod_kueue_group_affinity")
    terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    expr = {"key": "nvidia.com/gpu.product", "operator": "In"}
    if how.startswith("a node selector"):
        p["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "B200"}
    else:
        terms[:] = [{"matchExpressions": [{**expr, "values": ["L40S"]},
                                          {**expr, "values": ["B200"]}]}]  # fmt: skip
    with pytest.raises(InvalidObjectError, match="allow no GPU model"):
        pod_facts(p, S)


def test_a_translation_error_keeps_the_field_it_names() -> None:
    p = load("pod_fraction_volcano")
    p["metadata"]["annotations"]["gpu-fraction"] = "2"
    with pytest.raises(InvalidObjectError) as got:
        pod_facts(p, S)
    assert got.value.field == "gpu-fraction" and str(got.value).count("invalid") == 1


def test_a_pod_field_of_an_unexpected_shape_is_an_invalid_object_error_naming_the_pod() -> None:
    p = load("pod_podgroup_worker")
    p["spec"]["containers"] = [{"name": "c", "resources": {"requests": ["8"]}}]
    with pytest.raises(InvalidObjectError, match=r"Pod team-a/.*malformed"):
        pod_facts(p, S)


def test_a_gpu_fraction_annotation_asks_for_a_share_of_one_gpu() -> None:
    f = pod_facts(load("pod_fraction_volcano"), S)
    assert (f.resources.gpus, f.resources.gpu_milli) == (0, 250)


@pytest.mark.parametrize(
    "bad",
    # (Decimal read "0.2_5" as 0.25 and other scripts' digits as ASCII ones; a share
    # finer than a milli-GPU was taken as 1 milli, 2.5 times "0.0004")
    [
        "0",
        "1",
        "1.5",
        "-0.2",
        "half",
        "nan",
        "0.2_5",
        "\u0660.\u0665",
        "0.0004",
        "1e-4",
        "1e-99999999999",
    ],
)
def test_a_gpu_fraction_that_is_no_ascii_decimal_in_zero_one_of_a_milli_gpu_or_more_is_refused(
    bad: str,
) -> None:
    p = load("pod_fraction_volcano")
    p["metadata"]["annotations"]["gpu-fraction"] = bad
    with pytest.raises(InvalidObjectError, match=r"Pod dev/notebook-x.*gpu-fraction"):
        pod_facts(p, S)


@pytest.mark.parametrize(
    ("frac", "milli"), [("0.5", 500), (".25", 250), ("0.3333", 333), ("5e-1", 500), (" 0.5 ", 500)]
)
def test_a_gpu_fraction_is_read_to_the_nearest_milli_gpu(frac: str, milli: int) -> None:
    p = load("pod_fraction_volcano")
    p["metadata"]["annotations"]["gpu-fraction"] = frac
    assert pod_facts(p, S).resources.gpu_milli == milli


def test_a_gpu_fraction_with_whole_gpus_is_refused() -> None:
    p = load("pod_podgroup_worker")
    p["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    with pytest.raises(InvalidObjectError, match="cannot be combined"):
        pod_facts(p, S)


def test_kueue_and_kai_topology_annotations_become_required_or_preferred_wishes() -> None:
    assert pod_facts(load("pod_podgroup_worker"), S).topology == TopologyWish(
        tier=Tier.LEAF, required=True
    )
    assert pod_facts(load("pod_kueue_group_affinity"), S).topology == TopologyWish(
        tier=Tier.HBD, required=False
    )


def test_a_topology_annotation_naming_an_unconfigured_label_is_refused() -> None:
    p = load("pod_podgroup_worker")
    p["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] = "rack"
    with pytest.raises(InvalidObjectError, match="not a configured topology label"):
        pod_facts(p, S)


def test_gangs_come_from_the_pod_group_label_then_kueues_pod_group_with_its_total_count() -> None:
    a = pod_facts(load("pod_podgroup_worker"), S)
    b = pod_facts(load("pod_kueue_group_affinity"), S)
    c = pod_facts(load("pod_fraction_volcano"), S)
    assert (a.group, a.min_member) == ("team-a/llama-70b", None)  # minMember from the PodGroup
    assert (b.group, b.min_member) == ("serving/kueue:infer", 3)
    assert (c.group, c.min_member) == (None, None)
    assert pod_group_min_member(load("podgroup")) == 4


def test_a_kueue_group_and_a_podgroup_of_the_same_name_are_two_gangs() -> None:
    """A PodGroup name has no colon, so a Kueue group's key can never be a PodGroup's."""
    a = load("pod_podgroup_worker")
    a["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "infer"
    a["metadata"]["namespace"] = "serving"
    b = pod_facts(load("pod_kueue_group_affinity"), S)
    assert pod_facts(a, S).group == "serving/infer"
    assert b.group == "serving/kueue:infer" and b.group != pod_facts(a, S).group
    assert pod_group_key(load("pod_kueue_group_affinity")) == b.group


def test_a_pod_with_scheduling_gates_is_gated_and_malformed_gates_are_refused() -> None:
    p = load("pod_podgroup_worker")
    assert not pod_facts(p, S).gated
    p["spec"]["schedulingGates"] = []
    assert not pod_facts(p, S).gated
    p["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    assert pod_facts(p, S).gated
    for bad in ("kueue.x-k8s.io/admission", [{"name": ""}], ["x"], {"name": "x"}):
        p["spec"]["schedulingGates"] = bad
        with pytest.raises(InvalidObjectError, match="schedulingGates"):
            pod_facts(p, S)


def test_a_pods_overhead_is_added_to_its_requests() -> None:
    p = load("pod_podgroup_worker")
    base = pod_facts(p, S).resources
    p["spec"]["overhead"] = {"cpu": "250m", "memory": "64Mi"}
    r = pod_facts(p, S).resources
    assert (r.cpu_milli, r.memory_mib) == (base.cpu_milli + 250, base.memory_mib + 64)
    assert r.gpus == base.gpus
    for bad in ("1", {"cpu": "lots"}):
        p["spec"]["overhead"] = bad
        with pytest.raises(InvalidObjectError, match="overhead"):
            pod_facts(p, S)


def test_a_bad_pod_group_count_is_refused() -> None:
    p = load("pod_kueue_group_affinity")
    p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "three"
    with pytest.raises(InvalidObjectError, match="pod-group-total-count"):
        pod_facts(p, S)
    g = load("podgroup")
    g["spec"]["minMember"] = 0
    with pytest.raises(InvalidObjectError, match="minMember"):
        pod_group_min_member(g)
    g["spec"]["minMember"] = 10**9  # more pods than a job may have
    with pytest.raises(InvalidObjectError, match="minMember"):
        pod_group_min_member(g)
    for spec in ("oops", [1, 2], 3):  # (a CRD keeping unknown fields lets any spec through)
        g["spec"] = spec
        with pytest.raises(InvalidObjectError, match=r"'spec'.*must be a mapping"):
            pod_group_min_member(g)


@pytest.mark.parametrize("count", ["\u00b2", "\u0663", "99999999999999999999", " 3", ""])
def test_a_pod_group_count_in_other_digits_or_out_of_range_is_refused(count: str) -> None:
    p = load("pod_kueue_group_affinity")
    p["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = count
    with pytest.raises(InvalidObjectError, match="pod-group-total-count"):
        pod_facts(p, S)


def test_only_pods_naming_kants_scheduler_are_kants() -> None:
    assert pod_facts(load("pod_podgroup_worker"), S).ours
    assert not pod_facts(load("pod_default_scheduler"), S).ours
    assert not pod_facts(
        load("pod_podgroup_worker"), parse_settings({"schedulerName": "other"})
    ).ours


def test_the_runtime_annotation_is_the_jobs_runtime_estimate() -> None:
    f = pod_facts(load("pod_podgroup_worker"), S)
    assert f.runtime == 3600.0
    p = load("pod_podgroup_worker")
    p["metadata"]["annotations"]["kant.io/runtime-seconds"] = "-1"
    with pytest.raises(InvalidObjectError, match="runtime-seconds"):
        pod_facts(p, S)


# ----------------------------------------------------------------- jobs and bindings


def _worker(i: int, gpus: int = 8) -> dict[str, Any]:
    p = copy.deepcopy(load("pod_podgroup_worker"))
    p["metadata"]["name"] = f"llama-70b-worker-{i}"
    p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    return p


def test_a_gang_becomes_one_job_with_a_role_per_pod_shape_and_pod_ids_by_name() -> None:
    pods = [pod_facts(_worker(i, gpus=8 if i < 3 else 4), S) for i in (2, 0, 3, 1)]
    jid = job_id(pods) + "#1"
    job, ids = build_job(pods, jid, 5.0)
    assert jid == "team-a.llama-70b#1"
    assert [(r.name, r.replicas, r.resources.gpus) for r in job.roles] == [
        ("worker-0", 3, 8),
        ("worker-1", 1, 4),
    ]
    assert ids[PodId(job=jid, role="worker-0", index=0)] == "team-a/llama-70b-worker-0"
    assert ids[PodId(job=jid, role="worker-1", index=0)] == "team-a/llama-70b-worker-3"
    assert (job.tenant, job.priority, job.gang, job.runtime_estimate) == (
        "research",
        1000,
        True,
        3600.0,
    )
    assert job.roles[0].topology == TopologyWish(tier=Tier.LEAF, required=True)


def test_a_lone_pods_job_id_cannot_collide_with_a_groups() -> None:
    lone = pod_facts(load("pod_fraction_volcano"), S)
    assert job_id([lone]) == "dev..notebook-x"
    assert "/" not in job_id([lone])


def test_binding_annotations_round_trip_through_a_bound_pod() -> None:
    pid = PodId(job="team-a.llama-70b#2", role="worker", index=0)
    ann = binding_annotations(pid, (0, 1, 2, 3, 4, 5, 6, 7), (0, 1, 2, 3), 1000)
    pod = load("pod_bound_by_kant")
    assert pod["metadata"]["annotations"] == ann
    assert recorded_binding(pod) == (pid, (0, 1, 2, 3, 4, 5, 6, 7), (0, 1, 2, 3), 1000)
    share = binding_annotations(pid, (3,), (), 250)
    assert share["kant.io/gpu-milli"] == "250"
    assert recorded_binding(load("pod_podgroup_worker")) is None


def test_the_tenant_a_binding_records_is_read_back_and_none_when_an_older_kant_wrote_none() -> None:
    pid = PodId(job="team-a.llama-70b#2", role="worker", index=0)
    ann = binding_annotations(pid, (0,), (), 1000, tenant="research")
    assert ann["kant.io/tenant"] == "research"
    pod = load("pod_bound_by_kant")
    pod["metadata"]["annotations"] = ann | {"kant.io/queue": "serving"}  # (edited since)
    assert recorded_tenant(pod) == "research"
    assert recorded_binding(pod) == (pid, (0,), (), 1000)
    assert recorded_tenant(load("pod_bound_by_kant")) is None
    assert "kant.io/tenant" not in binding_annotations(pid, (0,), (), 1000)


def test_a_malformed_recorded_binding_is_refused() -> None:
    pod = load("pod_bound_by_kant")
    pod["metadata"]["annotations"]["kant.io/gpus"] = "0,x"
    with pytest.raises(InvalidObjectError, match=r"kant\.io/gpus"):
        recorded_binding(pod)
    pod["metadata"]["annotations"]["kant.io/pod-id"] = "nope"
    with pytest.raises(InvalidObjectError, match="job/role/index"):
        recorded_binding(pod)


@pytest.mark.parametrize(
    ("key", "value"),
    [("kant.io/pod-id", "team-a.llama-70b#2/worker/\u00b2"), ("kant.io/gpus", "0,\u00b9"),
     ("kant.io/nics", "-1"),
     # (a gpu-milli such as these was read as a whole GPU: a share taken back as one GPU)
     ("kant.io/gpu-milli", "abc"), ("kant.io/gpu-milli", "-5"), ("kant.io/gpu-milli", ""),
     ("kant.io/gpu-milli", "0"), ("kant.io/gpu-milli", "1001"), ("kant.io/gpu-milli", 250),
     # (a pod id that is no string raised AttributeError, which the shim's sync let through)
     ("kant.io/pod-id", 5)],
)  # fmt: skip
def test_a_recorded_binding_in_other_digits_is_refused_not_a_crash(key: str, value: Any) -> None:
    pod = load("pod_bound_by_kant")
    pod["metadata"]["annotations"][key] = value
    with pytest.raises(InvalidObjectError, match=key.replace(".", r"\.")):
        recorded_binding(pod)


def test_a_pod_states_node_phase_and_owner_are_read_whatever_its_annotations_say() -> None:
    p = load("pod_bound_by_kant")
    p["metadata"]["annotations"]["kant.io/topology-required"] = "no/such-label"
    st = pod_state(p, S)
    assert st.ours and st.node == p["spec"]["nodeName"] and st.phase == p["status"]["phase"]


# ----------------------------------------------------------------- settings


def test_settings_default_without_a_kubernetes_section() -> None:
    s = parse_settings(None)
    assert s.scheduler_name == "kant" and s.eviction_mode == "eviction"
    assert s.topology == DEFAULT_TOPOLOGY


def test_settings_read_every_key() -> None:
    s = parse_settings({"schedulerName": "kant-2", "evictionMode": "delete", "debounceSeconds": 0.2,
                        "bindWorkers": 4, "nicResource": "nvidia.com/hca",
                        "conditionIntervalSeconds": 5, "statusWritesPerCycle": 7})  # fmt: skip
    assert (
        s.scheduler_name,
        s.eviction_mode,
        s.debounce_seconds,
        s.bind_workers,
        s.nic_resource,
        s.condition_interval_seconds,
        s.status_writes_per_cycle,
    ) == ("kant-2", "delete", 0.2, 4, "nvidia.com/hca", 5.0, 7)


def test_start_time_estimates_are_off_by_default_and_bounded_when_on() -> None:
    s = parse_settings(None)
    assert s.estimate_interval_seconds == 0.0  # (off: no estimate, no annotation written)
    assert (s.estimate_max_jobs, s.estimate_horizon_seconds, s.estimate_max_cycles) == (
        50, 86400.0, 100,
    )  # fmt: skip
    s = parse_settings({"estimateIntervalSeconds": 60, "estimateMaxJobs": 10,
                        "estimateHorizonSeconds": 3600, "estimateMaxCycles": 20})  # fmt: skip
    assert (
        s.estimate_interval_seconds,
        s.estimate_max_jobs,
        s.estimate_horizon_seconds,
        s.estimate_max_cycles,
    ) == (60.0, 10, 3600.0, 20)


@pytest.mark.parametrize(
    ("raw", "why"),
    [({"estimateIntervalSeconds": -1}, "must be a finite number >= 0"),
     ({"estimateIntervalSeconds": "60s"}, "must be a finite number >= 0"),
     ({"estimateIntervalSeconds": float("nan")}, "must be a finite number >= 0"),
     ({"estimateIntervalSeconds": True}, "must be a finite number >= 0"),
     ({"estimateMaxJobs": 0}, "must be an integer >= 1"),
     ({"estimateMaxJobs": 2.5}, "must be an integer >= 1"),
     ({"estimateMaxJobs": True}, "must be an integer >= 1"),
     ({"estimateMaxCycles": 0}, "must be an integer >= 1"),
     ({"estimateMaxCycles": "100"}, "must be an integer >= 1"),
     ({"estimateHorizonSeconds": 0}, "must be > 0"),
     ({"estimateHorizonSeconds": float("inf")}, "must be a finite number >= 0"),
     ({"estimateHorizonSeconds": -5}, "must be a finite number >= 0")],
)  # fmt: skip
def test_a_bad_estimate_setting_is_refused_naming_its_key_and_why(
    raw: dict[str, Any], why: str
) -> None:
    (key,) = raw
    with pytest.raises(InvalidConfigFileError, match=rf"kubernetes\.{key}: {why}"):
        parse_settings(raw, source="kant.yaml")


@pytest.mark.parametrize(
    ("raw", "path"),
    [({"evictionMode": "kill"}, "kubernetes.evictionMode"),
     ({"debounce": 1}, "kubernetes.debounce"),
     ({"debounceSeconds": "1s"}, "kubernetes.debounceSeconds"),
     ({"bindWorkers": 0}, "kubernetes.bindWorkers"),
     ({"conditionIntervalSeconds": -1}, "kubernetes.conditionIntervalSeconds"),
     ({"statusWritesPerCycle": 0}, "kubernetes.statusWritesPerCycle"),
     ({"conditionIntervalSeconds": float("nan")}, "kubernetes.conditionIntervalSeconds"),
     ({"debounceSeconds": float("inf")}, "kubernetes.debounceSeconds"),
     ({"topologyLevels": [{"nodeLabel": "x", "tier": "rack"}]}, "kubernetes.topologyLevels[0].tier"),
     # (a list or a mapping raised TypeError, unhashable, a traceback in kant k8s run)
     ({"topologyLevels": [{"nodeLabel": "x", "tier": ["leaf"]}]}, "kubernetes.topologyLevels[0].tier"),
     ({"topologyLevels": [{"nodeLabel": "x", "tier": {"a": 1}}]}, "kubernetes.topologyLevels[0].tier"),
     ({"topologyLevels": [{"nodeLabel": "x", "tier": "leaf"}, {"nodeLabel": "x", "tier": "spine"}]},
      "kubernetes.topologyLevels[1].nodeLabel")],
)  # fmt: skip
def test_a_bad_kubernetes_setting_names_its_key_path(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidConfigFileError, match=path.replace("[", r"\[").replace("]", r"\]")):
        parse_settings(raw, source="kant.yaml")


_NAME_244 = ("d" * 59 + ".") * 4 + "abcd"  # (a domain of 244 characters)


@pytest.mark.parametrize(
    ("raw", "path", "said"),
    [({"gpuResource": "not a resource"}, "gpuResource", "has no domain"),
     ({"gpuResource": "cpu"}, "gpuResource", "has no domain"),
     ({"nicResource": "kubernetes.io/hca"}, "nicResource", "kubernetes.io domain"),
     ({"gpuResource": "example.kubernetes.io/gpu"}, "gpuResource", "kubernetes.io domain"),
     ({"gpuResource": "requests.example.com/gpu"}, "gpuResource", "extended resource name"),
     ({"gpuResource": "Example.com/gpu"}, "gpuResource", "extended resource name"),
     ({"gpuResource": "example.com/gpu/0"}, "gpuResource", "extended resource name"),
     ({"gpuResource": "example.com/-gpu"}, "gpuResource", "extended resource name"),
     ({"gpuResource": "example.com/" + "g" * 64}, "gpuResource", "extended resource name"),
     ({"gpuResource": "e" + _NAME_244 + "/gpu"}, "gpuResource", "extended resource name"),
     ({"gpuResource": "rdma/hca"}, "gpuResource", "must differ from nicResource"),
     ({"nicResource": "nvidia.com/gpu"}, "nicResource", "must differ from gpuResource"),
     ({"gpuResource": "a.com/x", "nicResource": "a.com/x"}, "nicResource", "must differ"),
     ({"ignoredResources": ["amd.com/gpu", "cpu"]}, "ignoredResources[1]", "has no domain"),
     ({"ignoredResources": ["hugepages-"]}, "ignoredResources[0]", "has no domain"),
     ({"ignoredResources": ["hugepages-0Mi"]}, "ignoredResources[0]", "has no domain"),
     ({"ignoredResources": ["nvidia.com/gpu"]}, "ignoredResources[0]", "is the gpuResource"),
     ({"nicResource": "a.io/n", "ignoredResources": ["a.io/n"]}, "ignoredResources[0]",
      "is the nicResource"),
     ({"ignoredResources": ["a.io/x", "a.io/x"]}, "ignoredResources[1]", "listed twice"),
     ({"leaseName": "UPPER_case"}, "leaseName", "a Lease's name must be a DNS-1123 subdomain"),
     ({"leaseName": "-kant"}, "leaseName", "DNS-1123 subdomain"),
     ({"leaseName": "k" * 254}, "leaseName", "DNS-1123 subdomain"),
     ({"leaseNamespace": "Bad Namespace!"}, "leaseNamespace", "a namespace must be a DNS-1123 "),
     ({"leaseNamespace": "kube.system"}, "leaseNamespace", "DNS-1123 label"),
     ({"leaseNamespace": "n" * 64}, "leaseNamespace", "DNS-1123 label"),
     ({"gpuModelLabel": "gpu model"}, "gpuModelLabel", "must be a label key"),
     ({"zoneLabel": "a/b/c"}, "zoneLabel", "must be a label key"),
     ({"zoneLabel": "Example.com/zone"}, "zoneLabel", "must be a label key"),
     ({"zoneLabel": "/zone"}, "zoneLabel", "must be a label key"),
     ({"topologyLevels": [{"nodeLabel": "rack id", "tier": "leaf"}]},
      "topologyLevels[0].nodeLabel", "must be a label key"),
     ({"defaultGpuModel": "a/b"}, "defaultGpuModel", "a GPU model must be"),
     ({"defaultGpuModel": " H100"}, "defaultGpuModel", "a GPU model must be")],
)  # fmt: skip
def test_a_setting_naming_what_kubernetes_cannot_name_so_is_refused_saying_what_a_name_is(
    raw: dict[str, Any], path: str, said: str
) -> None:
    with pytest.raises(InvalidConfigFileError) as e:
        parse_settings(raw, source="kant.yaml")
    assert str(e.value).startswith(f"kant.yaml: kubernetes.{path}: ") and said in str(e.value)


def test_settings_take_every_name_kubernetes_takes_there() -> None:
    s = parse_settings({
        "gpuResource": "e" * 63 + "." + "x" * 180 + "/" + "G_p-u.0" * 9,
        "nicResource": "nvidia.com/mig-1g.10gb",
        "ignoredResources": ["amd.com/gpu", _NAME_244 + "/license", "ephemeral-storage",
                             "hugepages-2Mi", "hugepages-1Gi"],
        "gpuModelLabel": "model", "zoneLabel": "example.com/Zone_1",
        "topologyLevels": [{"nodeLabel": "topology.kubernetes.io/zone", "tier": "leaf"}],
        "leaseName": "kant-scheduler.v2", "leaseNamespace": "k" * 63,
        "defaultGpuModel": "NVIDIA H100 80GB", "schedulerName": "Kant Scheduler",
    })  # fmt: skip
    assert s.nic_resource == "nvidia.com/mig-1g.10gb" and s.lease_namespace == "k" * 63
    assert s.ignored_resources[:2] == ("amd.com/gpu", _NAME_244 + "/license")
    assert s.ignored_resources[2:] == ("ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi")


def test_the_espread_zone_kind_and_spread_come_from_kant_labels_not_the_topology_zone() -> None:
    from kant.model import JobKind

    node = copy.deepcopy(load("node_h100"))
    node["metadata"]["labels"]["topology.kubernetes.io/zone"] = "inference"
    assert node_facts(node, S).spec.zone is None  # a superspine tier, not E-Spread's zone
    node["metadata"]["labels"]["kant.io/zone"] = "inference"
    assert node_facts(node, S).spec.zone == "inference"
    assert node_facts(node, K8sSettings(zone_label="pool")).spec.zone is None
    pods = [_worker(i, gpus=2) for i in range(2)]
    job, _ = build_job([pod_facts(p, S) for p in pods], "team-a.svc", 0.0)
    assert job.kind is JobKind.TRAINING and not any(r.spread for r in job.roles)
    for p in pods:
        p["metadata"]["labels"]["kant.io/kind"] = "inference"
        p["metadata"]["annotations"]["kant.io/spread"] = "true"
    job, _ = build_job([pod_facts(p, S) for p in pods], "team-a.svc", 0.0)
    assert job.kind is JobKind.INFERENCE and all(r.spread for r in job.roles)


@pytest.mark.parametrize(
    ("key", "value"), [("kant.io/kind", "batch"), ("kant.io/spread", "yes")]
)  # fmt: skip
def test_a_bad_kind_or_spread_annotation_is_an_invalid_object(key: str, value: str) -> None:
    p = _worker(0)
    p["metadata"]["annotations"][key] = value
    with pytest.raises(InvalidObjectError, match=key):
        pod_facts(p, S)


# ----------------------------------------------------------------- node selection


def test_a_node_brings_its_labels_and_taints() -> None:
    from kant.model import Taint, TaintEffect

    node = copy.deepcopy(load("node_h100"))
    node["spec"]["taints"] = [
        {"key": "dedicated", "value": "inference", "effect": "NoSchedule"},
        {"key": "spot", "effect": "PreferNoSchedule"},
    ]
    spec = node_facts(node, S).spec
    assert spec.labels == node["metadata"]["labels"]
    assert spec.taints == (
        Taint(key="dedicated", value="inference", effect=TaintEffect.NO_SCHEDULE),
        Taint(key="spot", effect=TaintEffect.PREFER_NO_SCHEDULE),
    )
    assert spec.hard_tainted


def test_a_malformed_taint_is_an_invalid_object_naming_it() -> None:
    node = copy.deepcopy(load("node_h100"))
    node["spec"]["taints"] = [{"key": "dedicated", "effect": "Sometimes"}]
    with pytest.raises(InvalidObjectError, match=r"spec\.taints\[0\]\.effect"):
        node_facts(node, S)


def test_a_node_read_only_to_count_kants_pods_reads_what_kant_refuses_as_they_need_or_without_it(
) -> None:  # fmt: skip
    node = copy.deepcopy(load("node_h100"))
    alloc = node["status"]["allocatable"]
    alloc.update({"nvidia.com/gpu": "80", "rdma/hca": "-1", "cpu": "x", "memory": "2Ei",
                  "pods": "500m"})  # fmt: skip
    node["metadata"]["labels"].update({" padded": "v", "network.topology.nvidia.com/leaf": "L ",
                                       "kant.io/zone": " z"})  # fmt: skip
    node["spec"]["taints"] = [{"key": "dedicated", "effect": "Sometimes"}, "x",
                              {"key": "spot", "effect": "PreferNoSchedule"}]  # fmt: skip
    with pytest.raises(InvalidObjectError):
        node_facts(node, S)  # (a node kant cannot take)
    need = NodeNeed(gpus=8, nics=2, cpu_milli=4000, memory_mib=8192)
    spec = node_facts(node, S, need=need).spec
    assert (spec.gpus, spec.rdma_nics, spec.cpu_milli, spec.memory_mib) == (8, 2, 4000, 8192)
    assert spec.max_pods is None  # (no limit)
    assert [t.key for t in spec.taints] == ["spot"]
    assert " padded" not in spec.labels and spec.labels["kubernetes.io/hostname"] == "gpu-node-7"
    assert spec.zone is None
    assert spec.spine == "spine=sw-spine-3" and spec.leaf == "spine=sw-spine-3|gpu-node-7"
    assert spec.gpu_model == "NVIDIA-H100-80GB-HBM3"
    valid = node_facts(load("node_h100"), S)  # (what kant takes is read as it is)
    assert node_facts(load("node_h100"), S, need=need) == valid


def _selecting(spec: dict[str, Any]) -> Any:
    p = _worker(0)
    p["spec"].pop("nodeSelector", None)
    p["spec"].pop("affinity", None)
    p["spec"].update(spec)
    return pod_facts(p, S)


def test_a_pods_node_selector_and_affinity_terms_become_one_selector() -> None:
    from kant.model import NodeRequirement, NodeSelector

    f = _selecting({
        "nodeSelector": {"pool": "b"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2", "r1"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}]},
                {},  # (matches no node: left out)
            ]}}},
    })  # fmt: skip
    pool = NodeRequirement(key="pool", operator="In", values=("b",))
    assert f.node_selector == NodeSelector(
        terms=(
            (NodeRequirement(key="rack", operator="In", values=("r1", "r2")), pool),
            (NodeRequirement(key="metadata.name", operator="NotIn", values=("bad",), field=True),
             pool),
        )
    )  # fmt: skip


def test_a_selector_on_the_gpu_model_alone_is_the_roles_models_and_no_selector() -> None:
    f = _selecting({"nodeSelector": {"nvidia.com/gpu.product": "H100"}})
    assert f.gpu_models == {"H100"} and f.node_selector is None
    f = _selecting({})
    assert f.gpu_models == frozenset() and f.node_selector is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{}]}}}}, "allow no GPU model"),  # (no term matches a node)
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "spec.unschedulable", "operator": "In", "values": ["x"]}]}]}}}},
         "matchFields"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "rank", "operator": "Gt", "values": ["x"]}]}]}}}}, "values"),
        ({"tolerations": [{"key": "a", "operator": "Exists", "value": "v"}]}, "tolerations"),
        ({"nodeSelector": ["pool"]}, "nodeSelector.*must be a mapping"),
    ],
)  # fmt: skip
def test_a_selector_or_toleration_kubernetes_would_refuse_is_an_invalid_object(
    spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidObjectError, match=field):
        _selecting(spec)


def test_tolerations_are_read_and_two_pods_listing_them_in_another_order_are_one_role() -> None:
    from kant.model import TaintEffect, Toleration

    tols = [
        {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
    ]  # fmt: skip
    a, b = _worker(0), _worker(1)
    a["spec"]["tolerations"] = tols
    b["spec"]["tolerations"] = tols[::-1]
    fa = pod_facts(a, S)
    assert set(fa.tolerations) == {
        Toleration(key="dedicated", value="inference", effect=TaintEffect.NO_SCHEDULE),
        Toleration(key="node.kubernetes.io/not-ready", operator="Exists",
                   effect=TaintEffect.NO_EXECUTE),
    }  # fmt: skip
    job, _ = build_job([fa, pod_facts(b, S)], "team-a.g", 0.0)
    assert len(job.roles) == 1 and job.roles[0].tolerations == fa.tolerations


def test_pods_of_one_gang_with_different_selectors_are_different_roles() -> None:
    a, b = _worker(0), _worker(1)
    b["spec"]["nodeSelector"] = {**(b["spec"].get("nodeSelector") or {}), "pool": "b"}
    job, _ = build_job([pod_facts(a, S), pod_facts(b, S)], "team-a.g", 0.0)
    assert len(job.roles) == 2
    assert [r.node_selector is None for r in job.roles] == [True, False]


def test_taints_that_mirror_ready_and_cordon_are_not_read_since_kant_reads_those_itself() -> None:
    node = copy.deepcopy(load("node_h100"))
    node["spec"]["taints"] = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},
    ]
    (taint,) = node_facts(node, S).spec.taints
    assert taint.key == "node.kubernetes.io/memory-pressure"


def test_an_empty_affinity_term_allows_no_model_so_a_term_naming_one_still_restricts() -> None:
    # Kubernetes: an empty term matches no node, and terms are ORed: [{}, model In A] is A
    f = _selecting({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{}, {"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100"]}]}]}}}})  # fmt: skip
    assert f.gpu_models == {"A100"} and f.node_selector is None


def _preferring(*terms: dict[str, Any]) -> PodFacts:
    return _selecting(
        {
            "affinity": {
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": list(terms)}
            }
        }
    )


def test_preferred_affinity_terms_are_read_with_their_weights_in_one_order() -> None:
    from kant.model import NodeRequirement, PreferredTerm

    ssd = {
        "weight": 20,
        "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
    }
    named = {
        "weight": 5,
        "preference": {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
        },
    }
    empty = {"weight": 90, "preference": {}}  # (Kubernetes: a no-op)
    f = _preferring(ssd, named, empty)
    assert set(f.preferred) == {
        PreferredTerm(weight=20, requirements=(
            NodeRequirement(key="disk", operator="In", values=("ssd",)),)),
        PreferredTerm(weight=5, requirements=(
            NodeRequirement(key="metadata.name", operator="In", values=("n1",), field=True),)),
    }  # fmt: skip
    assert _preferring(named, ssd).preferred == f.preferred  # another order: the same role
    # a term written twice counts twice, as kube-scheduler adds every term a node meets
    assert len(_preferring(ssd, ssd).preferred) == 2
    job, _ = build_job([f], "team-a..w", 0.0)
    assert job.roles[0].preferred == f.preferred


@pytest.mark.parametrize(
    ("term", "field"),
    [
        ({"weight": 0, "preference": {"matchExpressions": [
            {"key": "a", "operator": "Exists"}]}}, r"preferredDuringScheduling.*\[0\]\.weight"),
        ({"weight": 101, "preference": {"matchExpressions": [
            {"key": "a", "operator": "Exists"}]}}, "weight"),
        ({"weight": 1, "preference": {"matchExpressions": [
            {"key": "a", "operator": "Gt", "values": ["x"]}]}},
         r"\[0\]\.preference\.matchExpressions\[0\]\.values"),
        ({"weight": 1, "preference": {"matchFields": [
            {"key": "spec.x", "operator": "In", "values": ["x"]}]}}, r"preference\.matchFields"),
        ({"weight": 1, "preference": ["a"]}, r"Execution\[0\]"),
        ("ssd", r"Execution\[0\]"),
        ({"weight": 1, "preference": {"matchExpressions": ["a"]}},
         r"matchExpressions\[0\]"),
        ({"weight": "5", "preference": {"matchExpressions": [
            {"key": "a", "operator": "Exists"}]}}, "weight"),
    ],
)  # fmt: skip
def test_a_preferred_term_kubernetes_would_refuse_is_an_invalid_object(
    term: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidObjectError, match=field):
        _preferring(term)


@pytest.mark.parametrize("values", [[""], ["H100", ""]])
def test_an_empty_gpu_model_in_a_pods_affinity_is_an_invalid_object_not_any_model(
    values: list[str],
) -> None:
    with pytest.raises(InvalidObjectError, match=r"nvidia\.com/gpu\.product"):
        _selecting({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": values}]}]}}}})  # fmt: skip


def test_an_empty_gpu_model_in_a_pods_node_selector_is_an_invalid_object_not_any_model() -> None:
    with pytest.raises(InvalidObjectError, match="matches no GPU node"):
        _selecting({"nodeSelector": {"nvidia.com/gpu.product": ""}})


@pytest.mark.parametrize("value", [0, 1, False, ["H100"], {"H100": 1}])
def test_a_non_string_gpu_model_in_a_pods_node_selector_is_an_invalid_object_naming_the_label(
    value: object,
) -> None:
    # (0 used to read as any model, 1 as a model called "1")
    with pytest.raises(InvalidObjectError, match=r"nvidia\.com/gpu\.product") as exc:
        _selecting({"nodeSelector": {"nvidia.com/gpu.product": value}})
    assert exc.value.value == value


def _model_affinity(op: str, values: Any, key: str = "nvidia.com/gpu.product") -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kant.io/any", "operator": "Exists"},
            {"key": key, "operator": op, "values": values}]}]}}}}  # fmt: skip


_LIST_PATH = r"nodeSelectorTerms\[0\]\.matchExpressions\[1\]\.values"


@pytest.mark.parametrize("op", ["In", "NotIn"])
@pytest.mark.parametrize("values", [[8], [None], ["H100", 8], [True], [["H100"]], "H100", 8,
                                    {"H100": 1}])  # fmt: skip
@pytest.mark.parametrize("key", ["nvidia.com/gpu.product", "rack"])
def test_a_node_affinity_value_that_is_no_string_is_refused_naming_the_field(
    op: str, values: Any, key: str
) -> None:
    # (8 used to read as a model "8" and "H100" as the models H, 1 and 0, {"H100": 1} as "H100")
    with pytest.raises(InvalidObjectError, match=_LIST_PATH) as exc:
        _selecting(_model_affinity(op, values, key))
    assert exc.value.value == values and "must be a list of strings" in str(exc.value)


@pytest.mark.parametrize("value", [8, None, True, ["a"]])
def test_a_node_selector_value_that_is_no_string_is_refused_naming_its_key(value: Any) -> None:
    # (rack: 8 used to select the nodes labelled rack=8, rack: None those labelled "None")
    with pytest.raises(InvalidObjectError, match=r"nodeSelector\.rack") as exc:
        _selecting({"nodeSelector": {"rack": value}})
    assert exc.value.value == value


@pytest.mark.parametrize("value", ["", [], "rack=a"])
def test_a_node_selector_or_match_labels_that_is_no_mapping_is_refused_even_empty(
    value: Any,
) -> None:
    # (the API server never sends these; "" and [] used to read as no selector)
    with pytest.raises(InvalidObjectError, match=r"'nodeSelector'.*must be a mapping"):
        _selecting({"nodeSelector": value})
    with pytest.raises(InvalidObjectError, match=r"labelSelector\.matchLabels'.*must be a mapping"):
        _selecting(_pod_affinity({"labelSelector": {"matchLabels": value}}))
    assert _selecting({"nodeSelector": None}).node_selector is None  # (null: none)


def _pod_affinity(term: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", **term}]}}}  # fmt: skip


_TERM = r"podAffinity\.requiredDuringSchedulingIgnoredDuringExecution\[0\]"


@pytest.mark.parametrize(
    ("term", "field"),
    [({"labelSelector": {"matchLabels": {"app": 8}}}, r"\.labelSelector\.matchLabels\.app"),
     ({"labelSelector": {"matchLabels": {"app": None}}}, r"\.labelSelector\.matchLabels\.app"),
     ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [8]}]}},
      r"\.labelSelector\.matchExpressions\[0\]\.values"),
     ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                                               "values": "web"}]}},
      r"\.labelSelector\.matchExpressions\[0\]\.values"),
     ({"labelSelector": {}, "namespaces": [8]}, r"\.namespaces"),
     ({"labelSelector": {}, "namespaces": ["a", None]}, r"\.namespaces"),
     ({"labelSelector": {}, "matchLabelKeys": [8]}, r"\.matchLabelKeys"),
     ({"labelSelector": {}, "mismatchLabelKeys": [None]}, r"\.mismatchLabelKeys")],
)  # fmt: skip
def test_a_pod_affinity_selector_value_that_is_no_string_is_refused_naming_the_field(
    term: dict[str, Any], field: str
) -> None:
    # (matchLabels app: 8 used to select pods labelled app=8, namespaces [8] a namespace "8",
    # matchLabelKeys [8] was dropped)
    with pytest.raises(InvalidObjectError, match=_TERM + field):
        _selecting(_pod_affinity(term))


def test_string_selector_values_are_read_as_before() -> None:
    f = _selecting({"nodeSelector": {"rack": "r1"}, **_model_affinity("In", ["H100", "A100"])})
    assert f.gpu_models == {"H100", "A100"} and f.node_selector is not None
    f = _selecting(_pod_affinity({"labelSelector": {"matchLabels": {"app": "web"}},
                                  "namespaces": ["a"], "matchLabelKeys": ["app"]}))  # fmt: skip
    assert len(f.pod_affinity) == 1


@pytest.mark.parametrize(
    ("spec", "field"),
    [({"nodeSelector": {8: "x"}}, r"nodeSelector key"),
     ({"nodeSelector": {8: "x", "rack": "r1"}}, r"nodeSelector key"),
     ({"nodeSelector": {None: "x"}}, r"nodeSelector key"),
     (_pod_affinity({"labelSelector": {"matchLabels": {8: "web"}}}),
      _TERM + r"\.labelSelector\.matchLabels key"),
     (_pod_affinity({"labelSelector": {"matchLabels": {8: "web", "app": "db"}}}),
      _TERM + r"\.labelSelector\.matchLabels key"),
     (_pod_affinity({"labelSelector": {"matchLabels": ["app"]}}),
      _TERM + r"\.labelSelector\.matchLabels")],
)  # fmt: skip
def test_a_selector_key_that_is_no_string_is_refused_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    # (a key 8 used to select the nodes or pods labelled "8"; next to a string key, sorting
    # the keys raised a TypeError, not an InvalidObjectError)
    with pytest.raises(InvalidObjectError, match=field):
        _selecting(spec)


@pytest.mark.parametrize("op", ["In", "NotIn"])
def test_a_model_with_a_pipe_is_refused_under_in_and_not_in_alike(op: str) -> None:
    # (NotIn ["A100|H100"] used to be taken while In ["A100|H100"] was refused)
    with pytest.raises(InvalidObjectError, match=_LIST_PATH + r".*has no '\|'") as exc:
        _selecting(_model_affinity(op, ["H100", "A100|H100"]))
    # (the reason is that no label value can hold it, not that kant would read two models:
    # a selector's values are a list)
    assert "label value" in str(exc.value) and "two models" not in str(exc.value)


def test_a_timestamp_without_an_offset_is_read_as_utc_on_every_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # it was read in the machine's time zone: 1704067200 under TZ=UTC, 1704034800 in Tokyo
    import time

    from kant.k8s.translate import timestamp

    for tz in ("UTC", "Asia/Tokyo", "America/New_York"):
        monkeypatch.setenv("TZ", tz)
        time.tzset()
        assert timestamp("2024-01-01T00:00:00") == 1704067200.0
        assert timestamp("2024-01-01T09:00:00+09:00") == 1704067200.0
    monkeypatch.delenv("TZ")
    time.tzset()


@pytest.mark.parametrize("priority", [1.7, True, [], float("inf"), "5", 2**31])
def test_a_pod_priority_that_is_no_int32_is_refused_not_rounded(priority: Any) -> None:
    # 1.7 and True were read as 1, [] as 0; inf raised OverflowError
    p = load("pod_bound_by_kant")
    p["spec"]["priority"] = priority
    with pytest.raises(InvalidObjectError, match=r"spec\.priority"):
        pod_facts(p, S)


def test_functions_that_never_raise_read_a_field_of_the_wrong_shape_as_absent() -> None:
    # held_job with labels that are a list, pod_state with a spec that is one, raised
    # AttributeError; node_facts raised it for a status that is one
    from kant.k8s.translate import held_job

    job_of, err = held_job({"metadata": {"name": "x", "labels": ["a"]}, "spec": {}}, "j")
    assert job_of.id == "j" and err is not None and err.field == "metadata.labels"
    st = pod_state({"metadata": {"name": "x"}, "spec": ["a"], "status": 5}, S)
    assert st.node is None and st.phase == "Pending" and not st.ours
    n = load("node_h100")
    n["status"] = ["x"]
    with pytest.raises(InvalidObjectError, match="malformed"):
        node_facts(n, S)
