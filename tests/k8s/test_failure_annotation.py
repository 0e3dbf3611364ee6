"""The ``kant.io/failures`` annotation read and written (``kant.k8s.failures``), without an
API server: what the shim writes reads back as the same failures; anything else a user or
another program may put there is refused with an ``InvalidObjectError`` (the shim then
ignores it and counts from 0), never with another exception; and a history read is carried
on within the reading shim's clock and limits."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.config import parse_config
from kant.errors import InvalidObjectError
from kant.k8s.failures import (
    FAILURES_ANNOTATION,
    MAX_ANNOTATION_BYTES,
    MAX_COUNT,
    MAX_MESSAGE_CHARS,
    format_failures,
    parse_failures,
    resume,
)
from kant.k8s.shim import Shim
from kant.model import Reason, ReasonCode
from kant.queueing import Backoff, FailureHistory


def test_a_backoff_history_reads_back_as_written() -> None:
    r = Reason(
        code=ReasonCode.BACKOFF, message="failure 2 (binding t/p to n0: 400 no); retry at 1030"
    )
    h = FailureHistory(attempts=2, interruptions=1, backoff_until=1030.25, reason=r)
    text = format_failures(h)
    assert json.loads(text) == {
        "attempts": 2, "interruptions": 1, "backoffUntil": 1030.25, "reason": r.message,
    }  # fmt: skip
    assert parse_failures(text) == h


def test_a_failed_history_reads_back_failed_with_its_reason() -> None:
    r = Reason(code=ReasonCode.FAILED, message="interruption limit 1 reached; last: node n3")
    h = FailureHistory(interruptions=2, reason=r, failed=True)
    text = format_failures(h)
    assert json.loads(text) == {"attempts": 0, "interruptions": 2, "failed": r.message}
    assert parse_failures(text) == h


def test_only_a_backoff_or_failed_reason_is_written_and_a_long_one_is_cut() -> None:
    other = Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message="16 GPUs needed")
    assert "reason" not in json.loads(format_failures(FailureHistory(attempts=1, reason=other)))
    long = Reason(code=ReasonCode.BACKOFF, message="\u00e9" * 5000)
    text = format_failures(FailureHistory(attempts=1, backoff_until=5.0, reason=long))
    assert len(json.loads(text)["reason"]) == MAX_MESSAGE_CHARS
    assert len(text.encode()) <= MAX_ANNOTATION_BYTES
    assert parse_failures(text).attempts == 1


def test_unknown_keys_are_ignored() -> None:
    h = parse_failures('{"attempts": 1, "interruptions": 0, "by": "kant 9", "more": [1, 2]}')
    assert (h.attempts, h.interruptions, h.failed) == (1, 0, False)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{not json",
        "[]",
        "3",
        "null",
        '"text"',
        "NaN",
        '{"attempts": -1}',
        '{"attempts": 1.0}',
        '{"attempts": true}',
        '{"attempts": "2"}',
        '{"attempts": null}',
        f'{{"attempts": {MAX_COUNT + 1}}}',
        '{"interruptions": -5}',
        '{"interruptions": 1e400}',
        '{"backoffUntil": NaN}',
        '{"backoffUntil": Infinity}',
        '{"backoffUntil": -Infinity}',
        '{"backoffUntil": -1}',
        '{"backoffUntil": 1e300}',
        '{"backoffUntil": "2024-01-01T00:00:00Z"}',
        '{"reason": 5}',
        '{"failed": true}',
        '{"failed": ["no"]}',
        '{"reason": "\\ud800"}',
        '{"attempts": ' + "9" * 4000 + "}",
        "[" * 2000 + "]" * 2000,
        '{"a":' * 800 + "1" + "}" * 800,
        '{"reason": "' + "x" * MAX_ANNOTATION_BYTES + '"}',
        "\ud800",
    ],
)
def test_a_malformed_oversized_or_hostile_value_is_refused(text: str) -> None:
    with pytest.raises(InvalidObjectError, match=r"kant\.io/failures"):
        parse_failures(text, where="Pod ns/p")


def test_a_value_that_is_not_a_string_is_refused() -> None:
    for v in (None, 3, {"attempts": 1}, b"{}"):
        with pytest.raises(InvalidObjectError):
            parse_failures(v)


def _valid(h: FailureHistory) -> None:
    """What a parsed history must be: counts in range, a finite backoff end (or none), text."""
    assert type(h.attempts) is int and 0 <= h.attempts <= MAX_COUNT
    assert type(h.interruptions) is int and 0 <= h.interruptions <= MAX_COUNT
    assert h.backoff_until == -math.inf or 0 <= h.backoff_until <= 1e11
    assert h.failed == (h.reason is not None and h.reason.code is ReasonCode.FAILED)
    if h.reason is not None:
        h.reason.message.encode("utf-8")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
keys = st.sampled_from(["attempts", "interruptions", "backoffUntil", "reason", "failed", "x"])
documents = st.dictionaries(keys, json_values, max_size=6).map(lambda d: json.dumps(d))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), documents))
def test_any_text_either_reads_as_valid_failures_or_is_refused_never_raising_else(
    text: str,
) -> None:
    try:
        h = parse_failures(text, where="PodGroup ns/g")
    except InvalidObjectError:
        return
    _valid(h)
    assert parse_failures(format_failures(h)).attempts == h.attempts


messages = st.text(max_size=600)
histories = st.builds(
    FailureHistory,
    attempts=st.integers(0, MAX_COUNT),
    interruptions=st.integers(0, MAX_COUNT),
    backoff_until=st.one_of(st.just(-math.inf), st.floats(1.0, 1e10)),
    reason=st.one_of(
        st.none(), st.builds(Reason, code=st.just(ReasonCode.BACKOFF), message=messages)
    ),
)


@settings(max_examples=200, deadline=None)
@given(histories, st.booleans(), messages)
def test_what_is_written_reads_back_as_the_same_failures(
    h: FailureHistory, failed: bool, why: str
) -> None:
    if failed:
        h = FailureHistory(
            attempts=h.attempts, interruptions=h.interruptions, backoff_until=h.backoff_until,
            reason=Reason(code=ReasonCode.FAILED, message=why), failed=True,
        )  # fmt: skip
    text = format_failures(h)
    assert len(text.encode("utf-8")) <= MAX_ANNOTATION_BYTES
    back = parse_failures(text)
    _valid(back)
    assert (back.attempts, back.interruptions, back.failed) == (h.attempts, h.interruptions, failed)
    assert back.backoff_until == pytest.approx(h.backoff_until, abs=1e-3)
    if h.reason is not None:
        assert back.reason is not None and back.reason.code is h.reason.code
        assert h.reason.message.startswith(back.reason.message)


def test_a_shim_reading_a_backoff_waits_out_only_its_rest_and_never_more_than_one_backoff() -> None:
    b = Backoff()  # 10 s, doubling
    r = Reason(code=ReasonCode.BACKOFF, message="failure 2 (no); retry at 1030")
    h = FailureHistory(attempts=2, backoff_until=1030.0, reason=r)
    assert resume(h, 1025.0, b) == h  # 5 s left, its reason with it
    assert resume(h, 1040.0, b).backoff_until == 1030.0  # over: nothing left to wait
    # the writer's clock ran 100 s ahead of the reader's (or the value was written by hand):
    # at most the 20 s of a second failure, and the time in the reason no longer holds
    ahead = resume(h, 930.0, b)
    assert ahead.backoff_until == 950.0 and ahead.reason is None and ahead.attempts == 2
    assert resume(FailureHistory(attempts=0, backoff_until=5e9), 100.0, b).backoff_until == 100.0


def test_a_count_past_the_readers_limits_reads_as_failed_saying_so() -> None:
    b = Backoff(max_retries=2, max_interruptions=1)
    over = resume(FailureHistory(attempts=3, backoff_until=10.0), 0.0, b)
    assert over.failed and over.reason is not None
    assert over.reason.message == "retry limit 2 reached (3 failures carried over)"
    over = resume(FailureHistory(interruptions=2), 0.0, b)
    assert over.failed and over.reason is not None
    assert over.reason.message.startswith("interruption limit 1 reached")
    assert not resume(FailureHistory(attempts=2, interruptions=1), 0.0, b).failed


# ----------------------------------------------------------------- in the shim


def _pod(name: str, text: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "annotations": {FAILURES_ANNOTATION: text}},
        "spec": {"schedulerName": "kant", "containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=200), documents))
def test_a_shim_taking_in_any_annotation_never_raises_and_keeps_only_valid_failures(
    text: str,
) -> None:
    # a shim starting anew finds the value on a PodGroup and on a lone pod waiting: it takes
    # both in without an API call, and the failures it keeps (if any) are valid ones
    shim = Shim(None, parse_config({}), clock=lambda: 1000.0)  # type: ignore[arg-type]
    try:
        shim.handle("PodGroup", "ADDED", {
            "metadata": {"name": "g", "namespace": "ns", "uid": "u-g",
                         "annotations": {FAILURES_ANNOTATION: text}},
            "spec": {"minMember": 2}})  # fmt: skip
        shim.handle("Pod", "ADDED", _pod("p", text))
        for h in shim._failures.values():
            _valid(h)
        queued = list(shim.scheduler.queue.entries())
        failed = shim._failures.get("pod:ns/p")
        assert len(queued) == (0 if failed is not None and failed.failed else 1)
        shim.scheduler.check_invariants()
    finally:
        shim._pool.shutdown()


def test_the_values_docs_kubernetes_md_shows_read_as_it_says() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    block = re.search(r"### Failure history.*?```json\n(.*?)```", page, flags=re.S)
    assert block is not None
    backoff, failed = (parse_failures(line) for line in block.group(1).splitlines())
    assert (backoff.attempts, backoff.backoff_until, backoff.failed) == (3, 1718000070.0, False)
    assert failed.failed and failed.interruptions == 2
    assert format_failures(failed) == block.group(1).splitlines()[1]


def test_a_podgroup_whose_annotations_are_not_a_mapping_is_taken_in_without_failures() -> None:
    shim = Shim(None, parse_config({}), clock=lambda: 1000.0)  # type: ignore[arg-type]
    try:
        for i, ann in enumerate((["kant.io/failures"], "x", 3)):
            shim.handle("PodGroup", "ADDED", {
                "metadata": {"name": f"g{i}", "namespace": "ns", "annotations": ann},
                "spec": {"minMember": 1}})  # fmt: skip
        assert shim._failures == {} and len(shim._groups) == 3
    finally:
        shim._pool.shutdown()
