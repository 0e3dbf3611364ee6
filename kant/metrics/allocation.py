"""Instantaneous allocation metrics: GAR and GFR (Kant paper, sections 4.1 and 4.3).

Both read a :class:`~kant.state.ClusterState` and measure *allocation* (what pods hold), not
health: an unhealthy GPU that no pod holds is unallocated, one still held by a pod is
allocated. The dense columns of the state show unhealthy devices as "0 free", which looks
exactly like "fully held"; the few nodes where that ambiguity can matter (an unhealthy node,
or one with an unhealthy GPU: :meth:`~kant.state.ClusterState.degraded_nodes`) are read from
the bindings the state reports (:meth:`~kant.state.ClusterState.pods_on`). Everything else is
numpy over the columns: O(nodes x GPUs per node) array work, Python only per degraded node.
"""

from __future__ import annotations

import attrs
import numpy as np
import numpy.typing as npt

from kant.errors import ValidationError
from kant.model import MILLI
from kant.state import ClusterState

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def check_state(state: object) -> ClusterState:
    """``state`` if it is a ClusterState, else ValidationError naming ``state`` (a metric
    asked of something else would fail deep in its arrays)."""
    if not isinstance(state, ClusterState):
        raise ValidationError("state", state, "must be a kant.state.ClusterState")
    return state


def held_milli(state: ClusterState) -> IntArray:
    """GPU milli held by pods, per node slot and device: int64 array [num_slots, width].

    Devices a node does not have, and free slots, are 0. Unhealthy devices show what pods
    really hold on them (see the module docstring)."""
    cols = check_state(state).columns
    n = state.num_slots
    width = cols.width
    gpus = cols.gpus[:n]
    exists = np.arange(width)[None, :] < gpus[:, None]
    alive = cols.alive[:n]
    exists &= alive[:, None]
    gf = cols.gpu_free[:n]
    held: IntArray = np.where(exists, MILLI - gf, 0).astype(np.int64)
    # Rows whose columns may hide health behind "0 free": read them from the bindings.
    for name in state.degraded_nodes():
        s = state.slot_of(name)
        if not gpus[s]:
            continue
        row = np.zeros(width, dtype=np.int64)
        for pod in state.pods_on(name):
            b = state.binding(pod)
            for g in b.gpus:
                row[g] += b.gpu_milli
        held[s] = row
    return held


def _pool_rows(state: ClusterState, pool: str | None) -> BoolArray:
    if pool is not None and not isinstance(pool, str):
        raise ValidationError("pool", pool, "must be None or a GPU model name")
    n = state.num_slots
    rows: BoolArray = state.columns.alive[:n].copy()
    if pool is not None:
        rows &= state.columns.pool_id[:n] == state.group_id("pool", pool)
    return rows


def gar(state: ClusterState, pool: str | None = None) -> float:
    """GPU Allocation Ratio: GPUs held by pods / GPUs of the alive nodes.

    ``GAR = N_allocated / N_total`` where a fractional share counts as ``milli / 1000`` of a
    GPU. ``pool`` restricts both sides to one GPU model (node pool). Nodes count whatever their
    health (an unhealthy node is still part of the cluster). An empty cluster, or a pool
    without nodes, gives 0.0. ValidationError for a ``state`` that is no ClusterState or a
    ``pool`` that is no string.
    """
    check_state(state)
    if pool is None:
        total = state.total_gpus()
        return state.allocated_milli() / (MILLI * total) if total else 0.0
    rows = _pool_rows(state, pool)
    total = int(state.columns.gpus[: state.num_slots][rows].sum())
    if not total:
        return 0.0
    return float(held_milli(state)[rows].sum()) / (MILLI * total)


@attrs.frozen(kw_only=True)
class GfrReading:
    """One GFR measurement.

    ``ratio`` = fragmented GPU nodes / GPU nodes. ``degree`` = mean over GPU nodes of the
    node's fragmentation degree (0 when not fragmented, free GPUs / node GPUs otherwise).
    ``fragmented_nodes`` and ``gpu_nodes`` are the counts behind ``ratio``.
    """

    ratio: float
    degree: float
    fragmented_nodes: int
    gpu_nodes: int


def node_fragmentation_degree(allocated: IntArray, gpus: IntArray) -> npt.NDArray[np.float64]:
    """Per-node GFR degree from allocated-GPU counts and GPU counts (arrays of equal shape).

    0 where the node has no GPU, none allocated or all allocated; else
    ``(gpus - allocated) / gpus``: fewer allocated and more remaining = more fragmented."""
    g = np.asarray(gpus, dtype=np.int64)
    a = np.asarray(allocated, dtype=np.int64)
    frag = (g > 0) & (a > 0) & (a < g)
    out = np.zeros(g.shape, dtype=np.float64)
    np.divide(g - a, g, out=out, where=frag)
    return out


def gfr(state: ClusterState, pool: str | None = None) -> GfrReading:
    """GPU Node Fragmentation Ratio and degree.

    A GPU node is *non-fragmented* iff none of its GPUs is allocated or every GPU is; a GPU
    holding any share (even 1 milli) counts as allocated. With ``a_n`` allocated GPUs of
    ``g_n`` on node ``n`` and ``N`` the GPU nodes (``g_n > 0``, alive, optionally of one
    ``pool``)::

        frag_n   = 1 if 0 < a_n < g_n else 0
        ratio    = sum(frag_n) / |N|
        degree_n = frag_n * (g_n - a_n) / g_n
        degree   = sum(degree_n) / |N|

    A cluster without GPU nodes reads 0.0 / 0.0. ValidationError for a ``state`` that is no
    ClusterState or a ``pool`` that is no string.
    """
    n = check_state(state).num_slots
    rows = _pool_rows(state, pool)
    gpus = state.columns.gpus[:n]
    rows &= gpus > 0
    count = int(rows.sum())
    if not count:
        return GfrReading(ratio=0.0, degree=0.0, fragmented_nodes=0, gpu_nodes=0)
    allocated = (held_milli(state)[rows] > 0).sum(axis=1)
    g = gpus[rows]
    fragmented = int(((allocated > 0) & (allocated < g)).sum())
    degree = float(node_fragmentation_degree(allocated, g).sum()) / count
    return GfrReading(
        ratio=fragmented / count, degree=degree, fragmented_nodes=fragmented, gpu_nodes=count
    )
