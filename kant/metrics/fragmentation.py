"""Expected GPU fragmentation of a cluster for a target workload (Weng et al., "Beware of
Fragmentation", USENIX ATC '23).

The per-node kernels (task classes, compiled workloads, ``F_n(M)`` on node rows) live at the
placement level, in :mod:`kant.placement.fragmentation`, because the FGD placement policies
score with them; they are re-exported here unchanged. This module adds the cluster-level
readings: :func:`fragmented_gpus` and :func:`fragmented_gpus_by_node`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kant.metrics.allocation import check_state
from kant.model import MILLI
from kant.placement.fragmentation import (
    CompiledWorkload,
    FloatArray,
    IntArray,
    TaskClass,
    TaskClassLike,
    compile_workload,
    node_fragmentation,
    node_fragmentation_by_class,
    node_fragmentation_rows,
    task_classes,
    workload_from_jobs,
)
from kant.state import ClusterState

__all__ = [
    "CompiledWorkload",
    "TaskClass",
    "TaskClassLike",
    "compile_workload",
    "fragmented_gpus",
    "fragmented_gpus_by_node",
    "node_fragmentation",
    "node_fragmentation_by_class",
    "node_fragmentation_rows",
    "task_classes",
    "workload_from_jobs",
]


def _state_fragmentation(
    state: ClusterState, workload: Iterable[TaskClassLike] | CompiledWorkload
) -> tuple[IntArray, FloatArray]:
    cw = compile_workload(workload, check_state(state).group_names("pool"))
    cols = state.columns
    alive = np.flatnonzero(cols.alive[: state.num_slots])
    frag = node_fragmentation(
        cols.gpu_free[alive], cols.cpu_free[alive], cols.mem_free[alive], cols.pool_id[alive], cw
    )
    return alive, frag


def fragmented_gpus(
    state: ClusterState, workload: Iterable[TaskClassLike] | CompiledWorkload
) -> float:
    """The cluster's expected fragmented GPU amount ``F(M) = sum_n F_n(M)`` for the target
    workload, in GPUs (milli / 1000). ``workload`` as in :func:`task_classes`, or compiled
    for ``state.group_names("pool")``."""
    _, frag = _state_fragmentation(state, workload)
    return float(frag.sum()) / MILLI


def fragmented_gpus_by_node(
    state: ClusterState, workload: Iterable[TaskClassLike] | CompiledWorkload
) -> dict[str, float]:
    """``F_n(M)`` in GPUs per node name, for the nodes where it is not zero (slot order)."""
    alive, frag = _state_fragmentation(state, workload)
    return {
        state.name_of(s): f / MILLI for s, f in zip(alive.tolist(), frag.tolist(), strict=True) if f
    }
