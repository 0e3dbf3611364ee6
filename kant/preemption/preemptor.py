"""The preemptor: one cycle's preemption engine, reached by the cycle through one call per
preempting job (and one after each preemption that chose victims).

:meth:`Preemption.preempt` takes a job that failed for a reason preemption may resolve and
returns a :class:`~kant.queueing.Nomination` (its victims and the placement they free) or
None. In between, in order of cost:

1. the conservative limits of the :class:`~kant.preemption.PreemptionPolicy` (searches and
   preemptors per cycle, a budget of cheap checks), and a memo of hopeless requests;
2. a pre-filter over the light candidate records in victim order, with the same rules as the
   exact check (:mod:`kant.preemption.rules`);
3. a light replay on the quota ledger and per-node GPU counts (:meth:`Preemption._reachable`);
4. the minimal victim search with real placements (:func:`kant.preemption.search.find_victims`).

Steps 3 and 4 walk the candidates in victim order; a reclaim whose walk failed because a
borrower's units taken first brought it back within nominal (so its other units were
skipped) walks once more, the units that free the most on one node first
(:meth:`Preemption._find`).

After a preemption, :meth:`Preemption.spare_needless` keeps the cycle's victims minimal
together: a victim an earlier preemptor of the cycle took for quota, which the new victims
made needless, is given back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import numpy as np

from kant.admission.holds import Hold, Holds, release_exact, slot_or_none
from kant.admission.pools import Pools
from kant.admission.quota import QuotaDecision, QuotaLedger, admit_quota
from kant.contracts import PlaceFn
from kant.model import (
    PREEMPTIBLE_CODES,
    Binding,
    Job,
    PodId,
    Reason,
    Victim,
    VictimReason,
    placed_by_own_pods,
    pods_milli,
    pods_per_role,
)
from kant.preemption.candidates import VictimIndex, VictimRef
from kant.preemption.policy import PreemptionPolicy
from kant.preemption.replay import RefsAt, light_replay, room_after
from kant.preemption.rules import Preemptor, VictimUnit, builtin_reason
from kant.preemption.search import find_victims
from kant.preemption.whatif import CycleWhatIf
from kant.queueing import Entry, Nomination
from kant.state import Snapshot

LIGHT_CHECKS_PER_SEARCH = 4
"""Per allowed victim search, how many would-be preemptors may run the cheap checks that
decide whether a search is worth it (``max_searches_per_cycle`` times this, per cycle)."""


def _admits_all(
    dec: QuotaDecision,
    led: QuotaLedger,
    job: Job,
    pods: tuple[PodId, ...],
    role_models: dict[str, tuple[str, ...]],
) -> bool:
    """Does quota admit every pod of ``pods`` on ``led`` (``dec``: its decision before any
    victim went), on a model of each role where its tenant stays within nominal when it is
    within nominal somewhere (where a reclaimer may run: :attr:`QuotaDecision.nominal_models`)?
    A few quota checks."""
    if dec.clears_quota:
        return True
    full = admit_quota(led, job, pods, role_models)
    return full.clears_quota and len(full.pods) == len(pods)


def _nominal_room(
    led: QuotaLedger, job: Job, pods: tuple[PodId, ...], role_models: dict[str, tuple[str, ...]]
) -> frozenset[str]:
    """The GPU models, over the roles of ``pods`` that ask GPUs, on which ``job``'s tenant
    stays within its nominal quota on ``led`` with that role's pods (an earlier role counted
    on the models where it does, as :func:`~kant.admission.quota.admit_quota` counts it)."""
    counts = pods_per_role(job, pods)
    extra: dict[str, int] = {}
    out: set[str] = set()
    for role in job.roles:
        n = counts.get(role.name, 0)
        demand = role.resources.total_milli * n
        if not demand:
            continue
        mine = [
            m
            for m in role_models.get(role.name, ())
            if led.within_nominal(job.tenant, m, extra.get(m, 0) + demand)
        ]
        out.update(mine)
        for m in mine:
            extra[m] = extra.get(m, 0) + demand
    return frozenset(out)


class Preemption:
    """Preemption for one cycle: its limits, its memo, and the victims chosen so far."""

    def __init__(
        self,
        policy: PreemptionPolicy,
        *,
        snap: Snapshot,
        ledger: QuotaLedger,
        pools: Pools,
        index: VictimIndex,
        place: PlaceFn,
        now: float,
        holds: Holds | None = None,
        uncharged: dict[PodId, tuple[str, str, int]] | None = None,
    ) -> None:
        self.policy = policy
        self.holds = holds
        self.uncharged = uncharged if uncharged is not None else {}
        self._terminating: list[tuple[Binding, str]] | None = None
        self._going_list: tuple[int, list[tuple[Binding, str]]] | None = None
        self._searched = False
        # the last attempt of _find skipped a unit of another tenant because that tenant's
        # units taken before it had brought it back within its nominal quota
        self._cut = False
        self.snap = snap
        self.ledger = ledger
        self.pools = pools
        self.index = index
        self.place = place
        self.now = now
        self.victims: list[Victim] = []
        # the jobs with running pods whose nomination still waits for victims to go (id ->
        # submission number), nominated in this cycle or an earlier one: none of their pods
        # is a victim meanwhile (see preempt); read again from the cycle's holds whenever
        # they change (_note_nominated)
        self.preempting: dict[str, int] = {}
        self._nominating: set[str] = set()  # the jobs nominated in this cycle
        # per job nominated before this cycle: does its nomination wait for a victim still
        # terminating (fixed for the cycle: the queue changes between cycles only)?
        self._waits: dict[str, bool] = {}
        self._preempting_at: tuple[int, int] | None = None  # the holds it was read from
        self._preempting_version = 0  # one more each time preempting changes
        self.victim_pods: set[PodId] = set()
        self.searches = 0
        self.preemptors = 0
        self.search_ms = 0.0
        self.light_checks = 0
        self.hopeless: set[tuple[Any, ...]] = set()
        self.given_back = 0  # victims given back this cycle (spare_needless)
        self._own: dict[tuple[str, int, int, int], dict[str, int] | None] = {}  # _own_below's
        self._own_of: list[VictimRef] | None = None  # the refs self._own was derived from
        # the policy's fixed answers, read once per cycle (the cheap exits run per waiting job)
        self._enabled = policy.enabled

    def may_preempt(self, reason: Reason, *, partly_placed: bool, nominated: bool) -> bool:
        """May a job that failed for ``reason`` try to preempt now? Not when
        ``partly_placed`` (part of it was placed this cycle and the rest must wait for a
        later cycle: the cycle says which, see :meth:`kant.cycle._Cycle.consider`), when it
        already holds a nomination, or past the per-cycle cap."""
        if not self._enabled or partly_placed or nominated:
            return False
        cap = self.policy.max_preemptors_per_cycle
        return reason.code in PREEMPTIBLE_CODES and (cap is None or self.preemptors < cap)

    def closed(self, e: Entry, dec: QuotaDecision, may_backfill: bool) -> bool:
        """Would :meth:`preempt` return None for ``e`` at its cheap exits (the per-cycle caps,
        no cascades, no kind of preemption open to it)? They change nothing and build
        nothing; the only victim data read is the first unit in victim order (the lowest
        priority running), so this is the test a waiting job that cannot preempt costs.

        Priority preemption is closed to a job when nobody runs below its priority; then
        reclaim is open only to a job already within its nominal quota, or a pod-level job
        whose first pods are (:attr:`QuotaDecision.nominal_pods`; preempting its own
        tenant's lower-priority units, :meth:`_nominal_after_own`, finds nobody either)."""
        pol = self.policy
        cap = pol.max_searches_per_cycle
        if cap is not None and (
            self.searches >= cap or self.light_checks >= LIGHT_CHECKS_PER_SEARCH * cap
        ):
            return True
        backfill = may_backfill and pol.backfill
        if self._being_evicted(e):
            # by no kind, backfill included: its search would count its running pods, and
            # one of them requeued would take the devices found for its next pods
            return True
        if e.evicted_at is not None and self.now - e.evicted_at < pol.cascade_window:
            return not backfill  # a cascade may only take back what backfilled past it
        if backfill or pol.rules:
            return False
        if pol.priority:
            refs = self.index.refs()
            if refs and refs[0].priority < e.job.priority:
                return False  # someone runs below it
        if pol.reclaim and (dec.within_nominal or dec.nominal_pods):
            return False
        return not self._anything_going()

    def _anything_going(self) -> bool:
        """Is any victim pod still to go? (:meth:`_going` keeps its list per number of
        victims chosen this cycle: nothing else changes it within a cycle.)"""
        return bool(self._going())

    def preempt(
        self,
        e: Entry,
        dec: QuotaDecision,
        role_models: dict[str, tuple[str, ...]],
        may_backfill: bool,
        *,
        epoch: tuple[int, ...],
        pods: tuple[PodId, ...] | None = None,
    ) -> tuple[Nomination, int] | None:
        """Search victims for ``e`` (``pods``: those left of a job placed in part this
        cycle, whose placement counts the pods placed, or else its remaining pods; quota decision
        ``dec`` on them, on the cycle's ledger; the GPU
        models each role may use, :meth:`kant.admission.Pools.role_models`); ``epoch``
        identifies what the cycle changed so far (a hopeless answer holds while it is the
        same). Returns the nomination and the number of victim units, or None.

        Conservative across preemptors and cycles: first, does the job fit the cluster as it
        will be once every victim already chosen (this cycle or earlier, still terminating)
        is gone, with every nomination held? Then capacity those victims free beyond their
        preemptors' needs serves it, and nothing more is evicted. A job evicted by
        preemption within ``cascade_window`` does not preempt by priority or reclaim (no
        cascades); as a Backfill head it may still take back what backfilled past it. A job
        whose pods are being evicted does not preempt by any kind, backfill included.
        Symmetrically, no victim is taken from the running pods of a job whose nomination,
        made in this cycle or an earlier one, still waits for pods to go (:attr:`preempting`).
        A pod-level job that cannot
        be placed whole preempts for as many of its pods as preemption can place; when the
        whole request would borrow, its first pods within its tenant's nominal quota (once
        the tenant's own lower-priority units are gone, as for a whole request) reclaim for
        themselves, and that many are tried first."""
        # The cheap exits first (each returns None and changes nothing, so their order is
        # free): most would-be preemptors of a busy cycle stop here, before the victim index.
        if self.closed(e, dec, may_backfill):
            return None
        self._note_nominated()
        pol = self.policy
        # (no cascades: a job just evicted does not evict in turn, see closed; one whose pods
        # are being evicted stopped there)
        cascade = e.evicted_at is not None and self.now - e.evicted_at < pol.cascade_window
        job = e.job
        quotas = not self.ledger.table.unlimited
        placed_in_part = pods is not None
        if pods is None:
            pods = e.remaining()
        refs = self.index.refs()
        within, nominal = dec.within_nominal, 0
        if not within and quotas and pol.reclaim and not cascade:
            # (nominal: a pod-level job's first pods within nominal, its whole request not)
            within, nominal = self._nominal_after_own(e, dec, pods, role_models, refs)
        reclaim = pol.reclaim and within and not cascade
        backfill = pol.backfill and may_backfill
        prio = job.priority if pol.priority and not cascade else None
        # (past closed, some kind of preemption is open to the job: a rule, backfill,
        # reclaim, someone running below its priority, or victims still to go)
        going = self._going()
        memo = (
            *self._memo(e, pods, role_models, prio, reclaim, backfill, dec, epoch, placed_in_part),
            nominal,
        )
        if memo in self.hopeless:
            return None  # (most would-be preemptors of a busy cycle stop here)
        self.light_checks += 1
        pre = Preemptor(
            job=job.id,
            tenant=job.tenant,
            priority=job.priority,
            within_nominal=within,
            backfill=may_backfill,
            pending_since=e.pending_since,
            order_key=e.key,
            borrowing=quotas and not within,
            cascade=cascade,
            reclaim_models=self._reclaim_models(e, dec, pods, role_models, refs)
            if reclaim and quotas
            else None,
        )
        models = {m for ms in role_models.values() for m in ms}
        pools = {self.pools.models[m] for m in models}
        found = None
        if going and (reclaim or prio is not None) and self._may_fit_after(going, pods, job, pools):
            # (not for a head that may only backfill-preempt: measured on the paper's
            # training workload, it made Backfill preempt 8% more often)
            with self._future(going):
                found = self._fit_now(e, pods, role_models)
        if found is None:
            going = []  # the search proper: what runs now, with the victims still there
            picked, held, pos = self._candidates(pre, e, refs, models, reclaim, backfill)
            whole = (pre, dec, picked, held, pos)
            found = self._find(pre, e, dec, pods, role_models, picked, held, pools, pos)
            if found is None and not job.gang and len(pods) > 1:
                # the most pods preemption can place, by bisection on the number of pods;
                # up to ``nominal`` pods with a reclaimer's rules, beyond with the whole
                # request's (a borrower's): that many are tried first
                lo, hi = 0, len(pods) - 1
                part = whole
                if nominal:
                    part = self._nominal_part(
                        pre, e, pods[:nominal], role_models, refs, models, backfill
                    )
                    p, d, picked, held, pos = part
                    f = self._find(p, e, d, pods[:nominal], role_models, picked, held, pools, pos)
                    if f is None:
                        hi = nominal - 1
                    else:
                        found, lo = f, nominal
                while lo < hi:
                    k = (lo + hi + 1) // 2
                    p, d, picked, held, pos = part if k <= nominal else whole
                    f = self._find(p, e, d, pods[:k], role_models, picked, held, pools, pos)
                    if f is None:
                        hi = k - 1
                    else:
                        found, lo = f, k
        if self._searched:
            self.searches += 1
        self._searched = False
        if found is None:
            self.hopeless.add(memo)
            return None
        chosen, bindings = found
        self.preemptors += 1
        self._nominating.add(job.id)
        if e.assigned:
            # its running pods stay while its victims go: the search counted them running
            # (their quota, their nodes), and taken by another preemptor meanwhile, one of
            # them would come back needing room of its own and take the devices found for
            # its next pods, its victims started again elsewhere to be evicted a second
            # time (as a job whose pods are being evicted does not preempt: _being_evicted)
            self.preempting[job.id] = e.seq
            self._preempting_version += 1
        victim_pods: list[PodId] = []
        for u, why in chosen:
            self.victims.append(Victim(job=u.job, pods=u.pods, reason=why, preemptor=job.id))
            self.victim_pods.update(u.pods)
            victim_pods.extend(u.pods)
        nodes = {b.node for b in bindings}
        waits = [b.pod for b, _t in going if b.node in nodes] or [b.pod for b, _t in going]
        # (going is empty unless the job fits in what the victims already chosen free)
        nom = Nomination(
            job=job.id,
            bindings=bindings,
            victims=tuple(victim_pods) + tuple(p for p in waits if p not in victim_pods),
            created_at=self.now,
            membership=self.index.cluster.membership_version,
            by_priority=any(why is not VictimReason.RECLAIM for _u, why in chosen),
            # (the what-if placed it with exactly these units removed: held within nominal
            # when one of them needs it, CycleWhatIf.needs_nominal)
            within_nominal=any(map(self._needs_nominal(job), (u for u, _why in chosen))),
        )
        return nom, len(chosen)

    def _note_nominated(self) -> None:
        """Bring :attr:`preempting` up to date with the nominations the cycle holds (a
        preemptor placed or giving up its nomination ends it; one preempting adds it): the
        jobs with running pods holding one that waits for pods still to go, victims chosen
        in this cycle or terminating. A nomination whose victims are all gone is taken in
        this cycle (or given up): the job's nominated pods start on what they freed before
        any pod taken from it now could come back. O(1) while the holds are unchanged, else
        O(nominations), each nomination's victims read once a cycle."""
        holds = self.holds
        if holds is None:
            return
        # (a nomination ended frees its devices, which moves the epoch; one added adds one)
        at = (holds.epoch, len(holds.nominated))
        if at == self._preempting_at:
            return
        self._preempting_at = at
        queue = self.index.queue
        waits = self._waits
        now: dict[str, int] = {}
        for jid in holds.nominated:
            e = queue.get(jid)
            if e is None or not e.assigned:
                continue
            if jid not in self._nominating:
                w = waits.get(jid)
                if w is None:
                    nom = e.nomination  # (held from an earlier cycle)
                    w = waits[jid] = nom is not None and any(map(queue.is_terminating, nom.victims))
                if not w:
                    continue
            now[jid] = e.seq
        if now != self.preempting:
            self.preempting = now
            self._preempting_version += 1

    def spare_needless(
        self, nominations: Sequence[Nomination], *, given_up: bool = False
    ) -> list[tuple[int, Nomination]]:
        """Give back the victims that earlier preemptors of this cycle chose and the last
        preemption (``nominations[-1]``; ``nominations``: this cycle's, in order) made
        needless, so that the cycle's victims stay minimal together. A unit is taken whole,
        so a reclaim may free more quota than its preemptor needs (an 8-GPU gang taken for 4
        GPUs): a victim an earlier preemptor took for quota is then not needed any more.

        With ``given_up``, the victims that nominations given up in the cycle made needless
        instead (the devices and quota those held are free: the cycle asks once the walk is
        over, when the policy's gate made some nomination give up): every victim of the
        cycle is tried, and a preemptor whose victims are given back waits for no others
        (with none left, for none: it starts on the devices held for it at the next cycle).

        A victim (its job's units, newest choice first) is given back when, charged to its
        tenant again, the cycle's ledger still holds every quota (the tenant within its
        ceiling, the cohort within its lendable pool), no other nomination of the cycle
        waits for anything on its nodes (one there whose hold holds the whole of its
        bindings there does not: the victim was running when it was held), its preemptor
        still fits with it running (placed again, with its other victims gone, when its
        nomination uses the victim's nodes; on the same GPU models),
        neither its job nor a nominated job has pod affinity terms, and, when its tenant has
        a nominated preemptor, the tenant stays within its nominal quota on the victim's GPU
        models (that preemptor's own rules read the tenant's use: a reclaimer ends within
        nominal, a nomination may be held within nominal, a preemptor takes what another
        tenant borrowed, by default, only if it does not borrow itself; each still holds
        then). Then it is off the cycle's victims and charged again (``uncharged`` forgets
        its pods), and its preemptor's nomination (its devices held anew if it was placed
        again) waits for the last preemption's victims instead, whose quota it now shares
        (with ``given_up``, for no others);
        every nomination's ``by_priority`` and ``within_nominal`` are recomputed over the
        victims still its own. With no quotas, a victim is taken for devices alone, so only
        what a given-up nomination held can make it needless: only ``given_up`` tries them,
        with the quota checks left out (nothing is charged).

        Returns the nominations that changed: (position in ``nominations``, new value);
        besides the spared victims' preemptors, any other that waited for a pod given back
        (a nomination found in the future of the pods going) waits for it no more.
        O(V x (P + B)) for V victims of the cycle, P pods of a victim and B bindings of its
        nominations, one ledger check per victim tried and at most one placement (then
        O(V) more) per victim (the per-cycle search cap bounds V)."""
        if (
            (self.ledger.table.unlimited and not given_up)
            or len(nominations) < (1 if given_up else 2)
            or not self.victims
        ):
            return []
        noms = list(nominations)
        last = None if given_up else noms[-1]
        queue = self.index.queue
        nominated = [queue.get(n.job) for n in noms]
        if any(e is None or e.job.pod_terms for e in nominated):
            return []
        tenants = {e.job.tenant for e in nominated if e is not None}
        for j in self.holds.nominated if self.holds is not None else ():
            he = queue.get(j)
            if he is not None:
                tenants.add(he.job.tenant)
        at = {n.job: k for k, n in enumerate(noms)}
        spared: set[int] = set()
        changed: set[int] = set()
        for i in range(len(self.victims) - 1, -1, -1):
            v = self.victims[i]
            k = at.get(v.preemptor)
            if k is None or (last is not None and v.preemptor == last.job):
                continue
            got = self._give_back(i, noms, k, tenants, spared)
            if got is not None:
                noms[k] = got
                spared.add(i)
                changed.add(k)
        if not spared:
            return []
        self.given_back += len(spared)
        gone = {p for i in spared for p in self.victims[i].pods}
        self.victims = [v for i, v in enumerate(self.victims) if i not in spared]
        # (victims are no longer only ever added: forget what was kept per number of them)
        self._going_list = None
        self._own, self._own_of = {}, None
        out = []
        for k, n in enumerate(noms):
            left = tuple(p for p in n.victims if p not in gone)
            # (a victim given back may have been its only one taken by priority, or the
            # only one that held it within nominal)
            prio = n.by_priority and any(
                v.preemptor == n.job and v.reason is not VictimReason.RECLAIM for v in self.victims
            )
            within = n.within_nominal and self._holds_within(n.job)
            if k in changed:
                waits = () if last is None else tuple(p for p in last.victims if p not in left)
                n = attrs.evolve(n, victims=left + waits, by_priority=prio, within_nominal=within)
                out.append((k, n))
            elif len(left) < len(n.victims) or (prio, within) != (n.by_priority, n.within_nominal):
                n = attrs.evolve(n, victims=left, by_priority=prio, within_nominal=within)
                out.append((k, n))
        return out

    def _holds_within(self, jid: str) -> bool:
        """Does some victim of the cycle still taken for the preemptor ``jid`` hold it
        within its tenant's nominal quota (:meth:`_needs_nominal`)? O(victims)."""
        queue = self.index.queue
        pe = queue.get(jid)
        if pe is None:
            return False
        held = self._needs_nominal(pe.job)
        for v in self.victims:
            ve = queue.get(v.job) if v.preemptor == jid else None
            if ve is not None and held(ve.job):
                return True
        return False

    def _give_back(
        self,
        i: int,
        noms: list[Nomination],
        k: int,
        tenants: set[str],
        spared: set[int],
    ) -> Nomination | None:
        """:meth:`spare_needless` for the victim ``self.victims[i]`` of the preemptor
        nominated ``noms[k]`` (``tenants``: those of nominated preemptors; ``spared``: the
        positions of the victims given back already): the preemptor's nomination if the
        victim is given back (charged again, its preemptor placed again if needed), else
        None (nothing changed)."""
        v = self.victims[i]
        queue = self.index.queue
        ve = queue.get(v.job)
        if ve is None or ve.job.pod_terms:
            return None
        parts = []
        nodes = set()
        unlimited = self.ledger.table.unlimited  # (no quotas: nothing was taken off)
        for p in v.pods:
            part = self.uncharged.get(p)
            if part is None and not unlimited:
                return None  # (not taken off its tenant: it was not a victim for quota)
            if part is not None:
                parts.append(part)
            nodes.add(self.index.cluster.binding(p).node)
        for j, n in enumerate(noms):
            there = j != k and any(b.node in nodes for b in n.bindings)
            if there and not self._held_whole(n, nodes):
                return None  # (it may wait there for what the victim holds)
        led = self.ledger
        mark = led.mark()
        for t, m, milli in parts:
            led.add(t, m, milli)
        nom = noms[k]
        if not all(self._quota_holds(t, m) for t, m, _milli in parts) or (
            ve.job.tenant in tenants and any(led.borrowing(t, m) for t, m, _milli in parts)
        ):
            # (a tenant with a nominated preemptor: that preemptor's quota rules read the
            # tenant's use, and every one of them holds while it stays within nominal)
            led.rollback(mark)
            return None
        if any(b.node in nodes for b in nom.bindings):
            kept = [
                u
                for j, u in enumerate(self.victims)
                if j != i and j not in spared and u.preemptor == nom.job
            ]
            again = self._place_again(nom, kept)
            if again is None:
                led.rollback(mark)
                return None
            if self.holds is not None:
                self.holds.drop(nom.job)
                self.holds.nominate(nom.job, again, queue.entry(nom.job).job)
            nom = attrs.evolve(nom, bindings=again)
        for p in v.pods:
            self.uncharged.pop(p, None)
        self.victim_pods.difference_update(v.pods)
        return nom

    def _held_whole(self, nom: Nomination, nodes: set[str]) -> bool:
        """Does ``nom``'s hold hold the whole of its bindings on ``nodes``? Then nothing it
        was placed on there waits for a victim of the cycle (each still running on the
        snapshot when it was held), and giving one of them back takes nothing from it."""
        hold = self.holds.nominated.get(nom.job) if self.holds is not None else None
        return hold is not None and hold.whole_on(self.snap, nodes)

    def _place_again(self, nom: Nomination, kept: list[Victim]) -> tuple[Binding, ...] | None:
        """The pods of ``nom`` placed again on the snapshot as it is (every victim running)
        but for its own devices and its victims ``kept`` (rolled back): on the GPU models of
        its bindings, holding as much of each (its quota held stays exact); else None."""
        job = self.index.queue.entry(nom.job).job
        pods = tuple(b.pod for b in nom.bindings)
        models: dict[str, set[str]] = {}
        need: dict[str, int] = {}
        for b in nom.bindings:
            m = self.pools.model_of(b)
            models.setdefault(b.pod.role, set()).add(m)
            need[m] = need.get(m, 0) + b.total_milli
        dec = QuotaDecision(
            ok=True,
            pods=pods,
            models={r: tuple(sorted(ms)) for r, ms in models.items()},
            within_nominal=False,
        )
        hold = self.holds.nominated.get(nom.job) if self.holds is not None else None
        with self.snap.transaction():  # (rolled back)
            if hold is not None:
                hold.give_back(self.snap)
            for u in kept:
                for p in u.pods:
                    release_exact(self.snap, self.index.cluster.binding(p))
            res = self.place(self.pools.restricted(job, dec), pods)
            if not res.bindings or res.unplaced:
                return None
            again = tuple(res.bindings)
        got: dict[str, int] = {}
        for b in again:
            m = self.pools.model_of(b)
            got[m] = got.get(m, 0) + b.total_milli
        return again if got == need else None

    def _quota_holds(self, tenant: str, model: str) -> bool:
        """Does the cycle's ledger hold the quota of ``tenant`` on ``model``: its use within
        its ceiling and, when shared, its cohort's within the lendable pool?"""
        led = self.ledger
        isolated, _nom, ceiling, _g = led.table.terms(tenant, model)
        if led.used(tenant, model) > ceiling:
            return False
        return isolated or led.cohort.get(model, 0) <= led.table.pool.get(model, 0)

    def _being_evicted(self, e: Entry) -> bool:
        """Are pods of ``e`` (a pod-level job, partly running) victims still to go, chosen
        this cycle or terminating? Then it does not preempt by any kind, backfill included:
        its own preemptor would be followed by its victims (a cascade), and its search would
        count those pods running, while one of them requeued takes the devices found for its
        next pods and its victims start again elsewhere."""
        if not e.assigned:
            return False
        return bool(e.terminating) or not self.victim_pods.isdisjoint(e.assigned)

    def _find(
        self,
        pre: Preemptor,
        e: Entry,
        dec: QuotaDecision,
        pods: tuple[PodId, ...],
        role_models: dict[str, tuple[str, ...]],
        picked: Sequence[VictimRef],
        held: int,
        pools: set[int],
        pos: np.ndarray | None = None,
    ) -> tuple[list[tuple[VictimUnit, VictimReason]], tuple[Binding, ...]] | None:
        """The light checks, then the minimal victim search, for ``pods`` of ``e``
        (``pos``: the positions of ``picked`` in the index's columns, when known)."""
        if not picked or self.snap.pools_free_milli(pools) + held < pods_milli(e.job, pods):
            return None  # necessary: free GPU milli plus what the candidates hold
        self._cut = False
        found = self._attempt(pre, e, dec, pods, role_models, picked, pools, pos)
        if found is not None or not self._cut or pre.reclaim_models is None:
            return found
        # A reclaim that failed after skipping a borrower's units because its units taken
        # before (first in victim order) had brought it back within its nominal quota:
        # another order may take other units of it, so once more with the units that free
        # the most GPUs on one node the job may use first (in victim order among equals)
        again = self._room_first(pre, picked, pos, self._allowed(e.job))
        if again is None:
            return None
        return self._attempt(pre, e, dec, pods, role_models, again[0], pools, again[1])

    def _attempt(
        self,
        pre: Preemptor,
        e: Entry,
        dec: QuotaDecision,
        pods: tuple[PodId, ...],
        role_models: dict[str, tuple[str, ...]],
        picked: Sequence[VictimRef],
        pools: set[int],
        pos: np.ndarray | None,
    ) -> tuple[list[tuple[VictimUnit, VictimReason]], tuple[Binding, ...]] | None:
        """:meth:`_find`'s light replay and search over ``picked`` in that order."""
        picked = self._reachable(e, dec, pods, pools, picked, role_models, pos, pre.reclaim_models)
        if not picked:
            return None
        return self._search(pre, e, pods, role_models, picked, pools)

    def _allowed(self, job: Job) -> np.ndarray | None:
        """Per slot, whether a GPU pod of ``job`` may run on the node there by its node
        selector and tolerations (any of its GPU roles), or None when nothing restricts it
        (:meth:`kant.state.ClusterState.allowed_slots`, kept per selector)."""
        masks = []
        for role in job.roles:
            if not role.resources.total_milli:
                continue
            m = self.index.cluster.allowed_slots(role)
            if m is None:
                return None
            masks.append(m)
        if not masks:
            return None
        return masks[0] if len(masks) == 1 else np.logical_or.reduce(masks)

    def _room_first(
        self,
        pre: Preemptor,
        picked: Sequence[VictimRef],
        pos: np.ndarray | None,
        allowed: np.ndarray | None = None,
    ) -> tuple[Sequence[VictimRef], np.ndarray | None] | None:
        """``picked`` (and its positions ``pos``) reordered for a reclaim's second attempt:
        the units that leave the most free GPUs on one of their nodes the preemptor may use
        (``allowed``, per slot; None: any; a node that takes no new pod never) once gone
        first, the units on none of them last,
        the victim order (``picked``'s) among equals, and with ``reclaim_others_first``
        other tenants' units still before its own tenant's. None: the same order.
        O(candidate pods), numpy over the columns."""
        node_cols = self.snap.cols
        free = node_cols.free_gpus
        # a node the preemptor may not use (its selector or tolerations say no, or the node
        # takes no new pod: cordoned or unhealthy) counts as no node: its units rank last (-1)
        ok = node_cols.ready[: len(free)].astype(bool)
        if allowed is not None:
            ok[: len(allowed)] &= allowed[: len(free)]
            ok[len(allowed) :] = False
        free = np.where(ok, free, -(1 << 40))
        others_first = self.policy.reclaim_others_first
        if pos is not None:
            cols = self.index.columns()
            best = room_after(cols.flat(), pos, free)
            own = cols.tenant[pos] == cols.tenant_of.get(pre.tenant, -1)
            if not others_first:
                own = np.zeros(len(pos), dtype=bool)
            order = np.lexsort((np.arange(len(pos)), -best, own))
            if bool((order == np.arange(len(pos))).all()):
                return None
            moved = pos[order]
            return RefsAt(cols.refs, moved), moved

        def key(i: int) -> tuple[bool, int, int]:
            r = picked[i]
            on: dict[int, int] = {}
            for slot, n in r.slots:
                on[slot] = on.get(slot, 0) + n
            most = max((int(free[s]) + n for s, n in on.items()), default=-1)
            most = max(most, -1)  # (only nodes it may not use: as none)
            return (others_first and r.tenant == pre.tenant, -most, i)

        order_l = sorted(range(len(picked)), key=key)
        if order_l == list(range(len(picked))):
            return None
        return [picked[i] for i in order_l], None

    def _fit_now(
        self, e: Entry, pods: tuple[PodId, ...], role_models: dict[str, tuple[str, ...]]
    ) -> tuple[list[tuple[VictimUnit, VictimReason]], tuple[Binding, ...]] | None:
        """Does the job fit once the victims already chosen are gone, with no new victim?"""
        whatif = CycleWhatIf(
            self.snap, self.ledger, self.pools, self.place, e.job, pods, role_models
        )
        if not whatif.ready():
            return None
        fit = whatif.place()
        return None if fit is None else ([], fit)

    def _going(self) -> list[tuple[Binding, str]]:
        """The bindings (and tenants) of every victim pod still to go: terminating ones (read
        once per cycle) and the ones chosen this cycle."""
        if self._terminating is None:
            self._terminating = []
            for r in self.index.queue.terminating():
                for p in sorted(r.terminating):
                    self._terminating.append((self.index.cluster.binding(p), r.job.tenant))
        if not self.victims:
            return self._terminating
        if self._going_list is not None and self._going_list[0] == len(self.victims):
            return self._going_list[1]
        out = list(self._terminating)
        seen = {b.pod for b, _t in out}
        for v in self.victims:
            ve = self.index.queue.get(v.job)
            if ve is None:
                continue
            for p in v.pods:
                if p not in seen:
                    out.append((self.index.cluster.binding(p), ve.job.tenant))
        self._going_list = (len(self.victims), out)  # victims are only ever appended
        return out

    def _may_fit_after(
        self, going: list[tuple[Binding, str]], pods: tuple[PodId, ...], job: Job, pools: set[int]
    ) -> bool:
        """Necessary for :meth:`_fit_now` in :meth:`_future`: the free GPU milli of the job's
        pools now plus all that the victims still to go hold covers its pods (the future
        frees no more than that and holds take some back; its first check is the free milli
        of those pools). In ``kant bench cycle --nodes 12500 --pending 3000``, 66 of the 168
        requests that would build the future stop here."""
        going_milli = sum(b.total_milli for b, _t in going)
        return self.snap.pools_free_milli(pools) + going_milli >= pods_milli(job, pods)

    @contextmanager
    def _future(self, going: list[tuple[Binding, str]]) -> Iterator[None]:
        """On the snapshot and the ledger (rolled back at the end): every victim in ``going``
        gone, and every nomination's devices held again (what its victims free is its own).
        The ledger already charges each nomination's quota to its preemptor and no longer
        charges its victims (``uncharged``); the other victims still to go come off here."""
        if not going:
            yield
            return
        mark = self.ledger.mark()
        try:
            with self.snap.transaction():
                snap = self.snap
                here = [(b, t) for b, t in going if slot_or_none(snap, b.node) is not None]
                snap.release_bindings([b for b, _t in here])  # one row update per node
                for b, tenant in here:
                    if b.pod not in self.uncharged:
                        self.ledger.add(tenant, self.pools.model_of(b), -b.total_milli)
                if self.holds is not None:
                    for h in self.holds.nominated.values():
                        Hold(h.bindings).take(self.snap)
                yield
        finally:
            self.ledger.rollback(mark)

    def _nominal_after_own(
        self,
        e: Entry,
        dec: QuotaDecision,
        pods: tuple[PodId, ...],
        role_models: dict[str, tuple[str, ...]],
        refs: list[VictimRef],
    ) -> tuple[bool, int]:
        """For a job whose ``pods`` are not within its tenant's nominal quota (``dec``):
        would they be once every unit of its own tenant that it may priority-preempt is
        gone (Kueue judges reclaim so), and if not, how many of its first pods would be (a
        pod-level job's, :attr:`QuotaDecision.nominal_pods`; at least as many as now)?"""
        pol = self.policy
        job = e.job
        if not pol.priority or not refs or refs[0].priority >= job.priority:
            return False, dec.nominal_pods  # (refs in victim order: nobody runs below it)
        own = self._own_below(e, refs)
        if own is None:
            return False, dec.nominal_pods
        led = self.ledger
        mark = led.mark()
        try:
            # (one change per model: the ledger's usage and cohort after a change depend
            # only on the totals, not on how they were reached)
            for m, milli in own.items():
                led.add(job.tenant, m, -milli)
            after = admit_quota(led, job, pods, role_models)
            return after.within_nominal, max(dec.nominal_pods, after.nominal_pods)
        finally:
            led.rollback(mark)

    def _nominal_part(
        self,
        pre: Preemptor,
        e: Entry,
        pods: tuple[PodId, ...],
        role_models: dict[str, tuple[str, ...]],
        refs: list[VictimRef],
        models: set[str],
        backfill: bool,
    ) -> tuple[Preemptor, QuotaDecision, Sequence[VictimRef], int, np.ndarray | None]:
        """The preemptor, quota decision and candidates (:meth:`_candidates`) of a pod-level
        job's first ``pods``, within its tenant's nominal quota (once its own lower-priority
        units are gone) where its whole request is not: a reclaimer, on the models where
        those pods are within nominal."""
        dec = admit_quota(self.ledger, e.job, pods, role_models)
        mine = attrs.evolve(
            pre,
            within_nominal=True,
            borrowing=False,
            reclaim_models=self._reclaim_models(e, dec, pods, role_models, refs),
        )
        return (mine, dec, *self._candidates(mine, e, refs, models, True, backfill))

    def _candidates(
        self,
        pre: Preemptor,
        e: Entry,
        refs: list[VictimRef],
        models: set[str],
        reclaim: bool,
        backfill: bool,
    ) -> tuple[Sequence[VictimRef], int, np.ndarray | None]:
        """:meth:`_prefilter` for ``pre``; for a reclaim with ``reclaim_others_first``, the
        other tenants' candidates first (Kueue's candidate order)."""
        picked, held, pos = self._prefilter(
            pre, e, refs, models, only_priority=not (reclaim or backfill)
        )
        if reclaim and self.policy.reclaim_others_first:
            if pos is None:
                first = [r for r in picked if r.tenant != pre.tenant]
                picked = first + [r for r in picked if r.tenant == pre.tenant]
            else:
                cols = self.index.columns()
                other = cols.tenant[pos] != cols.tenant_of.get(pre.tenant, -1)
                pos = np.concatenate((pos[other], pos[~other]))
                picked = RefsAt(cols.refs, pos)
        return picked, held, pos

    def _own_below(self, e: Entry, refs: list[VictimRef]) -> dict[str, int] | None:
        """GPU milli per model that the units of ``e``'s tenant running below its priority
        use, less ``e``'s own, the victims chosen so far and the units of the jobs preempting
        (:attr:`preempting`, no victims while their victims go) (None: there is no such
        unit). Kept per tenant, priority, number of victim pods (only ever added to within a
        cycle) and version of :attr:`preempting` for a job with nothing running while
        ``refs`` is the same list."""
        job = e.job
        tenant, prio, chosen = job.tenant, job.priority, self.victim_pods
        preempting = self.preempting
        key = (tenant, prio, len(chosen), self._preempting_version)
        if self._own_of is not refs:
            self._own_of, self._own = refs, {}
        elif not e.assigned and key in self._own:
            return self._own[key]
        own: dict[str, int] | None = None  # GPU model -> milli those units use
        for r in refs:
            if r.priority >= prio:
                break  # sorted by priority
            # (a job preempting below e's priority: nominated in an earlier cycle, or in this
            # one under a custom order key (Queue(order=...)); its pods are no victims for e
            # to count)
            if r.tenant != tenant or r.entry is e or r.job in preempting:
                continue
            if not chosen.isdisjoint(r.pods):
                continue
            if own is None:
                own = {}
            for m, milli in r.usage:
                own[m] = own.get(m, 0) + milli
        if not e.assigned:
            self._own[key] = own
        return own

    def _reclaim_models(
        self,
        e: Entry,
        dec: QuotaDecision,
        pods: tuple[PodId, ...],
        role_models: dict[str, tuple[str, ...]],
        refs: list[VictimRef],
    ) -> frozenset[str]:
        """The GPU models a reclaim by ``e`` is for (:attr:`Preemptor.reclaim_models`): those
        where its tenant stays within nominal with the job, judged on the ledger as it
        judged "within nominal" (once its own lower-priority units are gone, when that was
        needed: :meth:`_nominal_after_own`). A few ledger reads per role and model."""
        own = None if dec.within_nominal else self._own_below(e, refs)
        led = self.ledger
        mark = led.mark()
        try:
            for m, milli in (own or {}).items():
                led.add(e.job.tenant, m, -milli)
            return _nominal_room(led, e.job, pods, role_models)
        finally:
            led.rollback(mark)

    # ----------------------------------------------------------------- steps

    def _memo(
        self,
        e: Entry,
        pods: Sequence[PodId],
        role_models: dict[str, tuple[str, ...]],
        prio: int | None,
        reclaim: bool,
        backfill: bool,
        dec: QuotaDecision,
        epoch: tuple[int, ...],
        placed_in_part: bool = False,
    ) -> tuple[Any, ...]:
        """The same kind of request from the same kind of preemptor, with nothing changed
        since, has the same (hopeless) answer. ``placed_in_part``: some of its pods were
        placed earlier in this cycle (where its others may go may depend on them)."""
        job = e.job
        counts = pods_per_role(job, pods)
        return (
            job.tenant,
            prio,
            reclaim,
            (e.key, e.pending_since) if backfill else None,
            dec.clears_quota,
            job.gang,
            job.kind,
            tuple(
                (counts.get(r.name, 0), role_models.get(r.name), r.placement_key) for r in job.roles
            ),
            # (see placement_shape; and where its pods run bounds where the others may go)
            job.id
            if job.pod_terms or ((e.assigned or placed_in_part) and placed_by_own_pods(job))
            else None,
            len(self.victim_pods),
            self.given_back,
            *epoch,
        )

    def _prefilter(
        self,
        pre: Preemptor,
        e: Entry,
        refs: list[VictimRef],
        models: set[str],
        *,
        only_priority: bool,
    ) -> tuple[Sequence[VictimRef], int, np.ndarray | None]:
        """The candidates the rules allow (with each other tenant's exposure judged over the
        GPU models a reclaim is for, :attr:`Preemptor.reclaim_models`, else over the
        preemptor's GPU models), in victim order, the GPU milli they hold and (with the
        built-in rules only) their positions in the index's columns."""
        pol = self.policy
        borrowing = self.ledger.borrowing
        on = models if pre.reclaim_models is None else pre.reclaim_models
        exposed = {t: any(borrowing(t, m) for m in on) for t in self.index.tenants}
        if not pol.rules:
            return self._prefilter_builtin(pre, e, exposed)
        stop_at_priority = only_priority and not pol.rules and pol.priority
        picked: list[VictimRef] = []
        held = 0
        for r in refs:
            if r.entry is e or r.job in self.preempting:
                continue
            ok = exposed[r.tenant] if r.tenant != pre.tenant else True
            if pol.rules:
                why = pol.reason(pre, r, exposed=ok, borrowing=borrowing)
            else:
                why = builtin_reason(pol, pre, r, exposed=ok)
            if why is None:
                if stop_at_priority and ok and r.priority >= pre.priority:
                    break  # sorted by priority: nothing further qualifies
                continue
            if not self.victim_pods.isdisjoint(r.pods):
                continue
            picked.append(r)
            held += r.held
            if pol.max_candidates is not None and len(picked) >= pol.max_candidates:
                break
        return picked, held, None

    def _prefilter_builtin(
        self, pre: Preemptor, e: Entry, exposed: dict[str, bool]
    ) -> tuple[Sequence[VictimRef], int, np.ndarray]:
        """:meth:`_prefilter` with the built-in rules only, over the index's columns: the
        same records in the same order as :func:`~kant.preemption.rules.builtin_reason`
        asked of each (its branches, in order, as masks), without a Python call per record."""
        pol = self.policy
        cols = self.index.columns()
        n = len(cols.refs)
        if not n:
            return [], 0, np.zeros(0, dtype=np.int64)
        own = cols.tenant_of.get(pre.tenant, -1)
        other = cols.tenant != own
        exposed_of = np.array([exposed[t] for t in self.index.tenants], dtype=bool)
        ok = ~other | exposed_of[cols.tenant]  # another tenant's nominal share is guaranteed
        if pol.reclaim and pre.within_nominal and not pre.cascade:
            reclaim = other
        else:
            reclaim = np.zeros(n, dtype=bool)
        lower = np.zeros(n, dtype=bool)
        if pol.priority and not pre.cascade:
            lower[: cols.lower_than(pre.priority)] = True
        allowed = lower
        if pre.borrowing:  # a borrower takes another tenant's borrowed use only if allowed
            thr = pol.borrow_priority_threshold
            may = np.zeros(n, dtype=bool)
            if pol.borrow_within_cohort and pol.priority:
                may = lower.copy()
                if thr is not None:
                    may[cols.at_most(thr) :] = False
            allowed = lower & (~other | may)
        why = reclaim | allowed
        if pol.backfill and pre.backfill:
            backfill = cols.after_key(pre.order_key) & (cols.started_at >= pre.pending_since)
            why |= ~reclaim & ~lower & backfill
        mask = ok & why
        mask[cols.of_job(pre.job, e.seq)] = False
        if self.preempting:
            mask[cols.of_jobs(self.preempting)] = False
        if self.victim_pods:
            mask[cols.of_pods(self.victim_pods)] = False
        idx = np.flatnonzero(mask)
        if pol.max_candidates is not None:
            idx = idx[: pol.max_candidates]
        return RefsAt(cols.refs, idx), int(cols.held[idx].sum()), idx

    def _search(
        self,
        pre: Preemptor,
        e: Entry,
        pods: tuple[PodId, ...],
        role_models: dict[str, tuple[str, ...]],
        picked: Sequence[VictimRef],
        pools: set[int],
    ) -> tuple[list[tuple[VictimUnit, VictimReason]], tuple[Binding, ...]] | None:
        """The minimal victim search over ``picked`` (units in the preemptor's pools)."""
        pol = self.policy
        borrowing = self.ledger.borrowing
        on = pre.reclaim_models
        taken: set[str] = set()  # the tenants of the units chosen so far
        seen = [0]  # how many of them are in taken

        def eligible(u: VictimUnit, chosen: Sequence[VictimUnit]) -> VictimReason | None:
            # (another tenant's unit: while that tenant borrows on a model it uses, one a
            # reclaim is for when it is one)
            exposed = u.tenant == pre.tenant or any(
                borrowing(u.tenant, m) for m, _ in u.usage if on is None or m in on
            )
            if not exposed:
                taken.update(c.tenant for c in chosen[seen[0] :])
                seen[0] = len(chosen)
                if u.tenant in taken:
                    self._cut = True  # (its units chosen before brought it within nominal)
            return pol.reason(pre, u, exposed=exposed, borrowing=borrowing)

        cands = (u for u in map(self.index.unit, picked) if u.pools & pools)
        self._searched = True
        t = time.perf_counter()
        whatif = CycleWhatIf(
            self.snap, self.ledger, self.pools, self.place, e.job, pods, role_models,
            self._needs_nominal(e.job),
        )  # fmt: skip
        found = find_victims(cands, eligible, whatif)
        self.search_ms += (time.perf_counter() - t) * 1000
        return found

    def _needs_nominal(self, job: Job) -> Callable[[VictimUnit | Job], bool]:
        """The rule the what-if holds ``job`` by (:class:`CycleWhatIf`'s ``needs_nominal``):
        evicting a unit of another tenant that ``job`` may not take while borrowing
        (:meth:`PreemptionPolicy.may_borrow_from`) holds it within its tenant's nominal
        quota, whatever the reason the unit was taken for (reclaim, priority, a user
        rule). Never with no quotas. Also what :attr:`Nomination.within_nominal` is
        computed by, over the victims kept: exactly whether the placement found was held
        within nominal. (A unit or its job: the same tenant and priority.)"""
        pol = self.policy
        tenant, priority = job.tenant, job.priority
        if self.ledger.table.unlimited:
            return lambda _u: False
        return lambda u: u.tenant != tenant and not pol.may_borrow_from(priority, u.priority)

    def _reachable(
        self,
        e: Entry,
        dec: QuotaDecision,
        pods: tuple[PodId, ...],
        pools: set[int],
        picked: Sequence[VictimRef],
        role_models: dict[str, tuple[str, ...]],
        pos: np.ndarray | None = None,
        on: frozenset[str] | None = None,
    ) -> Sequence[VictimRef]:
        """The candidates worth a search, or [] when it would be hopeless. A light replay of
        the search on the quota ledger and per-node GPU counts, no snapshot work:

        1. walk the candidates in victim order; another tenant's unit counts only while that
           tenant still borrows on a GPU model it uses (one of ``on``, the models a reclaim
           is for, unless None), as in the search;
        2. at geometrically spaced points, and at the end: does the job fit its quota with
           them gone, and, for whole-GPU pods of ``g`` GPUs, do enough nodes reach ``g`` free
           GPUs to hold its pods? Both: worth a search (stop here). Never: hopeless.

        For a job blocked by capacity only, candidates whose nodes cannot reach ``g`` free
        GPUs even with every candidate gone are dropped first (the search's minimisation
        would spare them anyway). O(candidate pods), a few quota checks.

        With the candidates' positions in the index's columns (``pos``) and one GPU model
        per candidate, the same answer over columns (:func:`kant.preemption.replay.light_replay`);
        otherwise one candidate at a time (:meth:`_reachable_walk`)."""
        gs = {r.resources.gpus for r in e.job.roles if r.resources.total_milli}
        g = gs.pop() if len(gs) == 1 else 0
        if pos is None:
            return self._reachable_walk(e, dec, pods, pools, picked, role_models, g, on)
        led = self.ledger

        def quota_ok() -> bool:
            return _admits_all(dec, led, e.job, pods, role_models)

        def room_slots() -> np.ndarray:
            best = [s for pool in sorted(pools) for s in self.snap.best_fit(pool, g)]
            return np.array(best, dtype=np.int64)

        mark = led.mark()
        try:
            got, cut = light_replay(
                cols=self.index.columns(), pos=pos, tenant=e.job.tenant,
                ledger=led, quota_ok=quota_ok, dec_ok=dec.clears_quota, g=g, need_pods=len(pods),
                free=self.snap.cols.free_gpus, room_slots=room_slots, on=on,
            )  # fmt: skip
        finally:
            led.rollback(mark)
        if got is not None:
            self._cut |= cut
            return got
        return self._reachable_walk(e, dec, pods, pools, picked, role_models, g, on)

    def _reachable_walk(
        self,
        e: Entry,
        dec: QuotaDecision,
        pods: tuple[PodId, ...],
        pools: set[int],
        picked: Sequence[VictimRef],
        role_models: dict[str, tuple[str, ...]],
        g: int,
        on: frozenset[str] | None = None,
    ) -> Sequence[VictimRef]:
        """:meth:`_reachable` one candidate at a time (``g``: GPUs per pod, 0 if mixed)."""
        free = self.snap.cols.free_gpus
        if g > 1 and dec.clears_quota:
            potential: dict[int, int] = {}
            for r in picked:
                for slot, n in r.slots:
                    potential[slot] = potential.get(slot, int(free[slot])) + n
            picked = [r for r in picked if any(potential[s] >= g for s, _ in r.slots)]

        def room_ok(kept: list[VictimRef]) -> bool:
            if g < 1:
                return True
            pot: dict[int, int] = {}
            for r in kept:
                for slot, n in r.slots:
                    pot[slot] = pot.get(slot, int(free[slot])) + n
            room = sum(v // g for v in pot.values())
            for pool in sorted(pools):
                for slot in self.snap.best_fit(pool, g):
                    if room >= len(pods):
                        return True
                    if slot not in pot:
                        room += int(free[slot]) // g
            return room >= len(pods)

        def quota_ok() -> bool:
            return _admits_all(dec, led, e.job, pods, role_models)

        led = self.ledger
        tenant = e.job.tenant
        kept: list[VictimRef] = []
        counted: set[tuple[str, str]] = set()  # (tenant, model) of the others counted so far
        mark = led.mark()
        try:
            check_at = 1
            for i, r in enumerate(picked):
                t = r.tenant
                if t != tenant and not led.table.unlimited:
                    ms = [m for m, _ in r.usage if on is None or m in on]
                    if not any(led.borrowing(t, m) for m in ms):
                        if any((t, m) in counted for m in ms):
                            self._cut = True  # (its units counted before brought it within)
                        continue
                    counted.update((t, m) for m in ms)
                    for m, milli in r.usage:
                        led.add(t, m, -milli)
                elif not dec.clears_quota:
                    for m, milli in r.usage:
                        led.add(t, m, -milli)
                kept.append(r)
                if len(kept) >= check_at:
                    check_at *= 2
                    if quota_ok() and room_ok(kept):
                        return kept + list(picked[i + 1 :])
            return kept if kept and quota_ok() and room_ok(kept) else []
        finally:
            led.rollback(mark)
