"""Snapshot (the incremental, transactional view a cycle works on) and Transaction.

:meth:`ClusterState.snapshot` returns the state's :class:`Snapshot`, refreshed in place: only
the rows of nodes changed since the last refresh (plus rows the previous cycle changed
tentatively) are copied, so a refresh costs O(changed nodes), not O(cluster) — the
kube-scheduler ``UpdateSnapshot`` idea, and section 3.4.3 of the Kant paper. The snapshot also
keeps per-group aggregates (pool, leaf/NodeNetGroup, spine, superspine, HBD) updated by deltas
and, per pool, a sorted index of nodes by whole free GPUs for best-fit queries.

Changes to a snapshot happen inside a :class:`Transaction` (nestable); rolling one back
restores every touched row, aggregate and index entry exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from sortedcontainers import SortedList

from kant.bits import bits as _mask_bits
from kant.bits import mask_of as _bits_to_mask
from kant.bits import popcount as _popcount
from kant.errors import (
    AllocationConflictError,
    InvalidResourcesError,
    InvariantError,
    TransactionError,
    UnknownNodeError,
    ValidationError,
)
from kant.model import MILLI, Binding, Job, PodId, is_whole
from kant.state.columns import LEVELS, IntArray, NodeColumns, gpu_counts, unknown_level

if TYPE_CHECKING:
    from kant.state.cluster import ClusterState

_KEY_SHIFT = 32  # sorted index key: free_gpus << 32 | slot
_POOL_SHIFT = 48  # an indexed entry, remembered per slot: pool << 48 | key
_KEY_MASK = (1 << _POOL_SHIFT) - 1


def _entry(s: int, free_gpus: int, pool: int) -> int:
    """Row ``s``'s index entry as a row remembers it: ``pool << 48 | free_gpus << 32 | s``,
    -1 for a row in no pool (not in the index)."""
    return (pool << _POOL_SHIFT) | (free_gpus << _KEY_SHIFT) | s if pool >= 0 else -1


_SNAPSHOT_TOKENS: Final = itertools.count()
_CONTENTS: Final = itertools.count()  # content versions (one counter for every snapshot)
_POD_FREE: Final = NodeColumns.USAGE.index("pod_free")  # (its place in an undo record's row)
_CHANGE_LOG_KEEP: Final = 1 << 16
"""Entries of a snapshot's change log kept before the older half is dropped."""
_FEW_ROWS: Final = 24
"""Up to this many rows, a refresh copies rows and moves aggregates row by row, through the
columns' memoryviews (see _GroupIndex.replace_rows); more in one numpy pass per column and
level. The measured crossover: 16 rows cost 170-190 us row by row against 250-275 us in
numpy, 32 rows 340 against 265-290."""


class _GroupIndex:
    """The per-group aggregates and the per-pool best-fit index of a snapshot's rows, kept by
    deltas as rows change: the snapshot's own bookkeeping (see :class:`Snapshot`).

    ``agg[level]``: int64 [groups, 3], whole free GPUs, wholly free nodes and free milli of
    the live rows of each group. ``by_free[pool]``: ``free_gpus << 32 | slot`` of every live
    row of the pool, sorted. ``cols`` are the snapshot's rows.

    The aggregates move with every row change, and so does the sorted index, except while
    ``deferred`` (:meth:`Snapshot.deferred_index`): a changed row then remembers the entry
    it had in the index and the one it calls for now, and the entries move at the next
    read (:attr:`by_free`) or when the deferral ends, so a row that changes and changes back
    in between (a hold given back for a placement attempt that is rolled back, a what-if)
    costs the index nothing. Outside, moving an entry at once is cheaper than remembering
    it (most changes are read before the row changes again).
    """

    def __init__(self, cols: NodeColumns, groups: Mapping[str, int]) -> None:
        """Empty aggregates for ``groups[level]`` groups per level; :meth:`build` fills them."""
        self.cols = cols
        self.agg: dict[str, IntArray] = {
            lv: np.zeros((groups[lv], 3), dtype=np.int64) for lv in LEVELS
        }
        self._by_free: dict[int, SortedList] = {}
        # rows changed since the index was last read: the entry each had in the index then,
        # and the one its values call for now (see _entry; -1: none)
        self._was: dict[int, int] = {}
        self._now: dict[int, int] = {}
        self.deferred = 0  # open deferrals (Snapshot.deferred_index)
        self._flat: dict[str, memoryview] = {}  # per level, its aggregate as one flat view
        self._cells: dict[int, list[tuple[memoryview, int]]] = {}

    @property
    def by_free(self) -> dict[int, SortedList]:
        """The sorted index per pool, brought up to date with the rows first."""
        if self._was:
            self.settle()
        return self._by_free

    def _moved(self, s: int, was: int, now: int) -> None:
        """Row ``s``'s index entry goes from ``was`` to ``now`` (:func:`_entry`): at once,
        or while deferred at the next read (only the first ``was`` since then counts: it is
        the one in the index)."""
        if self.deferred:
            if s not in self._was:
                self._was[s] = was
            self._now[s] = now
        else:
            self._move(was, now)

    def _move(self, was: int, now: int) -> None:
        """Replace index entry ``was`` by ``now`` (:func:`_entry`; -1: none)."""
        if was >= 0:
            self._by_free[was >> _POOL_SHIFT].remove(was & _KEY_MASK)
        if now >= 0:
            pool = now >> _POOL_SHIFT
            sl = self._by_free.get(pool)
            if sl is None:
                sl = self._by_free[pool] = SortedList()
            sl.add(now & _KEY_MASK)

    def settle(self) -> None:
        """Move the index entries of the rows changed (while deferred) since the last read,
        where they differ."""
        now = self._now
        for s, have in self._was.items():
            if now[s] != have:
                self._move(have, now[s])
        self._was.clear()
        now.clear()

    def _flats(self) -> dict[str, memoryview]:
        """Per level, its aggregate as one flat memoryview (group ``g``'s cells at ``3 * g``,
        ``+ 1``, ``+ 2``): made again when the aggregates grow."""
        if not self._flat:
            self._flat = {lv: self.agg[lv].reshape(-1).data for lv in LEVELS}
        return self._flat

    def _row_cells(self, s: int) -> list[tuple[memoryview, int]]:
        """Where row ``s`` counts in the aggregates: per level of a group it belongs to, the
        level's flat aggregate (:meth:`_flats`) and the position of the group's first cell
        in it. Kept per slot until the aggregates grow (:meth:`grow`) or a slot may hold
        another node (the rows are replaced while nodes came or went)."""
        flat = self._flats()
        out = [
            (flat[lv], 3 * gid)
            for lv, ids in zip(LEVELS, self.cols.views().level_ids, strict=True)
            if (gid := ids[s]) >= 0
        ]
        self._cells[s] = out
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the cached views (memoryviews do not pickle), outside any
        deferral: a copy is not inside the original's deferrals (:meth:`__setstate__`
        settles the copy's index). The original is not touched: its pending moves stay
        pending until its own next read."""
        return {**self.__dict__, "_flat": {}, "_cells": {}, "deferred": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy: the moves the original had pending are made in the copy's index."""
        self.__dict__.update(state)
        self.settle()

    def build(self, n: int) -> None:
        """Add the contributions of the live rows among the first ``n`` slots."""
        for s in range(n):
            if self.cols.alive[s]:
                self.apply(s, self.contrib(s), +1)

    def grow(self, level: str, groups: int) -> None:
        """Make room for ``groups`` groups at ``level`` (new groups start at zero)."""
        if groups > self.agg[level].shape[0]:
            grown = np.zeros((groups, 3), dtype=np.int64)
            grown[: self.agg[level].shape[0]] = self.agg[level]
            self.agg[level] = grown
            self._flat, self._cells = {}, {}  # (views of the old aggregates)

    def _row_values(self, idx: IntArray) -> tuple[list[IntArray], IntArray, IntArray]:
        """Rows ``idx``'s contributions as they are now: per level the group ids (-1: none,
        or the row is dead), the (free GPUs, wholly free, free milli) rows, and the pool ids
        (-1: none or dead)."""
        cols = self.cols
        alive = cols.alive[idx]
        fg = cols.free_gpus[idx]
        g = cols.gpus[idx]
        vals = np.stack(
            (fg, ((fg == g) & (g > 0)).astype(np.int64), cols.free_milli[idx]), axis=1
        ).astype(np.int64)
        gids = [np.where(alive, ids[idx], -1) for _lv, ids in cols.level_arrays()]
        return gids, vals, np.where(alive, cols.pool_id[idx], -1)

    def replace_rows(self, idx: IntArray, copy: Callable[[], None]) -> None:
        """Move rows ``idx``'s contributions from their values before ``copy()`` (which
        rewrites those rows) to their values after it: index entries move only for rows
        whose key changed. A few rows go one by one (numpy's per-call cost would dominate),
        more in one pass per level. O(k x (levels + log n))."""
        if len(idx) <= _FEW_ROWS:
            self.replace_few(idx.tolist(), copy)
            return
        old_gids, old_vals, old_pools = self._row_values(idx)
        copy()
        self._cells.clear()  # (a slot may hold another node now)
        new_gids, new_vals, new_pools = self._row_values(idx)
        for (lv, _ids), og, ng in zip(self.cols.level_arrays(), old_gids, new_gids, strict=True):
            same = og == ng
            if same.all():
                d = new_vals - old_vals
                keep = (og >= 0) & d.any(axis=1)
                if keep.any():
                    np.add.at(self.agg[lv], og[keep], d[keep])
                continue
            ho, hn = og >= 0, ng >= 0
            if ho.any():
                np.add.at(self.agg[lv], og[ho], -old_vals[ho])
            if hn.any():
                np.add.at(self.agg[lv], ng[hn], new_vals[hn])
        moved = (old_pools != new_pools) | (old_vals[:, 0] != new_vals[:, 0])
        if not moved.any():
            return
        rows = zip(
            idx[moved].tolist(), old_pools[moved].tolist(), old_vals[moved, 0].tolist(),
            new_pools[moved].tolist(), new_vals[moved, 0].tolist(), strict=True,
        )  # fmt: skip
        if self.deferred:
            for s, op, of, np_, nf in rows:
                self._moved(s, _entry(s, of, op), _entry(s, nf, np_))
            return
        by_free = self._by_free  # (_moved at once, inlined: a refresh moves many rows)
        for s, op, of, np_, nf in rows:
            if op >= 0:
                by_free[op].remove((of << _KEY_SHIFT) | s)
            if np_ >= 0:
                sl = by_free.get(np_)
                if sl is None:
                    sl = by_free[np_] = SortedList()
                sl.add((nf << _KEY_SHIFT) | s)

    def replace_few(
        self, rows: list[int], copy: Callable[[], None], *, same_nodes: bool = False
    ) -> None:
        """:meth:`replace_rows` row by row (``rows``: a list of slots). ``same_nodes``: every
        slot holds the node it held (no node added or removed since the rows were last
        synced), so no row's groups change."""
        if same_nodes:
            counts = [self.contrib(s) for s in rows]
            copy()
            for s, c in zip(rows, counts, strict=True):
                self.shift(s, c)
            return
        level_ids = self.cols.views().level_ids
        before = [(self.contrib(s), [ids[s] for ids in level_ids]) for s in rows]
        copy()
        self._cells.clear()  # (a slot may hold another node now)
        level_ids = self.cols.views().level_ids  # (the copy may have grown the arrays)
        for s, (c, gids) in zip(rows, before, strict=True):
            if all(ids[s] == g for ids, g in zip(level_ids, gids, strict=True)):
                self.shift(s, c)  # the usual case: same node, new counts
            else:  # the slot now holds another node: out with the old groups, in with the new
                self._add(s, c, gids, -1)
                self.apply(s, self.contrib(s), +1)

    def contrib(self, s: int) -> tuple[int, int, int, int]:
        """(free GPUs, wholly free?, free milli, pool id) of row ``s``; pool -2 if dead."""
        v = self.cols.views()
        if not v.alive[s]:
            return (0, 0, 0, -2)
        fg = v.free_gpus[s]
        g = v.gpus[s]
        return (fg, int(fg == g and g > 0), v.free_milli[s], v.pool_id[s])

    def shift(
        self,
        s: int,
        before: tuple[int, int, int, int],
        after: tuple[int, int, int, int] | None = None,
    ) -> None:
        """Move row ``s``'s contributions from ``before`` to its current values (``after``
        when the caller knows them; one pass; the group ids of a live row do not change
        inside a snapshot)."""
        if after is None:
            after = self.contrib(s)
        if after == before:
            return
        if before[3] != after[3]:  # the row came alive or died: full remove + add
            self.apply(s, before, -1)
            self.apply(s, after, +1)
            return
        d0, d1, d2 = after[0] - before[0], after[1] - before[1], after[2] - before[2]
        cells = self._cells.get(s)
        if cells is None:
            cells = self._row_cells(s)
        for flat, i in cells:
            if d0:
                flat[i] += d0
            if d1:
                flat[i + 1] += d1
            if d2:
                flat[i + 2] += d2
        pool = after[3]
        if d0 and pool >= 0:  # (_moved, inlined: every allocation and release ends here)
            if self.deferred:
                if s not in self._was:
                    self._was[s] = (pool << _POOL_SHIFT) | (before[0] << _KEY_SHIFT) | s
                self._now[s] = (pool << _POOL_SHIFT) | (after[0] << _KEY_SHIFT) | s
            else:
                sl = self._by_free[pool]
                sl.remove((before[0] << _KEY_SHIFT) | s)
                sl.add((after[0] << _KEY_SHIFT) | s)

    def apply(self, s: int, c: tuple[int, int, int, int], sign: int) -> None:
        """Add (sign=+1) or remove (-1) contribution ``c`` (from :meth:`contrib`) of row ``s``."""
        self._add(s, c, [ids[s] for ids in self.cols.views().level_ids], sign)

    def _add(self, s: int, c: tuple[int, int, int, int], gids: list[int], sign: int) -> None:
        """:meth:`apply` with the row's group ids per level given (``gids``)."""
        fg, whole, fm, pool = c
        if pool == -2:
            return
        flats = self._flats()
        for lv, gid in zip(LEVELS, gids, strict=True):
            if gid >= 0:
                flat, i = flats[lv], 3 * gid
                flat[i] += sign * fg
                flat[i + 1] += sign * whole
                flat[i + 2] += sign * fm
        if pool >= 0:
            if sign > 0:
                self._moved(s, -1, _entry(s, fg, pool))  # (a row not in the index)
            else:
                self._moved(s, _entry(s, fg, pool), -1)

    def errors(self, live: list[int]) -> list[str]:
        """Recompute the aggregates and the index from the live rows ``live``; name every
        one that differs (empty if none does)."""
        cols = self.cols
        errors: list[str] = []
        for lv in LEVELS:
            expect = np.zeros_like(self.agg[lv])
            ids = getattr(cols, f"{lv}_id")
            for s in live:
                g = ids[s]
                if g < 0:
                    continue
                expect[g, 0] += cols.free_gpus[s]
                expect[g, 1] += int(cols.free_gpus[s] == cols.gpus[s] and cols.gpus[s] > 0)
                expect[g, 2] += cols.free_milli[s]
            if not np.array_equal(expect, self.agg[lv]):
                errors.append(f"aggregate {lv} differs")
        want: dict[int, list[int]] = {}
        for s in live:
            p = int(cols.pool_id[s])
            if p >= 0:
                want.setdefault(p, []).append((int(cols.free_gpus[s]) << _KEY_SHIFT) | s)
        for p in set(want) | set(self.by_free):
            if sorted(want.get(p, [])) != list(self.by_free.get(p, [])):
                errors.append(f"sorted index of pool {p} differs")
        return errors

    def differences(self, other: _GroupIndex) -> list[str]:
        """Names of the aggregates and index entries that differ from ``other``'s (a group
        missing on one side counts as zeros)."""
        diffs: list[str] = []
        for lv in LEVELS:
            a, b = self.agg[lv], other.agg[lv]
            m = max(a.shape[0], b.shape[0])
            pa = np.zeros((m, 3), dtype=np.int64)
            pb = np.zeros((m, 3), dtype=np.int64)
            pa[: a.shape[0]] = a
            pb[: b.shape[0]] = b
            if not np.array_equal(pa, pb):
                diffs.append(f"agg[{lv}]")
        for p in set(self.by_free) | set(other.by_free):
            if list(self.by_free.get(p, [])) != list(other.by_free.get(p, [])):
                diffs.append(f"index[{p}]")
        return diffs


class _Column:
    """A snapshot attribute that reads the column of the same name: ``snap.free_gpus`` is
    ``snap.cols.free_gpus`` (the live array, see :class:`NodeColumns`)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, snap: Snapshot | None, owner: type | None = None) -> Any:
        """The column array of ``snap`` (this descriptor when read on the class)."""
        return self if snap is None else getattr(snap.cols, self.name)


def _check_slot(slot: object) -> None:
    """Refuse (AllocationConflictError, as for a slot past the rows) a slot of
    :meth:`Snapshot.allocate` or :meth:`Snapshot.release` that is no int (NumPy's are):
    ``release(None)`` raised TypeError, ``allocate(True)`` read slot 1."""
    if type(slot) is not int and not is_whole(slot):  # (the usual call: one type test)
        raise AllocationConflictError(f"slot {slot!r} holds no node")


def _check_amounts(
    gpu_mask: object,
    milli: object,
    nic_mask: object,
    cpu_milli: object,
    memory_mib: object,
    pods: object,
) -> None:
    """Refuse (InvalidResourcesError naming it) an amount or device mask of
    :meth:`Snapshot.allocate` or :meth:`Snapshot.release` that is no whole number (NumPy's
    integers are) or is below 0: ``cpu_milli=1.5`` took the GPUs and then failed in the
    columns, leaving the totals wrong; a negative mask never ended; a negative release added
    to the free amounts."""
    if (
        type(gpu_mask) is int
        and type(milli) is int
        and type(nic_mask) is int
        and type(cpu_milli) is int
        and type(memory_mib) is int
        and type(pods) is int
        and gpu_mask >= 0
        and milli >= 0
        and nic_mask >= 0
        and cpu_milli >= 0
        and memory_mib >= 0
        and pods >= 0
    ):
        return  # (the usual call: six type tests and six comparisons)
    amounts = {
        "gpu_mask": gpu_mask,
        "milli": milli,
        "nic_mask": nic_mask,
        "cpu_milli": cpu_milli,
        "memory_mib": memory_mib,
        "pods": pods,
    }
    for field, n in amounts.items():
        if not is_whole(n):
            raise InvalidResourcesError(field, n, "must be a whole number")
        if n < 0:
            raise InvalidResourcesError(field, n, "must be >= 0")


def _changed_slots(changed: object, n: int) -> IntArray:
    """The slots of :meth:`Snapshot.refresh`'s ``changed`` as a sorted int64 array of
    distinct slots, each below ``n`` (the state's slot count); ValidationError naming
    ``changed`` for anything else (``refresh([0])`` raised AttributeError). An int64 array
    (:meth:`ClusterState.take_changes`'s, each cycle) is taken as it is when sorted and
    distinct, as that one is (one O(k) comparison); any other sequence of ints is copied,
    sorted and deduped."""
    if (
        isinstance(changed, np.ndarray)
        and changed.dtype == np.int64
        and changed.ndim == 1
        and bool(np.all(changed[1:] > changed[:-1]))
    ):
        idx = changed  # (the usual call)
    else:
        why = "must be a sequence of slot ints"
        if isinstance(changed, str | bytes) or not isinstance(changed, Iterable):
            raise ValidationError("changed", changed, why)
        items = changed.tolist() if isinstance(changed, np.ndarray) else list(changed)
        for s in items:
            if not is_whole(s):
                raise ValidationError("changed", s, why)
        idx = np.unique(np.array(items, dtype=np.int64))
    if len(idx) and (idx.min() < 0 or idx.max() >= n):
        raise ValidationError("changed", changed, f"must be slots >= 0 and below the state's {n}")
    return idx


class Snapshot:
    """A consistent, mutable-in-transactions view of a :class:`ClusterState`.

    Read the per-slot arrays (``cols``, or as attributes: ``free_gpus``, ``gpu_free``,
    ``free_mask``, ``cpu_free``..., see :class:`NodeColumns`) and group aggregates directly,
    O(1); they are numpy arrays indexed
    by node slot / group id and must be treated as read-only outside :meth:`allocate` and
    :meth:`release`. Aggregates: ``agg[level]`` is an int64 array [groups, 3] with columns
    ``AGG_FREE_GPUS`` (whole free GPUs), ``AGG_FREE_NODES`` (nodes whose every GPU is free)
    and ``AGG_FREE_MILLI``.
    """

    AGG_FREE_GPUS = 0
    AGG_FREE_NODES = 1
    AGG_FREE_MILLI = 2

    # every column of :class:`NodeColumns`, read through: snap.free_gpus, snap.leaf_id, ...
    alive = _Column()
    ready = _Column()
    gpus = _Column()
    gpu_cap_mask = _Column()
    cpu_cap = _Column()
    mem_cap = _Column()
    nics = _Column()
    pod_cap = _Column()
    free_mask = _Column()
    free_gpus = _Column()
    free_milli = _Column()
    max_share = _Column()
    cpu_free = _Column()
    mem_free = _Column()
    nic_mask = _Column()
    free_nics = _Column()
    pod_free = _Column()
    pool_id = _Column()
    leaf_id = _Column()
    spine_id = _Column()
    superspine_id = _Column()
    hbd_id = _Column()
    zone_id = _Column()
    gpu_free = _Column()

    def __init__(self, state: ClusterState) -> None:
        """A snapshot of ``state`` built from scratch, O(cluster). Use
        :meth:`ClusterState.snapshot` (refreshed in place) or
        :meth:`ClusterState.full_snapshot`."""
        self.state = state
        self.cols = NodeColumns(state.columns.capacity, state.columns.width)
        self.names: list[str | None] = []
        self._groups: _GroupIndex  # aggregates and best-fit index (set by _full_build)
        self.agg: dict[str, IntArray]  # = self._groups.agg, the same dict
        # per open transaction: slot -> (its usage, its contribution) before the first change
        self._undo: list[dict[int, tuple[tuple[Any, ...], tuple[int, int, int, int]]]] = []
        self._undo_content: list[int] = []  # per open transaction, the content it began with
        self._content = next(_CONTENTS)
        self._local: set[int] = set()  # rows changed by committed transactions since refresh
        self._members: dict[tuple[str, int], IntArray] = {}
        self._members_version = -1
        # node name tuple -> (the tuple, its slots): see slots_of
        self._slots_of: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = {}
        self._slots_of_version: tuple[int, int] = (-1, -1)
        self.generation = -1
        self.token = next(_SNAPSHOT_TOKENS)  # unique per snapshot object (id() is reused)
        # what other layers derive from this snapshot and keep across cycles (the node
        # pools' facts): kept here, it lives and dies with the snapshot (a table keyed by
        # snapshot whose values name their snapshot keeps every snapshot alive)
        self.kept: dict[str, Any] = {}
        # slots whose rows may have changed, in order (see rows_changed_since)
        self._log: list[int] = []
        # slot -> its row version (see row_version); per open transaction, the versions the
        # rows it changed had before (restored by a rollback, like the rows)
        self._row_content: dict[int, int] = {}
        self._undo_versions: list[dict[int, int | None]] = []
        self._log_start = 0  # change-log position of _log[0]
        # pods placed on (slot), released from (-1) or held for a nominated preemptor on
        # (-2 - slot) this snapshot since its refresh, for pod (anti-)affinity, in order; per
        # open transaction, its length then (_undo_moves)
        self.pod_moves: list[tuple[PodId, int]] = []
        self.placed_jobs: dict[str, Job] = {}
        self.placed_anti = False  # whether one of placed_jobs has a pod anti-affinity term
        self.placed_soft = False  # whether one of them has preferred or required affinity
        self._undo_moves: list[int] = []
        # whether a node of the last refresh has a pod limit (NodeSpec.max_pods): only then
        # does placement read pod_free (nodes without one never run out of pod slots)
        self.pods_capped = False
        self._full_build()

    # ----------------------------------------------------------------- building

    def _full_build(self) -> None:
        st = self.state
        n = st.num_slots
        self.cols = NodeColumns(st.columns.capacity, st.columns.width)
        self.cols.copy_rows_from(st.columns, np.arange(n, dtype=np.int64))
        self.names = list(st.slot_names)
        self._groups = _GroupIndex(self.cols, {lv: st.group_count(lv) for lv in LEVELS})
        self.agg = self._groups.agg
        self._groups.build(n)
        self._local.clear()
        self._row_content.clear()
        self._content = next(_CONTENTS)
        self.generation = st.generation
        self._nodes_seen = st.membership_version
        self.pods_capped = st.pod_capped_nodes > 0
        self._forget_moves()

    def _forget_moves(self) -> None:
        """The truth holds every pod again: drop the record of pods moved on this snapshot."""
        if self.pod_moves or self.placed_jobs:
            self.pod_moves = []  # (a new list: readers compare what they applied by identity)
            self.placed_jobs = {}
            self.placed_anti = False
            self.placed_soft = False

    def refresh(self, changed: IntArray | Iterable[int]) -> None:
        """Re-sync rows ``changed`` (sorted, unique slots: :meth:`ClusterState.take_changes`)
        and the rows committed transactions changed since the last refresh from the state's
        columns, with their names, aggregates and index entries. :meth:`ClusterState.snapshot`
        calls it; on any snapshot it only ever copies truth, so it cannot make one wrong.
        Raises TransactionError while a transaction is open, ValidationError (changing
        nothing) for ``changed`` that are not slots of the state (any sequence of ints is
        taken, sorted and deduped). O(k x (levels + log n)) for k rows."""
        if self._undo:
            raise TransactionError("snapshot refreshed while a transaction is open")
        st = self.state
        rows: list[int] = _changed_slots(changed, st.num_slots).tolist()
        if self._local:
            rows = sorted(self._local.union(rows))
            self._local.clear()
        # no node came or went since the last refresh: the arrays, the groups and the slots'
        # nodes are as they were (only add_node and remove_node change them)
        same_nodes = self._nodes_seen == st.membership_version
        if not same_nodes:
            self.cols.ensure(st.columns.capacity, st.columns.width)
            for lv in LEVELS:
                self._groups.grow(lv, st.group_count(lv))
            if len(self.names) < st.num_slots:
                self.names.extend([None] * (st.num_slots - len(self.names)))
        if rows:
            self._logged(rows)
            self._content = next(_CONTENTS)
            self._row_content.clear()  # (no transaction is open: none restores them)
            if len(rows) <= _FEW_ROWS:
                self._groups.replace_few(
                    rows,
                    lambda: self.cols.copy_few_from(st.columns, rows, same_nodes=same_nodes),
                    same_nodes=same_nodes,
                )
            else:
                idx = np.array(rows, dtype=np.int64)
                self._groups.replace_rows(idx, lambda: self.cols.copy_rows_from(st.columns, idx))
            slot_names = st.slot_names
            for s in rows:
                self.names[s] = slot_names[s]
        self.generation = st.generation
        self._nodes_seen = st.membership_version
        self.pods_capped = st.pod_capped_nodes > 0
        self._forget_moves()

    # ----------------------------------------------------------------- reading

    def pools_free_milli(self, pools: Iterable[int]) -> int:
        """The free GPU milli of the node pools ``pools`` (pool ids), from their aggregates.
        O(pools)."""
        agg = self.agg["pool"]
        return sum(int(agg[p, self.AGG_FREE_MILLI]) for p in pools)

    @property
    def num_slots(self) -> int:
        """Slots covered by the snapshot (the state's slot count at the last refresh)."""
        return len(self.names)

    def slot_of(self, name: str) -> int:
        """The slot of node ``name`` in the truth. Raises UnknownNodeError."""
        return self.state.slot_of(name)

    def name_of(self, slot: int) -> str:
        """The node in ``slot`` as of the last refresh. Raises UnknownNodeError for a free or
        unknown slot (or one that is not an int)."""
        try:
            name = self.names[slot] if 0 <= slot < len(self.names) else None
        except TypeError:  # (not a number: no slot)
            name = None
        if name is None:
            raise UnknownNodeError(f"<slot {slot!r}>")
        return name

    def slot_if_here(self, node: str) -> int | None:
        """The slot of ``node`` on the snapshot, None when the node is not (or no longer)
        there (the snapshot's name for the state's slot differs). O(1)."""
        try:
            s = self.state.slot_of(node)
        except UnknownNodeError:
            return None
        return s if s < len(self.names) and self.names[s] == node else None

    def slots_of(self, nodes: tuple[str, ...]) -> tuple[int, ...]:
        """The slot of each node of ``nodes`` on the snapshot, -1 for a node that is not (or
        no longer) there. Kept for the last few tuples until nodes are added or removed: a
        reservation held again every cycle looks its nodes up once. O(1) kept, else
        O(nodes)."""
        version = (self._nodes_seen, self.state.membership_version)
        kept = self._slots_of
        if self._slots_of_version != version:
            kept.clear()
            self._slots_of_version = version
        got = kept.get(id(nodes))
        if got is not None and got[0] is nodes:
            return got[1]
        out = tuple(-1 if (s := self.slot_if_here(node)) is None else s for node in nodes)
        if len(kept) >= 16:
            kept.clear()
        kept[id(nodes)] = (nodes, out)
        return out

    def group_id(self, level: str, name: str) -> int:
        """Id of group ``name`` of ``level`` in the ``<level>_id`` columns, -1 if unknown
        (ids are interned for good, so the state's table is the snapshot's). O(1)."""
        return self.state.group_id(level, name)

    def members(self, level: str, gid: int) -> IntArray:
        """Slots of live nodes in group ``gid`` of ``level`` (sorted; cached until the
        snapshot shows nodes added or removed: O(1), O(slots) to fill the cache)."""
        if self._members_version != self._nodes_seen:
            self._members.clear()
            self._members_version = self._nodes_seen
        key = (level, gid)
        arr = self._members.get(key)
        if arr is None:
            if level not in LEVELS:
                raise unknown_level(level)
            ids = getattr(self.cols, f"{level}_id")[: self.num_slots]
            arr = np.flatnonzero((ids == gid) & self.cols.alive[: self.num_slots]).astype(np.int64)
            self._members[key] = arr
        return arr

    def best_fit(self, pool: int, min_free_gpus: int) -> Iterator[int]:
        """Slots of ``pool`` with at least ``min_free_gpus`` whole free GPUs, fewest free
        first (best fit), ties by slot. O(log n) to the first answer."""
        sl = self._groups.by_free.get(pool)
        if sl is None:
            return
        for key in sl.irange(minimum=min_free_gpus << _KEY_SHIFT):
            yield key & ((1 << _KEY_SHIFT) - 1)

    # ----------------------------------------------------------------- transactions

    @contextmanager
    def deferred_index(self) -> Iterator[None]:
        """Within the block, the per-pool sorted index (:meth:`best_fit`) follows row changes
        only when it is read, and once more at the end: for a stretch of changes that are
        mostly undone before anyone reads the index (a what-if, a hold given back for an
        attempt that is rolled back), which then cost the index nothing. Nestable. Reading
        the index gives the same answers either way."""
        groups = self._groups
        groups.deferred += 1
        try:
            yield
        finally:
            groups.deferred -= 1
            if not groups.deferred:
                groups.settle()

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (then :meth:`refresh` is refused). O(1)."""
        return bool(self._undo)

    def transaction(self) -> Transaction:
        """Open a (possibly nested) transaction. Use as a context manager: it rolls back on
        exception or when left without :meth:`Transaction.commit`."""
        self._undo.append({})
        self._undo_content.append(self._content)
        self._undo_versions.append({})
        self._undo_moves.append(len(self.pod_moves))
        return Transaction(self, len(self._undo), self._end)

    # ----------------------------------------------------------------- change log

    @property
    def content_version(self) -> int:
        """A number naming what this snapshot holds now: every change (allocate, release,
        refresh) takes a new one, and a rollback gives back the number its transaction
        began with, since it restores the rows, aggregates and index exactly. While the
        number stays, so do the contents: a reader may keep answers derived from the
        snapshot for as long as it does (unlike :attr:`log_position`, which a rolled-back
        change moves for good). Compare the numbers of one snapshot (:attr:`token`)."""
        return self._content

    @property
    def membership_version(self) -> int:
        """The state's :attr:`~kant.state.ClusterState.membership_version` when this
        snapshot was last built or refreshed: the node set its rows show. What a reader
        derives from the rows' nodes (which slots are live, in which group) holds while
        this stays, and a snapshot not refreshed since nodes came or went shows an older
        one than its state's: a reader keying on the state's alone would keep what it
        derived from the old rows once the snapshot is refreshed. O(1)."""
        return self._nodes_seen

    @property
    def log_position(self) -> int:
        """Position in the change log now: pass it to :meth:`rows_changed_since` later."""
        return self._log_start + len(self._log)

    def rows_changed_since(self, position: int) -> IntArray | None:
        """Slots whose rows may have changed (allocate, release, rollback, refresh) since
        :attr:`log_position` was ``position``, with repeats; ``None`` when that is older
        than the kept log (then compare every row). Lets a reader that caches per-row values
        re-check O(changes) rows instead of all. Positions belong to this snapshot object
        (:attr:`token`). ValidationError for a ``position`` that is no int."""
        if not is_whole(position):
            raise ValidationError("position", position, "must be an int (a log_position)")
        if position < self._log_start:
            return None
        return np.array(self._log[position - self._log_start :], dtype=np.int64)

    def row_version(self, slot: int) -> int | None:
        """A number naming row ``slot``'s contents, as :attr:`content_version` names the
        whole snapshot's: every change of the row in a transaction takes a new one, and a
        rollback gives back the one the row had (None: the row has not changed in a
        transaction since the last refresh). While it stays, so does the row. O(1)."""
        return self._row_content.get(slot)

    def _logged(self, slots: Iterable[int]) -> None:
        self._log.extend(slots)
        if len(self._log) > _CHANGE_LOG_KEEP:
            drop = len(self._log) - _CHANGE_LOG_KEEP // 2
            del self._log[:drop]
            self._log_start += drop

    def _save(self, s: int) -> tuple[int, int, int, int]:
        """Before row ``s`` changes in the open transaction: log it, take a new content
        version, and keep the row's usage and aggregate contribution (the first time in this
        transaction) for a rollback. Returns the row's contribution now (``contrib``)."""
        if not self._undo:
            raise TransactionError("snapshot changes need an open transaction")
        log = self._log
        log.append(s)
        if len(log) > _CHANGE_LOG_KEEP:
            self._logged(())  # (trims the log)
        self._content = next(_CONTENTS)
        frame = self._undo[-1]
        before = self._groups.contrib(s)
        if s not in frame:
            frame[s] = (self.cols.usage(s), before)
            self._undo_versions[-1][s] = self._row_content.get(s)
        self._row_content[s] = self._content
        return before

    def _restore_floor(self, s: int) -> int:
        """How low a restore may take row ``s``'s ``pod_free``: what it was before the
        outermost open transaction first changed the row (its frame keeps it; a committed
        inner frame's rows move to the outer one), capped at 0, or 0 when no open
        transaction changed the row. Reads only this snapshot. O(open transactions)."""
        for frame in self._undo:  # outermost first
            saved = frame.get(s)
            if saved is not None:
                return min(0, int(saved[0][_POD_FREE]))
        return 0

    def _end(self, depth: int, commit: bool) -> None:
        if len(self._undo) != depth:
            raise TransactionError(
                f"transaction at depth {depth} ended while depth is {len(self._undo)}"
            )
        frame = self._undo.pop()
        began = self._undo_content.pop()
        versions = self._undo_versions.pop()
        moves = self._undo_moves.pop()
        if not commit and len(self.pod_moves) > moves:
            del self.pod_moves[moves:]
        if commit:
            if self._undo:
                outer = self._undo[-1]
                outer_versions = self._undo_versions[-1]
                for s, row in frame.items():
                    if s not in outer:
                        outer[s] = row
                        outer_versions[s] = versions[s]
            else:
                self._local.update(frame)
        else:
            self._logged(frame)
            groups = self._groups
            for s, (row, then) in frame.items():
                before = groups.contrib(s)
                self.cols.set_usage(s, row)
                groups.shift(s, before, then)  # (the row's contribution is then's again)
            self._content = began  # the rows are as they were: so is the number
            row_content = self._row_content
            for s, v in versions.items():  # and so are the rows' own
                if v is None:
                    row_content.pop(s, None)
                else:
                    row_content[s] = v

    # ----------------------------------------------------------------- mutation

    def allocate(
        self,
        slot: int,
        gpu_mask: int = 0,
        milli: int = MILLI,
        nic_mask: int = 0,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        pods: int = 1,
        *,
        back: bool = False,
    ) -> None:
        """Take ``milli`` on each GPU of ``gpu_mask``, the NICs of ``nic_mask``, CPU, memory
        and ``pods`` pod slots (one per pod the allocation is for) on node ``slot``. Raises
        AllocationConflictError (changing nothing) if any is not free (or the slot or a GPU
        does not exist), InvalidResourcesError for an amount or mask that is no whole number
        or is below 0, TransactionError
        outside a transaction. ``pods=0`` takes no pod slot, so it is never refused for pod
        slots, even on a node above a lowered ``max_pods``. ``back``: pods a what-if released
        run there again, so their slots are taken even above a lowered ``max_pods``
        (``pod_free`` below 0, as it was), though never below the ``pod_free`` the row had
        before the outermost open transaction first changed it (0 when none did): a restore
        never counts more pods on the node than ``max(max_pods, the pods the snapshot counted
        there before its what-ifs)``, whatever the truth did since the refresh; the devices
        are checked as always. A restore does not look at what else the what-if placed, so
        no allocation of a new pod may stay open across one: releasing a node's pods,
        placing a new pod in a slot they freed and putting them back could count the new pod
        and the old ones above the capacity. (The preemption what-if restores victims before
        it places, and rolls each placement back.) O(levels + log n)."""
        _check_slot(slot)
        _check_amounts(gpu_mask, milli, nic_mask, cpu_milli, memory_mib, pods)
        v = self.cols.views()
        bits = _mask_bits(gpu_mask)
        gf = v.gpu_free
        try:
            if slot < 0 or not v.alive[slot]:
                raise AllocationConflictError(f"slot {slot} holds no node")
            for g in bits:
                if gf[slot, g] < milli:
                    raise AllocationConflictError(
                        f"{self.names[slot]}: GPU {g} has {gf[slot, g]} milli free, needs {milli}"
                    )
        except (IndexError, TypeError):  # (a slot or GPU past the arrays: no such device)
            raise AllocationConflictError(
                f"slot {slot!r}: no such node, or no GPU of mask {gpu_mask:#b} on it"
            ) from None
        if v.nic_mask[slot] & nic_mask != nic_mask:
            raise AllocationConflictError(f"{self.names[slot]}: NICs {nic_mask:b} not free")
        if v.cpu_free[slot] < cpu_milli or v.mem_free[slot] < memory_mib:
            raise AllocationConflictError(f"{self.names[slot]}: not enough CPU or memory")
        # (an allocation asking no pod slot -- a hold's share of a node -- takes none, so it
        # fits a node still above a lowered max_pods too, whose pod_free is below 0)
        if pods and v.pod_free[slot] < pods:
            # a restore may go below 0, but only as far as the snapshot was before its
            # what-ifs: no more pods than max(max_pods, the pods it counted there)
            floor = self._restore_floor(slot) if back else 0
            if v.pod_free[slot] - pods < floor:
                raise AllocationConflictError(
                    f"{self.names[slot]}: room for {max(0, v.pod_free[slot])} more pods, "
                    f"needs {pods}"
                )
        before = self._save(slot)
        if milli == MILLI:
            # whole GPUs, each wholly free before (the check above) and now taken: the row's
            # counts move by the GPUs taken (what _recount would find, without reading the
            # row), and its largest share is a whole GPU while one is left, else none when
            # nothing is left
            mask = v.free_mask[slot] & ~gpu_mask
            for g in bits:
                gf[slot, g] = 0
            v.free_mask[slot] = mask
            v.free_gpus[slot] -= len(bits)
            left = v.free_milli[slot] - MILLI * len(bits)
            v.free_milli[slot] = left
            if mask:
                v.max_share[slot] = MILLI
            elif not left:
                v.max_share[slot] = 0
            else:
                self._recount(slot)  # shares of GPUs are left: the largest is in the row
        else:
            for g in bits:
                gf[slot, g] -= milli
            self._recount(slot)
        if nic_mask:
            v.nic_mask[slot] = nics = v.nic_mask[slot] & ~nic_mask
            v.free_nics[slot] = _popcount(nics)
        v.cpu_free[slot] -= cpu_milli
        v.mem_free[slot] -= memory_mib
        v.pod_free[slot] -= pods
        self._groups.shift(slot, before)

    def release(
        self,
        slot: int,
        gpu_mask: int = 0,
        milli: int = MILLI,
        nic_mask: int = 0,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        pods: int = 1,
    ) -> None:
        """Give back what :meth:`allocate` took (e.g. a preemption what-if), ``pods`` pod
        slots included.

        Devices that are unhealthy in the truth stay unallocatable (nothing comes back on an
        unhealthy node). Raises AllocationConflictError if the slot holds no node in the
        snapshot or the truth, InvalidResourcesError for an amount or mask that is no whole
        number or is below 0, TransactionError outside a transaction. O(levels + log n)."""
        _check_slot(slot)
        _check_amounts(gpu_mask, milli, nic_mask, cpu_milli, memory_mib, pods)
        name = self.names[slot] if 0 <= slot < len(self.names) else None
        if name is None or name not in self.state:
            raise AllocationConflictError(f"slot {slot} holds no node")
        gpu = dict.fromkeys(_mask_bits(gpu_mask), milli)
        health = self._returnable(slot, gpu, nic_mask, cpu_milli, memory_mib)
        self._give_back(slot, health, gpu, nic_mask, cpu_milli, memory_mib, pods)

    def release_bindings(self, bindings: Iterable[Binding]) -> None:
        """:meth:`release` what every binding of ``bindings`` holds, one row update per node
        (the same rows, aggregates and index entries as releasing them one by one). Raises
        AllocationConflictError (changing nothing) if a binding's node is in neither the
        snapshot nor the truth, ValidationError (changing nothing) for ``bindings`` that are
        not Bindings. O(devices of the bindings + nodes x (levels + log n))."""
        why = "must be an iterable of kant.model.Binding"
        if isinstance(bindings, str) or not isinstance(bindings, Iterable):
            raise ValidationError("bindings", bindings, why)
        # slot -> (GPU -> milli, [nic mask, cpu, mem, pods])
        per: dict[int, tuple[dict[int, int], list[int]]] = {}
        moved: list[tuple[PodId, int]] | None = [] if self._keeps_moves else None
        for b in bindings:
            if not isinstance(b, Binding):
                raise ValidationError("bindings", b, why)
            if moved is not None:
                moved.append((b.pod, -1))
            slot = self.slot_of(b.node)
            got = per.get(slot)
            if got is None:
                name = self.names[slot] if slot < len(self.names) else None
                if name is None or name not in self.state:
                    raise AllocationConflictError(f"slot {slot} holds no node")
                got = per[slot] = ({}, [0, 0, 0, 0])
            gpu, rest = got
            for g in b.gpus:
                gpu[g] = gpu.get(g, 0) + b.gpu_milli
            rest[0] |= _bits_to_mask(b.nics)
            rest[1] += b.cpu_milli
            rest[2] += b.memory_mib
            rest[3] += 1
        # every node checked before any is written: a refused release changes nothing
        health = [self._returnable(slot, gpu, *rest[:3]) for slot, (gpu, rest) in per.items()]
        for (slot, (gpu, rest)), h in zip(per.items(), health, strict=True):
            self._give_back(slot, h, gpu, *rest)
        if moved is not None:
            self.pod_moves.extend(moved)

    def _returnable(
        self, slot: int, gpu: Mapping[int, int], nic_mask: int, cpu_milli: int, memory_mib: int
    ) -> tuple[bool, int, int]:
        """The truth's ``health_masks`` of the node in ``slot`` once ``gpu`` (GPU index ->
        milli), the NICs of ``nic_mask``, CPU and memory are found to be what row ``slot``
        can take back: AllocationConflictError (nothing written yet) if a healthy GPU would
        have more than :data:`MILLI` free, a healthy NIC given back is free, or CPU or memory
        would be free above the node's capacity -- a release of what the row does not hold
        (a binding never held here, or released twice) -- on a healthy node (on an unhealthy
        one nothing comes back). O(GPUs given back)."""
        health = ok, gpu_healthy, nic_healthy = self.state.health_masks(self.names[slot] or "")
        if not ok:
            return health
        v = self.cols.views()
        gf = v.gpu_free
        for g, milli in gpu.items():
            if gpu_healthy >> g & 1 and gf[slot, g] + milli > MILLI:
                raise AllocationConflictError(
                    f"{self.names[slot]}: GPU {g} has {gf[slot, g]} milli free, cannot take "
                    f"{milli} back (not held)"
                )
        if v.nic_mask[slot] & nic_mask & nic_healthy:
            raise AllocationConflictError(
                f"{self.names[slot]}: NICs {v.nic_mask[slot] & nic_mask:b} are free, "
                "cannot take them back (not held)"
            )
        if (
            v.cpu_free[slot] + cpu_milli > v.cpu_cap[slot]
            or v.mem_free[slot] + memory_mib > v.mem_cap[slot]
        ):
            raise AllocationConflictError(
                f"{self.names[slot]}: {cpu_milli} CPU milli and {memory_mib} MiB back would "
                f"free more than its {v.cpu_cap[slot]} CPU milli and {v.mem_cap[slot]} MiB "
                "(not held)"
            )
        return health

    def _give_back(
        self,
        slot: int,
        health: tuple[bool, int, int],
        gpu: Mapping[int, int],
        nic_mask: int,
        cpu_milli: int,
        memory_mib: int,
        pods: int,
    ) -> None:
        """Return ``gpu`` (GPU index -> milli), NICs, CPU, memory and ``pods`` pod slots to
        the row of ``slot``, a node of the truth whose ``health_masks`` are ``health``, once
        :meth:`_returnable` found the row can take them back: devices unhealthy in the truth
        stay unallocatable."""
        v = self.cols.views()
        ok, gpu_healthy, nic_healthy = health
        before = self._save(slot)
        gf = v.gpu_free
        # whole GPUs wholly held coming back (the usual release): the row's counts move by
        # the GPUs freed (what _recount would find, without reading the row), else recount
        whole = 0
        recount = False
        for g, milli in gpu.items():
            if ok and gpu_healthy >> g & 1:
                was = gf[slot, g]
                gf[slot, g] = was + milli  # (at most MILLI: _returnable)
                if was == 0 and milli == MILLI:
                    whole |= 1 << g
                else:
                    recount = True
        if recount:
            self._recount(slot)
        elif whole:
            v.free_mask[slot] |= whole
            v.free_gpus[slot] += whole.bit_count()
            v.free_milli[slot] += MILLI * whole.bit_count()
            v.max_share[slot] = MILLI
        if ok:
            v.nic_mask[slot] = nics = v.nic_mask[slot] | (nic_mask & nic_healthy)
            v.free_nics[slot] = _popcount(nics)
            v.cpu_free[slot] += cpu_milli
            v.mem_free[slot] += memory_mib
            if pods:  # (never above the limit: what was not taken does not come back)
                v.pod_free[slot] = min(v.pod_cap[slot], v.pod_free[slot] + pods)
        self._groups.shift(slot, before)

    def restore_usage(self, slot: int, usage: tuple[Any, ...]) -> None:
        """Put back row ``slot``'s usage as :meth:`NodeColumns.usage` read it earlier in this
        cycle (a hold giving back exactly what it took), with the aggregates and the index.
        TransactionError outside a transaction. O(levels + log n)."""
        before = self._save(slot)
        self.cols.set_usage(slot, usage)
        self._groups.shift(slot, before)

    def release_binding(self, b: Binding) -> None:
        """:meth:`release` what binding ``b`` holds on its node (a preemption what-if).
        ValidationError (changing nothing) for a ``b`` that is no Binding."""
        if not isinstance(b, Binding):
            raise ValidationError("binding", b, "must be a kant.model.Binding")
        self.release(
            self.slot_of(b.node),
            _bits_to_mask(b.gpus),
            b.gpu_milli,
            _bits_to_mask(b.nics),
            b.cpu_milli,
            b.memory_mib,
        )
        if self._keeps_moves:
            self.pod_moves.append((b.pod, -1))

    @property
    def _keeps_moves(self) -> bool:
        """Whether pods released here are recorded (:attr:`pod_moves`): while some pod of
        the truth or of this snapshot has labels or pod terms."""
        return bool(self.placed_jobs) or self.state.pod_terms_kept

    def record_placed(
        self, job: Job, pods: Iterable[tuple[PodId, int]], *, nominated: bool = False
    ) -> None:
        """Note that ``pods`` of ``job`` were just placed on these slots of the snapshot (the
        Placer does for a job with labels or pod terms, :attr:`Job.labelled`), so that pod
        affinity reads them until the next refresh; ``nominated``: held there for a
        preemptor (recorded as slot ``-2 - slot``, see :attr:`pod_moves`). In a
        transaction: a rollback forgets them."""
        if job.id not in self.placed_jobs:
            self.placed_jobs[job.id] = job
            self.placed_anti = self.placed_anti or job.anti_terms
            self.placed_soft = self.placed_soft or job.soft_terms
        if nominated:
            self.pod_moves.extend((p, -2 - s) for p, s in pods)
        else:
            self.pod_moves.extend(pods)

    def here(self, bindings: Iterable[Binding]) -> list[tuple[PodId, int]]:
        """Each binding's pod and the slot of its node, for the bindings whose node is in
        the snapshot (for :meth:`record_placed`)."""
        out = []
        for b in bindings:
            s = self.slot_if_here(b.node)
            if s is not None:
                out.append((b.pod, s))
        return out

    def note_gone(self, pods: Iterable[PodId]) -> None:
        """Note that ``pods`` no longer hold devices here (for pod affinity)."""
        if self._keeps_moves:
            self.pod_moves.extend((p, -1) for p in pods)

    def note_back(self, bindings: Iterable[Binding]) -> None:
        """Note that the pods of ``bindings``, released on the snapshot, hold their devices
        again (a preemption what-if giving a victim back), for pod affinity."""
        if self._keeps_moves:
            self.pod_moves.extend((b.pod, self.slot_of(b.node)) for b in bindings)

    def _recount(self, s: int) -> None:
        v = self.cols.views()
        w = v.width
        vals = v.gpu_flat[s * w : s * w + v.gpus[s]].tolist()
        v.free_mask[s], v.free_gpus[s], v.free_milli[s], v.max_share[s] = gpu_counts(vals)

    # ----------------------------------------------------------------- self-check

    def check_invariants(self) -> None:
        """Recompute the per-row aggregates (free mask, free GPUs, free milli, largest share,
        free NICs), the per-group aggregates and the per-pool sorted index from the rows and
        raise :class:`~kant.errors.InvariantError` listing every difference, one
        ``"Snapshot: ..."`` line each.

        O(everything): for tests and debugging (:func:`kant.testing.check_invariants`)."""
        n = self.num_slots
        cols = self.cols
        live = np.flatnonzero(cols.alive[:n])
        errors = self._groups.errors(live.tolist())
        st = self.state
        truth = st.columns
        # rows the truth changed since the refresh are stale (the next refresh copies them);
        # rows this snapshot changed (committed or in an open transaction) are its own
        mine = set(self._local).union(*self._undo)
        gens = st.node_generation
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
            if not cols.pod_free[s] <= cols.pod_cap[s]:  # (below 0: pods above the cap)
                errors.append(f"slot {s}: pod_free {cols.pod_free[s]} above pod_cap")
            if not cols.cpu_free[s] <= cols.cpu_cap[s]:
                errors.append(f"slot {s}: cpu_free {cols.cpu_free[s]} above cpu_cap")
            if not cols.mem_free[s] <= cols.mem_cap[s]:
                errors.append(f"slot {s}: mem_free {cols.mem_free[s]} above mem_cap")
            if s >= truth.capacity or not truth.alive[s] or gens[s] > self.generation:
                continue
            real = int(truth.pod_free[s])  # pod_cap less the pods there (0 when unhealthy)
            if s not in mine and cols.pod_free[s] != real:
                errors.append(f"slot {s}: pod_free {cols.pod_free[s]}, the truth's is {real}")
            elif cols.pod_free[s] < min(0, real):  # (more pods than max(max_pods, running))
                errors.append(f"slot {s}: pod_free {cols.pod_free[s]} below the truth's {real}")
        if errors:
            raise InvariantError("\n".join(f"Snapshot: {e}" for e in errors))

    def same_as(self, other: Snapshot) -> list[str]:
        """Differences between two snapshots' rows and aggregates (empty if identical).
        ValidationError for an ``other`` that is no Snapshot."""
        if not isinstance(other, Snapshot):
            raise ValidationError("other", other, "must be a kant.state.Snapshot")
        n = max(self.num_slots, other.num_slots)
        diffs = self.cols.rows_equal(other.cols, n)
        if [x for x in self.names if x] != [x for x in other.names if x]:
            diffs.append("names")
        diffs.extend(self._groups.differences(other._groups))
        return diffs


class Transaction:
    """A nestable unit of tentative change on a :class:`Snapshot`.

    ``commit()`` keeps the changes (folded into the enclosing transaction, if any);
    ``rollback()`` restores every touched row, aggregate and index entry exactly.
    """

    def __init__(self, snap: Snapshot, depth: int, end: Callable[[int, bool], None]) -> None:
        """Made by :meth:`Snapshot.transaction` only: ``end(depth, commit)`` closes it."""
        self.snapshot = snap
        self.depth = depth
        self.open = True
        self._end = end

    def commit(self) -> None:
        """Keep the changes. Raises TransactionError if already finished or not innermost."""
        self._finish(True)

    def rollback(self) -> None:
        """Undo the changes exactly. Raises TransactionError if already finished or not
        innermost."""
        self._finish(False)

    def _finish(self, commit: bool) -> None:
        if not self.open:
            raise TransactionError("transaction already finished")
        self._end(self.depth, commit)
        self.open = False

    def __enter__(self) -> Transaction:
        """The transaction itself."""
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Roll back unless committed (an exception propagates)."""
        if self.open:
            self.rollback()
