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
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

from kant.model import Binding, PodId
from kant.preemption.rules import VictimUnit
from kant.queueing import Entry, Queue
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

    def __attrs_post_init__(self) -> None:
        self.job = self.entry.id
        self.tenant = self.entry.job.tenant
        self.priority = self.order[0]
        self.started_at = -self.order[1]
        self.key = self.entry.key


Group = tuple[
    float | None, tuple[PodId, ...], int, tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]
]

_CACHES: weakref.WeakKeyDictionary[Queue, dict[str, tuple[Any, list[tuple[Any, VictimRef]]]]] = (
    weakref.WeakKeyDictionary()
)


class VictimIndex:
    """Every candidate unit of one cycle, in victim order (built on first use: O(running
    pods), cheaper with the cross-cycle cache)."""

    def __init__(
        self,
        queue: Queue,
        cluster: ClusterState,
        snap: Snapshot,
        pool_names: Mapping[int, str],
        *,
        now: float,
        min_runtime: float,
    ) -> None:
        self.queue = queue
        self.cluster = cluster
        self.snap = snap
        self.pool_names = pool_names
        self.now = now
        self.min_runtime = min_runtime
        self._refs: list[VictimRef] | None = None
        self._units: dict[tuple[PodId, ...], VictimUnit] = {}
        self._cols: VictimColumns | None = None
        self.tenants: list[str] = []

    def refs(self) -> list[VictimRef]:
        """Every running, preemptible unit past the minimum runtime, in victim order."""
        if self._refs is not None:
            return self._refs
        old = _CACHES.get(self.queue, {})
        cache: dict[str, tuple[Any, list[tuple[Any, VictimRef]]]] = {}
        out: list[VictimRef] = []
        now = self.now
        bindings = self.cluster.bindings_view()  # by id; avoids a sort of every pod
        pool_of = self.snap.cols.pool_id[: self.snap.num_slots].tolist()
        for e in self.queue.running():
            job = e.job
            if not job.preemptible or (job.gang and e.terminating):
                continue
            key = (e.seq, e.version, len(e.terminating), e.started_at)
            hit = old.get(e.id)
            if hit is None or hit[0] != key:
                hit = (key, self._refs_of(e, bindings, pool_of))
            if e.started_at is not None:
                cache[e.id] = hit
            for t0, ref in hit[1]:
                if now - (now if t0 is None else t0) >= self.min_runtime:
                    out.append(ref)
        _CACHES[self.queue] = cache
        out.sort(key=lambda r: r.order)
        self._refs = out
        self.tenants = sorted({r.entry.job.tenant for r in out})
        return out

    def columns(self) -> VictimColumns:
        """The facts of :meth:`refs` as arrays in victim order (built once per cycle)."""
        if self._cols is None:
            self._cols = VictimColumns(self.refs(), self.tenants)
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
    position, for the pre-filter's vectorised form of the built-in rules: priority (a sorted
    list), tenant (index into the sorted tenants), start time and GPU milli held (numpy);
    the rank of each job's queue order key and each pod's position are built on first use."""

    def __init__(self, refs: list[VictimRef], tenants: list[str]) -> None:
        self.refs = refs
        self.tenant_of = {t: i for i, t in enumerate(tenants)}
        n = len(refs)
        self.priority = [r.priority for r in refs]  # ascending (ints of any size)
        self.tenant = np.fromiter((self.tenant_of[r.tenant] for r in refs), dtype=np.int64, count=n)
        self.started_at = np.fromiter((r.started_at for r in refs), dtype=np.float64, count=n)
        self.held = np.fromiter((r.held for r in refs), dtype=np.int64, count=n)
        self._keys: list[tuple[Any, ...]] | None = None
        self._key_rank: np.ndarray | None = None
        self.seq = np.fromiter((-r.order[2] for r in refs), dtype=np.int64, count=n)
        self._by_pod: dict[PodId, int] | None = None

    def lower_than(self, priority: int) -> int:
        """How many records (a prefix: victim order is by priority first) have a priority
        strictly below ``priority``."""
        return bisect.bisect_left(self.priority, priority)

    def at_most(self, priority: int) -> int:
        """How many records have a priority of at most ``priority`` (a prefix)."""
        return bisect.bisect_right(self.priority, priority)

    def after_key(self, key: tuple[Any, ...]) -> np.ndarray:
        """Per record: is its job's queue order key greater than ``key``?"""
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

    def of_pods(self, pods: set[PodId]) -> list[int]:
        """The positions of the records holding any of ``pods`` (each pod is in at most one
        record)."""
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
