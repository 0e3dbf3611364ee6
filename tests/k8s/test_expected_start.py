"""Start-time estimates shown in Kubernetes, against the real API server: with
``estimateIntervalSeconds`` set, the shim writes on each waiting pod of the first jobs in
queue order when its job is expected to start (``kant.io/expected-start``, RFC 3339 UTC, or
why there is no time) and when that was computed (``kant.io/expected-start-made-at``), only
when the value changed, within the cycle's status writes, and removes both once the pod is
bound. Off by default: no write. An error inside the estimates never stops scheduling."""

from __future__ import annotations

import contextlib
import copy
import logging
import math
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kant.config import parse_config
from kant.estimates import EstimateStatus, StartEstimate
from kant.k8s.client import ApiError
from kant.k8s.shim import (
    EXPECTED_START_ANNOTATION,
    EXPECTED_START_MADE_AT_ANNOTATION,
    EXPECTED_START_SLACK_SECONDS,
    Shim,
    _steady,
    expected_start_value,
    rfc3339,
)

from .conftest import Cluster, wait_for

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

RUNTIME = "kant.io/runtime-seconds"


def _at(t: float) -> str:
    """Shim time ``t`` (seconds since the epoch) as the annotation writes it."""
    got = rfc3339(t)
    assert got is not None
    return got


class _Driven:
    """A shim driven by the test (no watch, no loop) on ``clock``, noting its writes of the
    expected-start annotations: (pod name, value written, None for a removal)."""

    def __init__(self, cluster: Cluster, config: dict[str, Any], clock: float = 1000.0) -> None:
        self.cluster = cluster
        self.clock = [clock]
        self.writes: list[tuple[str, str | None]] = []
        self.fail_next: list[int] = []  # statuses to answer the next annotation writes with
        # (0: no answer)
        patch = self.raw_patch = cluster.api.patch  # (raw_patch: a write of someone else's)

        def noted(path: str, body: Any, **kw: Any) -> Any:
            ann = (body.get("metadata") or {}).get("annotations") or {}
            if EXPECTED_START_ANNOTATION in ann:
                if self.fail_next:
                    status = self.fail_next.pop(0)
                    if status == 0:
                        raise ConnectionRefusedError("no answer (test)")
                    raise ApiError(status, "PATCH", path, '{"reason": "test"}')
                self.writes.append((path.rsplit("/", 1)[1], ann[EXPECTED_START_ANNOTATION]))
            return patch(path, body, **kw)

        cluster.api.patch = noted  # type: ignore[method-assign]
        self.shim = Shim(cluster.api, parse_config(config), clock=lambda: self.clock[0])
        self.shim.sync()

    def cycle(self, advance: float = 1.0) -> list[tuple[str, str | None]]:
        """One cycle ``advance`` seconds later, its bindings answered: the writes it made."""
        self.clock[0] += advance
        self.writes.clear()
        self.shim.cycle()
        self.shim.reap(wait=True)
        return list(self.writes)

    def finish(self, name: str) -> None:
        """Pod ``name`` ended (as the watch would tell the shim)."""
        self.shim.handle("Pod", "DELETED", self.cluster.get(name))


def _estimates(interval: float = 10.0, **more: Any) -> dict[str, Any]:
    return {"kubernetes": {"estimateIntervalSeconds": interval, **more}}


def _shown(cluster: Cluster, name: str) -> tuple[str | None, str | None]:
    ann = cluster.get(name)["metadata"].get("annotations") or {}
    return ann.get(EXPECTED_START_ANNOTATION), ann.get(EXPECTED_START_MADE_AT_ANNOTATION)


# ----------------------------------------------------------------- values


def test_an_expected_start_is_written_as_an_rfc3339_utc_time_to_the_second() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1_795_000_000.9) == "2026-11-18T11:06:40Z"
    assert rfc3339(float("inf")) is None and rfc3339(1e20) is None
    est = StartEstimate(job_id="j", status=EstimateStatus.EXPECTED, start=1100.5, made_at=1000)
    assert expected_start_value(est) == "1970-01-01T00:18:20Z"


@given(st.floats(min_value=-62135596800, max_value=253402300799.9))
def test_a_written_time_reads_back_as_the_second_it_falls_in(t: float) -> None:
    text = rfc3339(t)
    assert text is not None and text.endswith("Z") and len(text) == 20
    assert datetime.fromisoformat(text).timestamp() == math.floor(t)


@pytest.mark.parametrize(
    "status", [EstimateStatus.NEVER, EstimateStatus.UNKNOWN_END, EstimateStatus.BEYOND_HORIZON]
)
def test_an_estimate_without_a_time_is_written_as_its_status(status: EstimateStatus) -> None:
    est = StartEstimate(job_id="j", status=status, start=None, made_at=1000)
    assert expected_start_value(est) == status.value


def test_an_expected_start_past_what_rfc3339_can_write_is_beyond_the_horizon() -> None:
    est = StartEstimate(job_id="j", status=EstimateStatus.EXPECTED, start=1e20, made_at=1000)
    assert expected_start_value(est) == "beyond_horizon"


# ----------------------------------------------------------------- against the API server


def test_estimates_are_off_by_default_and_nothing_is_written(cluster: Cluster) -> None:
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, {})
    assert d.cycle() == [] and d.cycle(60) == []
    assert cluster.node_of("run") == "n0" and d.shim.estimate_seconds == 0.0
    assert _shown(cluster, "w") == (None, None)


def test_a_job_waiting_behind_a_running_one_is_told_when_it_ends(cluster: Cluster) -> None:
    # one 8-GPU node; "run" takes it for 100 s from 1001, "w" waits for it: expected at 1101
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1101))]
    assert cluster.node_of("run") == "n0"
    assert _shown(cluster, "w") == ("1970-01-01T00:18:21Z", "1970-01-01T00:16:41Z")
    assert _shown(cluster, "run") == (None, None)
    # the next estimates (10 s later) say the same: nothing is written again
    assert [d.cycle() for _ in range(12)] == [[]] * 12
    assert _shown(cluster, "w")[1] == _at(1001)


def test_the_annotation_follows_the_running_jobs_and_goes_once_the_job_binds(
    cluster: Cluster,
) -> None:
    # "r1" runs for 100 s and "r2" for 300 s on one 8-GPU node; "w" needs all of it: 1301.
    # "r2" ends early: "w" now waits for "r1" alone, 1101, written by the next estimates.
    # Once "r1" ends too, "w" binds, and the cycle that binds it removes its annotations
    cluster.node("n0", model="H100")
    cluster.pod("r1", gpus=4, annotations={RUNTIME: "100"})
    cluster.pod("r2", gpus=4, annotations={RUNTIME: "300"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1301))]
    d.finish("r2")
    assert d.cycle(5) == []  # (the interval is not over)
    assert d.cycle(5) == [("w", _at(1101))]
    assert _shown(cluster, "w") == (_at(1101), _at(1011))
    d.finish("r1")
    assert d.cycle() == [("w", None)]
    assert cluster.node_of("w") == "n0"
    assert _shown(cluster, "w") == (None, None)
    assert d.cycle(10) == []


@pytest.mark.parametrize(
    ("running", "waiting", "more", "shown"),
    [
        ({}, 16, {}, "never"),  # more GPUs than the cluster has
        ({"gpus": 8}, 8, {}, "unknown_end"),  # behind a pod without a runtime estimate
        ({"gpus": 8, "annotations": {RUNTIME: "100000"}}, 8,
         {"estimateHorizonSeconds": 3600}, "beyond_horizon"),
    ],
)  # fmt: skip
def test_a_job_without_an_expected_start_is_told_why(
    cluster: Cluster, running: dict[str, Any], waiting: int, more: dict[str, Any], shown: str
) -> None:
    cluster.node("n0", model="H100")
    if running:
        cluster.pod("run", **running)
    cluster.pod("w", gpus=waiting)
    d = _Driven(cluster, _estimates(**more))
    assert d.cycle() == [("w", shown)]
    assert _shown(cluster, "w") == (shown, _at(1001))


def test_only_the_first_jobs_in_queue_order_are_estimated_and_written_within_the_budget(
    cluster: Cluster,
) -> None:
    # "run" holds the node for 100 s; w0..w3 (8 GPUs each) wait in that order. Three jobs
    # are estimated (w3 is not); each waiting pod also needs a condition and an event: with
    # 9 writes a cycle, the first cycle writes those 8 and w0's estimate, the next the rest
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    for i in range(4):
        cluster.pod(f"w{i}", gpus=8, annotations={RUNTIME: "100"})
    d = _Driven(cluster, _estimates(estimateMaxJobs=3, statusWritesPerCycle=9))
    assert d.cycle() == [("w0", _at(1101))]
    assert d.shim.status_writes_due
    assert d.cycle() == [("w1", _at(1201)), ("w2", _at(1301))]
    assert _shown(cluster, "w3") == (None, None)
    assert d.cycle() == []


def test_a_job_no_longer_among_the_first_estimated_loses_its_annotation(
    cluster: Cluster,
) -> None:
    # one job is estimated: "w1" first, then "w0", of a higher priority, comes ahead of it
    # (no preemption: it waits for "run" to end too)
    _priority_class(cluster)
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w1", gpus=8)
    d = _Driven(cluster, {**_estimates(estimateMaxJobs=1), "preemption": {"priority": False}})
    assert d.cycle() == [("w1", _at(1101))]
    d.shim.handle("Pod", "ADDED", _high(cluster, "w0"))
    assert d.cycle(10) == [("w1", None), ("w0", _at(1101))]
    assert _shown(cluster, "w1") == (None, None)


def test_an_error_inside_the_estimates_is_logged_and_scheduling_goes_on(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    real = d.shim.scheduler.start_estimates

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("a bug in the estimates")

    d.shim.scheduler.start_estimates = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="kant.k8s.shim"):
        assert d.cycle() == []
        assert d.cycle(10) == []
    assert "start-time estimates failed (2 passes in a row; the last that worked: none)" in (
        caplog.text
    )
    assert "a bug" in caplog.text and d.shim.estimate_failures == 2
    assert cluster.node_of("run") == "n0"  # (the cycle bound it, and wrote the conditions)
    assert cluster.get("w")["status"]["conditions"][0]["reason"] == "Unschedulable"
    d.shim.scheduler.start_estimates = real  # type: ignore[method-assign]
    assert d.cycle(10) == [("w", _at(1101))]
    assert d.shim.estimate_failures == 0
    d.shim.scheduler.check_invariants()
    # it fails again: the log says when the estimates last worked (the pod's made-at is when
    # its value was first computed, not when it was last checked)
    d.shim.scheduler.start_estimates = broken  # type: ignore[method-assign]
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="kant.k8s.shim"):
        assert d.cycle(10) == []
    assert f"(1 passes in a row; the last that worked: {_at(1021)})" in caplog.text
    assert _shown(cluster, "w") == (_at(1101), _at(1021))


def test_a_queue_where_nothing_happens_is_not_written_at_every_estimates_once_a_job_is_late(
    cluster: Cluster,
) -> None:
    # "run" was expected to end at 1101; it still runs at 1200 and on: w, behind it, is
    # expected "now" at every estimates (every 10 s), and w2, behind w, 100 s later. w keeps
    # 1101 (past: late) and is not written again; w2 moves with the clock, written once a
    # minute (the slack), not at every estimates
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w2", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1101)), ("w2", _at(1201))]
    assert d.cycle(199) == [("w2", _at(1300))]  # (at 1200: a move of 99 s)
    writes = [w for _ in range(12) for w in d.cycle(10)]  # (1210 to 1320)
    assert writes == [("w2", _at(1360)), ("w2", _at(1420))], writes
    assert _shown(cluster, "w")[0] == _at(1101)


def test_a_small_move_of_the_expected_start_is_not_written_and_a_large_one_is(
    cluster: Cluster,
) -> None:
    # r1 and r2 (4 GPUs each) end at 1301 and 1331: w (8 GPUs) is expected at 1331. r2 is
    # deleted at 1300 and r3 takes its place until 1321: w is expected at 1321, 10 s earlier,
    # under the 60 s slack: not written. r3 is deleted and r4 takes its place until 1451:
    # 120 s later, written
    cluster.node("n0", model="H100")
    cluster.pod("r1", gpus=4, annotations={RUNTIME: "300"})
    cluster.pod("r2", gpus=4, annotations={RUNTIME: "330"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1331))]
    d.finish("r2")
    d.clock[0] = 1300
    d.shim.handle("Pod", "ADDED", cluster.pod("r3", gpus=4, annotations={RUNTIME: "20"}))
    assert d.cycle() == []  # (r3 bound at 1301)
    assert cluster.node_of("r3") == "n0"
    assert d.cycle(10) == []
    assert _shown(cluster, "w")[0] == _at(1331)
    d.finish("r3")
    d.shim.handle("Pod", "ADDED", cluster.pod("r4", gpus=4, annotations={RUNTIME: "130"}))
    assert d.cycle(10) == [("w", _at(1451))]  # (r4 bound at 1321)


def test_a_job_moving_from_in_two_hours_to_in_one_hour_is_written_whatever_the_interval(
    cluster: Cluster,
) -> None:
    # estimates every hour: "run" holds n0 for 2 h, w is told 8201. At 4601 "hp", of a higher
    # priority and 3540 s, has come ahead of w: w now starts at 11741, 59 minutes later, and
    # the estimates of 4601 write it (the slack is 60 s, not the interval)
    _priority_class(cluster)
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "7200"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, {**_estimates(3600), "preemption": {"priority": False}})
    assert d.cycle() == [("w", _at(8201))]
    d.clock[0] = 4600
    d.shim.handle("Pod", "ADDED", _high(cluster, "hp", {RUNTIME: "3540"}))
    assert d.cycle() == [("hp", _at(8201)), ("w", _at(11741))]


def test_a_past_time_means_the_job_is_expected_about_now_not_that_it_is_late() -> None:
    # w carries 1101; at 1101 it is expected at 1150 (what it waits for ends at 1150, on
    # time): within the slack, it keeps 1101. An hour's move is written, a past time too
    # once the estimate is a minute or more ahead of now
    assert _steady(_at(1101), _at(1150), 1150, 1101)
    assert not _steady(_at(1101), _at(8540), 8540, 5000)
    assert not _steady(_at(1101), _at(1161), 1161, 1101)
    assert _steady(_at(1101), _at(1200), 1200, 1141)  # (late: it says "now" again)


def test_a_value_changed_by_hand_is_written_over_only_when_it_is_off_by_the_slack() -> None:
    # the estimate is 1101 at 1050: a hand edit to 1130 stays, to 1200 or "soon" is
    # written over (a made-at changed alone is not compared: it stays too)
    assert _steady(_at(1130), _at(1101), 1101, 1050)
    assert not _steady(_at(1200), _at(1101), 1101, 1050)
    assert not _steady("soon", _at(1101), 1101, 1050)
    assert not _steady(None, _at(1101), 1101, 1050)  # (removed by hand)


@given(
    st.lists(st.floats(min_value=0, max_value=10_000), min_size=1, max_size=30),
    st.floats(min_value=0, max_value=3600),
)
def test_a_pod_s_expected_start_is_within_the_slack_of_the_estimate_or_it_says_about_now(
    starts: list[float], step: float
) -> None:
    # whatever the estimates say, pass after pass, what a pod carries is within the slack
    # (60 s) of the last estimate, or a past time while the estimate says about now
    slack = EXPECTED_START_SLACK_SECONDS
    carried: str | None = None
    for i, at in enumerate(starts):
        now = 1000 + i * step
        start = max(at, now)  # (an estimate is never before its own time)
        value = _at(start)
        if not _steady(carried, value, start, now):
            carried = value
        assert carried is not None
        was = datetime.fromisoformat(carried).timestamp()
        assert abs(was - start) < slack + 1 or (was <= now and start < now + slack)


def test_the_bind_cycle_removes_the_annotation_even_when_conditions_take_the_budget(
    cluster: Cluster,
) -> None:
    # two writes a cycle; when "run" ends, "w" is bound while "y" (16 GPUs) needs a condition
    # and an event: the removal from w is made by the cycle that binds it all the same
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates(statusWritesPerCycle=2))
    d.cycle()
    d.cycle()
    assert _shown(cluster, "w")[0] == _at(1101)
    d.finish("run")
    d.shim.handle("Pod", "ADDED", cluster.pod("y", gpus=16))  # (a condition and an event)
    assert d.cycle() == [("w", None)]
    assert cluster.node_of("w") == "n0"


def test_every_pod_of_a_gang_is_told_and_loses_it_when_bound(cluster: Cluster) -> None:
    cluster.node("n0", model="H100")
    cluster.node("n1", model="H100")
    cluster.pod("r0", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("r1", gpus=8, annotations={RUNTIME: "200"})
    cluster.pod_group("g", 2)
    cluster.pod("g0", gpus=8, group="g")
    cluster.pod("g1", gpus=8, group="g")
    d = _Driven(cluster, _estimates())
    assert sorted(d.cycle()) == [("g0", _at(1201)), ("g1", _at(1201))]
    d.finish("r0")
    d.finish("r1")
    assert sorted(d.cycle()) == [("g0", None), ("g1", None)]


def test_a_pod_made_again_under_its_name_before_the_write_is_not_written(
    cluster: Cluster,
) -> None:
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates(statusWritesPerCycle=2))
    d.cycle()  # w's condition and event: its estimate is left due
    assert d.shim._expect_due
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/w")
    cluster.pod("w", gpus=8)  # (the shim has not seen either event)
    d.cycle()
    assert _shown(cluster, "w") == (None, None)


def _priority_class(cluster: Cluster) -> None:
    with contextlib.suppress(ApiError):  # (shared by the tests of the session)
        cluster.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                         {"metadata": {"name": "kant-expected-high"}, "value": 10})  # fmt: skip


def _high(cluster: Cluster, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """Pod ``name`` (8 GPUs) of the high class, once admission knows the class."""

    def made() -> dict[str, Any] | None:
        with contextlib.suppress(ApiError):
            return cluster.pod(
                name, gpus=8, priority_class="kant-expected-high", annotations=annotations
            )
        return None

    return wait_for(made, what=f"{name} created")


@pytest.mark.parametrize("answers", [[0], [429], [503, 503], [503, 429]])
def test_removals_stay_ahead_of_values_when_they_are_made_again(
    cluster: Cluster, answers: list[int]
) -> None:
    # one job is estimated: "w1", then "w0" (higher priority) comes ahead: w1's removal and
    # w0's value are due; the removal is answered 429 (the pass ends), or both are answered
    # 503, or 503 then 429: the next cycle makes them, the removal first. A removal not
    # answered (the pass ends too) is tried after the others: the value first
    _priority_class(cluster)
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w1", gpus=8)
    d = _Driven(cluster, {**_estimates(estimateMaxJobs=1), "preemption": {"priority": False}})
    assert d.cycle() == [("w1", _at(1101))]
    d.shim.handle("Pod", "ADDED", _high(cluster, "w0"))
    d.fail_next = list(answers)
    assert d.cycle(10) == [] and d.shim.status_writes_due
    both = [("w1", None), ("w0", _at(1101))]
    assert d.cycle() == (both[::-1] if answers == [0] else both)


def test_a_write_not_answered_ends_the_pass_and_is_made_by_the_next_cycle(
    cluster: Cluster,
) -> None:
    # w0 and w1 wait behind "run": w0's write gets no answer, w1's is not tried (a server
    # down would cost a timeout per pod); the next cycle makes both, w0's (not answered)
    # last
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w0", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w1", gpus=8)
    d = _Driven(cluster, _estimates())
    d.fail_next = [0, 0]
    assert d.cycle() == [] and d.shim.status_writes_due
    assert d.fail_next == [0]  # (w1's was not tried)
    d.fail_next = []
    assert d.cycle() == [("w1", _at(1201)), ("w0", _at(1101))]


def test_a_pod_whose_writes_get_no_answer_holds_the_others_back_one_cycle_at_most(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # w0's writes never get an answer (say a webhook on it slower than the client's
    # timeout), every other write does: the cycle that binds w0 ends its writes at w0's
    # removal; from then on w0's removal is tried after the others, and w1, which came
    # since, is told 2001 by the next estimates all the same
    monkeypatch.setattr(cluster.api, "patch", cluster.api.patch)  # (restored after)
    cluster.node("n0", model="H100")
    cluster.node("n1", model="H100")
    cluster.pod("run0", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("run1", gpus=8, annotations={RUNTIME: "1000"})
    cluster.pod("w0", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w0", _at(1101))]
    noted = cluster.api.patch

    def hangs_on_w0(path: str, body: Any, **kw: Any) -> Any:
        if path.endswith("/w0") and EXPECTED_START_ANNOTATION in body["metadata"].get(
            "annotations", {}
        ):
            raise ConnectionRefusedError("no answer (test)")
        return noted(path, body, **kw)

    cluster.api.patch = hangs_on_w0  # type: ignore[method-assign]
    d.finish("run0")
    assert d.cycle() == [] and d.shim.status_writes_due
    assert cluster.node_of("w0") == "n0"
    d.shim.handle("Pod", "ADDED", cluster.pod("w1", gpus=8))
    assert d.cycle(10) == [("w1", _at(2001))]
    assert d.shim.status_writes_due  # (w0's removal, tried last)
    cluster.api.patch = noted  # type: ignore[method-assign]
    assert d.cycle() == [("w0", None)]
    assert _shown(cluster, "w0") == (None, None)


def test_a_write_answered_503_is_made_again_by_the_next_cycle(cluster: Cluster) -> None:
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    d.fail_next = [503]
    assert d.cycle() == [] and d.shim.status_writes_due
    assert d.cycle() == [("w", _at(1101))]
    assert _shown(cluster, "w") == (_at(1101), _at(1001))


def test_a_write_refused_for_good_is_dropped_and_logged(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    d.fail_next = [403]
    with caplog.at_level(logging.WARNING, logger="kant.k8s.shim"):
        assert d.cycle() == []
    assert "expected start on" in caplog.text and not d.shim.status_writes_due
    assert d.cycle() == []  # (not tried again before the next estimates)
    assert d.cycle(10) == [("w", _at(1101))]


def test_a_pod_whose_new_value_was_refused_does_not_keep_its_old_one_once_bound(
    cluster: Cluster,
) -> None:
    # w is told 1301 (r1 100 s, r2 300 s); r2 ends early: the new value (1101) is refused
    # once (403, say an admission policy); then r1 ends and w is bound. The pod still
    # carries 1301 (the refused write changed nothing), so the bind cycle removes it
    cluster.node("n0", model="H100")
    cluster.pod("r1", gpus=4, annotations={RUNTIME: "100"})
    cluster.pod("r2", gpus=4, annotations={RUNTIME: "300"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1301))]
    d.finish("r2")
    d.fail_next = [403]
    assert d.cycle(10) == []  # (refused)
    assert _shown(cluster, "w")[0] == _at(1301)
    d.finish("r1")
    assert d.cycle() == [("w", None)]
    assert cluster.node_of("w") == "n0"
    assert _shown(cluster, "w") == (None, None)


@pytest.mark.parametrize("status", [403, 400, 401, 408, 409, 429, 500])
def test_a_removal_refused_or_not_taken_is_made_again(cluster: Cluster, status: int) -> None:
    # the bind cycle's removal is refused (403, 400: by the next estimates) or not taken
    # (401, 408, 409, 429, 5xx: by the next cycle); a running pod never keeps its value
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1101))]
    d.finish("run")
    d.fail_next = [status]
    assert d.cycle() == []
    assert cluster.node_of("w") == "n0"
    again = d.cycle() + d.cycle(10)
    assert again == [("w", None)]
    assert _shown(cluster, "w") == (None, None)


@pytest.mark.parametrize("status", [429, 503])
def test_bind_removals_not_taken_are_made_again_within_the_budget_and_do_not_pile_up(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    # one write a cycle; w0..w3 carry their values and bind one a cycle while the server
    # answers every expected-start write 429 (busy) or 503: each cycle tries its own
    # binding's removal and, within the budget, one other (429 ends the pass at the first)
    monkeypatch.setattr(cluster.api, "patch", cluster.api.patch)  # (restored after)
    for i in range(4):
        cluster.node(f"n{i}", model="H100")
        cluster.pod(f"r{i}", gpus=8, annotations={RUNTIME: str(100 * (i + 1))})
    for i in range(4):
        cluster.pod(f"w{i}", gpus=8)
    d = _Driven(cluster, _estimates(3600, statusWritesPerCycle=1))
    for _ in range(30):
        d.cycle()
    assert all(_shown(cluster, f"w{i}")[0] for i in range(4))
    tried: list[str] = []
    noted = cluster.api.patch

    def counted(path: str, body: Any, **kw: Any) -> Any:
        if EXPECTED_START_ANNOTATION in body["metadata"].get("annotations", {}):
            tried.append(path.rsplit("/", 1)[1])
        return noted(path, body, **kw)

    cluster.api.patch = counted  # type: ignore[method-assign]
    per_cycle = []
    for i in range(4):
        d.finish(f"r{i}")
        d.fail_next = [status] * 50
        tried.clear()
        assert d.cycle() == []
        assert cluster.node_of(f"w{i}") == f"n{i}"
        per_cycle.append(len(tried))
    assert per_cycle == ([1] * 4 if status == 429 else [1, 2, 2, 2]), per_cycle
    d.fail_next = []
    assert sorted(w for _ in range(4) for w in d.cycle()) == [(f"w{i}", None) for i in range(4)]


def test_what_the_watch_shows_a_pod_carries_is_what_the_shim_holds_it_carries(
    cluster: Cluster,
) -> None:
    # someone removes w's annotations by hand: the next estimates write them again; someone
    # writes another value: the next estimates write theirs over it
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1101))]
    path = f"/api/v1/namespaces/{cluster.ns}/pods/w"
    d.raw_patch(
        path,
        {
            "metadata": {
                "annotations": {
                    EXPECTED_START_ANNOTATION: None,
                    EXPECTED_START_MADE_AT_ANNOTATION: None,
                }
            }
        },
    )
    d.shim.handle("Pod", "MODIFIED", cluster.get("w"))
    assert d.cycle(10) == [("w", _at(1101))]
    d.raw_patch(path, {"metadata": {"annotations": {EXPECTED_START_ANNOTATION: "soon"}}})
    d.shim.handle("Pod", "MODIFIED", cluster.get("w"))
    assert d.cycle(10) == [("w", _at(1101))]
    assert _shown(cluster, "w") == (_at(1101), _at(1021))


def test_a_watch_event_older_than_the_shim_s_write_does_not_skip_the_bind_removal(
    cluster: Cluster,
) -> None:
    # w is told 1101; then an event from before that write (w without the annotation)
    # reaches the shim; the next cycle binds w: it removes the annotation all the same
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    before = copy.deepcopy(cluster.pod("w", gpus=8))
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1101))]
    d.shim.handle("Pod", "MODIFIED", before)
    d.finish("run")
    assert d.cycle() == [("w", None)]
    assert cluster.node_of("w") == "n0" and _shown(cluster, "w") == (None, None)


def test_a_stale_event_followed_by_the_current_one_costs_no_write(cluster: Cluster) -> None:
    # after the bind cycle removed w's annotation, an event from before the removal (w bound
    # and carrying 1101) comes, then the current one (bound, nothing): nothing is written
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", _at(1101))]
    carried = copy.deepcopy(cluster.get("w")["metadata"]["annotations"])
    d.finish("run")
    assert d.cycle() == [("w", None)]
    current = cluster.get("w")
    stale = copy.deepcopy(current)
    stale["metadata"]["annotations"] = carried
    d.shim.handle("Pod", "MODIFIED", stale)
    d.shim.handle("Pod", "MODIFIED", current)
    assert d.cycle() == [] and d.cycle(10) == []


def test_a_terminating_pod_found_at_startup_is_not_written(cluster: Cluster) -> None:
    # "w" carries an earlier shim's value and is being deleted (a finalizer keeps it): its
    # annotations go with it, no removal is written
    stale = {EXPECTED_START_ANNOTATION: "1970-01-01T00:00:00Z",
             EXPECTED_START_MADE_AT_ANNOTATION: "1970-01-01T00:00:00Z"}  # fmt: skip
    cluster.node("n0", model="H100")
    cluster.pod("w", gpus=8, annotations=stale)
    path = f"/api/v1/namespaces/{cluster.ns}/pods/w"
    cluster.api.patch(path, {"metadata": {"finalizers": ["example.com/grace"]}})
    cluster.api.delete(path)
    try:
        for config in ({}, _estimates()):
            d = _Driven(cluster, config)
            assert d.cycle() == [] and d.cycle(10) == []
            d.shim._pool.shutdown(wait=True)
            cluster.api.patch = d.raw_patch  # type: ignore[method-assign]
    finally:
        cluster.api.patch(path, {"metadata": {"finalizers": None}})


def test_a_pod_bound_by_someone_else_loses_its_annotation_before_the_next_estimates(
    cluster: Cluster,
) -> None:
    # w is told 1101; then someone else binds it (a binding not kant's): the shim holds it
    # as another scheduler's pod, and the next cycle removes its annotation (the next
    # estimates are an hour away)
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    cluster.pod("w", gpus=8)
    d = _Driven(cluster, _estimates(3600))
    assert d.cycle() == [("w", _at(1101))]
    cluster.api.post(
        f"/api/v1/namespaces/{cluster.ns}/pods/w/binding",
        {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "w"},
         "target": {"apiVersion": "v1", "kind": "Node", "name": "n0"}},
    )  # fmt: skip
    d.shim.handle("Pod", "MODIFIED", cluster.get("w"))
    assert d.cycle() == [("w", None)]
    assert _shown(cluster, "w") == (None, None)


def test_the_pods_of_a_cancelled_job_that_wait_for_no_job_lose_their_annotation(
    cluster: Cluster,
) -> None:
    # gang g (minMember 2) is told 1101; g1 is deleted: the job is cancelled, g0 waits for
    # its controller to make g1 again (no kant job, nothing to expect): the next cycle removes
    # g0's annotation; once g1 is back, the next estimates write it again
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100"})
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [] and cluster.node_of("run") == "n0"
    cluster.pod_group("g", 2)
    group = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups/g"
    d.shim.handle("PodGroup", "ADDED", cluster.api.get(group))
    for name in ("g0", "g1"):
        d.shim.handle("Pod", "ADDED", cluster.pod(name, gpus=4, group="g"))
    assert sorted(d.cycle(10)) == [("g0", _at(1101)), ("g1", _at(1101))]
    d.finish("g1")
    cluster.api.delete(f"/api/v1/namespaces/{cluster.ns}/pods/g1", {"gracePeriodSeconds": 0})
    assert d.cycle() == [("g0", None)]
    d.shim.handle("Pod", "ADDED", cluster.pod("g1", gpus=4, group="g"))
    assert sorted(d.cycle(10)) == [("g0", _at(1101)), ("g1", _at(1101))]


def test_annotations_an_earlier_shim_left_are_removed_from_bound_pods_and_when_off(
    cluster: Cluster,
) -> None:
    # "run" carries a stale expected start when the shim binds it; "w" carries one while
    # this shim makes no estimates: both are removed, once each, and nothing else written
    stale = {EXPECTED_START_ANNOTATION: "1970-01-01T00:00:00Z",
             EXPECTED_START_MADE_AT_ANNOTATION: "1970-01-01T00:00:00Z"}  # fmt: skip
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "100", **stale})
    cluster.pod("w", gpus=8, annotations=stale)
    d = _Driven(cluster, {})
    assert sorted(d.cycle()) == [("run", None), ("w", None)]
    assert cluster.node_of("run") == "n0"
    assert _shown(cluster, "run") == _shown(cluster, "w") == (None, None)
    assert d.cycle(60) == []


def test_a_restarted_shim_does_not_write_again_the_value_a_pod_carries(cluster: Cluster) -> None:
    cluster.node("n0", model="H100")
    cluster.pod("w", gpus=16)
    d = _Driven(cluster, _estimates())
    assert d.cycle() == [("w", "never")]
    d.shim._pool.shutdown(wait=True)
    again = _Driven(cluster, _estimates(), clock=d.clock[0] + 30)
    assert again.cycle() == []
    assert _shown(cluster, "w") == ("never", _at(1001))


def test_the_running_shim_shows_the_expected_start_and_removes_it_once_the_pod_runs(
    cluster: Cluster,
) -> None:
    # the shim's own loop, the wall clock, and the fake kubelet ending "run" after 6 s
    cluster.node("n0", model="H100")
    cluster.pod("run", gpus=8, annotations={RUNTIME: "6"})
    cluster.start_shim(_estimates(1.0))
    wait_for(lambda: cluster.node_of("run") == "n0", what="run bound")
    cluster.pod("w", gpus=8)
    shown = wait_for(lambda: _shown(cluster, "w")[0], what="w's expected start")
    at = datetime.strptime(shown, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    started = cluster.get("run")["metadata"]["creationTimestamp"]
    assert 5 <= at - datetime.strptime(started, "%Y-%m-%dT%H:%M:%S%z").timestamp() <= 30
    wait_for(lambda: cluster.node_of("w") == "n0", what="w bound")
    wait_for(lambda: _shown(cluster, "w") == (None, None), what="w's annotations removed")
