"""The light replay over columns: :meth:`kant.preemption.preemptor.Preemption._reachable`
as a few numpy passes over the cycle's candidate records instead of a Python step (and
quota-ledger changes) per candidate.

The replay walks the candidates in the preemptor's order; another tenant's unit counts only
while that tenant still borrows on its GPU model (for a reclaim, only on a model the reclaim
is for). With one model per unit, a tenant's units on one model count as a prefix of them:
those before which the usage removed so far (an exclusive running sum) is below the
tenant's usage beyond its nominal quota. The checks at 1, 2, 4... counted units then need
only the ledger changes of each step (summed per tenant and model: the ledger's arithmetic
telescopes) and per-node GPU counts summed by slot; the nodes of the preemptor's pools that
reach ``g`` free GPUs are read once per call (more room is never less: the walk's early stop
gives the same answer as the full count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np

from kant.admission.quota import QuotaLedger

if TYPE_CHECKING:
    from kant.preemption.candidates import VictimColumns, VictimRef


class RefsAt(Sequence["VictimRef"]):
    """The records at positions ``pos`` of a cycle's candidate list, in that order, read on
    demand: a pre-filter keeps thousands of candidates of which a search reaches a few, so
    neither it nor the light replay builds the list (a slice is a view too)."""

    __slots__ = ("pos", "refs")

    def __init__(self, refs: list[VictimRef], pos: np.ndarray) -> None:
        self.refs = refs
        self.pos = pos

    def __len__(self) -> int:
        return len(self.pos)

    @overload
    def __getitem__(self, i: int) -> VictimRef: ...
    @overload
    def __getitem__(self, i: slice) -> RefsAt: ...
    def __getitem__(self, i: int | slice) -> VictimRef | RefsAt:
        if isinstance(i, slice):
            return RefsAt(self.refs, self.pos[i])
        return self.refs[int(self.pos[i])]

    def __iter__(self) -> Iterator[VictimRef]:
        refs = self.refs
        return (refs[i] for i in self.pos.tolist())


class Flat:
    """One cycle's candidate records, flattened (:meth:`VictimColumns.flat`): per record its
    slots (``ptr`` into ``slot`` and ``n``: node slot, GPUs held there), its one GPU model
    (index into ``models``; -1 when it holds on several) and the GPU milli it holds there.
    Built from a pool of slot pairs: record i's are ``pool_*[pstart[i] : pstart[i] +
    plen[i]]``."""

    def __init__(
        self,
        *,
        plen: np.ndarray,
        pstart: np.ndarray,
        pool_slot: np.ndarray,
        pool_n: np.ndarray,
        model: np.ndarray,
        milli: np.ndarray,
        models: list[str],
    ) -> None:
        self.ptr = np.zeros(len(plen) + 1, dtype=np.int64)
        np.cumsum(plen, out=self.ptr[1:])
        entries, _owner = _segments(pstart, plen, np.arange(len(plen), dtype=np.int64))
        self.slot = pool_slot[entries]
        self.n = pool_n[entries]
        self.model = model
        self.milli = milli
        self.models = models

    @classmethod
    def of_refs(cls, refs: Sequence[VictimRef]) -> Flat:
        """From the records themselves (one pass)."""
        plen: list[int] = []
        pairs: list[tuple[int, int]] = []
        model: list[int] = []
        milli: list[int] = []
        ids: dict[str, int] = {}
        for r in refs:
            pairs.extend(r.slots)
            plen.append(len(r.slots))
            u = r.usage
            if len(u) == 1:
                m, x = u[0]
                model.append(ids.setdefault(m, len(ids)))
                milli.append(x)
            else:
                model.append(-1)
                milli.append(0)
        flat = np.array(pairs, dtype=np.int64).reshape(len(pairs), 2)
        lens = np.array(plen, dtype=np.int64)
        return cls(
            plen=lens, pstart=np.cumsum(lens) - lens, pool_slot=flat[:, 0].copy(),
            pool_n=flat[:, 1].copy(), model=np.array(model, dtype=np.int64),
            milli=np.array(milli, dtype=np.int64), models=list(ids),
        )  # fmt: skip


def _segments(
    start: np.ndarray, length: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The flat entries of records ``pos`` (in that order; record i's are ``start[i]`` on,
    ``length[i]`` of them) and, for each entry, its record's place in ``pos``."""
    starts = start[pos]
    counts = length[pos]
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(pos), dtype=np.int64), counts)
    first = np.cumsum(counts) - counts  # where each record's entries begin in the output
    flat = starts[owner] + (np.arange(total, dtype=np.int64) - first[owner])
    return flat, owner


def _potential(
    slot: np.ndarray, n: np.ndarray, free: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct slots of the entries ``(slot, n)``, each entry's place among them, and
    per distinct slot its free GPUs plus the GPUs the entries hold there."""
    uniq, inv = np.unique(slot, return_inverse=True)
    pot = free[uniq].astype(np.int64) + np.bincount(inv, weights=n).astype(np.int64)
    return uniq, inv, pot


def light_replay(
    *,
    cols: VictimColumns,
    pos: np.ndarray,
    tenant: str,
    ledger: QuotaLedger,
    quota_ok: Callable[[], bool],
    dec_ok: bool,
    g: int,
    need_pods: int,
    free: np.ndarray,
    room_slots: Callable[[], np.ndarray],
    on: frozenset[str] | None = None,
) -> tuple[Sequence[VictimRef] | None, bool]:
    """The answer of the replay for the candidates at positions ``pos`` of ``cols``, in
    that order (see the module docstring), as a view (:class:`RefsAt`), or None when a
    candidate holds on several GPU models (the caller walks them one by one); and whether
    the order cut a tenant's units (a unit of another tenant did not count because that
    tenant's earlier units had brought it back within its nominal quota: in another order
    other units of it would count). ``quota_ok()`` asks quota on the ledger as it is;
    ``room_slots()``: every node slot of the preemptor's pools with at least ``g`` free GPUs
    (asked at most once, and only when the candidates' own nodes do not make room). ``on``:
    the GPU models a reclaim is for (another tenant's unit on any other model never counts),
    None for any."""
    flat = cols.flat()
    model = flat.model[pos]
    if len(pos) and int(model.min()) < 0:
        return None, False
    milli = flat.milli[pos]
    entries, owner = _segments(flat.ptr[:-1], np.diff(flat.ptr), pos)
    slot = flat.slot[entries]
    n = flat.n[entries]
    k = len(pos)
    if g > 1 and dec_ok:  # units whose nodes cannot reach g free GPUs even with all gone
        _uniq, inv, potential = _potential(slot, n, free)
        reach = potential[inv] >= g
        ok = np.zeros(k, dtype=bool)
        ok[owner[reach]] = True
        keep = np.flatnonzero(ok)
        if len(keep) != k:
            pos, model, milli = pos[keep], model[keep], milli[keep]
            renum = np.full(k, -1, dtype=np.int64)
            renum[keep] = np.arange(len(keep), dtype=np.int64)
            sel = ok[owner]
            slot, n, owner = slot[sel], n[sel], renum[owner[sel]]
            k = len(keep)
    tid = cols.tenant[pos]
    own = cols.tenant_of.get(tenant, -1)
    unlimited = ledger.table.unlimited
    counted = np.ones(k, dtype=bool)
    cut = False
    tenants = sorted(cols.tenant_of, key=cols.tenant_of.__getitem__)
    nm = max(1, len(flat.models))
    if not unlimited:
        other = tid != own
        if on is not None and other.any():  # (another tenant's unit off the reclaim's models)
            off = np.array([m not in on for m in flat.models], dtype=bool)
            away = other & off[model]
            counted[away] = False
            other &= ~away
        if other.any():
            group = tid * nm + model
            idx = np.flatnonzero(other)
            gsel = group[idx]
            order = np.argsort(gsel, kind="stable")
            gs = gsel[order]
            xs = milli[idx][order]
            cs = np.cumsum(xs) - xs  # exclusive running sum over the sorted units
            starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
            lens = np.diff(np.r_[starts, len(gs)])
            base = np.repeat(cs[starts], lens)
            excess = np.zeros(len(starts), dtype=np.int64)
            for j, s in enumerate(starts.tolist()):
                gid = int(gs[s])
                t, m = tenants[gid // nm], flat.models[gid % nm]
                excess[j] = ledger.used(t, m) - ledger.table.terms(t, m)[1]
            borrowed = np.repeat(excess, lens)
            still = (cs - base) < borrowed
            counted[idx[order]] = still
            cut = bool((~still & (borrowed > 0)).any())
    kept_at = np.flatnonzero(counted)  # places in picked of the counted units, in order
    total = len(kept_at)
    rank = np.full(k, total, dtype=np.int64)
    rank[kept_at] = np.arange(total, dtype=np.int64)
    entry_rank = rank[owner]
    spare: list[tuple[np.ndarray, np.ndarray]] = []  # (slots, whole g-GPU room on each)

    def room_ok(count: int) -> bool:
        if g < 1:
            return True
        sel = entry_rank < count
        uniq, _inv, pot = _potential(slot[sel], n[sel], free)
        room = int((pot // g).sum())
        if room >= need_pods:
            return True
        if not spare:
            rs = room_slots()
            spare.append((rs, free[rs].astype(np.int64) // g))
        rs, per = spare[0]
        if len(rs):
            # the spare nodes the units are not on: a mask over every slot (np.isin sorts)
            on_units = np.zeros(free.shape[0], dtype=bool)
            on_units[uniq] = True
            room += int(per[~on_units[rs]].sum())
        return room >= need_pods

    group = tid * nm + model
    ngroups = len(tenants) * nm
    done = 0  # counted units whose usage is off the ledger

    def take_off(upto: int) -> None:
        nonlocal done
        if dec_ok or upto <= done:
            return
        sel = kept_at[done:upto]
        sums = np.zeros(ngroups, dtype=np.int64)
        np.add.at(sums, group[sel], milli[sel])
        for gid in np.flatnonzero(sums).tolist():
            ledger.add(tenants[gid // nm], flat.models[gid % nm], -int(sums[gid]))
        done = upto

    check = 1
    while check <= total:
        take_off(check)
        if quota_ok() and room_ok(check):
            i = int(kept_at[check - 1])
            return RefsAt(cols.refs, np.concatenate((pos[kept_at[:check]], pos[i + 1 :]))), cut
        check *= 2
    if not total:
        return [], cut
    take_off(total)
    if quota_ok() and room_ok(total):
        return RefsAt(cols.refs, pos[kept_at]), cut
    return [], cut


def room_after(flat: Flat, pos: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Per candidate at positions ``pos`` (of :meth:`VictimColumns.flat`'s records): the most
    free whole GPUs one of its nodes has once it is gone (``free``: per node slot). O(pods of
    the candidates), numpy."""
    entries, owner = _segments(flat.ptr[:-1], np.diff(flat.ptr), pos)
    best = np.full(len(pos), -1, dtype=np.int64)
    if not len(entries):
        return best
    slot = flat.slot[entries]
    width = int(slot.max()) + 1
    # (a unit's pods on one node free what they hold there together)
    uniq, inv = np.unique(owner * width + slot, return_inverse=True)
    held = np.bincount(inv, weights=flat.n[entries]).astype(np.int64)
    np.maximum.at(best, uniq // width, free[uniq % width].astype(np.int64) + held)
    return best
