"""Node lifecycle on the facade: the one place the shim adds, removes, cordons nodes, and
accounts for pods other schedulers bound (a small adapter, so the shim does not depend on
which node events the :class:`~kant.scheduler.Scheduler` offers)."""

from __future__ import annotations

from kant.errors import KantError
from kant.model import MILLI, Binding, NodeSpec, PodId
from kant.scheduler import EventReport, Scheduler
from kant.state import ClusterState


class NodeAdapter:
    """Node events and foreign pods, applied to ``scheduler``'s cluster."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    @property
    def _cluster(self) -> ClusterState:
        return self.scheduler.cluster

    def has(self, name: str) -> bool:
        """Whether kant knows the node."""
        return name in self._cluster

    def spec(self, name: str) -> NodeSpec:
        return self._cluster.node(name)

    def added(self, spec: NodeSpec, now: float) -> None:
        """A node joined (created, or taken again as it is now): its capacity may be
        allocated (:meth:`Scheduler.node_added`)."""
        self.scheduler.node_added(spec, now)

    def relabelled(self, spec: NodeSpec, now: float) -> None:
        """The node's labels, taints or pod capacity (``max_pods``) changed (nothing else):
        in place, its pods stay (above a lowered pod capacity too)."""
        old = self._cluster.node(spec.name)
        if (old.labels, old.taints) != (spec.labels, spec.taints):
            self.scheduler.node_relabelled(spec.name, spec.labels, spec.taints, now)
        if old.max_pods != spec.max_pods:
            self.scheduler.node_max_pods(spec.name, spec.max_pods, now)

    def removed(self, name: str, now: float) -> EventReport:
        """The node is deleted (or taken again as it is now): removed; its pods' jobs
        requeued, gangs whole (:meth:`Scheduler.node_removed`). Not :meth:`Scheduler.node_lost`:
        a Node object deleted never comes back as it was (one created again under its name is
        :meth:`added` as it is then), and a lost node's spec would be kept for a
        ``node_recovered`` that never comes, one for every node ever deleted."""
        return self.scheduler.node_removed(name, now)

    def not_ready(self, name: str, now: float) -> EventReport:
        """The node is NotReady: it stays in the cluster, offers nothing, and its pods are
        lost (gangs requeued whole)."""
        return self.scheduler.node_unhealthy(name, now, evict=True)

    def schedulable(self, name: str) -> bool:
        """Whether the node takes new pods (Ready and not cordoned)."""
        return self._cluster.is_healthy(name)

    def set_schedulable(self, name: str, ok: bool, now: float) -> None:
        """Cordoned (``ok`` False) or uncordoned, or Ready again: running pods stay, nothing
        new lands while not schedulable (:meth:`Scheduler.node_unhealthy` without eviction,
        :meth:`Scheduler.node_healthy`)."""
        if self._cluster.is_healthy(name) == ok:
            return
        if ok:
            self.scheduler.node_healthy(name)
        else:
            self.scheduler.node_unhealthy(name, now, evict=False)

    def bind_foreign(
        self, pod: PodId, node: str, gpus: int, milli: int, cpu: int, mem: int
    ) -> tuple[bool, str | None]:
        """A pod another scheduler put on ``node``: hold its capacity (healthy GPUs lowest
        free first). What does not fit now (GPUs or a GPU share, CPU or memory other pods
        hold: the kubelet admitted it over a pod of kant's, say) is left out rather than
        refused: the pod is held in part. Returns ``(held, why)``, ``why`` in words for the
        shim's log: not held (the node unknown, not Ready or cordoned, or its pods at
        max_pods; ``pod`` held already), held in part (what is left out), or ``(True,
        None)``, held in full."""
        c = self._cluster
        if node not in c:
            return False, f"node {node!r} is not known"
        if c.has_pod(pod):
            return False, "it is held already"
        if not c.is_healthy(node):
            return False, f"node {node!r} takes no pods now (not Ready, or cordoned)"
        spec = c.node(node)
        on = c.pods_on(node)
        if spec.max_pods is not None and len(on) >= spec.max_pods:
            return False, f"node {node!r} runs {len(on)} pods, its max_pods is {spec.max_pods}"
        used: dict[int, int] = {}
        cpu_free, mem_free = spec.cpu_milli, spec.memory_mib
        for p in on:
            b = c.binding(p)
            for g in b.gpus:
                used[g] = used.get(g, 0) + b.gpu_milli
            cpu_free -= b.cpu_milli
            mem_free -= b.memory_mib
        need = milli if milli else MILLI
        healthy = c.gpu_healthy_mask(node)
        free = [g for g in range(spec.gpus) if used.get(g, 0) + need <= MILLI and healthy >> g & 1]
        count = 1 if milli else gpus
        devs = tuple(free[:count])
        cpu_, mem_ = max(0, min(cpu, cpu_free)), max(0, min(mem, mem_free))
        short = []
        if len(devs) < count:
            short.append(f"{len(devs)} of its {count} GPUs" if not milli else f"its {milli}m share")
        if cpu_ < cpu:
            short.append(f"{cpu_} of its {cpu} CPU milli")
        if mem_ < mem:
            short.append(f"{mem_} of its {mem} MiB")
        try:
            c.bind(
                Binding(pod=pod, node=node, gpus=devs, gpu_milli=milli if milli and devs else MILLI,
                        cpu_milli=cpu_, memory_mib=mem_)
            )  # fmt: skip
        except KantError as e:
            return False, str(e)
        return True, (f"node {node!r} has free only {', '.join(short)}" if short else None)

    def release_foreign(self, pod: PodId) -> None:
        """The foreign pod ended or left."""
        if self._cluster.has_pod(pod):
            self._cluster.release(pod)
