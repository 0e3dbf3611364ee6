"""``kant bench cycle`` on two checkouts, interleaved, in one run: the p99 ratio after/before.

On a shared machine absolute times drift from minute to minute; alternating the two
checkouts run by run and comparing medians gives a ratio both sides measured under the same
load::

    git worktree add --detach ../kant-before main
    python benchmarks/bench_cycle_ab.py --before ../kant-before --after . --runs 5

Each run is ``python -m kant bench cycle --nodes N --pending P --json`` with ``PYTHONPATH``
set to the checkout and the checkout as working directory (``python -m`` puts the working
directory first on ``sys.path``: run from elsewhere, it would import the code found there on
both sides). Prints every run, then the medians of ``p99_ms``, ``cpu_p99_ms`` and ``p50_ms``
per side and the ratios after/before.

``--bench soak --cycles C`` does the same with ``kant bench soak --cycles C`` (keys
``wall_p99_ms``, ``cpu_p99_ms``, ``cpu_p50_ms_first``, ``cpu_p50_ms_last``,
``last_vs_first``). Where a checkout reports the machine's speed next to its cycles
(``probe_ms``; soak: ``probe_ms_first``, ``probe_ms_last``, ``last_vs_first_calibrated``),
each run shows it, and the medians include it when both sides report it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

KEYS = {
    "cycle": ("p99_ms", "cpu_p99_ms", "p50_ms"),
    "soak": ("wall_p99_ms", "cpu_p99_ms", "cpu_p50_ms_first", "cpu_p50_ms_last", "last_vs_first"),
}
# the machine's speed next to the cycles (kant.bench.speed_probe), where a checkout reports it
PROBE_KEYS = {
    "cycle": ("probe_ms",),
    "soak": ("probe_ms_first", "probe_ms_last", "last_vs_first_calibrated"),
}


def run(checkout: Path, nodes: int, pending: int, bench: str, cycles: int) -> dict[str, float]:
    home = checkout.resolve()
    env = dict(os.environ, PYTHONPATH=str(home))
    cmd = [sys.executable, "-m", "kant", "bench", bench, "--nodes", str(nodes)]
    cmd += ["--pending", str(pending), "--json"]
    if bench == "soak":
        cmd += ["--cycles", str(cycles)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=home).stdout
    data: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return data


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="checkout measured first")
    p.add_argument("--after", type=Path, required=True, help="checkout compared with it")
    p.add_argument("--runs", type=int, default=5, help="runs per side (default 5)")
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pending", type=int, default=1000)
    p.add_argument("--bench", choices=sorted(KEYS), default="cycle")
    p.add_argument("--cycles", type=int, default=300, help="soak: measured cycles")
    args = p.parse_args()
    keys = KEYS[args.bench]
    sides: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(args.runs):
        for side in ("before", "after"):
            r = run(getattr(args, side), args.nodes, args.pending, args.bench, args.cycles)
            sides[side].append(r)
            shown = [*keys, *(k for k in PROBE_KEYS[args.bench] if k in r)]
            print(f"run {i + 1} {side:6} " + " ".join(f"{k}={r[k]}" for k in shown), flush=True)
    # a probe key joins the medians when every run of both sides reported it
    keys = (*keys, *(k for k in PROBE_KEYS[args.bench]
                     if all(k in r for rs in sides.values() for r in rs)))  # fmt: skip
    med = {s: {k: statistics.median(r[k] for r in rs) for k in keys} for s, rs in sides.items()}
    for s in ("before", "after"):
        print(f"median {s:6} " + " ".join(f"{k}={med[s][k]:.3f}" for k in keys))
    ratios = " ".join(f"{k}={med['after'][k] / med['before'][k]:.3f}" for k in keys)
    print(f"ratio after/before {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
