"""The ``kubernetes:`` section of the kant config file, validated: :class:`K8sSettings`.

:mod:`kant.config` passes that section through as a raw mapping; :func:`parse_settings` checks
every key and raises :class:`~kant.errors.InvalidConfigFileError` naming the key path
(``kubernetes.evictionMode``) for anything it does not accept. A name Kubernetes constrains
is checked as Kubernetes checks it (an extended resource, a label key, the Lease's name and
namespace): a shim told a name no object can carry would run, and schedule nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from kant.errors import InvalidConfigFileError
from kant.model import GPU_MODEL_REASON, Tier, is_finite_number, is_gpu_model

TIER_NAMES: Final[Mapping[str, Tier]] = {
    "hbd": Tier.HBD,
    "leaf": Tier.LEAF,
    "spine": Tier.SPINE,
    "superspine": Tier.SUPERSPINE,
}
"""Tier names a ``topologyLevels`` entry may give."""

DEFAULT_TOPOLOGY: Final[tuple[tuple[str, Tier], ...]] = (
    ("nvidia.com/gpu.clique", Tier.HBD),
    ("network.topology.nvidia.com/accelerator", Tier.HBD),
    ("network.topology.nvidia.com/leaf", Tier.LEAF),
    ("network.topology.nvidia.com/spine", Tier.SPINE),
    ("network.topology.nvidia.com/core", Tier.SUPERSPINE),
    ("topology.kubernetes.io/zone", Tier.SUPERSPINE),
)
"""Node labels read for a node's place in the fabric, in order: for each tier the first label
the node carries gives its domain (NVIDIA's GPU clique and Topograph's labels, then the zone)."""

EVICTION_MODES: Final = ("eviction", "delete")

DEFAULT_SHUTDOWN_GRACE_SECONDS: Final = 10.0
"""``shutdownGraceSeconds``: a third of a Kubernetes Deployment's default
``terminationGracePeriodSeconds`` (30 s), so that the shim is done (or has said what it
abandons) well before the kubelet kills it, and long enough for a server that answers at all
(a binding is answered in milliseconds)."""


@attrs.frozen(kw_only=True)
class K8sSettings:
    """How the shim reads and writes the cluster; every field has a default (see
    docs/kubernetes.md, "Config")."""

    scheduler_name: str = "kant"
    """Pods with this ``spec.schedulerName`` are kant's."""
    topology: tuple[tuple[str, Tier], ...] = DEFAULT_TOPOLOGY
    """Ordered (node label, tier) pairs; see :data:`DEFAULT_TOPOLOGY`."""
    gpu_resource: str = "nvidia.com/gpu"
    """The extended resource counting whole GPUs (node allocatable, container requests)."""
    nic_resource: str = "rdma/hca"
    """The extended resource counting RDMA NICs."""
    ignored_resources: tuple[str, ...] = ()
    """Extended resources (``domain/name``) a kant pod may ask that kant does not count
    (kube-scheduler's ``NodeResourcesFit`` ``ignoredResources``), and the native ones kant
    does not count either (``ephemeral-storage``, ``hugepages-<size>``): a pod asking any
    other one is refused, since kant could bind it to a node that has none."""
    gpu_model_label: str = "nvidia.com/gpu.product"
    """The node label naming the GPU model (kant's node pool)."""
    default_gpu_model: str = "gpu"
    """The model of a GPU node without that label."""
    zone_label: str = "kant.io/zone"
    """The node label whose value is the node's ``zone`` (E-Spread's inference zone is the
    nodes labelled ``inference``)."""
    eviction_mode: str = "eviction"
    """``eviction`` (the Eviction API, honouring PodDisruptionBudgets) or ``delete``."""
    debounce_seconds: float = 1.0
    """Events are gathered for this long before a cycle runs."""
    event_interval_seconds: float = 60.0
    """At most one ``FailedScheduling`` event per pod in this interval."""
    condition_interval_seconds: float = 30.0
    """A pending pod's ``PodScheduled`` condition is rewritten at once when kant's reason
    code for it changes, but for new wording alone (the GPUs free, the job it waits behind)
    at most once in this interval (0: at every change)."""
    status_writes_per_cycle: int = 100
    """At most this many condition and event writes for waiting pods in one cycle, the
    first pods in queue order first; the rest are written by the next cycles, run a second
    apart while some are left (the scheduling loop is not held up by thousands of writes)."""
    bind_workers: int = 16
    """Concurrent binding calls."""
    estimate_interval_seconds: float = 0.0
    """How often (seconds) the shim computes the start-time estimates of waiting jobs and
    writes them on their pods (``kant.io/expected-start``); 0: never (the default)."""
    estimate_max_jobs: int = 50
    """At most this many waiting jobs are estimated, the first in queue order."""
    estimate_horizon_seconds: float = 86400.0
    """The estimates look this far ahead; a job not started by then is ``beyond_horizon``."""
    estimate_max_cycles: int = 100
    """The estimates play at most this many cycles (a job not started by then is
    ``beyond_horizon``): with the jobs and the horizon, what bounds their cost."""
    lease_name: str = "kant-scheduler"
    lease_namespace: str = "kube-system"
    lease_duration_seconds: float = 15.0
    shutdown_grace_seconds: float = DEFAULT_SHUTDOWN_GRACE_SECONDS
    """Once told to stop (SIGTERM, Ctrl-C), ``kant k8s run`` gives the answers of the
    bindings it sent, the failure histories due and the Lease's release at most this long,
    then exits whatever is still pending (see :mod:`kant.k8s.shutdown`)."""

    def tier_of_label(self, label: str) -> Tier | None:
        """The tier a topology label stands for, or None when it is not configured."""
        for lab, tier in self.topology:
            if lab == label:
                return tier
        return None


_DEFAULTS: Final = K8sSettings()

_LABEL_RE: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL: Final = re.compile(_LABEL_RE)
_DNS_SUBDOMAIN: Final = re.compile(rf"{_LABEL_RE}(\.{_LABEL_RE})*")
_NAME_PART: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

DNS_LABEL_REASON: Final = (
    "must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and "
    "ending with a letter or digit"
)
DNS_SUBDOMAIN_REASON: Final = (
    "must be a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.', each "
    "dot-separated part starting and ending with a letter or digit"
)
LABEL_KEY_REASON: Final = (
    "must be a label key: an optional DNS-1123 subdomain and '/', then a name of at most 63 "
    "letters, digits, '-', '_' and '.' starting and ending with a letter or digit"
)


def is_dns_label(v: str) -> bool:
    """Whether ``v`` is a DNS-1123 label (a namespace's name)."""
    return len(v) <= 63 and _DNS_LABEL.fullmatch(v) is not None


def is_dns_subdomain(v: str) -> bool:
    """Whether ``v`` is a DNS-1123 subdomain (most objects' names, a label key's prefix)."""
    return len(v) <= 253 and _DNS_SUBDOMAIN.fullmatch(v) is not None


def is_label_key(v: str) -> bool:
    """Whether ``v`` is what Kubernetes calls a qualified name: a label key, an optional
    DNS-1123 subdomain prefix and ``/`` before a name part of at most 63 characters."""
    prefix, slash, part = v.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return len(part) <= 63 and _NAME_PART.fullmatch(part) is not None


_UNCOUNTED_NATIVE = re.compile(r"ephemeral-storage|hugepages-[1-9][0-9]*(?:[KMGTPE]i|[kMGTPE])?")
"""The native resources a container may ask that kant does not count (cpu and memory it
does): a pod asking them is refused unless ``ignoredResources`` lists them."""


def uncounted_native(v: str) -> bool:
    """Whether ``v`` names a native resource kant does not count (``ephemeral-storage``,
    ``hugepages-2Mi``)."""
    return _UNCOUNTED_NATIVE.fullmatch(v) is not None


def extended_resource_problem(v: str) -> str | None:
    """Why ``v`` is not an extended resource name as Kubernetes defines one
    (``IsExtendedResourceName``), or None: a domain and a name (``nvidia.com/gpu``), the
    domain not ``kubernetes.io`` (a native resource, as one without a domain: ``cpu``),
    and ``requests.`` before it a qualified name (the resource quota's name for it)."""
    if "/" not in v:
        return (
            "has no domain: an extended resource is domain/name, as nvidia.com/gpu (one "
            "without a domain, as cpu, is a native resource)"
        )
    if "kubernetes.io/" in v:
        return (
            "is in the kubernetes.io domain, of native resources: an extended resource is "
            "domain/name, as nvidia.com/gpu"
        )
    if v.startswith("requests.") or not is_label_key(f"requests.{v}"):
        return (
            "must be an extended resource name: a DNS-1123 subdomain of at most 244 characters "
            "not starting 'requests.', '/', then a name of at most 63 letters, digits, '-', "
            "'_' and '.' starting and ending with a letter or digit (as nvidia.com/gpu)"
        )
    return None


_KEYS: Final = {
    "schedulerName": ("scheduler_name", str),
    "gpuResource": ("gpu_resource", str),
    "nicResource": ("nic_resource", str),
    "gpuModelLabel": ("gpu_model_label", str),
    "defaultGpuModel": ("default_gpu_model", str),
    "zoneLabel": ("zone_label", str),
    "evictionMode": ("eviction_mode", str),
    "debounceSeconds": ("debounce_seconds", float),
    "eventIntervalSeconds": ("event_interval_seconds", float),
    "conditionIntervalSeconds": ("condition_interval_seconds", float),
    "statusWritesPerCycle": ("status_writes_per_cycle", int),
    "bindWorkers": ("bind_workers", int),
    "estimateIntervalSeconds": ("estimate_interval_seconds", float),
    "estimateMaxJobs": ("estimate_max_jobs", int),
    "estimateHorizonSeconds": ("estimate_horizon_seconds", float),
    "estimateMaxCycles": ("estimate_max_cycles", int),
    "leaseName": ("lease_name", str),
    "leaseNamespace": ("lease_namespace", str),
    "leaseDurationSeconds": ("lease_duration_seconds", float),
    "shutdownGraceSeconds": ("shutdown_grace_seconds", float),
}


_INT32_MAX = 2**31 - 1


def _whole_seconds(value: Any) -> bool:
    """Whether ``value`` is a whole number from 1 to the int32 maximum (15 or 15.0)."""
    return is_finite_number(value) and float(value).is_integer() and 1 <= value <= _INT32_MAX


def parse_settings(raw: Mapping[str, Any] | None, *, source: str = "<config>") -> K8sSettings:
    """Validate the raw ``kubernetes:`` mapping (None: every default). Raises
    :class:`~kant.errors.InvalidConfigFileError` naming ``kubernetes.<key>``."""
    if raw is None:
        return K8sSettings()

    def fail(key: str, value: Any, reason: str) -> InvalidConfigFileError:
        return InvalidConfigFileError(f"kubernetes.{key}", source, reason, value=value)

    if not isinstance(raw, Mapping):
        raise InvalidConfigFileError("kubernetes", source, "must be a mapping", value=raw)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "topologyLevels":
            out["topology"] = _levels(value, fail)
            continue
        if key == "ignoredResources":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise fail(
                    key, value,
                    "must be a list of extended resource names (domain/name), "
                    "ephemeral-storage or hugepages-<size>",
                )  # fmt: skip
            for i, v in enumerate(value):
                if not uncounted_native(v) and (why := extended_resource_problem(v)) is not None:
                    raise fail(f"{key}[{i}]", v, why)
                if v in value[:i]:
                    raise fail(f"{key}[{i}]", v, "is listed twice")
            out["ignored_resources"] = tuple(value)
            continue
        if key not in _KEYS:
            known = ", ".join(sorted([*_KEYS, "ignoredResources", "topologyLevels"]))
            raise fail(str(key), None, f"unknown key (known: {known})")
        field, kind = _KEYS[key]
        if key == "leaseDurationSeconds" and not _whole_seconds(value):
            # (the Lease's field is an int32: a fraction would be written rounded while the
            # renewals and the Lease's expiry were timed by the value given)
            raise fail(key, value, f"must be a whole number of seconds from 1 to {_INT32_MAX}")
        if kind is str:
            if not isinstance(value, str) or not value.strip():
                raise fail(key, value, "must be a non-empty string")
        elif kind is int:
            if type(value) is not int or value < 1:
                raise fail(key, value, "must be an integer >= 1")
        elif not is_finite_number(value) or value < 0:
            raise fail(key, value, "must be a finite number >= 0")
        out[field] = kind(value)
    if out.get("eviction_mode", "eviction") not in EVICTION_MODES:
        raise fail("evictionMode", out["eviction_mode"], f"must be one of {list(EVICTION_MODES)}")
    if out.get("estimate_horizon_seconds", 1.0) <= 0:
        raise fail("estimateHorizonSeconds", out["estimate_horizon_seconds"], "must be > 0")
    _names(raw, out, fail)
    return K8sSettings(**out)


def _names(raw: Mapping[str, Any], out: Mapping[str, Any], fail: Any) -> None:
    """Refuse a name Kubernetes would not take where the settings put it (see the module's
    docstring), a GPU resource that is the NIC resource too, a resource both counted and
    ignored, and a default GPU model kant cannot name a node pool by."""
    for key in ("gpuResource", "nicResource"):
        if key in raw and (why := extended_resource_problem(raw[key])) is not None:
            raise fail(key, raw[key], why)
    for key in ("gpuModelLabel", "zoneLabel"):
        if key in raw and not is_label_key(raw[key]):
            raise fail(key, raw[key], LABEL_KEY_REASON)
    if "leaseName" in raw and not is_dns_subdomain(raw["leaseName"]):
        raise fail("leaseName", raw["leaseName"], f"a Lease's name {DNS_SUBDOMAIN_REASON}")
    if "leaseNamespace" in raw and not is_dns_label(raw["leaseNamespace"]):
        raise fail("leaseNamespace", raw["leaseNamespace"], f"a namespace {DNS_LABEL_REASON}")
    if "defaultGpuModel" in raw and not is_gpu_model(raw["defaultGpuModel"]):
        raise fail("defaultGpuModel", raw["defaultGpuModel"], f"a GPU model {GPU_MODEL_REASON}")
    gpu = out.get("gpu_resource", _DEFAULTS.gpu_resource)
    nic = out.get("nic_resource", _DEFAULTS.nic_resource)
    if gpu == nic:
        key, other = ("nicResource", "gpuResource")
        if key not in raw:
            key, other = other, key
        raise fail(key, raw[key], f"must differ from {other}: GPUs and NICs are counted apart")
    for i, v in enumerate(out.get("ignored_resources", ())):
        if v in (gpu, nic):
            what = "gpuResource" if v == gpu else "nicResource"
            raise fail(f"ignoredResources[{i}]", v, f"is the {what}, which kant counts")


def _levels(value: Any, fail: Any) -> tuple[tuple[str, Tier], ...]:
    if not isinstance(value, list) or not value:
        raise fail("topologyLevels", value, "must be a non-empty list of {nodeLabel, tier}")
    levels: list[tuple[str, Tier]] = []
    for i, item in enumerate(value):
        where = f"topologyLevels[{i}]"
        if not isinstance(item, Mapping) or set(item) != {"nodeLabel", "tier"}:
            raise fail(where, item, "must be a mapping with exactly nodeLabel and tier")
        label, tier = item["nodeLabel"], item["tier"]
        if not isinstance(label, str) or not label.strip():
            raise fail(f"{where}.nodeLabel", label, "must be a non-empty string")
        if not is_label_key(label):
            raise fail(f"{where}.nodeLabel", label, LABEL_KEY_REASON)
        if not isinstance(tier, str) or tier not in TIER_NAMES:
            raise fail(f"{where}.tier", tier, f"must be one of {list(TIER_NAMES)}")
        if any(lab == label for lab, _ in levels):
            raise fail(f"{where}.nodeLabel", label, "is listed twice")
        levels.append((label, TIER_NAMES[tier]))
    return tuple(levels)
