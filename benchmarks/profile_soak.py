"""cProfile of ``kant bench soak``'s measured cycles only (not its set-up):
``python benchmarks/profile_soak.py [CYCLES]`` (12,500 nodes, 3,000 pending; default 100
cycles). Prints the soak's summary, then the top entries by cumulative and by own time."""

import cProfile
import pstats
import sys
import time

import kant.bench.soak as soak
from kant.scheduler import Scheduler

prof = cProfile.Profile()
orig = Scheduler.schedule


def wrapped(self, now, *a, **k):
    if getattr(soak, "_measuring", False):
        prof.enable()
        try:
            return orig(self, now, *a, **k)
        finally:
            prof.disable()
    return orig(self, now, *a, **k)


Scheduler.schedule = wrapped
orig_wu = soak.warm_up


def wu(*a, **k):
    r = orig_wu(*a, **k)
    soak._measuring = True
    return r


soak.warm_up = wu
cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 100
t = time.time()
out = soak.bench_soak(12500, 3000, cycles=cycles)
print(
    {
        k: out[k]
        for k in (
            "wall_p99_ms",
            "cpu_p50_ms_first",
            "cpu_p50_ms_last",
            "last_vs_first",
            "victims_per_cycle",
        )
    },
    time.time() - t,
)
st = pstats.Stats(prof)
st.sort_stats("cumulative").print_stats(45)
st.sort_stats("tottime").print_stats(25)
