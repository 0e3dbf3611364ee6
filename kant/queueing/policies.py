"""Queueing policies (paper 3.2.2, Table 1) and Slurm's EASY backfill, chosen by name.

A policy is a small value with one method, :meth:`QueueingPolicy.begin`, called once per
cycle; it returns a :class:`PolicyRun` that the cycle asks two questions while it walks the
candidates in the global order:

- :meth:`PolicyRun.gate` before a job is tried: go, skip it with a reason (``BLOCKED``), or go
  and allow it to use resources reserved for the head (EASY);
- :meth:`PolicyRun.failed` after a job could not be placed: the policy records it (Strict FIFO
  blocks what follows, EASY reserves for it) and answers whether this job may preempt
  backfilled jobs (Backfill, once the head has waited past the threshold).

Which failures block: a *resource* failure (``INSUFFICIENT_CAPACITY``, ``NO_FIT``,
``TOPOLOGY``, ``PREEMPTING``) makes a job the blocked head of the global queue. A *quota*
failure (``QUOTA_EXCEEDED``) only concerns its tenant: under Strict FIFO it blocks the rest of
that tenant's queue, and it never makes a global head (static quota admission comes before the
global queue in the paper). ``NO_POOL`` (unresolvable) and ``BACKOFF`` never block.

Built-ins, by registry name:

``strict-fifo``       :class:`StrictFIFO` — the blocked head blocks everyone behind it.
``best-effort-fifo``  :class:`BestEffortFIFO` — later jobs that fit pass a blocked head.
``backfill``          :class:`Backfill` — best effort, and a head blocked for longer than
                      ``threshold`` seconds preempts the jobs that backfilled past it.
``easy-backfill``     :class:`EasyBackfill` — the head gets a reservation (its earliest start
                      from running jobs' expected ends); a later job starts only if it cannot
                      delay that reservation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import attrs

from kant.errors import DuplicateError, InvalidConfigError, UnknownPolicyError
from kant.model import Reason, ReasonCode
from kant.queueing.queue import Entry

RESOURCE_CODES = frozenset(
    {
        ReasonCode.INSUFFICIENT_CAPACITY,
        ReasonCode.NO_FIT,
        ReasonCode.TOPOLOGY,
        ReasonCode.PREEMPTING,
    }
)
"""Failures that make a job the blocked head of the global queue."""


@attrs.frozen(kw_only=True)
class Gate:
    """The policy's answer before a job is tried: ``skip`` it with that reason, or try it;
    ``use_reserved`` lets it use resources held for the head's reservation (EASY: it will
    end before the reserved start)."""

    skip: Reason | None = None
    use_reserved: bool = False


GO = Gate()


class CycleContext(Protocol):
    """What a policy may ask of the running cycle."""

    @property
    def now(self) -> float: ...

    def reserve(self, entry: Entry) -> float | None:
        """Compute and hold the head's reservation; return its reserved start time, or None
        when no reservation can be made from the running jobs' expected ends."""
        ...

    def is_nominated(self, entry: Entry) -> bool:
        """Does the job hold nominated devices (it preempted; its victims are going)?"""
        ...


class PolicyRun(Protocol):
    """One cycle's worth of policy state."""

    def gate(self, entry: Entry) -> Gate: ...

    def failed(self, entry: Entry, reason: Reason) -> bool:
        """Record that ``entry`` was not (fully) placed; True: it may preempt backfilled jobs."""
        ...


@runtime_checkable
class QueueingPolicy(Protocol):
    @property
    def name(self) -> str: ...

    def begin(self, ctx: CycleContext) -> PolicyRun: ...


# --------------------------------------------------------------------------- Strict FIFO


class _StrictRun:
    def __init__(self) -> None:
        self.blocked_by: str | None = None
        self.tenant_blocked: dict[str, str] = {}

    def gate(self, entry: Entry) -> Gate:
        if self.blocked_by is not None:
            return Gate(skip=Reason(code=ReasonCode.BLOCKED, message=f"behind {self.blocked_by}"))
        head = self.tenant_blocked.get(entry.job.tenant)
        if head is not None:
            return Gate(
                skip=Reason(code=ReasonCode.BLOCKED, message=f"behind {head} (tenant quota)")
            )
        return GO

    def failed(self, entry: Entry, reason: Reason) -> bool:
        if reason.code in RESOURCE_CODES:
            self.blocked_by = entry.id
        elif reason.code is ReasonCode.QUOTA_EXCEEDED:
            self.tenant_blocked.setdefault(entry.job.tenant, entry.id)
        return False


@attrs.frozen
class StrictFIFO:
    """Jobs run strictly in queue order: once a job cannot be placed, every job behind it
    waits (``BLOCKED``). Fair and simple; idles resources behind a large head."""

    name: str = "strict-fifo"

    def begin(self, ctx: CycleContext) -> PolicyRun:
        return _StrictRun()


# --------------------------------------------------------------------------- Best-Effort FIFO


class _BestEffortRun:
    def gate(self, entry: Entry) -> Gate:
        return GO

    def failed(self, entry: Entry, reason: Reason) -> bool:
        return False


@attrs.frozen
class BestEffortFIFO:
    """A blocked head does not stop later jobs: any job that fits now is placed. High
    throughput; a large head can starve under a stream of small jobs."""

    name: str = "best-effort-fifo"

    def begin(self, ctx: CycleContext) -> PolicyRun:
        return _BestEffortRun()


# --------------------------------------------------------------------------- Backfill


def _threshold(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
    if not ok or value < 0:
        raise InvalidConfigError(attribute.name, value, "must be a number >= 0")


class _BackfillRun:
    def __init__(self, policy: Backfill, ctx: CycleContext) -> None:
        self.threshold = policy.threshold
        self.now = ctx.now
        self.head: str | None = None

    def gate(self, entry: Entry) -> Gate:
        return GO

    def failed(self, entry: Entry, reason: Reason) -> bool:
        if self.head is not None or reason.code not in RESOURCE_CODES:
            return False
        self.head = entry.id
        return self.now - entry.pending_since >= self.threshold


@attrs.frozen(kw_only=True)
class Backfill:
    """Best effort, but the head (the first job in order that does not fit) may, once it has
    waited ``threshold`` seconds, preempt *backfilled* jobs: running jobs behind it in the
    queue order that started while it was pending."""

    threshold: float = attrs.field(default=3600.0, validator=_threshold)
    name: str = "backfill"

    def begin(self, ctx: CycleContext) -> PolicyRun:
        return _BackfillRun(self, ctx)


# --------------------------------------------------------------------------- EASY backfill


class _EasyRun:
    def __init__(self, policy: EasyBackfill, ctx: CycleContext) -> None:
        self.ctx = ctx
        self.default_runtime = policy.default_runtime
        self.head: Entry | None = None
        self.reserved = False
        self.shadow: float | None = None

    def gate(self, entry: Entry) -> Gate:
        if self.head is not None and not self.reserved:
            # reserve lazily: the head may have preempted meanwhile, and its nomination is
            # then its reservation (the next blocked job becomes the head)
            if self.ctx.is_nominated(self.head):
                self.head = None
            else:
                self.reserved = True
                self.shadow = self.ctx.reserve(self.head)
        if self.shadow is None:
            return GO
        est = entry.job.runtime_estimate
        if est is None:
            est = self.default_runtime
        if est is not None and self.ctx.now + est <= self.shadow:
            return Gate(use_reserved=True)
        return GO

    def failed(self, entry: Entry, reason: Reason) -> bool:
        if self.head is None and reason.code in RESOURCE_CODES:
            self.head = entry
        return False


@attrs.frozen(kw_only=True)
class EasyBackfill:
    """Slurm's EASY backfill. The head (first job in order that does not fit) gets a
    reservation: the placement it would get at the earliest time the running jobs' expected
    ends (start + ``runtime_estimate``) free enough resources. A later job may start if it
    ends before that time (its own estimate), or if it fits without the reserved devices.

    Jobs without an estimate use ``default_runtime``; ``None`` means "unknown": such a
    running job is assumed never to end, and such a waiting job never uses reserved devices.
    If no reservation can be computed at all, the cycle goes on as best effort.
    """

    default_runtime: float | None = attrs.field(default=None)
    name: str = "easy-backfill"

    def __attrs_post_init__(self) -> None:
        d = self.default_runtime
        if d is not None and (
            not isinstance(d, int | float) or isinstance(d, bool) or not math.isfinite(d) or d <= 0
        ):
            raise InvalidConfigError("default_runtime", d, "must be None or a number > 0")

    def begin(self, ctx: CycleContext) -> PolicyRun:
        return _EasyRun(self, ctx)


# --------------------------------------------------------------------------- registry

PolicyFactory = Callable[..., QueueingPolicy]

_REGISTRY: dict[str, PolicyFactory] = {}


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Register a queueing policy factory under ``name``; a taken name raises DuplicateError."""
    if name in _REGISTRY:
        raise DuplicateError(f"queueing policy {name!r} is already registered")
    _REGISTRY[name] = factory


def make_policy(name: str, **options: Any) -> QueueingPolicy:
    """Build a registered policy: ``make_policy("backfill", threshold=600)``."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError("queueing", name, sorted(_REGISTRY)) from None
    return factory(**options)


def policy_names() -> list[str]:
    return sorted(_REGISTRY)


register_policy("strict-fifo", StrictFIFO)
register_policy("best-effort-fifo", BestEffortFIFO)
register_policy("backfill", Backfill)
register_policy("easy-backfill", EasyBackfill)
