"""Cluster files: JSON/YAML round trips, the compact groups form, and malformed entries."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from kant.errors import InvalidClusterFileError
from kant.model import NodeSpec
from kant.topology import (
    ClusterDescription,
    GpuSlot,
    NicSlot,
    NodeTemplate,
    cluster_from_dict,
    cluster_to_dict,
    dump_cluster,
    fat_tree,
    load_cluster,
)

CUSTOM = NodeTemplate(
    name="nvl-4gpu",
    gpus=tuple(GpuSlot(numa=0, pcie_switch=g // 2, nvlink_domain=0) for g in range(4)),
    nics=(NicSlot(numa=0, pcie_switch=0), NicSlot(numa=0, pcie_switch=1)),
)


def sample() -> ClusterDescription:
    tree = fat_tree(
        spines_per_superspine=2, leaves_per_spine=2, nodes_per_leaf=3, hbd_size=2, zone_nodes=2
    )
    extra = (
        NodeSpec(
            name="edge-0", gpu_model="L4", gpus=4, rdma_nics=2, template="nvl-4gpu", leaf="edge"
        ),
        NodeSpec(name="cpu-0", cpu_milli=64_000, memory_mib=262_144),
    )
    return ClusterDescription(nodes=tree.nodes + extra, templates=(CUSTOM,))


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_dump_then_load_gives_an_equal_description(tmp_path, suffix):
    desc = sample()
    path = tmp_path / f"cluster{suffix}"
    dump_cluster(desc, path)
    assert load_cluster(path) == desc
    assert load_cluster(str(path)) == desc


def test_json_file_is_readable_and_leaves_defaults_out():
    doc = cluster_to_dict(sample())
    assert doc["version"] == 1
    assert doc["nodes"][-1] == {"name": "cpu-0", "cpu_milli": 64_000, "memory_mib": 262_144}
    assert doc["templates"][0]["gpus"][0] == {"numa": 0, "pcie_switch": 0, "nvlink_domain": 0}
    assert cluster_from_dict(json.loads(json.dumps(doc))) == sample()


def test_groups_expand_into_named_nodes_after_the_explicit_ones():
    doc = {
        "version": 1,
        "nodes": [{"name": "head", "cpu_milli": 8000}],
        "groups": [
            {
                "count": 3,
                "prefix": "gpu-",
                "start": 8,
                "width": 2,
                "gpu_model": "H100",
                "gpus": 8,
                "rdma_nics": 8,
                "template": "dgx-8gpu",
                "leaf": "lf0",
            }
        ],
    }
    desc = cluster_from_dict(doc)
    assert [n.name for n in desc.nodes] == ["head", "gpu-08", "gpu-09", "gpu-10"]
    assert all(n.leaf == "lf0" and n.gpus == 8 for n in desc.nodes[1:])


def test_yaml_file_written_by_hand_loads(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "version: 1\n"
        "templates:\n"
        "  - name: pair\n"
        "    gpus: [{numa: 0, pcie_switch: 0}, {numa: 0, pcie_switch: 0}]\n"
        "nodes:\n"
        "  - {name: a, gpu_model: T4, gpus: 2, template: pair, leaf: l0}\n"
    )
    desc = load_cluster(path)
    assert desc.nodes[0].template == "pair"
    assert desc.template("pair").num_gpus == 2


# --------------------------------------------------------------------------- malformed


def base_doc() -> dict[str, Any]:
    return {
        "version": 1,
        "templates": [
            {"name": "pair", "gpus": [{"numa": 0, "pcie_switch": 0}] * 2, "nics": []},
        ],
        "nodes": [
            {"name": "a", "gpu_model": "T4", "gpus": 2, "template": "pair", "leaf": "l0"},
            {"name": "b", "gpu_model": "T4", "gpus": 2, "template": "pair", "leaf": "l0"},
        ],
        "groups": [{"count": 2, "prefix": "g", "gpu_model": "T4", "gpus": 2, "template": "pair"}],
    }


def set_in(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    *parents, last = path
    for p in parents:
        doc = doc[p]
    doc[last] = value


def drop(doc: dict[str, Any], path: tuple[Any, ...]) -> None:
    *parents, last = path
    for p in parents:
        doc = doc[p]
    del doc[last]


DELETE = object()

MALFORMED = [
    # (id, path, new value or DELETE, field, where suffix)
    ("a missing version", ("version",), DELETE, "version", "cluster.json"),
    ("an unsupported version", ("version",), 2, "version", "cluster.json"),
    ("an unknown top level key", ("nodez",), [], "nodez", "cluster.json"),
    ("nodes that are not a list", ("nodes",), {"a": 1}, "nodes", "cluster.json"),
    ("a node that is not a mapping", ("nodes", 1), "b", "nodes", "nodes[1]"),
    ("a node without a name", ("nodes", 1, "name"), DELETE, "name", "nodes[1]"),
    ("a misspelt node field", ("nodes", 1, "gpu_modle"), "T4", "gpu_modle", "nodes[1]"),
    ("a name with a slash", ("nodes", 1, "name"), "b/c", "name", "nodes[1]"),
    ("a duplicate node name", ("nodes", 1, "name"), "a", "name", "nodes[1]"),
    ("a string gpu count", ("nodes", 1, "gpus"), "2", "gpus", "nodes[1]"),
    ("a float cpu", ("nodes", 1, "cpu_milli"), 1.5, "cpu_milli", "nodes[1]"),
    ("a negative memory", ("nodes", 1, "memory_mib"), -1, "memory_mib", "nodes[1]"),
    ("a bool nic count", ("nodes", 1, "rdma_nics"), True, "rdma_nics", "nodes[1]"),
    ("gpus without a model", ("nodes", 1, "gpu_model"), DELETE, "gpu_model", "nodes[1]"),
    ("an unknown template", ("nodes", 1, "template"), "quad", "template", "nodes[1]"),
    ("gpus unlike the template", ("nodes", 1, "gpus"), 4, "gpus", "nodes[1]"),
    ("nics unlike the template", ("nodes", 1, "rdma_nics"), 1, "rdma_nics", "nodes[1]"),
    ("an empty leaf name", ("nodes", 1, "leaf"), "", "leaf", "nodes[1]"),
    ("a spine without a leaf", ("nodes", 1), {"name": "b", "spine": "s0"}, "leaf", "nodes[1]"),
    ("a leaf under two spines", ("nodes", 1, "spine"), "s9", "spine", "nodes[1]"),
    ("a numeric superspine", ("nodes", 1, "superspine"), 3, "superspine", "nodes[1]"),
    ("a numeric hbd", ("nodes", 1, "hbd"), 7, "hbd", "nodes[1]"),
    ("a numeric zone", ("nodes", 1, "zone"), 7, "zone", "nodes[1]"),
    ("a template without gpus", ("templates", 0, "gpus"), DELETE, "gpus", "templates[0]"),
    ("a template without a name", ("templates", 0, "name"), DELETE, "name", "templates[0]"),
    ("a misspelt template key", ("templates", 0, "nic"), [], "nic", "templates[0]"),
    ("a negative gpu numa", ("templates", 0, "gpus", 1), {"numa": -1, "pcie_switch": 0},
     "numa", "templates[0].gpus[1]"),
    ("a gpu slot without a switch", ("templates", 0, "gpus", 1), {"numa": 0},
     "pcie_switch", "templates[0].gpus[1]"),
    ("a misspelt gpu slot key", ("templates", 0, "gpus", 1),
     {"numa": 0, "pcie_switch": 0, "nvlink": 0}, "nvlink", "templates[0].gpus[1]"),
    ("a nic slot with a string switch", ("templates", 0, "nics"),
     [{"numa": 0, "pcie_switch": "x"}], "pcie_switch", "templates[0].nics[0]"),
    ("a group without a count", ("groups", 0, "count"), DELETE, "count", "groups[0]"),
    ("a group with zero nodes", ("groups", 0, "count"), 0, "count", "groups[0]"),
    ("a group without a prefix", ("groups", 0, "prefix"), DELETE, "prefix", "groups[0]"),
    ("a group with a name", ("groups", 0, "name"), "x", "name", "groups[0]"),
    ("a group with a negative start", ("groups", 0, "start"), -1, "start", "groups[0]"),
    ("a group whose nodes clash", ("groups", 0, "prefix"), "", "name", "groups[0]"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "value", "field", "where"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_cluster_file_names_the_field_and_entry(tmp_path, path, value, field, where):
    doc = copy.deepcopy(base_doc())
    if path == ("nodes", 1, "spine"):
        doc["nodes"][0]["spine"] = "s0"
    if path == ("groups", 0, "prefix"):
        doc["nodes"][0]["name"] = "1"  # the group's second node is named "1" too
    if value is DELETE:
        drop(doc, path)
    else:
        set_in(doc, path, value)
    file = tmp_path / "cluster.json"
    file.write_text(json.dumps(doc))
    with pytest.raises(InvalidClusterFileError) as e:
        load_cluster(file)
    assert e.value.field == field
    assert e.value.where is not None
    if where == "cluster.json":
        assert e.value.where == str(file)
    else:
        assert e.value.where.startswith(f"{file}:{where}")
    assert field in str(e.value)


def test_the_base_document_of_the_malformed_cases_is_valid():
    assert len(cluster_from_dict(base_doc()).nodes) == 4


def test_a_top_level_list_is_rejected():
    with pytest.raises(InvalidClusterFileError) as e:
        cluster_from_dict([], source="x.json")
    assert e.value.field == "document"


def test_broken_json_reports_the_line(tmp_path):
    file = tmp_path / "broken.json"
    file.write_text('{\n  "version": 1,\n  "nodes": [\n}\n')
    with pytest.raises(InvalidClusterFileError) as e:
        load_cluster(file)
    assert e.value.field == "document"
    assert e.value.where == f"{file}:4"


def test_broken_yaml_reports_the_line(tmp_path):
    file = tmp_path / "broken.yaml"
    file.write_text("version: 1\nnodes:\n  - name: a\n   bad: [\n")
    with pytest.raises(InvalidClusterFileError) as e:
        load_cluster(file)
    assert e.value.field == "document"
    assert e.value.where is not None and e.value.where.startswith(f"{file}:")


def test_yaml_without_pyyaml_is_a_clear_error(tmp_path, monkeypatch):
    file = tmp_path / "c.yaml"
    file.write_text("version: 1\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # makes `import yaml` fail
    with pytest.raises(InvalidClusterFileError, match="pyyaml"):
        load_cluster(file)
    with pytest.raises(InvalidClusterFileError, match="pyyaml"):
        dump_cluster(sample(), tmp_path / "out.yml")


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_cluster(Path(tmp_path) / "nope.json")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_an_integer_too_long_for_python_to_read_is_an_invalid_cluster_file(tmp_path, suffix):
    file = tmp_path / f"big{suffix}"
    file.write_text(
        '{"version": 1, "nodes": [{"name": "a", "cpu_milli": 1' + "0" * 5000 + "}]}"
    )  # (JSON is YAML too)
    with pytest.raises(InvalidClusterFileError, match="4300 digits") as e:
        load_cluster(file)
    assert e.value.field == "document" and e.value.where == str(file)


def test_a_yaml_date_that_does_not_exist_is_an_invalid_cluster_file(tmp_path):
    file = tmp_path / "date.yaml"
    file.write_text("version: 1\nnodes:\n  - {name: 2001-13-45}\n")
    with pytest.raises(InvalidClusterFileError, match="month"):
        load_cluster(file)


@pytest.mark.parametrize(
    ("group", "field"),
    [
        ({"width": 1_000_000_000_000}, "width"),  # (was a MemoryError)
        ({"width": 1_000_000}, "width"),  # (was two nodes of a million characters each)
        ({"width": 10**5000}, "width"),
        ({"start": 10**253}, "start"),
        ({"start": 10**5000}, "start"),
        ({"prefix": "g" * 251, "start": 100}, "prefix"),
    ],
)
def test_a_group_whose_node_names_would_exceed_253_characters_is_refused(group, field):
    doc = {"version": 1, "groups": [{"count": 2, "prefix": "g", **group}]}
    with pytest.raises(InvalidClusterFileError, match="longer than 253 characters") as e:
        cluster_from_dict(doc, source="c.yaml")
    assert e.value.field == field and e.value.where == "c.yaml:groups[0]"


def test_a_group_may_make_names_of_exactly_253_characters():
    doc = {"version": 1, "groups": [{"count": 2, "prefix": "g" * 250, "width": 3}]}
    assert [len(n.name) for n in cluster_from_dict(doc).nodes] == [253, 253]


def test_a_cluster_file_that_never_ends_is_refused_after_its_bound(monkeypatch):
    import kant.topology.fabric

    monkeypatch.setattr(kant.topology.fabric, "MAX_CLUSTER_BYTES", 1 << 16)
    with pytest.raises(InvalidClusterFileError, match="larger than 65,536 bytes"):
        load_cluster("/dev/zero")


@pytest.mark.parametrize("text", ["1e3", "-.5", "1.5e3", "5E-3", ".5e3", "1_0e2"])
def test_a_name_that_reads_as_a_yaml_1_2_float_survives_a_yaml_round_trip(tmp_path, text):
    """A leaf, model, node name or label written as ``1e3`` would be read back as a float
    (kant reads YAML 1.2's floats), so the file written must quote it."""
    desc = ClusterDescription(
        nodes=(
            NodeSpec(name=f"n{text}" if text[0] in "-." else text, gpu_model=text, gpus=2),
            NodeSpec(
                name="b", gpu_model="H100", gpus=2, leaf=f"{text}1", labels={"r": text, text: "v"}
            ),
        )
    )
    path = tmp_path / "cluster.yaml"
    dump_cluster(desc, path)
    assert load_cluster(path) == desc


def test_a_yaml_merge_key_gives_its_anchor_s_fields_and_a_field_given_after_it_wins(
    tmp_path: Path,
) -> None:
    # (before: "not valid YAML: could not determine a constructor for the tag ...merge")
    p = tmp_path / "c.yaml"
    p.write_text(
        "version: 1\n"
        "nodes:\n"
        "  - &base {name: a, gpu_model: H100, gpus: 8, template: dgx-8gpu, rdma_nics: 8, leaf: l0}\n"
        "  - <<: *base\n"
        "    name: b\n"
        "  - <<: [*base]\n"
        "    name: c\n"
        "    leaf: l1\n"
    )
    nodes = load_cluster(p).nodes
    assert [(n.name, n.leaf, n.gpus, n.rdma_nics) for n in nodes] == [
        ("a", "l0", 8, 8), ("b", "l0", 8, 8), ("c", "l1", 8, 8),
    ]  # fmt: skip


def test_a_key_given_twice_beside_a_merge_key_is_still_refused(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(
        "version: 1\n"
        "nodes:\n"
        "  - &base {name: a, gpu_model: H100, gpus: 8, leaf: l0}\n"
        "  - <<: *base\n"
        "    name: b\n"
        "    name: c\n"
    )
    with pytest.raises(InvalidClusterFileError, match="found the key 'name' twice"):
        load_cluster(p)


@pytest.mark.parametrize(
    "node",
    [
        "  - <<: {name: a, name: b, gpu_model: H100, gpus: 8, leaf: l0}\n",
        "  - <<: [{name: a, name: b, gpu_model: H100, gpus: 8, leaf: l0}]\n",
        "  - <<:\n      name: a\n      name: b\n    gpus: 8\n",
        "  - <<: *base\n    <<: {gpus: 8}\n    name: b\n",
    ],
    ids=["inline", "inline-in-list", "block", "two-merge-keys"],
)
def test_a_key_given_twice_inside_a_merge_or_two_merge_keys_are_refused(
    tmp_path: Path, node: str
) -> None:
    # (they loaded silently, the first value winning)
    p = tmp_path / "c.yaml"
    p.write_text(
        "version: 1\nnodes:\n  - &base {name: a, gpu_model: H100, gpus: 8, leaf: l0}\n" + node
    )
    with pytest.raises(InvalidClusterFileError, match=r"found the key '(name|<<)' twice"):
        load_cluster(p)


def test_a_csv_given_as_a_cluster_file_is_said_to_be_no_cluster_file(tmp_path: Path) -> None:
    # (it was read as JSON: "not valid JSON: Expecting value", for an openb nodes CSV given
    # with another trace)
    p = tmp_path / "nodes.CSV"
    p.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M16\n")
    with pytest.raises(InvalidClusterFileError) as e:
        load_cluster(p)
    assert "a CSV" in e.value.reason and "not valid JSON" not in e.value.reason
