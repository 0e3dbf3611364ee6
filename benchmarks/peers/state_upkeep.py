"""What kant's device-level bookkeeping alone costs on the AccaSim side-by-side's whole log,
against AccaSim's whole FIFO run: a floor under any kant run of that work.

    python benchmarks/peers/state_upkeep.py --accasim-python PY [--repeats 3] [--json]

Every job of the whole NASA log (``accasim_side_by_side.py``'s ``whole`` work: 18,239 jobs,
309,953 one-GPU pods on 16 nodes of 8 GPUs) goes through the steps every kant scheduler
takes for a job it starts and ends, and nothing else: no queue, no policy, no quota, no
readiness, no placement search, no simulator and no records. Per job:

- ``read``: the SWF log read into kant jobs (``load_swf_jobs``, once for all jobs);
- ``place``: the snapshot brought up to date (``ClusterState.snapshot``: the rows the last
  job's end changed), then, in a snapshot transaction, each pod given a GPU by first fit
  over the nodes in slot order, the lowest free GPU first (a ``Binding`` per pod, one
  ``Snapshot.allocate`` per node used), committed;
- ``bind``: the bindings written to the truth (``ClusterState.bind_many``);
- ``release``: the job's pods released from the truth (``ClusterState.release_many``), at
  once (the machine is then empty again: first fit always finds room).

Each repeat runs AccaSim's whole FIFO run (the side-by-side's own worker, in a fresh
process) and then this upkeep (in another), alternating; the figure is
``upkeep / AccaSim``, medians of the CPU seconds, measured in one run. A ratio near or
above 1 says that kant cannot run this work in less CPU than AccaSim while it keeps a
binding per pod with its devices, a truth and a snapshot of it: what a scheduler for real
clusters needs (the Kubernetes shim binds pods to devices), and what AccaSim, which counts
cores per node, does not keep.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from accasim_side_by_side import (  # noqa: E402
    NODES,
    PER_NODE,
    add_accasim_python,
    run_worker,
    write_workloads,
)

# free GPU mask of an 8-GPU node -> its free GPUs, lowest first, each as a binding's tuple
_FREE_GPUS = [tuple((g,) for g in range(PER_NODE) if m >> g & 1) for m in range(1 << PER_NODE)]


def upkeep(swf: Path) -> dict[str, Any]:
    """The upkeep of every job of ``swf`` (see the module docstring): CPU seconds per step."""
    from kant.model import MILLI, Binding
    from kant.sim import load_swf_jobs
    from kant.state import ClusterState
    from kant.topology import fat_tree_for_nodes

    c0 = time.process_time()
    jobs = load_swf_jobs(swf, tenant_by="none", max_gpus_per_pod=1).jobs
    read = time.process_time() - c0
    cluster = ClusterState(
        fat_tree_for_nodes(NODES, nodes_per_leaf=NODES, template="dgx-8gpu").nodes
    )
    snap = cluster.snapshot()
    slots = range(snap.num_slots)
    trusted = Binding.trusted
    place = bind = release = 0.0
    pods_bound = 0
    for j in jobs:
        t0 = time.process_time()
        pods = list(j.pods())
        snap = cluster.snapshot()
        free_mask = snap.cols.views().free_mask
        out: list[Binding] = []
        with snap.transaction() as tx:
            for s in slots:
                free = int(free_mask[s])
                if not free:
                    continue
                gpus = _FREE_GPUS[free][: len(pods) - len(out)]  # the lowest free GPUs
                node = snap.name_of(s)
                out.extend(
                    trusted(p, node, g, MILLI, (), 0, 0)
                    for p, g in zip(pods[len(out) : len(out) + len(gpus)], gpus, strict=True)
                )
                snap.allocate(s, sum(1 << g[0] for g in gpus))
                if len(out) == len(pods):
                    break
            if len(out) < len(pods):
                raise SystemExit(f"job {j.id} does not fit the empty machine")
            tx.commit()
        t1 = time.process_time()
        cluster.bind_many(out)
        t2 = time.process_time()
        cluster.release_many(pods)
        t3 = time.process_time()
        place += t1 - t0
        bind += t2 - t1
        release += t3 - t2
        pods_bound += len(out)
    total = read + place + bind + release
    cluster.check_invariants()
    snap = cluster.snapshot()
    return {
        "jobs": len(jobs), "pods": pods_bound, "read_s": read, "place_s": place,
        "bind_s": bind, "release_s": release, "cpu_s": total,
        "left_bound": cluster.num_pods + cluster.allocated_milli(),
        "snapshot_free_gpus": sum(snap.cols.views().free_gpus[: snap.num_slots]),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_accasim_python(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="last line: one JSON object")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # the upkeep of this SWF
    a = ap.parse_args(argv)
    if a.worker is not None:
        import kant.sim  # noqa: F401  (imports are not timed)

        print(json.dumps(upkeep(a.worker)))
        return 0
    if not a.accasim_python:
        ap.error("give --accasim-python (or set $ACCASIM_PYTHON): see benchmarks/peers/README.md")
    side = str(HERE / "accasim_side_by_side.py")
    acc: list[float] = []
    ups: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        swf = write_workloads(Path(tmp))["whole"]
        for _ in range(a.repeats):
            ra = run_worker([a.accasim_python, side, "--worker", "accasim", "--swf", str(swf),
                             "--policy", "fifo", "--folder", tmp,
                             "--machine", f"{NODES}x{PER_NODE}"])  # fmt: skip
            acc.append(ra["cpu_s"])
            ups.append(
                run_worker([sys.executable, str(Path(__file__).resolve()), "--worker", str(swf)])
            )
    med = {k: statistics.median(u[k] for u in ups) for k in ups[0] if k.endswith("_s")}
    out = {
        "bench": "state_upkeep", "jobs": ups[0]["jobs"], "pods": ups[0]["pods"],
        "accasim_fifo_cpu_s": round(statistics.median(acc), 3),
        **{f"upkeep_{k}": round(v, 3) for k, v in med.items()},
        "upkeep_over_accasim": round(med["cpu_s"] / statistics.median(acc), 3),
        "machine_left_empty": all(
            u["left_bound"] == 0 and u["snapshot_free_gpus"] == NODES * PER_NODE for u in ups
        ),
    }  # fmt: skip
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>22}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
