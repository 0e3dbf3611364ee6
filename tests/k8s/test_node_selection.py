"""Node selectors, affinity, taints, tolerations and E-Spread's zone through the shim, against
the real kube-apiserver: kant binds pods only where Kubernetes would let them run."""

from __future__ import annotations

from typing import Any

import pytest

from kant.k8s.kubelet import create_node, node_object

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

DEDICATED = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}


def _node(cluster: Cluster, name: str, *, labels: dict[str, str] | None = None,
          taints: list[dict[str, str]] | None = None, gpus: int = 8) -> None:  # fmt: skip
    body = node_object(name, gpus=gpus, labels=labels)
    if taints:
        body["spec"] = {"taints": taints}
    create_node(cluster.api, body)


def _pod(cluster: Cluster, name: str, *, gpus: int = 8, spec: dict[str, Any] | None = None,
         labels: dict[str, str] | None = None) -> None:  # fmt: skip
    req = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
    body = {
        "metadata": {"name": name, "namespace": cluster.ns, "labels": dict(labels or {})},
        "spec": {
            "schedulerName": "kant",
            "containers": [{"name": "c", "image": "x", "resources": {
                "requests": req, "limits": {"nvidia.com/gpu": str(gpus)}}}],
            **(spec or {}),
        },
    }  # fmt: skip
    cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)


def _message(cluster: Cluster, name: str) -> str:
    for c in cluster.get(name).get("status", {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return str(c.get("message", ""))
    return ""


def test_a_pod_selecting_a_label_is_bound_only_to_a_node_that_has_it(cluster: Cluster) -> None:
    _node(cluster, "plain-0")
    _node(cluster, "pool-b-0", labels={"pool": "b"})
    cluster.start_shim()
    _pod(cluster, "sel", gpus=4, spec={"nodeSelector": {"pool": "b"}})
    _pod(cluster, "aff", gpus=4, spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]}]}}}})  # fmt: skip
    wait_for(lambda: cluster.node_of("sel") and cluster.node_of("aff"), what="both bound")
    assert cluster.node_of("sel") == "pool-b-0"
    assert cluster.node_of("aff") == "plain-0"
    _pod(cluster, "more", gpus=8, spec={"nodeSelector": {"pool": "b"}})  # pool-b-0 has 4 left
    wait_for(lambda: _message(cluster, "more"), what="a condition on the waiting pod")
    assert cluster.node_of("more") is None


def test_a_tainted_node_takes_only_pods_that_tolerate_its_taint(cluster: Cluster) -> None:
    _node(cluster, "inf-0", taints=[DEDICATED])
    cluster.start_shim()
    _pod(cluster, "plain")
    _pod(
        cluster,
        "tolerant",
        spec={
            "tolerations": [
                {
                    "key": "dedicated",
                    "operator": "Equal",
                    "value": "inference",
                    "effect": "NoSchedule",
                }
            ]
        },
    )
    wait_for(lambda: cluster.node_of("tolerant"), what="the tolerant pod bound")
    assert cluster.node_of("tolerant") == "inf-0"
    msg = wait_for(lambda: _message(cluster, "plain"), what="a condition on the plain pod")
    assert "node selector and tolerations" in msg, msg
    assert cluster.node_of("plain") is None


def test_preferred_affinity_and_prefer_no_schedule_taints_order_the_nodes(
    cluster: Cluster,
) -> None:
    """A pod goes to the node its preferred affinity names, and pods keep off a node with a
    ``PreferNoSchedule`` taint while another node has room, then take it."""
    _node(cluster, "a-0")
    _node(cluster, "a-1", taints=[{"key": "spot", "effect": "PreferNoSchedule"}])
    _node(cluster, "ssd-0", labels={"disk": "ssd"})
    cluster.start_shim()
    _pod(cluster, "fast", spec={"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": {
            "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}})  # fmt: skip
    wait_for(lambda: cluster.node_of("fast"), what="fast bound")
    assert cluster.node_of("fast") == "ssd-0"
    _pod(cluster, "p1")
    wait_for(lambda: cluster.node_of("p1"), what="p1 bound")
    assert cluster.node_of("p1") == "a-0"  # not the spot node, though both were free
    _pod(cluster, "p2")
    wait_for(lambda: cluster.node_of("p2"), what="p2 bound")
    assert cluster.node_of("p2") == "a-1"  # the only node with room left


def test_a_node_relabelled_while_a_pod_runs_there_keeps_the_pod_and_takes_new_ones(
    cluster: Cluster,
) -> None:
    _node(cluster, "n0", labels={"pool": "a"})
    shim = cluster.start_shim()
    _pod(cluster, "first", gpus=4, spec={"nodeSelector": {"pool": "a"}})
    wait_for(lambda: cluster.node_of("first") == "n0", what="first bound")
    cluster.api.patch("/api/v1/nodes/n0", {"metadata": {"labels": {"pool": "b"}}})
    wait_for(lambda: shim.scheduler.cluster.node("n0").labels.get("pool") == "b",
             what="the shim to read the new label")  # fmt: skip
    _pod(cluster, "second", gpus=4, spec={"nodeSelector": {"pool": "b"}})
    wait_for(lambda: cluster.node_of("second") == "n0", what="second bound to the relabelled node")
    assert cluster.get("first")["status"].get("phase") == "Running"
    _pod(cluster, "third", gpus=1, spec={"nodeSelector": {"pool": "a"}})
    wait_for(lambda: _message(cluster, "third"), what="a condition on the third pod")
    cluster.looked("third")
    assert cluster.node_of("third") is None  # no node is pool a any more


def test_espread_puts_inference_pods_in_the_zone_the_zone_label_names(cluster: Cluster) -> None:
    for i in range(2):
        _node(cluster, f"zone-{i}", labels={"kant.io/zone": "inference"})
    _node(cluster, "general-0")
    cluster.start_shim({"placement": {"strategy": "espread"}})
    for i in range(2):
        _pod(cluster, f"svc-{i}", gpus=2, labels={"kant.io/kind": "inference"})
    _pod(cluster, "train", gpus=2)
    wait_for(lambda: all(cluster.node_of(p) for p in ("svc-0", "svc-1", "train")), what="bound")
    # E-Spread: one inference pod per zone node, the training pod on the general node
    assert {cluster.node_of("svc-0"), cluster.node_of("svc-1")} == {"zone-0", "zone-1"}
    assert cluster.node_of("train") == "general-0"


def test_a_waiting_pod_given_a_toleration_is_read_again_and_bound(cluster: Cluster) -> None:
    """Kubernetes lets tolerations be added to a pod; kube-scheduler reads a pending pod
    again when it changes. Before, kant kept the facts it had read when the pod joined its
    job, and the pod waited until the shim restarted."""
    _node(cluster, "inf-0", taints=[DEDICATED])
    cluster.start_shim()
    _pod(cluster, "late")
    msg = wait_for(lambda: _message(cluster, "late"), what="a condition on the waiting pod")
    assert "node selector and tolerations" in msg, msg
    toleration = {"key": "dedicated", "operator": "Equal", "value": "inference",
                  "effect": "NoSchedule"}  # fmt: skip
    cluster.api.patch(
        f"/api/v1/namespaces/{cluster.ns}/pods/late",
        {"spec": {"tolerations": [toleration]}},
        kind="strategic",
    )
    wait_for(lambda: cluster.node_of("late"), what="the pod bound once it tolerates the taint")
    assert cluster.node_of("late") == "inf-0"
