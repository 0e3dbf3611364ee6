"""kant: an embeddable scheduler for large AI GPU clusters (the Kant system: QSCH + RSCH).

The curated public API is re-exported here; submodules hold the details::

    from kant import ClusterState, Queue, Admitter, Placer, schedule_cycle, apply
"""

import logging

from kant.admission import Admitter, Quota, QuotaMode
from kant.apply import ApplyReport, apply
from kant.config import KantConfig, load_config
from kant.contracts import Gate, QueueingPolicy, Reservation, Strategy
from kant.cycle import CycleResult, CycleStats, schedule_cycle
from kant.errors import (
    AllocationConflictError,
    DuplicateError,
    InvalidBindingError,
    InvalidClusterFileError,
    InvalidConfigError,
    InvalidConfigFileError,
    InvalidJobError,
    InvalidNodeError,
    InvalidObjectError,
    InvalidResourcesError,
    InvalidTimeError,
    InvalidTopologyError,
    InvalidTraceError,
    InvariantError,
    KantError,
    QuotaExceededError,
    TransactionError,
    UnknownGpuModelError,
    UnknownJobError,
    UnknownNodeError,
    UnknownPodError,
    UnknownPolicyError,
    UnknownTemplateError,
    ValidationError,
)
from kant.estimates import EstimateStatus, StartEstimate
from kant.model import (
    MILLI,
    Binding,
    Job,
    JobKind,
    LinkKind,
    NodeSpec,
    PodId,
    Reason,
    ReasonCode,
    Resources,
    Role,
    Tier,
    TopologyWish,
    Victim,
    VictimReason,
)
from kant.placement import PlacementResult, Placer, make_strategy, strategy_names
from kant.preemption import PreemptionPolicy
from kant.queueing import Backoff, JobPhase, JobStatus, Nomination, Queue, make_policy, policy_names
from kant.registry import BuildContext, Registry
from kant.scheduler import EventReport, Eviction, EvictionCause, Scheduler
from kant.state import ClusterState, Snapshot, Transaction

__version__ = "0.1.0"

# a library logs, never prints: records go nowhere until the application configures logging
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "MILLI",
    "Admitter",
    "AllocationConflictError",
    "ApplyReport",
    "Backoff",
    "Binding",
    "BuildContext",
    "ClusterState",
    "CycleResult",
    "CycleStats",
    "DuplicateError",
    "EstimateStatus",
    "EventReport",
    "Eviction",
    "EvictionCause",
    "Gate",
    "InvalidBindingError",
    "InvalidClusterFileError",
    "InvalidConfigError",
    "InvalidConfigFileError",
    "InvalidJobError",
    "InvalidNodeError",
    "InvalidObjectError",
    "InvalidResourcesError",
    "InvalidTimeError",
    "InvalidTopologyError",
    "InvalidTraceError",
    "InvariantError",
    "Job",
    "JobKind",
    "JobPhase",
    "JobStatus",
    "KantConfig",
    "KantError",
    "LinkKind",
    "NodeSpec",
    "Nomination",
    "PlacementResult",
    "Placer",
    "PodId",
    "PreemptionPolicy",
    "Queue",
    "QueueingPolicy",
    "Quota",
    "QuotaExceededError",
    "QuotaMode",
    "Reason",
    "ReasonCode",
    "Registry",
    "Reservation",
    "Resources",
    "Role",
    "Scheduler",
    "Snapshot",
    "StartEstimate",
    "Strategy",
    "Tier",
    "TopologyWish",
    "Transaction",
    "TransactionError",
    "UnknownGpuModelError",
    "UnknownJobError",
    "UnknownNodeError",
    "UnknownPodError",
    "UnknownPolicyError",
    "UnknownTemplateError",
    "ValidationError",
    "Victim",
    "VictimReason",
    "__version__",
    "apply",
    "load_config",
    "make_policy",
    "make_strategy",
    "policy_names",
    "schedule_cycle",
    "strategy_names",
]
