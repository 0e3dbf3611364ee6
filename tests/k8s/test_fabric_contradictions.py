"""Nodes whose topology labels contradict the fabric kant has built (two nodes giving one
leaf two spines): the node refused is left out with one warning for each reason it is
refused for, not one at each status update, and comes in once its labels agree. A shim that
starts takes, of two contradicting nodes, the one where kant's pods run (one it takes in
only to count them too), else the first by name, whatever order the API server lists them
in."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kant.k8s import shim as shim_module
from kant.k8s.kubelet import node_object
from kant.k8s.shim import Shim

from .conftest import Cluster, wait_for
from .test_big_nodes import _kant_pod, _Listed

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

LEAF, SPINE = "network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine"


def _labelled(name: str, leaf: str, spine: str) -> dict[str, Any]:
    return node_object(name, labels={LEAF: leaf, SPINE: spine})


def _left_out(caplog: pytest.LogCaptureFixture, node: str, since: int = 0) -> list[str]:
    """The warnings that ``node`` is left out, among the records from ``since`` on."""
    return [
        r.getMessage()
        for r in caplog.records[since:]
        if r.levelno == logging.WARNING and r.getMessage().startswith(f"node {node} is left out")
    ]


def _relabel(cluster: Cluster, node: str, labels: dict[str, str]) -> None:
    cluster.api.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})


def _heartbeat(cluster: Cluster, node: str, beat: int) -> None:
    """A status update of ``node``'s kubelet (its Ready condition's heartbeat, ``beat``
    seconds into a minute of 2030): nothing kant reads changes."""
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "lastHeartbeatTime": f"2030-01-01T00:00:{beat:02d}Z"}  # fmt: skip
    cluster.api.patch(f"/api/v1/nodes/{node}/status", {"status": {"conditions": [ready]}},
                      kind="strategic")  # fmt: skip


def test_a_node_relabelled_under_a_second_spine_is_left_out_with_one_warning_per_reason(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # (it said "node n1 is left out" again at every status update of n1)
    cluster.node("n0", labels={LEAF: "L", SPINE: "sp0"})
    cluster.node("n1", labels={LEAF: "M", SPINE: "sp1"})
    shim = cluster.start_shim()
    cluster.looked(nodes=("n0", "n1"))
    assert shim.nodes.has("n1") and shim.nodes.schedulable("n1")
    _relabel(cluster, "n1", {LEAF: "L"})  # leaf L is under sp0 (n0's)
    cluster.looked(nodes=("n1",))
    assert shim.nodes.has("n0") and not shim.nodes.has("n1")
    for beat in range(3):
        _heartbeat(cluster, "n1", beat)
        cluster.looked(nodes=("n1",))
    (left,) = _left_out(caplog, "n1")
    assert "field 'spine' = 'spine=sp1': leaf 'leaf=L' is already under spine 'spine=sp0'" in left
    _relabel(cluster, "n1", {SPINE: "sp2"})  # refused for another reason: said once more
    cluster.looked(nodes=("n1",))
    _heartbeat(cluster, "n1", 3)
    cluster.looked(nodes=("n1",))
    assert len(_left_out(caplog, "n1")) == 2
    assert "'spine=sp2'" in _left_out(caplog, "n1")[1]
    _relabel(cluster, "n1", {SPINE: "sp0"})  # its labels agree with n0's: taken
    cluster.looked(nodes=("n1",))
    assert shim.nodes.has("n1") and shim.nodes.schedulable("n1")
    assert shim.nodes.spec("n1").leaf == shim.nodes.spec("n0").leaf
    assert len(_left_out(caplog, "n1")) == 2


def test_a_node_the_fabric_refuses_is_warned_of_again_only_once_deleted_or_refused_otherwise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shim = Shim(None)  # type: ignore[arg-type]  # (no call reaches the API here)
    try:
        shim.handle("Node", "ADDED", _labelled("n0", "L", "sp0"))
        for _ in range(3):  # (the event that brings it, then status updates)
            shim.handle("Node", "MODIFIED", _labelled("n1", "L", "sp1"))
        assert len(_left_out(caplog, "n1")) == 1
        refused = {LEAF: "L", SPINE: "sp1"}
        shim.handle("Node", "MODIFIED", node_object("n1", ready=False, labels=refused))
        shim.handle("Node", "MODIFIED", _labelled("n1", "L", "sp1"))  # Ready again, as refused
        assert len(_left_out(caplog, "n1")) == 1
        shim.handle("Node", "MODIFIED", node_object("n1", gpus=72, labels=refused))
        shim.handle("Node", "MODIFIED", _labelled("n1", "L", "sp1"))  # (valid, not placed)
        assert len(_left_out(caplog, "n1")) == 3  # past the limit, then the fabric again
        shim.handle("Node", "DELETED", _labelled("n1", "L", "sp1"))
        shim.handle("Node", "ADDED", _labelled("n1", "L", "sp1"))  # created again, as refused
        assert len(_left_out(caplog, "n1")) == 4
        assert not shim.nodes.has("n1")
    finally:
        shim._pool.shutdown()


@pytest.mark.parametrize("listed", [("n0", "n1"), ("n1", "n0")])
@pytest.mark.parametrize("kants", [(), ("n0",), ("n1",), ("n0", "n1")])
def test_a_starting_shim_takes_into_the_fabric_the_node_kants_pods_run_on_else_the_first_by_name(
    listed: tuple[str, ...], kants: tuple[str, ...]
) -> None:
    # (it took the one the API server listed first: a restart could swap them)
    nodes = {"n0": _labelled("n0", "L", "sp0"), "n1": _labelled("n1", "L", "sp1")}
    pods = [_kant_pod(f"a{n}", n, gpus=4) for n in kants]
    shim = Shim(_Listed([nodes[n] for n in listed], pods))  # type: ignore[arg-type]
    try:
        shim.sync()
        first = "n1" if kants == ("n1",) else "n0"
        other = "n0" if first == "n1" else "n1"
        assert shim.nodes.schedulable(first)
        assert shim.nodes.spec(first).leaf is not None  # (in the fabric)
        if other in kants:  # counted, cordoned, out of the fabric, until its pod has ended
            assert shim.nodes.has(other) and not shim.nodes.schedulable(other)
            assert shim.nodes.spec(other).leaf is None
        else:
            assert not shim.nodes.has(other)
        assert sorted(shim._jobs) == sorted(f"ns..a{n}#1" for n in kants)
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


def test_a_restarted_shim_keeps_in_the_fabric_the_node_kants_pod_runs_on_not_the_first_listed(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # (the API server lists n0 first: the restarted shim took n0 into the fabric, cordoned
    # n1 out of it only to count a, and p went to n0)
    cluster.node("n1", labels={LEAF: "L", SPINE: "sp1"})
    cluster.start_shim()
    cluster.pod("a", gpus=4)
    wait_for(lambda: cluster.get("a")["status"].get("phase") == "Running", what="a running")
    assert cluster.node_of("a") == "n1"
    cluster.node("n0", labels={LEAF: "L", SPINE: "sp0"})  # leaf L is under sp1: left out
    cluster.looked(nodes=("n0",))
    cluster.stop_shims()
    since = len(caplog.records)
    again = cluster.start_shim()
    _heartbeat(cluster, "n0", 0)
    cluster.looked(nodes=("n0", "n1"))
    assert again.nodes.has("n1") and again.nodes.schedulable("n1")
    assert again.nodes.spec("n1").leaf is not None
    assert not again.nodes.has("n0")
    (left,) = _left_out(caplog, "n0", since)  # (not again at the watch's list, nor at n0's
    assert "leaf 'leaf=L' is already under spine 'spine=sp1'" in left  # status update)
    cluster.pod("p", gpus=4)
    assert wait_for(lambda: cluster.node_of("p"), what="p bound") == "n1"


def _big(name: str, leaf: str, spine: str) -> dict[str, Any]:
    """Node ``name`` of 72 GPUs (past the limit: a node kant refuses, taken in by a starting
    shim only to count kant's pods there) at leaf ``leaf`` under ``spine``."""
    return node_object(name, gpus=72, labels={LEAF: leaf, SPINE: spine})


def _started(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Shim:
    shim = Shim(_Listed(nodes, pods))  # type: ignore[arg-type]
    shim.sync()
    return shim


@pytest.mark.parametrize("listed", [("n0", "n1"), ("n1", "n0")])
def test_of_two_contradicting_nodes_both_taken_in_only_to_count_the_first_by_name_joins_the_fabric(
    listed: tuple[str, ...],
) -> None:
    # (both past 64 GPUs, kant's pods on both: the one listed first joined the fabric)
    nodes = {"n0": _big("n0", "L", "sp0"), "n1": _big("n1", "L", "sp1")}
    shim = _started([nodes[n] for n in listed], [_kant_pod("a", "n0", gpus=4),
                                                 _kant_pod("b", "n1", gpus=4)])  # fmt: skip
    try:
        assert shim.nodes.spec("n0").leaf is not None
        assert shim.nodes.spec("n1").leaf is None  # (counted out of the fabric)
        assert not shim.nodes.schedulable("n0") and not shim.nodes.schedulable("n1")
        assert sorted(shim._jobs) == ["ns..a#1", "ns..b#1"]
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


@pytest.mark.parametrize("listed", [("n0", "n1"), ("n1", "n0")])
def test_a_starting_shim_keeps_in_the_fabric_the_node_kants_pods_run_on_though_it_only_counts_them(
    listed: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    # (n0, past 64 GPUs, was taken in only once every node had been: n1, valid, had taken
    # leaf L under sp1, and n0 was counted out of the fabric)
    nodes = {"n0": _big("n0", "L", "sp0"), "n1": _labelled("n1", "L", "sp1")}
    shim = _started([nodes[n] for n in listed], [_kant_pod("a", "n0", gpus=4)])
    try:
        assert shim.nodes.spec("n0").leaf is not None and not shim.nodes.schedulable("n0")
        assert not shim.nodes.has("n1")
        (left,) = _left_out(caplog, "n1")
        assert "leaf 'leaf=L' is already under spine 'spine=sp0'" in left
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n0", gpus=4, phase="Succeeded"))
        shim._take_changed_nodes()
        assert not shim.nodes.has("n0")  # (still past 64 GPUs: it left)
        shim.handle("Node", "MODIFIED", nodes["n1"])  # (its next status update)
        assert shim.nodes.schedulable("n1") and shim.nodes.spec("n1").leaf is not None
    finally:
        shim._pool.shutdown()


def test_of_nodes_all_running_kants_pods_the_first_by_name_joins_the_fabric_against_a_majority() -> (
    None
):
    # n1 and n2 agree (leaf L under sp1), n0 says sp0: n0 is first by name
    nodes = [_labelled("n2", "L", "sp1"), _labelled("n1", "L", "sp1"), _labelled("n0", "L", "sp0")]
    shim = _started(nodes, [_kant_pod(f"a{i}", f"n{i}", gpus=4) for i in range(3)])
    try:
        assert shim.nodes.schedulable("n0") and shim.nodes.spec("n0").leaf is not None
        for n in ("n1", "n2"):
            assert not shim.nodes.schedulable(n) and shim.nodes.spec(n).leaf is None
    finally:
        shim._pool.shutdown()


def test_a_starting_shim_orders_its_nodes_those_kants_pods_run_on_first_then_by_name() -> None:
    # (the order of their slots and of the fabric's ids, which placement breaks ties by)
    nodes = [node_object(f"n{i}") for i in (2, 0, 3, 1)]
    shim = _started(nodes, [_kant_pod("a", "n3", gpus=4), _kant_pod("b", "n1", gpus=4)])
    try:
        assert [n.name for n in shim.scheduler.cluster.nodes()] == ["n1", "n3", "n0", "n2"]
    finally:
        shim._pool.shutdown()


def test_a_starting_shim_reads_each_pod_once_to_find_the_nodes_kants_pods_run_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (it read every pod once to order the nodes, and again for a node taken in only to
    # count kant's pods there: 100k pods cost 0.7 s more at each start)
    read: list[str] = []
    kants_node = shim_module._kants_node

    def counted(pod: dict[str, Any], settings: Any) -> str | None:
        read.append(pod["metadata"]["name"])
        return kants_node(pod, settings)

    monkeypatch.setattr(shim_module, "_kants_node", counted)
    pods = [_kant_pod("a", "n0", gpus=4), _kant_pod("b", "n1", gpus=4)]
    shim = _started([_big("n0", "L", "sp0"), _labelled("n1", "L", "sp1")], pods)
    try:
        assert shim.nodes.has("n0") and shim.nodes.has("n1")  # (n0 only to count a)
        assert sorted(read) == ["a", "b"]
    finally:
        shim._pool.shutdown()


def test_a_node_counted_out_of_the_fabric_says_once_that_it_left_and_nothing_more_at_its_next_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # (after "left kant's cluster", its next status update said "node n1 is valid again:
    # taken as it is now", which it was not, and "node n1 is left out" for the same reason)
    caplog.set_level(logging.INFO, logger="kant")
    shim = _started([_labelled("n0", "L", "sp0"), _labelled("n1", "L", "sp1")],
                    [_kant_pod("b", "n0", gpus=4), _kant_pod("a", "n1", gpus=4)])  # fmt: skip
    try:
        assert shim.nodes.spec("n1").leaf is None  # (counted out of the fabric)
        said = len(caplog.records)
        shim.handle("Pod", "MODIFIED", _kant_pod("a", "n1", gpus=4, phase="Succeeded"))
        shim._take_changed_nodes()
        for _ in range(3):  # (status updates, refused by the fabric as before)
            shim.handle("Node", "MODIFIED", _labelled("n1", "L", "sp1"))
        assert not shim.nodes.has("n1")
        about_n1 = [(r.levelname, r.getMessage()) for r in caplog.records[said:]
                    if r.getMessage().startswith("node n1 ")]  # fmt: skip
        assert about_n1 == [(
            "WARNING",
            "node n1 left kant's cluster: none of kant's pods runs there; it comes back once "
            "kant can take it: invalid node: field 'spine' = 'spine=sp1': leaf 'leaf=L' is "
            "already under spine 'spine=sp0'",
        )]  # fmt: skip
        shim.handle("Node", "MODIFIED", _labelled("n1", "L", "sp0"))  # its labels fixed
        assert shim.nodes.schedulable("n1") and shim.nodes.spec("n1").leaf is not None
        shim.handle("Node", "MODIFIED", _labelled("n1", "L", "sp1"))  # and broken again
        assert len(_left_out(caplog, "n1", said)) == 1
    finally:
        shim._pool.shutdown()
