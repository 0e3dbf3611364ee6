"""Victim candidates and the one victim order.

A *unit* is what one eviction removes: a whole gang job, or one pod of a pod-level job. The
victim order (:func:`victim_order`) is lowest priority first, then most recently started,
then the later submission, then pod order: a total order. :class:`VictimIndex` lists every
running, preemptible unit past the minimum runtime in that order, as light records
(:class:`VictimRef`: what each holds where); :meth:`VictimIndex.unit` materialises the full
:class:`~kant.preemption.rules.VictimUnit` (with bindings) when a search reaches it.

The per-job records are cached across cycles, keyed by the job's bookkeeping version
(:attr:`kant.queueing.Entry.version`, bumped whenever its pods change) in a cache owned by the
queue's :class:`VictimIndexCache` (bindings of running pods never move). The cache is private
derived data: no decision depends on whether it was warm.
"""

from __future__ import annotations

import bisect
import heapq
import math
import weakref
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

import attrs
import numpy as np
from sortedcontainers import SortedKeyList, SortedList

from kant.model import Binding, PodId
from kant.preemption.replay import Flat
from kant.preemption.rules import VictimUnit
from kant.queueing import Entry, JobPhase, Queue
from kant.state import ClusterState, Snapshot

Order = tuple[int, float, int, str, int]


def victim_order(priority: int, started_at: float, seq: int, first: PodId) -> Order:
    """The victim order key, lower first: lowest priority, then most recently started, then
    the later submission (``seq``), then the unit's first pod."""
    return (priority, -started_at, -seq, first.role, first.index)


@attrs.define(eq=False, slots=True)
class VictimRef:
    """A victim unit, unbuilt: its place in victim order, what it holds and where (plus the
    facts victim rules read, as plain fields: this is the pre-filter's hot loop)."""

    order: Order
    entry: Entry
    pods: tuple[PodId, ...]
    held: int  # GPU milli
    usage: tuple[tuple[str, int], ...]  # (GPU model, milli)
    slots: tuple[tuple[int, int], ...]  # (node slot, GPUs held there) per pod
    job: str = attrs.field(init=False)
    tenant: str = attrs.field(init=False)
    priority: int = attrs.field(init=False)
    started_at: float = attrs.field(init=False)
    key: tuple[Any, ...] = attrs.field(init=False)
    rid: int = attrs.field(init=False, default=-1)  # its row in the kept index, if any
    where: int = attrs.field(init=False, default=0)  # in the kept index: new/waiting/live/gone

    def __attrs_post_init__(self) -> None:
        self.job = self.entry.id
        self.tenant = self.entry.job.tenant
        self.priority = self.order[0]
        self.started_at = -self.order[1]
        self.key = self.entry.key


Group = tuple[
    float | None, tuple[PodId, ...], int, tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]
]

_by_order = attrgetter("order")
_by_priority = attrgetter("priority")

_NEW, _WAITING, _LIVE, _GONE = 0, 1, 2, 3  # VictimRef.where


class _Rows:
    """Per-record facts the pre-filter and the light replay read, as numpy rows addressed by
    :attr:`VictimRef.rid` (freed rows are reused): start time, GPU milli held, submission
    number, tenant and GPU model (numbers kept across cycles; model -1: several), the
    label of its job's queue order key, and where its (slot, GPUs) pairs are in ``slot`` and
    ``n`` (appended; compacted when mostly dead)."""

    COLS = ("started_at", "held", "seq", "tenant", "label", "model", "milli", "pstart", "plen")

    def __init__(self) -> None:
        self.started_at = np.zeros(64, dtype=np.float64)
        self.held = np.zeros(64, dtype=np.int64)
        self.seq = np.zeros(64, dtype=np.int64)
        self.tenant = np.zeros(64, dtype=np.int64)
        self.label = np.zeros(64, dtype=np.int64)
        self.model = np.zeros(64, dtype=np.int64)
        self.milli = np.zeros(64, dtype=np.int64)
        self.pstart = np.zeros(64, dtype=np.int64)
        self.plen = np.zeros(64, dtype=np.int64)
        self.slot = np.zeros(256, dtype=np.int64)
        self.n = np.zeros(256, dtype=np.int64)
        self.pool_used = 0  # entries of slot/n written
        self.pool_live = 0  # of which belong to live rows
        self.free: list[int] = []
        self.used = 0

    def alloc(self) -> int:
        if self.free:
            return self.free.pop()
        rid = self.used
        if rid == len(self.seq):
            for name in self.COLS:
                old = getattr(self, name)
                grown = np.zeros(2 * len(old), dtype=old.dtype)
                grown[: len(old)] = old
                setattr(self, name, grown)
        self.used += 1
        return rid

    def put_slots(self, rid: int, slots: tuple[tuple[int, int], ...]) -> None:
        """Append the record's (slot, GPUs) pairs to the pool."""
        k = len(slots)
        start = self.pool_used
        if start + k > len(self.slot):
            size = max(2 * len(self.slot), start + k)
            for name in ("slot", "n"):
                old = getattr(self, name)
                grown = np.zeros(size, dtype=np.int64)
                grown[:start] = old[:start]
                setattr(self, name, grown)
        if k:
            pairs = np.array(slots, dtype=np.int64).reshape(k, 2)
            self.slot[start : start + k] = pairs[:, 0]
            self.n[start : start + k] = pairs[:, 1]
        self.pstart[rid] = start
        self.plen[rid] = k
        self.pool_used += k
        self.pool_live += k


class _Labels:
    """Integer labels of the queue order keys of the kept records, in the keys' order (equal
    keys, equal labels), so "key greater than k" is a comparison of numpy integers. A new key
    takes the midpoint between its neighbours' labels. When there is no room left the labels
    are ``stale`` from then on (a new key gets none) until :meth:`relabel` spreads every key
    evenly again, once for a whole batch of additions (``relabelled`` counts it: the rows
    must be refreshed)."""

    GAP = 1 << 32
    LIMIT = 1 << 61

    def __init__(self) -> None:
        self.keys = SortedList()
        self.count: dict[Any, int] = {}
        self.label: dict[Any, int] = {}
        self.relabelled = 0
        self.stale = False

    def add(self, key: Any) -> int | None:
        """Count ``key`` in; its label, or None when the labels are stale."""
        c = self.count.get(key)
        if c:
            self.count[key] = c + 1
            return self.label.get(key)
        self.count[key] = 1
        keys = self.keys
        keys.add(key)
        if self.stale:
            return None
        i = keys.bisect_left(key)
        n = len(keys)
        if n == 1:
            lab = 0
        elif i == 0:
            lab = self.label[keys[1]] - self.GAP
        elif i == n - 1:
            lab = self.label[keys[i - 1]] + self.GAP
        else:
            lo, hi = self.label[keys[i - 1]], self.label[keys[i + 1]]
            lab = (lo + hi) // 2 if hi - lo >= 2 else lo
        if abs(lab) >= self.LIMIT or (0 < i < n - 1 and lab == self.label[keys[i - 1]]):
            self.stale = True
            return None
        self.label[key] = lab
        return lab

    def relabel(self) -> None:
        """Spread every key's label evenly (the labels are no longer stale)."""
        n = len(self.keys)
        for j, k in enumerate(self.keys):
            self.label[k] = (j - n // 2) * self.GAP
        self.relabelled += 1
        self.stale = False

    def discard(self, key: Any) -> None:
        c = self.count[key] - 1
        if c:
            self.count[key] = c
            return
        del self.count[key]
        self.label.pop(key, None)  # (a key added while the labels were stale has none)
        self.keys.remove(key)

    def greater(self, key: Any) -> int | None:
        """Kept labels above this one belong to keys greater than ``key`` (None: all do)."""
        i = self.keys.bisect_right(key)
        return None if i == 0 else self.label[self.keys[i - 1]]


class _Kept:
    """What one queue's victim index keeps across cycles: each running job's records, keyed
    by what they depend on (``(seq, version, terminating pods, started_at)``); the records
    past the minimum runtime at the last cycle's time in victim order (``live``); the others
    by start time (``waiting``: they join ``live`` once old enough); the rows and key labels
    of :class:`VictimColumns`; how many live records each tenant has."""

    def __init__(self) -> None:
        self.jobs: dict[str, list[tuple[Any, VictimRef]]] = {}
        self.stamps: dict[str, tuple[Any, ...]] = {}  # what each job's records depend on
        self.live = SortedKeyList(key=_by_order)
        self.waiting: list[tuple[float, int, VictimRef]] = []  # heap by start time
        self.now = -math.inf
        self.min_runtime: float | None = None
        self.rows = _Rows()
        self.labels = _Labels()
        self.tenant_ids: dict[str, int] = {}
        self.model_ids: dict[str, int] = {}
        self.live_tenants: dict[str, int] = {}
        self.volatile: list[VictimRef] = []  # this cycle's records of jobs not kept
        self.volatile_of: dict[str, list[VictimRef]] = {}
        self.waiting_alive = 0  # records in ``waiting`` not taken out since
        self._tick = 0
        self.tick: int | None = None  # the queue's change tick when last brought up to date
        self.volatile_jobs: set[str] = set()  # running jobs with no start time

    def drop(self, jid: str) -> None:
        """Take out every kept record of job ``jid``."""
        old = self.jobs.pop(jid, None)
        if old is not None:
            del self.stamps[jid]
            for _t0, ref in old:
                self.leave(ref)

    def enter(self, ref: VictimRef, t0: float | None) -> None:
        """Give ``ref`` its row and put it in ``live`` or ``waiting``."""
        rows = self.rows
        rid = ref.rid = rows.alloc()
        tid = self.tenant_ids.setdefault(ref.tenant, len(self.tenant_ids))
        rows.started_at[rid] = ref.started_at
        rows.held[rid] = ref.held
        rows.seq[rid] = -ref.order[2]
        rows.tenant[rid] = tid
        if len(ref.usage) == 1:
            m, milli = ref.usage[0]
            rows.model[rid] = self.model_ids.setdefault(m, len(self.model_ids))
            rows.milli[rid] = milli
        else:
            rows.model[rid] = -1
            rows.milli[rid] = 0
        rows.put_slots(rid, ref.slots)
        lab = self.labels.add(ref.key)
        if lab is not None:
            rows.label[rid] = lab  # (else written by settle_labels)
        if t0 is None:
            ref.where = _NEW
            return
        self._tick += 1
        ref.where = _WAITING
        self.waiting_alive += 1
        heapq.heappush(self.waiting, (t0, self._tick, ref))
        if len(self.waiting) > 2 * self.waiting_alive + 64:  # drop what was taken out
            self.waiting = [w for w in self.waiting if w[2].where == _WAITING]
            heapq.heapify(self.waiting)

    def leave(self, ref: VictimRef) -> None:
        """Take ``ref`` out (a record in ``waiting`` is skipped when it comes up)."""
        if ref.where == _LIVE:
            self.live.remove(ref)
            c = self.live_tenants[ref.tenant] - 1
            if c:
                self.live_tenants[ref.tenant] = c
            else:
                del self.live_tenants[ref.tenant]
        elif ref.where == _WAITING:
            self.waiting_alive -= 1
        ref.where = _GONE
        self.labels.discard(ref.key)
        rows = self.rows
        rows.pool_live -= int(rows.plen[ref.rid])
        rows.plen[ref.rid] = 0
        rows.free.append(ref.rid)
        ref.rid = -1

    def promote(self, now: float, min_runtime: float) -> None:
        """Move the waiting records past the minimum runtime at ``now`` into ``live``: a
        heap by start time, as ``now - t0 >= min_runtime`` holds for every start time up to
        some point and none after (float subtraction is monotone)."""
        w = self.waiting
        while w and now - w[0][0] >= min_runtime:
            ref = heapq.heappop(w)[2]
            if ref.where == _WAITING:
                self.waiting_alive -= 1
                ref.where = _LIVE
                self.live.add(ref)
                self.live_tenants[ref.tenant] = self.live_tenants.get(ref.tenant, 0) + 1

    def restart(self, now: float, min_runtime: float) -> None:
        """Time went back or the minimum runtime changed: every kept record waits again."""
        self.live.clear()
        self.live_tenants.clear()
        self.waiting = []
        for refs in self.jobs.values():
            for t0, ref in refs:
                self._tick += 1
                ref.where = _WAITING
                self.waiting.append((t0, self._tick, ref))
        self.waiting_alive = len(self.waiting)
        heapq.heapify(self.waiting)
        self.now, self.min_runtime = now, min_runtime

    def compact(self) -> None:
        """Write the slot pairs of every record with a row again, densely."""
        rows = self.rows
        alive = [r for refs in self.jobs.values() for _t0, r in refs if r.rid >= 0]
        alive += [r for r in self.volatile if r.rid >= 0]
        rows.pool_used = rows.pool_live = 0
        for r in alive:
            rows.put_slots(r.rid, r.slots)

    def settle_labels(self) -> None:
        """After a batch of :meth:`enter`: if the labels ran out of room, label every key
        again and write every row's label (once, however many keys were added)."""
        if self.labels.stale:
            self.labels.relabel()
            self._refresh_labels()

    def _refresh_labels(self) -> None:
        label = self.labels.label
        rows = self.rows
        for refs in self.jobs.values():
            for _t0, ref in refs:
                if ref.rid >= 0:
                    rows.label[ref.rid] = label[ref.key]
        for ref in self.volatile:
            if ref.rid >= 0:
                rows.label[ref.rid] = label[ref.key]


_KEPT: weakref.WeakKeyDictionary[Queue, _Kept] = weakref.WeakKeyDictionary()


class VictimIndex:
    """Every candidate unit of one cycle, in victim order (built on first use).

    ``keep`` (default): the records are kept across cycles per queue (:class:`_Kept`), so
    a cycle costs a pass over the running jobs comparing what each record depends on, plus
    O(log n) per record that changed, started, ended or came past the minimum runtime;
    False: derived from scratch (sorted, O(running pods log))."""

    def __init__(
        self,
        queue: Queue,
        cluster: ClusterState,
        snap: Snapshot,
        pool_names: Mapping[int, str],
        *,
        now: float,
        min_runtime: float,
        keep: bool = True,
    ) -> None:
        self.queue = queue
        self.cluster = cluster
        self.snap = snap
        self.pool_names = pool_names
        self.now = now
        self.min_runtime = min_runtime
        self.keep = keep
        self._refs: list[VictimRef] | None = None
        self._units: dict[tuple[PodId, ...], VictimUnit] = {}
        self._cols: VictimColumns | None = None
        self._kept: _Kept | None = None
        self._order_reads_now = False  # records of jobs with no start time are eligible
        self._young = math.inf  # from scratch: the first start of a record not yet old enough
        self.tenants: list[str] = []

    def time_horizon(self) -> float:
        """The earliest time after this cycle's at which the passing of time alone could
        change what :meth:`refs` gives (a record waiting on the minimum runtime becomes
        eligible): ``math.inf`` when :meth:`refs` was not read this cycle (what the cycle
        decided did not depend on it), the cycle's own time when it cannot tell (their order
        reads the time: running jobs with no start time). From the kept records,
        conservative: a record taken out since it was put in line may still count; derived
        from scratch, exact. O(1)."""
        if self._refs is None:
            return math.inf
        if self._order_reads_now:
            return self.now
        kept = self._kept
        if kept is None:  # (derived from scratch)
            return self._young + self.min_runtime
        return kept.waiting[0][0] + self.min_runtime if kept.waiting else math.inf

    def refs(self) -> list[VictimRef]:
        """Every running, preemptible unit past the minimum runtime, in victim order."""
        if self._refs is not None:
            return self._refs
        if self.keep:
            return self._kept_refs()
        out: list[VictimRef] = []
        now, min_runtime = self.now, self.min_runtime
        bindings = self.cluster.bindings_view()  # by id; avoids a sort of every pod
        pool_of = self.snap.cols.pool_id[: self.snap.num_slots].tolist()
        young = math.inf  # the first start time of a record not yet old enough
        for e in self.queue.running():
            job = e.job
            if not job.preemptible or (job.gang and e.terminating):
                continue
            for t0, ref in self._refs_of(e, bindings, pool_of):
                if now - (now if t0 is None else t0) >= min_runtime:
                    out.append(ref)
                    if t0 is None:
                        self._order_reads_now = True  # (no start time: its order is now's)
                elif t0 is not None and t0 < young:
                    young = t0
        self._young = young
        out.sort(key=_by_order)
        self._refs = out
        self.tenants = sorted({r.entry.job.tenant for r in out})
        return out

    def _kept_refs(self) -> list[VictimRef]:
        """:meth:`refs` from what the queue's earlier cycles kept (the same records in the
        same order: a job's records are derived again only when what they depend on
        changed)."""
        kept = _KEPT.get(self.queue)
        if kept is None:
            kept = _KEPT[self.queue] = _Kept()
        now, min_runtime = self.now, self.min_runtime
        for ref in kept.volatile:
            kept.leave(ref)
        kept.volatile = []
        kept.volatile_of = {}
        rows = kept.rows
        if rows.pool_used > 2 * rows.pool_live + 4096:
            kept.compact()
        if now < kept.now or min_runtime != kept.min_runtime:
            kept.restart(now, min_runtime)
        kept.now = now
        queue = self.queue
        changed = None if kept.tick is None else queue.changed_since(kept.tick)
        kept.tick = queue.tick
        bindings = self.cluster.bindings_view()
        pool_ids: list[list[int]] = []  # the snapshot's pool id per slot, read on first need

        def pool_of() -> list[int]:
            if not pool_ids:
                pool_ids.append(self.snap.cols.pool_id[: self.snap.num_slots].tolist())
            return pool_ids[0]

        if changed is None:  # every job: the running ones, and the ones kept before
            running = {e.id: None for e in queue.running()}
            changed = [*running, *(j for j in kept.jobs if j not in running)]
            changed += [j for j in kept.volatile_jobs if j not in running]
        for jid in changed:
            self._keep(kept, jid, bindings, pool_of)
        volatile: list[VictimRef] = []
        if kept.volatile_jobs:  # their records' order reads the cycle's time: not kept
            for e in queue.running():
                if e.id not in kept.volatile_jobs:
                    continue
                mine = []
                for t0, ref in self._refs_of(e, bindings, pool_of()):
                    kept.volatile.append(ref)
                    kept.enter(ref, None)
                    if now - (now if t0 is None else t0) >= min_runtime:
                        volatile.append(ref)
                        mine.append(ref)
                kept.volatile_of[e.id] = mine
        kept.settle_labels()
        kept.promote(now, min_runtime)
        out = list(kept.live)
        tenants = set(kept.live_tenants)
        if volatile:
            self._order_reads_now = True
            out.extend(volatile)
            out.sort(key=_by_order)
            tenants.update(r.tenant for r in volatile)
        self._kept = kept
        self._refs = out
        self.tenants = sorted(tenants)
        return out

    def _keep(
        self,
        kept: _Kept,
        jid: str,
        bindings: Mapping[PodId, Binding],
        pool_of: Callable[[], list[int]],
    ) -> None:
        """Bring the kept records of job ``jid`` up to date with its entry (derived again
        only when what they depend on changed): none unless it runs, is preemptible and is
        not a gang with victim pods to go; a job with no start time is derived each cycle."""
        e = self.queue.get(jid)
        if (
            e is None
            or e.phase is not JobPhase.RUNNING
            or not e.job.preemptible
            or (e.job.gang and e.terminating)
        ):
            kept.volatile_jobs.discard(jid)
            kept.drop(jid)
            return
        started = e.started_at
        if started is None:
            kept.volatile_jobs.add(jid)
            kept.drop(jid)
            return
        kept.volatile_jobs.discard(jid)
        key = (e.seq, e.version, len(e.terminating), started)
        if kept.stamps.get(jid) == key:
            return
        kept.drop(jid)
        refs = self._refs_of(e, bindings, pool_of())
        kept.jobs[jid] = refs
        kept.stamps[jid] = key
        for t0, ref in refs:
            kept.enter(ref, t0)

    def columns(self) -> VictimColumns:
        """The facts of :meth:`refs` as arrays in victim order (built once per cycle)."""
        if self._cols is None:
            refs = self.refs()
            self._cols = VictimColumns(refs, self.tenants, kept=self._kept)
        return self._cols

    def _refs_of(
        self, e: Entry, bindings: Mapping[PodId, Binding], pool_of: list[int]
    ) -> list[tuple[Any, VictimRef]]:
        refs = []
        now = self.now
        for started, pods, held, usage, slots in _groups_of(
            e, bindings, self.cluster.slot_of, self.pool_names, pool_of
        ):
            t0 = e.started_at if started is None else started
            order = victim_order(e.job.priority, now if t0 is None else t0, e.seq, pods[0])
            refs.append((t0, VictimRef(order, e, pods, held, usage, slots)))
        return refs

    def unit(self, ref: VictimRef) -> VictimUnit:
        """The full unit of ``ref`` (its bindings and pools), built once per cycle."""
        u = self._units.get(ref.pods)
        if u is None:
            e = ref.entry
            u = VictimUnit(
                job=e.id,
                tenant=e.job.tenant,
                priority=e.job.priority,
                started_at=ref.started_at,
                seq=e.seq,
                key=e.key,
                pods=ref.pods,
                bindings=tuple(self.cluster.binding(p) for p in ref.pods),
                usage=tuple(sorted(ref.usage)),
                pools=frozenset(int(self.snap.cols.pool_id[s]) for s, _ in ref.slots),
            )
            self._units[ref.pods] = u
        return u


class VictimColumns:
    """One cycle's candidate records (:meth:`VictimIndex.refs`) as columns, position for
    position, for the pre-filter's vectorised form of the built-in rules: tenant (index into
    the sorted tenants), start time, GPU milli held and submission number (numpy); priority
    by bisection over the records (victim order is by priority first; ints of any size).
    From the kept rows (``kept``) the columns are gathers and "key greater than" compares
    kept labels; without, they are read off the records and the keys ranked on first use."""

    def __init__(
        self, refs: list[VictimRef], tenants: list[str], *, kept: _Kept | None = None
    ) -> None:
        self.refs = refs
        self.tenant_of = {t: i for i, t in enumerate(tenants)}
        self.kept = kept
        n = len(refs)
        self._keys: list[tuple[Any, ...]] | None = None
        self._key_rank: np.ndarray | None = None
        self._label: np.ndarray | None = None
        self._by_pod: dict[PodId, int] | None = None
        self._flat: Flat | None = None
        self._ids = np.zeros(0, dtype=np.int64)
        if kept is not None:
            ids = np.fromiter((r.rid for r in refs), dtype=np.int64, count=n)
            rows = kept.rows
            remap = np.full(len(kept.tenant_ids), -1, dtype=np.int64)
            for t, tid in kept.tenant_ids.items():
                remap[tid] = self.tenant_of.get(t, -1)
            self.tenant = remap[rows.tenant[ids]]
            self.started_at = rows.started_at[ids]
            self.held = rows.held[ids]
            self.seq = rows.seq[ids]
            self._label = rows.label[ids]
            self._ids = ids
            return
        self.tenant = np.fromiter((self.tenant_of[r.tenant] for r in refs), dtype=np.int64, count=n)
        self.started_at = np.fromiter((r.started_at for r in refs), dtype=np.float64, count=n)
        self.held = np.fromiter((r.held for r in refs), dtype=np.int64, count=n)
        self.seq = np.fromiter((-r.order[2] for r in refs), dtype=np.int64, count=n)

    def flat(self) -> Flat:
        """The records' slots and GPU models flattened for the light replay (built once)."""
        if self._flat is None:
            kept = self.kept
            if kept is None:
                self._flat = Flat.of_refs(self.refs)
            else:
                rows, ids = kept.rows, self._ids
                self._flat = Flat(
                    plen=rows.plen[ids], pstart=rows.pstart[ids], pool_slot=rows.slot,
                    pool_n=rows.n, model=rows.model[ids], milli=rows.milli[ids],
                    models=list(kept.model_ids),
                )  # fmt: skip
        return self._flat

    def lower_than(self, priority: int) -> int:
        """How many records (a prefix: victim order is by priority first) have a priority
        strictly below ``priority``."""
        return bisect.bisect_left(self.refs, priority, key=_by_priority)

    def at_most(self, priority: int) -> int:
        """How many records have a priority of at most ``priority`` (a prefix)."""
        return bisect.bisect_right(self.refs, priority, key=_by_priority)

    def after_key(self, key: tuple[Any, ...]) -> np.ndarray:
        """Per record: is its job's queue order key greater than ``key``?"""
        if self._label is not None:
            assert self.kept is not None
            thr = self.kept.labels.greater(key)
            if thr is None:
                return np.ones(len(self.refs), dtype=bool)
            return self._label > thr
        if self._key_rank is None:
            keys = sorted({r.key for r in self.refs})
            rank = {k: i for i, k in enumerate(keys)}
            self._keys = keys
            self._key_rank = np.fromiter(
                (rank[r.key] for r in self.refs), dtype=np.int64, count=len(self.refs)
            )
        assert self._keys is not None
        return self._key_rank >= bisect.bisect_right(self._keys, key)

    def of_job(self, job: str, seq: int) -> list[int]:
        """The positions of the records of ``job`` (submitted as number ``seq``)."""
        refs = self.refs
        return [i for i in np.flatnonzero(self.seq == seq).tolist() if refs[i].job == job]

    def of_jobs(self, jobs: dict[str, int]) -> list[int]:
        """The positions of the records of ``jobs`` (job id -> submission number), in one
        pass over the records (:meth:`of_job` for each, together)."""
        if not jobs:
            return []
        refs = self.refs
        seqs = np.fromiter(jobs.values(), dtype=self.seq.dtype, count=len(jobs))
        hit = np.flatnonzero(np.isin(self.seq, seqs)).tolist()
        return [i for i in hit if jobs.get(refs[i].job) == int(self.seq[i])]

    def of_pods(self, pods: set[PodId]) -> list[int]:
        """The positions of the records holding any of ``pods`` (each pod is in at most one
        record)."""
        kept = self.kept
        if kept is not None:  # by the kept records of each pod's job, then by victim order
            refs = self.refs
            n = len(refs)
            out = []
            for jid in sorted({p.job for p in pods}):
                hit = kept.jobs.get(jid)
                mine = [r for _t0, r in hit] if hit is not None else kept.volatile_of.get(jid, [])
                for r in mine:
                    if pods.isdisjoint(r.pods):
                        continue
                    i = bisect.bisect_left(refs, r.order, key=_by_order)
                    if i < n and refs[i] is r:
                        out.append(i)
            return out
        if self._by_pod is None:
            self._by_pod = {p: i for i, r in enumerate(self.refs) for p in r.pods}
        by_pod = self._by_pod
        return [by_pod[p] for p in pods if p in by_pod]


def _groups_of(
    e: Entry,
    bindings: Mapping[PodId, Binding],
    slot_of: Callable[[str], int],
    names: Mapping[int, str],
    pool_of: list[int],
) -> list[Group]:
    """A job's eviction units with what each holds where: the whole job for a gang (its start
    time read at use), one unit per pod otherwise."""
    live = [p for p in e.assigned if p not in e.terminating] if e.terminating else list(e.assigned)
    if not live:
        return []
    groups: list[tuple[float | None, list[PodId]]] = (
        [(None, live)] if e.job.gang else [(e.assigned[p], [p]) for p in live]
    )
    out: list[Group] = []
    for started, pods in groups:
        usage: dict[str, int] = {}
        slots = []
        for p in pods:
            b = bindings[p]
            slot = slot_of(b.node)
            m = names.get(pool_of[slot], "")
            usage[m] = usage.get(m, 0) + len(b.gpus) * b.gpu_milli
            slots.append((slot, len(b.gpus)))
        out.append((started, tuple(pods), sum(usage.values()), tuple(usage.items()), tuple(slots)))
    return out
