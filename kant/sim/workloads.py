"""Seeded synthetic workloads shaped like the Kant paper's two experiment clusters (section 5).

Every generator draws from ``numpy.random.default_rng(seed)`` only, so the same arguments give
the same jobs on every run and machine. Jobs come back sorted by ``submitted_at`` with ids in
that order.

- :func:`paper_training_workload`: the homogeneous 8,000-GPU LLM training cluster of section
  5.1: job sizes 1..2048 GPUs, more than 90% of jobs below 8 GPUs, yet jobs of 256+ GPUs take
  most of the GPU-time (figure 2).
- :func:`inference_workload`: the multi-tenant heterogeneous inference cluster of section 5.2
  (hundreds of GPUs, two GPU models, per-tenant quotas per model), with
  :func:`tenant_quotas` and :func:`inference_cluster_nodes` to build the matching cluster.

:func:`describe_workload` measures the properties the generators promise. The distributions
are documented on each generator and in ``docs/traces.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final, TypeVar

import attrs
import numpy as np
import numpy.typing as npt

from kant.errors import ValidationError
from kant.model import (
    MILLI,
    Job,
    JobKind,
    NodeSpec,
    Resources,
    Role,
    Tier,
    TopologyWish,
    is_finite_number,
    is_whole,
)
from kant.sim.traces import gang_roles

FloatArray = npt.NDArray[np.float64]

# --------------------------------------------------------------------------- training

TRAINING_SIZES: Final[Mapping[int, float]] = {
    1: 0.62,
    2: 0.17,
    4: 0.13,
    8: 0.045,
    16: 0.012,
    32: 0.008,
    64: 0.006,
    128: 0.004,
    256: 0.0025,
    512: 0.0015,
    1024: 0.0007,
    2048: 0.0003,
}
"""Job size (GPUs) -> share of jobs. 92% of jobs ask fewer than 8 GPUs; 0.7% ask 256+."""

TRAINING_TENANTS: Final[Mapping[str, float]] = {
    "llm-pretrain": 0.15,
    "llm-sft": 0.30,
    "multimodal": 0.20,
    "research": 0.25,
    "eval": 0.10,
}
"""Default tenants of the training workload -> share of jobs."""

TRAINING_PRIORITIES: Final[Mapping[int, float]] = {0: 0.25, 1: 0.65, 2: 0.10}
"""Priority -> share of jobs (0 best effort, 1 normal, 2 high; high is not preemptible)."""

DAY: Final = 86_400.0


K = TypeVar("K")


def _check_probs(name: str, table: Mapping[K, float]) -> tuple[list[K], FloatArray]:
    keys = list(table)
    p = np.array([table[k] for k in keys], dtype=np.float64)
    if not keys or (p < 0).any() or not p.sum() > 0 or not np.isfinite(p).all():
        raise ValidationError(name, dict(table), "needs non-negative weights, not all zero")
    return keys, p / p.sum()


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValidationError(name, value, "must be a number > 0")
    if not is_finite_number(value):
        raise ValidationError(name, value, "must be finite")


def _arrivals(rng: np.random.Generator, n: int, span: float) -> FloatArray:
    """``n`` Poisson-process arrival times, the first at 0 and the last at ``span``."""
    if n == 1:
        return np.zeros(1)
    gaps = rng.exponential(1.0, size=n - 1)
    t: FloatArray = np.concatenate(([0.0], np.cumsum(gaps)))
    out: FloatArray = np.round(t * (span / t[-1]), 3)
    return out


def paper_training_workload(
    n_jobs: int = 20_000,
    seed: int = 0,
    *,
    cluster_gpus: int = 8000,
    load: float = 1.0,
    sizes: Mapping[int, float] = TRAINING_SIZES,
    tenants: Mapping[str, float] = TRAINING_TENANTS,
    priorities: Mapping[int, float] = TRAINING_PRIORITIES,
    median_runtime: float = 1800.0,
    runtime_sigma: float = 1.2,
    size_exponent: float = 0.3,
    min_runtime: float = 60.0,
    max_runtime: float = 14 * DAY,
    gpus_per_node: int = 8,
    cpu_milli_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
    rdma_nics_per_pod: int = 0,
    leaf_preference: bool = True,
) -> list[Job]:
    """The paper's 8,000-GPU LLM training workload (section 5.1, figure 2).

    - **Sizes** from ``sizes`` (default :data:`TRAINING_SIZES`: 1, 2, 4 GPUs are 92% of jobs;
      8 is 4.5%; 16..128 are 3%; 256..2048 are 0.7%). Jobs up to ``gpus_per_node`` GPUs are one
      pod; larger ones are gangs of ``gpus_per_node``-GPU pods (:func:`gang_roles`) with a
      *preferred* (not required) leaf-tier topology wish when ``leaf_preference``. Every pod
      asks ``rdma_nics_per_pod`` NICs if it spans nodes (multi-pod jobs), and CPU / memory per
      GPU as given. All jobs are gang jobs (a one-pod job is trivially all-or-nothing).
    - **Runtimes** are heavy-tailed: lognormal with median
      ``median_runtime * gpus ** size_exponent`` (bigger jobs run longer: 30 min for 1 GPU,
      about 5 h for 2048 GPUs by default) and shape ``runtime_sigma``, clipped to
      ``[min_runtime, max_runtime]``, whole seconds. With the defaults jobs of 256+ GPUs take
      about 70% of the GPU-time.
    - **Arrivals** are a Poisson process whose span is set so that the offered load,
      ``sum(gpus * runtime) / (cluster_gpus * span)``, equals ``load`` (span = the last
      arrival time; the first job arrives at 0).
    - **Tenants** and **priorities** are drawn independently of size from ``tenants`` and
      ``priorities``; priority-2 jobs are not preemptible.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ValidationError("n_jobs", n_jobs, "must be an int >= 1")
    for name, v in (
        ("cluster_gpus", cluster_gpus),
        ("load", load),
        ("median_runtime", median_runtime),
        ("min_runtime", min_runtime),
        ("max_runtime", max_runtime),
        ("gpus_per_node", gpus_per_node),
    ):
        _positive(name, v)
    if not (is_finite_number(runtime_sigma) and runtime_sigma >= 0):
        raise ValidationError("runtime_sigma", runtime_sigma, "must be a finite number >= 0")
    if max_runtime < min_runtime:
        raise ValidationError("max_runtime", max_runtime, f"is below min_runtime {min_runtime}")
    size_keys, size_p = _check_probs("sizes", sizes)
    if any(not isinstance(s, int) or s < 1 for s in size_keys):
        raise ValidationError("sizes", dict(sizes), "sizes must be ints >= 1")
    tenant_keys, tenant_p = _check_probs("tenants", tenants)
    prio_keys, prio_p = _check_probs("priorities", priorities)
    if any(isinstance(k, bool) or not isinstance(k, int) for k in prio_keys):
        raise ValidationError("priorities", dict(priorities), "priorities must be ints")
    top_priority = max(prio_keys)

    rng = np.random.default_rng(seed)
    size_arr = np.array(size_keys, dtype=np.int64)
    gpus = size_arr[rng.choice(len(size_keys), size=n_jobs, p=size_p)]
    median = median_runtime * gpus.astype(np.float64) ** size_exponent
    runtime = np.exp(rng.normal(np.log(median), runtime_sigma))
    runtime = np.round(np.clip(runtime, min_runtime, max_runtime))
    tenant_ix = rng.choice(len(tenant_keys), size=n_jobs, p=tenant_p)
    prio_ix = rng.choice(len(prio_keys), size=n_jobs, p=prio_p)
    span = float((gpus * runtime).sum()) / (cluster_gpus * load)
    arrive = _arrivals(rng, n_jobs, span)

    wish = TopologyWish(tier=Tier.LEAF, required=False) if leaf_preference else None
    role_cache: dict[int, tuple[Role, ...]] = {}

    def roles_for(g: int) -> tuple[Role, ...]:
        roles = role_cache.get(g)
        if roles is None:
            roles = gang_roles(
                g,
                max_gpus_per_pod=gpus_per_node,
                cpu_milli_per_gpu=cpu_milli_per_gpu,
                memory_mib_per_gpu=memory_mib_per_gpu,
            )
            if len(roles) > 1 or roles[0].replicas > 1:
                roles = tuple(
                    attrs.evolve(
                        r,
                        topology=wish,
                        resources=attrs.evolve(r.resources, rdma_nics=rdma_nics_per_pod),
                    )
                    for r in roles
                )
            role_cache[g] = roles
        return roles

    jobs: list[Job] = []
    for i in range(n_jobs):
        prio = prio_keys[int(prio_ix[i])]
        jobs.append(
            Job(
                id=f"train-{i:05d}",
                tenant=tenant_keys[int(tenant_ix[i])],
                priority=prio,
                submitted_at=float(arrive[i]),
                kind=JobKind.TRAINING,
                gang=True,
                roles=roles_for(int(gpus[i])),
                preemptible=prio < top_priority,
                runtime_estimate=float(runtime[i]),
            )
        )
    return jobs


# --------------------------------------------------------------------------- inference

INFERENCE_POOLS: Final[Mapping[str, int]] = {"L40": 192, "A100": 96}
"""Default inference cluster: GPU model -> GPUs (24 L40 and 12 A100 nodes of 8 GPUs)."""

INFERENCE_TENANTS: Final[Mapping[str, Mapping[str, float]]] = {
    "search": {"L40": 0.30, "A100": 0.25},
    "ads": {"L40": 0.25},
    "recsys": {"L40": 0.20, "A100": 0.15},
    "chat": {"L40": 0.10, "A100": 0.45},
    "vision": {"L40": 0.15, "A100": 0.15},
}
"""Default tenants -> share of each GPU model's pool they hold as quota (each model's shares
sum to 1: the pools are fully divided; tenants may hold quota in one model or both)."""

INFERENCE_SHAPES: Final[Mapping[str, Mapping[int, float]]] = {
    "L40": {250: 0.15, 500: 0.25, 1000: 0.40, 2000: 0.15, 4000: 0.05},
    "A100": {500: 0.10, 1000: 0.35, 2000: 0.25, 4000: 0.20, 8000: 0.10},
}
"""GPU model -> per-pod GPU request in milli (below 1000 = a shared GPU) -> share of jobs."""

INFERENCE_REPLICAS: Final[Mapping[int, float]] = {
    1: 0.35,
    2: 0.25,
    3: 0.10,
    4: 0.12,
    5: 0.05,
    6: 0.05,
    7: 0.03,
    8: 0.05,
}
"""Replicas per inference job -> share of jobs."""


def _check_pools(pools: Mapping[str, int]) -> None:
    """ValidationError naming ``pools[<model>]`` unless each pool is an int >= 0 (GPUs)."""
    for model, size in pools.items():
        if not is_whole(size) or size < 0:
            raise ValidationError(f"pools[{model}]", size, "must be an int >= 0 (GPUs)")


def tenant_quotas(
    pools: Mapping[str, int] = INFERENCE_POOLS,
    tenants: Mapping[str, Mapping[str, float]] = INFERENCE_TENANTS,
) -> dict[str, dict[str, int]]:
    """Whole-GPU quota per tenant and GPU model: ``{tenant: {model: gpus}}``.

    Each model's pool is divided by the tenants' shares of it (normalised), rounded by largest
    remainder (ties: tenant order) so the quotas of a model sum exactly to its pool. A pool
    is an int >= 0 (GPUs) and a share a finite number >= 0, else
    :class:`~kant.errors.ValidationError` naming it (``pools[L40]``, ``tenants[a][L40]``)."""
    _check_pools(pools)
    for t, per in tenants.items():
        for model, share in per.items():
            if not (is_finite_number(share) and share >= 0):
                raise ValidationError(
                    f"tenants[{t}][{model}]", share, "must be a finite number >= 0 (a share)"
                )
    out: dict[str, dict[str, int]] = {t: {} for t in tenants}
    for model, size in pools.items():
        holders = [(t, float(s[model])) for t, s in tenants.items() if s.get(model, 0) > 0]
        if not holders:
            continue
        total = sum(s for _, s in holders)
        if not math.isfinite(total):  # (finite shares whose sum is not: scaled down)
            top = max(s for _, s in holders)
            holders = [(t, s / top) for t, s in holders]
            total = sum(s for _, s in holders)
        exact = [(t, size * s / total) for t, s in holders]
        base = {t: math.floor(x) for t, x in exact}
        left = size - sum(base.values())
        order = sorted(range(len(exact)), key=lambda i: (-(exact[i][1] - base[exact[i][0]]), i))
        for i in order[:left]:
            base[exact[i][0]] += 1
        for t, q in base.items():
            if q:
                out[t][model] = q
    return out


def inference_cluster_nodes(
    pools: Mapping[str, int] = INFERENCE_POOLS,
    *,
    gpus_per_node: int = 8,
    nodes_per_leaf: int = 8,
    cpu_milli: int = 192_000,
    memory_mib: int = 2 * 1024 * 1024,
) -> list[NodeSpec]:
    """Nodes for an inference cluster of ``pools`` (model -> GPUs, rounded up to whole
    nodes): ``<model>-n<k>`` in leaves ``<model>-lf<j>`` of ``nodes_per_leaf`` under one spine.
    ``A100``/``H100``-class models get the NVSwitch ``dgx-8gpu`` template, others (``L40``)
    ``pcie-8gpu``, both with 8 NICs, when ``gpus_per_node`` is 8; no template otherwise.
    A pool that is not an int >= 0, or a ``gpus_per_node`` or ``nodes_per_leaf`` that is not
    an int >= 1, is a :class:`~kant.errors.ValidationError` naming it."""
    _check_pools(pools)
    for name, v in (("gpus_per_node", gpus_per_node), ("nodes_per_leaf", nodes_per_leaf)):
        if not is_whole(v) or v < 1:
            raise ValidationError(name, v, "must be an int >= 1")
    nodes: list[NodeSpec] = []
    for model, gpus in pools.items():
        count = math.ceil(gpus / gpus_per_node)
        tag = model.lower()
        nvswitch = model.upper().startswith(("A100", "H100", "H800", "H200", "B200"))
        template = None
        nics = 0
        if gpus_per_node == 8:
            template = "dgx-8gpu" if nvswitch else "pcie-8gpu"
            nics = 8
        for k in range(count):
            nodes.append(
                NodeSpec(
                    name=f"{tag}-n{k:03d}",
                    gpu_model=model,
                    gpus=gpus_per_node,
                    cpu_milli=cpu_milli,
                    memory_mib=memory_mib,
                    rdma_nics=nics,
                    template=template,
                    leaf=f"{tag}-lf{k // nodes_per_leaf}",
                    spine="sp0",
                    superspine="ss0",
                )
            )
    return nodes


def inference_workload(
    n_jobs: int = 2000,
    seed: int = 0,
    *,
    pools: Mapping[str, int] = INFERENCE_POOLS,
    tenants: Mapping[str, Mapping[str, float]] = INFERENCE_TENANTS,
    shapes: Mapping[str, Mapping[int, float]] = INFERENCE_SHAPES,
    replicas: Mapping[int, float] = INFERENCE_REPLICAS,
    load: float = 0.9,
    median_lifetime: float = 4 * 3600.0,
    lifetime_sigma: float = 1.0,
    min_lifetime: float = 300.0,
    max_lifetime: float = 7 * DAY,
    high_priority_share: float = 0.8,
    cpu_milli_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
) -> list[Job]:
    """The paper's multi-tenant heterogeneous inference cluster workload (section 5.2).

    - Each job is an inference service of one tenant on one GPU model, drawn so that the
      expected GPU demand of each (tenant, model) is proportional to the tenant's quota of
      that model (:func:`tenant_quotas`): each pool is loaded in proportion to its size and
      each tenant in proportion to its quota.
    - Pods: ``replicas`` (default 1..8, mostly 1-2) of one per-pod shape from ``shapes`` for
      the model: shared GPUs (250, 500 milli) and whole GPUs (1..8). Pod-level admission
      (``gang=False``), ``spread=True`` when there is more than one replica, the role allows
      only its model. A shape is GPU milli, a share in 1..999 or a multiple of 1000, and a
      replica count an int >= 1, else :class:`~kant.errors.ValidationError` naming the table.
    - Lifetimes (``runtime_estimate``): lognormal, median ``median_lifetime`` (4 h), shape
      ``lifetime_sigma``, clipped to ``[min_lifetime, max_lifetime]``, then rescaled per pool
      by a factor near 1 so that each pool's offered load is exactly ``load``.
    - Arrivals: Poisson, scaled so the offered load ``sum(gpus * lifetime) / (pool GPUs *
      span)`` is ``load`` (0.9: demand approaches but does not exceed capacity), for the
      cluster and for each pool.
    - Priority 1 (not preemptible) for ``high_priority_share`` of jobs, else 0 (preemptible).

    (About 120 lines: one generative recipe whose steps, above, share the same arrays and
    seeded generator; read top to bottom it matches this list.)
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ValidationError("n_jobs", n_jobs, "must be an int >= 1")
    for name, v in (
        ("load", load),
        ("median_lifetime", median_lifetime),
        ("min_lifetime", min_lifetime),
        ("max_lifetime", max_lifetime),
    ):
        _positive(name, v)
    if not 0 <= high_priority_share <= 1:
        raise ValidationError("high_priority_share", high_priority_share, "must be in [0, 1]")
    if not (is_finite_number(lifetime_sigma) and lifetime_sigma >= 0):
        raise ValidationError("lifetime_sigma", lifetime_sigma, "must be a finite number >= 0")
    if max_lifetime < min_lifetime:
        raise ValidationError("max_lifetime", max_lifetime, f"is below min_lifetime {min_lifetime}")
    quotas = tenant_quotas(pools, tenants)
    cells = [(t, m, q) for t, per in quotas.items() for m, q in per.items()]
    if not cells:
        raise ValidationError("tenants", dict(tenants), "no tenant holds quota in any pool")
    missing = {m for _, m, _ in cells} - set(shapes)
    if missing:
        raise ValidationError("shapes", dict(shapes), f"no pod shapes for {sorted(missing)}")
    shape_tables = {m: _check_probs(f"shapes[{m}]", shapes[m]) for m in shapes}
    for m, (keys, _p) in shape_tables.items():
        if any(not is_whole(k) or k < 1 or (k > MILLI and k % MILLI) for k in keys):
            raise ValidationError(
                f"shapes[{m}]",
                dict(shapes[m]),
                "a pod shape is GPU milli: a share in 1..999 or whole GPUs (1000, 2000, ...)",
            )
    rep_keys, rep_p = _check_probs("replicas", replicas)
    if any(not is_whole(k) or k < 1 for k in rep_keys):
        raise ValidationError("replicas", dict(replicas), "replica counts must be ints >= 1")
    # Jobs of a model ask more or fewer GPUs on average; weigh the cells so that each pool's
    # expected GPU demand (not its job count) is proportional to its quota.
    mean_milli = {
        m: float(np.dot(np.array(k, dtype=np.float64), p)) for m, (k, p) in shape_tables.items()
    }
    cell_p = np.array([q / mean_milli[m] for _, m, q in cells], dtype=np.float64)
    cell_p /= cell_p.sum()

    rng = np.random.default_rng(seed)
    cell_ix = rng.choice(len(cells), size=n_jobs, p=cell_p)
    reps = np.array(rep_keys, dtype=np.int64)[rng.choice(len(rep_keys), size=n_jobs, p=rep_p)]
    model_of = np.array([cells[int(c)][1] for c in cell_ix])
    per_pod = np.zeros(n_jobs, dtype=np.int64)
    for m, (keys, p) in shape_tables.items():
        mask = model_of == m
        k = int(mask.sum())
        if k:
            per_pod[mask] = np.array(keys, dtype=np.int64)[rng.choice(len(keys), size=k, p=p)]
    life = np.exp(rng.normal(math.log(median_lifetime), lifetime_sigma, size=n_jobs))
    life = np.round(np.clip(life, min_lifetime, max_lifetime))
    high = rng.random(n_jobs) < high_priority_share
    used = sorted({m for _, m, _ in cells})
    capacity = sum(pools[m] for m in used)
    demand = reps * per_pod * life / MILLI  # GPU-seconds per job
    span = float(demand.sum()) / (capacity * load)
    # Rescale lifetimes per pool (by a factor near 1) so that every pool, not just the
    # cluster, is offered exactly `load`.
    for m in used:
        mask = model_of == m
        got = float(demand[mask].sum())
        if got > 0:
            life[mask] = np.maximum(1.0, np.round(life[mask] * load * pools[m] * span / got))
    arrive = _arrivals(rng, n_jobs, span)

    jobs: list[Job] = []
    for i in range(n_jobs):
        tenant, model, _ = cells[int(cell_ix[i])]
        milli = int(per_pod[i])
        n_rep = int(reps[i])
        gpu = milli // MILLI
        res = Resources(
            gpus=gpu,
            gpu_milli=0 if gpu else milli,
            cpu_milli=math.ceil(milli * cpu_milli_per_gpu / MILLI),
            memory_mib=math.ceil(milli * memory_mib_per_gpu / MILLI),
        )
        jobs.append(
            Job(
                id=f"infer-{i:05d}",
                tenant=tenant,
                priority=1 if high[i] else 0,
                submitted_at=float(arrive[i]),
                kind=JobKind.INFERENCE,
                gang=False,
                roles=(
                    Role(
                        name="server",
                        replicas=n_rep,
                        resources=res,
                        gpu_models=frozenset({model}),
                        spread=n_rep > 1,
                    ),
                ),
                preemptible=not high[i],
                runtime_estimate=float(life[i]),
            )
        )
    return jobs


# --------------------------------------------------------------------------- properties


@attrs.frozen(kw_only=True)
class WorkloadStats:
    """Measured properties of a job list (see :func:`describe_workload`)."""

    jobs: int
    share_jobs_below_8_gpus: float
    gpu_time_share_256_plus: float
    offered_load: float
    span: float
    gpu_seconds: float


def describe_workload(jobs: Sequence[Job], cluster_gpus: float) -> WorkloadStats:
    """Share of jobs asking fewer than 8 GPUs, share of GPU-time (``gpus * runtime``) of jobs
    asking 256+ GPUs, and offered load ``GPU-seconds / (cluster_gpus * span)`` where ``span``
    is the time from the first to the last arrival (jobs without a runtime count 0)."""
    if not jobs:
        raise ValidationError("jobs", jobs, "needs at least one job")
    g = np.array([j.total_milli / MILLI for j in jobs], dtype=np.float64)
    r = np.array([j.runtime_estimate or 0.0 for j in jobs], dtype=np.float64)
    t = np.array([j.submitted_at for j in jobs], dtype=np.float64)
    gpu_time = g * r
    total = float(gpu_time.sum())
    span = float(t.max() - t.min())
    return WorkloadStats(
        jobs=len(jobs),
        share_jobs_below_8_gpus=float((g < 8).mean()),
        gpu_time_share_256_plus=float(gpu_time[g >= 256].sum()) / total if total else 0.0,
        offered_load=total / (cluster_gpus * span) if span > 0 else math.inf,
        span=span,
        gpu_seconds=total,
    )
