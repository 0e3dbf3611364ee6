"""What deferring the snapshot's sorted index costs and saves (``Snapshot.deferred_index``).

    python benchmarks/index_deferral.py [--nodes 5000] [--ops 20000] [--rounds 5]

Two patterns, each timed with the index following every change at once and within
``deferred_index``, alternating in one process (medians of ``--rounds``, microseconds per
operation):

- ``take then read``: allocate a GPU on a node, then read the index (``best_fit``), as a
  placement does pod after pod: every change is read before its row changes again;
- ``take, give back, read``: allocate a GPU on a node and release it before reading, as a
  hold given back for an attempt that is rolled back, or a forecast's what-if.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

from kant.state import ClusterState
from kant.topology import fat_tree_for_nodes


def _run(nodes: int, ops: int, *, deferred: bool, give_back: bool) -> float:
    state = ClusterState(fat_tree_for_nodes(nodes).nodes)
    snap = state.snapshot()
    pool = state.group_id("pool", "H100")
    with snap.transaction(), snap.deferred_index() if deferred else nullcontext():
        t = time.perf_counter()
        for i in range(ops):
            slot, gpu = i % nodes, 1 << (i // nodes % 8)
            snap.allocate(slot, gpu)
            if give_back:
                snap.release(slot, gpu)
            next(iter(snap.best_fit(pool, 1)))
        return (time.perf_counter() - t) / ops * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    for give_back in (False, True):
        got: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(a.rounds):
            for deferred in (False, True):
                got[deferred].append(_run(a.nodes, a.ops, deferred=deferred, give_back=give_back))
        at_once, later = statistics.median(got[False]), statistics.median(got[True])
        name = "take, give back, read" if give_back else "take then read"
        print(
            f"{name:22} at once {at_once:6.2f} us  deferred {later:6.2f} us  "
            f"deferred / at once {later / at_once:.3f}"
        )


if __name__ == "__main__":
    main()
