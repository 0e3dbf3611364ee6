"""What one tier search costs on the 100,000-GPU cluster of ``kant bench cycle``: the domains
(:func:`kant.placement.search.domains`) of every tier above the node, over all the cluster's
nodes, as a gang role's placement asks for them.

    PYTHONPATH=<checkout> python benchmarks/tier_search.py [--nodes 12500] [--searches 300]

The cluster is ``kant bench cycle``'s set-up (an N-node 8-GPU fat tree: leaves, spines,
superspines); every node gets a room of 0 to 2 pods (seeded), and a role of 64 pods asks each
tier for its best 4 domains, ``--searches`` times, timed by the process's CPU clock. Where the
checkout keeps a layout of the candidates (``Candidates.layout``, from this stop on), the
searches read it, as the Placer's kept candidates do from their second search at a tier on;
an older checkout derives the grouping at every call. Printed: one JSON line, CPU ms per
search per tier. Run it with ``PYTHONPATH`` set to each checkout in turn, alternating, to
compare two.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from kant.bench.cycle import setup
from kant.model import Tier
from kant.placement.search import Candidates, domains


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--searches", type=int, default=300)
    args = ap.parse_args()
    s, _wl, _rules = setup(args.nodes, 10, seed=7, policy="backfill", strategy="ebinpack",
                           preemption=True)  # fmt: skip
    snap = s.cluster.snapshot()
    slots = np.flatnonzero(snap.cols.alive[: snap.num_slots]).astype(np.int64)
    room = np.random.default_rng(1).integers(0, 3, slots.shape[0])
    key = s.placer.hooks.domain_key
    cand = Candidates(slots)
    out = {}
    for tier in (Tier.LEAF, Tier.SPINE, Tier.SUPERSPINE, Tier.CLUSTER):
        kept = getattr(cand, "layout", None)
        args_ = ()
        if kept is not None:
            kept(snap, tier)  # (the first ask keeps nothing: candidates made for one search)
            args_ = (kept(snap, tier),)
        t = time.process_time()
        for _ in range(args.searches):
            for _d in domains(snap, slots, room, tier, 64, key, 4, *args_):
                pass
        out[tier.name] = round((time.process_time() - t) / args.searches * 1000, 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
