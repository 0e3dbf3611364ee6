"""The shim against what careless or hostile users put in the cluster, on a real
kube-apiserver: malformed annotations and PodGroups, pods bound without kant, restarts that
find what kant cannot take back, nodes that flap or change. Whatever happens, the shim keeps
running, says on the pod what is wrong, and never gives a device that a running pod holds to
another pod."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from kant.k8s.client import ApiError
from kant.k8s.kubelet import set_node_ready

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")


def _condition(pod: dict[str, Any], kind: str = "PodScheduled") -> dict[str, Any] | None:
    for c in pod.get("status", {}).get("conditions") or ():
        if c["type"] == kind:
            return dict(c)
    return None


def _raw_pod(
    cluster: Cluster,
    name: str,
    *,
    gpus: int = 8,
    node: str | None = None,
    scheduler: str = "kant",
    ns: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> None:
    """A pod as a user might write it: bound at creation with ``node``, any scheduler."""
    ns = ns or cluster.ns
    req = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {}),
                     "annotations": dict(annotations or {})},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x",
                 "resources": {"requests": req, "limits": {"nvidia.com/gpu": str(gpus)}}}],
                 **(spec or {})},
    }  # fmt: skip
    if node is not None:
        body["spec"]["nodeName"] = node
    cluster.api.post(f"/api/v1/namespaces/{ns}/pods", body)


def _overbooked(cluster: Cluster) -> list[str]:
    """Nodes whose bound, running pods ask more GPUs than the node has (every namespace)."""
    per: dict[str, int] = {}
    for p in cluster.api.get("/api/v1/pods")["items"]:
        node = p["spec"].get("nodeName")
        if not node or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for c in p["spec"]["containers"]:
            per[node] = per.get(node, 0) + int(c["resources"]["requests"].get("nvidia.com/gpu", 0))
    cap = {
        n["metadata"]["name"]: int(n["status"]["allocatable"].get("nvidia.com/gpu", 0))
        for n in cluster.api.get("/api/v1/nodes")["items"]
    }
    return [f"{n}: {g} GPUs asked of {cap.get(n)}" for n, g in per.items() if g > cap.get(n, 0)]


def _waits(cluster: Cluster, name: str, code: str) -> dict[str, Any]:
    """The pod's PodScheduled condition once it names ``code``; it is still not bound."""
    cond = wait_for(
        lambda: (c := _condition(cluster.get(name))) and code in c.get("message", "") and c,
        what=f"{name}'s condition to name {code}",
    )
    assert cluster.node_of(name) is None
    return cond


def _shims_run(cluster: Cluster) -> bool:
    """Every shim the test started still runs its loop."""
    return all(t.is_alive() for _stop, t in cluster._stops)


def test_a_count_written_in_another_scripts_digits_is_refused_on_its_pod_and_the_rest_run(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.start_shim()
    _raw_pod(cluster, "odd", labels={"kueue.x-k8s.io/pod-group-name": "kq"},
             annotations={"kueue.x-k8s.io/pod-group-total-count": "\u00b2"})  # fmt: skip
    cluster.pod("good")
    wait_for(lambda: cluster.node_of("good"), what="good bound")
    cond = _waits(cluster, "odd", "invalid")
    assert (
        cond["message"].startswith("kant: invalid:") and "pod-group-total-count" in cond["message"]
    )
    assert _shims_run(cluster)


def test_a_kueue_group_named_like_a_podgroup_runs_with_its_own_count(cluster: Cluster) -> None:
    """A PodGroup "train" asks 4 pods; two Kueue pods of a group also named "train" say the
    group has 2: they are their own gang and run, and the PodGroup's pods still wait for 4."""
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("train", 4)
    cluster.start_shim()
    for i in range(2):
        cluster.pod(f"k{i}", gpus=4, labels={"kueue.x-k8s.io/pod-group-name": "train"},
                    annotations={"kueue.x-k8s.io/pod-group-total-count": "2"})  # fmt: skip
    cluster.pod("p0", gpus=1, group="train")
    wait_for(lambda: cluster.node_of("k0") and cluster.node_of("k1"), what="the Kueue gang bound")
    cond = _waits(cluster, "p0", "gang_incomplete")
    assert "1 of the 4 pods" in cond["message"], cond
    assert _shims_run(cluster)


def test_a_restart_that_finds_a_bound_pod_with_unreadable_device_annotations_holds_its_gpus(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    _raw_pod(cluster, "odd", node="n0", annotations={
        "kant.io/pod-id": f"{cluster.ns}..odd#1/worker/0", "kant.io/gpus": "99"})  # fmt: skip
    cluster.start_shim()  # starts although it cannot take the pod back
    cluster.pod("mine")
    _waits(cluster, "mine", "insufficient_capacity")
    cluster.node("n1")
    assert wait_for(lambda: cluster.node_of("mine"), what="mine bound") == "n1"
    assert not _overbooked(cluster)


def test_a_kant_pod_created_with_its_node_set_holds_that_nodes_gpus(cluster: Cluster) -> None:
    cluster.node("n0")
    _raw_pod(cluster, "pre", node="n0")
    cluster.start_shim()
    cluster.pod("mine")
    _waits(cluster, "mine", "insufficient_capacity")
    assert not _overbooked(cluster)


def test_a_waiting_kant_pod_that_another_binder_binds_leaves_its_job_and_holds_its_gpus(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    quota = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 8}}},
                         {"name": "team-b", "quotas": {"H100": {"nominalQuota": 8}}}],
             "defaultMode": "isolated"}  # fmt: skip
    shim = cluster.start_shim(quota)
    cluster.pod("a", labels={"kant.io/queue": "team-a"})
    wait_for(lambda: cluster.node_of("a"), what="a bound")
    cluster.pod("p", labels={"kant.io/queue": "team-a"})
    _waits(cluster, "p", "quota_exceeded")
    free = "n1" if cluster.node_of("a") == "n0" else "n0"
    cluster.api.post(
        f"/api/v1/namespaces/{cluster.ns}/pods/p/binding",
        {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": cluster.ns},
         "target": {"apiVersion": "v1", "kind": "Node", "name": free}},
    )  # fmt: skip
    wait_for(lambda: not any(j.startswith(f"{cluster.ns}..p#") for j in shim._jobs),
             what="p out of kant's jobs")  # fmt: skip
    cluster.pod("q", labels={"kant.io/queue": "team-b"})
    _waits(cluster, "q", "insufficient_capacity")  # p holds its node, though kant did not bind it
    assert not _overbooked(cluster)


def test_a_waiting_gang_pod_deleted_but_kept_by_a_finalizer_leaves_its_job_unbound(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.start_shim()
    cluster.pod("blk")
    wait_for(lambda: cluster.node_of("blk"), what="blk bound")
    cluster.pod_group("g", 2)
    cluster.pod("g-0", gpus=4, group="g")
    cluster.pod("g-1", gpus=4, group="g")
    for name in ("g-0", "g-1"):
        _waits(cluster, name, "insufficient_capacity")  # submitted, no room while blk runs
    g1 = f"/api/v1/namespaces/{cluster.ns}/pods/g-1"
    cluster.api.patch(g1, {"metadata": {"finalizers": ["example.com/hold"]}})
    try:
        cluster.api.delete(g1)  # terminating until its finalizer goes
        _waits(cluster, "g-0", "gang_incomplete")  # its gang lost g-1, as if it were gone
        cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/blk", {"gracePeriodSeconds": 0})
        wait_for(lambda: "blk" not in cluster.pods(), what="blk gone")
        cluster.looked("g-0", gone=("blk",))
        # nothing is bound, so no binding fails and g-0 is not deleted for a failed gang
        assert cluster.node_of("g-0") is None and cluster.node_of("g-1") is None
        pg = cluster.api.get(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups/g"
        )
        assert "kant.io/failures" not in (pg["metadata"].get("annotations") or {})
        cluster.pod("g-2", gpus=4, group="g")  # its controller makes the pod again
        wait_for(lambda: cluster.node_of("g-0") and cluster.node_of("g-2"), what="gang bound")
        assert cluster.node_of("g-1") is None
    finally:
        cluster.api.patch(g1, {"metadata": {"finalizers": None}})


def test_a_restart_while_a_node_is_not_ready_stops_its_pods_as_a_shim_up_would_have(
    cluster: Cluster,
) -> None:
    # (a was held once n0 was Ready again, like another scheduler's pod: charged to no
    # tenant, and a gang there was taken back in part; a shim up when n0 went not Ready
    # would have stopped a, as it stops what runs on a node lost)
    cluster.node("n0")
    cluster.start_shim()
    cluster.pod("a")
    wait_for(lambda: cluster.node_of("a"), what="a bound")
    cluster.stop_shims()
    set_node_ready(cluster.api, "n0", False)
    cluster.start_shim()  # n0 is not Ready: the shim does not take it, and stops a
    wait_for(lambda: "a" not in (pods := cluster.pods()) or
             pods["a"]["metadata"].get("deletionTimestamp"), what="a stopped")  # fmt: skip
    set_node_ready(cluster.api, "n0", True)
    cluster.pod("b")
    wait_for(lambda: cluster.node_of("b") == "n0", what="b bound once a is gone")
    assert "a" not in cluster.pods() and not _overbooked(cluster)


@pytest.mark.parametrize("where", ["a node", "a node that does not exist"])
def test_a_pod_copying_another_namespaces_pod_id_is_held_and_the_owner_is_still_adopted(
    cluster: Cluster, where: str
) -> None:
    # (on a node that does not exist, the copy made the owner's job count as having a pod on
    # a lost node: the restarted shim stopped it)
    cluster.node("n0")
    cluster.node("n1")
    cluster.start_shim()
    cluster.pod("legit")
    node = wait_for(lambda: cluster.node_of("legit"), what="legit bound")
    other = ("n1" if node == "n0" else "n0") if where == "a node" else "ghost"
    cluster.stop_shims()
    ann = cluster.get("legit")["metadata"]["annotations"]
    spoof_ns = cluster.namespace("x")
    _raw_pod(cluster, "legit", ns=spoof_ns, node=other, annotations=dict(ann))
    shim = cluster.start_shim()
    assert f"{cluster.ns}/legit" in shim._id_of  # the owner is kant's again
    cluster.pod("new")
    if where == "a node":
        _waits(cluster, "new", "insufficient_capacity")  # both nodes are taken
    else:
        wait_for(lambda: cluster.node_of("new"), what="new bound beside legit")
    assert not cluster.get("legit")["metadata"].get("deletionTimestamp")
    assert not [o for o in _overbooked(cluster) if not o.startswith("ghost:")]


def test_a_restart_after_a_quota_was_lowered_holds_the_running_pods_it_cannot_take_back(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    quota = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 16}}},
                         {"name": "team-b", "quotas": {"H100": {"nominalQuota": 16}}}],
             "defaultMode": "isolated"}  # fmt: skip
    cluster.start_shim(quota)
    for name in ("a", "b"):
        cluster.pod(name, labels={"kant.io/queue": "team-a"})
    wait_for(lambda: cluster.node_of("a") and cluster.node_of("b"), what="a and b bound")
    cluster.stop_shims()
    quota["tenants"][0]["quotas"]["H100"]["nominalQuota"] = 8
    shim = cluster.start_shim(quota)  # team-a's quota no longer admits both
    assert f"{cluster.ns}/a" in shim._id_of  # taken back, within the quota
    assert f"{cluster.ns}/b" in shim._held  # beyond it: held, so never given again
    cluster.pod("c", labels={"kant.io/queue": "team-b"})
    _waits(cluster, "c", "insufficient_capacity")  # b's GPUs are not given again
    assert not _overbooked(cluster)


def test_a_restart_after_a_quota_was_lowered_takes_back_the_jobs_within_nominal_before_the_borrowers(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    quota = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 8}}},
                         {"name": "team-b", "quotas": {"H100": {"nominalQuota": 8}}}]}  # fmt: skip
    cluster.start_shim(quota)
    cluster.pod("a", labels={"kant.io/queue": "team-b"})
    cluster.pod("b", labels={"kant.io/queue": "team-a"})
    wait_for(lambda: cluster.node_of("a") and cluster.node_of("b"), what="a and b bound")
    cluster.stop_shims()
    quota["tenants"][1]["quotas"]["H100"]["nominalQuota"] = 4  # the cohort lends 8 + 4
    shim = cluster.start_shim(quota)
    # team-a runs b within its nominal 8; team-b's a borrows 4 now, beyond what is lent with
    # b counted. Taken back in job id order, a took the cohort's lendable GPUs first and b,
    # which team-a is guaranteed, was held, charged to no tenant
    assert f"{cluster.ns}/b" in shim._id_of
    assert f"{cluster.ns}/a" in shim._held
    assert shim.scheduler.admitter.used("team-a", "H100") == 8000
    assert shim.scheduler.admitter.used("team-b", "H100") == 0
    shim.scheduler.check_invariants()


def test_a_restart_while_a_node_is_cordoned_takes_back_and_charges_the_gang_running_there(
    cluster: Cluster,
) -> None:
    for n in ("n0", "n1", "n2"):
        cluster.node(n)
    quota = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 16}}}],
             "defaultMode": "isolated"}  # fmt: skip
    cluster.pod_group("g", 2)
    cluster.start_shim(quota)
    for i in range(2):
        cluster.pod(f"g-{i}", group="g", labels={"kant.io/queue": "team-a"})
    wait_for(lambda: cluster.node_of("g-0") and cluster.node_of("g-1"), what="gang bound")
    where = {n: cluster.node_of(n) for n in ("g-0", "g-1")}
    cluster.pod("a", labels={"kant.io/queue": "team-a"})
    _waits(cluster, "a", "quota_exceeded")
    cluster.stop_shims()
    cordoned = where["g-0"]
    cluster.api.patch(f"/api/v1/nodes/{cordoned}", {"spec": {"unschedulable": True}})
    shim = cluster.start_shim(quota)
    # the gang is taken back whole, its pod on the cordoned node too, and charged to team-a
    assert {f"{cluster.ns}/g-0", f"{cluster.ns}/g-1"} <= set(shim._id_of)
    cluster.looked("a", "g-0", "g-1", nodes=(cordoned,))
    assert cluster.node_of("a") is None  # a third node is free, but team-a's quota is not
    _waits(cluster, "a", "quota_exceeded")
    assert {n: cluster.node_of(n) for n in ("g-0", "g-1")} == where  # neither was stopped
    assert not shim.nodes.schedulable(cordoned)  # and the node is still cordoned
    cluster.stop_shims()
    shim.scheduler.check_invariants()


def test_another_schedulers_pod_with_kants_annotations_is_held_and_left_alone(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    bad = {"kueue.x-k8s.io/podset-required-topology": "cloud.example.com/rack"}
    _raw_pod(cluster, "theirs", node="n0", scheduler="default-scheduler", annotations=bad)
    cluster.start_shim()
    cluster.pod("mine")
    _waits(cluster, "mine", "insufficient_capacity")
    cluster.looked("mine", "theirs")
    assert _condition(cluster.get("theirs")) is None  # kant writes nothing on it
    assert not _overbooked(cluster)


@pytest.mark.parametrize("how", ["not ready and back", "deleted and created again"])
def test_another_schedulers_pod_is_held_again_when_its_node_comes_back(
    cluster: Cluster, how: str
) -> None:
    cluster.node("n0")
    _raw_pod(cluster, "theirs", node="n0", scheduler="default-scheduler")
    cluster.start_shim()
    wait_for(lambda: cluster.get("theirs")["status"].get("phase") == "Running", what="running")
    if how == "not ready and back":
        set_node_ready(cluster.api, "n0", False)
        cluster.looked(nodes=("n0",))  # (the shim has seen it not ready)
        set_node_ready(cluster.api, "n0", True)
    else:
        cluster.api.delete("/api/v1/nodes/n0")
        cluster.looked(gone_nodes=("n0",))  # (the shim has seen it go)
        cluster.node("n0")
    cluster.looked("theirs", nodes=("n0",))  # (and come back)
    cluster.pod("mine")
    _waits(cluster, "mine", "insufficient_capacity")


def test_an_edit_of_a_running_pods_annotation_changes_nothing_and_its_gpus_come_back_at_its_end(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.start_shim()
    cluster.pod("a", annotations={"kant.io/runtime-seconds": "2"})
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    cluster.api.patch(
        f"/api/v1/namespaces/{cluster.ns}/pods/a",
        {"metadata": {"annotations": {"kant.io/topology-required": "no/such-label"}}},
    )
    cluster.pod("b")
    assert wait_for(lambda: cluster.node_of("b"), what="b bound after a ends") == "n0"
    cond = _condition(cluster.get("a"))
    assert cond is None or "invalid" not in cond.get("message", "")


QUEUES: dict[str, Any] = {
    "tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 8}}},
                {"name": "team-b", "quotas": {"H100": {"nominalQuota": 8}}}],
    "defaultMode": "isolated",
}  # fmt: skip


def test_an_edit_of_a_running_pods_queue_moves_it_to_no_other_tenant_across_a_restart(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.start_shim(QUEUES)
    cluster.pod("a", annotations={"kant.io/queue": "team-a"})
    wait_for(lambda: cluster.node_of("a"), what="a bound")
    assert cluster.get("a")["metadata"]["annotations"]["kant.io/tenant"] == "team-a"
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/a",
                      {"metadata": {"annotations": {"kant.io/queue": "team-b"}}})  # fmt: skip
    cluster.pod("a2", annotations={"kant.io/queue": "team-a"})
    _waits(cluster, "a2", "quota_exceeded")
    cluster.stop_shims()
    shim = cluster.start_shim(QUEUES)  # a is still team-a's: the tenant its binding recorded
    cluster.looked("a", "a2")
    assert cluster.node_of("a2") is None
    _waits(cluster, "a2", "quota_exceeded")
    cluster.pod("b", annotations={"kant.io/queue": "team-b"})  # team-b's quota is all free
    wait_for(lambda: cluster.node_of("b"), what="b bound")
    cluster.stop_shims()
    assert dict(shim.scheduler.admitter.ledger().usage) == {
        ("team-a", "H100"): 8000,
        ("team-b", "H100"): 8000,
    }


def test_a_pod_bound_by_a_kant_that_recorded_no_tenant_is_charged_to_the_queue_it_names(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    _raw_pod(cluster, "old", node="n0", annotations={
        "kant.io/queue": "team-b", "kant.io/pod-id": f"{cluster.ns}..old#1/worker/0",
        "kant.io/gpus": "0,1,2,3,4,5,6,7", "kant.io/nics": ""})  # fmt: skip
    shim = cluster.start_shim(QUEUES)
    assert f"{cluster.ns}/old" in shim._id_of  # taken back, charged to team-b
    cluster.pod("b", annotations={"kant.io/queue": "team-b"})
    _waits(cluster, "b", "quota_exceeded")
    cluster.pod("a", annotations={"kant.io/queue": "team-a"})
    assert wait_for(lambda: cluster.node_of("a"), what="a bound") == "n1"


def test_gpu_model_constraints_that_allow_no_model_are_refused_on_the_pod(
    cluster: Cluster,
) -> None:
    cluster.node("n0", model="A")
    cluster.node("n1", model="B")
    cluster.start_shim()
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["B"]}]}]}}}  # fmt: skip
    _raw_pod(cluster, "none", spec={"nodeSelector": {"nvidia.com/gpu.product": "A"},
                                    "affinity": affinity})  # fmt: skip
    cond = _waits(cluster, "none", "invalid")
    assert "allow no GPU model" in cond["message"]


def test_gang_pods_whose_pod_group_is_missing_invalid_or_short_say_why_they_wait(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.api.post(
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups",
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "zero", "namespace": cluster.ns}, "spec": {"minMember": 0}},
    )  # fmt: skip
    cluster.pod_group("three", 3)
    cluster.start_shim()
    cluster.pod("m-0", gpus=1, group="missing")
    cluster.pod("z-0", gpus=1, group="zero")
    cluster.pod("t-0", gpus=1, group="three")
    assert "does not exist" in _waits(cluster, "m-0", "gang_incomplete")["message"]
    assert "minMember" in _waits(cluster, "z-0", "invalid")["message"]
    assert "1 of the 3 pods" in _waits(cluster, "t-0", "gang_incomplete")["message"]
    cluster.pod_group("missing", 1)  # the PodGroup arrives late: its pod runs
    wait_for(lambda: cluster.node_of("m-0"), what="m-0 bound")


def test_a_pod_group_whose_spec_is_not_a_mapping_is_refused_on_its_pods_and_the_rest_run(
    cluster: Cluster,
) -> None:
    """The tests' PodGroup CRD keeps any field as given (as a CRD without a schema does): a
    ``spec`` that is a string or a list reaches the shim."""
    cluster.node("n0")
    cluster.start_shim()
    for name, spec in (("word", "oops"), ("list", [1, 2])):
        cluster.api.post(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups",
            {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": cluster.ns}, "spec": spec},
        )  # fmt: skip
        cluster.pod(f"{name}-0", gpus=1, group=name)
    for name in ("word", "list"):
        assert "'spec'" in _waits(cluster, f"{name}-0", "invalid")["message"]
    assert _shims_run(cluster)
    cluster.pod("after", gpus=1)
    wait_for(lambda: cluster.node_of("after"), what="a later pod bound")


def test_a_node_ready_again_with_fewer_gpus_is_taken_as_it_is_now(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.start_shim()
    set_node_ready(cluster.api, "n0", False)
    cluster.looked(nodes=("n0",))  # (the shim has seen it not ready)
    res = {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "4"}
    try:
        cluster.api.patch("/api/v1/nodes/n0/status",
                          {"status": {"allocatable": res, "capacity": res}}, kind="strategic")  # fmt: skip
    except ApiError as e:  # pragma: no cover - the API server refused the patch
        pytest.fail(f"patching the node: {e}")
    set_node_ready(cluster.api, "n0", True)
    cluster.looked(nodes=("n0",))  # (and ready again, with 4 GPUs)
    cluster.pod("first", gpus=4)
    assert wait_for(lambda: cluster.node_of("first"), what="first bound") == "n0"
    ann = cluster.get("first")["metadata"]["annotations"]
    assert {int(g) for g in ann["kant.io/gpus"].split(",")} <= {0, 1, 2, 3}
    cluster.pod("second", gpus=4)  # n0 has no GPU left for it
    _waits(cluster, "second", "kant: ")
    assert not _overbooked(cluster)


def test_another_schedulers_pod_on_a_cordoned_node_is_held_once_the_node_is_uncordoned(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.api.patch("/api/v1/nodes/n0", {"spec": {"unschedulable": True}})
    cluster.start_shim()
    _raw_pod(cluster, "theirs", node="n0", scheduler="default-scheduler")
    wait_for(lambda: cluster.get("theirs")["status"].get("phase") == "Running", what="running")
    cluster.looked("theirs")  # (the shim has seen it on the cordoned node)
    cluster.api.patch("/api/v1/nodes/n0", {"spec": {"unschedulable": False}})
    cluster.looked(nodes=("n0",))  # (and the node uncordoned)
    cluster.pod("mine")
    _waits(cluster, "mine", "insufficient_capacity")


def test_a_gang_pod_kant_deletes_holds_its_gpus_until_it_is_gone(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    cluster.start_shim()
    for i in range(2):  # a finalizer stands for a grace period
        _raw_pod(cluster, f"g-{i}", labels={"scheduling.x-k8s.io/pod-group": "g"},
                 spec={}, annotations={})  # fmt: skip
        cluster.api.patch(
            f"/api/v1/namespaces/{cluster.ns}/pods/g-{i}",
            {"metadata": {"finalizers": ["example.com/grace"]}},
        )
    for i in range(2):
        wait_for(lambda i=i: cluster.get(f"g-{i}")["status"].get("phase") == "Running",
                 what=f"g-{i} running")  # fmt: skip
    try:
        cluster.api.patch(
            f"/api/v1/namespaces/{cluster.ns}/pods/g-0/status", {"status": {"phase": "Failed"}}
        )
        # kant requeues the gang whole and deletes g-1, which runs until its finalizer goes
        wait_for(
            lambda: cluster.get("g-1")["metadata"].get("deletionTimestamp"), what="g-1 deleting"
        )
        failed_on, dying_on = cluster.node_of("g-0"), cluster.node_of("g-1")
        cluster.pod("y")
        cluster.pod("z")
        one = wait_for(lambda: cluster.node_of("y") or cluster.node_of("z"), what="y or z bound")
        assert one == failed_on
        other = "z" if cluster.node_of("y") else "y"
        _waits(cluster, other, "insufficient_capacity")  # g-1's node is still g-1's
        assert cluster.node_of("g-1") == dying_on and not _overbooked(cluster)
    finally:
        for i in range(2):
            cluster.api.patch(
                f"/api/v1/namespaces/{cluster.ns}/pods/g-{i}", {"metadata": {"finalizers": None}}
            )


def test_a_node_that_shrinks_under_a_running_pod_takes_no_new_pod_until_it_ends(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.start_shim()
    cluster.pod("a", gpus=4, annotations={"kant.io/runtime-seconds": "3"})
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    res = {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "4"}
    cluster.api.patch("/api/v1/nodes/n0/status",
                      {"status": {"allocatable": res, "capacity": res}}, kind="strategic")  # fmt: skip
    cluster.looked(nodes=("n0",))  # (the shim has seen it shrink)
    cluster.pod("b", gpus=4)
    cluster.looked("a", "b")
    assert cluster.get("a")["status"].get("phase") == "Running"  # (not ended yet: 3 s)
    assert cluster.node_of("b") is None  # kant knew 8 GPUs; n0 has 4, all a's
    assert wait_for(lambda: cluster.node_of("b"), what="b bound once a ended") == "n0"
    ann = cluster.get("b")["metadata"]["annotations"]
    assert {int(g) for g in ann["kant.io/gpus"].split(",")} <= {0, 1, 2, 3}


def test_a_pod_joining_a_group_whose_job_runs_says_so_and_joins_its_next_job(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.pod_group("g", 2)
    cluster.start_shim()
    for i in range(2):
        cluster.pod(f"g-{i}", gpus=2, group="g", annotations={"kant.io/runtime-seconds": "2"})
    wait_for(lambda: cluster.node_of("g-0") and cluster.node_of("g-1"), what="gang bound")
    cluster.pod("g-2", gpus=2, group="g")
    assert "job" in _waits(cluster, "g-2", "group_running")["message"]
    cluster.pod("g-3", gpus=2, group="g")
    # once the running job has ended, the two new pods are the group's next job
    wait_for(lambda: cluster.node_of("g-2") and cluster.node_of("g-3"), what="next job bound")


def test_a_huge_number_in_any_pods_annotation_does_not_stop_a_restart(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.node("n1")
    huge = "9" * 5000  # (int() refuses more than 4300 digits)
    _raw_pod(cluster, "theirs", node="n0", scheduler="default-scheduler",
             annotations={"kant.io/pod-id": f"x..y#1/worker/{huge}"})  # fmt: skip
    _raw_pod(cluster, "odd", node="n1", annotations={
        "kant.io/pod-id": f"{cluster.ns}..odd#1/worker/0", "kant.io/gpus": huge})  # fmt: skip
    cluster.start_shim()
    cluster.pod("mine")
    _waits(cluster, "mine", "insufficient_capacity")  # both nodes are held
    assert _shims_run(cluster)


def test_a_gang_a_restart_finds_bound_in_part_starts_again_whole(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    # the last shim bound g-0 and stopped before binding g-1
    _raw_pod(cluster, "g-0", node="n0", labels={"scheduling.x-k8s.io/pod-group": "g"},
             annotations={"kant.io/pod-id": f"{cluster.ns}.g#1/worker/0",
                          "kant.io/gpus": "0,1,2,3,4,5,6,7"})  # fmt: skip
    cluster.pod("g-1", group="g")
    shim = cluster.start_shim()
    wait_for(lambda: "g-0" not in cluster.pods(), what="g-0 stopped")
    assert not shim._jobs  # nothing of the half-bound gang was taken back
    _waits(cluster, "g-1", "gang_incomplete")
    cluster.pod("g-2", group="g")  # its controller recreates the pod: the gang starts whole
    wait_for(lambda: cluster.node_of("g-1") and cluster.node_of("g-2"), what="gang bound")
    assert not _overbooked(cluster)


def test_a_pod_gone_between_the_shims_list_and_its_watchers_first_list_comes_as_deleted() -> None:
    import queue
    import threading

    from kant.k8s.shim import Watcher

    class _Api:
        def get(self, path: str) -> dict[str, Any]:
            return {"items": [{"metadata": {"namespace": "ns", "name": "b"}}],
                    "metadata": {"resourceVersion": "7"}}  # fmt: skip

    out: queue.Queue[tuple[str, str, Any]] = queue.Queue()
    seen = {f"ns/{n}": {"metadata": {"namespace": "ns", "name": n}} for n in ("a", "b")}
    w = Watcher(_Api(), "Pod", "/api/v1/pods", out, threading.Event(), seen=seen)  # type: ignore[arg-type]
    assert w._list_quiet() == "7"
    got = [(ev, o["metadata"]["name"]) for _k, ev, o in list(out.queue)]
    assert got == [("DELETED", "a"), ("MODIFIED", "b")]


def test_the_shim_looks_up_a_returning_nodes_pods_by_node_and_forgets_pods_gone() -> None:
    from kant.k8s.shim import Shim

    shim = Shim(None)  # type: ignore[arg-type]  # (no call reaches the API here)
    try:
        for name, node in (("a", "n0"), ("b", "n1"), ("c", "n0")):
            pod = {"metadata": {"namespace": "ns", "name": name},
                   "spec": {"nodeName": node, "schedulerName": "default-scheduler"},
                   "status": {"phase": "Running"}}  # fmt: skip
            shim.handle("Pod", "ADDED", pod)
        assert shim._on_node_pods == {"n0": {"ns/a", "ns/c"}, "n1": {"ns/b"}}
        shim.handle("Pod", "DELETED", {"metadata": {"namespace": "ns", "name": "b"},
                                       "spec": {"nodeName": "n1"}})  # fmt: skip
        assert shim._on_node_pods == {"n0": {"ns/a", "ns/c"}}
    finally:
        shim._pool.shutdown()


def test_a_pod_asking_an_extended_resource_kant_does_not_count_is_refused_on_the_pod(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.start_shim({"kubernetes": {"ignoredResources": ["example.com/license"]}})
    for name, res in (("amd", "amd.com/gpu"), ("mig", "nvidia.com/mig-1g.10gb"),
                      ("licensed", "example.com/license")):  # fmt: skip
        req = {"cpu": "1", res: "1"}
        body = {"metadata": {"name": name, "namespace": cluster.ns},
                "spec": {"schedulerName": "kant", "containers": [{"name": "c", "image": "x",
                         "resources": {"requests": req, "limits": {res: "1"}}}]}}  # fmt: skip
        cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)
    for name, res in (("amd", "amd.com/gpu"), ("mig", "nvidia.com/mig-1g.10gb")):
        assert res in _waits(cluster, name, "invalid")["message"]
    assert wait_for(lambda: cluster.node_of("licensed"), what="licensed bound") == "n0"


def test_a_pod_asking_hugepages_or_ephemeral_storage_is_refused_unless_they_are_ignored(
    cluster: Cluster,
) -> None:
    """kant does not count nodes' hugepages nor ephemeral storage: a pod asking them could be
    bound to a node without them (the node here has no hugepages and 10Gi of storage)."""
    cluster.node("n0", gpus=8)
    cluster.start_shim({"kubernetes": {"ignoredResources": ["hugepages-1Gi"]}})
    for name, res in (("huge", {"hugepages-2Mi": "1Gi"}), ("disk", {"ephemeral-storage": "500Gi"}),
                      ("ignored", {"hugepages-1Gi": "2Gi"})):  # fmt: skip
        req = {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi", **res}
        body = {"metadata": {"name": name, "namespace": cluster.ns},
                "spec": {"schedulerName": "kant", "containers": [{"name": "c", "image": "x",
                         "resources": {"requests": req,
                                       "limits": {"nvidia.com/gpu": "1", **res}}}]}}  # fmt: skip
        cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)
    for name, res in (("huge", "hugepages-2Mi"), ("disk", "ephemeral-storage")):
        msg = _waits(cluster, name, "invalid")["message"]
        assert res in msg and "does not count" in msg, msg
    assert wait_for(lambda: cluster.node_of("ignored"), what="ignored bound") == "n0"
    assert _shims_run(cluster)


def test_a_pods_overhead_counts_with_its_requests_for_kants_pods_and_for_others(
    cluster: Cluster,
) -> None:
    """A RuntimeClass's ``overhead.podFixed`` is copied onto its pods' ``spec.overhead`` by
    the API server's admission: kube-scheduler adds it to their requests, and so does kant."""
    rc = "/apis/node.k8s.io/v1/runtimeclasses"
    cluster.api.post(rc, {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                          "metadata": {"name": f"kata-{cluster.ns}"}, "handler": "kata",
                          "overhead": {"podFixed": {"cpu": "20", "memory": "1Gi"}}})  # fmt: skip
    try:
        cluster.node("n0", gpus=8, cpu="128")
        cluster.node("n1", gpus=8, cpu="128")

        def pod(name: str, cpu: str, **spec: Any) -> None:
            req = {"nvidia.com/gpu": "1", "cpu": cpu, "memory": "1Gi"}
            body = {"metadata": {"name": name, "namespace": cluster.ns},
                    "spec": {"runtimeClassName": f"kata-{cluster.ns}", "containers": [
                        {"name": "c", "image": "x", "resources": {
                            "requests": req, "limits": {"nvidia.com/gpu": "1"}}}], **spec}}  # fmt: skip
            made = cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)
            assert made["spec"]["overhead"] == {"cpu": "20", "memory": "1Gi"}

        pod("other", "100", nodeName="n1")  # another scheduler's: 120 CPUs of n1 held
        cluster.start_shim()
        pod("big", "120", schedulerName="kant")  # 140 CPUs with its overhead: fits nowhere
        pod("small", "100", schedulerName="kant")  # 120: n0 only
        assert wait_for(lambda: cluster.node_of("small"), what="small bound") == "n0"
        assert "140000 mCPU" in _waits(cluster, "big", "unsatisfiable")["message"]
    finally:
        cluster.api.delete(f"{rc}/kata-{cluster.ns}")


def test_a_node_changed_under_a_running_pod_then_not_ready_takes_no_pod_while_not_ready(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.start_shim()
    cluster.pod("a", gpus=4)
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    res = {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "6"}
    cluster.api.patch("/api/v1/nodes/n0/status",
                      {"status": {"allocatable": res, "capacity": res}}, kind="strategic")  # fmt: skip
    cluster.looked(nodes=("n0",))  # (the shim has seen it change under a)
    set_node_ready(cluster.api, "n0", False)
    wait_for(lambda: "a" not in cluster.pods(), what="a stopped")  # its gang is requeued
    cluster.pod("b", gpus=2)
    _waits(cluster, "b", "")  # (any reason: it is not bound)
    cluster.looked("b", nodes=("n0",))
    assert cluster.node_of("b") is None
    set_node_ready(cluster.api, "n0", True)
    assert wait_for(lambda: cluster.node_of("b"), what="b bound once n0 is Ready") == "n0"
    assert {int(g) for g in cluster.get("b")["metadata"]["annotations"]["kant.io/gpus"].split(
        ",")} <= set(range(6))  # fmt: skip


def _gang_running_then_no_shim(cluster: Cluster) -> None:
    """Gang g (g-0 and g-1, 8 GPUs each) runs on n0 and n1; then no shim runs."""
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    cluster.start_shim()
    for i in range(2):
        cluster.pod(f"g-{i}", group="g")
    for i in range(2):
        wait_for(lambda i=i: cluster.get(f"g-{i}")["status"].get("phase") == "Running",
                 what=f"g-{i} running")  # fmt: skip
    cluster.stop_shims()


@pytest.mark.parametrize(
    ("lost", "pod"), [("failed", "g-0"), ("failed", "g-1"), ("deleted and made again", "g-0")]
)
def test_a_gang_that_lost_a_pod_while_no_shim_ran_starts_again_whole(
    cluster: Cluster, lost: str, pod: str
) -> None:
    _gang_running_then_no_shim(cluster)
    path = f"/api/v1/namespaces/{cluster.ns}/pods/{pod}"
    if lost == "failed":
        cluster.api.patch(f"{path}/status", {"status": {"phase": "Failed"}})
    else:
        cluster.api.delete(path, {"gracePeriodSeconds": 0})
        wait_for(lambda: pod not in cluster.pods(), what=f"{pod} gone")
        cluster.pod(pod, group="g")  # its controller made it again
    shim = cluster.start_shim()
    other = "g-1" if pod == "g-0" else "g-0"
    wait_for(lambda: other not in cluster.pods(), what=f"{other} stopped")  # as a shim up would
    assert not any(j.endswith("#1") for j in shim._jobs)


def test_a_restart_takes_back_a_gang_whose_pod_is_gone_without_a_trace(cluster: Cluster) -> None:
    """A pod deleted with no replacement waiting may have ended (a completed pod removed):
    the gang is taken back, its other pod runs on."""
    _gang_running_then_no_shim(cluster)
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/g-0", {"gracePeriodSeconds": 0})
    shim = cluster.start_shim()
    cluster.looked("g-1")
    assert cluster.get("g-1")["status"]["phase"] == "Running" and len(shim._jobs) == 1


def test_a_shim_restart_keeps_a_running_jobs_runtime_and_start_for_easy_backfill(
    cluster: Cluster,
) -> None:
    config = {"queueing": {"policy": "easy-backfill"}}
    cluster.node("n0")
    cluster.node("n1")
    cluster.start_shim(config)
    cluster.pod("a", annotations={"kant.io/runtime-seconds": "60"})
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    cluster.pod_group("head", 2)
    for i in range(2):
        cluster.pod(f"head-{i}", group="head", annotations={"kant.io/runtime-seconds": "10"})
    _waits(cluster, "head-0", "")
    # creation times have whole seconds: small must come after the head, a second later
    created = cluster.get("head-1")["metadata"]["creationTimestamp"]
    second = datetime.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    time.sleep(max(0.0, second + 1.05 - time.time()))
    cluster.pod("small", annotations={"kant.io/runtime-seconds": "600"})
    assert "reserved" in _waits(cluster, "small", "reserved")["message"]
    cluster.stop_shims()
    shim = cluster.start_shim(config)
    # the same decision after the restart: a's end (its start + 60 s) is the head's
    # reservation, which small (600 s) would delay
    cluster.looked("a", "head-0", "head-1", "small")
    assert _waits(cluster, "small", "reserved")
    assert cluster.node_of("small") is None
    (jid,) = [j for j in shim._jobs if j.endswith("..a#1")]
    e = shim.scheduler.queue.entry(jid)
    assert e.job.runtime_estimate == 60
    assert e.started_at is not None and e.started_at < shim.scheduler.clock


def test_a_restart_while_a_victim_terminates_chooses_no_other_victim(cluster: Cluster) -> None:
    """kant preempted b for h, and b's grace period (a finalizer here) outlasts the shim: the
    next shim does not know b was h's, so it preempts nothing until b is gone."""
    import contextlib

    with contextlib.suppress(ApiError):
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": "kant-test-high"}, "value": 1000})  # fmt: skip
    cluster.node("n0")
    cluster.node("n1")
    cluster.start_shim()
    for name in ("a", "b"):
        _raw_pod(cluster, name)
        cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/{name}",
                          {"metadata": {"finalizers": ["example.com/grace"]}})  # fmt: skip
    for name in ("a", "b"):
        wait_for(lambda n=name: cluster.get(n)["status"].get("phase") == "Running",
                 what=f"{name} running")  # fmt: skip

    def going() -> list[str]:
        pods = cluster.pods()
        return [n for n in ("a", "b") if n in pods and pods[n]["metadata"].get("deletionTimestamp")]

    try:
        _raw_pod(cluster, "h", spec={"priorityClassName": "kant-test-high"})
        (victim,) = wait_for(going, what="a victim")
        cluster.stop_shims()
        cluster.start_shim()
        cluster.looked("a", "b", "h")
        assert going() == [victim] and cluster.node_of("h") is None
        where = cluster.node_of(victim)
        cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/{victim}",
                          {"metadata": {"finalizers": None}})  # fmt: skip
        assert wait_for(lambda: cluster.node_of("h"), what="h bound") == where
        other = "b" if victim == "a" else "a"
        assert going() == [] and cluster.get(other)["status"]["phase"] == "Running"
    finally:
        for name in ("a", "b"):
            with contextlib.suppress(ApiError):
                cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/{name}",
                                  {"metadata": {"finalizers": None}})  # fmt: skip


def test_a_previous_shims_victim_holds_preemption_back_only_while_it_terminates() -> None:
    """Back on once the victim is gone, ended, made again under its name (a StatefulSet's
    pod: another uid), or 30 s past the end of its grace period (a finalizer, a lost node)."""
    from kant.k8s.shim import Shim
    from kant.k8s.translate import timestamp

    grace_end = "2026-01-01T00:00:00Z"
    t0 = timestamp(grace_end)
    now = [t0]

    def victim(uid: str, **status: Any) -> dict[str, Any]:
        cond = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": "kant: preempted by ns.h#1 (priority)"}  # fmt: skip
        return {"metadata": {"namespace": "ns", "name": "b", "uid": uid,
                             "deletionTimestamp": grace_end},
                "spec": {"schedulerName": "kant", "nodeName": "n0"},
                "status": {"phase": "Running", "conditions": [cond], **status}}  # fmt: skip

    def held(shim: Shim) -> bool:
        shim._hold_preemption()
        return not shim.scheduler.preemption.priority

    for end in ("made again", "ended", "past its grace", "gone"):
        shim = Shim(None, clock=lambda: now[0])  # type: ignore[arg-type]  # (no API call)
        try:
            now[0] = t0
            first = victim("u1")
            shim._inherited_victims = {"ns/b": ("u1", t0 + 30)}
            shim.handle("Pod", "ADDED", first)
            assert held(shim)
            if end == "made again":
                again = {"metadata": {"namespace": "ns", "name": "b", "uid": "u2"},
                         "spec": {"schedulerName": "kant"}, "status": {"phase": "Pending"}}  # fmt: skip
                shim.handle("Pod", "MODIFIED", again)
            elif end == "ended":
                shim.handle("Pod", "MODIFIED", victim("u1", phase="Failed"))
            elif end == "past its grace":
                now[0] = t0 + 29
                assert held(shim)
                now[0] = t0 + 31
            else:
                shim.handle("Pod", "DELETED", first)
            assert not held(shim), end
        finally:
            shim._pool.shutdown()


def test_a_leader_whose_renewal_hangs_stops_within_its_renew_deadline() -> None:
    import threading

    from kant.k8s.client import ApiError as _ApiError
    from kant.k8s.leader import LeaderElector

    class _Api:  # the lease is created, then every read hangs (a network gone quiet)
        def get(self, path: str) -> dict[str, Any]:
            if not self.created:
                raise _ApiError(404, "GET", path, "not found")
            time.sleep(3)
            raise OSError("read timed out")

        def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            self.created = True
            return body

        created = False

    e = LeaderElector(_Api(), name="l", namespace="ns", identity="a", duration=0.9)  # type: ignore[arg-type]
    stop, lost = threading.Event(), threading.Event()
    t0 = time.monotonic()
    e.hold(stop, lost)
    assert lost.wait(5) and stop.is_set()
    assert time.monotonic() - t0 < 0.9  # before a candidate could take the lease


def test_a_node_whose_labels_put_its_leaf_under_a_second_spine_is_left_out_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from kant.k8s.kubelet import node_object
    from kant.k8s.shim import Shim

    def labelled(name: str, spine: str) -> dict[str, Any]:
        return node_object(name, labels={"network.topology.nvidia.com/leaf": "L",
                                         "network.topology.nvidia.com/spine": spine})  # fmt: skip

    shim = Shim(None)  # type: ignore[arg-type]  # (no call reaches the API here)
    try:
        shim.handle("Node", "ADDED", labelled("n0", "sp0"))
        shim.handle("Node", "ADDED", labelled("n1", "sp1"))  # leaf L is sp0's
        assert shim.nodes.has("n0") and not shim.nodes.has("n1")
        assert "node n1 is left out" in caplog.text
        assert "leaf 'leaf=L' is already under spine 'spine=sp0'" in caplog.text
        shim.handle("Node", "MODIFIED", labelled("n1", "sp0"))  # its labels fixed
        assert shim.nodes.has("n1") and shim.nodes.schedulable("n1")
    finally:
        shim._pool.shutdown()
