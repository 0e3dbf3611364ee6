"""The Alibaba openb node list as a cluster description."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kant.errors import InvalidTraceError
from kant.sim.traces import openb_nodes

OPENB = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "alibaba-openb-v2023"
GPU_NODES = OPENB / "openb_node_list_gpu_node.csv"
ALL_NODES = OPENB / "openb_node_list_all_node.csv"

needs_trace = pytest.mark.skipif(
    not GPU_NODES.exists(), reason=f"openb trace not found at {GPU_NODES.resolve()}"
)

HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


@needs_trace
def test_openb_gpu_node_list_loads_1213_nodes_with_6212_gpus():
    desc = openb_nodes(GPU_NODES)
    assert len(desc.nodes) == 1213
    assert desc.total_gpus == 6212
    shapes = Counter((n.gpu_model, n.gpus) for n in desc.nodes)
    assert shapes[("G2", 8)] == 549
    assert shapes[("T4", 2)] == 387
    assert shapes[("A10", 1)] == 2
    assert all(n.template == f"openb-{n.gpus}gpu" for n in desc.nodes)
    assert all(n.leaf is None and n.rdma_nics == 0 for n in desc.nodes)
    assert desc.nodes[0].name == "openb-node-0000"
    assert desc.nodes[0].cpu_milli == 64000 and desc.nodes[0].memory_mib == 262144


@needs_trace
def test_openb_all_node_list_keeps_cpu_only_nodes_without_template():
    desc = openb_nodes(ALL_NODES)
    assert len(desc.nodes) == 1523
    cpu_only = [n for n in desc.nodes if n.gpus == 0]
    assert len(cpu_only) == 310
    assert all(n.gpu_model is None and n.template is None for n in cpu_only)


def test_a_small_node_list_with_a_blank_line_loads(tmp_path):
    f = tmp_path / "nodes.csv"
    f.write_text(HEADER + "a,1000,2048,2,T4\n\nb,1000,2048,0,\n")
    desc = openb_nodes(f)
    assert [(n.name, n.gpus, n.template) for n in desc.nodes] == [
        ("a", 2, "openb-2gpu"),
        ("b", 0, None),
    ]


@pytest.mark.parametrize(
    ("rows", "field", "line"),
    [
        ("a,1000,2048,2,T4\nb,x,2048,2,T4\n", "cpu_milli", 3),
        ("a,1000,-5,2,T4\n", "memory_mib", 2),
        ("a,1000,2048,2.0,T4\n", "gpu", 2),
        ("a,1000,2048,3,T4\n", "gpu", 2),
        ("a,1000,2048,2,\n", "model", 2),
        ("a,1000,2048,0,T4\n", "gpu", 2),
        ("a,1000,2048,2,T4\na,1000,2048,2,T4\n", "sn", 3),
        ("a/b,1000,2048,2,T4\n", "sn", 2),
        ("a,1000,2048,2\n", "row", 2),
    ],
    ids=[
        "a cpu that is not a number",
        "a negative memory",
        "a fractional gpu count",
        "a gpu count with no openb shape",
        "gpus without a model",
        "a model without gpus",
        "a duplicate node name",
        "a node name with a slash",
        "a short row",
    ],
)
def test_a_broken_row_names_field_and_line(tmp_path, rows, field, line):
    f = tmp_path / "nodes.csv"
    f.write_text(HEADER + rows)
    with pytest.raises(InvalidTraceError) as e:
        openb_nodes(f)
    assert e.value.field == field
    assert e.value.where == f"{f}:{line}"


def test_a_wrong_header_is_rejected(tmp_path):
    f = tmp_path / "nodes.csv"
    f.write_text("name,cpu,mem,gpu,model\na,1,1,1,T4\n")
    with pytest.raises(InvalidTraceError) as e:
        openb_nodes(f)
    assert e.value.field == "header"
    assert e.value.where == f"{f}:1"


@pytest.mark.parametrize("name", ["nodes.csv", "nodes.CSV", "Nodes.Csv"])
def test_an_openb_node_list_is_read_as_one_whatever_the_case_of_its_extension(
    tmp_path: Path, name: str
) -> None:
    # (nodes.CSV was read as a JSON cluster file: "not valid JSON", while .YAML is YAML)
    from kant.sim.scenarios import trace_scenario

    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\np0,1000,1024,1,1000,,LS,Running,0,100,0\n"
    )
    nodes = tmp_path / name
    nodes.write_text(HEADER + "a,64000,262144,2,T4\nb,64000,262144,8,V100M16\n")
    sc = trace_scenario("openb", path=pods, cluster=nodes)
    assert [n.name for n in sc.nodes] == ["a", "b"] and sc.total_gpus == 10
