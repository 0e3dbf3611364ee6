"""The failure history the shim keeps on the cluster's objects, so that a shim started anew
(a restart, a change of leader) carries on a job's failures instead of counting from 0.

A gang's history is the annotation :data:`FAILURES_ANNOTATION` on its PodGroup, a lone pod's
the same annotation on the pod itself. Its value is a small JSON object::

    {"attempts": 2, "interruptions": 0, "backoffUntil": 1718000030.5,
     "reason": "failure 2 (binding t/p to n0: 400 ...); retry at 1.718e+09"}
    {"attempts": 0, "interruptions": 2,
     "failed": "interruption limit 1 reached; last: node n3 was deleted"}

``attempts`` (failed bindings or starts) and ``interruptions`` (the cluster took the running
job's pods) are integers from 0 to :data:`MAX_COUNT`; ``backoffUntil`` (present while a
failure's backoff may last) is when that backoff ends, in seconds since the Unix epoch on the
writing shim's clock; ``reason`` is kant's ``backoff`` reason, shown while the backoff lasts;
``failed`` (present once the job failed: no retry left) is kant's ``failed`` reason. Other
keys are ignored (a later shim may add some).

:func:`parse_failures` reads a value and refuses anything else (not JSON, not an object, a
wrong type, a negative, non-finite or out-of-range number, a string that is too long or not
encodable) with :class:`~kant.errors.InvalidObjectError`, never another exception: the shim
then ignores the annotation with a warning and counts from 0. :func:`format_failures` writes
one (its output always parses back to the same numbers), and :func:`resume` makes a history
read from an annotation fit the clock and limits of the shim that reads it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import attrs

from kant.errors import InvalidObjectError
from kant.model import Reason, ReasonCode, is_int, is_number
from kant.queueing import Backoff, FailureHistory

FAILURES_ANNOTATION: Final = "kant.io/failures"

MAX_ANNOTATION_BYTES: Final = 4096
"""The most bytes (UTF-8) of an annotation value read; a longer one is ignored unread."""

MAX_MESSAGE_CHARS: Final = 512
"""A reason is written cut to this many characters (so a value stays far below
:data:`MAX_ANNOTATION_BYTES`, whatever the characters)."""

MAX_COUNT: Final = 1_000_000
"""The largest ``attempts`` or ``interruptions`` read (far past any sensible limit)."""

MAX_TIME: Final = 1e11
"""The latest ``backoffUntil`` read (seconds since the epoch: year 5138)."""


def _refuse(value: object, why: str, where: str | None) -> InvalidObjectError:
    return InvalidObjectError(FAILURES_ANNOTATION, value, why, where=where)


def _count(doc: dict[str, Any], key: str, where: str | None) -> int:
    v = doc.get(key, 0)
    if not is_int(v) or not 0 <= v <= MAX_COUNT:
        raise _refuse(v, f"{key} must be an integer in 0..{MAX_COUNT}", where)
    return int(v)


def _message(doc: dict[str, Any], key: str, where: str | None) -> str | None:
    v = doc.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise _refuse(v, f"{key} must be a string", where)
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(v, f"{key} must be text (it holds a lone surrogate)", where) from None
    return v


def parse_failures(text: object, *, where: str | None = None) -> FailureHistory:
    """The history an annotation value says (``where``: the object, for the error), or
    :class:`~kant.errors.InvalidObjectError` for anything that is not such a value (see the
    module docstring); no other exception, whatever ``text`` is."""
    if not isinstance(text, str):
        raise _refuse(type(text).__name__, "must be a string", where)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise _refuse(text, "must be text (it holds a lone surrogate)", where) from None
    if size > MAX_ANNOTATION_BYTES:
        raise _refuse(f"{size} bytes", f"is longer than {MAX_ANNOTATION_BYTES} bytes", where)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # (RecursionError: nested too deep)
        raise _refuse(text, "is not JSON", where) from None
    if not isinstance(doc, dict):
        raise _refuse(text, "must be a JSON object", where)
    attempts = _count(doc, "attempts", where)
    interruptions = _count(doc, "interruptions", where)
    until = doc.get("backoffUntil")
    if until is None:
        until = -math.inf
    elif not is_number(until) or not (0 <= until <= MAX_TIME):  # (refuses NaN too)
        raise _refuse(until, f"backoffUntil must be a number of seconds in 0..{MAX_TIME:g}", where)
    backoff = _message(doc, "reason", where)
    failed = _message(doc, "failed", where)
    if failed is not None:
        reason: Reason | None = Reason(code=ReasonCode.FAILED, message=failed)
    elif backoff is not None:
        reason = Reason(code=ReasonCode.BACKOFF, message=backoff)
    else:
        reason = None
    return FailureHistory(
        attempts=attempts,
        interruptions=interruptions,
        backoff_until=float(until),
        reason=reason,
        failed=failed is not None,
    )


def format_failures(h: FailureHistory) -> str:
    """The annotation value of ``h`` (compact JSON; a reason cut to
    :data:`MAX_MESSAGE_CHARS` characters; a backoff end rounded to the millisecond)."""
    doc: dict[str, Any] = {"attempts": h.attempts, "interruptions": h.interruptions}
    if math.isfinite(h.backoff_until) and h.backoff_until > 0:
        doc["backoffUntil"] = min(round(h.backoff_until, 3), MAX_TIME)
    r = h.reason
    if h.failed:
        doc["failed"] = (r.message if r is not None else "")[:MAX_MESSAGE_CHARS]
    elif r is not None and r.code is ReasonCode.BACKOFF:
        doc["reason"] = r.message[:MAX_MESSAGE_CHARS]
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def resume(h: FailureHistory, now: float, backoff: Backoff) -> FailureHistory:
    """``h``, read from an annotation, as the shim reading it at ``now`` carries it on: the
    backoff left is at most the one of its last failure (``backoff.delay(attempts)``: a
    writer whose clock ran ahead, or a value written by hand, cannot hold a job longer), its
    reason dropped when that cut its backoff (the time it names no longer holds), and a count
    past this shim's limits (lowered meanwhile) makes it failed, saying so."""
    until = min(h.backoff_until, now + backoff.delay(h.attempts))
    out = attrs.evolve(h, backoff_until=until)
    if until != h.backoff_until and not h.failed:
        out = attrs.evolve(out, reason=None)
    if h.failed:
        return out
    why = None
    if backoff.exhausted(h.attempts):
        why = f"retry limit {backoff.max_retries} reached ({h.attempts} failures carried over)"
    elif backoff.interruptions_exhausted(h.interruptions):
        why = (
            f"interruption limit {backoff.max_interruptions} reached ({h.interruptions} "
            "interruptions carried over)"
        )
    if why is not None:
        out = attrs.evolve(out, failed=True, reason=Reason(code=ReasonCode.FAILED, message=why))
    return out


__all__ = [
    "FAILURES_ANNOTATION",
    "MAX_ANNOTATION_BYTES",
    "MAX_COUNT",
    "MAX_MESSAGE_CHARS",
    "MAX_TIME",
    "format_failures",
    "parse_failures",
    "resume",
]
