"""QSCH queueing: tenant queues, the global order, queueing policies and requeue backoff
(paper 3.2.2 and 3.2.4). See ``docs/qsch.md``."""

from kant.contracts import GO, CycleContext, Gate, PolicyRun, QueueingPolicy, Reservation
from kant.queueing.backfill import Backfill
from kant.queueing.backoff import Backoff
from kant.queueing.best_effort import BestEffortFIFO
from kant.queueing.conservative import ConservativeBackfill
from kant.queueing.easy import EasyBackfill
from kant.queueing.order import ORDER_KEYS, larger_first_order, paper_order
from kant.queueing.policies import POLICIES, as_policy, make_policy, policy_names, register_policy
from kant.queueing.queue import Entry, FailureHistory, JobPhase, JobStatus, Nomination, Queue
from kant.queueing.strict_fifo import StrictFIFO

__all__ = [
    "GO",
    "ORDER_KEYS",
    "POLICIES",
    "Backfill",
    "Backoff",
    "BestEffortFIFO",
    "ConservativeBackfill",
    "CycleContext",
    "EasyBackfill",
    "Entry",
    "FailureHistory",
    "Gate",
    "JobPhase",
    "JobStatus",
    "Nomination",
    "PolicyRun",
    "Queue",
    "QueueingPolicy",
    "Reservation",
    "StrictFIFO",
    "as_policy",
    "larger_first_order",
    "make_policy",
    "paper_order",
    "policy_names",
    "register_policy",
]
