"""A cluster file's own node templates belong to the scenario built from it, not to the
process: two files may each define a template under the same name, and a scenario carries its
templates wherever it runs (a Ray worker, a process that never read the file)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from kant.errors import DuplicateError, UnknownTemplateError
from kant.sim.scenarios import PolicySet, run_scenario, trace_scenario
from kant.state import ClusterState
from kant.testing import node
from kant.topology import get_template
from kant.topology.templates import dgx_8gpu, pcie_node

SWF = "; MaxProcs: 16\n1 0 0 100 8 -1 -1 8 200 -1 1 1 1 -1 1 -1 -1 -1\n"


def _cluster_file(path: Path, *, numa_split: bool) -> Path:
    gpus = [{"numa": i // 4 if numa_split else 0, "pcie_switch": i // 2} for i in range(8)]
    nodes = [
        {"name": f"n{i}", "gpu_model": "H100", "gpus": 8, "template": "mine", "leaf": "l0"}
        for i in range(2)
    ]
    path.write_text(json.dumps({"version": 1, "templates": [{"name": "mine", "gpus": gpus}],
                                "nodes": nodes}))  # fmt: skip
    return path


def test_two_cluster_files_with_a_template_of_one_name_each_build_their_own_cluster(
    tmp_path: Path,
) -> None:
    # (the second raised DuplicateError: the first file's template was registered process-wide)
    (tmp_path / "t.swf").write_text(SWF)
    one = trace_scenario(
        "swf",
        path=tmp_path / "t.swf",
        cluster=_cluster_file(tmp_path / "c1.json", numa_split=False),
    )
    two = trace_scenario("swf", path=tmp_path / "t.swf",
                         cluster=_cluster_file(tmp_path / "c2.json", numa_split=True))  # fmt: skip
    (t1,), (t2,) = one.templates, two.templates
    assert t1.name == t2.name == "mine" and t1 != t2
    for sc, t in ((one, t1), (two, t2)):
        state = ClusterState(sc.nodes, templates=sc.templates)
        assert state.template("mine") == t
        run_scenario(sc, PolicySet(queueing="strict-fifo", placement="ebinpack"))
    with pytest.raises(UnknownTemplateError):
        get_template("mine")  # nothing registered in the process


def test_a_scenario_from_a_cluster_file_runs_in_a_process_that_never_read_the_file(
    tmp_path: Path,
) -> None:
    # (a Ray worker, or a fresh process, raised UnknownTemplateError for node n0)
    (tmp_path / "t.swf").write_text(SWF)
    sc = trace_scenario("swf", path=tmp_path / "t.swf",
                        cluster=_cluster_file(tmp_path / "c.json", numa_split=True))  # fmt: skip
    (tmp_path / "sc.pkl").write_bytes(pickle.dumps(sc))
    code = (
        "import pickle, sys\n"
        "from kant.sim.scenarios import run_scenario\n"
        "sc = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "r = run_scenario(sc, sc.default_policy)\n"
        "print(len(r.records))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "sc.pkl")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"


def test_a_cluster_state_reads_its_own_templates_first_and_refuses_two_of_one_name() -> None:
    mine = pcie_node("mine", 8)
    st = ClusterState([node("n0", gpus=8, template="mine")], templates=[mine])
    assert st.template("mine") is mine and st.template("dgx-8gpu") == get_template("dgx-8gpu")
    with pytest.raises(UnknownTemplateError):
        ClusterState([node("n0", gpus=8, template="mine")])
    with pytest.raises(DuplicateError):
        ClusterState(templates=[mine, dgx_8gpu("mine")])
    with pytest.raises(DuplicateError):
        ClusterState(templates=[pcie_node("dgx-8gpu", 8)])
