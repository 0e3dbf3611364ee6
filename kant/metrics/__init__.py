"""The Kant paper's scheduling metrics (section 4), plus the FGD fragmentation amount.

- :func:`gar`: GPU Allocation Ratio, instantaneous (allocated / total GPUs).
- :class:`SorCollector`: Scheduling Occupation Ratio, GPU-time allocated / available over a
  window (gang jobs count from full binding, pod-level jobs per pod).
- :func:`gfr`: GPU Node Fragmentation Ratio (share of partially allocated GPU nodes) and a
  degree weighted by what is left.
- :func:`jwtd`: Job Waiting Time Distribution by size bucket.
- :func:`jtted`: Job Training Time Estimation Distribution (node and leaf-group deviation
  ratios) by size bucket.
- :func:`fragmented_gpus` / :func:`node_fragmentation`: expected fragmented GPU amount for a
  target workload (Weng et al., USENIX ATC '23), also the score of the FGD placement policy.
- :class:`TimeSeries`: samples GAR, SOR-so-far and GFR over time.

Definitions, formulas and worked examples: ``docs/metrics.md``.
"""

from kant.metrics.allocation import GfrReading, gar, gfr, held_milli, node_fragmentation_degree
from kant.metrics.buckets import BUCKETS, size_bucket
from kant.metrics.fragmentation import (
    CompiledWorkload,
    TaskClass,
    TaskClassLike,
    compile_workload,
    fragmented_gpus,
    fragmented_gpus_by_node,
    node_fragmentation,
    node_fragmentation_by_class,
    task_classes,
    workload_from_jobs,
)
from kant.metrics.jobs import (
    JttedRow,
    JwtdRow,
    jtted,
    jwtd,
    optimal_groups,
    optimal_nodes,
    optimum_shape,
)
from kant.metrics.occupancy import Sample, SorCollector, TimeSeries
from kant.metrics.records import JobRecord

__all__ = [
    "BUCKETS",
    "CompiledWorkload",
    "GfrReading",
    "JobRecord",
    "JttedRow",
    "JwtdRow",
    "Sample",
    "SorCollector",
    "TaskClass",
    "TaskClassLike",
    "TimeSeries",
    "compile_workload",
    "fragmented_gpus",
    "fragmented_gpus_by_node",
    "gar",
    "gfr",
    "held_milli",
    "jtted",
    "jwtd",
    "node_fragmentation",
    "node_fragmentation_by_class",
    "node_fragmentation_degree",
    "optimal_groups",
    "optimal_nodes",
    "optimum_shape",
    "size_bucket",
    "task_classes",
    "workload_from_jobs",
]
