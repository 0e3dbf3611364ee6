"""E-Binpack's NodeNetGroup level at every cluster size, and HBD-granular placement
(sections 3.3.3 and 3.3.5 of the Kant paper), with the default settings."""

from __future__ import annotations

from unittest import mock

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, given, settings

from kant.model import Binding, PodId, ReasonCode, Tier
from kant.placement import Placer
from kant.placement import placer as placer_mod
from kant.placement.search import Candidates
from kant.state import ClusterState, Snapshot
from kant.testing import ClusterBuilder, job, node
from kant.testing.strategies import clusters, jobs


def _hold(st_: ClusterState, node_name: str, gpus: tuple[int, ...], tag: str) -> None:
    st_.bind(Binding(pod=PodId(job=tag, role="w", index=0), node=node_name, gpus=gpus))


def _hbd_cluster(*, plain_first: bool = False) -> ClusterState:
    """One leaf of 12 DGX nodes: ``a0..a3`` in HBD ``hbdA``, ``b0..b3`` in HBD ``hbdB`` and
    ``p0..p3`` outside any HBD; the HBD nodes come first in slot order (ties favour them)
    unless ``plain_first``."""
    b = ClusterBuilder()
    kinds = [("a", "hbdA"), ("b", "hbdB"), ("p", None)]
    for prefix, hbd in kinds[-1:] + kinds[:-1] if plain_first else kinds:
        for k in range(4):
            b.add(node(f"{prefix}{k}", leaf="lf0", spine="sp0", superspine="ss0", hbd=hbd))
    return b.build()


def test_on_a_small_cluster_an_8_gpu_job_joins_the_leaf_in_use_instead_of_opening_a_free_one() -> (
    None
):
    cluster = ClusterBuilder().leaf("lf0", nodes=4).leaf("lf1", nodes=4).leaf("lf2", nodes=4)
    state = cluster.build()
    _hold(state, "lf1-n0", tuple(range(8)), "resident")
    (b,) = Placer().place(job("small", gpus=8), state.snapshot()).bindings
    assert state.node(b.node).leaf == "lf1"  # lf0 and lf2 stay wholly free for large jobs


def test_a_six_node_job_preferring_hbds_gets_two_whole_hbds_and_no_plain_node() -> None:
    state = _hbd_cluster(plain_first=True)
    res = Placer().place(job("ep", gpus=8, replicas=6, tier=Tier.HBD), state.snapshot())
    assert res.ok
    assert {state.node(b.node).hbd for b in res.bindings} == {"hbdA", "hbdB"}


def test_a_job_requiring_more_than_one_hbd_gets_several_whole_hbds_rather_than_none() -> None:
    state = _hbd_cluster()
    req = job("ep", gpus=8, replicas=6, tier=Tier.HBD, required=True)
    res = Placer().place(req, state.snapshot())
    assert res.ok and all(state.node(b.node).hbd is not None for b in res.bindings)


def test_jobs_without_an_hbd_wish_stay_off_hbd_nodes_while_other_nodes_can_hold_them() -> None:
    state = _hbd_cluster()
    snap = state.snapshot()
    placer = Placer()
    placed: list[Binding] = []
    for i, shape in enumerate([(1, 1), (2, 1), (8, 1), (8, 2), (4, 1)]):
        gpus, replicas = shape
        res = placer.place(job(f"j{i}", gpus=gpus, replicas=replicas), snap)
        assert res.ok
        placed.extend(res.bindings)
    assert {b.node for b in placed} <= {"p0", "p1", "p2", "p3"}
    # the plain nodes are full now: the next job may use an HBD node
    res = placer.place(job("late", gpus=8), snap)
    assert res.ok and state.node(res.bindings[0].node).hbd is not None


def test_a_gang_without_an_hbd_wish_takes_hbd_nodes_in_one_leaf_before_plain_nodes_apart() -> None:
    # lfA: two free HBD nodes; lfB (spine sp0) and lfC (spine sp1): one plain node each. A
    # 2-node gang (E-Binpack's default LEAF tier, or a preferred LEAF wish) belongs in lfA:
    # a tighter tier comes before keeping HBD nodes free
    specs = [
        node("a-n0", leaf="lfA", spine="sp0", superspine="ss0", hbd="h0"),
        node("a-n1", leaf="lfA", spine="sp0", superspine="ss0", hbd="h0"),
        node("b-n0", leaf="lfB", spine="sp0", superspine="ss0"),
        node("c-n0", leaf="lfC", spine="sp1", superspine="ss0"),
    ]
    state = ClusterState(specs)
    for tier in (None, Tier.LEAF):
        res = Placer().place(job("g", gpus=8, replicas=2, tier=tier), state.snapshot())
        assert sorted(b.node for b in res.bindings) == ["a-n0", "a-n1"]
    # a leaf of plain nodes that holds it still comes first
    specs.append(node("b-n1", leaf="lfB", spine="sp0", superspine="ss0"))
    res = Placer().place(job("g", gpus=8, replicas=2), ClusterState(specs).snapshot())
    assert sorted(b.node for b in res.bindings) == ["b-n0", "b-n1"]


def test_a_pod_level_role_requiring_a_leaf_keeps_off_hbd_nodes_while_plain_ones_hold_it() -> None:
    # one leaf: two free HBD nodes and two free plain ones; the pods of a pod-level role
    # requiring one leaf go to the plain nodes, as a gang's do
    specs = [node(f"a-h{i}", leaf="lfA", spine="sp0", superspine="ss0", hbd="h0") for i in range(2)]
    specs += [node(f"a-p{i}", leaf="lfA", spine="sp0", superspine="ss0") for i in range(2)]
    state = ClusterState(specs)
    for gang in (False, True):
        j = job("q", gpus=8, replicas=2, gang=gang, tier=Tier.LEAF, required=True)
        res = Placer().place(j, state.snapshot())
        assert sorted(b.node for b in res.bindings) == ["a-p0", "a-p1"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=clusters(), data=st.data())
def test_the_group_probe_shortcut_never_changes_where_a_pod_goes(
    state: ClusterState, data: st.DataObject
) -> None:
    """Looking into the best NodeNetGroups one by one (large pools) and ranking the whole
    pool at once (small pools) give the same bindings, whatever the probe width."""
    work = [data.draw(jobs(i)) for i in range(data.draw(st.integers(1, 6)))]
    probe = data.draw(st.integers(1, 4))

    def run(threshold: int, group_probe: int) -> list[tuple[Binding, ...]]:
        snap = state.snapshot()
        placer = Placer(group_probe=group_probe)
        with mock.patch.object(placer_mod, "_TWO_LEVEL_MIN", threshold):
            return [placer.place(j, snap).bindings for j in work]

    assert run(1, probe) == run(10**9, probe)


def test_a_leaf_in_use_by_another_gpu_model_is_in_use_for_this_model_too() -> None:
    b = ClusterBuilder()
    for i in range(2):
        b.add(node(f"lf0-h{i}", leaf="lf0", spine="sp0", superspine="ss0"))
    for i in range(2):
        b.add(node(f"lf1-h{i}", leaf="lf1", spine="sp0", superspine="ss0"))
        b.add(node(f"lf1-l{i}", leaf="lf1", spine="sp0", superspine="ss0", model="L40"))
    state = b.build()
    _hold(state, "lf1-h0", (0,), "resident")  # lf1's H100 nodes are in use; lf0 is free
    res = Placer().place(job("one", gpus=8, models="H100"), state.snapshot())
    assert [b.node for b in res.bindings] == ["lf1-h1"]  # the free L40 nodes do not count


def test_a_leaf_in_use_counts_only_the_nodes_outside_hbds_for_a_job_without_an_hbd_wish() -> None:
    state = _hbd_cluster()  # leaf lf0: HBD nodes a*, b* and plain p0..p3
    b = ClusterBuilder()
    for spec in state.nodes():
        b.add(spec)
    b.leaf("lf1", nodes=4)  # four plain nodes in a leaf of their own
    state = b.build()
    _hold(state, "p0", tuple(range(8)), "resident")  # lf0's plain nodes are in use
    res = Placer().place(job("one", gpus=8), state.snapshot())
    assert [b.node for b in res.bindings] == ["p1"]  # lf0, in use, before the free lf1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=clusters(), data=st.data())
def test_ranking_groups_by_their_candidates_sums_agrees_with_the_snapshots_aggregates(
    state: ClusterState, data: st.DataObject
) -> None:
    """Where a leaf's GPU nodes are all candidates the Placer reads the snapshot's per-leaf
    aggregates; summing the candidates themselves (what it does for mixed leaves) must give
    the same bindings."""
    work = [data.draw(jobs(i)) for i in range(data.draw(st.integers(1, 6)))]

    def every_group(self: Candidates, snap: Snapshot) -> tuple[np.ndarray, np.ndarray]:
        ids = self.groups(snap)[0]
        return np.arange(ids.shape[0]), np.arange(self.slots.shape[0])

    def run(summed: bool) -> list[tuple[Binding, ...]]:
        snap = state.snapshot()
        placer = Placer()
        if not summed:
            return [placer.place(j, snap).bindings for j in work]
        with mock.patch.object(Candidates, "mixed", every_group):
            return [placer.place(j, snap).bindings for j in work]

    assert run(summed=True) == run(summed=False)


def _zone_and_leaves(zone_nodes: int = 2) -> ClusterState:
    """An inference zone of ``zone_nodes`` nodes in leaf ``lfz``, and three general leaves
    of four nodes, ``lf0..lf2``."""
    b = ClusterBuilder().leaf("lfz", nodes=zone_nodes, zone="inference")
    return b.leaf("lf0", nodes=4).leaf("lf1", nodes=4).leaf("lf2", nodes=4).build()


def test_espread_puts_a_training_pod_in_the_general_group_already_in_use_as_ebinpack_does() -> None:
    for zone_nodes in (0, 2):
        state = _zone_and_leaves(zone_nodes)
        _hold(state, "lf1-n2", (0,), "resident")
        for strategy in ("ebinpack", "espread"):
            (b,) = Placer(strategy).place(job("one", gpus=8), state.snapshot()).bindings
            assert state.node(b.node).leaf == "lf1", (zone_nodes, strategy)


def test_espread_fills_a_partly_used_general_node_but_never_a_zone_node_for_training() -> None:
    state = _zone_and_leaves()
    _hold(state, "lfz-n0", (0, 1, 2, 3, 4, 5), "inference")  # the fullest node: in the zone
    _hold(state, "lf2-n3", (0, 1, 2, 3), "resident")
    (b,) = Placer("espread").place(job("pair", gpus=2), state.snapshot()).bindings
    assert b.node == "lf2-n3"


def _hbd_and_plain_leaves(*, hbd_nodes: int = 4) -> ClusterState:
    """``hbd_nodes`` nodes ``h*`` of HBD ``hbd0`` in leaf ``lf0``, four plain nodes ``p*``
    in leaf ``lf1``."""
    b = ClusterBuilder()
    for i in range(hbd_nodes):
        b.add(node(f"h{i}", leaf="lf0", spine="sp0", superspine="ss0", hbd="hbd0"))
    for i in range(4):
        b.add(node(f"p{i}", leaf="lf1", spine="sp0", superspine="ss0"))
    return b.build()


def test_a_required_hbd_job_the_hbds_cannot_hold_but_the_pool_could_is_a_topology_failure() -> None:
    state = _hbd_and_plain_leaves()
    res = Placer().place(
        job("ep", gpus=8, replicas=6, tier=Tier.HBD, required=True), state.snapshot()
    )
    assert res.reason is not None and res.reason.code is ReasonCode.TOPOLOGY  # as for a leaf
    _hold(state, "h0", tuple(range(8)), "resident")  # the HBD has 3 free nodes, the pool 7
    res = Placer().place(
        job("ep", gpus=8, replicas=4, tier=Tier.HBD, required=True), state.snapshot()
    )
    assert res.reason is not None and res.reason.code is ReasonCode.TOPOLOGY


def test_a_required_hbd_job_is_never_placed_outside_hbd_nodes_even_when_the_pool_has_none() -> None:
    for replicas in (1, 2):
        ep = job("ep", gpus=4, replicas=replicas, tier=Tier.HBD, required=True)
        for strategy in ("ebinpack", "binpack", "topology"):
            res = Placer(strategy).place(ep, _hbd_and_plain_leaves(hbd_nodes=0).snapshot())
            assert not res.ok and res.reason is not None, (replicas, strategy)
            assert res.reason.code is ReasonCode.TOPOLOGY


def _hbds_under_two_spines() -> ClusterState:
    """Two-node HBDs: ``h0`` and ``h1`` in leaf ``lfA`` of spine ``sp0``, ``h2`` in ``lfB`` of
    ``sp0``, ``h3`` in ``lfC`` of ``sp1``."""
    b = ClusterBuilder()
    for hbd, leaf, spine in (("h0", "lfA", "sp0"), ("h1", "lfA", "sp0"), ("h2", "lfB", "sp0"),
                             ("h3", "lfC", "sp1")):  # fmt: skip
        for k in range(2):
            b.add(node(f"{hbd}-n{k}", leaf=leaf, spine=spine, superspine="ss0", hbd=hbd))
    return b.build()


def test_a_gang_too_big_for_one_hbd_takes_hbds_of_one_leaf_rather_than_roomier_ones_apart() -> None:
    state = _hbds_under_two_spines()
    _hold(state, "h1-n1", tuple(range(8)), "resident")  # h1 has one free node, h2 and h3 two
    for required in (True, False):
        res = Placer().place(
            job("ep", gpus=8, replicas=3, tier=Tier.HBD, required=required), state.snapshot()
        )
        # two HBDs either way: h0 + h1 share leaf lfA; the roomier h0 + h2 would not
        assert sorted(b.node for b in res.bindings) == ["h0-n0", "h0-n1", "h1-n0"], required


def test_hbds_under_one_spine_come_before_roomier_hbds_under_two_spines() -> None:
    state = _hbds_under_two_spines()
    for k, name in enumerate(("h0-n0", "h1-n0", "h1-n1")):  # lfA keeps one free node
        _hold(state, name, tuple(range(8)), f"resident{k}")
    res = Placer().place(job("ep", gpus=8, replicas=3, tier=Tier.HBD), state.snapshot())
    # no leaf holds it in two HBDs; h0 + h2 under sp0 do, where the roomier h2 + h3 span two
    assert sorted(b.node for b in res.bindings) == ["h0-n1", "h2-n0", "h2-n1"]
