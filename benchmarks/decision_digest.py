"""Digests of the decisions kant makes, to prove that a refactor changes none of them.

Each digest is a SHA-256 over a canonical text of every decision of a run, not only its
summary:

- ``simulate:<scenario>``: every cycle of ``kant simulate --scenario <scenario>`` (the
  default policies, seed 0): the cycle time, the bindings (pod, node, GPUs, milli, NICs, CPU,
  memory), the victims (pods, reason, preemptor), the nominations, the dropped nominations
  and the pending reasons (job, code, message);
- ``packing:<trace>:<policy>``: the allocation and fragmentation curves of ``kant packing``
  with seed 42;
- ``bench-cycle``: every cycle's bindings and victims in ``kant bench cycle --nodes 5000
  --pending 1000``.

Usage (run once before a change and once after, then compare the two files)::

    python benchmarks/decision_digest.py --out before.json
    python benchmarks/decision_digest.py --out after.json
    diff before.json after.json

Only the public API and the command line are used, so the script runs unchanged on either
side of a change that moves code between modules.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

TRACES = Path(
    os.environ.get("KANT_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces")
)
OPENB = TRACES / "alibaba-openb-v2023"


def _result_lines(result: Any) -> Iterable[str]:
    """A canonical text of one CycleResult (everything but timings)."""
    yield f"cycle {result.now!r}"
    for b in result.bindings:
        yield (
            f"bind {b.pod} {b.node} {b.gpus} {b.gpu_milli} {b.nics} {b.cpu_milli} {b.memory_mib}"
        )
    for v in result.victims:
        yield f"victim {v.job} {v.pods} {v.reason} {v.preemptor}"
    for n in result.nominations:
        yield f"nominate {n.job} {[str(b.pod) + '@' + b.node for b in n.bindings]} {n.victims}"
    for j in result.dropped_nominations:
        yield f"dropped {j}"
    for j in sorted(result.pending):
        r = result.pending[j]
        yield f"pending {j} {r.code} {r.message}"


class _Recorder:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.cycles = 0
        self.bindings = 0
        self.victims = 0

    def add(self, result: Any) -> None:
        self.cycles += 1
        self.bindings += len(result.bindings)
        self.victims += len(result.victims)
        for line in _result_lines(result):
            self.h.update(line.encode())
            self.h.update(b"\n")

    def out(self) -> dict[str, Any]:
        return {
            "sha256": self.h.hexdigest(),
            "cycles": self.cycles,
            "bindings": self.bindings,
            "victims": self.victims,
        }


def _wrap(owner: Any, name: str, rec: _Recorder) -> Callable[[], None]:
    """Replace ``owner.name`` (a cycle function or method) by one that records its result."""
    orig = getattr(owner, name)

    def recording(*args: Any, **kw: Any) -> Any:
        result = orig(*args, **kw)
        rec.add(result)
        return result

    setattr(owner, name, recording)
    return lambda: setattr(owner, name, orig)


def simulate_digest(scenario: str) -> dict[str, Any]:
    import kant
    from kant.sim import make_scenario, run_scenario

    rec = _Recorder()
    undo = _wrap(kant.Scheduler, "schedule", rec)
    try:
        run_scenario(make_scenario(scenario, jobs=None, seed=0, load=None))
    finally:
        undo()
    return rec.out()


def bench_cycle_digest() -> dict[str, Any]:
    import kant.bench.cycle as bc

    rec = _Recorder()
    undo = _wrap(bc, "schedule_cycle", rec)
    try:
        bc.bench_cycle(nodes=5000, pending=1000)
    finally:
        undo()
    return rec.out()


def packing_digest(trace: str, policy: str) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "kant", "packing", "--json", "--seeds", "42",
        "--policy", policy,
        "--pods", str(OPENB / f"openb_pod_list_{trace}.csv"),
        "--nodes", str(OPENB / "openb_node_list_gpu_node.csv"),
    ]  # fmt: skip
    out = subprocess.run(
        cmd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    data = json.loads(out.splitlines()[-1])
    curves = {k: data[k] for k in ("alloc_at", "frag_at")}
    text = json.dumps(curves, sort_keys=True)
    return {"sha256": hashlib.sha256(text.encode()).hexdigest()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write the digests to")
    p.add_argument("--only", help="comma-separated subset: simulate,packing,bench")
    args = p.parse_args()
    parts = set((args.only or "simulate,packing,bench").split(","))
    digests: dict[str, Any] = {}
    t0 = time.perf_counter()
    if "simulate" in parts:
        for sc in ("paper-training", "inference"):
            digests[f"simulate:{sc}"] = simulate_digest(sc)
            print(f"simulate:{sc} {digests[f'simulate:{sc}']}", file=sys.stderr)
    if "packing" in parts:
        for trace in ("default", "cpu300", "gpushare100"):
            for pol in ("fgd", "fgdpp"):
                digests[f"packing:{trace}:{pol}"] = packing_digest(trace, pol)
                print(f"packing:{trace}:{pol} {digests[f'packing:{trace}:{pol}']}", file=sys.stderr)
    if "bench" in parts:
        digests["bench-cycle"] = bench_cycle_digest()
        print(f"bench-cycle {digests['bench-cycle']}", file=sys.stderr)
    Path(args.out).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    print(f"{len(digests)} digests in {time.perf_counter() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
