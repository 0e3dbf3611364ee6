"""QSCH queueing: tenant queues, the global order, queueing policies and requeue backoff
(paper 3.2.2 and 3.2.4). See ``docs/qsch.md``."""

from kant.queueing.policies import (
    GO,
    RESOURCE_CODES,
    Backfill,
    BestEffortFIFO,
    CycleContext,
    EasyBackfill,
    Gate,
    PolicyRun,
    QueueingPolicy,
    StrictFIFO,
    make_policy,
    policy_names,
    register_policy,
)
from kant.queueing.queue import Backoff, Entry, JobPhase, JobStatus, Nomination, Queue

__all__ = [
    "GO",
    "RESOURCE_CODES",
    "Backfill",
    "Backoff",
    "BestEffortFIFO",
    "CycleContext",
    "EasyBackfill",
    "Entry",
    "Gate",
    "JobPhase",
    "JobStatus",
    "Nomination",
    "PolicyRun",
    "Queue",
    "QueueingPolicy",
    "StrictFIFO",
    "make_policy",
    "policy_names",
    "register_policy",
]
