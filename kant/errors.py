"""The KantError tree.

Expected scheduling outcomes (a job that does not fit, a quota that is full) are *values*
(:class:`kant.model.Reason`); the exceptions here are for contract violations: malformed
input, a node or pod that does not exist, a binding that conflicts with what is already
allocated, a snapshot used after it went stale. Every error is raised *before* anything is
changed, so a rejected call leaves the state exactly as it was. Apart from these,
:class:`InvariantError` reports not a caller's mistake but a bug (or state changed behind
kant's back), found by a self-check.

Each validation error names the offending field and value::

    >>> InvalidJobError("priority", "high", "must be an int").args[0]
    "invalid job: field 'priority' = 'high': must be an int"
"""

from __future__ import annotations

from typing import Any


class KantError(Exception):
    """Base of every error kant raises on purpose. It pickles as itself (message and
    attributes), so one raised in a worker process reaches the parent unchanged."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt without calling __init__ again: subclasses take other arguments than the
        # message that ``args`` holds.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[KantError], args: tuple[Any, ...], state: dict[str, Any]) -> KantError:
    """A ``cls`` error with these ``args`` and attributes (unpickling a KantError)."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


_SHOWN = 1000  # the longest value an error message shows whole


class ValidationError(KantError, ValueError):
    """A value object or input record is malformed.

    Attributes ``field``, ``value`` and ``reason`` say exactly what is wrong; ``where``
    (optional) locates it, e.g. ``"jobs.csv:17"`` or ``"nodes[3]"``.
    """

    what = "value"

    def __init__(self, field: str, value: Any, reason: str, *, where: str | None = None) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        self.where = where
        loc = f"{where}: " if where else ""
        try:
            shown = repr(value)
        except ValueError:  # (an int beyond Python's 4,300-digit limit for str)
            shown = f"<{type(value).__name__} too large to print>"
        if len(shown) > _SHOWN:  # (a 5,000-digit cell is named, not printed)
            shown = f"{shown[: _SHOWN // 2]}...{shown[-8:]} ({len(shown):,} characters)"
        super().__init__(f"{loc}invalid {self.what}: field {field!r} = {shown}: {reason}")


class InvalidResourcesError(ValidationError):
    """A :class:`kant.model.Resources` is malformed: a negative or non-int count, a GPU share of
    1000 or more or combined with whole GPUs, more GPUs than one node holds."""

    what = "resources"


class InvalidJobError(ValidationError):
    """A :class:`kant.model.Job`, :class:`~kant.model.Role`, :class:`~kant.model.PodId` or
    :class:`~kant.model.TopologyWish` is malformed, ``Job.role`` is asked for a role the job
    lacks, or a queue is given something that is not a Job."""

    what = "job"


class InvalidNodeError(ValidationError):
    """A :class:`kant.model.NodeSpec` is malformed (bad name, count, or a fabric position with a
    level missing), or a node is asked about a GPU index it does not have."""

    what = "node"


class InvalidTopologyError(ValidationError):
    """A node template (:mod:`kant.topology.templates`) is malformed (a bad slot, name, shape or
    mask), or a fabric builder of :mod:`kant.topology.fabric` is given bad sizes."""

    what = "topology"


class InvalidBindingError(ValidationError):
    """A :class:`kant.model.Binding` is malformed: not a PodId, repeated or out-of-range device
    ids, a share above 1000 or a fractional share on other than one GPU."""

    what = "binding"


class InvalidConfigError(ValidationError):
    """A policy or scheduler setting is malformed: a quota, quota mode, backoff, preemption or
    queueing-policy parameter, a part given to a :class:`kant.scheduler.Scheduler` or
    :class:`kant.queueing.Queue` that cannot work (``field`` names the argument), a registry
    factory declaring a context field that does not exist, or
    :func:`kant.testing.check_invariants` given nothing it can check."""

    what = "configuration"


class InvalidConfigFileError(InvalidConfigError):
    """A scheduler config file (:mod:`kant.config`) is malformed: unreadable, not YAML, an
    unknown, repeated or missing key, or a bad value. ``field`` is the key path
    (``tenants[2].quotas.A100.nominalQuota``) and ``where`` the file; the message reads
    ``"kant.yaml: tenants[2].quotas.A100.nominalQuota: must be ... (got -1)"``."""

    what = "config file"

    def __init__(self, path: str, where: str, reason: str, *, value: Any = None) -> None:
        super().__init__(path, value, reason, where=where)
        got = f" (got {value!r})" if value is not None else ""
        self.args = (f"{where}: {path + ': ' if path else ''}{reason}{got}",)


class InvalidClusterFileError(ValidationError):
    """A cluster description file is malformed; ``where`` names the file and entry."""

    what = "cluster file"


class InvalidTimeError(ValidationError):
    """A time given to the scheduler is not a finite number, or runs backwards: earlier than
    the last time the scheduler saw, or (for a pod event) earlier than the pod's binding.
    The message names both times; nothing is changed."""

    what = "time"


class InvalidObjectError(ValidationError):
    """A Kubernetes object kant reads (:mod:`kant.k8s`) is malformed for kant: an unparsable
    quantity, a ``gpu-fraction`` outside (0, 1), a topology annotation naming a label that is
    not configured. ``where`` is ``Pod ns/name`` or ``Node name``."""

    what = "Kubernetes object"


class InvalidKubeconfigError(KantError, ValueError):
    """A kubeconfig (``kant k8s run --kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``)
    cannot be used: missing, a directory, unreadable, not UTF-8 YAML, not a kubeconfig, without
    the context asked for, or naming a server that is not an ``https://`` or ``http://`` URL.
    ``path`` names the file (or the files of ``$KUBECONFIG``) and ``reason`` what is wrong;
    the message reads ``"kubeconfig kc.yaml: does not exist"``."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"kubeconfig {path}: {reason}")


class InvalidTraceError(ValidationError):
    """A trace row is malformed; ``where`` is ``file:line``."""

    what = "trace row"


class _LookupError(KantError, KeyError):
    """KeyError subclass whose ``str()`` is the plain message (KeyError quotes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownNodeError(_LookupError):
    """No node by that name (or slot) in the cluster or snapshot; ``node`` names it."""

    def __init__(self, node: str) -> None:
        self.node = node
        super().__init__(f"unknown node {node!r}")


class UnknownPodError(_LookupError):
    """The pod is not bound in the cluster, not charged to a quota, or not held by its job (an
    event about a pod kant does not know); ``pod`` is it."""

    def __init__(self, pod: object) -> None:
        self.pod = pod
        super().__init__(f"unknown pod {pod!s}")


class UnknownJobError(_LookupError):
    """No job by that id in the queue (never submitted), or a pod of it that was never placed;
    ``job`` names it."""

    def __init__(self, job: str) -> None:
        self.job = job
        super().__init__(f"unknown job {job!r}")


class UnknownGpuModelError(_LookupError):
    """A GPU model name that is not known; ``model`` names it and the message lists the
    ``known`` ones. Part of the public tree for callers that resolve model names: kant itself
    reports a job whose models have no node pool as the value ``ReasonCode.NO_POOL``, not
    with this error."""

    def __init__(self, model: str, known: object = None) -> None:
        self.model = model
        extra = f" (known: {known})" if known is not None else ""
        super().__init__(f"unknown GPU model {model!r}{extra}")


class UnknownTemplateError(_LookupError):
    """No node template registered under that name
    (:func:`kant.topology.templates.get_template`, or a node or cluster file naming it);
    ``template`` names it, and ``node`` the node that named it when there is one."""

    def __init__(self, template: str, node: str | None = None) -> None:
        self.template = template
        self.node = node
        of = f" (node {node!r})" if node is not None else ""
        super().__init__(f"unknown node template {template!r}{of}")


class InvalidGridError(ValidationError):
    """A sweep grid (``kant sweep``, :mod:`kant.sweep.grid`) is malformed: an unknown command
    or option, a value that is not a scalar or a list of scalars, an empty list."""

    what = "sweep grid"


class InvalidStoreError(ValidationError):
    """A sweep's result store (:mod:`kant.sweep.store`) cannot be used: a record that is not
    a JSON object, or a file that is not a store."""

    what = "sweep store"


class ChangedInputError(InvalidStoreError):
    """A sweep's input file (``field``: the run parameter, ``value``: its path as the grid
    writes it) holds other content than the file the store's records of its runs were made
    from (their ``inputs`` digests, :mod:`kant.sweep.store`); ``where`` is the store. Raised
    before any run: the sweep would take those runs as done and report the other file's
    results."""

    what = "sweep input"


class UnknownPolicyError(_LookupError):
    """No policy of that kind registered under that name (a :class:`kant.registry.Registry`
    lookup, or a scenario's policy set); ``name`` is the name asked for and the message lists
    the known ones."""

    def __init__(self, kind: str, name: str, known: object = None) -> None:
        self.name = name
        extra = f"; known: {known}" if known is not None else ""
        super().__init__(f"unknown {kind} policy {name!r}{extra}")


class DuplicateError(KantError, ValueError):
    """Something with that name or id is already registered."""


class AllocationConflictError(KantError, ValueError):
    """A binding asks for devices or capacity that are not free (or not healthy)."""


class QuotaExceededError(KantError, ValueError):
    """Pods to take in as running (:meth:`kant.scheduler.Scheduler.restore`) are more than
    their tenant's quota admits now."""


class TransactionError(KantError, RuntimeError):
    """A snapshot transaction was used out of order (commit twice, rollback after commit...)."""


class BackendError(KantError):
    """A sweep back-end cannot run: Ray is not installed (``pip install 'kant[ray]'``) or
    its cluster cannot be reached."""


class InvariantError(KantError):
    """A broken internal invariant: a bug in kant or state changed behind its back.

    Raised by the ``check_invariants()`` self-checks (see :func:`kant.testing.check_invariants`)
    and by the few runtime guards of an internal invariant. The message names the structure
    and what differs, e.g. ``"Queue: global order index differs"``. Unlike ``assert`` it is
    not stripped by ``python -O``.
    """


def require(cond: object, msg: str) -> None:
    """Raise :class:`InvariantError` with ``msg`` unless ``cond`` holds (an ``assert`` that
    ``python -O`` keeps). ``msg`` names the structure: ``"Queue: running index differs"``."""
    if not cond:
        raise InvariantError(msg)
