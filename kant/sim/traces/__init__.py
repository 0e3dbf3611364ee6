"""Trace readers: real workload traces as :class:`kant.model.Job` lists (and, for the FGD
packing protocol, openb pods and nodes). One module per trace family (column mappings in
``docs/traces.md``):

- :mod:`kant.sim.traces.openb`: Alibaba ``cluster-trace-gpu-v2023`` ("openb") pod lists,
  :func:`load_openb_jobs` (one pod-level, one-pod job per row) and :func:`load_openb_pods`
  (checked :class:`OpenbPod` records), and node lists, :func:`openb_nodes` (a cluster
  description) and :func:`load_openb_nodes` (its nodes);
- :mod:`kant.sim.traces.philly`: the Microsoft Philly per-job table as extracted by Pollux,
  :func:`load_philly_jobs`;
- :mod:`kant.sim.traces.swf`: Standard Workload Format logs of the Parallel Workloads Archive
  (plain or gzip), :func:`load_swf_jobs`;
- :mod:`kant.sim.traces.common`: the load report (:class:`TraceReport`), the job list
  (:class:`JobTrace`), the row loop and its error modes (``errors="raise"`` or ``"skip"``),
  :func:`gang_roles` and :func:`trace_dir`.
"""

from kant.sim.traces.common import (
    ErrorMode,
    JobTrace,
    PathLike,
    TraceReport,
    gang_roles,
    trace_dir,
)
from kant.sim.traces.openb import (
    OPENB_NODE_COLUMNS,
    OPENB_OPTIONAL,
    OPENB_REQUIRED,
    OpenbPod,
    OpenbPodList,
    load_openb_jobs,
    load_openb_nodes,
    load_openb_pods,
    openb_nodes,
)
from kant.sim.traces.philly import PHILLY_COLUMNS, load_philly_jobs
from kant.sim.traces.swf import SWF_FIELDS, load_swf_jobs

__all__ = [
    "OPENB_NODE_COLUMNS",
    "OPENB_OPTIONAL",
    "OPENB_REQUIRED",
    "PHILLY_COLUMNS",
    "SWF_FIELDS",
    "ErrorMode",
    "JobTrace",
    "OpenbPod",
    "OpenbPodList",
    "PathLike",
    "TraceReport",
    "gang_roles",
    "load_openb_jobs",
    "load_openb_nodes",
    "load_openb_pods",
    "load_philly_jobs",
    "load_swf_jobs",
    "openb_nodes",
    "trace_dir",
]
