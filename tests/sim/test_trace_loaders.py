"""Trace loaders on the real shared traces and on tiny broken files."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from kant.errors import InvalidTraceError, ValidationError
from kant.model import JobKind
from kant.sim.traces import (
    gang_roles,
    load_openb_jobs,
    load_openb_nodes,
    load_openb_pods,
    load_philly_jobs,
    load_swf_jobs,
)

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
OPENB = TRACES / "alibaba-openb-v2023"
PHILLY = TRACES / "philly-pollux-jobs" / "philly.csv"
SWF = TRACES / "pwa-nasa-ipsc-1993" / "NASA-iPSC-1993-3.1-cln.swf.gz"

needs_traces = pytest.mark.skipif(
    not TRACES.is_dir(), reason=f"shared traces not found at {TRACES} (<repo>/../shared/traces)"
)

OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


# --------------------------------------------------------------------------- real traces


@needs_traces
def test_the_openb_default_pod_list_becomes_8152_one_pod_jobs() -> None:
    trace = load_openb_jobs(OPENB / "openb_pod_list_default.csv")
    assert len(trace) == 8152 and trace.report.ok and trace.report.rows == 8152
    assert trace.total_gpus == pytest.approx(6086.8)
    kinds = Counter(
        "cpu" if r.total_milli == 0 else "share" if r.is_shared else f"{r.gpus}gpu"
        for r in (j.roles[0].resources for j in trace)
    )
    assert kinds == {"cpu": 1088, "share": 3078, "1gpu": 3911, "2gpu": 16, "4gpu": 15, "8gpu": 44}
    assert all(not j.gang and j.num_pods == 1 and j.kind is JobKind.INFERENCE for j in trace)
    times = [j.submitted_at for j in trace]
    assert times == sorted(times) and times[-1] == 12_901_761
    first = trace.jobs[0]
    assert first.id == "openb-pod-0000" and first.runtime_estimate == 12_537_496
    assert first.roles[0].resources.cpu_milli == 12000
    assert first.roles[0].resources.memory_mib == 16384


@needs_traces
def test_openb_gpu_spec_becomes_the_allowed_gpu_models() -> None:
    trace = load_openb_jobs(OPENB / "openb_pod_list_gpuspec33.csv")
    constrained = [j for j in trace if j.roles[0].gpu_models]
    assert len(constrained) == 2388
    assert {m for j in constrained for m in j.gpu_models} <= {
        "A10",
        "G2",
        "G3",
        "P100",
        "T4",
        "V100M16",
        "V100M32",
    }


@needs_traces
def test_the_5_column_multigpu_variant_has_no_times() -> None:
    trace = load_openb_jobs(OPENB / "openb_pod_list_multigpu50.csv")
    assert len(trace) == 9061 and trace.total_gpus == pytest.approx(11358.8)
    assert all(j.submitted_at == 0 and j.runtime_estimate is None for j in trace)


@needs_traces
def test_the_nomem_variant_requests_no_memory() -> None:
    trace = load_openb_jobs(OPENB / "historical-variants" / "openb_pod_list_nomem.csv")
    assert len(trace) == 8152
    assert all(j.roles[0].resources.memory_mib == 0 for j in trace)


@needs_traces
def test_openb_pod_records_keep_the_trace_encoding_for_packing() -> None:
    pods = load_openb_pods(OPENB / "openb_pod_list_default.csv")
    assert len(pods) == 8152 and pods.total_gpu_milli == 6_086_800
    p1 = pods.pods[1]
    assert (p1.name, p1.cpu_milli, p1.memory_mib, p1.num_gpu, p1.gpu_milli) == (
        "openb-pod-0001",
        6000,
        12288,
        1,
        460,
    )
    assert p1.resources.gpu_milli == 460 and p1.qos == "LS" and p1.phase == "Running"
    pending = [p for p in pods if p.scheduled_time is None]
    assert len(pending) == 897
    p = pending[0]
    assert p.creation_time is not None and p.deletion_time is not None
    assert p.runtime == p.deletion_time - p.creation_time


@needs_traces
def test_openb_node_lists_load_through_the_topology_reader() -> None:
    nodes = load_openb_nodes(OPENB / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212


@needs_traces
def test_philly_becomes_82247_gang_jobs_of_up_to_8_gpus_per_pod() -> None:
    trace = load_philly_jobs(PHILLY)
    assert len(trace) == 82247 and trace.report.ok
    assert len({j.tenant for j in trace}) == 15
    sizes = Counter(j.total_milli // 1000 for j in trace)
    assert sizes == {
        1: 76627,
        2: 1818,
        4: 1870,
        8: 1643,
        12: 7,
        16: 199,
        24: 7,
        32: 67,
        64: 6,
        128: 3,
    }
    shapes = {
        (j.total_milli // 1000, tuple((r.replicas, r.resources.gpus) for r in j.roles))
        for j in trace
    }
    assert (128, ((16, 8),)) in shapes and (12, ((2, 6),)) in shapes
    assert all(j.gang and j.kind is JobKind.TRAINING for j in trace)
    assert trace.jobs[0].submitted_at == 0.0 and trace.meta["epoch"] == "2017-09-04 10:30:41"
    gpu_hours = sum((j.runtime_estimate or 0) * j.total_milli / 1000 for j in trace) / 3600
    assert gpu_hours == pytest.approx(978_078, rel=1e-3)


@needs_traces
def test_philly_can_be_read_partially() -> None:
    trace = load_philly_jobs(PHILLY, limit=100)
    assert len(trace) == 100 and trace.report.rows == 100
    assert {j.id for j in trace} == {f"philly-{k:05d}" for k in range(100)}


@needs_traces
def test_the_nasa_swf_log_becomes_18239_jobs_one_gpu_per_processor() -> None:
    trace = load_swf_jobs(SWF)
    assert len(trace) == 18239 and trace.report.ok
    assert trace.meta["MaxProcs"] == "128"
    first = trace.jobs[0]
    assert first.id == "swf-1" and first.total_milli == 128_000
    assert [(r.replicas, r.resources.gpus) for r in first.roles] == [(16, 8)]
    assert first.runtime_estimate == 1451 and first.tenant == "user-1"
    assert sum(1 for j in trace if j.runtime_estimate == 1.0) >= 173  # 0 s runs are raised to 1 s
    assert len({j.tenant for j in trace}) == 69
    assert len({j.tenant for j in load_swf_jobs(SWF, tenant_by="group")}) == 2


# --------------------------------------------------------------------------- broken files


def write(tmp_path: Path, name: str, text: str) -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


GOOD_POD = "p0,1000,1024,1,500,,LS,Running,0,100,10\n"


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("p1,x,1024,1,500,,LS,Running,0,100,10", "cpu_milli"),
        ("p1,1000,-1,1,500,,LS,Running,0,100,10", "memory_mib"),
        ("p1,1000,1024,1,1500,,LS,Running,0,100,10", "gpu_milli"),
        ("p1,1000,1024,0,500,,LS,Running,0,100,10", "gpu_milli"),
        ("p1,1000,1024,2,500,,LS,Running,0,100,10", "gpu_milli"),
        ("p1,1000,1024,1,0,,LS,Running,0,100,10", "gpu_milli"),
        ("p1,1000,1024,65,1000,,LS,Running,0,100,10", "num_gpu"),
        ("p1,1000,1024,1,500,,LS,Running,50,10,60", "deletion_time"),
        ("p1,1000,1024,1,500,,LS,Running,50,100,40", "scheduled_time"),
        ("p1,1000,1024,1,500,,LS,Running,soon,100,10", "creation_time"),
        ("p0,1000,1024,1,500,,LS,Running,0,100,10", "name"),
        ("a/b,1000,1024,1,500,,LS,Running,0,100,10", "name"),
        ("p1,1000,1024,1,500", "row"),
    ],
    ids=[
        "a cpu that is not a number",
        "a negative memory",
        "a share above one GPU",
        "a share on a pod without GPUs",
        "a share spread over two GPUs",
        "GPUs with no milli",
        "more GPUs than a node can have",
        "deleted before created",
        "scheduled before created",
        "a creation time that is not a number",
        "a duplicate pod name",
        "a pod name with a slash",
        "a short row",
    ],
)
def test_a_broken_openb_row_names_file_line_and_field(tmp_path: Path, row: str, field: str) -> None:
    f = write(tmp_path, "pods.csv", OPENB_HEADER + GOOD_POD + row + "\n")
    with pytest.raises(InvalidTraceError) as exc:
        load_openb_jobs(f)
    assert exc.value.field == field
    assert exc.value.where == f"{f}:3"
    assert str(f) in str(exc.value) and field in str(exc.value)


def test_skip_mode_loads_the_good_rows_and_reports_the_bad_ones(tmp_path: Path) -> None:
    f = write(
        tmp_path,
        "pods.csv",
        OPENB_HEADER + GOOD_POD + "bad,x,1,1,500,,LS,Running,0,1,0\n\n"
        "p2,1000,1024,8,1000,V100M16|V100M32,BE,Pending,5,9,\n"
        "p3,1000,1024,1,2000,,LS,Running,0,100,10\n",
    )
    trace = load_openb_jobs(f, errors="skip", qos_priority={"LS": 2})
    assert [j.id for j in trace] == ["p0", "p2"]
    assert trace.jobs[0].priority == 2 and trace.jobs[1].priority == 0
    p2 = trace.jobs[1]
    assert p2.roles[0].gpu_models == {"V100M16", "V100M32"}
    assert p2.runtime_estimate == 4  # never scheduled: deletion - creation
    rep = trace.report
    assert (rep.rows, rep.loaded, rep.skipped) == (4, 2, 2)
    assert [(e.field, e.where) for e in rep.errors] == [
        ("cpu_milli", f"{f}:3"),
        ("gpu_milli", f"{f}:6"),
    ]
    assert "2 of 4 rows loaded, 2 skipped" in rep.summary()
    pods = load_openb_pods(f, errors="skip")
    assert [p.name for p in pods] == ["p0", "p2"] and pods.report.skipped == 2


def test_a_bad_header_raises_even_when_skipping(tmp_path: Path) -> None:
    f = write(tmp_path, "pods.csv", "name,cpu,num_gpu\np0,1,1\n")
    with pytest.raises(InvalidTraceError) as exc:
        load_openb_jobs(f, errors="skip")
    assert exc.value.field == "header" and exc.value.where == f"{f}:1"
    with pytest.raises(ValidationError):
        load_openb_jobs(f, errors="ignore")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("2017-13-40 00:00:00,10.0,1,10.0,vc1", "timestamp"),
        ("yesterday,10.0,1,10.0,vc1", "timestamp"),
        ("2017-10-09 07:01:55,0,1,0,vc1", "duration"),
        ("2017-10-09 07:01:55,abc,1,0,vc1", "duration"),
        ("2017-10-09 07:01:55,10.0,0,0,vc1", "num_gpus"),
        ("2017-10-09 07:01:55,10.0,1.5,0,vc1", "num_gpus"),
        ("2017-10-09 07:01:55,10.0,1,x,vc1", "gpu_time"),
        ("2017-10-09 07:01:55,10.0,1,10.0,", "cluster"),
        ("2017-10-09 07:01:55,10.0,1", "row"),
    ],
    ids=[
        "an impossible date",
        "a timestamp that is not a date",
        "a zero duration",
        "a duration that is not a number",
        "a job without GPUs",
        "a fractional GPU count",
        "a gpu time that is not a number",
        "no virtual cluster",
        "a short row",
    ],
)
def test_a_broken_philly_row_names_file_line_and_field(
    tmp_path: Path, row: str, field: str
) -> None:
    good = "2017-10-09 07:01:55,66.0,16,1056.0,11cb48\n"
    f = write(tmp_path, "philly.csv", PHILLY_HEADER + good + row + "\n")
    with pytest.raises(InvalidTraceError) as exc:
        load_philly_jobs(f)
    assert (exc.value.field, exc.value.where) == (field, f"{f}:3")
    trace = load_philly_jobs(f, errors="skip")
    assert len(trace) == 1 and trace.report.errors[0].field == field
    assert [(r.replicas, r.resources.gpus) for r in trace.jobs[0].roles] == [(2, 8)]


def test_a_philly_job_with_too_many_gpus_is_reported_with_the_files_gpu_count(
    tmp_path: Path,
) -> None:
    f = write(tmp_path, "philly.csv", PHILLY_HEADER + "2017-10-09 07:01:55,66,99999999999,66,vc1\n")
    with pytest.raises(InvalidTraceError) as exc:
        load_philly_jobs(f)
    assert (exc.value.field, exc.value.value) == ("num_gpus", 99999999999)
    assert "field 'num_gpus' = 99999999999" in str(exc.value)


def test_philly_jobs_before_an_explicit_epoch_are_rejected(tmp_path: Path) -> None:
    from datetime import datetime

    f = write(
        tmp_path,
        "philly.csv",
        PHILLY_HEADER + "2017-10-09 07:01:55,6.0,1,6.0,a\n2017-10-09 07:00:00,6.0,1,6.0,b\n",
    )
    trace = load_philly_jobs(f, epoch=datetime(2017, 10, 9, 7, 0, 30), errors="skip")
    assert [j.tenant for j in trace] == ["a"] and trace.jobs[0].submitted_at == 85.0
    assert trace.report.errors[0].where == f"{f}:3"
    ordered = load_philly_jobs(f)
    assert [j.id for j in ordered] == ["philly-00001", "philly-00000"]


SWF_HEAD = "; Version: 2.2\n; MaxProcs: 16\n;\n"
SWF_OK = "1 0 -1 100 4 -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1 -1\n"


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("2 5 -1 100 4 -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1", "row"),
        ("2 5 -1 100 -1 -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1 -1", "requested_processors"),
        ("2 5 -1 100 x -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1 -1", "allocated_processors"),
        ("2 -5 -1 100 4 -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1 -1", "submit_time"),
        ("2 5 -1 -7 4 -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1 -1", "run_time"),
        ("1 5 -1 100 4 -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1 -1", "job_number"),
    ],
    ids=[
        "a record with 17 fields",
        "no processor count at all",
        "a processor count that is not a number",
        "a negative submit time",
        "a negative run time other than -1",
        "a duplicate job number",
    ],
)
def test_a_broken_swf_record_names_file_line_and_field(
    tmp_path: Path, row: str, field: str
) -> None:
    f = tmp_path / "log.swf.gz"
    with gzip.open(f, "wt") as out:
        out.write(SWF_HEAD + SWF_OK + row + "\n")
    with pytest.raises(InvalidTraceError) as exc:
        load_swf_jobs(f)
    assert (exc.value.field, exc.value.where) == (field, f"{f}:5")
    trace = load_swf_jobs(f, errors="skip")
    assert len(trace) == 1 and trace.report.skipped == 1


def test_a_plain_swf_log_maps_processors_to_gpus(tmp_path: Path) -> None:
    f = write(
        tmp_path,
        "log.swf",
        SWF_HEAD + SWF_OK + "2 9 -1 0 -1 -1 -1 12 -1 -1 1 -1 2 -1 -1 -1 -1 -1\n"
        "3 9 -1 -1 1 -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1 -1\n",
    )
    trace = load_swf_jobs(f, gpus_per_processor=2)
    assert trace.meta == {"Version": "2.2", "MaxProcs": "16"}
    a, b, c = trace.jobs
    assert a.total_milli == 8000 and [(r.replicas, r.resources.gpus) for r in a.roles] == [(1, 8)]
    assert b.total_milli == 24_000 and b.tenant == "user-unknown" and b.runtime_estimate == 1.0
    assert c.runtime_estimate is None


def test_a_zero_second_swf_job_runs_min_runtime_and_min_runtime_must_be_positive(
    tmp_path: Path,
) -> None:
    f = write(tmp_path, "log.swf", SWF_HEAD + "1 0 -1 0 4 -1 -1 -1 -1 -1 1 3 1 -1 -1 -1 -1 -1\n")
    assert load_swf_jobs(f, min_runtime=0.5).jobs[0].runtime_estimate == 0.5
    # 0 would make a 0-second job one of unknown runtime (-1), a negative value the same
    for bad in (0, 0.0, -1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValidationError, match="min_runtime") as exc:
            load_swf_jobs(f, min_runtime=bad)  # type: ignore[arg-type]
        assert exc.value.field == "min_runtime"


def test_gang_roles_split_jobs_into_pods_of_at_most_8_gpus() -> None:
    def shape(g: int) -> list[tuple[str, int, int]]:
        return [(r.name, r.replicas, r.resources.gpus) for r in gang_roles(g)]

    assert shape(1) == [("worker", 1, 1)]
    assert shape(8) == [("worker", 1, 8)]
    assert shape(16) == [("worker", 2, 8)]
    assert shape(12) == [("worker", 2, 6)]
    assert shape(9) == [("worker", 1, 8), ("rest", 1, 1)]
    assert shape(2048) == [("worker", 256, 8)]
    res = gang_roles(4, cpu_milli_per_gpu=1000, memory_mib_per_gpu=10)[0].resources
    assert (res.cpu_milli, res.memory_mib) == (4000, 40)


def test_a_trace_file_that_is_missing_or_a_folder_is_a_trace_error_naming_it(
    tmp_path: Path,
) -> None:
    from kant.sim.traces.inference import load_dlrm_instances, load_vc_gpus

    missing = tmp_path / "philly-pollux-jobs" / "philly.csv"
    for load, path in (
        (load_philly_jobs, missing),
        (load_openb_jobs, tmp_path / "pods.csv"),
        (load_openb_nodes, tmp_path / "nodes.csv"),
        (load_swf_jobs, tmp_path / "log.swf.gz"),
        (load_dlrm_instances, tmp_path / "dlrm.csv"),
        (load_vc_gpus, tmp_path),  # a folder, not a file
    ):
        with pytest.raises(InvalidTraceError, match="cannot be read") as exc:
            load(path)
        assert (exc.value.field, exc.value.value) == ("file", str(path))


def test_a_trace_folder_without_a_scenarios_files_is_one_line_naming_the_file_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kant.cli import main

    monkeypatch.setenv("KANT_TRACES", str(tmp_path))  # an empty folder
    for choice, file in (
        (["--scenario", "inference-paper"], "node_info_df.csv"),
        (["--trace", "philly"], "philly.csv"),
    ):
        assert main(["simulate", *choice, "--out", str(tmp_path / "r"), "--no-plots"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1, err
        assert file in err and "cannot be read" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


_UTC_EPOCH = __import__("datetime").datetime(2017, 1, 1, tzinfo=__import__("datetime").UTC)
_BAD_ARGUMENTS: list[tuple[str, dict[str, object], str]] = [
    # (loader, a bad argument, the argument named)
    ("swf", {"gpus_per_processor": 0}, "gpus_per_processor"),
    ("swf", {"gpus_per_processor": 1.5}, "gpus_per_processor"),
    ("swf", {"gpus_per_processor": True}, "gpus_per_processor"),
    ("swf", {"max_gpus_per_pod": 0}, "max_gpus_per_pod"),
    ("swf", {"max_gpus_per_pod": 65}, "max_gpus_per_pod"),  # (a pod holds at most 64)
    ("swf", {"tenant_by": "users"}, "tenant_by"),
    ("swf", {"cpu_milli_per_gpu": -1}, "cpu_milli_per_gpu"),
    ("swf", {"memory_mib_per_gpu": 2**40}, "memory_mib_per_gpu"),  # (x 8 GPUs: too much)
    ("swf", {"path": None}, "path"),
    ("philly", {"max_gpus_per_pod": 0}, "max_gpus_per_pod"),
    ("philly", {"cpu_milli_per_gpu": -1}, "cpu_milli_per_gpu"),
    ("philly", {"memory_mib_per_gpu": "1"}, "memory_mib_per_gpu"),
    ("philly", {"epoch": _UTC_EPOCH}, "epoch"),  # (the file's times have no zone)
    ("philly", {"epoch": "2017-01-01"}, "epoch"),
    ("philly", {"limit": -1}, "limit"),
    ("philly", {"path": 3}, "path"),
    ("openb", {"tenant": ""}, "tenant"),
    ("openb", {"tenant": "a/b"}, "tenant"),
    ("openb", {"kind": "batch"}, "kind"),
    ("openb", {"qos_priority": {"LS": "high"}}, "qos_priority"),
    ("openb", {"qos_priority": ["LS"]}, "qos_priority"),
    ("vc", {"day": "2020/09/01"}, "day"),
    ("vc", {"day": 20200901}, "day"),
]


@pytest.mark.parametrize(("loader", "bad", "field"), _BAD_ARGUMENTS)
def test_a_bad_loader_argument_is_refused_naming_it_before_any_row_is_read(
    tmp_path: Path, loader: str, bad: dict[str, object], field: str
) -> None:
    # (with errors="skip" such an argument made every row of a good file a bad row: the
    # trace loaded empty, no error; with "raise" the error blamed the file's first row)
    from kant.sim.traces.inference import load_vc_gpus

    good = {
        "swf": (load_swf_jobs, "log.swf", SWF_HEAD + SWF_OK),
        "philly": (load_philly_jobs, "philly.csv", PHILLY_HEADER + "2017-10-09 07:01:55,6.0,1,6.0,a\n"),
        "openb": (load_openb_jobs, "pods.csv", OPENB_HEADER + GOOD_POD),
        "vc": (load_vc_gpus, "vc.csv", "date,vc1,total\n2020-09-01,8,8\n"),
    }  # fmt: skip
    fn, name, text = good[loader]
    path = write(tmp_path, name, text)
    kwargs = dict(bad)
    args = (kwargs.pop("path"),) if "path" in kwargs else (path,)
    modes: list[dict[str, object]] = [{}] if loader == "vc" else [{"errors": "raise"},
                                                                  {"errors": "skip"}]  # fmt: skip
    for mode in modes:
        with pytest.raises(ValidationError) as exc:
            fn(*args, **mode, **kwargs)  # type: ignore[operator]
        assert type(exc.value) is ValidationError and exc.value.field == field
        assert exc.value.value is next(iter(bad.values()))
    if "path" not in bad:  # (checked before the file is opened: a missing one is not named)
        with pytest.raises(ValidationError) as exc:
            fn(tmp_path / "missing", **kwargs)  # type: ignore[operator]
        assert exc.value.field == field
    fn(path)  # (the file itself is good)


def test_every_trace_reader_refuses_a_path_that_is_no_path_naming_it() -> None:
    # (a builtin TypeError from pathlib before)
    from kant.sim.traces import openb_nodes
    from kant.sim.traces.inference import (
        load_dlrm_instances,
        load_pai_machines,
        load_spot_nodes,
        load_vc_gpus,
    )

    readers = (load_swf_jobs, load_philly_jobs, load_openb_jobs, load_openb_pods,
               load_openb_nodes, openb_nodes, load_dlrm_instances, load_pai_machines,
               load_spot_nodes, load_vc_gpus)  # fmt: skip
    for reader in readers:
        for bad in (None, 3, b"pods.csv"):
            with pytest.raises(ValidationError) as exc:
                reader(bad)  # type: ignore[operator]
            assert type(exc.value) is ValidationError and exc.value.field == "path", reader


def _repeated_column_tables() -> list[tuple[str, str, str, str]]:
    from kant.sim.traces.inference import DLRM_COLUMNS

    dlrm = ",".join(DLRM_COLUMNS)
    row = "i0,worker,app,4,1,0,16,-1,0,100"
    return [
        ("dlrm", f"{dlrm},role\n{row},worker\n", "role", "load_dlrm_instances"),
        ("spot", "gpu_model,gpu_capacity_num,cpu_num,node_name,cpu_num\nA10,1,8,n0,8\n",
         "cpu_num", "load_spot_nodes"),
        ("vc", "date,vc1,vc2,vc1,total\n2020-04-01,8,16,8,32\n", "vc1", "load_vc_gpus"),
        ("vc spaced", "date,vc1, vc1,total\n2020-04-01,8,8,16\n", "vc1", "load_vc_gpus"),
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ["raise", "skip"])
@pytest.mark.parametrize(
    ("name", "text", "column", "loader"),
    _repeated_column_tables(),
    ids=[t[0] for t in _repeated_column_tables()],
)
def test_a_table_header_naming_a_column_twice_is_refused_naming_the_column(
    tmp_path: Path, name: str, text: str, column: str, loader: str, mode: str
) -> None:
    # (every row then failed with "has 10 columns, the header 9": the header's {name: index}
    # kept one of the two; or the VC table read the second vc1 as the first's GPUs)
    from kant.sim.traces import inference

    p = tmp_path / f"{name}.csv"
    p.write_text(text)
    load = getattr(inference, loader)
    with pytest.raises(InvalidTraceError, match=f"'{column}'.*(twice|more than once)") as e:
        load(p) if loader == "load_vc_gpus" else load(p, errors=mode)
    assert (e.value.field, e.value.where) == ("header", f"{p}:1")


def test_a_limit_reads_no_row_past_it(tmp_path: Path) -> None:
    # (the row after the limit was read: one that is not UTF-8 raised, or was counted skipped)
    p = tmp_path / "philly.csv"
    p.write_bytes(
        b"timestamp,duration,num_gpus,gpu_time,cluster\n"
        b"2017-10-09 07:01:55,66.0,1,66.0,vc1\n"
        b"2017-10-09 07:01:55,66.0,1,66.0,\xff\n"
    )
    trace = load_philly_jobs(p, limit=1, errors="skip")
    assert (trace.report.rows, trace.report.loaded, trace.report.errors) == (1, 1, ())
    assert len(load_philly_jobs(p, limit=1).jobs) == 1
    with pytest.raises(InvalidTraceError, match="UTF-8"):
        load_philly_jobs(p, limit=2)


def test_a_virtual_cluster_column_without_a_name_is_refused_naming_the_header(
    tmp_path: Path,
) -> None:
    # (it became a tenant "t-" holding that column's GPUs)
    from kant.sim.traces.inference import load_vc_gpus

    p = tmp_path / "vc.csv"
    p.write_text("date,vca,,total\n2020-04-01,8,64,72\n")
    with pytest.raises(InvalidTraceError, match="column 3 has no name") as exc:
        load_vc_gpus(p)
    assert exc.value.where == f"{p}:1"


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("m1,V100,96,512,9999", "cap_gpu"),
        ("m1,CPU,96,512,8", "cap_gpu"),
        ("m1,V100,96,512,0", "cap_gpu"),
        ("m1,V100,999999999999999999,512,8", "cap_cpu"),
    ],
    ids=["too-many-gpus", "cpu-model-with-gpus", "gpu-model-without", "cpu-beyond-a-node"],
)
def test_a_pai_machine_no_node_could_be_is_refused_naming_its_line(
    row: str, field: str, tmp_path: Path
) -> None:
    # (9999 GPUs, a CPU machine with 8 GPUs, a V100 with none and 1e21 CPU milli were read)
    from kant.sim.traces.inference import load_pai_machines

    p = tmp_path / "pai_machine_spec.csv"
    p.write_text(f"m0,T4,96,512,2\n{row}\n")
    with pytest.raises(InvalidTraceError) as exc:
        load_pai_machines(p)
    assert (exc.value.field, exc.value.where) == (field, f"{p}:2")


@pytest.mark.parametrize("app", ["app/0", "a/b/c"])
def test_a_dlrm_app_name_no_job_id_can_hold_is_refused_at_its_row(tmp_path: Path, app: str) -> None:
    # (it was read, and the inference workload's Job(id=f"{app}-...") refused it later, as an
    # InvalidJobError naming no file or line)
    from kant.sim.traces.inference import DLRM_COLUMNS, load_dlrm_instances

    p = tmp_path / "dlrm.csv"
    p.write_text(
        ",".join(DLRM_COLUMNS) + "\n"
        "i0,worker,app_1,4,1,0,16,-1,0,100\n"
        f"i1,worker,{app},4,1,0,16,-1,0,100\n"
    )
    with pytest.raises(InvalidTraceError, match="'/'") as e:
        load_dlrm_instances(p)
    assert (e.value.field, e.value.value, e.value.where) == ("app_name", app, f"{p}:3")
    kept = load_dlrm_instances(p, errors="skip")
    assert [i.app for i in kept.instances] == ["app_1"]
    assert [err.where for err in kept.report.errors] == [f"{p}:3"]
