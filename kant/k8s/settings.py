"""The ``kubernetes:`` section of the kant config file, validated: :class:`K8sSettings`.

:mod:`kant.config` passes that section through as a raw mapping; :func:`parse_settings` checks
every key and raises :class:`~kant.errors.InvalidConfigFileError` naming the key path
(``kubernetes.evictionMode``) for anything it does not accept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import attrs

from kant.errors import InvalidConfigFileError
from kant.model import Tier

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
    (kube-scheduler's ``NodeResourcesFit`` ``ignoredResources``): a pod asking any other
    one is refused, since kant could bind it to a node that has none."""
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
    lease_name: str = "kant-scheduler"
    lease_namespace: str = "kube-system"
    lease_duration_seconds: float = 15.0

    def tier_of_label(self, label: str) -> Tier | None:
        """The tier a topology label stands for, or None when it is not configured."""
        for lab, tier in self.topology:
            if lab == label:
                return tier
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
    "leaseName": ("lease_name", str),
    "leaseNamespace": ("lease_namespace", str),
    "leaseDurationSeconds": ("lease_duration_seconds", float),
}


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
            if not isinstance(value, list) or not all(
                isinstance(v, str) and "/" in v.strip("/") for v in value
            ):
                raise fail(key, value, "must be a list of extended resource names (domain/name)")
            out["ignored_resources"] = tuple(value)
            continue
        if key not in _KEYS:
            known = ", ".join(sorted([*_KEYS, "ignoredResources", "topologyLevels"]))
            raise fail(str(key), None, f"unknown key (known: {known})")
        field, kind = _KEYS[key]
        if kind is str:
            if not isinstance(value, str) or not value.strip():
                raise fail(key, value, "must be a non-empty string")
        elif kind is int:
            if type(value) is not int or value < 1:
                raise fail(key, value, "must be an integer >= 1")
        elif (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise fail(key, value, "must be a finite number >= 0")
        out[field] = kind(value)
    if out.get("eviction_mode", "eviction") not in EVICTION_MODES:
        raise fail("evictionMode", out["eviction_mode"], f"must be one of {list(EVICTION_MODES)}")
    if out.get("lease_duration_seconds", 15.0) <= 0:
        raise fail("leaseDurationSeconds", out["lease_duration_seconds"], "must be > 0")
    return K8sSettings(**out)


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
        if tier not in TIER_NAMES:
            raise fail(f"{where}.tier", tier, f"must be one of {list(TIER_NAMES)}")
        if any(lab == label for lab, _ in levels):
            raise fail(f"{where}.nodeLabel", label, "is listed twice")
        levels.append((label, TIER_NAMES[tier]))
    return tuple(levels)
