"""Frozen value objects: resources, jobs, roles, pods, nodes, bindings, victims and reasons.

Every class is an attrs frozen, keyword-only class. Construction validates every field and
raises a :class:`kant.errors.ValidationError` subclass naming the field and the value, so an
object that exists is well formed. Use :func:`attrs.evolve` for variants.

Units: GPU shares in *milli* (1000 = one whole GPU), CPU in milli-cores, memory in MiB,
times in seconds (floats, any epoch the caller likes, never the wall clock).
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeGuard, TypeVar

import attrs

from kant.errors import (
    InvalidBindingError,
    InvalidJobError,
    InvalidNodeError,
    InvalidResourcesError,
    InvalidTimeError,
    UnknownPolicyError,
    ValidationError,
)

MILLI = 1000
"""GPU milli per whole GPU."""

MAX_GPUS_PER_NODE = 64
"""GPU occupancy is kept as a 64-bit mask per node."""

MAX_NICS_PER_NODE = 64

MAX_PODS_PER_JOB = 1 << 17
"""Most pods one job may have over all its roles (131,072: a million GPUs in 8-GPU pods, more
than any cluster kant targets holds). A job's first cycle costs O(its pods), so a larger one
is refused at construction (:class:`~kant.errors.InvalidJobError`) rather than stall the
scheduler."""

MAX_CPU_MILLI = 1 << 40
"""Most CPU milli one node offers or one pod asks (about 10**9 cores): far above any machine,
and small enough that sums over a million nodes stay within the 64-bit columns."""

MAX_MEMORY_MIB = 1 << 40
"""Most memory (MiB) one node offers or one pod asks (1 EiB), for the same reason."""

MAX_PODS_PER_NODE = 1 << 20
"""Most pods a node's ``max_pods`` may allow (about a million: the kubelet's default is 110);
a larger limit is no limit in practice, and the bound keeps the limit far below the value
that stands for "no limit" in the columns."""


# --------------------------------------------------------------------------- enums


class Tier(enum.IntEnum):
    """Network tiers, from closest to farthest. Two nodes *share* the lowest tier that
    contains both. ``HBD`` (a scale-up Hyper Bandwidth Domain) is closer than a leaf: every GPU
    in an HBD talks to every other at scale-up bandwidth."""

    NODE = 0
    HBD = 1
    LEAF = 2
    SPINE = 3
    SUPERSPINE = 4
    CLUSTER = 5


class LinkKind(enum.IntEnum):
    """GPU-GPU (or GPU-NIC) link classes inside a node; lower is better."""

    SELF = 0
    NVLINK = 1
    PCIE_SWITCH = 2
    NUMA = 3
    CROSS_NUMA = 4


class JobKind(enum.StrEnum):
    """What a job is for. Placement may treat kinds differently (E-Spread may put small
    inference pods in its dedicated zone); a Job accepts the string values too."""

    TRAINING = "training"
    """A training job (the default), usually a gang."""
    INFERENCE = "inference"
    """An inference service; E-Spread may place its small pods in the dedicated zone."""
    DEV = "dev"
    """An interactive development job."""


class VictimReason(enum.StrEnum):
    """Why a victim may be evicted for its preemptor (the rule that made it eligible)."""

    PRIORITY = "priority"
    """The victim has a strictly lower priority than the preemptor."""
    RECLAIM = "reclaim"
    """The victim's tenant uses more than its nominal quota, and the preemptor's tenant stays
    within its own with this job (takes back what was borrowed)."""
    BACKFILL = "backfill"
    """The victim started behind the preemptor in the queue order while it waited (the
    Backfill head past its threshold)."""


class ReasonCode(enum.StrEnum):
    """Why a job (or pod) is not placed. A value, never an exception."""

    QUOTA_EXCEEDED = "quota_exceeded"
    """Static admission: the tenant's quota for a GPU model is used up."""
    INSUFFICIENT_CAPACITY = "insufficient_capacity"
    """Dynamic admission: the pool does not have enough free resources right now."""
    NO_FIT = "no_fit"
    """No node (set) can hold the pod(s) with the requested per-pod resources."""
    TOPOLOGY = "topology"
    """Capacity exists but not within the required topology tier."""
    NO_POOL = "no_pool"
    """No node of an allowed GPU model exists (unresolvable: preemption will not help)."""
    UNSATISFIABLE = "unsatisfiable"
    """The job could never fit, even with every node of its pools empty and healthy: more GPUs
    than its pools (or its required topology domain, or one node) hold, or more than its
    tenant's quota ceiling. It waits (the cluster may grow) but never blocks the queue, never
    becomes a Backfill or EASY head and never preempts."""
    BLOCKED = "blocked"
    """Strict FIFO: a job ahead of it is blocked."""
    RESERVED = "reserved"
    """EASY backfill: starting it would delay the head's reserved start."""
    BACKOFF = "backoff"
    """Requeued after a failure; waiting out its backoff."""
    PREEMPTING = "preempting"
    """Victims were chosen and are terminating; resources are nominated for this job."""
    FAILED = "failed"
    """Retry limit reached; the job will not be scheduled again."""


CAPACITY_CODES = frozenset(
    {ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.NO_FIT, ReasonCode.TOPOLOGY}
)
"""The job does not fit the free capacity now. Such a failure is the one fact both queueing
and preemption read: it makes the job the blocked head of the global queue (with
``PREEMPTING``, a job already waiting for its victims, see :data:`BLOCKING_CODES`), and it
may be resolved by preemption (with ``QUOTA_EXCEEDED``, which quota reclaim may resolve, see
:data:`PREEMPTIBLE_CODES`). ``NO_POOL`` is neither: no victim creates a node pool."""

BLOCKING_CODES = CAPACITY_CODES | {ReasonCode.PREEMPTING}
"""Failures that make a job the blocked head of the global queue (Strict FIFO stops there,
Backfill and EASY take it as their head). A quota failure concerns only its tenant."""

PREEMPTIBLE_CODES = CAPACITY_CODES | {ReasonCode.QUOTA_EXCEEDED}
"""Failures that preemption may resolve (a job already ``PREEMPTING`` does not preempt
again)."""


_V = TypeVar("_V")


def _shared(self: _V, memo: object = None) -> _V:
    """``copy.copy`` and ``copy.deepcopy`` of an immutable value object: the object itself
    (nothing in it can change, so a copy of whatever holds it may share it; a deep copy of a
    scheduler's state would otherwise rebuild every job, pod id and binding it holds)."""
    return self


@attrs.frozen(kw_only=True)
class Reason:
    """A typed, readable explanation: ``code`` for programs, ``message`` for people."""

    __copy__ = _shared
    __deepcopy__ = _shared

    code: ReasonCode
    message: str = ""

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}" if self.message else self.code.value


# --------------------------------------------------------------------------- validators


def is_int(v: object) -> TypeGuard[int]:
    """Whether ``v`` is an ``int`` and not a bool (``True`` is no count, index or seed)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_whole(v: object) -> TypeGuard[int]:
    """Whether ``v`` is a whole number of Python's or NumPy's (a :class:`numbers.Integral`)
    and not a bool: what kant takes as a count, slot or amount read off an array (typed as
    an ``int``, which NumPy's ints stand in for)."""
    return type(v) is int or (isinstance(v, numbers.Integral) and not isinstance(v, bool))


def is_number(v: object) -> bool:
    """Whether ``v`` is an ``int`` or a ``float`` and not a bool (NaN and inf included)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def is_finite_number(v: object) -> bool:
    """Whether ``v`` is a finite real number (a :class:`numbers.Real`: ``int``, ``float``,
    NumPy's ints and floats, ``Fraction``) and not a bool: NaN, the infinities and a value
    too large for a float (``10**400``, on which ``math.isfinite`` raises OverflowError) are
    not. What :func:`finite_number` accepts; a caller keeping the value takes ``float(v)``."""
    if type(v) is float:
        return math.isfinite(v)  # the usual calls, without a try block or an isinstance
    if type(v) is int and -_FLOAT_INT < v < _FLOAT_INT:
        return True
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:  # (an int or a fraction beyond the floats)
        return False


_FLOAT_INT: Final = 2**1000  # (ints below it in size are finite floats)


def finite_number(v: object, field: str, reason: str = "must be a finite number") -> float:
    """``v`` as a float if it is a finite real number (bools refused), else
    :class:`~kant.errors.ValidationError` naming ``field`` with ``reason`` (a caller checking
    a range too gives the same reason for both). For the arguments of the metrics' API."""
    if type(v) is float and math.isfinite(v):
        return v
    if type(v) is int and -_FLOAT_INT < v < _FLOAT_INT:
        return float(v)
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValidationError(field, v, reason)
    try:
        f = float(v)
    except OverflowError:  # (an int beyond the floats)
        f = math.inf
    if not math.isfinite(f):
        raise ValidationError(field, v, reason)
    return f


def finite_time(now: object, call: str, field: str = "now") -> float:
    """``now`` as a float if it is a finite real number (bools refused), else
    :class:`~kant.errors.InvalidTimeError` naming ``call`` (and ``field``, the argument's
    name): :func:`finite_number`'s check,
    its error as a time's. Every timestamp kant stores passes through this (or
    :meth:`kant.scheduler.Scheduler` 's clock, which also refuses a time earlier than the last
    one seen)."""
    if type(now) is float and math.isfinite(now):
        return now  # the usual call, without a try block
    try:
        return finite_number(now, field, f"{call}: must be a finite number of seconds")
    except ValidationError as e:
        raise InvalidTimeError(e.field, now, e.reason) from None


def flag(v: object, field: str, err: type[ValidationError] = ValidationError) -> bool:
    """``v`` if it is a bool, else :class:`~kant.errors.ValidationError` (or ``err``, one of
    its kinds: :class:`~kant.errors.InvalidConfigError` for a setting) naming ``field`` (an
    argument a string such as ``"no"`` would otherwise turn on)."""
    if not isinstance(v, bool):
        raise err(field, v, "must be True or False")
    return v


Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]
"""An attrs field validator: ``check(instance, attribute, value)``, raising on a bad value."""


def satisfies(err: type[ValidationError], pred: Callable[[Any], bool], reason: str) -> Validator:
    """An attrs validator: ``pred(value)`` must be true, else ``err(field, value, reason)``.

    The general case, for checks of a structure the factories below do not cover (a tuple
    of distinct device ids, a non-empty tuple of uniquely named roles). Costs one call of
    ``pred``."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        try:
            ok = bool(pred(value))
        except (TypeError, ValueError):  # (an array's ambiguous truth, an unhashable value)
            ok = False
        if not ok:
            raise err(attribute.name, value, reason)

    return check


def _number_reason(
    *,
    low: float | None,
    low_inclusive: bool,
    high: float | None,
    high_inclusive: bool,
    finite: bool,
    integer: bool,
    optional: bool,
    unit: str | None,
) -> str:
    what = "an int" if integer else "a finite number" if finite else "a number"
    if low is not None and high is not None:
        lo, hi = "[" if low_inclusive else "(", "]" if high_inclusive else ")"
        bounds = f" in {lo}{low}, {high}{hi}"
    elif low is not None:
        bounds = f" {'>=' if low_inclusive else '>'} {low}"
    elif high is not None:
        bounds = f" {'<=' if high_inclusive else '<'} {high}"
    else:
        bounds = ""
    return f"must be {'None or ' if optional else ''}{what}{bounds}{f' ({unit})' if unit else ''}"


def number(
    err: type[ValidationError],
    *,
    low: float | None = None,
    low_inclusive: bool = True,
    high: float | None = None,
    high_inclusive: bool = False,
    finite: bool = False,
    integer: bool = False,
    optional: bool = False,
    unit: str | None = None,
    reason: str | None = None,
) -> Validator:
    """An attrs validator for a number, else ``err(field, value, reason)``.

    The value must be an ``int`` or ``float`` (bools always refused; ``integer``: an ``int``
    only), ``finite`` if asked (no infinity, no NaN), at least ``low`` (``low_inclusive``,
    else above it) and below ``high`` (``high_inclusive``: at most it). ``optional`` also
    accepts None. A bound always refuses NaN. The reason is derived from the arguments,
    e.g. ``"must be None or an int >= 1"``, ``"must be a finite number > 0"``, ``"must be a
    number in [0, 1)"``, with `` (unit)`` appended when ``unit`` is given; ``reason``
    replaces it. Costs a few comparisons per value (it runs on every construction of a
    :class:`Binding` or :class:`PodId`)."""
    kinds: Any = int if integer else (int, float)
    check_finite = finite and not integer
    why = reason or _number_reason(
        low=low,
        low_inclusive=low_inclusive,
        high=high,
        high_inclusive=high_inclusive,
        finite=finite,
        integer=integer,
        optional=optional,
        unit=unit,
    )

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise err(attribute.name, value, why)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**1000:
            raise err(attribute.name, value, why)  # (beyond the floats: isfinite would raise)
        if (
            (check_finite and not math.isfinite(value))
            or (low is not None and not (value >= low if low_inclusive else value > low))
            or (high is not None and not (value <= high if high_inclusive else value < high))
        ):
            raise err(attribute.name, value, why)

    return check


NAME_REASON: Final = "must be a non-empty string without surrounding spaces or '/'"
"""Why a value is no name (:func:`is_name`, :func:`name`)."""


def is_name(v: object, *, slash: bool = False, spaces: bool = False) -> bool:
    """Whether ``v`` is a name: a non-empty ``str`` without surrounding whitespace (unless
    ``spaces``) and without ``'/'`` (unless ``slash``), as a node's ``zone``, ``leaf`` or
    ``gpu_model`` must be. O(len(v))."""
    return isinstance(v, str) and bool(v) and (spaces or v.strip() == v) and (slash or "/" not in v)


GPU_MODEL_REASON: Final = (
    "must be a non-empty string without surrounding spaces, '/' or '|' ('|' joins GPU "
    "models, as in 'A100|H100')"
)
"""Why a value is no GPU model name (:func:`is_gpu_model`)."""

GPU_MODEL_SLASH_REASON: Final = (
    "must be a GPU model name: non-empty, without surrounding spaces or '|' ('|' joins "
    "GPU models, as in 'A100|H100')"
)
"""Why a value is no GPU model name where ``'/'`` is allowed (``is_gpu_model(v, slash=True)``:
a quota's model, a trace inventory's)."""


def is_gpu_model(v: object, *, slash: bool = False) -> bool:
    """Whether ``v`` can name a GPU model (a node pool): a name (:func:`is_name`; ``'/'``
    allowed when ``slash``) without ``'|'``, which joins models in their string form
    (:func:`split_gpu_models`: a role's ``gpu_models`` given as a string, the openb
    ``gpu_spec`` cell): a model ``"A|B"`` would be read back there as two models ``A`` and
    ``B``. O(len(v))."""
    return is_name(v, slash=slash) and "|" not in v  # type: ignore[operator]


def name(
    err: type[ValidationError],
    *,
    slash: bool = False,
    spaces: bool = False,
    reason: str | None = None,
) -> Validator:
    """An attrs validator for a name: a non-empty ``str`` without surrounding whitespace and
    without ``'/'`` (``"/"`` joins names into pod ids and paths), else
    ``err(field, value, reason)``. ``slash`` allows ``'/'``, ``spaces`` surrounding
    whitespace; ``reason`` replaces the default
    ``"must be a non-empty string without surrounding spaces or '/'"``. For an optional
    name wrap it in :func:`attrs.validators.optional`. O(len(value))."""
    why = reason or NAME_REASON

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not is_name(value, slash=slash, spaces=spaces):
            raise err(attribute.name, value, why)

    return check


def one_of(
    err: type[ValidationError], choices: Collection[Any], *, reason: str | None = None
) -> Validator:
    """An attrs validator: the value must be ``in choices``, else
    ``err(field, value, reason)``. The default reason lists the choices: ``"must be 'a' or
    'b'"`` for two, ``"must be one of ['a', 'b', 'c']"`` otherwise. One ``in`` test."""
    if reason is None:
        opts = list(choices)
        reason = (
            f"must be {opts[0]!r} or {opts[1]!r}" if len(opts) == 2 else f"must be one of {opts}"
        )
    why = reason

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        try:
            # (hashed too: a one-element array equals its element, and is no choice)
            ok = value in choices and hash(value) is not None
        except (TypeError, ValueError):  # (an array's ambiguous truth, an unhashable value)
            ok = False
        if not ok:
            raise err(attribute.name, value, why)

    return check


def instance_of(
    err: type[ValidationError], kind: type, *, optional: bool = False, reason: str | None = None
) -> Validator:
    """An attrs validator: the value must be an instance of ``kind`` (or None when
    ``optional``), else ``err(field, value, reason)``; the default reason is ``"must be a
    <kind>"`` (``"must be a <kind> or None"``). Unlike :func:`attrs.validators.instance_of`
    it raises a :class:`kant.errors.ValidationError`, not ``TypeError``. One isinstance."""
    why = reason or f"must be a {kind.__name__}{' or None' if optional else ''}"

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, kind) and not (optional and value is None):
            raise err(attribute.name, value, why)

    return check


def tuple_of(err: type[ValidationError], kind: type) -> Validator:
    """An attrs validator: a tuple of ``kind`` instances (a list is converted before, by
    the field's converter), else ``err(field, value, "must be a tuple of <kind>s")``.
    O(items)."""
    return satisfies(
        err,
        lambda v: isinstance(v, tuple) and all(isinstance(x, kind) for x in v),
        f"must be a tuple of {kind.__name__}s",
    )


def registered(
    kind: str, names: Callable[[], Collection[str]], *, fold_case: bool = False
) -> Validator:
    """An attrs validator: the value must be one of ``names()`` (read at each check, so
    policies registered later count), else :class:`kant.errors.UnknownPolicyError` naming
    the ``kind`` of policy and listing ``names()``. ``fold_case``: the value must be a
    ``str`` whose lower case is a name. Costs one ``names()`` call."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        known = names()
        ok = (isinstance(value, str) and value.lower() in known) if fold_case else value in known
        if not ok:
            raise UnknownPolicyError(kind, value, names())

    return check


def finite_nonneg(err: type[ValidationError]) -> Validator:
    """An attrs validator: a finite number >= 0 (bools refused), else ``err``
    (``number(err, low=0, finite=True)``)."""
    return number(err, low=0, finite=True)


def nonneg_or_inf(err: type[ValidationError]) -> Validator:
    """An attrs validator: a number >= 0, infinity allowed (meaning "never"), NaN and bools
    refused, else ``err`` (``number(err, low=0)``)."""
    return number(err, low=0)


def opt_pos_int(err: type[ValidationError]) -> Validator:
    """An attrs validator: None or an int >= 1 (bools refused), else ``err``
    (``number(err, low=1, integer=True, optional=True)``)."""
    return number(err, low=1, integer=True, optional=True)


def _upto(err: type[ValidationError], cap: int) -> Validator:
    """An int in [0, cap] (a CPU or memory amount), else ``err``."""
    return number(err, low=0, high=cap, high_inclusive=True, integer=True)


# --------------------------------------------------------------------------- resources


@attrs.frozen(kw_only=True, cache_hash=True)
class Resources:
    """Per-pod resource request (or a node's capacity).

    ``gpus`` whole GPUs, or a share of one GPU: ``gpu_milli`` in 1..999 with ``gpus == 0``
    (a fractional pod never spans devices). ``rdma_nics`` RDMA NICs, placed next to the GPUs.
    """

    __copy__ = _shared
    __deepcopy__ = _shared

    gpus: int = attrs.field(default=0, validator=number(InvalidResourcesError, low=0, integer=True))
    gpu_milli: int = attrs.field(
        default=0, validator=number(InvalidResourcesError, low=0, integer=True)
    )
    cpu_milli: int = attrs.field(
        default=0,
        validator=_upto(InvalidResourcesError, MAX_CPU_MILLI),
    )
    memory_mib: int = attrs.field(
        default=0,
        validator=_upto(InvalidResourcesError, MAX_MEMORY_MIB),
    )
    rdma_nics: int = attrs.field(
        default=0, validator=number(InvalidResourcesError, low=0, integer=True)
    )

    def __attrs_post_init__(self) -> None:
        if self.gpu_milli >= MILLI:
            raise InvalidResourcesError(
                "gpu_milli", self.gpu_milli, "a GPU share must be below 1000; use gpus=N"
            )
        if self.gpu_milli and self.gpus:
            raise InvalidResourcesError(
                "gpu_milli", self.gpu_milli, f"a share cannot be combined with gpus={self.gpus}"
            )
        if self.gpus > MAX_GPUS_PER_NODE:
            raise InvalidResourcesError(
                "gpus", self.gpus, f"a pod runs on one node (at most {MAX_GPUS_PER_NODE} GPUs)"
            )

    @property
    def total_milli(self) -> int:
        """GPU request in milli: ``gpus * 1000 + gpu_milli``."""
        return self.gpus * MILLI + self.gpu_milli

    @property
    def is_shared(self) -> bool:
        """True for a share of one GPU (``gpu_milli > 0``)."""
        return self.gpu_milli > 0

    @property
    def gpu_units(self) -> float:
        """GPU request in whole GPUs (``total_milli / 1000``; a share is a fraction)."""
        return self.total_milli / MILLI


# --------------------------------------------------------------------------- jobs


@attrs.frozen(kw_only=True, cache_hash=True)
class TopologyWish:
    """Where the pods of a role should sit relative to each other.

    ``tier`` is the widest tier allowed (``LEAF`` = all in one leaf). ``required`` makes it a
    hard constraint; otherwise it is a preference (best effort, tightest first).
    """

    tier: Tier = attrs.field(validator=instance_of(InvalidJobError, Tier))
    required: bool = attrs.field(
        default=False,
        validator=instance_of(InvalidJobError, bool),
    )


class ReadOnlyDict(dict[str, Any]):
    """A dict that refuses every change (TypeError), read at a dict's speed: what a kept
    result shares between the callers it is answered to (see
    :func:`kant.cycle.schedule_cycle`). Copies and pickles as a read-only dict of the same
    items; ``dict(d)`` gives a copy to change."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> ReadOnlyDict:
        self = super().__new__(cls)
        dict.__init__(self, *args, **kwargs)  # filled once, here
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """(Filled by ``__new__``: initialising it again changes nothing.)"""

    def _refuse(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("a read-only dict: change a copy, dict(d)")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type[ReadOnlyDict], tuple[dict[str, Any]]]:
        return (type(self), (dict(self),))


class Labels(ReadOnlyDict):
    """A node's labels: a read-only ``str -> str`` mapping that hashes (by its items), so a
    :class:`NodeSpec` stays a hashable value."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


NO_LABELS: Final = Labels()
"""The labels of a node that has none (one shared, read-only mapping)."""


def _to_labels(v: Any) -> Any:
    if type(v) is Labels:
        return v
    return Labels(v) if isinstance(v, Mapping) else v


# --------------------------------------------------------------------------- node selection


def _to_tuple(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


MAX_LABEL_KEY = 317
"""Longest label key (a 253-character prefix, ``/`` and a 63-character name, as Kubernetes)."""
MAX_LABEL_VALUE = 253
"""Longest label, taint or toleration value (Kubernetes allows 63; kant is not stricter than a
DNS name)."""


def _label_key_ok(v: object) -> bool:
    return is_name(v, slash=True) and len(v) <= MAX_LABEL_KEY  # type: ignore[arg-type]


def _label_value_ok(v: object) -> bool:
    return isinstance(v, str) and v.strip() == v and len(v) <= MAX_LABEL_VALUE


def is_label(key: object, value: object) -> bool:
    """Whether ``key: value`` can be one of a node's labels (:attr:`NodeSpec.labels`): a
    label key (a name, ``'/'`` allowed, at most :data:`MAX_LABEL_KEY` characters) and a
    label value (a string without surrounding spaces, at most :data:`MAX_LABEL_VALUE`)."""
    return _label_key_ok(key) and _label_value_ok(value)


class SelectorOp(enum.StrEnum):
    """How a :class:`NodeRequirement` reads a node's label (Kubernetes' node selector
    operators)."""

    IN = "In"
    """The label is set to one of the values."""
    NOT_IN = "NotIn"
    """The label is not set, or set to none of the values."""
    EXISTS = "Exists"
    """The label is set (no values)."""
    DOES_NOT_EXIST = "DoesNotExist"
    """The label is not set (no values)."""
    GT = "Gt"
    """The label is an integer greater than the one value."""
    LT = "Lt"
    """The label is an integer less than the one value."""


_OPS: Final = frozenset(o.value for o in SelectorOp)

NODE_NAME_FIELD: Final = "metadata.name"
"""The key of a requirement on the node's name instead of a label (``field=True``; Kubernetes'
``matchFields`` knows only this field)."""


def _to_values(v: Any) -> Any:
    if isinstance(v, str):
        return (v,)
    if isinstance(v, Collection):
        # sorted and without repeats, so equal requirements compare and hash equal
        return tuple(sorted(set(v))) if all(isinstance(x, str) for x in v) else tuple(v)
    return v


def _to_op(v: Any) -> Any:
    return SelectorOp(v) if isinstance(v, str) and v in _OPS else v


def _as_int(v: str) -> int | None:
    """A label value read as a 64-bit integer (Kubernetes' Gt / Lt), None when it is not
    one."""
    s = v[1:] if v[:1] in "+-" else v
    if not s or not s.isascii() or not s.isdigit() or len(s) > 19:
        return None
    n = int(v)
    return n if -(1 << 63) <= n < 1 << 63 else None


_SHORT_VALUES: Final = 8
"""The longest value list a :class:`NodeRequirement` reads as it is (a set beyond)."""


@attrs.frozen(kw_only=True, cache_hash=True)
class NodeRequirement:
    """One requirement a node must meet: ``key`` (a label, or the node's name when
    ``field``) read by ``operator`` against ``values`` (kept sorted, without repeats). ``In``
    and ``NotIn`` take at least one value, ``Exists`` and ``DoesNotExist`` none, ``Gt`` and
    ``Lt`` exactly one integer. A requirement on the name (``field=True``, ``key`` must be
    ``metadata.name``) takes ``In`` or ``NotIn``."""

    key: str = attrs.field(
        validator=satisfies(InvalidJobError, _label_key_ok, "must be a label key")
    )
    operator: SelectorOp = attrs.field(
        converter=_to_op,
        validator=instance_of(
            InvalidJobError, SelectorOp, reason=f"must be one of {[o.value for o in SelectorOp]}"
        ),
    )
    values: tuple[str, ...] = attrs.field(
        default=(),
        converter=_to_values,
        validator=satisfies(
            InvalidJobError,
            lambda v: isinstance(v, tuple) and all(_label_value_ok(x) for x in v),
            "must be label values",
        ),
    )
    field: bool = attrs.field(default=False, validator=instance_of(InvalidJobError, bool))
    value_set: frozenset[str] | None = attrs.field(init=False, default=None, eq=False, repr=False)
    """The values as a set when there are more than a few (a pod affinity term about the
    pods of thousands of namespaces): :meth:`matches` and :meth:`matches_labels` stay O(1)
    (kept, not computed; None for a short list, read as it is)."""

    def __attrs_post_init__(self) -> None:
        op, n = self.operator, len(self.values)
        if n > _SHORT_VALUES:
            object.__setattr__(self, "value_set", frozenset(self.values))
        if op in (SelectorOp.IN, SelectorOp.NOT_IN) and not n:
            raise InvalidJobError("values", self.values, f"{op.value} needs at least one value")
        if op in (SelectorOp.EXISTS, SelectorOp.DOES_NOT_EXIST) and n:
            raise InvalidJobError("values", self.values, f"{op.value} takes no value")
        if op in (SelectorOp.GT, SelectorOp.LT) and (n != 1 or _as_int(self.values[0]) is None):
            raise InvalidJobError("values", self.values, f"{op.value} takes one integer")
        if self.field and (self.key != NODE_NAME_FIELD or n == 0 or op not in (
            SelectorOp.IN, SelectorOp.NOT_IN
        )):  # fmt: skip
            raise InvalidJobError(
                "field", self.key, f"a field requirement is {NODE_NAME_FIELD} In or NotIn names"
            )

    def matches(self, node: NodeSpec) -> bool:
        """Whether ``node`` meets the requirement. O(1)."""
        return self._holds(node.name if self.field else node.labels.get(self.key))

    def matches_labels(self, labels: Mapping[str, str]) -> bool:
        """Whether a set of labels (a pod's, for a :class:`PodAffinityTerm`) meets the
        requirement, read as a label requirement. O(1)."""
        return self._holds(labels.get(self.key))

    def _holds(self, v: str | None) -> bool:
        """Whether the value ``v`` (None: the label is not set) meets the requirement."""
        op = self.operator
        if op is SelectorOp.IN:
            return v is not None and v in (self.value_set or self.values)
        if op is SelectorOp.NOT_IN:
            return v is None or v not in (self.value_set or self.values)
        if op is SelectorOp.EXISTS:
            return v is not None
        if op is SelectorOp.DOES_NOT_EXIST:
            return v is None
        have = None if v is None else _as_int(v)
        if have is None:
            return False
        want = int(self.values[0])
        return have > want if op is SelectorOp.GT else have < want


def _to_terms(v: Any) -> Any:
    if isinstance(v, NodeRequirement):
        return ((v,),)
    if isinstance(v, Collection) and not isinstance(v, str):
        return tuple(
            tuple(t) if isinstance(t, Collection) and not isinstance(t, str) else t for t in v
        )
    return v


def _terms_ok(v: Any) -> bool:
    return (
        isinstance(v, tuple)
        and bool(v)
        and all(
            isinstance(t, tuple) and t and all(isinstance(r, NodeRequirement) for r in t) for t in v
        )
    )


@attrs.frozen(kw_only=True, cache_hash=True)
class NodeSelector:
    """The nodes a role may run on: those meeting every requirement of at least one term
    (Kubernetes' required node affinity; its ``nodeSelector`` map is one more requirement in
    each term). At least one term, each of at least one requirement."""

    terms: tuple[tuple[NodeRequirement, ...], ...] = attrs.field(
        converter=_to_terms,
        validator=satisfies(
            InvalidJobError, _terms_ok, "must be one or more non-empty tuples of NodeRequirements"
        ),
    )

    @property
    def reads_names(self) -> bool:
        """Whether a requirement reads the node's name (``field=True``)."""
        return any(r.field for t in self.terms for r in t)

    def matches(self, node: NodeSpec) -> bool:
        """Whether ``node`` meets every requirement of some term. O(requirements)."""
        return any(all(r.matches(node) for r in t) for t in self.terms)

    @classmethod
    def labels(cls, **labels: str) -> NodeSelector:
        """Nodes with all these labels set to these values (Kubernetes' ``nodeSelector``)."""
        return cls(terms=(tuple(NodeRequirement(key=k, operator=SelectorOp.IN, values=(v,))
                                for k, v in sorted(labels.items())),))  # fmt: skip


MAX_PREFERENCE_WEIGHT: Final = 100
"""The largest weight of a :class:`PreferredTerm` (Kubernetes' bound)."""


@attrs.frozen(kw_only=True, cache_hash=True)
class PreferredTerm:
    """A node a role prefers (Kubernetes' preferred node affinity term): a node meeting every
    one of ``requirements`` (at least one) gains ``weight`` (1 to 100) in the role's
    preference (:meth:`Role.preference`)."""

    weight: int = attrs.field(
        validator=number(
            InvalidJobError, low=1, high=MAX_PREFERENCE_WEIGHT, high_inclusive=True, integer=True
        )
    )
    requirements: tuple[NodeRequirement, ...] = attrs.field(
        converter=_to_tuple,
        validator=satisfies(
            InvalidJobError,
            lambda v: (
                isinstance(v, tuple) and bool(v) and all(isinstance(r, NodeRequirement) for r in v)
            ),
            "must be a non-empty tuple of NodeRequirements",
        ),
    )

    def matches(self, node: NodeSpec) -> bool:
        """Whether ``node`` meets every requirement. O(requirements)."""
        return all(r.matches(node) for r in self.requirements)


HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
"""The topology key of one node: a node without this label answers its name for it (every
Kubernetes node carries it, set to its name)."""


def topology_value(node: NodeSpec, key: str) -> str | None:
    """The value of ``node`` for the topology key ``key`` (its label; its name for
    :data:`HOSTNAME_LABEL` when it has no such label), None when it has none. O(1)."""
    v = node.labels.get(key)
    if v is None and key == HOSTNAME_LABEL:
        return node.name
    return v


def _pod_selector_ok(v: Any) -> bool:
    return isinstance(v, tuple) and all(
        isinstance(r, NodeRequirement)
        and not r.field
        and r.operator not in (SelectorOp.GT, SelectorOp.LT)
        for r in v
    )


@attrs.frozen(kw_only=True, cache_hash=True)
class PodAffinityTerm:
    """A required term of pod affinity or anti-affinity (Kubernetes' ``PodAffinityTerm``):
    the pods it is about are those whose labels meet every requirement of ``selector``
    (``In``, ``NotIn``, ``Exists`` or ``DoesNotExist`` on pod labels; an empty selector is
    about every pod), and ``topology_key`` is the node label whose value makes a domain (the
    nodes with one value of it; :data:`HOSTNAME_LABEL`, the default, is each node alone).

    In :attr:`Role.pod_affinity` a pod may go only where such a pod runs in the same domain;
    in :attr:`Role.pod_anti_affinity`, never where one runs in the same domain, and no such
    pod may come to its domain afterwards. Kubernetes scopes a term to namespaces: kant has
    labels only, so a namespace is a label too (the Kubernetes shim gives every pod its
    namespace as the label ``kant.io/namespace`` and every term a requirement on it)."""

    selector: tuple[NodeRequirement, ...] = attrs.field(
        default=(),
        converter=_to_tuple,
        validator=satisfies(
            InvalidJobError,
            _pod_selector_ok,
            "must be a tuple of NodeRequirements on labels (In, NotIn, Exists, DoesNotExist)",
        ),
    )
    topology_key: str = attrs.field(
        default=HOSTNAME_LABEL,
        validator=satisfies(InvalidJobError, _label_key_ok, "must be a label key"),
    )

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with ``labels`` is one the term is about. O(requirements)."""
        return all(r.matches_labels(labels) for r in self.selector)


@attrs.frozen(kw_only=True, cache_hash=True)
class PreferredPodTerm:
    """A soft pod affinity (``anti=False``) or anti-affinity (``anti=True``) term
    (Kubernetes' ``WeightedPodAffinityTerm``): a node gains ``weight`` (1 to 100) for each
    pod ``term`` selects in its domain, or loses it with ``anti``; a pod placed on its own
    goes to a node of the best sum among those it may use."""

    weight: int = attrs.field(
        validator=number(
            InvalidJobError, low=1, high=MAX_PREFERENCE_WEIGHT, high_inclusive=True, integer=True
        )
    )
    term: PodAffinityTerm = attrs.field(validator=instance_of(InvalidJobError, PodAffinityTerm))
    anti: bool = attrs.field(default=False, validator=instance_of(InvalidJobError, bool))


class TaintEffect(enum.StrEnum):
    """What a node's :class:`Taint` does to pods that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"
    """No new pod is placed on the node."""
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    """A preference only: pods that do not tolerate it go to other nodes first
    (:meth:`Role.preference`)."""
    NO_EXECUTE = "NoExecute"
    """No new pod is placed on the node (running ones are the orchestrator's to evict)."""


_EFFECTS: Final = frozenset(e.value for e in TaintEffect)

HARD_EFFECTS: Final = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})
"""The taint effects that keep a pod that does not tolerate them off a node."""


def _to_effect(v: Any) -> Any:
    return TaintEffect(v) if isinstance(v, str) and v in _EFFECTS else v


_EFFECT_REASON: Final = f"must be one of {[e.value for e in TaintEffect]}"


@attrs.frozen(kw_only=True, cache_hash=True)
class Taint:
    """A node's taint: pods that do not tolerate it keep off the node when its ``effect`` is
    ``NoSchedule`` or ``NoExecute``."""

    key: str = attrs.field(
        validator=satisfies(InvalidNodeError, _label_key_ok, "must be a label key")
    )
    value: str = attrs.field(
        default="", validator=satisfies(InvalidNodeError, _label_value_ok, "must be a label value")
    )
    effect: TaintEffect = attrs.field(
        converter=_to_effect,
        validator=instance_of(InvalidNodeError, TaintEffect, reason=_EFFECT_REASON),
    )


@attrs.frozen(kw_only=True, cache_hash=True)
class Toleration:
    """A role tolerates a taint when the effects agree (``effect`` None: every effect), the
    keys agree (``key`` empty with ``Exists``: every key) and, with ``Equal``, the values
    agree (Kubernetes' rule)."""

    key: str = attrs.field(
        default="",
        validator=satisfies(
            InvalidJobError,
            lambda v: isinstance(v, str) and (not v or _label_key_ok(v)),
            "must be a label key or ''",
        ),
    )
    operator: str = attrs.field(
        default="Equal", validator=one_of(InvalidJobError, ("Equal", "Exists"))
    )
    value: str = attrs.field(
        default="", validator=satisfies(InvalidJobError, _label_value_ok, "must be a label value")
    )
    effect: TaintEffect | None = attrs.field(
        default=None,
        converter=_to_effect,
        validator=instance_of(
            InvalidJobError, TaintEffect, optional=True, reason=_EFFECT_REASON + " or None"
        ),
    )

    def __attrs_post_init__(self) -> None:
        if self.operator == "Exists" and self.value:
            raise InvalidJobError("value", self.value, "an Exists toleration takes no value")
        if not self.key and self.operator != "Exists":
            raise InvalidJobError("key", "", "an empty key tolerates every taint only with Exists")

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration lets a pod onto a node with ``taint``. O(1)."""
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


GPU_MODELS_REASON: Final = (
    "must be a set of GPU model names (non-empty, without surrounding spaces or '|'), or a "
    "string of them joined by '|' ('' means any model)"
)
"""Why a value is no ``gpu_models`` (:func:`split_gpu_models`, :func:`are_gpu_models`)."""


def are_gpu_models(v: object) -> bool:
    """Whether ``v`` is a ``gpu_models`` value as the fields keep it (after
    :func:`to_gpu_models`): a frozenset of GPU model names (:func:`is_gpu_model`, ``'/'``
    allowed). A name holding ``'|'`` is refused: its string form (``"A|B"``) names two
    models. O(total length of the names)."""
    return isinstance(v, frozenset) and all(is_gpu_model(m, slash=True) for m in v)


def split_gpu_models(text: str) -> frozenset[str] | None:
    """The GPU models an openb-style string names: ``"A100|H100"`` -> ``{"A100", "H100"}``,
    ``""`` -> none (any model). None when a name between the pipes is empty or has
    surrounding spaces (``"|"``, ``" | "``, ``"A100||H100"``, ``"A100|"``): such a string is
    refused, not read as any model or as the names that are left. O(len(text))."""
    if not text:
        return frozenset()
    parts = text.split("|")
    if not all(p and p.strip() == p for p in parts):
        return None
    return frozenset(parts)


def to_gpu_models(v: Any) -> frozenset[str]:
    """The converter of a ``gpu_models`` field (a :class:`Role`'s, a packing task class's,
    an openb record's): a string of names joined by ``|`` (:func:`split_gpu_models`) or a
    collection of names, as a frozenset. Anything else, a refused string or an unhashable
    entry included, is returned as given, for the field's validator to refuse naming it."""
    if isinstance(v, str):
        models = split_gpu_models(v)
        return v if models is None else models  # type: ignore[return-value]  # (refused)
    if isinstance(v, frozenset | set | list | tuple):
        try:
            return frozenset(v)
        except TypeError:  # (a list or dict among them: not hashable, and no name either)
            pass
    return v  # type: ignore[no-any-return]  # the validator rejects it with a clear message


@attrs.frozen(kw_only=True)
class Role:
    """A homogeneous set of pods of a job (``worker x 64``, ``prefill x 4``...).

    ``gpu_models`` are the allowed GPU models (node pools); empty means any model. A string
    is read in the openb syntax (:func:`split_gpu_models`): ``"A100|H100"``, ``""`` for any;
    one with an empty or space-padded name (``"|"``, ``"A100||H100"``) is refused.
    ``spread`` asks for pods on different nodes (inference availability); a role of more
    than one replica that requires one node (``TopologyWish(tier=NODE, required=True)``)
    cannot ask for it.
    ``max_per_node`` (None: no limit) is a hard cap on this role's pods on any one node,
    counting the ones already running (an inference service's per-node instance limit, the
    ``max_instance_per_node`` of Alibaba's DLRM trace); the Placer never exceeds it.
    ``node_selector`` (None: any node) and ``tolerations`` restrict the nodes by their labels
    and taints (:meth:`can_run_on`), as Kubernetes' required node affinity and tolerations do.
    ``preferred`` (Kubernetes' preferred node affinity) and the ``PreferNoSchedule`` taints
    the role does not tolerate order the nodes it may use (:meth:`preference`): the Placer
    tries the most preferred nodes first.
    ``labels`` are the labels of the role's pods; ``pod_affinity`` and ``pod_anti_affinity``
    (:class:`PodAffinityTerm`) are Kubernetes' required inter-pod affinity and anti-affinity,
    read against the pods running and placed before, and ``pod_preferences``
    (:class:`PreferredPodTerm`) its preferred ones (docs/placement.md, "Pod affinity").
    """

    __copy__ = _shared
    __deepcopy__ = _shared

    name: str = attrs.field(default="worker", validator=name(InvalidJobError))
    replicas: int = attrs.field(
        default=1,
        validator=number(
            InvalidJobError, low=1, high=MAX_PODS_PER_JOB, high_inclusive=True, integer=True
        ),
    )
    resources: Resources = attrs.field(
        factory=Resources,
        validator=instance_of(InvalidJobError, Resources),
    )
    gpu_models: frozenset[str] = attrs.field(
        factory=frozenset,
        converter=to_gpu_models,
        validator=satisfies(InvalidJobError, are_gpu_models, GPU_MODELS_REASON),
    )
    topology: TopologyWish | None = attrs.field(
        default=None,
        validator=instance_of(InvalidJobError, TopologyWish, optional=True),
    )
    spread: bool = attrs.field(default=False, validator=instance_of(InvalidJobError, bool))
    max_per_node: int | None = attrs.field(
        default=None,
        validator=number(
            InvalidJobError,
            low=1,
            high=MAX_PODS_PER_JOB,
            high_inclusive=True,
            integer=True,
            optional=True,
        ),
    )
    node_selector: NodeSelector | None = attrs.field(
        default=None, validator=instance_of(InvalidJobError, NodeSelector, optional=True)
    )
    tolerations: tuple[Toleration, ...] = attrs.field(
        default=(),
        converter=_to_tuple,
        validator=tuple_of(InvalidJobError, Toleration),
    )
    preferred: tuple[PreferredTerm, ...] = attrs.field(
        default=(),
        converter=_to_tuple,
        validator=tuple_of(InvalidJobError, PreferredTerm),
    )
    labels: Labels = attrs.field(
        default=NO_LABELS,
        converter=_to_labels,
        validator=satisfies(
            InvalidJobError,
            lambda v: (
                isinstance(v, Labels)
                and all(_label_key_ok(k) and _label_value_ok(x) for k, x in v.items())
            ),
            "must map label keys to label values",
        ),
    )
    pod_affinity: tuple[PodAffinityTerm, ...] = attrs.field(
        default=(),
        converter=_to_tuple,
        validator=tuple_of(InvalidJobError, PodAffinityTerm),
    )
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = attrs.field(
        default=(),
        converter=_to_tuple,
        validator=tuple_of(InvalidJobError, PodAffinityTerm),
    )
    pod_preferences: tuple[PreferredPodTerm, ...] = attrs.field(
        default=(),
        converter=_to_tuple,
        validator=tuple_of(InvalidJobError, PreferredPodTerm),
    )

    @property
    def placement_key(self) -> tuple[Any, ...]:
        """What placing the role's pods reads of it besides its name, replicas and GPU
        models: two roles with equal keys, models and pod counts place alike on one
        snapshot. The cycle's memos of jobs alike key on it (failed placement shapes,
        never-fit answers, hopeless preemption requests), so a field placement comes to
        read belongs here."""
        return (
            self.resources,
            self.topology,
            self.spread,
            self.max_per_node,
            self.node_selector,
            self.tolerations,
            self.preferred,
            self.labels or None,  # (None hashes at once; labels hash by their items)
            self.pod_affinity,
            self.pod_anti_affinity,
            self.pod_preferences,
        )

    def can_run_on(self, node: NodeSpec) -> bool:
        """Whether the role's pods may be placed on ``node`` by its labels and taints: the
        node meets :attr:`node_selector` (if any) and every ``NoSchedule`` / ``NoExecute``
        taint of the node is tolerated. Models and capacity are not read here.
        O(requirements + taints x tolerations)."""
        sel = self.node_selector
        if sel is not None and not sel.matches(node):
            return False
        return all(
            any(t.tolerates(taint) for t in self.tolerations)
            for taint in node.taints
            if taint.effect in HARD_EFFECTS
        )

    @property
    def scoring_terms(self) -> tuple[PodAffinityTerm, ...]:
        """The terms by which a running pod of this role weighs in the score of the pods they
        select (Kubernetes' symmetric score): its required affinity terms and its preferred
        terms'. O(terms)."""
        return (*self.pod_affinity, *(p.term for p in self.pod_preferences))

    def preference(self, node: NodeSpec) -> tuple[int, int]:
        """How much the role prefers ``node``, as a sort key (smaller first): the node's
        ``PreferNoSchedule`` taints the role does not tolerate, then minus the weights of its
        :attr:`preferred` terms the node meets. Avoiding such a taint comes before any
        affinity weight, as kube-scheduler's default weights make it in practice (its taint
        score weighs 3, its affinity score 2, each normalised over the nodes).
        O(terms x requirements + taints x tolerations)."""
        avoid = sum(
            1
            for taint in node.taints
            if taint.effect is TaintEffect.PREFER_NO_SCHEDULE
            and not any(t.tolerates(taint) for t in self.tolerations)
        )
        return avoid, -sum(t.weight for t in self.preferred if t.matches(node))

    def __attrs_post_init__(self) -> None:
        wish = self.topology
        cap = self.max_per_node
        one_node = wish is not None and wish.required and wish.tier is Tier.NODE
        if one_node and self.spread and self.replicas > 1:
            raise InvalidJobError(
                "spread",
                True,
                f"a role that requires one node for its {self.replicas} replicas cannot "
                "spread them over nodes",
            )
        if one_node and cap is not None and self.replicas > cap:
            raise InvalidJobError(
                "max_per_node",
                cap,
                f"a role that requires one node for its {self.replicas} replicas cannot "
                f"allow only {cap} per node",
            )

    @property
    def total_milli(self) -> int:
        """GPU request of all the role's pods, in milli."""
        return self.replicas * self.resources.total_milli


class _PodFields(NamedTuple):
    job: str
    role: str
    index: int  # type: ignore[assignment]  # (shadows tuple.index, which PodId never needs)


class _Field:
    """What a field validator reads of an attrs attribute: its name."""

    def __init__(self, name: str) -> None:
        self.name = name


_POD_CHECKS: tuple[tuple[Any, Validator], ...] = (
    (_Field("job"), name(InvalidJobError)),
    (_Field("role"), name(InvalidJobError)),
    (_Field("index"), number(InvalidJobError, low=0, integer=True)),
)
"""Each field of a :class:`PodId` (as its validator reads it) and its validator."""


class PodId(_PodFields):
    """Identity of one pod: (job id, role name, index).

    Built with keywords only, each value validated: ``PodId(job="j", role="w", index=0)``.
    Underneath it is a tuple: hashing, equality and ordering (by job, role, index) run in C,
    and pod ids are dict keys, set members and sort keys on every hot path of a cycle.
    Read it by field name; it also unpacks as ``job, role, index``."""

    __copy__ = _shared
    __deepcopy__ = _shared

    __slots__ = ()

    if TYPE_CHECKING:

        def __new__(cls, *, job: str, role: str, index: int) -> PodId: ...

    else:

        def __new__(cls, *args, **kwargs):
            if args:
                raise TypeError(
                    "PodId takes keyword arguments only: PodId(job=..., role=..., index=...); "
                    f"got {len(args)} positional"
                )
            unknown = sorted(set(kwargs) - set(_PodFields._fields))
            missing = [f for f in _PodFields._fields if f not in kwargs]
            if unknown or missing:
                raise TypeError(
                    f"PodId(job=..., role=..., index=...): missing {missing}, unknown {unknown}"
                )
            for field, check in _POD_CHECKS:
                check(None, field, kwargs[field.name])
            return tuple.__new__(cls, (kwargs["job"], kwargs["role"], kwargs["index"]))

    def __str__(self) -> str:
        return f"{self.job}/{self.role}/{self.index}"

    def __repr__(self) -> str:
        return f"PodId(job={self.job!r}, role={self.role!r}, index={self.index!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_pod_id, tuple(self))

    @classmethod
    def trusted(cls, job: str, role: str, index: int) -> PodId:
        """A pod id built without the validators, for a caller whose values already are valid
        by construction (:meth:`Job.pods`: a checked job's id and role names, an index from
        ``range``); anything else must call the class. O(1)."""
        return tuple.__new__(cls, (job, role, index))


def _pod_id(job: str, role: str, index: int) -> PodId:
    """Unpickle a :class:`PodId` (validated again)."""
    return PodId(job=job, role=role, index=index)


def _to_kind(v: Any) -> Any:
    """Accept the string form of a JobKind; anything else is left for the validator."""
    if isinstance(v, str) and v in JobKind._value2member_map_:
        return JobKind(v)
    return v


def _roles_ok(v: Any) -> bool:
    if not isinstance(v, tuple) or not v or not all(isinstance(r, Role) for r in v):
        return False
    names = [r.name for r in v]
    return len(set(names)) == len(names)


@attrs.frozen(kw_only=True)
class Job:
    """A unit of admission: one or more roles, admitted as a gang or pod by pod.

    ``gang=True``: all pods are placed together or none (job-level admission and preemption).
    ``runtime_estimate`` (seconds) feeds EASY backfill and the simulator; ``None`` = unknown.
    """

    __copy__ = _shared
    __deepcopy__ = _shared

    id: str = attrs.field(validator=name(InvalidJobError))
    tenant: str = attrs.field(default="default", validator=name(InvalidJobError))
    priority: int = attrs.field(default=0, validator=number(InvalidJobError, integer=True))
    submitted_at: float = attrs.field(
        default=0.0,
        validator=number(InvalidJobError, low=0, finite=True),
    )
    kind: JobKind = attrs.field(
        default=JobKind.TRAINING,
        converter=_to_kind,
        validator=instance_of(
            InvalidJobError, JobKind, reason=f"must be one of {[k.value for k in JobKind]}"
        ),
    )
    gang: bool = attrs.field(default=True, validator=instance_of(InvalidJobError, bool))
    roles: tuple[Role, ...] = attrs.field(
        converter=_to_tuple,
        validator=satisfies(
            InvalidJobError, _roles_ok, "must be a non-empty tuple of Roles with unique names"
        ),
    )
    preemptible: bool = attrs.field(default=True, validator=instance_of(InvalidJobError, bool))
    runtime_estimate: float | None = attrs.field(
        default=None,
        validator=number(
            InvalidJobError,
            low=0,
            low_inclusive=False,
            finite=True,
            optional=True,
            reason="must be None or a number > 0",
        ),
    )

    labelled: bool = attrs.field(init=False, default=False, eq=False, repr=False)
    """Whether a role's pods have labels or pod terms, so take part in pod affinity (read
    on every bind: kept, not computed)."""
    pod_terms: bool = attrs.field(init=False, default=False, eq=False, repr=False)
    """Whether a role has pod affinity or anti-affinity terms, required or preferred."""
    anti_terms: bool = attrs.field(init=False, default=False, eq=False, repr=False)
    """Whether a role has pod anti-affinity terms."""
    soft_terms: bool = attrs.field(init=False, default=False, eq=False, repr=False)
    """Whether a role has preferred pod terms or required affinity terms: what a running pod
    adds to the score of a pod its terms select (Kubernetes' symmetric scoring)."""

    def __attrs_post_init__(self) -> None:
        n = sum(r.replicas for r in self.roles)
        if n > MAX_PODS_PER_JOB:
            raise InvalidJobError(
                "roles", f"{n} pods", f"a job has at most {MAX_PODS_PER_JOB} pods"
            )
        anti = any(r.pod_anti_affinity for r in self.roles)
        soft = any(r.pod_affinity or r.pod_preferences for r in self.roles)
        terms = anti or soft
        if terms or any(r.labels for r in self.roles):
            object.__setattr__(self, "labelled", True)
            object.__setattr__(self, "pod_terms", terms)
            object.__setattr__(self, "anti_terms", anti)
            object.__setattr__(self, "soft_terms", soft)

    @property
    def num_pods(self) -> int:
        """Number of pods over all roles. O(roles)."""
        return sum(r.replicas for r in self.roles)

    @property
    def total_milli(self) -> int:
        """Total GPU request in milli over all pods."""
        return sum(r.total_milli for r in self.roles)

    @property
    def gpu_units(self) -> float:
        """Total GPU request in whole GPUs (``total_milli / 1000``)."""
        return self.total_milli / MILLI

    @property
    def gpu_models(self) -> frozenset[str]:
        """Union of the allowed models of all roles (empty if any role allows any model)."""
        out: set[str] = set()
        for r in self.roles:
            if not r.gpu_models:
                return frozenset()
            out |= r.gpu_models
        return frozenset(out)

    def has_pod(self, pod: PodId) -> bool:
        """Whether ``pod`` is one of the job's pods: its id, a role it has, an index below that
        role's replicas. O(roles). Raises InvalidJobError for a ``pod`` that is not a PodId."""
        try:
            return pod.job == self.id and any(
                r.name == pod.role and 0 <= pod.index < r.replicas for r in self.roles
            )
        except (AttributeError, TypeError):
            raise InvalidJobError("pod", pod, "must be a kant.model.PodId") from None

    def role(self, name: str) -> Role:
        """The role called ``name``; raises :class:`~kant.errors.InvalidJobError` if the job has
        none. O(roles)."""
        for r in self.roles:
            if r.name == name:
                return r
        raise InvalidJobError("role", name, f"job {self.id!r} has no such role")

    def pods(self) -> Iterator[PodId]:
        """Every pod of the job, roles in declaration order, then by index."""
        make = PodId.trusted
        jid = self.id
        for r in self.roles:
            role = r.name
            for i in range(r.replicas):
                yield make(jid, role, i)


def pods_per_role(job: Job, pods: Collection[PodId]) -> dict[str, int]:
    """How many of ``pods`` (pods of ``job``) each role has, roles in the order they first
    appear (none for a role with no pod). O(pods); O(1) for a job of one role."""
    if len(job.roles) == 1:
        return {job.roles[0].name: len(pods)} if pods else {}
    counts: dict[str, int] = {}
    for p in pods:
        counts[p.role] = counts.get(p.role, 0) + 1
    return counts


def placed_by_own_pods(job: Job, roles: Collection[str] | None = None) -> bool:
    """Whether where ``job``'s next pods (of ``roles``; None: of any role) may go depends on
    where its other pods are: a role with ``max_per_node``, or one with a required topology
    wish (a pod-level role's pods stay in the domain its first pods are in). kant's Placer
    counts the job's running pods for these, and the pods placed earlier in the same cycle
    when told of them (``Placer.place_trusted(..., earlier=...)``, as the cycle does)."""
    return any(
        (r.max_per_node is not None or (r.topology is not None and r.topology.required))
        and (roles is None or r.name in roles)
        for r in job.roles
    )


def pods_milli(job: Job, pods: Collection[PodId]) -> int:
    """The GPU milli ``pods`` (pods of ``job``) ask for in all. O(pods)."""
    return sum(job.role(p.role).resources.total_milli for p in pods)


# --------------------------------------------------------------------------- nodes


_opt_node_name = attrs.validators.optional(name(InvalidNodeError))


@attrs.frozen(kw_only=True)
class NodeSpec:
    """A node as the orchestrator reports it.

    ``gpu_model`` names the node pool (``None`` for CPU-only nodes). ``template`` names the
    intra-node topology (see :mod:`kant.topology.templates`). ``leaf``/``spine``/``superspine``
    place it in the scale-out fabric, ``hbd`` in a scale-up domain; ``zone`` marks special
    areas such as the inference dedicated zone of E-Spread. ``labels`` (a read-only mapping)
    and ``taints`` are what roles' node selectors and tolerations read
    (:meth:`Role.can_run_on`). ``max_pods`` is how many pods the node runs at most (the
    Kubernetes ``status.allocatable.pods``, the kubelet's ``maxPods``), whoever placed them:
    every pod takes one of these slots, whatever it asks for; ``None`` (the default) sets no
    limit.
    """

    __copy__ = _shared
    __deepcopy__ = _shared

    name: str = attrs.field(validator=name(InvalidNodeError))
    gpu_model: str | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(
            satisfies(InvalidNodeError, is_gpu_model, GPU_MODEL_REASON)
        ),
    )
    gpus: int = attrs.field(default=0, validator=number(InvalidNodeError, low=0, integer=True))
    cpu_milli: int = attrs.field(
        default=0,
        validator=_upto(InvalidNodeError, MAX_CPU_MILLI),
    )
    memory_mib: int = attrs.field(
        default=0,
        validator=_upto(InvalidNodeError, MAX_MEMORY_MIB),
    )
    rdma_nics: int = attrs.field(default=0, validator=number(InvalidNodeError, low=0, integer=True))
    max_pods: int | None = attrs.field(
        default=None,
        validator=number(
            InvalidNodeError,
            low=0,
            high=MAX_PODS_PER_NODE,
            high_inclusive=True,
            integer=True,
            optional=True,
        ),
    )
    template: str | None = attrs.field(default=None, validator=_opt_node_name)
    leaf: str | None = attrs.field(default=None, validator=_opt_node_name)
    spine: str | None = attrs.field(default=None, validator=_opt_node_name)
    superspine: str | None = attrs.field(default=None, validator=_opt_node_name)
    hbd: str | None = attrs.field(default=None, validator=_opt_node_name)
    zone: str | None = attrs.field(default=None, validator=_opt_node_name)
    labels: Labels = attrs.field(
        default=NO_LABELS,
        converter=_to_labels,
        validator=satisfies(
            InvalidNodeError,
            lambda v: (
                isinstance(v, Labels)
                and all(_label_key_ok(k) and _label_value_ok(x) for k, x in v.items())
            ),
            f"must map label keys (at most {MAX_LABEL_KEY} characters) to label values (strings "
            f"of at most {MAX_LABEL_VALUE}, without surrounding spaces)",
        ),
    )
    taints: tuple[Taint, ...] = attrs.field(
        default=(),
        converter=_to_tuple,
        validator=tuple_of(InvalidNodeError, Taint),
    )

    @property
    def hard_tainted(self) -> bool:
        """Whether a ``NoSchedule`` or ``NoExecute`` taint keeps pods that do not tolerate it
        off the node."""
        return any(t.effect in HARD_EFFECTS for t in self.taints)

    @property
    def soft_tainted(self) -> bool:
        """Whether a ``PreferNoSchedule`` taint makes pods that do not tolerate it prefer
        other nodes."""
        return any(t.effect is TaintEffect.PREFER_NO_SCHEDULE for t in self.taints)

    def __attrs_post_init__(self) -> None:
        if self.gpus > MAX_GPUS_PER_NODE:
            raise InvalidNodeError("gpus", self.gpus, f"at most {MAX_GPUS_PER_NODE} per node")
        if self.rdma_nics > MAX_NICS_PER_NODE:
            raise InvalidNodeError(
                "rdma_nics", self.rdma_nics, f"at most {MAX_NICS_PER_NODE} per node"
            )
        if self.gpus and self.gpu_model is None:
            raise InvalidNodeError("gpu_model", None, f"a node with {self.gpus} GPUs needs a model")
        if not self.gpus and self.gpu_model is not None:
            raise InvalidNodeError("gpus", 0, f"a {self.gpu_model} node needs at least one GPU")
        if self.spine is not None and self.leaf is None:
            raise InvalidNodeError("leaf", None, "a node with a spine must have a leaf")
        if self.superspine is not None and self.spine is None:
            raise InvalidNodeError("spine", None, "a node with a superspine must have a spine")


# --------------------------------------------------------------------------- results


def _int_tuple(v: Any) -> Any:
    # (what is no iterable is left to the validator, which names the field)
    return v if isinstance(v, tuple | str) or not isinstance(v, Iterable) else tuple(v)


def _gpu_ids_ok(v: Any) -> bool:
    if not isinstance(v, tuple):
        return False
    for g in v:
        if type(g) is not int or not 0 <= g < MAX_GPUS_PER_NODE:
            return False
    return len(set(v)) == len(v)


@attrs.frozen(kw_only=True)
class Binding:
    """Pod -> node, with the exact devices and the capacity it holds there.

    ``gpus`` are device indices on the node; ``gpu_milli`` is the share held on *each* of them
    (1000 for whole GPUs, 1..999 for a fractional pod, which holds exactly one device).
    """

    __copy__ = _shared
    __deepcopy__ = _shared

    pod: PodId = attrs.field(validator=instance_of(InvalidBindingError, PodId))
    node: str = attrs.field(validator=name(InvalidBindingError))
    gpus: tuple[int, ...] = attrs.field(
        default=(),
        converter=_int_tuple,
        validator=satisfies(InvalidBindingError, _gpu_ids_ok, "must be distinct ints in 0..63"),
    )
    gpu_milli: int = attrs.field(
        default=MILLI, validator=number(InvalidBindingError, low=1, integer=True)
    )
    nics: tuple[int, ...] = attrs.field(
        default=(),
        converter=_int_tuple,
        validator=satisfies(InvalidBindingError, _gpu_ids_ok, "must be distinct ints in 0..63"),
    )
    cpu_milli: int = attrs.field(
        default=0,
        validator=_upto(InvalidBindingError, MAX_CPU_MILLI),
    )
    memory_mib: int = attrs.field(
        default=0,
        validator=_upto(InvalidBindingError, MAX_MEMORY_MIB),
    )

    def __attrs_post_init__(self) -> None:
        if self.gpu_milli > MILLI:
            raise InvalidBindingError("gpu_milli", self.gpu_milli, "at most 1000 per GPU")
        if self.gpu_milli < MILLI and len(self.gpus) != 1:
            raise InvalidBindingError(
                "gpus", self.gpus, "a fractional share must be held on exactly one GPU"
            )

    @property
    def total_milli(self) -> int:
        """GPU milli the binding holds: ``len(gpus) * gpu_milli``."""
        return len(self.gpus) * self.gpu_milli

    @classmethod
    def trusted(
        cls,
        pod: PodId,
        node: str,
        gpus: tuple[int, ...],
        gpu_milli: int,
        nics: tuple[int, ...],
        cpu_milli: int,
        memory_mib: int,
    ) -> Binding:
        """A binding built without the validators, for a caller whose values already are
        valid by construction (the Placer: devices read off a snapshot row, a role's checked
        resources); anything else must call the class. O(1)."""
        b = object.__new__(cls)
        set_pod, set_node, set_gpus, set_milli, set_nics, set_cpu, set_mem = _BINDING_SETTERS
        set_pod(b, pod)
        set_node(b, node)
        set_gpus(b, gpus)
        set_milli(b, gpu_milli)
        set_nics(b, nics)
        set_cpu(b, cpu_milli)
        set_mem(b, memory_mib)
        return b


_BINDING_SETTERS: Final = tuple(
    Binding.__dict__[f].__set__
    for f in ("pod", "node", "gpus", "gpu_milli", "nics", "cpu_milli", "memory_mib")
)
"""The slots' own setters of :class:`Binding`, for :meth:`Binding.trusted`: a frozen class's
``__setattr__`` refuses, and ``object.__setattr__`` looks each name up again (0.72 -> 0.50 us
a binding, measured with timeit)."""


@attrs.frozen(kw_only=True)
class Victim:
    """Pods to evict so that ``preemptor`` can run. For a gang job ``pods`` is the whole job."""

    __copy__ = _shared
    __deepcopy__ = _shared

    job: str
    pods: tuple[PodId, ...]
    reason: VictimReason
    preemptor: str
