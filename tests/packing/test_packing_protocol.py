"""The FGD packing protocol: workload cloning, arrived-load bookkeeping, determinism and the
command line's JSON. Small hand-written traces keep it fast; one scenario uses a slice of
the real openb trace when the shared trace folder is present."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kant.cli import main
from kant.errors import ValidationError
from kant.metrics.fragmentation import compile_workload, node_fragmentation
from kant.model import MILLI, NodeSpec
from kant.sim.packing import (
    MAX_INFLATE,
    PERCENTS,
    arrival_order,
    curve_points,
    packing,
    run_packing,
    target_workload,
)
from kant.sim.scenarios import parse_seeds
from kant.sim.traces import OpenbPod, trace_dir
from kant.state import ClusterState

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def pod(
    name: str, *, gpus: int = 1, milli: int = 1000, cpu: int = 4000, models: str = ""
) -> OpenbPod:
    return OpenbPod(
        name=name,
        cpu_milli=cpu,
        memory_mib=1024,
        num_gpu=gpus,
        gpu_milli=milli if gpus else 0,
        gpu_models=models,
    )


def small_cluster() -> list[NodeSpec]:
    from kant.testing import node

    return [
        node(f"n{i}", gpus=g, model=m, cpu_milli=32_000, memory_mib=128_000, template=None, nics=0)
        for i, (g, m) in enumerate([(8, "A"), (8, "A"), (4, "B"), (2, "B"), (2, "A")])
    ]  # 24 GPUs


def mixed_pods(n: int = 40) -> list[OpenbPod]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        kind = int(rng.integers(5))
        if kind == 0:
            out.append(pod(f"p{i:03d}", gpus=0, cpu=2000))
        elif kind == 1:
            out.append(pod(f"p{i:03d}", milli=int(rng.choice([250, 500, 700]))))
        elif kind == 2:
            out.append(pod(f"p{i:03d}", gpus=int(rng.choice([1, 2, 4]))))
        elif kind == 3:
            out.append(pod(f"p{i:03d}", milli=500, models="B"))
        else:
            out.append(pod(f"p{i:03d}"))
    return out


# --------------------------------------------------------------------------- workload


def test_cloning_appends_pods_until_the_next_clone_would_pass_the_target() -> None:
    pods = [pod(f"p{i}") for i in range(10)]  # 10 GPUs requested
    order = arrival_order(pods, seed=1, capacity_milli=20 * MILLI, inflate=1.3)
    assert sorted(order[:10]) == list(range(10))  # the originals first, shuffled
    assert len(order) == 26  # 26 GPUs <= 1.3 x 20; a 27th would pass it
    assert sum(pods[i].gpu_request_milli for i in order) <= 26 * MILLI


def test_clones_are_drawn_from_the_whole_original_list() -> None:
    pods = [pod(f"p{i}", milli=100 * (i + 1)) for i in range(9)]
    order = arrival_order(pods, seed=7, capacity_milli=100 * MILLI, inflate=1.3)
    assert len(set(order[9:])) == 9


def test_a_pod_list_above_the_target_is_cut_down_at_random() -> None:
    pods = [pod(f"p{i}", gpus=2) for i in range(30)]  # 60 GPUs
    order = arrival_order(pods, seed=3, capacity_milli=20 * MILLI, inflate=1.3)
    assert len(order) == 13 and len(set(order)) == 13


@contextlib.contextmanager
def fails_within(seconds: float) -> Iterator[None]:
    """Fail the test (instead of hanging it) if the block runs longer than ``seconds``."""

    def expired(_signum: int, _frame: Any) -> None:
        pytest.fail(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_pod_list_that_asks_no_gpus_is_refused_as_nothing_to_pack() -> None:
    pods = [pod("cpu0", gpus=0), pod("cpu1", gpus=0)]
    with fails_within(5), pytest.raises(ValidationError, match="no pod asks for GPUs"):
        arrival_order(pods, seed=1, capacity_milli=20 * MILLI, inflate=1.3)


def test_a_pod_list_that_would_need_too_many_clones_is_refused_before_cloning() -> None:
    pods = [pod("tiny", milli=1)] + [pod(f"cpu{i}", gpus=0) for i in range(99)]
    with fails_within(5), pytest.raises(ValidationError, match="arrivals"):
        arrival_order(pods, seed=1, capacity_milli=100_000 * MILLI, inflate=1.3)


def test_an_inflate_above_the_bound_is_refused() -> None:
    pods = [pod(f"p{i}") for i in range(10)]
    with fails_within(5), pytest.raises(ValidationError, match="inflate"):
        arrival_order(pods, seed=1, capacity_milli=20 * MILLI, inflate=MAX_INFLATE * 2)
    assert len(arrival_order(pods, seed=1, capacity_milli=20 * MILLI, inflate=MAX_INFLATE)) > 0


def test_an_inflate_so_small_that_no_pod_asking_gpus_arrives_is_refused() -> None:
    # 0.0001 x 20 GPUs is 2 milli: every one-GPU pod is removed, and the curve would be empty
    pods = [pod(f"p{i}") for i in range(10)] + [pod("cpu", gpus=0)]
    with fails_within(5), pytest.raises(ValidationError, match="no pod asking for GPUs arrives"):
        arrival_order(pods, seed=1, capacity_milli=20 * MILLI, inflate=0.0001)
    order = arrival_order(pods, seed=1, capacity_milli=20 * MILLI, inflate=0.05)
    assert sum(pods[i].gpu_request_milli for i in order) == MILLI  # one pod: 5% of 20 GPUs


def test_the_workload_shuffle_depends_on_the_seed_and_the_pod_names_only() -> None:
    pods = [pod(f"p{i}") for i in range(50)]
    rev = list(reversed(pods))
    kw: dict[str, Any] = {"capacity_milli": 100 * MILLI, "inflate": 1.3}
    a = arrival_order(pods, seed=42, **kw)
    b = arrival_order(rev, seed=42, **kw)
    assert [pods[i].name for i in a] == [rev[i].name for i in b]
    assert a != arrival_order(pods, seed=43, **kw)


def test_the_target_workload_keeps_the_most_popular_classes_covering_95_percent() -> None:
    pods = [pod(f"a{i}") for i in range(60)] + [pod(f"b{i}", milli=500) for i in range(36)]
    pods += [pod(f"c{i}", gpus=0) for i in range(3)] + [pod("d", gpus=8)]
    classes = target_workload(pods)
    assert [c.weight for c in classes] == pytest.approx([0.60, 0.36])
    assert classes[0].resources.gpus == 1 and classes[1].resources.gpu_milli == 500
    assert all(c.resources.memory_mib == 0 for c in classes)  # the reference ignores memory


# --------------------------------------------------------------------------- bookkeeping


def test_arrived_load_counts_pods_that_fail() -> None:
    from kant.testing import node

    nodes = [node("only", gpus=2, model="A", cpu_milli=8000, memory_mib=8000, template=None)]
    pods = [pod(f"p{i}") for i in range(4)]  # 4 GPUs arrive, 2 fit
    run = run_packing(nodes, pods, "bestfit", seed=0, inflate=1.0)
    assert (run.arrivals, run.placed, run.failed) == (2, 2, 0)  # cut down to 1.0 x 2 GPUs
    run = run_packing(nodes, pods, "bestfit", seed=0, inflate=2.0)
    assert (run.arrivals, run.placed, run.failed) == (4, 2, 2)
    assert run.alloc[100] == 100.0  # 2 of 2 arrived GPUs placed
    assert math.isnan(run.alloc[130])  # no record near 130%: arrivals went 150%, 200%


def test_the_fragmentation_curve_ends_at_the_fragmentation_of_the_final_state() -> None:
    nodes, pods = small_cluster(), mixed_pods()
    run = run_packing(nodes, pods, "fgd", seed=5, inflate=1.3)
    # replay by hand to the end and measure directly
    from kant.model import Job, Role
    from kant.placement import Placer
    from kant.sim.packing import make_policy

    state = ClusterState(nodes)
    cw = compile_workload(target_workload(pods), state.group_names("pool"))
    placer = Placer(make_policy("fgd", seed=5, workload=cw))
    order = arrival_order(pods, seed=5, capacity_milli=24 * MILLI, inflate=1.3)
    for i, k in enumerate(order):
        p = pods[k]
        j = Job(
            id=f"x{i}", gang=False, roles=(Role(resources=p.resources, gpu_models=p.gpu_models),)
        )
        for b in placer.place(j, state.snapshot()).bindings:
            state.bind(b)
    cols = state.columns
    s = np.flatnonzero(cols.alive[: state.num_slots])
    frag = node_fragmentation(
        cols.gpu_free[s], cols.cpu_free[s], cols.mem_free[s], cols.pool_id[s], cw
    )
    allocated = 100.0 - cols.free_milli[s].sum() / (24 * MILLI) * 100.0
    last = max(p for p in PERCENTS if run.frag[p] == run.frag[p])
    assert run.frag[last] == pytest.approx(frag.sum() / (24 * MILLI) * 100.0)
    assert run.alloc[last] == pytest.approx(allocated)


def test_refreshing_the_snapshot_less_often_places_every_pod_the_same() -> None:
    nodes, pods = small_cluster(), mixed_pods()
    for policy in ("gpuclustering", "fgdpp"):
        a = run_packing(nodes, pods, policy, seed=9, refresh_every=1)
        b = run_packing(nodes, pods, policy, seed=9, refresh_every=64)
        np.testing.assert_array_equal(np.asarray(a.alloc), np.asarray(b.alloc))  # nan-safe
        np.testing.assert_array_equal(np.asarray(a.frag), np.asarray(b.frag))
        assert a.placed == b.placed


# --------------------------------------------------------------------------- determinism


def _curves(r: Any) -> tuple[Any, Any]:
    return (r.alloc_at, r.frag_at)


@pytest.mark.parametrize("policy", ["random", "bestfit", "fgd", "fgdpp", "binpack"])
def test_the_same_seed_gives_the_same_curve(policy: str) -> None:
    nodes, pods = small_cluster(), mixed_pods()
    a = run_packing(nodes, pods, policy, seed=11)
    b = run_packing(nodes, pods, policy, seed=11)
    np.testing.assert_array_equal(np.asarray(a.alloc), np.asarray(b.alloc))  # nan-safe
    np.testing.assert_array_equal(np.asarray(a.frag), np.asarray(b.frag))
    assert a.placed == b.placed


def test_seeds_in_worker_processes_give_the_same_means(tmp_path: Path) -> None:
    pods_csv, nodes_csv = write_trace(tmp_path)
    one = packing(pods_csv, nodes_csv, "bestfit", seeds=(1, 2, 3), workers=1)
    two = packing(pods_csv, nodes_csv, "bestfit", seeds=(1, 2, 3), workers=2)
    assert _curves(one) == _curves(two)
    assert _curves(one) != _curves(packing(pods_csv, nodes_csv, "bestfit", seeds=(4,)))


# --------------------------------------------------------------------------- command line


def write_trace(tmp_path: Path) -> tuple[Path, Path]:
    pods_csv = tmp_path / "pods.csv"
    rows = [POD_HEADER]
    for p in mixed_pods(30):
        rows.append(
            f"{p.name},{p.cpu_milli},{p.memory_mib},{p.num_gpu},{p.gpu_milli},"
            + "|".join(sorted(p.gpu_models))
        )
    pods_csv.write_text("\n".join(rows) + "\n")
    nodes_csv = tmp_path / "nodes.csv"
    nodes_csv.write_text(
        "\n".join([NODE_HEADER, "n0,32000,131072,8,A", "n1,32000,131072,4,B", "n2,16000,65536,2,A"])
        + "\n"
    )
    return pods_csv, nodes_csv


def test_the_json_line_has_the_documented_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods_csv, nodes_csv = write_trace(tmp_path)
    argv = ["packing", "--pods", str(pods_csv), "--nodes", str(nodes_csv), "--policy", "fgd"]
    assert main([*argv, "--seeds", "1-2", "--workers", "1", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    doc = json.loads(out[-1])
    assert set(doc) == {"policy", "trace", "seeds", "alloc_at", "frag_at", "wall_s"}
    assert doc["policy"] == "fgd" and doc["trace"] == "pods" and doc["seeds"] == [1, 2]
    assert set(doc["alloc_at"]) <= {str(p) for p in PERCENTS} and "0" in doc["alloc_at"]
    assert all(0 <= v <= 100 for v in doc["alloc_at"].values())
    assert len(out) > 2 and "alloc" in " ".join(out[:-1]).lower()  # a readable table first


def test_list_policies_names_the_baselines_and_kant_strategies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["packing", "--list-policies"]) == 0
    names = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert {"random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd", "fgdpp"} <= names
    assert "binpack" in names


def test_list_policies_with_json_ends_with_one_json_object_of_the_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # (--json was ignored here: the last line was a table row)
    assert main(["packing", "--list-policies", "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    doc = json.loads(out[-1])
    assert list(doc) == ["policies"] and len(doc["policies"]) == len(out) - 1
    assert doc["policies"]["fgd"] == "FGD paper baseline" and "binpack" in doc["policies"]


def test_a_seed_named_twice_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (it ran the seed twice and averaged it with itself, reporting "seeds": [1, 1])
    pods_csv, nodes_csv = write_trace(tmp_path)
    base = ["packing", "--pods", str(pods_csv), "--nodes", str(nodes_csv), "--workers", "1"]
    assert main([*base, "--seeds", "1,1-2", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--seeds '1,1-2': name each seed once" in err


def test_a_plot_in_a_folder_not_made_yet_is_written_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the check before the run accepted it; the plot then failed after the whole run)
    pods_csv, nodes_csv = write_trace(tmp_path)
    png = tmp_path / "plots" / "fgd" / "curve.png"
    argv = ["packing", "--pods", str(pods_csv), "--nodes", str(nodes_csv), "--seeds", "1"]
    assert main([*argv, "--workers", "1", "--plot", str(png)]) == 0
    assert png.is_file() and f"plot: {png}" in capsys.readouterr().out


def test_bad_arguments_are_reported_not_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods_csv, nodes_csv = write_trace(tmp_path)
    base = ["packing", "--pods", str(pods_csv), "--nodes", str(nodes_csv)]
    assert main([*base, "--seeds", "9-3"]) == 2
    assert main([*base, "--policy", "nope"]) == 2
    assert main(["packing", "--policy", "fgd"]) == 2
    assert "seeds" in capsys.readouterr().err


def test_a_pod_file_that_asks_no_gpus_is_refused_naming_the_file(tmp_path: Path) -> None:
    pods_csv = tmp_path / "cpu_pods.csv"
    pods_csv.write_text(f"{POD_HEADER}\np0,1000,100,0,0,\n")
    _, nodes_csv = write_trace(tmp_path)
    code = (
        "import sys; from kant.cli import main; "
        f"sys.exit(main(['packing', '--workers', '1', '--seeds', '1', '--pods', {str(pods_csv)!r},"
        f" '--nodes', {str(nodes_csv)!r}]))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert r.returncode == 2, r.stderr
    assert "cpu_pods.csv" in r.stderr and "no pod asks for GPUs" in r.stderr
    assert len(r.stderr.splitlines()) == 1 and r.stdout == ""


def test_seed_ranges_and_lists_are_parsed() -> None:
    assert parse_seeds("42-44,50") == (42, 43, 44, 50)
    with pytest.raises(ValidationError):
        parse_seeds("x")


@pytest.mark.parametrize("text", ["1,,2", "0-3,", ",1", " , "])
def test_an_empty_item_in_a_seed_list_is_refused_not_dropped(text: str) -> None:
    with pytest.raises(ValidationError, match="empty item"):
        parse_seeds(text)


@pytest.mark.parametrize("text", ["\u0664\u0662", "4_2", "-1", "1-", "2-1", "9" * 19])
def test_a_seed_that_is_not_ascii_digits_is_refused_not_read_as_another_number(text: str) -> None:
    # (int() takes Arabic-Indic digits and underscores: "٤٢" was seed 42)
    with pytest.raises(ValidationError, match="seeds"):
        parse_seeds(text)


# --------------------------------------------------------------------------- real trace


@pytest.mark.skipif(trace_dir() is None, reason="shared openb traces not present")
def test_a_slice_of_the_openb_trace_fills_the_cluster_the_reference_way() -> None:
    from kant.sim.packing import _load_nodes, _load_pods

    base = trace_dir()
    assert base is not None
    folder = base / "alibaba-openb-v2023"
    nodes = list(_load_nodes(str(folder / "openb_node_list_gpu_node.csv")))[:120]
    pods = list(_load_pods(str(folder / "openb_pod_list_default.csv")))[:700]
    total = sum(n.gpus for n in nodes) * MILLI
    fgd = run_packing(nodes, pods, "fgd", seed=42)
    rnd = run_packing(nodes, pods, "random", seed=42)
    assert fgd.arrivals == len(arrival_order(pods, seed=42, capacity_milli=total, inflate=1.3))
    assert fgd.alloc[130] > rnd.alloc[130] > 50.0


def test_curves_read_back_from_json_are_plotted_in_arrived_order() -> None:
    # json.dumps(sort_keys=True) orders "10" before "2"
    at = json.loads(json.dumps({str(k): float(k) for k in (0, 2, 10, 100, 130)}, sort_keys=True))
    assert list(at) == ["0", "10", "100", "130", "2"]
    assert [x for x, _v in curve_points(at)] == [0, 2, 10, 100, 130]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"seeds": (-1,)}, "seeds"),
        ({"seeds": (1.5,)}, "seeds"),
        ({"seeds": ("a",)}, "seeds"),
        ({"seeds": "12"}, "seeds"),
        ({"seeds": 5}, "seeds"),
        ({"seeds": (True,)}, "seeds"),
        ({"policy": None}, "policy"),
        ({"policy": 5}, "policy"),
        ({"workers": "2"}, "workers"),
        ({"workers": 0}, "workers"),
        ({"inflate": math.nan}, "inflate"),
        ({"inflate": 0}, "inflate"),
    ],
)
def test_packing_refuses_arguments_of_the_wrong_kind_naming_them(
    kw: dict[str, Any], field: str, tmp_path: Path
) -> None:
    # (numpy's ValueError, TypeError or AttributeError; a bool seed was refused only after
    # numpy had used it)
    pods_csv, nodes_csv = write_trace(tmp_path)
    args: dict[str, Any] = {"policy": "bestfit", "seeds": (1,), **kw}
    with pytest.raises(ValidationError, match=f"field '{field}' ="):
        packing(pods_csv, nodes_csv, **args)
