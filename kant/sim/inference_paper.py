"""The paper's inference experiment (section 5.2) on real inference data: the
``inference-paper`` scenario, its cluster sizes and the measurements of
``docs/experiments.md``.

- **Cluster**: two GPU models with real node shapes, ``A100`` (the 8-GPU
  ``A100-SXM4-80GB`` nodes of Alibaba's spot-GPU cluster: 128 cores; that list gives no
  memory, 1 TiB is assumed) and ``V100M32`` (the 8-GPU ``V100M32`` machines of Alibaba PAI
  2020: 96 cores, 384 GB). Sizes (:data:`SIZES`): ``i2`` (default) 8 + 6 nodes = 112
  GPUs, ``i7`` twice that, ``a10`` half. One leaf per model. The first
  :data:`ZONE_SHARE` of each model's nodes form the E-Spread inference zone.
- **Tenants**: the :data:`TENANTS` largest virtual clusters of Helios Earth on its first
  day; their GPUs split each model's pool into per-tenant quotas (borrowing allowed).
- **Services**: GPU instances (``HN``) of the DLRM trace alive in a two-day window (days
  10-12 of the trace). Each app is given one model and one tenant (seeded draws, weighted
  by pool size and quota). Per model, its apps' instances are taken in a seeded random
  order and the longest prefix whose peak demand stays within ``load`` of the model's GPUs
  minus its large jobs is kept: a uniform sample of the trace, as large as the pool holds
  at its peak. Kept instances of one app with the same creation and deletion minute and
  the same GPUs are one pod-level inference service (id ``<app>-<min>-<min>``, with
  ``-<gpus>g`` when the app has services of other GPUs in those minutes); the app's
  ``max_instance_per_node`` is its ``max_per_node`` (dropped only when the pool has too
  few nodes for the service under it). Instances created before the window arrive at its
  start, instances alive after it end with it.
- **Large distributed inference jobs** (the trace has none; synthetic, as in 5.2's EP
  example): per model, gangs of 2 x 8-GPU pods that need whole nodes, one after another
  (6 h each, 1 h apart), so demand approaches but never exceeds capacity. Their 16 GPUs
  at a time count within ``load`` of the model's GPUs: a ``load`` below 16 over the
  smallest pool (:func:`min_load`; 1/3 for ``i2``) is refused.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import numpy as np

from kant.admission import Quota
from kant.errors import InvalidTraceError, ValidationError
from kant.model import Job, JobKind, NodeSpec, Resources, Role, is_int, is_number
from kant.sim.traces.inference import (
    DlrmInstance,
    load_dlrm_instances,
    load_pai_machines,
    load_spot_nodes,
    load_vc_gpus,
)

__all__ = [
    "SIZES",
    "TENANTS",
    "ZONE_SHARE",
    "inference_paper_cluster",
    "inference_paper_workload",
    "min_load",
]

SIZES: Final[Mapping[str, tuple[int, int]]] = {"i7": (16, 12), "i2": (8, 6), "a10": (4, 3)}
"""Cluster size name -> (A100 nodes, V100M32 nodes), after the paper's clusters i7, i2, a10
(figure 15: GFR rises as the cluster shrinks)."""
TENANTS: Final = 4
"""How many of Helios Earth's largest virtual clusters become tenants."""
ZONE_SHARE: Final = 0.25
"""Share of each model's nodes in the E-Spread inference zone (at least one node)."""
DAY: Final = 86_400.0
WINDOW_START: Final = 10 * DAY
WINDOW: Final = 2 * DAY
BIG_LIFETIME: Final = 6 * 3600.0
BIG_GAP: Final = 3600.0
BIG_POD: Final = 8
"""GPUs of each of a large job's two pods."""
BIG_GPUS: Final = 2 * BIG_POD
"""GPUs of one model's large jobs at any time (one runs at a time)."""

_FILES: Final = {
    "dlrm": "alibaba-gpu-v2025-dlrm/disaggregated_DLRM_trace.csv",
    "pai": "alibaba-pai-v2020/pai_machine_spec.csv",
    "spot": "alibaba-spot-gpu-v2026/node_info_df.csv",
    "vc": "helios-acme-summaries/helios_earth_vc_gpu_number.csv",
}


def _file(base: Path, key: str) -> Path:
    return base / _FILES[key]


def inference_paper_cluster(
    base: Path, size: str = "i2", *, zone: bool = True
) -> tuple[NodeSpec, ...]:
    """The nodes of cluster ``size`` (:data:`SIZES`) from the real node shapes under the
    trace folder ``base``; ``zone=False`` leaves out the inference zone."""
    if not isinstance(size, str) or size not in SIZES:
        raise ValidationError("size", size, f"must be one of {sorted(SIZES)}")
    spot = load_spot_nodes(_file(base, "spot")).shape("A100-SXM4-80GB", 8)
    pai = load_pai_machines(_file(base, "pai")).shape("V100M32", 8)
    nodes: list[NodeSpec] = []
    for model, shape, count, template in (
        ("A100", spot, SIZES[size][0], "dgx-8gpu"),
        ("V100M32", pai, SIZES[size][1], "pcie-8gpu"),
    ):
        tag = model.lower()
        in_zone = max(1, round(count * ZONE_SHARE)) if zone else 0
        for k in range(count):
            nodes.append(
                NodeSpec(
                    name=f"{tag}-n{k:02d}",
                    gpu_model=model,
                    gpus=shape.gpus,
                    cpu_milli=shape.cpu_milli,
                    memory_mib=shape.memory_mib or 1024 * 1024,
                    rdma_nics=8,
                    template=template,
                    leaf=f"{tag}-lf0",
                    spine="sp0",
                    superspine="ss0",
                    zone="inference" if k < in_zone else None,
                )
            )
    return tuple(nodes)


def tenant_shares(base: Path, tenants: int = TENANTS) -> dict[str, float]:
    """The ``tenants`` largest Helios Earth VCs on the table's first day -> GPU share (ties
    by name); tenant names ``t-<vc>``. ``tenants`` must be an int >= 1 (else
    :class:`~kant.errors.ValidationError`); a table whose first day gives no VC any GPU
    has no tenant to offer (:class:`~kant.errors.InvalidTraceError`)."""
    if not is_int(tenants) or tenants < 1:
        raise ValidationError("tenants", tenants, "must be an int >= 1")
    path = _file(base, "vc")
    vcs = load_vc_gpus(path)
    if not vcs:
        raise InvalidTraceError(
            "vc", vcs, "no virtual cluster has GPUs on the table's first day", where=str(path)
        )
    top = sorted(vcs.items(), key=lambda kv: (-kv[1], kv[0]))[:tenants]
    total = sum(g for _, g in top)
    return {f"t-{vc}": g / total for vc, g in top}


def quotas_for(pools: Mapping[str, int], shares: Mapping[str, float]) -> tuple[Quota, ...]:
    """Whole-GPU quotas of each model's pool split by ``shares`` (largest remainder, ties in
    tenant order), so each model's quotas sum to its GPUs."""
    from kant.sim.workloads import tenant_quotas

    per = tenant_quotas(pools, {t: dict.fromkeys(pools, s) for t, s in shares.items()})
    return tuple(Quota.gpus(t, m, q) for t, qs in per.items() for m, q in sorted(qs.items()))


def _window(inst: DlrmInstance) -> tuple[float, float] | None:
    start = WINDOW_START if inst.created is None else max(inst.created, WINDOW_START)
    end = (
        WINDOW_START + WINDOW if inst.deleted is None else min(inst.deleted, WINDOW_START + WINDOW)
    )
    if end - start < 60.0:
        return None
    return start - WINDOW_START, end - WINDOW_START


def _peak(intervals: Sequence[tuple[float, float, int]]) -> int:
    events = sorted([(a, g) for a, _, g in intervals] + [(b, -g) for _, b, g in intervals])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return peak


def _sample_to_peak(
    spans: Sequence[tuple[float, float, int]], keys: np.ndarray, target: float
) -> int:
    """How many of ``spans`` (taken in ``keys`` order, smallest first) can be kept with the
    peak demand at most ``target``: the kept sets are nested, so the peak grows with the
    count and a binary search finds the largest. O(n log^2 n)."""
    order = np.argsort(keys, kind="stable")
    lo, hi = 0, len(spans)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _peak([spans[i] for i in order[:mid].tolist()]) <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


def min_load(pools: Mapping[str, int]) -> float:
    """The smallest ``load`` :func:`inference_paper_workload` takes for these pools (GPU
    model -> GPUs): each model's large jobs (:data:`BIG_GPUS` at a time) within ``load`` of
    its GPUs, so ``BIG_GPUS`` over the smallest pool (1/3 for ``i2``: 16 of 48 V100M32
    GPUs). Above 1 when a pool is smaller than the large jobs."""
    return max(BIG_GPUS / g for g in pools.values())


def _check_room_for_large_jobs(pools: Mapping[str, int], load: float) -> None:
    """ValidationError unless every model's large jobs fit within ``load`` of its GPUs."""
    if all(load * g - BIG_GPUS >= 0 for g in pools.values()):
        return
    tight = min(pools, key=lambda m: (pools[m], m))
    gpus = pools[tight]
    if gpus < BIG_GPUS:
        raise ValidationError(
            "nodes", dict(pools), f"{tight} has {gpus} GPUs, too few for its large jobs "
            f"(2 x {BIG_POD} GPUs at a time) at any load <= 1",
        )  # fmt: skip
    lowest = math.ceil(min_load(pools) * 10_000) / 10_000  # (rounded up: itself allowed)
    raise ValidationError(
        "load", load, f"must be at least {lowest:g} on this cluster: each model's large jobs, "
        f"{BIG_GPUS} GPUs at a time, stay within load x its GPUs, and {tight} has only {gpus} "
        f"({BIG_GPUS}/{gpus})",
    )  # fmt: skip


def inference_paper_workload(
    base: Path,
    nodes: Sequence[NodeSpec],
    shares: Mapping[str, float],
    *,
    seed: int = 0,
    load: float = 0.95,
    host_resources: bool = True,
    caps: bool = True,
) -> list[Job]:
    """Services from the DLRM trace and the synthetic large jobs (module docstring) for
    ``nodes``, ``shares`` (tenant -> quota share): each model's peak demand (its sampled
    services plus its large jobs) is at most ``load`` of its GPUs, and as close to it as the
    sample allows. ``host_resources=False`` drops the instances' CPU and memory requests,
    ``caps=False`` the apps' per-node instance caps.

    Raises :class:`~kant.errors.ValidationError` before reading the trace for ``nodes``
    without a GPU node, ``shares`` that name no tenant or give one a share that is not a
    finite number > 0, a ``seed`` that is not an int >= 0, a ``load`` outside (0, 1] or
    below :func:`min_load` (the large jobs alone would pass it), a model with fewer GPUs
    than its large jobs."""
    if not is_int(seed) or seed < 0:
        raise ValidationError("seed", seed, "must be an int >= 0")
    if not is_number(load) or not 0.0 < load <= 1.0:
        raise ValidationError("load", load, "must be in (0, 1]")
    if not isinstance(shares, Mapping) or not shares:
        raise ValidationError("shares", shares, "must map at least one tenant to its share")
    for tenant, share in shares.items():
        if not is_number(share) or not 0.0 < share < math.inf:
            raise ValidationError(f"shares[{tenant!r}]", share, "must be a finite number > 0")
    pools: dict[str, int] = {}
    nodes_of: dict[str, int] = {}
    for n in nodes:
        if n.gpu_model is not None:
            pools[n.gpu_model] = pools.get(n.gpu_model, 0) + n.gpus
            nodes_of[n.gpu_model] = nodes_of.get(n.gpu_model, 0) + 1
    if not pools:
        raise ValidationError("nodes", [n.name for n in nodes], "has no GPU node")
    _check_room_for_large_jobs(pools, load)
    trace = load_dlrm_instances(_file(base, "dlrm"))
    models = sorted(pools)
    tenants = list(shares)
    rng = np.random.default_rng(seed)
    by_app: dict[str, list[tuple[DlrmInstance, float, float]]] = {}
    for inst in trace.instances:
        if inst.gpus < 1:
            continue  # CPU-node (CN) instances: the GPU cluster does not run them
        span = _window(inst)
        if span is not None:
            by_app.setdefault(inst.app, []).append((inst, *span))
    apps = sorted(by_app, key=lambda a: int(a.split("_")[-1]) if a.split("_")[-1].isdigit() else 0)
    model_w = np.array([pools[m] for m in models], dtype=np.float64)
    tenant_w = np.array([shares[t] for t in tenants], dtype=np.float64)
    with np.errstate(over="ignore"):
        if not math.isfinite(tenant_w.sum()):  # (finite shares whose sum is not: scaled)
            tenant_w = tenant_w / tenant_w.max()
    app_model = {a: models[int(rng.choice(len(models), p=model_w / model_w.sum()))] for a in apps}
    app_tenant = {
        a: tenants[int(rng.choice(len(tenants), p=tenant_w / tenant_w.sum()))] for a in apps
    }
    jobs: list[Job] = []
    for m in models:
        # a uniform sample of the model's instances (seeded keys), as large as the pool holds
        # at the peak within ``load`` beside its large jobs
        members = [(app, i, a, b) for app in apps if app_model[app] == m for i, a, b in by_app[app]]
        keys = rng.random(len(members))
        spans = [(a, b, i.gpus) for _, i, a, b in members]
        kept = _sample_to_peak(spans, keys, load * pools[m] - BIG_GPUS)
        keep = sorted(np.argsort(keys, kind="stable")[:kept].tolist())
        # one service per app, creation and deletion minute and GPUs per instance
        groups: dict[tuple[str, int, int, int], list[DlrmInstance]] = {}
        for k in keep:
            app, inst, a, b = members[k]
            groups.setdefault((app, int(a // 60), int(b // 60), inst.gpus), []).append(inst)
        sizes = Counter((app, a, b) for app, a, b, _g in groups)
        for (app, a, b, gpus), group in sorted(groups.items()):
            res = Resources(
                gpus=gpus,
                cpu_milli=max(i.cpu_milli for i in group) if host_resources else 0,
                memory_mib=max(i.memory_mib for i in group) if host_resources else 0,
            )
            limits = [i.max_per_node for i in group if i.max_per_node is not None]
            cap = min(limits) if limits and caps else None
            if cap is not None and cap * nodes_of[m] < len(group):
                cap = None  # the pool has too few nodes for the app's cap: see the docstring
            jobs.append(
                Job(
                    id=f"{app}-{a}-{b}" if sizes[app, a, b] == 1 else f"{app}-{a}-{b}-{gpus}g",
                    tenant=app_tenant[app],
                    kind=JobKind.INFERENCE,
                    gang=False,
                    submitted_at=a * 60.0,
                    runtime_estimate=max(60.0, (b - a) * 60.0),
                    roles=(
                        Role(
                            name="replica",
                            replicas=len(group),
                            resources=res,
                            gpu_models=frozenset({m}),
                            max_per_node=cap,
                        ),
                    ),
                )
            )
    for mi, m in enumerate(models):
        t = 0.1 * WINDOW + mi * 1800.0
        k = 0
        while t + BIG_LIFETIME <= WINDOW:
            jobs.append(
                Job(
                    id=f"ep-{m.lower()}-{k}",
                    tenant=tenants[k % len(tenants)],
                    kind=JobKind.INFERENCE,
                    gang=True,
                    submitted_at=t,
                    runtime_estimate=BIG_LIFETIME,
                    roles=(
                        Role(
                            name="expert",
                            replicas=2,
                            resources=Resources(gpus=BIG_POD, rdma_nics=8),
                            gpu_models=frozenset({m}),
                        ),
                    ),
                )
            )
            t += BIG_LIFETIME + BIG_GAP
            k += 1
    jobs.sort(key=lambda j: (j.submitted_at, j.id))
    return jobs


def pools_of(nodes: Sequence[NodeSpec]) -> dict[str, int]:
    """GPU model -> GPUs of ``nodes``."""
    out: dict[str, int] = {}
    for n in nodes:
        if n.gpu_model is not None:
            out[n.gpu_model] = out.get(n.gpu_model, 0) + n.gpus
    return out


def node_count(nodes: Sequence[NodeSpec]) -> int:
    """GPU nodes of ``nodes``."""
    return sum(1 for n in nodes if n.gpus)


def gpus_of(nodes: Sequence[NodeSpec]) -> int:
    """GPUs of ``nodes``."""
    return sum(n.gpus for n in nodes)


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints."""
    return math.ceil(a / b)
