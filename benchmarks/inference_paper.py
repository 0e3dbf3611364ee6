"""The figures of docs/experiments.md's section 5.2: the ``inference-paper`` scenario under
E-Spread (with and without its inference zone), E-Binpack and spread, at the three cluster
sizes. Prints one table; ``--json`` for the raw numbers. About 10 s.

    python benchmarks/inference_paper.py
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kant.sim.scenarios import PolicySet, inference_paper
from kant.sim.simulator import Progress, Simulator
from kant.state import ClusterState


def observe(cluster: ClusterState, gpn: dict[str, int]) -> tuple[int, int, float, float]:
    """One look at the cluster: wholly free GPU nodes, the fewest fragmented nodes any
    placement could have with the same GPUs allocated per model (a model's pool whose
    allocated GPUs are not a multiple of its node size has at least one partly used node),
    and replica spread over the services with 2+ running replicas (the largest share of
    one service's replicas on one node: mean over the services, and the worst)."""
    free_nodes = 0
    alloc: dict[str, int] = {}
    per_job: dict[str, dict[str, int]] = {}
    for spec in cluster.nodes():
        if not spec.gpus or spec.gpu_model is None:
            continue
        pods = cluster.pods_on(spec.name)
        used = set()
        for p in pods:
            used.update(cluster.binding(p).gpus)
            per_job.setdefault(p.job, {})
            per_job[p.job][spec.name] = per_job[p.job].get(spec.name, 0) + 1
        if not used and cluster.is_healthy(spec.name):
            free_nodes += 1
        alloc[spec.gpu_model] = alloc.get(spec.gpu_model, 0) + len(used)
    floor = sum(1 for m, a in alloc.items() if a % gpn[m])
    shares = [
        max(on.values()) / sum(on.values())
        for job, on in per_job.items()
        if not job.startswith("ep-") and sum(on.values()) >= 2
    ]
    mean = sum(shares) / len(shares) if shares else 0.0
    return free_nodes, floor, mean, max(shares, default=0.0)


def measure(
    size: str,
    placement: str,
    *,
    zone: bool = True,
    load: float = 0.95,
    caps: bool = True,
    host_resources: bool = True,
) -> dict[str, Any]:
    """One run's figures: GAR / SOR / GFR over the observation window, the GFR floor, the
    wholly free nodes and the replica spread (time averages over the window), the waits of
    the services and of the large jobs, and each tenant's time-averaged quota use."""
    sc = inference_paper(size=size, zone=zone, load=load, caps=caps, host_resources=host_resources)
    gpn = {n.gpu_model: n.gpus for n in sc.nodes if n.gpu_model is not None}
    looks: list[tuple[float, tuple[int, int, float, float]]] = []
    sim = Simulator(
        sc.scheduler(PolicySet(queueing="backfill", placement=placement)),
        sc.jobs,
        sc.config,
        progress_every=1,
    )

    def look(p: Progress) -> None:
        looks.append((p.now, observe(sim.s.cluster, gpn)))

    sim.progress = look
    res = sim.run()
    s = res.summary
    t0, t1 = s.window_start, s.window_end
    avg = [0.0, 0.0, 0.0, 0.0]
    worst = 0.0
    for (ta, obs), (tb, _) in zip(looks, [*looks[1:], (t1, looks[-1][1])], strict=True):
        a, b = max(ta, t0), min(tb, t1)
        if b > a:
            for k in range(4):
                avg[k] += obs[k] * (b - a) / (t1 - t0)
            worst = max(worst, obs[3])
    big = [r for r in res.records if r.gang]
    svc = [r for r in res.records if not r.gang]

    def wait(r: Any) -> float:
        """Until every pod first ran (a service: its last replica; a gang: its start), the
        end of the run for a job with a pod that never did."""
        return (r.all_started_at if r.all_started_at is not None else s.end) - r.submitted_at

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
        "placement": placement
        + ("" if zone else " (no zone)")
        + ("" if caps else " (no caps)")
        + ("" if host_resources else " (GPUs only)"),
        "gpus": sc.total_gpus,
        "nodes": len(sc.nodes),
        "gar": s.gar,
        "gar_mean": s.gar_mean,
        "sor": s.sor,
        "gfr": s.gfr,
        "gfr_floor": avg[1] / sum(1 for n in sc.nodes if n.gpus),
        "whole_free_nodes": avg[0],
        "replica_share_mean": avg[2],
        "replica_share_worst": worst,
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
    runs += [measure("i2", "espread", caps=False)]
    runs += [measure("i2", "espread", caps=False, host_resources=False)]
    runs += [measure(size, "espread") for size in ("i7", "a10")]
    if args.json:
        print(json.dumps(runs, indent=1))
        return
    head = f"{'size':4} {'placement':34} {'GPUs':>4} {'GAR':>6} {'SOR':>6} {'GFR':>6}"
    head += f" {'floor':>6} {'free nodes':>10} {'share':>5} {'worst':>5}"
    head += f" {'svc>tick':>8} {'svc wait max':>12} {'big wait mean':>13} {'big wait max':>12}"
    print(head)
    for r in runs:
        print(
            f"{r['size']:4} {r['placement']:34} {r['gpus']:>4} {r['gar_mean']:>6.1%}"
            f" {r['sor']:>6.1%} {r['gfr']:>6.1%} {r['gfr_floor']:>6.1%}"
            f" {r['whole_free_nodes']:>10.2f} {r['replica_share_mean']:>5.2f}"
            f" {r['replica_share_worst']:>5.2f} {r['services_waiting_over_tick']:>8}"
            f" {r['service_wait_max'] / 60:>10.1f} m"
            f" {r['big_wait_mean'] / 3600:>11.2f} h {r['big_wait_max'] / 3600:>10.2f} h"
        )
    print("\nquota (GPUs) and time-averaged use in the window, i2 with E-Spread:")
    for key, (q, u) in runs[0]["quota_use"].items():
        print(f"  {key:22} quota {q:5.0f}  used {u:6.2f}  ({u / q:.0%})")


if __name__ == "__main__":
    main()
