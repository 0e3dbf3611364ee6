"""Queueing policies (paper 3.2.2, Table 1) and EASY backfill, chosen by name.

A policy (:class:`kant.contracts.QueueingPolicy`) begins a :class:`kant.contracts.PolicyRun`
once per cycle; the cycle asks the run, for each waiting job in the global order, whether to
try it (:meth:`~kant.contracts.PolicyRun.gate`) and, when it was not placed, what to tell
users (``explain``) and whether it may preempt backfilled jobs (``failed``).

Which failures block: a capacity failure (:data:`kant.model.BLOCKING_CODES`) makes a job the
blocked head of the global queue. A quota failure (``QUOTA_EXCEEDED``) only concerns its
tenant: under Strict FIFO it blocks the rest of that tenant's queue, and it never makes a
global head (static quota admission comes before the global queue in the paper). ``NO_POOL``
(unresolvable) and ``BACKOFF`` never block.

Built-ins, by registry name (:data:`POLICIES`), one module each:

``strict-fifo``       :class:`~kant.queueing.strict_fifo.StrictFIFO`
``best-effort-fifo``  :class:`~kant.queueing.best_effort.BestEffortFIFO`
``backfill``          :class:`~kant.queueing.backfill.Backfill`
``easy-backfill``     :class:`~kant.queueing.easy.EasyBackfill`
``conservative-backfill`` :class:`~kant.queueing.conservative.ConservativeBackfill`
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kant.contracts import QueueingPolicy
from kant.queueing.backfill import Backfill
from kant.queueing.best_effort import BestEffortFIFO
from kant.queueing.conservative import ConservativeBackfill
from kant.queueing.easy import EasyBackfill
from kant.queueing.strict_fifo import StrictFIFO
from kant.registry import Registry

POLICIES: Registry[QueueingPolicy] = Registry("queueing")
"""Queueing policies by name; :func:`register_policy` adds one."""


def register_policy(name: str, factory: Callable[..., QueueingPolicy]) -> None:
    """Register a queueing policy factory under ``name``; a taken name raises DuplicateError."""
    POLICIES.register(name, factory)


def make_policy(name: str, **options: Any) -> QueueingPolicy:
    """Build a registered policy: ``make_policy("backfill", threshold=600)``."""
    return POLICIES.build(name, **options)


def policy_names() -> list[str]:
    """Every registered queueing policy name, sorted."""
    return POLICIES.names()


def as_policy(policy: QueueingPolicy | str) -> QueueingPolicy:
    """A policy object from an object or a registered name."""
    return make_policy(policy) if isinstance(policy, str) else policy


register_policy("strict-fifo", StrictFIFO)
register_policy("best-effort-fifo", BestEffortFIFO)
register_policy("backfill", Backfill)
register_policy("easy-backfill", EasyBackfill)
register_policy("conservative-backfill", ConservativeBackfill)
