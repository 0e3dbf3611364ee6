"""The Placer (RSCH): device-level GPU + NIC placement of a job's pods on a snapshot.

``Placer.place(job, snap)`` answers with a :class:`PlacementResult`: one :class:`Binding` per
placed pod, and a typed :class:`Reason` for every pod it could not place.

* **Gang** jobs are placed in one snapshot transaction: every pod or none (the snapshot is
  left exactly as it was on failure).
* **Pod-level** jobs place as many pods as fit, each on its own.
* **Node pools**: a role searches only nodes of its allowed GPU models.
* **Two-level search**: a single pod first looks inside the best NodeNetGroups (leaves,
  ranked from the snapshot's per-group aggregates) and only then across its whole pool —
  vectorised, never a Python loop over nodes.
* **Topology**: a multi-pod gang role walks the tiers node < (HBD) < leaf < spine <
  superspine < cluster, tightest first; at each tier it takes the domains that can hold all
  its pods (exact per-node fit counts, summed per domain), in the strategy's order, and above
  the leaf tier the fewest leaves of the domain. A *required* wish stops at its tier.
* **Devices**: whole GPUs come from the node template's best-linked free set (NVLink > PCIe
  switch > NUMA > cross-NUMA), NICs are the free ones nearest those GPUs, fractional shares go
  to the fullest device that still fits. Unhealthy devices are never candidates (the snapshot
  shows them as not free).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from kant.bits import bits as _bits
from kant.bits import lowest_bits as _lowest_bits
from kant.contracts import Strategy
from kant.model import MILLI, Binding, Job, PodId, Reason, ReasonCode, Role, Tier
from kant.placement.context import IntArray, PodContext, PodRequest, fit_count, fits
from kant.placement.strategies import StrategyHooks, adapt_strategy, make_strategy
from kant.state import Snapshot
from kant.topology.templates import NodeTemplate, get_template

_LEVEL = {Tier.HBD: "hbd", Tier.LEAF: "leaf", Tier.SPINE: "spine", Tier.SUPERSPINE: "superspine"}
_TIER_ORDER = (Tier.NODE, Tier.LEAF, Tier.SPINE, Tier.SUPERSPINE, Tier.CLUSTER)
_TWO_LEVEL_MIN = 128  # below this many candidates a flat vectorised pass is cheaper
_BEST_FIT_LOOKS = 256  # partly used nodes examined before the group level takes over


@attrs.frozen(kw_only=True)
class PlacementResult:
    """Bindings made (already applied to the snapshot) and the reason for each pod left out."""

    bindings: tuple[Binding, ...] = ()
    unplaced: Mapping[PodId, Reason] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        return not self.unplaced

    @property
    def reason(self) -> Reason | None:
        """The reason of the first unplaced pod (a gang's pods all share one)."""
        return next(iter(self.unplaced.values()), None)


class _Candidates:
    """Candidate node slots of a set of pools, with a lazy split by leaf (NodeNetGroup)."""

    def __init__(self, slots: IntArray, pools: tuple[int, ...] = ()) -> None:
        self.slots = slots
        self.pools = pools  # the node pools the slots are exactly (empty: unknown / a subset)
        self._groups: tuple[IntArray, list[IntArray], IntArray] | None = None

    def groups(self, snap: Snapshot) -> tuple[IntArray, list[IntArray], IntArray]:
        """(leaf ids, member slots per leaf, GPU nodes per leaf); nodes without a leaf form
        one pseudo-group with id -1."""
        if self._groups is None:
            leaf = snap.cols.leaf_id[self.slots]
            order = np.argsort(leaf, kind="stable")
            ids, starts = np.unique(leaf[order], return_index=True)
            parts = np.split(self.slots[order], starts[1:])
            sizes = np.array([p.shape[0] for p in parts], dtype=np.int64)
            self._groups = (ids.astype(np.int64), parts, sizes)
        return self._groups


class Placer:
    """Places jobs on a snapshot with one strategy: a registered name (built with
    ``kwargs``) or any object with ``name`` and ``score`` (:class:`kant.contracts.Strategy`);
    the hooks it lacks get :class:`~kant.placement.BaseStrategy`'s defaults
    (:func:`~kant.placement.adapt_strategy`).

    ``group_probe``: how many of the best-ranked NodeNetGroups a single pod tries before the
    search widens to its whole pool.
    """

    def __init__(
        self, strategy: str | Strategy = "ebinpack", *, group_probe: int = 4, **kwargs: Any
    ) -> None:
        self.strategy = make_strategy(strategy, **kwargs) if isinstance(strategy, str) else strategy
        self.group_probe = group_probe
        self._adapted: dict[int, StrategyHooks] = {}  # by id: strategies of candidate_sets
        self._cand: dict[tuple[Any, ...], _Candidates] = {}
        self._templates: list[NodeTemplate | None] = []
        self._version = -1
        self._state_id = -1

    @property
    def strategy(self) -> Strategy:
        """The strategy object (as given or built); :attr:`hooks` is what the Placer reads."""
        return self._strategy

    @strategy.setter
    def strategy(self, strategy: Strategy) -> None:
        self.hooks = adapt_strategy(strategy)
        self._strategy = strategy

    def __repr__(self) -> str:
        return f"Placer({self.hooks.name!r})"

    # ------------------------------------------------------------------ public

    def place(
        self, job: Job, snap: Snapshot, *, pods: Sequence[PodId] | None = None
    ) -> PlacementResult:
        """Place ``pods`` of ``job`` (default: all pods not yet running) on ``snap``.

        The bindings are applied to the snapshot inside a transaction that is committed into
        the caller's open transaction, if any. Gang: all or nothing. Pod-level: each pod on
        its own. Expected failures are reasons in the result, never exceptions."""
        self._sync(snap)
        state = snap.state
        todo = [p for p in job.pods() if not state.has_pod(p)] if pods is None else list(pods)
        if not todo:
            return PlacementResult()
        on_node: dict[int, int] = {}
        for p in state.job_pods(job.id):
            s = state.slot_of(state.binding(p).node)
            on_node[s] = on_node.get(s, 0) + 1
        by_role: dict[str, list[PodId]] = {}
        for p in todo:
            by_role.setdefault(p.role, []).append(p)
        placed: list[Binding] = []
        unplaced: dict[PodId, Reason] = {}
        with snap.transaction() as tx:
            for role_name, role_pods in by_role.items():
                role = job.role(role_name)
                if job.gang:
                    out = self._place_role(job, role, role_pods, snap, on_node)
                    if isinstance(out, Reason):
                        why = Reason(code=out.code, message=f"role {role.name!r}: {out.message}")
                        return PlacementResult(unplaced=dict.fromkeys(todo, why))
                    placed.extend(out)
                else:
                    for p in role_pods:
                        one = self._place_role(job, role, [p], snap, on_node)
                        if isinstance(one, Reason):
                            unplaced[p] = one
                        else:
                            placed.extend(one)
            tx.commit()
        return PlacementResult(bindings=tuple(placed), unplaced=unplaced)

    # ------------------------------------------------------------------ roles

    def _place_role(
        self, job: Job, role: Role, pods: list[PodId], snap: Snapshot, on_node: dict[int, int]
    ) -> list[Binding] | Reason:
        req = PodRequest.of(role.resources)
        cand = self._candidates(snap, role, req)
        if isinstance(cand, Reason):
            return cand
        wish = role.topology
        if wish is not None and wish.required and on_node and not job.gang:
            near = _near(snap, cand, min(on_node), wish.tier)
            got = self._place_in(job, role, pods, snap, on_node, near, req)
            if isinstance(got, Reason) and got.code is not ReasonCode.NO_POOL:
                return Reason(
                    code=ReasonCode.TOPOLOGY,
                    message=f"no room in the {wish.tier.name.lower()} of the job's other pods",
                )
            return got
        return self._place_in(job, role, pods, snap, on_node, cand, req)

    def _place_in(
        self,
        job: Job,
        role: Role,
        pods: list[PodId],
        snap: Snapshot,
        on_node: dict[int, int],
        cand: _Candidates,
        req: PodRequest,
    ) -> list[Binding] | Reason:
        n = len(pods)
        ctx = PodContext(snap=snap, job=job, role=role, req=req, on_node=on_node)
        tiers = self._tiers(role, n)
        if not tiers:
            out: list[Binding] = []
            for p in pods:
                b = self._place_pod(ctx, p, cand)
                if b is None:
                    return self._why_not(snap, cand.slots, req, n - len(out))
                out.append(b)
            return out
        room = np.minimum(fit_count(snap, cand.slots, req), n)
        if int(room.sum()) < n:
            return self._why_not(snap, cand.slots, req, n)
        for tier in tiers:
            for domain in self._domains(snap, cand.slots, room, tier, n):
                with snap.transaction() as tx:
                    got = self._fill(ctx, pods, domain)
                    if got is not None:
                        tx.commit()
                        return got
        wish = role.topology
        if wish is None or not wish.required:  # unreachable: the CLUSTER tier always fits
            return self._why_not(snap, cand.slots, req, n)
        return Reason(
            code=ReasonCode.TOPOLOGY,
            message=f"{n} pods fit in the pool but no single {wish.tier.name.lower()} holds them",
        )

    def _fill(self, ctx: PodContext, pods: list[PodId], domain: IntArray) -> list[Binding] | None:
        """Place identical ``pods`` inside ``domain``, each on the best-scoring node.

        Scores are node-local (see :class:`~kant.placement.strategies.Strategy`), so after
        each bind only the chosen node is re-scored: O(domain) numpy once, then O(1) numpy
        calls per pod."""
        strat = self.hooks
        out: list[Binding] = []
        if strat.candidate_sets is not None:  # the sets may change pod by pod: one at a time
            cand = _Candidates(domain)
            for p in pods:
                b = self._place_pod(ctx, p, cand, two_level=False)
                if b is None:
                    return None
                out.append(b)
            return out
        room = fit_count(ctx.snap, domain, ctx.req)
        scores = np.full(domain.shape[0], -np.inf)
        live = room > 0
        if live.any():
            scores[live] = _score(strat, ctx, domain[live])
        for p in pods:
            i = int(np.argmax(scores))
            if scores[i] == -np.inf:
                return None
            out.append(self._bind(ctx, p, int(domain[i]), strat))
            room[i] -= 1
            scores[i] = _score(strat, ctx, domain[i : i + 1])[0] if room[i] > 0 else -np.inf
        return out

    def _tiers(self, role: Role, n: int) -> list[Tier]:
        wish = role.topology
        order = list(_TIER_ORDER[1:] if role.spread else _TIER_ORDER)  # spread: never one node
        if wish is None:
            if n == 1 or self.hooks.topology_default is None:
                return []
            return order
        if wish.tier is Tier.HBD:
            order.insert(order.index(Tier.LEAF), Tier.HBD)
        if not wish.required:
            return order
        return [t for t in order if t <= wish.tier]

    def _domains(
        self, snap: Snapshot, slots: IntArray, room: IntArray, tier: Tier, n: int
    ) -> Iterator[IntArray]:
        """Candidate slot sets at ``tier`` that can hold ``n`` pods, best first."""
        key = self.hooks.domain_key
        if tier is Tier.NODE:
            ok = np.flatnonzero(room >= n)
            for i in ok[np.argsort(key(room[ok]), kind="stable")][: self.group_probe]:
                yield slots[i : i + 1]
            return
        cols = snap.cols
        if tier in (Tier.HBD, Tier.LEAF):
            ids = getattr(cols, f"{_LEVEL[tier]}_id")[slots]
            valid = ids >= 0
            if not valid.any():
                return
            caps = np.bincount(ids[valid], weights=room[valid]).astype(np.int64)
            doms = np.flatnonzero(caps >= n)
            for d in doms[np.argsort(key(caps[doms]), kind="stable")][: self.group_probe]:
                yield slots[ids == d]
            return
        # spine / superspine / cluster: fewest leaves inside one domain
        leaf = cols.leaf_id[slots]
        leaf = np.where(leaf >= 0, leaf, leaf.max(initial=0) + 1)  # leafless nodes: one group
        leaf_caps = np.bincount(leaf, weights=room).astype(np.int64)
        if tier is Tier.CLUSTER:
            parent_of_node = np.zeros(slots.shape[0], dtype=np.int64)
        else:
            parent_of_node = getattr(cols, f"{_LEVEL[tier]}_id")[slots]
        options: list[tuple[int, int, int, IntArray]] = []
        for parent in np.unique(parent_of_node).tolist():
            if parent < 0:
                continue
            in_parent = parent_of_node == parent
            lids = np.unique(leaf[in_parent])
            caps = leaf_caps[lids]
            if int(caps.sum()) < n:
                continue
            order = np.lexsort((lids, -caps))
            need = int(np.searchsorted(np.cumsum(caps[order]), n)) + 1
            chosen = lids[order[:need]]
            total = int(caps[order[:need]].sum())
            options.append((need, int(key(np.array([total]))[0]), parent, chosen))
        options.sort(key=lambda o: (o[0], o[1], o[2]))
        for _need, _k, parent, chosen in options[: self.group_probe]:
            yield slots[np.isin(leaf, chosen) & (parent_of_node == parent)]

    # ------------------------------------------------------------------ pods

    def _place_pod(
        self, ctx: PodContext, pod: PodId, cand: _Candidates, *, two_level: bool = True
    ) -> Binding | None:
        snap = ctx.snap
        for slots, strat in self._candidate_sets(ctx, cand.slots):
            if not slots.shape[0]:
                continue
            if (
                two_level
                and strat.two_level
                and slots is cand.slots
                and slots.shape[0] >= _TWO_LEVEL_MIN
            ):
                slot = self._two_level(ctx, cand, strat)
                if slot is not None:
                    return self._bind(ctx, pod, slot, strat)
            feasible = slots[fits(snap, slots, ctx.req)]
            if feasible.shape[0]:
                sc = _score(strat, ctx, feasible)
                return self._bind(ctx, pod, int(feasible[int(np.argmax(sc))]), strat)
        return None

    def _candidate_sets(
        self, ctx: PodContext, slots: IntArray
    ) -> Sequence[tuple[IntArray, StrategyHooks]]:
        """The node sets a pod tries in turn, each with the (adapted) strategy scoring it:
        all of ``slots`` with this strategy unless it has ``candidate_sets``."""
        h = self.hooks
        if h.candidate_sets is None:
            return ((slots, h),)
        out: list[tuple[IntArray, StrategyHooks]] = []
        for part, strat in h.candidate_sets(ctx, slots):
            hit = self._adapted.get(id(strat))
            if hit is None or hit.strategy is not strat:
                if len(self._adapted) >= 64:  # a strategy making new ones each time
                    self._adapted.clear()
                hit = self._adapted[id(strat)] = adapt_strategy(strat)
            out.append((part, hit))
        return out

    def _partly_used_best_fit(self, ctx: PodContext, cand: _Candidates) -> int | None:
        """The fullest partly used node of the pools that still fits the pod, from the
        per-pool sorted index (fewest whole free GPUs first): O(log n + nodes looked at).
        Stops at the first wholly free node: opening a new node is the group level's call."""
        snap = ctx.snap
        cols = snap.cols
        req = ctx.req
        streams = [snap.best_fit(p, req.gpus) for p in cand.pools]
        merged = (
            streams[0]
            if len(streams) == 1
            else heapq.merge(*streams, key=lambda s: (int(cols.free_gpus[s]), s))
        )
        best: tuple[int, int] | None = None  # (free GPUs, slot)
        for looked, slot in enumerate(merged):
            free = int(cols.free_gpus[slot])
            if free >= int(cols.gpus[slot]) or looked >= _BEST_FIT_LOOKS:
                break
            if best is not None and free > best[0]:
                break
            if (
                cols.ready[slot]
                and cols.cpu_free[slot] >= req.cpu
                and cols.mem_free[slot] >= req.mem
                and cols.free_nics[slot] >= req.nics
            ):
                if ctx.on_node.get(slot):
                    return slot  # co-locate with this job's pods at equal fullness
                if best is None:
                    best = (free, slot)
        return None if best is None else best[1]

    def _two_level(self, ctx: PodContext, cand: _Candidates, strat: StrategyHooks) -> int | None:
        """Rank NodeNetGroups by aggregates, look for a node in the best few. Packing
        strategies first fill the fullest partly used node anywhere in the pools."""
        snap = ctx.snap
        if strat.fill_partly_used_first and ctx.req.gpus and cand.pools:
            slot = self._partly_used_best_fit(ctx, cand)
            if slot is not None:
                return slot
        ids, parts, sizes = cand.groups(snap)
        agg = snap.agg["leaf"]
        known = ids >= 0
        free_gpus = np.zeros(ids.shape[0], dtype=np.int64)
        free_milli = np.zeros(ids.shape[0], dtype=np.int64)
        free_nodes = np.zeros(ids.shape[0], dtype=np.int64)
        free_gpus[known] = agg[ids[known], snap.AGG_FREE_GPUS]
        free_milli[known] = agg[ids[known], snap.AGG_FREE_MILLI]
        free_nodes[known] = agg[ids[known], snap.AGG_FREE_NODES]
        req = ctx.req
        ok = (free_gpus >= req.gpus) & (free_milli >= req.total_milli) & known
        cand_groups = np.flatnonzero(ok)
        if not cand_groups.shape[0]:
            return None
        in_use = (free_nodes[cand_groups] < sizes[cand_groups]).astype(np.int64)
        keys = strat.group_key(free_milli[cand_groups], in_use)
        order = cand_groups[np.lexsort((ids[cand_groups], *keys))]
        for g in order[: self.group_probe].tolist():
            members = parts[g]
            feasible = members[fits(snap, members, req)]
            if feasible.shape[0]:
                sc = _score(strat, ctx, feasible)
                return int(feasible[int(np.argmax(sc))])
        return None

    def _bind(self, ctx: PodContext, pod: PodId, slot: int, strat: StrategyHooks) -> Binding:
        snap = ctx.snap
        cols = snap.cols
        req = ctx.req
        tmpl = self._templates[slot] if slot < len(self._templates) else None
        gpu_mask = 0
        milli = MILLI
        if req.gpus:
            free = int(cols.free_mask[slot])
            chosen = tmpl.best_gpu_set(free, req.gpus) if tmpl is not None else None
            gpu_mask = chosen if chosen is not None else _lowest_bits(free, req.gpus)
        elif req.milli:
            gpu_mask = 1 << strat.share_device(ctx, slot)
            milli = req.milli
        nic_mask = 0
        if req.nics:
            free_nics = int(cols.nic_mask[slot])
            got = tmpl.best_nics(gpu_mask, free_nics, req.nics) if tmpl is not None else None
            nic_mask = got if got is not None else _lowest_bits(free_nics, req.nics)
        snap.allocate(slot, gpu_mask, milli, nic_mask, req.cpu, req.mem)
        ctx.on_node[slot] = ctx.on_node.get(slot, 0) + 1
        return Binding(
            pod=pod,
            node=snap.name_of(slot),
            gpus=_bits(gpu_mask),
            gpu_milli=milli,
            nics=_bits(nic_mask),
            cpu_milli=req.cpu,
            memory_mib=req.mem,
        )

    # ------------------------------------------------------------------ pools & reasons

    def _sync(self, snap: Snapshot) -> None:
        """Refresh per-slot caches (templates, pool candidates) when nodes came or went."""
        state = snap.state
        if self._version == state.membership_version and self._state_id == id(state):
            return
        self._version = state.membership_version
        self._state_id = id(state)
        self._cand.clear()
        tmpl: list[NodeTemplate | None] = [None] * snap.num_slots
        cache: dict[str, NodeTemplate] = {}
        for spec in state.nodes():
            if spec.template is None:
                continue
            t = cache.get(spec.template)
            if t is None:
                t = cache[spec.template] = get_template(spec.template)
            tmpl[state.slot_of(spec.name)] = t
        self._templates = tmpl

    def _candidates(self, snap: Snapshot, role: Role, req: PodRequest) -> _Candidates | Reason:
        models = tuple(sorted(role.gpu_models))
        key = (models, req.needs_gpu)
        hit = self._cand.get(key)
        if hit is not None:
            return hit
        n = snap.num_slots
        alive = snap.cols.alive[:n]
        if models:
            pools = [snap.group_id("pool", m) for m in models]
            pools = [p for p in pools if p >= 0]
            if not pools:
                return Reason(
                    code=ReasonCode.NO_POOL,
                    message=f"no node has an allowed GPU model {list(models)}",
                )
            mask = np.isin(snap.cols.pool_id[:n], pools) & alive
        elif req.needs_gpu:
            mask = (snap.cols.gpus[:n] > 0) & alive
        else:
            mask = alive
        slots = np.flatnonzero(mask).astype(np.int64)
        if not slots.shape[0]:
            return Reason(code=ReasonCode.NO_POOL, message="no node can run this role")
        if req.needs_gpu:
            ids = pools if models else np.unique(snap.cols.pool_id[slots]).tolist()
            pool_ids = tuple(sorted(int(p) for p in ids if p >= 0))
        else:
            pool_ids = ()
        out = self._cand[key] = _Candidates(slots, pool_ids)
        return out

    def _why_not(self, snap: Snapshot, slots: IntArray, req: PodRequest, n: int) -> Reason:
        cols = snap.cols
        need = n * req.total_milli
        free = int(cols.free_milli[slots].sum())
        if req.needs_gpu and free < need:
            return Reason(
                code=ReasonCode.INSUFFICIENT_CAPACITY,
                message=f"needs {need / MILLI:g} GPUs; the allowed pools have "
                f"{free / MILLI:g} free",
            )
        return Reason(
            code=ReasonCode.NO_FIT,
            message=f"{n} pod(s) of {_describe(req)} do not fit on any node set",
        )


def _score(strat: StrategyHooks, ctx: PodContext, slots: IntArray) -> Any:
    """The strategy's score, with a role's ``spread`` wish as a hard-to-beat penalty for
    nodes that already hold pods of the job (replicas apart whatever the strategy)."""
    sc = strat.score(ctx, slots)
    if ctx.role.spread:
        sc = sc - 100.0 * ctx.job_pods_on(slots)
    return sc


def _near(snap: Snapshot, cand: _Candidates, anchor: int, tier: Tier) -> _Candidates:
    """Candidates sharing ``tier`` with node slot ``anchor`` (a required wish of a pod-level
    job keeps later pods next to the first)."""
    slots = cand.slots
    if tier is Tier.NODE:
        return _Candidates(slots[slots == anchor])
    if tier is Tier.CLUSTER:
        return cand
    ids = getattr(snap.cols, f"{_LEVEL[tier]}_id")
    want = ids[anchor]
    if want < 0:
        return _Candidates(slots[slots == anchor])
    return _Candidates(slots[ids[slots] == want])


def _describe(req: PodRequest) -> str:
    parts = [f"{req.gpus} GPU" if req.gpus else f"{req.milli} milli-GPU" if req.milli else "no GPU"]
    if req.cpu:
        parts.append(f"{req.cpu} mCPU")
    if req.mem:
        parts.append(f"{req.mem} MiB")
    if req.nics:
        parts.append(f"{req.nics} NIC")
    return ", ".join(parts)
