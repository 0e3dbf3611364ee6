"""The victim search's view of a cycle: snapshot and quota-ledger changes in nested scopes
(:class:`kant.contracts.WhatIf`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs

from kant.admission.holds import Alloc, release_exact
from kant.admission.pools import Pools
from kant.admission.quota import QuotaDecision, QuotaLedger, admit_quota, narrowed_fits
from kant.contracts import PlaceFn
from kant.model import Binding, Job, PodId, pods_milli, pods_per_role
from kant.preemption.rules import VictimUnit
from kant.state import Snapshot, Transaction


class Scope:
    """One what-if scope; :meth:`commit` keeps its changes in the enclosing one."""

    def __init__(self, tx: Transaction) -> None:
        self.tx = tx
        self.committed = False

    def commit(self) -> None:
        """Keep this scope's changes when it ends."""
        self.committed = True


class CycleWhatIf:
    """What-ifs for one preemptor (``job``, its ``pods`` and their allowed GPU models) on the
    cycle's snapshot and quota ledger. ``needs_nominal(unit)``: evicting ``unit`` is a
    reclaim, so the preemptor's tenant must end within its nominal quota while such a unit
    is among the removed ones (a reclaimer does not borrow)."""

    def __init__(
        self,
        snap: Snapshot,
        ledger: QuotaLedger,
        pools: Pools,
        place: PlaceFn,
        job: Job,
        pods: tuple[PodId, ...],
        role_models: dict[str, tuple[str, ...]],
        needs_nominal: Callable[[VictimUnit], bool] | None = None,
    ) -> None:
        self.snap = snap
        self.ledger = ledger
        self.pools = pools
        self._place = place
        self.job = job
        self.pods = pods
        self.role_models = role_models
        self.freed: dict[tuple[PodId, ...], list[tuple[Alloc, Binding]]] = {}
        self.dec: QuotaDecision | None = None
        # a reclaimer's choices of one model per role within nominal readiness passes one
        # of, when its decision narrowed to its nominal models it refuses (see ready)
        self.alts: tuple[QuotaDecision, ...] = ()
        # readiness on every allowed model (see ready)
        self.counts = pods_per_role(job, pods)
        self.role_pools = pools.role_pools(role_models)
        self.pool_ids = sorted({p for ps in self.role_pools.values() for p in ps})
        self.need = pods_milli(job, pods)
        self.needs_nominal = needs_nominal
        self.reclaimed = 0  # removed units that need the preemptor within nominal

    @contextmanager
    def scope(self) -> Iterator[Scope]:
        """A nested transaction over the snapshot and the ledger (undone unless committed)."""
        mark = self.ledger.mark()
        reclaimed = self.reclaimed
        with self.snap.transaction() as tx:
            s = Scope(tx)
            yield s
            if s.committed:
                tx.commit()
        if not s.committed:
            self.ledger.rollback(mark)
            self.reclaimed = reclaimed

    def remove(self, unit: VictimUnit) -> None:
        """Free what ``unit`` holds, on the snapshot and in the ledger."""
        freed = []
        for b in unit.bindings:
            a = release_exact(self.snap, b)
            if a is not None:
                freed.append((a, b))
        self.freed[unit.pods] = freed
        for m, milli in unit.usage:
            self.ledger.add(unit.tenant, m, -milli)
        if self.needs_nominal is not None and self.needs_nominal(unit):
            self.reclaimed += 1

    def restore(self, unit: VictimUnit) -> None:
        """Take back exactly what :meth:`remove` freed."""
        back = self.freed.get(unit.pods, ())
        for a, _b in back:
            a.take_back(self.snap)
        self.snap.note_back([b for _a, b in back])  # (its pods run there again: pod affinity)
        for m, milli in unit.usage:
            self.ledger.add(unit.tenant, m, milli)
        if self.needs_nominal is not None and self.needs_nominal(unit):
            self.reclaimed -= 1

    def ready(self) -> bool:
        """Free milli, then quota for every pod (within nominal while a reclaimed unit is
        removed, on the models where it is: a reclaimer never borrows), then readiness
        (cheap, necessary) on the models quota admits.

        Readiness on every allowed model is tested before quota: it is necessary for
        readiness on the admitted ones (fewer pools only make it harder), and it is what
        fails while a search frees capacity scattered over many nodes (a job of one 8-GPU
        pod waits for some node to have 8 free GPUs), so the quota decision is not made at
        every step of it. When quota admits every model, that test is the last one.

        A reclaimer's decision narrowed to its nominal models that readiness refuses is
        not the end for a gang with a role on several models: its choices of one model per
        role within nominal (:func:`kant.admission.quota.narrowed_fits`, the list the
        cycle places from) are read too, and it is ready when readiness passes one."""
        self.dec = None
        self.alts = ()
        if self.snap.pools_free_milli(self.pool_ids) < self.need:
            return False
        if self.pools.ready_on(self.job, self.counts, self.role_pools) is not None:
            return False
        dec = admit_quota(self.ledger, self.job, self.pods, self.role_models, nodes=self.pools)
        if not dec.ok or len(dec.pods) != len(self.pods):
            return False
        if self.reclaimed:  # a reclaimer runs where its tenant stays within nominal
            if not dec.within_nominal:
                return False
            if not dec.places_within_nominal:
                return False  # (its nominal models need more victims first)
            if dec.nominal_models != dec.models:
                dec = attrs.evolve(dec, models=dec.nominal_models)
                if self.pools.ready(self.job, dec) is not None:
                    # (none of its choices within nominal passes either: nothing to place)
                    alts = self._narrowed()
                    if not any(self.pools.ready(self.job, a) is None for a in alts):
                        return False
                    self.alts = alts
                    return True
        self.dec = dec
        # (every pod admitted: the same counts as above, so the same pools, the same answer)
        return dec.models == self.role_models or self.pools.ready(self.job, dec) is None

    def _narrowed(self) -> tuple[QuotaDecision, ...]:
        """The gang's choices of one model per role the cycle would place from once its
        placement failed (:func:`kant.admission.quota.narrowed_fits` on the ledger now);
        while a reclaimed unit is removed, only those within nominal (they come first)."""
        fits = narrowed_fits(self.ledger, self.job, self.pods, self.role_models)
        if self.reclaimed:
            fits = tuple(f for f in fits if f.within_nominal and f.places_within_nominal)
        return fits

    def place(self) -> tuple[Binding, ...] | None:
        """The real placement of every pod (undone afterwards), or None. A gang whose
        placement fails (or, a reclaimer, whose decision narrowed to its nominal models
        readiness refused) is placed with one GPU model per role, as the cycle places it:
        the same list (:func:`kant.admission.quota.narrowed_fits`; a reclaimer only its
        choices within nominal), so victims are chosen for a placement the cycle makes
        once they are gone."""
        job = self.job
        dec = self.dec
        if dec is None and not self.alts:
            return None
        with self.snap.transaction():
            tried = None
            if dec is not None:
                res = self._place(self.pools.restricted(job, dec), dec.pods)
                if res.bindings and not res.unplaced:
                    return tuple(res.bindings)
                if not job.gang:
                    return None
                tried = dec.models
            fits = self.alts if dec is None else self._narrowed()
            got = self.pools.place_narrowed(job, fits, self._place, tried) if fits else None
            return None if got is None else tuple(got[1].bindings)
