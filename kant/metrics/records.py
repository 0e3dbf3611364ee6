"""What a simulator or an orchestrator remembers about each job, for JWTD and JTTED.

A :class:`JobRecord` is a frozen summary of one job's life. The producer (the simulator, or
an orchestrator's bookkeeping) decides the exact instants; the conventions kant's simulator
follows, and that the metrics assume, are:

- ``submitted_at``: when the job entered the queue (the job's ``submitted_at``);
- ``started_at``: the *first* time the job was running: a gang job when its last pod was
  bound, a pod-level job when its first pod was bound; ``None`` if it never started;
- ``finished_at``: when its last pod ended (completed, failed or cancelled), ``None`` if
  still running or never started;
- ``nodes_used`` / ``groups_used``: distinct nodes / leaf groups (NodeNetGroups) the job's
  GPUs occupied when it started (of a job without GPUs, its pods; 0 = unknown or never
  started);
- ``preempted`` / ``requeued``: how many times it was chosen as a victim (once per cycle
  that chose it, evicted or not: kant's simulator counts a victim whose work ends within
  its grace period too) / put back in the queue (once per interruption: one cycle's
  evictions of its pods, or one node failure under it, however many pods it took);
- ``state``: a free-form final state such as ``"finished"``, ``"running"``, ``"pending"``,
  ``"failed"``.

``gang`` is a bool, ``tenant`` a name as a job's, ``state`` a string: another kind is a
ValidationError naming the field (``gang="no"`` was a gang).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from kant.errors import ValidationError
from kant.metrics.buckets import size_bucket
from kant.model import Binding, Job, PodId, flag, name, number

_time = number(ValidationError, low=0, finite=True)
_opt_time = number(ValidationError, low=0, finite=True, optional=True)
_count = number(ValidationError, low=0, integer=True)


def _bool(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    flag(value, attribute.name)


def _text(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise ValidationError(attribute.name, value, "must be a string")


def _to_shapes(v: Any) -> Any:
    try:
        return tuple(tuple(x) for x in v)
    except TypeError:
        return v  # (the validator names it)


def _shapes(_inst: Any, _attr: Any, v: Any) -> None:
    what = "must be (pods, whole GPUs, share milli[, pods per node at most]) tuples"
    if not isinstance(v, tuple) or not all(isinstance(x, tuple) for x in v):
        raise ValidationError("pods", v, what)
    for shape in v:
        if len(shape) not in (3, 4) or not all(type(x) is int and x >= 0 for x in shape):
            raise ValidationError("pods", v, what)
        if (shape[1] and shape[2]) or shape[2] >= 1000:
            raise ValidationError("pods", v, "a pod holds whole GPUs or a share below 1000")
        if len(shape) == 4 and shape[3] < 1:
            raise ValidationError("pods", v, "a role's pods per node at most must be >= 1")


def checked_pod_shapes(v: Any) -> tuple[tuple[int, ...], ...]:
    """``v`` as pods' shapes (tuples or lists, as :attr:`JobRecord.pods`), checked by the
    record's rules: else a ValidationError naming ``pods``, with the record's reason."""
    shapes: tuple[tuple[int, ...], ...] = _to_shapes(v)
    _shapes(None, None, shapes)
    return shapes


def pod_shapes(job: Job) -> tuple[tuple[int, ...], ...]:
    """Per role of ``job`` that asks for GPUs: ``(replicas, whole GPUs a pod, share milli a
    pod)``, and its ``max_per_node`` fourth when it has one (see :attr:`JobRecord.pods`)."""
    return tuple(
        (r.replicas, r.resources.gpus, 0 if r.resources.gpus else r.resources.gpu_milli)
        + (() if r.max_per_node is None else (r.max_per_node,))
        for r in job.roles
        if r.resources.gpus or r.resources.gpu_milli
    )


FirstNodes = dict[PodId, tuple[str, bool]]
"""What :func:`placed_nodes` notes of a job's pods: pod -> (the node it was first bound to,
whether it holds GPUs there)."""


def placed_nodes(first: FirstNodes, bindings: Iterable[Binding], num_pods: int) -> set[str] | None:
    """The nodes a job's ``nodes_used`` / ``groups_used`` count, once every one of its
    ``num_pods`` pods has been bound (None before): the node each of its pods that hold GPUs
    was first bound to (a job without GPUs: each of its pods'). JTTED measures the topology
    of the job's GPUs, and its optimum reads the roles with GPUs only: a CPU-only pod (an
    MPI launcher) on a node of its own counted as one more node, a placement of the
    optimum reading a NodeNum ratio of 2.0.

    ``first`` is what earlier calls noted for the job (:data:`FirstNodes`; the caller keeps
    one per job, empty at first); ``bindings`` are bindings of the job's pods made since (a
    cycle's, or all it holds now): they are noted in ``first``, a pod already there keeping
    its node. A gang, bound whole, is placed at its first start; a pod-level job's pods may
    start in several cycles, and its optimum reads them all (counting the first cycle's pods
    only read ratios below the optimum). The simulator and the exporter both count so."""
    for b in bindings:
        if b.pod not in first:
            first[b.pod] = (b.node, bool(b.gpus))
    if len(first) < num_pods:
        return None
    return {n for n, gpus in first.values() if gpus} or {n for n, _gpus in first.values()}


def leaf_groups(nodes: Iterable[str], leaf_of: Callable[[str], str | None]) -> int:
    """The leaf groups (NodeNetGroups) ``nodes`` span: the distinct leaves ``leaf_of`` gives
    them, nodes without a leaf left out (0: no leaf information)."""
    leaves = {leaf_of(n) for n in nodes}
    leaves.discard(None)
    return len(leaves)


@attrs.frozen(kw_only=True)
class JobRecord:
    """One job's life, as the metrics need it (see the module docstring for conventions)."""

    job_id: str = attrs.field(
        validator=name(ValidationError, slash=True, spaces=True, reason="non-empty")
    )
    tenant: str = attrs.field(default="default", validator=name(ValidationError))
    gpus: float = attrs.field(
        default=0.0,
        validator=number(ValidationError, low=0, finite=True, reason="must be a number >= 0"),
    )
    gang: bool = attrs.field(default=True, validator=_bool)
    submitted_at: float = attrs.field(default=0.0, validator=_time)
    started_at: float | None = attrs.field(default=None, validator=_opt_time)
    finished_at: float | None = attrs.field(default=None, validator=_opt_time)
    nodes_used: int = attrs.field(default=0, validator=_count)
    groups_used: int = attrs.field(default=0, validator=_count)
    preempted: int = attrs.field(default=0, validator=_count)
    requeued: int = attrs.field(default=0, validator=_count)
    state: str = attrs.field(default="pending", validator=_text)
    pods: tuple[tuple[int, ...], ...] = attrs.field(
        default=(), converter=_to_shapes, validator=_shapes
    )
    """Per role with GPUs, ``(pods, whole GPUs each, share milli each)``, with a fourth
    element, the role's ``max_per_node``, when it has one: what JTTED's fewest nodes reads
    besides ``gpus`` (:func:`kant.metrics.optimal_nodes`); empty: ``gpus`` alone."""
    all_started_at: float | None = attrs.field(default=None, validator=_opt_time)
    """When every pod of the job had been bound at least once: ``started_at`` for a gang; for
    a pod-level job, when its last pod first ran (None while some pod never has). A service's
    replicas can wait long after its first one started (:attr:`replica_wait`)."""

    def __attrs_post_init__(self) -> None:
        if self.started_at is not None and self.started_at < self.submitted_at:
            raise ValidationError(
                "started_at", self.started_at, f"is before submitted_at={self.submitted_at}"
            )
        if self.finished_at is not None:
            if self.started_at is None:
                raise ValidationError("finished_at", self.finished_at, "set but never started")
            if self.finished_at < self.started_at:
                raise ValidationError(
                    "finished_at", self.finished_at, f"is before started_at={self.started_at}"
                )
        if self.all_started_at is not None and (
            self.started_at is None or self.all_started_at < self.started_at
        ):
            raise ValidationError(
                "all_started_at", self.all_started_at, f"is before started_at={self.started_at}"
            )

    @classmethod
    def for_job(cls, job: Job, **fields: Any) -> JobRecord:
        """A record for ``job`` (id, tenant, GPUs, gang, submit time taken from it);
        ``fields`` gives the rest (``started_at=...``, ``nodes_used=...``)."""
        base: dict[str, Any] = {
            "job_id": job.id,
            "tenant": job.tenant,
            "gpus": job.gpu_units,
            "gang": job.gang,
            "submitted_at": job.submitted_at,
            "pods": pod_shapes(job),
        }
        base.update(fields)
        return cls(**base)

    @property
    def bucket(self) -> str:
        """The JWTD/JTTED size bucket (:func:`kant.metrics.size_bucket`)."""
        return size_bucket(self.gpus)

    @property
    def wait(self) -> float | None:
        """Waiting time ``started_at - submitted_at`` (queueing plus scheduling decision
        time), ``None`` if the job never started."""
        return None if self.started_at is None else self.started_at - self.submitted_at

    @property
    def replica_wait(self) -> float | None:
        """``all_started_at - submitted_at``: how long its last pod waited to first run (the
        same as :attr:`wait` for a gang), ``None`` while some pod never ran."""
        return None if self.all_started_at is None else self.all_started_at - self.submitted_at

    @property
    def runtime(self) -> float | None:
        """``finished_at - started_at``, ``None`` unless both are known."""
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at
