"""Static quota admission (paper 3.2.1): quotas per tenant x GPU model (node pool).

Units are GPU milli (1000 = one GPU); a job is charged for what its pods hold, on the GPU model
of the node each pod is bound to.

Each :class:`Quota` gives a tenant, for one GPU model:

- ``nominal``: the share it is guaranteed;
- ``borrowing_limit``: how far above ``nominal`` it may go by borrowing (``None``: no limit
  but what others lend);
- ``lending_limit``: how much of its *unused* nominal others may borrow (``None``: all of it).
  ``nominal - lending_limit`` is never lent.

A tenant is in **shared** mode (the default) or **isolated** mode. Shared tenants form one
cohort per GPU model: the cohort's lendable pool is the sum of their lendable parts, and a
shared tenant may use ``nominal + borrowing_limit`` as long as the cohort's usage beyond the
guaranteed parts stays within the pool. An isolated tenant never goes beyond its nominal
quota and never lends (its nominal is its own).

A tenant without a quota for a model has nominal 0 there (shared tenants may still borrow).
An :class:`Admitter` built with ``quotas=None`` does no static quota check at all.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import math
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final, Protocol

import attrs
import numpy as np

from kant.errors import (
    DuplicateError,
    InvalidConfigError,
    UnknownPodError,
    ValidationError,
    require,
)
from kant.model import (
    GPU_MODEL_SLASH_REASON,
    MILLI,
    NAME_REASON,
    Binding,
    Job,
    PodId,
    Reason,
    ReasonCode,
    Role,
    is_finite_number,
    is_gpu_model,
    is_int,
    is_name,
    name,
    number,
    pods_per_role,
    satisfies,
)

INF = math.inf


class QuotaMode(enum.StrEnum):
    """How a tenant's quota relates to the others' on the same GPU model."""

    SHARED = "shared"
    """In the model's cohort: lends its lendable part, may borrow up to its borrowing limit."""
    ISOLATED = "isolated"
    """Alone: never beyond its nominal quota, never lends."""


_milli = number(InvalidConfigError, low=0, integer=True, unit="GPU milli")
_opt_milli = number(InvalidConfigError, low=0, integer=True, optional=True, unit="GPU milli")
_name = name(InvalidConfigError)  # (a job's tenant: no '/', no surrounding spaces)
_model = satisfies(
    InvalidConfigError,
    lambda v: is_gpu_model(v, slash=True),
    GPU_MODEL_SLASH_REASON,
)


@attrs.frozen(kw_only=True)
class Quota:
    """One tenant's quota for one GPU model, in GPU milli. See the module docstring."""

    tenant: str = attrs.field(validator=_name)
    gpu_model: str = attrs.field(validator=_model)
    nominal: int = attrs.field(validator=_milli)
    borrowing_limit: int | None = attrs.field(default=None, validator=_opt_milli)
    lending_limit: int | None = attrs.field(default=None, validator=_opt_milli)

    def __attrs_post_init__(self) -> None:
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise InvalidConfigError(
                "lending_limit", self.lending_limit, f"cannot exceed nominal {self.nominal}"
            )

    @classmethod
    def gpus(
        cls,
        tenant: str,
        gpu_model: str,
        nominal: float,
        *,
        borrowing_limit: float | None = None,
        lending_limit: float | None = None,
    ) -> Quota:
        """A quota given in GPUs: ``Quota.gpus("team-a", "H100", 64, borrowing_limit=32)``."""

        def m(v: float | None, field: str) -> int | None:
            if v is None:
                return None
            if not is_finite_number(v):
                raise InvalidConfigError(field, v, "must be a finite number of GPUs")
            if v < 0:  # (said in the GPUs given, not in milli)
                raise InvalidConfigError(field, v, "must be a number of GPUs >= 0")
            # counted on the number, not in its own type: a NumPy number multiplies in its
            # type (np.int16(70) * 1000 wraps around to 4464, np.uint8(8) * 1000 overflows)
            milli = (int(v) if isinstance(v, numbers.Integral) else float(v)) * MILLI
            if not is_finite_number(milli):  # (1e306 GPUs: beyond the floats in milli)
                raise InvalidConfigError(field, v, "must be a finite number of GPUs")
            whole = round(milli)
            # (0.3 GPUs is 300.00000000000006 milli in floats, np.float32(0.1) 100.0000015:
            # a whole number within the precision of the value's own type)
            eps = float(np.finfo(v.dtype).eps) if isinstance(v, np.floating) else 2.0**-52
            if abs(milli - whole) > max(1e-6, 8 * eps * abs(milli)):
                raise InvalidConfigError(
                    field, v, "must be a whole number of milli-GPUs (a multiple of 0.001 GPUs)"
                )
            return whole

        nom = m(nominal, "nominal")
        if nom is None:
            raise InvalidConfigError("nominal", nominal, "must be a finite number of GPUs")
        lend = m(lending_limit, "lending_limit")
        if lend is not None and lend > nom:
            raise InvalidConfigError(
                "lending_limit", lending_limit, f"cannot exceed nominal ({_gpus(nom)} GPUs)"
            )
        return cls(
            tenant=tenant,
            gpu_model=gpu_model,
            nominal=nom,
            borrowing_limit=m(borrowing_limit, "borrowing_limit"),
            lending_limit=lend,
        )

    @property
    def lendable(self) -> int:
        """The part of nominal other tenants may borrow: ``lending_limit``, or all of nominal when
        None."""
        return self.nominal if self.lending_limit is None else self.lending_limit

    @property
    def guaranteed(self) -> int:
        """The part of nominal that is never lent."""
        return self.nominal - self.lendable


ISOLATED_LIMITS: Final = "an isolated tenant neither borrows nor lends"
"""Why a borrowing or lending limit on an isolated tenant's quota is refused (Kueue refuses
both on a ClusterQueue without a cohort): by :class:`QuotaTable` and by a config file."""


class QuotaTable:
    """Immutable quota configuration: quotas, modes, and each model's lendable pool.

    Raises InvalidConfigError for ``quotas`` that is not None or an iterable of Quota values,
    ``modes`` that is not None or a mapping of tenant to mode, or a mode that is not
    ``"shared"`` or ``"isolated"``; DuplicateError for two quotas of one tenant and model."""

    def __init__(
        self,
        quotas: Iterable[Quota] | None,
        modes: Mapping[str, QuotaMode | str] | None = None,
        default_mode: QuotaMode | str = QuotaMode.SHARED,
    ) -> None:
        if quotas is not None and (isinstance(quotas, str) or not isinstance(quotas, Iterable)):
            raise InvalidConfigError("quotas", quotas, "must be None or an iterable of Quota")
        if modes is not None and not isinstance(modes, Mapping):
            raise InvalidConfigError(
                "modes", modes, "must be None or a mapping of tenant to 'shared' or 'isolated'"
            )
        self.unlimited = quotas is None
        self.quotas: dict[tuple[str, str], Quota] = {}
        for q in quotas or ():
            if not isinstance(q, Quota):
                raise InvalidConfigError("quotas", q, "must be Quota values")
            key = (q.tenant, q.gpu_model)
            if key in self.quotas:
                raise DuplicateError(f"two quotas for tenant {q.tenant!r} on {q.gpu_model!r}")
            self.quotas[key] = q
        self.default_mode = _mode(default_mode, "default_mode")
        for t in modes or ():
            if not is_name(t):  # (a mode no job's tenant could ever have)
                raise InvalidConfigError("modes", t, f"a tenant {NAME_REASON}")
        self.modes = {t: _mode(m, f"modes[{t!r}]") for t, m in (modes or {}).items()}
        for (t, model), q in self.quotas.items():
            # (Kueue refuses both on a ClusterQueue without a cohort; kant ignored them)
            if self.mode(t) is QuotaMode.ISOLATED and (
                q.borrowing_limit is not None or q.lending_limit is not None
            ):
                raise InvalidConfigError(
                    "quotas", f"{t}/{model}",
                    f"{ISOLATED_LIMITS}: a borrowing or lending limit on its quota is refused",
                )  # fmt: skip
        self.pool: dict[str, int] = {}
        for (t, model), q in self.quotas.items():
            if self.mode(t) is QuotaMode.SHARED:
                self.pool[model] = self.pool.get(model, 0) + q.lendable
        self._terms: dict[tuple[str, str], tuple[bool, int, float, int]] = {}

    def terms(self, tenant: str, model: str) -> tuple[bool, int, float, int]:
        """(isolated, nominal, ceiling, guaranteed) of a tenant on a model (cached)."""
        key = (tenant, model)
        t = self._terms.get(key)
        if t is None:
            t = (
                self.mode(tenant) is QuotaMode.ISOLATED,
                self.nominal(tenant, model),
                self.ceiling(tenant, model),
                self.guaranteed(tenant, model),
            )
            self._terms[key] = t
        return t

    def mode(self, tenant: str) -> QuotaMode:
        """The tenant's quota mode (``default_mode`` unless configured)."""
        return self.modes.get(tenant, self.default_mode)

    def nominal(self, tenant: str, model: str) -> int:
        """The tenant's nominal quota on ``model`` in milli (0 without a quota)."""
        q = self.quotas.get((tenant, model))
        return q.nominal if q is not None else 0

    def guaranteed(self, tenant: str, model: str) -> int:
        """The part of the tenant's nominal quota on ``model`` never lent (0 without a quota)."""
        q = self.quotas.get((tenant, model))
        return q.guaranteed if q is not None else 0

    def ceiling(self, tenant: str, model: str) -> float:
        """Most the tenant may use on its own terms (nominal + borrowing limit)."""
        q = self.quotas.get((tenant, model))
        nom = q.nominal if q is not None else 0
        if self.mode(tenant) is QuotaMode.ISOLATED:
            return nom
        bl = q.borrowing_limit if q is not None else None
        return INF if bl is None else nom + bl

    def most(self, tenant: str, model: str) -> float:
        """The most the tenant could ever use on ``model`` (milli; ``inf``: no limit): its
        ceiling, and for a shared tenant no more than its never-lent part plus the cohort's
        whole lendable pool (what :meth:`QuotaLedger.headroom` allows with nobody using
        anything)."""
        isolated, _nom, ceiling, guaranteed = self.terms(tenant, model)
        if isolated:
            return ceiling
        return min(ceiling, guaranteed + self.pool.get(model, 0))


def _mode(v: QuotaMode | str, field: str) -> QuotaMode:
    try:
        return QuotaMode(v)
    except ValueError:
        raise InvalidConfigError(field, v, "must be 'shared' or 'isolated'") from None


class QuotaLedger:
    """Usage per (tenant, model) against a :class:`QuotaTable`, with the cohort's usage kept
    by deltas. A cycle works on its own ledger (:meth:`Admitter.ledger`); ``mark`` and
    ``rollback`` undo what-if changes exactly."""

    def __init__(self, table: QuotaTable, usage: Mapping[tuple[str, str], int]) -> None:
        self.table = table
        self.usage: dict[tuple[str, str], int] = dict(usage)
        self.cohort: dict[str, int] = {}
        for (t, m), u in self.usage.items():
            self.cohort[m] = self.cohort.get(m, 0) + self._excess(t, m, u)
        self._log: list[tuple[str, str, int]] = []
        self.version = 0  # bumped by every change (a rollback too): equal versions, equal usage

    def _excess(self, tenant: str, model: str, used: int) -> int:
        isolated, _nom, _ceil, guaranteed = self.table.terms(tenant, model)
        return 0 if isolated else max(0, used - guaranteed)

    def used(self, tenant: str, model: str) -> int:
        """Milli ``tenant`` uses on ``model`` in this ledger. O(1)."""
        return self.usage.get((tenant, model), 0)

    def headroom(self, tenant: str, model: str) -> float:
        """How much more ``tenant`` may use on ``model`` now (milli; ``inf`` if unlimited)."""
        tb = self.table
        if tb.unlimited:
            return INF
        isolated, _nom, ceiling, guaranteed = tb.terms(tenant, model)
        u = self.usage.get((tenant, model), 0)
        own = ceiling - u
        if isolated:
            return max(0.0, own)
        free_guaranteed = max(0, guaranteed - u)
        pool_left = max(0, tb.pool.get(model, 0) - self.cohort.get(model, 0))
        return max(0.0, min(own, free_guaranteed + pool_left))

    def nominal_left(self, tenant: str, model: str) -> int:
        """Milli of ``tenant``'s nominal quota on ``model`` it does not use in this ledger
        (negative while it borrows). O(1)."""
        return self.table.terms(tenant, model)[1] - self.usage.get((tenant, model), 0)

    def within_nominal(self, tenant: str, model: str, extra: int) -> bool:
        """Would ``extra`` more keep the tenant within its nominal quota on ``model``?"""
        if self.table.unlimited:
            return False
        return self.usage.get((tenant, model), 0) + extra <= self.table.terms(tenant, model)[1]

    def borrowing(self, tenant: str, model: str) -> bool:
        """Does the tenant use more than its nominal quota on ``model``? (Always True with no
        quotas: nothing is guaranteed then.)"""
        if self.table.unlimited:
            return True
        return self.usage.get((tenant, model), 0) > self.table.terms(tenant, model)[1]

    def add(self, tenant: str, model: str, milli: int) -> None:
        """Record ``milli`` more (negative: less) use by ``tenant`` on ``model``, keeping the
        cohort's borrowed total; undone by :meth:`rollback`. O(1). ValidationError for a
        ``milli`` that is no int (a NaN was kept as the tenant's use)."""
        if type(milli) is not int and not is_int(milli):
            raise ValidationError("milli", milli, "must be an int (GPU milli)")
        if not milli:
            return
        self.version += 1
        key = (tenant, model)
        u = self.usage.get(key, 0)
        before = self._excess(tenant, model, u)
        u += milli
        if u:
            self.usage[key] = u
        else:
            self.usage.pop(key, None)
        self.cohort[model] = self.cohort.get(model, 0) + self._excess(tenant, model, u) - before
        self._log.append((tenant, model, milli))

    def mark(self) -> int:
        """A point to :meth:`rollback` to (the length of the change log). O(1)."""
        return len(self._log)

    def rollback(self, mark: int) -> None:
        """Undo every :meth:`add` made since ``mark``, newest first, exactly. O(changes undone).
        ValidationError, changing nothing, for a ``mark`` that :meth:`mark` cannot have given
        (no int, below 0 or past the log)."""
        n = len(self._log)
        if type(mark) is not int and not is_int(mark):
            raise ValidationError("mark", mark, f"must be an int in 0..{n} (a mark)")
        if not 0 <= mark <= n:
            raise ValidationError("mark", mark, f"must be an int in 0..{n} (a mark)")
        while len(self._log) > mark:
            t, m, milli = self._log.pop()
            self.add(t, m, -milli)
            self._log.pop()


# --------------------------------------------------------------------------- decisions


@attrs.frozen(kw_only=True)
class QuotaDecision:
    """The outcome of static quota admission for a job (or some of its pods).

    ``pods``: the pods admitted (all asked for a gang, or none; a prefix per role for a
    pod-level job). ``models``: per role, the GPU models its pods may use without exceeding
    quota. ``within_nominal``: the request fits in the tenant's own nominal quota on some
    model of each role, so reclaiming what others borrowed is legitimate; ``nominal_models``:
    per role, the models of ``models`` where it does (where a reclaimer may run: on the
    others its tenant would borrow; none for a role whose nominal models quota does not
    admit now, where a reclaim has not freed enough yet). Empty unless ``within_nominal``.
    ``nominal_pods``: for a pod-level job not within nominal as a whole, how many of the
    pods asked (the first ones, roles in order) are: what its tenant's nominal quota left
    holds (:func:`nominal_prefix`), whatever the headroom for borrowing admits now. 0 for a
    request within nominal, a gang, or one pod.
    ``split``: None when each role's whole request fits every model it is admitted on (its
    pods may land on any of them). Else, per GPU model, the most the admitted pods may take
    there together: a nominated gang decided on what its nomination holds on each model,
    not on its whole request on each (``kant.cycle``); no placement taking more of a model
    than that is accepted.
    """

    ok: bool
    pods: tuple[PodId, ...]
    models: Mapping[str, tuple[str, ...]]
    within_nominal: bool
    reason: Reason | None = None
    nominal_models: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    nominal_pods: int = 0
    split: Mapping[str, float] | None = None

    @property
    def places_within_nominal(self) -> bool:
        """Not within nominal anywhere, or each role asking GPUs admitted on a model where
        it is (a reclaimer may run then; else its nominal models need more victims first)."""
        if not self.within_nominal:
            return True
        nominal = self.nominal_models
        return all(nominal.get(r) for r, ms in self.models.items() if ms)

    @property
    def borrows_nowhere(self) -> bool:
        """Within nominal on every GPU model each role asking GPUs is admitted on: wherever
        placement puts its pods, its tenant stays within its nominal quota. A job admitted
        on a model where it fits nominal and on another where its tenant would borrow may
        be placed on either (placement, not quota, picks the nodes), so it is not."""
        if not self.within_nominal:
            return False
        nominal = self.nominal_models
        return all(set(ms).issubset(nominal.get(r, ())) for r, ms in self.models.items() if ms)

    @property
    def clears_quota(self) -> bool:
        """Admitted, and where a reclaimer may run (:attr:`places_within_nominal`): quota
        asks nothing more of preemption."""
        return self.ok and self.places_within_nominal


class NodesNow(Protocol):
    """What the live nodes can hold now, as the readiness check reads it (the cycle's
    :class:`~kant.admission.pools.Pools` on its snapshot): given to :func:`admit_quota`, a
    gang decided by one GPU model per role takes, of the fits quota allows, one these pass.
    Read only; each answer from the aggregates, O(roles x pools + log n)."""

    def fits(
        self, job: Job, counts: Mapping[str, int], models: Mapping[str, tuple[str, ...]]
    ) -> bool:
        """Would readiness pass ``counts`` pods per role of ``job``, each role on ``models``?"""
        ...


def admit_quota(
    ledger: QuotaLedger,
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
    *,
    nodes: NodesNow | None = None,
) -> QuotaDecision:
    """Static admission of ``pods`` of ``job``: gang jobs all or nothing, pod-level jobs as
    many pods (in order, per role) as quota allows. ``role_models`` gives each role's allowed
    GPU models that exist in the cluster (empty for a CPU-only role). A role that may use
    several models is admitted on those where its whole request fits, and counts against
    every model it is admitted on (its pods may land on any of them), so a cross-pool job is
    admitted for all roles or none and every model's roles fit it wherever their pods land.

    The roles are taken in order (:func:`_admit_in_order`), each admitted where it fits
    beside the earlier ones. A gang of several roles asking GPUs, one of them on several
    models, that this leaves refused, or not within nominal (or within nominal but not on
    models where a reclaimer may run), is decided by one GPU model per role instead
    (:func:`_admit_one_model_each`; searched, where Kueue takes pod sets greedily in order,
    see docs/qsch.md): admitted if one fits the tenant's headroom, within nominal iff one
    fits its nominal quota left (as in role order when that search gives up).

    ``nodes``: what the live nodes hold now (:class:`NodesNow`). When the nodes do not hold
    the decision such a gang gets by quota alone, the first of the other fits quota allows
    (:func:`fits_to_try`, in their order of preference) the nodes hold is taken instead, if
    there is one. Without ``nodes``, quota alone decides.
    O(roles x models), and for such a gang a bounded search more (with ``nodes``, and the
    nodes not holding that decision, :func:`fits_to_try` and a readiness read per fit)."""
    dec = _by_quota_alone(ledger, job, pods, role_models)
    if nodes is None or not dec.ok:
        return dec
    fits = fits_to_try(ledger, job, pods, role_models, dec)
    if len(fits) == 1:
        return dec
    counts = pods_per_role(job, pods)
    for alt in fits:
        if nodes.fits(job, counts, alt.models):
            return alt
    return dec


def _by_quota_alone(
    ledger: QuotaLedger,
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
) -> QuotaDecision:
    """:func:`admit_quota` without the nodes."""
    if ledger.table.unlimited:
        return admit_without_quotas(job, pods, role_models)
    dec = _admit_in_order(ledger, job, pods, role_models)
    if (
        len(job.roles) == 1
        or not job.gang
        or (dec.ok and dec.within_nominal and dec.places_within_nominal)
    ):
        return dec
    return _admit_one_model_each(ledger, job, pods, role_models, dec)


_FITS_TRIED: Final = 8
"""At most this many fits of one model per role of each kind (within the nominal quota
left; of the headroom) :func:`fits_to_try` gives."""

_FIT_STEPS: Final = 500
"""How many choices the search of :func:`fits_to_try` makes, of each kind, before it stops
with the fits found."""


def fits_to_try(
    ledger: QuotaLedger,
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
    dec: QuotaDecision,
) -> tuple[QuotaDecision, ...]:
    """The decisions :func:`admit_quota` chooses among given the live nodes: ``dec`` (its
    decision by quota alone) first, then, for a gang quota decides by one GPU model per role
    (:func:`one_model_each`), the decisions from other fits quota allows, in order of
    preference:

    1. fits of the nominal quota left and the headroom, when one model per role fits the
       nominal quota left (``dec`` is within nominal);
    2. unless ``dec`` places within nominal (a fit within nominal that the nodes do not
       hold beats one that borrows: it would be reclaimed), fits of the headroom.

    Of each kind, the fit the bounded search of :func:`_one_model_each` finds, then those a
    depth-first search in role order (each role's models in its own order) finds, at most
    :data:`_FITS_TRIED` and :data:`_FIT_STEPS` choices. Roles alike but for their names
    count as one class: which of them has which models matters neither to quota nor to
    the nodes, so the search gives each split of a class among its models once. The
    decision from a fit is as by quota alone (each role also on its other models quota
    still admits); decisions on the same models as an earlier one (up to such a swap) are
    left out. ``(dec,)`` for any other job, ``dec`` refused, or no quotas. Depends only on
    the ledger (the tenant's headroom and nominal quota left on the job's models), the
    job's shape and ``dec``. O(fits x roles x models) and the bounded searches."""
    if ledger.table.unlimited or not dec.ok:
        return (dec,)
    needs = _joint(job, pods, role_models)
    if needs is None:
        return (dec,)
    tenant = job.tenant
    room: dict[str, float] = {}
    left: dict[str, float] = {}
    for _r, ms, _d in needs:
        for m in ms:
            if m not in room:
                room[m] = ledger.headroom(tenant, m)
                left[m] = ledger.nominal_left(tenant, m)
    shapes = [(d, ms) for _r, ms, d in needs]
    # roles alike but for their names (and their pods asked, models) are interchangeable:
    # to quota and to the nodes, a fit is which models each class of them has, not which
    # of them has which
    counts = pods_per_role(job, pods)
    classes: dict[object, int] = {}
    alike = [
        classes.setdefault((attrs.evolve(r, name="x"), counts.get(r.name, 0), ms), len(classes))
        for r, ms, _d in needs
    ]
    of_role = {r.name: alike[k] for k, (r, _ms, _d) in enumerate(needs)}
    for role in job.roles:
        of_role.setdefault(role.name, len(classes) + len(of_role))
    out = [dec]

    def key(alt: QuotaDecision) -> tuple[tuple[int, tuple[str, ...]], ...]:
        return tuple(sorted((of_role[r], ms) for r, ms in alt.models.items()))

    seen = {key(dec)}

    def add(alt: QuotaDecision) -> None:
        k = key(alt)
        if k not in seen:
            seen.add(k)
            out.append(alt)

    if dec.within_nominal:
        both = {m: min(room[m], left[m]) for m in room}
        first, _done = _one_model_each(shapes, both)
        for base in _fits_in_order(shapes, both, first, alike):
            opened = _widen(shapes, base, room)
            nominal = _widen(shapes, base, left, opened)
            add(_jointly(job, pods, role_models, needs, opened, nominal, within=True))
    if not (dec.within_nominal and dec.places_within_nominal):
        first, _done = _one_model_each(shapes, room)
        for base in _fits_in_order(shapes, room, first, alike):
            opened = _widen(shapes, base, room)
            add(_jointly(job, pods, role_models, needs, opened, None, within=dec.within_nominal))
    return tuple(out)


_NARROWED_TRIED: Final = 8
"""At most this many decisions of one GPU model per role :func:`narrowed_fits` gives (the
placement attempts a gang that failed to place may make more in one cycle)."""

_NARROWED_PICKS: Final = 256
"""How many choices of one model per role :func:`narrowed_fits` looks at in all before it
stops with the decisions found."""


def narrowed_fits(
    ledger: QuotaLedger,
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
    fits: Sequence[QuotaDecision] | None = None,
) -> tuple[QuotaDecision, ...]:
    """The decisions of one GPU model per role to place a gang with when its placement
    failed (a role of its decision on several models: placement, taking the roles in
    order, each on the nodes it prefers among all its models, may give the first role the
    nodes the next one needs). One list for the gang on the ledger now, whichever decision
    was placed: the cycle, the preemption what-if and the reservation forecast try the same.

    The choices: for each decision of :func:`fits_to_try` of the decision by quota alone
    (``fits``, given: that tuple), in that order, each choice of one of its models per GPU
    role (the roles in order, each role's models in its own order); one that is an earlier
    one up to swapping roles alike but for their names is left out. A choice is *within
    nominal* when every model's roles on it together fit the tenant's nominal quota left
    (:meth:`QuotaLedger.within_nominal`) and the gang is within nominal: its decision has
    ``nominal_models`` its models (a reclaimer may run on it), else none (borrowing:
    ``places_within_nominal`` False). Every choice within nominal comes first, then the
    others, each in the order found; at most :data:`_NARROWED_TRIED` in all, within
    :data:`_NARROWED_PICKS` choices looked at. Each choice is one quota allows: it is one
    model per role of a decision quota allows, whose pods may land on any of its models
    (every model's roles fit the headroom), so placing the gang on it charges the tenant
    within what quota admits. Each decision: ``pods``, ``within_nominal`` as the gang's
    (the decision by quota alone's).

    ``()`` for a job that is not a gang with two roles or more asking GPUs, one of them on
    several models (:func:`one_model_each`), or refused. Depends only on the ledger (the
    tenant's headroom and nominal quota left on the job's models), the job's shape and
    ``pods``. Deterministic. O(fits_to_try) and O(_NARROWED_PICKS x roles)."""
    needs = _joint(job, pods, role_models)
    if needs is None:
        return ()
    if fits is None:
        dec = _by_quota_alone(ledger, job, pods, role_models)
        if not dec.ok:
            return ()
        fits = fits_to_try(ledger, job, pods, role_models, dec)
    if not fits or not fits[0].ok:
        return ()
    within = fits[0].within_nominal
    tenant = job.tenant
    counts = pods_per_role(job, pods)
    classes: dict[object, int] = {}
    alike = [
        classes.setdefault((attrs.evolve(r, name="x"), counts.get(r.name, 0), ms), len(classes))
        for r, ms, _d in needs
    ]
    seen: set[tuple[tuple[int, str], ...]] = set()
    mine: list[tuple[str, ...]] = []
    borrowing: list[tuple[str, ...]] = []
    picks = 0
    for fit in fits:
        choice = [fit.models.get(r.name, ()) for r, _ms, _d in needs]
        for pick in itertools.product(*choice):
            picks += 1
            if picks > _NARROWED_PICKS:
                break
            key = tuple(sorted(zip(alike, pick, strict=True)))
            if key in seen:
                continue
            seen.add(key)
            on: dict[str, int] = {}
            for (_r, _ms, d), m in zip(needs, pick, strict=True):
                on[m] = on.get(m, 0) + d
            own = within and all(ledger.within_nominal(tenant, m, d) for m, d in on.items())
            (mine if own else borrowing).append(pick)
        if picks > _NARROWED_PICKS or len(mine) >= _NARROWED_TRIED:
            break
    out: list[QuotaDecision] = []
    for group, own in ((mine, True), (borrowing, False)):
        for chosen in group[: _NARROWED_TRIED - len(out)]:
            on_one = [(m,) for m in chosen]
            out.append(
                _jointly(
                    job, pods, role_models, needs, on_one, on_one if own else None,
                    within=within,
                )
            )  # fmt: skip
    return tuple(out)


def _fits_in_order(
    shapes: Sequence[tuple[int, tuple[str, ...]]],
    cap: Mapping[str, float],
    first: Sequence[str] | None,
    alike: Sequence[int],
) -> list[list[str]]:
    """Up to :data:`_FITS_TRIED` choices of one model per need (GPU milli, its models), every
    model's needs within ``cap``: ``first`` (given), then those a depth-first search in the
    needs' order finds (each need's models in its own order), within :data:`_FIT_STEPS`
    choices. Needs of the same class in ``alike`` (one per need) are interchangeable: the
    search gives each split of a class among its models once (its needs' models in their
    order, as the first in depth-first order), and no choice that is another's up to such
    a swap. Deterministic. O(_FIT_STEPS)."""
    n = len(shapes)
    before = []  # per need: the need of its class just before it (-1: none)
    last: dict[int, int] = {}
    for k, c in enumerate(alike):
        before.append(last.get(c, -1))
        last[c] = k

    def canonical(p: Sequence[str]) -> tuple[tuple[int, str], ...]:
        return tuple(sorted(zip(alike, p, strict=True)))

    out: list[list[str]] = []
    seen: set[tuple[tuple[int, str], ...]] = set()
    if first is not None:
        out.append(list(first))
        seen.add(canonical(first))
    used = {m: 0.0 for _d, ms in shapes for m in ms}
    pick: list[str] = []
    nxt = [0]  # per depth: the next of its models to try
    steps = 0
    while nxt and len(out) < _FITS_TRIED and steps < _FIT_STEPS:
        k = len(pick)
        if k == n:
            got = canonical(pick)
            if got not in seen:
                seen.add(got)
                out.append(list(pick))
            nxt.pop()
            used[pick.pop()] -= shapes[k - 1][0]
            continue
        d, ms = shapes[k]
        i = nxt[-1]
        if i >= len(ms):
            nxt.pop()
            if pick:
                used[pick.pop()] -= shapes[k - 1][0]
            continue
        nxt[-1] = i + 1
        steps += 1
        m = ms[i]
        if used[m] + d <= cap[m]:
            used[m] += d
            pick.append(m)
            # (a need of a class takes no model before the one its class's need before it
            # took: each split of the class once)
            j = before[k + 1] if k + 1 < n else -1
            nxt.append(shapes[k + 1][1].index(pick[j]) if j >= 0 else 0)
    return out


def one_model_each(
    job: Job, pods: Sequence[PodId], role_models: Mapping[str, tuple[str, ...]]
) -> bool:
    """Is ``job`` a gang whose ``pods`` quota may decide by one GPU model per role (two
    roles or more ask GPUs, one of them on several models), so that which models it gets
    may depend on what the nodes hold (:func:`admit_quota`'s ``nodes``)? O(roles)."""
    return _joint(job, pods, role_models) is not None


def _admit_in_order(
    ledger: QuotaLedger,
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
) -> QuotaDecision:
    """:func:`admit_quota` taking the roles in order: each role is admitted on the models
    where its request fits once the earlier roles count against every model they were
    admitted on, and is within nominal if it is on one of its models with the earlier roles
    counted so. O(roles x models)."""
    tenant = job.tenant
    by_role: dict[str, list[PodId]] = {}
    if len(job.roles) == 1:
        by_role[job.roles[0].name] = list(pods)
    else:
        for p in pods:
            by_role.setdefault(p.role, []).append(p)
    extra: dict[str, int] = {}
    models_out: dict[str, tuple[str, ...]] = {}
    nominal: dict[str, tuple[str, ...]] = {}
    admitted: list[PodId] = []
    within = True
    failure: Reason | None = None
    for role in job.roles:
        rpods = by_role.get(role.name)
        if not rpods:
            continue
        per_pod = role.resources.total_milli
        allowed = role_models.get(role.name, ())
        if per_pod == 0 or not allowed:
            models_out[role.name] = nominal[role.name] = allowed
            admitted.extend(rpods)
            continue
        demand = per_pod * len(rpods)
        mine = tuple(
            m for m in allowed if ledger.within_nominal(tenant, m, extra.get(m, 0) + demand)
        )
        if not mine:
            within = False
        room = {m: ledger.headroom(tenant, m) - extra.get(m, 0) for m in allowed}
        if job.gang:
            ok = tuple(m for m in allowed if room[m] >= demand)
            count = len(rpods) if ok else 0
        else:
            fits = {m: min(len(rpods), _floor_div(room[m], per_pod)) for m in allowed}
            count = max(fits.values())
            ok = tuple(m for m in allowed if fits[m] >= count) if count else ()
        if not count:
            best = max(room.values())
            failure = Reason(
                code=ReasonCode.QUOTA_EXCEEDED,
                message=(
                    f"tenant {tenant!r} needs {_gpus(demand if job.gang else per_pod)} GPUs of "
                    f"{'|'.join(allowed)} for role {role.name!r}; quota left {_gpus(best)}"
                ),
            )
            if job.gang:
                if within:  # (so far: the roles after this one must be within it too)
                    within = _gang_within_nominal(ledger, job, by_role, role_models)
                return QuotaDecision(
                    ok=False, pods=(), models={}, within_nominal=within, reason=failure
                )
            continue
        models_out[role.name] = ok
        nominal[role.name] = tuple(m for m in ok if m in mine)
        admitted.extend(rpods[:count])
        for m in ok:
            extra[m] = extra.get(m, 0) + per_pod * count
    first = 0
    if not within and not job.gang:
        # (at most all but one: a multi-role request counted on the models quota admits it
        # on may not be within nominal where the nominal ledger alone would hold it)
        first = min(nominal_prefix(ledger, job, by_role, role_models), len(pods) - 1)
    if not admitted:
        return QuotaDecision(
            ok=False, pods=(), models={}, within_nominal=within, reason=failure,
            nominal_pods=first,
        )  # fmt: skip
    return QuotaDecision(
        ok=True,
        pods=tuple(admitted),
        models=models_out,
        within_nominal=within,
        nominal_models=nominal if within else {},
        nominal_pods=first,
    )


def _gang_within_nominal(
    ledger: QuotaLedger,
    job: Job,
    by_role: Mapping[str, Sequence[PodId]],
    role_models: Mapping[str, tuple[str, ...]],
) -> bool:
    """A gang refused in role order: is it within its tenant's nominal quota left, every role
    counted? Exactly so when its GPU roles each have one model; a role on several models is
    counted on none (a gang with one is judged by :func:`_admit_one_model_each`). O(roles)."""
    need: dict[str, int] = {}
    for role in job.roles:
        ms = role_models.get(role.name, ())
        n = len(by_role.get(role.name, ()))
        if len(ms) == 1 and n and role.resources.total_milli:
            need[ms[0]] = need.get(ms[0], 0) + role.resources.total_milli * n
    return all(ledger.within_nominal(job.tenant, m, d) for m, d in need.items())


def _admit_one_model_each(
    ledger: QuotaLedger,
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
    in_order: QuotaDecision,
) -> QuotaDecision:
    """:func:`admit_quota` of a gang by one GPU model per role, when ``in_order`` (the
    decision in role order) refused it, or is not within nominal, or is within nominal but
    not on models where a reclaimer may run.

    Within nominal (it may reclaim) iff one model per role fits the nominal quota left; when
    that search gives up, as ``in_order`` says (which, over-counting or stopping at a
    refused role, may differ).

    - Admitted in role order: the same models; within nominal, on the nominal models found
      below when one model per role among them fits the nominal quota left (else on none
      yet, or on ``in_order``'s when it was within nominal too).
    - Refused in role order: admitted if one model per role fits the headroom, preferring
      one that fits the nominal quota left too. Each role is admitted on its model and,
      roles in order, on each other model of its own where its whole request still fits
      with every role counted on every model it has; its nominal models likewise, among
      those, within the nominal quota left (on none yet unless that preferred fit was found).

    A search that gives up (:data:`_SEARCH_STEPS`) finds nothing: the decision in role order
    stands. A job whose GPU roles each have one model is decided in role order exactly."""
    needs = list(_demands(job, pods, role_models))
    if len(needs) < 2 or all(len(ms) == 1 for _r, ms, _d in needs):
        return in_order
    tenant = job.tenant
    shapes = [(d, ms) for _r, ms, d in needs]
    room: dict[str, float] = {}
    left: dict[str, float] = {}
    for _r, ms, _d in needs:
        for m in ms:
            if m not in room:
                room[m] = ledger.headroom(tenant, m)
                left[m] = ledger.nominal_left(tenant, m)
    fit, done = _one_model_each(shapes, left)
    within = fit is not None if done else in_order.within_nominal
    return _by_quota(job, pods, role_models, in_order, needs, shapes, room, left, within)


def _by_quota(
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
    in_order: QuotaDecision,
    needs: Sequence[tuple[Role, tuple[str, ...], int]],
    shapes: Sequence[tuple[int, tuple[str, ...]]],
    room: Mapping[str, float],
    left: Mapping[str, float],
    within: bool,
) -> QuotaDecision:
    """The decision of :func:`_admit_one_model_each` by quota alone (``room``: the tenant's
    headroom per model, ``left``: its nominal quota left, ``within``: whether one model per
    role fits ``left``)."""
    if in_order.ok:
        if not within:
            if not in_order.within_nominal:
                return in_order
            return attrs.evolve(in_order, within_nominal=False, nominal_models={})
        opened = [in_order.models[r.name] for r, _ms, _d in needs]
        among = [(d, o) for (d, _ms), o in zip(shapes, opened, strict=True)]
        mine, _done = _one_model_each(among, left)
        if mine is not None:
            nominal = _widen(shapes, mine, left, opened)
            return _jointly(job, pods, role_models, needs, opened, nominal, within=True)
        if in_order.within_nominal:
            return in_order
        return _jointly(job, pods, role_models, needs, opened, None, within=True)
    if within:
        both = {m: min(room[m], left[m]) for m in room}
        base, _done = _one_model_each(shapes, both)
        if base is not None:
            opened = _widen(shapes, base, room)
            nominal = _widen(shapes, base, left, opened)
            return _jointly(job, pods, role_models, needs, opened, nominal, within=True)
    base, _done = _one_model_each(shapes, room)
    if base is None:
        if within == in_order.within_nominal:
            return in_order
        return attrs.evolve(in_order, within_nominal=within)
    opened = _widen(shapes, base, room)
    return _jointly(job, pods, role_models, needs, opened, None, within=within)


def _jointly(
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
    needs: Sequence[tuple[Role, tuple[str, ...], int]],
    opened: Sequence[tuple[str, ...]],
    nominal: Sequence[tuple[str, ...]] | None,
    *,
    within: bool,
) -> QuotaDecision:
    """Every pod of ``pods`` admitted, each role of ``needs`` on its ``opened`` models and,
    within nominal, on its ``nominal`` models as a reclaimer (None: on none yet); a role
    asking no GPU, or no model, on its models of ``role_models``."""
    at = {r.name: k for k, (r, _ms, _d) in enumerate(needs)}
    counts = pods_per_role(job, pods)
    models_out: dict[str, tuple[str, ...]] = {}
    nominal_out: dict[str, tuple[str, ...]] = {}
    for role in job.roles:
        if not counts.get(role.name):
            continue
        k = at.get(role.name)
        if k is None:
            models_out[role.name] = nominal_out[role.name] = role_models.get(role.name, ())
        else:
            models_out[role.name] = opened[k]
            nominal_out[role.name] = nominal[k] if nominal is not None else ()
    admitted: list[PodId] = []
    by_role: dict[str, list[PodId]] = {}
    for p in pods:
        by_role.setdefault(p.role, []).append(p)
    for role in job.roles:
        admitted.extend(by_role.get(role.name, ()))
    return QuotaDecision(
        ok=True,
        pods=tuple(admitted),
        models=models_out,
        within_nominal=within,
        nominal_models=nominal_out if within else {},
    )


def _widen(
    needs: Sequence[tuple[int, tuple[str, ...]]],
    base: Sequence[str],
    cap: Mapping[str, float],
    among: Sequence[tuple[str, ...]] | None = None,
) -> list[tuple[str, ...]]:
    """Per need (GPU milli, its models), its model in ``base`` and, needs in order, every
    other of its models (of ``among``'s, given) where its milli still fits ``cap`` with every
    need counted against each model it has: so every model's needs together fit it,
    wherever their pods land. The models in the need's own order. O(needs x models)."""
    charged: dict[str, float] = {}
    for (d, _ms), m in zip(needs, base, strict=True):
        charged[m] = charged.get(m, 0) + d
    out: list[tuple[str, ...]] = []
    for k, (d, ms) in enumerate(needs):
        have = {base[k]}
        for m in ms if among is None else among[k]:
            if m not in have and cap[m] - charged.get(m, 0) >= d:
                have.add(m)
                charged[m] = charged.get(m, 0) + d
        out.append(tuple(m for m in ms if m in have))
    return out


_SEARCH_STEPS: Final = 2_000
"""How many choices :func:`_one_model_each` makes before it gives up (undecided)."""

_NARROW_STEPS: Final = 2_000
"""How many choices :func:`quota_models`' searches (one per role and model) make in all
before it keeps every model left (undecided)."""

_HALL_MODELS: Final = 10
"""Up to how many GPU models :func:`_one_model_each` checks every set of them first (2**n)."""

_GAVE_UP: dict[tuple[object, ...], tuple[list[str] | None, bool, int]] = {}
"""The searches of :func:`_one_model_each` that took many choices (or gave up), by their
exact inputs: the same search is not made again (a job refused every cycle on an unchanged
quota). At most :data:`_GAVE_UP_SIZE`, the oldest dropped first."""

_GAVE_UP_SIZE: Final = 256
_REMEMBERED_STEPS: Final = 500


def _one_model_each(
    needs: Sequence[tuple[int, tuple[str, ...]]],
    cap: Mapping[str, float],
    limit: int = _SEARCH_STEPS,
) -> tuple[list[str] | None, bool]:
    """One GPU model per need (GPU milli, the models it may use) such that every model's
    needs together fit its ``cap``; deterministic.

    Needs alike (the same milli and models) are interchangeable, so the search chooses how
    many of them go to each model, not which (13 alike needs on two models: at most 14
    choices, not 2**13): a depth-first search over the classes of alike needs, those with
    the fewest models that fit one of them first (then the largest), each putting as many
    as fit on its first model, then fewer. Refused at once, without a search: a class that
    cannot fit in what its models have, or a set of models (each set, up to
    :data:`_HALL_MODELS` models) smaller than the needs that may use only models of it;
    during the search, the classes left asking more than their models have left.

    Returns the models found, per need (None: there is none), and whether the search was
    complete: False when it gave up after ``limit`` choices (None then does not mean there
    is none). A search of many choices is remembered by its inputs (:data:`_GAVE_UP`).
    O(needs x models + models x 2**models) without backtracking."""
    pick, complete, _steps = _one_model_each_counted(needs, cap, limit)
    return pick, complete


def _one_model_each_counted(
    needs: Sequence[tuple[int, tuple[str, ...]]],
    cap: Mapping[str, float],
    limit: int,
) -> tuple[list[str] | None, bool, int]:
    """:func:`_one_model_each`, and how many choices it made."""
    key = (tuple(needs), tuple(sorted((m, cap[m]) for _d, ms in needs for m in ms)), limit)
    got = _GAVE_UP.get(key)
    if got is not None:
        pick, complete, steps = got  # (its own count: a caller's budget is spent the same)
        return (None if pick is None else list(pick)), complete, steps
    pick, complete, steps = _search(needs, cap, limit)
    if steps > _REMEMBERED_STEPS:
        if len(_GAVE_UP) >= _GAVE_UP_SIZE:
            # (emptied or changed by another thread meanwhile: nothing to drop)
            with contextlib.suppress(StopIteration, RuntimeError):
                _GAVE_UP.pop(next(iter(_GAVE_UP)), None)
        _GAVE_UP[key] = (None if pick is None else list(pick)), complete, steps
    return pick, complete, steps


def _hall_violated(
    items: Sequence[tuple[int, tuple[str, ...], list[int]]], cap: Mapping[str, float]
) -> bool:
    """Is there a set of models whose ``cap`` together is less than what the classes of
    ``items`` (milli, models that fit one, needs) that may use only models of it ask? (Then
    no model per need fits.) Every set, when there are at most :data:`_HALL_MODELS` models;
    O(models x 2**models)."""
    models = sorted({m for _d, opts, _idx in items for m in opts})
    n = len(models)
    if n > _HALL_MODELS:
        return False
    bit = {m: 1 << i for i, m in enumerate(models)}
    need = [0.0] * (1 << n)
    for d, opts, idx in items:
        mask = 0
        for m in opts:
            mask |= bit[m]
        need[mask] += d * len(idx)
    for i in range(n):  # (each set: what the classes on its subsets ask)
        b = 1 << i
        for s in range(1 << n):
            if s & b:
                need[s] += need[s ^ b]
    room = [0.0] * (1 << n)
    for s in range(1, 1 << n):
        low = s & -s
        room[s] = room[s ^ low] + cap[models[low.bit_length() - 1]]
        if need[s] > room[s]:
            return True
    return False


def _search(
    needs: Sequence[tuple[int, tuple[str, ...]]],
    cap: Mapping[str, float],
    limit: int,
) -> tuple[list[str] | None, bool, int]:
    """The search of :func:`_one_model_each`, and how many choices it made."""
    steps = 0
    classes: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for i, need in enumerate(needs):
        classes.setdefault(need, []).append(i)
    items: list[tuple[int, tuple[str, ...], list[int]]] = []
    for (d, ms), idx in classes.items():
        opts = tuple(m for m in ms if cap[m] >= d)
        if sum(_floor_div(cap[m], d) for m in opts) < len(idx):
            return None, True, steps
        items.append((d, opts, idx))
    items.sort(key=lambda it: (len(it[1]), -it[0], it[2][0]))
    if _hall_violated(items, cap):
        return None, True, steps
    left = {m: cap[m] for _d, opts, _idx in items for m in opts}
    # per class, what it and the classes after it ask, and the models they may use
    rest_need = [0] * (len(items) + 1)
    rest_models: list[tuple[str, ...]] = [()] * (len(items) + 1)
    for k in range(len(items) - 1, -1, -1):
        d, opts, idx = items[k]
        rest_need[k] = rest_need[k + 1] + d * len(idx)
        rest_models[k] = tuple(sorted({*opts, *rest_models[k + 1]}))
    slots = [(k, j) for k, (_d, opts, _idx) in enumerate(items) for j in range(len(opts))]
    took = [0] * len(slots)  # per slot (a class and one of its models), how many it put there
    rem = [0] * len(slots)  # per slot, how many of its class were left for it and the next
    low = [0] * len(slots)
    entered = [False] * len(slots)
    p = 0
    while p < len(slots):
        steps += 1
        if steps > limit:
            return None, False, steps
        k, j = slots[p]
        d, opts, idx = items[k]
        m = opts[j]
        if not entered[p]:
            rem[p] = len(idx) if j == 0 else rem[p - 1] - took[p - 1]
            if sum(_floor_div(left[o], d) for o in opts[j:]) < rem[p] or (
                j == 0 and k and sum(left[o] for o in rest_models[k]) < rest_need[k]
            ):
                # (what is left of its models cannot hold the rest of its class, or of
                # all the models of the classes left, what these ask)
                p -= 1
                if p < 0:
                    return None, True, steps
                continue
            entered[p] = True
            last = j == len(opts) - 1
            low[p] = rem[p] if last else 0
            took[p] = min(rem[p], _floor_div(left[m], d)) + 1
        else:
            left[m] += took[p] * d  # (back here: undo the last choice, try one fewer)
        took[p] -= 1
        if took[p] < low[p]:
            entered[p] = False
            took[p] = 0
            p -= 1
            if p < 0:
                return None, True, steps
            continue
        left[m] -= took[p] * d
        p += 1
    pick = [""] * len(needs)
    for p, (k, j) in enumerate(slots):
        _d, opts, idx = items[k]
        first = len(idx) - rem[p]
        for i in idx[first : first + took[p]]:
            pick[i] = opts[j]
    return pick, True, steps


def nominal_prefix(
    ledger: QuotaLedger,
    job: Job,
    by_role: Mapping[str, Sequence[PodId]],
    role_models: Mapping[str, tuple[str, ...]],
) -> int:
    """How many of a pod-level job's pods (``by_role``: per role, in the job's pod order),
    the first ones with roles in order, fit its tenant's nominal quota left: on one GPU model
    of each role, the tenant's use on ``ledger`` (its running pods, what the cycle admitted
    or holds for it) plus an earlier role's pods (counted on each model where they fit)
    within nominal. The tenant's nominal ledger only: the headroom for borrowing (what
    others borrow of that quota) does not enter; a reclaim takes that back. Pods asking no
    GPU, or of a role with no GPU model, count. O(roles x models)."""
    tenant = job.tenant
    extra: dict[str, int] = {}
    first = 0
    for role in job.roles:
        rpods = by_role.get(role.name)
        if not rpods:
            continue
        per_pod = role.resources.total_milli
        allowed = role_models.get(role.name, ())
        if per_pod == 0 or not allowed:
            first += len(rpods)
            continue
        left = {m: ledger.nominal_left(tenant, m) - extra.get(m, 0) for m in allowed}
        fits = min(len(rpods), max(_floor_div(v, per_pod) for v in left.values()))
        first += fits
        if fits < len(rpods):
            return first
        for m, v in left.items():
            if v >= per_pod * fits:
                extra[m] = extra.get(m, 0) + per_pod * fits
    return first


def admit_without_quotas(
    job: Job, pods: Sequence[PodId], role_models: Mapping[str, tuple[str, ...]]
) -> QuotaDecision:
    """:func:`admit_quota` on a ledger with no quotas (the same decision, without the
    per-model arithmetic; the cycle caches it per job): every pod is admitted on every
    allowed model, and
    nothing is within a nominal quota (there is none) once a role asks for GPUs."""
    if not pods:
        return QuotaDecision(ok=False, pods=(), models={}, within_nominal=True)
    within = True
    models_out: dict[str, tuple[str, ...]] = {}
    if len(job.roles) == 1:
        role = job.roles[0]
        allowed = role_models.get(role.name, ())
        models_out[role.name] = allowed
        within = not (allowed and role.resources.total_milli)
        return QuotaDecision(ok=True, pods=tuple(pods), models=models_out, within_nominal=within)
    by_role: dict[str, list[PodId]] = {}
    for p in pods:
        by_role.setdefault(p.role, []).append(p)
    admitted: list[PodId] = []
    for role in job.roles:
        rpods = by_role.get(role.name)
        if not rpods:
            continue
        allowed = role_models.get(role.name, ())
        models_out[role.name] = allowed
        admitted.extend(rpods)
        if allowed and role.resources.total_milli:
            within = False
    if not admitted:
        return QuotaDecision(ok=False, pods=(), models={}, within_nominal=True)
    return QuotaDecision(ok=True, pods=tuple(admitted), models=models_out, within_nominal=within)


def quota_never_fits(
    table: QuotaTable,
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
) -> Reason | None:
    """``UNSATISFIABLE`` when ``pods`` of ``job`` exceed the most its tenant could ever use
    (:meth:`QuotaTable.most`: nominal for an isolated tenant; for a shared one nominal +
    borrowing limit, and at most its never-lent part plus the cohort's lendable pool) on every
    GPU model a role may use: a gang role all its pods, a pod-level role one pod; or, for a
    gang, when the roles that may use one GPU model only exceed it on that model together
    (they run at once), or when no GPU model per role fits the most on every model, as
    :func:`admit_quota` admits a gang on an empty ledger. Else None. O(roles x models), and
    for a gang of several roles, one of them on several models, a bounded search (None when
    it gives up: undecided)."""
    if table.unlimited:
        return None
    alone: dict[str, tuple[int, list[str]]] = {}  # model -> a gang's one-model roles on it
    for role, allowed, demand in _demands(job, pods, role_models):
        best = max(table.most(job.tenant, m) for m in allowed)
        if demand > best:
            return Reason(
                code=ReasonCode.UNSATISFIABLE,
                message=(
                    f"can never fit: tenant {job.tenant!r} needs {_gpus(demand)} GPUs of "
                    f"{'|'.join(allowed)} for role {role.name!r}; its quota allows at most "
                    f"{_gpus(best)}"
                ),
            )
        if job.gang and len(allowed) == 1:
            total, names = alone.get(allowed[0], (0, []))
            alone[allowed[0]] = (total + demand, [*names, role.name])
    for m, (total, names) in alone.items():
        best = table.most(job.tenant, m)
        if len(names) > 1 and total > best:
            return Reason(
                code=ReasonCode.UNSATISFIABLE,
                message=(
                    f"can never fit: tenant {job.tenant!r} needs {_gpus(total)} GPUs of {m} "
                    f"for roles {', '.join(repr(n) for n in names)} together; its quota "
                    f"allows at most {_gpus(best)}"
                ),
            )
    demands = _joint(job, pods, role_models)
    if demands is None:
        return None
    most = {m: table.most(job.tenant, m) for _r, allowed, _d in demands for m in allowed}
    fit, complete = _one_model_each([(d, allowed) for _r, allowed, d in demands], most)
    if fit is not None or not complete:
        return None
    models = sorted(most)
    return Reason(
        code=ReasonCode.UNSATISFIABLE,
        message=(
            f"can never fit: tenant {job.tenant!r} needs {_gpus(sum(d for *_x, d in demands))} "
            f"GPUs of {'|'.join(models)} for roles "
            f"{', '.join(repr(r.name) for r, _a, _d in demands)} together, one GPU model per "
            f"role; its quota allows at most "
            f"{', '.join(f'{_gpus(most[m])} of {m}' for m in models)}"
        ),
    )


def _joint(
    job: Job, pods: Sequence[PodId], role_models: Mapping[str, tuple[str, ...]]
) -> list[tuple[Role, tuple[str, ...], int]] | None:
    """:func:`_demands` of a gang whose roles are judged together by one GPU model per role
    (two roles or more ask GPUs, one of them on several models), else None."""
    if not job.gang or len(job.roles) == 1:
        return None
    demands = list(_demands(job, pods, role_models))
    if len(demands) < 2 or all(len(allowed) == 1 for _r, allowed, _d in demands):
        return None
    return demands


def quota_models(
    table: QuotaTable,
    job: Job,
    pods: Sequence[PodId],
    role_models: Mapping[str, tuple[str, ...]],
) -> Mapping[str, tuple[str, ...]]:
    """Per role, the GPU models of ``role_models`` on which ``pods`` of ``job`` do not exceed
    the most its tenant could ever use (:meth:`QuotaTable.most`; a gang role all its pods, a
    pod-level role one pod): where it could ever run. For a gang judged by one GPU model per
    role (:func:`quota_never_fits`), a role keeps a model only if the other roles can then
    have one each within the most (kept when that search gives up, or once these searches
    made :data:`_NARROW_STEPS` choices in all: undecided).
    ``role_models`` itself when quota excludes none. O(roles x models), and for such a gang
    roles x models bounded searches."""
    if table.unlimited:
        return role_models
    out = dict(role_models)
    for role, allowed, demand in _demands(job, pods, role_models):
        out[role.name] = tuple(m for m in allowed if demand <= table.most(job.tenant, m))
    demands = _joint(job, pods, role_models)
    if demands is not None:
        most = {m: table.most(job.tenant, m) for _r, allowed, _d in demands for m in allowed}
        needs = [(d, out[r.name]) for r, _a, d in demands]
        budget = _NARROW_STEPS
        seen: set[tuple[int, str]] = set()  # (role, model) of a fit found: kept, no search
        for k, (role, _a, d) in enumerate(demands):
            if len(needs[k][1]) < 2:
                continue
            keep = []
            for m in needs[k][1]:
                if budget <= 0 or (k, m) in seen:  # (undecided, or a fit has it: kept)
                    keep.append(m)
                    continue
                fit, complete, steps = _one_model_each_counted(
                    [*needs[:k], (d, (m,)), *needs[k + 1 :]], most, budget
                )
                budget -= steps + len(needs)  # (and what setting it up costs)
                if fit is not None:
                    seen.update(enumerate(fit))
                if fit is not None or not complete:
                    keep.append(m)
            out[role.name] = tuple(keep)
            needs[k] = (d, out[role.name])
    return role_models if out == role_models else out


def _demands(
    job: Job, pods: Sequence[PodId], role_models: Mapping[str, tuple[str, ...]]
) -> Iterator[tuple[Role, tuple[str, ...], int]]:
    """Per role of ``job`` with GPU pods among ``pods`` and GPU models in ``role_models``:
    the role, those models, and the GPU milli it must find on one of them (a gang role all
    its pods, a pod-level role one pod)."""
    counts = pods_per_role(job, pods)
    for role in job.roles:
        n = counts.get(role.name, 0)
        allowed = role_models.get(role.name, ())
        per_pod = role.resources.total_milli
        if n and allowed and per_pod:
            yield role, allowed, per_pod * (n if job.gang else 1)


def _floor_div(a: float, b: int) -> int:
    if a == INF:
        return 1 << 40
    return max(0, int(a // b))


def _gpus(milli: float) -> str:
    if milli == INF:
        return "unlimited"
    return f"{milli / MILLI:g}"


# --------------------------------------------------------------------------- the admitter


def _check_charge(tenant: object, models: Iterable[object]) -> None:
    """Refuse (ValidationError) a tenant that is no string or a GPU model that is neither
    None nor a string: charged as it is, it would be usage no quota ever counts."""
    if not isinstance(tenant, str):
        raise ValidationError("tenant", tenant, "must be a tenant name (a string)")
    for m in models:
        if m is not None and not isinstance(m, str):
            raise ValidationError("model", m, "must be None or a GPU model name (a string)")


class Admitter:
    """Quotas and their live usage (QSCH static admission). The preemption rules are a cycle
    input (:class:`kant.preemption.PreemptionPolicy`), not part of the admitter.

    ``quotas=None``: no static quota check (every tenant unlimited, nothing guaranteed).
    ``modes`` maps tenants to ``"shared"``/``"isolated"`` (default ``default_mode``).
    """

    def __init__(
        self,
        quotas: Iterable[Quota] | None = None,
        *,
        modes: Mapping[str, QuotaMode | str] | None = None,
        default_mode: QuotaMode | str = QuotaMode.SHARED,
    ) -> None:
        self.table = QuotaTable(quotas, modes, default_mode)
        self._usage: dict[tuple[str, str], int] = {}
        self._by_pod: dict[PodId, tuple[str, str, int]] = {}
        self.version = 0  # bumped by every charge and uncharge (see kant.cycle: a quiet cycle)

    def ledger(self) -> QuotaLedger:
        """A working copy of the usage for one cycle. O(tenants x models)."""
        return QuotaLedger(self.table, self._usage)

    def used(self, tenant: str, model: str) -> int:
        """Milli ``tenant`` is charged for on ``model`` now. O(1)."""
        return self._usage.get((tenant, model), 0)

    def usage(self) -> dict[tuple[str, str], int]:
        """A copy of the live usage, ``(tenant, model) -> milli``, sorted; only non-zero entries.
        O(entries)."""
        return dict(sorted(self._usage.items()))

    def charge(self, tenant: str, binding: Binding, model: str | None) -> None:
        """Charge ``tenant`` for what ``binding`` holds on a ``model`` node (ValidationError
        for a tenant that is no string, a binding that is no Binding or a model that is
        neither None nor a string; DuplicateError for a pod charged already; nothing
        changed)."""
        if not isinstance(binding, Binding):
            raise ValidationError("binding", binding, "must be a kant.model.Binding")
        _check_charge(tenant, (model,))
        if binding.pod in self._by_pod:
            raise DuplicateError(f"pod {binding.pod} is already charged")
        milli = binding.total_milli if model is not None else 0
        key_model = model if model is not None else ""
        self.version += 1
        self._by_pod[binding.pod] = (tenant, key_model, milli)
        if milli:
            k = (tenant, key_model)
            self._usage[k] = self._usage.get(k, 0) + milli

    def charge_many(
        self, tenant: str, bindings: Sequence[Binding], models: Sequence[str | None]
    ) -> None:
        """:meth:`charge` each of ``bindings`` (on a node of ``models[i]``), all or none
        (DuplicateError for a pod already charged or named twice, ValidationError for
        ``bindings`` that are not a sequence of Bindings or ``models`` that is not a sequence
        of as many; nothing changed); usage moves once per GPU model. O(bindings)."""
        by_pod = self._by_pod
        try:
            fresh = {b.pod for b in bindings}
            n = len(bindings)
        except (AttributeError, TypeError):
            raise ValidationError(
                "bindings", bindings, "must be a sequence of kant.model.Binding"
            ) from None
        if not isinstance(models, Sequence) or isinstance(models, str) or len(models) != n:
            raise ValidationError(
                "models", models, f"must be a sequence of one GPU model (or None) per binding ({n})"
            )
        _check_charge(tenant, models)
        if len(fresh) != len(bindings) or not by_pod.keys().isdisjoint(fresh):
            seen: set[PodId] = set()
            for b in bindings:
                if b.pod in by_pod or b.pod in seen:
                    raise DuplicateError(f"pod {b.pod} is already charged")
                seen.add(b.pod)
        self.version += 1
        added: dict[str, int] = {}
        for b, model in zip(bindings, models, strict=True):
            milli = b.total_milli if model is not None else 0
            key_model = model if model is not None else ""
            by_pod[b.pod] = (tenant, key_model, milli)
            if milli:
                added[key_model] = added.get(key_model, 0) + milli
        for m, milli in added.items():
            k = (tenant, m)
            self._usage[k] = self._usage.get(k, 0) + milli

    def uncharge_charged(self, pods: Iterable[PodId]) -> None:
        """:meth:`uncharge` every pod of ``pods`` that is charged (others are skipped); usage
        moves once per tenant and GPU model. O(pods)."""
        by_pod = self._by_pod
        taken: dict[tuple[str, str], int] = {}
        popped: list[tuple[PodId, tuple[str, str, int]]] = []
        try:
            for pod in pods:
                got = by_pod.pop(pod, None)
                if got is not None:
                    popped.append((pod, got))
                    if got[2]:
                        k = (got[0], got[1])
                        taken[k] = taken.get(k, 0) + got[2]
        except TypeError:  # (an unhashable item, or pods no iterable: put back what was taken)
            by_pod.update(popped)
            raise ValidationError("pods", pods, "must be an iterable of kant.model.PodId") from None
        self.version += 1
        for k, milli in taken.items():
            left = self._usage[k] - milli
            if left:
                self._usage[k] = left
            else:
                del self._usage[k]

    def uncharge(self, pod: PodId) -> None:
        """Take back what :meth:`charge` charged for ``pod``; raises
        :class:`~kant.errors.UnknownPodError` if it is not charged or is no pod id (nothing
        changes). O(1)."""
        try:
            tenant, model, milli = self._by_pod.pop(pod)
        except (KeyError, TypeError):
            raise UnknownPodError(pod) from None
        self.version += 1
        if milli:
            k = (tenant, model)
            left = self._usage[k] - milli
            if left:
                self._usage[k] = left
            else:
                del self._usage[k]

    def charged(self) -> list[PodId]:
        """Every pod charged now (a sorted copy). O(pods log pods)."""
        return sorted(self._by_pod)

    def is_charged(self, pod: PodId) -> bool:
        """Is ``pod`` charged to a tenant? O(1). UnknownPodError for what cannot be a pod id
        (unhashable)."""
        try:
            return pod in self._by_pod
        except TypeError:
            raise UnknownPodError(pod) from None

    def check_invariants(self) -> None:
        """Recompute usage from the per-pod charges and check every quota bound (isolated
        nominal, ceiling, the cohort's lendable pool); raise
        :class:`~kant.errors.InvariantError` (``"Admitter: ..."``) at the first difference.

        O(everything): for tests and debugging (:func:`kant.testing.check_invariants`)."""
        want: dict[tuple[str, str], int] = {}
        for t, m, milli in self._by_pod.values():
            if milli:
                want[(t, m)] = want.get((t, m), 0) + milli
        require(want == self._usage, f"Admitter: usage {self._usage} != recomputed {want}")
        tb = self.table
        if tb.unlimited:
            return
        for (t, m), u in self._usage.items():
            if tb.mode(t) is QuotaMode.ISOLATED:
                require(
                    u <= tb.nominal(t, m),
                    f"Admitter: isolated tenant {t} uses {u} > nominal on {m}",
                )
            require(u <= tb.ceiling(t, m), f"Admitter: tenant {t} uses {u} > its ceiling on {m}")
        led = self.ledger()
        for m, c in led.cohort.items():
            require(c <= tb.pool.get(m, 0), f"Admitter: cohort of {m} uses {c} > lendable pool")
