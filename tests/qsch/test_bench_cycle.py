"""``kant bench cycle`` runs end to end on a small cluster and reports its figures."""

from __future__ import annotations

import json

from kant.cli import main


def test_bench_cycle_reports_latency_and_throughput(capsys: object) -> None:
    assert main(["bench", "cycle", "--nodes", "32", "--pending", "20", "--cycles", "3",
                 "--json"]) == 0  # fmt: skip
    out = capsys.readouterr().out.strip().splitlines()  # type: ignore[attr-defined]
    figures = json.loads(out[-1])
    assert figures["bench"] == "cycle" and figures["pending"] == 20
    assert figures["p50_ms"] > 0 and figures["p99_ms"] >= figures["p50_ms"]
    assert figures["jobs_per_s"] > 0


def test_the_benchmarks_python_calls_refuse_what_their_options_refuse() -> None:
    """Called from Python, 0 repeats failed at the end in ``statistics``, a negative seed in
    NumPy, and a NaN fill was reported as measured."""
    import math

    import pytest

    from kant.bench.cycle import bench_cycle
    from kant.bench.place import bench_gang, bench_place
    from kant.bench.snapshot import bench_snapshot
    from kant.bench.soak import bench_soak
    from kant.errors import InvalidConfigError

    for call, field in [
        (lambda: bench_place(1, 0), "pods"),
        (lambda: bench_place(1, 1, seed=-1), "seed"),
        (lambda: bench_gang(1, 1, gangs=0), "gangs"),
        (lambda: bench_gang(1, 1, fill=math.nan), "fill"),
        (lambda: bench_gang(1, 1, fill=1.0), "fill"),
        (lambda: bench_snapshot(1, 1, repeats=0), "repeats"),
        (lambda: bench_snapshot(1, -1), "changed"),
        (lambda: bench_cycle(1, 1, cycles=0), "cycles"),
        (lambda: bench_cycle(1, True), "pending"),
        (lambda: bench_soak(2, 2, cycles=3, bind_fail_one_in=-1), "bind_fail_one_in"),
    ]:
        with pytest.raises(InvalidConfigError, match=f"field '{field}' ="):
            call()
    assert bench_soak(2, 2, cycles=3, node_loss_every=0, gpu_fault_every=0)  # (0: off)
