"""What one node row costs the snapshot and the cluster state: the per-row work every
placement, hold, forecast and rollback is made of.

    python benchmarks/snapshot_rows.py [--nodes 128] [--rows 64] [--rounds 5]

On a fat tree of ``--nodes`` 8-GPU nodes (``dgx-8gpu``), each operation touches ``--rows``
rows, one GPU each, and is timed ``--rounds`` times (the median, microseconds per row):

- ``allocate, rolled back``: a transaction allocates on every row and is left (a placement
  attempt that failed, a forecast's what-if);
- ``allocate, release``: allocates on every row, releases it, commits (a hold given back);
- ``allocate, restore``: the same with the row's usage written back (how a hold gives back
  a row unchanged since its take);
- ``bind, release (state)``: the cluster state binds one pod per row in one call, then
  releases them in one call (what ``apply`` and a job's end do), per pod;
- ``refresh``: the snapshot refreshed after the state bound and released on every row.

Run it with ``PYTHONPATH`` set to a checkout to time that checkout's code; compare two by
alternating them in the same sitting.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from kant.model import Binding, PodId
from kant.state import ClusterState, Snapshot
from kant.topology import fat_tree_for_nodes

Op = Callable[[ClusterState, Snapshot, list[int]], None]


def _rolled_back(state: ClusterState, snap: Snapshot, slots: list[int]) -> None:
    with snap.transaction():
        for s in slots:
            snap.allocate(s, 1)


def _released(state: ClusterState, snap: Snapshot, slots: list[int]) -> None:
    with snap.transaction() as tx:
        for s in slots:
            snap.allocate(s, 1)
        for s in slots:
            snap.release(s, 1)
        tx.commit()


def _restored(state: ClusterState, snap: Snapshot, slots: list[int]) -> None:
    usage = [snap.cols.usage(s) for s in slots]
    with snap.transaction() as tx:
        for s in slots:
            snap.allocate(s, 1)
        for s, u in zip(slots, usage, strict=True):
            snap.restore_usage(s, u)
        tx.commit()


def _bound(state: ClusterState, snap: Snapshot, slots: list[int]) -> None:
    names = [snap.name_of(s) for s in slots]
    pods = [PodId(job="j", role="w", index=i) for i in range(len(slots))]
    state.bind_many([Binding(pod=p, node=n, gpus=(0,)) for p, n in zip(pods, names, strict=True)])
    state.release_many(pods)


def _setup(nodes: int, rows: int) -> tuple[ClusterState, Snapshot, list[int]]:
    state = ClusterState(fat_tree_for_nodes(nodes, template="dgx-8gpu").nodes)
    slots = list(range(0, nodes, max(1, nodes // rows)))[:rows]
    return state, state.snapshot(), slots


def _time(op: Op, nodes: int, rows: int, reps: int) -> float:
    """Microseconds per row of ``op``."""
    state, snap, slots = _setup(nodes, rows)
    t = time.perf_counter()
    for _ in range(reps):
        op(state, snap, slots)
    return (time.perf_counter() - t) / (reps * len(slots)) * 1e6


def _time_refresh(nodes: int, rows: int, reps: int) -> float:
    """Microseconds per row of the refresh after the state bound and released every row."""
    state, snap, slots = _setup(nodes, rows)
    spent = 0.0
    for _ in range(reps):
        _bound(state, snap, slots)
        t = time.perf_counter()
        state.snapshot()
        spent += time.perf_counter() - t
    return spent / (reps * len(slots)) * 1e6


OPS: dict[str, Op] = {
    "allocate, rolled back": _rolled_back,
    "allocate, release": _released,
    "allocate, restore": _restored,
    "bind, release (state)": _bound,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=300, help="operations per round")
    a = ap.parse_args()
    for name, op in OPS.items():
        got = [_time(op, a.nodes, a.rows, a.reps) for _ in range(a.rounds)]
        print(f"{name:24} {statistics.median(got):7.2f} us per row")
    got = [_time_refresh(a.nodes, a.rows, a.reps) for _ in range(a.rounds)]
    print(f"{'refresh':24} {statistics.median(got):7.2f} us per row")


if __name__ == "__main__":
    main()
