"""Holds: devices kept out of placement on a cycle's snapshot.

A preemptor's nomination (the placement found with its victims gone) and a queueing policy's
reservation are both *holds*: at the start of each cycle the free part of their bindings is
allocated on the snapshot so nobody else takes it, and given back to the one job allowed to
use it. Everything here works on the snapshot only, inside the cycle's transaction, so it is
rolled back with the cycle.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from kant.bits import bits, mask_of, popcount
from kant.model import MILLI, Binding, Job
from kant.state import Snapshot
from kant.state.columns import IntArray


@attrs.frozen
class Alloc:
    """An exact amount of one node row: GPUs (mask, milli each), NICs, CPU, memory and pod
    slots (``pods``: one per pod whose free part it holds, see ``NodeSpec.max_pods``)."""

    slot: int
    gpu_mask: int
    milli: int
    nic_mask: int
    cpu: int
    mem: int
    pods: int = 0

    def take(self, snap: Snapshot) -> None:
        """Allocate it on ``snap``."""
        snap.allocate(
            self.slot, self.gpu_mask, self.milli, self.nic_mask, self.cpu, self.mem, self.pods
        )

    def take_back(self, snap: Snapshot) -> None:
        """Allocate it on ``snap`` where :func:`release_exact` freed it: its pods run there
        again, above a lowered ``max_pods`` too (``Snapshot.allocate``'s ``back``). Only with
        no new pod's allocation open on the node since the release: the restore would count
        that pod and these above the capacity (a what-if places after its restores, and
        rolls the placement back)."""
        snap.allocate(
            self.slot, self.gpu_mask, self.milli, self.nic_mask, self.cpu, self.mem, self.pods,
            back=True,
        )  # fmt: skip

    def give(self, snap: Snapshot) -> None:
        """Release it on ``snap`` (the inverse of :meth:`take`)."""
        snap.release(
            self.slot, self.gpu_mask, self.milli, self.nic_mask, self.cpu, self.mem, self.pods
        )


def take_free_gpus(snap: Snapshot, pools: Iterable[int], keep: Mapping[int, int]) -> list[Alloc]:
    """Allocate on ``snap`` what is free of every GPU on the nodes of ``pools`` (pool ids)
    but those of ``keep`` (per slot, a mask of GPUs left alone), and nothing else (no NIC,
    CPU, memory or pod slot), so that a placement may use only the GPUs kept on those
    nodes. Returns the allocations, to give back last first (:meth:`Alloc.give`). Inside a
    transaction. O(slots) numpy work and O(GPUs) per node with a GPU free."""
    out: list[Alloc] = []
    cols = snap.cols
    n = snap.num_slots
    ids = np.fromiter(pools, dtype=np.int64)
    slots = np.flatnonzero(
        np.isin(cols.pool_id[:n], ids) & cols.alive[:n] & (cols.free_milli[:n] > 0)
    )
    for s in slots.tolist():
        k = keep.get(s, 0)
        whole = int(cols.free_mask[s]) & ~k
        if whole:
            out.append(Alloc(s, whole, MILLI, 0, 0, 0))
            out[-1].take(snap)
        for g, left in enumerate(cols.gpu_free[s].tolist()):
            if left > 0 and not (k >> g) & 1:  # (a GPU partly free: what is free of it)
                out.append(Alloc(s, 1 << g, int(left), 0, 0, 0))
                out[-1].take(snap)
    return out


def slot_or_none(snap: Snapshot, node: str) -> int | None:
    """The node's slot on ``snap``, or None when the node is not (or no longer) there
    (:meth:`Snapshot.slot_if_here`)."""
    return snap.slot_if_here(node)


def free_parts(snap: Snapshot, b: Binding) -> list[Alloc]:
    """The parts of ``b`` free on the snapshot now (see :func:`_parts`): none when nothing
    of it is."""
    s = slot_or_none(snap, b.node)
    if s is None:
        return []
    return _free_parts(snap, s, [b])


def _parts(s: int, b: Binding, row: list[int], free: list[int]) -> tuple[Alloc | None, list[Alloc]]:
    """What of ``b`` is free on slot ``s``, given the free milli of its GPUs (``row``) and
    its free ``[nic mask, cpu, mem, pod slots]`` (``free``), both then taken down by it: an
    :class:`Alloc` of the GPUs that have its share (or whole GPU) free, with its free NICs,
    CPU, memory and pod slot; and one per GPU of it only partly free, of what is free of that GPU. A
    hold takes those too, so that nobody else takes a part of a GPU that a share (or a
    whole GPU) waits for while the rest of it frees (a victim's share ending)."""
    mask = 0
    partly: list[Alloc] = []
    for g in b.gpus:
        if g >= len(row) or row[g] <= 0:
            continue
        if row[g] >= b.gpu_milli:
            mask |= 1 << g
            row[g] -= b.gpu_milli
        else:
            partly.append(Alloc(s, 1 << g, row[g], 0, 0, 0))
            row[g] = 0
    nic = free[0] & mask_of(b.nics)
    cpu = min(free[1], b.cpu_milli)
    mem = min(free[2], b.memory_mib)
    pod = 1 if free[3] > 0 else 0  # (below 0: pods above a lowered capacity stay)
    free[0] &= ~nic
    free[1] -= cpu
    free[2] -= mem
    free[3] -= pod
    whole = (
        Alloc(s, mask, b.gpu_milli, nic, cpu, mem, pod)
        if mask or nic or cpu or mem or pod
        else None
    )
    return whole, partly


def _free_parts(snap: Snapshot, s: int, bs: list[Binding]) -> list[Alloc]:
    """:func:`_parts` of each of ``bs`` (all on slot ``s``) as if each were taken before the
    next is looked at, merged into one :class:`Alloc` per GPU share while their GPUs are
    disjoint (then allocating the merged ones changes the row exactly as allocating each
    part in turn), and the parts of partly free GPUs apart."""
    cols = snap.cols
    row = [int(v) for v in cols.gpu_free[s]]
    free = [
        int(cols.nic_mask[s]),
        int(cols.cpu_free[s]),
        int(cols.mem_free[s]),
        int(cols.pod_free[s]),
    ]
    merged: dict[int, list[int]] = {}  # GPU milli -> [gpu mask, nic mask, cpu, mem, pods]
    out: list[Alloc] = []
    for b in bs:
        a, partly = _parts(s, b, row, free)
        out.extend(partly)
        if a is None:
            continue
        m = merged.get(a.milli)
        if m is None:
            merged[a.milli] = [a.gpu_mask, a.nic_mask, a.cpu, a.mem, a.pods]
        elif m[0] & a.gpu_mask:  # one GPU shared twice: a mask cannot say so, keep it apart
            out.append(a)
        else:
            m[0] |= a.gpu_mask
            m[1] |= a.nic_mask
            m[2] += a.cpu
            m[3] += a.mem
            m[4] += a.pods
    return [Alloc(s, m[0], milli, m[1], m[2], m[3], m[4]) for milli, m in merged.items()] + out


def release_exact(snap: Snapshot, b: Binding) -> Alloc | None:
    """Release ``b`` on the snapshot and return exactly what came back (unhealthy devices stay
    unallocatable, so re-allocating the result restores the rows exactly)."""
    s = slot_or_none(snap, b.node)
    if s is None:
        return None
    cols = snap.cols
    before = [int(cols.gpu_free[s, g]) for g in b.gpus]
    nic0, cpu0, mem0 = int(cols.nic_mask[s]), int(cols.cpu_free[s]), int(cols.mem_free[s])
    pods0 = int(cols.pod_free[s])
    snap.release_binding(b)
    mask = 0
    for g, v in zip(b.gpus, before, strict=True):
        if int(cols.gpu_free[s, g]) > v:
            mask |= 1 << g
    return Alloc(
        s,
        mask,
        b.gpu_milli,
        int(cols.nic_mask[s]) & ~nic0,
        int(cols.cpu_free[s]) - cpu0,
        int(cols.mem_free[s]) - mem0,
        int(cols.pod_free[s]) - pods0,
    )


_Whole = tuple[int, int, int, int, int]
"""A node's whole-GPU bindings added up: (GPU mask, NIC mask, CPU milli, memory MiB, pods)."""


_Grouped = tuple[tuple[str, ...], list[_Whole | list[Binding]]]
"""Bindings grouped by node (:func:`_by_node`): the nodes (for :meth:`Snapshot.slots_of`)
and, in the same order, each node's part."""


def _by_node(bindings: tuple[Binding, ...]) -> _Grouped:
    """The bindings grouped by node, in order of first appearance; a node whose bindings
    all hold whole GPUs, no GPU twice, as their sum (:data:`_Whole`)."""
    per: dict[str, list[Binding]] = {}
    for b in bindings:
        got = per.get(b.node)
        if got is None:
            per[b.node] = [b]
        else:
            got.append(b)
    parts: list[_Whole | list[Binding]] = []
    for bs in per.values():
        gpu = nic = cpu = mem = 0
        for b in bs:
            m = mask_of(b.gpus)
            if b.gpu_milli != MILLI or gpu & m:
                parts.append(bs)
                break
            gpu |= m
            nic |= mask_of(b.nics)
            cpu += b.cpu_milli
            mem += b.memory_mib
        else:
            parts.append((gpu, nic, cpu, mem, len(bs)))
    return tuple(per), parts


# the last few binding tuples held, grouped (a kept reservation is held again every cycle)
_GROUPED: dict[int, tuple[tuple[Binding, ...], _Grouped]] = {}


def _grouped(bindings: tuple[Binding, ...]) -> _Grouped:
    got = _GROUPED.get(id(bindings))
    if got is not None and got[0] is bindings:
        return got[1]
    if len(_GROUPED) >= 8:
        _GROUPED.clear()
    out = _by_node(bindings)
    _GROUPED[id(bindings)] = (bindings, out)
    return out


class Hold:
    """Devices held out of placement on the snapshot (a nomination or a reservation).

    :meth:`take` allocates the free part of ``bindings``; :meth:`give_back` releases exactly
    that; truthy when it holds anything."""

    def __init__(self, bindings: Sequence[Binding]) -> None:
        self.bindings = tuple(bindings)
        # the holds it joins (:meth:`joined`), each taken again on its own; () for a hold of
        # its own
        self.parts: tuple[Hold, ...] = ()
        self.pods_noted = False  # whether its pods were noted on the snapshot (Holds.nominate)
        self.taken: list[Alloc] = []
        # per allocation taken: its row's usage before (NodeColumns.usage) and its row
        # version after (Snapshot.row_version)
        self._usage: list[tuple[tuple[Any, ...], int | None]] = []

    def _take(self, snap: Snapshot, a: Alloc) -> None:
        before = snap.cols.usage(a.slot)
        a.take(snap)
        self._usage.append((before, snap.row_version(a.slot)))
        self.taken.append(a)

    def take(self, snap: Snapshot) -> None:
        """Hold the free part of the bindings on ``snap``: what taking each binding's free
        part in turn would hold, taken with one allocation per node and GPU share (the same
        rows as one allocation per binding; a gang of many pods costs its nodes, not its
        pods). A node whose bindings hold whole GPUs, none twice, is summed once per
        binding tuple (kept for the next take): its free part is then the free GPUs and NICs
        of the sum, and as much CPU and memory as is free up to the sum, exactly what taking
        each binding's free part in turn holds (pod slots alike: one per binding)."""
        self.taken = []
        self._usage = []
        self._take_parts(snap, None)

    def retake(self, snap: Snapshot, nodes: set[str]) -> None:
        """Hold again, exactly, what is free of the bindings on ``nodes`` (given back there
        first, the rest kept): after devices there freed, at the cost of those nodes only."""
        slots = {s for s in snap.slots_of(tuple(nodes)) if s >= 0}
        kept = [(a, u) for a, u in zip(self.taken, self._usage, strict=True) if a.slot not in slots]
        for a in self.taken:
            if a.slot in slots:
                a.give(snap)
        self.taken = [a for a, _u in kept]
        self._usage = [u for _a, u in kept]
        self._take_parts(snap, slots)

    def _take_parts(self, snap: Snapshot, only: set[int] | None) -> None:
        """Take the free part of the bindings (on the slots ``only``; None: everywhere)."""
        v = snap.cols.views()
        nodes, parts = _grouped(self.bindings)
        for s, part in zip(snap.slots_of(nodes), parts, strict=True):
            if s < 0 or (only is not None and s not in only):
                continue
            if isinstance(part, list):
                for a in _free_parts(snap, s, part):
                    self._take(snap, a)
                continue
            gpu, nic, cpu, mem, pods = part
            mask = gpu & v.free_mask[s]  # GPUs wholly free
            nic &= v.nic_mask[s]
            cpu = min(v.cpu_free[s], cpu)
            mem = min(v.mem_free[s], mem)
            pods = max(0, min(v.pod_free[s], pods))
            if mask or nic or cpu or mem or pods:
                self._take(snap, Alloc(s, mask, MILLI, nic, cpu, mem, pods))
            if gpu != mask:  # GPUs partly free (a victim's share ending): what is free of them
                for g in bits(gpu & ~mask):
                    left = int(snap.cols.gpu_free[s, g])
                    if left > 0:
                        self._take(snap, Alloc(s, 1 << g, left, 0, 0, 0))

    def give_back(self, snap: Snapshot) -> None:
        """Release what :meth:`take` held. A row that is as the take left it (its row
        version unchanged, or given back by a rollback) gets back its usage from before the
        take (what releasing gives it: the take allocated only free, healthy devices, so
        releasing adds back exactly what it took, at the cost of recounting the row); a row
        changed since is released. Last taken first, so that two allocations on one row
        unwind in turn."""
        for a, (before, after) in zip(reversed(self.taken), reversed(self._usage), strict=True):
            if snap.row_version(a.slot) == after:
                snap.restore_usage(a.slot, before)
            else:
                a.give(snap)

    def pool_agg_given_back(self, snap: Snapshot) -> IntArray | None:
        """The per-pool aggregates (:attr:`Snapshot.agg` ``["pool"]``, a new array) that
        :meth:`give_back` would leave on ``snap``, read off the rows without changing them,
        for a hold of whole GPUs (each now held, on a live node, healthy in the truth):
        giving back adds each row's GPUs back whole, whichever way :meth:`give_back` takes.
        None for any other hold (a share of a GPU, a device no longer held): only giving it
        back tells then. O(rows taken)."""
        per_slot: dict[int, int] = {}
        for a in self.taken:
            if a.milli != MILLI:
                return None
            if a.gpu_mask:
                had = per_slot.get(a.slot, 0)
                if had & a.gpu_mask:
                    return None
                per_slot[a.slot] = had | a.gpu_mask
        out = snap.agg["pool"].copy()
        v = snap.cols.views()
        w = v.width
        health = snap.state.health_masks
        for slot, mask in per_slot.items():
            name = snap.names[slot] if slot < len(snap.names) else None
            if name is None or not v.alive[slot] or name not in snap.state:
                return None
            ok, healthy, _nics = health(name)
            row = v.gpu_flat[slot * w : slot * w + w]
            if not ok or mask & ~healthy or any(row[g] for g in bits(mask)):
                return None
            pool = v.pool_id[slot]
            if pool < 0:
                continue
            n, free = v.gpus[slot], v.free_gpus[slot]
            k = popcount(mask)
            out[pool, Snapshot.AGG_FREE_GPUS] += k
            out[pool, Snapshot.AGG_FREE_NODES] += int(free + k == n) - int(free == n)
            out[pool, Snapshot.AGG_FREE_MILLI] += MILLI * k
        return out

    @staticmethod
    def joined(holds: Sequence[Hold]) -> Hold:
        """One hold of ``holds`` (taken already, in that order): giving it back gives back
        each (last taken first); :meth:`Holds.placed` takes each again in turn. The hold
        itself when there is one."""
        if len(holds) == 1:
            return holds[0]
        out = Hold(tuple(b for h in holds for b in h.bindings))
        for part in holds:
            out._adopt(part)
        out.parts = tuple(holds)
        return out

    def _adopt(self, other: Hold) -> None:
        """Count what ``other`` took as taken by this hold too (given back with it)."""
        self.taken.extend(other.taken)
        self._usage.extend(other._usage)

    def __bool__(self) -> bool:
        return bool(self.taken)

    def whole_on(self, snap: Snapshot, nodes: set[str]) -> bool:
        """Did :meth:`take` hold the whole of the bindings on ``nodes`` (every GPU share,
        NIC, CPU, memory and pod slot they name), so that none of them waits for a pod
        running there to go? O(bindings + allocations taken)."""
        need: dict[int, Counter[tuple[str, int]]] = {}
        for b in self.bindings:
            if b.node not in nodes:
                continue
            s = snap.slot_if_here(b.node)
            if s is None:
                return False
            c = need.setdefault(s, Counter())
            for g in b.gpus:
                c["gpu", g] += b.gpu_milli
            for i in b.nics:
                c["nic", i] += 1  # (a NIC named twice: held once at most, never whole)
            c["cpu", 0] += b.cpu_milli
            c["mem", 0] += b.memory_mib
            c["pods", 0] += 1
        got: dict[int, Counter[tuple[str, int]]] = {s: Counter() for s in need}
        for a in self.taken:
            t = got.get(a.slot)
            if t is None:
                continue
            for g in bits(a.gpu_mask):
                t["gpu", g] += a.milli
            for i in bits(a.nic_mask):
                t["nic", i] = 1
            t["cpu", 0] += a.cpu
            t["mem", 0] += a.mem
            t["pods", 0] += a.pods
        return all(got[s][k] >= v for s, c in need.items() for k, v in c.items())


class Holds:
    """Every hold of one cycle: the devices nominated for each preemptor, and the queueing
    policy's reservations. ``epoch`` counts the times held devices were freed within the
    cycle (a placement that failed before may succeed after).

    Each reservation is held with its start: the holds are taken soonest start first (a
    later one, when it starts earlier, is taken before them again), so a device several
    reservations book is held by the one that starts first. Then a job that ends by time
    ``t`` may use what the reservations starting at or after ``t`` hold (:meth:`opens`):
    exactly the devices no reservation needs before ``t``."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.nominated: dict[str, Hold] = {}
        # every reservation's hold as one (None: nothing reserved)
        self.reserved: Hold | None = None
        # (start, number, hold) per reservation, soonest start first (ties: first reserved
        # first), each taken after those before it
        self.booked: list[tuple[float, int, Hold]] = []
        # the holds opened together (see opens), joined, by their numbers; valid while the
        # holds stay as they are
        self._joins: dict[tuple[int, ...], Hold] = {}
        self.epoch = 0

    def is_nominated(self, job: str) -> bool:
        """Does ``job`` hold devices nominated for it?"""
        return job in self.nominated

    def nominate(self, job: str, bindings: Sequence[Binding], owner: Job | None = None) -> None:
        """Hold ``bindings`` for the preemptor ``job``. With ``owner`` (the job) labelled,
        its pods count for pod affinity where they are nominated, as kube-scheduler counts
        nominated pods, until the nomination is opened for its placement or dropped: for
        anti-affinity, and for required affinity only where it is met without them too."""
        h = Hold(bindings)
        h.take(self.snap)
        self.nominated[job] = h
        if owner is not None and owner.labelled:
            h.pods_noted = True
            self.snap.record_placed(owner, self.snap.here(bindings), nominated=True)

    def reserve(self, bindings: Sequence[Binding], start: float) -> None:
        """Hold ``bindings`` for a reservation starting at ``start`` (a policy may reserve
        for several jobs; the holds add up). The holds of reservations starting later are
        given back and taken again after it, so that each device is held by the earliest
        reservation booking it (what all of them hold together is the same in any order:
        the free part of every binding)."""
        h = Hold(bindings)
        booked = self.booked
        i = bisect.bisect_right(booked, start, key=lambda x: x[0])
        later = booked[i:]
        for _s, _n, lh in reversed(later):
            lh.give_back(self.snap)
        h.take(self.snap)
        for _s, _n, lh in later:
            lh.take(self.snap)
        booked.insert(i, (start, len(booked), h))
        self._rejoin()

    def _rejoin(self) -> None:
        """The holds changed: join them again."""
        self.reserved = Hold.joined([h for _s, _n, h in self.booked]) if self.booked else None
        self._joins.clear()

    def opens(self, until: float) -> bool | tuple[int, ...]:
        """What a job expected to end at ``until`` may use of the reservations: the holds of
        those starting at or after it (each holds only devices no earlier-starting
        reservation books). False: none; True: all; else their numbers (a key: the same
        numbers open the same devices, or fewer once more is reserved)."""
        booked = self.booked
        if not booked or booked[-1][0] < until:
            return False
        if booked[0][0] >= until:
            return True
        i = bisect.bisect_left(booked, until, key=lambda x: x[0])
        return tuple(n for _s, n, _h in booked[i:])

    def opening(self, opens: bool | tuple[int, ...]) -> Hold | None:
        """The reservation holds ``opens`` (:meth:`opens`; True: all) names, as one hold
        (None: none)."""
        if opens is True:
            return self.reserved
        if not opens:
            return None
        got = self._joins.get(opens)
        if got is None:
            want = set(opens)
            got = self._joins[opens] = Hold.joined([h for _s, n, h in self.booked if n in want])
        return got

    def drop(self, job: str) -> None:
        """The nomination of ``job`` has served its time: free its devices."""
        h = self.nominated.pop(job)
        h.give_back(self.snap)
        if h.pods_noted:
            self.snap.note_gone(b.pod for b in h.bindings)
        self.epoch += 1

    def open_for(self, job: str, *, reserved: Hold | None) -> tuple[Hold | None, Hold | None]:
        """Give the job's own nomination (and ``reserved``, what it may use of the
        reservations: :meth:`opening`) back to the snapshot for its placement attempt;
        returns them for :meth:`placed`."""
        own = self.nominated.get(job)
        for h in (own, reserved):
            if h is not None:
                h.give_back(self.snap)
        if own is not None and own.pods_noted:  # (its pods are placed anew, or not at all)
            self.snap.note_gone(b.pod for b in own.bindings)
        return own, reserved

    def placed(self, job: str, opened: tuple[Hold | None, Hold | None]) -> None:
        """After the job was placed with what :meth:`open_for` opened: its nomination ends,
        and the reservations opened are held again (on what is still free), each in turn
        (those starting later than them were opened too, so the order holds)."""
        own, res = opened
        if own is not None:
            del self.nominated[job]
            self.epoch += 1
        if res is not None:
            for h in res.parts or (res,):
                h.take(self.snap)
            if res.parts or len(self.booked) > 1:
                self._rejoin()
            self.epoch += 1
