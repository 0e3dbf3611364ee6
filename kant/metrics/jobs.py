"""Per-job distributions by size bucket: JWTD and JTTED (Kant paper, sections 4.4 and 4.5).

Both take :class:`~kant.metrics.records.JobRecord` values and group them by
:func:`~kant.metrics.buckets.size_bucket`. Returned dicts list only buckets that hold at least
one record, in :data:`~kant.metrics.buckets.BUCKETS` order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs
import numpy as np

from kant.errors import ValidationError
from kant.metrics.buckets import BUCKETS
from kant.metrics.records import JobRecord, checked_pod_shapes
from kant.model import MAX_GPUS_PER_NODE, MILLI, NodeSpec, finite_number, is_int

NAN = float("nan")


@attrs.frozen(kw_only=True)
class JwtdRow:
    """Waiting times of one size bucket, in seconds.

    ``count`` jobs contributed a wait; ``mean_wait``, ``p50``, ``p95`` and ``max`` describe
    them (NaN when ``count`` is 0). ``unstarted`` jobs of the bucket had not started; they are
    in ``count`` only when a ``now`` was given (see :func:`jwtd`).
    """

    count: int
    mean_wait: float
    p50: float
    p95: float
    max: float
    unstarted: int = 0


def _records(records: Iterable[JobRecord]) -> list[JobRecord]:
    """``records`` as a list, each a JobRecord; else ValidationError naming ``records``."""
    why = "must be an iterable of kant.metrics.JobRecord"
    if isinstance(records, str | bytes):
        raise ValidationError("records", records, why)
    try:
        out = list(records)
    except TypeError:  # (no iterable)
        raise ValidationError("records", records, why) from None
    for r in out:
        if not isinstance(r, JobRecord):
            raise ValidationError("records", r, why)
    return out


def jwtd(records: Iterable[JobRecord], *, now: float | None = None) -> dict[str, JwtdRow]:
    """Job Waiting Time Distribution: wait statistics per size bucket.

    A job's wait is ``started_at - submitted_at`` (queueing plus scheduling decision time).
    Jobs that never started are left out of the statistics, unless ``now`` is given: then they
    count with the censored wait ``now - submitted_at`` (a lower bound; use it so that jobs a
    policy starves are not silently dropped). ``now`` is the time the distribution is taken:
    a job submitted after it is left out, and one that started after it counts as still
    waiting then. Percentiles interpolate linearly
    (``numpy.percentile``'s default). A ``now`` that is no finite number is refused
    (:class:`~kant.errors.ValidationError`), as are ``records`` that are not JobRecords.
    """
    if now is not None:
        now = finite_number(now, "now")
    waits: dict[str, list[float]] = {}
    unstarted: dict[str, int] = {}
    for r in _records(records):
        if now is not None and r.submitted_at > now:
            continue  # (not yet submitted at now)
        b = r.bucket
        lst = waits.setdefault(b, [])
        if r.started_at is not None and (now is None or r.started_at <= now):
            lst.append(r.started_at - r.submitted_at)
        else:
            unstarted[b] = unstarted.get(b, 0) + 1
            if now is not None:
                lst.append(max(0.0, now - r.submitted_at))
    out: dict[str, JwtdRow] = {}
    for b in BUCKETS:
        if b not in waits:
            continue
        w = np.asarray(waits[b], dtype=np.float64)
        if w.size:
            p50, p95 = np.percentile(w, [50, 95]).tolist()
            row = JwtdRow(
                count=int(w.size),
                mean_wait=float(w.mean()),
                p50=float(p50),
                p95=float(p95),
                max=float(w.max()),
                unstarted=unstarted.get(b, 0),
            )
        else:
            row = JwtdRow(
                count=0, mean_wait=NAN, p50=NAN, p95=NAN, max=NAN, unstarted=unstarted.get(b, 0)
            )
        out[b] = row
    return out


PodShape = tuple[int, ...]
"""One role's pods, as JTTED reads them: ``(pods, whole GPUs each, share milli each)`` (a
share only when no whole GPU: 1..999 milli on one GPU), and a fourth element when the role
caps its pods on a node (``max_per_node``)."""


def optimal_nodes(gpus: float, gpus_per_node: int, pods: Sequence[PodShape] = ()) -> int:
    """Fewest nodes that can hold the job's GPUs, at least 1: ``ceil(gpus / gpus_per_node)``
    from its GPUs alone; with its pods' shapes (``pods``, :data:`PodShape` per role) also no
    fewer than each role's pods need (``ceil(pods / pods a node holds)``: a node holds
    ``floor(gpus_per_node / g)`` pods of ``g`` whole GPUs, ``gpus_per_node x floor(1000 /
    m)`` shares of ``m`` milli, or the role's cap if it is lower) and than the GPUs the pods
    fill: the whole GPUs, plus for the
    shares the more of their milli together over 1000 (shares of two roles may pair) and of
    what the most demanding role's shares fill alone (two shares above 500 milli never share
    a GPU). For a job of one role this is exact in GPUs; for several, the largest of these
    bounds (a bound: no placement uses fewer). ``pods`` a record would refuse (see
    :attr:`JobRecord.pods`) is a ValidationError naming it, with the record's reason."""
    why = "must be a finite number >= 0"
    if finite_number(gpus, "gpus", why) < 0:
        raise ValidationError("gpus", gpus, why)
    if not is_int(gpus_per_node) or not 1 <= gpus_per_node <= MAX_GPUS_PER_NODE:
        raise ValidationError(
            "gpus_per_node", gpus_per_node, f"must be an int in [1, {MAX_GPUS_PER_NODE}]"
        )
    pods = checked_pod_shapes(pods)
    best = max(1, math.ceil(gpus / gpus_per_node - 1e-9))
    whole = 0  # GPUs the whole-GPU pods hold
    share_milli = 0  # what the shares hold, all roles together (shares of roles may pair)
    share_gpus = 0  # the GPUs the shares of the role that needs most fill on their own
    for n, g, m, *cap in pods:
        if n <= 0:
            continue
        if g > 0:
            per = gpus_per_node // g
            whole += n * g
        elif 0 < m < MILLI:
            per = gpus_per_node * (MILLI // m)
            share_milli += n * m
            share_gpus = max(share_gpus, math.ceil(n / (MILLI // m)))
        else:
            continue
        if cap and per > 0:  # (a role's max_per_node: no node holds more of its pods)
            per = min(per, cap[0])
        if per > 0:
            best = max(best, math.ceil(n / per))
    used = whole + max(math.ceil(share_milli / MILLI), share_gpus)
    return max(best, math.ceil(used / gpus_per_node))


def optimal_groups(
    gpus: float, gpus_per_node: int, nodes_per_leaf: int, pods: Sequence[PodShape] = ()
) -> int:
    """Fewest leaf groups (NodeNetGroups) for the optimal node count:
    ``ceil(optimal_nodes / nodes_per_leaf)``."""
    if not is_int(nodes_per_leaf) or nodes_per_leaf < 1:
        raise ValidationError("nodes_per_leaf", nodes_per_leaf, "must be an int >= 1")
    return math.ceil(optimal_nodes(gpus, gpus_per_node, pods) / nodes_per_leaf)


def pool_shapes(nodes: Iterable[NodeSpec]) -> dict[str | None, tuple[int, int]]:
    """GPU model -> (GPUs per node, nodes per leaf) for JTTED's optimal counts of a job that
    runs in that pool: its largest node and its largest leaf (1 if its nodes have no leaf),
    so the optimum is the fewest nodes and groups the pool allows (paper, section 4.5),
    whatever the job's nodes or their names. Nodes without GPUs are left out."""
    gpus: dict[str | None, int] = {}
    leaves: dict[tuple[str | None, str], int] = {}
    for n in nodes:
        if not n.gpus:
            continue
        gpus[n.gpu_model] = max(gpus.get(n.gpu_model, 0), n.gpus)
        if n.leaf is not None:
            key = (n.gpu_model, n.leaf)
            leaves[key] = leaves.get(key, 0) + 1
    largest: dict[str | None, int] = {}
    for (model, _leaf), count in leaves.items():
        largest[model] = max(largest.get(model, 0), count)
    return {model: (g, largest.get(model, 1)) for model, g in gpus.items()}


def optimum_shape(
    pools: Mapping[str | None, tuple[int, int]], nodes: Iterable[NodeSpec]
) -> tuple[int, int]:
    """(GPUs per node, nodes per leaf) of the optimum JTTED reads a job against, from
    ``pools`` (:func:`pool_shapes` of the cluster) and the ``nodes`` it ran on: the largest
    over the pools of those nodes, whatever their order (a job spanning two pools, a role on
    H100 nodes and one on A100, reads the larger of each), so the optimum is the fewest nodes
    and groups any of its pools allows. A node counts at least its own GPUs; one whose pool
    ``pools`` lacks (no GPUs, or its pool gone since) a leaf of 1. (1, 1) for no node. The
    simulator and the :class:`~kant.exporter.MetricsExporter` both read it."""
    per_node, per_leaf = 1, 1
    for n in nodes:
        g, leaf = pools.get(n.gpu_model, (n.gpus, 1))
        per_node = max(per_node, g, n.gpus)
        per_leaf = max(per_leaf, leaf)
    return per_node, per_leaf


@attrs.frozen(kw_only=True)
class JttedRow:
    """Topology deviation of one size bucket.

    ``node_ratio``: mean over the bucket's ``count`` jobs of actual nodes / optimal nodes.
    ``group_ratio``: mean over the ``group_count`` jobs with leaf-group information of actual
    groups / optimal groups (NaN if none). 1.0 is optimal; larger is worse. ``max_*`` are the
    worst ratios seen.
    """

    count: int
    node_ratio: float
    group_ratio: float
    group_count: int
    max_node_ratio: float
    max_group_ratio: float


def _per_record(v: int | Callable[[JobRecord], int], name: str) -> Callable[[JobRecord], int]:
    if callable(v):
        return v
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValidationError(name, v, "must be an int >= 1 or a callable(record) -> int")
    return lambda _r: v


def jtted(
    records: Iterable[JobRecord],
    nodes_per_leaf: int | Callable[[JobRecord], int],
    gpus_per_node: int | Callable[[JobRecord], int] = 8,
) -> dict[str, JttedRow]:
    """Job Training Time Estimation Distribution: per size bucket, the mean

    - NodeNum deviation ratio ``nodes_used / optimal_nodes`` (:func:`optimal_nodes`: the
      fewest nodes its GPUs and, when the record has them, its pods' shapes need), and
    - NodeNetGroupNum deviation ratio ``groups_used / ceil(optimal_nodes / nodes_per_leaf)``.

    Only jobs that started, request GPUs and have ``nodes_used > 0`` count; the group ratio
    uses those with ``groups_used > 0``. ``nodes_per_leaf`` and ``gpus_per_node`` are ints, or
    callables of the record for heterogeneous clusters (e.g. by the pool the job ran in).
    ``records`` that are not JobRecords are a :class:`~kant.errors.ValidationError`.
    """
    npl = _per_record(nodes_per_leaf, "nodes_per_leaf")
    gpn = _per_record(gpus_per_node, "gpus_per_node")
    node_r: dict[str, list[float]] = {}
    group_r: dict[str, list[float]] = {}
    for r in _records(records):
        if r.started_at is None or r.nodes_used <= 0 or r.gpus <= 0:
            continue
        b = r.bucket
        per_node = gpn(r)
        node_r.setdefault(b, []).append(r.nodes_used / optimal_nodes(r.gpus, per_node, r.pods))
        if r.groups_used > 0:
            opt = optimal_groups(r.gpus, per_node, npl(r), r.pods)
            group_r.setdefault(b, []).append(r.groups_used / opt)
    out: dict[str, JttedRow] = {}
    for b in BUCKETS:
        if b not in node_r:
            continue
        nr = node_r[b]
        gr = group_r.get(b, [])
        out[b] = JttedRow(
            count=len(nr),
            node_ratio=sum(nr) / len(nr),
            group_ratio=sum(gr) / len(gr) if gr else NAN,
            group_count=len(gr),
            max_node_ratio=max(nr),
            max_group_ratio=max(gr) if gr else NAN,
        )
    return out
