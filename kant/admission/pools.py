"""The node pools a cycle sees (paper 3.4.1): which GPU models exist, which pools each role of
a job may use, and the readiness check over them.

:class:`Pools` is built once per cycle from the snapshot; every method is cheap (O(roles x
pools) plus the aggregate reads of :func:`kant.admission.readiness.readiness`). What depends
only on which nodes are there (the live pools, the largest node of a pool) is kept across
cycles until a node comes or goes (:meth:`kant.admission.readiness.PoolFacts.of`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import attrs

from kant.admission.holds import slot_or_none
from kant.admission.quota import QuotaDecision
from kant.admission.readiness import PoolFacts, never_fits, readiness, refusal_from_aggregates
from kant.contracts import PlaceFn, PlacementLike, Reach
from kant.model import Binding, Job, PodId, Reason, ReasonCode, Role, pods_per_role
from kant.state import Snapshot
from kant.state.columns import IntArray


class Pools:
    """The live GPU node pools of one cycle (pools with at least one GPU)."""

    def __init__(self, snap: Snapshot) -> None:
        """The pools of ``snap`` (its state's node pools)."""
        self.snap = snap
        self.facts = PoolFacts.of(snap)
        # kept across cycles while no node comes or goes: read them, never change them
        models, names, key = self.facts.live_pools()
        self.models: Mapping[str, int] = models  # GPU model -> pool id
        self.names: Mapping[int, str] = names  # pool id -> GPU model
        self.key = key  # the live pools as a sorted tuple of (GPU model, pool id)

    def role_models(self, job: Job) -> tuple[dict[str, tuple[str, ...]], Reason | None]:
        """Per role, the live GPU models it may use (sorted); or ``NO_POOL`` when a GPU role
        has none (unresolvable: no victim creates a pool)."""
        out: dict[str, tuple[str, ...]] = {}
        for role in job.roles:
            if role.gpu_models:
                ms = tuple(sorted(m for m in role.gpu_models if m in self.models))
                if not ms and role.resources.total_milli:
                    return out, Reason(
                        code=ReasonCode.NO_POOL,
                        message=(
                            f"role {role.name!r} asks for "
                            f"{'|'.join(sorted(role.gpu_models))}: no such node pool"
                        ),
                    )
            elif role.resources.total_milli:
                ms = tuple(sorted(self.models))
                if not ms:
                    return out, Reason(code=ReasonCode.NO_POOL, message="no GPU node pool")
            else:
                ms = ()
            out[role.name] = ms
        return out, None

    def role_pools(self, role_models: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[int, ...]]:
        """Per role, the pool ids of its GPU models (live ones, as :meth:`role_models` or a
        quota decision's ``models`` give them)."""
        return {r: tuple(self.models[m] for m in ms) for r, ms in role_models.items()}

    def ready(self, job: Job, dec: QuotaDecision) -> Reason | None:
        """Dynamic admission of the quota-admitted pods ``dec.pods`` on the snapshot now."""
        return self.ready_on(job, pods_per_role(job, dec.pods), self.role_pools(dec.models))

    def ready_on(
        self, job: Job, counts: Mapping[str, int], role_pools: Mapping[str, tuple[int, ...]]
    ) -> Reason | None:
        """Dynamic admission of ``counts`` pods per role on ``role_pools``
        (:func:`kant.admission.readiness.readiness`) on the snapshot now."""
        return readiness(self.facts, job, counts, role_pools)

    # what the live nodes hold now (kant.admission.quota.NodesNow): admit_quota given the
    # pools prefers, for a gang decided by one GPU model per role, a fit readiness passes

    def fits(
        self, job: Job, counts: Mapping[str, int], models: Mapping[str, tuple[str, ...]]
    ) -> bool:
        """Would readiness pass ``counts`` pods per role of ``job`` on ``models`` now?"""
        return readiness(self.facts, job, counts, self.role_pools(models)) is None

    def refused_by_aggregates(
        self, job: Job, dec: QuotaDecision, pool_agg: IntArray
    ) -> Reason | None:
        """What :meth:`ready` would answer on a snapshot whose per-pool aggregates are
        ``pool_agg``, when those alone decide it (:func:`refusal_from_aggregates`); None
        when they do not."""
        return refusal_from_aggregates(
            job, pods_per_role(job, dec.pods), self.role_pools(dec.models), pool_agg
        )

    def never_fits(
        self,
        job: Job,
        pods: Sequence[PodId],
        role_models: Mapping[str, tuple[str, ...]],
        reach: Callable[[Job, Role], Reach | None] | None = None,
    ) -> Reason | None:
        """``UNSATISFIABLE`` if ``pods`` of ``job`` could never fit the live pools of
        ``role_models`` (:meth:`role_models`) even when empty and healthy, on the nodes the
        placer's strategy may use (``reach``: :meth:`kant.placement.Placer.reach`)
        (:func:`kant.admission.readiness.never_fits`), else None."""
        return never_fits(
            self.facts, job, pods_per_role(job, pods), self.role_pools(role_models), reach
        )

    def place_narrowed(
        self,
        job: Job,
        fits: Sequence[QuotaDecision],
        place: PlaceFn,
        tried: Mapping[str, tuple[str, ...]] | None = None,
    ) -> tuple[QuotaDecision, PlacementLike] | None:
        """The first of ``fits`` (a gang's decisions of one GPU model per role,
        :func:`kant.admission.quota.narrowed_fits`) that readiness passes and ``place``
        places whole on the snapshot now, and its placement (committed into the caller's
        open transaction); None when none does (the snapshot as it was: each attempt is
        all-or-nothing in a transaction of its own). A decision on the models ``tried``
        (what the placement that failed was given) is skipped.
        O(fits x (readiness + a placement))."""
        for alt in fits:
            if alt.models == tried or self.ready(job, alt) is not None:
                continue
            with self.snap.transaction() as tx:
                res = place(self.restricted(job, alt), alt.pods)
                if res.bindings and not res.unplaced:
                    tx.commit()
                    return alt, res
        return None

    def restricted(self, job: Job, dec: QuotaDecision) -> Job:
        """:func:`restricted` on this cycle's live GPU models."""
        return restricted(job, dec, self.models)

    def model_of(self, b: Binding) -> str:
        """The GPU model of the node ``b`` is on ("" for a node not on the snapshot)."""
        s = slot_or_none(self.snap, b.node)
        if s is None:
            return ""
        return self.names.get(int(self.snap.cols.pool_id[s]), "")

    def gpu_milli_by_model(self, bindings: Iterable[Binding]) -> dict[str, int]:
        """GPU milli ``bindings`` take on each GPU model (:meth:`model_of`), bindings that
        take none left out: what quota charges for them. O(bindings)."""
        out: dict[str, int] = {}
        for b in bindings:
            milli = b.total_milli
            if milli:
                m = self.model_of(b)
                out[m] = out.get(m, 0) + milli
        return out


def restricted(job: Job, dec: QuotaDecision, live: Collection[str] = ()) -> Job:
    """The job with each role's GPU models narrowed to those quota admits.

    ``live``: the live GPU models (:attr:`Pools.models`). A role open to any model that
    quota admits on every one of them is left open: its candidates are every live GPU node
    either way, and the job is not copied (the usual case on a one-model cluster)."""
    roles = []
    changed = False
    for role in job.roles:
        ms = dec.models.get(role.name)
        if not ms or (not role.gpu_models and len(ms) == len(live) and all(m in live for m in ms)):
            roles.append(role)
        elif frozenset(ms) != role.gpu_models:
            roles.append(attrs.evolve(role, gpu_models=frozenset(ms)))
            changed = True
        else:
            roles.append(role)
    return attrs.evolve(job, roles=tuple(roles)) if changed else job
