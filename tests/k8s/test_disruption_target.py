"""The ``DisruptionTarget`` condition kant writes on a victim tells what really happens to
it, against the real API server, when the condition writes fail and when the shim restarts:
a victim kant gives up is told so (``False``) once the server takes the write, a victim is
evicted only once it carries ``True`` (as kube-scheduler does), and a restarted shim sets
back the condition of every running pod a previous shim marked that it does not evict.

The shim is driven by the test (no watch, no loop). A PodDisruptionBudget that allows no
disruption is played by the wrapping Api (the eviction answered ``429``), as are the failed
condition writes (``500``, ``409``, or no answer)."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.config import parse_config
from kant.k8s import shim as shim_module
from kant.k8s.client import Api, ApiError
from kant.k8s.shim import Shim

from .conftest import Cluster, wait_for
from .test_binding_retry import _relay

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

HIGH = "kant-test-high"  # a PriorityClass: the preemptor's


class _Flaky:
    """The cluster's Api, except that evictions are refused (``429``, a budget) while
    ``budget`` is set, and ``DisruptionTarget`` writes fail as ``fail`` says (an HTTP status,
    ``"no answer"``, or None: they go through). Every eviction and ``DisruptionTarget``
    write is noted, in order: (the pod, ``"evict"`` or the condition's status, went through)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.budget = False
        self.evict_fail: str | None = None  # "no answer": evictions get none
        self.fail: int | str | None = None
        self.calls: list[tuple[str, str, bool]] = []

    def post(self, path: str, body: Any) -> Any:
        if path.endswith("/eviction"):
            name = path.split("/pods/")[1].split("/")[0]
            self.calls.append((name, "evict", not self.budget and self.evict_fail is None))
            if self.evict_fail == "no answer":
                raise TimeoutError("no answer in time")
            if self.budget:
                msg = "Cannot evict pod as it would violate the pod's disruption budget."
                raise ApiError(429, "POST", path, json.dumps({"reason": "TooManyRequests",
                                                              "message": msg}))  # fmt: skip
        return self.api.post(path, body)

    def patch(self, path: str, body: Any, *, kind: str = "merge") -> Any:
        conds = (body.get("status") or {}).get("conditions") or ()
        if path.endswith("/status") and any(c["type"] == "DisruptionTarget" for c in conds):
            name = path.split("/pods/")[1].split("/")[0]
            (cond,) = conds
            self.calls.append((name, cond["status"], self.fail is None))
            if self.fail == "no answer":
                raise ConnectionResetError(104, "Connection reset by peer")
            if self.fail is not None:
                raise ApiError(int(self.fail), "PATCH", path, json.dumps({"message": "no"}))
        return self.api.patch(path, body, kind=kind)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def _disruption(cluster: Cluster, name: str) -> tuple[str, str] | None:
    """The pod's ``DisruptionTarget`` (status, reason) as the API server has it."""
    for c in cluster.get(name).get("status", {}).get("conditions") or ():
        if c["type"] == "DisruptionTarget":
            return str(c["status"]), str(c.get("reason", ""))
    return None


def _shim(cluster: Cluster, api: _Flaky, *, mode: str = "eviction") -> Shim:
    shim = Shim(cluster.api, parse_config({"kubernetes": {"evictionMode": mode}}))
    shim.sync()
    shim.api = api  # type: ignore[assignment]
    return shim


def _cycle(shim: Shim, cluster: Cluster) -> None:
    shim.cycle()
    shim.reap(wait=True)


def _low_running(cluster: Cluster) -> None:
    """One 8-GPU node, ``low`` running there, and the PriorityClass of the preemptor."""
    with contextlib.suppress(ApiError):  # (shared by the tests of the session)
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": HIGH}, "value": 1000})  # fmt: skip
    cluster.node("n0")
    cluster.pod("low")


def _high(cluster: Cluster) -> None:
    body = {"metadata": {"name": "high", "namespace": cluster.ns},
            "spec": {"schedulerName": "kant", "priorityClassName": HIGH,
                     "containers": [{"name": "c", "image": "x", "resources": {
                         "requests": {"nvidia.com/gpu": "8", "cpu": "1", "memory": "1Gi"},
                         "limits": {"nvidia.com/gpu": "8"}}}]}}  # fmt: skip
    cluster.api.post(f"/api/v1/namespaces/{cluster.ns}/pods", body)


def _preempting(cluster: Cluster, api: _Flaky, *running: str, mode: str = "eviction") -> Shim:
    """A shim on ``api`` that has bound ``running`` (seen running) and then seen ``high``
    created: its next cycle preempts for it."""
    shim = _shim(cluster, api, mode=mode)
    _cycle(shim, cluster)
    wait_for(
        lambda: all(cluster.get(n)["status"].get("phase") == "Running" for n in running),
        what=f"{', '.join(running)} running",
    )
    _relay(shim, cluster)
    _high(cluster)
    _relay(shim, cluster)
    return shim


def _victim_held_by_a_budget(cluster: Cluster, api: _Flaky) -> Shim:
    """``low`` runs; ``high`` preempts it, and a budget refuses the eviction: ``low`` carries
    ``DisruptionTarget=True`` and runs on, its eviction retried every cycle."""
    _low_running(cluster)
    shim = _preempting(cluster, api, "low")
    api.budget = True
    _cycle(shim, cluster)
    assert _disruption(cluster, "low") == ("True", "PreemptionByScheduler")
    assert api.calls == [("low", "True", True), ("low", "evict", False)]
    return shim


@pytest.mark.parametrize("failure", [500, 409, 401, 408, "no answer"])
def test_a_spared_victims_condition_is_set_back_once_the_server_takes_the_write(
    cluster: Cluster, failure: int | str
) -> None:
    api = _Flaky(cluster.api)
    shim = _victim_held_by_a_budget(cluster, api)
    # the preemptor is deleted: its victim is spared, but the write of False fails
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/high", {"gracePeriodSeconds": 0})
    _relay(shim, cluster)
    api.fail = failure
    api.calls.clear()
    for _ in range(3):
        _cycle(shim, cluster)
    # tried again by each cycle, once each, with no eviction meanwhile
    assert api.calls == [("low", "False", False)] * 3
    assert _disruption(cluster, "low") == ("True", "PreemptionByScheduler")
    assert shim.status_writes_due  # (the loop comes back a second later, not at once)
    api.fail = None
    _cycle(shim, cluster)
    assert _disruption(cluster, "low") == ("False", "PreemptionAbandoned")
    api.calls.clear()
    _cycle(shim, cluster)
    assert api.calls == []  # (written once: nothing left to write)
    assert cluster.get("low")["status"]["phase"] == "Running"
    assert not shim._evict


def test_a_victim_is_evicted_only_once_its_condition_says_it_goes(cluster: Cluster) -> None:
    """kube-scheduler deletes a victim only once its ``DisruptionTarget=True`` is written:
    a Job's ``podFailurePolicy`` reads it to tell a preempted pod from a failed one."""
    api = _Flaky(cluster.api)
    _low_running(cluster)
    shim = _preempting(cluster, api, "low")
    api.fail = 503
    _cycle(shim, cluster)
    _cycle(shim, cluster)
    assert api.calls == [("low", "True", False)] * 2  # (and no eviction)
    assert not cluster.get("low")["metadata"].get("deletionTimestamp")
    api.fail = None
    _cycle(shim, cluster)
    assert api.calls[2:] == [("low", "True", True), ("low", "evict", True)]
    _relay(shim, cluster)  # (low gone)
    _cycle(shim, cluster)
    wait_for(lambda: cluster.node_of("high") == "n0", what="high bound")


def test_a_victim_spared_before_its_condition_was_written_ends_with_it_false(
    cluster: Cluster,
) -> None:
    """True and False both wait to be written: the last one meant is the one written."""
    api = _Flaky(cluster.api)
    _low_running(cluster)
    shim = _preempting(cluster, api, "low")
    api.fail, api.budget = 500, True
    _cycle(shim, cluster)
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/high", {"gracePeriodSeconds": 0})
    _relay(shim, cluster)
    api.fail = None
    _cycle(shim, cluster)
    assert api.calls == [("low", "True", False), ("low", "False", True)]
    assert _disruption(cluster, "low") == ("False", "PreemptionAbandoned")
    assert cluster.get("low")["status"]["phase"] == "Running"


@pytest.mark.parametrize("when", ["its preemptor was deleted", "its False was not written"])
def test_a_restarted_shim_sets_back_the_condition_of_a_running_victim_it_does_not_evict(
    cluster: Cluster, when: str
) -> None:
    """A shim stopped while its victim ran on (a budget held it): the next shim does not
    know its preemptor and evicts nothing for it, so it tells the pod it stays."""
    api = _Flaky(cluster.api)
    old = _victim_held_by_a_budget(cluster, api)
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/high", {"gracePeriodSeconds": 0})
    if when == "its False was not written":
        _relay(old, cluster)
        api.fail = 500
        _cycle(old, cluster)  # spared, and the write of False fails
    old._pool.shutdown()  # (stopped: no cycle of it runs again)
    assert _disruption(cluster, "low") == ("True", "PreemptionByScheduler")
    new_api = _Flaky(cluster.api)
    new = _shim(cluster, new_api)
    _cycle(new, cluster)
    assert _disruption(cluster, "low") == ("False", "PreemptionAbandoned")
    assert new_api.calls == [("low", "False", True)]
    assert cluster.get("low")["status"]["phase"] == "Running"
    _cycle(new, cluster)
    assert new_api.calls == [("low", "False", True)]  # (once)


def test_a_restarted_shim_that_preempts_the_same_victim_again_evicts_it_and_keeps_it_true(
    cluster: Cluster,
) -> None:
    """The preemptor still waits after the restart: the new shim chooses the victim again,
    its condition stays True (never set back to False in between) and it is evicted."""
    api = _Flaky(cluster.api)
    old = _victim_held_by_a_budget(cluster, api)
    old._pool.shutdown()
    new_api = _Flaky(cluster.api)
    new = _shim(cluster, new_api)
    _cycle(new, cluster)
    assert new_api.calls == [("low", "True", True), ("low", "evict", True)]
    _relay(new, cluster)
    _cycle(new, cluster)
    wait_for(lambda: cluster.node_of("high") == "n0", what="high bound")


def test_a_restarted_shim_leaves_a_terminating_victims_condition_true(cluster: Cluster) -> None:
    """A victim being evicted (a finalizer keeps it terminating) goes: it stays marked."""
    api = _Flaky(cluster.api)
    _low_running(cluster)
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/low",
                      {"metadata": {"finalizers": ["example.com/grace"]}})  # fmt: skip
    try:
        old = _preempting(cluster, api, "low")
        _cycle(old, cluster)
        assert api.calls == [("low", "True", True), ("low", "evict", True)]
        old._pool.shutdown()
        new_api = _Flaky(cluster.api)
        new = _shim(cluster, new_api)
        _cycle(new, cluster)
        _cycle(new, cluster)
        assert new_api.calls == []
        assert _disruption(cluster, "low") == ("True", "PreemptionByScheduler")
    finally:
        cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/low",
                          {"metadata": {"finalizers": None}})  # fmt: skip


class _Server:
    """The status writes of an API server, without a server: the ``DisruptionTarget``
    status each pod has, and each write in order; ``answer`` says how the next writes are
    answered (None: taken)."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.writes: list[str] = []
        self.answer: int | str | None = None

    def patch(self, path: str, body: Any, *, kind: str = "merge") -> Any:
        name = path.split("/pods/")[1].split("/")[0]
        self.writes.append(name)
        if self.answer == "no answer":
            raise TimeoutError("no answer in time")
        if self.answer is not None:
            raise ApiError(int(self.answer), "PATCH", path, "{}")
        self.status[name] = body["status"]["conditions"][0]["status"]
        return {}

    def post(self, path: str, body: Any) -> Any:
        return {}  # (the Preempted event)


RETRIED = (401, 408, 409, 429, 500, 503)  # (401: credentials may be refreshed meanwhile)
DROPPED = (400, 403, 404, 405, 422)

_STEPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["disrupt", "spare"]), st.sampled_from(["a", "b", "c"])),
        st.tuples(st.just("cycle"), st.sampled_from([None, *RETRIED, *DROPPED, "no answer"])),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(steps=_STEPS)
def test_whatever_writes_fail_a_pods_condition_ends_as_last_meant_written_once_per_cycle(
    steps: list[tuple[str, Any]],
) -> None:
    """A write answered as RETRIED says, or not answered, stays due (the last status meant);
    one refused for good (DROPPED) is dropped, the pod keeping what the server had."""
    server = _Server()
    shim = Shim(server)  # type: ignore[arg-type]
    try:
        due_meant: dict[str, str] = {}  # what is due, by pod
        has: dict[str, str] = {}  # what the server has, by pod
        for op, arg in steps:
            if op == "cycle":
                server.answer, server.writes = arg, []
                due = [k.split("/")[1] for k in sorted(shim._disruption_due)]
                shim._write_disruptions()
                # each due pod once, in key order; a write not answered ends the pass (the
                # server is down: each write would wait out the client's timeout)
                assert server.writes == (due[:1] if arg == "no answer" else due)
                retried = arg == "no answer" or arg in RETRIED
                assert shim.status_writes_due == (retried and bool(due))
                shim.status_writes_due = False
                if arg is None:
                    has.update(due_meant)
                if not retried:
                    due_meant.clear()
                assert {k.split("/")[1]: v[0] for k, v in shim._disruption_due.items()} == (
                    due_meant
                )
                assert server.status == has
                continue
            key = f"ns/{arg}"
            if op == "disrupt":
                shim._disrupt(key, "ns.h#1", "priority")
                due_meant[arg] = "True"
            else:
                shim._undisrupt(key, "ns.h#1")
                due_meant[arg] = "False"
        server.answer = None
        shim._write_disruptions()
        has.update(due_meant)
        assert not shim._disruption_due
        assert server.status == has
        server.writes = []
        shim._write_disruptions()
        assert server.writes == []  # (nothing written twice)
    finally:
        shim._pool.shutdown()


def test_a_victim_is_spared_once_its_preemptor_nominates_another_node_in_its_place(
    cluster: Cluster,
) -> None:
    """``high`` (for nodes of pool x) preempts ``b-0`` on n0 and a budget holds ``b-0``;
    then n0 leaves pool x and n1 joins it before a cycle: ``high`` preempts ``c-0`` on n1
    in place of its old nomination. ``high`` still waits for a nomination, but not for
    ``b-0``: its eviction is given up (False), and the budget allowing it later evicts
    nothing."""
    with contextlib.suppress(ApiError):
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": HIGH}, "value": 1000})  # fmt: skip
    pool = {"example.com/pool": "x"}
    cluster.node("n0", labels=pool)
    cluster.node("n1")
    api = _Flaky(cluster.api)
    cluster.pod("b-0", node_selector=pool)
    cluster.pod("c-0")
    shim = _shim(cluster, api)
    _cycle(shim, cluster)
    wait_for(
        lambda: all(cluster.get(n)["status"].get("phase") == "Running" for n in ("b-0", "c-0")),
        what="b-0 and c-0 running",
    )
    assert (cluster.node_of("b-0"), cluster.node_of("c-0")) == ("n0", "n1")
    _relay(shim, cluster)
    cluster.pod("h", priority_class=HIGH, node_selector=pool)
    _relay(shim, cluster)
    api.budget = True
    _cycle(shim, cluster)
    assert api.calls == [("b-0", "True", True), ("b-0", "evict", False)]
    for name, label in (("n0", None), ("n1", "x")):
        node = cluster.api.patch(f"/api/v1/nodes/{name}",
                                 {"metadata": {"labels": {"example.com/pool": label}}})  # fmt: skip
        shim.handle("Node", "MODIFIED", node)
    api.calls.clear()
    _cycle(shim, cluster)
    h = shim.scheduler.queue.entry(f"{cluster.ns}..h#1")
    assert h.waits_for_nomination and h.nomination is not None
    assert h.nomination.bindings[0].node == "n1"
    assert [v.job for v in h.nomination.victims] == [f"{cluster.ns}..c-0#1"]
    assert f"{cluster.ns}/b-0" not in shim._evict
    assert ("b-0", "False", True) in api.calls
    assert _disruption(cluster, "b-0") == ("False", "PreemptionAbandoned")
    api.budget = False
    api.calls.clear()
    _cycle(shim, cluster)
    assert [c for c in api.calls if c[1] == "evict"] == [("c-0", "evict", True)]
    assert not cluster.get("b-0")["metadata"].get("deletionTimestamp")
    _relay(shim, cluster)  # (c-0 gone)
    _cycle(shim, cluster)
    wait_for(lambda: cluster.node_of("h") == "n1", what="h bound to n1")
    assert cluster.get("b-0")["status"]["phase"] == "Running"


def test_a_restarted_shim_stops_the_rest_of_a_gang_a_previous_shim_evicted_in_part(
    cluster: Cluster,
) -> None:
    """Gang g (g-0 on n0, g-1 on n1, minMember 2) is preempted: g-0 is evicted (a finalizer
    keeps it terminating), a budget refuses g-1; the shim stops. The next shim does not take
    g back as running with g-1 alone (g-0 counted as ended): a gang that lost a pod to an
    eviction is started again whole, so g-1 is stopped, and keeps its True (it goes)."""
    with contextlib.suppress(ApiError):
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": HIGH}, "value": 1000})  # fmt: skip
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    cluster.pod("g-0", group="g")
    cluster.pod("g-1", group="g")
    g0 = f"/api/v1/namespaces/{cluster.ns}/pods/g-0"
    cluster.api.patch(g0, {"metadata": {"finalizers": ["example.com/grace"]}})
    try:
        api = _Flaky(cluster.api)
        old = _preempting(cluster, api, "g-0", "g-1")
        refused = {"g-1"}
        post = api.post

        def budget(path: str, body: Any) -> Any:  # (g-1's budget refuses, g-0's allows)
            api.budget = (
                path.endswith("/eviction") and path.split("/pods/")[1].split("/")[0] in refused
            )
            return post(path, body)

        api.post = budget  # type: ignore[method-assign]
        _cycle(old, cluster)
        assert sorted(api.calls) == [("g-0", "True", True), ("g-0", "evict", True),
                                     ("g-1", "True", True), ("g-1", "evict", False)]  # fmt: skip
        assert cluster.get("g-0")["metadata"].get("deletionTimestamp")
        old._pool.shutdown()  # (stopped)
        new_api = _Flaky(cluster.api)
        new = _shim(cluster, new_api)
        assert not any(r.group == f"{cluster.ns}/g" for r in new._jobs.values())
        _cycle(new, cluster)
        _cycle(new, cluster)
        assert ("g-1", "False", True) not in new_api.calls
        gone = cluster.pods().get("g-1")
        assert gone is None or gone["metadata"].get("deletionTimestamp"), "g-1 runs alone"
        assert _disruption(cluster, "g-0") == ("True", "PreemptionByScheduler")
    finally:
        cluster.api.patch(g0, {"metadata": {"finalizers": None}})


def _replace(cluster: Cluster, name: str) -> str:
    """Pod ``name`` deleted and made again under its name (a StatefulSet's pod), unseen by
    the shim: the new pod's uid."""
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/{name}", {"gracePeriodSeconds": 0})
    wait_for(lambda: name not in cluster.pods(), what=f"{name} gone")
    return str(cluster.pod(name)["metadata"]["uid"])


@pytest.mark.parametrize("mode", ["eviction", "delete"])
def test_a_victim_replaced_under_its_name_after_its_condition_was_written_takes_no_eviction(
    cluster: Cluster, mode: str
) -> None:
    """The victim is deleted and made again under its name between the write of its True
    and its eviction (or delete): the call carries the victim's uid as a precondition, the
    API server refuses it (409) and the pod now called ``low`` is left alone, as a victim
    gone."""
    api = _Flaky(cluster.api)
    _low_running(cluster)
    shim = _preempting(cluster, api, "low", mode=mode)
    patch = api.patch
    new: list[str] = []

    def then_replace(path: str, body: Any, *, kind: str = "merge") -> Any:
        out = patch(path, body, kind=kind)
        if path.endswith("/pods/low/status") and not new:
            new.append(_replace(cluster, "low"))
        return out

    api.patch = then_replace  # type: ignore[method-assign]
    _cycle(shim, cluster)
    assert new and cluster.get("low")["metadata"]["uid"] == new[0]
    assert not cluster.get("low")["metadata"].get("deletionTimestamp"), "the new low evicted"
    assert f"{cluster.ns}/low" not in shim._evict


def _read_as_pending(api: _Flaky, then: Any) -> None:
    """The shim's read of ``low`` answers the pod as it was while bound and not yet started
    (phase ``Pending``; the test's kubelet starts a pod at once), then ``then()`` runs."""
    get = api.api.get

    def read(path: str, **query: Any) -> Any:
        out = get(path, **query)
        if path.endswith("/pods/low") and out.get("status", {}).get("phase") == "Running":
            out = {**out, "status": {**out["status"], "phase": "Pending"}}
            then()
        return out

    api.get = read  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "when", ["before the shim reads it", "between its read and the call, read as pending"]
)
def test_an_eviction_of_a_victim_replaced_under_its_name_is_refused_at_once_not_after_10_s(
    cluster: Cluster, when: str
) -> None:
    """The victim is replaced under its name by a pending pod (a StatefulSet's, which waits
    for kant) just before its eviction. kube-apiserver's eviction handler deletes a pending
    pod without asking its budget, and retries that delete for 10 s (20 times) when it is
    refused for a precondition, unless the eviction names a resourceVersion: the shim reads
    the pod first and asks nothing of a pod of another uid; a victim it read as one the
    handler deletes without its budget (here: pending, bound but not yet started) gets the
    resourceVersion read as a precondition, so that a replacement made after the read is
    refused at once. The cycle is not held 10 s, and the new pod is left alone."""
    api = _Flaky(cluster.api)
    _low_running(cluster)
    shim = _preempting(cluster, api, "low")
    new: list[str] = []
    if when == "before the shim reads it":
        patch = api.patch

        def then_replace(path: str, body: Any, *, kind: str = "merge") -> Any:
            out = patch(path, body, kind=kind)
            if path.endswith("/pods/low/status") and not new:
                new.append(_replace(cluster, "low"))
            return out

        api.patch = then_replace  # type: ignore[method-assign]
    else:
        _read_as_pending(api, lambda: new or new.append(_replace(cluster, "low")))
    t = time.monotonic()
    _cycle(shim, cluster)
    took = time.monotonic() - t
    assert took < 5.0, f"the cycle waited {took:.1f} s for the eviction's answer"
    assert new and cluster.get("low")["metadata"]["uid"] == new[0]
    assert not cluster.get("low")["metadata"].get("deletionTimestamp"), "the new low evicted"
    assert f"{cluster.ns}/low" not in shim._evict
    evictions = [c for c in api.calls if c[1] == "evict"]
    assert evictions == ([] if when == "before the shim reads it" else [("low", "evict", True)])


def _budget(cluster: Cluster, allowed: int) -> str:
    """A PodDisruptionBudget over ``app=low`` whose status allows ``allowed`` disruptions
    (the test server runs no disruption controller: the test writes its status): its
    path."""
    base = f"/apis/policy/v1beta1/namespaces/{cluster.ns}/poddisruptionbudgets"
    pdb = cluster.api.post(base, {"metadata": {"name": "budget"}, "spec": {
        "minAvailable": 0, "selector": {"matchLabels": {"app": "low"}}}})  # fmt: skip
    cluster.api.patch(f"{base}/budget/status", {"status": {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 0,
        "expectedPods": 1}})  # fmt: skip
    return f"{base}/budget"


def test_a_running_victim_written_just_before_its_eviction_is_evicted_within_its_budget(
    cluster: Cluster,
) -> None:
    """``low`` runs under a PodDisruptionBudget that allows one disruption, and another
    writer (its kubelet's status update, a controller's annotation) changes it between the
    shim's read and its eviction. kube-apiserver's eviction handler takes the disruption
    from the budget before the delete checks the call's preconditions: had the call named
    the resourceVersion read, the delete would be refused (409) with the budget spent, and
    every later eviction refused (429) until the disruption controller forgets it (2
    minutes; never here). The call names the uid alone, and the victim is evicted in that
    cycle, the budget spent on it."""
    with contextlib.suppress(ApiError):
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": HIGH}, "value": 1000})  # fmt: skip
    cluster.node("n0")
    cluster.pod("low", labels={"app": "low"})
    api = _Flaky(cluster.api)
    shim = _preempting(cluster, api, "low")
    wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                         for c in cluster.get("low")["status"].get("conditions") or ()),
             what="low ready")  # fmt: skip
    budget = _budget(cluster, 1)
    get = cluster.api.get
    touched: list[bool] = []

    def read_then_touch(path: str, **query: Any) -> Any:
        out = get(path, **query)
        if path.endswith("/pods/low") and not touched:
            touched.append(True)
            cluster.api.patch(path, {"metadata": {"annotations": {"example.com/x": "1"}}})
        return out

    api.get = read_then_touch  # type: ignore[attr-defined]
    _cycle(shim, cluster)
    assert touched and api.calls == [("low", "True", True), ("low", "evict", True)]
    assert _gone_or_going(cluster, "low")
    assert f"{cluster.ns}/low" not in shim._evict
    status = cluster.api.get(budget)["status"]
    assert status["disruptionsAllowed"] == 0 and list(status["disruptedPods"]) == ["low"]
    _relay(shim, cluster)  # (low gone)
    _cycle(shim, cluster)
    wait_for(lambda: cluster.node_of("high") == "n0", what="high bound")


def test_a_victim_read_as_pending_and_changed_before_its_eviction_is_evicted_by_the_next_cycle(
    cluster: Cluster,
) -> None:
    """A victim the shim read as pending (bound, not yet started) gets the resourceVersion
    read as a precondition: it changed meanwhile (started, as here, or written by another),
    the API server refuses the call (409), and the next cycle reads it again and evicts it."""
    api = _Flaky(cluster.api)
    _low_running(cluster)
    shim = _preempting(cluster, api, "low")
    path = f"/api/v1/namespaces/{cluster.ns}/pods/low"
    touched: list[bool] = []
    _read_as_pending(api, lambda: touched or touched.append(bool(cluster.api.patch(
        path, {"metadata": {"labels": {"example.com/touched": "1"}}}))))  # fmt: skip
    _cycle(shim, cluster)
    assert touched and api.calls == [("low", "True", True), ("low", "evict", True)]
    assert not cluster.get("low")["metadata"].get("deletionTimestamp")
    assert f"{cluster.ns}/low" in shim._evict  # (tried again)
    api.get = cluster.api.get  # type: ignore[attr-defined]
    _cycle(shim, cluster)
    assert api.calls[2:] == [("low", "evict", True)]
    assert f"{cluster.ns}/low" not in shim._evict
    _relay(shim, cluster)  # (low gone)
    _cycle(shim, cluster)
    wait_for(lambda: cluster.node_of("high") == "n0", what="high bound")


@pytest.mark.parametrize(
    ("phase", "deleting", "skipped"),
    [("Pending", False, True), ("Running", False, False), ("Succeeded", False, True),
     ("Failed", False, True), ("Unknown", False, False), ("Running", True, True)],
)  # fmt: skip
def test_the_resource_version_is_named_only_for_a_pod_the_eviction_handler_deletes_without_its_budget(
    phase: str, deleting: bool, skipped: bool
) -> None:
    """kube-apiserver's eviction handler skips the budget (and retries a refused delete)
    for a pod pending, ended or being deleted, and for no other."""
    meta = {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}
    assert shim_module._budget_skipped({"metadata": meta, "status": {"phase": phase}}) is skipped


@pytest.mark.parametrize("layer", ["registry", "storage"])
@pytest.mark.parametrize("name", ["low", "fluid-0", "uid"])
def test_a_409_on_the_resource_version_is_never_read_as_the_victim_gone_whatever_its_name(
    name: str, layer: str
) -> None:
    """The API server's words for each refused precondition, as it answers an eviction (its
    registry's check before the delete, or its storage layer's, when the object changed
    after that check): a victim whose name contains ``uid`` changed since the shim read it
    is tried again, not taken as replaced (its eviction dropped while kant counts it as
    going)."""
    path = f"/api/v1/namespaces/t/pods/{name}/eviction"

    def refused(field: str, was: str, now: str) -> ApiError:
        if layer == "registry":
            why = (f"the {field} in the precondition ({was}) does not match the {field} in "
                   f"record ({now}). The object might have been modified")  # fmt: skip
        else:
            why = (f"Precondition failed: {field} in precondition: {was}, {field} in object "
                   f"meta: {now}")  # fmt: skip
        msg = f'Operation cannot be fulfilled on pods "{name}": {why}'
        return ApiError(409, "POST", path, json.dumps({"reason": "Conflict", "message": msg}))

    version, uid = refused("ResourceVersion", "97", "98"), refused("UID", "a-1", "b-2")
    assert shim_module._version_mismatch(version) and not shim_module._uid_mismatch(version)
    assert shim_module._uid_mismatch(uid) and not shim_module._version_mismatch(uid)


@pytest.mark.parametrize("mode", ["eviction", "delete"])
def test_a_victim_replaced_under_its_name_before_its_condition_was_written_takes_no_eviction(
    cluster: Cluster, mode: str
) -> None:
    """The victim is made again under its name before its True is written: the write
    carries the victim's uid and is refused (422), and no eviction is asked for that name."""
    api = _Flaky(cluster.api)
    _low_running(cluster)
    shim = _preempting(cluster, api, "low", mode=mode)
    api.fail = 500
    _cycle(shim, cluster)  # (True not written: no eviction)
    uid = _replace(cluster, "low")
    api.fail = None
    api.calls.clear()
    _cycle(shim, cluster)
    assert api.calls == [("low", "True", True)]  # (refused: 422)
    assert f"{cluster.ns}/low" not in shim._evict
    assert f"{cluster.ns}/low" not in shim._disruption_due
    _cycle(shim, cluster)
    got = cluster.get("low")
    assert got["metadata"]["uid"] == uid and not got["metadata"].get("deletionTimestamp")
    assert _disruption(cluster, "low") is None


def test_a_victim_whose_condition_was_reset_is_marked_again_before_it_is_evicted(
    cluster: Cluster,
) -> None:
    """Kubernetes' disruption controller (1.26+) sets a ``DisruptionTarget=True`` back to
    False on a pod not deleted within 2 minutes: a victim a budget holds longer would go
    carrying False. The test plays the controller (no controller-manager runs): kant sees the
    reset, writes True again, and evicts only then."""
    api = _Flaky(cluster.api)
    shim = _victim_held_by_a_budget(cluster, api)
    cond = {"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler",
            "message": "reset by the disruption controller"}  # fmt: skip
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/low/status",
                      {"status": {"conditions": [cond]}}, kind="strategic")  # fmt: skip
    _relay(shim, cluster)
    api.budget = False
    api.calls.clear()
    _cycle(shim, cluster)
    assert api.calls == [("low", "True", True), ("low", "evict", True)]
    _relay(shim, cluster)  # (low gone)
    _cycle(shim, cluster)
    wait_for(lambda: cluster.node_of("high") == "n0", what="high bound")


def test_condition_writes_and_evictions_stop_at_the_first_the_server_does_not_answer(
    cluster: Cluster,
) -> None:
    """``high`` preempts ``low-a`` and ``low-b``: while the server answers no condition write,
    each cycle tries one (the first in pod order) and no eviction; while it answers no
    eviction, each cycle asks one. An unresponsive server costs a cycle one timeout, not
    one per victim."""
    with contextlib.suppress(ApiError):
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": HIGH}, "value": 1000})  # fmt: skip
    cluster.node("n0")
    cluster.pod("low-a", gpus=4)
    cluster.pod("low-b", gpus=4)
    api = _Flaky(cluster.api)
    shim = _preempting(cluster, api, "low-a", "low-b")
    api.fail = "no answer"
    _cycle(shim, cluster)
    _cycle(shim, cluster)
    assert api.calls == [("low-a", "True", False)] * 2
    assert sorted(shim._disruption_due) == [f"{cluster.ns}/low-a", f"{cluster.ns}/low-b"]
    assert shim.status_writes_due
    api.fail, api.evict_fail = None, "no answer"
    api.calls.clear()
    _cycle(shim, cluster)
    assert api.calls == [("low-a", "True", True), ("low-b", "True", True),
                         ("low-a", "evict", False)]  # fmt: skip
    api.evict_fail = None
    api.calls.clear()
    _cycle(shim, cluster)
    assert api.calls == [("low-a", "evict", True), ("low-b", "evict", True)]
    _relay(shim, cluster)
    _cycle(shim, cluster)
    wait_for(lambda: cluster.node_of("high") == "n0", what="high bound")


def _gone_or_going(cluster: Cluster, name: str) -> bool:
    """Whether pod ``name`` is gone or being deleted (read once: a pod listed, then deleted
    before a second read, is gone)."""
    try:
        return bool(cluster.get(name)["metadata"].get("deletionTimestamp"))
    except ApiError as e:
        if e.status == 404:
            return True
        raise
