"""The Prometheus exporter, scraped over HTTP in-process and parsed with prometheus_client's
own parser."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kant import Quota, Scheduler
from kant.admission import Admitter
from kant.errors import InvalidTimeError, ValidationError
from kant.exporter import MetricsExporter
from kant.testing import ClusterBuilder, job


def _scrape(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    for s in fams[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no {sample} {labels} in {fams[family].samples}")


def test_a_scrape_of_the_endpoint_publishes_every_figure_in_prometheus_names() -> None:
    cluster = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build()
    quotas = [Quota.gpus("team-a", "H100", 16, borrowing_limit=8), Quota.gpus("team-b", "H100", 16)]
    s = Scheduler(cluster, admitter=Admitter(quotas))
    ex = MetricsExporter(s)
    server, thread = ex.serve(port=0)
    try:
        s.submit(job("a", gpus=8, replicas=2, tenant="team-a"), now=0)
        s.submit(job("b", gpus=4, tenant="team-b"), now=0)
        s.submit(job("huge", gpus=8, replicas=3, tenant="team-b"), now=0)  # over b's quota
        ex.observe(now=0)
        r = s.step(now=10)
        ex.observe(now=10, result=r)
        ex.observe(now=110)
        fams = _scrape(server.server_port)
    finally:
        server.shutdown()
        thread.join(timeout=5)

    # 20 of 32 GPUs held: GAR 0.625; held from t=10 to t=110 of 0..110: SOR 0.625 * 100/110
    assert _value(fams, "kant_gpu_allocation_ratio", "kant_gpu_allocation_ratio") == 0.625
    assert _value(
        fams, "kant_scheduling_occupation_ratio", "kant_scheduling_occupation_ratio"
    ) == pytest.approx(0.625 * 100 / 110)
    # "b" half-fills a node: 1 fragmented node of 4
    assert (
        _value(fams, "kant_gpu_node_fragmentation_ratio", "kant_gpu_node_fragmentation_ratio")
        == 0.25
    )
    assert _value(fams, "kant_cluster_gpus", "kant_cluster_gpus") == 32
    # waits: both started jobs waited 10 s, in their size buckets
    assert (
        _value(fams, "kant_job_wait_seconds", "kant_job_wait_seconds_count", size_bucket="9-64")
        == 1
    )
    assert (
        _value(fams, "kant_job_wait_seconds", "kant_job_wait_seconds_sum", size_bucket="2-8") == 10
    )
    assert _value(fams, "kant_job_wait_seconds", "kant_job_wait_seconds_bucket",
                  size_bucket="2-8", le="10.0") == 1  # fmt: skip
    assert _value(fams, "kant_jtted_node_ratio", "kant_jtted_node_ratio", size_bucket="9-64") == 1.0
    assert _value(fams, "kant_quota_gpus", "kant_quota_gpus", tenant="team-a",
                  gpu_model="H100", limit="nominal") == 16  # fmt: skip
    assert _value(fams, "kant_quota_gpus", "kant_quota_gpus", tenant="team-a",
                  gpu_model="H100", limit="borrowing") == 8  # fmt: skip
    assert _value(fams, "kant_quota_usage_gpus", "kant_quota_usage_gpus", tenant="team-a",
                  gpu_model="H100") == 16  # fmt: skip
    assert _value(fams, "kant_pending_jobs", "kant_pending_jobs", reason="quota_exceeded") == 1
    assert _value(fams, "kant_jobs", "kant_jobs", phase="running") == 2
    assert _value(fams, "kant_cycle_duration_seconds", "kant_cycle_duration_seconds_count") == 1
    assert _value(fams, "kant_cycles", "kant_cycles_total") == 1
    assert _value(fams, "kant_cycles_reused", "kant_cycles_reused_total") == 0
    assert fams["kant_job_wait_seconds"].type == "histogram"
    assert fams["kant_cycles"].type == "counter"


def test_two_exporters_never_clash_and_a_job_start_is_counted_once() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    a, b = MetricsExporter(s), MetricsExporter(s)
    s.submit(job("x", gpus=8), now=0)
    r = s.step(now=5)
    a.observe(5, r)
    a.observe(6, r)  # the same result again: the start and the cycle are already counted
    b.observe(5, r)
    for ex in (a, b):
        fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
        assert (
            _value(fams, "kant_job_wait_seconds", "kant_job_wait_seconds_count", size_bucket="2-8")
            == 1
        )
        assert _value(fams, "kant_cycles", "kant_cycles_total") == 1


def test_an_exporter_refuses_a_wrong_scheduler_registry_result_or_time_and_keeps_its_figures() -> (
    None
):
    with pytest.raises(ValidationError, match="scheduler"):
        MetricsExporter(None)  # type: ignore[arg-type]
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    with pytest.raises(ValidationError, match="registry"):
        MetricsExporter(s, registry="x")
    ex = MetricsExporter(s)
    s.submit(job("x", gpus=8), now=0)
    early = s.step(now=5)
    late = s.step(now=9)
    ex.observe(9, late)
    before = ex.exposition()
    other = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    with pytest.raises(ValidationError, match="must be a kant"):
        ex.observe(10, "x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="another scheduler"):
        ex.observe(10, other.step(now=10))
    with pytest.raises(ValidationError, match="older than the last one observed"):
        ex.observe(10, early)
    with pytest.raises(InvalidTimeError, match="before 9"):
        ex.observe(8)
    assert ex.exposition() == before  # nothing read, nothing counted


def test_a_result_observed_again_after_another_of_the_same_time_counts_once() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    ex = MetricsExporter(s)
    s.submit(job("x", gpus=8), now=0)
    r1, r2 = s.step(now=5), s.step(now=5)
    for r in (r1, r2, r1, r2):
        ex.observe(5, r)
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    assert _value(fams, "kant_cycles", "kant_cycles_total") == 2


def test_a_cycle_answered_again_is_counted_as_reused() -> None:
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    ex = MetricsExporter(s)
    s.submit(job("x", gpus=8), now=0)
    s.submit(job("y", gpus=8), now=0)
    for t in (1, 2, 3, 4):  # x starts at 1; at 2 nothing is decided (run, kept); 3, 4 reuse it
        ex.observe(t, s.step(now=t))
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    assert _value(fams, "kant_cycles", "kant_cycles_total") == 4
    assert _value(fams, "kant_cycles_reused", "kant_cycles_reused_total") == 2


def test_a_job_started_again_after_a_requeue_counts_once_with_its_wait_from_submission() -> None:
    """JWTD's wait is from the submission to the first start: a job started at 10, requeued
    when its node is lost at 20 and started again at 100 is one wait of 10, not 10 and 80."""
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    ex = MetricsExporter(s)
    s.submit(job("a", gpus=8), now=0)
    ex.observe(10, s.step(now=10))
    s.node_lost("lf0-n0", now=20)
    ex.observe(20)
    s.node_recovered("lf0-n0", now=90)
    ex.observe(100, s.step(now=100))
    text = ex.exposition().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    wait = "kant_job_wait_seconds"
    assert _value(fams, wait, f"{wait}_count", size_bucket="2-8") == 1
    assert _value(fams, wait, f"{wait}_sum", size_bucket="2-8") == 10


def test_a_scrape_restricted_to_some_names_returns_those_gauges() -> None:
    # (Prometheus' name[] filter, as the endpoint serves it: the gauges' collector declared
    # no names, so a restricted scrape returned none of them)
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    ex = MetricsExporter(s)
    s.submit(job("a", gpus=8), now=0)
    ex.observe(now=1, result=s.step(now=1))
    server, thread = ex.serve(port=0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        query = "?name[]=kant_gpu_allocation_ratio&name[]=kant_jobs&name[]=kant_cycles_total"
        with urllib.request.urlopen(url + query, timeout=10) as r:
            fams = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert set(fams) == {"kant_gpu_allocation_ratio", "kant_jobs", "kant_cycles"}
    assert _value(fams, "kant_gpu_allocation_ratio", "kant_gpu_allocation_ratio") == 0.5
    assert _value(fams, "kant_jobs", "kant_jobs", phase="running") == 1


def test_every_gauge_observed_is_declared_by_name() -> None:
    from kant.exporter import _GAUGES

    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    ex = MetricsExporter(s)
    ex.observe(now=0)
    assert sorted(f.name for f in ex.families()) == sorted(_GAUGES)


def test_a_job_that_ended_and_was_forgotten_before_the_observe_is_skipped_not_an_error() -> None:
    # (a queue keeping no ended jobs, pods finishing between the cycle and the observe:
    # observe raised UnknownJobError and kept no figures)
    from kant.queueing import Queue

    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build(), queue=Queue(history=0))
    ex = MetricsExporter(s)
    s.submit(job("short", gpus=8), now=0)
    s.submit(job("long", gpus=8), now=0)
    result = s.step(now=1)
    for b in s.status("short").bindings:
        s.pod_finished(b.pod, now=2)
    assert "short" not in s.queue
    ex.observe(now=2, result=result)
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    assert (
        _value(fams, "kant_job_wait_seconds", "kant_job_wait_seconds_count", size_bucket="2-8") == 1
    )
    assert _value(fams, "kant_jobs", "kant_jobs", phase="running") == 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "10", None])
def test_an_observe_at_a_time_that_is_no_finite_number_is_refused_and_keeps_the_sor_clock(
    bad: Any,
) -> None:
    # (a first observe at NaN set the exporter's clock to NaN: every later observe then
    # failed its comparisons and SOR stayed 0 for good)
    from kant.errors import InvalidTimeError

    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    ex = MetricsExporter(s)
    with pytest.raises(InvalidTimeError, match="observe"):
        ex.observe(now=bad)
    s.submit(job("a", gpus=8), now=0)
    ex.observe(now=0, result=s.step(now=0))
    ex.observe(now=10)
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    sor = "kant_scheduling_occupation_ratio"
    assert _value(fams, sor, sor) == 0.5


@pytest.mark.parametrize("port", [70000, -1, "9464", True, 9464.0])
def test_a_port_that_is_no_tcp_port_is_refused_naming_it(port: Any) -> None:
    # (an OverflowError, a socket.gaierror, a TypeError or an OSError from deep in the
    # HTTP server, none naming the port)
    from kant.errors import InvalidConfigError

    ex = MetricsExporter(Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build()))
    with pytest.raises(InvalidConfigError, match="field 'port'"):
        ex.serve(port=port)


def test_a_quota_with_nothing_charged_and_a_reason_no_job_has_read_0_not_vanish() -> None:
    # (the usage series of a tenant whose last job ended vanished, leaving usage / quota
    # with no value; so did the count of a pending reason no job had any more)
    s = Scheduler(
        ClusterBuilder().leaf("lf0", nodes=2).build(),
        admitter=Admitter([Quota.gpus("a", "H100", 8), Quota.gpus("idle", "H100", 8)]),
    )
    ex = MetricsExporter(s)
    s.submit(job("j", gpus=8, tenant="a"), now=0)
    s.submit(job("big", gpus=8, replicas=3, tenant="a"), now=0)  # (beyond a's quota)
    ex.observe(now=1, result=s.step(now=1))
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    usage = "kant_quota_usage_gpus"
    assert _value(fams, usage, usage, tenant="a", gpu_model="H100") == 8
    assert _value(fams, usage, usage, tenant="idle", gpu_model="H100") == 0
    assert _value(fams, "kant_pending_jobs", "kant_pending_jobs", reason="unsatisfiable") == 1
    s.cancel("big", now=2)
    for b in s.status("j").bindings:
        s.pod_finished(b.pod, now=2)
    ex.observe(now=2)
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    assert _value(fams, usage, usage, tenant="a", gpu_model="H100") == 0
    assert _value(fams, "kant_pending_jobs", "kant_pending_jobs", reason="unsatisfiable") == 0
    assert _value(fams, "kant_pending_jobs", "kant_pending_jobs", reason="not_tried") == 0


def test_a_registry_holding_one_of_its_names_is_refused_and_left_as_it_was() -> None:
    # (a second exporter on one registry raised prometheus_client's ValueError, having
    # registered its first metrics already)
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    from kant.errors import DuplicateError

    registry = CollectorRegistry()
    Gauge("kant_jobs", "The application's own.", registry=registry)
    before = generate_latest(registry)
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    with pytest.raises(DuplicateError, match="kant_jobs"):
        MetricsExporter(s, registry=registry)
    assert generate_latest(registry) == before
    shared = CollectorRegistry()
    MetricsExporter(s, registry=shared)
    with pytest.raises(DuplicateError, match="a registry of its own"):
        MetricsExporter(s, registry=shared)


def test_jtted_on_nodes_of_two_sizes_counts_the_larger_node() -> None:
    # three 5-GPU pods on an 8-GPU and a 12-GPU node: 1 + 2, the fewest the larger node
    # allows; read from the smaller node (the first by name) the optimum would be 3 nodes
    from kant import Scheduler
    from kant.exporter import MetricsExporter
    from kant.state import ClusterState
    from kant.testing.builders import node

    cluster = ClusterState(
        [node("a", gpus=8, leaf="lf0"), node("b", gpus=12, template=None, leaf="lf0")]
    )
    s = Scheduler(cluster)
    ex = MetricsExporter(s)
    s.submit(job("g", gpus=5, replicas=3), now=0)
    ex.observe(now=0)
    ex.observe(now=1, result=s.step(now=1))
    assert len({b.node for b in s.status("g").bindings}) == 2
    row = ex._jtted["9-64"]
    assert row[0] / row[1] == 1.0


def test_a_services_pods_started_in_two_cycles_count_both_nodes_as_the_simulator_does() -> None:
    # svc's first pod starts at t=1 on the free node, its second at t=100 when the blocker
    # ends: two nodes, its optimum (the exporter counted the first cycle's node only: a
    # NodeNum ratio of 0.5, better than the optimum, where the simulator reads 1.0)
    from kant.sim import SimConfig, Simulator

    def jobs() -> list[Any]:
        return [job("blocker", gpus=8, submitted_at=0, runtime=100),
                job("svc", gpus=8, replicas=2, gang=False, submitted_at=1, runtime=1000)]  # fmt: skip

    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    ex = MetricsExporter(s)
    blocker, svc = jobs()
    s.submit(blocker, now=0)
    ex.observe(0, s.step(now=0))
    s.submit(svc, now=1)
    ex.observe(1, s.step(now=1))
    assert len(s.status("svc").bindings) == 1
    for b in s.status("blocker").bindings:
        s.pod_finished(b.pod, 100)
    ex.observe(100, s.step(now=100))
    assert len({b.node for b in s.status("svc").bindings}) == 2
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    ratio = _value(fams, "kant_jtted_node_ratio", "kant_jtted_node_ratio", size_bucket="9-64")
    sim = Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build())
    res = Simulator(sim, jobs(), SimConfig(tick=0)).run()
    assert ratio == res.summary.jtted["9-64"].node_ratio == 1.0
    # and its wait is counted once, at its first start
    assert (
        _value(fams, "kant_job_wait_seconds", "kant_job_wait_seconds_count", size_bucket="9-64")
        == 1
    )


@pytest.mark.parametrize(("small", "big"), [("a", "b"), ("b", "a")])
def test_a_gang_spanning_two_leaves_reads_the_same_group_ratio_whatever_the_leaves_names(
    small: str, big: str
) -> None:
    # a leaf of 2 nodes and one of 4, 2 of whose nodes are taken: a 4-node gang spans both
    # leaves, where the big leaf alone could hold it: 2 groups of an optimum of 1, as the
    # simulator's JTTED reads it (the pool's largest leaf). The exporter read the leaf of the
    # job's first node by name: 1.0 when the small leaf's name sorted first
    from kant.metrics import jtted
    from kant.metrics.records import JobRecord
    from kant.model import Binding, PodId

    state = ClusterBuilder().leaf(small, nodes=2).leaf(big, nodes=4).build()
    for k in (2, 3):
        pod = PodId(job="other", role="w", index=k)
        state.bind(Binding(pod=pod, node=f"{big}-n{k}", gpus=range(8)))
    s = Scheduler(state)
    ex = MetricsExporter(s)
    g = job("g", gpus=8, replicas=4, submitted_at=1, runtime=100)
    s.submit(g, now=1)
    ex.observe(1, s.step(now=1))
    nodes = {b.node for b in s.status("g").bindings}
    assert len({n.split("-")[0] for n in nodes}) == 2
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    ratio = _value(fams, "kant_jtted_group_ratio", "kant_jtted_group_ratio", size_bucket="9-64")
    rec = JobRecord.for_job(g, started_at=1, nodes_used=4, groups_used=2)
    assert ratio == jtted([rec], nodes_per_leaf=4)["9-64"].group_ratio == 2.0


def test_a_node_re_added_under_its_name_in_another_leaf_counts_with_its_new_leaf() -> None:
    # x (leaf lf0) runs a job, is removed and added again in lf1; y (lf0) is removed: a
    # 2-node gang on x and z spans lf1 only, one group of an optimum of one. The exporter
    # kept every node it ever saw by name and read x in lf0: 2 groups, a ratio of 2.0 (and
    # its memory of nodes grew with every name seen)
    from kant.state import ClusterState
    from kant.testing import node

    kw = {"spine": "sp0", "superspine": "ss0"}
    s = Scheduler(ClusterState([node("x", leaf="lf0", **kw), node("y", leaf="lf0", **kw),
                                node("z", leaf="lf1", **kw)]))  # fmt: skip
    ex = MetricsExporter(s)
    for j in ("fy", "fz", "j1"):
        s.submit(job(j, gpus=8, submitted_at=0), now=0)
    ex.observe(0, s.step(now=0))
    for j in ("fy", "fz", "j1"):
        for b in s.status(j).bindings:
            s.pod_finished(b.pod, 10)
    s.node_removed("x", 11)
    s.node_added(node("x", leaf="lf1", **kw), 12)
    s.node_removed("y", 13)
    s.submit(job("g", gpus=8, replicas=2, submitted_at=14, runtime=100), now=14)
    ex.observe(14, s.step(now=14))
    assert {b.node for b in s.status("g").bindings} == {"x", "z"}
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    ratio = _value(fams, "kant_jtted_group_ratio", "kant_jtted_group_ratio", size_bucket="9-64")
    assert ratio == 1.0
    assert ex._placing == {}  # (nothing of a counted job's nodes is kept)


@pytest.mark.parametrize("a100_first", [False, True])
def test_a_gang_spanning_two_gpu_pools_reads_the_same_jtted_in_the_exporter_and_simulator(
    a100_first: bool,
) -> None:
    # 2 pods of 8 on H100 nodes (a leaf of 2) and one of 4 on A100 nodes (4 GPUs, a leaf of
    # 4): both read the optimum of the larger of the two pools, 8 GPUs per node and 4 nodes
    # per leaf, whatever the roles' order. The simulator read the pool of the job's first
    # binding (group ratio 1.0), the exporter the largest over its nodes' pools (2.0)
    from kant.model import Job, Resources, Role
    from kant.sim import SimConfig, Simulator
    from kant.state import ClusterState
    from kant.testing import node

    kw = {"spine": "sp0", "superspine": "ss0"}

    def cluster() -> ClusterState:
        ns = [node(f"h{i}", leaf="lh", **kw) for i in range(2)]
        return ClusterState(ns + [node(f"a{i}", gpus=4, model="A100", leaf="la", template=None,
                                       **kw) for i in range(4)])  # fmt: skip

    roles = (Role(name="h", replicas=2, resources=Resources(gpus=8), gpu_models="H100"),
             Role(name="a", replicas=1, resources=Resources(gpus=4), gpu_models="A100"))  # fmt: skip
    x = Job(
        id="x", submitted_at=0, runtime_estimate=100, roles=roles[::-1] if a100_first else roles
    )
    s = Scheduler(cluster())
    ex = MetricsExporter(s)
    s.submit(x, now=0)
    ex.observe(0, s.step(now=0))
    assert len(s.status("x").bindings) == 3
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    got = (_value(fams, "kant_jtted_node_ratio", "kant_jtted_node_ratio", size_bucket="9-64"),
           _value(fams, "kant_jtted_group_ratio", "kant_jtted_group_ratio", size_bucket="9-64"))  # fmt: skip
    row = Simulator(Scheduler(cluster()), [x], SimConfig(tick=0)).run().summary.jtted["9-64"]
    assert got == (row.node_ratio, row.group_ratio) == (1.0, 2.0)


def test_a_launcher_without_gpus_on_a_cpu_node_is_no_node_of_the_jobs_jtted() -> None:
    # an MPI-style gang: a CPU-only launcher, placed on the CPU node, and one 8-GPU worker on
    # one GPU node, the optimum. JTTED measures the GPUs' topology, and its optimum reads the
    # roles with GPUs only: both the exporter and the simulator counted the launcher's node
    # too, a NodeNum and a group ratio of 2.0
    from kant.model import Job, Resources, Role
    from kant.sim import SimConfig, Simulator
    from kant.state import ClusterState
    from kant.testing import node

    kw = {"spine": "sp0", "superspine": "ss0", "cpu_milli": 64_000}

    def cluster() -> ClusterState:
        return ClusterState([node("g0", leaf="lf0", **kw),
                             node("cpu0", gpus=0, leaf="lf1", **kw)])  # fmt: skip

    roles = (Role(name="launcher", resources=Resources(cpu_milli=1000)),
             Role(name="worker", resources=Resources(gpus=8, cpu_milli=1000)))  # fmt: skip
    mpi = Job(id="mpi", submitted_at=0, runtime_estimate=100, roles=roles)
    s = Scheduler(cluster())
    ex = MetricsExporter(s)
    s.submit(mpi, now=0)
    ex.observe(0, s.step(now=0))
    assert {b.node for b in s.status("mpi").bindings} == {"g0", "cpu0"}
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    got = (_value(fams, "kant_jtted_node_ratio", "kant_jtted_node_ratio", size_bucket="2-8"),
           _value(fams, "kant_jtted_group_ratio", "kant_jtted_group_ratio", size_bucket="2-8"))  # fmt: skip
    res = Simulator(Scheduler(cluster()), [mpi], SimConfig(tick=0)).run()
    row = res.summary.jtted["2-8"]
    assert got == (row.node_ratio, row.group_ratio) == (1.0, 1.0)
    assert (res.records[0].nodes_used, res.records[0].groups_used) == (1, 1)


def test_an_observe_before_the_cycle_of_its_result_is_refused_and_counts_nothing() -> None:
    # (accepted: "a" started at 100 read as held from 5, an SOR of 0.5 over [0, 10])
    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=1).build())
    ex = MetricsExporter(s)
    ex.observe(0)
    s.submit(job("a", gpus=8), now=0)
    r = s.step(100)
    before = ex.exposition()
    with pytest.raises(InvalidTimeError, match="before the cycle"):
        ex.observe(5, r)
    assert ex.exposition() == before
    ex.observe(100, r)
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    wait = _value(fams, "kant_job_wait_seconds", "kant_job_wait_seconds_sum", size_bucket="2-8")
    assert wait == 100.0


def test_a_scrape_during_an_observe_sees_all_of_the_last_observe_and_none_of_the_next() -> None:
    # (the cycle counter and the wait histogram were written before the lock and the gauges
    # swapped under it: a scrape in between read cycles_total 1 next to GAR 0 and no job
    # running)
    import threading

    s = Scheduler(ClusterBuilder().leaf("lf0", nodes=4).build())
    ex = MetricsExporter(s)
    ex.observe(now=0)
    for i in range(4):
        s.submit(job(f"j{i}", gpus=8), now=0)
    before = ex.exposition()
    paused, go = threading.Event(), threading.Event()
    count_jtted = ex._count_jtted

    def pause_then_count(*args: Any) -> None:  # (half-way through the starts of the cycle)
        paused.set()
        assert go.wait(timeout=10)
        count_jtted(*args)

    ex._count_jtted = pause_then_count  # type: ignore[method-assign]
    observer = threading.Thread(target=ex.observe, args=(1, s.step(now=1)))
    observer.start()
    try:
        assert paused.wait(timeout=10)
        during = ex.exposition()
    finally:
        go.set()
        observer.join(timeout=10)
    assert during == before
    fams = {f.name: f for f in text_string_to_metric_families(ex.exposition().decode())}
    assert _value(fams, "kant_cycles", "kant_cycles_total") == 1
    assert _value(fams, "kant_cycle_duration_seconds", "kant_cycle_duration_seconds_count") == 1
    wait = "kant_job_wait_seconds"
    assert _value(fams, wait, f"{wait}_count", size_bucket="2-8") == 4
    assert _value(fams, "kant_gpu_allocation_ratio", "kant_gpu_allocation_ratio") == 1.0
    assert _value(fams, "kant_jobs", "kant_jobs", phase="running") == 4
    assert _value(fams, "kant_jtted_node_ratio", "kant_jtted_node_ratio", size_bucket="2-8") == 1


@pytest.mark.parametrize("addr", [None, "", 5, " 127.0.0.1"])
def test_an_address_that_is_no_host_name_is_refused_naming_it_and_nothing_is_bound(
    addr: Any,
) -> None:
    # (None bound every interface, not the loopback of the default; 5 was a TypeError and ""
    # a socket.gaierror from deep in the HTTP server)
    from kant.errors import InvalidConfigError

    ex = MetricsExporter(Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build()))
    with pytest.raises(InvalidConfigError, match="field 'addr'"):
        ex.serve(port=0, addr=addr)


def test_the_endpoint_listens_on_loopback_unless_told_another_address() -> None:
    ex = MetricsExporter(Scheduler(ClusterBuilder().leaf("lf0", nodes=2).build()))
    for kwargs, host in (({}, "127.0.0.1"), ({"addr": "localhost"}, "127.0.0.1")):
        server, thread = ex.serve(port=0, **kwargs)
        try:
            assert server.server_address[0] == host
        finally:
            server.shutdown()
            thread.join(timeout=5)
