"""Time the allocation metrics (GAR, GFR and the per-device ``held_milli`` behind them) on a
large, busy cluster: what a Prometheus scrape of the shim's exporter and every simulator
sample pay.

    python benchmarks/bench_metrics.py [--nodes 12500] [--fill 0.9] [--degraded 30] [--reps 20]

The cluster is a fat tree of 8-GPU nodes filled to ``--fill`` by the Placer (the mix of
``kant bench``), then ``--degraded`` nodes get an unhealthy GPU and as many are made
unhealthy, so the correction from the bindings runs too. Prints one JSON line: the median
milliseconds per call over ``--reps`` calls, and the readings (which must not depend on the
code measured: compare them across checkouts).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from kant.bench import fill_with_placer
from kant.metrics import gar, gfr, held_milli
from kant.state import ClusterState
from kant.topology import fat_tree_for_nodes


def _median_ms(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--fill", type=float, default=0.9)
    ap.add_argument("--degraded", type=int, default=30)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    state = ClusterState(fat_tree_for_nodes(a.nodes).nodes)
    fill_with_placer(state, a.fill, seed=a.seed)
    names = sorted(n.name for n in state.nodes())
    step = max(1, len(names) // max(1, 2 * a.degraded))
    picked = names[::step][: 2 * a.degraded]
    for i, name in enumerate(picked):
        if i % 2:
            state.set_node_health(name, False)
        else:
            state.set_gpu_health(name, i % 8, False)
    reading = gfr(state)
    out = {
        "bench": "metrics",
        "nodes": a.nodes,
        "fill": a.fill,
        "degraded_nodes": len(picked),
        "held_milli_ms": _median_ms(lambda: held_milli(state), a.reps),
        "gar_ms": _median_ms(lambda: gar(state, "H100"), a.reps),
        "gfr_ms": _median_ms(lambda: gfr(state), a.reps),
        "held_milli_total": int(held_milli(state).sum()),
        "allocated_milli": state.allocated_milli(),
        "gar": round(gar(state, "H100"), 6),
        "gfr_ratio": round(reading.ratio, 6),
        "gfr_degree": round(reading.degree, 6),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
