"""Memory of a long-lived scheduler: heap and resident set while jobs are submitted, run and
finish, with the queue's default bounded history of ended jobs and with ``history=None``
(every job kept, as the simulator chooses).

Each round submits ``--batch`` one-pod 8-GPU jobs, runs one cycle (they all fit) and finishes
them all, so the number of live jobs stays flat and only the history grows. Prints, every
``--every`` finished jobs, the traced Python heap (``tracemalloc``) and the resident set
(``/proc/self/statm``), then the heap growth per finished job over the second half of the
run (where the default history is full)::

    python benchmarks/history_memory.py --jobs 100000
    python benchmarks/history_memory.py --jobs 100000 --history none

With ``--json`` the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tracemalloc

from kant import PodId, Queue, Scheduler
from kant.testing import ClusterBuilder, job


def _rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(jobs: int, batch: int, every: int, history: int | None) -> dict[str, object]:
    cluster = ClusterBuilder().leaf("lf0", nodes=batch).build()
    s = Scheduler(cluster, queue=Queue(history=history))
    tracemalloc.start()
    rows: list[dict[str, float]] = []
    now = 0.0
    done = 0
    while done < jobs:
        ids = [f"j{done + i}" for i in range(batch)]
        for jid in ids:
            s.submit(job(jid, gpus=8), now=now)
        s.step(now)
        now += 1.0
        for jid in ids:
            s.pod_finished(PodId(job=jid, role="worker", index=0), now)
        done += batch
        if done % every == 0:
            gc.collect()
            heap, _peak = tracemalloc.get_traced_memory()
            rows.append(
                {"finished": done, "kept": len(s.queue), "heap_mib": heap / 2**20,
                 "rss_mib": _rss_mib()}
            )  # fmt: skip
            r = rows[-1]
            print(
                f"{done:>9,} finished  {r['kept']:>9,.0f} kept  heap {r['heap_mib']:8.1f} MiB"
                f"  rss {r['rss_mib']:8.1f} MiB",
                flush=True,
            )
    tracemalloc.stop()
    half = rows[len(rows) // 2] if len(rows) > 2 else rows[0]
    last = rows[-1]
    per_job = (last["heap_mib"] - half["heap_mib"]) * 2**20 / (last["finished"] - half["finished"])
    return {
        "history": history,
        "jobs": jobs,
        "heap_bytes_per_finished_job_second_half": round(per_job, 1),
        "heap_mib_end": round(last["heap_mib"], 1),
        "rss_mib_end": round(last["rss_mib"], 1),
        "kept_end": int(last["kept"]),
        "released": s.queue.released,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000, help="jobs to run (default 100,000)")
    ap.add_argument("--batch", type=int, default=100, help="jobs per cycle (default 100)")
    ap.add_argument("--every", type=int, default=10_000, help="report interval (jobs)")
    ap.add_argument(
        "--history", default="default",
        help="ended jobs the queue keeps: an int, 'none' (all) or 'default' (10,000)",
    )  # fmt: skip
    ap.add_argument("--json", action="store_true", help="end with one JSON line")
    a = ap.parse_args(argv)
    if a.jobs < 2 * a.every or a.every % a.batch or a.jobs % a.every:
        ap.error("--jobs must be a multiple of --every (at least 2 of them), --every of --batch")
    if a.history == "default":
        history: int | None = Queue().history
    elif a.history == "none":
        history = None
    else:
        try:
            history = int(a.history)
        except ValueError:
            ap.error(f"--history {a.history!r}: an int, 'none' or 'default'")
    out = run(a.jobs, a.batch, a.every, history)
    print(
        f"history={out['history']}: {out['heap_bytes_per_finished_job_second_half']} bytes of "
        f"heap per finished job over the second half; {out['kept_end']:,} jobs kept, "
        f"{out['released']:,} released"
    )
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
