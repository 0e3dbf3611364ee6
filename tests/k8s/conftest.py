"""The real API server for the integration tests: one etcd + kube-apiserver per session
(kant.k8s.testenv), skipped with the reason when the binaries are absent
(scripts/kube-testenv provision builds them). The tests of a session share it, and a
shim reads every namespace: the ``cluster`` fixture removes the pods, PodGroups and nodes a
test made, and fails the test if any is left (see :class:`Cluster`)."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kant.config import parse_config
from kant.cycle import CycleResult
from kant.k8s.client import Api, ApiError
from kant.k8s.kubelet import FakeKubelet, create_node, node_object
from kant.k8s.shim import Shim
from kant.k8s.testenv import KubeTestEnv, find_binaries
from kant.k8s.translate import Obj, pod_key

PODGROUP_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io",
        "scope": "Namespaced",
        "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup"},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}  # fmt: skip


@pytest.fixture(scope="session")
def kube() -> Iterator[KubeTestEnv]:
    api, etcd, why = find_binaries()
    if api is None or etcd is None:
        if os.environ.get("KANT_K8S_REQUIRED"):
            pytest.fail(f"KANT_K8S_REQUIRED is set but {why}")
        pytest.skip(why)
    with KubeTestEnv() as env:
        env.api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", PODGROUP_CRD)
        deadline = time.monotonic() + 30
        while True:
            try:
                env.api.get("/apis/scheduling.x-k8s.io/v1alpha1/podgroups")
                break
            except ApiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield env


_ns = itertools.count()


class ShimProbe:
    """What a shim running in the test's process has taken in and done, through its hooks
    (``on_event``, ``on_cycle``): per object, the last watch event it took in (its type, its
    resourceVersion, and how many cycles had ended then), and the cycles ended.

    resourceVersions are compared as integers: kube-apiserver over etcd gives each write the
    etcd revision, which only grows (clients must not rely on it; these tests run against
    that server only)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cycles = 0
        self.seen: dict[tuple[str, str], tuple[str, int, int]] = {}

    def on_cycle(self, shim: Shim, result: CycleResult) -> None:
        with self._lock:
            self.cycles += 1

    def on_event(self, kind: str, event: str, obj: Obj) -> None:
        rv = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
        with self._lock:
            self.seen[(kind, pod_key(obj))] = (event, rv, self.cycles)


class Cluster:
    """One test's view of the shared API server: its own namespace (and any other it makes
    with :meth:`namespace`), nodes it creates, shims and a fake kubelet it starts.

    The API server is shared by the tests of a session, and a shim reads every namespace:
    :meth:`close` removes what a shim would take in (the pods and PodGroups of the test's
    namespaces, finalizers or not, and every node), so that no test sees another's objects,
    whatever ran before it."""

    def __init__(self, env: KubeTestEnv) -> None:
        self.env = env
        self.api: Api = env.api
        self.ns = f"t{next(_ns)}"
        self._namespaces: list[str] = []
        self.namespace("")
        self._stops: list[tuple[threading.Event, threading.Thread]] = []
        self._probes: list[tuple[Shim, ShimProbe]] = []
        self.kubelet = FakeKubelet(self.api)
        self.kubelet.start()

    def namespace(self, suffix: str) -> str:
        """Make namespace ``<the test's namespace><suffix>``; its pods and PodGroups are
        removed with the test's."""
        ns = f"{self.ns}{suffix}"
        self.api.post("/api/v1/namespaces", {"metadata": {"name": ns}})
        self._namespaces.append(ns)
        return ns

    def node(self, name: str, **kw: Any) -> None:
        create_node(self.api, node_object(name, **kw))

    def pod(self, name: str, *, gpus: int = 8, nics: int = 0, group: str | None = None,
            labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
            priority: int | None = None,
            priority_class: str | None = None,
            node_selector: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
        req = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
        if nics:
            req["rdma/hca"] = str(nics)
        lab = dict(labels or {})
        if group:
            lab["scheduling.x-k8s.io/pod-group"] = group
        spec: dict[str, Any] = {
            "schedulerName": "kant",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": req, "limits": {
                k: v for k, v in req.items() if k not in ("cpu", "memory")}}}],
        }  # fmt: skip
        if priority is not None:
            spec["priority"] = priority
        if priority_class is not None:
            spec["priorityClassName"] = priority_class
        if node_selector is not None:
            spec["nodeSelector"] = dict(node_selector)
        body = {"metadata": {"name": name, "namespace": self.ns, "labels": lab,
                             "annotations": dict(annotations or {})}, "spec": spec}  # fmt: skip
        return self.api.post(f"/api/v1/namespaces/{self.ns}/pods", body)

    def pod_group(self, name: str, min_member: int) -> None:
        self.api.post(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{self.ns}/podgroups",
            {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": self.ns}, "spec": {"minMember": min_member}},
        )  # fmt: skip

    def get(self, name: str) -> dict[str, Any]:
        return self.api.get(f"/api/v1/namespaces/{self.ns}/pods/{name}")

    def pods(self) -> dict[str, dict[str, Any]]:
        items = self.api.get(f"/api/v1/namespaces/{self.ns}/pods").get("items", ())
        return {p["metadata"]["name"]: p for p in items}

    def node_of(self, name: str) -> str | None:
        try:
            return self.get(name)["spec"].get("nodeName")
        except ApiError:
            return None

    def start_shim(self, config: dict[str, Any] | None = None) -> Shim:
        raw = dict(config or {})
        k8s = dict(raw.get("kubernetes") or {})
        k8s.setdefault("debounceSeconds", 0.05)
        raw["kubernetes"] = k8s
        probe = ShimProbe()
        shim = Shim(self.api, parse_config(raw), on_cycle=probe.on_cycle, on_event=probe.on_event)
        self._probes.append((shim, probe))
        stop, ready = threading.Event(), threading.Event()
        t = threading.Thread(target=shim.run, args=(stop,), kwargs={"ready": ready}, daemon=True)
        t.start()
        assert ready.wait(30)
        self._stops.append((stop, t))
        return shim

    def looked(self, *pods: str, nodes: tuple[str, ...] = (), gone: tuple[str, ...] = (),
               gone_nodes: tuple[str, ...] = (), poke: bool = False,
               shim: Shim | None = None) -> None:  # fmt: skip
        """Wait until the shim (the last one started, or ``shim``) has decided on the objects
        as they are now: it has taken in the current version of each of ``pods`` and
        ``nodes`` (and the deletion of each of the pods ``gone`` and the nodes
        ``gone_nodes``), a cycle has begun and ended since,
        and the answers of that cycle's binding calls have come. Whatever the shim has not
        done then, it decided not to do (a bare sleep passes as well when the shim has
        simply not got to it yet). ``poke``: first touch the first of ``pods`` (a test
        annotation, which kant does not read on a pod it has taken in), for a cycle to come
        at once after a change the shim does not watch (a PodDisruptionBudget's)."""
        if shim is None:
            shim, probe = self._probes[-1]
        else:
            probe = next(p for s, p in self._probes if s is shim)
        if poke:
            self.api.patch(f"/api/v1/namespaces/{self.ns}/pods/{pods[0]}",
                           {"metadata": {"annotations": {"kant-test/poke": str(time.monotonic())}}})  # fmt: skip
        want: dict[tuple[str, str], int] = {}
        for name in pods:
            want[("Pod", f"{self.ns}/{name}")] = int(self.get(name)["metadata"]["resourceVersion"])
        for name in nodes:
            node = self.api.get(f"/api/v1/nodes/{name}")
            want[("Node", pod_key(node))] = int(node["metadata"]["resourceVersion"])

        def taken() -> int | None:
            with probe._lock:
                seen = dict(probe.seen)
            at = []
            for k, rv in want.items():
                if k not in seen or seen[k][1] < rv:
                    return None
                at.append(seen[k][2])
            for k in [("Pod", f"{self.ns}/{n}") for n in gone] + [
                ("Node", f"default/{n}") for n in gone_nodes
            ]:
                got = seen.get(k)
                if got is None or got[0] != "DELETED":
                    return None
                at.append(got[2])
            return max(at, default=probe.cycles) + 1  # (0 is a valid answer: offset by 1)

        after = wait_for(taken, what="the shim to take the objects in") - 1
        wait_for(lambda: probe.cycles > after, what="a cycle of the shim after them")
        wait_for(lambda: shim.bindings_in_flight == 0, what="the cycle's bindings answered")

    def stop_shims(self) -> None:
        for stop, t in self._stops:
            stop.set()
            t.join(30)
        self._stops.clear()

    def close(self) -> None:
        self.stop_shims()
        self.kubelet.stop()
        for ns in self._namespaces:
            self.api.delete(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups")
            pods = f"/api/v1/namespaces/{ns}/pods"
            self.api.delete(pods, {"gracePeriodSeconds": 0})
            for p in self.api.get(pods).get("items", ()):  # (held by a finalizer)
                with contextlib.suppress(ApiError):
                    self.api.patch(
                        f"{pods}/{p['metadata']['name']}", {"metadata": {"finalizers": None}}
                    )
        self.api.delete("/api/v1/nodes")

    def leftovers(self) -> list[str]:
        """What the API server still holds that a shim would take in: pods, PodGroups and
        nodes, of any namespace."""
        out = []
        for kind, path in (("Pod", "/api/v1/pods"), ("Node", "/api/v1/nodes"),
                           ("PodGroup", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups")):  # fmt: skip
            out += [f"{kind} {pod_key(o)}" for o in self.api.get(path).get("items", ())]
        return out


def wait_for(pred: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def cluster(kube: KubeTestEnv) -> Iterator[Cluster]:
    c = Cluster(kube)
    try:
        yield c
    finally:
        c.close()
    left = c.leftovers()
    assert not left, f"the test left objects a later test's shim would take in: {left}"
