"""Pods with ``spec.schedulingGates`` (Kueue's ``kueue.x-k8s.io/admission``, any controller's
own): kant neither queues nor binds a gated pod, nor counts it toward its PodGroup's
``minMember``, and takes it once its gates are removed, as kube-scheduler (1.26 and later) and
Volcano do.

The test API server is 1.20, which drops the field: the shim is driven by the test (no watch,
no loop) and fed the pods as a 1.26+ server sends them, the field added to the objects its
list and the test's events carry; a binding call for a gated pod is answered as 1.26+ answers
it (409, "pod ... has non-empty .spec.schedulingGates")."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kant.config import parse_config
from kant.k8s.client import Api, ApiError
from kant.k8s.shim import Shim

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

GATE = [{"name": "kueue.x-k8s.io/admission"}]


class _Gating:
    """The cluster's Api as a 1.26+ server with the pods named in ``gated`` gated."""

    def __init__(self, api: Api, gated: set[str]) -> None:
        self.api = api
        self.gated = gated
        self.binds: list[str] = []

    def get(self, path: str, **query: Any) -> Any:
        doc = self.api.get(path, **query)
        for p in doc.get("items") or (doc,):
            if p.get("kind", "Pod") == "Pod" and p.get("metadata", {}).get("name") in self.gated:
                p["spec"]["schedulingGates"] = copy.deepcopy(GATE)
        return doc

    def post(self, path: str, body: Any) -> Any:
        if path.endswith("/binding"):
            name = path.split("/pods/")[1].split("/")[0]
            self.binds.append(name)
            if name in self.gated:
                msg = f"pod {name} has non-empty .spec.schedulingGates"
                raise ApiError(409, "POST", path, json.dumps({"reason": "Conflict",
                                                              "message": msg}))  # fmt: skip
        return self.api.post(path, body)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


def _shim(cluster: Cluster, gated: set[str]) -> tuple[Shim, _Gating]:
    api = _Gating(cluster.api, gated)
    shim = Shim(api, parse_config({}))  # type: ignore[arg-type]
    shim.sync()
    return shim, api


def _cycle(shim: Shim) -> None:
    shim.cycle()
    shim.reap(wait=True)


def _ungate(shim: Shim, api: _Gating, cluster: Cluster, name: str) -> None:
    """The gate's owner removes it: the pod comes as MODIFIED, without the field."""
    api.gated.discard(name)
    shim.handle("Pod", "MODIFIED", cluster.get(name))


def _says(cluster: Cluster, name: str) -> str:
    for c in cluster.get(name).get("status", {}).get("conditions") or ():
        if c["type"] == "PodScheduled":
            return str(c.get("message", ""))
    return ""


def test_a_gated_pod_is_not_queued_nor_bound_until_its_gates_are_removed(
    cluster: Cluster,
) -> None:
    cluster.node("n0")
    cluster.pod("gated", gpus=1, labels={"kueue.x-k8s.io/queue-name": "q"})
    shim, api = _shim(cluster, {"gated"})
    try:
        for _ in range(3):
            _cycle(shim)
        assert api.binds == [] and not shim._jobs
        assert f"pod:{cluster.ns}/gated" not in shim._failures
        assert cluster.node_of("gated") is None
        assert _says(cluster, "gated") == ""  # (kant writes nothing on a gated pod)
        _ungate(shim, api, cluster, "gated")
        _cycle(shim)
        assert wait_for(lambda: cluster.node_of("gated"), what="gated bound") == "n0"
        assert api.binds == ["gated"]
    finally:
        shim._pool.shutdown()


def test_a_gated_pod_does_not_count_toward_its_pod_groups_min_member(cluster: Cluster) -> None:
    cluster.node("n0")
    cluster.node("n1")
    cluster.pod_group("g", 2)
    cluster.pod("g-0", group="g")
    cluster.pod("g-1", group="g")
    shim, api = _shim(cluster, {"g-1"})
    try:
        _cycle(shim)
        assert api.binds == [] and not shim._jobs
        assert "1 of the 2 pods" in _says(cluster, "g-0")
        assert _says(cluster, "g-1") == ""
        _ungate(shim, api, cluster, "g-1")
        _cycle(shim)
        wait_for(lambda: cluster.node_of("g-0") and cluster.node_of("g-1"), what="gang bound")
        assert sorted(api.binds) == ["g-0", "g-1"]
    finally:
        shim._pool.shutdown()
