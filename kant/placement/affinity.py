"""Required inter-pod affinity and anti-affinity (Kubernetes' ``InterPodAffinity`` filter).

:class:`PodsOnNodes` knows which pods with labels or pod terms are where on a snapshot: the
running pods of the jobs the cluster state describes (:meth:`ClusterState.describe`), with
the pods placed and released on the snapshot since its refresh (:attr:`Snapshot.pod_moves`),
so a pod placed earlier in the same cycle, or earlier in the same placement, counts, and a
victim released in a preemption what-if does not. :class:`PodAffinity` is the built-in node
filter the Placer adds for a role it concerns. A node is kept for a pod of role ``R`` when:

1. for every term of ``R.pod_anti_affinity``, no pod it selects runs in the node's domain
   (nodes without the term's topology key are kept);
2. for every pod that runs with an anti-affinity term selecting ``R``'s labels, the node is
   not in that pod's domain for the term (the rule is symmetric, as in Kubernetes);
3. for every term of ``R.pod_affinity``, a pod it selects runs in the node's domain (a node
   without the key is dropped); except that when no pod anywhere matches any of ``R``'s
   affinity terms and ``R``'s own labels match all of them, the pod is the first of its
   kind and any node with every key is kept. A preemptor's pods where it is nominated
   count for rules 1 and 2, and rule 3 must hold both with them and without them (as
   kube-scheduler filters a pod twice when nominated pods are about).

>>> from kant.model import NodeRequirement, PodAffinityTerm
>>> t = PodAffinityTerm(selector=(NodeRequirement(key="app", operator="In", values="db"),))
>>> t.selects({"app": "db"}), t.selects({"app": "web"}), t.topology_key
(True, False, 'kubernetes.io/hostname')
"""

from __future__ import annotations

from collections import Counter
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from kant.contracts import PodView
from kant.model import Labels, PodAffinityTerm, PodId, Role, topology_value
from kant.placement.context import IntArray
from kant.state import Snapshot

BoolArray = npt.NDArray[np.bool_]
_K = TypeVar("_K")


HARD_POD_AFFINITY_WEIGHT = 1
"""What a running pod's required affinity term adds to the score of a node in its domain for
a pod the term selects (kube-scheduler's ``hardPodAffinityWeight``, default 1)."""

_SELECTED_KEPT = 1 << 16
"""Remembered term selections, label sets or terms past which the memos start afresh (at a
rebuild: every label set ever seen is otherwise kept)."""


def _bump(index: dict[_K, Counter[int]], key: _K, slot: int, sign: int) -> None:
    """Count one pod more or fewer on ``slot`` under ``key``; empty entries go."""
    got = index.get(key)
    if got is None:
        got = index[key] = Counter()
    n = got[slot] + sign
    if n > 0:
        got[slot] = n
    else:
        del got[slot]
        if not got:
            del index[key]


class PodsOnNodes:
    """Which pods with labels or pod terms are where on a snapshot, and what that leaves a
    pod of a given role (see the module docstring). One per Placer; :meth:`sync` brings it
    up to date with a snapshot in O(pods moved since), or O(described pods) after a
    refresh, a rollback or a change of the truth's described pods."""

    def __init__(self) -> None:
        self._snap: Snapshot | None = None  # the snapshot of the placement under way (use)
        self._base_key: tuple[int, int, int, int] | None = None
        self._moves: list[tuple[PodId, int]] | None = None  # the snapshot's list, as read
        self._pods: dict[PodId, tuple[int, Role]] = {}  # pod -> (slot, role)
        self._nominated: set[PodId] = set()  # those of _pods held for a nominated preemptor
        # the snapshot's moves applied, each with what it replaced (to undo it)
        self._done: list[tuple[tuple[PodId, int], tuple[int, Role, bool] | None]] = []
        self._by_labels: dict[Labels, Counter[int]] = {}  # pod labels -> slot -> pods there
        self._by_anti: dict[PodAffinityTerm, Counter[int]] = {}  # its holders' slots
        # (term, signed weight) of a preferred term or a required affinity term (weight
        # HARD_POD_AFFINITY_WEIGHT) -> its holders' slots, for the symmetric score
        self._by_soft: dict[tuple[PodAffinityTerm, int], Counter[int]] = {}
        # (id of a term, id of a label set) -> (whether the term selects it, both)
        self._selected: dict[tuple[int, int], tuple[bool, PodAffinityTerm, Labels]] = {}
        self._canon: dict[Labels, Labels] = {}
        self._terms: dict[PodAffinityTerm, PodAffinityTerm] = {}
        self._domains: dict[str, tuple[IntArray, dict[str, int]]] = {}  # key -> ids, ids by value
        self._domains_key: tuple[int, int, int] = (-1, -1, -1)

    # ----------------------------------------------------------------- keeping up

    def use(self, snap: Snapshot) -> None:
        """The snapshot the next questions are about (read when one is asked)."""
        self._snap = snap

    def sync(self, snap: Snapshot) -> None:
        """Bring the view up to date with ``snap`` (and its cluster state): after a refresh
        or a change of the truth's described pods, O(described pods); otherwise O(log moves
        + the moves undone by rollbacks and made since)."""
        st = snap.state
        base_key = (
            snap.token,
            st.pod_terms_version,
            st.membership_version,
            snap.membership_version,
        )
        moves = snap.pod_moves
        if base_key != self._base_key or moves is not self._moves:
            self._pods, self._nominated = {}, set()
            self._by_labels, self._by_anti, self._by_soft = {}, {}, {}
            if max(len(self._selected), len(self._canon), len(self._terms)) > _SELECTED_KEPT:
                self._selected.clear()
                self._canon.clear()
                self._terms.clear()
            for job, pod, node in st.described_pods():
                self._put(pod, (snap.slot_of(node), job.role(pod.role), False))
            self._done = []
            self._base_key, self._moves = base_key, moves
        done = self._done
        # the moves applied that the snapshot still has: a prefix (it only appends, and a
        # rollback cuts its end), found by identity
        lo, hi = 0, min(len(done), len(moves))
        while lo < hi:
            mid = (lo + hi) // 2
            if done[mid][0] is moves[mid]:
                lo = mid + 1
            else:
                hi = mid
        while len(done) > lo:  # undo the moves rolled back, last first
            (pod, _slot), before = done.pop()
            self._put(pod, before)
        placed = snap.placed_jobs
        for move in moves[lo:]:
            pod, slot = move
            was = self._pods.get(pod)
            before = None if was is None else (*was, pod in self._nominated)
            now = None
            if slot != -1:
                owner = placed.get(pod.job) or st.described(pod.job)
                if owner is not None:
                    held = slot < -1  # (held for a nominated preemptor on slot -2 - slot)
                    now = (-2 - slot if held else slot, owner.role(pod.role), held)
            self._put(pod, now)
            done.append((move, before))

    def _put(self, pod: PodId, where: tuple[int, Role, bool] | None) -> None:
        """Pod ``pod`` is now at ``where`` (slot, role, whether held for a nominated
        preemptor; None: nowhere)."""
        was = self._pods.pop(pod, None)
        if was is not None:
            self._count(was[1], was[0], -1)
            self._nominated.discard(pod)
        if where is not None:
            slot, role, held = where
            self._pods[pod] = (slot, role)
            self._count(role, slot, +1)
            if held:
                self._nominated.add(pod)

    def _count(self, role: Role, slot: int, sign: int) -> None:
        """One pod of ``role`` more (``sign`` 1) or fewer (-1) on ``slot``."""
        _bump(self._by_labels, self._canonical(role.labels), slot, sign)
        for t in role.pod_anti_affinity:
            _bump(self._by_anti, self._term(t), slot, sign)
        for p in role.pod_preferences:
            _bump(
                self._by_soft, (self._term(p.term), -p.weight if p.anti else p.weight), slot, sign
            )
        for t in role.pod_affinity:
            _bump(self._by_soft, (self._term(t), HARD_POD_AFFINITY_WEIGHT), slot, sign)

    # ----------------------------------------------------------------- answers

    def _canonical(self, labels: Labels) -> Labels:
        """One object per distinct label set (so :meth:`_selects` remembers by identity)."""
        return self._canon.setdefault(labels, labels)

    def _selects(self, t: PodAffinityTerm, labels: Labels) -> bool:
        """``t.selects(labels)``, remembered by the identity of both (terms and label sets
        repeat across pods; the entry keeps both alive, so an id is never another's)."""
        key = (id(t), id(labels))
        got = self._selected.get(key)
        if got is None:
            got = self._selected[key] = (t.selects(labels), t, labels)
        return got[0]

    def _term(self, t: PodAffinityTerm) -> PodAffinityTerm:
        """One object per distinct term (each job has its own, most of them equal)."""
        return self._terms.setdefault(t, t)

    def applies(self, role: Role) -> bool:
        """Whether the filter has anything to say about pods of ``role``: it has pod terms,
        or some pod here has an anti-affinity term that selects its labels (on the snapshot
        of :meth:`use`). O(1) while no pod has an anti-affinity term; else O(distinct anti
        terms kept), each answer remembered (:meth:`_selected_by`)."""
        if role.pod_affinity or role.pod_anti_affinity:
            return True
        snap = self._snap
        if snap is None or not (snap.state.anti_terms_kept or snap.placed_anti):
            return False
        return self._selected_by(snap, role, anti=True)

    def drawn(self, role: Role) -> bool:
        """Whether a running pod's preferred term or required affinity term selects the
        labels of ``role`` (on the snapshot of :meth:`use`), so weighs in where its pods go.
        O(1) while no pod has such a term; else O(distinct such terms kept)."""
        snap = self._snap
        if snap is None or not (snap.state.soft_terms_kept or snap.placed_soft):
            return False
        return self._selected_by(snap, role, anti=False)

    def _selected_by(self, snap: Snapshot, role: Role, *, anti: bool) -> bool:
        """Whether an anti-affinity term (``anti``), else a preferred or required affinity
        term, of a described job or of a job placed on ``snap`` selects ``role``'s labels:
        read off the terms (:meth:`ClusterState.kept_terms`), not the pods, so no
        :meth:`sync`; a term whose pods were released on the snapshot still answers (the
        filter then finds nothing to refuse). O(distinct such terms), each answer kept."""
        if len(self._canon) > _SELECTED_KEPT or len(self._selected) > _SELECTED_KEPT:
            self._selected.clear()
            self._canon.clear()
            self._terms.clear()
        labels = self._canonical(role.labels)
        for t in snap.state.kept_terms(anti=anti):
            if self._selects(self._term(t), labels):
                return True
        for job in snap.placed_jobs.values():
            if not (job.anti_terms if anti else job.soft_terms):
                continue
            for r in job.roles:
                terms = r.pod_anti_affinity if anti else r.scoring_terms
                if any(self._selects(self._term(t), labels) for t in terms):
                    return True
        return False

    def mask(self, snap: Snapshot, role: Role, slots: IntArray) -> BoolArray:
        """True for the nodes of ``slots`` a pod of ``role`` may take (the module docstring's
        three rules). O(distinct label sets and anti terms here x the role's terms + nodes
        those pods are on + len(slots)) numpy per term."""
        self.sync(snap)
        keep = np.ones(slots.shape[0], dtype=np.bool_)
        if not slots.shape[0]:
            return keep
        labels = self._canonical(role.labels)
        for t in role.pod_anti_affinity:
            t = self._term(t)
            keep &= ~self._in_domains(snap, t.topology_key, self._slots_selected(t), slots)
        for t, where in self._by_anti.items():
            if self._selects(t, labels):
                keep &= ~self._in_domains(snap, t.topology_key, [where], slots)
        terms = tuple(self._term(t) for t in role.pod_affinity)
        if terms:
            # the pods that count are those every term selects (Kubernetes), each in the
            # domain of every term whose key its node has
            both = {
                lab: w
                for lab, w in self._by_labels.items()
                if all(self._selects(t, lab) for t in terms)
            }
            keep &= self._affine(snap, terms, labels, list(both.values()), slots)
            firm = self._without_nominated(both)
            if firm is not None:  # (met with the nominated pods, and without them: Kubernetes)
                keep &= self._affine(snap, terms, labels, firm, slots)
        return keep

    def _affine(
        self,
        snap: Snapshot,
        terms: tuple[PodAffinityTerm, ...],
        labels: Labels,
        both: list[Counter[int]],
        slots: IntArray,
    ) -> BoolArray:
        """Rule 3 for a pod with ``labels`` and affinity ``terms``, the pods every term
        selects being on the slots of ``both``."""
        keep = np.ones(slots.shape[0], dtype=np.bool_)
        taken = [self._taken(snap, t.topology_key, both) for t in terms]
        if not any(d.shape[0] for d in taken) and all(t.selects(labels) for t in terms):
            for t in terms:  # the first pod of its kind: any node with every key
                keep &= self._ids(snap, t.topology_key)[slots] >= 0
        else:
            for t, d in zip(terms, taken, strict=True):
                keep &= self._member(snap, t.topology_key, d, slots)
        return keep

    def _without_nominated(self, both: dict[Labels, Counter[int]]) -> list[Counter[int]] | None:
        """``both`` without the pods among them held for a nominated preemptor, or None when
        none of them is. O(such pods)."""
        out: dict[Labels, Counter[int]] | None = None
        for pod in sorted(self._nominated):
            slot, role = self._pods[pod]
            lab = self._canonical(role.labels)
            if lab not in both:
                continue
            if out is None:
                out = {k: Counter(w) for k, w in both.items()}
            out[lab][slot] -= 1
        if out is None:
            return None
        return [+w for w in out.values()]  # (unary +: only the positive counts)

    def _slots_selected(self, t: PodAffinityTerm) -> list[Counter[int]]:
        """Where the pods term ``t`` selects are: per label set it selects, its slots."""
        return [where for lab, where in self._by_labels.items() if self._selects(t, lab)]

    def _in_domains(
        self, snap: Snapshot, key: str, where: list[Counter[int]], slots: IntArray
    ) -> BoolArray:
        """Per node of ``slots``: whether it has topology key ``key`` and shares its value
        with a node of ``where``."""
        return self._member(snap, key, self._taken(snap, key, where), slots)

    def _member(self, snap: Snapshot, key: str, taken: IntArray, slots: IntArray) -> BoolArray:
        """Per node of ``slots``: whether its value of ``key`` is one of ``taken``. O(values
        + len(slots)) numpy: a lookup table over the key's values."""
        if not taken.shape[0]:
            return np.zeros(slots.shape[0], dtype=np.bool_)
        ids = self._ids(snap, key)
        table = np.zeros(len(self._domains[key][1]) + 1, dtype=np.bool_)  # (last: no value)
        table[taken] = True
        return table[ids[slots]]

    def _taken(self, snap: Snapshot, key: str, where: list[Counter[int]]) -> IntArray:
        """The values (as :meth:`_ids` names them) of topology key ``key`` of the nodes of
        ``where`` that have it, with repeats."""
        on = [s for w in where for s in w]
        if not on:
            return np.zeros(0, dtype=np.int64)
        ids = self._ids(snap, key)[np.array(on, dtype=np.int64)]
        return ids[ids >= 0]

    def _ids(self, snap: Snapshot, key: str) -> IntArray:
        """Per slot of ``snap``, an int naming its node's value for topology key ``key`` (-1:
        none, or no node), kept until the nodes change."""
        st = snap.state
        version = (snap.token, st.membership_version, snap.membership_version)
        if version != self._domains_key:
            self._domains, self._domains_key = {}, version
        got = self._domains.get(key)
        if got is None:
            by_value: dict[str, int] = {}
            ids = np.full(max(snap.num_slots, 1), -1, dtype=np.int64)
            for s, name in enumerate(snap.names):
                if name is None or name not in st:
                    continue
                v = topology_value(st.node(name), key)
                if v is not None:
                    ids[s] = by_value.setdefault(v, len(by_value))
            got = self._domains[key] = (ids, by_value)
        return got[0]

    def one_per_domain(self, snap: Snapshot, role: Role, slots: IntArray, room: IntArray) -> None:
        """Cut ``room`` (pods of ``role`` each node of ``slots`` can take), in place, so that
        no domain of a self-selecting anti-affinity term of the role (a term its own labels
        match) holds more than one of its pods: the first node with room of each domain
        keeps one, the others none. So a gang's domains are counted right. O(len(slots))
        numpy per term."""
        for t in role.pod_anti_affinity:
            if not t.selects(role.labels):
                continue
            idx = np.flatnonzero(room > 0)
            ids = self._ids(snap, t.topology_key)[slots[idx]]
            has = ids >= 0
            idx, ids = idx[has], ids[has]
            _, first = np.unique(ids, return_index=True)
            cut = np.zeros(idx.shape[0], dtype=np.bool_)
            cut[first] = True
            room[idx[~cut]] = 0
            room[idx[cut]] = np.minimum(room[idx[cut]], 1)

    def preferred(self, snap: Snapshot, role: Role, slots: IntArray) -> BoolArray:
        """True for the nodes of ``slots`` of the best score for a pod of ``role``: never
        none of a non-empty ``slots``. As kube-scheduler's InterPodAffinity score counts it,
        a node's score is, over the pods in its domain for each term (a node without the
        term's key gains nothing):

        - for each of ``role``'s preferred terms, the term's weight for each pod it selects
          (taken away for an anti term);
        - for each running pod's preferred term that selects ``role``'s labels, that
          term's weight (taken away for an anti term), and for each of its required
          affinity terms that does, :data:`HARD_POD_AFFINITY_WEIGHT`.

        O(terms x (label sets here + values of the key) + len(slots)) numpy."""
        self.sync(snap)
        score = np.zeros(slots.shape[0], dtype=np.int64)
        for p in role.pod_preferences:
            t = self._term(p.term)
            where = self._slots_selected(t)
            if where:
                weight = -p.weight if p.anti else p.weight
                score += weight * self._per_domain(snap, t.topology_key, where, slots)
        labels = self._canonical(role.labels)
        for (t, weight), holders in self._by_soft.items():
            if self._selects(t, labels):
                score += weight * self._per_domain(snap, t.topology_key, [holders], slots)
        return score == score.max() if slots.shape[0] else np.ones(0, dtype=np.bool_)

    def _per_domain(
        self, snap: Snapshot, key: str, where: list[Counter[int]], slots: IntArray
    ) -> IntArray:
        """Per node of ``slots``, the pods of ``where`` in its domain of topology key
        ``key`` (0 for a node without the key). O(values + pods' nodes + len(slots))."""
        ids = self._ids(snap, key)
        on = np.array([s for w in where for s in w], dtype=np.int64)
        many = np.array([n for w in where for n in w.values()], dtype=np.int64)
        table = np.zeros(len(self._domains[key][1]) + 1, dtype=np.int64)
        np.add.at(table, ids[on], many)  # (pods on nodes without the key: the last cell)
        table[-1] = 0
        return table[ids[slots]]


class PodPreference:
    """The built-in node filter of preferred pod terms (``name = "pod_preference"``): keeps
    the nodes of the best score among those it is asked about (:meth:`PodsOnNodes.preferred`),
    so it never leaves a pod without a node. The Placer adds it, last, for a pod placed on
    its own (a lone pod, a pod-level job's pod) whose role has preferred pod terms or is
    selected by a running pod's (:meth:`PodsOnNodes.drawn`), not for a gang's pods."""

    name = "pod_preference"

    def __init__(self, pods: PodsOnNodes) -> None:
        self.pods = pods

    def __call__(self, ctx: PodView, slots: IntArray) -> BoolArray:
        return self.pods.preferred(ctx.snap, ctx.role, slots)


class PodAffinity:
    """The built-in node filter of pod affinity and anti-affinity (``name = "pod_affinity"``),
    asking a :class:`PodsOnNodes`. The Placer adds it, after the user's filters and the
    per-node cap, for the roles it concerns (:meth:`PodsOnNodes.applies`)."""

    name = "pod_affinity"

    def __init__(self, pods: PodsOnNodes) -> None:
        self.pods = pods

    def __call__(self, ctx: PodView, slots: IntArray) -> BoolArray:
        return self.pods.mask(ctx.snap, ctx.role, slots)
