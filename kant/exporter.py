"""A Prometheus exporter for a :class:`~kant.scheduler.Scheduler` (``pip install
'kant[metrics]'``; ``docs/metrics.md``, "Prometheus").

The orchestrator calls :meth:`MetricsExporter.observe` after each cycle it applied (and, if
it likes, after events); the exporter reads the scheduler there, in the orchestrator's
thread, and keeps the figures. A scrape (:meth:`MetricsExporter.serve`'s HTTP endpoint, or
:meth:`MetricsExporter.exposition`) only reads what the last ``observe`` kept, so it never
sees the scheduler half-way through a change; an ``observe`` computes everything first and
then applies it (counters, histograms and gauges) under one lock that a scrape takes too, so
a scrape sees all of an ``observe`` or none of it.

>>> from kant import Scheduler
>>> from kant.testing import ClusterBuilder, job
>>> s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
>>> ex = MetricsExporter(s)
>>> s.submit(job("a", gpus=8), now=0)
>>> ex.observe(now=1, result=s.step(now=1))
>>> b"kant_gpu_allocation_ratio 0.5" in ex.exposition()
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

from kant.cycle import CycleResult, check_result
from kant.errors import DuplicateError, InvalidConfigError, InvalidTimeError, ValidationError
from kant.metrics import (
    BUCKETS,
    gar,
    gfr,
    optimal_groups,
    optimal_nodes,
    optimum_shape,
    size_bucket,
)
from kant.metrics.jobs import pool_shapes
from kant.metrics.records import FirstNodes, leaf_groups, placed_nodes, pod_shapes
from kant.model import MILLI, Job, NodeSpec, ReasonCode, finite_time, is_int, is_name
from kant.queueing import JobPhase
from kant.scheduler import Scheduler

__all__ = ["CYCLE_BUCKETS", "WAIT_BUCKETS", "MetricsExporter"]

WAIT_BUCKETS: Final = (1, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600,
                       86400, 3 * 86400, 7 * 86400)  # fmt: skip
"""Upper bounds (seconds) of the job wait histogram: a second to a week."""
CYCLE_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Upper bounds (seconds) of the cycle latency histogram."""
_GAUGES: Final = ("kant_gpu_allocation_ratio", "kant_scheduling_occupation_ratio",
                  "kant_gpu_node_fragmentation_ratio", "kant_gpu_node_fragmentation_degree",
                  "kant_cluster_gpus", "kant_jtted_node_ratio", "kant_jtted_group_ratio",
                  "kant_quota_gpus", "kant_quota_usage_gpus", "kant_pending_jobs",
                  "kant_jobs")  # fmt: skip
"""The gauge families every :meth:`MetricsExporter.observe` keeps, by name."""


class MetricsExporter:
    """Publishes a scheduler's figures in Prometheus' exposition format, in names that follow
    its conventions (base units, ``_ratio``, ``_seconds``, ``_total``):

    ``kant_gpu_allocation_ratio``            GAR now
    ``kant_scheduling_occupation_ratio``     SOR since the first observe (GPU-seconds held /
                                             available, integrated between observes)
    ``kant_gpu_node_fragmentation_ratio``    GFR now; ``..._degree`` weighted by what is left
    ``kant_job_wait_seconds``                histogram of waits before start, by ``size_bucket``
    ``kant_jtted_node_ratio``                mean nodes used / optimal of started jobs, by
                                             ``size_bucket``; ``kant_jtted_group_ratio`` leaf
                                             groups used / optimal
    ``kant_quota_gpus``                      quota per ``tenant``, ``gpu_model`` and ``limit``
                                             (``nominal``, ``borrowing``, ``lending``)
    ``kant_quota_usage_gpus``                GPUs charged per ``tenant`` and ``gpu_model``
    ``kant_pending_jobs``                    jobs waiting, by ``reason`` (a ReasonCode)
    ``kant_jobs``                            jobs by ``phase``
    ``kant_cluster_gpus``                    GPUs of the cluster
    ``kant_cycle_duration_seconds``          histogram of cycle latency
    ``kant_cycles_total``                    cycles observed
    ``kant_cycles_reused_total``             of those, cycles answered with the last quiet
                                             cycle's result, not run (``CycleStats.reused``)

    ``registry``: a ``prometheus_client.CollectorRegistry`` to register into (default: a new
    one of its own, so two exporters never clash); :class:`~kant.errors.DuplicateError`,
    nothing registered, when it holds one of these names already. A ``scheduler`` that is
    not a :class:`~kant.scheduler.Scheduler`, or a ``registry`` without ``register`` and
    ``unregister``, is a :class:`~kant.errors.ValidationError` naming it.
    """

    def __init__(self, scheduler: Scheduler, *, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        if not isinstance(scheduler, Scheduler):
            raise ValidationError("scheduler", scheduler, "must be a kant.scheduler.Scheduler")
        if registry is not None and not all(
            callable(getattr(registry, m, None)) for m in ("register", "unregister")
        ):
            raise ValidationError(
                "registry", registry, "must be a prometheus_client.CollectorRegistry"
            )
        self.scheduler = scheduler
        self.registry = registry if registry is not None else CollectorRegistry()
        # the results observed of the latest cycle time (a result given again is counted
        # once; one of an earlier cycle is refused)
        self._last_results: list[CycleResult] = []
        self._lock = threading.Lock()
        self._families: list[Any] = []
        self._t: float | None = None
        self._held_s = 0.0
        self._total_s = 0.0
        self._last_held = 0.0
        self._last_total = 0.0
        # (job, submission number) of the jobs already observed once started: a job counts
        # once, at its first start (kept for the jobs still in the queue's books)
        self._started: set[tuple[str, int]] = set()
        # of those, the jobs whose JTTED is not counted yet, until every pod has been bound
        # (a pod-level job's pods start in several cycles): the node each pod was first bound
        # to and whether it holds GPUs there (JTTED counts the GPU pods' nodes), and that
        # node's details as they were then (it may be lost since, or added again under its
        # name in another leaf or with another model)
        self._placing: dict[tuple[str, int], tuple[FirstNodes, dict[str, NodeSpec]]] = {}
        # GPU model -> (GPUs per node, nodes per leaf) of the cluster's pools, as of the
        # cluster's membership_version
        self._shapes: dict[str | None, tuple[int, int]] = {}
        self._shapes_version = -1
        self._jtted: dict[str, list[float]] = {}  # bucket -> [node sum, n, group sum, n]
        self._wait = Histogram(
            "kant_job_wait_seconds",
            "Seconds a job waited before it started, by job size bucket (GPUs).",
            ["size_bucket"],
            buckets=WAIT_BUCKETS,
            registry=None,
        )
        self._cycle = Histogram(
            "kant_cycle_duration_seconds",
            "Wall-clock seconds one scheduling cycle took.",
            buckets=CYCLE_BUCKETS,
            registry=None,
        )
        self._cycles = Counter("kant_cycles", "Scheduling cycles observed.", registry=None)
        self._reused = Counter(
            "kant_cycles_reused",
            "Cycles answered with the last quiet cycle's result, without being run.",
            registry=None,
        )
        # (one collector for every family, collected under the lock observe applies its
        # changes under: a scrape sees all of an observe or none of it)
        self._register(
            _Snapshot(self._collect, (self._wait, self._cycle, self._cycles, self._reused))
        )

    def _register(self, collector: Any) -> None:
        """Register ``collector`` into the registry: DuplicateError, nothing registered,
        when it holds one of its names already (another exporter's, or the application's)."""
        try:
            self.registry.register(collector)
        except ValueError as e:  # (prometheus_client's 'Duplicated timeseries')
            raise DuplicateError(
                f"MetricsExporter: {e} (give each exporter a registry of its own)"
            ) from None

    # ----------------------------------------------------------------- observing

    def observe(self, now: float, result: CycleResult | None = None) -> None:
        """Read the scheduler at ``now`` (after ``result``, a cycle it applied, if any): cycle
        latency, the waits and topology ratios of jobs that started, and every gauge.
        Before anything is read: :class:`~kant.errors.InvalidTimeError` for a ``now`` that
        is not a finite number (it would stop the SOR's clock for good) or is earlier than
        the last observe's (time cannot run backwards, as in the scheduler);
        :class:`~kant.errors.ValidationError` for a ``result`` that is not a
        :class:`~kant.cycle.CycleResult`, that another scheduler computed (another queue or
        cluster), or that is of a cycle before the result observed last (stale), and
        :class:`~kant.errors.InvalidTimeError` for a ``now`` before ``result``'s cycle. A result
        of the latest cycle time observed already, given again, is not counted again (an
        orchestrator retrying). Everything is read first; the counters, histograms and
        gauges are then changed at once under the lock a scrape takes."""
        now = finite_time(now, "MetricsExporter.observe")
        if self._t is not None and now < self._t:
            raise InvalidTimeError(
                "now", now,
                f"MetricsExporter.observe at {now:g} is before {self._t:g}, the time of the "
                "last observe; time cannot run backwards",
            )  # fmt: skip
        s = self.scheduler
        if result is not None:
            self._check_result(result)
            if now < result.now:
                raise InvalidTimeError(
                    "now", now,
                    f"MetricsExporter.observe at {now:g} is before the cycle of its result "
                    f"(at {result.now:g}); observe a result at its time or later",
                )  # fmt: skip
            if any(result is r for r in self._last_results):
                result = None  # (observed again: its cycle and starts are counted already)
        cluster = s.cluster
        total = cluster.total_gpus()
        held = cluster.allocated_milli() / MILLI
        waits: list[tuple[str, float]] = []
        if result is not None:
            waits = self._record_starts(result)
            if self._last_results and self._last_results[0].now != result.now:
                self._last_results.clear()
            self._last_results.append(result)
        if self._t is not None and now > self._t:
            dt = now - self._t
            self._held_s += self._last_held * dt
            self._total_s += self._last_total * dt
        self._t = now
        self._last_held = held
        self._last_total = float(total)
        families = self._gauges()
        with self._lock:  # (what a scrape reads, changed at once)
            if result is not None:
                self._cycle.observe(result.stats.elapsed_ms / 1000.0)
                self._cycles.inc()
                if result.stats.reused:
                    self._reused.inc()
            for bucket, wait in waits:
                self._wait.labels(size_bucket=bucket).observe(wait)
            self._families = families

    def _check_result(self, result: object) -> None:
        """ValidationError, naming ``result``, unless it is a cycle result of this
        scheduler, not of a cycle before the one observed last."""
        result = check_result(result, self.scheduler.queue, self.scheduler.cluster)
        last = self._last_results[-1] if self._last_results else None
        if last is not None and result.now < last.now:
            raise ValidationError(
                "result",
                f"the result of the cycle at {result.now:g}",
                f"is older than the last one observed (the cycle at {last.now:g})",
            )

    def _record_starts(self, result: CycleResult) -> list[tuple[str, float]]:
        """Count the JTTED of the jobs of ``result`` whose every pod is now bound; returns
        (size bucket, wait) of each job that started for the first time, for the wait
        histogram."""
        s = self.scheduler
        waits: list[tuple[str, float]] = []
        if len(self._started) > 2 * len(s.queue) + 1024:  # (forget the jobs forgotten)
            self._started = {k for k in self._started if _seq(s, k[0]) == k[1]}
            self._placing = {k: v for k, v in self._placing.items() if k in self._started}
        for jid in result.placed:
            e = s.queue.get(jid)
            if e is None:
                continue  # (it ended and the queue forgot it since: its start is gone)
            st = s.status(jid)
            if st.started_at is None:
                continue
            key = (jid, e.seq)
            job = e.job
            if key not in self._started:  # (a job started again after a requeue is counted
                self._started.add(key)  # at its first start)
                # the wait of JWTD: from its submission to its first start
                waits.append(
                    (size_bucket(job.gpu_units), max(0.0, st.started_at - st.submitted_at))
                )
                if job.total_milli > 0:
                    self._placing[key] = ({}, {})
            placing = self._placing.get(key)
            if placing is None:
                continue  # (counted already, or no GPU job)
            first, specs = placing
            for b in st.bindings:
                if b.pod not in first and b.node not in specs:
                    specs[b.node] = s.cluster.node(b.node)
            # JTTED counts the node each pod was first bound to, once every pod was bound
            nodes = placed_nodes(first, st.bindings, job.num_pods)
            if nodes is not None:
                del self._placing[key]
                self._count_jtted(job, nodes, specs)
        return waits

    def _count_jtted(self, job: Job, nodes: set[str], specs: dict[str, NodeSpec]) -> None:
        """Count ``job``'s JTTED, placed on ``nodes`` (``specs``: their details when its
        pods were bound), against the optimum of the pool it ran in (its largest node, its
        largest leaf: the simulator's)."""
        cluster = self.scheduler.cluster
        if self._shapes_version != cluster.membership_version:  # (once per node change)
            self._shapes = pool_shapes(cluster.nodes())
            self._shapes_version = cluster.membership_version
        per_node, per_leaf = optimum_shape(self._shapes, (specs[n] for n in nodes))
        row = self._jtted.setdefault(size_bucket(job.gpu_units), [0.0, 0.0, 0.0, 0.0])
        shapes = pod_shapes(job)
        row[0] += len(nodes) / optimal_nodes(job.gpu_units, per_node, shapes)
        row[1] += 1
        groups = leaf_groups(nodes, lambda n: specs[n].leaf)
        if groups:
            row[2] += groups / optimal_groups(job.gpu_units, per_node, per_leaf, shapes)
            row[3] += 1

    def _gauges(self) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        s = self.scheduler
        cluster = s.cluster
        out: list[Any] = []

        def gauge(name: str, doc: str, value: float) -> None:
            out.append(GaugeMetricFamily(name, doc, value=value))

        gauge("kant_gpu_allocation_ratio", "GPUs held by pods / GPUs of the cluster (GAR).",
              gar(cluster))  # fmt: skip
        sor = self._held_s / self._total_s if self._total_s > 0 else 0.0
        gauge("kant_scheduling_occupation_ratio",
              "GPU-seconds held / available since the first observe (SOR).", sor)  # fmt: skip
        g = gfr(cluster)
        gauge("kant_gpu_node_fragmentation_ratio",
              "Share of GPU nodes partly allocated (GFR).", g.ratio)  # fmt: skip
        gauge("kant_gpu_node_fragmentation_degree",
              "GFR weighted by the share of each fragmented node left free.", g.degree)  # fmt: skip
        gauge("kant_cluster_gpus", "GPUs of the cluster.", float(cluster.total_gpus()))

        node_r = GaugeMetricFamily("kant_jtted_node_ratio",
                                   "Mean nodes used / optimal nodes of started jobs (JTTED).",
                                   labels=["size_bucket"])  # fmt: skip
        group_r = GaugeMetricFamily("kant_jtted_group_ratio",
                                    "Mean leaf groups used / optimal of started jobs (JTTED).",
                                    labels=["size_bucket"])  # fmt: skip
        for b in BUCKETS:
            row = self._jtted.get(b)
            if row is None:
                continue
            node_r.add_metric([b], row[0] / row[1])
            if row[3]:
                group_r.add_metric([b], row[2] / row[3])
        out += [node_r, group_r]

        quota = GaugeMetricFamily("kant_quota_gpus", "Quota per tenant and GPU model, in GPUs.",
                                  labels=["tenant", "gpu_model", "limit"])  # fmt: skip
        for (tenant, model), q in sorted(s.admitter.table.quotas.items()):
            quota.add_metric([tenant, model, "nominal"], q.nominal / MILLI)
            if q.borrowing_limit is not None:
                quota.add_metric([tenant, model, "borrowing"], q.borrowing_limit / MILLI)
            if q.lending_limit is not None:
                quota.add_metric([tenant, model, "lending"], q.lending_limit / MILLI)
        usage = GaugeMetricFamily("kant_quota_usage_gpus",
                                  "GPUs charged per tenant and GPU model.",
                                  labels=["tenant", "gpu_model"])  # fmt: skip
        # (every quota's usage, 0 when nothing is charged: a series that vanished instead
        # would leave usage / quota with no value)
        charged = dict.fromkeys(s.admitter.table.quotas, 0) | s.admitter.usage()
        for (tenant, model), milli in sorted(charged.items()):
            usage.add_metric([tenant, model or "none"], milli / MILLI)
        out += [quota, usage]

        pending = dict.fromkeys(("not_tried", *(c.value for c in ReasonCode)), 0)
        for e in s.queue.candidates():
            code = e.reason.code.value if e.reason is not None else "not_tried"
            pending[code] = pending.get(code, 0) + 1
        pj = GaugeMetricFamily("kant_pending_jobs", "Jobs with pods to place, by reason.",
                               labels=["reason"])  # fmt: skip
        for code, n in sorted(pending.items()):
            pj.add_metric([code], n)
        jobs = GaugeMetricFamily("kant_jobs", "Jobs by phase.", labels=["phase"])
        counts = s.queue.counts()
        for p in JobPhase:
            jobs.add_metric([p.value], counts[p.value])
        out += [pj, jobs]
        return out

    # ----------------------------------------------------------------- publishing

    def families(self) -> list[Any]:
        """The gauge families the last :meth:`observe` kept (thread-safe)."""
        with self._lock:
            return list(self._families)

    def _collect(self) -> list[Any]:
        """Every family, as the last :meth:`observe` left them (under the lock it changes
        them under)."""
        with self._lock:
            return [*self._wait.collect(), *self._cycle.collect(), *self._cycles.collect(),
                    *self._reused.collect(), *self._families]  # fmt: skip

    def exposition(self) -> bytes:
        """Everything in the text exposition format (what a scrape returns)."""
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))

    def serve(self, port: int = 9464, addr: str = "127.0.0.1") -> tuple[Any, Any]:
        """Serve ``/metrics`` over HTTP on ``addr:port`` (0: any free port) in a daemon
        thread; returns ``(server, thread)`` (``server.server_port`` is the port,
        ``server.shutdown()`` stops it). ``addr`` is a host name or IP address: loopback by
        default, ``"0.0.0.0"`` for every interface. :class:`~kant.errors.InvalidConfigError`
        for a port that is not an int in [0, 65535] or an ``addr`` that is not a non-empty
        string without surrounding spaces (``None`` would bind every interface, not
        loopback); an address that cannot be bound raises ``OSError``."""
        from prometheus_client import start_http_server

        if not is_int(port) or not 0 <= port <= 65535:
            raise InvalidConfigError("port", port, "must be an int in [0, 65535] (0: any free)")
        if not is_name(addr, slash=True):
            raise InvalidConfigError(
                "addr", addr,
                "must be a host name or IP address: a non-empty string without surrounding "
                "spaces ('127.0.0.1', loopback, by default; '0.0.0.0' for every interface)",
            )  # fmt: skip

        server, thread = start_http_server(port, addr=addr, registry=self.registry)
        return server, thread


class _Snapshot:
    """The collector of every family of a :class:`MetricsExporter`, as its last
    :meth:`~MetricsExporter.observe` left them."""

    def __init__(self, collect: Callable[[], list[Any]], counted: tuple[Any, ...]) -> None:
        self._collect = collect
        self._counted = counted  # (the exporter's counters and histograms)

    def collect(self) -> Iterator[Any]:
        yield from self._collect()

    def describe(self) -> list[Any]:
        """The families' names, registered once: a scrape restricted to some names
        (``/metrics?name[]=kant_jobs``) finds the collector by them, and the registry
        refuses another metric of one of these names."""
        from prometheus_client.core import GaugeMetricFamily

        return [*(f for c in self._counted for f in c.describe()),
                *(GaugeMetricFamily(name, "") for name in _GAUGES)]  # fmt: skip


def _seq(s: Scheduler, job_id: str) -> int | None:
    """The submission number of job ``job_id`` in the queue's books (None: not there)."""
    e = s.queue.get(job_id)
    return None if e is None else e.seq
