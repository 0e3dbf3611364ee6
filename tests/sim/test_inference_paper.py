"""The inference experiment's real-data loaders and its scenario (section 5.2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kant.errors import InvalidTraceError
from kant.sim.scenarios import make_scenario
from kant.sim.traces import trace_dir
from kant.sim.traces.inference import (
    load_dlrm_instances,
    load_pai_machines,
    load_spot_nodes,
    load_vc_gpus,
)
from kant.testing import node

DLRM_HEAD = (
    "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,"
    "rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,"
    "creation_time,scheduled_time,deletion_time\n"
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_dlrm_row_with_a_bad_cell_is_named_by_file_and_line(tmp_path: Path) -> None:
    good = "i0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640,800,8,100,101,200\n"
    bad = "i1,HN,app_0,12,12,1,1,25,25,lots,120.0,640,800,8,100,101,200\n"
    p = _write(tmp_path, "dlrm.csv", DLRM_HEAD + good + bad)
    with pytest.raises(InvalidTraceError, match=r"dlrm\.csv:3: .*memory_request"):
        load_dlrm_instances(p)
    trace = load_dlrm_instances(p, errors="skip")
    assert trace.report.loaded == 1 and trace.report.skipped == 1
    (inst,) = trace.instances
    assert (inst.app, inst.gpus, inst.memory_mib, inst.max_per_node) == ("app_0", 1, 122880, 8)
    assert (inst.created, inst.deleted) == (100.0, 200.0)


def test_a_dlrm_instance_deleted_before_it_was_created_is_refused(tmp_path: Path) -> None:
    row = "i0,HN,app_0,8,8,1,1,25,25,40.0,40.0,1,1,-1,300,301,200\n"
    p = _write(tmp_path, "dlrm.csv", DLRM_HEAD + row)
    with pytest.raises(InvalidTraceError, match=r"dlrm\.csv:2: .*deletion_time"):
        load_dlrm_instances(p)


def test_node_shape_files_report_bad_rows_by_file_and_line(tmp_path: Path) -> None:
    pai = _write(tmp_path, "pai.csv", "m0,V100M32,96,384,8\nm1,V100M32,96,384,eight\n")
    with pytest.raises(InvalidTraceError, match=r"pai\.csv:2: .*cap_gpu"):
        load_pai_machines(pai)
    spot = _write(tmp_path, "spot.csv", "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1\n")
    with pytest.raises(InvalidTraceError, match=r"spot\.csv:2"):
        load_spot_nodes(spot)
    vc = _write(tmp_path, "vc.csv", "date,vcA,vcB,total\n2020-04-01,8,x,8\n")
    with pytest.raises(InvalidTraceError, match=r"vc\.csv:2: .*vcB"):
        load_vc_gpus(vc)


@pytest.mark.skipif(trace_dir() is None, reason="needs the shared trace folder")
def test_the_inference_paper_scenario_reads_real_shapes_and_runs_without_service_waits() -> None:
    from kant.sim.scenarios import run_scenario

    sc = make_scenario("inference-paper")
    models = {n.gpu_model for n in sc.nodes}
    assert models == {"A100", "V100M32"} and sc.total_gpus == 112
    assert any(n.zone == "inference" for n in sc.nodes)
    assert {q.gpu_model for q in sc.quotas or ()} == models
    res = run_scenario(sc)
    assert res.summary.jobs["finished"] == len(sc.jobs)
    tick = sc.config.tick
    for r in res.records:
        if not r.gang:
            assert r.started_at is not None and r.started_at - r.submitted_at <= tick


def test_the_sample_keeps_the_most_instances_whose_peak_stays_within_the_target() -> None:
    import numpy as np

    from kant.sim.inference_paper import _peak, _sample_to_peak

    spans = [(0.0, 10.0, 1), (0.0, 10.0, 1), (5.0, 20.0, 1), (12.0, 30.0, 1), (0.0, 30.0, 1)]
    keys = np.array([0.5, 0.1, 0.3, 0.2, 0.9])  # taken in order 1, 3, 2, 0, 4
    assert _sample_to_peak(spans, keys, 2) == 3  # 1, 3, 2: peak 2; adding 0 makes 3
    assert _peak([spans[i] for i in (1, 3, 2)]) == 2
    assert _sample_to_peak(spans, keys, 0) == 0
    assert _sample_to_peak(spans, keys, 10) == 5


@pytest.mark.skipif(trace_dir() is None, reason="needs the shared trace folder")
def test_each_model_is_filled_close_to_its_peak_budget_with_the_apps_per_node_caps() -> None:
    from kant.sim.inference_paper import _peak

    sc = make_scenario("inference-paper")
    pools: dict[str, int] = {}
    for n in sc.nodes:
        if n.gpu_model is not None:
            pools[n.gpu_model] = pools.get(n.gpu_model, 0) + n.gpus
    for m, gpus in pools.items():
        spans = [
            (j.submitted_at, j.submitted_at + (j.runtime_estimate or 0.0), j.roles[0].replicas)
            for j in sc.jobs
            if not j.gang and m in j.roles[0].gpu_models
        ]
        budget = 0.95 * gpus - 16  # two 8-GPU pods of the model's large jobs
        assert budget - 2 <= _peak(spans) <= budget
    assert any(j.roles[0].max_per_node is not None for j in sc.jobs)


def test_a_tenant_table_whose_first_day_gives_no_vc_gpus_is_a_trace_error_not_empty_tenants(
    tmp_path: Path,
) -> None:
    from kant.errors import ValidationError
    from kant.sim.inference_paper import tenant_shares

    (tmp_path / "helios-acme-summaries").mkdir()
    table = _write(
        tmp_path / "helios-acme-summaries",
        "helios_earth_vc_gpu_number.csv",
        "date,vcA,vcB,total\n2020-04-01,0,0,0\n2020-04-02,8,4,12\n",
    )
    with pytest.raises(InvalidTraceError, match="no virtual cluster has GPUs") as exc:
        tenant_shares(tmp_path)
    assert exc.value.where == str(table)
    table.write_text("date,vcA,vcB,total\n2020-04-01,8,4,12\n")
    assert tenant_shares(tmp_path) == {"t-vcA": 8 / 12, "t-vcB": 4 / 12}
    for tenants in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValidationError) as bad:
            tenant_shares(tmp_path, tenants)  # type: ignore[arg-type]
        assert bad.value.field == "tenants"  # not {} or a tenant silently dropped


NOT_WORKLOAD_ARGUMENTS = [
    ({"nodes": []}, "nodes"),
    ({"nodes": [node("cpu0", gpus=0, model=None)]}, "nodes"),
    ({"shares": {}}, "shares"),
    ({"shares": {"a": 0.0, "b": 0.0}}, "shares['a']"),
    ({"shares": {"a": -1.0, "b": 2.0}}, "shares['a']"),
    ({"shares": {"a": float("nan")}}, "shares['a']"),
    ({"shares": {"a": "half"}}, "shares['a']"),
    ({"seed": -1}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"seed": True}, "seed"),
    ({"load": "x"}, "load"),
    ({"load": 0}, "load"),
    ({"load": float("nan")}, "load"),
    ({"load": 1.5}, "load"),
]


@pytest.mark.parametrize(
    ("change", "field"), NOT_WORKLOAD_ARGUMENTS, ids=[repr(c) for c, _ in NOT_WORKLOAD_ARGUMENTS]
)
def test_a_bad_workload_argument_is_named_before_the_trace_is_read(
    tmp_path: Path, change: dict[str, object], field: str
) -> None:
    from kant.errors import ValidationError
    from kant.sim.inference_paper import inference_paper_workload

    args: dict[str, object] = {
        "nodes": [node("a0", model="A100"), node("a1", model="A100")],
        "shares": {"a": 0.75, "b": 0.25},
        **change,
    }
    with pytest.raises(ValidationError) as exc:  # tmp_path has no trace: not read
        inference_paper_workload(tmp_path, **args)  # type: ignore[arg-type]
    assert exc.value.field == field


NOT_SCENARIO_ARGUMENTS = [
    ({"jobs": -1}, "jobs"),  # was: all jobs but the last
    ({"jobs": 0}, "jobs"),  # was: an empty scenario
    ({"jobs": 2.5}, "jobs"),
    ({"jobs": "3"}, "jobs"),
    ({"seed": -1}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"load": "x"}, "load"),
    ({"size": ["i2"]}, "size"),
    ({"size": "i3"}, "size"),
    ({"zone": "no"}, "zone"),
    ({"traces": 123}, "traces"),
    ({"traces": "/nonexistent/traces"}, "traces"),
]


@pytest.mark.parametrize(
    ("change", "field"), NOT_SCENARIO_ARGUMENTS, ids=[repr(c) for c, _ in NOT_SCENARIO_ARGUMENTS]
)
def test_the_public_inference_paper_builder_checks_its_arguments_as_make_scenario_does(
    tmp_path: Path, change: dict[str, object], field: str
) -> None:
    from kant.errors import ValidationError
    from kant.sim.scenarios import SCENARIOS

    args = {"traces": tmp_path, **change}  # an empty folder: checked before anything is read
    with pytest.raises(ValidationError) as exc:
        SCENARIOS["inference-paper"](**args)
    assert exc.value.field == field
    if field in ("jobs", "seed", "load"):
        with pytest.raises(ValidationError) as same:
            make_scenario("inference-paper", **change)  # type: ignore[arg-type]
        assert str(same.value) == str(exc.value)


def test_a_load_too_small_for_the_large_jobs_is_refused_naming_the_smallest_load_allowed(
    tmp_path: Path,
) -> None:
    from kant.errors import ValidationError
    from kant.sim.inference_paper import inference_paper_workload, min_load

    assert min_load({"A100": 64, "V100M32": 48}) == 16 / 48  # i2: the large jobs' 16 GPUs
    nodes = [node(f"a{k}", model="A100") for k in range(4)] + [
        node(f"v{k}", model="V100M32") for k in range(3)
    ]  # a10: 32 + 24 GPUs
    with pytest.raises(ValidationError, match=r"at least 0\.6667 .*V100M32 has only 24") as exc:
        inference_paper_workload(tmp_path, nodes, {"a": 1.0}, load=0.5)
    assert exc.value.field == "load"
    with pytest.raises(ValidationError, match="too few for its large jobs") as small:
        inference_paper_workload(tmp_path, nodes[:1], {"a": 1.0}, load=1.0)  # 8 GPUs
    assert small.value.field == "nodes"


@pytest.mark.skipif(trace_dir() is None, reason="needs the shared trace folder")
def test_each_models_peak_demand_stays_within_the_load_down_to_the_smallest_load_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kant.cli import main
    from kant.errors import ValidationError
    from kant.sim.inference_paper import _peak

    with pytest.raises(ValidationError, match=r"at least 0\.3334 on this cluster"):
        make_scenario("inference-paper", load=0.2)  # its large jobs alone: 16 of 48 GPUs
    argv = ["simulate", "--scenario", "inference-paper", "--load", "0.3", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "at least 0.3334" in err[0], err
    sc = make_scenario("inference-paper", load=0.3334)
    for m in ("A100", "V100M32"):
        gpus = sum(n.gpus for n in sc.nodes if n.gpu_model == m)
        spans = [
            (j.submitted_at, j.submitted_at + (j.runtime_estimate or 0.0), j.gpu_units)
            for j in sc.jobs
            if m in j.roles[0].gpu_models
        ]
        assert _peak(spans) <= 0.3334 * gpus  # the documented promise, large jobs included


@pytest.mark.skipif(trace_dir() is None, reason="needs the shared trace folder")
def test_every_large_job_starts_once_the_services_end_and_espreads_zone_starts_four_later() -> None:
    # docs/experiments.md, section 5.2: the figures of the large jobs' waits
    from kant.sim.scenarios import PolicySet, observation_window, run_scenario

    sc = make_scenario("inference-paper")
    _w0, w1 = observation_window(sc)
    starts = {}
    for placement in ("espread", "ebinpack", "spread"):
        res = run_scenario(sc, PolicySet(queueing="backfill", placement=placement))
        big = {r.job_id: r for r in res.records if r.job_id.startswith("ep-")}
        assert len(big) == 12 and all(r.started_at is not None for r in big.values())
        starts[placement] = {j: (r.started_at or 0.0) / 3600 for j, r in big.items()}
        waits = [(r.started_at or 0.0) - r.submitted_at for r in big.values()]
        assert round(max(waits) / 3600, 2) == 43.20
        mean = round(sum(waits) / len(waits) / 3600, 2)
        assert mean == (29.95 if placement == "espread" else 27.95)
    assert all(t * 3600 > w1 for t in starts["espread"].values())  # past the window
    assert set(starts["espread"].values()) == {48.0, 54.0, 60.0}
    assert starts["ebinpack"] == starts["spread"]
    later = {j for j, t in starts["espread"].items() if t == starts["ebinpack"][j] + 6}
    assert later == {"ep-a100-3", "ep-v100m32-2", "ep-v100m32-4", "ep-v100m32-5"}


@pytest.mark.skipif(trace_dir() is None, reason="needs the shared trace folder")
def test_finite_shares_too_large_to_add_up_draw_the_tenants_as_their_ratio_does() -> None:
    # (1e308 each passed the check of each share, then their sum overflowed to inf and
    # numpy's choice raised an untyped ValueError)
    from kant.sim.inference_paper import inference_paper_cluster, inference_paper_workload

    base = trace_dir()
    assert base is not None
    nodes = inference_paper_cluster(base)
    huge = inference_paper_workload(base, nodes, {"a": 1e308, "b": 1e308})
    even = inference_paper_workload(base, nodes, {"a": 1.0, "b": 1.0})
    assert [(j.id, j.tenant) for j in huge] == [(j.id, j.tenant) for j in even]
    assert {j.tenant for j in huge} == {"a", "b"}


def test_finite_shares_too_large_to_add_up_split_each_pool_as_their_ratio_does() -> None:
    # (the quotas of the same shares: their sum was inf and each quota NaN, a ValueError)
    from kant.sim.workloads import tenant_quotas

    huge = tenant_quotas({"H100": 16}, {"a": {"H100": 1e308}, "b": {"H100": 1e308}})
    assert huge == tenant_quotas({"H100": 16}, {"a": {"H100": 1.0}, "b": {"H100": 1.0}})
    assert huge == {"a": {"H100": 8}, "b": {"H100": 8}}


def test_instances_of_one_app_and_minute_asking_different_gpus_are_services_of_their_own(
    tmp_path: Path,
) -> None:
    # (one service took the first instance's GPUs: 2 replicas of 1 GPU for 1 + 4 GPUs asked)
    from kant.sim.inference_paper import (
        _FILES,
        inference_paper_cluster,
        inference_paper_workload,
        tenant_shares,
    )

    for rel in _FILES.values():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / _FILES["spot"]).write_text(
        "gpu_model,gpu_capacity_num,cpu_num,node_name\n"
        + "".join(f"A100-SXM4-80GB,8,128,s{i}\n" for i in range(8))
    )
    (tmp_path / _FILES["pai"]).write_text("".join(f"m{i},V100M32,96,384,8\n" for i in range(6)))
    (tmp_path / _FILES["vc"]).write_text("date,vcA,vcB,total\n2020-04-01,8,8,16\n")
    t0 = 10 * 86400 + 3600
    rows = [
        f"i1,HN,app_1,4,4,1,1,0,0,16,16,0,0,-1,{t0},{t0},{t0 + 7200}",
        f"i2,HN,app_1,4,4,4,4,0,0,16,16,0,0,-1,{t0 + 10},{t0 + 10},{t0 + 7210}",
        f"i3,HN,app_1,4,4,1,1,0,0,16,16,0,0,-1,{t0 + 20},{t0 + 20},{t0 + 7220}",
    ]
    (tmp_path / _FILES["dlrm"]).write_text(DLRM_HEAD + "\n".join(rows) + "\n")
    nodes = inference_paper_cluster(tmp_path, "i2")
    jobs = inference_paper_workload(tmp_path, nodes, tenant_shares(tmp_path), seed=0, load=1.0)
    services = {
        j.id: (j.roles[0].replicas, j.roles[0].resources.gpus)
        for j in jobs
        if j.id.startswith("app_1")
    }
    assert services == {"app_1-60-180-1g": (2, 1), "app_1-60-180-4g": (1, 4)}


def test_a_dlrm_instance_no_node_can_hold_is_refused_as_the_scenario_is_built(
    tmp_path: Path,
) -> None:
    # app_0's instances ask 16 GPUs, on nodes of 8: the run kept one waiting to its end, its
    # GPUs counted in the sampled peak demand, and said nothing
    from kant.errors import ValidationError
    from kant.sim.scenarios import inference_paper

    base = trace_dir()
    if base is None:
        pytest.skip("the shared trace folder is not here")
    for name in ("alibaba-pai-v2020", "alibaba-spot-gpu-v2026", "helios-acme-summaries"):
        (tmp_path / name).symlink_to(base / name)
    dlrm = tmp_path / "alibaba-gpu-v2025-dlrm"
    dlrm.mkdir()
    src = (base / "alibaba-gpu-v2025-dlrm" / "disaggregated_DLRM_trace.csv").read_text()
    head, *rows = src.splitlines(keepends=True)
    big = [r.replace(",1,1,", ",16,16,", 1) if ",app_0," in r else r for r in rows]
    (dlrm / "disaggregated_DLRM_trace.csv").write_text(head + "".join(big))
    with pytest.raises(ValidationError, match="could never start"):
        inference_paper(traces=tmp_path)
