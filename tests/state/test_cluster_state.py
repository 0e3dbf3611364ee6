"""ClusterState and Snapshot scenarios: what is allocatable, incremental refresh, transactions,
and bad input that changes nothing."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kant.errors import (
    AllocationConflictError,
    DuplicateError,
    InvalidJobError,
    InvalidNodeError,
    InvalidResourcesError,
    InvariantError,
    TransactionError,
    UnknownNodeError,
    UnknownPodError,
    UnknownTemplateError,
    ValidationError,
)
from kant.model import MILLI, Binding, NodeSpec, PodId, ReasonCode, Tier
from kant.placement import Placer
from kant.scheduler import Scheduler
from kant.state import ClusterState, NodeColumns, Snapshot
from kant.testing import ClusterBuilder, check_invariants, job, node
from kant.topology import pcie_node, register_template


def pod(job: str, i: int = 0) -> PodId:
    return PodId(job=job, role="w", index=i)


@pytest.fixture
def cluster() -> ClusterState:
    return (
        ClusterBuilder()
        .leaf("lf0", nodes=2)
        .spine("sp1")
        .leaf("lf1", nodes=2, model="A100")
        .build()
    )


def snapshot_matches_truth(st: ClusterState, snap: Snapshot) -> None:
    check_invariants(st)
    check_invariants(snap)
    assert snap.same_as(st.full_snapshot()) == []


def test_a_new_cluster_has_every_healthy_gpu_free(cluster: ClusterState) -> None:
    snap = cluster.snapshot()
    assert snap.free_gpus[:4].tolist() == [8, 8, 8, 8]
    leaf = cluster.group_id("leaf", "lf1")
    assert snap.agg["leaf"][leaf].tolist() == [16, 2, 16000]
    assert cluster.total_gpus() == 32
    snapshot_matches_truth(cluster, snap)


def test_every_column_reads_as_a_snapshot_attribute_and_nothing_else_does(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    for name in (*NodeColumns.SCALARS, "gpu_free"):
        assert getattr(snap, name) is getattr(snap.cols, name), name
    cluster.add_node(node("grows", gpus=16))  # wider rows: the columns are new arrays
    snap = cluster.snapshot()
    assert snap.gpu_free is snap.cols.gpu_free and snap.gpu_free.shape[1] >= 16
    with pytest.raises(AttributeError):
        _ = snap.no_such_column  # type: ignore[attr-defined]


def test_a_binding_holds_exactly_its_devices_and_capacity(cluster: ClusterState) -> None:
    cluster.bind(
        Binding(pod=pod("a"), node="lf0-n0", gpus=(0, 1), nics=(0,), cpu_milli=4000, memory_mib=10)
    )
    cluster.bind(Binding(pod=pod("b"), node="lf0-n0", gpus=(2,), gpu_milli=300))
    snap = cluster.snapshot()
    s = cluster.slot_of("lf0-n0")
    assert snap.gpu_free[s, :4].tolist() == [0, 0, 700, 1000]
    assert snap.free_gpus[s] == 5
    assert int(snap.free_mask[s]) == 0b11111000
    assert snap.free_nics[s] == 7
    assert snap.cpu_free[s] == 192_000 - 4000
    assert cluster.pods_on("lf0-n0") == (pod("a"), pod("b"))
    snapshot_matches_truth(cluster, snap)


def test_fractional_pods_share_a_gpu_without_over_committing_it(cluster: ClusterState) -> None:
    cluster.bind(Binding(pod=pod("a"), node="lf0-n0", gpus=(3,), gpu_milli=600))
    cluster.bind(Binding(pod=pod("b"), node="lf0-n0", gpus=(3,), gpu_milli=400))
    with pytest.raises(AllocationConflictError, match="GPU 3 has 0 milli free"):
        cluster.bind(Binding(pod=pod("c"), node="lf0-n0", gpus=(3,), gpu_milli=1))
    check_invariants(cluster)


REJECTED = [
    ("a pod cannot be bound to a node that does not exist", Binding(pod=pod("x"), node="nope", gpus=(0,)), UnknownNodeError),
    ("a GPU the node does not have is rejected", Binding(pod=pod("x"), node="lf0-n0", gpus=(8,)), AllocationConflictError),
    ("a GPU already held is rejected", Binding(pod=pod("x"), node="lf0-n0", gpus=(0,)), AllocationConflictError),
    ("a NIC already held is rejected", Binding(pod=pod("x"), node="lf0-n0", gpus=(5,), nics=(0,)), AllocationConflictError),
    ("more CPU than is free is rejected", Binding(pod=pod("x"), node="lf0-n1", cpu_milli=10**9), AllocationConflictError),
    ("more memory than is free is rejected", Binding(pod=pod("x"), node="lf0-n1", memory_mib=10**9), AllocationConflictError),
    ("a pod already bound cannot be bound again", Binding(pod=pod("held"), node="lf0-n1", gpus=(0,)), DuplicateError),
]  # fmt: skip


@pytest.mark.parametrize(("case", "binding", "error"), REJECTED, ids=[c[0] for c in REJECTED])
def test_a_rejected_binding_changes_nothing(
    cluster: ClusterState, case: str, binding: Binding, error: type[Exception]
) -> None:
    cluster.bind(Binding(pod=pod("held"), node="lf0-n0", gpus=(0,), nics=(0,)))
    before = cluster.snapshot()
    gen = cluster.generation
    cols = {k: getattr(before.cols, k)[:4].copy() for k in ("free_mask", "cpu_free", "nic_mask")}
    with pytest.raises(error):
        cluster.bind(binding)
    assert cluster.generation == gen
    assert cluster.num_pods == 1
    after = cluster.snapshot()
    for k, v in cols.items():
        assert np.array_equal(getattr(after.cols, k)[:4], v)
    snapshot_matches_truth(cluster, after)


def test_an_unhealthy_gpu_is_not_allocatable_until_it_recovers(cluster: ClusterState) -> None:
    cluster.set_gpu_health("lf0-n0", 2, False)
    snap = cluster.snapshot()
    s = cluster.slot_of("lf0-n0")
    assert snap.free_gpus[s] == 7 and not int(snap.free_mask[s]) >> 2 & 1
    with pytest.raises(AllocationConflictError, match="GPU 2 is unhealthy"):
        cluster.bind(Binding(pod=pod("x"), node="lf0-n0", gpus=(2,)))
    cluster.set_gpu_health("lf0-n0", 2, True)
    assert cluster.snapshot().free_gpus[s] == 8


def test_an_unhealthy_nic_is_not_allocatable_until_it_recovers(cluster: ClusterState) -> None:
    snap = cluster.snapshot()
    s = cluster.slot_of("lf0-n0")
    assert int(snap.cols.nic_mask[s]) == 0xFF and snap.cols.free_nics[s] == 8
    cluster.set_nic_health("lf0-n0", 3, False)
    assert int(cluster.columns.nic_mask[s]) == 0xFF & ~(1 << 3)
    assert cluster.columns.free_nics[s] == 7
    snap = cluster.snapshot()
    assert int(snap.cols.nic_mask[s]) == 0xFF & ~(1 << 3) and snap.cols.free_nics[s] == 7
    assert snap.free_gpus[s] == 8  # only the NIC is gone
    with pytest.raises(AllocationConflictError, match="NIC 3 is unhealthy"):
        cluster.bind(Binding(pod=pod("x"), node="lf0-n0", nics=(3,)))
    with pytest.raises(InvalidNodeError, match="'nic' = 8"):
        cluster.set_nic_health("lf0-n0", 8, False)
    with pytest.raises(UnknownNodeError):
        cluster.set_nic_health("ghost", 0, False)
    snapshot_matches_truth(cluster, snap)
    cluster.set_nic_health("lf0-n0", 3, True)
    assert int(cluster.columns.nic_mask[s]) == 0xFF
    snap = cluster.snapshot()
    assert int(snap.cols.nic_mask[s]) == 0xFF and snap.cols.free_nics[s] == 8
    snapshot_matches_truth(cluster, snap)


def test_a_pod_holding_a_gpu_that_fails_keeps_it_but_it_is_not_returned(
    cluster: ClusterState,
) -> None:
    cluster.bind(Binding(pod=pod("a"), node="lf0-n0", gpus=(1,)))
    cluster.set_gpu_health("lf0-n0", 1, False)
    cluster.release(pod("a"))
    s = cluster.slot_of("lf0-n0")
    assert cluster.snapshot().free_gpus[s] == 7
    check_invariants(cluster)


def test_an_unhealthy_node_offers_nothing_but_keeps_its_pods(cluster: ClusterState) -> None:
    cluster.bind(Binding(pod=pod("a"), node="lf0-n1", gpus=(0,)))
    cluster.set_node_health("lf0-n1", False)
    snap = cluster.snapshot()
    s = cluster.slot_of("lf0-n1")
    assert snap.free_gpus[s] == 0 and snap.cpu_free[s] == 0
    assert cluster.pods_on("lf0-n1") == (pod("a"),)
    with pytest.raises(AllocationConflictError, match="unhealthy"):
        cluster.bind(Binding(pod=pod("b"), node="lf0-n1", gpus=(1,)))
    snapshot_matches_truth(cluster, snap)


def test_a_node_is_degraded_while_it_or_a_gpu_of_it_is_unhealthy(cluster: ClusterState) -> None:
    assert cluster.degraded_nodes() == []
    cluster.set_gpu_health("lf1-n0", 3, False)
    cluster.set_node_health("lf0-n1", False)
    cluster.set_nic_health("lf1-n1", 0, False)  # a NIC hides no GPU: not degraded
    assert cluster.degraded_nodes() == ["lf0-n1", "lf1-n0"]
    cluster.set_gpu_health("lf1-n0", 3, True)
    assert cluster.degraded_nodes() == ["lf0-n1"]
    cluster.remove_node("lf0-n1")
    cluster.add_node(
        node("lf0-n1", leaf="lf0", spine="sp0", superspine="ss0")
    )  # back under its name: healthy again
    assert cluster.degraded_nodes() == []
    check_invariants(cluster)


def test_removing_a_node_returns_its_pods_and_frees_its_slot(cluster: ClusterState) -> None:
    cluster.bind(Binding(pod=pod("a"), node="lf1-n0", gpus=(0, 1)))
    lost = cluster.remove_node("lf1-n0")
    assert [b.pod for b in lost] == [pod("a")]
    assert not cluster.has_pod(pod("a"))
    assert "lf1-n0" not in cluster
    snapshot_matches_truth(cluster, cluster.snapshot())
    cluster.add_node(node("late", leaf="lf1", spine="sp1", superspine="ss0"))
    assert cluster.slot_of("late") == 2  # the freed slot is reused, lowest first
    snapshot_matches_truth(cluster, cluster.snapshot())


def test_a_slot_reused_by_a_node_of_another_leaf_between_two_refreshes_moves_its_groups(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    cluster.bind(Binding(pod=pod("a"), node="lf1-n0", gpus=(0, 1)))
    cluster.remove_node("lf1-n0")
    cluster.add_node(node("late", leaf="lf0", spine="sp0", superspine="ss0"))
    assert cluster.slot_of("late") == 2  # lf1's slot, now in lf0: one refresh sees both
    assert cluster.snapshot() is snap
    snapshot_matches_truth(cluster, snap)


@pytest.mark.parametrize("changed", [3, 40], ids=["a few rows", "many rows"])
def test_a_refresh_of_a_few_or_many_rows_keeps_aggregates_and_index_exact(changed: int) -> None:
    st = ClusterBuilder().leaf("lf0", nodes=30).spine("sp1").leaf("lf1", nodes=30).build()
    snap = st.snapshot()
    names = sorted(s.name for s in st.nodes())[:changed]
    for i, n in enumerate(names):
        st.bind(Binding(pod=pod("a", i), node=n, gpus=tuple(range(i % 8 + 1))))
    st.remove_node(names[0])  # a dead row in the batch, and its slot reused in another leaf
    st.add_node(node("late", leaf="lf1", spine="sp1", superspine="ss0"))
    assert st.snapshot() is snap
    snapshot_matches_truth(st, snap)


def test_unknown_names_raise_typed_errors(cluster: ClusterState) -> None:
    with pytest.raises(UnknownNodeError, match="unknown node 'ghost'"):
        cluster.set_node_health("ghost", False)
    with pytest.raises(UnknownPodError):
        cluster.release(pod("ghost"))
    with pytest.raises(DuplicateError):
        cluster.add_node(node("lf0-n0"))
    with pytest.raises(InvalidNodeError, match="'gpu' = 9"):
        cluster.set_gpu_health("lf0-n0", 9, False)


def test_a_lookup_given_what_cannot_be_a_slot_level_or_id_raises_a_typed_error(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    for where in (cluster, snap):
        with pytest.raises(UnknownNodeError, match="slot 'x'"):
            where.name_of("x")  # type: ignore[arg-type]
    for ask in (
        lambda: cluster.group_id("rack", "r0"),
        lambda: cluster.group_names("rack"),
        lambda: cluster.group_count("rack"),
        lambda: snap.members("rack", 0),
    ):
        with pytest.raises(ValidationError, match="field 'level' = 'rack'"):
            ask()
    with pytest.raises(UnknownPodError):
        cluster.binding([1])  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match="'pod'"):
        cluster.has_pod([1])  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match="'job'"):
        cluster.job_pods([1])  # type: ignore[arg-type]
    snapshot_matches_truth(cluster, snap)


def test_a_node_naming_an_unknown_template_is_refused_and_the_cluster_is_left_as_it_was(
    cluster: ClusterState,
) -> None:
    version, before = cluster.membership_version, cluster.full_snapshot()
    with pytest.raises(UnknownTemplateError, match="no-such-template") as refused:
        cluster.add_node(node("bad", template="no-such-template"))
    assert refused.value.node == "bad" and "node 'bad'" in str(refused.value)
    assert "bad" not in cluster and len(cluster) == 4
    assert cluster.membership_version == version
    assert cluster.full_snapshot().same_as(before) == []
    with pytest.raises(UnknownTemplateError, match="no-such-template"):
        ClusterState([node("ok"), node("bad", template="no-such-template")])
    check_invariants(cluster)


@pytest.mark.parametrize(
    ("gpus", "nics", "said"),
    [
        (3, 8, "'gpus' = 3: template 'dgx-8gpu' has 8 GPUs"),
        (16, 8, "'gpus' = 16: template 'dgx-8gpu' has 8 GPUs"),
        (8, 12, "'rdma_nics' = 12: template 'dgx-8gpu' has 8 NICs"),
    ],
)
def test_a_node_with_other_gpu_or_nic_counts_than_its_template_is_refused_naming_both(
    cluster: ClusterState, gpus: int, nics: int, said: str
) -> None:
    odd = node("odd", gpus=gpus, nics=nics, template="dgx-8gpu")
    version = cluster.membership_version
    with pytest.raises(InvalidNodeError, match=said):
        cluster.add_node(odd)
    assert "odd" not in cluster and cluster.membership_version == version
    with pytest.raises(InvalidNodeError, match=said):
        ClusterState([odd])
    check_invariants(cluster)


@pytest.mark.parametrize(
    ("odd", "said"),
    [
        (node("odd", leaf="lf0", spine="sp1"), "'spine' = 'sp1': leaf 'lf0' is already under spine 'sp0'"),
        (node("odd", leaf="lf0"), "'spine' = None: leaf 'lf0' is already under spine 'sp0'"),
        (node("odd", leaf="lf0", spine="sp0", superspine="ss9"), "'superspine' = 'ss9': spine 'sp0' is already under superspine 'ss0'"),
        (node("odd", leaf="new", spine="sp0", superspine="ss9"), "'superspine' = 'ss9': spine 'sp0' is already under superspine 'ss0'"),
        (node("lf1", leaf="new"), "'name' = 'lf1': already names a leaf"),
        (node("odd", leaf="lf0-n0"), "'leaf' = 'lf0-n0': already names a node"),
        (node("odd", leaf="new", spine="lf1"), "'spine' = 'lf1': already names a leaf"),
        (node("odd", leaf="odd"), "'leaf' = 'odd': already names a node"),
        (node("odd", leaf="x", hbd="x"), "'hbd' = 'x': already names a leaf"),
        (node("odd", leaf="lf0", spine="sp0", superspine="ss0", hbd="lf0-n0"), "'hbd' = 'lf0-n0': already names a node"),
        (node("odd", leaf="lf0", spine="sp0", superspine="ss0", hbd="odd"), "'hbd' = 'odd': already names a node"),
        (node("odd", leaf="lf0", spine="sp0", superspine="ss0", hbd="lf1"), "'hbd' = 'lf1': already names a leaf"),
        (node("odd", hbd="sp1"), "'hbd' = 'sp1': already names a spine"),
    ],
)  # fmt: skip
def test_a_node_whose_fabric_place_contradicts_the_clusters_is_refused_changing_nothing(
    cluster: ClusterState, odd: NodeSpec, said: str
) -> None:
    # (as a ClusterDescription refuses it: a leaf under two spines would let a required
    # SPINE gang straddle two spines)
    version, before = cluster.membership_version, cluster.full_snapshot()
    with pytest.raises(InvalidNodeError, match=said):
        cluster.add_node(odd)
    assert odd.name not in cluster and cluster.membership_version == version
    assert cluster.full_snapshot().same_as(before) == []
    with pytest.raises(InvalidNodeError, match=said):
        ClusterState([*cluster.nodes(), odd])
    check_invariants(cluster)


def test_a_gang_requiring_one_spine_never_straddles_a_leaf_reported_under_two_spines() -> None:
    st = ClusterState([node("a", leaf="L", spine="sp0"), node("c", leaf="L2", spine="sp1")])
    scheduler = Scheduler(st)
    with pytest.raises(InvalidNodeError, match="leaf 'L' is already under spine 'sp0'"):
        scheduler.node_added(node("b", leaf="L", spine="sp1"), now=1)
    assert sorted(n.name for n in st.nodes()) == ["a", "c"]
    gang = job("J", gpus=8, replicas=2, tier=Tier.SPINE, required=True)
    res = Placer("ebinpack").place(gang, st.snapshot())
    assert res.bindings == () and {r.code for r in res.unplaced.values()} == {ReasonCode.TOPOLOGY}


def test_a_fabric_name_whose_last_node_left_is_free_for_another_place(
    cluster: ClusterState,
) -> None:
    for name in ("lf1-n0", "lf1-n1"):
        cluster.remove_node(name)
    cluster.add_node(node("moved", leaf="lf1", spine="sp0", superspine="ss0"))  # lf1 was sp1's
    cluster.add_node(node("sp1", leaf="lf2"))  # sp1 no longer names a spine
    with pytest.raises(InvalidNodeError, match="leaf 'lf1' is already under spine 'sp0'"):
        cluster.add_node(node("back", leaf="lf1", spine="sp1"))
    check_invariants(cluster)


def test_a_node_may_report_fewer_nics_than_its_template_lays_out(cluster: ClusterState) -> None:
    cluster.add_node(node("no-nics", gpus=8, nics=0, template="dgx-8gpu"))
    assert cluster.snapshot().free_nics[cluster.slot_of("no-nics")] == 0


def test_a_cluster_built_from_something_that_is_not_a_collection_of_nodes_is_refused() -> None:
    with pytest.raises(InvalidNodeError, match="'nodes' = None"):
        ClusterState(None)  # type: ignore[arg-type]


def test_a_node_may_name_a_template_its_user_registered() -> None:
    register_template(pcie_node("test-state-user-2gpu", 2))
    st = ClusterState([node("mine", gpus=2, template="test-state-user-2gpu")])
    assert st.node("mine").template == "test-state-user-2gpu"


def test_a_refresh_copies_only_the_nodes_that_changed(cluster: ClusterState) -> None:
    snap = cluster.snapshot()
    untouched = snap.gpu_free
    here = snap.log_position
    cluster.bind(Binding(pod=pod("a"), node="lf1-n1", gpus=(0,)))
    again = cluster.snapshot()
    assert again is snap and again.gpu_free is untouched  # refreshed in place, rows shared
    assert snap.rows_changed_since(here).tolist() == [cluster.slot_of("lf1-n1")]
    here = snap.log_position
    cluster.snapshot()
    assert snap.rows_changed_since(here).tolist() == []  # nothing changed: nothing copied
    snapshot_matches_truth(cluster, again)


def test_the_change_feed_names_each_changed_slot_once_until_taken() -> None:
    st = ClusterBuilder().leaf("lf0", nodes=3).build()  # no snapshot: nobody else takes it
    assert st.take_changes().tolist() == [0, 1, 2]  # the nodes were added
    assert st.take_changes().tolist() == []
    st.bind(Binding(pod=pod("a"), node="lf0-n2", gpus=(0,)))
    st.set_gpu_health("lf0-n0", 1, False)
    st.release(pod("a"))
    assert st.take_changes().tolist() == [0, 2]
    with pytest.raises(UnknownNodeError):
        st.set_node_health("ghost", False)
    assert st.take_changes().tolist() == []  # a rejected call changes nothing
    st.remove_node("lf0-n1")
    assert st.take_changes().tolist() == [1]
    assert list(st.slot_names) == ["lf0-n0", None, "lf0-n2"]


def test_the_snapshot_reads_names_groups_and_health_through_public_accessors(
    cluster: ClusterState,
) -> None:
    assert list(cluster.slot_names) == [n.name for n in cluster.nodes()]
    assert cluster.group_count("leaf") == 2 and cluster.group_names("leaf") == ["lf0", "lf1"]
    cluster.set_gpu_health("lf0-n1", 0, False)
    cluster.set_nic_health("lf0-n1", 1, False)
    assert cluster.health_masks("lf0-n1") == (True, 0xFE, 0xFD)
    cluster.set_node_health("lf0-n1", False)
    assert cluster.health_masks("lf0-n1")[0] is False
    with pytest.raises(UnknownNodeError):
        cluster.health_masks("ghost")


def test_a_rolled_back_transaction_leaves_the_snapshot_exactly_as_it_was(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    reference = cluster.full_snapshot()
    with snap.transaction():
        snap.allocate(0, 0b1111, nic_mask=0b1, cpu_milli=10)
        with snap.transaction() as inner:
            snap.allocate(1, 0xFF)
            inner.commit()
        snap.allocate(2, 0b1, milli=250)
        assert snap.same_as(reference) != []
    assert snap.same_as(reference) == []
    check_invariants(snap)


def test_the_change_log_names_the_rows_allocated_rolled_back_and_refreshed(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    start = snap.log_position
    with snap.transaction():
        snap.allocate(2, 0b1, milli=250)
    # the allocation, then its rollback
    assert snap.rows_changed_since(start).tolist() == [2, 2]
    here = snap.log_position
    cluster.bind(Binding(pod=pod("a"), node="lf1-n1", gpus=(0,)))
    cluster.snapshot()
    assert snap.rows_changed_since(here).tolist() == [cluster.slot_of("lf1-n1")]
    assert snap.rows_changed_since(snap.log_position).tolist() == []


def test_a_rolled_back_change_gives_back_the_content_version_a_kept_one_does_not(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    start = snap.content_version
    with snap.transaction():
        snap.allocate(2, 0b1)
        assert snap.content_version != start
        with snap.transaction() as inner:
            snap.allocate(2, 0b10)
            inner.commit()  # folded into the outer one, which rolls back
    assert snap.content_version == start  # the rows are as they were
    with snap.transaction() as tx:
        snap.allocate(2, 0b1)
        tx.commit()
    kept = snap.content_version
    assert kept != start
    cluster.snapshot()  # the committed row is re-synced from the truth: a new number
    assert snap.content_version not in (start, kept)
    here = snap.content_version
    cluster.snapshot()
    assert snap.content_version == here  # nothing changed, nothing refreshed


def test_a_rows_version_follows_its_own_changes_and_rollbacks_give_it_back(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    assert snap.row_version(2) is None  # unchanged since the refresh
    with snap.transaction():
        snap.allocate(2, 0b1)
        taken = snap.row_version(2)
        assert taken is not None
        with snap.transaction():
            snap.allocate(3, 0b1)  # another row: this one keeps its version
            assert snap.row_version(2) == taken
            snap.allocate(2, 0b10)
            assert snap.row_version(2) != taken
        assert snap.row_version(2) == taken  # rolled back: as the first allocation left it
        with snap.transaction() as kept:
            snap.release(2, 0b1)
            kept.commit()  # folded into the outer transaction
        assert snap.row_version(2) not in (None, taken)
    assert snap.row_version(2) is None  # everything rolled back
    with snap.transaction() as tx:
        snap.allocate(2, 0b1)
        tx.commit()
    assert snap.row_version(2) is not None
    cluster.snapshot()  # the row is re-synced from the truth
    assert snap.row_version(2) is None


def test_a_change_log_position_older_than_the_kept_log_is_answered_none(
    cluster: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kant.state.snapshot

    monkeypatch.setattr(kant.state.snapshot, "_CHANGE_LOG_KEEP", 8)
    snap = cluster.snapshot()
    start = snap.log_position
    for _ in range(5):  # 10 entries: an allocation and a rollback each
        with snap.transaction():
            snap.allocate(1, 0b1)
    assert snap.rows_changed_since(start) is None  # the reader must compare every row
    recent = snap.log_position
    with snap.transaction():
        snap.allocate(3, 0b1)
    assert snap.rows_changed_since(recent).tolist() == [3, 3]


def test_max_share_is_the_largest_free_share_of_one_gpu(cluster: ClusterState) -> None:
    s = cluster.slot_of("lf0-n0")
    snap = cluster.snapshot()
    assert snap.cols.max_share[s] == 1000
    cluster.bind(Binding(pod=pod("a"), node="lf0-n0", gpus=tuple(range(7))))
    cluster.bind(Binding(pod=pod("b"), node="lf0-n0", gpus=(7,), gpu_milli=300))
    assert cluster.snapshot().cols.max_share[s] == 700
    cluster.set_gpu_health("lf0-n0", 7, False)
    assert cluster.snapshot().cols.max_share[s] == 0
    snapshot_matches_truth(cluster, snap)


def test_committed_tentative_changes_are_undone_by_the_next_refresh(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    with snap.transaction() as tx:
        snap.allocate(3, 0xFF)
        tx.commit()
    assert snap.free_gpus[3] == 0
    assert cluster.snapshot().free_gpus[3] == 8  # the truth never had that pod
    snapshot_matches_truth(cluster, snap)


def test_snapshot_changes_need_a_transaction_and_a_conflicting_one_changes_nothing(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    with pytest.raises(TransactionError):
        snap.allocate(0, 0b1)
    with snap.transaction() as tx:
        snap.allocate(0, 0b1)
        with pytest.raises(AllocationConflictError):
            snap.allocate(0, 0b11)
        assert snap.free_gpus[0] == 7
        tx.commit()
    with pytest.raises(TransactionError):
        tx.commit()


def test_an_allocation_past_the_snapshots_rows_or_of_a_negative_amount_changes_nothing(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    free_milli = snap.cols.views().free_milli[0]
    with snap.transaction() as tx:
        version = snap.content_version
        with pytest.raises(AllocationConflictError, match="slot 99"):
            snap.allocate(99, 0b1)
        with pytest.raises(AllocationConflictError, match="no GPU"):
            snap.allocate(0, 1 << 40)
        for amount in ("milli", "cpu_milli", "memory_mib"):
            with pytest.raises(InvalidResourcesError, match=f"'{amount}' = -5"):
                snap.allocate(0, 0b1, **{amount: -5})  # type: ignore[arg-type]
        with pytest.raises(AllocationConflictError, match="slot 99"):
            snap.release(99, 0b1)
        # cpu_milli=1.5 took the GPUs, then failed in the columns (totals wrong for good); a
        # negative mask never ended; a negative release added to the free amounts
        for call, kw in (
            (snap.allocate, {"cpu_milli": 1.5}), (snap.allocate, {"pods": math.nan}),
            (snap.allocate, {"memory_mib": 2.0}), (snap.allocate, {"gpu_mask": -1}),
            (snap.allocate, {"milli": True}), (snap.release, {"milli": -2000}),
            (snap.release, {"cpu_milli": -(10**6)}), (snap.release, {"pods": -3}),
            (snap.release, {"nic_mask": -1}), (snap.release, {"milli": 0.5}),
        ):  # fmt: skip
            with pytest.raises(InvalidResourcesError, match=f"'{next(iter(kw))}'"):
                call(0, **{"gpu_mask": 0b11, **kw})  # type: ignore[arg-type]
        snap.allocate(0, np.int64(0b1), milli=np.int64(MILLI))  # (NumPy's integers are whole)
        snap.release(0, 0b1)
        assert snap.content_version > version
        assert snap.cols.views().free_milli[0] == free_milli
        tx.commit()
    snapshot_matches_truth(cluster, snap)
    snap.check_invariants()


def test_best_fit_lists_the_fullest_nodes_that_still_fit_first(cluster: ClusterState) -> None:
    cluster.bind(Binding(pod=pod("a"), node="lf0-n1", gpus=(0, 1, 2, 3, 4)))
    cluster.bind(Binding(pod=pod("b"), node="lf0-n0", gpus=(0, 1)))
    snap = cluster.snapshot()
    h100 = cluster.group_id("pool", "H100")
    names = [snap.name_of(s) for s in snap.best_fit(h100, 3)]
    assert names == ["lf0-n1", "lf0-n0"]
    assert [snap.name_of(s) for s in snap.best_fit(h100, 4)] == ["lf0-n0"]


def test_a_snapshot_cannot_refresh_under_an_open_transaction(cluster: ClusterState) -> None:
    snap = cluster.snapshot()
    tx = snap.transaction()
    with pytest.raises(TransactionError):
        cluster.snapshot()
    tx.rollback()
    assert cluster.snapshot() is snap


def test_a_refresh_refused_under_an_open_transaction_keeps_the_changes_for_the_next_one(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    tx = snap.transaction()
    cluster.bind(Binding(pod=pod("a"), node="lf0-n0", gpus=tuple(range(8))))
    with pytest.raises(TransactionError):
        cluster.snapshot()
    tx.rollback()
    assert cluster.snapshot().free_gpus[cluster.slot_of("lf0-n0")] == 0
    snapshot_matches_truth(cluster, snap)


@pytest.mark.parametrize(
    "changed",
    [lambda s: [s], lambda s: (s, s), lambda s: np.array([s])],
    ids=["a list", "a tuple with repeats", "an array"],
)
def test_a_refresh_takes_any_sequence_of_slot_ints(cluster: ClusterState, changed: Any) -> None:
    # refresh([0]) raised AttributeError ('list' object has no attribute 'tolist')
    snap = cluster.snapshot()
    cluster.bind(Binding(pod=pod("a"), node="lf0-n0", gpus=tuple(range(8))))
    s = cluster.slot_of("lf0-n0")
    cluster.take_changes()
    snap.refresh(changed(s))
    assert snap.free_gpus[s] == 0
    snapshot_matches_truth(cluster, snap)


def test_a_refresh_takes_an_int64_array_unsorted_or_with_repeats_as_its_slots() -> None:
    # (taken as sorted and distinct, it raised ValueError half way and left the leaf
    # aggregates wrong, which no later refresh repaired)
    st = ClusterBuilder().leaf("a", nodes=3).build()
    snap = st.snapshot()
    st.bind(Binding(pod=pod("j"), node="a-n1", gpus=(0, 1)))
    st.bind(Binding(pod=pod("k"), node="a-n0", gpus=(0,)))
    st.take_changes()
    n0, n1 = st.slot_of("a-n0"), st.slot_of("a-n1")
    snap.refresh(np.array([n1, n0, n1], dtype=np.int64))
    snap.check_invariants()
    snapshot_matches_truth(st, snap)


@pytest.mark.parametrize(
    "changed",
    [None, "0", 3, [0.5], [True], ["0"], [-1], [4], np.array([4]), np.array([-1]),
     np.array([[0]]), np.array([0.0]), np.array([True])],
)  # fmt: skip
def test_a_refresh_refuses_what_is_not_slots_of_the_state_changing_nothing(
    cluster: ClusterState, changed: object
) -> None:
    snap = cluster.snapshot()
    cluster.bind(Binding(pod=pod("a"), node="lf0-n0", gpus=(0,)))
    before = snap.content_version
    with pytest.raises(ValidationError) as err:
        snap.refresh(changed)  # type: ignore[arg-type]
    assert err.value.field == "changed"
    assert snap.content_version == before
    assert cluster.snapshot().free_gpus[cluster.slot_of("lf0-n0")] == 7  # (the feed is kept)
    snapshot_matches_truth(cluster, snap)


def test_slots_of_names_each_nodes_slot_and_follows_nodes_that_come_and_go(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    nodes = ("lf1-n0", "ghost", "lf0-n1")
    assert snap.slots_of(nodes) == (cluster.slot_of("lf1-n0"), -1, cluster.slot_of("lf0-n1"))
    assert snap.slots_of(nodes) is snap.slots_of(nodes)  # kept while no node comes or goes
    cluster.remove_node("lf0-n1")
    snap = cluster.snapshot()
    assert snap.slots_of(nodes) == (cluster.slot_of("lf1-n0"), -1, -1)
    cluster.add_node(node("ghost", leaf="lf0", spine="sp0", superspine="ss0"))
    snap = cluster.snapshot()
    assert snap.slots_of(nodes) == (cluster.slot_of("lf1-n0"), cluster.slot_of("ghost"), -1)


@pytest.mark.parametrize("healthy", ["false", "no", None, math.nan, 0, 1])
def test_a_health_that_is_no_bool_is_refused_changing_nothing(
    cluster: ClusterState, healthy: object
) -> None:
    # set_node_health(n, "false") left the node healthy, set_gpu_health(n, 0, "no") the GPU
    name = next(iter(cluster.nodes())).name
    for call in (
        lambda: cluster.set_node_health(name, healthy),  # type: ignore[arg-type]
        lambda: cluster.set_gpu_health(name, 0, healthy),  # type: ignore[arg-type]
        lambda: cluster.set_nic_health(name, 0, healthy),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValidationError, match="'healthy'"):
            call()
    assert cluster.is_healthy(name) and cluster.gpu_healthy_mask(name) == (1 << 8) - 1


def test_pods_already_running_are_bound_on_an_unhealthy_node_or_device_and_nothing_else_is(
    cluster: ClusterState,
) -> None:
    # bind_many(running=True) takes back pods that run on a node cordoned or a GPU or NIC
    # failed meanwhile (a restart), as the pods there when it failed keep what they hold;
    # new pods are still refused there, and capacity is still checked
    name = next(iter(cluster.nodes())).name
    cluster.set_node_health(name, False)
    cluster.set_gpu_health(name, 1, False)
    cluster.set_nic_health(name, 0, False)
    b = Binding(pod=pod("a"), node=name, gpus=(0, 1), nics=(0,))
    with pytest.raises(AllocationConflictError, match="unhealthy"):
        cluster.bind_many([b])
    with pytest.raises(ValidationError, match="'running'"):
        cluster.bind_many([b], running="yes")  # type: ignore[arg-type]
    assert cluster.num_pods == 0
    too_many = Binding(pod=pod("c"), node=name, gpus=(2,), cpu_milli=10**9)
    with pytest.raises(AllocationConflictError, match="CPU"):
        cluster.bind_many([b, too_many], running=True)
    assert cluster.num_pods == 0
    cluster.bind_many([b], running=True)
    assert cluster.binding(pod("a")) == b
    check_invariants(cluster)
    assert cluster.snapshot().same_as(cluster.full_snapshot()) == []
    cluster.set_node_health(name, True)
    with pytest.raises(AllocationConflictError, match="GPU 1"):  # (held, and unhealthy)
        cluster.bind(Binding(pod=pod("b"), node=name, gpus=(1,)))


def test_pods_already_running_are_bound_above_a_nodes_max_pods_and_no_new_pod_is(
    cluster: ClusterState,
) -> None:
    # the node's pod capacity was lowered while two pods ran there (a restart): both are
    # taken back, as set_max_pods keeps the pods above it, and none is added until they
    # are below it
    name = next(iter(cluster.nodes())).name
    cluster.set_max_pods(name, 1)
    two = [Binding(pod=pod("a", i), node=name, gpus=(i,)) for i in range(2)]
    with pytest.raises(AllocationConflictError, match="max_pods"):
        cluster.bind_many(two)
    cluster.bind_many(two, running=True)
    check_invariants(cluster)
    assert cluster.snapshot().same_as(cluster.full_snapshot()) == []
    with pytest.raises(AllocationConflictError, match="max_pods"):
        cluster.bind(Binding(pod=pod("b"), node=name, gpus=(4,)))
    cluster.release(pod("a", 0))
    with pytest.raises(AllocationConflictError, match="max_pods"):
        cluster.bind(Binding(pod=pod("b"), node=name, gpus=(4,)))
    cluster.release(pod("a", 1))
    cluster.bind(Binding(pod=pod("b"), node=name, gpus=(4,)))
    check_invariants(cluster)


def test_a_snapshot_refuses_the_release_of_a_binding_it_never_held_changing_nothing(
    cluster: ClusterState,
) -> None:
    # the release gave the node 500 cores it does not have (cpu_free 692,000 of 192,000),
    # the invariants passed and a 600-core pod was placed there
    snap = cluster.snapshot()
    s = snap.slot_of("lf0-n0")
    ghost = Binding(pod=pod("ghost"), node="lf0-n0", gpus=(0,), cpu_milli=500_000, memory_mib=10)
    with snap.transaction():
        version, cpu = snap.content_version, int(snap.cpu_free[s])
        with pytest.raises(AllocationConflictError, match="lf0-n0"):
            snap.release_binding(ghost)
        assert snap.content_version == version and snap.cpu_free[s] == cpu
        check_invariants(snap)
        assert not Placer().place(job("big", gpus=1, cpu_milli=600_000), snap).ok


@pytest.mark.parametrize(
    "ghost",
    [
        Binding(pod=pod("ghost"), node="lf0-n1", gpus=(0,), gpu_milli=500),
        Binding(pod=pod("ghost"), node="lf0-n1", nics=(1,)),
        Binding(pod=pod("ghost"), node="lf0-n1", memory_mib=10),
    ],
    ids=["a GPU share", "a NIC", "memory"],
)
def test_a_release_of_many_bindings_with_one_never_held_changes_no_node(
    cluster: ClusterState, ghost: Binding
) -> None:
    held = Binding(pod=pod("a"), node="lf0-n0", gpus=(0,), nics=(0,), cpu_milli=1000)
    cluster.bind(held)
    snap = cluster.snapshot()
    with snap.transaction():
        version = snap.content_version
        with pytest.raises(AllocationConflictError, match="lf0-n1"):
            snap.release_bindings([held, ghost])  # (lf0-n0 is checked, and not written, first)
        assert snap.content_version == version
        assert snap.free_gpus[snap.slot_of("lf0-n0")] == 7
        snap.release_bindings([held])
        with pytest.raises(AllocationConflictError, match="lf0-n0"):
            snap.release_binding(held)  # (released twice)
        check_invariants(snap)
    snapshot_matches_truth(cluster, snap)


def test_the_invariants_name_cpu_or_memory_free_above_the_nodes_capacity(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    s = snap.slot_of("lf0-n0")
    for column in ("cpu_free", "mem_free"):
        getattr(snap.cols, column)[s] += 1
        with pytest.raises(InvariantError, match=f"slot {s}: {column} .* above"):
            snap.check_invariants()
        getattr(snap.cols, column)[s] -= 1
    snap.check_invariants()


def test_a_snapshot_names_a_slot_or_binding_of_the_wrong_kind_and_changes_nothing(
    cluster: ClusterState,
) -> None:
    snap = cluster.snapshot()
    with snap.transaction() as tx:
        version = snap.content_version
        for slot in (None, 1.5, "0", [0], True):
            for call in (snap.allocate, snap.release):
                with pytest.raises(AllocationConflictError, match="holds no node"):
                    call(slot, 0b1)  # type: ignore[arg-type]
        for bad in (None, "lf0-n0", PodId(job="j", role="w", index=0)):
            with pytest.raises(ValidationError, match="field 'binding' ="):
                snap.release_binding(bad)  # type: ignore[arg-type]
            with pytest.raises(ValidationError, match="field 'bindings' ="):
                snap.release_bindings([bad])  # type: ignore[list-item]
        with pytest.raises(ValidationError, match="field 'bindings' ="):
            snap.release_bindings(None)  # type: ignore[arg-type]
        for position in (None, 1.5, "0"):
            with pytest.raises(ValidationError, match="field 'position' ="):
                snap.rows_changed_since(position)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="field 'other' ="):
            snap.same_as(cluster)  # type: ignore[arg-type]
        assert snap.content_version == version
        tx.commit()
    snapshot_matches_truth(cluster, snap)
    snap.check_invariants()
