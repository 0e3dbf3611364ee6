"""A fake kubelet for the demo, the benchmark and the integration tests: fake GPU nodes, and a
thread that marks bound pods Running, finishes them after their ``kant.io/runtime-seconds``,
and completes the deletion of terminating pods (there is no real kubelet to do it)."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kant.k8s.client import Api, ApiError, Obj
from kant.k8s.settings import K8sSettings
from kant.k8s.translate import RUNTIME_ANNOTATION, annotations_of, pod_key

log = logging.getLogger(__name__)


def _iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_object(
    name: str,
    *,
    gpus: int = 8,
    model: str = "H100",
    nics: int = 0,
    cpu: str = "128",
    memory: str = "1Ti",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    settings: K8sSettings | None = None,
) -> Obj:
    """A Node object with GPU allocatable and the model label, under the names ``settings``
    gives (``gpuResource``, ``nicResource``, ``gpuModelLabel``; default: the defaults), and
    room for ``pods`` pods (``allocatable.pods``: the kubelet's default ``maxPods`` is 110)."""
    s = settings if settings is not None else K8sSettings()
    res = {"cpu": cpu, "memory": memory, "pods": str(pods), s.gpu_resource: str(gpus)}
    if nics:
        res[s.nic_resource] = str(nics)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {s.gpu_model_label: model, **(labels or {})}},
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [_ready(ready)],
        },
    }


def _ready(ok: bool) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True" if ok else "False",
        "reason": "KubeletReady" if ok else "KubeletNotReady",
        "lastHeartbeatTime": _iso(),
        "lastTransitionTime": _iso(),
    }


def create_node(api: Api, node: Obj) -> None:
    """Create a node and write its status (allocatable, Ready)."""
    name = node["metadata"]["name"]
    api.post("/api/v1/nodes", node)
    api.patch(f"/api/v1/nodes/{name}/status", {"status": node["status"]})


def set_node_ready(api: Api, name: str, ready: bool) -> None:
    """Flip the node's Ready condition (what a node controller sees when a kubelet dies)."""
    api.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": [_ready(ready)]}},
              kind="strategic")  # fmt: skip


class FakeKubelet(threading.Thread):
    """Run the pods bound to any node: Pending -> Running at once, Running -> Succeeded
    after ``kant.io/runtime-seconds`` (never without it), terminating -> deleted."""

    def __init__(self, api: Api, *, poll: float = 0.05, runtime_scale: float = 1.0) -> None:
        super().__init__(daemon=True, name="kant-fake-kubelet")
        self.api = api
        self.poll = poll
        self.runtime_scale = runtime_scale
        self._stop_ev = threading.Event()
        self._running_pods: set[str] = set()  # uids of the pods it started
        self._due: list[tuple[float, str, str]] = []
        self.finished = 0

    def stop(self) -> None:
        self.stop_soon()
        self.join(10)

    def stop_soon(self) -> None:
        """Tell it to stop (it ends after the call it is making), without waiting."""
        self._stop_ev.set()

    def run(self) -> None:
        rv = ""
        while not self._stop_ev.is_set():
            try:
                if not rv:
                    doc = self.api.get("/api/v1/pods")
                    for p in doc.get("items", ()):
                        self._pod(p)
                    rv = str(doc["metadata"].get("resourceVersion", ""))
                for ev in self.api.watch("/api/v1/pods", rv, timeout=1):
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        rv = ""
                        break
                    rv = str((obj.get("metadata") or {}).get("resourceVersion", rv))
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self._pod(obj)
                    self._finish_due()
                    if self._stop_ev.is_set():
                        return
                self._finish_due()
            except Exception as e:
                if self._stop_ev.is_set():
                    return
                log.info("fake kubelet: %s", e)
                rv = ""
                time.sleep(self.poll)

    def _pod(self, p: Obj) -> None:
        meta: dict[str, Any] = p.get("metadata") or {}
        spec: dict[str, Any] = p.get("spec") or {}
        status: dict[str, Any] = p.get("status") or {}
        key = pod_key(p)
        ns, name = key.split("/", 1)
        uid = str(meta.get("uid") or "")
        try:
            if meta.get("deletionTimestamp"):
                # (this pod only, as a kubelet does: not one made again under its name since)
                opts: dict[str, Any] = {"gracePeriodSeconds": 0}
                if uid:
                    opts["preconditions"] = {"uid": uid}
                self.api.delete(f"/api/v1/namespaces/{ns}/pods/{name}", opts)
                return
            if not spec.get("nodeName") or status.get("phase", "Pending") != "Pending":
                return
            if (uid or key) in self._running_pods:
                return
            self._running_pods.add(uid or key)
            self.api.patch(
                f"/api/v1/namespaces/{ns}/pods/{name}/status",
                {"status": {"phase": "Running", "startTime": _iso(),
                            "conditions": [{"type": "Ready", "status": "True"}]}},
                kind="strategic",
            )  # fmt: skip
            rt = annotations_of(p).get(RUNTIME_ANNOTATION)
            if rt:
                due = time.monotonic() + float(rt) * self.runtime_scale
                heapq.heappush(self._due, (due, ns, name))
        except ApiError as e:
            if e.status != 404:
                log.info("fake kubelet %s: %s", key, e)

    def _finish_due(self) -> None:
        t = time.monotonic()
        while self._due and self._due[0][0] <= t:
            _, ns, name = heapq.heappop(self._due)
            try:
                self.api.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status",
                               {"status": {"phase": "Succeeded"}})  # fmt: skip
                self.finished += 1
            except ApiError as e:
                if e.status != 404:
                    log.info("fake kubelet finish %s/%s: %s", ns, name, e)
