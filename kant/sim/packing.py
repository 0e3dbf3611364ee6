"""The FGD packing protocol on Alibaba openb traces (``docs/packing.md``; the command line
is ``kant packing``, :mod:`kant.cli.packing`; the plot is
:func:`kant.sim.report.plots.plot_curves`).

Weng et al. (USENIX ATC '23, "Beware of Fragmentation") compare GPU placement policies by
filling a real cluster with a real pod list and watching the GPU allocation ratio. This
module replays that protocol with kant's :class:`~kant.placement.Placer` on a
:class:`~kant.state.Snapshot` (fractional GPUs, CPU and memory, ``gpu_spec`` model pools),
following the reference simulator (``hkust-adsl/kubernetes-scheduler-simulator``):

1. **Workload.** The pod list in name order is shuffled with the seed. If its total GPU
   request is below ``inflate x`` the cluster's GPUs, pods drawn uniformly (with the same
   random stream) from the original list are cloned and *appended* until the next clone would
   exceed the target; if it is above (the ``multigpu`` variants), uniformly random pods are
   removed until it fits.
2. **Placement.** Pods arrive one at a time and never leave. Each is placed by the policy on
   the snapshot and the binding applied to the cluster state; a pod that fits nowhere fails
   and is not retried.
3. **Curves.** After every arrival (and once before the first) the protocol records the
   *arrived* GPU request (placed or not) and the *allocated* GPU milli, both as % of the
   cluster's GPU capacity, and the cluster's expected fragmented GPU amount for the target
   workload (:func:`kant.metrics.fragmentation.node_fragmentation`), also as % of capacity.
   The value at arrived load ``p`` (0..130) is the mean over the records whose arrived % rounds
   to ``p`` (the ones rounding to ``p - 1 .. p + 1`` when there are none).
4. **Target workload.** Task classes are the pods' (CPU, GPU request, GPU models) in the
   original list; the most popular classes covering 95% of the pods are kept (CPU-only
   classes included) with their popularity, as the reference does. Memory is not part of a
   class (the reference's fragmentation looks at CPU and GPU only); it is still a hard
   constraint of placement.

:func:`packing` runs several seeds (optionally in worker processes) and averages them.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Final

import attrs
import numpy as np
import numpy.typing as npt

from kant.errors import InvalidTraceError, ValidationError
from kant.metrics.fragmentation import (
    CompiledWorkload,
    TaskClass,
    compile_workload,
    node_fragmentation,
)
from kant.model import (
    MILLI,
    Job,
    JobKind,
    NodeSpec,
    PodId,
    Resources,
    Role,
    is_finite_number,
    is_int,
    is_whole,
)
from kant.placement import STRATEGIES, FragmentationTarget, Placer, make_strategy, strategy_names
from kant.registry import BuildContext
from kant.sim.traces import OpenbPod, load_openb_pods, openb_nodes
from kant.state import ClusterState

FloatArray = npt.NDArray[np.float64]

PERCENTS: Final = tuple(range(131))
"""Arrived-load points of the curves: 0..130 % of the cluster's GPU capacity."""

PAPER_POLICIES: Final = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
"""The six policies of the FGD paper's evaluation, in its order."""

MAX_INFLATE: Final = 10.0
"""The largest ``inflate`` (GPU request / capacity): the curves stop at 130% of capacity, so
pods arriving past ten times the capacity change nothing but the run time."""

MAX_ARRIVALS: Final = 1_000_000
"""The most arrivals one run may need (originals and clones): a pod list whose GPU request
is tiny next to the target would otherwise clone pods almost without end."""

POPULARITY: Final = 0.95
"""Share of pods the target workload's task classes cover (the reference's threshold)."""


# --------------------------------------------------------------------------- workload


def _class_key(pod: OpenbPod, memory: bool) -> tuple[int, int, int, tuple[str, ...], int]:
    """(CPU, per-GPU milli, GPU count, models[, memory]): the task class of a pod."""
    models = tuple(sorted(pod.gpu_models))
    return (pod.cpu_milli, pod.gpu_milli, pod.num_gpu, models, pod.memory_mib if memory else 0)


def target_workload(
    pods: Sequence[OpenbPod], *, popularity: float = POPULARITY, memory: bool = False
) -> tuple[TaskClass, ...]:
    """The target workload of a pod list: its task classes by popularity, most popular
    first (ties: larger CPU, then larger GPU request first), cut once they cover
    ``popularity`` of the pods.

    The defaults are FGD's (the reference's): classes are (CPU, GPU request, models) with
    memory ignored, covering 95% of the pods. ``popularity=1.0, memory=True`` gives every
    class with its memory (what ``fgdpp`` uses for its tie-break)."""
    if not 0 < popularity <= 1:
        raise ValidationError("popularity", popularity, "must be in (0, 1]")
    if not pods:
        raise ValidationError("pods", "<empty>", "a target workload needs at least one pod")
    counts: dict[tuple[int, int, int, tuple[str, ...], int], int] = {}
    for p in pods:
        k = _class_key(p, memory)
        counts[k] = counts.get(k, 0) + 1
    order = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    total = len(pods)
    out: list[TaskClass] = []
    covered = 0
    for (cpu, milli, num, models, mem), n in order:
        if num == 1 and milli < MILLI:
            res = Resources(gpu_milli=milli, cpu_milli=cpu, memory_mib=mem)
        else:
            res = Resources(gpus=num, cpu_milli=cpu, memory_mib=mem)
        out.append(TaskClass(resources=res, weight=n / total, gpu_models=frozenset(models)))
        covered += n
        if covered >= popularity * total:
            break
    return tuple(out)


def arrival_order(
    pods: Sequence[OpenbPod], *, seed: int, capacity_milli: int, inflate: float
) -> list[int]:
    """Indices into ``pods`` (name-sorted internally) in arrival order: shuffled with
    ``seed``, then clones appended (or pods removed) until the total GPU request is
    ``inflate x capacity_milli`` (see the module docstring). Deterministic. Raises
    :class:`~kant.errors.ValidationError` when no pod asks for GPUs, when ``inflate`` is
    above :data:`MAX_INFLATE` or so small that no pod asking for GPUs arrives, or when the
    target needs more than :data:`MAX_ARRIVALS` arrivals."""
    if not pods:
        raise ValidationError("pods", "<empty>", "nothing to place")
    inflate = _check_inflate(inflate)
    total = sum(p.gpu_request_milli for p in pods)
    if total <= 0:
        raise ValidationError("pods", len(pods), "no pod asks for GPUs: nothing to pack")
    target = inflate * capacity_milli
    # Clones are drawn uniformly, so reaching the target takes about this many arrivals.
    needed = len(pods) * target / total
    if needed > MAX_ARRIVALS:
        raise ValidationError(
            "pods",
            len(pods),
            f"asking {total} GPU milli in all, reaching {inflate:g} x {capacity_milli} milli "
            f"needs about {needed:.3g} arrivals (at most {MAX_ARRIVALS:,})",
        )
    by_name = sorted(range(len(pods)), key=lambda i: pods[i].name)
    rng = np.random.default_rng(seed)
    order = [by_name[i] for i in rng.permutation(len(by_name)).tolist()]
    if total < target:
        while True:
            i = by_name[int(rng.integers(len(by_name)))]
            req = pods[i].gpu_request_milli
            if total + req > target:
                break
            order.append(i)
            total += req
    else:
        while total > target and order:
            i = order.pop(int(rng.integers(len(order))))
            total -= pods[i].gpu_request_milli
    if total <= 0:
        raise ValidationError(
            "inflate", inflate,
            f"{inflate:g} x {capacity_milli} GPU milli is less than any pod asks: no pod "
            "asking for GPUs arrives",
        )  # fmt: skip
    return order


# --------------------------------------------------------------------------- one run


@attrs.frozen(kw_only=True)
class PackingRun:
    """One seed's curves: ``alloc`` and ``frag`` [131] (% of GPU capacity, NaN where no
    record fell near that load), and counts."""

    seed: int
    arrivals: int
    placed: int
    failed: int
    alloc: tuple[float, ...]
    frag: tuple[float, ...]
    seconds: float


def _bucket_means(arrived_pct: FloatArray, values: FloatArray) -> FloatArray:
    """Mean of ``values`` per rounded arrived %, 0..130 (the reference's discretisation)."""
    b = np.rint(arrived_pct).astype(np.int64)
    keep = (b >= 0) & (b <= PERCENTS[-1] + 1)
    b, v = b[keep], values[keep]
    size = PERCENTS[-1] + 2
    sums = np.bincount(b, weights=v, minlength=size)
    cnt = np.bincount(b, minlength=size).astype(np.float64)
    out = np.full(len(PERCENTS), np.nan)
    for p in PERCENTS:
        if cnt[p]:
            out[p] = sums[p] / cnt[p]
        else:
            lo, hi = max(p - 1, 0), min(p + 1, size - 1)
            c = cnt[lo : hi + 1].sum()
            if c:
                out[p] = sums[lo : hi + 1].sum() / c
    return out


@functools.lru_cache(maxsize=8)
def _load_pods(path: str) -> tuple[OpenbPod, ...]:
    return load_openb_pods(path).pods


@functools.lru_cache(maxsize=4)
def _load_nodes(path: str) -> tuple[NodeSpec, ...]:
    return tuple(openb_nodes(path).nodes)


def make_policy(
    policy: str,
    *,
    seed: int,
    workload: Sequence[TaskClass] | CompiledWorkload,
    pods: Sequence[OpenbPod] = (),
) -> Any:
    """The strategy ``policy`` for one run, built from the run's seed and target workload
    (``workload``; for ``fgdpp``'s tie-break also every task class of ``pods``, memory
    included): each strategy takes from the build context what it is registered to use."""
    if "workload" not in STRATEGIES.uses(policy):
        return STRATEGIES.build(policy, BuildContext(seed=seed))
    secondary = target_workload(pods, popularity=1.0, memory=True) if pods else None
    target = FragmentationTarget(classes=workload, secondary=secondary)
    return STRATEGIES.build(policy, BuildContext(seed=seed, workload=target))


def run_packing(
    nodes: Sequence[NodeSpec],
    pods: Sequence[OpenbPod],
    policy: str,
    *,
    seed: int,
    inflate: float = 1.3,
    workload: Sequence[TaskClass] | None = None,
    refresh_every: int = 64,
) -> PackingRun:
    """Run the protocol once (one seed) and return its curves.

    Each binding is applied to the cluster state at once; the snapshot the Placer works on
    already holds it (the Placer committed it there), so refreshing the snapshot from the
    state every ``refresh_every`` arrivals gives the same placements as refreshing after
    each one, at a fraction of the cost."""
    if not isinstance(refresh_every, int) or refresh_every < 1:
        raise ValidationError("refresh_every", refresh_every, "must be an int >= 1")
    t0 = time.perf_counter()
    state = ClusterState(nodes)
    capacity = state.total_gpus() * MILLI
    if capacity <= 0:
        raise ValidationError("nodes", len(nodes), "the cluster has no GPUs")
    classes = tuple(workload) if workload is not None else target_workload(pods)
    compiled = compile_workload(classes, state.group_names("pool"))
    order = arrival_order(pods, seed=seed, capacity_milli=capacity, inflate=inflate)
    placer = Placer(make_policy(policy, seed=seed, workload=compiled, pods=pods))
    snap = state.snapshot()

    # The fragmentation curve is computed after the run from the rows that changed: one
    # vectorised evaluation instead of one per arrival.
    initial = _slot_fragmentation(state, compiled)
    cols = state.columns
    n = len(order) + 1
    arrived = np.zeros(n)
    alloc = np.zeros(n)
    changed_at: list[int] = []
    changed_slot: list[int] = []
    changed_rows: list[tuple[Any, ...]] = []
    roles: dict[tuple[Any, ...], Role] = {}
    arrived_milli = 0
    alloc_milli = 0
    placed = 0
    for i, k in enumerate(order, start=1):
        pod = pods[k]
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models)
        role = roles.get(key)
        if role is None:
            role = roles[key] = Role(name="pod", resources=pod.resources, gpu_models=pod.gpu_models)
        job = Job(id=f"a{i}", gang=False, kind=JobKind.INFERENCE, roles=(role,))
        arrived_milli += pod.gpu_request_milli
        result = placer.place_trusted(job, snap, (PodId(job=job.id, role="pod", index=0),))
        for b in result.bindings:
            state.bind(b)
            alloc_milli += b.total_milli
            placed += 1
            s = state.slot_of(b.node)
            changed_at.append(i)
            changed_slot.append(s)
            changed_rows.append(
                (cols.gpu_free[s].copy(), cols.cpu_free[s], cols.mem_free[s], cols.pool_id[s])
            )
        if i % refresh_every == 0:
            snap = state.snapshot()
        arrived[i] = arrived_milli
        alloc[i] = alloc_milli
    frag = _frag_curve(n, initial, changed_at, changed_slot, changed_rows, compiled)
    pct = 100.0 / capacity
    arrived_pct = arrived * pct
    return PackingRun(
        seed=seed,
        arrivals=len(order),
        placed=placed,
        failed=len(order) - placed,
        alloc=tuple(_bucket_means(arrived_pct, alloc * pct).tolist()),
        frag=tuple(_bucket_means(arrived_pct, frag * pct).tolist()),
        seconds=time.perf_counter() - t0,
    )


def _slot_fragmentation(state: ClusterState, cw: CompiledWorkload) -> FloatArray:
    """Expected fragmentation (milli) of every slot of ``state`` now (0 for dead slots)."""
    cols = state.columns
    alive = np.flatnonzero(cols.alive[: state.num_slots])
    initial = np.zeros(state.num_slots, dtype=np.float64)
    initial[alive] = node_fragmentation(
        cols.gpu_free[alive],
        cols.cpu_free[alive],
        cols.mem_free[alive],
        cols.pool_id[alive],
        cw,
    )
    return initial


def _frag_curve(
    n: int,
    initial: FloatArray,
    changed_at: list[int],
    changed_slot: list[int],
    rows: list[tuple[Any, ...]],
    cw: CompiledWorkload,
) -> FloatArray:
    """Cluster fragmentation (milli) at each of ``n`` records: ``initial`` per slot, then
    change ``j`` (at record ``changed_at[j]``) sets slot ``changed_slot[j]`` to the row
    ``rows[j]``. One vectorised evaluation of all changed rows."""
    total = np.full(n, float(initial.sum()))
    if not changed_at:
        return total
    after = node_fragmentation(
        np.stack([r[0] for r in rows]),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=np.int64),
        np.array([r[3] for r in rows], dtype=np.int64),
        cw,
    )
    slot = np.array(changed_slot, dtype=np.int64)
    # the value each change replaces: the previous change of the same slot, or the initial
    order = np.lexsort((np.arange(slot.shape[0]), slot))
    before = initial[slot].copy()
    same = slot[order][1:] == slot[order][:-1]
    before[order[1:][same]] = after[order[:-1][same]]
    delta = np.bincount(np.array(changed_at), weights=after - before, minlength=n)
    return total + np.cumsum(delta)


def _run_seed(args: tuple[str, str, str, int, float]) -> PackingRun:
    pods_path, nodes_path, policy, seed, inflate = args
    return run_packing(
        _load_nodes(nodes_path), _load_pods(pods_path), policy, seed=seed, inflate=inflate
    )


# --------------------------------------------------------------------------- many seeds


@attrs.frozen(kw_only=True)
class PackingResult:
    """Seed means of a policy on a trace: ``alloc_at`` / ``frag_at`` map each arrived % (as a
    string, for JSON) to the mean allocation ratio / fragmented GPUs, both in % of the
    cluster's GPU capacity."""

    policy: str
    trace: str
    seeds: tuple[int, ...]
    inflate: float
    alloc_at: dict[str, float]
    frag_at: dict[str, float]
    wall_s: float
    runs: tuple[PackingRun, ...] = attrs.field(repr=False)

    def to_json(self) -> dict[str, Any]:
        """The JSON object ``kant packing --json`` prints (no per-seed runs)."""
        return {
            "policy": self.policy,
            "trace": self.trace,
            "seeds": list(self.seeds),
            "alloc_at": self.alloc_at,
            "frag_at": self.frag_at,
            "wall_s": round(self.wall_s, 3),
        }


def mean_curve(curves: Sequence[Sequence[float | None]]) -> dict[str, float]:
    """The mean over seeds of each percent point of ``curves`` (one per seed; NaN or None
    where a seed has no value), rounded to 3 decimals; points no seed has are left out."""
    a = np.array([[math.nan if x is None else x for x in c] for c in curves], dtype=np.float64)
    out: dict[str, float] = {}
    for p in PERCENTS:
        col = a[:, p]
        col = col[~np.isnan(col)]
        if col.size:
            out[str(p)] = round(float(col.mean()), 3)
    return out


def _check_inflate(inflate: object) -> float:
    """``inflate`` as a float in (0, :data:`MAX_INFLATE`] (a NumPy number or a Fraction: the
    same arrivals as its float), else ValidationError naming it."""
    f = float(inflate) if is_finite_number(inflate) else math.nan  # type: ignore[arg-type]
    if not 0 < f <= MAX_INFLATE:
        raise ValidationError("inflate", inflate, f"must be a number in (0, {MAX_INFLATE:g}]")
    return f


SEEDS: Final = tuple(range(42, 52))
"""The seeds of a packing run given none (``kant packing``, a sweep's packing grid): the
protocol's ten."""


def packing(
    pods_path: str | os.PathLike[str],
    nodes_path: str | os.PathLike[str],
    policy: str,
    *,
    seeds: Sequence[int] = SEEDS,
    inflate: float = 1.3,
    workers: int = 1,
) -> PackingResult:
    """Run the protocol for every seed (``workers`` > 1: in that many processes) and average
    the curves over seeds. A pod file in which no pod asks for GPUs is refused
    (:class:`~kant.errors.InvalidTraceError` naming the file): there is nothing to pack. A
    ``policy`` that is no string, ``seeds`` that are not ints >= 0, ``workers`` not an int
    >= 1 or an ``inflate`` outside (0, :data:`MAX_INFLATE`] are a
    :class:`~kant.errors.ValidationError` naming the argument, before any work."""
    if not isinstance(policy, str):
        raise ValidationError("policy", policy, "must be a placement policy's name")
    if policy.lower() not in strategy_names():
        make_strategy(policy)  # raises UnknownPolicyError with the known names
    why = "must be a sequence of ints >= 0"
    if isinstance(seeds, str | bytes) or not isinstance(seeds, Sequence):
        raise ValidationError("seeds", seeds, why)
    if not seeds:
        raise ValidationError("seeds", seeds, "needs at least one seed")
    for s in seeds:
        if not is_whole(s) or s < 0:
            raise ValidationError("seeds", s, why)
    if not is_int(workers) or workers < 1:
        raise ValidationError("workers", workers, "must be an int >= 1")
    _check_inflate(inflate)
    if not any(p.gpu_request_milli for p in _load_pods(str(pods_path))):
        raise InvalidTraceError(
            "num_gpu", 0, "no pod asks for GPUs: nothing to pack", where=str(pods_path)
        )
    t0 = time.perf_counter()
    jobs = [(str(pods_path), str(nodes_path), policy.lower(), s, inflate) for s in seeds]
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
            runs = list(pool.map(_run_seed, jobs))
    else:
        runs = [_run_seed(j) for j in jobs]
    return PackingResult(
        policy=policy.lower(),
        trace=Path(pods_path).stem,
        seeds=tuple(seeds),
        inflate=inflate,
        alloc_at=mean_curve([r.alloc for r in runs]),
        frag_at=mean_curve([r.frag for r in runs]),
        wall_s=time.perf_counter() - t0,
        runs=tuple(runs),
    )


# --------------------------------------------------------------------------- curves


def curve_points(at: Mapping[str, float]) -> list[tuple[int, float]]:
    """``alloc_at`` / ``frag_at`` as (arrived %, value) in arrived order (JSON may have
    sorted the keys as strings: "10" before "2")."""
    return sorted((int(k), v) for k, v in at.items())


def seed_text(seeds: Sequence[int]) -> str:
    """Seeds as text: ``42-51`` for a run of consecutive seeds, else ``42,44``."""
    s = list(seeds)
    if len(s) > 1 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ",".join(str(x) for x in s)


def format_result(r: PackingResult, *, step: int = 10) -> str:
    """A readable table of the seed means every ``step`` % of arrived load (and at 100)."""
    runs = r.runs
    lines = [
        f"policy {r.policy}   trace {r.trace}   seeds {seed_text(r.seeds)} ({len(r.seeds)})"
        f"   inflate {r.inflate:g}   wall {r.wall_s:.1f} s",
        f"pods per run {np.mean([x.arrivals for x in runs]):.0f}   placed "
        f"{np.mean([x.placed for x in runs]):.0f}   failed {np.mean([x.failed for x in runs]):.0f}",
        f"{'arrived %':>9}  {'alloc %':>8}  {'frag %':>7}",
    ]
    for p in sorted({*range(0, PERCENTS[-1] + 1, step), 100, PERCENTS[-1]}):
        a, f = r.alloc_at.get(str(p)), r.frag_at.get(str(p))
        if a is None or f is None:
            continue
        lines.append(f"{p:>9}  {a:>8.2f}  {f:>7.2f}")
    return "\n".join(lines)
