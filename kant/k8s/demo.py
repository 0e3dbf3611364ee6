"""``kant k8s demo`` and ``kant bench k8s``: kant driving a real API server.

Both start the local API server (:mod:`kant.k8s.testenv`), create fake GPU nodes, and run the
:class:`~kant.k8s.shim.Shim` in a thread; the demo also runs the fake kubelet and replays a
small workload, then prints the paper's metrics; the benchmark creates pods as fast as it can
and measures bindings through the API server."""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from kant.config import KantConfig, parse_config
from kant.cycle import CycleResult
from kant.errors import InvalidConfigError
from kant.k8s.client import Api
from kant.k8s.kubelet import FakeKubelet, create_node, node_object
from kant.k8s.settings import K8sSettings, parse_settings
from kant.k8s.shim import Shim
from kant.k8s.testenv import KubeTestEnv
from kant.metrics import JobRecord, gar, gfr, jtted, jwtd
from kant.model import is_int, is_number

DEMO_MIN_SPEED = 0.001
"""The slowest ``speed`` :func:`demo` takes: its jobs then arrive over about 20,000 s, and its
waits stay within what the clock can sleep (at 1e-9, ``time.sleep`` raised OverflowError)."""

LEAF_LABEL = "network.topology.nvidia.com/leaf"

log = logging.getLogger(__name__)


def create_nodes(api: Api, n: int, *, gpus: int = 8, per_leaf: int = 8, workers: int = 8,
                 settings: K8sSettings | None = None,
                 helpers: _Helpers | None = None) -> None:  # fmt: skip
    """``n`` fake H100 nodes, ``per_leaf`` per leaf switch, offering GPUs and NICs under the
    names ``settings`` gives (see :func:`~kant.k8s.kubelet.node_object`), on ``workers``
    threads (see :func:`run_all`, and for ``helpers``)."""

    def one(i: int) -> None:
        create_node(api, node_object(f"gpu-{i:04d}", gpus=gpus, model="H100", nics=gpus,
                                     labels={LEAF_LABEL: f"leaf-{i // per_leaf}"},
                                     settings=settings))  # fmt: skip

    run_all(one, n, workers, helpers=helpers)


def run_all(
    fn: Callable[[int], object], n: int, workers: int, *, helpers: _Helpers | None = None
) -> None:
    """``fn(i)`` for each ``i`` in ``range(n)``, on ``workers`` threads. If calls fail, the
    error raised is the one that came first in time (not the one of the lowest ``i``); the
    others are dropped. Whatever ends it early (a call's error, Ctrl-C, SIGTERM) ends it at
    once: at most one call per thread may still start (a thread that had looked just
    before), no more, and the calls running are not waited for (daemon threads, each ending with
    its call, its answer or error dropped): an API server too loaded to answer would hold the
    way out for a call's whole timeout, and a pool's own exit would even run every call
    still queued, thousands of API calls, minutes under load. The caller then stops the
    server (:class:`~kant.k8s.testenv.KubeTestEnv`), which ends the calls left; with
    ``helpers`` (those of the run whose server that is, :func:`_server`), its threads are
    among those the way out waits for once the server is stopped: a thread still in a call
    when the process exits may crash it (SIGSEGV: OpenSSL's exit handlers free what a TLS
    call still uses), where the exit code must say SIGTERM (143). ``workers`` not an int
    >= 1 raises :class:`~kant.errors.InvalidConfigError` (no call is made)."""
    if not is_int(workers) or workers < 1:
        raise InvalidConfigError("workers", workers, "must be an int >= 1")
    lock = threading.Lock()
    todo = iter(range(n))
    errors: list[BaseException] = []
    over = threading.Event()  # (an error, or the caller gave up: take no more)

    def work() -> None:
        while not over.is_set():
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                fn(i)
            except BaseException as e:  # (the first one is raised by the caller)
                with lock:
                    errors.append(e)
                over.set()
                return

    threads = [
        threading.Thread(target=work, daemon=True, name=f"kant-run-all-{k}")
        for k in range(min(workers, n))
    ]
    try:
        for t in threads:
            if helpers is not None:
                helpers.add(over.set, t)
            t.start()
        for t in threads:
            while t.is_alive() and not over.is_set():
                # (a timeout: the main thread looks at its signals at least this often, even
                # one the system delivered to a worker)
                t.join(0.1)
    finally:
        over.set()
    if errors:
        raise errors[0]


def pod_body(
    ns: str,
    name: str,
    gpus: int,
    *,
    group: str | None = None,
    runtime: float | None = None,
    tenant: str | None = None,
    settings: K8sSettings | None = None,
) -> dict[str, Any]:
    """A pod for kant asking ``gpus`` GPUs (and as many NICs), under the names ``settings``
    gives (``schedulerName``, ``gpuResource``, ``nicResource``; default: the defaults)."""
    s = settings if settings is not None else K8sSettings()
    req = {s.gpu_resource: str(gpus), s.nic_resource: str(gpus)}
    labels: dict[str, str] = {}
    if group:
        labels["kueue.x-k8s.io/pod-group-name"] = group
    if tenant:
        labels["kant.io/queue"] = tenant
    ann: dict[str, str] = {}
    if runtime is not None:
        ann["kant.io/runtime-seconds"] = f"{runtime:g}"
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": ann},
        "spec": {"schedulerName": s.scheduler_name,
                 "containers": [{"name": "c", "image": "x",
                                 "resources": {"requests": req, "limits": req}}]},
    }  # fmt: skip


class _Helpers:
    """The threads a bench or demo runs beside its own (shims, the fake kubelet), each with
    the function that tells it to stop. :meth:`end` stops them and waits for them, for up
    to 30 s at a phase's normal end; a run cut short (an error, Ctrl-C, SIGTERM) waits
    :data:`_ABANDON_SECONDS` for them, stops the API server under those left, then waits
    as long again (with no server, what they have left to do fails at once): a shim's
    bindings queued to a server too loaded to answer would hold the way out for minutes."""

    def __init__(self) -> None:
        self._running: list[tuple[Callable[[], None], threading.Thread]] = []
        # set once the run is cut short: its shims log what fails from then on at debug
        # level (the server is stopped under them); at a normal end they warn as ever
        self.abandoned = threading.Event()

    def add(self, stop: Callable[[], None], thread: threading.Thread) -> None:
        self._running.append((stop, thread))

    def end(self, wait: float) -> None:
        """Tell each to stop, then wait up to ``wait`` seconds in all for them to end. A
        thread never started (a signal, or a failing ``Thread.start()``, between :meth:`add`
        and its start) is told to stop and left: there is nothing to wait for."""
        for stop, _ in self._running:
            stop()
        # (a thread's ident is set once it started)
        self._running = [(stop, t) for stop, t in self._running if t.ident is not None]
        deadline = time.monotonic() + wait
        for _, t in self._running:
            t.join(max(0.0, deadline - time.monotonic()))
        self._running = [(stop, t) for stop, t in self._running if t.is_alive()]

    def start_shim(self, api: Api, config: KantConfig, **kw: Any) -> Shim:
        """A :class:`~kant.k8s.shim.Shim` running in a thread, once it listed the cluster."""
        # (a run cut short stops the API server under it: what fails then is no news)
        shim = Shim(api, config, quiet=self.abandoned, **kw)
        stop, ready = threading.Event(), threading.Event()

        def run() -> None:
            try:
                shim.run(stop, ready=ready)
            except Exception:
                if not self.abandoned.is_set():
                    raise
                # (a run cut short: the API server was stopped under it)
                log.debug("the shim ended with its API server stopped", exc_info=True)

        t = threading.Thread(target=run, daemon=True, name="kant-shim")
        self.add(stop.set, t)
        t.start()
        if not ready.wait(60):
            raise RuntimeError("the shim did not start")
        return shim


_ABANDON_SECONDS = 2.0
"""How long a bench or demo cut short waits for its helper threads, before and after it
stops the API server (see :class:`_Helpers`)."""


@contextlib.contextmanager
def _server(helpers: _Helpers) -> Iterator[KubeTestEnv]:
    """The local API server (:class:`~kant.k8s.testenv.KubeTestEnv`) for a run whose helper
    threads are ``helpers``: whatever ends the run early (an error, Ctrl-C, SIGTERM) gives
    them :data:`_ABANDON_SECONDS` to end, kills the server and etcd at once, then waits as
    long again for those left; none of them is waited for longer."""
    try:
        with KubeTestEnv() as env:
            try:
                yield env
            except BaseException:
                helpers.abandoned.set()
                helpers.end(_ABANDON_SECONDS)
                raise
    finally:
        helpers.end(_ABANDON_SECONDS)


# --------------------------------------------------------------------------- benchmark


def bench_k8s(*, pods: int = 1000, nodes: int = 500, pod_gpus: int = 2, creators: int = 8,
              config: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Two phases on ``nodes`` fake 8-GPU nodes, each with ``pods`` pods of ``pod_gpus`` GPUs:

    - *stream*: the shim runs while ``creators`` threads create the pods; pods bound per second
      (bindings / time from the first creation to the last binding answered) and the p50 / p99
      latency from a pod's creation (its create call answered) to its binding (its binding
      call answered). The rate is capped by how fast the pods can be created;
    - *backlog*: the pods are created first, then a fresh shim starts; pods bound per second
      from its start (list, first cycle, bindings) to the last binding answered.
    """
    for name, value in (("pods", pods), ("nodes", nodes), ("creators", creators)):
        if type(value) is not int or value < 1:
            raise InvalidConfigError(name, value, "must be an int >= 1")
    if type(pod_gpus) is not int or not 1 <= pod_gpus <= 8:
        raise InvalidConfigError("pod_gpus", pod_gpus, "must be an int in 1..8 (8-GPU nodes)")
    room = nodes * (8 // pod_gpus)
    if pods > room:  # (each phase waits for every pod to be bound)
        raise InvalidConfigError(
            "pods", pods, f"{nodes} 8-GPU nodes hold at most {room} pods of {pod_gpus} GPUs"
        )
    raw = dict(config or {})
    k8s = dict(raw.get("kubernetes") or {})
    k8s.setdefault("debounceSeconds", 0.2)
    raw["kubernetes"] = k8s
    cfg = parse_config(raw)
    settings = parse_settings(cfg.kubernetes, source=cfg.source)  # (before the server starts)
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    lock = threading.Lock()

    def on_bound(key: str, t: float) -> None:
        with lock:
            bound[key] = t

    def make(ns: str, i: int) -> None:
        name = f"p-{i:05d}"
        api.post(f"/api/v1/namespaces/{ns}/pods", pod_body(ns, name, pod_gpus, settings=settings))
        with lock:
            created[f"{ns}/{name}"] = time.time()

    def wait_bound(n: int) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with lock:
                if len(bound) >= n:
                    return
            time.sleep(0.02)

    helpers = _Helpers()
    with _server(helpers) as env:
        api = env.api
        for ns in ("stream", "backlog"):
            api.post("/api/v1/namespaces", {"metadata": {"name": ns}})
        create_nodes(api, nodes, settings=settings, helpers=helpers)
        # stream
        shim = helpers.start_shim(api, cfg, on_bound=on_bound)
        t0 = time.time()
        run_all(lambda i: make("stream", i), pods, creators, helpers=helpers)
        t_created = time.time()
        wait_bound(pods)
        helpers.end(30)
        with lock:
            s_bound = len(bound)
            lat = [bound[k] - created[k] for k in bound if k in created]
            s_last = max(bound.values()) if bound else t0
            bound.clear()
        stream_cycles = shim.cycles
        s_api = _bound_in_api(api, "stream")
        api.delete("/api/v1/namespaces/stream/pods", {"gracePeriodSeconds": 0})
        while api.get("/api/v1/namespaces/stream/pods").get("items"):
            time.sleep(0.1)
        # backlog
        run_all(lambda i: make("backlog", i), pods, creators, helpers=helpers)
        t1 = time.time()
        shim = helpers.start_shim(api, cfg, on_bound=on_bound)
        wait_bound(pods)
        helpers.end(30)
        with lock:
            b_bound = len(bound)
            b_last = max(bound.values()) if bound else t1
        b_api = _bound_in_api(api, "backlog")

    def ms(q: float) -> float | None:
        return round(float(np.percentile(lat, q)) * 1000, 1) if lat else None

    return {
        "pods": pods,
        "nodes": nodes,
        "pod_gpus": pod_gpus,
        "stream_bound": s_bound,
        "stream_bound_in_api": s_api,
        "stream_create_seconds": round(t_created - t0, 3),
        "stream_pods_bound_per_second": round(s_bound / (s_last - t0), 1) if s_bound else 0.0,
        "stream_p50_create_to_bind_ms": ms(50),
        "stream_p99_create_to_bind_ms": ms(99),
        "stream_cycles": stream_cycles,
        "backlog_bound": b_bound,
        "backlog_bound_in_api": b_api,
        "backlog_pods_bound_per_second": round(b_bound / (b_last - t1), 1) if b_bound else 0.0,
        "backlog_seconds": round(b_last - t1, 3),
        "backlog_cycles": shim.cycles,
    }


def _bound_in_api(api: Api, ns: str) -> int:
    items = api.get(f"/api/v1/namespaces/{ns}/pods").get("items", ())
    return sum(1 for p in items if (p.get("spec") or {}).get("nodeName"))


# --------------------------------------------------------------------------- demo


def demo(*, nodes: int = 16, jobs: int = 40, seed: int = 0, speed: float = 1.0,
         config: KantConfig | Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Replay ``jobs`` random jobs (gangs of 1-4 pods of 1-8 GPUs, 2-12 s each, arriving over
    about 20 s / ``speed``) on ``nodes`` fake 8-GPU nodes through the real API server, and
    return the paper's metrics: GAR (mean, peak), SOR (GPU time allocated / available from the
    first arrival to the last finish), GFR (mean), JWTD and JTTED per size bucket. ``config``
    is the kant config (a :class:`~kant.config.KantConfig`, as ``load_config`` reads a file,
    or a raw mapping). A ``speed`` that is not a finite number >= :data:`DEMO_MIN_SPEED`
    (0.001), or ``nodes`` or ``jobs`` not an int >= 1, raises
    :class:`~kant.errors.InvalidConfigError`, and a bad config (its ``kubernetes:`` section
    among the rest) :class:`~kant.errors.InvalidConfigFileError` naming its source, before
    anything starts."""
    if not (is_number(speed) and DEMO_MIN_SPEED <= speed < math.inf):
        why = f"must be a finite number >= {DEMO_MIN_SPEED:g} (the demo lasts about 20 s / speed)"
        raise InvalidConfigError("speed", speed, why)
    for name, n in (("nodes", nodes), ("jobs", jobs)):
        if not (is_int(n) and n >= 1):
            raise InvalidConfigError(name, n, "must be an int >= 1")
    rng = random.Random(seed)
    cfg = config if isinstance(config, KantConfig) else parse_config(dict(config or {}))
    settings = parse_settings(cfg.kubernetes, source=cfg.source)  # (before the server starts)
    workload = []
    t = 0.0
    for j in range(jobs):
        t += rng.expovariate(jobs / 20.0)
        size = rng.choice([1, 1, 2, 4, 8])
        replicas = rng.choice([1, 1, 2, 4]) if size == 8 else 1
        workload.append((t / speed, f"job-{j:03d}", replicas, size, rng.uniform(2, 12) / speed))
    samples: list[tuple[float, float, float]] = []
    placed: dict[str, tuple[float, set[str], set[str]]] = {}

    def on_cycle(shim: Shim, result: CycleResult) -> None:
        now = time.time()
        samples.append((now, gar(shim.scheduler.cluster), gfr(shim.scheduler.cluster).ratio))
        for b in result.bindings:
            base = b.pod.job.split("#")[0].split(".", 1)[-1].lstrip(".")
            spec = shim.scheduler.cluster.node(b.node) if b.node in shim.scheduler.cluster else None
            _, ns_, ls_ = placed.setdefault(base, (now, set(), set()))
            ns_.add(b.node)
            ls_.add(spec.leaf if spec is not None and spec.leaf else b.node)

    submitted: dict[str, float] = {}
    helpers = _Helpers()
    with _server(helpers) as env:
        api = env.api
        api.post("/api/v1/namespaces", {"metadata": {"name": "demo"}})
        create_nodes(api, nodes, per_leaf=4, settings=settings, helpers=helpers)
        kubelet = FakeKubelet(api)
        helpers.add(kubelet.stop_soon, kubelet)
        kubelet.start()
        helpers.start_shim(api, cfg, on_cycle=on_cycle)
        start = time.time()
        try:
            for at, name, replicas, size, runtime in workload:
                delay = start + at - time.time()
                if delay > 0:
                    time.sleep(delay)
                for r in range(replicas):
                    group = name if replicas > 1 else None
                    if group:
                        body = pod_body(
                            "demo",
                            f"{name}-{r}",
                            size,
                            group=group,
                            runtime=runtime,
                            settings=settings,
                        )
                        body["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = (
                            str(replicas)
                        )
                    else:
                        body = pod_body("demo", name, size, runtime=runtime, settings=settings)
                    api.post("/api/v1/namespaces/demo/pods", body)
                submitted[name] = time.time()
            total = sum(r for _, _, r, _, _ in workload)
            deadline = time.monotonic() + 120 + 40 / speed
            while kubelet.finished < total and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            end = time.time()
        helpers.end(30)
    records = []
    for _, name, replicas, size, _ in workload:
        sub = submitted.get(name)
        if sub is None:
            continue
        p = placed.get(name)
        started = max(sub, p[0]) if p else None
        records.append(JobRecord(job_id=name, gpus=float(size * replicas), gang=True,
                                 pods=((int(replicas), int(size), 0),), submitted_at=sub,
                                 started_at=started,
                                 nodes_used=len(p[1]) if p else 0,
                                 groups_used=len(p[2]) if p else 0))  # fmt: skip
    return {
        "nodes": nodes,
        "jobs": len(records),
        "pods_finished": kubelet.finished,
        "wall_seconds": round(end - start, 1),
        **_occupancy(samples, start, end),
        "jwtd": {
            b: {"count": r.count, "p50_s": _r(r.p50), "p95_s": _r(r.p95), "max_s": _r(r.max)}
            for b, r in jwtd(records).items()
        },
        "jtted": {
            b: {"node_ratio": _r(r.node_ratio), "group_ratio": _r(r.group_ratio)}
            for b, r in jtted(records, nodes_per_leaf=4).items()
        },
    }


def _r(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(v, 3)


def _occupancy(
    samples: list[tuple[float, float, float]], start: float, end: float
) -> dict[str, Any]:
    if not samples:
        return {"gar_mean": 0.0, "gar_peak": 0.0, "sor": 0.0, "gfr_mean": 0.0}
    ts = [s[0] for s in samples] + [end]
    area = sum(samples[i][1] * (ts[i + 1] - ts[i]) for i in range(len(samples)))
    window = max(end - start, 1e-9)
    return {
        "gar_mean": round(float(np.mean([s[1] for s in samples])), 3),
        "gar_peak": round(max(s[1] for s in samples), 3),
        "sor": round(area / window, 3),
        "gfr_mean": round(float(np.mean([s[2] for s in samples])), 3),
    }
