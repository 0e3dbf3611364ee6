"""Dynamic resource admission (paper 3.2.1): the cheap readiness check before placement.

It reads only the snapshot's per-pool and per-group aggregates and the per-pool sorted index
of nodes by free GPUs, so it costs O(roles x (pools + log n)) plus, for a required topology
tier, one numpy max over that tier's groups. Every test is a *necessary* condition for a
placement to exist: a job it rejects cannot be placed now, a job it passes may still fail
placement (fragmentation, CPU, NICs, exact topology), which the Placer then reports.

Checks, per role (a gang checks all its pods jointly, a pod-level job one pod per role):

- enough free whole GPUs (or GPU milli for shared pods) in the role's allowed pools
  (``INSUFFICIENT_CAPACITY``), and for roles bound to one pool, jointly per pool: a
  cross-pool job is ready for all its roles or for none;
- enough nodes that each have room for one pod (``NO_FIT``);
- with a required topology tier, one group of that tier with enough free GPUs
  (``TOPOLOGY``); a required HBD may take several whole HBDs (as the Placer does), so there
  the HBDs' free GPUs together.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kant.contracts import Reach
from kant.model import MAX_GPUS_PER_NODE, MILLI, Job, Reason, ReasonCode, Role, Tier
from kant.state import Snapshot
from kant.state.cluster import BoolArray
from kant.state.columns import NO_POD_LIMIT, IntArray

LivePools = tuple[dict[str, int], dict[int, str], tuple[tuple[str, int], ...]]
"""What :meth:`PoolFacts.live_pools` returns."""

_TIER_LEVEL = {
    Tier.HBD: "hbd",
    Tier.LEAF: "leaf",
    Tier.SPINE: "spine",
    Tier.SUPERSPINE: "superspine",
}


class PoolFacts:
    """Facts about node pools that the aggregates do not hold: the most GPUs on one node,
    the GPUs of a pool or of one topology group, all nodes counted. They read only which
    nodes are there and how many GPUs each has, so they hold while no node comes or goes
    (the snapshot's and the state's ``membership_version``: a snapshot not refreshed since
    nodes changed shows the older nodes): :meth:`of` keeps one set per snapshot across
    cycles, each fact computed the first time it is asked (in ``Snapshot.kept``: a table
    of snapshots, weak or not, would keep every snapshot and its cluster alive, the facts
    naming their snapshot)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.version = (snap.membership_version, snap.state.membership_version)
        self._max_gpus: dict[int, int] = {}
        self._tier_total: dict[tuple[Any, ...], int] = {}
        self._tier_slots: dict[tuple[Any, ...], IntArray] = {}
        self._lone: dict[tuple[Any, ...], str | None] = {}  # lone_pod's answers
        self._pod_room: dict[tuple[Any, ...], tuple[IntArray, IntArray]] = {}  # pod_room's
        self._restricted: set[tuple[Any, ...]] = set()  # the keys _rules gave so far
        self._reach: dict[Reach, BoolArray] = {}  # per strategy reach, its nodes
        # the live pools: GPU model -> pool id, pool id -> GPU model, sorted (see live_pools)
        self._live: LivePools | None = None

    @classmethod
    def of(cls, snap: Snapshot) -> PoolFacts:
        """``snap``'s facts: the ones an earlier cycle derived while its nodes are the same,
        else a new, empty set. O(1)."""
        kept: PoolFacts | None = snap.kept.get("pool_facts")
        version = (snap.membership_version, snap.state.membership_version)
        if kept is None or kept.version != version:
            kept = snap.kept["pool_facts"] = cls(snap)
        return kept

    def live_pools(self) -> LivePools:
        """The pools of the snapshot's state that have a node with GPUs: GPU model -> pool
        id, pool id -> GPU model, and the first as a sorted tuple. The same objects while
        the facts hold: read them, never change them. O(pools) once."""
        if self._live is None:
            cluster = self.snap.state
            models: dict[str, int] = {}
            for name in cluster.group_names("pool"):
                gid = cluster.group_id("pool", name)
                if self.live(gid):
                    models[name] = gid
            names = {g: n for n, g in models.items()}
            self._live = (models, names, tuple(sorted(models.items())))
        return self._live

    def max_gpus(self, pool: int) -> int:
        """Most GPUs on one node of pool ``pool`` (0: the pool has no node); computed once,
        then O(1)."""
        v = self._max_gpus.get(pool)
        if v is None:
            members = self.snap.members("pool", pool)
            v = int(self.snap.cols.gpus[members].max()) if members.size else 0
            self._max_gpus[pool] = v
        return v

    def live(self, pool: int) -> bool:
        """Does pool ``pool`` have a node with GPUs? Same cost as :meth:`max_gpus`."""
        return self.max_gpus(pool) > 0

    def pool_total(self, pool: int) -> int:
        """GPUs on all nodes of pool ``pool``, allocated, unhealthy or not (computed once)."""
        key = -1 - pool
        v = self._max_gpus.get(key)
        if v is None:
            v = int(self.snap.cols.gpus[self.snap.members("pool", pool)].sum())
            self._max_gpus[key] = v
        return v

    def tier_max_total(
        self, level: str, pools: Sequence[int], role: Role | None = None, reach: Reach | None = None
    ) -> int:
        """Most GPUs of ``pools`` in one group at ``level``, all nodes counted (only those
        :meth:`pool_slots` keeps, given a role or reach that restricts them; cached)."""
        key = (level, tuple(pools), self._rules(role, reach))
        v = self._tier_total.get(key)
        if v is None:
            slots = self.pool_slots(pools, role, reach)
            ids = getattr(self.snap.cols, f"{level}_id")[slots]
            ok = ids >= 0
            if ok.any():
                v = int(np.bincount(ids[ok], weights=self.snap.cols.gpus[slots][ok]).max())
            else:
                v = 0
            self._tier_total[key] = v
        return v

    def pool_slots(
        self, pools: Sequence[int], role: Role | None = None, reach: Reach | None = None
    ) -> IntArray:
        """The slots of the nodes of ``pools`` (those ``role``'s node selector and
        tolerations allow, given a role they restrict: :meth:`ClusterState.allowed_slots`;
        and of those the ``reach`` of a strategy allows, given one; cached)."""
        allowed = self._allowed(role, reach)
        key = ("pool", tuple(pools), self._rules(role, reach))
        v = self._tier_slots.get(key)
        if v is None:
            parts = [self.snap.members("pool", p) for p in pools]
            v = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            if allowed is not None:
                v = v[allowed[v]]
            self._tier_slots[key] = v
        return v

    def tier_slots(
        self, level: str, pools: Sequence[int], role: Role | None = None, reach: Reach | None = None
    ) -> IntArray:
        """The slots of :meth:`pool_slots` that are in some group at ``level`` (cached):
        where a wish that may take several groups of that level (HBD) may go."""
        key = (level, tuple(pools), self._rules(role, reach))
        v = self._tier_slots.get(key)
        if v is None:
            slots = self.pool_slots(pools, role, reach)
            v = self._tier_slots[key] = slots[getattr(self.snap.cols, f"{level}_id")[slots] >= 0]
        return v

    def tier_all_pods(
        self,
        level: str,
        pools: Sequence[int],
        gpus: int,
        role: Role | None = None,
        reach: Reach | None = None,
    ) -> int:
        """How many pods of ``gpus`` whole GPUs the nodes of :meth:`tier_slots` could ever
        hold (each node ``its GPUs // gpus``; cached)."""
        key = ("pods " + level, (*pools, -gpus), self._rules(role, reach))
        v = self._tier_total.get(key)
        if v is None:
            cap = self.snap.cols.gpus[self.tier_slots(level, pools, role, reach)]
            v = self._tier_total[key] = int((cap // gpus).sum())
        return v

    def tier_all_total(
        self, level: str, pools: Sequence[int], role: Role | None = None, reach: Reach | None = None
    ) -> int:
        """GPUs of :meth:`tier_slots` (cached): what a wish that may take several groups of
        that level (HBD) can ever use."""
        key = ("all " + level, tuple(pools), self._rules(role, reach))
        v = self._tier_total.get(key)
        if v is None:
            slots = self.tier_slots(level, pools, role, reach)
            v = self._tier_total[key] = int(self.snap.cols.gpus[slots].sum())
        return v

    def _rules(self, role: Role | None, reach: Reach | None = None) -> tuple[Any, ...] | None:
        """What restricts the nodes of ``role``, for a cache key: (selector, tolerations,
        reach), or None when nothing does (neither the role's selector and tolerations nor
        a strategy's ``reach``). Past :data:`_RESTRICTED_KEPT` such keys the caches that
        take them start afresh (selectors naming hosts are many)."""
        if role is None or self.snap.state.allowed_slots(role) is None:
            if reach is None:
                return None
            rules: tuple[Any, ...] = (None, (), reach)
        else:
            rules = (role.node_selector, role.tolerations, reach)
        if rules not in self._restricted:
            if len(self._restricted) >= _RESTRICTED_KEPT:
                self._restricted.clear()
                self._reach.clear()
                for d in (self._tier_total, self._tier_slots, self._lone, self._pod_room):
                    for k in [k for k in d if k[-1] is not None]:
                        del d[k]
            self._restricted.add(rules)
        return rules

    def allowing(self, role: Role | None, reach: Reach | None) -> str:
        """What restricts the nodes of ``role`` (:meth:`_rules`, given something does), as
        words that end a phrase such as "the nodes of its pools ...": "its node selector and
        tolerations allow", "its placement strategy (espread: ...) allows", or both."""
        by_rules = role is not None and self.snap.state.allowed_slots(role) is not None
        if reach is None:
            return "its node selector and tolerations allow"
        if by_rules:
            return f"its node selector, tolerations and placement strategy ({reach}) allow"
        return f"its placement strategy ({reach}) allows"

    def _allowed(self, role: Role | None, reach: Reach | None) -> BoolArray | None:
        """Per slot, whether a pod of ``role`` may use the node there: by the role's node
        selector and tolerations (:meth:`ClusterState.allowed_slots`) and by ``reach``; None
        when neither restricts. A reach's nodes are kept while the facts hold."""
        allowed = None if role is None else self.snap.state.allowed_slots(role)
        if reach is None:
            return allowed
        mask = self._reach.get(reach)
        if mask is None:
            n = self.snap.num_slots
            mask = self._reach[reach] = np.asarray(reach.allows(self.snap), dtype=bool)[:n]
        return mask if allowed is None else mask & allowed[: mask.shape[0]]

    def tier_max_free(self, level: str) -> int:
        """Largest free-GPU count of one group at ``level`` (recomputed each call: it changes
        as the cycle places jobs)."""
        agg = self.snap.agg[level]
        return int(agg[:, Snapshot.AGG_FREE_GPUS].max()) if agg.shape[0] else 0

    def lone_pod(
        self, role: Role, pools: Sequence[int] = (), reach: Reach | None = None
    ) -> str | None:
        """Why no node could ever hold one pod of ``role`` (None: some node could): among
        the nodes of ``pools`` (every node for a role asking no GPU; only HBD nodes for such
        a role with a required HBD wish; of those, the ones ``reach`` allows, given one),
        none has the GPUs, CPU, memory and NICs it asks for all at once, whatever runs, and
        room for a pod (a ``max_pods`` above 0). Cached per role's resources and wish."""
        res = role.resources
        wish = role.topology
        hbd = not pools and wish is not None and wish.required and wish.tier is Tier.HBD
        rules = self._rules(role, reach)
        key = (res, tuple(pools), hbd, rules)
        if key in self._lone:
            return self._lone[key]
        cols = self.snap.cols
        allowed = None if rules is None else self._allowed(role, reach)
        slots = self._role_slots(role, pools, reach, hbd)
        fits = (
            (cols.gpus[slots] >= max(res.gpus, 1 if res.gpu_milli else 0))
            & (cols.cpu_cap[slots] >= res.cpu_milli)
            & (cols.mem_cap[slots] >= res.memory_mib)
            & (cols.nics[slots] >= res.rdma_nics)
        )
        why = None
        if fits.any() and not (cols.pod_cap[slots[fits]] > 0).any():
            where = "hbd node" if hbd else "node of its pools" if pools else "node"
            why = f"a pod of role {role.name!r} fits no {where} that admits a pod (max_pods 0)"
        elif not fits.any():
            where = "hbd node" if hbd else "node of its pools" if pools else "node"
            if allowed is not None:
                where += " " + self.allowing(role, reach)
            asks = f"{res.cpu_milli} mCPU, {res.memory_mib} MiB, {res.rdma_nics} NICs"
            if res.total_milli:
                asks = f"{res.total_milli / MILLI:g} GPUs, {asks}"
            why = f"a pod of role {role.name!r} asks {asks}; no {where} has that much"
        self._lone[key] = why
        return why

    def _role_slots(
        self, role: Role, pools: Sequence[int], reach: Reach | None, hbd: bool
    ) -> IntArray:
        """The nodes of ``pools`` (every live node without pools: a role asking no GPU) that
        ``role``'s selector, tolerations and ``reach`` allow; only HBD nodes given ``hbd``."""
        cols = self.snap.cols
        if pools:
            slots = self.pool_slots(pools, role, reach)
        else:
            slots = np.flatnonzero(cols.alive[: self.snap.num_slots])
            allowed = self._allowed(role, reach)
            if allowed is not None:
                slots = slots[allowed[slots]]
        if hbd:
            slots = slots[cols.hbd_id[slots] >= 0]
        return slots

    def pod_room(
        self, role: Role, pools: Sequence[int] = (), reach: Reach | None = None
    ) -> tuple[IntArray, IntArray]:
        """(slots, pods): the nodes of ``pools`` (every live node without pools) that ``role``
        may use (HBD nodes only for a required HBD wish) and how many of its
        pods each could ever hold, empty and healthy: its pod capacity (``max_pods``) capped
        by what its GPUs, CPU, memory and NICs hold of such pods (while no node has a pod
        limit, :attr:`Snapshot.pods_capped` False, every capacity is about
        :data:`~kant.state.columns.NO_POD_LIMIT` and the devices decide). Cached per
        role's resources, wish and nodes (read them, never change them)."""
        res = role.resources
        wish = role.topology
        hbd = wish is not None and wish.required and wish.tier is Tier.HBD
        key = ("pod room", res, tuple(pools), hbd, self._rules(role, reach))
        got = self._pod_room.get(key)
        if got is None:
            cols = self.snap.cols
            slots = self._role_slots(role, pools, reach, hbd)
            pods = cols.pod_cap[slots].copy()
            if res.gpus:
                np.minimum(pods, cols.gpus[slots] // res.gpus, out=pods)
            elif res.gpu_milli:
                np.minimum(pods, cols.gpus[slots] * (MILLI // res.gpu_milli), out=pods)
            if res.cpu_milli:
                np.minimum(pods, cols.cpu_cap[slots] // res.cpu_milli, out=pods)
            if res.memory_mib:
                np.minimum(pods, cols.mem_cap[slots] // res.memory_mib, out=pods)
            if res.rdma_nics:
                np.minimum(pods, cols.nics[slots] // res.rdma_nics, out=pods)
            got = self._pod_room[key] = (slots, pods)
        return got

    def restricted_room(
        self, role: Role, pools: Sequence[int], reach: Reach | None = None
    ) -> tuple[int, int] | None:
        """(most GPUs on one node, GPUs on all nodes) of the nodes of ``pools`` that
        ``role``'s node selector and tolerations and ``reach`` allow, or None when nothing
        restricts the role. O(those nodes) numpy on the cached :meth:`pool_slots` (its
        caller, never-fits, is kept per job shape)."""
        if self._rules(role, reach) is None:
            return None
        gpus = self.snap.cols.gpus[self.pool_slots(pools, role, reach)]
        return (int(gpus.max()) if gpus.size else 0), int(gpus.sum())

    def tier_free_pods(self, level: str, pools: Sequence[int], gpus: int) -> int:
        """How many pods of ``gpus`` whole GPUs the ready nodes of :meth:`tier_slots` have
        room for now (recomputed each call: it changes as the cycle places jobs).
        O(those nodes), in numpy."""
        slots = self.tier_slots(level, pools)
        cols = self.snap.cols
        return int((cols.free_gpus[slots][cols.ready[slots]] // gpus).sum())


def _too_little(role: Role, n: int, free: int) -> Reason | None:
    """Why ``n`` pods of ``role`` cannot fit ``free`` whole GPUs (a role of whole GPUs) or
    GPU milli (a role of shares) in its pools, if they cannot: readiness's first check."""
    res = role.resources
    need = (res.gpus or res.gpu_milli) * n
    if free >= need:
        return None
    if res.gpus:
        message = f"role {role.name!r} needs {need} GPUs, {free} free in its pools"
    else:
        message = f"role {role.name!r} needs {need / MILLI:g} GPUs, {free / MILLI:g} free"
    return Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message=message)


def _role_ready(facts: PoolFacts, role: Role, n: int, pools: Sequence[int]) -> Reason | None:
    snap = facts.snap
    res = role.resources
    if res.total_milli == 0 or not pools:
        return None
    agg = snap.agg["pool"]
    if res.gpus:
        free = int(sum(int(agg[p, Snapshot.AGG_FREE_GPUS]) for p in pools))
        short = _too_little(role, n, free)
        if short is not None:
            return short
        # nodes with room for one pod: a node of G GPUs holds at most G // g pods
        per_node = max(1, max(facts.max_gpus(p) for p in pools) // res.gpus)
        want_nodes = -(-n // per_node)
        found = 0
        for p in pools:
            fitting = itertools.islice(snap.best_fit(p, res.gpus), want_nodes - found)
            found += sum(1 for _ in fitting)
            if found >= want_nodes:
                break
        if found < want_nodes:
            return Reason(
                code=ReasonCode.NO_FIT,
                message=(
                    f"role {role.name!r} needs {want_nodes} nodes with {res.gpus} free GPUs, "
                    f"found {found}"
                ),
            )
    else:
        free = int(sum(int(agg[p, Snapshot.AGG_FREE_MILLI]) for p in pools))
        short = _too_little(role, n, free)
        if short is not None:
            return short
    topo = role.topology
    if topo is not None and topo.required and res.gpus and (n > 1 or topo.tier is Tier.HBD):
        need = res.gpus * n  # (a required HBD means HBD nodes, even for one pod)
        if topo.tier is Tier.NODE:
            if need > MAX_GPUS_PER_NODE or not any(
                next(iter(snap.best_fit(p, need)), None) is not None for p in pools
            ):
                return Reason(
                    code=ReasonCode.TOPOLOGY,
                    message=f"role {role.name!r} needs {need} GPUs free on one node",
                )
        elif topo.tier is Tier.HBD:  # the fewest whole HBDs: HBD nodes, one HBD or several
            room = facts.tier_free_pods("hbd", pools, res.gpus)
            if room < n:
                return Reason(
                    code=ReasonCode.TOPOLOGY,
                    message=(
                        f"role {role.name!r} needs {n} pods of {res.gpus} GPUs on hbd nodes; "
                        f"they have room for {room}"
                    ),
                )
        elif topo.tier in _TIER_LEVEL:
            level = _TIER_LEVEL[topo.tier]
            best = facts.tier_max_free(level)
            if best < need:
                return Reason(
                    code=ReasonCode.TOPOLOGY,
                    message=(
                        f"role {role.name!r} needs {need} GPUs in one {level}; "
                        f"the best {level} has {best} free"
                    ),
                )
    return None


def readiness(
    facts: PoolFacts,
    job: Job,
    counts: Mapping[str, int],
    role_pools: Mapping[str, Sequence[int]],
) -> Reason | None:
    """None if ``job`` may be placeable now, else why not.

    ``counts``: pods to place per role name; ``role_pools``: each role's allowed pool ids
    (already restricted by quota). Gang jobs need every role ready, jointly; pod-level jobs
    need one pod of some role to be ready."""
    if job.gang:
        for role in job.roles:
            n = counts.get(role.name, 0)
            if n:
                r = _role_ready(facts, role, n, role_pools.get(role.name, ()))
                if r is not None:
                    return r
        return _joint_ready(facts, job, counts, role_pools)
    first: Reason | None = None
    for role in job.roles:
        if counts.get(role.name, 0):
            r = _role_ready(facts, role, 1, role_pools.get(role.name, ()))
            if r is None:
                return None
            first = first or r
    return first


def refusal_from_aggregates(
    job: Job,
    counts: Mapping[str, int],
    role_pools: Mapping[str, Sequence[int]],
    pool_agg: IntArray,
) -> Reason | None:
    """The reason :func:`readiness` gives ``job`` on a snapshot whose per-pool aggregates
    are ``pool_agg`` (``snap.agg["pool"]``, or a copy of it), when its first check (free
    amounts per pool) decides it; None when it does not (readiness then reads nodes; the
    job may be ready). O(roles x pools), no node read."""
    first: Reason | None = None
    for role in job.roles:
        n = counts.get(role.name, 0)
        if not n:
            continue
        res = role.resources
        pools = role_pools.get(role.name, ())
        if res.total_milli == 0 or not pools:
            if job.gang:
                continue  # this role is ready; the next one may refuse
            return None
        col = Snapshot.AGG_FREE_GPUS if res.gpus else Snapshot.AGG_FREE_MILLI
        free = int(sum(int(pool_agg[p, col]) for p in pools))
        short = _too_little(role, n if job.gang else 1, free)
        if short is None:
            return None  # passes the first check: the rest reads nodes
        if job.gang:
            return short
        first = first or short
    return first


def _joint_ready(
    facts: PoolFacts,
    job: Job,
    counts: Mapping[str, int],
    role_pools: Mapping[str, Sequence[int]],
) -> Reason | None:
    """Roles pinned to a single pool must fit that pool together."""
    if len(job.roles) < 2:
        return None
    need: dict[int, int] = {}
    for role in job.roles:
        pools = role_pools.get(role.name, ())
        n = counts.get(role.name, 0)
        if len(pools) == 1 and n and role.resources.gpus:
            need[pools[0]] = need.get(pools[0], 0) + role.resources.gpus * n
    agg = facts.snap.agg["pool"]
    for p, k in sorted(need.items()):
        free = int(agg[p, Snapshot.AGG_FREE_GPUS])
        if free < k:
            return Reason(
                code=ReasonCode.INSUFFICIENT_CAPACITY,
                message=f"roles sharing one pool need {k} GPUs there together, {free} free",
            )
    return None


def never_fits(
    facts: PoolFacts,
    job: Job,
    counts: Mapping[str, int],
    role_pools: Mapping[str, Sequence[int]],
    reach: Callable[[Job, Role], Reach | None] | None = None,
) -> Reason | None:
    """``UNSATISFIABLE`` if the pods ``counts`` of ``job`` could not be placed even on empty,
    healthy pools ``role_pools`` (a gang all its pods, a pod-level job one pod of each role;
    of the nodes the role's node selector and tolerations allow and, given ``reach`` (the
    placer's :meth:`~kant.placement.Placer.reach`), the strategy may ever use):
    one pod needs more GPUs than any node has, or a role more than its pools hold, or a
    gang role more pods than its nodes could hold at once (each as many as its devices, CPU,
    memory and pod capacity allow), or a
    required topology tier more than any one domain of that tier holds (a required HBD: more
    than all the HBD nodes of its pools, since it may take several HBDs). Else None. Static
    capacity only (cached per cycle): O(roles x pools)."""
    capped = facts.snap.state.pod_capped_nodes > 0  # (else no pod slot ever runs out)
    for role in job.roles:
        n = counts.get(role.name, 0)
        pools = role_pools.get(role.name, ())
        res = role.resources
        if not n:
            continue
        within = None if reach is None else reach(job, role)
        if not res.total_milli:  # a pod asking no GPU: any node may hold it
            lone = facts.lone_pod(role, reach=within)
            if lone is None and job.gang:
                lone = _too_few_slots(facts, role, n, (), within, capped)
            if lone is not None:
                return Reason(code=ReasonCode.UNSATISFIABLE, message=f"can never fit: {lone}")
            continue
        if not pools:
            continue
        if not job.gang:
            n = 1
        room = facts.restricted_room(role, pools, within)
        if room is None:  # (every node of its pools)
            biggest = max(facts.max_gpus(p) for p in pools)
            total = sum(facts.pool_total(p) for p in pools)
            its, hbds, of = "its pools", "the hbd nodes of its pools", ""
        else:
            biggest, total = room
            allowing = facts.allowing(role, within)
            its = f"the nodes of its pools {allowing}"
            hbds = f"the hbd nodes of its pools {allowing}"
            of = f" of those {allowing}"
        why = None
        if res.gpus > biggest:
            why = (
                f"a pod of role {role.name!r} needs {res.gpus} GPUs; the largest node{of} has "
                f"{biggest}"
            )
        elif (lone := facts.lone_pod(role, pools, within)) is not None:
            why = lone
        elif res.total_milli * n > total * MILLI:
            why = (
                f"role {role.name!r} needs {res.total_milli * n / MILLI:g} GPUs; {its} hold {total}"
            )
        elif (wish := role.topology) is not None and wish.required and wish.tier is Tier.HBD:
            # HBD nodes only, one HBD or several
            most = facts.tier_all_total("hbd", pools, role, within)
            if res.total_milli * n > most * MILLI:
                why = (
                    f"role {role.name!r} needs {res.total_milli * n / MILLI:g} GPUs in hbds; "
                    f"{hbds} hold {most}"
                )
            elif res.gpus and (
                (pods := facts.tier_all_pods("hbd", pools, res.gpus, role, within)) < n
            ):
                why = (
                    f"role {role.name!r} needs {n} pods of {res.gpus} GPUs on hbd nodes; "
                    f"{hbds} hold {pods}"
                )
        elif role.topology is not None and role.topology.required and n > 1 and res.gpus:
            need = res.gpus * n
            if role.topology.tier is Tier.NODE and need > biggest:
                why = (
                    f"role {role.name!r} needs {need} GPUs on one node; the largest{of} has "
                    f"{biggest}"
                )
            elif role.topology.tier in _TIER_LEVEL:
                level = _TIER_LEVEL[role.topology.tier]
                most = facts.tier_max_total(level, pools, role, within)
                if need > most:
                    why = (
                        f"role {role.name!r} needs {need} GPUs in one {level}; "
                        f"the largest {level}{of} holds {most}"
                    )
        if why is None and job.gang:
            why = _too_few_slots(facts, role, n, pools, within, capped)
        if why is not None:
            return Reason(code=ReasonCode.UNSATISFIABLE, message=f"can never fit: {why}")
    if job.gang and len(job.roles) > 1:
        why = _too_few_slots_together(facts, job, counts, role_pools, reach, capped)
        if why is not None:
            return Reason(code=ReasonCode.UNSATISFIABLE, message=f"can never fit: {why}")
    return None


def _too_few_slots(
    facts: PoolFacts,
    role: Role,
    n: int,
    pools: Sequence[int],
    within: Reach | None,
    capped: bool,
) -> str | None:
    """Why the nodes ``role`` may use could never hold ``n`` of its pods at once, each node
    as many as its devices, CPU and memory allow and, given ``capped`` (a node has a
    ``max_pods``), its pod capacity (:meth:`PoolFacts.pod_room`): all of them together, on
    one node for a required node tier, in one group for a required leaf, spine or
    superspine (several HBDs for a required HBD, as the Placer takes them). Two empty
    8-GPU nodes hold two 5-GPU pods, never three, though they have the 15 GPUs. None when
    they could. O(those nodes) numpy, cached per role's shape (:meth:`PoolFacts.pod_room`)."""
    limit = "max_pods" if capped else "GPUs, CPU, memory and NICs"
    slots, room = facts.pod_room(role, pools, within)
    room = np.minimum(room, n)  # (a node without a limit: about 2**40 each, never summed)
    total = int(room.sum())
    wish = role.topology
    tier = wish.tier if wish is not None and wish.required and n > 1 else None
    where = "hbd nodes" if wish is not None and wish.required and wish.tier is Tier.HBD else "nodes"
    if total < n:
        return (
            f"role {role.name!r} needs {n} pods at once; the {where} it may use admit "
            f"{total} of them (their {limit})"
        )
    if tier is Tier.NODE:
        best = int(room.max()) if room.size else 0
        if best < n:
            return (
                f"role {role.name!r} needs {n} pods on one node; the node it may use admitting "
                f"most admits {best} of them (its {limit})"
            )
    elif tier is not None and tier is not Tier.HBD and tier in _TIER_LEVEL:
        level = _TIER_LEVEL[tier]
        ids = getattr(facts.snap.cols, f"{level}_id")[slots]
        ok = ids >= 0
        best = int(np.bincount(ids[ok], weights=room[ok]).max()) if ok.any() else 0
        if best < n:
            return (
                f"role {role.name!r} needs {n} pods in one {level}; the {level} it may use "
                f"admitting most admits {best} of them (their {limit})"
            )
    return None


def _too_few_slots_together(
    facts: PoolFacts,
    job: Job,
    counts: Mapping[str, int],
    role_pools: Mapping[str, Sequence[int]],
    reach: Callable[[Job, Role], Reach | None] | None,
    capped: bool,
) -> str | None:
    """Why a gang's roles could never hold all their pods at once on the nodes they share:
    each node holds at most what the roles may put there each (:meth:`PoolFacts.pod_room`
    per role), at most its ``max_pods`` in all and, for each of its GPUs, CPU, memory and
    NICs that every role there asks, at most its capacity over the least a pod of them asks
    (a 5-GPU worker and a 5-GPU ps never share an 8-GPU node), so fewer such pods over all
    nodes than pods means it never fits. A necessary condition only (it never refuses what
    could run). O(roles x nodes) numpy."""
    snap = facts.snap
    cols = snap.cols
    size = snap.num_slots
    acc = np.zeros(size, dtype=np.int64)
    caps = (cols.gpus[:size] * MILLI, cols.cpu_cap[:size], cols.mem_cap[:size], cols.nics[:size])
    least = np.full((len(caps), size), NO_POD_LIMIT, dtype=np.int64)  # per node, least asked
    need = 0
    for role in job.roles:
        n = counts.get(role.name, 0)
        if not n:
            continue
        pools = role_pools.get(role.name, ())
        res = role.resources
        if res.total_milli and not pools:
            return None  # (a role of no pool: placement says why)
        within = None if reach is None else reach(job, role)
        slots, room = facts.pod_room(role, pools if res.total_milli else (), within)
        np.add.at(acc, slots, np.minimum(room, n))
        asks = (res.total_milli, res.cpu_milli, res.memory_mib, res.rdma_nics)
        for i, a in enumerate(asks):
            least[i, slots] = np.minimum(least[i, slots], a)
        need += n
    most = np.minimum(acc, cols.pod_cap[:size])
    for cap, low in zip(caps, least, strict=True):
        bounded = (low > 0) & (low < NO_POD_LIMIT)  # (a role asking none of it: no bound)
        most[bounded] = np.minimum(most[bounded], cap[bounded] // low[bounded])
    have = int(most.sum())
    if have < need:
        limit = "GPUs, CPU, memory and NICs"
        return (
            f"its roles need {need} pods at once; the nodes they may use admit {have} of "
            f"them (their {'max_pods, ' if capped else ''}{limit})"
        )
    return None


_RESTRICTED_KEPT = 1024
"""At most this many (selector, tolerations, reach) keep their facts in one
:class:`PoolFacts`."""

__all__ = ["PoolFacts", "never_fits", "readiness"]
