"""What node selectors, taints and node preferences cost the Placer, as ratios to a cluster
and jobs without them, measured in one run (pod labels and pod anti-affinity too).

    python benchmarks/node_selection.py [--nodes 12500] [--jobs 2000] [--rounds 5] [--json]

The cluster is ``kant bench place``'s 8-GPU fat tree. Nine variants, each placing the same
``--jobs`` jobs (1, 2, 4 or 8 GPUs, drawn with a fixed seed; one in ten a gang of four 8-GPU
pods that requires one leaf) one at a time on a fresh snapshot of an empty cluster, timed by
this thread's CPU clock:

- ``plain``: no node has labels or taints, no role a selector (the baseline);
- ``labelled``: every node has 12 labels (hostname, architecture, a pool ``a``..``d`` by leaf,
  a rack, ...), no role reads them: the decisions must equal ``plain``'s;
- ``selected``: the same nodes, every role selects ``pool In [b]`` (a quarter of the nodes);
- ``tainted``: the labelled nodes, one in ten with a ``NoSchedule`` taint, roles without a
  selector, half of them tolerating it (every role is then restricted by the taints);
- ``preferring``: the labelled nodes, every role preferring ``pool In [b]`` (weight 50): its
  pods go there while it has room;
- ``soft-tainted``: the labelled nodes, one in ten with a ``PreferNoSchedule`` taint, half
  the roles tolerating it (the others try the untainted nodes first);
- ``pod-labelled``: the plain nodes, every job's pods labelled ``app=a<k>`` (50 apps), no pod
  terms: the snapshot notes every pod placed; the decisions must equal ``plain``'s;
- ``anti-affine``: the same labels, and every role with a required anti-affinity term on
  the hostname against its own app: no node holds two pods of one app (a gang's pods too);
- ``soft-spread``: the same labels, every role with a preferred anti-affinity term (weight
  100) on the hostname against its own app instead: each lone pod goes to a node holding
  the fewest pods of its app (gangs do not read it).

A fresh :class:`~kant.placement.Placer` per run, so each run pays the allowed-node mask of
its (selector, tolerations) once. Rounds alternate the variants; printed are the medians
(ms per run and µs per job) and each variant's median over ``plain``'s, and the cost of
building the cluster state with and without labels.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import attrs
import numpy as np

from kant.bench import fat_tree_nodes
from kant.model import (
    Job,
    NodeRequirement,
    NodeSelector,
    NodeSpec,
    PodAffinityTerm,
    PreferredPodTerm,
    PreferredTerm,
    Taint,
    Tier,
    Toleration,
)
from kant.placement import Placer
from kant.state import ClusterState
from kant.testing import job

TAINT = Taint(key="dedicated", value="batch", effect="NoSchedule")
SOFT = Taint(key="dedicated", value="batch", effect="PreferNoSchedule")
TOLERATE = (Toleration(key="dedicated", operator="Exists"),)
IN_B = NodeRequirement(key="pool", operator="In", values=("b",))
PREFER_B = (PreferredTerm(weight=50, requirements=(IN_B,)),)
APPS = 50  # the pod-labelled variants' apps


def labelled(
    specs: list[NodeSpec], *, taint_every: int = 0, taint: Taint = TAINT
) -> list[NodeSpec]:
    """``specs`` with 12 labels each (and ``taint`` on every ``taint_every``-th node)."""
    out = []
    leaves: dict[str | None, int] = {}
    for i, s in enumerate(specs):
        leaf = leaves.setdefault(s.leaf, len(leaves))
        labels = {
            "kubernetes.io/hostname": s.name,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "dgx-h100",
            "nvidia.com/gpu.product": "H100",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/cuda.driver.major": "550",
            "pool": "abcd"[leaf % 4],
            "rack": f"r{i // 16}",
            "team": "shared",
            "feature.node.kubernetes.io/rdma.available": "true",
            "topology.kubernetes.io/region": "r1",
        }
        taints = (taint,) if taint_every and i % taint_every == 0 else ()
        out.append(attrs.evolve(s, labels=labels, taints=taints))
    return out


def workload(
    n: int,
    seed: int,
    *,
    selector: NodeSelector | None,
    tolerate_half: bool,
    preferred: tuple[PreferredTerm, ...] = (),
    apps: bool = False,
    anti: bool = False,
    soft: bool = False,
) -> list[Job]:
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        tol = TOLERATE if tolerate_half and i % 2 else ()
        app = f"a{i % APPS}"
        pods: dict[str, Any] = {
            "labels": {"app": app} if apps else None,
            "anti_affinity": [PodAffinityTerm(selector=(NodeRequirement(
                key="app", operator="In", values=(app,)),))] if anti else (),
            "pod_preferences": [PreferredPodTerm(weight=100, anti=True, term=PodAffinityTerm(
                selector=(NodeRequirement(key="app", operator="In", values=(app,)),)))]
            if soft else (),
        }  # fmt: skip
        if i % 10 == 9:
            jobs.append(job(f"g{i}", gpus=8, replicas=4, tier=Tier.LEAF, required=True,
                            selector=selector, tolerations=tol, preferred=preferred,
                            **pods))  # fmt: skip
        else:
            g = int(rng.choice([1, 2, 4, 8]))
            jobs.append(job(f"p{i}", gpus=g, cpu_milli=4000 * g, memory_mib=32768 * g,
                            selector=selector, tolerations=tol, preferred=preferred,
                            **pods))  # fmt: skip
    return jobs


def _doubled(decisions: list[tuple[str, str]]) -> int:
    """Nodes that hold two pods of one app (``app = a<job number mod APPS>``)."""
    seen: dict[tuple[str, int], int] = {}
    for pod, node in decisions:
        key = (node, int(pod.split("/")[0][1:]) % APPS)
        seen[key] = seen.get(key, 0) + 1
    return sum(1 for v in seen.values() if v > 1)


def run(state: ClusterState, jobs: list[Job]) -> tuple[float, list[tuple[str, str]]]:
    """CPU seconds to place ``jobs`` one by one on a fresh snapshot, and the decisions."""
    snap = state.snapshot()
    placer = Placer("ebinpack")
    out: list[tuple[str, str]] = []
    with snap.transaction():
        t0 = time.thread_time()
        for j in jobs:
            res = placer.place(j, snap)
            out.extend((str(b.pod), b.node) for b in res.bindings)
        cpu = time.thread_time() - t0
    return cpu, out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    base = fat_tree_nodes(a.nodes)
    t0 = time.thread_time()
    plain_state = ClusterState(base)
    build_plain = time.thread_time() - t0
    lab = labelled(base)
    t0 = time.thread_time()
    lab_state = ClusterState(lab)
    build_labelled = time.thread_time() - t0
    tainted_state = ClusterState(labelled(base, taint_every=10))
    soft_state = ClusterState(labelled(base, taint_every=10, taint=SOFT))
    pool_b = NodeSelector.labels(pool="b")
    variants = {
        "plain": (plain_state, workload(a.jobs, a.seed, selector=None, tolerate_half=False)),
        "labelled": (lab_state, workload(a.jobs, a.seed, selector=None, tolerate_half=False)),
        "selected": (lab_state, workload(a.jobs, a.seed, selector=pool_b, tolerate_half=False)),
        "tainted": (tainted_state, workload(a.jobs, a.seed, selector=None, tolerate_half=True)),
        "preferring": (
            lab_state,
            workload(a.jobs, a.seed, selector=None, tolerate_half=False, preferred=PREFER_B),
        ),
        "soft-tainted": (soft_state, workload(a.jobs, a.seed, selector=None, tolerate_half=True)),
        "pod-labelled": (
            plain_state,
            workload(a.jobs, a.seed, selector=None, tolerate_half=False, apps=True),
        ),
        "anti-affine": (
            plain_state,
            workload(a.jobs, a.seed, selector=None, tolerate_half=False, apps=True, anti=True),
        ),
        "soft-spread": (
            plain_state,
            workload(a.jobs, a.seed, selector=None, tolerate_half=False, apps=True, soft=True),
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    decisions: dict[str, list[tuple[str, str]]] = {}
    for _ in range(a.rounds):
        for name, (state, jobs) in variants.items():
            cpu, dec = run(state, jobs)
            times[name].append(cpu)
            decisions.setdefault(name, dec)
    med = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, Any] = {
        "nodes": a.nodes,
        "jobs": a.jobs,
        "rounds": a.rounds,
        "ms": {k: round(v * 1e3, 2) for k, v in med.items()},
        "us_per_job": {k: round(v * 1e6 / a.jobs, 1) for k, v in med.items()},
        "over_plain": {k: round(v / med["plain"], 3) for k, v in med.items()},
        "placed_pods": {k: len(v) for k, v in decisions.items()},
        "labelled_decides_as_plain": decisions["labelled"] == decisions["plain"],
        "selected_all_in_pool_b": all(
            lab_state.node(n).labels["pool"] == "b" for _, n in decisions["selected"]
        ),
        "preferring_all_in_pool_b": all(
            lab_state.node(n).labels["pool"] == "b" for _, n in decisions["preferring"]
        ),
        "soft_tainted_nodes_used_by_intolerant_pods": sum(
            1
            for p, n in decisions["soft-tainted"]
            if soft_state.node(n).taints and int(p.split("/")[0][1:]) % 2 == 0
        ),
        "pod_labelled_decides_as_plain": decisions["pod-labelled"] == decisions["plain"],
        "anti_affine_nodes_with_two_pods_of_an_app": _doubled(decisions["anti-affine"]),
        "soft_spread_nodes_with_two_pods_of_an_app": _doubled(decisions["soft-spread"]),
        "build_state_ms": {
            "plain": round(build_plain * 1e3, 1),
            "labelled": round(build_labelled * 1e3, 1),
        },
    }
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        for k in variants:
            print(f"{k:13s} {out['ms'][k]:9.2f} ms  {out['us_per_job'][k]:7.1f} us/job  "
                  f"x{out['over_plain'][k]:.3f}  {out['placed_pods'][k]} pods placed")  # fmt: skip
        print(
            f"labelled decides as plain: {out['labelled_decides_as_plain']}; "
            f"selected all in pool b: {out['selected_all_in_pool_b']}; "
            f"preferring all in pool b: {out['preferring_all_in_pool_b']}; "
            "soft-tainted nodes used by intolerant pods: "
            f"{out['soft_tainted_nodes_used_by_intolerant_pods']}; "
            f"pod-labelled decides as plain: {out['pod_labelled_decides_as_plain']}; "
            "nodes with two pods of an app under anti-affinity: "
            f"{out['anti_affine_nodes_with_two_pods_of_an_app']}"
        )
        print(
            f"building the state: {out['build_state_ms']['plain']} ms plain, "
            f"{out['build_state_ms']['labelled']} ms labelled"
        )
    return out


if __name__ == "__main__":
    main()
