"""A long-running shim on a real kube-apiserver: kant's entries of ended jobs are acknowledged
(the queue holds the live jobs only, and a pod or group made again under its name is a new
job), and node events reach the ``Scheduler`` facade (``node_added``, ``node_removed``,
``node_unhealthy``, ``node_healthy``) with what the docs say each does."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kant.config import parse_config
from kant.k8s.kubelet import set_node_ready
from kant.k8s.shim import Shim

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

RUNTIME = "kant.io/runtime-seconds"


def _phase(cluster: Cluster, name: str) -> str | None:
    return cluster.pods().get(name, {}).get("status", {}).get("phase")


def _pod_id(cluster: Cluster, name: str) -> str:
    return str(cluster.get(name)["metadata"]["annotations"]["kant.io/pod-id"])


def _delete(cluster: Cluster, name: str) -> None:
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/{name}", {"gracePeriodSeconds": 0})
    wait_for(lambda: name not in cluster.pods(), what=f"{name} gone")


def _waits(cluster: Cluster, name: str, code: str) -> None:
    """The pod says it waits for ``code`` (kant's PodScheduled condition) and is not bound."""

    def says() -> bool:
        for c in cluster.get(name).get("status", {}).get("conditions") or ():
            if c["type"] == "PodScheduled" and code in c.get("message", ""):
                return True
        return False

    wait_for(says, what=f"{name}'s condition to name {code}")
    assert cluster.node_of(name) is None


def _entries(shim: Shim) -> list[str]:
    """The ids of the jobs kant's queue holds (read with the shim stopped)."""
    return sorted(e.id for e in shim.scheduler.queue.entries())


# ----------------------------------------------------------------- ended jobs


def test_a_long_running_shim_keeps_books_only_for_its_live_jobs_and_pods(cluster: Cluster) -> None:
    """Jobs end every way a shim sees: pods and gangs that finish (the gang's group starting
    a new job after each), a waiting pod deleted, a running pod deleted, a gang that loses a
    pod. Each ended job's entry is acknowledged; only the job still running is kept. Once
    the ended pods and the groups are deleted too, the shim keeps no job number or group
    status for them."""
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    shim = cluster.start_shim()
    cluster.pod("forever", gpus=2)  # no runtime: it runs until the end of the test
    wait_for(lambda: cluster.node_of("forever"), what="forever bound")
    ended = 0
    for wave in range(4):
        names = [f"p{wave}-{i}" for i in range(3)] + [f"g{wave}-{i}" for i in range(2)]
        for name in names:
            group = "g" if name.startswith("g") else None
            cluster.pod(name, gpus=2, group=group, annotations={RUNTIME: "0.2"})
        ended += 4  # three lone pods and the group's next job
        wait_for(lambda names=names: all(_phase(cluster, n) == "Succeeded" for n in names),
                 what=f"wave {wave} finished")  # fmt: skip
        assert _pod_id(cluster, f"g{wave}-0").startswith(f"{cluster.ns}.g#{wave + 1}/")
    cluster.pod("too-big", gpus=9)  # no node has 9 GPUs: it waits, then is deleted
    _waits(cluster, "too-big", "kant: ")
    cluster.pod("running", gpus=2)
    wait_for(lambda: _phase(cluster, "running") == "Running", what="running runs")
    cluster.pod_group("h", 2)
    cluster.pod("h-0", gpus=2, group="h")
    cluster.pod("h-1", gpus=2, group="h")
    wait_for(lambda: _phase(cluster, "h-0") == _phase(cluster, "h-1") == "Running",
             what="gang h running")  # fmt: skip
    for name in ("too-big", "running", "h-0"):  # h-1 is stopped: the gang is requeued whole
        _delete(cluster, name)
    ended += 3
    wait_for(lambda: "h-1" not in cluster.pods(), what="h-1 stopped")
    wait_for(lambda: shim.scheduler.queue.released == ended, what="every ended job released")
    forever = _pod_id(cluster, "forever").split("/")[0]
    assert len(shim.scheduler.queue) == 1 and forever in shim.scheduler.queue  # (pods linger)
    gone = sorted(set(cluster.pods()) - {"forever"})  # (a Job's TTL deletes them, say)
    for name in gone:
        _delete(cluster, name)
    for group in ("g", "h"):
        cluster.api.delete(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups/{group}"
        )
    wait_for(lambda: not any(f"{cluster.ns}/{n}" in shim._pods for n in gone) and
             f"{cluster.ns}/h" not in shim._groups, what="the shim to see them gone")  # fmt: skip
    cluster.stop_shims()

    def mine(books: Any) -> list[str]:  # (keys "ns/name", "pod:ns/name", "group:ns/name")
        return sorted(k for k in books if k.split(":", 1)[-1].startswith(f"{cluster.ns}/"))

    assert _entries(shim) == [forever] and list(shim._jobs) == [forever]
    assert mine(shim._gen) == [f"pod:{cluster.ns}/forever"]
    assert mine(shim._pg_status) == mine(shim._gang_wait) == []
    assert mine(shim._bases_of) == [f"{cluster.ns}/forever"]
    shim.scheduler.check_invariants()


@pytest.mark.parametrize("restart", [False, True], ids=["same shim", "after a restart"])
def test_a_pod_and_a_gang_made_again_under_their_names_after_their_jobs_ended_run_as_usual(
    cluster: Cluster, restart: bool
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    shim = cluster.start_shim()
    cluster.pod("a", annotations={RUNTIME: "0.2"})
    cluster.pod("g-0", gpus=4, group="g", annotations={RUNTIME: "0.2"})
    cluster.pod("g-1", gpus=4, group="g", annotations={RUNTIME: "0.2"})
    wait_for(lambda: all(_phase(cluster, n) == "Succeeded" for n in ("a", "g-0", "g-1")),
             what="a and g finished")  # fmt: skip
    wait_for(lambda: shim.scheduler.queue.released == 2, what="both jobs released")
    if restart:
        cluster.stop_shims()
        shim = cluster.start_shim()  # (g-0 and g-1, Succeeded, still name job g#1)
    _delete(cluster, "a")
    cluster.pod("a", annotations={RUNTIME: "0.5"})  # the same name, another pod: a new job
    cluster.pod("g-2", gpus=4, group="g")
    cluster.pod("g-3", gpus=4, group="g")
    wait_for(lambda: all(cluster.node_of(n) for n in ("a", "g-2", "g-3")), what="all bound")
    # (its old pod is gone, and its job was acknowledged: its number is given again)
    assert _pod_id(cluster, "a").startswith(f"{cluster.ns}..a#1/")
    assert _pod_id(cluster, "g-2").startswith(f"{cluster.ns}.g#2/")
    cluster.pod("b")  # once the second "a" has finished, its GPUs are free again
    wait_for(lambda: cluster.node_of("b"), what="b bound")
    assert _phase(cluster, "a") == "Succeeded"
    cluster.stop_shims()
    assert len(_entries(shim)) == 2  # g#2 and b run; the second "a" was acknowledged too
    shim.scheduler.check_invariants()


def test_a_pod_made_again_before_the_cycle_that_acknowledges_its_old_job_gets_the_next_number(
    cluster: Cluster,
) -> None:
    """Ended jobs are acknowledged after the next cycle: a pod deleted and made again under
    its name before that cycle is a new job all the same, not a duplicate of the old one."""
    cluster.node("n0")
    cluster.pod("a")
    shim = Shim(cluster.api, parse_config({}))  # (driven by the test: no watch, no loop)
    try:
        shim.sync()
        shim.cycle()
        shim.reap(wait=True)
        assert _pod_id(cluster, "a").startswith(f"{cluster.ns}..a#1/")
        old = cluster.get("a")
        _delete(cluster, "a")
        shim.handle("Pod", "DELETED", old)  # its job is cancelled, and listed until a cycle
        assert f"{cluster.ns}..a#1" in shim.scheduler.queue
        cluster.pod("a")
        shim.handle("Pod", "ADDED", cluster.get("a"))
        shim.cycle()
        shim.reap(wait=True)
        assert cluster.node_of("a") == "n0"
        assert _pod_id(cluster, "a").startswith(f"{cluster.ns}..a#2/")
        assert _entries(shim) == [f"{cluster.ns}..a#2"]
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


# ----------------------------------------------------------------- node events


def test_a_deleted_node_requeues_its_gang_whole_and_is_not_kept_as_lost(
    cluster: Cluster,
) -> None:
    for n in ("n0", "n1", "n2"):
        cluster.node(n)
    cluster.pod_group("g", 2)
    shim = cluster.start_shim()
    cluster.pod("g-0", group="g")
    cluster.pod("g-1", group="g")
    first = wait_for(lambda: cluster.node_of("g-0") and cluster.node_of("g-1") and
                     (cluster.node_of("g-0"), cluster.node_of("g-1")), what="gang bound")  # fmt: skip
    cluster.api.delete(f"/api/v1/nodes/{first[0]}")
    # both pods go, the one on the node still there too: the gang restarts whole
    wait_for(lambda: not ({"g-0", "g-1"} & set(cluster.pods())), what="both pods gone")
    cluster.pod("g-2", group="g")  # the job controller recreates them
    cluster.pod("g-3", group="g")
    wait_for(lambda: cluster.node_of("g-2") and cluster.node_of("g-3"), what="gang bound again")
    assert {cluster.node_of("g-2"), cluster.node_of("g-3")} == {"n0", "n1", "n2"} - {first[0]}
    cluster.stop_shims()
    assert shim.scheduler.lost_nodes() == ()  # (node_lost kept every deleted node's spec)
    assert first[0] not in shim.scheduler.cluster
    shim.scheduler.check_invariants()


def _gang_on_nodes(cluster: Cluster, a: str, b: str) -> tuple[str, str]:
    cluster.pod(a, group="g")
    cluster.pod(b, group="g")
    return wait_for(lambda: cluster.node_of(a) and cluster.node_of(b) and
                    (cluster.node_of(a), cluster.node_of(b)), what=f"{a}, {b} bound")  # fmt: skip


def test_a_gang_interrupted_past_its_limit_fails_and_its_pods_made_again_stay_unbound(
    cluster: Cluster,
) -> None:
    """With ``interruptionLimitCount: 1`` a gang survives one deleted node: its controller's
    new pods run. Its second interruption fails it, although the pods of its first run were
    all gone in between (the count lives as long as its PodGroup), and the pods made again
    then wait, saying why."""
    for n in ("n0", "n1", "n2", "n3"):
        cluster.node(n)
    cluster.pod_group("g", 2)
    shim = cluster.start_shim({"queueing": {"requeuing": {"interruptionLimitCount": 1}}})
    first = _gang_on_nodes(cluster, "g-0", "g-1")
    cluster.api.delete(f"/api/v1/nodes/{first[0]}")
    wait_for(lambda: not ({"g-0", "g-1"} & set(cluster.pods())), what="both pods gone")
    second = _gang_on_nodes(cluster, "g-2", "g-3")
    cluster.api.delete(f"/api/v1/nodes/{second[0]}")
    wait_for(lambda: not ({"g-2", "g-3"} & set(cluster.pods())), what="both pods gone")
    cluster.pod("g-4", group="g")
    cluster.pod("g-5", group="g")
    _waits(cluster, "g-4", "interruption limit 1 reached; last: node")
    _waits(cluster, "g-5", "failed")
    cluster.looked("g-4", "g-5")
    assert cluster.node_of("g-4") is None and cluster.node_of("g-5") is None
    # the group deleted and made again is a new job: its count starts from 0
    _delete(cluster, "g-4")
    _delete(cluster, "g-5")
    cluster.api.delete(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups/g")
    wait_for(lambda: f"{cluster.ns}/g" not in shim._groups, what="group gone")
    cluster.pod_group("g", 2)
    _gang_on_nodes(cluster, "g-6", "g-7")
    cluster.stop_shims()
    shim.scheduler.check_invariants()


def test_a_pod_that_fails_is_no_interruption_and_its_gang_runs_again(cluster: Cluster) -> None:
    """With a limit of 0, a gang whose container exits with an error is requeued whole (its
    other pod deleted) and the pods its controller makes again run: only the cluster's doing
    (a node deleted or NotReady) is an interruption."""
    for n in ("n0", "n1", "n2"):
        cluster.node(n)
    cluster.pod_group("g", 2)
    shim = cluster.start_shim({"queueing": {"requeuing": {"interruptionLimitCount": 0}}})
    _gang_on_nodes(cluster, "g-0", "g-1")
    wait_for(lambda: _phase(cluster, "g-0") == "Running", what="g-0 running")
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/g-0/status",
                      {"status": {"phase": "Failed"}})  # fmt: skip
    wait_for(lambda: "g-1" not in cluster.pods(), what="g-1 stopped: the gang is requeued")
    _delete(cluster, "g-0")
    _gang_on_nodes(cluster, "g-2", "g-3")
    cluster.stop_shims()
    shim.scheduler.check_invariants()


def test_a_podgroup_made_again_under_its_name_counts_its_interruptions_from_zero(
    cluster: Cluster,
) -> None:
    for n in ("n0", "n1", "n2", "n3", "n4"):
        cluster.node(n)
    cluster.pod_group("g", 2)
    shim = cluster.start_shim({"queueing": {"requeuing": {"interruptionLimitCount": 1}}})
    first = _gang_on_nodes(cluster, "g-0", "g-1")
    cluster.api.delete(f"/api/v1/nodes/{first[0]}")  # one interruption
    wait_for(lambda: not ({"g-0", "g-1"} & set(cluster.pods())), what="both pods gone")
    group = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups/g"
    cluster.api.delete(group)  # the user deletes the job and applies it again
    wait_for(lambda: f"{cluster.ns}/g" not in shim._groups, what="group gone")
    cluster.pod_group("g", 2)
    second = _gang_on_nodes(cluster, "g-2", "g-3")
    cluster.api.delete(f"/api/v1/nodes/{second[0]}")  # its first: the limit is not passed
    wait_for(lambda: not ({"g-2", "g-3"} & set(cluster.pods())), what="both pods gone")
    _gang_on_nodes(cluster, "g-4", "g-5")
    cluster.stop_shims()
    shim.scheduler.check_invariants()


def test_a_node_deleted_and_created_again_with_fewer_gpus_is_taken_as_it_is_now(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    shim = cluster.start_shim()
    cluster.pod("a")
    wait_for(lambda: cluster.node_of("a"), what="a bound")
    cluster.api.delete("/api/v1/nodes/n0")
    wait_for(lambda: "a" not in cluster.pods(), what="a stopped")
    cluster.node("n0", gpus=4)
    cluster.pod("b", gpus=4)
    assert wait_for(lambda: cluster.node_of("b"), what="b bound") == "n0"
    gpus = cluster.get("b")["metadata"]["annotations"]["kant.io/gpus"]
    assert {int(g) for g in gpus.split(",")} == {0, 1, 2, 3}
    cluster.pod("c", gpus=4)
    _waits(cluster, "c", "kant: ")  # n0 has 4 GPUs now, all b's
    cluster.stop_shims()
    assert shim.scheduler.cluster.node("n0").gpus == 4 and shim.scheduler.lost_nodes() == ()


def test_a_pod_waiting_while_its_only_node_is_not_ready_is_bound_once_it_is_ready_again(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.start_shim()
    set_node_ready(cluster.api, "n0", False)
    cluster.looked(nodes=("n0",))  # (the shim has seen it not ready)
    cluster.pod("a")
    _waits(cluster, "a", "kant: ")
    set_node_ready(cluster.api, "n0", True)
    assert wait_for(lambda: cluster.node_of("a"), what="a bound") == "n0"


def test_a_cordoned_node_keeps_its_running_pod_and_takes_no_new_one_until_uncordoned(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    shim = cluster.start_shim()
    cluster.pod("a", gpus=4)
    wait_for(lambda: _phase(cluster, "a") == "Running", what="a running")
    cluster.api.patch("/api/v1/nodes/n0", {"spec": {"unschedulable": True}})
    cluster.looked(nodes=("n0",))  # (the shim has seen it cordoned)
    cluster.pod("b", gpus=4)
    _waits(cluster, "b", "kant: ")
    cluster.looked("a", "b")
    assert cluster.node_of("b") is None and _phase(cluster, "a") == "Running"
    cluster.api.patch("/api/v1/nodes/n0", {"spec": {"unschedulable": False}})
    assert wait_for(lambda: cluster.node_of("b"), what="b bound once uncordoned") == "n0"
    assert _phase(cluster, "a") == "Running" and not shim.scheduler.lost_nodes()


def test_a_node_relabelled_to_another_gpu_model_takes_pods_of_that_model(
    cluster: Cluster,
) -> None:
    cluster.node("n0", model="A")
    cluster.start_shim()
    body: dict[str, Any] = {
        "metadata": {"name": "wants-b", "namespace": cluster.ns},
        "spec": {"schedulerName": "kant", "nodeSelector": {"nvidia.com/gpu.product": "B"},
                 "containers": [{"name": "c", "image": "x", "resources": {
                     "requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]},
    }  # fmt: skip
    cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)
    _waits(cluster, "wants-b", "kant: ")
    cluster.api.patch("/api/v1/nodes/n0", {"metadata": {"labels": {"nvidia.com/gpu.product": "B"}}})
    assert wait_for(lambda: cluster.node_of("wants-b"), what="wants-b bound") == "n0"


def test_a_stopped_shim_closes_its_watch_streams_at_once(cluster: Cluster) -> None:
    """The shim's watchers end with it: their open streams (60 s each) are closed, not left
    until the server's timeout. (An API server being stopped waits for its open watches: a
    demo or a test environment stopping after a shim waited 10 s for nothing.)"""
    cluster.node("n0")
    before = set(threading.enumerate())
    cluster.start_shim()
    watchers = [
        t for t in threading.enumerate() if t not in before and t.name.startswith("kant-watch-")
    ]
    assert {t.name for t in watchers} >= {"kant-watch-Node", "kant-watch-Pod"}
    wait_for(lambda: all(getattr(t, "_close", None) for t in watchers), what="their streams open")
    cluster.stop_shims()
    for t in watchers:
        t.join(5)
    assert not [t.name for t in watchers if t.is_alive()]


@pytest.mark.parametrize("lost", ["not Ready", "deleted"])
def test_a_gang_with_a_pod_on_a_node_lost_while_no_shim_ran_starts_again_whole(
    cluster: Cluster, lost: str
) -> None:
    # (the restarted shim took the gang back in part: its pod on the lost node was counted
    # as ended, the other ran on alone, and once the node was Ready again that pod was held
    # as another scheduler's, charged to no tenant: an isolated tenant of 16 GPUs ran 24)
    for n in ("n0", "n1", "n2"):
        cluster.node(n)
    cfg = {"tenants": [{"name": "t", "mode": "isolated", "quotas": {"H100": {"nominalQuota": 16}}}]}
    q = {"kant.io/queue": "t"}
    cluster.pod_group("g", 2)
    cluster.start_shim(cfg)
    cluster.pod("g-0", group="g", labels=q)
    cluster.pod("g-1", group="g", labels=q)
    where = wait_for(lambda: cluster.node_of("g-0") and cluster.node_of("g-1") and
                     (cluster.node_of("g-0"), cluster.node_of("g-1")), what="gang bound")  # fmt: skip
    cluster.stop_shims()
    gone = where[1]
    if lost == "deleted":
        cluster.api.delete(f"/api/v1/nodes/{gone}")
    else:
        set_node_ready(cluster.api, gone, False)
    shim = cluster.start_shim(cfg)
    # as a shim that had been up: the gang is requeued whole, its pods stopped
    wait_for(lambda: "g-0" not in (pods := cluster.pods()) or
             pods["g-0"]["metadata"].get("deletionTimestamp"), what="g-0 stopped")  # fmt: skip
    assert shim._jobs == {}
    if lost == "not Ready":
        set_node_ready(cluster.api, gone, True)
    # t holds nothing now: two new 8-GPU pods of t run, a third waits on its quota
    for name in ("x", "y", "z"):
        cluster.pod(name, labels=q)
    wait_for(lambda: cluster.node_of("x") and cluster.node_of("y"), what="x, y bound")
    cluster.looked("z")
    assert cluster.node_of("z") is None
    shim.scheduler.check_invariants()
