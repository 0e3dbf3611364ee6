"""Fat-tree builders, cluster descriptions, the fabric graph and shared tiers."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from kant.errors import InvalidClusterFileError, InvalidTopologyError, UnknownTemplateError
from kant.model import NodeSpec, Tier
from kant.topology import (
    ClusterDescription,
    fabric_graph,
    fat_tree,
    fat_tree_for_nodes,
    pcie_node,
    shared_tier,
)

# --------------------------------------------------------------------------- fat_tree


def test_default_fat_tree_has_two_spines_of_four_leaves_of_32_dgx_nodes():
    desc = fat_tree()
    assert len(desc.nodes) == 256
    assert desc.templates == ()
    assert {n.superspine for n in desc.nodes} == {"ss0"}
    assert {n.spine for n in desc.nodes} == {"ss0-sp0", "ss0-sp1"}
    assert len({n.leaf for n in desc.nodes}) == 8
    first = desc.nodes[0]
    assert first == NodeSpec(
        name="n000000",
        gpu_model="H100",
        gpus=8,
        cpu_milli=192_000,
        memory_mib=2 * 1024 * 1024,
        rdma_nics=8,
        template="dgx-8gpu",
        leaf="ss0-sp0-lf0",
        spine="ss0-sp0",
        superspine="ss0",
    )
    assert desc.total_gpus == 2048


@pytest.mark.parametrize(
    ("index", "leaf"),
    [(0, "ss0-sp0-lf0"), (31, "ss0-sp0-lf0"), (32, "ss0-sp0-lf1"), (128, "ss0-sp1-lf0")],
)
def test_fat_tree_numbers_nodes_leaf_by_leaf(index, leaf):
    node = fat_tree().nodes[index]
    assert node.name == f"n{index:06d}"
    assert node.leaf == leaf


def test_fat_tree_with_several_superspines_names_them_all():
    desc = fat_tree(superspines=2, spines_per_superspine=1, leaves_per_spine=1, nodes_per_leaf=2)
    assert [(n.name, n.leaf) for n in desc.nodes] == [
        ("n000000", "ss0-sp0-lf0"),
        ("n000001", "ss0-sp0-lf0"),
        ("n000002", "ss1-sp0-lf0"),
        ("n000003", "ss1-sp0-lf0"),
    ]


def test_hbd_groups_are_consecutive_nodes_inside_one_leaf():
    desc = fat_tree(spines_per_superspine=1, leaves_per_spine=2, nodes_per_leaf=5, hbd_size=2)
    assert [n.hbd for n in desc.nodes] == [
        "hbd-0", "hbd-0", "hbd-1", "hbd-1", "hbd-2",
        "hbd-3", "hbd-3", "hbd-4", "hbd-4", "hbd-5",
    ]  # fmt: skip
    for hbd in {n.hbd for n in desc.nodes}:
        assert len({n.leaf for n in desc.nodes if n.hbd == hbd}) == 1


def test_first_zone_nodes_join_the_zone():
    desc = fat_tree(nodes_per_leaf=4, zone_nodes=3, zone="serving")
    assert [n.zone for n in desc.nodes[:4]] == ["serving", "serving", "serving", None]
    assert all(n.zone is None for n in desc.nodes[3:])


def test_fat_tree_with_a_custom_template_lists_it_and_copies_its_counts():
    t = pcie_node("custom-4gpu", 4, 2)
    desc = fat_tree(template=t, nodes_per_leaf=2, leaves_per_spine=1, gpu_model="L40S")
    assert desc.templates == (t,)
    assert all(n.gpus == 4 and n.rdma_nics == 2 and n.template == t.name for n in desc.nodes)


def test_fat_tree_with_an_unknown_template_name_fails():
    with pytest.raises(UnknownTemplateError):
        fat_tree(template="no-such-template")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"superspines": 0}, "superspines"),
        ({"nodes_per_leaf": -1}, "nodes_per_leaf"),
        ({"leaves_per_spine": True}, "leaves_per_spine"),
        ({"hbd_size": 0}, "hbd_size"),
        ({"zone_nodes": -2}, "zone_nodes"),
    ],
    ids=["no superspines", "negative nodes per leaf", "a bool leaf count", "empty hbds",
         "negative zone nodes"],
)  # fmt: skip
def test_fat_tree_rejects_bad_shapes(kwargs, field):
    with pytest.raises(InvalidTopologyError) as e:
        fat_tree(**kwargs)
    assert e.value.field == field


def test_fat_tree_for_nodes_builds_exactly_that_many_with_a_partial_last_leaf():
    desc = fat_tree_for_nodes(100)
    assert len(desc.nodes) == 100
    leaves = [n.leaf for n in desc.nodes]
    assert sorted(set(leaves)) == ["ss0-sp0-lf0", "ss0-sp0-lf1", "ss0-sp0-lf2", "ss0-sp0-lf3"]
    assert leaves.count("ss0-sp0-lf3") == 4
    assert desc.nodes[-1].name == "n000099"


def test_fat_tree_for_nodes_adds_superspines_as_needed():
    desc = fat_tree_for_nodes(
        5, nodes_per_leaf=2, leaves_per_spine=1, spines_per_superspine=2, gpu_model="A100"
    )
    assert [n.leaf for n in desc.nodes] == [
        "ss0-sp0-lf0", "ss0-sp0-lf0", "ss0-sp1-lf0", "ss0-sp1-lf0", "ss1-sp0-lf0",
    ]  # fmt: skip
    assert {n.gpu_model for n in desc.nodes} == {"A100"}


def test_fat_tree_for_nodes_rejects_zero_nodes():
    with pytest.raises(InvalidTopologyError):
        fat_tree_for_nodes(0)


# --------------------------------------------------------------------------- description


def node(name: str, **kw: Any) -> NodeSpec:
    return NodeSpec(name=name, **kw)


def gpu_node(name: str, **kw: Any) -> NodeSpec:
    return node(name, gpu_model="H100", gpus=8, rdma_nics=8, template="dgx-8gpu", **kw)


@pytest.mark.parametrize(
    ("nodes", "templates", "field", "where"),
    [
        ([node("a"), node("a")], (), "name", "nodes[1]"),
        ([node("a", template="nope")], (), "template", "nodes[0]"),
        ([node("a", gpu_model="H100", gpus=4, rdma_nics=8, template="dgx-8gpu")], (), "gpus",
         "nodes[0]"),
        ([node("a", gpu_model="H100", gpus=8, rdma_nics=0, template="dgx-8gpu")], (),
         "rdma_nics", "nodes[0]"),
        ([gpu_node("a", leaf="l0", spine="s0"), gpu_node("b", leaf="l0", spine="s1")], (),
         "spine", "nodes[1]"),
        ([gpu_node("a", leaf="l0", spine="s0"), gpu_node("b", leaf="l0")], (), "spine",
         "nodes[1]"),
        ([gpu_node("a", leaf="l0", spine="s0", superspine="x"),
          gpu_node("b", leaf="l1", spine="s0", superspine="y")], (), "superspine", "nodes[1]"),
        ([gpu_node("a", leaf="l0"), gpu_node("l0")], (), "name", "nodes[1]"),
        ([gpu_node("a", leaf="x", hbd="x")], (), "hbd", "nodes[0]"),
        ([], (pcie_node("t", 2), pcie_node("t", 4)), "name", "templates[1]"),
        ([], (pcie_node("dgx-8gpu", 8, 8),), "name", "templates[0]"),
    ],
    ids=[
        "duplicate node names",
        "an unknown template",
        "a gpu count that differs from the template",
        "a nic count that differs from the template",
        "a leaf under two spines",
        "a leaf under a spine and under none",
        "a spine under two superspines",
        "a node named like a leaf",
        "an hbd named like a leaf",
        "two templates with one name",
        "a template that shadows a different built-in",
    ],
)  # fmt: skip
def test_invalid_description_names_field_and_entry(nodes, templates, field, where):
    with pytest.raises(InvalidClusterFileError) as e:
        ClusterDescription(nodes=nodes, templates=templates)
    assert e.value.field == field
    assert e.value.where == where


def test_description_resolves_listed_and_builtin_templates():
    t = pcie_node("custom", 2)
    desc = ClusterDescription(
        nodes=[node("a", gpu_model="T4", gpus=2, template="custom")], templates=[t]
    )
    assert desc.template("custom") is t
    assert desc.template("dgx-8gpu").num_gpus == 8
    with pytest.raises(UnknownTemplateError):
        desc.template("nope")


def test_description_may_list_a_builtin_template_unchanged():
    from kant.topology import dgx_8gpu

    desc = ClusterDescription(nodes=[gpu_node("a")], templates=[dgx_8gpu()])
    assert desc.templates == (dgx_8gpu(),)


# --------------------------------------------------------------------------- fabric graph


def test_fabric_graph_links_superspine_spine_leaf_node_and_hbd():
    desc = fat_tree(spines_per_superspine=2, leaves_per_spine=2, nodes_per_leaf=2, hbd_size=2)
    g = fabric_graph(desc)
    kinds: dict[str, int] = {}
    for _v, data in g.nodes(data=True):
        kinds[data["kind"]] = kinds.get(data["kind"], 0) + 1
    assert kinds == {"superspine": 1, "spine": 2, "leaf": 4, "node": 8, "hbd": 4}
    assert g.edges["ss0", "ss0-sp1"]["tier"] == "SUPERSPINE"
    assert g.edges["ss0-sp1", "ss0-sp1-lf0"]["tier"] == "SPINE"
    assert g.edges["ss0-sp1-lf0", "n000004"]["tier"] == "LEAF"
    assert g.edges["hbd-2", "n000004"]["tier"] == "HBD"
    assert sorted(g.successors("ss0-sp0")) == ["ss0-sp0-lf0", "ss0-sp0-lf1"]
    assert g.number_of_edges() == 2 + 4 + 8 + 8


def test_fabric_graph_node_vertices_carry_the_node_spec():
    desc = fat_tree(nodes_per_leaf=1, leaves_per_spine=1, spines_per_superspine=1, zone_nodes=1)
    data = fabric_graph(desc).nodes["n000000"]
    assert data == {"kind": "node", **attrs.asdict(desc.nodes[0])}
    assert data["zone"] == "inference"


def test_fabric_graph_keeps_unplaced_nodes_as_isolated_vertices():
    g = fabric_graph(ClusterDescription(nodes=[node("cpu-0"), gpu_node("g", leaf="l")]))
    assert g.degree("cpu-0") == 0
    assert g.nodes["l"]["kind"] == "leaf"
    assert list(g.predecessors("l")) == []


# --------------------------------------------------------------------------- shared tier

FABRIC = {
    "a": gpu_node("a", leaf="l0", spine="s0", superspine="x", hbd="h0"),
    "b": gpu_node("b", leaf="l0", spine="s0", superspine="x", hbd="h0"),
    "c": gpu_node("c", leaf="l0", spine="s0", superspine="x", hbd="h1"),
    "d": gpu_node("d", leaf="l1", spine="s0", superspine="x"),
    "e": gpu_node("e", leaf="l2", spine="s1", superspine="x"),
    "f": gpu_node("f", leaf="l3", spine="s2", superspine="y"),
    "g": gpu_node("g"),
    "h": gpu_node("h"),
}


@pytest.mark.parametrize(
    ("a", "b", "tier"),
    [
        ("a", "a", Tier.NODE),
        ("a", "b", Tier.HBD),
        ("a", "c", Tier.LEAF),
        ("a", "d", Tier.SPINE),
        ("a", "e", Tier.SUPERSPINE),
        ("a", "f", Tier.CLUSTER),
        ("g", "h", Tier.CLUSTER),
        ("g", "a", Tier.CLUSTER),
    ],
    ids=[
        "a node shares itself",
        "nodes in one hbd",
        "different hbds under one leaf",
        "different leaves under one spine",
        "different spines under one superspine",
        "different superspines",
        "two unplaced nodes share nothing but the cluster",
        "an unplaced and a placed node",
    ],
)
def test_shared_tier(a, b, tier):
    assert shared_tier(FABRIC[a], FABRIC[b]) == tier
    assert shared_tier(FABRIC[b], FABRIC[a]) == tier
