"""A pod whose binding keeps failing (an admission webhook on ``pods/binding`` rejecting it,
say), against the real API server: kant retries it with the backoff of its failures, and past
the retry limit leaves it unbound, saying it failed, until it is deleted or made again; a
binding the server applied but whose answer was lost is a binding made. The shim is driven by
the test (no watch, no loop) with its own clock."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kant.config import parse_config
from kant.k8s.client import Api
from kant.k8s.shim import Shim

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

# the default backoff (10 s, doubling; backoffLimitCount 5): the failures come at these
# seconds, and the 6th marks the job FAILED
RETRIES = [0, 10, 30, 70, 150, 310]


class _Rejecting:
    """The cluster's Api, except that the binding of a pod named in ``reject`` goes to the API
    server with a target kind other than Node: the server refuses it (an error answer, as for
    a binding an admission webhook rejects). Every binding call is noted: (the shim's time,
    the pod, the job its ``kant.io/pod-id`` names)."""

    def __init__(self, api: Api, reject: set[str], clock: list[float]) -> None:
        self.api = api
        self.reject = reject
        self.clock = clock
        self.calls: list[tuple[float, str, str]] = []

    def post(self, path: str, body: Any) -> Any:
        if path.endswith("/binding"):
            name = path.split("/pods/")[1].split("/")[0]
            jid = body["metadata"]["annotations"]["kant.io/pod-id"].rsplit("/", 2)[0]
            self.calls.append((self.clock[0], name, jid))
            if name in self.reject:
                body = copy.deepcopy(body)
                body["target"]["kind"] = "Rejected"
        return self.api.post(path, body)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def _shim(cluster: Cluster, clock: list[float], reject: set[str]) -> tuple[Shim, _Rejecting]:
    shim = Shim(cluster.api, parse_config({}), clock=lambda: clock[0])
    shim.sync()
    api = _Rejecting(cluster.api, reject, clock)
    shim.api = api  # type: ignore[assignment]
    return shim, api


def _relay(shim: Shim, cluster: Cluster) -> None:
    """What a watch would tell the shim about the test's namespace: pods made, changed and
    gone (pods being deleted are waited for first: the fake kubelet removes them)."""
    wait_for(
        lambda: not any(p["metadata"].get("deletionTimestamp") for p in cluster.pods().values()),
        what="deleted pods gone",
    )
    now = cluster.pods()
    for key, (obj, _) in list(shim._pods.items()):
        ns, name = key.split("/", 1)
        if ns == cluster.ns and name not in now:
            shim.handle("Pod", "DELETED", obj)
    for name, obj in sorted(now.items()):
        old = shim._pods.get(f"{cluster.ns}/{name}")
        if old is None:
            shim.handle("Pod", "ADDED", obj)
        elif old[0]["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            shim.handle("Pod", "MODIFIED", obj)


def _says(cluster: Cluster, name: str) -> str:
    for c in cluster.get(name).get("status", {}).get("conditions") or ():
        if c["type"] == "PodScheduled":
            return str(c.get("message", ""))
    return ""


def test_a_lone_pod_whose_binding_keeps_failing_is_retried_with_backoff_then_left_failed(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.pod("p")
    clock = [1000.0]
    shim, api = _shim(cluster, clock, {"p"})
    said = ""
    while clock[0] < 1400 and len(api.calls) <= 2 * len(RETRIES):
        shim.cycle()
        shim.reap(wait=True)
        if clock[0] == 1005:
            said = _says(cluster, "p")
        clock[0] += 1
    assert [t - 1000 for t, _, _ in api.calls] == RETRIES
    assert said.startswith("kant: backoff: failure 1 (binding ")
    assert cluster.node_of("p") is None
    assert _says(cluster, "p").startswith("kant: failed: retry limit 5 reached; last: binding ")
    assert all(e.phase.value in ("finished", "failed") for e in shim.scheduler.queue.entries())
    shim.scheduler.check_invariants()
    # the user deletes it and makes it again (the webhook fixed): a new pod, bound at once
    api.reject.clear()
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/p", {"gracePeriodSeconds": 0})
    _relay(shim, cluster)
    assert not shim._failures  # (forgotten with the pod)
    cluster.pod("p")
    _relay(shim, cluster)
    shim.cycle()
    shim.reap(wait=True)
    assert len(api.calls) == len(RETRIES) + 1
    wait_for(lambda: cluster.node_of("p") == "n0", what="p bound")


def test_a_gang_whose_binding_keeps_failing_keeps_its_failures_across_its_recreated_pods(
    cluster: Cluster,
) -> None:
    # g-0's binding fails every time; g-1's succeeds, and kant deletes it (the gang is
    # requeued whole): the test, as its controller, makes another pod of the group each time
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    cluster.pod("g-0", group="g")
    cluster.pod("g-1", group="g")
    clock = [1000.0]
    shim, api = _shim(cluster, clock, {"g-0"})
    made = 1
    while clock[0] < 1400 and len(api.calls) <= 4 * len(RETRIES):
        shim.cycle()
        shim.reap(wait=True)
        _relay(shim, cluster)
        if len(cluster.pods()) < 2:
            made += 1
            cluster.pod(f"g-{made}", group="g")
            _relay(shim, cluster)
        clock[0] += 1
    assert [t - 1000 for t, name, _ in api.calls if name == "g-0"] == RETRIES
    pods = cluster.pods()
    assert len(pods) == 2 and all(cluster.node_of(n) is None for n in pods)
    for name in pods:
        assert _says(cluster, name).startswith("kant: failed: retry limit 5 reached")
    shim.scheduler.check_invariants()


class _LostAnswer:
    """The cluster's Api, except that the answer to the binding of a pod named in ``lose`` is
    lost: the API server binds the pod, and the call raises :class:`OSError` as a read
    timeout does."""

    def __init__(self, api: Api, lose: set[str]) -> None:
        self.api = api
        self.lose = lose

    def post(self, path: str, body: Any) -> Any:
        out = self.api.post(path, body)
        if path.endswith("/binding") and path.split("/pods/")[1].split("/")[0] in self.lose:
            raise OSError("read timed out")
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def _held_in(shim: Shim, cluster: Cluster) -> list[str]:
    """The pods of the test's namespace the shim holds like another scheduler's."""
    return [k for k in shim._held if k.startswith(f"{cluster.ns}/")]


def test_a_gang_pod_bound_by_a_call_whose_answer_was_lost_counts_as_bound_and_the_gang_runs(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    cluster.pod("g-0", group="g")
    cluster.pod("g-1", group="g")
    shim = Shim(cluster.api, parse_config({}))
    shim.sync()
    shim.api = _LostAnswer(cluster.api, {"g-1"})  # type: ignore[assignment]
    shim.cycle()
    shim.reap(wait=True)
    _relay(shim, cluster)
    shim.cycle()
    shim.reap(wait=True)
    # the server bound g-1 for kant: the gang runs whole, nothing is stopped or held
    pods = cluster.pods()
    assert sorted(pods) == ["g-0", "g-1"]
    assert not any(p["metadata"].get("deletionTimestamp") for p in pods.values())
    assert {cluster.node_of("g-0"), cluster.node_of("g-1")} == {"n0", "n1"}
    assert not _held_in(shim, cluster) and shim.bound_total == 2
    (jid,) = shim._jobs
    assert shim.scheduler.queue.entry(jid).phase.value == "running"
    assert shim.scheduler.cluster.num_pods == 2
    shim.scheduler.check_invariants()
    shim._pool.shutdown()


def test_a_lone_pod_bound_by_a_call_whose_answer_was_lost_stays_charged_to_its_tenant(
    cluster: Cluster,
) -> None:
    cluster.node("n0", model="H100")
    cluster.node("n1", model="H100")
    quotas = {"tenants": [{"name": "team-a", "quotas": {"H100": {"nominalQuota": 8}}},
                          {"name": "team-b", "quotas": {"H100": {"nominalQuota": 8}}}],
              "defaultMode": "isolated"}  # fmt: skip
    cluster.pod("a-0", labels={"kant.io/queue": "team-a"})
    shim = Shim(cluster.api, parse_config(quotas))
    shim.sync()
    shim.api = _LostAnswer(cluster.api, {"a-0"})  # type: ignore[assignment]
    shim.cycle()
    shim.reap(wait=True)
    _relay(shim, cluster)
    assert cluster.node_of("a-0") is not None
    # team-a's 8 GPUs are a-0's: a second pod of team-a waits for its quota
    cluster.pod("a-1", labels={"kant.io/queue": "team-a"})
    _relay(shim, cluster)
    for _ in range(2):
        shim.cycle()
        shim.reap(wait=True)
    assert cluster.node_of("a-1") is None
    assert "quota" in _says(cluster, "a-1")
    assert not _held_in(shim, cluster)
    shim.scheduler.check_invariants()
    shim._pool.shutdown()


def test_a_binding_answer_counts_as_in_flight_until_the_shim_has_acted_on_it() -> None:
    """``bindings_in_flight`` tells a caller on another thread when every binding sent is
    dealt with: an answer still being acted on (a failure's gang being released, a bound
    pod being counted) counts, and once all are, none does."""
    from concurrent.futures import Future

    shim = Shim(None)  # type: ignore[arg-type]  # (reap asks the API server nothing here)
    seen: list[tuple[str, int]] = []
    answers = [("binding ns/a to n0: 409 Conflict", 1.0), (None, 2.0), (None, 3.0)]
    for i, answer in enumerate(answers):
        fut: Future[tuple[str | None, float]] = Future()
        fut.set_result(answer)
        shim._inflight.append((f"b{i}", fut))  # type: ignore[arg-type]
    shim._binding_failed = lambda b, err, now: seen.append((b, shim.bindings_in_flight))  # type: ignore[assignment,method-assign]
    shim._bound = lambda b, when: seen.append((b, shim.bindings_in_flight))  # type: ignore[assignment,method-assign]
    assert shim.bindings_in_flight == 3
    shim.reap()
    assert seen == [("b0", 3), ("b1", 2), ("b2", 1)]
    assert shim.bindings_in_flight == 0


@pytest.mark.parametrize("deletion", ["kept by a finalizer", "gone"])
def test_a_gang_pod_deleted_while_its_binding_was_sent_is_no_failure_of_its_gang(
    cluster: Cluster, deletion: str
) -> None:
    # (the binding refused, 409 "being deleted" or 404, was counted as a failed binding: the
    # gang made again waited out a backoff, its PodGroup saying "failure 1", for a pod its
    # user deleted; deleted before the cycle, or seen deleted before the answer, it was not)
    cluster.node("n0")
    cluster.pod_group("g", 2)
    cluster.pod("g-0", gpus=2, group="g")
    cluster.pod("g-1", gpus=2, group="g")
    shim = Shim(cluster.api, parse_config({}))
    shim.sync()  # no watch: the shim does not see the deletion below before its answer
    path = f"/api/v1/namespaces/{cluster.ns}/pods/g-0"
    if deletion == "kept by a finalizer":
        cluster.api.patch(path, {"metadata": {"finalizers": ["kant-test/hold"]}})
    cluster.api.delete(path)
    result = shim.cycle()
    assert len(result.bindings) == 2
    shim.reap(wait=True)
    assert shim.scheduler.cluster.num_pods == 0  # (the gang released, g-1 stopped)
    wait_for(lambda: "g-1" not in cluster.pods(), what="g-1 stopped")
    assert shim.histories_due == 0  # (no failure to store on the PodGroup)
    assert not [e for e in shim.scheduler.queue.entries() if e.attempts]
    shim.scheduler.check_invariants()
    if deletion == "kept by a finalizer":
        cluster.api.patch(path, {"metadata": {"finalizers": None}})
