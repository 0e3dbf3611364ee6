"""kant: an embeddable scheduler for large AI GPU clusters (the Kant system: QSCH + RSCH).

The curated public API is re-exported here; submodules hold the details::

    from kant import ClusterState, Queue, Admitter, Placer, schedule_cycle, apply
"""

from kant.admission import Admitter, PreemptionPolicy, Quota, QuotaMode
from kant.cycle import CycleResult, Scheduler, apply, schedule_cycle
from kant.errors import (
    AllocationConflictError,
    DuplicateError,
    InvalidBindingError,
    InvalidClusterFileError,
    InvalidJobError,
    InvalidNodeError,
    InvalidResourcesError,
    InvalidTopologyError,
    InvalidTraceError,
    KantError,
    TransactionError,
    UnknownGpuModelError,
    UnknownJobError,
    UnknownNodeError,
    UnknownPodError,
    ValidationError,
)
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
from kant.queueing import Backoff, JobPhase, Queue, make_policy, policy_names
from kant.state import ClusterState, Snapshot, Transaction

__version__ = "0.1.0"

__all__ = [
    "MILLI",
    "Admitter",
    "AllocationConflictError",
    "Backoff",
    "Binding",
    "ClusterState",
    "CycleResult",
    "DuplicateError",
    "InvalidBindingError",
    "InvalidClusterFileError",
    "InvalidJobError",
    "InvalidNodeError",
    "InvalidResourcesError",
    "InvalidTopologyError",
    "InvalidTraceError",
    "Job",
    "JobKind",
    "JobPhase",
    "KantError",
    "LinkKind",
    "NodeSpec",
    "PlacementResult",
    "Placer",
    "PodId",
    "PreemptionPolicy",
    "Queue",
    "Quota",
    "QuotaMode",
    "Reason",
    "ReasonCode",
    "Resources",
    "Role",
    "Scheduler",
    "Snapshot",
    "Tier",
    "TopologyWish",
    "Transaction",
    "TransactionError",
    "UnknownGpuModelError",
    "UnknownJobError",
    "UnknownNodeError",
    "UnknownPodError",
    "ValidationError",
    "Victim",
    "VictimReason",
    "__version__",
    "apply",
    "make_policy",
    "make_strategy",
    "policy_names",
    "schedule_cycle",
    "strategy_names",
]
