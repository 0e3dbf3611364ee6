"""An SWF log is replayed on its own machine (``MaxProcs``) unless a resize is asked for."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kant.sim.scenarios import trace_scenario
from kant.sim.traces import trace_dir

NASA = "pwa-nasa-ipsc-1993/NASA-iPSC-1993-3.1-cln.swf.gz"

pytestmark = pytest.mark.skipif(
    trace_dir() is None or not (trace_dir() / NASA).exists(),  # type: ignore[operator]
    reason="the shared NASA iPSC log is not here",
)


def _loaded(tmp: Path) -> Path:
    """The first 8,000 NASA jobs with submit times x0.55: above 0.8 of the log's 128
    processors."""
    assert trace_dir() is not None
    with gzip.open(trace_dir() / NASA, "rt") as f:  # type: ignore[operator]
        lines = f.read().splitlines()
    out, n = [], 0
    for ln in lines:
        if ln.startswith(";"):
            out.append(ln)
        elif ln.strip() and n < 8000:
            cells = ln.split()
            cells[1] = str(round(float(cells[1]) * 0.55))
            out.append(" ".join(cells))
            n += 1
    p = tmp / "loaded.swf"
    p.write_text("\n".join(out) + "\n")
    return p


def test_an_swf_log_above_the_target_load_is_replayed_on_its_own_machine_by_default(
    tmp_path: Path,
) -> None:
    # it once grew to 17 nodes silently, the offered load being above 0.8
    sc = trace_scenario("swf", path=_loaded(tmp_path))
    assert sum(n.gpus for n in sc.nodes) == 128


def test_an_swf_log_is_resized_for_an_offered_load_only_when_asked(tmp_path: Path) -> None:
    sc = trace_scenario("swf", path=_loaded(tmp_path), load=0.5)
    assert sum(n.gpus for n in sc.nodes) > 128
