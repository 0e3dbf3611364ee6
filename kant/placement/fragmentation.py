"""Expected GPU fragmentation for a target workload (Weng et al., "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23).

The *target workload* ``M`` is a set of task classes ``m`` with popularity ``p_m`` (weights,
normalised to sum 1). For a node ``n`` with ``R_g`` free milli on each GPU ``g``, the GPU
capacity that a task of class ``m`` cannot use is::

    F_n(m) = sum_g R_g                              if m requests no GPU, or m cannot run on
                                                     n at all (not enough CPU / memory / GPUs,
                                                     or a GPU model m does not accept)
    F_n(m) = sum_g R_g * [R_g < min(D_m, 1)]        otherwise

where ``D_m`` is the class's GPU request (a share ``< 1`` or a whole count ``>= 1``): a GPU
whose free part cannot hold one unit of the request is a fragment. "Can run" means: at least
``ceil(D_m)`` GPUs each with ``>= min(D_m, 1)`` free, free CPU ``>=`` the class's CPU, free
memory ``>=`` its memory, and the node's GPU model among the class's models (any, if the class
names none). The node's expected fragmentation is ``F_n(M) = sum_m p_m F_n(m)`` and the
cluster's is ``F(M) = sum_n F_n(M)``. Everything is in milli here;
:func:`kant.metrics.fragmentation.fragmented_gpus` returns the cluster's amount in GPUs.

This follows the reference simulator (``hkust-adsl/kubernetes-scheduler-simulator``,
``NodeGpuShareFragAmountScore``) with one addition: memory is checked too (the reference
checks CPU only); give task classes ``memory_mib=0`` to reproduce it exactly. Unhealthy
devices and nodes have no free capacity in kant's columns, so they contribute nothing.

:func:`node_fragmentation` evaluates ``F_n(M)`` on arbitrary node rows (real or
hypothetical, e.g. a node after a tentative placement, which is how the FGD placement policy
scores a candidate: the smaller the growth of fragmentation, the better). It is vectorised
over nodes and classes: O(nodes x classes x GPUs per node) numpy work.

This module is at the placement level (it needs only :mod:`kant.model`): the FGD strategies
score with it, and :mod:`kant.metrics.fragmentation` re-exports it for cluster readings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import attrs
import numpy as np
import numpy.typing as npt

from kant.errors import ValidationError
from kant.model import (
    GPU_MODELS_REASON,
    MILLI,
    Job,
    Resources,
    are_gpu_models,
    is_finite_number,
    to_gpu_models,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _positive_weight(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not np.isfinite(value) or value <= 0:
        raise ValidationError(attribute.name, value, "must be a finite number > 0")


def _is_resources(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Resources):
        raise ValidationError(attribute.name, value, "must be a Resources")


def _model_names(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not are_gpu_models(value):
        raise ValidationError(attribute.name, value, GPU_MODELS_REASON)


@attrs.frozen(kw_only=True)
class TaskClass:
    """One class of tasks in a target workload: per-pod ``resources``, the allowed GPU
    models (empty = any) and a popularity ``weight`` (any positive scale)."""

    resources: Resources = attrs.field(validator=_is_resources)
    weight: float = attrs.field(default=1.0, validator=_positive_weight)
    gpu_models: frozenset[str] = attrs.field(
        factory=frozenset, converter=to_gpu_models, validator=_model_names
    )


TaskClassLike: TypeAlias = (
    TaskClass | tuple[Resources, float] | tuple[Resources, float, "Iterable[str] | str"]
)
"""A task class, or ``(resources, weight)``, or ``(resources, weight, gpu_models)``."""


def task_classes(
    workload: Iterable[TaskClassLike], field: str = "workload"
) -> tuple[TaskClass, ...]:
    """Normalise a workload given as task classes or tuples (see :data:`TaskClassLike`);
    ValidationError naming ``field`` (or its item, ``field[i]``) otherwise."""
    out: list[TaskClass] = []
    for i, item in enumerate(workload):
        if isinstance(item, TaskClass):
            out.append(item)
            continue
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise ValidationError(
                f"{field}[{i}]", item, "must be a TaskClass or (resources, weight[, models])"
            )
        models = item[2] if len(item) == 3 else frozenset()
        out.append(TaskClass(resources=item[0], weight=item[1], gpu_models=models))
    if not out:
        raise ValidationError(field, workload, "needs at least one task class")
    return tuple(out)


def workload_from_jobs(
    jobs: Iterable[Job], *, include_cpu_only: bool = True, popularity: float = 1.0
) -> tuple[TaskClass, ...]:
    """The target workload of a job list: one class per distinct (pod resources, GPU models),
    weighted by its number of pods.

    ``popularity`` < 1 keeps only the most frequent classes that together cover that share of
    the pods (the reference simulator uses 0.95), most frequent first, ties in order of first
    appearance. ``include_cpu_only=False`` drops classes that request no GPU. ValidationError
    for ``jobs`` that are not Jobs or a ``popularity`` that is no number in (0, 1].
    """
    if not (is_finite_number(popularity) and 0 < popularity <= 1):
        raise ValidationError("popularity", popularity, "must be a number in (0, 1]")
    if isinstance(jobs, str | bytes) or not isinstance(jobs, Iterable):
        raise ValidationError("jobs", jobs, "must be an iterable of kant.Job")
    jobs = list(jobs)
    for job in jobs:
        if not isinstance(job, Job):
            raise ValidationError("jobs", job, "must be an iterable of kant.Job")
    counts: dict[tuple[Resources, frozenset[str]], int] = {}
    for job in jobs:
        for role in job.roles:
            if not include_cpu_only and role.resources.total_milli == 0:
                continue
            key = (role.resources, role.gpu_models)
            counts[key] = counts.get(key, 0) + role.replicas
    if not counts:
        raise ValidationError("jobs", "<no pods>", "no task of the requested kind")
    order = sorted(enumerate(counts.items()), key=lambda e: (-e[1][1], e[0]))
    total = sum(counts.values())
    kept: list[TaskClass] = []
    covered = 0
    for _, ((res, models), c) in order:
        kept.append(TaskClass(resources=res, weight=c / total, gpu_models=models))
        covered += c
        if covered >= popularity * total - 1e-9:
            break
    return tuple(kept)


@attrs.frozen(kw_only=True, eq=False)
class CompiledWorkload:
    """A target workload as arrays, for :func:`node_fragmentation`.

    Per class ``m``: ``weight`` (normalised popularity), ``need`` (milli a GPU must have free
    to host one unit: the share, or 1000; 0 for CPU-only classes), ``count`` (GPUs needed: the
    whole count, 1 for a share, 0 for CPU-only), ``cpu``, ``mem``, and ``model_ok`` [m, K+1]
    (may class m run on a node of model id k; column ``-1`` is a node with no / an unknown
    model). ``model_names[k]`` names model id ``k``.
    """

    classes: tuple[TaskClass, ...]
    model_names: tuple[str, ...]
    weight: FloatArray
    need: IntArray
    count: IntArray
    cpu: IntArray
    mem: IntArray
    model_ok: npt.NDArray[np.bool_]
    # derived, for node_fragmentation_by_class: the GPU classes' indices, their distinct
    # per-GPU requests and which one each class has, and their rows of the arrays above
    gpu_index: IntArray = attrs.field(init=False)
    gpu_needs: IntArray = attrs.field(init=False)
    gpu_need_of: IntArray = attrs.field(init=False)
    gpu_count: IntArray = attrs.field(init=False)
    gpu_cpu: IntArray = attrs.field(init=False)
    gpu_mem: IntArray = attrs.field(init=False)
    gpu_model_ok_t: npt.NDArray[np.bool_] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        gc = np.flatnonzero(self.count > 0)
        needs, which = np.unique(self.need[gc], return_inverse=True)
        derived = {
            "gpu_index": gc,
            "gpu_needs": needs,
            "gpu_need_of": which.reshape(-1),
            "gpu_count": self.count[gc],
            "gpu_cpu": self.cpu[gc],
            "gpu_mem": self.mem[gc],
            "gpu_model_ok_t": np.ascontiguousarray(self.model_ok[gc].T),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @property
    def gpu_classes(self) -> npt.NDArray[np.bool_]:
        """Per class: does it ask for a GPU (whole or a share)?"""
        return self.count > 0


def compile_workload(
    workload: Iterable[TaskClassLike] | CompiledWorkload, model_names: Sequence[str]
) -> CompiledWorkload:
    """Compile a workload for nodes whose GPU model ids index ``model_names`` (for a
    :class:`~kant.state.ClusterState` that is ``state.group_names("pool")``, matching the
    ``pool_id`` column). A compiled workload for the same names is returned as is.
    O(classes x models); called once per workload and node set, never per pod."""
    names = tuple(model_names)
    if isinstance(workload, CompiledWorkload):
        if workload.model_names == names:
            return workload
        workload = workload.classes
    classes = task_classes(workload)
    m = len(classes)
    w = np.array([c.weight for c in classes], dtype=np.float64)
    res = [c.resources for c in classes]
    need = np.array(
        [r.gpu_milli if r.is_shared else (MILLI if r.gpus else 0) for r in res], dtype=np.int64
    )
    count = np.array([1 if r.is_shared else r.gpus for r in res], dtype=np.int64)
    index = {name: k for k, name in enumerate(names)}
    model_ok = np.zeros((m, len(names) + 1), dtype=np.bool_)
    for i, c in enumerate(classes):
        if not c.gpu_models:
            model_ok[i, :] = True
        else:
            for model in c.gpu_models:
                k = index.get(model)
                if k is not None:
                    model_ok[i, k] = True
    return CompiledWorkload(
        classes=classes,
        model_names=names,
        weight=w / w.sum(),
        need=need,
        count=count,
        cpu=np.array([r.cpu_milli for r in res], dtype=np.int64),
        mem=np.array([r.memory_mib for r in res], dtype=np.int64),
        model_ok=model_ok,
    )


def node_fragmentation_by_class(
    gpu_free: npt.ArrayLike,
    cpu_free: npt.ArrayLike,
    mem_free: npt.ArrayLike,
    model_id: npt.ArrayLike,
    workload: CompiledWorkload,
) -> FloatArray:
    """``F_n(m)`` in milli for every node row ``n`` and class ``m``: float array [n, m].

    ``gpu_free`` [n, W]: free milli per GPU (pad absent GPUs with 0); ``cpu_free``,
    ``mem_free``, ``model_id`` [n]: free CPU milli, free memory MiB and GPU model id
    (an index into ``workload.model_names``, -1 for none).
    """
    gf = np.asarray(gpu_free, dtype=np.int64)
    if gf.ndim != 2:
        raise ValidationError("gpu_free", gf.shape, "must be a 2-d array [nodes, gpus]")
    cpu = np.asarray(cpu_free, dtype=np.int64)
    mem = np.asarray(mem_free, dtype=np.int64)
    mid = np.asarray(model_id, dtype=np.int64)
    n = gf.shape[0]
    if cpu.shape != (n,) or mem.shape != (n,) or mid.shape != (n,):
        raise ValidationError("rows", (gf.shape, cpu.shape, mem.shape, mid.shape), "mismatch")
    k_models = len(workload.model_names)
    if n and (mid.min() < -1 or mid.max() >= k_models):
        raise ValidationError("model_id", mid, f"must be in -1..{k_models - 1}")
    return _by_class(gf, cpu, mem, mid, workload)


def _by_class(
    gf: IntArray, cpu: IntArray, mem: IntArray, mid: IntArray, w: CompiledWorkload
) -> FloatArray:
    """:func:`node_fragmentation_by_class` of rows already checked (int64, shapes agree,
    model ids in range)."""
    n = gf.shape[0]
    total = gf.sum(axis=1).astype(np.float64)
    out = np.repeat(total[:, None], len(w.classes), axis=1)
    if w.gpu_index.size and n:
        # classes share GPU requests (most ask whole GPUs): per distinct request, which
        # GPUs can hold a task, how many, and the free milli of the others (float matrix
        # products: exact, the values are integers far below 2**53)
        ok_gpu = (gf[:, None, :] >= w.gpu_needs[None, :, None]).astype(np.float64)
        usable = (ok_gpu @ np.ones(gf.shape[1]))[:, w.gpu_need_of]
        held = np.matmul(ok_gpu, gf.astype(np.float64)[:, :, None])[:, :, 0]
        partial = (total[:, None] - held)[:, w.gpu_need_of]
        fits = usable >= w.gpu_count[None, :]
        fits &= cpu[:, None] >= w.gpu_cpu[None, :]
        fits &= mem[:, None] >= w.gpu_mem[None, :]
        fits &= w.gpu_model_ok_t[mid]
        out[:, w.gpu_index] = np.where(fits, partial, total[:, None])
    return out


def node_fragmentation_rows(
    gpu_free: IntArray,
    cpu_free: IntArray,
    mem_free: IntArray,
    model_id: IntArray,
    workload: CompiledWorkload,
) -> FloatArray:
    """:func:`node_fragmentation` without its argument checks, for callers scoring many
    small batches of rows they built themselves: int64 arrays ``[n, W]``, ``[n]``,
    ``[n]``, ``[n]`` with model ids in ``-1 .. len(workload.model_names) - 1``."""
    return _by_class(gpu_free, cpu_free, mem_free, model_id, workload) @ workload.weight


def node_fragmentation(
    gpu_free: npt.ArrayLike,
    cpu_free: npt.ArrayLike,
    mem_free: npt.ArrayLike,
    model_id: npt.ArrayLike,
    workload: CompiledWorkload,
) -> FloatArray:
    """Expected fragmentation ``F_n(M) = sum_m p_m F_n(m)`` in milli per node row: float
    array [n]. Arguments as in :func:`node_fragmentation_by_class`."""
    by_class = node_fragmentation_by_class(gpu_free, cpu_free, mem_free, model_id, workload)
    return by_class @ workload.weight


# --------------------------------------------------------------------------- build context


def _checked_classes(v: Any, field: str) -> tuple[TaskClass, ...]:
    """Task classes ``v`` checked when the target is made (each a TaskClass or a
    ``(resources, weight[, models])`` of a finite weight > 0): a strategy built on a bad one
    failed at every cycle, in its first placement. ValidationError naming ``field``."""
    if isinstance(v, str | bytes) or not isinstance(v, Iterable):
        raise ValidationError(field, v, "must be task classes: (resources, weight[, models])")
    return task_classes(v, field)


def _classes(v: Any) -> tuple[TaskClassLike, ...] | CompiledWorkload:
    return v if isinstance(v, CompiledWorkload) else _checked_classes(v, "workload")


def _opt_classes(v: Any) -> tuple[TaskClassLike, ...] | None:
    return None if v is None else _checked_classes(v, "secondary")


@attrs.frozen(kw_only=True)
class FragmentationTarget:
    """The workload a fragmentation-aware strategy (``fgd``, ``fgdpp``) works for, as task
    classes: what :class:`kant.registry.BuildContext` ``workload`` holds when the workload is
    not a list of jobs (``kant packing`` derives it from openb pods).

    ``classes``: the target workload (task classes, or a workload compiled for the cluster's
    pool names); ``secondary``: the task classes ``fgdpp`` weighs in its tie-break (None: the
    target workload)."""

    classes: tuple[TaskClassLike, ...] | CompiledWorkload = attrs.field(converter=_classes)
    secondary: tuple[TaskClassLike, ...] | None = attrs.field(default=None, converter=_opt_classes)


WorkloadLike: TypeAlias = (
    "Iterable[TaskClassLike] | Iterable[Job] | CompiledWorkload | FragmentationTarget"
)
"""What a fragmentation-aware strategy's ``workload`` may be (see :func:`fragmentation_target`)."""


def fragmentation_target(workload: WorkloadLike | None) -> FragmentationTarget | None:
    """``BuildContext.workload`` (or a strategy's ``workload=`` option) as a
    :class:`FragmentationTarget`: None stays None; a sequence of :class:`~kant.model.Job`
    becomes :func:`workload_from_jobs` of it (every class, CPU-only ones included); task
    classes or a compiled workload become the target; a target is returned as is.
    O(pods) for jobs; called once, when a strategy is built."""
    if workload is None or isinstance(workload, FragmentationTarget):
        return workload
    if isinstance(workload, CompiledWorkload):
        return FragmentationTarget(classes=workload)
    if isinstance(workload, str | bytes) or not isinstance(workload, Iterable):
        why = "must be jobs, task classes or a kant.placement.FragmentationTarget"
        raise ValidationError("workload", workload, why)
    items: tuple[Any, ...] = tuple(workload)
    if not items:
        raise ValidationError("workload", workload, "needs at least one job or task class")
    if all(isinstance(j, Job) for j in items):
        return FragmentationTarget(classes=workload_from_jobs(items))
    return FragmentationTarget(classes=items)
