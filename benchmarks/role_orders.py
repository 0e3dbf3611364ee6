"""How often a gang that some order of its roles places is refused by the placer, which tries
the declared order, then the roles most constrained first (docs/placement.md).

    PYTHONPATH=<checkout> python benchmarks/role_orders.py [--roles 2] [--draws 40000] \
        [--max-gpus 4] [--seed 7]

Each draw: one to three nodes of 4 GPUs (one model, one leaf), each with 0 to 3 GPUs taken;
a gang of ``--roles`` roles, each of 1 to 4 pods of 1 to ``--max-gpus`` GPUs, asking no more
than the free GPUs; one of the five strategies. A draw is *placeable* when some order of the
roles places the gang (each order tried on a fresh snapshot); it is a *miss* when the placer,
given the roles as drawn, refuses it. Printed: one JSON line (placeable, misses, and each
miss's free GPUs per node, roles and strategy). Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random

from kant.model import Job, Resources, Role
from kant.placement import Placer
from kant.testing import partly_used

STRATEGIES = ("binpack", "ebinpack", "spread", "espread", "topology")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roles", type=int, default=2)
    ap.add_argument("--draws", type=int, default=40000)
    ap.add_argument("--max-gpus", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    placeable = 0
    misses = []
    for _ in range(a.draws):
        used = [rng.randint(0, 3) for _ in range(rng.randint(1, 3))]
        shape = [(rng.randint(1, 4), rng.randint(1, a.max_gpus)) for _ in range(a.roles)]
        strategy = rng.choice(STRATEGIES)
        if sum(n * g for n, g in shape) > 4 * len(used) - sum(used):
            continue
        roles = tuple(
            Role(name=f"r{k}", replicas=n, resources=Resources(gpus=g))
            for k, (n, g) in enumerate(shape)
        )
        if not any(
            Placer(strategy).place(Job(id="j", roles=order), partly_used(used).snapshot()).ok
            for order in itertools.permutations(roles)
        ):
            continue
        placeable += 1
        if not Placer(strategy).place(Job(id="j", roles=roles), partly_used(used).snapshot()).ok:
            free = [4 - u for u in used]
            misses.append({"free": free, "roles": shape, "strategy": strategy})
    print(json.dumps({"roles": a.roles, "placeable": placeable, "misses": misses}))


if __name__ == "__main__":
    main()
