"""kant scheduling a real kube-apiserver (etcd + kube-apiserver built from Debian's source
package): gangs, annotations, conditions, quota reclaim through the Eviction API, node loss,
and a restart of the shim."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import attrs
import pytest

from kant.config import parse_config
from kant.k8s import shim as shim_module
from kant.k8s.client import ApiError
from kant.k8s.kubelet import set_node_ready
from kant.k8s.shim import Shim
from kant.k8s.translate import build_job
from kant.model import Job, PodId

from .conftest import Cluster, wait_for

# the test server has a self-signed certificate
pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

QUOTAS: dict[str, Any] = {
    "tenants": [
        {"name": "team-a", "quotas": {"H100": {"nominalQuota": 8}}},
        {"name": "team-b", "quotas": {"H100": {"nominalQuota": 8}}},
    ]
}


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in pod.get("status", {}).get("conditions") or ():
        if c["type"] == kind:
            return dict(c)
    return None


def test_a_gang_is_bound_all_at_once_or_not_at_all(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("big", 3)
    cluster.start_shim()
    for i in range(3):
        cluster.pod(f"big-{i}", group="big")
    # 3 x 8 GPUs on 16 GPUs: none is bound, and every pod says why
    wait_for(
        lambda: all(_condition(p, "PodScheduled") for p in cluster.pods().values()),
        what="conditions",
    )
    cluster.looked("big-0", "big-1", "big-2")
    assert [cluster.node_of(f"big-{i}") for i in range(3)] == [None, None, None]
    cluster.node("n2")
    nodes = wait_for(lambda: all(cluster.node_of(f"big-{i}") for i in range(3)) and
                     [cluster.node_of(f"big-{i}") for i in range(3)], what="the gang bound")  # fmt: skip
    assert sorted(nodes) == ["n0", "n1", "n2"]

    def phase() -> str:
        pg = cluster.api.get(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups/big"
        )
        return str(pg.get("status", {}).get("phase", ""))

    # the group's status is written after its pods' bindings (eventually, as in Kubernetes)
    wait_for(lambda: phase() == "Scheduled", what="the pod group's phase to be Scheduled")


def test_a_pod_group_short_of_min_member_waits_and_none_of_its_pods_is_bound(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    cluster.start_shim()
    cluster.pod("g-0", gpus=4, group="g")
    cluster.looked("g-0")
    assert cluster.node_of("g-0") is None
    cluster.pod("g-1", gpus=4, group="g")
    wait_for(lambda: cluster.node_of("g-0") and cluster.node_of("g-1"), what="both bound")


def _says(cluster: Cluster, name: str, text: str) -> bool:
    cond = _condition(cluster.get(name), "PodScheduled")
    return cond is not None and text in cond.get("message", "")


def test_a_waiting_pod_relabelled_to_another_group_counts_for_that_group_only(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("ga", 3)  # (no PodGroup gb yet)
    cluster.start_shim()
    cluster.pod("a-1", gpus=1, group="ga")
    cluster.pod("x", gpus=1, group="ga")
    wait_for(lambda: _says(cluster, "x", f"2 of the 3 pods of {cluster.ns}/ga"), what="x waits")
    label = {"scheduling.x-k8s.io/pod-group": "gb"}
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/x", {"metadata": {"labels": label}})
    cluster.pod("a-2", gpus=1, group="ga")  # ga has 2 pods of its 3, x is not one
    wait_for(lambda: _says(cluster, "a-2", f"2 of the 3 pods of {cluster.ns}/ga"),
             what="a-2 waiting for its gang")  # fmt: skip
    # (its condition is written for its new group at once, not after conditionIntervalSeconds)
    wait_for(lambda: _says(cluster, "x", f"PodGroup {cluster.ns}/gb does not exist"),
             what="x waiting for its new group")  # fmt: skip
    cluster.looked("a-1", "a-2", "x")
    # (a-1's condition says 2 of ga's 3, or 1 if a cycle ran between the relabelling and
    # a-2's creation: a count that drops and comes back is rewritten only after
    # conditionIntervalSeconds; never 3, x being no longer one of them)
    assert _says(cluster, "a-1", f"of the 3 pods of {cluster.ns}/ga")
    assert not _says(cluster, "a-1", "3 of the 3")
    assert [cluster.node_of(n) for n in ("a-1", "a-2", "x")] == [None, None, None]
    cluster.pod_group("gb", 1)
    wait_for(lambda: cluster.node_of("x"), what="x bound as gang gb")
    cluster.pod("a-3", gpus=1, group="ga")
    wait_for(lambda: all(cluster.node_of(f"a-{i}") for i in (1, 2, 3)), what="gang ga bound")
    ids = {n: cluster.get(n)["metadata"]["annotations"]["kant.io/pod-id"]
           for n in ("a-1", "a-2", "a-3", "x")}  # fmt: skip
    assert ids["x"].startswith(f"{cluster.ns}.gb#1/")
    assert all(ids[f"a-{i}"].startswith(f"{cluster.ns}.ga#1/") for i in (1, 2, 3))


def test_bound_pods_carry_their_gpu_and_nic_annotations(cluster: Cluster) -> None:
    cluster.node("n0", nics=8)
    cluster.start_shim()
    cluster.pod("a", gpus=4, nics=2)
    cluster.pod("b", gpus=4, nics=2)
    wait_for(lambda: cluster.node_of("a") and cluster.node_of("b"), what="bound")
    got = {}
    for name in ("a", "b"):
        ann = cluster.get(name)["metadata"]["annotations"]
        got[name] = (
            {int(g) for g in ann["kant.io/gpus"].split(",")},
            ann["kant.io/nics"].count(",") + 1,
        )
        assert ann["kant.io/pod-id"].startswith(f"{cluster.ns}..{name}#1/worker/0")
    assert got["a"][0] | got["b"][0] == set(range(8)) and not got["a"][0] & got["b"][0]
    assert got["a"][1] == got["b"][1] == 2


def test_a_pending_pods_condition_names_kants_reason_and_an_event_says_failed_scheduling(
    cluster: Cluster,
) -> None:
    cluster.node("n0", model="H100")
    cluster.start_shim(QUOTAS | {"defaultMode": "isolated"})
    cluster.pod("small", gpus=8, labels={"kant.io/queue": "team-a"})
    wait_for(lambda: cluster.node_of("small"), what="bound")
    cluster.pod("over", gpus=8, labels={"kant.io/queue": "team-a"})
    cond = wait_for(lambda: _condition(cluster.get("over"), "PodScheduled"), what="condition")
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("kant: quota_exceeded")

    def failed_scheduling() -> bool:
        events = cluster.api.get(f"/api/v1/namespaces/{cluster.ns}/events")["items"]
        return any(
            e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "over"
            for e in events
        )

    wait_for(failed_scheduling, what="a FailedScheduling event")


def _reclaim_held_by_a_budget(cluster: Cluster) -> tuple[Shim, str, str, dict[str, Any]]:
    """team-b borrows team-a's 8 idle GPUs (b-0 and b-1, one per node), a PodDisruptionBudget
    allows no disruption of them, and team-a's a-0 reclaims: returns the shim, the victim
    marked (its eviction refused), the budget's status path and status. The test is the
    disruption controller."""
    cluster.node("n0", model="H100")
    cluster.node("n1", model="H100")
    shim = cluster.start_shim(QUOTAS)
    b = {"kant.io/queue": "team-b", "app": "b"}
    cluster.pod("b-0", labels=b)
    cluster.pod("b-1", labels=b)  # team-b borrows team-a's idle 8 GPUs
    wait_for(lambda: cluster.node_of("b-0") and cluster.node_of("b-1"), what="team-b bound")

    path, status = _budget_allowing_no_disruption(cluster, ["b-0", "b-1"])
    cluster.pod("a-0", labels={"kant.io/queue": "team-a"})
    victim = wait_for(
        lambda: next(
            (n for n in ("b-0", "b-1") if _condition(cluster.get(n), "DisruptionTarget")), None
        ),
        what="a victim marked",
    )
    return shim, victim, path, status


def _budget_allowing_no_disruption(cluster: Cluster, pods: list[str]) -> tuple[str, dict[str, Any]]:
    """A PodDisruptionBudget over the pods labelled ``app: b`` (``pods``, bound), whose
    status allows no disruption: returns its status path and status. The test is the
    disruption controller."""

    def ready(name: str) -> bool:
        cond = _condition(cluster.get(name), "Ready")
        return cond is not None and cond["status"] == "True"

    # (the eviction API lets an unready pod go whatever the budget allows: on a loaded
    # machine the fake kubelet had not yet made the victim ready, and the test failed)
    wait_for(lambda: all(ready(n) for n in pods), what=f"{', '.join(pods)} ready")
    n = len(pods)
    pv = "policy/v1" if cluster.api.has("policy/v1") else "policy/v1beta1"
    base = f"/apis/{pv}/namespaces/{cluster.ns}/poddisruptionbudgets"
    pdb = cluster.api.post(base, {"apiVersion": pv, "kind": "PodDisruptionBudget",
                                  "metadata": {"name": "b", "namespace": cluster.ns},
                                  "spec": {"minAvailable": n, "selector": {"matchLabels": {"app": "b"}}}})  # fmt: skip
    status = {"observedGeneration": pdb["metadata"].get("generation", 1), "disruptionsAllowed": 0,
              "currentHealthy": n, "desiredHealthy": n, "expectedPods": n}  # fmt: skip
    cluster.api.patch(f"{base}/b/status", {"status": status})
    return f"{base}/b/status", status


def test_a_quota_reclaim_evicts_the_borrower_through_the_eviction_api_and_binds_the_reclaimer(
    cluster: Cluster,
) -> None:
    _shim, victim, path, status = _reclaim_held_by_a_budget(cluster)
    cluster.looked(victim, poke=True)  # the shim retries; the budget answers 429
    assert not cluster.get(victim)["metadata"].get("deletionTimestamp"), "evicted past the budget"
    assert cluster.node_of(victim) is not None and cluster.node_of("a-0") is None
    cluster.api.patch(path, {"status": dict(status, disruptionsAllowed=1, desiredHealthy=1)})
    node = wait_for(lambda: cluster.node_of("a-0"), what="the reclaimer bound")
    assert victim not in cluster.pods()
    other = "b-1" if victim == "b-0" else "b-0"
    assert cluster.node_of(other) is not None and cluster.node_of(other) != node


@pytest.mark.parametrize("gone", ["deleted", "bound by another binder"])
def test_a_victim_a_budget_kept_is_spared_once_its_preemptor_no_longer_needs_it(
    cluster: Cluster, gone: str
) -> None:
    shim, victim, path, status = _reclaim_held_by_a_budget(cluster)
    if gone == "deleted":
        cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/a-0", {"gracePeriodSeconds": 0})
        wait_for(lambda: "a-0" not in cluster.pods(), what="a-0 gone")
    else:
        cluster.node("n2", model="H100")
        cluster.api.post(
            f"/api/v1/namespaces/{cluster.ns}/pods/a-0/binding",
            {"apiVersion": "v1", "kind": "Binding",
             "metadata": {"name": "a-0", "namespace": cluster.ns},
             "target": {"apiVersion": "v1", "kind": "Node", "name": "n2"}},
        )  # fmt: skip
    # the eviction is abandoned: the victim is told so, and runs on, charged as before
    cond = wait_for(
        lambda: (
            (c := _condition(cluster.get(victim), "DisruptionTarget"))
            and c["status"] == "False"
            and c
        ),
        what="the victim's DisruptionTarget set back",
    )
    assert "a-0" in cond["message"]
    victim_job = shim.scheduler.queue.get(f"{cluster.ns}..{victim}#1")
    assert victim_job is not None
    wait_for(
        lambda: not shim._evict and not victim_job.terminating,
        what="no eviction left to retry, the victim running in kant's books",
    )
    # the budget allows a disruption now: nothing is evicted for a preemptor gone
    cluster.api.patch(path, {"status": dict(status, disruptionsAllowed=1, desiredHealthy=1)})
    cluster.looked(victim, poke=True)
    assert {"b-0", "b-1"} <= set(cluster.pods())
    assert not cluster.get(victim)["metadata"].get("deletionTimestamp")
    assert cluster.node_of(victim) is not None


def test_a_victim_a_budget_kept_is_still_evicted_while_a_partly_running_pod_level_preemptor_waits(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """g, pod-level (two 8-GPU pods at priority 1000), places one pod on the free node and
    preempts b-0 for the other; a budget refuses the eviction. g runs (RUNNING) yet still
    waits for b-0's node: the eviction is retried, b-0 stays marked (its DisruptionTarget
    never set back) and goes once the budget allows, and g's second pod takes its node.
    (Kubernetes objects make only gangs and lone pods: the pod group is submitted
    pod-level here, as an orchestrator embedding the shim's loop may submit its jobs.)"""

    def pod_level(*args: Any, **kw: Any) -> tuple[Job, dict[PodId, str]]:
        job, ids = build_job(*args, **kw)
        return (attrs.evolve(job, gang=False) if job.num_pods > 1 else job), ids

    monkeypatch.setattr(shim_module, "build_job", pod_level)
    cluster.node("n0")
    cluster.node("n1")
    shim = cluster.start_shim()
    cluster.pod("b-0", labels={"app": "b"})
    held = wait_for(lambda: cluster.node_of("b-0"), what="b-0 bound")
    path, status = _budget_allowing_no_disruption(cluster, ["b-0"])
    with contextlib.suppress(ApiError):  # (cluster-wide: another test may have made it)
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": "kant-test-high"}, "value": 1000})  # fmt: skip
    cluster.pod_group("g", 2)
    cluster.pod("g-0", group="g", priority_class="kant-test-high")
    cluster.pod("g-1", group="g", priority_class="kant-test-high")
    wait_for(lambda: cluster.node_of("g-0") or cluster.node_of("g-1"), what="one pod of g bound")
    first = "g-0" if cluster.node_of("g-0") else "g-1"
    second = "g-1" if first == "g-0" else "g-0"
    wait_for(lambda: _condition(cluster.get("b-0"), "DisruptionTarget"), what="b-0 marked")
    g = shim.scheduler.queue.get(f"{cluster.ns}.g#1")
    assert g is not None and g.phase.value == "running" and not g.job.gang
    victim = shim.scheduler.queue.get(f"{cluster.ns}..b-0#1")
    assert victim is not None
    for _ in range(3):  # several cycles, each retrying: the budget answers 429 to each
        cluster.looked("b-0", poke=True)
        cond = _condition(cluster.get("b-0"), "DisruptionTarget")
        assert cond is not None and cond["status"] == "True", cond
        assert victim.terminating, "b-0 spared in kant's books while g waits for it"
        assert cluster.node_of("b-0") == held and cluster.node_of(second) is None
    assert g.waits_for_nomination
    cluster.api.patch(path, {"status": dict(status, disruptionsAllowed=1, desiredHealthy=0)})
    node = wait_for(lambda: cluster.node_of(second), what=f"{second} bound")
    assert node == held and "b-0" not in cluster.pods()
    assert cluster.node_of(first) not in (None, held)


def test_a_victim_a_budget_kept_is_spared_once_its_pending_preemptor_lost_its_nomination(
    cluster: Cluster,
) -> None:
    """h (priority 1000, only for nodes labelled pool=x) preempts b-0 on n0; a budget refuses
    the eviction. n0 is then relabelled out of pool x: h's nomination was made for the node
    as it was, so it ends, and h, still pending, fits nowhere and waits for nothing. The
    eviction is given up (b-0's DisruptionTarget set back to False), and once the budget
    allows a disruption nothing is evicted for h."""
    with contextlib.suppress(ApiError):  # (cluster-wide: another test may have made it)
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": "kant-test-high"}, "value": 1000})  # fmt: skip
    cluster.node("n0", labels={"example.com/pool": "x"})
    shim = cluster.start_shim()
    cluster.pod("b-0", labels={"app": "b"})
    wait_for(lambda: cluster.node_of("b-0"), what="b-0 bound")
    path, status = _budget_allowing_no_disruption(cluster, ["b-0"])
    cluster.pod("h", priority_class="kant-test-high", node_selector={"example.com/pool": "x"})
    wait_for(lambda: _condition(cluster.get("b-0"), "DisruptionTarget"), what="b-0 marked")
    cluster.looked("b-0", poke=True)  # retried: the budget answers 429, and h waits for b-0's node
    cond = _condition(cluster.get("b-0"), "DisruptionTarget")
    assert cond is not None and cond["status"] == "True"
    cluster.api.patch("/api/v1/nodes/n0", {"metadata": {"labels": {"example.com/pool": None}}})
    cond = wait_for(
        lambda: (
            (c := _condition(cluster.get("b-0"), "DisruptionTarget"))
            and c["status"] == "False"
            and c
        ),
        what="b-0's DisruptionTarget set back",
    )
    assert "h" in cond["message"]
    h = shim.scheduler.queue.get(f"{cluster.ns}..h#1")
    victim = shim.scheduler.queue.get(f"{cluster.ns}..b-0#1")
    assert h is not None and h.phase.value == "pending" and not h.waits_for_nomination
    assert victim is not None
    wait_for(lambda: not shim._evict and not victim.terminating, what="no eviction left")
    cluster.api.patch(path, {"status": dict(status, disruptionsAllowed=1, desiredHealthy=0)})
    cluster.looked("b-0", poke=True)
    assert not cluster.get("b-0")["metadata"].get("deletionTimestamp")
    assert cluster.node_of("b-0") == "n0" and cluster.node_of("h") is None


def test_a_node_going_not_ready_requeues_its_gang_whole(cluster: Cluster) -> None:
    for n in ("n0", "n1", "n2"):
        cluster.node(n)
    cluster.pod_group("g", 2)
    cluster.start_shim()
    cluster.pod("g-0", group="g")
    cluster.pod("g-1", group="g")
    first = wait_for(lambda: cluster.node_of("g-0") and cluster.node_of("g-1") and
                     (cluster.node_of("g-0"), cluster.node_of("g-1")), what="gang bound")  # fmt: skip
    set_node_ready(cluster.api, first[0], False)
    # both pods go, the one on the healthy node too: the gang restarts whole
    wait_for(lambda: not ({"g-0", "g-1"} & set(cluster.pods())), what="both pods gone")
    cluster.pod("g-2", group="g")  # the job controller recreates them
    cluster.pod("g-3", group="g")
    second = wait_for(lambda: cluster.node_of("g-2") and cluster.node_of("g-3") and
                      (cluster.node_of("g-2"), cluster.node_of("g-3")), what="gang bound again")  # fmt: skip
    assert first[0] not in second and len(set(second)) == 2


def test_a_shim_restart_loses_no_binding_and_double_books_nothing(cluster: Cluster) -> None:
    for n in ("n0", "n1", "n2"):
        cluster.node(n)
    cluster.pod_group("a", 2)
    cluster.start_shim()
    cluster.pod("a-0", group="a")
    cluster.pod("a-1", group="a")
    wait_for(lambda: cluster.node_of("a-0") and cluster.node_of("a-1"), what="gang a bound")
    before = {n: cluster.get(n)["metadata"]["annotations"] for n in ("a-0", "a-1")}
    cluster.stop_shims()
    shim = cluster.start_shim()  # a fresh shim: its state comes from the bound pods
    assert shim.scheduler.cluster.num_pods == 2
    cluster.pod_group("b", 2)
    cluster.pod("b-0", group="b")
    cluster.pod("b-1", group="b")
    cluster.pod("c", gpus=8)
    wait_for(lambda: cluster.node_of("c"), what="c bound")
    cluster.looked("b-0", "b-1", "c")
    assert cluster.node_of("b-0") is None and cluster.node_of("b-1") is None
    used = {cluster.node_of("a-0"), cluster.node_of("a-1"), cluster.node_of("c")}
    assert used == {"n0", "n1", "n2"}
    assert {n: cluster.get(n)["metadata"]["annotations"] for n in ("a-0", "a-1")} == before
    cluster.stop_shims()
    shim.scheduler.check_invariants()


def test_one_shim_holds_the_lease_and_another_takes_it_only_once_it_expires(
    cluster: Cluster,
) -> None:
    from kant.k8s.leader import LeaderElector

    a = LeaderElector(cluster.api, name="kant-test", namespace=cluster.ns, identity="a", duration=2)
    b = LeaderElector(cluster.api, name="kant-test", namespace=cluster.ns, identity="b", duration=2)
    t = time.time()
    assert a.try_acquire(t)
    assert not b.try_acquire(t + 1)  # b sees a's lease for the first time: a's
    assert a.try_acquire(t + 1)
    assert not b.try_acquire(t + 1.5)  # a renewed: b counts the lease's time again
    # a candidate whose clock runs 16 s ahead does not take a lease renewed a moment ago
    skewed = LeaderElector(cluster.api, name="kant-test", namespace=cluster.ns, identity="c",
                           duration=2)  # fmt: skip
    assert not skewed.try_acquire(t + 17.5)
    assert not b.try_acquire(t + 3.4)  # 1.9 s since b saw a's last renewal
    assert b.try_acquire(t + 3.6)  # a stopped renewing for longer than the lease
    lease = cluster.api.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{cluster.ns}/leases/kant-test"
    )
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    b.release()
    assert a.try_acquire(t + 4.5)  # released: taken at once


def _foreign_pod(cluster: Cluster, name: str, node: str, *, gpus: int = 0, cpu: str = "") -> None:
    """A pod of another scheduler, bound to ``node`` by its ``spec.nodeName``, asking
    ``gpus`` GPUs (requests and limits) or ``cpu``."""
    res: dict[str, Any] = {"requests": {"cpu": cpu}} if cpu else {}
    if gpus:
        res = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    body = {
        "metadata": {"name": name, "namespace": cluster.ns},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": res}]},
    }
    cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)


def test_pods_of_other_schedulers_hold_their_nodes_capacity(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.node("n1")
    _foreign_pod(cluster, "other", "n0", gpus=8)
    cluster.start_shim()
    cluster.pod("mine")
    assert wait_for(lambda: cluster.node_of("mine"), what="bound") == "n1"
    cluster.pod("more")
    wait_for(lambda: _condition(cluster.get("more"), "PodScheduled"), what="more waits")
    assert cluster.node_of("more") is None


def test_another_schedulers_pod_on_a_node_not_ready_is_held_once_it_is_ready_again(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # q (4 GPUs) is bound by another scheduler to n0 while n0 is not Ready: the log says
    # so (it blamed n0's max_pods, which q was far from), and q is held once n0 is Ready
    cluster.node("n0")
    cluster.start_shim()
    set_node_ready(cluster.api, "n0", False)
    cluster.looked(nodes=("n0",))
    with caplog.at_level(logging.WARNING, logger="kant"):
        _foreign_pod(cluster, "q", "n0", gpus=4)
        cluster.looked("q")
    (said,) = [r.getMessage() for r in caplog.records if f"{cluster.ns}/q:" in r.getMessage()]
    assert "not Ready" in said and "max_pods" not in said, said
    set_node_ready(cluster.api, "n0", True)
    cluster.looked(nodes=("n0",))
    cluster.pod("r", gpus=8)
    _condition_of_waiting = wait_for(lambda: _condition(cluster.get("r"), "PodScheduled"),
                                     what="r waits")  # fmt: skip
    assert cluster.node_of("r") is None, _condition_of_waiting
    cluster.pod("s", gpus=4)
    assert wait_for(lambda: cluster.node_of("s"), what="s bound") == "n0"


def test_a_node_admitting_two_pods_gets_two_one_of_another_scheduler_and_the_third_waits(
    cluster: Cluster,
) -> None:
    # allocatable pods 2 (the kubelet's maxPods): six of n0's eight GPUs stay free
    cluster.node("n0", pods=2)
    _foreign_pod(cluster, "daemon", "n0", cpu="100m")
    cluster.start_shim()
    cluster.pod("first", gpus=1)
    assert wait_for(lambda: cluster.node_of("first"), what="first bound") == "n0"
    cluster.pod("second", gpus=1)
    cond = wait_for(lambda: _condition(cluster.get("second"), "PodScheduled"), what="second waits")
    assert cluster.node_of("second") is None
    assert "max_pods" in cond.get("message", ""), cond
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/daemon", {"gracePeriodSeconds": 0})
    assert wait_for(lambda: cluster.node_of("second"), what="second bound") == "n0"


def test_a_nodes_pod_capacity_changed_while_kants_pods_run_there_is_read_in_place(
    cluster: Cluster,
) -> None:
    # n0 admits one pod and runs a; its allocatable.pods becomes 3: b and c go there at
    # once (before, the node counted as changed and took no pod until a had ended)
    cluster.node("n0", pods=1)
    shim = cluster.start_shim()
    cluster.pod("a", gpus=1)
    assert wait_for(lambda: cluster.node_of("a"), what="a bound") == "n0"
    cluster.api.patch("/api/v1/nodes/n0/status", {"status": {"allocatable": {"pods": "3"}}})
    wait_for(lambda: shim.scheduler.cluster.node("n0").max_pods == 3, what="pods 3 read")
    cluster.pod("b", gpus=1)
    cluster.pod("c", gpus=1)
    assert wait_for(lambda: cluster.node_of("b"), what="b bound") == "n0"
    assert wait_for(lambda: cluster.node_of("c"), what="c bound") == "n0"
    # lowered to 2 while 3 run: they stay, d waits naming max_pods
    cluster.api.patch("/api/v1/nodes/n0/status", {"status": {"allocatable": {"pods": "2"}}})
    wait_for(lambda: shim.scheduler.cluster.node("n0").max_pods == 2, what="pods 2 read")
    cluster.pod("d", gpus=1)
    cond = wait_for(lambda: _condition(cluster.get("d"), "PodScheduled"), what="d waits")
    assert "max_pods" in cond.get("message", ""), cond
    assert all(cluster.get(p)["status"].get("phase") == "Running" for p in "abc")
    assert cluster.node_of("d") is None


def test_another_schedulers_pod_the_kubelet_admitted_in_kants_last_slot_is_held_once_kants_pod_fails(
    cluster: Cluster,
) -> None:
    # n0 admits one pod; kant binds p (4 GPUs) to it, but the kubelet admits another
    # scheduler's pod q (4 GPUs) first and rejects p: q finds no slot while p counts, and
    # must be held once p has failed, so that r (8 GPUs) does not go to n0 while q runs
    cluster.node("n0", pods=1)
    cluster.start_shim()
    cluster.pod("p", gpus=4)
    assert wait_for(lambda: cluster.node_of("p"), what="p bound") == "n0"
    _foreign_pod(cluster, "q", "n0", gpus=4)
    wait_for(lambda: cluster.get("q").get("status", {}).get("phase") == "Running", what="q runs")
    cluster.looked("q")  # (the shim has seen q and found no slot for it)
    status = {"phase": "Failed", "reason": "OutOfpods", "message": "Pod was rejected"}
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/p/status", {"status": status})
    cluster.pod("r", gpus=8)
    wait_for(lambda: _condition(cluster.get("r"), "PodScheduled"), what="r waits")
    cluster.looked("p", "r")
    assert cluster.node_of("r") is None
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/q", {"gracePeriodSeconds": 0})
    assert wait_for(lambda: cluster.node_of("r"), what="r bound") == "n0"


@pytest.mark.parametrize("asks", ["gpus", "cpu"])
def test_another_schedulers_pod_the_kubelet_admitted_over_kants_is_held_in_full_once_kants_fails(
    cluster: Cluster, asks: str
) -> None:
    # kant binds p to n0; the kubelet admits another scheduler's q (all 8 GPUs, or all 4
    # CPUs) first and rejects p. q was held with what p left free (no GPU, no CPU) and never
    # in full: once p failed, r went to n0, onto what q runs on (a shim started then held q
    # in full and kept r waiting)
    cluster.node("n0", cpu="4")
    cluster.start_shim()
    cluster.pod("p", gpus=8 if asks == "gpus" else 1)
    assert wait_for(lambda: cluster.node_of("p"), what="p bound") == "n0"
    _foreign_pod(cluster, "q", "n0", **({"gpus": 8} if asks == "gpus" else {"cpu": "4"}))
    wait_for(lambda: cluster.get("q").get("status", {}).get("phase") == "Running", what="q runs")
    cluster.looked("q")
    status = {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": "rejected"}
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/p/status", {"status": status})
    cluster.looked("p")
    cluster.pod("r", gpus=1)
    wait_for(lambda: _condition(cluster.get("r"), "PodScheduled"), what="r waits")
    cluster.looked("r")
    assert cluster.node_of("r") is None
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/q", {"gracePeriodSeconds": 0})
    assert wait_for(lambda: cluster.node_of("r"), what="r bound") == "n0"


def test_a_binding_answered_404_calls_binding_failed_and_releases_the_rest_of_the_gang(
    cluster: Cluster,
) -> None:
    from kant.config import parse_config
    from kant.k8s.shim import Shim

    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    cluster.pod("g-0", group="g")
    cluster.pod("g-1", group="g")
    shim = Shim(cluster.api, parse_config({}))
    shim.sync()  # no watch: the shim does not see the deletion below before its cycle
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/g-1", {"gracePeriodSeconds": 0})
    result = shim.cycle()
    assert len(result.bindings) == 2
    shim.reap(wait=True)
    # g-1's binding got a 404: the gang is released in kant and g-0, bound, is stopped
    assert shim.scheduler.cluster.num_pods == 0
    wait_for(lambda: "g-0" not in cluster.pods(), what="g-0 stopped")
    shim.scheduler.check_invariants()


def _driven_shim(cluster: Cluster, config: dict[str, Any], clock: list[float]) -> Shim:
    """A shim driven by the test (no watch, no loop): its clock is ``clock[0]``."""
    shim = Shim(cluster.api, parse_config(config), clock=lambda: clock[0])
    shim.sync()
    return shim


@pytest.mark.parametrize("interval", [30.0, 0.0])
def test_a_pending_pods_condition_follows_a_new_reason_at_once_and_new_wording_once_per_interval(
    cluster: Cluster, interval: float
) -> None:
    # one 8-GPU node, four running 2-GPU pods, three 8-GPU pods waiting under Strict FIFO:
    # w0 for capacity, w1 and w2 behind it. Each pod that finishes changes w0's wording (the
    # GPUs free) but not its reason; once w0 starts, w1's reason changes and w2's wording
    cluster.node("n0", model="H100")
    clock = [1000.0]
    for i in range(4):
        cluster.pod(f"r{i}", gpus=2)
    for i in range(3):
        cluster.pod(f"w{i}", gpus=8)
    shim = _driven_shim(
        cluster,
        {"queueing": {"policy": "strict-fifo"},
         "kubernetes": {"conditionIntervalSeconds": interval}},
        clock,
    )  # fmt: skip
    writes: list[str] = []
    patch = cluster.api.patch

    def counted(path: str, body: Any, **kw: Any) -> Any:
        conds = body.get("status", {}).get("conditions") or [{}]
        if "/pods/" in path and conds[0].get("reason") == "Unschedulable":
            writes.append(path.split("/pods/")[1].split("/")[0])
        return patch(path, body, **kw)

    cluster.api.patch = counted  # type: ignore[method-assign]

    def cycle(advance: float) -> list[str]:
        clock[0] += advance
        writes.clear()
        shim.cycle()
        shim.reap(wait=True)
        return sorted(writes)

    def finish(name: str) -> None:
        shim.handle("Pod", "DELETED", cluster.get(name))

    assert cycle(1) == ["w0", "w1", "w2"]
    assert "0 free" in _condition(cluster.get("w0"), "PodScheduled")["message"]
    finish("r0")
    assert cycle(1) == ([] if interval else ["w0"])  # w0: "2 free" now, the same reason
    assert cycle(1) == []  # nothing changed
    for name in ("r1", "r2", "r3"):
        finish(name)
    assert cycle(1) == (["w1"] if interval else ["w1", "w2"])  # w0 starts; w1 heads the queue
    assert cluster.node_of("w0") == "n0"
    assert _condition(cluster.get("w1"), "PodScheduled")["message"].startswith(
        "kant: insufficient_capacity"
    )
    w2 = _condition(cluster.get("w2"), "PodScheduled")["message"]
    assert ("w1" in w2) is not bool(interval)  # w2 still reads "behind w0" for a while
    assert cycle(interval) == (["w2"] if interval else [])  # the interval is over
    assert "w1" in _condition(cluster.get("w2"), "PodScheduled")["message"]


def test_a_shim_cycle_in_which_nothing_changed_is_answered_again_until_a_pod_goes(
    cluster: Cluster,
) -> None:
    # one 8-GPU node; "run" takes it, "w" waits. The cycle after the binding decides nothing
    # and is run; the next ones (the loop's periodic cycles) are answered again, with the
    # waiting pod's condition as it was; once "run" is gone, a cycle runs and binds "w"
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8)
    clock = [1000.0]
    shim = _driven_shim(cluster, {}, clock)
    results = []
    for _ in range(4):
        clock[0] += 5
        results.append(shim.cycle())
        shim.reap(wait=True)
        if len(results) == 1:
            cluster.pod("w", gpus=8)
            shim.sync()
    assert results[0].bindings and cluster.node_of("run") == "n0"
    assert [r.stats.reused for r in results] == [False, False, True, True]
    assert _condition(cluster.get("w"), "PodScheduled")["reason"] == "Unschedulable"
    shim.handle("Pod", "DELETED", cluster.get("run"))
    clock[0] += 5
    r = shim.cycle()
    shim.reap(wait=True)
    assert not r.stats.reused and cluster.node_of("w") == "n0"


def test_a_cycle_writes_at_most_its_share_of_conditions_and_events_the_head_first(
    cluster: Cluster,
) -> None:
    # one 8-GPU node held by a running pod; three 8-GPU pods wait. Each waiting pod needs a
    # condition and an event: six writes, three a cycle, in queue order
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8)
    for i in range(3):
        cluster.pod(f"w{i}", gpus=8)
    clock = [1000.0]
    shim = _driven_shim(cluster, {"kubernetes": {"statusWritesPerCycle": 3}}, clock)
    writes: list[tuple[str, str]] = []
    patch, post = cluster.api.patch, cluster.api.post

    def counted_patch(path: str, body: Any, **kw: Any) -> Any:
        conds = body.get("status", {}).get("conditions") or [{}]
        if conds[0].get("reason") == "Unschedulable":
            writes.append(("condition", path.split("/pods/")[1].split("/")[0]))
        return patch(path, body, **kw)

    def counted_post(path: str, body: Any, **kw: Any) -> Any:
        if path.endswith("/events") and body.get("reason") == "FailedScheduling":
            writes.append(("event", body["involvedObject"]["name"]))
        return post(path, body, **kw)

    cluster.api.patch = counted_patch  # type: ignore[method-assign]
    cluster.api.post = counted_post  # type: ignore[method-assign]

    def cycle() -> list[tuple[str, str]]:
        clock[0] += 1
        writes.clear()
        shim.cycle()
        shim.reap(wait=True)
        return list(writes)

    assert cycle() == [("condition", "w0"), ("event", "w0"), ("condition", "w1")]
    assert shim.status_writes_due  # (the run loop cycles again a second later)
    assert _condition(cluster.get("w2"), "PodScheduled") is None
    assert cycle() == [("event", "w1"), ("condition", "w2"), ("event", "w2")]
    assert not shim.status_writes_due
    assert _condition(cluster.get("w2"), "PodScheduled")["reason"] == "Unschedulable"
    assert cycle() == []


def test_a_pod_deleted_and_created_again_under_its_name_while_no_watch_ran_is_a_new_pod(
    cluster: Cluster,
) -> None:
    """What a relist after a broken watch gives: the same name, a new uid, no DELETED."""
    cluster.node("n0")
    cluster.pod("a")
    shim = Shim(cluster.api, parse_config({}))
    try:
        shim.sync()
        shim.cycle()
        shim.reap(wait=True)
        assert cluster.node_of("a") == "n0"
        cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/a", {"gracePeriodSeconds": 0})
        wait_for(lambda: "a" not in cluster.pods(), what="a gone")
        cluster.pod("a")  # its controller made it again
        shim.handle("Pod", "MODIFIED", cluster.get("a"))  # (a relist's event)
        shim.cycle()
        shim.reap(wait=True)
        assert cluster.node_of("a") == "n0"  # the old pod's GPUs are free again
        assert len(shim.scheduler.cluster.pods_on("n0")) == 1
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


def test_a_lease_whose_transitions_were_set_to_the_int32_limit_by_hand_can_still_be_taken(
    cluster: Cluster,
) -> None:
    # (transitions + 1 was written: 2147483648, refused by the API server for ever)
    from kant.k8s.leader import LeaderElector

    path = f"/apis/coordination.k8s.io/v1/namespaces/{cluster.ns}/leases/kant-max"
    a = LeaderElector(cluster.api, name="kant-max", namespace=cluster.ns, identity="a", duration=1)
    t = time.time()
    assert a.try_acquire(t)
    lease = cluster.api.get(path)
    lease["spec"]["leaseTransitions"] = 2**31 - 1
    cluster.api.put(path, lease)
    b = LeaderElector(cluster.api, name="kant-max", namespace=cluster.ns, identity="b", duration=1)
    assert not b.try_acquire(t)  # (b sees a's lease for the first time)
    assert b.try_acquire(t + 2)
    spec = cluster.api.get(path)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 2**31 - 1


def test_a_waiting_gangs_podgroup_deleted_says_so_on_its_pods(cluster: Cluster) -> None:
    # (its pods kept saying "1 of the 3 pods of .../k exist": the deletion changed no reason)
    cluster.node("n0")
    cluster.pod_group("k", 3)
    cluster.start_shim({"kubernetes": {"conditionIntervalSeconds": 0}})
    cluster.pod("k-0", gpus=1, group="k")
    wait_for(lambda: _says(cluster, "k-0", f"1 of the 3 pods of {cluster.ns}/k"), what="k waits")
    cluster.api.delete(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups/k")
    wait_for(lambda: _says(cluster, "k-0", f"PodGroup {cluster.ns}/k does not exist"),
             what="k-0 saying its group is gone")  # fmt: skip
    assert cluster.node_of("k-0") is None


def test_a_waiting_gang_whose_podgroup_asks_more_pods_or_is_deleted_is_not_bound_short(
    cluster: Cluster,
) -> None:
    # (submitted when minMember of its pods existed, it was bound with them once room came,
    # whatever its PodGroup said since: coscheduling reads the PodGroup at every attempt)
    cluster.node("n0")
    cluster.pod_group("up", 2)
    cluster.pod_group("gone", 1)
    cluster.pod("blocker", gpus=8)
    cluster.start_shim({"kubernetes": {"conditionIntervalSeconds": 0}})
    wait_for(lambda: cluster.node_of("blocker"), what="the blocker bound")
    cluster.pod("up-0", gpus=2, group="up")
    cluster.pod("up-1", gpus=2, group="up")
    cluster.pod("gone-0", gpus=2, group="gone")
    wait_for(lambda: _says(cluster, "up-0", "insufficient_capacity"), what="up waits for room")
    wait_for(lambda: _says(cluster, "gone-0", "insufficient_capacity"), what="gone waits too")
    pgs = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups"
    cluster.api.patch(f"{pgs}/up", {"spec": {"minMember": 3}})
    cluster.api.delete(f"{pgs}/gone")
    wait_for(lambda: _says(cluster, "up-0", f"2 of the 3 pods of {cluster.ns}/up"),
             what="up saying it is short")  # fmt: skip
    wait_for(lambda: _says(cluster, "gone-0", f"PodGroup {cluster.ns}/gone does not exist"),
             what="gone saying its group is gone")  # fmt: skip
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/blocker")
    cluster.looked("up-0", "up-1", "gone-0", gone=("blocker",))
    assert [cluster.node_of(n) for n in ("up-0", "up-1", "gone-0")] == [None, None, None]
    cluster.pod("up-2", gpus=2, group="up")
    wait_for(lambda: all(cluster.node_of(f"up-{i}") for i in range(3)), what="up bound whole")
    ids = {cluster.get(f"up-{i}")["metadata"]["annotations"]["kant.io/pod-id"] for i in range(3)}
    assert {i.split("/")[0] for i in ids} == {f"{cluster.ns}.up#2"}


class _NoPodGroupsYet:
    """The test server's API as one where the PodGroup CRD is not installed yet (its group
    not served, its paths answered 404) until :attr:`installed` is set."""

    def __init__(self, api: Any, status: int) -> None:
        self._api = api
        self.status = status  # (404; 403 for a shim whose ClusterRole lacks the rule)
        self.installed = threading.Event()

    def _check(self, path: str) -> None:
        if not self.installed.is_set() and path.startswith("/apis/scheduling.x-k8s.io/"):
            raise ApiError(self.status, "GET", path, '{"reason": "x", "message": "refused"}')

    def groups(self) -> set[str]:
        all_ = set(self._api.groups())
        return all_ if self.installed.is_set() else {g for g in all_ if "x-k8s.io" not in g}

    def has(self, group_version: str) -> bool:
        return group_version in self.groups()

    def get(self, path: str, **query: Any) -> Any:
        self._check(path)
        return self._api.get(path, **query)

    def watch(self, path: str, *args: Any, **kw: Any) -> Any:
        self._check(path)
        return self._api.watch(path, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


@pytest.mark.parametrize("status", [404, 403])
def test_a_podgroup_crd_installed_after_the_shim_started_is_watched_once_it_is_served(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:  # fmt: skip
    # (the shim looked for PodGroups at its start only: installed after, scheduler-plugins'
    # CRD was never watched, and gang pods said for ever that their PodGroup did not exist)
    monkeypatch.setattr(shim_module, "ABSENT_RESOURCE_RETRY_SECONDS", 0.2)
    caplog.set_level(logging.INFO, logger="kant.k8s")
    cluster.node("n0")
    api = _NoPodGroupsYet(cluster.api, status)
    shim = Shim(api, parse_config({"kubernetes": {"debounceSeconds": 0.05}}))  # type: ignore[arg-type]
    stop, ready = threading.Event(), threading.Event()
    t = threading.Thread(target=shim.run, args=(stop,), kwargs={"ready": ready}, daemon=True)
    t.start()
    cluster._stops.append((stop, t))
    assert ready.wait(30)
    cluster.pod_group("late", 2)
    cluster.pod("late-0", gpus=2, group="late")
    cluster.pod("late-1", gpus=2, group="late")
    wait_for(lambda: _says(cluster, "late-0", f"PodGroup {cluster.ns}/late does not exist"),
             what="the gang waiting for a PodGroup the shim cannot see")  # fmt: skip
    time.sleep(0.6)  # (looked for again every 0.2 s here: said once)
    said = [r.getMessage() for r in caplog.records if "podgroups" in r.getMessage()]
    assert len(said) == 1 and "looked for again" in said[0], said
    api.installed.set()
    wait_for(lambda: cluster.node_of("late-0") and cluster.node_of("late-1"),
             what="the gang bound once its PodGroup is served")  # fmt: skip


def test_a_podgroup_made_again_while_no_watch_ran_gets_its_status_written(
    cluster: Cluster,
) -> None:
    # (the phase written on the old PodGroup was taken as written on the new one: a gang of
    # it bound by its first cycle left the new PodGroup with no status)
    pgs = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups"
    cluster.node("n0")
    cluster.pod_group("g", 1)
    cluster.pod("g-0", gpus=2, group="g")
    shim = Shim(cluster.api, parse_config({}))
    shim.sync()  # (no watch: the test hands the shim what a relist would)
    shim.cycle()
    shim.reap(wait=True)
    assert cluster.api.get(f"{pgs}/g")["status"]["phase"] == "Scheduled"
    old = cluster.get("g-0")
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/g-0", {"gracePeriodSeconds": 0})
    cluster.api.delete(f"{pgs}/g")
    wait_for(lambda: not cluster.pods(), what="g-0 gone")
    cluster.pod_group("g", 1)
    new = cluster.pod("g-0", gpus=2, group="g")
    shim.handle("Pod", "DELETED", old)
    shim.handle("PodGroup", "MODIFIED", cluster.api.get(f"{pgs}/g"))
    shim.handle("Pod", "ADDED", new)
    shim.cycle()
    shim.reap(wait=True)
    assert cluster.node_of("g-0") == "n0"
    assert cluster.api.get(f"{pgs}/g").get("status", {}).get("phase") == "Scheduled"


def test_an_eviction_the_server_keeps_refusing_is_said_once_not_at_every_retry(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # (a victim under two PodDisruptionBudgets, which the Eviction API refuses with a 500
    # every time: a warning every second, for as long as its preemptor waited)
    cluster.node("n0", model="H100")
    cluster.node("n1", model="H100")
    cluster.start_shim(QUOTAS)
    b = {"kant.io/queue": "team-b", "app": "b"}
    cluster.pod("b-0", labels=b)
    cluster.pod("b-1", labels=b)
    wait_for(lambda: cluster.node_of("b-0") and cluster.node_of("b-1"), what="team-b bound")
    _budget_allowing_no_disruption(cluster, ["b-0", "b-1"])
    pv = "policy/v1" if cluster.api.has("policy/v1") else "policy/v1beta1"
    cluster.api.post(f"/apis/{pv}/namespaces/{cluster.ns}/poddisruptionbudgets",
                     {"apiVersion": pv, "kind": "PodDisruptionBudget",
                      "metadata": {"name": "b2", "namespace": cluster.ns},
                      "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "b"}}}})  # fmt: skip
    caplog.set_level(logging.INFO, logger="kant.k8s")
    cluster.pod("a-0", labels={"kant.io/queue": "team-a"})

    def refusals() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.levelno >= logging.WARNING and r.getMessage().startswith("evicting ")]  # fmt: skip

    wait_for(refusals, what="the eviction refused")
    time.sleep(3)  # (retried every second)
    said = refusals()
    assert len(said) == 1 and "more than one PodDisruptionBudget" in said[0], said
