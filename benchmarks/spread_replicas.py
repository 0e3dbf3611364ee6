"""What a ``spread`` service costs the Placer, and how many nodes its replicas get.

    python benchmarks/spread_replicas.py [--nodes 4000] [--replicas 200] [--rounds 3] [--json]

The cluster is ``kant bench place``'s 8-GPU fat tree, half filled by E-Binpack
(``kant.bench.fill_with_placer``, seed 1: random 1-8 GPU pods and 2-16-node gangs). One
pod-level inference service of ``--replicas`` one-GPU replicas with ``spread=True`` is
placed on its snapshot (and rolled back) by a Placer of each strategy, ``--rounds`` times;
printed are the median time of one placement (this thread's CPU clock), the replicas placed
and the distinct nodes they took. A replica shares a node with another only when no node
holding none can take it, so with free room on many nodes every replica gets a node of its
own under every strategy; E-Binpack and E-Spread outside its zone, which pack a job's pods
together, pay a second search for each replica their first choice would have stacked.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from kant.bench import fat_tree_nodes, fill_with_placer
from kant.model import JobKind
from kant.placement import Placer
from kant.state import ClusterState
from kant.testing import job

STRATEGIES = ("spread", "espread", "ebinpack", "binpack")


def measure(nodes: int, replicas: int, rounds: int) -> dict[str, dict[str, Any]]:
    """Per strategy: median ms of one placement, replicas placed, distinct nodes."""
    st = ClusterState(fat_tree_nodes(nodes))
    fill_with_placer(st, 0.5, seed=1, strategy="ebinpack")
    snap = st.snapshot()
    out: dict[str, dict[str, Any]] = {}
    for strategy in STRATEGIES:
        placer = Placer(strategy)
        with snap.transaction():  # (the placer's caches for the cluster, untimed)
            placer.place(job("warm", gpus=1, replicas=2, gang=False, spread=True), snap)
        times: list[float] = []
        for r in range(rounds):
            svc = job(f"svc{r}", gpus=1, replicas=replicas, gang=False, spread=True,
                      kind=JobKind.INFERENCE)  # fmt: skip
            with snap.transaction():
                t0 = time.thread_time()
                res = placer.place(svc, snap)
                times.append(time.thread_time() - t0)
                got = res.bindings
        out[strategy] = {
            "ms": round(statistics.median(times) * 1000, 1),
            "placed": len(got),
            "nodes": len({b.node for b in got}),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4000)
    ap.add_argument("--replicas", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    got = measure(args.nodes, args.replicas, args.rounds)
    if args.json:
        print(json.dumps(got))
        return
    print(f"{args.nodes} nodes, one spread service of {args.replicas} one-GPU replicas")
    for strategy, row in got.items():
        print(f"  {strategy:9s} {row['ms']:8.1f} ms  placed {row['placed']:,}  "
              f"on {row['nodes']:,} nodes")  # fmt: skip


if __name__ == "__main__":
    main()
