"""``kant bench place`` and ``kant bench gang`` time only what they say they time: placements
that succeeded, after a warm-up, with the failures counted apart."""

from __future__ import annotations

import types
from typing import Any

import pytest

import kant.bench.place as place_bench
from kant.bench.place import bench_gang, bench_place
from kant.placement import Placer
from kant.testing import job

COLD_S, PLACED_S, FAILED_S = 5.0, 0.01, 1.0
"""What a placement takes on the fake clock: the first of each placer (it builds its caches
for the cluster), one that placed, one that failed."""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The benchmarks' clock, moved only by placements: a placer's first takes COLD_S, one
    that places PLACED_S, one that fails FAILED_S; every other gang fails (placed instead as
    a gang larger than the cluster)."""
    now = [0.0]
    calls = [0]

    class TimedPlacer(Placer):
        first = True

        def place(self, j: Any, snap: Any, *args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if j.num_pods > 1 and calls[0] % 2 == 0:
                j = job(j.id, gpus=8, replicas=snap.num_slots + 1)
            res = super().place(j, snap, *args, **kwargs)
            now[0] += COLD_S if self.first else PLACED_S if res.ok else FAILED_S
            self.first = False
            return res

    monkeypatch.setattr(place_bench, "Placer", TimedPlacer)
    monkeypatch.setattr(place_bench, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    return now


def test_bench_place_reports_pods_placed_per_second_and_times_only_the_placed_pods(
    clock: list[float],
) -> None:
    # (pods_per_s divided the pods tried, failed ones too, by the wall time; a failed
    # placement's time was in the percentiles, and so was the first, cold call's)
    f = bench_place(20, 40, strategy="spread", mixed=True)
    # (the timed placer's first call, which places, counts in the wall time only)
    assert f["pods_per_s"] == round(35 / (COLD_S + 34 * PLACED_S + 5 * FAILED_S), 1)
    assert f["p50_us"] == f["p99_us"] == PLACED_S * 1e6
    assert f["placed"] == 35 and f["failed"] == 5


def test_the_warm_up_placement_changes_no_placement_of_the_benchmark() -> None:
    for strategy in ("ebinpack", "spread", "random"):
        got = bench_place(20, 40, strategy=strategy, mixed=True)
        snap = place_bench.ClusterState(place_bench.fat_tree_nodes(20)).snapshot()
        placer, placed = Placer(strategy), 0
        sizes = place_bench.np.random.default_rng(3).choice([1, 2, 4, 8], size=40).tolist()
        for i, g in enumerate(sizes):
            j = job(f"p{i}", gpus=g, cpu_milli=4000 * g, memory_mib=32768 * g, nics=0)
            placed += len(placer.place(j, snap).bindings)
        assert got["placed"] == placed, strategy


def test_bench_gang_times_the_gangs_placed_and_those_that_failed_apart(
    clock: list[float],
) -> None:
    # (a failed gang's time was in ms_per_gang and p99_ms, and a run where none placed
    # reported how fast gangs failed as the time to place one)
    f = bench_gang(20, 8, gangs=10, strategy="binpack")
    assert f["ms_per_gang"] == f["p99_ms"] == PLACED_S * 1000
    assert f["placed_gangs"] == 5 and f["failed_gangs"] == 5
    assert f["ms_per_failed_gang"] == FAILED_S * 1000


def test_bench_gang_where_no_gang_fits_reports_no_time_to_place_one() -> None:
    f = bench_gang(20, 10, gangs=3, strategy="binpack")
    assert f["ms_per_gang"] is None and f["p99_ms"] is None
    assert f["placed_gangs"] == 0 and f["failed_gangs"] == 3
    assert f["ms_per_failed_gang"] > 0
