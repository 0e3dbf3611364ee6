"""Nodes kant cannot take (more than 64 GPUs or NICs, ``MAX_GPUS_PER_NODE`` and
``MAX_NICS_PER_NODE``; or any other node value kant refuses) under the shim: the node is
left out with one warning naming it and the limit, the other nodes go on taking pods, and
the node comes in once it reports what kant can take. A node kant already took that turns
into one it cannot take is left out too, never kept as it was: once kant's pods there have
ended, or at once when none runs."""

from __future__ import annotations

import logging
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
from kant.model import PodId

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
        return {}  # (an event)

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
