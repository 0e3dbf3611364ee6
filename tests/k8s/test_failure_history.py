"""A job's failures outlive the shim that counted them, against the real API server: the shim
stores them in the ``kant.io/failures`` annotation of the gang's PodGroup (or of the lone pod)
and a shim started anew (a restart, a change of leader) carries them on: the rest of a
backoff, the retry and interruption counts, a FAILED job left failed. Whatever a user writes
there instead is ignored, with a warning, and the job counts from 0."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from kant.config import parse_config
from kant.k8s.client import ApiError
from kant.k8s.failures import FAILURES_ANNOTATION
from kant.k8s.shim import Shim

from .conftest import Cluster, wait_for
from .test_binding_retry import RETRIES, _Rejecting, _relay, _says
from .test_lifecycle import _delete, _gang_on_nodes, _waits

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}"


class _Writes(_Rejecting):
    """:class:`_Rejecting`, noting the shim's writes of failures: (the shim's time, the
    object's path, the value written)."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.writes: list[tuple[float, str, str | None]] = []

    def patch(self, path: str, body: Any, *, kind: str = "merge") -> Any:
        if "metadata" in body:
            text = body["metadata"]["annotations"][FAILURES_ANNOTATION]
            self.writes.append((self.clock[0], path.rsplit("/", 1)[1], text))
        return self.api.patch(path, body, kind=kind)


def _driven(cluster: Cluster, clock: list[float], api: _Rejecting, **config: Any) -> Shim:
    """A shim started anew (as after a restart), driven by the test with ``clock``; its calls
    go through ``api`` (which refuses the bindings it is told to)."""
    shim = Shim(api, parse_config(config), clock=lambda: clock[0])  # type: ignore[arg-type]
    shim.sync()
    return shim


def _run(shim: Shim, clock: list[float], until: float, cluster: Cluster | None = None) -> None:
    """Cycles a second apart (the shim's clock) up to ``until``, each binding answered;
    with ``cluster``, what a watch would tell the shim in between."""
    while clock[0] < until:
        shim.cycle()
        shim.reap(wait=True)
        if cluster is not None:
            _relay(shim, cluster)
        clock[0] += 1


def _stop(shim: Shim) -> None:
    """The shim goes away without a word (a crash, a lost lease): what it did not write in
    its cycles is lost."""
    shim._pool.shutdown(wait=True)


def _stored(obj: dict[str, Any]) -> dict[str, Any] | None:
    text = (obj["metadata"].get("annotations") or {}).get(FAILURES_ANNOTATION)
    return None if text is None else dict(json.loads(text))


def _group(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.api.get(PG.format(ns=cluster.ns, name=name))


# ----------------------------------------------------------------- a lone pod


def test_a_lone_pod_whose_binding_is_always_refused_keeps_its_count_across_restarts(
    cluster: Cluster,
) -> None:
    """Three failures under a first shim, the three others under a second: the six bindings
    come at the times of one shim's backoff (0, 10, 30, 70, 150, 310 s), not six more after
    the restart; the second shim fails it, and a third leaves it failed, with the reason.
    The pod's annotation is written once per failure, by the cycle after it, and never
    else."""
    cluster.node("n0")
    cluster.pod("p")
    clock = [1000.0]
    api = _Writes(cluster.api, {"p"}, clock)
    first = _driven(cluster, clock, api)
    _run(first, clock, 1040)
    _stop(first)
    got = _stored(cluster.get("p"))
    assert got is not None and (got["attempts"], got["backoffUntil"]) == (3, 1070)
    assert got["reason"].startswith("failure 3 (binding ")
    second = _driven(cluster, clock, api)
    _run(second, clock, 1400)
    _stop(second)
    assert [t - 1000 for t, _, _ in api.calls] == RETRIES
    assert _says(cluster, "p").startswith("kant: failed: retry limit 5 reached; last: binding ")
    got = _stored(cluster.get("p"))
    assert got is not None and got["attempts"] == 6
    assert got["failed"].startswith("retry limit 5 reached; last: binding ")
    # a third shim finds it failed: no binding, and its condition says so again
    cluster.api.patch(f"/api/v1/namespaces/{cluster.ns}/pods/p/status",
                      {"status": {"conditions": None}})  # fmt: skip
    third = _driven(cluster, clock, api)
    _run(third, clock, 1420)
    _stop(third)
    assert len(api.calls) == len(RETRIES) and cluster.node_of("p") is None
    assert _says(cluster, "p").startswith("kant: failed: retry limit 5 reached; last: binding ")
    assert [(t - 1000, name) for t, name, _ in api.writes] == [(t + 1, "p") for t in RETRIES]
    third.scheduler.check_invariants()


def test_a_backoff_stored_by_one_shim_is_waited_out_for_its_rest_only_by_the_next(
    cluster: Cluster,
) -> None:
    """A first shim's binding fails at 1000 s (backoff until 1010 s); a second shim starting
    at 1004 s binds at 1010 s, saying meanwhile why it waits, not at once and not 10 s after
    its start."""
    cluster.node("n0")
    cluster.pod("p")
    clock = [1000.0]
    api = _Rejecting(cluster.api, {"p"}, clock)
    first = _driven(cluster, clock, api)
    _run(first, clock, 1002)  # (the failure, and the cycle that writes it)
    _stop(first)
    got = _stored(cluster.get("p"))
    assert got is not None and (got["attempts"], got["backoffUntil"]) == (1, 1010)
    api.reject.clear()  # (the webhook fixed)
    clock[0] = 1004.0
    second = _driven(cluster, clock, api)
    said = ""
    while clock[0] < 1013:
        second.cycle()
        second.reap(wait=True)
        if clock[0] == 1006:
            said = _says(cluster, "p")
        clock[0] += 1
    _stop(second)
    assert [t for t, _, _ in api.calls] == [1000, 1010]
    assert said.startswith("kant: backoff: failure 1 (binding ")
    wait_for(lambda: cluster.node_of("p") == "n0", what="p bound")
    second.scheduler.check_invariants()


# ----------------------------------------------------------------- a gang


def test_a_gang_interrupted_before_and_after_a_restart_fails_at_its_limit_and_stays_failed(
    cluster: Cluster,
) -> None:
    """``interruptionLimitCount: 1``: a node deleted under the gang before a restart and one
    after fail it, as under one shim (the second shim takes the running gang back with the
    count its PodGroup holds); a third shim leaves the pods made again unbound; the PodGroup
    deleted and made again takes the count with it."""
    config = {"queueing": {"requeuing": {"interruptionLimitCount": 1}}}
    for n in ("n0", "n1", "n2", "n3"):
        cluster.node(n)
    cluster.pod_group("g", 2)
    cluster.start_shim(config)
    first = _gang_on_nodes(cluster, "g-0", "g-1")
    cluster.api.delete(f"/api/v1/nodes/{first[0]}")
    wait_for(lambda: not ({"g-0", "g-1"} & set(cluster.pods())), what="both pods gone")
    wait_for(lambda: (_stored(_group(cluster, "g")) or {}).get("interruptions") == 1,
             what="the PodGroup to hold 1 interruption")  # fmt: skip
    _gang_on_nodes(cluster, "g-2", "g-3")
    cluster.stop_shims()
    shim = cluster.start_shim(config)  # (takes the running gang back)
    second = (cluster.node_of("g-2"), cluster.node_of("g-3"))
    cluster.api.delete(f"/api/v1/nodes/{second[0]}")
    wait_for(lambda: not ({"g-2", "g-3"} & set(cluster.pods())), what="both pods gone")
    got = wait_for(lambda: (_stored(_group(cluster, "g")) or {}).get("failed"),
                   what="the PodGroup to say the gang failed")  # fmt: skip
    assert got.startswith("interruption limit 1 reached; last: node")
    assert _stored(_group(cluster, "g"))["interruptions"] == 2  # type: ignore[index]
    cluster.stop_shims()
    shim.scheduler.check_invariants()
    cluster.start_shim(config)
    cluster.pod("g-4", group="g")
    cluster.pod("g-5", group="g")
    _waits(cluster, "g-4", "kant: failed: interruption limit 1 reached; last: node")
    _waits(cluster, "g-5", "failed")
    # the group deleted and made again is a new gang: its count starts from 0
    _delete(cluster, "g-4")
    _delete(cluster, "g-5")
    cluster.api.delete(PG.format(ns=cluster.ns, name="g"))
    cluster.pod_group("g", 2)
    _gang_on_nodes(cluster, "g-6", "g-7")
    assert _stored(_group(cluster, "g")) is None


def test_a_gangs_stored_failures_are_removed_once_a_job_of_it_succeeds(
    cluster: Cluster,
) -> None:
    """One failed binding is stored on the PodGroup; once the gang has run to its end, the
    PodGroup holds nothing (the group's next job counts from 0, as under a shim that stayed
    up); a lone pod's stay on the pod, which never runs again."""
    for n in ("n0", "n1", "n2"):
        cluster.node(n)
    cluster.pod_group("g", 2)
    run = {"kant.io/runtime-seconds": "0.2"}
    cluster.pod("g-0", group="g", annotations=run)
    cluster.pod("g-1", group="g", annotations=run)
    cluster.pod("p", annotations=run)
    clock = [1000.0]
    api = _Rejecting(cluster.api, {"g-0", "p"}, clock)
    shim = _driven(cluster, clock, api)
    _run(shim, clock, 1002, cluster)
    if "g-1" not in cluster.pods():  # (as its controller would)
        cluster.pod("g-2", group="g", annotations=run)
    got = _stored(_group(cluster, "g"))
    assert got is not None and (got["attempts"], got["backoffUntil"]) == (1, 1010)
    api.reject.clear()
    _run(shim, clock, 1012, cluster)
    gang = [n for n in cluster.pods() if n.startswith("g-")]
    for name in [*gang, "p"]:
        wait_for(lambda n=name: cluster.pods()[n]["status"].get("phase") == "Succeeded",  # type: ignore[misc]
                 what=f"{name} succeeded")  # fmt: skip
    _run(shim, clock, 1014, cluster)
    _stop(shim)
    assert FAILURES_ANNOTATION not in (_group(cluster, "g")["metadata"].get("annotations") or {})
    assert (_stored(cluster.get("p")) or {}).get("attempts") == 1
    shim.scheduler.check_invariants()


# ----------------------------------------------------------------- what users write there


HOSTILE = {
    "not-json": "{not json",
    "wrong-types": '{"attempts": "5", "failed": true}',
    "negative": '{"attempts": -3, "interruptions": -1}',
    "not-finite": '{"attempts": 1, "backoffUntil": NaN}',
    "huge": '{"attempts": 1, "reason": "' + "x" * 20_000 + '"}',
    "deep": "[" * 3000 + "]" * 3000,
}


def test_a_malformed_or_hostile_annotation_is_ignored_and_the_job_counts_from_zero(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Pods and a PodGroup whose ``kant.io/failures`` is not one kant wrote are scheduled as
    new, with one warning each; the first failure of one of them replaces its value with a
    true count (1, not failed). A well-formed value saying the pod failed is obeyed."""
    cluster.node("n0")
    for name, text in HOSTILE.items():
        cluster.pod(name, gpus=1, annotations={FAILURES_ANNOTATION: text})
    by_hand = '{"attempts": 6, "interruptions": 0, "failed": "retry limit 5 reached; by hand"}'
    cluster.pod("failed", gpus=1, annotations={FAILURES_ANNOTATION: by_hand})
    cluster.api.post(
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups",
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "g", "namespace": cluster.ns,
                      "annotations": {FAILURES_ANNOTATION: '{"interruptions": 1e999}'}},
         "spec": {"minMember": 2}},
    )  # fmt: skip
    cluster.pod("g-0", gpus=1, group="g")
    cluster.pod("g-1", gpus=1, group="g")
    clock = [1000.0]
    api = _Rejecting(cluster.api, {"not-json"}, clock)
    with caplog.at_level(logging.WARNING, logger="kant.k8s.shim"):
        shim = _driven(cluster, clock, api)
        _run(shim, clock, 1002, cluster)
        api.reject.clear()
        _run(shim, clock, 1012, cluster)
    _stop(shim)
    ignored = [
        r.getMessage() for r in caplog.records if "ignored: its failures count" in r.getMessage()
    ]
    assert len(ignored) == len(HOSTILE) + 1, ignored
    assert all(len(m) < 2000 for m in ignored)  # (a huge value is not logged whole)
    for name in [*HOSTILE, "g-0", "g-1"]:
        assert cluster.node_of(name) == "n0", name
    assert [t for t, name, _ in api.calls if name == "not-json"] == [1000, 1010]
    got = _stored(cluster.get("not-json"))
    assert got is not None and (got["attempts"], got["interruptions"]) == (1, 0)
    assert got["backoffUntil"] == 1010 and "failed" not in got
    assert cluster.node_of("failed") is None
    assert _says(cluster, "failed") == "kant: failed: retry limit 5 reached; by hand"
    shim.scheduler.check_invariants()


def test_a_write_refused_by_the_api_server_is_logged_and_the_shim_goes_on(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The pod's annotation cannot be written (the server refuses every patch of pods): the
    shim logs it, keeps counting in memory, and fails the pod at the limit as before."""
    cluster.node("n0")
    cluster.pod("p")
    clock = [1000.0]

    class _NoPatch(_Rejecting):
        def patch(self, path: str, body: Any, *, kind: str = "merge") -> Any:
            if "/pods/" in path and "metadata" in body:
                raise ApiError(403, "PATCH", path, '{"reason": "Forbidden", "message": "no"}')
            return self.api.patch(path, body, kind=kind)

    api = _NoPatch(cluster.api, {"p"}, clock)
    with caplog.at_level(logging.WARNING, logger="kant.k8s.shim"):
        shim = _driven(cluster, clock, api)
        _run(shim, clock, 1320)
    _stop(shim)
    assert [t - 1000 for t, _, _ in api.calls] == RETRIES
    assert _stored(cluster.get("p")) is None
    assert any("storing the failures of" in r.getMessage() for r in caplog.records)
    assert _says(cluster, "p").startswith("kant: failed: retry limit 5 reached")
