"""Simulation: the discrete-event simulator, scenarios, trace readers, workloads, the
analysis and reports of results, and the packing protocol.

- :mod:`kant.sim.simulator`: :class:`Simulator` drives a :class:`kant.scheduler.Scheduler` as an
  orchestrator would (arrivals, cycles, finishes, preemption with a grace period, node
  failures) and returns a :class:`SimResult` (job records, GAR / SOR / GFR series, JWTD and
  JTTED). See ``docs/simulator.md``.
- :mod:`kant.sim.scenarios`: built-in scenarios (``paper-training``, ``inference``), trace
  scenarios and :class:`PolicySet` (queueing + placement + preemption by name).
- :mod:`kant.sim.analysis`: what is computed from results (run and comparison summaries,
  the paper's experiments, seed sweeps); :mod:`kant.sim.report`: how they are shown (text
  tables, report folders with JSON / CSV, plots). The ``kant simulate`` and ``kant compare``
  commands are in :mod:`kant.cli`.
- :mod:`kant.sim.traces` (one reader per family: Alibaba openb pods and nodes, Philly, SWF)
  and :mod:`kant.sim.workloads` (the Kant paper's training and inference clusters): what the
  simulator replays.
- :mod:`kant.sim.packing`: the FGD packing protocol on openb traces (``kant packing``; not
  imported here).
"""

from kant.sim.scenarios import (
    COMPARE_SETS,
    SCENARIOS,
    PolicySet,
    Scenario,
    make_scenario,
    run_scenario,
    trace_scenario,
)
from kant.sim.simulator import (
    EstimateAccuracy,
    EventKind,
    Progress,
    SimConfig,
    SimResult,
    Simulator,
    Summary,
    TraceEvent,
    estimate_accuracy,
)
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
    openb_nodes,
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
    "COMPARE_SETS",
    "INFERENCE_POOLS",
    "INFERENCE_TENANTS",
    "SCENARIOS",
    "TRAINING_SIZES",
    "EstimateAccuracy",
    "EventKind",
    "JobTrace",
    "OpenbPod",
    "OpenbPodList",
    "PolicySet",
    "Progress",
    "Scenario",
    "SimConfig",
    "SimResult",
    "Simulator",
    "Summary",
    "TraceEvent",
    "TraceReport",
    "WorkloadStats",
    "describe_workload",
    "estimate_accuracy",
    "gang_roles",
    "inference_cluster_nodes",
    "inference_workload",
    "load_openb_jobs",
    "load_openb_nodes",
    "load_openb_pods",
    "load_philly_jobs",
    "load_swf_jobs",
    "make_scenario",
    "openb_nodes",
    "paper_training_workload",
    "run_scenario",
    "tenant_quotas",
    "trace_dir",
    "trace_scenario",
]
