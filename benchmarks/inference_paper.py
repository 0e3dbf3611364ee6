"""The figures of docs/experiments.md's section 5.2: the ``inference-paper`` scenario under
E-Spread (with and without its inference zone), E-Binpack and spread, at the three cluster
sizes. Prints one table; ``--json`` for the raw numbers. About 10 s.

    python benchmarks/inference_paper.py
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kant.sim.scenarios import PolicySet, inference_paper, run_scenario


def measure(size: str, placement: str, *, zone: bool = True, load: float = 0.9) -> dict[str, Any]:
    """One run's figures: GAR / SOR / GFR over the observation window, the waits of the
    services and of the large jobs, and each tenant's time-averaged quota use."""
    sc = inference_paper(size=size, zone=zone, load=load)
    res = run_scenario(sc, PolicySet(queueing="backfill", placement=placement))
    s = res.summary
    t0, t1 = s.window_start, s.window_end
    big = [r for r in res.records if r.gang]
    svc = [r for r in res.records if not r.gang]

    def wait(r: Any) -> float:
        return (r.started_at if r.started_at is not None else s.end) - r.submitted_at

    model = {j.id: next(iter(j.roles[0].gpu_models)) for j in sc.jobs}
    used: dict[tuple[str, str], float] = {}
    for r in res.records:
        if r.started_at is None:
            continue
        a, b = max(r.started_at, t0), min(r.finished_at if r.finished_at is not None else s.end, t1)
        if b > a:
            key = (r.tenant, model[r.job_id])
            used[key] = used.get(key, 0.0) + r.gpus * (b - a) / (t1 - t0)
    quota = {(q.tenant, q.gpu_model): q.nominal / 1000 for q in sc.quotas or ()}
    return {
        "size": size,
        "placement": placement + ("" if zone else " (no zone)"),
        "gpus": sc.total_gpus,
        "nodes": len(sc.nodes),
        "gar": s.gar,
        "gar_mean": s.gar_mean,
        "sor": s.sor,
        "gfr": s.gfr,
        "service_wait_max": max((wait(r) for r in svc), default=0.0),
        "services_waiting_over_tick": sum(1 for r in svc if wait(r) > sc.config.tick),
        "big_wait_mean": sum(wait(r) for r in big) / len(big) if big else 0.0,
        "big_wait_max": max((wait(r) for r in big), default=0.0),
        "quota_use": {f"{t}/{m}": [quota[t, m], round(used.get((t, m), 0.0), 2)] for t, m in quota},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    runs = [measure("i2", "espread")]
    runs += [measure("i2", "espread", zone=False), measure("i2", "ebinpack")]
    runs += [measure("i2", "spread")]
    runs += [measure(size, "espread") for size in ("i7", "a10")]
    if args.json:
        print(json.dumps(runs, indent=1))
        return
    head = f"{'size':5} {'placement':22} {'GPUs':>4} {'GAR med':>7} {'GAR mean':>8}"
    head += f" {'SOR':>6} {'GFR':>6}"
    head += f" {'svc wait max':>12} {'svc > tick':>10} {'big wait mean':>13} {'big wait max':>12}"
    print(head)
    for r in runs:
        print(
            f"{r['size']:5} {r['placement']:22} {r['gpus']:>4} {r['gar']:>7.1%}"
            f" {r['gar_mean']:>8.1%} {r['sor']:>6.1%} {r['gfr']:>6.1%}"
            f" {r['service_wait_max'] / 60:>10.1f} m"
            f" {r['services_waiting_over_tick']:>10} {r['big_wait_mean'] / 3600:>11.2f} h"
            f" {r['big_wait_max'] / 3600:>10.2f} h"
        )
    print("\nquota (GPUs) and time-averaged use in the window, i2 with E-Spread:")
    for key, (q, u) in runs[0]["quota_use"].items():
        print(f"  {key:22} quota {q:5.0f}  used {u:6.2f}  ({u / q:.0%})")


if __name__ == "__main__":
    main()
