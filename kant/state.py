"""ClusterState (the truth) and Snapshot (the incremental, transactional view a cycle works on).

``ClusterState`` holds what the orchestrator reported: nodes with their devices and health,
and the pods running on them with exactly which GPUs (and milli shares), NICs, CPU and memory
each holds. Every change to a node bumps that node's *generation* and records it as changed.

Next to the Python records it keeps a dense :class:`NodeColumns` table (numpy arrays indexed by
node *slot*) of what is **allocatable** on every node: free milli per GPU, the bitmask of whole
free GPUs, free CPU, memory and NICs. Unhealthy GPUs and unhealthy nodes count as not
allocatable, so readers never need to consult health separately.

``snapshot()`` returns the state's :class:`Snapshot`, refreshed in place: only the rows of
nodes changed since the last refresh (plus rows the previous cycle changed tentatively) are
copied, so a refresh costs O(changed nodes), not O(cluster) — the kube-scheduler
``UpdateSnapshot`` idea, and section 3.4.3 of the Kant paper. The snapshot also keeps
per-group aggregates (pool, leaf/NodeNetGroup, spine, superspine, HBD) updated by deltas and,
per pool, a sorted index of nodes by whole free GPUs for best-fit queries.

Changes to a snapshot happen inside a :class:`Transaction` (nestable); rolling one back
restores every touched row, aggregate and index entry exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs
import numpy as np
import numpy.typing as npt
from sortedcontainers import SortedList

from kant.bits import bits as _mask_bits
from kant.bits import mask_of as _bits_to_mask
from kant.bits import popcount as _popcount
from kant.errors import (
    AllocationConflictError,
    DuplicateError,
    InvalidNodeError,
    KantError,
    TransactionError,
    UnknownNodeError,
    UnknownPodError,
)
from kant.model import MILLI, Binding, NodeSpec, PodId

IntArray = npt.NDArray[np.int64]

LEVELS: tuple[str, ...] = ("pool", "leaf", "spine", "superspine", "hbd", "zone")
"""Group levels with interned ids and aggregates. ``pool`` is the GPU model (node pool)."""

_KEY_SHIFT = 32  # sorted index key: free_gpus << 32 | slot


# --------------------------------------------------------------------------- node records


@attrs.define(eq=False)
class _NodeRecord:
    """Mutable truth about one node (internal)."""

    spec: NodeSpec
    slot: int
    healthy: bool = True
    gpu_healthy: int = 0  # bitmask
    nic_healthy: int = 0  # bitmask
    gpu_used: list[int] = attrs.field(factory=list)  # milli held per GPU
    nic_used: int = 0  # bitmask
    cpu_used: int = 0
    mem_used: int = 0
    pods: set[PodId] = attrs.field(factory=set)


# --------------------------------------------------------------------------- columns


class NodeColumns:
    """Dense per-slot arrays: static node facts and allocatable capacity.

    Static: ``alive`` (slot holds a node), ``ready`` (alive and healthy: may take new
    pods), ``gpus`` (device count), ``gpu_cap_mask`` (all device bits), ``cpu_cap``,
    ``mem_cap``, ``nics`` (capacities), group ids per level (``-1`` = none).
    Allocatable: ``gpu_free`` [slot, W] (free milli per device, 0 when unhealthy),
    ``free_mask`` (uint64, bit g = device g wholly free and healthy), ``free_gpus``
    (popcount of it), ``free_milli`` (sum of ``gpu_free``), ``max_share`` (the largest
    free milli on one device: a fractional pod of up to this fits), ``cpu_free``,
    ``mem_free``, ``nic_mask`` (free healthy NICs), ``free_nics``.
    """

    SCALARS: tuple[str, ...] = (
        "alive", "ready", "gpus", "gpu_cap_mask", "cpu_cap", "mem_cap", "nics",
        "free_mask", "free_gpus", "free_milli", "max_share", "cpu_free", "mem_free",
        "nic_mask", "free_nics",
        *(f"{lv}_id" for lv in LEVELS),
    )  # fmt: skip

    def __init__(self, capacity: int = 64, width: int = 8) -> None:
        self.capacity = capacity
        self.width = width
        self.alive = np.zeros(capacity, dtype=np.bool_)
        self.ready = np.zeros(capacity, dtype=np.bool_)
        self.gpus = np.zeros(capacity, dtype=np.int64)
        self.gpu_cap_mask = np.zeros(capacity, dtype=np.uint64)
        self.cpu_cap = np.zeros(capacity, dtype=np.int64)
        self.mem_cap = np.zeros(capacity, dtype=np.int64)
        self.nics = np.zeros(capacity, dtype=np.int64)
        self.free_mask = np.zeros(capacity, dtype=np.uint64)
        self.free_gpus = np.zeros(capacity, dtype=np.int64)
        self.free_milli = np.zeros(capacity, dtype=np.int64)
        self.max_share = np.zeros(capacity, dtype=np.int64)
        self.cpu_free = np.zeros(capacity, dtype=np.int64)
        self.mem_free = np.zeros(capacity, dtype=np.int64)
        self.nic_mask = np.zeros(capacity, dtype=np.uint64)
        self.free_nics = np.zeros(capacity, dtype=np.int64)
        for lv in LEVELS:
            setattr(self, f"{lv}_id", np.full(capacity, -1, dtype=np.int64))
        self.gpu_free = np.zeros((capacity, width), dtype=np.int64)

    # typed accessors for the level arrays (set dynamically above)
    pool_id: IntArray
    leaf_id: IntArray
    spine_id: IntArray
    superspine_id: IntArray
    hbd_id: IntArray
    zone_id: IntArray

    def ensure(self, capacity: int, width: int) -> None:
        """Grow to at least ``capacity`` slots and ``width`` devices (amortised doubling)."""
        self.__dict__.pop("_arrays", None)
        self.__dict__.pop("_levels", None)
        if capacity > self.capacity:
            new_cap = max(capacity, self.capacity * 2)
            for name in self.SCALARS:
                old = getattr(self, name)
                fill = -1 if name.endswith("_id") else 0
                arr = np.full(new_cap, fill, dtype=old.dtype)
                arr[: self.capacity] = old
                setattr(self, name, arr)
            gf = np.zeros((new_cap, self.width), dtype=np.int64)
            gf[: self.capacity] = self.gpu_free
            self.gpu_free = gf
            self.capacity = new_cap
        if width > self.width:
            gf = np.zeros((self.capacity, width), dtype=np.int64)
            gf[:, : self.width] = self.gpu_free
            self.gpu_free = gf
            self.width = width

    def copy_rows_from(self, other: NodeColumns, idx: IntArray) -> None:
        """Vectorised copy of rows ``idx`` from ``other`` (same shape)."""
        for name in self.SCALARS:
            getattr(self, name)[idx] = getattr(other, name)[idx]
        self.gpu_free[idx] = other.gpu_free[idx]

    def arrays(self) -> list[Any]:
        """The scalar column arrays in :attr:`SCALARS` order (cached until they grow)."""
        cached: list[Any] | None = self.__dict__.get("_arrays")
        if cached is None:
            cached = [getattr(self, n) for n in self.SCALARS]
            self.__dict__["_arrays"] = cached
        return cached

    def level_arrays(self) -> list[tuple[str, IntArray]]:
        """``(level, ids)`` for every group level (cached until the arrays grow)."""
        cached: list[tuple[str, IntArray]] | None = self.__dict__.get("_levels")
        if cached is None:
            cached = [(lv, getattr(self, f"{lv}_id")) for lv in LEVELS]
            self.__dict__["_levels"] = cached
        return cached

    def row(self, slot: int) -> tuple[Any, ...]:
        """All values of one row (for undo logs)."""
        return (*[a[slot] for a in self.arrays()], self.gpu_free[slot].copy())

    def set_row(self, slot: int, values: tuple[Any, ...]) -> None:
        for a, v in zip(self.arrays(), values, strict=False):
            a[slot] = v
        self.gpu_free[slot] = values[-1]

    def rows_equal(self, other: NodeColumns, n: int) -> list[str]:
        """Names of columns that differ in the first ``n`` slots (empty if equal)."""
        bad = [
            name
            for name in self.SCALARS
            if not np.array_equal(getattr(self, name)[:n], getattr(other, name)[:n])
        ]
        w = min(self.width, other.width)
        if not np.array_equal(self.gpu_free[:n, :w], other.gpu_free[:n, :w]):
            bad.append("gpu_free")
        return bad


# --------------------------------------------------------------------------- cluster state


class ClusterState:
    """The mutable truth about nodes, devices and running pods.

    Every mutating method validates completely before it changes anything: a rejected call
    (unknown node, conflicting binding, ...) raises a :class:`kant.errors.KantError` and
    leaves the state untouched.
    """

    def __init__(self, nodes: Iterable[NodeSpec] = ()) -> None:
        self._records: dict[str, _NodeRecord] = {}
        self._slot_names: list[str | None] = []
        self._free_slots: list[int] = []  # reusable slots, kept sorted (lowest first)
        self._pods: dict[PodId, Binding] = {}
        self._job_pods: dict[str, set[PodId]] = {}
        self._allocated = 0  # GPU milli held by pods
        self._ids: dict[str, dict[str, int]] = {lv: {} for lv in LEVELS}
        self._id_names: dict[str, list[str]] = {lv: [] for lv in LEVELS}
        self.columns = NodeColumns()
        self.generation = 0
        self.node_generation = np.zeros(self.columns.capacity, dtype=np.int64)
        self._changed: set[int] = set()
        self._membership_version = 0
        self._snapshot: Snapshot | None = None
        for spec in nodes:
            self.add_node(spec)

    # ----------------------------------------------------------------- queries

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    @property
    def num_slots(self) -> int:
        """Slots in use or freed (the extent of every per-slot array that matters)."""
        return len(self._slot_names)

    def node(self, name: str) -> NodeSpec:
        return self._record(name).spec

    def nodes(self) -> Iterator[NodeSpec]:
        """Nodes in slot order (deterministic)."""
        for name in self._slot_names:
            if name is not None:
                yield self._records[name].spec

    def slot_of(self, name: str) -> int:
        return self._record(name).slot

    def name_of(self, slot: int) -> str:
        name = self._slot_names[slot] if 0 <= slot < len(self._slot_names) else None
        if name is None:
            raise UnknownNodeError(f"<slot {slot}>")
        return name

    def is_healthy(self, name: str) -> bool:
        return self._record(name).healthy

    def gpu_healthy_mask(self, name: str) -> int:
        return self._record(name).gpu_healthy

    def pods_on(self, name: str) -> tuple[PodId, ...]:
        return tuple(sorted(self._record(name).pods))

    def binding(self, pod: PodId) -> Binding:
        try:
            return self._pods[pod]
        except KeyError:
            raise UnknownPodError(pod) from None

    def job_pods(self, job: str) -> tuple[PodId, ...]:
        """Running pods of job ``job`` (sorted; empty if none)."""
        return tuple(sorted(self._job_pods.get(job, ())))

    def has_pod(self, pod: PodId) -> bool:
        return pod in self._pods

    def pods(self) -> Iterator[Binding]:
        """Running pods, sorted by pod id."""
        for pod in sorted(self._pods):
            yield self._pods[pod]

    @property
    def num_pods(self) -> int:
        return len(self._pods)

    def bindings_view(self) -> Mapping[PodId, Binding]:
        """Every running pod's binding, as a read-only live view (O(1), unsorted): for hot
        loops that look pods up by id; :meth:`pods` is the sorted, deterministic iteration."""
        return MappingProxyType(self._pods)

    @property
    def membership_version(self) -> int:
        """Bumped whenever a node is added or removed (not on binds or health changes):
        caches keyed on the node set compare it."""
        return self._membership_version

    def group_id(self, level: str, name: str) -> int:
        """Interned id of a group (``level`` in :data:`LEVELS`), -1 if unknown."""
        return self._ids[level].get(name, -1)

    def group_name(self, level: str, gid: int) -> str:
        return self._id_names[level][gid]

    def group_names(self, level: str) -> list[str]:
        return list(self._id_names[level])

    def total_gpus(self) -> int:
        return int(self.columns.gpus[: self.num_slots].sum())

    def allocated_milli(self) -> int:
        """GPU milli held by running pods (a running total, O(1))."""
        return self._allocated

    def _record(self, name: str) -> _NodeRecord:
        try:
            return self._records[name]
        except (KeyError, TypeError):
            raise UnknownNodeError(str(name)) from None

    # ----------------------------------------------------------------- node mutations

    def add_node(self, spec: NodeSpec) -> None:
        """Register a node (healthy, empty). Raises DuplicateError if the name exists."""
        if not isinstance(spec, NodeSpec):
            raise InvalidNodeError("spec", spec, "must be a NodeSpec")
        if spec.name in self._records:
            raise DuplicateError(f"node {spec.name!r} already exists")
        if self._free_slots:
            slot = self._free_slots.pop(0)
            self._slot_names[slot] = spec.name
        else:
            slot = len(self._slot_names)
            self._slot_names.append(spec.name)
        self.columns.ensure(slot + 1, max(spec.gpus, 1))
        if self.node_generation.shape[0] < self.columns.capacity:
            g = np.zeros(self.columns.capacity, dtype=np.int64)
            g[: self.node_generation.shape[0]] = self.node_generation
            self.node_generation = g
        rec = _NodeRecord(
            spec=spec,
            slot=slot,
            gpu_healthy=(1 << spec.gpus) - 1,
            nic_healthy=(1 << spec.rdma_nics) - 1,
            gpu_used=[0] * spec.gpus,
        )
        self._records[spec.name] = rec
        cols = self.columns
        cols.alive[slot] = True
        cols.gpus[slot] = spec.gpus
        cols.gpu_cap_mask[slot] = (1 << spec.gpus) - 1
        cols.cpu_cap[slot] = spec.cpu_milli
        cols.mem_cap[slot] = spec.memory_mib
        cols.nics[slot] = spec.rdma_nics
        for lv in LEVELS:
            value = spec.gpu_model if lv == "pool" else getattr(spec, lv)
            getattr(cols, f"{lv}_id")[slot] = -1 if value is None else self._intern(lv, value)
        self._membership_version += 1
        self._refresh_row(rec)

    def remove_node(self, name: str) -> tuple[Binding, ...]:
        """Remove a node (decommissioned or lost). Returns the bindings of the pods that were
        on it, which are released; the caller requeues their jobs."""
        rec = self._record(name)
        lost = tuple(self._pods[p] for p in sorted(rec.pods))
        for b in lost:
            self._forget(b.pod)
        del self._records[name]
        slot = rec.slot
        self._slot_names[slot] = None
        self._free_slots.append(slot)
        self._free_slots.sort()
        cols = self.columns
        cols.set_row(slot, _EMPTY_ROW(cols))
        for lv in LEVELS:
            getattr(cols, f"{lv}_id")[slot] = -1
        self._membership_version += 1
        self._touch(slot)
        return lost

    def set_node_health(self, name: str, healthy: bool) -> None:
        """Mark a whole node (un)schedulable. Running pods stay; nothing new lands on it."""
        rec = self._record(name)
        rec.healthy = bool(healthy)
        self._refresh_row(rec)

    def set_gpu_health(self, name: str, gpu: int, healthy: bool) -> None:
        """Mark one GPU device (un)healthy. A pod holding it keeps it until released."""
        rec = self._record(name)
        if not (isinstance(gpu, int) and 0 <= gpu < rec.spec.gpus):
            raise InvalidNodeError("gpu", gpu, f"node {name!r} has GPUs 0..{rec.spec.gpus - 1}")
        if healthy:
            rec.gpu_healthy |= 1 << gpu
        else:
            rec.gpu_healthy &= ~(1 << gpu)
        self._refresh_row(rec)

    def set_nic_health(self, name: str, nic: int, healthy: bool) -> None:
        rec = self._record(name)
        if not (isinstance(nic, int) and 0 <= nic < rec.spec.rdma_nics):
            raise InvalidNodeError(
                "nic", nic, f"node {name!r} has NICs 0..{rec.spec.rdma_nics - 1}"
            )
        if healthy:
            rec.nic_healthy |= 1 << nic
        else:
            rec.nic_healthy &= ~(1 << nic)
        self._refresh_row(rec)

    # ----------------------------------------------------------------- pod mutations

    def check_binding(self, b: Binding) -> None:
        """Raise unless ``b`` can be bound now (node exists and is healthy, devices exist,
        are healthy and free enough, CPU/memory fit, pod not already bound)."""
        if not isinstance(b, Binding):
            raise AllocationConflictError(f"not a Binding: {b!r}")
        if b.pod in self._pods:
            raise DuplicateError(f"pod {b.pod} is already bound to {self._pods[b.pod].node!r}")
        rec = self._record(b.node)
        _check_fits(rec, b)

    def bind(self, b: Binding) -> None:
        """Record that pod ``b.pod`` holds the devices and capacity in ``b``."""
        self.check_binding(b)
        rec = self._records[b.node]
        for g in b.gpus:
            rec.gpu_used[g] += b.gpu_milli
        rec.nic_used |= _bits_to_mask(b.nics)
        rec.cpu_used += b.cpu_milli
        rec.mem_used += b.memory_mib
        rec.pods.add(b.pod)
        self._pods[b.pod] = b
        self._allocated += b.total_milli
        self._job_pods.setdefault(b.pod.job, set()).add(b.pod)
        self._refresh_row(rec)

    def release(self, pod: PodId) -> Binding:
        """Free what ``pod`` holds and forget it. Returns its binding."""
        b = self.binding(pod)
        rec = self._records[b.node]
        for g in b.gpus:
            rec.gpu_used[g] -= b.gpu_milli
        rec.nic_used &= ~_bits_to_mask(b.nics)
        rec.cpu_used -= b.cpu_milli
        rec.mem_used -= b.memory_mib
        rec.pods.discard(pod)
        self._forget(pod)
        self._refresh_row(rec)
        return b

    def _forget(self, pod: PodId) -> None:
        self._allocated -= self._pods.pop(pod).total_milli
        left = self._job_pods[pod.job]
        left.discard(pod)
        if not left:
            del self._job_pods[pod.job]

    # ----------------------------------------------------------------- snapshots

    def snapshot(self) -> Snapshot:
        """The state's snapshot, refreshed to the current truth in O(changed nodes).

        There is one snapshot per state, refreshed in place; it must not have an open
        transaction. Rows a previous cycle changed tentatively are re-synced too.
        """
        if self._snapshot is None:
            self._changed.clear()
            self._snapshot = Snapshot(self)
        else:
            self._snapshot._refresh()
        return self._snapshot

    def full_snapshot(self) -> Snapshot:
        """A brand-new snapshot built from scratch (O(cluster)); for tests and checks."""
        return Snapshot(self)

    def _take_changes(self) -> IntArray:
        idx = np.fromiter(sorted(self._changed), dtype=np.int64, count=len(self._changed))
        self._changed.clear()
        return idx

    # ----------------------------------------------------------------- internals

    def _intern(self, level: str, name: str) -> int:
        ids = self._ids[level]
        gid = ids.get(name)
        if gid is None:
            gid = len(ids)
            ids[name] = gid
            self._id_names[level].append(name)
        return gid

    def _touch(self, slot: int) -> None:
        self.generation += 1
        self.node_generation[slot] = self.generation
        self._changed.add(slot)

    def _refresh_row(self, rec: _NodeRecord) -> None:
        """Recompute the allocatable columns of one node from its record."""
        _write_allocatable(self.columns, rec)
        self._touch(rec.slot)

    # ----------------------------------------------------------------- self-check

    def _check(self) -> None:
        """Recompute every derived structure from the records and raise on any difference."""
        errors: list[str] = []
        used: dict[str, list[int]] = {n: [0] * r.spec.gpus for n, r in self._records.items()}
        nic: dict[str, int] = dict.fromkeys(self._records, 0)
        cpu: dict[str, int] = dict.fromkeys(self._records, 0)
        mem: dict[str, int] = dict.fromkeys(self._records, 0)
        pods_by_node: dict[str, set[PodId]] = {n: set() for n in self._records}
        by_job: dict[str, set[PodId]] = {}
        for pod in self._pods:
            by_job.setdefault(pod.job, set()).add(pod)
        if self._allocated != sum(b.total_milli for b in self._pods.values()):
            errors.append("allocated milli total differs from the pods")
        if by_job != self._job_pods:
            errors.append("job -> pods index differs from the pods")
        for pod, b in self._pods.items():
            if b.pod != pod:
                errors.append(f"pod key {pod} holds binding of {b.pod}")
            if b.node not in self._records:
                errors.append(f"pod {pod} on missing node {b.node}")
                continue
            for g in b.gpus:
                used[b.node][g] += b.gpu_milli
            m = _bits_to_mask(b.nics)
            if nic[b.node] & m:
                errors.append(f"NIC allocated twice on {b.node}")
            nic[b.node] |= m
            cpu[b.node] += b.cpu_milli
            mem[b.node] += b.memory_mib
            pods_by_node[b.node].add(pod)
        fresh = NodeColumns(self.columns.capacity, self.columns.width)
        for name, rec in self._records.items():
            if self._slot_names[rec.slot] != name:
                errors.append(f"slot {rec.slot} names {self._slot_names[rec.slot]}, not {name}")
            if rec.gpu_used != used[name]:
                errors.append(f"{name}: gpu_used {rec.gpu_used} != {used[name]}")
            if any(u > MILLI for u in used[name]):
                errors.append(f"{name}: a GPU is over-allocated: {used[name]}")
            if rec.nic_used != nic[name]:
                errors.append(f"{name}: nic_used {rec.nic_used:b} != {nic[name]:b}")
            if (rec.cpu_used, rec.mem_used) != (cpu[name], mem[name]):
                errors.append(f"{name}: cpu/mem used mismatch")
            if rec.cpu_used > rec.spec.cpu_milli or rec.mem_used > rec.spec.memory_mib:
                errors.append(f"{name}: CPU or memory over-allocated")
            if rec.pods != pods_by_node[name]:
                errors.append(f"{name}: pod set mismatch")
            fresh.alive[rec.slot] = True
            fresh.gpus[rec.slot] = rec.spec.gpus
            fresh.gpu_cap_mask[rec.slot] = (1 << rec.spec.gpus) - 1
            fresh.cpu_cap[rec.slot] = rec.spec.cpu_milli
            fresh.mem_cap[rec.slot] = rec.spec.memory_mib
            fresh.nics[rec.slot] = rec.spec.rdma_nics
            for lv in LEVELS:
                value = rec.spec.gpu_model if lv == "pool" else getattr(rec.spec, lv)
                getattr(fresh, f"{lv}_id")[rec.slot] = -1 if value is None else self._ids[lv][value]
            _write_allocatable(fresh, rec)
        bad = fresh.rows_equal(self.columns, self.num_slots)
        if bad:
            errors.append(f"columns differ from records: {bad}")
        live = {s for s, n in enumerate(self._slot_names) if n is not None}
        if set(self._free_slots) & live or len(live) != len(self._records):
            errors.append("slot bookkeeping is inconsistent")
        if errors:
            raise KantError("ClusterState._check failed:\n  " + "\n  ".join(errors))


def _EMPTY_ROW(cols: NodeColumns) -> tuple[Any, ...]:
    vals: list[Any] = [-1 if n.endswith("_id") else 0 for n in cols.SCALARS]
    vals[0] = False
    return (*vals, np.zeros(cols.width, dtype=np.int64))


def _check_fits(rec: _NodeRecord, b: Binding) -> None:
    spec = rec.spec
    where = f"binding of {b.pod} on {spec.name!r}"
    if not rec.healthy:
        raise AllocationConflictError(f"{where}: node is unhealthy")
    for g in b.gpus:
        if g >= spec.gpus:
            raise AllocationConflictError(f"{where}: node has no GPU {g} (has {spec.gpus})")
        if not rec.gpu_healthy >> g & 1:
            raise AllocationConflictError(f"{where}: GPU {g} is unhealthy")
        if rec.gpu_used[g] + b.gpu_milli > MILLI:
            raise AllocationConflictError(
                f"{where}: GPU {g} has {MILLI - rec.gpu_used[g]} milli free, needs {b.gpu_milli}"
            )
    for n in b.nics:
        if n >= spec.rdma_nics:
            raise AllocationConflictError(f"{where}: node has no NIC {n}")
        if not rec.nic_healthy >> n & 1:
            raise AllocationConflictError(f"{where}: NIC {n} is unhealthy")
        if rec.nic_used >> n & 1:
            raise AllocationConflictError(f"{where}: NIC {n} is already allocated")
    if rec.cpu_used + b.cpu_milli > spec.cpu_milli:
        raise AllocationConflictError(
            f"{where}: needs {b.cpu_milli} CPU milli, {spec.cpu_milli - rec.cpu_used} free"
        )
    if rec.mem_used + b.memory_mib > spec.memory_mib:
        raise AllocationConflictError(
            f"{where}: needs {b.memory_mib} MiB, {spec.memory_mib - rec.mem_used} free"
        )


def _write_allocatable(cols: NodeColumns, rec: _NodeRecord) -> None:
    s = rec.slot
    spec = rec.spec
    ok = rec.healthy
    free_mask = 0
    total = 0
    row = cols.gpu_free[s]
    row[:] = 0
    for g in range(spec.gpus):
        if ok and rec.gpu_healthy >> g & 1:
            f = MILLI - rec.gpu_used[g]
            row[g] = f
            total += f
            if f == MILLI:
                free_mask |= 1 << g
    nic_mask = ((1 << spec.rdma_nics) - 1) & rec.nic_healthy & ~rec.nic_used if ok else 0
    cols.ready[s] = ok
    cols.free_mask[s] = free_mask
    cols.free_gpus[s] = _popcount(free_mask)
    cols.free_milli[s] = total
    cols.max_share[s] = int(row.max()) if row.shape[0] else 0
    cols.cpu_free[s] = spec.cpu_milli - rec.cpu_used if ok else 0
    cols.mem_free[s] = spec.memory_mib - rec.mem_used if ok else 0
    cols.nic_mask[s] = nic_mask
    cols.free_nics[s] = _popcount(nic_mask)


# --------------------------------------------------------------------------- snapshot


_SNAPSHOT_TOKENS: Final = itertools.count()
_CHANGE_LOG_KEEP: Final = 1 << 16
"""Entries of a snapshot's change log kept before the older half is dropped."""


class Snapshot:
    """A consistent, mutable-in-transactions view of a :class:`ClusterState`.

    Read the per-slot arrays (``free_gpus``, ``gpu_free``, ``free_mask``, ``cpu_free``...,
    see :class:`NodeColumns`) and group aggregates directly; they are numpy arrays indexed
    by node slot / group id and must be treated as read-only outside :meth:`allocate` and
    :meth:`release`. Aggregates: ``agg[level]`` is an int64 array [groups, 3] with columns
    ``AGG_FREE_GPUS`` (whole free GPUs), ``AGG_FREE_NODES`` (nodes whose every GPU is free)
    and ``AGG_FREE_MILLI``.
    """

    AGG_FREE_GPUS = 0
    AGG_FREE_NODES = 1
    AGG_FREE_MILLI = 2

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.cols = NodeColumns(state.columns.capacity, state.columns.width)
        self.names: list[str | None] = []
        self.agg: dict[str, IntArray] = {}
        self._by_free: dict[int, SortedList] = {}
        self._undo: list[dict[int, tuple[Any, ...]]] = []
        self._local: set[int] = set()  # rows changed by committed transactions since refresh
        self._members: dict[tuple[str, int], IntArray] = {}
        self._members_version = -1
        self.generation = -1
        self.token = next(_SNAPSHOT_TOKENS)  # unique per snapshot object (id() is reused)
        # slots whose rows may have changed, in order (see rows_changed_since)
        self._log: list[int] = []
        self._log_start = 0  # change-log position of _log[0]
        self._full_build()

    # ----------------------------------------------------------------- building

    def _full_build(self) -> None:
        st = self.state
        n = st.num_slots
        self.cols = NodeColumns(st.columns.capacity, st.columns.width)
        self.cols.copy_rows_from(st.columns, np.arange(n, dtype=np.int64))
        self.names = list(st._slot_names)
        self.agg = {lv: np.zeros((len(st._id_names[lv]), 3), dtype=np.int64) for lv in LEVELS}
        self._by_free = {}
        for s in range(n):
            if self.cols.alive[s]:
                self._apply(s, self._contrib(s), +1)
        self._local.clear()
        self.generation = st.generation

    def _refresh(self) -> None:
        if self._undo:
            raise TransactionError("snapshot refreshed while a transaction is open")
        st = self.state
        changed = st._take_changes()
        if self._local:
            local = np.fromiter(self._local, dtype=np.int64, count=len(self._local))
            idx = np.union1d(changed, local)
            self._local.clear()
        else:
            idx = changed
        self.cols.ensure(st.columns.capacity, st.columns.width)
        for lv in LEVELS:
            need = len(st._id_names[lv])
            if need > self.agg[lv].shape[0]:
                grown = np.zeros((need, 3), dtype=np.int64)
                grown[: self.agg[lv].shape[0]] = self.agg[lv]
                self.agg[lv] = grown
        if len(self.names) < st.num_slots:
            self.names.extend([None] * (st.num_slots - len(self.names)))
        if idx.size:
            self._logged(idx.tolist())
            self._contrib_bulk(idx, -1)
            self.cols.copy_rows_from(st.columns, idx)
            for s in idx.tolist():
                self.names[s] = st._slot_names[s]
            self._contrib_bulk(idx, +1)
        self.generation = st.generation

    def _contrib_bulk(self, idx: IntArray, sign: int) -> None:
        """Add (sign=+1) or remove (-1) the aggregate and index contributions of rows idx."""
        cols = self.cols
        live = idx[cols.alive[idx]]
        if not live.size:
            return
        fg = cols.free_gpus[live]
        fm = cols.free_milli[live]
        whole = ((fg == cols.gpus[live]) & (cols.gpus[live] > 0)).astype(np.int64)
        for lv in LEVELS:
            gid = getattr(cols, f"{lv}_id")[live]
            has = gid >= 0
            if not has.any():
                continue
            g = gid[has]
            a = self.agg[lv]
            np.add.at(a[:, 0], g, sign * fg[has])
            np.add.at(a[:, 1], g, sign * whole[has])
            np.add.at(a[:, 2], g, sign * fm[has])
        pools = cols.pool_id[live]
        for s, p, f in zip(live.tolist(), pools.tolist(), fg.tolist(), strict=True):
            if p < 0:
                continue
            sl = self._by_free.get(p)
            if sl is None:
                sl = self._by_free[p] = SortedList()
            key = (f << _KEY_SHIFT) | s
            if sign > 0:
                sl.add(key)
            else:
                sl.remove(key)

    def _contrib(self, s: int) -> tuple[int, int, int, int]:
        """(free GPUs, wholly free?, free milli, pool id) of row ``s``; pool -2 if dead."""
        cols = self.cols
        if not cols.alive[s]:
            return (0, 0, 0, -2)
        fg = int(cols.free_gpus[s])
        g = int(cols.gpus[s])
        return (fg, int(fg == g and g > 0), int(cols.free_milli[s]), int(cols.pool_id[s]))

    def _shift(self, s: int, before: tuple[int, int, int, int]) -> None:
        """Move row ``s``'s contributions from ``before`` to its current values (one pass;
        the group ids of a live row do not change inside a snapshot)."""
        after = self._contrib(s)
        if after == before:
            return
        if before[3] != after[3]:  # the row came alive or died: full remove + add
            self._apply(s, before, -1)
            self._apply(s, after, +1)
            return
        d0, d1, d2 = after[0] - before[0], after[1] - before[1], after[2] - before[2]
        for lv, ids in self.cols.level_arrays():
            gid = int(ids[s])
            if gid >= 0:
                row = self.agg[lv][gid]
                if d0:
                    row[0] += d0
                if d1:
                    row[1] += d1
                if d2:
                    row[2] += d2
        pool = after[3]
        if d0 and pool >= 0:
            sl = self._by_free[pool]
            sl.remove((before[0] << _KEY_SHIFT) | s)
            sl.add((after[0] << _KEY_SHIFT) | s)

    def _apply(self, s: int, c: tuple[int, int, int, int], sign: int) -> None:
        fg, whole, fm, pool = c
        if pool == -2:
            return
        for lv, ids in self.cols.level_arrays():
            gid = int(ids[s])
            if gid >= 0:
                row = self.agg[lv][gid]
                row[0] += sign * fg
                row[1] += sign * whole
                row[2] += sign * fm
        if pool >= 0:
            key = (fg << _KEY_SHIFT) | s
            if sign > 0:
                sl = self._by_free.get(pool)
                if sl is None:
                    sl = self._by_free[pool] = SortedList()
                sl.add(key)
            else:
                self._by_free[pool].remove(key)

    # ----------------------------------------------------------------- reading

    def __getattr__(self, name: str) -> Any:
        # per-slot columns are readable as snapshot attributes: snap.free_gpus, snap.leaf_id...
        if name in NodeColumns.SCALARS or name == "gpu_free":
            return getattr(self.__dict__["cols"], name)
        raise AttributeError(name)

    @property
    def num_slots(self) -> int:
        return len(self.names)

    def slot_of(self, name: str) -> int:
        return self.state.slot_of(name)

    def name_of(self, slot: int) -> str:
        name = self.names[slot] if 0 <= slot < len(self.names) else None
        if name is None:
            raise UnknownNodeError(f"<slot {slot}>")
        return name

    def group_id(self, level: str, name: str) -> int:
        """Id of group ``name`` of ``level`` in the ``<level>_id`` columns, -1 if unknown
        (ids are interned for good, so the state's table is the snapshot's)."""
        return self.state.group_id(level, name)

    def members(self, level: str, gid: int) -> IntArray:
        """Slots of live nodes in group ``gid`` of ``level`` (sorted; cached until nodes are
        added or removed)."""
        if self._members_version != self.state.membership_version:
            self._members.clear()
            self._members_version = self.state.membership_version
        key = (level, gid)
        arr = self._members.get(key)
        if arr is None:
            ids = getattr(self.cols, f"{level}_id")[: self.num_slots]
            arr = np.flatnonzero((ids == gid) & self.cols.alive[: self.num_slots]).astype(np.int64)
            self._members[key] = arr
        return arr

    def best_fit(self, pool: int, min_free_gpus: int) -> Iterator[int]:
        """Slots of ``pool`` with at least ``min_free_gpus`` whole free GPUs, fewest free
        first (best fit), ties by slot. O(log n) to the first answer."""
        sl = self._by_free.get(pool)
        if sl is None:
            return
        for key in sl.irange(minimum=min_free_gpus << _KEY_SHIFT):
            yield key & ((1 << _KEY_SHIFT) - 1)

    # ----------------------------------------------------------------- transactions

    def transaction(self) -> Transaction:
        """Open a (possibly nested) transaction. Use as a context manager: it rolls back on
        exception or when left without :meth:`Transaction.commit`."""
        self._undo.append({})
        return Transaction(self, len(self._undo))

    @property
    def in_transaction(self) -> bool:
        return bool(self._undo)

    # ----------------------------------------------------------------- change log

    @property
    def log_position(self) -> int:
        """Position in the change log now: pass it to :meth:`rows_changed_since` later."""
        return self._log_start + len(self._log)

    def rows_changed_since(self, position: int) -> IntArray | None:
        """Slots whose rows may have changed (allocate, release, rollback, refresh) since
        :attr:`log_position` was ``position``, with repeats; ``None`` when that is older
        than the kept log (then compare every row). Lets a reader that caches per-row values
        re-check O(changes) rows instead of all. Positions belong to this snapshot object
        (:attr:`token`)."""
        if position < self._log_start:
            return None
        return np.array(self._log[position - self._log_start :], dtype=np.int64)

    def _logged(self, slots: Iterable[int]) -> None:
        self._log.extend(slots)
        if len(self._log) > _CHANGE_LOG_KEEP:
            drop = len(self._log) - _CHANGE_LOG_KEEP // 2
            del self._log[:drop]
            self._log_start += drop

    def _save(self, s: int) -> None:
        if not self._undo:
            raise TransactionError("snapshot changes need an open transaction")
        self._logged((s,))
        frame = self._undo[-1]
        if s not in frame:
            frame[s] = self.cols.row(s)

    def _end(self, depth: int, commit: bool) -> None:
        if len(self._undo) != depth:
            raise TransactionError(
                f"transaction at depth {depth} ended while depth is {len(self._undo)}"
            )
        frame = self._undo.pop()
        if commit:
            if self._undo:
                outer = self._undo[-1]
                for s, row in frame.items():
                    outer.setdefault(s, row)
            else:
                self._local.update(frame)
        else:
            self._logged(frame)
            for s, row in frame.items():
                before = self._contrib(s)
                self.cols.set_row(s, row)
                self._shift(s, before)

    # ----------------------------------------------------------------- mutation

    def allocate(
        self,
        slot: int,
        gpu_mask: int = 0,
        milli: int = MILLI,
        nic_mask: int = 0,
        cpu_milli: int = 0,
        memory_mib: int = 0,
    ) -> None:
        """Take ``milli`` on each GPU of ``gpu_mask``, the NICs of ``nic_mask``, CPU and memory
        on node ``slot``. Raises AllocationConflictError (changing nothing) if any is not free.
        O(levels + log n)."""
        cols = self.cols
        bits = _mask_bits(gpu_mask)
        row = cols.gpu_free[slot]
        if not cols.alive[slot]:
            raise AllocationConflictError(f"slot {slot} holds no node")
        for g in bits:
            if row[g] < milli:
                raise AllocationConflictError(
                    f"{self.names[slot]}: GPU {g} has {row[g]} milli free, needs {milli}"
                )
        if int(cols.nic_mask[slot]) & nic_mask != nic_mask:
            raise AllocationConflictError(f"{self.names[slot]}: NICs {nic_mask:b} not free")
        if cols.cpu_free[slot] < cpu_milli or cols.mem_free[slot] < memory_mib:
            raise AllocationConflictError(f"{self.names[slot]}: not enough CPU or memory")
        self._save(slot)
        before = self._contrib(slot)
        for g in bits:
            row[g] -= milli
        self._recount(slot)
        cols.nic_mask[slot] = int(cols.nic_mask[slot]) & ~nic_mask
        cols.free_nics[slot] = _popcount(int(cols.nic_mask[slot]))
        cols.cpu_free[slot] -= cpu_milli
        cols.mem_free[slot] -= memory_mib
        self._shift(slot, before)

    def release(
        self,
        slot: int,
        gpu_mask: int = 0,
        milli: int = MILLI,
        nic_mask: int = 0,
        cpu_milli: int = 0,
        memory_mib: int = 0,
    ) -> None:
        """Give back what :meth:`allocate` took (e.g. a preemption what-if).

        Devices that are unhealthy in the truth stay unallocatable."""
        cols = self.cols
        rec = self.state._records.get(self.names[slot] or "")
        if rec is None:
            raise AllocationConflictError(f"slot {slot} holds no node")
        self._save(slot)
        before = self._contrib(slot)
        row = cols.gpu_free[slot]
        ok = rec.healthy
        for g in _mask_bits(gpu_mask):
            if ok and rec.gpu_healthy >> g & 1:
                row[g] = min(MILLI, row[g] + milli)
        self._recount(slot)
        if ok:
            cols.nic_mask[slot] = int(cols.nic_mask[slot]) | (nic_mask & rec.nic_healthy)
            cols.free_nics[slot] = _popcount(int(cols.nic_mask[slot]))
            cols.cpu_free[slot] += cpu_milli
            cols.mem_free[slot] += memory_mib
        self._shift(slot, before)

    def allocate_binding(self, b: Binding) -> None:
        self.allocate(
            self.slot_of(b.node),
            _bits_to_mask(b.gpus),
            b.gpu_milli,
            _bits_to_mask(b.nics),
            b.cpu_milli,
            b.memory_mib,
        )

    def release_binding(self, b: Binding) -> None:
        self.release(
            self.slot_of(b.node),
            _bits_to_mask(b.gpus),
            b.gpu_milli,
            _bits_to_mask(b.nics),
            b.cpu_milli,
            b.memory_mib,
        )

    def _recount(self, s: int) -> None:
        cols = self.cols
        row = cols.gpu_free[s]
        n = int(cols.gpus[s])
        mask = 0
        for g in range(n):
            if row[g] == MILLI:
                mask |= 1 << g
        cols.free_mask[s] = mask
        cols.free_gpus[s] = _popcount(mask)
        cols.free_milli[s] = int(row[:n].sum())
        cols.max_share[s] = int(row[:n].max()) if n else 0

    # ----------------------------------------------------------------- self-check

    def _check(self) -> None:
        """Recompute aggregates and the sorted index from the rows; raise on any difference."""
        n = self.num_slots
        cols = self.cols
        errors: list[str] = []
        live = np.flatnonzero(cols.alive[:n])
        for lv in LEVELS:
            expect = np.zeros_like(self.agg[lv])
            ids = getattr(cols, f"{lv}_id")
            for s in live.tolist():
                g = ids[s]
                if g < 0:
                    continue
                expect[g, 0] += cols.free_gpus[s]
                expect[g, 1] += int(cols.free_gpus[s] == cols.gpus[s] and cols.gpus[s] > 0)
                expect[g, 2] += cols.free_milli[s]
            if not np.array_equal(expect, self.agg[lv]):
                errors.append(f"aggregate {lv} differs")
        want: dict[int, list[int]] = {}
        for s in live.tolist():
            p = int(cols.pool_id[s])
            if p >= 0:
                want.setdefault(p, []).append((int(cols.free_gpus[s]) << _KEY_SHIFT) | s)
        for p in set(want) | set(self._by_free):
            if sorted(want.get(p, [])) != list(self._by_free.get(p, [])):
                errors.append(f"sorted index of pool {p} differs")
        for s in live.tolist():
            row = cols.gpu_free[s]
            g = int(cols.gpus[s])
            if (row[:g] < 0).any() or (row[:g] > MILLI).any() or row[g:].any():
                errors.append(f"slot {s}: gpu_free out of range {row}")
            mask = _bits_to_mask(i for i in range(g) if row[i] == MILLI)
            if mask != int(cols.free_mask[s]) or _popcount(mask) != cols.free_gpus[s]:
                errors.append(f"slot {s}: free mask inconsistent")
            if int(row[:g].sum()) != cols.free_milli[s]:
                errors.append(f"slot {s}: free_milli inconsistent")
            if (int(row[:g].max()) if g else 0) != cols.max_share[s]:
                errors.append(f"slot {s}: max_share inconsistent")
            if _popcount(int(cols.nic_mask[s])) != cols.free_nics[s]:
                errors.append(f"slot {s}: free_nics inconsistent")
        if errors:
            raise KantError("Snapshot._check failed:\n  " + "\n  ".join(errors))

    def same_as(self, other: Snapshot) -> list[str]:
        """Differences between two snapshots' rows and aggregates (empty if identical)."""
        n = max(self.num_slots, other.num_slots)
        diffs = self.cols.rows_equal(other.cols, n)
        if [x for x in self.names if x] != [x for x in other.names if x]:
            diffs.append("names")
        for lv in LEVELS:
            a, b = self.agg[lv], other.agg[lv]
            m = max(a.shape[0], b.shape[0])
            pa = np.zeros((m, 3), dtype=np.int64)
            pb = np.zeros((m, 3), dtype=np.int64)
            pa[: a.shape[0]] = a
            pb[: b.shape[0]] = b
            if not np.array_equal(pa, pb):
                diffs.append(f"agg[{lv}]")
        for p in set(self._by_free) | set(other._by_free):
            if list(self._by_free.get(p, [])) != list(other._by_free.get(p, [])):
                diffs.append(f"index[{p}]")
        return diffs


class Transaction:
    """A nestable unit of tentative change on a :class:`Snapshot`.

    ``commit()`` keeps the changes (folded into the enclosing transaction, if any);
    ``rollback()`` restores every touched row, aggregate and index entry exactly.
    """

    def __init__(self, snap: Snapshot, depth: int) -> None:
        self.snapshot = snap
        self.depth = depth
        self.open = True

    def commit(self) -> None:
        self._finish(True)

    def rollback(self) -> None:
        self._finish(False)

    def _finish(self, commit: bool) -> None:
        if not self.open:
            raise TransactionError("transaction already finished")
        self.snapshot._end(self.depth, commit)
        self.open = False

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.open:
            self.rollback()
