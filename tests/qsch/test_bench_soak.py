"""``kant bench soak`` runs end to end with churn and reports per-third figures."""

from __future__ import annotations

import gc
import json

import pytest

from kant.bench import CollectorClock, calibrated_ratio, speed_probe
from kant.bench.soak import bench_soak, work_by_thirds
from kant.cli import main
from kant.errors import InvalidConfigError


def test_bench_soak_reports_thirds_and_injects_every_kind_of_churn(capsys: object) -> None:
    assert main(["bench", "soak", "--nodes", "64", "--pending", "30", "--cycles", "12",
                 "--node-loss-every", "3", "--node-down-cycles", "2", "--gpu-fault-every", "3",
                 "--gpu-down-cycles", "2", "--bind-fail-one-in", "2", "--json"]) == 0  # fmt: skip
    out = capsys.readouterr().out.strip().splitlines()  # type: ignore[attr-defined]
    f = json.loads(out[-1])
    assert f["bench"] == "soak" and f["cycles"] == 12
    assert f["cpu_p50_ms_first"] > 0 and f["cpu_p50_ms_last"] > 0 and f["last_vs_first"] > 0
    assert f["probe_ms_first"] > 0 and f["probe_ms_last"] > 0
    assert f["last_vs_first_calibrated"] > 0
    assert f["gc_ms_first"] >= 0 and f["gc_ms_last"] >= 0 and len(f["gc_collections"]) == 3
    assert f["nodes_lost"] >= 3 and f["nodes_back"] >= 2
    assert f["gpu_faults"] >= 3 and f["gpu_repairs"] >= 1
    assert f["binding_failures"] >= 1


def test_the_soak_does_the_same_work_in_every_run() -> None:
    keys = ("running_jobs", "pending_jobs", "nodes_lost", "gpu_faults", "binding_failures",
            "finished_jobs", "placed_per_cycle", "victims_per_cycle",
            *(f"{k}_{third}" for k in ("placed_pods", "victim_pods", "preemption_searches",
                                       "running_jobs", "waiting_gpus")
              for third in ("first", "last")))  # fmt: skip
    a = bench_soak(48, 20, cycles=6, node_loss_every=2, gpu_fault_every=2, bind_fail_one_in=3)
    b = bench_soak(48, 20, cycles=6, node_loss_every=2, gpu_fault_every=2, bind_fail_one_in=3)
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}


def test_a_machine_slowing_down_is_not_read_as_the_code_slowing_down() -> None:
    cycles, probes = [50.0, 52.0, 48.0], [1.5, 1.6, 1.4]
    slower_machine = ([2 * c for c in cycles], [2 * p for p in probes])
    assert calibrated_ratio(*slower_machine, cycles, probes) == 1.0
    slower_code = ([2 * c for c in cycles], probes)
    assert calibrated_ratio(*slower_code, cycles, probes) == 2.0
    # the median of per-cycle ratios: one cycle hit by a pause moves nothing
    paused = ([50.0, 520.0, 48.0], probes)
    assert abs(calibrated_ratio(*paused, cycles, probes) - 1.0) < 0.05


def test_the_speed_probe_times_a_fixed_piece_of_work() -> None:
    times = [speed_probe() for _ in range(5)]
    assert all(0 < t < 1000 for t in times)


def test_the_collector_clock_sees_a_collection_and_stops_at_exit() -> None:
    with CollectorClock() as clock:
        gc.collect()
    assert clock.collections[2] == 1 and clock.ms > 0
    gc.collect()
    assert clock.collections[2] == 1  # no longer listening


@pytest.mark.parametrize("cycles", [0, 2, 2.5, True])
def test_a_soak_of_fewer_than_three_cycles_has_no_thirds_and_says_so(cycles: object) -> None:
    with pytest.raises(InvalidConfigError, match="cycles"):
        bench_soak(48, 20, cycles=cycles)  # type: ignore[arg-type]


def test_the_soak_says_what_each_third_of_the_run_had_to_do() -> None:
    f = bench_soak(64, 30, cycles=9, node_loss_every=3, gpu_fault_every=3, bind_fail_one_in=4)
    assert f["placed_pods_first"] > 0
    # the bench cycle's jobs ask for 1 to 512 whole GPUs: a mean in GPUs, not in milli
    assert 1 <= f["waiting_gpus_first"] <= 512 and 1 <= f["waiting_gpus_last"] <= 512
    # each running job holds at least one of the 512 GPUs
    assert 0 < f["running_jobs_first"] <= 512 and 0 < f["running_jobs_last"] <= 512


def test_the_work_of_a_third_is_summed_or_its_median_taken() -> None:
    nine = [float(i) for i in range(1, 10)]
    work = {"placed_pods": nine, "victim_pods": [0.0] * 8 + [5.0],
            "preemption_searches": nine, "running_jobs": [3.0, 1.0, 2.0, 0, 0, 0, 9.0, 7.0, 8.0],
            "waiting_gpus": [1.5, 2.5, 9.0, 0, 0, 0, 4.0, 4.0, 4.5]}  # fmt: skip
    got = work_by_thirds(work)
    assert got["placed_pods_first"] == 6 and got["placed_pods_last"] == 24  # 1+2+3, 7+8+9
    assert got["victim_pods_first"] == 0 and got["victim_pods_last"] == 5
    assert got["running_jobs_first"] == 2.0 and got["running_jobs_last"] == 8.0  # medians
    assert got["waiting_gpus_first"] == 2.5 and got["waiting_gpus_last"] == 4.0


def test_the_soak_reports_the_median_and_p99_of_cpu_and_wall_time_for_each_third() -> None:
    # (the docstring promised per-third medians of the wall time too; only the p99s were there)
    f = bench_soak(48, 20, cycles=6, node_loss_every=0, gpu_fault_every=0)
    for third in ("first", "middle", "last"):
        for clock in ("cpu", "wall"):
            assert 0 < f[f"{clock}_p50_ms_{third}"] <= f[f"{clock}_p99_ms_{third}"]
