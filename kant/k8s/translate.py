"""Kubernetes objects (as JSON mappings) to kant's values, and kant's decisions back to
annotations. Pure functions, no API calls: every rule is unit-tested on recorded objects.

Rules (docs/kubernetes.md, "Labels and annotations"):

- a node: GPUs from ``allocatable[gpuResource]``, model from the ``nvidia.com/gpu.product``
  label, CPU / memory / RDMA NICs / pods (its pod capacity, ``max_pods``) from allocatable,
  fabric place from the ordered topology labels, its zone from ``kant.io/zone``, its labels
  and taints as they are; it takes pods when ``Ready`` is ``True`` and it is not cordoned;
- a pod: the effective request (the sum of its containers, or the largest init container if
  larger), a share of one GPU from the ``gpu-fraction`` annotation, the tenant from the first
  queue label or annotation it carries (kant, Kueue, KAI, Volcano) else its namespace, the
  priority from ``spec.priority``, non-preemptible when ``spec.preemptionPolicy`` is ``Never``,
  allowed GPU models from its nodeSelector or required node affinity on the model label,
  the rest of both as its node selector, its tolerations, its job's kind from
  ``kant.io/kind``, topology from the Kueue or KAI required / preferred annotations;
- a gang: the scheduler-plugins PodGroup label (``minMember`` from the PodGroup), else Kueue's
  pod-group label with its total-count annotation; otherwise the pod is its own job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal, DecimalException
from typing import Any, Final

import attrs

from kant.errors import InvalidObjectError, KantError, ValidationError
from kant.k8s.settings import K8sSettings
from kant.model import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    MAX_NICS_PER_NODE,
    MAX_PODS_PER_JOB,
    MAX_PODS_PER_NODE,
    MILLI,
    NODE_NAME_FIELD,
    Job,
    JobKind,
    Labels,
    NodeRequirement,
    NodeSelector,
    NodeSpec,
    PodAffinityTerm,
    PodId,
    PreferredPodTerm,
    PreferredTerm,
    Resources,
    Role,
    SelectorOp,
    Taint,
    Tier,
    Toleration,
    TopologyWish,
    is_label,
    is_name,
)

Obj = Mapping[str, Any]

QUEUE_KEYS: Final = (
    "kant.io/queue",
    "kueue.x-k8s.io/queue-name",
    "kai.scheduler/queue",
    "scheduling.volcano.sh/queue-name",
)
"""Where a pod names its tenant, first found wins (labels, then annotations, per key)."""
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
KUEUE_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
PREEMPTED_REASON: Final = "PreemptionByScheduler"
"""The ``reason`` of the ``DisruptionTarget`` condition kant writes on a pod it preempts."""
PREEMPTED_PREFIX: Final = "kant: preempted by"
"""How the message of that condition starts."""
KUEUE_GROUP_PREFIX: Final = "kueue:"
"""Before a Kueue group's name in its gang key (``namespace/kueue:name``): a PodGroup's name
(a DNS subdomain) has no colon, so a Kueue group and a PodGroup of the same name in one
namespace are two gangs."""
FRACTION_ANNOTATION: Final = "gpu-fraction"
REQUIRED_TOPOLOGY: Final = (
    "kant.io/topology-required",
    "kueue.x-k8s.io/podset-required-topology",
    "kai.scheduler/topology-required-placement",
)
PREFERRED_TOPOLOGY: Final = (
    "kant.io/topology-preferred",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kai.scheduler/topology-preferred-placement",
)
RUNTIME_ANNOTATION: Final = "kant.io/runtime-seconds"
GPUS_ANNOTATION: Final = "kant.io/gpus"
NICS_ANNOTATION: Final = "kant.io/nics"
MILLI_ANNOTATION: Final = "kant.io/gpu-milli"
POD_ID_ANNOTATION: Final = "kant.io/pod-id"
TENANT_ANNOTATION: Final = "kant.io/tenant"
"""The tenant a bound pod's job was charged to, as kant wrote it at binding time: a restart
charges the job to it whatever the pod's queue label or annotation says by then."""
MIRRORED_TAINTS: Final = frozenset({
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
})  # fmt: skip
"""Taints the node lifecycle controller keeps in step with the ``Ready`` condition and
``spec.unschedulable``, which kant reads itself: not read (a new node has ``not-ready`` until
that controller sees it Ready, and a cluster without the controller never loses it)."""
SPREAD_ANNOTATION: Final = "kant.io/spread"
"""``"true"``: the role's pods go on different nodes (an inference service's replicas)."""
POD_OWN_LABELS: Final = frozenset({
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "batch.kubernetes.io/job-completion-index",
    "training.kubeflow.org/replica-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
})  # fmt: skip
"""Labels that name one pod of a group (its name or index): pods of a gang that differ only
in these are one role (its labels leave them out); any other label differing makes two
roles, so that a term selecting it (``replica-type: master``) selects the right pods."""
NAMESPACE_LABEL: Final = "kant.io/namespace"
"""The label under which every pod's namespace is among its kant labels, so that a pod
affinity term's namespaces are one more requirement on labels (:func:`_pod_terms`)."""
NamespaceLabels = Mapping[str, Mapping[str, str]]
"""The namespaces of the cluster, each with its labels (the shim's watch of Namespaces): a
pod affinity term's ``namespaceSelector`` selects among them."""
_NO_NAMESPACES: Final[NamespaceLabels] = {}
_TERM_LISTS: Final = tuple(
    (kind, when)
    for kind in ("podAffinity", "podAntiAffinity")
    for when in ("required", "preferred")
)
KIND_KEY: Final = "kant.io/kind"
"""The pod label (or annotation) naming its job's kind (``training``, ``inference``, ``dev``):
E-Spread places inference pods in its zone."""


def is_count(v: object) -> bool:
    """Is ``v`` a string of one to nine ASCII digits 0-9? (``str.isdigit`` also takes other
    scripts' digits and superscripts, which ``int`` refuses, and ``int`` refuses more than
    4300 digits; no count or index kant reads has more than nine.)"""
    return isinstance(v, str) and 0 < len(v) <= 9 and v.isascii() and v.isdigit()


_FRACTION = re.compile(r"^[0-9]{0,30}\.?[0-9]{1,30}(?:[eE][+-]?[0-9]{1,3})?$")
"""A ``gpu-fraction``: an ASCII decimal, its exponent of at most three digits (``Decimal``
alone also reads ``0.2_5`` and other scripts' digits, and cannot compare ``1e99999999999``)."""
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX: Final[Mapping[str, Decimal]] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def quantity(value: Any, *, where: str = "", field: str = "quantity") -> Decimal:
    """A Kubernetes quantity (``"500m"``, ``"16Gi"``, ``8``) as an exact Decimal; raises
    :class:`~kant.errors.InvalidObjectError` for anything else."""
    if isinstance(value, bool):
        raise InvalidObjectError(field, value, "is not a quantity", where=where or None)
    q: Decimal | None = None
    try:
        if isinstance(value, int | float):
            q = Decimal(str(value))
        elif isinstance(value, str):
            m = _QUANTITY.match(value.strip())
            if m is not None and m.group(2) in _SUFFIX:
                q = Decimal(m.group(1)) * _SUFFIX[m.group(2)]
    except DecimalException:  # (an exponent past Decimal's range: "1e1000000")
        q = None
    if q is None or not q.is_finite():  # (a float inf or nan)
        raise InvalidObjectError(field, value, "is not a quantity", where=where or None)
    if abs(q) > _MAX_QUANTITY:  # (read as it is, "1e999999" took seconds to turn into MiB)
        raise InvalidObjectError(
            field, value, "is not a quantity: past 2^63-1, the most Kubernetes holds",
            where=where or None,
        )  # fmt: skip
    return q


_MAX_QUANTITY: Final = Decimal(2**63 - 1)
"""The largest magnitude of a Kubernetes quantity (the API server caps any larger one)."""


def _count(q: Decimal, value: Any, *, where: str, field: str) -> int:
    """A device count (GPUs, NICs: extended resources, which Kubernetes takes only whole)
    from the quantity ``q`` read of ``value``, or :class:`InvalidObjectError`."""
    if q != q.to_integral_value():
        raise InvalidObjectError(field, value, "must be a whole number of devices", where=where)
    return int(q)


def _meta(obj: Obj) -> Obj:
    return _mapping(obj.get("metadata"))


def _mapping(v: Any) -> Obj:
    """``v`` if it is a mapping, else an empty one (a field of an unexpected shape, read by a
    function that never raises)."""
    return v if isinstance(v, Mapping) else {}


def uid_of(obj: Obj) -> str:
    """The object's ``metadata.uid`` ("" when absent: objects built by hand, which a change
    of uid never concerns)."""
    return str(_meta(obj).get("uid") or "")


def deletion_deadline(obj: Obj) -> float:
    """When the object's deletion grace period ends (its ``metadata.deletionTimestamp``), in
    seconds since the epoch; 0.0 when it has none."""
    return timestamp(_meta(obj).get("deletionTimestamp"))


def labels_of(obj: Obj) -> Mapping[str, str]:
    """The object's labels ({} when none)."""
    return _meta(obj).get("labels") or {}


def annotations_of(obj: Obj) -> Mapping[str, str]:
    """The object's annotations ({} when none)."""
    return _meta(obj).get("annotations") or {}


def pod_key(pod: Obj) -> str:
    """``namespace/name`` of a pod."""
    m = _meta(pod)
    return f"{m.get('namespace', 'default')}/{m.get('name')}"


# --------------------------------------------------------------------------- nodes


@attrs.frozen(kw_only=True)
class NodeFacts:
    """A node as kant sees it: its spec, and whether it takes new pods (``ready``: Ready and
    not cordoned) and is alive at all (``alive``: Ready; a NotReady node is lost)."""

    spec: NodeSpec
    alive: bool
    schedulable: bool


def _pod_count(value: Any, where: str) -> int | None:
    """A node's ``allocatable.pods`` as its ``max_pods``: a whole number of pods (anything
    else, ``"500m"``, is InvalidObjectError naming the field); one above
    :data:`~kant.model.MAX_PODS_PER_NODE` is no limit (None). A negative count is left to
    ``NodeSpec`` to refuse (naming ``max_pods``)."""
    q = quantity(value, where=where, field="allocatable.pods")
    if q != q.to_integral_value():
        raise InvalidObjectError("allocatable.pods", value, "is not a whole number of pods",
                                 where=where)  # fmt: skip
    return None if q > MAX_PODS_PER_NODE else int(q)


@attrs.frozen(kw_only=True)
class NodeNeed:
    """What kant's pods bound to a node need of it: ``gpus`` and ``nics`` (device counts),
    ``cpu_milli``, ``memory_mib``. What :func:`node_facts` reads, instead of a value kant
    refuses, of a node kant cannot take, read only to count those pods (``Shim.sync``)."""

    gpus: int = 0
    nics: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0


def node_facts(node: Obj, settings: K8sSettings, *, need: NodeNeed | None = None) -> NodeFacts:
    """Translate a Node. Raises :class:`~kant.errors.InvalidObjectError` for a malformed
    allocatable quantity, a malformed taint, or any value :class:`~kant.model.NodeSpec`
    refuses (more than ``MAX_GPUS_PER_NODE`` GPUs, a CPU count past ``MAX_CPU_MILLI``).

    ``need``: the node is read only to count kant's pods there (a node kant cannot take,
    never to place anything there: see ``Shim.sync``), and what kant would refuse is read
    instead: a GPU or NIC count, a CPU or memory amount, that is malformed, negative or past
    its limit as what ``need`` says (never past the limit); an ``allocatable.pods`` kant
    refuses as no limit; a malformed taint, or a label, topology or zone label kant refuses,
    left out. A value kant takes is read as it is. Raises then only for a name or a GPU
    model kant refuses: nothing stands in for the node's name, nor for its model, which
    names the quota its pods are charged to (the node cannot be read at all)."""
    try:
        return _node_facts(node, settings, need)
    except KantError:
        raise
    except (TypeError, ValueError, AttributeError) as e:  # (a field of an unexpected shape)
        key = str(_meta(node).get("name"))
        raise InvalidObjectError("node", key, f"malformed: {e}", where=f"Node {key}") from None


def _node_facts(node: Obj, settings: K8sSettings, need: NodeNeed | None) -> NodeFacts:
    name = str(_meta(node).get("name"))
    where = f"Node {name}"
    status = node.get("status") or {}
    alloc = status.get("allocatable") or {}

    def amount(res: str, unit: Callable[[Decimal], int], most: int, instead: int) -> int:
        """Allocatable ``res`` in ``unit``s; with ``need``, one kant refuses (malformed,
        negative, past ``most``) as ``instead`` (at most ``most``). (Without, a value past
        ``most`` is left to NodeSpec to refuse.)"""
        field = f"allocatable.{res}"
        if need is None:
            return unit(quantity(alloc.get(res, 0), where=where, field=field))
        try:
            n = unit(quantity(alloc.get(res, 0), where=where, field=field))
        except InvalidObjectError:
            n = -1
        return n if 0 <= n <= most else min(max(instead, 0), most)

    want = need if need is not None else NodeNeed()

    def devices(res: str) -> Callable[[Decimal], int]:
        return lambda q: _count(q, alloc.get(res), where=where, field=f"allocatable.{res}")

    gpus = amount(
        settings.gpu_resource, devices(settings.gpu_resource), MAX_GPUS_PER_NODE, want.gpus
    )
    lab = labels_of(node)
    model = (lab.get(settings.gpu_model_label) or settings.default_gpu_model) if gpus else None
    cpu = amount("cpu", lambda q: int(q * 1000), MAX_CPU_MILLI, want.cpu_milli)
    mem = amount("memory", lambda q: int(q // (1 << 20)), MAX_MEMORY_MIB, want.memory_mib)
    max_pods = _max_pods(alloc, where, lenient=need is not None)
    levels: dict[Tier, str] = {}
    for label, tier in settings.topology:
        if tier not in levels and lab.get(label):
            domain = _domain(label, lab[label])
            if need is None or is_name(domain):
                levels[tier] = domain
    leaf, spine, superspine = (
        levels.get(Tier.LEAF),
        levels.get(Tier.SPINE),
        levels.get(Tier.SUPERSPINE),
    )
    # A known wider level with an unknown narrower one: the node shares that narrower level with
    # no other node (kant's fabric needs a leaf under a spine and a spine under a superspine).
    if superspine and not spine:
        spine = f"{superspine}|{name}"
    if spine and not leaf:
        leaf = f"{spine}|{name}"
    zone = lab.get(settings.zone_label) or None
    if need is not None and not is_name(zone):
        zone = None
    labels = {str(k): str(v) for k, v in lab.items()}
    if need is not None:
        labels = {k: v for k, v in labels.items() if is_label(k, v)}
    try:
        spec = NodeSpec(
            name=name,
            gpu_model=model,
            gpus=gpus,
            cpu_milli=cpu,
            memory_mib=mem,
            rdma_nics=amount(
                settings.nic_resource, devices(settings.nic_resource), MAX_NICS_PER_NODE, want.nics
            ),
            max_pods=max_pods,
            leaf=leaf,
            spine=spine,
            superspine=superspine,
            hbd=levels.get(Tier.HBD),
            zone=zone,
            labels=labels,
            taints=_taints(node, where, lenient=need is not None),
        )
    except ValidationError as e:
        # (a count kant refuses, 72 GPUs, is named by the allocatable it was read from)
        field = {
            "gpus": f"allocatable.{settings.gpu_resource}",
            "rdma_nics": f"allocatable.{settings.nic_resource}",
        }.get(e.field, e.field)
        raise InvalidObjectError(field, e.value, e.reason, where=where) from None
    ready = node_ready(node)
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    return NodeFacts(spec=spec, alive=ready, schedulable=ready and not cordoned)


def _max_pods(alloc: Obj, where: str, *, lenient: bool) -> int | None:
    """The node's ``max_pods`` from its allocatable (:func:`_pod_count`; absent: no limit).
    ``lenient``: a count kant refuses (``500m``, negative) is no limit instead."""
    if "pods" not in alloc:
        return None
    if not lenient:
        return _pod_count(alloc["pods"], where)
    try:
        n = _pod_count(alloc["pods"], where)
    except InvalidObjectError:
        return None
    return n if n is None or n >= 0 else None


def node_ready(node: Obj) -> bool:
    """Whether the Node's ``Ready`` condition is ``True`` (read even of a node
    :func:`node_facts` refuses). Never raises."""
    status = node.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return isinstance(conditions, Sequence) and any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def _taints(node: Obj, where: str, *, lenient: bool = False) -> tuple[Taint, ...]:
    """The node's ``spec.taints``, but those that only mirror what kant reads from the node
    itself (:data:`MIRRORED_TAINTS`). A malformed taint is InvalidObjectError naming it;
    ``lenient``: it is left out instead."""
    out = []
    for i, t in enumerate((node.get("spec") or {}).get("taints") or ()):
        if not isinstance(t, Mapping):
            if lenient:
                continue
            raise InvalidObjectError(f"spec.taints[{i}]", t, "is not a taint", where=where)
        if t.get("key") in MIRRORED_TAINTS:
            continue
        try:
            out.append(
                Taint(key=t.get("key") or "", value=t.get("value") or "", effect=t.get("effect"))
            )
        except ValidationError as e:
            if lenient:
                continue
            raise InvalidObjectError(f"spec.taints[{i}].{e.field}", e.value, e.reason,
                                     where=where) from None  # fmt: skip
    return tuple(out)


def _domain(label: str, value: str) -> str:
    # domain names must not contain '/', which labels do: keep the value, which is unique
    # within its label, prefixed by the label's last segment.
    return f"{label.rsplit('/', 1)[-1]}={value}".replace("/", "_")


# --------------------------------------------------------------------------- pods


@attrs.frozen(kw_only=True)
class PodFacts:
    """A pod as kant sees it. ``group`` is the gang key (:func:`pod_group_key`) or None;
    ``min_member`` the group's size known from the pod (Kueue's total count), else None;
    ``created`` and ``started`` (None before the kubelet started it) in seconds since the
    epoch; ``gated``: it has scheduling gates (``spec.schedulingGates``), and is not to be
    scheduled until they are removed."""

    key: str
    uid: str
    namespace: str
    name: str
    tenant: str
    priority: int
    preemptible: bool
    resources: Resources
    gpu_models: frozenset[str]
    node_selector: NodeSelector | None
    tolerations: tuple[Toleration, ...]
    preferred: tuple[PreferredTerm, ...]
    labels: Labels
    pod_affinity: tuple[PodAffinityTerm, ...]
    pod_anti_affinity: tuple[PodAffinityTerm, ...]
    pod_preferences: tuple[PreferredPodTerm, ...]
    kind: JobKind
    spread: bool
    topology: TopologyWish | None
    group: str | None
    min_member: int | None
    created: float
    started: float | None
    runtime: float | None
    node: str | None
    phase: str
    deleting: bool
    ours: bool
    gated: bool = False

    @property
    def signature(self) -> tuple[Any, ...]:
        """What makes two pods of a group the same role."""
        return (
            self.resources,
            tuple(sorted(self.gpu_models)),
            self.topology,
            self.node_selector,
            self.tolerations,
            self.preferred,
            self.spread,
            self.pod_affinity,
            self.pod_anti_affinity,
            self.pod_preferences,
            tuple(sorted((k, v) for k, v in self.labels.items() if k not in POD_OWN_LABELS)),
        )

    def role(self, name: str, replicas: int, labels: Mapping[str, str] | None = None) -> Role:
        """The role of ``replicas`` pods like this one, called ``name``, with ``labels``
        (default: this pod's)."""
        return Role(
            name=name,
            replicas=replicas,
            resources=self.resources,
            gpu_models=self.gpu_models,
            topology=self.topology,
            node_selector=self.node_selector,
            tolerations=self.tolerations,
            preferred=self.preferred,
            spread=self.spread,
            labels=self.labels if labels is None else labels,
            pod_affinity=self.pod_affinity,
            pod_anti_affinity=self.pod_anti_affinity,
            pod_preferences=self.pod_preferences,
        )


@attrs.frozen(kw_only=True)
class PodState:
    """What the shim reads of any pod, whatever its annotations say: where it runs and
    whether it is kant's. ``node`` None while it is not bound."""

    key: str
    node: str | None
    phase: str
    deleting: bool
    ours: bool


def pod_state(pod: Obj, settings: K8sSettings) -> PodState:
    """The pod's :class:`PodState`. Never raises: it reads only fields the API server
    validates."""
    meta = _meta(pod)
    spec, status = _mapping(pod.get("spec")), _mapping(pod.get("status"))
    node = spec.get("nodeName")
    return PodState(
        key=pod_key(pod),
        node=str(node) if node else None,
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        ours=spec.get("schedulerName", "default-scheduler") == settings.scheduler_name,
    )


def pod_facts(
    pod: Obj, settings: K8sSettings, *, namespaces: NamespaceLabels | None = _NO_NAMESPACES
) -> PodFacts:
    """Translate a Pod; ``namespaces``: the cluster's namespaces and their labels, which a
    pod affinity term's ``namespaceSelector`` selects among (none given: it selects none;
    None: they cannot be read, so a selector with requirements refuses the pod).
    Raises :class:`~kant.errors.InvalidObjectError` for a malformed request,
    ``gpu-fraction``, topology annotation or group count, or a field of an unexpected type."""
    try:
        return _pod_facts(pod, settings, namespaces)
    except KantError:
        raise
    except (TypeError, ValueError, AttributeError) as e:  # (a field of an unexpected shape)
        raise _malformed(pod, e) from None


def _priority(v: Any, where: str) -> int:
    """``spec.priority`` (an int32 the API server fills in from the PriorityClass; 0 when
    absent), or :class:`InvalidObjectError` for anything else (``1.7`` or ``True`` would be
    read as 1)."""
    if v is None:
        return 0
    if type(v) is not int or not -(2**31) <= v < 2**31:
        raise InvalidObjectError("spec.priority", v, "must be an int32", where=where)
    return v


def _malformed(pod: Obj, e: Exception) -> InvalidObjectError:
    """A pod with a field of an unexpected shape (``e``, what reading it raised)."""
    return InvalidObjectError("pod", pod_key(pod), f"malformed: {e}", where=f"Pod {pod_key(pod)}")


def _pod_facts(pod: Obj, settings: K8sSettings, namespaces: NamespaceLabels | None) -> PodFacts:
    meta = _meta(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    key = pod_key(pod)
    where = f"Pod {key}"
    lab, ann = labels_of(pod), annotations_of(pod)
    ns = str(meta.get("namespace", "default"))
    return PodFacts(
        key=key,
        uid=str(meta.get("uid", "")),
        namespace=ns,
        name=str(meta.get("name")),
        tenant=_tenant(lab, ann, ns),
        priority=_priority(spec.get("priority"), where),
        preemptible=spec.get("preemptionPolicy") != "Never",
        resources=_counted(pod, settings, where),
        gpu_models=_models(spec, settings, where),
        node_selector=_node_selector(spec, settings, where),
        tolerations=_tolerations(spec, where),
        preferred=_preferred(spec, where),
        labels=_pod_labels(lab, ns),
        pod_affinity=_pod_terms(spec, lab, ns, "podAffinity", where, namespaces),
        pod_anti_affinity=_pod_terms(spec, lab, ns, "podAntiAffinity", where, namespaces),
        pod_preferences=_pod_preferences(spec, lab, ns, where, namespaces),
        kind=_kind(lab, ann, where),
        spread=_flag(ann, SPREAD_ANNOTATION, where),
        topology=_topology(ann, settings, where),
        group=_group(lab, ns),
        min_member=_total(lab, ann, where),
        created=timestamp(meta.get("creationTimestamp")),
        started=timestamp(status.get("startTime")) or None,
        runtime=_runtime(ann, where),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        ours=spec.get("schedulerName", "default-scheduler") == settings.scheduler_name,
        gated=_gated(spec, where),
    )


def _gated(spec: Obj, where: str) -> bool:
    """Whether the pod has scheduling gates: ``spec.schedulingGates`` is a non-empty list
    (each ``{"name": ...}``, as the API server checks)."""
    gates = spec.get("schedulingGates")
    if gates is None:
        return False
    if not isinstance(gates, list) or not all(
        isinstance(g, Mapping) and isinstance(g.get("name"), str) and g["name"] for g in gates
    ):
        raise InvalidObjectError(
            "spec.schedulingGates", gates, "must be a list of {name: <gate>}", where=where
        )
    return bool(gates)


def pod_resources(pod: Obj, settings: K8sSettings, *, shares: bool = True) -> Resources:
    """The pod's effective request: for each resource the larger of the containers' sum and
    the largest init container, plus the pod's ``spec.overhead`` (what its RuntimeClass
    costs: the Kubernetes rule, as kube-scheduler counts it), a GPU share from
    ``gpu-fraction`` (unless ``shares`` is False: whole GPUs only, the annotation not
    read)."""
    spec = pod.get("spec") or {}
    where = f"Pod {pod_key(pod)}"
    devices = (settings.gpu_resource, settings.nic_resource)
    names = ("cpu", "memory", *devices)
    total = dict.fromkeys(names, Decimal(0))
    init = dict.fromkeys(names, Decimal(0))
    for part, acc, add in (("containers", total, True), ("initContainers", init, False)):
        for c in spec.get(part) or ():
            req = (c.get("resources") or {}).get("requests") or {}
            lim = (c.get("resources") or {}).get("limits") or {}
            for r in names:
                v = req.get(r, lim.get(r) if r not in ("cpu", "memory") else None)
                if v is None:
                    continue
                field = f"{part}.resources.requests.{r}"
                q = _request(v, r, devices, where=where, field=field)
                acc[r] = acc[r] + q if add else max(acc[r], q)
    eff = {r: max(total[r], init[r]) for r in names}
    overhead = spec.get("overhead") or {}
    if not isinstance(overhead, Mapping):
        raise InvalidObjectError("spec.overhead", overhead, "must be a mapping", where=where)
    for r in names:
        if r in overhead:
            field = f"spec.overhead.{r}"
            eff[r] += _request(overhead[r], r, devices, where=where, field=field)
    gpus = int(eff[settings.gpu_resource])
    milli = 0
    frac = annotations_of(pod).get(FRACTION_ANNOTATION) if shares else None
    if frac is not None:
        text = str(frac).strip()
        f = Decimal(text) if _FRACTION.match(text) else Decimal(-1)
        if not f.is_finite() or not 0 < f < 1:
            raise InvalidObjectError(
                FRACTION_ANNOTATION, frac, "must be a number in (0, 1)", where=where
            )
        if f * MILLI < Decimal("0.5"):
            raise InvalidObjectError(
                FRACTION_ANNOTATION, frac, "is below the finest share, 0.001 of a GPU",
                where=where,
            )  # fmt: skip
        if gpus:
            raise InvalidObjectError(
                FRACTION_ANNOTATION,
                frac,
                f"cannot be combined with {settings.gpu_resource}",
                where=where,
            )
        milli = max(1, min(MILLI - 1, int((f * MILLI).to_integral_value())))
    return Resources(
        gpus=gpus,
        gpu_milli=milli,
        cpu_milli=math.ceil(eff["cpu"] * 1000),
        memory_mib=math.ceil(eff["memory"] / (1 << 20)),
        rdma_nics=int(eff[settings.nic_resource]),
    )


def _request(value: Any, res: str, devices: tuple[str, ...], *, where: str, field: str) -> Decimal:
    """A request (or overhead) of ``res``: a quantity of at least 0, whole for a device
    resource (``devices``), as the API server validates it; else :class:`InvalidObjectError`
    (a pod built by hand or by another tool: "1.5" GPUs would otherwise be read as 1)."""
    q = quantity(value, where=where, field=field)
    if q < 0:
        raise InvalidObjectError(field, value, "must be >= 0", where=where)
    if res in devices:
        _count(q, value, where=where, field=field)
    return q


def held_job(
    pod: Obj, job: str, *, namespaces: NamespaceLabels | None = _NO_NAMESPACES
) -> tuple[Job, InvalidObjectError | None]:
    """What pod affinity reads of a pod kant holds but did not place (another scheduler's, one
    bound by ``spec.nodeName``, or one of kant's being stopped), as job ``job``: one role
    ``pod`` of one pod with the pod's labels (its namespace among them), its required
    anti-affinity terms, which keep kant's pods out of its domain (Kubernetes' symmetry), and
    its required affinity and preferred terms, which weigh in the score of the pods they
    select; a term's ``namespaceSelector`` selects among ``namespaces`` (as
    :func:`pod_facts`). Terms kant cannot read (a malformed term, a selector with requirements
    when ``namespaces`` is None) are left out, kind by kind,
    and the first error is returned with the job. Never raises."""
    meta = _meta(pod)
    spec = pod.get("spec") or {}
    lab = labels_of(pod)
    ns = str(meta.get("namespace", "default"))
    where = f"Pod {pod_key(pod)}"
    errors: list[InvalidObjectError] = []
    if not isinstance(lab, Mapping):
        errors.append(InvalidObjectError("metadata.labels", lab, "must be a mapping", where=where))
        lab = {}

    def read(f: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
        try:
            return f()
        except InvalidObjectError as e:
            errors.append(e)
        except (TypeError, ValueError, AttributeError) as e:  # (a field of an unexpected shape)
            errors.append(_malformed(pod, e))
        return ()

    anti = read(lambda: _pod_terms(spec, lab, ns, "podAntiAffinity", where, namespaces))
    near = read(lambda: _pod_terms(spec, lab, ns, "podAffinity", where, namespaces))
    prefs = read(lambda: _pod_preferences(spec, lab, ns, where, namespaces))
    try:
        role = Role(name="pod", replicas=1, labels=_pod_labels(lab, ns), pod_anti_affinity=anti,
                    pod_affinity=near, pod_preferences=prefs)  # fmt: skip
    except ValidationError as e:  # (a label the API server let through and kant refuses)
        errors.append(InvalidObjectError(f"metadata.{e.field}", e.value, e.reason, where=where))
        role = Role(name="pod", replicas=1, labels={NAMESPACE_LABEL: ns})
    return Job(id=job, roles=(role,)), (errors[0] if errors else None)


def _counted(pod: Obj, settings: K8sSettings, where: str) -> Resources:
    """:func:`pod_resources` of a kant pod, refused when it asks a resource kant does not
    count (an extended resource other than the GPU or NIC resource, or a native one other
    than cpu and memory: ``hugepages-<size>``, ``ephemeral-storage``), unless
    ``ignoredResources`` lists it: kant would bind it to a node whether the node has that
    resource or not."""
    spec = pod.get("spec") or {}
    mine = {settings.gpu_resource, settings.nic_resource, "cpu", "memory",
            *settings.ignored_resources}  # fmt: skip
    for part in ("containers", "initContainers"):
        for c in spec.get(part) or ():
            res = c.get("resources") or {}
            for kind in ("requests", "limits"):
                for r, v in (res.get(kind) or {}).items():
                    if r in mine or str(r).startswith("kubernetes.io/"):
                        continue
                    if quantity(v, where=where, field=f"{part}.resources.{kind}.{r}") > 0:
                        raise InvalidObjectError(
                            f"{part}.resources.{kind}", r,
                            f"is a resource kant does not count (it counts "
                            f"{settings.gpu_resource}, {settings.nic_resource}, cpu and "
                            f"memory; kubernetes.ignoredResources lists those it may ignore)",
                            where=where,
                        )  # fmt: skip
    return pod_resources(pod, settings)


def _tenant(lab: Mapping[str, str], ann: Mapping[str, str], ns: str) -> str:
    for k in QUEUE_KEYS:
        v = lab.get(k) or ann.get(k)
        if v:
            return str(v)
    return ns


def _affinity_terms(spec: Obj) -> Sequence[Obj]:
    """The pod's required node affinity terms (ORed), as written."""
    aff = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return aff.get("nodeSelectorTerms") or ()


def _matches_nothing(term: Obj) -> bool:
    """Whether an affinity term has no requirement: it matches no node (Kubernetes)."""
    return not (term.get("matchExpressions") or term.get("matchFields"))


def _strings(v: Any, path: str, where: str) -> tuple[str, ...]:
    """A list of strings as a pod writes it (a requirement's ``values``, a term's
    ``namespaces`` or label keys; None: none). Anything else is refused with an
    :class:`~kant.errors.InvalidObjectError` naming ``path``: a number or null among them
    (never read as the string ``"8"`` or ``"None"``), and a bare string or a mapping (never
    read as its characters or its keys)."""
    if v is None:
        return ()
    if isinstance(v, str) or not isinstance(v, Sequence) or not all(isinstance(x, str) for x in v):
        raise InvalidObjectError(path, v, "must be a list of strings", where=where)
    return tuple(v)


def _label_pairs(m: Any, path: str, where: str) -> list[NodeRequirement]:
    """The requirements a ``nodeSelector`` or ``matchLabels`` mapping writes (``In`` its one
    value), by key. A key or a value that is not a string (``{8: "x"}``, ``{"rack": 8}``,
    ``null``) is refused with an :class:`~kant.errors.InvalidObjectError` naming ``path``
    and the key, never read as its string; so is ``m`` not a mapping (None: empty)."""
    if m is None:
        return []
    if not isinstance(m, Mapping):
        raise InvalidObjectError(path, m, "must be a mapping", where=where)
    for k, v in m.items():
        if not isinstance(k, str):
            raise InvalidObjectError(f"{path} key", k, "must be a string (a label key)",
                                     where=where)  # fmt: skip
        if not isinstance(v, str):
            raise InvalidObjectError(f"{path}.{k}", v, "must be a string (a label value)",
                                     where=where)  # fmt: skip
    return [
        NodeRequirement(key=k, operator=SelectorOp.IN, values=(v,)) for k, v in sorted(m.items())
    ]


_NO_MODEL: Final = "an empty GPU model name matches no GPU node (leave the label out for any model)"
_PIPED_MODEL: Final = (
    "a GPU model name has no '|': kant's model names may not hold it, and no node's label "
    "value can (a label value is letters, digits, '-', '_' and '.')"
)


def _models(spec: Obj, settings: K8sSettings, where: str) -> frozenset[str]:
    key = settings.gpu_model_label
    allowed: set[str] | None = None  # None: every model
    pairs = spec.get("nodeSelector")  # (not a mapping: refused by _read_selector)
    sel = pairs.get(key) if isinstance(pairs, Mapping) else None
    if sel is not None:
        if not isinstance(sel, str):  # (the API server takes only strings: 0 is no model "0")
            raise InvalidObjectError(key, sel, "a GPU model must be a string", where=where)
        if "|" in sel:
            raise InvalidObjectError(key, sel, _PIPED_MODEL, where=where)
        allowed = {sel}
    terms = _affinity_terms(spec)
    if terms:
        union: set[str] | None = set()  # the terms are ORed
        for i, t in enumerate(terms):
            if _matches_nothing(t):
                continue  # (it allows no model)
            vals: set[str] | None = None  # a term's expressions are ANDed
            for j, e in enumerate(t.get("matchExpressions") or ()):
                if e.get("key") != key or e.get("operator") not in ("In", "NotIn"):
                    continue
                at = f"nodeSelectorTerms[{i}].matchExpressions[{j}].values"
                vs = set(_strings(e.get("values"), at, where))  # (never 8 read as "8")
                if any("|" in v for v in vs):  # (In and NotIn alike)
                    raise InvalidObjectError(at, e.get("values"), _PIPED_MODEL, where=where)
                if e.get("operator") == "NotIn":
                    continue  # (a requirement of the node selector, _node_selector)
                if "" in vs:
                    raise InvalidObjectError(key, e.get("values"), _NO_MODEL, where=where)
                vals = vs if vals is None else vals & vs
            if vals is None or union is None:  # a term without a model constraint: any
                union = None
                break
            union |= vals
        if union is not None:
            allowed = union if allowed is None else allowed & union
    if "" in (allowed or ()):  # (the nodeSelector's value)
        raise InvalidObjectError(key, sel, _NO_MODEL, where=where)
    if allowed is not None and not allowed:
        # (an empty set would read as "any model": say that none is allowed instead)
        raise InvalidObjectError(
            key, sel, "the nodeSelector and the required node affinity allow no GPU model",
            where=where,
        )  # fmt: skip
    return frozenset(allowed or ())


def _node_selector(spec: Obj, settings: K8sSettings, where: str) -> NodeSelector | None:
    """The pod's ``nodeSelector`` and required node affinity as one selector: each affinity
    term (terms are ORed) with every ``nodeSelector`` pair added (both must hold). None when
    nothing is asked beyond the GPU model (:func:`_models` reads that into the role's
    models), or nothing at all. A term with no requirement matches no node (Kubernetes):
    it is left out, and a pod left with none is refused."""
    try:
        return _read_selector(spec, settings, where)
    except ValidationError as e:
        raise InvalidObjectError(e.field, e.value, e.reason, where=where) from None


def _read_selector(spec: Obj, settings: K8sSettings, where: str) -> NodeSelector | None:
    common = tuple(_label_pairs(spec.get("nodeSelector"), "nodeSelector", where))
    raw_terms = _affinity_terms(spec)
    terms: list[tuple[NodeRequirement, ...]] = []
    for i, t in enumerate(raw_terms):
        if _matches_nothing(t):
            continue
        terms.append((*_requirements(t, f"nodeSelectorTerms[{i}]", where), *common))
    if raw_terms and not terms:
        raise InvalidObjectError(
            "nodeSelectorTerms", raw_terms, "no term has a requirement: it matches no node",
            where=where,
        )  # fmt: skip
    if not terms and common:
        terms.append(common)
    model = settings.gpu_model_label
    if all(
        r.key == model and r.operator is SelectorOp.IN and not r.field for t in terms for r in t
    ):
        return None  # (only the GPU model, or nothing: the role's models say it exactly)
    return NodeSelector(terms=tuple(terms))


def _requirements(term: Obj, path: str, where: str) -> list[NodeRequirement]:
    """The requirements of one node selector term (``matchExpressions`` and ``matchFields``,
    ANDed); ``path`` names the term in errors. Raises ValidationError for a bad one."""
    reqs: list[NodeRequirement] = []
    for part, field in (("matchExpressions", False), ("matchFields", True)):
        for j, e in enumerate(term.get(part) or ()):
            at = f"{path}.{part}[{j}]"
            if not isinstance(e, Mapping):
                raise InvalidObjectError(at, e, "must be a mapping", where=where)
            key: Any = e.get("key")
            if field and key != NODE_NAME_FIELD:
                raise InvalidObjectError(
                    f"{at}.key", key, f"the only field a node selector reads is {NODE_NAME_FIELD}",
                    where=where,
                )  # fmt: skip
            values = _strings(e.get("values"), f"{at}.values", where)
            try:
                reqs.append(
                    NodeRequirement(key=key, operator=e.get("operator"), values=values,
                                    field=field)
                )  # fmt: skip
            except ValidationError as err:
                raise InvalidObjectError(
                    f"{at}.{err.field}", err.value, err.reason, where=where
                ) from None
    return reqs


def _preferred(spec: Obj, where: str) -> tuple[PreferredTerm, ...]:
    """The pod's preferred node affinity terms, each with its weight; a term with no
    requirement is left out (Kubernetes: it matches every node with weight 0, a no-op).
    Sorted: the same terms in another order are the same role."""
    raw = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    out = []
    for i, t in enumerate(raw):
        path = f"preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        pref: Any = t.get("preference") or {} if isinstance(t, Mapping) else None
        if not isinstance(pref, Mapping):
            raise InvalidObjectError(path, t, "must be {weight, preference}", where=where)
        if _matches_nothing(pref):
            continue
        reqs = _requirements(pref, f"{path}.preference", where)
        weight: Any = t.get("weight")
        try:
            out.append(PreferredTerm(weight=weight, requirements=tuple(reqs)))
        except ValidationError as e:
            raise InvalidObjectError(f"{path}.{e.field}", e.value, e.reason, where=where) from None
    # (repeats kept: Kubernetes adds the weight of every term a node meets)
    return tuple(sorted(out, key=repr))


def _pod_labels(lab: Mapping[str, str], ns: str) -> Labels:
    """The pod's labels as kant reads them: its own, and its namespace under
    :data:`NAMESPACE_LABEL` (values the API server validated; a label kant would refuse is
    left out, and only a term that reads it can tell)."""
    out = {str(k): str(v) for k, v in lab.items() if k != NAMESPACE_LABEL}
    out[NAMESPACE_LABEL] = ns
    return Labels(out)


_NO_POD: Final = NodeRequirement(key=NAMESPACE_LABEL, operator=SelectorOp.DOES_NOT_EXIST)
"""A requirement no pod meets (every pod has its namespace label): a term whose
``labelSelector`` is null selects no pod (Kubernetes)."""


def _sorted_terms(out: list[Any]) -> tuple[Any, ...]:
    """Pod terms in a stable order (by their text); one alone is not written out (a term
    about the pods of thousands of namespaces has a long text)."""
    return tuple(out) if len(out) < 2 else tuple(sorted(out, key=repr))


def _pod_terms(
    spec: Obj,
    lab: Mapping[str, str],
    ns: str,
    kind: str,
    where: str,
    namespaces: NamespaceLabels | None,
) -> tuple[PodAffinityTerm, ...]:
    """The pod's required ``podAffinity`` or ``podAntiAffinity`` terms (``kind``), sorted
    (:func:`_pod_term` reads each)."""
    raw, path = _affinity_list(spec, kind, "required", where)
    out = [_pod_term(t, f"{path}[{i}]", lab, ns, where, namespaces) for i, t in enumerate(raw)]
    return _sorted_terms(out)


def _affinity_list(spec: Obj, kind: str, when: str, where: str) -> tuple[Sequence[Any], str]:
    """The pod's ``<when>DuringSchedulingIgnoredDuringExecution`` list of ``kind``
    (``podAffinity`` or ``podAntiAffinity``) and its path; refused unless a list."""
    path = f"{kind}.{when}DuringSchedulingIgnoredDuringExecution"
    raw = ((spec.get("affinity") or {}).get(kind) or {}).get(path.split(".")[1]) or ()
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise InvalidObjectError(path, raw, "must be a list", where=where)
    return raw, path


def _pod_preferences(
    spec: Obj, lab: Mapping[str, str], ns: str, where: str, namespaces: NamespaceLabels | None
) -> tuple[PreferredPodTerm, ...]:
    """The pod's preferred ``podAffinity`` and ``podAntiAffinity`` terms (``weight`` and
    ``podAffinityTerm``, read as :func:`_pod_term` reads a required one), sorted; repeats
    kept (Kubernetes adds each)."""
    out = []
    for kind, anti in (("podAffinity", False), ("podAntiAffinity", True)):
        raw, path = _affinity_list(spec, kind, "preferred", where)
        for i, w in enumerate(raw):
            at = f"{path}[{i}]"
            if not isinstance(w, Mapping):
                raise InvalidObjectError(at, w, "must be {weight, podAffinityTerm}", where=where)
            term = _pod_term(
                w.get("podAffinityTerm"), f"{at}.podAffinityTerm", lab, ns, where, namespaces
            )
            weight: Any = w.get("weight")
            try:
                out.append(PreferredPodTerm(weight=weight, term=term, anti=anti))
            except ValidationError as e:
                raise InvalidObjectError(
                    f"{at}.{e.field}", e.value, e.reason, where=where
                ) from None
    return _sorted_terms(out)


def _pod_term(
    t: Any,
    path: str,
    lab: Mapping[str, str],
    ns: str,
    where: str,
    namespaces: NamespaceLabels | None,
) -> PodAffinityTerm:
    """One pod affinity term: its ``labelSelector`` (``matchLabels`` and
    ``matchExpressions``, ANDed; null selects no pod), its ``matchLabelKeys`` (``In`` the
    pod's own value of each key it has) and ``mismatchLabelKeys`` (``NotIn`` it), and its
    namespaces as a requirement on :data:`NAMESPACE_LABEL`: those the term lists (its
    ``namespaces`` field) and those of the cluster (the ``namespaces`` argument) whose
    labels its ``namespaceSelector`` matches now (kube-scheduler's InterPodAffinity); an
    empty selector, every namespace (no requirement); neither, the pod's own. A selector
    with requirements that selects no namespace, with none listed, selects no pod."""
    if not isinstance(t, Mapping):
        raise InvalidObjectError(path, t, "must be a mapping", where=where)
    sel = t.get("labelSelector")
    reqs: list[NodeRequirement] = []
    try:
        if sel is None:
            reqs.append(_NO_POD)
        else:
            reqs.extend(_label_selector(sel, f"{path}.labelSelector", where))
        lists = {f: _strings(t.get(f), f"{path}.{f}", where)
                 for f in ("matchLabelKeys", "mismatchLabelKeys", "namespaces")}  # fmt: skip
        for field, op in (("matchLabelKeys", SelectorOp.IN),
                          ("mismatchLabelKeys", SelectorOp.NOT_IN)):  # fmt: skip
            for k in lists[field]:
                if k in lab:
                    reqs.append(NodeRequirement(key=k, operator=op, values=(str(lab[k]),)))
        names = list(lists["namespaces"])
        nsel = t.get("namespaceSelector")
        if nsel is None:
            reqs.append(NodeRequirement(key=NAMESPACE_LABEL, operator=SelectorOp.IN,
                                        values=tuple(names or (ns,))))  # fmt: skip
        else:
            need = namespace_selector(nsel, f"{path}.namespaceSelector", where)
            if not need:
                pass  # (an empty selector: every namespace, no requirement)
            elif namespaces is None:
                raise InvalidObjectError(
                    f"{path}.namespaceSelector", nsel,
                    "a namespace selector with requirements needs the namespaces' labels "
                    "(the shim may not list namespaces: grant get, list, watch on "
                    "namespaces)", where=where,
                )  # fmt: skip
            elif isinstance(namespaces, NamespaceIndex):
                reqs.append(namespaces.requirement(need, names))
            else:
                reqs.append(_in_namespaces([*names, *(
                    n for n, nl in namespaces.items() if _selects(need, nl))]))  # fmt: skip
        key: Any = t.get("topologyKey")
        return PodAffinityTerm(selector=tuple(reqs), topology_key=key)
    except ValidationError as e:
        if isinstance(e, InvalidObjectError):
            raise
        raise InvalidObjectError(f"{path}.{e.field}", e.value, e.reason, where=where) from None


def _label_selector(sel: Any, path: str, where: str) -> list[NodeRequirement]:
    """A label selector at ``path`` (a pod affinity term's ``labelSelector`` or
    ``namespaceSelector``) as requirements on labels, ANDed: each ``matchLabels`` pair
    ``In`` its value (:func:`_label_pairs`), then each of its ``matchExpressions`` (``In``
    and ``NotIn`` with a list of one value or more, ``Exists`` and ``DoesNotExist`` with
    none, :func:`_requirements`); [] for an empty selector. Raises
    :class:`~kant.errors.InvalidObjectError` naming the field for anything else (not a
    mapping, an unknown operator or ``Gt`` / ``Lt``, ``In`` without values, a value that is
    not a string)."""
    if not isinstance(sel, Mapping):
        raise InvalidObjectError(path, sel, "must be a mapping", where=where)
    reqs = _label_pairs(sel.get("matchLabels"), f"{path}.matchLabels", where)
    exprs = _requirements({"matchExpressions": sel.get("matchExpressions")}, path, where)
    for j, r in enumerate(exprs):
        if r.operator in (SelectorOp.GT, SelectorOp.LT):
            raise InvalidObjectError(
                f"{path}.matchExpressions[{j}].operator",
                r.operator.value,
                "a label selector takes In, NotIn, Exists or DoesNotExist",
                where=where,
            )
    return reqs + exprs


def namespace_selector(nsel: Any, path: str, where: str) -> tuple[NodeRequirement, ...]:
    """A pod affinity term's ``namespaceSelector`` (at ``path``) as requirements on a
    namespace's labels, ANDed, read as any label selector (:func:`_label_selector`); () for
    an empty selector (every namespace)."""
    return tuple(_label_selector(nsel, path, where))


NamespaceSelector = tuple[NodeRequirement, ...]
"""A ``namespaceSelector`` with requirements, read (:func:`namespace_selector`): requirements
on a namespace's labels, ANDed."""


NamespaceUse = tuple[NamespaceSelector, tuple[str, ...]]
"""A pod affinity term's ``namespaceSelector`` with requirements, read, and the names its
``namespaces`` field lists (sorted, each once): what its requirement on
:data:`NAMESPACE_LABEL` is made of (:meth:`NamespaceIndex.requirement`)."""


def namespace_selectors(pod: Obj) -> frozenset[NamespaceSelector]:
    """The selectors with requirements of the pod's pod affinity terms' ``namespaceSelector``
    (required or preferred, affinity or anti-affinity), each read as
    :func:`namespace_selector` reads it: what the pod's terms are about changes with the
    namespaces these select. Empty for a pod whose terms select namespaces by name only.
    Never raises: a malformed selector is left out (it refuses the pod, or leaves its term
    out of a held pod, whatever the namespaces' labels)."""
    return frozenset(need for need, _names in namespace_uses(pod))


def namespace_uses(pod: Obj) -> frozenset[NamespaceUse]:
    """Each of the pod's pod affinity terms with a ``namespaceSelector`` with requirements,
    as the selector and the names the term lists (:data:`NamespaceUse`), what
    :meth:`NamespaceIndex.watch` is told. Never raises: a malformed selector or list of
    names is left out (it refuses the pod, or leaves its term out of a held pod)."""
    spec = pod.get("spec")
    aff = spec.get("affinity") if isinstance(spec, Mapping) else None
    if not isinstance(aff, Mapping):
        return frozenset()
    out: set[NamespaceUse] = set()
    for kind, when in _TERM_LISTS:
        group = aff.get(kind)
        if not isinstance(group, Mapping):
            continue
        raw = group.get(f"{when}DuringSchedulingIgnoredDuringExecution")
        if isinstance(raw, str) or not isinstance(raw, Sequence):
            continue
        for t in raw:
            if when == "preferred" and isinstance(t, Mapping):
                t = t.get("podAffinityTerm")
            nsel = t.get("namespaceSelector") if isinstance(t, Mapping) else None
            if nsel is None:
                continue
            try:
                need = namespace_selector(nsel, "namespaceSelector", "")
            except KantError:
                continue
            names = t.get("namespaces")  # (read as pod_term reads it)
            if names is not None and (isinstance(names, str) or not isinstance(names, Sequence)):
                continue
            if need:
                out.add((need, _listed(str(n) for n in names or ())))
    return frozenset(out)


def _listed(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(names)))


def reads_namespace_labels(pod: Obj) -> bool:
    """Whether one of the pod's pod affinity terms has a well-formed ``namespaceSelector``
    with requirements (:func:`namespace_selectors`). Never raises."""
    return bool(namespace_selectors(pod))


def _selects(need: NamespaceSelector, labels: Mapping[str, str]) -> bool:
    return all(r.matches_labels(labels) for r in need)


def _in_namespaces(chosen: Iterable[str]) -> NodeRequirement:
    """The requirement on :data:`NAMESPACE_LABEL` of a term about the pods of ``chosen``
    (none: no pod)."""
    values = tuple(sorted(set(chosen)))
    if not values:
        return _NO_POD
    return NodeRequirement(key=NAMESPACE_LABEL, operator=SelectorOp.IN, values=values)


class NamespaceIndex(Mapping[str, Mapping[str, str]]):
    """The cluster's namespaces and their labels (the shim's watch of Namespaces), read as a
    mapping ``{name: labels}``, with what makes a namespace event cheap with many namespaces
    and many pods whose pod affinity terms select namespaces by their labels.

    The pods that use a selector are told to the index with their terms' uses of it
    (:meth:`watch`, :func:`namespace_uses`); for each distinct selector they use it keeps the
    namespaces it selects now, and for each distinct use (selector and names listed) the
    requirement on :data:`NAMESPACE_LABEL` it translates into, made on demand
    (:meth:`requirement`, which :func:`pod_facts` and :func:`held_job` call when given an
    index): translating a pod costs its terms, not the namespaces. A namespace created,
    deleted or relabelled (:meth:`update`) tests each distinct selector against the
    namespace's old and new labels only, and returns the pods whose selectors' choice changed:
    O(distinct selectors + those pods), whatever the number of namespaces and of pods whose
    choice did not change. What the index keeps follows the pods watched: a selector, or a
    use, no watched pod has any more is dropped with its last pod (:meth:`kept`)."""

    def __init__(self) -> None:
        self._labels: dict[str, dict[str, str]] = {}
        self._chosen: dict[NamespaceSelector, set[str]] = {}  # watched selector -> names now
        # watched selector -> {names listed by a watched pod's term: how many pods}
        self._listed: dict[NamespaceSelector, dict[tuple[str, ...], int]] = {}
        # watched selector -> {names listed (watched): the requirement} (made on demand)
        self._reqs: dict[NamespaceSelector, dict[tuple[str, ...], NodeRequirement]] = {}
        self._users: dict[NamespaceSelector, set[str]] = {}  # selector -> pod keys
        self._of_pod: dict[str, frozenset[NamespaceUse]] = {}

    def __getitem__(self, name: str) -> Mapping[str, str]:
        return self._labels[name]

    def __iter__(self) -> Any:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def pods(self) -> list[str]:
        """The keys of the pods watched (:meth:`watch`), sorted."""
        return sorted(self._of_pod)

    def kept(self) -> int:
        """How many requirements the index keeps made: at most one per distinct use
        (selector and names listed) of the pods watched. O(distinct selectors)."""
        return sum(len(made) for made in self._reqs.values())

    def watch(self, key: str, uses: frozenset[NamespaceUse]) -> None:
        """Pod ``key``'s terms use ``uses`` now (:func:`namespace_uses`; empty: none, or the
        pod is gone). O(namespaces) for a selector no other pod uses, else O(its uses)."""
        old = self._of_pod.get(key, frozenset())
        if old == uses:
            return
        for need, listed in old - uses:
            counts = self._listed[need]
            counts[listed] -= 1
            if not counts[listed]:
                del counts[listed]
                made = self._reqs.get(need)
                if made is not None:
                    made.pop(listed, None)
        had = {need for need, _names in old}
        needs = {need for need, _names in uses}
        for need in had - needs:
            users = self._users[need]
            users.discard(key)
            if not users:
                del self._users[need], self._chosen[need], self._listed[need]
                self._reqs.pop(need, None)
        for need in needs - had:
            if need not in self._users:
                self._users[need] = set()
                self._listed[need] = {}
                self._chosen[need] = {n for n, nl in self._labels.items() if _selects(need, nl)}
            self._users[need].add(key)
        for need, listed in uses - old:
            counts = self._listed[need]
            counts[listed] = counts.get(listed, 0) + 1
        if uses:
            self._of_pod[key] = uses
        else:
            self._of_pod.pop(key, None)

    def update(self, name: str, labels: Mapping[str, str] | None) -> list[str]:
        """Namespace ``name`` now has ``labels`` (None: it is deleted). Returns the keys of
        the watched pods one of whose selectors selects it now and did not before, or the
        reverse, sorted: those whose terms read other namespaces now. O(distinct selectors
        watched + the pods returned)."""
        old = self._labels.get(name)
        new = None if labels is None else {str(k): str(v) for k, v in labels.items()}
        if new is None:
            self._labels.pop(name, None)
        else:
            self._labels[name] = new
        if old == new:
            return []
        hit: set[str] = set()
        for need, chosen in self._chosen.items():
            was = old is not None and _selects(need, old)
            now = new is not None and _selects(need, new)
            if was != now:
                if now:
                    chosen.add(name)
                else:
                    chosen.discard(name)
                self._reqs.pop(need, None)
                hit |= self._users[need]
        return sorted(hit)

    def requirement(self, need: NamespaceSelector, names: Iterable[str]) -> NodeRequirement:
        """The requirement on :data:`NAMESPACE_LABEL` of a term that lists ``names`` and whose
        ``namespaceSelector`` is ``need``: ``In`` those and the namespaces ``need`` selects
        now (:data:`_NO_POD` for none). Made once for a use a watched pod has (:meth:`watch`)
        until the namespaces its selector selects change; else made each time: O(the
        namespaces ``need`` selects) for a watched selector, O(namespaces) for one not."""
        listed = _listed(names)
        chosen = self._chosen.get(need)
        if chosen is None:
            return _in_namespaces([*listed, *(n for n, nl in self._labels.items()
                                              if _selects(need, nl))])  # fmt: skip
        if listed not in self._listed[need]:  # (no pod watched has this term: not kept)
            return _in_namespaces([*listed, *chosen])
        made = self._reqs.setdefault(need, {})
        req = made.get(listed)
        if req is None:
            req = made[listed] = _in_namespaces([*listed, *chosen])
        return req


def _tolerations(spec: Obj, where: str) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(spec.get("tolerations") or ()):
        try:
            out.append(
                Toleration(key=t.get("key") or "", operator=t.get("operator") or "Equal",
                           value=t.get("value") or "", effect=t.get("effect") or None)
            )  # fmt: skip
        except ValidationError as e:
            raise InvalidObjectError(f"tolerations[{i}].{e.field}", e.value, e.reason,
                                     where=where) from None  # fmt: skip
    # (sorted without repeats: the same tolerations in another order are the same role)
    return tuple(sorted(set(out), key=repr))


def _flag(ann: Mapping[str, str], key: str, where: str) -> bool:
    v = ann.get(key)
    if v is None:
        return False
    if v not in ("true", "false"):
        raise InvalidObjectError(key, v, "must be 'true' or 'false'", where=where)
    return v == "true"


def _kind(lab: Mapping[str, str], ann: Mapping[str, str], where: str) -> JobKind:
    v = lab.get(KIND_KEY) or ann.get(KIND_KEY)
    if not v:
        return JobKind.TRAINING
    if v not in {k.value for k in JobKind}:
        raise InvalidObjectError(KIND_KEY, v, f"must be one of {[k.value for k in JobKind]}",
                                 where=where)  # fmt: skip
    return JobKind(v)


def _topology(ann: Mapping[str, str], settings: K8sSettings, where: str) -> TopologyWish | None:
    for keys, required in ((REQUIRED_TOPOLOGY, True), (PREFERRED_TOPOLOGY, False)):
        for k in keys:
            label = ann.get(k)
            if not label:
                continue
            tier = settings.tier_of_label(label)
            if tier is None:
                known = [lab for lab, _ in settings.topology]
                raise InvalidObjectError(
                    k, label, f"is not a configured topology label {known}", where=where
                )
            return TopologyWish(tier=tier, required=required)
    return None


def pod_group_key(pod: Obj) -> str | None:
    """The gang key the pod's labels name, as :attr:`PodFacts.group` reads it
    (``namespace/name`` for a PodGroup, ``namespace/kueue:name`` for a Kueue group; None: the
    pod is its own job); reads nothing else of the pod."""
    return _group(labels_of(pod), str(_meta(pod).get("namespace", "default")))


def _group(lab: Mapping[str, str], ns: str) -> str | None:
    g = lab.get(POD_GROUP_LABEL)
    if g:
        return f"{ns}/{g}"
    g = lab.get(KUEUE_GROUP_LABEL)
    return f"{ns}/{KUEUE_GROUP_PREFIX}{g}" if g else None


def _total(lab: Mapping[str, str], ann: Mapping[str, str], where: str) -> int | None:
    if lab.get(POD_GROUP_LABEL) or not lab.get(KUEUE_GROUP_LABEL):
        return None
    v = ann.get(KUEUE_TOTAL_ANNOTATION)
    if v is None:
        return None
    if not is_count(v) or not 1 <= int(v) <= MAX_PODS_PER_JOB:
        raise InvalidObjectError(
            KUEUE_TOTAL_ANNOTATION, v, f"must be an integer in 1..{MAX_PODS_PER_JOB}", where=where
        )
    return int(v)


def _runtime(ann: Mapping[str, str], where: str) -> float | None:
    v = ann.get(RUNTIME_ANNOTATION)
    if v is None:
        return None
    try:
        f = float(v)
    except ValueError:
        f = -1.0
    if not math.isfinite(f) or f <= 0:
        raise InvalidObjectError(
            RUNTIME_ANNOTATION, v, "must be a number of seconds > 0", where=where
        )
    return f


def timestamp(v: Any) -> float:
    """A Kubernetes timestamp (RFC 3339) in seconds since the epoch; 0.0 when absent or not
    one."""
    if not v:
        return 0.0
    from datetime import UTC, datetime

    try:
        t = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
        if t.tzinfo is None:  # (no offset: UTC, not the machine's time zone)
            t = t.replace(tzinfo=UTC)
        return t.timestamp()
    except (ValueError, OverflowError):
        return 0.0


def pod_group_min_member(group: Obj) -> int:
    """``spec.minMember`` of a scheduler-plugins PodGroup (at least 1). Raises
    :class:`~kant.errors.InvalidObjectError` for a ``spec`` that is not a mapping (a CRD
    keeping unknown fields lets any value through) or a count that is not an integer in
    range."""
    spec = group.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InvalidObjectError(
            "spec", spec, "must be a mapping (with minMember)", where=f"PodGroup {pod_key(group)}"
        )
    v = spec.get("minMember", 1)
    if type(v) is not int or not 1 <= v <= MAX_PODS_PER_JOB:
        raise InvalidObjectError(
            "spec.minMember", v, f"must be an integer in 1..{MAX_PODS_PER_JOB}",
            where=f"PodGroup {pod_key(group)}",
        )  # fmt: skip
    return v


# --------------------------------------------------------------------------- jobs


def job_id(pods: Sequence[PodFacts]) -> str:
    """The kant job id of a gang (``namespace.group``) or a lone pod (``namespace..name``): a
    namespace has no dot, so the two never collide, and neither contains ``/``."""
    first = pods[0]
    if first.group is not None:
        return first.group.replace("/", ".", 1)
    return f"{first.namespace}..{first.name}"


def build_job(
    pods: Sequence[PodFacts], job: str, submitted_at: float
) -> tuple[Job, dict[PodId, str]]:
    """A kant Job from the pods of one gang (or one lone pod), with the pod each PodId stands
    for. Roles are the distinct (resources, models, topology, node selector, tolerations)
    shapes, in order of their first pod by name; PodIds number each role's pods by name. The
    tenant, priority, preemptibility and kind are those of the first pod by name (a group
    shares them)."""
    ordered = sorted(pods, key=lambda p: p.name)
    shapes: dict[tuple[Any, ...], list[PodFacts]] = {}
    for p in ordered:
        shapes.setdefault(p.signature, []).append(p)
    roles: list[Role] = []
    ids: dict[PodId, str] = {}
    for i, members in enumerate(shapes.values()):
        name = "worker" if len(shapes) == 1 else f"worker-{i}"
        # a role's labels are those all its pods share (they differ only in the labels
        # that name one pod, POD_OWN_LABELS, which the role does not carry)
        common = dict(members[0].labels)
        for p in members[1:]:
            common = {k: v for k, v in common.items() if p.labels.get(k) == v}
        roles.append(members[0].role(name, len(members), common))
        for k, p in enumerate(members):
            ids[PodId(job=job, role=name, index=k)] = p.key
    lead = ordered[0]
    runtimes = [p.runtime for p in ordered if p.runtime is not None]
    return (
        Job(
            id=job,
            tenant=lead.tenant,
            priority=lead.priority,
            submitted_at=max(0.0, submitted_at),
            roles=tuple(roles),
            preemptible=lead.preemptible,
            runtime_estimate=max(runtimes) if runtimes else None,
            kind=lead.kind,
        ),
        ids,
    )


def binding_annotations(
    pod: PodId, gpus: Iterable[int], nics: Iterable[int], milli: int, *, tenant: str | None = None
) -> dict[str, str]:
    """The annotations a binding carries onto its pod: devices, share, the PodId and the
    tenant its job is charged to (so a restarted shim rebuilds its state from bound pods)."""
    ann = {
        GPUS_ANNOTATION: ",".join(str(g) for g in gpus),
        NICS_ANNOTATION: ",".join(str(n) for n in nics),
        POD_ID_ANNOTATION: str(pod),
    }
    if milli < MILLI:
        ann[MILLI_ANNOTATION] = str(milli)
    if tenant:
        ann[TENANT_ANNOTATION] = tenant
    return ann


def recorded_tenant(pod: Obj) -> str | None:
    """The tenant kant recorded on a bound pod when it bound it (:data:`TENANT_ANNOTATION`),
    or None when the pod carries none (bound by a kant that recorded none)."""
    v = annotations_of(pod).get(TENANT_ANNOTATION)
    return v if isinstance(v, str) and v else None


def recorded_binding(pod: Obj) -> tuple[PodId, tuple[int, ...], tuple[int, ...], int] | None:
    """The kant binding recorded on a bound pod's annotations (PodId, GPUs, NICs, milli per
    GPU), or None when the pod carries none."""
    ann = annotations_of(pod)
    pid = ann.get(POD_ID_ANNOTATION)
    if not pid:
        return None
    where = f"Pod {pod_key(pod)}"
    parts = pid.rsplit("/", 2) if isinstance(pid, str) else []
    if len(parts) != 3 or not is_count(parts[2]):
        raise InvalidObjectError(POD_ID_ANNOTATION, pid, "must be job/role/index", where=where)

    def ints(k: str) -> tuple[int, ...]:
        v = ann.get(k, "")
        parts = [x.strip() for x in str(v).split(",") if x.strip()]
        if not all(is_count(x) for x in parts):
            raise InvalidObjectError(k, v, "must be comma-separated device indices", where=where)
        return tuple(int(x) for x in parts)

    milli = ann.get(MILLI_ANNOTATION)
    m = int(str(milli)) if is_count(milli) else MILLI if milli is None else 0
    if not 0 < m <= MILLI:  # (read as a whole GPU, a share would be taken back as one)
        raise InvalidObjectError(
            MILLI_ANNOTATION, milli, f"must be a whole number of GPU milli in 1..{MILLI}",
            where=where,
        )  # fmt: skip
    return (
        PodId(job=parts[0], role=parts[1], index=int(parts[2])),
        ints(GPUS_ANNOTATION),
        ints(NICS_ANNOTATION),
        m,
    )
