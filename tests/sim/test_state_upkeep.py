"""``benchmarks/peers/state_upkeep.py``: the floor under kant's runs of the side-by-side's
whole log (every job's pods placed on the snapshot, bound in the truth and released, with
nothing else) does that work, pod by pod, and leaves the machine as it found it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PEERS = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"


def test_the_upkeep_binds_and_releases_every_pod_of_a_log(tmp_path: Path) -> None:
    sys.path.insert(0, str(PEERS))
    try:
        spec = importlib.util.spec_from_file_location("state_upkeep", PEERS / "state_upkeep.py")
        assert spec is not None and spec.loader is not None
        upkeep = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(upkeep)
    finally:
        sys.path.remove(str(PEERS))
    procs = [1, 128, 3, 64, 8, 17, 128, 2]
    rows = [
        f"{n} {10 * n} 0 60 {p} -1 -1 {p} 60 -1 1 1 1 -1 -1 -1 -1 -1"
        for n, p in enumerate(procs, 1)
    ]
    swf = tmp_path / "log.swf"
    swf.write_text("; MaxProcs: 128\n" + "\n".join(rows) + "\n")
    out = upkeep.upkeep(swf)
    assert out["jobs"] == len(procs) and out["pods"] == sum(procs)
    assert out["cpu_s"] >= out["place_s"] > 0
    assert out["left_bound"] == 0 and out["snapshot_free_gpus"] == 16 * 8
