"""The tier search orders domains by the room they have left (best fit), and a strategy's
candidate sets bound that room, so the group probe changes speed only."""

from __future__ import annotations

import pytest

from kant.model import Binding, JobKind, PodId, ReasonCode, Tier
from kant.placement import Placer
from kant.state import ClusterState
from kant.testing import ClusterBuilder, job, node


def _one_half_used() -> ClusterState:
    """Three empty 8-GPU nodes of one leaf, but lf0-n1 has 4 GPUs used."""
    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    st.bind(Binding(pod=PodId(job="a", role="w", index=0), node="lf0-n1", gpus=(0, 1, 2, 3)))
    return st


@pytest.mark.parametrize("strategy", ["ebinpack", "topology"])
@pytest.mark.parametrize("bulk", [True, False])
def test_a_gang_fills_the_partly_used_node_that_fits_it_exactly_not_an_empty_one(
    strategy: str, bulk: bool
) -> None:
    # the empty lf0-n0 comes first by slot; both hold the two 2-GPU replicas, but lf0-n1 is
    # the tightest: an empty node stays whole for a job that needs one
    res = Placer(strategy, bulk=bulk).place(
        job("g", gpus=2, replicas=2), _one_half_used().snapshot()
    )
    assert [b.node for b in res.bindings] == ["lf0-n1", "lf0-n1"]


def test_a_gang_takes_the_leaf_with_least_room_left_that_holds_it() -> None:
    # leaf a: one empty node (room for 8 one-GPU pods); leaf b: one node with 3 GPUs left.
    # Both hold the two pods; b has less left. Capped at the 2 pods, they tied and a won
    st = ClusterBuilder().leaf("a", nodes=1).leaf("b", nodes=1).build()
    st.bind(Binding(pod=PodId(job="x", role="w", index=0), node="b-n0", gpus=tuple(range(5))))
    res = Placer("ebinpack").place(
        job("g", gpus=1, replicas=2, tier=Tier.LEAF, required=True), st.snapshot()
    )
    assert [b.node for b in res.bindings] == ["b-n0", "b-n0"]


def test_spread_takes_the_emptiest_node_that_holds_a_gang() -> None:
    # lf0-n0 (the first slot) is half used, lf0-n1 empty: Spread's domains go emptiest first
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    st.bind(Binding(pod=PodId(job="a", role="w", index=0), node="lf0-n0", gpus=(0, 1, 2, 3)))
    res = Placer("spread").place(
        job("g", gpus=2, replicas=2, tier=Tier.NODE, required=True), st.snapshot()
    )
    assert [b.node for b in res.bindings] == ["lf0-n1", "lf0-n1"]


@pytest.mark.parametrize("probe", [1, 4, 5, 6, 100])
@pytest.mark.parametrize("tier", [Tier.NODE, Tier.LEAF])
def test_an_espread_gang_with_a_wish_finds_the_general_node_whatever_the_group_probe(
    probe: int, tier: Tier
) -> None:
    # five zone nodes take one replica each; only the general g0 holds both replicas on
    # one node. Each zone node counted as holding both, so the first `probe` domains
    # tried failed to fill and a required NODE wish answered TOPOLOGY unless the probe
    # reached g0
    specs = [
        node(f"z{i}", leaf="lz", spine="sp0", superspine="ss0", zone="inference") for i in range(5)
    ]
    st = ClusterState([*specs, node("g0", leaf="lg", spine="sp0", superspine="ss0")])
    svc = job("svc", gpus=2, replicas=2, kind=JobKind.INFERENCE, tier=tier, required=True)
    res = Placer("espread", group_probe=probe).place(svc, st.snapshot())
    assert res.ok, {str(k): v.code for k, v in res.unplaced.items()}
    if tier is Tier.NODE:
        assert [b.node for b in res.bindings] == ["g0", "g0"]
    else:  # (a leaf: the zone's, one replica a node, is as good)
        assert len({st.node(b.node).leaf for b in res.bindings}) == 1
    assert all(v.code is not ReasonCode.TOPOLOGY for v in res.unplaced.values())
