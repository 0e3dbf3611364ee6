"""Simulation inputs: trace loaders and seeded synthetic workloads.

The discrete-event simulator itself comes with the scheduling cycle; this package already
provides what it will replay: :mod:`kant.sim.traces` (Alibaba openb, Philly, SWF) and
:mod:`kant.sim.workloads` (the Kant paper's training and inference clusters).
"""

from kant.sim.traces import (
    JobTrace,
    OpenbPod,
    OpenbPodList,
    TraceReport,
    gang_roles,
    load_openb_jobs,
    load_openb_nodes,
    load_openb_pods,
    load_philly_jobs,
    load_swf_jobs,
    trace_dir,
)
from kant.sim.workloads import (
    INFERENCE_POOLS,
    INFERENCE_TENANTS,
    TRAINING_SIZES,
    WorkloadStats,
    describe_workload,
    inference_cluster_nodes,
    inference_workload,
    paper_training_workload,
    tenant_quotas,
)

__all__ = [
    "INFERENCE_POOLS",
    "INFERENCE_TENANTS",
    "TRAINING_SIZES",
    "JobTrace",
    "OpenbPod",
    "OpenbPodList",
    "TraceReport",
    "WorkloadStats",
    "describe_workload",
    "gang_roles",
    "inference_cluster_nodes",
    "inference_workload",
    "load_openb_jobs",
    "load_openb_nodes",
    "load_openb_pods",
    "load_philly_jobs",
    "load_swf_jobs",
    "paper_training_workload",
    "tenant_quotas",
    "trace_dir",
]
