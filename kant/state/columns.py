"""The dense per-slot table of node facts and allocatable capacity (:class:`NodeColumns`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kant.bits import popcount
from kant.errors import ValidationError
from kant.model import MILLI

IntArray = npt.NDArray[np.int64]

NO_POD_LIMIT = 1 << 40
"""``pod_cap`` of a node without a pod limit (``NodeSpec.max_pods`` None): far above any
count of pods, so its ``pod_free`` (this less the pods there) never runs out and never caps
a fit count (:data:`kant.placement.context.UNBOUNDED` is below it; so is
:data:`kant.model.MAX_PODS_PER_NODE`)."""

LEVELS: tuple[str, ...] = ("pool", "leaf", "spine", "superspine", "hbd", "zone")
"""Group levels with interned ids and aggregates. ``pool`` is the GPU model (node pool)."""


def unknown_level(level: object) -> ValidationError:
    """The error for a group level that is not one of :data:`LEVELS`."""
    return ValidationError("level", level, f"must be one of {', '.join(LEVELS)}")


class NodeColumns:
    """Dense per-slot arrays: static node facts and allocatable capacity.

    Static: ``alive`` (slot holds a node), ``ready`` (alive and healthy: may take new
    pods), ``gpus`` (device count), ``gpu_cap_mask`` (all device bits), ``cpu_cap``,
    ``mem_cap``, ``nics``, ``pod_cap`` (capacities; ``pod_cap`` is the node's ``max_pods``,
    :data:`NO_POD_LIMIT` without one), group ids per level (``-1`` = none).
    Allocatable: ``gpu_free`` [slot, W] (free milli per device, 0 when unhealthy),
    ``free_mask`` (uint64, bit g = device g wholly free and healthy), ``free_gpus``
    (popcount of it), ``free_milli`` (sum of ``gpu_free``), ``max_share`` (the largest
    free milli on one device: a fractional pod of up to this fits), ``cpu_free``,
    ``mem_free``, ``nic_mask`` (free healthy NICs), ``free_nics``, ``pod_free`` (pods the
    node may still take: ``pod_cap`` less the pods there, 0 when unhealthy; below 0 while
    pods above a lowered ``max_pods`` stay, so that a release gives back a slot only once
    they are gone: readers take ``max(0, pod_free)`` as the slots free).
    """

    SCALARS: tuple[str, ...] = (
        "alive", "ready", "gpus", "gpu_cap_mask", "cpu_cap", "mem_cap", "nics", "pod_cap",
        "free_mask", "free_gpus", "free_milli", "max_share", "cpu_free", "mem_free",
        "nic_mask", "free_nics", "pod_free",
        *(f"{lv}_id" for lv in LEVELS),
    )  # fmt: skip

    def __init__(self, capacity: int = 64, width: int = 8) -> None:
        """An empty table: ``capacity`` slots, none alive, ``width`` devices per row."""
        self.capacity = capacity
        self.width = width
        self.alive = np.zeros(capacity, dtype=np.bool_)
        self.ready = np.zeros(capacity, dtype=np.bool_)
        self.gpus = np.zeros(capacity, dtype=np.int64)
        self.gpu_cap_mask = np.zeros(capacity, dtype=np.uint64)
        self.cpu_cap = np.zeros(capacity, dtype=np.int64)
        self.mem_cap = np.zeros(capacity, dtype=np.int64)
        self.nics = np.zeros(capacity, dtype=np.int64)
        self.pod_cap = np.zeros(capacity, dtype=np.int64)
        self.free_mask = np.zeros(capacity, dtype=np.uint64)
        self.free_gpus = np.zeros(capacity, dtype=np.int64)
        self.free_milli = np.zeros(capacity, dtype=np.int64)
        self.max_share = np.zeros(capacity, dtype=np.int64)
        self.cpu_free = np.zeros(capacity, dtype=np.int64)
        self.mem_free = np.zeros(capacity, dtype=np.int64)
        self.nic_mask = np.zeros(capacity, dtype=np.uint64)
        self.free_nics = np.zeros(capacity, dtype=np.int64)
        self.pod_free = np.zeros(capacity, dtype=np.int64)
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
        """Grow to at least ``capacity`` slots and ``width`` devices (amortised doubling);
        new slots are empty rows. Growing replaces the arrays: a reference taken before sees
        the old ones. O(slots x width) when it grows, O(1) otherwise."""
        if capacity <= self.capacity and width <= self.width:
            return
        for key in _CACHES:
            self.__dict__.pop(key, None)
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
        """Vectorised copy of rows ``idx`` from ``other`` (at least as many slots and devices
        as this table). O(len(idx) x columns)."""
        for name in self.SCALARS:
            getattr(self, name)[idx] = getattr(other, name)[idx]
        self.gpu_free[idx] = other.gpu_free[idx]

    def copy_few_from(
        self, other: NodeColumns, rows: list[int], *, same_nodes: bool = False
    ) -> None:
        """:meth:`copy_rows_from` element by element, for a few rows (numpy's per-call cost
        dominates there). ``same_nodes``: each row holds the node it held when last copied
        (no node came or went since), so only the :attr:`ALLOCATABLE` columns and
        ``gpu_free`` can differ and only those are copied. O(len(rows) x columns)."""
        mine, theirs = self.views(), other.views()
        pairs = (
            zip(mine.allocatable, theirs.allocatable, strict=True)
            if same_nodes
            else zip(mine.scalars, theirs.scalars, strict=True)
        )
        for a, b in pairs:
            for s in rows:
                a[s] = b[s]
        gf, ogf = mine.gpu_flat, theirs.gpu_flat
        w, ow = self.width, other.width
        width = min(w, ow)
        for s in rows:
            gf[s * w : s * w + width] = ogf[s * ow : s * ow + width]

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

    def views(self) -> RowViews:
        """Memoryviews of the arrays (cached until they grow), for code that reads or
        writes a few elements of a row: see :class:`RowViews`."""
        cached: RowViews | None = self.__dict__.get("_views")
        if cached is None:
            cached = self.__dict__["_views"] = RowViews(self)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        """The arrays without the cached lists and views (memoryviews do not pickle)."""
        return {k: v for k, v in self.__dict__.items() if k not in _CACHES}

    USAGE: tuple[str, ...] = (
        "free_mask", "free_gpus", "free_milli", "max_share", "cpu_free", "mem_free",
        "nic_mask", "free_nics", "pod_free",
    )  # fmt: skip
    """The scalar columns an allocation or a release changes (with ``gpu_free``)."""

    ALLOCATABLE: tuple[str, ...] = ("ready", *USAGE)
    """The scalar columns that change while a slot holds one node (its health and usage,
    with ``gpu_free``); the others are set when a node is added or removed."""

    def usage(self, slot: int) -> tuple[Any, ...]:
        """Row ``slot``'s :attr:`USAGE` values and its ``gpu_free`` (copied): an undo record
        for :meth:`set_usage`. O(columns)."""
        v = self.views()
        w = self.width
        return (*[mv[slot] for mv in v.usage], v.gpu_flat[slot * w : slot * w + w].tolist())

    def set_usage(self, slot: int, values: tuple[Any, ...]) -> None:
        """Write ``values`` (as :meth:`usage` returns them) back into row ``slot``."""
        v = self.views()
        for mv, x in zip(v.usage, values, strict=False):
            mv[slot] = x
        gf, base = v.gpu_flat, slot * self.width
        for g, x in enumerate(values[-1]):
            gf[base + g] = x

    def row(self, slot: int) -> tuple[Any, ...]:
        """All values of row ``slot`` (every :attr:`SCALARS` column's, then ``gpu_free``
        copied), as :meth:`set_row` takes them. O(columns)."""
        return (*[a[slot] for a in self.arrays()], self.gpu_free[slot].copy())

    def set_row(self, slot: int, values: tuple[Any, ...]) -> None:
        """Write ``values`` (every :attr:`SCALARS` column's, then ``gpu_free``'s) into row
        ``slot``. O(columns)."""
        for a, v in zip(self.arrays(), values, strict=False):
            a[slot] = v
        self.gpu_free[slot] = values[-1]

    def clear_row(self, slot: int) -> None:
        """Make ``slot`` an empty row: not alive, every count and mask 0, group ids -1."""
        vals: list[Any] = [-1 if n.endswith("_id") else 0 for n in self.SCALARS]
        vals[0] = False  # alive
        self.set_row(slot, (*vals, np.zeros(self.width, dtype=np.int64)))

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


_CACHES = ("_arrays", "_levels", "_views")


def gpu_counts(free: list[int]) -> tuple[int, int, int, int]:
    """A row's counts from its GPUs' free milli (``free``, one value per GPU of the node):
    the wholly-free mask, the whole free GPUs, the free milli and the largest free share."""
    mask = 0
    for g, f in enumerate(free):
        if f == MILLI:
            mask |= 1 << g
    return mask, popcount(mask), sum(free), max(free, default=0)


class RowViews:
    """Memoryviews over a :class:`NodeColumns`' arrays, one attribute per scalar column
    (``v.free_gpus[slot]``), ``gpu_free`` two-dimensional (``v.gpu_free[slot, g]``) and
    ``gpu_flat`` the same elements in one dimension (row ``slot`` is
    ``gpu_flat[slot * width : (slot + 1) * width]``: a slice's ``tolist()`` reads a whole row
    at a fraction of the cost of reading its elements one by one), ``level_ids`` the
    group-id columns in :data:`LEVELS` order, ``usage`` the :attr:`NodeColumns.USAGE`
    columns and ``allocatable`` the :attr:`NodeColumns.ALLOCATABLE` ones in that order,
    ``scalars`` every scalar column in :attr:`NodeColumns.SCALARS` order.

    Reading an element gives a Python ``int`` (``bool`` for ``alive`` and ``ready``) and
    writing one takes it, without the numpy scalar that ``array[slot]`` boxes: about a
    third of the cost, which is what a placement's one-row updates spend their time on.
    The views see the arrays they were made from: take them from :meth:`NodeColumns.views`
    (which makes new ones when the arrays grow), never keep them across a growth."""

    alive: memoryview
    ready: memoryview
    gpus: memoryview
    gpu_cap_mask: memoryview
    cpu_cap: memoryview
    mem_cap: memoryview
    nics: memoryview
    pod_cap: memoryview
    free_mask: memoryview
    free_gpus: memoryview
    free_milli: memoryview
    max_share: memoryview
    cpu_free: memoryview
    mem_free: memoryview
    nic_mask: memoryview
    free_nics: memoryview
    pod_free: memoryview
    pool_id: memoryview
    leaf_id: memoryview
    spine_id: memoryview
    superspine_id: memoryview
    hbd_id: memoryview
    zone_id: memoryview
    gpu_free: memoryview
    gpu_flat: memoryview
    width: int
    level_ids: tuple[memoryview, ...]
    usage: tuple[memoryview, ...]
    allocatable: tuple[memoryview, ...]
    scalars: tuple[memoryview, ...]

    def __init__(self, cols: NodeColumns) -> None:
        for name in NodeColumns.SCALARS:
            setattr(self, name, getattr(cols, name).data)
        self.gpu_free = cols.gpu_free.data
        # one dimension over the same buffer (a cast never copies: it raises if the array
        # is not C-contiguous, which np.zeros and every growth make it)
        self.gpu_flat = self.gpu_free.cast("B").cast("q")  # (int64 on every platform)
        self.width = cols.width
        self.level_ids = tuple(getattr(cols, f"{lv}_id").data for lv in LEVELS)
        self.usage = tuple(getattr(self, name) for name in NodeColumns.USAGE)
        self.allocatable = tuple(getattr(self, name) for name in NodeColumns.ALLOCATABLE)
        self.scalars = tuple(getattr(self, name) for name in NodeColumns.SCALARS)
