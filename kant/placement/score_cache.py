"""A generic per-node-row score cache: values per (key, node row), recomputed only for the
rows whose free resources changed.

Scores that depend only on a node's free GPUs (per device), CPU, memory and pool -- FGD's
fragmentation growth is one -- need not be recomputed for the many nodes a placement did not
touch. :class:`RowVersions` finds the rows that changed since the last call from the
snapshot's change log; :class:`ScoreCache` keeps one table per key (e.g. per pod class) and
calls a ``fill`` function for the stale rows only, evaluating alike rows once
(:func:`alike_rows`). :class:`Alternatives` builds the hypothetical rows "this node with the
pod placed" that such scores compare with the rows as they are.

Costs: :meth:`RowVersions.sync` O(rows logged since the last call); :meth:`ScoreCache.get`
O(len(slots)) numpy plus ``fill`` of the stale rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs
import numpy as np
import numpy.typing as npt

from kant.placement.context import FloatArray, IntArray, PodRequest
from kant.state import NodeColumns, Snapshot


class RowVersions:
    """Which node rows changed between calls. A private copy of the free GPU, CPU and
    memory columns is compared with the snapshot's on the rows its change log names
    (:meth:`~kant.state.Snapshot.rows_changed_since`; every row when the log cannot say),
    so a row changed and rolled back keeps its version. A new snapshot, or nodes coming or
    going, starts a new *epoch* (every cache entry is stale)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.clock = 0
        self._key: tuple[int, int, int, int] = (-1, -1, -1, -1)
        self._position = -1
        self.version = np.zeros(0, dtype=np.int64)
        self._g = np.zeros((0, 0), dtype=np.int64)
        self._c = np.zeros(0, dtype=np.int64)
        self._m = np.zeros(0, dtype=np.int64)

    def sync(self, snap: Snapshot) -> IntArray:
        """Bump the version of every row of ``snap`` whose free GPUs, CPU or memory differ
        from the copy (then update the copy); returns the versions per slot. O(1) when the
        change log is where it was, else O(rows logged since) numpy."""
        cols = snap.cols
        n = snap.num_slots
        key = (snap.token, n, cols.width, snap.membership_version)
        if key == self._key and snap.log_position == self._position:
            return self.version  # no row can have changed since the last call
        if key != self._key:
            self._key = key
            self._position = snap.log_position
            self.epoch += 1
            self.version = np.zeros(n, dtype=np.int64)
            self._g = cols.gpu_free[:n].copy()
            self._c = cols.cpu_free[:n].copy()
            self._m = cols.mem_free[:n].copy()
            return self.version
        logged = snap.rows_changed_since(self._position)
        self._position = snap.log_position
        idx = np.arange(n) if logged is None else logged  # repeats do no harm
        changed = (cols.gpu_free[idx] != self._g[idx]).any(axis=1)
        changed |= cols.cpu_free[idx] != self._c[idx]
        changed |= cols.mem_free[idx] != self._m[idx]
        idx = idx[changed]
        if idx.shape[0]:
            self.clock += 1
            self.version[idx] = self.clock
            self._g[idx] = cols.gpu_free[idx]
            self._c[idx] = cols.cpu_free[idx]
            self._m[idx] = cols.mem_free[idx]
        return self.version


class _Table:
    """Per-node values (``width`` per node) computed at a row version (``at == -1``:
    never)."""

    __slots__ = ("at", "epoch", "values")

    def __init__(self, n: int, epoch: int, width: int) -> None:
        self.epoch = epoch
        self.values = np.zeros((n, width), dtype=np.float64)
        self.at = np.full(n, -1, dtype=np.int64)


class ScoreCache:
    """Values per (``key``, node row), kept until the row's free resources change.

    Call :meth:`sync` with the snapshot before reading (once per placement question is
    enough: it finds the rows changed since the last call); :meth:`get` then returns cached
    values for current rows and calls ``fill`` for the stale ones only. The values of a key
    must depend only on each node's free GPUs, CPU, memory and pool (what
    :class:`RowVersions` compares). Reads the snapshot, never changes it."""

    def __init__(self) -> None:
        self.rows = RowVersions()
        self._tables: dict[Any, _Table] = {}

    def sync(self, snap: Snapshot) -> IntArray:
        """Bring the row versions up to date with ``snap``; returns them (per slot)."""
        return self.rows.sync(snap)

    def get(
        self,
        key: Any,
        snap: Snapshot,
        slots: IntArray,
        fill: Callable[[IntArray], FloatArray],
        width: int = 1,
    ) -> FloatArray:
        """``fill(stale_slots) -> values [stale, width]`` for slots whose rows changed since
        they were cached (row versions as of the last :meth:`sync`); cached values
        otherwise. Returns [len(slots), width]. Batches of at least ``DEDUP_MIN`` stale
        rows are filled once per distinct row."""
        rows = self.rows
        version = rows.version
        c = self._tables.get(key)
        n = version.shape[0]
        if c is None or c.epoch != rows.epoch or c.values.shape != (n, width):
            c = self._tables[key] = _Table(n, rows.epoch, width)
        stale = slots[c.at[slots] != version[slots]]
        if stale.shape[0] >= DEDUP_MIN:
            first, inverse = alike_rows(snap, stale)
            c.values[stale] = fill(stale[first])[inverse]
            c.at[stale] = version[stale]
        elif stale.shape[0]:
            c.values[stale] = fill(stale)
            c.at[stale] = version[stale]
        return c.values[slots]

    def fresh(self, key: Any, slot: int) -> FloatArray | None:
        """The cached values of ``slot`` under ``key`` if they are current as of the last
        :meth:`sync`, else None. O(1)."""
        c = self._tables.get(key)
        rows = self.rows
        if c is None or c.epoch != rows.epoch or c.at[slot] != rows.version[slot]:
            return None
        row: FloatArray = c.values[slot]
        return row


DEDUP_MIN: Final = 32
"""Batches of at least this many nodes are evaluated once per distinct node row."""


def alike_rows(snap: Snapshot, slots: IntArray) -> tuple[IntArray, IntArray]:
    """Group nodes whose free GPUs, CPU, memory and pool are identical: ``(first, inverse)``
    with ``slots[first]`` one node per group and ``inverse[i]`` the group of ``slots[i]``.
    O(n log n) (one lexsort)."""
    cols = snap.cols
    rows = np.column_stack(
        (cols.pool_id[slots], cols.cpu_free[slots], cols.mem_free[slots], cols.gpu_free[slots])
    )
    return row_groups(rows)


def row_groups(rows: IntArray) -> tuple[IntArray, IntArray]:
    """Identical rows of ``rows`` [n, k]: ``(first, inverse)`` with ``rows[first]`` one row
    per group (in sorted order) and ``inverse[i]`` the group of row ``i``. One lexsort."""
    order = np.lexsort(rows.T[::-1])
    sorted_rows = rows[order]
    new = np.ones(order.shape[0], dtype=np.bool_)
    new[1:] = (sorted_rows[1:] != sorted_rows[:-1]).any(axis=1)
    group_sorted = np.cumsum(new) - 1
    inverse = np.empty_like(group_sorted)
    inverse[order] = group_sorted
    return order[new], inverse


@attrs.frozen(eq=False)
class Alternatives:
    """The places a pod could take on ``n`` node rows, as hypothetical rows.

    ``g[i]`` is row ``row[i]`` with the pod placed as alternative column ``col[i]`` (of
    ``width``). A shared pod has one column per GPU, but only the first GPU of each free
    value is evaluated (``same[r, d]``: the column whose value GPU ``d`` shares; ``ok``:
    the GPUs the share fits on); whole-GPU and CPU-only pods have one column."""

    g: IntArray
    row: IntArray
    col: IntArray
    width: int
    same: IntArray | None = None
    ok: npt.NDArray[np.bool_] | None = None

    def before_after(
        self, cols: NodeColumns, s: IntArray, req: PodRequest, use: IntArray | None = None
    ) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """Free GPU milli, CPU, memory and pool of node slots ``s`` as they are, followed by
        the alternatives (``use``: those indices only) with the pod placed: one batch."""
        r = self.row if use is None else self.row[use]
        after = self.g if use is None else self.g[use]
        cpu, mem, pool = cols.cpu_free[s], cols.mem_free[s], cols.pool_id[s]
        return (
            np.concatenate((cols.gpu_free[s], after)),
            np.concatenate((cpu, cpu[r] - req.cpu)),
            np.concatenate((mem, mem[r] - req.mem)),
            np.concatenate((pool, pool[r])),
        )

    def scatter(
        self, values: FloatArray, missing: float, use: IntArray | None = None
    ) -> FloatArray:
        """[n, width]: ``values`` at the evaluated alternatives (``use``: those only), copied
        to the GPUs that share them; ``missing`` elsewhere."""
        n = self.ok.shape[0] if self.ok is not None else self.row.shape[0]
        out = np.full((n, self.width), missing)
        r = self.row if use is None else self.row[use]
        c = self.col if use is None else self.col[use]
        out[r, c] = values
        return self.spread(out, missing)

    def spread(self, values: FloatArray, missing: float) -> FloatArray:
        """``values`` [n, width], set at the evaluated columns, copied to the GPUs that
        share them; ``missing`` where the share does not fit."""
        if self.same is None or self.ok is None:
            return values
        n = values.shape[0]
        return np.where(self.ok, values[np.arange(n)[:, None], self.same], missing)
