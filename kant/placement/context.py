"""What a placement strategy sees: the pod request, the snapshot, and the job's pods so far.

Everything here is vectorised over an array of candidate node *slots*: a strategy never loops
over nodes in Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import numpy as np
import numpy.typing as npt

from kant.model import MILLI, Job, Resources, Role

if TYPE_CHECKING:
    from kant.state import Snapshot

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

UNBOUNDED = 1 << 30
"""Fit count of a request that asks for nothing a node could run out of."""


@attrs.frozen(kw_only=True)
class PodRequest:
    """One pod's request in the units of the snapshot columns."""

    gpus: int
    milli: int  # share of one GPU (0 unless a fractional pod)
    cpu: int
    mem: int
    nics: int

    @classmethod
    def of(cls, r: Resources) -> PodRequest:
        """The request of one pod with resources ``r``. O(1); once per role placed."""
        return cls(
            gpus=r.gpus, milli=r.gpu_milli, cpu=r.cpu_milli, mem=r.memory_mib, nics=r.rdma_nics
        )

    @property
    def total_milli(self) -> int:
        """GPU milli asked in all: whole GPUs x 1000 plus a share."""
        return self.gpus * MILLI + self.milli

    @property
    def needs_gpu(self) -> bool:
        """Does the pod ask for any GPU (whole or a share)?"""
        return self.gpus > 0 or self.milli > 0


def fit_count(snap: Snapshot, slots: IntArray, req: PodRequest) -> IntArray:
    """How many pods of ``req`` each node in ``slots`` can still take (0 = infeasible).

    Exact for identical pods: whole-GPU pods count whole free GPUs, fractional pods count
    shares per device (a share never spans devices), then CPU, memory, NICs and the node's
    pod slots (its ``max_pods``, read only while a node has one) cap it. Nodes that are not
    ready (unhealthy) get 0. O(len(slots) * W) numpy work."""
    cols = snap.cols
    n = np.full(slots.shape[0], UNBOUNDED, dtype=np.int64)
    if req.gpus:
        np.minimum(n, cols.free_gpus[slots] // req.gpus, out=n)
    elif req.milli:
        np.minimum(n, (cols.gpu_free[slots] // req.milli).sum(axis=1), out=n)
    if req.cpu:
        np.minimum(n, cols.cpu_free[slots] // req.cpu, out=n)
    if req.mem:
        np.minimum(n, cols.mem_free[slots] // req.mem, out=n)
    if req.nics:
        np.minimum(n, cols.free_nics[slots] // req.nics, out=n)
    if snap.pods_capped:  # (below 0 on a node above a lowered capacity: no slot)
        np.minimum(n, np.maximum(cols.pod_free[slots], 0), out=n)
    n[~cols.ready[slots]] = 0
    return n


def fits(snap: Snapshot, slots: IntArray, req: PodRequest) -> npt.NDArray[np.bool_]:
    """Whether each node in ``slots`` can take one pod of ``req``: ``fit_count(...) > 0``
    with comparisons instead of divisions (the Placer asks this once per pod)."""
    cols = snap.cols
    ok = cols.ready[slots].copy()
    if req.gpus:
        ok &= cols.free_gpus[slots] >= req.gpus
    elif req.milli:
        ok &= cols.max_share[slots] >= req.milli
    if req.cpu:
        ok &= cols.cpu_free[slots] >= req.cpu
    if req.mem:
        ok &= cols.mem_free[slots] >= req.mem
    if req.nics:
        ok &= cols.free_nics[slots] >= req.nics
    if snap.pods_capped:
        ok &= cols.pod_free[slots] > 0
    return ok


@attrs.define(kw_only=True, eq=False)
class PodContext:
    """The placement question a strategy scores candidates for.

    ``on_node`` counts, per node slot, the pods of this job already placed there (in this
    placement or running before it) — for E-Binpack co-location and Spread anti-affinity.
    ``role_on`` counts the pods of this role the same way; the Placer keeps it only for a
    role with ``max_per_node`` (empty otherwise).
    """

    snap: Snapshot
    job: Job
    role: Role
    req: PodRequest
    on_node: dict[int, int]
    role_on: dict[int, int] = attrs.field(factory=dict)
    record: bool = False  # the pods placed are noted on the snapshot (Job.labelled)
    soft: bool = False  # preferred pod terms are read (a pod placed on its own)

    def job_pods_on(self, slots: IntArray) -> IntArray:
        """Per candidate, pods of this job already on that node."""
        return _count_on(self.on_node, slots)

    def role_pods_on(self, slots: IntArray) -> IntArray:
        """Per candidate, pods of this role already on that node (kept for a role with
        ``max_per_node``; zeros for any other role)."""
        return _count_on(self.role_on, slots)

    def gpu_after(self, slots: IntArray) -> FloatArray:
        """Share of each candidate's GPU capacity left free after placing the pod (0..1);
        for CPU-only pods, the share of CPU left."""
        cols = self.snap.cols
        if self.req.needs_gpu:
            cap = np.maximum(cols.gpus[slots] * MILLI, 1)
            return (cols.free_milli[slots] - self.req.total_milli) / cap
        cap = np.maximum(cols.cpu_cap[slots], 1)
        return (cols.cpu_free[slots] - self.req.cpu) / cap


def _count_on(counts: dict[int, int], slots: IntArray) -> IntArray:
    """Per slot, its count in ``counts`` (0 when absent). O((len(slots) + k) log k)."""
    if not counts:
        return np.zeros(slots.shape[0], dtype=np.int64)
    keys = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
    vals = np.fromiter(counts.values(), dtype=np.int64, count=len(counts))
    order = np.argsort(keys)
    keys, vals = keys[order], vals[order]
    pos = np.searchsorted(keys, slots)
    pos = np.minimum(pos, keys.shape[0] - 1)
    return np.where(keys[pos] == slots, vals[pos], 0)
