"""The Placer (RSCH): device-level GPU + NIC placement of a job's pods on a snapshot.

``Placer.place(job, snap)`` answers with a :class:`PlacementResult`: one :class:`Binding` per
placed pod, and a typed :class:`Reason` for every pod it could not place.

* **Gang** jobs are placed in one snapshot transaction: every pod or none (the snapshot is
  left exactly as it was on failure).
* **Pod-level** jobs place as many pods as fit, each on its own.
* **Node pools**: a role searches only nodes of its allowed GPU models.
* **Node filters** (``Placer(filters=[...])``, :class:`kant.contracts.NodeFilter`): wherever
  nodes are picked for a pod -- the flat pass, the NodeNetGroups of the two-level search, the
  best-fit index, the topology domains of a gang -- the nodes that fit are filtered before
  anything is scored; a filter that leaves a pod no node gives ``NO_FIT`` naming it.
* **Two-level search**: a single pod first looks inside the best NodeNetGroups (leaves,
  ranked from the snapshot's per-group aggregates) and only then across its whole pool —
  vectorised, never a Python loop over nodes.
* **Topology**: a multi-pod gang role walks the tiers node < (HBD) < leaf < spine <
  superspine < cluster, tightest first; at each tier it takes the domains that can hold all
  its pods (exact per-node fit counts, summed per domain), in the strategy's order, and above
  the leaf tier the fewest leaves of the domain. A *required* wish stops at its tier.
* **Devices**: whole GPUs come from the node template's best-linked free set (NVLink > PCIe
  switch > NUMA > cross-NUMA), NICs are the free ones nearest those GPUs (a NIC on each of
  their PCIe switches before a second on one), fractional shares go to the fullest device
  that still fits. Unhealthy devices are never candidates (the snapshot shows them as not
  free).

Where the Placer looks (candidate sets, tiers, domains, the best-fit index) is in
:mod:`kant.placement.search`; the strategy is read through
:class:`~kant.placement.strategies.base.StrategyHooks`, the filters through
:class:`~kant.placement.filters.NodeFilters`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs
import numpy as np

from kant.bits import bits as _bits
from kant.bits import lowest_bits as _lowest_bits
from kant.contracts import NodeFilter, Reach, Strategy
from kant.errors import InvalidConfigError, InvalidJobError, ValidationError
from kant.model import MILLI, Binding, Job, LinkKind, PodId, Reason, ReasonCode, Role, Tier, flag
from kant.placement.affinity import PodAffinity, PodPreference, PodsOnNodes
from kant.placement.context import IntArray, PodContext, PodRequest, fit_count, fits
from kant.placement.filters import MaxPerNode, NodeFilters
from kant.placement.search import (
    LEVEL,
    Candidates,
    domains,
    near,
    partly_used_best_fit,
    tiers_for,
    why_not,
)
from kant.placement.strategies import StrategyHooks, adapt_strategy, make_strategy
from kant.state import Snapshot
from kant.topology.templates import NodeTemplate

_TWO_LEVEL_MIN = 128
"""From this many candidates on, the two-level search looks into the best NodeNetGroups one
by one before ranking the whole pool (below it, ranking the pool at once is cheaper); the
answer is the same either way."""

ALL_ORDERS_ROLES = 3
"""A gang of this many roles that neither the declared order of its roles nor the most
constrained first places tries each of the other orders (on failure only: five more
placements at most, when the most constrained first is the declared order; none after a try
whose first role fails). Of two roles, the most constrained first is the other order unless
it is the declared one (random draws found no two-role gang its reverse places then); four
roles would be up to 23 more placements (docs/placement.md)."""


class Counts:
    """Per node slot, the pods of the job being placed (``job``) and of the role being
    placed (``role``, kept only for a role with ``max_per_node``), running or placed so far;
    saved before an attempt in a transaction and restored when it is rolled back."""

    __slots__ = ("job", "role")

    def __init__(self, job: dict[int, int], role: dict[int, int]) -> None:
        self.job = job
        self.role = role

    def save(self) -> tuple[dict[int, int], dict[int, int]]:
        """Copies of both counts. O(nodes the job is on)."""
        return dict(self.job), dict(self.role)

    def restore(self, saved: tuple[dict[int, int], dict[int, int]]) -> None:
        """Back to ``saved`` (in place: contexts hold these dicts)."""
        for mine, old in zip((self.job, self.role), saved, strict=True):
            if mine != old:
                mine.clear()
                mine.update(old)


@attrs.frozen(kw_only=True)
class PlacementResult:
    """Bindings made (already applied to the snapshot) and the reason for each pod left out."""

    bindings: tuple[Binding, ...] = ()
    unplaced: Mapping[PodId, Reason] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        """True when every pod asked for was placed."""
        return not self.unplaced

    @property
    def reason(self) -> Reason | None:
        """The reason of the first unplaced pod (a gang's pods all share one)."""
        return next(iter(self.unplaced.values()), None)


def _holds(snap: Snapshot, slots: IntArray, req: PodRequest, n: int) -> bool:
    """Can the nodes ``slots`` take ``n`` pods of ``req`` between them? O(len(slots))."""
    return int(np.minimum(fit_count(snap, slots, req), n).sum()) >= n


_CANDIDATES_KEPT = 512
"""At most this many candidate sets are kept (per models, selector and tolerations)."""
_NOT_AT_TIER = Reason(code=ReasonCode.TOPOLOGY, message="no domain of the tier holds them")
"""What a placement restricted to one tier says when it finds nothing (its caller goes on)."""


class Placer:
    """Places jobs on a snapshot with one strategy and optional node filters.

    ``strategy``: a registered name (built with ``kwargs``) or any object with ``name`` and
    ``score`` (:class:`kant.contracts.Strategy`); the hooks it lacks get
    :class:`~kant.placement.BaseStrategy`'s defaults (:func:`~kant.placement.adapt_strategy`,
    read once here). ``filters``: :class:`kant.contracts.NodeFilter` callables, combined with
    AND. ``group_probe``: how many of the best-ranked NodeNetGroups (or topology domains per
    tier) are tried before the search widens, an int >= 1 (else ``InvalidConfigError``).
    ``bulk``: whether a role's pods may be placed in bulk where the strategy allows it, True
    or False (else ``InvalidConfigError``). ``kwargs`` are options of a strategy given by
    name; with a strategy object they are an ``InvalidConfigError`` (the object is already
    built: they would be dropped).

    A Placer keeps per-cluster caches (templates, pool candidates) refreshed when nodes come
    or go; it is not thread-safe. Deterministic for a deterministic strategy and filters.
    """

    def __init__(
        self,
        strategy: str | Strategy = "ebinpack",
        *,
        group_probe: int = 4,
        filters: Iterable[NodeFilter] = (),
        bulk: bool = True,
        **kwargs: Any,
    ) -> None:
        if isinstance(group_probe, bool) or not isinstance(group_probe, int) or group_probe < 1:
            raise InvalidConfigError("group_probe", group_probe, "must be an int >= 1")
        if not isinstance(strategy, str) and kwargs:
            # (a built strategy keeps its own options: they would be dropped unread)
            raise InvalidConfigError(
                "strategy",
                strategy,
                f"options {sorted(kwargs)} go with a strategy name, not a strategy object",
            )
        self.strategy = make_strategy(strategy, **kwargs) if isinstance(strategy, str) else strategy
        self.group_probe = group_probe
        self.bulk = flag(bulk, "bulk", InvalidConfigError)
        self.filters = NodeFilters(filters)
        # a role with max_per_node: the user's filters, then the cap (other roles skip it)
        self._capped = NodeFilters((*self.filters.filters, MaxPerNode()))
        # pod affinity and anti-affinity: where the pods with labels or pod terms are, and
        # the filter sets of the roles it concerns (see _filters)
        self._pods_on = PodsOnNodes()
        self._affinity_on = False  # for the job being placed: whether any pod term is about
        self._soft_on = False  # ... and whether a running pod's terms may weigh in its score
        self._affinity = affinity = PodAffinity(self._pods_on)
        self._affine = NodeFilters((*self.filters.filters, affinity))
        self._capped_affine = NodeFilters((*self.filters.filters, MaxPerNode(), affinity))
        # a pod placed on its own with preferred pod terms: the sets above, then the
        # preference (it keeps the best of what the others keep); by (capped, affine)
        soft = PodPreference(self._pods_on)
        self._soft_sets = {
            (capped, affine): NodeFilters((*base.filters, soft))
            for (capped, affine), base in {
                (False, False): self.filters,
                (True, False): self._capped,
                (False, True): self._affine,
                (True, True): self._capped_affine,
            }.items()
        }
        self._adapted: dict[int, StrategyHooks] = {}  # by id: strategies of candidate_sets
        self._last_inside: tuple[IntArray, IntArray, IntArray] | None = None  # (_inside)
        self._cand: dict[tuple[Any, ...], Candidates] = {}
        self._prefs: dict[tuple[Any, ...], tuple[Candidates, ...]] = {}  # see _preferred
        # while a job is placed: whether preferred nodes are tried first, and whether a
        # placement landed on them (a gang that then fails is placed again without them)
        self._prefer = True
        self._preferred_won = False
        # while a job is placed: its pods placed earlier in the cycle (place_trusted)
        self._earlier: Sequence[Binding] = ()
        # a gang that failed: how many of its roles were placed before the one that failed
        self._failed_after = 0
        self._templates: list[NodeTemplate | None] = []
        # per slot, the index of its template in _template_list (-1: none); whether the
        # templates' GPU pairs are linked unevenly (then ties between nodes go to the one
        # whose best GPU set for the pod is linked best: _pick)
        self._template_ids: IntArray = np.zeros(0, dtype=np.int64)
        self._template_list: list[NodeTemplate] = []
        self._uneven_links = False
        self._version: tuple[int, int] = (-1, -1)
        self._state_token = -1

    @property
    def strategy(self) -> Strategy:
        """The strategy object (as given or built); :attr:`hooks` is what the Placer reads.
        Assigning a new one adapts it again."""
        return self._strategy

    @strategy.setter
    def strategy(self, strategy: Strategy) -> None:
        self.hooks = adapt_strategy(strategy)
        self._strategy = strategy

    def reach(self, job: Job, role: Role) -> Reach | None:
        """The nodes the strategy may ever place a pod of ``role`` of ``job`` on (its
        ``reach`` hook, :class:`kant.contracts.Reach`), or None: every node. O(1)."""
        reach = self.hooks.reach
        return None if reach is None else reach(job, role)

    def __repr__(self) -> str:
        if self.filters.active:
            return f"Placer({self.hooks.name!r}, filters={list(self.filters.names)})"
        return f"Placer({self.hooks.name!r})"

    # ------------------------------------------------------------------ public

    def place(
        self, job: Job, snap: Snapshot, *, pods: Sequence[PodId] | None = None
    ) -> PlacementResult:
        """Place ``pods`` of ``job`` (default: all pods not yet running) on ``snap``.

        The bindings are applied to the snapshot inside a transaction that is committed into
        the caller's open transaction, if any. Gang: all or nothing. Pod-level: each pod on
        its own. Expected failures are reasons in the result, never exceptions. Costs
        O(pods x candidate nodes) numpy work at worst, far less with the two-level search.

        Which of the job's pods already run, and where, is the one thing read from the
        cluster state's bindings (the snapshot holds no pods).

        The nodes a role prefers (:meth:`Role.preference`) are tried first wherever nodes
        are searched (:meth:`_place_in`); a gang that cannot be placed once a role of it
        took preferred nodes is placed again without preferences, so that a preference never
        keeps a job waiting (one role's preferred nodes may be those another role needs).

        Raises :class:`~kant.errors.ValidationError` (changing nothing) for a ``job`` that is
        not a Job, a ``snap`` that is not a Snapshot, or ``pods`` that are not distinct pods
        of the job (a role it lacks, an index past the role's replicas, another job's pod)
        not yet running (bound in the snapshot's cluster state)."""
        if not isinstance(job, Job):
            raise InvalidJobError("job", job, "must be a kant.Job")
        if not isinstance(snap, Snapshot):
            raise ValidationError("snap", snap, "must be a kant.state.Snapshot")
        if pods is None:
            return self.place_trusted(job, snap, None)
        if isinstance(pods, str) or not isinstance(pods, Iterable):
            raise ValidationError("pods", pods, "must be a sequence of the job's PodIds")
        todo = list(pods)
        for p in todo:
            if not (isinstance(p, PodId) and job.has_pod(p)):
                raise ValidationError("pods", p, f"must be pods of job {job.id!r}")
        if len(set(todo)) != len(todo):
            raise ValidationError("pods", todo, "must name each pod once")
        for p in todo:
            if snap.state.has_pod(p):
                where = snap.state.binding(p).node
                raise ValidationError("pods", p, f"already runs (on {where!r}): place it once")
        return self.place_trusted(job, snap, todo)

    def place_trusted(
        self,
        job: Job,
        snap: Snapshot,
        pods: Sequence[PodId] | None,
        *,
        earlier: Sequence[Binding] = (),
    ) -> PlacementResult:
        """:meth:`place` without checking its arguments, for a caller whose ``pods`` are
        distinct pods of ``job`` by construction (the cycle: a job's pods still to place).
        ``earlier``: bindings of the job's other pods placed on ``snap`` since its refresh
        (earlier in the same cycle), counted as its running pods are: for ``max_per_node``
        and for the domain a pod-level role's required topology wish keeps its pods in."""
        self._sync(snap)
        state = snap.state
        todo = [p for p in job.pods() if not state.has_pod(p)] if pods is None else list(pods)
        if not todo:
            return PlacementResult()
        self._preferred_won = False
        self._affinity_on = job.pod_terms or snap.placed_anti or snap.state.anti_terms_kept
        # (running pods whose terms may weigh in a lone pod's score: PodsOnNodes.drawn)
        self._soft_on = job.soft_terms or snap.placed_soft or snap.state.soft_terms_kept
        if self._affinity_on or self._soft_on:
            self._pods_on.use(snap)
        self._earlier = earlier
        out = self._attempt(job, snap, todo, None)
        if job.gang and not out.ok and self._failed_after:
            # the roles in the order declared failed at a role placed after others of the
            # job: they may have taken what it needed (a role of any GPU model best-fitting
            # the only pool of an A100-only role); place them again in other orders (most
            # constrained first, then, for three roles, the others), and keep the reason of
            # the first two tries whose failing role came earlier (the first such). A role that
            # fails placed first fails in every order (the others' pods only take room, and
            # a role never goes before the roles its pod affinity selects): the search stops
            best, after = out, self._failed_after
            for order, constrained in self._other_orders(job, snap, todo):
                out = self._attempt(job, snap, todo, order)
                if out.ok:
                    return out
                if self._failed_after < after and constrained:
                    # (the reason read is the declared order's or the most constrained
                    # first's, as with two tries, not one of the others')
                    best = out
                if not self._failed_after:
                    break
            out = best
        return out

    def _other_orders(
        self, job: Job, snap: Snapshot, todo: list[PodId]
    ) -> Iterator[tuple[list[str], bool]]:
        """The orders of the roles of ``todo`` a gang the declared order failed tries next,
        lazily: the roles most constrained first (:meth:`_constrained_order`), then, for a gang
        of :data:`ALL_ORDERS_ROLES` roles, every other order (in the order of
        ``itertools.permutations`` of the declared roles, each kept after the roles its pod
        affinity selects), each order once and never the declared one, each with whether it
        is the most constrained first. Nothing when a role has no candidate node (no order
        helps)."""
        names = list(dict.fromkeys(p.role for p in todo))
        if len(names) < 2:
            return
        keys = self._order_keys(job, snap, todo, names)
        if keys is None:
            return
        declared = _affinity_order(job, names) if job.pod_terms else names
        tried = [declared]
        first = self._constrained_order(job, names, keys)
        if first not in tried:
            tried.append(first)
            yield first, True
        if len(names) != ALL_ORDERS_ROLES:
            return
        for perm in itertools.permutations(names):
            order = _affinity_order(job, list(perm)) if job.pod_terms else list(perm)
            if order not in tried:
                tried.append(order)
                yield order, False

    def _attempt(
        self, job: Job, snap: Snapshot, todo: list[PodId], order: list[str] | None
    ) -> PlacementResult:
        """:meth:`_place` with the roles in ``order``; a gang that fails once a role of it
        took preferred nodes is placed again without preferences."""
        self._preferred_won = False
        out = self._place(job, snap, todo, order)
        if job.gang and not out.ok and self._preferred_won:
            self._prefer = False
            try:
                out = self._place(job, snap, todo, order)
            finally:
                self._prefer = True
        return out

    def _order_keys(
        self, job: Job, snap: Snapshot, todo: list[PodId], names: list[str]
    ) -> dict[str, tuple[int, int, int, int]] | None:
        """Per role of ``names``: (candidate nodes, minus the GPU milli a pod, minus the GPU
        milli asked in all by its pods of ``todo``, its place in ``names``), the key
        :meth:`_constrained_order` sorts by; None when a role has no candidate node.
        O(roles) cached candidate lookups."""
        keys: dict[str, tuple[int, int, int, int]] = {}
        for i, name in enumerate(names):
            role = job.role(name)
            req = PodRequest.of(role.resources)
            cand = self._candidates(snap, role, req)
            if isinstance(cand, Reason):
                return None
            asked = req.total_milli * sum(1 for p in todo if p.role == name)
            keys[name] = (int(cand.slots.shape[0]), -req.total_milli, -asked, i)
        return keys

    @staticmethod
    def _constrained_order(
        job: Job, names: list[str], keys: dict[str, tuple[int, int, int, int]]
    ) -> list[str]:
        """The roles ``names`` most constrained first (``keys``, :meth:`_order_keys`):
        fewest candidate nodes (allowed GPU models, node selector and tolerations), then
        the largest pod (GPU milli a pod), then the most GPUs asked in all, then as
        declared; pod affinity between roles still places a role after the one it selects.
        The largest pod before the most asked in all: a role of small pods placed first
        spreads them over the nodes (or best-fits them where they leave each node short),
        and a role of larger pods after it finds no node with room for one, where the small
        pods would still have fit the GPUs the large ones leave (one 3-GPU pod and three
        1-GPU pods on two nodes of 4 and 2 free GPUs)."""
        order = sorted(names, key=keys.__getitem__)
        return _affinity_order(job, order) if job.pod_terms else order

    def _place(
        self, job: Job, snap: Snapshot, todo: list[PodId], order: list[str] | None = None
    ) -> PlacementResult:
        """:meth:`place` of the pods ``todo``, the roles in ``order`` (None: as declared,
        a role after the roles its pod affinity selects). A gang that fails notes in
        ``_failed_after`` how many of its roles were placed before the one that failed."""
        self._failed_after = 0
        state = snap.state
        on_node: dict[int, int] = {}  # slot -> pods of this job there
        capped = {r.name for r in job.roles if r.max_per_node is not None}
        role_on: dict[str, dict[int, int]] = {name: {} for name in capped}
        # a role with a required wish: the nodes its own pods are on (its anchor; a gang's
        # pods placed later, when some run, join them as a pod-level job's do)
        kept: dict[str, set[int]] = {
            r.name: set() for r in job.roles if r.topology and r.topology.required
        }
        own = [(p, state.binding(p).node) for p in state.job_pods(job.id)]
        own.extend((b.pod, b.node) for b in self._earlier)
        for p, node in own:
            s = snap.slot_of(node)
            on_node[s] = on_node.get(s, 0) + 1
            if p.role in capped:
                mine = role_on[p.role]
                mine[s] = mine.get(s, 0) + 1
            if p.role in kept:
                kept[p.role].add(s)
        by_role: dict[str, list[PodId]] = {}
        for p in todo:
            by_role.setdefault(p.role, []).append(p)
        if order is not None:
            by_role = {r: by_role[r] for r in order}
        elif job.pod_terms and len(by_role) > 1:
            by_role = {r: by_role[r] for r in _affinity_order(job, list(by_role))}
        placed: list[Binding] = []
        unplaced: dict[PodId, Reason] = {}
        with snap.transaction() as tx:
            for k, (role_name, role_pods) in enumerate(by_role.items()):
                role = job.role(role_name)
                counts = Counts(on_node, role_on.get(role_name, {}))
                if job.gang:
                    out = self._place_role(job, role, role_pods, snap, counts, kept.get(role_name))
                    if isinstance(out, Reason):
                        self._failed_after = k
                        return PlacementResult(
                            unplaced=dict.fromkeys(todo, _role_reason(role, out, list(by_role)[:k]))
                        )
                    placed.extend(out)
                else:
                    anchor = kept.get(role_name)
                    domain = None
                    if anchor is not None and not anchor and len(role_pods) > 1:
                        domain = self._first_domain(job, role, role_pods, snap, counts)
                    for p in role_pods:
                        one = self._place_role(job, role, [p], snap, counts, anchor, domain)
                        if isinstance(one, Reason):
                            unplaced[p] = one
                        else:
                            placed.extend(one)
                            if anchor is not None:
                                anchor.update(snap.slot_of(b.node) for b in one)
            tx.commit()
        return PlacementResult(bindings=tuple(placed), unplaced=unplaced)

    def _filters(self, ctx: PodContext) -> NodeFilters:
        """The node filters for a pod of ``ctx``: the user's, plus :class:`MaxPerNode`
        when its role has ``max_per_node``, plus :class:`PodAffinity` when a pod term is
        about the role (:meth:`PodsOnNodes.applies`), plus :class:`PodPreference` for a pod
        placed on its own with preferred pod terms (``ctx.soft``)."""
        role = ctx.role
        affine = self._affinity_on and self._pods_on.applies(role)
        if ctx.soft:
            return self._soft_sets[(role.max_per_node is not None, affine)]
        if affine:
            return self._affine if role.max_per_node is None else self._capped_affine
        return self.filters if role.max_per_node is None else self._capped

    def _affine_filters(self, filters: NodeFilters) -> bool:
        """Whether ``filters`` hold the pod affinity filter."""
        return self._affinity in filters.filters

    # ------------------------------------------------------------------ roles

    def _place_role(
        self,
        job: Job,
        role: Role,
        pods: list[PodId],
        snap: Snapshot,
        counts: Counts,
        anchor: set[int] | None = None,
        domain: Candidates | None = None,
    ) -> list[Binding] | Reason:
        """Place ``pods`` of one role (a gang role's pods together, else one pod): in its
        candidate nodes, or, for a required wish, in ``domain`` (a pod-level job's: the one
        :meth:`_first_domain` chose for the role's pods placed together) or else next to
        the role's own pods already placed (``anchor``: the nodes they are on, for a gang
        too when some of its pods run; a wish is about the pods of one role, so the job's
        other roles never anchor it)."""
        req = PodRequest.of(role.resources)
        cand = self._candidates(snap, role, req)
        if isinstance(cand, Reason):
            return cand
        wish = role.topology
        if wish is not None and wish.required and (anchor or domain is not None):
            if wish.tier is Tier.HBD:
                if domain is not None:
                    tried = self._try_in(job, role, pods, snap, counts, domain, req)
                    if tried is not None:
                        return tried
                return self._next_to_hbds(job, role, pods, snap, counts, cand, req, anchor or set())
            if domain is not None:
                nearby = domain
            else:
                assert anchor  # (for mypy: the condition above)
                nearby = near(snap, cand, min(anchor), wish.tier)
            split = nearby.hbd_split(snap)  # (not an HBD wish: outside HBDs first)
            if split is None:
                got = self._place_in(job, role, pods, snap, counts, nearby, req)
            else:
                got = self._first_in(job, role, pods, snap, counts, split[1], nearby, req)
            if isinstance(got, Reason) and got.code is not ReasonCode.NO_POOL:
                return Reason(
                    code=ReasonCode.TOPOLOGY,
                    message=f"no room in the {wish.tier.name.lower()} of the role's other pods",
                )
            return got
        wants_hbd = wish is not None and wish.tier is Tier.HBD
        if wants_hbd and wish is not None and wish.required:
            return self._place_in_hbds(job, role, pods, snap, counts, cand, req)
        split = cand.hbd_split(snap)
        if split is None:
            return self._place_in(job, role, pods, snap, counts, cand, req)
        # HBD granularity: a job asking for an HBD tries the HBD nodes first; any other job
        # tries the nodes outside HBDs first, tier by tier: at each tier but the last, the
        # nodes outside HBDs, then all of them, before a wider tier (one leaf with HBD nodes
        # before plain nodes under two spines)
        in_hbd, outside = split
        n = len(pods)
        if not wants_hbd and n > 1:
            tiers = tiers_for(role, n, self.hooks.topology_default)[:-1]
            # (no tier holds them when the candidates together cannot: the calls below
            # then say why; the nodes outside HBDs are skipped when they cannot)
            if tiers and _holds(snap, cand.slots, req, n):
                sets = (outside, cand) if _holds(snap, outside.slots, req, n) else (cand,)
                for tier in tiers:
                    for some in sets:
                        tried = self._try_in(job, role, pods, snap, counts, some, req, only=tier)
                        if tried is not None:
                            return tried
        first = in_hbd if wants_hbd else outside
        return self._first_in(job, role, pods, snap, counts, first, cand, req)

    def _first_domain(
        self, job: Job, role: Role, pods: list[PodId], snap: Snapshot, counts: Counts
    ) -> Candidates | None:
        """Where the first ``pods`` of a pod-level role with a required wish go, before any
        of its pods is placed: the domain the tier search picks for all of them, as for a
        gang (:meth:`_place_in`: tightest tier first, the strategy's order), so that all fit
        when some domain can hold them; when none can, the domain of the wish's tier that
        holds the most of them. HBD nodes only for an HBD wish (one HBD, else the fewest
        whole HBDs). None when no domain has room for a pod (each pod then says why). The
        pods are then placed one by one inside it. O(candidates) numpy per tier.

        With several candidate sets (E-Spread: its zone, then the general nodes) a node
        the pods may take only from a set before the last holds one of them (the sets are
        asked again for each pod, and a zone node holding a pod of the job leaves the zone's
        set: one replica a zone node), a node of the last set its room, a node of no set
        none: the room E-Spread places by, so the domain found holds them all. (A strategy
        whose earlier sets take several pods a node is counted short: its pods may then go
        to a wider domain than they need, never to one that cannot hold them.)"""
        wish = role.topology
        assert wish is not None
        req = PodRequest.of(role.resources)
        cand = self._candidates(snap, role, req)
        if isinstance(cand, Reason):
            return None
        if wish.tier is Tier.HBD:
            split = cand.hbd_split(snap)
            if split is None and snap.cols.hbd_id[cand.slots[0]] < 0:
                return None  # no HBD node in the pools
            cand = split[0] if split is not None else cand
        n = len(pods)
        ctx = _context(snap, job, role, req, counts, n, self._pods_on if self._soft_on else None)
        search = cand.slots
        sets = None
        if self.hooks.candidate_sets is not None:
            sets = self._candidate_sets(ctx, cand.slots)
            if len(sets) == 1:
                search, sets = sets[0][0], None
        filters = self._filters(ctx)
        filters.blocked = None
        room, _ = self._room(ctx, cand, search, n, filters, whole=False)
        if sets is not None:  # (see the docstring: one pod a node of an earlier set)
            room = _room_over_sets(search, room, sets)
        key = self.hooks.domain_key
        # a wish other than HBD: at each tier a domain of nodes outside HBDs first, as a
        # gang role's tier search does (Placer._place_role)
        plain = snap.cols.hbd_id[search] < 0 if wish.tier is not Tier.HBD else None
        if plain is not None and plain.all():
            plain = None
        better = self._preferred_parts(snap, role, search, room, n)  # (preferred nodes first)
        for tier in tiers_for(role, n, self.hooks.topology_default):
            for some, some_room in better:
                for domain in domains(snap, some, some_room, tier, n, key, 1):
                    return Candidates(domain)
            if plain is not None:
                for domain in domains(snap, search[plain], room[plain], tier, n, key, 1):
                    return Candidates(domain)
            known = cand.layout(snap, tier) if search is cand.slots else None
            for domain in domains(snap, search, room, tier, n, key, 1, known):
                return Candidates(domain)
        most = _most_in_one(snap, search, room, wish.tier)
        known = cand.layout(snap, wish.tier) if most and search is cand.slots else None
        for domain in domains(snap, search, room, wish.tier, most, key, 1, known) if most else ():
            return Candidates(domain)
        return None

    def _preferred_parts(
        self, snap: Snapshot, role: Role, search: IntArray, room: IntArray, n: int
    ) -> list[tuple[IntArray, IntArray]]:
        """The parts of the nodes ``search`` (``room``: pods each can take) the role prefers,
        best level first, each with room for ``n`` pods in all: (slots, room) pairs, never
        all of ``search``. Empty while preferences are off for the job being placed."""
        if not self._prefer:
            return []
        return [
            (search[keep], room[keep])
            for keep in _level_parts(snap, role, search)
            if int(room[keep].sum()) >= n  # (else too small to hold them)
        ]

    def _room(
        self,
        ctx: PodContext,
        cand: Candidates,
        search: IntArray,
        n: int,
        filters: NodeFilters,
        *,
        whole: bool = True,
    ) -> tuple[IntArray, Reason | None]:
        """How many identical pods each node of ``search`` can take (exact per node, not
        capped at ``n``: the tier search orders domains by the room they have left; a role's
        ``max_per_node`` where it leaves fewer than ``n`` and the node filters taken into
        account),
        and, when they cannot hold all ``n``, why (the nodes short of resources, the cap or
        the filter that took the room away). ``whole``: stop at the first of those that
        leaves less than ``n`` (a gang fails there); else go on and give no reason."""
        snap, req = ctx.snap, ctx.req
        room = fit_count(snap, search, req)
        if whole and int(room.sum()) < n:
            return room, why_not(snap, cand.slots, req, n)
        cap = ctx.role.max_per_node
        if cap is not None:  # exact room per node, so domains add up right
            left = cap - ctx.role_pods_on(search)
            # (where the cap leaves n pods or more it takes nothing from the n: the room
            # stays as without it, so a cap no smaller than the pods changes no placement)
            np.minimum(room, np.where(left < n, np.maximum(left, 0), room), out=room)
            if whole and int(room.sum()) < n:
                return room, why_not(snap, cand.slots, req, n, MaxPerNode.name)
        if filters.active:
            filters.restrict_room(ctx, search, room, n)
            if ctx.role.pod_anti_affinity and self._affine_filters(filters):
                # (after the filters: a domain's one pod goes to a node they keep)
                enough = int(room.sum()) >= n
                self._pods_on.one_per_domain(snap, ctx.role, search, room)
                if enough and int(room.sum()) < n:
                    filters.blocked = PodAffinity.name
            if whole and int(room.sum()) < n:
                return room, why_not(snap, cand.slots, req, n, filters.blocked)
        return room, None

    def _first_in(
        self,
        job: Job,
        role: Role,
        pods: list[PodId],
        snap: Snapshot,
        counts: Counts,
        part: Candidates,
        whole: Candidates,
        req: PodRequest,
    ) -> list[Binding] | Reason:
        """:meth:`_place_in` on ``part`` of the candidates ``whole`` first, then on all of
        them (their reason when neither holds the pods)."""
        tried = self._try_in(job, role, pods, snap, counts, part, req)
        if tried is not None:
            return tried
        return self._place_in(job, role, pods, snap, counts, whole, req)

    def _try_in(
        self,
        job: Job,
        role: Role,
        pods: list[PodId],
        snap: Snapshot,
        counts: Counts,
        some: Candidates,
        req: PodRequest,
        only: Tier | None = None,
    ) -> list[Binding] | None:
        """:meth:`_place_in` on ``some`` of the candidates (at the tier ``only``), tried
        first: its bindings, or None with the snapshot and ``counts`` as they were (the
        caller tries wider)."""
        before = counts.save()
        with snap.transaction() as tx:
            got = self._place_in(job, role, pods, snap, counts, some, req, only)
            if not isinstance(got, Reason):
                tx.commit()
                return got
        counts.restore(before)
        return None

    def _next_to_hbds(
        self,
        job: Job,
        role: Role,
        pods: list[PodId],
        snap: Snapshot,
        counts: Counts,
        cand: Candidates,
        req: PodRequest,
        anchor: set[int],
    ) -> list[Binding] | Reason:
        """A later pod of a pod-level role with a required HBD wish: in the HBDs the role's
        pods are in (on the nodes ``anchor``) when one has room, else in another HBD, as a
        gang that outgrows one HBD takes several whole HBDs (never on a node outside an
        HBD)."""
        ids = snap.cols.hbd_id
        mine = np.unique(ids[np.fromiter(anchor, dtype=np.int64, count=len(anchor))])
        nearby = Candidates(cand.slots[np.isin(ids[cand.slots], mine[mine >= 0])])
        if len(nearby.slots):
            got = self._try_in(job, role, pods, snap, counts, nearby, req)
            if got is not None:
                return got
        return self._place_in_hbds(job, role, pods, snap, counts, cand, req)

    def _place_in_hbds(
        self,
        job: Job,
        role: Role,
        pods: list[PodId],
        snap: Snapshot,
        counts: Counts,
        cand: Candidates,
        req: PodRequest,
    ) -> list[Binding] | Reason:
        """A required HBD wish: HBD nodes only (one HBD, else the fewest whole HBDs), however
        many pods and whatever else the pools hold. When those cannot hold the pods but the
        pools could, ``TOPOLOGY`` (as for a required leaf); when the pools could not either,
        their reason."""
        split = cand.hbd_split(snap)
        hbd = split[0] if split is not None else cand
        if split is not None or snap.cols.hbd_id[cand.slots[0]] >= 0:
            got = self._place_in(job, role, pods, snap, counts, hbd, req)
            if not isinstance(got, Reason) or got.code is ReasonCode.TOPOLOGY or hbd is cand:
                return got  # placed, or no HBD holds them, or the pools are all HBD nodes
            where = "its hbd nodes cannot hold them"
        else:
            where = "no node of the allowed pools is in an hbd"
        n = len(pods)
        if not _holds(snap, cand.slots, req, n):
            return why_not(snap, cand.slots, req, n)
        return Reason(code=ReasonCode.TOPOLOGY, message=f"{n} pods fit in the pool but {where}")

    def _place_in(
        self,
        job: Job,
        role: Role,
        pods: list[PodId],
        snap: Snapshot,
        counts: Counts,
        cand: Candidates,
        req: PodRequest,
        only: Tier | None = None,
    ) -> list[Binding] | Reason:
        """Place identical ``pods`` among ``cand``: one by one when there is no tier search,
        else the tiers tightest first, each domain in a transaction of its own. With
        ``only``, that tier's domains alone (a reason when it is not searched or none holds
        the pods: the caller goes on).

        With a strategy's ``candidate_sets`` the pods' room per domain is known only when the
        first pod gets one set (the tier search then runs on it); with several (E-Spread's
        zone, then the general nodes) a role without a wish of its own skips the strategy's
        default tier, and a preferred tier that finds no domain falls back to the pods one
        by one, as without a tier search.

        The nodes the role prefers come first (:meth:`Role.preference`, best level first):
        at each tier its preferred nodes, then all of them, so a preference never costs the
        pods their tightest domain; without a tier search, each level that can hold all the
        pods, then all the candidates."""
        n = len(pods)
        ctx = _context(snap, job, role, req, counts, n, self._pods_on if self._soft_on else None)
        filters = self._filters(ctx)
        filters.blocked = None
        tiers = tiers_for(role, n, self.hooks.topology_default) if n > 1 or role.topology else []
        search = cand.slots  # the nodes the tier search sums room over
        sets = None
        if tiers and self.hooks.candidate_sets is not None:
            sets = self._candidate_sets(ctx, cand.slots)
            if len(sets) == 1:
                search, sets = sets[0][0], None
            elif role.topology is None:
                tiers = []
        if only is not None:
            if only not in tiers:
                return _NOT_AT_TIER
            tiers = [only]
        if not tiers and ctx.soft:
            # preferred pod terms: first the best-scored of all the nodes the pod may take now
            # (asked once over all of them: the search below asks its filters about parts),
            # then, if the strategy's own order finds none there (E-Spread's zone), all of
            # them, the filter still keeping the best of each part it is asked about
            ok = cand.slots[fits(snap, cand.slots, req)]
            best = ok[filters.mask(ctx, ok)] if ok.shape[0] else ok
            if 0 < best.shape[0] < cand.slots.shape[0]:
                # (one vectorised pass over them, the node preferences first: a search by
                # leaf of a set made for this pod alone would cost more than it saves)
                sub = Candidates(best, cand.pools, parent=cand)
                for part in (*(self._preferred(snap, role, sub) if self._prefer else ()), sub):
                    b = self._place_pod(ctx, pods[0], part, two_level=False)
                    if b is not None:
                        return [b]
                filters.blocked = None
        if not tiers:
            for better in self._preferred(snap, role, cand) if self._prefer else ():
                if n > 1 and not _holds(snap, better.slots, req, n):
                    continue  # (for one pod the try itself is as quick a test)
                before = counts.save()
                with snap.transaction() as tx:
                    got = self._untiered(ctx, pods, better, filters)
                    if not isinstance(got, Reason):
                        tx.commit()
                        self._preferred_won = True
                        return got
                counts.restore(before)
            return self._untiered(ctx, pods, cand, filters)
        room, short = self._room(ctx, cand, search, n, filters)
        if short is not None:
            return short
        if sets is not None:  # (several sets: a node of an earlier one takes one pod)
            room = _room_over_sets(search, room, sets)
        key = self.hooks.domain_key
        # at each tier, the preferred nodes first (best level first), then all of them: a
        # preference never costs a job its tightest domain
        parts = [(*p, True) for p in self._preferred_parts(snap, role, search, room, n)]
        parts.append((search, room, False))
        for tier in tiers:
            for some, some_room, preferred in parts:
                known = cand.layout(snap, tier) if some is cand.slots else None
                for domain in domains(snap, some, some_room, tier, n, key, self.group_probe, known):
                    before = counts.save()
                    with snap.transaction() as tx:
                        filled = self._fill(ctx, pods, domain)
                        if filled is not None:
                            tx.commit()
                            self._preferred_won |= preferred
                            return filled
                    counts.restore(before)  # the attempt was rolled back, so are its pods
        if only is not None:
            return _NOT_AT_TIER
        wish = role.topology
        if wish is None or not wish.required:  # the CLUSTER tier fits unless filters say no
            if self.hooks.candidate_sets is not None:  # (or the sets change pod by pod)
                before = counts.save()
                with snap.transaction() as tx:
                    out = self._one_by_one(ctx, pods, cand, filters)
                    if not isinstance(out, Reason):
                        tx.commit()
                        return out
                counts.restore(before)
                return out
            return why_not(snap, cand.slots, req, n, filters.blocked)
        return Reason(
            code=ReasonCode.TOPOLOGY,
            message=f"{n} pods fit in the pool but no single {wish.tier.name.lower()} holds them",
        )

    def _untiered(
        self, ctx: PodContext, pods: list[PodId], cand: Candidates, filters: NodeFilters
    ) -> list[Binding] | Reason:
        """Place ``pods`` among ``cand`` without a tier search: all at once when the strategy
        allows bulk placement (:meth:`_fill_bulk`), else one by one."""
        if self._bulk(ctx, self.hooks, filters) and not self.hooks.two_level:
            snap, req, n = ctx.snap, ctx.req, len(pods)
            room = fit_count(snap, cand.slots, req)
            live = np.flatnonzero(room > 0)
            taken = min(int(room.sum()), n)
            if taken < n:  # what the pod-by-pod path says once the nodes are full
                return why_not(snap, cand.slots, req, n - taken, None, taken=taken)
            return self._fill_bulk(ctx, pods, cand.slots[live], room[live])
        return self._one_by_one(ctx, pods, cand, filters)

    def _one_by_one(
        self, ctx: PodContext, pods: list[PodId], cand: Candidates, filters: NodeFilters
    ) -> list[Binding] | Reason:
        """Place ``pods`` one after the other among ``cand`` (:meth:`_place_pod`), or say
        why the first that found no node did not (the pods before it stay placed: the
        caller's transaction decides)."""
        out: list[Binding] = []
        for p in pods:
            b = self._place_pod(ctx, p, cand)
            if b is None:
                return why_not(ctx.snap, cand.slots, ctx.req, len(pods) - len(out), filters.blocked)
            out.append(b)
        return out

    def _fill(self, ctx: PodContext, pods: list[PodId], domain: IntArray) -> list[Binding] | None:
        """Place identical ``pods`` inside ``domain``, each on the best-scoring node.

        Scores (and filters) are node-local (see :class:`kant.contracts.Strategy`), so after
        each bind only the chosen node is re-scored (and re-filtered): O(domain) numpy once,
        then O(1) numpy calls per pod. A strategy with ``candidate_sets`` places pod by pod."""
        strat = self.hooks
        filters = self._filters(ctx)
        out: list[Binding] = []
        if strat.candidate_sets is not None:  # the sets may change pod by pod: one at a time
            cand = Candidates(domain)
            for p in pods:
                b = self._place_pod(ctx, p, cand, two_level=False)
                if b is None:
                    return None
                out.append(b)
            return out
        room = fit_count(ctx.snap, domain, ctx.req)
        affine = self._affinity_on and self._affine_filters(filters)
        if self._bulk(ctx, strat, filters):
            idx = np.flatnonzero(room > 0)
            if int(room[idx].sum()) < len(pods):
                return None
            return self._fill_bulk(ctx, pods, domain[idx], room[idx])
        if filters.active:
            idx = np.flatnonzero(room > 0)
            room[idx[~filters.mask(ctx, domain[idx])]] = 0
        scores = np.full(domain.shape[0], -np.inf)
        live = room > 0
        if live.any():
            scores[live] = _score(strat, ctx, domain[live])
        for p in pods:
            i = self._pick(ctx, domain, scores, strat)
            if scores[i] == -np.inf:
                return None
            slot = int(domain[i])
            out.append(self._bind(ctx, p, slot, strat))
            room[i] -= 1
            if affine:  # a pod placed may close other nodes' domains: ask every node again
                idx = np.flatnonzero(room > 0)
                shut = idx[~filters.mask(ctx, domain[idx])]
                room[shut] = 0
                scores[shut] = -np.inf
            if room[i] > 0 and filters.active:
                dropped = filters.rejected_by(ctx, slot)
                if dropped is not None:
                    filters.blocked = dropped
                    room[i] = 0
            scores[i] = _score(strat, ctx, domain[i : i + 1])[0] if room[i] > 0 else -np.inf
        return out

    def _bulk(self, ctx: PodContext, strat: StrategyHooks, filters: NodeFilters) -> bool:
        """May this role's identical pods be placed in bulk? Yes when the strategy fills
        the best node first (``fills_node_first``: a pure score that never drops on the node
        that takes a pod), with no candidate sets, no active node filter (they are asked
        again pod by pod), no ``spread`` wish (its penalty drops as pods land) and whole-GPU
        pods (a fractional pod's room on a node depends on which shares earlier pods took,
        so those go pod by pod), unless they are pods of two GPUs or more on templates that
        link GPUs unevenly (ties go to the best-linked free GPUs, which change as pods land:
        :meth:`_pick`). Then the pod-by-pod path takes the best-scoring node until it is
        full, then the next best, in the order of one score pass: :meth:`_fill_bulk` does
        exactly that."""
        return (
            self.bulk
            and strat.fills_node_first
            and strat.candidate_sets is None
            and not filters.active
            and not ctx.role.spread
            and not (ctx.req.milli and not ctx.req.gpus)
            and not (ctx.req.gpus >= 2 and self._uneven_links)
        )

    def _fill_bulk(
        self, ctx: PodContext, pods: list[PodId], slots: IntArray, room: IntArray
    ) -> list[Binding]:
        """Place ``pods`` on ``slots`` (each with ``room`` > 0 for them, enough in all), in
        the strategy's order: one score pass, nodes sorted best first (ties by position, as
        ``argmax`` breaks them), each filled to its room before the next. O(len(slots)) numpy
        once, then O(pods) Python for devices and one snapshot update per node used."""
        neg = -np.asarray(_score(self.hooks, ctx, slots), dtype=np.float64)
        order = np.argsort(neg, kind="stable")
        if neg[order[-1]] != neg[order[-1]]:  # (NaNs sort last: O(1))
            raise _nan_score(self.hooks)
        out: list[Binding] = []
        left = len(pods)
        for i in order.tolist():
            k = min(int(room[i]), left)
            out.extend(self._bind_many(ctx, pods[len(out) : len(out) + k], int(slots[i])))
            left -= k
            if not left:
                break
        return out

    # ------------------------------------------------------------------ pods

    def _place_pod(
        self, ctx: PodContext, pod: PodId, cand: Candidates, *, two_level: bool = True
    ) -> Binding | None:
        """Place one pod on the node :meth:`_choose` picks among ``cand``. For a role with
        ``spread``, a node already holding a pod of its job is taken only when no candidate
        holding none, whatever its group, can take the pod: a replica goes to a node of its
        own while any can take it (the group the strategy ranks first took a second replica
        on a node while another leaf had empty nodes). None when no node takes it."""
        got = self._choose(ctx, cand, two_level)
        if got is not None and ctx.role.spread and ctx.on_node.get(got[0]):
            fresh = cand.slots[ctx.job_pods_on(cand.slots) == 0]
            if fresh.shape[0]:  # (asked only when the first choice shares a node)
                got = self._choose(ctx, cand.subset(fresh), two_level) or got
        if got is None:
            return None
        return self._bind(ctx, pod, *got)

    def _choose(
        self, ctx: PodContext, cand: Candidates, two_level: bool
    ) -> tuple[int, StrategyHooks] | None:
        """The node (slot) one pod goes to among ``cand``, with the strategy that chose it:
        for each candidate set in turn, the two-level search (strategies that ask for it: on
        the role's candidates, or on the part of them a strategy's ``candidate_sets`` names,
        :meth:`Candidates.subset`), else one vectorised pass over the nodes that fit and pass
        the filters; the best score wins. None when no set has a node."""
        snap = ctx.snap
        filters = self._filters(ctx)
        for slots, strat in self._candidate_sets(ctx, cand.slots):
            if not slots.shape[0]:
                continue
            if two_level and strat.two_level:
                part = cand if slots is cand.slots else cand.subset(slots)
                slot = self._two_level(ctx, part, strat)
                if slot is not None:
                    return slot, strat
                continue  # the two-level search is exhaustive: no node of the set fits
            feasible = slots[fits(snap, slots, ctx.req)]
            if filters.active and feasible.shape[0]:
                feasible = filters.keep(ctx, feasible)
            if feasible.shape[0]:
                sc = _score(strat, ctx, feasible)
                return int(feasible[self._pick(ctx, feasible, sc, strat)]), strat
        return None

    def _candidate_sets(
        self, ctx: PodContext, slots: IntArray
    ) -> Sequence[tuple[IntArray, StrategyHooks]]:
        """The node sets a pod tries in turn, each with the (adapted) strategy scoring it:
        all of ``slots`` with this strategy unless it has ``candidate_sets``. Strategies the
        hook returns are adapted once and remembered (by identity). A set is kept to its
        nodes in ``slots`` (:meth:`_inside`): the hook cannot widen the pod's candidates."""
        h = self.hooks
        if h.candidate_sets is None:
            return ((slots, h),)
        out: list[tuple[IntArray, StrategyHooks]] = []
        for part, strat in h.candidate_sets(ctx, slots):
            part = self._inside(part, slots)
            hit = self._adapted.get(id(strat))
            if hit is None or hit.strategy is not strat:
                if len(self._adapted) >= 64:  # a strategy making new ones each time
                    self._adapted.clear()
                hit = self._adapted[id(strat)] = adapt_strategy(strat)
            out.append((part, hit))
        return out

    def _inside(self, part: IntArray, slots: IntArray) -> IntArray:
        """``part`` (a set a strategy's ``candidate_sets`` gave) without the nodes that are
        not in ``slots`` (the pod's candidates, in any order): other GPU models, nodes its
        selector or taints keep it off. ``part`` itself (the same array, so the two-level
        search keeps its split by leaf) when all of its nodes are candidates, in its order.
        O(len(part) + the highest slot); O(1) for a read-only array checked last against the
        same ``slots`` (a writeable one may have been changed since, so it is checked again)."""
        if part is slots:
            return part
        last = self._last_inside
        if last is not None and last[0] is part and last[1] is slots:
            return last[2]
        arr = np.asarray(part, dtype=np.int64).reshape(-1)
        if slots.shape[0] and arr.shape[0]:
            size = int(slots.max()) + 1
            member = np.zeros(size, dtype=bool)
            member[slots] = True
            ok = (arr >= 0) & (arr < size)
            keep = np.zeros(arr.shape[0], dtype=bool)
            keep[ok] = member[arr[ok]]
            got = arr if keep.all() else arr[keep]
        else:
            got = arr[:0]
        if got is arr and isinstance(part, np.ndarray) and part.dtype == np.int64:
            got = part
        if isinstance(part, np.ndarray) and not part.flags.writeable:
            self._last_inside = (part, slots, got)
        return got

    def _two_level(self, ctx: PodContext, cand: Candidates, strat: StrategyHooks) -> int | None:
        """The group-level answer for one pod: packing strategies first take the fullest
        partly used node anywhere in the pools; otherwise the NodeNetGroups (leaves) are
        ranked from the snapshot's aggregates by ``strat.group_key`` (ties by leaf id,
        leafless nodes last) and the pod goes to the best-scoring node of the first group,
        in that order, that has a node for it. Nodes the filters drop are skipped at both
        levels. None only when no candidate node fits.

        The answer does not depend on the pool's size: on large pools the best
        ``group_probe`` groups are looked into one by one (O(groups) numpy + their nodes),
        and only if none has a node is every remaining candidate ranked in one vectorised
        pass; small pools take that pass at once (it is cheaper than a loop over groups)."""
        snap = ctx.snap
        filters = self._filters(ctx)
        req = ctx.req
        if strat.fill_partly_used_first and req.gpus and cand.pools:
            allowed = (lambda s: filters.rejected_by(ctx, s) is None) if filters.active else None
            links = (lambda ss: self._best_linked(ctx, ss)) if self._uneven_links else None
            slot = partly_used_best_fit(ctx, cand, allowed, links)
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
        mixed = cand.mixed(snap)
        if mixed is not None:  # leaves with other GPU nodes: their candidates' own sums
            groups, pos = mixed
            slots_m = cand.slots[pos]
            gof = cand.group_of(snap)[pos]
            cols = snap.cols
            fg = cols.free_gpus[slots_m]
            g = cols.gpus[slots_m]
            k = ids.shape[0]
            for out, w in (
                (free_gpus, fg),
                (free_milli, cols.free_milli[slots_m]),
                (free_nodes, (fg == g) & (g > 0)),
            ):
                out[groups] = np.bincount(gof, weights=w, minlength=k)[groups]
        ok = (free_gpus >= req.gpus) & (free_milli >= req.total_milli) & known
        cand_groups = np.flatnonzero(ok)
        in_use = (free_nodes[cand_groups] < sizes[cand_groups]).astype(np.int64)
        keys = strat.group_key(free_milli[cand_groups], in_use)
        order = cand_groups[np.lexsort((ids[cand_groups], *keys))]
        probed = 0
        if cand.slots.shape[0] >= _TWO_LEVEL_MIN:  # a shortcut: the same answer, sooner
            for g in order[: self.group_probe].tolist():
                members = parts[g]
                feasible = members[fits(snap, members, req)]
                if filters.active and feasible.shape[0]:
                    feasible = filters.keep(ctx, feasible)
                if feasible.shape[0]:
                    sc = _score(strat, ctx, feasible)
                    return int(feasible[self._pick(ctx, feasible, sc, strat)])
            probed = min(self.group_probe, order.shape[0])
        # every group not yet looked into, in rank order, in one pass over the candidates
        # (groups the aggregates rule out hold no node that fits; leafless nodes rank last)
        last = order.shape[0]
        rank = np.full(ids.shape[0], last, dtype=np.int64)
        rank[order] = np.arange(last, dtype=np.int64)
        slot_rank = rank[cand.group_of(snap)]
        keep = slot_rank >= probed
        slots = cand.slots if probed == 0 else cand.slots[keep]
        ranks = slot_rank if probed == 0 else slot_rank[keep]
        ok_node = fits(snap, slots, req)
        feasible = slots[ok_node]
        ranks = ranks[ok_node]
        if filters.active and feasible.shape[0]:
            kept = filters.mask(ctx, feasible)
            feasible, ranks = feasible[kept], ranks[kept]
        if not feasible.shape[0]:
            return None
        best = ranks == ranks.min()
        feasible = feasible[best]
        sc = _score(strat, ctx, feasible)
        return int(feasible[self._pick(ctx, feasible, sc, strat)])

    def _pick(self, ctx: PodContext, slots: IntArray, sc: Any, strat: StrategyHooks) -> int:
        """The index in ``slots`` of the node a pod takes: the best score (``sc``), ties to
        the node whose best free GPUs for the pod are linked best (:meth:`_link_keys`), then
        to the first. O(ties) numpy beyond the ``argmax``, and only for a pod of two GPUs or
        more on a cluster whose templates link their GPUs unevenly."""
        i = int(np.argmax(sc))
        if sc[i] != sc[i]:  # NaN: argmax returns the first NaN when there is one (O(1))
            raise _nan_score(strat)
        if ctx.req.gpus < 2 or not self._uneven_links or sc[i] == -np.inf:
            return i
        ties = np.flatnonzero(sc == sc[i])
        if ties.shape[0] < 2:
            return i
        keys = self._link_keys(ctx, slots[ties])
        if keys is None:
            return i
        return int(ties[np.lexsort((ties, keys[1], keys[0]))[0]])

    def _best_linked(self, ctx: PodContext, slots: list[int]) -> int:
        """Of equally good nodes ``slots`` (in their order of preference), the one whose
        best free GPUs for the pod are linked best, the first at equal links."""
        keys = self._link_keys(ctx, np.asarray(slots, dtype=np.int64))
        if keys is None:
            return slots[0]
        return slots[int(np.lexsort((np.arange(len(slots)), keys[1], keys[0]))[0])]

    def _link_keys(self, ctx: PodContext, slots: IntArray) -> tuple[IntArray, IntArray] | None:
        """Per node of ``slots``, how well the best set of free GPUs its template offers the
        pod is linked (:meth:`NodeTemplate.best_gpu_set`): the worst link in the set, then
        the sum of its links (:meth:`NodeTemplate.link_key`, smaller first). None when links
        tell no node apart: a pod of fewer than two GPUs, templates whose GPU pairs are all
        linked alike, or a node without a template (its links are unknown). One memoised set
        per distinct (template, free GPUs) among the nodes."""
        k = ctx.req.gpus
        if k < 2 or not self._uneven_links:
            return None
        ids = self._template_ids[slots]
        if (ids < 0).any():
            return None
        free = ctx.snap.cols.free_mask[slots]
        combos, first, inverse = np.unique(
            np.stack([ids, free.astype(np.int64)]), axis=1, return_index=True, return_inverse=True
        )
        n = combos.shape[1]
        worst = np.full(n, len(LinkKind), dtype=np.int64)  # (no set: after every set)
        total = np.zeros(n, dtype=np.int64)
        for c in range(n):
            tmpl = self._template_list[int(combos[0, c])]
            chosen = tmpl.best_gpu_set(int(free[first[c]]), k)
            if chosen is not None:
                worst[c], total[c] = tmpl.link_key(chosen)
        at = np.asarray(inverse).reshape(-1)
        return worst[at], total[at]

    def _bind(self, ctx: PodContext, pod: PodId, slot: int, strat: StrategyHooks) -> Binding:
        """Bind ``pod`` on node ``slot`` in the snapshot: whole GPUs from the node template's
        best-linked free set, a share on the GPU ``strat.share_device`` names, the NICs
        nearest the GPUs (whole GPUs and NICs chosen together:
        :meth:`~kant.topology.NodeTemplate.best_devices`). Updates ``ctx.on_node`` (and
        ``ctx.role_on`` for a role with ``max_per_node``). O(GPUs + NICs)."""
        snap = ctx.snap
        v = snap.cols.views()
        req = ctx.req
        tmpl = self._templates[slot] if slot < len(self._templates) else None
        milli, share = MILLI, 0
        if not req.gpus and req.milli:
            share, milli = 1 << strat.share_device(ctx, slot), req.milli
        gpu_mask, nic_mask = _devices(tmpl, req, v.free_mask[slot], v.nic_mask[slot], share)
        snap.allocate(slot, gpu_mask, milli, nic_mask, req.cpu, req.mem)
        ctx.on_node[slot] = ctx.on_node.get(slot, 0) + 1
        if ctx.role.max_per_node is not None:
            ctx.role_on[slot] = ctx.role_on.get(slot, 0) + 1
        if ctx.record:
            snap.record_placed(ctx.job, ((pod, slot),))
        return Binding.trusted(
            pod, snap.name_of(slot), _bits(gpu_mask), milli, _bits(nic_mask), req.cpu, req.mem
        )

    def _bind_many(self, ctx: PodContext, pods: list[PodId], slot: int) -> list[Binding]:
        """Bind ``pods`` (identical) on node ``slot``: the devices :meth:`_bind` would pick
        pod after pod, chosen on local bitmasks, then one snapshot update for all of them
        (whole-GPU pods only: :meth:`_bulk`). O(pods x (GPUs + NICs))."""
        req = ctx.req
        snap = ctx.snap
        v = snap.cols.views()
        tmpl = self._templates[slot] if slot < len(self._templates) else None
        free = v.free_mask[slot]
        free_nics = v.nic_mask[slot]
        node = snap.name_of(slot)
        k = len(pods)
        run = (
            tmpl.best_gpu_sets(free, req.gpus, k)
            if tmpl is not None and req.gpus and not req.nics
            else None
        )
        if run is not None:  # the usual gang: the sets for all its pods here, looked up once
            sets, gpu_all = run
            trusted, cpu, mem = Binding.trusted, req.cpu, req.mem
            out = [
                trusted(p, node, _bits(m), MILLI, (), cpu, mem)
                for p, m in zip(pods, sets, strict=True)
            ]
            nic_all = 0
        else:
            out, gpu_all, nic_all = self._bind_each(ctx, pods, node, tmpl, free, free_nics)
        snap.allocate(slot, gpu_all, MILLI, nic_all, req.cpu * k, req.mem * k, k)
        ctx.on_node[slot] = ctx.on_node.get(slot, 0) + k
        if ctx.role.max_per_node is not None:
            ctx.role_on[slot] = ctx.role_on.get(slot, 0) + k
        if ctx.record:
            snap.record_placed(ctx.job, ((p, slot) for p in pods))
        return out

    def _bind_each(
        self,
        ctx: PodContext,
        pods: list[PodId],
        node: str,
        tmpl: NodeTemplate | None,
        free: int,
        free_nics: int,
    ) -> tuple[list[Binding], int, int]:
        """:meth:`_bind_many`'s devices pod after pod, as :meth:`_bind` would pick them, from
        the node's free GPUs and NICs: the bindings, and the GPUs and NICs they take."""
        req = ctx.req
        out: list[Binding] = []
        gpu_all = nic_all = 0
        for p in pods:
            gpu_mask, nic_mask = _devices(tmpl, req, free, free_nics)
            free &= ~gpu_mask
            free_nics &= ~nic_mask
            gpu_all |= gpu_mask
            nic_all |= nic_mask
            out.append(
                Binding.trusted(p, node, _bits(gpu_mask), MILLI, _bits(nic_mask), req.cpu, req.mem)
            )
        return out, gpu_all, nic_all

    # ------------------------------------------------------------------ pools

    def _sync(self, snap: Snapshot) -> None:
        """Refresh per-slot caches (templates, pool candidates) when nodes came or went, in
        the snapshot (the candidates are its live slots) or in the cluster state (labels and
        taints are read there). Node templates are static node facts the snapshot does not
        copy: they are read from the cluster state's node specs of the nodes the snapshot
        shows, O(nodes), only when the membership changed. The version read is recorded
        only once the refresh succeeded, so a failed one is tried again."""
        state = snap.state
        version = (snap.membership_version, state.membership_version)
        if self._version == version and self._state_token == state.token:
            return
        tmpl: list[NodeTemplate | None] = [None] * snap.num_slots
        cache: dict[str, NodeTemplate] = {}
        gpus, nics = snap.cols.gpus, snap.cols.nics
        for s, name in enumerate(snap.names):
            # (on a snapshot not refreshed since nodes came or went: a node the state no
            # longer has, has in another slot, or has again with other devices)
            if name is None or snap.slot_if_here(name) != s:
                continue
            spec = state.node(name)
            if spec.template is None or (spec.gpus, spec.rdma_nics) != (gpus[s], nics[s]):
                continue
            t = cache.get(spec.template)
            if t is None:
                t = cache[spec.template] = state.template(spec.template)
            tmpl[s] = t
        self._cand.clear()
        self._prefs.clear()
        self._templates = tmpl
        index = {id(t): i for i, t in enumerate(cache.values())}
        self._template_list = list(cache.values())
        self._template_ids = np.array(
            [-1 if t is None else index[id(t)] for t in tmpl], dtype=np.int64
        )
        kinds = set()
        for t in self._template_list:
            ranks = t.link_rank
            kinds.update(ranks[~np.eye(ranks.shape[0], dtype=bool)].tolist())
        self._uneven_links = len(kinds) > 1
        self._version = version
        self._state_token = state.token

    def _candidates(self, snap: Snapshot, role: Role, req: PodRequest) -> Candidates | Reason:
        """The role's candidate nodes: live nodes of its allowed GPU models (any GPU node
        when it names none; any node for a CPU-only pod) that its node selector and
        tolerations allow (:meth:`Role.can_run_on`), or ``NO_POOL``. Cached per (models,
        needs GPU, selector, tolerations) until nodes come, go or are relabelled: O(1) on a
        hit, O(nodes) numpy otherwise. Candidates a selector or taints restrict are a part
        of their pools' (``parent``), so the per-pool best-fit index still serves them."""
        base = self._pool_candidates(snap, role, req)
        allowed = snap.state.allowed_slots(role)
        if allowed is None or isinstance(base, Reason):
            return base
        key = (base, role.node_selector, role.tolerations)
        hit = self._cand.get(key)
        if hit is not None:
            return hit
        keep = allowed[base.slots]
        if keep.all():
            out = base
        elif not keep.any():
            return Reason(
                code=ReasonCode.NO_POOL,
                message="no node can run this role (with its node selector and tolerations)",
            )
        else:
            out = Candidates(base.slots[keep], base.pools, parent=base)
        if len(self._cand) >= _CANDIDATES_KEPT:  # (bounded: selectors naming hosts are many)
            self._cand.clear()
        self._cand[key] = out
        return out

    def _preferred(self, snap: Snapshot, role: Role, cand: Candidates) -> tuple[Candidates, ...]:
        """The parts of ``cand`` the role prefers, best first, each holding the one before
        (:meth:`ClusterState.preference_levels`), without the empty ones and without
        ``cand`` itself; each a part of ``cand`` (the best-fit index serves it). Cached with
        the candidates: O(1) on a hit, O(candidates) numpy per level otherwise."""
        if not snap.state.preference_levels(role):
            return ()
        key = (cand, role.preferred, role.tolerations)
        hit = self._prefs.get(key)
        if hit is not None:
            return hit
        if len(self._prefs) >= _CANDIDATES_KEPT:
            self._prefs.clear()
        got = self._prefs[key] = tuple(
            Candidates(cand.slots[keep], cand.pools, parent=cand)
            for keep in _level_parts(snap, role, cand.slots)
        )
        return got

    def _pool_candidates(self, snap: Snapshot, role: Role, req: PodRequest) -> Candidates | Reason:
        """:meth:`_candidates` of the role's models alone (no selector, no taints)."""
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
        out = self._cand[key] = Candidates(slots, pool_ids)
        return out


def _level_parts(snap: Snapshot, role: Role, slots: IntArray) -> list[np.ndarray]:
    """Which of ``slots`` each preference level of ``role`` holds
    (:meth:`ClusterState.preference_levels`, best first): the levels that tell the slots
    apart, each holding more of them than the one before, never none and never all."""
    out = []
    seen = 0
    for mask in snap.state.preference_levels(role):  # (growing sets)
        keep = mask[slots]
        k = int(keep.sum())
        if k == slots.shape[0]:
            break  # this level and the wider ones hold every slot
        if k > seen:
            out.append(keep)
            seen = k
    return out


def _room_over_sets(
    search: IntArray, room: IntArray, sets: Sequence[tuple[IntArray, Any]]
) -> IntArray:
    """``room`` (pods each node of ``search`` can take) as a strategy's several candidate
    ``sets`` allow it: a node of the last set its room, a node only in an earlier one (E-Spread's
    zone: one replica a node) at most one pod, any other none. O(len(search))."""
    last = np.isin(search, sets[-1][0])
    earlier = np.isin(search, np.concatenate([part for part, _s in sets[:-1]]))
    out: IntArray = np.where(last, room, np.where(earlier, np.minimum(room, 1), 0))
    return out


def _context(
    snap: Snapshot,
    job: Job,
    role: Role,
    req: PodRequest,
    counts: Counts,
    n: int,
    pods_on: PodsOnNodes | None,
) -> PodContext:
    """The placement question of ``n`` pods of ``role`` of ``job`` on ``snap``, with the
    job's (and the role's) pods per node so far; its pods are noted on the snapshot when the
    job takes part in pod affinity (:attr:`Job.labelled`). Preferred pod terms (the role's,
    and running pods' that select it, asked of ``pods_on`` when given) are read for a pod
    placed on its own (``soft``), never for a gang's pods: a gang's domains come first, and
    one pod steered to a preferred node could take the node another role needs."""
    soft = False
    if n == 1 and (role.pod_preferences or pods_on is not None):  # (else decided at once)
        soft = (not job.gang or job.num_pods == 1) and (
            bool(role.pod_preferences) or (pods_on is not None and pods_on.drawn(role))
        )
    return PodContext(snap=snap, job=job, role=role, req=req, on_node=counts.job,
                      role_on=counts.role, record=job.labelled, soft=soft)  # fmt: skip


def _role_reason(role: Role, why: Reason, before: list[str]) -> Reason:
    """``why`` a gang's ``role`` was refused, for the whole gang: naming the role and, when
    roles of the job were placed before it in this try (``before``), saying so, since what
    it found free is what they left."""
    if not before:
        return Reason(code=why.code, message=f"role {role.name!r}: {why.message}")
    them = ", ".join(repr(r) for r in before)
    after = f"placed after role{'s' if len(before) > 1 else ''} {them}"
    return Reason(code=why.code, message=f"role {role.name!r} ({after}): {why.message}")


def _affinity_order(job: Job, names: list[str]) -> list[str]:
    """The roles ``names`` of ``job`` in an order where a role whose pod affinity selects the
    pods of another comes after it (so a gang's workers that must run near its launcher are
    placed once it is), else as given; roles that select each other stay as given."""
    roles = {n: job.role(n) for n in names}
    needs = {
        n: {m for m in names if m != n and any(t.selects(roles[m].labels) for t in r.pod_affinity)}
        for n, r in roles.items()
    }
    out: list[str] = []
    while len(out) < len(names):
        left = [n for n in names if n not in out]
        ready = [n for n in left if needs[n].issubset(out)]
        out.append(ready[0] if ready else left[0])
    return out


def _devices(
    tmpl: NodeTemplate | None, req: PodRequest, free: int, free_nics: int, share: int = 0
) -> tuple[int, int]:
    """The devices of one pod on a node with free GPUs ``free`` and free NICs ``free_nics``
    (masks): (GPU mask, NIC mask). Whole GPUs and NICs are chosen together
    (:meth:`~kant.topology.NodeTemplate.best_devices`); else whole GPUs from the template's
    best-linked set (or ``share``, the GPU a fractional pod shares) and the NICs nearest
    them; the lowest free bits on a node without a template."""
    if req.gpus and req.nics and tmpl is not None:
        both = tmpl.best_devices(free, req.gpus, free_nics, req.nics)
        if both is not None:
            return both
    gpu_mask = share
    if req.gpus:
        chosen = tmpl.best_gpu_set(free, req.gpus) if tmpl is not None else None
        gpu_mask = chosen if chosen is not None else _lowest_bits(free, req.gpus)
    nic_mask = 0
    if req.nics:
        got = tmpl.best_nics(gpu_mask, free_nics, req.nics) if tmpl is not None else None
        nic_mask = got if got is not None else _lowest_bits(free_nics, req.nics)
    return gpu_mask, nic_mask


def _most_in_one(snap: Snapshot, slots: IntArray, room: IntArray, tier: Tier) -> int:
    """The most pods one ``tier`` domain of ``slots`` can take (``room``: pods per slot):
    the roomiest node, or the largest per-domain sum (nodes outside any such domain are in
    none). O(len(slots))."""
    if not slots.shape[0]:
        return 0
    if tier is Tier.NODE:
        return int(room.max())
    if tier is Tier.CLUSTER:
        return int(room.sum())
    ids = getattr(snap.cols, f"{LEVEL[tier]}_id")[slots]
    valid = ids >= 0
    if not valid.any():
        return 0
    return int(np.bincount(ids[valid], weights=room[valid]).max())


def _score(strat: StrategyHooks, ctx: PodContext, slots: IntArray) -> Any:
    """The strategy's score, with a role's ``spread`` wish as a hard-to-beat penalty for
    nodes that already hold pods of the job (replicas apart whatever the strategy)."""
    sc = strat.score(ctx, slots)
    # (an array of real numbers of the right shape: O(1))
    if getattr(sc, "shape", None) != slots.shape or sc.dtype.kind not in _REAL:
        sc = _scores_of(strat, sc, slots)
    if ctx.role.spread:
        sc = sc - 100.0 * ctx.job_pods_on(slots)
    return sc


def _scores_of(strat: StrategyHooks, sc: Any, slots: IntArray) -> Any:
    """A strategy's answer that is not an array of one score per slot: as a float array
    when it is one score per slot (a list), else ValidationError naming the strategy."""
    kind = getattr(getattr(sc, "dtype", None), "kind", None)
    if kind is not None and kind not in _REAL:  # (strings, complex: argmax would take them)
        raise ValidationError(
            "strategy", strat.name, f"score returned {sc.dtype} values: scores must be real"
        )
    try:
        arr = np.asarray(sc, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.shape != slots.shape:
        got = type(sc).__name__ if arr is None or sc is None else f"shape {arr.shape}"
        raise ValidationError(
            "strategy",
            strat.name,
            f"score returned {got} for {slots.shape[0]} slots: it must return one score per slot",
        )
    return arr


_REAL: Final = "fiub"
"""The NumPy dtype kinds of a score: floats, ints, unsigned ints, bools."""


def _nan_score(strat: StrategyHooks) -> ValidationError:
    """The error for a strategy that scored a node NaN (found where it would win)."""
    return ValidationError(
        "strategy", strat.name, "score returned NaN: scores must be numbers (-inf for the worst)"
    )
