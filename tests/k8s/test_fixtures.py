"""The ``cluster`` fixture against the real API server: the server is shared by the tests of
a session and a shim reads every namespace, so what one test made must be gone before the
next test starts its shim, whichever test ran before it."""

from __future__ import annotations

import pytest

from kant.k8s.testenv import KubeTestEnv

from .conftest import Cluster

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")


def test_a_closed_cluster_leaves_no_pod_podgroup_or_node_for_the_next_tests_shim(
    kube: KubeTestEnv,
) -> None:
    c = Cluster(kube)
    try:
        c.node("n0")
        c.pod_group("g", 2)
        c.pod("g-0", group="g")
        c.pod("held")  # a finalizer keeps it after its deletion
        c.api.patch(f"/api/v1/namespaces/{c.ns}/pods/held",
                    {"metadata": {"finalizers": ["example.com/keep"]}})  # fmt: skip
        other = c.namespace("o")
        c.api.post(f"/api/v1/namespaces/{other}/pods", {
            "metadata": {"name": "elsewhere", "namespace": other},
            "spec": {"containers": [{"name": "c", "image": "x"}]}})  # fmt: skip
        assert len(c.leftovers()) == 5
    finally:
        c.close()
    assert c.leftovers() == []
