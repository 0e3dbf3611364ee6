"""How many ``PodScheduled`` condition writes the Kubernetes shim makes for waiting pods while
running pods finish one by one, and what its cycles cost: with ``conditionIntervalSeconds`` 0
(every change of a reason's wording written) and with the default, both with no limit
on the writes of one cycle; then with every default (``statusWritesPerCycle`` too).

    python benchmarks/k8s_condition_writes.py [--nodes 16] [--waiting 200] [--finishes 24]
                                              [--step 5]

Against a real etcd + kube-apiserver (``scripts/kube-testenv provision``): ``--nodes`` fake
8-GPU nodes, each full with four running 2-GPU pods; ``--waiting`` pods of 8 GPUs each wait
(their reason: so many GPUs free, too few). The shim is driven step by step (no watch, no
loop; its clock moves ``--step`` seconds per cycle, so that the default run spans several of
the default interval): a first cycle, then ``--finishes`` running pods finish, each on
another node while nodes last (so that no waiting pod fits for a while), with a cycle after
each. Printed per setting: the condition writes of the first cycle and of the cycles after,
and the median and largest wall time of those cycles.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from kant.config import parse_config
from kant.k8s.demo import create_nodes, pod_body
from kant.k8s.settings import K8sSettings
from kant.k8s.shim import Shim
from kant.k8s.testenv import KubeTestEnv


def run(
    env: KubeTestEnv, ns: str, interval: float, per_cycle: int, a: argparse.Namespace
) -> dict[str, Any]:
    api = env.api
    api.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    running = [f"r-{i:04d}" for i in range(4 * a.nodes)]
    for name in running:
        api.post(f"/api/v1/namespaces/{ns}/pods", pod_body(ns, name, 2))
    for i in range(a.waiting):
        api.post(f"/api/v1/namespaces/{ns}/pods", pod_body(ns, f"w-{i:04d}", 8))
    clock = [1000.0]
    cfg = parse_config(
        {"kubernetes": {"conditionIntervalSeconds": interval, "statusWritesPerCycle": per_cycle}}
    )
    shim = Shim(api, cfg, clock=lambda: clock[0])
    writes = [0]
    patch = api.patch

    def counted(path: str, body: Any, **kw: Any) -> Any:
        conds = body.get("status", {}).get("conditions") or [{}]
        if conds[0].get("reason") == "Unschedulable":
            writes[0] += 1
        return patch(path, body, **kw)

    api.patch = counted  # type: ignore[method-assign]
    try:
        shim.sync()
        shim.cycle()
        shim.reap(wait=True)
        first = writes[0]
        writes[0] = 0
        # one finish per node first (the r pods were bound four to a node, in order)
        by_node: dict[str, list[str]] = {}
        for name in running:
            pod = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            by_node.setdefault(pod["spec"].get("nodeName") or "", []).append(name)
        order = [p for k in range(4) for ps in by_node.values() if k < len(ps) for p in [ps[k]]]
        walls = []
        for name in order[: a.finishes]:
            pod = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            api.delete(f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})
            shim.handle("Pod", "DELETED", pod)
            clock[0] += a.step
            t0 = time.perf_counter()
            shim.cycle()
            shim.reap(wait=True)
            walls.append(time.perf_counter() - t0)
    finally:
        api.patch = patch  # type: ignore[method-assign]
        api.delete(f"/api/v1/namespaces/{ns}/pods", {"gracePeriodSeconds": 0})
    return {
        "interval_s": interval,
        "writes_per_cycle": per_cycle,
        "first_cycle_writes": first,
        "writes_after": writes[0],
        "cycles_after": len(walls),
        "cycle_ms_p50": round(1000 * statistics.median(walls), 1),
        "cycle_ms_max": round(1000 * max(walls), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--waiting", type=int, default=200)
    ap.add_argument("--finishes", type=int, default=24)
    ap.add_argument("--step", type=float, default=5.0, help="simulated seconds per cycle")
    a = ap.parse_args()
    with KubeTestEnv() as env:
        create_nodes(env.api, a.nodes)
        default = K8sSettings()
        unlimited = 10**9
        rows = [
            run(env, "every-change", 0.0, unlimited, a),
            run(env, "by-interval", default.condition_interval_seconds, unlimited, a),
            run(env, "defaults", default.condition_interval_seconds,
                default.status_writes_per_cycle, a),
        ]  # fmt: skip
    print(
        f"{a.nodes} nodes, {4 * a.nodes} running pods, {a.waiting} waiting, "
        f"{a.finishes} finish, {a.step:g} s apart"
    )
    for r in rows:
        print(
            f"conditionIntervalSeconds {r['interval_s']:>4g}, statusWritesPerCycle "
            f"{r['writes_per_cycle']:>10}: first cycle "
            f"{r['first_cycle_writes']} writes; then {r['writes_after']} writes in "
            f"{r['cycles_after']} cycles, cycle p50 {r['cycle_ms_p50']} ms, "
            f"max {r['cycle_ms_max']} ms"
        )


if __name__ == "__main__":
    main()
