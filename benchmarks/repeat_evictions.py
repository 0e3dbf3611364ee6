"""How often one preemptor evicts the same pod again, in the built-in inference scenario.

A preemptor that evicts a pod, lets it start again and evicts it again has wasted the pod's
work twice. This runs ``kant simulate --scenario inference`` (the default policies; seed 0,
as ``benchmarks/decision_digest.py`` does, unless ``--seed`` says otherwise) and counts, from
every cycle's victims:

- ``victim_units``: victim units chosen in the run;
- ``victim_pods``: pods in them;
- ``pods_evicted_again``: (pod, preemptor) pairs chosen more than once;
- ``shortest_gap_s``: the shortest time between two evictions of one pod by one preemptor
  (a long gap is the scenario's own churn: services scaled up again, their pods reclaimed
  and placed again, not a preemptor taking back room its victim just took).

Usage, on two trees (e.g. before and after a change)::

    PYTHONPATH=. python benchmarks/repeat_evictions.py [--seed N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections import defaultdict
from typing import Any


def count(scenario: str, seed: int = 0) -> dict[str, Any]:
    import kant
    from kant.sim import make_scenario, run_scenario

    times: dict[tuple[Any, str], list[float]] = defaultdict(list)
    units = 0
    orig = kant.Scheduler.schedule

    def recording(self: Any, *args: Any, **kw: Any) -> Any:
        nonlocal units
        result = orig(self, *args, **kw)
        for v in result.victims:
            units += 1
            for p in v.pods:
                times[(p, v.preemptor)].append(result.now)
        return result

    kant.Scheduler.schedule = recording  # type: ignore[method-assign]
    try:
        run_scenario(make_scenario(scenario, jobs=None, seed=seed, load=None))
    finally:
        kant.Scheduler.schedule = orig  # type: ignore[method-assign]
    again = {k: ts for k, ts in times.items() if len(ts) > 1}
    gaps = [b - a for ts in again.values() for a, b in itertools.pairwise(ts)]
    return {
        "scenario": scenario,
        "seed": seed,
        "victim_units": units,
        "victim_pods": sum(len(ts) for ts in times.values()),
        "pods_evicted_again": len(again),
        "shortest_gap_s": round(min(gaps), 3) if gaps else math.inf,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="inference")
    ap.add_argument("--seed", type=int, default=0, help="the scenario's seed (default 0)")
    args = ap.parse_args()
    json.dump(count(args.scenario, args.seed), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
