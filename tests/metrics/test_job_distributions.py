"""Size buckets, job records, JWTD and JTTED against hand-computed cases."""

from __future__ import annotations

import math
from collections.abc import Callable

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from kant.errors import ValidationError
from kant.metrics import BUCKETS, JobRecord, jtted, jwtd, optimal_groups, optimal_nodes, size_bucket
from kant.placement import Placer
from kant.testing import ClusterBuilder, job


@pytest.mark.parametrize(
    ("gpus", "bucket"),
    [
        (0, "1"),
        (0.3, "1"),
        (1, "1"),
        (1.5, "2-8"),
        (2, "2-8"),
        (8, "2-8"),
        (9, "9-64"),
        (64, "9-64"),
        (65, "65-256"),
        (256, "65-256"),
        (257, "257-1024"),
        (1024, "257-1024"),
        (1025, ">1024"),
        (2048, ">1024"),
    ],
)
def test_every_size_falls_in_exactly_one_bucket(gpus: float, bucket: str) -> None:
    assert size_bucket(gpus) == bucket


def test_buckets_are_the_papers_six_size_classes_in_order() -> None:
    assert BUCKETS == ("1", "2-8", "9-64", "65-256", "257-1024", ">1024")
    with pytest.raises(ValidationError):
        size_bucket(-1)


def rec(i: int, gpus: float, sub: float, start: float | None, **kw: object) -> JobRecord:
    return JobRecord(job_id=f"j{i}", gpus=gpus, submitted_at=sub, started_at=start, **kw)  # type: ignore[arg-type]


def test_jwtd_groups_waits_by_bucket() -> None:
    records = [
        rec(0, 1, 0, 10),
        rec(1, 0.5, 0, 30),
        rec(2, 8, 5, 5),
        rec(3, 8, 0, 100),
        rec(4, 2, 0, 20),
        rec(5, 2048, 0, None),
    ]
    out = jwtd(records)
    assert list(out) == ["1", "2-8", ">1024"]
    one = out["1"]
    assert (one.count, one.mean_wait, one.p50, one.max) == (2, 20.0, 20.0, 30.0)
    assert one.p95 == pytest.approx(29.0)
    small = out["2-8"]
    assert (small.count, small.mean_wait, small.p50, small.max) == (3, 40.0, 20.0, 100.0)
    big = out[">1024"]
    assert big.count == 0 and big.unstarted == 1 and math.isnan(big.mean_wait)


def test_jwtd_counts_starved_jobs_with_a_censored_wait_when_given_now() -> None:
    out = jwtd([rec(0, 2048, 100, None), rec(1, 2048, 0, 50)], now=400)
    row = out[">1024"]
    assert (row.count, row.unstarted, row.mean_wait, row.max) == (2, 1, 175.0, 300.0)


def test_jwtd_as_of_now_leaves_out_later_arrivals_and_counts_later_starts_as_still_waiting() -> (
    None
):
    # jwtd(records, now=t) is the distribution as it stands at t: a job submitted after t
    # counted a wait of 0 s, and one that started after t its whole later wait
    out = jwtd([rec(0, 1, 0, 10), rec(1, 1, 50, 60), rec(2, 1, 20, 200)], now=40)
    row = out["1"]
    assert (row.count, row.unstarted, row.mean_wait, row.max) == (2, 1, 15.0, 20.0)
    assert jwtd([rec(0, 8, 50, None)], now=40) == {}


def test_optimal_node_and_group_counts() -> None:
    assert [optimal_nodes(g, 8) for g in (0.5, 1, 8, 9, 16, 2048)] == [1, 1, 1, 2, 2, 256]
    assert optimal_groups(2048, 8, 32) == 8
    assert optimal_groups(64, 8, 32) == 1
    with pytest.raises(ValidationError):
        optimal_nodes(8, 0)


def test_jtted_reports_mean_node_and_group_deviation_per_bucket() -> None:
    records = [
        rec(0, 16, 0, 1, nodes_used=2, groups_used=1),  # optimal: 2 nodes, 1 group
        rec(1, 16, 0, 1, nodes_used=4, groups_used=2),  # 2x nodes, 2x groups
        rec(2, 512, 0, 1, nodes_used=64, groups_used=3),  # 64 nodes / 32 per leaf = 2 groups
        rec(3, 4, 0, 1, nodes_used=2, groups_used=0),  # no group info
        rec(4, 4, 0, None),  # never started
        rec(5, 0, 0, 1, nodes_used=1),  # CPU-only: ignored
    ]
    out = jtted(records, nodes_per_leaf=32, gpus_per_node=8)
    assert list(out) == ["2-8", "9-64", "257-1024"]
    mid = out["9-64"]
    assert (mid.count, mid.node_ratio, mid.group_ratio) == (2, 1.5, 1.5)
    assert (mid.max_node_ratio, mid.max_group_ratio) == (2.0, 2.0)
    large = out["257-1024"]
    assert (large.node_ratio, large.group_ratio) == (1.0, 1.5)
    small = out["2-8"]
    assert small.node_ratio == 2.0 and small.group_count == 0 and math.isnan(small.group_ratio)


def test_jtted_accepts_per_record_cluster_shapes() -> None:
    records = [rec(0, 16, 0, 1, nodes_used=4, groups_used=2, tenant="pcie")]
    out = jtted(records, nodes_per_leaf=lambda r: 2, gpus_per_node=lambda r: 4)
    assert (out["9-64"].node_ratio, out["9-64"].group_ratio) == (1.0, 1.0)
    with pytest.raises(ValidationError):
        jtted(records, nodes_per_leaf=0)


def test_a_record_is_built_from_a_job_and_rejects_impossible_times() -> None:
    j = job("t", gpus=8, replicas=2, tenant="team", submitted_at=10.0)
    r = JobRecord.for_job(j, started_at=25.0, finished_at=40.0, nodes_used=2, state="finished")
    assert (r.gpus, r.gang, r.tenant, r.wait, r.runtime, r.bucket) == (
        16.0,
        True,
        "team",
        15.0,
        15.0,
        "9-64",
    )
    with pytest.raises(ValidationError, match="started_at"):
        JobRecord(job_id="x", submitted_at=10, started_at=5)
    with pytest.raises(ValidationError, match="finished_at"):
        JobRecord(job_id="x", finished_at=5)
    with pytest.raises(ValidationError, match="nodes_used"):
        JobRecord(job_id="x", nodes_used=-1)


# --------------------------------------------------------------------------- pods' shapes


@pytest.mark.parametrize(
    ("pods", "gpus", "nodes"),
    [
        (((10, 0, 800),), 8.0, 2),  # shares above 500 milli never pair: 10 GPUs
        (((9, 0, 600),), 5.4, 2),
        (((30, 0, 300),), 9.0, 2),  # three a GPU: 10 GPUs
        (((5, 3, 0),), 15.0, 3),  # two 3-GPU pods a node
        (((4, 2, 0),), 8.0, 1),  # as from the GPUs alone
        (((2, 6, 0), (1, 2, 0)), 14.0, 2),  # two roles: the largest bound
        (((8, 0, 600), (8, 0, 400)), 8.0, 1),  # shares of two roles pair: 8 GPUs
        (((3, 0, 400), (1, 0, 200)), 1.4, 1),
        ((), 15.0, 2),  # no shapes: the GPUs alone
    ],
)
def test_the_fewest_nodes_read_the_pods_shapes_when_the_record_has_them(
    pods: tuple[tuple[int, int, int], ...], gpus: float, nodes: int
) -> None:
    assert optimal_nodes(gpus, 8, pods) == nodes


def test_a_service_capped_at_one_replica_a_node_on_as_many_nodes_is_optimal_for_jtted() -> None:
    # (four 1-GPU replicas fit one node's GPUs, but max_per_node=1 allows no fewer than 4
    # nodes: the optimum read 1 and the only legal placement counted as 4x it)
    svc = job("svc", gpus=1, replicas=4, gang=False, kind="inference", max_per_node=1)
    cluster = ClusterBuilder().leaf("lf0", nodes=4).build()
    placed = {b.node for b in Placer("ebinpack").place(svc, cluster.snapshot()).bindings}
    rec = JobRecord.for_job(svc, started_at=0.0, nodes_used=len(placed), groups_used=1)
    assert len(placed) == 4 and rec.pods == ((4, 1, 0, 1),)
    row = jtted([rec], nodes_per_leaf=4)[rec.bucket]
    assert row.node_ratio == 1.0 and row.max_node_ratio == 1.0


@pytest.mark.parametrize(
    ("pods", "nodes"),
    [
        (((6, 1, 0, 4),), 2),  # 6 pods, at most 4 a node
        (((6, 1, 0, 8),), 1),  # a cap above what a node holds changes nothing
        (((3, 0, 250, 1), (4, 1, 0)), 3),  # the capped role of two sets the bound
    ],
)
def test_a_roles_cap_on_pods_a_node_raises_the_fewest_nodes(
    pods: tuple[tuple[int, ...], ...], nodes: int
) -> None:
    assert optimal_nodes(sum(p[0] * (p[1] or p[2] / 1000) for p in pods), 8, pods) == nodes


@pytest.mark.parametrize("bad", [((4, 1, 0, 0),), ((4, 1, 0, 1, 1),), ((4, 1),)])
def test_a_record_refuses_pod_shapes_that_are_not_three_or_four_counts(bad: object) -> None:
    with pytest.raises(ValidationError, match="pods"):
        JobRecord(job_id="j", pods=bad)  # type: ignore[arg-type]


def test_a_gang_of_large_shares_on_as_few_nodes_as_it_can_is_optimal_for_jtted() -> None:
    gang = job("g", replicas=10, gpu_milli=800)
    rec = JobRecord.for_job(gang, started_at=1.0, nodes_used=2, groups_used=1)
    assert rec.pods == ((10, 0, 800),)
    row = jtted([rec], nodes_per_leaf=32)[rec.bucket]
    assert row.node_ratio == 1.0 and row.group_ratio == 1.0  # (it was 2.0 from 8 GPUs alone)


@pytest.mark.parametrize(
    "pods", [((1, 2),), ((1, -1, 0),), ((1, 2, 500),), ((1, 0, 1000),), ("abc",), 3]
)
def test_a_record_refuses_pod_shapes_that_cannot_be(pods: object) -> None:
    with pytest.raises(ValidationError):
        JobRecord(job_id="j", pods=pods)  # type: ignore[arg-type]


@settings(max_examples=120, deadline=None)
@given(
    n=st.integers(1, 12),
    gpus=st.sampled_from((0, 1, 2, 3, 4, 5, 8)),
    milli=st.sampled_from((100, 250, 300, 500, 501, 800)),
)
def test_no_placement_ever_uses_fewer_nodes_than_the_optimal_and_binpack_reaches_it(
    n: int, gpus: int, milli: int
) -> None:
    from kant.placement import Placer
    from kant.state import ClusterState
    from kant.testing import ClusterBuilder

    j = job("j", replicas=n, gpus=gpus, gpu_milli=0 if gpus else milli, gang=True)
    state = ClusterState(ClusterBuilder().leaf("lf0", nodes=16).specs())
    res = Placer("binpack").place(j, state.snapshot())
    assert res.ok
    used = len({b.node for b in res.bindings})
    opt = optimal_nodes(j.gpu_units, 8, JobRecord.for_job(j).pods)
    assert used >= opt
    if gpus:
        assert used == opt  # whole GPUs on an empty cluster: binpack fills node after node


@pytest.mark.parametrize(
    "bad",
    [math.inf, math.nan, -math.inf, 10**400, "10", True],
    ids=["inf", "nan", "-inf", "10**400", "str", "bool"],
)
def test_jwtd_and_the_fewest_nodes_refuse_a_value_that_is_no_finite_number(bad: object) -> None:
    # (jwtd(now=nan) counted the unstarted job with a wait of 0; optimal_nodes(nan) raised
    # a builtin ValueError)
    recs = [JobRecord(job_id="a", gpus=1, submitted_at=10.0)]
    with pytest.raises(ValidationError) as exc:
        jwtd(recs, now=bad)  # type: ignore[arg-type]
    assert exc.value.field == "now"
    with pytest.raises(ValidationError) as exc:
        optimal_nodes(bad, 8)  # type: ignore[arg-type]
    assert exc.value.field == "gpus"
    with pytest.raises(ValidationError) as exc:
        optimal_groups(16, bad, 4)  # type: ignore[arg-type]
    assert exc.value.field == "gpus_per_node"


@pytest.mark.parametrize(
    "call",
    [
        lambda: jwtd([1]),  # type: ignore[list-item]
        lambda: jwtd(None),  # type: ignore[arg-type]
        lambda: jtted(["a record"], 2),  # type: ignore[list-item]
        lambda: jtted(5, 2),  # type: ignore[arg-type]
    ],
)
def test_the_job_distributions_name_records_that_are_not_job_records(
    call: Callable[[], object],
) -> None:
    with pytest.raises(ValidationError, match="field 'records' ="):
        call()


@pytest.mark.parametrize(
    ("field", "value"),
    [("gang", "no"), ("gang", 0), ("tenant", None), ("tenant", ""), ("state", 3)],
)
def test_a_record_refuses_a_gang_tenant_or_state_of_the_wrong_kind(
    field: str, value: object
) -> None:
    # (gang="no" was a gang: truthy; a tenant of None grouped apart from every tenant)
    with pytest.raises(ValidationError, match=f"field '{field}' ="):
        JobRecord(job_id="x", **{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "pods",
    [[(1,)], "ab", b"ab", 3, [(2, -8, 0)], [(2, 8, 0, 0)], [(2, 1, 500)], [(2, 8.0, 0)]],
    ids=["short", "str", "bytes", "int", "negative", "cap-0", "whole-and-share", "float"],
)
def test_the_fewest_nodes_refuse_pod_shapes_a_record_refuses_with_the_records_message(
    pods: object,
) -> None:
    # ([(1,)] and "ab" raised a builtin ValueError; a negative count and a cap of 0 pods a
    # node were taken)
    with pytest.raises(ValidationError) as rec_exc:
        JobRecord(job_id="j", pods=pods)  # type: ignore[arg-type]
    for call in (lambda: optimal_nodes(16, 8, pods), lambda: optimal_groups(16, 8, 4, pods)):
        with pytest.raises(ValidationError) as exc:
            call()  # type: ignore[arg-type]
        assert exc.value.field == "pods" and str(exc.value) == str(rec_exc.value)


def test_the_fewest_nodes_take_pod_shapes_as_lists_as_a_record_does() -> None:
    assert optimal_nodes(15, 8, [[5, 3, 0]]) == 3 == optimal_nodes(15, 8, ((5, 3, 0),))


@pytest.mark.parametrize(
    "gpus",
    [np.int64(3), np.int32(3), np.uint8(3), np.float64(3), np.float32(3)],
    ids=["int64", "int32", "uint8", "float64", "float32"],
)
def test_a_numpy_size_falls_in_the_bucket_of_the_same_python_number(gpus: object) -> None:
    # (np.int64(3) was a ValidationError while np.float64(3) read "2-8")
    assert size_bucket(gpus) == size_bucket(3) == "2-8"  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [True, np.bool_(True), "3", None, math.nan, -1, np.int64(-1)])
def test_a_size_that_is_no_number_or_negative_is_refused_naming_gpus(bad: object) -> None:
    with pytest.raises(ValidationError) as exc:
        size_bucket(bad)  # type: ignore[arg-type]
    assert exc.value.field == "gpus"
