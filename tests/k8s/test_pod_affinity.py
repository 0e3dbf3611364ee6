"""Required pod affinity and anti-affinity through the shim, against the real kube-apiserver:
kant binds pods only where Kubernetes' InterPodAffinity filter would let them run, scoped to
namespaces as Kubernetes scopes it, across a restart of the shim."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from kant.errors import InvalidObjectError
from kant.k8s.settings import K8sSettings
from kant.k8s.translate import NAMESPACE_LABEL, PodFacts, held_job, pod_facts
from kant.model import Labels, PodAffinityTerm

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")


def _pod(cluster: Cluster, name: str, *, gpus: int = 1, labels: dict[str, str] | None = None,
         affinity: dict[str, Any] | None = None, ns: str | None = None) -> None:  # fmt: skip
    ns = ns or cluster.ns
    req = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
    spec: dict[str, Any] = {
        "schedulerName": "kant",
        "containers": [{"name": "c", "image": "x", "resources": {
            "requests": req, "limits": {"nvidia.com/gpu": str(gpus)}}}],
    }  # fmt: skip
    if affinity:
        spec["affinity"] = affinity
    body = {"metadata": {"name": name, "namespace": ns, "labels": dict(labels or {})}, "spec": spec}
    cluster.api.post(f"/api/v1/namespaces/{ns}/pods", body)


def _required(kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def _term(key: str, **labels: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key}


HOST = "kubernetes.io/hostname"


def _message(cluster: Cluster, name: str) -> str:
    for c in cluster.get(name).get("status", {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return str(c.get("message", ""))
    return ""


def test_replicas_with_hostname_anti_affinity_take_a_node_each_and_a_fourth_waits(
    cluster: Cluster,
) -> None:
    for i in range(3):
        cluster.node(f"n{i}")
    cluster.start_shim()
    anti = _required("podAntiAffinity", _term(HOST, app="web"))
    for i in range(4):
        _pod(cluster, f"web-{i}", labels={"app": "web"}, affinity=anti)
    wait_for(lambda: all(cluster.node_of(f"web-{i}") for i in range(3)) or cluster.node_of("web-3"),
             what="three replicas bound")  # fmt: skip
    wait_for(lambda: _message(cluster, "web-3") or _message(cluster, "web-0"), what="a condition")
    nodes = [cluster.node_of(f"web-{i}") for i in range(4)]
    bound = [n for n in nodes if n]
    assert len(bound) == 3 and len(set(bound)) == 3
    waiting = nodes.index(None)
    wait_for(lambda: "pod_affinity" in _message(cluster, f"web-{waiting}"),
             what="the waiting replica's reason")  # fmt: skip


def test_a_pod_follows_the_zone_of_the_pods_its_affinity_selects(cluster: Cluster) -> None:
    cluster.node("a0", labels={"zone": "a"})
    cluster.node("b0", labels={"zone": "b"})
    cluster.node("b1", labels={"zone": "b"})
    cluster.start_shim()
    _pod(cluster, "db", gpus=8, labels={"app": "db"},
         affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
             "nodeSelectorTerms": [{"matchExpressions": [
                 {"key": "zone", "operator": "In", "values": ["b"]}]}]}}})  # fmt: skip
    wait_for(lambda: cluster.node_of("db"), what="db bound")
    _pod(cluster, "cache", labels={"app": "cache"},
         affinity=_required("podAffinity", _term("zone", app="db")))  # fmt: skip
    wait_for(lambda: cluster.node_of("cache"), what="cache bound")
    assert cluster.node_of("cache") in ("b0", "b1")


def test_affinity_reads_only_the_pods_own_namespace_unless_it_lists_others(
    cluster: Cluster,
) -> None:
    cluster.node("a0", labels={"zone": "a"})
    cluster.node("b0", labels={"zone": "b"})
    other = cluster.namespace("o")
    cluster.start_shim()
    _pod(cluster, "db", labels={"app": "db"}, ns=other)
    # (the db pod is in another namespace: the first term sees no db pod, the second,
    # naming that namespace, sees it)
    _pod(cluster, "mine", affinity=_required("podAffinity", _term("zone", app="db")))
    theirs = dict(_term("zone", app="db"), namespaces=[other])
    _pod(cluster, "theirs", affinity=_required("podAffinity", theirs))
    wait_for(lambda: cluster.node_of("theirs"), what="theirs bound")
    wait_for(lambda: _message(cluster, "mine"), what="mine's condition")
    cluster.looked("mine", "theirs")
    assert cluster.node_of("mine") is None
    db = cluster.api.get(f"/api/v1/namespaces/{other}/pods/db")["spec"]["nodeName"]
    assert cluster.node_of("theirs") == db


def test_a_restarted_shim_still_keeps_new_pods_away_from_a_running_pods_anti_affinity(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.start_shim()
    _pod(cluster, "guard", labels={"app": "guard"},
         affinity=_required("podAntiAffinity", _term(HOST, app="noisy")))  # fmt: skip
    guard = wait_for(lambda: cluster.node_of("guard"), what="guard bound")
    cluster.stop_shims()
    cluster.start_shim()
    # "noisy" has no terms of its own: the running guard's term keeps it off guard's node
    # (E-Binpack would otherwise put it next to guard)
    _pod(cluster, "noisy", labels={"app": "noisy"})
    noisy = wait_for(lambda: cluster.node_of("noisy"), what="noisy bound")
    assert noisy != guard


def test_replicas_with_preferred_anti_affinity_spread_and_none_waits(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.start_shim()
    soft = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": _term(HOST, app="api")}]}}  # fmt: skip
    for i in range(4):
        _pod(cluster, f"api-{i}", labels={"app": "api"}, affinity=soft)
    wait_for(lambda: all(cluster.node_of(f"api-{i}") for i in range(4)), what="all bound")
    nodes = sorted(str(cluster.node_of(f"api-{i}")) for i in range(4))
    assert nodes == ["n0", "n0", "n1", "n1"]  # (E-Binpack alone: all four on one node)


def _foreign(cluster: Cluster, name: str, node: str, *, labels: dict[str, str],
             affinity: dict[str, Any] | None = None, gpus: int = 0) -> None:  # fmt: skip
    """A pod of another scheduler, bound to ``node`` at creation (a DaemonSet's, a cache
    the default scheduler placed)."""
    req = {"cpu": "1", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    lim = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler", "nodeName": node,
        "containers": [{"name": "c", "image": "x",
                        "resources": {"requests": req, "limits": lim}}],
    }  # fmt: skip
    if affinity:
        spec["affinity"] = affinity
    body = {"metadata": {"name": name, "namespace": cluster.ns, "labels": labels}, "spec": spec}
    cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)


def test_a_pod_follows_the_zone_of_a_pod_another_scheduler_placed(cluster: Cluster) -> None:
    cluster.node("a0", labels={"zone": "a"})
    cluster.node("b0", labels={"zone": "b"})
    cluster.node("b1", labels={"zone": "b"})
    cluster.start_shim()
    _foreign(cluster, "redis", "b1", labels={"app": "redis"})
    # (E-Binpack alone would take a0, the first node; without the foreign pod counted the
    # pod would wait for a redis pod forever)
    _pod(cluster, "cache", affinity=_required("podAffinity", _term("zone", app="redis")))
    assert wait_for(lambda: cluster.node_of("cache"), what="cache bound") in ("b0", "b1")


def test_a_foreign_pods_anti_affinity_keeps_kants_pods_off_its_node_until_it_goes(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.start_shim()
    _foreign(cluster, "guard", "n0", labels={"app": "guard"},
             affinity=_required("podAntiAffinity", _term(HOST, app="noisy")))  # fmt: skip
    _pod(cluster, "noisy", labels={"app": "noisy"})
    wait_for(lambda: "pod_affinity" in _message(cluster, "noisy"), what="noisy's reason")
    assert cluster.node_of("noisy") is None
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/guard", {"gracePeriodSeconds": 0})
    assert wait_for(lambda: cluster.node_of("noisy"), what="noisy bound") == "n0"


def test_a_pod_keeps_off_the_node_of_a_foreign_pod_that_would_rather_not_have_it_near(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.start_shim()
    soft = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": _term(HOST, app="batch")}]}}  # fmt: skip
    _foreign(cluster, "latency", "n0", labels={"app": "latency"}, affinity=soft, gpus=4)
    _pod(cluster, "batch", labels={"app": "batch"})
    # (E-Binpack alone packs it on n0, next to the foreign pod's 4 GPUs)
    assert wait_for(lambda: cluster.node_of("batch"), what="batch bound") == "n1"


def test_a_foreign_pods_new_labels_count_once_it_is_relabelled(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.start_shim()
    _foreign(cluster, "db", "n1", labels={"app": "staging"})
    _pod(cluster, "client", affinity=_required("podAffinity", _term(HOST, app="db")))
    wait_for(lambda: "pod_affinity" in _message(cluster, "client"), what="client's reason")
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/db",
                      {"metadata": {"labels": {"app": "db"}}})  # fmt: skip
    assert wait_for(lambda: cluster.node_of("client"), what="client bound") == "n1"


# --------------------------------------------------------------------------- translation


def _facts(affinity: dict[str, Any], labels: dict[str, str] | None = None) -> PodFacts:
    pod = {
        "metadata": {"name": "p", "namespace": "ns1", "labels": dict(labels or {})},
        "spec": {"schedulerName": "kant", "affinity": affinity, "containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
    }  # fmt: skip
    return pod_facts(pod, K8sSettings())


def _reqs(term: PodAffinityTerm) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(r.key, r.operator.value, r.values) for r in term.selector]


def test_a_term_is_scoped_to_the_pods_namespace_unless_it_names_others_or_all() -> None:
    own = _facts(_required("podAffinity", _term("zone", app="db")))
    (t,) = own.pod_affinity
    assert t.topology_key == "zone"
    assert _reqs(t) == [("app", "In", ("db",)), (NAMESPACE_LABEL, "In", ("ns1",))]
    assert own.labels == {NAMESPACE_LABEL: "ns1"}
    listed = _facts(
        _required("podAntiAffinity", dict(_term(HOST, app="db"), namespaces=["x", "y"]))
    )
    assert _reqs(listed.pod_anti_affinity[0])[-1] == (NAMESPACE_LABEL, "In", ("x", "y"))
    every = _facts(_required("podAntiAffinity", dict(_term(HOST, app="db"), namespaceSelector={})))
    assert _reqs(every.pod_anti_affinity[0]) == [("app", "In", ("db",))]


def test_expressions_label_keys_and_a_null_selector_are_read_as_kubernetes_reads_them() -> None:
    term = {
        "labelSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn",
                                                "values": ["batch"]}]},
        "matchLabelKeys": ["release", "absent"],
        "mismatchLabelKeys": ["team"],
        "topologyKey": HOST,
    }  # fmt: skip
    f = _facts(_required("podAntiAffinity", term), labels={"release": "r7", "team": "t"})
    assert _reqs(f.pod_anti_affinity[0]) == [
        ("tier", "NotIn", ("batch",)), ("release", "In", ("r7",)), ("team", "NotIn", ("t",)),
        (NAMESPACE_LABEL, "In", ("ns1",)),
    ]  # fmt: skip
    # a null labelSelector selects no pod: not even one of the pod's own namespace
    (none,) = _facts(_required("podAffinity", {"topologyKey": HOST})).pod_affinity
    assert not none.selects({NAMESPACE_LABEL: "ns1"}) and not none.selects({})


_NS_SELECTOR = dict(_term(HOST, app="db"), namespaceSelector={
    "matchExpressions": [{"key": "team", "operator": "Near", "values": ["x"]}]})  # fmt: skip
_NO_KEY = {"labelSelector": {"matchLabels": {"app": "db"}}}
_GT = dict(_term(HOST), labelSelector={"matchExpressions": [{"key": "a", "operator": "Gt",
                                                             "values": ["1"]}]})  # fmt: skip


@pytest.mark.parametrize(
    ("affinity", "names"),
    [
        (_required("podAntiAffinity", _NS_SELECTOR), "namespaceSelector.matchExpressions[0]"),
        (_required("podAffinity", _NO_KEY), "topology_key"),
        (_required("podAffinity", _GT), "labelSelector.matchExpressions[0].operator"),
        ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}}, "podAffinity"),
        (_required("podAffinity", dict(_term(HOST, app="db"), namespaces="ab")), "namespaces"),
        (
            _required("podAffinity", dict(_term(HOST, app="db"), matchLabelKeys="ab")),
            "matchLabelKeys",
        ),
    ],
)
def test_a_term_kant_cannot_read_refuses_the_pod_naming_the_field(
    affinity: dict[str, Any], names: str
) -> None:
    with pytest.raises(InvalidObjectError) as e:
        _facts(affinity)
    assert names in str(e.value)


def test_pods_of_a_gang_that_differ_in_a_label_are_two_roles_and_in_a_pod_index_one() -> None:
    from kant.k8s.translate import build_job

    master = _facts(
        {}, labels={"replica-type": "master", "statefulset.kubernetes.io/pod-name": "m"}
    )
    worker = attrs.evolve(
        master,
        name="w",
        key="ns1/w",
        labels=Labels(
            {**master.labels, "replica-type": "worker", "statefulset.kubernetes.io/pod-name": "w"}
        ),
    )
    job, _ = build_job([master, worker], "j", 0.0)
    assert sorted(r.labels["replica-type"] for r in job.roles) == ["master", "worker"]
    twin = attrs.evolve(
        master,
        name="m2",
        key="ns1/m2",
        labels=Labels({**master.labels, "statefulset.kubernetes.io/pod-name": "m2"}),
    )
    job, _ = build_job([master, twin], "j", 0.0)
    (role,) = job.roles
    assert role.replicas == 2 and "statefulset.kubernetes.io/pod-name" not in role.labels


def test_preferred_terms_are_read_with_their_weight_and_kind() -> None:
    soft = {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 30, "podAffinityTerm": _term("zone", app="db")}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": _term(HOST, app="api")}]},
    }  # fmt: skip
    f = _facts(soft, labels={"app": "api"})
    got = sorted((p.weight, p.anti, p.term.topology_key) for p in f.pod_preferences)
    assert got == [(30, False, "zone"), (100, True, HOST)]
    assert not f.pod_affinity and not f.pod_anti_affinity
    with pytest.raises(InvalidObjectError) as e:
        _facts({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "podAffinityTerm": _term(HOST, app="db")}]}})  # fmt: skip
    assert "preferredDuringSchedulingIgnoredDuringExecution[0].weight" in str(e.value)


def test_a_gangs_role_has_the_labels_its_pods_share() -> None:
    from kant.k8s.translate import build_job

    a = _facts({}, labels={"app": "train", "apps.kubernetes.io/pod-index": "0"})
    b = attrs.evolve(a, name="q", key="ns1/q",
                     labels=Labels({**a.labels, "apps.kubernetes.io/pod-index": "1"}))  # fmt: skip
    job, _ = build_job([a, b], "j", 0.0)
    assert dict(job.roles[0].labels) == {"app": "train", NAMESPACE_LABEL: "ns1"}


def test_a_held_pod_is_described_by_its_labels_and_pod_terms() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns1", "labels": {"app": "db"}},
        "spec": {"affinity": {
            **_required("podAntiAffinity", _term(HOST, app="noisy")),
            **_required("podAffinity", _term("zone", app="x")),
        }},
    }  # fmt: skip
    pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {"weight": 40, "podAffinityTerm": _term(HOST, app="batch")}]  # fmt: skip
    job, err = held_job(pod, "external:ns1..p")
    (role,) = job.roles
    assert err is None and job.id == "external:ns1..p" and role.name == "pod"
    assert dict(role.labels) == {"app": "db", NAMESPACE_LABEL: "ns1"}
    assert [t.topology_key for t in role.pod_anti_affinity] == [HOST]
    assert [t.topology_key for t in role.pod_affinity] == ["zone"]
    assert [(p.weight, p.anti) for p in role.pod_preferences] == [(40, True)]


def test_a_held_pods_unreadable_terms_are_left_out_with_the_error_and_its_labels_kept() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns1", "labels": {"app": "db"}},
        "spec": {"affinity": _required("podAntiAffinity", _NS_SELECTOR)},
    }
    job, err = held_job(pod, "external:ns1..p")
    assert isinstance(err, InvalidObjectError) and "namespaceSelector" in str(err)
    assert dict(job.roles[0].labels) == {"app": "db", NAMESPACE_LABEL: "ns1"}
    assert not job.roles[0].pod_anti_affinity
    pod["spec"]["affinity"].update(_required("podAffinity", _term("zone", app="x")))
    job, err = held_job(pod, "external:ns1..p")  # (the kind it can read is kept)
    assert err is not None and [t.topology_key for t in job.roles[0].pod_affinity] == ["zone"]
