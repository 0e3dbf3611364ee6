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
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from kant.errors import (
    InvalidBindingError,
    InvalidJobError,
    InvalidNodeError,
    InvalidResourcesError,
    ValidationError,
)

MILLI = 1000
"""GPU milli per whole GPU."""

MAX_GPUS_PER_NODE = 64
"""GPU occupancy is kept as a 64-bit mask per node."""

MAX_NICS_PER_NODE = 64


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
    TRAINING = "training"
    INFERENCE = "inference"
    DEV = "dev"


class VictimReason(enum.StrEnum):
    PRIORITY = "priority"
    RECLAIM = "reclaim"
    BACKFILL = "backfill"


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


@attrs.frozen(kw_only=True)
class Reason:
    """A typed, readable explanation: ``code`` for programs, ``message`` for people."""

    code: ReasonCode
    message: str = ""

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}" if self.message else self.code.value


# --------------------------------------------------------------------------- validators


def _validator(
    err: type[ValidationError], pred: Callable[[Any], bool], reason: str
) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not pred(value):
            raise err(attribute.name, value, reason)

    return check


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _nonneg_int(err: type[ValidationError]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    return _validator(err, lambda v: _is_int(v) and v >= 0, "must be an int >= 0")


def _pos_int(err: type[ValidationError]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    return _validator(err, lambda v: _is_int(v) and v >= 1, "must be an int >= 1")


def _name(err: type[ValidationError]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    return _validator(
        err,
        lambda v: isinstance(v, str) and v != "" and v.strip() == v and "/" not in v,
        "must be a non-empty string without surrounding spaces or '/'",
    )


def _opt_name(err: type[ValidationError]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    inner = _name(err)

    def check(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            inner(inst, attribute, value)

    return check


def _finite_nonneg(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def finite_nonneg(err: type[ValidationError]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """An attrs validator: a finite number >= 0 (bools refused), else ``err``."""
    return _validator(err, _finite_nonneg, "must be a finite number >= 0")


def nonneg_or_inf(err: type[ValidationError]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """An attrs validator: a number >= 0, infinity allowed (meaning "never"), NaN and bools
    refused, else ``err``."""
    return _validator(
        err,
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v >= 0,
        "must be a number >= 0",
    )


def opt_pos_int(err: type[ValidationError]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """An attrs validator: None or an int >= 1 (bools refused), else ``err``."""
    return _validator(
        err, lambda v: v is None or (_is_int(v) and v >= 1), "must be None or an int >= 1"
    )


# --------------------------------------------------------------------------- resources


@attrs.frozen(kw_only=True)
class Resources:
    """Per-pod resource request (or a node's capacity).

    ``gpus`` whole GPUs, or a share of one GPU: ``gpu_milli`` in 1..999 with ``gpus == 0``
    (a fractional pod never spans devices). ``rdma_nics`` RDMA NICs, placed next to the GPUs.
    """

    gpus: int = attrs.field(default=0, validator=_nonneg_int(InvalidResourcesError))
    gpu_milli: int = attrs.field(default=0, validator=_nonneg_int(InvalidResourcesError))
    cpu_milli: int = attrs.field(default=0, validator=_nonneg_int(InvalidResourcesError))
    memory_mib: int = attrs.field(default=0, validator=_nonneg_int(InvalidResourcesError))
    rdma_nics: int = attrs.field(default=0, validator=_nonneg_int(InvalidResourcesError))

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
        return self.gpu_milli > 0

    @property
    def gpu_units(self) -> float:
        return self.total_milli / MILLI


# --------------------------------------------------------------------------- jobs


@attrs.frozen(kw_only=True)
class TopologyWish:
    """Where the pods of a role should sit relative to each other.

    ``tier`` is the widest tier allowed (``LEAF`` = all in one leaf). ``required`` makes it a
    hard constraint; otherwise it is a preference (best effort, tightest first).
    """

    tier: Tier = attrs.field(
        validator=_validator(InvalidJobError, lambda v: isinstance(v, Tier), "must be a Tier")
    )
    required: bool = attrs.field(
        default=False,
        validator=_validator(InvalidJobError, lambda v: isinstance(v, bool), "must be a bool"),
    )


def _job_validator(pred: Callable[[Any], bool], reason: str) -> Any:
    return _validator(InvalidJobError, pred, reason)


def _to_models(v: Any) -> frozenset[str]:
    if isinstance(v, str):
        return frozenset(p for p in v.split("|") if p)
    if isinstance(v, frozenset | set | list | tuple):
        return frozenset(v)
    return v  # type: ignore[no-any-return]  # the validator rejects it with a clear message


@attrs.frozen(kw_only=True)
class Role:
    """A homogeneous set of pods of a job (``worker x 64``, ``prefill x 4``...).

    ``gpu_models`` are the allowed GPU models (node pools); empty means any model.
    ``spread`` asks for pods on different nodes (inference availability).
    """

    name: str = attrs.field(default="worker", validator=_name(InvalidJobError))
    replicas: int = attrs.field(default=1, validator=_pos_int(InvalidJobError))
    resources: Resources = attrs.field(
        factory=Resources,
        validator=_job_validator(lambda v: isinstance(v, Resources), "must be a Resources"),
    )
    gpu_models: frozenset[str] = attrs.field(
        factory=frozenset,
        converter=_to_models,
        validator=_job_validator(
            lambda v: (
                isinstance(v, frozenset)
                and all(isinstance(m, str) and m and m.strip() == m for m in v)
            ),
            "must be a set of non-empty GPU model names",
        ),
    )
    topology: TopologyWish | None = attrs.field(
        default=None,
        validator=_job_validator(
            lambda v: v is None or isinstance(v, TopologyWish), "must be a TopologyWish or None"
        ),
    )
    spread: bool = attrs.field(
        default=False, validator=_job_validator(lambda v: isinstance(v, bool), "must be a bool")
    )

    @property
    def total_milli(self) -> int:
        return self.replicas * self.resources.total_milli


@attrs.frozen(kw_only=True, order=True, cache_hash=True)
class PodId:
    """Identity of one pod: (job id, role name, index)."""

    job: str = attrs.field(validator=_name(InvalidJobError))
    role: str = attrs.field(validator=_name(InvalidJobError))
    index: int = attrs.field(validator=_nonneg_int(InvalidJobError))

    def __str__(self) -> str:
        return f"{self.job}/{self.role}/{self.index}"


def _to_kind(v: Any) -> Any:
    """Accept the string form of a JobKind; anything else is left for the validator."""
    if isinstance(v, str) and v in JobKind._value2member_map_:
        return JobKind(v)
    return v


def _to_tuple(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


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

    id: str = attrs.field(validator=_name(InvalidJobError))
    tenant: str = attrs.field(default="default", validator=_name(InvalidJobError))
    priority: int = attrs.field(default=0, validator=_job_validator(_is_int, "must be an int"))
    submitted_at: float = attrs.field(
        default=0.0,
        validator=_job_validator(_finite_nonneg, "must be a finite number >= 0"),
    )
    kind: JobKind = attrs.field(
        default=JobKind.TRAINING,
        converter=_to_kind,
        validator=_job_validator(
            lambda v: isinstance(v, JobKind), f"must be one of {[k.value for k in JobKind]}"
        ),
    )
    gang: bool = attrs.field(
        default=True, validator=_job_validator(lambda v: isinstance(v, bool), "must be a bool")
    )
    roles: tuple[Role, ...] = attrs.field(
        converter=_to_tuple,
        validator=_job_validator(_roles_ok, "must be a non-empty tuple of Roles with unique names"),
    )
    preemptible: bool = attrs.field(
        default=True, validator=_job_validator(lambda v: isinstance(v, bool), "must be a bool")
    )
    runtime_estimate: float | None = attrs.field(
        default=None,
        validator=_job_validator(
            lambda v: v is None or (_finite_nonneg(v) and v > 0), "must be None or a number > 0"
        ),
    )

    @property
    def num_pods(self) -> int:
        return sum(r.replicas for r in self.roles)

    @property
    def total_milli(self) -> int:
        """Total GPU request in milli over all pods."""
        return sum(r.total_milli for r in self.roles)

    @property
    def gpu_units(self) -> float:
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

    def role(self, name: str) -> Role:
        for r in self.roles:
            if r.name == name:
                return r
        raise InvalidJobError("role", name, f"job {self.id!r} has no such role")

    def pods(self) -> Iterator[PodId]:
        """Every pod of the job, roles in declaration order, then by index."""
        for r in self.roles:
            for i in range(r.replicas):
                yield PodId(job=self.id, role=r.name, index=i)


# --------------------------------------------------------------------------- nodes


@attrs.frozen(kw_only=True)
class NodeSpec:
    """A node as the orchestrator reports it.

    ``gpu_model`` names the node pool (``None`` for CPU-only nodes). ``template`` names the
    intra-node topology (see :mod:`kant.topology.templates`). ``leaf``/``spine``/``superspine``
    place it in the scale-out fabric, ``hbd`` in a scale-up domain; ``zone`` marks special
    areas such as the inference dedicated zone of E-Spread.
    """

    name: str = attrs.field(validator=_name(InvalidNodeError))
    gpu_model: str | None = attrs.field(default=None, validator=_opt_name(InvalidNodeError))
    gpus: int = attrs.field(default=0, validator=_nonneg_int(InvalidNodeError))
    cpu_milli: int = attrs.field(default=0, validator=_nonneg_int(InvalidNodeError))
    memory_mib: int = attrs.field(default=0, validator=_nonneg_int(InvalidNodeError))
    rdma_nics: int = attrs.field(default=0, validator=_nonneg_int(InvalidNodeError))
    template: str | None = attrs.field(default=None, validator=_opt_name(InvalidNodeError))
    leaf: str | None = attrs.field(default=None, validator=_opt_name(InvalidNodeError))
    spine: str | None = attrs.field(default=None, validator=_opt_name(InvalidNodeError))
    superspine: str | None = attrs.field(default=None, validator=_opt_name(InvalidNodeError))
    hbd: str | None = attrs.field(default=None, validator=_opt_name(InvalidNodeError))
    zone: str | None = attrs.field(default=None, validator=_opt_name(InvalidNodeError))

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


def _int_tuple(v: Any) -> tuple[int, ...]:
    return v if isinstance(v, tuple) else tuple(v)


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

    pod: PodId = attrs.field(
        validator=_validator(InvalidBindingError, lambda v: isinstance(v, PodId), "must be a PodId")
    )
    node: str = attrs.field(validator=_name(InvalidBindingError))
    gpus: tuple[int, ...] = attrs.field(
        default=(),
        converter=_int_tuple,
        validator=_validator(InvalidBindingError, _gpu_ids_ok, "must be distinct ints in 0..63"),
    )
    gpu_milli: int = attrs.field(default=MILLI, validator=_pos_int(InvalidBindingError))
    nics: tuple[int, ...] = attrs.field(
        default=(),
        converter=_int_tuple,
        validator=_validator(InvalidBindingError, _gpu_ids_ok, "must be distinct ints in 0..63"),
    )
    cpu_milli: int = attrs.field(default=0, validator=_nonneg_int(InvalidBindingError))
    memory_mib: int = attrs.field(default=0, validator=_nonneg_int(InvalidBindingError))

    def __attrs_post_init__(self) -> None:
        if self.gpu_milli > MILLI:
            raise InvalidBindingError("gpu_milli", self.gpu_milli, "at most 1000 per GPU")
        if self.gpu_milli < MILLI and len(self.gpus) != 1:
            raise InvalidBindingError(
                "gpus", self.gpus, "a fractional share must be held on exactly one GPU"
            )

    @property
    def total_milli(self) -> int:
        return len(self.gpus) * self.gpu_milli


@attrs.frozen(kw_only=True)
class Victim:
    """Pods to evict so that ``preemptor`` can run. For a gang job ``pods`` is the whole job."""

    job: str
    pods: tuple[PodId, ...]
    reason: VictimReason
    preemptor: str
