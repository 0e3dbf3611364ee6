"""Node templates: link ranks, GPU and NIC choice, graphs, builders and the registry."""

from __future__ import annotations

import time

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kant.errors import DuplicateError, InvalidTopologyError, UnknownTemplateError
from kant.model import LinkKind
from kant.topology import (
    BUILTIN_TEMPLATES,
    GpuSlot,
    NicSlot,
    NodeTemplate,
    dgx_8gpu,
    get_template,
    openb_template_name,
    pcie_8gpu,
    pcie_node,
    register_template,
    templates,
)

S, NV, PX, NU, X = (
    LinkKind.SELF,
    LinkKind.NVLINK,
    LinkKind.PCIE_SWITCH,
    LinkKind.NUMA,
    LinkKind.CROSS_NUMA,
)


def mask(*gpus: int) -> int:
    return sum(1 << g for g in gpus)


def two_nvlink_islands() -> NodeTemplate:
    """16 GPUs: an 8-GPU NVSwitch island per NUMA domain, two GPUs per PCIe switch."""
    return NodeTemplate(
        name="two-islands-16gpu",
        gpus=tuple(
            GpuSlot(numa=g // 8, pcie_switch=g // 2, nvlink_domain=g // 8) for g in range(16)
        ),
        nics=(),
    )


# --------------------------------------------------------------------------- link ranks


def test_dgx_links_every_gpu_pair_over_nvlink():
    t = dgx_8gpu()
    expected = np.full((8, 8), NV, dtype=np.int8)
    np.fill_diagonal(expected, S)
    assert t.link_rank.dtype == np.int8
    assert (t.link_rank == expected).all()


def test_dgx_host_rank_still_sees_pcie_switches_and_numa():
    assert (dgx_8gpu().host_rank == pcie_8gpu().link_rank).all()


@pytest.mark.parametrize(
    ("a", "b", "kind"),
    [
        (0, 0, S),
        (0, 1, PX),
        (2, 3, PX),
        (0, 2, NU),
        (5, 7, NU),
        (0, 4, X),
        (3, 6, X),
    ],
    ids=[
        "a gpu is itself",
        "gpus 0 and 1 share switch 0",
        "gpus 2 and 3 share switch 1",
        "gpus 0 and 2 share numa 0 only",
        "gpus 5 and 7 share numa 1 only",
        "gpus 0 and 4 cross numa",
        "gpus 3 and 6 cross numa",
    ],
)
def test_pcie_8gpu_link_rank_follows_switch_and_numa_layout(a, b, kind):
    t = pcie_8gpu()
    assert t.link_rank[a, b] == kind
    assert t.link_rank[b, a] == kind


def test_pcie_8gpu_nics_are_nearest_to_the_gpus_on_their_switch():
    t = pcie_8gpu()
    assert t.nic_rank.shape == (8, 8)
    assert t.nic_rank[0, 0] == PX and t.nic_rank[0, 1] == PX
    assert t.nic_rank[0, 2] == NU
    assert t.nic_rank[0, 7] == X
    assert (t.nic_rank == dgx_8gpu().nic_rank).all()


def test_derived_arrays_are_read_only():
    t = pcie_8gpu()
    with pytest.raises(ValueError):
        t.link_rank[0, 1] = 0
    with pytest.raises(ValueError):
        t.nic_rank[0, 0] = 0


def test_nvlink_domain_trumps_numa_distance():
    t = two_nvlink_islands()
    assert t.link_rank[0, 7] == NV
    assert t.link_rank[0, 8] == X
    assert t.host_rank[0, 7] == NU


# --------------------------------------------------------------------------- best_gpu_set

ALL8 = 0xFF


@pytest.mark.parametrize(
    ("template", "free", "k", "want"),
    [
        ("pcie-8gpu", ALL8, 2, mask(0, 1)),
        ("pcie-8gpu", mask(0, 2, 3, 4), 2, mask(2, 3)),
        ("pcie-8gpu", mask(0, 1, 2), 1, mask(2)),
        ("pcie-8gpu", mask(0, 1, 2, 4, 5), 2, mask(4, 5)),
        ("pcie-8gpu", mask(0, 1, 2, 3, 4), 1, mask(4)),
        ("pcie-8gpu", mask(0, 2, 4, 5, 6, 7), 4, mask(4, 5, 6, 7)),
        ("pcie-8gpu", mask(0, 4), 2, mask(0, 4)),
        ("dgx-8gpu", ALL8, 8, ALL8),
        ("dgx-8gpu", ALL8, 2, mask(0, 1)),
        ("dgx-8gpu", mask(1, 2, 3), 2, mask(2, 3)),
        ("dgx-8gpu", mask(0, 2, 3, 4), 1, mask(4)),
        ("dgx-8gpu", mask(1, 3, 5), 0, 0),
    ],
    ids=[
        "pcie two gpu pod takes the two gpus under one pcie switch",
        "pcie two gpu pod takes the intact switch pair over split numa neighbours",
        "pcie one gpu pod takes the lone gpu and keeps the pair intact",
        "pcie two gpu pod keeps three gpus of one numa together",
        "pcie one gpu pod takes the gpu alone in its numa domain",
        "pcie four gpu pod takes a whole numa domain",
        "pcie two gpu pod crosses numa when nothing else is free",
        "dgx eight gpu pod takes the whole node",
        "dgx two gpu pod prefers gpus sharing a pcie switch",
        "dgx two gpu pod takes the intact switch pair",
        "dgx one gpu pod takes the gpu far from the other free gpus",
        "zero gpus is the empty set",
    ],
)
def test_best_gpu_set_scenarios(template, free, k, want):
    assert get_template(template).best_gpu_set(free, k) == want


def test_best_gpu_set_is_none_when_too_few_gpus_are_free():
    assert pcie_8gpu().best_gpu_set(mask(0, 5), 3) is None


def test_best_gpu_set_with_every_free_gpu_wanted_returns_them_all():
    assert pcie_8gpu().best_gpu_set(mask(1, 4, 6), 3) == mask(1, 4, 6)


def test_best_gpu_set_answers_repeat_questions_identically():
    t = pcie_8gpu()
    first = [t.best_gpu_set(free, k) for free in range(256) for k in range(9)]
    again = [t.best_gpu_set(free, k) for free in range(256) for k in range(9)]
    assert first == again


@pytest.mark.parametrize(
    ("free", "k", "field"),
    [(1 << 8, 1, "free_mask"), (-1, 1, "free_mask"), (ALL8, -1, "k")],
    ids=["a mask bit beyond the gpus", "a negative mask", "a negative k"],
)
def test_best_gpu_set_rejects_bad_arguments(free, k, field):
    with pytest.raises(InvalidTopologyError) as e:
        pcie_8gpu().best_gpu_set(free, k)
    assert e.value.field == field


def test_sixteen_gpu_node_keeps_an_eight_gpu_pod_inside_one_nvlink_island():
    t = two_nvlink_islands()
    assert t.best_gpu_set(0xFFFF, 8) in (0x00FF, 0xFF00)
    free = 0xFFFF & ~mask(0, 9)  # one GPU busy in each island
    got = t.best_gpu_set(free, 4)
    assert got is not None
    assert got & 0x00FF == got or got & 0xFF00 == got


def test_a_4_gpu_pod_on_a_16_gpu_pcie_node_takes_two_whole_switches_over_three_partial_ones():
    # GPUs 4, 6 and 10 busy: 715 candidate sets, beyond the exhaustive search. GPUs 0-3 (two
    # whole switches, link sum 16) beat 0, 1, 5, 7 (three switches, 17), same worst link.
    t = pcie_node("pcie-16gpu-test", 16)
    assert t.best_gpu_set(0xFFFF & ~mask(4, 6, 10), 4) == mask(0, 1, 2, 3)


def test_sixty_four_gpu_node_answers_big_requests_quickly():
    t = pcie_node("pcie-64gpu-test", 64, 64)
    start = time.perf_counter()
    half = t.best_gpu_set((1 << 64) - 1, 32)
    elapsed = time.perf_counter() - start
    assert half == (1 << 32) - 1  # one whole NUMA domain
    assert elapsed < 1.0
    odd = t.best_gpu_set(((1 << 64) - 1) & ~mask(0, 1, 3), 7)
    assert odd is not None and odd.bit_count() == 7
    assert max(g for g in range(64) if odd >> g & 1) < 32  # stays in NUMA 0


# --------------------------------------------------------------------------- best_nics


@pytest.mark.parametrize(
    ("gpus", "free_nics", "n", "want"),
    [
        (mask(2, 3), 0xFF, 2, mask(2, 3)),
        (mask(2, 3), 0xFF, 1, mask(2)),
        (mask(0, 2), 0xFF, 2, mask(0, 2)),
        (mask(0, 2, 3), 0xFF, 1, mask(2)),
        (mask(0, 2, 3), 0xFF, 2, mask(0, 2)),
        (mask(0, 2, 3), 0xFF, 3, mask(0, 2, 3)),
        (mask(0, 1, 2, 3), 0xFF & ~mask(2), 2, mask(0, 3)),
        (mask(2, 3), 0xFF & ~mask(2, 3), 2, mask(0, 1)),
        (mask(6), mask(0, 5), 1, mask(5)),
        (mask(6), mask(0, 1), 1, mask(0)),
        (0, mask(3, 6), 1, mask(3)),
        (mask(0), 0xFF, 0, 0),
    ],
    ids=[
        "gpus under switch 1 get the nics of switch 1",
        "one nic for gpus under switch 1 is the first of switch 1",
        "gpus on two switches get a nic on each switch",
        "the switch hosting more of the gpus wins",
        "each switch of the gpus gets a nic before one gets a second",
        "a second nic goes to the switch hosting more of the gpus",
        "a switch whose first nic is busy still gets its second",
        "busy switch nics fall back to the same numa domain",
        "a same numa nic beats a cross numa one",
        "a cross numa nic is used when nothing closer is free",
        "no gpus takes the lowest free nic",
        "zero nics is the empty set",
    ],
)
def test_best_nics_scenarios(gpus, free_nics, n, want):
    assert dgx_8gpu().best_nics(gpus, free_nics, n) == want


@settings(max_examples=300, deadline=None)
@given(
    template=st.sampled_from(["pcie-8gpu", "dgx-8gpu"]),
    gpus=st.integers(1, ALL8),
    free_nics=st.integers(0, ALL8),
    n=st.integers(1, 8),
)
def test_best_nics_never_puts_two_nics_on_a_switch_of_the_gpus_while_another_has_none_free(
    template: str, gpus: int, free_nics: int, n: int
) -> None:
    t = get_template(template)
    got = t.best_nics(gpus, free_nics, n)
    if got is None:
        assert free_nics.bit_count() < n
        return
    switch = [(s.numa, s.pcie_switch) for s in t.nics]
    mine = {(t.gpus[g].numa, t.gpus[g].pcie_switch) for g in range(8) if gpus >> g & 1}
    taken = [switch[j] for j in range(8) if got >> j & 1]
    free_left = {switch[j] for j in range(8) if (free_nics & ~got) >> j & 1}
    doubled = {sw for sw in mine if taken.count(sw) >= 2}
    starved = {sw for sw in mine if taken.count(sw) == 0 and sw in free_left}
    assert not (doubled and starved)


def test_best_nics_is_none_when_too_few_nics_are_free():
    assert pcie_8gpu().best_nics(mask(0), mask(4), 2) is None


def test_best_nics_rejects_a_nic_mask_beyond_the_nics():
    with pytest.raises(InvalidTopologyError) as e:
        get_template("openb-8gpu").best_nics(mask(0), 1, 1)
    assert e.value.field == "free_nic_mask"


# --------------------------------------------------------------------------- best_devices


@pytest.mark.parametrize(
    ("free_gpus", "free_nics", "k", "n", "want"),
    [
        # NICs 0, 1 taken: of the equally linked pairs, the one whose switch has free NICs
        (ALL8, 0b11111100, 2, 2, (mask(2, 3), mask(2, 3))),
        # GPU links come first: a same-switch pair with NICs elsewhere beats a split pair
        (mask(0, 1, 2, 4), mask(2, 4), 2, 2, (mask(0, 1), mask(2, 4))),
        # every NIC free: the GPU set best_gpu_set picks, and its NICs
        (ALL8, ALL8, 2, 2, (mask(0, 1), mask(0, 1))),
        # NICs 2, 3 taken: of the equally linked halves, the one where each switch gets a NIC
        (ALL8, ALL8 & ~mask(2, 3), 4, 2, (mask(4, 5, 6, 7), mask(4, 6))),
        # no NIC asked: best_gpu_set's choice
        (ALL8, 0b11111100, 2, 0, (mask(0, 1), 0)),
    ],
)
def test_best_devices_pairs_the_gpus_with_the_nics_on_their_path(free_gpus, free_nics, k, n, want):
    t = pcie_8gpu()
    assert t.best_devices(free_gpus, k, free_nics, n) == want


@settings(max_examples=300, deadline=None)
@given(
    template=st.sampled_from(["pcie-8gpu", "dgx-8gpu"]),
    free=st.integers(0, ALL8),
    free_nics=st.integers(0, ALL8),
    k=st.integers(0, 5),
    n=st.integers(0, 4),
)
def test_best_devices_never_links_worse_and_never_takes_farther_nics(
    template: str, free: int, free_nics: int, k: int, n: int
) -> None:
    t = get_template(template)
    alone = t.best_gpu_set(free, k)
    nics = None if alone is None else t.best_nics(alone, free_nics, n)
    got = t.best_devices(free, k, free_nics, n)
    if alone is None or nics is None:
        assert got is None
        return
    assert got is not None
    gpus, chosen = got
    assert gpus & ~free == 0 and gpus.bit_count() == k
    assert chosen & ~free_nics == 0 and chosen.bit_count() == n
    assert t.link_key(gpus) == t.link_key(alone)  # links never traded for NICs
    assert t._nic_cost(gpus, chosen) <= t._nic_cost(alone, nics)


def test_best_devices_is_none_when_too_few_gpus_or_nics_are_free():
    t = pcie_8gpu()
    assert t.best_devices(mask(0), 2, ALL8, 1) is None
    assert t.best_devices(ALL8, 2, mask(4), 2) is None


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: GpuSlot(numa=-1, pcie_switch=0), "numa"),
        (lambda: GpuSlot(numa=0, pcie_switch=True), "pcie_switch"),
        (lambda: GpuSlot(numa=0, pcie_switch=0, nvlink_domain="a"), "nvlink_domain"),
        (lambda: NicSlot(numa=0, pcie_switch=1.5), "pcie_switch"),
        (lambda: NodeTemplate(name="", gpus=()), "name"),
        (lambda: NodeTemplate(name="a/b", gpus=()), "name"),
        (lambda: NodeTemplate(name="t", gpus=(NicSlot(numa=0, pcie_switch=0),)), "gpus"),
        (
            lambda: NodeTemplate(name="t", gpus=(GpuSlot(numa=0, pcie_switch=0),) * 65),
            "gpus",
        ),
        (
            lambda: NodeTemplate(name="t", gpus=(), nics=(NicSlot(numa=0, pcie_switch=0),) * 65),
            "nics",
        ),
        (lambda: pcie_node("p", 0), "gpus"),
        (lambda: pcie_node("p", 2, -1), "nics"),
    ],
    ids=[
        "a negative numa domain",
        "a bool pcie switch",
        "a string nvlink domain",
        "a float nic switch",
        "an empty template name",
        "a template name with a slash",
        "a nic slot among the gpus",
        "more than 64 gpus",
        "more than 64 nics",
        "a pcie node without gpus",
        "a negative nic count",
    ],
)
def test_invalid_topology_names_the_field(build, field):
    with pytest.raises(InvalidTopologyError) as e:
        build()
    assert e.value.field == field


def test_templates_compare_by_layout_and_accept_lists():
    a = NodeTemplate(name="t", gpus=[GpuSlot(numa=0, pcie_switch=0)], nics=[])
    b = NodeTemplate(name="t", gpus=(GpuSlot(numa=0, pcie_switch=0),))
    a.best_gpu_set(1, 1)  # a warm memo does not change equality
    assert a == b and hash(a) == hash(b)
    assert isinstance(a.gpus, tuple)


# --------------------------------------------------------------------------- graph


def test_dgx_graph_has_documented_vertices_and_links():
    g = dgx_8gpu().to_graph()
    kinds: dict[str, int] = {}
    for _v, data in g.nodes(data=True):
        kinds[data["kind"]] = kinds.get(data["kind"], 0) + 1
    assert kinds == {"gpu": 8, "nic": 8, "pcie_switch": 4, "numa": 2, "nvlink_domain": 1}
    assert g.graph["name"] == "dgx-8gpu"
    assert g.nodes["gpu", 3] == {
        "kind": "gpu",
        "index": 3,
        "numa": 0,
        "pcie_switch": 1,
        "nvlink_domain": 0,
    }
    assert g.edges[("gpu", 3), ("pcie_switch", 0, 1)]["link"] == "PCIE_SWITCH"
    assert g.edges[("gpu", 3), ("nvlink", 0)]["link"] == "NVLINK"
    assert g.edges[("nic", 7), ("pcie_switch", 1, 3)]["link"] == "PCIE_SWITCH"
    assert g.edges[("pcie_switch", 1, 3), ("numa", 1)]["link"] == "NUMA"
    assert g.edges[("numa", 0), ("numa", 1)]["link"] == "CROSS_NUMA"
    assert nx.is_connected(g)


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_every_builtin_template_survives_a_graph_round_trip(name):
    t = get_template(name)
    assert NodeTemplate.from_graph(t.to_graph()) == t


def test_a_user_built_graph_becomes_a_template():
    g = nx.Graph(name="tiny")
    g.add_node("sw", kind="pcie_switch", numa=0, pcie_switch=0)
    g.add_node("nvs", kind="nvlink_domain", nvlink_domain=0)
    for i in range(2):
        g.add_node(f"g{i}", kind="gpu", index=i)
        g.add_edge(f"g{i}", "sw")
        g.add_edge(f"g{i}", "nvs")
    g.add_node("eth", kind="nic", index=0)
    g.add_edge("eth", "sw")
    t = NodeTemplate.from_graph(g)
    assert t.name == "tiny"
    assert t.link_rank[0, 1] == NV
    assert t.nic_rank.tolist() == [[PX], [PX]]


def test_a_graph_gpu_without_a_pcie_switch_is_rejected():
    g = nx.Graph(name="broken")
    g.add_node("g0", kind="gpu", index=0)
    with pytest.raises(InvalidTopologyError) as e:
        NodeTemplate.from_graph(g)
    assert e.value.field == "pcie_switch"


# --------------------------------------------------------------------------- builders


@pytest.mark.parametrize(
    ("gpus", "numas", "switches"),
    [(1, [0], [0]), (2, [0, 0], [0, 0]), (4, [0, 0, 1, 1], [0, 0, 1, 1])],
    ids=["one gpu", "two gpus share a switch", "four gpus split over two numa domains"],
)
def test_pcie_node_pairs_gpus_per_switch(gpus, numas, switches):
    t = pcie_node("p", gpus)
    assert [s.numa for s in t.gpus] == numas
    assert [s.pcie_switch for s in t.gpus] == switches
    assert t.nics == ()


def test_pcie_8gpu_is_the_eight_gpu_pcie_node_with_a_nic_per_gpu():
    t = pcie_8gpu()
    assert t == pcie_node("pcie-8gpu", 8, 8)
    assert [(s.numa, s.pcie_switch) for s in t.nics] == [(g // 4, g // 2) for g in range(8)]
    assert all(s.nvlink_domain is None for s in t.gpus)


@pytest.mark.parametrize(
    ("gpus", "name"),
    [(0, None), (1, "openb-1gpu"), (2, "openb-2gpu"), (4, "openb-4gpu"), (8, "openb-8gpu")],
)
def test_openb_template_names(gpus, name):
    assert openb_template_name(gpus) == name
    if name is not None:
        assert get_template(name).num_gpus == gpus


def test_openb_template_name_rejects_other_shapes():
    with pytest.raises(InvalidTopologyError):
        openb_template_name(3)


# --------------------------------------------------------------------------- registry


def test_registry_lists_builtins_sorted():
    names = templates()
    assert names == sorted(names)
    assert set(BUILTIN_TEMPLATES) <= set(names)
    assert set(BUILTIN_TEMPLATES) == {
        "dgx-8gpu",
        "pcie-8gpu",
        "openb-1gpu",
        "openb-2gpu",
        "openb-4gpu",
        "openb-8gpu",
    }


def test_unknown_template_is_a_lookup_error_naming_it():
    with pytest.raises(UnknownTemplateError, match="no-such-node"):
        get_template("no-such-node")


def test_registering_an_equal_template_twice_is_fine():
    t = pcie_node("test-registry-equal", 4, 2)
    assert register_template(t) == t
    assert register_template(pcie_node("test-registry-equal", 4, 2)) == t
    assert get_template("test-registry-equal") == t


def test_registering_a_different_template_under_a_taken_name_fails():
    with pytest.raises(DuplicateError):
        register_template(pcie_node("dgx-8gpu", 8, 8))
    assert get_template("dgx-8gpu") == dgx_8gpu()
