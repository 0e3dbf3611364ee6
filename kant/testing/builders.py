"""Builders for tests, examples and experiments: keyword factories with readable names.

>>> c = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2, model="A100").build()
>>> sorted(n.gpu_model for n in c.nodes())
['A100', 'A100', 'H100', 'H100']
>>> job("train", gpus=8, replicas=4, tenant="team-a").num_pods
4
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kant.model import (
    Binding,
    Job,
    JobKind,
    NodeSelector,
    NodeSpec,
    PodAffinityTerm,
    PodId,
    PreferredPodTerm,
    PreferredTerm,
    Resources,
    Role,
    Taint,
    Tier,
    Toleration,
    TopologyWish,
)
from kant.state import ClusterState

DGX_CPU_MILLI = 192_000
DGX_MEMORY_MIB = 2 * 1024 * 1024


def node(
    name: str,
    *,
    gpus: int = 8,
    model: str | None = "H100",
    cpu_milli: int = DGX_CPU_MILLI,
    memory_mib: int = DGX_MEMORY_MIB,
    nics: int | None = None,
    max_pods: int | None = None,
    template: str | None = None,
    leaf: str | None = None,
    spine: str | None = None,
    superspine: str | None = None,
    hbd: str | None = None,
    zone: str | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
) -> NodeSpec:
    """A node; 8-GPU nodes default to the DGX-like template with 8 NICs."""
    if gpus == 0:
        model = None
    if template is None and gpus == 8:
        template = "dgx-8gpu"
    if nics is None:
        nics = 8 if template == "dgx-8gpu" else 0
    return NodeSpec(
        name=name,
        gpu_model=model,
        gpus=gpus,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        rdma_nics=nics,
        max_pods=max_pods,
        template=template,
        leaf=leaf,
        spine=spine,
        superspine=superspine,
        hbd=hbd,
        zone=zone,
        labels=labels or {},
        taints=tuple(taints),
    )


def partly_used(used: Sequence[int], *, gpus: int = 4) -> ClusterState:
    """One leaf of ``len(used)`` nodes ``n0``, ``n1``, ... of ``gpus`` GPUs each (no
    template, no NICs), the first ``used[i]`` GPUs of node ``i`` taken by pod 0 of job
    ``busy<i>``: a small cluster some of whose GPUs are taken, for placement searches."""
    kw: dict[str, Any] = dict(leaf="lf0", spine="sp0", superspine="ss0", template=None, nics=0)
    state = ClusterState([node(f"n{i}", gpus=gpus, **kw) for i in range(len(used))])
    for i, u in enumerate(used):
        if u:
            busy = PodId(job=f"busy{i}", role="w", index=0)
            state.bind(Binding(pod=busy, node=f"n{i}", gpus=tuple(range(u))))
    return state


def job(
    id: str,
    *,
    gpus: int = 1,
    gpu_milli: int = 0,
    replicas: int = 1,
    tenant: str = "default",
    priority: int = 0,
    submitted_at: float = 0.0,
    gang: bool | None = None,
    kind: JobKind | str = JobKind.TRAINING,
    models: str | frozenset[str] = frozenset(),
    cpu_milli: int = 0,
    memory_mib: int = 0,
    nics: int = 0,
    tier: Tier | None = None,
    required: bool = False,
    spread: bool = False,
    max_per_node: int | None = None,
    preemptible: bool = True,
    runtime: float | None = None,
    role: str = "worker",
    selector: NodeSelector | None = None,
    tolerations: Sequence[Toleration] = (),
    preferred: Sequence[PreferredTerm] = (),
    labels: Mapping[str, str] | None = None,
    affinity: Sequence[PodAffinityTerm] = (),
    anti_affinity: Sequence[PodAffinityTerm] = (),
    pod_preferences: Sequence[PreferredPodTerm] = (),
) -> Job:
    """A one-role job. ``gang`` defaults to True for more than one replica."""
    res = Resources(
        gpus=0 if gpu_milli else gpus,
        gpu_milli=gpu_milli,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        rdma_nics=nics,
    )
    return Job(
        id=id,
        tenant=tenant,
        priority=priority,
        submitted_at=submitted_at,
        kind=kind,  # the converter accepts the string form
        gang=replicas > 1 if gang is None else gang,
        roles=(
            Role(
                name=role,
                replicas=replicas,
                resources=res,
                gpu_models=models,
                topology=None if tier is None else TopologyWish(tier=tier, required=required),
                spread=spread,
                max_per_node=max_per_node,
                node_selector=selector,
                tolerations=tuple(tolerations),
                preferred=tuple(preferred),
                labels=labels or {},
                pod_affinity=tuple(affinity),
                pod_anti_affinity=tuple(anti_affinity),
                pod_preferences=tuple(pod_preferences),
            ),
        ),
        preemptible=preemptible,
        runtime_estimate=runtime,
    )


class ClusterBuilder:
    """Fluent builder of small fabrics: superspines contain spines contain leaves of nodes.

    Node names are ``<leaf>-n<k>`` so tests can read where a pod landed.
    """

    def __init__(self) -> None:
        self._nodes: list[NodeSpec] = []
        self._spine = "sp0"
        self._superspine = "ss0"

    def spine(self, name: str, *, superspine: str | None = None) -> ClusterBuilder:
        """Leaves added after this call hang under spine ``name``."""
        self._spine = name
        if superspine is not None:
            self._superspine = superspine
        return self

    def leaf(self, name: str, *, nodes: int, **node_kw: Any) -> ClusterBuilder:
        """Add leaf ``name`` with ``nodes`` nodes ``<name>-n0``... under the current spine;
        ``node_kw`` goes to :func:`node` (GPUs, model...). Returns the builder."""
        for k in range(nodes):
            self._nodes.append(
                node(
                    f"{name}-n{k}",
                    leaf=name,
                    spine=self._spine,
                    superspine=self._superspine,
                    **node_kw,
                )
            )
        return self

    def add(self, spec: NodeSpec) -> ClusterBuilder:
        """Add one node as it is. Returns the builder."""
        self._nodes.append(spec)
        return self

    def specs(self) -> list[NodeSpec]:
        """The node specs added so far, in order (a copy)."""
        return list(self._nodes)

    def build(self) -> ClusterState:
        """A :class:`~kant.state.ClusterState` of the nodes added (raises DuplicateError for a node
        name added twice)."""
        return ClusterState(self._nodes)
