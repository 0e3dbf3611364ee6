"""Where the Placer looks: candidate node sets, topology tiers and domains, the best-fit index
of partly used nodes, and the reasons it gives when it finds nothing.

Pure functions of the snapshot and their arguments (none changes the snapshot); the
:class:`~kant.placement.Placer` calls them and applies the strategy and the node filters.
Everything is vectorised over node slots except :func:`partly_used_best_fit`, which walks a
sorted index and stops early.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

import numpy as np

from kant.model import MILLI, Reason, ReasonCode, Role, Tier
from kant.placement.context import IntArray, PodContext, PodRequest
from kant.state import Snapshot

LEVEL = {Tier.HBD: "hbd", Tier.LEAF: "leaf", Tier.SPINE: "spine", Tier.SUPERSPINE: "superspine"}
"""The snapshot column level of each grouping tier (``<level>_id``)."""
TIER_ORDER = (Tier.NODE, Tier.LEAF, Tier.SPINE, Tier.SUPERSPINE, Tier.CLUSTER)
"""The tiers a gang role walks, tightest first (HBD is inserted only when a role asks)."""
BEST_FIT_LOOKS = 256
"""Partly used nodes :func:`partly_used_best_fit` examines before the group level takes over."""


class Candidates:
    """The candidate node slots of a role (its pools' live nodes, ascending), with a lazy
    split by leaf (NodeNetGroup) for the two-level search.

    ``pools``: the pool ids the slots are exactly (empty: unknown, or a subset of pools);
    only then may the best-fit index, which is per pool, stand for the slots. ``hbd``: True
    when the slots are the pools' nodes in an HBD, False when they are the pools' other
    nodes (the best-fit index skips the rest), None when they are all of the pools' nodes.
    ``parent``: the candidates these are a part of (:meth:`subset`, :meth:`hbd_split`): the
    best-fit index then skips the pools' nodes not in :attr:`slots` (:meth:`member`).
    Cached by the Placer per (GPU models, needs GPU) until nodes come or go."""

    def __init__(
        self,
        slots: IntArray,
        pools: tuple[int, ...] = (),
        *,
        hbd: bool | None = None,
        parent: Candidates | None = None,
    ) -> None:
        self.slots = slots
        self.pools = pools
        self.hbd = hbd
        self.parent = parent
        self._groups: tuple[IntArray, list[IntArray], IntArray] | None = None
        self._group_of: IntArray | None = None
        self._mixed: tuple[IntArray, IntArray] | bool | None = False
        self._hbd_split: tuple[Candidates, Candidates] | bool | None = False
        self._leaf_nodes: IntArray | None = None
        self._member: np.ndarray | None = None
        self._subsets: dict[int, tuple[IntArray, Candidates]] = {}
        self._layouts: dict[Tier, Layout] = {}
        self._asked: set[Tier] = set()  # tiers whose layout was asked for once

    def layout(self, snap: Snapshot, tier: Tier) -> Layout | None:
        """:func:`domains`' fixed part for :attr:`slots` at ``tier`` (which domain each slot
        is in; what does not depend on the room left), for the tiers that have one (LEAF and
        above; None for the others). O(n log n) once per tier, then cached (the topology of
        the candidates' nodes changes only with the membership, which the Placer's cache of
        candidates follows). None at the first call for a tier too: candidates made for one
        search (a domain's nodes) would pay for a layout they use once."""
        if tier is Tier.NODE or tier is Tier.HBD:
            return None
        got = self._layouts.get(tier)
        if got is None:
            if tier not in self._asked:
                self._asked.add(tier)
                return None
            got = self._layouts[tier] = Layout(snap, self.slots, tier, self)
        return got

    def subset(self, slots: IntArray) -> Candidates:
        """``slots``, a part of these candidates (a strategy's ``candidate_sets`` gives it),
        as candidates of their own, for the two-level search: same pools, the best-fit index
        limited to them (:meth:`member`). Kept by the array's identity (the array is held,
        so its id is not reused), a few at a time: a strategy that gives the same array for
        the same candidates (E-Spread's general nodes) pays for its split by leaf once. The
        arrays must not change once given. O(1) on a hit."""
        hit = self._subsets.get(id(slots))
        if hit is not None and hit[0] is slots:
            return hit[1]
        sub = Candidates(slots, self.pools, parent=self)
        if len(self._subsets) >= 8:  # (fresh arrays for every pod: keep a few)
            self._subsets.clear()
        self._subsets[id(slots)] = (slots, sub)
        return sub

    def member(self, snap: Snapshot) -> np.ndarray | None:
        """None when :attr:`slots` are all the pools' nodes (of their kind, ``hbd``), else a
        bool mask over node slots of the ones they hold. O(n) once, then cached."""
        if self.parent is None:
            return None
        if self.hbd is not None and self.parent.member(snap) is None:
            return None  # an HBD split of all the pools' nodes: all of its kind
        if self._member is None:
            mask = np.zeros(snap.num_slots, dtype=bool)
            mask[self.slots] = True
            self._member = mask
        return self._member

    def hbd_split(self, snap: Snapshot) -> tuple[Candidates, Candidates] | None:
        """(the candidates in an HBD, the others), each keeping the pools (the best-fit
        index skips the other kind of node); None when the candidates are all of one kind
        (no split to make). O(n) once, then cached."""
        if self._hbd_split is False:
            in_hbd = snap.cols.hbd_id[self.slots] >= 0
            if in_hbd.all() or not in_hbd.any():
                self._hbd_split = None
            else:
                self._hbd_split = (
                    Candidates(self.slots[in_hbd], self.pools, hbd=True, parent=self),
                    Candidates(self.slots[~in_hbd], self.pools, hbd=False, parent=self),
                )
        return self._hbd_split  # type: ignore[return-value]

    def group_of(self, snap: Snapshot) -> IntArray:
        """Per candidate slot (in :attr:`slots` order), the index of its leaf in
        :meth:`groups`' arrays. O(n log n) once, then cached."""
        if self._group_of is None:
            ids = self.groups(snap)[0]
            self._group_of = np.searchsorted(ids, snap.cols.leaf_id[self.slots]).astype(np.int64)
        return self._group_of

    def mixed(self, snap: Snapshot) -> tuple[IntArray, IntArray] | None:
        """The leaves whose GPU nodes are not all candidates (other GPU models, the other
        side of an HBD split): their indices in :meth:`groups`' arrays, and the positions in
        :attr:`slots` of the candidates in them. None when there are none: the snapshot's
        per-leaf aggregates then describe the candidates exactly. O(n) once, then cached."""
        if self._mixed is False:
            ids = self.groups(snap)[0]
            cols = snap.cols
            total = self.leaf_gpu_nodes(snap)
            gof = self.group_of(snap)
            mine = np.bincount(gof[cols.gpus[self.slots] > 0], minlength=ids.shape[0])
            known = ids >= 0
            bad = np.zeros(ids.shape[0], dtype=bool)
            bad[known] = total[ids[known]] != mine[known]
            if bad.any():
                groups = np.flatnonzero(bad).astype(np.int64)
                self._mixed = (groups, np.flatnonzero(bad[gof]).astype(np.int64))
            else:
                self._mixed = None
        return self._mixed  # type: ignore[return-value]

    def leaf_gpu_nodes(self, snap: Snapshot) -> IntArray:
        """Live GPU nodes per leaf id, every node counted (the parent's, when there is one).
        O(n) once, then cached."""
        if self.parent is not None:
            return self.parent.leaf_gpu_nodes(snap)
        if self._leaf_nodes is None:
            cols = snap.cols
            n = snap.num_slots
            leaf = cols.leaf_id[:n]
            gpu_nodes = cols.alive[:n] & (cols.gpus[:n] > 0) & (leaf >= 0)
            width = int(leaf.max(initial=-1)) + 1
            self._leaf_nodes = np.bincount(leaf[gpu_nodes], minlength=width).astype(np.int64)
        return self._leaf_nodes

    def groups(self, snap: Snapshot) -> tuple[IntArray, list[IntArray], IntArray]:
        """(leaf ids, member slots per leaf, GPU nodes per leaf); nodes without a leaf form
        one pseudo-group with id -1. O(n log n) once, then cached."""
        if self._groups is None:
            leaf = snap.cols.leaf_id[self.slots]
            order = np.argsort(leaf, kind="stable")
            ids, starts = np.unique(leaf[order], return_index=True)
            parts = np.split(self.slots[order], starts[1:])
            sizes = np.array([p.shape[0] for p in parts], dtype=np.int64)
            self._groups = (ids.astype(np.int64), parts, sizes)
        return self._groups


def tiers_for(role: Role, n: int, topology_default: Tier | None) -> list[Tier]:
    """The tiers ``n`` pods of ``role`` search, tightest first; empty: no tier search (one
    pod, or no wish and no strategy default). A spread role never uses the NODE tier; an HBD
    wish adds the HBD tier below LEAF; a required wish stops at its tier. (The Placer gives a
    required HBD wish HBD nodes only, so its NODE tier is one HBD node.)"""
    wish = role.topology
    order = list(TIER_ORDER[1:] if role.spread else TIER_ORDER)  # spread: never one node
    if wish is None:
        if n == 1 or topology_default is None:
            return []
        return order
    if wish.tier is Tier.HBD:
        order.insert(order.index(Tier.LEAF), Tier.HBD)
    if not wish.required:
        return order
    return [t for t in order if t <= wish.tier]


class Layout:
    """Where each of a fixed array of slots sits at one tier (LEAF, SPINE, SUPERSPINE or
    CLUSTER): what :func:`domains` would otherwise derive from the topology columns at every
    call, O(n log n). Built by :meth:`Candidates.layout`."""

    def __init__(
        self, snap: Snapshot, slots: IntArray, tier: Tier, cand: Candidates | None = None
    ) -> None:
        cols = snap.cols
        if tier is Tier.LEAF:
            # the split by leaf the two-level search keeps (``cand``'s, when it is of
            # ``slots``): the leaf ids, ascending (-1: the leafless nodes, not a domain),
            # the slots of each, and each slot's leaf among them
            cand = cand if cand is not None and cand.slots is slots else Candidates(slots)
            self.ids, self.members, _sizes = cand.groups(snap)
            self.group = cand.group_of(snap)
            return
        leaf = cols.leaf_id[slots]
        self.leafless = int(leaf.max(initial=0)) + 1  # one group, after every leaf
        self.leaf = np.where(leaf >= 0, leaf, self.leafless)
        if tier is Tier.CLUSTER:
            self.parent_of_node = np.zeros(slots.shape[0], dtype=np.int64)
        else:
            self.parent_of_node = getattr(cols, f"{LEVEL[tier]}_id")[slots]
        # the (parent, leaf) pairs present, sorted: each parent's leaves in one run, ascending
        width = int(self.leaf.max(initial=0)) + 1
        inside = self.parent_of_node >= 0
        pairs = np.unique(self.parent_of_node[inside] * width + self.leaf[inside])
        parents, self.leaves = np.divmod(pairs, width)
        # each parent's first pair, and per pair the index of its parent among them
        present, self.starts, self.segment = np.unique(
            parents, return_index=True, return_inverse=True
        )
        self.present: list[int] = present.tolist()
        self.bounds: list[int] = [*self.starts.tolist(), pairs.shape[0]]
        self.last_leafless = self.leaves == self.leafless


def domains(
    snap: Snapshot,
    slots: IntArray,
    room: IntArray,
    tier: Tier,
    n: int,
    key: Callable[[IntArray], IntArray],
    probe: int,
    layout: Layout | None = None,
) -> Iterator[IntArray]:
    """Candidate slot sets at ``tier`` that can hold ``n`` pods (``room``: pods each slot can
    take, not capped at ``n``, so a domain's room is what it has left), at most ``probe`` of
    them, best first by ``key`` (the strategy's ``domain_key``) on their room. Above the
    leaf tier a domain is the fewest leaves of one parent that hold the pods, largest first;
    at the cluster tier the nodes without a leaf count as one group taken after every leaf
    (where they sit in the network is not known). ``layout``: ``slots``' :class:`Layout` at
    ``tier``, when the caller keeps one (the same answers, without deriving it again).
    O(len(slots)) numpy plus O(parents) Python per tier."""
    if tier is Tier.NODE:
        ok = np.flatnonzero(room >= n)
        for i in ok[np.argsort(key(room[ok]), kind="stable")][:probe]:
            yield slots[i : i + 1]
        return
    cols = snap.cols
    if layout is not None and tier is Tier.LEAF:
        caps = np.bincount(layout.group, weights=room, minlength=len(layout.ids))
        caps = np.where(layout.ids >= 0, caps.astype(np.int64), -1)  # (leafless: no domain)
        doms = np.flatnonzero(caps >= n)
        for d in doms[np.argsort(key(caps[doms]), kind="stable")][:probe]:
            yield layout.members[d]
        return
    if tier in (Tier.HBD, Tier.LEAF):
        ids = getattr(cols, f"{LEVEL[tier]}_id")[slots]
        valid = ids >= 0
        if not valid.any():
            return
        caps = np.bincount(ids[valid], weights=room[valid]).astype(np.int64)
        doms = np.flatnonzero(caps >= n)
        for d in doms[np.argsort(key(caps[doms]), kind="stable")][:probe]:
            yield slots[ids == d]
        if tier is Tier.HBD and not doms.shape[0] and int(caps.sum()) >= n:
            # HBD granularity: a job larger than any one HBD takes the fewest whole HBDs,
            # never HBD nodes mixed with other nodes
            chosen = fewest_hbds(snap, slots, room, ids, caps, n, key)
            yield slots[np.isin(ids, chosen) & valid]
        return
    # spine / superspine / cluster: fewest leaves inside one domain
    if layout is None:
        layout = Layout(snap, slots, tier)
    leaf, parent_of_node = layout.leaf, layout.parent_of_node
    if not layout.present:
        return
    # per parent, all at once: its leaves largest first (the leafless group last, ties by
    # leaf id), and the fewest of them that hold the pods
    lids = layout.leaves
    caps = np.bincount(leaf, weights=room).astype(np.int64)[lids]
    order = np.lexsort((lids, -caps, layout.last_leafless, layout.segment))
    ranked = caps[order]  # (each parent's run stays where it was: the segment sorts first)
    run = np.cumsum(ranked)
    before = np.r_[0, run[layout.starts[1:] - 1]]  # what the earlier parents' leaves hold
    within = run - before[layout.segment]
    needs = np.add.reduceat((within < n).astype(np.int64), layout.starts) + 1
    totals = np.add.reduceat(ranked, layout.starts)
    options: list[tuple[int, int, int, IntArray]] = []
    for k in np.flatnonzero(totals >= n).tolist():
        need, first = int(needs[k]), layout.bounds[k]
        chosen = lids[order[first : first + need]]
        total = int(within[first + need - 1])
        options.append((need, int(key(np.array([total]))[0]), layout.present[k], chosen))
    options.sort(key=lambda o: (o[0], o[1], o[2]))
    for _need, _k, parent, chosen in options[:probe]:
        yield slots[np.isin(leaf, chosen) & (parent_of_node == parent)]


def fewest_hbds(
    snap: Snapshot,
    slots: IntArray,
    room: IntArray,
    hbd: IntArray,
    caps: IntArray,
    n: int,
    key: Callable[[IntArray], IntArray],
) -> IntArray:
    """The ids of the fewest HBDs that hold ``n`` pods, for a job no one HBD holds (``caps``:
    pods each HBD id can take, the ``room`` of its nodes among ``slots`` summed; ``hbd``:
    their HBD ids). Of the choices of that few, HBDs sharing a leaf come first, then a
    spine, then a superspine: at the tightest level where a domain holds the pods in that
    few HBDs, its roomiest ones (ties by id), the domain first by ``key`` on their room,
    ties by domain id; with none at any level, the roomiest HBDs of all (ties by id). An
    HBD is in a domain when all its nodes with room are. O(len(slots) + HBDs log HBDs)."""
    order = np.lexsort((np.arange(caps.shape[0]), -caps))
    need = int(np.searchsorted(np.cumsum(caps[order]), n)) + 1
    live = (hbd >= 0) & (room > 0)
    h = hbd[live]
    for tier in (Tier.LEAF, Tier.SPINE, Tier.SUPERSPINE):
        g = getattr(snap.cols, f"{LEVEL[tier]}_id")[slots[live]]
        low = np.full(caps.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
        high = np.full(caps.shape[0], -1, dtype=np.int64)
        np.minimum.at(low, h, g)
        np.maximum.at(high, h, g)
        inside = np.flatnonzero((low == high) & (high >= 0))  # the HBDs in one domain
        if not inside.shape[0]:
            continue
        ranked = inside[np.lexsort((inside, -caps[inside], low[inside]))]  # by domain, roomiest
        dom = low[ranked]
        first = np.flatnonzero(np.r_[True, dom[1:] != dom[:-1]])  # each domain's first
        rank = np.arange(dom.shape[0]) - np.repeat(first, np.diff(np.r_[first, dom.shape[0]]))
        top = rank < need
        total = np.bincount(np.searchsorted(dom[first], dom[top]), weights=caps[ranked[top]])
        fits = np.flatnonzero(total >= n)
        if fits.shape[0]:
            best = fits[np.lexsort((dom[first][fits], key(total[fits].astype(np.int64))))[0]]
            return ranked[first[best] : first[best] + need]
    return order[:need]


def partly_used_best_fit(
    ctx: PodContext,
    cand: Candidates,
    allowed: Callable[[int], bool] | None = None,
    tiebreak: Callable[[list[int]], int] | None = None,
) -> int | None:
    """The fullest partly used node of the pools that still fits the pod (and that
    ``allowed`` accepts: the node filters), from the per-pool sorted index (fewest whole
    free GPUs first), preferring a node that already holds this job's pods at equal
    fullness -- or, for a role with ``spread``, skipping such nodes (its replicas go apart);
    among equally full nodes otherwise, the first in the index, or the one ``tiebreak``
    picks from them (in index order). Stops at the first wholly free node: opening a new
    node is the group level's call. O(log n + nodes looked at), at most
    :data:`BEST_FIT_LOOKS` nodes."""
    snap = ctx.snap
    v = snap.cols.views()
    free_gpus = v.free_gpus
    req = ctx.req
    apart = ctx.role.spread
    member = cand.member(snap)
    streams = [snap.best_fit(p, req.gpus) for p in cand.pools]
    merged = (
        streams[0] if len(streams) == 1 else heapq.merge(*streams, key=lambda s: (free_gpus[s], s))
    )
    best: tuple[int, int] | None = None  # (free GPUs, slot)
    alike: list[int] = []  # the nodes as full as best, in index order
    for looked, slot in enumerate(merged):
        free = free_gpus[slot]
        if free >= v.gpus[slot] or looked >= BEST_FIT_LOOKS:
            break
        if best is not None and free > best[0]:
            break
        if (
            v.ready[slot]
            and v.cpu_free[slot] >= req.cpu
            and v.mem_free[slot] >= req.mem
            and v.free_nics[slot] >= req.nics
            and v.pod_free[slot] > 0
            and (cand.hbd is None or (v.hbd_id[slot] >= 0) == cand.hbd)
            and (member is None or member[slot])
            and (allowed is None or allowed(slot))
        ):
            if ctx.on_node.get(slot):
                if apart:
                    continue  # a spread role: not next to its own replicas
                return slot  # co-locate with this job's pods at equal fullness
            if best is None:
                best = (free, slot)
            if tiebreak is not None:
                alike.append(slot)
    if best is None:
        return None
    return tiebreak(alike) if tiebreak is not None and len(alike) > 1 else best[1]


def near(snap: Snapshot, cand: Candidates, anchor: int, tier: Tier) -> Candidates:
    """Candidates sharing ``tier`` with node slot ``anchor`` (a required wish of a pod-level
    job keeps later pods next to the first). O(len(cand.slots))."""
    slots = cand.slots
    if tier is Tier.NODE:
        return Candidates(slots[slots == anchor])
    if tier is Tier.CLUSTER:
        return cand
    ids = getattr(snap.cols, f"{LEVEL[tier]}_id")
    want = ids[anchor]
    if want < 0:
        return Candidates(slots[slots == anchor])
    return Candidates(slots[ids[slots] == want])


def why_not(
    snap: Snapshot,
    slots: IntArray,
    req: PodRequest,
    n: int,
    blocked: str | None = None,
    *,
    taken: int = 0,
) -> Reason:
    """Why ``n`` pods of ``req`` found no place among ``slots``: ``INSUFFICIENT_CAPACITY``
    when the nodes do not have that many free GPUs at all, else ``NO_FIT`` (naming the node
    filter ``blocked`` when one left no node). ``taken``: pods of ``req`` counted as already
    placed on ``slots`` though the snapshot does not hold them (the bulk path's answer is
    then the pod-by-pod path's after it placed them). O(len(slots))."""
    cols = snap.cols
    need = n * req.total_milli
    free = int(cols.free_milli[slots].sum()) - taken * req.total_milli
    if req.needs_gpu and free < need:
        return Reason(
            code=ReasonCode.INSUFFICIENT_CAPACITY,
            message=f"needs {need / MILLI:g} GPUs; the allowed pools have {free / MILLI:g} free",
        )
    if snap.pods_capped:
        # (each node counted up to the pods asked: a node without a limit has about 2**40
        # slots, and millions of them would overflow the sum)
        free_slots = np.maximum(cols.pod_free[slots][cols.ready[slots]], 0)
        room = int(np.minimum(free_slots, n + taken).sum()) - taken
        if room < n:
            return Reason(
                code=ReasonCode.NO_FIT,
                message=f"{n} pod(s) of {describe(req)}: the nodes have room for "
                f"{max(room, 0)} more pod(s) (their max_pods)",
            )
    if blocked is not None:
        return Reason(
            code=ReasonCode.NO_FIT,
            message=f"{n} pod(s) of {describe(req)}: node filter {blocked!r} leaves no node "
            "set that fits",
        )
    return Reason(
        code=ReasonCode.NO_FIT,
        message=f"{n} pod(s) of {describe(req)} do not fit on any node set",
    )


def describe(req: PodRequest) -> str:
    """A pod request in words, for reasons: ``"2 GPU, 8000 mCPU, 1 NIC"``."""
    parts = [f"{req.gpus} GPU" if req.gpus else f"{req.milli} milli-GPU" if req.milli else "no GPU"]
    if req.cpu:
        parts.append(f"{req.cpu} mCPU")
    if req.mem:
        parts.append(f"{req.mem} MiB")
    if req.nics:
        parts.append(f"{req.nics} NIC")
    return ", ".join(parts)
