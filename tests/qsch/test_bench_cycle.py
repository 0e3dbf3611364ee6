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
