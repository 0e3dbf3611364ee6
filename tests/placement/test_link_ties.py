"""Ties between equally scored nodes go to the node whose best free GPUs for the pod are linked
best (docs/placement.md, "Ties"): a 2-GPU pod no longer gets a cross-NUMA pair on one PCIe
node while another node, scored the same, offers a pair under one switch."""

from __future__ import annotations

import pytest

from kant.model import Binding, PodId
from kant.placement import Placer
from kant.state import ClusterState
from kant.testing import ClusterBuilder, job, node

# pcie-8gpu: GPUs 0-3 on NUMA 0 (switches 0: 0,1; 1: 2,3), 4-7 on NUMA 1 (2: 4,5; 3: 6,7)


def _two_nodes(free0: tuple[int, ...], free1: tuple[int, ...], template: str = "pcie-8gpu"
               ) -> ClusterState:  # fmt: skip
    """Two 8-GPU nodes of ``template`` with only ``free0`` / ``free1`` GPUs free."""
    b = ClusterBuilder()
    for i in range(2):
        b.add(node(f"n{i}", template=template, nics=0, leaf="lf0", spine="sp0",
                   superspine="ss0"))  # fmt: skip
    state = b.build()
    for i, free in enumerate((free0, free1)):
        used = tuple(g for g in range(8) if g not in free)
        state.bind(Binding(pod=PodId(job=f"hold{i}", role="w", index=0), node=f"n{i}",
                           gpus=used))  # fmt: skip
    return state


@pytest.mark.parametrize("strategy", ["ebinpack", "binpack", "spread", "firstfit", "topology"])
def test_a_two_gpu_pod_takes_the_node_with_a_pair_under_one_switch(strategy: str) -> None:
    state = _two_nodes(free0=(0, 4), free1=(2, 3))
    (b,) = Placer(strategy).place(job("p", gpus=2), state.snapshot()).bindings
    assert (b.node, b.gpus) == ("n1", (2, 3))


def test_the_link_rank_orders_ties_worst_link_first() -> None:
    # n0: a pair on one NUMA node but two switches; n1: a pair under one switch
    state = _two_nodes(free0=(0, 2), free1=(6, 7))
    (b,) = Placer("ebinpack").place(job("p", gpus=2), state.snapshot()).bindings
    assert b.node == "n1"


def test_equally_linked_ties_still_go_to_the_first_node() -> None:
    state = _two_nodes(free0=(0, 1), free1=(2, 3))
    (b,) = Placer("ebinpack").place(job("p", gpus=2), state.snapshot()).bindings
    assert b.node == "n0"


def test_a_better_score_wins_over_better_links() -> None:
    # E-Binpack prefers the fuller node even though its pair crosses NUMA
    state = _two_nodes(free0=(0, 4), free1=(0, 1, 2, 3))
    (b,) = Placer("ebinpack").place(job("p", gpus=2), state.snapshot()).bindings
    assert b.node == "n0"


def test_one_gpu_pods_and_evenly_linked_templates_keep_the_first_node() -> None:
    state = _two_nodes(free0=(0, 4), free1=(2, 3))
    (b,) = Placer("ebinpack").place(job("p", gpus=1), state.snapshot()).bindings
    assert b.node == "n0"
    dgx = _two_nodes(free0=(0, 4), free1=(2, 3), template="dgx-8gpu")
    (b,) = Placer("ebinpack").place(job("p", gpus=2), dgx.snapshot()).bindings
    assert b.node == "n0"  # every pair is on NVLink: nothing to tell apart


def test_a_gang_filling_a_domain_takes_the_better_linked_node_of_a_tie_first() -> None:
    state = _two_nodes(free0=(0, 4), free1=(2, 3))
    g = job("g", gpus=2, replicas=2)
    got = {
        b.pod.index: (b.node, b.gpus)
        for b in Placer("ebinpack").place(g, state.snapshot()).bindings
    }
    assert got[0] == ("n1", (2, 3)) and got[1] == ("n0", (0, 4))
