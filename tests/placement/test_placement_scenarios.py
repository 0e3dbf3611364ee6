"""RSCH placement scenarios, one rule each (section 3.3 / 3.4 of the Kant paper)."""

from __future__ import annotations

import pytest

from kant.errors import (
    DuplicateError,
    InvalidConfigError,
    UnknownPolicyError,
    UnknownTemplateError,
    ValidationError,
)
from kant.model import Binding, Job, JobKind, PodId, ReasonCode, Resources, Role, Tier, TopologyWish
from kant.placement import BaseStrategy, Placer, make_strategy, register_strategy, strategy_names
from kant.state import ClusterState
from kant.testing import ClusterBuilder, job, node, partly_used


def nodes_of(bindings: tuple[Binding, ...]) -> list[str]:
    return [b.node for b in bindings]


def leaves_of(st: ClusterState, bindings: tuple[Binding, ...]) -> set[str | None]:
    return {st.node(b.node).leaf for b in bindings}


def hold(st: ClusterState, node_name: str, gpus: tuple[int, ...], tag: str) -> None:
    st.bind(Binding(pod=PodId(job=tag, role="w", index=0), node=node_name, gpus=gpus))


# --------------------------------------------------------------------------- device level


def test_an_8_gpu_pod_on_a_dgx_node_gets_all_8_gpus_and_the_nics_of_their_pcie_switches() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=1).build()
    res = Placer().place(job("big", gpus=8, nics=8), st.snapshot())
    (b,) = res.bindings
    assert b.gpus == tuple(range(8)) and b.nics == tuple(range(8))


def test_a_2_gpu_pod_with_one_nic_gets_the_nic_under_its_gpus_pcie_switch() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=1).build()
    hold(st, "lf0-n0", (0,), "first")  # switch 0 is half used
    res = Placer().place(job("pair", gpus=2, nics=1), st.snapshot())
    (b,) = res.bindings
    assert b.gpus == (2, 3)  # a whole free switch, not GPU 1 + a GPU elsewhere
    assert b.nics == (2,)  # a NIC on switch 1, where its GPUs are


def test_a_placer_whose_read_of_the_node_templates_failed_reads_them_again_next_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    st = ClusterBuilder().leaf("lf0", nodes=1).build()
    hold(st, "lf0-n0", (0,), "first")
    placer = Placer()

    def broken(_state: ClusterState, name: str) -> None:
        raise UnknownTemplateError(name)

    with monkeypatch.context() as m:
        m.setattr(ClusterState, "template", broken)
        with pytest.raises(UnknownTemplateError):
            placer.place(job("pair", gpus=2, nics=1), st.snapshot())
    (b,) = placer.place(job("pair", gpus=2, nics=1), st.snapshot()).bindings
    assert b.gpus == (2, 3) and b.nics == (2,)  # chosen by the DGX template, not lowest first


@pytest.mark.parametrize("strategy", ["ebinpack", "espread", "gpupacking"])
def test_one_placer_on_fresh_cluster_states_reads_each_ones_nodes_even_in_a_freed_ones_memory(
    strategy: str,
) -> None:
    # An orchestrator that builds its cluster state anew each time and keeps its placer:
    # a freed state's memory (its id()) is soon reused by the next, whose node set has the
    # same size (the same membership_version) but other GPU models in the same slots
    placer = Placer(strategy)
    wrong = []
    for i in range(200):
        models = ("H100", "A100") if i % 2 else ("A100", "H100")
        st = ClusterState([node("x", model=models[0]), node("y", model=models[1])])
        snap = st.full_snapshot()
        for b in placer.place(job("j", gpus=8, models="H100"), snap).bindings:
            if st.node(b.node).gpu_model != "H100":
                wrong.append((i, b.node))
        del st, snap
    assert wrong == []


def test_a_placer_given_a_snapshot_not_refreshed_since_nodes_changed_sees_them_once_it_is() -> None:
    # the placer places on the nodes the snapshot shows, and what it keeps of them follows
    # the snapshot, not the cluster state: a node added after it (in a freed slot, or in a
    # new one) is used once the snapshot is refreshed
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    placer = Placer()
    placer.place(job("warm", gpus=1), st.snapshot())
    st.remove_node("lf0-n0")
    snap = st.snapshot()
    st.add_node(node("new0", leaf="lf1", spine="sp0", superspine="ss0"))  # (lf0-n0's slot)
    st.add_node(node("new1", leaf="lf1", spine="sp0", superspine="ss0"))  # (a new slot)
    lf1 = st.group_id("leaf", "lf1")
    assert nodes_of(placer.place(job("a", gpus=8), snap).bindings) == ["lf0-n1"]
    assert snap.members("leaf", lf1).tolist() == []
    res = placer.place(job("b", gpus=8, replicas=3), st.snapshot())
    assert res.ok and sorted(nodes_of(res.bindings)) == ["lf0-n1", "new0", "new1"]
    assert snap.members("leaf", lf1).tolist() == [0, 2]


def test_a_2_gpu_pod_on_a_pcie_only_node_gets_two_gpus_under_one_pcie_switch() -> None:
    st = ClusterState([node("p0", template="pcie-8gpu", nics=8)])
    hold(st, "p0", (0, 2, 4), "scatter")  # one GPU taken on switches 0, 1, 2
    (b,) = Placer().place(job("pair", gpus=2), st.snapshot()).bindings
    assert b.gpus == (6, 7)  # the only switch with both GPUs free


def test_a_pod_asking_gpus_and_nics_gets_gpus_whose_switch_has_the_free_nics() -> None:
    """A CPU pod took NICs 0 and 1 (switch 0): a pod of 2 GPUs and 2 NICs takes GPUs 2, 3
    with NICs 2, 3 under one switch, not GPUs 0, 1 with NICs across the host."""
    st = ClusterState([node("p0", template="pcie-8gpu", nics=8)])
    placer = Placer()
    (cpu,) = placer.place(job("cpu", gpus=0, cpu_milli=1000, nics=2), st.snapshot()).bindings
    st.bind(cpu)
    assert cpu.nics == (0, 1)
    (b,) = placer.place(job("pair", gpus=2, nics=2), st.snapshot()).bindings
    assert (b.gpus, b.nics) == ((2, 3), (2, 3))
    many = placer.place(job("gang", gpus=2, nics=2, replicas=2), st.snapshot()).bindings
    assert [(x.gpus, x.nics) for x in many] == [((2, 3), (2, 3)), ((4, 5), (4, 5))]


@pytest.mark.parametrize("template", ["dgx-8gpu", "pcie-8gpu"])
def test_a_pod_asking_4_gpus_and_2_nics_gets_a_nic_on_each_pcie_switch_of_its_gpus(
    template: str,
) -> None:
    st = ClusterState([node("n0", template=template, nics=8)])
    (b,) = Placer().place(job("pod", gpus=4, nics=2), st.snapshot()).bindings
    assert b.gpus == (0, 1, 2, 3)  # PCIe switches 0 and 1
    assert b.nics == (0, 2)  # NIC 0 on switch 0, NIC 2 on switch 1 (not NICs 0 and 1)


def test_a_one_gpu_pod_takes_a_lone_gpu_rather_than_breaking_a_free_pair() -> None:
    st = ClusterState([node("p0", template="pcie-8gpu", nics=8)])
    hold(st, "p0", (0, 1, 2, 4, 5), "most")  # GPU 3 is alone on switch 1; 6,7 form a pair
    (b,) = Placer().place(job("one", gpus=1), st.snapshot()).bindings
    assert b.gpus == (3,)


def test_fractional_pods_share_the_fullest_gpu_that_fits_and_never_over_commit() -> None:
    st = ClusterState([node("p0", gpus=2, template="openb-2gpu")])
    snap = st.snapshot()
    placer = Placer("binpack")
    first = placer.place(job("a", gpu_milli=600), snap).bindings[0]
    second = placer.place(job("b", gpu_milli=400), snap).bindings[0]
    third = placer.place(job("c", gpu_milli=500), snap).bindings[0]
    assert second.gpus == first.gpus  # fills the shared GPU to 1000
    assert third.gpus != first.gpus
    res = placer.place(job("d", gpu_milli=600), snap)
    assert not res.ok and res.reason is not None
    assert snap.gpu_free[0, :2].tolist() == [0, 500]


def test_unhealthy_gpus_and_nodes_are_never_chosen() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    for g in range(8):
        if g != 5:
            st.set_gpu_health("lf0-n0", g, False)
    st.set_node_health("lf0-n1", False)
    snap = st.snapshot()
    res = Placer().place(job("a", gpus=1, replicas=2, gang=False), snap)
    assert [b.gpus for b in res.bindings] == [(5,)]
    assert list(res.unplaced) == [PodId(job="a", role="worker", index=1)]


# --------------------------------------------------------------------------- gang


@pytest.mark.parametrize("strategy", ["ebinpack", "binpack", "spread"])
def test_a_gang_that_cannot_fully_fit_leaves_the_snapshot_unchanged(strategy: str) -> None:
    st = ClusterBuilder().leaf("lf0", nodes=4).build()
    for k in (1, 2, 3):  # 29 GPUs free, but only one whole node
        hold(st, f"lf0-n{k}", (0,), f"x{k}")
    snap = st.snapshot()
    before = st.full_snapshot()
    res = Placer(strategy).place(job("g", gpus=8, replicas=3), snap)
    assert res.bindings == () and len(res.unplaced) == 3
    assert {r.code for r in res.unplaced.values()} == {ReasonCode.NO_FIT}
    assert snap.same_as(before) == []


def test_a_pod_level_job_places_what_fits_and_explains_the_rest() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=1).build()
    res = Placer().place(job("p", gpus=4, replicas=3, gang=False), st.snapshot())
    assert len(res.bindings) == 2
    (why,) = res.unplaced.values()
    assert why.code is ReasonCode.INSUFFICIENT_CAPACITY


def test_only_pods_not_yet_running_are_placed_again() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    j = job("p", gpus=8, replicas=2, gang=False)
    placer = Placer()
    first = placer.place(j, st.snapshot(), pods=[PodId(job="p", role="worker", index=0)])
    st.bind(first.bindings[0])
    second = placer.place(j, st.snapshot())
    assert [b.pod.index for b in second.bindings] == [1]


# --------------------------------------------------------------------------- strategies


def test_binpack_fills_partly_used_nodes_first() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    hold(st, "lf0-n2", (0, 1, 2, 3, 4), "busy")
    hold(st, "lf0-n1", (0,), "light")
    (b,) = Placer("binpack").place(job("a", gpus=2), st.snapshot()).bindings
    assert b.node == "lf0-n2"


def test_spread_puts_replicas_on_different_nodes_most_free_first() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    hold(st, "lf0-n0", (0,), "busy")
    res = Placer("spread").place(
        job("svc", gpus=1, replicas=3, gang=False, kind=JobKind.INFERENCE), st.snapshot()
    )
    assert sorted(nodes_of(res.bindings)) == ["lf0-n0", "lf0-n1", "lf0-n2"]
    assert nodes_of(res.bindings)[0] == "lf0-n1"


def test_ebinpack_co_locates_replicas_of_one_job_on_as_few_nodes_as_possible() -> None:
    def placed(strategy: str) -> list[str]:
        st = ClusterBuilder().leaf("lf0", nodes=3).build()
        hold(st, "lf0-n0", (0, 1, 2, 3, 4, 5), "resident")  # 2 GPUs left on n0
        return nodes_of(
            Placer(strategy).place(job("g", gpus=2, replicas=2), st.snapshot()).bindings
        )

    assert placed("binpack") == ["lf0-n0", "lf0-n1"]  # fills n0, splits the job
    assert placed("ebinpack") == ["lf0-n1", "lf0-n1"]  # one node, no cross-node traffic


def test_ebinpack_puts_small_jobs_in_a_nodenetgroup_already_in_use() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=4).leaf("lf1", nodes=4).leaf("lf2", nodes=4).build()
    hold(st, "lf1-n0", (0, 1, 2, 3, 4, 5, 6, 7), "resident")
    res = Placer("ebinpack").place(job("small", gpus=8), st.snapshot())
    assert leaves_of(st, res.bindings) == {"lf1"}  # lf0 and lf2 stay whole for big jobs


def test_ebinpack_fills_a_partly_used_node_anywhere_before_opening_an_empty_one() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=4).leaf("lf1", nodes=4).build()
    hold(st, "lf0-n0", (0, 1, 2, 3, 4, 5, 6), "almost-full")  # 1 GPU left: too small
    hold(st, "lf1-n0", (0, 1, 2, 3), "half")  # 4 GPUs left
    (b,) = Placer("ebinpack").place(job("pair", gpus=2), st.snapshot()).bindings
    assert b.node == "lf1-n0"  # not a fresh node in the fuller group lf0


def test_espread_spreads_small_inference_pods_in_the_zone_and_keeps_full_nodes_free() -> None:
    b = ClusterBuilder()
    b.leaf("zone", nodes=3, zone="inference").leaf("gen", nodes=3)
    st = b.build()
    snap = st.snapshot()
    placer = Placer("espread")
    svc = placer.place(job("svc", gpus=2, replicas=5, gang=False, kind=JobKind.INFERENCE), snap)
    where = nodes_of(svc.bindings)
    assert sorted(where[:3]) == ["zone-n0", "zone-n1", "zone-n2"]  # one replica per zone node
    assert set(where[3:]) == {"gen-n0"}  # the rest E-Binpacked on one general node
    # full general nodes stay free for large distributed inference
    big = placer.place(job("ep", gpus=8, replicas=2, kind=JobKind.INFERENCE), snap)
    assert big.ok and set(nodes_of(big.bindings)) == {"gen-n1", "gen-n2"}


def test_spread_would_have_left_no_full_node_where_espread_keeps_two() -> None:
    def full_nodes(strategy: str) -> int:
        st = ClusterBuilder().leaf("zone", nodes=3, zone="inference").leaf("gen", nodes=3).build()
        snap = st.snapshot()
        Placer(strategy).place(
            job("svc", gpus=2, replicas=6, gang=False, kind=JobKind.INFERENCE), snap
        )
        return int((snap.free_gpus[:6] == 8).sum())

    assert full_nodes("spread") == 0
    assert full_nodes("espread") >= 2


def _zone_leaf_and_general(general: int) -> ClusterState:
    """Three inference-zone nodes ``z0..z2`` in a leaf of their own and ``general`` general
    nodes ``g0..`` in leaf ``lf0``, under one spine."""
    b = ClusterBuilder()
    for i in range(3):
        b.add(node(f"z{i}", leaf="lfzone", spine="sp0", superspine="ss0", zone="inference"))
    for i in range(general):
        b.add(node(f"g{i}", leaf="lf0", spine="sp0", superspine="ss0"))
    return b.build()


def test_an_espread_inference_gang_spans_a_zone_leaf_and_a_general_node_when_that_fits() -> None:
    st = _zone_leaf_and_general(1)
    hold(st, "g0", (0, 1, 2, 3), "busy")  # room for two 2-GPU replicas
    svc = job("svc", gpus=2, replicas=5, kind=JobKind.INFERENCE, gang=True)
    res = Placer("espread").place(svc, st.snapshot())
    assert res.ok, res.reason  # one replica per zone node, the other two on g0
    assert sorted(nodes_of(res.bindings)) == ["g0", "g0", "z0", "z1", "z2"]


def test_an_espread_inference_gang_uses_the_zone_first_even_in_a_leaf_of_its_own() -> None:
    st = _zone_leaf_and_general(3)
    svc = job("svc", gpus=2, replicas=5, kind=JobKind.INFERENCE, gang=True)
    where = nodes_of(Placer("espread").place(svc, st.snapshot()).bindings)
    assert sorted(where[:3]) == ["z0", "z1", "z2"] and set(where[3:]) == {"g0"}


def test_a_preferred_leaf_never_turns_an_espread_placement_that_exists_into_no_fit() -> None:
    st = _zone_leaf_and_general(1)
    hold(st, "g0", (0, 1, 2, 3), "busy")
    svc = job("svc", gpus=2, replicas=5, kind=JobKind.INFERENCE, gang=True, tier=Tier.LEAF)
    res = Placer("espread").place(svc, st.snapshot())
    assert res.ok, res.reason  # no leaf holds it as E-Spread places: anywhere, then
    assert sorted(nodes_of(res.bindings)) == ["g0", "g0", "z0", "z1", "z2"]


def _zone_and_general_leaves() -> ClusterState:
    return ClusterBuilder().leaf("z", nodes=2, zone="inference").leaf("g", nodes=2).build()


@pytest.mark.parametrize("replicas", [2, 4, 8, 9, 11])
@pytest.mark.parametrize("tier", [Tier.NODE, Tier.LEAF, Tier.SPINE], ids=lambda t: t.name)
def test_an_espread_pod_level_service_with_a_required_wish_goes_where_its_gang_form_would(
    tier: Tier, replicas: int
) -> None:
    # one replica per zone node: the zone's leaf holds two 2-GPU replicas, leaf g eight.
    # The domain was chosen as if a zone node took several: one replica went to z-n0 and
    # the others waited for good (TOPOLOGY), where the gang form starts whole on leaf g
    st = _zone_and_general_leaves()
    make = dict(gpus=2, replicas=replicas, kind=JobKind.INFERENCE, tier=tier, required=True)
    gang = Placer("espread").place(job("svc", gang=True, **make), st.snapshot())  # type: ignore[arg-type]
    res = Placer("espread").place(job("svc", gang=False, **make), st.snapshot())  # type: ignore[arg-type]
    if gang.ok:
        assert res.ok, res.unplaced
        assert nodes_of(res.bindings) == nodes_of(gang.bindings)
    else:  # (no domain of the tier holds them all: the one that holds the most, g-n0, leaf
        # g, or the spine: all 8 GPUs of both zone nodes, one replica each, and leaf g)
        most = {Tier.NODE: 4, Tier.LEAF: 8, Tier.SPINE: 10}[tier]
        assert len(res.bindings) == min(replicas, most)


def test_an_espread_pod_level_service_finds_the_general_leaf_behind_many_zone_leaves() -> None:
    # four zone leaves rank first by their room if a zone node took several replicas; only
    # leaf g holds all four (the gang form, which tries group_probe=4 domains a tier, fails)
    b = ClusterBuilder()
    for z in range(4):
        b.leaf(f"z{z}", nodes=2, gpus=4, zone="inference")
    st = b.leaf("g", nodes=4, gpus=4).build()
    svc = job("svc", gpus=2, replicas=4, gang=False, kind=JobKind.INFERENCE, tier=Tier.LEAF,
              required=True)  # fmt: skip
    res = Placer("espread").place(svc, st.snapshot())
    assert res.ok and {st.node(b.node).leaf for b in res.bindings} == {"g"}


def test_an_espread_pod_level_service_with_a_required_leaf_runs_whole_under_the_scheduler() -> None:
    from kant import Scheduler

    s = Scheduler(_zone_and_general_leaves(), placer=Placer("espread"))
    s.submit(job("svc", gpus=2, replicas=4, gang=False, kind=JobKind.INFERENCE, tier=Tier.LEAF,
                 required=True), now=0)  # fmt: skip
    assert len(s.step(now=1).bindings) == 4
    assert [b.node for b in s.status("svc").bindings] == ["g-n0"] * 4


def test_a_gang_of_a_strategy_keeping_to_some_nodes_is_placed_by_the_room_on_those_nodes() -> None:
    class OddNodesOnly(BaseStrategy):
        name = "odd-nodes-only"
        topology_default = Tier.LEAF

        def candidate_sets(self, ctx, slots):  # type: ignore[no-untyped-def]
            return ((slots[slots % 2 == 1], self),)

    st = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build()
    res = Placer(OddNodesOnly()).place(job("g", gpus=8, replicas=2), st.snapshot())
    assert res.ok, res.reason  # each leaf holds one pod on its odd node: both leaves
    assert nodes_of(res.bindings) == ["lf0-n1", "lf1-n1"]


# --------------------------------------------------------------------------- topology


def fabric(leaves_per_spine: int = 4, nodes_per_leaf: int = 32) -> ClusterState:
    b = ClusterBuilder()
    for sp in range(2):
        b.spine(f"sp{sp}")
        for lf in range(leaves_per_spine):
            b.leaf(f"sp{sp}-lf{lf}", nodes=nodes_per_leaf)
    return b.build()


def test_a_64_node_job_lands_in_one_leaf_when_a_leaf_has_room() -> None:
    st = fabric(nodes_per_leaf=64)
    hold(st, "sp0-lf0-n0", (0,), "x")  # this leaf can no longer hold 64 whole nodes
    res = Placer().place(job("llm", gpus=8, replicas=64, nics=8), st.snapshot())
    assert res.ok and leaves_of(st, res.bindings) == {"sp0-lf1"}


def test_a_64_node_job_takes_the_fewest_leaves_under_one_spine_otherwise() -> None:
    st = fabric(nodes_per_leaf=32)  # no leaf holds 64 nodes
    for i in range(8):  # sp0-lf0 keeps 24 free nodes; sp0-lf1..3 keep 32
        hold(st, f"sp0-lf0-n{i}", (0,), f"x{i}")
    res = Placer().place(job("llm", gpus=8, replicas=64), st.snapshot())
    assert res.ok
    leaves = leaves_of(st, res.bindings)
    assert len(leaves) == 2 and len({st.node(b.node).spine for b in res.bindings}) == 1


def test_a_required_leaf_wish_fails_with_a_topology_reason_instead_of_spilling() -> None:
    st = fabric(nodes_per_leaf=4)
    res = Placer().place(
        job("llm", gpus=8, replicas=6, tier=Tier.LEAF, required=True), st.snapshot()
    )
    assert not res.ok and res.reason is not None and res.reason.code is ReasonCode.TOPOLOGY
    spill = Placer().place(job("llm", gpus=8, replicas=6, tier=Tier.LEAF), st.snapshot())
    assert spill.ok and len(leaves_of(st, spill.bindings)) == 2


def test_a_small_gang_lands_on_one_node_when_it_can() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    res = Placer("topology").place(job("g", gpus=2, replicas=4), st.snapshot())
    assert len(set(nodes_of(res.bindings))) == 1


def test_a_job_asking_for_an_hbd_is_placed_inside_one_scale_up_domain() -> None:
    b = ClusterBuilder()
    for k in range(4):
        b.add(
            node(
                f"h{k}", leaf="lf0", spine="sp0", superspine="ss0", hbd="hbd0" if k < 2 else "hbd1"
            )
        )
    st = b.build()
    hold(st, "h0", (0,), "x")
    res = Placer().place(job("ep", gpus=8, replicas=2, tier=Tier.HBD, required=True), st.snapshot())
    assert res.ok and set(nodes_of(res.bindings)) == {"h2", "h3"}


def test_a_pod_level_job_with_a_required_leaf_keeps_later_pods_in_the_first_pods_leaf() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).leaf("lf1", nodes=2).build()
    j = job("svc", gpus=8, replicas=3, gang=False, tier=Tier.LEAF, required=True)
    placer = Placer()
    first = placer.place(j, st.snapshot(), pods=[PodId(job="svc", role="worker", index=0)])
    st.bind(first.bindings[0])
    rest = placer.place(j, st.snapshot())
    assert leaves_of(st, first.bindings + rest.bindings) == {"lf0"}
    (why,) = rest.unplaced.values()
    assert why.code is ReasonCode.TOPOLOGY


def test_the_rest_of_a_gang_requiring_a_leaf_joins_its_running_pods_or_is_refused() -> None:
    # two pods of the gang run in lf0; while lf0 has one free node left the other two must
    # not go to lf1 (the gang would span two leaves); once it has two they go there
    st = ClusterBuilder().leaf("lf0", nodes=4).leaf("lf1", nodes=5).build()
    j = job("g", gpus=8, replicas=4, tier=Tier.LEAF, required=True)
    placer = Placer()
    first = placer.place(j, st.snapshot(), pods=list(j.pods())[:2])
    assert leaves_of(st, first.bindings) == {"lf0"}
    st.bind_many(first.bindings)
    hold(st, "lf0-n3", (0,), "other")
    rest = placer.place(j, st.snapshot())
    assert not rest.bindings
    assert {why.code for why in rest.unplaced.values()} == {ReasonCode.TOPOLOGY}
    st.release(PodId(job="other", role="w", index=0))
    rest = placer.place(j, st.snapshot())
    assert rest.ok and leaves_of(st, rest.bindings) == {"lf0"}


def test_a_pod_level_job_requiring_a_leaf_starts_in_a_leaf_holding_all_its_pods() -> None:
    # lfA's half-used node is the best fit for one pod, but only lfB holds all three
    st = ClusterBuilder().leaf("lfA", nodes=1).leaf("lfB", nodes=2).build()
    hold(st, "lfA-n0", (0, 1, 2, 3), "other")
    res = Placer().place(
        job("svc", gpus=4, replicas=3, gang=False, tier=Tier.LEAF, required=True), st.snapshot()
    )
    assert res.ok and leaves_of(st, res.bindings) == {"lfB"}


def test_a_pod_level_job_requiring_a_leaf_none_can_hold_takes_the_leaf_holding_the_most() -> None:
    st = ClusterBuilder().leaf("lfA", nodes=1).leaf("lfB", nodes=1).build()
    hold(st, "lfA-n0", (0, 1, 2, 3), "other")  # lfA: room for one 4-GPU pod, lfB for two
    res = Placer().place(
        job("svc", gpus=4, replicas=3, gang=False, tier=Tier.LEAF, required=True), st.snapshot()
    )
    assert nodes_of(res.bindings) == ["lfB-n0", "lfB-n0"]
    (why,) = res.unplaced.values()
    assert why.code is ReasonCode.TOPOLOGY


def test_a_pod_level_job_requiring_an_hbd_starts_in_one_hbd_holding_all_its_pods() -> None:
    b = ClusterBuilder()
    for k in range(3):
        hbd = "hbd0" if k < 1 else "hbd1"
        b.add(node(f"h{k}", leaf="lf0", spine="sp0", superspine="ss0", hbd=hbd))
    st = b.build()
    hold(st, "h0", (0, 1, 2, 3), "other")  # hbd0's node: the best fit for one pod only
    res = Placer().place(
        job("ep", gpus=4, replicas=3, gang=False, tier=Tier.HBD, required=True), st.snapshot()
    )
    assert res.ok and set(nodes_of(res.bindings)) <= {"h1", "h2"}


def test_a_pod_level_role_requiring_a_leaf_is_kept_next_to_its_own_pods_not_another_roles() -> None:
    # prefill (A100, no wish) lands in lfA first; decode's leaf wish is about decode's pods
    st = ClusterBuilder().leaf("lfA", nodes=1, model="A100").leaf("lfH", nodes=2).build()
    serve = Job(
        id="pd",
        tenant="t",
        gang=False,
        roles=(
            Role(name="prefill", replicas=1, resources=Resources(gpus=8), gpu_models="A100"),
            Role(
                name="decode",
                replicas=2,
                resources=Resources(gpus=8),
                gpu_models="H100",
                topology=TopologyWish(tier=Tier.LEAF, required=True),
            ),
        ),
    )
    res = Placer().place(serve, st.snapshot())
    assert res.ok
    assert leaves_of(st, tuple(b for b in res.bindings if b.pod.role == "decode")) == {"lfH"}


def test_a_spread_role_puts_replicas_on_distinct_nodes_even_under_binpack() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    res = Placer("ebinpack").place(
        job("svc", gpus=1, replicas=3, spread=True, gang=True), st.snapshot()
    )
    assert sorted(nodes_of(res.bindings)) == ["lf0-n0", "lf0-n1", "lf0-n2"]


def test_a_pod_level_spread_service_under_ebinpack_puts_replicas_on_distinct_nodes() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=3).build()
    hold(st, "lf0-n2", (0, 1, 2, 3), "busy")
    svc = job("svc", gpus=2, replicas=3, gang=False, spread=True, kind=JobKind.INFERENCE)
    res = Placer("ebinpack").place(svc, st.snapshot())
    # the partly used node first (E-Binpack), then nodes without a replica of the service
    assert nodes_of(res.bindings) == ["lf0-n2", "lf0-n0", "lf0-n1"]


@pytest.mark.parametrize("strategy", ["ebinpack", "spread", "topology", "binpack", "espread"])
def test_a_spread_service_takes_a_node_of_another_leaf_before_a_second_replica_on_a_node(
    strategy: str,
) -> None:
    # five replicas, leaf a of 2 nodes and leaf b of 3: five nodes, one replica each. The
    # group the strategy chose took a second replica on a node (a-n0, a-n1, a-n0, ...; under
    # spread b-n0, b-n1, b-n2, b-n0, ...) while the other leaf's nodes stood empty
    st = ClusterBuilder().leaf("a", nodes=2).leaf("b", nodes=3).build()
    svc = job("svc", gpus=1, replicas=5, gang=False, spread=True, kind=JobKind.INFERENCE)
    res = Placer(strategy).place(svc, st.snapshot())
    assert sorted(nodes_of(res.bindings)) == ["a-n0", "a-n1", "b-n0", "b-n1", "b-n2"]
    six = job("six", gpus=1, replicas=6, gang=False, spread=True, kind=JobKind.INFERENCE)
    res = Placer(strategy).place(six, st.snapshot())
    assert res.ok and len(set(nodes_of(res.bindings))) == 5  # (then a node takes a second)


def test_a_spread_replica_goes_where_the_strategy_puts_it_when_that_node_holds_none() -> None:
    # leaf l0: 3 empty nodes; l1: 1 empty node and 3 partly used. Under spread the emptiest
    # leaf, l0 by its whole aggregates, takes each replica while it has a node holding none
    st = ClusterBuilder().leaf("l0", nodes=3).leaf("l1", nodes=4).build()
    for n, used in (("l1-n1", 4), ("l1-n2", 6), ("l1-n3", 2)):
        hold(st, n, tuple(range(used)), f"bg-{n}")
    svc = job("svc", gpus=1, replicas=3, spread=True, gang=False, kind=JobKind.INFERENCE)
    res = Placer("spread").place(svc, st.snapshot())
    assert nodes_of(res.bindings) == ["l0-n0", "l0-n1", "l0-n2"]


# --------------------------------------------------------------------------- pools


def test_a_job_never_lands_in_a_pool_of_a_gpu_model_it_did_not_allow() -> None:
    st = (
        ClusterBuilder()
        .leaf("lf0", nodes=2, model="A100")
        .leaf("lf1", nodes=1, model="H100")
        .build()
    )
    snap = st.snapshot()
    placer = Placer()
    ok = placer.place(job("h", gpus=8, replicas=1, models="H100"), snap)
    assert ok.ok and st.node(ok.bindings[0].node).gpu_model == "H100"
    full = placer.place(job("h2", gpus=8, models="H100"), snap)
    assert not full.ok and full.reason is not None
    assert full.reason.code is ReasonCode.INSUFFICIENT_CAPACITY  # A100 nodes are free, unused


def test_an_unknown_gpu_model_is_an_unresolvable_reason_not_a_crash() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=1).build()
    res = Placer().place(job("x", gpus=1, models="B200"), st.snapshot())
    assert res.reason is not None and res.reason.code is ReasonCode.NO_POOL


def test_a_cross_pool_gang_places_every_role_in_its_own_pool_or_nothing() -> None:
    st = (
        ClusterBuilder()
        .leaf("lf0", nodes=1, model="H100")
        .leaf("lf1", nodes=1, model="L40")
        .build()
    )
    serve = Job(
        id="pd",
        kind="inference",
        roles=(
            Role(name="prefill", replicas=1, resources=Resources(gpus=8), gpu_models="H100"),
            Role(name="decode", replicas=2, resources=Resources(gpus=4), gpu_models="L40"),
        ),
    )
    snap = st.snapshot()
    res = Placer().place(serve, snap)
    assert res.ok
    assert {st.node(b.node).gpu_model for b in res.bindings if b.pod.role == "decode"} == {"L40"}
    again = Placer().place(serve.__class__(id="pd2", roles=serve.roles), snap)
    assert not again.ok and again.bindings == ()


def _mixed_pools() -> ClusterState:
    kw = dict(leaf="lf0", spine="sp0", superspine="ss0", template=None, nics=0)
    return ClusterState(
        [node("h100", gpus=8, model="H100", **kw), node("a100", gpus=4, model="A100", **kw)]
    )


def _any_then_a100(a100_pods: int = 3) -> Job:
    return Job(
        id="j",
        roles=(
            Role(name="any", replicas=3, resources=Resources(gpus=1)),
            Role(
                name="a100only", replicas=a100_pods, resources=Resources(gpus=1), gpu_models="A100"
            ),
        ),
    )


def test_a_gang_is_placed_though_its_first_role_would_take_its_second_roles_pool() -> None:
    # declared first, role 'any' best-fits the 4-GPU A100 node and leaves role 'a100only' 1
    # GPU; the roles placed most constrained first fit: the gang is placed, not refused
    st = _mixed_pools()
    snap = st.snapshot()
    res = Placer().place(_any_then_a100(), snap)
    assert res.ok
    where = {(b.pod.role, st.node(b.node).gpu_model) for b in res.bindings}
    assert where == {("a100only", "A100"), ("any", "H100")}


def _two_small_nodes(used_on_b: int) -> ClusterState:
    kw = dict(leaf="lf0", spine="sp0", superspine="ss0", template=None, nics=0)
    st = ClusterState(
        [node("a", gpus=4, model="H100", **kw), node("b", gpus=4, model="H100", **kw)]
    )
    hold(st, "b", tuple(range(used_on_b)), "busy")
    return st


@pytest.mark.parametrize(
    ("strategy", "used_on_b", "small"),
    [
        # binpack best-fits each 2-GPU pod of 'small' (on b's 3 free GPUs, then on a's 4)
        ("binpack", 1, (2, 2)),
        # the others put the three 1-GPU pods of 'small' where they leave no node 3 GPUs
        ("ebinpack", 2, (3, 1)),
        ("spread", 2, (3, 1)),
        ("espread", 2, (3, 1)),
        ("topology", 2, (3, 1)),
    ],
)
def test_a_gang_whose_role_of_small_pods_is_declared_first_still_places_its_large_pod(
    strategy: str, used_on_b: int, small: tuple[int, int]
) -> None:
    # role 'small' asks as many GPUs in all as role 'big' or more, so the most asked first
    # keeps the declared order; placed first, its pods leave neither node room for the
    # 3-GPU pod of 'big', which fits when placed first (the largest pod first)
    st = _two_small_nodes(used_on_b)
    replicas, gpus = small
    gang = Job(
        id="j",
        roles=(
            Role(name="small", replicas=replicas, resources=Resources(gpus=gpus)),
            Role(name="big", replicas=1, resources=Resources(gpus=3)),
        ),
    )
    res = Placer(strategy).place(gang, st.snapshot())
    assert res.ok, res.reason
    (big,) = [b for b in res.bindings if b.pod.role == "big"]
    assert len(big.gpus) == 3
    for b in res.bindings:
        st.bind(b)  # the truth accepts them: nothing allocated twice


@pytest.mark.parametrize(
    ("used", "shape"),
    [
        # spread puts the 3-GPU pod, tried first in both orders, on the empty node; only
        # the 3-GPU pod on the node of 3 free GPUs leaves 2 + 2 + 2 for the 2-GPU pods
        ((2, 1, 0), ((1, 3), (1, 2), (2, 2))),
        ((1, 1, 0), ((1, 2), (2, 2), (1, 3))),
    ],
)
def test_a_three_role_gang_that_only_a_third_order_of_its_roles_places_is_placed(
    used: tuple[int, ...], shape: tuple[tuple[int, int], ...]
) -> None:
    # the declared order and the most constrained first both fail under spread; one of the
    # four other orders of three roles places the gang: it is placed, not refused
    roles = tuple(
        Role(name=f"r{k}", replicas=n, resources=Resources(gpus=g))
        for k, (n, g) in enumerate(shape)
    )
    st = partly_used(list(used))
    res = Placer("spread").place(Job(id="j", roles=roles), st.snapshot())
    assert res.ok, res.reason
    assert len(res.bindings) == sum(n for n, _g in shape)
    for b in res.bindings:
        st.bind(b)  # the truth accepts them: nothing allocated twice


def test_a_three_role_gang_whose_role_fits_in_no_order_stops_after_the_try_that_placed_it_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # nodes of 3 free GPUs each: the 4-GPU pod of role 'c' fits nowhere; the declared order
    # fails at it after 'a' and 'b', the most constrained first fails at it first: no other
    # order can place it, so the four other orders are not tried
    roles = (
        Role(name="a", replicas=2, resources=Resources(gpus=1)),
        Role(name="b", replicas=2, resources=Resources(gpus=2)),
        Role(name="c", replicas=1, resources=Resources(gpus=4)),
    )
    tried: list[list[str] | None] = []
    attempt = Placer._attempt

    def counted(self: Placer, job: Job, snap: object, todo: object, order: object) -> object:
        tried.append(order)  # type: ignore[arg-type]
        return attempt(self, job, snap, todo, order)  # type: ignore[arg-type]

    monkeypatch.setattr(Placer, "_attempt", counted)
    res = Placer("spread").place(Job(id="j", roles=roles), partly_used([1, 1, 1]).snapshot())
    assert not res.ok
    assert tried == [None, ["c", "b", "a"]]
    assert res.reason is not None and "'c'" in res.reason.message


def test_a_gang_placed_in_the_order_its_roles_are_declared_keeps_that_placement() -> None:
    # both orders fit: the declared order's placement is kept (role 'any' first, best fit)
    st = _mixed_pools()
    snap = st.snapshot()
    two = Job(
        id="j",
        roles=(
            Role(name="any", replicas=2, resources=Resources(gpus=1)),
            Role(name="a100only", replicas=2, resources=Resources(gpus=1), gpu_models="A100"),
        ),
    )
    res = Placer().place(two, snap)
    assert res.ok
    assert sorted((b.pod.role, b.node) for b in res.bindings) == [
        ("a100only", "a100"), ("a100only", "a100"), ("any", "a100"), ("any", "a100"),
    ]  # fmt: skip


def test_a_gang_no_order_of_its_roles_fits_says_what_its_pools_hold() -> None:
    # 5 A100-only pods and an A100 pool of 4: the reason is about the pool (4 free), not
    # the 1 GPU role 'any' would have left it
    st = _mixed_pools()
    snap = st.snapshot()
    res = Placer().place(_any_then_a100(a100_pods=5), snap)
    assert not res.ok and res.bindings == ()
    assert res.reason is not None
    assert res.reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert res.reason.message == "role 'a100only': needs 5 GPUs; the allowed pools have 4 free"
    assert snap.same_as(st.full_snapshot()) == []


def test_a_gang_role_refused_after_others_of_its_job_says_they_were_placed_first() -> None:
    # 1 H100 GPU and 4 A100 GPUs free for 6 pods: in either order the second role is short,
    # and its reason says the free GPUs it counts are what the job's other role left
    st = _mixed_pools()
    hold(st, "h100", (0, 1, 2, 3, 4, 5, 6), "busy")
    res = Placer().place(_any_then_a100(), st.snapshot())
    assert res.reason is not None
    assert res.reason.message == (
        "role 'a100only' (placed after role 'any'): needs 3 GPUs; the allowed pools have 1 free"
    )


# --------------------------------------------------------------------------- registry


def test_strategies_are_chosen_by_name_and_names_are_unique() -> None:
    assert {"binpack", "ebinpack", "espread", "spread", "topology"} <= set(strategy_names())
    assert make_strategy("EBinpack").name == "ebinpack"
    with pytest.raises(UnknownPolicyError, match="nope"):
        Placer("nope")
    with pytest.raises(DuplicateError):
        register_strategy("binpack", BaseStrategy)


@pytest.mark.parametrize("probe", [0, -1, "4", 2.0, True, None])
def test_a_placer_refuses_a_group_probe_that_is_not_an_int_of_at_least_one(probe: object) -> None:
    with pytest.raises(InvalidConfigError, match="group_probe"):
        Placer("ebinpack", group_probe=probe)  # type: ignore[arg-type]
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    assert Placer("ebinpack", group_probe=1).place(job("J", gpus=8, replicas=2), st.snapshot()).ok


@pytest.mark.parametrize("bulk", ["no", 0, 1, None])
def test_a_placer_refuses_a_bulk_that_is_not_true_or_false(bulk: object) -> None:
    # "no" is truthy: it turned bulk placement on
    with pytest.raises(InvalidConfigError, match="bulk") as err:
        Placer("ebinpack", bulk=bulk)  # type: ignore[arg-type]
    assert err.value.field == "bulk"
    assert Placer("ebinpack", bulk=False).bulk is False


def test_options_given_with_a_strategy_object_are_refused_not_dropped() -> None:
    with pytest.raises(InvalidConfigError, match="strategy name, not a strategy object") as err:
        Placer(make_strategy("espread"), zone="serving")
    assert err.value.field == "strategy" and "zone" in err.value.reason
    # by name the option is used; a built object keeps its own
    assert Placer("espread", zone="serving").strategy.zone == "serving"  # type: ignore[attr-defined]
    built = make_strategy("espread", zone="serving")
    assert Placer(built).strategy.zone == "serving"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("J", "snap"), "job"),
        ((None, "state"), "snap"),
        ((None, "snap", "abc"), "pods"),
        ((None, "snap", [PodId(job="other", role="worker", index=0)]), "pods"),
        ((None, "snap", [PodId(job="J", role="nope", index=0)]), "pods"),
        ((None, "snap", [PodId(job="J", role="worker", index=2)]), "pods"),
        ((None, "snap", [PodId(job="J", role="worker", index=0)] * 2), "pods"),
    ],
)
def test_placer_place_refuses_what_is_not_a_job_a_snapshot_or_the_jobs_own_pods(
    args: tuple[object, ...], field: str
) -> None:
    st = ClusterBuilder().leaf("lf0", nodes=2).build()
    snap = st.snapshot()
    j = job("J", gpus=1, replicas=2, labels={"app": "j"})  # (noted on the snapshot if placed)
    real = {"snap": snap, "state": st}
    first = j if args[0] is None else args[0]
    pods = {} if len(args) < 3 else {"pods": args[2]}
    with pytest.raises(ValidationError, match=field):
        Placer().place(first, real[str(args[1])], **pods)  # type: ignore[arg-type]
    assert snap.pod_moves == [] and Placer().place(j, snap).ok


def test_placer_place_refuses_a_pod_that_already_runs_and_places_nothing() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=1).build()
    j = job("J", gpus=4, replicas=2, gang=False)
    running = PodId(job="J", role="worker", index=0)
    st.bind(Placer().place(j, st.snapshot(), pods=[running]).bindings[0])
    snap = st.snapshot()
    with pytest.raises(ValidationError, match="already runs"):
        Placer().place(j, snap, pods=[running])  # (it would be bound twice, its GPUs counted twice)
    assert snap.pod_moves == [] and [b.pod.index for b in Placer().place(j, snap).bindings] == [1]
