"""kant next to AccaSim 1.1.3 on the NASA iPSC/860 1993 SWF log: CPU time and start times.

One command runs every comparison and prints one table::

    python benchmarks/peers/accasim_side_by_side.py --accasim-python PY [--repeats 3]

``PY`` is the Python of an environment where AccaSim is installed (never a dependency of
kant; see ``benchmarks/peers/README.md``). AccaSim 1.1.3 imports ``collections.Mapping``,
gone since Python 3.10: its worker aliases it to ``collections.abc.Mapping`` before the
import.

Work (the same SWF file for both sides, written once to a temporary folder):

- ``whole``: all 18,239 jobs of the cleaned log;
- ``loaded``: its first 8,000 jobs with submit times x0.55 (rounded to whole seconds), an
  offered load well above the log's own;
- ``wide``: the first 3,000 jobs of ``loaded`` on 128 single-processor nodes (kant: the
  openb single-GPU template), so that every pod of a job is on a node of its own: a job
  of 64 processors is 64 nodes to place, release, reserve and hold (the case where kant's
  EASY cost once grew with the pods per job). Only with one GPU per pod (``--pod-gpus 1``).

The machine of ``whole`` and ``loaded`` is the log's own (``MaxProcs`` 128): 16 nodes of 8
processors (kant: 8 GPUs, one processor is one GPU). AccaSim turns a job of P processors
into P one-core requests that first fit may spread over any nodes; kant gets the same
mapping, a gang of P one-GPU pods (``--pod-gpus 1``, the default; ``--pod-gpus 8`` gives
kant's own SWF mapping, pods of up to 8 GPUs, each on one node, which is not the same
problem and starts some jobs later).
Allocation is first fit on both sides. Policies:

- ``fifo``: AccaSim ``FirstInFirstOut`` (stops at the first job that does not fit) against
  kant ``strict-fifo``;
- the queue order is submit time, ties in log order, on both sides (one queue: kant's jobs all
  have one tenant; its default order would put the smaller of two jobs submitted in the same
  second first);
- ``easy``: AccaSim ``EASYBackfilling``, which passes no reserved nodes to its allocator and so
  starts any queued job that fits now, in order: best effort; against kant
  ``best-effort-fifo``.

kant runs its discrete-event simulator with a cycle at every instant something happens
(``tick=0``) and no preemption. The log's jobs of run time 0 are written with 1 s for both
sides: kant's SWF reader raises them to 1 s anyway, and AccaSim, which finishes a job of
length 0 at its start, does not dispatch again until the next event (the job behind it would
wait for the next arrival).

With ``easy``, the same loop also runs kant's own EASY (``easy-backfill``: the head of the
queue holds a reservation computed from the running jobs' expected ends, which are exact
here since the estimate is the run time) and reports its CPU time over kant best-effort's on
the same run (``kant_easy_over_best_effort``): what a real reservation costs kant. Its start
times are not AccaSim's (AccaSim's "EASY" reserves nothing). Two runs in separate processes
are tens of seconds apart, and this machine's speed changes over such times by up to 1.7x
(the same pair of runs gave ratios from 1.39 to 2.10), so this ratio comes from one process
where kant EASY and kant best effort run in two threads that take turns every
:data:`TURN_EVENTS` simulated events, one running while the other waits, each timed by its
own thread's CPU clock: both see the same stretches of the machine's speed. The thread that
starts first pays a little more (about 3% in a pairing of EASY with itself), so the repeats
alternate which one starts; the figure is the median of the repeats' ratios
(``kant_easy_over_best_effort_runs``). Both simulations share one heap, so each one's
garbage collections also walk the other's objects: the CPU times are higher than alone, the
ratio a little higher if anything (EASY allocates more, so it triggers more collections).
``paired_best_effort_same_starts`` checks that the paired best effort started every job when
the lone one did.

Each (work, policy) pair runs ``--repeats`` times, AccaSim then kant (then kant EASY),
alternating, each in a fresh process; the CPU time is the worker's own
``time.process_time()`` around the simulation (reading the log included, imports
excluded), and the figure is the ratio of the medians, measured in one run.
``start_match`` says whether every job started at the same second on both sides.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRACES = Path(
    os.environ.get("KANT_TRACES", Path(__file__).resolve().parents[3] / "shared" / "traces")
)
NASA = TRACES / "pwa-nasa-ipsc-1993" / "NASA-iPSC-1993-3.1-cln.swf.gz"
NODES, PER_NODE = 16, 8
WIDE_NODES, WIDE_JOBS = 128, 3000  # the "wide" work: single-GPU nodes, the first loaded jobs
TURN_EVENTS = 200  # the paired kant worker: simulated events per turn
LOADED_JOBS, LOADED_FACTOR = 8000, 0.55
MACHINES = {"whole": (NODES, PER_NODE), "loaded": (NODES, PER_NODE), "wide": (WIDE_NODES, 1)}
"""Per work: (nodes, processors or GPUs per node)."""


# --------------------------------------------------------------------------- inputs


def write_workloads(folder: Path) -> dict[str, Path]:
    """The SWF files both sides read: the whole log, the loaded subset, and the loaded
    subset's first :data:`WIDE_JOBS` jobs (for the wide machine)."""
    with gzip.open(NASA, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    header = [ln for ln in lines if ln.startswith(";")]
    jobs = []
    for ln in lines:
        if ln.strip() and not ln.startswith(";"):
            cells = ln.split()
            if float(cells[3]) == 0:
                cells[3] = "1"  # run time 0 is 1 s (see the module docstring)
            jobs.append(" ".join(cells))
    whole = folder / "nasa-whole.swf"
    whole.write_text("\n".join(header + jobs) + "\n")
    loaded_rows = []
    for ln in jobs[:LOADED_JOBS]:
        cells = ln.split()
        cells[1] = str(round(float(cells[1]) * LOADED_FACTOR))
        loaded_rows.append(" ".join(cells))
    loaded = folder / "nasa-loaded.swf"
    loaded.write_text("\n".join(header + loaded_rows) + "\n")
    wide = folder / "nasa-wide.swf"
    wide.write_text("\n".join(header + loaded_rows[:WIDE_JOBS]) + "\n")
    return {"whole": whole, "loaded": loaded, "wide": wide}


# --------------------------------------------------------------------------- workers


def accasim_worker(
    swf: Path, policy: str, folder: Path, machine: tuple[int, int] = (NODES, PER_NODE)
) -> dict[str, Any]:
    """Run AccaSim on ``swf`` on ``machine`` (nodes, cores each); its start time per job and
    the CPU seconds of the run."""
    import collections
    import collections.abc

    collections.Mapping = collections.abc.Mapping  # type: ignore[attr-defined]
    from accasim.base.allocator_class import FirstFit
    from accasim.base.event_class import EventManager
    from accasim.base.scheduler_class import EASYBackfilling, FirstInFirstOut
    from accasim.base.simulator_class import Simulator

    nodes, per_node = machine
    config = folder / f"nasa-system-{nodes}x{per_node}.json"
    config.write_text(
        json.dumps(
            {
                "groups": {"g0": {"core": per_node}},
                "resources": {"g0": nodes},
                "equivalence": {"processor": {"core": 1}},
                "start_time": 0,
            }
        )
    )
    starts: dict[str, int] = {}
    dispatch = EventManager.dispatch_event

    def recording(self: Any, job: Any, t: int, diff: int, nodes: Any) -> Any:
        out = dispatch(self, job, t, diff, nodes)
        if out[0] or out[1]:
            starts[str(job.id)] = int(job.start_time)
        return out

    EventManager.dispatch_event = recording  # type: ignore[method-assign]
    c0 = time.process_time()
    allocator = FirstFit()
    dispatcher = FirstInFirstOut(allocator) if policy == "fifo" else EASYBackfilling(allocator)
    sim = Simulator(
        str(swf), str(config), dispatcher, RESULTS_FOLDER_PATH=str(folder / "accasim"),
        scheduling_output=False, statistics_output=False, show_statistics=False,
        pprint_output=False, benchmark_output=False,
    )  # fmt: skip
    sim.start_simulation()
    cpu = time.process_time() - c0
    return {"cpu_s": cpu, "starts": starts}


def _arrival_order(job: Any, seq: int) -> tuple[float, int]:
    """AccaSim's queue order: submit time, ties in log order (kant's default order puts
    smaller jobs first among those submitted together)."""
    return (job.submitted_at, seq)


def _kant_simulator(
    swf: Path,
    policy: str,
    pod_gpus: int,
    machine: tuple[int, int] = (NODES, PER_NODE),
    **options: Any,
) -> tuple[Any, Callable[[Any], dict[str, int]]]:
    """kant's simulator on ``swf`` under the side-by-side's ``policy`` on ``machine`` (nodes,
    GPUs each: 8 on the DGX template, 1 on the openb single-GPU one), ``options``: more
    :class:`kant.sim.Simulator` arguments; and how to read each job's start time from its
    result."""
    from kant.placement import Placer
    from kant.preemption import PreemptionPolicy
    from kant.queueing import Queue
    from kant.scheduler import Scheduler
    from kant.sim import SimConfig, Simulator, load_swf_jobs
    from kant.state import ClusterState
    from kant.topology import fat_tree_for_nodes

    jobs = load_swf_jobs(swf, tenant_by="none", max_gpus_per_pod=pod_gpus).jobs
    nodes, per_node = machine
    template = {8: "dgx-8gpu", 1: "openb-1gpu"}[per_node]
    cluster = ClusterState(fat_tree_for_nodes(nodes, nodes_per_leaf=nodes, template=template).nodes)
    s = Scheduler(
        cluster,
        queue=Queue(order=_arrival_order, history=None),  # the records need every job
        placer=Placer("firstfit"),
        policy={"fifo": "strict-fifo", "easy": "best-effort-fifo"}.get(policy, "easy-backfill"),
        preemption=PreemptionPolicy(priority=False, reclaim=False, backfill=False),
    )
    config = SimConfig(tick=0.0, grace_period=0.0, sample_interval=86400.0)

    def starts(res: Any) -> dict[str, int]:
        return {
            r.job_id.removeprefix("swf-"): int(r.started_at)
            for r in res.records
            if r.started_at is not None
        }

    return Simulator(s, jobs, config, **options), starts


def kant_worker(
    swf: Path, policy: str, pod_gpus: int, machine: tuple[int, int] = (NODES, PER_NODE)
) -> dict[str, Any]:
    """Run kant's simulator on ``swf`` on ``machine``; its start time per job and the CPU
    seconds of the run."""
    import kant.sim  # noqa: F401  (imports are not timed)

    c0 = time.process_time()
    sim, starts = _kant_simulator(swf, policy, pod_gpus, machine)
    res = sim.run()
    out = starts(res)
    cpu = time.process_time() - c0
    summary = res.summary
    return {
        "cpu_s": cpu,
        "cycles": summary.cycles,
        "behind_closed_gate": summary.behind_closed_gate,
        "too_big_arrivals": summary.too_big_arrivals,
        "starts": out,
    }


def kant_paired_worker(
    swf: Path, pod_gpus: int, easy_first: bool, machine: tuple[int, int] = (NODES, PER_NODE)
) -> dict[str, Any]:
    """kant's EASY and kant's best effort on ``swf`` in one process, each in its own thread,
    taking turns every :data:`TURN_EVENTS` simulated events (one runs while the other waits):
    each thread's CPU time (``time.thread_time``) is measured over the same stretch of the
    machine's speed. ``easy_first``: which one starts (the first thread's share of the
    process's start-up and of the collector's work differs a little; the driver alternates
    it). Returns both CPU times and start times."""
    import kant.sim  # noqa: F401  (imports are not timed)

    turn = threading.Condition()
    order = ["kant-easy", "easy"] if easy_first else ["easy", "kant-easy"]
    state: dict[str, Any] = {"now": order[0], "done": set()}
    out: dict[str, dict[str, Any]] = {}
    failed: list[BaseException] = []

    def other(me: str) -> str:
        them = order[1 - order.index(me)]
        return me if them in state["done"] else them

    def run(policy: str) -> None:
        def pass_turn(_progress: Any) -> None:
            with turn:
                state["now"] = other(policy)
                turn.notify_all()
                turn.wait_for(lambda: state["now"] == policy)

        with turn:
            turn.wait_for(lambda: state["now"] == policy)
        try:
            c0 = time.thread_time()
            sim, starts = _kant_simulator(
                swf, policy, pod_gpus, machine, progress=pass_turn, progress_every=TURN_EVENTS
            )
            res = sim.run()
            got = starts(res)
            out[policy] = {"cpu_s": time.thread_time() - c0, "starts": got}
        except BaseException as exc:  # reported by the main thread
            failed.append(exc)
        finally:
            with turn:
                state["done"].add(policy)
                state["now"] = other(policy)
                turn.notify_all()

    threads = [threading.Thread(target=run, args=(p,)) for p in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]
    return {
        "easy_cpu_s": out["kant-easy"]["cpu_s"],
        "best_effort_cpu_s": out["easy"]["cpu_s"],
        "easy_first": easy_first,
        "best_effort_starts": out["easy"]["starts"],
        "easy_starts": out["kant-easy"]["starts"],
    }


# --------------------------------------------------------------------------- driver


def run_worker(cmd: list[str]) -> dict[str, Any]:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def add_accasim_python(ap: argparse.ArgumentParser) -> None:
    """The ``--accasim-python`` option (default ``$ACCASIM_PYTHON``)."""
    ap.add_argument(
        "--accasim-python",
        default=os.environ.get("ACCASIM_PYTHON"),
        help="Python of an environment with accasim==1.1.3 ($ACCASIM_PYTHON)",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_accasim_python(ap)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pod-gpus", type=int, default=1, choices=(1, 8),
                    help="GPUs per kant pod (1: AccaSim's mapping, the default)")  # fmt: skip
    ap.add_argument("--only", default="", help="comma list of work:policy pairs to run")
    ap.add_argument("--json", action="store_true", help="last line: one JSON object")
    ap.add_argument("--worker", choices=("accasim", "kant", "kant-paired"), help=argparse.SUPPRESS)
    ap.add_argument("--easy-first", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--swf", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--policy", choices=("fifo", "easy", "kant-easy"), help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--machine", default=f"{NODES}x{PER_NODE}", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    nodes, _, per_node = a.machine.partition("x")
    machine = (int(nodes), int(per_node))
    if a.worker == "accasim":
        print(json.dumps(accasim_worker(a.swf, a.policy, a.folder, machine)))
        return 0
    if a.worker == "kant":
        print(json.dumps(kant_worker(a.swf, a.policy, a.pod_gpus, machine)))
        return 0
    if a.worker == "kant-paired":
        print(json.dumps(kant_paired_worker(a.swf, a.pod_gpus, a.easy_first, machine)))
        return 0
    if not a.accasim_python:
        ap.error("give --accasim-python (or set $ACCASIM_PYTHON): see benchmarks/peers/README.md")
    me = str(Path(__file__).resolve())
    pairs = [("whole", "fifo"), ("whole", "easy"), ("loaded", "fifo"), ("loaded", "easy")]
    if a.pod_gpus == 1:  # (a pod of 8 GPUs fits no single-GPU node)
        pairs += [("wide", "fifo"), ("wide", "easy")]
    if a.only:
        wanted = {tuple(p.split(":")) for p in a.only.split(",")}
        pairs = [p for p in pairs if p in wanted]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = write_workloads(folder)
        for work, policy in pairs:
            acc: list[float] = []
            kan: list[float] = []
            # kant EASY and kant best effort taking turns in one process (policy "easy"):
            # EASY's CPU s, and EASY over best effort, per repeat
            kez: list[float] = []
            paired: list[float] = []
            paired_match = True  # the paired best effort started every job as the lone one
            match = True
            mismatched = 0
            nodes, per_node = MACHINES[work]
            for i in range(a.repeats):
                args = ["--swf", str(files[work]), "--policy", policy, "--folder", tmp,
                        "--machine", f"{nodes}x{per_node}"]  # fmt: skip
                ra = run_worker([a.accasim_python, me, "--worker", "accasim", *args])
                rk = run_worker([sys.executable, me, "--worker", "kant", "--pod-gpus",
                           str(a.pod_gpus), *args])  # fmt: skip
                acc.append(ra["cpu_s"])
                kan.append(rk["cpu_s"])
                if policy == "easy":
                    pa = [sys.executable, me, "--worker", "kant-paired", "--pod-gpus",
                          str(a.pod_gpus), "--swf", str(files[work]), "--machine",
                          f"{nodes}x{per_node}"]  # fmt: skip
                    rp = run_worker(pa + (["--easy-first"] if i % 2 == 0 else []))
                    kez.append(rp["easy_cpu_s"])
                    paired.append(rp["easy_cpu_s"] / rp["best_effort_cpu_s"])
                    paired_match = paired_match and rp["best_effort_starts"] == rk["starts"]
                sa, sk = ra["starts"], rk["starts"]
                bad = sum(1 for j in sa.keys() | sk.keys() if sa.get(j) != sk.get(j))
                mismatched = max(mismatched, bad)
                match = match and bad == 0
            n = len(files[work].read_text().splitlines())
            rows.append({
                "work": work, "policy": policy, "machine": f"{nodes}x{per_node}",
                "accasim_cpu_s": round(statistics.median(acc), 2),
                "kant_cpu_s": round(statistics.median(kan), 2),
                "kant_over_accasim": round(statistics.median(kan) / statistics.median(acc), 3),
                "start_match": match, "mismatched_jobs": mismatched, "swf_lines": n,
            })  # fmt: skip
            easy = ""
            if kez:
                ratio = statistics.median(paired)
                rows[-1]["kant_easy_cpu_s"] = round(statistics.median(kez), 2)
                rows[-1]["kant_easy_over_best_effort"] = round(ratio, 3)
                rows[-1]["kant_easy_over_best_effort_runs"] = [round(r, 3) for r in paired]
                rows[-1]["paired_best_effort_same_starts"] = paired_match
                easy = (
                    f"  kant EASY {statistics.median(kez):8.2f} CPU-s (paired), EASY/best-effort "
                    f"{ratio:.3f} (runs {', '.join(f'{r:.3f}' for r in paired)}; paired best "
                    f"effort's start times as alone: {paired_match})"
                )
            print(
                f"{work:7} {policy:5} AccaSim {rows[-1]['accasim_cpu_s']:8.2f} CPU-s  kant "
                f"{rows[-1]['kant_cpu_s']:8.2f} CPU-s  kant/AccaSim "
                f"{rows[-1]['kant_over_accasim']:.3f}  same start times: {match}"
                + ("" if match else f" ({mismatched} jobs differ)")
                + easy,
                flush=True,
            )
    if a.json:
        print(json.dumps({"bench": "peers-accasim", "repeats": a.repeats, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
