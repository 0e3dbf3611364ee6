"""Nodes kant cannot take (more than 64 GPUs or NICs, ``MAX_GPUS_PER_NODE`` and
``MAX_NICS_PER_NODE``; or any other node value kant refuses) under the shim: the node is
left out with one warning naming it and the limit, the other nodes go on taking pods, and
the node comes in once it reports what kant can take. A node kant already took that turns
into one it cannot take is left out too, never kept as it was: once kant's pods there have
ended, or at once when none runs. A shim starting while kant's pods run on a node it cannot
take, for any reason, takes the node in cordoned only to count them (charged to their
tenants), and it leaves once they have ended."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kant.config import parse_config
from kant.errors import InvalidObjectError
from kant.k8s.kubelet import node_object
from kant.k8s.settings import K8sSettings
from kant.k8s.shim import Shim
from kant.k8s.translate import binding_annotations, node_facts
from kant.model import PodId, ReasonCode

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")


@pytest.fixture
def shim() -> Iterator[Shim]:
    s = Shim(None)  # type: ignore[arg-type]  # (no call reaches the API here)
    try:
        yield s
    finally:
        s._pool.shutdown()


def _warnings(caplog: pytest.LogCaptureFixture, node: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and f"node {node} is left out" in r.getMessage()
    ]


def test_a_node_of_72_gpus_is_an_invalid_object_naming_its_allocatable_and_the_limit() -> None:
    s = K8sSettings()
    with pytest.raises(InvalidObjectError, match=r"allocatable\.nvidia\.com/gpu.*72.*at most 64"):
        node_facts(node_object("big", gpus=72), s)
    with pytest.raises(InvalidObjectError, match=r"allocatable\.rdma/hca.*128.*at most 64"):
        node_facts(node_object("wide", gpus=8, nics=128), s)


@pytest.mark.parametrize("kw", [{"gpus": 72}, {"gpus": 128}, {"gpus": 8, "nics": 128}])
def test_a_node_beyond_the_limit_is_left_out_with_one_warning_and_comes_in_once_valid(
    shim: Shim, caplog: pytest.LogCaptureFixture, kw: dict[str, Any]
) -> None:
    shim.handle("Node", "ADDED", node_object("n0"))
    shim.handle("Node", "ADDED", node_object("big", **kw))
    shim.handle("Node", "MODIFIED", node_object("big", **kw))  # (a status update: no new line)
    assert shim.nodes.has("n0") and shim.nodes.schedulable("n0")
    assert not shim.nodes.has("big")
    (warning,) = _warnings(caplog, "big")
    assert "at most 64" in warning
    shim.handle("Node", "MODIFIED", node_object("big", gpus=8))  # its capacity valid now
    assert shim.nodes.has("big") and shim.nodes.schedulable("big")
    assert shim.nodes.spec("big").gpus == 8


def test_a_taken_node_that_grows_past_the_limit_is_left_out_not_kept_as_it_was(
    shim: Shim, caplog: pytest.LogCaptureFixture
) -> None:
    # (it used to stay in kant's cluster as the 8-GPU node it was, taking pods)
    shim.handle("Node", "ADDED", node_object("n0"))
    shim.handle("Node", "MODIFIED", node_object("n0", gpus=72))
    assert not shim.nodes.has("n0")
    assert len(_warnings(caplog, "n0")) == 1
    shim.handle("Node", "MODIFIED", node_object("n0", gpus=8))
    assert shim.nodes.has("n0") and shim.nodes.schedulable("n0")


def test_a_left_out_node_that_is_deleted_is_forgotten(shim: Shim) -> None:
    shim.handle("Node", "ADDED", node_object("big", gpus=72))
    shim.handle("Node", "DELETED", node_object("big", gpus=72))
    assert not shim.nodes.has("big") and "big" not in shim._bad_nodes


class _Listed:
    """What a restarted shim lists (nodes, pods); the pods it deletes (those it stops)."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.items = {"/api/v1/nodes": nodes, "/api/v1/pods": pods}
        self.deleted: list[str] = []

    def delete(self, path: str, **_kw: Any) -> dict[str, Any]:
        self.deleted.append(path)
        return {}

    def post(self, _path: str, _body: Any, **_kw: Any) -> dict[str, Any]:
        return {}  # (an event, a binding)

    def patch(self, _path: str, _body: Any, **_kw: Any) -> dict[str, Any]:
        return {}  # (a pod's condition)

    def get(self, path: str) -> dict[str, Any]:
        return {"items": self.items.get(path, [])}

    def has(self, _api: str) -> bool:
        return False


def _kant_pod(name: str, node: str, *, gpus: int = 8, phase: str = "Running",
              tenant: str = "team-a", first: int = 0,
              nics: tuple[int, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """Pod ``name`` of kant's, bound to ``node`` on GPUs ``first``.. (and NICs ``nics``) by a
    shim before (its binding annotations), charged to ``tenant``."""
    pid = PodId(job=f"ns..{name}#1", role="pod", index=0)
    ann = binding_annotations(pid, range(first, first + gpus), nics, 1000, tenant=tenant)
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "annotations": ann,
                     "labels": {"kant.io/queue": tenant}},
        "spec": {"schedulerName": "kant", "nodeName": node, "containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": phase},
    }  # fmt: skip


_QUOTA = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 8}}}],
          "defaultMode": "isolated"}  # fmt: skip
_QUOTA_64 = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 64}}}],
             "defaultMode": "isolated"}  # fmt: skip


def _restarted(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Shim:
    shim = Shim(_Listed(nodes, pods), parse_config(_QUOTA))  # type: ignore[arg-type]
    shim.sync()
    return shim


def test_a_taken_node_past_the_limit_leaves_once_kants_pods_there_have_ended() -> None:
    shim = _restarted([node_object("n0"), node_object("n1")], [_kant_pod("a", "n0")])
    try:
        assert shim.scheduler.cluster.pods_on("n0")  # (a taken back on n0)
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=72))
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")  # a runs: cordoned
        shim._take_changed_nodes()  # (a cycle: a still runs, n0 stays)
        assert shim.nodes.has("n0")
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded"))
        shim._take_changed_nodes()  # (the next cycle)
        assert not shim.nodes.has("n0") and not shim._draining
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=8))
        assert shim.nodes.has("n0") and shim.nodes.schedulable("n0")
    finally:
        shim._pool.shutdown()


def test_a_draining_node_not_ready_loses_its_pods_and_ready_but_still_past_the_limit_leaves(
) -> None:  # fmt: skip
    shim = _restarted([node_object("n0"), node_object("n1")], [_kant_pod("a", "n0")])
    try:
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=72))
        assert "n0" in shim._draining
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=72, ready=False))
        assert shim.api.deleted == ["/api/v1/namespaces/ns/pods/a"]  # a lost, as on any node
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=72))  # Ready, still 72
        assert not shim.nodes.has("n0") and not shim._draining
        shim._take_changed_nodes()
        assert not shim.nodes.has("n0")
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=8))
        assert shim.nodes.has("n0") and shim.nodes.schedulable("n0")
        assert shim.nodes.spec("n0").gpus == 8
    finally:
        shim._pool.shutdown()


def test_the_log_says_a_taken_node_past_the_limit_is_cordoned_and_then_that_it_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # (it used to say "left out until kant can take it" of a node kept, cordoned, under a,
    # and nothing when it left)
    shim = _restarted([node_object("n0"), node_object("n1")], [_kant_pod("a", "n0")])
    try:
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=80))
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=80))  # (no new line)
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert not _warnings(caplog, "n0")
        (cordoned,) = [m for m in said if m.startswith("node n0 is cordoned")]
        assert "once kant's pods there have ended" in cordoned and "= 80: at most 64" in cordoned
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded"))
        shim._take_changed_nodes()
        assert any(
            r.getMessage().startswith("node n0 left kant's cluster: none of kant's pods")
            for r in caplog.records
        )
    finally:
        shim._pool.shutdown()


def test_a_restarted_shim_charges_kants_pods_on_a_node_past_the_limit_and_places_nothing_there(
) -> None:  # fmt: skip
    # (a shim that restarted while n0 reported 72 GPUs under pod a did not take a's job back:
    # team-a's quota was free again, and it could run twice its 8 GPUs)
    nodes = [node_object("n0", gpus=72), node_object("n1")]
    shim = _restarted(nodes, [_kant_pod("a", "n0"), _kant_pod("b", "n1", phase="Succeeded")])
    try:
        assert "ns..a#1" in shim._jobs
        assert shim.scheduler.admitter.used("team-a", "H100") == 8000  # a's 8 GPUs
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")  # nothing goes there
        assert shim.nodes.spec("n0").gpus == 8  # (72 read as what a needs, only to count a)
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=72))  # (a status update)
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded"))
        assert shim.scheduler.admitter.used("team-a", "H100") == 0
        shim._take_changed_nodes()  # (the next cycle)
        assert not shim.nodes.has("n0") and not shim._draining
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=8))
        assert shim.nodes.has("n0") and shim.nodes.schedulable("n0")
        assert shim.nodes.spec("n0").gpus == 8
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


def test_a_restarted_shim_takes_no_node_past_the_limit_where_none_of_kants_pods_runs() -> None:
    shim = _restarted([node_object("n0", gpus=72), node_object("n1", gpus=8, nics=128)],
                      [_kant_pod("a", "n0", phase="Succeeded")])  # fmt: skip
    try:
        assert not shim.nodes.has("n0") and not shim.nodes.has("n1") and not shim._draining
    finally:
        shim._pool.shutdown()


def test_a_restarted_shim_keeps_a_capped_node_cordoned_when_it_reports_what_kant_read_it_as(
) -> None:  # fmt: skip
    # (n0, 72 GPUs, was taken in at what a restarted shim read it as; when it then reported
    # that very count, kant took it as valid and unchanged: uncordoned while a ran on
    # devices numbered on the 72, and p went there at once. A running shim keeps it
    # cordoned until a has ended: the capacity changed under kant's pods)
    shim = _restarted([node_object("n0", gpus=72), node_object("n1")], [_kant_pod("a", "n0")])
    try:
        made_up = shim.nodes.spec("n0").gpus
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=made_up))
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=made_up))  # (a status update)
        assert not shim.nodes.schedulable("n0")
        shim._take_changed_nodes()  # (a cycle: a still runs)
        assert not shim.nodes.schedulable("n0")
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded"))
        shim._take_changed_nodes()  # a has ended: n0 is taken as it is now
        assert shim.nodes.has("n0") and shim.nodes.schedulable("n0")
        assert shim.nodes.spec("n0").gpus == made_up
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


@pytest.mark.parametrize("gpus", [64, 8])
def test_a_restarted_shim_keeps_a_capped_node_that_turns_valid_cordoned_while_kants_pods_run(
    gpus: int,
) -> None:
    shim = _restarted([node_object("n0", gpus=72), node_object("n1")], [_kant_pod("a", "n0")])
    try:
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=gpus))  # 72 -> valid, a runs
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded"))
        shim._take_changed_nodes()
        assert shim.nodes.schedulable("n0") and shim.nodes.spec("n0").gpus == gpus
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


def test_a_node_whose_capacity_changes_under_kants_pods_says_so_once_not_at_each_status_update(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # (the warning came again at every status update while a ran)
    shim = _restarted([node_object("n0"), node_object("n1")], [_kant_pod("a", "n0")])
    try:
        said = len(caplog.messages)
        for _ in range(3):  # 8 GPUs -> 16, then status updates
            shim.handle("Node", "MODIFIED", node_object("n0", gpus=16))
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=24))  # a change again
        shim.handle("Node", "MODIFIED", node_object("n0", gpus=24))
        assert not shim.nodes.schedulable("n0")
        changed = ("node n0 changed (allocatable, model, fabric or zone labels): it takes no "
                   "new pods until kant's pods there have ended")  # fmt: skip
        assert caplog.messages[said:] == [changed, changed]
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded"))
        shim._take_changed_nodes()
        assert shim.nodes.schedulable("n0") and shim.nodes.spec("n0").gpus == 24
    finally:
        shim._pool.shutdown()


def test_a_restarted_shim_reads_a_capped_node_as_what_kants_pods_there_need() -> None:
    # (it read 72 GPUs as 64: the made-up 56 GPUs counted as capacity in what a waiting pod
    # is told, "8 free" where a running shim says "the largest node has 8")
    pods = [_kant_pod("a", "n0"), _kant_pod("b", "n2", gpus=2, first=20, nics=(3,))]
    nodes = [node_object("n0", gpus=72), node_object("n1"), node_object("n2", gpus=80, nics=4)]
    shim = Shim(_Listed(nodes, pods), parse_config(_QUOTA_64))  # type: ignore[arg-type]
    try:
        shim.sync()
        assert shim.nodes.spec("n0").gpus == 8  # a's GPUs 0-7
        assert shim.nodes.spec("n2").gpus == 22  # b's GPUs 20, 21
        assert shim.nodes.spec("n2").rdma_nics == 4  # (a count within its limit: as it is)
        assert shim.scheduler.admitter.used("team-a", "H100") == 10_000
    finally:
        shim._pool.shutdown()


def test_a_capped_node_reads_at_least_the_gpus_kants_pods_there_request(
) -> None:  # fmt: skip
    # (a pod whose recorded binding is not readable is held with what it requests)
    odd = _kant_pod("a", "n0", gpus=4)
    odd["metadata"]["annotations"]["kant.io/gpus"] = "x"
    shim = _restarted([node_object("n0", gpus=72), node_object("n1")], [odd])
    try:
        assert shim.nodes.spec("n0").gpus == 4
    finally:
        shim._pool.shutdown()


def test_a_restarted_and_a_running_shim_tell_a_pod_too_big_for_any_node_the_same(
) -> None:  # fmt: skip
    said: dict[str, str] = {}

    class Told(_Listed):
        def patch(self, path: str, body: Any, **_kw: Any) -> dict[str, Any]:
            for c in (body.get("status") or {}).get("conditions", ()):
                if c.get("type") == "PodScheduled":
                    said[path.split("/")[-2]] = c.get("message")
            return {}

    big = _kant_pod("p", "", gpus=32)
    del big["spec"]["nodeName"], big["metadata"]["annotations"]
    big["status"]["phase"] = "Pending"
    big["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    told = []
    for first in (72, 8):  # restarted with n0 at 72 under a; running, n0 going 8 -> 72
        said.clear()
        listed = Told([node_object("n0", gpus=first), node_object("n1")],
                      [_kant_pod("a", "n0"), big])  # fmt: skip
        shim = Shim(listed, parse_config(_QUOTA_64))  # type: ignore[arg-type]
        try:
            shim.sync()
            shim.handle("Node", "MODIFIED", node_object("n0", gpus=72))
            shim.cycle()
            told.append(said["p"])
        finally:
            shim._pool.shutdown()
    assert told[0] == told[1] and "the largest node has 8" in told[0]


def test_a_cycle_looks_at_no_left_out_node_where_none_of_kants_pods_runs(
    shim: Shim, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (each cycle used to sort and walk every left-out node once one was: 2 ms a cycle at
    # 5,000 of them, time-slicing replicas advertising 8 x 10 GPUs)
    for i in range(200):
        shim.handle("Node", "ADDED", node_object(f"big{i:03d}", gpus=80))
    looked: list[str] = []
    has = shim.nodes.has
    monkeypatch.setattr(shim.nodes, "has", lambda name: looked.append(name) or has(name))
    shim._take_changed_nodes()
    assert looked == [] and len(shim._bad_nodes) == 200 and not shim._draining


def _status(cluster: Cluster, node: str, gpus: int) -> None:
    res = {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
    cluster.api.patch(f"/api/v1/nodes/{node}/status",
                      {"status": {"allocatable": res, "capacity": res}}, kind="strategic")  # fmt: skip


def test_a_node_of_72_gpus_is_left_out_and_the_other_nodes_keep_scheduling(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.node("n0")
    cluster.node("big", gpus=72)
    cluster.start_shim()
    for name in ("a", "b"):
        cluster.pod(name, gpus=8)
    assert wait_for(lambda: cluster.node_of("a") or cluster.node_of("b"), what="one bound") == "n0"
    time.sleep(0.5)
    assert [cluster.node_of("a"), cluster.node_of("b")].count(None) == 1  # none went to big
    assert any("node big is left out" in m and "at most 64" in m for m in caplog.messages)
    _status(cluster, "big", 8)  # the device plugin fixed: it comes in
    wait_for(lambda: cluster.node_of("a") and cluster.node_of("b"), what="both bound")
    assert {cluster.node_of("a"), cluster.node_of("b")} == {"n0", "big"}
    assert all(t.is_alive() for _stop, t in cluster._stops)


def test_a_node_that_grows_past_the_limit_under_a_running_pod_takes_no_new_pod(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    shim = cluster.start_shim()
    cluster.pod("a", gpus=8, annotations={"kant.io/runtime-seconds": "2"})
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    there = str(cluster.node_of("a"))
    other = "n1" if there == "n0" else "n0"
    _status(cluster, there, 72)
    wait_for(lambda: not shim.nodes.schedulable(there), what=f"{there} cordoned")
    for name in ("b", "c"):
        cluster.pod(name, gpus=8)
    wait_for(lambda: cluster.node_of("b") or cluster.node_of("c"), what="one bound")
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Succeeded", what="a ended")
    # a has ended: its node leaves kant's cluster while it reports 72 GPUs
    wait_for(lambda: not shim.nodes.has(there), what=f"{there} removed")
    assert sorted(str(cluster.node_of(n)) for n in ("b", "c")) == sorted([other, "None"])
    _status(cluster, str(there), 8)
    wait_for(lambda: cluster.node_of("b") and cluster.node_of("c"), what="both bound")
    assert all(t.is_alive() for _stop, t in cluster._stops)


def test_a_shim_restarted_while_a_node_past_the_limit_runs_a_pod_of_kants_keeps_its_quota(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    quota = dict(_QUOTA)
    shim = cluster.start_shim(quota)
    cluster.pod("a", labels={"kant.io/queue": "team-a"},
                annotations={"kant.io/runtime-seconds": "60"})  # fmt: skip
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    there = str(cluster.node_of("a"))
    _status(cluster, there, 72)
    wait_for(lambda: not shim.nodes.schedulable(there), what=f"{there} cordoned")
    cluster.pod("p", labels={"kant.io/queue": "team-a"})
    cycles = shim.cycles
    wait_for(lambda: shim.cycles > cycles + 2, what="cycles")
    assert cluster.node_of("p") is None  # a holds team-a's 8 GPUs
    cluster.stop_shims()
    again = cluster.start_shim(quota)
    wait_for(lambda: again.cycles > 3, what="cycles of the restarted shim")
    # (it used to forget a, bound on a node it left out: p went to the other node, and team-a
    # ran 16 GPUs on a quota of 8)
    assert cluster.node_of("p") is None
    assert again.scheduler.admitter.used("team-a", "H100") == 8000
    assert again.nodes.has(there) and not again.nodes.schedulable(there)


# A node a restarted shim cannot take for any other reason, where a pod of kant's runs. The
# real API server refuses a malformed taint and an allocatable.pods of 500m (422: Invalid),
# so these start from what a shim lists (an object written around its validation, directly
# to etcd or by another server or version, or altered on its way to the shim, is read all the
# same); the scenarios against the real API server below use what it does store and kant
# refuses (a CPU count past kant's limit, a fabric contradiction).


def _tainted(name: str) -> dict[str, Any]:
    node = node_object(name, gpus=16)
    node["spec"] = {"taints": [{"key": "dedicated", "effect": "Sometimes"}]}
    return node


def _pods_500m(name: str) -> dict[str, Any]:
    node = node_object(name, gpus=16)
    node["status"]["allocatable"]["pods"] = "500m"
    return node


def _cpu_past_limit(name: str) -> dict[str, Any]:
    return node_object(name, gpus=16, cpu="2000000000")  # (2e9 cores: past MAX_CPU_MILLI)


def _unreadable_gpus(name: str) -> dict[str, Any]:
    node = node_object(name, gpus=16)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "sixteen"
    return node


_REFUSED = {
    "a malformed taint": (_tainted, r"spec\.taints\[0\]\.effect"),
    "an allocatable.pods of 500m": (_pods_500m, r"allocatable\.pods"),
    "a CPU count past the limit": (_cpu_past_limit, r"cpu_milli"),
    "an unreadable GPU count": (_unreadable_gpus, r"allocatable\.nvidia\.com/gpu"),
}

_QUOTA_AB = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 8}}},
                         {"name": "team-b", "quotas": {"H100": {"nominalQuota": 16}}}],
             "defaultMode": "isolated"}  # fmt: skip


def _waiting(name: str, tenant: str) -> dict[str, Any]:
    """Pod ``name`` of kant's, 8 GPUs, of ``tenant``, not bound yet."""
    pod = _kant_pod(name, "", tenant=tenant)
    del pod["spec"]["nodeName"], pod["metadata"]["annotations"]
    pod["status"]["phase"] = "Pending"
    pod["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    return pod


_COUNTING_ONLY = (
    "node {}, taken in only to count kant's pods there, takes no new pods until they have "
    "ended, and is then taken as it reports itself, if kant can take it"
)


def _jobs_on(shim: Shim, node: str) -> set[str]:
    return {p.job for p in shim.scheduler.cluster.pods_on(node)}


@pytest.mark.parametrize("why", list(_REFUSED))
def test_a_restarted_shim_charges_kants_pod_on_a_node_refused_for_any_reason_and_places_nothing_there(
    why: str, caplog: pytest.LogCaptureFixture
) -> None:  # fmt: skip
    # (a shim restarted while n0 was refused for anything but a device count past its limit
    # did not take a's job back: team-a's quota was free again, and p ran beside a)
    bad, named = _REFUSED[why]
    # (a on GPUs 8-15: n0 is read with GPUs 0-7 free whatever it is refused for, an
    # unreadable GPU count read as 16, so r would fit there were n0 not cordoned)
    pods = [_kant_pod("a", "n0", first=8), _waiting("p", "team-a"), _waiting("q", "team-b"),
            _waiting("r", "team-b")]  # fmt: skip
    shim = Shim(_Listed([bad("n0"), node_object("n1")], pods), parse_config(_QUOTA_AB))  # type: ignore[arg-type]
    try:
        shim.sync()
        assert "ns..a#1" in shim._jobs
        assert shim.scheduler.admitter.used("team-a", "H100") == 8000  # a's 8 GPUs
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")
        (taken,) = [m for m in caplog.messages if m.startswith("node n0 is left out but kant")]
        assert "taken in cordoned" in taken and re.search(named, taken)  # (it says what is wrong)
        assert shim.nodes.spec("n0").gpus == 16  # (room for r, GPUs 0-7)
        shim.cycle()
        assert _jobs_on(shim, "n1") == {"ns..q#1"}  # q on n1; p waits on team-a's quota
        assert _jobs_on(shim, "n0") == {"ns..a#1"}  # r waits: nothing new goes to n0
        assert shim.scheduler.admitter.used("team-a", "H100") == 8000
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded", first=8))
        assert shim.scheduler.admitter.used("team-a", "H100") == 0
        shim._take_changed_nodes()  # (the next cycle)
        assert not shim.nodes.has("n0") and not shim._draining
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


@pytest.mark.parametrize("why", list(_REFUSED))
def test_a_node_taken_in_for_kants_pods_stays_cordoned_whatever_it_reports_until_they_end(
    why: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kant")
    bad, _named = _REFUSED[why]
    shim = _restarted([bad("n0"), node_object("n1")], [_kant_pod("a", "n0")])
    try:
        said = len(caplog.messages)
        shim.handle("Node", "MODIFIED", bad("n0"))  # (a status update, still refused)
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")
        assert len(caplog.messages) == said  # (said once)
        for _ in range(3):  # valid now, a runs (then status updates)
            shim.handle("Node", "MODIFIED", node_object("n0", gpus=16))
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")
        # (it said "valid again: taken as it is now", and at every status update that n0 had
        # changed: one line, once, and true)
        assert caplog.messages[said:] == [_COUNTING_ONLY.format("n0")]
        shim._take_changed_nodes()  # (a cycle: a still runs)
        assert not shim.nodes.schedulable("n0")
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded"))
        shim._take_changed_nodes()  # a has ended: n0 is taken as it is now
        assert shim.nodes.has("n0") and shim.nodes.schedulable("n0")
        assert shim.nodes.spec("n0") == node_facts(node_object("n0", gpus=16), K8sSettings()).spec
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


def test_a_value_kant_takes_of_a_node_taken_in_for_kants_pods_counts_as_on_any_cordoned_node(
) -> None:  # fmt: skip
    # (n0: 16 valid GPUs, a malformed taint; a runs on 8. Its GPUs are read as they are, not
    # as what a needs: a pod of 16 waits for capacity, as if n0 were only cordoned, and is
    # not told it can never fit)
    cordoned = node_object("n0", gpus=16)
    cordoned["spec"] = {"unschedulable": True}
    told = []
    for n0 in (_tainted("n0"), cordoned):
        q = _waiting("q", "team-b")
        q["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "16"
        listed = _Listed([n0, node_object("n1")], [_kant_pod("a", "n0"), q])
        shim = Shim(listed, parse_config(_QUOTA_AB))  # type: ignore[arg-type]
        try:
            shim.sync()
            told.append(shim.cycle().pending["ns..q#1"])
        finally:
            shim._pool.shutdown()
    assert told[0] == told[1]
    assert told[0].code is ReasonCode.INSUFFICIENT_CAPACITY, told[0]
    assert told[0].message == "role 'worker' needs 16 GPUs, 8 free in its pools"


def test_a_node_taken_in_for_kants_pods_that_goes_on_refused_leaves_once_they_end() -> None:
    shim = _restarted([_tainted("n0"), node_object("n1")], [_kant_pod("a", "n0")])
    try:
        shim.handle("Node", "MODIFIED", _pods_500m("n0"))  # refused for another reason
        assert shim.nodes.has("n0") and not shim.nodes.schedulable("n0")
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", phase="Succeeded"))
        shim._take_changed_nodes()
        assert not shim.nodes.has("n0") and not shim._draining
        shim.handle("Node", "MODIFIED", node_object("n0"))
        assert shim.nodes.has("n0") and shim.nodes.schedulable("n0")
    finally:
        shim._pool.shutdown()


def test_a_restarted_shim_reads_a_refused_node_as_what_kants_pods_there_need_or_without_it(
) -> None:  # fmt: skip
    odd = node_object("n0", gpus=16, cpu="2000000000", memory="2Ei")
    odd["status"]["allocatable"]["pods"] = "500m"
    odd["spec"] = {"taints": [{"key": "dedicated", "effect": "Sometimes"},
                              {"key": "spot", "effect": "PreferNoSchedule"}]}  # fmt: skip
    a = _kant_pod("a", "n0")
    a["spec"]["containers"][0]["resources"]["requests"].update(cpu="4", memory="8Gi")
    shim = _restarted([odd, node_object("n1")], [a])
    try:
        spec = shim.nodes.spec("n0")
        assert spec.gpus == 16  # (a count kant takes: as it is)
        assert (spec.cpu_milli, spec.memory_mib) == (4000, 8192)  # what a needs
        assert spec.max_pods is None  # (no limit)
        assert [t.key for t in spec.taints] == ["spot"]  # the malformed one left out
        assert shim.scheduler.admitter.used("team-a", "H100") == 8000
    finally:
        shim._pool.shutdown()


def test_a_restarted_shim_charges_kants_pod_on_a_node_whose_labels_contradict_the_fabric(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kant")

    def labelled(name: str, spine: str) -> dict[str, Any]:
        return node_object(name, labels={"network.topology.nvidia.com/leaf": "L",
                                         "network.topology.nvidia.com/spine": spine})  # fmt: skip

    # (kant's pods run on both: n0, first by name, is in the fabric, n1 out of it; where
    # they ran on n1 alone, n1 would be in the fabric and n0 left out)
    pods = [_kant_pod("b", "n0", gpus=4), _kant_pod("a", "n1", gpus=4)]
    shim = _restarted([labelled("n1", "sp1"), labelled("n0", "sp0")], pods)
    try:
        assert "ns..a#1" in shim._jobs and "ns..b#1" in shim._jobs
        assert shim.scheduler.admitter.used("team-a", "H100") == 8000
        assert shim.nodes.schedulable("n0") and shim.nodes.spec("n0").leaf is not None
        assert shim.nodes.has("n1") and not shim.nodes.schedulable("n1")
        assert shim.nodes.spec("n1").leaf is None  # (out of the fabric, only to count a)
        (taken,) = [m for m in caplog.messages if m.startswith("node n1 is left out but kant")]
        assert "already under spine 'spine=sp0'" in taken
        said = len(caplog.messages)
        for _ in range(3):  # (status updates: what it was, read as kant takes it now)
            shim.handle("Node", "MODIFIED", labelled("n1", "sp1"))
        assert shim.nodes.has("n1") and not shim.nodes.schedulable("n1")
        # (it said "valid again: taken as it is now", and at every status update that n1 had
        # changed: one line, once, and true)
        assert caplog.messages[said:] == [_COUNTING_ONLY.format("n1")]
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n1", gpus=4, phase="Succeeded"))
        shim._take_changed_nodes()
        assert not shim.nodes.has("n1")  # still contradicting n0: left out
        for _ in range(3):  # (status updates: it said it left, and says it no more)
            shim.handle("Node", "MODIFIED", labelled("n1", "sp1"))
        left = [m for m in caplog.messages[said:] if m.startswith("node n1 is left out:")]
        assert len(left) == 1 and "already under spine 'spine=sp0'" in left[0]
        shim.handle("Node", "MODIFIED", labelled("n1", "sp0"))  # its labels fixed
        assert shim.nodes.has("n1") and shim.nodes.schedulable("n1")
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


@pytest.mark.parametrize(("node", "named"), [
    (node_object(" n0"), "'name' = ' n0'"),  # (what no Kubernetes API server stores)
    (node_object("n0", model="H100|A100"), "'gpu_model' = 'H100|A100'"),  # (nor this)
])  # fmt: skip
def test_a_restarted_shim_leaves_out_a_node_whose_name_or_model_it_cannot_read_and_says_so(
    node: dict[str, Any], named: str, caplog: pytest.LogCaptureFixture
) -> None:
    # (nothing stands in for the name, nor for the model: the quota a's GPUs are charged to)
    name = node["metadata"]["name"]
    shim = _restarted([node, node_object("n1")], [_kant_pod("a", name)])
    try:
        assert not shim.nodes.has(name) and "ns..a#1" not in shim._jobs
        (said,) = [m for m in caplog.messages if "are not taken back" in m]
        assert named in said
        # (not stopped either, as a pod on a node not Ready or deleted is: that node is Ready)
        assert shim.api.deleted == []  # type: ignore[attr-defined]
    finally:
        shim._pool.shutdown()


def _allocatable(cluster: Cluster, node: str, **res: str) -> None:
    alloc = {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8", **res}
    cluster.api.patch(f"/api/v1/nodes/{node}/status",
                      {"status": {"allocatable": alloc, "capacity": alloc}}, kind="strategic")  # fmt: skip


def test_a_shim_restarted_while_a_node_reports_a_cpu_count_past_the_limit_keeps_its_pods_quota(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    quota = dict(_QUOTA)
    shim = cluster.start_shim(quota)
    cluster.pod("a", labels={"kant.io/queue": "team-a"},
                annotations={"kant.io/runtime-seconds": "60"})  # fmt: skip
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    there = str(cluster.node_of("a"))
    _allocatable(cluster, there, cpu="2000000000")  # (the API server stores it; kant refuses it)
    wait_for(lambda: not shim.nodes.schedulable(there), what=f"{there} cordoned")
    cluster.stop_shims()
    cluster.pod("p", labels={"kant.io/queue": "team-a"})
    again = cluster.start_shim(quota)
    wait_for(lambda: again.cycles > 3, what="cycles of the restarted shim")
    # (it used to forget a: p went to the other node, and team-a ran 16 GPUs on a quota of 8)
    assert cluster.node_of("p") is None
    assert again.scheduler.admitter.used("team-a", "H100") == 8000  # a's
    assert again.nodes.has(there) and not again.nodes.schedulable(there)
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/a")  # a ends
    wait_for(lambda: not again.nodes.has(there), what=f"{there} gone once a has ended")
    assert wait_for(lambda: cluster.node_of("p"), what="p bound") != there


def test_a_shim_restarted_while_a_nodes_labels_contradict_the_fabric_keeps_its_pods_quota(
    cluster: Cluster,
) -> None:
    leaf, spine = "network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine"
    cluster.node("n1", labels={leaf: "L", spine: "sp0"})
    quota = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 16}}}],
             "defaultMode": "isolated"}  # fmt: skip
    shim = cluster.start_shim(quota)
    cluster.pod("a", labels={"kant.io/queue": "team-a"},
                annotations={"kant.io/runtime-seconds": "60"})  # fmt: skip
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    assert cluster.node_of("a") == "n1"
    cluster.node("n0", labels={leaf: "L", spine: "sp0"})
    cluster.pod("b", labels={"kant.io/queue": "team-a"})
    assert wait_for(lambda: cluster.node_of("b"), what="b bound") == "n0"
    cluster.api.patch("/api/v1/nodes/n1", {"metadata": {"labels": {spine: "sp1"}}},
                      kind="merge")  # fmt: skip
    wait_for(lambda: not shim.nodes.schedulable("n1"), what="n1 cordoned")
    cluster.stop_shims()
    cluster.pod("p", labels={"kant.io/queue": "team-a"})
    # (kant's pods run on both: n0, first by name, takes leaf L under sp0, and n1's leaf
    # is under sp0)
    again = cluster.start_shim(quota)
    wait_for(lambda: again.cycles > 3, what="cycles of the restarted shim")
    assert cluster.node_of("p") is None
    assert again.scheduler.admitter.used("team-a", "H100") == 16000  # a's and b's
    assert again.nodes.has("n1") and not again.nodes.schedulable("n1")
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/a")  # a ends
    wait_for(lambda: not again.nodes.has("n1"), what="n1 gone once a has ended")
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/b")  # b ends
    assert wait_for(lambda: cluster.node_of("p"), what="p bound") == "n0"


def _foreign(name: str, node: str, requests: dict[str, str]) -> dict[str, Any]:
    """A running pod another scheduler bound to ``node``, asking ``requests``."""
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
            "spec": {"schedulerName": "other", "nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": requests}}]},
            "status": {"phase": "Running"}}  # fmt: skip


def test_two_pods_held_in_part_on_one_node_are_not_held_again_every_cycle(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # kant's a holds n0's 8 GPUs; the kubelet admitted q1 and q2 (4 GPUs each) over it: both
    # held in part. Holding one again changed the node and made the other due: each cycle
    # held them again, with a warning each
    shim = _restarted([node_object("n0")], [_kant_pod("a", "n0")])
    try:
        for q in ("q1", "q2"):
            shim.handle("Pod", "ADDED", _foreign(q, "n0", {"nvidia.com/gpu": "4"}))
        shim.cycle()  # (q1 was recorded before q2 changed the node: both held again once)
        with caplog.at_level(logging.WARNING, logger="kant"):
            gen = shim._generation("n0")
            for _ in range(3):
                shim.cycle()
        assert shim._generation("n0") == gen and not _warnings(caplog, "n0")
        assert sorted(shim._left_out) == ["ns/q1", "ns/q2"]
    finally:
        shim._pool.shutdown()


def test_a_pod_held_in_part_on_a_node_cordoned_since_keeps_its_part() -> None:
    # its part was given back to hold it again, and the cordoned node took nothing: its CPU
    # and labels stopped counting until the node was uncordoned
    shim = _restarted([node_object("n0")], [_kant_pod("a", "n0")])
    try:
        shim.handle("Pod", "ADDED", _foreign("q", "n0", {"nvidia.com/gpu": "4", "cpu": "2"}))
        held = shim._held["ns/q"]
        shim.handle("Node", "MODIFIED", {**node_object("n0"), "spec": {"unschedulable": True}})
        shim.cycle()
        assert shim._held.get("ns/q") == held
        assert shim.scheduler.cluster.binding(held).cpu_milli == 2000
    finally:
        shim._pool.shutdown()


def test_a_gpu_share_no_gpu_has_room_for_is_held_in_part_with_its_cpu() -> None:
    # (the binding of a share on no GPU was refused: nothing of it was held, its CPU neither)
    shim = _restarted([node_object("n0")], [_kant_pod("a", "n0")])
    try:
        share = {"metadata": {"annotations": {"gpu-fraction": "0.5"}}}
        pod = _foreign("s", "n0", {"cpu": "3"})
        pod["metadata"] = {**pod["metadata"], **share["metadata"]}
        shim.handle("Pod", "ADDED", pod)
        b = shim.scheduler.cluster.binding(shim._held["ns/s"])
        assert (b.gpus, b.gpu_milli, b.cpu_milli) == ((), 1000, 3000) and "ns/s" in shim._left_out
    finally:
        shim._pool.shutdown()
